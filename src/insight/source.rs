//! Where the detectors' PromQL goes: inferdb's engine (a data folder, or the serving
//! process' own store) or any Prometheus-compatible HTTP API (`--url`).

use std::sync::Arc;
use std::time::Duration;

use super::InsightError;
use crate::api::{ApiBackend, MatrixSeries, QueryOptions, QueryValue};
use crate::cli::query::{run_remote, Request};

/// Runs PromQL range queries.
pub trait PromSource: Sync {
    /// `q` evaluated at `start + k*step` up to `end` (ms): the series of the matrix.
    fn range(
        &self,
        q: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Vec<MatrixSeries>, InsightError>;
    /// `q` evaluated at `t` (ms): the series of the vector, each with one sample.
    fn instant(&self, q: &str, t: i64) -> Result<Vec<MatrixSeries>, InsightError> {
        self.range(q, t, t, 1000)
    }
}

fn values(q: &str, v: QueryValue) -> Result<Vec<MatrixSeries>, InsightError> {
    match v {
        QueryValue::Matrix(m) => Ok(m),
        QueryValue::Vector(v) => Ok(v
            .into_iter()
            .map(|s| MatrixSeries {
                labels: s.labels,
                samples: vec![(s.t, s.v)],
            })
            .collect()),
        other => Err(InsightError::Query {
            query: q.to_string(),
            msg: format!("expected a range vector, got {other:?}"),
        }),
    }
}

/// The error of query `q` failing with `e`.
fn query_error(q: &str, e: impl std::fmt::Display) -> InsightError {
    InsightError::Query {
        query: q.to_string(),
        msg: e.to_string(),
    }
}

/// An [`ApiBackend`] (the engine over a store).
pub struct BackendSource {
    /// The backend.
    pub backend: Arc<dyn ApiBackend>,
    /// Per-query timeout.
    pub timeout: Duration,
}

impl PromSource for BackendSource {
    fn range(
        &self,
        q: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Vec<MatrixSeries>, InsightError> {
        let opts = QueryOptions::with_timeout(self.timeout);
        let out = self
            .backend
            .range_query(q, start, end, step, &opts)
            .map_err(|e| query_error(q, e))?;
        values(q, out.value)
    }
}

/// A Prometheus-compatible HTTP API at a base URL.
pub struct RemoteSource {
    /// Base URL (`http://localhost:9090`).
    pub base: String,
    /// Per-query timeout.
    pub timeout: Duration,
}

impl PromSource for RemoteSource {
    fn range(
        &self,
        q: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Vec<MatrixSeries>, InsightError> {
        let req = Request::Range {
            expr: q.to_string(),
            start,
            end,
            step,
        };
        let out = run_remote(&self.base, &req, self.timeout).map_err(|e| query_error(q, e))?;
        values(q, out.value)
    }
}
