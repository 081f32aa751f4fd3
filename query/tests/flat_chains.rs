//! Flat chains of binary operators (`a or b or … or z`, `1 + 1 + … + 1`, `2 ^ 1 ^ … ^ 1`)
//! of 10,000 terms are parsed, type-checked, printed, evaluated and dropped on a thread with
//! a 512 KB stack, a quarter of a default thread's: the walks over the tree grow their stack
//! on the heap as they go (`inferdb_query::stack`), so no chain length overflows it. Their
//! answers are those of the same expressions built without a chain (Prometheus' answers for
//! such chains are checked in the binary crate's `tests/query_flat_chains.rs`).

use inferdb_query::engine::{Engine, EngineOptions};
use inferdb_query::parser::parse;
use inferdb_query::storage::MemStorage;
use inferdb_query::Value;
use inferdb_storage::Labels;

const TERMS: usize = 10_000;

fn on_small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

fn instant(db: &MemStorage, q: &str) -> Value {
    Engine::new(EngineOptions::default())
        .instant(db, q, 60_000)
        .unwrap_or_else(|e| panic!("{}…: {e}", &q[..40]))
        .value
}

#[test]
fn ten_thousand_terms_on_a_small_stack() {
    on_small_stack(|| {
        let mut db = MemStorage::new();
        for (job, v) in [("a", 1.0), ("b", 2.0)] {
            db.add(
                &Labels::from_pairs([("__name__", "up"), ("job", job)]),
                30_000,
                v,
            );
        }
        let cases = [
            (format!("1{}", " + 1".repeat(TERMS - 1)), format!("{TERMS}")),
            (
                format!("up{}", " or up".repeat(TERMS - 1)),
                "up".to_string(),
            ),
            (
                format!("up{}", " * 1 + 0".repeat(TERMS - 1)),
                "up * 1 + 0".to_string(),
            ),
            (format!("2{}", " ^ 1".repeat(TERMS - 1)), "2".to_string()),
            (
                format!("up{}", " - on(job) up".repeat(TERMS - 1)),
                format!("up * {}", 2 - TERMS as i64),
            ),
        ];
        for (chain, same) in cases {
            let e = parse(&chain).unwrap();
            let printed = e.to_string();
            assert_eq!(parse(&printed).unwrap(), e, "print/parse round trip");
            assert!(format!("{:?}", e.clone()).len() > chain.len());
            assert_eq!(
                format!("{:?}", instant(&db, &chain)),
                format!("{:?}", instant(&db, &same)),
                "{}…",
                &chain[..40]
            );
        }
    });
}
