//! Remote write into inferdb and remote read out of it, against a real Prometheus 2.42:
//!
//! - Prometheus scrapes two simulated vLLM servers (`inferdb simulate`) every second and
//!   remote-writes into `inferdb serve --web.enable-remote-write-receiver`; the same instant and
//!   range queries (rate, sum by, histogram_quantile, Prometheus' own `up`/`scrape_*` series)
//!   give the same labels and values (1e-9 relative) on both.
//! - The receiver's refusals: a malformed body or an invalid label set is a 400 with the reason
//!   and stores nothing; an out-of-order sample rolls its request back (400) and is counted;
//!   with the receiver off inferdb answers exactly what Prometheus 2.42 answers.
//! - A Prometheus with an empty TSDB and `remote_read` pointed at inferdb answers the same
//!   queries as inferdb itself.
//!
//! Evaluation times sit between scrape timestamps (at least 100 ms away from every scrape's
//! millisecond phase) and every rate window starts after the first sample, so Prometheus 2's
//! left-closed windows and inferdb's Prometheus 3 left-open ones select the same samples.
//!
//! Without `prometheus` on PATH the Prometheus parts are skipped with a message, unless
//! `CI=true`, where they fail.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::diff::{first_difference, result_map};
use common::{free_port, now_ms, secs, Client, Proc, BIN};
use inferdb::remote::codec;
use inferdb::remote::proto::{Label, Sample, TimeSeries, WriteRequest};
use serde_json::Value;

/// Whether `prometheus` runs; see `common::require_tools`.
fn prometheus_present() -> bool {
    common::require_tools(&["prometheus"], "the remote-write receive test")
}

/// POSTs a remote-write body as Prometheus does: (status, body, headers).
fn remote_write(c: &Client, url: &str, body: Vec<u8>) -> (u16, String, Vec<(String, String)>) {
    c.send_with_headers(
        c.http
            .post(url)
            .header("Content-Type", "application/x-protobuf")
            .header("Content-Encoding", "snappy")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .body(body),
    )
}

/// An instant query, or a range query when `form` has a step.
fn query(c: &Client, base: &str, form: &[(&str, String)]) -> Value {
    let path = if form.iter().any(|(k, _)| *k == "step") {
        "/api/v1/query_range"
    } else {
        "/api/v1/query"
    };
    c.query(base, path, form)
}

fn start_inferdb(dir: &Path, receiver: bool, client: &Client) -> (Proc, String) {
    std::fs::create_dir_all(dir).unwrap();
    let extra: &[&str] = if receiver {
        &["--web.enable-remote-write-receiver"]
    } else {
        &[]
    };
    common::start_inferdb_with(dir, &dir.join("inferdb"), extra, client)
}

fn start_prometheus(dir: &Path, yml: &str, client: &Client) -> (Proc, String) {
    common::start_prometheus_with(dir, yml, &dir.join("prom"), &[], client)
}

// ---------------------------------------------------------------------------------------------
// comparing answers

/// Runs every query instant at `t` and as a range `[t - span, t]` by `step` on both servers;
/// the differences found (empty: same answers), and how many series the answers held.
fn compare_all(
    c: &Client,
    a: &str,
    b: &str,
    queries: &[&str],
    t_ms: i64,
    span_ms: i64,
    step_ms: i64,
) -> (Vec<String>, usize) {
    let mut diffs = Vec::new();
    let mut series = 0;
    for q in queries {
        let forms = [
            vec![("query", q.to_string()), ("time", secs(t_ms))],
            vec![
                ("query", q.to_string()),
                ("start", secs(t_ms - span_ms)),
                ("end", secs(t_ms)),
                ("step", secs(step_ms)),
            ],
        ];
        for f in &forms {
            let (ra, rb) = (query(c, a, f), query(c, b, f));
            series += result_map(&ra).1.len();
            if let Some(d) = first_difference(q, &ra, &rb) {
                diffs.push(d);
            }
        }
    }
    (diffs, series)
}

/// An evaluation time near `around` whose millisecond phase (mod `interval`) is at least
/// `interval / 10` away from every phase in `phases`.
fn off_grid(around: i64, interval: i64, phases: &[i64]) -> i64 {
    let dist = |p: i64| {
        phases
            .iter()
            .map(|q| {
                let d = (p - q).rem_euclid(interval);
                d.min(interval - d)
            })
            .min()
            .unwrap_or(interval)
    };
    let best = (0..20)
        .map(|i| i * interval / 20)
        .max_by_key(|p| dist(*p))
        .unwrap_or(0);
    assert!(dist(best) >= interval / 10, "no off-grid phase: {phases:?}");
    around - around.rem_euclid(interval) + best
}

