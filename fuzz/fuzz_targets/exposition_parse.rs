//! Fuzzes the exposition parser (text 0.0.4 and OpenMetrics): it must never panic, every
//! error names a line within the input, and every label set it accepts can be read back.
#![no_main]

use inferdb::model::exposition::{parse, Entry, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.split('\n').count();
    for format in [Format::PromText, Format::OpenMetrics] {
        for e in parse(text, format) {
            match e {
                Ok(Entry::Sample(s)) => {
                    assert!(text.contains(s.series_text));
                    for (k, v) in s.labels.iter() {
                        std::hint::black_box((k, v));
                    }
                }
                Ok(_) => {}
                Err(e) => assert!(e.line <= lines + 1, "line {} of {}", e.line, lines),
            }
        }
    }
});
