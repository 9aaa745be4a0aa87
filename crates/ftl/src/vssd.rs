//! The vSSD: a thin [`BlockDev`] front over the parts of a page-mapping FTL.
//!
//! Split the way MQSim splits its FTL, one job per module:
//!
//! * `config`: the public configuration types, capacity rules and validation;
//! * `mapping`: logical ↔ physical page tables and sequence numbers;
//! * `alloc`: the block table and where host pages are programmed;
//! * `crate::gc::relocate`: GC mechanics (draining victims, moving pages), beside
//!   the victim policies in [`crate::gc`];
//! * `crate::checkpoint::format`: the checkpoint byte format;
//! * `recovery`: taking checkpoints and rebuilding from them plus the OOB records;
//! * `io`: the host data path at page level (reads, writes, read-modify-write,
//!   trim records);
//! * `lend`: lending blocks to ghost vSSDs;
//! * `room`: the write path's side of reclaiming lent blocks (a signal, and
//!   writes that wait for the blocks instead of failing);
//! * `sync`: group commit of the vSSD's own dirty pages (`FLUSH`, FUA).
//!
//! This file holds the [`Vssd`] itself (its state behind one lock), its lifecycle
//! (create, open, checkpoint, destroy) and the [`BlockDev`] entry points.

use std::sync::Arc;

use blockdev::{
    check_range, push_extent, Alloc, BlockDev, BlockSizes, IoError, IoResult, Loan, MapExtent,
};
use clock::{Clock, Nanos};
use flash::{DirtySet, FlashDevice, Geometry, OwnRuns, PageId};
use parking_lot::Mutex;

use crate::gc::GcPolicy;
use crate::{CheckpointStore, FtlError};

mod alloc;
mod config;
mod io;
mod lend;
mod mapping;
mod recovery;
mod room;
mod sync;

pub use alloc::Placement;
pub(crate) use alloc::{BState, Blk, PuState, GC_RESERVE};
pub use config::{default_capacity, max_capacity, Extent, FtlStats, VssdConfig};
pub(crate) use mapping::{Mapping, TRIM_REC, UNMAPPED};
pub use room::{Pressure, PressureHook};

/// Most logical pages one [`BlockDev::allocation`] call looks at (under the
/// vSSD's lock): 256 Ki pages, 1 GiB of 4 KiB pages, about 100 µs. A longer
/// query is answered for its first part; the caller asks again for the rest.
const MAX_ALLOCATION_PAGES: u64 = 256 * 1024;

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counters {
    pub(crate) host_pages_written: u64,
    pub(crate) flash_pages_written: u64,
    pub(crate) flash_pages_read: u64,
    pub(crate) gc_runs: u64,
    pub(crate) gc_pages_moved: u64,
    pub(crate) lend_pages_moved: u64,
    pub(crate) block_erases: u64,
    pub(crate) erase_syncs: u64,
}

/// Everything a vSSD changes, behind its one lock.
pub(crate) struct Inner {
    /// Logical ↔ physical tables and sequence numbers.
    pub(crate) map: Mapping,
    /// Every owned block, indexed by local block number.
    pub(crate) blocks: Vec<Blk>,
    /// Parallel units: free lists, active block, background GC state.
    pub(crate) pus: Vec<PuState>,
    /// Next parallel unit a host page goes to.
    pub(crate) rr: usize,
    /// How host pages are spread over the units.
    pub(crate) placement: Placement,
    pub(crate) counters: Counters,
    pub(crate) gone: bool,
    /// The read-modify-write page buffer.
    pub(crate) scratch: Vec<u8>,
    /// GC's page buffer, kept between steps (background GC runs on every host
    /// write once a unit is low on blocks).
    pub(crate) gc_buf: Vec<u8>,
    /// Extents lent now (see [`Vssd::lend`]).
    pub(crate) lent: Vec<Extent>,
    /// Channels a lend in progress is emptying.
    pub(crate) lending: Vec<u32>,
    /// Pages programmed and blocks erased since the last sync (see `sync`).
    pub(crate) dirty: DirtySet,
    /// The sets of the group syncs running now, by token: not durable until
    /// they finish, and GC must see them (see `Vssd::erase_after_moves`).
    pub(crate) syncing: Vec<(u64, DirtySet)>,
    /// Take-backs so far: a write waiting for room (see `room`) waits for this
    /// to change.
    pub(crate) returned: u64,
    /// Free blocks whose GC erase is booked but waits for the vSSD's writes
    /// to be durable, with their booking's number (see
    /// `Vssd::erase_after_moves`).
    pub(crate) unerased: Vec<(u32, u64)>,
    /// Erases booked so far (numbers `unerased`).
    pub(crate) bookings: u64,
    /// The erases booked up to this number wait for nothing any more: a
    /// sync that took the vSSD's writes after them finished.
    pub(crate) safe_bookings: u64,
    /// Every write up to this sequence number was made durable by a sync
    /// that finished (a flush, a FUA write, GC's or a checkpoint's).
    pub(crate) durable_seq: u64,
}

