//! Injected clocks.
//!
//! No flexssd component reads the wall clock directly. Everything that needs "now"
//! holds an `Arc<dyn Clock>`: the daemon passes a [`MonotonicClock`], the simulator and
//! the tests pass a [`VirtualClock`] that only moves when told to. This is what lets
//! the same policy and device-model code run on a host and in a trace-driven
//! simulation, and what makes the tests deterministic.
//!
//! Time is a plain `u64` count of nanoseconds since the clock's epoch ([`Nanos`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Nanoseconds since a clock's epoch.
pub type Nanos = u64;

/// One millisecond in [`Nanos`].
pub const MS: Nanos = 1_000_000;
/// One microsecond in [`Nanos`].
pub const US: Nanos = 1_000;
/// One second in [`Nanos`].
pub const SEC: Nanos = 1_000_000_000;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in nanoseconds since this clock's epoch.
    fn now(&self) -> Nanos;

    /// How long from now until `t` (zero if `t` is already past).
    fn until(&self, t: Nanos) -> Duration {
        Duration::from_nanos(t.saturating_sub(self.now()))
    }
}

/// The host's monotonic clock, with its epoch at construction.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    start: Instant,
}

impl MonotonicClock {
    /// A clock whose epoch is the moment of this call.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }
}

/// A clock that moves only when [`VirtualClock::advance`] or [`VirtualClock::set`] is
/// called: for the simulator and for deterministic tests.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: AtomicU64,
}

impl VirtualClock {
    /// A virtual clock standing at `t`.
    pub fn new(t: Nanos) -> Self {
        Self {
            now: AtomicU64::new(t),
        }
    }

    /// Moves the clock forward by `d` and returns the new time.
    pub fn advance(&self, d: Nanos) -> Nanos {
        self.now.fetch_add(d, Ordering::SeqCst) + d
    }

    /// Moves the clock to `t` if `t` is later than now (time never runs backwards).
    pub fn set(&self, t: Nanos) {
        self.now.fetch_max(t, Ordering::SeqCst);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_only_moves_forward() {
        let c = VirtualClock::new(10);
        assert_eq!(c.now(), 10);
        assert_eq!(c.advance(5), 15);
        c.set(12);
        assert_eq!(c.now(), 15, "set() must never move time backwards");
        c.set(100);
        assert_eq!(c.now(), 100);
        assert_eq!(c.until(150), Duration::from_nanos(50));
        assert_eq!(c.until(50), Duration::ZERO);
    }

    #[test]
    fn monotonic_clock_does_not_go_backwards() {
        let c = MonotonicClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
