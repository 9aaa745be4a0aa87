//! GC mechanics: draining a victim block by relocating its live pages, then
//! erasing it. The victim *policies* (which block) are the sibling modules; this
//! is how it is collected.
//!
//! Two modes share one drain: background GC ([`Vssd::gc_step`], after each host
//! write once a unit is low on free blocks) moves the write's share of the
//! victim's pages, so GC keeps pace with the host in small steps that reads can
//! interleave with; foreground GC ([`Vssd::gc_once`], when a host write finds its
//! unit almost out of blocks) collects whole victims. A relocated page keeps its
//! OOB record, and so its sequence number, which is what lets recovery tell a GC
//! copy from a newer write. Relocation programs through its own path
//! ([`Vssd::program_relocated`]): always on the victim's unit, and allowed to open
//! the reserve blocks host writes may not take.

use clock::Nanos;
use flash::Oob;

use super::Candidate;
use crate::vssd::{BState, Inner, Vssd, GC_RESERVE, TRIM_REC, UNMAPPED};
use crate::FtlError;

/// Background GC starts when a parallel unit has this many free blocks or
/// fewer: each host write to the unit then also moves its share of a victim's
/// valid pages, so that GC keeps pace with the host in small steps that reads
/// can interleave with (as real controllers do), instead of blocking a die for a
/// whole block's worth of copies.
pub(crate) const GC_SOFT: usize = 3;
/// Foreground GC: when a unit is down to this many free blocks, a host write
/// waits while whole victims are collected. Background GC starts one block
/// earlier than this used to, so it keeps as many blocks free as foreground GC
/// alone did: a higher start would eat into the over-provisioning and raise
/// write amplification (it did: 5 blocks of 32 made random writes 14x dearer).
pub(crate) const GC_LOW: usize = 2;

/// Pages one background GC step moves: the write's share `ratio` added to the
/// fraction of a page owed (`debt`, updated), whole pages of it, and at least
/// one, so a victim is always finished.
fn step_share(debt: &mut f64, ratio: f64) -> u32 {
    *debt += ratio;
    let n = debt.floor();
    *debt -= n;
    (n as u32).max(1)
}

impl Vssd {
    /// The unit's GC victim: the one being drained, or a fresh choice of the
    /// policy among closed blocks with invalid pages.
    fn victim(&self, g: &mut Inner, pu: usize, now: Nanos) -> Option<u32> {
        if let Some(v) = g.pus[pu].victim {
            return Some(v);
        }
        let ppb = self.ppb;
        let mut cands = Vec::new();
        let mut idx = Vec::new();
        for &b in &g.pus[pu].blocks {
            let blk = &g.blocks[b as usize];
            if blk.state == BState::Closed && blk.valid < ppb {
                cands.push(Candidate {
                    valid: blk.valid,
                    pages: ppb,
                    erase_count: blk.erase_count,
                    last_write: blk.last_write,
                });
                idx.push(b);
            }
        }
        if cands.is_empty() {
            return None;
        }
        let v = idx[self.policy.choose(&cands, now)];
        let valid = g.blocks[v as usize].valid;
        let st = &mut g.pus[pu];
        st.victim = Some(v);
        st.cursor = 0;
        // Each host page written must be matched by one page reclaimed: a victim
        // with `valid` live pages reclaims `ppb - valid` for `valid` copies.
        st.ratio = f64::from(valid) / f64::from(ppb - valid);
        Some(v)
    }

    /// Moves up to `max` live pages of the unit's victim, from its cursor on,
    /// issuing them at `now` (they queue on the die behind earlier work). When
    /// the victim has no live pages left it is erased and freed. Returns whether
    /// it was.
    fn drain(&self, g: &mut Inner, pu: usize, max: u32, now: Nanos) -> Result<bool, FtlError> {
        let Some(victim) = g.pus[pu].victim else {
            return Ok(false);
        };
        // Not `g.scratch`: GC can run inside a read-modify-write that holds it.
        // Taken out of `g` while `g` is lent to `program_relocated`, and put back below.
        let mut buf = std::mem::take(&mut g.gc_buf);
        buf.resize(self.page_size, 0);
        let r = self.drain_with(g, pu, victim, max, now, &mut buf);
        g.gc_buf = buf;
        r
    }

