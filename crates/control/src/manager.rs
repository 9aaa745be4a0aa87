//! The host manager: devices, vSSD lifecycle, and the NBD export registry.
//!
//! One [`HostManager`] owns the flash devices of a host and the vSSDs carved out of
//! them. It is the only writer of the control store, and it orders every lifecycle
//! step so that a crash at any point leaves a state that the next
//! [`HostManager::open`] can finish:
//!
//! * **create**: record `creating` (with a fresh, never reused id) → build the FTL →
//!   record `active`. A `creating` record found at startup is erased and dropped.
//! * **delete**: record `deleting` → erase every block (`Vssd::destroy`) → drop the
//!   record, which frees the channels. A `deleting` record found at startup is
//!   erased again and dropped, so flash is always erased before anyone else gets it.
//!
//! The manager has no background threads and reads no wall clock; the daemon and
//! the simulator give it their [`Clock`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use blockdev::{BlockDev, IoStats};
use clock::Clock;
use flash::{Backend, FlashDevice};
use ftl::{CheckpointStore, DirCheckpoints, Extent, Vssd, VssdConfig};
use parking_lot::{Mutex, RwLock};
use tracing::{info, warn};

use crate::config::{valid_name, SchedulerSettings};
use crate::exports::{ExportKind, Exports, Publish};
use crate::harvester::{Harvester, Harvesting};
use crate::store::{DeviceRecord, VssdRecord, VssdState};
use crate::{format_size, BlockRange, Config, ControlError, ControlStore, Mode, Result, VssdSpec};

struct DeviceEntry {
    rec: DeviceRecord,
    dev: Arc<FlashDevice>,
    sched: SchedulerSettings,
}

#[derive(Clone)]
struct VssdEntry {
    rec: VssdRecord,
    vssd: Arc<Vssd>,
    export: Arc<dyn BlockDev>,
    io: Arc<IoStats>,
    /// Its admission gate on its unit's scheduler (when the device schedules).
    gate: Option<sched::TenantGate>,
}

/// A scheduling unit: the vSSDs on exactly these channels of this device.
type UnitKey = (String, Vec<u32>);

#[derive(Default)]
struct State {
    devices: Vec<DeviceEntry>,
    vssds: BTreeMap<String, VssdEntry>,
    units: BTreeMap<UnitKey, Arc<sched::Scheduler>>,
    /// Cache tiers, by name.
    tiers: BTreeMap<String, self::tier::TierEntry>,
}

impl State {
    /// The active vSSD of that name (not one being deleted).
    fn active(&self, name: &str) -> Result<&VssdEntry> {
        self.vssds
            .get(name)
            .filter(|e| e.rec.state == VssdState::Active)
            .ok_or_else(|| ControlError::NoSuchVssd(name.into()))
    }

    /// Whether `name` is a gSSD's hidden vSSD.
    fn is_ghost(&self, name: &str) -> bool {
        self.vssds
            .get(name)
            .is_some_and(|e| matches!(e.rec.kind, crate::store::TenantKind::Ghost(_)))
    }

    fn device(&self, name: &str) -> Result<&DeviceEntry> {
        self.devices
            .iter()
            .find(|d| d.rec.name == name)
            .ok_or_else(|| ControlError::NoSuchDevice(name.into()))
    }

    fn used_channels(&self, device: &str) -> BTreeSet<u32> {
        self.vssds
            .values()
            .filter(|v| v.rec.device == device)
            .flat_map(|v| v.rec.extents.iter().map(|e| e.channel))
            .collect()
    }

    fn free_channels(&self, d: &DeviceEntry) -> Vec<u32> {
        let used = self.used_channels(&d.rec.name);
        (0..d.rec.geometry.channels)
            .filter(|c| !used.contains(c))
            .collect()
    }
}

