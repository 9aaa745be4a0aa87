//! Block allocation for host programs: where the next host page (or trim record)
//! goes, and which free block a parallel unit opens next.
//!
//! The vSSD's flash is a table of blocks grouped in parallel units (one die of one
//! extent each), each unit filling one open block at a time; a unit opens its
//! least-erased free block (wear-aware allocation). Which unit a host page goes
//! to is the vSSD's [`Placement`]: striped page by page over the units,
//! round-robin (channel first, then die), or one unit's open block after
//! another. A host program may
//! not take a unit's last [`GC_RESERVE`] free blocks, which only GC relocation may
//! open, and it runs foreground GC first when the unit is low. GC relocation has
//! its own program path (`crate::gc::relocate`), which shares the two primitives
//! here: opening a free block and programming the next page of an open one.

use std::collections::BTreeSet;

use clock::Nanos;
use flash::{BlockId, FlashDevice, Geometry, Oob};
use serde::{Deserialize, Serialize};

use super::{Inner, Vssd, VssdConfig};
use crate::gc::GC_LOW;
use crate::FtlError;

/// Where a vSSD's host pages go among its parallel units (dies).
///
/// Why two: striping is what gives an SSD its bandwidth (a request's pages
/// program on every die at once), and in emulation mode a vSSD's modelled
/// bandwidth follows its channel count only if its pages stripe. But on the
/// file backend the units' open blocks lie far apart in the data file, so the
/// pages a tenant wrote between two flushes, striped, are one range per unit
/// there (and one range of OOB records per unit in the metadata file): a
/// flush after a small commit wrote back 16 ranges of each file on the
/// default vSSD, and a 128 KiB write was 16 writes of pages and 16 of
/// records. Filled unit by unit they are one range of each: under pgbench
/// on btrfs the host disk saw 4.4 writes per transaction instead of 20.8,
/// as many as `nbdkit file`'s. Where replies wait for modelled time
/// (emulation mode), stripe; where they do not, fill costs nothing the
/// tenant sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Page by page over the units, round-robin: a request's pages program
    /// in parallel.
    #[default]
    Stripe,
    /// One unit's open block at a time, the next unit's when it is full:
    /// pages written one after another lie side by side in flash (and in
    /// the data file).
    Fill,
}

impl Placement {
    /// The unit the host page after one programmed on `pu` goes to, among
    /// `npu`, given whether `pu`'s open block still has room.
    pub(crate) fn next(self, pu: usize, npu: usize, open: bool) -> usize {
        match self {
            Placement::Fill if open => pu,
            Placement::Stripe | Placement::Fill => (pu + 1) % npu,
        }
    }
}

/// Blocks per parallel unit that only GC may open (so GC can always make progress).
pub(crate) const GC_RESERVE: usize = 1;

/// What a block is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BState {
    /// Erased, in its unit's free list.
    Free,
    /// Its unit's active block, being filled.
    Open,
    /// Full (or left partly written by a crash); a GC candidate.
    Closed,
    /// Being emptied by [`Vssd::lend`]: neither allocated nor a GC victim.
    Draining,
    /// Lent to a ghost vSSD: not ours until taken back.
    Lent,
}

/// One erase block owned by the vSSD.
#[derive(Debug, Clone)]
pub(crate) struct Blk {
    pub(crate) id: BlockId,
    pub(crate) pu: u32,
    pub(crate) state: BState,
    /// Next page to program.
    pub(crate) wp: u32,
    pub(crate) valid: u32,
    pub(crate) erase_count: u32,
    pub(crate) last_write: Nanos,
    /// The lowest sequence number among the pages programmed into it since
    /// it was opened (`u64::MAX` for none; 0, the safe side, when unknown
    /// after a restart): see `Vssd::erase_after_moves`.
    pub(crate) min_seq: u64,
}

/// Allocation and background-GC state of one parallel unit.
#[derive(Debug, Default)]
pub(crate) struct PuState {
    /// Free blocks by (erase count, local block): the least-worn is used first.
    pub(crate) free: BTreeSet<(u32, u32)>,
    /// The block being filled, if any.
    pub(crate) active: Option<u32>,
    /// Every local block of this unit (for GC candidates).
    pub(crate) blocks: Vec<u32>,
    /// Background GC: the victim being drained, the next page of it to look at,
    /// pages to move per host write, and the fraction of a page owed.
    pub(crate) victim: Option<u32>,
    pub(crate) cursor: u32,
    pub(crate) ratio: f64,
    pub(crate) debt: f64,
}

/// The block table of a vSSD on `cfg`'s extents: its blocks (lent ones marked
/// lent, the others free, erase counts from the device) and its parallel units,
/// numbered die-major so consecutive pages go to different channels.
pub(crate) fn block_table(
    geo: &Geometry,
    dev: &FlashDevice,
    cfg: &VssdConfig,
) -> (Vec<Blk>, Vec<PuState>) {
    let mut blocks = Vec::new();
    let mut pus = Vec::new();
    for die in 0..geo.dies_per_channel {
        for e in &cfg.extents {
            let pu = pus.len() as u32;
            let mut st = PuState::default();
            for plane in 0..geo.planes_per_die {
                for b in e.first_block..e.first_block + e.blocks {
                    let id = geo.block_id(e.channel, die, plane, b);
                    let lent = cfg.lent.iter().any(|l| l.contains(geo, id));
                    st.blocks.push(blocks.len() as u32);
                    blocks.push(Blk {
                        id,
                        pu,
                        state: if lent { BState::Lent } else { BState::Free },
                        wp: 0,
                        valid: 0,
                        erase_count: dev.erase_count(id),
                        last_write: 0,
                        min_seq: 0,
                    });
                }
            }
            pus.push(st);
        }
    }
    (blocks, pus)
}

