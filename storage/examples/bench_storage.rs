//! `benches/storage.rs` built as an example of the storage crate: the same summary as
//! `cargo bench --bench storage` without building the root package's dependencies.
//!
//! `INFERDB_BENCH_SUMMARY_ONLY=1 cargo run --release -p inferdb-storage --example bench_storage`

#[path = "../../benches/storage.rs"]
mod bench;

fn main() {
    bench::main()
}
