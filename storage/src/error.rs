//! The storage crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in storage. Corruption errors name the file and offset.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error, with the path it concerned.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A WAL write failed (a full disk, a read-only folder, an I/O error). Nothing of the
    /// commit was stored, and the segment still ends with a whole record; commits are
    /// refused this way until a write succeeds.
    #[error("writing the WAL {path}: {source}; appends are refused until a write succeeds")]
    WalWrite {
        /// The segment.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Bytes on disk or in a buffer that do not decode.
    #[error("corrupt {what} in {path} at offset {offset}: {reason}")]
    Corrupt {
        /// Which structure (chunk, index, WAL record, ...).
        what: &'static str,
        /// The file (empty for in-memory buffers).
        path: PathBuf,
        /// Byte offset where the problem was found.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// A label set that Prometheus would refuse.
    #[error("invalid labels: {0}")]
    InvalidLabels(String),
    /// A regex matcher that does not compile.
    #[error("invalid regex {0}")]
    InvalidRegex(String),
    /// A sample older than the newest one of its series.
    #[error("out of order sample")]
    OutOfOrder,
    /// A different value at an existing timestamp.
    #[error("duplicate sample for timestamp")]
    DuplicateTimestamp,
    /// A sample too old for the head (older than what the head still accepts).
    #[error("out of bounds")]
    OutOfBounds,
    /// The database was closed.
    #[error("database closed")]
    Closed,
    /// A write to a database opened read-only.
    #[error("database is open read-only")]
    ReadOnly,
    /// An appender reference to a series that is not (or no longer) in the head; get a new
    /// reference with the labels.
    #[error("unknown series reference {0}")]
    UnknownSeries(u64),
    /// The head holds as many series as its references can address (2^32 / 16 per shard).
    #[error("too many series in the head")]
    TooManySeries,
    /// Another process holds the database's lock.
    #[error("{0} is locked by another process")]
    Locked(std::path::PathBuf),
}

impl Error {
    /// Wraps an I/O error with the path it concerned.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A corruption error at `offset` of `path`.
    pub fn corrupt(
        what: &'static str,
        path: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corrupt {
            what,
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }
}

/// Storage results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
