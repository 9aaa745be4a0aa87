//! The host data path at page level: what a [`BlockDev`](blockdev::BlockDev) read,
//! write or zeroing does once the range is checked and the lock is held.
//!
//! Byte ranges are cut into logical pages: whole pages are programmed as they are,
//! partial ones by read-modify-write, and whole pages zeroed by trim are unmapped
//! and recorded in a durable trim record. Each host page is a new sequence number,
//! programmed where allocation puts it, then mapped; background GC then does its
//! share on the unit written.

use blockdev::{check_range, IoResult, Loan};
use clock::Nanos;
use flash::{Oob, OobKind};

use super::{Inner, Placement, Vssd, TRIM_REC, UNMAPPED};
use crate::FtlError;

/// Pages of one unit that [`Vssd::write_pages`] joins into one device write at
/// most when striping (a 128 KiB request on the default vSSD's 16 units has 2 a
/// unit); filling, as many as the units together (one unit takes them all).
const JOIN_PER_UNIT: usize = 16;

/// A checkpoint is taken when this many trim records are live, or fewer on
/// a small vSSD ([`Vssd::trim_budget`]).
const MAX_LIVE_TRIMS: usize = 256;

impl Vssd {
    /// Writes one whole logical page.
    fn write_page(
        &self,
        g: &mut Inner,
        lba: u64,
        data: &[u8],
        now: Nanos,
    ) -> Result<Nanos, FtlError> {
        let seq = g.map.next_seq();
        let oob = Oob {
            owner: self.cfg.id,
            kind: OobKind::Data,
            lba,
            seq,
        };
        let (lp, done) = self.program_host(g, data, &oob, now)?;
        self.remap(g, lba, lp, seq);
        let pu = g.blocks[(lp / self.ppb) as usize].pu as usize;
        g.counters.host_pages_written += 1;
        self.gc_step(g, pu, now)?;
        Ok(done)
    }

    /// Reads part of a logical page into `out` (zeros if unmapped).
    pub(super) fn read_part(
        &self,
        g: &mut Inner,
        lba: u64,
        off: usize,
        out: &mut [u8],
        now: Nanos,
    ) -> Result<Nanos, FtlError> {
        let lp = g.map.l2p[lba as usize];
        if lp == UNMAPPED {
            out.fill(0);
            return Ok(now);
        }
        let gp = self.global_page(g, lp);
        g.counters.flash_pages_read += 1;
        Ok(self.dev.read(gp, off, out, now)?)
    }

    /// How many of the `most` logical pages from `lba` on lie on consecutive
    /// flash pages of one block, as [`Self::read_run`] reads them: at least
    /// one (an unmapped page is a run of one, read as zeros).
    pub(super) fn run_at(&self, g: &Inner, lba: u64, most: usize) -> usize {
        let l2p = &g.map.l2p;
        let first = l2p[lba as usize];
        if first == UNMAPPED {
            return 1;
        }
        // Not past the block `first` lies in.
        let most = most.min((self.ppb - first % self.ppb) as usize);
        (1..most)
            .find(|&i| l2p[lba as usize + i] != first + i as u32)
            .unwrap_or(most)
    }

    /// Reads `out.len()` bytes from `off` bytes into logical page `lba`, on
    /// over the `pages` logical pages from `lba`, which [`Self::run_at`] found
    /// on consecutive flash pages of one block: one read of the run.
    pub(super) fn read_run(
        &self,
        g: &mut Inner,
        lba: u64,
        pages: usize,
        off: usize,
        out: &mut [u8],
        now: Nanos,
    ) -> Result<Nanos, FtlError> {
        let gp = self.global_page(g, g.map.l2p[lba as usize]);
        g.counters.flash_pages_read += pages as u64;
        Ok(self.dev.read_run(gp, off, out, now)?)
    }

