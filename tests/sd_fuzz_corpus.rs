//! Replays every file of `fuzz/corpus/sd_decode/` through the function the fuzz target calls
//! (`inferdb::discovery::fuzz_decode`), on stable Rust.

mod common;

#[test]
fn sd_decode_corpus() {
    let files = common::fuzz_corpus("sd_decode", 10);
    let mut decoded = 0;
    for (_, bytes) in &files {
        if inferdb::discovery::fuzz_decode(bytes) > 0 {
            decoded += 1;
        }
    }
    // the seeds include valid documents of every kind
    assert!(decoded >= 7, "only {decoded} corpus files decode");
}
