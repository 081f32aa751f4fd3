//! A zero-copy reader of remote-write 1.0 `WriteRequest` bodies (after snappy), for the
//! receiver's hot path: label names and values stay borrowed from the request buffer and all
//! series share three flat vectors, so a request costs a handful of allocations however many
//! series it carries. Field numbers and wire types are those of [`super::proto`]; the fuzz
//! target `remote_write_decode` checks that whatever this reader accepts, `prost` decodes to
//! the same content.

use std::ops::Range;

use inferdb_storage::varint::{get_uvarint, VarintError};

/// Why a body is not a valid `WriteRequest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends inside a field.
    #[error("protobuf: unexpected end of message")]
    Truncated,
    /// A varint longer than 10 bytes.
    #[error("protobuf: invalid varint")]
    BadVarint,
    /// A known field with the wrong wire type, or a group (wire types 3 and 4).
    #[error("protobuf: invalid wire type {wire_type} for field {field}")]
    WireType {
        /// Field number.
        field: u64,
        /// Wire type found.
        wire_type: u8,
    },
    /// A string field that is not UTF-8.
    #[error("protobuf: invalid UTF-8 in a string field")]
    Utf8,
    /// Field number 0, which protobuf forbids.
    #[error("protobuf: invalid field number 0")]
    FieldZero,
    /// More nested series, labels or samples than fit the index type.
    #[error("protobuf: message too large")]
    TooLarge,
}

/// One series of a [`WriteView`]: ranges into its `labels` and `samples`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesView {
    /// Its labels, in the order sent (empty when the view was decoded with
    /// [`WriteView::decode_lazy_into`] and `raw_labels` is set: parse those bytes instead).
    pub labels: Range<u32>,
    /// Its samples, in the order sent.
    pub samples: Range<u32>,
    /// Where its `labels` fields lie in the decoded body, keys and lengths included, when they
    /// are back to back (as every known sender writes them); `None` when other fields come
    /// between them. Two series with the same bytes here have the same labels.
    pub raw_labels: Option<Range<u32>>,
}

/// One `MetricMetadata` entry, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataView<'a> {
    /// The `MetricType` number (unknown numbers are kept as sent).
    pub typ: i32,
    /// Family name.
    pub family: &'a str,
    /// HELP text.
    pub help: &'a str,
    /// UNIT.
    pub unit: &'a str,
}

/// A decoded `WriteRequest` whose strings borrow from the decompressed body.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct WriteView<'a> {
    /// Series in request order.
    pub series: Vec<SeriesView>,
    /// `(name, value)` of every series' labels, back to back.
    pub labels: Vec<(&'a str, &'a str)>,
    /// `(timestamp ms, value)` of every series' samples, back to back.
    pub samples: Vec<(i64, f64)>,
    /// Metadata entries.
    pub metadata: Vec<MetadataView<'a>>,
    /// Exemplars seen (decoded for validity, then dropped).
    pub exemplars: usize,
}

impl<'a> WriteView<'a> {
    /// The labels of series `s`.
    pub fn series_labels(&self, s: &SeriesView) -> &[(&'a str, &'a str)] {
        &self.labels[s.labels.start as usize..s.labels.end as usize]
    }

    /// The samples of series `s`.
    pub fn series_samples(&self, s: &SeriesView) -> &[(i64, f64)] {
        &self.samples[s.samples.start as usize..s.samples.end as usize]
    }
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, WireError> {
        get_uvarint(self.buf, &mut self.pos).map_err(|e| match e {
            VarintError::Truncated => WireError::Truncated,
            VarintError::Overflow => WireError::BadVarint,
        })
    }

    #[inline]
    fn key(&mut self) -> Result<(u64, u8), WireError> {
        let k = self.varint()?;
        if k > u64::from(u32::MAX) {
            return Err(WireError::BadVarint);
        }
        let field = k >> 3;
        if field == 0 {
            return Err(WireError::FieldZero);
        }
        Ok((field, (k & 7) as u8))
    }

