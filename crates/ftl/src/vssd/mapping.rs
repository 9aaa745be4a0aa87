//! Address mapping: which physical page holds each logical page, and the sequence
//! numbers that order every write and trim.
//!
//! A page-level map in both directions: `l2p` (logical page → local page, i.e.
//! block index × pages per block + page) serves reads and finds the page a write
//! replaces; `p2l` (local page → logical page) tells GC which pages of a victim are
//! live and whom they belong to. `lseq` keeps the sequence number of each logical
//! page's current content: checkpoints record it, and recovery uses it to tell the
//! current copy of a page from older ones and from GC copies. The block table
//! (valid counts) lives with allocation; [`Vssd::invalidate_page`] keeps the two
//! in step.

use super::{Inner, Vssd};

/// `l2p` value of an unmapped logical page; `p2l` value of a free or invalid page.
pub(crate) const UNMAPPED: u32 = u32::MAX;
/// `p2l` value of a page that holds a live trim record.
pub(crate) const TRIM_REC: u32 = u32::MAX - 1;

/// The mapping tables and sequence numbers of one vSSD.
#[derive(Debug)]
pub(crate) struct Mapping {
    /// Logical page → local page (block index × pages per block + page), or UNMAPPED.
    pub(crate) l2p: Vec<u32>,
    /// Logical page → sequence number of its current content (0 when unmapped).
    pub(crate) lseq: Vec<u64>,
    /// Local page → logical page, UNMAPPED (invalid/free) or TRIM_REC.
    pub(crate) p2l: Vec<u32>,
    /// Last sequence number handed out.
    pub(crate) seq: u64,
    /// Sequence number covered by the last durable checkpoint.
    pub(crate) ckpt_seq: u64,
    /// Local pages of trim records newer than the checkpoint.
    pub(crate) live_trims: Vec<u32>,
}

impl Mapping {
    /// Empty tables for `logical_pages` logical and `local_pages` physical pages.
    pub(crate) fn new(logical_pages: u64, local_pages: usize) -> Self {
        Self {
            l2p: vec![UNMAPPED; logical_pages as usize],
            lseq: vec![0; logical_pages as usize],
            p2l: vec![UNMAPPED; local_pages],
            seq: 0,
            ckpt_seq: 0,
            live_trims: Vec::new(),
        }
    }

    /// The next sequence number (for a write or a trim record about to be programmed).
    #[inline]
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Logical pages currently mapped.
    pub(crate) fn mapped_pages(&self) -> u64 {
        self.l2p.iter().filter(|&&x| x != UNMAPPED).count() as u64
    }

    /// Forgets every mapping and live trim record (the flash was erased).
    pub(crate) fn clear(&mut self) {
        self.l2p.fill(UNMAPPED);
        self.lseq.fill(0);
        self.p2l.fill(UNMAPPED);
        self.live_trims.clear();
    }
}

impl Vssd {
    /// Marks local page `lp` invalid.
    #[inline]
    pub(crate) fn invalidate_page(g: &mut Inner, lp: u32, ppb: u32) {
        if lp != UNMAPPED && g.map.p2l[lp as usize] != UNMAPPED {
            g.map.p2l[lp as usize] = UNMAPPED;
            g.blocks[(lp / ppb) as usize].valid -= 1;
        }
    }

    /// Unmaps logical page `lba`, invalidating the page that held it.
    #[inline]
    pub(crate) fn unmap(&self, g: &mut Inner, lba: u64) {
        let old = g.map.l2p[lba as usize];
        Self::invalidate_page(g, old, self.ppb);
        g.map.l2p[lba as usize] = UNMAPPED;
        g.map.lseq[lba as usize] = 0;
    }

    /// Maps logical page `lba` (content of sequence number `seq`) to the freshly
    /// programmed local page `lp`, replacing and invalidating its old page.
    #[inline]
    pub(crate) fn remap(&self, g: &mut Inner, lba: u64, lp: u32, seq: u64) {
        self.unmap(g, lba);
        g.map.l2p[lba as usize] = lp;
        g.map.lseq[lba as usize] = seq;
        g.map.p2l[lp as usize] = lba as u32;
        g.blocks[(lp / self.ppb) as usize].valid += 1;
    }
}
