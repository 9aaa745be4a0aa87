//! Harvest volumes: a harvest tenant's request matched best-fit over the pools
//! (under-harvesting attaches several gSSDs), its export, its release, and what
//! the API shows of volumes, gSSDs, events and the harvester's status.

use std::collections::BTreeMap;
use std::sync::Arc;

use blockdev::{BlockDev, Gate, StatsSnapshot};
use clock::SEC;
use gvol::GhostVolume;
use harvest::{Demand, GssdId};

use super::api::{
    GssdInfo, HarvestEvent, HarvestEventKind, HarvestRequest, HarvestStatus, HarvestVolumeInfo,
    MigrationInfo,
};
use super::{blocks_for, priority, secs, HarvestHost, HarvestState, Harvester, Outgoing, VolumeRt};
use crate::config::valid_name;
use crate::exports::{ExportKind, Publish};
use crate::store::{HarvestVolumeRecord, SegmentRecord};
use crate::{format_size, ControlError, Mode, Result};

/// Who vouches for a harvest request's tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantSource {
    /// This host: the tenant is a local active vSSD with role `harvest`, and
    /// the volume's owner is that vSSD's owner.
    Local,
    /// This host, on behalf of the API tenant `caller`: as [`Self::Local`],
    /// but a harvest tenant whose vSSD is not `caller`'s is
    /// [`ControlError::NoSuchVssd`], exactly as one that does not exist, so
    /// that a tenant cannot probe other tenants' vSSD names.
    LocalFor {
        /// The API caller's tenant.
        caller: String,
    },
    /// The fleet scheduler, which checked the tenant in etcd (its vSSD lives
    /// on another host); `owner` is the NBD identity allowed to open it.
    Fleet {
        /// Owning tenant (TLS identity), if any.
        owner: Option<String>,
    },
}

impl Harvester {
    pub(super) fn volume_rt(
        &self,
        host: &dyn HarvestHost,
        rec: HarvestVolumeRecord,
        vol: Arc<GhostVolume>,
    ) -> VolumeRt {
        let w = host.exports().wrap(vol.clone());
        let gate = (self.mode == Mode::Emulation).then(|| {
            Arc::new(priority::PriorityGate::new(
                self.clock.clone(),
                self.settings.priority_slack_us.saturating_mul(1000),
                64 << 10,
            ))
        });
        VolumeRt {
            rec,
            vol,
            io: w.io,
            export: w.export,
            gate,
        }
    }

    /// Publishes a volume's export in the host's registry.
    pub(super) fn publish(&self, host: &dyn HarvestHost, name: &str) {
        let st = self.lock();
        let Some(v) = st.volumes.get(name) else {
            return;
        };
        let owner = v.rec.owner.clone();
        host.exports().add(
            name,
            Publish {
                kind: ExportKind::HarvestVolume,
                order: v.rec.id,
                description: format!(
                    "flexssd harvest volume of {}, {} on {} gSSD(s)",
                    v.rec.tenant,
                    format_size(v.rec.size_bytes),
                    v.rec.segments.len()
                ),
                dev: v.export.clone(),
                gate: v.gate.clone().map(|g| g as Arc<dyn Gate>),
                owner,
            },
        );
    }

