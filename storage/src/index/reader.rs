//! Reads a block index through `memmap2` (or from a buffer). Every read is bounds-checked;
//! every section's crc32 is verified before its bytes are used. Corrupt bytes give
//! [`Error::Corrupt`] naming the file and offset, never a panic.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::{sets, HEADER_LEN, INDEX_MAGIC, INDEX_VERSION, TOC_LEN};
use crate::chunk::ChunkMeta;
use crate::chunkfile::relocate;
use crate::error::{Error, Result};
use crate::labels::{Label, Labels};
use crate::matcher::{MatchOp, Matcher};
use crate::varint::{get_uvarint, get_varint};

/// One series as stored in the index.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesEntry {
    /// The series' labels.
    pub labels: Labels,
    /// Its chunks in time order: metadata and chunk reference.
    pub chunks: Vec<(ChunkMeta, u64)>,
}

enum Source {
    Map(Mmap),
    Buf(Vec<u8>),
}

impl Source {
    fn bytes(&self) -> &[u8] {
        match self {
            Source::Map(m) => m,
            Source::Buf(b) => b,
        }
    }
}

/// A cursor over a section body that reports errors at body-relative offsets (empty path).
struct Dec<'a> {
    b: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Dec<'a> {
    fn err(&self, reason: impl Into<String>) -> Error {
        Error::corrupt(self.what, "", self.pos as u64, reason)
    }

    fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    fn uvarint(&mut self) -> Result<u64> {
        get_uvarint(self.b, &mut self.pos).map_err(|e| self.err(e.to_string()))
    }

    fn varint(&mut self) -> Result<i64> {
        get_varint(self.b, &mut self.pos).map_err(|e| self.err(e.to_string()))
    }

    fn u32_sym(&mut self) -> Result<u32> {
        let v = self.uvarint()?;
        u32::try_from(v).map_err(|_| self.err("symbol reference out of range"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(format!("needs {n} bytes, {} left", self.remaining())));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn be_u32(&mut self) -> Result<u32> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn be_u64(&mut self) -> Result<u64> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_be_bytes(a))
    }

    fn end(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(self.err(format!("{} trailing bytes", self.remaining())));
        }
        Ok(())
    }
}

/// A label name in the postings table: its symbol and its value entries.
struct NameEntry {
    name: u32,
    start: usize,
    end: usize,
}

/// A read-only view of one index file.
pub struct IndexReader {
    path: PathBuf,
    src: Source,
    symbols: Vec<String>,
    /// Offset of the series table's body (after its length prefix).
    series_table: usize,
    num_series: u32,
    names: Vec<NameEntry>,
    /// `(value symbol, postings list offset)` grouped by name, sorted.
    values: Vec<(u32, u64)>,
}

impl IndexReader {
    /// Maps and opens the index file at `path`: verifies header, table of contents, symbol
    /// table, series table and postings table. Series entries and postings lists are verified
    /// when read (and all at once by [`IndexReader::check`]).
    pub fn open(path: &Path) -> Result<Self> {
        let f = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
        let src = if len == 0 {
            Source::Buf(Vec::new())
        } else {
            // SAFETY: block files are immutable once written (temporary folder, fsync, rename)
            // and never truncated while mapped.
            Source::Map(unsafe { Mmap::map(&f) }.map_err(|e| Error::io(path, e))?)
        };
        Self::from_source(path.to_path_buf(), src)
    }

    /// Opens an index held in memory; `path` is only used in error messages.
    pub fn from_bytes(bytes: Vec<u8>, path: impl Into<PathBuf>) -> Result<Self> {
        Self::from_source(path.into(), Source::Buf(bytes))
    }

    fn corrupt(&self, what: &'static str, off: u64, reason: impl Into<String>) -> Error {
        Error::corrupt(what, &self.path, off, reason)
    }

