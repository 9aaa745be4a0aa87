//! Persistent control state in an embedded transactional store (redb).
//!
//! The store holds what the host manager must find again after a restart or a crash:
//! the devices it manages and the vSSD records (which flash each vSSD owns, its id,
//! capacity, lifecycle state and SLA) and the measured SLA curves of each device's
//! units, and the HTTP API's bearer tokens (their hashes: see the `auth` crate).
//! Values are JSON so that records can gain fields
//! without a migration. Each change is one redb write transaction, committed durably
//! before the caller goes on, so a record's state always tells how far a lifecycle
//! operation got (see [`VssdState`]).

use std::collections::BTreeMap;
use std::path::Path;

use flash::{Backend, Geometry, Timing};
use ftl::{Extent, GcPolicyKind};
use redb::{Database, ReadableTable, TableDefinition};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::error::store_err;
use crate::measure::UnitCurve;
use crate::{ControlError, Result};

const DEVICES: TableDefinition<&str, &str> = TableDefinition::new("devices");
const VSSDS: TableDefinition<&str, &str> = TableDefinition::new("vssds");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const UNIT_CURVES: TableDefinition<&str, &str> = TableDefinition::new("unit_curves");
const HVOLS: TableDefinition<&str, &str> = TableDefinition::new("harvest_volumes");
/// API tokens by id: [`auth::TokenRecord`]s, which hold a hash, never a secret.
const TOKENS: TableDefinition<&str, &str> = TableDefinition::new("api_tokens");

const NEXT_ID: &str = "next_vssd_id";
const NEXT_SERIAL: &str = "next_serial";
const INITIALIZED: &str = "initialized";

/// A device as recorded in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRecord {
    /// Device name.
    pub name: String,
    /// Where its bytes live (default paths already resolved).
    pub backend: Backend,
    /// Shape; fixed for the device's life.
    pub geometry: Geometry,
    /// Latencies; may change between runs.
    pub timing: Timing,
}

/// How far a vSSD's lifecycle has got. Recovery at startup finishes or undoes any
/// operation a crash interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VssdState {
    /// Recorded, flash not yet set up; startup erases its flash and drops it.
    Creating,
    /// In service.
    Active,
    /// Being deleted: its flash is erased before the record goes and the channels
    /// are free again; startup finishes the job.
    Deleting,
}

/// A vSSD as recorded in the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VssdRecord {
    /// Owner id in the flash OOB records and checkpoint key; never reused.
    pub id: u32,
    /// Name (NBD export name).
    pub name: String,
    /// Device it lives on.
    pub device: String,
    /// Flash it owns.
    pub extents: Vec<Extent>,
    /// Exported size in bytes.
    pub capacity_bytes: u64,
    /// GC victim policy.
    pub gc: GcPolicyKind,
    /// Lifecycle state.
    pub state: VssdState,
    /// Its SLA with the scheduler of its channels (Regulator); `None`: no curve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<sched::TenantSla>,
    /// Regular, harvest, or a ghost vSSD lent to harvest tenants (BlockFlex).
    #[serde(default, skip_serializing_if = "TenantKind::is_regular")]
    pub kind: TenantKind,
    /// Block ranges of its extents that it has lent to a gSSD (a regular vSSD's
    /// free blocks, harvested); its FTL never touches them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lent: Vec<Extent>,
    /// The tenant that owns it: with NBD TLS, only that tenant's identity lists
    /// and opens its export. `None`: shared (records from before tenants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// What a vSSD is for, in BlockFlex's terms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum TenantKind {
    /// A regular tenant: bought its channels; its idle flash may be harvested.
    #[default]
    Regular,
    /// A harvest tenant: runs on its own channels plus whatever it harvests.
    Harvest,
    /// A ghost vSSD (gSSD): flash lent by a regular vSSD or unsold channels, not
    /// exported by itself, serving a harvest volume.
    Ghost(GhostMeta),
}

