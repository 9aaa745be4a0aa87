//! GREM (Yang et al., 2016): the cache is split into a long-term zone `Z_L`,
//! reserved per tenant in proportion to aged long-term popularity, and a
//! short-term zone `Z_S` that all tenants compete for on the last epoch's
//! popularity. Popularity is kept per 1 MiB bin; content changes once per
//! 5-minute epoch, in 128 KiB lines. GREM keeps the zones at half the cache
//! each; [`crate::policy::dgrem`] sizes them dynamically with the same core.
//!
//! At each epoch end (Algorithm 1 of the paper):
//! 1. the history (aged popularity) of every bin is updated:
//!    `history = aging * history + count in the epoch that ended`;
//! 2. `UpdateLongTermZone`: `Z_L` holds the `C_ZL` bins with the highest
//!    history (all of them if there are fewer); bins that drop out form
//!    `evictBin`. A tenant's reservation `C_ZL(i)` is the size of its bins in
//!    `Z_L`, so reservations follow long-term popularity;
//! 3. `UpdateShortTermZone`: while the whole history fits in the cache
//!    (warm-up, case 1) every remaining history bin goes to `Z_S`; otherwise
//!    (case 2) the bins of the ended epoch that are not in `Z_L` compete on
//!    that epoch's counts: if there are at least `C_ZS` of them the top `C_ZS`
//!    win; else they all stay and the rest of `Z_S` is filled from the old
//!    `Z_S` and `evictBin` by history.
//!
//! Between epochs a miss does not admit: it is served by the disk.

use crate::bins::{keep_top, Bins, LONG, NOWHERE, SHORT};
use crate::policy::push_occupancy;
use crate::{
    bump, Access, CacheError, CachePolicy, Events, Key, Outcome, PolicyConfig, PolicyKind,
    TenantOccupancy, Zones,
};

/// Chooses the size of the short-term zone (in bins) at an epoch end, before
/// GREM refills the zones. GREM's is fixed; D-GREM's is its burst detector.
pub(crate) trait ZoneSizer {
    /// The new `C_ZS` in bins (the caller clamps it to the cache).
    fn short_bins(&mut self, core: &GremCore) -> u64;
}

/// The two-zone machinery shared by GREM and D-GREM.
#[derive(Debug, Clone)]
pub(crate) struct GremCore {
    pub bins: Bins,
    kind: PolicyKind,
    aging: f64,
    /// `C_ZS` in bins; `C_ZL` is the rest.
    pub cap_short: u64,
    cand: Vec<(f64, u64, u32)>,
    zone: Vec<u8>,
    /// Long-term zone bins per tenant (the reservations).
    reserved: Vec<u64>,
}

impl GremCore {
    pub fn new(kind: PolicyKind, cache_bytes: u64, cfg: &PolicyConfig) -> Result<Self, CacheError> {
        let bins = Bins::new(kind, cache_bytes, cfg)?;
        let cap_short = bins.cap_bins / 2;
        Ok(GremCore {
            bins,
            kind,
            aging: cfg.aging,
            cap_short,
            cand: Vec::new(),
            zone: Vec::new(),
            reserved: Vec::new(),
        })
    }

    /// `C_ZL` in bins.
    pub fn cap_long(&self) -> u64 {
        self.bins.cap_bins - self.cap_short
    }

    #[inline]
    pub fn access<S: ZoneSizer>(
        &mut self,
        a: Access,
        events: &mut Events,
        sizer: &mut S,
    ) -> Outcome {
        let passed = self.bins.epochs_passed(a.time_ns);
        for _ in 0..passed.min(64) {
            let s = sizer.short_bins(self);
            self.cap_short = s.min(self.bins.cap_bins);
            self.end_epoch(events);
        }
        if passed > 64 {
            self.bins.epoch_end = Some(a.time_ns + self.bins.epoch_ns);
        }
        let (_, hit) = self.bins.touch(a);
        Outcome {
            hit,
            admitted: false,
        }
    }

