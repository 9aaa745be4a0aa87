//! VMware vFRM (Liu et al., NOMS'14; Tai et al.): flash split into per-tenant
//! reservations, popularity kept per 1 MiB bin in a heat map, and the flash
//! content updated lazily once per epoch (5 minutes) in 128 KiB lines.
//!
//! Model used here, since neither paper gives pseudocode: every tenant seen
//! so far gets an equal share of the cache's bins (the remainder goes to the
//! lowest tenant ids). At each epoch end a tenant's share is filled with its
//! bins most accessed during the epoch that just ended; if it accessed fewer
//! bins than its share, its already-cached bins stay (most recently used
//! first) — content moves only when something hotter replaces it, which is
//! the "lazy" update. There is no long-term memory: a burst in one epoch
//! replaces the tenant's critical data, which is the weakness GREM's
//! long-term zone addresses. (The GREM paper's Section II-B groups vFRM with
//! the fair-competition schemes; its evaluation treats it as the coarse-grained
//! baseline; we follow the description, per-tenant reservations.)
//! Between epochs nothing is admitted: a miss is served by the disk.

use crate::bins::{keep_top, Bins, LONG, NOWHERE};
use crate::policy::push_occupancy;
use crate::{
    Access, CacheError, CachePolicy, Events, Key, Outcome, PolicyConfig, PolicyKind,
    TenantOccupancy,
};

/// vFRM.
#[derive(Debug, Clone)]
pub struct Vfrm {
    bins: Bins,
    shares: Vec<u64>,
    scratch: Vec<Vec<(f64, u64, u32)>>,
    zone: Vec<u8>,
}

impl Vfrm {
    /// A cache of `cache_bytes` (whole bins of `cfg.bin_bytes`).
    pub fn new(cache_bytes: u64, cfg: &PolicyConfig) -> Result<Self, CacheError> {
        Ok(Vfrm {
            bins: Bins::new(PolicyKind::Vfrm, cache_bytes, cfg)?,
            shares: Vec::new(),
            scratch: Vec::new(),
            zone: Vec::new(),
        })
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
        self.compute_shares();
        let n = self.shares.len();
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
            self.scratch[b.tenant as usize].push((score, b.key, i as u32));
        }
        self.zone.clear();
        self.zone.resize(self.bins.bins.len(), NOWHERE);
        for (t, v) in self.scratch.iter_mut().enumerate() {
            keep_top(v, self.shares[t] as usize);
            for &(_, _, i) in v.iter() {
                self.zone[i as usize] = LONG;
            }
        }
        self.bins.apply(&self.zone, events);
        self.bins.age(0.0);
        self.bins.reset();
        self.bins.next_epoch();
    }
}

impl CachePolicy for Vfrm {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Vfrm
    }

    fn line_blocks(&self) -> u64 {
        1 << self.bins.line_shift
    }

    fn capacity(&self) -> u64 {
        self.bins.cap_bins * self.bins.lines_per_bin()
    }

    fn len(&self) -> u64 {
        self.bins.placed * self.bins.lines_per_bin()
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
        let (_, hit) = self.bins.touch(a);
        Outcome {
            hit,
            admitted: false,
        }
    }

    fn contains(&self, key: Key) -> bool {
        self.bins.contains(key)
    }

    fn resize(&mut self, total_lines: u64, events: &mut Events) -> Result<(), CacheError> {
        let bins = total_lines / self.bins.lines_per_bin();
        if bins == 0 {
            return Err(CacheError::Config(format!(
                "cannot resize vfrm to {total_lines} lines: less than one bin ({} lines)",
                self.bins.lines_per_bin()
            )));
        }
        self.bins.cap_bins = bins;
        self.compute_shares();
        // Shrink each tenant's placement to its new share at once.
        let mut per: Vec<Vec<(f64, u64, u32)>> = vec![Vec::new(); self.shares.len()];
        for (i, b) in self.bins.bins.iter().enumerate() {
            if b.zone != NOWHERE {
                per[b.tenant as usize].push((b.last_epoch as f64, b.key, i as u32));
            }
        }
        self.zone.clear();
        self.zone.resize(self.bins.bins.len(), NOWHERE);
        for (t, v) in per.iter_mut().enumerate() {
            keep_top(v, self.shares[t] as usize);
            for &(_, _, i) in v.iter() {
                self.zone[i as usize] = LONG;
            }
        }
        self.bins.apply(&self.zone, events);
        Ok(())
    }

    fn occupancy(&self, out: &mut Vec<TenantOccupancy>) {
        let lpb = self.bins.lines_per_bin();
        let res: Vec<u64> = self.bins.resident.iter().map(|b| b * lpb).collect();
        let shares: Vec<u64> = self.shares.iter().map(|b| b * lpb).collect();
        push_occupancy(&res, Some(&shares), out);
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
        let mut c = Vfrm::new(4 << 20, &cfg).unwrap();
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
}
