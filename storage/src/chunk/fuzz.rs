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