    /// A harvest tenant asks for flash: gSSDs are matched best-fit and, if no one
    /// gSSD covers the demand, several are attached until it is met
    /// (under-harvesting); if even that fails, nothing is taken and the error is
    /// BlockFlex's exception. `tenant` says who vouches for the harvest tenant:
    /// this host (it must be a local vSSD with role `harvest`), or the fleet
    /// scheduler (the tenant's vSSD lives on another host). The host holds its
    /// lifecycle lock.
    pub fn create_volume(
        &self,
        host: &dyn HarvestHost,
        req: &HarvestRequest,
        tenant: &TenantSource,
    ) -> Result<HarvestVolumeInfo> {
        if !self.settings.enabled {
            return Err(ControlError::HarvesterOff);
        }
        let now = self.clock.now();
        if !valid_name(&req.name) {
            return Err(ControlError::InvalidName(req.name.clone()));
        }
        if req.capacity.0 == 0 || req.bandwidth == 0 {
            return Err(ControlError::Invalid(
                "a harvest volume needs a capacity above 0 bytes and at least 1 channel".into(),
            ));
        }
        if host.name_taken(&req.name) || self.lock().volumes.contains_key(&req.name) {
            return Err(ControlError::Duplicate(req.name.clone()));
        }
        let local = match tenant {
            TenantSource::Local => true,
            TenantSource::LocalFor { caller } => {
                if host.tenant_of(&req.tenant).as_deref() != Some(caller.as_str()) {
                    return Err(ControlError::NoSuchVssd(req.tenant.clone()));
                }
                true
            }
            TenantSource::Fleet { .. } => false,
        };
        if local && !host.is_harvest_tenant(&req.tenant)? {
            return Err(ControlError::NotHarvestTenant(req.tenant.clone()));
        }
        let granule = self.settings.granule_s.saturating_mul(SEC);
        let duration = req.duration_s.map_or(granule, |s| s.saturating_mul(SEC));
        if duration == 0 {
            return Err(ControlError::Invalid("duration_s must be above 0".into()));
        }
        let size = req.capacity.0.div_ceil(4096) * 4096;
        let vid = self.store.next_serial()?;
        let devices = host.devices();
        let mut st = self.lock();
        // Pick gSSDs: one that covers everything if any, else the biggest first
        // (each pool's step is `GssdPool::split_pick`, the step the fleet
        // simulator's `GssdPool::harvest_split` takes too; across pools, the
        // smallest covering pick, else the biggest).
        let mut picked: Vec<(String, GssdId, u64)> = Vec::new(); // (device, id, bytes)
        let mut left = size;
        let mut bw_left = req.bandwidth;
        while left > 0 || bw_left > 0 {
            let mut best: Option<(String, GssdId, u64)> = None;
            for (device, pool) in &st.pools {
                let Some(d) = devices.iter().find(|d| &d.name == device) else {
                    continue;
                };
                let want = Demand {
                    capacity: blocks_for(&d.geometry, left.max(1), bw_left.max(1)),
                    bandwidth: bw_left.max(1),
                    duration,
                };
                if let Some(id) = pool.split_pick(&want, now)?.map(|g| g.id) {
                    let bytes = st.gssds[&id].capacity_bytes;
                    if best
                        .as_ref()
                        .is_none_or(|b| bytes < b.2 && bytes >= left || b.2 < left && bytes > b.2)
                    {
                        best = Some((device.clone(), id, bytes));
                    }
                }
            }
            let Some((device, id, bytes)) = best else {
                // Nothing half-taken: the tenant never touched these.
                for (device, id, _) in &picked {
                    st.pool(device).unassign(*id, vid)?;
                }
                let why = format!(
                    "no gSSD left for the remaining {} on {} channel(s) for {} s",
                    format_size(left),
                    bw_left,
                    secs(duration)
                );
                self.event(
                    &mut st,
                    HarvestEventKind::Exception,
                    None,
                    Some(&req.name),
                    None,
                    format!("harvest tenant {}: {why}", req.tenant),
                );
                return Err(ControlError::UnderHarvest {
                    wanted: format!(
                        "{} on {} channel(s) for {} s",
                        format_size(size),
                        req.bandwidth,
                        secs(duration)
                    ),
                    why,
                });
            };
            let g = st.pool(&device).assign(id, vid)?;
            bw_left = bw_left.saturating_sub(g.bandwidth);
            left = left.saturating_sub(bytes);
            picked.push((device, id, bytes));
        }
        let vol = Arc::new(GhostVolume::new(req.name.clone(), size));
        let mut segments = Vec::new();
        let mut off = 0;
        for (_, id, bytes) in &picked {
            let len = (*bytes).min(size - off);
            if len == 0 {
                // Taken for bandwidth only: it backs no range, but the pool keeps
                // it assigned to this volume (release finds it there).
                continue;
            }
            let dev: Arc<dyn BlockDev> = st.gssds[id].vssd.clone();
            vol.attach(off, len, *id, dev, 0)?;
            segments.push(SegmentRecord {
                offset: off,
                len,
                gssd: *id,
                base: 0,
                evict_by: None,
            });
            off += len;
        }
        drop(st);
        let rec = HarvestVolumeRecord {
            name: req.name.clone(),
            id: vid,
            tenant: req.tenant.clone(),
            size_bytes: size,
            bandwidth: req.bandwidth,
            until: now.saturating_add(duration),
            segments,
            evict_by: None,
            lost: Vec::new(),
            owner: match tenant {
                TenantSource::Local | TenantSource::LocalFor { .. } => host.tenant_of(&req.tenant),
                TenantSource::Fleet { owner } => owner.clone(),
            },
        };
        if let Err(e) = self.store.put_harvest_volume(&rec) {
            let mut st = self.lock();
            for (device, id, _) in &picked {
                st.pool(device).unassign(*id, vid)?;
            }
            return Err(e);
        }
        let rt = self.volume_rt(host, rec, vol);
        let mut st = self.lock();
        let ids: Vec<String> = picked.iter().map(|p| p.1.to_string()).collect();
        self.event(
            &mut st,
            HarvestEventKind::Harvested,
            picked.first().map(|p| p.1),
            Some(&req.name),
            None,
            format!(
                "harvest tenant {} got {} on gSSD(s) {}",
                req.tenant,
                format_size(size),
                ids.join(",")
            ),
        );
        let info = Self::volume_info(&st, &rt);
        st.volumes.insert(req.name.clone(), rt);
        self.refresh_gate(&st, &devices, &req.name);
        drop(st);
        self.publish(host, &req.name);
        Ok(info)
    }

