//! The flexssd control plane.
//!
//! The [`HostManager`] owns a host's emulated flash devices and the per-tenant
//! virtual SSDs carved out of them (BlockFlex §4.3: a vSSD is a set of dedicated flash
//! channels, so tenants are isolated down to the bus). It is one library, with no
//! I/O other than its control store and the flash it manages and no wall-clock
//! reads, so that the daemon (`flexssd serve`) and the trace-driven simulator run
//! the very same lifecycle code on different [`clock::Clock`]s.
//!
//! * [`config`]: the TOML configuration and its built-in default;
//! * [`HostManager`]: devices, vSSD create/delete/list/stats, recovery at startup,
//!   and the NBD export registry (one export per vSSD, wrapped in a stats layer);
//! * cache tiers (`[[tiers]]`, [`TierInfo`]): tenant volumes over a slow backing
//!   file, cached in a vSSD under a shared replacement policy (GREM, D-GREM, ...);
//! * [`harvester`]: BlockFlex harvesting (`[harvest]`), a component with its own
//!   state and locks behind the narrow [`harvester::HarvestHost`] trait: idle flash
//!   lent as gSSDs by a [`harvester::LendPolicy`], harvest volumes over them,
//!   reclaim and migration;
//! * [`exports`]: one way to make an NBD export of any block device, and the one
//!   registry that handshakes read;
//! * [`ControlStore`]: durable records in an embedded transactional store (redb),
//!   ordered so that a crash never leaves flash un-erased for the next tenant;
//! * [`size`]: human sizes (`"512M"`) and block ranges (`"0..32"`).

#![warn(missing_docs)]

pub mod config;
mod error;
pub mod exports;
pub mod harvester;
mod manager;
pub mod measure;
pub mod size;
mod store;

pub use config::{
    valid_name, ApiAuth, ApiConfig, BackendKind, ClusterSettings, Config, DashboardSettings,
    DeviceConfig, EtcdTls, Mode, NbdConfig, NbdTls, PlacementSetting, SchedulerSettings, VssdSpec,
    DEFAULT_CONFIG,
};
pub use config::{
    HarvestSettings, LendPolicyKind, TenantRole, TierSpec, TierVolumeSpec, UnsoldPolicyKind,
};
pub use error::{ControlError, ErrorKind, Result};
pub use harvester::{
    GssdInfo, HarvestEvent, HarvestEventKind, HarvestRequest, HarvestStatus, HarvestVolumeInfo,
    MigrationInfo, PredictionInfo,
};
pub use manager::{
    channel_list, DeviceInfo, EraseCounts, FlashMap, FlashOwner, FlashOwnerKind, HostManager,
    HostStats, VssdInfo, VssdSlaInfo, VssdStats,
};
pub use manager::{TierInfo, TierVolumeIo};
pub use size::{format_size, parse_size, BlockRange, ByteSize};
pub use store::{
    ControlStore, DeviceRecord, GhostMeta, HarvestVolumeRecord, LostRange, SegmentRecord,
    TenantKind, VssdRecord, VssdState,
};