/// A virtual SSD. Implements [`BlockDev`]; every method is thread-safe.
pub struct Vssd {
    pub(crate) cfg: VssdConfig,
    pub(crate) dev: Arc<FlashDevice>,
    clock: Arc<dyn Clock>,
    ckpt: Arc<dyn CheckpointStore>,
    pub(crate) policy: Box<dyn GcPolicy>,
    pub(crate) geo: Geometry,
    pub(crate) ppb: u32,
    pub(crate) page_size: usize,
    logical_pages: u64,
    inner: Mutex<Inner>,
    /// Serialises lend, take_back and erase_all, which drop `inner` between steps.
    lend_lock: Mutex<()>,
    /// Group commit of `Inner::dirty`.
    syncs: sync::SyncGroup,
    /// Tokens of `Inner::syncing`.
    sync_tokens: std::sync::atomic::AtomicU64,
    /// Who hears when the vSSD wants its lent blocks back, and the writes
    /// waiting for them.
    room: room::Room,
    /// The block runs this vSSD holds alone (its extents less what it has
    /// lent), for its syncs (see [`flash::OwnRuns`]); replaced when lending
    /// changes, read without `inner`.
    own: Mutex<Arc<OwnRuns>>,
}

impl std::fmt::Debug for Vssd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vssd").field("config", &self.cfg).finish()
    }
}

impl Vssd {
    fn build(
        dev: Arc<FlashDevice>,
        cfg: VssdConfig,
        clock: Arc<dyn Clock>,
        ckpt: Arc<dyn CheckpointStore>,
    ) -> Result<Self, FtlError> {
        let geo = *dev.geometry();
        config::validate(&geo, &cfg)?;
        let ppb = geo.pages_per_block;
        let logical_pages = cfg.capacity_bytes / geo.page_size as u64;
        let (blocks, pus) = alloc::block_table(&geo, &dev, &cfg);
        let own = Mutex::new(Arc::new(config::own_runs(&geo, &cfg.extents, &cfg.lent)));
        let npages = blocks.len() * ppb as usize;
        let inner = Inner {
            map: Mapping::new(logical_pages, npages),
            blocks,
            pus,
            rr: 0,
            placement: Placement::default(),
            counters: Counters::default(),
            gone: false,
            scratch: vec![0; geo.page_size as usize],
            gc_buf: vec![0; geo.page_size as usize],
            lent: cfg.lent.clone(),
            lending: Vec::new(),
            dirty: DirtySet::new(),
            syncing: Vec::new(),
            returned: 0,
            unerased: Vec::new(),
            bookings: 0,
            safe_bookings: 0,
            durable_seq: 0,
        };
        Ok(Self {
            policy: cfg.gc.build(),
            cfg,
            dev,
            clock,
            ckpt,
            geo,
            ppb,
            page_size: geo.page_size as usize,
            logical_pages,
            inner: Mutex::new(inner),
            lend_lock: Mutex::new(()),
            syncs: sync::SyncGroup::default(),
            sync_tokens: std::sync::atomic::AtomicU64::new(0),
            room: room::Room::default(),
            own,
        })
    }

