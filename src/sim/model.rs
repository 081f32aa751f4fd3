//! The workload model of one simulated vLLM server and the rendering of its `/metrics` page.
//!
//! The page layout (families, HELP/TYPE lines, label sets, bucket bounds, order) comes from
//! a vLLM 0.34.0 page rendered by prometheus_client 0.26.0 (`vllm_page_template.txt`); the
//! values come from a workload that moves through phases:
//!
//! 1. steady load (~5 req/s, KV cache ~10 %, prefix hit rate ~50 %, no preemptions);
//! 2. overload: arrivals double, the KV cache saturates (~99 %), the waiting queue grows,
//!    the prefix hit rate collapses (~17 %), preemptions and aborts rise, latencies explode;
//! 3. a restart: the process starts again, every counter and histogram resets, `_created`
//!    and `process_start_time_seconds` change, then light load until the cycle repeats.

use std::fmt::Write as _;

use crate::model::exposition::{self, Entry, Format};

const TEMPLATE: &str = include_str!("vllm_page_template.txt");
/// `process_start_time_seconds` of the template page.
const TEMPLATE_T0: f64 = 1_796_198_400.37;

/// Phase of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Steady load.
    Steady,
    /// KV-cache saturation, prefix-hit collapse, rising preemptions.
    Saturated,
    /// Just restarted: light load.
    Restarted,
}

/// A state of a vLLM server with known ground truth, for demos and for testing the detectors
/// of `inferdb advise` (`inferdb simulate --scenario`, `serve --demo --demo.scenario`). Each
/// changes the workload the way that state changes a real server; the page stays vLLM's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Steady load well within capacity: KV cache ~25 %, prefix hit rate ~50 %, no queue,
    /// no preemptions.
    Healthy,
    /// Long generations fill the KV cache (≥ 0.94): requests are preempted and their prompts
    /// recomputed, inter-token latency rises; the shared prefixes stay cached.
    KvPressure,
    /// The KV cache fills (≥ 0.92) and evicts the cached shared prefixes: the prefix-cache hit
    /// rate falls from ~50 % to ~6 %, prefill is paid again (TTFT up); no preemptions.
    CacheKick,
    /// Arrivals exceed what the server admits (max_num_seqs): the waiting queue grows while
    /// the KV cache has room (~45 %); queue time and TTFT climb.
    Queueing,
    /// A trickle of requests: about one in flight, KV cache ~2 %, no queue.
    Underutilized,
    /// The process restarts when the scenario starts (counters reset, new
    /// `process_start_time_seconds`), then runs healthy.
    Restart,
    /// Healthy load with prefill 20 % slower (a slower model revision or engine setting):
    /// time to first token 20 % up at the same arrivals; a known regression for
    /// `inferdb compare`.
    SlowPrefill,
    /// The client's concurrency sweeps from 2 to twice the server's capacity and back (a
    /// triangle of one hour): tokens/s rise with requests in flight up to the capacity
    /// ([`VllmModel::capacity`]) and stay flat past it while inter-token latency, KV-cache
    /// usage and preemptions climb; a known knee for `operating_point`.
    LoadSweep,
}

impl Scenario {
    /// Every scenario, in the order of [`Scenario::name`]s in `--help`.
    pub const ALL: [Scenario; 8] = [
        Scenario::Healthy,
        Scenario::KvPressure,
        Scenario::CacheKick,
        Scenario::Queueing,
        Scenario::Underutilized,
        Scenario::Restart,
        Scenario::SlowPrefill,
        Scenario::LoadSweep,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::KvPressure => "kv-pressure",
            Scenario::CacheKick => "cache-kick",
            Scenario::Queueing => "queueing",
            Scenario::Underutilized => "underutilized",
            Scenario::Restart => "restart",
            Scenario::SlowPrefill => "slow-prefill",
            Scenario::LoadSweep => "load-sweep",
        }
    }

    /// The scenario of a command-line name.
    pub fn from_name(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// Scenarios over time: each starts at an offset (seconds after the plan starts) and lasts
/// until the next. Written `healthy,kv-pressure@30m,healthy@1h` (the first without offset
/// starts at 0; offsets as PromQL durations or seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioPlan {
    /// (offset in seconds, scenario), offsets increasing, the first 0.
    pub steps: Vec<(f64, Scenario)>,
}

impl ScenarioPlan {
    /// One scenario from the start.
    pub fn constant(s: Scenario) -> Self {
        ScenarioPlan {
            steps: vec![(0.0, s)],
        }
    }

    /// Parses `NAME[@OFFSET],NAME@OFFSET,...`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut steps: Vec<(f64, Scenario)> = Vec::new();
        for (i, part) in text.split(',').enumerate() {
            let part = part.trim();
            let (name, off) = match part.split_once('@') {
                Some((n, o)) => (n.trim(), Some(o.trim())),
                None => (part, None),
            };
            let sc = Scenario::from_name(name).ok_or_else(|| {
                format!(
                    "unknown scenario {name:?} (one of {})",
                    Scenario::ALL.map(|s| s.name()).join(", ")
                )
            })?;
            let off = match off {
                None if i == 0 => 0.0,
                None => {
                    return Err(format!(
                        "scenario {name:?} needs a start: {name}@OFFSET (e.g. {name}@30m)"
                    ))
                }
                Some(o) => o
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .or_else(|| {
                        inferdb_query::parser::parse_model_duration_ms(o)
                            .ok()
                            .map(|ms| ms as f64 / 1000.0)
                    })
                    .ok_or_else(|| {
                        format!("scenario start {o:?} is not a duration (e.g. 90s, 30m) or seconds")
                    })?,
            };
            if let Some((prev, _)) = steps.last() {
                if off <= *prev {
                    return Err(format!("scenario starts must increase: {part:?} starts at or before the one before it"));
                }
            } else if off != 0.0 {
                steps.push((0.0, Scenario::Healthy));
            }
            steps.push((off, sc));
        }
        Ok(ScenarioPlan { steps })
    }

    /// The scenario at `t` seconds after the start and the offset at which it began.
    pub fn at(&self, t: f64) -> (Scenario, f64) {
        let i = self.steps.partition_point(|(o, _)| *o <= t).max(1) - 1;
        (self.steps[i].1, self.steps[i].0)
    }
}

/// Seconds over which a scenario's values move from the previous state to its own.
const RAMP_S: f64 = 60.0;
/// Period of the load-sweep scenario's triangle of concurrency.
const SWEEP_S: f64 = 3600.0;
/// Mean generated tokens per request (`LogNormal(200, 0.7)`).
const GEN_MEAN: f64 = 255.47;
/// Inter-token latency at light load, seconds.
const ITL_LIGHT: f64 = 0.02;

/// The workload of one step: what arrives, what is served and how it shows.
#[derive(Debug, Clone, Copy)]
struct Regime {
    arrivals: f64,
    served: f64,
    /// The queue drains quickly (not saturated).
    drain: bool,
    running: f64,
    kv: f64,
    hit_rate: f64,
    preempt_rate: f64,
    noise: f64,
    abort_frac: f64,
    e4xx: f64,
    ttft: f64,
    itl: f64,
    queue: f64,
    prefill: f64,
}