    /// Algorithm 1, then the moves it implies.
    fn end_epoch(&mut self, events: &mut Events) {
        self.bins.age(self.aging);
        let n = self.bins.bins.len();
        let (cap_long, cap_short) = (self.cap_long() as usize, self.cap_short as usize);
        self.zone.clear();
        self.zone.resize(n, NOWHERE);

        // UpdateLongTermZone.
        self.cand.clear();
        for (i, b) in self.bins.bins.iter().enumerate() {
            if b.hist > 0.0 {
                self.cand.push((b.hist, b.key, i as u32));
            }
        }
        let history = self.cand.len();
        keep_top(&mut self.cand, cap_long);
        for &(_, _, i) in &self.cand {
            self.zone[i as usize] = LONG;
        }

        // UpdateShortTermZone.
        self.cand.clear();
        if history <= cap_long + cap_short {
            // Case 1, warm-up: everything seen fits.
            for (i, b) in self.bins.bins.iter().enumerate() {
                if b.hist > 0.0 && self.zone[i] == NOWHERE {
                    self.zone[i] = SHORT;
                }
            }
        } else {
            // Case 2: the ended epoch's bins outside Z_L compete on its counts.
            for &i in &self.bins.touched {
                let b = &self.bins.bins[i as usize];
                if self.zone[i as usize] == NOWHERE {
                    self.cand.push((f64::from(b.curr), b.key, i));
                }
            }
            if self.cand.len() >= cap_short {
                keep_top(&mut self.cand, cap_short);
                for &(_, _, i) in &self.cand {
                    self.zone[i as usize] = SHORT;
                }
            } else {
                let room = cap_short - self.cand.len();
                for &(_, _, i) in &self.cand {
                    self.zone[i as usize] = SHORT;
                }
                // Fill from the old Z_S and evictBin (cached before, not in
                // Z_L now, not accessed in the epoch) by history.
                self.cand.clear();
                for (i, b) in self.bins.bins.iter().enumerate() {
                    if b.zone != NOWHERE && self.zone[i] == NOWHERE && b.curr == 0 {
                        self.cand.push((b.hist, b.key, i as u32));
                    }
                }
                keep_top(&mut self.cand, room);
                for &(_, _, i) in &self.cand {
                    self.zone[i as usize] = SHORT;
                }
            }
        }
        self.bins.apply(&self.zone, events);
        self.count_reserved();
        self.bins.reset();
        self.bins.next_epoch();
    }

    fn count_reserved(&mut self) {
        self.reserved.iter_mut().for_each(|r| *r = 0);
        for b in &self.bins.bins {
            if b.zone == LONG {
                bump(&mut self.reserved, b.tenant, 1);
            }
        }
    }

    /// Changes the cache to `bins` bins with `short` of them in `Z_S`,
    /// evicting the least popular bins of each zone at once if it shrinks.
    pub fn resize_bins(&mut self, bins: u64, short: u64, events: &mut Events) {
        self.bins.cap_bins = bins;
        self.cap_short = short.min(bins);
        let caps = [0, self.cap_long() as usize, self.cap_short as usize];
        self.zone.clear();
        self.zone.resize(self.bins.bins.len(), NOWHERE);
        for z in [LONG, SHORT] {
            self.cand.clear();
            for (i, b) in self.bins.bins.iter().enumerate() {
                if b.zone == z {
                    self.cand.push((b.hist, b.key, i as u32));
                }
            }
            keep_top(&mut self.cand, caps[z as usize]);
            for &(_, _, i) in &self.cand {
                self.zone[i as usize] = z;
            }
        }
        self.bins.apply(&self.zone, events);
        self.count_reserved();
    }

    pub fn resize_lines(&self, total_lines: u64) -> Result<u64, CacheError> {
        let bins = total_lines / self.bins.lines_per_bin();
        if bins == 0 {
            return Err(CacheError::Config(format!(
                "cannot resize {} to {total_lines} lines: less than one bin ({} lines)",
                self.kind,
                self.bins.lines_per_bin()
            )));
        }
        Ok(bins)
    }

    pub fn capacity(&self) -> u64 {
        self.bins.cap_bins * self.bins.lines_per_bin()
    }

    pub fn len(&self) -> u64 {
        self.bins.placed * self.bins.lines_per_bin()
    }

    pub fn occupancy(&self, out: &mut Vec<TenantOccupancy>) {
        let lpb = self.bins.lines_per_bin();
        let res: Vec<u64> = self.bins.resident.iter().map(|b| b * lpb).collect();
        let rsv: Vec<u64> = self.reserved.iter().map(|b| b * lpb).collect();
        push_occupancy(&res, Some(&rsv), out);
    }

    pub fn zones(&self) -> Zones {
        let lpb = self.bins.lines_per_bin();
        Zones {
            long_term_lines: self.cap_long() * lpb,
            short_term_lines: self.cap_short * lpb,
        }
    }

    /// Bins placed in each zone now: (long, short).
    pub fn placed_per_zone(&self) -> (u64, u64) {
        let mut n = (0, 0);
        for b in &self.bins.bins {
            match b.zone {
                LONG => n.0 += 1,
                SHORT => n.1 += 1,
                _ => {}
            }
        }
        n
    }
}

/// Half of the cache for each zone, always.
#[derive(Debug, Clone, Copy)]
struct HalfHalf;

impl ZoneSizer for HalfHalf {
    fn short_bins(&mut self, core: &GremCore) -> u64 {
        core.bins.cap_bins / 2
    }
}

