//! The range-query result cache (`--query.result-cache-size`): a refresh answers exactly
//! what a cold evaluation answers, deletes and writes into the cached range are seen, and
//! the cache stays within its size.

use std::sync::Arc;
use std::time::Duration;

use inferdb::api::result_cache::ResultCache;
use inferdb::api::{ApiBackend, DbBackend, QueryOptions, QueryOutput, QueryValue};
use inferdb_query::EngineOptions;
use inferdb_storage::{Db, Labels, MatchOp, Matcher, Options};

/// The data's first sample (ms), long before the clock: every step up to the newest sample
/// less the lookback delta may be cached.
const T0: i64 = 1_700_000_000_000;
const HOUR: i64 = 3_600_000;
const STEP: i64 = 15_000;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    Labels::from_pairs(pairs.iter().copied())
}

/// 3 h of a small vLLM-like fleet at 15 s, timestamps off the step grid.
fn open_db(dir: &std::path::Path) -> Arc<Db> {
    let opts = Options {
        background: false,
        ..Options::default()
    };
    let db = Db::open(dir, opts).expect("open");
    let mut app = db.appender();
    for i in 0..3 {
        let inst = format!("vllm-{i}:8000");
        let model = ["org/llama", "org/qwen", "mistral"][i];
        let mut counter = 0.0;
        for k in 0..(3 * HOUR / STEP) {
            let t = T0 + k * STEP + 137 + i as i64 * 11;
            // a counter with a reset, a gauge and two histogram buckets
            counter = if k == 400 {
                3.0
            } else {
                counter + (k % 7) as f64 + i as f64
            };
            let gauge = ((k as f64) / 17.0).sin() * 10.0 + i as f64;
            let base = [("instance", inst.as_str()), ("model_name", model)];
            let with = |name: &str, extra: &[(&str, &str)]| {
                let mut v: Vec<(&str, &str)> = vec![("__name__", name)];
                v.extend_from_slice(&base);
                v.extend_from_slice(extra);
                labels(&v)
            };
            app.append(&with("vllm:request_success_total", &[]), t, counter)
                .unwrap();
            app.append(&with("vllm:num_requests_running", &[]), t, gauge)
                .unwrap();
            app.append(&with("lat_bucket", &[("le", "0.5")]), t, counter * 0.6)
                .unwrap();
            app.append(&with("lat_bucket", &[("le", "+Inf")]), t, counter)
                .unwrap();
            // a bucket that is now and then below the one before it: histogram_quantile
            // fixes it and says so in an info naming the first and last step
            let dip = if k % 97 == 5 { 3.0 } else { 0.0 };
            app.append(&with("lat_bucket", &[("le", "1")]), t, counter * 0.8 - dip)
                .unwrap();
        }
    }
    app.commit().unwrap();
    Arc::new(db)
}

fn opts() -> QueryOptions {
    QueryOptions::with_timeout(Duration::from_secs(30))
}

const QUERIES: &[&str] = &[
    "rate(vllm:request_success_total[5m])",
    "sum by (model_name) (rate(vllm:request_success_total[5m]))",
    r#"label_replace(sum by (model_name) (rate(vllm:request_success_total[5m])), "model", "$1", "model_name", ".*/(.*)")"#,
    "avg_over_time(vllm:num_requests_running[10m])",
    "max_over_time(vllm:num_requests_running[30m])",
    "quantile_over_time(0.9, vllm:num_requests_running[30m])",
    "histogram_quantile(0.9, sum by (le) (rate(lat_bucket[5m])))",
    "histogram_quantile(0.7, sum by (le, instance) (rate(lat_bucket[1m])))",
    "rate(vllm:num_requests_running[5m])",
    r#"sum(vllm:num_requests_running{model_name="none"}) or vector(0)"#,
    "topk(2, vllm:num_requests_running)",
    "vllm:num_requests_running > 5",
    "max_over_time(rate(vllm:request_success_total[5m])[20m:1m])",
    "timestamp(vllm:num_requests_running)",
];

