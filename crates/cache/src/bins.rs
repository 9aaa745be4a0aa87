//! Per-bin bookkeeping shared by the coarse, epoch-based policies (vFRM,
//! GREM, D-GREM): a bin table with access counts, aged popularity, placement
//! (the zone, and which of the bin's lines are in flash), the lines read so
//! far, a hit bitmap, plus the epoch clock and the [`BinFill`] rule.
//!
//! Why a shared table: the three policies differ only in how they choose the
//! bins to cache at the end of an epoch. What happens on an access (find the
//! bin, count it, hit if placed) is the same, and it is their hot path, so it
//! is written once: one hash lookup per access, skipped when consecutive
//! blocks fall into the same bin (the usual case for large requests).

use std::cmp::Ordering;

use crate::list::{index_with_capacity, Index};
use crate::{
    bump, Access, BinFill, CacheError, Events, Key, PolicyConfig, PolicyKind, BLOCK_BYTES,
};

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
    /// Lines of the bin accessed since it entered the table (bit `l` for
    /// line `l`; a bin has at most 64 lines).
    pub seen: u64,
    /// Lines of the bin in flash (none unless placed).
    pub cached: u64,
    /// `seen` when the bin was last placed: the lines that would be in
    /// flash had only the accessed lines been placed.
    basis: u64,
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
    /// Capacity in bins (the zones and the pool are sized in lines:
    /// [`Bins::cap_lines`]).
    pub cap_bins: u64,
    /// What of a chosen bin is placed.
    pub fill: BinFill,
    /// Whether a read miss fills free flash at once
    /// ([`PolicyConfig::fill_free_flash`]).
    fill_free: bool,
    pub epoch_ns: u64,
    /// End of the current epoch; `None` before the first access.
    pub epoch_end: Option<u64>,
    /// Number of the current epoch.
    pub epoch: u64,
    /// Bins accessed in the current epoch (indices into `bins`).
    pub touched: Vec<u32>,
    /// Distinct blocks hit in the current epoch, per zone (index by zone).
    pub hit_volume: [u64; 3],
    /// Lines placed, per tenant.
    pub resident: Vec<u64>,
    /// Lines placed in all.
    pub placed: u64,
    /// [`BinFill::Adaptive`]: per tenant, whether its bins are placed whole.
    whole: Vec<bool>,
    /// Per tenant, what the fill is judged on (see [`Bins::adapt_fill`]).
    judge: Vec<FillJudge>,
    /// Scratch: the lines each bin is to have, in [`Bins::apply`].
    want: Vec<u64>,
    /// Accesses per line of flash that placed bins' accessed lines earn,
    /// over all tenants, smoothed: the bar a tenant's unaccessed lines
    /// must clear to be placed.
    reuse_per_line: f64,
}

