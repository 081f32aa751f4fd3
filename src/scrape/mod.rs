//! Scraping: the exposition parser, configuration, relabelling, scrape loops.

pub mod config;
pub mod exposition;
pub mod relabel;
