//! Fuzzes the receiver's zero-copy remote-write reader: it must never panic, and whatever it
//! accepts (raw protobuf, or a snappy block body) `prost` must decode to the same series,
//! labels, samples (bit for bit), exemplar count and metadata.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb::remote::wire::fuzz_decode(data);
});
