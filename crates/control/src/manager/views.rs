//! What the API and the CLI read of the host: vSSDs, devices and their counters.
//! Each view takes the host's map lock for reading, copies what it shows, and
//! lets go.

use std::sync::Arc;

use blockdev::{BlockDev, StatsSnapshot};
use flash::{Backend, DeviceStats, FlashDevice, Geometry, Timing};
use ftl::{Extent, FtlStats, GcPolicyKind, Vssd};
use serde::{Deserialize, Serialize};

use super::{channel_list, channels_of, DeviceEntry, HostManager, State, VssdEntry};
use crate::store::{VssdRecord, VssdState};
use crate::{format_size, ControlError, Result};

/// What the API and the CLI show about a vSSD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VssdInfo {
    /// Name, also its NBD export name.
    pub name: String,
    /// Owner id in the flash OOB records.
    pub id: u32,
    /// Device it lives on.
    pub device: String,
    /// Channels it has flash on, ascending.
    pub channels: Vec<u32>,
    /// Exactly which blocks it owns.
    pub extents: Vec<Extent>,
    /// Exported size in bytes.
    pub capacity_bytes: u64,
    /// GC victim policy.
    pub gc: GcPolicyKind,
    /// Lifecycle state (`active`, or `deleting` while its flash is being erased).
    pub state: VssdState,
    /// Its SLA with the scheduler, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<sched::TenantSla>,
    /// Regular (omitted), harvest, or a gSSD.
    #[serde(default, skip_serializing_if = "crate::store::TenantKind::is_regular")]
    pub kind: crate::store::TenantKind,
    /// Blocks it lends to a gSSD.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lent: Vec<Extent>,
    /// The tenant that owns it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// Counters of one vSSD: FTL statistics plus the request counters seen by its export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VssdStats {
    /// vSSD name.
    pub name: String,
    /// Device it lives on.
    pub device: String,
    /// FTL counters and gauges.
    pub ftl: FtlStats,
    /// Requests as the clients issued them.
    pub io: StatsSnapshot,
    /// Flash pages programmed per host page written.
    pub write_amplification: f64,
}

/// Erase counts over every block of a device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EraseCounts {
    /// Least-erased block.
    pub min: u32,
    /// Most-erased block.
    pub max: u32,
    /// Mean over all blocks.
    pub avg: f64,
}

/// What the API and the CLI show about a device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Device name.
    pub name: String,
    /// Where its bytes live.
    pub backend: Backend,
    /// Shape.
    pub geometry: Geometry,
    /// Latencies.
    pub timing: Timing,
    /// Raw flash in bytes.
    pub raw_bytes: u64,
    /// Channels no vSSD has flash on.
    pub free_channels: Vec<u32>,
    /// Channels some vSSD has flash on.
    pub used_channels: Vec<u32>,
    /// vSSDs on this device, by name.
    pub vssds: Vec<String>,
    /// Wear.
    pub erase_count: EraseCounts,
    /// Operation counters since the daemon started.
    pub stats: DeviceStats,
}

/// Whose a cell of the flash map is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlashOwnerKind {
    /// Not owned, on a channel some vSSD bought.
    Free,
    /// Not owned, on a channel no vSSD bought.
    Unsold,
    /// A regular tenant's vSSD.
    Vssd,
    /// A harvest tenant's own vSSD.
    Harvest,
    /// A gSSD: flash lent by a regular vSSD (`home`) or unsold channels.
    Gssd,
}

/// One owner in a [`FlashMap`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlashOwner {
    /// What kind of owner.
    pub kind: FlashOwnerKind,
    /// vSSD name (for a gSSD, its hidden vSSD); absent for free and unsold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The tenant that owns the vSSD, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// gSSD id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gssd: Option<u64>,
    /// A gSSD's lender: the regular vSSD whose blocks it is (absent: unsold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// Cells (block indexes of a channel) this owner has on the device.
    pub cells: u64,
}

/// `GET /v1/devices/{name}/flash`: who owns each block and how worn it is.
///
/// A vSSD owns the same block indexes on every die and plane of its channels
/// (an [`Extent`]), so one cell is one block index of one channel, over all
/// of the channel's dies and planes: `channels × blocks_per_plane` cells,
/// row-major by channel. That keeps the map as small as the allocation's own
/// granularity, and exact: no cell is shared by two owners.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlashMap {
    /// Device name.
    pub device: String,
    /// Rows of the map.
    pub channels: u32,
    /// Columns of the map.
    pub blocks_per_plane: u32,
    /// Flash blocks behind one cell (dies per channel × planes per die).
    pub blocks_per_cell: u32,
    /// Owners; index 0 is free, 1 unsold, the rest vSSDs and gSSDs by name.
    pub owners: Vec<FlashOwner>,
    /// Owner index of each cell, `channel * blocks_per_plane + block`.
    pub cells: Vec<u32>,
    /// Highest erase count among each cell's blocks, same order.
    pub erase_max: Vec<u32>,
}

