//! The gSSD pool (paper §4.3.2, Figure 11): lists keyed by <capacity, bandwidth>,
//! each sorted by expiry from the farthest to the nearest, with best-fit matching.
//!
//! # What "best" means
//!
//! Among the unassigned gSSDs that cover a [`Demand`] (capacity ≥, bandwidth ≥, and
//! expiry ≥ `now + duration`), best-fit returns the one with the smallest
//! capacity, then the smallest bandwidth, then the *nearest* expiry that still lasts
//! long enough, then the lowest id ([`ExpiryOrder::Nearest`], the default; with
//! [`ExpiryOrder::Farthest`], the paper's order, the one lasting longest, the
//! highest id on ties). Capacity comes first because it is the scarcer,
//! coarser resource (64 chunks per device against 16 channels) and the keys are
//! sorted by it, as in the paper. The nearest sufficient expiry keeps long-lived
//! gSSDs for long demands.
//!
//! # Differences from the paper, and why
//!
//! * The paper keeps assigned gSSDs in the lists with `in_use = 1` and walks past
//!   them. Here only *unassigned* gSSDs are in the lists (assigned ones stay in the
//!   pool's table), so the walk within a list is a binary search on expiry
//!   (`BTreeSet::range`) instead of a linear scan that grows with the number of
//!   tenants.
//! * The keys are a sorted `Vec` searched with `partition_point` (the paper's binary
//!   search); keys covering a demand are not contiguous in <capacity, bandwidth>
//!   order, so the search finds the first key ≥ the demand and then walks forward,
//!   skipping keys with too little bandwidth or whose head (farthest expiry, kept in
//!   an array beside the keys) is too near. Empty lists are removed, so the walk is
//!   bounded by the number of distinct shapes (at most chunks × channels per device).

use std::cmp::Reverse;
use std::collections::BTreeSet;

use clock::Nanos;
use rustc_hash::FxHashMap;

use crate::reclaim::{plan_early_reclaim, plan_release, ReclaimAction};
use crate::{Demand, ExpiryOrder, Gssd, GssdId, HarvestConfig, HarvestError, TenantId, VssdId};

type Key = (u64, u32);
/// One list entry. Set order is expiry descending (farthest first), then id
/// descending, so the *last* entry that lasts long enough is the nearest sufficient
/// expiry with the lowest id.
type Entry = (Reverse<Nanos>, Reverse<GssdId>);

/// What happened to a gSSD that left a tenant or the pool: the action the caller must
/// carry out on the data plane, and the gSSD's metadata as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reclaimed {
    /// What to do with the blocks (and, for a migration, where the data goes).
    pub action: ReclaimAction,
    /// The gSSD's metadata at the time of the decision (still showing its tenant).
    pub gssd: Gssd,
}

/// What an expiry refresh did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// Unassigned gSSDs whose expiry had passed, lowest id first: removed from the
    /// pool, their blocks go back to their homes (the caller erases them if they were
    /// ever written).
    pub dropped: Vec<Gssd>,
    /// Assigned gSSDs whose expiry had passed, sorted: still in the pool; the caller
    /// should reclaim them early ([`GssdPool::early_reclaim`]) since their home wants
    /// them.
    pub expired_in_use: Vec<GssdId>,
    /// Updates naming a gSSD that is not in the pool (ignored), sorted.
    pub unknown: Vec<GssdId>,
}

/// The gSSD pool of one vSSD manager. Not synchronised: see [`crate::concurrent`]
/// for the shared versions.
#[derive(Debug, Clone)]
pub struct GssdPool {
    cfg: HarvestConfig,
    gssds: FxHashMap<GssdId, Gssd>,
    homes: FxHashMap<VssdId, GssdId>,
    keys: Vec<Key>,
    lists: Vec<BTreeSet<Entry>>,
    /// The farthest expiry of each list (its head), beside the keys so that the walk
    /// skips a list that cannot last long enough without touching it.
    heads: Vec<Nanos>,
}

