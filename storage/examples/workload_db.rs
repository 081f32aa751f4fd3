//! Loads the realistic benchmark workload (`benches/workload.rs`) into an inferdb data folder
//! and reports bytes on disk per sample, for the side-by-side with Prometheus
//! (`benches/compare_prometheus.sh`).
//!
//! ```text
//! workload_db openmetrics FILE        write the workload as OpenMetrics text (for promtool)
//! workload_db append DIR              live path: scrape-order appends through Db::appender
//!                                     (append_ref, one commit per scrape), maintenance every
//!                                     5 min of data time (as the 30 s background tick would do
//!                                     in real time), clean close
//! workload_db compact DIR             reopen DIR, cut every complete block range out of the
//!                                     head, compact, clean close
//! workload_db import FILE DIR         import path: parse FILE (as written by `openmetrics`),
//!                                     BlockBuilder backfill, compact, clean close
//! workload_db du DIR                  bytes on disk of DIR by part
//! workload_db classes DIR             chunk bytes per sample of DIR's blocks by kind of series:
//!                                     classic histogram buckets, their `_count`/`_sum`,
//!                                     GPU (`DCGM_*`), counters (`*_total`), other gauges;
//!                                     needs no workload (any data folder)
//! workload_db decode DIR [REPS [ONLY]] decode speed of DIR's blocks through the querier
//!                                     (`Series::decode_into`, thread CPU, best of REPS
//!                                     rounds, each selecting afresh; select time apart):
//!                                     every series, then the selections a histogram query
//!                                     makes (one low `le`, `le="+Inf"`, `_count`, all buckets);
//!                                     ONLY: the selections whose name contains it
//! workload_db breakdown DIR           chunk bytes per sample of DIR's blocks by metric name,
//!                                     next to an estimate of the workload's entropy (the
//!                                     noise no lossless encoding can remove)
//! ```
//!
//! `INFERDB_BENCH_HOURS` (default 24) sets the workload length, `INFERDB_FIXTURES` the
//! fixtures folder (default `tests/fixtures` of the repository). Every command
//! prints `key=value` lines that the script collects.

#[path = "../../benches/workload.rs"]
mod workload;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use inferdb_storage::{BlockBuilder, Db, Error, Labels, Options, SeriesRef};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| -> Res<&str> {
        args.get(i)
            .map(|s| s.as_str())
            .ok_or_else(|| "missing argument (see the file's doc comment)".into())
    };
    match arg(0)? {
        "openmetrics" => openmetrics(Path::new(arg(1)?)),
        "append" => append(Path::new(arg(1)?)),
        "compact" => compact(Path::new(arg(1)?)),
        "import" => import(Path::new(arg(1)?), Path::new(arg(2)?)),
        "breakdown" => breakdown(Path::new(arg(1)?)),
        "classes" => classes(Path::new(arg(1)?)),
        "decode" => decode(
            Path::new(arg(1)?),
            args.get(2).and_then(|r| r.parse().ok()).unwrap_or(5),
            args.get(3).map(String::as_str),
        ),
        "du" => {
            du_report(Path::new(arg(1)?))?;
            Ok(())
        }
        other => Err(format!("unknown command {other}").into()),
    }
}

fn config() -> workload::Config {
    let hours: f64 = std::env::var("INFERDB_BENCH_HOURS")
        .ok()
        .and_then(|h| h.parse().ok())
        .unwrap_or(24.0);
    let mut cfg = workload::Config::hours(hours);
    if std::env::var_os("INFERDB_FIXTURES").is_none() {
        // this example lives one folder deeper than the benches
        cfg.fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    }
    cfg
}

fn generate() -> workload::Workload {
    let t0 = Instant::now();
    let wl = workload::generate(&config());
    println!("workload_series={}", wl.series.len());
    println!("workload_samples={}", wl.num_samples());
    println!("generate_s={:.2}", t0.elapsed().as_secs_f64());
    wl
}