/// Millisecond timestamps of every sample of `series` in `[t - range, t]` on a server.
fn timestamps(c: &Client, base: &str, series: &str, range: &str, t: i64) -> Vec<i64> {
    let v = query(
        c,
        base,
        &[("query", format!("{series}[{range}]")), ("time", secs(t))],
    );
    let mut ts = Vec::new();
    for s in v["data"]["result"].as_array().into_iter().flatten() {
        for p in s["values"].as_array().into_iter().flatten() {
            ts.push((p[0].as_f64().unwrap() * 1000.0).round() as i64);
        }
    }
    ts.sort();
    ts
}

const SCRAPED_QUERIES: &[&str] = &[
    "up",
    "scrape_samples_scraped",
    "scrape_series_added",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "rate(vllm:generation_tokens_total[3s])",
    "sum by (model_name) (rate(vllm:prompt_tokens_total[3s]))",
    "sum by (job) (increase(vllm:request_success_total[3s]))",
    "histogram_quantile(0.9, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[3s])))",
    "histogram_quantile(0.5, rate(vllm:time_to_first_token_seconds_bucket[3s]))",
    "count by (__name__) ({job=\"vllm\"})",
];

#[test]
fn prometheus_remote_writes_into_inferdb() {
    if !prometheus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = Client::new();
    let (_idb, idb) = start_inferdb(dir.path(), true, &c);
    let mut sims = Vec::new();
    let mut targets = Vec::new();
    for seed in [1, 2] {
        let port = free_port();
        let mut p = Proc::spawn(
            "inferdb simulate",
            Command::new(BIN).args([
                "simulate",
                "--port",
                &port.to_string(),
                "--seed",
                &seed.to_string(),
            ]),
            dir.path().join(format!("sim{seed}.log")),
        );
        p.wait_for(&format!("http://127.0.0.1:{port}/metrics"), &c);
        sims.push(p);
        targets.push(format!("'127.0.0.1:{port}'"));
    }
    let yml = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
         scrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [{}]\n\
         remote_write:\n  - url: {idb}/api/v1/write\n    queue_config:\n      batch_send_deadline: 200ms\n      max_samples_per_send: 500\n    metadata_config:\n      send_interval: 1s\n",
        targets.join(", ")
    );
    let (prom_proc, prom) = start_prometheus(dir.path(), &yml, &c);

    // ~12 scrapes of history
    let start = Instant::now();
    let first = loop {
        let ts = timestamps(&c, &prom, "up", "1m", now_ms());
        if ts.len() >= 2 * 13 {
            break ts[0];
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "Prometheus scraped too little: {ts:?}\n{}",
            prom_proc.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let ts = timestamps(&c, &prom, "up", "1m", now_ms());
    let phases: Vec<i64> = ts.iter().map(|t| t.rem_euclid(1000)).collect();
    // rate windows of 3 s over a 4 s range: the earliest window starts 1.1 s after the first
    // sample at least
    let t = off_grid(first + 10_000, 1000, &phases);
    assert!(t < *ts.last().unwrap(), "t {t} beyond {ts:?}");

    // remote write lags a little behind Prometheus' own TSDB: retry until the answers agree
    let deadline = Instant::now() + Duration::from_secs(15);
    let (diffs, series) = loop {
        let (d, n) = compare_all(&c, &prom, &idb, SCRAPED_QUERIES, t, 4_000, 1_000);
        if d.is_empty() || Instant::now() > deadline {
            break (d, n);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        diffs.is_empty(),
        "{} answers differ:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
    assert!(series > 50, "only {series} series compared");
    // metadata went along
    let (st, md) = c.get(&format!(
        "{idb}/api/v1/metadata?metric=vllm:num_requests_running"
    ));
    assert_eq!(st, 200);
    assert!(md.contains("\"type\":\"gauge\""), "{md}");
    let (_, m) = c.get(&format!("{idb}/metrics"));
    assert!(
        m.lines()
            .any(|l| l.starts_with("inferdb_remote_write_samples_total ") && !l.ends_with(" 0")),
        "{m}"
    );
}

fn series(name: &str, labels: &[(&str, &str)], samples: &[(i64, f64)]) -> TimeSeries {
    let mut ls = vec![Label {
        name: "__name__".into(),
        value: name.into(),
    }];
    ls.extend(labels.iter().map(|(n, v)| Label {
        name: n.to_string(),
        value: v.to_string(),
    }));
    ls.sort_by(|a, b| a.name.cmp(&b.name));
    TimeSeries {
        labels: ls,
        samples: samples
            .iter()
            .map(|(t, v)| Sample {
                value: *v,
                timestamp: *t,
            })
            .collect(),
        exemplars: vec![],
    }
}

fn write_body(ts: Vec<TimeSeries>) -> Vec<u8> {
    codec::encode(&WriteRequest {
        timeseries: ts,
        metadata: vec![],
    })
}

#[test]
fn receiver_refusals_and_off_switch() {
    let dir = tempfile::tempdir().unwrap();
    let c = Client::new();
    let (_on, on) = start_inferdb(&dir.path().join("on"), true, &c);
    let url = format!("{on}/api/v1/write");
    let t0 = now_ms() - 60_000;
    let count = |c: &Client| -> usize {
        let v = query(
            c,
            &on,
            &[
                (
                    "query",
                    "count_over_time({__name__=~\"rw_.*\"}[10m])".into(),
                ),
                ("time", format!("{}", now_ms() / 1000)),
            ],
        );
        result_map(&v).1.values().map(|p| p[0].1 as usize).sum()
    };

    // malformed bodies: 400 with the reason
    let (st, body, _) = remote_write(&c, &url, b"definitely not snappy".to_vec());
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("snappy"), "{body}");
    let cut = write_body(vec![series("rw_good", &[("job", "x")], &[(t0, 1.0)])]);
    let (st, body, _) = remote_write(&c, &url, cut[..cut.len() / 2].to_vec());
    assert_eq!(st, 400, "{body}");
    let garbage = snap::raw::Encoder::new()
        .compress_vec(&[0x0a, 0x09, 0x0a, 0x07])
        .unwrap();
    let (st, body, _) = remote_write(&c, &url, garbage);
    assert_eq!(st, 400);
    assert!(body.contains("protobuf"), "{body}");
    // a good series beside an invalid one: nothing stored
    for bad in [
        series("rw bad name", &[], &[(t0, 1.0)]),
        series("rw_b", &[("0job", "x")], &[(t0, 1.0)]),
        TimeSeries {
            labels: vec![
                Label {
                    name: "job".into(),
                    value: "x".into(),
                },
                Label {
                    name: "__name__".into(),
                    value: "rw_unsorted".into(),
                },
            ],
            samples: vec![Sample {
                value: 1.0,
                timestamp: t0,
            }],
            exemplars: vec![],
        },
    ] {
        let (st, body, _) = remote_write(
            &c,
            &url,
            write_body(vec![series("rw_good", &[("job", "x")], &[(t0, 1.0)]), bad]),
        );
        assert_eq!(st, 400, "{body}");
        assert!(body.starts_with("invalid labels"), "{body}");
    }
    assert_eq!(count(&c), 0);

    // a good request: 204, stored
    let (st, body, _) = remote_write(
        &c,
        &url,
        write_body(vec![
            series("rw_good", &[("job", "x")], &[(t0, 1.0), (t0 + 1000, 2.0)]),
            series("rw_other", &[("job", "y")], &[(t0, 5.0)]),
        ]),
    );
    assert_eq!((st, body.as_str()), (204, ""));
    assert_eq!(count(&c), 3);
    // an out-of-order sample: 400 as Prometheus answers, the whole request rolled back
    let (st, body, _) = remote_write(
        &c,
        &url,
        write_body(vec![
            series("rw_other", &[("job", "y")], &[(t0 + 1000, 6.0)]),
            series("rw_good", &[("job", "x")], &[(t0 + 500, 1.5)]),
        ]),
    );
    assert_eq!((st, body.as_str()), (400, "out of order sample\n"));
    assert_eq!(count(&c), 3);
    // a resend of stored samples is fine
    let (st, _, _) = remote_write(
        &c,
        &url,
        write_body(vec![series(
            "rw_good",
            &[("job", "x")],
            &[(t0 + 1000, 2.0)],
        )]),
    );
    assert_eq!(st, 204);
    let (_, m) = c.get(&format!("{on}/metrics"));
    assert!(
        m.contains("inferdb_remote_write_rejected_samples_total{reason=\"out_of_order\"} 1"),
        "{m}"
    );

    // receiver off: what Prometheus 2.42 answers
    let (_off, off) = start_inferdb(&dir.path().join("off"), false, &c);
    let body = write_body(vec![series("rw_good", &[("job", "x")], &[(t0, 1.0)])]);
    let ours = remote_write(&c, &format!("{off}/api/v1/write"), body.clone());
    assert_eq!(ours.0, 404);
    assert_eq!(
        ours.1,
        "remote write receiver needs to be enabled with --enable-feature=remote-write-receiver\n"
    );
    if prometheus_present() {
        let pdir = dir.path().join("prom");
        std::fs::create_dir_all(&pdir).unwrap();
        let (_p, prom) = start_prometheus(&pdir, "scrape_configs: []\n", &c);
        let theirs = remote_write(&c, &format!("{prom}/api/v1/write"), body);
        assert_eq!((ours.0, &ours.1), (theirs.0, &theirs.1));
        let ct = |h: &[(String, String)]| {
            h.iter()
                .find(|(k, _)| k == "content-type")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(ct(&ours.2), ct(&theirs.2));
    }
}

#[test]
fn prometheus_remote_reads_from_inferdb() {
    if !prometheus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = Client::new();
    let (_idb, idb) = start_inferdb(dir.path(), true, &c);
    // 30 min of 15 s scrapes of three vLLM-like instances, ending now; 125/250/375 ms phases
    let step = 15_000;
    let n = 120;
    let end = now_ms() - now_ms().rem_euclid(step);
    let t0 = end - (n - 1) * step;
    let mut all = Vec::new();
    let buckets = ["0.1", "0.5", "1", "5", "+Inf"];
    for (i, (inst, model)) in [
        ("10.0.0.1:8000", "llama-3-8b"),
        ("10.0.0.2:8000", "llama-3-8b"),
        ("10.0.0.3:8000", "qwen-7b"),
    ]
    .iter()
    .enumerate()
    {
        let off = 125 * (i as i64 + 1);
        let l = [("instance", *inst), ("job", "vllm"), ("model_name", *model)];
        let pts = |f: &dyn Fn(i64) -> f64| -> Vec<(i64, f64)> {
            (0..n).map(|k| (t0 + k * step + off, f(k))).collect()
        };
        let r = (i + 1) as f64;
        all.push(series(
            "vllm:generation_tokens_total",
            &l,
            &pts(&|k| (k * k) as f64 * 3.0 * r + k as f64 * 17.0),
        ));
        all.push(series(
            "vllm:num_requests_running",
            &l,
            &pts(&|k| ((k * 7 + i as i64) % 13) as f64),
        ));
        for (b, le) in buckets.iter().enumerate() {
            let mut lb = l.to_vec();
            lb.push(("le", le));
            all.push(series(
                "vllm:e2e_request_latency_seconds_bucket",
                &lb,
                &pts(&|k| (k * (b as i64 + 1) * (i as i64 + 2)) as f64),
            ));
        }
        all.push(series(
            "vllm:e2e_request_latency_seconds_count",
            &l,
            &pts(&|k| (k * 5 * (i as i64 + 2)) as f64),
        ));
        all.push(series(
            "vllm:e2e_request_latency_seconds_sum",
            &l,
            &pts(&|k| k as f64 * 1.37 * r),
        ));
    }
    let (st, body, _) = remote_write(&c, &format!("{idb}/api/v1/write"), write_body(all));
    assert_eq!(st, 204, "{body}");

    let yml = format!(
        "global:\n  scrape_interval: 15s\nscrape_configs: []\n\
         remote_read:\n  - url: {idb}/api/v1/read\n    read_recent: true\n"
    );
    let (_p, prom) = start_prometheus(dir.path(), &yml, &c);
    let t = off_grid(end - 600_000, step, &[125, 250, 375]);
    let queries = [
        "vllm:num_requests_running",
        "vllm:generation_tokens_total",
        "rate(vllm:generation_tokens_total[1m])",
        "sum by (model_name) (rate(vllm:generation_tokens_total[5m]))",
        "histogram_quantile(0.9, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",
        "sum(rate(vllm:e2e_request_latency_seconds_sum[5m])) / sum(rate(vllm:e2e_request_latency_seconds_count[5m]))",
        "vllm:num_requests_running{instance=~\"10.0.0.[12]:8000\", model_name!=\"x\"}",
        "max_over_time(vllm:num_requests_running{instance!~\"10.0.0.1.*\"}[10m])",
    ];
    let (diffs, series) = compare_all(&c, &prom, &idb, &queries, t, 300_000, 30_000);
    assert!(
        diffs.is_empty(),
        "{} answers differ:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
    assert!(series > 20, "only {series} series compared");
    let (_, m) = c.get(&format!("{idb}/metrics"));
    assert!(
        m.lines()
            .any(|l| l.starts_with("inferdb_remote_read_requests_total ") && !l.ends_with(" 0")),
        "{m}"
    );
}
