//! Segmented, append-only chunk files, read back through `memmap2`.
//!
//! A chunk folder holds numbered segment files (`000001`, `000002`, ...). Each starts with an
//! 8-byte header (`b"IDBC"`, format version, three zero bytes) followed by encoded chunks back to
//! back. Chunks are self-delimiting and carry their own checksum (see `FORMAT.md`). A chunk is
//! addressed by a *chunk reference*: `segment_number << 32 | byte_offset_in_segment`.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::chunk;
use crate::error::{Error, Result};

/// Magic bytes at the start of every chunk segment file.
pub const SEGMENT_MAGIC: [u8; 4] = *b"IDBC";
/// Chunk segment format version.
pub const SEGMENT_VERSION: u8 = 1;
/// Size of the segment header.
pub const SEGMENT_HEADER_LEN: u64 = 8;
/// A segment is closed and a new one started before it would grow past this many bytes.
pub const MAX_SEGMENT_SIZE: u64 = 512 << 20;

/// The file name of segment `n` (1-based): six zero-padded digits.
pub fn segment_name(n: u32) -> String {
    format!("{n:06}")
}

/// Builds a chunk reference from a segment number and an offset.
pub fn make_ref(segment: u32, offset: u32) -> u64 {
    (u64::from(segment) << 32) | u64::from(offset)
}

/// Splits a chunk reference into segment number and offset.
pub fn split_ref(r: u64) -> (u32, u32) {
    ((r >> 32) as u32, r as u32)
}

/// Rewrites a corruption error reported for an in-memory buffer (empty path) so that it names
/// `path` and an offset relative to the file (`base` + the buffer offset).
pub(crate) fn relocate(e: Error, path: &Path, base: u64) -> Error {
    match e {
        Error::Corrupt {
            what,
            path: p,
            offset,
            reason,
        } if p.as_os_str().is_empty() => Error::Corrupt {
            what,
            path: path.to_path_buf(),
            offset: base.saturating_add(offset),
            reason,
        },
        e => e,
    }
}

/// Appends chunks to the segment files of one folder.
pub struct ChunkFileWriter {
    dir: PathBuf,
    seq: u32,
    file: BufWriter<File>,
    path: PathBuf,
    offset: u64,
}

impl ChunkFileWriter {
    /// Creates `dir` (if needed) and its first segment. Existing segments are overwritten.
    pub fn create(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let (file, path) = Self::new_segment(dir, 1)?;
        Ok(ChunkFileWriter {
            dir: dir.to_path_buf(),
            seq: 1,
            file,
            path,
            offset: SEGMENT_HEADER_LEN,
        })
    }

    fn new_segment(dir: &Path, seq: u32) -> Result<(BufWriter<File>, PathBuf)> {
        let path = dir.join(segment_name(seq));
        let f = File::create(&path).map_err(|e| Error::io(&path, e))?;
        let mut w = BufWriter::with_capacity(1 << 16, f);
        let mut hdr = [0u8; SEGMENT_HEADER_LEN as usize];
        hdr[..4].copy_from_slice(&SEGMENT_MAGIC);
        hdr[4] = SEGMENT_VERSION;
        w.write_all(&hdr).map_err(|e| Error::io(&path, e))?;
        Ok((w, path))
    }

    /// Appends one encoded chunk and returns its reference.
    pub fn append(&mut self, chunk: &[u8]) -> Result<u64> {
        let len = chunk.len() as u64;
        if self.offset > SEGMENT_HEADER_LEN && self.offset + len > MAX_SEGMENT_SIZE {
            self.sync()?;
            let (file, path) = Self::new_segment(&self.dir, self.seq + 1)?;
            self.seq += 1;
            self.file = file;
            self.path = path;
            self.offset = SEGMENT_HEADER_LEN;
        }
        if self.offset + len > u64::from(u32::MAX) {
            return Err(Error::io(
                &self.path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "chunk too large"),
            ));
        }
        let r = make_ref(self.seq, self.offset as u32);
        self.file
            .write_all(chunk)
            .map_err(|e| Error::io(&self.path, e))?;
        self.offset += len;
        Ok(r)
    }

    /// Flushes buffered bytes and fsyncs the current segment (earlier ones were synced when
    /// they were closed).
    pub fn sync(&mut self) -> Result<()> {
        self.file.flush().map_err(|e| Error::io(&self.path, e))?;
        self.file
            .get_ref()
            .sync_all()
            .map_err(|e| Error::io(&self.path, e))
    }

    /// The folder written to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// One memory-mapped segment.
struct Segment {
    seq: u32,
    path: PathBuf,
    map: Option<Mmap>,
}

