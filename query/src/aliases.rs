//! Metric renames bridged at query time.
//!
//! vLLM renamed metrics between releases (`vllm:gpu_cache_usage_perc` →
//! `vllm:kv_cache_usage_perc`, ...), which splits dashboards and history in two at every
//! upgrade. With [`MetricAliases`] in [`crate::EngineOptions`], a selector of a *new* name also
//! reads the series stored under the old names, renamed to the new one; a selector of an old
//! name is answered as Prometheus answers it. Where a series exists under both names with the
//! same labels (a server in its deprecation window exposes both), the new name's samples win
//! and the old one's are read only before the first new sample, so nothing is counted twice.

use std::collections::HashMap;

use inferdb_storage::labels::is_valid_metric_name;

/// The series a metric family can have: the name itself (gauges, untyped), and those of
/// counters, histograms and summaries.
pub const FAMILY_SUFFIXES: [&str; 6] = ["", "_total", "_bucket", "_sum", "_count", "_created"];

/// vLLM's renames (old family, new family), from vLLM's deprecation notes: the KV-cache
/// gauge and the prefix-cache counters lost their `gpu_` prefix (0.9.2 → removed ≈0.12), and
/// the inter-token latency histogram was renamed in 0.11 (removed early 2026).
pub const VLLM_RENAMES: [(&str, &str); 4] = [
    ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"),
    ("vllm:gpu_prefix_cache_queries", "vllm:prefix_cache_queries"),
    ("vllm:gpu_prefix_cache_hits", "vllm:prefix_cache_hits"),
    (
        "vllm:time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds",
    ),
];

/// Why a rename cannot be added.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AliasError {
    /// A name is not a valid metric name.
    #[error("invalid metric name {0:?} in a metric alias")]
    InvalidName(String),
    /// Old and new are the same name.
    #[error("metric alias {0:?} maps a name to itself")]
    SelfAlias(String),
    /// An old name is already mapped to a different new name.
    #[error("metric alias: {old:?} is already mapped to {first:?}, cannot map it to {second:?}")]
    Conflict {
        /// The old name.
        old: String,
        /// Its existing new name.
        first: String,
        /// The refused new name.
        second: String,
    },
    /// A name would be both an old and a new name (chains are not followed).
    #[error("metric alias: {0:?} is both a renamed (old) name and a new name; write old -> final name for each old name")]
    Chain(String),
}

/// A catalogue of renames, old series name → new series name, looked up by the new name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricAliases {
    /// new series name → old series names (in the order added).
    by_new: HashMap<String, Vec<String>>,
    /// old series name → new series name.
    by_old: HashMap<String, String>,
}

impl MetricAliases {
    /// An empty catalogue (Prometheus' behaviour).
    pub fn new() -> Self {
        Self::default()
    }

    /// The built-in catalogue: [`VLLM_RENAMES`].
    pub fn builtin() -> Self {
        let mut a = Self::new();
        for (old, new) in VLLM_RENAMES {
            a.add_family(old, new).expect("built-in aliases are valid");
        }
        a
    }

    /// Adds the rename of a family: every series name in [`FAMILY_SUFFIXES`] of `old` maps to
    /// the same suffix of `new`. Adding a pair already there is a no-op.
    pub fn add_family(&mut self, old: &str, new: &str) -> Result<(), AliasError> {
        for n in [old, new] {
            if !is_valid_metric_name(n) {
                return Err(AliasError::InvalidName(n.to_string()));
            }
        }
        if old == new {
            return Err(AliasError::SelfAlias(old.to_string()));
        }
        // check every pair before adding any, so a refused family leaves the catalogue as it was
        for s in FAMILY_SUFFIXES {
            let (o, n) = (format!("{old}{s}"), format!("{new}{s}"));
            if let Some(first) = self.by_old.get(&o) {
                if *first != n {
                    return Err(AliasError::Conflict {
                        old: o,
                        first: first.clone(),
                        second: n,
                    });
                }
            }
            if self.by_new.contains_key(&o) {
                return Err(AliasError::Chain(o));
            }
            if self.by_old.contains_key(&n) {
                return Err(AliasError::Chain(n));
            }
        }
        for s in FAMILY_SUFFIXES {
            let (o, n) = (format!("{old}{s}"), format!("{new}{s}"));
            if self.by_old.insert(o.clone(), n.clone()).is_none() {
                self.by_new.entry(n).or_default().push(o);
            }
        }
        Ok(())
    }

