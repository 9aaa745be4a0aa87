//! What the harvester shows and takes through the API: events, gSSDs, harvest
//! volumes, its status, and a harvest tenant's request.

use std::collections::BTreeMap;

use blockdev::StatsSnapshot;
use serde::{Deserialize, Serialize};

use crate::config::HarvestSettings;
use crate::store::SegmentRecord;
use crate::ByteSize;

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
    /// A harvest tenant's demand predictor asked for a volume or gave one
    /// back (`auto_request`).
    Demand,
}

impl HarvestEventKind {
    /// Every kind, for metrics.
    pub const ALL: [HarvestEventKind; 13] = [
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
        Self::Demand,
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
            Self::Demand => "demand",
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
    /// `active`; `migrating`; `evicting` (a range's gSSD was reclaimed with
    /// nowhere to move its data: move off by `evict_by_s`); or `degraded` (an
    /// eviction's deadline passed: the `lost` ranges fail reads and writes).
    pub state: String,
    /// Eviction deadline, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_by_s: Option<u64>,
    /// Migrations in progress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub migrations: Vec<MigrationInfo>,
    /// Ranges lost to evictions (reading them fails).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<crate::store::LostRange>,
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
    /// What each harvest tenant's demand predictors say now (`auto_request`;
    /// levels of its own vSSD, over-provisioned; `duration_s`: how long the
    /// demand lasts).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub demand: BTreeMap<String, PredictionInfo>,
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
