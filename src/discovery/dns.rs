//! `dns_sd_configs`: Prometheus' DNS service discovery. Every `refresh_interval` (30 s)
//! each name is looked up (SRV by default; A, AAAA, MX and NS with a `port`) through the
//! servers and search list of `/etc/resolv.conf`, read again on every refresh as Prometheus
//! does, without a cache and without `/etc/hosts`. One group per name (its source), targets
//! labelled `__meta_dns_name` and, for SRV, `__meta_dns_srv_record_target` (the name as
//! answered, with its final dot) and `__meta_dns_srv_record_port`. A name that fails keeps
//! its targets; a name that does not exist has none.

use std::time::Duration;

use hickory_resolver::config::ResolveHosts;
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::Resolver;
use serde::{Deserialize, Deserializer};

use super::{LabelSet, TargetGroup, Updater, ADDRESS_LABEL};
use crate::config::PromDuration;

/// One `dns_sd_configs` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct DnsSdConfig {
    /// The names to look up.
    pub names: Vec<String>,
    /// How often (30 s).
    pub refresh_interval: Duration,
    /// The record type.
    pub kind: RecordType,
    /// The port of A, AAAA, MX and NS targets (SRV records carry theirs).
    pub port: u16,
}

impl<'de> Deserialize<'de> for DnsSdConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(default)]
            names: Vec<String>,
            #[serde(default)]
            refresh_interval: Option<PromDuration>,
            #[serde(default, rename = "type")]
            kind: Option<String>,
            #[serde(default)]
            port: u16,
        }
        let r = Raw::deserialize(d)?;
        if r.names.is_empty() {
            return Err(D::Error::custom(
                "DNS-SD config must contain at least one SRV record name",
            ));
        }
        let t = r.kind.unwrap_or_else(|| "SRV".into());
        let kind = match t.to_ascii_uppercase().as_str() {
            "SRV" => RecordType::SRV,
            "A" => RecordType::A,
            "AAAA" => RecordType::AAAA,
            "MX" => RecordType::MX,
            "NS" => RecordType::NS,
            _ => return Err(D::Error::custom(format!("invalid DNS-SD records type {t}"))),
        };
        if kind != RecordType::SRV && r.port == 0 {
            return Err(D::Error::custom(
                "a port is required in DNS-SD configs for all record types except SRV",
            ));
        }
        Ok(DnsSdConfig {
            names: r.names,
            refresh_interval: r
                .refresh_interval
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(30)),
            kind,
            port: r.port,
        })
    }
}

/// `host:port`, bracketing IPv6 addresses (Go's `net.JoinHostPort`).
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A resolver as Prometheus' lookups behave: `/etc/resolv.conf` read now, no cache, no
/// hosts file.
fn resolver() -> Result<Resolver<TokioConnectionProvider>, String> {
    let (conf, mut opts) = hickory_resolver::system_conf::read_system_conf()
        .map_err(|e| format!("could not load resolv.conf: {e}"))?;
    opts.cache_size = 0;
    opts.use_hosts_file = ResolveHosts::Never;
    opts.edns0 = true;
    let mut b = Resolver::builder_with_config(conf, TokioConnectionProvider::default());
    *b.options_mut() = opts;
    Ok(b.build())
}

/// Looks `name` up and makes its group.
async fn lookup_one(
    r: &Resolver<TokioConnectionProvider>,
    c: &DnsSdConfig,
    name: &str,
) -> Result<TargetGroup, String> {
    let mut g = TargetGroup {
        source: name.to_string(),
        ..Default::default()
    };
    let answer = match r.lookup(name, c.kind).await {
        Ok(a) => a,
        Err(e) if e.is_no_records_found() || e.is_nx_domain() => return Ok(g),
        Err(e) => return Err(format!("could not resolve {name:?}: {e}")),
    };
    for rd in answer.iter() {
        let mut t = LabelSet::new();
        let addr = match rd {
            RData::SRV(s) => {
                let target = s.target().to_string();
                t.insert("__meta_dns_srv_record_target".into(), target.clone());
                t.insert("__meta_dns_srv_record_port".into(), s.port().to_string());
                join_host_port(target.trim_end_matches('.'), s.port())
            }
            RData::MX(m) => {
                let target = m.exchange().to_string();
                t.insert("__meta_dns_mx_record_target".into(), target.clone());
                join_host_port(target.trim_end_matches('.'), c.port)
            }
            RData::NS(n) => {
                let target = n.0.to_string();
                t.insert("__meta_dns_ns_record_target".into(), target.clone());
                join_host_port(target.trim_end_matches('.'), c.port)
            }
            RData::A(a) => join_host_port(&a.0.to_string(), c.port),
            RData::AAAA(a) => join_host_port(&a.0.to_string(), c.port),
            _ => continue,
        };
        t.insert(ADDRESS_LABEL.into(), addr);
        t.insert("__meta_dns_name".into(), name.to_string());
        g.targets.push(t);
    }
    Ok(g)
}

/// Looks every name up; names that failed are left out (they keep their targets).
async fn refresh(c: &DnsSdConfig) -> (Vec<TargetGroup>, Vec<String>) {
    let r = match resolver() {
        Ok(r) => r,
        Err(e) => return (vec![], vec![e]),
    };
    let (mut out, mut errs) = (vec![], vec![]);
    for n in &c.names {
        match lookup_one(&r, c, n).await {
            Ok(g) => out.push(g),
            Err(e) => errs.push(e),
        }
    }
    (out, errs)
}

/// Runs the discovery of one entry on a task.
pub(crate) fn start(c: DnsSdConfig, up: Updater) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let every = c.refresh_interval;
        super::refresh_loop(up, every, false, || refresh(&c)).await
    })
    .abort_handle()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_checked_as_prometheus_checks_it() {
        let c: DnsSdConfig =
            serde_yaml::from_str("{names: [a.example], type: aaaa, port: 9}").unwrap();
        assert_eq!((c.kind, c.port), (RecordType::AAAA, 9));
        assert_eq!(c.refresh_interval, Duration::from_secs(30));
        let c: DnsSdConfig = serde_yaml::from_str("{names: [_m._tcp.x]}").unwrap();
        assert_eq!(c.kind, RecordType::SRV);
        for (y, want) in [
            ("{names: []}", "at least one SRV record name"),
            ("{names: [a], type: A}", "a port is required"),
            (
                "{names: [a], type: TXT, port: 1}",
                "invalid DNS-SD records type TXT",
            ),
            ("{names: [a], bogus: 1}", "unknown field `bogus`"),
        ] {
            let e = serde_yaml::from_str::<DnsSdConfig>(y)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{y}: {e}");
        }
    }

    #[test]
    fn host_port_brackets_ipv6() {
        assert_eq!(join_host_port("::1", 80), "[::1]:80");
        assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
    }
}
