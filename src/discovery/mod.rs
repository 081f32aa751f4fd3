//! Service discovery: where a job's targets come from, before relabelling.
//!
//! Every mechanism produces [`TargetGroup`]s, Prometheus' `targetgroup.Group`: a source
//! name unique within the mechanism, targets (label sets holding at least `__address__`) and
//! labels common to the group (the `__meta_*` labels among them). A mechanism sends a group
//! again whenever it changes; a group sent with no targets for a known source empties it.
//!
//! [`Manager`] runs one provider per SD entry of every job (`static_configs` are read in
//! place; `file_sd_configs`, `http_sd_configs` and `dns_sd_configs` run as tasks), keeps
//! their latest groups and tells the scrape manager through [`Manager::subscribe`] when
//! something changed. Providers whose configuration is unchanged survive a reload with
//! their groups.

pub mod client;
pub mod dns;
pub mod file;
pub mod http;
pub mod kubernetes;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::config::{Config, ScrapeConfig};

/// A set of labels by name.
pub type LabelSet = BTreeMap<String, String>;

/// Prometheus' `__address__` label.
pub const ADDRESS_LABEL: &str = "__address__";

/// A group of targets from one source of one discovery mechanism.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetGroup {
    /// Names the group within its mechanism (a file and index, a URL and index, a DNS
    /// name, a Kubernetes object); a later group with the same source replaces it.
    pub source: String,
    /// The targets: `__address__` and the target's own labels.
    pub targets: Vec<LabelSet>,
    /// Labels shared by every target of the group (a target's own labels win).
    pub labels: LabelSet,
}

impl TargetGroup {
    /// A group of addresses (static and file SD, HTTP SD's JSON).
    pub fn from_addresses(source: String, addresses: &[String], labels: LabelSet) -> Self {
        TargetGroup {
            source,
            targets: addresses
                .iter()
                .map(|a| LabelSet::from([(ADDRESS_LABEL.to_string(), a.clone())]))
                .collect(),
            labels,
        }
    }
}

/// The target-group document of file SD and HTTP SD: `[{"targets": [...], "labels": {...}}]`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupDoc {
    /// Addresses.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Labels for the group.
    #[serde(default)]
    pub labels: Option<LabelSet>,
}

/// What one provider has found: its latest group per source and its last error.
#[derive(Debug, Default)]
struct Slot {
    /// Shared with readers: a group that did not change keeps its allocation, so a reader
    /// can tell it is unchanged by pointer (see [`Manager::groups`]).
    groups: Mutex<BTreeMap<String, Arc<TargetGroup>>>,
    error: Mutex<Option<String>>,
}

/// The handle a provider reports through.
#[derive(Clone)]
pub struct Updater {
    slot: Arc<Slot>,
    changed: watch::Sender<u64>,
}

impl Updater {
    /// An updater outside [`Manager`] (the notifier's Alertmanager discovery runs its own
    /// providers), waking `changed` when its groups change.
    pub fn new(changed: watch::Sender<u64>) -> Updater {
        Updater {
            slot: Arc::new(Slot::default()),
            changed,
        }
    }

