//! Property tests of the chunk codings: bit-exact round trips and seeking.

use inferdb_storage::chunk::{
    decode, encoded_len, header, meta, ChunkWriter, EncodePolicy, TimeEncoding, ValueEncoding,
    MAX_SAMPLES_PER_CHUNK,
};
use proptest::prelude::*;

/// Strictly increasing timestamps: a start and positive gaps of several shapes.
fn timestamps() -> impl Strategy<Value = Vec<i64>> {
    let gaps = prop_oneof![
        // arbitrary positive gaps
        prop::collection::vec(1i64..(1 << 40), 0..140),
        // scrape-like: a fixed interval with occasional jitter
        (1i64..100_000, prop::collection::vec(-50i64..50, 0..140)).prop_map(|(iv, j)| j
            .into_iter()
            .map(|x| if x.abs() < 40 { iv } else { (iv + x).max(1) })
            .collect()),
        // tiny gaps
        prop::collection::vec(1i64..4, 0..140),
    ];
    (-(1i64 << 62)..(1i64 << 62), gaps).prop_map(|(start, gaps)| {
        let mut t = start;
        let mut out = Vec::with_capacity(gaps.len() + 1);
        out.push(t);
        for g in gaps {
            t += g;
            out.push(t);
        }
        out
    })
}

fn special() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(-f64::NAN),
        Just(f64::from_bits(0x7ff0_0000_0000_0002)), // staleness marker
        Just(f64::from_bits(0x7ff8_0000_0000_0001)),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(0.0),
        Just(f64::MIN_POSITIVE),
        Just(f64::MAX),
        Just(9007199254740992.0),
        Just(-9007199254740993.0),
    ]
}

/// Any value, weighted towards what real series hold.
fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => any::<u64>().prop_map(f64::from_bits),
        2 => (-1_000_000i64..1_000_000).prop_map(|n| n as f64),
        2 => (-1_000_000i64..1_000_000, 0u32..7).prop_map(|(n, k)| n as f64 / 10f64.powi(k as i32)),
        1 => special(),
    ]
}

/// Values that can stay in the integer coding: whole numbers or few decimals.
fn int_values(n: usize) -> impl Strategy<Value = Vec<f64>> {
    prop_oneof![
        prop::collection::vec((-(1i64 << 53)..(1i64 << 53)).prop_map(|n| n as f64), n),
        // a counter: growing by uneven steps
        (0u64..1 << 40, prop::collection::vec(0u64..100_000, n)).prop_map(|(s, steps)| {
            let mut v = s;
            steps
                .into_iter()
                .map(|d| {
                    v += d;
                    v as f64
                })
                .collect()
        }),
        (
            0u32..7,
            prop::collection::vec(-10_000_000i64..10_000_000, n)
        )
            .prop_map(|(k, ns)| ns
                .into_iter()
                .map(|n| n as f64 / 10f64.powi(k as i32))
                .collect()),
    ]
}

fn samples() -> impl Strategy<Value = Vec<(i64, f64)>> {
    timestamps().prop_flat_map(|ts| {
        let n = ts.len();
        prop_oneof![
            prop::collection::vec(value(), n),
            int_values(n),
            // runs of repeated values
            prop::collection::vec((value(), 1usize..30), 1..20).prop_map(move |runs| runs
                .into_iter()
                .flat_map(|(v, r)| std::iter::repeat_n(v, r))
                .cycle()
                .take(n)
                .collect()),
        ]
        .prop_map(move |vs| ts.iter().copied().zip(vs).collect::<Vec<_>>())
    })
}

fn bits(s: &[(i64, f64)]) -> Vec<(i64, u64)> {
    s.iter().map(|&(t, v)| (t, v.to_bits())).collect()
}

