//! The emulated device: NAND rules and the timing model over a [`Store`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use clock::Nanos;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::store::Store;
use crate::{
    Backend, BlockId, DirtySet, FlashError, Geometry, Oob, PageId, Result, Timing, OOB_SIZE,
};

/// A channel bus timeline: the busy intervals still in the future, so that a short
/// transfer can use a gap before a transfer that waits for a slow die. At most
/// `BUS_WINDOW` intervals are remembered; time before the oldest counts as busy.
#[derive(Default)]
struct Bus {
    floor: Nanos,
    busy: std::collections::VecDeque<(Nanos, Nanos)>,
}

const BUS_WINDOW: usize = 64;

impl Bus {
    /// Reserves `dur` at the earliest time at or after `ready`; returns its end.
    fn reserve(&mut self, ready: Nanos, dur: Nanos, now: Nanos) -> Nanos {
        while self.busy.front().is_some_and(|&(_, e)| e <= now) {
            self.busy.pop_front();
        }
        let mut t = ready.max(self.floor);
        // Common case (and the only one once timelines run ahead in fast mode):
        // the transfer goes after everything already booked.
        if self.busy.back().is_none_or(|&(_, e)| e <= t) {
            self.busy.push_back((t, t + dur));
            if self.busy.len() > BUS_WINDOW {
                if let Some((_, e)) = self.busy.pop_front() {
                    self.floor = self.floor.max(e);
                }
            }
            return t + dur;
        }
        let mut idx = self.busy.len();
        for (i, &(s, e)) in self.busy.iter().enumerate() {
            if t + dur <= s {
                idx = i;
                break;
            }
            t = t.max(e);
        }
        self.busy.insert(idx, (t, t + dur));
        if self.busy.len() > BUS_WINDOW {
            if let Some((_, e)) = self.busy.pop_front() {
                self.floor = self.floor.max(e);
            }
        }
        t + dur
    }
}

/// Per-channel state: the bus and die timelines, and each block's write pointer.
struct Channel {
    bus: Bus,
    die_free: Vec<Nanos>,
    /// Next programmable page of each block on this channel.
    write_ptr: Vec<u32>,
}

/// Operation counters of a device.
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceStats {
    /// Page reads.
    pub page_reads: u64,
    /// Page programs.
    pub page_programs: u64,
    /// Block erases.
    pub block_erases: u64,
}

/// An emulated open-channel SSD. Thread-safe: each channel has its own lock, so
/// tenants on different channels never contend.
pub struct FlashDevice {
    geo: Geometry,
    timing: Timing,
    store: Store,
    channels: Box<[Mutex<Channel>]>,
    reads: AtomicU64,
    programs: AtomicU64,
    erases: AtomicU64,
}

impl std::fmt::Debug for FlashDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashDevice")
            .field("geometry", &self.geo)
            .field("timing", &self.timing)
            .finish()
    }
}

impl FlashDevice {
    /// Opens (or creates) a device. For an existing file, every block's write pointer
    /// is rebuilt from the OOB records, so a device killed mid-write reopens with
    /// exactly the pages that were completely programmed.
    pub fn open(backend: &Backend, geo: Geometry, timing: Timing) -> Result<Self> {
        geo.validate()?;
        let (store, _fresh) = Store::open(backend, geo)?;
        let bpc = geo.blocks_per_channel() as usize;
        let mut channels = Vec::with_capacity(geo.channels as usize);
        for ch in 0..geo.channels {
            let mut write_ptr = vec![0u32; bpc];
            for (i, wp) in write_ptr.iter_mut().enumerate() {
                let b = ch * bpc as u32 + i as u32;
                let first = geo.first_page(b);
                // The write pointer is just past the last page with a valid record.
                *wp = (0..geo.pages_per_block)
                    .rev()
                    .find(|&p| Oob::decode(store.oob(first + p as u64)).is_some())
                    .map_or(0, |p| p + 1);
            }
            channels.push(Mutex::new(Channel {
                bus: Bus::default(),
                die_free: vec![0; geo.dies_per_channel as usize],
                write_ptr,
            }));
        }
        Ok(Self {
            geo,
            timing,
            store,
            channels: channels.into_boxed_slice(),
            reads: AtomicU64::new(0),
            programs: AtomicU64::new(0),
            erases: AtomicU64::new(0),
        })
    }