    fn from_source(path: PathBuf, src: Source) -> Result<Self> {
        let mut r = IndexReader {
            path,
            src,
            symbols: Vec::new(),
            series_table: 0,
            num_series: 0,
            names: Vec::new(),
            values: Vec::new(),
        };
        let data = r.src.bytes();
        if data.len() < HEADER_LEN + TOC_LEN {
            return Err(r.corrupt("index header", 0, "file too short"));
        }
        if data[..4] != INDEX_MAGIC {
            return Err(r.corrupt("index header", 0, "bad magic"));
        }
        if data[4] != INDEX_VERSION {
            return Err(r.corrupt(
                "index header",
                4,
                format!("unsupported version {}", data[4]),
            ));
        }
        if data[5..HEADER_LEN].iter().any(|&b| b != 0) {
            return Err(r.corrupt("index header", 5, "non-zero padding"));
        }
        let toc_off = data.len() - TOC_LEN;
        let toc = &data[toc_off..];
        let crc = u32::from_be_bytes([toc[40], toc[41], toc[42], toc[43]]);
        if crc32fast::hash(&toc[..40]) != crc {
            return Err(r.corrupt("index TOC", toc_off as u64, "checksum mismatch"));
        }
        let mut offs = [0u64; 5];
        for (i, o) in offs.iter_mut().enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(&toc[i * 8..i * 8 + 8]);
            *o = u64::from_be_bytes(a);
        }
        let [symbols_off, _series_off, series_table_off, _postings_off, postings_table_off] = offs;

        // Symbols.
        let (body, base) = r.section(symbols_off, "index symbol table")?;
        let symbols = parse_symbols(body).map_err(|e| relocate(e, &r.path, base))?;

        // Series table.
        let (body, base) = r.section(series_table_off, "index series table")?;
        let num_series = {
            let mut d = Dec {
                b: body,
                pos: 0,
                what: "index series table",
            };
            let n = d.be_u32()?;
            if (n as usize).checked_mul(8) != Some(d.remaining()) {
                return Err(relocate(d.err("size does not match count"), &r.path, base));
            }
            n
        };
        let series_table = base as usize + 4;

        // Postings table.
        let (body, base) = r.section(postings_table_off, "index postings table")?;
        let (names, values) =
            parse_postings_table(body, symbols.len()).map_err(|e| relocate(e, &r.path, base))?;

