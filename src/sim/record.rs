//! The simulator sampled into a store at simulated time, as a scrape of each server every
//! `step` would store it (page parsed as vLLM's text format, `instance` and `job` added, an
//! `up` series), for tests and benchmarks that need hours of a scenario in seconds. With
//! [`Recording::gpu`] each server's host also gets a dcgm-exporter GPU utilisation series
//! (`DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname=HOST,instance="HOST:9400",job="dcgm"}`) following
//! its load.

use std::collections::HashMap;

use inferdb_storage::{Db, Labels};

use super::model::{ScenarioPlan, VllmModel};
use super::DEFAULT_MODEL;
use crate::model::exposition::{self, Entry, Format};

/// One simulated server.
#[derive(Debug, Clone)]
pub struct SimHost {
    /// Seed of its workload.
    pub seed: u64,
    /// Its `instance` label (`host:port`).
    pub instance: String,
    /// Its `model_name`.
    pub model: String,
    /// Its scenarios from the recording's start (the demo cycle when `None`).
    pub plan: Option<ScenarioPlan>,
}

impl SimHost {
    /// Server `vllm-<i>:8000` serving the default model with `plan`.
    pub fn new(i: usize, seed: u64, plan: Option<ScenarioPlan>) -> Self {
        SimHost {
            seed,
            instance: format!("vllm-{i}:8000"),
            model: DEFAULT_MODEL.to_string(),
            plan,
        }
    }
}

/// What to record.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The servers.
    pub hosts: Vec<SimHost>,
    /// First scrape, Unix seconds.
    pub start_s: f64,
    /// Seconds between scrapes.
    pub step_s: f64,
    /// Seconds recorded.
    pub seconds: f64,
    /// Only these families (names as in `# TYPE`); all when `None`.
    pub families: Option<Vec<String>>,
    /// Also a GPU utilisation series per host.
    pub gpu: bool,
}

/// Why recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The store refused a sample.
    #[error("storing simulated samples: {0}")]
    Store(#[from] inferdb_storage::Error),
}

/// Runs the servers in lock-step and appends every scrape to `db`; returns the samples stored.
pub fn record(db: &Db, r: &Recording) -> Result<u64, RecordError> {
    let mut models: Vec<VllmModel> = r
        .hosts
        .iter()
        .map(|h| {
            let mut m = VllmModel::new(h.seed, r.start_s - 600.0, 1800.0);
            if let Some(p) = &h.plan {
                m.set_plan(p.clone(), r.start_s);
            }
            m
        })
        .collect();
    let wanted = |name: &str| {
        r.families
            .as_ref()
            .is_none_or(|f| f.iter().any(|x| x == name))
    };
    let mut refs: HashMap<(usize, String), inferdb_storage::db::SeriesRef> = HashMap::new();
    let mut stored = 0u64;
    let steps = (r.seconds / r.step_s).floor() as usize + 1;
    for k in 0..steps {
        let t = r.start_s + k as f64 * r.step_s;
        let tms = (t * 1000.0).round() as i64;
        let mut app = db.appender();
        for (i, (h, m)) in r.hosts.iter().zip(&mut models).enumerate() {
            m.advance_to(t);
            let page = m.render_families(&wanted);
            let host = crate::insight::host_of(&h.instance).to_string();
            let mut extra = vec![(
                "up".to_string(),
                Labels::from_pairs([
                    ("__name__", "up"),
                    ("instance", h.instance.as_str()),
                    ("job", "vllm"),
                ]),
                1.0,
            )];
            if r.gpu {
                extra.push((
                    "gpu".to_string(),
                    Labels::from_pairs([
                        ("__name__", "DCGM_FI_DEV_GPU_UTIL"),
                        ("gpu", "0"),
                        ("Hostname", host.as_str()),
                        ("instance", &format!("{host}:9400")),
                        ("job", "dcgm"),
                    ]),
                    m.gpu_utilization(),
                ));
            }
            for (key, l, v) in extra {
                let sref = match refs.get(&(i, key.clone())) {
                    Some(x) => *x,
                    None => {
                        let x = app.get_ref(&l)?;
                        refs.insert((i, key), x);
                        x
                    }
                };
                app.append_ref(sref, tms, v)?;
                stored += 1;
            }
            for e in exposition::parse(&page, Format::PromText) {
                let Ok(Entry::Sample(s)) = e else { continue };
                let key = (i, s.series_text.to_string());
                let sref = match refs.get(&key) {
                    Some(x) => *x,
                    None => {
                        let mut pairs: Vec<(String, String)> = vec![
                            ("__name__".into(), s.name.to_string()),
                            ("instance".into(), h.instance.clone()),
                            ("job".into(), "vllm".into()),
                        ];
                        for (n, v) in s.labels.iter() {
                            let v = if n == "model_name" {
                                h.model.clone()
                            } else {
                                v.to_string()
                            };
                            pairs.push((n.to_string(), v));
                        }
                        let x = app.get_ref(&Labels::from_pairs(pairs))?;
                        refs.insert(key, x);
                        x
                    }
                };
                app.append_ref(sref, tms, s.value)?;
                stored += 1;
            }
        }
        app.commit()?;
    }
    Ok(stored)
}
