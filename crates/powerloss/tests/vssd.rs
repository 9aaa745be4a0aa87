//! Power loss on plain vSSDs: two tenants share a small flash device, an
//! overwrite-heavy workload keeps GC busy, and at random moments the run is
//! turned into crash states (the durable image plus subsets of the later
//! data, OOB and erase units, torn pairs included). Each state is recovered
//! (`Vssd::open` of both tenants on a device holding it) and checked: FUA and
//! flushed writes intact, every other page an older or newer version of
//! itself, recovery never failing, and the recovered vSSDs writable. Host
//! pages striped over the units and filled a unit at a time, by seed.
//!
//! `FLEXSSD_POWERLOSS_STATES=100000 cargo test --release -p powerloss --test
//! vssd -- --ignored --nocapture` runs the long version.

use std::sync::Arc;

use blockdev::BlockDev;
use clock::VirtualClock;
use flash::{FlashDevice, Geometry, Timing};
use ftl::{default_capacity, Extent, GcPolicyKind, Placement, Vssd, VssdConfig};
use powerloss::{step, Chooser, Figures, Mix, SnapCheckpoints, Vol, VolModel};
use rng::SplitMix64;

const PAGE: usize = 4096;

fn geo() -> Geometry {
    Geometry {
        channels: 2,
        dies_per_channel: 1,
        planes_per_die: 1,
        blocks_per_plane: 24,
        pages_per_block: 8,
        page_size: PAGE as u32,
    }
}

/// Tenant `id` owns blocks `first..first + 12` of both channels.
fn cfg(id: u32, first_block: u32) -> VssdConfig {
    let g = geo();
    let extents: Vec<Extent> = (0..g.channels)
        .map(|channel| Extent {
            channel,
            first_block,
            blocks: 12,
        })
        .collect();
    VssdConfig {
        id,
        name: format!("t{id}"),
        capacity_bytes: default_capacity(&g, &extents),
        extents,
        gc: if id.is_multiple_of(2) {
            GcPolicyKind::Greedy
        } else {
            GcPolicyKind::CostBenefit
        },
        lent: Vec::new(),
    }
}

/// Recovers every tenant from crash state `keep` of `point` and checks it.
fn recover_and_check(
    point: &flash::CrashPoint,
    keep: &[bool],
    ckpt: &SnapCheckpoints,
    cfgs: &[VssdConfig],
    models: &[VolModel],
    fig: &mut Figures,
    rng: &mut SplitMix64,
) -> Result<(), String> {
    let img = point.image(|j| keep[j]);
    let dev = Arc::new(
        FlashDevice::from_crash_image(geo(), Timing::default(), &img).map_err(|e| e.to_string())?,
    );
    // Recorded too, for a second crash after the recovery (below).
    dev.record_crashes();
    let clock = Arc::new(VirtualClock::new(1));
    let ckpt = Arc::new(ckpt.snapshot());
    let mut vols = Vec::new();
    for (c, m) in cfgs.iter().zip(models) {
        let v = Vssd::open(dev.clone(), c.clone(), clock.clone(), ckpt.clone())
            .map_err(|e| format!("recovery of {} failed: {e}", c.name))?;
        fig.recoveries += 1;
        let mut model = m.clone();
        model.check_all(&*v, &mut fig.checks)?;
        vols.push(Vol {
            dev: v as Arc<dyn BlockDev>,
            model,
        });
    }
    // The recovered FTLs must go on working: a few more operations, then
    // every page again.
    for _ in 0..24 {
        step(rng, &mut vols, &Mix::default()).map_err(|e| format!("after recovery: {e}"))?;
    }
    // Checked on a copy: `check_all` takes what it reads for the durable
    // starting point, true after a recovery but not of writes not synced
    // yet, and the second crash below needs the whole history.
    let mut scratch = powerloss::Checks::default();
    for v in &vols {
        v.model
            .clone()
            .check_all(&*v.dev, &mut scratch)
            .map_err(|e| format!("after recovery and more writes: {e}"))?;
    }
    // A second crash: what the recovered FTLs wrote since their last sync is
    // lost, all of it or none. Pages recovered from the media are durable,
    // so GC must not erase one before its copy is (it did: the recovered
    // vSSD took nothing for durable).
    let again = dev.crash_point().expect("recording");
    let ck = ckpt.snapshot();
    for kept in [false, true] {
        let img = again.image(|_| kept);
        let dev = Arc::new(
            FlashDevice::from_crash_image(geo(), Timing::default(), &img)
                .map_err(|e| e.to_string())?,
        );
        let ck = Arc::new(ck.snapshot());
        for (c, v) in cfgs.iter().zip(&vols) {
            let r = Vssd::open(dev.clone(), c.clone(), clock.clone(), ck.clone())
                .map_err(|e| format!("second recovery of {} failed: {e}", c.name))?;
            fig.recoveries += 1;
            v.model
                .clone()
                .check_all(&*r, &mut fig.checks)
                .map_err(|e| format!("after a second crash (later writes kept: {kept}): {e}"))?;
        }
    }
    Ok(())
}

