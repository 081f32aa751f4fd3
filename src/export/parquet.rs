//! The Parquet sink: long format, zstd, dictionary-encoded string columns.
//!
//! Schema (see README, "Parquet export schema"):
//! - `timestamp`: `timestamp[ms, tz=UTC]` (Parquet `TIMESTAMP(MILLIS, isAdjustedToUTC)`),
//!   not null, delta-encoded;
//! - `value`: `float64`, not null (NaN, ±Inf and Prometheus' stale-marker NaN kept bit for
//!   bit);
//! - `__name__`: the metric name, `dictionary<int32, utf8>`, not null;
//! - one `dictionary<int32, utf8>` column per label name (sorted by name), null where a series
//!   lacks the label.
//!
//! Rows are buffered and written as one row group every `row_group_rows` rows. `timestamp`
//! and `value` go through the Arrow column writers. Label values are constant within a
//! series, so each string column is kept as a per-row-group dictionary (looked up once per
//! series) plus runs of keys, and written as Parquet pages directly: a PLAIN dictionary page
//! and one RLE_DICTIONARY data page of RLE runs (zstd), with chunk statistics and an offset
//! index. The Arrow writer would hash every row's string into its own dictionary again, which
//! was half of the export's CPU time.

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use inferdb_storage::Labels;
use parquet::arrow::arrow_writer::{compute_leaves, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::data_type::ByteArray;
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite};
use parquet::schema::types::{ColumnDescPtr, ColumnPath};

use super::{label_column, ExportError, RowSink};

/// The fixed column names.
pub const TIMESTAMP_COLUMN: &str = "timestamp";
/// The value column.
pub const VALUE_COLUMN: &str = "value";
/// The metric name column.
pub const NAME_COLUMN: &str = "__name__";

/// The key of a null in [`DictCol::runs`].
const NULL_KEY: u32 = u32::MAX;

/// A dictionary-encoded string column of one row group, kept as runs of keys.
///
/// Label values are constant within a series, so a column is a handful of runs per series;
/// it is written as Parquet pages directly (dictionary page + one RLE_DICTIONARY data page)
/// instead of through the Arrow writer, which would hash every row's string again.
struct DictCol {
    values: Vec<String>,
    index: HashMap<String, u32>,
    /// (key or [`NULL_KEY`], rows), adjacent equal keys merged.
    runs: Vec<(u32, u64)>,
}

impl DictCol {
    fn new() -> Self {
        DictCol {
            values: Vec::new(),
            index: HashMap::new(),
            runs: Vec::new(),
        }
    }

    fn key(&mut self, v: &str) -> u32 {
        if let Some(&k) = self.index.get(v) {
            return k;
        }
        let k = self.values.len() as u32;
        self.values.push(v.to_string());
        self.index.insert(v.to_string(), k);
        k
    }

    fn push(&mut self, key: Option<u32>, n: usize) {
        let k = key.unwrap_or(NULL_KEY);
        match self.runs.last_mut() {
            Some((last, len)) if *last == k => *len += n as u64,
            _ => self.runs.push((k, n as u64)),
        }
    }

    fn clear(&mut self) {
        self.values.clear();
        self.index.clear();
        self.runs.clear();
    }

