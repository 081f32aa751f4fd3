//! The command line: `inferdb serve`, `inferdb query`, `inferdb simulate`, `inferdb tsdb`.
pub mod query;
pub mod serve;
pub mod simulate;
