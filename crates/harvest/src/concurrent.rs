//! Safe concurrent allocation: the pool shared between threads.
//!
//! Three schemes implement [`SharedPool`]:
//!
//! * [`MutexPool`]: one `parking_lot::Mutex` around a [`GssdPool`]. Every operation
//!   is linearizable, including best-fit (the returned gSSD is the best one at the
//!   instant of the call) and early reclamation with its replacement.
//! * [`RwPool`]: the same behind a `parking_lot::RwLock`; read-only calls
//!   (best-fit lookups, `get`, `len`) share the lock.
//! * [`ShardedPool`]: the gSSDs spread over `N` [`GssdPool`] shards by id, each
//!   behind its own mutex, plus a mutex over the home → gSSD map that enforces one
//!   gSSD per home across shards. A lookup asks every shard for its best fit, one
//!   lock at a time, picks the best, then locks that shard to assign it, retrying if
//!   another thread took it first. Never two locks at once, so no lock order to get
//!   wrong; the price is that a best fit is only best among what each shard held
//!   when it was asked.
//!
//! Which one the daemon uses is decided by `benches/pool.rs`; the numbers and the
//! choice are in the crate docs ([`crate`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use clock::Nanos;
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;

use crate::reclaim::plan_early_reclaim;
use crate::{
    Demand, Gssd, GssdId, GssdPool, HarvestConfig, HarvestError, Reclaimed, RefreshReport,
    TenantId, VssdId,
};

/// A gSSD pool that many threads may use at once. Every method is the synchronised
/// counterpart of the [`GssdPool`] method of the same name and returns copies.
pub trait SharedPool: Send + Sync {
    /// See [`GssdPool::insert`].
    fn insert(&self, g: Gssd) -> Result<(), HarvestError>;
    /// See [`GssdPool::remove`].
    fn remove(&self, id: GssdId) -> Result<Gssd, HarvestError>;
    /// See [`GssdPool::get`].
    fn get(&self, id: GssdId) -> Option<Gssd>;
    /// See [`GssdPool::best_fit`].
    fn best_fit(&self, d: &Demand, now: Nanos) -> Result<Option<Gssd>, HarvestError>;
    /// See [`GssdPool::harvest`].
    fn harvest(
        &self,
        tenant: TenantId,
        d: &Demand,
        now: Nanos,
    ) -> Result<Option<Gssd>, HarvestError>;
    /// See [`GssdPool::release`].
    fn release(&self, id: GssdId, tenant: TenantId, now: Nanos) -> Result<Reclaimed, HarvestError>;
    /// See [`GssdPool::early_reclaim`].
    fn early_reclaim(
        &self,
        id: GssdId,
        need: &Demand,
        now: Nanos,
    ) -> Result<Reclaimed, HarvestError>;
    /// See [`GssdPool::refresh`].
    fn refresh(&self, now: Nanos, updates: &[(GssdId, Nanos)]) -> RefreshReport;
    /// Number of gSSDs in the pool.
    fn len(&self) -> usize;
    /// Whether the pool is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One mutex around the whole pool (the scheme chosen for flexssd; see [`crate`]).
#[derive(Debug)]
pub struct MutexPool {
    inner: Mutex<GssdPool>,
}

impl MutexPool {
    /// An empty pool.
    pub fn new(cfg: HarvestConfig) -> Result<Self, HarvestError> {
        Ok(Self {
            inner: Mutex::new(GssdPool::new(cfg)?),
        })
    }

    /// Runs `f` with the pool locked: for several steps that must be atomic
    /// together, or to read lists and metadata consistently.
    pub fn with<R>(&self, f: impl FnOnce(&mut GssdPool) -> R) -> R {
        f(&mut self.inner.lock())
    }
}

impl SharedPool for MutexPool {
    fn insert(&self, g: Gssd) -> Result<(), HarvestError> {
        self.inner.lock().insert(g)
    }
    fn remove(&self, id: GssdId) -> Result<Gssd, HarvestError> {
        self.inner.lock().remove(id)
    }
    fn get(&self, id: GssdId) -> Option<Gssd> {
        self.inner.lock().get(id).cloned()
    }
    fn best_fit(&self, d: &Demand, now: Nanos) -> Result<Option<Gssd>, HarvestError> {
        Ok(self.inner.lock().best_fit(d, now)?.cloned())
    }
    fn harvest(
        &self,
        tenant: TenantId,
        d: &Demand,
        now: Nanos,
    ) -> Result<Option<Gssd>, HarvestError> {
        self.inner.lock().harvest(tenant, d, now)
    }
    fn release(&self, id: GssdId, tenant: TenantId, now: Nanos) -> Result<Reclaimed, HarvestError> {
        self.inner.lock().release(id, tenant, now)
    }
    fn early_reclaim(
        &self,
        id: GssdId,
        need: &Demand,
        now: Nanos,
    ) -> Result<Reclaimed, HarvestError> {
        self.inner.lock().early_reclaim(id, need, now)
    }
    fn refresh(&self, now: Nanos, updates: &[(GssdId, Nanos)]) -> RefreshReport {
        self.inner.lock().refresh(now, updates)
    }
    fn len(&self) -> usize {
        self.inner.lock().len()
    }
}

/// One reader-writer lock around the whole pool: like [`MutexPool`], but best-fit
/// lookups, `get` and `len` take the lock shared, so lookups on different threads
/// run in parallel; every change takes it exclusively.
#[derive(Debug)]
pub struct RwPool {
    inner: RwLock<GssdPool>,
}

impl RwPool {
    /// An empty pool.
    pub fn new(cfg: HarvestConfig) -> Result<Self, HarvestError> {
        Ok(Self {
            inner: RwLock::new(GssdPool::new(cfg)?),
        })
    }

