//! Online migration of one segment to another gSSD: the copier ([`Migration`]), the
//! handle other threads hold ([`MigrationHandle`]), options (chunk size, deadline,
//! [`Pacing`]) and outcomes. The crate docs say why the scheme is correct.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use blockdev::IoError;
use clock::{Clock, Nanos};

use crate::{Inner, MigState, Progress, Target};

/// Default migration chunk: 1 MiB.
pub const DEFAULT_CHUNK: u64 = 1 << 20;

/// When a migration must give up: at `at` on `clock` (for example when the regular
/// tenant needs its flash back for good).
#[derive(Clone)]
pub struct Deadline {
    /// The clock the deadline is read on (injected; never the wall clock).
    pub clock: Arc<dyn Clock>,
    /// The time after which no further chunk is copied.
    pub at: Nanos,
}

impl fmt::Debug for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadline").field("at", &self.at).finish()
    }
}

/// The longest a paced [`Migration::run`] sleeps before it reads its clocks again:
/// a cancel wakes it at once, but a deadline on another clock, or a virtual clock
/// that someone else moves, is only seen when it looks.
const MAX_NAP: Duration = Duration::from_millis(100);

/// A bandwidth limit for a migration's background copy, so that it does not take
/// the flash from the tenants of both gSSDs (like Ceph's recovery throttles).
///
/// The copy never runs ahead of the rate by more than one chunk: after a chunk of
/// `n` bytes, the next may start `n / bytes_per_sec` seconds later on `clock` (or
/// at once, if copying the chunk itself took longer). Every chunk counts, zeros
/// included: each one is read from the old gSSD. Switching the mapping after the
/// last chunk is not paced. A migration of `len` bytes in chunks of `chunk`
/// therefore takes at least `(ceil(len / chunk) - 1) · chunk / bytes_per_sec`.
#[derive(Clone)]
pub struct Pacing {
    /// Bytes the copy may move per second, on average.
    pub bytes_per_sec: NonZeroU64,
    /// The clock the pace is kept on (injected; never the wall clock). The daemon's
    /// monotonic clock for [`Migration::run`]; a simulator's virtual clock when it
    /// drives [`Migration::step`] itself (see [`Migration::next_step_at`]).
    pub clock: Arc<dyn Clock>,
}

impl Pacing {
    /// Time the pace allots to `bytes`, rounded up to a whole nanosecond.
    pub fn time_for(&self, bytes: u64) -> Nanos {
        let ns = (u128::from(bytes) * u128::from(clock::SEC))
            .div_ceil(u128::from(self.bytes_per_sec.get()));
        Nanos::try_from(ns).unwrap_or(Nanos::MAX)
    }
}

impl fmt::Debug for Pacing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pacing")
            .field("bytes_per_sec", &self.bytes_per_sec)
            .finish()
    }
}

/// How to migrate.
#[derive(Debug, Clone)]
pub struct MigrateOptions {
    /// Bytes copied per step, a positive multiple of [`crate::ALIGN`] (default 1 MiB).
    /// A write to the chunk being copied waits for at most one chunk copy.
    pub chunk_bytes: u64,
    /// Give up (leaving the old mapping intact) once this passes.
    pub deadline: Option<Deadline>,
    /// Limit the copy's bandwidth; `None` (default): copy as fast as the gSSDs go.
    pub pacing: Option<Pacing>,
}

impl Default for MigrateOptions {
    fn default() -> Self {
        Self {
            chunk_bytes: DEFAULT_CHUNK,
            deadline: None,
            pacing: None,
        }
    }
}

/// A finished migration: the segment now lives on the new gSSD, and no request can
/// reach `old` any more, so the caller may erase `[old.base, old.base + len)` of
/// `old.dev` and give those blocks back.
#[derive(Debug, Clone)]
pub struct Migrated {
    /// First volume byte of the segment.
    pub offset: u64,
    /// Length of the segment.
    pub len: u64,
    /// Where the segment lived before.
    pub old: Target,
    /// The gSSD it lives on now.
    pub new_gssd: u64,
}