    /// Creates a new, empty vSSD. Any block of its extents that still holds data is
    /// erased first, so a tenant never sees a previous owner's bytes.
    pub fn create(
        dev: Arc<FlashDevice>,
        cfg: VssdConfig,
        clock: Arc<dyn Clock>,
        ckpt: Arc<dyn CheckpointStore>,
    ) -> Result<Arc<Self>, FtlError> {
        let v = Self::build(dev, cfg, clock, ckpt)?;
        {
            let mut g = v.inner.lock();
            let now = v.clock.now();
            let inner = &mut *g;
            for b in inner.blocks.iter_mut() {
                if b.state == BState::Lent {
                    continue;
                }
                // Programmed blocks are erased; erased ones may still hold an
                // earlier owner's bytes (its GC erased them for reuse).
                if v.dev.erase_to_hand_over(b.id, now)?.is_some() {
                    b.erase_count = v.dev.erase_count(b.id);
                    inner.counters.block_erases += 1;
                }
            }
            for (i, b) in inner.blocks.iter().enumerate() {
                if b.state == BState::Lent {
                    continue;
                }
                inner.pus[b.pu as usize]
                    .free
                    .insert((b.erase_count, i as u32));
            }
            v.write_checkpoint(inner)?;
        }
        Ok(Arc::new(v))
    }

    /// Re-opens an existing vSSD after a restart or a crash, rebuilding its mapping
    /// from the last checkpoint and the OOB records.
    pub fn open(
        dev: Arc<FlashDevice>,
        cfg: VssdConfig,
        clock: Arc<dyn Clock>,
        ckpt: Arc<dyn CheckpointStore>,
    ) -> Result<Arc<Self>, FtlError> {
        let v = Self::build(dev, cfg, clock, ckpt)?;
        {
            let mut g = v.inner.lock();
            v.recover(&mut g)?;
            // A fresh checkpoint retires the trim records replayed above.
            v.write_checkpoint(&mut g)?;
        }
        Ok(Arc::new(v))
    }

    /// The configuration, with `lent` the extents lent now: what to persist so
    /// that [`Vssd::open`] rebuilds this vSSD (a value, since lending changes it).
    pub fn config(&self) -> VssdConfig {
        let lent = self.inner.lock().lent.clone();
        VssdConfig {
            lent,
            ..self.cfg.clone()
        }
    }

    /// Sets how the host pages written from now on are spread over the
    /// parallel units (see [`Placement`]); pages already written stay where
    /// they are. A new or reopened vSSD stripes.
    pub fn set_placement(&self, placement: Placement) {
        self.inner.lock().placement = placement;
    }

    /// How host pages are spread over the parallel units now.
    pub fn placement(&self) -> Placement {
        self.inner.lock().placement
    }

    /// Counters and gauges.
    pub fn stats(&self) -> FtlStats {
        let g = self.inner.lock();
        let c = g.counters;
        FtlStats {
            capacity_bytes: self.cfg.capacity_bytes,
            host_pages_written: c.host_pages_written,
            flash_pages_written: c.flash_pages_written,
            flash_pages_read: c.flash_pages_read,
            gc_runs: c.gc_runs,
            gc_pages_moved: c.gc_pages_moved,
            block_erases: c.block_erases,
            erase_syncs: c.erase_syncs,
            free_blocks: g.pus.iter().map(|p| p.free.len() as u64).sum(),
            total_blocks: g.blocks.len() as u64,
            mapped_pages: g.map.mapped_pages(),
            max_erase_count: g
                .blocks
                .iter()
                .filter(|b| b.state != BState::Lent)
                .map(|b| b.erase_count)
                .max()
                .unwrap_or(0),
            min_erase_count: g
                .blocks
                .iter()
                .filter(|b| b.state != BState::Lent)
                .map(|b| b.erase_count)
                .min()
                .unwrap_or(0),
            lent_blocks: g.blocks.iter().filter(|b| b.state == BState::Lent).count() as u64,
            lend_pages_moved: c.lend_pages_moved,
        }
    }

