//! Arbitrary bytes through the WAL record reader: framing, checksums and every payload
//! decoder. Must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb_storage::fuzzing::wal_decode(data);
});
