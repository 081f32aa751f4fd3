//! Sending alerts to Alertmanagers, as Prometheus' `notifier` package does.
//!
//! The rule manager hands firing and resolved alerts to [`Notifier::send`], which never
//! blocks: the alerts get the external labels (an alert's own label wins) and the
//! `alert_relabel_configs`, then join a bounded queue (`--alertmanager.notification-queue-capacity`,
//! the oldest alerts dropped when full). A task takes batches of up to [`MAX_BATCH_SIZE`] off
//! the queue and posts each batch to every discovered Alertmanager at once
//! (`POST <path_prefix>/api/v2/alerts`, Prometheus' JSON, see [`payload`]); a batch that no
//! Alertmanager of some configured set accepted is counted as dropped. The Alertmanagers come
//! from the `alerting.alertmanagers` entries ([`set`]): `static_configs` and `file_sd_configs`
//! (the discovery module's provider), relabelled by the entry's `relabel_configs`.
//! [`Notifier::apply_config`] swaps the entries on reload and keeps the queue; entries whose
//! configuration is unchanged keep their discovered Alertmanagers. Metrics are Prometheus'
//! `prometheus_notifications_*` ([`stats`]).

pub mod payload;
mod set;
mod stats;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use inferdb_storage::labels::Labels;
use parking_lot::{Mutex, RwLock};
use thiserror::Error;
use tokio::sync::{watch, Notify};

use crate::config::Config;
use crate::model::relabel::{relabel, LabelMap, RelabelConfig};
use set::AlertmanagerSet;

/// The most alerts one request carries (Prometheus' `DefaultMaxBatchSize`).
pub const MAX_BATCH_SIZE: usize = 256;

/// The default of `--alertmanager.notification-queue-capacity`.
pub const DEFAULT_QUEUE_CAPACITY: usize = 10_000;

/// One alert as it is sent to Alertmanager (Prometheus' `notifier.Alert`).
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// Its labels (with `alertname`); external labels are added by [`Notifier::send`].
    pub labels: Labels,
    /// Its expanded annotations.
    pub annotations: Labels,
    /// When it started firing (ms since the epoch).
    pub starts_at: i64,
    /// When it ends: the resolve time once resolved, else how long this notification is
    /// valid (ms since the epoch; 0 for unset, sent as Go's zero time).
    pub ends_at: i64,
    /// A link back to the expression (see [`generator_url`]).
    pub generator_url: String,
}

