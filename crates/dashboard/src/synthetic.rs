//! Synthetic data for measuring the page at scale (`flexssd dashboard
//! synthetic`, `scripts/bench-dashboard.sh`): many vSSDs, gSSDs, volumes and
//! events with plausible shapes, from a seeded generator. Labelled synthetic
//! wherever it is shown; nothing here describes a real host.

use control::{
    FlashMap, FlashOwner, FlashOwnerKind, GssdInfo, HarvestEvent, HarvestEventKind,
    HarvestVolumeInfo, MigrationInfo, SegmentRecord, TenantKind, VssdInfo, VssdSlaInfo, VssdState,
    VssdStats,
};
use ftl::{Extent, FtlStats, GcPolicyKind};
use rng::SplitMix64 as Rng;

use crate::{Rate, Snapshot, Viewer, VssdRow};

/// Sizes of a synthetic host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// vSSDs.
    pub vssds: usize,
    /// gSSDs.
    pub gssds: usize,
    /// Devices the vSSDs are spread over.
    pub devices: usize,
    /// Channels per device.
    pub channels: u32,
    /// Blocks per plane.
    pub blocks_per_plane: u32,
    /// Rate samples per vSSD.
    pub samples: usize,
}

impl Default for Shape {
    /// 1,000 vSSDs and 10,000 gSSDs on 4 devices of 64 channels × 1,024
    /// blocks, 5 minutes of 2-second samples.
    fn default() -> Self {
        Shape {
            vssds: 1000,
            gssds: 10_000,
            devices: 4,
            channels: 64,
            blocks_per_plane: 1024,
            samples: 150,
        }
    }
}

const S: u64 = 1_000_000_000;

