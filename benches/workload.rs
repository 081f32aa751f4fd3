//! A deterministic, realistic LLM-inference monitoring workload built from `tests/fixtures`.
//!
//! Two scrape targets of one host (`gpu-node-07`), with the series of the fixture pages:
//! - `job="vllm"`: the vLLM server page (`vllm/metrics-load.txt`, ~450 series), every 15 s by
//!   default. Requests arrive at a rate following a day curve (trough 03:00, peak 15:00 UTC)
//!   times slow random swings; each scrape interval finishes a Poisson number of requests.
//!   Counters grow by noisy, uneven whole-number steps in proportion to that number (token
//!   counters by tokens, with the fixture's per-request ratios); histogram buckets get
//!   Poisson-like increments in the fixture's bucket proportions, `_sum`s grow by
//!   full-precision floats (integers for token histograms); gauges follow the load
//!   (`num_requests_running`, `kv_cache_usage_perc` = used blocks / 6904, full precision,
//!   process memory, fds), the rest stay constant. The server restarts once (at 13.4 h by
//!   default): the target is down for 100 s (Prometheus writes staleness markers at the first
//!   failed scrape), then every counter starts again from 0 and `_created` gauges change.
//! - `job="dcgm"`: the dcgm-exporter page for 8 H100s (`dcgm/metrics-8gpu.txt`, 200 series),
//!   every 1 s by default (exporter `--collect-interval 1000`). GPU 0 follows the vLLM load,
//!   GPUs 1-4 a saturated 70B server, GPU 5 a small process, GPUs 6-7 idle. Power in W with 3
//!   decimals, temperatures/clocks/utilisation as integers, `PROF_*` ratios with 6 decimals,
//!   energy counters in mJ, PCIe byte rates, NVLink bandwidth; GPU 0's frame buffer empties
//!   during the vLLM restart.
//!
//! Scrape timestamps are aligned to the interval (as Prometheus' timestamp tolerance does) with
//! occasional jitter of a few to a few hundred ms and rare missed scrapes.
//!
//! Use from a bench with `#[path = "workload.rs"] mod workload;`. [`generate`] materializes
//! every series (about 20 M samples, 330 MB, for the default 24 h); [`Workload::scrapes`] replays
//! it in time order, [`Workload::write_openmetrics`] writes it for
//! `promtool tsdb create-blocks-from openmetrics`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The bit pattern of Prometheus' staleness marker.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Workload parameters.
#[derive(Debug, Clone)]
pub struct Config {
    /// First scrape time (ms since the epoch).
    pub start_ms: i64,
    /// Length of the workload in ms.
    pub duration_ms: i64,
    /// Scrape interval of the vLLM target.
    pub vllm_interval_ms: i64,
    /// Scrape interval of the dcgm-exporter target.
    pub dcgm_interval_ms: i64,
    /// When the vLLM server restarts (ms after `start_ms`); `None` for no restart.
    pub restart_after_ms: Option<i64>,
    /// Seed of the pseudo-random generator.
    pub seed: u64,
    /// The fixtures folder (`tests/fixtures` of the repository by default, or
    /// `$INFERDB_FIXTURES`).
    pub fixtures: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            // 2026-12-02T09:00:00Z, an hour after the fixture's vLLM process started
            start_ms: 1_796_202_000_000,
            duration_ms: 24 * 3_600_000,
            vllm_interval_ms: 15_000,
            dcgm_interval_ms: 1_000,
            restart_after_ms: Some(13 * 3_600_000 + 24 * 60_000),
            seed: 0x1f2e_3d4c_5b6a_7988,
            fixtures: default_fixtures(),
        }
    }
}

impl Config {
    /// The default workload shortened to `hours` (restart in the middle).
    pub fn hours(hours: f64) -> Self {
        let duration_ms = (hours * 3_600_000.0) as i64;
        Config {
            duration_ms,
            restart_after_ms: Some(duration_ms * 5 / 9),
            ..Config::default()
        }
    }
}

/// The fixtures folder: `$INFERDB_FIXTURES`, else `tests/fixtures` next to the repository.
pub fn default_fixtures() -> PathBuf {
    if let Ok(p) = std::env::var("INFERDB_FIXTURES") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// What a series is (from the fixture's `# TYPE` lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A counter (or a histogram/summary `_count`, `_sum`, `_bucket`).
    Counter,
    /// A gauge (including `_created` families and info metrics).
    Gauge,
}

