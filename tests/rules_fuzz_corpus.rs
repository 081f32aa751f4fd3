//! Replays every file of `fuzz/corpus/rules_parse/` through the function the fuzz target
//! calls (`inferdb::rules::fuzz_parse`), on stable Rust.

use std::path::PathBuf;

#[test]
fn rules_parse_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/rules_parse");
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
        inferdb::rules::fuzz_parse(&bytes);
        if inferdb::rules::file::parse(&String::from_utf8_lossy(&bytes), false)
            .is_ok_and(|f| !f.groups.is_empty())
        {
            valid += 1;
        }
    }
    // record.yml, alert.yml and anchors.yml are valid rule files
    assert!(valid >= 3, "only {valid} corpus files are valid rule files");
}