    #[inline]
    fn fixed64(&mut self) -> Result<u64, WireError> {
        let end = self.pos.checked_add(8).ok_or(WireError::Truncated)?;
        let b = self.buf.get(self.pos..end).ok_or(WireError::Truncated)?;
        self.pos = end;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    #[inline]
    fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| WireError::Truncated)?;
        let end = self.pos.checked_add(n).ok_or(WireError::Truncated)?;
        let b = self.buf.get(self.pos..end).ok_or(WireError::Truncated)?;
        self.pos = end;
        Ok(b)
    }

    #[inline]
    fn string(&mut self) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| WireError::Utf8)
    }

    fn skip(&mut self, field: u64, wire_type: u8) -> Result<(), WireError> {
        match wire_type {
            VARINT => {
                self.varint()?;
            }
            FIXED64 => {
                self.fixed64()?;
            }
            LEN => {
                self.bytes()?;
            }
            FIXED32 => {
                let end = self.pos.checked_add(4).ok_or(WireError::Truncated)?;
                if end > self.buf.len() {
                    return Err(WireError::Truncated);
                }
                self.pos = end;
            }
            _ => return Err(WireError::WireType { field, wire_type }),
        }
        Ok(())
    }
}

fn expect(field: u64, got: u8, want: u8) -> Result<(), WireError> {
    if got == want {
        Ok(())
    } else {
        Err(WireError::WireType {
            field,
            wire_type: got,
        })
    }
}

fn idx(n: usize) -> Result<u32, WireError> {
    u32::try_from(n).map_err(|_| WireError::TooLarge)
}

/// Parses the label fields in `raw` (a series' [`SeriesView::raw_labels`] bytes) onto `out`,
/// checking them as [`WriteView::decode`] does.
pub fn parse_labels<'a>(raw: &'a [u8], out: &mut Vec<(&'a str, &'a str)>) -> Result<(), WireError> {
    let mut r = Reader::new(raw);
    while !r.done() {
        let (f, wt) = r.key()?;
        if f == 1 {
            expect(f, wt, LEN)?;
            out.push(label(r.bytes()?)?);
        } else {
            r.skip(f, wt)?;
        }
    }
    Ok(())
}

fn label(buf: &[u8]) -> Result<(&str, &str), WireError> {
    let mut r = Reader::new(buf);
    let (mut name, mut value) = ("", "");
    while !r.done() {
        let (f, wt) = r.key()?;
        match f {
            1 => {
                expect(f, wt, LEN)?;
                name = r.string()?;
            }
            2 => {
                expect(f, wt, LEN)?;
                value = r.string()?;
            }
            _ => r.skip(f, wt)?,
        }
    }
    Ok((name, value))
}

fn sample(buf: &[u8]) -> Result<(i64, f64), WireError> {
    let mut r = Reader::new(buf);
    let (mut t, mut v) = (0i64, 0f64);
    while !r.done() {
        let (f, wt) = r.key()?;
        match f {
            1 => {
                expect(f, wt, FIXED64)?;
                v = f64::from_bits(r.fixed64()?);
            }
            2 => {
                expect(f, wt, VARINT)?;
                t = r.varint()? as i64;
            }
            _ => r.skip(f, wt)?,
        }
    }
    Ok((t, v))
}

fn exemplar(buf: &[u8]) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while !r.done() {
        let (f, wt) = r.key()?;
        match f {
            1 => {
                expect(f, wt, LEN)?;
                label(r.bytes()?)?;
            }
            2 => {
                expect(f, wt, FIXED64)?;
                r.fixed64()?;
            }
            3 => {
                expect(f, wt, VARINT)?;
                r.varint()?;
            }
            _ => r.skip(f, wt)?,
        }
    }
    Ok(())
}

fn metadata(buf: &[u8]) -> Result<MetadataView<'_>, WireError> {
    let mut r = Reader::new(buf);
    let mut m = MetadataView {
        typ: 0,
        family: "",
        help: "",
        unit: "",
    };
    while !r.done() {
        let (f, wt) = r.key()?;
        match f {
            1 => {
                expect(f, wt, VARINT)?;
                m.typ = r.varint()? as i32;
            }
            2 => {
                expect(f, wt, LEN)?;
                m.family = r.string()?;
            }
            4 => {
                expect(f, wt, LEN)?;
                m.help = r.string()?;
            }
            5 => {
                expect(f, wt, LEN)?;
                m.unit = r.string()?;
            }
            _ => r.skip(f, wt)?,
        }
    }
    Ok(m)
}

