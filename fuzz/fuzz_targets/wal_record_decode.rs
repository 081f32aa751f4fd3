//! Arbitrary bytes as one WAL record's type byte and stored payload, past the checksum: the
//! snappy and zstd decompressors and every payload decoder. Must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb_storage::fuzzing::wal_record_decode(data);
});
