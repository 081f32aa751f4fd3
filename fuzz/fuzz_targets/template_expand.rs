//! Fuzzes alert templates (Go `text/template` syntax with Prometheus' functions): checked,
//! expanded as text and as HTML with labels, a value and a `query` function: errors, never
//! panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb::template::fuzz_expand(data);
});
