//! Which series of a block form a classic histogram group (see `chunk::group`): the
//! `<name>_bucket` series that differ only in `le`, and the `<name>_count` series with their
//! other labels: the count first, then the `+Inf` bucket, then the other buckets by `le`.

use std::collections::BTreeMap;

use crate::labels::{Label, Labels};

/// Label of a bucket's upper bound.
const LE: &str = "le";

/// The part a series may play in a histogram group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Role {
    /// A `_bucket` series with this upper bound.
    Bucket(f64),
    /// The `_count` series.
    Count,
    /// The `_sum` series (never grouped: its values are not whole numbers).
    Sum,
}

/// The histogram name and the part the series `l` would play in its group; `None` for a
/// series that is no part of a classic histogram.
pub(super) fn role(l: &Labels) -> Option<(&str, Role)> {
    let name = l.metric_name()?;
    if let Some(base) = name.strip_suffix("_bucket") {
        let le = parse_le(l.get(LE)?)?;
        return Some((base, Role::Bucket(le)));
    }
    if l.get(LE).is_some() {
        return None;
    }
    if let Some(base) = name.strip_suffix("_count") {
        return Some((base, Role::Count));
    }
    name.strip_suffix("_sum").map(|base| (base, Role::Sum))
}

/// A bucket bound as Prometheus reads it (`+Inf`, floats); NaN is no bound.
fn parse_le(s: &str) -> Option<f64> {
    let v: f64 = match s {
        "+Inf" | "Inf" | "+inf" | "inf" => f64::INFINITY,
        s => s.parse().ok()?,
    };
    (!v.is_nan()).then_some(v)
}

/// The labels that name a group: the series' labels without `le`, under the histogram name.
fn group_key(l: &Labels, base: &str) -> Labels {
    let v: Vec<Label> = l
        .iter()
        .filter(|x| x.name != LE)
        .map(|x| {
            if x.name == crate::labels::METRIC_NAME {
                Label::new(x.name.clone(), base)
            } else {
                x.clone()
            }
        })
        .collect();
    Labels::from_sorted_unchecked(v)
}

/// Splits `series` (their labels, all of one histogram name) into groups: each a list of
/// indexes into `series`, the count, the `+Inf` bucket, then the other buckets by ascending
/// `le`. A group with two
/// buckets of the same bound, two counts or no bucket at all is returned as single series,
/// as is every series that is no bucket or count.
pub(super) fn groups(series: &[&Labels]) -> Vec<Vec<usize>> {
    let mut by_key: BTreeMap<Labels, Vec<(usize, Role)>> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, l) in series.iter().enumerate() {
        match role(l) {
            Some((base, r @ (Role::Bucket(_) | Role::Count))) => {
                by_key.entry(group_key(l, base)).or_default().push((i, r))
            }
            _ => out.push(vec![i]),
        }
    }
    for (_, mut ms) in by_key {
        // the count first: it is read alone most (`rate(x_count)`) and is then the group's
        // base, decoded without any column; then the `+Inf` bucket, which equals the count
        // (a column of zeros, and read alone without the other buckets' columns); the
        // other buckets after it by bound (the lowest coded against `+Inf`, as against the
        // count)
        let rank = |r: Role| match r {
            Role::Count => (0, 0.0),
            Role::Bucket(x) if x == f64::INFINITY => (1, 0.0),
            Role::Bucket(x) => (2, x),
            Role::Sum => (3, 0.0),
        };
        ms.sort_by(|a, b| {
            let (x, y) = (rank(a.1), rank(b.1));
            x.0.cmp(&y.0).then(x.1.total_cmp(&y.1))
        });
        let buckets = ms.iter().filter(|m| matches!(m.1, Role::Bucket(_))).count();
        let dup = ms.windows(2).any(|w| w[0].1 == w[1].1);
        if buckets == 0 || dup || ms.len() < 2 || ms.len() > crate::chunk::MAX_GROUP_MEMBERS {
            out.extend(ms.into_iter().map(|m| vec![m.0]));
        } else {
            out.push(ms.into_iter().map(|m| m.0).collect());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn roles_and_groups() {
        let s = [
            l(&[("__name__", "h_bucket"), ("le", "+Inf"), ("i", "a")]),
            l(&[("__name__", "h_bucket"), ("le", "0.5"), ("i", "a")]),
            l(&[("__name__", "h_bucket"), ("le", "10"), ("i", "a")]),
            l(&[("__name__", "h_count"), ("i", "a")]),
            l(&[("__name__", "h_sum"), ("i", "a")]),
            l(&[("__name__", "h_bucket"), ("le", "1"), ("i", "b")]),
            l(&[("__name__", "h_bucket"), ("le", "1.0"), ("i", "b")]),
            l(&[("__name__", "h_count"), ("i", "c")]),
            l(&[("__name__", "h_bucket"), ("le", "NaN"), ("i", "d")]),
            l(&[("__name__", "h_bucket"), ("le", "x"), ("i", "d")]),
        ];
        assert_eq!(role(&s[0]), Some(("h", Role::Bucket(f64::INFINITY))));
        assert_eq!(role(&s[3]), Some(("h", Role::Count)));
        assert_eq!(role(&s[4]), Some(("h", Role::Sum)));
        assert_eq!(role(&s[8]), None);
        assert_eq!(role(&l(&[("__name__", "up")])), None);
        let refs: Vec<&Labels> = s.iter().collect();
        let mut g = groups(&refs);
        g.sort();
        // a's count, +Inf, then its buckets by bound; b's duplicate bound and c's lone count
        // apart
        assert_eq!(
            g,
            vec![
                vec![3, 0, 1, 2],
                vec![4],
                vec![5],
                vec![6],
                vec![7],
                vec![8],
                vec![9]
            ]
        );
    }
}
