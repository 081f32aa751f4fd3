//! Storage benchmarks through the `Db` API on the realistic workload (`benches/workload.rs`):
//! append throughput (`Appender::append_ref`, one commit per scrape, WAL on), head memory per
//! active series, and decode throughput through the querier (head and blocks).
//!
//! `cargo bench --bench storage` prints a summary (single timed runs over the whole workload),
//! then runs the criterion groups `db_append` and `db_query`. `INFERDB_BENCH_HOURS=2` shortens
//! the workload; `INFERDB_BENCH_SUMMARY_ONLY=1` skips criterion.
//!
//! Times are given as wall time and as CPU time (from `/proc/self/task/*/schedstat`, i.e.
//! every thread of the process, nanosecond resolution): on a shared machine the CPU-time
//! figure is the one that says what one core does.

#[path = "workload.rs"]
mod workload;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use inferdb_storage::chunk;
use inferdb_storage::head::ChunkData;
use inferdb_storage::{Db, Labels, Matcher, Options, SeriesRef};

/// The workload's scrapes, flattened: scrape `i` has time `t[i]` and the samples
/// `items[off[i]..off[i + 1]]` as `(series index, value)`.
struct Flat {
    t: Vec<i64>,
    off: Vec<usize>,
    items: Vec<(u32, f64)>,
}

impl Flat {
    fn new(wl: &workload::Workload) -> Flat {
        Flat::filtered(wl, None, i64::MAX)
    }

    /// Only the scrapes of target `only` (all with `None`) before `until`.
    fn filtered(wl: &workload::Workload, only: Option<usize>, until: i64) -> Flat {
        let mut f = Flat {
            t: Vec::new(),
            off: vec![0],
            items: Vec::new(),
        };
        for sc in wl.scrapes() {
            if sc.t >= until {
                break;
            }
            if only.is_some_and(|o| o != sc.target) {
                continue;
            }
            f.t.push(sc.t);
            f.items
                .extend(sc.samples.iter().map(|&(s, v)| (s as u32, v)));
            f.off.push(f.items.len());
        }
        f
    }

    fn len(&self) -> usize {
        self.t.len()
    }

    fn samples(&self, scrapes: std::ops::Range<usize>) -> usize {
        self.off[scrapes.end] - self.off[scrapes.start]
    }
}

/// CPU time of every live thread of this process.
fn process_cpu() -> Duration {
    let mut ns: u64 = 0;
    if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
        for e in rd.flatten() {
            ns += read_schedstat(&e.path().join("schedstat"));
        }
    }
    Duration::from_nanos(ns)
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    Duration::from_nanos(read_schedstat(std::path::Path::new(
        "/proc/thread-self/schedstat",
    )))
}

fn read_schedstat(p: &std::path::Path) -> u64 {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}

/// The server's allocator, so that allocation costs and memory are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Returns freed heap memory to the OS (mimalloc's `mi_collect`), so RSS shows what is live:
/// creating series allocates temporaries (label sets, WAL records) whose freed memory the
/// allocator otherwise keeps.
fn trim_heap() {
    extern "C" {
        fn mi_collect(force: bool);
    }
    // SAFETY: mi_collect (linked with the global allocator above) only returns free memory
    // of the allocator to the OS; no pointers change.
    unsafe {
        mi_collect(true);
    }
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `RssAnon`, `RssFile`).
fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// Options for the measurements: WAL on with the default 1 s fsync interval in the background
/// thread, but no block cuts/compaction during the timed loops (the load runs far faster than
/// real time, so the 30 s maintenance tick would land at arbitrary points).
fn options() -> Options {
    Options {
        maintenance_interval: Duration::from_secs(24 * 3600),
        ..Options::default()
    }
}

/// Creates every series of the workload (not timed).
fn refs(db: &Db, labels: &[Labels]) -> Vec<SeriesRef> {
    let mut app = db.appender();
    let r = labels
        .iter()
        .map(|l| app.get_ref(l).expect("get_ref"))
        .collect();
    app.commit().expect("commit");
    r
}

/// Appends the scrapes `range` through `append_ref`, one commit per scrape; calls `at` after
/// each scrape with its index.
fn replay(
    db: &Db,
    flat: &Flat,
    refs: &[SeriesRef],
    range: std::ops::Range<usize>,
    mut at: impl FnMut(usize),
) {
    for i in range {
        let t = flat.t[i];
        let mut app = db.appender();
        for &(s, v) in &flat.items[flat.off[i]..flat.off[i + 1]] {
            app.append_ref(refs[s as usize], t, v).expect("append_ref");
        }
        app.commit().expect("commit");
        at(i);
    }
}

