//! Power loss under harvesting proper: the gSSDs are ghost vSSDs on blocks a
//! home vSSD lends (`Vssd::lend`, which moves the home's pages off them and
//! erases them), and a gSSD-backed `GhostVolume` migrates between two of them
//! (one lent range per channel) while the home tenant and the volume's tenant
//! write, trim and flush. After each migration the old gSSD is destroyed and
//! its blocks taken back (`Vssd::take_back`), then lent again for the next
//! migration. Crash states are made at random moments of that cycle and checked
//! as in `tests/vssd.rs`: the home vSSD, and the volume on its gSSD.
//!
//! What the control plane persists is assumed as the ftl and gvol docs ask:
//! the home's `Vssd::config()` (its lent ranges) after `lend` and `take_back`
//! return, a gSSD's config when it is created, the volume's map at the switch.
//!
//! The volume's map is not on flash: the control plane keeps it. The harness
//! assumes what the gvol docs promise: before a migration's switch the old
//! gSSD is the volume's (complete) copy; the switch is persisted when
//! `Step::Done` is returned, before the old gSSD is erased. A crash state
//! rebuilds the volume on whichever gSSD that says.
//!
//! Long run: `FLEXSSD_POWERLOSS_STATES=100000 cargo test --release -p powerloss
//! --test harvest -- --ignored --nocapture`.

use std::sync::Arc;

use blockdev::BlockDev;
use clock::VirtualClock;
use flash::{FlashDevice, Geometry, Timing};
use ftl::{max_capacity, Extent, GcPolicyKind, Vssd, VssdConfig};
use gvol::{GhostVolume, MigrateOptions, Migration, Step};
use powerloss::{report, step, Chooser, Figures, Mix, SnapCheckpoints, Vol, VolModel};
use rng::SplitMix64;

const PAGE: usize = 4096;
/// Volume size: 32 pages (a gSSD of 10 blocks of one channel holds 40).
const VOL: u64 = 32 * PAGE as u64;
/// Blocks per plane lent for each gSSD.
const LEND: u32 = 10;

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

/// The home vSSD: every block of both channels, exporting 160 pages (a
/// third of its flash: still enough room to lend a third of it, and its data
/// spreads over the blocks lent, so lends move pages).
fn home_cfg() -> VssdConfig {
    let g = geo();
    VssdConfig {
        id: 1,
        name: "home".into(),
        capacity_bytes: 160 * PAGE as u64,
        extents: (0..g.channels)
            .map(|c| Extent::whole_channel(&g, c))
            .collect(),
        gc: GcPolicyKind::Greedy,
        lent: Vec::new(),
    }
}