/// One series of the workload.
#[derive(Debug, Clone)]
pub struct Series {
    /// Labels including `__name__`, `job` and `instance`, sorted by name.
    pub labels: Vec<(String, String)>,
    /// Counter or gauge.
    pub kind: Kind,
    /// Index of the target (0 = vLLM, 1 = dcgm).
    pub target: usize,
    /// Samples in time order (may contain the staleness marker).
    pub samples: Vec<(i64, f64)>,
}

impl Series {
    /// The metric name.
    pub fn name(&self) -> &str {
        self.labels
            .iter()
            .find(|(n, _)| n == "__name__")
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }
}

/// A scrape target.
#[derive(Debug, Clone)]
pub struct Target {
    /// `job` label.
    pub job: String,
    /// `instance` label.
    pub instance: String,
    /// Scrape interval.
    pub interval_ms: i64,
    /// Times of the scrapes that produced samples (or staleness markers).
    pub scrape_times: Vec<i64>,
    /// Indexes into [`Workload::series`] of this target's series.
    pub series: Vec<usize>,
}

/// The generated workload.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The parameters.
    pub config: Config,
    /// The targets.
    pub targets: Vec<Target>,
    /// Every series with its samples.
    pub series: Vec<Series>,
}

/// One scrape: the samples appended at one time for one target.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// Scrape timestamp.
    pub t: i64,
    /// Target index.
    pub target: usize,
    /// `(series index, value)` of every series present in this scrape.
    pub samples: Vec<(usize, f64)>,
}

impl Workload {
    /// Total number of samples.
    pub fn num_samples(&self) -> usize {
        self.series.iter().map(|s| s.samples.len()).sum()
    }

    /// The scrapes of all targets in time order.
    pub fn scrapes(&self) -> impl Iterator<Item = Scrape> + '_ {
        let mut cursors: Vec<usize> = vec![0; self.series.len()];
        let mut next_scrape: Vec<usize> = vec![0; self.targets.len()];
        std::iter::from_fn(move || {
            // the target whose next scrape is earliest
            let (ti, t) = self
                .targets
                .iter()
                .enumerate()
                .filter_map(|(i, tg)| tg.scrape_times.get(next_scrape[i]).map(|&t| (i, t)))
                .min_by_key(|&(i, t)| (t, i))?;
            next_scrape[ti] += 1;
            let mut samples = Vec::with_capacity(self.targets[ti].series.len());
            for &si in &self.targets[ti].series {
                let c = &mut cursors[si];
                if let Some(&(st, v)) = self.series[si].samples.get(*c) {
                    if st == t {
                        samples.push((si, v));
                        *c += 1;
                    }
                }
            }
            Some(Scrape {
                t,
                target: ti,
                samples,
            })
        })
    }

    /// Writes the workload as OpenMetrics text (families grouped, one `unknown` family per
    /// metric name, timestamps in seconds, `# EOF`). Staleness markers are left out: the
    /// format cannot carry them.
    pub fn write_openmetrics(&self, out: &mut impl Write) -> io::Result<()> {
        let mut by_name: Vec<(&str, Vec<usize>)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, s) in self.series.iter().enumerate() {
            let n = s.name();
            let slot = *index.entry(n).or_insert_with(|| {
                by_name.push((n, Vec::new()));
                by_name.len() - 1
            });
            by_name[slot].1.push(i);
        }
        let mut line = String::new();
        for (name, idxs) in by_name {
            writeln!(out, "# TYPE {name} unknown")?;
            for i in idxs {
                let s = &self.series[i];
                let mut prefix = String::from(name);
                prefix.push('{');
                let mut first = true;
                for (n, v) in &s.labels {
                    if n == "__name__" {
                        continue;
                    }
                    if !first {
                        prefix.push(',');
                    }
                    first = false;
                    prefix.push_str(n);
                    prefix.push_str("=\"");
                    for c in v.chars() {
                        match c {
                            '\\' => prefix.push_str("\\\\"),
                            '"' => prefix.push_str("\\\""),
                            '\n' => prefix.push_str("\\n"),
                            c => prefix.push(c),
                        }
                    }
                    prefix.push('"');
                }
                prefix.push('}');
                for &(t, v) in &s.samples {
                    if v.to_bits() == STALE_NAN_BITS {
                        continue;
                    }
                    line.clear();
                    line.push_str(&prefix);
                    line.push(' ');
                    line.push_str(&format_value(v));
                    line.push(' ');
                    line.push_str(&format!("{}.{:03}", t.div_euclid(1000), t.rem_euclid(1000)));
                    line.push('\n');
                    out.write_all(line.as_bytes())?;
                }
            }
        }
        out.write_all(b"# EOF\n")
    }

    /// Writes the OpenMetrics text to a file.
    pub fn write_openmetrics_file(&self, path: &Path) -> io::Result<()> {
        let f = std::fs::File::create(path)?;
        let mut w = io::BufWriter::with_capacity(1 << 20, f);
        self.write_openmetrics(&mut w)?;
        w.flush()
    }
}

