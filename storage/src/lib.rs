//! inferdb's storage engine.
//!
//! Samples `(i64 ms, f64)` of series identified by [`Labels`] are appended to an in-memory head
//! and a write-ahead log, cut into Gorilla-compressed chunks, persisted as memory-mapped
//! time-partitioned blocks, compacted and expired by retention. This crate knows nothing of
//! PromQL or HTTP.
//!
//! # Example
//!
//! ```
//! use inferdb_storage::{Db, Labels, Matcher, Options};
//!
//! # fn main() -> inferdb_storage::Result<()> {
//! # let tmp = tempfile::tempdir().unwrap();
//! # let dir = tmp.path();
//! let db = Db::open(dir, Options::default())?;
//!
//! // one transaction: append by labels or, faster, by a reference kept across scrapes
//! let mut app = db.appender();
//! let running = Labels::from_pairs([
//!     ("__name__", "vllm:num_requests_running"),
//!     ("model_name", "llama"),
//! ]);
//! let r = app.get_ref(&running)?;
//! app.append_ref(r, 1_000, 3.0)?;
//! app.append_ref(r, 16_000, 4.0)?;
//! app.commit()?; // in the WAL, visible to queriers
//!
//! let q = db.querier(0, 20_000)?;
//! for series in q.select(&[Matcher::equal("model_name", "llama")])? {
//!     let samples: Vec<(i64, f64)> = series.iter().collect();
//!     assert_eq!(samples, vec![(1_000, 3.0), (16_000, 4.0)]);
//!     println!("{}", series.labels());
//! }
//! assert_eq!(q.label_values("model_name", &[])?, vec!["llama".to_string()]);
//! db.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! Opening replays the WAL (a torn tail is truncated and reported in [`Db::open_stats`]); a
//! background thread fsyncs the WAL at [`Options::wal_fsync_interval`], cuts blocks from the
//! head, compacts them and applies retention. [`Options::read_only`] opens beside a running
//! writer for reading.

#![deny(missing_docs)]
#![deny(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::undocumented_unsafe_blocks)]

pub mod block;
pub mod chunk;
#[allow(unsafe_code)] // block chunk segments are memory-mapped
mod chunkfile;
mod compact;
pub mod db;
mod error;
pub mod head;
mod index;
pub mod labels;
pub mod matcher;
pub mod observe;
mod querier;
pub mod re2;
mod retention;
mod tombstones;
pub mod varint;
pub mod wal;

/// Hooks for the fuzz targets (`fuzz/`) and for this crate's own integration tests: each
/// decoder's fuzz body and the internals those tests drive directly. Behind the `fuzzing`
/// feature; not part of the API.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    pub use crate::chunk::fuzz_decode as chunk_decode;
    pub use crate::chunk::fuzz_group as chunk_group;
    pub use crate::chunkfile::split_ref;
    pub use crate::compact::{compact, plan, rewrite};
    pub use crate::index::fuzz_index_read as index_read;
    pub use crate::retention::blocks_to_delete;
    pub use crate::tombstones::fuzz_decode as tombstones_decode;
    pub use crate::tombstones::{Interval, Tombstones, TOMBSTONES_FILE};
    pub use crate::wal::fuzz_decode as wal_decode;
    pub use crate::wal::fuzz_decode_record as wal_record_decode;
}

pub use db::{Appender, BlockBuilder, Db, Options, SeriesRef};
pub use error::{Error, Result};
pub use labels::{Label, Labels};
pub use matcher::{MatchOp, Matcher};
pub use observe::{Event, EventHook, ReplayProgress};
pub use querier::{Querier, Series, SeriesIter};

/// The bit pattern of Prometheus' staleness marker, a NaN that ends a series.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// The staleness marker as an `f64`.
pub fn stale_nan() -> f64 {
    f64::from_bits(STALE_NAN_BITS)
}

/// Whether `v` is the staleness marker (compared by bits: other NaNs are ordinary values).
pub fn is_stale_nan(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// One sample: a timestamp in milliseconds since the Unix epoch and a float value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub t: i64,
    /// The value; compare by bits where NaNs matter.
    pub v: f64,
}