/// GREM with `C_ZL = C_ZS = C_T / 2`.
#[derive(Debug, Clone)]
pub struct Grem {
    core: GremCore,
}

impl Grem {
    /// A cache of `cache_bytes` (whole bins of `cfg.bin_bytes`).
    pub fn new(cache_bytes: u64, cfg: &PolicyConfig) -> Result<Self, CacheError> {
        Ok(Grem {
            core: GremCore::new(PolicyKind::Grem, cache_bytes, cfg)?,
        })
    }

    /// Bins placed in each zone now: (long-term, short-term).
    pub fn placed_per_zone(&self) -> (u64, u64) {
        self.core.placed_per_zone()
    }
}

impl CachePolicy for Grem {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Grem
    }

    fn line_blocks(&self) -> u64 {
        1 << self.core.bins.line_shift
    }

    fn capacity(&self) -> u64 {
        self.core.capacity()
    }

    fn len(&self) -> u64 {
        self.core.len()
    }

    #[inline]
    fn access(&mut self, a: Access, events: &mut Events) -> Outcome {
        self.core.access(a, events, &mut HalfHalf)
    }

    fn contains(&self, key: Key) -> bool {
        self.core.bins.contains(key)
    }

    fn resize(&mut self, total_lines: u64, events: &mut Events) -> Result<(), CacheError> {
        let bins = self.core.resize_lines(total_lines)?;
        self.core.resize_bins(bins, bins / 2, events);
        Ok(())
    }

    fn occupancy(&self, out: &mut Vec<TenantOccupancy>) {
        self.core.occupancy(out);
    }

    fn zones(&self) -> Option<Zones> {
        Some(self.core.zones())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn acc(t: u64, tenant: u32, bin: u64) -> Access {
        Access {
            time_ns: t,
            tenant,
            key: Key::new(tenant, bin << 8).unwrap(),
            write: false,
        }
    }

    fn cfg() -> PolicyConfig {
        PolicyConfig {
            epoch_secs: 1.0,
            ..PolicyConfig::default()
        }
    }

    #[test]
    fn warm_up_caches_everything_that_fits() {
        let mut c = Grem::new(4 << 20, &cfg()).unwrap();
        let mut ev = Events::new();
        for b in 0..3 {
            c.access(acc(0, 0, b), &mut ev);
        }
        c.access(acc(SEC, 0, 0), &mut ev);
        assert_eq!(c.len(), 3 * 8);
        assert_eq!(c.placed_per_zone(), (2, 1));
        for b in 0..3 {
            assert!(c.contains(Key::new(0, b << 8).unwrap()));
        }
    }

    #[test]
    fn long_zone_keeps_long_term_hot_bins_through_a_burst() {
        // 4 bins: Z_L = 2, Z_S = 2. Tenant 0 has two steady hot bins; in
        // epoch 2 tenant 1 bursts over 10 new bins.
        let mut c = Grem::new(4 << 20, &cfg()).unwrap();
        let mut ev = Events::new();
        let mut t = 0;
        for _epoch in 0..2 {
            for _ in 0..20 {
                c.access(acc(t, 0, 0), &mut ev);
                c.access(acc(t, 0, 1), &mut ev);
            }
            for b in 10..12 {
                c.access(acc(t, 2, b), &mut ev);
            }
            t += SEC;
        }
        for b in 100..110 {
            for _ in 0..3 {
                c.access(acc(t, 1, b), &mut ev);
            }
        }
        t += SEC;
        // After the burst epoch: tenant 0's bins are still cached (Z_L), and
        // Z_S holds two of the burst's bins (ties by key: 100, 101).
        assert!(c.access(acc(t, 0, 0), &mut ev).hit);
        assert!(c.access(acc(t, 0, 1), &mut ev).hit);
        assert!(c.access(acc(t, 1, 100), &mut ev).hit);
        assert!(c.access(acc(t, 1, 101), &mut ev).hit);
        assert!(!c.access(acc(t, 1, 105), &mut ev).hit);
        let mut occ = vec![];
        c.occupancy(&mut occ);
        assert_eq!(
            occ[0].reserved_lines,
            Some(16),
            "tenant 0 reserves its 2 bins"
        );
        assert_eq!(occ[1].reserved_lines, Some(0));
        assert_eq!(occ[1].resident_lines, 16);
        let z = c.zones().unwrap();
        assert_eq!(z.long_term_lines + z.short_term_lines, c.capacity());
        ev.clear();
        c.resize(8, &mut ev).unwrap();
        assert!(c.len() <= 8);
        assert_eq!(ev.evicted.len(), 24);
        assert!(c.resize(7, &mut ev).is_err());
    }
}
