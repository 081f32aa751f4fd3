//! Where rule evaluation meets the store and the clock: Prometheus' evaluation timestamps
//! (each group offset within its interval by a hash of its file and name, so groups spread
//! over the interval and restarts keep the same phase) and a [`RuleStore`] over the on-disk
//! [`Db`]: queries through the same engine as `/api/v1/query`, output through the normal
//! append path (WAL first), one transaction per rule. [`super::manager`] runs groups on
//! these timestamps.

use std::cell::RefCell;
use std::sync::Arc;

use inferdb_query::ast::Expr;
use inferdb_query::value::Vector;
use inferdb_query::{Engine, SelectionCache};
use inferdb_storage::{Db, Labels};

use super::group::RuleStore;
use super::unittest::result_vector;

/// Prometheus' group hash: `labels.Hash()` (xxHash64 of `name\xffvalue\xff` per label, in
/// label order) of `{file="<file>", name="<group>"}`.
pub fn group_hash(file: &str, name: &str) -> u64 {
    let mut b = Vec::with_capacity(file.len() + name.len() + 12);
    for (k, v) in [("file", file), ("name", name)] {
        b.extend_from_slice(k.as_bytes());
        b.push(0xff);
        b.extend_from_slice(v.as_bytes());
        b.push(0xff);
    }
    twox_hash::XxHash64::oneshot(0, &b)
}

/// The group's evaluation timestamp for the interval holding `now_ms`, as Prometheus'
/// `Group.EvalTimestamp` derives it (in nanoseconds, truncated to milliseconds as samples
/// are stamped).
pub fn eval_timestamp_ms(file: &str, name: &str, interval_ms: i64, now_ms: i64) -> i64 {
    let interval_ns = i128::from(interval_ms.max(1)) * 1_000_000;
    let offset = i128::from(group_hash(file, name)) % interval_ns;
    let adj = i128::from(now_ms) * 1_000_000 - offset;
    let base = adj - adj.rem_euclid(interval_ns);
    ((base + offset).div_euclid(1_000_000)) as i64
}

/// The nanoseconds below the millisecond of the group's evaluation timestamps: its offset
/// within the interval is in nanoseconds (`hash % interval`), and intervals are whole
/// milliseconds, so every evaluation of the group shares this remainder.
pub fn eval_sub_ms_ns(file: &str, name: &str, interval_ms: i64) -> u32 {
    let interval_ns = u64::try_from(interval_ms.max(1)).unwrap_or(1) * 1_000_000;
    ((group_hash(file, name) % interval_ns) % 1_000_000) as u32
}

/// Rules reading and writing the on-disk store. The queries of one group evaluation share
/// their selections ([`SelectionCache`]): a selector read by several rules is selected and
/// decoded once per evaluation, and dropped when a rule appends a series it could match.
pub struct DbStore {
    db: Arc<Db>,
    engine: Engine,
    reads: RefCell<SelectionCache>,
    pending: Vec<(Labels, i64, f64)>,
    appended: Vec<Labels>,
    /// Samples the store refused (out of order, duplicate timestamp, ...), as Prometheus
    /// counts and logs them per rule instead of failing the rule.
    pub refused: u64,
}

impl DbStore {
    /// A store over `db`, querying with `engine` (the API's engine and options).
    pub fn new(db: Arc<Db>, engine: Engine) -> Self {
        DbStore {
            db,
            engine,
            reads: RefCell::new(SelectionCache::default()),
            pending: Vec::new(),
            appended: Vec::new(),
            refused: 0,
        }
    }

    /// Queries with `engine` from now on (a reload may change its options).
    pub fn set_engine(&mut self, engine: Engine) {
        self.engine = engine;
        self.reads.get_mut().clear();
    }

    /// Selections the queries took from the shared reads and from the store so far.
    pub fn reads_hits_and_misses(&self) -> (u64, u64) {
        self.reads.borrow().hits_and_misses()
    }