    /// Runs `f` with the pool locked exclusively: for several steps that must be
    /// atomic together.
    pub fn with<R>(&self, f: impl FnOnce(&mut GssdPool) -> R) -> R {
        f(&mut self.inner.write())
    }

    /// Runs `f` with the pool locked shared: to read lists and metadata consistently.
    pub fn read<R>(&self, f: impl FnOnce(&GssdPool) -> R) -> R {
        f(&self.inner.read())
    }
}

impl SharedPool for RwPool {
    fn insert(&self, g: Gssd) -> Result<(), HarvestError> {
        self.inner.write().insert(g)
    }
    fn remove(&self, id: GssdId) -> Result<Gssd, HarvestError> {
        self.inner.write().remove(id)
    }
    fn get(&self, id: GssdId) -> Option<Gssd> {
        self.inner.read().get(id).cloned()
    }
    fn best_fit(&self, d: &Demand, now: Nanos) -> Result<Option<Gssd>, HarvestError> {
        Ok(self.inner.read().best_fit(d, now)?.cloned())
    }
    fn harvest(
        &self,
        tenant: TenantId,
        d: &Demand,
        now: Nanos,
    ) -> Result<Option<Gssd>, HarvestError> {
        self.inner.write().harvest(tenant, d, now)
    }
    fn release(&self, id: GssdId, tenant: TenantId, now: Nanos) -> Result<Reclaimed, HarvestError> {
        self.inner.write().release(id, tenant, now)
    }
    fn early_reclaim(
        &self,
        id: GssdId,
        need: &Demand,
        now: Nanos,
    ) -> Result<Reclaimed, HarvestError> {
        self.inner.write().early_reclaim(id, need, now)
    }
    fn refresh(&self, now: Nanos, updates: &[(GssdId, Nanos)]) -> RefreshReport {
        self.inner.write().refresh(now, updates)
    }
    fn len(&self) -> usize {
        self.inner.read().len()
    }
}

/// The pool split into shards by gSSD id, each with its own lock (the alternative
/// scheme; see the module docs).
#[derive(Debug)]
pub struct ShardedPool {
    shards: Vec<Mutex<GssdPool>>,
    homes: Mutex<FxHashMap<VssdId, GssdId>>,
    len: AtomicUsize,
}

impl ShardedPool {
    /// An empty pool of `shards` shards (at least one).
    pub fn new(cfg: HarvestConfig, shards: usize) -> Result<Self, HarvestError> {
        let shards = (0..shards.max(1))
            .map(|_| GssdPool::new(cfg).map(Mutex::new))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            shards,
            homes: Mutex::new(FxHashMap::default()),
            len: AtomicUsize::new(0),
        })
    }

    fn shard(&self, id: GssdId) -> &Mutex<GssdPool> {
        &self.shards[(id % self.shards.len() as u64) as usize]
    }

    fn forget_home(&self, g: &Gssd) {
        if let Some(h) = g.home {
            let mut homes = self.homes.lock();
            if homes.get(&h) == Some(&g.id) {
                homes.remove(&h);
            }
        }
    }

    /// The best fit over all shards as seen shard by shard.
    fn best_candidate(&self, d: &Demand, now: Nanos) -> Result<Option<Gssd>, HarvestError> {
        let mut best: Option<Gssd> = None;
        for s in &self.shards {
            let s = s.lock();
            if let Some(g) = s.best_fit(d, now)? {
                if best.as_ref().is_none_or(|b| rank(g) < rank(b)) {
                    best = Some(g.clone());
                }
            }
        }
        Ok(best)
    }
}