/// How [`scan`] reads each series.
#[derive(Clone, Copy, PartialEq)]
enum ScanMode {
    /// Sample by sample (`SeriesIter` as an iterator).
    Sample,
    /// `Series::decode_into` into reused whole-series buffers.
    Bulk,
    /// `SeriesIter::next_batch`: one chunk's samples at a time, in the iterator's reused
    /// buffers (what the PromQL engine's storage adapter does).
    Batch,
}

impl ScanMode {
    fn label(self) -> &'static str {
        match self {
            ScanMode::Sample => "",
            ScanMode::Bulk => " with Series::decode_into",
            ScanMode::Batch => " with SeriesIter::next_batch",
        }
    }
}

/// Decodes every sample of every series in `[mint, maxt]` through the querier on this
/// thread, summing the values; returns (samples, wall, thread CPU).
fn scan(db: &Db, mint: i64, maxt: i64, mode: ScanMode) -> (u64, Duration, Duration) {
    let all = [Matcher::new(inferdb_storage::MatchOp::RegexMatch, "__name__", ".+").expect("re")];
    let (w0, c0) = (Instant::now(), thread_cpu());
    let q = db.querier(mint, maxt).expect("querier");
    let mut n = 0u64;
    let mut acc = 0f64;
    let (mut ts, mut vs) = (Vec::new(), Vec::new());
    for s in q.select(&all).expect("select") {
        if mode == ScanMode::Bulk {
            ts.clear();
            vs.clear();
            n += s.decode_into(&mut ts, &mut vs).expect("decode") as u64;
            acc += vs.iter().sum::<f64>();
            continue;
        }
        let mut it = s.iter();
        if mode == ScanMode::Batch {
            while let Some((_, v)) = it.next_batch() {
                acc += v.iter().sum::<f64>();
                n += v.len() as u64;
            }
            assert!(it.err().is_none(), "decode error: {:?}", it.err());
            continue;
        }
        for (_, v) in it.by_ref() {
            acc += v;
            n += 1;
        }
        assert!(it.err().is_none(), "decode error: {:?}", it.err());
    }
    black_box(acc);
    (n, w0.elapsed(), thread_cpu() - c0)
}

fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9) / 1e6
}