/// CPU time of the whole process (all live threads), from `/proc/self/task/*/schedstat`
/// (nanosecond resolution), plus threads that already ended via `/proc/self/stat`.
fn process_cpu() -> Duration {
    let mut ns: u64 = 0;
    if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
        for e in rd.flatten() {
            if let Ok(s) = std::fs::read_to_string(e.path().join("schedstat")) {
                ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|x| x.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    Duration::from_nanos(ns)
}

fn openmetrics(file: &Path) -> Res<()> {
    let wl = generate();
    let stale = wl
        .series
        .iter()
        .flat_map(|s| s.samples.iter())
        .filter(|x| x.1.to_bits() == workload::STALE_NAN_BITS)
        .count();
    let t0 = Instant::now();
    wl.write_openmetrics_file(file)?;
    println!("openmetrics_samples={}", wl.num_samples() - stale);
    println!("openmetrics_bytes={}", std::fs::metadata(file)?.len());
    println!("write_s={:.2}", t0.elapsed().as_secs_f64());
    Ok(())
}

fn labels_of(s: &workload::Series) -> Labels {
    Labels::from_pairs(s.labels.iter().map(|(n, v)| (n.as_str(), v.as_str())))
}

fn options() -> Options {
    Options {
        // the load runs far faster than real time: maintenance is driven by data time below
        background: true,
        maintenance_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn append(dir: &Path) -> Res<()> {
    let wl = generate();
    let labels: Vec<Labels> = wl.series.iter().map(labels_of).collect();
    let scrapes: Vec<workload::Scrape> = wl.scrapes().collect();
    let db = Db::open(dir, options())?;
    let (w0, c0) = (Instant::now(), process_cpu());
    let mut refs: Vec<Option<SeriesRef>> = vec![None; labels.len()];
    let mut n = 0u64;
    let mut last_maint = scrapes.first().map(|s| s.t).unwrap_or(0);
    let mut maint_s = 0.0;
    for sc in &scrapes {
        let mut app = db.appender();
        for &(si, v) in &sc.samples {
            let r = match refs[si] {
                Some(r) => r,
                None => *refs[si].insert(app.get_ref(&labels[si])?),
            };
            match app.append_ref(r, sc.t, v) {
                Ok(()) => {}
                Err(Error::UnknownSeries(_)) => {
                    // the series left the head at a block cut: take a new reference
                    let r = app.get_ref(&labels[si])?;
                    refs[si] = Some(r);
                    app.append_ref(r, sc.t, v)?;
                }
                Err(e) => return Err(e.into()),
            }
            n += 1;
        }
        app.commit()?;
        if sc.t - last_maint >= 5 * 60_000 {
            last_maint = sc.t;
            let m0 = Instant::now();
            db.maintain()?;
            maint_s += m0.elapsed().as_secs_f64();
        }
    }
    let st = db.stats();
    db.close()?;
    let (wall, cpu) = (w0.elapsed(), process_cpu() - c0);
    println!("appended_samples={n}");
    println!("load_wall_s={:.2}", wall.as_secs_f64());
    println!("load_cpu_s={:.2}", cpu.as_secs_f64());
    println!("maintain_wall_s={maint_s:.2}");
    println!("head_series_at_close={}", st.head_series);
    println!("blocks_at_close={}", st.blocks);
    let bytes = du_report(dir)?;
    println!("bytes_per_sample={:.4}", bytes as f64 / n as f64);
    Ok(())
}

fn compact(dir: &Path) -> Res<()> {
    let (w0, c0) = (Instant::now(), process_cpu());
    let db = Db::open(
        dir,
        Options {
            background: false,
            ..options()
        },
    )?;
    db.cut_all()?;
    db.maintain()?;
    let st = db.stats();
    let metas = db.blocks();
    db.close()?;
    println!("compact_wall_s={:.2}", w0.elapsed().as_secs_f64());
    println!("compact_cpu_s={:.2}", (process_cpu() - c0).as_secs_f64());
    println!("head_series_at_close={}", st.head_series);
    for m in &metas {
        println!(
            "block {} level={} hours={:.1} series={} samples={} chunks={}",
            m.id,
            m.level,
            (m.max_time - m.min_time) as f64 / 3.6e6,
            m.num_series,
            m.num_samples,
            m.num_chunks
        );
    }
    let samples: u64 = metas.iter().map(|m| m.num_samples).sum();
    println!("block_samples={samples}");
    du_report(dir)?;
    Ok(())
}

/// Parses the OpenMetrics text written by [`workload::Workload::write_openmetrics`]: one
/// sample per line `name{a="x",...} value seconds.millis`, series grouped.
fn import(file: &Path, dir: &Path) -> Res<()> {
    let (w0, c0) = (Instant::now(), process_cpu());
    let f = std::fs::File::open(file)?;
    let rd = BufReader::with_capacity(1 << 20, f);
    let mut b = BlockBuilder::new(options().block_duration_ms);
    let mut cache: HashMap<String, Labels> = HashMap::new();
    let mut last_key = String::new();
    let mut last: Option<Labels> = None;
    let mut n = 0u64;
    for (lineno, line) in rd.lines().enumerate() {
        let line = line?;
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let bad = || format!("{}:{}: cannot parse", file.display(), lineno + 1);
        let end = line.rfind('}').ok_or_else(bad)?;
        let key = &line[..=end];
        let mut rest = line[end + 1..].split_whitespace();
        let v = parse_value(rest.next().ok_or_else(bad)?).ok_or_else(bad)?;
        let ts: f64 = rest.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let t = (ts * 1000.0).round() as i64;
        if last.is_none() || key != last_key {
            let l = match cache.get(key) {
                Some(l) => l.clone(),
                None => {
                    let l = parse_series(key).ok_or_else(bad)?;
                    cache.insert(key.to_string(), l.clone());
                    l
                }
            };
            last_key.clear();
            last_key.push_str(key);
            last = Some(l);
        }
        if let Some(l) = &last {
            b.add(l, t, v)?;
        }
        n += 1;
    }
    let parse_wall = w0.elapsed();
    let db = Db::open(
        dir,
        Options {
            background: false,
            ..options()
        },
    )?;
    let metas = db.backfill_block(b)?;
    println!("backfilled_blocks={}", metas.len());
    db.compact_history()?;
    let blocks = db.blocks();
    db.close()?;
    println!("imported_samples={n}");
    println!("import_parse_wall_s={:.2}", parse_wall.as_secs_f64());
    println!("load_wall_s={:.2}", w0.elapsed().as_secs_f64());
    println!("load_cpu_s={:.2}", (process_cpu() - c0).as_secs_f64());
    for m in &blocks {
        println!(
            "block {} level={} hours={:.1} series={} samples={} chunks={}",
            m.id,
            m.level,
            (m.max_time - m.min_time) as f64 / 3.6e6,
            m.num_series,
            m.num_samples,
            m.num_chunks
        );
    }
    let bytes = du_report(dir)?;
    println!("bytes_per_sample={:.4}", bytes as f64 / n as f64);
    Ok(())
}

/// Estimated information content of a series in bits per sample, for values and timestamps
/// apart. Values are scaled to integers by their decimal places (up to 9; else the raw f64
/// bits count as 64 - leading equal bits of the XOR with the previous value, a generous
/// floor); the entropy of the first differences or of the values themselves, whichever is
/// smaller, estimated from the histogram when the distinct values are few against the sample
/// count, else as a Gaussian's (log2(sd) + 2.05 bits). Whole-series statistics: an estimate,
/// not a bound (a coder adapting to the load curve can do somewhat better).
/// Timestamps: entropy of the histogram of interval deviations from the median interval.
fn entropy_bits(samples: &[(i64, f64)]) -> (f64, f64) {
    fn hist_entropy(xs: &[i64]) -> (f64, usize) {
        let mut m: HashMap<i64, usize> = HashMap::new();
        for &x in xs {
            *m.entry(x).or_default() += 1;
        }
        let n = xs.len().max(1) as f64;
        let h = m
            .values()
            .map(|&c| {
                let p = c as f64 / n;
                -p * p.log2()
            })
            .sum();
        (h, m.len())
    }
    /// Entropy of a stream: histogram entropy when the distinct values are few against its
    /// length, else a Gaussian's with the stream's standard deviation.
    fn stream_entropy(d: &[i64]) -> f64 {
        let (h, distinct) = hist_entropy(d);
        if distinct * 20 < d.len() {
            return h;
        }
        let n = d.len() as f64;
        let mean = d.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = d.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        (var.sqrt().max(1.0).log2() + 2.05).max(h.min(2.05))
    }
    let vals: Vec<f64> = samples
        .iter()
        .map(|x| x.1)
        .filter(|v| v.is_finite())
        .collect();
    if vals.len() < 2 {
        return (0.0, 0.0);
    }
    let k = (0..=9).find(|&k| {
        let f = 10f64.powi(k);
        vals.iter().all(|v| {
            let x = v * f;
            x.abs() < 9e15 && (x.round() / f) == *v
        })
    });
    let vbits = match k {
        Some(k) => {
            let f = 10f64.powi(k);
            let ints: Vec<i64> = vals.iter().map(|v| (v * f).round() as i64).collect();
            let d: Vec<i64> = ints.windows(2).map(|w| w[1] - w[0]).collect();
            // the smaller of the differences' and the values' own entropy (iid noise around a
            // level is cheaper to code as values than as differences)
            stream_entropy(&d).min(stream_entropy(&ints[1..]))
        }
        None => {
            let mut bits = 0.0;
            for w in vals.windows(2) {
                let x = w[0].to_bits() ^ w[1].to_bits();
                bits += if x == 0 {
                    0.0
                } else {
                    (64 - x.leading_zeros() - x.trailing_zeros()) as f64
                };
            }
            bits / (vals.len() - 1) as f64
        }
    };
    let ts: Vec<i64> = samples.iter().map(|x| x.0).collect();
    let mut iv: Vec<i64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
    let mut sorted = iv.clone();
    sorted.sort_unstable();
    let med = sorted[sorted.len() / 2];
    for x in iv.iter_mut() {
        *x -= med;
    }
    (vbits, hist_entropy(&iv).0)
}

fn breakdown(dir: &Path) -> Res<()> {
    let wl = generate();
    let db = Db::open(
        dir,
        Options {
            read_only: true,
            ..options()
        },
    )?;
    // chunk bytes and samples by metric name (and target)
    let mut by: HashMap<String, (u64, u64)> = HashMap::new();
    for b in db.open_blocks() {
        for s in b.select(&[], i64::MIN, i64::MAX)? {
            let name = s.labels.metric_name().unwrap_or("").to_string();
            let e = by.entry(name).or_default();
            for (m, r) in &s.chunks {
                e.0 += b.chunk(*r)?.len() as u64;
                e.1 += m.num_samples as u64;
            }
        }
    }
    // entropy estimate by metric name
    let mut ent: HashMap<String, (f64, f64, u64, usize)> = HashMap::new();
    for s in &wl.series {
        let (v, t) = entropy_bits(&s.samples);
        let e = ent.entry(s.name().to_string()).or_default();
        let n = s.samples.len() as f64;
        e.0 += v * n;
        e.1 += t * n;
        e.2 += s.samples.len() as u64;
        e.3 = s.target;
    }
    let mut rows: Vec<(String, u64, u64, f64, f64, usize)> = by
        .into_iter()
        .map(|(n, (b, c))| {
            let (v, t, m, tg) = ent.get(&n).copied().unwrap_or_default();
            let m = m.max(1) as f64;
            (n, b, c, v / m / 8.0, t / m / 8.0, tg)
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    let tot_b: u64 = rows.iter().map(|r| r.1).sum();
    let tot_s: u64 = rows.iter().map(|r| r.2).sum();
    let tot_e: f64 = rows.iter().map(|r| (r.3 + r.4) * r.2 as f64).sum();
    println!(
        "{:<44} {:>6} {:>7} {:>10} {:>8} {:>8} {:>8}",
        "metric", "target", "share%", "samples", "B/sample", "est_val", "est_ts"
    );
    for r in &rows {
        println!(
            "{:<44} {:>6} {:>7.2} {:>10} {:>8.3} {:>8.3} {:>8.3}",
            r.0,
            if r.5 == 0 { "vllm" } else { "dcgm" },
            100.0 * r.1 as f64 / tot_b.max(1) as f64,
            r.2,
            r.1 as f64 / r.2.max(1) as f64,
            r.3,
            r.4
        );
    }
    for tg in 0..2 {
        let b: u64 = rows.iter().filter(|r| r.5 == tg).map(|r| r.1).sum();
        let c: u64 = rows.iter().filter(|r| r.5 == tg).map(|r| r.2).sum();
        let e: f64 = rows
            .iter()
            .filter(|r| r.5 == tg)
            .map(|r| (r.3 + r.4) * r.2 as f64)
            .sum();
        println!(
            "target_{}: chunk_bytes_per_sample={:.3} entropy_estimate_bytes_per_sample={:.3}",
            if tg == 0 { "vllm" } else { "dcgm" },
            b as f64 / c.max(1) as f64,
            e / c.max(1) as f64
        );
    }
    println!(
        "chunk_bytes_per_sample={:.3}",
        tot_b as f64 / tot_s.max(1) as f64
    );
    println!(
        "entropy_estimate_bytes_per_sample={:.3}",
        tot_e / tot_s.max(1) as f64
    );
    Ok(())
}

/// The kind of a series for [`classes`]: `hist_bases` holds the names of classic histograms
/// (bucket series' names without `_bucket`).
fn class_of(l: &Labels, hist_bases: &std::collections::HashSet<String>) -> &'static str {
    let name = l.metric_name().unwrap_or("");
    if name.starts_with("DCGM_") {
        return "gpu";
    }
    if let Some(base) = name.strip_suffix("_bucket") {
        if l.get("le").is_some() && hist_bases.contains(base) {
            return "hist_bucket";
        }
    }
    for suffix in ["_count", "_sum"] {
        if name
            .strip_suffix(suffix)
            .is_some_and(|b| hist_bases.contains(b))
        {
            return if suffix == "_count" {
                "hist_count"
            } else {
                "hist_sum"
            };
        }
    }
    if name.ends_with("_total") {
        "counter"
    } else {
        "gauge"
    }
}

fn classes(dir: &Path) -> Res<()> {
    let db = Db::open(
        dir,
        Options {
            read_only: true,
            ..options()
        },
    )?;
    let blocks = db.open_blocks();
    let mut hist_bases = std::collections::HashSet::new();
    for b in &blocks {
        for s in b.select(&[], i64::MIN, i64::MAX)? {
            if let (Some(base), Some(_)) = (
                s.labels
                    .metric_name()
                    .and_then(|n| n.strip_suffix("_bucket")),
                s.labels.get("le"),
            ) {
                hist_bases.insert(base.to_string());
            }
        }
    }
    // class -> (series, samples, chunk bytes); a histogram group chunk is counted once, under
    // "hist_group", and each member's entry costs its marker byte
    let mut by: std::collections::BTreeMap<&str, (u64, u64, u64)> = Default::default();
    let mut groups_seen = std::collections::HashSet::new();
    let mut group_bytes = 0u64;
    let mut index_bytes = 0u64;
    for (bi, b) in blocks.iter().enumerate() {
        index_bytes += std::fs::metadata(b.dir().join("index"))?.len();
        for s in b.select(&[], i64::MIN, i64::MAX)? {
            let class = class_of(&s.labels, &hist_bases);
            let e = by.entry(class).or_default();
            e.0 += 1;
            for (m, r) in &s.chunks {
                let bytes = b.chunk(*r)?;
                e.1 += u64::from(m.num_samples);
                match inferdb_storage::chunk::group_member(bytes) {
                    Some((member, group_len)) => {
                        e.2 += 1;
                        if groups_seen.insert((bi, *r + u64::from(member) + 1)) {
                            group_bytes += group_len as u64;
                        }
                    }
                    None => e.2 += bytes.len() as u64,
                }
            }
        }
    }
    if group_bytes > 0 {
        by.insert("hist_group", (0, 0, group_bytes));
    }
    let (ts, tb): (u64, u64) = by.values().fold((0, 0), |a, v| (a.0 + v.1, a.1 + v.2));
    println!(
        "{:<12} {:>7} {:>11} {:>11} {:>8} {:>7}",
        "class", "series", "samples", "bytes", "B/sample", "share%"
    );
    for (c, (n, s, b)) in &by {
        println!(
            "{c:<12} {n:>7} {s:>11} {b:>11} {:>8.3} {:>7.2}",
            *b as f64 / (*s).max(1) as f64,
            100.0 * *b as f64 / tb.max(1) as f64
        );
    }
    println!(
        "chunk_bytes={tb} samples={ts} chunk_bytes_per_sample={:.4}",
        tb as f64 / ts.max(1) as f64
    );
    println!(
        "index_bytes={index_bytes} index_bytes_per_sample={:.4}",
        index_bytes as f64 / ts.max(1) as f64
    );
    let total = du_report(dir)?;
    println!("bytes_per_sample={:.4}", total as f64 / ts.max(1) as f64);
    Ok(())
}

/// CPU time of the calling thread in seconds.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec it is given, which lives on this stack.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn decode(dir: &Path, reps: usize, only: Option<&str>) -> Res<()> {
    use inferdb_storage::Matcher;
    let db = Db::open(
        dir,
        Options {
            read_only: true,
            ..options()
        },
    )?;
    let q = db.querier(i64::MIN, i64::MAX)?;
    let hist = "vllm:e2e_request_latency_seconds";
    let bucket = format!("{hist}_bucket");
    let count = format!("{hist}_count");
    let cases: Vec<(&str, Vec<Matcher>)> = vec![
        (
            "all series",
            vec![Matcher::new(
                inferdb_storage::MatchOp::RegexMatch,
                "__name__",
                ".+",
            )?],
        ),
        (
            "one low le (0.3)",
            vec![
                Matcher::equal("__name__", &bucket),
                Matcher::equal("le", "0.3"),
            ],
        ),
        (
            "le=+Inf",
            vec![
                Matcher::equal("__name__", &bucket),
                Matcher::equal("le", "+Inf"),
            ],
        ),
        ("_count", vec![Matcher::equal("__name__", &count)]),
        ("all buckets", vec![Matcher::equal("__name__", &bucket)]),
    ];
    println!(
        "{:<18} {:>7} {:>11} {:>10} {:>12} {:>10}",
        "selection", "series", "samples", "CPU ms", "M samples/s", "select ms"
    );
    for (name, ms) in cases {
        if only.is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let (mut ts, mut vs) = (Vec::new(), Vec::new());
        let (mut best, mut best_select) = (f64::MAX, f64::MAX);
        let (mut n, mut len) = (0, 0);
        // each round selects afresh, as a query does: what a selection decodes once (a
        // histogram group read by several of its series) is decoded again by the next
        for _ in 0..reps.max(1) {
            let c0 = thread_cpu();
            let series = q.select(&ms)?;
            let c1 = thread_cpu();
            n = 0;
            for s in &series {
                ts.clear();
                vs.clear();
                n += s.decode_into(&mut ts, &mut vs)?;
            }
            best = best.min(thread_cpu() - c1);
            best_select = best_select.min(c1 - c0);
            len = series.len();
        }
        println!(
            "{name:<18} {len:>7} {n:>11} {:>10.2} {:>12.1} {:>10.2}",
            best * 1e3,
            n as f64 / best.max(1e-9) / 1e6,
            best_select * 1e3
        );
    }
    Ok(())
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        s => s.parse().ok(),
    }
}

/// `name{a="x",b="y"}` (values escaped with `\\`, `\"`, `\n`).
fn parse_series(key: &str) -> Option<Labels> {
    let open = key.find('{')?;
    let mut pairs: Vec<(String, String)> = vec![("__name__".into(), key[..open].to_string())];
    let body = key.get(open + 1..key.len() - 1)?;
    let mut chars = body.chars().peekable();
    loop {
        while chars.peek() == Some(&',') || chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut name = String::new();
        for c in chars.by_ref() {
            if c == '=' {
                break;
            }
            name.push(c);
        }
        if chars.next() != Some('"') {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                c => value.push(c),
            }
        }
        pairs.push((name, value));
    }
    Some(Labels::from_pairs(pairs))
}

/// Prints the bytes of `dir` by part (WAL, each block's chunks/index/meta, other) and
/// returns the total (apparent file sizes, as `du -sb`).
fn du_report(dir: &Path) -> Res<u64> {
    let mut parts: Vec<(String, u64)> = Vec::new();
    let mut add = |k: &str, n: u64| match parts.iter_mut().find(|p| p.0 == k) {
        Some(p) => p.1 += n,
        None => parts.push((k.to_string(), n)),
    };
    let mut total = 0u64;
    let mut alloc = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let md = e.metadata()?;
            if md.is_dir() {
                stack.push(e.path());
                continue;
            }
            use std::os::unix::fs::MetadataExt;
            let rel = e.path().strip_prefix(dir)?.to_string_lossy().into_owned();
            let kind = if rel.starts_with("wal") {
                "wal"
            } else if rel.contains("chunks") {
                "block_chunks"
            } else if rel.ends_with("index") {
                "block_index"
            } else {
                "other"
            };
            add(kind, md.len());
            total += md.len();
            alloc += md.blocks() * 512;
        }
    }
    for (k, n) in &parts {
        println!("bytes_{k}={n}");
    }
    println!("bytes_total={total}");
    println!("bytes_allocated={alloc}");
    Ok(total)
}
