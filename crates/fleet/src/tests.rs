//! End-to-end runs of small fleets on in-memory inputs, and the conservation
//! invariants as properties.

use proptest::prelude::*;
use rng::SplitMix64;

use crate::*;

/// Small made-up inputs (not the real traces): 4 machines with bursty bandwidth, a
/// slowly varying capacity series, and arrivals of mixed sizes every bin.
fn inputs(seed: u64) -> Inputs {
    let mut rng = SplitMix64::new(seed);
    let alibaba = (0..4)
        .map(|m| MachineSeries {
            machine: format!("m_{m}"),
            bw: (0..400)
                .map(|i| {
                    if (i / 20 + m) % 5 == 0 {
                        0.6
                    } else {
                        0.05 + 0.1 * rng.next_f64() as f32
                    }
                })
                .collect(),
        })
        .collect();
    let google_capacity = (0..800)
        .map(|i| 0.2 + 0.6 * (((i / 40) % 7) as f32 / 7.0))
        .collect();
    let azure_bins = (0..2000)
        .map(|i| {
            (0..(3 + i % 4))
                .map(|k| [1u8, 2, 4, 8][(k + i) % 4])
                .collect()
        })
        .collect();
    Inputs {
        alibaba,
        google_capacity,
        azure_bins,
    }
}

fn small(seed: u64) -> FleetConfig {
    FleetConfig {
        regular: 40,
        harvest: 400,
        hours: 24,
        warmup_hours: 6,
        seed,
        unsold_hosts: 20,
        ..FleetConfig::default()
    }
}

fn check(r: &ScenarioReport) {
    let c = &r.counters;
    assert_eq!(c.invariant_violations, 0, "{r:?}");
    // Every gSSD ends assigned or unassigned in the pool, returned home, or expired.
    assert_eq!(
        c.gssds_created,
        c.live_at_end + c.expired + c.erased_on_release + c.reclaimed_unassigned + c.reclamations,
        "{c:?}"
    );
    // Every tenant ends served to the end, evicted, turned away, or still running.
    assert_eq!(
        c.requests,
        c.completed + c.exceptions + c.unserved + c.running_at_end,
        "{c:?}"
    );
    assert_eq!(c.served, c.requests - c.unserved);
    assert_eq!(c.reclamations, c.migrations + c.exceptions);
    // A split takes at least two gSSDs; tenants use at most what they were
    // granted, and something whenever anyone was served.
    assert!(c.split_gssds >= 2 * c.split_served, "{c:?}");
    assert!(c.split_served <= c.served, "{c:?}");
    assert!(c.used_gb_hours <= c.capacity_gb_hours, "{c:?}");
    // Flash held means someone was served, and a demand served to its end
    // (at least 32 GB for 30 minutes) held some. Not the converse: a tenant
    // served and evicted in the same step, or served at the last one, holds
    // nothing (proptest found one: seed 95, 29 regular, 127 harvest, the
    // histogram predictor).
    assert!(c.capacity_gb_hours == 0 || c.served > 0, "{c:?}");
    if c.completed > 0 {
        assert!(c.capacity_gb_hours > 0, "{c:?}");
    }
    // (`after >= before` holds by construction: after is before plus what
    // tenants use. What can fail: tenants' use fitting in their hosts, and it
    // being counted at all.)
    for s in [
        r.vm_capacity,
        r.vm_bandwidth,
        r.ssd_capacity,
        r.ssd_bandwidth,
    ] {
        assert!(
            s.max_after <= 1.0 + 1e-6 && s.avg_after <= 1.0 + 1e-6,
            "{s:?}"
        );
    }
    if c.completed > 0 {
        assert!(
            r.ssd_capacity.avg_after > r.ssd_capacity.avg_before + 1e-6,
            "{} tenants served to their end but no capacity gain: {:?}",
            c.completed,
            r.ssd_capacity
        );
    } else if c.served == 0 {
        assert_eq!(r.ssd_capacity.avg_after, r.ssd_capacity.avg_before, "{r:?}");
    }
}

