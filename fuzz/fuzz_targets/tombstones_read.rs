//! Arbitrary bytes through the tombstone file decoder: header, checksum, label sets and
//! intervals. Must never panic; what decodes must encode back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb_storage::fuzzing::tombstones_decode(data);
});
