//! The command line: `inferdb serve`, `inferdb query`, `inferdb simulate`, `inferdb tsdb`.