#[test]
fn a_tenant_served_and_evicted_in_one_step_holds_nothing() {
    // The case proptest found for `conservation`: one tenant served, evicted
    // at once, no flash-hours held; the checks must accept it.
    let cfg = FleetConfig {
        regular: 29,
        harvest: 127,
        unsold_hosts: 0,
        hours: 12,
        warmup_hours: 2,
        seed: 95,
        ..FleetConfig::default()
    };
    let f = Fleet::build(&cfg, &inputs(95)).unwrap();
    let mut p = f
        .predictor(PredictorKind::Histogram, Scenario::Sold)
        .unwrap();
    let r = f.run(Scenario::Sold, &mut p, &mut || {}).unwrap();
    check(&r);
    let c = &r.counters;
    assert!(
        c.served > 0 && c.capacity_gb_hours == 0 && c.completed == 0,
        "{c:?}"
    );
}

#[test]
fn without_harvest_tenants_utilisation_is_unchanged() {
    // gSSDs are still created (homes lend), but lent flash nobody uses must not
    // count as used.
    let cfg = FleetConfig {
        harvest: 0,
        ..small(3)
    };
    let f = Fleet::build(&cfg, &inputs(3)).unwrap();
    let mut p = f.predictor(PredictorKind::Last, Scenario::Sold).unwrap();
    let r = f.run(Scenario::Sold, &mut p, &mut || {}).unwrap();
    assert_eq!(r.counters.served, 0);
    assert!(r.counters.gssds_created > 0, "{:?}", r.counters);
    for s in [
        r.vm_capacity,
        r.vm_bandwidth,
        r.ssd_capacity,
        r.ssd_bandwidth,
    ] {
        assert_eq!(s.avg_after, s.avg_before, "{s:?}");
        assert_eq!(s.max_after, s.max_before, "{s:?}");
        assert_eq!(s.under60_avg_after, s.under60_avg_before, "{s:?}");
    }
}

#[test]
fn greedy_lending_is_reclaimed_and_never_overcommits() {
    // Every home lends all it can spare for a week: as usage comes back its
    // gSSDs must be reclaimed. Without reclamation (or with one that reclaims
    // too little) usage plus what is lent would exceed the home, which the
    // run counts as an invariant violation; this policy makes that happen if
    // reclamation is wrong, where the built-in predictors rarely do.
    let f = Fleet::build(&small(5), &inputs(5)).unwrap();
    let week = 7 * 24 * 3600 * clock::SEC;
    let mut p = Policies::lending(Box::new(lend::Fixed::new(1.0, week)));
    let r = f.run(Scenario::Sold, &mut p, &mut || {}).unwrap();
    let c = r.counters;
    assert!(
        c.reclamations + c.reclaimed_unassigned > 0,
        "greedy lending must be taken back: {c:?}"
    );
    assert_eq!(c.invariant_violations, 0, "{c:?}");
    check(&r);
}

#[test]
fn every_predictor_runs_and_conserves() {
    let f = Fleet::build(&small(1), &inputs(1)).unwrap();
    for s in [Scenario::Sold, Scenario::Unsold] {
        for k in [
            PredictorKind::Oracle,
            PredictorKind::Last,
            PredictorKind::Histogram,
        ] {
            let mut p = f.predictor(k, s).unwrap();
            let mut ticks = 0;
            let r = f.run(s, &mut p, &mut || ticks += 1).unwrap();
            assert_eq!(ticks, f.total_steps());
            check(&r);
            assert!(r.counters.served > 0, "{s:?} {k:?}: {:?}", r.counters);
            if k == PredictorKind::Oracle {
                assert_eq!(r.counters.reclamations, 0, "the oracle never over-predicts");
                assert_eq!(r.counters.reclaimed_unassigned, 0);
            }
        }
    }
}

#[test]
fn the_learned_policies_run_under_their_model_names() {
    // Small: the LSTMs train per home.
    let cfg = FleetConfig {
        regular: 6,
        harvest: 60,
        hours: 8,
        warmup_hours: 2,
        ..small(1)
    };
    let f = Fleet::build(&cfg, &inputs(1)).unwrap();
    for (k, name) in [
        (PredictorKind::Quantile, "quantile"),
        (PredictorKind::QuantilePrior, "quantile-prior"),
        (PredictorKind::Lstm, "lstm"),
    ] {
        let mut p = f.predictor(k, Scenario::Sold).unwrap();
        let r = f.run(Scenario::Sold, &mut p, &mut || {}).unwrap();
        assert_eq!(r.predictor, name);
        check(&r);
    }
    // The prior is learned from other homes, so only for regular tenants.
    assert!(f
        .predictor(PredictorKind::QuantilePrior, Scenario::Unsold)
        .is_err());
}

