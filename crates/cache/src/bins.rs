//! Per-bin bookkeeping shared by the coarse, epoch-based policies (vFRM,
//! GREM, D-GREM): a bin table with access counts, aged popularity, placement
//! and a hit bitmap, plus the epoch clock.
//!
//! Why a shared table: the three policies differ only in how they choose the
//! bins to cache at the end of an epoch. What happens on an access (find the
//! bin, count it, hit if placed) is the same, and it is their hot path, so it
//! is written once: one hash lookup per access, skipped when consecutive
//! blocks fall into the same bin (the usual case for large requests).

use std::cmp::Ordering;

use crate::list::{index_with_capacity, Index};
use crate::{bump, Access, CacheError, Events, Key, PolicyConfig, PolicyKind, BLOCK_BYTES};

/// Where a bin is.
pub(crate) const NOWHERE: u8 = 0;
/// In the long-term zone (GREM) or a tenant's reservation (vFRM).
pub(crate) const LONG: u8 = 1;
/// In the short-term zone (GREM).
pub(crate) const SHORT: u8 = 2;

/// Bits of the hit bitmap: blocks of a bin beyond 256 share bits.
const HIT_BITS: u64 = 256;

#[derive(Debug, Clone)]
pub(crate) struct Bin {
    /// Bin key (space, bin number).
    pub key: u64,
    pub tenant: u32,
    /// Accesses (blocks) in the current epoch.
    pub curr: u32,
    /// The last epoch (number) with an access.
    pub last_epoch: u64,
    /// Aged long-term popularity (GREM's historyBin value).
    pub hist: f64,
    pub zone: u8,
    /// Blocks hit in the current epoch, to measure hit *volume*.
    hits: [u64; 4],
}

/// The bin table and epoch clock.
#[derive(Debug, Clone)]
pub(crate) struct Bins {
    pub map: Index,
    pub bins: Vec<Bin>,
    memo_key: u64,
    memo_idx: u32,
    /// log2 of blocks per line and per bin.
    pub line_shift: u32,
    pub bin_shift: u32,
    /// Capacity in bins.
    pub cap_bins: u64,
    pub epoch_ns: u64,
    /// End of the current epoch; `None` before the first access.
    pub epoch_end: Option<u64>,
    /// Number of the current epoch.
    pub epoch: u64,
    /// Bins accessed in the current epoch (indices into `bins`).
    pub touched: Vec<u32>,
    /// Distinct blocks hit in the current epoch, per zone (index by zone).
    pub hit_volume: [u64; 3],
    /// Bins placed, per tenant.
    pub resident: Vec<u64>,
    /// Bins placed in all.
    pub placed: u64,
}

impl Bins {
    pub fn new(
        policy: PolicyKind,
        cache_bytes: u64,
        cfg: &PolicyConfig,
    ) -> Result<Self, CacheError> {
        let cap_bins = cache_bytes / cfg.bin_bytes;
        if cap_bins == 0 {
            return Err(CacheError::TooSmall {
                policy,
                bytes: cache_bytes,
                min_bytes: cfg.bin_bytes,
                why: "one bin",
            });
        }
        Ok(Bins {
            map: index_with_capacity(4 * cap_bins),
            bins: Vec::new(),
            memo_key: u64::MAX,
            memo_idx: 0,
            line_shift: (cfg.coarse_line_bytes / BLOCK_BYTES).trailing_zeros(),
            bin_shift: (cfg.bin_bytes / BLOCK_BYTES).trailing_zeros(),
            cap_bins,
            epoch_ns: cfg.epoch_ns(),
            epoch_end: None,
            epoch: 0,
            touched: Vec::new(),
            hit_volume: [0; 3],
            resident: Vec::new(),
            placed: 0,
        })
    }

    /// Lines per bin.
    pub fn lines_per_bin(&self) -> u64 {
        1 << (self.bin_shift - self.line_shift)
    }

    /// Number of epoch ends that `time_ns` has passed (0 when still inside
    /// the current epoch). Starts the clock on the first access.
    #[inline]
    pub fn epochs_passed(&mut self, time_ns: u64) -> u64 {
        match self.epoch_end {
            None => {
                self.epoch_end = Some(time_ns.saturating_add(self.epoch_ns));
                0
            }
            Some(end) if time_ns < end => 0,
            Some(end) => 1 + (time_ns - end) / self.epoch_ns,
        }
    }

    /// Moves the epoch clock on by one epoch.
    pub fn next_epoch(&mut self) {
        if let Some(end) = self.epoch_end.as_mut() {
            *end = end.saturating_add(self.epoch_ns);
        }
        self.epoch += 1;
    }

    /// Counts one access to its bin; returns the bin index and whether the
    /// block was cached.
    #[inline]
    pub fn touch(&mut self, a: Access) -> (u32, bool) {
        let key = a.key.coarsen(self.bin_shift).raw();
        let i = if key == self.memo_key {
            self.memo_idx
        } else {
            let i = match self.map.get(&key) {
                Some(&i) => i,
                None => {
                    let i = self.bins.len() as u32;
                    self.bins.push(Bin {
                        key,
                        tenant: a.tenant,
                        curr: 0,
                        last_epoch: 0,
                        hist: 0.0,
                        zone: NOWHERE,
                        hits: [0; 4],
                    });
                    self.map.insert(key, i);
                    i
                }
            };
            self.memo_key = key;
            self.memo_idx = i;
            i
        };
        let epoch = self.epoch;
        let b = &mut self.bins[i as usize];
        if b.curr == 0 {
            self.touched.push(i);
        }
        b.curr += 1;
        b.last_epoch = epoch;
        let hit = b.zone != NOWHERE;
        if hit {
            let blocks = 1u64 << self.bin_shift;
            let off = a.key.line() & (blocks - 1);
            let bit = if blocks > HIT_BITS {
                off * HIT_BITS / blocks
            } else {
                off
            };
            let (w, m) = ((bit / 64) as usize, 1u64 << (bit % 64));
            if b.hits[w] & m == 0 {
                b.hits[w] |= m;
                self.hit_volume[b.zone as usize] += 1;
            }
        }
        (i, hit)
    }

