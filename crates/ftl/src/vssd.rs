//! The vSSD: mapping, allocation, GC, trim, checkpoints and recovery.

use std::collections::BTreeSet;
use std::sync::Arc;

use blockdev::{check_range, BlockDev, BlockSizes, IoError, IoResult};
use clock::{Clock, Nanos};
use flash::{BlockId, FlashDevice, Geometry, Oob, OobKind, PageId};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::gc::{Candidate, GcPolicy};

mod lend;
use crate::{CheckpointStore, FtlError, GcPolicyKind};

/// `l2p` value of an unmapped logical page.
const UNMAPPED: u32 = u32::MAX;
/// `p2l` value of a page that holds a live trim record.
const TRIM_REC: u32 = u32::MAX - 1;
/// Background GC starts when a parallel unit has this many free blocks or
/// fewer: each host write to the unit then also moves its share of a victim's
/// valid pages, so that GC keeps pace with the host in small steps that reads
/// can interleave with (as real controllers do), instead of blocking a die for a
/// whole block's worth of copies.
const GC_SOFT: usize = 3;
/// Foreground GC: when a unit is down to this many free blocks, a host write
/// waits while whole victims are collected. Background GC starts one block
/// earlier than this used to, so it keeps as many blocks free as foreground GC
/// alone did: a higher start would eat into the over-provisioning and raise
/// write amplification (it did: 5 blocks of 32 made random writes 14x dearer).
const GC_LOW: usize = 2;
/// Blocks per parallel unit that only GC may open (so GC can always make progress).
const GC_RESERVE: usize = 1;
/// A checkpoint is taken when this many trim records are live.
const MAX_LIVE_TRIMS: usize = 256;
const CKPT_MAGIC: &[u8; 8] = b"FXCKPT01";

/// A range of blocks on one channel: blocks `first_block .. first_block + blocks` of
/// every plane of every die of `channel`. A vSSD on dedicated channels has one
/// extent per channel covering all of its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Extent {
    /// Channel.
    pub channel: u32,
    /// First block index within each plane.
    pub first_block: u32,
    /// Number of blocks per plane.
    pub blocks: u32,
}

impl Extent {
    /// All the blocks of one channel.
    pub fn whole_channel(geo: &Geometry, channel: u32) -> Self {
        Self {
            channel,
            first_block: 0,
            blocks: geo.blocks_per_plane,
        }
    }

    /// Whether block `b` of a device with geometry `geo` lies in this extent.
    pub fn contains(&self, geo: &Geometry, b: BlockId) -> bool {
        let i = geo.block_in_plane(b);
        geo.channel_of(b) == self.channel
            && i >= self.first_block
            && (i as u64) < self.first_block as u64 + self.blocks as u64
    }
}

/// What a vSSD is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VssdConfig {
    /// Owner id written in every page's OOB record; unique per device.
    pub id: u32,
    /// Human name (the NBD export name).
    pub name: String,
    /// The flash it owns.
    pub extents: Vec<Extent>,
    /// Logical size exported, in bytes (a multiple of the page size).
    pub capacity_bytes: u64,
    /// GC victim policy.
    #[serde(default)]
    pub gc: GcPolicyKind,
    /// Ranges of `extents` lent to ghost vSSDs ([`Vssd::lend`]): not this vSSD's
    /// flash until taken back, so it never allocates, reads, scans or erases them.
    /// At most one per channel, each inside one of `extents`.
    #[serde(default)]
    pub lent: Vec<Extent>,
}

/// Counters and gauges of a vSSD.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FtlStats {
    /// Exported size in bytes.
    pub capacity_bytes: u64,
    /// Pages written on behalf of the host (sub-page writes count one page).
    pub host_pages_written: u64,
    /// Pages programmed in flash (host + GC moves + trim records).
    pub flash_pages_written: u64,
    /// Pages read from flash (host reads, read-modify-writes and GC).
    pub flash_pages_read: u64,
    /// GC runs (one victim block each).
    pub gc_runs: u64,
    /// Valid pages moved by GC.
    pub gc_pages_moved: u64,
    /// Blocks erased by this vSSD.
    pub block_erases: u64,
    /// Free (erased) blocks now.
    pub free_blocks: u64,
    /// Blocks owned.
    pub total_blocks: u64,
    /// Logical pages currently mapped.
    pub mapped_pages: u64,
    /// Largest erase count among owned blocks.
    pub max_erase_count: u32,
    /// Smallest erase count among owned blocks.
    pub min_erase_count: u32,
    /// Blocks lent to ghost vSSDs now (counted in `total_blocks`, never free).
    #[serde(default)]
    pub lent_blocks: u64,
    /// Valid pages moved off blocks being lent (also counted in
    /// `flash_pages_written`).
    #[serde(default)]
    pub lend_pages_moved: u64,
}

