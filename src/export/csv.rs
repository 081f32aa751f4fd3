//! The CSV sink: a header line `timestamp,value,__name__,<labels...>`, then one line per
//! sample. Timestamps are integer milliseconds since the epoch; values are written in the
//! shortest form that reads back to the same `f64` (`NaN`, `+Inf`, `-Inf` as in Prometheus);
//! a missing label is an empty field. Fields are quoted per RFC 4180 when needed.

use std::io::Write;
use std::path::Path;

use inferdb_storage::Labels;

use super::{label_column, write_all, ExportError, RowSink};

/// Writes rows as CSV.
pub struct CsvSink {
    w: Box<dyn Write>,
    label_names: Vec<String>,
    /// `,<name>,<label values...>\n` of the current series, pre-rendered.
    suffix: Vec<u8>,
    buf: Vec<u8>,
}

/// Appends `s` as a CSV field, quoted when it holds `,`, `"`, CR or LF.
pub fn push_field(out: &mut Vec<u8>, s: &str) {
    if s.contains([',', '"', '\n', '\r']) {
        out.push(b'"');
        for b in s.bytes() {
            if b == b'"' {
                out.push(b'"');
            }
            out.push(b);
        }
        out.push(b'"');
    } else {
        out.extend_from_slice(s.as_bytes());
    }
}

/// Formats a value as Prometheus does for the special values, otherwise in Rust's shortest
/// round-trip form.
pub fn push_value(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v == f64::INFINITY {
        out.extend_from_slice(b"+Inf");
    } else if v == f64::NEG_INFINITY {
        out.extend_from_slice(b"-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

impl CsvSink {
    /// A sink writing to `w`; writes the header line at once.
    pub fn new(mut w: Box<dyn Write>, label_names: &[String]) -> Result<Self, ExportError> {
        let mut h = Vec::new();
        h.extend_from_slice(b"timestamp,value,__name__");
        for n in label_names {
            h.push(b',');
            push_field(&mut h, &label_column(n));
        }
        h.push(b'\n');
        write_all(&mut w, &h, Path::new("<csv>"))?;
        Ok(CsvSink {
            w,
            label_names: label_names.to_vec(),
            suffix: Vec::new(),
            buf: Vec::with_capacity(1 << 16),
        })
    }
}

impl RowSink for CsvSink {
    fn series(&mut self, name: &str, labels: &Labels) -> Result<(), ExportError> {
        self.suffix.clear();
        self.suffix.push(b',');
        push_field(&mut self.suffix, name);
        for n in &self.label_names {
            self.suffix.push(b',');
            if let Some(v) = labels.get(n) {
                push_field(&mut self.suffix, v);
            }
        }
        self.suffix.push(b'\n');
        Ok(())
    }

    fn rows(&mut self, ts: &[i64], vs: &[f64]) -> Result<(), ExportError> {
        for (&t, &v) in ts.iter().zip(vs) {
            let _ = write!(self.buf, "{t},");
            push_value(&mut self.buf, v);
            self.buf.extend_from_slice(&self.suffix);
            if self.buf.len() >= 1 << 16 {
                write_all(&mut self.w, &self.buf, Path::new("<csv>"))?;
                self.buf.clear();
            }
        }
        Ok(())
    }

    fn close(mut self: Box<Self>) -> Result<(), ExportError> {
        write_all(&mut self.w, &self.buf, Path::new("<csv>"))?;
        self.w
            .flush()
            .map_err(|e| ExportError::io(Path::new("<csv>"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_values() {
        let mut b = Vec::new();
        push_field(&mut b, "a,\"b\"");
        assert_eq!(b, b"\"a,\"\"b\"\"\"");
        let mut b = Vec::new();
        push_value(&mut b, 0.1);
        b.push(b' ');
        push_value(&mut b, f64::NEG_INFINITY);
        b.push(b' ');
        push_value(&mut b, 1e300);
        assert_eq!(String::from_utf8(b).unwrap(), format!("0.1 -Inf {}", 1e300));
    }
}
