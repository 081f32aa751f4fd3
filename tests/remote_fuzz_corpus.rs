//! Replays every file of `fuzz/corpus/remote_write_decode/` through the function the fuzz
//! target calls (`inferdb::remote::wire::fuzz_decode`), on stable Rust.

mod common;

#[test]
fn remote_write_decode_corpus() {
    let files = common::fuzz_corpus("remote_write_decode", 10);
    let mut valid = 0;
    for (_, bytes) in &files {
        inferdb::remote::wire::fuzz_decode(bytes);
        let raw = snap::raw::Decoder::new()
            .decompress_vec(bytes)
            .unwrap_or_else(|_| bytes.clone());
        if let Ok(v) = inferdb::remote::wire::WriteView::decode(&raw) {
            if !v.series.is_empty() {
                valid += 1;
            }
        }
    }
    // the seeds include real requests, raw and snappy-compressed
    assert!(
        valid >= 8,
        "only {valid} corpus files are non-empty requests"
    );
}
