//! Arbitrary text through the RE2 syntax checker and rewriter (`storage/src/re2.rs`) that
//! every PromQL matcher, `label_replace` and relabelling regex passes: it must never panic,
//! and whatever it accepts must be text the regex crate parses.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb_storage::re2::fuzz_translate(data);
});
