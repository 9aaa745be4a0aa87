//! Property tests: random operation sequences on a [`GssdPool`], checked after
//! every step against a plain model (a map of gSSDs scanned by brute force).

use std::collections::BTreeMap;

use clock::{Nanos, SEC};
use proptest::prelude::*;

use crate::{Demand, Gssd, GssdId, GssdPool, HarvestConfig, HarvestError, ReclaimAction};

const MIN30: Nanos = 1800 * SEC;
const C: u64 = 4096;

#[derive(Debug, Clone)]
enum Op {
    Insert {
        id: GssdId,
        home: Option<u64>,
        chunks: u64,
        bw: u32,
        halves: u64,
    },
    Harvest {
        tenant: u64,
        d: (u64, u32, u64),
    },
    Release {
        pick: usize,
        tenant: u64,
    },
    EarlyReclaim {
        pick: usize,
        d: (u64, u32, u64),
    },
    Refresh {
        updates: Vec<(GssdId, u64)>,
    },
    Advance {
        quarters: u64,
    },
}

fn demand((chunks, bw, halves): (u64, u32, u64)) -> Demand {
    Demand {
        capacity: chunks * C - (chunks % 2) * 7, // not always chunk-aligned
        bandwidth: bw,
        duration: halves * MIN30 / 2 + 1,
    }
}

fn op() -> impl Strategy<Value = Op> {
    let d = (1u64..5, 1u32..5, 1u64..12);
    prop_oneof![
        3 => (0u64..40, prop::option::weighted(0.8, 0u64..20), 1u64..5, 1u32..5, 1u64..10)
            .prop_map(|(id, home, chunks, bw, halves)| Op::Insert { id, home, chunks, bw, halves }),
        3 => (0u64..5, d.clone()).prop_map(|(tenant, d)| Op::Harvest { tenant, d }),
        1 => (any::<usize>(), 0u64..5).prop_map(|(pick, tenant)| Op::Release { pick, tenant }),
        1 => (any::<usize>(), d.clone()).prop_map(|(pick, d)| Op::EarlyReclaim { pick, d }),
        1 => prop::collection::vec((0u64..40, 0u64..20), 0..6).prop_map(|updates| Op::Refresh { updates }),
        1 => (0u64..4).prop_map(|quarters| Op::Advance { quarters }),
    ]
}

/// The model's best fit: scan everything, keep the least (capacity, bandwidth,
/// expiry, id) among unassigned gSSDs that cover the demand.
fn brute_best(model: &BTreeMap<GssdId, Gssd>, d: &Demand, now: Nanos) -> Option<GssdId> {
    model
        .values()
        .filter(|g| !g.in_use() && g.covers(d, now))
        .min_by_key(|g| (g.capacity, g.bandwidth, g.expiry, g.id))
        .map(|g| g.id)
}

