//! Replays every file of `fuzz/corpus/sd_decode/` through the function the fuzz target calls
//! (`inferdb::discovery::fuzz_decode`), on stable Rust.

use std::path::PathBuf;

#[test]
fn sd_decode_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/sd_decode");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "corpus has only {} files", files.len());
    let mut decoded = 0;
    for p in &files {
        let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        if inferdb::discovery::fuzz_decode(&bytes) > 0 {
            decoded += 1;
        }
    }
    // the seeds include valid documents of every kind
    assert!(decoded >= 7, "only {decoded} corpus files decode");
}
