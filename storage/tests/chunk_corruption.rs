//! Corrupt chunks are reported as errors, never panics and never wrong data.

use inferdb_storage::chunk::{decode, decode_unverified, encoded_len, header, meta, ChunkWriter};
use inferdb_storage::Error;
use proptest::prelude::*;

fn sample_chunks() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let base = 1_796_198_400_000i64;
    // integer counter with jitter
    let mut w = ChunkWriter::new();
    let mut v = 5_000.0;
    for i in 0..120i64 {
        v += ((i * 7919) % 1234) as f64;
        w.append(base + i * 15_000 + (i * 13) % 7, v);
    }
    out.push(w.finish());
    // full precision gauge
    let mut w = ChunkWriter::new();
    for i in 0..120i64 {
        w.append(base + i * 1_000, (i as f64 * 0.1).sin());
    }
    out.push(w.finish());
    // constant
    let mut w = ChunkWriter::new();
    for i in 0..120i64 {
        w.append(base + i * 15_000, 1.0);
    }
    out.push(w.finish());
    // decimals
    let mut w = ChunkWriter::new();
    for i in 0..60i64 {
        w.append(base + i * 15_000, (70_000 + (i * 37) % 900) as f64 / 1000.0);
    }
    out.push(w.finish());
    out
}

fn is_corrupt(e: &Error) -> bool {
    matches!(e, Error::Corrupt { what: "chunk", .. })
}

#[test]
fn every_single_byte_flip_is_detected() {
    for chunk in sample_chunks() {
        for pos in 0..chunk.len() {
            for mask in [0x01u8, 0x80, 0xff, 0x10] {
                let mut bad = chunk.clone();
                bad[pos] ^= mask;
                match decode(&bad) {
                    Err(e) => assert!(is_corrupt(&e), "{e}"),
                    Ok(_) => panic!("flip at {pos} mask {mask:#x} not detected"),
                }
                assert!(meta(&bad).is_err());
                assert!(header(&bad).is_err());
            }
        }
    }
}

#[test]
fn truncation_is_detected() {
    for chunk in sample_chunks() {
        for len in 0..chunk.len() {
            let e = decode(&chunk[..len]).expect_err("truncated chunk decoded");
            assert!(is_corrupt(&e), "{e}");
            if let Ok(n) = encoded_len(&chunk[..len]) {
                assert!(n > len);
            }
        }
    }
}

#[test]
fn corrupt_error_names_offset() {
    let chunk = &sample_chunks()[0];
    let mut bad = chunk.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    match decode(&bad) {
        Err(Error::Corrupt { offset, reason, .. }) => {
            assert_eq!(offset as usize, chunk.len() - 4);
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let e = decode(&[]).expect_err("empty");
    assert!(is_corrupt(&e));
    let e = decode(&[0x40]).expect_err("reserved bits");
    assert!(is_corrupt(&e));
}

/// Without the checksum, flipped bits reach the bit-stream decoder: it must end with an error
/// or with samples, never panic, and never yield non-increasing timestamps.
#[test]
fn unverified_flips_never_panic() {
    for chunk in sample_chunks() {
        for pos in 0..chunk.len() {
            for bit in 0..8 {
                let mut bad = chunk.clone();
                bad[pos] ^= 1 << bit;
                if let Ok(mut it) = decode_unverified(&bad) {
                    let mut prev = None;
                    for (t, _) in it.by_ref() {
                        if let Some(p) = prev {
                            assert!(t > p);
                        }
                        prev = Some(t);
                    }
                    if let Some(e) = it.err() {
                        assert!(is_corrupt(e));
                    }
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = encoded_len(&bytes);
        let _ = meta(&bytes);
        if let Ok(mut it) = decode(&bytes) {
            for _ in it.by_ref() {}
        }
        if let Ok(mut it) = decode_unverified(&bytes) {
            let n = it.by_ref().count();
            prop_assert!(n <= usize::from(u16::MAX));
        }
    }

    #[test]
    fn arbitrary_header_bytes_never_panic(
        kind in any::<u8>(),
        params in any::<u8>(),
        rest in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        // realistic header bytes so the body decoder is reached
        let mut b = vec![kind & 0x0f, params & 0x3f, 100, rest.len() as u8];
        b.extend_from_slice(&rest);
        b.extend_from_slice(&[0; 4]);
        if let Ok(mut it) = decode_unverified(&b) {
            for _ in it.by_ref() {}
        }
    }
}
