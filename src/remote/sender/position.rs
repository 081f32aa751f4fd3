//! The persisted read position of one remote-write queue: `<data>/remote_write/<name>/position.json`.
//!
//! Series are sharded by label hash and each shard sends in WAL order, so "what the remote has
//! acknowledged" is one WAL position per shard: every sample of that shard before its mark is
//! acknowledged (or dropped for good on a 4xx), none after it. On restart the sender reads the
//! WAL from the lowest mark and skips a sample when it lies before the mark of the shard its
//! series had then, so a Prometheus receiver (which refuses samples older than a series'
//! newest) is not sent what it already has. Written to a temporary file, fsynced and renamed.

use std::io::Write;
use std::path::{Path, PathBuf};

use inferdb_storage::wal::watch::WalPosition;
use serde::{Deserialize, Serialize};

/// A sample's place in the WAL: its record's position and its index in the record.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Pos {
    /// WAL segment.
    pub segment: u32,
    /// Offset of the record in the segment.
    pub offset: u64,
    /// Index of the sample in the record.
    pub index: u32,
}

impl Pos {
    /// The record-level position (where a WAL watcher starts).
    pub fn wal(self) -> WalPosition {
        WalPosition {
            segment: self.segment,
            offset: self.offset,
        }
    }

    /// The first sample of the record at `p`.
    pub fn at(p: WalPosition, index: u32) -> Pos {
        Pos {
            segment: p.segment,
            offset: p.offset,
            index,
        }
    }
}

/// The file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marks {
    /// Format version (1).
    pub version: u32,
    /// The url the marks were acknowledged by (informational).
    pub url: String,
    /// One mark per shard; a series' shard is `hash % marks.len()`.
    pub shards: Vec<Pos>,
    /// Per shard, the oldest timestamp not acknowledged: when the WAL segments after a mark
    /// were replaced by a checkpoint (a clean shutdown checkpoints the WAL), the samples of
    /// the checkpoint's head chunks from this time on are sent.
    #[serde(default)]
    pub times: Vec<i64>,
}

impl Marks {
    /// Where reading resumes: the lowest mark.
    pub fn start(&self) -> Pos {
        self.shards.iter().copied().min().unwrap_or_default()
    }

    /// Whether a sample at time `t` of a series with label hash `hash`, found in a checkpoint,
    /// is to be sent (not acknowledged before).
    pub fn send_from_checkpoint(&self, hash: u64, t: i64) -> bool {
        if self.times.is_empty() {
            return true;
        }
        t >= self.times[(hash % self.times.len() as u64) as usize]
    }

    /// Whether a sample at `p` of a series with label hash `hash` was already acknowledged.
    pub fn acknowledged(&self, hash: u64, p: Pos) -> bool {
        if self.shards.is_empty() {
            return false;
        }
        p < self.shards[(hash % self.shards.len() as u64) as usize]
    }
}

/// Reads and writes the position file of one queue.
#[derive(Debug, Clone)]
pub struct PositionFile {
    path: PathBuf,
}

impl PositionFile {
    /// The file of queue `name` under the data folder `data_dir`.
    pub fn new(data_dir: &Path, name: &str) -> Self {
        PositionFile {
            path: data_dir
                .join("remote_write")
                .join(name)
                .join("position.json"),
        }
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved marks; `None` when there are none (or they do not parse: logged).
    pub fn load(&self) -> Option<Marks> {
        let text = std::fs::read(&self.path).ok()?;
        match serde_json::from_slice::<Marks>(&text) {
            Ok(m) if m.version == 1 && !m.shards.is_empty() => Some(m),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e,
                    "unreadable remote-write position; starting from the WAL's beginning");
                None
            }
        }
    }

    /// Saves `m` atomically (tmp file, fsync, rename, fsync of the folder).
    pub fn save(&self, m: &Marks) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = self.path.with_extension("json.tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&serde_json::to_vec(m).map_err(std::io::Error::other)?)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        std::fs::File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(segment: u32, offset: u64, index: u32) -> Pos {
        Pos {
            segment,
            offset,
            index,
        }
    }

    #[test]
    fn saves_and_loads_atomically() {
        let d = tempfile::tempdir().unwrap();
        let f = PositionFile::new(d.path(), "q");
        assert!(f.load().is_none());
        let m = Marks {
            version: 1,
            url: "http://x".into(),
            shards: vec![pos(3, 100, 2), pos(2, 50, 0)],
            times: vec![10, 20],
        };
        assert!(m.send_from_checkpoint(0, 10) && !m.send_from_checkpoint(1, 19));
        f.save(&m).unwrap();
        assert_eq!(f.load(), Some(m.clone()));
        assert_eq!(m.start(), pos(2, 50, 0));
        assert!(!f.path().with_extension("json.tmp").exists());
        std::fs::write(f.path(), b"{garbage").unwrap();
        assert!(f.load().is_none());
    }

    #[test]
    fn acknowledged_is_per_shard() {
        let m = Marks {
            version: 1,
            url: String::new(),
            shards: vec![pos(3, 100, 2), pos(2, 50, 0)],
            times: vec![],
        };
        assert!(m.send_from_checkpoint(1, i64::MIN));
        // shard 0 (even hashes) is acknowledged up to 3/100/2
        assert!(m.acknowledged(0, pos(3, 100, 1)));
        assert!(!m.acknowledged(0, pos(3, 100, 2)));
        // shard 1 only up to 2/50
        assert!(!m.acknowledged(1, pos(3, 0, 0)));
        assert!(m.acknowledged(1, pos(2, 49, 9)));
        assert!(!Marks::default().acknowledged(0, pos(0, 0, 0)));
    }
}
