//! `benches/chunks.rs` built as an example of the storage crate: the same summary as
//! `cargo bench --bench chunks` without building the root package's dependencies.
//!
//! `INFERDB_BENCH_SUMMARY_ONLY=1 cargo run --release -p inferdb-storage --example bench_chunks`

#[path = "../../benches/chunks.rs"]
mod bench;

fn main() {
    bench::main()
}