fn decode_all(b: &[u8]) -> Vec<(i64, u64)> {
    let mut it = decode(b).expect("decode");
    let out: Vec<_> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
    assert!(it.err().is_none(), "{:?}", it.err());
    // the bulk decoder yields the same samples
    let (mut ts, mut vs) = (Vec::new(), Vec::new());
    let n = inferdb_storage::chunk::decode_into(b, &mut ts, &mut vs).expect("decode_into");
    let bulk: Vec<_> = ts.iter().zip(&vs).map(|(&t, v)| (t, v.to_bits())).collect();
    assert_eq!(n, bulk.len());
    assert_eq!(bulk, out, "decode_into differs from iteration");
    out
}

fn writer(s: &[(i64, f64)]) -> ChunkWriter {
    let mut w = ChunkWriter::new();
    for &(t, v) in s {
        w.append(t, v);
    }
    w
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn auto_round_trips_bit_exactly(s in samples()) {
        let w = writer(&s);
        let want = bits(&s);
        prop_assert_eq!(w.len(), s.len());
        // the open chunk reads back as it is
        let open: Vec<_> = w.iter().map(|(t, v)| (t, v.to_bits())).collect();
        prop_assert_eq!(&open, &want);
        let b = w.finish();
        prop_assert_eq!(&decode_all(&b), &want);
        prop_assert_eq!(encoded_len(&b).unwrap(), b.len());
        // bytes after the chunk are ignored
        let mut padded = b.clone();
        padded.extend_from_slice(&[0xff, 0, 1, 2]);
        prop_assert_eq!(&decode_all(&padded), &want);
        prop_assert_eq!(encoded_len(&padded).unwrap(), b.len());
        let m = meta(&b).unwrap();
        prop_assert_eq!(usize::from(m.num_samples), s.len());
        if let (Some(f), Some(l)) = (s.first(), s.last()) {
            prop_assert_eq!(m.min_time, f.0);
            prop_assert_eq!(m.max_time, l.0);
            prop_assert_eq!(w.min_time(), f.0);
            prop_assert_eq!(w.max_time(), l.0);
            prop_assert_eq!(w.last().map(|(t, v)| (t, v.to_bits())), Some((l.0, l.1.to_bits())));
        }
        prop_assert_eq!(usize::from(header(&b).unwrap().num_samples), s.len());
    }

    /// Cumulative float sums (as a histogram's `_sum`), with resets, NaN, staleness markers,
    /// infinities and signed zeros among them: bit-exact whatever coding `finish` picks
    /// (steps in units of the last place where they are smaller than XOR).
    #[test]
    fn float_sums_round_trip_bit_exactly(
        s in timestamps().prop_flat_map(|ts| {
            let n = ts.len();
            (
                prop::collection::vec(
                    prop_oneof![
                        8 => (0.0f64..50.0).prop_map(Some),
                        1 => Just(None),
                    ],
                    n,
                ),
                prop::collection::vec(prop_oneof![20 => Just(None), 1 => special().prop_map(Some)], n),
                1e-6f64..1e6,
            )
                .prop_map(move |(incs, sp, start)| {
                    let mut sum = start;
                    ts.iter()
                        .zip(incs.iter().zip(&sp))
                        .map(|(&t, (inc, sp))| {
                            sum = match inc {
                                Some(d) => sum + d,
                                None => 0.0, // a reset
                            };
                            (t, sp.unwrap_or(sum))
                        })
                        .collect::<Vec<_>>()
                })
        })
    ) {
        let w = writer(&s);
        let b = w.finish();
        prop_assert_eq!(decode_all(&b), bits(&s));
        let xor = w.finish_with(EncodePolicy::Xor).unwrap();
        prop_assert!(b.len() <= xor.len() + 2, "{} vs XOR {}", b.len(), xor.len());
    }

    #[test]
    fn xor_round_trips_bit_exactly(s in samples()) {
        let w = writer(&s);
        let b = w.finish_with(EncodePolicy::Xor).unwrap();
        let h = header(&b).unwrap();
        prop_assert_eq!(h.value, ValueEncoding::Xor);
        prop_assert_eq!(h.time, TimeEncoding::DeltaOfDelta { sparse: false });
        prop_assert_eq!(decode_all(&b), bits(&s));
    }

    #[test]
    fn int_round_trips_bit_exactly(
        s in timestamps().prop_flat_map(|ts| {
            let n = ts.len();
            int_values(n).prop_map(move |vs| ts.iter().copied().zip(vs).collect::<Vec<_>>())
        })
    ) {
        let w = writer(&s);
        let b = w.finish_with(EncodePolicy::Int).expect("integral values stay integer-coded");
        let h = header(&b).unwrap();
        prop_assert!(matches!(h.value, ValueEncoding::Int { .. }), "{:?}", h.value);
        prop_assert_eq!(decode_all(&b), bits(&s));
        // and the chooser never does worse than both fixed codings
        let auto = w.finish();
        let xor = w.finish_with(EncodePolicy::Xor).unwrap();
        prop_assert!(auto.len() <= b.len().max(xor.len()) + 2);
        prop_assert_eq!(decode_all(&auto), bits(&s));
    }

    /// The same with one Rice parameter for the chunk's values.
    #[test]
    fn int_fixed_rice_round_trips_bit_exactly(
        s in timestamps().prop_flat_map(|ts| {
            let n = ts.len();
            int_values(n).prop_map(move |vs| ts.iter().copied().zip(vs).collect::<Vec<_>>())
        })
    ) {
        let w = writer(&s);
        let b = w.finish_with(EncodePolicy::IntFixedRice).expect("integral values stay integer-coded");
        let h = header(&b).unwrap();
        prop_assert!(matches!(h.value, ValueEncoding::Int { fixed_k: true, .. }), "{:?}", h.value);
        prop_assert_eq!(decode_all(&b), bits(&s));
    }

    /// Integer values with residuals of every size (escapes and staleness markers included)
    /// on regular or nearly regular timestamps, whose values the bulk decoder reads in runs.
    #[test]
    fn int_values_on_regular_timestamps_round_trip(
        start in -(1i64 << 50)..(1i64 << 50),
        step in 1i64..100_000,
        jitter in prop::collection::vec((2usize..120, 0.0f64..0.5), 0..4),
        steps in prop::collection::vec((0u32..60, any::<u64>()), 1..120),
        k in 0u8..4,
        stale in prop::collection::vec(1usize..120, 0..3),
    ) {
        let mut n: i64 = 0;
        let mut s = Vec::new();
        for (i, (bits, r)) in steps.iter().enumerate() {
            let d = (r & ((1u64 << bits) - 1)) as i64;
            let d = if r >> 63 == 1 { -d } else { d };
            n = (n + d).clamp(-(1 << 53), 1 << 53);
            let mut t = start + i as i64 * step;
            if let Some((_, f)) = jitter.iter().find(|(j, _)| *j == i) {
                t += (step as f64 * f) as i64;
            }
            let v = if stale.contains(&i) {
                f64::from_bits(0x7ff0_0000_0000_0002)
            } else {
                n as f64 / [1.0, 10.0, 100.0, 1000.0][usize::from(k)]
            };
            s.push((t, v));
        }
        let w = writer(&s);
        let want = bits(&s);
        prop_assert_eq!(&decode_all(&w.finish()), &want);
        for policy in [EncodePolicy::Int, EncodePolicy::IntFixedRice] {
            if let Some(b) = w.finish_with(policy) {
                prop_assert_eq!(&decode_all(&b), &want);
            }
        }
    }

    /// Damaged chunks (bytes flipped, the chunk cut short, the checksum not verified): bulk
    /// decoding, from the start or after some samples were iterated, yields exactly what
    /// iteration yields, errors included, and nothing panics.
    #[test]
    fn damaged_chunks_bulk_decode_like_iteration(
        s in samples(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        cut in any::<prop::sample::Index>(),
        skip in 0usize..6,
        policy in prop::sample::select(vec![
            EncodePolicy::Auto,
            EncodePolicy::Xor,
            EncodePolicy::Int,
            EncodePolicy::IntFixedRice,
        ]),
    ) {
        let w = writer(&s);
        let mut b = w.finish_with(policy).unwrap_or_else(|| w.finish());
        for (i, x) in &flips {
            let i = i.index(b.len());
            b[i] ^= x;
        }
        let full = b.clone();
        b.truncate(cut.index(b.len() + 1).max(full.len() * 3 / 4));
        for data in [&full[..], &b[..]] {
            inferdb_storage::fuzzing::chunk_decode(data);
            let Ok(mut it) = inferdb_storage::chunk::decode_unverified(data) else {
                continue;
            };
            let want: Vec<_> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
            let want_err = it.err().map(|e| e.to_string());
            let mut it = inferdb_storage::chunk::decode_unverified(data).unwrap();
            let mut got: Vec<_> = it.by_ref().take(skip).map(|(t, v)| (t, v.to_bits())).collect();
            let (mut ts, mut vs) = (vec![1], vec![2.0]);
            let n = it.decode_into(&mut ts, &mut vs);
            prop_assert_eq!(n + 1, ts.len());
            prop_assert_eq!(ts.len(), vs.len());
            got.extend(ts[1..].iter().zip(&vs[1..]).map(|(&t, v)| (t, v.to_bits())));
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(it.err().map(|e| e.to_string()), want_err);
        }
    }

    #[test]
    fn seek_finds_first_at_or_after(s in samples(), targets in prop::collection::vec(any::<i64>(), 1..8)) {
        let b = writer(&s).finish();
        // one fresh iterator per target
        for &t in &targets {
            let mut it = decode(&b).unwrap();
            let want = s.iter().find(|x| x.0 >= t).map(|&(t, v)| (t, v.to_bits()));
            prop_assert_eq!(it.seek(t).map(|(t, v)| (t, v.to_bits())), want);
            // next continues after the found sample
            let after = want.and_then(|w| s.iter().find(|x| x.0 > w.0)).map(|&(t, v)| (t, v.to_bits()));
            if want.is_some() {
                prop_assert_eq!(it.next().map(|(t, v)| (t, v.to_bits())), after);
            }
        }
        // sorted targets on one iterator
        let mut sorted = targets.clone();
        sorted.sort();
        let mut it = decode(&b).unwrap();
        for &t in &sorted {
            let want = s.iter().find(|x| x.0 >= t).map(|&(t, v)| (t, v.to_bits()));
            prop_assert_eq!(it.seek(t).map(|(t, v)| (t, v.to_bits())), want);
        }
        prop_assert!(it.err().is_none());
    }
}

#[test]
fn extreme_timestamps_round_trip() {
    let mut s = vec![(i64::MIN, 1.0), (i64::MIN + 1, 2.0), (-1, -0.0), (0, 0.0)];
    s.push((i64::MAX - 1, f64::NAN));
    s.push((i64::MAX, f64::from_bits(0x7ff0_0000_0000_0002)));
    let w = writer(&s);
    assert_eq!(decode_all(&w.finish()), bits(&s));
    assert_eq!(
        decode_all(&w.finish_with(EncodePolicy::Xor).unwrap()),
        bits(&s)
    );
    let m = meta(&w.finish()).unwrap();
    assert_eq!((m.min_time, m.max_time), (i64::MIN, i64::MAX));
}

#[test]
fn special_values_in_every_coding() {
    let specials = [
        -0.0,
        f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0002),
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for &sp in &specials {
        // a special value in an otherwise integral chunk, at the start, middle and end
        for pos in [0usize, 5, 9] {
            let s: Vec<_> = (0..10)
                .map(|i| (i as i64 * 1000, if i == pos { sp } else { i as f64 }))
                .collect();
            let w = writer(&s);
            assert_eq!(decode_all(&w.finish()), bits(&s));
            assert_eq!(
                decode_all(&w.finish_with(EncodePolicy::Xor).unwrap()),
                bits(&s)
            );
            if pos == 0 || sp == -0.0 {
                // a leading special value or -0.0 (finite, not integral) means XOR
                assert!(w.finish_with(EncodePolicy::Int).is_none());
            } else {
                // NaN, the staleness marker and infinities are exceptions in integer chunks
                let b = w.finish_with(EncodePolicy::Int).expect("exception");
                assert!(matches!(
                    header(&b).unwrap().value,
                    ValueEncoding::Int { .. }
                ));
                assert_eq!(decode_all(&b), bits(&s));
                let auto = w.finish();
                assert!(matches!(
                    header(&auto).unwrap().value,
                    ValueEncoding::Int { .. }
                ));
            }
        }
        // a constant special value
        let s: Vec<_> = (0..10).map(|i| (i * 1000, sp)).collect();
        let b = writer(&s).finish();
        assert_eq!(header(&b).unwrap().value, ValueEncoding::Const);
        assert_eq!(decode_all(&b), bits(&s));
    }
}

#[test]
fn chosen_codings_on_typical_series() {
    let t = |i: i64| 1_796_198_400_000 + i * 15_000;
    let n = MAX_SAMPLES_PER_CHUNK as i64;
    // constant zero counter, regular scrapes
    let b = writer(&(0..n).map(|i| (t(i), 0.0)).collect::<Vec<_>>()).finish();
    let h = header(&b).unwrap();
    assert_eq!(
        (h.time, h.value),
        (TimeEncoding::Regular, ValueEncoding::Const)
    );
    assert!(b.len() < 24, "{}", b.len());
    // constant value, scrapes with rare jitter: run-length coded timestamps
    let s: Vec<_> = (0..n)
        .map(|i| (t(i) + if i % 40 == 7 { 13 } else { 0 }, 42.0))
        .collect();
    let b = writer(&s).finish();
    let h = header(&b).unwrap();
    assert_eq!(h.time, TimeEncoding::Grid { sparse: true }, "{h:?}");
    assert!(b.len() < 40, "{}", b.len());
    assert_eq!(decode_all(&b), bits(&s));
    let m = meta(&b).unwrap();
    assert_eq!((m.min_time, m.max_time), (s[0].0, s[s.len() - 1].0));
    // a shifted grid (interval change mid-chunk): delta coding
    let s: Vec<_> = (0..n)
        .map(|i| (t(i) + if i >= 60 { 5_000 } else { 0 }, 42.0))
        .collect();
    let b = writer(&s).finish();
    assert_eq!(
        header(&b).unwrap().time,
        TimeEncoding::Delta { sparse: true }
    );
    assert_eq!(decode_all(&b), bits(&s));
    // a rarely moving integer gauge (temperature): run-length coded values
    let s: Vec<_> = (0..n).map(|i| (t(i), 40.0 + (i / 30) as f64)).collect();
    let b = writer(&s).finish();
    let h = header(&b).unwrap();
    assert!(
        matches!(
            h.value,
            ValueEncoding::Int {
                decimals: 0,
                sparse: true,
                ..
            }
        ),
        "{h:?}"
    );
    assert_eq!(decode_all(&b), bits(&s));
    // power in W with 3 decimals
    let s: Vec<_> = (0..n)
        .map(|i| (t(i), (412_736 + (i * 7919) % 5000) as f64 / 1000.0))
        .collect();
    let b = writer(&s).finish();
    assert!(
        matches!(
            header(&b).unwrap().value,
            ValueEncoding::Int { decimals: 3, .. }
        ),
        "{:?}",
        header(&b).unwrap()
    );
    let x = writer(&s).finish_with(EncodePolicy::Xor).unwrap();
    assert!(b.len() < x.len(), "int {} vs xor {}", b.len(), x.len());
    // a full-precision gauge is no integer: XOR, or steps in units of the last place where
    // those are smaller (a smooth curve's steps are small against its values)
    let s: Vec<_> = (0..n)
        .map(|i| (t(i), (i as f64 * 0.37).sin().abs() / 3.0))
        .collect();
    let b = writer(&s).finish();
    let x = writer(&s).finish_with(EncodePolicy::Xor).unwrap();
    match header(&b).unwrap().value {
        ValueEncoding::Xor => assert_eq!(b, x),
        ValueEncoding::Ulp { .. } => assert!(b.len() < x.len()),
        other => panic!("{other:?}"),
    }
    assert_eq!(decode_all(&b), bits(&s));
    // random bits (every binade): no step reaches most values, XOR
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let s: Vec<_> = (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (t(i), f64::from_bits(x))
        })
        .collect();
    let b = writer(&s).finish();
    assert_eq!(header(&b).unwrap().value, ValueEncoding::Xor);
    assert_eq!(decode_all(&b), bits(&s));
}

