//! The command line: `inferdb serve`, `inferdb query`, `inferdb simulate`, `inferdb tsdb`.

pub mod export;
pub mod import;
pub mod query;
pub mod serve;
pub mod simulate;
pub mod tsdb;
