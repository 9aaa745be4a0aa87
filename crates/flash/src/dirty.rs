//! What one tenant changed on the flash since its last sync.
//!
//! Why: a `FLUSH` or FUA write must make *that tenant's* writes durable, and
//! syncing the whole device (every tenant's dirty pages, both whole mappings)
//! made one tenant's commit pay for all of them. An FTL records here every
//! page it programs and every block it erases, and [`FlashDevice::sync_dirty`]
//! syncs those pages, their OOB records and the erase counts (with the runs
//! the tenant holds alone as spans: see [`OwnRuns`]).
//!
//! Pages of a block are programmed in order, so a block's dirty pages are one
//! span; the set holds at most one entry per block however much is written
//! between syncs.
//!
//! [`FlashDevice::sync_dirty`]: crate::FlashDevice::sync_dirty

use std::collections::BTreeMap;
use std::ops::Range;

use crate::{BlockId, Geometry, PageId};

/// A block's pages changed since the last sync: programmed pages `lo..hi`,
/// and whether it was erased (all its OOB records and its erase count changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) lo: u32,
    pub(crate) hi: u32,
    pub(crate) erased: bool,
}

/// The pages and blocks a tenant changed since its last sync.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DirtySet {
    pub(crate) blocks: BTreeMap<BlockId, Span>,
}

impl DirtySet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that page `p` was programmed.
    pub fn programmed(&mut self, geo: &Geometry, p: PageId) {
        let (b, pg) = geo.split(p);
        self.blocks
            .entry(b)
            .and_modify(|s| {
                s.lo = s.lo.min(pg);
                s.hi = s.hi.max(pg + 1);
            })
            .or_insert(Span {
                lo: pg,
                hi: pg + 1,
                erased: false,
            });
    }

    /// Records that block `b` was erased (its OOB records and erase count
    /// changed, and its data if the erase punched it).
    pub fn erased(&mut self, geo: &Geometry, b: BlockId) {
        let ppb = geo.pages_per_block;
        let s = self.blocks.entry(b).or_insert(Span {
            lo: 0,
            hi: ppb,
            erased: true,
        });
        s.lo = 0;
        s.hi = ppb;
        s.erased = true;
    }

    /// Forgets that block `b` was erased, once its erase was made durable on
    /// its own ([`crate::FlashDevice::sync_erases`]); the pages it records
    /// stay.
    pub fn erase_synced(&mut self, b: BlockId) {
        if let Some(s) = self.blocks.get_mut(&b) {
            s.erased = false;
        }
    }

    /// Whether the set records an erase of block `b`.
    pub fn erased_since(&self, b: BlockId) -> bool {
        self.blocks.get(&b).is_some_and(|s| s.erased)
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Blocks with changes.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Adds everything in `other` (a sync that failed gives its set back).
    pub fn merge(&mut self, other: DirtySet) {
        for (b, o) in other.blocks {
            self.blocks
                .entry(b)
                .and_modify(|s| {
                    s.lo = s.lo.min(o.lo);
                    s.hi = s.hi.max(o.hi);
                    s.erased |= o.erased;
                })
                .or_insert(o);
        }
    }

    /// Whether page `p`'s data and OOB record are covered.
    pub fn covers(&self, geo: &Geometry, p: PageId) -> bool {
        let (b, pg) = geo.split(p);
        self.blocks.get(&b).is_some_and(|s| s.lo <= pg && pg < s.hi)
    }
}

/// Runs of consecutive block ids that one tenant holds alone (its extents less
/// what it has lent), so that a sync may cover each run's dirty blocks with one
/// span instead of a range per block.
///
/// Why: a tenant's writes are striped over its parallel units, so its dirty
/// set holds one open block per unit, far apart in the file; syncing them
/// range by range cost 16 `sync_file_range` calls per flush on a 4-channel
/// vSSD, and as many waits. Within a run every block is the tenant's own, so
/// a span from its first dirty page to its last writes back no other
/// tenant's pages (clean pages in between cost a page-cache lookup, not I/O).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnRuns(Vec<Range<BlockId>>);

impl OwnRuns {
    /// Runs from any block ranges: sorted, touching ones merged, empty ones
    /// dropped.
    pub fn new(ranges: impl IntoIterator<Item = Range<BlockId>>) -> Self {
        let mut v: Vec<Range<BlockId>> = ranges.into_iter().filter(|r| r.start < r.end).collect();
        v.sort_unstable_by_key(|r| r.start);
        let mut out: Vec<Range<BlockId>> = Vec::with_capacity(v.len());
        for r in v {
            match out.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => out.push(r),
            }
        }
        Self(out)
    }

    /// Index of the run holding block `b`.
    pub(crate) fn run_of(&self, b: BlockId) -> Option<usize> {
        let i = self.0.partition_point(|r| r.end <= b);
        (i < self.0.len() && self.0[i].start <= b).then_some(i)
    }

    /// The runs.
    pub fn runs(&self) -> &[Range<BlockId>] {
        &self.0
    }
}

/// Byte ranges tagged with the own run they lie in (`None`: none), turned
/// into what to sync: the ranges of one run become the one span from the
/// first to the last, then everything is rounded out to `align` and merged
/// where it touches (see [`OwnRuns`]).
pub(crate) fn spans(ranges: &[(usize, usize, Option<usize>)], align: usize) -> Vec<(usize, usize)> {
    let mut hull: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut out = Vec::with_capacity(ranges.len());
    for &(off, len, run) in ranges {
        match run {
            Some(k) => {
                let h = hull.entry(k).or_insert((off, off + len));
                h.0 = h.0.min(off);
                h.1 = h.1.max(off + len);
            }
            None => out.push((off, len)),
        }
    }
    out.extend(hull.into_values().map(|(a, b)| (a, b - a)));
    coalesce(out, align)
}