    /// Writes a checkpoint now (also done on open, close, and when trim records pile up).
    pub fn checkpoint(&self) -> Result<(), FtlError> {
        let mut g = self.inner.lock();
        if g.gone {
            return Err(FtlError::Gone(self.cfg.name.clone()));
        }
        self.write_checkpoint(&mut g)
    }

    /// Syncs and checkpoints for a clean shutdown; the vSSD stays usable.
    pub fn close(&self) -> Result<(), FtlError> {
        self.checkpoint()
    }

    /// Erases every block the vSSD owns and forgets its checkpoint; later I/O fails
    /// with [`FtlError::Gone`]. Returns the modelled completion time of the erases,
    /// which proceed in parallel across dies and channels. Lent blocks are left
    /// alone (they hold the borrower's data): take them back first.
    pub fn destroy(&self) -> Result<Nanos, FtlError> {
        let _l = self.lend_lock.lock();
        let mut g = self.inner.lock();
        g.gone = true;
        let now = self.clock.now();
        let mut done = now;
        let inner = &mut *g;
        for b in inner.blocks.iter_mut() {
            if b.state == BState::Lent {
                continue;
            }
            if let Some(t) = self.dev.erase_to_hand_over(b.id, now)? {
                done = done.max(t);
                inner.counters.block_erases += 1;
                b.erase_count += 1;
            }
            b.state = BState::Free;
            b.wp = 0;
            b.valid = 0;
        }
        inner.map.l2p.fill(UNMAPPED);
        inner.map.p2l.fill(UNMAPPED);
        drop(g);
        self.room.wake();
        self.dev.sync()?;
        self.ckpt.remove(self.cfg.id)?;
        Ok(done)
    }

    // ----- internals (all called with the lock held) -----

    /// The flash page of local page `lp`.
    #[inline]
    pub(crate) fn global_page(&self, g: &Inner, lp: u32) -> PageId {
        let b = &g.blocks[(lp / self.ppb) as usize];
        self.geo.first_page(b.id) + (lp % self.ppb) as u64
    }

    fn check_alive(&self, g: &Inner) -> IoResult<()> {
        if g.gone {
            return Err(IoError::Gone(format!(
                "vSSD {} has been deleted",
                self.cfg.name
            )));
        }
        Ok(())
    }

    fn sync_if(&self, fua: bool) -> IoResult<()> {
        if fua {
            self.sync_own()?;
        }
        Ok(())
    }

    /// Makes every write of this vSSD completed before the call durable, and
    /// only those: group commit of its dirty set (see `sync`). No lock is held
    /// while the pages are written back.
    fn sync_own(&self) -> IoResult<()> {
        let token = self
            .sync_tokens
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // What this sync makes durable once it (and every sync before it)
        // is done: the writes up to this sequence number, and the pages GC's
        // erases booked so far waited for.
        let covers = std::cell::Cell::new((0, 0));
        let r = self.syncs.flush(
            || {
                let mut g = self.inner.lock();
                covers.set((g.map.seq, g.bookings));
                let set = std::mem::take(&mut g.dirty);
                if self.dev.crash_exposed() && !set.is_empty() {
                    g.syncing.push((token, set.clone()));
                }
                set
            },
            |set| {
                self.dev
                    .sync_dirty(set, &self.own_runs())
                    .map_err(|e| e.to_string())
            },
            |set| self.inner.lock().dirty.merge(set),
        );
        if self.dev.crash_exposed() {
            let mut g = self.inner.lock();
            g.syncing.retain(|(t, _)| *t != token);
            if r.is_ok() {
                let (seq, bookings) = covers.get();
                g.durable_seq = g.durable_seq.max(seq);
                g.safe_bookings = g.safe_bookings.max(bookings);
            }
        }
        r.map_err(|e| IoError::Media(format!("vSSD {}: sync: {e}", self.cfg.name)))
    }

