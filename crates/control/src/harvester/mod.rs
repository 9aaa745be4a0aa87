//! BlockFlex storage harvesting on a host (OSDI'22 §4.3–4.5), as a component of
//! its own.
//!
//! The decisions (which gSSD fits a demand, when a released gSSD goes back to the
//! pool or home, what early reclamation does) live in the I/O-free `harvest`
//! crate; what a regular vSSD lends and for how long is a [`LendPolicy`] (one
//! file per policy under [`policy`]). The [`Harvester`] carries them out on real
//! flash, which it reaches only through the narrow [`HarvestHost`] trait: lend
//! blocks, take them back, create and erase a gSSD's vSSD, and publish an export.
//! The host reaches the harvester only through [`Harvesting`]: its
//! [`ReclaimHook`] (when a vSSD is created or deleted), the period's two
//! halves, harvest volumes and the state the API reads.
//!
//! * **gSSDs are vSSDs.** A gSSD is an ordinary vSSD record of kind
//!   [`TenantKind::Ghost`](crate::TenantKind::Ghost) with its own FTL, placed either
//!   on a regular vSSD's *lent* blocks (the top of its extent on each channel, which
//!   its FTL has emptied: `ftl::Vssd::lend`) or on whole unsold channels. So the
//!   home and the gSSD never share a block, the host's crash ordering (creating →
//!   active → deleting, erase before the record goes) covers gSSDs too, and a
//!   gSSD's blocks are always erased before they change hands. gSSDs are not
//!   exported on their own.
//! * **Harvest volumes** are what harvest tenants use: one NBD export whose LBA
//!   space is backed by one or more gSSDs (Figure 12), through
//!   [`gvol::GhostVolume`]. One volume per request, fixed size, because an NBD
//!   export cannot change size under a connected client.
//! * **Early reclamation** (a home needs its blocks back, a regular vSSD needs
//!   unsold channels, an assigned gSSD expires): the volume migrates online to a
//!   replacement, or gets an eviction notice and `eviction_grace_s` to move off.
//!
//! # Locks
//!
//! The harvester's maps sit behind one mutex that guards map updates only: it is
//! never held across training, an erase, a store write or a migration, so the
//! API's reads of the harvest state and NBD handshakes of harvest volumes wait at
//! most for a map update. The policy has its own mutex, taken only by the
//! harvester's period. Operations that change flash (a tick, a volume's creation
//! or release, a reclaim hook) are serialised by the host's lifecycle lock, which
//! the host holds when it calls them and which no read takes; [`Harvester::observe`]
//! (sampling and training) runs before the host takes it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use blockdev::{BlockDev, IoStats};
use clock::{Clock, Nanos, SEC};
use flash::{Backend, FlashDevice, Geometry, Timing};
use ftl::{Extent, Vssd};
use gvol::{GhostVolume, MigrationHandle};
use harvest::{GssdId, GssdPool, HarvestConfig, RefreshTimer};
use parking_lot::{Mutex, MutexGuard};
use tracing::info;

use crate::config::HarvestSettings;
use crate::exports::Exports;
use crate::store::{GhostMeta, HarvestVolumeRecord, VssdRecord};
use crate::{ControlStore, Mode, Result};

mod api;
mod demand;
mod lending;
pub mod policy;
mod priority;
mod reclaim;
mod recovery;
mod volumes;

pub use api::{
    GssdInfo, HarvestEvent, HarvestEventKind, HarvestRequest, HarvestStatus, HarvestVolumeInfo,
    MigrationInfo, PredictionInfo,
};
pub use lend::{HomeSample, LendPolicy, Lendable, Offer, UnsoldPolicy};
pub use volumes::TenantSource;

/// Events kept in memory for `GET /v1/events` (older ones are dropped; every event
/// is also logged through `tracing`).
const EVENT_LOG: usize = 4096;

