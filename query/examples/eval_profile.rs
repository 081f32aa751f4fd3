//! In-process timing of PromQL range and instant queries over an on-disk store, for
//! profiling the evaluator without HTTP (e.g. under `perf record`).
//!
//! ```text
//! cargo run --release -p inferdb-query --example eval_profile -- STORE END_S KIND REPS 'NAME=QUERY'...
//! ```
//!
//! KIND is `instant`, `6h` (15 s step) or `24h` (60 s step), ranges ending at END_S (Unix
//! seconds). Prints per query the median, minimum and maximum wall time of REPS evaluations,
//! and the least time spent selecting and decoding (the engine's `prepare` timing).

use std::time::Instant;

use inferdb_query::{Engine, EngineOptions};
use inferdb_storage::{Db, Options};

/// The server's allocator, so that allocation costs are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 5 {
        eprintln!("usage: eval_profile STORE END_S KIND REPS NAME=QUERY...");
        std::process::exit(2);
    }
    let db = Db::open(
        &args[0],
        Options {
            read_only: true,
            background: false,
            ..Options::default()
        },
    )
    .expect("open store");
    let end: i64 = args[1].parse::<i64>().expect("END_S") * 1000;
    let kind = args[2].as_str();
    let reps: usize = args[3].parse().expect("REPS");
    let engine = Engine::new(EngineOptions::default());
    for q in &args[4..] {
        let (name, query) = q.split_once('=').unwrap_or((q.as_str(), q.as_str()));
        let mut times = Vec::with_capacity(reps);
        let mut prepare = Vec::with_capacity(reps);
        let mut points = 0usize;
        for _ in 0..reps {
            let t = Instant::now();
            let r = match kind {
                "instant" => engine.instant(&db, query, end),
                "6h" => engine.range(&db, query, end - 6 * 3_600_000, end, 15_000),
                "24h" => engine.range(&db, query, end - 24 * 3_600_000, end, 60_000),
                _ => panic!("KIND: instant, 6h or 24h"),
            };
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            let r = r.unwrap_or_else(|e| panic!("{name}: {e}"));
            prepare.push(r.timings.prepare.as_secs_f64() * 1000.0);
            points = match &r.value {
                inferdb_query::Value::Matrix(m) => m.iter().map(|s| s.floats.len()).sum(),
                inferdb_query::Value::Vector(v) => v.len(),
                _ => 1,
            };
        }
        times.sort_by(|a, b| a.total_cmp(b));
        prepare.sort_by(|a, b| a.total_cmp(b));
        println!(
            "{name:40} {kind:7} median {:8.3} ms  min {:8.3}  max {:8.3}  select+decode min {:8.3}  points {points}",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1],
            prepare[0]
        );
    }
}
