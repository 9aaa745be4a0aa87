//! Lending: idle homes and unsold channels become gSSDs, as the policies say,
//! and the expiries of lent flash are refreshed every `refresh_s`.

use clock::{Nanos, SEC};
use ftl::Extent;
use harvest::{Gssd, GssdId};
use tracing::warn;

use super::api::HarvestEventKind;
use super::Lendable;
use super::{GhostRt, HarvestHost, Harvester, HomeView};
use crate::store::GhostMeta;
use crate::Result;
use lend::Lender;

impl Harvester {
    /// Whether the refresh timer fires now (every `refresh_s`); asking
    /// consumes the firing.
    pub(super) fn refresh_due(&self) -> bool {
        let now = self.clock.now();
        self.lock().timer.as_mut().is_some_and(|t| t.fire(now))
    }

    /// Refreshes the expiries of pooled gSSDs (when [`Self::refresh_due`]):
    /// unassigned ones that expired go home, assigned ones that expired are
    /// reclaimed early.
    pub(super) fn refresh(&self, host: &dyn HarvestHost) -> Result<()> {
        let now = self.clock.now();
        let homes = host.homes();
        let needy: Vec<&str> = homes
            .iter()
            .filter(|h| h.vssd.needs_reclaim())
            .map(|h| h.name.as_str())
            .collect();
        let id_of = |name: &str| homes.iter().find(|h| h.name == name).map(|h| h.id);
        let devices: Vec<String> = self.lock().pools.keys().cloned().collect();
        for device in devices {
            // The policies give each gSSD's new expiry: a lent one's from its
            // home's policy (`None`: unchanged, e.g. a cold predictor), an
            // unsold one's from the unsold policy.
            let lent: Vec<(GssdId, Option<String>, Vec<u32>)> = {
                let st = self.lock();
                st.pools[&device]
                    .iter()
                    .filter_map(|g| st.gssds.get(&g.id).map(|rt| (g.id, rt)))
                    .filter(|(_, rt)| {
                        !rt.home
                            .as_ref()
                            .is_some_and(|h| needy.contains(&h.as_str()))
                    })
                    .map(|(id, rt)| (id, rt.home.clone(), super::channels_of(&rt.extents)))
                    .collect()
            };
            let cfg = *self.lock().pool(&device).config();
            let updates = {
                let mut rt = self.policy.lock();
                let mut unsold = self.unsold.lock();
                lend::expiry_updates(
                    rt.policy.as_mut(),
                    unsold.as_mut(),
                    now,
                    cfg.duration_granule(),
                    lent.iter().filter_map(|(id, home, channels)| {
                        Some((
                            *id,
                            match home {
                                Some(h) => Lender::Home(id_of(h)?),
                                None => Lender::Unsold {
                                    device: &device,
                                    channels,
                                },
                            },
                        ))
                    }),
                )
            };
            let report = self.lock().pool(&device).refresh(now, &updates);
            for g in report.dropped {
                self.emit(
                    HarvestEventKind::Expired,
                    Some(g.id),
                    None,
                    None,
                    format!("unassigned gSSD {} expired", g.id),
                );
                self.return_home(host, g.id, "expired")?;
            }
            for id in report.expired_in_use {
                self.reclaim_early(host, id, "it expired while in use")?;
            }
        }
        Ok(())
    }

    /// Creates the hidden vSSD of a gSSD on `extents` and puts the gSSD in its
    /// device's pool.
    fn create_ghost(
        &self,
        host: &dyn HarvestHost,
        device: &str,
        extents: Vec<Extent>,
        home: Option<&HomeView>,
        capacity_blocks: u64,
        lasts: Nanos,
    ) -> Result<GssdId> {
        let now = self.clock.now();
        let devices = host.devices();
        let geo = devices
            .iter()
            .find(|d| d.name == device)
            .map(|d| d.geometry)
            .ok_or_else(|| crate::ControlError::NoSuchDevice(device.into()))?;
        let cfg = self.harvest_cfg(&geo);
        let gssd = self.store.next_serial()?;
        let bandwidth = super::channels_of(&extents).len() as u32;
        let probe = Gssd::new(
            &cfg,
            gssd,
            home.map(|h| h.id),
            capacity_blocks,
            bandwidth,
            now,
            lasts,
        )?;
        let meta = GhostMeta {
            gssd,
            home: home.map(|h| h.name.clone()),
            bandwidth,
            capacity_blocks,
            expiry: probe.expiry,
        };
        let ghost = host.create_ghost(device, extents.clone(), meta.clone())?;
        let g = Gssd {
            ghost: Some(ghost.id),
            ..probe
        };
        let mut st = self.lock();
        st.pool(device).insert(g)?;
        st.gssds.insert(
            gssd,
            GhostRt {
                name: ghost.name,
                device: device.to_string(),
                home: home.map(|h| h.name.clone()),
                extents,
                capacity_bytes: ghost.capacity_bytes,
                meta,
                vssd: ghost.vssd,
                out: None,
            },
        );
        Ok(gssd)
    }

