//! The rule manager `serve` runs: loads the configuration's `rule_files` (and embedded rule
//! files added with [`RuleManager::add_embedded`]) at start and on every reload, runs each
//! group on its own schedule ([`super::schedule`]) against the store through the same engine
//! options as `/api/v1/query`, restores the `for` state of alerts after a restart, hands
//! firing and resolved alerts to an [`AlertSender`], and exposes the groups to the API
//! (`/api/v1/rules`, `/api/v1/alerts`) and Prometheus' `prometheus_rule_*` self-metrics.
//!
//! A reload is two steps, so a broken rule file refuses the whole reload while the old rules
//! keep running: [`RuleManager::prepare`] reads and checks every file (nothing changes yet),
//! [`RuleManager::apply`] swaps the groups in. As in Prometheus, a group whose file, name and
//! definition are unchanged keeps running untouched; a changed one takes over its
//! predecessor's state (series for staleness, active alerts); a removed one stops and its
//! series get staleness markers two intervals later.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use inferdb_query::{Engine, EngineOptions};
use inferdb_storage::{Db, Labels};
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::file::{parse, parse_file, RuleFileErrors};
use super::group::{Group, GroupOptions, RestoreOptions, RuleStore};
use super::schedule::{eval_sub_ms_ns, eval_timestamp_ms, DbStore};
use crate::config::Config;
use crate::model::time::now_ms;
use crate::notifier::{generator_url, Alert as NotifierAlert, Notifier};

/// Settings of the manager that come from flags.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    /// `--rules.alert.for-outage-tolerance` (1h): how far back `ALERTS_FOR_STATE` is read
    /// when restoring.
    pub outage_tolerance_ms: i64,
    /// `--rules.alert.for-grace-period` (10m): the least time a restored alert waits before
    /// firing; rules with a shorter `for` are not restored.
    pub for_grace_period_ms: i64,
    /// `--rules.alert.resend-delay` (1m): how long to wait before resending a firing alert.
    pub resend_delay_ms: i64,
    /// The external URL (`$externalURL` in templates, the alerts' generator URL).
    pub external_url: String,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            outage_tolerance_ms: 3_600_000,
            for_grace_period_ms: 600_000,
            resend_delay_ms: 60_000,
            external_url: String::new(),
        }
    }
}

/// Where firing and resolved alerts go: the Alertmanager [`Notifier`] (a trait, so tests
/// can watch what is sent).
pub trait AlertSender: Send + Sync {
    /// Queues `alerts` for sending.
    fn send(&self, alerts: Vec<NotifierAlert>);
}

impl AlertSender for Notifier {
    fn send(&self, alerts: Vec<NotifierAlert>) {
        Notifier::send(self, alerts);
    }
}

/// Why rule files were refused: every message, each with its file (and line and column where
/// the file has them), as Prometheus words them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct LoadError(pub Vec<String>);

/// Groups read and checked by [`RuleManager::prepare`], ready for [`RuleManager::apply`].
pub struct Prepared {
    groups: Vec<Group>,
    engine: Engine,
}

