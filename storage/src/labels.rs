//! Label sets: the identity of a series.
//!
//! A series is a set of `(name, value)` pairs sorted by name, one of which is `__name__`.
//! Names are validated as Prometheus validates them; values are any UTF-8.

use std::fmt;

use crate::error::Error;

/// The label that holds a series' metric name.
pub const METRIC_NAME: &str = "__name__";

/// One label pair.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label {
    /// Label name, `[a-zA-Z_][a-zA-Z0-9_]*` (or `__name__`).
    pub name: String,
    /// Label value, any UTF-8.
    pub value: String,
}

impl Label {
    /// A label pair from anything string-like.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Label {
            name: name.into(),
            value: value.into(),
        }
    }
}

/// A sorted set of labels with unique names. Empty values are dropped, as in Prometheus,
/// where a label with an empty value is the same as an absent label.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Labels(Vec<Label>);

impl Labels {
    /// Builds a label set: sorts by name, drops empty values. On duplicate names the last wins.
    pub fn new(mut labels: Vec<Label>) -> Self {
        labels.retain(|l| !l.value.is_empty());
        labels.sort_by(|a, b| a.name.cmp(&b.name));
        // keep the last of equal names
        let mut out: Vec<Label> = Vec::with_capacity(labels.len());
        for l in labels {
            match out.last_mut() {
                Some(prev) if prev.name == l.name => *prev = l,
                _ => out.push(l),
            }
        }
        Labels(out)
    }

    /// Builds a label set from `(name, value)` pairs.
    pub fn from_pairs<N: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (N, V)>,
    ) -> Self {
        Labels::new(pairs.into_iter().map(|(n, v)| Label::new(n, v)).collect())
    }

    /// Wraps labels already sorted by name with unique names and no empty values.
    pub fn from_sorted_unchecked(labels: Vec<Label>) -> Self {
        debug_assert!(labels.windows(2).all(|w| w[0].name < w[1].name));
        Labels(labels)
    }

    /// The value of label `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|l| l.name.as_str().cmp(name))
            .ok()
            .map(|i| self.0[i].value.as_str())
    }

    /// The metric name (`__name__`), if present.
    pub fn metric_name(&self) -> Option<&str> {
        self.get(METRIC_NAME)
    }

    /// Iterates the labels in name order.
    pub fn iter(&self) -> std::slice::Iter<'_, Label> {
        self.0.iter()
    }

    /// The number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set has no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The labels as a slice, sorted by name.
    pub fn as_slice(&self) -> &[Label] {
        &self.0
    }

    /// Consumes the set, giving back its sorted labels.
    pub fn into_vec(self) -> Vec<Label> {
        self.0
    }

    /// A copy with label `name` set to `value` (removed when `value` is empty).
    pub fn with(&self, name: &str, value: &str) -> Labels {
        let mut v: Vec<Label> = self.0.iter().filter(|l| l.name != name).cloned().collect();
        if !value.is_empty() {
            v.push(Label::new(name, value));
        }
        Labels::new(v)
    }

    /// A copy without label `name`.
    pub fn without(&self, name: &str) -> Labels {
        Labels(self.0.iter().filter(|l| l.name != name).cloned().collect())
    }

    /// Checks names and values as Prometheus does: a metric name must be present and valid,
    /// every label name valid. Values are Rust strings, hence UTF-8 already.
    pub fn validate(&self) -> Result<(), Error> {
        match self.metric_name() {
            None => return Err(Error::InvalidLabels("missing metric name".into())),
            Some(n) if !is_valid_metric_name(n) => {
                return Err(Error::InvalidLabels(format!("invalid metric name {n:?}")))
            }
            _ => {}
        }
        for l in &self.0 {
            if l.name != METRIC_NAME && !is_valid_label_name(&l.name) {
                return Err(Error::InvalidLabels(format!(
                    "invalid label name {:?}",
                    l.name
                )));
            }
        }
        Ok(())
    }

    /// A stable 64-bit hash of the label set (FNV-1a over names and values), used to shard
    /// series maps. Not a cryptographic hash; collisions are resolved by comparing labels.
    pub fn stable_hash(&self) -> u64 {
        let mut h: u64 = 0xcbf29ce484222325;
        for l in &self.0 {
            for b in l
                .name
                .bytes()
                .chain([0xff])
                .chain(l.value.bytes())
                .chain([0xff])
            {
                h ^= b as u64;
                h = h.wrapping_mul(0x100000001b3);
            }
        }
        h
    }
}

impl<'a> IntoIterator for &'a Labels {
    type Item = &'a Label;
    type IntoIter = std::slice::Iter<'a, Label>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Prints as PromQL does: `name{a="b", c="d"}`, with values escaped.
impl fmt::Display for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.metric_name();
        if let Some(n) = name {
            f.write_str(n)?;
        }
        let rest: Vec<&Label> = self.0.iter().filter(|l| l.name != METRIC_NAME).collect();
        if rest.is_empty() && name.is_some() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, l) in rest.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}=\"", l.name)?;
            for c in l.value.chars() {
                match c {
                    '\\' => f.write_str("\\\\")?,
                    '"' => f.write_str("\\\"")?,
                    '\n' => f.write_str("\\n")?,
                    c => write!(f, "{c}")?,
                }
            }
            f.write_str("\"")?;
        }
        f.write_str("}")
    }
}

/// Whether `s` is a valid metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_valid_metric_name(s: &str) -> bool {
    let mut b = s.bytes();
    match b.next() {
        Some(c) if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {}
        _ => return false,
    }
    b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// Whether `s` is a valid label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn is_valid_label_name(s: &str) -> bool {
    let mut b = s.bytes();
    match b.next() {
        Some(c) if c.is_ascii_alphabetic() || c == b'_' => {}
        _ => return false,
    }
    b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_dedups_and_drops_empty() {
        let l = Labels::from_pairs([("b", "1"), ("a", "2"), ("c", ""), ("b", "3")]);
        assert_eq!(l.as_slice(), &[Label::new("a", "2"), Label::new("b", "3")]);
        assert_eq!(l.get("b"), Some("3"));
        assert_eq!(l.get("c"), None);
    }

    #[test]
    fn validates_names() {
        assert!(is_valid_metric_name("vllm:num_requests_running"));
        assert!(!is_valid_metric_name("1abc"));
        assert!(is_valid_label_name("model_name"));
        assert!(!is_valid_label_name("a:b"));
        let l = Labels::from_pairs([("__name__", "vllm:x"), ("bad-name", "v")]);
        assert!(l.validate().is_err());
        assert!(Labels::from_pairs([("a", "b")]).validate().is_err());
    }

    #[test]
    fn displays_like_promql() {
        let l = Labels::from_pairs([("__name__", "up"), ("job", "a\"b")]);
        assert_eq!(l.to_string(), r#"up{job="a\"b"}"#);
        assert_eq!(Labels::from_pairs([("__name__", "up")]).to_string(), "up");
        assert_eq!(Labels::from_pairs([("a", "b")]).to_string(), r#"{a="b"}"#);
    }
}
