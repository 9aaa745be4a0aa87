//! Unsold channels by their history (BlockFlex §4.4.1): unsold flash has no
//! workload to learn from, but how long unsold flash of a size stayed unsold is
//! stable, so each size class (channels per gSSD) keeps a histogram of past
//! unsold stretches, and an unsold gSSD lives for a stretch at a low
//! quantile of its class (conservative: most past ones lasted longer).
//! Without history for the class it falls back to a fixed time.
//!
//! A group's lifetime is what is left of a stretch that has lasted as long
//! as its own, at a low quantile of the stretches that lasted at least that
//! long ([`predict::Survival::remaining`]), not the low quantile of all
//! stretches less its age. The old rule ran out for every group older than
//! the quantile, and those are the groups that stay unsold: in the fleet
//! simulator's unsold scenario (1,400 servers, 168 hours) it gave every
//! unsold gSSD a granule at each refresh and served 13 of 60,000 harvest
//! demands; asked what is left, 23,715. A group older than every stretch
//! seen is promised `age · q / (1 - q)` (see `Survival::remaining`).
//!
//! The groups still unsold are history too: a group unsold for two days has
//! shown that groups of its size can stay unsold that long, though its
//! stretch has not ended, and the stretches that did end are the short ones
//! of the channels next to the sold ones. So the running groups' ages count
//! as right-censored stretches (the Kaplan–Meier estimate): about 10% more
//! served in the same run, and about 13% more TB-hours granted, than from the
//! ended stretches alone (seeds 1–3, `docs/results/fleet.md`). Until a
//! class has a stretch that ended, the running groups can only lengthen the
//! fixed time, never shorten it; a group not asked about for four granules
//! drops out of them (see [`STALE_GRANULES`]).

use std::collections::BTreeMap;

use clock::{Nanos, SEC};
use predict::{Survival, UnsoldHistogram};

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
    /// Per device, the groups asked about and not sold since, with when
    /// their channels became unsold and when they were last asked about:
    /// the running stretches.
    open: BTreeMap<String, Vec<(Vec<u32>, Nanos, Nanos)>>,
    /// The survival curve per group size, as of the time in the key, kept
    /// until the history or the running groups change (a refresh asks about
    /// every unsold gSSD at one time).
    curves: Option<(Nanos, BTreeMap<u64, Option<Survival>>)>,
}

