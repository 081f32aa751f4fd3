//! Selections shared between the queries of one rule-group evaluation.
//!
//! A rule group runs many instant queries at one timestamp, and most of them read the same
//! few metrics over the same windows (`rate(x_bucket[5m])` for p50, p95 and p99, ...). A
//! [`SelectionCache`] handed to [`crate::Engine::instant_cached`] keeps each selector's
//! decoded series, keyed by its matchers and time range, so the next query reading the same
//! selection takes the loaded data instead of selecting and decoding it again. The owner
//! reports every series it appends ([`SelectionCache::invalidate`]): a cached selection that
//! the new samples could change is dropped, so a later rule still reads an earlier one's
//! output. Samples appended by others (the scraper) while the cache lives are not seen by the
//! selections already cached: the group reads one view of the store, taken selector by
//! selector at its first read.
//!
//! An owner that knows the queries ahead ([`SelectionCache::plan`]: a group's rule
//! expressions) has only the selectors that more than one of them reads kept, each until its
//! last planned read: a selection no later query takes is freed as soon as its query is done
//! instead of staying decoded until the group ends.

use std::collections::HashMap;
use std::sync::Arc;

use inferdb_storage::labels::METRIC_NAME;
use inferdb_storage::matcher::MatchOp;
use inferdb_storage::{Labels, Matcher};

use crate::ast::{Expr, ExprKind, VectorSelector};
use crate::eval::Loaded;

/// What [`SelectionCache::new`] holds at most by default: 4 Mi points (64 MiB of points).
pub const DEFAULT_MAX_POINTS: usize = 4 << 20;

struct Entry {
    matchers: Vec<Matcher>,
    /// Old names whose series were read under the selected name (metric aliases): an
    /// appended series of one of them changes the selection too.
    alias_names: Vec<String>,
    data: Arc<Vec<Loaded>>,
    points: usize,
}

impl Entry {
    /// Whether an appended series with `labels` could be part of this selection.
    fn affected_by(&self, labels: &Labels) -> bool {
        self.matchers.iter().all(|m| {
            let v = labels.get(&m.name).unwrap_or("");
            m.matches(v)
                || (m.name == METRIC_NAME
                    && m.op == MatchOp::Equal
                    && self.alias_names.iter().any(|a| a == v))
        })
    }

    /// The metric name this selection is restricted to (equality matcher on `__name__`),
    /// with the old names read for it.
    fn names(&self) -> Option<impl Iterator<Item = &str>> {
        let m = self
            .matchers
            .iter()
            .find(|m| m.name == METRIC_NAME && m.op == MatchOp::Equal)?;
        Some(std::iter::once(m.value.as_str()).chain(self.alias_names.iter().map(|s| s.as_str())))
    }
}

/// Decoded selections by (matchers, mint, maxt), for the queries of one evaluation.
pub struct SelectionCache {
    entries: HashMap<(String, i64, i64), Entry>,
    points: usize,
    max_points: usize,
    /// The planned reads not yet made, by selector (matchers' key text); `None`: no plan,
    /// every selection is kept.
    plan: Option<HashMap<String, u32>>,
    hits: u64,
    misses: u64,
}

impl std::fmt::Debug for SelectionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectionCache")
            .field("entries", &self.entries.len())
            .field("points", &self.points)
            .field("hits", &self.hits)
            .field("misses", &self.misses)
            .finish()
    }
}

impl Default for SelectionCache {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_POINTS)
    }
}

fn key_text(matchers: &[Matcher]) -> String {
    let mut k = String::new();
    for m in matchers {
        k.push_str(&m.name);
        k.push('\u{1}');
        k.push(match m.op {
            MatchOp::Equal => '=',
            MatchOp::NotEqual => '!',
            MatchOp::RegexMatch => '~',
            MatchOp::RegexNoMatch => '^',
        });
        k.push('\u{1}');
        k.push_str(&m.value);
        k.push('\u{2}');
    }
    k
}

impl SelectionCache {
    /// An empty cache that keeps at most `max_points` points in all (selections that would
    /// pass it are read and not kept).
    pub fn new(max_points: usize) -> Self {
        SelectionCache {
            entries: HashMap::new(),
            points: 0,
            max_points,
            plan: None,
            hits: 0,
            misses: 0,
        }
    }