/// Answers compared bit for bit (NaN included).
fn same(a: &QueryOutput, b: &QueryOutput) -> Result<(), String> {
    let (QueryValue::Matrix(x), QueryValue::Matrix(y)) = (&a.value, &b.value) else {
        return Err("not matrices".into());
    };
    if x.len() != y.len() {
        return Err(format!("{} vs {} series", x.len(), y.len()));
    }
    for (s, r) in x.iter().zip(y) {
        if s.labels != r.labels {
            return Err(format!("labels {} vs {}", s.labels, r.labels));
        }
        let bits = |v: &[(i64, f64)]| v.iter().map(|p| (p.0, p.1.to_bits())).collect::<Vec<_>>();
        if bits(&s.samples) != bits(&r.samples) {
            return Err(format!("points of {} differ", s.labels));
        }
    }
    if a.warnings != b.warnings || a.infos != b.infos {
        return Err("annotations differ".into());
    }
    Ok(())
}

fn backends(db: &Arc<Db>, bytes: usize) -> (DbBackend, DbBackend, Arc<ResultCache>) {
    let cache = ResultCache::new(bytes);
    let cold = DbBackend::new(db.clone(), EngineOptions::default());
    let warm =
        DbBackend::new(db.clone(), EngineOptions::default()).with_result_cache(cache.clone());
    (cold, warm, cache)
}

/// `inferdb_query_result_cache_hits_total` as `/metrics` shows it.
fn hits(cache: &ResultCache) -> f64 {
    let mut text = String::new();
    cache.write_metrics(&mut text);
    text.lines()
        .find_map(|l| l.strip_prefix("inferdb_query_result_cache_hits_total "))
        .and_then(|v| v.parse().ok())
        .expect("hits in the metrics")
}

#[test]
fn refreshes_answer_what_a_cold_evaluation_answers() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_db(dir.path());
    let (cold, warm, cache) = backends(&db, 64 << 20);
    for q in QUERIES {
        let before = hits(&cache);
        // a dashboard over the last hour of data refreshing every 30 s, with a 15 s and a
        // 60 s step (Grafana aligns the range to the step), the last refreshes beyond the
        // newest sample (steps that must not be kept)
        for step in [STEP, 60_000] {
            for k in 0..14 {
                let end = (T0 + 2 * HOUR + 40 * 60_000 + k * 30_000) / step * step;
                let start = end - HOUR;
                let a = warm.range_query(q, start, end, step, &opts()).unwrap();
                let b = cold.range_query(q, start, end, step, &opts()).unwrap();
                if let Err(e) = same(&a, &b) {
                    panic!("{q} step {step} refresh {k}: {e}");
                }
            }
        }
        // every refresh but the first request of each step found its start in the cache,
        // except where an annotation not tied to steps ("might not be a counter") is kept
        // only for the exact range it came from (hit again only by the same range: a 60 s
        // step's range moves every other refresh)
        let n = hits(&cache) - before;
        if q.starts_with("rate(vllm:num_requests_running") {
            assert!(n <= 7.0, "{q}: {n} hits");
        } else if q.contains("lat_bucket") {
            // the monotonicity info (kept with the steps it names) often starts at the
            // range's first step here: those refreshes are evaluated whole
            assert!(n >= 8.0, "{q}: {n} hits");
        } else {
            assert!(n >= 26.0, "{q}: {n} hits");
        }
    }
    assert!(cache.entries() > 0 && cache.bytes() > 0);
    // the monotonicity info was seen and its answers were cached
    let q = "histogram_quantile(0.7, sum by (le, instance) (rate(lat_bucket[1m])))";
    let end = T0 + 2 * HOUR;
    let a = cold.range_query(q, end - HOUR, end, STEP, &opts()).unwrap();
    assert!(
        a.infos.iter().any(|i| i.contains("monotonicity")),
        "{:?}",
        a.infos
    );
}

