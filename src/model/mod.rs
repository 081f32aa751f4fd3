//! What samples are before they reach the store, shared by every way in (scraping, the GPU
//! sampler, import, the simulator, remote write): the exposition formats' parser
//! ([`exposition`]), relabelling ([`relabel`]), the destination of ingested samples
//! ([`sink`]) and wall-clock timestamps ([`time`]).

pub mod exposition;
pub mod relabel;
pub mod sink;
pub mod time;