impl FtlStats {
    /// Flash pages programmed per host page written (1.0 when nothing was written).
    pub fn write_amplification(&self) -> f64 {
        if self.host_pages_written == 0 {
            1.0
        } else {
            self.flash_pages_written as f64 / self.host_pages_written as f64
        }
    }
}

/// The largest capacity in bytes a vSSD on `extents` may export: all its flash but
/// the blocks GC needs to make progress, and at most 95% of it.
pub fn max_capacity(geo: &Geometry, extents: &[Extent]) -> u64 {
    let blocks: u64 = extents.iter().map(|e| e.blocks as u64).sum::<u64>()
        * geo.dies_per_channel as u64
        * geo.planes_per_die as u64;
    let pus = extents.len() as u64 * geo.dies_per_channel as u64;
    let usable = blocks.saturating_sub(pus * (GC_SOFT as u64 + 2));
    let pages =
        (usable * geo.pages_per_block as u64).min(blocks * geo.pages_per_block as u64 * 95 / 100);
    pages * geo.page_size as u64
}

/// The capacity a vSSD on `extents` exports unless told otherwise: 87.5% of its raw
/// flash (12.5% over-provisioning), within [`max_capacity`].
pub fn default_capacity(geo: &Geometry, extents: &[Extent]) -> u64 {
    let raw: u64 = extents.iter().map(|e| e.blocks as u64).sum::<u64>()
        * geo.dies_per_channel as u64
        * geo.planes_per_die as u64
        * geo.block_bytes();
    let pages = raw * 7 / 8 / geo.page_size as u64;
    (pages * geo.page_size as u64).min(max_capacity(geo, extents))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BState {
    Free,
    Open,
    Closed,
    /// Being emptied by [`Vssd::lend`]: neither allocated nor a GC victim.
    Draining,
    /// Lent to a ghost vSSD: not ours until taken back.
    Lent,
}

#[derive(Debug, Clone)]
struct Blk {
    id: BlockId,
    pu: u32,
    state: BState,
    /// Next page to program.
    wp: u32,
    valid: u32,
    erase_count: u32,
    last_write: Nanos,
}

#[derive(Debug, Default)]
struct PuState {
    /// Free blocks by (erase count, local block): the least-worn is used first.
    free: BTreeSet<(u32, u32)>,
    /// The block being filled, if any.
    active: Option<u32>,
    /// Every local block of this unit (for GC candidates).
    blocks: Vec<u32>,
    /// Background GC: the victim being drained, the next page of it to look at,
    /// pages to move per host write, and the fraction of a page owed.
    victim: Option<u32>,
    cursor: u32,
    ratio: f64,
    debt: f64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    host_pages_written: u64,
    flash_pages_written: u64,
    flash_pages_read: u64,
    gc_runs: u64,
    gc_pages_moved: u64,
    lend_pages_moved: u64,
    block_erases: u64,
}

struct Inner {
    /// Logical page → local page (block index × pages per block + page), or UNMAPPED.
    l2p: Vec<u32>,
    /// Logical page → sequence number of its current content (0 when unmapped).
    lseq: Vec<u64>,
    /// Local page → logical page, UNMAPPED (invalid/free) or TRIM_REC.
    p2l: Vec<u32>,
    blocks: Vec<Blk>,
    pus: Vec<PuState>,
    rr: usize,
    /// Last sequence number handed out.
    seq: u64,
    /// Sequence number covered by the last durable checkpoint.
    ckpt_seq: u64,
    /// Local pages of trim records newer than the checkpoint.
    live_trims: Vec<u32>,
    counters: Counters,
    gone: bool,
    scratch: Vec<u8>,
    /// GC's page buffer, kept between steps (background GC runs on every host
    /// write once a unit is low on blocks).
    gc_buf: Vec<u8>,
    /// Extents lent now (see [`Vssd::lend`]).
    lent: Vec<Extent>,
    /// Channels a lend in progress is emptying.
    lending: Vec<u32>,
}

/// A virtual SSD. Implements [`BlockDev`]; every method is thread-safe.
pub struct Vssd {
    cfg: VssdConfig,
    dev: Arc<FlashDevice>,
    clock: Arc<dyn Clock>,
    ckpt: Arc<dyn CheckpointStore>,
    policy: Box<dyn GcPolicy>,
    geo: Geometry,
    ppb: u32,
    page_size: usize,
    logical_pages: u64,
    inner: Mutex<Inner>,
    /// Serialises lend, take_back and erase_all, which drop `inner` between steps.
    lend_lock: Mutex<()>,
}

impl std::fmt::Debug for Vssd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vssd").field("config", &self.cfg).finish()
    }
}