#[test]
fn quantile_priors_come_from_homes_the_fleet_does_not_have() {
    let f = Fleet::build(&small(1), &inputs(1)).unwrap();
    let pc = ::predict::PredictorConfig {
        model: ::predict::Model::Quantile,
        ..::predict::PredictorConfig::default()
    };
    let p = f.quantile_priors(&pc, 40);
    let rows = &p.capacity.as_ref().unwrap().rows;
    assert_eq!(rows.len(), pc.levels as usize + 1);
    // Some transitions were counted, and each counted row is a distribution.
    assert!(rows.iter().any(|r| r.iter().sum::<f32>() > 0.5));
    for r in rows {
        let t: f32 = r.iter().sum();
        assert!(t == 0.0 || (t - 1.0).abs() < 1e-4, "{r:?}");
    }
    assert!(p.bandwidth_runs.unwrap().runs.iter().any(|r| !r.is_empty()));
    // Another seed draws other training homes.
    let g = Fleet::build(&small(2), &inputs(1)).unwrap();
    assert_ne!(g.quantile_priors(&pc, 40).capacity, p.capacity);
}

#[test]
fn the_daemons_unsold_policies_run_on_unsold_servers_only() {
    let f = Fleet::build(&small(1), &inputs(1)).unwrap();
    for k in [PredictorKind::UnsoldHistogram, PredictorKind::UnsoldFixed] {
        assert!(f.predictor(k, Scenario::Sold).is_err(), "{k:?}");
        let mut p = f.predictor(k, Scenario::Unsold).unwrap();
        let r = f.run(Scenario::Unsold, &mut p, &mut || {}).unwrap();
        check(&r);
        assert!(r.counters.gssds_created > 0, "{k:?}: {:?}", r.counters);
    }
    assert_eq!(
        "unsold-histogram".parse::<PredictorKind>().unwrap(),
        PredictorKind::UnsoldHistogram
    );
}

#[test]
fn the_unsold_histogram_promises_old_groups_what_is_left() {
    // Most unsold groups stay unsold for days; the ones regular tenants buy
    // are the short stretches next to the sold channels. Asked what is left
    // of a stretch as old as the group's (with the running groups counted as
    // stretches at least as long as their age), the daemon's histogram
    // serves more demands than its fixed lifetime. The quantile of past
    // stretches less the group's age, the rule before, ran out for every
    // old group: 3 served here against the fixed lifetime's 65 (checked),
    // 13 of 60,000 at full scale.
    let cfg = FleetConfig {
        hours: 96,
        ..small(1)
    };
    let f = Fleet::build(&cfg, &inputs(1)).unwrap();
    let served = |k| {
        let mut p = f.predictor(k, Scenario::Unsold).unwrap();
        let r = f.run(Scenario::Unsold, &mut p, &mut || {}).unwrap();
        check(&r);
        r.counters
    };
    let (hist, fixed) = (
        served(PredictorKind::UnsoldHistogram),
        served(PredictorKind::UnsoldFixed),
    );
    assert!(hist.served > fixed.served, "{hist:?} against {fixed:?}");
    assert!(hist.served * 10 > hist.requests, "{hist:?}");
}

