//! Replays every file of `fuzz/corpus/remote_write_decode/` through the function the fuzz
//! target calls (`inferdb::remote::wire::fuzz_decode`), on stable Rust.

use std::path::PathBuf;

#[test]
fn remote_write_decode_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/remote_write_decode");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "corpus has only {} files", files.len());
    let mut valid = 0;
    for p in &files {
        let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        inferdb::remote::wire::fuzz_decode(&bytes);
        let raw = snap::raw::Decoder::new()
            .decompress_vec(&bytes)
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
