//! The paper's metrics (§IV-A): cumulated waste in GB·hours over 5-second intervals,
//! failures (used above allocated), adds and removes.
//!
//! Both the real mode and the simulator produce step functions of used and
//! allocated bytes over time; [`WasteMeter`] samples them at the start of every
//! interval, so the two modes are measured the same way.

use clock::{Nanos, SEC};
use serde::{Deserialize, Serialize};

/// The paper's accounting interval.
pub const INTERVAL: Nanos = 5 * SEC;

/// Accumulates waste over fixed intervals of step functions.
#[derive(Debug, Clone)]
pub struct WasteMeter {
    interval: Nanos,
    /// (t, used, expected, allocated), time-ordered.
    points: Vec<(Nanos, u64, u64, u64)>,
}

/// What a run amounted to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Seconds covered.
    pub duration_s: f64,
    /// Cumulated waste in GB·hours (GB here is GiB, like the sizes).
    pub waste_gbh: f64,
    /// Times used was seen above allocated (simulation: trace points; real mode:
    /// application errors such as ENOSPC, which the caller counts).
    pub failures: u32,
    /// Disks added (not counting the first).
    pub adds: u32,
    /// Disks removed.
    pub removes: u32,
    /// Adds or removes the volume refused or failed.
    pub failed_ops: u32,
    /// Largest allocation seen, bytes.
    pub peak_allocated: u64,
    /// Largest usage seen, bytes.
    pub peak_used: u64,
}

impl WasteMeter {
    /// A meter with the paper's 5-second interval.
    pub fn new() -> Self {
        Self::with_interval(INTERVAL)
    }

    /// A meter with another interval.
    pub fn with_interval(interval: Nanos) -> Self {
        WasteMeter {
            interval: interval.max(1),
            points: Vec::new(),
        }
    }

    /// Records that from `t` on, usage is `used`, expectation `expected` and
    /// allocation `allocated`. Points must come in time order.
    pub fn record(&mut self, t: Nanos, used: u64, expected: u64, allocated: u64) {
        self.points.push((t, used, expected, allocated));
    }

    /// Values at `t`: the latest point at or before it.
    fn at(&self, t: Nanos) -> Option<(u64, u64, u64)> {
        let i = self.points.partition_point(|p| p.0 <= t);
        (i > 0).then(|| {
            let p = self.points[i - 1];
            (p.1, p.2, p.3)
        })
    }

    /// Interval-sampled series `(t, used, expected, allocated)` from the first point to
    /// `end`.
    pub fn series(&self, end: Nanos) -> Vec<(Nanos, u64, u64, u64)> {
        let Some(&(t0, ..)) = self.points.first() else {
            return vec![];
        };
        let mut out = vec![];
        let mut t = t0;
        while t <= end {
            if let Some((u, e, a)) = self.at(t) {
                out.push((t, u, e, a));
            }
            t += self.interval;
        }
        out
    }

    /// Waste in GiB·hours and failing intervals from the first point to `end`.
    pub fn waste(&self, end: Nanos) -> (f64, u32) {
        let mut gbh = 0.0;
        let mut failures = 0;
        let h = self.interval as f64 / (3600.0 * SEC as f64);
        for (_, used, _, alloc) in self.series(end) {
            if used > alloc {
                failures += 1;
            }
            gbh += alloc.saturating_sub(used) as f64 / (1u64 << 30) as f64 * h;
        }
        (gbh, failures)
    }
}

impl Default for WasteMeter {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const G: u64 = 1 << 30;

    #[test]
    fn one_gib_wasted_for_an_hour_is_one_gbh() {
        let mut m = WasteMeter::new();
        m.record(0, 0, 0, G);
        let (w, f) = m.waste(3600 * SEC - 1);
        assert!((w - 1.0).abs() < 1e-9, "{w}");
        assert_eq!(f, 0);
    }

    #[test]
    fn counts_intervals_over_the_allocation() {
        let mut m = WasteMeter::new();
        m.record(0, G, G, 2 * G);
        m.record(12 * SEC, 3 * G, 3 * G, 2 * G);
        m.record(21 * SEC, G, G, 2 * G);
        // samples at 0,5,10 (ok) 15,20 (over) 25 (ok)
        let (w, f) = m.waste(25 * SEC);
        assert_eq!(f, 2);
        assert!((w - 4.0 * 5.0 / 3600.0).abs() < 1e-9);
    }
}