/// Byte ranges, rounded out to `align` and merged where they touch: what to
/// sync of one file.
pub(crate) fn coalesce(mut ranges: Vec<(usize, usize)>, align: usize) -> Vec<(usize, usize)> {
    for r in &mut ranges {
        let start = r.0 / align * align;
        let end = (r.0 + r.1).div_ceil(align) * align;
        *r = (start, end - start);
    }
    ranges.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (s, n) in ranges {
        match out.last_mut() {
            Some(last) if s <= last.0 + last.1 => {
                let end = (last.0 + last.1).max(s + n);
                last.1 = end - last.0;
            }
            _ => out.push((s, n)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn geo() -> Geometry {
        Geometry {
            channels: 2,
            dies_per_channel: 1,
            planes_per_die: 1,
            blocks_per_plane: 4,
            pages_per_block: 8,
            page_size: 4096,
        }
    }

    #[test]
    fn one_span_per_block() {
        let g = geo();
        let mut d = DirtySet::new();
        for p in [9, 10, 11, 3] {
            d.programmed(&g, p);
        }
        assert_eq!(d.len(), 2);
        assert!(d.covers(&g, 10) && d.covers(&g, 3) && !d.covers(&g, 12) && !d.covers(&g, 2));
        d.erased(&g, 0);
        assert!((0..8).all(|p| d.covers(&g, p)));
        let mut e = DirtySet::new();
        e.programmed(&g, 30);
        d.merge(e);
        assert!(d.covers(&g, 30) && d.len() == 3);
    }

    #[test]
    fn coalesce_rounds_and_merges() {
        assert_eq!(
            coalesce(vec![(8192, 10), (0, 1), (4095, 2), (20000, 0)], 4096),
            [(0, 12288), (16384, 4096)]
        );
        assert!(coalesce(Vec::new(), 4096).is_empty());
    }

    #[test]
    fn own_runs_merge_and_find() {
        let r = OwnRuns::new([8..12, 0..4, 4..6, 20..20, 30..31]);
        assert_eq!(r.runs(), &[0..6, 8..12, 30..31]);
        assert_eq!(r.run_of(0), Some(0));
        assert_eq!(r.run_of(5), Some(0));
        assert_eq!(r.run_of(6), None);
        assert_eq!(r.run_of(11), Some(1));
        assert_eq!(r.run_of(12), None);
        assert_eq!(r.run_of(30), Some(2));
        assert_eq!(r.run_of(99), None);
        assert_eq!(OwnRuns::default().run_of(0), None);
    }

    #[test]
    fn spans_join_a_run_and_leave_the_rest() {
        // Two ranges of run 0 far apart become one span; the untagged ones
        // stay as they are (and merge only where they touch).
        let got = spans(
            &[
                (0, 10, Some(0)),
                (1 << 20, 4096, Some(0)),
                (5 << 20, 100, None),
                (9 << 20, 4096, Some(1)),
            ],
            4096,
        );
        assert_eq!(
            got,
            [(0, (1 << 20) + 4096), (5 << 20, 4096), (9 << 20, 4096)]
        );
        assert!(spans(&[], 4096).is_empty());
    }

    proptest! {
        /// Every byte of every input range is inside exactly one output span,
        /// and a span reaches no further than the rounded hull of its run's
        /// ranges (or, untagged, its own range): a sync covers everything the
        /// set holds and nothing outside the runs it names.
        #[test]
        fn spans_cover_everything_and_stay_in_their_runs(
            ranges in proptest::collection::vec((0usize..200_000, 1usize..10_000, proptest::option::of(0usize..3)), 0..40)
        ) {
            let out = spans(&ranges, 4096);
            for w in out.windows(2) {
                prop_assert!(w[0].0 + w[0].1 < w[1].0);
            }
            for &(s, n, _) in &ranges {
                for b in [s, s + n - 1] {
                    prop_assert_eq!(out.iter().filter(|&&(o, m)| o <= b && b < o + m).count(), 1);
                }
            }
            // The allowed area: each run's hull and each untagged range, rounded.
            let mut allowed: Vec<(usize, usize)> = ranges.iter().filter(|r| r.2.is_none()).map(|&(s, n, _)| (s, n)).collect();
            for k in 0..3 {
                let mine: Vec<_> = ranges.iter().filter(|r| r.2 == Some(k)).collect();
                if let (Some(lo), Some(hi)) = (mine.iter().map(|r| r.0).min(), mine.iter().map(|r| r.0 + r.1).max()) {
                    allowed.push((lo, hi - lo));
                }
            }
            let allowed = coalesce(allowed, 4096);
            for &(o, m) in &out {
                for b in [o, o + m - 1] {
                    prop_assert!(allowed.iter().any(|&(a, n)| a <= b && b < a + n), "span byte {} outside every run", b);
                }
            }
        }

        /// Every byte of every input range is inside exactly one output range;
        /// outputs are aligned, sorted and do not touch.
        #[test]
        fn coalesce_covers_everything(ranges in proptest::collection::vec((0usize..100_000, 1usize..10_000), 0..40)) {
            let out = coalesce(ranges.clone(), 4096);
            for w in out.windows(2) {
                prop_assert!(w[0].0 + w[0].1 < w[1].0);
            }
            for &(s, n) in &out {
                prop_assert!(s % 4096 == 0 && n % 4096 == 0 && n > 0);
            }
            for (s, n) in ranges {
                for b in [s, s + n - 1] {
                    prop_assert_eq!(out.iter().filter(|&&(o, m)| o <= b && b < o + m).count(), 1);
                }
            }
        }
    }
}
