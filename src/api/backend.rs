//! The real [`ApiBackend`]: inferdb's PromQL engine over an [`inferdb_storage::Db`].

use std::sync::Arc;

use inferdb_query::ast::ValueType;
use inferdb_query::{Engine, EngineOptions, QueryError, Value};
use inferdb_storage::{Db, Labels, MatchOp, Matcher};

use super::error::{ApiError, ErrorType};
use super::{
    ApiBackend, ExprType, MatrixSeries, QueryOptions, QueryOutput, QueryValue, TsdbStatus,
    VectorSample,
};

/// The PromQL engine and the label index of a [`Db`], behind the HTTP API.
pub struct DbBackend {
    db: Arc<Db>,
    engine_opts: EngineOptions,
}

impl DbBackend {
    /// A backend over `db`; per-request limits are applied on top of `engine_opts`.
    pub fn new(db: Arc<Db>, engine_opts: EngineOptions) -> Self {
        DbBackend { db, engine_opts }
    }

    /// The store.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    fn engine(&self, opts: &QueryOptions) -> Engine {
        let mut eo = self.engine_opts.clone();
        eo.timeout = opts.timeout;
        if opts.max_samples > 0 {
            eo.max_samples = opts.max_samples;
        }
        if let Some(l) = opts.lookback_delta_ms {
            eo.lookback_delta_ms = l;
        }
        Engine::new(eo)
    }

    fn run(
        &self,
        query: &str,
        start: i64,
        end: i64,
        step: i64,
        opts: &QueryOptions,
    ) -> Result<QueryOutput, ApiError> {
        let expr =
            inferdb_query::parser::parse(query).map_err(|e| ApiError::invalid_param("query", e))?;
        let res = self
            .engine(opts)
            .run(
                &*self.db,
                &expr,
                query,
                start,
                end,
                step,
                Some(&opts.cancel),
            )
            .map_err(map_query_error)?;
        crate::metrics::observe_query_timings(&res.timings);
        Ok(QueryOutput {
            value: convert_value(res.value),
            warnings: res.warnings,
            infos: res.infos,
        })
    }
}

/// Maps engine errors to Prometheus' error types.
pub fn map_query_error(e: QueryError) -> ApiError {
    let typ = match &e {
        QueryError::Parse(_) => ErrorType::BadData,
        QueryError::Eval(_) | QueryError::TooManySamples => ErrorType::Execution,
        QueryError::Timeout => ErrorType::Timeout,
        QueryError::Canceled => ErrorType::Canceled,
        QueryError::Storage(_) => ErrorType::Internal,
    };
    if typ == ErrorType::BadData {
        return ApiError::invalid_param("query", e);
    }
    ApiError::new(typ, e.to_string())
}

fn strip_name(l: Labels, drop: bool) -> Labels {
    if drop {
        l.without("__name__")
    } else {
        l
    }
}

/// Converts an engine value into the API's value.
pub fn convert_value(v: Value) -> QueryValue {
    match v {
        Value::Scalar { t, v } => QueryValue::Scalar { t, v },
        Value::String { t, v } => QueryValue::String { t, s: v },
        Value::Vector(vec) => QueryValue::Vector(
            vec.into_iter()
                .map(|s| VectorSample {
                    labels: strip_name(s.metric, s.drop_name),
                    t: s.t,
                    v: s.f,
                })
                .collect(),
        ),
        Value::Matrix(m) => QueryValue::Matrix(
            m.into_iter()
                .filter(|s| !s.floats.is_empty())
                .map(|s| MatrixSeries {
                    labels: strip_name(s.metric, s.drop_name),
                    samples: s.floats.into_iter().map(|p| (p.t, p.f)).collect(),
                })
                .collect(),
        ),
    }
}

fn storage_err(e: inferdb_storage::Error) -> ApiError {
    ApiError::internal(e.to_string())
}