/// Everything `GET /v1/stats` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostStats {
    /// Per device.
    pub devices: Vec<DeviceInfo>,
    /// Per active vSSD.
    pub vssds: Vec<VssdStats>,
}

impl HostManager {
    pub(super) fn info(rec: &VssdRecord) -> VssdInfo {
        VssdInfo {
            name: rec.name.clone(),
            id: rec.id,
            device: rec.device.clone(),
            channels: channels_of(&rec.extents),
            extents: rec.extents.clone(),
            capacity_bytes: rec.capacity_bytes,
            gc: rec.gc,
            state: rec.state,
            sla: rec.sla.clone(),
            kind: rec.kind.clone(),
            lent: rec.lent.clone(),
            tenant: rec.tenant.clone(),
        }
    }

    /// Every vSSD, by name.
    pub fn list(&self) -> Vec<VssdInfo> {
        self.state
            .read()
            .vssds
            .values()
            .filter(|e| !matches!(e.rec.kind, crate::store::TenantKind::Ghost(_)))
            .map(|e| Self::info(&e.rec))
            .collect()
    }

    /// One vSSD.
    pub fn get(&self, name: &str) -> Result<VssdInfo> {
        self.state
            .read()
            .vssds
            .get(name)
            .map(|e| Self::info(&e.rec))
            .ok_or_else(|| ControlError::NoSuchVssd(name.into()))
    }

    /// The FTL of an active vSSD (for tests and tools that need more than stats).
    pub fn vssd(&self, name: &str) -> Option<Arc<Vssd>> {
        let st = self.state.read();
        st.active(name).ok().map(|e| e.vssd.clone())
    }

    /// The exported block device of an active vSSD: the vSSD wrapped in its stats
    /// layer, exactly what NBD clients use.
    pub fn export_dev(&self, name: &str) -> Option<Arc<dyn BlockDev>> {
        let st = self.state.read();
        st.active(name).ok().map(|e| e.export.clone())
    }

    pub(super) fn stats_of(e: &VssdEntry) -> VssdStats {
        let ftl = e.vssd.stats();
        VssdStats {
            name: e.rec.name.clone(),
            device: e.rec.device.clone(),
            ftl,
            io: e.io.snapshot(),
            write_amplification: ftl.write_amplification(),
        }
    }

    /// Counters of one vSSD.
    pub fn vssd_stats(&self, name: &str) -> Result<VssdStats> {
        let st = self.state.read();
        let e = st.active(name)?;
        Ok(Self::stats_of(e))
    }

    /// Starts a new window for a vSSD's modelled-latency percentiles.
    pub fn reset_latency(&self, name: &str) -> Result<()> {
        let st = self.state.read();
        let e = st.active(name)?;
        e.io.reset_latency();
        Ok(())
    }

    pub(super) fn device_info(st: &State, d: &DeviceEntry) -> DeviceInfo {
        let geo = d.rec.geometry;
        let (mut min, mut max, mut sum) = (u32::MAX, 0u32, 0u64);
        for b in 0..geo.total_blocks() {
            let c = d.dev.erase_count(b);
            min = min.min(c);
            max = max.max(c);
            sum += c as u64;
        }
        let used = st.used_channels(&d.rec.name);
        DeviceInfo {
            name: d.rec.name.clone(),
            backend: d.rec.backend.clone(),
            geometry: geo,
            timing: d.rec.timing,
            raw_bytes: geo.total_bytes(),
            free_channels: st.free_channels(d),
            used_channels: used.into_iter().collect(),
            vssds: st
                .vssds
                .values()
                .filter(|v| v.rec.device == d.rec.name)
                .map(|v| v.rec.name.clone())
                .collect(),
            erase_count: EraseCounts {
                min,
                max,
                avg: sum as f64 / geo.total_blocks().max(1) as f64,
            },
            stats: d.dev.stats(),
        }
    }