/// Formats a value so that parsing it gives the same `f64` (shortest round-trip digits).
pub fn format_value(v: f64) -> String {
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

// ---------------------------------------------------------------------------------------------
// pseudo-random numbers

/// splitmix64-seeded xorshift64* generator; deterministic across platforms.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.f64().max(1e-300);
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Poisson-distributed count with mean `mean` (normal approximation above 30).
    pub fn poisson(&mut self, mean: f64) -> f64 {
        if mean <= 0.0 {
            return 0.0;
        }
        if mean > 30.0 {
            return (mean + mean.sqrt() * self.normal()).round().max(0.0);
        }
        let l = (-mean).exp();
        let mut k = 0.0;
        let mut p = 1.0;
        loop {
            p *= self.f64();
            if p <= l {
                return k;
            }
            k += 1.0;
        }
    }

    /// Rounds `x >= 0` up or down at random, keeping the expectation.
    pub fn round_stochastic(&mut self, x: f64) -> f64 {
        let f = x.floor();
        if self.f64() < x - f {
            f + 1.0
        } else {
            f
        }
    }
}

// ---------------------------------------------------------------------------------------------
// fixture pages

#[derive(Debug, Clone)]
struct PageSample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
    family_type: String,
}

fn parse_page(path: &Path) -> Vec<PageSample> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (set INFERDB_FIXTURES)", path.display()));
    let mut types: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            if let (Some(n), Some(t)) = (it.next(), it.next()) {
                types.insert(n.to_string(), t.to_string());
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, labels, rest) = match line.find('{') {
            Some(b) => {
                let (labels, end) = parse_labels(&line[b + 1..]);
                (&line[..b], labels, &line[b + 1 + end..])
            }
            None => {
                let sp = line.find(' ').unwrap_or(line.len());
                (&line[..sp], Vec::new(), &line[sp..])
            }
        };
        let Some(vs) = rest.split_whitespace().next() else {
            continue;
        };
        let value = match vs {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => match v.parse::<f64>() {
                Ok(v) => v,
                Err(_) => continue, // e.g. "ERROR - FAILED TO CONVERT TO STRING"
            },
        };
        let family_type = family_type(&types, name);
        out.push(PageSample {
            name: name.to_string(),
            labels,
            value,
            family_type,
        });
    }
    out
}

/// Parses `a="x",b="y"}` and returns the labels and the index just past `}`.
fn parse_labels(s: &str) -> (Vec<(String, String)>, usize) {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        if b[i] == b'}' {
            return (out, i + 1);
        }
        if b[i] == b',' || b[i] == b' ' {
            i += 1;
            continue;
        }
        let eq = match s[i..].find('=') {
            Some(e) => i + e,
            None => break,
        };
        let name = s[i..eq].to_string();
        i = eq + 2; // skip ="
        let mut val = String::new();
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' && i + 1 < b.len() {
                match b[i + 1] {
                    b'n' => val.push('\n'),
                    c => val.push(c as char),
                }
                i += 2;
            } else {
                let c = s[i..].chars().next().unwrap_or(' ');
                val.push(c);
                i += c.len_utf8();
            }
        }
        i += 1; // closing quote
        out.push((name, val));
    }
    (out, b.len())
}

fn family_type(types: &HashMap<String, String>, name: &str) -> String {
    if let Some(t) = types.get(name) {
        return t.clone();
    }
    for suf in ["_bucket", "_count", "_sum", "_total", "_created"] {
        if let Some(base) = name.strip_suffix(suf) {
            if let Some(t) = types.get(base) {
                return t.clone();
            }
        }
    }
    "untyped".into()
}

// ---------------------------------------------------------------------------------------------
// load model

/// Request rate multiplier (0..~1.3) at `t`, shared by all targets: a day curve with its trough
/// at 03:00 and peak at 15:00 UTC, times slow random swings and short bursts.
struct Load {
    start_ms: i64,
    per_second: Vec<f64>,
}

