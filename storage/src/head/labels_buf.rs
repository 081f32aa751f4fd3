//! A compact, immutable label set for head series: one heap block of pointers to interned
//! `(name, value)` pairs in label order.
//!
//! Series of one deployment share almost every label pair (metric names, `job`, `model_name`,
//! `le`, ...; only `instance` differs between servers), so each pair is stored once by the
//! head's postings index ([`super::postings`]) and a series holds 8 bytes per label instead of
//! its strings. The pairs are reference counted, so a series handed to a querier keeps its
//! labels readable without a lock, even after the head dropped it.

use std::sync::Arc;

use crate::labels::{Label, Labels};

/// One interned label pair.
#[derive(Debug, PartialEq, Eq)]
pub struct LabelPair {
    /// The label name (shared by the pairs with this name).
    pub name: Arc<str>,
    /// The label value.
    pub value: Box<str>,
}

/// A label set as a list of interned pairs, in label (name) order.
#[derive(Clone, PartialEq, Eq)]
pub struct CompactLabels(Box<[Arc<LabelPair>]>);

impl CompactLabels {
    /// A label set of these interned pairs, which must be in label order.
    pub(crate) fn from_pairs(pairs: Vec<Arc<LabelPair>>) -> Self {
        CompactLabels(pairs.into_boxed_slice())
    }

    /// The interned pairs in order.
    pub(crate) fn pairs(&self) -> &[Arc<LabelPair>] {
        &self.0
    }

    /// The `(name, value)` pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.0.iter().map(|p| (&*p.name, &*p.value))
    }

    /// The value of label `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Unpacks into a [`Labels`].
    pub fn to_labels(&self) -> Labels {
        Labels::from_sorted_unchecked(self.iter().map(|(n, v)| Label::new(n, v)).collect())
    }

    /// Whether this is the label set `l`.
    pub fn eq_labels(&self, l: &Labels) -> bool {
        self.0.len() == l.len()
            && self
                .iter()
                .zip(l)
                .all(|((n, v), x)| n == x.name && v == x.value)
    }

    /// Heap bytes held by this set (the pairs are shared and counted by the postings).
    pub fn heap_bytes(&self) -> usize {
        self.0.len() * std::mem::size_of::<Arc<LabelPair>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intern(l: &Labels) -> CompactLabels {
        CompactLabels::from_pairs(
            l.iter()
                .map(|x| {
                    Arc::new(LabelPair {
                        name: x.name.as_str().into(),
                        value: x.value.as_str().into(),
                    })
                })
                .collect(),
        )
    }

    #[test]
    fn packs_and_unpacks() {
        let long = "x".repeat(300);
        let l = Labels::from_pairs([("__name__", "vllm:a"), ("model", long.as_str()), ("z", "ü")]);
        let c = intern(&l);
        assert_eq!(c.to_labels(), l);
        assert!(c.eq_labels(&l));
        assert!(!c.eq_labels(&l.with("z", "u")));
        assert!(!c.eq_labels(&l.without("z")));
        assert!(!intern(&l.without("z")).eq_labels(&l));
        assert_eq!(c.get("model"), Some(long.as_str()));
        assert_eq!(c.get("nope"), None);
        assert_eq!(c.heap_bytes(), 3 * 8);
        assert!(intern(&Labels::default()).to_labels().is_empty());
    }
}