fn check_invariants(p: &GssdPool, model: &BTreeMap<GssdId, Gssd>) -> Result<(), TestCaseError> {
    prop_assert_eq!(p.len(), model.len());
    prop_assert!(p.heads_consistent(), "cached list heads are stale");
    for g in model.values() {
        prop_assert_eq!(p.get(g.id), Some(g));
    }
    let lists = p.lists();
    let mut listed = Vec::new();
    for w in lists.windows(2) {
        prop_assert!(w[0].0 < w[1].0, "keys not strictly ascending");
    }
    for ((cap, bw), ids) in &lists {
        prop_assert!(!ids.is_empty(), "empty list kept");
        for w in ids.windows(2) {
            let (a, b) = (&model[&w[0]], &model[&w[1]]);
            prop_assert!(
                (a.expiry, a.id) > (b.expiry, b.id),
                "list not sorted by expiry, farthest first"
            );
        }
        for id in ids {
            let g = &model[id];
            prop_assert_eq!((g.capacity, g.bandwidth), (*cap, *bw));
            prop_assert!(!g.in_use(), "assigned gSSD left in a list");
            listed.push(*id);
        }
    }
    listed.sort_unstable();
    let unassigned: Vec<GssdId> = model
        .values()
        .filter(|g| !g.in_use())
        .map(|g| g.id)
        .collect();
    prop_assert_eq!(listed, unassigned);
    // One gSSD per home.
    let mut homes: Vec<u64> = model.values().filter_map(|g| g.home).collect();
    let n = homes.len();
    homes.sort_unstable();
    homes.dedup();
    prop_assert_eq!(homes.len(), n);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pool_matches_a_brute_force_model(
        ops in prop::collection::vec(op(), 1..80),
        probes in prop::collection::vec((1u64..5, 1u32..5, 1u64..12), 4),
    ) {
        let cfg = HarvestConfig::default();
        let mut p = GssdPool::new(cfg).unwrap();
        let mut model: BTreeMap<GssdId, Gssd> = BTreeMap::new();
        let mut now: Nanos = 0;
        for op in ops {
            match op {
                Op::Insert { id, home, chunks, bw, halves } => {
                    let g = Gssd::new(&cfg, id, home, chunks * C, bw, now, halves * MIN30).unwrap();
                    let dup = model.contains_key(&id);
                    let home_taken = home.and_then(|h| model.values().find(|o| o.home == Some(h)).map(|o| o.id));
                    match p.insert(g.clone()) {
                        Ok(()) => {
                            prop_assert!(!dup && home_taken.is_none());
                            model.insert(id, g);
                        }
                        Err(HarvestError::DuplicateId(i)) => prop_assert!(dup && i == id),
                        Err(HarvestError::HomeAlreadyLends { existing, .. }) => {
                            prop_assert!(!dup);
                            prop_assert_eq!(Some(existing), home_taken);
                        }
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::Harvest { tenant, d } => {
                    let d = demand(d);
                    let want = brute_best(&model, &d, now);
                    let got = p.harvest(tenant, &d, now).unwrap();
                    prop_assert_eq!(got.as_ref().map(|g| g.id), want);
                    if let Some(g) = got {
                        let m = model.get_mut(&g.id).unwrap();
                        prop_assert!(m.tenant.is_none(), "gSSD {} assigned twice", g.id);
                        prop_assert!(g.covers(&d, now));
                        m.tenant = Some(tenant);
                    }
                }
                Op::Release { pick, tenant } => {
                    let assigned: Vec<GssdId> = model.values().filter(|g| g.in_use()).map(|g| g.id).collect();
                    if assigned.is_empty() { continue; }
                    let id = assigned[pick % assigned.len()];
                    let owner = model[&id].tenant.unwrap();
                    match p.release(id, tenant, now) {
                        Ok(r) => {
                            prop_assert_eq!(owner, tenant);
                            let erase = model[&id].expiry <= now + cfg.reclaim_horizon();
                            if erase {
                                prop_assert_eq!(r.action, ReclaimAction::EraseAndReturnHome);
                                model.remove(&id);
                            } else {
                                prop_assert_eq!(r.action, ReclaimAction::ReturnToPool);
                                model.get_mut(&id).unwrap().tenant = None;
                            }
                        }
                        Err(HarvestError::NotAssignedTo { .. }) => prop_assert_ne!(owner, tenant),
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::EarlyReclaim { pick, d } => {
                    let ids: Vec<GssdId> = model.keys().copied().collect();
                    if ids.is_empty() { continue; }
                    let id = ids[pick % ids.len()];
                    let d = demand(d);
                    let old = model.remove(&id).unwrap();
                    let r = p.early_reclaim(id, &d, now).unwrap();
                    prop_assert_eq!(&r.gssd, &old);
                    match old.tenant {
                        None => prop_assert_eq!(r.action, ReclaimAction::EraseAndReturnHome),
                        Some(t) => match brute_best(&model, &d, now) {
                            Some(to) => {
                                prop_assert_eq!(r.action, ReclaimAction::Migrate { to });
                                model.get_mut(&to).unwrap().tenant = Some(t);
                            }
                            None => prop_assert_eq!(r.action, ReclaimAction::Evict),
                        },
                    }
                }
                Op::Refresh { updates } => {
                    let updates: Vec<(GssdId, Nanos)> =
                        updates.into_iter().map(|(id, q)| (id, now + q * MIN30 / 2)).collect();
                    for &(id, e) in &updates {
                        if let Some(g) = model.get_mut(&id) {
                            // A tenant's promise is only ever extended.
                            g.expiry = if g.in_use() { g.expiry.max(e) } else { e };
                        }
                    }
                    let want: Vec<GssdId> = model.values()
                        .filter(|g| !g.in_use() && g.expiry <= now).map(|g| g.id).collect();
                    let want_in_use: Vec<GssdId> = model.values()
                        .filter(|g| g.in_use() && g.expiry <= now).map(|g| g.id).collect();
                    let r = p.refresh(now, &updates);
                    let dropped: Vec<GssdId> = r.dropped.iter().map(|g| g.id).collect();
                    prop_assert_eq!(&dropped, &want);
                    prop_assert_eq!(&r.expired_in_use, &want_in_use);
                    for id in want { model.remove(&id); }
                }
                Op::Advance { quarters } => now += quarters * MIN30 / 2,
            }
            check_invariants(&p, &model)?;
            for &pr in &probes {
                let d = demand(pr);
                let got = p.best_fit(&d, now).unwrap().map(|g| g.id);
                prop_assert_eq!(got, brute_best(&model, &d, now));
                if got.is_none() {
                    prop_assert!(model.values().all(|g| g.in_use() || !g.covers(&d, now)));
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Used from one thread, the three shared schemes behave exactly like the plain
    /// pool: same matches, same reclaim actions, same refresh reports.
    #[test]
    fn shared_schemes_agree_with_the_plain_pool(ops in prop::collection::vec(op(), 1..80)) {
        use crate::{MutexPool, RwPool, ShardedPool, SharedPool};
        let cfg = HarvestConfig::default();
        let mut plain = GssdPool::new(cfg).unwrap();
        let shared: Vec<Box<dyn SharedPool>> = vec![
            Box::new(MutexPool::new(cfg).unwrap()),
            Box::new(RwPool::new(cfg).unwrap()),
            Box::new(ShardedPool::new(cfg, 3).unwrap()),
        ];
        let mut now: Nanos = 0;
        for op in ops {
            match op {
                Op::Insert { id, home, chunks, bw, halves } => {
                    let g = Gssd::new(&cfg, id, home, chunks * C, bw, now, halves * MIN30).unwrap();
                    let want = plain.insert(g.clone()).is_ok();
                    for s in &shared {
                        prop_assert_eq!(s.insert(g.clone()).is_ok(), want);
                    }
                }
                Op::Harvest { tenant, d } => {
                    let d = demand(d);
                    let want = plain.harvest(tenant, &d, now);
                    for s in &shared {
                        prop_assert_eq!(&s.best_fit(&d, now).map(|g| g.map(|g| g.id)),
                            &want.clone().map(|g| g.map(|g| g.id)));
                        prop_assert_eq!(&s.harvest(tenant, &d, now), &want);
                    }
                }
                Op::Release { pick, tenant } => {
                    let assigned: Vec<GssdId> = plain.iter().filter(|g| g.in_use()).map(|g| g.id).collect();
                    let id = if assigned.is_empty() { pick as GssdId % 40 } else { assigned[pick % assigned.len()] };
                    let want = plain.release(id, tenant, now);
                    for s in &shared {
                        prop_assert_eq!(&s.release(id, tenant, now), &want);
                    }
                }
                Op::EarlyReclaim { pick, d } => {
                    let d = demand(d);
                    let id = pick as GssdId % 40;
                    let want = plain.early_reclaim(id, &d, now);
                    for s in &shared {
                        prop_assert_eq!(&s.early_reclaim(id, &d, now), &want);
                    }
                }
                Op::Refresh { updates } => {
                    let updates: Vec<(GssdId, Nanos)> =
                        updates.into_iter().map(|(id, q)| (id, now + q * MIN30 / 2)).collect();
                    let want = plain.refresh(now, &updates);
                    for s in &shared {
                        prop_assert_eq!(&s.refresh(now, &updates), &want);
                    }
                }
                Op::Advance { quarters } => now += quarters * MIN30 / 2,
            }
            for s in &shared {
                prop_assert_eq!(s.len(), plain.len());
                for g in plain.iter() {
                    prop_assert_eq!(s.get(g.id), Some(g.clone()));
                }
            }
        }
    }
}
