//! Rebuilding the harvester after a start: pools, gSSDs and harvest volumes from
//! the store, and lent ranges that no gSSD holds given back.

use std::sync::Arc;

use blockdev::BlockDev;
use flash::Backend;
use ftl::Extent;
use gvol::GhostVolume;
use harvest::{Gssd, GssdPool, RefreshTimer};
use tracing::warn;

use super::{GhostRt, HarvestHost, Harvester, Outgoing};
use crate::store::TenantKind;
use crate::{ControlError, Result};

impl Harvester {
    /// Rebuilds the pools, gSSDs and harvest volumes from the store after the
    /// host reopened its vSSDs; gives back lent ranges no gSSD holds (a crash
    /// between lending and creating the gSSD, or between erasing it and
    /// recording that).
    pub fn open(&self, host: &dyn HarvestHost) -> Result<()> {
        let devices = host.devices();
        {
            let mut st = self.lock();
            for d in &devices {
                let cfg = self.harvest_cfg(&d.geometry);
                st.chunks.insert(d.name.clone(), cfg.chunk_blocks);
                st.pools.insert(d.name.clone(), GssdPool::new(cfg)?);
            }
        }
        let ghosts = host.ghosts();
        let meta = |rec: &crate::VssdRecord| match &rec.kind {
            TenantKind::Ghost(m) => Some(m.clone()),
            _ => None,
        };
        // Lent ranges without a gSSD go home.
        let homes = host.homes();
        for h in &homes {
            let held: Vec<Extent> = ghosts
                .iter()
                .filter(|(g, _)| meta(g).and_then(|m| m.home).as_deref() == Some(h.name.as_str()))
                .flat_map(|(g, _)| g.extents.clone())
                .collect();
            let orphans: Vec<Extent> = h
                .vssd
                .lent()
                .into_iter()
                .filter(|x| !held.contains(x))
                .collect();
            if !orphans.is_empty() {
                warn!(vssd = %h.name, ?orphans, "lent blocks with no gSSD: taking them back");
                host.take_back(&h.name, &orphans)?;
            }
        }
        let mut st = self.lock();
        // gSSDs into their pools (unassigned for now).
        for (g, vssd) in &ghosts {
            let m = meta(g).expect("a ghost record");
            let home_id = m
                .home
                .as_ref()
                .and_then(|n| homes.iter().find(|h| &h.name == n))
                .map(|h| h.id);
            let gs = Gssd {
                id: m.gssd,
                bandwidth: m.bandwidth,
                capacity: m.capacity_blocks,
                expiry: m.expiry,
                tenant: None,
                home: home_id,
                ghost: Some(u64::from(g.id)),
            };
            st.pools
                .get_mut(&g.device)
                .ok_or_else(|| ControlError::Store(format!("gSSD {} on unknown device", g.name)))?
                .insert(gs)?;
            st.gssds.insert(
                m.gssd,
                GhostRt {
                    name: g.name.clone(),
                    device: g.device.clone(),
                    home: m.home.clone(),
                    extents: g.extents.clone(),
                    capacity_bytes: g.capacity_bytes,
                    meta: m,
                    vssd: vssd.clone(),
                    out: None,
                },
            );
        }
        // Volumes: attach their gSSDs again, or drop them if their flash is gone.
        for rec in self.store.harvest_volumes()? {
            let gone = rec
                .segments
                .iter()
                .find(|s| !st.gssds.contains_key(&s.gssd));
            let volatile = rec.segments.iter().any(|s| {
                st.gssds.get(&s.gssd).is_some_and(|g| {
                    devices
                        .iter()
                        .any(|d| d.name == g.device && d.backend == Backend::Memory)
                })
            });
            if let Some(s) = gone.filter(|_| !volatile) {
                return Err(ControlError::Store(format!(
                    "harvest volume {} is recorded on gSSD {}, which is not recorded",
                    rec.name, s.gssd
                )));
            }
            if volatile || gone.is_some() {
                warn!(volume = %rec.name, "harvest volume was on a memory device: dropped");
                self.store.remove_harvest_volume(&rec.name)?;
                continue;
            }
            let vol = Arc::new(GhostVolume::new(rec.name.clone(), rec.size_bytes));
            for l in &rec.lost {
                vol.mark_lost(l.offset, l.len)?;
            }
            // Records written before notices were kept per range put the whole
            // volume under its notice.
            let per_range = rec.segments.iter().any(|s| s.evict_by.is_some());
            for s in &rec.segments {
                let g = &st.gssds[&s.gssd];
                let dev: Arc<dyn BlockDev> = g.vssd.clone();
                vol.attach(s.offset, s.len, s.gssd, dev, s.base)?;
                let device = g.device.clone();
                st.pool(&device).assign(s.gssd, rec.id)?;
                let notice = if per_range { s.evict_by } else { rec.evict_by };
                if let Some(t) = notice {
                    // Still under notice: out of the pool again, deadline kept.
                    st.pool(&device).remove(s.gssd).ok();
                    st.gssds.get_mut(&s.gssd).expect("gssd").out = Some(Outgoing::Evicting(t));
                }
            }
            let name = rec.name.clone();
            let rt = self.volume_rt(host, rec, vol);
            st.volumes.insert(name.clone(), rt);
            self.refresh_gate(&st, &devices, &name);
        }
        st.timer = Some(RefreshTimer::new(
            self.clock.now(),
            self.settings.refresh_s.saturating_mul(super::SEC),
        ));
        let names: Vec<String> = st.volumes.keys().cloned().collect();
        drop(st);
        for name in names {
            self.publish(host, &name);
        }
        Ok(())
    }
}