#[test]
fn snapshot_decodes_like_finish() {
    // a jittery counter with a stale marker: finish re-codes it, snapshot does not
    let s: Vec<_> = (0..100i64)
        .map(|i| {
            let v = if i == 50 {
                f64::from_bits(0x7ff0_0000_0000_0002)
            } else {
                (i * 3) as f64
            };
            (i * 15_000 + (i * 7) % 3, v)
        })
        .collect();
    let w = writer(&s);
    let (snap, fin) = (w.snapshot(), w.finish());
    assert_ne!(snap, fin, "finish picks another coding");
    assert!(fin.len() <= snap.len());
    assert_eq!(decode_all(&snap), bits(&s));
    assert_eq!(decode_all(&fin), bits(&s));
}

#[test]
fn reset_writer_reuses_its_buffer() {
    let mut w = ChunkWriter::new();
    for i in 0..120i64 {
        w.append(i * 1000, (i as f64 * 0.37).sin());
    }
    let cap = w.heap_bytes();
    w.reset();
    assert!(w.is_empty());
    assert_eq!(w.heap_bytes(), cap, "buffer kept");
    let s: Vec<_> = (0..50i64)
        .map(|i| (5_000_000 + i * 15_000, (i * 3) as f64))
        .collect();
    for &(t, v) in &s {
        w.append(t, v);
    }
    // no bit of the previous chunk leaks into the new one
    assert_eq!(decode_all(&w.snapshot()), bits(&s));
    assert_eq!(decode_all(&w.finish()), bits(&s));
    assert_eq!(w.finish(), writer(&s).finish());
}