/// Why a migration stopped before switching. In every case the old mapping is
/// intact and complete; the new gSSD holds a partial copy that the caller should
/// erase.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum MigrationError {
    /// [`MigrationHandle::cancel`] was called, or the driving [`Migration`] dropped.
    #[error("migration cancelled")]
    Cancelled,
    /// The [`Deadline`] passed before the copy finished.
    #[error("migration deadline {deadline} passed (now {now})")]
    DeadlineExceeded {
        /// The deadline.
        deadline: Nanos,
        /// When the copier noticed.
        now: Nanos,
    },
    /// Reading the old gSSD failed.
    #[error("reading the old gSSD failed: {0}")]
    Source(IoError),
    /// Writing or flushing the new gSSD failed (during the copy or a tenant's write).
    #[error("the new gSSD failed: {0}")]
    Target(IoError),
    /// The segment is no longer in the volume (cannot happen through this API:
    /// detach refuses a migrating segment).
    #[error("the segment disappeared during the migration")]
    Detached,
}

/// What one [`Migration::step`] did.
#[derive(Debug, Clone)]
pub enum Step {
    /// One more chunk was copied; the copy is not finished.
    Copied(Progress),
    /// Nothing: the [`Pacing`] allows the next chunk only at this time on its
    /// clock. Step again then (on a virtual clock, move it there first).
    Wait(Nanos),
    /// Everything was copied and the mapping switched.
    Done(Migrated),
}

/// A migration driven by the caller's thread ([`crate::GhostVolume::start_migration`]).
/// Dropping it before it finishes cancels it.
///
/// With [`Pacing`], [`Migration::step`] copies a chunk only once the pace allows
/// it and otherwise answers [`Step::Wait`] with the time it will;
/// [`Migration::next_step_at`] tells that time without stepping, so that a
/// simulator can schedule the copy on its virtual clock. [`Migration::run`] waits
/// on its own (cancel and deadline still stop it at once).
pub struct Migration {
    vol: Arc<Inner>,
    state: Arc<MigState>,
    old: Target,
    deadline: Option<Deadline>,
    pacing: Option<Pacing>,
    /// Paced: the earliest time on the pacing clock the next chunk may start.
    next_at: Nanos,
    buf: Vec<u8>,
    done: bool,
}

impl fmt::Debug for Migration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Migration")
            .field("volume", &self.vol.name)
            .field("segment", &self.state.seg_offset)
            .field("from_gssd", &self.state.from_gssd)
            .field("to_gssd", &self.state.new.gssd_id)
            .field("progress", &self.state.progress())
            .finish()
    }
}

impl Migration {
    pub(crate) fn new(
        vol: Arc<Inner>,
        state: Arc<MigState>,
        old: Target,
        deadline: Option<Deadline>,
        pacing: Option<Pacing>,
    ) -> Self {
        Self {
            vol,
            state,
            old,
            deadline,
            pacing,
            next_at: 0,
            buf: Vec::new(),
            done: false,
        }
    }

    /// A handle for other threads: progress, cancel, wait.
    pub fn handle(&self) -> MigrationHandle {
        MigrationHandle {
            state: self.state.clone(),
        }
    }

    /// The earliest time, on the [`Pacing`] clock, at which [`Migration::step`]
    /// will copy the next chunk; `None` when it may step now: the migration is not
    /// paced, or only the switch is left (it is not paced), or it has finished.
    /// A time at or before the clock's now means "now" too. Stepping earlier is
    /// harmless: the step does nothing and answers [`Step::Wait`] with this time.
    pub fn next_step_at(&self) -> Option<Nanos> {
        let st = &self.state;
        (self.pacing.is_some() && !self.done && st.cursor.load(Ordering::Acquire) < st.nchunks)
            .then_some(self.next_at)
    }

