//! VMware vFRM (Liu et al., NOMS'14; Tai et al.): one flash pool shared by
//! every tenant, popularity kept per 1 MiB bin in a heat map, and the flash
//! content updated lazily once per epoch (5 minutes) in 128 KiB lines.
//!
//! The GREM paper (Section II-B, its refs [10] and [11]) classes vFRM as
//! *fair competition*: tenants compete for the whole pool, and at each epoch
//! end the content follows global bin popularity. Model used here, since
//! neither paper gives pseudocode: at each epoch end the pool is filled with
//! the bins most accessed during the epoch that just ended, whoever owns
//! them; if fewer bins were accessed than the pool holds, already-cached bins
//! stay (most recently used first). Content moves only when something hotter
//! replaces it, which is the "lazy" update. There is no long-term memory: a
//! burst in one epoch replaces everyone's critical data, which is the
//! weakness GREM's long-term zone addresses. Between epochs nothing is
//! admitted: a miss is served by the disk.
//!
//! The same mechanics with the pool split into equal per-tenant reservations
//! is the paper's *performance isolation* baseline: [`super::isolation`],
//! built here with [`Sharing::PerTenant`].

use crate::bins::{keep_top_lines, Bins, LONG, NOWHERE};
use crate::policy::push_occupancy;
use crate::{
    Access, CacheError, CachePolicy, Events, Key, Outcome, PolicyConfig, PolicyKind,
    TenantOccupancy,
};

/// How the pool is divided among tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// One pool, filled by global bin popularity (vFRM as published).
    Fair,
    /// Equal per-tenant reservations, each filled by its own tenant's bin
    /// popularity (performance isolation).
    PerTenant,
}

/// vFRM.
#[derive(Debug, Clone)]
pub struct Vfrm {
    sharing: Sharing,
    bins: Bins,
    shares: Vec<u64>,
    scratch: Vec<Vec<(f64, u64, u32)>>,
    zone: Vec<u8>,
}

impl Vfrm {
    /// A cache of `cache_bytes` (whole bins of `cfg.bin_bytes`), one pool
    /// shared by fair competition.
    pub fn new(cache_bytes: u64, cfg: &PolicyConfig) -> Result<Self, CacheError> {
        Self::with_sharing(cache_bytes, cfg, Sharing::Fair)
    }

    /// The same, with the pool divided as `sharing` says.
    pub fn with_sharing(
        cache_bytes: u64,
        cfg: &PolicyConfig,
        sharing: Sharing,
    ) -> Result<Self, CacheError> {
        let kind = match sharing {
            Sharing::Fair => PolicyKind::Vfrm,
            Sharing::PerTenant => PolicyKind::Isolation,
        };
        Ok(Vfrm {
            sharing,
            bins: Bins::new(kind, cache_bytes, cfg)?,
            shares: Vec::new(),
            scratch: Vec::new(),
            zone: Vec::new(),
        })
    }

    /// Which tenant's candidate list a bin of `tenant` competes in.
    fn pool_of(&self, tenant: u32) -> usize {
        match self.sharing {
            Sharing::Fair => 0,
            Sharing::PerTenant => tenant as usize,
        }
    }

    /// Lines the candidate list `pool` may keep.
    fn room(&self, pool: usize) -> u64 {
        match self.sharing {
            Sharing::Fair => self.bins.cap_lines(),
            Sharing::PerTenant => self.shares[pool] * self.bins.lines_per_bin(),
        }
    }

    fn compute_shares(&mut self) {
        let n = self
            .bins
            .bins
            .iter()
            .map(|b| b.tenant as usize + 1)
            .max()
            .unwrap_or(0)
            .max(self.shares.len());
        let mut seen = vec![false; n];
        for b in &self.bins.bins {
            seen[b.tenant as usize] = true;
        }
        for (t, s) in self.shares.iter().enumerate() {
            seen[t] |= *s > 0;
        }
        let k = seen.iter().filter(|s| **s).count() as u64;
        self.shares = vec![0; n];
        if k == 0 {
            return;
        }
        let (each, mut extra) = (self.bins.cap_bins / k, self.bins.cap_bins % k);
        for (t, s) in seen.iter().enumerate() {
            if *s {
                self.shares[t] = each + u64::from(extra > 0);
                extra = extra.saturating_sub(1);
            }
        }
    }

