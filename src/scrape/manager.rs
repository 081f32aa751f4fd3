//! The scrape manager: one tokio task per target, started and stopped as the configuration
//! (or file service discovery) changes.
//!
//! Each loop ticks at its target's interval with a stable per-target offset, so targets
//! spread over the interval and keep their phase (offsets are rounded down to slots of 1/20
//! of the interval, 50 ms at most, so that one wakeup starts several scrapes); a target that fails is marked down with
//! the reason and the others go on. A target that disappears (reload, file SD change) gets
//! staleness markers for its series.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::target::{
    targets_from_group, Auth, MetricMetadata, ScrapeLoop, ScrapeOptions, Target, TargetState,
};
use crate::config::{Config, ScrapeConfig};
use crate::discovery::{self, TargetGroup};
use crate::model::relabel::LabelMap;
use crate::model::sink::SampleSink;
use crate::model::time::now_ms;

/// A target as the targets API shows it.
#[derive(Debug, Clone)]
pub struct TargetInfo {
    /// The target.
    pub target: Target,
    /// Its last scrape.
    pub state: TargetState,
}

struct Running {
    /// The target as the targets API shows it; `source` is where it came from, so that a
    /// target whose discovered labels changed (its labels did not) shows the new ones.
    target: Target,
    source: Arc<Target>,
    state: Arc<Mutex<TargetState>>,
    stop: watch::Sender<StopReason>,
    handle: JoinHandle<()>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Running,
    /// The target went away: write staleness markers.
    Removed,
    /// inferdb is shutting down: leave the series as they are.
    Shutdown,
}

/// Runs the scrape loops of a configuration.
pub struct ScrapeManager {
    sink: Arc<dyn SampleSink>,
    running: Mutex<HashMap<String, Running>>,
    errors: Mutex<Vec<String>>,
    discovery: discovery::Manager,
    /// Per job: how many targets relabelling dropped, and the discovered labels of the
    /// first `keep_dropped_targets` of them (all when 0).
    dropped: Mutex<BTreeMap<String, (usize, Vec<LabelMap>)>>,
    /// Per job, the targets of each group as last relabelled.
    relabelled: Mutex<HashMap<String, JobTargets>>,
}

/// The targets of one job's groups after relabelling, kept so that a discovery change
/// relabels only the groups that changed (Prometheus' scrape pool relabels every group on
/// every update).
#[derive(Default)]
struct JobTargets {
    /// The job's configuration the targets were made with (its `Debug` text, with the
    /// global settings): another one relabels everything.
    config: String,
    /// By provider (static groups first) and source: the group and what it gave.
    groups: HashMap<(usize, String), GroupTargets>,
    /// The job's HTTP client, made once per configuration.
    client: Option<reqwest::Client>,
}

/// Targets with their keys ([`Target::key`]).
type KeyedTargets = Vec<(Arc<str>, Arc<Target>)>;

struct GroupTargets {
    group: Arc<TargetGroup>,
    targets: KeyedTargets,
    dropped: Vec<LabelMap>,
}

impl JobTargets {
    /// The job's targets and dropped targets from `providers`' groups, relabelling only the
    /// groups not seen before.
    fn update(
        &mut self,
        cfg: &Config,
        sc: &ScrapeConfig,
        providers: Vec<Vec<Arc<TargetGroup>>>,
    ) -> (KeyedTargets, Vec<LabelMap>) {
        let config = format!("{sc:?}{:?}", cfg.global);
        if config != self.config {
            self.config = config;
            self.groups.clear();
            self.client = None;
        }
        let mut next = HashMap::with_capacity(self.groups.len());
        let (mut targets, mut dropped) = (vec![], vec![]);
        for (i, groups) in providers.into_iter().enumerate() {
            for g in groups {
                let key = (i, g.source.clone());
                let entry = match self.groups.remove(&key) {
                    Some(e) if Arc::ptr_eq(&e.group, &g) || e.group == g => e,
                    _ => {
                        let (targets, dropped) = targets_from_group(cfg, sc, &g);
                        GroupTargets {
                            group: g,
                            targets: targets
                                .into_iter()
                                .map(|t| (Arc::from(t.key()), Arc::new(t)))
                                .collect(),
                            dropped,
                        }
                    }
                };
                targets.extend(entry.targets.iter().cloned());
                dropped.extend(entry.dropped.iter().cloned());
                next.insert(key, entry);
            }
        }
        self.groups = next;
        // Prometheus drops duplicate targets of a job
        let mut seen = std::collections::HashSet::new();
        targets.retain(|(k, _): &(Arc<str>, Arc<Target>)| seen.insert(k.clone()));
        (targets, dropped)
    }