impl Vssd {
    /// Programs one host page (data or trim record) on the next parallel unit that
    /// can take it (see [`Placement`]; a unit that cannot is skipped,
    /// round-robin), and returns its local page and completion time.
    /// The caller sets `p2l`.
    pub(crate) fn program_host(
        &self,
        g: &mut Inner,
        data: &[u8],
        oob: &Oob,
        now: Nanos,
    ) -> Result<(u32, Nanos), FtlError> {
        let npu = g.pus.len();
        for attempt in 0..npu {
            let p = (g.rr + attempt) % npu;
            let b = match g.pus[p].active {
                Some(b) => Some(b),
                None => self.open_host_block(g, p, now)?,
            };
            let Some(b) = b else {
                continue;
            };
            let r = self.program_into(g, p, b, data, oob, now)?;
            g.rr = g.placement.next(p, npu, g.pus[p].active.is_some());
            return Ok(r);
        }
        Err(FtlError::NoSpace(self.cfg.name.clone()))
    }

    /// Opens a new active block on `pu` for host pages, running foreground GC
    /// first if free blocks are low. Never takes the GC reserve.
    fn open_host_block(
        &self,
        g: &mut Inner,
        pu: usize,
        now: Nanos,
    ) -> Result<Option<u32>, FtlError> {
        let mut rounds = g.pus[pu].blocks.len();
        while g.pus[pu].free.len() <= GC_LOW && rounds > 0 {
            rounds -= 1;
            if !self.gc_once(g, pu, now)? {
                break;
            }
        }
        // GC may have opened a block for the pages it moved: fill that first.
        if let Some(b) = g.pus[pu].active {
            return Ok(Some(b));
        }
        if g.pus[pu].free.len() <= GC_RESERVE {
            return Ok(None);
        }
        let b = self.open_free_block(g, pu)?;
        self.check_pressure(g, pu);
        Ok(b)
    }

    /// Makes a free block of `pu` its active block, if it has one: the
    /// least-worn. On a device that can outlive a crash, the least-worn whose
    /// erase is durable, and never the unit's last such block while others
    /// wait (GC's erases wait for the vSSD's writes to be durable: see
    /// `Vssd::erase_after_moves`): after a crash a waiting block holds its
    /// old pages again, and a unit left with no erased block could not run
    /// GC (the power-loss harness found one). Then every waiting erase is
    /// finished and made durable first (`Vssd::settle_erases`).
    pub(crate) fn open_free_block(
        &self,
        g: &mut Inner,
        pu: usize,
    ) -> Result<Option<u32>, FtlError> {
        let Some(&least) = g.pus[pu].free.iter().next() else {
            return Ok(None);
        };
        let mut first = least;
        if self.dev.crash_exposed() {
            // The two least-worn durably erased blocks are all it takes to
            // decide (least-worn blocks are usually durable: no full scan).
            let mut durable = g.pus[pu]
                .free
                .iter()
                .copied()
                .filter(|&(_, b)| self.erase_durable(g, b));
            let (one, two) = (durable.next(), durable.next());
            // With one durable block, any other free block is waiting.
            let last_one = two.is_none() && g.pus[pu].free.len() > 1;
            if one.is_none() || last_one {
                self.settle_erases(g)?;
                if let Some(&d) = g.pus[pu]
                    .free
                    .iter()
                    .find(|&&(_, b)| self.erase_durable(g, b))
                {
                    first = d;
                }
            } else if let Some(d) = one {
                first = d;
            }
        }
        g.pus[pu].free.remove(&first);
        let b = first.1;
        let blk = &mut g.blocks[b as usize];
        blk.state = BState::Open;
        blk.wp = 0;
        blk.valid = 0;
        blk.min_seq = u64::MAX;
        g.pus[pu].active = Some(b);
        Ok(Some(b))
    }

    /// Programs the next page of `pu`'s active block `b`, closing the block when it
    /// is full. Returns the local page and the completion time.
    #[inline]
    pub(crate) fn program_into(
        &self,
        g: &mut Inner,
        pu: usize,
        b: u32,
        data: &[u8],
        oob: &Oob,
        now: Nanos,
    ) -> Result<(u32, Nanos), FtlError> {
        let lp = self.program_run_into(g, pu, b, &[data], std::slice::from_ref(oob), now)?;
        Ok((lp, self.dev.book_program(self.global_page(g, lp), now)))
    }

    /// Writes the next `data.len()` pages of `pu`'s active block `b` (which
    /// has room for them) in one device program, closing the block when it
    /// is full, and returns the first local page. Books no time: the caller
    /// books each page ([`flash::FlashDevice::book_program`]).
    pub(crate) fn program_run_into(
        &self,
        g: &mut Inner,
        pu: usize,
        b: u32,
        data: &[&[u8]],
        oobs: &[Oob],
        now: Nanos,
    ) -> Result<u32, FtlError> {
        let k = data.len() as u32;
        let blk = &mut g.blocks[b as usize];
        let page = blk.wp;
        let at = self.geo.first_page(blk.id) + page as u64;
        self.dev.program_run(at, data, oobs)?;
        for i in 0..u64::from(k) {
            g.dirty.programmed(&self.geo, at + i);
        }
        let blk = &mut g.blocks[b as usize];
        blk.wp += k;
        blk.last_write = now;
        blk.min_seq = oobs.iter().fold(blk.min_seq, |m, o| m.min(o.seq));
        if blk.wp == self.ppb {
            blk.state = BState::Closed;
            g.pus[pu].active = None;
        }
        g.counters.flash_pages_written += u64::from(k);
        Ok(b * self.ppb + page)
    }
}