/// The best-fit order of [`crate::pool`]: capacity, bandwidth, expiry, id.
fn rank(g: &Gssd) -> (u64, u32, Nanos, GssdId) {
    (g.capacity, g.bandwidth, g.expiry, g.id)
}

impl SharedPool for ShardedPool {
    fn insert(&self, g: Gssd) -> Result<(), HarvestError> {
        if let Some(h) = g.home {
            let mut homes = self.homes.lock();
            if let Some(&existing) = homes.get(&h) {
                return Err(HarvestError::HomeAlreadyLends { home: h, existing });
            }
            homes.insert(h, g.id);
        }
        let home = g.home;
        let id = g.id;
        match self.shard(id).lock().insert(g) {
            Ok(()) => {
                self.len.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                if let Some(h) = home {
                    let mut homes = self.homes.lock();
                    if homes.get(&h) == Some(&id) {
                        homes.remove(&h);
                    }
                }
                Err(e)
            }
        }
    }

    fn remove(&self, id: GssdId) -> Result<Gssd, HarvestError> {
        let g = self.shard(id).lock().remove(id)?;
        self.len.fetch_sub(1, Ordering::Relaxed);
        self.forget_home(&g);
        Ok(g)
    }

    fn get(&self, id: GssdId) -> Option<Gssd> {
        self.shard(id).lock().get(id).cloned()
    }

    fn best_fit(&self, d: &Demand, now: Nanos) -> Result<Option<Gssd>, HarvestError> {
        d.validate()?;
        self.best_candidate(d, now)
    }

