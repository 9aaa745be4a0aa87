//! Getting flash back: a gSSD erased and returned home or re-pooled, live
//! migrations of a volume's data to a replacement, eviction notices and their
//! deadlines, and the host's reclaim hooks.
//!
//! Every erase and store write here runs with the harvester's map lock released:
//! a function takes what it needs out of the maps, calls the host, and puts the
//! outcome back.

use std::num::NonZeroU64;
use std::sync::Arc;

use blockdev::BlockDev;
use clock::Nanos;
use gvol::{MigrateOptions, Pacing};
use harvest::{Demand, Gssd, GssdId, ReclaimAction};

use super::api::HarvestEventKind;
use super::{secs, HarvestHost, Harvester, MigrationRt, Outgoing, ReclaimHook, SEC};
use crate::{format_size, ControlError, LostRange, Result};

impl Harvester {
    /// Erases a gSSD's blocks and gives them back: to its home vSSD's FTL, or,
    /// for unsold channels, by dropping the record (the channels are free again).
    /// The gSSD must be out of its pool already.
    pub(super) fn return_home(
        &self,
        host: &dyn HarvestHost,
        id: GssdId,
        why: &str,
    ) -> Result<Nanos> {
        let g = self
            .lock()
            .gssds
            .remove(&id)
            .ok_or_else(|| ControlError::Store(format!("no gSSD {id}")))?;
        let now = self.clock.now();
        let mut took = host.destroy_ghost(&g.name)?.saturating_sub(now);
        if let Some(home) = &g.home {
            took = took.max(host.take_back(home, &g.extents)?.saturating_sub(now));
        }
        self.emit(
            HarvestEventKind::Reclaimed,
            Some(id),
            None,
            g.home.as_deref(),
            format!(
                "gSSD {id} erased ({} ms modelled) and returned to {}: {why}",
                took / 1_000_000,
                g.home.as_deref().unwrap_or("the unsold channels")
            ),
        );
        Ok(took)
    }

    /// A released gSSD goes back to the pool: erase it so the next tenant never
    /// sees this one's data, with a fresh FTL on the same blocks.
    fn repool(&self, host: &dyn HarvestHost, g: &Gssd) -> Result<()> {
        let name = self.lock().gssds[&g.id].name.clone();
        let vssd = host.reformat_ghost(&name)?;
        if let Some(rt) = self.lock().gssds.get_mut(&g.id) {
            rt.vssd = vssd;
        }
        Ok(())
    }

    pub(super) fn carry_out_release(
        &self,
        host: &dyn HarvestHost,
        g: Gssd,
        action: ReclaimAction,
    ) -> Result<()> {
        match action {
            ReclaimAction::ReturnToPool => {
                self.repool(host, &g)?;
                self.emit(
                    HarvestEventKind::Pooled,
                    Some(g.id),
                    None,
                    None,
                    format!("gSSD {} erased and back in the pool", g.id),
                );
            }
            _ => {
                self.return_home(host, g.id, "released close to its expiry")?;
            }
        }
        Ok(())
    }