    /// What [`BlockDev::read`](blockdev::BlockDev::read) reads, as loans: each
    /// run of flash pages ([`Self::run_at`]) lent by the device
    /// ([`FlashDevice::lend_run`](flash::FlashDevice::lend_run)), holes as
    /// zeros; booked and counted as `read` books and counts them.
    pub(super) fn lend_read(&self, offset: u64, len: usize) -> IoResult<(Nanos, Vec<Loan>)> {
        check_range(offset, len as u64, self.cfg.capacity_bytes)?;
        let mut g = self.inner.lock();
        self.check_alive(&g)?;
        let now = self.clock.now();
        let ps = self.page_size as u64;
        let mut done = now;
        let mut loans = Vec::new();
        // Bytes of holes not lent yet: adjacent holes go out as one loan.
        let mut zeros = 0usize;
        let mut pos = 0usize;
        while pos < len {
            let at = offset + pos as u64;
            let off = (at % ps) as usize;
            let lba = at / ps;
            let pages = self.run_at(&g, lba, (off + len - pos).div_ceil(self.page_size));
            let n = (pages * self.page_size - off).min(len - pos);
            let lp = g.map.l2p[lba as usize];
            if lp == UNMAPPED {
                zeros += n;
            } else {
                Loan::push_zeros(&mut loans, std::mem::take(&mut zeros));
                let gp = self.global_page(&g, lp);
                g.counters.flash_pages_read += pages as u64;
                let (t, loan) = self.dev.lend_run(gp, off, n, now).map_err(FtlError::from)?;
                done = done.max(t);
                loans.push(loan);
            }
            pos += n;
        }
        Loan::push_zeros(&mut loans, zeros);
        Ok((done, loans))
    }

    /// Overwrites `data.len()` bytes at `off` within logical page `lba` (read-modify-write).
    fn write_partial(
        &self,
        g: &mut Inner,
        lba: u64,
        off: usize,
        data: &[u8],
        now: Nanos,
    ) -> Result<Nanos, FtlError> {
        let mut buf = std::mem::take(&mut g.scratch);
        let r = (|| {
            let t = self.read_part(g, lba, 0, &mut buf, now)?;
            buf[off..off + data.len()].copy_from_slice(data);
            self.write_page(g, lba, &buf, t)
        })();
        g.scratch = buf;
        r
    }

    /// Zeroes `[offset, offset+len)`: partial pages by read-modify-write, whole pages
    /// unmapped and recorded in a durable trim record.
    pub(super) fn zero_range(&self, offset: u64, len: u64) -> IoResult {
        check_range(offset, len, self.cfg.capacity_bytes)?;
        self.with_room(|g, now| self.zero_locked(g, offset, len, now))
    }

    /// [`Vssd::zero_range`] under the lock.
    fn zero_locked(&self, g: &mut Inner, offset: u64, len: u64, now: Nanos) -> IoResult {
        let ps = self.page_size as u64;
        let end = offset + len;
        let mut done = now;
        let first_full = offset.div_ceil(ps);
        let last_full = end / ps; // exclusive
        if first_full >= last_full {
            // No whole page: zero in place within at most two pages.
            let zeros = vec![0u8; len as usize];
            return self.write_bytes(g, offset, &zeros, now);
        }
        if !offset.is_multiple_of(ps) {
            let n = (first_full * ps - offset) as usize;
            done = done.max(self.write_bytes(g, offset, &vec![0u8; n], now)?);
        }
        if !end.is_multiple_of(ps) {
            let n = (end - last_full * ps) as usize;
            done = done.max(self.write_bytes(g, last_full * ps, &vec![0u8; n], now)?);
        }
        let range = first_full..last_full;
        if range.clone().any(|lba| g.map.l2p[lba as usize] != UNMAPPED) {
            // The record first, then the unmapping: a page is invalid only
            // once the write that replaces it is on flash. Unmapped first,
            // GC run by the record's own allocation could erase a block of a
            // trimmed page, and make that erase durable, before the record
            // existed: a host crash then lost both, and recovery failed on a
            // checkpoint naming the page (the power-loss harness, seed 33 of
            // the long vSSD suite). A record that fails to program leaves
            // every page mapped.
            done =
                done.max(self.program_trim_record(g, first_full, last_full - first_full, now)?);
            for lba in range {
                if g.map.l2p[lba as usize] != UNMAPPED {
                    self.unmap(g, lba);
                }
            }
            if g.map.live_trims.len() >= self.trim_budget(g) {
                self.write_checkpoint(g)?;
            }
        }
        Ok(done)
    }

