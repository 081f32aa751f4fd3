//! Parser throughput on the fixture pages.
fn main() {}
