//! Measures the append rate through `Appender::append_ref` (one commit per scrape, WAL on)
//! and the head memory per active series.
//!
//! `cargo run --release -p inferdb-storage --example db_append_perf -- [series] [scrapes] [gauge%] [batch] [refs]`
//!
//! `batch` (default: all series) series go into one commit, as a scraper commits one target's
//! page; with a fifth argument `1` the batches go through `Db::commit_refs` instead of an
//! appender.
//!
//! `gauge%` of the series (default 33) are full-precision random gauges (incompressible:
//! about 7 bytes per sample), the rest whole-number counters growing by uneven steps.
//!
//! `INFERDB_WAL_COMPRESSION=none|snappy|zstd` (default none) sets the WAL compression; the
//! WAL's bytes before the closing checkpoint are printed too.

use std::time::Instant;

/// The server's allocator, so that allocation costs are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use inferdb_storage::wal::RefSample;
use inferdb_storage::{Db, Labels, Options, SeriesRef};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n_series = args.first().copied().unwrap_or(10_000) as usize;
    let scrapes = args.get(1).copied().unwrap_or(720) as i64;
    let gauge_pct = args.get(2).copied().unwrap_or(33) as usize;
    let batch = (args.get(3).copied().unwrap_or(n_series as u64) as usize).max(1);
    let direct = args.get(4).copied().unwrap_or(0) == 1;
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = Db::open(
        tmp.path(),
        Options {
            background: true,
            wal_compression: std::env::var("INFERDB_WAL_COMPRESSION")
                .ok()
                .and_then(|c| inferdb_storage::wal::Compression::from_name(&c))
                .unwrap_or_default(),
            ..Options::default()
        },
    )
    .expect("open");
    let labels: Vec<Labels> = (0..n_series)
        .map(|i| {
            Labels::from_pairs([
                ("__name__", format!("vllm:metric_{}", i % 40)),
                ("model_name", "meta-llama/Llama-3.1-8B-Instruct".to_string()),
                (
                    "instance",
                    format!("10.0.{}.{}:8000", i / 40 / 250, (i / 40) % 250),
                ),
                ("job", "vllm".to_string()),
                ("le", format!("{}", i % 13)),
            ])
        })
        .collect();
    let mut app = db.appender();
    let refs: Vec<_> = labels
        .iter()
        .map(|l| app.get_ref(l).expect("ref"))
        .collect();
    app.commit().expect("commit");
    let base = 1_796_198_400_000i64;
    let start = Instant::now();
    let cpu0 = cpu_seconds();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut buf: Vec<RefSample> = Vec::with_capacity(batch);
    let mut unknown = Vec::new();
    for s in 0..scrapes {
        let t = base + s * 15_000;
        for (k, part) in refs.chunks(batch).enumerate() {
            buf.clear();
            for (j, r) in part.iter().enumerate() {
                let i = k * batch + j;
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // counters (whole numbers, uneven steps) and full-precision gauges
                let v = if i % 100 < gauge_pct {
                    (x % 1000) as f64 / 997.0
                } else {
                    (s * 37 + (x % 50) as i64) as f64
                };
                buf.push(RefSample { r: r.0, t, v });
            }
            if direct {
                let st = db.commit_refs(&buf, &mut unknown).expect("commit");
                assert_eq!(st.appended, buf.len());
            } else {
                let mut app = db.appender();
                for x in &buf {
                    app.append_ref(SeriesRef(x.r), x.t, x.v).expect("append");
                }
                app.commit().expect("commit");
            }
        }
    }
    let el = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let total = n_series as f64 * scrapes as f64;
    let st = db.stats();
    println!(
        "appended {} samples of {} series in {:.3} s wall, {:.3} s CPU (all threads): \
         {:.2} M samples/s wall, {:.2} M samples per CPU second",
        total,
        n_series,
        el,
        cpu,
        total / el / 1e6,
        total / cpu / 1e6
    );
    println!(
        "head: {} series, {} bytes, {:.0} bytes/series ({} samples/series in the head, {}% gauges; \
         {} series a commit, {})",
        st.head_series,
        st.head_memory_bytes,
        st.head_memory_bytes as f64 / st.head_series as f64,
        scrapes,
        gauge_pct,
        batch,
        if direct { "Db::commit_refs" } else { "Appender" }
    );
    let wal_bytes: u64 = std::fs::read_dir(tmp.path().join("wal"))
        .expect("wal folder")
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "wal: {} bytes ({:.2} bytes/sample), compression {}, {} payload bytes saved",
        wal_bytes,
        wal_bytes as f64 / total,
        st.wal_compression,
        st.wal_bytes_saved
    );
    db.close().expect("close");
}

/// User + system CPU time of the whole process (all threads), in seconds.
fn cpu_seconds() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