impl TenantKind {
    /// Whether this is [`TenantKind::Regular`].
    pub fn is_regular(&self) -> bool {
        *self == TenantKind::Regular
    }
}

/// The persistent part of a gSSD (paper Figure 10); the pool's view is rebuilt
/// from it at startup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GhostMeta {
    /// gSSD id in the pool.
    pub gssd: u64,
    /// The regular vSSD that lends the blocks; `None` for unsold channels.
    pub home: Option<String>,
    /// Bandwidth in channels.
    pub bandwidth: u32,
    /// Capacity in flash blocks.
    pub capacity_blocks: u64,
    /// Predicted expiry (ns on the manager's clock).
    pub expiry: u64,
}

/// One LBA range of a harvest volume and the gSSD behind it (Figure 12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentRecord {
    /// First byte of the range in the volume.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// gSSD serving it.
    pub gssd: u64,
    /// Where the range starts in the gSSD.
    pub base: u64,
    /// When set: this range's gSSD was reclaimed with nowhere to move the
    /// data, and the range is lost at this time (ns) unless the tenant
    /// releases the volume first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_by: Option<u64>,
}

/// A range of a harvest volume whose data was lost: its gSSD was reclaimed
/// with nowhere to move the data, and the eviction deadline passed. Reading
/// it fails (EIO) for the life of the volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LostRange {
    /// First byte of the range in the volume.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A harvest volume as recorded in the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarvestVolumeRecord {
    /// Volume (NBD export) name.
    pub name: String,
    /// Numeric tenant id in the gSSD pool; never reused.
    pub id: u64,
    /// The harvest tenant (its vSSD's name) that asked for it.
    pub tenant: String,
    /// Exported size in bytes.
    pub size_bytes: u64,
    /// Bandwidth asked for, in channels.
    pub bandwidth: u32,
    /// Until when it is needed (ns on the manager's clock).
    pub until: u64,
    /// Its LBA ranges and their gSSDs.
    pub segments: Vec<SegmentRecord>,
    /// When set: evicted (no gSSD could take its data after an early
    /// reclamation); the tenant must move off by this time (ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_by: Option<u64>,
    /// Ranges lost to evictions whose deadline passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<LostRange>,
    /// The owner its export is published for: the harvest tenant's vSSD's
    /// tenant when the volume was created (fixed then, so the export never
    /// depends on looking the owner up later). `None`: shared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// The control store: a redb database, on disk or in memory.
pub struct ControlStore {
    db: Database,
}

impl std::fmt::Debug for ControlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlStore").finish_non_exhaustive()
    }
}

fn decode<T: DeserializeOwned>(table: &str, key: &str, v: &str) -> Result<T> {
    serde_json::from_str(v)
        .map_err(|e| ControlError::Store(format!("corrupt {table} record {key:?}: {e}")))
}

fn encode<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("records serialize")
}

