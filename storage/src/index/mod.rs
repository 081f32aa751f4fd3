//! The block index: a symbol table, one entry per series (labels and chunk references), and
//! inverted postings per label pair. Written once by [`writer::write_index`], read through
//! `memmap2` by [`reader::IndexReader`] with every access bounds-checked and every section
//! checksummed (crc32). The byte layout is described in `storage/FORMAT.md`.

#[allow(unsafe_code)] // the index file is memory-mapped
pub mod reader;
pub mod writer;

pub use reader::IndexReader;
pub use writer::write_index;

/// Magic bytes at the start of an index file.
pub const INDEX_MAGIC: [u8; 4] = *b"IDBI";
/// Index format version.
pub const INDEX_VERSION: u8 = 1;
/// Size of the file header (magic, version, three zero bytes).
pub const HEADER_LEN: usize = 8;
/// Size of the table of contents at the end of the file: five u64 offsets and a crc32.
pub const TOC_LEN: usize = 5 * 8 + 4;

/// Sorted-set helpers over ascending `u32` lists.
pub(crate) mod sets {
    /// Elements in both.
    pub fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
        let (mut i, mut j) = (0, 0);
        let mut out = Vec::with_capacity(a.len().min(b.len()));
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    out.push(a[i]);
                    i += 1;
                    j += 1;
                }
            }
        }
        out
    }

    /// Elements of `a` not in `b`.
    pub fn subtract(a: &[u32], b: &[u32]) -> Vec<u32> {
        let mut j = 0;
        let mut out = Vec::with_capacity(a.len());
        for &x in a {
            while j < b.len() && b[j] < x {
                j += 1;
            }
            if j < b.len() && b[j] == x {
                continue;
            }
            out.push(x);
        }
        out
    }

    /// Elements in any of the lists.
    pub fn union(lists: Vec<Vec<u32>>) -> Vec<u32> {
        let mut it = lists.into_iter();
        let Some(mut out) = it.next() else {
            return Vec::new();
        };
        let mut any = false;
        for l in it {
            out.extend(l);
            any = true;
        }
        if any {
            out.sort_unstable();
            out.dedup();
        }
        out
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        #[test]
        fn ops() {
            assert_eq!(intersect(&[1, 3, 5, 7], &[3, 4, 5]), vec![3, 5]);
            assert_eq!(subtract(&[1, 3, 5, 7], &[3, 4, 5]), vec![1, 7]);
            assert_eq!(union(vec![vec![5, 9], vec![1, 5], vec![]]), vec![1, 5, 9]);
            assert_eq!(union(vec![]), Vec::<u32>::new());
        }
    }
}

/// Exercises every read path of [`IndexReader`] on arbitrary bytes (used by the `index_read`
/// fuzz target and its corpus replay test). Returns whether the bytes opened as an index.
/// Must never panic.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_index_read(data: &[u8]) -> bool {
    use crate::matcher::{MatchOp, Matcher};
    let Ok(r) = IndexReader::from_bytes(data.to_vec(), "fuzz-input") else {
        return false;
    };
    let names: Vec<String> = r.label_names().into_iter().map(String::from).collect();
    for n in names.iter().take(64) {
        let values: Vec<String> = r.label_values(n).into_iter().map(String::from).collect();
        for v in values.iter().take(64) {
            let _ = r.postings(n, v);
        }
        if let Some(v) = values.first() {
            for op in [
                MatchOp::Equal,
                MatchOp::NotEqual,
                MatchOp::RegexMatch,
                MatchOp::RegexNoMatch,
            ] {
                if let Ok(m) = Matcher::new(op, n.as_str(), v.as_str()) {
                    let _ = r.select(&[m]);
                }
            }
        }
    }
    let _ = r.select(&[]);
    for id in 0..r.num_series().min(1024) {
        let _ = r.series(id);
    }
    let _ = r.series(u32::MAX);
    let _ = r.check();
    true
}
