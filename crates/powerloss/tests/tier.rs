//! Power loss under the cache tier: two tenant volumes of a `CacheTier` over a
//! backing store, cached in a vSSD that shares its flash device with a plain
//! vSSD. The backing store is a [`powerloss::CrashDisk`] (what a host crash
//! keeps of it: the durable image plus any subset of the 4 KiB writes since
//! the last FLUSH; a FUA write is durable alone), the flash records as in
//! `tests/vssd.rs`. A crash state combines a flash state and a disk state; the
//! tier is rebuilt over them (it starts cold: the slot map is not persisted,
//! and it trims the cache vSSD) and every page of every volume is checked, as
//! is the plain vSSD.
//!
//! Long run: `FLEXSSD_POWERLOSS_STATES=100000 cargo test --release -p powerloss
//! --test tier -- --ignored --nocapture`.

use std::sync::Arc;

use blockdev::BlockDev;
use cache::{PolicyConfig, PolicyKind};
use clock::VirtualClock;
use flash::{FlashDevice, Geometry, Timing};
use ftl::{max_capacity, Extent, GcPolicyKind, Vssd, VssdConfig};
use powerloss::{
    choose_disk, step, Chooser, CrashDisk, Figures, Mix, SnapCheckpoints, Vol, VolModel,
};
use rng::SplitMix64;
use tier::{CacheTier, TierSetup, VolumeSpec};

const PAGE: usize = 4096;
/// Each tier volume: 40 pages.
const VOL: u64 = 40 * PAGE as u64;
/// Cache: 24 slots, less than the volumes, so lines are evicted.
const CACHE: u64 = 24 * PAGE as u64;

fn geo() -> Geometry {
    Geometry {
        channels: 2,
        dies_per_channel: 1,
        planes_per_die: 1,
        blocks_per_plane: 20,
        pages_per_block: 8,
        page_size: PAGE as u32,
    }
}

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

fn tier(backing: Arc<dyn BlockDev>, cache: Arc<dyn BlockDev>, policy: PolicyKind) -> CacheTier {
    let setup = TierSetup {
        name: "tier".into(),
        policy,
        policy_config: PolicyConfig::default(),
        cache_bytes: CACHE,
        volumes: (0..2)
            .map(|i| VolumeSpec {
                name: format!("v{i}"),
                size: VOL,
            })
            .collect(),
        // Write-through: the tier's cache map is in memory only, so under
        // write-back a crash loses dirty lines by design (docs/config.md).
        write_policy: cache::WritePolicy::WriteThrough,
    };
    CacheTier::new(setup, backing, cache, Arc::new(VirtualClock::new(1))).unwrap()
}

fn run(seed: u64, ops: u64, points: u64, per_point: u64) -> Result<Figures, String> {
    let policy = PolicyKind::Glru;
    let dev = Arc::new(FlashDevice::memory(geo(), Timing::default()).unwrap());
    dev.record_crashes();
    let clock = Arc::new(VirtualClock::new(1));
    let ckpt = SnapCheckpoints::default();
    let cfgs = [cfg(1, 0, "plain"), cfg(2, 10, "cache")];
    let vssds: Vec<Arc<Vssd>> = cfgs
        .iter()
        .map(|c| {
            Vssd::create(
                dev.clone(),
                c.clone(),
                clock.clone(),
                Arc::new(ckpt.clone()),
            )
            .unwrap()
        })
        .collect();
    let disk = Arc::new(CrashDisk::new(2 * VOL));
    let t = tier(disk.clone(), vssds[1].clone(), policy);
    let mut vols = vec![Vol {
        dev: vssds[0].clone(),
        model: VolModel::new(1, cfgs[0].capacity_bytes / PAGE as u64, PAGE),
    }];
    for (i, v) in t.volumes().iter().enumerate() {
        vols.push(Vol {
            dev: v.clone(),
            model: VolModel::new(30 + i as u32, VOL / PAGE as u64, PAGE),
        });
    }
    let mut rng = SplitMix64::derive(seed, &[20]);
    let mut chooser = Chooser::new(SplitMix64::derive(seed, &[21]));
    let mut disk_rng = SplitMix64::derive(seed, &[22]);
    let mut fig = Figures::default();
    let mut buf = vec![0u8; PAGE];
    for op in 0..ops {
        clock.advance(20_000);
        fig.gc_runs = vssds.iter().map(|v| v.stats().gc_runs).sum();
        step(&mut rng, &mut vols, &Mix::default())
            .map_err(|e| format!("seed {seed} op {op}: {e}"))?;
        // Reads fill the cache (a tier only admits on access).
        let v = 1 + rng.below(2);
        let lba = rng.below((VOL / PAGE as u64) as usize) as u64;
        vols[v]
            .dev
            .read(lba * PAGE as u64, &mut buf)
            .map_err(|e| e.to_string())?;
        if rng.below(ops as usize) >= points as usize {
            continue;
        }
        let point = dev.crash_point().expect("recording");
        let dpoint = disk.point();
        let ck = ckpt.snapshot();
        let models: Vec<VolModel> = vols.iter().map(|v| v.model.clone()).collect();
        fig.points += 1;
        fig.units += (point.units().len() + dpoint.units()) as u64;
        for i in 0..per_point as usize {
            let (s, keep) = chooser.choose(&point, i);
            let (_, dkeep) = choose_disk(&mut disk_rng, dpoint.units(), i);
            let mut check = || -> Result<(), String> {
                let img = point.image(|j| keep[j]);
                let dev = Arc::new(
                    FlashDevice::from_crash_image(geo(), Timing::default(), &img)
                        .map_err(|e| e.to_string())?,
                );
                let ck = Arc::new(ck.snapshot());
                let mut opened = Vec::new();
                for c in &cfgs {
                    opened.push(
                        Vssd::open(dev.clone(), c.clone(), clock.clone(), ck.clone())
                            .map_err(|e| format!("recovery of {} failed: {e}", c.name))?,
                    );
                    fig.recoveries += 1;
                }
                models[0].clone().check_all(&*opened[0], &mut fig.checks)?;
                let t = tier(Arc::new(dpoint.disk(&dkeep)), opened[1].clone(), policy);
                for (m, v) in models[1..].iter().zip(t.volumes()) {
                    m.clone().check_all(&**v, &mut fig.checks)?;
                }
                Ok(())
            };
            check().map_err(|e| format!("seed {seed} op {op} state {i} ({s:?}): {e}"))?;
            fig.states += 1;
            *fig.by_strategy.entry(s).or_default() += 1;
        }
    }
    Ok(fig)
}

fn suite(seeds: u64, ops: u64, points: u64, default_per_point: u64) -> Figures {
    let per_point = powerloss::states_per_point(seeds * points, default_per_point);
    let mut all = Figures::default();
    for seed in 0..seeds {
        match run(seed, ops, points, per_point) {
            Ok(f) => all.add(&f),
            Err(e) => panic!("power-loss violation: {e}"),
        }
    }
    all
}

#[test]
fn the_cache_tier_survives_power_loss() {
    let fig = suite(3, 1000, 20, 20);
    powerloss::report(&fig.line("cache tier: 2 volumes, vSSD cache, crash disk backing"));
    assert!(fig.states >= 1000);
}

#[test]
#[ignore]
fn the_cache_tier_survives_power_loss_long() {
    let fig = suite(20, 3000, 50, 50);
    powerloss::report(&fig.line("cache tier, long"));
}
