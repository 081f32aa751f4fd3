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

/// A small deterministic PRNG (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator (seed 0 is remapped).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
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
#[derive(Debug, Clone, Copy)]
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
}

impl Hist {
    fn observe(&mut self, n: u64, d: Dist) {
        if n == 0 {
            return;
        }
        // largest-remainder allocation of n observations over the buckets
        let mut prev = 0.0;
        let mut alloc: Vec<(f64, usize)> = Vec::with_capacity(self.bounds.len() + 1);
        let mut given = 0u64;
        for (i, b) in self
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .enumerate()
        {
            let c = d.cdf(b);
            let exp = (c - prev).max(0.0) * n as f64;
            prev = c;
            let whole = exp.floor() as u64;
            if i < self.counts.len() {
                self.counts[i] += whole;
            }
            given += whole;
            alloc.push((exp - whole as f64, i));
        }
        let mut rest = n.saturating_sub(given);
        alloc.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
        for (_, i) in alloc {
            if rest == 0 {
                break;
            }
            if i < self.counts.len() {
                self.counts[i] += 1;
                rest -= 1;
            }
        }
        self.count += n;
        self.sum += n as f64 * d.mean();
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
            q: QState::default(),
        }
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

    /// How often the process restarted.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Restarts the process now: counters, histograms and gauges reset.
    pub fn restart(&mut self) {
        self.q = QState::default();
        for h in &mut self.hists {
            h.counts.iter_mut().for_each(|c| *c = 0);
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
            if age >= self.cycle_s * 0.95 {
                self.restart();
                continue;
            }
            self.step(dt);
        }
    }

    fn step(&mut self, dt: f64) {
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
        let q = &mut self.q;
        // queue
        q.waiting = (q.waiting + (arrivals - served) * dt).clamp(0.0, 400.0);
        if phase != Phase::Saturated {
            q.waiting = (q.waiting - 20.0 * dt).max(0.0);
        }
        let e2e_median = 3.0 + 40.0 * sat;
        q.running = (served * e2e_median * 0.35).min(331.0).round();
        q.kv = (0.06 + 0.93 * sat + 0.02 * self.rng.next_f64()).min(0.9916);
        let hit_rate = 0.5 - 0.33 * sat;
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
        let preempt_rate = 3.0 * sat * sat;
        let preempts = (preempt_rate * dt * noise).round();
        q.preemptions += preempts;
        // finished reasons: aborts rise with saturation
        let abort_frac = 0.02 + 0.08 * sat;
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
        q.acc_4xx += 0.005 * dt + 0.05 * sat * dt;
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
        let ttft = 0.12 + 25.0 * sat * sat;
        let itl = 0.02 + 0.03 * sat;
        let queue = 0.01 + 24.0 * sat * sat;
        let decode = 200.0 * itl;
        let prefill = 0.1 + 0.3 * sat;
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
        let mut out = String::with_capacity(TEMPLATE.len() + 4096);
        for it in &self.items {
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
                    out.push('\n');
                }
            }
        }
        out
    }
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
}
