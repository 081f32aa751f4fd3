//! The series cache of one scrape loop (every series of the target's last successful page, in
//! page order) or of one import (every series of the input, in the order first seen), keyed by
//! its series text (name and label set exactly as written).
//!
//! The texts live in one buffer in page order, so the common scrape (the same series in the
//! same order as last time) checks each line against the next expected text with one
//! comparison over memory read front to back, and parses neither the series nor its labels
//! ([`crate::model::exposition::Parser::next_known`]); other lines are looked up by hash. The
//! layout is rebuilt only after a scrape whose series or order changed. An import keeps every
//! series it meets as new in one long "scrape" and offers the parser the series of the line
//! before and the one first seen after it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::model::exposition::MetricType;
use crate::model::sink::SeriesHandle;
use rustc_hash::FxHasher;

/// A fast, non-cryptographic hash of a series text (keys are one target's series texts; a
/// target crafting collisions only slows its own scrapes, and lookups compare the texts).
fn hash_text(t: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(t.as_bytes());
    h.finish()
}

const NONE: u32 = u32::MAX;

/// Which label of a series is normalised as a float (from the family's type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Norm {
    None,
    Le,
    Quantile,
}

impl Norm {
    fn from_label(l: Option<&'static str>) -> Norm {
        match l {
            Some("le") => Norm::Le,
            Some("quantile") => Norm::Quantile,
            _ => Norm::None,
        }
    }
    fn label(self) -> Option<&'static str> {
        match self {
            Norm::None => None,
            Norm::Le => Some("le"),
            Norm::Quantile => Some("quantile"),
        }
    }
}

/// One cached series; `H` is what its reader keeps for it (a scrape's [`SeriesHandle`], an
/// import's series index).
#[derive(Debug)]
pub(crate) struct Slot<H> {
    start: u32,
    len: u32,
    /// The next slot whose text has the same hash.
    chain: u32,
    norm: Norm,
    /// The scrape generation that last saw the series.
    pub(crate) last_seen: u64,
    /// `None`: dropped by metric relabelling (kept so that its labels are not rebuilt).
    pub(crate) series: Option<H>,
}

/// See the module docs. Slot indices: `0..len()` are the cached series in the last page's
/// order; during a scrape, series new on the page get the indices after them until
/// [`SeriesCache::commit`] (or [`SeriesCache::discard`]).
#[derive(Debug)]
pub(crate) struct SeriesCache<H = SeriesHandle> {
    text: String,
    slots: Vec<Slot<H>>,
    index: HashMap<u64, u32, BuildHasherDefault<FxHasher>>,
    fresh_text: String,
    fresh: Vec<Slot<H>>,
    /// Slots in this scrape's page order.
    order: Vec<u32>,
    /// Whether `order` is `0, 1, 2, ...` so far.
    in_order: bool,
    /// Some handle got its labels back (to release again at the next commit).
    relabelled: bool,
}

impl<H> Default for SeriesCache<H> {
    fn default() -> Self {
        SeriesCache {
            text: String::new(),
            slots: Vec::new(),
            index: HashMap::default(),
            fresh_text: String::new(),
            fresh: Vec::new(),
            order: Vec::new(),
            in_order: false,
            relabelled: false,
        }
    }
}

impl<H> SeriesCache<H> {
    /// The number of cached series (those of the last successful page).
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The number of slots: the cached series and those new in this scrape.
    pub(crate) fn total(&self) -> usize {
        self.slots.len() + self.fresh.len()
    }

    /// Starts a scrape.
    pub(crate) fn begin(&mut self) {
        self.fresh.clear();
        self.fresh_text.clear();
        self.order.clear();
        self.in_order = true;
    }

    /// The series text of cached slot `k` (in the last page's order).
    #[inline]
    pub(crate) fn expected(&self, k: usize) -> Option<&str> {
        let s = self.slots.get(k)?;
        Some(&self.text[s.start as usize..(s.start + s.len) as usize])
    }

    /// The text of slot `i` (cached or new in this scrape).
    pub(crate) fn text_of(&self, i: u32) -> &str {
        let n = self.slots.len() as u32;
        if i < n {
            let s = &self.slots[i as usize];
            &self.text[s.start as usize..(s.start + s.len) as usize]
        } else {
            let s = &self.fresh[(i - n) as usize];
            &self.fresh_text[s.start as usize..(s.start + s.len) as usize]
        }
    }

    /// Slot `i` (cached or new in this scrape).
    #[inline]
    pub(crate) fn slot(&self, i: u32) -> &Slot<H> {
        let n = self.slots.len();
        match (i as usize).checked_sub(n) {
            None => &self.slots[i as usize],
            Some(j) => &self.fresh[j],
        }
    }

    /// Slot `i`, mutably.
    #[inline]
    pub(crate) fn slot_mut(&mut self, i: u32) -> &mut Slot<H> {
        let n = self.slots.len();
        match (i as usize).checked_sub(n) {
            None => &mut self.slots[i as usize],
            Some(j) => &mut self.fresh[j],
        }
    }

