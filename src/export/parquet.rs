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
//! Rows are buffered as Arrow arrays and written as one row group every `row_group_rows`
//! rows. Label values are constant within a series, so each column's dictionary is built
//! once per series and row group, and keys are appended in runs.

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

use arrow_array::builder::Int32Builder;
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Float64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use inferdb_storage::Labels;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::{label_column, ExportError, RowSink};

/// The fixed column names.
pub const TIMESTAMP_COLUMN: &str = "timestamp";
/// The value column.
pub const VALUE_COLUMN: &str = "value";
/// The metric name column.
pub const NAME_COLUMN: &str = "__name__";

/// A dictionary-encoded string column being built.
struct DictCol {
    values: Vec<String>,
    index: HashMap<String, i32>,
    keys: Int32Builder,
}

impl DictCol {
    fn new(cap: usize) -> Self {
        DictCol {
            values: Vec::new(),
            index: HashMap::new(),
            keys: Int32Builder::with_capacity(cap),
        }
    }

    fn key(&mut self, v: &str) -> i32 {
        if let Some(&k) = self.index.get(v) {
            return k;
        }
        let k = self.values.len() as i32;
        self.values.push(v.to_string());
        self.index.insert(v.to_string(), k);
        k
    }

    fn push(&mut self, key: Option<i32>, n: usize) {
        match key {
            Some(k) => self.keys.append_value_n(k, n),
            None => self.keys.append_nulls(n),
        }
    }

    fn finish(&mut self) -> Result<ArrayRef, ExportError> {
        let keys = self.keys.finish();
        let values = StringArray::from_iter_values(self.values.drain(..));
        self.index.clear();
        Ok(Arc::new(DictionaryArray::<Int32Type>::try_new(
            keys,
            Arc::new(values),
        )?))
    }
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
    writer: ArrowWriter<File>,
    schema: SchemaRef,
    label_names: Vec<String>,
    row_group_rows: usize,
    ts: Vec<i64>,
    vs: Vec<f64>,
    name: DictCol,
    labels: Vec<DictCol>,
    /// The current series: metric name and label values per column.
    cur_name: String,
    cur_values: Vec<Option<String>>,
    cur_keys: Option<(i32, Vec<Option<i32>>)>,
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
        let rg = row_group_rows.max(1);
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
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props))?;
        let cap = rg.min(1 << 20);
        Ok(ParquetSink {
            writer,
            schema,
            label_names: label_names.to_vec(),
            row_group_rows: rg,
            ts: Vec::with_capacity(cap),
            vs: Vec::with_capacity(cap),
            name: DictCol::new(cap),
            labels: label_names.iter().map(|_| DictCol::new(cap)).collect(),
            cur_name: String::new(),
            cur_values: vec![None; label_names.len()],
            cur_keys: None,
        })
    }

    fn keys(&mut self) -> (i32, Vec<Option<i32>>) {
        if let Some(k) = &self.cur_keys {
            return k.clone();
        }
        let nk = self.name.key(&self.cur_name);
        let lk: Vec<Option<i32>> = self
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
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(3 + self.labels.len());
        cols.push(Arc::new(
            TimestampMillisecondArray::from(std::mem::take(&mut self.ts)).with_timezone("UTC"),
        ));
        cols.push(Arc::new(Float64Array::from(std::mem::take(&mut self.vs))));
        cols.push(self.name.finish()?);
        for c in &mut self.labels {
            cols.push(c.finish()?);
        }
        let batch = RecordBatch::try_new(self.schema.clone(), cols)?;
        self.writer.write(&batch)?;
        self.writer.flush()?;
        let cap = self.row_group_rows.min(1 << 20);
        self.ts = Vec::with_capacity(cap);
        self.vs = Vec::with_capacity(cap);
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