/// The regime of `s`, `ramp` (0 → 1) of the way in from the healthy values.
#[allow(clippy::too_many_arguments)]
fn scenario_regime(
    s: Scenario,
    ramp: f64,
    elapsed: f64,
    scale: f64,
    capacity: f64,
    noise: f64,
    jitter: f64,
    q: &QState,
) -> Regime {
    let mix = |healthy: f64, target: f64| healthy + (target - healthy) * ramp;
    let healthy = Regime {
        arrivals: 5.4 * scale * noise,
        served: 5.4 * scale * noise,
        drain: true,
        running: 0.0,
        kv: 0.22 + 0.06 * jitter,
        hit_rate: 0.5,
        preempt_rate: 0.0,
        noise,
        abort_frac: 0.02,
        e4xx: 0.0,
        ttft: 0.12,
        itl: 0.02,
        queue: 0.01,
        prefill: 0.1,
    };
    let mut r = match s {
        Scenario::Healthy | Scenario::Restart => healthy,
        Scenario::KvPressure => Regime {
            arrivals: mix(healthy.arrivals, 7.0 * scale * noise),
            served: mix(healthy.served, 7.0 * scale * noise),
            kv: mix(healthy.kv, (0.95 + 0.04 * jitter).min(0.99)),
            hit_rate: mix(0.5, 0.44),
            preempt_rate: mix(0.0, 1.5),
            abort_frac: mix(0.02, 0.04),
            ttft: mix(0.12, 0.6),
            itl: mix(0.02, 0.045),
            queue: mix(0.01, 0.05),
            prefill: mix(0.1, 0.4),
            ..healthy
        },
        Scenario::CacheKick => Regime {
            kv: mix(healthy.kv, 0.93 + 0.05 * jitter),
            hit_rate: mix(0.5, 0.06),
            ttft: mix(0.12, 0.9),
            itl: mix(0.02, 0.024),
            prefill: mix(0.1, 0.8),
            ..healthy
        },
        Scenario::Queueing => Regime {
            arrivals: mix(healthy.arrivals, 8.0 * scale * noise),
            served: mix(healthy.served, 6.0 * scale),
            drain: false,
            kv: mix(healthy.kv, 0.42 + 0.06 * jitter),
            ..healthy
        },
        Scenario::SlowPrefill => Regime {
            ttft: mix(0.12, 0.144),
            prefill: mix(0.1, 0.12),
            ..healthy
        },
        Scenario::LoadSweep => {
            // concurrency: a triangle from 2 to 2 x capacity and back
            let x = (elapsed / SWEEP_S).fract();
            let tri = 1.0 - (2.0 * x - 1.0).abs();
            let n = (2.0 + (2.0 * capacity - 2.0) * tri).round();
            let over = n / capacity;
            // decode batches share the GPU: per-token latency flat up to capacity, then
            // proportional to the batch, so tokens/s = n / itl stops rising at capacity
            let itl = ITL_LIGHT * over.max(1.0);
            let tokens = n / itl;
            let served = tokens / GEN_MEAN * noise;
            Regime {
                arrivals: served,
                served,
                running: n,
                kv: (0.75 * over).min(0.99),
                preempt_rate: (3.0 * (over - 1.25)).max(0.0),
                ttft: 0.12 * over.max(1.0),
                itl,
                prefill: 0.1 * over.max(1.0),
                ..healthy
            }
        }
        Scenario::Underutilized => Regime {
            arrivals: mix(healthy.arrivals, 0.25 * scale * noise),
            served: mix(healthy.served, 0.25 * scale * noise),
            kv: mix(healthy.kv, 0.02 + 0.01 * jitter),
            ttft: mix(0.12, 0.08),
            itl: mix(0.02, 0.012),
            ..healthy
        },
    };
    if s == Scenario::Queueing {
        // Little's law: the queue's wait is what is ahead divided by the service rate
        r.queue = (q.waiting / r.served.max(0.1)).max(0.01);
        r.ttft = r.queue + 0.12;
    }
    if s != Scenario::LoadSweep {
        // Little's law: in flight = served per second x seconds in the engine
        r.running = (r.served * (r.prefill + 200.0 * r.itl)).round().min(331.0);
    }
    r
}

/// A small deterministic PRNG (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator (seed 0 is remapped).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u = 1.0 - self.next_f64(); // (0, 1]
        let v = self.next_f64();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn erf(x: f64) -> f64 {
    // Abramowitz & Stegun 7.1.26
    let s = x.signum();
    let x = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    s * y
}

/// Distribution of one batch of observations.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Dist {
    /// Log-normal with this median and sigma.
    LogNormal(f64, f64),
    /// Every observation has this value.
    Const(f64),
}

impl Dist {
    fn cdf(&self, x: f64) -> f64 {
        match *self {
            Dist::LogNormal(m, s) => {
                if x <= 0.0 {
                    0.0
                } else if x.is_infinite() {
                    1.0
                } else {
                    0.5 * (1.0 + erf((x.ln() - m.ln()) / (s * std::f64::consts::SQRT_2)))
                }
            }
            Dist::Const(v) => {
                if x >= v {
                    1.0
                } else {
                    0.0
                }
            }
        }
    }
    fn mean(&self) -> f64 {
        match *self {
            Dist::LogNormal(m, s) => m * (s * s / 2.0).exp(),
            Dist::Const(v) => v,
        }
    }
}

/// The spacing of what a histogram observes, as vLLM measures it (`vllm/v1/metrics/stats.py`):
/// token counts, sizes and preemptions are whole numbers; time to first token and end-to-end
/// latency are differences of two `time.time()` readings (near 1.8e9 s, whose floats are
/// 2^-22 s apart); queue, prefill, decode, inference and inter-token times differences of
/// engine-core `time.monotonic()` readings, and the HTTP durations of `time.perf_counter()`
/// ones (seconds since boot: 2^-35 s apart on a machine up for two to three days). Time per
/// output token is a quotient: any float.
fn tick(kind: HistKind) -> Option<f64> {
    const WALL: f64 = 1.0 / (1u64 << 22) as f64;
    const MONOTONIC: f64 = 1.0 / (1u64 << 35) as f64;
    match kind {
        HistKind::PromptTokens
        | HistKind::GenTokens
        | HistKind::IterationTokens
        | HistKind::MaxNumGen
        | HistKind::ParamsN
        | HistKind::ParamsMaxTokens
        | HistKind::NumPreemptions
        | HistKind::KvComputed
        | HistKind::HttpReqSize(_)
        | HistKind::HttpRespSize(_) => Some(1.0),
        HistKind::Ttft | HistKind::E2e => Some(WALL),
        HistKind::Itl
        | HistKind::Queue
        | HistKind::Inference
        | HistKind::Prefill
        | HistKind::Decode
        | HistKind::HttpHighr
        | HistKind::HttpDuration(_)
        | HistKind::Render(_) => Some(MONOTONIC),
        HistKind::Tpot | HistKind::Other => None,
    }
}

