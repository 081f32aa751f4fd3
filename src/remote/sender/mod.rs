//! The remote-write sender: forwards what inferdb stores to `remote_write` urls.
//!
//! One [`Queue`] per `remote_write` entry, managed by a [`RemoteWriteManager`]. A queue tails
//! the WAL (not the scrape path) with [`inferdb_storage::wal::watch::WalWatcher`] on its own
//! thread, so an outage of the remote loses nothing the WAL still holds: series records give
//! each reference its labels (external labels added, `write_relabel_configs` applied), sample
//! records are spread over shards by series hash (`queue.rs`: batches, retries) and the
//! position the remote has acknowledged is saved in `<data>/remote_write/<name>/position.json`
//! every second and at shutdown (`position.rs`); after a restart, even after `kill -9`, the
//! queue resumes there. A clean shutdown checkpoints the WAL (the store replaces its
//! segments by the head's chunks): the queue then sends, from the checkpoint's chunks, the
//! samples at or after each shard's oldest unacknowledged timestamp (saved with the marks).
//!
//! The number of shards starts at `min_shards` and follows the load between `min_shards` and
//! `max_shards` (re-evaluated every 5 s while the remote answers): enough shards to send the
//! incoming rate plus what is buffered in about 10 s, doubled while the reader waits for room
//! (a WAL backlog). Resharding drains the shards first, so per-series order holds.
//!
//! Metrics (labels `remote_name`, `url`), named as Prometheus names them:
//! `prometheus_remote_storage_samples_total` (sent), `_samples_failed_total` (refused with a
//! 4xx, not retried), `_samples_retried_total`, `_samples_dropped_total` (dropped by write
//! relabelling or of unknown series), `_samples_pending`, `_shards`,
//! `prometheus_remote_storage_queue_highest_sent_timestamp_seconds`, `_bytes_total`,
//! `_sent_batch_duration_seconds`, and `inferdb_remote_storage_wal_segments_missing_total`
//! (WAL segments checkpointed away before they were sent).

pub mod position;
pub mod queue;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use inferdb_storage::wal::watch::{PollResult, WalWatcher, WatchEvent};
use inferdb_storage::Labels;

use crate::config::remote_write::RemoteWriteConfig;
use crate::config::ConfigError;
use crate::metrics::{self, Counter, Gauge, Histogram};
use crate::model::relabel::{self, LabelMap};
use crate::remote::proto::{Label, Sample};
use position::{Marks, Pos, PositionFile};
use queue::{Control, Item, Sender, SeriesOut, Shard};

/// Why a queue could not start.
#[derive(Debug, thiserror::Error)]
pub enum SenderError {
    /// A secret file could not be read.
    #[error("remote_write {name}: {source}")]
    Config {
        /// The queue.
        name: String,
        /// The error.
        source: ConfigError,
    },
    /// A header or the authorization value is not a valid HTTP header.
    #[error("remote_write {name}: invalid header: {reason}")]
    Header {
        /// The queue.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The HTTP client could not be built.
    #[error("remote_write {name}: HTTP client: {source}")]
    Client {
        /// The queue.
        name: String,
        /// The error.
        source: reqwest::Error,
    },
}

/// The metrics of one queue.
pub struct Metrics {
    sent: Counter,
    /// Samples refused with a 4xx (not retried).
    pub failed: Counter,
    /// Samples of requests that failed and were retried.
    pub retried: Counter,
    dropped: Counter,
    /// Samples the remote already had (refused as out of order when resent after a crash).
    pub dropped_old: Counter,
    /// Compressed bytes sent.
    pub bytes: Counter,
    pending: Gauge,
    shards: Gauge,
    highest_sent: Gauge,
    highest_sent_ms: AtomicI64,
    missing: Counter,
    corrupt: Counter,
    /// Request durations.
    pub send_seconds: Histogram,
    /// Samples handed to shards (for resharding).
    enqueued: AtomicU64,
    /// Times the reader waited for room in a shard (for resharding).
    blocked: AtomicU64,
}

impl Metrics {
    fn new(name: &str, url: &str) -> Arc<Metrics> {
        let l = [("remote_name", name), ("url", url)];
        Arc::new(Metrics {
            sent: metrics::counter_with(
                "prometheus_remote_storage_samples_total",
                "Samples sent to remote storage and acknowledged.",
                &l,
            ),
            failed: metrics::counter_with(
                "prometheus_remote_storage_samples_failed_total",
                "Samples refused by remote storage with a non-recoverable error (4xx); not retried.",
                &l,
            ),
            retried: metrics::counter_with(
                "prometheus_remote_storage_samples_retried_total",
                "Samples in requests that failed recoverably and were sent again.",
                &l,
            ),
            dropped: metrics::counter_with(
                "prometheus_remote_storage_samples_dropped_total",
                "Samples read from the WAL and not sent: dropped by write_relabel_configs or of an unknown series.",
                &l,
            ),
            dropped_old: metrics::counter_with(
                "inferdb_remote_storage_samples_already_present_total",
                "Resent samples the remote refused as older than what it has (after a restart).",
                &l,
            ),
            bytes: metrics::counter_with(
                "prometheus_remote_storage_bytes_total",
                "Compressed request bytes acknowledged by remote storage.",
                &l,
            ),
            pending: metrics::gauge_with(
                "prometheus_remote_storage_samples_pending",
                "Samples read from the WAL, buffered in shards and not yet acknowledged.",
                &l,
            ),
            shards: metrics::gauge_with(
                "prometheus_remote_storage_shards",
                "Shards sending in parallel.",
                &l,
            ),
            highest_sent: metrics::gauge_with(
                "prometheus_remote_storage_queue_highest_sent_timestamp_seconds",
                "Newest sample timestamp acknowledged by remote storage.",
                &l,
            ),
            highest_sent_ms: AtomicI64::new(i64::MIN),
            missing: metrics::counter_with(
                "inferdb_remote_storage_wal_segments_missing_total",
                "WAL segments replaced by a checkpoint before they were sent (their samples still in the head were sent from the checkpoint, older ones were not).",
                &l,
            ),
            corrupt: metrics::counter_with(
                "inferdb_remote_storage_wal_corruptions_total",
                "Corrupt WAL records met by the sender (the rest of their segment was skipped).",
                &l,
            ),
            send_seconds: metrics::histogram_with(
                "prometheus_remote_storage_sent_batch_duration_seconds",
                "Duration of remote-write requests.",
                metrics::DURATION_BUCKETS,
                &l,
            ),
            enqueued: AtomicU64::new(0),
            blocked: AtomicU64::new(0),
        })
    }