    /// Idle homes lend what the policy offers (if that makes at least one
    /// chunk), and unsold channels become gSSDs of up to `unsold_group`
    /// channels.
    pub(super) fn lend_idle(&self, host: &dyn HarvestHost) -> Result<()> {
        let now = self.clock.now();
        let granule = self.settings.granule_s.saturating_mul(SEC);
        let (lending, cooling) = {
            let mut st = self.lock();
            st.cooling.expire(now, granule);
            let lending: Vec<String> = st.gssds.values().filter_map(|g| g.home.clone()).collect();
            (lending, st.cooling.homes().cloned().collect::<Vec<_>>())
        };
        let devices = host.devices();
        let homes: Vec<HomeView> = host
            .homes()
            .into_iter()
            .filter(|h| !lending.contains(&h.name) && !cooling.contains(&h.name))
            .filter(|h| !h.vssd.needs_reclaim())
            .collect();
        for home in homes {
            let Some(geo) = devices
                .iter()
                .find(|d| d.name == home.device)
                .map(|d| d.geometry)
            else {
                continue;
            };
            let cfg = self.harvest_cfg(&geo);
            let lendable = home.vssd.lendable();
            let units = u64::from(geo.dies_per_channel) * u64::from(geo.planes_per_die);
            let what = Lendable {
                home: home.id,
                channels: home.channels().len() as u32,
                blocks: home
                    .extents
                    .iter()
                    .map(|x| u64::from(x.blocks))
                    .sum::<u64>()
                    * units,
                extent_blocks: home.extents.iter().map(|x| x.blocks).max().unwrap_or(0),
                units,
                chunk_blocks: cfg.chunk_blocks,
                per_channel: &lendable,
            };
            let Some(plan) =
                lend::plan_lend(self.policy.lock().policy.as_mut(), now, &what, granule)
            else {
                continue;
            };
            let chans: Vec<u32> = lendable[..plan.channels as usize]
                .iter()
                .map(|&(c, _)| c)
                .collect();
            let (b, lasts) = (plan.per_unit, plan.lasts);
            let extents = host.lend(&home.name, &chans, b as u32)?;
            match self.create_ghost(
                host,
                &home.device,
                extents.clone(),
                Some(&home),
                plan.capacity,
                lasts,
            ) {
                Ok(id) => self.emit(
                    HarvestEventKind::Created,
                    Some(id),
                    None,
                    Some(&home.name),
                    format!(
                        "gSSD {id}: {} blocks on channels {} lent by {}",
                        plan.capacity,
                        crate::channel_list(&chans),
                        home.name
                    ),
                ),
                Err(err) => {
                    warn!(vssd = %home.name, error = %err, "could not create a gSSD on lent blocks; taking them back");
                    host.take_back(&home.name, &extents)?;
                }
            }
        }
        if self.settings.unsold {
            for d in &devices {
                let cfg = self.harvest_cfg(&d.geometry);
                for group in d.free_channels.chunks(self.settings.unsold_group as usize) {
                    let extents: Vec<Extent> = group
                        .iter()
                        .map(|&c| Extent::whole_channel(&d.geometry, c))
                        .collect();
                    let Some((cap, lasts)) = lend::plan_unsold(
                        self.unsold.lock().as_mut(),
                        now,
                        &d.name,
                        group,
                        u64::from(d.geometry.blocks_per_channel()),
                        cfg.chunk_blocks,
                    ) else {
                        continue;
                    };
                    let id = self.create_ghost(host, &d.name, extents, None, cap, lasts)?;
                    self.emit(
                        HarvestEventKind::Created,
                        Some(id),
                        None,
                        None,
                        format!(
                            "gSSD {id}: unsold channels {} of {}",
                            crate::channel_list(group),
                            d.name
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}
