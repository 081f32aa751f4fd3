//! Memory-mapped segments for the head's full chunks, so that they do not stay on the heap.
//!
//! Full chunks are copied into fixed-size, memory-mapped segment files under
//! `<data>/chunks_head/` (anonymous mappings for a read-only head) and read back through the
//! mapping. The files only relieve memory: the WAL (and its checkpoint) hold the same data,
//! so they are deleted at open and close. A head chunk addresses its bytes by segment number,
//! offset and length (12 bytes instead of a pointer and a heap block). After a block cut the
//! segments whose chunks are all older than the cut leave the table; a segment is unmapped
//! (and its file removed) when the last querier holding it lets go.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};
use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};

/// Size of one segment.
pub const SEGMENT_BYTES: usize = 32 << 20;

/// One mapped segment. Bytes below the writer's offset are immutable once written.
pub struct ArenaSegment {
    map: MmapRaw,
    path: Option<PathBuf>,
    /// The file behind the mapping (space is reserved in it before each write).
    file: Option<fs::File>,
    max_time: AtomicI64,
}

impl Drop for ArenaSegment {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = fs::remove_file(p);
        }
    }
}

impl ArenaSegment {
    /// The bytes at `[off, off + len)`, which must have been written by [`ChunkArena::add`];
    /// empty when out of range.
    pub fn slice(&self, off: u32, len: u32) -> &[u8] {
        let (off, len) = (off as usize, len as usize);
        if off + len > self.map.len() {
            return &[];
        }
        // SAFETY: the range is inside the mapping, was fully written before its address was
        // handed out (under the writer mutex, which orders the writes before any reader can
        // know the address) and is never written again; the mapping lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off), len) }
    }
}

/// The address of a chunk in the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkAddr {
    /// Segment number.
    pub seg: u32,
    /// Byte offset in the segment.
    pub off: u32,
    /// Length in bytes.
    pub len: u32,
}

struct Writer {
    cur: Option<u32>,
    used: usize,
    /// Bytes of the current segment's file with disk space reserved: a write to a mapped
    /// page without space would kill the process (SIGBUS) on a full disk.
    reserved: usize,
    /// The last reservation failed (logged once per change).
    failing: bool,
}

/// Disk space is reserved in steps of this many bytes.
const RESERVE_STEP: usize = 1 << 20;

/// Appends chunks to mapped segments.
pub struct ChunkArena {
    dir: Option<PathBuf>,
    w: Mutex<Writer>,
    segs: RwLock<Vec<Option<Arc<ArenaSegment>>>>,
}

impl ChunkArena {
    /// An arena of files in `dir` (emptied first).
    pub fn create(dir: &Path) -> Result<ChunkArena> {
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        Ok(Self::with_dir(Some(dir.to_path_buf())))
    }

    /// An arena of anonymous mappings (nothing on disk).
    pub fn anonymous() -> ChunkArena {
        Self::with_dir(None)
    }

    fn with_dir(dir: Option<PathBuf>) -> ChunkArena {
        ChunkArena {
            dir,
            w: Mutex::new(Writer {
                cur: None,
                used: 0,
                reserved: 0,
                failing: false,
            }),
            segs: RwLock::new(Vec::new()),
        }
    }

    fn new_segment(&self, n: usize) -> Result<ArenaSegment> {
        let Some(dir) = &self.dir else {
            let map = MmapOptions::new()
                .len(SEGMENT_BYTES)
                .map_anon()
                .map_err(|e| Error::io("", e))?;
            return Ok(ArenaSegment {
                map: MmapRaw::from(map),
                path: None,
                file: None,
                max_time: AtomicI64::new(i64::MIN),
            });
        };
        let path = dir.join(format!("{n:08}"));
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
        Ok(ArenaSegment {
            map,
            path: Some(path),
            file: Some(f),
            max_time: AtomicI64::new(i64::MIN),
        })
    }

    /// Makes sure `[0, end)` of the current segment's file has disk space.
    fn reserve(w: &mut Writer, seg: &ArenaSegment, end: usize) -> Result<()> {
        let (Some(f), Some(path)) = (&seg.file, &seg.path) else {
            return Ok(());
        };
        if end <= w.reserved {
            return Ok(());
        }
        use std::os::unix::io::AsRawFd;
        let to = end.div_ceil(RESERVE_STEP) * RESERVE_STEP;
        let to = to.min(SEGMENT_BYTES);
        // SAFETY: posix_fallocate on an open, owned descriptor with an in-range region.
        let rc = unsafe {
            libc::posix_fallocate(
                f.as_raw_fd(),
                w.reserved as libc::off_t,
                (to - w.reserved) as libc::off_t,
            )
        };
        if rc != 0 {
            let e = Error::io(path, std::io::Error::from_raw_os_error(rc));
            if !w.failing {
                w.failing = true;
                tracing::error!(error = %e,
                    "head chunk arena cannot reserve disk space; full chunks stay in memory until it can");
            }
            return Err(e);
        }
        if w.failing {
            w.failing = false;
            tracing::warn!("head chunk arena reserves disk space again");
        }
        w.reserved = to;
        Ok(())
    }