    /// Live trim records allowed before a checkpoint drops them: a record is
    /// a valid page beside the data, so on a vSSD written to its capacity the
    /// records live in GC's room, whose spare block per unit is all a full
    /// vSSD has beyond its data. At most half of it per unit goes to them. On
    /// the default geometry (256-page blocks) that is more than
    /// [`MAX_LIVE_TRIMS`]; on a 2-unit vSSD of 8-page blocks it is 8, where 256
    /// records ran a trim-heavy tenant out of space (the power-loss harness).
    fn trim_budget(&self, g: &Inner) -> usize {
        (g.pus.len() * self.ppb as usize / 2).clamp(1, MAX_LIVE_TRIMS)
    }

    /// Programs a trim record of logical pages `start .. start + count` (which the
    /// caller unmaps next; then it checkpoints if too many records are live).
    fn program_trim_record(
        &self,
        g: &mut Inner,
        start: u64,
        count: u64,
        now: Nanos,
    ) -> Result<Nanos, FtlError> {
        let seq = g.map.next_seq();
        let mut page = vec![0u8; self.page_size];
        page[0..8].copy_from_slice(&start.to_le_bytes());
        page[8..16].copy_from_slice(&count.to_le_bytes());
        let oob = Oob {
            owner: self.cfg.id,
            kind: OobKind::Trim,
            lba: start,
            seq,
        };
        let (lp, done) = self.program_host(g, &page, &oob, now)?;
        g.map.p2l[lp as usize] = TRIM_REC;
        g.blocks[(lp / self.ppb) as usize].valid += 1;
        g.map.live_trims.push(lp);
        Ok(done)
    }

    /// Writes `data` at byte `offset`: partial pages by read-modify-write, the
    /// whole pages between them together ([`Vssd::write_pages`]).
    pub(super) fn write_bytes(
        &self,
        g: &mut Inner,
        offset: u64,
        data: &[u8],
        now: Nanos,
    ) -> IoResult {
        let ps = self.page_size as u64;
        let mut done = now;
        let mut pos = 0usize;
        while pos < data.len() {
            let at = offset + pos as u64;
            let lba = at / ps;
            let off = (at % ps) as usize;
            let n = (self.page_size - off).min(data.len() - pos);
            let t = if n < self.page_size {
                self.write_partial(g, lba, off, &data[pos..pos + n], now)?
            } else {
                // The whole pages from here, together.
                let whole = (data.len() - pos) / self.page_size * self.page_size;
                let t = self.write_pages(g, lba, &data[pos..pos + whole], now)?;
                pos += whole;
                done = done.max(t);
                continue;
            };
            done = done.max(t);
            pos += n;
        }
        Ok(done)
    }