impl GssdPool {
    /// An empty pool with the granularity of `cfg`.
    pub fn new(cfg: HarvestConfig) -> Result<Self, HarvestError> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            gssds: FxHashMap::default(),
            homes: FxHashMap::default(),
            keys: Vec::new(),
            lists: Vec::new(),
            heads: Vec::new(),
        })
    }

    /// The pool's configuration.
    pub fn config(&self) -> &HarvestConfig {
        &self.cfg
    }

    /// Number of gSSDs in the pool, assigned or not.
    pub fn len(&self) -> usize {
        self.gssds.len()
    }

    /// Whether the pool holds no gSSD.
    pub fn is_empty(&self) -> bool {
        self.gssds.is_empty()
    }

    /// A gSSD's metadata.
    pub fn get(&self, id: GssdId) -> Option<&Gssd> {
        self.gssds.get(&id)
    }

    /// Every gSSD, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Gssd> {
        self.gssds.values()
    }

    /// The gSSD lent by `home`, if any.
    pub fn of_home(&self, home: VssdId) -> Option<&Gssd> {
        self.homes.get(&home).and_then(|id| self.gssds.get(id))
    }

    /// The gSSDs assigned to `tenant`, lowest id first.
    pub fn assigned_to(&self, tenant: TenantId) -> Vec<&Gssd> {
        let mut v: Vec<&Gssd> = self
            .gssds
            .values()
            .filter(|g| g.tenant == Some(tenant))
            .collect();
        v.sort_by_key(|g| g.id);
        v
    }

    /// The unassigned gSSDs of each <capacity, bandwidth> list in list order
    /// (farthest expiry first), keys in ascending order: Figure 11 as data.
    pub fn lists(&self) -> Vec<((u64, u32), Vec<GssdId>)> {
        self.keys
            .iter()
            .zip(&self.lists)
            .map(|(k, l)| (*k, l.iter().map(|e| e.1 .0).collect()))
            .collect()
    }

    /// Whether every cached list head equals its list's farthest expiry.
    #[cfg(test)]
    pub(crate) fn heads_consistent(&self) -> bool {
        self.heads.len() == self.lists.len()
            && self
                .lists
                .iter()
                .zip(&self.heads)
                .all(|(l, h)| l.first().map(|e| e.0 .0) == Some(*h))
    }

    /// Adds a new gSSD (the paper's proactive creation). It must be unassigned, its
    /// id new, its shape aligned to the pool's granularity, and its home must not
    /// already lend a gSSD (one gSSD per vSSD, §4.3.2).
    pub fn insert(&mut self, g: Gssd) -> Result<(), HarvestError> {
        if g.in_use() {
            return Err(HarvestError::InsertAssigned(g.id));
        }
        if g.bandwidth == 0 {
            return Err(HarvestError::ZeroBandwidth);
        }
        if g.capacity == 0 || !g.capacity.is_multiple_of(self.cfg.chunk_blocks) {
            return Err(HarvestError::UnalignedCapacity {
                capacity: g.capacity,
                chunk: self.cfg.chunk_blocks,
            });
        }
        if self.gssds.contains_key(&g.id) {
            return Err(HarvestError::DuplicateId(g.id));
        }
        if let Some(home) = g.home {
            if let Some(&existing) = self.homes.get(&home) {
                return Err(HarvestError::HomeAlreadyLends { home, existing });
            }
            self.homes.insert(home, g.id);
        }
        self.list_insert(&g);
        self.gssds.insert(g.id, g);
        Ok(())
    }

    /// Removes an unassigned gSSD (for example when its home needs the blocks back
    /// before anyone harvested them). An assigned one must go through
    /// [`GssdPool::release`] or [`GssdPool::early_reclaim`].
    pub fn remove(&mut self, id: GssdId) -> Result<Gssd, HarvestError> {
        let g = self.gssds.get(&id).ok_or(HarvestError::UnknownGssd(id))?;
        if let Some(t) = g.tenant {
            return Err(HarvestError::InUse { id, tenant: t });
        }
        Ok(self.take(id))
    }

    /// The best-fit unassigned gSSD for `d` at `now` (see the module docs for what
    /// "best" means), without assigning it.
    pub fn best_fit(&self, d: &Demand, now: Nanos) -> Result<Option<&Gssd>, HarvestError> {
        d.validate()?;
        Ok(self.best_fit_id(d, now).map(|id| &self.gssds[&id]))
    }

    fn best_fit_id(&self, d: &Demand, now: Nanos) -> Option<GssdId> {
        let need = now.saturating_add(d.duration);
        let start = self
            .keys
            .partition_point(|k| *k < (d.capacity, d.bandwidth));
        for i in start..self.keys.len() {
            if self.keys[i].1 < d.bandwidth || self.heads[i] < need {
                continue;
            }
            // Entries lasting long enough are a prefix of the list (farthest first);
            // the last of them is the nearest sufficient expiry, lowest id on ties,
            // and the first (the head, checked above) the farthest.
            let e = match self.cfg.expiry_order {
                ExpiryOrder::Nearest => self.lists[i]
                    .range(..=(Reverse(need), Reverse(0)))
                    .next_back(),
                ExpiryOrder::Farthest => self.lists[i].first(),
            };
            if let Some(e) = e {
                return Some(e.1 .0);
            }
        }
        None
    }

    /// Assigns gSSD `id` to `tenant`: it leaves the lists so nobody else can match it.
    pub fn assign(&mut self, id: GssdId, tenant: TenantId) -> Result<&Gssd, HarvestError> {
        let g = self.gssds.get(&id).ok_or(HarvestError::UnknownGssd(id))?;
        if let Some(t) = g.tenant {
            return Err(HarvestError::InUse { id, tenant: t });
        }
        let (key, entry) = (key_of(g), entry_of(g));
        self.list_remove(key, &entry);
        let g = self.gssds.get_mut(&id).expect("checked above");
        g.tenant = Some(tenant);
        Ok(g)
    }

    /// Best-fit plus assignment in one step: the paper's harvesting request. `None`
    /// when no gSSD covers the demand (under-harvesting, the caller raises the
    /// exception). Returns a copy of the assigned gSSD's metadata.
    pub fn harvest(
        &mut self,
        tenant: TenantId,
        d: &Demand,
        now: Nanos,
    ) -> Result<Option<Gssd>, HarvestError> {
        d.validate()?;
        match self.best_fit_id(d, now) {
            Some(id) => self.assign(id, tenant).map(|g| Some(g.clone())),
            None => Ok(None),
        }
    }

    /// One step of splitting a demand over several gSSDs (Figure 12,
    /// under-harvesting): the best fit for `d` rounded up to the pool's
    /// granularity if one covers it; else the biggest unassigned gSSD (largest
    /// capacity, then bandwidth, lowest id on ties) that lasts the demand's own
    /// `d.duration` from `now`, not its rounded-up one: a piece of a split
    /// only has to hold out until the demand ends. `None` when no unassigned gSSD
    /// lasts that long. The daemon's `create_volume` asks this of each device's
    /// pool for what is still missing; [`GssdPool::harvest_split`] loops over it
    /// in one pool.
    pub fn split_pick(&self, d: &Demand, now: Nanos) -> Result<Option<&Gssd>, HarvestError> {
        d.validate()?;
        let id = self
            .best_fit_id(&d.quantized(&self.cfg), now)
            .or_else(|| self.largest_id(now.saturating_add(d.duration)));
        Ok(id.map(|id| &self.gssds[&id]))
    }

    /// The biggest unassigned gSSD lasting until at least `until`: the last key
    /// (keys ascend by capacity, then bandwidth) whose head lasts long enough,
    /// and in its list the lowest id among the entries that do.
    fn largest_id(&self, until: Nanos) -> Option<GssdId> {
        (0..self.keys.len())
            .rev()
            .filter(|&i| self.heads[i] >= until)
            .find_map(|i| {
                self.lists[i]
                    .range(..=(Reverse(until), Reverse(0)))
                    .map(|e| e.1 .0)
                    .min()
            })
    }

    /// A harvesting request that may take several gSSDs, all or nothing
    /// (BlockFlex §4.5, Figure 12): one gSSD that covers `d` if any (best fit,
    /// exactly [`GssdPool::harvest`]); else, step by step
    /// ([`GssdPool::split_pick`]), the biggest gSSD lasting long enough, then
    /// the best fit for what is still missing, until the capacity and the
    /// bandwidth are both met. Every gSSD taken is assigned to `tenant`, in
    /// the order taken (the first is the tenant's first segment). `None`, with
    /// nothing assigned, when the unassigned gSSDs cannot meet the demand
    /// together: the caller raises the exception.
    pub fn harvest_split(
        &mut self,
        tenant: TenantId,
        d: &Demand,
        now: Nanos,
    ) -> Result<Option<Vec<Gssd>>, HarvestError> {
        d.validate()?;
        let (mut cap, mut bw) = (d.capacity, d.bandwidth);
        let mut taken: Vec<Gssd> = Vec::new();
        while cap > 0 || bw > 0 {
            let want = Demand {
                capacity: cap.max(1),
                bandwidth: bw.max(1),
                duration: d.duration,
            };
            let Some(id) = self.split_pick(&want, now)?.map(|g| g.id) else {
                // Nothing half-taken: the tenant never used these.
                for g in &taken {
                    self.unassign(g.id, tenant)?;
                }
                return Ok(None);
            };
            let g = self.assign(id, tenant)?.clone();
            cap = cap.saturating_sub(g.capacity);
            bw = bw.saturating_sub(g.bandwidth);
            taken.push(g);
        }
        Ok(Some(taken))
    }

    /// Undoes an [`GssdPool::assign`] that the caller could not complete (for
    /// example a request that needed several gSSDs and found too few): the gSSD
    /// goes back to the lists as it was, without the release rule, because the
    /// tenant never used it.
    pub fn unassign(&mut self, id: GssdId, tenant: TenantId) -> Result<(), HarvestError> {
        let g = self
            .gssds
            .get_mut(&id)
            .ok_or(HarvestError::UnknownGssd(id))?;
        if g.tenant != Some(tenant) {
            return Err(HarvestError::NotAssignedTo {
                id,
                tenant,
                actual: g.tenant,
            });
        }
        g.tenant = None;
        let g = g.clone();
        self.list_insert(&g);
        Ok(())
    }

    /// The harvest tenant is done with gSSD `id` (job end). Following
    /// [`plan_release`], the gSSD goes back to the lists, or, if it expires within
    /// the reclaim horizon, leaves the pool to be erased and returned to its home.
    pub fn release(
        &mut self,
        id: GssdId,
        tenant: TenantId,
        now: Nanos,
    ) -> Result<Reclaimed, HarvestError> {
        let g = self.gssds.get(&id).ok_or(HarvestError::UnknownGssd(id))?;
        if g.tenant != Some(tenant) {
            return Err(HarvestError::NotAssignedTo {
                id,
                tenant,
                actual: g.tenant,
            });
        }
        let gssd = g.clone();
        let action = plan_release(&gssd, now, self.cfg.reclaim_horizon());
        match action {
            ReclaimAction::ReturnToPool => {
                let g = self.gssds.get_mut(&id).expect("checked above");
                g.tenant = None;
                let g = g.clone();
                self.list_insert(&g);
            }
            _ => {
                self.take(id);
            }
        }
        Ok(Reclaimed { action, gssd })
    }

    /// Early reclamation (§4.5): gSSD `id`'s home needs its flash back now.
    ///
    /// An unassigned gSSD simply leaves the pool ([`ReclaimAction::EraseAndReturnHome`]).
    /// An assigned one leaves the pool too, and its tenant gets a replacement: the
    /// best fit for `need` (what the tenant still needs; typically the old gSSD's
    /// shape and the tenant's predicted remaining duration) is assigned to the same
    /// tenant at once, so no concurrent request can take it, and the action is
    /// [`ReclaimAction::Migrate`]; with no fit it is [`ReclaimAction::Evict`] (the
    /// tenant gets an eviction notice). The caller copies the data, switches the
    /// mapping and erases the old blocks.
    pub fn early_reclaim(
        &mut self,
        id: GssdId,
        need: &Demand,
        now: Nanos,
    ) -> Result<Reclaimed, HarvestError> {
        need.validate()?;
        let g = self.gssds.get(&id).ok_or(HarvestError::UnknownGssd(id))?;
        let replacement = match g.tenant {
            Some(t) => self.harvest(t, need, now)?.map(|r| r.id),
            None => None,
        };
        let gssd = self.take(id);
        let action = plan_early_reclaim(&gssd, replacement);
        Ok(Reclaimed { action, gssd })
    }

    /// The periodic refresh (every [`HarvestConfig::refresh_interval_s`], driven by
    /// the caller, e.g. with a [`crate::RefreshTimer`]): applies the predictors' new
    /// expiries (`updates`: id → new absolute expiry), then drops every unassigned
    /// gSSD whose expiry is at or before `now` and returns them. An assigned
    /// gSSD's expiry is only ever extended: its tenant was matched on it, and a
    /// predictor that turns pessimistic while the home still leaves the flash
    /// idle must not evict the tenant (in the fleet simulator that rule cut the
    /// quantile model's early reclamations from 27,093 to 1,316). Assigned
    /// gSSDs whose promise has run out are reported, not dropped: their data
    /// must move first.
    pub fn refresh(&mut self, now: Nanos, updates: &[(GssdId, Nanos)]) -> RefreshReport {
        let mut report = RefreshReport::default();
        for &(id, expiry) in updates {
            let Some(g) = self.gssds.get(&id) else {
                report.unknown.push(id);
                continue;
            };
            if g.expiry == expiry {
                continue;
            }
            if g.in_use() {
                // A tenant holds it: what it was promised stands. A new
                // prediction may promise more, never less; only the home's
                // real need takes it back early (`early_reclaim`, the
                // paper's early resource reclamation, §4.5).
                let e = &mut self.gssds.get_mut(&id).expect("present").expiry;
                *e = (*e).max(expiry);
            } else {
                let (key, entry) = (key_of(g), entry_of(g));
                self.list_remove(key, &entry);
                let g = self.gssds.get_mut(&id).expect("present");
                g.expiry = expiry;
                let g = g.clone();
                self.list_insert(&g);
            }
        }
        report.unknown.sort_unstable();
        // Expired entries are the tail of each list (nearest expiry last).
        let mut expired = Vec::new();
        for l in &self.lists {
            expired.extend(
                l.range((Reverse(now), Reverse(GssdId::MAX))..)
                    .map(|e| e.1 .0),
            );
        }
        expired.sort_unstable();
        report.dropped = expired.into_iter().map(|id| self.take(id)).collect();
        report.expired_in_use = self
            .gssds
            .values()
            .filter(|g| g.in_use() && g.expiry <= now)
            .map(|g| g.id)
            .collect();
        report.expired_in_use.sort_unstable();
        report
    }

    /// Removes `id` whether assigned or not (the sharded pool's early reclamation,
    /// which reserves the replacement in another shard first).
    pub(crate) fn take_any(&mut self, id: GssdId) -> Option<Gssd> {
        self.gssds.contains_key(&id).then(|| self.take(id))
    }

    /// Puts an assigned gSSD back in the lists without the release rule (the sharded
    /// pool undoing a replacement it reserved for nothing). No-op if absent or free.
    pub(crate) fn unassign_any(&mut self, id: GssdId) {
        if let Some(g) = self.gssds.get_mut(&id) {
            if g.tenant.take().is_some() {
                let g = g.clone();
                self.list_insert(&g);
            }
        }
    }

    /// Removes `id` from every index. Panics if absent (callers check).
    fn take(&mut self, id: GssdId) -> Gssd {
        let g = self.gssds.remove(&id).expect("caller checked presence");
        if !g.in_use() {
            self.list_remove(key_of(&g), &entry_of(&g));
        }
        if let Some(h) = g.home {
            self.homes.remove(&h);
        }
        g
    }

    fn list_insert(&mut self, g: &Gssd) {
        let key = key_of(g);
        let i = match self.keys.binary_search(&key) {
            Ok(i) => i,
            Err(i) => {
                self.keys.insert(i, key);
                self.lists.insert(i, BTreeSet::new());
                self.heads.insert(i, 0);
                i
            }
        };
        self.lists[i].insert(entry_of(g));
        self.heads[i] = self.heads[i].max(g.expiry);
    }

    fn list_remove(&mut self, key: Key, entry: &Entry) {
        if let Ok(i) = self.keys.binary_search(&key) {
            self.lists[i].remove(entry);
            match self.lists[i].first() {
                Some(head) => self.heads[i] = head.0 .0,
                None => {
                    self.keys.remove(i);
                    self.lists.remove(i);
                    self.heads.remove(i);
                }
            }
        }
    }
}

