//! The host's side of harvesting: [`HarvestHost`] for the harvester (lend,
//! take back, make and erase a gSSD's vSSD, the export registry), each call
//! with the host's crash ordering and its map lock held for map updates only;
//! and the harvester's API on the host, each mutating call under the
//! lifecycle lock.

use std::sync::Arc;

use clock::Nanos;
use ftl::{Extent, Vssd};

use super::HostManager;
use crate::exports::Exports;
use crate::harvester::{
    DeviceView, GhostDev, GssdInfo, HarvestEvent, HarvestHost, HarvestRequest, HarvestStatus,
    HarvestVolumeInfo, HomeView,
};
use crate::store::{GhostMeta, TenantKind, VssdRecord, VssdState};
use crate::{ControlError, HarvestSettings, Result};

impl HostManager {
    /// The active vSSDs of `kind` (tier caches excepted), as the harvester
    /// sees them.
    fn views_of(&self, kind: TenantKind) -> Vec<HomeView> {
        let st = self.state.read();
        st.vssds
            .values()
            .filter(|e| e.rec.state == VssdState::Active && e.rec.kind == kind)
            .filter(|e| !st.is_tier_cache(&e.rec.name))
            .map(|e| HomeView {
                name: e.rec.name.clone(),
                id: u64::from(e.rec.id),
                device: e.rec.device.clone(),
                extents: e.rec.extents.clone(),
                capacity_bytes: e.rec.capacity_bytes,
                vssd: e.vssd.clone(),
                io: e.io.clone(),
            })
            .collect()
    }
}

impl HarvestHost for HostManager {
    fn devices(&self) -> Vec<DeviceView> {
        let st = self.state.read();
        st.devices
            .iter()
            .map(|d| DeviceView {
                name: d.rec.name.clone(),
                geometry: d.rec.geometry,
                timing: d.rec.timing,
                backend: d.rec.backend.clone(),
                flash: d.dev.clone(),
                free_channels: st.free_channels(d),
            })
            .collect()
    }

    fn homes(&self) -> Vec<HomeView> {
        self.views_of(TenantKind::Regular)
    }

    fn harvest_tenants(&self) -> Vec<HomeView> {
        self.views_of(TenantKind::Harvest)
    }

    fn is_harvest_tenant(&self, name: &str) -> Result<bool> {
        Ok(self.state.read().active(name)?.rec.kind == TenantKind::Harvest)
    }

    fn name_taken(&self, name: &str) -> bool {
        let st = self.state.read();
        st.vssds.contains_key(name) || st.tier_owning(name).is_some()
    }

    fn tenant_of(&self, name: &str) -> Option<String> {
        self.state.read().vssds.get(name)?.rec.tenant.clone()
    }

    fn ghosts(&self) -> Vec<(VssdRecord, Arc<Vssd>)> {
        self.state
            .read()
            .vssds
            .values()
            .filter(|e| matches!(e.rec.kind, TenantKind::Ghost(_)))
            .map(|e| (e.rec.clone(), e.vssd.clone()))
            .collect()
    }

    fn lend(&self, home: &str, channels: &[u32], blocks: u32) -> Result<Vec<Extent>> {
        let e = self.state.read().active(home)?.clone();
        let extents = e.vssd.lend(channels, blocks)?;
        self.record_lent(home, &e.vssd)?;
        Ok(extents)
    }

    fn take_back(&self, home: &str, extents: &[Extent]) -> Result<Nanos> {
        let Some(e) = self.state.read().vssds.get(home).cloned() else {
            // The home is gone (deleted): its blocks were erased with it.
            return Ok(self.clock.now());
        };
        let done = e.vssd.take_back(extents)?;
        self.record_lent(home, &e.vssd)?;
        Ok(done)
    }

    fn create_ghost(
        &self,
        device: &str,
        extents: Vec<Extent>,
        meta: GhostMeta,
    ) -> Result<GhostDev> {
        let (geo, dev) = {
            let st = self.state.read();
            let d = st.device(device)?;
            (d.rec.geometry, d.dev.clone())
        };
        let name = format!("gssd-{}", meta.gssd);
        let mut rec = self.store.insert_new_vssd(|id| VssdRecord {
            id,
            name: name.clone(),
            device: device.to_string(),
            capacity_bytes: ftl::default_capacity(&geo, &extents),
            extents,
            gc: Default::default(),
            state: VssdState::Creating,
            sla: None,
            kind: TenantKind::Ghost(meta),
            lent: Vec::new(),
            tenant: None,
        })?;
        let vssd = self.build_recorded(dev, &mut rec)?;
        self.store.put_vssd(&rec)?;
        let ghost = GhostDev {
            id: u64::from(rec.id),
            name,
            capacity_bytes: rec.capacity_bytes,
            vssd: vssd.clone(),
        };
        self.insert_entry(rec, vssd, false);
        Ok(ghost)
    }

    fn destroy_ghost(&self, name: &str) -> Result<Nanos> {
        let entry = self
            .state
            .read()
            .vssds
            .get(name)
            .cloned()
            .ok_or_else(|| ControlError::NoSuchVssd(name.into()))?;
        let mut rec = entry.rec.clone();
        rec.state = VssdState::Deleting;
        self.store.put_vssd(&rec)?;
        let done = entry.vssd.destroy()?;
        self.store.remove_vssd(name)?;
        let mut st = self.state.write();
        if let Some(e) = st.vssds.remove(name) {
            Self::detach_gate(&mut st, &e);
        }
        Ok(done)
    }