    /// Records an acknowledged batch.
    pub fn acked(&self, batch: &[Item]) {
        self.sent.add(batch.len() as u64);
        if let Some(t) = batch.iter().map(|i| i.t).max() {
            self.note_sent(t);
        }
    }

    /// Records acknowledged samples of one series.
    pub fn sent_samples(&self, s: &[Sample]) {
        self.sent.add(s.len() as u64);
        if let Some(t) = s.iter().map(|s| s.timestamp).max() {
            self.note_sent(t);
        }
    }

    fn note_sent(&self, t: i64) {
        let prev = self.highest_sent_ms.fetch_max(t, Ordering::Relaxed);
        if t > prev {
            self.highest_sent.set(t as f64 / 1000.0);
        }
    }

    /// Samples acknowledged so far.
    pub fn sent_total(&self) -> u64 {
        self.sent.get()
    }
}

/// A running queue's shared state.
struct Inner {
    name: String,
    url: String,
    cap: usize,
    max_per_send: usize,
    deadline: Duration,
    min_shards: usize,
    max_shards: usize,
    shards: RwLock<Vec<Arc<Shard>>>,
    ctl: Mutex<(Arc<Control>, Vec<tokio::task::JoinHandle<()>>)>,
    /// Every sample before this was handed to a shard (or skipped).
    reader_pos: Mutex<Pos>,
    /// The newest timestamp handed to a shard.
    read_max_t: AtomicI64,
    stop_reading: AtomicBool,
    pause: AtomicBool,
    paused: AtomicBool,
    sender: Arc<Sender>,
    metrics: Arc<Metrics>,
    file: PositionFile,
    /// Marks saved before this run; new marks are saved once the reader passed all of them.
    resumed: Option<Marks>,
}

impl Inner {
    fn spawn_shards(&self, n: usize) {
        let ctl = Arc::new(Control {
            flush: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let shards: Vec<Arc<Shard>> = (0..n).map(|_| Shard::new()).collect();
        let handles = shards
            .iter()
            .map(|s| {
                tokio::spawn(queue::run_shard(
                    s.clone(),
                    self.sender.clone(),
                    ctl.clone(),
                    self.max_per_send,
                    self.deadline,
                    self.metrics.clone(),
                ))
            })
            .collect();
        if let Ok(mut g) = self.shards.write() {
            *g = shards;
        }
        if let Ok(mut c) = self.ctl.lock() {
            *c = (ctl, handles);
        }
        self.metrics.shards.set(n as f64);
    }

    /// Sends what the shards hold (for at most `deadline`), then stops them; `true` when they
    /// emptied.
    async fn drain_shards(&self, deadline: Duration) -> bool {
        let (ctl, handles) = match self.ctl.lock() {
            Ok(mut c) => (c.0.clone(), std::mem::take(&mut c.1)),
            Err(_) => return false,
        };
        ctl.flush.store(true, Ordering::Release);
        let shards = self.shards();
        for s in &shards {
            s.wake.notify_one();
        }
        let mut handles: Vec<Option<tokio::task::JoinHandle<()>>> =
            handles.into_iter().map(Some).collect();
        let all = async {
            for h in handles.iter_mut() {
                if let Some(j) = h {
                    let _ = j.await;
                    *h = None;
                }
            }
        };
        let done = tokio::time::timeout(deadline, all).await.is_ok();
        ctl.stop.store(true, Ordering::Release);
        for h in handles.into_iter().flatten() {
            h.abort();
            let _ = h.await;
        }
        done && shards.iter().all(|s| s.is_empty())
    }

    fn shards(&self) -> Vec<Arc<Shard>> {
        self.shards.read().map(|g| g.clone()).unwrap_or_default()
    }

    fn pending(&self) -> usize {
        self.shards().iter().map(|s| s.len()).sum()
    }

    /// The marks now: per shard its oldest unacknowledged sample, else the reader position.
    fn marks(&self) -> Marks {
        let r = self.reader_pos.lock().map(|p| *p).unwrap_or_default();
        let next_t = self.read_max_t.load(Ordering::Acquire).saturating_add(1);
        let shards = self.shards();
        Marks {
            version: 1,
            url: self.url.clone(),
            times: shards
                .iter()
                .map(|s| s.min_pending_time().unwrap_or(next_t))
                .collect(),
            shards: shards
                .iter()
                .map(|s| s.first_pending().unwrap_or(r))
                .collect(),
        }
    }

    /// Saves the marks unless the reader is still behind the marks this run resumed from.
    fn save(&self, last: &mut Option<Marks>) {
        let m = self.marks();
        if let Some(old) = &self.resumed {
            let r = self.reader_pos.lock().map(|p| *p).unwrap_or_default();
            if old.shards.iter().any(|&o| r < o) {
                return;
            }
        }
        if last.as_ref() == Some(&m) {
            return;
        }
        match self.file.save(&m) {
            Ok(()) => *last = Some(m),
            Err(e) => {
                tracing::warn!(queue = %self.name, error = %e, "saving the remote-write position")
            }
        }
    }
}

/// One `remote_write` entry at work.
pub struct Queue {
    cfg: RemoteWriteConfig,
    external: BTreeMap<String, String>,
    inner: Arc<Inner>,
    reader: Option<std::thread::JoinHandle<()>>,
    control: Option<tokio::task::JoinHandle<()>>,
    stop_control: Arc<tokio::sync::Notify>,
}

impl Queue {
    /// Starts the queue: reads `wal_dir` from the saved position under `data_dir` (or from
    /// the WAL's beginning). Call from within a tokio runtime.
    pub fn start(
        cfg: RemoteWriteConfig,
        external: BTreeMap<String, String>,
        data_dir: &Path,
        wal_dir: &Path,
    ) -> Result<Queue, SenderError> {
        let name = cfg.queue_name();
        let cerr = |source| SenderError::Config {
            name: name.clone(),
            source,
        };
        let auth = match cfg.basic_credentials().map_err(cerr)? {
            Some((u, p)) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )),
            None => cfg.authorization_header().map_err(cerr)?,
        };
        let headers =
            Sender::headers(&cfg.headers, auth).map_err(|reason| SenderError::Header {
                name: name.clone(),
                reason,
            })?;
        let client = reqwest::Client::builder()
            .timeout(cfg.remote_timeout.0.max(Duration::from_millis(1)))
            .build()
            .map_err(|source| SenderError::Client {
                name: name.clone(),
                source,
            })?;
        let q = &cfg.queue_config;
        let sender = Arc::new(Sender {
            client,
            url: cfg.url.clone(),
            headers,
            min_backoff: q.min_backoff.0,
            max_backoff: q.max_backoff.0,
            retry_on_429: q.retry_on_http_429,
        });
        let file = PositionFile::new(data_dir, &name);
        let resumed = file.load();
        let inner = Arc::new(Inner {
            name: name.clone(),
            url: cfg.url.clone(),
            cap: q.capacity.max(q.max_samples_per_send),
            max_per_send: q.max_samples_per_send,
            deadline: q.batch_send_deadline.0,
            min_shards: q.min_shards.max(1),
            max_shards: q.max_shards.max(q.min_shards.max(1)),
            shards: RwLock::new(Vec::new()),
            ctl: Mutex::new((
                Arc::new(Control {
                    flush: AtomicBool::new(false),
                    stop: AtomicBool::new(false),
                }),
                Vec::new(),
            )),
            reader_pos: Mutex::new(resumed.as_ref().map(|m| m.start()).unwrap_or_default()),
            read_max_t: AtomicI64::new(i64::MIN),
            stop_reading: AtomicBool::new(false),
            pause: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            sender,
            metrics: Metrics::new(&name, &cfg.url),
            file,
            resumed: resumed.clone(),
        });
        inner.spawn_shards(inner.min_shards);
        match &resumed {
            Some(m) => tracing::info!(queue = %name, url = %cfg.url, segment = m.start().segment,
                offset = m.start().offset, "remote write resumes from the saved position"),
            None => tracing::info!(queue = %name, url = %cfg.url,
                "remote write starts at the beginning of the WAL"),
        }
        let reader = {
            let inner = inner.clone();
            let wal_dir = wal_dir.to_path_buf();
            let ext: Vec<(String, String)> = external
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let rules = cfg.write_relabel_configs.clone();
            std::thread::Builder::new()
                .name(format!("remote-write-{name}"))
                .spawn(move || read_wal(inner, wal_dir, resumed, ext, rules))
                .ok()
        };
        let stop_control = Arc::new(tokio::sync::Notify::new());
        let control = tokio::spawn(control_loop(inner.clone(), stop_control.clone()));
        Ok(Queue {
            cfg,
            external,
            inner,
            reader,
            control: Some(control),
            stop_control,
        })
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Samples buffered and not yet acknowledged.
    pub fn pending(&self) -> usize {
        self.inner.pending()
    }

    /// Stops reading, sends what the shards hold for at most `flush_deadline`, saves the
    /// position and stops. What was not acknowledged is sent after the next start.
    pub async fn stop(mut self, flush_deadline: Duration) {
        self.inner.stop_reading.store(true, Ordering::Release);
        self.inner.pause.store(false, Ordering::Release);
        for s in self.inner.shards() {
            s.room.notify_all();
        }
        if let Some(r) = self.reader.take() {
            let _ = tokio::task::spawn_blocking(move || r.join()).await;
        }
        self.stop_control.notify_one();
        if let Some(c) = self.control.take() {
            let _ = c.await;
        }
        let emptied = self.inner.drain_shards(flush_deadline).await;
        if !emptied {
            tracing::warn!(queue = %self.inner.name, pending = self.inner.pending(),
                "remote write stopped with samples unsent; they are sent after the next start");
        }
        let mut last = None;
        self.inner.save(&mut last);
        self.inner.metrics.pending.set(self.inner.pending() as f64);
    }
}

/// Every second: save the marks, update gauges; every 10 s: reshard if the load asks.
async fn control_loop(inner: Arc<Inner>, stop: Arc<tokio::sync::Notify>) {
    let mut last_saved = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut window = Instant::now();
    let mut base = Snapshot::take(&inner);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.notified() => return,
        }
        inner.save(&mut last_saved);
        inner.metrics.pending.set(inner.pending() as f64);
        if window.elapsed() >= Duration::from_secs(5) {
            let now = Snapshot::take(&inner);
            let secs = window.elapsed().as_secs_f64();
            if let Some(n) = desired_shards(&inner, &base, &now, secs) {
                tracing::info!(queue = %inner.name, from = inner.shards().len(), to = n, "resharding");
                reshard(&inner, n).await;
            }
            window = Instant::now();
            base = Snapshot::take(&inner);
        }
    }
}

