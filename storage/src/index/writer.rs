//! Writes a block index file (layout in `storage/FORMAT.md`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::{HEADER_LEN, INDEX_MAGIC, INDEX_VERSION};
use crate::chunk::ChunkMeta;
use crate::error::{Error, Result};
use crate::labels::Labels;
use crate::varint::{put_uvarint, put_varint};

struct Out<'p> {
    w: BufWriter<File>,
    path: &'p Path,
    pos: u64,
}

impl Out<'_> {
    fn raw(&mut self, b: &[u8]) -> Result<()> {
        self.w.write_all(b).map_err(|e| Error::io(self.path, e))?;
        self.pos += b.len() as u64;
        Ok(())
    }

    /// Writes a framed section (u32 length, body, crc32 of body) and returns its offset.
    fn section(&mut self, body: &[u8]) -> Result<u64> {
        let off = self.pos;
        let len = u32::try_from(body.len()).map_err(|_| {
            Error::io(
                self.path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "index section too large"),
            )
        })?;
        self.raw(&len.to_be_bytes())?;
        self.raw(body)?;
        self.raw(&crc32fast::hash(body).to_be_bytes())?;
        Ok(off)
    }
}

/// Writes the index of `series` (sorted by labels, unique) to `path` and fsyncs it.
/// Each series' chunks are `(meta, chunk reference)` in time order. Returns the file size.
pub fn write_index(path: &Path, series: &[(Labels, Vec<(ChunkMeta, u64)>)]) -> Result<u64> {
    let f = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut out = Out {
        w: BufWriter::with_capacity(1 << 16, f),
        path,
        pos: 0,
    };
    let mut hdr = [0u8; HEADER_LEN];
    hdr[..4].copy_from_slice(&INDEX_MAGIC);
    hdr[4] = INDEX_VERSION;
    out.raw(&hdr)?;

    // Symbols.
    let mut syms: BTreeSet<&str> = BTreeSet::new();
    for (ls, _) in series {
        for l in ls {
            syms.insert(&l.name);
            syms.insert(&l.value);
        }
    }
    let mut body = Vec::new();
    put_uvarint(&mut body, syms.len() as u64);
    let mut ids: HashMap<&str, u32> = HashMap::with_capacity(syms.len());
    for (i, s) in syms.iter().enumerate() {
        put_uvarint(&mut body, s.len() as u64);
        body.extend_from_slice(s.as_bytes());
        ids.insert(s, i as u32);
    }
    let symbols_off = out.section(&body)?;

    // Series entries and postings.
    let series_off = out.pos;
    let mut offsets: Vec<u64> = Vec::with_capacity(series.len());
    let mut postings: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    for (i, (ls, chunks)) in series.iter().enumerate() {
        body.clear();
        put_uvarint(&mut body, ls.len() as u64);
        for l in ls {
            let (n, v) = (ids[l.name.as_str()], ids[l.value.as_str()]);
            put_uvarint(&mut body, u64::from(n));
            put_uvarint(&mut body, u64::from(v));
            postings.entry((n, v)).or_default().push(i as u32);
        }
        put_uvarint(&mut body, chunks.len() as u64);
        let mut prev: Option<(i64, u64)> = None;
        for (m, r) in chunks {
            match prev {
                None => {
                    put_varint(&mut body, m.min_time);
                }
                Some((pmax, _)) => put_varint(&mut body, m.min_time.wrapping_sub(pmax)),
            }
            put_uvarint(&mut body, m.max_time.wrapping_sub(m.min_time) as u64);
            put_uvarint(&mut body, u64::from(m.num_samples));
            match prev {
                None => put_uvarint(&mut body, *r),
                Some((_, pr)) => put_varint(&mut body, r.wrapping_sub(pr) as i64),
            }
            prev = Some((m.max_time, *r));
        }
        offsets.push(out.section(&body)?);
    }

    // Series offset table.
    body.clear();
    body.extend_from_slice(&(offsets.len() as u32).to_be_bytes());
    for o in &offsets {
        body.extend_from_slice(&o.to_be_bytes());
    }
    let series_table_off = out.section(&body)?;

    // Postings lists.
    let postings_off = out.pos;
    let mut table: Vec<(u32, u32, u64)> = Vec::with_capacity(postings.len());
    for ((n, v), list) in &postings {
        body.clear();
        body.extend_from_slice(&(list.len() as u32).to_be_bytes());
        for id in list {
            body.extend_from_slice(&id.to_be_bytes());
        }
        table.push((*n, *v, out.section(&body)?));
    }

    // Postings offset table.
    body.clear();
    body.extend_from_slice(&(table.len() as u32).to_be_bytes());
    for (n, v, o) in &table {
        body.extend_from_slice(&n.to_be_bytes());
        body.extend_from_slice(&v.to_be_bytes());
        body.extend_from_slice(&o.to_be_bytes());
    }
    let postings_table_off = out.section(&body)?;

    // Table of contents.
    let mut toc = Vec::with_capacity(super::TOC_LEN);
    for o in [
        symbols_off,
        series_off,
        series_table_off,
        postings_off,
        postings_table_off,
    ] {
        toc.extend_from_slice(&o.to_be_bytes());
    }
    let crc = crc32fast::hash(&toc);
    toc.extend_from_slice(&crc.to_be_bytes());
    out.raw(&toc)?;
    out.w.flush().map_err(|e| Error::io(path, e))?;
    out.w.get_ref().sync_all().map_err(|e| Error::io(path, e))?;
    Ok(out.pos)
}
