//! What samples are before they reach the store, shared by every way in (scraping, the GPU
//! sampler, import, the simulator, remote write): the exposition formats' parser
//! ([`exposition`]), relabelling ([`relabel`]), the destination of ingested samples
//! ([`sink`]), the series cache that lets the scraper and import skip parsing a series they
//! have read before (`series_cache`) and wall-clock timestamps ([`time`]).

pub mod exposition;
pub mod relabel;
pub(crate) mod series_cache;
pub mod sink;
pub mod time;
