//! Lending flash to ghost vSSDs (BlockFlex §4.3, §4.5).
//!
//! BlockFlex harvests the free blocks of allocated-but-idle regular vSSDs into
//! *ghost* vSSDs (gSSDs). A gSSD is an ordinary [`Vssd`] with its own owner id and
//! mapping, built on [`Extent`]s its *home* vSSD has lent, so the two never share a
//! block and never need to synchronise mapping tables.
//!
//! Why the lent range is "the top `n` blocks of every plane of a channel": one
//! extent per channel keeps the gSSD's bandwidth a whole number of channels (the
//! paper's unit), keeps the lent state small enough to live in [`VssdConfig`]
//! (`lent`), and lets recovery tell the borrower's blocks from the home's by
//! position alone, before reading a single OOB record.
//!
//! Lending empties the range while the home keeps serving I/O: the blocks that
//! hold data are first withdrawn from allocation and GC (erased ones stay free,
//! as working room for GC and the moves, and are withdrawn last, once GC has
//! made room beside them), then each one's live pages (data and
//! trim records newer than the checkpoint) move to another block of the same
//! parallel unit, exactly as GC moves them (same OOB record, so recovery is
//! unchanged, timed by the flash model and queued behind earlier work on the die),
//! and the block is erased. The vSSD lock is released between blocks, so host
//! I/O interleaves with the move. Lend, take-back, `erase_all` and `destroy` are
//! serialised by a second lock.
//!
//! Headroom (documented on [`Vssd::lendable`] and [`Vssd::needs_reclaim`]): a unit
//! keeps enough blocks for its valid data, GC's working room and a safety margin of
//! an eighth of its blocks; the reclaim signal fires when half of that margin is
//! gone, well before writes could run out of space.

use super::*;
use crate::gc::{GC_LOW, GC_SOFT};

/// Safety margin, in blocks, that lending leaves in a parallel unit of
/// `pu_blocks` blocks beyond its valid data and GC's room: an eighth of the unit
/// (the default over-provisioning), and at least 2 blocks.
fn margin(pu_blocks: usize) -> usize {
    (pu_blocks / 8).max(2)
}

/// GC's working room in a unit, in blocks: what [`max_capacity`] already keeps
/// out of the exported space (background GC's trigger plus the open block and the
/// reserve).
const GC_ROOM: usize = GC_SOFT + 2;

impl Vssd {
    /// Blocks per plane that could be lent now on each of the vSSD's channels
    /// (channel, blocks), in the order of its extents, one entry per channel.
    ///
    /// Counted from the top of the channel's (topmost) extent downwards. Every
    /// parallel unit (die) of that extent keeps at least
    /// `ceil(valid pages / pages per block) + GC_SOFT + 2 + max(2, blocks / 8)`
    /// blocks: room for its valid data once compacted, for GC to work (the headroom
    /// [`max_capacity`] keeps), and a margin of an eighth of the unit; the answer is
    /// the minimum over the dies, in whole blocks per plane. A channel that already
    /// has a lent range, or that a lend in progress is emptying, reports 0.
    pub fn lendable(&self) -> Vec<(u32, u32)> {
        let g = self.inner.lock();
        self.channels()
            .into_iter()
            .map(|ch| {
                let busy = g.lent.iter().any(|l| l.channel == ch) || g.lending.contains(&ch);
                let n = match self.top_extent(ch) {
                    Some(ei) if !busy => self.lendable_on(&g, ei),
                    _ => 0,
                };
                (ch, n)
            })
            .collect()
    }