/// A flash device, as the harvester sees it.
#[derive(Clone)]
pub struct DeviceView {
    /// Device name.
    pub name: String,
    /// Its geometry.
    pub geometry: Geometry,
    /// Its timing.
    pub timing: Timing,
    /// Memory or file.
    pub backend: Backend,
    /// The device (for the priority gate's view of its dies).
    pub flash: Arc<FlashDevice>,
    /// Channels no vSSD uses.
    pub free_channels: Vec<u32>,
}

/// A regular vSSD that may lend its idle flash (a *home*).
#[derive(Clone)]
pub struct HomeView {
    /// vSSD name.
    pub name: String,
    /// Its record id.
    pub id: u64,
    /// Its device.
    pub device: String,
    /// Its flash.
    pub extents: Vec<Extent>,
    /// Exported bytes.
    pub capacity_bytes: u64,
    /// Its FTL.
    pub vssd: Arc<Vssd>,
    /// Requests its clients issued.
    pub io: Arc<IoStats>,
}

impl HomeView {
    /// The channels it owns, sorted.
    pub fn channels(&self) -> Vec<u32> {
        channels_of(&self.extents)
    }
}

/// A gSSD's hidden vSSD, as the host made it.
#[derive(Clone)]
pub struct GhostDev {
    /// Its vSSD record id.
    pub id: u64,
    /// vSSD name (`gssd-<id>`).
    pub name: String,
    /// Usable bytes.
    pub capacity_bytes: u64,
    /// Its FTL.
    pub vssd: Arc<Vssd>,
}

/// What the harvester needs of its host, and nothing more. The host carries out
/// each call with its own crash ordering; none of them is made with a harvester
/// lock held.
pub trait HarvestHost {
    /// The host's flash devices.
    fn devices(&self) -> Vec<DeviceView>;
    /// The active regular vSSDs that may lend (tier caches excepted).
    fn homes(&self) -> Vec<HomeView>;
    /// The active harvest tenants' vSSDs (whose demand predictors may ask
    /// for flash).
    fn harvest_tenants(&self) -> Vec<HomeView>;
    /// The active vSSD of that name, if it is a harvest tenant's: `Ok(false)` if
    /// it is another tenant's.
    fn is_harvest_tenant(&self, name: &str) -> Result<bool>;
    /// Whether a vSSD or tier owns `name` already.
    fn name_taken(&self, name: &str) -> bool;
    /// The tenant that owns vSSD `name` (its exports go to that tenant only).
    fn tenant_of(&self, name: &str) -> Option<String>;
    /// Every gSSD vSSD the host recorded, with its FTL (at start-up).
    fn ghosts(&self) -> Vec<(VssdRecord, Arc<Vssd>)>;
    /// Empties `blocks` per plane at the top of `home`'s extent on each of
    /// `channels` and records them lent; returns the lent extents.
    fn lend(&self, home: &str, channels: &[u32], blocks: u32) -> Result<Vec<Extent>>;
    /// Erases `extents` and gives them back to `home`'s FTL; returns when the
    /// erases complete on the modelled device.
    fn take_back(&self, home: &str, extents: &[Extent]) -> Result<Nanos>;
    /// Records and builds the hidden vSSD of a gSSD on `extents`.
    fn create_ghost(&self, device: &str, extents: Vec<Extent>, meta: GhostMeta)
        -> Result<GhostDev>;
    /// Erases a gSSD's vSSD and drops its record; returns when the erases
    /// complete on the modelled device.
    fn destroy_ghost(&self, name: &str) -> Result<Nanos>;
    /// Erases a gSSD's vSSD and gives it a fresh FTL on the same blocks.
    fn reformat_ghost(&self, name: &str) -> Result<Arc<Vssd>>;
    /// The host's export registry (harvest volumes are published there).
    fn exports(&self) -> &Exports;
}

