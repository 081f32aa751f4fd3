//! Chunk decode profile on the realistic workload (`benches/workload.rs`): the chunks of
//! `benches/chunks.rs` (auto coding), decoded with `chunk::decode_into` several times, with the
//! rate per thread-CPU-second overall and per coding (value / timestamps), so a profiler
//! (`perf record`, `valgrind --tool=callgrind`) sees decoding only.
//!
//! `INFERDB_FIXTURES=tests/fixtures cargo run --release -p inferdb-storage --example
//! decode_perf -- [ROUNDS] [CACHE_FILE]`: with `CACHE_FILE` the encoded chunks are read from it
//! when it exists (else written to it), which skips generating and encoding the workload.

#[path = "../../benches/workload.rs"]
mod workload;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::{Read, Write};

use inferdb_storage::chunk::{self, ChunkWriter, TimeEncoding, ValueEncoding};

/// Block range at which the head also cuts chunks (2 h).
const BLOCK_MS: i64 = 2 * 3_600_000;

/// CPU time of this thread in seconds.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The workload's chunks, cut as the head cuts them and encoded with `finish`.
fn encode_workload() -> Vec<Vec<u8>> {
    let wl = workload::generate(&workload::Config::hours(24.0));
    let mut out = Vec::new();
    for s in &wl.series {
        let mut w = ChunkWriter::new();
        let mut start_t: i64 = 0;
        for &(t, v) in &s.samples {
            let crosses = !w.is_empty() && t.div_euclid(BLOCK_MS) != start_t.div_euclid(BLOCK_MS);
            if w.is_full() || crosses {
                out.push(w.finish());
                w = ChunkWriter::new();
            }
            if w.is_empty() {
                start_t = t;
            }
            w.append(t, v);
        }
        if !w.is_empty() {
            out.push(w.finish());
        }
    }
    out
}

fn load(path: Option<&str>) -> Vec<Vec<u8>> {
    if let Some(p) = path {
        if let Ok(mut f) = std::fs::File::open(p) {
            let mut all = Vec::new();
            f.read_to_end(&mut all).expect("read cache");
            let mut out = Vec::new();
            let mut rest = &all[..];
            while !rest.is_empty() {
                let n = chunk::encoded_len(rest).expect("cached chunk");
                out.push(rest[..n].to_vec());
                rest = &rest[n..];
            }
            return out;
        }
    }
    let chunks = encode_workload();
    if let Some(p) = path {
        let mut f = std::fs::File::create(p).expect("create cache");
        for c in &chunks {
            f.write_all(c).expect("write cache");
        }
    }
    chunks
}

fn coding(h: &chunk::ChunkHeader) -> String {
    let v = match h.value {
        ValueEncoding::Xor => "xor",
        ValueEncoding::Const => "const",
        ValueEncoding::Ulp { .. } => "steps (ulp)",
        ValueEncoding::Int { no_bits: true, .. } => "int nobits",
        ValueEncoding::Int {
            decimals: 0,
            fixed_k: true,
            ..
        } => "int k=0 one-param",
        ValueEncoding::Int { fixed_k: true, .. } => "int k>0 one-param",
        ValueEncoding::Int {
            decimals: 0,
            sparse: false,
            ..
        } => "int k=0",
        ValueEncoding::Int {
            decimals: 0,
            sparse: true,
            ..
        } => "int k=0 sparse",
        ValueEncoding::Int { sparse: false, .. } => "int k>0",
        ValueEncoding::Int { sparse: true, .. } => "int k>0 sparse",
    };
    let t = match h.time {
        TimeEncoding::Regular => "regular",
        TimeEncoding::Delta { sparse } | TimeEncoding::DeltaOfDelta { sparse } => {
            if sparse {
                "delta/dod sparse"
            } else {
                "delta/dod"
            }
        }
        TimeEncoding::Grid { sparse: true } => "grid sparse",
        TimeEncoding::Grid { sparse: false } => "grid",
    };
    format!("{v} / {t}")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let chunks = load(args.get(2).map(String::as_str));
    let total: usize = chunks
        .iter()
        .map(|c| usize::from(chunk::header(c).expect("header").num_samples))
        .sum();
    let bytes: usize = chunks.iter().map(Vec::len).sum();
    println!(
        "{} chunks, {} samples, {:.3} bytes/sample",
        chunks.len(),
        total,
        bytes as f64 / total as f64
    );
    let (mut ts, mut vs) = (Vec::with_capacity(256), Vec::with_capacity(256));
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let mut acc = 0f64;
        let c0 = thread_cpu();
        for c in &chunks {
            ts.clear();
            vs.clear();
            chunk::decode_into(c, &mut ts, &mut vs).expect("decode");
            acc += vs.iter().sum::<f64>();
        }
        let d = thread_cpu() - c0;
        black_box(acc);
        best = best.min(d);
    }
    println!(
        "decode_into, all chunks: {:.1} M samples per thread-CPU-second (best of {rounds})",
        total as f64 / best / 1e6
    );
    if std::env::var_os("DECODE_PERF_GROUPS").is_none() {
        return;
    }
    let mut groups: BTreeMap<String, Vec<&[u8]>> = BTreeMap::new();
    for c in &chunks {
        let h = chunk::header(c).expect("header");
        groups.entry(coding(&h)).or_default().push(c);
    }
    println!(
        "  {:<32} {:>10} {:>8} {:>10}",
        "coding", "samples", "share", "M/s"
    );
    for (name, cs) in &groups {
        let n: usize = cs
            .iter()
            .map(|c| usize::from(chunk::header(c).expect("header").num_samples))
            .sum();
        let mut best = f64::MAX;
        for _ in 0..rounds {
            let c0 = thread_cpu();
            for c in cs {
                ts.clear();
                vs.clear();
                chunk::decode_into(c, &mut ts, &mut vs).expect("decode");
                black_box(&vs);
            }
            best = best.min(thread_cpu() - c0);
        }
        println!(
            "  {name:<32} {n:>10} {:>7.1}% {:>10.1}",
            100.0 * n as f64 / total as f64,
            n as f64 / best / 1e6
        );
    }
}
