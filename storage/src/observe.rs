//! What the store reports about its own work to whoever opened it, without knowing how that
//! is shown (logs go through `tracing`; HTTP and metrics live in the binary): the WAL replay's
//! progress, readable while [`crate::Db::open`] still runs, and timed events (compactions,
//! WAL fsyncs) passed to an [`EventHook`].

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The WAL replay's progress in segment numbers, as Prometheus' `/api/v1/status/walreplay`
/// shows it: the first and last segment to read and the one being read. Shared between
/// [`crate::Db::open`] (which fills it in) and readers on other threads.
#[derive(Debug, Default)]
pub struct ReplayProgress {
    min: AtomicI64,
    max: AtomicI64,
    current: AtomicI64,
    done: AtomicBool,
}

impl ReplayProgress {
    /// A progress record with nothing read yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// `(min, max, current)` segment numbers.
    pub fn get(&self) -> (i64, i64, i64) {
        (
            self.min.load(Ordering::Relaxed),
            self.max.load(Ordering::Relaxed),
            self.current.load(Ordering::Relaxed),
        )
    }

    /// Whether the replay has ended.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    pub(crate) fn start(&self, min: i64, max: i64) {
        self.min.store(min, Ordering::Relaxed);
        self.max.store(max, Ordering::Relaxed);
        self.current.store(min, Ordering::Relaxed);
    }

    pub(crate) fn set_current(&self, seg: i64) {
        self.current.store(seg, Ordering::Relaxed);
    }

    pub(crate) fn finish(&self) {
        let max = self.max.load(Ordering::Relaxed);
        self.current.store(max, Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }
}

/// A timed piece of the store's work.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Blocks merged into one (`ok: false`: the merge failed).
    Compaction {
        /// How long the merge took.
        duration: Duration,
        /// Whether it succeeded.
        ok: bool,
    },
    /// One fsync of the WAL.
    WalFsync {
        /// How long the fsync took.
        duration: Duration,
    },
}

/// The callback that receives [`Event`]s (on the store's threads: keep it short).
#[derive(Clone)]
pub struct EventHook(Arc<dyn Fn(&Event) + Send + Sync>);

impl EventHook {
    /// A hook calling `f` for every event.
    pub fn new(f: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        EventHook(Arc::new(f))
    }

    pub(crate) fn emit(&self, e: &Event) {
        (self.0)(e)
    }
}

impl fmt::Debug for EventHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventHook")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_ends_at_max() {
        let p = ReplayProgress::new();
        p.start(3, 7);
        assert_eq!(p.get(), (3, 7, 3));
        p.set_current(5);
        assert!(!p.is_done());
        p.finish();
        assert_eq!(p.get(), (3, 7, 7));
        assert!(p.is_done());
    }
}