/// Which workload quantity drives a histogram / summary.
#[derive(Debug, Clone, Copy, PartialEq)]
enum HistKind {
    PromptTokens,
    GenTokens,
    IterationTokens,
    MaxNumGen,
    ParamsN,
    ParamsMaxTokens,
    Ttft,
    Itl,
    Tpot,
    E2e,
    Queue,
    Inference,
    Prefill,
    Decode,
    NumPreemptions,
    KvComputed,
    HttpHighr,
    HttpDuration(u8),
    HttpReqSize(u8),
    HttpRespSize(u8),
    Render(u8),
    Other,
}

#[derive(Debug, Clone)]
struct Hist {
    kind: HistKind,
    bounds: Vec<f64>,
    counts: Vec<u64>, // cumulative NOT; per bucket (non-cumulative), last = +Inf bucket
    count: u64,
    sum: f64,
    /// The last distribution observed and its CDF at each bound (most batches repeat the
    /// one before, and the CDF is the costly part).
    probs: Option<(Dist, Vec<f64>)>,
    /// Expected cumulative count at each bound, summed over batches.
    expected: Vec<f64>,
    /// Draws the observations added to `sum` (one generator per histogram, so that the
    /// model's own draws do not depend on how many histograms a page has).
    rng: Rng,
}

impl Hist {
    /// Adds `n` observations of `d`: the cumulative bucket counts are the expected ones
    /// (observations so far times the CDF at each bound, summed over batches) rounded, so
    /// that they stay monotonic, sum to the count, and follow the distribution's tails even
    /// when each batch is a handful of requests.
    fn observe(&mut self, n: u64, d: Dist) {
        if n == 0 {
            return;
        }
        if self.probs.as_ref().is_none_or(|(last, _)| *last != d) {
            let p = self
                .bounds
                .iter()
                .copied()
                .chain(std::iter::once(f64::INFINITY))
                .map(|b| d.cdf(b))
                .collect();
            self.probs = Some((d, p));
        }
        let cdf = &self.probs.as_ref().expect("set above").1;
        if self.counts.is_empty() {
            // a summary: count and sum only
            self.count += n;
            self.sum += self.observed_sum(n, d);
            return;
        }
        if self.expected.len() != self.counts.len() {
            self.expected = vec![0.0; self.counts.len()];
        }
        let last = self.counts.len() - 1;
        let mut below = 0u64;
        for (i, (e, count)) in self.expected.iter_mut().zip(&mut self.counts).enumerate() {
            let c = if i == last { 1.0 } else { cdf[i] };
            *e += n as f64 * c;
            let k = (e.round() as u64).max(below);
            *count = k - below;
            below = k;
        }
        self.count += n;
        self.sum += self.observed_sum(n, d);
    }

    /// The sum of `n` observations of `d` as the exporter adds them up: each observation is
    /// a whole number or a difference of two clock readings ([`tick`]), so the sum moves in
    /// multiples of that spacing as a real page's does, and by a different amount each time
    /// (a batch of a few requests is drawn one by one, a larger one as its mean plus the
    /// spread of a sum of `n`), with the batch's mean `n × mean`.
    fn observed_sum(&mut self, n: u64, d: Dist) -> f64 {
        let (Dist::LogNormal(median, sigma), Some(tick)) = (d, tick(self.kind)) else {
            return n as f64 * d.mean();
        };
        // the batch's total is put on the grid, rounded up with the probability of its
        // fraction: plain rounding of a count whose mean is below one (preemptions per
        // request) would bias the sum
        let total = if n <= 16 {
            (0..n)
                .map(|_| median * (sigma * self.rng.normal()).exp())
                .sum()
        } else {
            let mean = d.mean();
            let sd = mean * ((sigma * sigma).exp() - 1.0).sqrt();
            (n as f64 * mean + (n as f64).sqrt() * sd * self.rng.normal()).max(0.0)
        };
        let q = total / tick;
        (q.floor() + f64::from(u8::from(self.rng.next_f64() < q.fract()))) * tick
    }
    fn cumulative(&self, bucket: usize) -> u64 {
        self.counts[..=bucket.min(self.counts.len() - 1)]
            .iter()
            .sum()
    }
}

