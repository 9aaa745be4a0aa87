//! What one tenant changed on the flash since its last sync.
//!
//! Why: a `FLUSH` or FUA write must make *that tenant's* writes durable, and
//! syncing the whole device (every tenant's dirty pages, both whole mappings)
//! made one tenant's commit pay for all of them. An FTL records here every
//! page it programs and every block it erases, and [`FlashDevice::sync_dirty`]
//! syncs exactly those pages, their OOB records and the erase counts.
//!
//! Pages of a block are programmed in order, so a block's dirty pages are one
//! span; the set holds at most one entry per block however much is written
//! between syncs.
//!
//! [`FlashDevice::sync_dirty`]: crate::FlashDevice::sync_dirty

use std::collections::BTreeMap;

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

    /// Records that block `b` was erased (its data, OOB records and erase
    /// count changed).
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

    proptest! {
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