#[test]
fn splitting_serves_demands_no_single_gssd_covers() {
    // Homes lend what is free over the next granule (oracle); the harvest
    // tenants ask for 32-512 GB on one channel per 64 GB, and the biggest
    // home (8 channels, 512 GB) never lends all of it, so the biggest demands
    // fit no gSSD alone. With the split they are served on several; without
    // it they are turned away.
    let f = Fleet::build(&small(2), &inputs(2)).unwrap();
    let big = f
        .tenants()
        .iter()
        .filter(|t| t.demand.bandwidth == 8)
        .count();
    assert!(big > 0, "the fleet has 512 GB demands");
    let run = |split: bool| {
        let f = Fleet::build(&FleetConfig { split, ..small(2) }, &inputs(2)).unwrap();
        let mut p = f.predictor(PredictorKind::Oracle, Scenario::Sold).unwrap();
        let r = f.run(Scenario::Sold, &mut p, &mut || {}).unwrap();
        check(&r);
        r.counters
    };
    let (with, without) = (run(true), run(false));
    assert!(with.split_served > 0, "{with:?}");
    assert_eq!(without.split_served, 0, "{without:?}");
    assert!(
        with.served > without.served,
        "splitting must serve more: {with:?} against {without:?}"
    );
    assert!(with.used_gb_hours > without.used_gb_hours);
}

#[test]
fn split_tenants_survive_reclamations_and_evictions_consistently() {
    // Greedy lending makes homes take their flash back often; tenants on
    // several gSSDs lose one piece at a time (migrated, or evicted with the
    // other pieces released). The counters must still balance.
    let f = Fleet::build(&small(5), &inputs(5)).unwrap();
    let week = 7 * 24 * 3600 * clock::SEC;
    let mut p = Policies::lending(Box::new(lend::Fixed::new(1.0, week)));
    let r = f.run(Scenario::Sold, &mut p, &mut || {}).unwrap();
    let c = r.counters;
    assert!(c.split_served > 0 && c.reclamations > 0, "{c:?}");
    check(&r);
}

#[test]
fn runs_are_deterministic_and_seeded() {
    let run = |seed| {
        let f = Fleet::build(&small(seed), &inputs(1)).unwrap();
        let mut p = f.predictor(PredictorKind::Last, Scenario::Sold).unwrap();
        f.run(Scenario::Sold, &mut p, &mut || {}).unwrap()
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3).counters, run(4).counters);
}

#[test]
fn impossible_parameters_are_named() {
    let e = Fleet::build(
        &FleetConfig {
            hours: 0,
            ..small(1)
        },
        &inputs(1),
    )
    .unwrap_err();
    assert!(e.to_string().contains("--hours"), "{e}");
    let e = Fleet::build(
        &FleetConfig {
            hours: 1000,
            ..small(1)
        },
        &inputs(1),
    )
    .unwrap_err();
    assert!(e.to_string().contains("Azure bins"), "{e}");
    assert!("lsmt".parse::<PredictorKind>().is_err());
    assert_eq!(
        "lstm".parse::<PredictorKind>().unwrap(),
        PredictorKind::Lstm
    );
    assert_eq!(
        "fixed".parse::<PredictorKind>().unwrap(),
        PredictorKind::Fixed
    );
    assert_eq!(
        "quantile".parse::<PredictorKind>().unwrap(),
        PredictorKind::Quantile
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, .. ProptestConfig::default() })]

    /// Harvested + used never exceeds a home's channels or blocks, and every gSSD
    /// and tenant is accounted for, whatever the seed, sizes and predictor.
    #[test]
    fn conservation(seed in 0u64..1000, regular in 1usize..30, harvest in 0usize..300,
                    hosts in 0usize..10, k in 0usize..5, margin in 0.0f64..0.3) {
        let cfg = FleetConfig { regular, harvest, unsold_hosts: hosts, hours: 12, warmup_hours: 2, seed, ..FleetConfig::default() };
        let f = Fleet::build(&cfg, &inputs(seed)).unwrap();
        for s in [Scenario::Sold, Scenario::Unsold] {
            let mut p = match k {
                0 => f.predictor(PredictorKind::Oracle, s).unwrap(),
                1 => {
                    let mut l = LastWindow::default();
                    l.margin = margin;
                    Policies::lending(Box::new(l))
                }
                2 => f.predictor(PredictorKind::Fixed, s).unwrap(),
                3 => f.predictor(PredictorKind::Histogram, s).unwrap(),
                _ if s == Scenario::Unsold => f.predictor(PredictorKind::UnsoldHistogram, s).unwrap(),
                _ => f.predictor(PredictorKind::Fixed, s).unwrap(),
            };
            let r = f.run(s, &mut p, &mut || {}).unwrap();
            check(&r);
        }
    }
}
