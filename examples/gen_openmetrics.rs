//! Writes an OpenMetrics file of simulated vLLM servers with timestamps, for the import and
//! export benchmarks (`benches/export.sh`) and for comparing with promtool.
//!
//! `cargo run --release --example gen_openmetrics -- OUT [SERVERS=8] [HOURS=24] [STEP_S=15]`
//!
//! Families come one after the other, each series' samples in time order, as OpenMetrics
//! requires; counters are declared without their `_total` suffix.

use std::collections::HashMap;
use std::io::Write;

use inferdb::scrape::exposition::{self, Entry, Format, MetricType};
use inferdb::sim::VllmModel;

fn val(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v:?}")
    }
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

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let out = args.get(1).cloned().unwrap_or_else(|| "vllm-24h.om".into());
    let servers: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let hours: f64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(24.0);
    let step: f64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(15.0);
    let start = 1_796_083_200.0; // 2026-12-01T00:00:00Z
    let n = (hours * 3600.0 / step) as usize;

    let mut families: Vec<Family> = Vec::new();
    let mut fam_index: HashMap<String, usize> = HashMap::new();
    let mut series_text: Vec<String> = Vec::new();
    let mut series_index: HashMap<String, usize> = HashMap::new();
    let mut samples: Vec<Vec<(i64, f64)>> = Vec::new();

    for s in 0..servers {
        let inst = format!("vllm-{s}:8000");
        let mut m = VllmModel::new(1000 + s, start - 600.0, 1800.0);
        for i in 0..n {
            let t = start + i as f64 * step;
            m.advance_to(t);
            let page = m.render();
            let tms = (t * 1000.0).round() as i64;
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
                        lt.push_str(&format!("instance=\"{inst}\""));
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
    let f = std::fs::File::create(&out)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    let mut total = 0u64;
    for fam in &families {
        writeln!(w, "# TYPE {} {}", fam.name, fam.kind.as_str())?;
        if !fam.help.is_empty() {
            writeln!(w, "# HELP {} {}", fam.name, esc(&fam.help))?;
        }
        for &i in &fam.series {
            for &(t, v) in &samples[i] {
                writeln!(
                    w,
                    "{} {} {}.{:03}",
                    series_text[i],
                    val(v),
                    t / 1000,
                    t % 1000
                )?;
                total += 1;
            }
        }
    }
    writeln!(w, "# EOF")?;
    w.flush()?;
    eprintln!(
        "{out}: {} series, {total} samples, {servers} servers x {hours} h every {step} s",
        series_text.len()
    );
    Ok(())
}