    /// Copies `chunk`, whose newest sample is at `max_time`, into the arena.
    pub fn add(&self, chunk: &[u8], max_time: i64) -> Result<ChunkAddr> {
        let len = chunk.len();
        if len > SEGMENT_BYTES {
            return Err(Error::io(
                self.dir.clone().unwrap_or_default(),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "chunk too large"),
            ));
        }
        let mut w = self.w.lock();
        let cur = match w.cur {
            Some(c) if w.used + len <= SEGMENT_BYTES => c,
            _ => {
                let mut segs = self.segs.write();
                let n = segs.len();
                let n32 = u32::try_from(n).map_err(|_| Error::Closed)?;
                let seg = self.new_segment(n)?;
                segs.push(Some(Arc::new(seg)));
                w.cur = Some(n32);
                w.used = 0;
                w.reserved = 0;
                n32
            }
        };
        let seg = self
            .segment(cur)
            .ok_or_else(|| Error::corrupt("head chunk arena", "", cur as u64, "segment gone"))?;
        let off = w.used;
        Self::reserve(&mut w, &seg, off + len)?;
        // SAFETY: `[off, off + len)` lies inside the mapping (checked above), no reader knows
        // an address in it yet (it is past every handed-out chunk), and the writer mutex
        // serializes writers.
        unsafe {
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), seg.map.as_mut_ptr().add(off), len);
        }
        w.used += len;
        seg.max_time.fetch_max(max_time, Ordering::Relaxed);
        Ok(ChunkAddr {
            seg: cur,
            off: off as u32,
            len: len as u32,
        })
    }

    /// Segment `n`, if still in the table.
    pub fn segment(&self, n: u32) -> Option<Arc<ArenaSegment>> {
        self.segs.read().get(n as usize)?.clone()
    }

    /// Drops from the table every segment (but the one being written) whose chunks all end
    /// before `t`. Returns how many.
    pub fn release_before(&self, t: i64) -> usize {
        let w = self.w.lock();
        let mut segs = self.segs.write();
        let mut n = 0;
        for (i, s) in segs.iter_mut().enumerate() {
            if Some(i as u32) == w.cur {
                continue;
            }
            if s.as_ref()
                .is_some_and(|s| s.max_time.load(Ordering::Relaxed) < t)
            {
                *s = None;
                n += 1;
            }
        }
        n
    }

    /// Segments in the table.
    pub fn live_segments(&self) -> usize {
        self.segs.read().iter().flatten().count()
    }

    /// Drops every segment and removes the folder (after close).
    pub fn remove(&self) {
        let mut w = self.w.lock();
        w.cur = None;
        self.segs.write().clear();
        if let Some(d) = &self.dir {
            let _ = fs::remove_dir_all(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_releases() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("chunks_head");
        let a = ChunkArena::create(&dir).unwrap();
        let c1 = a.add(b"hello", 10).unwrap();
        let c2 = a.add(&[7u8; 1000], 20).unwrap();
        let get = |c: ChunkAddr| a.segment(c.seg).unwrap().slice(c.off, c.len).to_vec();
        assert_eq!(get(c1), b"hello");
        assert_eq!(get(c2), vec![7u8; 1000]);
        let big = vec![1u8; SEGMENT_BYTES - 10];
        let c3 = a.add(&big, 30).unwrap();
        assert_eq!((c1.seg, c3.seg), (0, 1));
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2);
        // a reader keeps a released segment mapped
        let held = a.segment(0).unwrap();
        assert_eq!(a.release_before(21), 1);
        assert!(a.segment(0).is_none());
        assert_eq!(held.slice(c1.off, c1.len), b"hello");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2);
        drop(held);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        // the segment being written stays
        assert_eq!(a.release_before(i64::MAX), 0);
        assert_eq!(get(c3).len(), SEGMENT_BYTES - 10);
        a.remove();
        assert!(!dir.exists());
        let anon = ChunkArena::anonymous();
        let c = anon.add(b"x", 1).unwrap();
        assert_eq!(anon.segment(c.seg).unwrap().slice(c.off, c.len), b"x");
    }
}
