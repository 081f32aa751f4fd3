//! A remote-write load generator: vLLM-like series (per instance: the request gauges and
//! counters, and six latency/token histograms with their buckets, `_sum` and `_count`), sent
//! as remote-write 1.0 requests (protobuf + snappy) by N concurrent senders, each owning a
//! disjoint share of the series as Prometheus' shards do; a batch holds one sample of each of
//! `--batch` series, every round advancing the timestamp by the scrape interval.
//!
//! Every request body is built and compressed before the clock starts, so the measured time
//! is the receiver's (and the HTTP round trips'), not the generator's encoding. With
//! `--server-pid` it also reports the CPU seconds the receiving process used meanwhile
//! (Linux `/proc/<pid>/stat`).
//!
//! ```text
//! cargo run --release --example remote_write_load -- --url http://127.0.0.1:9090/api/v1/write \
//!     --instances 200 --samples 6000000 --senders 4 --batch 2000 [--server-pid PID]
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone)]
struct Args {
    url: String,
    instances: usize,
    samples: usize,
    senders: usize,
    batch: usize,
    interval_ms: i64,
    server_pid: Option<u32>,
}

fn parse_args() -> Args {
    let mut a = Args {
        url: "http://127.0.0.1:9090/api/v1/write".into(),
        instances: 200,
        samples: 6_000_000,
        senders: 4,
        batch: 2000,
        interval_ms: 15_000,
        server_pid: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = argv.get(i + 1).cloned().unwrap_or_default();
        let n = || -> usize {
            v.parse()
                .unwrap_or_else(|_| panic!("{}: not a number: {v:?}", argv[i]))
        };
        match argv[i].as_str() {
            "--url" => a.url = v.clone(),
            "--instances" => a.instances = n().max(1),
            "--samples" => a.samples = n().max(1),
            "--senders" => a.senders = n().max(1),
            "--batch" => a.batch = n().max(1),
            "--interval-ms" => a.interval_ms = n().max(1) as i64,
            "--server-pid" => a.server_pid = Some(n() as u32),
            "-h" | "--help" => {
                println!("remote_write_load --url URL [--instances N] [--samples N] [--senders N] [--batch N] [--interval-ms MS] [--server-pid PID]");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

// --- a minimal protobuf writer for WriteRequest (field numbers of prompb/types.proto) ---

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn len_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    varint(out, field << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The encoded `Label` fields (field 1 of `TimeSeries`) of one series, sorted by name.
fn encode_labels(labels: &[(&str, String)]) -> Vec<u8> {
    let mut sorted: Vec<&(&str, String)> = labels.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::new();
    for (n, v) in sorted {
        let mut l = Vec::new();
        len_field(&mut l, 1, n.as_bytes());
        len_field(&mut l, 2, v.as_bytes());
        len_field(&mut out, 1, &l);
    }
    out
}

struct SeriesDef {
    labels: Vec<u8>,
    kind: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    Gauge(f64),
    Counter(f64),
}

/// vLLM-like series of `instances` servers.
fn build_series(instances: usize) -> Vec<SeriesDef> {
    let models = [
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct",
    ];
    let gauges = [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_swapped",
    ];
    let counters = [
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
    ];
    let hists: [(&str, &[&str]); 6] = [
        (
            "vllm:time_to_first_token_seconds",
            &[
                "0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5",
                "0.75", "1", "2.5", "5", "7.5", "10", "+Inf",
            ],
        ),
        (
            "vllm:inter_token_latency_seconds",
            &[
                "0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5",
                "0.75", "1", "2.5", "+Inf",
            ],
        ),
        (
            "vllm:e2e_request_latency_seconds",
            &[
                "0.3", "0.5", "0.8", "1", "1.5", "2", "2.5", "5", "10", "15", "20", "30", "40",
                "50", "60", "+Inf",
            ],
        ),
        (
            "vllm:request_prompt_tokens",
            &[
                "1", "2", "5", "10", "20", "50", "100", "200", "500", "1000", "2000", "5000",
                "+Inf",
            ],
        ),
        (
            "vllm:request_generation_tokens",
            &[
                "1", "2", "5", "10", "20", "50", "100", "200", "500", "1000", "2000", "+Inf",
            ],
        ),
        (
            "vllm:request_queue_time_seconds",
            &[
                "0.3", "0.5", "0.8", "1", "1.5", "2", "2.5", "5", "10", "20", "30", "60", "+Inf",
            ],
        ),
    ];
    let mut out = Vec::new();
    for i in 0..instances {
        let inst = format!("10.{}.{}.{}:8000", i / 65536, (i / 256) % 256, i % 256);
        let model = models[i % models.len()];
        let base = |name: &str| -> Vec<(&'static str, String)> {
            vec![
                ("__name__", name.to_string()),
                ("instance", inst.clone()),
                ("job", "vllm".to_string()),
                ("model_name", model.to_string()),
                ("engine", "0".to_string()),
            ]
        };
        for (k, g) in gauges.iter().enumerate() {
            out.push(SeriesDef {
                labels: encode_labels(&base(g)),
                kind: Kind::Gauge((k + 1) as f64),
            });
        }
        for (k, c) in counters.iter().enumerate() {
            out.push(SeriesDef {
                labels: encode_labels(&base(c)),
                kind: Kind::Counter(((k + 1) * 37) as f64),
            });
        }
        for (h, les) in hists {
            for (k, le) in les.iter().enumerate() {
                let mut l = base(&format!("{h}_bucket"));
                l.push(("le", le.to_string()));
                out.push(SeriesDef {
                    labels: encode_labels(&l),
                    kind: Kind::Counter((k + 1) as f64),
                });
            }
            out.push(SeriesDef {
                labels: encode_labels(&base(&format!("{h}_count"))),
                kind: Kind::Counter(les.len() as f64),
            });
            out.push(SeriesDef {
                labels: encode_labels(&base(&format!("{h}_sum"))),
                kind: Kind::Counter(1.7),
            });
        }
    }
    out
}

/// One `TimeSeries` with one sample.
fn push_series(out: &mut Vec<u8>, scratch: &mut Vec<u8>, s: &SeriesDef, t: i64, round: u64) {
    let v = match s.kind {
        Kind::Gauge(g) => ((round * 7919 + g as u64 * 13) % 97) as f64 * g,
        Kind::Counter(c) => c * round as f64 + (round % 5) as f64,
    };
    scratch.clear();
    scratch.extend_from_slice(&s.labels);
    let mut sample = Vec::with_capacity(20);
    sample.push(0x09);
    sample.extend_from_slice(&v.to_le_bytes());
    sample.push(0x10);
    varint(&mut sample, t as u64);
    len_field(scratch, 2, &sample);
    len_field(out, 1, scratch);
}

fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // fields after the parenthesised command name; utime and stime are fields 14 and 15
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn main() {
    let a = parse_args();
    let series = build_series(a.instances);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let rounds = a.samples.div_ceil(series.len()) as u64;
    // start far enough back that the last round is not in the future
    let t0 = now - (rounds as i64 + 1) * a.interval_ms;
    eprintln!(
        "{} series ({} instances), {} rounds of {} ms, {} senders, batches of {} samples; encoding...",
        series.len(),
        a.instances,
        rounds,
        a.interval_ms,
        a.senders,
        a.batch
    );

    // each sender owns series i with i % senders == k; its batches in time order
    let mut per_sender: Vec<Vec<Vec<u8>>> = vec![Vec::new(); a.senders];
    let mut raw_bytes = 0usize;
    let mut total = 0usize;
    let mut enc = snap::raw::Encoder::new();
    for (k, bodies) in per_sender.iter_mut().enumerate() {
        let mine: Vec<&SeriesDef> = series.iter().skip(k).step_by(a.senders).collect();
        let mut buf = Vec::new();
        let mut scratch = Vec::new();
        let mut n = 0;
        for r in 0..rounds {
            let t = t0 + r as i64 * a.interval_ms;
            for s in &mine {
                push_series(&mut buf, &mut scratch, s, t, r);
                n += 1;
                if n == a.batch {
                    raw_bytes += buf.len();
                    bodies.push(enc.compress_vec(&buf).expect("snappy"));
                    total += n;
                    buf.clear();
                    n = 0;
                }
            }
        }
        if n > 0 {
            raw_bytes += buf.len();
            bodies.push(enc.compress_vec(&buf).expect("snappy"));
            total += n;
        }
    }
    let wire_bytes: usize = per_sender.iter().flatten().map(Vec::len).sum();
    eprintln!(
        "{total} samples in {} requests: {:.1} MB protobuf, {:.1} MB snappy",
        per_sender.iter().map(Vec::len).sum::<usize>(),
        raw_bytes as f64 / 1e6,
        wire_bytes as f64 / 1e6
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(a.senders)
        .build()
        .expect("client");
    let errors = Arc::new(AtomicU64::new(0));
    let cpu0 = a.server_pid.and_then(cpu_seconds);
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for bodies in per_sender {
            let client = client.clone();
            let url = a.url.clone();
            let errors = errors.clone();
            tasks.push(tokio::spawn(async move {
                for b in bodies {
                    let r = client
                        .post(&url)
                        .header("Content-Type", "application/x-protobuf")
                        .header("Content-Encoding", "snappy")
                        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
                        .body(b)
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status().is_success() => {}
                        Ok(r) => {
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                let st = r.status();
                                eprintln!("{st}: {}", r.text().await.unwrap_or_default());
                            }
                        }
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("request failed: {e}");
                            }
                        }
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let cpu = match (cpu0, a.server_pid.and_then(cpu_seconds)) {
        (Some(x), Some(y)) => format!(" server_cpu_s={:.2}", y - x),
        _ => String::new(),
    };
    println!(
        "samples={total} seconds={secs:.3} samples_per_s={:.0} errors={}{cpu}",
        total as f64 / secs,
        errors.load(Ordering::Relaxed)
    );
}