    fn harvest(
        &self,
        tenant: TenantId,
        d: &Demand,
        now: Nanos,
    ) -> Result<Option<Gssd>, HarvestError> {
        d.validate()?;
        loop {
            let Some(c) = self.best_candidate(d, now)? else {
                return Ok(None);
            };
            match self.shard(c.id).lock().assign(c.id, tenant) {
                Ok(g) => return Ok(Some(g.clone())),
                // Taken or removed by another thread since we looked: look again.
                Err(HarvestError::InUse { .. } | HarvestError::UnknownGssd(_)) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn release(&self, id: GssdId, tenant: TenantId, now: Nanos) -> Result<Reclaimed, HarvestError> {
        let r = self.shard(id).lock().release(id, tenant, now)?;
        if r.action != crate::ReclaimAction::ReturnToPool {
            self.len.fetch_sub(1, Ordering::Relaxed);
            self.forget_home(&r.gssd);
        }
        Ok(r)
    }

    fn early_reclaim(
        &self,
        id: GssdId,
        need: &Demand,
        now: Nanos,
    ) -> Result<Reclaimed, HarvestError> {
        need.validate()?;
        loop {
            let tenant = self
                .shard(id)
                .lock()
                .get(id)
                .ok_or(HarvestError::UnknownGssd(id))?
                .tenant;
            // Reserve the replacement first so the tenant never has nowhere to go.
            let replacement = match tenant {
                Some(t) => self.harvest(t, need, now)?.map(|g| g.id),
                None => None,
            };
            let undo = |r: Option<GssdId>| {
                if let Some(r) = r {
                    self.shard(r).lock().unassign_any(r);
                }
            };
            let mut shard = self.shard(id).lock();
            match shard.get(id).map(|g| g.tenant) {
                None => {
                    drop(shard);
                    undo(replacement);
                    return Err(HarvestError::UnknownGssd(id));
                }
                // Released or reassigned since we looked: decide again.
                Some(t) if t != tenant => {
                    drop(shard);
                    undo(replacement);
                    continue;
                }
                Some(_) => {}
            }
            let gssd = shard.take_any(id).expect("present under this lock");
            drop(shard);
            self.len.fetch_sub(1, Ordering::Relaxed);
            self.forget_home(&gssd);
            let action = plan_early_reclaim(&gssd, replacement);
            return Ok(Reclaimed { action, gssd });
        }
    }

    fn refresh(&self, now: Nanos, updates: &[(GssdId, Nanos)]) -> RefreshReport {
        let mut per: Vec<Vec<(GssdId, Nanos)>> = vec![Vec::new(); self.shards.len()];
        for &(id, e) in updates {
            per[(id % self.shards.len() as u64) as usize].push((id, e));
        }
        let mut report = RefreshReport::default();
        for (s, u) in self.shards.iter().zip(&per) {
            let r = s.lock().refresh(now, u);
            report.dropped.extend(r.dropped);
            report.expired_in_use.extend(r.expired_in_use);
            report.unknown.extend(r.unknown);
        }
        self.len.fetch_sub(report.dropped.len(), Ordering::Relaxed);
        for g in &report.dropped {
            self.forget_home(g);
        }
        report.dropped.sort_unstable_by_key(|g| g.id);
        report.expired_in_use.sort_unstable();
        report.unknown.sort_unstable();
        report
    }

    fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReclaimAction;
    use clock::SEC;
    use std::sync::Arc;

    const MIN30: Nanos = 1800 * SEC;
    const C: u64 = 4096;

    fn g(id: GssdId, home: VssdId, chunks: u64, bw: u32, halves: u64) -> Gssd {
        Gssd::new(
            &HarvestConfig::default(),
            id,
            Some(home),
            chunks * C,
            bw,
            0,
            halves * MIN30,
        )
        .unwrap()
    }

    fn schemes() -> Vec<Arc<dyn SharedPool>> {
        let cfg = HarvestConfig::default();
        vec![
            Arc::new(MutexPool::new(cfg).unwrap()),
            Arc::new(RwPool::new(cfg).unwrap()),
            Arc::new(ShardedPool::new(cfg, 4).unwrap()),
        ]
    }

    #[test]
    fn both_schemes_agree_on_the_basics() {
        for p in schemes() {
            p.insert(g(1, 1, 2, 2, 4)).unwrap();
            p.insert(g(2, 2, 1, 1, 4)).unwrap();
            p.insert(g(3, 3, 1, 2, 8)).unwrap();
            // One gSSD per home holds across shards (ids 1 and 5 are in one shard of
            // 4, 1 and 6 are not).
            assert_eq!(
                p.insert(g(6, 1, 1, 1, 4)),
                Err(HarvestError::HomeAlreadyLends {
                    home: 1,
                    existing: 1
                })
            );
            assert_eq!(
                p.insert(g(3, 9, 1, 1, 4)),
                Err(HarvestError::DuplicateId(3))
            );
            // The failed duplicate did not claim home 9.
            p.insert(g(7, 9, 1, 1, 4)).unwrap();
            p.remove(7).unwrap();
            let d = Demand {
                capacity: C,
                bandwidth: 2,
                duration: MIN30,
            };
            assert_eq!(p.best_fit(&d, 0).unwrap().unwrap().id, 3);
            assert_eq!(p.harvest(5, &d, 0).unwrap().unwrap().id, 3);
            assert_eq!(p.harvest(6, &d, 0).unwrap().unwrap().id, 1);
            assert_eq!(p.harvest(7, &d, 0).unwrap(), None);
            let r = p.early_reclaim(3, &d, 0).unwrap();
            assert_eq!(r.action, ReclaimAction::Evict);
            assert!(p.get(3).is_none());
            // Home 3 may lend again.
            p.insert(g(8, 3, 1, 1, 2)).unwrap();
            let r = p.release(1, 6, 3 * MIN30).unwrap();
            assert_eq!(r.action, ReclaimAction::EraseAndReturnHome);
            let rep = p.refresh(4 * MIN30, &[]);
            assert_eq!(
                rep.dropped.iter().map(|g| g.id).collect::<Vec<_>>(),
                vec![2, 8]
            );
            assert_eq!(p.len(), 0);
            p.insert(g(9, 2, 1, 1, 2)).unwrap();
            assert_eq!(p.len(), 1);
        }
    }

    /// Many threads harvest and release the same gSSDs; every successful harvest must
    /// hold the gSSD exclusively until its release.
    #[test]
    fn no_gssd_is_held_by_two_tenants_under_contention() {
        for p in schemes() {
            for i in 0..8 {
                p.insert(g(i, i, 1, 1, 100)).unwrap();
            }
            let owners: Arc<Vec<AtomicUsize>> =
                Arc::new((0..8).map(|_| AtomicUsize::new(0)).collect());
            let d = Demand {
                capacity: C,
                bandwidth: 1,
                duration: MIN30,
            };
            std::thread::scope(|s| {
                for t in 0..4u64 {
                    let (p, owners) = (p.clone(), owners.clone());
                    s.spawn(move || {
                        for _ in 0..2000 {
                            if let Some(got) = p.harvest(t, &d, 0).unwrap() {
                                let o = &owners[got.id as usize];
                                assert_eq!(
                                    o.fetch_add(1, Ordering::SeqCst),
                                    0,
                                    "double assignment"
                                );
                                o.fetch_sub(1, Ordering::SeqCst);
                                let r = p.release(got.id, t, 0).unwrap();
                                assert_eq!(r.action, ReclaimAction::ReturnToPool);
                            }
                        }
                    });
                }
            });
            assert_eq!(p.len(), 8);
            assert!((0..8).all(|i| p.get(i).unwrap().tenant.is_none()));
        }
    }
}
