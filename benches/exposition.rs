//! Exposition parser throughput (MB/s) on the fixture pages, and the whole per-scrape
//! pipeline (parse, label building from the series cache, staleness) into a null sink.

use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use inferdb::model::exposition::{parse, Entry, Format};
use inferdb::model::sink::{AppendStats, SampleSink, SinkError, SinkSample};
use inferdb::scrape::target::{Auth, ScrapeLoop, ScrapeOptions, Target};
use inferdb_storage::Labels;

fn pages() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    [
        "vllm/metrics-idle.txt",
        "vllm/metrics-load.txt",
        "vllm/metrics-saturated.txt",
        "dcgm/metrics-8gpu.txt",
    ]
    .iter()
    .filter_map(|p| {
        std::fs::read_to_string(root.join(p))
            .ok()
            .map(|t| (p.to_string(), t))
    })
    .collect()
}

struct NullSink;
impl SampleSink for NullSink {
    fn append_batch(&self, b: &[SinkSample<'_>]) -> Result<AppendStats, SinkError> {
        Ok(AppendStats {
            appended: b.len(),
            ..Default::default()
        })
    }
}

fn bench(c: &mut Criterion) {
    let pages = pages();
    let all: String = pages.iter().map(|(_, p)| p.as_str()).collect();
    let mut g = c.benchmark_group("exposition");
    g.throughput(Throughput::Bytes(all.len() as u64));
    g.bench_function("parse_all_fixture_pages", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for (_, p) in &pages {
                for e in parse(black_box(p), Format::PromText) {
                    if let Ok(Entry::Sample(s)) = e {
                        n += 1;
                        black_box(s.value);
                    }
                }
            }
            n
        })
    });
    g.bench_function("parse_and_read_labels", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for (_, p) in &pages {
                for e in parse(black_box(p), Format::PromText) {
                    if let Ok(Entry::Sample(s)) = e {
                        for (k, v) in s.labels.iter() {
                            n += k.len() + v.len();
                        }
                    }
                }
            }
            n
        })
    });
    g.finish();

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let (_, load) = pages
        .iter()
        .find(|(n, _)| n.contains("load"))
        .cloned()
        .unwrap();
    let target = Target {
        job: "vllm".into(),
        url: "http://127.0.0.1:8000/metrics".into(),
        labels: Labels::from_pairs([("job", "vllm"), ("instance", "127.0.0.1:8000")]),
        discovered_labels: Default::default(),
        interval: std::time::Duration::from_secs(1),
        timeout: std::time::Duration::from_secs(1),
    };
    let mut lp = ScrapeLoop::new(
        target,
        ScrapeOptions::default(),
        reqwest::Client::new(),
        Auth::None,
        Arc::new(NullSink),
    );
    let mut t = 0i64;
    let mut g = c.benchmark_group("scrape_pipeline");
    g.throughput(Throughput::Bytes(load.len() as u64));
    g.bench_function("vllm_load_page_cached_series", |b| {
        b.iter(|| {
            t += 1000;
            lp.scrape_page(black_box(&load), Format::PromText, t)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
