//! The real [`ApiBackend`]: inferdb's PromQL engine over an [`inferdb_storage::Db`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use inferdb_query::ast::{Expr, ValueType};
use inferdb_query::value::Annotations;
use inferdb_query::{Engine, EngineOptions, QueryError, Value};
use inferdb_storage::{Db, Labels, MatchOp, Matcher};

use super::error::{ApiError, ErrorType};
use super::result_cache::{self, ResultCache};
use super::{
    ApiBackend, ExprType, MatrixSeries, QueryOptions, QueryOutput, QueryValue, TsdbStatus,
    VectorSample,
};

/// The PromQL engine and the label index of a [`Db`], behind the HTTP API.
pub struct DbBackend {
    db: Arc<Db>,
    engine_opts: EngineOptions,
    cache: Option<Arc<ResultCache>>,
    /// The default subquery step, `global.evaluation_interval` as the configuration last
    /// loaded set it (Prometheus' `SetDefaultEvaluationInterval`); `engine_opts`' when unset.
    subquery_step: Option<Arc<AtomicI64>>,
    /// Parsed queries by text: each request parses its query twice (type check, then
    /// evaluation) and dashboards send the same texts again and again; parsing compiles the
    /// regex matchers, which is most of a small query's fixed cost.
    parsed: parking_lot::Mutex<std::collections::HashMap<String, Arc<Expr>>>,
}

/// The most parsed queries [`DbBackend`] keeps (all are dropped when full).
const MAX_PARSED: usize = 1024;
/// Queries longer than this are not kept parsed.
const MAX_PARSED_QUERY_BYTES: usize = 16 << 10;

impl DbBackend {
    /// A backend over `db`; per-request limits are applied on top of `engine_opts`.
    pub fn new(db: Arc<Db>, engine_opts: EngineOptions) -> Self {
        DbBackend {
            db,
            engine_opts,
            cache: None,
            subquery_step: None,
            parsed: Default::default(),
        }
    }

    /// `query` parsed (from the memo of recent queries when it is there).
    fn parse(&self, query: &str) -> Result<Arc<Expr>, inferdb_query::parser::ParseError> {
        if let Some(e) = self.parsed.lock().get(query) {
            return Ok(e.clone());
        }
        let e = Arc::new(inferdb_query::parser::parse(query)?);
        if query.len() <= MAX_PARSED_QUERY_BYTES {
            let mut m = self.parsed.lock();
            if m.len() >= MAX_PARSED {
                m.clear();
            }
            m.insert(query.to_string(), e.clone());
        }
        Ok(e)
    }

    /// Keeps range-query results in `cache` (see [`ResultCache`]); a cache of size 0 is the
    /// same as none. The cache must be this store's only one: it consumes
    /// [`Db::take_oldest_write`].
    pub fn with_result_cache(mut self, cache: Arc<ResultCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Takes the default subquery step (milliseconds) from `step`, which the configuration's
    /// loads update; the owner clears the result cache when it changes.
    pub fn with_default_subquery_step(mut self, step: Arc<AtomicI64>) -> Self {
        self.subquery_step = Some(step);
        self
    }

    /// The newest sample time of the store, if it holds any.
    fn newest_sample(&self) -> Option<i64> {
        let h = self.db.head().max_time();
        if h != i64::MIN {
            return Some(h);
        }
        self.db
            .open_blocks()
            .iter()
            .map(|b| b.meta().max_time - 1)
            .max()
    }

    /// A range query through the result cache: the steps it holds from `start` on, then the
    /// rest evaluated; the steps old enough to be final are kept for the next request.
    fn cached_range(
        &self,
        cache: &ResultCache,
        query: &str,
        start: i64,
        end: i64,
        step: i64,
        opts: &QueryOptions,
    ) -> Result<QueryOutput, ApiError> {
        cache.invalidate_from(self.db.take_oldest_write());
        let epoch = cache.epoch();
        let expr = self
            .parse(query)
            .map_err(|e| ApiError::invalid_param("query", e))?;
        if !result_cache::cacheable(&expr) {
            return self.run_expr(&expr, query, start, end, step, opts);
        }
        let lookback = opts
            .lookback_delta_ms
            .unwrap_or(self.engine_opts.lookback_delta_ms);
        let key = result_cache::Key::new(query, start, step, lookback);
        let until = result_cache::cacheable_until(
            crate::model::time::now_ms(),
            self.newest_sample(),
            lookback,
        );
        // the last step of the request that may be kept
        let keep_last = if until < start {
            start - step
        } else {
            (start + (until - start) / step * step).min(end)
        };
        let (cached, mut annos, from) = match cache.lookup(&key, start, end) {
            Some(c) if c.last >= end => {
                return Ok(QueryOutput {
                    value: QueryValue::Matrix(c.series),
                    warnings: c.annos.warnings(query),
                    infos: c.annos.infos(query),
                })
            }
            Some(c) => (Some(c.series), c.annos, c.last + step),
            None => (None, Annotations::new(), start),
        };
        let (out, fresh_annos) = self.run_raw(&expr, query, from, end, step, opts)?;
        let QueryValue::Matrix(fresh) = out.value else {
            return Ok(out);
        };
        let series = match cached {
            Some(c) => result_cache::merge(c, fresh),
            None => fresh,
        };
        annos.merge(fresh_annos);
        cache.store(epoch, key, (start, keep_last, end), &series, &annos);
        Ok(QueryOutput {
            value: QueryValue::Matrix(series),
            warnings: annos.warnings(query),
            infos: annos.infos(query),
        })
    }

    /// The store.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    fn engine(&self, opts: &QueryOptions) -> Engine {
        let mut eo = self.engine_opts.clone();
        if let Some(step) = &self.subquery_step {
            eo.default_subquery_step_ms = step.load(Ordering::Relaxed).max(1);
        }
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
        let expr = self
            .parse(query)
            .map_err(|e| ApiError::invalid_param("query", e))?;
        self.run_expr(&expr, query, start, end, step, opts)
    }

    fn run_expr(
        &self,
        expr: &inferdb_query::ast::Expr,
        query: &str,
        start: i64,
        end: i64,
        step: i64,
        opts: &QueryOptions,
    ) -> Result<QueryOutput, ApiError> {
        self.run_raw(expr, query, start, end, step, opts)
            .map(|(out, _)| out)
    }

    /// [`DbBackend::run_expr`] with the engine's annotations as they are before formatting.
    fn run_raw(
        &self,
        expr: &inferdb_query::ast::Expr,
        query: &str,
        start: i64,
        end: i64,
        step: i64,
        opts: &QueryOptions,
    ) -> Result<(QueryOutput, Annotations), ApiError> {
        let res = self
            .engine(opts)
            .run(&*self.db, expr, query, start, end, step, Some(&opts.cancel))
            .map_err(map_query_error)?;
        crate::metrics::observe_query_timings(&res.timings);
        Ok((
            QueryOutput {
                value: convert_value(res.value),
                warnings: res.warnings,
                infos: res.infos,
            },
            res.annotations,
        ))
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
        let e = self.parse(query).map_err(|e| e.to_string())?;
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
        let step = step_ms.max(1);
        match &self.cache {
            Some(c) if c.enabled() => self.cached_range(c, query, start_ms, end_ms, step, opts),
            _ => self.run(query, start_ms, end_ms, step, opts),
        }
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
        let r = self.db.delete(matchers, mint, maxt).map_err(storage_err);
        if let Some(c) = &self.cache {
            c.clear();
        }
        r
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