impl Load {
    fn new(cfg: &Config) -> Self {
        let secs = (cfg.duration_ms / 1000 + 2) as usize;
        let mut rng = Rng::new(cfg.seed ^ 0x10ad);
        let mut slow = 0.0f64; // AR(1) with ~30 min memory
        let mut burst = 0.0f64; // AR(1) with ~1 min memory
        let mut per_second = Vec::with_capacity(secs);
        for s in 0..secs {
            let t = cfg.start_ms + s as i64 * 1000;
            let hour = (t.rem_euclid(86_400_000)) as f64 / 3_600_000.0;
            let day = 0.5 - 0.5 * ((hour - 3.0) / 24.0 * std::f64::consts::TAU).cos();
            slow = slow * (1.0 - 1.0 / 1800.0) + rng.normal() * 0.006;
            burst = burst * (1.0 - 1.0 / 60.0) + rng.normal() * 0.02;
            let l = (0.08 + 0.9 * day) * (1.0 + slow).max(0.3) + burst.max(0.0);
            per_second.push(l.clamp(0.02, 1.4));
        }
        Load {
            start_ms: cfg.start_ms,
            per_second,
        }
    }

    fn at(&self, t: i64) -> f64 {
        let i = ((t - self.start_ms).max(0) / 1000) as usize;
        self.per_second[i.min(self.per_second.len() - 1)]
    }

    /// Mean load over `[t0, t1)`.
    fn mean(&self, t0: i64, t1: i64) -> f64 {
        let a = ((t0 - self.start_ms).max(0) / 1000) as usize;
        let b = (((t1 - self.start_ms).max(0) / 1000) as usize).max(a + 1);
        let b = b.min(self.per_second.len());
        let a = a.min(b.saturating_sub(1));
        self.per_second[a..b].iter().sum::<f64>() / (b - a) as f64
    }
}

