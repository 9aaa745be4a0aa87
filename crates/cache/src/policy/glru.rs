//! Global LRU: one recency list over every tenant's lines, the paper's
//! conventional baseline ("GLRU"). Every miss admits its line and evicts the
//! least recently used line of any tenant.

use crate::list::{index_with_capacity, Index, Lists, NIL};
use crate::policy::push_occupancy;
use crate::{
    bump, lines_for, Access, CacheError, CachePolicy, Events, Key, Outcome, PolicyConfig,
    PolicyKind, TenantOccupancy, BLOCK_BYTES,
};

/// Global LRU.
#[derive(Debug, Clone)]
pub struct Glru {
    cap: u64,
    shift: u32,
    map: Index,
    lru: Lists<1>,
    resident: Vec<u64>,
}

impl Glru {
    /// A cache of `cache_bytes` in lines of `cfg.fine_line_bytes`.
    pub fn new(cache_bytes: u64, cfg: &PolicyConfig) -> Result<Self, CacheError> {
        let cap = lines_for(
            PolicyKind::Glru,
            cache_bytes,
            cfg.fine_line_bytes,
            "one cache line",
        )?;
        Ok(Glru {
            cap,
            shift: (cfg.fine_line_bytes / BLOCK_BYTES).trailing_zeros(),
            map: index_with_capacity(cap),
            lru: Lists::with_capacity(cap),
            resident: Vec::new(),
        })
    }

    fn evict_lru(&mut self, events: &mut Events) -> u32 {
        let v = self.lru.back(0);
        debug_assert_ne!(v, NIL);
        self.lru.unlink(v);
        let n = *self.lru.node(v);
        self.map.remove(&n.key);
        self.resident[n.tenant as usize] -= 1;
        events.evicted.push(Key::from_raw(n.key));
        v
    }
}

impl CachePolicy for Glru {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Glru
    }

    fn line_blocks(&self) -> u64 {
        1 << self.shift
    }

    fn capacity(&self) -> u64 {
        self.cap
    }

    fn len(&self) -> u64 {
        self.lru.len(0)
    }

    #[inline]
    fn access(&mut self, a: Access, events: &mut Events) -> Outcome {
        let key = a.key.coarsen(self.shift).raw();
        if let Some(&i) = self.map.get(&key) {
            self.lru.move_to_front(0, i);
            return Outcome {
                hit: true,
                admitted: false,
                filled: false,
            };
        }
        let i = if self.lru.len(0) >= self.cap {
            let v = self.evict_lru(events);
            let n = self.lru.node_mut(v);
            n.key = key;
            n.tenant = a.tenant;
            v
        } else {
            self.lru.alloc(key, a.tenant)
        };
        self.lru.push_front(0, i);
        self.map.insert(key, i);
        bump(&mut self.resident, a.tenant, 1);
        Outcome {
            hit: false,
            admitted: true,
            filled: false,
        }
    }

    #[inline]
    fn prefetch(&self, key: Key, depth: u8) {
        self.lru
            .prefetch_key(&self.map, key.coarsen(self.shift).raw(), depth);
    }

    fn contains(&self, key: Key) -> bool {
        self.map.contains_key(&key.coarsen(self.shift).raw())
    }

    fn resize(&mut self, total_lines: u64, events: &mut Events) -> Result<(), CacheError> {
        if total_lines == 0 {
            return Err(CacheError::Config(
                "cannot resize a cache to 0 lines".into(),
            ));
        }
        self.cap = total_lines;
        while self.lru.len(0) > self.cap {
            let v = self.evict_lru(events);
            self.lru.release(v);
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

    fn acc(t: u64, line: u64) -> Access {
        Access {
            time_ns: t,
            tenant: (line % 2) as u32,
            key: Key::new((line % 2) as u32, line).unwrap(),
            write: false,
        }
    }

    #[test]
    fn evicts_least_recent_and_reports_it() {
        let mut c = Glru::new(3 * 4096, &PolicyConfig::default()).unwrap();
        let mut ev = Events::new();
        let hits: Vec<bool> = [1, 2, 3, 1, 4, 2, 1]
            .iter()
            .enumerate()
            .map(|(t, &l)| c.access(acc(t as u64, l), &mut ev).hit)
            .collect();
        // 1 2 3 miss; 1 hit; 4 evicts 2; 2 misses and evicts 3; 1 hits.
        assert_eq!(hits, [false, false, false, true, false, false, true]);
        assert_eq!(
            ev.evicted,
            vec![Key::new(0, 2).unwrap(), Key::new(1, 3).unwrap()]
        );
        assert_eq!(c.len(), 3);
        let mut occ = vec![];
        c.occupancy(&mut occ);
        let total: u64 = occ.iter().map(|o| o.resident_lines).sum();
        assert_eq!(total, 3);
        ev.clear();
        c.resize(1, &mut ev).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(ev.evicted.len(), 2);
        assert!(c.contains(Key::new(1, 1).unwrap()));
        assert!(c.resize(0, &mut ev).is_err());
    }
}
