//! inferdb's PromQL engine: a nom parser producing a typed AST, a pretty-printer, and an
//! evaluator with Prometheus 3 semantics over a small storage trait.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]

pub mod aliases;
pub mod ast;
pub mod engine;
pub mod eval;
pub mod functions_meta;
pub mod go_format;
pub mod parser;
pub mod printer;
pub mod selection_cache;
pub mod stack;
pub mod storage;
pub mod value;

pub use aliases::MetricAliases;
pub use engine::{Engine, EngineOptions, QueryError, QueryResult, QueryTimings, RangeEvaluation};
pub use parser::parse;
pub use selection_cache::SelectionCache;
pub use value::Value;
