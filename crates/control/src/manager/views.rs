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