fn validate(geo: &Geometry, cfg: &VssdConfig) -> Result<(), FtlError> {
    let bad = |m: String| Err(FtlError::Config(format!("vSSD {}: {m}", cfg.name)));
    if cfg.extents.is_empty() {
        return bad("has no flash (no extents)".into());
    }
    for (i, e) in cfg.extents.iter().enumerate() {
        if e.channel >= geo.channels {
            return bad(format!(
                "channel {} does not exist (device has {})",
                e.channel, geo.channels
            ));
        }
        if e.blocks == 0 || e.first_block as u64 + e.blocks as u64 > geo.blocks_per_plane as u64 {
            return bad(format!(
                "block range {}..{} on channel {} is empty or past the {} blocks per plane",
                e.first_block,
                e.first_block as u64 + e.blocks as u64,
                e.channel,
                geo.blocks_per_plane
            ));
        }
        for o in &cfg.extents[..i] {
            if o.channel == e.channel
                && o.first_block < e.first_block + e.blocks
                && e.first_block < o.first_block + o.blocks
            {
                return bad(format!("extents overlap on channel {}", e.channel));
            }
        }
    }
    let max = max_capacity(geo, &cfg.extents);
    if cfg.capacity_bytes == 0 || !cfg.capacity_bytes.is_multiple_of(geo.page_size as u64) {
        return bad(format!(
            "capacity {} must be a positive multiple of the {}-byte page",
            cfg.capacity_bytes, geo.page_size
        ));
    }
    if cfg.capacity_bytes > max {
        return bad(format!(
            "capacity {} exceeds the {} bytes its flash can hold with GC headroom",
            cfg.capacity_bytes, max
        ));
    }
    if cfg.capacity_bytes / geo.page_size as u64 >= TRIM_REC as u64 {
        return bad("too many logical pages".into());
    }
    for (i, l) in cfg.lent.iter().enumerate() {
        let inside = cfg.extents.iter().any(|e| {
            e.channel == l.channel
                && e.first_block <= l.first_block
                && l.first_block as u64 + l.blocks as u64 <= e.first_block as u64 + e.blocks as u64
        });
        if l.blocks == 0 || !inside {
            return bad(format!(
                "lent range {}..{} on channel {} is empty or not inside one of its extents",
                l.first_block,
                l.first_block as u64 + l.blocks as u64,
                l.channel
            ));
        }
        if cfg.lent[..i].iter().any(|o| o.channel == l.channel) {
            return bad(format!("more than one lent range on channel {}", l.channel));
        }
    }
    Ok(())
}