    /// The block runs this vSSD holds alone now.
    pub(crate) fn own_runs(&self) -> Arc<OwnRuns> {
        self.own.lock().clone()
    }

    /// Recomputes the own runs after the lent extents changed (`lent`).
    pub(crate) fn set_own_runs(&self, lent: &[Extent]) {
        *self.own.lock() = Arc::new(config::own_runs(&self.geo, &self.cfg.extents, lent));
    }

    /// Syncs that wrote something back since the vSSD was opened (flushes
    /// and FUA writes that shared one sync count once).
    pub fn syncs(&self) -> u64 {
        self.syncs.syncs()
    }
}

impl BlockDev for Vssd {
    fn size(&self) -> u64 {
        self.cfg.capacity_bytes
    }

    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            minimum: 512,
            preferred: self.page_size as u32,
            maximum: 32 << 20,
        }
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        check_range(offset, buf.len() as u64, self.cfg.capacity_bytes)?;
        let mut g = self.inner.lock();
        self.check_alive(&g)?;
        let now = self.clock.now();
        let ps = self.page_size as u64;
        let mut done = now;
        let mut pos = 0usize;
        while pos < buf.len() {
            let at = offset + pos as u64;
            let off = (at % ps) as usize;
            // The logical pages that follow lie on the flash pages that follow,
            // in the same block (written side by side): one run, one copy.
            let pages = self.run_at(
                &g,
                at / ps,
                (off + buf.len() - pos).div_ceil(self.page_size),
            );
            let n = (pages * self.page_size - off).min(buf.len() - pos);
            // Start loading the next page while this run is copied (pages of one
            // request are scattered once random writes have moved them).
            if pos + n < buf.len() {
                let next = g.map.l2p[(at / ps) as usize + pages];
                if next != UNMAPPED {
                    self.dev.prefetch(self.global_page(&g, next));
                }
            }
            let out = &mut buf[pos..pos + n];
            done = done.max(if pages == 1 {
                self.read_part(&mut g, at / ps, off, out, now)?
            } else {
                self.read_run(&mut g, at / ps, pages, off, out, now)?
            });
            pos += n;
        }
        Ok(done)
    }

    /// The read's runs of flash pages as the device's loans
    /// ([`FlashDevice::lend_run`]), holes as zeros.
    fn read_lent(&self, offset: u64, len: usize) -> Option<IoResult<(Nanos, Vec<Loan>)>> {
        Some(self.lend_read(offset, len))
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        check_range(offset, data.len() as u64, self.cfg.capacity_bytes)?;
        let done = self.with_room(|g, now| self.write_bytes(g, offset, data, now))?;
        self.sync_if(fua)?;
        Ok(done)
    }

    fn flush(&self) -> IoResult {
        self.check_alive(&self.inner.lock())?;
        self.sync_own()?;
        Ok(self.clock.now())
    }

    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.zero_range(offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        let done = self.zero_range(offset, len)?;
        self.sync_if(fua)?;
        Ok(done)
    }

    /// Zeroing unmaps whole pages (a trim); only a partial page at either
    /// end is programmed.
    fn fast_zero(&self) -> bool {
        true
    }

    /// Mapped logical pages are data; unmapped ones (never written, trimmed or
    /// zeroed whole) are holes. Page granular: a page partly written is data.
    fn allocation(&self, offset: u64, len: u64) -> IoResult<Vec<MapExtent>> {
        check_range(offset, len, self.cfg.capacity_bytes)?;
        let ps = self.page_size as u64;
        let first = offset / ps;
        let end = (offset + len).min((first + MAX_ALLOCATION_PAGES) * ps);
        let g = self.inner.lock();
        self.check_alive(&g)?;
        let mut map = Vec::new();
        let mut pos = offset;
        while pos < end {
            let lba = pos / ps;
            let n = ((lba + 1) * ps).min(end) - pos;
            let alloc = if g.map.l2p[lba as usize] == UNMAPPED {
                Alloc::Hole
            } else {
                Alloc::Data
            };
            push_extent(&mut map, n, alloc);
            pos += n;
        }
        Ok(map)
    }
}
