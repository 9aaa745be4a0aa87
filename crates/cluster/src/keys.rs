//! The key layout in etcd and the records under each key.
//!
//! etcd is the fleet's only source of truth, so this file *is* the fleet's
//! schema: every key flexssd writes is built here and every value is one of
//! the serde records below, stored as JSON. A value that does not parse is
//! refused with [`ClusterError::Malformed`] naming the key, never a panic:
//! someone with `etcdctl` can write anything under the prefix.
//!
//! ```text
//! {prefix}/hosts/{host}               HostRecord      lease-held by the host's agent
//! {prefix}/alloc/{host}/{device}      DeviceAlloc     bookings of one device (CAS point)
//! {prefix}/vssds/{name}               FleetVssd       the fleet-wide name index
//! {prefix}/desired/{host}/{name}      FleetVssd       what the host's agent must run
//! {prefix}/observed/{host}/{name}     ObservedVssd    what the agent runs, or its error
//! {prefix}/harvest/{name}             FleetHarvest    the fleet's harvest volumes
//! {prefix}/hdesired/{host}/{name}     FleetHarvest    harvest volumes the host must serve
//! {prefix}/hobserved/{host}/{name}    ObservedHarvest what the agent serves, or its error
//! {prefix}/events/{ms}-{sched}-{n}  FleetEvent       the fleet's event log (sorts by time)
//! {prefix}/scheduler/leader           LeaderRecord    lease-held by the active scheduler
//! {prefix}/tokens/{id}                TokenRecord     fleet API tokens (hashed; crates/auth)
//! ```
//!
//! A device's allocation is one key so that one compare-and-swap on its
//! revision covers every channel and block of it: two schedulers, or two
//! requests, can never book the same channel twice, whatever they race on.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::ClusterError;

/// Key builder for one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix` (no trailing slash; `/flexssd` by default).
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }
    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    /// Prefix of every host's registration.
    pub fn hosts(&self) -> String {
        format!("{}/hosts/", self.prefix)
    }
    /// A host's registration.
    pub fn host(&self, host: &str) -> String {
        format!("{}/hosts/{host}", self.prefix)
    }
    /// Prefix of every device allocation.
    pub fn allocs(&self) -> String {
        format!("{}/alloc/", self.prefix)
    }
    /// One device's allocation.
    pub fn alloc(&self, host: &str, device: &str) -> String {
        format!("{}/alloc/{host}/{device}", self.prefix)
    }
    /// Prefix of the fleet-wide vSSD index.
    pub fn vssds(&self) -> String {
        format!("{}/vssds/", self.prefix)
    }
    /// One vSSD in the fleet-wide index.
    pub fn vssd(&self, name: &str) -> String {
        format!("{}/vssds/{name}", self.prefix)
    }
    /// Prefix of a host's desired vSSDs.
    pub fn desired_of(&self, host: &str) -> String {
        format!("{}/desired/{host}/", self.prefix)
    }
    /// One desired vSSD.
    pub fn desired(&self, host: &str, name: &str) -> String {
        format!("{}/desired/{host}/{name}", self.prefix)
    }
    /// Prefix of every host's observed state.
    pub fn observed_all(&self) -> String {
        format!("{}/observed/", self.prefix)
    }
    /// Prefix of a host's observed vSSDs.
    pub fn observed_of(&self, host: &str) -> String {
        format!("{}/observed/{host}/", self.prefix)
    }
    /// One observed vSSD.
    pub fn observed(&self, host: &str, name: &str) -> String {
        format!("{}/observed/{host}/{name}", self.prefix)
    }
    /// Prefix of the fleet's harvest volumes.
    pub fn harvests(&self) -> String {
        format!("{}/harvest/", self.prefix)
    }
    /// One harvest volume of the fleet.
    pub fn harvest(&self, name: &str) -> String {
        format!("{}/harvest/{name}", self.prefix)
    }
    /// Prefix of the harvest volumes a host must serve.
    pub fn hdesired_of(&self, host: &str) -> String {
        format!("{}/hdesired/{host}/", self.prefix)
    }
    /// One harvest volume a host must serve.
    pub fn hdesired(&self, host: &str, name: &str) -> String {
        format!("{}/hdesired/{host}/{name}", self.prefix)
    }
    /// Prefix of a host's reports on its harvest volumes.
    pub fn hobserved_of(&self, host: &str) -> String {
        format!("{}/hobserved/{host}/", self.prefix)
    }
    /// A host's report on one harvest volume.
    pub fn hobserved(&self, host: &str, name: &str) -> String {
        format!("{}/hobserved/{host}/{name}", self.prefix)
    }
    /// Prefix of the event log.
    pub fn events(&self) -> String {
        format!("{}/events/", self.prefix)
    }
    /// One event: time first so keys sort in order; the scheduler's id and
    /// its counter keep two events of the same millisecond apart.
    pub fn event(&self, ms: u64, scheduler: &str, n: u64) -> String {
        format!("{}/events/{ms:013}-{scheduler}-{n:08}", self.prefix)
    }
    /// Prefix of the fleet API's tokens.
    pub fn tokens(&self) -> String {
        format!("{}/tokens/", self.prefix)
    }
    /// One token record (`auth::TokenRecord`: the hash, never the secret).
    pub fn token(&self, id: &str) -> String {
        format!("{}/tokens/{id}", self.prefix)
    }
    /// The active scheduler's key.
    pub fn leader(&self) -> String {
        format!("{}/scheduler/leader", self.prefix)
    }
    /// The last segment of `key` (a host, device or vSSD name).
    pub fn last(key: &str) -> &str {
        key.rsplit('/').next().unwrap_or(key)
    }
}