    /// The tenant is done with a harvest volume (job end): each gSSD goes back to
    /// the pool or home (erased either way), and the export disappears. The host
    /// holds its lifecycle lock.
    pub fn release_volume(&self, host: &dyn HarvestHost, name: &str) -> Result<()> {
        let now = self.clock.now();
        let (v, mine) = {
            let mut st = self.lock();
            let v = st
                .volumes
                .remove(name)
                .ok_or_else(|| ControlError::NoSuchHarvestVolume(name.into()))?;
            let (mine, rest) = std::mem::take(&mut st.migrations)
                .into_iter()
                .partition::<Vec<_>, _>(|m| m.volume == name);
            st.migrations = rest;
            (v, mine)
        };
        host.exports().remove(name);
        // Stop migrations of this volume first (outside the lock: waiting for a
        // copy to stop is I/O); the replacement goes back too.
        let mut ids: Vec<GssdId> = v.rec.segments.iter().map(|s| s.gssd).collect();
        for m in mine {
            m.handle.cancel();
            let _ = m.handle.wait();
            ids.push(m.to);
        }
        {
            // gSSDs assigned for bandwidth only are assigned without a segment.
            let st = self.lock();
            for pool in st.pools.values() {
                for g in pool.assigned_to(v.rec.id) {
                    if !ids.contains(&g.id) {
                        ids.push(g.id);
                    }
                }
            }
        }
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let out = self.lock().gssds.get(&id).and_then(|g| g.out);
            if out.is_some() {
                // Already out of the pool (being reclaimed): straight home.
                self.return_home(host, id, "its volume was released")?;
                continue;
            }
            let r = {
                let mut st = self.lock();
                let device = st.gssds[&id].device.clone();
                st.pool(&device).release(id, v.rec.id, now)?
            };
            self.carry_out_release(host, r.gssd, r.action)?;
        }
        self.store.remove_harvest_volume(name)?;
        self.emit(
            HarvestEventKind::Released,
            None,
            Some(name),
            None,
            format!("harvest tenant {} released volume {name}", v.rec.tenant),
        );
        Ok(())
    }

    // ---- views ----------------------------------------------------------------------

    fn volume_info(st: &HarvestState, v: &VolumeRt) -> HarvestVolumeInfo {
        let migrations: Vec<MigrationInfo> = st
            .migrations
            .iter()
            .filter(|m| m.volume == v.rec.name)
            .map(|m| {
                let p = m.handle.progress();
                MigrationInfo {
                    offset: m.offset,
                    from: m.from,
                    to: m.to,
                    copied: p.copied_bytes,
                    total: p.total_bytes,
                }
            })
            .collect();
        HarvestVolumeInfo {
            name: v.rec.name.clone(),
            tenant: v.rec.tenant.clone(),
            size_bytes: v.rec.size_bytes,
            bandwidth: v.rec.bandwidth,
            until_s: secs(v.rec.until),
            segments: v.rec.segments.clone(),
            state: if v.rec.evict_by.is_some() {
                "evicting".into()
            } else if !v.rec.lost.is_empty() {
                "degraded".into()
            } else if !migrations.is_empty() {
                "migrating".into()
            } else {
                "active".into()
            },
            evict_by_s: v.rec.evict_by.map(secs),
            migrations,
            lost: v.rec.lost.clone(),
            io: v.io.snapshot(),
        }
    }

    /// Every harvest volume.
    pub fn volumes(&self) -> Vec<HarvestVolumeInfo> {
        let st = self.lock();
        st.volumes
            .values()
            .map(|v| Self::volume_info(&st, v))
            .collect()
    }

    /// One harvest volume.
    pub fn volume(&self, name: &str) -> Result<HarvestVolumeInfo> {
        let st = self.lock();
        let v = st
            .volumes
            .get(name)
            .ok_or_else(|| ControlError::NoSuchHarvestVolume(name.into()))?;
        Ok(Self::volume_info(&st, v))
    }

    /// Every gSSD, by id.
    pub fn gssds(&self) -> Vec<GssdInfo> {
        let st = self.lock();
        let mut out = Vec::new();
        for (&id, rt) in &st.gssds {
            let pooled = st.pools.get(&rt.device).and_then(|p| p.get(id));
            let volume = st.volumes.values().find(|v| {
                v.rec.segments.iter().any(|s| s.gssd == id)
                    || pooled.and_then(|g| g.tenant) == Some(v.rec.id)
            });
            out.push(GssdInfo {
                id,
                vssd: rt.name.clone(),
                device: rt.device.clone(),
                channels: super::channels_of(&rt.extents),
                bandwidth: rt.meta.bandwidth,
                capacity_blocks: rt.meta.capacity_blocks,
                capacity_bytes: rt.capacity_bytes,
                expiry_s: secs(pooled.map_or(rt.meta.expiry, |g| g.expiry)),
                in_use: volume.is_some(),
                volume: volume.map(|v| v.rec.name.clone()),
                tenant: volume.map(|v| v.rec.tenant.clone()),
                home: rt.home.clone(),
                state: match rt.out {
                    Some(Outgoing::Migrating) => "migrating-out".into(),
                    Some(Outgoing::Evicting(_)) => "evicting".into(),
                    None if volume.is_some() => "in-use".into(),
                    None => "pool".into(),
                },
            });
        }
        out
    }

    /// Events after `since` (sequence number), oldest first.
    pub fn events(&self, since: u64) -> Vec<HarvestEvent> {
        self.lock()
            .events
            .iter()
            .filter(|e| e.seq > since)
            .cloned()
            .collect()
    }

    /// `flexssd harvest status`.
    pub fn status(&self) -> HarvestStatus {
        let st = self.lock();
        let mut lent = 0u64;
        let mut unsold = 0u32;
        for rt in st.gssds.values() {
            match &rt.home {
                Some(_) => lent += rt.meta.capacity_blocks,
                None => unsold += super::channels_of(&rt.extents).len() as u32,
            }
        }
        let in_use = st
            .pools
            .values()
            .flat_map(|p| p.iter())
            .filter(|g| g.in_use())
            .count();
        HarvestStatus {
            enabled: self.settings.enabled,
            settings: self.settings.clone(),
            chunk_blocks: st.chunks.clone(),
            gssds: st.gssds.len(),
            gssds_in_use: in_use,
            lent_blocks: lent,
            unsold_channels: unsold,
            volumes: st.volumes.len(),
            migrations: st.migrations.len(),
            evicting: st
                .volumes
                .values()
                .filter(|v| v.rec.evict_by.is_some())
                .count(),
            predictions: st.predictions.clone(),
            demand: st.demand.clone(),
            events: HarvestEventKind::ALL
                .iter()
                .map(|k| (k.name().to_string(), st.counts.get(k).copied().unwrap_or(0)))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    /// Request counters of every harvest volume's export (for metrics).
    pub fn volume_io(&self) -> Vec<(String, StatsSnapshot)> {
        self.lock()
            .volumes
            .values()
            .map(|v| (v.rec.name.clone(), v.io.snapshot()))
            .collect()
    }
}