impl ControlStore {
    /// Opens (creating if needed) the store file at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => ControlError::Store(format!(
                "{} is already open (is another flexssd daemon using this data directory?)",
                path.display()
            )),
            other => ControlError::Store(format!("{}: {other}", path.display())),
        })?;
        Self::init(db)
    }

    /// A store in memory (tests, simulator): forgotten when dropped.
    pub fn memory() -> Result<Self> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(store_err)?;
        Self::init(db)
    }

    fn init(db: Database) -> Result<Self> {
        let tx = db.begin_write().map_err(store_err)?;
        tx.open_table(DEVICES).map_err(store_err)?;
        tx.open_table(VSSDS).map_err(store_err)?;
        tx.open_table(META).map_err(store_err)?;
        tx.open_table(UNIT_CURVES).map_err(store_err)?;
        tx.open_table(HVOLS).map_err(store_err)?;
        tx.open_table(TOKENS).map_err(store_err)?;
        tx.commit().map_err(store_err)?;
        Ok(Self { db })
    }

    fn all<T: DeserializeOwned>(
        &self,
        def: TableDefinition<&str, &str>,
        what: &str,
    ) -> Result<Vec<T>> {
        let tx = self.db.begin_read().map_err(store_err)?;
        let t = tx.open_table(def).map_err(store_err)?;
        let mut out = Vec::new();
        for item in t.iter().map_err(store_err)? {
            let (k, v) = item.map_err(store_err)?;
            out.push(decode(what, k.value(), v.value())?);
        }
        Ok(out)
    }

    fn put(&self, def: TableDefinition<&str, &str>, key: &str, value: &str) -> Result<()> {
        let tx = self.db.begin_write().map_err(store_err)?;
        tx.open_table(def)
            .map_err(store_err)?
            .insert(key, value)
            .map_err(store_err)?;
        tx.commit().map_err(store_err)
    }

    /// Every recorded device, by name.
    pub fn devices(&self) -> Result<Vec<DeviceRecord>> {
        self.all(DEVICES, "device")
    }

    /// Records (or replaces) a device.
    pub fn put_device(&self, d: &DeviceRecord) -> Result<()> {
        self.put(DEVICES, &d.name, &encode(d))
    }

    /// Every recorded vSSD, by name.
    pub fn vssds(&self) -> Result<Vec<VssdRecord>> {
        self.all(VSSDS, "vSSD")
    }

    /// Records (or replaces) a vSSD.
    pub fn put_vssd(&self, v: &VssdRecord) -> Result<()> {
        self.put(VSSDS, &v.name, &encode(v))
    }

    /// Records a new vSSD, built by `make` from a fresh id, in one transaction with
    /// the id counter. Fails if a record of that name exists.
    pub fn insert_new_vssd(&self, make: impl FnOnce(u32) -> VssdRecord) -> Result<VssdRecord> {
        let tx = self.db.begin_write().map_err(store_err)?;
        let rec = {
            let mut meta = tx.open_table(META).map_err(store_err)?;
            let id = meta
                .get(NEXT_ID)
                .map_err(store_err)?
                .map_or(1, |v| v.value());
            let id32 =
                u32::try_from(id).map_err(|_| ControlError::Store("vSSD ids exhausted".into()))?;
            meta.insert(NEXT_ID, id + 1).map_err(store_err)?;
            let rec = make(id32);
            let mut t = tx.open_table(VSSDS).map_err(store_err)?;
            if t.get(rec.name.as_str()).map_err(store_err)?.is_some() {
                return Err(ControlError::Duplicate(rec.name));
            }
            t.insert(rec.name.as_str(), encode(&rec).as_str())
                .map_err(store_err)?;
            rec
        };
        tx.commit().map_err(store_err)?;
        Ok(rec)
    }

    /// Every recorded harvest volume, by name.
    pub fn harvest_volumes(&self) -> Result<Vec<HarvestVolumeRecord>> {
        self.all(HVOLS, "harvest volume")
    }

    /// Records (or replaces) a harvest volume.
    pub fn put_harvest_volume(&self, v: &HarvestVolumeRecord) -> Result<()> {
        self.put(HVOLS, &v.name, &encode(v))
    }

    /// Forgets a harvest volume.
    pub fn remove_harvest_volume(&self, name: &str) -> Result<()> {
        let tx = self.db.begin_write().map_err(store_err)?;
        tx.open_table(HVOLS)
            .map_err(store_err)?
            .remove(name)
            .map_err(store_err)?;
        tx.commit().map_err(store_err)
    }

    /// A fresh, never reused number (gSSD and harvest-volume ids).
    pub fn next_serial(&self) -> Result<u64> {
        let tx = self.db.begin_write().map_err(store_err)?;
        let id = {
            let mut meta = tx.open_table(META).map_err(store_err)?;
            let id = meta
                .get(NEXT_SERIAL)
                .map_err(store_err)?
                .map_or(1, |v| v.value());
            meta.insert(NEXT_SERIAL, id + 1).map_err(store_err)?;
            id
        };
        tx.commit().map_err(store_err)?;
        Ok(id)
    }

    /// Forgets a vSSD record.
    pub fn remove_vssd(&self, name: &str) -> Result<()> {
        let tx = self.db.begin_write().map_err(store_err)?;
        tx.open_table(VSSDS)
            .map_err(store_err)?
            .remove(name)
            .map_err(store_err)?;
        tx.commit().map_err(store_err)
    }

    /// The measured curves of `device`'s units, by channel count.
    pub fn unit_curves(&self, device: &str) -> Result<BTreeMap<u32, UnitCurve>> {
        let tx = self.db.begin_read().map_err(store_err)?;
        let t = tx.open_table(UNIT_CURVES).map_err(store_err)?;
        let mut out = BTreeMap::new();
        let prefix = format!("{device}/");
        for item in t.iter().map_err(store_err)? {
            let (k, v) = item.map_err(store_err)?;
            let Some(n) = k.value().strip_prefix(&prefix) else {
                continue;
            };
            let n: u32 = n.parse().map_err(|_| {
                ControlError::Store(format!("corrupt unit-curve key {:?}", k.value()))
            })?;
            out.insert(n, decode("unit curve", k.value(), v.value())?);
        }
        Ok(out)
    }

    /// Records (`Some`) or forgets (`None`) the curve of `device`'s units of
    /// `channels` channels.
    pub fn put_unit_curve(&self, device: &str, channels: u32, c: Option<&UnitCurve>) -> Result<()> {
        let key = format!("{device}/{channels}");
        match c {
            Some(c) => self.put(UNIT_CURVES, &key, &encode(c)),
            None => {
                let tx = self.db.begin_write().map_err(store_err)?;
                tx.open_table(UNIT_CURVES)
                    .map_err(store_err)?
                    .remove(key.as_str())
                    .map_err(store_err)?;
                tx.commit().map_err(store_err)
            }
        }
    }

    /// Every API token record, by id.
    pub fn tokens(&self) -> Result<Vec<auth::TokenRecord>> {
        self.all(TOKENS, "API token")
    }

    /// The API token record with this id, if any.
    pub fn token(&self, id: &str) -> Result<Option<auth::TokenRecord>> {
        let tx = self.db.begin_read().map_err(store_err)?;
        let t = tx.open_table(TOKENS).map_err(store_err)?;
        let v = t.get(id).map_err(store_err)?;
        v.map(|v| decode("API token", id, v.value())).transpose()
    }

    /// Records a new API token; fails if one with its id exists.
    pub fn insert_token(&self, rec: &auth::TokenRecord) -> Result<()> {
        let tx = self.db.begin_write().map_err(store_err)?;
        {
            let mut t = tx.open_table(TOKENS).map_err(store_err)?;
            if t.get(rec.id.as_str()).map_err(store_err)?.is_some() {
                return Err(ControlError::TokenIdTaken(rec.id.clone()));
            }
            t.insert(rec.id.as_str(), encode(rec).as_str())
                .map_err(store_err)?;
        }
        tx.commit().map_err(store_err)
    }

    /// Forgets an API token; returns its record, or `None` if there was none.
    pub fn remove_token(&self, id: &str) -> Result<Option<auth::TokenRecord>> {
        let tx = self.db.begin_write().map_err(store_err)?;
        let old = {
            let mut t = tx.open_table(TOKENS).map_err(store_err)?;
            let old = t.remove(id).map_err(store_err)?;
            old.map(|v| decode::<auth::TokenRecord>("API token", id, v.value()))
                .transpose()?
        };
        tx.commit().map_err(store_err)?;
        Ok(old)
    }

    /// Whether the initial vSSDs of the configuration were created already.
    pub fn initialized(&self) -> Result<bool> {
        let tx = self.db.begin_read().map_err(store_err)?;
        let t = tx.open_table(META).map_err(store_err)?;
        Ok(t.get(INITIALIZED)
            .map_err(store_err)?
            .is_some_and(|v| v.value() != 0))
    }

    /// Notes that the initial vSSDs were created, so that they are not re-created
    /// after the user deletes them.
    pub fn set_initialized(&self) -> Result<()> {
        let tx = self.db.begin_write().map_err(store_err)?;
        tx.open_table(META)
            .map_err(store_err)?
            .insert(INITIALIZED, 1)
            .map_err(store_err)?;
        tx.commit().map_err(store_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u32, name: &str) -> VssdRecord {
        VssdRecord {
            id,
            name: name.into(),
            device: "ssd0".into(),
            extents: vec![Extent {
                channel: 0,
                first_block: 0,
                blocks: 4,
            }],
            capacity_bytes: 1 << 20,
            gc: GcPolicyKind::Greedy,
            state: VssdState::Active,
            sla: None,
            kind: Default::default(),
            lent: Vec::new(),
            tenant: None,
        }
    }

    #[test]
    fn records_survive_reopen() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("control.redb");
        {
            let s = ControlStore::open(&path).unwrap();
            assert!(!s.initialized().unwrap());
            let a = s.insert_new_vssd(|id| rec(id, "a")).unwrap();
            let b = s.insert_new_vssd(|id| rec(id, "b")).unwrap();
            assert_eq!((a.id, b.id), (1, 2));
            assert!(matches!(
                s.insert_new_vssd(|id| rec(id, "a")),
                Err(ControlError::Duplicate(_))
            ));
            s.put_vssd(&VssdRecord {
                state: VssdState::Deleting,
                ..b
            })
            .unwrap();
            s.put_device(&DeviceRecord {
                name: "ssd0".into(),
                backend: Backend::Memory,
                geometry: Geometry::default(),
                timing: Timing::default(),
            })
            .unwrap();
            s.set_initialized().unwrap();
        }
        let s = ControlStore::open(&path).unwrap();
        assert!(s.initialized().unwrap());
        let v = s.vssds().unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].state, VssdState::Deleting);
        assert_eq!(s.devices().unwrap()[0].name, "ssd0");
        s.remove_vssd("a").unwrap();
        // Ids are never reused after a removal (a failed insert takes none).
        assert_eq!(s.insert_new_vssd(|id| rec(id, "c")).unwrap().id, 3);
    }

    #[test]
    fn tokens_are_kept_by_id_and_survive_reopen() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("control.redb");
        let t = auth::NewToken::generate().unwrap();
        let rec = t.record("tenant-a", auth::Role::Tenant, 7);
        {
            let s = ControlStore::open(&path).unwrap();
            assert!(s.tokens().unwrap().is_empty());
            s.insert_token(&rec).unwrap();
            assert!(matches!(
                s.insert_token(&rec),
                Err(ControlError::TokenIdTaken(_))
            ));
        }
        let s = ControlStore::open(&path).unwrap();
        assert_eq!(s.token(t.id()).unwrap().as_ref(), Some(&rec));
        assert_eq!(s.tokens().unwrap(), vec![rec.clone()]);
        // The secret is nowhere in the file.
        drop(s);
        let bytes = std::fs::read(&path).unwrap();
        let secret = t.bearer().rsplit('_').next().unwrap().to_string();
        assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()));
        let s = ControlStore::open(&path).unwrap();
        assert_eq!(s.remove_token(t.id()).unwrap(), Some(rec));
        assert_eq!(s.remove_token(t.id()).unwrap(), None);
        assert_eq!(s.token(t.id()).unwrap(), None);
    }

    #[test]
    fn second_open_of_the_same_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("control.redb");
        let _s = ControlStore::open(&path).unwrap();
        let e = ControlStore::open(&path).unwrap_err().to_string();
        assert!(e.contains("already open"), "{e}");
    }
}
