//! Query results on the detectors' step grid, by instance and model, and spans of steps where
//! a condition holds.

use std::collections::BTreeMap;

use super::{Ctx, InsightError};

/// What a finding is about: an instance, a model, or both (empty strings where absent).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Scope {
    /// `instance` label.
    pub instance: String,
    /// `model_name` label.
    pub model: String,
}

/// A query's values per scope and grid step (`None` where the query had no value).
#[derive(Debug, Clone, Default)]
pub(crate) struct Grid {
    pub series: BTreeMap<Scope, Vec<Option<f64>>>,
}

impl Grid {
    pub fn eval(ctx: &Ctx<'_>, q: &str) -> Result<Grid, InsightError> {
        let n = ctx.n();
        let mut g = Grid::default();
        if n == 0 {
            return Ok(g);
        }
        let last = ctx.first() + (n as i64 - 1) * ctx.step;
        let res = ctx.src.range(q, ctx.first(), last, ctx.step)?;
        for s in res {
            let scope = Scope {
                instance: s.labels.get("instance").unwrap_or("").to_string(),
                model: s.labels.get("model_name").unwrap_or("").to_string(),
            };
            let row = g.series.entry(scope).or_insert_with(|| vec![None; n]);
            for (t, v) in s.samples {
                let i = (t - ctx.first()) / ctx.step;
                if (0..n as i64).contains(&i) && v.is_finite() {
                    row[i as usize] = Some(v);
                }
            }
        }
        Ok(g)
    }

    /// The row of `s`, or of the scope with the same instance and no model (GPU and `up`
    /// series carry no model), or none.
    pub fn row(&self, s: &Scope) -> Option<&Vec<Option<f64>>> {
        self.series.get(s).or_else(|| {
            self.series.get(&Scope {
                instance: s.instance.clone(),
                model: String::new(),
            })
        })
    }

    /// The value at step `i` for scope `s`.
    pub fn at(&self, s: &Scope, i: usize) -> Option<f64> {
        self.row(s).and_then(|r| r.get(i).copied().flatten())
    }
}

/// Maximal runs `[i, j]` (inclusive) of true at least `min_len` long.
pub(crate) fn runs(mask: &[bool], min_len: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < mask.len() {
        if mask[i] {
            let mut j = i;
            while j + 1 < mask.len() && mask[j + 1] {
                j += 1;
            }
            if j - i + 1 >= min_len {
                out.push((i, j));
            }
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// Mean of the values present in `r[i..=j]`.
pub(crate) fn mean(r: Option<&Vec<Option<f64>>>, i: usize, j: usize) -> f64 {
    let Some(r) = r else { return f64::NAN };
    let (s, n) = r[i..=j.min(r.len() - 1)]
        .iter()
        .flatten()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        f64::NAN
    } else {
        s / n as f64
    }
}

/// Maximum of the values present in `r[i..=j]`.
pub(crate) fn max(r: Option<&Vec<Option<f64>>>, i: usize, j: usize) -> f64 {
    let Some(r) = r else { return f64::NAN };
    r[i..=j.min(r.len() - 1)]
        .iter()
        .flatten()
        .copied()
        .fold(f64::NAN, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_maximal_and_long_enough() {
        let m = [true, true, false, true, true, true, false, true];
        assert_eq!(runs(&m, 1), vec![(0, 1), (3, 5), (7, 7)]);
        assert_eq!(runs(&m, 3), vec![(3, 5)]);
        assert!(runs(&[], 1).is_empty());
    }
}
