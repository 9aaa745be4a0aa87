//! CAR, Clock with Adaptive Replacement (Bansal & Modha, FAST'04), at 4 KiB
//! lines over all tenants: the paper's second conventional baseline.
//!
//! T1 and T2 are clocks (a hit only sets a reference bit, so hits never move
//! entries, which is why CAR scales better than ARC in a real cache), B1 and
//! B2 are LRU ghost lists, and `p` is the adaptive target size of T1. The code
//! follows the pseudocode of Fig. 2 of the CAR paper line by line; `p` and
//! the adaptation steps are real-valued, as in the paper. The property tests check it
//! against a direct `VecDeque` transcription of the same pseudocode.
//!
//! A clock is kept as a list whose front is the clock hand ("head") and whose
//! back is the position just behind the hand ("tail").

use crate::list::{index_with_capacity, Index, Lists, NIL};
use crate::policy::push_occupancy;
use crate::{
    bump, lines_for, Access, CacheError, CachePolicy, Events, Key, Outcome, PolicyConfig,
    PolicyKind, TenantOccupancy, BLOCK_BYTES,
};

const T1: usize = 0;
const T2: usize = 1;
const B1: usize = 2;
const B2: usize = 3;

/// CAR.
#[derive(Debug, Clone)]
pub struct Car {
    cap: u64,
    p: f64,
    shift: u32,
    map: Index,
    lists: Lists<4>,
    resident: Vec<u64>,
}

impl Car {
    /// A cache of `cache_bytes` in lines of `cfg.fine_line_bytes`.
    pub fn new(cache_bytes: u64, cfg: &PolicyConfig) -> Result<Self, CacheError> {
        let cap = lines_for(
            PolicyKind::Car,
            cache_bytes,
            cfg.fine_line_bytes,
            "one cache line",
        )?;
        Ok(Car {
            cap,
            p: 0.0,
            shift: (cfg.fine_line_bytes / BLOCK_BYTES).trailing_zeros(),
            map: index_with_capacity(2 * cap),
            lists: Lists::with_capacity(2 * cap),
            resident: Vec::new(),
        })
    }

    /// The adaptive target size of T1, in lines (real-valued).
    pub fn target_t1(&self) -> f64 {
        self.p
    }

    /// Sizes of T1, T2, B1, B2.
    pub fn list_sizes(&self) -> [u64; 4] {
        [T1, T2, B1, B2].map(|l| self.lists.len(l))
    }

    fn cached(&self) -> u64 {
        self.lists.len(T1) + self.lists.len(T2)
    }

    /// Discards the LRU (back) entry of ghost list `l`.
    fn discard_ghost(&mut self, l: usize) {
        let v = self.lists.back(l);
        debug_assert_ne!(v, NIL);
        self.lists.unlink(v);
        let k = self.lists.node(v).key;
        self.map.remove(&k);
        self.lists.release(v);
    }

    /// The paper's `replace()`: turns the clock hands until a line with a
    /// clear reference bit is found, and demotes it to B1 or B2.
    fn replace(&mut self, events: &mut Events) {
        loop {
            let t1 = self.lists.len(T1);
            let use_t1 = (t1 as f64 >= self.p.max(1.0) && t1 > 0) || self.lists.len(T2) == 0;
            let (src, ghost) = if use_t1 { (T1, B1) } else { (T2, B2) };
            let h = self.lists.front(src);
            debug_assert_ne!(h, NIL);
            self.lists.unlink(h);
            let n = self.lists.node_mut(h);
            if !n.flag {
                let (key, tenant) = (n.key, n.tenant);
                self.lists.push_front(ghost, h);
                self.resident[tenant as usize] -= 1;
                events.evicted.push(Key::from_raw(key));
                return;
            }
            n.flag = false;
            self.lists.push_back(T2, h);
        }
    }
}

