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
//! 2. `UpdateLongTermZone`: `Z_L` holds the bins with the highest history
//!    that fit in its `C_ZL` lines (all of them if they fit); bins that drop
//!    out form `evictBin`. A tenant's reservation `C_ZL(i)` is the size of its
//!    bins in `Z_L`, so reservations follow long-term popularity;
//! 3. `UpdateShortTermZone`: while the whole history fits in the cache
//!    (warm-up, case 1) every remaining history bin goes to `Z_S`; otherwise
//!    (case 2) the bins of the ended epoch that are not in `Z_L` compete on
//!    that epoch's counts: if there are at least `C_ZS` of them the top `C_ZS`
//!    win; else they all stay and the rest of `Z_S` is filled from the old
//!    `Z_S` and `evictBin` by history.
//!
//! Between epochs a miss does not admit: it is served by the disk.
//!
//! Zones and the cache are counted in lines, because a placed bin need not
//! take all its lines ([`crate::BinFill`]): with whole bins (the default)
//! every bin takes `bin_bytes / coarse_line_bytes` lines and the counts are
//! the paper's bin counts; with partial bins the top bins are taken best
//! first while they fit, passing over any that does not.

use crate::bins::{keep_top_lines, Bins, LONG, NOWHERE, SHORT};
use crate::policy::push_occupancy;
use crate::{
    bump, Access, CacheError, CachePolicy, Events, Key, Outcome, PolicyConfig, PolicyKind,
    TenantOccupancy, Zones,
};

/// Chooses the size of the short-term zone (in lines) at an epoch end,
/// before GREM refills the zones. GREM's is fixed; D-GREM's is its burst
/// detector.
pub(crate) trait ZoneSizer {
    /// The new `C_ZS` in lines (the caller clamps it to the cache).
    fn short_lines(&mut self, core: &GremCore) -> u64;
}

/// The two-zone machinery shared by GREM and D-GREM.
#[derive(Debug, Clone)]
pub(crate) struct GremCore {
    pub bins: Bins,
    kind: PolicyKind,
    aging: f64,
    /// `C_ZS` in lines; `C_ZL` is the rest.
    pub cap_short: u64,
    cand: Vec<(f64, u64, u32)>,
    zone: Vec<u8>,
    /// Long-term zone bins per tenant (the reservations).
    reserved: Vec<u64>,
}

impl GremCore {
    pub fn new(kind: PolicyKind, cache_bytes: u64, cfg: &PolicyConfig) -> Result<Self, CacheError> {
        let bins = Bins::new(kind, cache_bytes, cfg)?;
        let cap_short = bins.cap_bins / 2 * bins.lines_per_bin();
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

    /// `C_ZL` in lines.
    pub fn cap_long(&self) -> u64 {
        self.bins.cap_lines() - self.cap_short
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
            let s = sizer.short_lines(self);
            self.cap_short = s.min(self.bins.cap_lines());
            self.end_epoch(events);
        }
        if passed > 64 {
            self.bins.epoch_end = Some(a.time_ns + self.bins.epoch_ns);
        }
        let (i, hit) = self.bins.touch(a);
        let filled = !hit && self.bins.fill_on_miss(i, a, SHORT, events);
        Outcome {
            hit,
            admitted: false,
            filled,
        }
    }