/// Parses a stored value, naming the key when it is not a valid record.
pub fn decode<T: DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T, ClusterError> {
    serde_json::from_slice(value).map_err(|e| ClusterError::Malformed {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: e.to_string(),
    })
}

/// Serialises a record.
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("records serialise")
}

/// A host's registration: where to reach it and what it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRecord {
    /// Host id (unique in the fleet).
    pub id: String,
    /// NBD address clients use, `HOST:PORT`.
    pub nbd: String,
    /// HTTP API base URL.
    pub api: String,
    /// The catalogue unit type its devices provide (`sla` placement).
    pub unit_type: String,
    /// Its devices.
    pub devices: Vec<DeviceSummary>,
    /// Its gSSD pool: each gSSD's <capacity, bandwidth, expiry>.
    #[serde(default)]
    pub gssds: Vec<GssdSummary>,
    /// When the agent started, milliseconds since the Unix epoch (for humans).
    pub started_ms: u64,
    /// Milliseconds since the Unix epoch when the host's clock read 0: turns
    /// the gSSDs' `expiry_s` (host clock) into fleet time.
    #[serde(default)]
    pub clock_origin_ms: u64,
}

/// One device of a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSummary {
    /// Device name on its host.
    pub name: String,
    /// Channels.
    pub channels: u32,
    /// Erase blocks per plane.
    pub blocks_per_plane: u32,
    /// Bytes of one block index over every channel, die and plane: a vSSD on
    /// all channels with `b` blocks per plane has `b` times this raw.
    pub row_bytes: u64,
    /// Blocks per plane a vSSD on every channel needs for GC beyond its data.
    #[serde(default)]
    pub spare_blocks: u32,
    /// Channels the host reports free (no vSSD on them).
    pub free_channels: Vec<u32>,
    /// Measured unit curves (`sla measure-device`), by channel count.
    #[serde(default)]
    pub unit_curves: BTreeMap<u32, sla::Curve>,
}

/// A gSSD on offer, as the fleet sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GssdSummary {
    /// gSSD id on its host.
    pub id: u64,
    /// Usable bytes.
    pub capacity_bytes: u64,
    /// Bandwidth in channels.
    pub bandwidth: u32,
    /// Predicted expiry, seconds on the host's clock.
    pub expiry_s: u64,
    /// Already assigned to a harvest volume.
    pub in_use: bool,
}

/// How a device is booked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AllocMode {
    /// Whole channels, each to one vSSD (placement by channel count).
    Channels,
    /// The device is one SLA unit: every tenant spans all its channels, on
    /// its own block range, and the host's scheduler keeps their sum within
    /// the unit's curve (Regulator).
    Unit,
}

/// The bookings of one device: the compare-and-swap point of placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceAlloc {
    /// How it is booked.
    pub mode: AllocMode,
    /// Channel → vSSD (mode `channels`).
    #[serde(default)]
    pub channels: BTreeMap<u32, String>,
    /// Tenants of the unit (mode `unit`).
    #[serde(default)]
    pub tenants: Vec<UnitTenant>,
    /// The percentile class of the unit (mode `unit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentile: Option<sla::catalog::Percentile>,
}

impl DeviceAlloc {
    /// Whether nothing is booked.
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.tenants.is_empty()
    }
}

/// One tenant of an SLA unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitTenant {
    /// vSSD name.
    pub name: String,
    /// Its blocks of each plane, `[start, end)`.
    pub blocks: (u32, u32),
    /// Its SLA.
    pub sla: sla::placement::TenantSla,
}