struct Snapshot {
    enqueued: u64,
    blocked: u64,
    sent: u64,
    send_seconds: f64,
    retried: u64,
}

impl Snapshot {
    fn take(inner: &Inner) -> Snapshot {
        let m = &inner.metrics;
        Snapshot {
            enqueued: m.enqueued.load(Ordering::Relaxed),
            blocked: m.blocked.load(Ordering::Relaxed),
            sent: m.sent.get(),
            send_seconds: m.send_seconds.sum(),
            retried: m.retried.get(),
        }
    }
}

/// Shards needed to send the incoming rate and the buffered samples within about 10 s, at
/// least twice the current number while the reader waits for room (a WAL backlog); `None`
/// to keep the current number (also while requests fail: draining would wait for the remote).
fn desired_shards(inner: &Inner, a: &Snapshot, b: &Snapshot, secs: f64) -> Option<usize> {
    let cur = inner.shards().len().max(1);
    if b.retried > a.retried || secs <= 0.0 {
        return None;
    }
    let sent = (b.sent - a.sent) as f64;
    let busy = b.send_seconds - a.send_seconds;
    if sent <= 0.0 || busy <= 0.0 {
        return None;
    }
    let per_shard = sent / busy; // samples a shard sends per second of requests
    let incoming = (b.enqueued - a.enqueued) as f64 / secs;
    let backlog = inner.pending() as f64 / 10.0;
    let mut want = ((incoming + backlog) / per_shard * 1.3).ceil() as usize;
    if b.blocked > a.blocked {
        // the reader waited for room: the WAL holds more than the shards take (a backlog
        // after an outage or restart); double until it stops waiting
        want = want.max(cur * 2);
    }
    let want = want.clamp(inner.min_shards, inner.max_shards);
    let change = want as f64 / cur as f64;
    if want != cur && !(0.7..=1.3).contains(&change) {
        Some(want)
    } else {
        None
    }
}

