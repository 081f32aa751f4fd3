//! Arbitrary bytes opened as a block index and read through every path: an error, never a
//! panic. Seed corpus: `fuzz/corpus/index_read/` (valid small indexes).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = inferdb_storage::fuzzing::index_read(data);
});
