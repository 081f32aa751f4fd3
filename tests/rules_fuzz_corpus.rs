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

/// Replays `fuzz/corpus/template_expand/` through `inferdb::template::fuzz_expand`: every
/// template expands or fails with an error; the well-formed ones expand.
#[test]
fn template_expand_corpus() {
    let files = common::fuzz_corpus("template_expand", 10);
    let mut expanded = Vec::new();
    for (path, bytes) in &files {
        if inferdb::template::fuzz_expand(bytes) {
            expanded.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    for good in [
        "pack_summary.txt",
        "query_range.txt",
        "if_else.txt",
        "functions.txt",
    ] {
        assert!(
            expanded.iter().any(|e| e == good),
            "{good} did not expand: {expanded:?}"
        );
    }
    for bad in ["unclosed.txt", "call_errors.txt"] {
        assert!(!expanded.iter().any(|e| e == bad), "{bad} expanded");
    }
}