/// What the host's vSSD lifecycle asks of harvesting, and nothing more.
pub trait ReclaimHook: Send + Sync {
    /// Whether harvesting runs (otherwise nothing was lent and nothing needs
    /// reclaiming).
    fn enabled(&self) -> bool;
    /// Takes back unsold-channel gSSDs of `device` until `want` channels are free.
    fn reclaim_unsold(&self, host: &dyn HarvestHost, device: &str, want: u32) -> Result<()>;
    /// Takes back the gSSD whose vSSD is `ghost`, because `why`. `Ok(false)`:
    /// `ghost` is not one of the harvester's gSSDs, and nothing was done.
    fn reclaim_ghost(&self, host: &dyn HarvestHost, ghost: &str, why: &str) -> Result<bool>;
    /// Takes back every gSSD `home` lent (before it is deleted; a no-op for a
    /// vSSD that lent nothing); refuses with the eviction deadline while a
    /// volume still has to move off.
    fn reclaim_home(&self, host: &dyn HarvestHost, home: &str) -> Result<()>;
    /// The harvest volumes of a harvest tenant.
    fn volumes_of(&self, tenant: &str) -> Vec<String>;
    /// Whether `name` is a harvest volume.
    fn is_volume(&self, name: &str) -> bool;
}

/// Everything the host asks of harvesting, and the only way it reaches the
/// harvester: the vSSD lifecycle's [`ReclaimHook`], the period in its two
/// halves, harvest volumes, and the state the API reads. [`Harvester`] is the
/// implementation; the host holds a `dyn Harvesting`, so what it may ask is
/// this list and nothing else.
pub trait Harvesting: ReclaimHook {
    /// Its settings.
    fn settings(&self) -> &HarvestSettings;
    /// Rebuilds the harvest state from the store at start-up.
    ///
    /// # Errors
    /// When the store or the flash cannot be read back.
    fn open(&self, host: &dyn HarvestHost) -> Result<()>;
    /// The first half of a period: the policy learns (no host lock held).
    ///
    /// # Errors
    /// A home's predictor failed.
    fn observe(&self, host: &dyn HarvestHost) -> Result<()>;
    /// The second half: the acts of [`lend::run_period`] (the host holds its
    /// lifecycle lock). Returns the number of events raised.
    ///
    /// # Errors
    /// The first act that failed.
    fn tick(&self, host: &dyn HarvestHost) -> Result<usize>;
    /// Between periods, homes' write paths asked for their lent flash back:
    /// early reclamation where needed, now; the evictions of the homes in
    /// `out` (a write waiting with no room) fall due at once. The host holds
    /// its lifecycle lock.
    ///
    /// # Errors
    /// The first reclamation that failed.
    fn reclaim_pressed(&self, host: &dyn HarvestHost, out: &[String]) -> Result<()>;
    /// A harvest tenant asks for flash (the host holds its lifecycle lock).
    ///
    /// # Errors
    /// The harvester is off, the request is invalid, or no gSSDs cover it.
    fn create_volume(
        &self,
        host: &dyn HarvestHost,
        req: &HarvestRequest,
        tenant: &TenantSource,
    ) -> Result<HarvestVolumeInfo>;
    /// A harvest volume is released: its gSSDs go back, erased.
    ///
    /// # Errors
    /// No such volume, or the erase failed.
    fn release_volume(&self, host: &dyn HarvestHost, name: &str) -> Result<()>;
    /// Every harvest volume.
    fn volumes(&self) -> Vec<HarvestVolumeInfo>;
    /// One harvest volume.
    ///
    /// # Errors
    /// No such volume.
    fn volume(&self, name: &str) -> Result<HarvestVolumeInfo>;
    /// Every gSSD, by id.
    fn gssds(&self) -> Vec<GssdInfo>;
    /// Events after sequence number `since`, oldest first.
    fn events(&self, since: u64) -> Vec<HarvestEvent>;
    /// The pool at a glance.
    fn status(&self) -> HarvestStatus;
    /// Request counters of every harvest volume's export.
    fn volume_io(&self) -> Vec<(String, blockdev::StatsSnapshot)>;
}

