//! Fuzzes the rule-file reader (positioned YAML, validation, PromQL), the rule unit-test file
//! reader and the input-series notation: errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb::rules::fuzz_parse(data);
});
