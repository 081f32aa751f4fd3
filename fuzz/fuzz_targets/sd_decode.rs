//! Fuzzes what service discovery decodes from the network: HTTP SD target-group documents
//! and Kubernetes API objects (then every role's target groups built from them); nothing
//! may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inferdb::discovery::fuzz_decode(data);
});
