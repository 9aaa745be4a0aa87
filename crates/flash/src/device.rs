//! The emulated device: NAND rules and the timing model over a [`Store`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use blockdev::{Loan, Recall};
use clock::Nanos;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::store::Store;
use crate::{
    Backend, BlockId, CrashImage, CrashPoint, DirtySet, FlashError, Geometry, Oob, OwnRuns, PageId,
    Result, Timing, OOB_SIZE,
};

/// A channel bus timeline: the busy intervals still in the future, so that a short
/// transfer can use a gap before a transfer that waits for a slow die. At most
/// `BUS_WINDOW` intervals are remembered. Without suspension, time before the
/// oldest remembered one counts as busy (reads wait for all booked work anyway).
/// With it (`horizon`), the farthest ahead is forgotten instead, and only its
/// end is kept in `tail`: a read served now must find the bus as it is now,
/// not after transfers booked far ahead, and a transfer booked after
/// everything remembered still goes after the forgotten ones.
///
/// (An earlier version merged the two farthest intervals into one that reads
/// could not cross. When the clock lags far behind the timelines, as in fast
/// mode, a read then waited behind a merged span of most of the bus's future,
/// and the program it had suspended was pushed by that whole span: the
/// timelines doubled until their arithmetic overflowed.)
#[derive(Default)]
struct Bus {
    floor: Nanos,
    /// (start, end, tag) of each booked transfer, in order.
    busy: std::collections::VecDeque<(Nanos, Nanos, u32)>,
    horizon: bool,
    /// End of the transfers forgotten past the window (with `horizon`).
    tail: Nanos,
}

const BUS_WINDOW: usize = 64;

/// Tag of a bus interval no read may move (a read's transfer, or any transfer
/// without suspension); a program's data transfer is tagged with its die + 1.
const FIXED: u32 = 0;

/// A transfer moved by a read: (die, old end, new end).
type Displaced = (usize, Nanos, Nanos);

impl Bus {
    fn prune(&mut self, now: Nanos) {
        while self.busy.front().is_some_and(|&(_, e, _)| e <= now) {
            self.busy.pop_front();
        }
    }

    /// Where a transfer of `dur` ready at `ready` would go: (index among the busy
    /// intervals, start). Forgets intervals that ended by `now`.
    fn slot(&mut self, ready: Nanos, dur: Nanos, now: Nanos) -> (usize, Nanos) {
        self.prune(now);
        let mut t = ready.max(self.floor);
        // Common case (and the only one once timelines run ahead in fast mode):
        // the transfer goes after everything already booked, forgotten or not.
        if self.busy.back().is_none_or(|&(_, e, _)| e <= t) {
            return (self.busy.len(), t.max(self.tail));
        }
        for (i, &(s, e, _)) in self.busy.iter().enumerate() {
            if t + dur <= s {
                return (i, t);
            }
            t = t.max(e);
        }
        (self.busy.len(), t.max(self.tail))
    }

    /// Reserves `dur` at the earliest time at or after `ready`; returns its end.
    fn reserve(&mut self, ready: Nanos, dur: Nanos, now: Nanos) -> Nanos {
        self.reserve_tagged(ready, dur, now, FIXED)
    }

    /// [`Bus::reserve`] with a tag (see [`FIXED`]).
    fn reserve_tagged(&mut self, ready: Nanos, dur: Nanos, now: Nanos, tag: u32) -> Nanos {
        let (idx, t) = self.slot(ready, dur, now);
        self.busy.insert(idx, (t, t + dur, tag));
        self.trim();
        t + dur
    }

    fn trim(&mut self) {
        if self.busy.len() > BUS_WINDOW {
            if self.horizon {
                if let Some((_, e, _)) = self.busy.pop_back() {
                    self.tail = self.tail.max(e);
                }
            } else if let Some((_, e, _)) = self.busy.pop_front() {
                self.floor = self.floor.max(e);
            }
        }
    }

    /// Where a read's transfer ready at `ready` would start: program data
    /// transfers that have not started by then wait for it (the controller
    /// gives reads the bus first), so they are no obstacle.
    fn read_slot(&mut self, ready: Nanos, dur: Nanos, now: Nanos) -> Nanos {
        self.prune(now);
        let mut t = ready.max(self.floor);
        for &(s, e, tag) in &self.busy {
            if tag != FIXED && s >= ready {
                continue;
            }
            if t + dur <= s {
                break;
            }
            t = t.max(e);
        }
        t
    }

    /// When a read's transfer ready at `ready` would end, booking nothing.
    fn read_peek(&mut self, ready: Nanos, dur: Nanos, now: Nanos) -> Nanos {
        self.read_slot(ready, dur, now) + dur
    }

    /// Books a read's transfer ahead of program data transfers not started by
    /// `ready`; those it overlaps move after it. Returns its end and the moved
    /// transfers, whose programs must start later.
    ///
    /// One pass over the window finds the slot, and, when no movable transfer
    /// lies in the read's way (always, with no program waiting for the bus),
    /// its place too: every interval before the first that starts after the
    /// read's end has ended by its start. This is on every page read's path
    /// (a 128 KiB read books 32 of them), so it must not scan the window
    /// three times; `reserve_read_matches_the_three_pass_version` checks it
    /// books exactly what the general path does.
    fn reserve_read(
        &mut self,
        ready: Nanos,
        dur: Nanos,
        now: Nanos,
        moved: &mut Vec<Displaced>,
    ) -> Nanos {
        self.prune(now);
        let mut t = ready.max(self.floor);
        let mut at = self.busy.len();
        let mut movable = false;
        for (i, &(s, e, tag)) in self.busy.iter().enumerate() {
            if tag != FIXED && s >= ready {
                movable = true;
                continue;
            }
            if t + dur <= s {
                at = i;
                break;
            }
            t = t.max(e);
        }
        if !movable {
            self.busy.insert(at, (t, t + dur, FIXED));
            self.trim();
            return t + dur;
        }
        self.displace_for_read(t, ready, dur, now, moved)
    }

    /// The general case of [`Bus::reserve_read`]: the read goes at `t`, and
    /// the program transfers not started by `ready` that overlap it move
    /// after it.
    fn displace_for_read(
        &mut self,
        t: Nanos,
        ready: Nanos,
        dur: Nanos,
        now: Nanos,
        moved: &mut Vec<Displaced>,
    ) -> Nanos {
        let end = t + dur;
        let mut displaced = Vec::new();
        let mut i = 0;
        while i < self.busy.len() {
            let (s, e, tag) = self.busy[i];
            if tag != FIXED && s >= ready && s < end && e > t {
                self.busy.remove(i);
                displaced.push((s, e, tag));
            } else {
                i += 1;
            }
        }
        let idx = self
            .busy
            .iter()
            .position(|&(s, _, _)| s >= t)
            .unwrap_or(self.busy.len());
        self.busy.insert(idx, (t, end, FIXED));
        self.trim();
        for (s, e, tag) in displaced {
            let ne = self.reserve_tagged(s, e - s, now, tag);
            moved.push(((tag - 1) as usize, e, ne));
        }
        end
    }
}

/// A program or erase booked on a die. Reads move it: one that suspends it
/// pushes its end out by the suspension (suspend latency, the reads, the resume
/// overhead); one served before it starts pushes it by the read.
#[derive(Debug, Clone, Copy)]
struct LongOp {
    /// When the die starts it (after the data transfer, for a program).
    start: Nanos,
    /// When it completes, as far as is known now.
    end: Nanos,
    /// Its suspend latency (program or erase).
    suspend_ns: Nanos,
    /// Reads served ahead of it so far (counted against `max_suspends`).
    preempted: u32,
    /// End of the reads of its open suspension: a read that arrives at the die
    /// by then joins that suspension (no second suspend, no second resume).
    open_until: Nanos,
}

/// The most programs and erases a die remembers apart; past that the last two
/// (the farthest ahead) are remembered as one.
const OPS_WINDOW: usize = 64;

/// A die's timeline.
///
/// Without suspension only `free` is used, exactly as before suspension existed:
/// every operation starts once all work booked on the die is done. With it,
/// reads are served first-come among themselves, ahead of programs and erases:
/// a read suspends the program or erase under way (or goes before one not yet
/// started) unless that one has served `max_suspends` reads already.
#[derive(Debug, Default)]
struct Die {
    /// When all work booked so far is done.
    free: Nanos,
    /// When the last booked read releases the die (its transfer is done).
    reads_end: Nanos,
    /// Programs and erases not yet done, in die order.
    ops: std::collections::VecDeque<LongOp>,
}

