//! The command line: `inferdb serve`, `inferdb query`, `inferdb simulate`, `inferdb tsdb`, `inferdb rules`.

pub mod export;
pub mod import;
pub mod query;
pub mod rules;
pub mod serve;
pub mod simulate;
pub mod tsdb;
