//! Scraping: the exposition parser, configuration, relabelling, scrape loops.
//!
//! Entry points: [`run_scraper`] (or [`manager::run_with_reload`] for reloads) runs the
//! scrape loops of a [`config::Config`] into any [`SampleSink`] (`inferdb_storage::Db`
//! implements it; [`MemorySink`] is for tests).

mod cache;
pub mod config;
pub mod exposition;
mod http;
pub mod manager;
pub mod relabel;
pub mod sink;
pub mod target;

pub use config::Config;
pub use manager::{run_scraper, ScrapeManager};
pub use sink::{MemorySink, SampleSink};