    /// Copies one chunk, or, when all are copied, switches the mapping. After the
    /// migration has finished, returns its outcome again.
    ///
    /// Cancellation, the deadline and a failed write to the new gSSD are checked
    /// first, so a paced migration that is told to stop stops at its next step,
    /// however far off its next chunk is. Then, when [`Pacing`] does not allow a
    /// chunk yet, it does nothing and returns [`Step::Wait`].
    pub fn step(&mut self) -> Result<Step, MigrationError> {
        if self.done {
            return self
                .state
                .outcome
                .lock()
                .clone()
                .expect("a finished migration has an outcome")
                .map(Step::Done);
        }
        let st = self.state.clone();
        if st.cancel.load(Ordering::Acquire) {
            return Err(self.abort(MigrationError::Cancelled));
        }
        if let Some(d) = &self.deadline {
            let now = d.clock.now();
            if now >= d.at {
                let deadline = d.at;
                return Err(self.abort(MigrationError::DeadlineExceeded { deadline, now }));
            }
        }
        if let Some(e) = self.target_error() {
            return Err(self.abort(e));
        }
        let c = st.cursor.load(Ordering::Acquire);
        if c == st.nchunks {
            return self.finish().map(Step::Done);
        }
        let paced_now = match &self.pacing {
            Some(p) => {
                let now = p.clock.now();
                if now < self.next_at {
                    return Ok(Step::Wait(self.next_at));
                }
                Some(now)
            }
            None => None,
        };
        let start = c * st.chunk;
        let n = st.chunk.min(st.len - start) as usize;
        self.buf.resize(n, 0);
        {
            // No mutation of chunk `c` is in flight while this is held.
            let _g = st.stripe(c).write();
            if let Err(e) = self.old.dev.read(self.old.base + start, &mut self.buf) {
                drop(_g);
                return Err(self.abort(MigrationError::Source(e)));
            }
            let at = st.new.base + start;
            let r = if self.buf.iter().all(|&b| b == 0) {
                st.new.dev.write_zeroes(at, n as u64, false)
            } else {
                st.new.dev.write(at, &self.buf, false)
            };
            if let Err(e) = r {
                drop(_g);
                return Err(self.abort(MigrationError::Target(e)));
            }
            st.cursor.store(c + 1, Ordering::Release);
        }
        if let (Some(p), Some(now)) = (&self.pacing, paced_now) {
            // From when this chunk started (or was due, if the caller stepped
            // late): a late step earns no credit for a burst.
            self.next_at = self.next_at.max(now).saturating_add(p.time_for(n as u64));
        }
        Ok(Step::Copied(st.progress()))
    }

    /// Steps until the migration finishes; returns its outcome. Under [`Pacing`]
    /// it sleeps between chunks until [`Migration::next_step_at`] on the pacing
    /// clock — which is right for a clock that moves by itself, like the daemon's
    /// monotonic one; on a virtual clock it waits until someone moves the clock
    /// (a simulator should call [`Migration::step`] itself). A
    /// [`MigrationHandle::cancel`] wakes the sleep at once, and a [`Deadline`] ends
    /// it when it passes.
    pub fn run(&mut self) -> Result<Migrated, MigrationError> {
        loop {
            match self.step()? {
                Step::Done(m) => return Ok(m),
                Step::Copied(_) => {}
                Step::Wait(t) => self.nap(t),
            }
        }
    }

    /// Sleeps until `t` on the pacing clock, the deadline, a cancel, or
    /// [`MAX_NAP`], whichever comes first. The caller steps again afterwards,
    /// which checks all of them.
    fn nap(&self, t: Nanos) {
        let Some(p) = &self.pacing else {
            return;
        };
        let mut d = p.clock.until(t).min(MAX_NAP);
        if let Some(dl) = &self.deadline {
            d = d.min(dl.clock.until(dl.at));
        }
        let st = &self.state;
        let mut g = st.wake_lock.lock();
        // Checked under the lock that cancel() takes to notify: no lost wake-up.
        if d.is_zero() || st.cancel.load(Ordering::Acquire) {
            return;
        }
        st.wake.wait_for(&mut g, d);
    }

    /// Bytes copied so far and in all.
    pub fn progress(&self) -> Progress {
        self.state.progress()
    }

    fn target_error(&self) -> Option<MigrationError> {
        if !self.state.target_failed.load(Ordering::Acquire) {
            return None;
        }
        let e = self.state.target_error.lock().clone();
        Some(MigrationError::Target(
            e.unwrap_or_else(|| IoError::Media("unknown".into())),
        ))
    }

