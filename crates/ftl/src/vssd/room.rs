//! Room for host writes while blocks are lent: the write path's side of
//! BlockFlex's early reclamation (§4.5).
//!
//! A home vSSD lends only what its predicted use leaves free, and keeps a safety
//! margin. Whoever lent the blocks (the harvester) used to look at
//! [`Vssd::needs_reclaim`] once a period, so a tenant that wrote faster than
//! half its margin per period ran out of space with its own blocks still lent:
//! its write failed with ENOSPC. Two things here close that gap:
//!
//! * **A signal, on the write path.** When a host write opens a new block on a
//!   parallel unit whose channel has a lent range and whose headroom is below the
//!   reclaim threshold, the vSSD calls its [`PressureHook`] with
//!   [`Pressure::Low`] at once, not a period later. The hook runs under the
//!   vSSD's lock, once per block opened: it must only record the signal and wake
//!   a thread (it must not block or call back into the vSSD).
//! * **A write that waits instead of failing.** A write, zeroing or trim that
//!   runs out of space while blocks are lent calls the hook with
//!   [`Pressure::Out`] and waits, the lock released, until a
//!   [`Vssd::take_back`] returns some blocks (then it runs again from the start:
//!   rewriting the same bytes is harmless) or the hook's wait limit passes (then
//!   it fails with ENOSPC, as it would have without lending). Without a hook, or
//!   with nothing lent, a write fails at once, as before.

use std::sync::Arc;
use std::time::Duration;

use blockdev::{IoError, IoResult};
use clock::Nanos;

use super::{Inner, Vssd};

/// How badly a home vSSD wants its lent blocks back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pressure {
    /// Some unit's headroom fell below the reclaim threshold
    /// ([`Vssd::needs_reclaim`] is true): take flash back soon.
    Low,
    /// A host write ran out of space and is waiting for lent blocks.
    Out,
}

/// Called with the vSSD's name when it wants its lent blocks back. Runs under
/// the vSSD's lock: record and wake, nothing more.
pub type PressureHook = Arc<dyn Fn(&str, Pressure) + Send + Sync>;

/// The hook and how long a write waits on it.
#[derive(Default)]
pub(crate) struct Room {
    hook: parking_lot::Mutex<Option<(PressureHook, Duration)>>,
    /// Woken by [`Vssd::take_back`] (and by `destroy`).
    back: parking_lot::Condvar,
}

impl Room {
    fn hook(&self) -> Option<(PressureHook, Duration)> {
        self.hook.lock().clone()
    }

    /// Wakes writers waiting for blocks.
    pub(crate) fn wake(&self) {
        self.back.notify_all();
    }
}

impl Vssd {
    /// Installs the hook that hears when this vSSD wants its lent blocks back
    /// (see the module docs), and how long a write that ran out of space waits
    /// for them before it fails with ENOSPC. Replaces any earlier hook.
    pub fn on_pressure(&self, hook: PressureHook, wait: Duration) {
        *self.room.hook.lock() = Some((hook, wait));
    }

    /// Called when a host write opened a block on `pu`: signals
    /// [`Pressure::Low`] if the unit's channel has a lent range and its headroom
    /// is below the reclaim threshold.
    pub(super) fn check_pressure(&self, g: &Inner, pu: usize) {
        if g.lent.is_empty() {
            return;
        }
        let ch = self.cfg.extents[pu % self.cfg.extents.len()].channel;
        if g.lent.iter().any(|l| l.channel == ch) && self.pu_pressed(g, pu) {
            if let Some((hook, _)) = self.room.hook() {
                hook(&self.cfg.name, Pressure::Low);
            }
        }
    }

    /// Runs `op` (a host write, zeroing or trim) under the lock; when it runs
    /// out of space while blocks are lent, signals [`Pressure::Out`], waits for a
    /// take-back and runs it again (see the module docs).
    pub(super) fn with_room(&self, mut op: impl FnMut(&mut Inner, Nanos) -> IoResult) -> IoResult {
        let mut g = self.inner.lock();
        self.check_alive(&g)?;
        loop {
            let now = self.clock.now();
            let err = match op(&mut g, now) {
                Err(IoError::NoSpace(m)) => m,
                r => return r,
            };
            let hook = self.room.hook();
            let (Some((hook, wait)), false) = (hook, g.lent.is_empty()) else {
                return Err(IoError::NoSpace(err));
            };
            let lent = g.lent.len();
            let returned = g.returned;
            hook(&self.cfg.name, Pressure::Out);
            tracing::info!(vssd = %self.cfg.name, "out of space with blocks lent: waiting for them");
            let timed_out = self
                .room
                .back
                .wait_while_for(&mut g, |g| g.returned == returned && !g.gone, wait)
                .timed_out();
            self.check_alive(&g)?;
            if timed_out {
                return Err(IoError::NoSpace(format!(
                    "vSSD {} is out of free flash, and the {lent} extents it lent did not come back within {} ms ({err})",
                    self.cfg.name,
                    wait.as_millis()
                )));
            }
        }
    }
}