    /// The old series names read along with a selector of `new`, empty when none.
    pub fn old_names(&self, new: &str) -> &[String] {
        self.by_new.get(new).map(|v| v.as_slice()).unwrap_or(&[])
    }

    /// The new name of an old series name, if it is one.
    pub fn new_name(&self, old: &str) -> Option<&str> {
        self.by_old.get(old).map(|s| s.as_str())
    }

    /// Whether the catalogue holds no rename.
    pub fn is_empty(&self) -> bool {
        self.by_old.is_empty()
    }

    /// Number of series-name pairs (families × suffixes).
    pub fn len(&self) -> usize {
        self.by_old.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_covers_every_series_of_a_family() {
        let a = MetricAliases::builtin();
        assert_eq!(
            a.old_names("vllm:kv_cache_usage_perc"),
            ["vllm:gpu_cache_usage_perc"]
        );
        assert_eq!(
            a.old_names("vllm:prefix_cache_hits_total"),
            ["vllm:gpu_prefix_cache_hits_total"]
        );
        assert_eq!(
            a.old_names("vllm:prefix_cache_queries_created"),
            ["vllm:gpu_prefix_cache_queries_created"]
        );
        for s in ["_bucket", "_sum", "_count", "_created"] {
            assert_eq!(
                a.old_names(&format!("vllm:inter_token_latency_seconds{s}")),
                [format!("vllm:time_per_output_token_seconds{s}")]
            );
        }
        assert!(a.old_names("vllm:gpu_cache_usage_perc").is_empty());
        assert_eq!(
            a.new_name("vllm:gpu_cache_usage_perc"),
            Some("vllm:kv_cache_usage_perc")
        );
        assert_eq!(a.len(), 4 * FAMILY_SUFFIXES.len());
    }

    #[test]
    fn refuses_bad_pairs_without_changing_the_catalogue() {
        let mut a = MetricAliases::builtin();
        let before = a.clone();
        assert_eq!(
            a.add_family("a b", "c"),
            Err(AliasError::InvalidName("a b".into()))
        );
        assert_eq!(
            a.add_family("x", "x"),
            Err(AliasError::SelfAlias("x".into()))
        );
        assert!(matches!(
            a.add_family("vllm:gpu_cache_usage_perc", "other"),
            Err(AliasError::Conflict { .. })
        ));
        assert!(matches!(
            a.add_family("vllm:kv_cache_usage_perc", "newest"),
            Err(AliasError::Chain(_))
        ));
        assert!(matches!(
            a.add_family("older", "vllm:gpu_cache_usage_perc"),
            Err(AliasError::Chain(_))
        ));
        assert_eq!(a, before);
        // the same pair again is fine; a second old name for one new name too
        a.add_family("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc")
            .unwrap();
        a.add_family("vllm:cache_usage", "vllm:kv_cache_usage_perc")
            .unwrap();
        assert_eq!(
            a.old_names("vllm:kv_cache_usage_perc"),
            ["vllm:gpu_cache_usage_perc", "vllm:cache_usage"]
        );
    }
}

#[cfg(test)]
mod engine_tests {
    use std::sync::Arc;

    use inferdb_storage::Labels;

    use super::MetricAliases;
    use crate::storage::MemStorage;
    use crate::{Engine, EngineOptions, Value};

    fn engine(aliases: bool) -> Engine {
        Engine::new(EngineOptions {
            metric_aliases: aliases.then(|| Arc::new(MetricAliases::builtin())),
            ..EngineOptions::default()
        })
    }

    fn vllm(name: &str, instance: &str) -> Labels {
        Labels::from_pairs([
            ("__name__", name),
            ("instance", instance),
            ("model_name", "m"),
        ])
    }

