//! Property tests: LRU's inclusion property, ARC and CAR against direct
//! transcriptions of their papers' pseudocode, capacity and event
//! bookkeeping of every policy, and GREM/D-GREM zone invariants.

use std::collections::{HashSet, VecDeque};

use cache::policy::arc::Arc;
use cache::policy::car::Car;
use cache::policy::dgrem::Dgrem;
use cache::policy::glru::Glru;
use cache::policy::grem::Grem;
use cache::{Access, BinFill, CachePolicy, Events, Key, PolicyConfig, PolicyKind};
use proptest::prelude::*;

fn acc(t: u64, x: u64) -> Access {
    Access {
        time_ns: t,
        tenant: 0,
        key: Key::new(0, x).unwrap(),
        write: false,
    }
}

fn hits<P: CachePolicy>(p: &mut P, seq: &[u64]) -> Vec<bool> {
    let mut ev = Events::new();
    seq.iter()
        .enumerate()
        .map(|(t, &x)| {
            let h = p.access(acc(t as u64, x), &mut ev).hit;
            ev.clear();
            h
        })
        .collect()
}

/// ARC as printed in Fig. 4 of Megiddo & Modha (FAST'03); `p` is real.
struct RefArc {
    c: usize,
    p: f64,
    t1: VecDeque<u64>,
    t2: VecDeque<u64>,
    b1: VecDeque<u64>,
    b2: VecDeque<u64>,
}

fn take(l: &mut VecDeque<u64>, x: u64) -> bool {
    match l.iter().position(|&y| y == x) {
        Some(i) => {
            l.remove(i);
            true
        }
        None => false,
    }
}

impl RefArc {
    fn new(c: usize) -> Self {
        RefArc {
            c,
            p: 0.0,
            t1: VecDeque::new(),
            t2: VecDeque::new(),
            b1: VecDeque::new(),
            b2: VecDeque::new(),
        }
    }

    fn replace(&mut self, x_in_b2: bool) {
        let t1 = self.t1.len();
        let t1f = t1 as f64;
        if t1 >= 1 && (t1f > self.p || (x_in_b2 && t1f == self.p)) {
            let y = self.t1.pop_back().unwrap();
            self.b1.push_front(y);
        } else {
            let y = self.t2.pop_back().unwrap();
            self.b2.push_front(y);
        }
    }

    fn access(&mut self, x: u64) -> bool {
        if take(&mut self.t1, x) || take(&mut self.t2, x) {
            self.t2.push_front(x);
            return true;
        }
        if self.b1.contains(&x) {
            let d = (self.b2.len() as f64 / self.b1.len() as f64).max(1.0);
            self.p = (self.p + d).min(self.c as f64);
            self.replace(false);
            take(&mut self.b1, x);
            self.t2.push_front(x);
            return false;
        }
        if self.b2.contains(&x) {
            let d = (self.b1.len() as f64 / self.b2.len() as f64).max(1.0);
            self.p = (self.p - d).max(0.0);
            self.replace(true);
            take(&mut self.b2, x);
            self.t2.push_front(x);
            return false;
        }
        if self.t1.len() + self.b1.len() == self.c {
            if self.t1.len() < self.c {
                self.b1.pop_back();
                self.replace(false);
            } else {
                self.t1.pop_back();
            }
        } else {
            let total = self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len();
            if total >= self.c {
                if total == 2 * self.c {
                    self.b2.pop_back();
                }
                self.replace(false);
            }
        }
        self.t1.push_front(x);
        false
    }
}

/// CAR as printed in Fig. 2 of Bansal & Modha (FAST'04); `p` is real.
/// Clocks: front is the head (hand).
struct RefCar {
    c: usize,
    p: f64,
    t1: VecDeque<(u64, bool)>,
    t2: VecDeque<(u64, bool)>,
    b1: VecDeque<u64>,
    b2: VecDeque<u64>,
}

impl RefCar {
    fn new(c: usize) -> Self {
        RefCar {
            c,
            p: 0.0,
            t1: VecDeque::new(),
            t2: VecDeque::new(),
            b1: VecDeque::new(),
            b2: VecDeque::new(),
        }
    }

    fn replace(&mut self) {
        loop {
            if self.t1.len() as f64 >= self.p.max(1.0) {
                let (y, r) = self.t1.pop_front().unwrap();
                if !r {
                    self.b1.push_front(y);
                    return;
                }
                self.t2.push_back((y, false));
            } else {
                let (y, r) = self.t2.pop_front().unwrap();
                if !r {
                    self.b2.push_front(y);
                    return;
                }
                self.t2.push_back((y, false));
            }
        }
    }