        r.symbols = symbols;
        r.series_table = series_table;
        r.num_series = num_series;
        r.names = names;
        r.values = values;
        Ok(r)
    }

    /// The body of the framed section at `off` (crc verified) and the body's file offset.
    fn section(&self, off: u64, what: &'static str) -> Result<(&[u8], u64)> {
        let data = self.src.bytes();
        let end_ok = |o: u64, n: u64| o.checked_add(n).is_some_and(|e| e <= data.len() as u64);
        if !end_ok(off, 4) || off < HEADER_LEN as u64 {
            return Err(self.corrupt(what, off, "section offset out of bounds"));
        }
        let o = off as usize;
        let len = u32::from_be_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]]) as u64;
        if !end_ok(off + 4, len + 4) {
            return Err(self.corrupt(
                what,
                off,
                format!("section of {len} bytes runs past the end"),
            ));
        }
        let body = &data[o + 4..o + 4 + len as usize];
        let c = &data[o + 4 + len as usize..o + 8 + len as usize];
        if crc32fast::hash(body) != u32::from_be_bytes([c[0], c[1], c[2], c[3]]) {
            return Err(self.corrupt(what, off, "checksum mismatch"));
        }
        Ok((body, off + 4))
    }

    /// The path this index was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The number of series.
    pub fn num_series(&self) -> u32 {
        self.num_series
    }

    /// The sorted symbol table (every label name and value).
    pub fn symbols(&self) -> &[String] {
        &self.symbols
    }

    fn sym(&self, id: u32) -> Option<&str> {
        self.symbols.get(id as usize).map(String::as_str)
    }

    fn name_entry(&self, name: &str) -> Option<&NameEntry> {
        self.names
            .binary_search_by(|e| self.symbols[e.name as usize].as_str().cmp(name))
            .ok()
            .map(|i| &self.names[i])
    }

    /// Every label name present in some series, sorted.
    pub fn label_names(&self) -> Vec<&str> {
        self.names
            .iter()
            .map(|e| self.symbols[e.name as usize].as_str())
            .collect()
    }

    /// Every value of label `name`, sorted.
    pub fn label_values(&self, name: &str) -> Vec<&str> {
        match self.name_entry(name) {
            None => Vec::new(),
            Some(e) => self.values[e.start..e.end]
                .iter()
                .map(|(v, _)| self.symbols[*v as usize].as_str())
                .collect(),
        }
    }

    /// The ids of the series with `name="value"`, ascending.
    pub fn postings(&self, name: &str, value: &str) -> Result<Vec<u32>> {
        let Some(e) = self.name_entry(name) else {
            return Ok(Vec::new());
        };
        let vals = &self.values[e.start..e.end];
        match vals.binary_search_by(|(v, _)| self.symbols[*v as usize].as_str().cmp(value)) {
            Ok(i) => self.postings_at(vals[i].1),
            Err(_) => Ok(Vec::new()),
        }
    }

    /// Reads and verifies the postings list at `off`.
    fn postings_at(&self, off: u64) -> Result<Vec<u32>> {
        let what = "index postings list";
        let (body, base) = self.section(off, what)?;
        let mut d = Dec {
            b: body,
            pos: 0,
            what,
        };
        let parse = |d: &mut Dec| -> Result<Vec<u32>> {
            let n = d.be_u32()? as usize;
            if n.checked_mul(4) != Some(d.remaining()) {
                return Err(d.err("size does not match count"));
            }
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let id = d.be_u32()?;
                if id >= self.num_series {
                    return Err(d.err(format!("series id {id} out of range")));
                }
                if out.last().is_some_and(|&p| p >= id) {
                    return Err(d.err("postings not ascending"));
                }
                out.push(id);
            }
            Ok(out)
        };
        parse(&mut d).map_err(|e| relocate(e, &self.path, base))
    }

    /// The union of the postings of the values of `name` for which `keep` holds.
    fn postings_where(&self, name: &str, keep: impl Fn(&str) -> bool) -> Result<Vec<u32>> {
        let Some(e) = self.name_entry(name) else {
            return Ok(Vec::new());
        };
        let mut lists = Vec::new();
        for (v, off) in &self.values[e.start..e.end] {
            if keep(&self.symbols[*v as usize]) {
                lists.push(self.postings_at(*off)?);
            }
        }
        Ok(sets::union(lists))
    }

    /// The ids of the series that satisfy every matcher, ascending. A series lacking a label
    /// has the empty value for it, so a matcher that matches `""` also selects series without
    /// the label, as in Prometheus. No matchers select every series.
    pub fn select(&self, ms: &[Matcher]) -> Result<Vec<u32>> {
        let mut acc: Option<Vec<u32>> = None;
        let mut excluded: Vec<Vec<u32>> = Vec::new();
        for m in ms {
            if m.matches_empty() {
                // Keeps series lacking the label; drops those whose value fails the matcher.
                if m.is_match_all() {
                    continue;
                }
                let drop = match m.op {
                    MatchOp::NotEqual => self.postings(&m.name, &m.value)?,
                    _ => self.postings_where(&m.name, |v| !m.matches(v))?,
                };
                excluded.push(drop);
            } else {
                let keep = match m.op {
                    MatchOp::Equal => self.postings(&m.name, &m.value)?,
                    _ => self.postings_where(&m.name, |v| m.matches(v))?,
                };
                let next = match acc {
                    None => keep,
                    Some(a) => sets::intersect(&a, &keep),
                };
                if next.is_empty() {
                    return Ok(next);
                }
                acc = Some(next);
            }
        }
        let mut out = acc.unwrap_or_else(|| (0..self.num_series).collect());
        for x in &excluded {
            if !x.is_empty() {
                out = sets::subtract(&out, x);
            }
        }
        Ok(out)
    }

    /// Reads and verifies the entry of series `id`.
    pub fn series(&self, id: u32) -> Result<SeriesEntry> {
        if id >= self.num_series {
            return Err(self.corrupt(
                "index series table",
                self.series_table as u64,
                format!("series id {id} out of range"),
            ));
        }
        let at = self.series_table + id as usize * 8;
        let data = self.src.bytes();
        // In bounds: the series table's size was checked against its count at open.
        let mut a = [0u8; 8];
        a.copy_from_slice(&data[at..at + 8]);
        let off = u64::from_be_bytes(a);
        let what = "index series entry";
        let (body, base) = self.section(off, what)?;
        self.parse_series(body)
            .map_err(|e| relocate(e, &self.path, base))
    }

    fn parse_series(&self, body: &[u8]) -> Result<SeriesEntry> {
        let mut d = Dec {
            b: body,
            pos: 0,
            what: "index series entry",
        };
        let n = d.uvarint()? as usize;
        if n > d.remaining() / 2 {
            return Err(d.err("label count exceeds entry size"));
        }
        let mut labels: Vec<Label> = Vec::with_capacity(n);
        for _ in 0..n {
            let ns = d.u32_sym()?;
            let vs = d.u32_sym()?;
            let (Some(name), Some(value)) = (self.sym(ns), self.sym(vs)) else {
                return Err(d.err("symbol reference out of range"));
            };
            if value.is_empty() || name.is_empty() {
                return Err(d.err("empty label name or value"));
            }
            if labels.last().is_some_and(|l| l.name.as_str() >= name) {
                return Err(d.err("label names not strictly ascending"));
            }
            labels.push(Label::new(name, value));
        }
        let nc = d.uvarint()? as usize;
        if nc > d.remaining() / 4 {
            return Err(d.err("chunk count exceeds entry size"));
        }
        let mut chunks = Vec::with_capacity(nc);
        let mut prev: Option<(i64, u64)> = None;
        for _ in 0..nc {
            let min_time = match prev {
                None => d.varint()?,
                Some((pmax, _)) => pmax
                    .checked_add(d.varint()?)
                    .ok_or_else(|| d.err("chunk time overflows"))?,
            };
            let span = d.uvarint()?;
            let max_time = i64::try_from(span)
                .ok()
                .and_then(|s| min_time.checked_add(s))
                .ok_or_else(|| d.err("chunk time overflows"))?;
            let num_samples =
                u16::try_from(d.uvarint()?).map_err(|_| d.err("sample count out of range"))?;
            let r = match prev {
                None => d.uvarint()?,
                Some((_, pr)) => pr.wrapping_add(d.varint()? as u64),
            };
            chunks.push((
                ChunkMeta {
                    min_time,
                    max_time,
                    num_samples,
                },
                r,
            ));
            prev = Some((max_time, r));
        }
        d.end()?;
        Ok(SeriesEntry {
            labels: Labels::from_sorted_unchecked(labels),
            chunks,
        })
    }

    /// Verifies every section of the index: each series entry (and that series are sorted by
    /// labels) and each postings list. Returns one error per problem found.
    pub fn check(&self) -> Vec<Error> {
        let mut errs = Vec::new();
        let mut prev: Option<Labels> = None;
        for id in 0..self.num_series {
            match self.series(id) {
                Ok(s) => {
                    if prev.as_ref().is_some_and(|p| *p >= s.labels) {
                        errs.push(self.corrupt(
                            "index series entry",
                            0,
                            format!("series {id} out of order"),
                        ));
                    }
                    prev = Some(s.labels);
                }
                Err(e) => errs.push(e),
            }
        }
        for (_, off) in &self.values {
            if let Err(e) = self.postings_at(*off) {
                errs.push(e);
            }
        }
        errs
    }
}