    fn scalar_of(v: &Value) -> Vec<(String, f64)> {
        match v {
            Value::Vector(v) => v.iter().map(|s| (s.metric.to_string(), s.f)).collect(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn new_name_reads_old_servers_and_new_wins_on_both() {
        let mut db = MemStorage::new();
        // old server: only the old name
        let old_a = vllm("vllm:gpu_cache_usage_perc", "a:8000");
        // new server: only the new name
        let new_b = vllm("vllm:kv_cache_usage_perc", "b:8000");
        // server in its deprecation window: both, the old one with a different value
        let both_old = vllm("vllm:gpu_cache_usage_perc", "c:8000");
        let both_new = vllm("vllm:kv_cache_usage_perc", "c:8000");
        for i in 0..10 {
            let t = i * 15_000 + 7;
            db.add(&old_a, t, 0.2);
            db.add(&new_b, t, 0.4);
            db.add(&both_old, t, 99.0);
            db.add(&both_new, t, 0.6);
        }
        let t = 140_000;
        let on = engine(true)
            .instant(&db, "avg(vllm:kv_cache_usage_perc)", t)
            .unwrap();
        let v = scalar_of(&on.value);
        assert_eq!(v.len(), 1);
        assert!((v[0].1 - 0.4).abs() < 1e-12, "{v:?}");
        assert_eq!(on.infos.len(), 1, "{:?}", on.infos);
        assert!(on.infos[0].contains("vllm:gpu_cache_usage_perc"));
        assert!(on.infos[0].starts_with("PromQL info: metric alias"));

        let off = engine(false)
            .instant(&db, "avg(vllm:kv_cache_usage_perc)", t)
            .unwrap();
        assert!((scalar_of(&off.value)[0].1 - 0.5).abs() < 1e-12);
        assert!(off.infos.is_empty());

        // the old name is answered as Prometheus does, aliases or not
        let old = engine(true)
            .instant(&db, "vllm:gpu_cache_usage_perc", t)
            .unwrap();
        let mut names = scalar_of(&old.value);
        names.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(names.len(), 2);
        assert!(names[0].0.starts_with("vllm:gpu_cache_usage_perc{"));
        assert!(old.infos.is_empty());
    }

    #[test]
    fn history_before_an_upgrade_joins_the_new_series() {
        // one server: old counter name until t=300s, then restarted with the new name
        let mut db = MemStorage::new();
        let old = vllm("vllm:gpu_prefix_cache_hits_total", "a:8000");
        let new = vllm("vllm:prefix_cache_hits_total", "a:8000");
        for i in 0..20 {
            db.add(&old, i * 15_000 + 3, (i * 100) as f64);
        }
        for i in 20..40 {
            db.add(&new, i * 15_000 + 3, ((i - 20) * 100) as f64);
            // deprecation window: old still exposed with the same value for a while
            if i < 30 {
                db.add(&old, i * 15_000 + 3, ((i - 20) * 100) as f64);
            }
        }
        let e = engine(true);
        let r = e
            .instant(&db, "increase(vllm:prefix_cache_hits_total[10m])", 590_000)
            .unwrap();
        let v = scalar_of(&r.value);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].0.starts_with("{instance=\"a:8000\""), "{v:?}");
        // 19 intervals of 100 before the reset, 19 after; window covers 0..590 s
        let plain = engine(false)
            .instant(&db, "increase(vllm:prefix_cache_hits_total[10m])", 590_000)
            .unwrap();
        let p = scalar_of(&plain.value)[0].1;
        assert!(v[0].1 > p * 1.5, "bridged {} vs new only {p}", v[0].1);
        // range query over the upgrade: one series, no gap at the switch
        let r = e
            .range(&db, "vllm:prefix_cache_hits_total", 60_000, 580_000, 20_000)
            .unwrap();
        match r.value {
            Value::Matrix(m) => {
                assert_eq!(m.len(), 1);
                assert_eq!(m[0].floats.len(), 27);
            }
            other => panic!("{other:?}"),
        }
    }
}