    pub(super) fn finish_migrations(&self, host: &dyn HarvestHost) -> Result<()> {
        let done: Vec<MigrationRt> = {
            let mut st = self.lock();
            let (done, running) = std::mem::take(&mut st.migrations)
                .into_iter()
                .partition::<Vec<_>, _>(|m| m.handle.outcome().is_some());
            st.migrations = running;
            done
        };
        let devices = host.devices();
        for m in done {
            match m.handle.outcome().expect("finished") {
                Ok(_) => {
                    let rec = {
                        let mut st = self.lock();
                        let rec = st.volumes.get_mut(&m.volume).map(|v| {
                            for s in &mut v.rec.segments {
                                if s.offset == m.offset && s.gssd == m.from {
                                    s.gssd = m.to;
                                    s.base = 0;
                                }
                            }
                            v.rec.clone()
                        });
                        self.refresh_gate(&st, &devices, &m.volume);
                        self.event(
                            &mut st,
                            HarvestEventKind::Migrated,
                            Some(m.from),
                            Some(&m.volume),
                            None,
                            format!(
                                "volume {} moved from gSSD {} to gSSD {}",
                                m.volume, m.from, m.to
                            ),
                        );
                        rec
                    };
                    if let Some(rec) = rec {
                        self.store.put_harvest_volume(&rec)?;
                    }
                    self.return_home(host, m.from, "after migrating its data away")?;
                }
                Err(e) => {
                    self.emit(
                        HarvestEventKind::MigrationFailed,
                        Some(m.from),
                        Some(&m.volume),
                        None,
                        format!("moving to gSSD {} failed: {e}", m.to),
                    );
                    // The replacement goes back to the pool; the volume is evicted.
                    let released = {
                        let mut st = self.lock();
                        let dev = st.gssds[&m.to].device.clone();
                        match st.volumes.get(&m.volume).map(|v| v.rec.id) {
                            Some(vid) => {
                                Some(st.pool(&dev).release(m.to, vid, self.clock.now())?)
                            }
                            None => None,
                        }
                    };
                    if let Some(r) = released {
                        self.carry_out_release(host, r.gssd, r.action)?;
                    }
                    self.evict(m.from, &m.volume)?;
                }
            }
        }
        Ok(())
    }

    fn evict(&self, id: GssdId, volume: &str) -> Result<()> {
        let deadline = self
            .clock
            .now()
            .saturating_add(self.settings.eviction_grace_s.saturating_mul(SEC));
        let mut st = self.lock();
        if let Some(g) = st.gssds.get_mut(&id) {
            g.out = Some(Outgoing::Evicting(deadline));
        }
        let home = st.gssds.get(&id).and_then(|g| g.home.clone());
        let rec = st.volumes.get_mut(volume).map(|v| {
            for s in v.rec.segments.iter_mut().filter(|s| s.gssd == id) {
                s.evict_by = Some(s.evict_by.map_or(deadline, |d| d.min(deadline)));
            }
            v.rec.evict_by = Some(v.rec.evict_by.map_or(deadline, |d| d.min(deadline)));
            v.rec.clone()
        });
        self.event(
            &mut st,
            HarvestEventKind::Evicted,
            Some(id),
            Some(volume),
            home.as_deref(),
            format!(
                "no gSSD can take volume {volume}'s data from gSSD {id}: move off by t = {} s",
                secs(deadline)
            ),
        );
        drop(st);
        if let Some(rec) = rec {
            self.store.put_harvest_volume(&rec)?;
        }
        Ok(())
    }

    pub(super) fn due_evictions(&self, host: &dyn HarvestHost) -> Result<()> {
        let now = self.clock.now();
        let due: Vec<GssdId> = self
            .lock()
            .gssds
            .iter()
            .filter(|(_, g)| matches!(g.out, Some(Outgoing::Evicting(t)) if t <= now))
            .map(|(&id, _)| id)
            .collect();
        let devices = host.devices();
        for id in due {
            // Detaching waits for the volume's requests in flight on that range,
            // so it runs with the map lock released: take the volume out, detach,
            // then put the outcome back. Flash-changing operations are serialised
            // by the host's lifecycle lock, so the volume cannot change meanwhile.
            let found = {
                let st = self.lock();
                st.volume_of_gssd(id).map(|vname| {
                    let v = &st.volumes[&vname];
                    let offsets: Vec<u64> = v
                        .rec
                        .segments
                        .iter()
                        .filter(|s| s.gssd == id)
                        .map(|s| s.offset)
                        .collect();
                    (vname, v.vol.clone(), offsets)
                })
            };
            let rec = match found {
                Some((vname, vol, offsets)) => {
                    // The data goes with the gSSD: its range fails I/O from
                    // now on, rather than reading as zeros.
                    let mut lost = Vec::new();
                    for o in offsets {
                        let (seg, _) = vol.evict(o)?;
                        lost.push(LostRange {
                            offset: seg.offset,
                            len: seg.len,
                        });
                    }
                    let mut st = self.lock();
                    let rec = st.volumes.get_mut(&vname).map(|v| {
                        v.rec.segments.retain(|s| s.gssd != id);
                        v.rec.lost.extend(lost);
                        v.rec.lost.sort_by_key(|l| l.offset);
                        // Still under notice only for the ranges still noticed.
                        v.rec.evict_by = v.rec.segments.iter().filter_map(|s| s.evict_by).min();
                        v.rec.clone()
                    });
                    self.refresh_gate(&st, &devices, &vname);
                    self.event(
                        &mut st,
                        HarvestEventKind::EvictionDone,
                        Some(id),
                        Some(&vname),
                        None,
                        format!("deadline passed: gSSD {id}'s range detached from volume {vname}"),
                    );
                    rec
                }
                None => None,
            };
            if let Some(rec) = rec {
                self.store.put_harvest_volume(&rec)?;
            }
            self.return_home(host, id, "eviction deadline passed")?;
        }
        Ok(())
    }