    /// Records `groups` (each replaces the group of the same source) and clears the error;
    /// wakes the scrape manager when anything differs.
    pub fn update(&self, groups: Vec<TargetGroup>) {
        let mut changed = false;
        {
            let mut g = self.slot.groups.lock();
            for grp in groups {
                if grp.targets.is_empty() {
                    changed |= g.remove(&grp.source).is_some();
                } else if g.get(&grp.source).map(|o| &**o) != Some(&grp) {
                    changed = true;
                    g.insert(grp.source.clone(), Arc::new(grp));
                }
            }
        }
        *self.slot.error.lock() = None;
        if changed {
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Replaces every group with `groups` (a mechanism that always lists everything).
    pub fn replace(&self, groups: Vec<TargetGroup>) {
        let old: Vec<String> = self.slot.groups.lock().keys().cloned().collect();
        let mut all: Vec<TargetGroup> = old
            .into_iter()
            .filter(|s| !groups.iter().any(|g| &g.source == s))
            .map(|source| TargetGroup {
                source,
                ..Default::default()
            })
            .collect();
        all.extend(groups);
        self.update(all);
    }

    /// Records a failed refresh; the groups found before stay, as in Prometheus.
    pub fn error(&self, e: String) {
        *self.slot.error.lock() = Some(e);
    }

    /// Every group the provider holds, in source order.
    pub fn groups(&self) -> Vec<TargetGroup> {
        self.slot
            .groups
            .lock()
            .values()
            .map(|g| (**g).clone())
            .collect()
    }

    /// [`Updater::groups`] without copying them.
    pub fn shared_groups(&self) -> Vec<Arc<TargetGroup>> {
        self.slot.groups.lock().values().cloned().collect()
    }
}

/// One running discovery entry of a job.
struct Provider {
    /// Kind, position and configuration: an entry whose key is unchanged keeps running.
    key: String,
    what: String,
    updater: Updater,
    task: tokio::task::AbortHandle,
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs the discovery providers of a configuration and keeps what they found.
pub struct Manager {
    providers: Mutex<HashMap<String, Vec<Provider>>>,
    changed: watch::Sender<u64>,
}

impl Default for Manager {
    fn default() -> Self {
        Manager {
            providers: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
        }
    }
}

/// Runs `refresh` now and every `interval` after, reporting through `up`: the pattern of
/// Prometheus' refresh-based mechanisms (HTTP, DNS). `refresh` gives the groups it found
/// and its errors; with `replace` the groups found are all there are (sources missing from
/// them are emptied) unless there were errors, in which case everything found before stays.
pub(crate) async fn refresh_loop<F, Fut>(
    up: Updater,
    interval: Duration,
    replace: bool,
    mut refresh: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = (Vec<TargetGroup>, Vec<String>)>,
{
    let mut tick = tokio::time::interval(interval.max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (groups, errs) = refresh().await;
        if replace && errs.is_empty() {
            up.replace(groups);
        } else {
            up.update(groups);
        }
        if !errs.is_empty() {
            let e = errs.join("; ");
            tracing::warn!("service discovery: {e}");
            up.error(e);
        }
    }
}

impl Manager {
    /// Starts the providers of `cfg` that are not running yet and stops those no longer
    /// configured. Must run inside a tokio runtime.
    pub fn apply(&self, cfg: &Config) {
        let mut all = self.providers.lock();
        let mut next: HashMap<String, Vec<Provider>> = HashMap::new();
        for sc in &cfg.scrape_configs {
            let mut old = all.remove(&sc.job_name).unwrap_or_default();
            let mut mine = vec![];
            for (key, what, start) in wanted(sc) {
                if let Some(i) = old.iter().position(|p| p.key == key) {
                    mine.push(old.swap_remove(i));
                    continue;
                }
                let updater = Updater {
                    slot: Arc::new(Slot::default()),
                    changed: self.changed.clone(),
                };
                let task = start(updater.clone());
                mine.push(Provider {
                    key,
                    what,
                    updater,
                    task,
                });
            }
            if !old.is_empty() {
                self.changed.send_modify(|n| *n += 1);
            }
            next.insert(sc.job_name.clone(), mine);
        }
        if !all.is_empty() {
            self.changed.send_modify(|n| *n += 1);
        }
        *all = next;
    }

    /// The groups of a job by where they come from: its static groups first, then each
    /// provider's in order (sources are unique within one list, not across lists). A group
    /// that has not changed since an earlier call is the same allocation.
    pub fn groups(&self, sc: &ScrapeConfig) -> Vec<Vec<Arc<TargetGroup>>> {
        let mut out = vec![sc
            .static_configs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                Arc::new(TargetGroup::from_addresses(
                    i.to_string(),
                    &s.targets,
                    s.labels.clone(),
                ))
            })
            .collect()];
        if let Some(ps) = self.providers.lock().get(&sc.job_name) {
            for p in ps {
                out.push(p.updater.shared_groups());
            }
        }
        out
    }

    /// The last error of every provider that has one, prefixed with its job and kind.
    pub fn errors(&self) -> Vec<String> {
        let mut v = vec![];
        for (job, ps) in self.providers.lock().iter() {
            for p in ps {
                if let Some(e) = p.updater.slot.error.lock().as_ref() {
                    v.push(format!("job {job}: {}: {e}", p.what));
                }
            }
        }
        v.sort();
        v
    }

    /// A receiver that changes whenever some provider's groups changed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Stops every provider.
    pub fn stop(&self) {
        self.providers.lock().clear();
    }
}

type Start = Box<dyn FnOnce(Updater) -> tokio::task::AbortHandle>;

/// The providers a job asks for: key, description, and how to start it.
fn wanted(sc: &ScrapeConfig) -> Vec<(String, String, Start)> {
    let mut v: Vec<(String, String, Start)> = vec![];
    for (i, c) in sc.file_sd_configs.iter().enumerate() {
        let c = c.clone();
        v.push((
            format!("file/{i}/{c:?}"),
            "file_sd_configs".into(),
            Box::new(move |up| file::start(c, up)),
        ));
    }
    for (i, c) in sc.http_sd_configs.iter().enumerate() {
        let c = c.clone();
        v.push((
            format!("http/{i}/{c:?}"),
            format!("http_sd_configs {}", c.url),
            Box::new(move |up| http::start(c, up)),
        ));
    }
    for (i, c) in sc.kubernetes_sd_configs.iter().enumerate() {
        let c = c.clone();
        v.push((
            format!("kubernetes/{i}/{c:?}"),
            "kubernetes_sd_configs".into(),
            Box::new(move |up| kubernetes::start(c, up)),
        ));
    }
    for (i, c) in sc.dns_sd_configs.iter().enumerate() {
        let c = c.clone();
        v.push((
            format!("dns/{i}/{c:?}"),
            "dns_sd_configs".into(),
            Box::new(move |up| dns::start(c, up)),
        ));
    }
    v
}

/// Decodes `data` as everything discovery reads from the network (an HTTP SD document, a
/// Kubernetes object of each kind, then the target groups of every role from it): the fuzz
/// target's body, also replayed on stable Rust by `tests/sd_fuzz_corpus.rs`. Returns how
/// many decodings succeeded.
pub fn fuzz_decode(data: &[u8]) -> usize {
    kubernetes::fuzz_decode(data) + usize::from(http::parse_groups("http://sd/", data).is_ok())
}