impl Harvesting for Harvester {
    fn settings(&self) -> &HarvestSettings {
        Harvester::settings(self)
    }
    fn open(&self, host: &dyn HarvestHost) -> Result<()> {
        Harvester::open(self, host)
    }
    fn observe(&self, host: &dyn HarvestHost) -> Result<()> {
        Harvester::observe(self, host)
    }
    fn tick(&self, host: &dyn HarvestHost) -> Result<usize> {
        Harvester::tick(self, host)
    }
    fn reclaim_pressed(&self, host: &dyn HarvestHost, out: &[String]) -> Result<()> {
        if !self.settings.enabled {
            return Ok(());
        }
        Harvester::reclaim_pressed(self, host, out)
    }
    fn create_volume(
        &self,
        host: &dyn HarvestHost,
        req: &HarvestRequest,
        tenant: &TenantSource,
    ) -> Result<HarvestVolumeInfo> {
        Harvester::create_volume(self, host, req, tenant)
    }
    fn release_volume(&self, host: &dyn HarvestHost, name: &str) -> Result<()> {
        Harvester::release_volume(self, host, name)
    }
    fn volumes(&self) -> Vec<HarvestVolumeInfo> {
        Harvester::volumes(self)
    }
    fn volume(&self, name: &str) -> Result<HarvestVolumeInfo> {
        Harvester::volume(self, name)
    }
    fn gssds(&self) -> Vec<GssdInfo> {
        Harvester::gssds(self)
    }
    fn events(&self, since: u64) -> Vec<HarvestEvent> {
        Harvester::events(self, since)
    }
    fn status(&self) -> HarvestStatus {
        Harvester::status(self)
    }
    fn volume_io(&self) -> Vec<(String, blockdev::StatsSnapshot)> {
        Harvester::volume_io(self)
    }
}

pub(crate) struct GhostRt {
    name: String,
    device: String,
    home: Option<String>,
    extents: Vec<Extent>,
    capacity_bytes: u64,
    meta: GhostMeta,
    vssd: Arc<Vssd>,
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

pub(crate) struct VolumeRt {
    rec: HarvestVolumeRecord,
    vol: Arc<GhostVolume>,
    io: Arc<IoStats>,
    /// The volume behind its statistics layer: what NBD clients talk to.
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

/// The harvester's maps: what the API reads and what a period updates.
#[derive(Default)]
struct HarvestState {
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
    /// Capacity granule per device, blocks (for `harvest status`).
    chunks: BTreeMap<String, u64>,
    /// Homes that took their flash back early, and when: they lend nothing
    /// again for one duration granule (so a busy tenant is not harvested again
    /// the moment it got its blocks back).
    cooling: lend::Cooling<String>,
    /// The policy's latest predictions, published after each observation so
    /// that `harvest status` never waits on training.
    predictions: BTreeMap<String, PredictionInfo>,
    /// Harvest tenants' demand predictions (`auto_request`), published alike.
    demand: BTreeMap<String, PredictionInfo>,
}

impl HarvestState {
    fn volume_of_gssd(&self, id: GssdId) -> Option<String> {
        self.volumes
            .values()
            .find(|v| v.rec.segments.iter().any(|s| s.gssd == id))
            .map(|v| v.rec.name.clone())
    }

    fn pool(&mut self, device: &str) -> &mut GssdPool {
        self.pools.get_mut(device).expect("a pool per device")
    }
}

/// BlockFlex's harvester on one host.
pub struct Harvester {
    settings: HarvestSettings,
    clock: Arc<dyn Clock>,
    mode: Mode,
    store: Arc<ControlStore>,
    state: Mutex<HarvestState>,
    policy: Mutex<policy::PolicyRt>,
    unsold: Mutex<Box<dyn UnsoldPolicy>>,
    /// Harvest tenants' demand predictors (`auto_request`); taken by the
    /// period's two halves only.
    demand: Mutex<demand::DemandRt>,
}

impl std::fmt::Debug for Harvester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("Harvester")
            .field("enabled", &self.settings.enabled)
            .field("gssds", &st.gssds.len())
            .field("volumes", &st.volumes.len())
            .finish()
    }
}

