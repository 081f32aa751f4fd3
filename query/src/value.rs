//! The values PromQL expressions evaluate to, and the annotations (warnings and infos) a query
//! returns next to its value.

use std::fmt;

use crate::go_format;
use crate::parser::go_quote;

pub use inferdb_storage::{Label, Labels};

/// One float point of a series: a timestamp in milliseconds and a value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FPoint {
    /// Milliseconds since the Unix epoch.
    pub t: i64,
    /// The value.
    pub f: f64,
}

/// One element of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series' labels.
    pub metric: Labels,
    /// The timestamp: the evaluation time, except for samples straight out of a vector selector,
    /// which keep the stored sample's time (what `timestamp()` reports).
    pub t: i64,
    /// The value.
    pub f: f64,
    /// Set when the metric name is to be removed at the end of the query (Prometheus 3's
    /// delayed name removal).
    pub drop_name: bool,
}

/// One series of a range vector (or of a range query's result).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The series' labels.
    pub metric: Labels,
    /// The points, in time order.
    pub floats: Vec<FPoint>,
    /// Set when the metric name is to be removed at the end of the query.
    pub drop_name: bool,
}

/// An instant vector.
pub type Vector = Vec<Sample>;
/// A range vector.
pub type Matrix = Vec<Series>;

/// The result value of a query.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A single number at a time.
    Scalar {
        /// Milliseconds.
        t: i64,
        /// The number.
        v: f64,
    },
    /// A string at a time.
    String {
        /// Milliseconds.
        t: i64,
        /// The string.
        v: String,
    },
    /// An instant vector (instant queries).
    Vector(Vector),
    /// A range vector: the result of a range query, or of an instant query of a range
    /// selector or subquery. Series are sorted by labels.
    Matrix(Matrix),
}

impl Value {
    /// The PromQL type name of the value (`scalar`, `string`, `vector`, `matrix`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Scalar { .. } => "scalar",
            Value::String { .. } => "string",
            Value::Vector(_) => "vector",
            Value::Matrix(_) => "matrix",
        }
    }
}

/// Whether an annotation is a warning or an info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnnotationKind {
    /// `PromQL warning: ...`
    Warning,
    /// `PromQL info: ...`
    Info,
}

/// Extra details of the "histogram_quantile needed to be fixed for monotonicity" info, merged
/// over all the steps and series it happened at.
#[derive(Debug, Clone, PartialEq)]
pub struct MonotonicityDetails {
    /// First evaluation time it happened at (ms).
    pub min_ts: i64,
    /// Last evaluation time it happened at (ms).
    pub max_ts: i64,
    /// Smallest bucket bound fixed.
    pub min_bucket: f64,
    /// Largest bucket bound fixed.
    pub max_bucket: f64,
    /// Largest decrease fixed.
    pub max_diff: f64,
    /// How many times it happened.
    pub count: usize,
}

/// One annotation: a message without position and the byte offset of the expression it is
/// about.
#[derive(Debug, Clone, PartialEq)]
pub struct Annotation {
    /// Warning or info.
    pub kind: AnnotationKind,
    /// The message including its `PromQL warning: ` / `PromQL info: ` prefix.
    pub message: String,
    /// Byte offset into the query text of the expression concerned.
    pub pos: Option<usize>,
    /// Details for the monotonicity info.
    pub monotonicity: Option<MonotonicityDetails>,
}

impl Annotation {
    /// Formats the annotation as Prometheus does once the query text is known:
    /// `message (line:column)`.
    pub fn format(&self, query: &str) -> String {
        let pos = match self.pos {
            Some(p) => format!(" ({})", line_col(query, p)),
            None => String::new(),
        };
        match &self.monotonicity {
            Some(m) => format!(
                "{}, from buckets {} to {}, with a max diff of {}, over {} samples from {} to {}{}",
                self.message,
                fmt_g(m.min_bucket),
                fmt_g(m.max_bucket),
                fmt_2g(m.max_diff),
                m.count,
                rfc3339(m.min_ts),
                rfc3339(m.max_ts),
                pos
            ),
            None => format!("{}{}", self.message, pos),
        }
    }
}

