//! Replays every file of `fuzz/corpus/rules_parse/` through the function the fuzz target
//! calls (`inferdb::rules::fuzz_parse`), on stable Rust.

mod common;

#[test]
fn rules_parse_corpus() {
    let files = common::fuzz_corpus("rules_parse", 10);
    let mut valid = 0;
    for (_, bytes) in &files {
        inferdb::rules::fuzz_parse(bytes);
        if inferdb::rules::file::parse(&String::from_utf8_lossy(bytes), false)
            .is_ok_and(|f| !f.groups.is_empty())
        {
            valid += 1;
        }
    }
    // record.yml, alert.yml and anchors.yml are valid rule files
    assert!(valid >= 3, "only {valid} corpus files are valid rule files");
}