    /// The job's HTTP client (made on first use after a configuration change).
    fn client(&mut self, sc: &ScrapeConfig) -> Result<reqwest::Client, String> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let c = super::target::build_client(sc)?;
        self.client = Some(c.clone());
        Ok(c)
    }
}

impl ScrapeManager {
    /// A manager writing into `sink`; no targets until [`ScrapeManager::apply_config`].
    pub fn new(sink: Arc<dyn SampleSink>) -> Self {
        ScrapeManager {
            sink,
            running: Mutex::new(HashMap::new()),
            errors: Mutex::new(vec![]),
            discovery: discovery::Manager::default(),
            dropped: Mutex::new(BTreeMap::new()),
            relabelled: Mutex::new(HashMap::new()),
        }
    }

    /// Starts loops for new targets and stops those of targets no longer configured; loops of
    /// unchanged targets go on untouched (no data lost on reload). Must run inside a tokio
    /// runtime. Returns the number of targets.
    pub fn apply_config(&self, cfg: &Config) -> usize {
        // by loop key: the target and its job's settings (index into `jobs`)
        let mut wanted: HashMap<String, (Arc<Target>, usize)> = HashMap::new();
        let mut jobs: Vec<(ScrapeOptions, reqwest::Client, Auth)> = vec![];
        self.discovery.apply(cfg);
        let mut errors = self.discovery.errors();
        let mut dropped_all = BTreeMap::new();
        let mut relabelled = self.relabelled.lock();
        relabelled.retain(|job, _| cfg.scrape_configs.iter().any(|sc| &sc.job_name == job));
        for sc in &cfg.scrape_configs {
            let groups = self.discovery.groups(sc);
            let job = relabelled.entry(sc.job_name.clone()).or_default();
            let (targets, mut dropped) = job.update(cfg, sc, groups);
            let n = dropped.len();
            let keep = sc.keep_dropped_targets.unwrap_or(0) as usize;
            if keep > 0 {
                dropped.truncate(keep);
            }
            dropped_all.insert(sc.job_name.clone(), (n, dropped));
            if targets.is_empty() {
                continue;
            }
            let client = match job.client(sc) {
                Ok(c) => c,
                Err(e) => {
                    errors.push(format!("job {}: {e}", sc.job_name));
                    continue;
                }
            };
            let auth = match Auth::from_config(sc) {
                Ok(a) => a,
                Err(e) => {
                    errors.push(format!("job {}: {e}", sc.job_name));
                    continue;
                }
            };
            let opts = ScrapeOptions::from_config(cfg, sc);
            // options are part of the identity: a changed job restarts its loops
            let opts_key = format!("{opts:?}");
            for (key, t) in targets {
                let key = format!("{key}|{:?}|{:?}|{opts_key}", t.interval, t.timeout);
                wanted.insert(key, (t, jobs.len()));
            }
            jobs.push((opts, client, auth));
        }
        drop(relabelled);
        for e in &errors {
            tracing::warn!("{e}");
        }
        *self.errors.lock() = errors;
        *self.dropped.lock() = dropped_all;
        let mut running = self.running.lock();
        let gone: Vec<String> = running
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for k in gone {
            if let Some(r) = running.remove(&k) {
                let _ = r.stop.send(StopReason::Removed);
            }
        }
        for (k, (source, job)) in wanted {
            if let Some(r) = running.get_mut(&k) {
                // as Prometheus' scrape pool: the loop goes on, the discovered labels follow
                if !Arc::ptr_eq(&r.source, &source) {
                    r.target.discovered_labels = source.discovered_labels.clone();
                    r.source = source;
                }
                continue;
            }
            let (opts, client, auth) = &jobs[job];
            let t = Target::clone(&source);
            let lp = ScrapeLoop::new(
                t.clone(),
                opts.clone(),
                client.clone(),
                auth.clone(),
                self.sink.clone(),
            );
            let state = lp.state();
            let (tx, rx) = watch::channel(StopReason::Running);
            let handle = tokio::spawn(run_loop(lp, rx));
            running.insert(
                k,
                Running {
                    target: t,
                    source,
                    state,
                    stop: tx,
                    handle,
                },
            );
        }
        running.len()
    }

