//! Arbitrary bytes through the chunk decoder (with and without checksum verification) and,
//! read as samples, through encode + decode. Must never panic except on a round-trip mismatch.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb_storage::fuzzing::chunk_decode(data);
});