    /// The label normalised in slot `i`'s family when it was first seen.
    pub(crate) fn normalised_label(&self, i: u32) -> Option<&'static str> {
        self.slot(i).norm.label()
    }

    /// The slot of the series written as `text`, cached or new in this scrape.
    pub(crate) fn lookup(&self, text: &str) -> Option<u32> {
        let mut i = *self.index.get(&hash_text(text))?;
        while i != NONE {
            if self.text_of(i) == text {
                return Some(i);
            }
            i = self.slot(i).chain;
        }
        None
    }

    /// Adds a series first seen in this scrape; gives its slot.
    pub(crate) fn add_fresh(
        &mut self,
        text: &str,
        normalised: Option<&'static str>,
        series: Option<H>,
    ) -> u32 {
        let i = (self.slots.len() + self.fresh.len()) as u32;
        let h = hash_text(text);
        let chain = self.index.insert(h, i).unwrap_or(NONE);
        let start = self.fresh_text.len() as u32;
        self.fresh_text.push_str(text);
        self.fresh.push(Slot {
            start,
            len: text.len() as u32,
            chain,
            norm: Norm::from_label(normalised),
            last_seen: 0,
            series,
        });
        i
    }

    /// Records that slot `i` is the page's next series.
    #[inline]
    pub(crate) fn seen(&mut self, i: u32) {
        if i as usize != self.order.len() {
            self.in_order = false;
        }
        self.order.push(i);
    }

    /// Cached slots with a series.
    pub(crate) fn handles(&self) -> impl Iterator<Item = (u32, &H)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.series.as_ref().map(|h| (i as u32, h)))
    }

    /// Ends a failed scrape: series first seen in it are forgotten.
    pub(crate) fn discard(&mut self) {
        if !self.fresh.is_empty() {
            // their index entries point past the cached slots: rebuild the index
            self.index.clear();
            for i in 0..self.slots.len() {
                let t = &self.text[self.slots[i].start as usize
                    ..(self.slots[i].start + self.slots[i].len) as usize];
                self.slots[i].chain = self.index.insert(hash_text(t), i as u32).unwrap_or(NONE);
            }
        }
        self.fresh.clear();
        self.fresh_text.clear();
        self.order.clear();
    }

    /// Forgets every series.
    pub(crate) fn clear(&mut self) {
        *self = SeriesCache::default();
    }
}

impl SeriesCache<SeriesHandle> {
    /// Notes that a handle got its labels back.
    pub(crate) fn note_relabelled(&mut self) {
        self.relabelled = true;
    }

    /// Ends a successful scrape: the cache becomes this page's series in its order (series
    /// not on it are dropped), and labels the sink no longer needs are released.
    pub(crate) fn commit(&mut self) {
        let unchanged =
            self.in_order && self.fresh.is_empty() && self.order.len() == self.slots.len();
        if !unchanged {
            self.rebuild();
        } else if self.relabelled {
            for s in &mut self.slots {
                if let Some(h) = &mut s.series {
                    h.release_labels();
                }
            }
        }
        self.relabelled = false;
        self.fresh.clear();
        self.fresh_text.clear();
        self.order.clear();
    }

    fn rebuild(&mut self) {
        let n = self.slots.len() as u32;
        let old_text = std::mem::take(&mut self.text);
        let fresh_text = std::mem::take(&mut self.fresh_text);
        let mut old: Vec<Option<Slot<SeriesHandle>>> = self
            .slots
            .drain(..)
            .chain(self.fresh.drain(..))
            .map(Some)
            .collect();
        let total: usize = self
            .order
            .iter()
            .filter_map(|&i| old[i as usize].as_ref().map(|s| s.len as usize))
            .sum();
        self.text = String::with_capacity(total);
        self.index.clear();
        self.slots.reserve(self.order.len());
        for &i in &self.order {
            let Some(mut s) = old[i as usize].take() else {
                continue;
            };
            let src = if i < n { &old_text } else { &fresh_text };
            let t = &src[s.start as usize..(s.start + s.len) as usize];
            let j = self.slots.len() as u32;
            s.start = self.text.len() as u32;
            self.text.push_str(t);
            s.chain = self.index.insert(hash_text(t), j).unwrap_or(NONE);
            if let Some(h) = &mut s.series {
                h.release_labels();
            }
            self.slots.push(s);
        }
        self.slots.shrink_to_fit();
    }
}

/// The metadata lines (`# HELP`, `# TYPE`, `# UNIT`) of a target's last successful page, in
/// page order: a line written exactly as last time is skipped without lexing
/// ([`crate::model::exposition::Parser::next_known_meta`]; a `TYPE` line's type is kept for the
/// parser's state), and the target's metadata is rebuilt only when a line changed.
#[derive(Debug, Default)]
pub(crate) struct MetaLines {
    text: String,
    lines: Vec<(u32, u32, Option<MetricType>)>,
}

impl MetaLines {
    /// The number of lines.
    pub(crate) fn len(&self) -> usize {
        self.lines.len()
    }

    /// Line `k` and the type it declares (`TYPE` lines).
    #[inline]
    pub(crate) fn expected(&self, k: usize) -> Option<(&str, Option<MetricType>)> {
        let &(start, len, kind) = self.lines.get(k)?;
        Some((&self.text[start as usize..(start + len) as usize], kind))
    }

    /// Replaces the lines.
    pub(crate) fn set<'a>(&mut self, lines: impl Iterator<Item = (&'a str, Option<MetricType>)>) {
        self.text.clear();
        self.lines.clear();
        for (l, kind) in lines {
            self.lines
                .push((self.text.len() as u32, l.len() as u32, kind));
            self.text.push_str(l);
        }
        self.text.shrink_to_fit();
        self.lines.shrink_to_fit();
    }
}