/// Scrape times of a target: aligned to the interval with an offset, occasional jitter, rare
/// misses; `down` is a time range where the target does not answer.
fn scrape_times(
    cfg: &Config,
    interval: i64,
    offset: i64,
    rng: &mut Rng,
    down: Option<(i64, i64)>,
) -> Vec<(i64, bool)> {
    let mut out = Vec::new();
    let mut k = 0i64;
    loop {
        let nominal = cfg.start_ms + offset + k * interval;
        k += 1;
        if nominal >= cfg.start_ms + cfg.duration_ms {
            break;
        }
        let r = rng.f64();
        let jitter = if r < 0.97 {
            0
        } else if r < 0.995 {
            let j = 3 + (rng.f64() * 22.0) as i64;
            if rng.f64() < 0.5 {
                -j
            } else {
                j
            }
        } else {
            50 + (rng.f64() * 350.0) as i64
        };
        let t = nominal + jitter.min(interval / 3);
        let failed = rng.f64() < 0.0005 || down.is_some_and(|(a, b)| nominal >= a && nominal < b);
        out.push((t, failed));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// generation

/// How one vLLM series evolves.
#[derive(Debug, Clone)]
enum Model {
    /// Constant value (info metrics, config, unused counters).
    Const,
    /// `_created`-like constant that moves with the process start on restart.
    Created,
    /// Counter growing by `per_request` per finished request (with noise); integral or not.
    Counter {
        per_request: f64,
        integral: bool,
    },
    /// CPU seconds: 2 decimals.
    CpuSeconds,
    /// One histogram bucket (non-cumulative fraction `p` of observations).
    Bucket {
        hist: usize,
        idx: usize,
    },
    /// Histogram `_count`.
    HistCount {
        hist: usize,
    },
    /// Histogram `_sum` with the mean observed value.
    HistSum {
        hist: usize,
        mean: f64,
        integral: bool,
    },
    Running,
    Waiting,
    KvUsage,
    Rss,
    Vms,
    OpenFds,
    StartTime,
}

struct Hist {
    /// Observations per finished request.
    per_request: f64,
    /// Non-cumulative bucket fractions.
    p: Vec<f64>,
    /// This interval's non-cumulative bucket increments.
    inc: Vec<f64>,
}

const NUM_GPU_BLOCKS: f64 = 6904.0;

/// Generates the workload.
pub fn generate(cfg: &Config) -> Workload {
    let load = Load::new(cfg);
    let mut series = Vec::new();
    let mut targets = Vec::new();
    gen_vllm(cfg, &load, &mut series, &mut targets);
    gen_dcgm(cfg, &load, &mut series, &mut targets);
    Workload {
        config: cfg.clone(),
        targets,
        series,
    }
}

fn with_target(
    mut labels: Vec<(String, String)>,
    name: &str,
    job: &str,
    instance: &str,
) -> Vec<(String, String)> {
    labels.push(("__name__".into(), name.into()));
    labels.push(("job".into(), job.into()));
    labels.push(("instance".into(), instance.into()));
    labels.sort();
    labels
}

fn gen_vllm(cfg: &Config, load: &Load, series: &mut Vec<Series>, targets: &mut Vec<Target>) {
    let page = parse_page(&cfg.fixtures.join("vllm/metrics-load.txt"));
    let (job, instance) = ("vllm", "gpu-node-07:8000");
    let page_requests: f64 = page
        .iter()
        .filter(|s| s.name == "vllm:request_success_total")
        .map(|s| s.value)
        .sum::<f64>()
        .max(1.0);
    let page_start = page
        .iter()
        .find(|s| s.name == "process_start_time_seconds")
        .map(|s| s.value)
        .unwrap_or(1.79619840037e9);

    // histograms: group buckets by (name without _bucket, labels without le)
    let mut hists: Vec<Hist> = Vec::new();
    let mut hist_index: HashMap<String, usize> = HashMap::new();
    let hist_key = |base: &str, labels: &[(String, String)]| {
        let mut k = String::from(base);
        for (n, v) in labels {
            if n != "le" {
                k.push_str(&format!("|{n}={v}"));
            }
        }
        k
    };
    // cumulative bucket values per histogram
    let mut cum: HashMap<usize, Vec<(f64, f64)>> = HashMap::new();
    for s in &page {
        if let Some(base) = s.name.strip_suffix("_bucket") {
            let key = hist_key(base, &s.labels);
            let id = *hist_index.entry(key).or_insert_with(|| {
                hists.push(Hist {
                    per_request: 0.0,
                    p: Vec::new(),
                    inc: Vec::new(),
                });
                hists.len() - 1
            });
            let le = s
                .labels
                .iter()
                .find(|(n, _)| n == "le")
                .map(|(_, v)| {
                    if v == "+Inf" {
                        f64::INFINITY
                    } else {
                        v.parse().unwrap_or(0.0)
                    }
                })
                .unwrap_or(0.0);
            cum.entry(id).or_default().push((le, s.value));
        }
    }
    for (id, mut b) in cum {
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        let total = b.last().map(|x| x.1).unwrap_or(0.0);
        let mut prev = 0.0;
        let mut p = Vec::with_capacity(b.len());
        for &(_, c) in &b {
            p.push(if total > 0.0 { (c - prev) / total } else { 0.0 });
            prev = c;
        }
        // a histogram never observed yet still gets a few observations in its middle buckets
        if total == 0.0 {
            let m = p.len() / 2;
            p[m] = 1.0;
        }
        hists[id].per_request = (total / page_requests).max(0.01);
        hists[id].inc = vec![0.0; p.len()];
        hists[id].p = p;
    }

    // series and models
    struct V {
        model: Model,
        value: f64,
        page_value: f64,
        samples: Vec<(i64, f64)>,
    }
    let mut vs: Vec<V> = Vec::new();
    let mut bucket_pos: HashMap<usize, usize> = HashMap::new();
    for s in &page {
        let n = s.name.as_str();
        let integral = s.value.fract() == 0.0;
        let model = if n.ends_with("_created") {
            Model::Created
        } else if let Some(base) = n.strip_suffix("_bucket") {
            let id = hist_index[&hist_key(base, &s.labels)];
            let idx = bucket_pos.entry(id).or_insert(0);
            let m = Model::Bucket {
                hist: id,
                idx: *idx,
            };
            *idx += 1;
            m
        } else if let Some(id) = n
            .strip_suffix("_count")
            .and_then(|b| hist_index.get(&hist_key(b, &s.labels)))
        {
            Model::HistCount { hist: *id }
        } else if let Some(id) = n
            .strip_suffix("_sum")
            .and_then(|b| hist_index.get(&hist_key(b, &s.labels)))
        {
            let count = page
                .iter()
                .find(|c| c.name == format!("{}_count", &n[..n.len() - 4]) && c.labels == s.labels)
                .map(|c| c.value)
                .unwrap_or(0.0);
            let mean = if count > 0.0 { s.value / count } else { 0.01 };
            Model::HistSum {
                hist: *id,
                mean,
                integral,
            }
        } else {
            match n {
                "vllm:num_requests_running" => Model::Running,
                "vllm:num_requests_waiting" => Model::Waiting,
                "vllm:num_requests_waiting_by_reason"
                    if s.labels
                        .iter()
                        .any(|(k, v)| k == "reason" && v == "capacity") =>
                {
                    Model::Waiting
                }
                "vllm:kv_cache_usage_perc" => Model::KvUsage,
                "process_resident_memory_bytes" => Model::Rss,
                "process_virtual_memory_bytes" => Model::Vms,
                "process_open_fds" => Model::OpenFds,
                "process_start_time_seconds" => Model::StartTime,
                "process_cpu_seconds_total" => Model::CpuSeconds,
                _ if (s.family_type == "counter" || s.family_type == "summary")
                    && s.value > 0.0 =>
                {
                    Model::Counter {
                        per_request: s.value / page_requests,
                        integral,
                    }
                }
                _ => Model::Const,
            }
        };
        vs.push(V {
            model,
            value: s.value,
            page_value: s.value,
            samples: Vec::new(),
        });
    }

    let mut rng = Rng::new(cfg.seed ^ 0x7711);
    let restart_at = cfg.restart_after_ms.map(|r| cfg.start_ms + r);
    let down = restart_at.map(|r| (r, r + 100_000));
    let times = scrape_times(
        cfg,
        cfg.vllm_interval_ms,
        3_217 % cfg.vllm_interval_ms,
        &mut rng,
        down,
    );
    let mut scrape_list = Vec::new();
    let mut prev_t = cfg.start_ms - cfg.vllm_interval_ms;
    let mut was_up = true;
    let mut restarted = false;
    let mut created_shift = 0.0f64;
    let mut rss = page
        .iter()
        .find(|s| s.name == "process_resident_memory_bytes")
        .map(|s| s.value)
        .unwrap_or(2.4e9);
    let mut first = true;
    for (t, failed) in times {
        let up = !failed;
        if !up {
            if was_up {
                // Prometheus marks every series stale at the first failed scrape
                for v in vs.iter_mut() {
                    v.samples.push((t, f64::from_bits(STALE_NAN_BITS)));
                }
                scrape_list.push(t);
            }
            was_up = false;
            if down.is_some_and(|(a, b)| t >= a && t < b + 1000) && !restarted {
                restarted = true;
            }
            continue;
        }
        let just_restarted =
            restarted && restart_at.is_some_and(|r| t >= r) && created_shift == 0.0;
        if just_restarted {
            let new_start_s = ((t - 60_000) as f64 / 10.0).round() / 100.0;
            created_shift = new_start_s - page_start;
            for v in vs.iter_mut() {
                match v.model {
                    Model::Counter { .. }
                    | Model::Bucket { .. }
                    | Model::HistCount { .. }
                    | Model::HistSum { .. }
                    | Model::CpuSeconds => v.value = 0.0,
                    Model::Created => v.value = v.page_value + created_shift + 97.0,
                    Model::StartTime => v.value = new_start_s,
                    _ => {}
                }
            }
            rss *= 0.8;
        }
        was_up = true;
        // the interval since the last scrape
        let dt_ms = if first {
            cfg.vllm_interval_ms
        } else {
            (t - prev_t).max(1)
        };
        let l = load.mean(t - dt_ms, t);
        let l_now = load.at(t);
        // ~8 requests/s at full load for an 8B model on one H100
        let requests = if first {
            0.0
        } else {
            rng.poisson(8.0 * l * dt_ms as f64 / 1000.0)
        };
        for h in hists.iter_mut() {
            let n = requests * h.per_request;
            for (i, p) in h.p.iter().enumerate() {
                let mean = n * p;
                h.inc[i] = if mean <= 0.0 { 0.0 } else { rng.poisson(mean) };
            }
        }
        let running = (l_now * 62.0 + rng.normal() * 3.0)
            .round()
            .clamp(0.0, 256.0);
        let waiting = if l_now > 1.0 {
            ((l_now - 1.0) * 120.0 + rng.normal() * 4.0)
                .round()
                .max(0.0)
        } else {
            0.0
        };
        rss = (rss + rng.normal() * 2.0e6).clamp(1.8e9, 3.2e9);
        for v in vs.iter_mut() {
            if !first {
                match v.model {
                    Model::Const | Model::Created | Model::StartTime => {}
                    Model::Counter {
                        per_request,
                        integral,
                    } => {
                        let mean = requests * per_request;
                        // each request contributes ~per_request with CV ~1
                        let sd = (mean * per_request.max(1.0)).sqrt();
                        let inc = (mean + sd * rng.normal()).max(0.0);
                        v.value += if integral { inc.round() } else { inc };
                    }
                    Model::CpuSeconds => {
                        let inc =
                            dt_ms as f64 / 1000.0 * (0.04 + 0.35 * l) * (1.0 + 0.2 * rng.normal());
                        v.value = ((v.value + inc.max(0.0)) * 100.0).round() / 100.0;
                    }
                    Model::Bucket { hist, idx } => {
                        // cumulative: sum of increments of buckets up to idx
                        v.value += hists[hist].inc[..=idx].iter().sum::<f64>();
                    }
                    Model::HistCount { hist } => v.value += hists[hist].inc.iter().sum::<f64>(),
                    Model::HistSum {
                        hist,
                        mean,
                        integral,
                    } => {
                        let n: f64 = hists[hist].inc.iter().sum();
                        if n > 0.0 {
                            let x = n * mean * (1.0 + 0.5 * rng.normal() / n.sqrt()).max(0.05);
                            v.value += if integral { x.round() } else { x };
                        }
                    }
                    Model::Running => v.value = running,
                    Model::Waiting => v.value = waiting,
                    Model::KvUsage => {
                        let blocks = (running * 9.5 + rng.normal() * 20.0)
                            .round()
                            .clamp(0.0, NUM_GPU_BLOCKS);
                        v.value = blocks / NUM_GPU_BLOCKS;
                    }
                    Model::Rss => v.value = (rss / 4096.0).round() * 4096.0,
                    Model::Vms => {
                        if rng.f64() < 0.01 {
                            v.value += ((rng.normal() * 2e7) / 4096.0).round() * 4096.0;
                        }
                    }
                    Model::OpenFds => {
                        v.value = (40.0 + running * 1.2 + rng.normal()).round().max(20.0)
                    }
                }
            }
            v.samples.push((t, v.value));
        }
        scrape_list.push(t);
        prev_t = t;
        first = false;
    }
    let base = series.len();
    let mut idxs = Vec::new();
    for (s, v) in page.iter().zip(vs) {
        idxs.push(series.len());
        series.push(Series {
            labels: with_target(s.labels.clone(), &s.name, job, instance),
            kind: if matches!(
                v.model,
                Model::Counter { .. }
                    | Model::CpuSeconds
                    | Model::Bucket { .. }
                    | Model::HistCount { .. }
                    | Model::HistSum { .. }
            ) {
                Kind::Counter
            } else {
                Kind::Gauge
            },
            target: targets.len(),
            samples: v.samples,
        });
    }
    debug_assert_eq!(idxs.first().copied().unwrap_or(base), base);
    targets.push(Target {
        job: job.into(),
        instance: instance.into(),
        interval_ms: cfg.vllm_interval_ms,
        scrape_times: scrape_list,
        series: idxs,
    });
}

fn gen_dcgm(cfg: &Config, load: &Load, series: &mut Vec<Series>, targets: &mut Vec<Target>) {
    let page = parse_page(&cfg.fixtures.join("dcgm/metrics-8gpu.txt"));
    let (job, instance) = ("dcgm", "gpu-node-07:9400");
    let mut rng = Rng::new(cfg.seed ^ 0xdc61);
    let times = scrape_times(
        cfg,
        cfg.dcgm_interval_ms,
        412 % cfg.dcgm_interval_ms,
        &mut rng,
        None,
    );
    let restart = cfg
        .restart_after_ms
        .map(|r| (cfg.start_ms + r - 20_000, cfg.start_ms + r + 100_000));
    let gpu_of = |s: &PageSample| -> usize {
        s.labels
            .iter()
            .find(|(n, _)| n == "gpu")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0)
    };
    let mut values: Vec<f64> = page.iter().map(|s| s.value).collect();
    let mut samples: Vec<Vec<(i64, f64)>> = vec![Vec::new(); page.len()];
    let mut temp = [30.0f64; 8];
    let mut mem_temp = [35.0f64; 8];
    let mut util_s = [0.0f64; 8];
    let mut scrape_list = Vec::new();
    let mut prev_t = cfg.start_ms;
    for (t, failed) in times {
        if failed {
            continue;
        }
        let dt = ((t - prev_t).max(0)) as f64 / 1000.0;
        prev_t = t;
        let l = load.at(t);
        let vllm_down = restart.is_some_and(|(a, b)| t >= a && t < b);
        // per-GPU utilisation 0..1
        let mut util = [0.0f64; 8];
        for (g, u) in util.iter_mut().enumerate() {
            let base = match g {
                0 if vllm_down => 0.0,
                0 => (0.25 + 0.7 * l).min(1.0),
                1..=4 => (0.85 + 0.2 * l).min(1.0),
                5 => 0.04,
                _ => 0.0,
            };
            let noise = if base > 0.0 { rng.normal() * 0.04 } else { 0.0 };
            *u = (base + noise).clamp(0.0, 1.0);
            util_s[g] += (*u - util_s[g]) * 0.05;
            temp[g] += ((28.0 + 40.0 * util_s[g]) - temp[g]) * 0.02 + rng.normal() * 0.15;
            mem_temp[g] += ((34.0 + 42.0 * util_s[g]) - mem_temp[g]) * 0.02 + rng.normal() * 0.15;
        }
        for (i, s) in page.iter().enumerate() {
            let g = gpu_of(s).min(7);
            let u = util[g];
            let v = &mut values[i];
            match s.name.as_str() {
                "DCGM_FI_DEV_SM_CLOCK" => {
                    *v = if u < 0.02 {
                        345.0
                    } else if (1..=4).contains(&g) {
                        1755.0 + 15.0 * (rng.f64() * 3.0).floor()
                    } else {
                        1980.0
                    }
                }
                "DCGM_FI_DEV_GPU_TEMP" => *v = temp[g].round(),
                "DCGM_FI_DEV_MEMORY_TEMP" => *v = mem_temp[g].round(),
                "DCGM_FI_DEV_POWER_USAGE" => {
                    let w = 69.0 + 620.0 * u + rng.normal() * 6.0;
                    *v = (w.clamp(60.0, 700.0) * 1000.0).round() / 1000.0;
                }
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => {
                    let w = 69.0 + 620.0 * u;
                    *v += (w * dt * 1000.0).round();
                }
                "DCGM_FI_DEV_GPU_UTIL" => *v = (u * 100.0).round(),
                "DCGM_FI_DEV_MEM_COPY_UTIL" => {
                    *v = (u * 62.0 + if u > 0.0 { rng.normal() * 3.0 } else { 0.0 })
                        .round()
                        .clamp(0.0, 100.0)
                }
                "DCGM_FI_DEV_FB_USED" if g == 0 => {
                    *v = if vllm_down { 0.0 } else { s.value };
                }
                "DCGM_FI_DEV_FB_FREE" if g == 0 => {
                    let reserved = page
                        .iter()
                        .find(|x| x.name == "DCGM_FI_DEV_FB_RESERVED" && gpu_of(x) == 0)
                        .map(|x| x.value)
                        .unwrap_or(0.0);
                    let used = if vllm_down { 0.0 } else { 75_612.0 };
                    *v = 81_559.0 - used - reserved;
                }
                "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" if (1..=4).contains(&g) => {
                    *v = (120_000.0 * u + rng.normal() * 2_500.0).round().max(0.0);
                }
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => {
                    *v = ((u * 0.97 + if u > 0.0 { rng.normal() * 0.01 } else { 0.0 })
                        .clamp(0.0, 1.0)
                        * 1e6)
                        .round()
                        / 1e6
                }
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" => {
                    *v = ((u * 0.41 + if u > 0.0 { rng.normal() * 0.02 } else { 0.0 })
                        .clamp(0.0, 1.0)
                        * 1e6)
                        .round()
                        / 1e6
                }
                "DCGM_FI_PROF_DRAM_ACTIVE" => {
                    *v = ((u * 0.66 + if u > 0.0 { rng.normal() * 0.02 } else { 0.0 })
                        .clamp(0.0, 1.0)
                        * 1e6)
                        .round()
                        / 1e6
                }
                "DCGM_FI_PROF_PCIE_TX_BYTES" | "DCGM_FI_PROF_PCIE_RX_BYTES" => {
                    let base = if u > 0.0 { 2.0e7 + 3.0e8 * u } else { 1.2e5 };
                    *v = (base * (1.0 + 0.3 * rng.normal()).max(0.05)).round();
                }
                _ => {}
            }
            samples[i].push((t, *v));
        }
        scrape_list.push(t);
    }
    let mut idxs = Vec::new();
    for (s, smp) in page.iter().zip(samples) {
        idxs.push(series.len());
        series.push(Series {
            labels: with_target(s.labels.clone(), &s.name, job, instance),
            kind: if s.family_type == "counter" {
                Kind::Counter
            } else {
                Kind::Gauge
            },
            target: targets.len(),
            samples: smp,
        });
    }
    targets.push(Target {
        job: job.into(),
        instance: instance.into(),
        interval_ms: cfg.dcgm_interval_ms,
        scrape_times: scrape_list,
        series: idxs,
    });
}
