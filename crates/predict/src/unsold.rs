//! Heuristic predictor for unsold (unallocated) vSSDs, paper §4.4.1.
//!
//! Unsold capacity has no workload to learn from, but its past availability per
//! capacity class is stable, so each class keeps a histogram of how long unsold vSSDs
//! of that size stayed unsold. A new unsold vSSD is tagged with a duration drawn from
//! that history at a chosen quantile (a low quantile is conservative: most past ones
//! lasted longer), and [`UnsoldHistogram::shares`] gives the split the paper describes
//! ("20% available for 12 hours, 20% for 6 hours, the rest for 1 hour").
//!
//! # Stretches still running
//!
//! The histogram holds the stretches that ended (the flash was sold). Those
//! that have not ended yet are the long ones, and leaving them out biases the
//! history short: on a fleet of servers whose unsold channels are mostly the
//! ones regular tenants reach last, the ended stretches are the few hours of
//! the channels next to the sold ones, while the rest stay unsold for days.
//! [`UnsoldHistogram::survival`] takes the ages of the stretches still
//! running as right-censored observations (the Kaplan–Meier estimate: a
//! stretch of age `a` is known to last at least `a`, so it counts among those
//! at risk up to `a` and never as an end), and [`Survival::remaining`] answers
//! the question a lender asks of a stretch that has lasted `age` already: how
//! much longer it lasts with probability `1 - q`.

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

    /// The survival curve of `capacity`'s stretches: the ended ones recorded
    /// here, and `open`, the ages of the stretches still running (see the
    /// module docs). `None` when there is neither.
    pub fn survival(
        &self,
        capacity: u64,
        open: impl IntoIterator<Item = Nanos>,
    ) -> Option<Survival> {
        let mut ended: Vec<u64> = Vec::new();
        if let Some((_, h)) = self.classes.get(&capacity) {
            let last = h.keys().next_back().copied().unwrap_or(0) as usize;
            ended.resize(last + 1, 0);
            for (&b, &n) in h {
                ended[b as usize] = n;
            }
        }
        let mut censored = vec![0u64; ended.len()];
        for age in open {
            let b = (age / self.bucket) as usize;
            if b >= censored.len() {
                censored.resize(b + 1, 0);
                ended.resize(b + 1, 0);
            }
            censored[b] += 1;
        }
        if ended.is_empty() {
            return None;
        }
        // At risk in bucket b: every stretch, ended or running, that reached b.
        let mut at_risk = ended.iter().zip(&censored).map(|(e, c)| e + c).sum::<u64>();
        // surv[b]: the share of stretches that outlast bucket b - 1 (surv[0] = 1).
        let mut surv = Vec::with_capacity(ended.len() + 1);
        surv.push(1.0);
        let mut s = 1.0;
        for (e, c) in ended.iter().zip(&censored) {
            if at_risk > 0 {
                s *= 1.0 - *e as f64 / at_risk as f64;
            }
            surv.push(s);
            at_risk -= e + c;
        }
        Some(Survival {
            bucket: self.bucket,
            surv,
        })
    }
}

/// The Kaplan–Meier survival curve of one class's stretches, ended and
/// running (from [`UnsoldHistogram::survival`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Survival {
    bucket: Nanos,
    /// `surv[b]`: the estimated share of stretches lasting at least `b` buckets;
    /// non-increasing, `surv[0] = 1`, one entry past the longest observation.
    surv: Vec<f64>,
}