    /// Switches the segment to the new target: flush it, then, with no request in
    /// flight (the map's write lock), replace the target and drop the migration.
    fn finish(&mut self) -> Result<Migrated, MigrationError> {
        let st = self.state.clone();
        if let Err(e) = st.new.dev.flush() {
            return Err(self.abort(MigrationError::Target(e)));
        }
        let mut map = self.vol.map.write();
        let Some(seg) = map.get_mut(&st.seg_offset) else {
            drop(map);
            return Err(self.settle(Err(MigrationError::Detached)).unwrap_err());
        };
        let ours = seg.mig.as_ref().is_some_and(|m| Arc::ptr_eq(m, &st));
        let err = if !ours {
            Some(MigrationError::Detached)
        } else if st.cancel.load(Ordering::Acquire) {
            Some(MigrationError::Cancelled)
        } else {
            // Dual writes that failed did so under the map's read lock: seen here.
            self.target_error()
        };
        if let Some(e) = err {
            if ours {
                seg.mig = None;
            }
            drop(map);
            return Err(self.settle(Err(e)).unwrap_err());
        }
        let old = std::mem::replace(&mut seg.target, st.new.clone());
        seg.mig = None;
        drop(map);
        self.settle(Ok(Migrated {
            offset: st.seg_offset,
            len: st.len,
            old,
            new_gssd: st.new.gssd_id,
        }))
    }

    /// Drops the migration state (the old mapping stays) and records `e`.
    fn abort(&mut self, e: MigrationError) -> MigrationError {
        let st = self.state.clone();
        {
            let mut map = self.vol.map.write();
            if let Some(seg) = map.get_mut(&st.seg_offset) {
                if seg.mig.as_ref().is_some_and(|m| Arc::ptr_eq(m, &st)) {
                    seg.mig = None;
                }
            }
        }
        self.settle(Err(e)).unwrap_err()
    }

    fn settle(&mut self, r: Result<Migrated, MigrationError>) -> Result<Migrated, MigrationError> {
        self.done = true;
        *self.state.outcome.lock() = Some(r.clone());
        self.state.finished.notify_all();
        r
    }
}

impl Drop for Migration {
    fn drop(&mut self) {
        if !self.done {
            self.abort(MigrationError::Cancelled);
        }
    }
}

/// A handle on a migration for any thread: progress for status and events, cancel,
/// wait. Cloneable; dropping it does not cancel the migration.
#[derive(Clone)]
pub struct MigrationHandle {
    pub(crate) state: Arc<MigState>,
}

impl fmt::Debug for MigrationHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MigrationHandle")
            .field("segment", &self.state.seg_offset)
            .field("from_gssd", &self.state.from_gssd)
            .field("to_gssd", &self.state.new.gssd_id)
            .field("progress", &self.state.progress())
            .finish()
    }
}

impl MigrationHandle {
    /// Bytes copied so far and in all.
    pub fn progress(&self) -> Progress {
        self.state.progress()
    }

    /// Asks the copier to stop before its next chunk, leaving the old mapping
    /// intact. Too late once the mapping has switched: [`MigrationHandle::wait`]
    /// says which happened.
    pub fn cancel(&self) {
        self.state.cancel.store(true, Ordering::Release);
        // Wake a paced copier sleeping until its next chunk.
        let _g = self.state.wake_lock.lock();
        self.state.wake.notify_all();
    }

    /// Blocks until the migration finishes and returns its outcome.
    pub fn wait(&self) -> Result<Migrated, MigrationError> {
        let mut g = self.state.outcome.lock();
        loop {
            if let Some(r) = g.as_ref() {
                return r.clone();
            }
            self.state.finished.wait(&mut g);
        }
    }

    /// The outcome if the migration has finished, without blocking.
    pub fn outcome(&self) -> Option<Result<Migrated, MigrationError>> {
        self.state.outcome.lock().clone()
    }

    /// First volume byte of the migrating segment.
    pub fn segment_offset(&self) -> u64 {
        self.state.seg_offset
    }

    /// The gSSD the segment moves from.
    pub fn from_gssd(&self) -> u64 {
        self.state.from_gssd
    }

    /// The gSSD the segment moves to.
    pub fn to_gssd(&self) -> u64 {
        self.state.new.gssd_id
    }
}