#[test]
fn deletes_and_writes_into_the_cached_range_are_seen() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_db(dir.path());
    let (cold, warm, _cache) = backends(&db, 64 << 20);
    let q = "sum by (instance) (vllm:num_requests_running)";
    let (start, end) = (T0 + HOUR, T0 + 2 * HOUR);
    let first = warm.range_query(q, start, end, STEP, &opts()).unwrap();
    same(
        &first,
        &cold.range_query(q, start, end, STEP, &opts()).unwrap(),
    )
    .unwrap();

    // a deletion inside the cached range
    let m = Matcher::new(MatchOp::Equal, "instance", "vllm-1:8000").unwrap();
    warm.delete_series(&[m], T0 + HOUR + 600_000, T0 + HOUR + 1_200_000)
        .unwrap();
    let a = warm.range_query(q, start, end, STEP, &opts()).unwrap();
    let b = cold.range_query(q, start, end, STEP, &opts()).unwrap();
    same(&a, &b).unwrap();
    assert!(same(&a, &first).is_err(), "the deletion changed nothing");

    // a new series written into the cached range (late data)
    let mut app = db.appender();
    let l = labels(&[
        ("__name__", "vllm:num_requests_running"),
        ("instance", "late:8000"),
    ]);
    for k in 0..20 {
        app.append(&l, T0 + HOUR + 300_000 + k * STEP, 1.0).unwrap();
    }
    app.commit().unwrap();
    let c = warm.range_query(q, start, end, STEP, &opts()).unwrap();
    same(&c, &cold.range_query(q, start, end, STEP, &opts()).unwrap()).unwrap();
    assert!(same(&c, &a).is_err(), "the late samples changed nothing");

    // a block backfilled before the head, into a cached range that starts before the data
    let (s0, e0) = (T0 - HOUR, T0 + HOUR);
    let before = warm.range_query(q, s0, e0, STEP, &opts()).unwrap();
    let old = labels(&[
        ("__name__", "vllm:num_requests_running"),
        ("instance", "backfilled:8000"),
    ]);
    let samples: Vec<inferdb_storage::Sample> = (0..40)
        .map(|k| inferdb_storage::Sample {
            t: T0 - HOUR / 2 + k * STEP,
            v: 2.0,
        })
        .collect();
    db.backfill([(old, samples)]).unwrap();
    let after = warm.range_query(q, s0, e0, STEP, &opts()).unwrap();
    same(&after, &cold.range_query(q, s0, e0, STEP, &opts()).unwrap()).unwrap();
    assert!(
        same(&after, &before).is_err(),
        "the backfill changed nothing"
    );
}

#[test]
fn the_cache_stays_within_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_db(dir.path());
    let cap = 200_000;
    let (cold, warm, cache) = backends(&db, cap);
    for w in 1..40 {
        let q = format!("avg_over_time(vllm:num_requests_running[{w}m])");
        let (start, end) = (T0 + HOUR, T0 + 2 * HOUR);
        let a = warm.range_query(&q, start, end, STEP, &opts()).unwrap();
        same(
            &a,
            &cold.range_query(&q, start, end, STEP, &opts()).unwrap(),
        )
        .unwrap();
        assert!(cache.bytes() <= cap, "{} > {cap}", cache.bytes());
    }
    let entries = cache.entries();
    assert!(entries > 1 && entries < 39, "{entries} entries");

    // size 0 keeps nothing
    let (_, off, none) = backends(&db, 0);
    off.range_query(QUERIES[0], T0 + HOUR, T0 + 2 * HOUR, STEP, &opts())
        .unwrap();
    assert_eq!((none.entries(), none.bytes()), (0, 0));
}

#[test]
fn an_answer_evaluated_before_a_change_is_kept_only_up_to_it() {
    use inferdb::api::result_cache::Key;
    use inferdb::api::MatrixSeries;
    use inferdb_query::value::Annotations;
    let cache = ResultCache::new(1 << 20);
    let series = vec![MatrixSeries {
        labels: labels(&[("job", "a")]),
        samples: (0..10).map(|k| (k * STEP, k as f64)).collect(),
    }];
    let key = Key::new("up", 0, STEP, 300_000);
    let end = 9 * STEP;
    // a change at step 4 while the answer was being evaluated
    let epoch = cache.epoch();
    cache.invalidate_from(4 * STEP - 1);
    cache.store(
        epoch,
        key.clone(),
        (0, end, end),
        &series,
        &Annotations::new(),
    );
    let got = cache
        .lookup(&key, 0, end)
        .expect("steps before the change kept");
    assert_eq!(got.last, 3 * STEP);
    assert_eq!(got.series[0].samples.len(), 4);
    // a change before the first step: nothing kept
    let epoch = cache.epoch();
    cache.clear();
    cache.store(
        epoch,
        key.clone(),
        (0, end, end),
        &series,
        &Annotations::new(),
    );
    assert!(cache.lookup(&key, 0, end).is_none());
    // no change: all kept
    let epoch = cache.epoch();
    cache.store(
        epoch,
        key.clone(),
        (0, end, end),
        &series,
        &Annotations::new(),
    );
    assert_eq!(cache.lookup(&key, 0, end).map(|c| c.last), Some(end));
}
