//! BlockFlex storage harvesting in the host manager (OSDI'22 §4.3, §4.5).
//!
//! The decisions (which gSSD fits a demand, when a released gSSD goes back to the
//! pool or home, what early reclamation does) live in the I/O-free `harvest`
//! crate, shared with the fleet simulator. This module carries them out on real
//! flash:
//!
//! * **gSSDs are vSSDs.** A gSSD is an ordinary vSSD record of kind
//!   [`TenantKind::Ghost`] with its own FTL and owner id, placed either on a
//!   regular vSSD's *lent* blocks (the top of its extent on each channel, which its
//!   FTL has emptied and no longer uses: `ftl::Vssd::lend`) or on whole unsold
//!   channels. So the home and the gSSD never share a block, the lifecycle's
//!   crash ordering (creating → active → deleting, erase before the record goes)
//!   covers gSSDs too, and a gSSD's blocks are always erased before they change
//!   hands. gSSDs are not exported on their own.
//! * **Harvest volumes** are what harvest tenants use: one NBD export whose LBA
//!   space is backed by one or more gSSDs (Figure 12), through
//!   [`gvol::GhostVolume`] — LBA → (gSSD, gLBA) → physical page. One volume per
//!   request, fixed size, because an NBD export cannot change size under a
//!   connected client: a tenant that wants to grow asks for another volume and adds
//!   it to its file system (`btrfs device add`), and gives one back the same way.
//! * **Early reclamation** (a home's FTL says it needs its blocks back, a regular
//!   vSSD needs harvested unsold channels, or an assigned gSSD expires): the pool
//!   picks a replacement and the volume migrates the data online, block by block,
//!   while the tenant keeps running; then the mapping switches and the old blocks
//!   are erased and returned. With no replacement, the volume gets an eviction
//!   notice (an event and its `evict_by` state) and `eviction_grace_s` to move
//!   off, after which the range is detached and reads and writes to it fail.
//! * **Time** is the manager's injected clock; the daemon calls
//!   [`HostManager::harvest_tick`] every `tick_ms`, tests call it directly.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use blockdev::{BlockDev, IoStats, Layered, StatsLayer, StatsSnapshot};
use clock::{Nanos, SEC};
use flash::Backend;
use ftl::{Extent, Vssd};
use gvol::{GhostVolume, MigrateOptions, MigrationHandle};
use harvest::{Demand, Gssd, GssdId, GssdPool, HarvestConfig, ReclaimAction, RefreshTimer};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::{channels_of, HostManager, State};
use crate::config::{valid_name, HarvestSettings, LendPolicy};
use crate::store::{
    GhostMeta, HarvestVolumeRecord, SegmentRecord, TenantKind, VssdRecord, VssdState,
};
use crate::{format_size, ByteSize, ControlError, Mode, Result};

/// Events kept in memory for `GET /v1/events` (older ones are dropped; every event
/// is also logged through `tracing`).
const EVENT_LOG: usize = 4096;

/// What happened, for the event log and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HarvestEventKind {
    /// A gSSD was created from a vSSD's free blocks or from unsold channels.
    Created,
    /// A harvest volume got gSSDs.
    Harvested,
    /// A harvest tenant gave a volume back (job end).
    Released,
    /// A released gSSD was erased and went back to the pool.
    Pooled,
    /// An unassigned gSSD expired and went home.
    Expired,
    /// A gSSD's blocks were erased and given back to its home (or unsold again).
    Reclaimed,
    /// Early reclamation started moving a volume's data to another gSSD.
    MigrationStarted,
    /// A migration finished: the volume now uses the new gSSD.
    Migrated,
    /// A migration failed; the volume keeps the old gSSD and is evicted.
    MigrationFailed,
    /// No gSSD could take the data: the volume must move off by a deadline.
    Evicted,
    /// An eviction deadline passed: the range was detached from the volume.
    EvictionDone,
    /// A harvest request that no gSSD could cover (under-harvesting).
    Exception,
}

impl HarvestEventKind {
    /// Every kind, for metrics.
    pub const ALL: [HarvestEventKind; 12] = [
        Self::Created,
        Self::Harvested,
        Self::Released,
        Self::Pooled,
        Self::Expired,
        Self::Reclaimed,
        Self::MigrationStarted,
        Self::Migrated,
        Self::MigrationFailed,
        Self::Evicted,
        Self::EvictionDone,
        Self::Exception,
    ];

    /// Its name in the API and the metrics (`migration-started`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Harvested => "harvested",
            Self::Released => "released",
            Self::Pooled => "pooled",
            Self::Expired => "expired",
            Self::Reclaimed => "reclaimed",
            Self::MigrationStarted => "migration-started",
            Self::Migrated => "migrated",
            Self::MigrationFailed => "migration-failed",
            Self::Evicted => "evicted",
            Self::EvictionDone => "eviction-done",
            Self::Exception => "exception",
        }
    }
}

/// One entry of the harvest event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarvestEvent {
    /// Sequence number, from 1, never reused while the daemon runs.
    pub seq: u64,
    /// When, ns on the daemon's clock.
    pub at_ns: u64,
    /// What.
    pub kind: HarvestEventKind,
    /// The gSSD concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gssd: Option<u64>,
    /// The harvest volume concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// The home vSSD concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// Human detail.
    pub detail: String,
}

/// What `flexssd gssd list` shows about a gSSD (Figure 10's fields and where its
/// flash is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GssdInfo {
    /// gSSD id.
    pub id: u64,
    /// Its (hidden) vSSD.
    pub vssd: String,
    /// Device.
    pub device: String,
    /// Channels (its bandwidth).
    pub channels: Vec<u32>,
    /// Bandwidth in channels.
    pub bandwidth: u32,
    /// Capacity in flash blocks.
    pub capacity_blocks: u64,
    /// Usable bytes (after the FTL's over-provisioning).
    pub capacity_bytes: u64,
    /// Predicted expiry, seconds on the daemon's clock.
    pub expiry_s: u64,
    /// Assigned to a harvest volume.
    pub in_use: bool,
    /// The harvest volume using it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// The harvest tenant of that volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The regular vSSD lending it; `None`: unsold channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// `pool`, `in-use`, `migrating-out`, `evicting`.
    pub state: String,
}

/// A harvest volume's live migration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrationInfo {
    /// Volume offset of the range being moved.
    pub offset: u64,
    /// From this gSSD.
    pub from: u64,
    /// To this one.
    pub to: u64,
    /// Bytes copied so far.
    pub copied: u64,
    /// Bytes to copy.
    pub total: u64,
}

/// What the API shows about a harvest volume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarvestVolumeInfo {
    /// Volume (NBD export) name.
    pub name: String,
    /// The harvest tenant.
    pub tenant: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Bandwidth asked for, channels.
    pub bandwidth: u32,
    /// Needed until, seconds on the daemon's clock.
    pub until_s: u64,
    /// Its ranges and gSSDs.
    pub segments: Vec<SegmentRecord>,
    /// `active`, `migrating`, or `evicting` (move off by `evict_by_s`).
    pub state: String,
    /// Eviction deadline, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_by_s: Option<u64>,
    /// Migrations in progress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub migrations: Vec<MigrationInfo>,
    /// Requests as its NBD clients issued them.
    pub io: StatsSnapshot,
}

/// `flexssd harvest status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarvestStatus {
    /// Whether the harvester runs.
    pub enabled: bool,
    /// Its settings.
    pub settings: HarvestSettings,
    /// Capacity granule per device, blocks.
    pub chunk_blocks: BTreeMap<String, u64>,
    /// gSSDs in total.
    pub gssds: usize,
    /// gSSDs assigned to volumes.
    pub gssds_in_use: usize,
    /// Blocks lent by regular vSSDs.
    pub lent_blocks: u64,
    /// Unsold channels held by gSSDs.
    pub unsold_channels: u32,
    /// Harvest volumes.
    pub volumes: usize,
    /// Migrations in progress.
    pub migrations: usize,
    /// Volumes under an eviction notice.
    pub evicting: usize,
    /// Events so far, by kind.
    pub events: BTreeMap<String, u64>,
    /// What each regular vSSD's predictors say now (policy `predicted`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub predictions: BTreeMap<String, PredictionInfo>,
}