    /// [`Vssd::drain`] with its page buffer.
    fn drain_with(
        &self,
        g: &mut Inner,
        pu: usize,
        victim: u32,
        max: u32,
        now: Nanos,
        buf: &mut [u8],
    ) -> Result<bool, FtlError> {
        let ppb = self.ppb;
        let mut t = now;
        let mut moved = 0;
        while g.pus[pu].cursor < ppb && moved < max {
            let page = g.pus[pu].cursor;
            g.pus[pu].cursor += 1;
            let lp = victim * ppb + page;
            let owner = g.map.p2l[lp as usize];
            if owner == UNMAPPED {
                continue;
            }
            let r = self.move_page(g, pu, lp, owner, now, t, buf);
            if r.is_err() {
                // The page did not move: the next drain must look at it again.
                // Skipping it would erase the victim under a live page.
                g.pus[pu].cursor = page;
            }
            if let Some(done) = r? {
                t = t.max(done);
                g.counters.gc_pages_moved += 1;
                moved += 1;
            }
        }
        if g.pus[pu].cursor < ppb && g.blocks[victim as usize].valid > 0 {
            return Ok(false);
        }
        if g.blocks[victim as usize].valid > 0 {
            // Never erase a live page: only a bookkeeping bug gets here.
            return Err(FtlError::Recovery {
                name: self.cfg.name.clone(),
                reason: format!("GC victim {victim} still holds live pages after its drain"),
            });
        }
        self.erase_after_moves(g, victim, t, false)?;
        let blk = &mut g.blocks[victim as usize];
        debug_assert_eq!(blk.valid, 0);
        blk.state = BState::Free;
        blk.wp = 0;
        blk.valid = 0;
        blk.erase_count += 1;
        let ec = blk.erase_count;
        let st = &mut g.pus[pu];
        st.free.insert((ec, victim));
        st.victim = None;
        st.debt = 0.0;
        g.counters.gc_runs += 1;
        g.counters.block_erases += 1;
        Ok(true)
    }