/// Why the notifier refused a configuration.
#[derive(Debug, Error)]
pub enum NotifierError {
    /// An `alertmanagers` entry whose HTTP client cannot be built, or that asks for what
    /// inferdb does not implement.
    #[error("alertmanagers[{index}]: {reason}")]
    Alertmanager {
        /// Position of the entry.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// Settings fixed at start (command-line flags).
#[derive(Debug, Clone)]
pub struct NotifierOptions {
    /// Alerts held at most; the oldest are dropped beyond it.
    pub queue_capacity: usize,
    /// Send what the queue holds when stopping (`--alertmanager.drain-notification-queue-on-shutdown`).
    pub drain_on_shutdown: bool,
    /// Alerts per request.
    pub max_batch_size: usize,
}

impl Default for NotifierOptions {
    fn default() -> Self {
        NotifierOptions {
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            drain_on_shutdown: true,
            max_batch_size: MAX_BATCH_SIZE,
        }
    }
}

/// What a reload changes: labels added to alerts, relabelling, the Alertmanager sets.
#[derive(Default)]
struct Settings {
    external_labels: LabelMap,
    relabel: Vec<RelabelConfig>,
    sets: Vec<Arc<AlertmanagerSet>>,
}

struct Inner {
    opts: NotifierOptions,
    queue: Mutex<VecDeque<Alert>>,
    more: Notify,
    settings: RwLock<Settings>,
    /// Bumped by the discovery providers when their groups change.
    discovered: watch::Sender<u64>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    stats: stats::Stats,
}

/// The handle to the notification queue and its sender task (cheap to clone).
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

impl Notifier {
    /// A notifier with no Alertmanagers yet (see [`Notifier::apply_config`]); starts its
    /// sending and discovery tasks, so it must be called inside a tokio runtime.
    pub fn new(opts: NotifierOptions) -> Notifier {
        let opts = NotifierOptions {
            queue_capacity: opts.queue_capacity.max(1),
            max_batch_size: opts.max_batch_size.max(1),
            ..opts
        };
        let inner = Arc::new(Inner {
            stats: stats::Stats::new(opts.queue_capacity),
            opts,
            queue: Mutex::new(VecDeque::new()),
            more: Notify::new(),
            settings: RwLock::new(Settings::default()),
            discovered: watch::channel(0).0,
            stop: watch::channel(false).0,
            tasks: Mutex::new(Vec::new()),
        });
        stats::register(Arc::downgrade(&inner));
        let send = tokio::spawn(send_loop(inner.clone(), inner.stop.subscribe()));
        let sync = tokio::spawn(sync_loop(
            Arc::downgrade(&inner),
            inner.discovered.subscribe(),
            inner.stop.subscribe(),
        ));
        inner.tasks.lock().extend([send, sync]);
        Notifier { inner }
    }

    /// Takes the `alerting` section and the external labels of `cfg`: entries whose
    /// configuration is unchanged keep their Alertmanagers and discovery, others start
    /// anew; the queue is kept. On error nothing changes. Must run inside a tokio runtime
    /// (file discovery starts a task).
    pub fn apply_config(&self, cfg: &Config) -> Result<(), NotifierError> {
        let old: Vec<Arc<AlertmanagerSet>> = self.inner.settings.read().sets.clone();
        let mut sets = Vec::with_capacity(cfg.alerting.alertmanagers.len());
        for (index, am) in cfg.alerting.alertmanagers.iter().enumerate() {
            let key = set::config_key(am);
            if let Some(s) = old.iter().find(|s| {
                s.key == key
                    && !sets
                        .iter()
                        .any(|n: &Arc<AlertmanagerSet>| Arc::ptr_eq(n, s))
            }) {
                sets.push(s.clone());
                continue;
            }
            let s = AlertmanagerSet::new(index, am, &self.inner.discovered)
                .map_err(|reason| NotifierError::Alertmanager { index, reason })?;
            s.sync(&self.inner.stats);
            sets.push(Arc::new(s));
        }
        // the series of Alertmanagers only removed entries had go with them
        let kept: Vec<String> = sets
            .iter()
            .flat_map(|s| s.discovered.read().active.clone())
            .collect();
        for s in old
            .iter()
            .filter(|o| !sets.iter().any(|n| Arc::ptr_eq(n, o)))
        {
            for u in &s.discovered.read().active {
                if !kept.contains(u) {
                    self.inner.stats.forget(u);
                }
            }
        }
        let mut st = self.inner.settings.write();
        st.external_labels = cfg.global.external_labels.clone();
        st.relabel = cfg.alerting.alert_relabel_configs.clone();
        st.sets = sets;
        Ok(())
    }

    /// Queues `alerts` for sending (never blocks): external labels added where the alert
    /// lacks them, `alert_relabel_configs` applied (dropped alerts are not queued); when the
    /// queue would overflow, its oldest alerts are dropped and counted.
    pub fn send(&self, alerts: Vec<Alert>) {
        let mut alerts = {
            let st = self.inner.settings.read();
            relabel_alerts(&st.relabel, &st.external_labels, alerts)
        };
        if alerts.is_empty() {
            return;
        }
        let cap = self.inner.opts.queue_capacity;
        let mut q = self.inner.queue.lock();
        if alerts.len() > cap {
            let d = alerts.len() - cap;
            alerts.drain(..d);
            tracing::warn!(
                num_dropped = d,
                "Alert batch larger than queue capacity, dropping alerts"
            );
            self.inner.stats.dropped.add(d as u64);
        }
        let over = (q.len() + alerts.len()).saturating_sub(cap);
        if over > 0 {
            q.drain(..over);
            tracing::warn!(
                num_dropped = over,
                "Alert notification queue full, dropping alerts"
            );
            self.inner.stats.dropped.add(over as u64);
        }
        q.extend(alerts);
        drop(q);
        self.inner.more.notify_one();
    }

    /// Alerts waiting in the queue.
    pub fn queue_len(&self) -> usize {
        self.inner.queue.lock().len()
    }

    /// The URLs of the Alertmanagers alerts go to, then those dropped by relabelling, in
    /// configuration order (`/api/v1/alertmanagers`).
    pub fn alertmanagers(&self) -> (Vec<String>, Vec<String>) {
        let (mut active, mut dropped) = (vec![], vec![]);
        for s in &self.inner.settings.read().sets {
            let d = s.discovered.read();
            active.extend(d.active.iter().cloned());
            dropped.extend(d.dropped.iter().cloned());
        }
        (active, dropped)
    }

    /// Stops the tasks; with `drain_on_shutdown` the queue is sent first (each request
    /// bounded by its Alertmanagers' `timeout`), otherwise what it holds is counted as dropped.
    pub async fn stop(&self) {
        self.inner.stop.send_replace(true);
        let tasks: Vec<_> = self.inner.tasks.lock().drain(..).collect();
        for t in tasks {
            let _ = t.await;
        }
        self.inner.settings.write().sets.clear();
    }
}

/// Applies every configuration `configs` receives after the current one (reloads) until
/// `stop` completes; a configuration the notifier refuses is logged and the previous one
/// stays.
pub async fn follow_config(
    notifier: Notifier,
    mut configs: watch::Receiver<Config>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            r = configs.changed() => if r.is_err() { return },
            _ = &mut stop => return,
        }
        let cfg = configs.borrow_and_update().clone();
        if let Err(e) = notifier.apply_config(&cfg) {
            tracing::error!(err = %e, "Error applying the alerting configuration to the notifier");
        }
    }
}

