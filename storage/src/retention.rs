//! Retention: which blocks to delete, computed as Prometheus does.
//!
//! * **Time**: a block goes when its max time is older than the newest block's max time minus
//!   the retention. The reference is the data, not the wall clock, so a store holding only old
//!   imported history keeps it.
//! * **Size**: walking from the newest block to the oldest and adding up sizes, the block that
//!   takes the total past the limit and every older one go.

use crate::block::BlockMeta;

/// Ids of the blocks to delete under the given retention by age (`retention_ms`) and by total
/// size (`max_bytes`); `metas` pairs each block with its size in bytes. Returned oldest first.
pub fn blocks_to_delete(
    metas: &[(BlockMeta, u64)],
    retention_ms: Option<i64>,
    max_bytes: Option<u64>,
) -> Vec<String> {
    blocks_to_delete_with_base(metas, retention_ms, max_bytes, 0)
}

/// Like [`blocks_to_delete`], with `base_bytes` (WAL and head chunks on disk, as Prometheus
/// counts them) added to the total before any block.
pub fn blocks_to_delete_with_base(
    metas: &[(BlockMeta, u64)],
    retention_ms: Option<i64>,
    max_bytes: Option<u64>,
    base_bytes: u64,
) -> Vec<String> {
    // Newest first: by max time, then min time, then id.
    let mut order: Vec<&(BlockMeta, u64)> = metas.iter().collect();
    order.sort_by(|a, b| {
        (b.0.max_time, b.0.min_time, &b.0.id).cmp(&(a.0.max_time, a.0.min_time, &a.0.id))
    });
    let mut doomed = vec![false; order.len()];
    if let (Some(ret), Some(newest)) = (retention_ms.filter(|r| *r > 0), order.first()) {
        let newest = newest.0.max_time;
        for (i, (m, _)) in order.iter().enumerate() {
            if newest.saturating_sub(m.max_time) > ret {
                doomed[i] = true;
            }
        }
    }
    if let Some(limit) = max_bytes.filter(|b| *b > 0) {
        let mut total = base_bytes;
        let mut over = false;
        for (i, (_, size)) in order.iter().enumerate() {
            if doomed[i] {
                continue;
            }
            total = total.saturating_add(*size);
            if total > limit {
                over = true;
            }
            if over {
                doomed[i] = true;
            }
        }
    }
    order
        .iter()
        .zip(doomed)
        .rev()
        .filter(|(_, d)| *d)
        .map(|(m, _)| m.0.id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, min: i64, max: i64) -> (BlockMeta, u64) {
        (
            BlockMeta {
                id: id.into(),
                min_time: min,
                max_time: max,
                num_series: 0,
                num_samples: 0,
                num_chunks: 0,
                level: 1,
                sources: vec![],
            },
            100,
        )
    }

    #[test]
    fn by_time_relative_to_newest_block() {
        let bs = vec![
            m("a", 0, 10),
            m("b", 10, 20),
            m("c", 20, 30),
            m("d", 30, 40),
        ];
        assert_eq!(blocks_to_delete(&bs, Some(20), None), vec!["a".to_string()]);
        assert_eq!(
            blocks_to_delete(&bs, Some(19), None),
            vec!["a".to_string(), "b".into()]
        );
        assert!(blocks_to_delete(&bs, Some(30), None).is_empty());
        assert!(blocks_to_delete(&bs, None, None).is_empty());
    }

    #[test]
    fn by_size_from_newest() {
        let bs = vec![
            m("a", 0, 10),
            m("b", 10, 20),
            m("c", 20, 30),
            m("d", 30, 40),
        ];
        assert_eq!(
            blocks_to_delete(&bs, None, Some(250)),
            vec!["a".to_string(), "b".into()]
        );
        assert_eq!(blocks_to_delete(&bs, None, Some(400)), Vec::<String>::new());
        assert_eq!(
            blocks_to_delete_with_base(&bs, None, Some(400), 1),
            vec!["a".to_string()]
        );
    }
}