impl Vssd {
    fn build(
        dev: Arc<FlashDevice>,
        cfg: VssdConfig,
        clock: Arc<dyn Clock>,
        ckpt: Arc<dyn CheckpointStore>,
    ) -> Result<Self, FtlError> {
        let geo = *dev.geometry();
        validate(&geo, &cfg)?;
        let ppb = geo.pages_per_block;
        let logical_pages = cfg.capacity_bytes / geo.page_size as u64;
        let mut blocks = Vec::new();
        let mut pus = Vec::new();
        // Parallel units die-major, so consecutive pages go to different channels.
        for die in 0..geo.dies_per_channel {
            for e in &cfg.extents {
                let pu = pus.len() as u32;
                let mut st = PuState::default();
                for plane in 0..geo.planes_per_die {
                    for b in e.first_block..e.first_block + e.blocks {
                        let id = geo.block_id(e.channel, die, plane, b);
                        let lent = cfg.lent.iter().any(|l| l.contains(&geo, id));
                        st.blocks.push(blocks.len() as u32);
                        blocks.push(Blk {
                            id,
                            pu,
                            state: if lent { BState::Lent } else { BState::Free },
                            wp: 0,
                            valid: 0,
                            erase_count: dev.erase_count(id),
                            last_write: 0,
                        });
                    }
                }
                pus.push(st);
            }
        }
        let npages = blocks.len() * ppb as usize;
        let inner = Inner {
            l2p: vec![UNMAPPED; logical_pages as usize],
            lseq: vec![0; logical_pages as usize],
            p2l: vec![UNMAPPED; npages],
            blocks,
            pus,
            rr: 0,
            seq: 0,
            ckpt_seq: 0,
            live_trims: Vec::new(),
            counters: Counters::default(),
            gone: false,
            scratch: vec![0; geo.page_size as usize],
            gc_buf: vec![0; geo.page_size as usize],
            lent: cfg.lent.clone(),
            lending: Vec::new(),
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
                if b.state != BState::Lent && v.dev.write_ptr(b.id) > 0 {
                    v.dev.erase(b.id, now)?;
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
            free_blocks: g.pus.iter().map(|p| p.free.len() as u64).sum(),
            total_blocks: g.blocks.len() as u64,
            mapped_pages: g.l2p.iter().filter(|&&x| x != UNMAPPED).count() as u64,
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
            if self.dev.write_ptr(b.id) > 0 {
                done = done.max(self.dev.erase(b.id, now)?);
                inner.counters.block_erases += 1;
                b.erase_count += 1;
            }
            b.state = BState::Free;
            b.wp = 0;
            b.valid = 0;
        }
        inner.l2p.fill(UNMAPPED);
        inner.p2l.fill(UNMAPPED);
        self.dev.sync()?;
        self.ckpt.remove(self.cfg.id)?;
        Ok(done)
    }

    // ----- internals (all called with the lock held) -----

    fn global_page(&self, g: &Inner, lp: u32) -> PageId {
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

    /// Marks local page `lp` invalid.
    fn invalidate_page(g: &mut Inner, lp: u32, ppb: u32) {
        if lp != UNMAPPED && g.p2l[lp as usize] != UNMAPPED {
            g.p2l[lp as usize] = UNMAPPED;
            g.blocks[(lp / ppb) as usize].valid -= 1;
        }
    }

    fn unmap(&self, g: &mut Inner, lba: u64) {
        let old = g.l2p[lba as usize];
        Self::invalidate_page(g, old, self.ppb);
        g.l2p[lba as usize] = UNMAPPED;
        g.lseq[lba as usize] = 0;
    }

    /// Opens a new active block on `pu`, running GC first if free blocks are low.
    /// Host writes may not take the GC reserve; GC may.
    fn open_block(
        &self,
        g: &mut Inner,
        pu: usize,
        for_gc: bool,
        now: Nanos,
    ) -> Result<Option<u32>, FtlError> {
        if !for_gc {
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
        }
        let Some(&first) = g.pus[pu].free.iter().next() else {
            return Ok(None);
        };
        g.pus[pu].free.remove(&first);
        let b = first.1;
        let blk = &mut g.blocks[b as usize];
        blk.state = BState::Open;
        blk.wp = 0;
        blk.valid = 0;
        g.pus[pu].active = Some(b);
        Ok(Some(b))
    }

    /// Programs one page somewhere on the vSSD (on `pu` when GC relocates) and
    /// returns its local page and completion time. The caller sets `p2l`.
    fn program(
        &self,
        g: &mut Inner,
        data: &[u8],
        oob: &Oob,
        pu: Option<usize>,
        now: Nanos,
    ) -> Result<(u32, Nanos), FtlError> {
        let npu = g.pus.len();
        for attempt in 0..npu {
            let p = match pu {
                Some(p) => p,
                None => (g.rr + attempt) % npu,
            };
            let b = match g.pus[p].active {
                Some(b) => Some(b),
                None => self.open_block(g, p, pu.is_some(), now)?,
            };
            let Some(b) = b else {
                if pu.is_some() {
                    break;
                }
                continue;
            };
            let blk = &mut g.blocks[b as usize];
            let page = blk.wp;
            let done =
                self.dev
                    .program(self.geo.first_page(blk.id) + page as u64, data, oob, now)?;
            blk.wp += 1;
            blk.last_write = now;
            if blk.wp == self.ppb {
                blk.state = BState::Closed;
                g.pus[p].active = None;
            }
            if pu.is_none() {
                g.rr = (p + 1) % npu;
            }
            g.counters.flash_pages_written += 1;
            return Ok((b * self.ppb + page, done));
        }
        Err(FtlError::NoSpace(self.cfg.name.clone()))
    }

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
        // Taken out of `g` while `g` is lent to `program`, and put back below.
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
            let owner = g.p2l[lp as usize];
            if owner == UNMAPPED {
                continue;
            }
            if let Some(done) = self.move_page(g, pu, lp, owner, now, t, buf)? {
                t = t.max(done);
                g.counters.gc_pages_moved += 1;
                moved += 1;
            }
        }
        if g.pus[pu].cursor < ppb && g.blocks[victim as usize].valid > 0 {
            return Ok(false);
        }
        let id = g.blocks[victim as usize].id;
        self.dev.erase(id, t)?;
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
    fn move_page(
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
        if owner == TRIM_REC && oob.seq <= g.ckpt_seq {
            Self::invalidate_page(g, lp, ppb);
            return Ok(None);
        }
        let t = after.max(self.dev.read(gp, 0, buf, now)?);
        g.counters.flash_pages_read += 1;
        let (nlp, done) = self.program(g, buf, &oob, Some(pu), t)?;
        Self::invalidate_page(g, lp, ppb);
        g.p2l[nlp as usize] = owner;
        g.blocks[(nlp / ppb) as usize].valid += 1;
        if owner == TRIM_REC {
            if let Some(x) = g.live_trims.iter_mut().find(|x| **x == lp) {
                *x = nlp;
            }
        } else {
            g.l2p[owner as usize] = nlp;
        }
        Ok(Some(t.max(done)))
    }

    /// Collects one whole victim block on `pu` (foreground GC). Returns false if
    /// no block can be collected.
    fn gc_once(&self, g: &mut Inner, pu: usize, now: Nanos) -> Result<bool, FtlError> {
        if self.victim(g, pu, now).is_none() {
            return Ok(false);
        }
        self.drain(g, pu, u32::MAX, now)
    }

    /// Background GC after a host write to `pu`: moves the write's share of the
    /// victim's pages once the unit runs low on free blocks, and finishes a
    /// victim it has started.
    fn gc_step(&self, g: &mut Inner, pu: usize, now: Nanos) -> Result<(), FtlError> {
        if g.pus[pu].victim.is_none() && g.pus[pu].free.len() > GC_SOFT {
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
        st.debt += st.ratio;
        let n = st.debt.floor();
        st.debt -= n;
        // At least one page per write, so a victim is always finished.
        self.drain(g, pu, (n as u32).max(1), now)?;
        Ok(())
    }

    /// Writes one whole logical page.
    fn write_page(
        &self,
        g: &mut Inner,
        lba: u64,
        data: &[u8],
        now: Nanos,
    ) -> Result<Nanos, FtlError> {
        g.seq += 1;
        let seq = g.seq;
        let oob = Oob {
            owner: self.cfg.id,
            kind: OobKind::Data,
            lba,
            seq,
        };
        let (lp, done) = self.program(g, data, &oob, None, now)?;
        self.unmap(g, lba);
        g.l2p[lba as usize] = lp;
        g.lseq[lba as usize] = seq;
        g.p2l[lp as usize] = lba as u32;
        let blk = &g.blocks[(lp / self.ppb) as usize];
        let pu = blk.pu as usize;
        g.blocks[(lp / self.ppb) as usize].valid += 1;
        g.counters.host_pages_written += 1;
        self.gc_step(g, pu, now)?;
        Ok(done)
    }

    /// Reads part of a logical page into `out` (zeros if unmapped).
    fn read_part(
        &self,
        g: &mut Inner,
        lba: u64,
        off: usize,
        out: &mut [u8],
        now: Nanos,
    ) -> Result<Nanos, FtlError> {
        let lp = g.l2p[lba as usize];
        if lp == UNMAPPED {
            out.fill(0);
            return Ok(now);
        }
        let gp = self.global_page(g, lp);
        g.counters.flash_pages_read += 1;
        Ok(self.dev.read(gp, off, out, now)?)
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
    fn zero_range(&self, offset: u64, len: u64) -> IoResult {
        check_range(offset, len, self.cfg.capacity_bytes)?;
        let mut g = self.inner.lock();
        self.check_alive(&g)?;
        let now = self.clock.now();
        let ps = self.page_size as u64;
        let end = offset + len;
        let mut done = now;
        let first_full = offset.div_ceil(ps);
        let last_full = end / ps; // exclusive
        if first_full >= last_full {
            // No whole page: zero in place within at most two pages.
            let zeros = vec![0u8; len as usize];
            return self.write_bytes(&mut g, offset, &zeros, now);
        }
        if !offset.is_multiple_of(ps) {
            let n = (first_full * ps - offset) as usize;
            done = done.max(self.write_bytes(&mut g, offset, &vec![0u8; n], now)?);
        }
        if !end.is_multiple_of(ps) {
            let n = (end - last_full * ps) as usize;
            done = done.max(self.write_bytes(&mut g, last_full * ps, &vec![0u8; n], now)?);
        }
        let mut any = false;
        for lba in first_full..last_full {
            if g.l2p[lba as usize] != UNMAPPED {
                any = true;
                self.unmap(&mut g, lba);
            }
        }
        if any {
            done = done.max(self.write_trim_record(
                &mut g,
                first_full,
                last_full - first_full,
                now,
            )?);
        }
        Ok(done)
    }

    fn write_trim_record(
        &self,
        g: &mut Inner,
        start: u64,
        count: u64,
        now: Nanos,
    ) -> Result<Nanos, FtlError> {
        g.seq += 1;
        let seq = g.seq;
        let mut page = vec![0u8; self.page_size];
        page[0..8].copy_from_slice(&start.to_le_bytes());
        page[8..16].copy_from_slice(&count.to_le_bytes());
        let oob = Oob {
            owner: self.cfg.id,
            kind: OobKind::Trim,
            lba: start,
            seq,
        };
        let (lp, done) = self.program(g, &page, &oob, None, now)?;
        g.p2l[lp as usize] = TRIM_REC;
        g.blocks[(lp / self.ppb) as usize].valid += 1;
        g.live_trims.push(lp);
        if g.live_trims.len() >= MAX_LIVE_TRIMS {
            self.write_checkpoint(g)?;
        }
        Ok(done)
    }

    fn write_bytes(&self, g: &mut Inner, offset: u64, data: &[u8], now: Nanos) -> IoResult {
        let ps = self.page_size as u64;
        let mut done = now;
        let mut pos = 0usize;
        while pos < data.len() {
            let at = offset + pos as u64;
            let lba = at / ps;
            let off = (at % ps) as usize;
            let n = (self.page_size - off).min(data.len() - pos);
            let t = if n == self.page_size {
                self.write_page(g, lba, &data[pos..pos + n], now)?
            } else {
                self.write_partial(g, lba, off, &data[pos..pos + n], now)?
            };
            done = done.max(t);
            pos += n;
        }
        Ok(done)
    }

    fn write_checkpoint(&self, g: &mut Inner) -> Result<(), FtlError> {
        self.dev.sync()?;
        let mapped = g.lseq.iter().filter(|&&s| s != 0).count();
        let mut out = Vec::with_capacity(32 + mapped * 12);
        out.extend_from_slice(CKPT_MAGIC);
        out.extend_from_slice(&self.cfg.id.to_le_bytes());
        out.extend_from_slice(&g.seq.to_le_bytes());
        out.extend_from_slice(&self.logical_pages.to_le_bytes());
        out.extend_from_slice(&(mapped as u64).to_le_bytes());
        for (lba, &s) in g.lseq.iter().enumerate() {
            if s != 0 {
                out.extend_from_slice(&(lba as u32).to_le_bytes());
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
        self.ckpt.save(self.cfg.id, &out)?;
        g.ckpt_seq = g.seq;
        for lp in std::mem::take(&mut g.live_trims) {
            Self::invalidate_page(g, lp, self.ppb);
        }
        Ok(())
    }

    fn parse_checkpoint(&self, bytes: &[u8]) -> Result<(u64, Vec<(u32, u64)>), FtlError> {
        let bad = |r: String| FtlError::Recovery {
            name: self.cfg.name.clone(),
            reason: format!("checkpoint: {r}"),
        };
        if bytes.len() < 36 || &bytes[..8] != CKPT_MAGIC {
            return Err(bad("not a flexssd checkpoint".into()));
        }
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
        let id = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
        if id != self.cfg.id {
            return Err(bad(format!("belongs to vSSD id {id}, not {}", self.cfg.id)));
        }
        let seq = u64_at(12);
        let pages = u64_at(20);
        if pages != self.logical_pages {
            return Err(bad(format!(
                "made for {pages} logical pages, vSSD has {}",
                self.logical_pages
            )));
        }
        let n = u64_at(28) as usize;
        if bytes.len() != 36 + n * 12 {
            return Err(bad(format!(
                "{} bytes, expected {}",
                bytes.len(),
                36 + n * 12
            )));
        }
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            let o = 36 + i * 12;
            let lba = u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
            let s = u64_at(o + 4);
            if lba as u64 >= self.logical_pages || s == 0 || s > seq {
                return Err(bad(format!(
                    "entry {i} (lba {lba}, seq {s}) is out of range"
                )));
            }
            entries.push((lba, s));
        }
        Ok((seq, entries))
    }

    fn recover(&self, g: &mut Inner) -> Result<(), FtlError> {
        let bytes = self
            .ckpt
            .load(self.cfg.id)?
            .ok_or_else(|| FtlError::Recovery {
                name: self.cfg.name.clone(),
                reason: "no checkpoint found (was it created by this data directory?)".into(),
            })?;
        let (cseq, entries) = self.parse_checkpoint(&bytes)?;
        for &(lba, s) in &entries {
            g.lseq[lba as usize] = s;
        }
        let ppb = self.ppb;
        let mut events: Vec<(u64, u32)> = Vec::new(); // (seq, local page) newer than the checkpoint
        let mut max_seq = cseq;
        for bi in 0..g.blocks.len() {
            if g.blocks[bi].state == BState::Lent {
                continue; // the borrower's pages
            }
            let id = g.blocks[bi].id;
            let wp = self.dev.write_ptr(id);
            for page in 0..wp {
                let lp = bi as u32 * ppb + page;
                let Some(oob) = self.dev.oob(self.geo.first_page(id) + page as u64) else {
                    continue;
                };
                if oob.owner != self.cfg.id {
                    tracing::warn!(vssd = %self.cfg.name, block = id, "page owned by {} ignored", oob.owner);
                    continue;
                }
                max_seq = max_seq.max(oob.seq);
                match oob.kind {
                    OobKind::Data if oob.lba >= self.logical_pages => {
                        return Err(FtlError::Recovery {
                            name: self.cfg.name.clone(),
                            reason: format!("page for logical page {} beyond capacity", oob.lba),
                        })
                    }
                    OobKind::Data if oob.seq <= cseq => {
                        let l = oob.lba as usize;
                        if g.lseq[l] == oob.seq && g.l2p[l] == UNMAPPED {
                            g.l2p[l] = lp;
                            g.p2l[lp as usize] = l as u32;
                        }
                    }
                    _ if oob.seq > cseq => events.push((oob.seq, lp)),
                    _ => {}
                }
            }
            let blk = &mut g.blocks[bi];
            blk.wp = wp;
            blk.state = if wp == 0 {
                BState::Free
            } else {
                BState::Closed
            };
        }
        events.sort_unstable();
        let mut buf = vec![0u8; self.page_size];
        for (seq, lp) in events {
            let gp = self.global_page(g, lp);
            let oob = self.dev.oob(gp).expect("scanned above");
            match oob.kind {
                OobKind::Data => {
                    let l = oob.lba as usize;
                    if g.l2p[l] != UNMAPPED && g.lseq[l] == seq {
                        continue; // a GC copy of the same write
                    }
                    let old = g.l2p[l];
                    if old != UNMAPPED {
                        g.p2l[old as usize] = UNMAPPED;
                    }
                    g.l2p[l] = lp;
                    g.lseq[l] = seq;
                    g.p2l[lp as usize] = l as u32;
                }
                OobKind::Trim => {
                    self.dev.read(gp, 0, &mut buf, 0)?;
                    let start = u64::from_le_bytes(buf[0..8].try_into().unwrap());
                    let count = u64::from_le_bytes(buf[8..16].try_into().unwrap());
                    if start
                        .checked_add(count)
                        .is_none_or(|e| e > self.logical_pages)
                    {
                        return Err(FtlError::Recovery {
                            name: self.cfg.name.clone(),
                            reason: format!("trim record {start}+{count} beyond capacity"),
                        });
                    }
                    for l in start..start + count {
                        let old = g.l2p[l as usize];
                        if old != UNMAPPED {
                            g.p2l[old as usize] = UNMAPPED;
                        }
                        g.l2p[l as usize] = UNMAPPED;
                        g.lseq[l as usize] = 0;
                    }
                    g.p2l[lp as usize] = TRIM_REC;
                    g.live_trims.push(lp);
                }
            }
        }
        // Every logical page the checkpoint maps must have been found, unless a newer
        // write or trim replaced it.
        for &(lba, s) in &entries {
            if g.lseq[lba as usize] == s && g.l2p[lba as usize] == UNMAPPED {
                return Err(FtlError::Recovery {
                    name: self.cfg.name.clone(),
                    reason: format!(
                        "checkpoint maps logical page {lba} (seq {s}) but no flash page holds it"
                    ),
                });
            }
        }
        // Valid counts, free lists and one open block per unit.
        for b in g.blocks.iter_mut() {
            b.valid = 0;
        }
        for lp in 0..g.p2l.len() {
            if g.p2l[lp] != UNMAPPED {
                g.blocks[lp / ppb as usize].valid += 1;
            }
        }
        for bi in 0..g.blocks.len() {
            if g.blocks[bi].state == BState::Lent {
                continue;
            }
            let (pu, wp, ec) = (
                g.blocks[bi].pu as usize,
                g.blocks[bi].wp,
                g.blocks[bi].erase_count,
            );
            if wp == 0 {
                g.pus[pu].free.insert((ec, bi as u32));
            } else if wp < ppb && g.pus[pu].active.is_none() {
                g.blocks[bi].state = BState::Open;
                g.pus[pu].active = Some(bi as u32);
            }
        }
        g.seq = max_seq;
        Ok(())
    }

    fn sync_if(&self, fua: bool) -> IoResult<()> {
        if fua {
            self.dev.sync().map_err(|e| IoError::Media(e.to_string()))?;
        }
        Ok(())
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
            let n = (self.page_size - off).min(buf.len() - pos);
            // Start loading the next page while this one is copied (pages of one
            // request are scattered once random writes have moved them).
            if pos + n < buf.len() {
                let next = g.l2p[(at / ps + 1) as usize];
                if next != UNMAPPED {
                    self.dev.prefetch(self.global_page(&g, next));
                }
            }
            done = done.max(self.read_part(&mut g, at / ps, off, &mut buf[pos..pos + n], now)?);
            pos += n;
        }
        Ok(done)
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        check_range(offset, data.len() as u64, self.cfg.capacity_bytes)?;
        let done = {
            let mut g = self.inner.lock();
            self.check_alive(&g)?;
            let now = self.clock.now();
            self.write_bytes(&mut g, offset, data, now)?
        };
        self.sync_if(fua)?;
        Ok(done)
    }

    fn flush(&self) -> IoResult {
        self.check_alive(&self.inner.lock())?;
        self.sync_if(true)?;
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
}
