//! Early reclamation between periods: the host hears a home vSSD's write path
//! ask for its lent flash back (`ftl::Pressure`) and has the harvester take it
//! back at once, instead of at its next period.
//!
//! Why: the harvester looks at its homes once a period (`tick_ms`). A tenant
//! that writes more than half its safety margin within one period (8 MiB in a
//! second is easy) used to run out of space with its own blocks lent, and its
//! write failed with ENOSPC. Now the FTL signals from the write path; its hook
//! only records the home on a [`PressureBoard`] and wakes the reclaim thread
//! ([`HostManager::serve_pressure`]), which runs
//! [`Harvesting::reclaim_pressed`](crate::harvester::Harvesting::reclaim_pressed)
//! under the lifecycle lock, as a period would. A write that ran out of room
//! meanwhile waits for the blocks (`[harvest] reclaim_wait_ms`) rather than
//! failing.
//!
//! Hooks are installed only while the reclaim thread runs: a host without one
//! (a test, `flexssd sim harvest`) keeps the old behaviour, where a write out
//! of room fails at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ftl::{Pressure, PressureHook, Vssd};
use parking_lot::{Condvar, Mutex};
use tracing::warn;

use super::HostManager;
use crate::Result;

/// Homes that asked for their flash back since the reclaim thread last
/// looked, with the strongest pressure each reported.
#[derive(Default)]
pub(crate) struct PressureBoard {
    pending: Mutex<BTreeMap<String, Pressure>>,
    wake: Condvar,
    /// Whether a reclaim thread serves the board (hooks are installed then).
    served: AtomicBool,
}

impl PressureBoard {
    /// Records `home`'s pressure and wakes the reclaim thread. Never blocks
    /// for longer than a map insert: it runs under the vSSD's lock.
    pub(crate) fn raise(&self, home: &str, p: Pressure) {
        let mut pending = self.pending.lock();
        let e = pending.entry(home.to_string()).or_insert(p);
        *e = (*e).max(p);
        self.wake.notify_one();
    }

    /// Waits up to `timeout` for a signal; returns (and clears) what was raised.
    pub(crate) fn take(&self, timeout: Duration) -> BTreeMap<String, Pressure> {
        let mut pending = self.pending.lock();
        if pending.is_empty() {
            self.wake.wait_for(&mut pending, timeout);
        }
        std::mem::take(&mut *pending)
    }

    fn hook(self: &Arc<Self>) -> PressureHook {
        let board = self.clone();
        Arc::new(move |home, p| board.raise(home, p))
    }
}

impl HostManager {
    /// How long a write out of room waits for lent blocks.
    fn reclaim_wait(&self) -> Duration {
        Duration::from_millis(self.harvester.settings().reclaim_wait_ms)
    }

    /// Gives `vssd` the pressure hook, if a reclaim thread serves the board.
    pub(super) fn hook_pressure(&self, vssd: &Vssd) {
        if self.pressure.served.load(Ordering::Acquire) {
            vssd.on_pressure(self.pressure.hook(), self.reclaim_wait());
        }
    }

    /// The reclaim thread: installs the pressure hook on every vSSD (and, from
    /// then on, on every new one), then, until `stopped()` says so, takes
    /// flash back from the homes that ask for it, as soon as they ask. Blocks:
    /// run it on a thread of its own (not an async runtime's worker, which
    /// writes waiting for room may occupy). Does nothing while `[harvest]` is
    /// off.
    pub fn serve_pressure(&self, stopped: impl Fn() -> bool) {
        if !self.harvester.settings().enabled {
            return;
        }
        self.pressure.served.store(true, Ordering::Release);
        let vssds: Vec<Arc<Vssd>> = self
            .state
            .read()
            .vssds
            .values()
            .map(|e| e.vssd.clone())
            .collect();
        for v in vssds {
            v.on_pressure(self.pressure.hook(), self.reclaim_wait());
        }
        while !stopped() {
            let raised = self.pressure.take(Duration::from_millis(250));
            if raised.is_empty() {
                continue;
            }
            if let Err(e) = self.reclaim_pressed(&raised) {
                warn!("taking lent flash back early failed: {e}");
            }
        }
    }

    /// Early reclamation for the homes that asked (see the module docs).
    fn reclaim_pressed(&self, raised: &BTreeMap<String, Pressure>) -> Result<()> {
        let out: Vec<String> = raised
            .iter()
            .filter(|(_, &p)| p == Pressure::Out)
            .map(|(h, _)| h.clone())
            .collect();
        let _g = self.lifecycle.lock();
        self.harvester.reclaim_pressed(self, &out)
    }
}