/// A running group no one has asked about for this many granules is no longer
/// known to be unsold (a caller that lets a gSSD go and later sells its
/// channels need not say so): it is left out of the running stretches, so
/// that its age, growing for ever, cannot lengthen every promise. A refresh
/// asks about every unsold gSSD (the daemon's every 15 minutes, half a
/// granule).
const STALE_GRANULES: u64 = 4;

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
            open: BTreeMap::new(),
            curves: None,
        }
    }

    /// The survival curve of groups of `class` channels at `now`: the ended
    /// stretches and the running groups' ages.
    fn curve(&mut self, now: Nanos, class: u64) -> Option<&Survival> {
        if self.curves.as_ref().is_none_or(|(t, _)| *t != now) {
            self.curves = Some((now, BTreeMap::new()));
        }
        let (_, curves) = self.curves.as_mut().expect("set above");
        let (hist, open) = (&self.hist, &self.open);
        let stale = self.granule.saturating_mul(STALE_GRANULES);
        curves
            .entry(class)
            .or_insert_with(|| {
                let ages = open
                    .values()
                    .flatten()
                    .filter(|(g, _, seen)| {
                        g.len() as u64 == class && now.saturating_sub(*seen) <= stale
                    })
                    .map(|&(_, start, _)| now.saturating_sub(start));
                hist.survival(class, ages)
            })
            .as_ref()
    }

    /// Forgets running groups of `device` that share a channel with
    /// `channels` (sold, or regrouped), except `keep`'s exact group.
    fn close(&mut self, device: &str, channels: &[u32], keep: bool) {
        if let Some(groups) = self.open.get_mut(device) {
            let before = groups.len();
            groups.retain(|(g, _, _)| {
                (keep && g.as_slice() == channels) || !g.iter().any(|c| channels.contains(c))
            });
            if groups.len() != before {
                self.curves = None;
            }
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
        self.close(device, channels, true);
        let stale = self.granule.saturating_mul(STALE_GRANULES);
        let groups = self.open.entry(device.to_string()).or_default();
        let changed = match groups.iter_mut().find(|(g, _, _)| g.as_slice() == channels) {
            Some((_, _, seen)) => {
                let back = now.saturating_sub(*seen) > stale;
                *seen = now;
                back
            }
            None => {
                groups.push((channels.to_vec(), first, now));
                true
            }
        };
        if changed {
            self.curves = None;
        }
        let class = channels.len() as u64;
        let ended = self.hist.count(class) > 0;
        let (age, q, granule, fallback) = (now - first, self.quantile, self.granule, self.fallback);
        match self.curve(now, class).map(|s| s.remaining(age, q)) {
            // What is left of the stretch, at least one granule (the pool's
            // unit of time).
            Some(left) if ended => left.max(granule),
            // Nothing ended yet: the running groups only lengthen the default.
            Some(left) => left.max(fallback),
            None => fallback,
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
            self.curves = None;
        }
        self.close(device, channels, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn falls_back_without_history_then_follows_the_low_quantile_of_past_stretches() {
        let mut p = UnsoldHistogramPolicy::new(10, 0.2, 600 * SEC);
        assert_eq!(p.lifetime(0, "d", &[0, 1, 2]), 600 * SEC, "no history yet");
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
        // Past every stretch seen (it is the longest itself): a quarter of
        // its age at q = 0.2, as a run of unknown scale.
        assert_eq!(p.lifetime(t0 + 900 * SEC, "d", &[6, 7]), 225 * SEC);
        // Another class has no history.
        assert_eq!(p.lifetime(t0, "d", &[8]), 600 * SEC);
        // Selling channels never seen unsold records nothing.
        p.sold(t0, "d", &[12]);
        assert_eq!(p.lifetime(t0, "d", &[13]), 600 * SEC);
    }

    #[test]
    fn groups_still_unsold_count_as_long_stretches() {
        let mut p = UnsoldHistogramPolicy::new(10, 0.2, 600 * SEC);
        // Eight servers' groups unsold since 0 and never sold, asked about
        // at every refresh (every 20 s) until 5,000 s.
        for t in (0..5_000).step_by(20) {
            for d in 0..8 {
                p.lifetime(t * SEC, &format!("s{d}"), &[12, 13, 14, 15]);
            }
        }
        // Two groups bought after 100 s each.
        for d in 8..10 {
            let dev = format!("s{d}");
            p.lifetime(0, &dev, &[12, 13, 14, 15]);
            p.sold(100 * SEC, &dev, &[12, 13, 14, 15]);
        }
        // The ended stretches alone say 100 s. With the eight running for
        // 5,000 s, 20% of stretches end within 100 s and none after: a new
        // group is promised what the running ones have lasted.
        let now = 5_000 * SEC;
        assert_eq!(p.lifetime(now, "s8", &[12, 13, 14, 15]), 5_010 * SEC);
        // A running group as old as any: a quarter of its age.
        assert_eq!(p.lifetime(now, "s0", &[12, 13, 14, 15]), 1_250 * SEC);
        assert_eq!(
            p.lifetime(now + 5_000 * SEC, "s0", &[12, 13, 14, 15]),
            2_500 * SEC
        );
        // A group no one asked about for more than four granules is no longer
        // counted: s1-s8 went quiet at 5,000 s, so at 10,000 s only s0 (just
        // asked about) runs beside the two that ended at 100 s, and two of
        // three end by then. Counted, the eight would hold the curve at 80%
        // and promise 10,010 s.
        assert_eq!(p.lifetime(10_000 * SEC, "s9", &[12, 13, 14, 15]), 100 * SEC);
        // Sold, the running groups become ended stretches of 5,000 s and 10,000 s.
        for d in 0..8 {
            p.sold(10_000 * SEC, &format!("s{d}"), &[12, 13, 14, 15]);
        }
        p.sold(10_000 * SEC, "s8", &[12, 13, 14, 15]);
        // Eleven ended: two at 100 s (18%), one at 5,000 s, eight at
        // 10,000 s. With the one at 5,000 s more than 20% have ended: a new
        // group gets 5,000 s.
        assert_eq!(
            p.lifetime(10_000 * SEC, "s9", &[12, 13, 14, 15]),
            5_000 * SEC
        );
    }
}
