//! Shards and batches: each shard owns the series whose label hash falls to it, buffers their
//! samples in WAL order and sends them in batches of `max_samples_per_send` (or what it has
//! after `batch_send_deadline`), one request in flight, so every series' samples arrive in
//! order. A batch leaves the buffer only once the remote answered 2xx, or refused it for good
//! (4xx): 5xx, 429 (with `retry_on_http_429`), timeouts and connection errors are retried
//! with exponential backoff from `min_backoff` to `max_backoff`, without limit.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::position::Pos;
use super::Metrics;
use crate::remote::codec;
use crate::remote::proto::{Label, Sample, TimeSeries, WriteRequest};

/// A series as it leaves: relabelled labels and the hash that picks its shard.
#[derive(Debug)]
pub struct SeriesOut {
    /// Labels sorted by name, external labels and write relabelling applied.
    pub labels: Vec<Label>,
    /// Stable hash of the labels.
    pub hash: u64,
}

/// One buffered sample.
#[derive(Debug, Clone)]
pub struct Item {
    /// Its series.
    pub series: Arc<SeriesOut>,
    /// Timestamp (ms).
    pub t: i64,
    /// Value.
    pub v: f64,
    /// Where it is in the WAL.
    pub pos: Pos,
}

/// How a queue sends: the HTTP side, shared by its shards.
pub struct Sender {
    /// The client (timeout = remote_timeout).
    pub client: reqwest::Client,
    /// Target url.
    pub url: String,
    /// Headers of every request (protocol headers, auth, configured headers).
    pub headers: HeaderMap,
    /// Retry delays.
    pub min_backoff: Duration,
    /// Retry delays at most.
    pub max_backoff: Duration,
    /// Retry on 429.
    pub retry_on_429: bool,
}

impl Sender {
    /// The headers of a remote-write 1.0 request plus `extra` and an authorization value.
    pub fn headers(
        extra: &std::collections::BTreeMap<String, String>,
        authorization: Option<String>,
    ) -> Result<HeaderMap, String> {
        let mut h = HeaderMap::new();
        h.insert("content-encoding", HeaderValue::from_static("snappy"));
        h.insert(
            "content-type",
            HeaderValue::from_static("application/x-protobuf"),
        );
        h.insert(
            "user-agent",
            HeaderValue::from_str(&format!("inferdb/{}", env!("CARGO_PKG_VERSION")))
                .map_err(|e| e.to_string())?,
        );
        h.insert(
            "x-prometheus-remote-write-version",
            HeaderValue::from_static("0.1.0"),
        );
        if let Some(a) = authorization {
            let mut v = HeaderValue::from_str(&a).map_err(|e| format!("authorization: {e}"))?;
            v.set_sensitive(true);
            h.insert("authorization", v);
        }
        for (k, v) in extra {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("{k}: {e}"))?;
            let val = HeaderValue::from_str(v).map_err(|e| format!("{k}: {e}"))?;
            h.insert(name, val);
        }
        Ok(h)
    }
}

/// What a shard holds.
#[derive(Default)]
pub struct ShardState {
    /// Buffered samples, oldest first; the shard task sends a copy of the front ones and
    /// removes them once acknowledged.
    pub pending: VecDeque<Item>,
    /// When the oldest buffered sample arrived.
    pub oldest: Option<Instant>,
}

/// One shard: its buffer, the condition the reader waits on for room, and the shard task's
/// wake-up.
pub struct Shard {
    /// The buffer.
    pub state: Mutex<ShardState>,
    /// Signalled when the buffer shrinks.
    pub room: Condvar,
    /// Signalled when the buffer grows to a batch or the queue flushes/stops.
    pub wake: tokio::sync::Notify,
}

impl Shard {
    /// An empty shard.
    pub fn new() -> Arc<Shard> {
        Arc::new(Shard {
            state: Mutex::new(ShardState::default()),
            room: Condvar::new(),
            wake: tokio::sync::Notify::new(),
        })
    }