impl Survival {
    /// How much longer a stretch that has lasted `age` lasts with probability
    /// at least `1 - q`: the start of the first bucket at which the estimated
    /// share still running, among those that reached `age`, falls below
    /// `1 - q`, less `age` (zero when that is already behind). A stretch past
    /// what the history can tell (the curve never falls that far) is promised
    /// the rest of the longest stretch seen, or `age · q / (1 - q)` if that
    /// is more: the `q` quantile of what is left of a run of age `age` when
    /// nothing is known of its scale (P(T > t | T > age) = age / t).
    pub fn remaining(&self, age: Nanos, q: f64) -> Nanos {
        let q = q.clamp(0.0, 0.999);
        let from = ((age / self.bucket) as usize).min(self.surv.len() - 1);
        let floor = self.surv[from] * (1.0 - q);
        // The first bucket boundary past `from` where the curve is below the floor.
        let k = self.surv[from + 1..].partition_point(|&s| s >= floor);
        if from + 1 + k < self.surv.len() {
            // It falls during bucket from + k: the stretch ends in it.
            ((from + k) as Nanos * self.bucket).saturating_sub(age)
        } else {
            let seen = (self.surv.len() - 1) as Nanos * self.bucket;
            let scale_free = crate::quantile::scale_free_remaining(age as f64, q) as Nanos;
            seen.saturating_sub(age).max(scale_free)
        }
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

    #[test]
    fn without_running_stretches_survival_is_the_histograms_quantile() {
        let mut u = UnsoldHistogram::new(3600);
        for h in [1, 2, 3, 4, 5] {
            u.record(4, h * H);
        }
        let s = u.survival(4, []).unwrap();
        // 20% end in bucket 1 (at 1 h): the curve is 0.8 from 2 h on, so at
        // q = 0.2 (keep 80%) a new stretch is promised until bucket 2 starts.
        assert_eq!(s.remaining(0, 0.2), 2 * H);
        assert_eq!(s.remaining(0, 0.1), H);
        // Having lasted 2 h, four of the five are left (2, 3, 4 and 5 h, as
        // recorded in whole buckets): a quarter of them end within this hour.
        assert_eq!(s.remaining(2 * H, 0.2), 0);
        assert_eq!(s.remaining(2 * H, 0.25), H);
        assert_eq!(s.remaining(2 * H + H / 2, 0.5), H + H / 2);
        assert!(u.survival(8, []).is_none());
    }

    proptest::proptest! {
        /// The curve is a survival curve, a higher quantile never promises
        /// less, and running stretches never shorten a promise (they only
        /// add to those at risk).
        #[test]
        fn survival_invariants(
            ended in proptest::collection::vec(0u64..50, 0..30),
            open in proptest::collection::vec(0u64..60, 0..30),
            age in 0u64..70,
            q1 in 0.0f64..1.0,
            q2 in 0.0f64..1.0,
        ) {
            let mut u = UnsoldHistogram::new(1);
            for &d in &ended {
                u.record(4, d * SEC);
            }
            let open: Vec<Nanos> = open.iter().map(|&a| a * SEC).collect();
            let Some(s) = u.survival(4, open.iter().copied()) else {
                proptest::prop_assert!(ended.is_empty() && open.is_empty());
                return Ok(());
            };
            proptest::prop_assert_eq!(s.surv[0], 1.0);
            proptest::prop_assert!(s.surv.windows(2).all(|w| w[1] <= w[0] && w[1] >= 0.0));
            let (lo, hi) = if q1 <= q2 { (q1, q2) } else { (q2, q1) };
            let age = age * SEC;
            proptest::prop_assert!(s.remaining(age, lo) <= s.remaining(age, hi));
            if let Some(closed) = u.survival(4, []) {
                proptest::prop_assert!(closed.remaining(age, lo) <= s.remaining(age, lo));
            }
        }
    }

    #[test]
    fn running_stretches_lengthen_the_promise() {
        let mut u = UnsoldHistogram::new(3600);
        // Two stretches ended after an hour; eight are running, 48 h old.
        u.record(4, H);
        u.record(4, H);
        let ended_only = u.survival(4, []).unwrap();
        assert_eq!(ended_only.remaining(0, 0.2), H, "the ended ones alone");
        let s = u.survival(4, [48 * H; 8]).unwrap();
        // 20% end in the first hour, none after: at q = 0.2 the curve stays at
        // 0.8, so a new stretch is promised what the running ones have shown.
        assert_eq!(s.remaining(0, 0.2), 49 * H);
        // At q = 0.1 the first hour's ends are too many.
        assert_eq!(s.remaining(0, 0.1), H);
        // Past the first hour nothing has ended: the rest of what was seen.
        assert_eq!(s.remaining(10 * H, 0.1), 39 * H);
        // Past everything seen: the scale-free share of the age.
        assert_eq!(s.remaining(100 * H, 0.2), 25 * H);
        // Only running stretches: a curve with no end in it.
        let fresh = UnsoldHistogram::new(3600).survival(2, [3 * H]).unwrap();
        assert_eq!(fresh.remaining(0, 0.2), 4 * H);
    }
}