    /// The count of refused samples since the last call, reset to zero.
    pub fn take_refused(&mut self) -> u64 {
        std::mem::take(&mut self.refused)
    }
}

impl RuleStore for DbStore {
    fn query(&self, expr: &Expr, t_ms: i64) -> Result<Vector, String> {
        let r = self
            .engine
            .instant_cached(&*self.db, expr, t_ms, &mut self.reads.borrow_mut())
            .map_err(|e| e.to_string())?;
        result_vector(r.value)
    }

    fn reset_reads(&mut self) {
        self.reads.get_mut().clear();
    }

    fn plan_reads(&mut self, exprs: &mut dyn Iterator<Item = &Expr>) {
        self.reads.get_mut().plan(exprs);
    }

    fn append(&mut self, labels: &Labels, t_ms: i64, v: f64) {
        self.pending.push((labels.clone(), t_ms, v));
    }

    fn commit(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut app = self.db.appender();
        self.appended.clear();
        for (l, t, v) in self.pending.drain(..) {
            if app.append(&l, t, v).is_err() {
                self.refused += 1;
            }
            self.appended.push(l);
        }
        if let Err(e) = app.commit() {
            tracing::warn!("rule evaluation: appending results failed: {e}");
        }
        self.reads.get_mut().invalidate_all(&self.appended);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::file;
    use crate::rules::group::{AlertState, Group, GroupOptions, Health};
    use inferdb_storage::Options;

    #[test]
    fn eval_timestamps_are_offset_within_the_interval() {
        let iv = 60_000;
        let t = eval_timestamp_ms("rules.yml", "g", iv, 1_700_000_030_123);
        assert!(t <= 1_700_000_030_123 && 1_700_000_030_123 - t < iv);
        // the same phase in every interval (the phase has nanoseconds: the millisecond
        // stamp is truncated), a different one for another group
        assert_eq!(eval_timestamp_ms("rules.yml", "g", iv, t + iv + 1), t + iv);
        assert_eq!(eval_timestamp_ms("rules.yml", "g", iv, t + iv - 1), t);
        let phase = |f: &str, g: &str| eval_timestamp_ms(f, g, iv, 0).rem_euclid(iv);
        assert_ne!(phase("rules.yml", "g"), phase("rules.yml", "h"));
        // xxHash64 of "file\xffrules.yml\xffname\xffg\xff" with seed 0
        let b = b"file\xffrules.yml\xffname\xffg\xff";
        assert_eq!(
            group_hash("rules.yml", "g"),
            twox_hash::XxHash64::oneshot(0, b)
        );
    }

    /// Prometheus 2.42 with `rule_files: [/tmp/promph/rules.yml]`, group `phase`, interval
    /// 10 s, reported `lastEvaluation` 2026-12-03T17:24:37.441687083Z. 2.42 reports the wall
    /// clock at the start of the evaluation, a few milliseconds after the scheduled
    /// timestamp its samples carry: the hash's phase (7.435602236 s) is 6 ms before it.
    #[test]
    fn phase_is_prometheus_2_42s() {
        let phase = (group_hash("/tmp/promph/rules.yml", "phase") % 10_000_000_000) as i64;
        let reported = 7_441_687_083;
        assert!(
            (0..50_000_000).contains(&(reported - phase)),
            "phase {phase} ns"
        );
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied())
    }