/// Predictions by vSSD key, as the API shows them by vSSD name.
fn prediction_infos(
    predictions: Vec<(u64, predict::Prediction)>,
    views: &[HomeView],
) -> BTreeMap<String, PredictionInfo> {
    predictions
        .into_iter()
        .filter_map(|(id, p)| {
            let name = views.iter().find(|h| h.id == id)?.name.clone();
            Some((
                name,
                PredictionInfo {
                    warm: p.warm,
                    bandwidth_level: p.bandwidth,
                    capacity_level: p.capacity,
                    spare_levels: (p.spare_bandwidth, p.spare_capacity),
                    duration_s: p.duration / SEC,
                },
            ))
        })
        .collect()
}

fn channels_of(extents: &[Extent]) -> Vec<u32> {
    let mut c: Vec<u32> = extents.iter().map(|e| e.channel).collect();
    c.sort_unstable();
    c.dedup();
    c
}

fn secs(ns: Nanos) -> u64 {
    ns / SEC
}

/// Flash blocks a gSSD on `channels` channels of `geo` needs to export `bytes`:
/// its FTL keeps 12.5% over-provisioning and GC's working room per die
/// (`ftl::default_capacity`), so small gSSDs need proportionally more.
fn blocks_for(geo: &Geometry, bytes: u64, channels: u32) -> u64 {
    let per_block = geo.block_bytes();
    // GC's room: 5 blocks (background GC's trigger, the open block and the
    // reserve) per die, as `ftl::max_capacity` keeps.
    // In u128: a request may ask for any u64 of bytes, and an absurd one must
    // come out as more blocks than any pool has (refused as too big), not as
    // an overflow.
    let units = u128::from(channels) * u128::from(geo.dies_per_channel);
    let (bytes, per_block) = (u128::from(bytes), u128::from(per_block));
    let data = bytes.div_ceil(per_block);
    let blocks = (bytes * 8)
        .div_ceil(7 * per_block)
        .max(data + units * 5)
        .max((bytes * 100).div_ceil(95 * per_block));
    u64::try_from(blocks).unwrap_or(u64::MAX)
}

