//! Chunk benchmarks on the realistic workload (`benches/workload.rs`): bytes per sample for each
//! coding, encode and decode throughput on one core, open-chunk memory.
//!
//! `cargo bench --bench chunks` prints a summary table, then runs the criterion groups
//! `chunk_encode` and `chunk_decode`. `INFERDB_BENCH_HOURS=2` shortens the workload;
//! `INFERDB_BENCH_SUMMARY_ONLY=1` skips criterion.

#[path = "workload.rs"]
mod workload;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput};
use inferdb_storage::chunk::{
    self, ChunkWriter, EncodePolicy, TimeEncoding, ValueEncoding, MAX_SAMPLES_PER_CHUNK,
};

/// Block range at which the head also cuts chunks (2 h).
const BLOCK_MS: i64 = 2 * 3_600_000;

/// Splits a series into head chunks: at 120 samples and at 2 h boundaries.
fn cut(samples: &[(i64, f64)]) -> Vec<&[(i64, f64)]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 0..samples.len() {
        let n = i - start;
        let crosses =
            n > 0 && samples[i].0.div_euclid(BLOCK_MS) != samples[start].0.div_euclid(BLOCK_MS);
        if n == MAX_SAMPLES_PER_CHUNK || crosses {
            out.push(&samples[start..i]);
            start = i;
        }
    }
    if start < samples.len() {
        out.push(&samples[start..]);
    }
    out
}

fn encode(c: &[(i64, f64)], policy: EncodePolicy) -> Vec<u8> {
    let mut w = ChunkWriter::new();
    for &(t, v) in c {
        w.append(t, v);
    }
    w.finish_with(policy)
        .unwrap_or_else(|| w.finish_with(EncodePolicy::Xor).expect("xor"))
}

/// CPU time of this thread in seconds (Linux `/proc/thread-self/stat`, 10 ms ticks), so that
/// throughput per core can be measured on a busy machine; `None` elsewhere.
fn thread_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // fields 14 and 15 of stat (utime, stime) are 12 and 13 after the command name
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Runs `f` and returns (wall seconds, CPU seconds of this thread).
fn timed(mut f: impl FnMut()) -> (f64, f64) {
    let c0 = thread_cpu_seconds();
    let t = Instant::now();
    f();
    let wall = t.elapsed().as_secs_f64();
    let cpu = match (c0, thread_cpu_seconds()) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => wall,
    };
    (wall, cpu)
}

fn per_sample(bytes: usize, samples: usize) -> f64 {
    bytes as f64 / samples.max(1) as f64
}

