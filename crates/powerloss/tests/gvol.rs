//! Power loss under a harvest volume during migrations: a gSSD-backed
//! `GhostVolume` migrates its segment from one gSSD (a vSSD) to another, chunk
//! by chunk between the tenant's writes, trims and flushes, beside a plain
//! vSSD on the same device. After each migration the old gSSD is destroyed
//! (its blocks erased, as early reclamation does) and created again empty, and
//! the next migration goes back. Crash states are made at random moments of
//! that cycle and checked as in `tests/vssd.rs`.
//!
//! The volume's map is not on flash: the control plane keeps it. The harness
//! assumes what the gvol docs promise: before a migration's switch the old
//! gSSD is the volume's (complete) copy; the switch is persisted when
//! `Step::Done` is returned, before the old gSSD is erased. A crash state
//! rebuilds the volume on whichever gSSD that says.
//!
//! Long run: `FLEXSSD_POWERLOSS_STATES=100000 cargo test --release -p powerloss
//! --test gvol -- --ignored --nocapture`.

use std::sync::Arc;

use blockdev::BlockDev;
use clock::VirtualClock;
use flash::{FlashDevice, Geometry, Timing};
use ftl::{max_capacity, Extent, GcPolicyKind, Vssd, VssdConfig};
use gvol::{GhostVolume, MigrateOptions, Migration, Step};
use powerloss::{step, Chooser, Figures, Mix, SnapCheckpoints, Vol, VolModel};
use rng::SplitMix64;

const PAGE: usize = 4096;
/// Volume size: 48 pages.
const VOL: u64 = 48 * PAGE as u64;

fn geo() -> Geometry {
    Geometry {
        channels: 2,
        dies_per_channel: 1,
        planes_per_die: 1,
        blocks_per_plane: 30,
        pages_per_block: 8,
        page_size: PAGE as u32,
    }
}

/// vSSD `id` on blocks `first..first + 10` of both channels.
fn cfg(id: u32, first_block: u32, name: &str) -> VssdConfig {
    let g = geo();
    let extents: Vec<Extent> = (0..g.channels)
        .map(|channel| Extent {
            channel,
            first_block,
            blocks: 10,
        })
        .collect();
    VssdConfig {
        id,
        name: name.into(),
        capacity_bytes: max_capacity(&g, &extents),
        extents,
        gc: GcPolicyKind::Greedy,
        lent: Vec::new(),
    }
}

/// What a crash state needs besides the flash: which vSSDs exist, which
/// gSSD the volume maps to, the models.
#[derive(Clone)]
struct Snap {
    live: Vec<VssdConfig>,
    target: u32,
    plain: VolModel,
    vol: VolModel,
}

fn recover_and_check(
    img: &flash::CrashImage,
    ckpt: &SnapCheckpoints,
    snap: &Snap,
    fig: &mut Figures,
) -> Result<(), String> {
    let dev = Arc::new(
        FlashDevice::from_crash_image(geo(), Timing::default(), img).map_err(|e| e.to_string())?,
    );
    let clock = Arc::new(VirtualClock::new(1));
    let ckpt = Arc::new(ckpt.snapshot());
    let mut opened = Vec::new();
    for c in &snap.live {
        let v = Vssd::open(dev.clone(), c.clone(), clock.clone(), ckpt.clone())
            .map_err(|e| format!("recovery of {} failed: {e}", c.name))?;
        fig.recoveries += 1;
        opened.push((c.id, v));
    }
    let find = |id: u32| {
        opened
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("vSSD {id} does not exist at the crash"))
    };
    snap.plain.clone().check_all(&*find(1)?, &mut fig.checks)?;
    let vol = GhostVolume::new("harvest", VOL);
    vol.attach(0, VOL, u64::from(snap.target), find(snap.target)?, 0)
        .map_err(|e| e.to_string())?;
    snap.vol.clone().check_all(&vol, &mut fig.checks)
}