impl Segment {
    fn data(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

/// Reads chunks from the memory-mapped segment files of one folder.
pub struct ChunkFileReader {
    dir: PathBuf,
    segments: Vec<Segment>,
}

impl ChunkFileReader {
    /// Maps every segment file of `dir`. A segment with a bad header is an error.
    pub fn open(dir: &Path) -> Result<Self> {
        let mut segments = Vec::new();
        for ent in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let ent = ent.map_err(|e| Error::io(dir, e))?;
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.len() != 6 || !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Ok(seq) = name.parse::<u32>() else {
                continue;
            };
            let path = ent.path();
            let f = File::open(&path).map_err(|e| Error::io(&path, e))?;
            let len = f.metadata().map_err(|e| Error::io(&path, e))?.len();
            if len < SEGMENT_HEADER_LEN {
                return Err(Error::corrupt(
                    "chunk segment header",
                    &path,
                    0,
                    format!("file is {len} bytes, shorter than its header"),
                ));
            }
            // SAFETY: block files are immutable once written (written to a temporary folder,
            // fsynced and renamed); nobody truncates them while they are mapped.
            let map = unsafe { Mmap::map(&f) }.map_err(|e| Error::io(&path, e))?;
            if map[..4] != SEGMENT_MAGIC {
                return Err(Error::corrupt(
                    "chunk segment header",
                    &path,
                    0,
                    "bad magic",
                ));
            }
            if map[4] != SEGMENT_VERSION {
                return Err(Error::corrupt(
                    "chunk segment header",
                    &path,
                    4,
                    format!("unsupported version {}", map[4]),
                ));
            }
            if map[5..SEGMENT_HEADER_LEN as usize].iter().any(|&b| b != 0) {
                return Err(Error::corrupt(
                    "chunk segment header",
                    &path,
                    5,
                    "non-zero padding",
                ));
            }
            segments.push(Segment {
                seq,
                path,
                map: Some(map),
            });
        }
        segments.sort_by_key(|s| s.seq);
        Ok(ChunkFileReader {
            dir: dir.to_path_buf(),
            segments,
        })
    }

    fn segment(&self, seq: u32) -> Option<&Segment> {
        self.segments
            .binary_search_by_key(&seq, |s| s.seq)
            .ok()
            .map(|i| &self.segments[i])
    }

    /// The path of the segment a reference points into (whether or not it exists).
    pub fn segment_path(&self, r: u64) -> PathBuf {
        self.dir.join(segment_name(split_ref(r).0))
    }

    /// The encoded chunk at reference `r`: bounds-checked, its length read from its header.
    /// The checksum is verified by [`ChunkFileReader::decode`] (or the chunk decoder).
    pub fn get(&self, r: u64) -> Result<&[u8]> {
        let (seq, off) = split_ref(r);
        let Some(seg) = self.segment(seq) else {
            return Err(Error::corrupt(
                "chunk reference",
                self.segment_path(r),
                u64::from(off),
                format!("segment {seq} does not exist"),
            ));
        };
        let data = seg.data();
        let off_us = off as usize;
        if u64::from(off) < SEGMENT_HEADER_LEN || off_us >= data.len() {
            return Err(Error::corrupt(
                "chunk reference",
                &seg.path,
                u64::from(off),
                format!("offset outside the segment ({} bytes)", data.len()),
            ));
        }
        let rest = &data[off_us..];
        let n = chunk::encoded_len(rest).map_err(|e| relocate(e, &seg.path, u64::from(off)))?;
        rest.get(..n).ok_or_else(|| {
            Error::corrupt(
                "chunk",
                &seg.path,
                u64::from(off),
                "chunk runs past the end of the segment",
            )
        })
    }

    /// Decodes the chunk at `r`, verifying its checksum; errors name the segment file and the
    /// offset within it.
    pub fn decode(&self, r: u64) -> Result<chunk::SampleIter<'_>> {
        let bytes = self.get(r)?;
        chunk::decode(bytes).map_err(|e| relocate(e, &self.segment_path(r), split_ref(r).1 as u64))
    }

    /// Walks every segment chunk by chunk, verifying each checksum and decoding every sample.
    /// Returns one error per problem found; a chunk whose length cannot be read ends the walk
    /// of its segment.
    pub fn check(&self) -> Vec<Error> {
        let mut errs = Vec::new();
        for seg in &self.segments {
            let data = seg.data();
            let mut off = SEGMENT_HEADER_LEN as usize;
            while off < data.len() {
                let rest = &data[off..];
                let n = match chunk::encoded_len(rest) {
                    Ok(n) if n > 0 && n <= rest.len() => n,
                    Ok(_) => {
                        errs.push(Error::corrupt(
                            "chunk",
                            &seg.path,
                            off as u64,
                            "bad chunk length",
                        ));
                        break;
                    }
                    Err(e) => {
                        errs.push(relocate(e, &seg.path, off as u64));
                        break;
                    }
                };
                match chunk::decode(&rest[..n]) {
                    Ok(mut it) => {
                        for _ in it.by_ref() {}
                        if let Some(e) = it.take_err() {
                            errs.push(relocate(e, &seg.path, off as u64));
                        }
                    }
                    Err(e) => errs.push(relocate(e, &seg.path, off as u64)),
                }
                off += n;
            }
        }
        errs
    }

    /// The segment files and their sizes.
    pub fn files(&self) -> impl Iterator<Item = (&Path, u64)> + '_ {
        self.segments
            .iter()
            .map(|s| (s.path.as_path(), s.data().len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::ChunkWriter;

    fn chunk_bytes(n: i64) -> Vec<u8> {
        let mut w = ChunkWriter::new();
        for t in 0..n {
            w.append(t * 1000, t as f64);
        }
        w.finish()
    }

    #[test]
    fn round_trip_and_bad_refs() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ChunkFileWriter::create(dir.path()).unwrap();
        let a = chunk_bytes(3);
        let b = chunk_bytes(7);
        let ra = w.append(&a).unwrap();
        let rb = w.append(&b).unwrap();
        w.sync().unwrap();
        drop(w);
        assert_eq!(split_ref(ra), (1, 8));
        let r = ChunkFileReader::open(dir.path()).unwrap();
        assert_eq!(r.get(ra).unwrap(), &a[..]);
        assert_eq!(r.get(rb).unwrap(), &b[..]);
        assert_eq!(r.decode(rb).unwrap().count(), 7);
        assert!(r.check().is_empty());
        assert!(r.get(make_ref(2, 8)).is_err());
        assert!(r.get(make_ref(1, 4)).is_err());
        assert!(r.get(make_ref(1, 1 << 30)).is_err());
        assert!(r.get(ra + 1).is_err() || r.decode(ra + 1).is_err());
    }
}