/// Prometheus' `relabelAlerts`: each alert gets the external labels it lacks, then `rules`;
/// alerts the rules drop are left out.
fn relabel_alerts(rules: &[RelabelConfig], external: &LabelMap, alerts: Vec<Alert>) -> Vec<Alert> {
    if rules.is_empty() && external.is_empty() {
        return alerts;
    }
    alerts
        .into_iter()
        .filter_map(|mut a| {
            let mut m: LabelMap = a
                .labels
                .iter()
                .map(|l| (l.name.to_string(), l.value.to_string()))
                .collect();
            for (k, v) in external {
                if m.get(k).is_none_or(|x| x.is_empty()) {
                    m.insert(k.clone(), v.clone());
                }
            }
            if !relabel(&mut m, rules) {
                return None;
            }
            a.labels = Labels::from_pairs(m);
            Some(a)
        })
        .collect()
}

/// Prometheus' generator URL for an alert of `expr`: the external URL and the graph page
/// showing the expression in table view (`strutil.TableLinkForExpression`).
pub fn generator_url(external_url: &str, expr: &str) -> String {
    format!(
        "{}/graph?g0.expr={}&g0.tab=1",
        external_url.trim_end_matches('/'),
        query_escape(expr)
    )
}

/// Go's `url.QueryEscape`: unreserved bytes kept, space as `+`, the rest `%XX`.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl Inner {
    fn next_batch(&self) -> Vec<Alert> {
        let mut q = self.queue.lock();
        let n = q.len().min(self.opts.max_batch_size);
        q.drain(..n).collect()
    }

    /// Posts `alerts` to every Alertmanager of every set at once; true unless some set that
    /// had Alertmanagers (and alerts left after its relabelling) accepted it nowhere.
    async fn send_all(&self, alerts: &[Alert]) -> bool {
        if alerts.is_empty() {
            return true;
        }
        let begin = Instant::now();
        let sets = self.settings.read().sets.clone();
        let mut cached: Option<Bytes> = None;
        let mut tasks = tokio::task::JoinSet::new();
        let mut attempted = vec![false; sets.len()];
        for (i, s) in sets.iter().enumerate() {
            let urls = s.discovered.read().active.clone();
            if urls.is_empty() {
                continue;
            }
            let (body, count) = if s.cfg.alert_relabel_configs.is_empty() {
                let b = cached
                    .get_or_insert_with(|| Bytes::from(payload::encode(alerts)))
                    .clone();
                (b, alerts.len())
            } else {
                let mine = relabel_alerts(
                    &s.cfg.alert_relabel_configs,
                    &LabelMap::new(),
                    alerts.to_vec(),
                );
                if mine.is_empty() {
                    continue;
                }
                (Bytes::from(payload::encode(&mine)), mine.len())
            };
            attempted[i] = true;
            for url in urls {
                let s = s.clone();
                let body = body.clone();
                tasks.spawn(async move {
                    let res = s.post(&url, body).await;
                    (i, url, count, res)
                });
            }
        }
        let mut covered = vec![false; sets.len()];
        while let Some(r) = tasks.join_next().await {
            let Ok((i, url, count, res)) = r else {
                continue;
            };
            match res {
                Ok(()) => covered[i] = true,
                Err(e) => {
                    tracing::error!(alertmanager = %url, count, err = %e, "Error sending alerts");
                    self.stats.errors(&url).add(count as u64);
                }
            }
            self.stats.sent(&url).add(count as u64);
            self.stats.observe_latency(&url, begin.elapsed());
        }
        attempted.iter().zip(&covered).all(|(a, c)| !a || *c)
    }

    async fn send_one_batch(&self) {
        let batch = self.next_batch();
        if !self.send_all(&batch).await {
            self.stats.dropped.add(batch.len() as u64);
        }
    }
}

/// Sends batches while the queue holds alerts; on stop, drains or drops what is left.
async fn send_loop(inner: Arc<Inner>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            _ = inner.more.notified() => {}
        }
        while !*stop.borrow() && !inner.queue.lock().is_empty() {
            inner.send_one_batch().await;
        }
    }
    let left = inner.queue.lock().len();
    if left == 0 {
        return;
    }
    if inner.opts.drain_on_shutdown {
        tracing::info!("Draining any remaining notifications...");
        while !inner.queue.lock().is_empty() {
            inner.send_one_batch().await;
        }
        tracing::info!("Remaining notifications drained");
    } else {
        tracing::warn!(
            count = left,
            "Draining remaining notifications on shutdown is disabled, and some notifications have been dropped"
        );
        inner.stats.dropped.add(left as u64);
        inner.queue.lock().clear();
    }
}

/// Recomputes every set's Alertmanagers when a discovery provider's groups change.
async fn sync_loop(
    inner: std::sync::Weak<Inner>,
    mut changed: watch::Receiver<u64>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            r = changed.changed() => if r.is_err() { return },
        }
        // let a burst of file changes settle into one recomputation
        tokio::time::sleep(Duration::from_millis(50)).await;
        changed.borrow_and_update();
        let Some(inner) = inner.upgrade() else { return };
        let sets = inner.settings.read().sets.clone();
        for s in sets {
            s.sync(&inner.stats);
        }
    }
}

#[cfg(test)]
mod tests;
