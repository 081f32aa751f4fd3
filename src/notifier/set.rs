//! One `alerting.alertmanagers` entry at run time (Prometheus' `alertmanagerSet`): its HTTP
//! client (basic auth, authorization, TLS, redirects through the shared client settings of
//! [`crate::discovery::client`]), its discovery (`static_configs` in place; each
//! `file_sd_configs`, `http_sd_configs`, `dns_sd_configs` and `kubernetes_sd_configs` entry
//! as the discovery module's provider) and the Alertmanager URLs found, after the entry's
//! `relabel_configs`.

use bytes::Bytes;
use parking_lot::RwLock;
use tokio::sync::watch;

use super::stats::Stats;
use crate::config::alerting::AlertmanagerConfig;
use crate::discovery::client::{error_chain, HttpClientConfig};
use crate::discovery::{dns, file, http, kubernetes, TargetGroup, Updater, ADDRESS_LABEL};
use crate::model::relabel::{relabel, LabelMap};

/// Prometheus' label holding the path alerts are posted to.
const PATH_LABEL: &str = "__alerts_path__";
/// Prometheus' label holding the scheme.
const SCHEME_LABEL: &str = "__scheme__";

/// The Alertmanagers an entry found: URLs alerts go to, and URLs its relabelling dropped.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Discovered {
    pub active: Vec<String>,
    pub dropped: Vec<String>,
}

/// One `alertmanagers` entry with its client, discovery and discovered Alertmanagers.
pub(super) struct AlertmanagerSet {
    /// The configuration as text: an entry whose key is unchanged survives a reload.
    pub key: String,
    pub cfg: AlertmanagerConfig,
    http: HttpClientConfig,
    client: reqwest::Client,
    statics: Vec<TargetGroup>,
    providers: Vec<(Updater, tokio::task::AbortHandle)>,
    pub discovered: RwLock<Discovered>,
}

impl Drop for AlertmanagerSet {
    fn drop(&mut self) {
        for (_, task) in &self.providers {
            task.abort();
        }
    }
}

/// What identifies an entry across reloads.
pub(super) fn config_key(cfg: &AlertmanagerConfig) -> String {
    format!("{cfg:?}")
}

impl AlertmanagerSet {
    /// Builds the client and starts the file discovery of entry `cfg` (inside a tokio
    /// runtime); providers wake `changed` when their files change.
    pub fn new(
        _index: usize,
        cfg: &AlertmanagerConfig,
        changed: &watch::Sender<u64>,
    ) -> Result<AlertmanagerSet, String> {
        let http = cfg.http_client_config();
        http.validate()?;
        let client = http.client()?;
        let statics = cfg
            .static_configs
            .iter()
            .enumerate()
            .map(|(i, s)| TargetGroup::from_addresses(i.to_string(), &s.targets, s.labels.clone()))
            .collect();
        let mut providers = vec![];
        let mut add = |start: &dyn Fn(Updater) -> tokio::task::AbortHandle| {
            let up = Updater::new(changed.clone());
            let task = start(up.clone());
            providers.push((up, task));
        };
        for c in &cfg.file_sd_configs {
            add(&|up| file::start(c.clone(), up));
        }
        for c in &cfg.http_sd_configs {
            add(&|up| http::start(c.clone(), up));
        }
        for c in &cfg.dns_sd_configs {
            add(&|up| dns::start(c.clone(), up));
        }
        for c in &cfg.kubernetes_sd_configs {
            add(&|up| kubernetes::start(c.clone(), up));
        }
        Ok(AlertmanagerSet {
            key: config_key(cfg),
            cfg: cfg.clone(),
            http,
            client,
            statics,
            providers,
            discovered: RwLock::new(Discovered::default()),
        })
    }

    /// Recomputes the Alertmanagers from the current groups, deduplicated by URL (Prometheus'
    /// `sync`); the counters of a new Alertmanager start at 0, and the series of one no
    /// longer discovered are removed.
    pub fn sync(&self, stats: &Stats) {
        let mut groups = self.statics.clone();
        for (up, _) in &self.providers {
            groups.extend(up.groups());
        }
        let mut next = Discovered::default();
        for g in &groups {
            match alertmanagers_from_group(g, &self.cfg) {
                Ok((active, dropped)) => {
                    for u in active {
                        if !next.active.contains(&u) {
                            stats.sent(&u);
                            stats.errors(&u);
                            next.active.push(u);
                        }
                    }
                    next.dropped.extend(dropped);
                }
                Err(e) => tracing::error!(err = %e, "Creating discovered Alertmanagers failed"),
            }
        }
        let mut discovered = self.discovered.write();
        for u in &discovered.active {
            if !next.active.contains(u) {
                stats.forget(u);
            }
        }
        *discovered = next;
    }

