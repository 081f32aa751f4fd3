//! The scrape pipeline without HTTP: `N` simulated vLLM servers' pages, rendered in process,
//! go through `ScrapeLoop::scrape_page` (parse, series cache, staleness, synthetic series)
//! into a real store in a temporary folder, one round per simulated second. Prints the
//! thread CPU time of the scrape calls only (rendering excluded), samples per CPU-second and
//! the process' peak RSS. For profiling (`valgrind --tool=callgrind`) and before/after
//! comparisons of the ingest path; the end-to-end figure is
//! `benches/compare_scrape_prometheus.sh`.
//!
//!     cargo run --release --example scrape_ingest -- [SERVERS] [ROUNDS]

use std::sync::Arc;

use inferdb::config::Config;
use inferdb::model::exposition::Format;
use inferdb::model::sink::SampleSink;
use inferdb::scrape::target::{discover, Auth, ScrapeLoop, ScrapeOptions};
use inferdb::sim::VllmModel;
use inferdb_storage::db::{Db, Options};

/// On-CPU nanoseconds of the calling thread (`/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let servers: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(30);
    let dir = tempfile::tempdir().expect("temporary folder");
    let db = Arc::new(
        Db::open(
            dir.path(),
            Options {
                background: false,
                ..Default::default()
            },
        )
        .expect("open the store"),
    );
    let targets: Vec<String> = (0..servers)
        .map(|i| format!("'127.0.0.1:{}'", 23000 + i))
        .collect();
    let cfg = Config::parse(&format!(
        "scrape_configs: [{{job_name: vllm, scrape_interval: 1s, static_configs: [{{targets: [{}]}}]}}]",
        targets.join(",")
    ))
    .expect("configuration");
    let sc = &cfg.scrape_configs[0];
    let (targets, _) = discover(&cfg, sc);
    let client = inferdb::scrape::target::build_client(sc).expect("client");
    let sink: Arc<dyn SampleSink> = db.clone();
    let mut loops: Vec<ScrapeLoop> = targets
        .into_iter()
        .map(|t| {
            ScrapeLoop::new(
                t,
                ScrapeOptions::from_config(&cfg, sc),
                client.clone(),
                Auth::None,
                sink.clone(),
            )
        })
        .collect();
    let t0_s = 1_900_000_000.0f64;
    let mut models: Vec<VllmModel> = (0..servers)
        .map(|i| VllmModel::new(1 + i as u64, t0_s - 60.0, 600.0))
        .collect();
    let rss0 = status_kb("VmRSS:");
    let (mut cpu, mut samples, mut bytes) = (0u64, 0usize, 0usize);
    for r in 0..rounds {
        let t = t0_s + r as f64;
        for (lp, m) in loops.iter_mut().zip(models.iter_mut()) {
            m.advance_to(t);
            let page = m.render();
            bytes += page.len();
            let c0 = thread_cpu_ns();
            let rep = lp.scrape_page(&page, Format::PromText, (t * 1000.0) as i64);
            cpu += thread_cpu_ns() - c0;
            assert!(rep.up, "{:?}", rep.error);
            samples += rep.samples_post_relabel + 5;
        }
    }
    let s = cpu as f64 / 1e9;
    println!(
        "{servers} servers x {rounds} rounds: {samples} samples ({:.1} MB of pages) in {s:.2} CPU-s \
         = {:.2} M samples per CPU-s ({:.0} ns a sample); VmHWM {} MB (VmRSS before scraping {} MB); \
         head series {}",
        bytes as f64 / 1e6,
        samples as f64 / s / 1e6,
        s * 1e9 / samples as f64,
        status_kb("VmHWM:") / 1024,
        rss0 / 1024,
        db.stats().head_series,
    );
}