fn parse_symbols(body: &[u8]) -> Result<Vec<String>> {
    let mut d = Dec {
        b: body,
        pos: 0,
        what: "index symbol table",
    };
    let n = d.uvarint()? as usize;
    if n > d.remaining() {
        return Err(d.err("symbol count exceeds table size"));
    }
    let mut out: Vec<String> = Vec::with_capacity(n);
    for _ in 0..n {
        let len = d.uvarint()? as usize;
        let at = d.pos;
        let b = d.take(len)?;
        let s = std::str::from_utf8(b).map_err(|_| {
            Error::corrupt("index symbol table", "", at as u64, "symbol is not UTF-8")
        })?;
        if out.last().is_some_and(|p| p.as_str() >= s) {
            return Err(Error::corrupt(
                "index symbol table",
                "",
                at as u64,
                "symbols not strictly ascending",
            ));
        }
        out.push(s.to_owned());
    }
    d.end()?;
    Ok(out)
}

/// Label names with their value ranges, and `(value symbol, postings offset)` entries.
type PostingsTable = (Vec<NameEntry>, Vec<(u32, u64)>);

fn parse_postings_table(body: &[u8], nsyms: usize) -> Result<PostingsTable> {
    let mut d = Dec {
        b: body,
        pos: 0,
        what: "index postings table",
    };
    let n = d.be_u32()? as usize;
    if n.checked_mul(16) != Some(d.remaining()) {
        return Err(d.err("size does not match count"));
    }
    let mut names: Vec<NameEntry> = Vec::new();
    let mut values = Vec::with_capacity(n);
    let mut prev: Option<(u32, u32)> = None;
    for i in 0..n {
        let name = d.be_u32()?;
        let value = d.be_u32()?;
        let off = d.be_u64()?;
        if name as usize >= nsyms || value as usize >= nsyms {
            return Err(d.err("symbol reference out of range"));
        }
        if prev.is_some_and(|p| p >= (name, value)) {
            return Err(d.err("postings table not sorted"));
        }
        prev = Some((name, value));
        match names.last_mut() {
            Some(e) if e.name == name => e.end = i + 1,
            _ => names.push(NameEntry {
                name,
                start: i,
                end: i + 1,
            }),
        }
        values.push((value, off));
    }
    Ok((names, values))
}
