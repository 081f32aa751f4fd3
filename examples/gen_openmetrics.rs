//! Writes an OpenMetrics file of simulated vLLM servers with timestamps, for the import and
//! export benchmarks (`benches/export.sh`, `benches/compare_import_size.sh`) and the
//! differential test of imported history against Prometheus (`tests/cli_import_differential.rs`,
//! which includes this file as a module and calls [`generate`]).
//!
//! `cargo run --release --example gen_openmetrics -- OUT [SERVERS=8] [HOURS=24] [STEP_S=15] [OFFSET_MS=0] [FAMILIES]`
//!
//! `FAMILIES`: a comma-separated list of the families to write (as in `# TYPE`, counters
//! without `_total`); every family when absent.
//!
//! Server `s` (`instance="vllm-<s>:8000"`, `job="vllm"`, as a scrape would label it, with an
//! `up` series) is a [`VllmModel`] seeded with `1000 + s` whose load
//! cycles every 30 minutes (the process restarts once a cycle, so counters reset), or follows a
//! scenario plan of [`GenOptions::scenarios`] (states with known ground truth). Scrapes
//! start at 2026-12-01T00:00:00Z plus `OFFSET_MS` and come every `STEP_S` seconds. Families
//! come one after the other, each series' samples in time order, as OpenMetrics requires;
//! counters are declared without their `_total` suffix.

use std::collections::HashMap;
use std::io::Write;

use inferdb::model::exposition::{self, Entry, Format, MetricType};
use inferdb::sim::model::keep_families;
use inferdb::sim::{ScenarioPlan, VllmModel};

/// 2026-12-01T00:00:00Z in Unix seconds.
pub const DEFAULT_START_S: i64 = 1_796_083_200;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// Simulated servers.
    pub servers: u64,
    /// Hours of history.
    pub hours: f64,
    /// Seconds between scrapes.
    pub step_s: f64,
    /// First scrape, Unix seconds.
    pub start_s: i64,
    /// Milliseconds added to every timestamp (the simulation itself runs on the plain grid).
    pub offset_ms: i64,
    /// Only these families (names as in `# TYPE`, counters without `_total`); all when `None`.
    /// `up` is always written.
    pub families: Option<Vec<String>>,
    /// Scenario plans by server (from the first scrape); servers without one (or `None`)
    /// follow the 30-minute demo cycle.
    pub scenarios: Vec<Option<ScenarioPlan>>,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            servers: 8,
            hours: 24.0,
            step_s: 15.0,
            start_s: DEFAULT_START_S,
            offset_ms: 0,
            families: None,
            scenarios: Vec::new(),
        }
    }
}

