//! Memory-mapped files for the head's full chunks, so that they do not stay on the heap.
//!
//! Full chunks are copied into fixed-size, memory-mapped segment files under
//! `<data>/chunks_head/` and read back through the mapping. The files only relieve memory:
//! the WAL (and its checkpoint) hold the same data, so they are deleted at open and close. A
//! segment is unmapped and its file removed once no chunk in it is referenced any more.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::MmapRaw;
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Size of one segment file.
pub const SEGMENT_BYTES: usize = 32 << 20;

/// One mapped segment. Bytes below the writer's offset are immutable once written.
pub struct ArenaSegment {
    map: MmapRaw,
    path: PathBuf,
}

impl Drop for ArenaSegment {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

impl ArenaSegment {
    /// The bytes at `[off, off + len)`, which must have been written by [`ChunkArena::add`].
    fn slice(&self, off: u32, len: u32) -> &[u8] {
        let (off, len) = (off as usize, len as usize);
        assert!(off + len <= self.map.len());
        // SAFETY: the range is inside the mapping, was fully written before the chunk
        // reference was handed out (under the arena mutex, which orders the writes before
        // any reader gets the reference) and is never written again; the mapping lives as
        // long as `self`.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off), len) }
    }
}

/// A chunk stored in an arena segment.
#[derive(Clone)]
pub struct ArenaChunk {
    seg: Arc<ArenaSegment>,
    off: u32,
    len: u32,
}

impl ArenaChunk {
    /// The encoded chunk.
    pub fn bytes(&self) -> &[u8] {
        self.seg.slice(self.off, self.len)
    }
}

struct Writer {
    cur: Option<Arc<ArenaSegment>>,
    used: usize,
    next_id: u64,
}

/// Appends chunks to mapped segment files.
pub struct ChunkArena {
    dir: PathBuf,
    w: Mutex<Writer>,
}

impl ChunkArena {
    /// Creates (emptying) the folder `dir`.
    pub fn create(dir: &Path) -> Result<ChunkArena> {
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        Ok(ChunkArena {
            dir: dir.to_path_buf(),
            w: Mutex::new(Writer {
                cur: None,
                used: 0,
                next_id: 1,
            }),
        })
    }

    fn new_segment(&self, w: &mut Writer) -> Result<Arc<ArenaSegment>> {
        let path = self.dir.join(format!("{:08}", w.next_id));
        w.next_id += 1;
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        f.set_len(SEGMENT_BYTES as u64)
            .map_err(|e| Error::io(&path, e))?;
        let map = MmapRaw::map_raw(&f).map_err(|e| Error::io(&path, e))?;
        Ok(Arc::new(ArenaSegment { map, path }))
    }

    /// Copies `chunk` into the arena.
    pub fn add(&self, chunk: &[u8]) -> Result<ArenaChunk> {
        let len = chunk.len();
        if len > SEGMENT_BYTES {
            return Err(Error::io(
                &self.dir,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "chunk too large"),
            ));
        }
        let mut w = self.w.lock();
        if w.cur.is_none() || w.used + len > SEGMENT_BYTES {
            let seg = self.new_segment(&mut w)?;
            w.cur = Some(seg);
            w.used = 0;
        }
        let off = w.used;
        let seg = w.cur.clone().ok_or_else(|| Error::Closed)?;
        // SAFETY: `[off, off + len)` lies inside the mapping (checked above), no reader has
        // a reference into it yet (it is past every handed-out chunk), and the arena mutex
        // serializes writers.
        unsafe {
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), seg.map.as_mut_ptr().add(off), len);
        }
        w.used += len;
        Ok(ArenaChunk {
            seg,
            off: off as u32,
            len: len as u32,
        })
    }

    /// Removes the folder (call when the head is gone).
    pub fn remove(&self) {
        let mut w = self.w.lock();
        w.cur = None;
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_frees() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("chunks_head");
        let a = ChunkArena::create(&dir).unwrap();
        let c1 = a.add(b"hello").unwrap();
        let c2 = a.add(&[7u8; 1000]).unwrap();
        assert_eq!(c1.bytes(), b"hello");
        assert_eq!(c2.bytes(), &[7u8; 1000][..]);
        let big = vec![1u8; SEGMENT_BYTES - 10];
        let c3 = a.add(&big).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2);
        drop((c1, c2));
        assert_eq!(c3.bytes().len(), SEGMENT_BYTES - 10);
        // the first segment is released with its last chunk
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        drop(c3);
        a.remove();
        assert!(!dir.exists());
    }
}