    /// Lends the top `blocks` blocks of every plane on each channel in `channels`:
    /// moves any valid data (and live trim records) off them, erases them, and stops
    /// allocating from them. Returns the lent extents, one per channel, in the order
    /// of `channels`; [`Vssd::config`] includes them from then on.
    ///
    /// Atomic from the caller's view: on error nothing is lent (data already moved
    /// stays where it went, which changes nothing a reader sees). Host I/O keeps
    /// working meanwhile, slower while pages move (the moves occupy the dies in the
    /// flash model, like GC).
    ///
    /// Crash safety: the control plane should persist [`Vssd::config`] after this
    /// returns and before anything writes to the extents; a crash before that
    /// leaves erased blocks that recovery simply takes back as free.
    ///
    /// Errors: [`FtlError::BadLend`] (no channels, zero blocks, a channel named
    /// twice), [`FtlError::UnknownChannel`], [`FtlError::AlreadyLent`],
    /// [`FtlError::NotLendable`] (more than [`Vssd::lendable`]), [`FtlError::Gone`],
    /// and [`FtlError::LendNoRoom`] if the unit ran out of free flash while data
    /// moved (host writes beside the lend used the headroom).
    pub fn lend(&self, channels: &[u32], blocks: u32) -> Result<Vec<Extent>, FtlError> {
        let _serial = self.lend_lock.lock();
        let (exts, members) = {
            let mut g = self.inner.lock();
            let exts = self.check_lend(&g, channels, blocks)?;
            // Blocks holding data are withdrawn now; erased ones stay in the free
            // lists, where GC (and the moves) need them as working room, and are
            // withdrawn last, one at a time, once GC has made room beside them.
            // Withdrawing them all up front could leave a unit with no free block
            // outside the range, and GC cannot run without one.
            let (mut members, mut erased) = (Vec::new(), Vec::new());
            for &(ei, x) in &exts {
                for pu in self.pus_of_extent(ei) {
                    for k in 0..g.pus[pu].blocks.len() {
                        let b = g.pus[pu].blocks[k];
                        if x.contains(&self.geo, g.blocks[b as usize].id) {
                            if g.blocks[b as usize].state == BState::Free {
                                erased.push((pu, b));
                            } else {
                                Self::withdraw(&mut g, pu, b);
                                members.push((pu, b));
                            }
                        }
                    }
                }
            }
            members.extend(erased);
            g.lending = channels.to_vec();
            (exts, members)
        };
        let mut res = Ok(());
        for &(pu, b) in &members {
            // One block per lock hold: host I/O runs in between.
            let mut g = self.inner.lock();
            if g.gone {
                res = Err(FtlError::Gone(self.cfg.name.clone()));
                break;
            }
            let now = self.clock.now();
            let r = self
                .withdraw_late(&mut g, pu, b, now)
                .and_then(|()| self.evacuate(&mut g, pu, b, now));
            if let Err(e) = r {
                // Out of room while moving data: tell it apart from a host
                // write's NoSpace (the caller may retry; nothing was lent).
                res = Err(match e {
                    FtlError::NoSpace(n) => FtlError::LendNoRoom(n),
                    e => e,
                });
                break;
            }
        }
        let mut g = self.inner.lock();
        g.lending.clear();
        match res {
            Ok(()) => {
                let out: Vec<Extent> = exts.iter().map(|&(_, x)| x).collect();
                g.lent.extend_from_slice(&out);
                self.set_own_runs(&g.lent);
                tracing::info!(vssd = %self.cfg.name, ?out, "blocks lent");
                Ok(out)
            }
            Err(e) => {
                self.restore(&mut g, &members);
                Err(e)
            }
        }
    }

