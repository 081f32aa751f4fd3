//! Study of value codings over a data folder's blocks (issue #20, bytes; figures in
//! BENCHMARKS.md "Imported history"): for each kind of series, the chunk bytes when re-chunked
//! at several sizes; for float series the bits of XOR against steps in units of the last place
//! (`chunk/ulp.rs`) in their variants; for `_sum` the order-0 floor of the steps and the bits of
//! a table of recent steps.
//!
//! `value_study DIR [DUMP_DIR]`: DUMP_DIR receives the `_sum` streams (raw value bits, XOR of
//! consecutive values, steps as i64 LE) for `xz -9e` / `zstd -19` as an empirical floor.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;

use inferdb_storage::chunk::ChunkWriter;
use inferdb_storage::{Db, Labels, Options};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Per kind: series, samples, chunks and bytes at each chunk size.
type BySize = BTreeMap<&'static str, (u64, u64, Vec<u64>, Vec<u64>)>;

/// Per kind, over XOR-or-step chunks of 960: samples, XOR bits, step bits (fixed Rice), their
/// differences' bits, adaptive bits, exceptions, best of both per chunk.
type Floats = BTreeMap<&'static str, (u64, u64, u64, u64, u64, u64, u64)>;

fn class_of(l: &Labels, hist_bases: &HashSet<String>) -> &'static str {
    let name = l.metric_name().unwrap_or("");
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

/// Binary exponent of the last mantissa bit set: `v == m * 2^e` with odd `m`.
fn low_exp(v: f64) -> Option<i32> {
    if !v.is_finite() {
        return None;
    }
    if v == 0.0 {
        return Some(i32::MAX);
    }
    let b = v.to_bits();
    let exp = ((b >> 52) & 0x7ff) as i32;
    let man = b & ((1 << 52) - 1);
    let (m, e) = if exp == 0 {
        (man, -1074)
    } else {
        (man | (1 << 52), exp - 1075)
    };
    Some(e + m.trailing_zeros() as i32)
}

fn rice_bits(z: &[u64]) -> (u32, u64) {
    (0..64)
        .map(|k| {
            let bits: u64 = z
                .iter()
                .map(|&x| {
                    let q = x >> k;
                    if q < 16 {
                        q + 1 + k as u64
                    } else {
                        16 + 6 + (64 - x.leading_zeros() as u64 - 1)
                    }
                })
                .sum();
            (k, bits)
        })
        .min_by_key(|x| x.1)
        .unwrap()
}

/// The unit of the last place of `v`'s binade (the spacing of floats around `v`).
fn ulp(v: f64) -> f64 {
    let e = (v.to_bits() >> 52) & 0x7ff;
    if e > 52 {
        f64::from_bits((e - 52) << 52)
    } else {
        f64::from_bits(1u64 << (e.max(1) - 1))
    }
}

/// `k` with `prev + k * ulp(prev) == cur` bit-exactly.
fn ulp_delta(prev: f64, cur: f64) -> Option<i64> {
    if !prev.is_finite() || !cur.is_finite() {
        return None;
    }
    let u = ulp(prev);
    let k = ((cur - prev) / u).round();
    if k.is_nan() || k.abs() >= 9.0e18 {
        return None;
    }
    let k = k as i64;
    (((prev + (k as f64) * u).to_bits()) == cur.to_bits()).then_some(k)
}

/// Bits of an adaptive Rice coder without a cap on its state (k = bitlen(mean)).
fn adaptive_bits(z: &[u64]) -> u64 {
    let mut m: u128 = 0;
    let mut bits = 0u64;
    for &x in z {
        let k = 128 - (m >> 4).leading_zeros() as u64;
        let q = x >> k.min(63);
        bits += if q < 16 {
            q + 1 + k
        } else {
            16 + 6 + (64 - x.leading_zeros() as u64)
        };
        m = m - (m >> 4) + u128::from(x);
    }
    bits
}

