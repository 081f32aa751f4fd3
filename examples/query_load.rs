//! A load generator for Prometheus-compatible HTTP APIs: N concurrent clients send the
//! provisioned vLLM dashboard's range queries (`deploy/grafana/dashboards/vllm.json`, variables
//! substituted as Grafana does for "All" over the last hour: step 15 s, `$__rate_interval` =
//! `1m0s`) as POST form `query_range` requests, like Grafana's backend, for a fixed time or a
//! fixed number of requests, and reports throughput, latency percentiles and errors.
//!
//! ```text
//! cargo run --release --example query_load -- --url http://127.0.0.1:9090 --clients 200 --duration 60
//! ```
//!
//! An error is anything but HTTP 200 with `"status":"success"` (timeouts and refused
//! connections included). The last line of output is one JSON object with every figure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "Concurrent dashboard-like query_range load against a Prometheus API")]
struct Args {
    /// Base URL of the server.
    #[arg(long, default_value = "http://127.0.0.1:9090")]
    url: String,
    /// Concurrent clients (each with its own connection).
    #[arg(long, default_value_t = 200)]
    clients: usize,
    /// Seconds to run (ignored when --requests is given).
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Stop after this many requests in all.
    #[arg(long)]
    requests: Option<u64>,
    /// The dashboard whose queries make the mix.
    #[arg(long, default_value = "deploy/grafana/dashboards/vllm.json")]
    dashboard: String,
    /// Range of each query, seconds (Grafana's "last 1h").
    #[arg(long, default_value_t = 3600)]
    range: i64,
    /// Step, seconds.
    #[arg(long, default_value_t = 15)]
    step: i64,
    /// `$__rate_interval` text.
    #[arg(long, default_value = "1m0s")]
    rate_interval: String,
    /// Per-request timeout, seconds.
    #[arg(long, default_value_t = 120.0)]
    timeout: f64,
    /// A label for the report (e.g. inferdb, prometheus).
    #[arg(long, default_value = "server")]
    label: String,
}

/// The dashboard's queries with Grafana's substitutions for "All".
fn dashboard_queries(path: &str, step: i64, rate_interval: &str) -> anyhow::Result<Vec<String>> {
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    fn walk(ps: &serde_json::Value, out: &mut Vec<String>) {
        for p in ps.as_array().into_iter().flatten() {
            walk(&p["panels"], out);
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(e.to_string());
                }
            }
        }
    }
    let mut raw = Vec::new();
    walk(&d["panels"], &mut raw);
    let interval = if step % 60 == 0 {
        format!("{}m", step / 60)
    } else {
        format!("{step}s")
    };
    let out: Vec<String> = raw
        .iter()
        .map(|e| {
            e.replace("$__rate_interval", rate_interval)
                .replace("$__interval", &interval)
                .replace("$model_name", ".*")
                .replace("$gpu_instance", ".*")
                .replace("$instance", ".*")
        })
        .collect();
    anyhow::ensure!(!out.is_empty(), "no queries in {path}");
    Ok(out)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let queries = Arc::new(dashboard_queries(
        &args.dashboard,
        args.step,
        &args.rate_interval,
    )?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.duration);
    let sent = Arc::new(AtomicU64::new(0));
    let lat: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(AtomicU64::new(0));
    let first_errors: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let cpu0 = cpu_seconds();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..args.clients {
            // one connection per client, as many Grafana backend connections would be
            let http = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .timeout(Duration::from_secs_f64(args.timeout))
                .build()?;
            let (queries, sent, lat, errors, first_errors) = (
                queries.clone(),
                sent.clone(),
                lat.clone(),
                errors.clone(),
                first_errors.clone(),
            );
            let url = format!("{}/api/v1/query_range", args.url.trim_end_matches('/'));
            let (range, step, limit) = (args.range, args.step, args.requests);
            tasks.push(tokio::spawn(async move {
                let mut k = c;
                loop {
                    let n = sent.fetch_add(1, Ordering::Relaxed);
                    match limit {
                        Some(l) if n >= l => break,
                        None if Instant::now() >= deadline => break,
                        _ => {}
                    }
                    let q = &queries[k % queries.len()];
                    k += 1;
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_secs() as i64)
                        .unwrap_or(0);
                    let end = now / step * step;
                    let start = (now - range) / step * step;
                    let form = [
                        ("end", end.to_string()),
                        ("query", q.clone()),
                        ("start", start.to_string()),
                        ("step", step.to_string()),
                    ];
                    let t = Instant::now();
                    let r = http.post(&url).form(&form).send().await;
                    let outcome = match r {
                        Ok(r) => {
                            let st = r.status().as_u16();
                            match r.text().await {
                                Ok(b) if st == 200 && b.contains("\"status\":\"success\"") => {
                                    Ok(())
                                }
                                Ok(b) => Err(format!("{st}: {}", &b[..b.len().min(200)])),
                                Err(e) => Err(format!("{st}: reading body: {e}")),
                            }
                        }
                        Err(e) => Err(format!("{e}")),
                    };
                    let secs = t.elapsed().as_secs_f64();
                    match outcome {
                        Ok(()) => {
                            if let Ok(mut l) = lat.lock() {
                                l.push(secs);
                            }
                        }
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            if let Ok(mut f) = first_errors.lock() {
                                if f.len() < 5 {
                                    f.push(e);
                                }
                            }
                        }
                    }
                }
            }));
        }
        for t in tasks {
            t.await?;
        }
        anyhow::Ok(())
    })?;
    let wall = started.elapsed().as_secs_f64();
    let mut l = lat.lock().map(|l| l.clone()).unwrap_or_default();
    l.sort_by(f64::total_cmp);
    let errors = errors.load(Ordering::Relaxed);
    let ok = l.len() as u64;
    let p = |q| percentile(&l, q) * 1000.0;
    println!(
        "{}: {} clients, {} queries in the mix, {:.1} s: {ok} ok, {errors} errors, {:.1} req/s; latency ms p50 {:.1} p90 {:.1} p99 {:.1} max {:.1}; load generator CPU {:.1} s",
        args.label,
        args.clients,
        queries.len(),
        wall,
        ok as f64 / wall,
        p(0.5),
        p(0.9),
        p(0.99),
        p(1.0),
        cpu_seconds() - cpu0
    );
    for e in first_errors.lock().map(|f| f.clone()).unwrap_or_default() {
        println!("  error: {e}");
    }
    println!(
        "{}",
        serde_json::json!({
            "label": args.label, "clients": args.clients, "wall_s": wall, "ok": ok,
            "errors": errors, "req_per_s": ok as f64 / wall, "p50_ms": p(0.5),
            "p90_ms": p(0.9), "p99_ms": p(0.99), "max_ms": p(1.0),
        })
    );
    if errors > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// CPU seconds (user + system) of this process, from /proc; 0 where unavailable.
fn cpu_seconds() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // fields after the ")" of the command name: state is field 3, utime 14, stime 15
    let Some(rest) = s.rsplit(')').next() else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = 100.0; // USER_HZ on Linux
    let u: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let st: f64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    (u + st) / tick
}
