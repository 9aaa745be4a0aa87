//! Heuristic predictor for unsold (unallocated) vSSDs, paper §4.4.1.
//!
//! Unsold capacity has no workload to learn from, but its past availability per
//! capacity class is stable, so each class keeps a histogram of how long unsold vSSDs
//! of that size stayed unsold. A new unsold vSSD is tagged with a duration drawn from
//! that history at a chosen quantile (a low quantile is conservative: most past ones
//! lasted longer), and [`UnsoldHistogram::shares`] gives the split the paper describes
//! ("20% available for 12 hours, 20% for 6 hours, the rest for 1 hour").

use std::collections::BTreeMap;

use clock::{Nanos, SEC};

/// Past available times of unsold vSSDs, per capacity class, in buckets.
#[derive(Debug, Clone)]
pub struct UnsoldHistogram {
    bucket: Nanos,
    /// Per class: (observations, count per bucket). The total is kept so that
    /// a prediction walks the buckets once (the fleet simulator asks for
    /// thousands of homes every step).
    classes: BTreeMap<u64, (u64, BTreeMap<u64, u64>)>,
}

impl UnsoldHistogram {
    /// A histogram with buckets of `bucket_s` seconds (e.g. 3600).
    pub fn new(bucket_s: u64) -> Self {
        Self {
            bucket: bucket_s.max(1) * SEC,
            classes: BTreeMap::new(),
        }
    }

    /// Records that an unsold vSSD of `capacity` (any unit, e.g. GiB) stayed unsold
    /// for `available` nanoseconds. Durations are rounded down to a bucket.
    pub fn record(&mut self, capacity: u64, available: Nanos) {
        let b = available / self.bucket;
        let (total, h) = self.classes.entry(capacity).or_default();
        *total += 1;
        *h.entry(b).or_default() += 1;
    }

    /// Observations recorded for `capacity`.
    pub fn count(&self, capacity: u64) -> u64 {
        self.classes.get(&capacity).map_or(0, |h| h.0)
    }

    /// The available time at quantile `q` (0..=1) of the history of `capacity`:
    /// a fraction `q` of past unsold vSSDs of this size lasted less than this. `None`
    /// without history for the class.
    pub fn predict(&self, capacity: u64, q: f64) -> Option<Nanos> {
        let (total, h) = self.classes.get(&capacity)?;
        let total = *total;
        let want = ((q.clamp(0.0, 1.0) * total as f64).floor() as u64).min(total - 1);
        let mut seen = 0;
        for (&b, &n) in h {
            seen += n;
            if seen > want {
                return Some(b * self.bucket);
            }
        }
        None
    }

    /// The distribution of available times of `capacity`: (duration, share) pairs,
    /// shortest first, shares summing to 1. Empty without history.
    pub fn shares(&self, capacity: u64) -> Vec<(Nanos, f64)> {
        let Some((total, h)) = self.classes.get(&capacity) else {
            return Vec::new();
        };
        let total = *total;
        h.iter()
            .map(|(&b, &n)| (b * self.bucket, n as f64 / total as f64))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const H: Nanos = 3600 * SEC;

    #[test]
    fn paper_example_split() {
        let mut u = UnsoldHistogram::new(3600);
        for _ in 0..2 {
            u.record(512, 12 * H + 5);
        }
        for _ in 0..2 {
            u.record(512, 6 * H);
        }
        for _ in 0..6 {
            u.record(512, H + 30 * 60 * SEC);
        }
        u.record(128, 2 * H);
        assert_eq!(u.count(512), 10);
        assert_eq!(u.shares(512), vec![(H, 0.6), (6 * H, 0.2), (12 * H, 0.2)]);
        assert_eq!(u.predict(512, 0.0), Some(H));
        assert_eq!(u.predict(512, 0.7), Some(6 * H));
        assert_eq!(u.predict(512, 1.0), Some(12 * H));
        assert_eq!(u.predict(128, 0.5), Some(2 * H));
        assert_eq!(u.predict(256, 0.5), None);
        assert!(u.shares(256).is_empty());
    }
}
