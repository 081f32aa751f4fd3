//! The public query API: [`Engine`] runs PromQL instant and range queries against any
//! [`Queryable`] storage.
//!
//! ```
//! use inferdb_query::storage::MemStorage;
//! use inferdb_query::{Engine, EngineOptions, Value};
//! use inferdb_storage::Labels;
//!
//! let mut db = MemStorage::new();
//! let l = Labels::from_pairs([("__name__", "requests_total"), ("model", "llama")]);
//! for i in 0..10 {
//!     db.add(&l, i * 15_000, (i * 30) as f64);
//! }
//! let engine = Engine::new(EngineOptions::default());
//! let res = engine.instant_expr(&db, &example_ast(), 135_000).unwrap();
//! # fn example_ast() -> inferdb_query::ast::Expr {
//! #     use inferdb_query::ast::*;
//! #     let sel = VectorSelector { name: Some("requests_total".into()),
//! #         matchers: vec![inferdb_storage::Matcher::equal("__name__", "requests_total")],
//! #         offset: None, at: None };
//! #     Expr::new(ExprKind::Call(Call { func: "rate".into(), args: vec![Expr::new(
//! #         ExprKind::MatrixSelector(MatrixSelector { selector: sel, range: Duration::Millis(60_000) }))] }))
//! # }
//! match res.value {
//!     Value::Vector(v) => assert!((v[0].f - 2.0).abs() < 1e-9),
//!     other => panic!("unexpected {other:?}"),
//! }
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::aliases::MetricAliases;
use crate::ast::{Expr, ValueType};
use crate::eval::Evaluator;
use crate::selection_cache::SelectionCache;
use crate::storage::{Queryable, StorageError};
use crate::value::{Annotations, Value};

/// Engine settings (Prometheus' `--query.*` flags).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// How far back an instant selector looks for a sample (default 5 m).
    pub lookback_delta_ms: i64,
    /// The most samples a query may hold at once (default 50,000,000).
    pub max_samples: usize,
    /// Per-query time limit (default 2 m).
    pub timeout: Duration,
    /// Resolution of subqueries written without a step (default 1 m, Prometheus' global
    /// evaluation interval).
    pub default_subquery_step_ms: i64,
    /// Metric renames bridged at query time (a selector of a new name also reads the old
    /// names' series); `None` answers exactly as Prometheus does.
    pub metric_aliases: Option<Arc<MetricAliases>>,
    /// How range queries are evaluated (column-wise where possible by default).
    pub range_evaluation: RangeEvaluation,
}

/// How the engine evaluates a range query. Both give bit-identical results (promqltest runs
/// through both); the choice exists to compare them and to measure one against the other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RangeEvaluation {
    /// Column-wise over blocks of steps where the expression allows it (range functions over
    /// selectors, simple aggregations, one-to-one binary operators, `histogram_quantile`),
    /// step by step otherwise.
    #[default]
    Auto,
    /// Every range query step by step, as an instant query at each step.
    StepWise,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            lookback_delta_ms: 5 * 60 * 1000,
            max_samples: 50_000_000,
            timeout: Duration::from_secs(120),
            default_subquery_step_ms: 60_000,
            metric_aliases: None,
            range_evaluation: RangeEvaluation::Auto,
        }
    }
}

/// Why a query failed. `Display` gives Prometheus' error texts.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The query text does not parse.
    #[error("{0}")]
    Parse(String),
    /// Evaluation failed (e.g. `vector cannot contain metrics with the same labelset`).
    #[error("{0}")]
    Eval(String),
    /// The sample limit was hit.
    #[error("query processing would load too many samples into memory in query execution")]
    TooManySamples,
    /// The timeout was hit.
    #[error("query timed out in expression evaluation")]
    Timeout,
    /// The query was canceled (e.g. the client went away).
    #[error("query was canceled in expression evaluation")]
    Canceled,
    /// The storage failed.
    #[error("expanding series: {0}")]
    Storage(#[from] StorageError),
}

/// A query's result: its value and the annotations Prometheus would return with it.
#[derive(Debug, Clone)]
pub struct QueryResult {
    /// The value.
    pub value: Value,
    /// Warnings, formatted like Prometheus' (`PromQL warning: ... (1:5)`).
    pub warnings: Vec<String>,
    /// Infos, formatted like Prometheus'.
    pub infos: Vec<String>,
    /// The raw annotations.
    pub annotations: Annotations,
    /// Where the time went, in Prometheus' slices.
    pub timings: QueryTimings,
}

/// How long each part of a query took, as Prometheus' `prometheus_engine_query_duration_seconds`
/// slices it (its `queue_time` is the caller's to measure).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueryTimings {
    /// Loading the selected series from storage (`prepare_time`).
    pub prepare: std::time::Duration,
    /// Evaluating the expression, sorting included (`inner_eval`).
    pub inner_eval: std::time::Duration,
    /// Sorting a range query's series (`result_sort`; zero for instant queries).
    pub result_sort: std::time::Duration,
}

