//! Reclaim and exception decisions (paper §4.3.2 "Reclaiming gSSDs" and §4.5,
//! Table 1) as pure functions returning actions.
//!
//! The daemon executes an action on real flash (erase in parallel across channels,
//! copy block by block, switch the mapping, post an eviction notice); the fleet
//! simulator executes the same action on its model. Keeping the decisions free of
//! I/O is what lets both share them and lets every case be tested directly.

use clock::Nanos;
use serde::{Deserialize, Serialize};

use crate::{Demand, Gssd, GssdId};

/// What to do with a gSSD that leaves its harvest tenant or the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReclaimAction {
    /// Put it back in the pool for the next harvest tenant (it lasts long enough to
    /// be worth lending again). Its blocks must still be erased before another
    /// tenant reads them; the data plane does that when it hands them over.
    ReturnToPool,
    /// Erase its blocks (in parallel across channels) and give them back to the home
    /// vSSD; the gSSD instance is removed.
    EraseAndReturnHome,
    /// Early reclamation with a replacement: copy the tenant's data block by block to
    /// gSSD `to` (already assigned to the same tenant), switch the mapping, then erase
    /// the old blocks and give them back to the home.
    Migrate {
        /// The replacement gSSD.
        to: GssdId,
    },
    /// Early reclamation with no gSSD that fits: the tenant gets an eviction notice
    /// (like a spot VM's) and time to move off; afterwards the old blocks are erased
    /// and returned home.
    Evict,
}

/// The release rule of §4.3.2 (job end or a tenant giving a gSSD back): if the gSSD
/// expires within `horizon` of `now` (30 minutes by default), erase it and return it
/// home, else return it to the pool.
pub fn plan_release(g: &Gssd, now: Nanos, horizon: Nanos) -> ReclaimAction {
    if g.expiry <= now.saturating_add(horizon) {
        ReclaimAction::EraseAndReturnHome
    } else {
        ReclaimAction::ReturnToPool
    }
}

/// The early-reclamation rule of §4.5: a home takes its flash back. An unassigned
/// gSSD just goes home; an assigned one migrates to `replacement` (a gSSD that fits
/// the tenant's need, found by best-fit) or, with none, its tenant is evicted.
pub fn plan_early_reclaim(g: &Gssd, replacement: Option<GssdId>) -> ReclaimAction {
    match (g.in_use(), replacement) {
        (false, _) => ReclaimAction::EraseAndReturnHome,
        (true, Some(to)) => ReclaimAction::Migrate { to },
        (true, None) => ReclaimAction::Evict,
    }
}

/// Capacity and bandwidth, one point of a prediction or of reality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Capacity in flash blocks.
    pub capacity: u64,
    /// Bandwidth in flash channels.
    pub bandwidth: u32,
    /// Duration in nanoseconds.
    pub duration: Nanos,
}

impl From<Demand> for Resources {
    fn from(d: Demand) -> Self {
        Self {
            capacity: d.capacity,
            bandwidth: d.bandwidth,
            duration: d.duration,
        }
    }
}

/// The exceptions of Table 1 found in one harvesting arrangement. Several can hold
/// at once (for example case ② can both under-harvest and be reclaimed early).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exceptions {
    /// Granted but not needed (capacity blocks, channels) – no action, the paper
    /// accepts it as the price of over-provisioning.
    pub waste: Option<(u64, u32)>,
    /// The home has less to lend than was granted in some dimension: it will reclaim
    /// early ([`plan_early_reclaim`]).
    pub early_reclamation: bool,
    /// The tenant needs more than was granted (capacity blocks, channels, duration
    /// missing): harvest more gSSDs ([`plan_under_harvest`]).
    pub under_harvest: Option<Resources>,
}

impl Exceptions {
    /// No exception: predictions matched reality (Table 1's N/A).
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }
}

/// Classifies a harvest per Table 1. `granted` is what the tenant got (the gSSD's
/// shape, bounded by both predictions); `actual_harvestable` is what the home
/// really can lend and for how long; `actual_demand` is what the tenant really needs.
///
/// * Early reclamation when the home really has less than was granted (harvestable
///   over-predicted beyond the grant), in any of the three dimensions.
/// * Under-harvest when the tenant needs more than was granted (demand
///   under-predicted), in any dimension.
/// * Waste when the grant exceeds the real demand in capacity or bandwidth.
pub fn classify(
    granted: Resources,
    actual_harvestable: Resources,
    actual_demand: Resources,
) -> Exceptions {
    let early_reclamation = actual_harvestable.capacity < granted.capacity
        || actual_harvestable.bandwidth < granted.bandwidth
        || actual_harvestable.duration < granted.duration;
    let short = Resources {
        capacity: actual_demand.capacity.saturating_sub(granted.capacity),
        bandwidth: actual_demand.bandwidth.saturating_sub(granted.bandwidth),
        duration: actual_demand.duration.saturating_sub(granted.duration),
    };
    let under_harvest =
        (short.capacity > 0 || short.bandwidth > 0 || short.duration > 0).then_some(short);
    let waste = (
        granted.capacity.saturating_sub(actual_demand.capacity),
        granted.bandwidth.saturating_sub(actual_demand.bandwidth),
    );
    Exceptions {
        waste: (waste != (0, 0)).then_some(waste),
        early_reclamation,
        under_harvest,
    }
}