    /// The queries of a group share their selections, but a later rule still reads what an
    /// earlier one appended: the second rule's selection equals the first's, which the
    /// first rule's output changes.
    #[test]
    fn shared_selections_see_earlier_rules_output() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(
            Db::open(
                dir.path(),
                Options {
                    background: false,
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        let text = "groups:\n- name: g\n  rules:\n  - record: c1\n    expr: count({__name__=~\"c.*\"}) or vector(0)\n  - record: c2\n    expr: count({__name__=~\"c.*\"}) or vector(0)\n  - record: c3\n    expr: count({__name__=~\"c.*\"}) or vector(0)\n";
        let f = file::parse(text, false).unwrap();
        let mut g = Group::new("r.yml", &f.groups[0], GroupOptions::default()).unwrap();
        let mut store = DbStore::new(db.clone(), Engine::default());
        g.eval(1_000_000, &mut store);
        assert!(g.rules.iter().all(|r| r.health == Health::Ok));
        let e = Engine::default();
        let v = |name: &str| match e.instant(&*db, name, 1_000_000).unwrap().value {
            inferdb_query::Value::Vector(v) => v.into_iter().map(|s| s.f).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(v("c1"), vec![0.0]);
        assert_eq!(v("c2"), vec![1.0]);
        assert_eq!(v("c3"), vec![2.0]);
        let (hits, misses) = store.reads_hits_and_misses();
        assert_eq!(
            (hits, misses),
            (0, 3),
            "each read follows an append that changes it"
        );
    }

    #[test]
    fn group_over_db_records_alerts_and_marks_stale() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(
            Db::open(
                dir.path(),
                Options {
                    background: false,
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        let text = "groups:\n- name: g\n  rules:\n  - record: job:up:sum\n    expr: sum by (job) (up)\n  - alert: Down\n    expr: job:up:sum == 0\n    for: 1m\n    labels: {severity: page}\n    annotations: {summary: '{{ $labels.job }} is down ({{ $value }})'}\n";
        let f = file::parse(text, false).unwrap();
        let mut g = Group::new(
            "r.yml",
            &f.groups[0],
            GroupOptions {
                default_interval_ms: 15_000,
                ..Default::default()
            },
        )
        .unwrap();
        g.set_restored();
        let up = labels(&[("__name__", "up"), ("job", "a"), ("instance", "x")]);
        let mut store = DbStore::new(db.clone(), Engine::default());
        let t0 = 1_000_000;
        for i in 0..6 {
            let t = t0 + i * 15_000;
            let mut app = db.appender();
            // the target goes down from the third scrape; its series ends after the fifth
            if i < 5 {
                app.append(&up, t - 1, if i < 2 { 1.0 } else { 0.0 })
                    .unwrap();
            }
            app.commit().unwrap();
            g.eval(t, &mut store);
        }
        assert!(g.rules.iter().all(|r| r.health == Health::Ok));
        let alert = g.rules[1].active.values().next().unwrap();
        // active from t0+30s, firing once `for: 1m` passed at t0+90s
        assert_eq!(alert.active_at, t0 + 30_000);
        assert_eq!(alert.state, AlertState::Pending);
        assert_eq!(
            alert.annotations,
            vec![("summary".into(), "a is down (0)".into())]
        );
        g.eval(t0 + 90_000, &mut store);
        assert_eq!(
            g.rules[1].active.values().next().unwrap().state,
            AlertState::Firing
        );
        let e = Engine::default();
        let q = |expr: &str, t: i64| match e.instant(&*db, expr, t).unwrap().value {
            inferdb_query::Value::Vector(v) => v.into_iter().map(|s| s.f).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(q("job:up:sum", t0 + 15_000), vec![1.0]);
        assert_eq!(q("ALERTS{alertstate=\"firing\"}", t0 + 90_000), vec![1.0]);
        assert_eq!(
            q("ALERTS_FOR_STATE", t0 + 90_000),
            vec![((t0 + 30_000) / 1000) as f64]
        );
        // The source gets a staleness marker (its target vanished): the recorded series and
        // the resolved alert's ALERTS series get one at the next evaluation.
        let mut app = db.appender();
        app.append(&up, t0 + 95_000, inferdb_storage::stale_nan())
            .unwrap();
        app.commit().unwrap();
        g.eval(t0 + 105_000, &mut store);
        assert!(
            q("job:up:sum", t0 + 105_000).is_empty(),
            "recorded series marked stale"
        );
        assert!(
            q("ALERTS", t0 + 105_000).is_empty(),
            "ALERTS marked stale once resolved"
        );
        assert_eq!(store.refused, 0);
    }
}