pub fn main() {
    let hours: f64 = std::env::var("INFERDB_BENCH_HOURS")
        .ok()
        .and_then(|h| h.parse().ok())
        .unwrap_or(24.0);
    let t0 = Instant::now();
    let wl = workload::generate(&workload::Config::hours(hours));
    let total_samples = wl.num_samples();
    println!(
        "workload: {hours} h, {} series, {} samples ({:.1} s to generate)",
        wl.series.len(),
        total_samples,
        t0.elapsed().as_secs_f64()
    );
    for (i, tg) in wl.targets.iter().enumerate() {
        let n: usize = tg.series.iter().map(|&s| wl.series[s].samples.len()).sum();
        println!(
            "  target {i} job={} every {} ms: {} series, {} samples",
            tg.job,
            tg.interval_ms,
            tg.series.len(),
            n
        );
    }

    // chunks per series
    let chunks: Vec<(usize, &[(i64, f64)])> = wl
        .series
        .iter()
        .enumerate()
        .flat_map(|(i, s)| cut(&s.samples).into_iter().map(move |c| (i, c)))
        .collect();
    println!("chunks: {}", chunks.len());

    // bytes per sample per policy, per target
    println!("\nbytes per sample (chunk bytes incl. header and crc32 / samples):");
    println!(
        "  {:<28} {:>10} {:>10} {:>10}",
        "policy", "all", "vllm", "dcgm"
    );
    let mut auto_chunks: Vec<Vec<u8>> = Vec::new();
    for (name, policy) in [
        ("auto (finish)", EncodePolicy::Auto),
        ("xor = classic Gorilla", EncodePolicy::Xor),
        ("int dod (xor if not int)", EncodePolicy::Int),
    ] {
        let mut bytes = [0usize; 2];
        let mut samples = [0usize; 2];
        for &(si, c) in &chunks {
            let b = encode(c, policy);
            let tg = wl.series[si].target;
            bytes[tg] += b.len();
            samples[tg] += c.len();
            if policy == EncodePolicy::Auto {
                auto_chunks.push(b);
            }
        }
        println!(
            "  {:<28} {:>10.3} {:>10.3} {:>10.3}",
            name,
            per_sample(bytes[0] + bytes[1], samples[0] + samples[1]),
            per_sample(bytes[0], samples[0]),
            per_sample(bytes[1], samples[1])
        );
    }

    // what the chooser picked
    let mut by_coding: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for (b, &(_, c)) in auto_chunks.iter().zip(&chunks) {
        let h = chunk::header(b).expect("header");
        let v = match h.value {
            ValueEncoding::Xor => "xor".to_string(),
            ValueEncoding::Const => "const".to_string(),
            ValueEncoding::Ulp {
                delta_of_delta,
                shift,
            } => format!(
                "steps in units of the last place{}{}",
                if delta_of_delta { ", dod" } else { "" },
                if shift > 0 { ", zero bits dropped" } else { "" }
            ),
            ValueEncoding::Int {
                decimals,
                delta_of_delta,
                no_bits,
                sparse,
                fixed_k,
            } => format!(
                "int k={decimals} {}{}{}{}",
                if delta_of_delta { "dod" } else { "delta" },
                if no_bits { " (no bits)" } else { "" },
                if sparse { " sparse" } else { "" },
                if fixed_k { " one-parameter" } else { "" }
            ),
        };
        let t = match h.time {
            TimeEncoding::Regular => "regular",
            TimeEncoding::Delta { sparse: false } => "delta",
            TimeEncoding::Delta { sparse: true } => "delta sparse",
            TimeEncoding::DeltaOfDelta { sparse: false } => "dod",
            TimeEncoding::DeltaOfDelta { sparse: true } => "dod sparse",
            TimeEncoding::Grid { sparse: false } => "grid",
            TimeEncoding::Grid { sparse: true } => "grid sparse",
        };
        let e = by_coding.entry(format!("{v} / ts {t}")).or_default();
        e.0 += 1;
        e.1 += c.len();
        e.2 += b.len();
    }
    println!("\nauto: codings chosen (value / timestamps): chunks, samples, bytes/sample");
    for (k, (n, s, b)) in &by_coding {
        println!("  {k:<36} {n:>8} {s:>10} {:>8.3}", per_sample(*b, *s));
    }

    // biggest metric families
    let mut by_name: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (b, &(si, c)) in auto_chunks.iter().zip(&chunks) {
        let e = by_name.entry(wl.series[si].name()).or_default();
        e.0 += c.len();
        e.1 += b.len();
    }
    let mut names: Vec<_> = by_name.into_iter().collect();
    names.sort_by_key(|(_, (_, b))| std::cmp::Reverse(*b));
    println!("\nauto: largest metric names (share of bytes, bytes/sample)");
    let total_bytes: usize = auto_chunks.iter().map(|b| b.len()).sum();
    for (n, (s, b)) in names.iter().take(12) {
        println!(
            "  {n:<48} {:>5.1}% {:>8.3}",
            100.0 * *b as f64 / total_bytes as f64,
            per_sample(*b, *s)
        );
    }

    // open-chunk memory: a writer per series, fed the first 60 or 120 samples
    for n in [60usize, MAX_SAMPLES_PER_CHUNK] {
        let mut heap = 0usize;
        let mut max = 0usize;
        for s in &wl.series {
            let mut w = ChunkWriter::new();
            for &(t, v) in s.samples.iter().take(n) {
                w.append(t, v);
            }
            heap += w.heap_bytes();
            max = max.max(w.heap_bytes());
        }
        println!(
            "\nopen chunk with {n} samples: heap {:.0} B mean, {max} B max; ChunkWriter inline {} B",
            heap as f64 / wl.series.len() as f64,
            std::mem::size_of::<ChunkWriter>()
        );
    }

    // single-core throughput over the whole workload, by wall clock and by thread CPU time
    let mut sink = 0usize;
    let (enc_wall, enc_cpu) = timed(|| {
        for &(_, c) in &chunks {
            let mut w = ChunkWriter::new();
            for &(t, v) in c {
                w.append(t, v);
            }
            sink += w.finish().len();
        }
    });
    black_box(sink);
    let (mut dec_wall, mut dec_cpu) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let mut acc = 0f64;
        let mut n = 0usize;
        let (w, c) = timed(|| {
            for b in &auto_chunks {
                let mut it = chunk::decode(b).expect("decode");
                for (_, v) in it.by_ref() {
                    acc += v;
                    n += 1;
                }
            }
        });
        black_box((acc, n));
        dec_wall = dec_wall.min(w);
        dec_cpu = dec_cpu.min(c);
    }
    let (mut bulk_wall, mut bulk_cpu) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let (mut ts, mut vs) = (Vec::with_capacity(256), Vec::with_capacity(256));
        let mut acc = 0f64;
        let mut n = 0usize;
        let (w, c) = timed(|| {
            for b in &auto_chunks {
                ts.clear();
                vs.clear();
                n += chunk::decode_into(b, &mut ts, &mut vs).expect("decode");
                acc += vs.iter().sum::<f64>();
            }
        });
        black_box((acc, n));
        bulk_wall = bulk_wall.min(w);
        bulk_cpu = bulk_cpu.min(c);
    }
    let m = total_samples as f64 / 1e6;
    println!(
        "\nthroughput, 1 thread, whole workload (M samples/s by wall clock / by thread CPU time):"
    );
    println!(
        "  encode (append + finish): {:.1} / {:.1}",
        m / enc_wall,
        m / enc_cpu
    );
    println!(
        "  decode (crc + iterate):   {:.1} / {:.1}",
        m / dec_wall,
        m / dec_cpu
    );
    println!(
        "  decode_into (crc + bulk into t/v buffers): {:.1} / {:.1}",
        m / bulk_wall,
        m / bulk_cpu
    );

    if std::env::var_os("INFERDB_BENCH_SUMMARY_ONLY").is_some() {
        return;
    }

    // criterion on a slice of the chunks (every 16th) to keep runs short
    let subset: Vec<&[(i64, f64)]> = chunks.iter().step_by(16).map(|&(_, c)| c).collect();
    let subset_samples: usize = subset.iter().map(|c| c.len()).sum();
    let encoded: Vec<&Vec<u8>> = auto_chunks.iter().step_by(16).collect();
    let mut crit = Criterion::default().configure_from_args();
    let mut g = crit.benchmark_group("chunk_encode");
    g.throughput(Throughput::Elements(subset_samples as u64));
    g.sample_size(10);
    g.bench_function("append_finish_auto", |b| {
        b.iter(|| {
            let mut n = 0;
            for c in &subset {
                let mut w = ChunkWriter::new();
                for &(t, v) in c.iter() {
                    w.append(t, v);
                }
                n += w.finish().len();
            }
            black_box(n)
        })
    });
    g.bench_function("append_only", |b| {
        b.iter(|| {
            let mut n = 0;
            for c in &subset {
                let mut w = ChunkWriter::new();
                for &(t, v) in c.iter() {
                    w.append(t, v);
                }
                n += w.len();
            }
            black_box(n)
        })
    });
    g.finish();
    let mut g = crit.benchmark_group("chunk_decode");
    g.throughput(Throughput::Elements(subset_samples as u64));
    g.sample_size(20);
    g.bench_function("decode_iterate_auto", |b| {
        b.iter(|| {
            let mut acc = 0f64;
            for c in &encoded {
                let mut it = chunk::decode(c).expect("decode");
                for (_, v) in it.by_ref() {
                    acc += v;
                }
            }
            black_box(acc)
        })
    });
    g.finish();
    crit.final_summary();
}