    /// Every target with its last scrape, sorted by job and URL.
    pub fn targets(&self) -> Vec<TargetInfo> {
        let mut v: Vec<TargetInfo> = self
            .running
            .lock()
            .values()
            .map(|r| TargetInfo {
                target: r.target.clone(),
                state: r.state.lock().clone(),
            })
            .collect();
        v.sort_by(|a, b| (&a.target.job, &a.target.url).cmp(&(&b.target.job, &b.target.url)));
        v
    }

    /// Per job, the number of targets relabelling dropped and the discovered labels of
    /// those kept for display (`keep_dropped_targets`).
    pub fn dropped_targets(&self) -> BTreeMap<String, (usize, Vec<LabelMap>)> {
        self.dropped.lock().clone()
    }

    /// A receiver that changes whenever service discovery found something new.
    pub fn discovery_changes(&self) -> watch::Receiver<u64> {
        self.discovery.subscribe()
    }

    /// Metadata of every metric family seen on the targets' last pages: name to the
    /// distinct (type, help, unit) triples.
    pub fn metadata(&self) -> BTreeMap<String, Vec<MetricMetadata>> {
        let mut out: BTreeMap<String, Vec<MetricMetadata>> = BTreeMap::new();
        for r in self.running.lock().values() {
            let m = r.state.lock().metadata.clone();
            for (name, md) in m.iter() {
                let v = out.entry(name.clone()).or_default();
                if !v.contains(md) {
                    v.push(md.clone());
                }
            }
        }
        out
    }

    /// Writes the scraper's gauges for `/metrics`: targets per scrape pool
    /// (`prometheus_target_scrape_pool_targets`) and targets per pool and health.
    pub fn write_metrics(&self, out: &mut String) {
        let mut pools: BTreeMap<String, [usize; 3]> = BTreeMap::new();
        for r in self.running.lock().values() {
            let h = r.state.lock().health;
            let e = pools.entry(r.target.job.clone()).or_default();
            e[match h {
                super::target::Health::Up => 0,
                super::target::Health::Down => 1,
                super::target::Health::Unknown => 2,
            }] += 1;
        }
        let rows: Vec<([(&str, &str); 1], f64)> = pools
            .iter()
            .map(|(j, c)| ([("scrape_job", j.as_str())], c.iter().sum::<usize>() as f64))
            .collect();
        let rows: Vec<(&[(&str, &str)], f64)> = rows.iter().map(|(l, v)| (&l[..], *v)).collect();
        crate::metrics::write_family(
            out,
            "prometheus_target_scrape_pool_targets",
            "Current number of targets in this scrape pool.",
            "gauge",
            &rows,
        );
        let mut rows: Vec<([(&str, &str); 2], f64)> = vec![];
        for (j, c) in &pools {
            for (i, h) in ["up", "down", "unknown"].iter().enumerate() {
                rows.push(([("health", h), ("job", j.as_str())], c[i] as f64));
            }
        }
        let rows: Vec<(&[(&str, &str)], f64)> = rows.iter().map(|(l, v)| (&l[..], *v)).collect();
        crate::metrics::write_family(
            out,
            "inferdb_targets",
            "Targets by job and the health of their last scrape.",
            "gauge",
            &rows,
        );
    }

    /// Service-discovery and client errors of the last [`ScrapeManager::apply_config`].
    pub fn discovery_errors(&self) -> Vec<String> {
        self.errors.lock().clone()
    }

    /// Stops every loop (no staleness markers) and waits for them.
    pub async fn stop(&self) {
        self.discovery.stop();
        let all: Vec<Running> = self.running.lock().drain().map(|(_, r)| r).collect();
        for r in &all {
            let _ = r.stop.send(StopReason::Shutdown);
        }
        for r in all {
            let _ = r.handle.await;
        }
    }
}

