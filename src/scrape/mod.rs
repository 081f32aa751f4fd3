//! Scraping: the exposition parser, configuration, relabelling, scrape loops.

pub mod exposition;