    /// Moves live local page `lp` (holding logical page `owner`, or a trim record)
    /// to a block of `pu`, keeping its OOB record and so its sequence number: read
    /// issued at `now`, program at `after` or when the read is done. Returns the
    /// program's completion time, or `None` for a trim record that the last
    /// checkpoint covers, which is dropped instead.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn move_page(
        &self,
        g: &mut Inner,
        pu: usize,
        lp: u32,
        owner: u32,
        now: Nanos,
        after: Nanos,
        buf: &mut [u8],
    ) -> Result<Option<Nanos>, FtlError> {
        let ppb = self.ppb;
        let gp = self.global_page(g, lp);
        let oob = self.dev.oob(gp).ok_or_else(|| FtlError::Recovery {
            name: self.cfg.name.clone(),
            reason: format!("live page {gp} has no OOB record"),
        })?;
        if owner == TRIM_REC && oob.seq <= g.map.ckpt_seq {
            Self::invalidate_page(g, lp, ppb);
            return Ok(None);
        }
        let t = after.max(self.dev.read(gp, 0, buf, now)?);
        g.counters.flash_pages_read += 1;
        let (nlp, done) = self.program_relocated(g, pu, buf, &oob, t)?;
        Self::invalidate_page(g, lp, ppb);
        g.map.p2l[nlp as usize] = owner;
        g.blocks[(nlp / ppb) as usize].valid += 1;
        if owner == TRIM_REC {
            if let Some(x) = g.map.live_trims.iter_mut().find(|x| **x == lp) {
                *x = nlp;
            }
        } else {
            g.map.l2p[owner as usize] = nlp;
        }
        Ok(Some(t.max(done)))
    }

    /// Erases local block `b`, whose live pages were just moved, at `t`. The
    /// block holds (a) live pages whose copies are writes of this vSSD still
    /// in the page cache, and (b) stale versions that such writes replaced: a
    /// host crash that persisted the erase (the zeroed OOB records, or the
    /// hole punched) and not those writes would lose a version a FLUSH or FUA
    /// write had made durable (the power-loss harness, `crates/powerloss`,
    /// found both). So on a device that can outlive a crash the erase waits
    /// for every write of this vSSD so far to be durable:
    ///
    /// - GC's erase (`discard` false: this vSSD programs the block again) of
    ///   a block none of whose pages a sync made durable (every sequence
    ///   number in it above `Inner::durable_seq`) goes at once: no FLUSH or
    ///   FUA write depends on what it holds, so a tenant that never flushes
    ///   never waits. Its erase is not durable yet, which only matters for
    ///   space after a crash (see `Vssd::open_free_block`).
    /// - Otherwise GC's erase is booked on the die now, and its bytes are
    ///   erased when its unit is about to open its last block erased for
    ///   sure ([`Vssd::settle_erases`], for every block waiting at once),
    ///   after one sync of the vSSD's writes unless a sync that finished
    ///   since (a FLUSH, a FUA write, a checkpoint) covered them
    ///   (`Inner::safe_bookings`). Until then the block is free in the
    ///   tables and untouched on the device.
    ///   Syncing before each erase instead cost half the throughput of 4 KiB
    ///   random writes on the file backend (one `sync_file_range` of the
    ///   vSSD's dirty pages every 256 pages written).
    /// - An erase that hands the block over (`discard`: lent) syncs now.
    ///
    /// On memory devices both erase at once. Returns the erase's completion.
    pub(crate) fn erase_after_moves(
        &self,
        g: &mut Inner,
        b: u32,
        t: Nanos,
        discard: bool,
    ) -> Result<Nanos, FtlError> {
        let id = g.blocks[b as usize].id;
        if !self.dev.crash_exposed() {
            return Ok(if discard {
                self.dev.erase(id, t)?
            } else {
                self.dev.erase_for_reuse(id, t)?
            });
        }
        if !discard && g.blocks[b as usize].min_seq > g.durable_seq {
            // No page of the block was ever made durable by a sync: no FLUSH
            // or FUA write depends on it, and the erase may go now. The
            // erase itself is not durable yet (see `Vssd::open_free_block`).
            let done = self.dev.erase_for_reuse(id, t)?;
            g.dirty.erased(&self.geo, id);
            return Ok(done);
        }
        if !discard {
            let done = self.dev.erase_for_reuse_later(id, t)?;
            g.bookings += 1;
            let stamp = g.bookings;
            g.unerased.push((b, stamp));
            return Ok(done);
        }
        self.sync_for_erase(g)?;
        let done = self.dev.erase(id, t)?;
        g.dirty.erased(&self.geo, id);
        Ok(done)
    }

    /// Makes every write of this vSSD so far durable, from under its lock:
    /// its dirty set and the sets of group syncs still running (their
    /// writes are not durable until they finish).
    fn sync_for_erase(&self, g: &mut Inner) -> Result<(), FtlError> {
        let mut set = std::mem::take(&mut g.dirty);
        let own = set.clone();
        for (_, s) in &g.syncing {
            set.merge(s.clone());
        }
        if let Err(e) = self.dev.sync_dirty(&set, &self.own_runs()) {
            g.dirty.merge(own);
            return Err(e.into());
        }
        g.durable_seq = g.map.seq;
        g.safe_bookings = g.bookings;
        g.counters.erase_syncs += 1;
        Ok(())
    }

    /// Finishes every erase GC booked and left waiting (see
    /// [`Vssd::erase_after_moves`]), after one sync of the vSSD's writes (so
    /// the blocks' pages have durable copies) unless a finished sync covered
    /// them all, then makes the erase of every free block durable (only
    /// their OOB records and erase counts are written back), so a crash
    /// cannot bring their old pages back. For a unit about to open its last
    /// block whose erase is durable while others are not.
    pub(crate) fn settle_erases(&self, g: &mut Inner) -> Result<(), FtlError> {
        if g.unerased.iter().any(|&(_, n)| n > g.safe_bookings) {
            self.sync_for_erase(g)?;
        }
        // Each leaves the list once finished: after an error, the rest wait.
        while let Some(&(b, _)) = g.unerased.last() {
            // A block no longer free was lent since, and lending erased it.
            let id = g.blocks[b as usize].id;
            if g.blocks[b as usize].state == BState::Free && self.dev.finish_erase(id)? {
                g.dirty.erased(&self.geo, id);
            }
            g.unerased.pop();
        }
        let ids: Vec<flash::BlockId> = g
            .pus
            .iter()
            .flat_map(|st| st.free.iter())
            .map(|&(_, b)| g.blocks[b as usize].id)
            .filter(|&id| g.dirty.erased_since(id))
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        self.dev.sync_erases(&ids)?;
        for id in ids {
            g.dirty.erase_synced(id);
        }
        Ok(())
    }

    /// Whether free local block `b` is erased on the device durably: its
    /// erase is not waiting, and no sync still has to write it back.
    pub(crate) fn erase_durable(&self, g: &Inner, b: u32) -> bool {
        let id = g.blocks[b as usize].id;
        !self.dev.erase_pending(id)
            && !g.dirty.erased_since(id)
            && !g.syncing.iter().any(|(_, s)| s.erased_since(id))
    }

    /// Collects one whole victim block on `pu` (foreground GC). Returns false if
    /// no block can be collected.
    pub(crate) fn gc_once(&self, g: &mut Inner, pu: usize, now: Nanos) -> Result<bool, FtlError> {
        if self.victim(g, pu, now).is_none() {
            return Ok(false);
        }
        self.drain(g, pu, u32::MAX, now)
    }

    /// Whether unit `pu` has no GC to do: no victim being drained and free
    /// blocks above the soft mark, so [`Vssd::gc_step`] does nothing there
    /// (and host writes into its active block cannot change that).
    pub(crate) fn gc_idle(g: &Inner, pu: usize) -> bool {
        g.pus[pu].victim.is_none() && g.pus[pu].free.len() > GC_SOFT
    }

    /// The most pages `steps` background GC steps on `pu` ([`Vssd::gc_step`],
    /// one per host page) can move, when moving pages of the unit's victim
    /// into its active block is all they can do besides erasing it: the unit
    /// is not down to its whole-victim drain, and its victim (chosen now if
    /// the first step would choose it), once the host pages of logical pages
    /// `lbas` have replaced those of its pages they map to, either keeps live
    /// pages after the steps or is finished by them with the unit then back
    /// above GC's soft mark (so no next victim is chosen within them). `None`
    /// when the steps may do more, or when GC is due on the unit but has no
    /// victim yet (the write's own replaced pages may give it one).
    pub(crate) fn gc_steps_bound(
        &self,
        g: &mut Inner,
        pu: usize,
        steps: u32,
        lbas: std::ops::Range<u64>,
        now: Nanos,
    ) -> Option<u32> {
        if Self::gc_idle(g, pu) {
            return Some(0);
        }
        if g.pus[pu].free.len() <= GC_RESERVE + 1 {
            return None;
        }
        let Some(victim) = self.victim(g, pu, now) else {
            // Nothing to collect now, but the host pages about to be written
            // may replace pages of a closed block (or fill the active one
            // they replace pages of), and the steps then choose it and move
            // its pages into a block they open (the property test
            // `read_returns_last_write_filled` found it). The caller writes
            // page by page instead.
            return None;
        };
        let st = &g.pus[pu];
        let mut debt = st.debt;
        let total = (0..steps)
            .map(|_| step_share(&mut debt, st.ratio))
            .sum::<u32>();
        let replaced = lbas
            .filter(|&lba| {
                let lp = g.map.l2p[lba as usize];
                lp != UNMAPPED && lp / self.ppb == victim
            })
            .count() as u32;
        let left = g.blocks[victim as usize].valid.saturating_sub(replaced);
        if total < left {
            return Some(total);
        }
        // The steps finish the victim: its erase frees a block, and the steps
        // after it must find nothing to do.
        (g.pus[pu].free.len() + 1 > GC_SOFT).then_some(left)
    }

    /// Background GC after a host write to `pu`: moves the write's share of the
    /// victim's pages once the unit runs low on free blocks, and finishes a
    /// victim it has started.
    pub(crate) fn gc_step(&self, g: &mut Inner, pu: usize, now: Nanos) -> Result<(), FtlError> {
        if Self::gc_idle(g, pu) {
            return Ok(());
        }
        if self.victim(g, pu, now).is_none() {
            return Ok(());
        }
        let st = &mut g.pus[pu];
        if st.free.len() <= GC_RESERVE + 1 {
            // A partly drained victim must always be finishable: with one free
            // block left beside the active one, finish it now, while its
            // remaining live pages (fewer than a block) still fit.
            self.drain(g, pu, u32::MAX, now)?;
            return Ok(());
        }
        let n = step_share(&mut st.debt, st.ratio);
        self.drain(g, pu, n, now)?;
        Ok(())
    }

    /// Programs a page GC moves on unit `pu`, opening a free block there if it
    /// has no active one (GC may take the reserve). Returns its local page and
    /// completion time; the caller sets `p2l`.
    fn program_relocated(
        &self,
        g: &mut Inner,
        pu: usize,
        data: &[u8],
        oob: &Oob,
        now: Nanos,
    ) -> Result<(u32, Nanos), FtlError> {
        let b = match g.pus[pu].active {
            Some(b) => b,
            None => self
                .open_free_block(g, pu)?
                .ok_or_else(|| FtlError::NoSpace(self.cfg.name.clone()))?,
        };
        self.program_into(g, pu, b, data, oob, now)
    }
}
