//! Replays every file of `fuzz/corpus/exposition_parse/` through the function the fuzz target
//! calls (`inferdb::model::exposition::fuzz_parse`), on stable Rust: the full parser and the
//! series cache's fast paths agree on each of them.

mod common;

#[test]
fn exposition_parse_corpus() {
    let files = common::fuzz_corpus("exposition_parse", 10);
    let mut fast = 0;
    for (_, bytes) in &files {
        fast += inferdb::model::exposition::fuzz_parse(bytes);
    }
    // the real pages' lines go through the fast paths
    assert!(
        fast >= 100,
        "the fast paths read only {fast} lines of the corpus"
    );
}