impl Prepared {
    /// How many groups were read.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether no group was read.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

type GroupKey = (String, String);

/// Per-group counters of `prometheus_rule_*` (kept while a group of that file and name
/// exists, across reloads).
#[derive(Debug, Default)]
struct GroupCounters {
    iterations: AtomicU64,
    missed: AtomicU64,
    evaluations: AtomicU64,
    failures: AtomicU64,
    last_samples: AtomicU64,
}

struct Running {
    group: Arc<Mutex<Group>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

struct Ctx {
    db: Arc<Db>,
    engine: RwLock<Engine>,
    opts: ManagerOptions,
    sender: RwLock<Option<Arc<dyn AlertSender>>>,
    /// Set at shutdown: removed groups' pending staleness markers are not written then.
    done: watch::Sender<bool>,
    counters: Mutex<BTreeMap<GroupKey, Arc<GroupCounters>>>,
    rule_durations: Window,
    group_durations: Window,
}

/// The rule manager (see the module documentation).
pub struct RuleManager {
    ctx: Arc<Ctx>,
    base_engine: EngineOptions,
    groups: tokio::sync::Mutex<BTreeMap<GroupKey, Running>>,
    /// The groups for readers (the API): a copy of the handles, swapped on apply.
    view: RwLock<Vec<Arc<Mutex<Group>>>>,
    embedded: Mutex<Vec<(String, String)>>,
    /// Whether the first load happened: groups loaded later do not restore `for` state.
    started: AtomicBool,
}

impl RuleManager {
    /// A manager over `db`, querying with `engine` (the options `/api/v1/query` uses; the
    /// default subquery step follows `global.evaluation_interval` at each load).
    pub fn new(db: Arc<Db>, engine: EngineOptions, opts: ManagerOptions) -> Arc<RuleManager> {
        let (done, _) = watch::channel(false);
        let m = Arc::new(RuleManager {
            ctx: Arc::new(Ctx {
                db,
                engine: RwLock::new(Engine::new(engine.clone())),
                opts,
                sender: RwLock::new(None),
                done,
                counters: Mutex::new(BTreeMap::new()),
                rule_durations: Window::default(),
                group_durations: Window::default(),
            }),
            base_engine: engine,
            groups: tokio::sync::Mutex::new(BTreeMap::new()),
            view: RwLock::new(Vec::new()),
            embedded: Mutex::new(Vec::new()),
            started: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&m);
        crate::metrics::register_collector("rules", move |out| {
            if let Some(m) = weak.upgrade() {
                m.write_metrics(out);
            }
        });
        m
    }

    /// Adds a rule file compiled into the binary (the `--demo` rule pack): read at every
    /// load after the configuration's `rule_files`, shown in the API under `name`.
    pub fn add_embedded(&self, name: impl Into<String>, text: impl Into<String>) {
        self.embedded.lock().push((name.into(), text.into()));
    }

    /// Sets where alerts are sent (none: they are evaluated and shown, not sent).
    pub fn set_sender(&self, sender: Arc<dyn AlertSender>) {
        *self.ctx.sender.write() = Some(sender);
    }

    /// Reads and checks every rule file of `cfg` (globs already relative to the
    /// configuration's folder) and the embedded ones; nothing changes in the running groups.
    pub fn prepare(&self, cfg: &Config) -> Result<Prepared, LoadError> {
        let gopts = GroupOptions {
            default_interval_ms: cfg.global.evaluation_interval.0.as_millis() as i64,
            default_query_offset_ms: cfg.global.rule_query_offset.0.as_millis() as i64,
            external_labels: cfg
                .global
                .external_labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            external_url: self.ctx.opts.external_url.clone(),
        };
        let mut errs = Vec::new();
        let mut files: Vec<(String, Result<super::file::RuleFile, RuleFileErrors>)> = Vec::new();
        for pat in &cfg.rule_files {
            match super::glob(std::path::Path::new(pat)) {
                Ok(list) => {
                    for p in list {
                        let name = p.display().to_string();
                        files.push((name, parse_file(&p, false)));
                    }
                }
                Err(e) => errs.push(format!("error retrieving rule files for {pat}: {e}")),
            }
        }
        for (name, text) in self.embedded.lock().iter() {
            let r = parse(text, false).map_err(|e| {
                RuleFileErrors(e.0.into_iter().map(|m| format!("{name}: {m}")).collect())
            });
            files.push((name.clone(), r));
        }
        let mut groups: BTreeMap<GroupKey, Group> = BTreeMap::new();
        for (name, parsed) in files {
            match parsed {
                Err(e) => errs.extend(e.0),
                Ok(f) => {
                    for g in &f.groups {
                        match Group::new(&name, g, gopts.clone()) {
                            Ok(mut g) => {
                                g.eval_sub_ms_ns = eval_sub_ms_ns(&g.file, &g.name, g.interval_ms);
                                groups.insert((g.file.clone(), g.name.clone()), g);
                            }
                            Err(e) => errs.push(format!("{name}: {e}")),
                        }
                    }
                }
            }
        }
        if !errs.is_empty() {
            return Err(LoadError(errs));
        }
        let mut eo = self.base_engine.clone();
        eo.default_subquery_step_ms = gopts.default_interval_ms.max(1);
        Ok(Prepared {
            groups: groups.into_values().collect(),
            engine: Engine::new(eo),
        })
    }

    /// Swaps the prepared groups in: unchanged groups keep running, changed ones take over
    /// their predecessors' state, removed ones stop (their series marked stale two
    /// intervals later). Groups of the first load restore their alerts' `for` state.
    pub async fn apply(&self, prepared: Prepared) {
        let mut running = self.groups.lock().await;
        *self.ctx.engine.write() = prepared.engine;
        let should_restore = !self.started.swap(true, Ordering::SeqCst);
        let mut next: BTreeMap<GroupKey, Running> = BTreeMap::new();
        for mut g in prepared.groups {
            let key = (g.file.clone(), g.name.clone());
            if let Some(old) = running.remove(&key) {
                if old.group.lock().same_definition(&g) {
                    next.insert(key, old);
                    continue;
                }
                let _ = old.stop.send(true);
                let _ = old.task.await;
                g.copy_state(&mut old.group.lock());
            }
            if !should_restore {
                g.set_restored();
            }
            next.insert(key.clone(), self.start(g, should_restore));
        }
        // groups no longer loaded: stop them, mark their series stale later
        for (key, old) in std::mem::take(&mut *running) {
            let _ = old.stop.send(true);
            let _ = old.task.await;
            self.ctx.counters.lock().remove(&key);
            let stopped_at = now_ms();
            let (series, interval) = {
                let mut g = old.group.lock();
                (g.take_series(), g.interval_ms)
            };
            if series.is_empty() {
                continue;
            }
            let ctx = self.ctx.clone();
            let mut done = ctx.done.subscribe();
            tokio::spawn(async move {
                tokio::select! {
                    _ = set(&mut done) => {}
                    _ = tokio::time::sleep(Duration::from_millis(2 * interval.max(0) as u64)) => {
                        let db = ctx.db.clone();
                        let engine = ctx.engine.read().clone();
                        let _ = tokio::task::spawn_blocking(move || {
                            let mut store = DbStore::new(db, engine);
                            for l in &series {
                                store.append(l, stopped_at, inferdb_storage::stale_nan());
                            }
                            store.commit();
                        })
                        .await;
                    }
                }
            });
        }
        *running = next;
        *self.view.write() = running.values().map(|r| r.group.clone()).collect();
        tracing::info!(groups = running.len(), "Rule groups loaded");
    }

    /// Stops every group (no staleness markers: the series stay as they were, as when
    /// Prometheus shuts down).
    pub async fn stop(&self) {
        let _ = self.ctx.done.send(true);
        let mut running = self.groups.lock().await;
        for (_, r) in std::mem::take(&mut *running) {
            let _ = r.stop.send(true);
            let _ = r.task.await;
        }
        self.view.write().clear();
    }

    /// The running groups, sorted by file and name (as Prometheus lists them).
    pub fn groups(&self) -> Vec<Arc<Mutex<Group>>> {
        self.view.read().clone()
    }

    fn start(&self, g: Group, should_restore: bool) -> Running {
        let key = (g.file.clone(), g.name.clone());
        let counters = self.ctx.counters.lock().entry(key).or_default().clone();
        let group = Arc::new(Mutex::new(g));
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(run_group(
            self.ctx.clone(),
            group.clone(),
            counters,
            stop_rx,
            should_restore,
        ));
        Running { group, stop, task }
    }

    fn write_metrics(&self, out: &mut String) {
        let groups = self.groups();
        let counters = self.ctx.counters.lock().clone();
        let mut rows: Vec<(String, f64, f64, f64, usize)> = Vec::new();
        for g in &groups {
            let g = g.lock();
            let last = g
                .last_eval_at
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            rows.push((
                format!("{};{}", g.file, g.name),
                g.interval_ms as f64 / 1000.0,
                last,
                g.eval_duration.as_secs_f64(),
                g.rules.len(),
            ));
        }
        self.ctx.rule_durations.write(
            out,
            "prometheus_rule_evaluation_duration_seconds",
            "The duration for a rule to execute.",
            &[0.5, 0.9, 0.99],
        );
        self.ctx.group_durations.write(
            out,
            "prometheus_rule_group_duration_seconds",
            "The duration of rule group evaluations.",
            &[0.01, 0.05, 0.5, 0.9, 0.99],
        );
        let counter =
            |out: &mut String, name: &str, help: &str, f: &dyn Fn(&GroupCounters) -> u64| {
                let data: Vec<(String, f64)> = counters
                    .iter()
                    .map(|((file, n), c)| (format!("{file};{n}"), f(c) as f64))
                    .collect();
                let rows: Vec<([(&str, &str); 1], f64)> = data
                    .iter()
                    .map(|(k, v)| ([("rule_group", k.as_str())], *v))
                    .collect();
                let rows: Vec<(&[(&str, &str)], f64)> =
                    rows.iter().map(|(l, v)| (&l[..], *v)).collect();
                crate::metrics::write_family(out, name, help, "counter", &rows);
            };
        counter(
            out,
            "prometheus_rule_evaluation_failures_total",
            "The total number of rule evaluation failures.",
            &|c| c.failures.load(Ordering::Relaxed),
        );
        counter(
            out,
            "prometheus_rule_evaluations_total",
            "The total number of rule evaluations.",
            &|c| c.evaluations.load(Ordering::Relaxed),
        );
        counter(
            out,
            "prometheus_rule_group_iterations_missed_total",
            "The total number of rule group evaluations missed due to slow rule group evaluation.",
            &|c| c.missed.load(Ordering::Relaxed),
        );
        counter(
            out,
            "prometheus_rule_group_iterations_total",
            "The total number of scheduled rule group evaluations, whether executed or missed.",
            &|c| c.iterations.load(Ordering::Relaxed),
        );
        let gauge = |out: &mut String, name: &str, help: &str, vals: Vec<(&str, f64)>| {
            let rows: Vec<([(&str, &str); 1], f64)> = vals
                .iter()
                .map(|(k, v)| ([("rule_group", *k)], *v))
                .collect();
            let rows: Vec<(&[(&str, &str)], f64)> =
                rows.iter().map(|(l, v)| (&l[..], *v)).collect();
            crate::metrics::write_family(out, name, help, "gauge", &rows);
        };
        gauge(
            out,
            "prometheus_rule_group_interval_seconds",
            "The interval of a rule group.",
            rows.iter().map(|r| (r.0.as_str(), r.1)).collect(),
        );
        gauge(
            out,
            "prometheus_rule_group_last_duration_seconds",
            "The duration of the last rule group evaluation.",
            rows.iter().map(|r| (r.0.as_str(), r.3)).collect(),
        );
        gauge(
            out,
            "prometheus_rule_group_last_evaluation_samples",
            "The number of samples returned during the last rule group evaluation.",
            rows.iter()
                .map(|r| {
                    let (file, name) = r.0.split_once(';').unwrap_or((&r.0, ""));
                    let n = counters
                        .get(&(file.to_string(), name.to_string()))
                        .map(|c| c.last_samples.load(Ordering::Relaxed))
                        .unwrap_or(0);
                    (r.0.as_str(), n as f64)
                })
                .collect(),
        );
        gauge(
            out,
            "prometheus_rule_group_last_evaluation_timestamp_seconds",
            "The timestamp of the last rule group evaluation in seconds.",
            rows.iter().map(|r| (r.0.as_str(), r.2)).collect(),
        );
        gauge(
            out,
            "prometheus_rule_group_rules",
            "The number of rules.",
            rows.iter().map(|r| (r.0.as_str(), r.4 as f64)).collect(),
        );
    }
}

/// One group's loop: the first evaluation at the group's slot in the next interval, then
/// one per interval (missed slots counted and skipped); with `should_restore`, the `for`
/// state is restored after the second evaluation, as Prometheus does.
async fn run_group(
    ctx: Arc<Ctx>,
    group: Arc<Mutex<Group>>,
    counters: Arc<GroupCounters>,
    mut stop: watch::Receiver<bool>,
    should_restore: bool,
) {
    let (file, name, interval) = {
        let g = group.lock();
        (g.file.clone(), g.name.clone(), g.interval_ms.max(1))
    };
    let mut next = eval_timestamp_ms(&file, &name, interval, now_ms()) + interval;
    let mut store: Option<DbStore> = None;
    let mut evals = 0u32;
    loop {
        let wait = next - now_ms();
        if wait > 0 {
            tokio::select! {
                _ = set(&mut stop) => return,
                _ = tokio::time::sleep(Duration::from_millis(wait as u64)) => {}
            }
        }
        if *stop.borrow() {
            return;
        }
        let missed = (now_ms() - next) / interval;
        counters.iterations.fetch_add(1, Ordering::Relaxed);
        if missed > 0 && evals > 0 {
            counters.missed.fetch_add(missed as u64, Ordering::Relaxed);
            counters
                .iterations
                .fetch_add(missed as u64, Ordering::Relaxed);
            next += missed * interval;
        }
        let ts = next;
        let restore_now = should_restore && evals == 1;
        let (g, c, cx) = (group.clone(), counters.clone(), ctx.clone());
        let mut st = store.take();
        let res = tokio::task::spawn_blocking(move || {
            let engine = cx.engine.read().clone();
            let st = st.get_or_insert_with(|| DbStore::new(cx.db.clone(), engine.clone()));
            st.set_engine(engine);
            let mut g = g.lock();
            let stats = g.eval(ts, st);
            c.evaluations
                .fetch_add(g.rules.len() as u64, Ordering::Relaxed);
            c.failures
                .fetch_add(stats.failures as u64, Ordering::Relaxed);
            c.last_samples
                .store(stats.samples as u64, Ordering::Relaxed);
            for r in &g.rules {
                cx.rule_durations.observe(r.eval_duration.as_secs_f64());
            }
            cx.group_durations.observe(g.eval_duration.as_secs_f64());
            if restore_now {
                let t0 = std::time::Instant::now();
                g.restore_for_state(
                    now_ms(),
                    &*cx.db,
                    RestoreOptions {
                        outage_tolerance_ms: cx.opts.outage_tolerance_ms,
                        for_grace_period_ms: cx.opts.for_grace_period_ms,
                    },
                );
                tracing::debug!(file = %g.file, group = %g.name,
                    duration_seconds = t0.elapsed().as_secs_f64(),
                    "'for' state restoration completed");
            }
            let sender = cx.sender.read().clone();
            let to_send = g.alerts_to_send(ts, cx.opts.resend_delay_ms);
            drop(g);
            if let (Some(s), false) = (sender, to_send.is_empty()) {
                let url = &cx.opts.external_url;
                s.send(
                    to_send
                        .into_iter()
                        .map(|a| NotifierAlert {
                            generator_url: generator_url(url, &a.expr),
                            labels: a.labels,
                            annotations: Labels::from_pairs(a.annotations),
                            starts_at: a.starts_at_ms,
                            ends_at: a.ends_at_ms,
                        })
                        .collect(),
                );
            }
            st.take_refused()
        });
        match res.await {
            Ok(refused) if refused > 0 => {
                tracing::warn!(file = %file, group = %name, samples = refused,
                    "Rule evaluation result discarded (out of order or duplicate timestamp)");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(file = %file, group = %name, err = %e, "Rule evaluation failed")
            }
        }
        evals += 1;
        next += interval;
    }
}

/// Completes once `rx` holds `true` (or its sender is gone).
async fn set(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// The last observations of a duration, for a summary's quantiles (Prometheus keeps a
/// ten-minute window; this keeps the last 1,024 observations) with the all-time sum and
/// count.
#[derive(Default)]
struct Window {
    inner: Mutex<WindowInner>,
}

#[derive(Default)]
struct WindowInner {
    last: std::collections::VecDeque<f64>,
    sum: f64,
    count: u64,
}

const WINDOW: usize = 1024;

impl Window {
    fn observe(&self, v: f64) {
        let mut w = self.inner.lock();
        if w.last.len() == WINDOW {
            w.last.pop_front();
        }
        w.last.push_back(v);
        w.sum += v;
        w.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str, quantiles: &[f64]) {
        let (mut sorted, sum, count) = {
            let w = self.inner.lock();
            (w.last.iter().copied().collect::<Vec<f64>>(), w.sum, w.count)
        };
        sorted.sort_by(|a, b| a.total_cmp(b));
        let g = |v: f64| {
            inferdb_query::go_format::format_float(v, inferdb_query::go_format::FloatFormat::G)
        };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
        for q in quantiles {
            let v = if sorted.is_empty() {
                f64::NAN
            } else {
                let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
                sorted[i]
            };
            let _ = writeln!(out, "{name}{{quantile=\"{}\"}} {}", g(*q), g(v));
        }
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {count}", g(sum));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::group::AlertState;
    use inferdb_storage::Options;

    fn db(dir: &std::path::Path) -> Arc<Db> {
        Arc::new(
            Db::open(
                dir,
                Options {
                    background: false,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    }

    fn config(dir: &std::path::Path, interval: &str) -> Config {
        let p = dir.join("prometheus.yml");
        std::fs::write(
            &p,
            format!("global:\n  evaluation_interval: {interval}\nrule_files: ['rules/*.yml']\n"),
        )
        .unwrap();
        Config::load(&p).unwrap()
    }

    fn write_rules(dir: &std::path::Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir.join("rules")).unwrap();
        std::fs::write(dir.join("rules").join(name), text).unwrap();
    }

    fn query(db: &Db, expr: &str, t: i64) -> Vec<(Labels, f64)> {
        match Engine::default().instant(db, expr, t).unwrap().value {
            inferdb_query::Value::Vector(v) => v.into_iter().map(|s| (s.metric, s.f)).collect(),
            other => panic!("{other:?}"),
        }
    }

    /// Waits (5 s at most) until `f` holds.
    async fn until(what: &str, f: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !f() {
            assert!(std::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reload_keeps_unchanged_groups_copies_state_and_refuses_broken_files() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(&dir.path().join("data"));
        write_rules(
            dir.path(),
            "a.yml",
            "groups:\n- name: keep\n  rules:\n  - record: one\n    expr: vector(1)\n- name: change\n  rules:\n  - alert: Always\n    expr: vector(1)\n    for: 1h\n",
        );
        write_rules(
            dir.path(),
            "b.yml",
            "groups:\n- name: gone\n  rules:\n  - record: two\n    expr: vector(2)\n",
        );
        let cfg = config(dir.path(), "100ms");
        let m = RuleManager::new(
            db.clone(),
            EngineOptions::default(),
            ManagerOptions::default(),
        );
        m.apply(m.prepare(&cfg).unwrap()).await;
        let groups = m.groups();
        assert_eq!(
            groups
                .iter()
                .map(|g| g.lock().name.clone())
                .collect::<Vec<_>>(),
            ["change", "keep", "gone"],
            "sorted by file, then name"
        );
        let evaluated = |i: usize| {
            let g = m.groups()[i].clone();
            move || g.lock().last_eval_at.is_some()
        };
        until("every group evaluated", || (0..3).all(|i| evaluated(i)())).await;
        let active_at = {
            let g = groups[0].lock();
            let a = g.rules[0].active.values().next().unwrap();
            assert_eq!(a.state, AlertState::Pending);
            a.active_at
        };

        // a broken file: refused with file and position, nothing changes
        write_rules(
            dir.path(),
            "b.yml",
            "groups:\n- name: gone\n  rules:\n  - record: two\n    expr: vector(2) +\n",
        );
        let e = m.prepare(&cfg).err().expect("broken file refused");
        let b = dir.path().join("rules/b.yml").display().to_string();
        assert_eq!(
            e.0,
            [format!("{b}: 5:11: group \"gone\", rule 1, \"two\": could not parse expression: 1:12: parse error: unexpected end of input")]
        );
        assert_eq!(m.groups().len(), 3);

        // `change` gets a label, `gone` goes, `keep` stays as it is
        write_rules(
            dir.path(),
            "a.yml",
            "groups:\n- name: keep\n  rules:\n  - record: one\n    expr: vector(1)\n- name: change\n  rules:\n  - alert: Always\n    expr: vector(1)\n    for: 1h\n  - record: three\n    expr: vector(3)\n",
        );
        std::fs::remove_file(dir.path().join("rules/b.yml")).unwrap();
        let stopped = now_ms();
        let gone_last = groups[2].lock().last_eval_ms;
        m.apply(m.prepare(&cfg).unwrap()).await;
        let after = m.groups();
        assert_eq!(after.len(), 2);
        assert!(Arc::ptr_eq(&after[1], &groups[1]), "unchanged group kept");
        assert!(
            !Arc::ptr_eq(&after[0], &groups[0]),
            "changed group replaced"
        );
        {
            let g = after[0].lock();
            let a = g.rules[0]
                .active
                .values()
                .next()
                .expect("alert state copied");
            assert_eq!(a.active_at, active_at);
        }
        // the removed group's series is marked stale two intervals after it stopped
        until("staleness marker of the removed group", || {
            query(&db, "two", stopped + 300).is_empty()
        })
        .await;
        assert_eq!(query(&db, "two", gone_last).len(), 1, "written before");
        assert!(!query(&db, "one", now_ms()).is_empty());
        m.stop().await;
        assert!(m.groups().is_empty());
    }

    /// Prometheus' `RestoreForState` cases: an alert pending before the outage keeps its
    /// pending time (the outage added), one that would fire within the grace period fires
    /// exactly at its end, one that was firing keeps its start, and a rule whose `for` is
    /// below the grace period is not restored.
    #[test]
    fn for_state_restored_as_prometheus_does() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(dir.path());
        let text = "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: vector(1)\n    for: 10m\n    labels: {x: '1'}\n  - alert: Short\n    expr: vector(1)\n    for: 1m\n";
        let f = parse(text, false).unwrap();
        let now = 10_000_000_000i64;
        let min = 60_000;
        // ALERTS_FOR_STATE of A written until the server went down 20 min ago
        let down = now - 20 * min;
        let series = Labels::from_pairs([
            ("__name__", "ALERTS_FOR_STATE"),
            ("alertname", "A"),
            ("x", "1"),
        ]);
        let opts = RestoreOptions {
            outage_tolerance_ms: 3_600_000,
            for_grace_period_ms: 2 * min,
        };
        // (active since before the outage, expected active_at after the restore)
        let cases = [
            // pending 3 min of 10: 7 min left, more than the grace period
            (down - 3 * min, down - 3 * min + (now - down)),
            // pending 9 min: 1 min left, below the grace period of 2 min
            (down - 9 * min, now + 2 * min - 10 * min),
            // firing: unchanged
            (down - 30 * min, down - 30 * min),
        ];
        for (i, (active_since, want)) in cases.into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let db2 = db_at(dir.path());
            let mut app = db2.appender();
            for t in (down - 5 * min..=down).step_by(min as usize) {
                app.append(&series, t, (active_since / 1000) as f64)
                    .unwrap();
            }
            app.commit().unwrap();
            let mut g = Group::new("f", &f.groups[0], GroupOptions::default()).unwrap();
            let mut store = DbStore::new(db2.clone(), Engine::default());
            g.eval(now - 1_000, &mut store);
            g.restore_for_state(now, &*db2, opts);
            let a = g.rules[0].active.values().next().unwrap();
            assert_eq!(a.active_at, want, "case {i}");
            assert!(g.rules.iter().all(|r| r.restored));
            // Short (for < grace period) starts afresh
            let s = g.rules[1].active.values().next().unwrap();
            assert_eq!(s.active_at, now - 1_000);
        }
        drop(db);
    }

    fn db_at(dir: &std::path::Path) -> Arc<Db> {
        db(dir)
    }
}
