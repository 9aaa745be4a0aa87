//! The agent's port onto a real host: [`HostPort`] over `control::HostManager`.

use std::sync::Arc;

use control::{BlockRange, ByteSize, HostManager, VssdSpec};

use crate::agent::HostPort;
use crate::keys::{
    DeviceSummary, FleetHarvest, FleetVssd, GssdSummary, HarvestState, ObservedHarvest,
};

/// A daemon's host manager, as the fleet sees it.
pub struct ManagerHost {
    mgr: Arc<HostManager>,
}

impl ManagerHost {
    /// Wraps `mgr`.
    pub fn new(mgr: Arc<HostManager>) -> Self {
        ManagerHost { mgr }
    }
}

fn report(v: &control::HarvestVolumeInfo) -> ObservedHarvest {
    ObservedHarvest {
        state: match v.state.as_str() {
            "evicting" => HarvestState::Evicting,
            "degraded" => HarvestState::Degraded,
            "migrating" => HarvestState::Migrating,
            _ => HarvestState::Active,
        },
        error: None,
        uri: None,
        size_bytes: v.size_bytes,
        gssds: v.segments.iter().map(|s| s.gssd).collect(),
        until_s: v.until_s,
        evict_by_s: v.evict_by_s,
    }
}

impl HostPort for ManagerHost {
    fn now_ms(&self) -> u64 {
        self.mgr.clock().now() / 1_000_000
    }

    fn devices(&self) -> Vec<DeviceSummary> {
        // Channels lent as unsold gSSDs are for sale: a vSSD placed on them
        // takes them back (the host reclaims the gSSD when it is created).
        let mut unsold: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
        for g in self.mgr.gssds().into_iter().filter(|g| g.home.is_none()) {
            unsold.entry(g.device).or_default().extend(g.channels);
        }
        self.mgr
            .devices()
            .into_iter()
            .map(|d| {
                let g = d.geometry;
                let row_bytes = u64::from(g.channels)
                    * u64::from(g.dies_per_channel)
                    * u64::from(g.planes_per_die)
                    * u64::from(g.pages_per_block)
                    * u64::from(g.page_size);
                let unit_curves = self
                    .mgr
                    .unit_curves(&d.name)
                    .map(|m| m.into_iter().map(|(k, u)| (k, u.curve)).collect())
                    .unwrap_or_default();
                // The fewest blocks per plane whose vSSD can hold any data at all.
                let spare_blocks = (1..=g.blocks_per_plane)
                    .find(|&b| {
                        let ext: Vec<ftl::Extent> = (0..g.channels)
                            .map(|channel| ftl::Extent {
                                channel,
                                first_block: 0,
                                blocks: b,
                            })
                            .collect();
                        ftl::max_capacity(&g, &ext) > 0
                    })
                    .unwrap_or(g.blocks_per_plane);
                let mut free_channels = d.free_channels;
                free_channels.extend(unsold.remove(&d.name).unwrap_or_default());
                free_channels.sort_unstable();
                free_channels.dedup();
                DeviceSummary {
                    spare_blocks,
                    name: d.name,
                    channels: g.channels,
                    blocks_per_plane: g.blocks_per_plane,
                    row_bytes,
                    free_channels,
                    unit_curves,
                }
            })
            .collect()
    }

    fn gssds(&self) -> Vec<GssdSummary> {
        self.mgr
            .gssds()
            .into_iter()
            .map(|g| GssdSummary {
                id: g.id,
                capacity_bytes: g.capacity_bytes,
                bandwidth: g.bandwidth,
                expiry_s: g.expiry_s,
                in_use: g.in_use,
            })
            .collect()
    }

    fn ensure_vssd(&self, v: &FleetVssd) -> Result<u64, String> {
        if let Ok(have) = self.mgr.get(&v.name) {
            let same_blocks = match v.blocks {
                None => true,
                Some((s, e)) => have
                    .extents
                    .iter()
                    .all(|x| x.first_block == s && x.first_block + x.blocks == e),
            };
            if have.device == v.device && have.channels == v.channels && same_blocks {
                return Ok(have.capacity_bytes);
            }
            return Err(format!(
                "this host already has a vSSD named {:?} on {} channels {:?}, not the one the fleet placed",
                v.name, have.device, have.channels
            ));
        }
        let spec = VssdSpec {
            name: v.name.clone(),
            device: Some(v.device.clone()),
            channel_ids: Some(v.channels.clone()),
            blocks: v.blocks.map(|(start, end)| BlockRange { start, end }),
            capacity: v.capacity.map(ByteSize),
            sla: v.sla.as_ref().map(|s| sched::TenantSla {
                curve: Some(s.curve.clone()),
                ..Default::default()
            }),
            tenant: v.tenant.clone(),
            role: v.role,
            ..Default::default()
        };
        self.mgr
            .create_vssd(&spec)
            .map(|i| i.capacity_bytes)
            .map_err(|e| e.to_string())
    }

    fn ensure_harvest(&self, h: &FleetHarvest) -> Result<ObservedHarvest, String> {
        if let Ok(v) = self.mgr.harvest_volume(&h.name) {
            if v.tenant != h.tenant {
                return Err(format!(
                    "this host already has a harvest volume named {:?}, of tenant {}",
                    h.name, v.tenant
                ));
            }
            return Ok(report(&v));
        }
        let req = control::HarvestRequest {
            name: h.name.clone(),
            tenant: h.tenant.clone(),
            capacity: ByteSize(h.capacity_bytes),
            bandwidth: h.bandwidth,
            duration_s: h.duration_s,
        };
        self.mgr
            .harvest_volume_create_for_fleet(&req, h.owner.clone())
            .map(|v| report(&v))
            .map_err(|e| e.to_string())
    }

    fn harvest_report(&self, name: &str) -> Option<ObservedHarvest> {
        self.mgr.harvest_volume(name).ok().map(|v| report(&v))
    }

    fn release_harvest(&self, name: &str) -> Result<(), String> {
        if self.mgr.harvest_volume(name).is_err() {
            return Ok(());
        }
        self.mgr
            .harvest_volume_release(name)
            .map_err(|e| e.to_string())
    }

    fn remove_vssd(&self, name: &str) -> Result<(), String> {
        if self.mgr.get(name).is_err() {
            return Ok(());
        }
        self.mgr.delete_vssd(name).map_err(|e| e.to_string())
    }
}