#[test]
fn writer_memory_is_small() {
    let mut w = ChunkWriter::new();
    let mut v = 1e6;
    for i in 0..MAX_SAMPLES_PER_CHUNK as i64 {
        v += ((i * 7919) % 3000) as f64;
        w.append(i * 15_000 + (i * 31) % 5, v);
    }
    assert!(w.heap_bytes() <= 1024, "{}", w.heap_bytes());
    assert!(w.heap_bytes() >= w.finish().len() / 2);
    eprintln!("sizes {:?}", ChunkWriter::debug_sizes());
    assert!(std::mem::size_of::<ChunkWriter>() <= 160);
}

#[test]
fn stale_markers_stay_in_integer_chunks() {
    let stale = f64::from_bits(0x7ff0_0000_0000_0002);
    // a counter that goes stale (failed scrapes) a few times
    let s: Vec<_> = (0..120i64)
        .map(|i| {
            let v = if i % 30 == 29 {
                stale
            } else {
                (1000 + i * 37) as f64
            };
            (i * 15_000, v)
        })
        .collect();
    let w = writer(&s);
    let b = w.finish();
    assert!(matches!(
        header(&b).unwrap().value,
        ValueEncoding::Int { .. }
    ));
    assert_eq!(decode_all(&b), bits(&s));
    let x = w.finish_with(EncodePolicy::Xor).unwrap();
    assert!(b.len() * 2 < x.len(), "int {} vs xor {}", b.len(), x.len());
    assert_eq!(
        w.last().map(|(t, v)| (t, v.to_bits())),
        Some((119 * 15_000, stale.to_bits()))
    );
    // more than a few specials: XOR
    let s: Vec<_> = (0..120i64)
        .map(|i| (i, if i % 7 == 3 { f64::NAN } else { i as f64 }))
        .collect();
    let b = writer(&s).finish();
    assert_eq!(header(&b).unwrap().value, ValueEncoding::Xor);
    assert_eq!(decode_all(&b), bits(&s));
}