    /// Early reclamation of gSSD `id` (its home needs it, its channels are wanted,
    /// or it expired while in use).
    pub(super) fn reclaim_early(
        &self,
        host: &dyn HarvestHost,
        id: GssdId,
        why: &str,
    ) -> Result<()> {
        let now = self.clock.now();
        let devices = host.devices();
        // A gSSD taken for bandwidth only backs no range: its replacement
        // stays the volume's, and nothing is copied.
        let (action, volume, backs_range) = {
            let mut st = self.lock();
            let Some(rt) = st.gssds.get(&id) else {
                return Ok(());
            };
            if rt.out.is_some() {
                return Ok(());
            }
            let device = rt.device.clone();
            let Some(g) = st.pool(&device).get(id).cloned() else {
                return Ok(());
            };
            let vol = st.volumes.values().find(|v| Some(v.rec.id) == g.tenant);
            let volume = vol.map(|v| (v.rec.name.clone(), v.rec.until));
            // What the tenant uses here: its range's blocks (as the volume was
            // sized, on this gSSD's channels) and at most the bandwidth it
            // asked for. A bandwidth-only gSSD backs no range: the bandwidth.
            let used = vol.map(|v| {
                let len = v
                    .rec
                    .segments
                    .iter()
                    .find(|s| s.gssd == id)
                    .map_or(0, |s| s.len);
                let blocks = devices
                    .iter()
                    .find(|d| d.name == device)
                    .map_or(g.capacity, |d| {
                        super::blocks_for(&d.geometry, len, g.bandwidth)
                    });
                (
                    len,
                    blocks.min(g.capacity),
                    v.rec.bandwidth.min(g.bandwidth),
                )
            });
            let pool = st.pool(&device);
            let need = match (used, &volume) {
                (Some((_, blocks, bw)), Some((_, until))) => {
                    Demand::remaining(pool.config(), blocks, bw, *until, now)
                }
                _ => Demand::remaining(pool.config(), g.capacity, g.bandwidth, now, now),
            };
            let mut action = pool.early_reclaim(id, &need, now)?.action;
            // A replacement on more channels keeps more blocks for GC: if its
            // vSSD cannot hold the range after all, it is not a replacement.
            if let (ReclaimAction::Migrate { to }, Some((len, ..)), Some(t)) =
                (action, used, g.tenant)
            {
                if st.gssds.get(&to).is_none_or(|r| r.capacity_bytes < len) {
                    st.pool(&device).unassign(to, t)?;
                    action = ReclaimAction::Evict;
                }
            }
            (action, volume, used.is_some_and(|(len, ..)| len > 0))
        };
        match (action, volume) {
            (ReclaimAction::Migrate { to }, Some((vname, _))) if backs_range => {
                self.start_migration(host, &vname, id, to, why)?;
            }
            (ReclaimAction::Evict, Some((vname, _))) => {
                self.evict(id, &vname)?;
            }
            _ => {
                self.return_home(host, id, why)?;
            }
        }
        Ok(())
    }