/// A gSSD on lent `extents`.
fn ghost_cfg(id: u32, extents: Vec<Extent>) -> VssdConfig {
    VssdConfig {
        id,
        name: format!("gssd-{id}"),
        capacity_bytes: max_capacity(&geo(), &extents),
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

/// Whether `home` can lend `LEND` blocks per plane on channel `ch` now.
fn can_lend(home: &Vssd, ch: usize) -> bool {
    home.lendable()
        .iter()
        .any(|&(c, n)| c as usize == ch && n >= LEND)
}

fn run(seed: u64, ops: u64, points: u64, per_point: u64) -> Result<(Figures, u64, u64), String> {
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
    let home = create(&home_cfg())?;
    // Fill the home three times over first, so its data spreads over every
    // block and the lends below have pages to move.
    let mut home_model = VolModel::new(1, home_cfg().capacity_bytes / PAGE as u64, PAGE);
    for i in 0..3 * home_model.pages() {
        let lba = i % home_model.pages();
        home.write(lba * PAGE as u64, &home_model.write(lba), false)
            .map_err(|e| e.to_string())?;
    }
    let mut next_id = 10;
    // gSSD per channel: its config and vSSD.
    let mut gssd: [Option<(VssdConfig, Arc<Vssd>)>; 2] = [None, None];
    let mut lend_on =
        |ch: usize, gssd: &mut [Option<(VssdConfig, Arc<Vssd>)>; 2]| -> Result<(), String> {
            let ext = home
                .lend(&[ch as u32], LEND)
                .map_err(|e| format!("lend: {e}"))?;
            let c = ghost_cfg(next_id, ext);
            next_id += 1;
            let v = create(&c)?;
            gssd[ch] = Some((c, v));
            Ok(())
        };
    lend_on(0, &mut gssd)?;
    let vol = Arc::new(GhostVolume::new("harvest", VOL));
    let first = gssd[0].as_ref().unwrap();
    vol.attach(0, VOL, u64::from(first.0.id), first.1.clone(), 0)
        .map_err(|e| e.to_string())?;
    let mut on = 0usize; // channel of the gSSD the volume maps to
    let mut vols = vec![
        Vol {
            dev: home.clone(),
            model: home_model,
        },
        Vol {
            dev: vol.clone(),
            model: VolModel::new(20, VOL / PAGE as u64, PAGE),
        },
    ];
    let mut mig: Option<Migration> = None;
    let mut migrations = 0;
    let mut rng = SplitMix64::derive(seed, &[30]);
    let mut chooser = Chooser::new(SplitMix64::derive(seed, &[31]));
    let mut fig = Figures::default();
    let mut gc_done = 0;
    for op in 0..ops {
        clock.advance(20_000);
        fig.gc_runs = gc_done
            + home.stats().gc_runs
            + gssd
                .iter()
                .flatten()
                .map(|(_, v)| v.stats().gc_runs)
                .sum::<u64>();
        let ctx = |e: String| format!("seed {seed} op {op}: {e}");
        step(&mut rng, &mut vols, &Mix::default()).map_err(ctx)?;
        match &mut mig {
            // A migration starts only when the home can lend the range (its
            // headroom rules may refuse for a while).
            None if rng.below(8) == 0 && can_lend(&home, 1 - on) => {
                let to = 1 - on;
                if let Err(e) = lend_on(to, &mut gssd) {
                    // A lend that fails lends nothing (`Vssd::lend` is
                    // atomic); the control plane would try again later. The
                    // long run once hit one (NoSpace although `lendable`
                    // allowed the range; fixed, see
                    // docs/results/powerloss.md). Crash states after it are
                    // checked as usual.
                    report(&format!("seed {seed} op {op}: lend refused: {e}"));
                    continue;
                }
                let opts = MigrateOptions {
                    chunk_bytes: 4 * PAGE as u64,
                    ..MigrateOptions::default()
                };
                let (c, v) = gssd[to].as_ref().unwrap();
                mig = Some(
                    vol.start_migration(0, u64::from(c.id), v.clone(), 0, opts)
                        .map_err(|e| ctx(e.to_string()))?,
                );
            }
            Some(m) if rng.below(3) == 0 => {
                if let Step::Done(_) = m.step().map_err(|e| ctx(e.to_string()))? {
                    mig = None;
                    migrations += 1;
                    let old = on;
                    on = 1 - on;
                    // Early reclamation: the old gSSD is erased and its blocks
                    // go back to the home vSSD.
                    let (c, gone) = gssd[old].take().unwrap();
                    gc_done += gone.stats().gc_runs;
                    gone.destroy().map_err(|e| ctx(e.to_string()))?;
                    home.take_back(&c.extents).map_err(|e| ctx(e.to_string()))?;
                }
            }
            _ => {}
        }
        if rng.below(ops as usize) >= points as usize {
            continue;
        }
        if std::env::var("PL_DEBUG").is_ok() {
            // The live devices must hold what the model says, crash or not.
            let mut n = powerloss::Checks::default();
            vols[0]
                .model
                .clone()
                .check_all(&*home, &mut n)
                .map_err(|e| ctx(format!("live home: {e}")))?;
            vols[1]
                .model
                .clone()
                .check_all(&*vol, &mut n)
                .map_err(|e| ctx(format!("live volume: {e}")))?;
        }
        let point = dev.crash_point().expect("recording");
        let ck = ckpt.snapshot();
        let mut live = vec![home.config()];
        live.extend(gssd.iter().flatten().map(|(c, _)| c.clone()));
        let snap = Snap {
            live,
            target: gssd[on].as_ref().unwrap().0.id,
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
                    snap.target
                )
            })?;
            fig.states += 1;
            *fig.by_strategy.entry(s).or_default() += 1;
        }
    }
    Ok((fig, migrations, home.stats().lend_pages_moved))
}

fn suite(seeds: u64, ops: u64, points: u64, default_per_point: u64) -> (Figures, u64, u64) {
    let per_point = powerloss::states_per_point(seeds * points, default_per_point);
    let mut all = Figures::default();
    let (mut migrations, mut moved) = (0, 0);
    for seed in 0..seeds {
        if std::env::var("PL_SEED").is_ok_and(|s| s != seed.to_string()) {
            continue;
        }
        match run(seed, ops, points, per_point) {
            Ok((f, m, p)) => {
                all.add(&f);
                migrations += m;
                moved += p;
            }
            Err(e) => panic!("power-loss violation: {e}"),
        }
    }
    (all, migrations, moved)
}

#[test]
fn lent_gssds_survive_power_loss_during_migration() {
    let (fig, migrations, moved) = suite(3, 1200, 20, 20);
    powerloss::report(&format!(
        "{} ({migrations} migrations completed, each with a lend and a take-back; \
         {moved} home pages moved by lends)",
        fig.line("harvest volume on ghost vSSDs of lent blocks, home vSSD writing")
    ));
    assert!(migrations >= 6, "the run must migrate: {migrations}");
    assert!(moved > 0, "lends must move home pages");
    assert!(fig.states >= 1000);
}

#[test]
#[ignore]
fn lent_gssds_survive_power_loss_long() {
    let (fig, migrations, moved) = suite(20, 3000, 50, 50);
    powerloss::report(&format!(
        "{} ({migrations} migrations, {moved} home pages moved by lends)",
        fig.line("lent gSSDs, long")
    ));
}