    /// Whether the bin holding block `key` is placed.
    pub fn contains(&self, key: Key) -> bool {
        self.map
            .get(&key.coarsen(self.bin_shift).raw())
            .is_some_and(|&i| self.bins[i as usize].zone != NOWHERE)
    }

    /// Sets bin `i`'s zone, reporting lines moved in or out.
    pub fn place(&mut self, i: u32, zone: u8, events: &mut Events) {
        let lpb = self.lines_per_bin();
        let shift = self.bin_shift - self.line_shift;
        let b = &mut self.bins[i as usize];
        let (was, key, tenant) = (b.zone, b.key, b.tenant);
        b.zone = zone;
        let first = Key::from_raw(key);
        let lines = (0..lpb).map(|l| {
            Key::from_raw((first.raw() & !crate::MAX_LINE) | ((first.line() << shift) + l))
        });
        if was == NOWHERE && zone != NOWHERE {
            events.migrated_in.extend(lines);
            bump(&mut self.resident, tenant, 1);
            self.placed += 1;
        } else if was != NOWHERE && zone == NOWHERE {
            events.evicted.extend(lines);
            self.resident[tenant as usize] -= 1;
            self.placed -= 1;
        }
    }

    /// Assigns every bin the zone in `new_zone` (indexed like `bins`),
    /// evicting first so that the cache never holds more than its capacity.
    pub fn apply(&mut self, new_zone: &[u8], events: &mut Events) {
        for (i, &z) in new_zone.iter().enumerate() {
            if z == NOWHERE && self.bins[i].zone != NOWHERE {
                self.place(i as u32, NOWHERE, events);
            }
        }
        for (i, &z) in new_zone.iter().enumerate() {
            if z != self.bins[i].zone {
                self.place(i as u32, z, events);
            }
        }
        debug_assert!(self.placed <= self.cap_bins);
    }

    /// Ages the long-term popularity with this epoch's counts:
    /// `hist = aging * hist + curr` (GREM's aging function).
    pub fn age(&mut self, aging: f64) {
        for b in &mut self.bins {
            b.hist = aging * b.hist + f64::from(b.curr);
        }
    }

    /// Ends the epoch's counting: clears the counters and hit bitmaps, and
    /// drops bins that are neither placed nor popular any more.
    pub fn reset(&mut self) {
        for &i in &self.touched {
            let b = &mut self.bins[i as usize];
            b.hits = [0; 4];
            b.curr = 0;
        }
        self.touched.clear();
        self.hit_volume = [0; 3];
        let dead = self
            .bins
            .iter()
            .filter(|b| b.hist < 1e-6 && b.zone == NOWHERE)
            .count();
        if dead > 0 && dead * 4 >= self.bins.len() {
            self.bins.retain(|b| b.hist >= 1e-6 || b.zone != NOWHERE);
            self.map.clear();
            for (i, b) in self.bins.iter().enumerate() {
                self.map.insert(b.key, i as u32);
            }
            self.memo_key = u64::MAX;
        }
    }
}

/// Orders candidates by score, highest first, ties by key: the choice of the
/// top bins is the same on every run.
pub(crate) fn by_score_desc(a: &(f64, u64, u32), b: &(f64, u64, u32)) -> Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// Keeps the `k` best candidates (by [`by_score_desc`]) in `v`, in no order.
pub(crate) fn keep_top(v: &mut Vec<(f64, u64, u32)>, k: usize) {
    if v.len() > k {
        if k > 0 {
            v.select_nth_unstable_by(k - 1, by_score_desc);
        }
        v.truncate(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_top_is_deterministic_on_ties() {
        let mut v = vec![(1.0, 5, 0), (2.0, 9, 1), (1.0, 3, 2), (1.0, 4, 3)];
        keep_top(&mut v, 2);
        v.sort_by(by_score_desc);
        assert_eq!(v, vec![(2.0, 9, 1), (1.0, 3, 2)]);
        let mut w = vec![(1.0, 1, 0)];
        keep_top(&mut w, 0);
        assert!(w.is_empty());
    }

    #[test]
    fn epochs_start_at_first_access_and_count_gaps() {
        let cfg = PolicyConfig {
            epoch_secs: 1.0,
            ..PolicyConfig::default()
        };
        let mut b = Bins::new(PolicyKind::Grem, 4 << 20, &cfg).unwrap();
        assert_eq!(b.epochs_passed(5_000_000_000), 0);
        assert_eq!(b.epochs_passed(5_999_999_999), 0);
        assert_eq!(b.epochs_passed(6_000_000_000), 1);
        assert_eq!(b.epochs_passed(8_500_000_000), 3);
        b.next_epoch();
        assert_eq!(b.epochs_passed(6_500_000_000), 0);
    }
}