    /// Writes whole logical pages from `lba0` on, one per page of `data`,
    /// where the page-at-a-time loop ([`Vssd::write_page`] for each) would put
    /// them: striped, page `i` on unit `(rr + i) % units`; filled, on unit
    /// `rr` while its active block has room (see [`super::Placement`]); each
    /// unit's pages side by side in its active block, sequence numbers and
    /// host bookings in request order. What changes is the store: a unit's
    /// pages of the request are written in one device program (two writes to
    /// the host file instead of two per page).
    ///
    /// Background GC's steps, one per page as the loop takes them, come after
    /// the request's pages on each unit rather than between them (a host
    /// write's pages before the background work it triggers, as a controller
    /// schedules them). So the joined path is taken only when that cannot
    /// change what GC has room for: every unit the pages go to has room
    /// in its active block for its share of the pages *and* for every page its
    /// GC steps may move ([`Vssd::gc_steps_bound`]: no victim drained whole
    /// or chosen after another within the request). Then GC opens no block
    /// and takes nothing from the free lists that the loop would not have. A
    /// unit whose first step would choose a victim chooses it before the
    /// request's pages rather than after its first page.
    /// Otherwise one page goes the usual way and the rest are tried again.
    /// Where GC has nothing to do, flash pages, OOB records and times are
    /// exactly the loop's (`a_multi_page_write_lands_as_page_by_page`, for
    /// both placements). (A first version let host pages take room without
    /// the bound for GC's moves, and the power-loss harness found a crash
    /// state that recovered with a unit out of space.)
    fn write_pages(&self, g: &mut Inner, lba0: u64, data: &[u8], now: Nanos) -> IoResult {
        let ps = self.page_size;
        let n = data.len() / ps;
        let page = |i: usize| &data[i * ps..(i + 1) * ps];
        let mut done = now;
        let mut i = 0;
        while i < n {
            let npu = g.pus.len();
            let r = g.rr;
            // At most JOIN_PER_UNIT pages a unit at a time (striped) or a
            // block's room (filled): what the check below looks at stays
            // small however large the request. Group `j` of `groups` is
            // unit `unit_of(j)` with the pages `j, j + step, ...` below `m`
            // (indices from `i`); page `k` is on `unit_of(k)`.
            let placement = g.placement;
            let unit_of = |k: usize| match placement {
                Placement::Stripe => (r + k) % npu,
                Placement::Fill => r,
            };
            let (m, groups, step) = match placement {
                Placement::Stripe => {
                    let m = (n - i).min(npu.max(1) * JOIN_PER_UNIT);
                    (m, m.min(npu), npu)
                }
                Placement::Fill => {
                    let room = g
                        .pus
                        .get(r)
                        .and_then(|st| st.active)
                        .map_or(0, |b| (self.ppb - g.blocks[b as usize].wp) as usize);
                    ((n - i).min(npu.max(1) * JOIN_PER_UNIT).min(room), 1, 1)
                }
            };
            let share = |j: usize| (m - j).div_ceil(step) as u32;
            let lbas = lba0 + i as u64..lba0 + (i + m) as u64;
            let fits = m > 1
                && npu > 0
                && (0..groups).all(|j| {
                    let pu = unit_of(j);
                    let Some(b) = g.pus[pu].active else {
                        return false;
                    };
                    let room = self.ppb - g.blocks[b as usize].wp;
                    room >= share(j)
                        && self
                            .gc_steps_bound(g, pu, share(j), lbas.clone(), now)
                            .is_some_and(|moves| room >= share(j) + moves)
                });
            if !fits {
                done = done.max(self.write_page(g, lba0 + i as u64, page(i), now)?);
                i += 1;
                continue;
            }
            // Sequence numbers in request order, as page by page.
            let seqs: Vec<u64> = (0..m).map(|_| g.map.next_seq()).collect();
            // Where each page of the request went, by its index from `i`
            // (`None`: not programmed, after a failure).
            let mut placed: Vec<Option<flash::PageId>> = vec![None; m];
            let mut failed = None;
            for j in 0..groups {
                let pu = unit_of(j);
                let Some(b) = g.pus[pu].active else {
                    unreachable!("checked above")
                };
                let idx: Vec<usize> = (j..m).step_by(step).collect();
                let pages: Vec<&[u8]> = idx.iter().map(|&k| page(i + k)).collect();
                let oobs: Vec<Oob> = idx
                    .iter()
                    .map(|&k| Oob {
                        owner: self.cfg.id,
                        kind: OobKind::Data,
                        lba: lba0 + (i + k) as u64,
                        seq: seqs[k],
                    })
                    .collect();
                let lp = match self.program_run_into(g, pu, b, &pages, &oobs, now) {
                    Ok(lp) => lp,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                };
                for (q, (&k, o)) in idx.iter().zip(&oobs).enumerate() {
                    let lp = lp + q as u32;
                    self.remap(g, o.lba, lp, o.seq);
                    placed[k] = Some(self.global_page(g, lp));
                    g.counters.host_pages_written += 1;
                }
            }
            // The pages written, booked in the order the loop would have.
            for gp in placed.iter().flatten() {
                done = done.max(self.dev.book_program(*gp, now));
            }
            if let Some(e) = failed {
                return Err(e.into());
            }
            // After the request's last page, as the loop leaves it.
            let last = unit_of(m - 1);
            g.rr = placement.next(last, npu, g.pus[last].active.is_some());
            // Background GC's share of each page, in the loop's order: page
            // moves into the active blocks only (checked above), so no block
            // is opened, and at most the victim is erased.
            #[cfg(debug_assertions)]
            let free_before: Vec<usize> = g.pus.iter().map(|st| st.free.len()).collect();
            for k in 0..m {
                self.gc_step(g, unit_of(k), now)?;
            }
            #[cfg(debug_assertions)]
            debug_assert!(g
                .pus
                .iter()
                .zip(&free_before)
                .all(|(st, &f)| st.free.len() == f || st.free.len() == f + 1));
            i += m;
        }
        Ok(done)
    }
}