    /// Algorithm 1, then the moves it implies.
    fn end_epoch(&mut self, events: &mut Events) {
        self.bins.adapt_fill();
        self.bins.age(self.aging);
        let n = self.bins.bins.len();
        let (cap_long, cap_short) = (self.cap_long(), self.cap_short);
        self.zone.clear();
        self.zone.resize(n, NOWHERE);

        // UpdateLongTermZone.
        self.cand.clear();
        for (i, b) in self.bins.bins.iter().enumerate() {
            if b.hist > 0.0 {
                self.cand.push((b.hist, b.key, i as u32));
            }
        }
        let history: u64 = self.cand.iter().map(|c| self.bins.footprint(c.2)).sum();
        keep_top_lines(&mut self.cand, cap_long, &self.bins);
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
            let want: u64 = self.cand.iter().map(|c| self.bins.footprint(c.2)).sum();
            if want >= cap_short {
                keep_top_lines(&mut self.cand, cap_short, &self.bins);
                for &(_, _, i) in &self.cand {
                    self.zone[i as usize] = SHORT;
                }
            } else {
                let room = cap_short - want;
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
                keep_top_lines(&mut self.cand, room, &self.bins);
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

    /// A tenant's reservation: the lines of its bins in `Z_L`.
    fn count_reserved(&mut self) {
        self.reserved.iter_mut().for_each(|r| *r = 0);
        for b in &self.bins.bins {
            if b.zone == LONG {
                bump(
                    &mut self.reserved,
                    b.tenant,
                    u64::from(b.cached.count_ones()),
                );
            }
        }
    }

    /// Changes the cache to `bins` bins with `short` lines in `Z_S`,
    /// evicting the least popular bins of each zone at once if it shrinks.
    pub fn resize_bins(&mut self, bins: u64, short: u64, events: &mut Events) {
        self.bins.cap_bins = bins;
        self.cap_short = short.min(self.bins.cap_lines());
        let caps = [0, self.cap_long(), self.cap_short];
        self.zone.clear();
        self.zone.resize(self.bins.bins.len(), NOWHERE);
        for z in [LONG, SHORT] {
            self.cand.clear();
            for (i, b) in self.bins.bins.iter().enumerate() {
                if b.zone == z {
                    self.cand.push((b.hist, b.key, i as u32));
                }
            }
            keep_top_lines(&mut self.cand, caps[z as usize], &self.bins);
            for &(_, _, i) in &self.cand {
                self.zone[i as usize] = z;
            }
        }
        self.bins.apply_shrink(&self.zone, events);
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
        self.bins.placed
    }

    pub fn occupancy(&self, out: &mut Vec<TenantOccupancy>) {
        push_occupancy(&self.bins.resident, Some(&self.reserved), out);
    }

    pub fn zones(&self) -> Zones {
        Zones {
            long_term_lines: self.cap_long(),
            short_term_lines: self.cap_short,
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
    fn short_lines(&mut self, core: &GremCore) -> u64 {
        core.bins.cap_bins / 2 * core.bins.lines_per_bin()
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
        let lpb = self.core.bins.lines_per_bin();
        self.core.resize_bins(bins, bins / 2 * lpb, events);
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

    /// Block `line` * 32 of `bin`: the first block of that 128 KiB line.
    fn at(t: u64, tenant: u32, bin: u64, line: u64) -> Access {
        Access {
            time_ns: t,
            tenant,
            key: Key::new(tenant, (bin << 8) + line * 32).unwrap(),
            write: false,
        }
    }

    fn with_fill(fill: crate::BinFill) -> PolicyConfig {
        PolicyConfig {
            bin_fill: fill,
            ..cfg()
        }
    }

    #[test]
    fn accessed_lines_take_only_the_lines_that_were_read() {
        // Ten bins with one line read each, in a cache of two bins.
        let mut whole = Grem::new(2 << 20, &cfg()).unwrap();
        let mut lines = Grem::new(2 << 20, &with_fill(crate::BinFill::AccessedLines)).unwrap();
        let mut ev = Events::new();
        for c in [&mut whole, &mut lines] {
            for b in 0..10 {
                c.access(at(0, 0, b, 0), &mut ev);
            }
        }
        let hits = |c: &mut Grem, ev: &mut Events| -> usize {
            (0..10)
                .filter(|&b| c.access(at(SEC, 0, b, 0), ev).hit)
                .count()
        };
        assert_eq!(hits(&mut whole, &mut ev), 2, "two whole bins fit");
        assert_eq!(hits(&mut lines, &mut ev), 10, "ten lines fit");
        assert_eq!(lines.len(), 10);
        assert_eq!(whole.len(), 16);
        // A line first read while its bin is placed misses, and is placed at
        // the next epoch end.
        assert!(!lines.access(at(SEC, 0, 3, 5), &mut ev).hit);
        ev.clear();
        assert!(lines.access(at(2 * SEC, 0, 3, 5), &mut ev).hit);
        assert_eq!(lines.len(), 11);
        assert_eq!(ev.migrated_in.len(), 1, "only the new line moved: {ev:?}");
    }

    #[test]
    fn adaptive_fill_places_neighbours_only_for_a_tenant_that_reads_them() {
        // Cache of 4 bins (32 lines). Tenant 0 rereads line 0 of 12 bins
        // four times an epoch (scattered); tenant 1 scans, reading the lines
        // of a bin in the epoch after it first touched it (its neighbours
        // are read, 32 blocks a line). Everything seen would take 12 + 8 x (bins of tenant 1)
        // lines, far over the cache, so the fill decides what fits.
        let mut c = Grem::new(4 << 20, &with_fill(crate::BinFill::Adaptive)).unwrap();
        let mut ev = Events::new();
        for e in 0..12u64 {
            let t = e * SEC;
            for _ in 0..4 {
                for b in 0..12 {
                    c.access(at(t, 0, b, 0), &mut ev);
                }
            }
            // Tenant 1 scans: the first line of bin 100 + e, then, block
            // by block, the rest of the bin it started in the epoch before.
            c.access(at(t, 1, 100 + e, 0), &mut ev);
            if e > 0 {
                for blk in 32..256 {
                    let key = Key::new(1, ((99 + e) << 8) + blk).unwrap();
                    c.access(
                        Access {
                            time_ns: t,
                            tenant: 1,
                            key,
                            write: false,
                        },
                        &mut ev,
                    );
                }
            }
            ev.clear();
        }
        assert!(
            !c.core.bins.places_whole(0),
            "the scattered tenant gets its lines only"
        );
        assert!(
            c.core.bins.places_whole(1),
            "the clustered tenant gets whole bins"
        );
        assert!(c.len() <= c.capacity());
        // The scattered tenant's twelve lines stay in flash.
        let t = 12 * SEC;
        let hits = (0..12)
            .filter(|&b| c.access(at(t, 0, b, 0), &mut ev).hit)
            .count();
        assert_eq!(hits, 12);
    }

    #[test]
    fn adaptive_fill_lends_free_flash_to_whole_bins() {
        // One tenant, scattered (one line per bin, reread), in a cache with
        // room for every bin whole: the space nobody else wants holds the
        // neighbours too.
        let mut c = Grem::new(8 << 20, &with_fill(crate::BinFill::Adaptive)).unwrap();
        let mut ev = Events::new();
        for e in 0..4u64 {
            for b in 0..4 {
                for _ in 0..8 {
                    c.access(at(e * SEC, 0, b, 0), &mut ev);
                }
            }
        }
        assert!(!c.core.bins.places_whole(0));
        assert_eq!(c.len(), 32, "four whole bins in the free flash");
        assert!(c.access(at(4 * SEC, 0, 2, 7), &mut ev).hit);
    }

    #[test]
    fn free_flash_takes_a_read_miss_at_once_and_evicts_nothing_for_it() {
        let cfg = PolicyConfig {
            fill_free_flash: true,
            ..cfg()
        };
        // One bin of flash: eight lines.
        let mut c = Grem::new(1 << 20, &cfg).unwrap();
        let mut ev = Events::new();
        let o = c.access(at(0, 0, 5, 0), &mut ev);
        assert!(!o.hit && o.filled);
        assert_eq!(ev.migrated_in, vec![Key::new(0, 5 << 3).unwrap()]);
        assert!(c.access(at(0, 0, 5, 0), &mut ev).hit, "the next read hits");
        // A write miss does not fill (its data goes to the disk).
        let w = Access {
            write: true,
            ..at(0, 0, 5, 1)
        };
        assert!(!c.access(w, &mut ev).filled);
        // Seven more lines fill the flash; the ninth finds none and nothing
        // is evicted for it.
        for b in 6..13 {
            assert!(c.access(at(0, 0, b, 0), &mut ev).filled);
        }
        ev.clear();
        let o = c.access(at(0, 0, 20, 0), &mut ev);
        assert!(!o.hit && !o.filled);
        assert!(ev.evicted.is_empty() && ev.migrated_in.is_empty());
        assert_eq!(c.len(), c.capacity());
        // Off by default: a miss between epochs is served by the disk only.
        let mut paper = Grem::new(1 << 20, &super::tests::cfg()).unwrap();
        assert!(!paper.access(at(0, 0, 5, 0), &mut ev).filled);
        assert_eq!(paper.len(), 0);
    }
}