/// Pauses the reader, lets the shards empty, starts `n` new ones.
async fn reshard(inner: &Arc<Inner>, n: usize) {
    inner.pause.store(true, Ordering::Release);
    while !inner.paused.load(Ordering::Acquire) {
        if inner.stop_reading.load(Ordering::Acquire) {
            inner.pause.store(false, Ordering::Release);
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if inner.drain_shards(Duration::from_secs(3600)).await {
        inner.spawn_shards(n);
    } else {
        // could not empty them (stopping, or the remote failed meanwhile): keep the old ones'
        // samples by restarting shards over the same buffers
        let old = inner.shards();
        let ctl = Arc::new(Control {
            flush: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let handles = old
            .iter()
            .map(|s| {
                tokio::spawn(queue::run_shard(
                    s.clone(),
                    inner.sender.clone(),
                    ctl.clone(),
                    inner.max_per_send,
                    inner.deadline,
                    inner.metrics.clone(),
                ))
            })
            .collect();
        if let Ok(mut c) = inner.ctl.lock() {
            *c = (ctl, handles);
        }
    }
    inner.pause.store(false, Ordering::Release);
}

/// The label set a series leaves with, or `None` when write relabelling drops it.
fn outgoing(
    l: &Labels,
    external: &[(String, String)],
    rules: &[crate::model::relabel::RelabelConfig],
) -> Option<Arc<SeriesOut>> {
    let mut m: LabelMap = l
        .iter()
        .map(|x| (x.name.clone(), x.value.clone()))
        .collect();
    for (k, v) in external {
        m.entry(k.clone()).or_insert_with(|| v.clone());
    }
    if !relabel::relabel(&mut m, rules) || m.is_empty() {
        return None;
    }
    let mut h: u64 = 0xcbf29ce484222325;
    for (k, v) in &m {
        for b in k.bytes().chain([0xff]).chain(v.bytes()).chain([0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    // mix the low bits (FNV's are weak) before `% shards`
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51afd7ed558ccd);
    h ^= h >> 33;
    Some(Arc::new(SeriesOut {
        labels: m
            .into_iter()
            .map(|(name, value)| Label { name, value })
            .collect(),
        hash: h,
    }))
}

/// The reader thread: tails the WAL and fills the shards.
fn read_wal(
    inner: Arc<Inner>,
    wal_dir: PathBuf,
    resumed: Option<Marks>,
    external: Vec<(String, String)>,
    rules: Vec<crate::model::relabel::RelabelConfig>,
) {
    let start = resumed.as_ref().map(|m| m.start()).unwrap_or_default();
    let mut w = WalWatcher::new(&wal_dir, start.wal());
    let mut series: HashMap<u64, Option<Arc<SeriesOut>>> = HashMap::new();
    let mut groups: Vec<Vec<Item>> = Vec::new();
    let (mut seen_missing, mut seen_corrupt) = (0u64, 0u64);
    let m = inner.metrics.clone();
    while !inner.stop_reading.load(Ordering::Acquire) {
        if inner.pause.load(Ordering::Acquire) {
            inner.paused.store(true, Ordering::Release);
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        inner.paused.store(false, Ordering::Release);
        let res = w.poll(&mut |ev| match ev {
            WatchEvent::Series(s) => {
                for (r, l) in s {
                    series.insert(*r, outgoing(l, &external, &rules));
                }
                true
            }
            WatchEvent::Chunks {
                r,
                checkpoint,
                chunks,
            } => {
                // segments after the saved position were checkpointed (a clean shutdown, or
                // the sender fell a head block behind): send the head's samples not yet sent
                let Some(Some(so)) = series.get(&r) else {
                    return true;
                };
                let p = Pos {
                    segment: checkpoint,
                    offset: 0,
                    index: 0,
                };
                let mut items = Vec::new();
                for c in chunks {
                    let Ok(it) = inferdb_storage::chunk::decode(c) else {
                        m.corrupt.inc();
                        continue;
                    };
                    for (t, v) in it {
                        if resumed
                            .as_ref()
                            .is_none_or(|mk| mk.send_from_checkpoint(so.hash, t))
                        {
                            items.push(Item {
                                series: so.clone(),
                                t,
                                v,
                                pos: p,
                            });
                        }
                    }
                }
                let shards = inner.shards();
                let n = shards.len().max(1) as u64;
                let k = items.len() as u64;
                if let Some(t) = items.iter().map(|i| i.t).max() {
                    inner.read_max_t.fetch_max(t, Ordering::AcqRel);
                }
                let Some(shard) = shards.get((so.hash % n) as usize) else {
                    return true;
                };
                if k > 0 && !push(shard, &mut items, &inner) {
                    return false;
                }
                m.enqueued.fetch_add(k, Ordering::Relaxed);
                !inner.stop_reading.load(Ordering::Acquire)
            }
            WatchEvent::Samples { pos, end, samples } => {
                let shards = inner.shards();
                let n = shards.len().max(1) as u64;
                groups.resize_with(shards.len(), Vec::new);
                let mut dropped = 0u64;
                for (i, s) in samples.iter().enumerate() {
                    let Some(Some(so)) = series.get(&s.r) else {
                        dropped += 1;
                        continue;
                    };
                    let p = Pos::at(pos, i as u32);
                    if resumed.as_ref().is_some_and(|m| m.acknowledged(so.hash, p)) {
                        continue;
                    }
                    inner.read_max_t.fetch_max(s.t, Ordering::AcqRel);
                    groups[(so.hash % n) as usize].push(Item {
                        series: so.clone(),
                        t: s.t,
                        v: s.v,
                        pos: p,
                    });
                }
                if dropped > 0 {
                    m.dropped.add(dropped);
                }
                for (shard, items) in shards.iter().zip(groups.iter_mut()) {
                    let k = items.len() as u64;
                    if k > 0 && !push(shard, items, &inner) {
                        return false;
                    }
                    m.enqueued.fetch_add(k, Ordering::Relaxed);
                }
                if let Ok(mut rp) = inner.reader_pos.lock() {
                    *rp = Pos::at(end, 0);
                }
                !inner.stop_reading.load(Ordering::Acquire) && !inner.pause.load(Ordering::Acquire)
            }
        });
        let st = w.stats();
        if st.segments_missing > seen_missing {
            m.missing.add(st.segments_missing - seen_missing);
            seen_missing = st.segments_missing;
        }
        if st.corruptions > seen_corrupt {
            m.corrupt.add(st.corruptions - seen_corrupt);
            seen_corrupt = st.corruptions;
        }
        match res {
            Ok(PollResult::CaughtUp) => {
                if let Ok(mut rp) = inner.reader_pos.lock() {
                    let p = w.position();
                    let at = Pos::at(p, 0);
                    if at > *rp {
                        *rp = at;
                    }
                }
                std::thread::sleep(Duration::from_millis(50))
            }
            Ok(PollResult::Stopped) => {}
            Err(e) => {
                tracing::warn!(queue = %inner.name, error = %e, "reading the WAL");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

/// Moves `items` into `shard`, waiting for room; `false` when the queue stops meanwhile.
fn push(shard: &Shard, items: &mut Vec<Item>, inner: &Inner) -> bool {
    let Ok(mut st) = shard.state.lock() else {
        return false;
    };
    while !items.is_empty() {
        while st.pending.len() >= inner.cap {
            inner.metrics.blocked.fetch_add(1, Ordering::Relaxed);
            if inner.stop_reading.load(Ordering::Acquire) {
                items.clear();
                return false;
            }
            st = match shard.room.wait_timeout(st, Duration::from_millis(100)) {
                Ok((g, _)) => g,
                Err(_) => return false,
            };
        }
        let take = (inner.cap - st.pending.len()).min(items.len());
        if st.pending.is_empty() {
            st.oldest = Some(Instant::now());
        }
        st.pending.extend(items.drain(..take));
        if st.pending.len() >= inner.max_per_send {
            shard.wake.notify_one();
        }
    }
    true
}

/// The queues of every `remote_write` entry; follows configuration reloads.
pub struct RemoteWriteManager {
    data_dir: PathBuf,
    wal_dir: PathBuf,
    queues: tokio::sync::Mutex<Vec<Queue>>,
}

impl RemoteWriteManager {
    /// A manager for the store in `data_dir` (its WAL is `data_dir/wal`).
    pub fn new(data_dir: &Path) -> Self {
        RemoteWriteManager {
            data_dir: data_dir.to_path_buf(),
            wal_dir: data_dir.join("wal"),
            queues: tokio::sync::Mutex::new(Vec::new()),
        }
    }

    /// Makes the running queues those of `cfgs`: unchanged ones keep running, changed or
    /// removed ones stop (flushing for up to 5 s; the rest is sent from the WAL by the new
    /// queue of the same name), new ones start. Returns the errors of queues that could not
    /// start.
    pub async fn apply(
        &self,
        cfgs: Vec<RemoteWriteConfig>,
        external: &BTreeMap<String, String>,
    ) -> Vec<SenderError> {
        let mut qs = self.queues.lock().await;
        let mut keep = Vec::new();
        for q in qs.drain(..) {
            if cfgs.contains(&q.cfg) && &q.external == external {
                keep.push(q);
            } else {
                tracing::info!(queue = %q.name(), "remote write queue stops (configuration changed)");
                q.stop(Duration::from_secs(5)).await;
            }
        }
        let mut errors = Vec::new();
        for c in cfgs {
            if keep.iter().any(|q| q.cfg == c) {
                continue;
            }
            match Queue::start(c, external.clone(), &self.data_dir, &self.wal_dir) {
                Ok(q) => keep.push(q),
                Err(e) => {
                    tracing::error!(error = %e, "remote write queue not started");
                    errors.push(e);
                }
            }
        }
        *qs = keep;
        errors
    }

    /// Stops every queue (see [`Queue::stop`]).
    pub async fn stop(&self, flush_deadline: Duration) {
        let mut qs = self.queues.lock().await;
        for q in qs.drain(..) {
            q.stop(flush_deadline).await;
        }
    }

    /// Names of the running queues.
    pub async fn names(&self) -> Vec<String> {
        self.queues
            .lock()
            .await
            .iter()
            .map(|q| q.name().to_string())
            .collect()
    }
}

/// Runs the queues of the configuration in `configs` and follows its reloads until `stop`
/// completes (then call [`RemoteWriteManager::stop`]).
pub async fn follow_config(
    mgr: Arc<RemoteWriteManager>,
    mut configs: tokio::sync::watch::Receiver<crate::config::Config>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let (list, external) = {
            let c = configs.borrow_and_update();
            (c.remote_write.clone(), c.global.external_labels.clone())
        };
        mgr.apply(list, &external).await;
        tokio::select! {
            r = configs.changed() => if r.is_err() { return },
            _ = &mut stop => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::proto::WriteRequest;
    use axum::body::Bytes;
    use axum::http::{HeaderMap, StatusCode};
    use inferdb_storage::wal::{RefSample, WalWriter};

    /// What the fake receiver saw.
    #[derive(Default)]
    struct Seen {
        /// (series name, t) of accepted samples, in arrival order.
        accepted: Vec<(String, i64)>,
        requests: usize,
        headers: Vec<HeaderMap>,
    }

    /// A receiver answering the i-th request with `answers[i]` (then 204).
    async fn receiver(answers: Vec<(u16, &'static str)>) -> (String, Arc<Mutex<Seen>>) {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s2 = seen.clone();
        let app = axum::Router::new().route(
            "/write",
            axum::routing::post(move |h: HeaderMap, body: Bytes| {
                let seen = s2.clone();
                let answers = answers.clone();
                async move {
                    let req: WriteRequest = crate::remote::codec::decode(&body, 1 << 26).unwrap();
                    let mut g = seen.lock().unwrap();
                    let (code, text) = answers.get(g.requests).copied().unwrap_or((204, ""));
                    g.requests += 1;
                    g.headers.push(h);
                    if code == 204 {
                        for ts in &req.timeseries {
                            let name = ts.labels.iter().find(|l| l.name == "__name__").unwrap();
                            for s in &ts.samples {
                                g.accepted.push((name.value.clone(), s.timestamp));
                            }
                        }
                    }
                    (StatusCode::from_u16(code).unwrap(), text)
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        (format!("http://{addr}/write"), seen)
    }

    fn wal_with(dir: &Path, n: i64) {
        let mut w = WalWriter::create(&dir.join("wal"), 0, Duration::ZERO, 1 << 20).unwrap();
        let a = Labels::from_pairs([("__name__", "a"), ("job", "x")]);
        let b = Labels::from_pairs([("__name__", "b"), ("job", "drop")]);
        w.log_series([(1u64, &a), (2u64, &b)].into_iter());
        for t in 0..n {
            w.log_samples(&[RefSample { r: 1, t, v: 1.0 }, RefSample { r: 2, t, v: 2.0 }]);
        }
        w.flush().unwrap();
    }

    fn config(url: &str, extra: &str) -> RemoteWriteConfig {
        let y = format!(
            "- url: {url}
  name: t
  headers: {{X-Scope-OrgID: fleet}}
  basic_auth: {{username: u, password: p}}
  write_relabel_configs: [{{source_labels: [job], regex: drop, action: drop}}]
  queue_config: {{max_samples_per_send: 10, batch_send_deadline: 50ms, min_backoff: 5ms, max_backoff: 20ms{extra}}}"
        );
        crate::config::Config::parse(&format!("remote_write:\n{y}"))
            .unwrap()
            .remote_write
            .remove(0)
    }

    async fn until(f: impl Fn() -> bool) {
        for _ in 0..400 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retries_5xx_drops_4xx_keeps_order_and_resumes() {
        let d = tempfile::tempdir().unwrap();
        wal_with(d.path(), 50);
        // two 503s (retried), then one 400 (its 10 samples dropped), then all taken
        let (url, seen) = receiver(vec![(503, "busy"), (503, "busy"), (400, "invalid")]).await;
        let ext: BTreeMap<String, String> = [("cluster".to_string(), "c1".to_string())].into();
        let q = Queue::start(
            config(&url, ""),
            ext.clone(),
            d.path(),
            &d.path().join("wal"),
        )
        .unwrap();
        // the receiver records a batch before it answers; the sender counts it after
        until(|| seen.lock().unwrap().accepted.len() >= 40 && q.metrics().sent_total() >= 40).await;
        let m = q.metrics();
        assert_eq!(m.retried.get(), 20, "two failed batches of 10");
        assert_eq!(m.failed.get(), 10);
        assert_eq!(m.sent_total(), 40);
        assert_eq!(m.dropped.get(), 50, "series b dropped by write relabelling");
        q.stop(Duration::from_secs(1)).await;
        {
            let g = seen.lock().unwrap();
            let ts: Vec<i64> = g.accepted.iter().map(|x| x.1).collect();
            // the refused batch (t 0..10) is gone, the rest arrived once, in order
            assert_eq!(ts, (10..50).collect::<Vec<_>>());
            assert!(g.accepted.iter().all(|x| x.0 == "a"));
            let h = &g.headers[0];
            assert_eq!(h["content-encoding"], "snappy");
            assert_eq!(h["content-type"], "application/x-protobuf");
            assert_eq!(h["x-prometheus-remote-write-version"], "0.1.0");
            assert!(h["user-agent"].to_str().unwrap().starts_with("inferdb/"));
            assert_eq!(h["x-scope-orgid"], "fleet");
            assert_eq!(h["authorization"], "Basic dTpw");
        }
        // the position was saved: a restart sends only what is new
        let file = PositionFile::new(d.path(), "t");
        let marks = file.load().expect("position saved at stop");
        assert!(marks.start() > Pos::default());
        let mut w = WalWriter::create(&d.path().join("wal"), 1, Duration::ZERO, 1 << 20).unwrap();
        w.log_samples(&[RefSample {
            r: 1,
            t: 50,
            v: 1.0,
        }]);
        w.flush().unwrap();
        let q = Queue::start(config(&url, ""), ext, d.path(), &d.path().join("wal")).unwrap();
        until(|| seen.lock().unwrap().accepted.len() >= 41).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        q.stop(Duration::from_secs(1)).await;
        let g = seen.lock().unwrap();
        assert_eq!(g.accepted.len(), 41, "nothing resent after the restart");
        assert_eq!(g.accepted.last().unwrap().1, 50);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn http_429_is_dropped_unless_configured_to_retry() {
        for (retry, failed, retried) in [(false, 10, 0), (true, 0, 10)] {
            let d = tempfile::tempdir().unwrap();
            wal_with(d.path(), 10);
            let (url, seen) = receiver(vec![(429, "slow down")]).await;
            let extra = format!(", retry_on_http_429: {retry}");
            let q = Queue::start(
                config(&url, &extra),
                BTreeMap::new(),
                d.path(),
                &d.path().join("wal"),
            )
            .unwrap();
            until(|| seen.lock().unwrap().requests > retry as usize).await;
            until(|| q.metrics().failed.get() == failed && q.metrics().retried.get() == retried)
                .await;
            assert_eq!(q.metrics().failed.get(), failed);
            assert_eq!(q.metrics().retried.get(), retried);
            q.stop(Duration::from_secs(1)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn out_of_order_refusal_resends_series_without_what_the_remote_has() {
        let d = tempfile::tempdir().unwrap();
        wal_with(d.path(), 10);
        // the whole batch is refused for one old sample, then the series alone again; the
        // sender drops the series' oldest sample and the rest is taken
        let ooo = "out of order sample";
        let (url, seen) = receiver(vec![(400, ooo), (400, ooo)]).await;
        let q = Queue::start(
            config(&url, ""),
            BTreeMap::new(),
            d.path(),
            &d.path().join("wal"),
        )
        .unwrap();
        until(|| seen.lock().unwrap().accepted.len() >= 9).await;
        q.stop(Duration::from_secs(1)).await;
        let g = seen.lock().unwrap();
        let ts: Vec<i64> = g.accepted.iter().map(|x| x.1).collect();
        assert_eq!(ts, (1..10).collect::<Vec<_>>());
        assert_eq!(g.requests, 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn manager_keeps_unchanged_queues_and_stops_removed_ones() {
        let d = tempfile::tempdir().unwrap();
        wal_with(d.path(), 1);
        let (url, _seen) = receiver(vec![]).await;
        let mgr = RemoteWriteManager::new(d.path());
        let ext = BTreeMap::new();
        assert!(mgr.apply(vec![config(&url, "")], &ext).await.is_empty());
        assert_eq!(mgr.names().await, vec!["t".to_string()]);
        let mut other = config(&url, "");
        other.name = Some("u".into());
        mgr.apply(vec![config(&url, ""), other], &ext).await;
        assert_eq!(mgr.names().await, vec!["t".to_string(), "u".to_string()]);
        mgr.apply(vec![], &ext).await;
        assert!(mgr.names().await.is_empty());
        // a secret file that cannot be read: the queue does not start, the error says why
        let mut bad = config(&url, "");
        bad.basic_auth = Some(crate::config::http::BasicAuth {
            username: "u".into(),
            password: None,
            password_file: Some(d.path().join("missing").to_string_lossy().into_owned()),
        });
        let errs = mgr.apply(vec![bad], &ext).await;
        assert_eq!(errs.len(), 1);
        assert!(errs[0].to_string().contains("missing"), "{}", errs[0]);
        mgr.stop(Duration::from_secs(1)).await;
    }
}