    fn start_migration(
        &self,
        host: &dyn HarvestHost,
        vname: &str,
        from: GssdId,
        to: GssdId,
        why: &str,
    ) -> Result<()> {
        let devices = host.devices();
        let (vol, seg, to_dev) = {
            let st = self.lock();
            let to_dev: Arc<dyn BlockDev> = st.gssds[&to].vssd.clone();
            let v = &st.volumes[vname];
            let seg = v
                .rec
                .segments
                .iter()
                .find(|s| s.gssd == from)
                .cloned()
                .expect("the volume uses the gSSD");
            (v.vol.clone(), seg, to_dev)
        };
        let opts = MigrateOptions {
            chunk_bytes: self.settings.migrate_chunk_bytes,
            deadline: None,
            // `[harvest] migrate_rate`, kept on the daemon's clock; 0: no limit.
            pacing: NonZeroU64::new(self.settings.migrate_rate.0).map(|bytes_per_sec| Pacing {
                bytes_per_sec,
                clock: self.clock.clone(),
            }),
        };
        // Starting a migration takes the volume's map lock (it waits for requests
        // in flight on the range) and spawns the copier: not under ours.
        let handle = vol.migrate_with(seg.offset, to, to_dev, 0, opts)?;
        let mut st = self.lock();
        st.gssds.get_mut(&from).expect("gssd").out = Some(Outgoing::Migrating);
        st.migrations.push(MigrationRt {
            volume: vname.to_string(),
            offset: seg.offset,
            from,
            to,
            handle,
        });
        self.refresh_gate(&st, &devices, vname);
        let home = st.gssds[&from].home.clone();
        self.event(
            &mut st,
            HarvestEventKind::MigrationStarted,
            Some(from),
            Some(vname),
            home.as_deref(),
            format!(
                "{why}: moving {} of volume {vname} from gSSD {from} to gSSD {to}",
                format_size(seg.len)
            ),
        );
        Ok(())
    }

    pub(super) fn reclaim_where_needed(&self, host: &dyn HarvestHost) -> Result<()> {
        let needy: Vec<String> = host
            .homes()
            .into_iter()
            .filter(|h| h.vssd.needs_reclaim())
            .map(|h| h.name)
            .collect();
        let now = self.clock.now();
        let wanted: Vec<GssdId> = {
            let mut st = self.lock();
            let ids: Vec<(GssdId, String)> = st
                .gssds
                .iter()
                .filter(|(_, g)| g.out.is_none())
                .filter_map(|(&id, g)| g.home.clone().map(|h| (id, h)))
                .filter(|(_, h)| needy.contains(h))
                .collect();
            for (_, home) in &ids {
                st.cooling.took_back(home.clone(), now);
            }
            ids.into_iter().map(|(id, _)| id).collect()
        };
        for id in wanted {
            self.reclaim_early(host, id, "its home vSSD needs its blocks back")?;
        }
        Ok(())
    }

    /// Between periods, homes' write paths asked for their flash back
    /// (`ftl::Pressure`): migrations that are done are wound up, and early
    /// reclamation starts where a home needs it, now rather than at the next
    /// period. A home in `out` has a write waiting with no room at all:
    /// regular tenants come first, so the evictions of its gSSDs fall due now
    /// (the harvest tenant's notice is cut short). The host holds its
    /// lifecycle lock.
    pub(super) fn reclaim_pressed(&self, host: &dyn HarvestHost, out: &[String]) -> Result<()> {
        self.finish_migrations(host)?;
        self.reclaim_where_needed(host)?;
        if out.is_empty() {
            return Ok(());
        }
        let now = self.clock.now();
        let mut st = self.lock();
        let cut: Vec<(GssdId, String)> = st
            .gssds
            .iter_mut()
            .filter(|(_, g)| g.home.as_ref().is_some_and(|h| out.contains(h)))
            .filter_map(|(&id, g)| match g.out {
                Some(Outgoing::Evicting(t)) if t > now => {
                    g.out = Some(Outgoing::Evicting(now));
                    g.home.clone().map(|h| (id, h))
                }
                _ => None,
            })
            .collect();
        for (id, home) in &cut {
            let volume = st.volume_of_gssd(*id);
            self.event(
                &mut st,
                HarvestEventKind::Evicted,
                Some(*id),
                volume.as_deref(),
                Some(home),
                format!("{home} is out of room with a write waiting: gSSD {id}'s notice ends now"),
            );
        }
        drop(st);
        if cut.is_empty() {
            return Ok(());
        }
        self.due_evictions(host)
    }