impl Die {
    /// Books a program or erase that starts at `start` and lasts `dur`; returns its end.
    fn push_long(&mut self, start: Nanos, dur: Nanos, suspend_ns: Nanos, now: Nanos) -> Nanos {
        self.prune(now);
        let end = start + dur;
        self.free = end;
        self.ops.push_back(LongOp {
            start,
            end,
            suspend_ns,
            preempted: 0,
            open_until: 0,
        });
        if self.ops.len() > OPS_WINDOW {
            // A read that suspends the merged operation pushes both, as the
            // cascade would have.
            if let Some(last) = self.ops.pop_back() {
                if let Some(prev) = self.ops.back_mut() {
                    prev.end = last.end;
                    prev.preempted = prev.preempted.max(last.preempted);
                }
            }
        }
        end
    }

    fn prune(&mut self, now: Nanos) {
        while self.ops.front().is_some_and(|o| o.end <= now) {
            self.ops.pop_front();
        }
    }

    /// Pushes operations after `i` that now overlap their predecessor.
    fn cascade(&mut self, i: usize) {
        for j in i + 1..self.ops.len() {
            let prev_end = self.ops[j - 1].end;
            let o = &mut self.ops[j];
            if o.start >= prev_end {
                break;
            }
            let d = prev_end - o.start;
            o.start += d;
            o.end += d;
        }
    }

    /// Books a read issued at `now` with suspension (`t.max_suspends` > 0): the
    /// array read, then its transfer of `xfer` on `bus`. Returns when the die is
    /// released (the transfer is done).
    fn read_suspending(
        &mut self,
        bus: &mut Bus,
        now: Nanos,
        t: &Timing,
        xfer: Nanos,
        suspends: &AtomicU64,
        moved: &mut Vec<Displaced>,
    ) -> Nanos {
        self.prune(now);
        let mut at = now.max(self.reads_end);
        let done = loop {
            let Some(i) = self.ops.iter().position(|o| o.end > at) else {
                // Nothing long under way or waiting: the die is free at `at`.
                break bus.reserve_read(at + t.read_ns, xfer, now, moved);
            };
            let o = self.ops[i];
            let capped = o.preempted >= t.max_suspends;
            if o.start >= at {
                // Not started yet: the read goes first if it fits before it, or
                // pushes it back, unless it has let enough reads by already.
                let fits = bus.read_peek(at + t.read_ns, xfer, now) <= o.start;
                if capped && !fits {
                    at = o.end;
                    continue;
                }
                let done = bus.reserve_read(at + t.read_ns, xfer, now, moved);
                if !fits {
                    let op = &mut self.ops[i];
                    op.preempted += 1;
                    op.end = done + (op.end - op.start);
                    op.start = done;
                    self.cascade(i);
                }
                break done;
            }
            if capped {
                at = o.end;
                continue;
            }
            // Under way: suspend it, or join its suspension if still open.
            let (read_at, lost) = if o.open_until == at {
                (at, 0)
            } else {
                suspends.fetch_add(1, Relaxed);
                (at + o.suspend_ns, t.resume_ns)
            };
            let done = bus.reserve_read(read_at + t.read_ns, xfer, now, moved);
            let op = &mut self.ops[i];
            op.preempted += 1;
            op.end += done - at + lost;
            op.open_until = done;
            self.cascade(i);
            break done;
        };
        self.reads_end = done;
        self.settle();
        done
    }

    fn settle(&mut self) {
        self.free = self
            .free
            .max(self.reads_end)
            .max(self.ops.back().map_or(0, |o| o.end));
    }

    /// A read moved the data transfer of a program on this die from ending at
    /// `old` to ending at `new`: the program starts no earlier than `new`.
    fn transfer_moved(&mut self, old: Nanos, new: Nanos) {
        if let Some(i) = self.ops.iter().position(|o| o.start >= old) {
            let o = &mut self.ops[i];
            if o.start < new {
                let d = new - o.start;
                o.start += d;
                o.end += d;
                self.cascade(i);
                self.settle();
            }
        }
    }
}

/// Per-channel state: the bus and die timelines, and each block's write pointer.
struct Channel {
    bus: Bus,
    dies: Vec<Die>,
    /// Next programmable page of each block on this channel.
    write_ptr: Vec<u32>,
    /// Blocks of this channel whose file bytes may still hold data of an
    /// earlier program (erased for reuse, or not known to be clean since the
    /// device was opened): [`FlashDevice::discard`] punches them.
    residue: Vec<bool>,
    /// Blocks whose erase [`FlashDevice::erase_for_reuse_later`] booked on
    /// their die but whose bytes are not erased yet.
    booked: Vec<bool>,
    /// Loans of this channel's pages ([`FlashDevice::lend_run`]) that may
    /// still be out, by block index: recalled before the block is erased.
    loans: Vec<(usize, Recall)>,
    /// Length of `loans` at which [`Channel::lend`] drops those returned:
    /// twice what was still out at the last pruning, so many loans held by
    /// clients that stopped reading cost a scan per doubling, not per loan.
    prune_at: usize,
}

/// Fewest listed loans that make a channel drop those returned.
const LOANS_PRUNE: usize = 64;

impl Channel {
    /// Lists a new loan on block `bi`.
    fn lend(&mut self, bi: usize, recall: Recall) {
        if self.loans.len() >= self.prune_at.max(LOANS_PRUNE) {
            self.prune_loans();
        }
        self.loans.push((bi, recall));
    }

    /// Drops the loans returned from the list.
    fn prune_loans(&mut self) {
        self.loans.retain(|(_, r)| r.is_out());
        self.prune_at = 2 * self.loans.len();
    }