/// `line:column` (both 1-based) of byte offset `pos` in `query`.
pub fn line_col(query: &str, pos: usize) -> String {
    let pos = pos.min(query.len());
    let before = &query.as_bytes()[..pos];
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    format!("{}:{}", line, pos - line_start + 1)
}

fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86400);
    let sod = secs.rem_euclid(86400);
    let (y, m, d) = crate::eval::functions::time::civil_from_days(days);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        y,
        m,
        d,
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Formats a float like Go's `%g` (shortest digits).
pub fn fmt_g(f: f64) -> String {
    go_format::format_float(f, go_format::FloatFormat::G)
}

fn fmt_2g(f: f64) -> String {
    go_format::format_float_g_prec(f, 2)
}

/// The annotations of a query, deduplicated by message as Prometheus does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Annotations {
    items: Vec<Annotation>,
}

impl Annotations {
    /// No annotations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an annotation unless one with the same message is there (the monotonicity info
    /// merges its details instead).
    pub fn add(&mut self, a: Annotation) {
        if let Some(existing) = self.items.iter_mut().find(|e| e.message == a.message) {
            if let (Some(e), Some(n)) = (&mut existing.monotonicity, &a.monotonicity) {
                e.min_ts = e.min_ts.min(n.min_ts);
                e.max_ts = e.max_ts.max(n.max_ts);
                e.min_bucket = e.min_bucket.min(n.min_bucket);
                e.max_bucket = e.max_bucket.max(n.max_bucket);
                e.max_diff = e.max_diff.max(n.max_diff);
                e.count += n.count;
            }
            return;
        }
        self.items.push(a);
    }

    /// Adds a warning `PromQL warning: <msg>` about the expression at byte offset `pos`.
    pub fn warn(&mut self, msg: impl fmt::Display, pos: Option<usize>) {
        self.add(Annotation {
            kind: AnnotationKind::Warning,
            message: format!("PromQL warning: {msg}"),
            pos,
            monotonicity: None,
        });
    }

    /// Adds an info `PromQL info: <msg>` about the expression at byte offset `pos`.
    pub fn info(&mut self, msg: impl fmt::Display, pos: Option<usize>) {
        self.add(Annotation {
            kind: AnnotationKind::Info,
            message: format!("PromQL info: {msg}"),
            pos,
            monotonicity: None,
        });
    }

    /// Merges another set in.
    pub fn merge(&mut self, other: Annotations) {
        for a in other.items {
            self.add(a);
        }
    }

    /// All annotations.
    pub fn iter(&self) -> std::slice::Iter<'_, Annotation> {
        self.items.iter()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The warnings, formatted against the query text.
    pub fn warnings(&self, query: &str) -> Vec<String> {
        self.of_kind(AnnotationKind::Warning, query)
    }

    /// The infos, formatted against the query text.
    pub fn infos(&self, query: &str) -> Vec<String> {
        self.of_kind(AnnotationKind::Info, query)
    }

    fn of_kind(&self, kind: AnnotationKind, query: &str) -> Vec<String> {
        self.items
            .iter()
            .filter(|a| a.kind == kind)
            .map(|a| a.format(query))
            .collect()
    }
}

/// Formats labels as Go's `labels.Labels.String()` does: `{a="b", c="d"}` with every label,
/// `__name__` included, values quoted Go-style.
pub fn go_labels_string(l: &Labels) -> String {
    let mut s = String::from("{");
    for (i, lab) in l.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&lab.name);
        s.push('=');
        s.push_str(&go_quote(&lab.value));
    }
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions() {
        assert_eq!(line_col("abc", 0), "1:1");
        assert_eq!(line_col("abc", 2), "1:3");
        assert_eq!(line_col("a\nbc", 3), "2:2");
    }

    #[test]
    fn dedup_annotations() {
        let mut a = Annotations::new();
        a.warn("x", Some(0));
        a.warn("x", Some(3));
        a.info("y", None);
        assert_eq!(
            a.warnings("abcd"),
            vec!["PromQL warning: x (1:1)".to_string()]
        );
        assert_eq!(a.infos("abcd"), vec!["PromQL info: y".to_string()]);
    }

    #[test]
    fn go_labels() {
        let l = Labels::from_pairs([("__name__", "m"), ("a", "x\"y")]);
        assert_eq!(go_labels_string(&l), r#"{__name__="m", a="x\"y"}"#);
    }
}
