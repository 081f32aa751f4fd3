//! Fuzzes the exposition parser (text 0.0.4 and OpenMetrics): it must never panic, every
//! error names a line within the input, every label set it accepts can be read back, and the
//! series cache's fast paths read every line as the full parser does
//! (`inferdb::model::exposition::fuzz_parse`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb::model::exposition::fuzz_parse(data);
});
