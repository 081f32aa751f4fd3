//! Rule evaluation without HTTP or scraping: `SERVERS` simulated vLLM servers recorded into a
//! store in a temporary folder (`MINUTES` of history, one scrape every 15 s), then every group
//! of a rule file evaluated `ROUNDS` times, one round per evaluation interval after the
//! history, through the manager's store (`DbStore`: the API's engine, appends through the
//! WAL). Prints the thread CPU time of each round and the mean. For profiling (`perf record`,
//! `valgrind --tool=callgrind`) and before/after comparisons of the evaluation path; the
//! end-to-end figure beside Prometheus is `benches/rules_cost.sh`, whose generated rule file
//! this reads (`RULES_ONLY=1 benches/rules_cost.sh DIR` writes `DIR/rules.yml`).
//!
//!     cargo run --release --example rules_eval -- RULES.yml [SERVERS] [MINUTES] [ROUNDS]

use std::sync::Arc;

use inferdb::rules::file;
use inferdb::rules::group::{Group, GroupOptions, RuleStore};
use inferdb::rules::schedule::DbStore;
use inferdb::sim::record::{record, Recording, SimHost};
use inferdb_query::Engine;
use inferdb_storage::db::{Db, Options};

/// The binary's allocator, so the figures are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// On-CPU nanoseconds of the calling thread (`/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The manager's store, with the CPU time of its queries and commits counted.
struct Timed {
    inner: DbStore,
    query_ns: std::cell::Cell<u64>,
    append_ns: u64,
}

impl RuleStore for Timed {
    fn query(
        &self,
        expr: &inferdb_query::ast::Expr,
        t_ms: i64,
    ) -> Result<inferdb_query::value::Vector, String> {
        let c0 = thread_cpu_ns();
        let r = self.inner.query(expr, t_ms);
        self.query_ns
            .set(self.query_ns.get() + thread_cpu_ns().saturating_sub(c0));
        r
    }
    fn append(&mut self, labels: &inferdb_storage::Labels, t_ms: i64, v: f64) {
        self.inner.append(labels, t_ms, v);
    }
    fn commit(&mut self) {
        let c0 = thread_cpu_ns();
        self.inner.commit();
        self.append_ns += thread_cpu_ns().saturating_sub(c0);
    }
    fn reset_reads(&mut self) {
        self.inner.reset_reads();
    }
    fn plan_reads(&mut self, exprs: &mut dyn Iterator<Item = &inferdb_query::ast::Expr>) {
        self.inner.plan_reads(exprs);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: rules_eval RULES.yml [SERVERS] [MINUTES] [ROUNDS]");
        std::process::exit(2);
    };
    let arg = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (servers, minutes, rounds) = (arg(2, 200), arg(3, 10), arg(4, 5));
    let text = std::fs::read_to_string(path).expect("reading the rule file");
    let rf = file::parse(&text, false).expect("a valid rule file");

    let dir = tempfile::tempdir().expect("temp dir");
    let db = Arc::new(
        Db::open(
            dir.path(),
            Options {
                background: false,
                ..Default::default()
            },
        )
        .expect("opening the store"),
    );
    let start_s = 1_700_000_000.0;
    let seconds = (minutes * 60) as f64;
    let n = record(
        &db,
        &Recording {
            hosts: (0..servers)
                .map(|i| SimHost::new(i, 42 + i as u64, None))
                .collect(),
            start_s,
            step_s: 15.0,
            seconds,
            families: None,
            gpu: false,
        },
    )
    .expect("recording");
    let mut groups: Vec<Group> = rf
        .groups
        .iter()
        .map(|g| {
            let mut g = Group::new(
                path,
                g,
                GroupOptions {
                    default_interval_ms: 15_000,
                    ..Default::default()
                },
            )
            .expect("group");
            g.set_restored();
            g
        })
        .collect();
    let rules: usize = groups.iter().map(|g| g.rules.len()).sum();
    eprintln!(
        "{servers} servers, {minutes} min recorded ({n} samples), {} groups, {rules} rules",
        groups.len()
    );
    let mut store = Timed {
        inner: DbStore::new(db.clone(), Engine::default()),
        query_ns: Default::default(),
        append_ns: 0,
    };
    let t0 = ((start_s + seconds) * 1000.0) as i64;
    let mut total = 0u64;
    for r in 0..rounds {
        let ts = t0 + r as i64 * 15_000 + 7_000;
        let c0 = thread_cpu_ns();
        let mut samples = 0;
        for g in &mut groups {
            samples += g.eval(ts, &mut store).samples;
        }
        let c = thread_cpu_ns() - c0;
        total += c;
        let (h, m) = store.inner.reads_hits_and_misses();
        println!(
            "round {r}: {:.1} ms CPU ({:.1} ms in queries, {:.1} ms appending), {samples} samples, {h} selections shared, {m} read",
            c as f64 / 1e6,
            store.query_ns.take() as f64 / 1e6,
            std::mem::take(&mut store.append_ns) as f64 / 1e6,
        );
    }
    println!(
        "mean: {:.1} ms CPU per round ({:.1} us per rule)",
        total as f64 / 1e6 / rounds as f64,
        total as f64 / 1e3 / (rounds * rules) as f64
    );
}