fn run(seed: u64, ops: u64, points: u64, per_point: u64) -> Result<(Figures, u64), String> {
    let g = geo();
    let dev = Arc::new(FlashDevice::memory(g, Timing::default()).unwrap());
    dev.record_crashes();
    let clock = Arc::new(VirtualClock::new(1));
    let ckpt = SnapCheckpoints::default();
    let create = |c: &VssdConfig| {
        Vssd::create(
            dev.clone(),
            c.clone(),
            clock.clone(),
            Arc::new(ckpt.clone()),
        )
        .map_err(|e| format!("create {}: {e}", c.name))
    };
    let plain_cfg = cfg(1, 0, "plain");
    let gcfg = [cfg(10, 10, "gssd-a"), cfg(11, 20, "gssd-b")];
    let plain = create(&plain_cfg)?;
    let mut gssd: [Option<Arc<Vssd>>; 2] = [Some(create(&gcfg[0])?), Some(create(&gcfg[1])?)];
    let vol = Arc::new(GhostVolume::new("harvest", VOL));
    vol.attach(0, VOL, 10, gssd[0].clone().unwrap(), 0)
        .map_err(|e| e.to_string())?;
    let mut on = 0usize; // index of the gSSD the volume maps to
    let mut vols = vec![
        Vol {
            dev: plain.clone(),
            model: VolModel::new(1, plain_cfg.capacity_bytes / PAGE as u64, PAGE),
        },
        Vol {
            dev: vol.clone(),
            model: VolModel::new(20, VOL / PAGE as u64, PAGE),
        },
    ];
    let mut mig: Option<Migration> = None;
    let mut migrations = 0;
    let mut rng = SplitMix64::derive(seed, &[10]);
    let mut chooser = Chooser::new(SplitMix64::derive(seed, &[11]));
    let mut fig = Figures::default();
    let mut gc_done = 0;
    for op in 0..ops {
        clock.advance(20_000);
        fig.gc_runs = gc_done
            + plain.stats().gc_runs
            + gssd
                .iter()
                .flatten()
                .map(|v| v.stats().gc_runs)
                .sum::<u64>();
        let ctx = |e: String| format!("seed {seed} op {op}: {e}");
        step(&mut rng, &mut vols, &Mix::default()).map_err(ctx)?;
        match &mut mig {
            None if rng.below(8) == 0 => {
                let to = 1 - on;
                if gssd[to].is_none() {
                    gssd[to] = Some(create(&gcfg[to]).map_err(ctx)?);
                }
                let opts = MigrateOptions {
                    chunk_bytes: 4 * PAGE as u64,
                    ..MigrateOptions::default()
                };
                let target = gssd[to].clone().unwrap() as Arc<dyn BlockDev>;
                mig = Some(
                    vol.start_migration(0, u64::from(gcfg[to].id), target, 0, opts)
                        .map_err(|e| ctx(e.to_string()))?,
                );
            }
            Some(m) if rng.below(3) == 0 => {
                if let Step::Done(_) = m.step().map_err(|e| ctx(e.to_string()))? {
                    mig = None;
                    migrations += 1;
                    let old = on;
                    on = 1 - on;
                    // Early reclamation: the old gSSD's blocks are erased
                    // and go back to their owner.
                    let gone = gssd[old].take().unwrap();
                    gc_done += gone.stats().gc_runs;
                    gone.destroy().map_err(|e| ctx(e.to_string()))?;
                }
            }
            _ => {}
        }
        if rng.below(ops as usize) >= points as usize {
            continue;
        }
        let point = dev.crash_point().expect("recording");
        let ck = ckpt.snapshot();
        let mut live = vec![plain_cfg.clone()];
        live.extend(
            (0..2)
                .filter(|&i| gssd[i].is_some())
                .map(|i| gcfg[i].clone()),
        );
        let snap = Snap {
            live,
            target: gcfg[on].id,
            plain: vols[0].model.clone(),
            vol: vols[1].model.clone(),
        };
        fig.points += 1;
        fig.units += point.units().len() as u64;
        for i in 0..per_point as usize {
            let (s, keep) = chooser.choose(&point, i);
            let img = point.image(|j| keep[j]);
            recover_and_check(&img, &ck, &snap, &mut fig).map_err(|e| {
                format!(
                    "seed {seed} op {op} state {i} ({s:?}, migrating: {}, on gSSD {}): {e}",
                    mig.is_some(),
                    gcfg[on].id
                )
            })?;
            fig.states += 1;
            *fig.by_strategy.entry(s).or_default() += 1;
        }
    }
    Ok((fig, migrations))
}

fn suite(seeds: u64, ops: u64, points: u64, default_per_point: u64) -> (Figures, u64) {
    let per_point = powerloss::states_per_point(seeds * points, default_per_point);
    let mut all = Figures::default();
    let mut migrations = 0;
    for seed in 0..seeds {
        match run(seed, ops, points, per_point) {
            Ok((f, m)) => {
                all.add(&f);
                migrations += m;
            }
            Err(e) => panic!("power-loss violation: {e}"),
        }
    }
    (all, migrations)
}

#[test]
fn harvest_volumes_survive_power_loss_during_migration() {
    let (fig, migrations) = suite(3, 1200, 20, 20);
    powerloss::report(&format!(
        "{} ({migrations} migrations completed)",
        fig.line("gSSD-backed harvest volume migrating, beside a vSSD")
    ));
    assert!(migrations >= 6, "the run must migrate: {migrations}");
    assert!(fig.states >= 1000);
}

#[test]
#[ignore]
fn harvest_volumes_survive_power_loss_long() {
    let (fig, migrations) = suite(20, 3000, 50, 50);
    powerloss::report(&format!(
        "{} ({migrations} migrations)",
        fig.line("harvest volume, long")
    ));
}