/// One tenant's evidence on whether whole bins pay: how much the lines of
/// its placed bins that it had not accessed yet are used, against the lines
/// it had.
#[derive(Debug, Clone, Copy, Default)]
struct FillJudge {
    /// Accesses in the epoch to a line of a placed bin the tenant had
    /// accessed before (a hit under either fill).
    reuse: f64,
    /// Accesses in the epoch to a line of a placed bin the tenant had never
    /// accessed (a hit only if the bin was placed whole).
    fresh: f64,
    /// At the epoch's start: lines of placed bins it had accessed.
    seen_lines: f64,
    /// At the epoch's start: lines of placed bins it had not.
    unseen_lines: f64,
    /// Smoothed accesses per line of flash its unaccessed lines earn.
    fresh_per_line: f64,
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
            fill: cfg.bin_fill,
            fill_free: cfg.fill_free_flash,
            epoch_ns: cfg.epoch_ns(),
            epoch_end: None,
            epoch: 0,
            touched: Vec::new(),
            hit_volume: [0; 3],
            resident: Vec::new(),
            placed: 0,
            whole: Vec::new(),
            judge: Vec::new(),
            want: Vec::new(),
            reuse_per_line: 0.0,
        })
    }

    /// Lines per bin.
    pub fn lines_per_bin(&self) -> u64 {
        1 << (self.bin_shift - self.line_shift)
    }

    /// Capacity in lines.
    pub fn cap_lines(&self) -> u64 {
        self.cap_bins * self.lines_per_bin()
    }

    /// The mask of every line of a bin.
    fn all_lines(&self) -> u64 {
        u64::MAX >> (64 - self.lines_per_bin())
    }

    /// The lines of bin `i` that placing it would put in flash.
    fn to_place(&self, i: u32) -> u64 {
        match self.fill {
            BinFill::WholeBin => self.all_lines(),
            BinFill::AccessedLines => self.bins[i as usize].seen,
            BinFill::Adaptive => {
                let b = &self.bins[i as usize];
                if self.places_whole(b.tenant) {
                    self.all_lines()
                } else {
                    b.seen
                }
            }
        }
    }

    /// Whether `tenant`'s bins are placed whole now (always with
    /// [`BinFill::WholeBin`], never with [`BinFill::AccessedLines`]).
    pub fn places_whole(&self, tenant: u32) -> bool {
        match self.fill {
            BinFill::WholeBin => true,
            BinFill::AccessedLines => false,
            BinFill::Adaptive => self.whole.get(tenant as usize).copied().unwrap_or(true),
        }
    }

    /// The key of line `l` of the bin whose key is `bin_key`.
    fn line_key(&self, bin_key: u64, l: u64) -> Key {
        let first = Key::from_raw(bin_key);
        let shift = self.bin_shift - self.line_shift;
        Key::from_raw((first.raw() & !crate::MAX_LINE) | ((first.line() << shift) + l))
    }

    /// Lines of flash bin `i` takes when placed: the whole bin, or the lines
    /// of it accessed so far.
    pub fn footprint(&self, i: u32) -> u64 {
        u64::from(self.to_place(i).count_ones())
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
                        seen: 0,
                        cached: 0,
                        basis: 0,
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
        let blocks = 1u64 << self.bin_shift;
        let off = a.key.line() & (blocks - 1);
        let line = 1u64 << (off >> self.line_shift);
        let b = &mut self.bins[i as usize];
        if b.curr == 0 {
            self.touched.push(i);
        }
        b.curr += 1;
        b.last_epoch = epoch;
        if self.fill == BinFill::Adaptive && b.zone != NOWHERE {
            let t = b.tenant as usize;
            if self.judge.len() <= t {
                self.judge.resize(t + 1, FillJudge::default());
            }
            if b.basis & line != 0 {
                self.judge[t].reuse += 1.0;
            } else {
                self.judge[t].fresh += 1.0;
            }
        }
        b.seen |= line;
        let hit = b.cached & line != 0;
        if hit {
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

    /// After access `a` to bin `i` missed: with `fill_free_flash`, a read
    /// copies its line into flash if flash is free, placing the bin in
    /// `zone` if it was not (it competes at the next epoch end like any
    /// other). Evicts nothing. Returns whether it filled.
    pub fn fill_on_miss(&mut self, i: u32, a: Access, zone: u8, events: &mut Events) -> bool {
        if !self.fill_free || a.write || self.placed >= self.cap_lines() {
            return false;
        }
        let off = (a.key.line() & ((1u64 << self.bin_shift) - 1)) >> self.line_shift;
        let b = &mut self.bins[i as usize];
        if b.cached >> off & 1 != 0 {
            return false;
        }
        b.cached |= 1 << off;
        if b.zone == NOWHERE {
            b.zone = zone;
            b.basis = b.seen;
        }
        let (key, tenant) = (b.key, b.tenant);
        events.migrated_in.push(self.line_key(key, off));
        bump(&mut self.resident, tenant, 1);
        self.placed += 1;
        true
    }

    /// Whether the line holding block `key` is placed.
    pub fn contains(&self, key: Key) -> bool {
        let off = key.line() & ((1u64 << self.bin_shift) - 1);
        let line = 1u64 << (off >> self.line_shift);
        self.map
            .get(&key.coarsen(self.bin_shift).raw())
            .is_some_and(|&i| self.bins[i as usize].cached & line != 0)
    }

    /// Puts bin `i` in `zone` with the lines in `want` in flash (none for
    /// [`NOWHERE`]), reporting the lines moved in or out.
    fn set(&mut self, i: u32, zone: u8, want: u64, events: &mut Events) {
        let b = &mut self.bins[i as usize];
        b.zone = zone;
        b.basis = if zone == NOWHERE { 0 } else { b.seen };
        let (gone, new) = (b.cached & !want, want & !b.cached);
        b.cached = want;
        let (key, tenant) = (b.key, b.tenant);
        let this = &*self;
        let lines = |mask: u64| {
            (0..64u64)
                .filter(move |l| mask >> l & 1 != 0)
                .map(move |l| this.line_key(key, l))
        };
        if gone != 0 {
            events.evicted.extend(lines(gone));
        }
        if new != 0 {
            events.migrated_in.extend(lines(new));
        }
        let (gone, new) = (u64::from(gone.count_ones()), u64::from(new.count_ones()));
        if gone > 0 {
            self.resident[tenant as usize] -= gone;
        }
        if new > 0 {
            bump(&mut self.resident, tenant, new);
        }
        self.placed = self.placed + new - gone;
    }

    /// Assigns every bin the zone in `new_zone` (indexed like `bins`),
    /// evicting first so that the cache never holds more than its capacity.
    /// A bin that stays placed gains the lines accessed since it was placed
    /// (unless whole). With [`BinFill::Adaptive`], flash the chosen bins
    /// leave free takes the rest of their lines, most popular bins first, so
    /// that space nobody was chosen for still serves their neighbours.
    pub fn apply(&mut self, new_zone: &[u8], events: &mut Events) {
        self.apply_with(new_zone, events, true);
    }

    /// [`Bins::apply`] for a resize: lines only leave (no bin gains any).
    pub fn apply_shrink(&mut self, new_zone: &[u8], events: &mut Events) {
        self.apply_with(new_zone, events, false);
    }

    fn apply_with(&mut self, new_zone: &[u8], events: &mut Events, grow: bool) {
        let mut want = std::mem::take(&mut self.want);
        want.clear();
        want.extend((0..new_zone.len()).map(|i| match new_zone[i] {
            NOWHERE => 0,
            _ if !grow => self.bins[i].cached & self.to_place(i as u32),
            _ => self.to_place(i as u32),
        }));
        if grow && self.fill == BinFill::Adaptive {
            let all = self.all_lines();
            let used: u64 = want.iter().map(|w| u64::from(w.count_ones())).sum();
            let mut free = self.cap_lines().saturating_sub(used);
            if free > 0 {
                let mut order: Vec<(f64, u64, u32)> = want
                    .iter()
                    .enumerate()
                    .filter(|(_, &w)| w != 0 && w != all)
                    .map(|(i, _)| {
                        let b = &self.bins[i];
                        (f64::from(b.curr) + b.hist, b.key, i as u32)
                    })
                    .collect();
                order.sort_unstable_by(by_score_desc);
                for (_, _, i) in order {
                    let extra = u64::from((all & !want[i as usize]).count_ones());
                    if extra <= free {
                        want[i as usize] = all;
                        free -= extra;
                    }
                }
            }
        }
        for (i, (&z, &w)) in new_zone.iter().zip(&want).enumerate() {
            if self.bins[i].cached & !w != 0 {
                self.set(i as u32, z, w & self.bins[i].cached, events);
            }
        }
        for (i, (&z, &w)) in new_zone.iter().zip(&want).enumerate() {
            if z != NOWHERE || self.bins[i].zone != NOWHERE {
                self.set(i as u32, z, w, events);
            }
        }
        self.want = want;
        debug_assert!(self.placed <= self.cap_lines());
        if self.fill == BinFill::Adaptive {
            let lpb = self.lines_per_bin() as f64;
            for j in &mut self.judge {
                j.seen_lines = 0.0;
                j.unseen_lines = 0.0;
            }
            for b in &self.bins {
                if b.zone != NOWHERE {
                    let t = b.tenant as usize;
                    if self.judge.len() <= t {
                        self.judge.resize(t + 1, FillJudge::default());
                    }
                    let seen = f64::from(b.basis.count_ones());
                    self.judge[t].seen_lines += seen;
                    self.judge[t].unseen_lines += lpb - seen;
                }
            }
        }
    }

    /// [`BinFill::Adaptive`], at an epoch end before the bins are chosen:
    /// a tenant's bins are placed whole while the lines it had not accessed
    /// yet earn as many accesses per line as those it had (its neighbours
    /// are read: sequential or clustered data), and only the accessed lines
    /// otherwise (scattered data, where whole bins fill flash with lines
    /// nobody reads). Both are measured under either fill: an access to an
    /// unseen line of a placed bin counts whether it hit or not. The values
    /// are smoothed over epochs (half each).
    pub fn adapt_fill(&mut self) {
        if self.fill != BinFill::Adaptive {
            return;
        }
        self.whole.resize(self.judge.len(), true);
        let (reuse, seen) = self
            .judge
            .iter()
            .fold((0.0, 0.0), |(r, s), j| (r + j.reuse, s + j.seen_lines));
        if seen > 0.0 {
            self.reuse_per_line = 0.5 * self.reuse_per_line + 0.5 * reuse / seen;
        }
        for (t, j) in self.judge.iter_mut().enumerate() {
            if j.unseen_lines > 0.0 {
                j.fresh_per_line = 0.5 * j.fresh_per_line + 0.5 * j.fresh / j.unseen_lines;
                self.whole[t] = j.fresh_per_line >= self.reuse_per_line;
            }
            j.reuse = 0.0;
            j.fresh = 0.0;
        }
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

/// Keeps in `v` the best candidates (by [`by_score_desc`]) whose footprints
/// fit in `budget` lines, taking them best first and passing over any that
/// no longer fits (a smaller one after it may); returns the lines they take.
/// With every footprint equal this is [`keep_top`] of `budget / footprint`.
pub(crate) fn keep_top_lines(v: &mut Vec<(f64, u64, u32)>, budget: u64, bins: &Bins) -> u64 {
    if bins.fill == BinFill::WholeBin {
        let lpb = bins.lines_per_bin();
        keep_top(v, (budget / lpb) as usize);
        return v.len() as u64 * lpb;
    }
    let total: u64 = v.iter().map(|c| bins.footprint(c.2)).sum();
    if total <= budget {
        return total;
    }
    v.sort_unstable_by(by_score_desc);
    let mut used = 0;
    v.retain(|c| {
        let f = bins.footprint(c.2);
        let fits = used + f <= budget;
        if fits {
            used += f;
        }
        fits
    });
    used
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