/// One run: `ops` operations with about `points` crash points of
/// `per_point` states each. Returns the figures or the first failure.
fn run(seed: u64, ops: u64, points: u64, per_point: u64, mix: Mix) -> Result<Figures, String> {
    let g = geo();
    let dev = Arc::new(FlashDevice::memory(g, Timing::default()).unwrap());
    dev.record_crashes();
    let clock = Arc::new(VirtualClock::new(1));
    let ckpt = SnapCheckpoints::default();
    let cfgs = [cfg(1, 0), cfg(2, 12)];
    let vssds: Vec<Arc<Vssd>> = cfgs
        .iter()
        .map(|c| {
            let v = Vssd::create(
                dev.clone(),
                c.clone(),
                clock.clone(),
                Arc::new(ckpt.clone()),
            )
            .unwrap();
            v.set_placement(placement(seed));
            v
        })
        .collect();
    let mut vols: Vec<Vol> = cfgs
        .iter()
        .zip(&vssds)
        .map(|(c, v)| Vol {
            model: VolModel::new(c.id, c.capacity_bytes / PAGE as u64, PAGE),
            dev: v.clone() as Arc<dyn BlockDev>,
        })
        .collect();
    let mut rng = SplitMix64::derive(seed, &[0]);
    let mut chooser = Chooser::new(SplitMix64::derive(seed, &[1]));
    let mut after = SplitMix64::derive(seed, &[2]);
    let mut fig = Figures::default();
    for op in 0..ops {
        clock.advance(20_000);
        fig.gc_runs = vssds.iter().map(|v| v.stats().gc_runs).sum();
        step(&mut rng, &mut vols, &mix).map_err(|e| format!("seed {seed} op {op}: {e}"))?;
        if rng.below(200) == 0 {
            // A checkpoint (device sync, then an atomic save) retires trim
            // records and moves recovery's starting point.
            vssds[rng.below(vssds.len())]
                .checkpoint()
                .map_err(|e| format!("seed {seed} op {op}: checkpoint: {e}"))?;
        }
        if rng.below(ops as usize) >= points as usize {
            continue;
        }
        let point = dev.crash_point().expect("recording");
        let ck = ckpt.snapshot();
        let models: Vec<VolModel> = vols.iter().map(|v| v.model.clone()).collect();
        fig.points += 1;
        fig.units += point.units().len() as u64;
        for i in 0..per_point as usize {
            let (s, keep) = chooser.choose(&point, i);
            recover_and_check(&point, &keep, &ck, &cfgs, &models, &mut fig, &mut after).map_err(
                |e| {
                    if std::env::var("PL_DEBUG").is_ok() {
                        dump(&dev, &point, &keep);
                    }
                    format!(
                        "seed {seed} op {op} state {i} ({s:?}, {} of {} units kept): {e}",
                        keep.iter().filter(|&&k| k).count(),
                        keep.len()
                    )
                },
            )?;
            fig.states += 1;
            *fig.by_strategy.entry(s).or_default() += 1;
        }
    }
    Ok(fig)
}