    /// Posts `body` to `url` within the entry's timeout; any 2xx answer is success.
    pub async fn post(&self, url: &str, body: Bytes) -> Result<(), String> {
        let mut req = self
            .client
            .post(url)
            .timeout(self.cfg.timeout.0)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(h) = self.http.authorization_header()? {
            req = req.header(reqwest::header::AUTHORIZATION, h);
        }
        let mut resp = req.send().await.map_err(|e| error_chain(&e))?;
        let status = resp.status();
        // read what little Alertmanager answers, so the connection can be kept
        let mut read = 0usize;
        while let Ok(Some(c)) = resp.chunk().await {
            read += c.len();
            if read > 1 << 20 {
                break;
            }
        }
        if !status.is_success() {
            return Err(format!("bad response status {status}"));
        }
        Ok(())
    }
}

/// `path.Join("/", prefix, "/api/v2/alerts")`: Go's cleaned path.
fn post_path(prefix: &str) -> String {
    let mut parts: Vec<&str> = vec![];
    for p in prefix.split('/').chain(["api", "v2", "alerts"]) {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The URL of an Alertmanager's labels (Go's `url.URL{Scheme, Host, Path}.String()`).
fn url_of(l: &LabelMap) -> String {
    let get = |k: &str| l.get(k).map(String::as_str).unwrap_or("");
    let path = get(PATH_LABEL);
    let slash = if path.is_empty() || path.starts_with('/') {
        ""
    } else {
        "/"
    };
    format!(
        "{}://{}{slash}{path}",
        get(SCHEME_LABEL),
        get(ADDRESS_LABEL)
    )
}

/// Prometheus' `AlertmanagerFromGroup`: each target with the entry's scheme and alerts path,
/// the group's labels it lacks, then the entry's `relabel_configs`. Gives the URLs kept and
/// the URLs (before relabelling) dropped; an address with a `/` fails the group.
fn alertmanagers_from_group(
    g: &TargetGroup,
    cfg: &AlertmanagerConfig,
) -> Result<(Vec<String>, Vec<String>), String> {
    let (mut active, mut dropped) = (vec![], vec![]);
    for t in &g.targets {
        let mut l: LabelMap = t.clone();
        l.insert(SCHEME_LABEL.into(), cfg.scheme.clone());
        l.insert(PATH_LABEL.into(), post_path(&cfg.path_prefix));
        for (k, v) in &g.labels {
            if !t.contains_key(k) {
                l.insert(k.clone(), v.clone());
            }
        }
        let pre = l.clone();
        if !relabel(&mut l, &cfg.relabel_configs) {
            dropped.push(url_of(&pre));
            continue;
        }
        let addr = l.get(ADDRESS_LABEL).map(String::as_str).unwrap_or("");
        if addr.contains('/') {
            return Err(format!("{addr:?} is not a valid hostname"));
        }
        active.push(url_of(&l));
    }
    Ok((active, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn am(yaml: &str) -> AlertmanagerConfig {
        let c = Config::parse(&format!("alerting: {{alertmanagers: [{yaml}]}}")).unwrap();
        c.alerting.alertmanagers[0].clone()
    }

    #[test]
    fn post_path_is_go_path_join() {
        assert_eq!(post_path("/"), "/api/v2/alerts");
        assert_eq!(post_path(""), "/api/v2/alerts");
        assert_eq!(post_path("am/"), "/am/api/v2/alerts");
        assert_eq!(post_path("/a//b/../c"), "/a/c/api/v2/alerts");
    }

    #[test]
    fn targets_become_urls_after_relabelling() {
        let cfg = am(r#"{scheme: https, path_prefix: /am,
            relabel_configs: [{source_labels: [zone], regex: b, action: drop},
                              {source_labels: [__address__], regex: '(.*):1', target_label: __address__, replacement: '${1}:9093'}]}"#);
        let mut g = TargetGroup::from_addresses(
            "0".into(),
            &["a:1".into(), "b:2".into()],
            LabelMap::from([("zone".to_string(), "a".to_string())]),
        );
        g.targets[1].insert("zone".into(), "b".into());
        let (active, dropped) = alertmanagers_from_group(&g, &cfg).unwrap();
        assert_eq!(active, ["https://a:9093/am/api/v2/alerts"]);
        assert_eq!(dropped, ["https://b:2/am/api/v2/alerts"]);
        let bad = TargetGroup::from_addresses("0".into(), &["a/b".into()], LabelMap::new());
        let e = alertmanagers_from_group(&bad, &cfg).unwrap_err();
        assert_eq!(e, "\"a/b\" is not a valid hostname");
    }
}