impl<'a> WriteView<'a> {
    /// Decodes an uncompressed `WriteRequest`.
    pub fn decode(buf: &'a [u8]) -> Result<WriteView<'a>, WireError> {
        let mut v = WriteView::default();
        v.decode_into(buf)?;
        Ok(v)
    }

    /// Decodes into `self`, cleared first (keeps the vectors' capacity).
    pub fn decode_into(&mut self, buf: &'a [u8]) -> Result<(), WireError> {
        self.decode_with(buf, false)
    }

    /// Like [`WriteView::decode_into`], but the labels of a series whose label fields are back
    /// to back are not parsed nor UTF-8-checked: only their bytes are located
    /// ([`SeriesView::raw_labels`]); [`parse_labels`] parses them when needed. The rest of the
    /// message (framing of every field, samples, exemplars, metadata) is checked as by
    /// `decode_into`.
    pub fn decode_lazy_into(&mut self, buf: &'a [u8]) -> Result<(), WireError> {
        self.decode_with(buf, true)
    }

    fn decode_with(&mut self, buf: &'a [u8], lazy: bool) -> Result<(), WireError> {
        self.series.clear();
        self.labels.clear();
        self.samples.clear();
        self.metadata.clear();
        self.exemplars = 0;
        let mut r = Reader::new(buf);
        while !r.done() {
            let (f, wt) = r.key()?;
            match f {
                1 => {
                    expect(f, wt, LEN)?;
                    let ts = r.bytes()?;
                    self.time_series(ts, r.pos - ts.len(), lazy)?;
                }
                3 => {
                    expect(f, wt, LEN)?;
                    let m = metadata(r.bytes()?)?;
                    self.metadata.push(m);
                }
                _ => r.skip(f, wt)?,
            }
        }
        Ok(())
    }

    fn time_series(&mut self, buf: &'a [u8], base: usize, lazy: bool) -> Result<(), WireError> {
        let l0 = idx(self.labels.len())?;
        let s0 = idx(self.samples.len())?;
        // the span of the label fields, and whether anything else came inside it
        let (mut raw0, mut raw1, mut contiguous) = (None::<usize>, 0usize, true);
        let mut r = Reader::new(buf);
        while !r.done() {
            let at = r.pos;
            let (f, wt) = r.key()?;
            match f {
                1 => {
                    expect(f, wt, LEN)?;
                    match raw0 {
                        None => raw0 = Some(at),
                        Some(_) if raw1 != at => contiguous = false,
                        Some(_) => {}
                    }
                    let b = r.bytes()?;
                    raw1 = r.pos;
                    if !lazy {
                        self.labels.push(label(b)?);
                    }
                }
                2 => {
                    expect(f, wt, LEN)?;
                    let s = sample(r.bytes()?)?;
                    self.samples.push(s);
                }
                3 => {
                    expect(f, wt, LEN)?;
                    exemplar(r.bytes()?)?;
                    self.exemplars += 1;
                }
                _ => r.skip(f, wt)?,
            }
        }
        let raw_labels = if contiguous {
            let (a, b) = raw0.map_or((0, 0), |a| (base + a, base + raw1));
            Some(idx(a)?..idx(b)?)
        } else {
            if lazy {
                parse_labels(buf, &mut self.labels)?;
            }
            None
        };
        self.series.push(SeriesView {
            labels: l0..idx(self.labels.len())?,
            samples: s0..idx(self.samples.len())?,
            raw_labels,
        });
        Ok(())
    }
}

/// Checks one decoded body against `prost`'s decoding of the same bytes: whenever
/// [`WriteView::decode`] accepts, `prost` must accept too and agree on every series, label,
/// sample (bit for bit) and metadata entry. Panics on a disagreement; the fuzz target and the
/// corpus replay test call it.
pub fn fuzz_check(raw: &[u8]) {
    use prost::Message;
    let mine = WriteView::decode(raw);
    let theirs = super::proto::WriteRequest::decode(raw);
    let Ok(v) = mine else { return };
    let p = match theirs {
        Ok(p) => p,
        Err(e) => panic!("zero-copy reader accepted what prost refuses: {e}"),
    };
    assert_eq!(v.series.len(), p.timeseries.len());
    for (s, ts) in v.series.iter().zip(&p.timeseries) {
        let ls = v.series_labels(s);
        assert_eq!(ls.len(), ts.labels.len());
        for ((n, val), l) in ls.iter().zip(&ts.labels) {
            assert_eq!(*n, l.name);
            assert_eq!(*val, l.value);
        }
        let ss = v.series_samples(s);
        assert_eq!(ss.len(), ts.samples.len());
        for ((t, val), x) in ss.iter().zip(&ts.samples) {
            assert_eq!(*t, x.timestamp);
            assert_eq!(val.to_bits(), x.value.to_bits());
        }
    }
    assert_eq!(
        v.exemplars,
        p.timeseries
            .iter()
            .map(|t| t.exemplars.len())
            .sum::<usize>()
    );
    // the lazy decoding accepts the same, and its labels parse to the same
    let mut lz = WriteView::default();
    if let Err(e) = lz.decode_lazy_into(raw) {
        panic!("lazy decoding refuses what the full one accepts: {e}");
    }
    assert_eq!(lz.series.len(), v.series.len());
    let mut pairs = Vec::new();
    for (ls, s) in lz.series.iter().zip(&v.series) {
        assert_eq!(ls.samples, s.samples);
        assert_eq!(ls.raw_labels, s.raw_labels);
        pairs.clear();
        match &ls.raw_labels {
            Some(rr) => parse_labels(&raw[rr.start as usize..rr.end as usize], &mut pairs)
                .expect("raw label bytes of an accepted body parse"),
            None => pairs.extend_from_slice(lz.series_labels(ls)),
        }
        assert_eq!(pairs.as_slice(), v.series_labels(s));
    }
    assert_eq!(v.metadata.len(), p.metadata.len());
    for (m, pm) in v.metadata.iter().zip(&p.metadata) {
        assert_eq!(m.typ, pm.r#type);
        assert_eq!(m.family, pm.metric_family_name);
        assert_eq!(m.help, pm.help);
        assert_eq!(m.unit, pm.unit);
    }
}

/// The fuzz target's body: `data` read as an uncompressed `WriteRequest`, and as a snappy
/// block body (at most 1 MiB decompressed) when it is one; see [`fuzz_check`].
pub fn fuzz_decode(data: &[u8]) {
    fuzz_check(data);
    if let Ok(n) = snap::raw::decompress_len(data) {
        if n <= 1 << 20 {
            if let Ok(raw) = snap::raw::Decoder::new().decompress_vec(data) {
                fuzz_check(&raw);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::proto::{Exemplar, Label, MetricMetadata, Sample, TimeSeries, WriteRequest};
    use prost::Message;

    fn req() -> WriteRequest {
        WriteRequest {
            timeseries: vec![
                TimeSeries {
                    labels: vec![
                        Label {
                            name: "__name__".into(),
                            value: "vllm:num_requests_running".into(),
                        },
                        Label {
                            name: "model_name".into(),
                            value: "llama-3-8b".into(),
                        },
                    ],
                    samples: vec![
                        Sample {
                            value: 3.0,
                            timestamp: 1_700_000_000_000,
                        },
                        Sample {
                            value: f64::from_bits(0x7ff0000000000002),
                            timestamp: 1_700_000_015_000,
                        },
                    ],
                    exemplars: vec![Exemplar {
                        labels: vec![Label {
                            name: "trace_id".into(),
                            value: "abc".into(),
                        }],
                        value: 1.0,
                        timestamp: -5,
                    }],
                },
                TimeSeries {
                    labels: vec![Label {
                        name: "__name__".into(),
                        value: "up".into(),
                    }],
                    samples: vec![Sample {
                        value: 1.0,
                        timestamp: -1,
                    }],
                    exemplars: vec![],
                },
            ],
            metadata: vec![MetricMetadata {
                r#type: 2,
                metric_family_name: "vllm:num_requests_running".into(),
                help: "Running requests.".into(),
                unit: String::new(),
            }],
        }
    }

    #[test]
    fn matches_prost() {
        let raw = req().encode_to_vec();
        let v = WriteView::decode(&raw).unwrap();
        assert_eq!(v.series.len(), 2);
        assert_eq!(
            v.series_labels(&v.series[0])[1],
            ("model_name", "llama-3-8b")
        );
        assert_eq!(v.series_samples(&v.series[1]), &[(-1, 1.0)]);
        assert_eq!(v.exemplars, 1);
        assert_eq!(v.metadata[0].help, "Running requests.");
        fuzz_check(&raw);
    }

    #[test]
    fn truncations_and_garbage_are_errors() {
        let raw = req().encode_to_vec();
        for n in 0..raw.len() {
            // never panics; prefixes that cut a field are errors
            if let Ok(v) = WriteView::decode(&raw[..n]) {
                assert!(v.series.len() <= 2);
            }
            fuzz_check(&raw[..n]);
        }
        assert_eq!(
            WriteView::decode(&[0x0b]).unwrap_err(),
            WireError::WireType {
                field: 1,
                wire_type: 3
            }
        );
        assert_eq!(
            WriteView::decode(&[0x0a, 0x05, 0x0a]).unwrap_err(),
            WireError::Truncated
        );
        // a label value that is not UTF-8
        let bad = [0x0a, 0x06, 0x0a, 0x04, 0x12, 0x02, 0xff, 0xfe];
        assert_eq!(WriteView::decode(&bad).unwrap_err(), WireError::Utf8);
        assert_eq!(
            WriteView::decode(&[0xff; 11]).unwrap_err(),
            WireError::BadVarint
        );
    }
}