fn dump(live: &FlashDevice, point: &flash::CrashPoint, keep: &[bool]) {
    let g = geo();
    for (u, k) in point.units().iter().zip(keep) {
        let extra = match u.kind {
            flash::UnitKind::PageData | flash::UnitKind::PageOob => {
                let mut b = vec![0u8; PAGE];
                let r = live.read(u.target, 0, &mut b, 0).is_ok();
                format!(
                    "{:?} {:?}",
                    live.oob(u.target),
                    r.then(|| powerloss::decode(&b))
                )
            }
            _ => String::new(),
        };
        eprintln!("unit {:?} {} kept={k} {extra}", u.kind, u.target);
    }
    let img = point.image(|j| keep[j]);
    let d = FlashDevice::from_crash_image(g, Timing::default(), &img).unwrap();
    for p in 0..g.total_pages() {
        if let Some(o) = d.oob(p) {
            eprintln!(
                "crash page {p} (block {}) {:?} intact={}",
                p / 8,
                o,
                d.oob_intact(p).is_some()
            );
        }
    }
}

/// Both placements of host pages, two seeds each in turn: striped (seeds
/// 0, 1, 4, 5, ...) and filled a unit's block at a time (2, 3, 6, 7, ...).
fn placement(seed: u64) -> Placement {
    if (seed / 2).is_multiple_of(2) {
        Placement::Stripe
    } else {
        Placement::Fill
    }
}

/// Odd seeds sync rarely, so their crash points hold more unsynced units.
fn mix(seed: u64) -> Mix {
    if !seed.is_multiple_of(2) {
        Mix {
            flush: 0.01,
            fua: 0.02,
            ..Mix::default()
        }
    } else {
        Mix::default()
    }
}

fn suite(seeds: u64, ops: u64, points: u64, default_per_point: u64) -> Figures {
    let per_point = powerloss::states_per_point(seeds * points, default_per_point);
    let mut all = Figures::default();
    for seed in 0..seeds {
        if std::env::var("PL_SEED").is_ok_and(|s| s != seed.to_string()) {
            continue;
        }
        match run(seed, ops, points, per_point, mix(seed)) {
            Ok(f) => all.add(&f),
            Err(e) => panic!("power-loss violation: {e}"),
        }
    }
    all
}

/// Thousands of crash states, about 20 s in a debug build.
#[test]
fn vssds_survive_power_loss() {
    let fig = suite(4, 1500, 25, 24);
    powerloss::report(&fig.line("two vSSDs, GC, trims, checkpoints"));
    assert!(fig.states >= 2000, "{}", fig.line("too few"));
}

/// Trim-heavy: every trim of a mapped page writes a record, a valid page
/// beside the data until a checkpoint retires it. With 256 records allowed
/// before one, these small vSSDs (192 pages of flash each) ran out of space
/// (op 1062 of seed 100); now a vSSD checkpoints at half a block of records
/// per unit (`Vssd::trim_budget`).
#[test]
fn trim_heavy_vssds_survive_power_loss() {
    let mut all = powerloss::Figures::default();
    for seed in 100..104 {
        let mix = Mix {
            trim: 0.3,
            flush: 0.05,
            ..Mix::default()
        };
        match run(seed, 1500, 25, 20, mix) {
            Ok(f) => all.add(&f),
            Err(e) => panic!("power-loss violation: {e}"),
        }
    }
    powerloss::report(&all.line("two vSSDs, trim-heavy"));
    assert!(all.states >= 1500, "{}", all.line("too few"));
}

/// The long command (see the module docs).
#[test]
#[ignore]
fn vssds_survive_power_loss_long() {
    let fig = suite(40, 4000, 50, 50);
    powerloss::report(&fig.line("two vSSDs, long"));
}

/// The checker catches a device that loses acknowledged writes: with FLUSH
/// acknowledged but never sent, some crash state must fail.
#[test]
fn the_checker_catches_a_skipped_flush() {
    let mix = Mix {
        skip_flush: true,
        fua: 0.0,
        ..Mix::default()
    };
    let e = run(7, 600, 20, 12, mix).expect_err("a skipped flush went unnoticed");
    powerloss::report(&format!("injected bug caught: {e}"));
    assert!(e.contains("acknowledged durable"), "{e}");
}