impl CachePolicy for Car {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Car
    }

    fn line_blocks(&self) -> u64 {
        1 << self.shift
    }

    fn capacity(&self) -> u64 {
        self.cap
    }

    fn len(&self) -> u64 {
        self.cached()
    }

    #[inline]
    fn access(&mut self, a: Access, events: &mut Events) -> Outcome {
        let key = a.key.coarsen(self.shift).raw();
        let found = self.map.get(&key).copied();
        let ghost = match found {
            Some(i) => {
                let l = self.lists.node(i).list as usize;
                if l == T1 || l == T2 {
                    self.lists.node_mut(i).flag = true;
                    return Outcome {
                        hit: true,
                        admitted: false,
                        filled: false,
                    };
                }
                Some((i, l))
            }
            None => None,
        };
        if self.cached() >= self.cap {
            self.replace(events);
            if ghost.is_none() {
                if self.lists.len(T1) + self.lists.len(B1) >= self.cap && self.lists.len(B1) > 0 {
                    self.discard_ghost(B1);
                } else if self.list_sizes().iter().sum::<u64>() >= 2 * self.cap
                    && self.lists.len(B2) > 0
                {
                    self.discard_ghost(B2);
                }
            }
        }
        let i = match ghost {
            None => {
                let i = self.lists.alloc(key, a.tenant);
                self.map.insert(key, i);
                self.lists.push_back(T1, i);
                i
            }
            Some((i, l)) => {
                let (b1, b2) = (self.lists.len(B1) as f64, self.lists.len(B2) as f64);
                if l == B1 {
                    self.p = (self.p + (b2 / b1).max(1.0)).min(self.cap as f64);
                } else {
                    self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
                }
                self.lists.unlink(i);
                let n = self.lists.node_mut(i);
                n.tenant = a.tenant;
                self.lists.push_back(T2, i);
                i
            }
        };
        self.lists.node_mut(i).flag = false;
        bump(&mut self.resident, a.tenant, 1);
        Outcome {
            hit: false,
            admitted: true,
            filled: false,
        }
    }

    #[inline]
    fn prefetch(&self, key: Key, depth: u8) {
        self.lists
            .prefetch_key(&self.map, key.coarsen(self.shift).raw(), depth);
    }

    fn contains(&self, key: Key) -> bool {
        self.map
            .get(&key.coarsen(self.shift).raw())
            .is_some_and(|&i| (self.lists.node(i).list as usize) < B1)
    }

    fn resize(&mut self, total_lines: u64, events: &mut Events) -> Result<(), CacheError> {
        if total_lines == 0 {
            return Err(CacheError::Config(
                "cannot resize a cache to 0 lines".into(),
            ));
        }
        self.cap = total_lines;
        self.p = self.p.min(self.cap as f64);
        while self.cached() > self.cap {
            self.replace(events);
        }
        while self.lists.len(T1) + self.lists.len(B1) > self.cap && self.lists.len(B1) > 0 {
            self.discard_ghost(B1);
        }
        while self.list_sizes().iter().sum::<u64>() > 2 * self.cap {
            let l = if self.lists.len(B2) > 0 { B2 } else { B1 };
            self.discard_ghost(l);
        }
        Ok(())
    }

    fn occupancy(&self, out: &mut Vec<TenantOccupancy>) {
        push_occupancy(&self.resident, None, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn referenced_lines_get_a_second_chance() {
        let mut c = Car::new(3 * 4096, &PolicyConfig::default()).unwrap();
        let mut ev = Events::new();
        let mut go = |l: u64| {
            let a = Access {
                time_ns: 0,
                tenant: 0,
                key: Key::new(0, l).unwrap(),
                write: false,
            };
            c.access(a, &mut ev).hit
        };
        // 1 2 3 fill T1; 1 sets its bit; 4 sweeps: 1 moves to T2 (bit
        // cleared), 2 is demoted to B1.
        assert_eq!(
            [go(1), go(2), go(3), go(1), go(4)],
            [false, false, false, true, false]
        );
        assert!(go(1), "1 survived via its reference bit");
        assert!(!go(2), "2 was evicted");
        assert_eq!(ev.evicted[0], Key::new(0, 2).unwrap());
        assert_eq!(c.len(), 3);
        assert!(c.target_t1() >= 1.0, "the B1 hit on 2 grew p");
    }
}