    fn end_epoch(&mut self, events: &mut Events) {
        self.bins.adapt_fill();
        self.compute_shares();
        let n = match self.sharing {
            Sharing::Fair => 1,
            Sharing::PerTenant => self.shares.len(),
        };
        self.scratch.resize_with(n, Vec::new);
        for v in &mut self.scratch {
            v.clear();
        }
        // Accessed bins compete on this epoch's counts; cached bins that
        // were not accessed keep their place behind them, most recent first.
        let epoch = self.bins.epoch;
        for (i, b) in self.bins.bins.iter().enumerate() {
            let score = if b.curr > 0 {
                1e12 + f64::from(b.curr)
            } else if b.zone != NOWHERE {
                -((epoch - b.last_epoch.min(epoch)) as f64)
            } else {
                continue;
            };
            let pool = self.pool_of(b.tenant);
            self.scratch[pool].push((score, b.key, i as u32));
        }
        self.zone.clear();
        self.zone.resize(self.bins.bins.len(), NOWHERE);
        let mut scratch = std::mem::take(&mut self.scratch);
        for (t, v) in scratch.iter_mut().enumerate() {
            keep_top_lines(v, self.room(t), &self.bins);
            for &(_, _, i) in v.iter() {
                self.zone[i as usize] = LONG;
            }
        }
        self.scratch = scratch;
        self.bins.apply(&self.zone, events);
        self.bins.age(0.0);
        self.bins.reset();
        self.bins.next_epoch();
    }
}

impl CachePolicy for Vfrm {
    fn kind(&self) -> PolicyKind {
        match self.sharing {
            Sharing::Fair => PolicyKind::Vfrm,
            Sharing::PerTenant => PolicyKind::Isolation,
        }
    }

    fn line_blocks(&self) -> u64 {
        1 << self.bins.line_shift
    }

    fn capacity(&self) -> u64 {
        self.bins.cap_bins * self.bins.lines_per_bin()
    }

    fn len(&self) -> u64 {
        self.bins.placed
    }

    #[inline]
    fn access(&mut self, a: Access, events: &mut Events) -> Outcome {
        let passed = self.bins.epochs_passed(a.time_ns);
        for _ in 0..passed.min(64) {
            self.end_epoch(events);
        }
        if passed > 64 {
            self.bins.epoch_end = Some(a.time_ns + self.bins.epoch_ns);
        }
        let (i, hit) = self.bins.touch(a);
        let filled = !hit && self.bins.fill_on_miss(i, a, LONG, events);
        Outcome {
            hit,
            admitted: false,
            filled,
        }
    }

    fn contains(&self, key: Key) -> bool {
        self.bins.contains(key)
    }

    fn resize(&mut self, total_lines: u64, events: &mut Events) -> Result<(), CacheError> {
        let bins = total_lines / self.bins.lines_per_bin();
        if bins == 0 {
            return Err(CacheError::Config(format!(
                "cannot resize {} to {total_lines} lines: less than one bin ({} lines)",
                self.kind(),
                self.bins.lines_per_bin()
            )));
        }
        self.bins.cap_bins = bins;
        self.compute_shares();
        // Shrink the placement (each tenant's, under isolation) to the new
        // size at once, keeping the most recently used bins.
        let n = match self.sharing {
            Sharing::Fair => 1,
            Sharing::PerTenant => self.shares.len(),
        };
        let mut per: Vec<Vec<(f64, u64, u32)>> = vec![Vec::new(); n];
        for (i, b) in self.bins.bins.iter().enumerate() {
            if b.zone != NOWHERE {
                per[self.pool_of(b.tenant)].push((b.last_epoch as f64, b.key, i as u32));
            }
        }
        self.zone.clear();
        self.zone.resize(self.bins.bins.len(), NOWHERE);
        for (t, v) in per.iter_mut().enumerate() {
            keep_top_lines(v, self.room(t), &self.bins);
            for &(_, _, i) in v.iter() {
                self.zone[i as usize] = LONG;
            }
        }
        self.bins.apply_shrink(&self.zone, events);
        Ok(())
    }

