//! The head's inverted index: for every label pair, the sorted references of the series
//! that carry it, and the interned pair itself (which the series point to, see
//! [`CompactLabels`]).
//!
//! References are stored as `u32` (the head keeps series references below 2^32). Lists grow
//! by an eighth at a time, not by doubling: the lists of shared pairs (`job`, `model_name`)
//! hold every series, and doubling would leave up to half of them unused.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::labels_buf::{CompactLabels, LabelPair};
use crate::labels::Labels;

/// The series of one label pair.
struct Entry {
    pair: Arc<LabelPair>,
    refs: Vec<u32>,
}

/// Label name -> label value -> series references, with the interned pairs.
#[derive(Default)]
pub(crate) struct MemPostings {
    names: BTreeMap<Arc<str>, BTreeMap<Box<str>, Entry>>,
}

impl MemPostings {
    /// Interns the pairs of `labels`, adds series `r` to their lists and returns the series'
    /// label set.
    pub(crate) fn add(&mut self, labels: &Labels, r: u32) -> CompactLabels {
        let mut pairs = Vec::with_capacity(labels.len());
        for l in labels {
            let name: Arc<str> = match self.names.get_key_value(l.name.as_str()) {
                Some((k, _)) => k.clone(),
                None => l.name.as_str().into(),
            };
            let vals = self.names.entry(name.clone()).or_default();
            if !vals.contains_key(l.value.as_str()) {
                let pair = Arc::new(LabelPair {
                    name,
                    value: l.value.as_str().into(),
                });
                let e = Entry {
                    pair,
                    refs: Vec::new(),
                };
                vals.insert(l.value.as_str().into(), e);
            }
            let Some(e) = vals.get_mut(l.value.as_str()) else {
                continue;
            };
            if let Err(i) = e.refs.binary_search(&r) {
                if e.refs.len() == e.refs.capacity() {
                    e.refs.reserve_exact((e.refs.len() / 8).max(4));
                }
                e.refs.insert(i, r);
            }
            pairs.push(e.pair.clone());
        }
        CompactLabels::from_pairs(pairs)
    }

    /// Removes series `r` (with these labels) from the lists; drops pairs left without series.
    pub(crate) fn remove(&mut self, labels: &CompactLabels, r: u32) {
        for p in labels.pairs() {
            let Some(vals) = self.names.get_mut(&*p.name) else {
                continue;
            };
            if let Some(e) = vals.get_mut(&*p.value) {
                if let Ok(i) = e.refs.binary_search(&r) {
                    e.refs.remove(i);
                }
                if e.refs.is_empty() {
                    vals.remove(&*p.value);
                } else if e.refs.capacity() > e.refs.len() * 2 {
                    e.refs.shrink_to_fit();
                }
            }
            if vals.is_empty() {
                self.names.remove(&*p.name);
            }
        }
    }

    /// The series with label `name` = `value` (sorted).
    pub(crate) fn get(&self, name: &str, value: &str) -> &[u32] {
        self.names
            .get(name)
            .and_then(|v| v.get(value))
            .map_or(&[], |e| &e.refs)
    }

    /// The values of label `name` with their series, in value order.
    pub(crate) fn values(&self, name: &str) -> impl Iterator<Item = (&str, &[u32])> + '_ {
        self.names
            .get(name)
            .into_iter()
            .flat_map(|v| v.iter().map(|(k, e)| (&**k, e.refs.as_slice())))
    }

    /// The label names, sorted.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.names.keys().map(|k| &**k)
    }

    /// Approximate heap bytes: map nodes, strings, interned pairs and lists.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.names
            .iter()
            .map(|(k, vals)| {
                k.len()
                    + 64
                    + vals
                        .values()
                        .map(|e| {
                            // map entry, value key, pair (Arc counters, name, value)
                            2 * e.pair.value.len() + 96 + e.refs.capacity() * 4
                        })
                        .sum::<usize>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interns_and_removes() {
        let mut p = MemPostings::default();
        let a = Labels::from_pairs([("__name__", "m"), ("i", "a")]);
        let b = Labels::from_pairs([("__name__", "m"), ("i", "b")]);
        let la = p.add(&a, 7);
        let lb = p.add(&b, 3);
        assert!(la.eq_labels(&a) && lb.eq_labels(&b));
        // one pair for __name__="m", shared, and one name string for "i"
        assert!(Arc::ptr_eq(&la.pairs()[0], &lb.pairs()[0]));
        assert!(Arc::ptr_eq(&la.pairs()[1].name, &lb.pairs()[1].name));
        assert_eq!(p.get("__name__", "m"), &[3, 7]);
        assert_eq!(p.get("i", "b"), &[3]);
        assert_eq!(p.get("i", "zz"), &[] as &[u32]);
        assert_eq!(p.names().collect::<Vec<_>>(), vec!["__name__", "i"]);
        let vals: Vec<_> = p.values("i").map(|(v, _)| v).collect();
        assert_eq!(vals, vec!["a", "b"]);
        p.remove(&la, 7);
        assert_eq!(p.get("__name__", "m"), &[3]);
        assert_eq!(p.values("i").count(), 1);
        // the removed series' labels stay readable
        assert_eq!(la.to_labels(), a);
        p.remove(&lb, 3);
        assert_eq!(p.names().count(), 0);
        assert_eq!(p.memory_bytes(), 0);
    }

    #[test]
    fn lists_stay_sorted_with_little_slack() {
        let mut p = MemPostings::default();
        let l = Labels::from_pairs([("job", "vllm")]);
        for r in (0..1000u32).rev() {
            p.add(&l, r);
        }
        let refs = p.get("job", "vllm");
        assert!(refs.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(refs.len(), 1000);
        let e = &p.names["job"]["vllm"];
        assert!(e.refs.capacity() <= 1000 + 1000 / 8 + 4);
    }
}
