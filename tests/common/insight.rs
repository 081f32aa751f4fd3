//! The scoring shared by the scenario matrices of `inferdb advise` (`insight_matrix.rs` over
//! imported OpenMetrics history, `insight_matrix_sim.rs` over the simulator recorded in
//! process): advise over a store, then recall and precision against the injected states.

use std::sync::Arc;
use std::time::{Duration, Instant};

use inferdb::api::{ApiBackend, DbBackend};
use inferdb::insight::{advise, BackendSource, Report, Severity, Thresholds};
use inferdb_query::EngineOptions;

/// Minutes, in seconds.
pub const MIN: f64 = 60.0;

/// One instance's injected states as (finding kind, from minute, to minute).
pub type States = Vec<(&'static str, f64, f64)>;

/// Each state alone on one instance (`vllm-0` to `vllm-4`), the start of each matrix.
pub fn single_states() -> Vec<(&'static str, States)> {
    vec![
        (
            "healthy,kv-pressure@30m,healthy@70m",
            vec![("kv_cache_pressure", 30.0, 70.0)],
        ),
        (
            "healthy,cache-kick@30m,healthy@70m",
            vec![("prefix_cache_collapse", 30.0, 70.0)],
        ),
        (
            "healthy,queueing@30m,healthy@70m",
            vec![("queueing", 30.0, 70.0)],
        ),
        (
            "healthy,underutilized@20m",
            vec![("underutilized", 20.0, 90.0)],
        ),
        ("healthy,restart@45m", vec![("restart", 45.0, 45.0)]),
    ]
}

/// Two states in turn on one instance, then two healthy instances: the end of each matrix.
pub fn in_turn_then_healthy() -> Vec<(&'static str, States)> {
    vec![
        (
            "healthy,cache-kick@20m,queueing@50m,healthy@75m",
            vec![
                ("prefix_cache_collapse", 20.0, 50.0),
                ("queueing", 50.0, 75.0),
            ],
        ),
        ("healthy", vec![]),
        ("healthy", vec![]),
    ]
}

/// The engine over `db` as an advise source.
pub fn source(db: inferdb_storage::Db) -> BackendSource {
    let backend: Arc<dyn ApiBackend> =
        Arc::new(DbBackend::new(Arc::new(db), EngineOptions::default()));
    BackendSource {
        backend,
        timeout: Duration::from_secs(60),
    }
}

/// The report of `advise` with the default thresholds over the `minutes` from `start_s`, each
/// finding printed, and how long it took.
pub fn advise_window(src: &BackendSource, start_s: i64, minutes: i64) -> (Report, Duration) {
    let t = Instant::now();
    let report = advise(
        src,
        start_s * 1000,
        (start_s + minutes * 60) * 1000,
        &Thresholds::default(),
        &[],
    )
    .unwrap();
    let took = t.elapsed();
    for f in &report.findings {
        eprintln!(
            "{:?} {} {:?} {:.1}..{:.1} min: {}",
            f.severity,
            f.kind,
            f.scope,
            (f.start - start_s as f64) / MIN,
            (f.end - start_s as f64) / MIN,
            f.summary
        );
    }
    (report, took)
}

/// Asserts recall and precision of 1 over `matrix` (instance `vllm-{i}:8000` had the states of
/// entry `i`, serving `model(i)`): every injected state is named on its instance and model,
/// starting within its span and ending at most 5 minutes (the rate windows' lag) after it;
/// every finding but `operating_point` is such a state. `what` and `timings` go into the
/// summary line.
pub fn assert_matrix_found(
    report: &Report,
    matrix: &[(&str, States)],
    model: impl Fn(usize) -> &'static str,
    start_s: i64,
    what: &str,
    timings: &str,
) {
    let t0 = start_s as f64;
    let slack = 5.0;
    let inst = |s: usize| format!("vllm-{s}:8000");
    let in_span = |start: f64, from: f64, to: f64| {
        (start - t0) / MIN >= from - 1.0 && (start - t0) / MIN <= to + slack
    };
    let (mut injected, mut found) = (0, 0);
    for (s, (_, states)) in matrix.iter().enumerate() {
        for &(kind, from, to) in states {
            injected += 1;
            let hit = report.findings.iter().any(|f| {
                f.kind == kind
                    && f.scope.get("instance") == Some(&inst(s))
                    && f.scope.get("model_name").is_none_or(|m| m == model(s))
                    && in_span(f.start, from, to)
                    && (f.end - t0) / MIN <= to + slack
            });
            if hit {
                found += 1;
            } else {
                eprintln!("MISSED {kind} on {} in {from}..{to} min", inst(s));
            }
        }
    }
    let (mut reported, mut correct) = (0, 0);
    for f in report
        .findings
        .iter()
        .filter(|f| f.kind != "operating_point")
    {
        reported += 1;
        let i = f.scope.get("instance").cloned().unwrap_or_default();
        let ok = matrix.iter().enumerate().any(|(s, (_, states))| {
            i == inst(s)
                && states
                    .iter()
                    .any(|&(kind, from, to)| kind == f.kind && in_span(f.start, from, to))
        });
        if ok {
            correct += 1;
        } else {
            eprintln!(
                "FALSE {} {:?} at {:.1} min",
                f.kind,
                f.scope,
                (f.start - t0) / MIN
            );
        }
    }
    let recall = found as f64 / injected as f64;
    let precision = if reported == 0 {
        1.0
    } else {
        correct as f64 / reported as f64
    };
    eprintln!(
        "{what}: {injected} injected, {found} found, {reported} reported, {correct} correct: precision {:.0} %, recall {:.0} % ({timings})",
        100.0 * precision,
        100.0 * recall,
    );
    assert_eq!(recall, 1.0, "recall");
    assert_eq!(precision, 1.0, "precision");
}

/// Asserts that nothing of severity warning or above is found in the all-healthy first 19
/// minutes from `start_s`.
pub fn assert_healthy_start(src: &BackendSource, start_s: i64) {
    let (healthy, _) = advise_window(src, start_s, 19);
    assert!(
        !healthy
            .findings
            .iter()
            .any(|f| f.severity >= Severity::Warning),
        "{:?}",
        healthy.findings
    );
}