    /// Forgets every selection and the plan (the next evaluation reads the store afresh).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.points = 0;
        self.plan = None;
    }

    /// Plans the reads of the queries of `exprs` (run next, each once, before the next
    /// [`SelectionCache::clear`]): a selector is kept only when more than one of their
    /// selectors has its matchers, and only until the last of those reads; reads of
    /// selectors not planned (a template's query) are not kept. Without a plan every
    /// selection is kept.
    pub fn plan<'e>(&mut self, exprs: impl IntoIterator<Item = &'e Expr>) {
        let mut reads: HashMap<String, u32> = HashMap::new();
        for e in exprs {
            for_each_selector(e, &mut |vs| {
                *reads.entry(key_text(&vs.matchers)).or_default() += 1;
            });
        }
        reads.retain(|_, n| *n > 1);
        self.plan = Some(reads);
    }

    /// Drops the selections that a series with `labels`, just appended, could change.
    pub fn invalidate(&mut self, labels: &Labels) {
        self.invalidate_all(std::slice::from_ref(labels));
    }

    /// Drops the selections that any of the series with `appended` labels, just appended,
    /// could change.
    pub fn invalidate_all(&mut self, appended: &[Labels]) {
        if appended.is_empty() || self.entries.is_empty() {
            return;
        }
        let mut names: Vec<&str> = appended
            .iter()
            .map(|l| l.get(METRIC_NAME).unwrap_or(""))
            .collect();
        names.sort_unstable();
        names.dedup();
        let mut freed = 0;
        self.entries.retain(|_, e| {
            // a selection of one name is untouched by series of other names
            if let Some(mut own) = e.names() {
                if !own.any(|n| names.binary_search(&n).is_ok()) {
                    return true;
                }
            }
            let hit = appended.iter().any(|l| e.affected_by(l));
            if hit {
                freed += e.points;
            }
            !hit
        });
        self.points -= freed;
    }

    /// The number of selections kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no selection is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Selections read from the cache and from the store since it was made.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    /// The selection of `matchers` over `[mint, maxt]` when kept, counted as one of the
    /// planned reads of its selector (the last one takes it out of the cache).
    pub(crate) fn get(
        &mut self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Option<Arc<Vec<Loaded>>> {
        let key = (key_text(matchers), mint, maxt);
        let last = match self.plan.as_mut() {
            None => false,
            Some(plan) => match plan.get_mut(&key.0) {
                // not planned (or its planned reads are done): never kept
                None => {
                    self.misses += 1;
                    return None;
                }
                Some(n) => {
                    *n -= 1;
                    if *n == 0 {
                        plan.remove(&key.0);
                        true
                    } else {
                        false
                    }
                }
            },
        };
        let found = if last {
            self.entries.remove(&key).map(|e| {
                self.points -= e.points;
                e.data
            })
        } else {
            self.entries.get(&key).map(|e| e.data.clone())
        };
        if found.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        found
    }

    pub(crate) fn insert(
        &mut self,
        matchers: &[Matcher],
        alias_names: Vec<String>,
        mint: i64,
        maxt: i64,
        data: Arc<Vec<Loaded>>,
    ) {
        let key = key_text(matchers);
        // with a plan, only a selector that a later planned read takes is kept
        if self.plan.as_ref().is_some_and(|p| !p.contains_key(&key)) {
            return;
        }
        let points: usize = data.iter().map(|s| s.points.len()).sum::<usize>() + data.len();
        if self.points + points > self.max_points {
            return;
        }
        self.points += points;
        let old = self.entries.insert(
            (key, mint, maxt),
            Entry {
                matchers: matchers.to_vec(),
                alias_names,
                data,
                points,
            },
        );
        if let Some(o) = old {
            self.points -= o.points;
        }
    }
}

/// Calls `f` with every vector selector of `e` (those of range selectors and subqueries
/// included).
fn for_each_selector(e: &Expr, f: &mut dyn FnMut(&VectorSelector)) {
    crate::stack::grow(|| match &e.kind {
        ExprKind::VectorSelector(vs) => f(vs),
        ExprKind::MatrixSelector(ms) => f(&ms.selector),
        _ => e.children().for_each(|c| for_each_selector(c, f)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::parse;

    fn name(n: &str) -> Vec<Matcher> {
        vec![Matcher::equal(METRIC_NAME, n)]
    }

    fn data() -> Arc<Vec<Loaded>> {
        Arc::new(vec![Loaded {
            metric: Arc::new(Labels::from_pairs([(METRIC_NAME, "a")])),
            points: vec![crate::value::FPoint { t: 1, f: 1.0 }],
        }])
    }

    /// The evaluator's read of a selector: from the cache, or "decoded" and offered to it.
    fn read(c: &mut SelectionCache, n: &str) -> bool {
        let hit = c.get(&name(n), 0, 10).is_some();
        if !hit {
            c.insert(&name(n), Vec::new(), 0, 10, data());
        }
        hit
    }

    #[test]
    fn a_plan_keeps_only_selectors_read_again_until_their_last_read() {
        let exprs = ["sum(a) + b", "a", "a * 2"].map(|e| parse(e).unwrap());
        let mut c = SelectionCache::default();
        c.plan(&exprs);
        // the first query: `a` is kept for the next two, `b` (read once) is not
        assert!(!read(&mut c, "a"));
        assert!(!read(&mut c, "b"));
        assert_eq!(c.len(), 1);
        // a template's query of a selector no rule reads is not kept either
        assert!(!read(&mut c, "x"));
        assert_eq!(c.len(), 1);
        assert!(read(&mut c, "a"));
        assert_eq!(c.len(), 1);
        // the last planned read takes it out
        assert!(read(&mut c, "a"));
        assert!(c.is_empty());
        assert_eq!(c.points, 0);
        assert_eq!(c.hits_and_misses(), (2, 3));
        // without a plan every selection is kept
        c.clear();
        assert!(!read(&mut c, "b"));
        assert!(read(&mut c, "b"));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn an_invalidated_selection_is_read_again_and_kept_for_the_reads_left() {
        let exprs = ["a", "a", "a"].map(|e| parse(e).unwrap());
        let mut c = SelectionCache::default();
        c.plan(&exprs);
        assert!(!read(&mut c, "a"));
        c.invalidate(&Labels::from_pairs([(METRIC_NAME, "a"), ("job", "x")]));
        assert!(c.is_empty());
        assert!(!read(&mut c, "a"));
        assert_eq!(c.len(), 1);
        assert!(read(&mut c, "a"));
        assert!(c.is_empty());
    }
}