/// A vSSD in the fleet: where it was placed and what it asked for. The same
/// record is the index entry and the host's desired state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetVssd {
    /// Name, unique in the fleet, also the NBD export name.
    pub name: String,
    /// Host it lives on.
    pub host: String,
    /// Device on that host.
    pub device: String,
    /// Its channels.
    pub channels: Vec<u32>,
    /// Its blocks of each plane (an SLA unit's tenant); `None`: whole channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<(u32, u32)>,
    /// Exported size asked for, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// Its SLA (placement by curve), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<sla::placement::TenantSla>,
    /// Owning tenant (NBD TLS identity), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Regular (its idle flash may be harvested) or harvest (it may ask for
    /// harvest volumes anywhere in the fleet).
    #[serde(default, skip_serializing_if = "is_regular")]
    pub role: control::TenantRole,
}

pub(crate) fn is_regular(r: &control::TenantRole) -> bool {
    *r == control::TenantRole::Regular
}

/// A harvest volume of the fleet: a harvest tenant's demand, served from
/// gSSDs of one host. The same record is the index entry and the host's
/// desired state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetHarvest {
    /// Volume name, unique in the fleet with the vSSDs (the NBD export name).
    pub name: String,
    /// The harvest tenant: a fleet vSSD with role `harvest`, on any host.
    pub tenant: String,
    /// Host whose gSSDs serve it (and that exports it).
    pub host: String,
    /// Usable bytes asked for.
    pub capacity_bytes: u64,
    /// Channels asked for.
    pub bandwidth: u32,
    /// For how long, seconds (`None`: the host's duration granule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<u64>,
    /// Who may open the export (the tenant vSSD's owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Set by the scheduler when the volume was evicted from the fleet
    /// (its host was lost): why. The tenant releases it to clear it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evicted: Option<String>,
}

/// A host's report on one of its fleet harvest volumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedHarvest {
    /// Where it stands.
    pub state: HarvestState,
    /// Why, when `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The export's URI, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Exported bytes.
    #[serde(default)]
    pub size_bytes: u64,
    /// gSSDs (ids on the host) backing it.
    #[serde(default)]
    pub gssds: Vec<u64>,
    /// Until when it was granted, seconds on the host's clock.
    #[serde(default)]
    pub until_s: u64,
    /// Eviction deadline, seconds on the host's clock, while evicting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_by_s: Option<u64>,
}

/// A fleet harvest volume's state on its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HarvestState {
    /// Exported and served.
    Active,
    /// Served while a reclaimed gSSD's data moves to another.
    Migrating,
    /// Under eviction notice: the tenant must finish before the deadline.
    Evicting,
    /// Served, but ranges were lost to an eviction whose deadline passed:
    /// reading them fails. The tenant releases it.
    Degraded,
    /// Gone from the host (reclaimed with nowhere to migrate, or the host
    /// was lost); never re-created. The tenant releases it.
    Evicted,
    /// The host could not create it.
    Error,
}

impl HarvestState {
    /// The name `harvest list` shows.
    pub fn name(self) -> &'static str {
        match self {
            HarvestState::Active => "active",
            HarvestState::Migrating => "migrating",
            HarvestState::Evicting => "evicting",
            HarvestState::Degraded => "degraded",
            HarvestState::Evicted => "evicted",
            HarvestState::Error => "error",
        }
    }
}

/// What a host's agent reports for one desired vSSD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedVssd {
    /// `ready` or `error`.
    pub state: ObservedState,
    /// Why, when `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Exported size in bytes, when ready.
    #[serde(default)]
    pub capacity_bytes: u64,
    /// The export's URI, when ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// An agent's view of one vSSD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObservedState {
    /// Created and exported.
    Ready,
    /// The host could not create it.
    Error,
}

/// One entry of the fleet's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetEvent {
    /// Sequence number (the etcd revision that wrote it).
    #[serde(default)]
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// What happened: `host-joined`, `host-lost`, `vssd-placed`, …
    pub kind: String,
    /// The host concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The tenant whose vSSD or harvest volume it concerns, if any: a tenant
    /// token sees only its own tenant's events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Human-readable detail.
    pub detail: String,
}

/// The active scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderRecord {
    /// Scheduler id.
    pub id: String,
    /// Its API base URL (followers forward to it).
    pub api: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_under_the_prefix_and_sort() {
        let k = Keys::new("/fx/");
        assert_eq!(k.host("h1"), "/fx/hosts/h1");
        assert_eq!(k.alloc("h1", "d0"), "/fx/alloc/h1/d0");
        assert!(k.event(9, "s", 1) < k.event(10, "s", 0));
        assert_eq!(Keys::last(&k.desired("h", "v")), "v");
    }

    #[test]
    fn a_malformed_value_names_its_key() {
        let e = decode::<HostRecord>(b"/fx/hosts/h1", b"{not json").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("/fx/hosts/h1"), "{msg}");
        let e = decode::<DeviceAlloc>(b"/fx/alloc/h/d", br#"{"mode":"disk"}"#).unwrap_err();
        assert!(e.to_string().contains("/fx/alloc/h/d"));
    }
}
