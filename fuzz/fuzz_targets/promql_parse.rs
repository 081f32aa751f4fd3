//! Arbitrary text through the PromQL parser. It must never panic, and whatever parses must
//! print as PromQL that parses back to the same AST (the only panic allowed is that
//! round-trip assertion failing, which is a bug to fix).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(expr) = inferdb_query::parser::parse(input) {
        let printed = expr.to_string();
        match inferdb_query::parser::parse(&printed) {
            Ok(again) => assert_eq!(again, expr, "{input:?} printed as {printed:?}"),
            Err(e) => panic!("{input:?} printed as {printed:?} does not parse: {e}"),
        }
    }
    let _ = inferdb_query::parser::parse_matchers(input);
    let _ = inferdb_query::parser::parse_duration(input);
});