impl ApiBackend for DbBackend {
    fn check_query(&self, query: &str) -> Result<ExprType, String> {
        let e = inferdb_query::parser::parse(query).map_err(|e| e.to_string())?;
        Ok(match e.value_type() {
            ValueType::Scalar => ExprType::Scalar,
            ValueType::String => ExprType::String,
            ValueType::Vector => ExprType::Vector,
            ValueType::Matrix => ExprType::Matrix,
        })
    }

    fn format_query(&self, query: &str) -> Result<String, String> {
        inferdb_query::parser::parse(query)
            .map(|e| e.to_string())
            .map_err(|e| e.to_string())
    }

    fn parse_selector(&self, selector: &str) -> Result<Vec<Matcher>, String> {
        inferdb_query::parser::parse_matchers(selector).map_err(|e| e.to_string())
    }

    fn instant_query(
        &self,
        query: &str,
        t_ms: i64,
        opts: &QueryOptions,
    ) -> Result<QueryOutput, ApiError> {
        self.run(query, t_ms, t_ms, 0, opts)
    }

    fn range_query(
        &self,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
        opts: &QueryOptions,
    ) -> Result<QueryOutput, ApiError> {
        self.run(query, start_ms, end_ms, step_ms.max(1), opts)
    }

    fn series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Labels>, ApiError> {
        self.db
            .querier(start_ms, end_ms)
            .and_then(|q| q.series(matchers))
            .map_err(storage_err)
    }

    fn label_names(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, ApiError> {
        self.db
            .querier(start_ms, end_ms)
            .and_then(|q| q.label_names(matchers))
            .map_err(storage_err)
    }

    fn label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, ApiError> {
        self.db
            .querier(start_ms, end_ms)
            .and_then(|q| q.label_values(name, matchers))
            .map_err(storage_err)
    }

    fn latest_samples(
        &self,
        sets: &[Vec<Matcher>],
        mint: i64,
        maxt: i64,
    ) -> Result<Vec<VectorSample>, ApiError> {
        let q = self.db.querier(mint, maxt).map_err(storage_err)?;
        let mut out: std::collections::BTreeMap<Labels, (i64, f64)> = Default::default();
        let (mut ts, mut vs) = (Vec::new(), Vec::new());
        for ms in sets {
            for s in q.select(ms).map_err(storage_err)? {
                if out.contains_key(s.labels()) {
                    continue;
                }
                ts.clear();
                vs.clear();
                s.decode_into(&mut ts, &mut vs).map_err(storage_err)?;
                if let (Some(&t), Some(&v)) = (ts.last(), vs.last()) {
                    out.insert(s.labels().clone(), (t, v));
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|(labels, (t, v))| VectorSample { labels, t, v })
            .collect())
    }

    fn delete_series(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<(), ApiError> {
        self.db.delete(matchers, mint, maxt).map_err(storage_err)
    }

    fn snapshot(&self, skip_head: bool) -> Result<String, ApiError> {
        use std::hash::{BuildHasher, Hasher};
        // Prometheus' name: UTC time, then 63 random bits in 16 hex digits
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        let name = format!(
            "{}-{:016x}",
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
            h.finish() >> 1
        );
        let dir = self.db.dir().join("snapshots").join(&name);
        self.db
            .snapshot(&dir, !skip_head)
            .map_err(|e| ApiError::internal(format!("create snapshot: {e}")))?;
        Ok(name)
    }

    fn clean_tombstones(&self) -> Result<(), ApiError> {
        self.db.clean_tombstones().map(|_| ()).map_err(storage_err)
    }

    fn tsdb_status(&self, limit: usize) -> Result<TsdbStatus, ApiError> {
        let st = self.db.stats();
        let all = Matcher::new(MatchOp::RegexMatch, "__name__", ".+")
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let (mint, maxt) = (st.head_min_time, st.head_max_time);
        let series = if st.head_series > 0 && mint <= maxt {
            self.series(&[all], mint, maxt)?
        } else {
            Vec::new()
        };
        let mut out = TsdbStatus::from_series(&series, limit);
        out.num_series = st.head_series;
        out.min_time = mint;
        out.max_time = maxt;
        Ok(out)
    }
}