/// What to do about under-harvesting (§4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnderHarvestAction {
    /// Attach this further gSSD to the tenant (already assigned to it by the pool).
    Attach(GssdId),
    /// No gSSD covers the shortfall: report an exception to the tenant (termination
    /// or delayed jobs, the tenant's choice).
    Exception,
}

/// The under-harvest rule: attach another gSSD if one covers the shortfall, else
/// raise an exception. `found` is the pool's best fit for the shortfall.
pub fn plan_under_harvest(found: Option<GssdId>) -> UnderHarvestAction {
    match found {
        Some(id) => UnderHarvestAction::Attach(id),
        None => UnderHarvestAction::Exception,
    }
}

/// Fires every `interval` on the caller's clock: the pool's refresh timer, with no
/// thread of its own so that the daemon and the simulator can drive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshTimer {
    interval: Nanos,
    next: Nanos,
}

impl RefreshTimer {
    /// A timer first due at `start + interval`. A zero interval is raised to 1 ns.
    pub fn new(start: Nanos, interval: Nanos) -> Self {
        let interval = interval.max(1);
        Self {
            interval,
            next: start.saturating_add(interval),
        }
    }

    /// When the timer is next due.
    pub fn next_due(&self) -> Nanos {
        self.next
    }

    /// Whether a refresh is due at `now`; if so, schedules the next one on the
    /// interval grid after `now` (missed periods are skipped, not replayed).
    pub fn fire(&mut self, now: Nanos) -> bool {
        if now < self.next {
            return false;
        }
        let missed = (now - self.next) / self.interval + 1;
        self.next = self
            .next
            .saturating_add(missed.saturating_mul(self.interval));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GssdPool, HarvestConfig};
    use clock::SEC;

    const MIN30: Nanos = 1800 * SEC;
    const C: u64 = 4096;

    fn res(chunks: u64, bw: u32, halves: u64) -> Resources {
        Resources {
            capacity: chunks * C,
            bandwidth: bw,
            duration: halves * MIN30,
        }
    }