    fn access(&mut self, x: u64) -> bool {
        for l in [&mut self.t1, &mut self.t2] {
            if let Some(e) = l.iter_mut().find(|e| e.0 == x) {
                e.1 = true;
                return true;
            }
        }
        let in_b = self.b1.contains(&x) || self.b2.contains(&x);
        if self.t1.len() + self.t2.len() == self.c {
            self.replace();
            if !in_b && self.t1.len() + self.b1.len() == self.c {
                self.b1.pop_back();
            } else if self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len() == 2 * self.c
                && !in_b
            {
                self.b2.pop_back();
            }
        }
        if !in_b {
            self.t1.push_back((x, false));
        } else if self.b1.contains(&x) {
            let d = (self.b2.len() as f64 / self.b1.len() as f64).max(1.0);
            self.p = (self.p + d).min(self.c as f64);
            take(&mut self.b1, x);
            self.t2.push_back((x, false));
        } else {
            let d = (self.b1.len() as f64 / self.b2.len() as f64).max(1.0);
            self.p = (self.p - d).max(0.0);
            take(&mut self.b2, x);
            self.t2.push_back((x, false));
        }
        false
    }
}

fn seq_strategy() -> impl Strategy<Value = (usize, Vec<u64>)> {
    (1usize..12, 2u64..40).prop_flat_map(|(c, domain)| {
        (
            Just(c),
            prop::collection::vec(prop_oneof![0..domain, 0..(domain / 4).max(1)], 0..400),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// LRU's inclusion property: a hit in a cache of c lines is a hit in
    /// every larger cache, so the hit ratio never falls as the cache grows.
    #[test]
    fn lru_hit_ratio_never_decreases_with_size(
        (c, seq) in seq_strategy(), extra in 1usize..10
    ) {
        let cfg = PolicyConfig::default();
        let small = hits(&mut Glru::new(c as u64 * 4096, &cfg).unwrap(), &seq);
        let large = hits(&mut Glru::new((c + extra) as u64 * 4096, &cfg).unwrap(), &seq);
        for (s, l) in small.iter().zip(&large) {
            prop_assert!(!s | l);
        }
        let n = |v: &[bool]| v.iter().filter(|h| **h).count();
        prop_assert!(n(&small) <= n(&large));
    }

    #[test]
    fn arc_agrees_with_the_paper(( c, seq) in seq_strategy()) {
        let mut a = Arc::new(c as u64 * 4096, &PolicyConfig::default()).unwrap();
        let mut r = RefArc::new(c);
        let mut ev = Events::new();
        for (t, &x) in seq.iter().enumerate() {
            let h = a.access(acc(t as u64, x), &mut ev).hit;
            prop_assert_eq!(h, r.access(x), "access {} of {}", t, x);
            prop_assert_eq!(a.target_t1(), r.p);
            let s = a.list_sizes();
            prop_assert_eq!(
                s,
                [r.t1.len(), r.t2.len(), r.b1.len(), r.b2.len()].map(|v| v as u64)
            );
        }
        for x in 0..40 {
            let cached = r.t1.contains(&x) || r.t2.contains(&x);
            prop_assert_eq!(a.contains(Key::new(0, x).unwrap()), cached);
        }
    }

    #[test]
    fn car_agrees_with_the_paper((c, seq) in seq_strategy()) {
        let mut a = Car::new(c as u64 * 4096, &PolicyConfig::default()).unwrap();
        let mut r = RefCar::new(c);
        let mut ev = Events::new();
        for (t, &x) in seq.iter().enumerate() {
            let h = a.access(acc(t as u64, x), &mut ev).hit;
            prop_assert_eq!(h, r.access(x), "access {} of {}", t, x);
            prop_assert_eq!(a.target_t1(), r.p);
            let s = a.list_sizes();
            prop_assert_eq!(
                s,
                [r.t1.len(), r.t2.len(), r.b1.len(), r.b2.len()].map(|v| v as u64)
            );
        }
        for x in 0..40 {
            let cached = r.t1.iter().chain(&r.t2).any(|e| e.0 == x);
            prop_assert_eq!(a.contains(Key::new(0, x).unwrap()), cached);
        }
    }

    /// For every policy, and every bin fill of the coarse ones, with and
    /// without filling free flash on a miss: what the
    /// events say is resident is exactly what `contains` says, it never
    /// exceeds the capacity, and resizing keeps it so.
    #[test]
    fn every_policy_respects_capacity_and_reports_every_move(
        ops in prop::collection::vec((0u32..3, 0u64..3000, any::<bool>(), 0u64..3), 1..1500),
        mib in 1u64..6,
        shrink in 1u64..4,
    ) {
        for (fill, free, &kind) in [BinFill::WholeBin, BinFill::AccessedLines, BinFill::Adaptive]
            .into_iter()
            .flat_map(|f| [(f, false), (f, true)])
            .flat_map(|(f, free)| PolicyKind::ALL.iter().map(move |k| (f, free, k)))
        {
            let cfg = PolicyConfig {
                epoch_secs: 1.0,
                bin_fill: fill,
                fill_free_flash: free,
                ..PolicyConfig::default()
            };
            let mut p = kind.build(mib << 20, &cfg).unwrap();
            let lb = p.line_blocks();
            let shift = lb.trailing_zeros();
            let mut resident: HashSet<Key> = HashSet::new();
            let mut ev = Events::new();
            let mut t = 0u64;
            for (i, &(tenant, block, write, dt)) in ops.iter().enumerate() {
                t += dt * 400_000_000;
                let key = Key::new(tenant, block).unwrap();
                let o = p.access(Access { time_ns: t, tenant, key, write }, &mut ev);
                for k in ev.evicted.drain(..) {
                    prop_assert!(resident.remove(&k), "{}: evicted {} not resident", kind, k);
                }
                for k in ev.migrated_in.drain(..) {
                    prop_assert!(resident.insert(k), "{}: migrated {} twice", kind, k);
                }
                let line = key.coarsen(shift);
                prop_assert_eq!(o.hit, resident.contains(&line) && !o.admitted && !o.filled, "{} hit", kind);
                prop_assert!(!o.filled || (free && !write && resident.contains(&line)), "{} filled", kind);
                if o.admitted {
                    prop_assert!(!o.hit);
                    prop_assert!(resident.insert(line));
                }
                prop_assert_eq!(p.contains(key), resident.contains(&line), "{} contains", kind);
                prop_assert_eq!(p.len(), resident.len() as u64, "{} len", kind);
                prop_assert!(p.len() <= p.capacity(), "{}: {} > {}", kind, p.len(), p.capacity());
                if i == ops.len() / 2 {
                    let lines = p.capacity() / (shrink + 1);
                    if lines >= 256 / lb {
                        p.resize(lines.max(1), &mut ev).unwrap();
                        for k in ev.evicted.drain(..) {
                            prop_assert!(resident.remove(&k));
                        }
                        prop_assert!(p.len() <= p.capacity());
                        prop_assert_eq!(p.len(), resident.len() as u64);
                    }
                }
            }
            let mut occ = vec![];
            p.occupancy(&mut occ);
            let sum: u64 = occ.iter().map(|o| o.resident_lines).sum();
            prop_assert_eq!(sum, p.len(), "{} occupancy", kind);
        }
    }

    /// GREM and D-GREM: the zones always add up to the cache, D-GREM's
    /// respect their minimum, and neither zone holds more than its size.
    #[test]
    fn grem_zones_sum_to_the_cache_and_respect_minimums(
        ops in prop::collection::vec((0u32..4, 0u64..80, 0u64..4, 1u32..30), 1..300),
        bins in 2u64..40,
        frac in 0.0f64..0.5,
    ) {
        let cfg = PolicyConfig {
            epoch_secs: 1.0,
            min_zone_fraction: frac,
            ..PolicyConfig::default()
        };
        let mut g = Grem::new(bins << 20, &cfg).unwrap();
        let mut d = Dgrem::new(bins << 20, &cfg).unwrap();
        let min_bins = (frac * bins as f64).floor() as u64;
        let mut ev = Events::new();
        let mut t = 0;
        for &(tenant, bin, dt, repeat) in &ops {
            t += dt * 300_000_000;
            for _ in 0..repeat {
                let a = Access {
                    time_ns: t,
                    tenant,
                    key: Key::new(tenant, bin << 8).unwrap(),
                    write: false,
                };
                g.access(a, &mut ev);
                d.access(a, &mut ev);
            }
            for (name, z, placed, cap) in [
                ("grem", g.zones().unwrap(), g.placed_per_zone(), g.capacity()),
                ("dgrem", d.zones().unwrap(), d.placed_per_zone(), d.capacity()),
            ] {
                prop_assert_eq!(z.long_term_lines + z.short_term_lines, cap, "{}", name);
                prop_assert!(placed.0 * 8 <= z.long_term_lines, "{} long", name);
                prop_assert!(placed.1 * 8 <= z.short_term_lines, "{} short", name);
            }
            let z = d.zones().unwrap();
            prop_assert!(z.short_term_lines >= min_bins * 8);
            prop_assert!(z.long_term_lines >= min_bins * 8);
            prop_assert_eq!(d.min_zone_lines(), min_bins * 8);
            let gz = g.zones().unwrap();
            prop_assert_eq!(gz.short_term_lines, bins / 2 * 8);
            let mut occ = vec![];
            g.occupancy(&mut occ);
            let reserved: u64 = occ.iter().map(|o| o.reserved_lines.unwrap()).sum();
            prop_assert_eq!(reserved, g.placed_per_zone().0 * 8);
        }
    }
}
