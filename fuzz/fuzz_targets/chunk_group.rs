//! Arbitrary bytes through the histogram group decoder and, read as a histogram's rows,
//! through group encode + decode. Must never panic except on a round-trip mismatch.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb_storage::fuzzing::chunk_group(data);
});