    /// A regular vSSD takes the channels of these gSSDs: the unsold ones among
    /// them teach the unsold policy how long such channels stay unsold.
    fn sold(&self, ids: &[GssdId]) {
        let now = self.clock.now();
        let groups: Vec<(String, Vec<u32>)> = {
            let st = self.lock();
            ids.iter()
                .filter_map(|id| st.gssds.get(id))
                .filter(|g| g.home.is_none())
                .map(|g| (g.device.clone(), super::channels_of(&g.extents)))
                .collect()
        };
        let mut unsold = self.unsold.lock();
        for (device, channels) in groups {
            unsold.sold(now, &device, &channels);
        }
    }

    fn reclaim_now(&self, host: &dyn HarvestHost, ids: Vec<GssdId>, why: &str) -> Result<()> {
        for &id in &ids {
            self.reclaim_early(host, id, why)?;
        }
        // Wait for the migrations this started (with the map lock released).
        loop {
            let busy: Vec<gvol::MigrationHandle> = self
                .lock()
                .migrations
                .iter()
                .filter(|m| ids.contains(&m.from))
                .map(|m| m.handle.clone())
                .collect();
            if busy.is_empty() {
                break;
            }
            for h in busy {
                let _ = h.wait();
            }
            self.finish_migrations(host)?;
        }
        let st = self.lock();
        for id in ids {
            if let Some(Outgoing::Evicting(t)) = st.gssds.get(&id).and_then(|g| g.out) {
                return Err(ControlError::Reclaiming {
                    what: why.to_string(),
                    volume: st.volume_of_gssd(id).unwrap_or_default(),
                    deadline_s: secs(t),
                });
            }
        }
        Ok(())
    }
}

impl ReclaimHook for Harvester {
    fn enabled(&self) -> bool {
        self.settings.enabled
    }

    fn reclaim_unsold(&self, host: &dyn HarvestHost, device: &str, want: u32) -> Result<()> {
        let take = {
            let st = self.lock();
            let Some(pool) = st.pools.get(device) else {
                return Ok(());
            };
            let mut ids: Vec<(bool, GssdId, u32)> = st
                .gssds
                .iter()
                .filter(|(_, g)| g.home.is_none() && g.device == device)
                .map(|(&id, g)| {
                    let in_use = pool.get(id).is_none_or(|p| p.in_use());
                    let n = super::channels_of(&g.extents).len() as u32;
                    (in_use || g.out.is_some(), id, n)
                })
                .collect();
            // Free gSSDs first.
            ids.sort();
            let mut got = 0u32;
            let mut take = Vec::new();
            for (_, id, n) in ids {
                if got >= want {
                    break;
                }
                got += n;
                take.push(id);
            }
            take
        };
        self.sold(&take);
        self.reclaim_now(host, take, "a regular vSSD needs the unsold channels")
    }

    fn reclaim_ghost(&self, host: &dyn HarvestHost, ghost: &str, why: &str) -> Result<bool> {
        let id = self
            .lock()
            .gssds
            .iter()
            .find(|(_, g)| g.name == ghost)
            .map(|(&id, _)| id);
        let Some(id) = id else {
            return Ok(false);
        };
        self.sold(&[id]);
        self.reclaim_now(host, vec![id], why)?;
        Ok(true)
    }

    fn reclaim_home(&self, host: &dyn HarvestHost, home: &str) -> Result<()> {
        let ids: Vec<GssdId> = self
            .lock()
            .gssds
            .iter()
            .filter(|(_, g)| g.home.as_deref() == Some(home))
            .map(|(&id, _)| id)
            .collect();
        self.reclaim_now(host, ids, &format!("deleting {home}"))
    }

    fn volumes_of(&self, tenant: &str) -> Vec<String> {
        self.lock()
            .volumes
            .values()
            .filter(|v| v.rec.tenant == tenant)
            .map(|v| v.rec.name.clone())
            .collect()
    }

    fn is_volume(&self, name: &str) -> bool {
        self.lock().volumes.contains_key(name)
    }
}
