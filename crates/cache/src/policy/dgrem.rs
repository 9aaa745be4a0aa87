//! D-GREM: GREM whose zone sizes follow the workload (Section III-C of the
//! paper). At every epoch end, before GREM refills the zones:
//!
//! * the **burst detector** compares the working set (distinct bins) of the
//!   current sliding window with the previous one:
//!   `B_d = ||WS_cur| - |WS_prev|| / |WS_cur|` (Eq. 2); bursty when `B_d > β`
//!   (β = 0.6). The window is `window_epochs` epochs (the paper's example:
//!   5 minutes, one epoch) and slides by one epoch;
//! * **non-bursty**: the contribution ratio `ρ = α · HV_L / HV_S` (Eq. 3,
//!   α = 0.35) of the zones' hit volumes in the ended epoch (distinct blocks
//!   hit in each zone) sets `C_ZS = C_T / (1 + ρ)` (Eq. 4). With no hits at
//!   all the sizes stay; with hits only in `Z_L`, `Z_S` goes to its minimum;
//! * **bursty**: the threshold rule. `B_SWLt` are the window's bins cached in
//!   `Z_L`; `Th = γ · mean(accesses of B_SWLt)` (Eq. 5, γ = 1.2); `B_SWQf` are
//!   the window's bins outside `Z_L` accessed more than `Th` times (Eq. 6);
//!   `C_ZS = |B_SWQf|` (Eq. 7);
//! * a boundary check keeps each zone at least `min_zone_fraction` of the
//!   cache (rounded down to bins).
//!
//! Zones start at half the cache each, as in GREM.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::bins::LONG;
use crate::policy::grem::{GremCore, ZoneSizer};
use crate::{
    Access, CacheError, CachePolicy, Events, Key, Outcome, PolicyConfig, PolicyKind,
    TenantOccupancy, Zones,
};

/// What the burst detector decided at the last epoch end.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BurstState {
    /// Bursty degree `B_d` of the last window.
    pub degree: f64,
    /// Whether `B_d > β`.
    pub bursty: bool,
    /// Epoch ends seen, and how many of them were bursty.
    pub epochs: u64,
    /// Bursty epoch ends.
    pub bursty_epochs: u64,
}

/// The burst detector and strategy switcher.
#[derive(Debug, Clone)]
struct Detector {
    alpha: f64,
    beta: f64,
    gamma: f64,
    window: usize,
    min_fraction: f64,
    /// Per-epoch (bin key, accesses), newest last; at most two windows.
    ring: VecDeque<Vec<(u64, u32)>>,
    spare: Vec<Vec<(u64, u32)>>,
    counts: FxHashMap<u64, u64>,
    state: BurstState,
}

impl Detector {
    fn min_bins(&self, total: u64) -> u64 {
        (self.min_fraction * total as f64).floor() as u64
    }

    fn distinct(&mut self, epochs: std::ops::Range<usize>) -> usize {
        if epochs.len() == 1 {
            return self.ring[epochs.start].len();
        }
        self.counts.clear();
        for e in epochs {
            for &(k, n) in &self.ring[e] {
                *self.counts.entry(k).or_insert(0) += u64::from(n);
            }
        }
        self.counts.len()
    }
}

impl ZoneSizer for Detector {
    fn short_lines(&mut self, core: &GremCore) -> u64 {
        let total = core.bins.cap_bins;
        let lpb = core.bins.lines_per_bin();
        // Record the ended epoch.
        let mut list = self.spare.pop().unwrap_or_default();
        list.clear();
        list.extend(core.bins.touched.iter().map(|&i| {
            let b = &core.bins.bins[i as usize];
            (b.key, b.curr)
        }));
        self.ring.push_back(list);
        if self.ring.len() > 2 * self.window {
            let old = self.ring.pop_front().expect("non-empty");
            self.spare.push(old);
        }
        let n = self.ring.len();
        let cur_start = n.saturating_sub(self.window);
        let prev_start = cur_start.saturating_sub(self.window);
        let ws_prev = if cur_start > prev_start {
            self.distinct(prev_start..cur_start)
        } else {
            0
        };
        let ws_cur = self.distinct(cur_start..n); // leaves the window's counts in `counts` when it spans epochs
        let degree = if ws_cur == 0 {
            0.0
        } else {
            (ws_cur as f64 - ws_prev as f64).abs() / ws_cur as f64
        };
        let bursty = degree > self.beta;
        self.state.degree = degree;
        self.state.bursty = bursty;
        self.state.epochs += 1;
        self.state.bursty_epochs += u64::from(bursty);

        let want = if bursty {
            // Threshold rule over the window's access counts.
            let counts: Vec<(u64, u64)> = if n - cur_start == 1 {
                self.ring[cur_start]
                    .iter()
                    .map(|&(k, c)| (k, u64::from(c)))
                    .collect()
            } else {
                self.counts.iter().map(|(&k, &c)| (k, c)).collect()
            };
            let in_long = |k: u64| {
                core.bins
                    .map
                    .get(&k)
                    .is_some_and(|&i| core.bins.bins[i as usize].zone == LONG)
            };
            // A qualifying bin asks for the flash it would take.
            let footprint = |k: u64| {
                core.bins
                    .map
                    .get(&k)
                    .map_or(lpb, |&i| core.bins.footprint(i))
            };
            let (mut sum, mut lt) = (0u64, 0u64);
            for &(k, c) in &counts {
                if in_long(k) {
                    sum += c;
                    lt += 1;
                }
            }
            let th = if lt == 0 {
                0.0
            } else {
                self.gamma * sum as f64 / lt as f64
            };
            counts
                .iter()
                .filter(|&&(k, c)| !in_long(k) && c as f64 > th)
                .map(|&(k, _)| footprint(k))
                .sum::<u64>()
        } else {
            let hv_l = core.bins.hit_volume[LONG as usize];
            let hv_s = core.bins.hit_volume[crate::bins::SHORT as usize];
            if hv_l == 0 && hv_s == 0 {
                core.cap_short
            } else if hv_s == 0 {
                0
            } else {
                let rho = self.alpha * hv_l as f64 / hv_s as f64;
                (total as f64 / (1.0 + rho)).round() as u64 * lpb
            }
        };
        let min = self.min_bins(total) * lpb;
        want.clamp(min, total * lpb - min)
    }
}