/// Owns a host's flash devices and vSSDs, and their persistent records.
/// Thread-safe; lifecycle operations are serialised, reads are not blocked by them
/// for longer than a map update.
pub struct HostManager {
    clock: Arc<dyn Clock>,
    mode: Mode,
    /// Where every vSSD puts its host pages among its units (the config's
    /// `placement`, resolved for `mode`).
    placement: ftl::Placement,
    store: Arc<ControlStore>,
    ckpt: Arc<dyn CheckpointStore>,
    /// Serialises lifecycle operations (vSSD create and delete, the harvester's
    /// period, harvest volumes); held across erases and store writes, never
    /// taken by reads or NBD handshakes.
    lifecycle: Mutex<()>,
    /// Serialises the harvester's periods (the background tick and
    /// `POST /v1/harvest/tick`), so that a period's lending, under the
    /// lifecycle lock, never waits for another period's training.
    harvest_period: Mutex<()>,
    /// Devices, vSSDs, units and tiers; guards map updates only.
    state: RwLock<State>,
    /// What NBD clients can open; its own lock, so a handshake waits for
    /// nothing else.
    exports: Exports,
    /// BlockFlex harvesting, reached only through its trait ([`Harvesting`],
    /// whose [`ReclaimHook`](crate::harvester::ReclaimHook) the vSSD lifecycle
    /// calls); it reaches the host through `HarvestHost`.
    harvester: Arc<dyn Harvesting>,
    /// Homes whose write path asked for their lent flash back (see `pressure`).
    pressure: Arc<pressure::PressureBoard>,
}