    /// Recalls the loans still out on block `bi` (their bytes are copied
    /// into them), before its bytes change; drops the list's returned loans.
    fn recall_loans(&mut self, bi: usize) {
        if self.loans.is_empty() {
            return;
        }
        self.loans.retain(|(b, r)| {
            if *b == bi {
                r.recall();
                return false;
            }
            r.is_out()
        });
        self.prune_at = 2 * self.loans.len();
    }
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
    /// Reads that suspended a program or an erase (reads that joined a
    /// suspension already open are not counted again).
    #[serde(default)]
    pub suspends: u64,
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
    suspends: AtomicU64,
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
        timing.validate()?;
        let (store, _fresh) = Store::open(backend, geo)?;
        Ok(Self::with_store(store, geo, timing))
    }

    /// A device over `store`; write pointers rebuilt from its OOB records.
    fn with_store(store: Store, geo: Geometry, timing: Timing) -> Self {
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
            // Blocks erased for reuse before this open may hold old bytes: the
            // file says which (a fresh file none).
            let residue = (0..bpc as u32)
                .map(|i| store.holds_bytes(ch * bpc as u32 + i))
                .collect();
            channels.push(Mutex::new(Channel {
                bus: Bus {
                    horizon: timing.suspend_enabled(),
                    ..Bus::default()
                },
                dies: (0..geo.dies_per_channel).map(|_| Die::default()).collect(),
                write_ptr,
                residue,
                booked: vec![false; bpc],
                loans: Vec::new(),
                prune_at: 0,
            }));
        }
        Self {
            geo,
            timing,
            store,
            channels: channels.into_boxed_slice(),
            reads: AtomicU64::new(0),
            programs: AtomicU64::new(0),
            erases: AtomicU64::new(0),
            suspends: AtomicU64::new(0),
        }
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
        self.channels.get(channel as usize).map_or(0, |c| {
            c.lock().dies.iter().map(|d| d.free).max().unwrap_or(0)
        })
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
    /// returns the completion time (die read, then bus transfer). With suspension
    /// on, a read that finds its die programming or erasing suspends that
    /// operation (see [`Timing::max_suspends`]) instead of waiting for it.
    pub fn read(&self, p: PageId, offset: usize, buf: &mut [u8], now: Nanos) -> Result<Nanos> {
        let ps = self.geo.page_size as usize;
        if offset + buf.len() > ps {
            self.geo.check_page(p)?;
            return Err(FlashError::BadLength {
                expected: ps - offset.min(ps),
                got: buf.len(),
            });
        }
        self.read_run(p, offset, buf, now)
    }

    /// Reads `buf.len()` bytes starting `offset` bytes into page `first`, on
    /// across the pages that follow it in the same block: one copy out of the
    /// store and one channel lock for the run, where a loop of [`Self::read`]
    /// takes a lock and a copy per page (a 128 KiB request whose pages were
    /// written into one block side by side). Each page is booked as `read`
    /// books it, one after the other, all issued at `now`, so the completion
    /// time is the latest of the pages' and equals that loop's.
    pub fn read_run(
        &self,
        first: PageId,
        offset: usize,
        buf: &mut [u8],
        now: Nanos,
    ) -> Result<Nanos> {
        let len = buf.len();
        self.run_locked(first, offset, len, now, |_, _, src| {
            // SAFETY: `run_locked` checked the pages are in range and
            // programmed, and holds their channel's lock.
            unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), len) }
        })
        .map(|(done, ())| done)
    }

    /// Lends `len` bytes from `offset` bytes into page `first`, on across the
    /// pages that follow it in the same block, where [`Self::read_run`]
    /// would copy them, and books them as it does: a reply can then send the
    /// device's own memory ([`Loan`], no copy). The loan holds the bytes as
    /// they are now: an erase of the block recalls it first (copies the bytes
    /// into it), and programs never touch a programmed page.
    pub fn lend_run(
        self: &Arc<Self>,
        first: PageId,
        offset: usize,
        len: usize,
        now: Nanos,
    ) -> Result<(Nanos, Loan)> {
        self.run_locked(first, offset, len, now, |c, bi, src| {
            let keep: Arc<dyn Send + Sync> = self.clone();
            // SAFETY: the pages are programmed and mapped while `keep` holds
            // the device; they change only by an erase of the block, which
            // recalls the loan first, under this channel's lock
            // (`Channel::recall_loans`), where the loan is listed now.
            let (loan, recall) = unsafe { Loan::new(src, len, keep) };
            c.lend(bi, recall);
            loan
        })
    }

    /// The checks, the channel lock and the booking of [`Self::read_run`]
    /// and [`Self::lend_run`], around `f`, which is given the channel, the
    /// block's index on it and the address of the first byte.
    fn run_locked<T>(
        &self,
        first: PageId,
        offset: usize,
        len: usize,
        now: Nanos,
        f: impl FnOnce(&mut Channel, usize, *const u8) -> T,
    ) -> Result<(Nanos, T)> {
        self.geo.check_page(first)?;
        let ps = self.geo.page_size as usize;
        let (b, pg) = self.geo.split(first);
        let end = offset + len;
        let pages = end.div_ceil(ps).max(1) as u32;
        if offset >= ps || pg + pages > self.geo.pages_per_block {
            return Err(FlashError::BadLength {
                expected: (self.geo.pages_per_block - pg) as usize * ps - offset.min(ps),
                got: len,
            });
        }
        let (ch, die, bi) = self.locate(b);
        let mut c = self.channels[ch].lock();
        let written = c.write_ptr[bi];
        if pg + pages > written {
            return Err(FlashError::ReadErased {
                block: b,
                page: written.max(pg),
            });
        }
        // In range: `offset < ps` and the pages lie in one block.
        let src = self.store.page_ptr(first).wrapping_add(offset).cast_const();
        let c = &mut *c;
        let out = f(c, bi, src);
        let mut done = now;
        let mut at = offset;
        while at < end.max(offset + 1) {
            let n = (ps - at % ps).min(end - at);
            done = done.max(self.book_read(c, die, n as u64, now));
            at += n.max(1);
        }
        self.reads.fetch_add(u64::from(pages), Relaxed);
        Ok((done, out))
    }

    /// Books one page read of `len` bytes on `die` of channel `c`, issued at
    /// `now`: the array read, then the transfer. Returns when it is done.
    fn book_read(&self, c: &mut Channel, die: usize, len: u64, now: Nanos) -> Nanos {
        let xfer = self.timing.transfer_ns(len);
        if self.timing.suspend_enabled() {
            let mut moved = Vec::new();
            let done = c.dies[die].read_suspending(
                &mut c.bus,
                now,
                &self.timing,
                xfer,
                &self.suspends,
                &mut moved,
            );
            for (other, old, new) in moved {
                c.dies[other].transfer_moved(old, new);
            }
            done
        } else {
            let d = &mut c.dies[die];
            let sensed = now.max(d.free) + self.timing.read_ns;
            // The die holds the data in its register until the transfer is done.
            d.free = c.bus.reserve(sensed, xfer, now);
            d.free
        }
    }

    /// Programs page `p` with `data` (exactly one page) and its OOB record, issued at
    /// `now`; returns the completion time (bus transfer, then die program) as
    /// known now: reads that suspend the program later push its end out (the die
    /// stays busy longer; the returned time is not revised).
    pub fn program(&self, p: PageId, data: &[u8], oob: &Oob, now: Nanos) -> Result<Nanos> {
        self.program_run(p, &[data], std::slice::from_ref(oob))?;
        Ok(self.book_program(p, now))
    }

    /// Programs the bytes of consecutive pages of one block, `first` onwards,
    /// one per entry of `data` (each exactly one page) with the OOB record of
    /// the same index, in two writes to the store instead of two per page
    /// (see `Store::program_run`), but books no time: the caller books each
    /// page with [`FlashDevice::book_program`], in the order a controller
    /// would issue them (a request striped over several dies interleaves
    /// them, and the order decides who waits for the channel's bus).
    /// Nothing is programmed if any check fails (or the store's write does).
    pub fn program_run(&self, first: PageId, data: &[&[u8]], oobs: &[Oob]) -> Result<()> {
        assert_eq!(data.len(), oobs.len(), "one OOB record per page");
        if data.is_empty() {
            return Ok(());
        }
        let k = data.len() as u32;
        self.geo.check_page(first)?;
        let ps = self.geo.page_size as usize;
        if let Some(bad) = data.iter().find(|d| d.len() != ps) {
            return Err(FlashError::BadLength {
                expected: ps,
                got: bad.len(),
            });
        }
        let (b, pg) = self.geo.split(first);
        let (ch, _, bi) = self.locate(b);
        let mut c = self.channels[ch].lock();
        if c.booked[bi] {
            return Err(FlashError::EraseUnfinished { block: b });
        }
        let next = c.write_ptr[bi];
        if next + k > self.geo.pages_per_block {
            return Err(FlashError::BlockFull { block: b });
        }
        if pg != next {
            return Err(FlashError::ProgramOutOfOrder {
                block: b,
                page: pg,
                next,
            });
        }
        // Data first, then the OOB records: after a kill -9 a page whose record
        // is present is complete; after a host crash, see `Store::program_run`.
        // From here the file may hold bytes of the block, even if the program
        // fails part-way (the host file system out of space).
        c.residue[bi] |= self.store.crash_exposed();
        self.store.program_run(first, data, oobs)?;
        c.write_ptr[bi] = next + k;
        self.programs.fetch_add(u64::from(k), Relaxed);
        Ok(())
    }

    /// Books the program of page `p`, whose bytes [`FlashDevice::program_run`]
    /// wrote, issued at `now`: its bus transfer, then the die's program.
    /// Returns the completion time as [`FlashDevice::program`] does.
    pub fn book_program(&self, p: PageId, now: Nanos) -> Nanos {
        let (ch, die, _) = self.locate(self.geo.split(p).0);
        let mut c = self.channels[ch].lock();
        let c = &mut *c;
        let d = &mut c.dies[die];
        let ready = now.max(d.free);
        let xfer = self.timing.transfer_ns(u64::from(self.geo.page_size));
        if self.timing.suspend_enabled() {
            // Tagged with its die: a read may move it (reads get the bus first).
            let loaded = c.bus.reserve_tagged(ready, xfer, now, die as u32 + 1);
            d.push_long(
                loaded,
                self.timing.program_ns,
                self.timing.program_suspend_ns,
                now,
            )
        } else {
            let loaded = c.bus.reserve(ready, xfer, now);
            d.free = loaded + self.timing.program_ns;
            d.free
        }
    }

    /// Erases block `b` issued at `now` before it changes hands: OOB cleared,
    /// erase count + 1, and a file's bytes of the block discarded (hole
    /// punched). Returns the completion time as known now (reads that suspend
    /// the erase push it out later, as for [`FlashDevice::program`]).
    pub fn erase(&self, b: BlockId, now: Nanos) -> Result<Nanos> {
        self.erase_block(b, now, true)
    }

    /// Erases block `b` issued at `now` for its owner to program again
    /// (garbage collection): as [`FlashDevice::erase`], but a file keeps the
    /// block's bytes and its allocation, so the programs that follow allocate
    /// nothing in the host file system (see `Store::erase`). The old bytes
    /// are unreadable all the same.
    pub fn erase_for_reuse(&self, b: BlockId, now: Nanos) -> Result<Nanos> {
        self.erase_block(b, now, false)
    }

    /// Books GC's erase of block `b` on its die, issued at `now`, and returns
    /// its completion time as [`FlashDevice::erase_for_reuse`] does, but
    /// leaves the block's bytes, OOB records and erase count as they are
    /// until [`FlashDevice::finish_erase`]. For an owner whose copies of the
    /// block's pages (and whose newer versions of its stale pages) are not
    /// durable yet: a host crash could persist the erase and not them, and
    /// waiting for them here would cost a sync per erase. Programs into the
    /// block fail until the erase is finished; [`FlashDevice::erase`] (a
    /// hand-over) finishes it without booking the die again.
    pub fn erase_for_reuse_later(&self, b: BlockId, now: Nanos) -> Result<Nanos> {
        self.geo.check_block(b)?;
        let (ch, die, bi) = self.locate(b);
        let mut c = self.channels[ch].lock();
        c.booked[bi] = true;
        Ok(self.book_erase(&mut c.dies[die], now))
    }

    /// Erases the bytes of block `b` whose erase
    /// [`FlashDevice::erase_for_reuse_later`] booked (OOB cleared, erase
    /// count + 1, a file keeps the bytes), with no modelled time: the die
    /// paid when it was booked. Returns false, doing nothing, for a block
    /// with no booked erase (finished already, or erased since).
    pub fn finish_erase(&self, b: BlockId) -> Result<bool> {
        self.geo.check_block(b)?;
        let (ch, _, bi) = self.locate(b);
        let mut c = self.channels[ch].lock();
        if !c.booked[bi] {
            return Ok(false);
        }
        c.recall_loans(bi);
        self.store.erase(b, false)?;
        c.write_ptr[bi] = 0;
        c.residue[bi] = self.store.crash_exposed();
        c.booked[bi] = false;
        Ok(true)
    }

    /// Whether block `b` has an erase booked and not finished (see
    /// [`FlashDevice::erase_for_reuse_later`]).
    pub fn erase_pending(&self, b: BlockId) -> bool {
        let (ch, _, bi) = self.locate(b);
        self.channels[ch].lock().booked[bi]
    }

    fn erase_block(&self, b: BlockId, now: Nanos, discard: bool) -> Result<Nanos> {
        self.geo.check_block(b)?;
        let (ch, die, bi) = self.locate(b);
        let mut c = self.channels[ch].lock();
        c.recall_loans(bi);
        self.store.erase(b, discard)?;
        c.write_ptr[bi] = 0;
        c.residue[bi] = !discard && self.store.crash_exposed();
        if std::mem::take(&mut c.booked[bi]) {
            // Its die time was booked with the erase.
            return Ok(now);
        }
        Ok(self.book_erase(&mut c.dies[die], now))
    }

    /// Books an erase on die `d` issued at `now`; returns its completion.
    fn book_erase(&self, d: &mut Die, now: Nanos) -> Nanos {
        let start = now.max(d.free);
        let done = if self.timing.suspend_enabled() {
            d.push_long(
                start,
                self.timing.erase_ns,
                self.timing.erase_suspend_ns,
                now,
            )
        } else {
            d.free = start + self.timing.erase_ns;
            d.free
        };
        self.erases.fetch_add(1, Relaxed);
        done
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

    /// The OOB record of page `p` if it is programmed with a valid record
    /// *and* its data is the data the record was written with: `None` for a
    /// page a host crash tore (record persisted, data not; see
    /// [`Oob::encode_checked`]). Reads the page's data: recovery's check.
    pub fn oob_intact(&self, p: PageId) -> Option<Oob> {
        if p >= self.geo.total_pages() {
            return None;
        }
        let (b, _) = self.geo.split(p);
        let (ch, _, _) = self.locate(b);
        let _c = self.channels[ch].lock();
        let oob = Oob::decode(self.store.oob(p))?;
        self.store.intact(p).then_some(oob)
    }

    /// Whether the device's bytes can outlive a host crash (a file, or a
    /// device recording crash states): then write ordering matters (what
    /// must be durable before what), and FTLs pay for it; on a memory device
    /// it does not.
    pub fn crash_exposed(&self) -> bool {
        self.store.crash_exposed()
    }

    /// Starts recording what a host crash could leave of the device (see
    /// [`crate::crashrec`]): the bytes now are taken as durable, and every
    /// later program, erase and sync is logged. For tests; idempotent.
    pub fn record_crashes(&self) {
        self.store.record();
    }

    /// The crash point now: the durable image and the writes since (`None`
    /// unless [`FlashDevice::record_crashes`] was called).
    pub fn crash_point(&self) -> Option<CrashPoint> {
        self.store.crash_point()
    }

    /// A memory device holding a crash state, with its write pointers
    /// rebuilt from the OOB records as [`FlashDevice::open`] does.
    pub fn from_crash_image(geo: Geometry, timing: Timing, img: &CrashImage) -> Result<Self> {
        geo.validate()?;
        timing.validate()?;
        let store = Store::from_image(geo, img)?;
        Ok(Self::with_store(store, geo, timing))
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

    /// Discards a file's bytes of erased block `b` (hole punched), as
    /// [`FlashDevice::erase`] does: for a block [`FlashDevice::erase_for_reuse`]
    /// left holding its owner's old bytes, before it changes hands. A no-op
    /// for a block known to hold none, and on the memory backend. Takes no
    /// modelled time (it is the host file, not the flash). Errors: the block
    /// holds programmed pages ([`FlashError::NotErased`]).
    pub fn discard(&self, b: BlockId) -> Result<()> {
        self.geo.check_block(b)?;
        let (ch, _, bi) = self.locate(b);
        let mut c = self.channels[ch].lock();
        if c.write_ptr[bi] > 0 {
            return Err(FlashError::NotErased { block: b });
        }
        if c.residue[bi] {
            self.store.discard(b)?;
            c.residue[bi] = false;
        }
        Ok(())
    }

    /// Readies block `b` to change hands (a vSSD created, destroyed, lending or
    /// taking back): a block holding pages is erased as [`FlashDevice::erase`]
    /// does, issued at `now`, and its completion returned; an erased one only
    /// loses the bytes an erase for reuse left in the file
    /// ([`FlashDevice::discard`]), and `None` is returned (no erase happened).
    pub fn erase_to_hand_over(&self, b: BlockId, now: Nanos) -> Result<Option<Nanos>> {
        if self.write_ptr(b) > 0 || self.erase_pending(b) {
            return self.erase(b, now).map(Some);
        }
        self.discard(b).map(|()| None)
    }

    /// Whether the host file holds any bytes of block `b` (allocated, not a
    /// hole); always false on the memory backend.
    pub fn holds_bytes(&self, b: BlockId) -> Result<bool> {
        self.geo.check_block(b)?;
        let (ch, _, _) = self.locate(b);
        let _c = self.channels[ch].lock();
        Ok(self.store.holds_bytes(b))
    }

    /// Makes everything programmed so far durable (msync for the file backend).
    pub fn sync(&self) -> Result<()> {
        self.store.sync()
    }

    /// Makes the erases of `blocks` durable: their OOB records and erase
    /// counts, and nothing of the page data. Takes no lock.
    pub fn sync_erases(&self, blocks: &[BlockId]) -> Result<()> {
        for &b in blocks {
            self.geo.check_block(b)?;
        }
        self.store.sync_erases(blocks)
    }

    /// Makes durable the pages programmed and the blocks erased that `dirty`
    /// records (one tenant's changes): their data, OOB records and erase
    /// counts. `own` names the block runs the tenant holds alone (its dirty
    /// blocks in one run are written back as one span; `OwnRuns::default()`
    /// syncs block by block); of other tenants, at most the OS pages the set
    /// shares with them are written back. Takes no lock; the caller holds
    /// none either.
    pub fn sync_dirty(&self, dirty: &DirtySet, own: &OwnRuns) -> Result<()> {
        self.store.sync_dirty(dirty, own)
    }

    /// Operation counters since open.
    pub fn stats(&self) -> DeviceStats {
        DeviceStats {
            page_reads: self.reads.load(Relaxed),
            page_programs: self.programs.load(Relaxed),
            block_erases: self.erases.load(Relaxed),
            suspends: self.suspends.load(Relaxed),
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

    /// Bytes of the data file's range `[off, off + len)` the file system has
    /// allocated, from SEEK_DATA/SEEK_HOLE.
    fn allocated(path: &std::path::Path, off: u64, len: u64) -> u64 {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(path).unwrap();
        let fd = f.as_raw_fd();
        let (mut pos, end, mut got) = (off, off + len, 0);
        while pos < end {
            // SAFETY: lseek on our own descriptor.
            let d = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
            if d < 0 || d as u64 >= end {
                break;
            }
            // SAFETY: as above.
            let h = unsafe { libc::lseek(fd, d as libc::off_t, libc::SEEK_HOLE) } as u64;
            got += h.min(end) - d as u64;
            pos = h;
        }
        got
    }

    /// An erase for reuse keeps the block allocated in the file (its old
    /// bytes unreadable all the same); a discard, or an erase before the
    /// block changes hands, punches them out; a block that holds pages
    /// cannot be discarded.
    #[test]
    fn an_erase_for_reuse_keeps_the_file_allocated_and_a_discard_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let g = small();
        let f =
            FlashDevice::open(&Backend::File { path: path.clone() }, g, Timing::default()).unwrap();
        let bytes = g.block_bytes();
        for p in 0..g.pages_per_block {
            f.program(u64::from(p), &vec![0xAB; 4096], &rec(u64::from(p), 1), 0)
                .unwrap();
        }
        f.sync().unwrap();
        assert_eq!(allocated(&path, 0, bytes), bytes);
        assert!(matches!(
            f.discard(0),
            Err(FlashError::NotErased { block: 0 })
        ));
        f.erase_for_reuse(0, 0).unwrap();
        assert_eq!(
            allocated(&path, 0, bytes),
            bytes,
            "reuse keeps the allocation"
        );
        assert_eq!(f.erase_count(0), 1);
        let mut buf = vec![0u8; 4096];
        assert!(matches!(
            f.read(0, 0, &mut buf, 0),
            Err(FlashError::ReadErased { .. })
        ));
        assert_eq!(f.oob(0), None);
        f.discard(0).unwrap();
        assert_eq!(allocated(&path, 0, bytes), 0, "a discard punches the block");
        assert!(std::fs::read(&path).unwrap()[..bytes as usize]
            .iter()
            .all(|&x| x == 0));
        // Programmed again after a discard, and erased to change hands.
        f.program(0, &vec![0xCD; 4096], &rec(0, 2), 0).unwrap();
        f.erase(0, 0).unwrap();
        assert_eq!(allocated(&path, 0, bytes), 0);
        assert_eq!(f.erase_count(0), 2);
        // Reopened, a block is not known to be clean: a discard punches it.
        drop(f);
        let f =
            FlashDevice::open(&Backend::File { path: path.clone() }, g, Timing::default()).unwrap();
        f.discard(1).unwrap();
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
    fn reads_queue_behind_programs_on_the_same_die_only_without_suspend() {
        let t = Timing {
            read_ns: 50_000,
            program_ns: 1_000_000,
            erase_ns: 3_000_000,
            channel_mbps: 400,
            ..Timing::default().without_suspend()
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

    /// A run read returns the bytes, the completion time and the page count
    /// of the page-by-page reads it replaces, with programs under way on the
    /// die (suspended by the reads, or not), and refuses a run past its
    /// block's end or into pages not programmed yet.
    #[test]
    fn a_run_reads_what_its_pages_would() {
        let g = small();
        for timing in [Timing::default(), Timing::default().without_suspend()] {
            let (a, b) = (
                FlashDevice::memory(g, timing).unwrap(),
                FlashDevice::memory(g, timing).unwrap(),
            );
            let page = |i: u32| vec![i as u8 ^ 0x5a; 4096];
            // Six of block 0's eight pages, all issued at 0: the die is
            // still programming them while the reads below arrive.
            for d in [&a, &b] {
                for i in 0..6 {
                    d.program(
                        u64::from(i),
                        &page(i),
                        &rec(u64::from(i), u64::from(i) + 1),
                        0,
                    )
                    .unwrap();
                }
            }
            // Reads issued while the programs are still under way, at a few
            // offsets and lengths across pages.
            for (k, (off, len)) in [
                (0, 4096),
                (100, 8192),
                (4000, 4096 * 3),
                (0, 6 * 4096),
                (17, 5 * 4096 - 17),
            ]
            .into_iter()
            .enumerate()
            {
                let now = 150_000 * k as u64;
                let mut run = vec![0u8; len];
                let ta = a.read_run(0, off, &mut run, now).unwrap();
                let mut pages = vec![0u8; len];
                let mut tb = now;
                let (mut pos, mut at) = (0usize, off);
                while pos < len {
                    let n = (4096 - at % 4096).min(len - pos);
                    let p = (at / 4096) as u64;
                    tb = tb.max(b.read(p, at % 4096, &mut pages[pos..pos + n], now).unwrap());
                    pos += n;
                    at += n;
                }
                assert_eq!(run, pages, "bytes of {len} at {off}");
                assert_eq!(ta, tb, "completion of {len} at {off}");
                assert_eq!(a.stats(), b.stats(), "counters after {len} at {off}");
            }
            let mut buf = vec![0u8; 3 * 4096];
            assert!(
                matches!(
                    a.read_run(4, 0, &mut buf, 0),
                    Err(FlashError::ReadErased { block: 0, page: 6 })
                ),
                "pages 6 and 7 are erased"
            );
            let mut long = vec![0u8; 9 * 4096];
            assert!(
                matches!(
                    a.read_run(0, 0, &mut long, 0),
                    Err(FlashError::BadLength { .. })
                ),
                "a run does not leave its block"
            );
            assert!(matches!(
                a.read_run(g.total_pages(), 0, &mut buf, 0),
                Err(FlashError::OutOfRange { .. })
            ));
        }
    }

    /// A lent run holds what `read_run` reads, booked the same; an erase of
    /// its block, on either backend and by each way of erasing, recalls it
    /// first, so it keeps its bytes while the block is erased (a file's hole
    /// punched) and programmed again. Loans returned are dropped from the
    /// channel's list.
    #[test]
    fn a_loan_keeps_its_bytes_through_an_erase_and_a_new_program() {
        let dir = tempfile::tempdir().unwrap();
        let g = small();
        let page = |i: u32, v: u8| vec![i as u8 ^ v; 4096];
        for k in 0..2 {
            for erase in 0..3 {
                let backend = match k {
                    0 => Backend::Memory,
                    _ => Backend::File {
                        path: dir.path().join(format!("lend{erase}")),
                    },
                };
                let d = Arc::new(FlashDevice::open(&backend, g, Timing::default()).unwrap());
                let twin = FlashDevice::memory(g, Timing::default()).unwrap();
                for i in 0..6 {
                    for dev in [&*d, &twin] {
                        let r = &rec(u64::from(i), u64::from(i) + 1);
                        dev.program(u64::from(i), &page(i, 0x5a), r, 0).unwrap();
                    }
                }
                let (t, loan) = d.lend_run(1, 100, 3 * 4096, 500_000).unwrap();
                let mut want = vec![0u8; 3 * 4096];
                let tt = twin.read_run(1, 100, &mut want, 500_000).unwrap();
                assert_eq!((t, &*loan.bytes()), (tt, &want[..]));
                assert_eq!(d.stats(), twin.stats(), "booked and counted as a read");
                let (_, gone) = d.lend_run(0, 0, 4096, 0).unwrap();
                drop(gone);
                match erase {
                    0 => {
                        d.erase(0, 1_000_000).unwrap();
                    }
                    1 => {
                        d.erase_for_reuse(0, 1_000_000).unwrap();
                    }
                    _ => {
                        d.erase_for_reuse_later(0, 1_000_000).unwrap();
                        assert!(!loan.recalled(), "a booked erase changes no byte");
                        assert!(d.finish_erase(0).unwrap());
                    }
                }
                assert!(loan.recalled(), "backend {k}, erase {erase}");
                for i in 0..8 {
                    d.program(u64::from(i), &page(i, 0xc3), &rec(9, 9), 2_000_000)
                        .unwrap();
                }
                assert_eq!(&*loan.bytes(), &want[..], "backend {k}, erase {erase}");
                let ch = d.channels[0].lock();
                assert!(
                    ch.loans.is_empty(),
                    "the recalled and the returned loan left the list"
                );
            }
        }
    }

    /// A run of pages is programmed as page-by-page programs would: the same
    /// bytes and OOB records (after a reopen, as a kill -9 leaves them) and
    /// the same timing. A run that does not fit its block, starts elsewhere
    /// than the write pointer, or holds a short page programs nothing.
    #[test]
    fn a_run_programs_what_its_pages_would() {
        let dir = tempfile::tempdir().unwrap();
        let g = small();
        let backends = [
            Backend::File {
                path: dir.path().join("run"),
            },
            Backend::File {
                path: dir.path().join("one"),
            },
        ];
        let page = |p: u64| vec![p as u8 ^ 0x5a; 4096];
        let (mut t_run, mut t_one) = (0, 0);
        {
            let run = FlashDevice::open(&backends[0], g, Timing::default()).unwrap();
            let one = FlashDevice::open(&backends[1], g, Timing::default()).unwrap();
            let first = g.first_page(1);
            let pages: Vec<Vec<u8>> = (0..6).map(|i| page(first + i)).collect();
            let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
            let oobs: Vec<Oob> = (0..6).map(|i| rec(40 + i, 100 + i)).collect();
            // Refused, and nothing programmed: too long, out of order, short page.
            let nine: Vec<&[u8]> = vec![&pages[0]; 9];
            let nine_oobs = vec![rec(1, 1); 9];
            assert!(matches!(
                run.program_run(first, &nine, &nine_oobs),
                Err(FlashError::BlockFull { .. })
            ));
            assert!(matches!(
                run.program_run(first + 1, &refs, &oobs),
                Err(FlashError::ProgramOutOfOrder { .. })
            ));
            let short = [&pages[0][..], &pages[1][..100]];
            assert!(matches!(
                run.program_run(first, &short, &oobs[..2]),
                Err(FlashError::BadLength { .. })
            ));
            assert_eq!(run.write_ptr(1), 0);
            assert!(run.oob(first).is_none());
            run.program_run(first, &refs, &oobs).unwrap();
            for i in 0..6u64 {
                t_run = t_run.max(run.book_program(first + i, 1_000));
                t_one = t_one.max(
                    one.program(first + i, &pages[i as usize], &oobs[i as usize], 1_000)
                        .unwrap(),
                );
            }
            assert_eq!(run.write_ptr(1), 6);
            // The next run starts at the write pointer and may fill the block.
            run.program_run(first + 6, &refs[..2], &oobs[..2]).unwrap();
            one.program(first + 6, &pages[0], &oobs[0], 1_000).unwrap();
            one.program(first + 7, &pages[1], &oobs[1], 1_000).unwrap();
            assert_eq!(run.write_ptr(1), 8);
            assert_eq!(run.stats().page_programs, one.stats().page_programs);
        }
        assert_eq!(t_run, t_one, "same timing");
        let run = FlashDevice::open(&backends[0], g, Timing::default()).unwrap();
        let one = FlashDevice::open(&backends[1], g, Timing::default()).unwrap();
        assert_eq!(run.write_ptr(1), 8);
        let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
        for p in g.first_page(1)..g.first_page(2) {
            run.read(p, 0, &mut a, 0).unwrap();
            one.read(p, 0, &mut b, 0).unwrap();
            assert_eq!(a, b, "page {p}");
            assert_eq!(run.oob_intact(p), one.oob_intact(p), "OOB of page {p}");
            assert!(run.oob_intact(p).is_some());
        }
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

    /// A host file system that runs out of space fails the program with an
    /// I/O error, and the device stays usable: the page is not counted as
    /// programmed, and what was programmed before reads back. (Stores through
    /// the shared mapping got SIGBUS instead, which killed the daemon.) Needs
    /// root, for a small tmpfs to fill.
    #[test]
    fn a_full_host_file_system_fails_the_program_not_the_process() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to mount a small tmpfs");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "flexssd-test"])
            .arg(&mnt)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "root could not mount a tmpfs");
        struct Unmount(std::path::PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
            }
        }
        let _u = Unmount(mnt.clone());
        let g = Geometry {
            blocks_per_plane: 16,
            pages_per_block: 64,
            ..small()
        };
        // 16 MiB of sparse flash on 256 KiB of file system.
        let d = FlashDevice::open(
            &Backend::File {
                path: mnt.join("dev"),
            },
            g,
            Timing::default(),
        )
        .unwrap();
        let mut failed = None;
        for p in 0..g.total_pages() {
            match d.program(p, &vec![p as u8 | 1; 4096], &rec(p, p + 1), 0) {
                Ok(_) => {}
                Err(e) => {
                    failed = Some((p, e));
                    break;
                }
            }
        }
        let (p, e) = failed.expect("programs beyond the file system's size succeeded");
        assert!(matches!(e, FlashError::Io(_)), "{e}");
        assert!(p > 0, "not even one page fit");
        assert_eq!(
            d.write_ptr(g.split(p).0),
            g.split(p).1,
            "the failed page counts as programmed"
        );
        let mut buf = vec![0u8; 4096];
        d.read(p - 1, 0, &mut buf, 0).unwrap();
        assert!(buf.iter().all(|&x| x == (p - 1) as u8 | 1));
    }

    /// A block's first program allocates the whole block in the data file
    /// (zeros over its holes), so the programs after it allocate nothing and
    /// their syncs need no file-system commit; its other bytes, and other
    /// blocks, are untouched, and the pages read what was programmed. (On a
    /// copy-on-write host file system, no fill: only the bytes written.)
    #[test]
    fn a_blocks_first_program_allocates_the_whole_block_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev");
        let g = small();
        let d =
            FlashDevice::open(&Backend::File { path: path.clone() }, g, Timing::default()).unwrap();
        let bb = g.block_bytes();
        let holes = |start: u64, end: u64| (end - start) - allocated(&path, start, end - start);
        assert_eq!(holes(0, g.total_bytes()), g.total_bytes());
        // Block 1 already holds bytes in its middle (an older release wrote
        // page by page; the fill must keep them).
        let b = 1;
        let mid = g.first_page(b) + 3;
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all_at(&[9u8; 4096], mid * 4096).unwrap();
        }
        d.program(g.first_page(b), &[5u8; 4096], &rec(0, 1), 0)
            .unwrap();
        let cow = crate::store::copy_on_write(&std::fs::File::open(&path).unwrap());
        if cow {
            // Copy-on-write file systems get no fill: only what was written.
            assert_eq!(holes(bb, 2 * bb), bb - 2 * 4096, "copy-on-write: no fill");
            return;
        }
        assert_eq!(holes(bb, 2 * bb), 0, "block 1 fully allocated");
        assert_eq!(holes(0, bb), bb, "block 0 untouched");
        assert_eq!(holes(2 * bb, g.total_bytes()), g.total_bytes() - 2 * bb);
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::File::open(&path).unwrap();
            let mut buf = vec![0u8; 4096];
            f.read_exact_at(&mut buf, mid * 4096).unwrap();
            assert!(buf.iter().all(|&x| x == 9), "bytes already there were kept");
            f.read_exact_at(&mut buf, (g.first_page(b) + 1) * 4096)
                .unwrap();
            assert!(buf.iter().all(|&x| x == 0), "holes read as zeros");
        }
        for p in 1..g.pages_per_block as u64 {
            d.program(g.first_page(b) + p, &[p as u8; 4096], &rec(p, p + 1), 0)
                .unwrap();
        }
        let mut buf = vec![0u8; 4096];
        d.read(g.first_page(b), 0, &mut buf, 0).unwrap();
        assert!(buf.iter().all(|&x| x == 5));
        for p in 1..g.pages_per_block as u64 {
            d.read(g.first_page(b) + p, 0, &mut buf, 0).unwrap();
            assert!(buf.iter().all(|&x| x == p as u8));
        }
    }

    /// A file-backed page whose record reached the disk but whose data did
    /// not (a host crash) reads as torn: `oob` still decodes the record, but
    /// `oob_intact` refuses it. Memory devices keep records without a check.
    #[test]
    fn a_torn_page_of_a_file_device_fails_its_data_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev");
        let backend = Backend::File { path: path.clone() };
        let g = small();
        {
            let d = FlashDevice::open(&backend, g, Timing::default()).unwrap();
            d.program(0, &[7u8; 4096], &rec(0, 1), 0).unwrap();
            d.program(1, &[8u8; 4096], &rec(1, 2), 0).unwrap();
            d.sync().unwrap();
        }
        // The data of page 1 never made it to the disk.
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0u8; 4096], 4096).unwrap();
        let d = FlashDevice::open(&backend, g, Timing::default()).unwrap();
        assert_eq!(d.write_ptr(0), 2);
        assert_eq!(d.oob_intact(0), Some(rec(0, 1)));
        assert_eq!(d.oob(1), Some(rec(1, 2)));
        assert_eq!(d.oob_intact(1), None);
        let m = FlashDevice::memory(g, Timing::default()).unwrap();
        m.program(0, &[7u8; 4096], &rec(0, 1), 0).unwrap();
        assert_eq!(m.oob_intact(0), Some(rec(0, 1)));
        assert!(!m.crash_exposed() && d.crash_exposed());
    }

    /// Channel 0 die 0 holds blocks 0..4; `setup` programs page 0 of block 0
    /// (to be read) and lets everything finish by `T0`.
    const T0: Nanos = 10_000_000;

    fn setup(t: Timing) -> FlashDevice {
        let d = FlashDevice::memory(small(), t).unwrap();
        d.program(0, &[5u8; 4096], &rec(0, 1), 0).unwrap();
        assert!(d.channel_busy_until(0) < T0);
        d
    }

    #[test]
    fn a_read_mid_program_suspends_it() {
        let t = Timing::default();
        let d = setup(t);
        let xfer = t.transfer_ns(4096);
        let prog_end = d.program(1, &[6u8; 4096], &rec(1, 2), T0).unwrap();
        assert_eq!(prog_end, T0 + xfer + t.program_ns);
        let at = T0 + 100_000; // mid-program
        let mut buf = vec![0u8; 4096];
        let done = d.read(0, 0, &mut buf, at).unwrap();
        assert_eq!(buf, vec![5u8; 4096]);
        assert_eq!(
            done,
            at + t.program_suspend_ns + t.read_ns + xfer,
            "read + suspend latency + transfer, not the program's remaining {} ns",
            prog_end - at
        );
        assert_eq!(
            d.channel_busy_until(0),
            prog_end + (done - at) + t.resume_ns,
            "the program is pushed out by the suspension and the resume overhead"
        );
        assert_eq!(d.stats().suspends, 1);
        // Without suspension the same read waits for the whole program.
        let d = setup(t.without_suspend());
        d.program(1, &[6u8; 4096], &rec(1, 2), T0).unwrap();
        let waited = d.read(0, 0, &mut buf, at).unwrap();
        assert_eq!(waited, prog_end + t.read_ns + xfer);
        assert_eq!(d.stats().suspends, 0);
    }

    /// Suspends the long operation under way on die 0 of channel 0 `max_suspends`
    /// times, each read after the previous suspension closed; checks each read's
    /// latency and the operation's end, then that one more read waits for it.
    fn suspend_to_the_cap(t: Timing, d: &FlashDevice, mut end: Nanos, suspend_ns: Nanos) {
        let xfer = t.transfer_ns(4096);
        let mut buf = vec![0u8; 4096];
        let mut at = T0 + 50_000;
        for i in 0..t.max_suspends {
            let done = d.read(0, 0, &mut buf, at).unwrap();
            assert_eq!(done, at + suspend_ns + t.read_ns + xfer, "suspension {i}");
            end += done - at + t.resume_ns;
            assert_eq!(d.channel_busy_until(0), end, "suspension {i}");
            at = done + t.resume_ns + 1_000;
            assert!(at < end, "still under way");
        }
        assert_eq!(d.stats().suspends, u64::from(t.max_suspends));
        // Capped: the next read waits for the operation, which completes at the
        // end pushed out by every suspended read and resume overhead.
        let done = d.read(0, 0, &mut buf, at).unwrap();
        assert_eq!(done, end + t.read_ns + xfer);
        assert_eq!(d.stats().suspends, u64::from(t.max_suspends));
    }

    #[test]
    fn a_program_suspended_the_most_times_still_completes() {
        let t = Timing {
            max_suspends: 3,
            ..Timing::default()
        };
        let d = setup(t);
        let end = d.program(1, &[6u8; 4096], &rec(1, 2), T0).unwrap();
        suspend_to_the_cap(t, &d, end, t.program_suspend_ns);
        // The die takes new work after it: a program issued now starts after.
        let busy = d.channel_busy_until(0);
        let next = d.program(2, &[7u8; 4096], &rec(2, 3), T0).unwrap();
        assert!(next >= busy + t.program_ns);
    }

    #[test]
    fn an_erase_suspended_the_most_times_still_completes() {
        let t = Timing {
            max_suspends: 4,
            ..Timing::default()
        };
        let d = setup(t);
        let b = 1; // same die as block 0
        d.program(small().first_page(b), &[1u8; 4096], &rec(9, 9), 0)
            .unwrap();
        let end = d.erase(b, T0).unwrap();
        assert_eq!(end, T0 + t.erase_ns);
        suspend_to_the_cap(t, &d, end, t.erase_suspend_ns);
    }

    #[test]
    fn reads_arriving_during_a_suspension_join_it() {
        let t = Timing::default();
        let d = setup(t);
        let xfer = t.transfer_ns(4096);
        let prog_end = d.program(1, &[6u8; 4096], &rec(1, 2), T0).unwrap();
        let at = T0 + 100_000;
        let mut buf = vec![0u8; 4096];
        let first = d.read(0, 0, &mut buf, at).unwrap();
        // The second read arrives while the first is still being served.
        let second = d.read(0, 0, &mut buf, at + 1_000).unwrap();
        assert_eq!(
            second,
            first + t.read_ns + xfer,
            "no second suspend latency"
        );
        assert_eq!(d.stats().suspends, 1);
        assert_eq!(
            d.channel_busy_until(0),
            prog_end + (second - at) + t.resume_ns,
            "one resume overhead for the whole suspension"
        );
    }

    #[test]
    fn a_read_goes_before_programs_queued_behind_the_one_under_way() {
        let t = Timing::default();
        let d = setup(t);
        let xfer = t.transfer_ns(4096);
        let first = d.program(1, &[6u8; 4096], &rec(1, 2), T0).unwrap();
        let second = d.program(2, &[6u8; 4096], &rec(2, 3), T0).unwrap();
        assert!(second >= first + t.program_ns);
        let at = T0 + 100_000;
        let mut buf = vec![0u8; 4096];
        let done = d.read(0, 0, &mut buf, at).unwrap();
        assert_eq!(done, at + t.program_suspend_ns + t.read_ns + xfer);
        let pushed = done - at + t.resume_ns;
        // The second program's data moved in the gap before it starts, which
        // absorbs that much of the push.
        assert_eq!(
            d.channel_busy_until(0),
            second + pushed - xfer,
            "both programs move"
        );
        // Other dies are untouched.
        assert_eq!(d.channel_busy_until(1), 0);
    }

    /// The die and bus timelines exactly as they were before suspension existed:
    /// the reference for the suspend-off property below.
    #[derive(Default)]
    struct Reference {
        die_free: std::collections::HashMap<(u32, u32), Nanos>,
        bus_floor: std::collections::HashMap<u32, Nanos>,
        bus: std::collections::HashMap<u32, std::collections::VecDeque<(Nanos, Nanos)>>,
    }

    impl Reference {
        fn reserve(&mut self, ch: u32, ready: Nanos, dur: Nanos, now: Nanos) -> Nanos {
            let floor = self.bus_floor.entry(ch).or_default();
            let busy = self.bus.entry(ch).or_default();
            while busy.front().is_some_and(|&(_, e)| e <= now) {
                busy.pop_front();
            }
            let mut t = ready.max(*floor);
            if busy.back().is_none_or(|&(_, e)| e <= t) {
                busy.push_back((t, t + dur));
                if busy.len() > BUS_WINDOW {
                    if let Some((_, e)) = busy.pop_front() {
                        *floor = (*floor).max(e);
                    }
                }
                return t + dur;
            }
            let mut idx = busy.len();
            for (i, &(s, e)) in busy.iter().enumerate() {
                if t + dur <= s {
                    idx = i;
                    break;
                }
                t = t.max(e);
            }
            busy.insert(idx, (t, t + dur));
            if busy.len() > BUS_WINDOW {
                if let Some((_, e)) = busy.pop_front() {
                    *floor = (*floor).max(e);
                }
            }
            t + dur
        }

        fn read(&mut self, t: &Timing, ch: u32, die: u32, len: u64, now: Nanos) -> Nanos {
            let free = *self.die_free.entry((ch, die)).or_default();
            let sensed = now.max(free) + t.read_ns;
            let done = self.reserve(ch, sensed, t.transfer_ns(len), now);
            self.die_free.insert((ch, die), done);
            done
        }

        fn program(&mut self, t: &Timing, ch: u32, die: u32, len: u64, now: Nanos) -> Nanos {
            let free = *self.die_free.entry((ch, die)).or_default();
            let loaded = self.reserve(ch, now.max(free), t.transfer_ns(len), now);
            self.die_free.insert((ch, die), loaded + t.program_ns);
            loaded + t.program_ns
        }

        fn erase(&mut self, t: &Timing, ch: u32, die: u32, now: Nanos) -> Nanos {
            let free = *self.die_free.entry((ch, die)).or_default();
            let done = now.max(free) + t.erase_ns;
            self.die_free.insert((ch, die), done);
            done
        }
    }

    /// Fast mode: the clock stands still while the timelines run far ahead,
    /// so thousands of programs queue on each die and the windows merge. Every
    /// completion stays within the serial bound (all work one after another,
    /// plus each read's suspend latency and resume overhead): no timeline grows
    /// faster than the work booked on it.
    #[test]
    fn suspension_stays_linear_when_the_clock_lags() {
        let g = Geometry {
            channels: 1,
            dies_per_channel: 2,
            planes_per_die: 1,
            blocks_per_plane: 64,
            pages_per_block: 64,
            page_size: 4096,
        };
        let t = Timing::default();
        let xfer = t.transfer_ns(4096);
        let mut buf = vec![0u8; 4096];
        // A clock that stands still, and one that runs at a tenth of the work.
        for tick in [0, 40_000] {
            let d = FlashDevice::memory(g, t).unwrap();
            let (mut now, mut serial, mut latest) = (0, 0, 0);
            let mut rng = rng::SplitMix64::new(7);
            for i in 0..40_000u64 {
                now += tick;
                let die = rng.below(2) as u32;
                let b = g.block_id(0, die, 0, rng.below(64) as u32);
                let wp = d.write_ptr(b);
                let done = if rng.below(3) == 0 && wp > 0 {
                    serial += t.erase_suspend_ns + t.resume_ns + t.read_ns + xfer;
                    d.read(g.first_page(b), 0, &mut buf, now).unwrap()
                } else if wp == g.pages_per_block {
                    serial += t.erase_ns;
                    d.erase(b, now).unwrap()
                } else {
                    serial += t.program_ns + xfer;
                    let p = g.first_page(b) + u64::from(wp);
                    d.program(p, &buf, &rec(0, i + 1), now).unwrap()
                };
                latest = latest.max(done);
                assert!(
                    latest <= serial.max(now) + t.erase_ns,
                    "tick {tick}, op {i}: {latest} > serial bound {serial}"
                );
            }
            // With the clock standing still no program is ever under way when
            // a read arrives (reads go before them instead); with it running,
            // reads suspend some.
            assert_eq!(d.stats().suspends > 0, tick > 0, "tick {tick}");
        }
    }

    /// The read booking as it was before the one-pass fast path: the slot,
    /// then the general placement.
    fn reserve_read_three_passes(
        b: &mut Bus,
        ready: Nanos,
        dur: Nanos,
        now: Nanos,
        moved: &mut Vec<Displaced>,
    ) -> Nanos {
        let t = b.read_slot(ready, dur, now);
        b.displace_for_read(t, ready, dur, now, moved)
    }

    proptest::proptest! {
        /// The one-pass read booking books exactly what the three-pass one
        /// did: same end, same transfers moved, same timeline after, for any
        /// mix of fixed transfers, movable program transfers and reads, with
        /// and without the horizon, the window full or not.
        #[test]
        fn reserve_read_matches_the_three_pass_version(
            horizon: bool,
            ops in proptest::collection::vec(
                (0u8..3, 0u32..4, 0u64..4_000, 1u64..3_000, 0u64..500),
                1..400,
            )
        ) {
            let mut fast = Bus { horizon, ..Bus::default() };
            let mut slow = Bus { horizon, ..Bus::default() };
            let mut now = 0;
            for (i, (kind, tag, ahead, dur, dt)) in ops.into_iter().enumerate() {
                now += dt;
                let ready = now + ahead;
                let (got, want) = match kind {
                    0 => (
                        fast.reserve_tagged(ready, dur, now, tag),
                        slow.reserve_tagged(ready, dur, now, tag),
                    ),
                    1 => (fast.reserve(ready, dur, now), slow.reserve(ready, dur, now)),
                    _ => {
                        let (mut mf, mut ms) = (Vec::new(), Vec::new());
                        let r = (
                            fast.reserve_read(ready, dur, now, &mut mf),
                            reserve_read_three_passes(&mut slow, ready, dur, now, &mut ms),
                        );
                        proptest::prop_assert_eq!(mf, ms, "moved, op {}", i);
                        r
                    }
                };
                proptest::prop_assert_eq!(got, want, "end, op {}", i);
                proptest::prop_assert_eq!(&fast.busy, &slow.busy, "timeline, op {}", i);
                proptest::prop_assert_eq!((fast.floor, fast.tail), (slow.floor, slow.tail), "op {}", i);
            }
        }

        /// With suspension off every completion time is exactly what the model
        /// computed before suspension existed (the golden fingerprints of the FTL
        /// rely on it), whatever the mix of reads, programs and erases.
        #[test]
        fn suspend_off_is_the_old_timing(
            ops in proptest::collection::vec(
                (0u8..3, 0u32..2, 0u32..2, 0u32..4, 0u64..300_000, 1usize..=4096),
                1..300,
            )
        ) {
            let g = small();
            let t = Timing::default().without_suspend();
            let d = FlashDevice::memory(g, t).unwrap();
            let mut r = Reference::default();
            let mut now = 0;
            let mut buf = vec![0u8; 4096];
            for (i, (kind, ch, die, blk, dt, len)) in ops.into_iter().enumerate() {
                now += dt;
                let b = g.block_id(ch, die, 0, blk);
                let wp = d.write_ptr(b);
                let (got, want) = match kind {
                    1 if wp > 0 => (
                        d.read(g.first_page(b), 0, &mut buf[..len], now).unwrap(),
                        r.read(&t, ch, die, len as u64, now),
                    ),
                    2 => (d.erase(b, now).unwrap(), r.erase(&t, ch, die, now)),
                    _ if wp == g.pages_per_block => (d.erase(b, now).unwrap(), r.erase(&t, ch, die, now)),
                    _ => (
                        d.program(g.first_page(b) + u64::from(wp), &buf, &rec(0, i as u64 + 1), now).unwrap(),
                        r.program(&t, ch, die, 4096, now),
                    ),
                };
                proptest::prop_assert_eq!(got, want, "op {}", i);
            }
            proptest::prop_assert_eq!(d.stats().suspends, 0);
        }

        /// With suspension on and no cap reached, every read completes within
        /// suspend latency + read + transfer of its arrival (or of the end of the
        /// reads before it), plus two transfers of bus contention, however deep
        /// the queue of programs and erases on its die; and those complete no
        /// earlier than the time they were booked for.
        #[test]
        fn suspend_on_bounds_reads_and_programs_complete(
            ops in proptest::collection::vec((0u8..3, 0u32..4, 0u64..200_000), 1..200)
        ) {
            let g = small();
            let t = Timing { max_suspends: 1_000_000, ..Timing::default() };
            let d = FlashDevice::memory(g, t).unwrap();
            let mut booked = 0;
            let mut now = 0;
            let mut buf = vec![0u8; 4096];
            let mut reads_end = 0;
            let xfer = t.transfer_ns(4096);
            for (i, (kind, blk, dt)) in ops.into_iter().enumerate() {
                now += dt;
                let b = g.block_id(0, 0, 0, blk);
                let wp = d.write_ptr(b);
                match kind {
                    1 if wp > 0 => {
                        let done = d.read(g.first_page(b), 0, &mut buf, now).unwrap();
                        // Bus contention: a program's data transfer booked just
                        // after the read is ready makes it wait almost two
                        // transfers (the gap it just missed, then that transfer).
                        let bound = now.max(reads_end) + t.erase_suspend_ns + t.read_ns + 3 * xfer;
                        proptest::prop_assert!(done <= bound, "op {}: {} > {}", i, done, bound);
                        reads_end = done;
                    }
                    _ if kind == 2 || wp == g.pages_per_block => {
                        booked = booked.max(d.erase(b, now).unwrap());
                    }
                    _ => {
                        let p = g.first_page(b) + u64::from(wp);
                        booked = booked.max(d.program(p, &buf, &rec(0, i as u64 + 1), now).unwrap());
                    }
                }
            }
            // Suspension only ever pushes a program or erase later.
            proptest::prop_assert!(d.channel_busy_until(0) >= booked);
        }
    }
}