    /// Takes lent extents back: erases every block of them that is not erased (the
    /// borrower's data must never become readable by the home tenant) and allocates
    /// from them again. Each extent must be exactly one that [`Vssd::lent`] lists.
    ///
    /// Returns the simulated time the erases take (a duration, from now until the
    /// last completes), as the flash model times them: blocks of different dies and
    /// channels in parallel, one die's blocks one after another, behind any work
    /// already queued on the die. The borrower (the gSSD) must be stopped or
    /// destroyed first: a page it programs after this would land in the home's
    /// flash.
    ///
    /// Errors: [`FtlError::NotLent`], [`FtlError::BadLend`] (an extent named twice),
    /// [`FtlError::Gone`]; on error nothing is taken back.
    pub fn take_back(&self, extents: &[Extent]) -> Result<Nanos, FtlError> {
        let _serial = self.lend_lock.lock();
        let g = self.inner.lock();
        if g.gone {
            return Err(FtlError::Gone(self.cfg.name.clone()));
        }
        for (i, x) in extents.iter().enumerate() {
            if extents[..i].contains(x) {
                return Err(FtlError::BadLend {
                    name: self.cfg.name.clone(),
                    reason: format!("{x:?} named twice"),
                });
            }
            if !g.lent.contains(x) {
                return Err(FtlError::NotLent {
                    name: self.cfg.name.clone(),
                    extent: *x,
                });
            }
        }
        let mut members = Vec::new();
        for x in extents {
            for pu in self.pus_on_channel(x.channel) {
                for &b in &g.pus[pu].blocks {
                    if x.contains(&self.geo, g.blocks[b as usize].id) {
                        members.push((pu, b));
                    }
                }
            }
        }
        // The erases run without the lock, so the home tenant's I/O goes on
        // beside them (hole punches and OOB writes in the host file: a
        // reclaim must not stall the tenant it gives room to). Lent blocks
        // are touched by nothing but lending, taking back and destroying,
        // which `lend_lock` keeps out; they turn free only below.
        let ids: Vec<_> = members
            .iter()
            .map(|&(_, b)| g.blocks[b as usize].id)
            .collect();
        drop(g);
        let now = self.clock.now();
        let mut done = now;
        let mut erased = Vec::new();
        let mut res = Ok(());
        for &id in &ids {
            // An erased block may hold bytes the borrower's GC left: they go too.
            match self.dev.erase_to_hand_over(id, now) {
                Ok(Some(t)) => {
                    done = done.max(t);
                    erased.push(id);
                }
                Ok(None) => {}
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        let mut g = self.inner.lock();
        for &id in &erased {
            g.dirty.erased(&self.geo, id);
            g.counters.block_erases += 1;
        }
        // The blocks stay lent on an error: taking them back again retries.
        res?;
        for &(pu, b) in &members {
            let blk = &mut g.blocks[b as usize];
            debug_assert_eq!(blk.state, BState::Lent);
            blk.erase_count = self.dev.erase_count(blk.id);
            blk.state = BState::Free;
            blk.wp = 0;
            blk.valid = 0;
            let ec = blk.erase_count;
            g.pus[pu].free.insert((ec, b));
        }
        g.lent.retain(|l| !extents.contains(l));
        self.set_own_runs(&g.lent);
        g.returned += 1;
        drop(g);
        self.room.wake();
        tracing::info!(vssd = %self.cfg.name, ?extents, "lent blocks taken back");
        Ok(done - now)
    }

    /// Extents currently lent.
    pub fn lent(&self) -> Vec<Extent> {
        self.inner.lock().lent.clone()
    }

    /// True when the home vSSD needs its lent blocks back soon (the signal for
    /// BlockFlex's early reclamation): on some channel with a lent range, some
    /// parallel unit's headroom — its blocks not lent, minus
    /// `ceil(valid pages / pages per block)` — fell below
    /// `GC_SOFT + 2 + max(2, blocks / 8) / 2`, i.e. the regular tenant's valid data
    /// grew by half the safety margin [`Vssd::lendable`] leaves. Writes fail with
    /// [`FtlError::NoSpace`] only when the headroom is down to about two blocks, so
    /// the signal comes at least `GC_SOFT + 1` blocks per unit earlier.
    pub fn needs_reclaim(&self) -> bool {
        let g = self.inner.lock();
        g.lent.iter().any(|l| {
            self.pus_on_channel(l.channel)
                .into_iter()
                .any(|pu| self.pu_pressed(&g, pu))
        })
    }

    /// Whether unit `pu`'s headroom (blocks not lent, minus its valid data) is
    /// below the reclaim threshold of [`Vssd::needs_reclaim`].
    pub(super) fn pu_pressed(&self, g: &Inner, pu: usize) -> bool {
        let st = &g.pus[pu];
        let total = st.blocks.len();
        let own = st
            .blocks
            .iter()
            .filter(|&&b| g.blocks[b as usize].state != BState::Lent)
            .count();
        let headroom = own.saturating_sub(self.valid_blocks(g, pu));
        headroom < GC_ROOM + margin(total) / 2
    }

    /// Erases every block of the vSSD's extents that holds data (lent ranges
    /// excepted), in parallel across channels and dies, and leaves the vSSD empty
    /// and usable: every read returns zeros. Returns the simulated erase time (a
    /// duration, timed as in [`Vssd::take_back`]). The control plane uses it on a
    /// gSSD before its blocks go back to the home vSSD; [`Vssd::destroy`] erases the
    /// same way but also retires the vSSD.
    pub fn erase_all(&self) -> Result<Nanos, FtlError> {
        let _serial = self.lend_lock.lock();
        let mut g = self.inner.lock();
        if g.gone {
            return Err(FtlError::Gone(self.cfg.name.clone()));
        }
        let now = self.clock.now();
        let mut done = now;
        let inner = &mut *g;
        for b in inner.blocks.iter_mut() {
            if b.state == BState::Lent {
                continue;
            }
            if let Some(t) = self.dev.erase_to_hand_over(b.id, now)? {
                done = done.max(t);
                inner.dirty.erased(&self.geo, b.id);
                inner.counters.block_erases += 1;
            }
            b.erase_count = self.dev.erase_count(b.id);
            b.state = BState::Free;
            b.wp = 0;
            b.valid = 0;
        }
        inner.map.clear();
        for st in inner.pus.iter_mut() {
            st.free.clear();
            st.active = None;
            st.victim = None;
            st.cursor = 0;
            st.debt = 0.0;
        }
        for (i, b) in inner.blocks.iter().enumerate() {
            if b.state == BState::Free {
                inner.pus[b.pu as usize]
                    .free
                    .insert((b.erase_count, i as u32));
            }
        }
        self.write_checkpoint(inner)?;
        Ok(done - now)
    }

    // ----- internals -----

    /// The vSSD's channels, in the order of its extents, each once.
    fn channels(&self) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        for e in &self.cfg.extents {
            if !out.contains(&e.channel) {
                out.push(e.channel);
            }
        }
        out
    }

    /// Index of the extent on `ch` that reaches highest (the one lending takes
    /// from), if the vSSD has flash there.
    fn top_extent(&self, ch: u32) -> Option<usize> {
        self.cfg
            .extents
            .iter()
            .enumerate()
            .filter(|(_, e)| e.channel == ch)
            .max_by_key(|(_, e)| e.first_block + e.blocks)
            .map(|(i, _)| i)
    }

    /// Parallel units of extent `ei` (one per die; `build` numbers them die-major).
    fn pus_of_extent(&self, ei: usize) -> impl Iterator<Item = usize> {
        let n = self.cfg.extents.len();
        (0..self.geo.dies_per_channel as usize).map(move |die| die * n + ei)
    }

    /// Parallel units of every extent on channel `ch`.
    fn pus_on_channel(&self, ch: u32) -> Vec<usize> {
        (0..self.cfg.extents.len())
            .filter(|&ei| self.cfg.extents[ei].channel == ch)
            .flat_map(|ei| self.pus_of_extent(ei))
            .collect()
    }

    /// Blocks the live pages of unit `pu` fill once compacted.
    fn valid_blocks(&self, g: &Inner, pu: usize) -> usize {
        let valid: u64 = g.pus[pu]
            .blocks
            .iter()
            .map(|&b| u64::from(g.blocks[b as usize].valid))
            .sum();
        valid.div_ceil(u64::from(self.ppb)) as usize
    }

    /// Blocks per plane extent `ei` could lend (see [`Vssd::lendable`]).
    fn lendable_on(&self, g: &Inner, ei: usize) -> u32 {
        let planes = self.geo.planes_per_die as usize;
        let mut n = self.cfg.extents[ei].blocks;
        for pu in self.pus_of_extent(ei) {
            let total = g.pus[pu].blocks.len();
            let keep = self.valid_blocks(g, pu) + GC_ROOM + margin(total);
            n = n.min((total.saturating_sub(keep) / planes) as u32);
        }
        n
    }

    /// Validates a lend request; returns (extent index, range to lend) per channel.
    fn check_lend(
        &self,
        g: &Inner,
        channels: &[u32],
        blocks: u32,
    ) -> Result<Vec<(usize, Extent)>, FtlError> {
        let name = || self.cfg.name.clone();
        if g.gone {
            return Err(FtlError::Gone(name()));
        }
        if channels.is_empty() || blocks == 0 {
            return Err(FtlError::BadLend {
                name: name(),
                reason: format!(
                    "nothing to lend ({} channels, {blocks} blocks)",
                    channels.len()
                ),
            });
        }
        let mut out = Vec::with_capacity(channels.len());
        for (i, &ch) in channels.iter().enumerate() {
            if channels[..i].contains(&ch) {
                return Err(FtlError::BadLend {
                    name: name(),
                    reason: format!("channel {ch} named twice"),
                });
            }
            let Some(ei) = self.top_extent(ch) else {
                return Err(FtlError::UnknownChannel {
                    name: name(),
                    channel: ch,
                });
            };
            if g.lent.iter().any(|l| l.channel == ch) {
                return Err(FtlError::AlreadyLent {
                    name: name(),
                    channel: ch,
                });
            }
            let lendable = self.lendable_on(g, ei);
            if blocks > lendable {
                return Err(FtlError::NotLendable {
                    name: name(),
                    channel: ch,
                    asked: blocks,
                    lendable,
                });
            }
            let e = self.cfg.extents[ei];
            out.push((
                ei,
                Extent {
                    channel: ch,
                    first_block: e.first_block + e.blocks - blocks,
                    blocks,
                },
            ));
        }
        Ok(out)
    }

    /// Takes block `b` of unit `pu` out of allocation and GC.
    fn withdraw(g: &mut Inner, pu: usize, b: u32) {
        let (state, ec) = (g.blocks[b as usize].state, g.blocks[b as usize].erase_count);
        let st = &mut g.pus[pu];
        match state {
            BState::Free => {
                let was = st.free.remove(&(ec, b));
                debug_assert!(was, "free block {b} not in its free list");
            }
            BState::Open => st.active = None,
            BState::Closed => {}
            BState::Draining | BState::Lent => unreachable!("block {b} lent twice"),
        }
        if st.victim == Some(b) {
            // A partly drained GC victim: lending moves the rest of its pages.
            st.victim = None;
            st.cursor = 0;
            st.debt = 0.0;
        }
        g.blocks[b as usize].state = BState::Draining;
    }

    /// Withdraws member `b` of unit `pu` if phase one left it in allocation (it
    /// was erased then; GC or host writes may have opened or filled it since).
    /// Before taking a free block out, collects garbage so that the unit keeps
    /// more than [`GC_RESERVE`] free blocks beside it: a unit left with no free
    /// block and no open one could never run GC again.
    fn withdraw_late(&self, g: &mut Inner, pu: usize, b: u32, now: Nanos) -> Result<(), FtlError> {
        if g.blocks[b as usize].state == BState::Draining {
            return Ok(());
        }
        let mut rounds = g.pus[pu].blocks.len();
        while g.pus[pu].free.len() <= GC_LOW + 1 && rounds > 0 {
            rounds -= 1;
            if !self.gc_once(g, pu, now)? {
                break;
            }
        }
        if g.blocks[b as usize].state == BState::Free && g.pus[pu].free.len() <= GC_RESERVE + 1 {
            return Err(FtlError::NoSpace(self.cfg.name.clone()));
        }
        Self::withdraw(g, pu, b);
        Ok(())
    }

    /// Moves the live pages of withdrawn block `b` within unit `pu`, then erases it
    /// and marks it lent.
    fn evacuate(&self, g: &mut Inner, pu: usize, b: u32, now: Nanos) -> Result<(), FtlError> {
        let ppb = self.ppb;
        let mut buf = vec![0u8; self.page_size];
        let mut t = now;
        for page in 0..ppb {
            let lp = b * ppb + page;
            let owner = g.map.p2l[lp as usize];
            if owner == UNMAPPED {
                continue;
            }
            self.make_room(g, pu, now)?;
            if let Some(done) = self.move_page(g, pu, lp, owner, now, t, &mut buf)? {
                t = t.max(done);
                g.counters.lend_pages_moved += 1;
            }
        }
        let id = g.blocks[b as usize].id;
        if self.dev.write_ptr(id) > 0 {
            self.erase_after_moves(g, b, t, true)?;
            g.counters.block_erases += 1;
        } else {
            // Erased for reuse earlier: its old bytes go before it is lent.
            self.dev.discard(id)?;
        }
        let blk = &mut g.blocks[b as usize];
        debug_assert_eq!(blk.valid, 0);
        blk.erase_count = self.dev.erase_count(id);
        blk.state = BState::Lent;
        blk.wp = 0;
        blk.valid = 0;
        Ok(())
    }

    /// Before a moved page needs a new block on `pu`, collects garbage as a host
    /// write would, so lending never takes the blocks GC needs.
    fn make_room(&self, g: &mut Inner, pu: usize, now: Nanos) -> Result<(), FtlError> {
        if g.pus[pu].active.is_some() {
            return Ok(());
        }
        let mut rounds = g.pus[pu].blocks.len();
        while g.pus[pu].free.len() <= GC_LOW && rounds > 0 {
            rounds -= 1;
            if !self.gc_once(g, pu, now)? {
                break;
            }
        }
        if g.pus[pu].free.len() <= GC_RESERVE && g.pus[pu].active.is_none() {
            return Err(FtlError::NoSpace(self.cfg.name.clone()));
        }
        Ok(())
    }

    /// Undoes a failed lend: erased blocks become free again, the others closed
    /// (GC will find them). Members not withdrawn yet are left as they are.
    fn restore(&self, g: &mut Inner, members: &[(usize, u32)]) {
        for &(pu, b) in members {
            let blk = &mut g.blocks[b as usize];
            if blk.state != BState::Lent && blk.state != BState::Draining {
                continue;
            }
            if self.dev.write_ptr(blk.id) == 0 {
                blk.state = BState::Free;
                blk.wp = 0;
                blk.valid = 0;
                let ec = blk.erase_count;
                g.pus[pu].free.insert((ec, b));
            } else {
                blk.state = BState::Closed;
            }
        }
    }
}

#[cfg(test)]
mod tests;