    /// The mark of this shard: its oldest unacknowledged sample's position.
    pub fn first_pending(&self) -> Option<Pos> {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.pending.front().map(|i| i.pos))
    }

    /// The oldest timestamp among the buffered samples.
    pub fn min_pending_time(&self) -> Option<i64> {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.pending.iter().map(|i| i.t).min())
    }

    /// Buffered samples.
    pub fn len(&self) -> usize {
        self.state.lock().map(|s| s.pending.len()).unwrap_or(0)
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The flags a shard task watches.
pub struct Control {
    /// Send partial batches now (shutdown, reshard).
    pub flush: AtomicBool,
    /// Give up: exit even with samples buffered or a request failing.
    pub stop: AtomicBool,
}

/// Runs one shard until `ctl.stop`, or until `ctl.flush` and its buffer is empty.
pub async fn run_shard(
    shard: Arc<Shard>,
    sender: Arc<Sender>,
    ctl: Arc<Control>,
    max_per_send: usize,
    deadline: Duration,
    metrics: Arc<Metrics>,
) {
    loop {
        if ctl.stop.load(Ordering::Acquire) {
            return;
        }
        let flushing = ctl.flush.load(Ordering::Acquire);
        let (batch, wait) = {
            let Ok(st) = shard.state.lock() else { return };
            let n = st.pending.len();
            let age = st.oldest.map(|t| t.elapsed()).unwrap_or_default();
            if n >= max_per_send || (n > 0 && (flushing || age >= deadline)) {
                let k = n.min(max_per_send);
                (
                    st.pending.iter().take(k).cloned().collect::<Vec<_>>(),
                    Duration::ZERO,
                )
            } else if n == 0 && flushing {
                return;
            } else if n == 0 {
                (Vec::new(), Duration::from_millis(250))
            } else {
                (Vec::new(), (deadline - age).min(Duration::from_millis(250)))
            }
        };
        if batch.is_empty() {
            let _ = tokio::time::timeout(wait, shard.wake.notified()).await;
            continue;
        }
        let k = batch.len();
        if !send_batch(&sender, &ctl, &batch, &metrics).await {
            return; // stopped while retrying: the batch stays unacknowledged
        }
        let Ok(mut st) = shard.state.lock() else {
            return;
        };
        let k = k.min(st.pending.len());
        st.pending.drain(..k);
        st.oldest = if st.pending.is_empty() {
            None
        } else {
            Some(Instant::now())
        };
        drop(st);
        shard.room.notify_all();
    }
}

/// Groups a batch by series (keeping each series' samples in order) into a request.
pub fn build_request(batch: &[Item]) -> WriteRequest {
    let mut idx: HashMap<*const SeriesOut, usize> = HashMap::new();
    let mut ts: Vec<TimeSeries> = Vec::new();
    for it in batch {
        let key = Arc::as_ptr(&it.series);
        let i = *idx.entry(key).or_insert_with(|| {
            ts.push(TimeSeries {
                labels: it.series.labels.clone(),
                samples: Vec::new(),
                exemplars: Vec::new(),
            });
            ts.len() - 1
        });
        ts[i].samples.push(Sample {
            value: it.v,
            timestamp: it.t,
        });
    }
    WriteRequest {
        timeseries: ts,
        metadata: Vec::new(),
    }
}

enum Outcome {
    Ok,
    /// 4xx: never retried. The body says why.
    Refused(u16, String),
    Stopped,
}

/// Whether a 4xx body says that samples are older than what the receiver has (Prometheus and
/// Mimir refuse a whole request for one such sample).
fn is_out_of_order(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    b.contains("out of order")
        || b.contains("out-of-order")
        || b.contains("out of bounds")
        || b.contains("duplicate sample for timestamp")
        || b.contains("too old")
}

/// Sends `batch` until the remote acknowledges or refuses it; `false` when stopped meanwhile.
async fn send_batch(sender: &Sender, ctl: &Control, batch: &[Item], m: &Metrics) -> bool {
    let req = build_request(batch);
    match post(sender, ctl, &req, batch.len(), m).await {
        Outcome::Ok => {
            m.acked(batch);
            true
        }
        Outcome::Stopped => false,
        Outcome::Refused(code, body) if is_out_of_order(&body) => {
            // part of the batch is older than what the remote has (a resend after a crash):
            // send series by series, dropping each series' oldest samples until it is taken
            tracing::debug!(code, %body, "remote refused old samples; resending series by series");
            for ts in req.timeseries {
                let mut samples = ts.samples;
                while !samples.is_empty() {
                    let one = WriteRequest {
                        timeseries: vec![TimeSeries {
                            labels: ts.labels.clone(),
                            samples: samples.clone(),
                            exemplars: Vec::new(),
                        }],
                        metadata: Vec::new(),
                    };
                    match post(sender, ctl, &one, samples.len(), m).await {
                        Outcome::Ok => {
                            m.sent_samples(&samples);
                            break;
                        }
                        Outcome::Stopped => return false,
                        Outcome::Refused(_, body) if is_out_of_order(&body) => {
                            m.dropped_old.inc();
                            samples.remove(0);
                        }
                        Outcome::Refused(code, body) => {
                            tracing::warn!(code, %body, "remote refused a series; dropped");
                            m.failed.add(samples.len() as u64);
                            break;
                        }
                    }
                }
            }
            true
        }
        Outcome::Refused(code, body) => {
            tracing::error!(code, %body, samples = batch.len(), url = %sender.url,
                "remote refused the batch (not retried); dropped");
            m.failed.add(batch.len() as u64);
            true
        }
    }
}

/// POSTs one request, retrying recoverable failures with backoff.
async fn post(
    sender: &Sender,
    ctl: &Control,
    req: &WriteRequest,
    n: usize,
    m: &Metrics,
) -> Outcome {
    let body = codec::encode(req);
    let mut backoff = sender.min_backoff;
    loop {
        if ctl.stop.load(Ordering::Acquire) {
            return Outcome::Stopped;
        }
        let t0 = Instant::now();
        let res = sender
            .client
            .post(&sender.url)
            .headers(sender.headers.clone())
            .body(body.clone())
            .send()
            .await;
        let mut retry_after = None;
        match res {
            Ok(r) if r.status().is_success() => {
                m.bytes.add(body.len() as u64);
                m.send_seconds.observe(t0.elapsed().as_secs_f64());
                return Outcome::Ok;
            }
            Ok(r) => {
                let code = r.status().as_u16();
                if code == 429 {
                    retry_after = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                }
                let text = r.text().await.unwrap_or_default();
                if code >= 500 || (code == 429 && sender.retry_on_429) {
                    tracing::warn!(code, body = %text.trim(), url = %sender.url, "remote write failed; retrying");
                } else {
                    return Outcome::Refused(code, text.trim().to_string());
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, url = %sender.url, "remote write failed; retrying");
            }
        }
        m.retried.add(n as u64);
        let wait = retry_after.unwrap_or(backoff);
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if ctl.stop.load(Ordering::Acquire) {
                return Outcome::Stopped;
            }
            tokio::time::sleep((until - Instant::now()).min(Duration::from_millis(100))).await;
        }
        backoff = (backoff * 2).min(sender.max_backoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(s: &Arc<SeriesOut>, t: i64) -> Item {
        Item {
            series: s.clone(),
            t,
            v: t as f64,
            pos: Pos::default(),
        }
    }

    #[test]
    fn request_groups_by_series_in_order() {
        let a = Arc::new(SeriesOut {
            labels: vec![Label {
                name: "__name__".into(),
                value: "a".into(),
            }],
            hash: 1,
        });
        let b = Arc::new(SeriesOut {
            labels: vec![Label {
                name: "__name__".into(),
                value: "b".into(),
            }],
            hash: 2,
        });
        let r = build_request(&[
            item(&a, 1),
            item(&b, 1),
            item(&a, 2),
            item(&b, 2),
            item(&a, 3),
        ]);
        assert_eq!(r.timeseries.len(), 2);
        let ts: Vec<i64> = r.timeseries[0]
            .samples
            .iter()
            .map(|s| s.timestamp)
            .collect();
        assert_eq!(ts, vec![1, 2, 3]);
        assert_eq!(r.timeseries[1].labels[0].value, "b");
        assert_eq!(r.timeseries[1].samples.len(), 2);
    }

    #[test]
    fn recognises_prometheus_out_of_order_answers() {
        assert!(is_out_of_order("out of order sample\n"));
        assert!(is_out_of_order("duplicate sample for timestamp"));
        assert!(!is_out_of_order("invalid metric name"));
    }
}