    /// A memory-backed device (convenience for tests and the simulator).
    pub fn memory(geo: Geometry, timing: Timing) -> Result<Self> {
        Self::open(&Backend::Memory, geo, timing)
    }

    /// The device's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// When the busiest die of `channel` finishes the work booked on it so far
    /// (0 if none was ever booked). Low-priority traffic (harvest tenants on a
    /// regular tenant's channels) uses it to run only in the gaps.
    pub fn channel_busy_until(&self, channel: u32) -> Nanos {
        self.channels
            .get(channel as usize)
            .map_or(0, |c| c.lock().die_free.iter().copied().max().unwrap_or(0))
    }

    /// The device's timing parameters.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    fn locate(&self, b: BlockId) -> (usize, usize, usize) {
        let ch = self.geo.channel_of(b) as usize;
        let pu = self.geo.pu_of(b);
        (
            ch,
            pu.die as usize,
            (b - ch as u32 * self.geo.blocks_per_channel()) as usize,
        )
    }

    /// Reads `buf.len()` bytes starting `offset` bytes into page `p`, issued at `now`;
    /// returns the completion time (die read, then bus transfer).
    pub fn read(&self, p: PageId, offset: usize, buf: &mut [u8], now: Nanos) -> Result<Nanos> {
        self.geo.check_page(p)?;
        let ps = self.geo.page_size as usize;
        if offset + buf.len() > ps {
            return Err(FlashError::BadLength {
                expected: ps - offset.min(ps),
                got: buf.len(),
            });
        }
        let (b, pg) = self.geo.split(p);
        let (ch, die, bi) = self.locate(b);
        let mut c = self.channels[ch].lock();
        if pg >= c.write_ptr[bi] {
            return Err(FlashError::ReadErased { block: b, page: pg });
        }
        // SAFETY: page is in range; we hold its channel lock.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.store.page_ptr(p).add(offset),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let start = now.max(c.die_free[die]);
        let sensed = start + self.timing.read_ns;
        c.die_free[die] = sensed;
        let done = c
            .bus
            .reserve(sensed, self.timing.transfer_ns(buf.len() as u64), now);
        // The die holds the data in its register until the transfer is done.
        c.die_free[die] = done;
        self.reads.fetch_add(1, Relaxed);
        Ok(done)
    }

    /// Programs page `p` with `data` (exactly one page) and its OOB record, issued at
    /// `now`; returns the completion time (bus transfer, then die program).
    pub fn program(&self, p: PageId, data: &[u8], oob: &Oob, now: Nanos) -> Result<Nanos> {
        self.geo.check_page(p)?;
        let ps = self.geo.page_size as usize;
        if data.len() != ps {
            return Err(FlashError::BadLength {
                expected: ps,
                got: data.len(),
            });
        }
        let (b, pg) = self.geo.split(p);
        let (ch, die, bi) = self.locate(b);
        let mut c = self.channels[ch].lock();
        let next = c.write_ptr[bi];
        if next >= self.geo.pages_per_block {
            return Err(FlashError::BlockFull { block: b });
        }
        if pg != next {
            return Err(FlashError::ProgramOutOfOrder {
                block: b,
                page: pg,
                next,
            });
        }
        // Data first, then the OOB record: a page whose record is present is complete.
        // SAFETY: page in range; channel lock held.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.store.page_ptr(p), ps) };
        self.store.set_oob(p, &oob.encode());
        c.write_ptr[bi] = next + 1;
        let ready = now.max(c.die_free[die]);
        let loaded = c
            .bus
            .reserve(ready, self.timing.transfer_ns(ps as u64), now);
        c.die_free[die] = loaded + self.timing.program_ns;
        self.programs.fetch_add(1, Relaxed);
        Ok(c.die_free[die])
    }

    /// Erases block `b` issued at `now`: data discarded, OOB cleared, erase count + 1.
    pub fn erase(&self, b: BlockId, now: Nanos) -> Result<Nanos> {
        self.geo.check_block(b)?;
        let (ch, die, bi) = self.locate(b);
        let mut c = self.channels[ch].lock();
        self.store.erase(b)?;
        c.write_ptr[bi] = 0;
        let start = now.max(c.die_free[die]);
        c.die_free[die] = start + self.timing.erase_ns;
        self.erases.fetch_add(1, Relaxed);
        Ok(c.die_free[die])
    }

    /// Hints that page `p` will be read soon: asks the CPU to start loading its
    /// bytes. An FTL reading logically sequential but physically scattered pages
    /// calls this for the next page while it copies the current one, so memory
    /// latency overlaps the copy instead of adding to it. No effect on the model.
    #[inline]
    pub fn prefetch(&self, p: PageId) {
        if p >= self.geo.total_pages() {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let base = self.store.page_ptr(p);
            for off in (0..self.geo.page_size as usize).step_by(64) {
                // SAFETY: in-bounds address of our mapping; a prefetch never faults.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        base.add(off) as *const i8,
                    )
                };
            }
        }
    }

    /// The OOB record of page `p`, if it is programmed with a valid record.
    pub fn oob(&self, p: PageId) -> Option<Oob> {
        if p >= self.geo.total_pages() {
            return None;
        }
        let (b, _) = self.geo.split(p);
        let (ch, _, _) = self.locate(b);
        let _c = self.channels[ch].lock();
        let mut raw = [0u8; OOB_SIZE];
        raw.copy_from_slice(self.store.oob(p));
        Oob::decode(&raw)
    }

    /// The next programmable page of block `b` (0 = erased, pages_per_block = full).
    pub fn write_ptr(&self, b: BlockId) -> u32 {
        let (ch, _, bi) = self.locate(b);
        self.channels[ch].lock().write_ptr[bi]
    }

    /// How many times block `b` was erased.
    pub fn erase_count(&self, b: BlockId) -> u32 {
        let (ch, _, _) = self.locate(b);
        let _c = self.channels[ch].lock();
        self.store.erase_count(b)
    }

    /// Allocates all of a memory-backed device's memory up front (see the
    /// `prefault` device setting); an error for the file backend.
    pub fn prefault(&self) -> Result<()> {
        self.store.prefault()
    }

    /// Makes everything programmed so far durable (msync for the file backend).
    pub fn sync(&self) -> Result<()> {
        self.store.sync()
    }

    /// Makes durable the pages programmed and the blocks erased that `dirty`
    /// records (one tenant's changes), and nothing else: their data, OOB
    /// records and erase counts. Takes no lock; the caller holds none either.
    pub fn sync_dirty(&self, dirty: &DirtySet) -> Result<()> {
        self.store.sync_dirty(dirty)
    }

    /// Operation counters since open.
    pub fn stats(&self) -> DeviceStats {
        DeviceStats {
            page_reads: self.reads.load(Relaxed),
            page_programs: self.programs.load(Relaxed),
            block_erases: self.erases.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OobKind;

    fn small() -> Geometry {
        Geometry {
            channels: 2,
            dies_per_channel: 2,
            planes_per_die: 1,
            blocks_per_plane: 4,
            pages_per_block: 8,
            page_size: 4096,
        }
    }

    #[test]
    fn bus_uses_gaps_and_stays_bounded() {
        let mut b = Bus::default();
        assert_eq!(b.reserve(100, 10, 0), 110);
        assert_eq!(
            b.reserve(0, 10, 0),
            10,
            "a transfer ready earlier fits before"
        );
        assert_eq!(
            b.reserve(0, 95, 0),
            205,
            "too long for the gaps: after the last"
        );
        for i in 0..1000 {
            b.reserve(i * 7, 5, 0);
        }
        assert!(b.busy.len() <= BUS_WINDOW);
        let floor = b.floor;
        let t = b.reserve(0, 1, 0);
        assert!(t > floor, "nothing is scheduled before the forgotten past");
    }

    #[test]
    fn channel_busy_until_is_the_busiest_die() {
        let d = FlashDevice::memory(small(), Timing::default()).unwrap();
        assert_eq!(d.channel_busy_until(0), 0);
        assert_eq!(
            d.channel_busy_until(9),
            0,
            "no such channel: nothing booked"
        );
        let geo = small();
        let t = Timing::default();
        // Two programs on die 1 of channel 1 queue; channel 0 stays idle.
        let b = geo.block_id(1, 1, 0, 0);
        let first = d
            .program(geo.first_page(b), &[1u8; 4096], &rec(0, 1), 0)
            .unwrap();
        let second = d
            .program(geo.first_page(b) + 1, &[2u8; 4096], &rec(1, 2), 0)
            .unwrap();
        assert!(second >= first + t.program_ns);
        assert_eq!(d.channel_busy_until(1), second);
        assert_eq!(d.channel_busy_until(0), 0);
    }

    fn rec(lba: u64, seq: u64) -> Oob {
        Oob {
            owner: 1,
            kind: OobKind::Data,
            lba,
            seq,
        }
    }

    #[test]
    fn nand_rules_are_enforced() {
        let d = FlashDevice::memory(small(), Timing::default()).unwrap();
        let page = vec![7u8; 4096];
        let mut buf = vec![0u8; 4096];
        assert!(matches!(
            d.read(0, 0, &mut buf, 0),
            Err(FlashError::ReadErased { .. })
        ));
        assert!(matches!(
            d.program(1, &page, &rec(0, 1), 0),
            Err(FlashError::ProgramOutOfOrder { next: 0, .. })
        ));
        d.program(0, &page, &rec(0, 1), 0).unwrap();
        assert!(matches!(
            d.program(0, &page, &rec(0, 2), 0),
            Err(FlashError::ProgramOutOfOrder { next: 1, .. })
        ));
        for p in 1..8 {
            d.program(p, &page, &rec(p, p + 1), 0).unwrap();
        }
        // Page 8 is the first page of block 1, which is erased: allowed.
        d.program(8, &page, &rec(9, 9), 0).unwrap();
        let b0 = 0;
        assert_eq!(d.write_ptr(b0), 8);
        assert!(matches!(
            d.program(0, &page, &rec(0, 3), 0),
            Err(FlashError::BlockFull { .. })
        ));
        d.read(3, 0, &mut buf, 0).unwrap();
        assert_eq!(buf, page);
        assert_eq!(d.oob(3), Some(rec(3, 4)));
        d.erase(b0, 0).unwrap();
        assert_eq!(d.erase_count(b0), 1);
        assert_eq!(d.write_ptr(b0), 0);
        assert_eq!(d.oob(3), None);
        assert!(matches!(
            d.read(3, 0, &mut buf, 0),
            Err(FlashError::ReadErased { .. })
        ));
        d.program(0, &page, &rec(0, 10), 0).unwrap();
        assert!(d.program(0, &page[..100], &rec(0, 1), 0).is_err());
        assert!(d.read(u64::MAX, 0, &mut buf, 0).is_err());
        assert!(d.erase(1_000, 0).is_err());
    }

    #[test]
    fn prefault_keeps_memory_zero_and_refuses_files() {
        let d = FlashDevice::memory(small(), Timing::default()).unwrap();
        d.prefault().unwrap();
        assert_eq!(d.write_ptr(0), 0);
        assert_eq!(d.oob(0), None);
        let dir = tempfile::tempdir().unwrap();
        let f = FlashDevice::open(
            &Backend::File {
                path: dir.path().join("f"),
            },
            small(),
            Timing::default(),
        )
        .unwrap();
        assert!(f
            .prefault()
            .unwrap_err()
            .to_string()
            .contains("memory backend only"));
    }

    #[test]
    fn erased_pages_cannot_be_read_and_file_bytes_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = FlashDevice::open(
            &Backend::File { path: path.clone() },
            small(),
            Timing::default(),
        )
        .unwrap();
        f.program(0, &vec![0xAB; 4096], &rec(0, 1), 0).unwrap();
        f.sync().unwrap();
        f.erase(0, 0).unwrap();
        f.sync().unwrap();
        let mut buf = vec![0u8; 4096];
        assert!(matches!(
            f.read(0, 0, &mut buf, 0),
            Err(FlashError::ReadErased { .. })
        ));
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            bytes[..4096].iter().all(|&x| x == 0),
            "erased data must leave the file"
        );
    }

    #[test]
    fn erased_data_is_gone() {
        let d = FlashDevice::memory(small(), Timing::default()).unwrap();
        d.program(0, &vec![0xAB; 4096], &rec(0, 1), 0).unwrap();
        d.erase(0, 0).unwrap();
        d.program(0, &vec![0; 4096], &rec(0, 2), 0).unwrap();
        let mut buf = vec![1u8; 4096];
        d.read(0, 0, &mut buf, 0).unwrap();
        assert!(buf.iter().all(|&x| x == 0));
    }

    #[test]
    fn reads_queue_behind_programs_on_the_same_die_only() {
        let t = Timing {
            read_ns: 50_000,
            program_ns: 1_000_000,
            erase_ns: 3_000_000,
            channel_mbps: 400,
        };
        let g = small();
        let d = FlashDevice::memory(g, t).unwrap();
        let page = vec![1u8; 4096];
        // Block 0 is on channel 0 die 0; block 4 on channel 0 die 1; block 8 on channel 1.
        let b_die1 = g.block_id(0, 1, 0, 0);
        let b_ch1 = g.block_id(1, 0, 0, 0);
        for b in [0, b_die1, b_ch1] {
            d.program(g.first_page(b), &page, &rec(0, 1), 0).unwrap();
        }
        let mut buf = vec![0u8; 4096];
        let now = 2_000_000; // all programs finished
        let idle = d.read(g.first_page(b_ch1), 0, &mut buf, now).unwrap() - now;
        // Start a program on channel 0 die 0, then read from the same die and another die.
        let done_prog = d.program(1, &page, &rec(1, 2), now).unwrap();
        let same_die = d.read(0, 0, &mut buf, now).unwrap();
        assert!(
            same_die >= done_prog + t.read_ns,
            "a read must wait for the program on its die"
        );
        let other_die = d.read(g.first_page(b_die1), 0, &mut buf, now).unwrap() - now;
        assert!(
            other_die < 2 * idle,
            "another die only shares the bus: {other_die} vs idle {idle}"
        );
        let other_ch = d.read(g.first_page(b_ch1), 0, &mut buf, now).unwrap() - now;
        assert!(other_ch <= idle * 2);
    }

    #[test]
    fn file_backend_survives_reopen_and_rebuilds_write_pointers() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::File {
            path: dir.path().join("dev"),
        };
        let g = small();
        {
            let d = FlashDevice::open(&backend, g, Timing::default()).unwrap();
            for p in 0..3 {
                d.program(p, &vec![p as u8 + 1; 4096], &rec(p, p + 1), 0)
                    .unwrap();
            }
            d.erase(1, 0).unwrap();
            // dropped without sync: like a kill -9, the page cache keeps the bytes
        }
        let d = FlashDevice::open(&backend, g, Timing::default()).unwrap();
        assert_eq!(d.write_ptr(0), 3);
        assert_eq!(d.erase_count(1), 1);
        let mut buf = vec![0u8; 4096];
        d.read(2, 0, &mut buf, 0).unwrap();
        assert!(buf.iter().all(|&x| x == 3));
        assert_eq!(d.oob(2), Some(rec(2, 3)));
        d.program(3, &vec![9; 4096], &rec(3, 4), 0).unwrap();

        let other = Geometry {
            blocks_per_plane: 5,
            ..g
        };
        let err = FlashDevice::open(&backend, other, Timing::default()).unwrap_err();
        assert!(err.to_string().contains("another geometry"), "{err}");
    }
}