async fn run_loop(mut lp: ScrapeLoop, mut stop: watch::Receiver<StopReason>) {
    let interval = lp.target().interval;
    let iv_ms = interval.as_millis().max(1) as i64;
    // targets whose offsets fall in the same slot (1/20 of the interval, 50 ms at most)
    // start together: one wakeup of the scrape thread starts several scrapes, and their
    // responses are read in one go more often
    let slot = (iv_ms / 20).clamp(1, 50);
    let offset = lp.target().offset(interval).as_millis() as i64 / slot * slot;
    let now = now_ms();
    // first tick: the next instant whose phase within the interval is the target's offset
    let phase = now.rem_euclid(iv_ms);
    let mut wait = offset - phase;
    if wait < 0 {
        wait += iv_ms;
    }
    let start = tokio::time::Instant::now() + Duration::from_millis(wait as u64);
    let mut ticker = tokio::time::interval_at(start, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => break,
        }
        if *stop.borrow() != StopReason::Running {
            break;
        }
        let t = now_ms();
        let fetched = tokio::select! {
            f = lp.fetch_page() => f,
            _ = stop.changed() => break,
        };
        let report = if fetched.is_large() {
            // parsed and stored on a blocking thread: the other targets' loops go on meanwhile
            let job = tokio::task::spawn_blocking(move || {
                let r = lp.process_fetched(fetched, t);
                (lp, r)
            });
            match job.await {
                Ok((back, r)) => {
                    lp = back;
                    r
                }
                Err(e) => {
                    tracing::error!("scrape loop ended: processing a page failed: {e}");
                    return;
                }
            }
        } else {
            lp.process_fetched(fetched, t)
        };
        if let Some(e) = &report.error {
            tracing::debug!(target = %lp.target().url, "scrape failed: {e}");
        }
    }
    if *stop.borrow() == StopReason::Removed {
        lp.mark_all_stale(now_ms());
    }
}

/// How long after a service-discovery change the targets are recomputed; changes within it
/// are applied together.
const SD_UPDATE_EVERY: Duration = Duration::from_secs(1);

/// Runs the scraper for `config` until `shutdown` completes: applies the configuration,
/// and again whenever service discovery finds something new; logs the configuration's
/// warnings once.
pub async fn run_scraper(
    config: Config,
    sink: Arc<dyn SampleSink>,
    shutdown: impl Future<Output = ()>,
) -> Arc<ScrapeManager> {
    let mgr = Arc::new(ScrapeManager::new(sink));
    run_with(mgr.clone(), config, shutdown).await;
    mgr
}

/// Like [`run_scraper`] with a manager the caller keeps (for the targets/metadata APIs) and
/// a channel of new configurations (reloads).
pub async fn run_with(mgr: Arc<ScrapeManager>, config: Config, shutdown: impl Future<Output = ()>) {
    let (_tx, rx) = watch::channel(config);
    run_with_reload(mgr, rx, shutdown).await
}

/// Runs `mgr` on the configuration in `configs`, applying each new value sent on it (SIGHUP
/// or `/-/reload` handlers send there), until `shutdown` completes.
pub async fn run_with_reload(
    mgr: Arc<ScrapeManager>,
    mut configs: watch::Receiver<Config>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let cfg = configs.borrow_and_update().clone();
        for w in &cfg.warnings {
            tracing::warn!("{w}");
        }
        let mut sd = mgr.discovery_changes();
        let n = mgr.apply_config(&cfg);
        tracing::info!(targets = n, "scrape configuration applied");
        sd.borrow_and_update();
        loop {
            // discovery changes are applied at most once per SD_UPDATE_EVERY (Prometheus
            // batches them every 5 s)
            let sleep = async {
                if sd.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(SD_UPDATE_EVERY).await;
                sd.borrow_and_update();
            };
            tokio::select! {
                _ = &mut shutdown => {
                    mgr.stop().await;
                    return;
                }
                r = configs.changed() => {
                    if r.is_err() {
                        // sender gone: keep running on the current configuration
                        (&mut shutdown).await;
                        mgr.stop().await;
                        return;
                    }
                    break;
                }
                _ = sleep => {
                    mgr.apply_config(&cfg);
                }
            }
        }
    }
}

/// Runs [`run_with_reload`] on a thread of its own with a single-threaded tokio runtime
/// (the scrape loops, their HTTP connections and their store commits), so that scraping
/// neither competes with the API's workers nor pays a thread hand-off per commit. The
/// returned receiver completes when the loops have stopped (after `shutdown`).
pub fn spawn_on_own_thread(
    mgr: Arc<ScrapeManager>,
    configs: watch::Receiver<Config>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::sync::oneshot::Receiver<()>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("inferdb-scrape".into())
        .spawn(move || {
            rt.block_on(run_with_reload(mgr, configs, shutdown));
            let _ = done_tx.send(());
        })?;
    Ok(done_rx)
}