pub fn main() {
    let hours: f64 = std::env::var("INFERDB_BENCH_HOURS")
        .ok()
        .and_then(|h| h.parse().ok())
        .unwrap_or(24.0);
    let t0 = Instant::now();
    let wl = workload::generate(&workload::Config::hours(hours));
    let labels: Vec<Labels> = wl
        .series
        .iter()
        .map(|s| Labels::from_pairs(s.labels.iter().map(|(n, v)| (n.as_str(), v.as_str()))))
        .collect();
    let flat = Flat::new(&wl);
    let total = flat.items.len() as u64;
    let (mint, maxt) = (flat.t[0], flat.t[flat.len() - 1]);
    println!(
        "workload: {hours} h, {} series, {} samples in {} scrapes ({:.1} s to generate)",
        wl.series.len(),
        total,
        flat.len(),
        t0.elapsed().as_secs_f64()
    );

    // --- head memory per active series, at 1 h, 2 h and 3 h of data (the head holds between
    // about 1 h and 3 h: a 2 h block is cut when it spans more than 3 h) ---
    println!(
        "\nhead memory per active series: accounted = Db::stats().head_memory_bytes (Head::memory_bytes: series,"
    );
    println!("  labels, open chunks, chunk refs, postings; full chunks live in mmapped chunks_head/ files and are");
    println!("  shown apart); RssAnon/RssFile = growth of the process' anonymous/file-backed resident memory since");
    println!("  before Db::open (workload already generated)");
    let marks: Vec<(f64, i64)> = [1.0, 2.0, 3.0]
        .iter()
        .filter(|&&h| h <= hours)
        .map(|&h| (h, mint + (h * 3.6e6) as i64))
        .collect();
    let until = marks.last().map(|m| m.1).unwrap_or(mint);
    for (run, only) in [
        ("all series", None),
        ("vllm only", Some(0)),
        ("dcgm only", Some(1)),
    ] {
        // RSS after the first run is blurred by the allocator reusing freed memory
        let first = only.is_none();
        let part = Flat::filtered(&wl, only, until);
        let tmp = tempfile::tempdir().expect("tempdir");
        let (anon0, file0) = (status_bytes("RssAnon"), status_bytes("RssFile"));
        let db = Db::open(tmp.path(), options()).expect("open");
        let mut app = db.appender();
        let refs: Vec<SeriesRef> = labels
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let tg = wl.series[i].target;
                if only.unwrap_or(tg) == tg {
                    app.get_ref(l).expect("get_ref")
                } else {
                    SeriesRef(u64::MAX)
                }
            })
            .collect();
        app.commit().expect("commit");
        let mut next = 0;
        replay(&db, &part, &refs, 0..part.len(), |i| {
            let t_next = part.t.get(i + 1).copied().unwrap_or(i64::MAX);
            while next < marks.len() && t_next >= marks[next].1 {
                let st = db.stats();
                let series = st.head_series.max(1) as f64;
                // full (mmapped) chunk bytes
                let mut mapped = 0u64;
                for l in &labels {
                    let Some(r) = db.head().lookup(l) else {
                        continue;
                    };
                    let Some(m) = db.head().series(r) else {
                        continue;
                    };
                    for c in db.head().series_chunks(&m, i64::MIN, i64::MAX) {
                        if matches!(c.data, ChunkData::Arena(..)) {
                            mapped += c.bytes().len() as u64;
                        }
                    }
                }
                let rss = if first {
                    let anon = status_bytes("RssAnon").saturating_sub(anon0);
                    let file = status_bytes("RssFile").saturating_sub(file0);
                    format!(
                        "; RssAnon {:.0} B/series, RssFile {:.0} B/series",
                        anon as f64 / series,
                        file as f64 / series
                    )
                } else {
                    String::new()
                };
                println!(
                    "  {run}, after {:.0} h: {} series; accounted {:.0} B/series; mmapped full chunks {:.0} B/series{rss}",
                    marks[next].0,
                    st.head_series,
                    st.head_memory_bytes as f64 / series,
                    mapped as f64 / series,
                );
                next += 1;
            }
        });
        db.close().expect("close");
    }

    // --- head memory at scale: 64 vLLM servers (15 s scrapes), RSS against the accounting ---
    {
        const NODES: usize = 64;
        let part = Flat::filtered(
            &wl,
            Some(0),
            (mint + 2 * 3_600_000).min(until.max(mint + 1)),
        );
        let vllm: Vec<usize> = (0..labels.len())
            .filter(|&i| wl.series[i].target == 0)
            .collect();
        let tmp = tempfile::tempdir().expect("tempdir");
        trim_heap();
        let anon0 = status_bytes("RssAnon");
        let db = Db::open(tmp.path(), options()).expect("open");
        let mut app = db.appender();
        // refs[node][series index]
        let refs: Vec<Vec<SeriesRef>> = (0..NODES)
            .map(|n| {
                let mut r = vec![SeriesRef(u64::MAX); labels.len()];
                for &i in &vllm {
                    let l = labels[i].with("instance", &format!("gpu-node-{n:02}:8000"));
                    r[i] = app.get_ref(&l).expect("get_ref");
                }
                r
            })
            .collect();
        app.commit().expect("commit");
        let mut next = 0;
        for i in 0..part.len() {
            let t = part.t[i];
            for r in &refs {
                let mut app = db.appender();
                for &(s, v) in &part.items[part.off[i]..part.off[i + 1]] {
                    app.append_ref(r[s as usize], t, v).expect("append_ref");
                }
                app.commit().expect("commit");
            }
            let t_next = part.t.get(i + 1).copied().unwrap_or(i64::MAX);
            while next < 2 && t_next >= mint + (next as i64 + 1) * 3_600_000 {
                let st = db.stats();
                let series = st.head_series.max(1) as f64;
                let raw = status_bytes("RssAnon").saturating_sub(anon0);
                trim_heap();
                let trimmed = status_bytes("RssAnon").saturating_sub(anon0);
                println!(
                    "  {NODES} vLLM servers, after {} h: {} series; accounted {:.0} B/series; RssAnon growth {:.0} B/series, {:.0} B/series after mi_collect",
                    next + 1,
                    st.head_series,
                    st.head_memory_bytes as f64 / series,
                    raw as f64 / series,
                    trimmed as f64 / series,
                );
                next += 1;
            }
        }
        db.close().expect("close");
    }

    // --- append throughput over the whole workload ---
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = Db::open(tmp.path(), options()).expect("open");
    let r = refs(&db, &labels);
    let (w0, c0) = (Instant::now(), process_cpu());
    replay(&db, &flat, &r, 0..flat.len(), |_| {});
    let (wall, cpu) = (w0.elapsed(), process_cpu() - c0);
    println!(
        "\nappend (append_ref, commit per scrape of 200/450 samples, WAL on): {} samples in {:.2} s wall, {:.2} s CPU: {:.2} M samples/s wall, {:.2} M samples/s per CPU-second",
        total,
        wall.as_secs_f64(),
        cpu.as_secs_f64(),
        rate(total, wall),
        rate(total, cpu)
    );

    // --- decode through the querier: everything in the head, then everything in blocks ---
    for mode in [ScanMode::Sample, ScanMode::Bulk, ScanMode::Batch] {
        let mut best = (0u64, Duration::MAX, Duration::MAX);
        for _ in 0..3 {
            let x = scan(&db, mint, maxt, mode);
            if x.2 < best.2 {
                best = x;
            }
        }
        println!(
            "query, head ({} h in memory): select all + decode {} samples{}: {:.1} M samples/s wall, {:.1} M samples/s per thread-CPU-second (best of 3)",
            hours,
            best.0,
            mode.label(),
            rate(best.0, best.1),
            rate(best.0, best.2)
        );
    }
    let c = Instant::now();
    db.cut_all().expect("cut_all");
    db.maintain().expect("maintain");
    println!(
        "cut + compact: {:.1} s, {} blocks",
        c.elapsed().as_secs_f64(),
        db.blocks().len()
    );
    for mode in [ScanMode::Sample, ScanMode::Bulk, ScanMode::Batch] {
        let mut best = (0u64, Duration::MAX, Duration::MAX);
        for _ in 0..3 {
            let x = scan(&db, mint, maxt, mode);
            if x.2 < best.2 {
                best = x;
            }
        }
        println!(
            "query, blocks (+ last partial range in head): select all + decode {} samples{}: {:.1} M samples/s wall, {:.1} M samples/s per thread-CPU-second (best of 3)",
            best.0,
            mode.label(),
            rate(best.0, best.1),
            rate(best.0, best.2)
        );
    }

    // the same block chunks decoded directly (no querier), to split querier overhead from
    // chunk decoding
    let blocks = db.open_blocks();
    let mut chunks: Vec<&[u8]> = Vec::new();
    for b in &blocks {
        for s in b.select(&[], mint, maxt).expect("block select") {
            for (_, r) in &s.chunks {
                chunks.push(b.chunk(*r).expect("chunk"));
            }
        }
    }
    let mut best = (0u64, Duration::MAX);
    for _ in 0..3 {
        let c0 = thread_cpu();
        let mut n = 0u64;
        let mut acc = 0f64;
        for c in &chunks {
            let mut it = chunk::decode(c).expect("decode");
            for (_, v) in it.by_ref() {
                acc += v;
                n += 1;
            }
        }
        black_box(acc);
        let d = thread_cpu() - c0;
        if d < best.1 {
            best = (n, d);
        }
    }
    println!(
        "chunk level, the same {} block chunks: chunk::decode + iterate {} samples: {:.1} M samples/s per thread-CPU-second (best of 3)",
        chunks.len(),
        best.0,
        rate(best.0, best.1)
    );
    let mut best = (0u64, Duration::MAX);
    let (mut ts, mut vs) = (Vec::with_capacity(256), Vec::with_capacity(256));
    for _ in 0..3 {
        let c0 = thread_cpu();
        let mut n = 0u64;
        let mut acc = 0f64;
        for c in &chunks {
            ts.clear();
            vs.clear();
            n += chunk::decode_into(c, &mut ts, &mut vs).expect("decode") as u64;
            acc += vs.iter().sum::<f64>();
        }
        black_box(acc);
        let d = thread_cpu() - c0;
        if d < best.1 {
            best = (n, d);
        }
    }
    println!(
        "chunk level, the same block chunks: chunk::decode_into {} samples: {:.1} M samples/s per thread-CPU-second (best of 3)",
        best.0,
        rate(best.0, best.1)
    );
    drop(chunks);
    drop(blocks);

    if std::env::var_os("INFERDB_BENCH_SUMMARY_ONLY").is_some() {
        db.close().expect("close");
        return;
    }

    // --- criterion: append a 10-minute slice into a fresh Db; query the blocks ---
    let slice_end = flat.t.partition_point(|&t| t < mint + 10 * 60_000);
    let slice_samples = flat.samples(0..slice_end) as u64;
    let mut crit = Criterion::default().configure_from_args();
    let mut g = crit.benchmark_group("db_append");
    g.throughput(Throughput::Elements(slice_samples));
    g.sample_size(10);
    g.bench_function("append_ref_commit_per_scrape_10min", |b| {
        b.iter_custom(|iters| {
            let mut d = Duration::ZERO;
            for _ in 0..iters {
                let tmp = tempfile::tempdir().expect("tempdir");
                let db = Db::open(tmp.path(), options()).expect("open");
                let r = refs(&db, &labels);
                let w0 = Instant::now();
                replay(&db, &flat, &r, 0..slice_end, |_| {});
                d += w0.elapsed();
                db.close().expect("close");
            }
            d
        })
    });
    g.finish();
    let q_maxt = (mint + 2 * 3_600_000).min(maxt);
    let (q_n, _, _) = scan(&db, mint, q_maxt, ScanMode::Sample);
    let mut g = crit.benchmark_group("db_query");
    g.throughput(Throughput::Elements(q_n));
    g.sample_size(10);
    g.bench_function("select_all_decode_2h_blocks", |b| {
        b.iter(|| black_box(scan(&db, mint, q_maxt, ScanMode::Sample).0))
    });
    g.finish();
    crit.final_summary();
    db.close().expect("close");
}