    /// Every device, in configuration order.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let st = self.state.read();
        st.devices
            .iter()
            .map(|d| Self::device_info(&st, d))
            .collect()
    }

    /// One device.
    pub fn device(&self, name: &str) -> Result<DeviceInfo> {
        let st = self.state.read();
        let d = st.device(name)?;
        Ok(Self::device_info(&st, d))
    }

    /// Who owns each block of a device and its wear (see [`FlashMap`]). Reads
    /// the erase counters under the map lock's read side, like [`Self::device`].
    pub fn flash_map(&self, name: &str) -> Result<FlashMap> {
        let st = self.state.read();
        let d = st.device(name)?;
        let geo = d.rec.geometry;
        let (channels, bpp) = (geo.channels, geo.blocks_per_plane);
        let per_cell = geo.dies_per_channel * geo.planes_per_die;
        let mut owners = vec![
            FlashOwner {
                kind: FlashOwnerKind::Free,
                name: None,
                tenant: None,
                gssd: None,
                home: None,
                cells: 0,
            },
            FlashOwner {
                kind: FlashOwnerKind::Unsold,
                name: None,
                tenant: None,
                gssd: None,
                home: None,
                cells: 0,
            },
        ];
        let ncells = channels as usize * bpp as usize;
        let mut cells = vec![u32::MAX; ncells];
        let mut sold = vec![false; channels as usize];
        // Regular and harvest vSSDs first, gSSDs after: a lender's extents
        // still hold the blocks it lends, and the map shows who has them now.
        let mut entries: Vec<&VssdEntry> = st
            .vssds
            .values()
            .filter(|v| v.rec.device == d.rec.name)
            .collect();
        entries.sort_by_key(|v| matches!(v.rec.kind, crate::store::TenantKind::Ghost(_)));
        for v in entries {
            let (kind, gssd, home) = match &v.rec.kind {
                crate::store::TenantKind::Regular => (FlashOwnerKind::Vssd, None, None),
                crate::store::TenantKind::Harvest => (FlashOwnerKind::Harvest, None, None),
                crate::store::TenantKind::Ghost(g) => {
                    (FlashOwnerKind::Gssd, Some(g.gssd), g.home.clone())
                }
            };
            let idx = owners.len() as u32;
            for e in &v.rec.extents {
                if e.channel >= channels {
                    continue;
                }
                if kind != FlashOwnerKind::Gssd {
                    sold[e.channel as usize] = true;
                }
                let row = e.channel as usize * bpp as usize;
                for b in e.first_block..(e.first_block + e.blocks).min(bpp) {
                    cells[row + b as usize] = idx;
                }
            }
            owners.push(FlashOwner {
                kind,
                name: Some(v.rec.name.clone()),
                tenant: v.rec.tenant.clone(),
                gssd,
                home,
                cells: 0,
            });
        }
        let mut erase_max = vec![0u32; ncells];
        for c in 0..channels {
            for b in 0..bpp {
                let mut m = 0;
                for die in 0..geo.dies_per_channel {
                    for plane in 0..geo.planes_per_die {
                        m = m.max(d.dev.erase_count(geo.block_id(c, die, plane, b)));
                    }
                }
                erase_max[c as usize * bpp as usize + b as usize] = m;
            }
        }
        // Counted once every owner has its cells: a gSSD takes its lender's.
        for (i, cell) in cells.iter_mut().enumerate() {
            if *cell == u32::MAX {
                *cell = if sold[i / bpp as usize] { 0 } else { 1 };
            }
            owners[*cell as usize].cells += 1;
        }
        Ok(FlashMap {
            device: d.rec.name.clone(),
            channels,
            blocks_per_plane: bpp,
            blocks_per_cell: per_cell,
            owners,
            cells,
            erase_max,
        })
    }

    /// The flash device of that name (for tests and tools).
    pub fn flash(&self, name: &str) -> Option<Arc<FlashDevice>> {
        self.state.read().device(name).ok().map(|d| d.dev.clone())
    }

    /// Stats of every device and every active vSSD.
    pub fn stats(&self) -> HostStats {
        let st = self.state.read();
        HostStats {
            devices: st
                .devices
                .iter()
                .map(|d| Self::device_info(&st, d))
                .collect(),
            vssds: st
                .vssds
                .values()
                .filter(|e| e.rec.state == VssdState::Active)
                .map(Self::stats_of)
                .collect(),
        }
    }

    pub(super) fn describe(rec: &VssdRecord) -> String {
        format!(
            "flexssd vSSD on {} channels {}, {}, {} GC",
            rec.device,
            channel_list(&channels_of(&rec.extents)),
            format_size(rec.capacity_bytes),
            match rec.gc {
                GcPolicyKind::Greedy => "greedy",
                GcPolicyKind::CostBenefit => "cost-benefit",
            }
        )
    }
}