    /// Encodes this column chunk (dictionary page + one data page, zstd) and clears it.
    fn finish(
        &mut self,
        descr: &ColumnDescPtr,
        zstd_level: i32,
    ) -> Result<(Bytes, ColumnCloseResult), ExportError> {
        let level = ZstdLevel::try_new(zstd_level)?;
        let nullable = descr.max_def_level() > 0;
        // dictionary page: PLAIN byte arrays
        let mut dict = Vec::new();
        for v in &self.values {
            dict.extend_from_slice(&(v.len() as u32).to_le_bytes());
            dict.extend_from_slice(v.as_bytes());
        }
        // data page v1: [definition levels: u32 length + RLE (bit width 1)] +
        // [bit width + RLE runs of dictionary indices]
        let mut page = Vec::new();
        let (mut rows, mut nulls, mut plain_bytes) = (0u64, 0u64, 0i64);
        if nullable {
            let mut levels = Vec::new();
            let mut i = 0;
            while i < self.runs.len() {
                let present = self.runs[i].0 != NULL_KEY;
                let mut n = 0;
                while i < self.runs.len() && (self.runs[i].0 != NULL_KEY) == present {
                    n += self.runs[i].1;
                    i += 1;
                }
                rle_run(&mut levels, u64::from(present), n, 1);
            }
            page.extend_from_slice(&(levels.len() as u32).to_le_bytes());
            page.extend_from_slice(&levels);
        }
        let bit_width = bits(self.values.len().saturating_sub(1) as u64);
        page.push(bit_width);
        let mut emit = |key: u32, n: u64, page: &mut Vec<u8>| -> Result<(), ExportError> {
            let v = self.values.get(key as usize).ok_or_else(|| {
                ExportError::Usage(format!("internal: dictionary key {key} out of range"))
            })?;
            plain_bytes += v.len() as i64 * n as i64;
            rle_run(page, u64::from(key), n, bit_width);
            Ok(())
        };
        // the values hold no nulls: runs of one key split only by nulls are one run
        let mut cur: Option<(u32, u64)> = None;
        for &(key, n) in &self.runs {
            rows += n;
            if key == NULL_KEY {
                nulls += n;
                continue;
            }
            match &mut cur {
                Some((k, m)) if *k == key => *m += n,
                _ => {
                    if let Some((k, m)) = cur.take() {
                        emit(k, m, &mut page)?;
                    }
                    cur = Some((key, n));
                }
            }
        }
        if let Some((k, m)) = cur {
            emit(k, m, &mut page)?;
        }
        let null_count = nulls;

        let mut sink = TrackedWrite::new(Vec::new());
        let mut pw = SerializedPageWriter::new(&mut sink);
        let dict_len = dict.len();
        let dspec = pw.write_page(CompressedPage::new(
            Page::DictionaryPage {
                buf: Bytes::from(zstd_bytes(&dict, level)?),
                num_values: self.values.len() as u32,
                encoding: Encoding::PLAIN,
                is_sorted: false,
            },
            dict_len,
        ))?;
        let page_len = page.len();
        let pspec = pw.write_page(CompressedPage::new(
            Page::DataPage {
                buf: Bytes::from(zstd_bytes(&page, level)?),
                num_values: rows as u32,
                encoding: Encoding::RLE_DICTIONARY,
                def_level_encoding: Encoding::RLE,
                rep_level_encoding: Encoding::RLE,
                statistics: None,
            },
            page_len,
        ))?;
        pw.close()?;
        let buf = sink.into_inner()?;

        // chunk statistics: min and max of the values present (each dictionary entry is used)
        let min = self
            .values
            .iter()
            .min()
            .map(|s| ByteArray::from(s.as_str()));
        let max = self
            .values
            .iter()
            .max()
            .map(|s| ByteArray::from(s.as_str()));
        let stats = Statistics::new(min, max, None, Some(null_count), false);
        let metadata = ColumnChunkMetaData::builder(descr.clone())
            .set_compression(Compression::ZSTD(level))
            .set_encodings(vec![
                Encoding::PLAIN,
                Encoding::RLE,
                Encoding::RLE_DICTIONARY,
            ])
            .set_num_values(rows as i64)
            .set_total_compressed_size((dspec.compressed_size + pspec.compressed_size) as i64)
            .set_total_uncompressed_size((dspec.uncompressed_size + pspec.uncompressed_size) as i64)
            .set_dictionary_page_offset(Some(dspec.offset as i64))
            .set_data_page_offset(pspec.offset as i64)
            .set_statistics(stats)
            .set_unencoded_byte_array_data_bytes(Some(plain_bytes))
            .build()?;
        let offset_index = OffsetIndexMetaData {
            page_locations: vec![PageLocation {
                offset: pspec.offset as i64,
                compressed_page_size: pspec.compressed_size as i32,
                first_row_index: 0,
            }],
            unencoded_byte_array_data_bytes: Some(vec![plain_bytes]),
        };
        self.clear();
        Ok((
            Bytes::from(buf),
            ColumnCloseResult {
                bytes_written: (dspec.bytes_written + pspec.bytes_written),
                rows_written: rows,
                metadata,
                bloom_filter: None,
                column_index: None,
                offset_index: Some(offset_index),
            },
        ))
    }
}