    fn reformat_ghost(&self, name: &str) -> Result<Arc<Vssd>> {
        let (entry, dev) = {
            let st = self.state.read();
            let e = st
                .vssds
                .get(name)
                .cloned()
                .ok_or_else(|| ControlError::NoSuchVssd(name.into()))?;
            let dev = st.device(&e.rec.device)?.dev.clone();
            (e, dev)
        };
        entry.vssd.destroy()?;
        let vssd = Vssd::create(
            dev,
            Self::vssd_config(&entry.rec),
            self.clock.clone(),
            self.ckpt.clone(),
        )?;
        let mut st = self.state.write();
        st.vssds.remove(name);
        self.insert_entry_locked(&mut st, entry.rec, vssd.clone(), false);
        Ok(vssd)
    }

    fn exports(&self) -> &Exports {
        &self.exports
    }
}

impl HostManager {
    /// Records what `vssd` (a home) has lent now.
    fn record_lent(&self, home: &str, vssd: &Vssd) -> Result<()> {
        let mut rec = self.state.read().active(home)?.rec.clone();
        rec.lent = vssd.lent();
        self.store.put_vssd(&rec)?;
        if let Some(e) = self.state.write().vssds.get_mut(home) {
            e.rec.lent = rec.lent;
        }
        Ok(())
    }

    /// The harvester's settings.
    pub fn harvest_settings(&self) -> &HarvestSettings {
        self.harvester.settings()
    }

    /// One period of the harvester: its policy learns first, with no lock that
    /// I/O, NBD handshakes or API reads take; then, under the lifecycle lock,
    /// migrations finish, evictions fall due, flash goes back where homes need
    /// it, expiries are refreshed and idle flash is lent. Does nothing when
    /// `[harvest] enabled = false`. Returns the number of events it raised.
    pub fn harvest_tick(&self) -> Result<usize> {
        if !self.harvester.settings().enabled {
            return Ok(0);
        }
        // One period at a time: training (in `observe`) holds the policy's
        // lock, which lending needs under the lifecycle lock.
        let _period = self.harvest_period.lock();
        self.harvester.observe(self)?;
        let _g = self.lifecycle.lock();
        self.harvester.tick(self)
    }

    /// One period on request (`POST /v1/harvest/tick`): refuses with
    /// [`ControlError::HarvesterOff`] while the harvester is off, and reports
    /// any failure of the period as [`ControlError::HarvestTick`] (HTTP 500).
    pub fn harvest_tick_now(&self) -> Result<usize> {
        if !self.harvest_settings().enabled {
            return Err(ControlError::HarvesterOff);
        }
        self.harvest_tick().map_err(ControlError::in_harvest_tick)
    }

    /// A harvest tenant asks for flash (see [`crate::harvester::Harvester::create_volume`]).
    pub fn harvest_volume_create(&self, req: &HarvestRequest) -> Result<HarvestVolumeInfo> {
        let _g = self.lifecycle.lock();
        self.harvester
            .create_volume(self, req, &crate::harvester::TenantSource::Local)
    }

    /// A harvest tenant asks for flash through the API with a tenant token of
    /// `caller`: as [`Self::harvest_volume_create`], but a harvest tenant
    /// that is another tenant's vSSD is [`ControlError::NoSuchVssd`], the
    /// answer for one that does not exist, given at the same point.
    pub fn harvest_volume_create_as(
        &self,
        req: &HarvestRequest,
        caller: &str,
    ) -> Result<HarvestVolumeInfo> {
        let _g = self.lifecycle.lock();
        self.harvester.create_volume(
            self,
            req,
            &crate::harvester::TenantSource::LocalFor {
                caller: caller.to_string(),
            },
        )
    }

    /// A harvest request the fleet scheduler placed here: its tenant's vSSD
    /// lives on another host (the scheduler checked it), and `owner` may
    /// open the export. Not reachable through the host's own HTTP API.
    pub fn harvest_volume_create_for_fleet(
        &self,
        req: &HarvestRequest,
        owner: Option<String>,
    ) -> Result<HarvestVolumeInfo> {
        let _g = self.lifecycle.lock();
        self.harvester
            .create_volume(self, req, &crate::harvester::TenantSource::Fleet { owner })
    }

    /// The tenant is done with a harvest volume: its gSSDs go back, erased.
    pub fn harvest_volume_release(&self, name: &str) -> Result<()> {
        let _g = self.lifecycle.lock();
        self.harvester.release_volume(self, name)
    }

    /// Every harvest volume.
    pub fn harvest_volumes(&self) -> Vec<HarvestVolumeInfo> {
        self.harvester.volumes()
    }

    /// One harvest volume.
    pub fn harvest_volume(&self, name: &str) -> Result<HarvestVolumeInfo> {
        self.harvester.volume(name)
    }

    /// Every gSSD, by id.
    pub fn gssds(&self) -> Vec<GssdInfo> {
        self.harvester.gssds()
    }

    /// Harvest events after `since` (sequence number), oldest first.
    pub fn harvest_events(&self, since: u64) -> Vec<HarvestEvent> {
        self.harvester.events(since)
    }

    /// `flexssd harvest status`.
    pub fn harvest_status(&self) -> HarvestStatus {
        self.harvester.status()
    }

    /// Request counters of every harvest volume's export (for metrics).
    pub fn harvest_volume_io(&self) -> Vec<(String, blockdev::StatsSnapshot)> {
        self.harvester.volume_io()
    }
}
