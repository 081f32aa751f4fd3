//! The notifier's metrics under Prometheus' names, in the process registry of
//! [`crate::metrics`]: `prometheus_notifications_sent_total`, `_errors_total` (per
//! Alertmanager URL), `_dropped_total`, `_queue_capacity`, and from a collector
//! `_queue_length`, `prometheus_notifications_alertmanagers_discovered` and the
//! `_latency_seconds` summary (quantiles 0.5, 0.9, 0.99 over the last 10 minutes, as
//! client_golang's summary keeps them).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Weak;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::metrics::{self, Counter};
use crate::model::exposition::escape_label_value;

const SENT: &str = "prometheus_notifications_sent_total";
const ERRORS: &str = "prometheus_notifications_errors_total";
const LATENCY: &str = "prometheus_notifications_latency_seconds";
/// How long an observation counts towards the quantiles.
const MAX_AGE: Duration = Duration::from_secs(600);
/// The most observations kept per Alertmanager for the quantiles.
const MAX_KEPT: usize = 2048;

#[derive(Default)]
struct Window {
    recent: VecDeque<(Instant, f64)>,
    sum: f64,
    count: u64,
}

/// The notifier's counters and its latency observations.
pub(super) struct Stats {
    pub dropped: Counter,
    latency: Mutex<HashMap<String, Window>>,
}

impl Stats {
    pub fn new(capacity: usize) -> Stats {
        metrics::gauge(
            "prometheus_notifications_queue_capacity",
            "The capacity of the alert notifications queue.",
        )
        .set(capacity as f64);
        Stats {
            dropped: metrics::counter(
                "prometheus_notifications_dropped_total",
                "Total number of alerts dropped due to errors when sending to Alertmanager.",
            ),
            latency: Mutex::new(HashMap::new()),
        }
    }

    /// Alerts sent to `url` (successfully or not).
    pub fn sent(&self, url: &str) -> Counter {
        metrics::counter_with(
            SENT,
            "Total number of alerts sent.",
            &[("alertmanager", url)],
        )
    }

    /// Alerts whose sending to `url` failed.
    pub fn errors(&self, url: &str) -> Counter {
        metrics::counter_with(
            ERRORS,
            "Total number of sent alerts affected by errors.",
            &[("alertmanager", url)],
        )
    }

    /// Removes `url`'s series (sent, errors, latency) from the page, as Prometheus does for
    /// an Alertmanager no longer discovered.
    pub fn forget(&self, url: &str) {
        metrics::delete_with(SENT, &[("alertmanager", url)]);
        metrics::delete_with(ERRORS, &[("alertmanager", url)]);
        self.latency.lock().remove(url);
    }

    /// One request to `url` took `d`.
    pub fn observe_latency(&self, url: &str, d: Duration) {
        let now = Instant::now();
        let mut all = self.latency.lock();
        let w = all.entry(url.to_string()).or_default();
        let v = d.as_secs_f64();
        w.sum += v;
        w.count += 1;
        w.recent.push_back((now, v));
        while w.recent.len() > MAX_KEPT
            || w.recent
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > MAX_AGE)
        {
            w.recent.pop_front();
        }
    }

    /// Writes the latency summary of every Alertmanager (the collector's lines).
    pub(super) fn write_latency(&self, out: &mut String) {
        let all = self.latency.lock();
        if all.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "# HELP {LATENCY} Latency quantiles for sending alert notifications.\n# TYPE {LATENCY} summary"
        );
        let mut urls: Vec<&String> = all.keys().collect();
        urls.sort();
        let now = Instant::now();
        for url in urls {
            let w = &all[url];
            let mut v: Vec<f64> = w
                .recent
                .iter()
                .filter(|(t, _)| now.duration_since(*t) <= MAX_AGE)
                .map(|(_, v)| *v)
                .collect();
            v.sort_by(f64::total_cmp);
            let am = escape_label_value(url);
            for q in [0.5, 0.9, 0.99] {
                let x = if v.is_empty() {
                    f64::NAN
                } else {
                    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
                };
                let _ = writeln!(
                    out,
                    "{LATENCY}{{alertmanager=\"{am}\",quantile=\"{q}\"}} {}",
                    go_float(x)
                );
            }
            let _ = writeln!(
                out,
                "{LATENCY}_sum{{alertmanager=\"{am}\"}} {}",
                go_float(w.sum)
            );
            let _ = writeln!(out, "{LATENCY}_count{{alertmanager=\"{am}\"}} {}", w.count);
        }
    }
}

fn go_float(v: f64) -> String {
    inferdb_query::go_format::format_float(v, inferdb_query::go_format::FloatFormat::G)
}

/// Adds the collector of the gauges computed on demand (the latest notifier's).
pub(super) fn register(inner: Weak<super::Inner>) {
    metrics::register_collector("notifier", move |out| {
        let Some(n) = inner.upgrade() else { return };
        let queued = n.queue.lock().len();
        let discovered: usize = n
            .settings
            .read()
            .sets
            .iter()
            .map(|s| s.discovered.read().active.len())
            .sum();
        metrics::write_family(
            out,
            "prometheus_notifications_queue_length",
            "The number of alert notifications in the queue.",
            "gauge",
            &[(&[], queued as f64)],
        );
        metrics::write_family(
            out,
            "prometheus_notifications_alertmanagers_discovered",
            "The number of alertmanagers discovered and active.",
            "gauge",
            &[(&[], discovered as f64)],
        );
        n.stats.write_latency(out);
    });
}