/// A regular vSSD's current prediction, as the harvester uses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionInfo {
    /// Enough history to predict.
    pub warm: bool,
    /// Predicted bandwidth use, in sixteenths (levels) of the vSSD's.
    pub bandwidth_level: u32,
    /// Predicted capacity use, in levels.
    pub capacity_level: u32,
    /// Levels predicted spare (bandwidth, capacity), after under-provisioning.
    pub spare_levels: (u32, u32),
    /// How long the spare resources are predicted to last, seconds.
    pub duration_s: u64,
}

/// `POST /v1/harvest/volumes`: a harvest tenant asks for flash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarvestRequest {
    /// Volume (NBD export) name.
    pub name: String,
    /// The harvest tenant: an active vSSD created with `role = "harvest"`.
    pub tenant: String,
    /// Usable size wanted.
    pub capacity: ByteSize,
    /// Bandwidth wanted, in channels. Default 1.
    #[serde(default = "one")]
    pub bandwidth: u32,
    /// For how long, seconds. Default one duration granule.
    #[serde(default)]
    pub duration_s: Option<u64>,
}

fn one() -> u32 {
    1
}

pub(super) struct GhostRt {
    name: String,
    device: String,
    home: Option<String>,
    /// Where the gSSD is in its life, beyond the pool's view.
    out: Option<Outgoing>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outgoing {
    /// Its data is moving to another gSSD.
    Migrating,
    /// Its volume has until this time to move off.
    Evicting(Nanos),
}

pub(super) struct VolumeRt {
    rec: HarvestVolumeRecord,
    vol: Arc<GhostVolume>,
    io: Arc<IoStats>,
    export: Arc<dyn BlockDev>,
    /// Regular tenants first on shared channels (emulation mode only).
    gate: Option<Arc<priority::PriorityGate>>,
}

struct MigrationRt {
    volume: String,
    offset: u64,
    from: GssdId,
    to: GssdId,
    handle: MigrationHandle,
}

/// The harvester's state inside the manager.
#[derive(Default)]
pub(super) struct HarvestState {
    /// One pool per device (capacity is counted in that device's blocks).
    pools: BTreeMap<String, GssdPool>,
    /// Every gSSD's runtime bits, by id.
    gssds: BTreeMap<GssdId, GhostRt>,
    volumes: BTreeMap<String, VolumeRt>,
    migrations: Vec<MigrationRt>,
    events: VecDeque<HarvestEvent>,
    next_seq: u64,
    counts: BTreeMap<HarvestEventKind, u64>,
    timer: Option<RefreshTimer>,
    /// Homes that took their flash back early, and when: the fixed policy does
    /// not lend from them again for one duration granule (so a busy tenant is
    /// not harvested again the moment it got its blocks back).
    cooling: BTreeMap<String, Nanos>,
    /// The learned predictors of each regular vSSD (policy `predicted`).
    predictors: BTreeMap<String, PredRt>,
}

/// One regular vSSD's predictor and the samples of its current window.
struct PredRt {
    p: predict::VssdPredictor,
    /// Time, bytes and requests at the previous tick.
    last: (Nanos, u64, u64),
    /// (bandwidth, IOPS, utilisation) fractions sampled at each tick.
    samples: Vec<(f32, f32, f32)>,
    window_start: Nanos,
}

impl State {
    /// Whether `name` is a gSSD's hidden vSSD.
    pub(super) fn is_ghost(&self, name: &str) -> bool {
        self.vssds
            .get(name)
            .is_some_and(|e| matches!(e.rec.kind, TenantKind::Ghost(_)))
    }

    /// The gSSD id of a ghost vSSD.
    pub(super) fn harvest_gssd_of(&self, name: &str) -> Option<GssdId> {
        self.vssds
            .get(name)
            .and_then(|e| ghost_meta(&e.rec))
            .map(|m| m.gssd)
    }

    /// The harvest volumes of a harvest tenant.
    pub(super) fn harvest_volumes_of(&self, tenant: &str) -> Vec<String> {
        self.harvest
            .volumes
            .values()
            .filter(|v| v.rec.tenant == tenant)
            .map(|v| v.rec.name.clone())
            .collect()
    }

    /// The harvest volume of that name exists.
    pub(super) fn is_harvest_volume(&self, name: &str) -> bool {
        self.harvest.volumes.contains_key(name)
    }
}

fn ghost_meta(rec: &VssdRecord) -> Option<&GhostMeta> {
    match &rec.kind {
        TenantKind::Ghost(m) => Some(m),
        _ => None,
    }
}

/// Flash blocks a gSSD on `channels` channels of `geo` needs to export `bytes`:
/// its FTL keeps 12.5% over-provisioning and GC's working room per die
/// (`ftl::default_capacity`), so small gSSDs need proportionally more.
fn blocks_for(geo: &flash::Geometry, bytes: u64, channels: u32) -> u64 {
    let per_block = geo.block_bytes();
    // GC's room: 5 blocks (background GC's trigger, the open block and the
    // reserve) per die, as `ftl::max_capacity` keeps.
    let units = u64::from(channels) * u64::from(geo.dies_per_channel);
    let data = bytes.div_ceil(per_block);
    (bytes * 8)
        .div_ceil(7 * per_block)
        .max(data + units * 5)
        .max((bytes * 100).div_ceil(95 * per_block))
}

fn secs(ns: Nanos) -> u64 {
    ns / SEC
}

impl HostManager {
    fn harvest_cfg(&self, geo: &flash::Geometry) -> HarvestConfig {
        let s = &self.harvest_settings;
        HarvestConfig {
            chunk_blocks: if s.chunk_blocks == 0 {
                HarvestConfig::chunk_for_device(u64::from(geo.total_blocks()))
            } else {
                s.chunk_blocks
            },
            duration_granule_s: s.granule_s,
            refresh_interval_s: s.refresh_s,
            reclaim_horizon_s: s.reclaim_horizon_s,
        }
    }

    fn event(
        &self,
        st: &mut State,
        kind: HarvestEventKind,
        gssd: Option<u64>,
        volume: Option<&str>,
        home: Option<&str>,
        detail: String,
    ) {
        let h = &mut st.harvest;
        h.next_seq += 1;
        *h.counts.entry(kind).or_default() += 1;
        info!(event = kind.name(), gssd, volume, home, "{detail}");
        h.events.push_back(HarvestEvent {
            seq: h.next_seq,
            at_ns: self.clock.now(),
            kind,
            gssd,
            volume: volume.map(str::to_string),
            home: home.map(str::to_string),
            detail,
        });
        while h.events.len() > EVENT_LOG {
            h.events.pop_front();
        }
    }