    fn occupancy(&self, out: &mut Vec<TenantOccupancy>) {
        let lpb = self.bins.lines_per_bin();
        let res = &self.bins.resident;
        match self.sharing {
            Sharing::Fair => push_occupancy(res, None, out),
            Sharing::PerTenant => {
                let shares: Vec<u64> = self.shares.iter().map(|b| b * lpb).collect();
                push_occupancy(res, Some(&shares), out);
            }
        }
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

    #[test]
    fn tenants_get_equal_shares_filled_with_last_epoch_hot_bins() {
        let cfg = PolicyConfig {
            epoch_secs: 1.0,
            ..PolicyConfig::default()
        };
        // 4 bins, 2 tenants: 2 each.
        let mut c = Vfrm::with_sharing(4 << 20, &cfg, Sharing::PerTenant).unwrap();
        let mut ev = Events::new();
        // Epoch 0: tenant 0 touches bins 0..5 (bin 4 most), tenant 1 bin 9.
        for b in 0..5 {
            for _ in 0..=b {
                assert!(!c.access(acc(0, 0, b), &mut ev).hit);
            }
        }
        c.access(acc(0, 1, 9), &mut ev);
        assert!(ev.is_empty(), "nothing moves inside an epoch");
        // Epoch 1 begins: tenant 0 keeps its two hottest (4, 3), tenant 1 its one.
        assert!(c.access(acc(SEC, 0, 4), &mut ev).hit);
        assert!(c.access(acc(SEC, 0, 3), &mut ev).hit);
        assert!(!c.access(acc(SEC, 0, 2), &mut ev).hit);
        assert!(c.access(acc(SEC, 0, 4), &mut ev).hit);
        assert!(c.access(acc(SEC, 0, 3), &mut ev).hit);
        assert!(c.access(acc(SEC, 1, 9), &mut ev).hit);
        assert_eq!(
            ev.migrated_in.len(),
            3 * 8,
            "three bins of eight 128 KiB lines"
        );
        let mut occ = vec![];
        c.occupancy(&mut occ);
        assert_eq!(occ[0].reserved_lines, Some(16));
        assert_eq!(occ[0].resident_lines, 16);
        assert_eq!(occ[1].resident_lines, 8);
        assert_eq!(c.len(), 24);
        assert!(c.len() <= c.capacity());
        // Epoch 2: in epoch 1 tenant 0 touched 4 and 3 twice, 2 once: 2
        // stays out.
        assert!(!c.access(acc(2 * SEC, 0, 2), &mut ev).hit);
        ev.clear();
        c.resize(8, &mut ev).unwrap();
        assert_eq!(c.capacity(), 8);
        assert!(c.len() <= 8);
        assert!(!ev.evicted.is_empty());
    }

    #[test]
    fn fair_competition_fills_the_pool_by_global_popularity() {
        let cfg = PolicyConfig {
            epoch_secs: 1.0,
            ..PolicyConfig::default()
        };
        // 4 bins shared: tenant 0's four hot bins beat tenant 1's one cold bin,
        // which isolation would have kept (half the pool is tenant 1's there).
        let mut c = Vfrm::new(4 << 20, &cfg).unwrap();
        let mut iso = Vfrm::with_sharing(4 << 20, &cfg, Sharing::PerTenant).unwrap();
        let mut ev = Events::new();
        for p in [&mut c, &mut iso] {
            for b in 0..4 {
                for _ in 0..3 {
                    p.access(acc(0, 0, b), &mut ev);
                }
            }
            p.access(acc(0, 1, 9), &mut ev);
        }
        for b in 0..4 {
            assert!(c.access(acc(SEC, 0, b), &mut ev).hit, "fair: bin {b}");
        }
        assert!(!c.access(acc(SEC, 1, 9), &mut ev).hit);
        assert_eq!(c.kind(), PolicyKind::Vfrm);
        let mut occ = vec![];
        c.occupancy(&mut occ);
        assert_eq!(occ[0].resident_lines, 32);
        assert_eq!(occ[0].reserved_lines, None, "no reservations in one pool");
        // Isolation: 2 bins each; tenant 1's cold bin is in, two of 0's are out.
        assert!(iso.access(acc(SEC, 1, 9), &mut ev).hit);
        let hits = (0..4)
            .filter(|&b| iso.access(acc(SEC, 0, b), &mut ev).hit)
            .count();
        assert_eq!(hits, 2);
        assert_eq!(iso.kind(), PolicyKind::Isolation);
    }
}
