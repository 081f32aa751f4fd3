//! Fills a data folder's WAL with a known number of samples for the remote-write send
//! benchmark (`benches/remote_write_send.sh`): `SERIES` vLLM-like series, one commit per
//! scrape every 15 s for `SCRAPES` scrapes, ending now. The store is left as a crash leaves it
//! (WAL segments, no checkpoint), so `inferdb serve` sends every sample from the WAL.
//!
//! ```text
//! cargo run --release --example remote_write_wal -- DIR [SERIES] [SCRAPES]
//! ```
//! Prints the number of samples written.

use inferdb_storage::{Db, Labels, Options};

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .expect("usage: remote_write_wal DIR [SERIES] [SCRAPES]");
    let series: usize = args.next().map(|s| s.parse().unwrap()).unwrap_or(10_000);
    let scrapes: usize = args.next().map(|s| s.parse().unwrap()).unwrap_or(100);
    let db = Db::open(
        &dir,
        Options {
            background: false,
            ..Options::default()
        },
    )
    .expect("opening the store");
    let names = [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:gpu_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_per_output_token_seconds_bucket",
    ];
    let labels: Vec<Labels> = (0..series)
        .map(|i| {
            Labels::from_pairs([
                ("__name__", names[i % names.len()].to_string()),
                (
                    "instance",
                    format!("10.0.{}.{}:8000", i / 2000, (i / 40) % 50),
                ),
                ("job", "vllm".to_string()),
                ("le", format!("{}", (i / names.len()) % 5)),
                ("model_name", "meta-llama/Llama-3.1-8B-Instruct".to_string()),
            ])
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let step = 15_000i64;
    let t0 = now - step * scrapes as i64;
    let mut refs = Vec::with_capacity(series);
    let mut n = 0u64;
    for s in 0..scrapes {
        let t = t0 + s as i64 * step;
        let mut app = db.appender();
        for (i, l) in labels.iter().enumerate() {
            let v = ((s * 7 + i * 13) % 1000) as f64 * 0.25;
            if s == 0 {
                let r = app.get_ref(l).expect("labels");
                refs.push(r);
            }
            app.append_ref(refs[i], t, v).expect("append");
            n += 1;
        }
        app.commit().expect("commit");
    }
    db.sync().expect("fsync");
    // no close: a clean close would replace the WAL segments by a checkpoint
    std::mem::forget(db);
    println!("{n}");
}
