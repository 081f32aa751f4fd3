//! Scraping: targets from the configuration, scrape loops, the HTTP client of targets, the
//! reloads.
//!
//! Entry points: [`run_scraper`] (or [`manager::run_with_reload`] for reloads) runs the
//! scrape loops of a [`crate::config::Config`] into any [`crate::model::sink::SampleSink`]
//! (`inferdb_storage::Db` implements it; [`crate::model::sink::MemorySink`] is for tests).

mod http;
pub mod manager;
pub mod target;

pub use manager::{run_scraper, ScrapeManager};
