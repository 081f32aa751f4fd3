//! A compact, immutable label set for head series: one heap block of
//! `(uvarint len, name, uvarint len, value)` pairs in label order, about a third of the
//! memory of a [`Labels`] (one allocation instead of two per label plus the vector).

use crate::labels::{Label, Labels};
use crate::wal::record::put_uvarint;

/// A label set packed into one allocation.
#[derive(Clone, PartialEq, Eq)]
pub struct CompactLabels(Box<[u8]>);

fn uvarint(b: &[u8], i: &mut usize) -> usize {
    let mut x = 0usize;
    let mut shift = 0;
    while let Some(&c) = b.get(*i) {
        *i += 1;
        x |= ((c & 0x7f) as usize) << shift;
        if c < 0x80 {
            break;
        }
        shift += 7;
    }
    x
}

impl CompactLabels {
    /// Packs `l`.
    pub fn new(l: &Labels) -> Self {
        let mut b = Vec::with_capacity(l.iter().map(|l| l.name.len() + l.value.len() + 2).sum());
        for l in l {
            put_uvarint(&mut b, l.name.len() as u64);
            b.extend_from_slice(l.name.as_bytes());
            put_uvarint(&mut b, l.value.len() as u64);
            b.extend_from_slice(l.value.as_bytes());
        }
        CompactLabels(b.into_boxed_slice())
    }

    /// The `(name, value)` pairs in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { b: &self.0, i: 0 }
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
        let mut a = self.iter();
        for x in l {
            match a.next() {
                Some((n, v)) if n == x.name && v == x.value => {}
                _ => return false,
            }
        }
        a.next().is_none()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.0.len()
    }
}

/// Iterates the pairs of a [`CompactLabels`].
pub struct Iter<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        if self.i >= self.b.len() {
            return None;
        }
        let mut s = [""; 2];
        for x in &mut s {
            let n = uvarint(self.b, &mut self.i);
            let end = (self.i + n).min(self.b.len());
            // built from `String`s, so always UTF-8; an empty string would only hide a bug
            *x = std::str::from_utf8(&self.b[self.i..end]).unwrap_or("");
            self.i = end;
        }
        Some((s[0], s[1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_and_unpacks() {
        let long = "x".repeat(300);
        let l = Labels::from_pairs([("__name__", "vllm:a"), ("model", long.as_str()), ("z", "ü")]);
        let c = CompactLabels::new(&l);
        assert_eq!(c.to_labels(), l);
        assert!(c.eq_labels(&l));
        assert!(!c.eq_labels(&l.with("z", "u")));
        assert!(!c.eq_labels(&l.without("z")));
        assert_eq!(c.get("model"), Some(long.as_str()));
        assert_eq!(c.get("nope"), None);
        assert!(CompactLabels::new(&Labels::default())
            .to_labels()
            .is_empty());
    }
}