/// What was generated.
#[derive(Debug, Clone, Default)]
pub struct GenStats {
    /// Series written.
    pub series: usize,
    /// Sample lines written.
    pub samples: u64,
    /// Metric families, with their type (`counter`, `gauge`, `histogram`, ...) and the series
    /// texts (`name{labels}`) of each.
    pub families: Vec<(String, String, Vec<String>)>,
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Family {
    name: String,
    kind: MetricType,
    help: String,
    series: Vec<usize>,
}

/// Simulates the servers and writes the OpenMetrics text to `w`. The samples are held in
/// memory until written (16 bytes each), since OpenMetrics wants each family in one piece.
pub fn generate(w: &mut dyn Write, o: &GenOptions) -> std::io::Result<GenStats> {
    let start = o.start_s as f64;
    let n = (o.hours * 3600.0 / o.step_s) as usize;

    let mut families: Vec<Family> = Vec::new();
    let mut fam_index: HashMap<String, usize> = HashMap::new();
    let mut series_text: Vec<String> = Vec::new();
    let mut series_index: HashMap<String, usize> = HashMap::new();
    let mut samples: Vec<Vec<(i64, f64)>> = Vec::new();
    let wanted = |base: &str| {
        o.families
            .as_ref()
            .is_none_or(|f| f.iter().any(|x| x == base))
    };
    families.push(Family {
        name: "up".into(),
        kind: MetricType::Gauge,
        help: "Whether the scrape succeeded.".into(),
        series: Vec::new(),
    });

    for s in 0..o.servers {
        let inst = format!("vllm-{s}:8000");
        let mut m = VllmModel::new(1000 + s, start - 600.0, 1800.0);
        if let Some(Some(plan)) = o.scenarios.get(s as usize) {
            m.set_plan(plan.clone(), start);
        }
        for i in 0..n {
            let t = start + i as f64 * o.step_s;
            m.advance_to(t);
            let page = m.render();
            let tms = (t * 1000.0).round() as i64 + o.offset_ms;
            let up = format!("up{{instance=\"{inst}\",job=\"vllm\"}}");
            if i == 0 {
                series_text.push(up);
                samples.push(Vec::with_capacity(n));
                families[0].series.push(series_text.len() - 1);
            }
            let up_idx = families[0].series[s as usize];
            samples[up_idx].push((tms, 1.0));
            let page = match &o.families {
                Some(_) => keep_families(&page, &wanted),
                None => page,
            };
            let mut fam = usize::MAX;
            for e in exposition::parse(&page, Format::PromText) {
                match e {
                    Ok(Entry::Type { name, kind }) => {
                        let base = match kind {
                            MetricType::Counter => {
                                name.strip_suffix("_total").unwrap_or(&name).to_string()
                            }
                            _ => name.to_string(),
                        };
                        if !wanted(&base) {
                            fam = usize::MAX;
                            continue;
                        }
                        fam = *fam_index.entry(base.clone()).or_insert_with(|| {
                            families.push(Family {
                                name: base,
                                kind,
                                help: String::new(),
                                series: Vec::new(),
                            });
                            families.len() - 1
                        });
                    }
                    Ok(Entry::Help { name, help }) => {
                        let base = name.strip_suffix("_total").unwrap_or(&name);
                        if let Some(&f) = fam_index.get(base) {
                            families[f].help = help.to_string();
                        }
                    }
                    Ok(Entry::Sample(smp)) => {
                        if fam == usize::MAX {
                            continue;
                        }
                        let mut lt = String::new();
                        for (k, v) in smp.labels.iter() {
                            lt.push_str(&format!("{k}=\"{}\",", esc(&v)));
                        }
                        lt.push_str(&format!("instance=\"{inst}\",job=\"vllm\""));
                        let key = format!("{}{{{lt}}}", smp.name);
                        let idx = match series_index.get(&key) {
                            Some(&x) => x,
                            None => {
                                series_text.push(key.clone());
                                samples.push(Vec::with_capacity(n));
                                series_index.insert(key, series_text.len() - 1);
                                families[fam].series.push(series_text.len() - 1);
                                series_text.len() - 1
                            }
                        };
                        samples[idx].push((tms, smp.value));
                    }
                    _ => {}
                }
            }
        }
    }
    let mut st = GenStats {
        series: series_text.len(),
        ..Default::default()
    };
    let mut line = String::with_capacity(256);
    for fam in &families {
        writeln!(w, "# TYPE {} {}", fam.name, fam.kind.as_str())?;
        if !fam.help.is_empty() {
            writeln!(w, "# HELP {} {}", fam.name, esc(&fam.help))?;
        }
        for &i in &fam.series {
            for &(t, v) in &samples[i] {
                use std::fmt::Write as _;
                line.clear();
                let _ = writeln!(
                    line,
                    "{} {} {}.{:03}",
                    series_text[i],
                    exposition::format_openmetrics_float(v),
                    t.div_euclid(1000),
                    t.rem_euclid(1000)
                );
                w.write_all(line.as_bytes())?;
                st.samples += 1;
            }
        }
        st.families.push((
            fam.name.clone(),
            fam.kind.as_str().to_string(),
            fam.series.iter().map(|&i| series_text[i].clone()).collect(),
        ));
    }
    writeln!(w, "# EOF")?;
    w.flush()?;
    Ok(st)
}

#[allow(dead_code)]
fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let out = args.get(1).cloned().unwrap_or_else(|| "vllm-24h.om".into());
    let d = GenOptions::default();
    let o = GenOptions {
        servers: args
            .get(2)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d.servers),
        hours: args.get(3).and_then(|s| s.parse().ok()).unwrap_or(d.hours),
        step_s: args.get(4).and_then(|s| s.parse().ok()).unwrap_or(d.step_s),
        offset_ms: args.get(5).and_then(|s| s.parse().ok()).unwrap_or(0),
        families: args
            .get(6)
            .map(|s| s.split(',').map(str::to_string).collect()),
        ..d
    };
    let f = std::fs::File::create(&out)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    let st = generate(&mut w, &o)?;
    eprintln!(
        "{out}: {} series, {} samples, {} servers x {} h every {} s (+{} ms)",
        st.series, st.samples, o.servers, o.hours, o.step_s, o.offset_ms
    );
    Ok(())
}
