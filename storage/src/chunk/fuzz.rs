//! The body of the `chunk_decode` fuzz target.

use super::*;

/// The body of the `chunk_decode` fuzz target, shared with the corpus replay test:
/// `data` goes through [`encoded_len`], [`meta`], [`decode`] and [`decode_unverified`] (each
/// iterated to the end), which must return errors, never panic; then `data` is read as
/// samples (12 bytes each: a little-endian `u32` gap, forced positive, and `u64` value bits)
/// that must round-trip bit-exactly through [`ChunkWriter`] in every coding (panics if not:
/// that is a bug the fuzzer reports).
pub fn fuzz_decode(data: &[u8]) {
    let _ = encoded_len(data);
    let _ = meta(data);
    if let Ok(mut it) = decode(data) {
        for _ in it.by_ref() {}
    }
    if let Ok(mut it) = decode_unverified(data) {
        let mut prev = i64::MIN;
        let mut first = true;
        for (t, _) in it.by_ref() {
            assert!(
                first || t > prev,
                "decoder yielded non-increasing timestamps"
            );
            first = false;
            prev = t;
        }
        let _ = it.seek(i64::MAX);
    }
    // bulk decoding yields exactly what iteration yields, errors included
    if let (Ok(mut a), Ok(mut b)) = (decode_unverified(data), decode_unverified(data)) {
        let want: Vec<(i64, u64)> = a.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
        let (mut ts, mut vs) = (Vec::new(), Vec::new());
        let n = b.decode_into(&mut ts, &mut vs);
        let got: Vec<(i64, u64)> = ts.iter().zip(&vs).map(|(&t, v)| (t, v.to_bits())).collect();
        assert_eq!(n, got.len());
        assert_eq!(got, want, "decode_into differs from iteration");
        assert_eq!(
            a.err().map(|e| e.to_string()),
            b.err().map(|e| e.to_string()),
            "decode_into reports another error"
        );
    }
    // round trip of the bytes read as samples
    let mut w = ChunkWriter::new();
    let mut t: i64 = 1_796_198_400_000;
    let mut want = [(0i64, 0u64); MAX_SAMPLES_PER_CHUNK];
    let mut n = 0;
    for rec in data.chunks_exact(12).take(MAX_SAMPLES_PER_CHUNK) {
        let gap = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
        let bits = u64::from_le_bytes([
            rec[4], rec[5], rec[6], rec[7], rec[8], rec[9], rec[10], rec[11],
        ]);
        t = match t.checked_add(i64::from(gap.max(1))) {
            Some(t) => t,
            None => break,
        };
        w.append(t, f64::from_bits(bits));
        want[n] = (t, bits);
        n += 1;
    }
    let want = &want[..n];
    let same = |it: &mut SampleIter<'_>| {
        let mut i = 0;
        for (t, v) in it.by_ref() {
            assert_eq!(Some(&(t, v.to_bits())), want.get(i), "sample {i} differs");
            i += 1;
        }
        assert!(it.err().is_none(), "{:?}", it.err());
        assert_eq!(i, want.len());
    };
    same(&mut w.iter());
    for policy in [
        EncodePolicy::Auto,
        EncodePolicy::Xor,
        EncodePolicy::Int,
        EncodePolicy::IntFixedRice,
    ] {
        if let Some(bytes) = w.finish_with(policy) {
            match decode(&bytes) {
                Ok(mut it) => same(&mut it),
                Err(e) => panic!("own chunk does not decode: {e}"),
            }
        }
    }
}

/// The body of the `chunk_group` fuzz target, shared with the corpus replay test. `data`
/// goes through the histogram group decoder: as bytes ([`group_member`], [`encoded_len`],
/// [`decode`], [`decode_unverified`] of every member position, which must return errors,
/// never panic); then, from its first byte on, as a group to encode: byte 0 the number of
/// members (2 + `b % 15`), then per row a timestamp gap (`u16`, forced positive) and one
/// increment byte per member (a signed step; `0x80` puts a staleness marker there, `0x81` a
/// fraction), cumulated into buckets. [`encode_group`] must either refuse the group (only
/// when a value cannot be coded exactly) or round-trip every member bit-exactly (panics if
/// not: a bug the fuzzer reports).
pub fn fuzz_group(data: &[u8]) {
    for start in 0..data.len().min(130) {
        let b = &data[start..];
        let _ = group_member(b);
        let _ = encoded_len(b);
        if let Ok(mut it) = decode(b) {
            for _ in it.by_ref() {}
        }
        if let Ok(mut it) = decode_unverified(b) {
            let mut prev = i64::MIN;
            for (t, _) in it.by_ref() {
                assert!(t > prev, "group decoder yielded non-increasing timestamps");
                prev = t;
            }
            let _ = it.seek(i64::MAX);
        }
        // a decoder over several members: other bytes passed later are errors, never panics
        if let Ok(mut g) = GroupDecoder::open(b, u128::from(b[0]).rotate_left(start as u32), false)
        {
            let (mut ts, mut vs) = (Vec::new(), Vec::new());
            for other in (0..data.len().min(16)).rev() {
                let _ = g.member_into(&data[other..], &mut ts, &mut vs);
            }
        }
    }
    let Some((&b0, rest)) = data.split_first() else {
        return;
    };
    let n = 2 + usize::from(b0 % 15);
    let row = 2 + n;
    let rows = (rest.len() / row).min(MAX_SAMPLES_PER_CHUNK * 2);
    if rows == 0 {
        return;
    }
    let mut ts = Vec::with_capacity(rows);
    let mut members = vec![Vec::with_capacity(rows); n];
    let mut t = 1_700_000_000_000i64;
    let mut counts = vec![0f64; n];
    let mut exact = true;
    for r in rest.chunks_exact(row).take(rows) {
        t += i64::from(u16::from_le_bytes([r[0], r[1]]).max(1));
        ts.push(t);
        let mut cum = 0.0;
        for (j, &step) in r[2..].iter().enumerate() {
            counts[j] += f64::from(step as i8);
            cum += counts[j];
            members[j].push(match step {
                0x80 => {
                    exact = false;
                    crate::stale_nan()
                }
                0x81 => {
                    exact = false;
                    cum + 0.25
                }
                _ => cum,
            });
        }
    }
    let refs: Vec<&[f64]> = members.iter().map(Vec::as_slice).collect();
    match encode_group(&ts, &refs) {
        None => assert!(!exact, "an exact group was refused"),
        Some(bytes) => {
            let want = |j: usize| -> Vec<(i64, u64)> {
                ts.iter()
                    .zip(&members[j])
                    .map(|(&t, v)| (t, v.to_bits()))
                    .collect()
            };
            for j in 0..n {
                let mut it = decode(&bytes[n - 1 - j..]).expect("own group decodes");
                let got: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
                assert_eq!(got, want(j), "member {j} changed");
            }
            // one decoder, the members the first byte selects wanted, every member read in
            // an order the data gives (some twice)
            let wanted = u128::from(b0) | u128::from(rest[0]) << 8;
            let mut g = GroupDecoder::open(&bytes[n - 1..], wanted, true).expect("own group");
            for k in 0..2 * n {
                let j = (usize::from(rest[k % rest.len()]) + k) % n;
                let (mut dt, mut dv) = (Vec::new(), Vec::new());
                g.member_into(&bytes[n - 1 - j..], &mut dt, &mut dv)
                    .expect("own member");
                let got: Vec<(i64, u64)> =
                    dt.iter().zip(&dv).map(|(&t, v)| (t, v.to_bits())).collect();
                assert_eq!(got, want(j), "member {j} changed through a group decoder");
            }
        }
    }
}
