//! Chunk encode profile on the realistic workload (`benches/workload.rs`): every series cut
//! into chunks as the head cuts them (120 samples or a 2 h boundary), each chunk appended
//! sample by sample to a `ChunkWriter` and finished (`finish` picks the smallest coding),
//! several rounds; prints the rate per thread-CPU-second (ns clock) of the best round.
//!
//! `INFERDB_FIXTURES=tests/fixtures cargo run --release -p inferdb-storage --example
//! encode_perf -- [ROUNDS] [HOURS]` (24 h by default)

#[path = "../../benches/workload.rs"]
mod workload;

use std::hint::black_box;

use inferdb_storage::chunk::ChunkWriter;

/// Block range at which the head also cuts chunks (2 h).
const BLOCK_MS: i64 = 2 * 3_600_000;

/// CPU time of this thread in seconds.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    let hours: f64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(24.0);
    let wl = workload::generate(&workload::Config::hours(hours));
    let total: usize = wl.series.iter().map(|s| s.samples.len()).sum();
    let (mut best, mut bytes) = (f64::MAX, 0usize);
    for _ in 0..rounds {
        bytes = 0;
        let c0 = thread_cpu();
        for s in &wl.series {
            let mut w = ChunkWriter::new();
            let mut start_t: i64 = 0;
            for &(t, v) in &s.samples {
                let crosses =
                    !w.is_empty() && t.div_euclid(BLOCK_MS) != start_t.div_euclid(BLOCK_MS);
                if w.is_full() || crosses {
                    bytes += black_box(w.finish()).len();
                    w.reset();
                }
                if w.is_empty() {
                    start_t = t;
                }
                w.append(t, v);
            }
            if !w.is_empty() {
                bytes += black_box(w.finish()).len();
            }
        }
        best = best.min(thread_cpu() - c0);
    }
    println!(
        "encode (append + finish), {total} samples, {:.3} bytes/sample: {:.2} M samples per thread-CPU-second (best of {rounds})",
        bytes as f64 / total as f64,
        total as f64 / best / 1e6
    );
}