/// D-GREM.
#[derive(Debug, Clone)]
pub struct Dgrem {
    core: GremCore,
    detector: Detector,
}

impl Dgrem {
    /// A cache of `cache_bytes` (whole bins of `cfg.bin_bytes`).
    pub fn new(cache_bytes: u64, cfg: &PolicyConfig) -> Result<Self, CacheError> {
        Ok(Dgrem {
            core: GremCore::new(PolicyKind::Dgrem, cache_bytes, cfg)?,
            detector: Detector {
                alpha: cfg.alpha,
                beta: cfg.beta,
                gamma: cfg.gamma,
                window: cfg.window_epochs as usize,
                min_fraction: cfg.min_zone_fraction,
                ring: VecDeque::new(),
                spare: Vec::new(),
                counts: FxHashMap::default(),
                state: BurstState::default(),
            },
        })
    }

    /// The burst detector's last decision and counts.
    pub fn burst_state(&self) -> BurstState {
        self.detector.state
    }

    /// Minimum size of each zone, in lines.
    pub fn min_zone_lines(&self) -> u64 {
        self.detector.min_bins(self.core.bins.cap_bins) * self.core.bins.lines_per_bin()
    }

    /// Bins placed in each zone now: (long-term, short-term).
    pub fn placed_per_zone(&self) -> (u64, u64) {
        self.core.placed_per_zone()
    }
}

impl CachePolicy for Dgrem {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Dgrem
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
        self.core.access(a, events, &mut self.detector)
    }

    fn contains(&self, key: Key) -> bool {
        self.core.bins.contains(key)
    }

    fn resize(&mut self, total_lines: u64, events: &mut Events) -> Result<(), CacheError> {
        let bins = self.core.resize_lines(total_lines)?;
        let old = self.core.bins.cap_bins;
        let lpb = self.core.bins.lines_per_bin();
        // Z_S keeps its share of the cache, in whole bins' worth of lines.
        let short = (self.core.cap_short as u128 * bins as u128 / old as u128) as u64 / lpb;
        let min = self.detector.min_bins(bins);
        self.core
            .resize_bins(bins, short.clamp(min, bins - min) * lpb, events);
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

    #[test]
    fn a_burst_grows_the_short_zone_and_calm_shrinks_it() {
        let cfg = PolicyConfig {
            epoch_secs: 1.0,
            ..PolicyConfig::default()
        };
        // 20 bins; min zone 2 bins.
        let mut c = Dgrem::new(20 << 20, &cfg).unwrap();
        let mut ev = Events::new();
        assert_eq!(c.min_zone_lines(), 16);
        let steady = |c: &mut Dgrem, ev: &mut Events, t: u64| {
            for _ in 0..10 {
                for b in 0..4 {
                    c.access(acc(t, 0, b), ev);
                }
            }
        };
        // Epochs 0..3: the same 4 hot bins (calm after the first).
        for e in 0..4 {
            steady(&mut c, &mut ev, e * SEC);
        }
        let s = c.burst_state();
        assert!(!s.bursty, "{s:?}");
        // Every hit is in Z_L (the warm-up put the 4 bins there): rho is
        // infinite and Z_S shrinks to its minimum.
        assert_eq!(c.zones().unwrap().short_term_lines, 16);
        // Epoch 4: tenant 1 bursts over 30 new bins, 20 accesses each.
        steady(&mut c, &mut ev, 4 * SEC);
        for b in 100..130 {
            for _ in 0..20 {
                c.access(acc(4 * SEC, 1, b), &mut ev);
            }
        }
        c.access(acc(5 * SEC, 0, 0), &mut ev);
        let s = c.burst_state();
        assert!(s.bursty && s.degree > 0.6, "{s:?}");
        // Th = 1.2 * 10 = 12 < 20: all 30 burst bins qualify; Z_S is capped
        // at 20 - 2 = 18 bins.
        let z = c.zones().unwrap();
        assert_eq!(z.short_term_lines, 18 * 8);
        assert_eq!(z.long_term_lines + z.short_term_lines, c.capacity());
        assert!(c.len() <= c.capacity());
        let (_, short) = c.placed_per_zone();
        assert_eq!(short, 18);
    }
}