fn key_of(g: &Gssd) -> Key {
    (g.capacity, g.bandwidth)
}

fn entry_of(g: &Gssd) -> Entry {
    (Reverse(g.expiry), Reverse(g.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::SEC;

    const MIN30: Nanos = 1800 * SEC;
    const C: u64 = 4096;

    fn pool() -> GssdPool {
        GssdPool::new(HarvestConfig::default()).unwrap()
    }

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

    fn demand(chunks: u64, bw: u32, halves: u64) -> Demand {
        Demand {
            capacity: chunks * C,
            bandwidth: bw,
            duration: halves * MIN30,
        }
    }

    fn ids(v: &[Gssd]) -> Vec<GssdId> {
        v.iter().map(|g| g.id).collect()
    }

    #[test]
    fn a_split_prefers_one_covering_gssd_else_takes_the_biggest_first() {
        let mut p = pool();
        p.insert(g(1, 1, 2, 1, 10)).unwrap();
        p.insert(g(2, 2, 4, 2, 10)).unwrap();
        p.insert(g(3, 3, 3, 1, 10)).unwrap();
        p.insert(g(4, 4, 8, 4, 10)).unwrap();
        // gSSD 4 covers 3 chunks on 1 channel alone, but best fit is the
        // smallest that covers: 3, and nothing else is taken.
        let got = p.harvest_split(7, &demand(3, 1, 2), 0).unwrap().unwrap();
        assert_eq!(ids(&got), vec![3]);
        // 12 chunks on 5 channels: no single gSSD covers; the biggest (4: 8
        // chunks, 4 channels) first, then the best fit for the 4 chunks and 1
        // channel still missing (2), not the other small one.
        let got = p.harvest_split(8, &demand(12, 5, 2), 0).unwrap().unwrap();
        assert_eq!(ids(&got), vec![4, 2]);
        assert!(got.iter().all(|g| g.tenant == Some(8)));
        assert_eq!(
            ids(&p.assigned_to(8).into_iter().cloned().collect::<Vec<_>>()),
            vec![2, 4]
        );
        // A short-lived big gSSD cannot be a piece of a long demand.
        let mut q = pool();
        q.insert(g(1, 1, 8, 4, 1)).unwrap();
        q.insert(g(2, 2, 2, 1, 10)).unwrap();
        q.insert(g(3, 3, 2, 1, 10)).unwrap();
        let got = q.harvest_split(9, &demand(4, 2, 4), 0).unwrap().unwrap();
        assert_eq!(ids(&got), vec![2, 3], "biggest that lasts, lowest id first");
    }

    #[test]
    fn a_split_is_all_or_nothing() {
        let mut p = pool();
        p.insert(g(1, 1, 4, 2, 10)).unwrap();
        p.insert(g(2, 2, 2, 1, 10)).unwrap();
        p.insert(g(3, 3, 8, 4, 1)).unwrap(); // too short for the demand
        let before = p.lists();
        // 7 chunks: the two that last hold 6. Nothing may stay assigned.
        assert_eq!(p.harvest_split(7, &demand(7, 1, 4), 0).unwrap(), None);
        assert!(p.assigned_to(7).is_empty());
        assert_eq!(p.lists(), before);
        // Capacity met but one channel short: refused too.
        assert_eq!(p.harvest_split(7, &demand(6, 4, 4), 0).unwrap(), None);
        assert_eq!(p.lists(), before);
        // Exactly what the two hold: both.
        let got = p.harvest_split(7, &demand(6, 3, 4), 0).unwrap().unwrap();
        assert_eq!(ids(&got), vec![1, 2]);
        assert_eq!(p.lists(), vec![((8 * C, 4), vec![3])]);
        assert_eq!(
            p.harvest_split(7, &demand(0, 1, 1), 0),
            Err(HarvestError::ZeroDemand(demand(0, 1, 1)))
        );
    }

    #[test]
    fn split_pick_matches_a_covering_gssd_on_the_rounded_demand_and_a_piece_on_the_real_one() {
        let mut p = pool();
        // Lasts 2 granules: covers a demand of 1.5 granules only if not rounded up.
        p.insert(g(1, 1, 4, 2, 2)).unwrap();
        let d = Demand {
            capacity: C,
            bandwidth: 1,
            duration: 3 * MIN30 / 2,
        };
        let t = MIN30 / 2;
        assert!(p.best_fit(&d.quantized(p.config()), t).unwrap().is_none());
        // Half a granule in, no gSSD lasts the rounded 2 granules, but the
        // biggest piece lasting 1.5 is this one.
        assert_eq!(p.split_pick(&d, t).unwrap().map(|g| g.id), Some(1));
        assert_eq!(p.split_pick(&d, MIN30).unwrap(), None);
    }

    #[test]
    fn unassign_puts_a_gssd_back_as_it_was() {
        let mut p = pool();
        p.insert(g(1, 1, 2, 1, 1)).unwrap(); // expires within the reclaim horizon
        let before = p.lists();
        p.assign(1, 9).unwrap();
        assert!(p.best_fit(&demand(1, 1, 1), 0).unwrap().is_none());
        assert_eq!(
            p.unassign(1, 8),
            Err(HarvestError::NotAssignedTo {
                id: 1,
                tenant: 8,
                actual: Some(9)
            })
        );
        // Unlike release, no horizon rule: it stays in the pool.
        p.unassign(1, 9).unwrap();
        assert_eq!(p.lists(), before);
        assert_eq!(p.get(1).unwrap().tenant, None);
        assert_eq!(p.unassign(2, 9), Err(HarvestError::UnknownGssd(2)));
    }

    #[test]
    fn best_fit_prefers_smallest_capacity_then_bandwidth_then_nearest_expiry() {
        let mut p = pool();
        p.insert(g(1, 1, 4, 1, 10)).unwrap(); // big capacity, 1 channel
        p.insert(g(2, 2, 2, 4, 10)).unwrap(); // smaller capacity, 4 channels
        p.insert(g(3, 3, 2, 2, 10)).unwrap(); // same capacity, 2 channels
        p.insert(g(4, 4, 2, 2, 4)).unwrap(); // same key, nearer expiry
        p.insert(g(5, 5, 2, 2, 2)).unwrap(); // same key, too short for 3 halves
        p.insert(g(6, 6, 1, 8, 10)).unwrap(); // too small
        let d = demand(2, 1, 3);
        assert_eq!(p.best_fit(&d, 0).unwrap().unwrap().id, 4);
        // Bandwidth 3 skips the 2-channel key: 2 chunks × 4 channels wins over 4 × 1.
        assert_eq!(p.best_fit(&demand(2, 3, 3), 0).unwrap().unwrap().id, 2);
        // Needing 5 halves skips id 4; id 3 is next in the same key.
        assert_eq!(p.best_fit(&demand(2, 1, 5), 0).unwrap().unwrap().id, 3);
        // Nothing has 5 channels and 2 chunks.
        assert_eq!(p.best_fit(&demand(2, 5, 1), 0).unwrap(), None);
        // Nothing lasts 11 halves.
        assert_eq!(p.best_fit(&demand(1, 1, 11), 0).unwrap(), None);
        // Later on the clock, less time is left.
        assert_eq!(
            p.best_fit(&demand(2, 1, 1), 9 * MIN30).unwrap().unwrap().id,
            3
        );
    }

    #[test]
    fn farthest_first_takes_the_head_of_the_smallest_sufficient_list() {
        let mut p = GssdPool::new(HarvestConfig {
            expiry_order: ExpiryOrder::Farthest,
            ..HarvestConfig::default()
        })
        .unwrap();
        p.insert(g(3, 3, 2, 2, 10)).unwrap();
        p.insert(g(4, 4, 2, 2, 4)).unwrap();
        p.insert(g(5, 5, 2, 2, 2)).unwrap();
        p.insert(g(1, 1, 4, 1, 20)).unwrap(); // lasts longer, but bigger
                                              // Same demand as above: nearest picks 4, farthest 3.
        assert_eq!(p.best_fit(&demand(2, 1, 3), 0).unwrap().unwrap().id, 3);
        p.assign(3, 9).unwrap();
        assert_eq!(p.best_fit(&demand(2, 1, 3), 0).unwrap().unwrap().id, 4);
        // Too long for the key's head: the next key.
        assert_eq!(p.best_fit(&demand(2, 1, 5), 0).unwrap().unwrap().id, 1);
        assert_eq!(
            "farthest".parse::<ExpiryOrder>().unwrap(),
            ExpiryOrder::Farthest
        );
        assert!("far"
            .parse::<ExpiryOrder>()
            .unwrap_err()
            .to_string()
            .contains("nearest or farthest"));
    }

    #[test]
    fn lists_are_keyed_and_sorted_farthest_first() {
        let mut p = pool();
        p.insert(g(1, 1, 1, 1, 2)).unwrap();
        p.insert(g(2, 2, 1, 1, 6)).unwrap();
        p.insert(g(3, 3, 1, 1, 4)).unwrap();
        p.insert(g(4, 4, 1, 2, 4)).unwrap();
        assert_eq!(p.lists(), vec![((C, 1), vec![2, 3, 1]), ((C, 2), vec![4])]);
    }

    #[test]
    fn bad_inserts_get_clear_errors() {
        let mut p = pool();
        p.insert(g(1, 10, 1, 1, 2)).unwrap();
        assert_eq!(
            p.insert(g(1, 11, 1, 1, 2)),
            Err(HarvestError::DuplicateId(1))
        );
        assert_eq!(
            p.insert(g(2, 10, 1, 1, 2)),
            Err(HarvestError::HomeAlreadyLends {
                home: 10,
                existing: 1
            })
        );
        let msg = p.insert(g(2, 10, 1, 1, 2)).unwrap_err().to_string();
        assert!(msg.contains("vSSD 10") && msg.contains("gSSD 1"), "{msg}");
        let mut assigned = g(3, 12, 1, 1, 2);
        assigned.tenant = Some(5);
        assert_eq!(p.insert(assigned), Err(HarvestError::InsertAssigned(3)));
        let mut odd = g(4, 13, 1, 1, 2);
        odd.capacity = 100;
        assert!(matches!(
            p.insert(odd),
            Err(HarvestError::UnalignedCapacity { capacity: 100, .. })
        ));
        // Unsold gSSDs have no home and are not limited to one.
        let mut u1 = g(5, 0, 1, 1, 2);
        u1.home = None;
        let mut u2 = g(6, 0, 1, 1, 2);
        u2.home = None;
        p.insert(u1).unwrap();
        p.insert(u2).unwrap();
        assert_eq!(p.len(), 3);
        // After removal the home may lend again.
        p.remove(1).unwrap();
        p.insert(g(7, 10, 1, 1, 2)).unwrap();
        assert_eq!(p.of_home(10).unwrap().id, 7);
        assert_eq!(
            p.best_fit(&demand(0, 1, 1), 0),
            Err(HarvestError::ZeroDemand(demand(0, 1, 1)))
        );
    }

    #[test]
    fn assign_release_and_double_assignment() {
        let mut p = pool();
        p.insert(g(1, 1, 1, 1, 10)).unwrap();
        let got = p.harvest(7, &demand(1, 1, 2), 0).unwrap().unwrap();
        assert_eq!((got.id, got.tenant), (1, Some(7)));
        assert!(p.harvest(8, &demand(1, 1, 2), 0).unwrap().is_none());
        assert_eq!(
            p.assign(1, 8),
            Err(HarvestError::InUse { id: 1, tenant: 7 })
        );
        assert_eq!(p.remove(1), Err(HarvestError::InUse { id: 1, tenant: 7 }));
        assert!(matches!(
            p.release(1, 8, 0),
            Err(HarvestError::NotAssignedTo {
                id: 1,
                tenant: 8,
                actual: Some(7)
            })
        ));
        assert_eq!(p.assigned_to(7).len(), 1);
        let r = p.release(1, 7, MIN30).unwrap();
        assert_eq!(r.action, ReclaimAction::ReturnToPool);
        assert_eq!(
            p.harvest(8, &demand(1, 1, 2), MIN30).unwrap().unwrap().id,
            1
        );
        // Released within 30 minutes of expiry: erased and sent home.
        let r = p.release(1, 8, 9 * MIN30).unwrap();
        assert_eq!(r.action, ReclaimAction::EraseAndReturnHome);
        assert!(p.is_empty() && p.of_home(1).is_none() && p.lists().is_empty());
        assert_eq!(p.release(1, 8, 0), Err(HarvestError::UnknownGssd(1)));
    }

    #[test]
    fn refresh_updates_expiries_and_drops_expired_unassigned() {
        let mut p = pool();
        p.insert(g(1, 1, 1, 1, 2)).unwrap();
        p.insert(g(2, 2, 1, 1, 4)).unwrap();
        p.insert(g(3, 3, 1, 1, 6)).unwrap();
        p.insert(g(4, 4, 1, 1, 2)).unwrap();
        p.assign(4, 9).unwrap();
        // The predictor now says gSSD 3 ends at 1 half and gSSD 1 lasts 8.
        let r = p.refresh(2 * MIN30, &[(3, MIN30), (1, 8 * MIN30), (99, 0)]);
        assert_eq!(r.dropped.iter().map(|g| g.id).collect::<Vec<_>>(), vec![3]);
        assert_eq!(r.expired_in_use, vec![4]);
        assert_eq!(r.unknown, vec![99]);
        assert_eq!(p.lists(), vec![((C, 1), vec![1, 2])]);
        assert!(p.of_home(3).is_none());
        assert_eq!(p.get(4).unwrap().tenant, Some(9));
    }

    #[test]
    fn refresh_never_shortens_what_a_tenant_was_promised() {
        let mut p = pool();
        p.insert(g(1, 1, 1, 1, 6)).unwrap();
        p.insert(g(2, 2, 1, 1, 6)).unwrap();
        p.assign(1, 9).unwrap();
        // The home's predictor turns pessimistic: both "end now".
        let r = p.refresh(MIN30, &[(1, MIN30), (2, MIN30)]);
        assert_eq!(r.dropped.iter().map(|g| g.id).collect::<Vec<_>>(), vec![2]);
        assert!(r.expired_in_use.is_empty(), "the tenant keeps its gSSD");
        assert_eq!(p.get(1).unwrap().expiry, 6 * MIN30);
        // A longer promise is taken.
        p.refresh(2 * MIN30, &[(1, 9 * MIN30)]);
        assert_eq!(p.get(1).unwrap().expiry, 9 * MIN30);
        // Only when the promise itself runs out is it reported.
        let r = p.refresh(9 * MIN30, &[(1, 3 * MIN30)]);
        assert_eq!(r.expired_in_use, vec![1]);
    }
}