/// Bits needed for `max`.
fn bits(max: u64) -> u8 {
    (64 - max.leading_zeros()) as u8
}

/// Appends one RLE run (`n` times `value`) of the RLE/bit-packing hybrid encoding.
fn rle_run(buf: &mut Vec<u8>, value: u64, mut n: u64, bit_width: u8) {
    let width = usize::from(bit_width).div_ceil(8);
    // run lengths are u32 varints in practice: split very long runs
    const MAX_RUN: u64 = (1 << 30) - 1;
    while n > 0 {
        let m = n.min(MAX_RUN);
        let mut h = m << 1;
        while h >= 0x80 {
            buf.push((h as u8 & 0x7f) | 0x80);
            h >>= 7;
        }
        buf.push(h as u8);
        buf.extend_from_slice(&value.to_le_bytes()[..width]);
        n -= m;
    }
}

fn zstd_bytes(buf: &[u8], level: ZstdLevel) -> Result<Vec<u8>, ExportError> {
    zstd::bulk::compress(buf, level.compression_level())
        .map_err(|e| ExportError::Parquet(parquet::errors::ParquetError::External(Box::new(e))))
}

/// The Arrow schema of an export file with these label columns (names as in the labels).
pub fn schema(label_names: &[String]) -> SchemaRef {
    let dict = || DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let mut fields = vec![
        Field::new(
            TIMESTAMP_COLUMN,
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
        Field::new(VALUE_COLUMN, DataType::Float64, false),
        Field::new(NAME_COLUMN, dict(), false),
    ];
    for n in label_names {
        fields.push(Field::new(label_column(n), dict(), true));
    }
    Arc::new(Schema::new(fields))
}

/// Writes rows to one Parquet file.
pub struct ParquetSink {
    writer: SerializedFileWriter<File>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    label_names: Vec<String>,
    row_group_rows: usize,
    zstd_level: i32,
    row_groups: usize,
    ts: Vec<i64>,
    vs: Vec<f64>,
    name: DictCol,
    labels: Vec<DictCol>,
    /// The current series: metric name and label values per column.
    cur_name: String,
    cur_values: Vec<Option<String>>,
    cur_keys: Option<(u32, Vec<Option<u32>>)>,
}

impl ParquetSink {
    /// A sink writing to `file` with one column per name in `label_names` (sorted, without
    /// `__name__`).
    pub fn new(
        file: File,
        label_names: &[String],
        row_group_rows: usize,
        zstd_level: i32,
    ) -> Result<Self, ExportError> {
        let schema = schema(label_names);
        // a data page holds a whole row group of a label column: its row count is an i32
        let rg = row_group_rows.clamp(1, i32::MAX as usize);
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(zstd_level)?))
            .set_max_row_group_size(rg)
            .set_data_page_row_count_limit(64 * 1024)
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_column_dictionary_enabled(ColumnPath::from(TIMESTAMP_COLUMN), false)
            .set_column_encoding(
                ColumnPath::from(TIMESTAMP_COLUMN),
                Encoding::DELTA_BINARY_PACKED,
            )
            .set_column_dictionary_enabled(ColumnPath::from(VALUE_COLUMN), false)
            .set_created_by(format!("inferdb {}", env!("CARGO_PKG_VERSION")))
            .build();
        // The Arrow writer sets up the Parquet schema and the embedded Arrow schema (so readers
        // see dictionary<int32, utf8> columns); row groups are then written column by column.
        let (writer, factory) =
            ArrowWriter::try_new(file, schema.clone(), Some(props))?.into_serialized_writer()?;
        let cap = rg.min(1 << 20);
        Ok(ParquetSink {
            writer,
            factory,
            schema,
            label_names: label_names.to_vec(),
            row_group_rows: rg,
            zstd_level,
            row_groups: 0,
            ts: Vec::with_capacity(cap),
            vs: Vec::with_capacity(cap),
            name: DictCol::new(),
            labels: label_names.iter().map(|_| DictCol::new()).collect(),
            cur_name: String::new(),
            cur_values: vec![None; label_names.len()],
            cur_keys: None,
        })
    }

    fn keys(&mut self) -> (u32, Vec<Option<u32>>) {
        if let Some(k) = &self.cur_keys {
            return k.clone();
        }
        let nk = self.name.key(&self.cur_name);
        let lk: Vec<Option<u32>> = self
            .labels
            .iter_mut()
            .zip(&self.cur_values)
            .map(|(c, v)| v.as_deref().map(|v| c.key(v)))
            .collect();
        self.cur_keys = Some((nk, lk.clone()));
        (nk, lk)
    }

    fn flush_row_group(&mut self) -> Result<(), ExportError> {
        if self.ts.is_empty() {
            return Ok(());
        }
        let cap = self.row_group_rows.min(1 << 20);
        let ts: ArrayRef = Arc::new(
            TimestampMillisecondArray::from(std::mem::replace(
                &mut self.ts,
                Vec::with_capacity(cap),
            ))
            .with_timezone("UTC"),
        );
        let vs: ArrayRef = Arc::new(Float64Array::from(std::mem::replace(
            &mut self.vs,
            Vec::with_capacity(cap),
        )));
        let descrs: Vec<ColumnDescPtr> = self.writer.schema_descr().columns().to_vec();
        let writers = self.factory.create_column_writers(self.row_groups)?;
        let mut rg = self.writer.next_row_group()?;
        for ((field, array), mut w) in self.schema.fields().iter().zip([ts, vs]).zip(writers) {
            for leaf in compute_leaves(field, &array)? {
                w.write(&leaf)?;
            }
            w.close()?.append_to_row_group(&mut rg)?;
        }
        let level = self.zstd_level;
        for (i, c) in std::iter::once(&mut self.name)
            .chain(self.labels.iter_mut())
            .enumerate()
        {
            let descr = descrs.get(2 + i).ok_or_else(|| {
                ExportError::Usage(format!("internal: no parquet column {}", 2 + i))
            })?;
            let (data, close) = c.finish(descr, level)?;
            rg.append_column(&data, close)?;
        }
        rg.close()?;
        self.row_groups += 1;
        // the dictionaries were cleared: keys must be looked up again
        self.cur_keys = None;
        Ok(())
    }
}