fn zz(x: i64) -> u64 {
    ((x << 1) ^ (x >> 63)) as u64
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = Path::new(&args[0]);
    let dump = args.get(1).map(Path::new);
    let db = Db::open(
        dir,
        Options {
            read_only: true,
            ..Options::default()
        },
    )?;
    let blocks = db.open_blocks();
    let mut hist_bases = HashSet::new();
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
    let sizes = [120usize, 240, 480, 960, 1920];
    // class -> (series, samples, chunks at each size, bytes at each size)
    let mut by: BySize = BTreeMap::new();
    // _sum study: per 120-chunk: XOR bits, ulp-int delta bits (fixed Rice), dod bits
    let (mut xor_b, mut ulp_d, mut ulp_dd, mut nsum, mut fails) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut log_sum, mut log_n) = (0f64, 0u64);
    let mut dump_f = match dump {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            Some((
                std::io::BufWriter::new(std::fs::File::create(d.join("sum_ulp_delta.i64"))?),
                std::io::BufWriter::new(std::fs::File::create(d.join("sum_bits.u64"))?),
                std::io::BufWriter::new(std::fs::File::create(d.join("sum_xor.u64"))?),
            ))
        }
        None => None,
    };
    let mut bitlen_hist = [0u64; 65];
    let (mut tab_bits, mut tab_hits) = (0u64, 0u64);
    let mut fl: Floats = BTreeMap::new();
    for b in &blocks {
        for s in b.select(&[], i64::MIN, i64::MAX)? {
            let class = class_of(&s.labels, &hist_bases);
            let (mut ts, mut vs) = (Vec::new(), Vec::new());
            for (_, r) in &s.chunks {
                let mut it = b.decode_chunk(*r)?;
                it.decode_into(&mut ts, &mut vs);
            }
            let e = by
                .entry(class)
                .or_insert_with(|| (0, 0, vec![0; sizes.len()], vec![0; sizes.len()]));
            e.0 += 1;
            e.1 += ts.len() as u64;
            for (si, &sz) in sizes.iter().enumerate() {
                for (tc, vc) in ts.chunks(sz).zip(vs.chunks(sz)) {
                    let mut w = ChunkWriter::new();
                    for (&t, &v) in tc.iter().zip(vc) {
                        w.append(t, v);
                    }
                    e.2[si] += 1;
                    e.3[si] += w.finish().len() as u64;
                }
            }
            let c = &class;
            for (tc, vc) in ts.chunks(960).zip(vs.chunks(960)) {
                let mut w = ChunkWriter::new();
                for (&t, &v) in tc.iter().zip(vc) {
                    w.append(t, v);
                }
                let h = inferdb_storage::chunk::header(&w.finish())?;
                if !matches!(
                    h.value,
                    inferdb_storage::chunk::ValueEncoding::Xor
                        | inferdb_storage::chunk::ValueEncoding::Ulp { .. }
                ) {
                    continue;
                }
                let xor_bytes = w
                    .finish_with(inferdb_storage::chunk::EncodePolicy::Xor)
                    .unwrap()
                    .len() as u64;
                let mut z = Vec::new();
                let mut zd = Vec::new();
                let mut exc = 0u64;
                let mut pk = 0i64;
                for p in vc.windows(2) {
                    match ulp_delta(p[0], p[1]) {
                        Some(k) => {
                            z.push(zz(k));
                            zd.push(zz(k.wrapping_sub(pk)));
                            pk = k;
                        }
                        None => exc += 1,
                    }
                }
                if c == &"hist_sum" {
                    if let Some((f, _, _)) = dump_f.as_mut() {
                        for p in vc.windows(2) {
                            let k = ulp_delta(p[0], p[1]).unwrap_or(i64::MIN);
                            f.write_all(&k.to_le_bytes())?;
                        }
                    }
                    for &x in &z {
                        let b = 64 - x.leading_zeros() as usize;
                        bitlen_hist[b] += 1;
                    }
                }
                // a move-to-front table of the last 8 distinct steps: a hit costs 1 + 3 bits,
                // a miss 1 bit more than its Rice code
                if c == &"hist_sum" {
                    let mut table: Vec<i64> = Vec::new();
                    let mut miss = Vec::new();
                    let mut hits = 0u64;
                    for p in vc.windows(2) {
                        let Some(k) = ulp_delta(p[0], p[1]) else {
                            continue;
                        };
                        if let Some(i) = table.iter().position(|&x| x == k) {
                            hits += 1;
                            table.remove(i);
                        } else {
                            miss.push(zz(k));
                            if table.len() == 8 {
                                table.pop();
                            }
                        }
                        table.insert(0, k);
                    }
                    tab_bits += hits * 4 + miss.len() as u64 + rice_bits(&miss).1 + 6 + exc * 87;
                    tab_hits += hits;
                }
                let fixed = rice_bits(&z).1 + 6 + exc * 86;
                let fixed_d = rice_bits(&zd).1 + 6 + exc * 86;
                let adapt = adaptive_bits(&z) + exc * 86;
                let e = fl.entry(class).or_default();
                e.0 += vc.len() as u64;
                e.1 += xor_bytes * 8;
                e.2 += fixed;
                e.3 += fixed_d;
                e.4 += adapt;
                e.5 += exc;
                e.6 += xor_bytes * 8
                    - (xor_bytes * 8)
                        .saturating_sub(fixed.min(adapt) + 8 * 20)
                        .min(xor_bytes * 8);
            }
            if class != "hist_sum" {
                continue;
            }
            for vc in vs.chunks(120) {
                nsum += vc.len() as u64;
                let mut prev = vc[0].to_bits();
                for &v in &vc[1..] {
                    let x = v.to_bits() ^ prev;
                    xor_b += if x == 0 {
                        1
                    } else {
                        2 + 64
                            - u64::from(x.leading_zeros().min(31))
                            - u64::from(x.trailing_zeros())
                    };
                    if let Some((f, _, xf)) = dump_f.as_mut() {
                        let _ = f;
                        xf.write_all(&x.to_le_bytes())?;
                    }
                    prev = v.to_bits();
                }
                if let Some((_, bf, _)) = dump_f.as_mut() {
                    for &v in vc {
                        bf.write_all(&v.to_bits().to_le_bytes())?;
                    }
                }
                let e = vc.iter().map(|&v| low_exp(v)).collect::<Option<Vec<_>>>();
                let Some(e) = e else {
                    fails += 1;
                    continue;
                };
                let emin = *e.iter().min().unwrap();
                if emin == i32::MAX {
                    continue;
                }
                let ns: Option<Vec<i64>> = vc
                    .iter()
                    .map(|&v| {
                        let n = v * 2f64.powi(-emin);
                        (n.abs() < 9.2e18 && n.fract() == 0.0).then_some(n as i64)
                    })
                    .collect();
                let Some(ns) = ns else {
                    fails += 1;
                    continue;
                };
                let d: Vec<i64> = ns.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
                let dd: Vec<i64> = d.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
                for &x in &d {
                    if x != 0 {
                        log_sum += (x.unsigned_abs() as f64).log2();
                        log_n += 1;
                    }
                }
                let zd: Vec<u64> = d.iter().map(|&x| zz(x)).collect();
                let zdd: Vec<u64> = dd.iter().map(|&x| zz(x)).collect();
                ulp_d += rice_bits(&zd).1 + 6;
                ulp_dd += rice_bits(&zdd).1 + 6 + 64;
            }
        }
    }
    println!("class        series    samples  per size {sizes:?}: chunks / bytes / B/sample");
    for (c, (n, s, ch, by)) in &by {
        print!("{c:<12} {n:>6} {s:>10}");
        for (k, b) in ch.iter().zip(by) {
            print!("  {k}/{b}/{:.3}", *b as f64 / *s as f64);
        }
        println!();
    }
    for (c, (n, x, f, fd, a, exc, best)) in &fl {
        let b = |v: &u64| *v as f64 / *n as f64;
        println!("XOR chunks (960) of {c}: {n} samples: chunk bits/sample {:.2}; ulp-delta fixed Rice {:.2}, its deltas {:.2}, adaptive {:.2}; exceptions {exc}; best-of per chunk (+20 B header) {:.2}", b(x), b(f), b(fd), b(a), b(best));
    }
    let tot: u64 = bitlen_hist.iter().sum();
    let mut h = 0f64;
    let mut mean = 0f64;
    for (b, &c) in bitlen_hist.iter().enumerate() {
        if c > 0 {
            let p = c as f64 / tot as f64;
            h -= p * p.log2();
            mean += p * (b.saturating_sub(1)) as f64;
        }
    }
    println!("_sum steps: {tot} codes; mean bits below the top bit {mean:.2} + entropy of the bit length {h:.2} = {:.2} bits/step (order-0 floor of the steps, exceptions apart)", mean + h);
    println!(
        "_sum with a table of 8 recent steps: {:.2} bits/sample, hits {tab_hits}",
        tab_bits as f64 / 1013760.0
    );
    let per = |b: u64| b as f64 / nsum as f64;
    println!(
        "_sum: {nsum} samples; XOR {:.2} bits/sample; ulp-int delta (fixed Rice) {:.2}; dod {:.2}; fails {fails}; mean log2|delta in ulps| {:.2}",
        per(xor_b),
        per(ulp_d),
        per(ulp_dd),
        log_sum / log_n.max(1) as f64
    );
    Ok(())
}