/// A host of `shape`, the same for the same `seed`, at daemon time `now_s`.
pub fn snapshot(shape: Shape, seed: u64, now_s: u64) -> Snapshot {
    let mut rng = Rng::new(seed);
    let devices = shape.devices.max(1);
    let per_dev = shape.vssds.div_ceil(devices).max(1);
    // Each vSSD gets a block range of one channel; ranges tile the device.
    let slots_per_channel = (per_dev as u32).div_ceil(shape.channels).max(1);
    let range = (shape.blocks_per_plane / slots_per_channel).max(1);
    let mut maps: Vec<FlashMap> = (0..devices)
        .map(|d| {
            let n = (shape.channels * shape.blocks_per_plane) as usize;
            FlashMap {
                device: format!("ssd{d}"),
                channels: shape.channels,
                blocks_per_plane: shape.blocks_per_plane,
                blocks_per_cell: 4,
                owners: vec![
                    owner(FlashOwnerKind::Free, None, None, None),
                    owner(FlashOwnerKind::Unsold, None, None, None),
                ],
                cells: vec![1; n],
                erase_max: (0..n).map(|_| rng.below(3000) as u32).collect(),
            }
        })
        .collect();
    let mut vssds = Vec::with_capacity(shape.vssds);
    let mut home_extent = Vec::with_capacity(shape.vssds);
    for i in 0..shape.vssds {
        let d = i % devices;
        let slot = (i / devices) as u32;
        let channel = slot % shape.channels;
        let first = (slot / shape.channels) * range;
        let name = format!("vssd-{i:04}");
        let tenant = format!("tenant-{:03}", i % 97);
        let m = &mut maps[d];
        let idx = m.owners.len() as u32;
        m.owners.push(owner(
            FlashOwnerKind::Vssd,
            Some(name.clone()),
            Some(tenant.clone()),
            None,
        ));
        let row = (channel * shape.blocks_per_plane) as usize;
        for b in first..(first + range).min(shape.blocks_per_plane) {
            m.cells[row + b as usize] = idx;
        }
        home_extent.push((d, channel, first));
        let extent = Extent {
            channel,
            first_block: first,
            blocks: range,
        };
        let written = rng.below(1 << 30) as u64 / 4096 * 4096;
        let host = written / 4096;
        let flash = host + host / (2 + rng.below(8) as u64);
        let ftl = FtlStats {
            capacity_bytes: (range as u64 * 4) << 20,
            host_pages_written: host,
            flash_pages_written: flash,
            gc_runs: rng.below(5000) as u64,
            total_blocks: range as u64 * 4,
            free_blocks: rng.below(range as usize * 4) as u64,
            max_erase_count: 40 + rng.below(100) as u32,
            min_erase_count: rng.below(40) as u32,
            ..FtlStats::default()
        };
        let mut io = blockdev::StatsSnapshot {
            writes: host,
            write_bytes: written,
            reads: host * 2,
            read_bytes: written * 2,
            ..Default::default()
        };
        io.read_latency.count = host * 2;
        io.read_latency.p50_ns = 90_000;
        io.read_latency.p99_ns = 400_000 + rng.below(400_000) as u64;
        let base = rng.uniform(50.0, 4000.0);
        let rates = (0..shape.samples)
            .map(|k| {
                let r = base * rng.uniform(0.6, 1.4);
                let w = base * rng.uniform(0.1, 0.6);
                Rate {
                    at_ns: now_s * S - (shape.samples - k) as u64 * 2 * S,
                    dt_ns: 2 * S,
                    read_iops: r,
                    write_iops: w,
                    read_bps: r * 4096.0,
                    write_bps: w * 4096.0,
                    read_ops_4k: r,
                    write_ops_4k: w,
                    write_amplification: Some(1.0 + rng.uniform(0.0, 1.5)),
                    gc_runs: rng.below(3) as u64,
                }
            })
            .collect();
        let sla = i.is_multiple_of(3).then(|| sched::TenantSla {
            curve: sla::Curve::new(vec![(0.0, base * 1.5), (base, 0.0)]).ok(),
            weight: 1,
            burst: false,
        });
        vssds.push(VssdRow {
            info: VssdInfo {
                name: name.clone(),
                id: i as u32 + 1,
                device: format!("ssd{d}"),
                channels: vec![channel],
                extents: vec![extent],
                capacity_bytes: ftl.capacity_bytes,
                gc: GcPolicyKind::Greedy,
                state: VssdState::Active,
                sla,
                kind: TenantKind::Regular,
                lent: vec![],
                tenant: Some(tenant),
            },
            stats: Some(VssdStats {
                name,
                device: format!("ssd{d}"),
                ftl,
                io,
                write_amplification: ftl.write_amplification(),
            }),
            rates,
        });
    }
    // gSSDs: lent from the top of their homes' ranges, 8 blocks each.
    let mut gssds = Vec::with_capacity(shape.gssds);
    let per_home = shape.gssds.div_ceil(shape.vssds.max(1)).max(1) as u32;
    let g_blocks = (range / (per_home + 1)).clamp(1, 8);
    for g in 0..shape.gssds {
        let home = g % shape.vssds.max(1);
        let k = (g / shape.vssds.max(1)) as u32;
        let in_use = g.is_multiple_of(3);
        let id = g as u64 + 1;
        if let Some(&(d, ch, first)) = home_extent.get(home) {
            let m = &mut maps[d];
            let idx = m.owners.len() as u32;
            m.owners.push(FlashOwner {
                kind: FlashOwnerKind::Gssd,
                name: Some(format!("gssd-{id}")),
                tenant: None,
                gssd: Some(id),
                home: Some(format!("vssd-{home:04}")),
                cells: 0,
            });
            let start = first + range - (k + 1) * g_blocks;
            let row = (ch * shape.blocks_per_plane) as usize;
            for b in start..start + g_blocks {
                if b < shape.blocks_per_plane {
                    m.cells[row + b as usize] = idx;
                }
            }
        }
        gssds.push(GssdInfo {
            id,
            vssd: format!("gssd-{id}"),
            device: format!("ssd{}", home % devices),
            channels: vec![0],
            bandwidth: 1 + rng.below(4) as u32,
            capacity_blocks: g_blocks as u64 * 4,
            capacity_bytes: g_blocks as u64 * 4 * (3 << 20),
            expiry_s: now_s + 60 + rng.below(7200) as u64,
            in_use,
            volume: in_use.then(|| format!("vol-{}", g / 3)),
            tenant: in_use.then(|| format!("hv-{:03}", g % 50)),
            home: Some(format!("vssd-{home:04}")),
            state: if in_use { "in-use" } else { "pool" }.into(),
        });
    }
    for m in &mut maps {
        for o in m.owners.iter_mut() {
            o.cells = 0;
        }
        for &c in &m.cells {
            m.owners[c as usize].cells += 1;
        }
    }
    let volumes: Vec<HarvestVolumeInfo> = gssds
        .iter()
        .filter(|g| g.in_use)
        .map(|g| HarvestVolumeInfo {
            name: g.volume.clone().unwrap_or_default(),
            tenant: g.tenant.clone().unwrap_or_default(),
            size_bytes: g.capacity_bytes,
            bandwidth: g.bandwidth,
            until_s: now_s + 3600,
            segments: vec![SegmentRecord {
                offset: 0,
                len: g.capacity_bytes,
                gssd: g.id,
                base: 0,
                evict_by: None,
            }],
            state: if g.id % 50 == 1 {
                "migrating"
            } else {
                "active"
            }
            .into(),
            evict_by_s: (g.id % 97 == 1).then_some(now_s + 240),
            migrations: if g.id % 50 == 1 {
                vec![MigrationInfo {
                    offset: 0,
                    from: g.id,
                    to: g.id + 1,
                    copied: g.capacity_bytes / 3,
                    total: g.capacity_bytes,
                }]
            } else {
                vec![]
            },
            lost: vec![],
            io: Default::default(),
        })
        .collect();
    let kinds = HarvestEventKind::ALL;
    let events: Vec<HarvestEvent> = (0..1000u64)
        .map(|k| HarvestEvent {
            seq: k + 1,
            at_ns: (now_s.saturating_sub(1000) + k) * S,
            kind: kinds[k as usize % kinds.len()],
            gssd: Some(k % shape.gssds.max(1) as u64 + 1),
            volume: None,
            home: Some(format!("vssd-{:04}", k as usize % shape.vssds.max(1))),
            detail: "synthetic event".into(),
        })
        .collect();
    let detail = vssds.first().map(|v| VssdSlaInfo {
        name: v.info.name.clone(),
        sla: v.info.sla.clone(),
        device: v.info.device.clone(),
        unit_channels: v.info.channels.clone(),
        neighbours: vec![],
        unit_curve: None,
        stats: None,
    });
    Snapshot {
        now_ns: now_s * S,
        viewer: Viewer::Admin,
        flash: Some(maps),
        vssds,
        detail,
        harvest_enabled: true,
        gssds: Some(gssds),
        volumes,
        events_total: events.len(),
        events,
    }
}

fn owner(
    kind: FlashOwnerKind,
    name: Option<String>,
    tenant: Option<String>,
    home: Option<String>,
) -> FlashOwner {
    FlashOwner {
        kind,
        name,
        tenant,
        gssd: None,
        home,
        cells: 0,
    }
}