impl Harvester {
    /// A harvester with no gSSDs yet; [`Harvester::open`] rebuilds its state from
    /// the store.
    pub fn new(
        settings: HarvestSettings,
        clock: Arc<dyn Clock>,
        mode: Mode,
        store: Arc<ControlStore>,
    ) -> Self {
        let policy = policy::lend_policy(&settings);
        let unsold = policy::unsold_policy(&settings);
        let demand = demand::DemandRt::new(&settings);
        Self {
            settings,
            clock,
            mode,
            store,
            state: Mutex::new(HarvestState::default()),
            policy: Mutex::new(policy::PolicyRt::new(policy)),
            unsold: Mutex::new(unsold),
            demand: Mutex::new(demand),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &HarvestSettings {
        &self.settings
    }

    fn lock(&self) -> MutexGuard<'_, HarvestState> {
        self.state.lock()
    }

    fn harvest_cfg(&self, geo: &Geometry) -> HarvestConfig {
        let s = &self.settings;
        HarvestConfig {
            chunk_blocks: if s.chunk_blocks == 0 {
                HarvestConfig::chunk_for_device(u64::from(geo.total_blocks()))
            } else {
                s.chunk_blocks
            },
            duration_granule_s: s.granule_s,
            refresh_interval_s: s.refresh_s,
            reclaim_horizon_s: s.reclaim_horizon_s,
            ..HarvestConfig::default()
        }
    }

    fn event(
        &self,
        st: &mut HarvestState,
        kind: HarvestEventKind,
        gssd: Option<u64>,
        volume: Option<&str>,
        home: Option<&str>,
        detail: String,
    ) {
        st.next_seq += 1;
        *st.counts.entry(kind).or_default() += 1;
        info!(event = kind.name(), gssd, volume, home, "{detail}");
        st.events.push_back(HarvestEvent {
            seq: st.next_seq,
            at_ns: self.clock.now(),
            kind,
            gssd,
            volume: volume.map(str::to_string),
            home: home.map(str::to_string),
            detail,
        });
        while st.events.len() > EVENT_LOG {
            st.events.pop_front();
        }
    }

    /// Records an event (taking the map lock briefly).
    fn emit(
        &self,
        kind: HarvestEventKind,
        gssd: Option<u64>,
        volume: Option<&str>,
        home: Option<&str>,
        detail: String,
    ) {
        let mut st = self.lock();
        self.event(&mut st, kind, gssd, volume, home, detail);
    }

    /// Points a volume's priority gate at the channels its gSSDs share with
    /// regular tenants (lent blocks; unsold channels are nobody's).
    fn refresh_gate(&self, st: &HarvestState, devices: &[DeviceView], vname: &str) {
        let Some(v) = st.volumes.get(vname) else {
            return;
        };
        let Some(gate) = &v.gate else {
            return;
        };
        let mut shared = Vec::new();
        let mut ids: Vec<GssdId> = v.rec.segments.iter().map(|s| s.gssd).collect();
        ids.extend(
            st.migrations
                .iter()
                .filter(|m| m.volume == vname)
                .map(|m| m.to),
        );
        for id in ids {
            let Some(g) = st.gssds.get(&id).filter(|g| g.home.is_some()) else {
                continue;
            };
            let Some(d) = devices.iter().find(|d| d.name == g.device) else {
                continue;
            };
            for c in channels_of(&g.extents) {
                shared.push((d.flash.clone(), c));
            }
        }
        gate.set_shared(shared);
    }

    // ---- the harvester's period ------------------------------------------------

    /// The first half of a period: samples every home's counters and lets the
    /// policy learn from them (the predicted policy trains its LSTMs here). Takes
    /// no lock that I/O, NBD handshakes or API reads take; the host calls it
    /// before its lifecycle lock. Does nothing while harvesting is off.
    pub fn observe(&self, host: &dyn HarvestHost) -> Result<()> {
        if !self.settings.enabled {
            return Ok(());
        }
        let now = self.clock.now();
        let devices = host.devices();
        let homes = host.homes();
        let mut rt = self.policy.lock();
        let samples = rt.sampler.sample(&homes, &devices, now);
        rt.policy.observe(now, &samples).map_err(|e| {
            let lend::PolicyError::Predictor { home, source } = e;
            crate::ControlError::Predictor {
                vssd: homes
                    .iter()
                    .find(|h| h.id == home)
                    .map_or_else(|| format!("vSSD id {home}"), |h| h.name.clone()),
                message: source.to_string(),
            }
        })?;
        let predictions = prediction_infos(rt.policy.predictions(), &homes);
        drop(rt);
        self.lock().predictions = predictions;
        self.observe_demand(host, &devices, now)
    }

    /// The second half of a period: finish migrations, carry out due
    /// evictions, take flash back where homes need it, refresh expiries, and
    /// lend what is idle, in the order [`lend::run_period`] gives the fleet
    /// simulator too. The host holds its lifecycle lock. Returns the number
    /// of events raised.
    pub fn tick(&self, host: &dyn HarvestHost) -> Result<usize> {
        if !self.settings.enabled {
            return Ok(0);
        }
        let before = self.lock().next_seq;
        lend::run_period(&mut HostPeriod { h: self, host })?;
        Ok((self.lock().next_seq - before) as usize)
    }
}

/// A period's acts on this host's flash.
struct HostPeriod<'a> {
    h: &'a Harvester,
    host: &'a dyn HarvestHost,
}

impl lend::PeriodSteps for HostPeriod<'_> {
    type Error = crate::ControlError;

    fn finish_migrations(&mut self) -> Result<()> {
        self.h.finish_migrations(self.host)
    }

    fn due_evictions(&mut self) -> Result<()> {
        self.h.due_evictions(self.host)
    }

    fn reclaim_where_needed(&mut self) -> Result<()> {
        self.h.reclaim_where_needed(self.host)
    }

    fn refresh_due(&mut self) -> bool {
        self.h.refresh_due()
    }

    fn refresh(&mut self) -> Result<()> {
        self.h.refresh(self.host)
    }

    fn lend_idle(&mut self) -> Result<()> {
        self.h.lend_idle(self.host)
    }

    fn serve_demand(&mut self) -> Result<()> {
        self.h.serve_demand(self.host)
    }
}

#[cfg(test)]
mod tests;