    fn gssd(id: GssdId, home: u64, chunks: u64, bw: u32, halves: u64) -> Gssd {
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

    #[test]
    fn release_erases_within_the_horizon() {
        let g = gssd(1, 1, 1, 1, 4); // expires at 2 h
        assert_eq!(plan_release(&g, 0, MIN30), ReclaimAction::ReturnToPool);
        assert_eq!(
            plan_release(&g, 3 * MIN30 - 1, MIN30),
            ReclaimAction::ReturnToPool
        );
        assert_eq!(
            plan_release(&g, 3 * MIN30, MIN30),
            ReclaimAction::EraseAndReturnHome
        );
        assert_eq!(
            plan_release(&g, 5 * MIN30, MIN30),
            ReclaimAction::EraseAndReturnHome
        );
    }

    #[test]
    fn early_reclaim_decisions() {
        let mut g = gssd(1, 1, 1, 1, 4);
        assert_eq!(
            plan_early_reclaim(&g, Some(2)),
            ReclaimAction::EraseAndReturnHome
        );
        g.tenant = Some(3);
        assert_eq!(
            plan_early_reclaim(&g, Some(2)),
            ReclaimAction::Migrate { to: 2 }
        );
        assert_eq!(plan_early_reclaim(&g, None), ReclaimAction::Evict);
    }

    /// Table 1 ①: harvestable over-predicted, demand over-predicted.
    #[test]
    fn table1_case1_waste_or_early_reclamation_or_none() {
        // Predicted harvestable 4 chunks × 4 ch; predicted demand 4 × 4 → granted 4 × 4.
        let granted = res(4, 4, 8);
        // Waste: the home really has the 4 × 4 (over-prediction within the grant's
        // margin); the tenant needs only 3 × 3.
        let e = classify(granted, res(4, 4, 8), res(3, 3, 8));
        assert_eq!(e.waste, Some((C, 1)));
        assert!(!e.early_reclamation && e.under_harvest.is_none());
        // Early reclamation: the home really has only 3 × 4.
        let e = classify(granted, res(3, 4, 8), res(3, 3, 8));
        assert!(e.early_reclamation && e.under_harvest.is_none());
        // N/A: everything matched.
        assert!(classify(granted, res(4, 4, 8), res(4, 4, 8)).is_none());
        // Early reclamation through the pool: migrate when a replacement fits …
        let mut p = GssdPool::new(HarvestConfig::default()).unwrap();
        p.insert(gssd(1, 1, 4, 4, 8)).unwrap();
        p.insert(gssd(2, 2, 4, 4, 8)).unwrap();
        assert_eq!(
            p.harvest(9, &demand(res(3, 3, 4)), 0).unwrap().unwrap().id,
            1
        );
        let r = p.early_reclaim(1, &demand(res(3, 3, 4)), MIN30).unwrap();
        assert_eq!(r.action, ReclaimAction::Migrate { to: 2 });
        assert_eq!(p.get(2).unwrap().tenant, Some(9));
        assert!(p.get(1).is_none() && p.of_home(1).is_none());
        // … and evict when none does.
        let r = p.early_reclaim(2, &demand(res(3, 3, 4)), MIN30).unwrap();
        assert_eq!(r.action, ReclaimAction::Evict);
        assert_eq!(r.gssd.tenant, Some(9));
        assert!(p.is_empty());
    }

    /// Table 1 ②: harvestable over-predicted, demand under-predicted.
    #[test]
    fn table1_case2_under_harvest_or_early_reclamation() {
        let granted = res(2, 2, 4);
        // Under-harvest: the home has what was granted; the tenant needs 3 chunks.
        let e = classify(granted, res(2, 2, 4), res(3, 2, 4));
        assert_eq!(e.under_harvest, Some(res(1, 0, 0)));
        assert!(!e.early_reclamation && e.waste.is_none());
        // Both: the home ends early, and the tenant needs longer.
        let e = classify(granted, res(2, 2, 2), res(2, 2, 6));
        assert!(e.early_reclamation);
        assert_eq!(e.under_harvest, Some(res(0, 0, 2)));
        // Under-harvest through the pool: attach a gSSD covering the shortfall, or
        // raise an exception when none does.
        let mut p = GssdPool::new(HarvestConfig::default()).unwrap();
        p.insert(gssd(1, 1, 2, 2, 4)).unwrap();
        p.insert(gssd(2, 2, 1, 1, 4)).unwrap();
        p.harvest(9, &demand(granted), 0).unwrap().unwrap();
        let short = demand(res(1, 1, 4));
        let found = p.harvest(9, &short, 0).unwrap().map(|g| g.id);
        assert_eq!(plan_under_harvest(found), UnderHarvestAction::Attach(2));
        assert_eq!(p.assigned_to(9).len(), 2);
        let found = p.harvest(9, &short, 0).unwrap().map(|g| g.id);
        assert_eq!(plan_under_harvest(found), UnderHarvestAction::Exception);
    }

    /// Table 1 ③: harvestable under-predicted, demand over-predicted.
    #[test]
    fn table1_case3_waste() {
        // The home has more than predicted, the tenant needs less than granted.
        let e = classify(res(2, 2, 4), res(4, 4, 8), res(1, 2, 4));
        assert_eq!(e.waste, Some((C, 0)));
        assert!(!e.early_reclamation && e.under_harvest.is_none());
        // Waste needs no action: at job end the gSSD simply returns to the pool.
        let mut p = GssdPool::new(HarvestConfig::default()).unwrap();
        p.insert(gssd(1, 1, 2, 2, 8)).unwrap();
        p.harvest(9, &demand(res(1, 2, 4)), 0).unwrap().unwrap();
        let r = p.release(1, 9, MIN30).unwrap();
        assert_eq!(r.action, ReclaimAction::ReturnToPool);
        assert!(!p.get(1).unwrap().in_use());
    }

    /// Table 1 ④: harvestable under-predicted, demand under-predicted.
    #[test]
    fn table1_case4_under_harvest_or_waste_or_none() {
        let granted = res(2, 2, 4);
        // Under-harvest: the tenant needs more bandwidth than granted.
        let e = classify(granted, res(3, 3, 6), res(2, 3, 4));
        assert_eq!(e.under_harvest, Some(res(0, 1, 0)));
        assert!(!e.early_reclamation && e.waste.is_none());
        // Waste: the tenant needs more than it predicted but still less than granted
        // (the grant was over-provisioned).
        let e = classify(granted, res(3, 3, 6), res(1, 2, 4));
        assert_eq!(e.waste, Some((C, 0)));
        assert!(e.under_harvest.is_none() && !e.early_reclamation);
        // N/A.
        assert!(classify(granted, res(3, 3, 6), granted).is_none());
    }

    #[test]
    fn refresh_timer_fires_on_its_grid() {
        let mut t = RefreshTimer::new(0, 900 * SEC);
        assert!(!t.fire(899 * SEC));
        assert!(t.fire(900 * SEC));
        assert_eq!(t.next_due(), 1800 * SEC);
        assert!(!t.fire(1000 * SEC));
        assert!(t.fire(5000 * SEC));
        assert_eq!(t.next_due(), 5400 * SEC);
    }

    fn demand(r: Resources) -> Demand {
        Demand {
            capacity: r.capacity,
            bandwidth: r.bandwidth,
            duration: r.duration,
        }
    }
}