impl std::fmt::Debug for HostManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.read();
        f.debug_struct("HostManager")
            .field("mode", &self.mode)
            .field(
                "devices",
                &st.devices.iter().map(|d| &d.rec.name).collect::<Vec<_>>(),
            )
            .field("vssds", &st.vssds.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> ControlError {
    move |source| ControlError::Io { what, source }
}

fn channels_of(extents: &[Extent]) -> Vec<u32> {
    extents
        .iter()
        .map(|e| e.channel)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn range_of(e: &Extent) -> BlockRange {
    BlockRange {
        start: e.first_block,
        end: e.first_block + e.blocks,
    }
}

/// A compact description of a sorted channel list: `0-3,6` (`-` when empty).
pub fn channel_list(ch: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ch.len() {
        let mut j = i;
        while j + 1 < ch.len() && ch[j + 1] == ch[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ch[i].to_string()
        } else {
            format!("{}-{}", ch[i], ch[j])
        });
        i = j + 1;
    }
    if out.is_empty() {
        return "-".into();
    }
    out.join(",")
}

impl HostManager {
    /// Opens the host described by `config`: creates `data_dir` if needed, opens the
    /// control store `<data_dir>/control.redb` and the checkpoints in
    /// `<data_dir>/checkpoints/`, reopens every device and vSSD (recovering them after
    /// a crash), finishes interrupted deletions, and on the very first start creates
    /// the configured initial vSSDs.
    pub fn open(config: &Config, clock: Arc<dyn Clock>) -> Result<Self> {
        std::fs::create_dir_all(&config.data_dir).map_err(io_err(format!(
            "creating data directory {}",
            config.data_dir.display()
        )))?;
        let store = ControlStore::open(&config.store_path())?;
        let ckpt = Arc::new(DirCheckpoints::new(config.checkpoint_dir())?);
        Self::open_with(config, clock, store, ckpt)
    }

    /// Like [`HostManager::open`] with the control store and checkpoint store given
    /// (in-memory ones for tests and the simulator). `config.data_dir` is only used
    /// for default device paths.
    pub fn open_with(
        config: &Config,
        clock: Arc<dyn Clock>,
        store: ControlStore,
        ckpt: Arc<dyn CheckpointStore>,
    ) -> Result<Self> {
        config.validate()?;
        let devices = Self::reconcile_devices(config, &store)?;
        let mut entries = Vec::with_capacity(devices.len());
        for rec in devices {
            if let Backend::File { path } = &rec.backend {
                if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .map_err(io_err(format!("creating {}", dir.display())))?;
                }
            }
            let dev =
                FlashDevice::open(&rec.backend, rec.geometry, rec.timing).map_err(|source| {
                    ControlError::Flash {
                        device: rec.name.clone(),
                        source,
                    }
                })?;
            if config
                .devices
                .iter()
                .any(|d| d.name == rec.name && d.prefault)
            {
                dev.prefault().map_err(|source| ControlError::Flash {
                    device: rec.name.clone(),
                    source,
                })?;
                info!(device = %rec.name, "prefaulted the device's memory");
            }
            info!(device = %rec.name, backend = ?rec.backend, "opened flash device");
            let sched = config
                .devices
                .iter()
                .find(|d| d.name == rec.name)
                .map(|d| d.scheduler)
                .unwrap_or_default();
            entries.push(DeviceEntry {
                rec,
                dev: Arc::new(dev),
                sched,
            });
        }
        let store = Arc::new(store);
        let mgr = Self {
            exports: Exports::new(config.mode, clock.clone()),
            harvester: Arc::new(Harvester::new(
                config.harvest.clone(),
                clock.clone(),
                config.mode,
                store.clone(),
            )),
            clock,
            mode: config.mode,
            placement: config.placement.resolve(config.mode),
            store,
            ckpt,
            lifecycle: Mutex::new(()),
            harvest_period: Mutex::new(()),
            pressure: Arc::default(),
            state: RwLock::new(State {
                devices: entries,
                vssds: BTreeMap::new(),
                units: BTreeMap::new(),
                tiers: BTreeMap::new(),
            }),
        };
        for rec in mgr.store.vssds()? {
            match rec.state {
                VssdState::Active => mgr.reopen_vssd(rec)?,
                VssdState::Creating | VssdState::Deleting => {
                    info!(vssd = %rec.name, state = ?rec.state, "finishing an interrupted lifecycle operation: erasing the vSSD");
                    mgr.finish_delete(&rec)?;
                }
            }
        }
        if !mgr.store.initialized()? {
            for spec in &config.vssds {
                if mgr.state.read().vssds.contains_key(&spec.name) {
                    continue;
                }
                mgr.create_vssd(spec).map_err(|e| {
                    ControlError::Config(format!(
                        "creating initial vSSD {:?} from [[vssds]]: {e}",
                        spec.name
                    ))
                })?;
            }
            mgr.store.set_initialized()?;
        }
        mgr.harvester.open(&mgr)?;
        mgr.open_tiers(config)?;
        Ok(mgr)
    }

    /// Merges the configured devices with the recorded ones: new devices are
    /// recorded, recorded devices keep their geometry and backend, timing follows
    /// the configuration; recorded devices missing from the configuration stay.
    fn reconcile_devices(config: &Config, store: &ControlStore) -> Result<Vec<DeviceRecord>> {
        let recorded = store.devices()?;
        let mut out = Vec::new();
        for d in &config.devices {
            let rec = DeviceRecord {
                name: d.name.clone(),
                backend: config.backend_of(d),
                geometry: d.geometry,
                timing: d.timing,
            };
            match recorded.iter().find(|r| r.name == d.name) {
                Some(old) if old.geometry != rec.geometry => {
                    return Err(ControlError::Config(format!(
                        "device {}: the configured geometry {:?} differs from the recorded one {:?}; a device's geometry cannot change (use a new device name or a new data_dir)",
                        d.name, rec.geometry, old.geometry
                    )));
                }
                Some(old) if old.backend != rec.backend => {
                    if !Self::same_device_file(&old.backend, &rec.backend) {
                        return Err(ControlError::Config(format!(
                            "device {}: the configured backend {:?} differs from the recorded one {:?}; a device cannot change its backend, and a file-backed device can only move with its file (use a new device name or a new data_dir)",
                            d.name, rec.backend, old.backend
                        )));
                    }
                    warn!(device = %d.name, from = ?old.backend, to = ?rec.backend, "device file moved; updating its record");
                    store.put_device(&rec)?;
                }
                Some(old) if *old == rec => {}
                _ => store.put_device(&rec)?,
            }
            out.push(rec);
        }
        for r in recorded {
            if !out.iter().any(|d| d.name == r.name) {
                warn!(device = %r.name, "device is recorded in the control store but not configured; keeping it");
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Whether two file backends name the same file, or the recorded file is gone and
    /// the configured one exists (the data directory was moved or reached by
    /// another relative path).
    fn same_device_file(recorded: &Backend, configured: &Backend) -> bool {
        let (Backend::File { path: old }, Backend::File { path: new }) = (recorded, configured)
        else {
            return false;
        };
        match (std::fs::canonicalize(old), std::fs::canonicalize(new)) {
            (Ok(a), Ok(b)) => a == b,
            (Err(_), Ok(_)) => true,
            _ => false,
        }
    }

    fn vssd_config(rec: &VssdRecord) -> VssdConfig {
        VssdConfig {
            id: rec.id,
            name: rec.name.clone(),
            extents: rec.extents.clone(),
            capacity_bytes: rec.capacity_bytes,
            gc: rec.gc,
            lent: rec.lent.clone(),
        }
    }

    fn device_of(&self, rec: &VssdRecord) -> Result<(Arc<FlashDevice>, Backend)> {
        let st = self.state.read();
        let d = st.device(&rec.device).map_err(|_| {
            ControlError::Store(format!(
                "vSSD {} is recorded on device {}, which is unknown",
                rec.name, rec.device
            ))
        })?;
        Ok((d.dev.clone(), d.rec.backend.clone()))
    }

    /// Whether `name` is still the vSSD with record id `id` (`None`: any).
    fn expect_id(&self, name: &str, id: Option<u32>) -> Result<()> {
        match id {
            Some(id) if self.state.read().vssds.get(name).map(|e| e.rec.id) != Some(id) => {
                Err(ControlError::NoSuchVssd(name.into()))
            }
            _ => Ok(()),
        }
    }

    fn insert_entry(&self, rec: VssdRecord, vssd: Arc<Vssd>, publish: bool) {
        let mut st = self.state.write();
        self.insert_entry_locked(&mut st, rec, vssd, publish);
    }

    /// Records a vSSD's runtime entry; an active, non-ghost vSSD is also
    /// exported unless `publish` is false (a tier's cache vSSD is the tier's
    /// alone, and never visible to NBD clients, not even for a moment).
    fn insert_entry_locked(&self, st: &mut State, rec: VssdRecord, vssd: Arc<Vssd>, publish: bool) {
        // Before anyone writes to it (the vSSD is new to the manager, so no
        // other thread holds its lock).
        vssd.set_placement(self.placement);
        self.hook_pressure(&vssd);
        let w = self.exports.wrap(vssd.clone());
        let (export, io) = (w.export, w.io);
        let gate = self.attach_gate(st, &rec);
        if publish
            && rec.state == VssdState::Active
            && !matches!(rec.kind, crate::store::TenantKind::Ghost(_))
        {
            // gSSDs are never exported on their own; a tier hides its cache
            // vSSD when it takes it.
            self.exports.add(
                &rec.name,
                Publish {
                    kind: ExportKind::Vssd,
                    order: u64::from(rec.id),
                    description: Self::describe(&rec),
                    dev: export.clone(),
                    gate: gate.clone().map(|g| Arc::new(g) as Arc<dyn blockdev::Gate>),
                    owner: rec.tenant.clone(),
                },
            );
        }
        st.vssds.insert(
            rec.name.clone(),
            VssdEntry {
                rec,
                vssd,
                export,
                io,
                gate,
            },
        );
    }

    fn reopen_vssd(&self, rec: VssdRecord) -> Result<()> {
        let (dev, backend) = self.device_of(&rec)?;
        let cfg = Self::vssd_config(&rec);
        let vssd = if backend == Backend::Memory {
            // A memory device starts empty at every run: so do its vSSDs.
            warn!(vssd = %rec.name, device = %rec.device, "device is memory-backed: the vSSD starts empty");
            self.ckpt.remove(rec.id)?;
            Vssd::create(dev, cfg, self.clock.clone(), self.ckpt.clone())?
        } else {
            Vssd::open(dev, cfg, self.clock.clone(), self.ckpt.clone())?
        };
        info!(vssd = %rec.name, device = %rec.device, channels = %channel_list(&channels_of(&rec.extents)), "vSSD recovered");
        self.insert_entry(rec, vssd, true);
        Ok(())
    }

    /// Erases a vSSD that a crash left `creating` or `deleting`, then drops its record.
    fn finish_delete(&self, rec: &VssdRecord) -> Result<()> {
        let (dev, _) = self.device_of(rec)?;
        let via_ftl = Vssd::open(
            dev.clone(),
            Self::vssd_config(rec),
            self.clock.clone(),
            self.ckpt.clone(),
        )
        .and_then(|v| v.destroy());
        if let Err(e) = via_ftl {
            warn!(vssd = %rec.name, error = %e, "could not destroy the vSSD through its FTL; erasing its blocks directly");
            self.erase_extents(&dev, &rec.extents)?;
            self.ckpt.remove(rec.id)?;
        }
        self.store.remove_vssd(&rec.name)?;
        info!(vssd = %rec.name, "vSSD erased and removed");
        Ok(())
    }

    fn erase_extents(&self, dev: &FlashDevice, extents: &[Extent]) -> Result<()> {
        let geo = *dev.geometry();
        for e in extents {
            for die in 0..geo.dies_per_channel {
                for plane in 0..geo.planes_per_die {
                    for b in e.first_block..e.first_block + e.blocks {
                        dev.erase(geo.block_id(e.channel, die, plane, b), self.clock.now())
                            .map_err(|source| ControlError::Flash {
                                device: "erase".into(),
                                source,
                            })?;
                    }
                }
            }
        }
        dev.sync().map_err(|source| ControlError::Flash {
            device: "sync".into(),
            source,
        })?;
        Ok(())
    }

    /// The reply timing of the exports.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The clock everything is timed with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Creates a vSSD (see [`VssdSpec`] for the choices and their defaults).
    pub fn create_vssd(&self, spec: &VssdSpec) -> Result<VssdInfo> {
        self.create_vssd_as(spec, true)
    }

    /// [`Self::create_vssd`]; with `publish` false the vSSD is not exported.
    pub(super) fn create_vssd_as(&self, spec: &VssdSpec, publish: bool) -> Result<VssdInfo> {
        let _g = self.lifecycle.lock();
        if !valid_name(&spec.name) {
            return Err(ControlError::InvalidName(spec.name.clone()));
        }
        if let Some(t) = spec.tenant.as_deref().filter(|t| !valid_name(t)) {
            return Err(ControlError::InvalidTenant(t.to_string()));
        }
        if let Some(sla) = &spec.sla {
            Self::check_sla(&spec.name, sla)?;
        }
        if self.state.read().vssds.contains_key(&spec.name) || self.harvester.is_volume(&spec.name)
        {
            return Err(ControlError::Duplicate(spec.name.clone()));
        }
        if spec
            .name
            .strip_prefix("gssd-")
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(ControlError::ReservedName(spec.name.clone()));
        }
        if let Some(tier) = self.state.read().tier_owning(&spec.name) {
            return Err(ControlError::TierName {
                name: spec.name.clone(),
                tier: tier.to_string(),
            });
        }
        let (drec, dev, extents) = match self.place(spec) {
            Err(ControlError::NotEnoughChannels { device, .. })
                if self.harvester.enabled() && spec.channels.is_some() =>
            {
                // Unsold channels lent to harvest tenants come back first.
                let want = spec.channels.unwrap_or(0);
                self.harvester.reclaim_unsold(self, &device, want)?;
                self.place(spec)?
            }
            // The channels may be a gSSD's: the harvester decides, and gives
            // them back if so.
            Err(ControlError::Overlap {
                other,
                channel,
                ours,
                theirs,
            }) if self.harvester.enabled() => {
                if !self.harvester.reclaim_ghost(
                    self,
                    &other,
                    "a regular vSSD asked for its channels",
                )? {
                    return Err(ControlError::Overlap {
                        other,
                        channel,
                        ours,
                        theirs,
                    });
                }
                self.place(spec)?
            }
            other => other?,
        };
        let geo = drec.geometry;
        let page = geo.page_size as u64;
        let max = ftl::max_capacity(&geo, &extents);
        let capacity = match spec.capacity {
            Some(c) if c.0 == 0 => {
                return Err(ControlError::Invalid(
                    "capacity must be more than 0 bytes".into(),
                ))
            }
            Some(c) => c.0.div_ceil(page).saturating_mul(page),
            None => ftl::default_capacity(&geo, &extents),
        };
        if capacity > max {
            return Err(ControlError::CapacityTooLarge {
                requested: capacity,
                max,
                max_human: format_size(max),
            });
        }
        let mut rec = self.store.insert_new_vssd(|id| VssdRecord {
            id,
            name: spec.name.clone(),
            device: drec.name.clone(),
            extents,
            capacity_bytes: capacity,
            gc: spec.gc,
            state: VssdState::Creating,
            sla: spec.sla.clone(),
            kind: match spec.role {
                crate::config::TenantRole::Regular => crate::store::TenantKind::Regular,
                crate::config::TenantRole::Harvest => crate::store::TenantKind::Harvest,
            },
            lent: Vec::new(),
            tenant: spec.tenant.clone(),
        })?;
        let vssd = self.build_recorded(dev, &mut rec)?;
        if let Err(e) = self.store.put_vssd(&rec) {
            // Leave the `creating` record: the next start erases the flash and drops it.
            let _ = vssd.destroy();
            return Err(e);
        }
        info!(vssd = %rec.name, device = %rec.device, channels = %channel_list(&channels_of(&rec.extents)),
              capacity = rec.capacity_bytes, "vSSD created");
        let info = Self::info(&rec);
        self.insert_entry(rec, vssd, publish);
        Ok(info)
    }

    /// Builds the FTL of a vSSD recorded as `creating` and marks the record
    /// `active` (the caller stores it); drops the record if the FTL cannot be built.
    fn build_recorded(&self, dev: Arc<FlashDevice>, rec: &mut VssdRecord) -> Result<Arc<Vssd>> {
        match Vssd::create(
            dev,
            Self::vssd_config(rec),
            self.clock.clone(),
            self.ckpt.clone(),
        ) {
            Ok(v) => {
                rec.state = VssdState::Active;
                Ok(v)
            }
            Err(e) => {
                self.store.remove_vssd(&rec.name)?;
                Err(e.into())
            }
        }
    }

    /// Deletes a vSSD: marks it `deleting`, erases all of its flash, then removes it
    /// and frees its channels. Open NBD connections to it fail from then on. Calling
    /// it again after a failure finishes the job.
    pub fn delete_vssd(&self, name: &str) -> Result<()> {
        self.delete_vssd_expecting(name, None)
    }

    /// [`Self::delete_vssd`], but only if `name` is still the vSSD whose record
    /// id is `id` (ids are never reused): a caller that checked who owns the
    /// vSSD never deletes one created under the same name since (404 instead).
    pub fn delete_vssd_expecting(&self, name: &str, id: Option<u32>) -> Result<()> {
        let _g = self.lifecycle.lock();
        self.expect_id(name, id)?;
        if self.state.read().is_ghost(name) {
            return Err(ControlError::IsGssd(name.into()));
        }
        self.harvester.reclaim_home(self, name)?;
        if let Some(v) = self.harvester.volumes_of(name).into_iter().next() {
            return Err(ControlError::HasHarvestVolumes {
                tenant: name.into(),
                volume: v,
            });
        }
        if let Some(tier) = self.state.read().tier_owning(name) {
            return Err(ControlError::TierName {
                name: name.into(),
                tier: tier.to_string(),
            });
        }
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
        if let Some(e) = self.state.write().vssds.get_mut(name) {
            e.rec.state = VssdState::Deleting;
        }
        self.exports.remove(name);
        entry.vssd.destroy()?;
        self.store.remove_vssd(name)?;
        let mut st = self.state.write();
        if let Some(e) = st.vssds.remove(name) {
            Self::detach_gate(&mut st, &e);
        }
        drop(st);
        info!(vssd = %name, "vSSD erased and deleted");
        Ok(())
    }

    /// Clean shutdown: closes (syncs and checkpoints) every vSSD and syncs every
    /// device. The manager stays usable; the daemon calls this once before exiting.
    /// Every vSSD is closed even if one fails; the first error is returned.
    pub fn shutdown(&self) -> Result<()> {
        let _g = self.lifecycle.lock();
        let st = self.state.read();
        let mut first: Option<ControlError> = None;
        for e in st
            .vssds
            .values()
            .filter(|e| e.rec.state == VssdState::Active)
        {
            if let Err(err) = e.vssd.close() {
                warn!(vssd = %e.rec.name, error = %err, "closing vSSD failed");
                first.get_or_insert(err.into());
            }
        }
        for d in &st.devices {
            if let Err(source) = d.dev.sync() {
                warn!(device = %d.rec.name, error = %source, "syncing device failed");
                first.get_or_insert(ControlError::Flash {
                    device: d.rec.name.clone(),
                    source,
                });
            }
        }
        info!("host manager shut down");
        first.map_or(Ok(()), Err)
    }
}

impl nbd::ExportRegistry for HostManager {
    /// The export of that name (a vSSD, a tier volume or a harvest volume);
    /// `""` is the vSSD named `default`, or else the oldest vSSD.
    fn lookup(&self, name: &str) -> Option<nbd::Export> {
        self.exports.lookup(name)
    }

    /// Every export: vSSDs, then tier volumes, then harvest volumes.
    fn list(&self) -> Vec<nbd::Listing> {
        self.exports.list()
    }
}

mod sla;
pub use sla::VssdSlaInfo;

mod harvest_host;
mod place;
mod pressure;
mod views;
pub use views::{
    DeviceInfo, EraseCounts, FlashMap, FlashOwner, FlashOwnerKind, HostStats, VssdInfo, VssdStats,
};

mod tier;
pub use self::tier::{TierInfo, TierVolumeIo};

mod tokens;

#[cfg(test)]
mod tests;