    /// Rebuilds the pools, gSSDs and harvest volumes from the store after the
    /// vSSDs were reopened; gives back lent ranges no gSSD holds (a crash between
    /// lending and creating the gSSD, or between erasing it and recording that).
    pub(super) fn open_harvest(&self) -> Result<()> {
        let mut st = self.state.write();
        let devices: Vec<(String, flash::Geometry, Backend)> = st
            .devices
            .iter()
            .map(|d| (d.rec.name.clone(), d.rec.geometry, d.rec.backend.clone()))
            .collect();
        for (name, geo, _) in &devices {
            st.harvest
                .pools
                .insert(name.clone(), GssdPool::new(self.harvest_cfg(geo))?);
        }
        // Lent ranges without a gSSD go home.
        let ghosts: Vec<VssdRecord> = st
            .vssds
            .values()
            .filter(|e| matches!(e.rec.kind, TenantKind::Ghost(_)))
            .map(|e| e.rec.clone())
            .collect();
        let homes: Vec<String> = st
            .vssds
            .values()
            .filter(|e| !e.rec.lent.is_empty())
            .map(|e| e.rec.name.clone())
            .collect();
        for home in homes {
            let e = st.vssds.get(&home).expect("listed").clone();
            let held = ghosts
                .iter()
                .filter(|g| ghost_meta(g).and_then(|m| m.home.as_deref()) == Some(home.as_str()))
                .flat_map(|g| g.extents.clone())
                .collect::<Vec<_>>();
            let orphans: Vec<Extent> = e
                .rec
                .lent
                .iter()
                .filter(|x| !held.contains(x))
                .copied()
                .collect();
            if !orphans.is_empty() {
                warn!(vssd = %home, ?orphans, "lent blocks with no gSSD: taking them back");
                e.vssd.take_back(&orphans)?;
                let mut rec = e.rec.clone();
                rec.lent = e.vssd.lent();
                self.store.put_vssd(&rec)?;
                st.vssds.get_mut(&home).expect("listed").rec = rec;
            }
        }
        // gSSDs into their pools (unassigned for now).
        for g in &ghosts {
            let m = ghost_meta(g).expect("ghost").clone();
            let home_id = m
                .home
                .as_ref()
                .and_then(|h| st.vssds.get(h))
                .map(|e| e.rec.id as u64);
            let gs = Gssd {
                id: m.gssd,
                bandwidth: m.bandwidth,
                capacity: m.capacity_blocks,
                expiry: m.expiry,
                tenant: None,
                home: home_id,
                ghost: Some(g.id as u64),
            };
            st.harvest
                .pools
                .get_mut(&g.device)
                .ok_or_else(|| ControlError::Store(format!("gSSD {} on unknown device", g.name)))?
                .insert(gs)?;
            st.harvest.gssds.insert(
                m.gssd,
                GhostRt {
                    name: g.name.clone(),
                    device: g.device.clone(),
                    home: m.home.clone(),
                    out: None,
                },
            );
        }
        // Volumes: attach their gSSDs again, or drop them if their flash is gone.
        for rec in self.store.harvest_volumes()? {
            let gone = rec
                .segments
                .iter()
                .find(|s| !st.harvest.gssds.contains_key(&s.gssd));
            let volatile = rec.segments.iter().any(|s| {
                st.harvest.gssds.get(&s.gssd).is_some_and(|g| {
                    devices
                        .iter()
                        .any(|(n, _, b)| *n == g.device && *b == Backend::Memory)
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
            for s in &rec.segments {
                let g = &st.harvest.gssds[&s.gssd];
                let dev: Arc<dyn BlockDev> = st.vssds[&g.name].vssd.clone();
                vol.attach(s.offset, s.len, s.gssd, dev, s.base)?;
                let device = g.device.clone();
                st.harvest
                    .pools
                    .get_mut(&device)
                    .expect("pool")
                    .assign(s.gssd, rec.id)?;
                if let Some(t) = rec.evict_by {
                    // Still under notice: out of the pool again, deadline kept.
                    st.harvest
                        .pools
                        .get_mut(&device)
                        .expect("pool")
                        .remove(s.gssd)
                        .ok();
                    st.harvest.gssds.get_mut(&s.gssd).expect("gssd").out =
                        Some(Outgoing::Evicting(t));
                }
            }
            let rt = self.volume_rt(rec, vol);
            let name = rt.rec.name.clone();
            st.harvest.volumes.insert(name.clone(), rt);
            self.refresh_gate(&st, &name);
        }
        st.harvest.timer = Some(RefreshTimer::new(
            self.clock.now(),
            self.harvest_settings.refresh_s.saturating_mul(SEC),
        ));
        Ok(())
    }

    fn volume_rt(&self, rec: HarvestVolumeRecord, vol: Arc<GhostVolume>) -> VolumeRt {
        let io = Arc::new(IoStats::default());
        let inner: Arc<dyn BlockDev> = vol.clone();
        let mut layer = StatsLayer::new(inner, io.clone());
        if self.mode == Mode::Emulation {
            layer = layer.timed(self.clock.clone());
        }
        let gate = (self.mode == Mode::Emulation).then(|| {
            Arc::new(priority::PriorityGate::new(
                self.clock.clone(),
                self.harvest_settings.priority_slack_us.saturating_mul(1000),
                64 << 10,
            ))
        });
        VolumeRt {
            rec,
            vol,
            io,
            export: Arc::new(Layered(layer)),
            gate,
        }
    }

    /// Points a volume's priority gate at the channels its gSSDs share with
    /// regular tenants (lent blocks; unsold channels are nobody's).
    fn refresh_gate(&self, st: &State, vname: &str) {
        let Some(v) = st.harvest.volumes.get(vname) else {
            return;
        };
        let Some(gate) = &v.gate else {
            return;
        };
        let mut shared = Vec::new();
        let mut ids: Vec<GssdId> = v.rec.segments.iter().map(|s| s.gssd).collect();
        ids.extend(
            st.harvest
                .migrations
                .iter()
                .filter(|m| m.volume == vname)
                .map(|m| m.to),
        );
        for id in ids {
            let Some(g) = st.harvest.gssds.get(&id) else {
                continue;
            };
            if g.home.is_none() {
                continue;
            }
            let (Ok(d), Some(e)) = (st.device(&g.device), st.vssds.get(&g.name)) else {
                continue;
            };
            for c in channels_of(&e.rec.extents) {
                shared.push((d.dev.clone(), c));
            }
        }
        gate.set_shared(shared);
    }

    /// The harvester's settings.
    pub fn harvest_settings(&self) -> &HarvestSettings {
        &self.harvest_settings
    }

    // ---- gSSD creation and return --------------------------------------------

    /// Creates the hidden vSSD of a gSSD on `extents` and puts the gSSD in its
    /// device's pool.
    fn create_ghost(
        &self,
        st: &mut State,
        device: &str,
        extents: Vec<Extent>,
        home: Option<(&str, u64)>,
        capacity_blocks: u64,
        lasts: Nanos,
    ) -> Result<GssdId> {
        let now = self.clock.now();
        let d = st.device(device)?;
        let (geo, dev) = (d.rec.geometry, d.dev.clone());
        let cfg = self.harvest_cfg(&geo);
        let gssd = self.store.next_serial()?;
        let bandwidth = channels_of(&extents).len() as u32;
        let meta_probe = Gssd::new(
            &cfg,
            gssd,
            home.map(|h| h.1),
            capacity_blocks,
            bandwidth,
            now,
            lasts,
        )?;
        let name = format!("gssd-{gssd}");
        let mut rec = self.store.insert_new_vssd(|id| VssdRecord {
            id,
            name: name.clone(),
            device: device.to_string(),
            capacity_bytes: ftl::default_capacity(&geo, &extents),
            extents,
            gc: Default::default(),
            state: VssdState::Creating,
            sla: None,
            kind: TenantKind::Ghost(GhostMeta {
                gssd,
                home: home.map(|h| h.0.to_string()),
                bandwidth,
                capacity_blocks,
                expiry: meta_probe.expiry,
            }),
            lent: Vec::new(),
        })?;
        let vssd = self.build_recorded(dev, &mut rec)?;
        self.store.put_vssd(&rec)?;
        let g = Gssd {
            ghost: Some(rec.id as u64),
            ..meta_probe
        };
        st.harvest
            .pools
            .get_mut(device)
            .expect("a pool per device")
            .insert(g)?;
        st.harvest.gssds.insert(
            gssd,
            GhostRt {
                name: name.clone(),
                device: device.to_string(),
                home: home.map(|h| h.0.to_string()),
                out: None,
            },
        );
        self.insert_entry_locked(st, rec, vssd);
        Ok(gssd)
    }

    /// Erases a gSSD's blocks and gives them back: to its home vSSD's FTL, or,
    /// for unsold channels, by dropping the record (the channels are free again).
    /// The gSSD must be out of its pool already.
    fn return_home(&self, st: &mut State, id: GssdId, why: &str) -> Result<Nanos> {
        let g = st
            .harvest
            .gssds
            .remove(&id)
            .ok_or_else(|| ControlError::Store(format!("no gSSD {id}")))?;
        let entry = st
            .vssds
            .get(&g.name)
            .cloned()
            .ok_or_else(|| ControlError::NoSuchVssd(g.name.clone()))?;
        let mut rec = entry.rec.clone();
        rec.state = VssdState::Deleting;
        self.store.put_vssd(&rec)?;
        let now = self.clock.now();
        let mut took = entry.vssd.destroy()?.saturating_sub(now);
        self.store.remove_vssd(&g.name)?;
        if let Some(e) = st.vssds.remove(&g.name) {
            Self::detach_gate(st, &e);
        }
        if let Some(home) = &g.home {
            if let Some(h) = st.vssds.get(home).cloned() {
                took = took.max(h.vssd.take_back(&rec.extents)?);
                let mut hrec = h.rec.clone();
                hrec.lent = h.vssd.lent();
                self.store.put_vssd(&hrec)?;
                st.vssds.get_mut(home).expect("present").rec = hrec;
            }
        }
        self.event(
            st,
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
    fn repool(&self, st: &mut State, g: Gssd) -> Result<()> {
        let rt = &st.harvest.gssds[&g.id];
        let (name, device) = (rt.name.clone(), rt.device.clone());
        let entry = st.vssds.get(&name).cloned().expect("ghost vSSD");
        entry.vssd.destroy()?;
        let vssd = Vssd::create(
            st.device(&device)?.dev.clone(),
            Self::vssd_config(&entry.rec),
            self.clock.clone(),
            self.ckpt.clone(),
        )?;
        st.vssds.remove(&name);
        self.insert_entry_locked(st, entry.rec.clone(), vssd);
        Ok(())
    }

    // ---- the harvester's period ------------------------------------------------

    /// One period of the harvester: finish migrations, carry out due evictions,
    /// take flash back where homes need it, refresh expiries, and lend what is
    /// idle. Does nothing when `[harvest] enabled = false`. Returns the number of
    /// events it raised.
    pub fn harvest_tick(&self) -> Result<usize> {
        if !self.harvest_settings.enabled {
            return Ok(0);
        }
        let _g = self.lifecycle.lock();
        let mut st = self.state.write();
        let before = st.harvest.next_seq;
        self.finish_migrations(&mut st)?;
        self.due_evictions(&mut st)?;
        self.reclaim_where_needed(&mut st)?;
        if self.harvest_settings.policy == LendPolicy::Predicted {
            self.observe_vssds(&mut st)?;
        }
        self.refresh(&mut st)?;
        self.lend_idle(&mut st)?;
        Ok((st.harvest.next_seq - before) as usize)
    }

    fn finish_migrations(&self, st: &mut State) -> Result<()> {
        let all = std::mem::take(&mut st.harvest.migrations);
        for m in all {
            let Some(outcome) = m.handle.outcome() else {
                st.harvest.migrations.push(m);
                continue;
            };
            match outcome {
                Ok(_) => {
                    if let Some(v) = st.harvest.volumes.get_mut(&m.volume) {
                        for s in &mut v.rec.segments {
                            if s.offset == m.offset && s.gssd == m.from {
                                s.gssd = m.to;
                                s.base = 0;
                            }
                        }
                        self.store.put_harvest_volume(&v.rec)?;
                    }
                    self.refresh_gate(st, &m.volume);
                    self.event(
                        st,
                        HarvestEventKind::Migrated,
                        Some(m.from),
                        Some(&m.volume),
                        None,
                        format!(
                            "volume {} moved from gSSD {} to gSSD {}",
                            m.volume, m.from, m.to
                        ),
                    );
                    self.return_home(st, m.from, "after migrating its data away")?;
                }
                Err(e) => {
                    self.event(
                        st,
                        HarvestEventKind::MigrationFailed,
                        Some(m.from),
                        Some(&m.volume),
                        None,
                        format!("moving to gSSD {} failed: {e}", m.to),
                    );
                    // The replacement goes back to the pool; the volume is evicted.
                    let dev = st.harvest.gssds[&m.to].device.clone();
                    let vid = st.harvest.volumes.get(&m.volume).map(|v| v.rec.id);
                    if let Some(vid) = vid {
                        let r = st.harvest.pools.get_mut(&dev).expect("pool").release(
                            m.to,
                            vid,
                            self.clock.now(),
                        )?;
                        self.carry_out_release(st, r.gssd, r.action)?;
                    }
                    self.evict(st, m.from, &m.volume)?;
                }
            }
        }
        Ok(())
    }

    fn evict(&self, st: &mut State, id: GssdId, volume: &str) -> Result<()> {
        let deadline = self
            .clock
            .now()
            .saturating_add(self.harvest_settings.eviction_grace_s.saturating_mul(SEC));
        if let Some(g) = st.harvest.gssds.get_mut(&id) {
            g.out = Some(Outgoing::Evicting(deadline));
        }
        let home = st.harvest.gssds.get(&id).and_then(|g| g.home.clone());
        if let Some(v) = st.harvest.volumes.get_mut(volume) {
            v.rec.evict_by = Some(v.rec.evict_by.map_or(deadline, |d| d.min(deadline)));
            self.store.put_harvest_volume(&v.rec)?;
        }
        self.event(
            st,
            HarvestEventKind::Evicted,
            Some(id),
            Some(volume),
            home.as_deref(),
            format!(
                "no gSSD can take volume {volume}'s data from gSSD {id}: move off by t = {} s",
                secs(deadline)
            ),
        );
        Ok(())
    }

    fn due_evictions(&self, st: &mut State) -> Result<()> {
        let now = self.clock.now();
        let due: Vec<GssdId> = st
            .harvest
            .gssds
            .iter()
            .filter(|(_, g)| matches!(g.out, Some(Outgoing::Evicting(t)) if t <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let vname = st
                .harvest
                .volumes
                .values()
                .find(|v| v.rec.segments.iter().any(|s| s.gssd == id))
                .map(|v| v.rec.name.clone());
            if let Some(vname) = &vname {
                let v = st.harvest.volumes.get_mut(vname).expect("found");
                let offsets: Vec<u64> = v
                    .rec
                    .segments
                    .iter()
                    .filter(|s| s.gssd == id)
                    .map(|s| s.offset)
                    .collect();
                for o in offsets {
                    v.vol.detach(o)?;
                }
                v.rec.segments.retain(|s| s.gssd != id);
                let rec = st.harvest.volumes[vname].rec.clone();
                self.store.put_harvest_volume(&rec)?;
                self.refresh_gate(st, vname);
                self.event(
                    st,
                    HarvestEventKind::EvictionDone,
                    Some(id),
                    Some(vname),
                    None,
                    format!("deadline passed: gSSD {id}'s range detached from volume {vname}"),
                );
            }
            self.return_home(st, id, "eviction deadline passed")?;
        }
        Ok(())
    }

    /// Early reclamation of gSSD `id` (its home needs it, its channels are wanted,
    /// or it expired while in use).
    fn reclaim_early(&self, st: &mut State, id: GssdId, why: &str) -> Result<()> {
        let now = self.clock.now();
        let Some(rt) = st.harvest.gssds.get(&id) else {
            return Ok(());
        };
        if rt.out.is_some() {
            return Ok(());
        }
        let device = rt.device.clone();
        let pool = st.harvest.pools.get_mut(&device).expect("pool");
        let Some(g) = pool.get(id).cloned() else {
            return Ok(());
        };
        let volume = st
            .harvest
            .volumes
            .values()
            .find(|v| v.rec.id == g.tenant.unwrap_or(u64::MAX))
            .map(|v| (v.rec.name.clone(), v.rec.until));
        let need = Demand {
            capacity: g.capacity,
            bandwidth: g.bandwidth,
            duration: volume
                .as_ref()
                .map_or(1, |(_, until)| until.saturating_sub(now).max(1)),
        };
        let pool = st.harvest.pools.get_mut(&device).expect("pool");
        let r = pool.early_reclaim(id, &need.quantized(pool.config()), now)?;
        match (r.action, volume) {
            (ReclaimAction::Migrate { to }, Some((vname, _))) => {
                self.start_migration(st, &vname, id, to, why)?;
            }
            (ReclaimAction::Evict, Some((vname, _))) => {
                self.evict(st, id, &vname)?;
            }
            _ => {
                self.return_home(st, id, why)?;
            }
        }
        Ok(())
    }

    fn start_migration(
        &self,
        st: &mut State,
        vname: &str,
        from: GssdId,
        to: GssdId,
        why: &str,
    ) -> Result<()> {
        let to_dev: Arc<dyn BlockDev> = st.vssds[&st.harvest.gssds[&to].name].vssd.clone();
        let v = &st.harvest.volumes[vname];
        let seg = v
            .rec
            .segments
            .iter()
            .find(|s| s.gssd == from)
            .cloned()
            .expect("the volume uses the gSSD");
        let opts = MigrateOptions {
            chunk_bytes: self.harvest_settings.migrate_chunk_bytes,
            deadline: None,
        };
        let handle = v.vol.migrate_with(seg.offset, to, to_dev, 0, opts)?;
        st.harvest.gssds.get_mut(&from).expect("gssd").out = Some(Outgoing::Migrating);
        st.harvest.migrations.push(MigrationRt {
            volume: vname.to_string(),
            offset: seg.offset,
            from,
            to,
            handle,
        });
        self.refresh_gate(st, vname);
        let home = st.harvest.gssds[&from].home.clone();
        self.event(
            st,
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

    fn reclaim_where_needed(&self, st: &mut State) -> Result<()> {
        let wanted: Vec<GssdId> = st
            .harvest
            .gssds
            .iter()
            .filter(|(_, g)| g.out.is_none())
            .filter(|(_, g)| {
                g.home
                    .as_ref()
                    .and_then(|h| st.vssds.get(h))
                    .is_some_and(|h| h.vssd.needs_reclaim())
            })
            .map(|(&id, _)| id)
            .collect();
        let now = self.clock.now();
        for id in wanted {
            if let Some(home) = st.harvest.gssds.get(&id).and_then(|g| g.home.clone()) {
                st.harvest.cooling.insert(home, now);
            }
            self.reclaim_early(st, id, "its home vSSD needs its blocks back")?;
        }
        Ok(())
    }

    fn refresh(&self, st: &mut State) -> Result<()> {
        let now = self.clock.now();
        let fire = st.harvest.timer.as_mut().is_some_and(|t| t.fire(now));
        if !fire {
            return Ok(());
        }
        let lend_for = self.harvest_settings.lend_for_s.saturating_mul(SEC);
        let devices: Vec<String> = st.harvest.pools.keys().cloned().collect();
        for device in devices {
            // Fixed policy, and unsold channels: flash whose home is still idle
            // stays free for another `lend_for`. Predicted policy: a lent gSSD's
            // expiry is its home's predicted duration (now, if nothing is
            // predicted spare any more); a cold predictor changes nothing.
            let mut updates: Vec<(GssdId, Nanos)> = Vec::new();
            for g in st.harvest.pools[&device].iter() {
                let Some(rt) = st.harvest.gssds.get(&g.id) else {
                    continue;
                };
                let home = rt.home.as_ref().and_then(|h| st.vssds.get(h));
                if home.is_some_and(|h| h.vssd.needs_reclaim()) {
                    continue;
                }
                match (&rt.home, self.harvest_settings.policy) {
                    (Some(h), LendPolicy::Predicted) => {
                        if let Some(p) = self.prediction(st, h)?.filter(|p| p.warm) {
                            let t = self
                                .spare_of(st, h, &p)
                                .map_or(now, |(_, _, lasts)| now.saturating_add(lasts));
                            updates.push((g.id, t));
                        }
                    }
                    _ => updates.push((g.id, now.saturating_add(lend_for))),
                }
            }
            let cfg = *st.harvest.pools[&device].config();
            let g = cfg.duration_granule();
            let updates: Vec<(GssdId, Nanos)> = updates
                .into_iter()
                .map(|(id, t)| (id, now + (t - now) / g * g))
                .collect();
            let report = st
                .harvest
                .pools
                .get_mut(&device)
                .expect("pool")
                .refresh(now, &updates);
            for g in report.dropped {
                self.event(
                    st,
                    HarvestEventKind::Expired,
                    Some(g.id),
                    None,
                    None,
                    format!("unassigned gSSD {} expired", g.id),
                );
                self.return_home(st, g.id, "expired")?;
            }
            for id in report.expired_in_use {
                self.reclaim_early(st, id, "it expired while in use")?;
            }
        }
        Ok(())
    }

    /// Samples every regular vSSD's bandwidth, IOPS and utilisation (as fractions
    /// of what it was sold) at each tick, and feeds its predictors one window of
    /// them every `window_s`; they train themselves on their own schedule.
    fn observe_vssds(&self, st: &mut State) -> Result<()> {
        let now = self.clock.now();
        let window = self.harvest_settings.window_s.saturating_mul(SEC);
        let regular: Vec<String> = st
            .vssds
            .values()
            .filter(|e| e.rec.state == VssdState::Active && e.rec.kind == TenantKind::Regular)
            .filter(|e| !st.is_tier_cache(&e.rec.name))
            .map(|e| e.rec.name.clone())
            .collect();
        st.harvest.predictors.retain(|n, _| regular.contains(n));
        for name in regular {
            let e = st.vssds[&name].clone();
            let d = st.device(&e.rec.device)?;
            let (geo, timing) = (d.rec.geometry, d.rec.timing);
            let io = e.io.snapshot();
            let (bytes, ops) = (io.read_bytes + io.write_bytes, io.reads + io.writes);
            let ftl = e.vssd.stats();
            let util = (ftl.mapped_pages * u64::from(geo.page_size)) as f64
                / e.rec.capacity_bytes.max(1) as f64;
            let nch = channels_of(&e.rec.extents).len() as f64;
            let bw_full = nch * timing.channel_mbps as f64 * 1e6;
            let iops_full =
                nch * f64::from(geo.dies_per_channel) * 1e9 / timing.read_ns.max(1) as f64;
            let rt = match st.harvest.predictors.entry(name.clone()) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(PredRt {
                    p: predict::VssdPredictor::new(
                        &self.harvest_settings.predictor,
                        predict::Role::Harvestable,
                        u64::from(e.rec.id),
                    )
                    .map_err(|err| ControlError::Config(format!("harvest.predictor: {err}")))?,
                    last: (now, bytes, ops),
                    samples: Vec::new(),
                    window_start: now,
                }),
            };
            let (t0, b0, o0) = rt.last;
            if now > t0 {
                let dt = (now - t0) as f64 / 1e9;
                let frac = |x: f64| x.clamp(0.0, 1.0) as f32;
                rt.samples.push((
                    frac(bytes.saturating_sub(b0) as f64 / dt / bw_full),
                    frac(ops.saturating_sub(o0) as f64 / dt / iops_full),
                    frac(util),
                ));
                rt.last = (now, bytes, ops);
            }
            if now.saturating_sub(rt.window_start) >= window && !rt.samples.is_empty() {
                let n = rt.samples.len() as f32;
                let col = |f: fn(&(f32, f32, f32)) -> f32| {
                    let v: Vec<f32> = rt.samples.iter().map(f).collect();
                    let max = v.iter().copied().fold(0.0, f32::max);
                    let min = v.iter().copied().fold(1.0, f32::min);
                    (max, min, v.iter().sum::<f32>() / n)
                };
                let (bw_max, bw_min, bw_avg) = col(|s| s.0);
                let (iops_max, iops_min, iops_avg) = col(|s| s.1);
                let (util_max, util_min, util_avg) = col(|s| s.2);
                let w = predict::WindowStats {
                    bw_max,
                    bw_min,
                    bw_avg,
                    iops_max,
                    iops_min,
                    iops_avg,
                    util_max,
                    util_min,
                    util_avg,
                };
                use predict::Predictor;
                rt.p.observe(now, &w)
                    .map_err(|err| ControlError::Invalid(format!("predictor of {name}: {err}")))?;
                rt.samples.clear();
                rt.window_start = now;
            }
        }
        Ok(())
    }

    /// The predicted policy's answer for a home: how many of its channels it can
    /// lend, what share of its capacity, and for how long; `None` while its
    /// predictors are cold or predict nothing spare.
    fn predicted_spare(&self, st: &State, home: &str) -> Result<Option<(u32, f64, Nanos)>> {
        Ok(self
            .prediction(st, home)?
            .and_then(|p| self.spare_of(st, home, &p)))
    }

    /// A home's current prediction, if it has predictors.
    fn prediction(&self, st: &State, home: &str) -> Result<Option<predict::Prediction>> {
        use predict::Predictor;
        let Some(rt) = st.harvest.predictors.get(home) else {
            return Ok(None);
        };
        rt.p.predict(self.clock.now())
            .map(Some)
            .map_err(|err| ControlError::Invalid(format!("predictor of {home}: {err}")))
    }

    /// What a prediction leaves spare: (channels, share of capacity, duration).
    fn spare_of(
        &self,
        st: &State,
        home: &str,
        p: &predict::Prediction,
    ) -> Option<(u32, f64, Nanos)> {
        let levels = f64::from(self.harvest_settings.predictor.levels.max(1));
        let nch = channels_of(&st.vssds[home].rec.extents).len() as f64;
        let channels = (f64::from(p.spare_bandwidth) / levels * nch).floor() as u32;
        let share = f64::from(p.spare_capacity) / levels;
        (p.warm && channels > 0 && share > 0.0 && p.duration > 0)
            .then_some((channels, share, p.duration))
    }

    /// The fixed policy: every regular vSSD lends `lend_fraction` of what its FTL
    /// says is lendable (if that makes at least one chunk), and unsold channels
    /// become gSSDs of up to `unsold_group` channels.
    fn lend_idle(&self, st: &mut State) -> Result<()> {
        let lend_for = self.harvest_settings.lend_for_s.saturating_mul(SEC);
        let now = self.clock.now();
        let granule = self.harvest_settings.granule_s.saturating_mul(SEC);
        st.harvest
            .cooling
            .retain(|_, t| now < t.saturating_add(granule));
        let lending: Vec<String> = st
            .harvest
            .gssds
            .values()
            .filter_map(|g| g.home.clone())
            .collect();
        let homes: Vec<String> = st
            .vssds
            .values()
            .filter(|e| e.rec.state == VssdState::Active && e.rec.kind == TenantKind::Regular)
            .filter(|e| !lending.contains(&e.rec.name) && !st.is_tier_cache(&e.rec.name))
            .filter(|e| !st.harvest.cooling.contains_key(&e.rec.name))
            .filter(|e| !e.vssd.needs_reclaim())
            .map(|e| e.rec.name.clone())
            .collect();
        for home in homes {
            let e = st.vssds[&home].clone();
            let geo = st.device(&e.rec.device)?.rec.geometry;
            let cfg = self.harvest_cfg(&geo);
            let mut lendable = e.vssd.lendable();
            let (want, lasts) = match self.harvest_settings.policy {
                LendPolicy::Fixed => {
                    let per_plane = lendable.iter().map(|&(_, b)| b).min().unwrap_or(0);
                    let f = self.harvest_settings.lend_fraction;
                    ((f64::from(per_plane) * f).floor() as u64, lend_for)
                }
                LendPolicy::Predicted => {
                    let Some((n, share, lasts)) = self.predicted_spare(st, &home)? else {
                        continue;
                    };
                    // The predicted spare share of the whole vSSD, on its first
                    // `n` channels, never beyond what the FTL can spare.
                    lendable.truncate(n as usize);
                    let per_plane = lendable.iter().map(|&(_, b)| b).min().unwrap_or(0);
                    let nch = channels_of(&e.rec.extents).len() as f64;
                    let ext_blocks = e.rec.extents.iter().map(|x| x.blocks).max().unwrap_or(0);
                    let by_share = (share * f64::from(ext_blocks) * nch / f64::from(n)).floor();
                    ((by_share as u64).min(u64::from(per_plane)), lasts)
                }
            };
            let chans: Vec<u32> = lendable.iter().map(|&(c, _)| c).collect();
            let units = u64::from(geo.dies_per_channel) * u64::from(geo.planes_per_die);
            let k = units * chans.len() as u64;
            // Largest per-plane count whose total is whole chunks.
            let mut b = want;
            while b > 0 && !(b * k).is_multiple_of(cfg.chunk_blocks) {
                b -= 1;
            }
            if b == 0 || chans.is_empty() || lasts < granule {
                continue;
            }
            let extents = e.vssd.lend(&chans, b as u32)?;
            let mut hrec = e.rec.clone();
            hrec.lent = e.vssd.lent();
            self.store.put_vssd(&hrec)?;
            st.vssds.get_mut(&home).expect("present").rec = hrec;
            let device = e.rec.device.clone();
            match self.create_ghost(
                st,
                &device,
                extents.clone(),
                Some((&home, e.rec.id as u64)),
                b * k,
                lasts,
            ) {
                Ok(id) => self.event(
                    st,
                    HarvestEventKind::Created,
                    Some(id),
                    None,
                    Some(&home),
                    format!(
                        "gSSD {id}: {} blocks on channels {} lent by {home}",
                        b * k,
                        super::channel_list(&chans)
                    ),
                ),
                Err(err) => {
                    warn!(vssd = %home, error = %err, "could not create a gSSD on lent blocks; taking them back");
                    e.vssd.take_back(&extents)?;
                    let mut hrec = st.vssds[&home].rec.clone();
                    hrec.lent = e.vssd.lent();
                    self.store.put_vssd(&hrec)?;
                    st.vssds.get_mut(&home).expect("present").rec = hrec;
                }
            }
        }
        if self.harvest_settings.unsold {
            let devices: Vec<(String, flash::Geometry, Vec<u32>)> = st
                .devices
                .iter()
                .map(|d| (d.rec.name.clone(), d.rec.geometry, st.free_channels(d)))
                .collect();
            for (device, geo, free) in devices {
                let cfg = self.harvest_cfg(&geo);
                for group in free.chunks(self.harvest_settings.unsold_group as usize) {
                    let extents: Vec<Extent> = group
                        .iter()
                        .map(|&c| Extent::whole_channel(&geo, c))
                        .collect();
                    let blocks = u64::from(geo.blocks_per_channel()) * group.len() as u64;
                    let cap = blocks / cfg.chunk_blocks * cfg.chunk_blocks;
                    if cap == 0 {
                        continue;
                    }
                    let id = self.create_ghost(st, &device, extents, None, cap, lend_for)?;
                    self.event(
                        st,
                        HarvestEventKind::Created,
                        Some(id),
                        None,
                        None,
                        format!(
                            "gSSD {id}: unsold channels {} of {device}",
                            super::channel_list(group)
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    // ---- harvest volumes ---------------------------------------------------------

    /// A harvest tenant asks for flash: gSSDs are matched best-fit and, if no one
    /// gSSD covers the demand, several are attached until it is met
    /// (under-harvesting); if even that fails, nothing is taken and the error is
    /// BlockFlex's exception.
    pub fn harvest_volume_create(&self, req: &HarvestRequest) -> Result<HarvestVolumeInfo> {
        let _g = self.lifecycle.lock();
        let now = self.clock.now();
        if !valid_name(&req.name) {
            return Err(ControlError::InvalidName(req.name.clone()));
        }
        if req.capacity.0 == 0 || req.bandwidth == 0 {
            return Err(ControlError::Invalid(
                "a harvest volume needs a capacity above 0 bytes and at least 1 channel".into(),
            ));
        }
        let mut st = self.state.write();
        if st.vssds.contains_key(&req.name)
            || st.harvest.volumes.contains_key(&req.name)
            || st.tier_owning(&req.name).is_some()
        {
            return Err(ControlError::Duplicate(req.name.clone()));
        }
        let tenant = st.active(&req.tenant)?;
        if tenant.rec.kind != TenantKind::Harvest {
            return Err(ControlError::Invalid(format!(
                "{} is not a harvest tenant: create its vSSD with role \"harvest\"",
                req.tenant
            )));
        }
        let granule = self.harvest_settings.granule_s.saturating_mul(SEC);
        let duration = req.duration_s.map_or(granule, |s| s.saturating_mul(SEC));
        if duration == 0 {
            return Err(ControlError::Invalid("duration_s must be above 0".into()));
        }
        let size = req.capacity.0.div_ceil(4096) * 4096;
        let vid = self.store.next_serial()?;
        // Pick gSSDs: one that covers everything if any, else the biggest first.
        let mut picked: Vec<(String, GssdId, u64)> = Vec::new(); // (device, id, bytes)
        let mut left = size;
        let mut bw_left = req.bandwidth;
        while left > 0 || bw_left > 0 {
            let mut best: Option<(String, GssdId, u64)> = None;
            for (device, pool) in &st.harvest.pools {
                let geo = st.device(device)?.rec.geometry;
                let d = Demand {
                    capacity: blocks_for(&geo, left.max(1), bw_left.max(1)),
                    bandwidth: bw_left.max(1),
                    duration,
                }
                .quantized(pool.config());
                let fit = pool.best_fit(&d, now)?.map(|g| g.id).or_else(|| {
                    // No single fit: the largest that lasts long enough.
                    pool.iter()
                        .filter(|g| !g.in_use() && g.expiry >= now.saturating_add(duration))
                        .max_by_key(|g| (g.capacity, g.bandwidth, std::cmp::Reverse(g.id)))
                        .map(|g| g.id)
                });
                if let Some(id) = fit {
                    let bytes = st.vssds[&st.harvest.gssds[&id].name].rec.capacity_bytes;
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
                    st.harvest
                        .pools
                        .get_mut(device)
                        .expect("pool")
                        .unassign(*id, vid)?;
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
            let g = st
                .harvest
                .pools
                .get_mut(&device)
                .expect("pool")
                .assign(id, vid)?;
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
            let dev: Arc<dyn BlockDev> = st.vssds[&st.harvest.gssds[id].name].vssd.clone();
            vol.attach(off, len, *id, dev, 0)?;
            segments.push(SegmentRecord {
                offset: off,
                len,
                gssd: *id,
                base: 0,
            });
            off += len;
        }
        let rec = HarvestVolumeRecord {
            name: req.name.clone(),
            id: vid,
            tenant: req.tenant.clone(),
            size_bytes: size,
            bandwidth: req.bandwidth,
            until: now.saturating_add(duration),
            segments,
            evict_by: None,
        };
        self.store.put_harvest_volume(&rec)?;
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
        let rt = self.volume_rt(rec, vol);
        let info = Self::volume_info(&st, &rt);
        st.harvest.volumes.insert(req.name.clone(), rt);
        self.refresh_gate(&st, &req.name);
        Ok(info)
    }

    fn carry_out_release(&self, st: &mut State, g: Gssd, action: ReclaimAction) -> Result<()> {
        match action {
            ReclaimAction::ReturnToPool => {
                self.repool(st, g.clone())?;
                self.event(
                    st,
                    HarvestEventKind::Pooled,
                    Some(g.id),
                    None,
                    None,
                    format!("gSSD {} erased and back in the pool", g.id),
                );
            }
            _ => {
                self.return_home(st, g.id, "released close to its expiry")?;
            }
        }
        Ok(())
    }

    /// The tenant is done with a harvest volume (job end): each gSSD goes back to
    /// the pool or home (erased either way), and the export disappears.
    pub fn harvest_volume_release(&self, name: &str) -> Result<()> {
        let _g = self.lifecycle.lock();
        let now = self.clock.now();
        let mut st = self.state.write();
        let v = st
            .harvest
            .volumes
            .remove(name)
            .ok_or_else(|| ControlError::NoSuchHarvestVolume(name.into()))?;
        // Stop migrations of this volume first; the replacement goes back too.
        let (mine, rest): (Vec<MigrationRt>, Vec<MigrationRt>) =
            std::mem::take(&mut st.harvest.migrations)
                .into_iter()
                .partition(|m| m.volume == name);
        st.harvest.migrations = rest;
        let mut ids: Vec<GssdId> = v.rec.segments.iter().map(|s| s.gssd).collect();
        for m in mine {
            m.handle.cancel();
            let _ = m.handle.wait();
            ids.push(m.to);
        }
        // gSSDs assigned for bandwidth only are assigned without a segment.
        for pool in st.harvest.pools.values() {
            for g in pool.assigned_to(v.rec.id) {
                if !ids.contains(&g.id) {
                    ids.push(g.id);
                }
            }
        }
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let out = st.harvest.gssds.get(&id).and_then(|g| g.out);
            if out.is_some() {
                // Already out of the pool (being reclaimed): straight home.
                self.return_home(&mut st, id, "its volume was released")?;
                continue;
            }
            let device = st.harvest.gssds[&id].device.clone();
            let r = st
                .harvest
                .pools
                .get_mut(&device)
                .expect("pool")
                .release(id, v.rec.id, now)?;
            self.carry_out_release(&mut st, r.gssd, r.action)?;
        }
        self.store.remove_harvest_volume(name)?;
        self.event(
            &mut st,
            HarvestEventKind::Released,
            None,
            Some(name),
            None,
            format!("harvest tenant {} released volume {name}", v.rec.tenant),
        );
        Ok(())
    }

    /// Takes back every gSSD of a home vSSD (before deleting it): unassigned ones
    /// at once, assigned ones by migrating (waited for), or refuses with the
    /// eviction deadline when their data has nowhere to go.
    pub(super) fn reclaim_home(&self, st: &mut State, home: &str) -> Result<()> {
        let ids: Vec<GssdId> = st
            .harvest
            .gssds
            .iter()
            .filter(|(_, g)| g.home.as_deref() == Some(home))
            .map(|(&id, _)| id)
            .collect();
        self.reclaim_now(st, ids, &format!("deleting {home}"))
    }

    /// Takes back the unsold-channel gSSDs on `channels` of `device` so that a
    /// regular vSSD can have them.
    pub(super) fn reclaim_unsold(&self, st: &mut State, device: &str, want: u32) -> Result<()> {
        let mut ids: Vec<(bool, GssdId)> = st
            .harvest
            .gssds
            .iter()
            .filter(|(_, g)| g.home.is_none() && g.device == device)
            .map(|(&id, g)| {
                let in_use = st.harvest.pools[device].get(id).is_none_or(|p| p.in_use());
                (in_use || g.out.is_some(), id)
            })
            .collect();
        // Free gSSDs first.
        ids.sort();
        let mut got = 0u32;
        let mut take = Vec::new();
        for (_, id) in ids {
            if got >= want {
                break;
            }
            let g = &st.harvest.gssds[&id];
            got += channels_of(&st.vssds[&g.name].rec.extents).len() as u32;
            take.push(id);
        }
        self.reclaim_now(st, take, "a regular vSSD needs the unsold channels")
    }

    pub(super) fn reclaim_now(&self, st: &mut State, ids: Vec<GssdId>, why: &str) -> Result<()> {
        for &id in &ids {
            self.reclaim_early(st, id, why)?;
        }
        // Wait for the migrations this started.
        loop {
            let busy: Vec<usize> = st
                .harvest
                .migrations
                .iter()
                .enumerate()
                .filter(|(_, m)| ids.contains(&m.from))
                .map(|(i, _)| i)
                .collect();
            if busy.is_empty() {
                break;
            }
            for i in busy.into_iter().rev() {
                let m = &st.harvest.migrations[i];
                let _ = m.handle.wait();
            }
            self.finish_migrations(st)?;
        }
        for id in ids {
            if let Some(Outgoing::Evicting(t)) = st.harvest.gssds.get(&id).and_then(|g| g.out) {
                let volume = st
                    .harvest
                    .volumes
                    .values()
                    .find(|v| v.rec.segments.iter().any(|s| s.gssd == id))
                    .map(|v| v.rec.name.clone())
                    .unwrap_or_default();
                return Err(ControlError::Reclaiming {
                    what: why.to_string(),
                    volume,
                    deadline_s: secs(t),
                });
            }
        }
        Ok(())
    }

    // ---- views ----------------------------------------------------------------------

    fn volume_info(st: &State, v: &VolumeRt) -> HarvestVolumeInfo {
        let migrations: Vec<MigrationInfo> = st
            .harvest
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
            } else if !migrations.is_empty() {
                "migrating".into()
            } else {
                "active".into()
            },
            evict_by_s: v.rec.evict_by.map(secs),
            migrations,
            io: v.io.snapshot(),
        }
    }

    /// Every harvest volume.
    pub fn harvest_volumes(&self) -> Vec<HarvestVolumeInfo> {
        let st = self.state.read();
        st.harvest
            .volumes
            .values()
            .map(|v| Self::volume_info(&st, v))
            .collect()
    }

    /// One harvest volume.
    pub fn harvest_volume(&self, name: &str) -> Result<HarvestVolumeInfo> {
        let st = self.state.read();
        let v = st
            .harvest
            .volumes
            .get(name)
            .ok_or_else(|| ControlError::NoSuchHarvestVolume(name.into()))?;
        Ok(Self::volume_info(&st, v))
    }

    /// Every gSSD, by id.
    pub fn gssds(&self) -> Vec<GssdInfo> {
        let st = self.state.read();
        let mut out = Vec::new();
        for (&id, rt) in &st.harvest.gssds {
            let Some(e) = st.vssds.get(&rt.name) else {
                continue;
            };
            let meta = ghost_meta(&e.rec).cloned();
            let pooled = st.harvest.pools.get(&rt.device).and_then(|p| p.get(id));
            let volume = st.harvest.volumes.values().find(|v| {
                v.rec.segments.iter().any(|s| s.gssd == id)
                    || pooled.and_then(|g| g.tenant) == Some(v.rec.id)
            });
            out.push(GssdInfo {
                id,
                vssd: rt.name.clone(),
                device: rt.device.clone(),
                channels: channels_of(&e.rec.extents),
                bandwidth: meta.as_ref().map_or(0, |m| m.bandwidth),
                capacity_blocks: meta.as_ref().map_or(0, |m| m.capacity_blocks),
                capacity_bytes: e.rec.capacity_bytes,
                expiry_s: secs(pooled.map_or(meta.as_ref().map_or(0, |m| m.expiry), |g| g.expiry)),
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
    pub fn harvest_events(&self, since: u64) -> Vec<HarvestEvent> {
        let st = self.state.read();
        st.harvest
            .events
            .iter()
            .filter(|e| e.seq > since)
            .cloned()
            .collect()
    }

    /// `flexssd harvest status`.
    pub fn harvest_status(&self) -> HarvestStatus {
        let st = self.state.read();
        let mut lent = 0u64;
        let mut unsold = 0u32;
        let mut chunk = BTreeMap::new();
        for d in &st.devices {
            chunk.insert(
                d.rec.name.clone(),
                self.harvest_cfg(&d.rec.geometry).chunk_blocks,
            );
        }
        for rt in st.harvest.gssds.values() {
            if let Some(e) = st.vssds.get(&rt.name) {
                match &rt.home {
                    Some(_) => lent += ghost_meta(&e.rec).map_or(0, |m| m.capacity_blocks),
                    None => unsold += channels_of(&e.rec.extents).len() as u32,
                }
            }
        }
        let in_use = st
            .harvest
            .pools
            .values()
            .flat_map(|p| p.iter())
            .filter(|g| g.in_use())
            .count();
        HarvestStatus {
            enabled: self.harvest_settings.enabled,
            settings: self.harvest_settings.clone(),
            chunk_blocks: chunk,
            gssds: st.harvest.gssds.len(),
            gssds_in_use: in_use,
            lent_blocks: lent,
            unsold_channels: unsold,
            volumes: st.harvest.volumes.len(),
            migrations: st.harvest.migrations.len(),
            evicting: st
                .harvest
                .volumes
                .values()
                .filter(|v| v.rec.evict_by.is_some())
                .count(),
            predictions: st
                .harvest
                .predictors
                .iter()
                .filter_map(|(n, rt)| {
                    use predict::Predictor;
                    let p = rt.p.predict(self.clock.now()).ok()?;
                    Some((
                        n.clone(),
                        PredictionInfo {
                            warm: p.warm,
                            bandwidth_level: p.bandwidth,
                            capacity_level: p.capacity,
                            spare_levels: (p.spare_bandwidth, p.spare_capacity),
                            duration_s: secs(p.duration),
                        },
                    ))
                })
                .collect(),
            events: HarvestEventKind::ALL
                .iter()
                .map(|k| {
                    (
                        k.name().to_string(),
                        st.harvest.counts.get(k).copied().unwrap_or(0),
                    )
                })
                .collect(),
        }
    }

    /// Request counters of every harvest volume's export (for metrics).
    pub fn harvest_volume_io(&self) -> Vec<(String, StatsSnapshot)> {
        let st = self.state.read();
        st.harvest
            .volumes
            .values()
            .map(|v| (v.rec.name.clone(), v.io.snapshot()))
            .collect()
    }

    pub(super) fn harvest_export(&self, st: &State, name: &str) -> Option<nbd::Export> {
        let v = st.harvest.volumes.get(name)?;
        Some(nbd::Export {
            name: v.rec.name.clone(),
            description: format!(
                "flexssd harvest volume of {}, {} on {} gSSD(s)",
                v.rec.tenant,
                format_size(v.rec.size_bytes),
                v.rec.segments.len()
            ),
            dev: v.export.clone(),
            pace: match self.mode {
                Mode::Fast => None,
                Mode::Emulation => Some(self.clock.clone()),
            },
            gate: v.gate.clone().map(|g| g as Arc<dyn blockdev::Gate>),
        })
    }

    pub(super) fn harvest_export_list(st: &State) -> Vec<(String, String)> {
        st.harvest
            .volumes
            .values()
            .map(|v| {
                (
                    v.rec.name.clone(),
                    format!("flexssd harvest volume of {}", v.rec.tenant),
                )
            })
            .collect()
    }
}

mod priority;

#[cfg(test)]
mod tests;