/// A handle to cancel running queries; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A fresh, not canceled token.
    pub fn new() -> Self {
        Self::default()
    }
    /// Cancels every query running with this token.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    /// Whether `cancel` was called.
    pub fn is_canceled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The PromQL engine.
#[derive(Debug, Clone, Default)]
pub struct Engine {
    opts: EngineOptions,
}

impl Engine {
    /// An engine with the given options.
    pub fn new(opts: EngineOptions) -> Self {
        Engine { opts }
    }

    /// The engine's options.
    pub fn options(&self) -> &EngineOptions {
        &self.opts
    }

    /// Runs an instant query at `t_ms`.
    pub fn instant<S: Queryable + ?Sized>(
        &self,
        storage: &S,
        expr: &str,
        t_ms: i64,
    ) -> Result<QueryResult, QueryError> {
        let ast = parse(expr)?;
        self.run(storage, &ast, expr, t_ms, t_ms, 0, None)
    }

    /// Runs a range query over `[start_ms, end_ms]` every `step_ms`.
    pub fn range<S: Queryable + ?Sized>(
        &self,
        storage: &S,
        expr: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    ) -> Result<QueryResult, QueryError> {
        let ast = parse(expr)?;
        check_step(step_ms)?;
        self.run(storage, &ast, expr, start_ms, end_ms, step_ms, None)
    }

    /// Runs an instant query of an already parsed expression.
    pub fn instant_expr<S: Queryable + ?Sized>(
        &self,
        storage: &S,
        expr: &Expr,
        t_ms: i64,
    ) -> Result<QueryResult, QueryError> {
        self.run(storage, expr, "", t_ms, t_ms, 0, None)
    }

    /// Runs an instant query of an already parsed expression, taking selections from
    /// `cache` and leaving the ones it reads there for the next query at the same time (see
    /// [`SelectionCache`]: a rule group's queries).
    pub fn instant_cached<S: Queryable + ?Sized>(
        &self,
        storage: &S,
        expr: &Expr,
        t_ms: i64,
        cache: &mut SelectionCache,
    ) -> Result<QueryResult, QueryError> {
        self.run_inner(storage, expr, "", t_ms, t_ms, 0, None, Some(cache))
    }

    /// Runs a range query of an already parsed expression.
    pub fn range_expr<S: Queryable + ?Sized>(
        &self,
        storage: &S,
        expr: &Expr,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    ) -> Result<QueryResult, QueryError> {
        check_step(step_ms)?;
        self.run(storage, expr, "", start_ms, end_ms, step_ms, None)
    }

    /// The general form: an instant query when `step_ms` is 0 (and `start_ms == end_ms`),
    /// a range query otherwise; `query_text` is used to place annotations; `cancel` stops the
    /// query early.
    #[allow(clippy::too_many_arguments)]
    pub fn run<S: Queryable + ?Sized>(
        &self,
        storage: &S,
        expr: &Expr,
        query_text: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
        cancel: Option<&CancelToken>,
    ) -> Result<QueryResult, QueryError> {
        self.run_inner(
            storage, expr, query_text, start_ms, end_ms, step_ms, cancel, None,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn run_inner<S: Queryable + ?Sized>(
        &self,
        storage: &S,
        expr: &Expr,
        query_text: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
        cancel: Option<&CancelToken>,
        selections: Option<&mut SelectionCache>,
    ) -> Result<QueryResult, QueryError> {
        let is_range = step_ms > 0;
        if is_range {
            if end_ms < start_ms {
                return Err(QueryError::Eval(
                    "invalid query: end timestamp must not be before start time".into(),
                ));
            }
            match expr.value_type() {
                ValueType::Scalar | ValueType::Vector => {}
                t => {
                    return Err(QueryError::Eval(format!(
                        "invalid expression type \"{t}\" for range query, must be Scalar or instant Vector"
                    )))
                }
            }
        }
        let deadline = Instant::now().checked_add(self.opts.timeout);
        let mut ev = Evaluator::new(
            &self.opts,
            start_ms,
            end_ms,
            if is_range { step_ms } else { 0 },
            deadline,
            cancel.map(|c| c.0.as_ref()),
        );
        ev.selections = selections;
        let t0 = Instant::now();
        ev.load(storage, expr)?;
        let prepare = t0.elapsed();
        let t1 = Instant::now();
        let value = if is_range {
            ev.run_range(expr)?
        } else {
            ev.run_instant(expr)?
        };
        let timings = QueryTimings {
            prepare,
            inner_eval: t1.elapsed(),
            result_sort: ev.sort_time,
        };
        let annotations = ev.take_annotations();
        Ok(QueryResult {
            value,
            warnings: annotations.warnings(query_text),
            infos: annotations.infos(query_text),
            annotations,
            timings,
        })
    }
}

fn check_step(step_ms: i64) -> Result<(), QueryError> {
    if step_ms <= 0 {
        return Err(QueryError::Eval(
            "zero or negative query resolution step widths are not accepted. Try a positive integer"
                .into(),
        ));
    }
    Ok(())
}

fn parse(expr: &str) -> Result<Expr, QueryError> {
    crate::parser::parse(expr).map_err(|e| QueryError::Parse(e.to_string()))
}