/// What a sample line of the page shows.
#[derive(Debug, Clone, Copy)]
enum Val {
    Const(f64),
    Created(f64),
    StartTime,
    Q(Quantity),
    Bucket(usize, usize),
    Count(usize),
    Sum(usize),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Quantity {
    GcCollected(usize),
    GcCollections(usize),
    Vms,
    Rss,
    Cpu,
    OpenFds,
    Running,
    Waiting,
    WaitingCapacity,
    KvUsage,
    PrefixQueries,
    PrefixHits,
    Preemptions,
    PromptTokens,
    PromptLocalCompute,
    PromptCacheHit,
    GenTokens,
    Success(usize),
    Http(u8),
}

enum Item {
    Literal(&'static str),
    Sample(&'static str, Val),
}

/// One simulated vLLM server.
pub struct VllmModel {
    items: Vec<Item>,
    hists: Vec<Hist>,
    rng: Rng,
    /// Seconds of one load cycle (steady, saturation, restart).
    pub cycle_s: f64,
    phase_offset_s: f64,
    /// Wall-clock (unix seconds) the model has been advanced to.
    now: f64,
    /// Unix seconds the current process started.
    start_time: f64,
    restarts: u64,
    rate_scale: f64,
    /// Scenarios over time; `None`: the demo's cycle of steady load, saturation, restart.
    plan: Option<ScenarioPlan>,
    /// Unix seconds the plan started.
    plan_start: f64,
    /// Offset of the restart scenario already carried out.
    restarted_for: Option<f64>,
    /// Latency drift of the current minute (scenarios): (minute, factor).
    drift: (i64, f64),
    // state
    q: QState,
}

#[derive(Debug, Clone, Default)]
struct QState {
    gc_collected: [f64; 3],
    gc_collections: [f64; 3],
    cpu: f64,
    running: f64,
    waiting: f64,
    kv: f64,
    prefix_queries: f64,
    prefix_hits: f64,
    preemptions: f64,
    prompt: f64,
    local_compute: f64,
    cache_hit: f64,
    gen: f64,
    success: [f64; 5],
    http: [f64; 4],
    acc_finished: f64,
    acc_http_models: f64,
    acc_steps: f64,
    acc_4xx: f64,
    acc_param_n: f64,
}

fn hist_kind(family: &str, labels: &[(String, String)]) -> HistKind {
    let handler = labels
        .iter()
        .find(|(n, _)| n == "handler")
        .map(|(_, v)| match v.as_str() {
            "/v1/chat/completions" => 0u8,
            "/v1/completions" => 1,
            _ => 2,
        })
        .unwrap_or(2);
    let rtype = labels
        .iter()
        .find(|(n, _)| n == "request_type")
        .map(|(_, v)| u8::from(v != "chat"))
        .unwrap_or(0);
    match family {
        "vllm:request_prompt_tokens" => HistKind::PromptTokens,
        "vllm:request_generation_tokens" => HistKind::GenTokens,
        "vllm:iteration_tokens_total" => HistKind::IterationTokens,
        "vllm:request_max_num_generation_tokens" => HistKind::MaxNumGen,
        "vllm:request_params_n" => HistKind::ParamsN,
        "vllm:request_params_max_tokens" => HistKind::ParamsMaxTokens,
        "vllm:time_to_first_token_seconds" => HistKind::Ttft,
        "vllm:inter_token_latency_seconds" => HistKind::Itl,
        "vllm:request_time_per_output_token_seconds" => HistKind::Tpot,
        "vllm:e2e_request_latency_seconds" => HistKind::E2e,
        "vllm:request_queue_time_seconds" => HistKind::Queue,
        "vllm:request_inference_time_seconds" => HistKind::Inference,
        "vllm:request_prefill_time_seconds" => HistKind::Prefill,
        "vllm:request_decode_time_seconds" => HistKind::Decode,
        "vllm:request_num_preemptions" => HistKind::NumPreemptions,
        "vllm:request_prefill_kv_computed_tokens" => HistKind::KvComputed,
        "http_request_duration_highr_seconds" => HistKind::HttpHighr,
        "http_request_duration_seconds" => HistKind::HttpDuration(handler),
        "http_request_size_bytes" => HistKind::HttpReqSize(handler),
        "http_response_size_bytes" => HistKind::HttpRespSize(handler),
        "vllm:request_render_duration_seconds" => HistKind::Render(rtype),
        _ => HistKind::Other,
    }
}

fn quantity(name: &str, labels: &[(String, String)]) -> Option<Quantity> {
    let get = |k: &str| {
        labels
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    let gen_idx = || get("generation").parse::<usize>().unwrap_or(0).min(2);
    Some(match name {
        "python_gc_objects_collected_total" => Quantity::GcCollected(gen_idx()),
        "python_gc_collections_total" => Quantity::GcCollections(gen_idx()),
        "process_virtual_memory_bytes" => Quantity::Vms,
        "process_resident_memory_bytes" => Quantity::Rss,
        "process_cpu_seconds_total" => Quantity::Cpu,
        "process_open_fds" => Quantity::OpenFds,
        "vllm:num_requests_running" => Quantity::Running,
        "vllm:num_requests_waiting" => Quantity::Waiting,
        "vllm:num_requests_waiting_by_reason" if get("reason") == "capacity" => {
            Quantity::WaitingCapacity
        }
        "vllm:kv_cache_usage_perc" => Quantity::KvUsage,
        "vllm:prefix_cache_queries_total" => Quantity::PrefixQueries,
        "vllm:prefix_cache_hits_total" => Quantity::PrefixHits,
        "vllm:num_preemptions_total" => Quantity::Preemptions,
        "vllm:prompt_tokens_total" => Quantity::PromptTokens,
        "vllm:prompt_tokens_by_source_total" => match get("source") {
            "local_compute" => Quantity::PromptLocalCompute,
            "local_cache_hit" => Quantity::PromptCacheHit,
            _ => return None,
        },
        "vllm:prompt_tokens_cached_total" => Quantity::PromptCacheHit,
        "vllm:prompt_tokens_cached_by_source_total" if get("source") == "device" => {
            Quantity::PrefixHits
        }
        "vllm:generation_tokens_total" => Quantity::GenTokens,
        "vllm:request_success_total" => Quantity::Success(match get("finished_reason") {
            "stop" => 0,
            "length" => 1,
            "abort" => 2,
            "error" => 3,
            _ => 4,
        }),
        "http_requests_total" => Quantity::Http(match (get("handler"), get("status")) {
            ("/v1/chat/completions", "2xx") => 0,
            ("/v1/completions", _) => 1,
            ("/v1/chat/completions", _) => 3,
            _ => 2,
        }),
        _ => return None,
    })
}

impl VllmModel {
    /// A server whose process started at `start_unix` (seconds); `seed` varies its load and
    /// phase so that several servers differ.
    pub fn new(seed: u64, start_unix: f64, cycle_s: f64) -> Self {
        let mut items = vec![];
        let mut hists: Vec<Hist> = vec![];
        let mut hist_index: std::collections::HashMap<String, usize> = Default::default();
        let mut cur_type = exposition::MetricType::Unknown;
        let mut cur_family = String::new();
        let mut pos = 0usize;
        for line in TEMPLATE.split_inclusive('\n') {
            let start = pos;
            pos += line.len();
            let body = line.trim_end_matches('\n');
            if body.starts_with('#') {
                items.push(Item::Literal(&TEMPLATE[start..pos]));
                if let Some(Ok(Entry::Type { name, kind })) =
                    exposition::parse(body, Format::PromText).next()
                {
                    cur_type = kind;
                    cur_family = name.into_owned();
                }
                continue;
            }
            let Some(Ok(Entry::Sample(s))) = exposition::parse(body, Format::PromText).next()
            else {
                items.push(Item::Literal(&TEMPLATE[start..pos]));
                continue;
            };
            let series: &'static str = &TEMPLATE[start..start + s.series_text.len()];
            let labels: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|(a, b)| (a.into_owned(), b.into_owned()))
                .collect();
            let name = s.name.as_ref();
            let val = if name.ends_with("_created") {
                Val::Created(s.value - TEMPLATE_T0)
            } else if name == "process_start_time_seconds" {
                Val::StartTime
            } else if matches!(
                cur_type,
                exposition::MetricType::Histogram | exposition::MetricType::Summary
            ) {
                let key_labels: Vec<(String, String)> =
                    labels.iter().filter(|(n, _)| n != "le").cloned().collect();
                let key = format!("{cur_family}{key_labels:?}");
                let hi = *hist_index.entry(key).or_insert_with(|| {
                    hists.push(Hist {
                        kind: hist_kind(&cur_family, &key_labels),
                        bounds: vec![],
                        counts: vec![],
                        count: 0,
                        sum: 0.0,
                        probs: None,
                        expected: vec![],
                        rng: Rng::new(
                            seed ^ (hists.len() as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93),
                        ),
                    });
                    hists.len() - 1
                });
                if name.ends_with("_bucket") {
                    let le = labels
                        .iter()
                        .find(|(n, _)| n == "le")
                        .and_then(|(_, v)| exposition::parse_value(v))
                        .unwrap_or(f64::INFINITY);
                    let h = &mut hists[hi];
                    if le.is_finite() {
                        h.bounds.push(le);
                    }
                    h.counts.push(0);
                    Val::Bucket(hi, h.counts.len() - 1)
                } else if name.ends_with("_count") {
                    Val::Count(hi)
                } else {
                    Val::Sum(hi)
                }
            } else {
                match quantity(name, &labels) {
                    Some(q) => Val::Q(q),
                    None => Val::Const(s.value),
                }
            };
            items.push(Item::Sample(series, val));
        }
        let mut rng = Rng::new(seed);
        let rate_scale = 0.8 + 0.4 * rng.next_f64();
        let phase_offset_s = rng.next_f64() * cycle_s * 0.3;
        VllmModel {
            items,
            hists,
            rng,
            cycle_s,
            phase_offset_s,
            now: start_unix,
            start_time: start_unix,
            restarts: 0,
            rate_scale,
            plan: None,
            plan_start: start_unix,
            restarted_for: None,
            drift: (i64::MIN, 1.0),
            q: QState::default(),
        }
    }

    /// Follows `plan` from unix time `start` (seconds) instead of the demo cycle: no
    /// restarts but those of the restart scenario.
    pub fn set_plan(&mut self, plan: ScenarioPlan, start: f64) {
        self.plan = Some(plan);
        self.plan_start = start;
        self.restarted_for = None;
    }

    /// The scenario at the model's current time, if it follows a plan.
    pub fn scenario(&self) -> Option<Scenario> {
        self.plan
            .as_ref()
            .map(|p| p.at(self.now - self.plan_start).0)
    }

    /// The phase at the model's current time.
    pub fn phase(&self) -> Phase {
        let x = ((self.now - self.start_time + self.phase_offset_s) / self.cycle_s).fract();
        if self.restarts > 0 && self.now - self.start_time < self.cycle_s * 0.1 {
            return Phase::Restarted;
        }
        if x < 0.5 {
            Phase::Steady
        } else {
            Phase::Saturated
        }
    }

    /// Requests in flight past which this server's tokens/s stop rising (in the load-sweep
    /// scenario): 32 to 48, by seed.
    pub fn capacity(&self) -> f64 {
        (40.0 * self.rate_scale).round()
    }

    /// GPU utilisation (percent) the server's load implies, as dcgm-exporter's
    /// `DCGM_FI_DEV_GPU_UTIL` would show it: near 100 with a dozen requests in flight, a few
    /// percent with one.
    pub fn gpu_utilization(&self) -> f64 {
        (100.0 * (1.0 - (-self.q.running / 6.0).exp())).round()
    }

    /// How often the process restarted.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Restarts the process now: counters, histograms and gauges reset.
    pub fn restart(&mut self) {
        self.restart_keep_plan();
    }

    fn restart_keep_plan(&mut self) {
        self.q = QState::default();
        for h in &mut self.hists {
            h.counts.iter_mut().for_each(|c| *c = 0);
            h.expected.iter_mut().for_each(|c| *c = 0.0);
            h.count = 0;
            h.sum = 0.0;
        }
        self.start_time = self.now;
        self.phase_offset_s = 0.0;
        self.restarts += 1;
    }

    /// Advances the workload to unix time `t` (seconds) in steps of at most one second.
    /// A full cycle after its start the process restarts.
    pub fn advance_to(&mut self, t: f64) {
        while self.now < t {
            let dt = (t - self.now).min(1.0);
            self.now += dt;
            let age = self.now - self.start_time + self.phase_offset_s;
            if self.plan.is_none() && age >= self.cycle_s * 0.95 {
                self.restart();
                continue;
            }
            self.step(dt);
        }
    }

    fn step(&mut self, dt: f64) {
        if let Some(plan) = &self.plan {
            let (scenario, since) = plan.at(self.now - self.plan_start);
            if scenario == Scenario::Restart && self.restarted_for != Some(since) {
                self.restarted_for = Some(since);
                self.restart_keep_plan();
            }
            let elapsed = self.now - self.plan_start - since;
            let ramp = (elapsed / RAMP_S).clamp(0.0, 1.0);
            let noise = 0.9 + 0.2 * self.rng.next_f64();
            let jitter = self.rng.next_f64();
            let mut r = scenario_regime(
                scenario,
                ramp,
                elapsed,
                self.rate_scale,
                self.capacity(),
                noise,
                jitter,
                &self.q,
            );
            // latencies drift by up to ±3 % from minute to minute, as a real server's do
            let minute = (self.now / 60.0).floor() as i64;
            if self.drift.0 != minute {
                self.drift = (minute, 0.97 + 0.06 * self.rng.next_f64());
            }
            r.ttft *= self.drift.1;
            r.itl *= self.drift.1;
            r.prefill *= self.drift.1;
            self.apply(dt, r);
            return;
        }
        let phase = self.phase();
        let x = ((self.now - self.start_time + self.phase_offset_s) / self.cycle_s).fract();
        // 0 in steady state, rising to 1 over the saturation phase
        let sat = if phase == Phase::Saturated {
            ((x - 0.5) / 0.2).clamp(0.0, 1.0)
        } else {
            0.0
        };
        let noise = 0.9 + 0.2 * self.rng.next_f64();
        let arrivals = match phase {
            Phase::Restarted => 1.0,
            Phase::Steady => 5.4,
            Phase::Saturated => 5.4 + 6.0 * sat,
        } * self.rate_scale
            * noise;
        let capacity = 8.0 * self.rate_scale;
        let served = arrivals.min(capacity - 2.0 * sat);
        let e2e_median = 3.0 + 40.0 * sat;
        let kv = (0.06 + 0.93 * sat + 0.02 * self.rng.next_f64()).min(0.9916);
        let r = Regime {
            arrivals,
            served,
            drain: phase != Phase::Saturated,
            running: (served * e2e_median * 0.35).min(331.0).round(),
            kv,
            hit_rate: 0.5 - 0.33 * sat,
            preempt_rate: 3.0 * sat * sat,
            noise,
            abort_frac: 0.02 + 0.08 * sat,
            e4xx: 0.05 * sat,
            ttft: 0.12 + 25.0 * sat * sat,
            itl: 0.02 + 0.03 * sat,
            queue: 0.01 + 24.0 * sat * sat,
            prefill: 0.1 + 0.3 * sat,
        };
        self.apply(dt, r);
    }

    /// Advances the state by `dt` seconds under the regime `r`.
    fn apply(&mut self, dt: f64, r: Regime) {
        let Regime {
            arrivals,
            served,
            drain,
            running,
            kv,
            hit_rate,
            preempt_rate,
            noise,
            abort_frac,
            e4xx,
            ttft,
            itl,
            queue,
            prefill,
        } = r;
        let q = &mut self.q;
        // queue
        q.waiting = (q.waiting + (arrivals - served) * dt).clamp(0.0, 400.0);
        if drain {
            q.waiting = (q.waiting - 20.0 * dt).max(0.0);
        }
        q.running = running;
        q.kv = kv;
        q.acc_finished += served * dt;
        let finished = q.acc_finished.floor();
        q.acc_finished -= finished;
        let n = finished as u64;
        let prompt_median = 1200.0;
        let prompt_mean = Dist::LogNormal(prompt_median, 0.8).mean();
        let prompt_tokens = (finished * prompt_mean).round();
        let hits = (prompt_tokens * hit_rate / 64.0).floor() * 64.0;
        q.prompt += prompt_tokens;
        q.prefix_queries += prompt_tokens;
        q.prefix_hits += hits;
        q.cache_hit += hits;
        q.local_compute += prompt_tokens - hits;
        let gen_dist = Dist::LogNormal(200.0, 0.7);
        let gen_tokens = (finished * gen_dist.mean()).round();
        q.gen += gen_tokens;
        let preempts = (preempt_rate * dt * noise).round();
        q.preemptions += preempts;
        // finished reasons: aborts rise with saturation
        let fr = [0.86 - abort_frac, 0.07, abort_frac, 0.001, 0.0012];
        let mut left = finished;
        for (i, f) in fr.iter().enumerate() {
            let k = if i == fr.len() - 1 {
                left
            } else {
                (finished * f).round().min(left)
            };
            q.success[i] += k;
            left -= k;
        }
        // http: 90 % chat, 10 % completions, occasional /v1/models, 4xx under overload
        let chat = (finished * 0.9).round();
        q.http[0] += chat;
        q.http[1] += finished - chat;
        q.acc_http_models += 0.016 * dt;
        let models = q.acc_http_models.floor();
        q.acc_http_models -= models;
        q.http[2] += models;
        q.acc_4xx += 0.005 * dt + e4xx * dt;
        let e4 = q.acc_4xx.floor();
        q.acc_4xx -= e4;
        q.http[3] += e4;
        q.acc_steps += 60.0 * dt;
        let steps = q.acc_steps.floor();
        q.acc_steps -= steps;
        q.acc_param_n += finished * 0.004;
        let param_n = q.acc_param_n.floor();
        q.acc_param_n -= param_n;
        q.cpu += dt * (0.3 + 0.05 * arrivals);
        for (i, g) in [700.0, 60.0, 3.0].iter().enumerate() {
            q.gc_collected[i] += g * arrivals * dt;
            q.gc_collections[i] += g * 0.008 * arrivals * dt;
        }
        let decode = 200.0 * itl;
        let e2e = queue + prefill + decode;
        let first = n;
        let itl_n = (gen_tokens as u64).saturating_sub(first);
        let http_n = (finished + models + e4) as u64;
        let iter_mean = if steps > 0.0 {
            ((prompt_tokens - hits + gen_tokens) / steps).max(1.0)
        } else {
            1.0
        };
        let avg_preempt = if finished > 0.0 {
            preempts / finished
        } else {
            0.0
        };
        for h in &mut self.hists {
            let (cnt, d) = match h.kind {
                HistKind::PromptTokens => (n, Dist::LogNormal(prompt_median, 0.8)),
                HistKind::GenTokens => (n, gen_dist),
                HistKind::IterationTokens => (steps as u64, Dist::LogNormal(iter_mean, 0.6)),
                HistKind::MaxNumGen => (param_n as u64, Dist::LogNormal(300.0, 0.5)),
                HistKind::ParamsN => (param_n as u64, Dist::Const(2.0)),
                HistKind::ParamsMaxTokens => {
                    ((finished * 0.7) as u64, Dist::LogNormal(1024.0, 0.6))
                }
                HistKind::Ttft => (first, Dist::LogNormal(ttft, 0.6)),
                HistKind::Itl => (itl_n, Dist::LogNormal(itl, 0.3)),
                HistKind::Tpot => (n, Dist::LogNormal(itl, 0.25)),
                HistKind::E2e => (n, Dist::LogNormal(e2e, 0.6)),
                HistKind::Queue => (n, Dist::LogNormal(queue, 0.8)),
                HistKind::Inference => (n, Dist::LogNormal(prefill + decode, 0.6)),
                HistKind::Prefill => (n, Dist::LogNormal(prefill, 0.5)),
                HistKind::Decode => (n, Dist::LogNormal(decode, 0.6)),
                HistKind::NumPreemptions => (n, Dist::LogNormal(avg_preempt.max(0.01), 0.5)),
                HistKind::KvComputed => (
                    n,
                    Dist::LogNormal((prompt_median * (1.0 - hit_rate)).max(1.0), 0.9),
                ),
                HistKind::HttpHighr => (http_n, Dist::LogNormal(e2e, 0.7)),
                HistKind::HttpDuration(0) => (chat as u64 + e4 as u64, Dist::LogNormal(e2e, 0.7)),
                HistKind::HttpDuration(1) => ((finished - chat) as u64, Dist::LogNormal(e2e, 0.7)),
                HistKind::HttpDuration(_) => (models as u64, Dist::LogNormal(0.002, 0.3)),
                HistKind::HttpReqSize(0) => (chat as u64 + e4 as u64, Dist::Const(8400.0)),
                HistKind::HttpReqSize(1) => ((finished - chat) as u64, Dist::Const(7600.0)),
                HistKind::HttpReqSize(_) => (models as u64, Dist::Const(0.0)),
                HistKind::HttpRespSize(0) => (chat as u64 + e4 as u64, Dist::Const(430.0)),
                HistKind::HttpRespSize(1) => ((finished - chat) as u64, Dist::Const(431.0)),
                HistKind::HttpRespSize(_) => (models as u64, Dist::Const(167.0)),
                HistKind::Render(0) => (chat as u64, Dist::LogNormal(0.0015, 0.4)),
                HistKind::Render(_) => ((finished - chat) as u64, Dist::LogNormal(0.0008, 0.4)),
                HistKind::Other => (0, Dist::Const(0.0)),
            };
            h.observe(cnt, d);
        }
    }

    fn quantity(&self, q: Quantity) -> f64 {
        let s = &self.q;
        match q {
            Quantity::GcCollected(i) => s.gc_collected[i].floor(),
            Quantity::GcCollections(i) => s.gc_collections[i].floor(),
            Quantity::Vms => 1.2238e10 + (s.running * 1.0e6).round(),
            Quantity::Rss => 2.4e9 + (s.running * 3.0e6).round(),
            Quantity::Cpu => (s.cpu * 100.0).round() / 100.0,
            Quantity::OpenFds => 80.0 + s.running + s.waiting,
            Quantity::Running => s.running,
            Quantity::Waiting | Quantity::WaitingCapacity => s.waiting.round(),
            Quantity::KvUsage => s.kv,
            Quantity::PrefixQueries => s.prefix_queries,
            Quantity::PrefixHits => s.prefix_hits,
            Quantity::Preemptions => s.preemptions,
            Quantity::PromptTokens => s.prompt,
            Quantity::PromptLocalCompute => s.local_compute,
            Quantity::PromptCacheHit => s.cache_hit,
            Quantity::GenTokens => s.gen,
            Quantity::Success(i) => s.success[i],
            Quantity::Http(i) => s.http[i as usize],
        }
    }

    /// The `/metrics` page at the model's current time, byte-compatible with vLLM 0.34's.
    pub fn render(&self) -> String {
        self.render_families(&|_| true)
    }

    /// The lines of [`VllmModel::render`]'s page whose family passes `wanted` (as
    /// [`keep_families`] keeps them), without formatting the others.
    pub fn render_families(&self, wanted: &dyn Fn(&str) -> bool) -> String {
        self.render_lines(wanted, None)
    }

    /// [`VllmModel::render`]'s page with the explicit timestamp `ts_ms` (milliseconds) on
    /// every sample line, for a simulator whose clock is not the wall clock.
    pub fn render_stamped(&self, ts_ms: i64) -> String {
        self.render_lines(&|_| true, Some(ts_ms))
    }

    fn render_lines(&self, wanted: &dyn Fn(&str) -> bool, ts_ms: Option<i64>) -> String {
        let mut out = String::with_capacity(TEMPLATE.len() + 4096);
        for it in &self.items {
            let line = match it {
                Item::Literal(l) => l,
                Item::Sample(series, _) => series,
            };
            if !line_wanted(line, wanted) {
                continue;
            }
            match it {
                Item::Literal(l) => out.push_str(l),
                Item::Sample(series, val) => {
                    let v = match *val {
                        Val::Const(v) => v,
                        Val::Created(off) => self.start_time + off,
                        Val::StartTime => (self.start_time * 100.0).round() / 100.0,
                        Val::Q(q) => self.quantity(q),
                        Val::Bucket(h, b) => self.hists[h].cumulative(b) as f64,
                        Val::Count(h) => self.hists[h].count as f64,
                        Val::Sum(h) => self.hists[h].sum,
                    };
                    out.push_str(series);
                    out.push(' ');
                    let _ = write!(out, "{}", PyFloat(v));
                    if let Some(ts) = ts_ms {
                        let _ = write!(out, " {ts}");
                    }
                    out.push('\n');
                }
            }
        }
        out
    }
}

/// The lines of `page` whose family passes `wanted` (the family's name, or a sample's name
/// without `_total`, `_bucket`, `_sum`, `_count`): cheaper than parsing all of them.
pub fn keep_families(page: &str, wanted: &dyn Fn(&str) -> bool) -> String {
    let mut out = String::with_capacity(page.len() / 4);
    for line in page.split_inclusive('\n') {
        if line_wanted(line, wanted) {
            out.push_str(line);
        }
    }
    out
}

/// Whether a page line (comment or sample) belongs to a family `wanted` passes.
fn line_wanted(line: &str, wanted: &dyn Fn(&str) -> bool) -> bool {
    let name = match line.strip_prefix("# ") {
        Some(c) => c.split_whitespace().nth(1).unwrap_or(""),
        None => line.split(['{', ' ']).next().unwrap_or(""),
    };
    let base = ["_total", "_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name);
    wanted(name) || wanted(base)
}

/// Formats a float as prometheus_client's `floatToGoString` does.
pub struct PyFloat(pub f64);

impl std::fmt::Display for PyFloat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.0;
        if d.is_nan() {
            return f.write_str("NaN");
        }
        if d.is_infinite() {
            return f.write_str(if d > 0.0 { "+Inf" } else { "-Inf" });
        }
        let s = py_repr(d);
        if d > 0.0 {
            if let Some(dot) = s.find('.') {
                if dot > 6 && !s.contains('e') {
                    let mut mant = format!("{}.{}{}", &s[..1], &s[1..dot], &s[dot + 1..]);
                    while mant.ends_with('0') || mant.ends_with('.') {
                        mant.pop();
                    }
                    return write!(f, "{mant}e+{:02}", dot - 1);
                }
            }
        }
        f.write_str(&s)
    }
}

/// Python's `repr(float)`.
fn py_repr(d: f64) -> String {
    if d == 0.0 {
        return if d.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let a = d.abs();
    if !(1e-4..1e16).contains(&a) {
        let e = format!("{d:e}");
        let (m, x) = e.split_once('e').unwrap_or((&e, "0"));
        let x: i32 = x.parse().unwrap_or(0);

        let sign = if x < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", x.abs());
    }
    let s = format!("{d}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn py_float_format_matches_prometheus_client() {
        assert_eq!(PyFloat(0.0).to_string(), "0.0");
        assert_eq!(PyFloat(3.0).to_string(), "3.0");
        assert_eq!(PyFloat(1.5e-5).to_string(), "1.5e-05");
        assert_eq!(
            PyFloat(0.07627118644067797).to_string(),
            "0.07627118644067797"
        );
        assert_eq!(
            PyFloat(1796198497.780017).to_string(),
            "1.796198497780017e+09"
        );
        assert_eq!(PyFloat(4833385.0).to_string(), "4.833385e+06");
        assert_eq!(PyFloat(1048576.0).to_string(), "1.048576e+06");
        assert_eq!(PyFloat(11701968896.0).to_string(), "1.1701968896e+10");
        assert_eq!(PyFloat(118344.0).to_string(), "118344.0");
        assert_eq!(PyFloat(1487.31).to_string(), "1487.31");
    }

    #[test]
    fn template_renders_back_to_the_fixture_layout() {
        let m = VllmModel::new(1, TEMPLATE_T0, 600.0);
        let page = m.render();
        // same lines, same series; only values differ
        let a: Vec<&str> = TEMPLATE.lines().collect();
        let b: Vec<&str> = page.lines().collect();
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            if x.starts_with('#') {
                assert_eq!(x, y);
            } else {
                let (sx, _) = x.rsplit_once(' ').unwrap();
                let (sy, _) = y.rsplit_once(' ').unwrap();
                assert_eq!(sx, sy);
            }
        }
        // _created and start time follow the process start
        assert!(
            page.contains("process_start_time_seconds 1.79619840037e+09\n"),
            "{}",
            &page[..2000]
        );
        assert!(page.contains(
            "vllm:estimated_flops_per_gpu_created{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.796198497780017e+09\n"
        ));
    }

    fn values(page: &str) -> std::collections::BTreeMap<String, f64> {
        exposition::parse(page, Format::PromText)
            .filter_map(|e| match e.unwrap() {
                Entry::Sample(s) => Some((s.series_text.to_string(), s.value)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn histogram_sums_move_on_the_grid_of_what_vllm_measures() {
        let key = |n: &str| {
            format!("{n}{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}}")
        };
        let t0 = 1_800_000_000.0;
        let mut m = VllmModel::new(3, t0, 3600.0);
        let names = [
            ("vllm:e2e_request_latency_seconds_sum", 22),
            ("vllm:time_to_first_token_seconds_sum", 22),
            ("vllm:request_queue_time_seconds_sum", 35),
            ("vllm:request_prompt_tokens_sum", 0),
        ];
        let mut steps: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
        let mut last = vec![0.0; names.len()];
        for i in 1..=120 {
            m.advance_to(t0 + 15.0 * f64::from(i));
            let v = values(&m.render());
            for (j, (name, bits)) in names.iter().enumerate() {
                let x = v[&key(name)];
                let scaled = x * (1u64 << bits) as f64;
                assert_eq!(scaled.fract(), 0.0, "{name} = {x} off its 2^-{bits} grid");
                if x > last[j] {
                    steps[j].push(x - last[j]);
                }
                last[j] = x;
            }
        }
        for ((name, _), st) in names.iter().zip(&steps) {
            let mut distinct = st.clone();
            distinct.sort_by(f64::total_cmp);
            distinct.dedup();
            // each batch is drawn: increments do not repeat as `n x mean` did
            assert!(
                st.len() >= 60 && distinct.len() * 10 >= st.len() * 9,
                "{name}: {} increments, {} distinct",
                st.len(),
                distinct.len()
            );
        }
        // the time per output token is a quotient: off any coarse grid
        let tpot = values(&m.render())[&key("vllm:request_time_per_output_token_seconds_sum")];
        assert_ne!((tpot * f64::from(1u32 << 22)).fract(), 0.0);
    }

    #[test]
    fn drawn_sums_keep_the_mean_of_a_count_below_one() {
        let mut h = Hist {
            kind: HistKind::NumPreemptions,
            bounds: vec![],
            counts: vec![],
            count: 0,
            sum: 0.0,
            probs: None,
            expected: vec![],
            rng: Rng::new(9),
        };
        let d = Dist::LogNormal(0.2, 0.5);
        // small batches (drawn one by one) and large ones (mean plus spread)
        for n in [3u64, 40] {
            let total: f64 = (0..2000).map(|_| h.observed_sum(n, d)).sum();
            let want = 2000.0 * n as f64 * d.mean();
            assert_eq!(total.fract(), 0.0);
            assert!(
                (total / want - 1.0).abs() < 0.05,
                "n {n}: {total} against {want}"
            );
        }
    }

    #[test]
    fn workload_moves_through_phases_and_restarts() {
        let t0 = 1_800_000_000.0;
        let mut m = VllmModel::new(7, t0, 600.0);
        m.phase_offset_s = 0.0;
        m.advance_to(t0 + 200.0);
        assert_eq!(m.phase(), Phase::Steady);
        let steady = values(&m.render());
        let key = |n: &str| {
            format!("{n}{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}}")
        };
        assert!(steady[&key("vllm:kv_cache_usage_perc")] < 0.2);
        assert_eq!(steady[&key("vllm:num_preemptions_total")], 0.0);
        let hr_steady = steady[&key("vllm:prefix_cache_hits_total")]
            / steady[&key("vllm:prefix_cache_queries_total")];
        assert!(hr_steady > 0.4, "{hr_steady}");
        m.advance_to(t0 + 500.0);
        assert_eq!(m.phase(), Phase::Saturated);
        let sat = values(&m.render());
        assert!(sat[&key("vllm:kv_cache_usage_perc")] > 0.9);
        assert!(sat[&key("vllm:num_preemptions_total")] > 10.0);
        assert!(sat[&key("vllm:num_requests_waiting")] > 10.0);
        let dq = sat[&key("vllm:prefix_cache_queries_total")]
            - steady[&key("vllm:prefix_cache_queries_total")];
        let dh = sat[&key("vllm:prefix_cache_hits_total")]
            - steady[&key("vllm:prefix_cache_hits_total")];
        assert!(dh / dq < hr_steady - 0.1, "hit rate collapsed: {}", dh / dq);
        // counters never decrease within a process; histogram invariants hold
        for (k, v) in &steady {
            if k.contains("_total") || k.contains("_count") || k.contains("_bucket") {
                assert!(sat[k] >= *v, "{k} decreased");
            }
        }
        let cnt = sat[&key("vllm:e2e_request_latency_seconds_count")];
        let inf = sat["vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}"];
        assert_eq!(cnt, inf);
        let succ: f64 = sat
            .iter()
            .filter(|(k, _)| k.starts_with("vllm:request_success_total"))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(succ, cnt);
        // restart: counters reset
        m.advance_to(t0 + 580.0);
        assert_eq!(m.restarts(), 1);
        let after = values(&m.render());
        assert!(after[&key("vllm:prompt_tokens_total")] < sat[&key("vllm:prompt_tokens_total")]);
        assert!(after["process_start_time_seconds"] > steady["process_start_time_seconds"]);
    }

    #[test]
    fn scenario_plans_parse_and_refuse() {
        let p = ScenarioPlan::parse("healthy,kv-pressure@30m,healthy@3600").unwrap();
        assert_eq!(
            p.steps,
            vec![
                (0.0, Scenario::Healthy),
                (1800.0, Scenario::KvPressure),
                (3600.0, Scenario::Healthy)
            ]
        );
        assert_eq!(p.at(1799.0), (Scenario::Healthy, 0.0));
        assert_eq!(p.at(1800.0), (Scenario::KvPressure, 1800.0));
        assert_eq!(
            ScenarioPlan::parse("queueing@10m").unwrap().steps[0],
            (0.0, Scenario::Healthy)
        );
        for bad in [
            "",
            "sick",
            "healthy,queueing",
            "healthy,queueing@x",
            "healthy@5m,queueing@1m",
        ] {
            assert!(ScenarioPlan::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// Rates of a counter and means of gauges over the last `secs` of a run.
    fn run(
        s: Scenario,
        secs: f64,
    ) -> (
        std::collections::BTreeMap<String, f64>,
        std::collections::BTreeMap<String, f64>,
    ) {
        let t0 = 1_800_000_000.0;
        let mut m = VllmModel::new(3, t0, 600.0);
        m.set_plan(ScenarioPlan::constant(s), t0);
        m.advance_to(t0 + secs);
        let a = values(&m.render());
        m.advance_to(t0 + secs + 300.0);
        (a, values(&m.render()))
    }

    #[test]
    fn scenarios_change_the_model_like_the_state_they_name() {
        let key = |n: &str| {
            format!("{n}{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}}")
        };
        let d = |a: &std::collections::BTreeMap<String, f64>,
                 b: &std::collections::BTreeMap<String, f64>,
                 n: &str| b[&key(n)] - a[&key(n)];
        let hit = |a, b| {
            d(a, b, "vllm:prefix_cache_hits_total") / d(a, b, "vllm:prefix_cache_queries_total")
        };
        let (a, b) = run(Scenario::Healthy, 600.0);
        assert!(b[&key("vllm:kv_cache_usage_perc")] < 0.5);
        assert_eq!(d(&a, &b, "vllm:num_preemptions_total"), 0.0);
        assert_eq!(b[&key("vllm:num_requests_waiting")], 0.0);
        assert!(b[&key("vllm:num_requests_running")] >= 10.0);
        assert!((hit(&a, &b) - 0.5).abs() < 0.05);
        let (a, b) = run(Scenario::KvPressure, 600.0);
        assert!(b[&key("vllm:kv_cache_usage_perc")] >= 0.94);
        assert!(d(&a, &b, "vllm:num_preemptions_total") > 100.0);
        assert!(hit(&a, &b) > 0.4);
        assert_eq!(b[&key("vllm:num_requests_waiting")], 0.0);
        let (a, b) = run(Scenario::CacheKick, 600.0);
        assert!(b[&key("vllm:kv_cache_usage_perc")] >= 0.92);
        assert_eq!(d(&a, &b, "vllm:num_preemptions_total"), 0.0);
        assert!(hit(&a, &b) < 0.1);
        let (a, b) = run(Scenario::Queueing, 600.0);
        assert!(a[&key("vllm:num_requests_waiting")] > 50.0);
        assert!(b[&key("vllm:num_requests_waiting")] >= a[&key("vllm:num_requests_waiting")]);
        assert!(b[&key("vllm:kv_cache_usage_perc")] < 0.6);
        let (_, b) = run(Scenario::Underutilized, 600.0);
        assert!(b[&key("vllm:num_requests_running")] <= 2.0);
        assert!(b[&key("vllm:kv_cache_usage_perc")] < 0.05);
        // restart: once, at the scenario's start, then healthy
        let t0 = 1_800_000_000.0;
        let mut m = VllmModel::new(3, t0, 600.0);
        m.set_plan(ScenarioPlan::parse("healthy,restart@20m").unwrap(), t0);
        m.advance_to(t0 + 1199.0);
        let before = values(&m.render());
        m.advance_to(t0 + 1260.0);
        assert_eq!(m.restarts(), 1);
        let after = values(&m.render());
        assert!(after[&key("vllm:prompt_tokens_total")] < before[&key("vllm:prompt_tokens_total")]);
        m.advance_to(t0 + 7200.0);
        assert_eq!(m.restarts(), 1);
        assert_eq!(m.scenario(), Some(Scenario::Restart));
    }
}
