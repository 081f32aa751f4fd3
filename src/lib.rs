//! inferdb: an embedded time-series database and PromQL engine for LLM-inference metrics.
//!
//! The root crate holds the ingest model shared by every way samples come in ([`model`]: the
//! exposition parser, relabelling, the sample sink), the configuration file ([`config`]), the
//! scraper ([`scrape`]), the built-in vLLM simulator ([`sim`]), the GPU sampler ([`gpu`]),
//! the HTTP API and the command line.

#![deny(missing_docs)]
#![deny(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod build_info;
pub mod cli;
pub mod config;
pub mod discovery;
pub mod export;
pub mod gpu;
pub mod import;
pub mod insight;
pub mod logging;
pub mod metric_aliases;
pub mod metrics;
pub mod model;
pub mod notifier;
pub mod remote;
pub mod rules;
pub mod scrape;
pub mod sim;
pub mod template;
pub mod ui;
