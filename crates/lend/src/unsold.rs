//! Unsold channels by their history (BlockFlex §4.4.1): unsold flash has no
//! workload to learn from, but how long unsold flash of a size stayed unsold is
//! stable, so each size class (channels per gSSD) keeps a histogram of past
//! unsold stretches, and a new unsold gSSD lives for the stretch at a low
//! quantile of its class (conservative: most past ones lasted longer), less
//! the time its channels have been unsold already. Without history for the
//! class it falls back to a fixed time.

use std::collections::BTreeMap;

use clock::{Nanos, SEC};
use predict::UnsoldHistogram;

use crate::UnsoldPolicy;

/// Lifetimes of unsold gSSDs from the host's own history.
#[derive(Debug, Clone)]
pub struct UnsoldHistogramPolicy {
    hist: UnsoldHistogram,
    quantile: f64,
    fallback: Nanos,
    granule: Nanos,
    /// Per device, since when each channel has been unsold (keyed by device
    /// first so that a lookup allocates nothing: the simulator asks for
    /// thousands of servers every refresh).
    since: BTreeMap<String, BTreeMap<u32, Nanos>>,
}

impl UnsoldHistogramPolicy {
    /// Buckets of one `granule_s`, lifetimes at `quantile` (0–1) of the
    /// history, `fallback` while a group size has none.
    pub fn new(granule_s: u64, quantile: f64, fallback: Nanos) -> Self {
        Self {
            hist: UnsoldHistogram::new(granule_s),
            quantile,
            fallback,
            granule: granule_s.saturating_mul(SEC),
            since: BTreeMap::new(),
        }
    }
}

impl UnsoldPolicy for UnsoldHistogramPolicy {
    fn lifetime(&mut self, now: Nanos, device: &str, channels: &[u32]) -> Nanos {
        if !self.since.contains_key(device) {
            self.since.insert(device.to_string(), BTreeMap::new());
        }
        let since = self.since.get_mut(device).expect("inserted");
        let mut first = now;
        for &c in channels {
            first = first.min(*since.entry(c).or_insert(now));
        }
        let class = channels.len() as u64;
        match self.hist.predict(class, self.quantile) {
            // What is left of the predicted stretch, at least one granule (the
            // pool's unit of time).
            Some(d) => d.saturating_sub(now - first).max(self.granule),
            None => self.fallback,
        }
    }

    fn sold(&mut self, now: Nanos, device: &str, channels: &[u32]) {
        let Some(since) = self.since.get_mut(device) else {
            return;
        };
        let mut first: Option<Nanos> = None;
        for &c in channels {
            if let Some(t) = since.remove(&c) {
                first = Some(first.map_or(t, |f| f.min(t)));
            }
        }
        if let Some(t) = first {
            self.hist.record(channels.len() as u64, now - t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn falls_back_without_history_then_follows_the_low_quantile_of_past_stretches() {
        let mut p = UnsoldHistogramPolicy::new(10, 0.2, 600 * SEC);
        assert_eq!(p.lifetime(0, "d", &[0, 1]), 600 * SEC, "no history yet");
        // Five past stretches of 2-channel groups: 100, 200, 300, 400, 500 s.
        for (i, len) in [100u64, 200, 300, 400, 500].into_iter().enumerate() {
            let start = 1_000 * SEC * (i as u64 + 1);
            p.lifetime(start, "d", &[4, 5]);
            p.sold(start + len * SEC, "d", &[4, 5]);
        }
        // The 20% quantile of {100..500} s is 200 s; 50 s already elapsed.
        let t0 = 10_000 * SEC;
        assert_eq!(p.lifetime(t0, "d", &[6, 7]), 200 * SEC);
        assert_eq!(p.lifetime(t0 + 50 * SEC, "d", &[6, 7]), 150 * SEC);
        // Past the prediction: one granule at a time.
        assert_eq!(p.lifetime(t0 + 900 * SEC, "d", &[6, 7]), 10 * SEC);
        // Another class has no history.
        assert_eq!(p.lifetime(t0, "d", &[8]), 600 * SEC);
        // Selling channels never seen unsold records nothing.
        p.sold(t0, "d", &[12]);
        assert_eq!(p.lifetime(t0, "d", &[13]), 600 * SEC);
    }
}