impl RowSink for ParquetSink {
    fn series(&mut self, name: &str, labels: &Labels) -> Result<(), ExportError> {
        self.cur_name.clear();
        self.cur_name.push_str(name);
        for (slot, n) in self.cur_values.iter_mut().zip(&self.label_names) {
            *slot = labels.get(n).map(str::to_string);
        }
        self.cur_keys = None;
        Ok(())
    }

    fn rows(&mut self, mut ts: &[i64], mut vs: &[f64]) -> Result<(), ExportError> {
        while !ts.is_empty() {
            let room = self.row_group_rows - self.ts.len();
            let n = room.min(ts.len());
            let (nk, lk) = self.keys();
            self.ts.extend_from_slice(&ts[..n]);
            self.vs.extend_from_slice(&vs[..n]);
            self.name.push(Some(nk), n);
            for (c, k) in self.labels.iter_mut().zip(lk) {
                c.push(k, n);
            }
            ts = &ts[n..];
            vs = &vs[n..];
            if self.ts.len() >= self.row_group_rows {
                self.flush_row_group()?;
            }
        }
        Ok(())
    }

    fn close(mut self: Box<Self>) -> Result<(), ExportError> {
        self.flush_row_group()?;
        let f = self.writer.into_inner()?;
        f.sync_all()
            .map_err(|e| ExportError::io(std::path::Path::new("<parquet file>"), e))?;
        Ok(())
    }
}
