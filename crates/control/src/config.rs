//! Daemon configuration.
//!
//! One TOML file describes a host: where its state lives, how it serves (fast or
//! emulated timing, API address, NBD socket), which emulated flash devices it has,
//! and which vSSDs to create on first start. Every struct rejects unknown fields so
//! that a typo is an error rather than a silently ignored setting, and every field
//! has a documented default; [`DEFAULT_CONFIG`] is the built-in configuration and
//! doubles as the reference documentation (`flexssd config default` prints it).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use flash::{Backend, Geometry, Timing};
use ftl::GcPolicyKind;
use serde::{Deserialize, Serialize};

use crate::{BlockRange, ByteSize, ControlError, Result};

mod tiers;
pub use tiers::{TierSpec, TierVolumeSpec, CACHE_VSSD_SUFFIX};

/// The built-in configuration, used when the daemon is given no config file. It is
/// also the reference: every key is shown with its default value.
pub const DEFAULT_CONFIG: &str = r#"# flexssd configuration. This is the built-in default (`flexssd config default`).
# Every key is optional; the values shown are the defaults. Relative paths are
# relative to the daemon's working directory.

# Where the daemon keeps its state: control.redb (device and vSSD records),
# checkpoints/, file-backed flash, the NBD socket and the lock file.
data_dir = "./flexssd-data"

# "fast": reply to each request as soon as it is done in memory.
# "emulation": reply no earlier than the modelled flash completion time, so that a
# vSSD's bandwidth and latency follow its channel count.
mode = "fast"

[api]
# HTTP/JSON control API and Prometheus /metrics. No authentication: keep it local.
listen = "127.0.0.1:8740"

[nbd]
# Unix socket of the NBD server. Default: <data_dir>/nbd.sock
# socket = "./flexssd-data/nbd.sock"
# Also serve NBD over TCP. Default: off.
# tcp = "127.0.0.1:10809"

# Emulated open-channel SSDs. A device is recorded in the control store the first
# time the daemon sees it; on restart it is reopened with the recorded geometry
# (changing the geometry of an existing device is an error).
[[devices]]
name = "ssd0"
# "file": sparse data file plus PATH.meta, survives restarts and crashes.
# "memory": anonymous memory, lost when the daemon exits (vSSDs come back empty).
backend = "file"
# Data file of a file-backed device. Default: <data_dir>/<name>.flash
# path = "./flexssd-data/ssd0.flash"

# Memory backend only: allocate all its memory at start-up, so first writes in
# emulation mode are not slowed by the host faulting memory in.
# prefault = false
[devices.geometry]
channels = 16
dies_per_channel = 4
planes_per_die = 1
blocks_per_plane = 64
pages_per_block = 256
page_size = 4096

[devices.timing]
read_ns = 40000
program_ns = 400000
erase_ns = 3000000
channel_mbps = 400

# Regulator's SLA scheduler. vSSDs on exactly the same channels form a unit: each
# stays within its SLA curve, all within the unit's measured curve
# (`flexssd sla measure-device --store`). Without curves it only counts.
[devices.scheduler]
enabled = true
# Time slice, microseconds.
slice_us = 1000
# Larger requests are split into pieces of at most this many bytes.
piece_bytes = 65536
# A tenant may run this many milliseconds of its curve ahead before it waits
# (long-run rates follow the curve either way).
bucket_ms = 100

# vSSDs to create at the first start, when the control store is still empty.
[[vssds]]
name = "default"
# Number of whole channels, the lowest-numbered free ones.
channels = 4
# Device to place it on. Default: the first device with enough free channels.
# device = "ssd0"
# Exported size, bytes or with a K/M/G/T suffix. Default: the raw flash less 12.5%
# over-provisioning.
# capacity = "512M"
# Garbage-collection victim policy: "greedy" or "cost-benefit".
# gc = "greedy"
# Explicit placement instead of `channels`: these channels...
# channel_ids = [0, 1]
# ...and, optionally, only these blocks of each plane (vSSDs may then share channels).
# blocks = "0..32"
# SLA (Regulator): the most read throughput at each write throughput, as
# [write, read] points in 4 KiB operations per second, non-increasing; the weight
# shares spare bandwidth among tenants allowed to burst above their curves.
# [vssds.sla]
# curve = [[0, 20000], [2000, 0]]
# weight = 1
# burst = false

# Shared flash cache tiers (GREM / D-GREM), none by default. A tier caches tenant
# volumes kept in a slow backing file in a vSSD (<name>.cache, placed like a vSSD,
# erased and created again at every start) under one replacement policy. Each
# volume is an NBD export. Policy and size change live through the API; the cache
# starts cold at every start (writes go through to the backing file).
# [[tiers]]
# name = "tier0"
# channels = 1
# device = "ssd0"
# channel_ids = [4]
# blocks = "0..32"
# Cache size (multiple of 4K), also the most it can be resized to. Default: the
# placement's raw flash less 12.5%.
# cache_size = "256M"
# glru, car, arc, vfrm, grem or dgrem.
# policy = "dgrem"
# Backing file and its size. Defaults: <data_dir>/<name>.backing, the volumes' total.
# backing = "./flexssd-data/tier0.backing"
# backing_size = "4G"
# Policy parameters (defaults: the paper's; the coarse policies place content at
# epoch ends).
# policy_params = { epoch_secs = 300.0, coarse_line_bytes = 131072, bin_bytes = 1048576 }
# Time the backing file like a hard disk; `hdd = {}` for these defaults.
# hdd = { rpm = 7200, min_seek_us = 600, max_seek_us = 16000, transfer_mb_s = 160, near_bytes = 1048576 }
# Tenant volumes (multiples of 4K), laid out in this order in the backing file.
# volumes = [{ name = "tenant-a", size = "2G" }, { name = "tenant-b", size = "2G" }]

# BlockFlex storage harvesting: lend idle flash of regular vSSDs and unsold
# channels to harvest tenants as gSSDs. Off by default; see docs/config.md.
# [harvest]
# enabled = true
# Who decides what a regular vSSD lends and for how long: "predicted" (its
# learned predictors) or "fixed" (lend_fraction of its spare blocks for lend_for_s).
# policy = "predicted"
# tick_ms = 1000
# eviction_grace_s = 300
"#;

/// How the NBD server times its replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Reply as soon as the operation is done in memory.
    #[default]
    Fast,
    /// Reply no earlier than the operation's modelled completion time.
    Emulation,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fast" => Ok(Mode::Fast),
            "emulation" => Ok(Mode::Emulation),
            _ => Err(format!("unknown mode {s:?} (expected fast or emulation)")),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Fast => "fast",
            Mode::Emulation => "emulation",
        })
    }
}

/// The whole configuration of a daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// State directory. Default `./flexssd-data`.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Reply timing. Default [`Mode::Fast`].
    #[serde(default)]
    pub mode: Mode,
    /// HTTP API settings.
    #[serde(default)]
    pub api: ApiConfig,
    /// NBD server settings.
    #[serde(default)]
    pub nbd: NbdConfig,
    /// Emulated devices. Default (in a config file): none.
    #[serde(default)]
    pub devices: Vec<DeviceConfig>,
    /// vSSDs to create at first start. Default (in a config file): none.
    #[serde(default)]
    pub vssds: Vec<VssdSpec>,
    /// Shared flash cache tiers, built at every start. Default: none.
    #[serde(default)]
    pub tiers: Vec<TierSpec>,
    /// BlockFlex storage harvesting. Default: off.
    #[serde(default)]
    pub harvest: HarvestSettings,
}

/// `[harvest]`: BlockFlex storage harvesting (OSDI'22 §4.3, §4.5).
///
/// When enabled, the harvester runs every `tick_ms` on the daemon's clock: it
/// lends the free blocks of regular vSSDs and the device's unsold channels to the
/// gSSD pool, refreshes expiries, and takes flash back (migrating or evicting harvest
/// volumes) when a regular tenant needs it. What a regular vSSD can lend and for
/// how long comes from its learned predictors (`policy = "predicted"`, the
/// default: BlockFlex's LSTMs fed every `window_s` with the vSSD's bandwidth, IOPS
/// and utilisation) or from the fixed policy (`policy = "fixed"`: `lend_fraction`
/// of its spare blocks for `lend_for_s`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HarvestSettings {
    /// Run the harvester. Default `false`.
    pub enabled: bool,
    /// Harvester period in milliseconds. Default 1000.
    pub tick_ms: u64,
    /// Capacity granule in flash blocks; 0 (default) scales the paper's 16 GB of
    /// 1 TB to the device: 1/64 of its blocks.
    pub chunk_blocks: u64,
    /// Duration granule in seconds (paper: 1800).
    pub granule_s: u64,
    /// Expiry refresh period in seconds (paper: 900).
    pub refresh_s: u64,
    /// A released gSSD expiring within this many seconds is erased and returned
    /// home instead of pooled (paper: 1800).
    pub reclaim_horizon_s: u64,
    /// Fixed policy: how long lent flash is predicted to stay free, seconds
    /// (default 7200); refreshed while the home stays idle.
    pub lend_for_s: u64,
    /// Fixed policy: share of a regular vSSD's lendable blocks to lend (0–1,
    /// default 0.5, so a home keeps headroom to grow before it needs them back).
    pub lend_fraction: f64,
    /// Harvest unsold channels (no vSSD on them). Default `true`.
    pub unsold: bool,
    /// Channels per gSSD made of unsold channels. Default 4.
    pub unsold_group: u32,
    /// How long unsold channels are predicted to stay unsold: `histogram`
    /// (default) or `fixed` (`lend_for_s`).
    pub unsold_policy: UnsoldPolicyKind,
    /// Histogram policy: the quantile of past unsold stretches a new unsold
    /// gSSD is given (0–1; default 0.2: four in five past ones lasted longer).
    pub unsold_quantile: f64,
    /// Time an evicted harvest volume gets to move off, seconds. Default 300.
    pub eviction_grace_s: u64,
    /// Copy unit of a live migration, bytes. Default 1 MiB.
    pub migrate_chunk_bytes: u64,
    /// Who decides what a regular vSSD lends: `predicted` (default) or `fixed`.
    pub policy: LendPolicyKind,
    /// Predicted policy: length of one observation window in seconds (the
    /// BlockFlex artifact's 18).
    pub window_s: u64,
    /// Predicted policy: the predictors' settings (`[harvest.predictor]`; the
    /// paper's by default).
    pub predictor: predict::PredictorConfig,
    /// Regular tenants first: in emulation mode a harvest volume's request
    /// waits until the dies it shares with a regular tenant free up within this
    /// many microseconds. Default 1: only when they are idle (one page program,
    /// 400 µs, let a regular tenant lose 48% of its throughput in the Figure 18
    /// experiment; 1 µs, 6.7%).
    pub priority_slack_us: u64,
}

impl Default for HarvestSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            tick_ms: 1000,
            chunk_blocks: 0,
            granule_s: 1800,
            refresh_s: 900,
            reclaim_horizon_s: 1800,
            lend_for_s: 7200,
            lend_fraction: 0.5,
            unsold: true,
            unsold_group: 4,
            unsold_policy: UnsoldPolicyKind::Histogram,
            unsold_quantile: 0.2,
            eviction_grace_s: 300,
            migrate_chunk_bytes: 1 << 20,
            priority_slack_us: 1,
            policy: LendPolicyKind::Predicted,
            window_s: 18,
            predictor: predict::PredictorConfig::default(),
        }
    }
}

impl HarvestSettings {
    fn validate(&self) -> std::result::Result<(), String> {
        for (f, v) in [
            ("tick_ms", self.tick_ms),
            ("granule_s", self.granule_s),
            ("refresh_s", self.refresh_s),
            ("reclaim_horizon_s", self.reclaim_horizon_s),
            ("lend_for_s", self.lend_for_s),
            ("unsold_group", self.unsold_group as u64),
            ("migrate_chunk_bytes", self.migrate_chunk_bytes),
            ("window_s", self.window_s),
        ] {
            if v == 0 {
                return Err(format!("harvest.{f} must be greater than 0"));
            }
        }
        if !(self.lend_fraction > 0.0 && self.lend_fraction <= 1.0) {
            return Err(format!(
                "harvest.lend_fraction = {} must be in (0, 1]",
                self.lend_fraction
            ));
        }
        if !(0.0..=1.0).contains(&self.unsold_quantile) {
            return Err(format!(
                "harvest.unsold_quantile = {} must be in [0, 1]",
                self.unsold_quantile
            ));
        }
        if self.lend_for_s < self.granule_s {
            return Err(format!(
                "harvest.lend_for_s = {} is shorter than one duration granule (granule_s = {}): nothing could ever be lent",
                self.lend_for_s, self.granule_s
            ));
        }
        if self.enabled && self.policy == LendPolicyKind::Predicted {
            predict::VssdPredictor::new(&self.predictor, predict::Role::Harvestable, 0)
                .map_err(|e| format!("harvest.predictor: {e}"))?;
        }
        if !self.migrate_chunk_bytes.is_multiple_of(4096) {
            return Err(format!(
                "harvest.migrate_chunk_bytes = {} must be a multiple of 4096",
                self.migrate_chunk_bytes
            ));
        }
        Ok(())
    }
}

/// Which lending policy decides how much a regular vSSD lends, and for how long
/// (each is a `LendPolicy` of its own file under `harvester/policy/`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LendPolicyKind {
    /// BlockFlex's learned predictors, per vSSD (§4.4).
    #[default]
    Predicted,
    /// A fixed share of the spare blocks for a fixed time.
    Fixed,
}

/// Which policy decides how long unsold channels stay unsold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnsoldPolicyKind {
    /// BlockFlex's heuristic (§4.4.1): a low quantile of how long unsold
    /// channels of the same group size stayed unsold on this host, `lend_for_s`
    /// until there is such history.
    #[default]
    Histogram,
    /// Always `lend_for_s`.
    Fixed,
}

/// Whether a vSSD's tenant buys its flash or harvests others'.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantRole {
    /// Buys dedicated channels; its idle flash may be harvested.
    #[default]
    Regular,
    /// May ask for harvest volumes on other tenants' idle flash.
    Harvest,
}

impl std::str::FromStr for TenantRole {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "regular" => Ok(Self::Regular),
            "harvest" => Ok(Self::Harvest),
            other => Err(format!(
                "unknown tenant role {other:?}: use regular or harvest"
            )),
        }
    }
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("./flexssd-data")
}

/// HTTP API settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Address the HTTP API listens on. Default `127.0.0.1:8740`.
    #[serde(default = "default_api_listen")]
    pub listen: SocketAddr,
}

fn default_api_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8740))
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: default_api_listen(),
        }
    }
}

/// NBD server settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NbdConfig {
    /// Unix socket path. Default `<data_dir>/nbd.sock`.
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// TCP address, if NBD should also be served over TCP. Default: none.
    #[serde(default)]
    pub tcp: Option<SocketAddr>,
}

/// Where a device keeps its bytes, as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Anonymous memory; lost at exit.
    Memory,
    /// A sparse file; survives restarts.
    #[default]
    File,
}

/// One emulated flash device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Device name (like `ssd0`); same rules as vSSD names.
    pub name: String,
    /// Backend kind. Default `file`.
    #[serde(default)]
    pub backend: BackendKind,
    /// Data file of a file-backed device. Default `<data_dir>/<name>.flash`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Shape. Default [`Geometry::default`] (16 × 4 × 1 × 64 × 256 × 4 KiB = 4 GiB).
    #[serde(default)]
    pub geometry: Geometry,
    /// Latencies. Default [`Timing::default`].
    #[serde(default)]
    pub timing: Timing,
    /// Memory backend only: allocate all of the device's memory at start-up, so
    /// that first writes in emulation mode are not slowed by the host faulting in
    /// memory. Default `false`.
    #[serde(default)]
    pub prefault: bool,
    /// The SLA scheduler (Regulator) of this device's units.
    #[serde(default)]
    pub scheduler: SchedulerSettings,
}

/// `[devices.scheduler]`: Regulator's SLA-enforcing scheduler. vSSDs on exactly
/// the same channels of a device form one *unit*, scheduled together: each vSSD
/// within its SLA curve, all of them within the unit's measured curve
/// (`flexssd sla measure-device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSettings {
    /// Whether vSSDs of this device go through the scheduler. With no curve set,
    /// it only counts (no request waits). Default `true`.
    pub enabled: bool,
    /// Time slice in microseconds. Default 1000.
    pub slice_us: u64,
    /// Requests larger than this are split (and scheduled piece by piece).
    /// Default 65536, as in the paper.
    pub piece_bytes: u64,
    /// How far (in milliseconds of its curve) a tenant may run ahead of its
    /// curve before it waits. Default 100.
    pub bucket_ms: u64,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        let d = sched::SchedConfig::default();
        Self {
            enabled: true,
            slice_us: d.slice_us,
            piece_bytes: d.piece_bytes,
            bucket_ms: d.bucket_ms,
        }
    }
}

impl SchedulerSettings {
    /// The scheduler's own settings.
    pub fn sched_config(&self) -> sched::SchedConfig {
        sched::SchedConfig {
            slice_us: self.slice_us,
            piece_bytes: self.piece_bytes,
            bucket_ms: self.bucket_ms,
            ..sched::SchedConfig::default()
        }
    }
}

/// A vSSD to create: an entry of `[[vssds]]` in the config, the body of
/// `POST /v1/vssds`, and what `flexssd vssd create` sends.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VssdSpec {
    /// Name, also the NBD export name: 1-64 characters of `[A-Za-z0-9._-]`.
    pub name: String,
    /// Device. Default: the first device with enough free channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Number of whole channels, taken from the lowest-numbered free ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<u32>,
    /// Explicit channels (instead of, or agreeing with, `channels`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_ids: Option<Vec<u32>>,
    /// With `channel_ids`: only these blocks of each plane. Default: all blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<BlockRange>,
    /// Exported size, rounded up to a page. Default: raw size less 12.5%
    /// over-provisioning (`ftl::default_capacity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<ByteSize>,
    /// GC victim policy. Default `greedy`.
    #[serde(default)]
    pub gc: GcPolicyKind,
    /// SLA with the scheduler (curve, weight, burst). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<sched::TenantSla>,
    /// Regular or harvest tenant. Default `regular`.
    #[serde(default)]
    pub role: TenantRole,
}

/// Checks that `name` can be an NBD export name: 1-64 characters of `[A-Za-z0-9._-]`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Default for Config {
    /// The built-in configuration, [`DEFAULT_CONFIG`].
    fn default() -> Self {
        Config::from_toml(DEFAULT_CONFIG).expect("the built-in configuration is valid")
    }
}

impl Config {
    /// Parses and validates a configuration.
    pub fn from_toml(text: &str) -> Result<Config> {
        let cfg: Config = toml::from_str(text).map_err(|e| ControlError::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads, parses and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| ControlError::Io {
            what: format!("reading config file {}", path.display()),
            source: e,
        })?;
        Config::from_toml(&text).map_err(|e| match e {
            ControlError::Config(m) => ControlError::Config(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Checks what the types alone cannot: unique valid names, usable geometries,
    /// vSSD specs that name existing devices.
    pub fn validate(&self) -> Result<()> {
        let cfg_err = |m: String| Err(ControlError::Config(m));
        if let Err(m) = self.harvest.validate() {
            return cfg_err(m);
        }
        let mut names = HashSet::new();
        for (i, d) in self.devices.iter().enumerate() {
            if !valid_name(&d.name) {
                return cfg_err(format!(
                    "devices[{i}].name {:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'",
                    d.name
                ));
            }
            if !names.insert(d.name.as_str()) {
                return cfg_err(format!(
                    "devices[{i}].name: device {:?} is defined twice",
                    d.name
                ));
            }
            if d.prefault && d.backend != BackendKind::Memory {
                return cfg_err(format!(
                    "devices[{i}].prefault (device {}): only the memory backend can be prefaulted",
                    d.name
                ));
            }
            if let Err(e) = d.geometry.validate() {
                return cfg_err(format!("devices[{i}].geometry (device {}): {e}", d.name));
            }
            if d.backend == BackendKind::Memory && d.path.is_some() {
                return cfg_err(format!(
                    "devices[{i}].path: device {} has backend \"memory\", which takes no path",
                    d.name
                ));
            }
        }
        let mut vnames = HashSet::new();
        for (i, v) in self.vssds.iter().enumerate() {
            if !valid_name(&v.name) {
                return cfg_err(format!(
                    "vssds[{i}].name {:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'",
                    v.name
                ));
            }
            if !vnames.insert(v.name.as_str()) {
                return cfg_err(format!(
                    "vssds[{i}].name: vSSD {:?} is defined twice",
                    v.name
                ));
            }
            if let Some(dev) = &v.device {
                if !names.contains(dev.as_str()) {
                    return cfg_err(format!(
                        "vssds[{i}].device: no device named {dev:?} in [[devices]]"
                    ));
                }
            }
            if v.channels.is_none() && v.channel_ids.is_none() {
                return cfg_err(format!(
                    "vssds[{i}] ({}): set channels or channel_ids",
                    v.name
                ));
            }
        }
        tiers::validate(self)
    }

    /// The NBD unix socket path: `[nbd] socket`, or `<data_dir>/nbd.sock`.
    pub fn nbd_socket(&self) -> PathBuf {
        self.nbd
            .socket
            .clone()
            .unwrap_or_else(|| self.data_dir.join("nbd.sock"))
    }

    /// The control store file, `<data_dir>/control.redb`.
    pub fn store_path(&self) -> PathBuf {
        self.data_dir.join("control.redb")
    }

    /// The checkpoint directory, `<data_dir>/checkpoints`.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.data_dir.join("checkpoints")
    }

    /// The daemon's lock file, `<data_dir>/flexssd.lock`.
    pub fn lock_path(&self) -> PathBuf {
        self.data_dir.join("flexssd.lock")
    }

    /// The flash backend of a configured device, with default paths resolved.
    pub fn backend_of(&self, d: &DeviceConfig) -> Backend {
        match d.backend {
            BackendKind::Memory => Backend::Memory,
            BackendKind::File => Backend::File {
                path: d
                    .path
                    .clone()
                    .unwrap_or_else(|| self.data_dir.join(format!("{}.flash", d.name))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_the_documented_default() {
        let c = Config::default();
        assert_eq!(c.data_dir, PathBuf::from("./flexssd-data"));
        assert_eq!(c.mode, Mode::Fast);
        assert_eq!(c.api.listen, "127.0.0.1:8740".parse().unwrap());
        assert_eq!(c.nbd_socket(), PathBuf::from("./flexssd-data/nbd.sock"));
        assert_eq!(c.nbd.tcp, None);
        assert_eq!(c.devices.len(), 1);
        let d = &c.devices[0];
        assert_eq!(d.name, "ssd0");
        assert_eq!(d.geometry, Geometry::default());
        assert_eq!(d.timing, Timing::default());
        assert_eq!(
            c.backend_of(d),
            Backend::File {
                path: PathBuf::from("./flexssd-data/ssd0.flash")
            }
        );
        assert_eq!(c.vssds.len(), 1);
        assert_eq!(c.vssds[0].name, "default");
        assert_eq!(c.vssds[0].channels, Some(4));
        assert_eq!(c.vssds[0].gc, GcPolicyKind::Greedy);
    }

    #[test]
    fn empty_file_means_all_defaults_and_nothing_configured() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.data_dir, PathBuf::from("./flexssd-data"));
        assert!(c.devices.is_empty() && c.vssds.is_empty());
    }

    #[test]
    fn full_config_parses() {
        let c = Config::from_toml(
            r#"
            data_dir = "/tmp/x"
            mode = "emulation"
            [api]
            listen = "127.0.0.1:9000"
            [nbd]
            socket = "/tmp/s.sock"
            tcp = "127.0.0.1:10809"
            [[devices]]
            name = "a"
            backend = "memory"
            geometry = { channels = 8, dies_per_channel = 2, blocks_per_plane = 16, pages_per_block = 64 }
            timing = { read_ns = 1 }
            [[devices]]
            name = "b"
            path = "/tmp/b.img"
            [[vssds]]
            name = "v1"
            channels = 2
            capacity = "4M"
            gc = "cost-benefit"
            [[vssds]]
            name = "v2"
            device = "b"
            channel_ids = [3]
            blocks = "0..8"
            capacity = 65536
            "#,
        )
        .unwrap();
        assert_eq!(c.mode, Mode::Emulation);
        assert_eq!(c.nbd_socket(), PathBuf::from("/tmp/s.sock"));
        assert_eq!(c.devices[0].geometry.channels, 8);
        assert_eq!(c.devices[0].geometry.page_size, 4096);
        assert_eq!(c.devices[0].timing.read_ns, 1);
        assert_eq!(c.devices[0].timing.program_ns, Timing::default().program_ns);
        assert_eq!(c.backend_of(&c.devices[0]), Backend::Memory);
        assert_eq!(
            c.backend_of(&c.devices[1]),
            Backend::File {
                path: "/tmp/b.img".into()
            }
        );
        assert_eq!(c.vssds[0].capacity, Some(ByteSize(4 << 20)));
        assert_eq!(c.vssds[0].gc, GcPolicyKind::CostBenefit);
        assert_eq!(c.vssds[1].blocks, Some(BlockRange { start: 0, end: 8 }));
        assert_eq!(c.vssds[1].capacity, Some(ByteSize(65536)));
    }

    #[test]
    fn prefault_only_for_memory_devices() {
        let e = err("[[devices]]\nname = \"a\"\nbackend = \"file\"\nprefault = true\n");
        assert!(e.contains("devices[0].prefault"), "{e}");
        let c =
            Config::from_toml("[[devices]]\nname = \"a\"\nbackend = \"memory\"\nprefault = true\n")
                .unwrap();
        assert!(c.devices[0].prefault);
    }

    fn err(text: &str) -> String {
        Config::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn bad_configs_name_the_field() {
        assert!(err("data_dri = 'x'").contains("data_dri"));
        assert!(err("mode = 'slow'").contains("slow"));
        assert!(err("[api]\nlisten = 'nowhere'").contains("listen"));
        assert!(err("[[devices]]\nname = 'a'\nbackend = 'tape'").contains("tape"));
        assert!(
            err("[[devices]]\nname = 'a'\n[devices.geometry]\nchanels = 3").contains("chanels")
        );
        assert!(
            err("[[devices]]\nname = 'a'\n[devices.geometry]\nchannels = 0")
                .contains("devices[0].geometry")
        );
        assert!(err("[[devices]]\nname = 'a'\n[[devices]]\nname = 'a'").contains("defined twice"));
        assert!(err("[[devices]]\nname = 'a b'").contains("devices[0].name"));
        assert!(
            err("[[vssds]]\nname = 'v'\nchannels = 1\ncapacity = '1X'").contains("invalid size")
        );
        assert!(
            err("[[vssds]]\nname = 'v'\nchannels = 1\ndevice = 'nope'").contains("vssds[0].device")
        );
        assert!(err("[[vssds]]\nname = 'v'").contains("channels or channel_ids"));
        assert!(err("[[vssds]]\nname = 'v'\nchannels = 1\nblocks = '9..3'").contains("block range"));
        assert!(
            err("[[devices]]\nname = 'a'\nbackend = 'memory'\npath = '/x'")
                .contains("devices[0].path")
        );
    }

    #[test]
    fn names() {
        for ok in ["a", "default", "db-1.tenant_2", &"x".repeat(64)] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "a b", "a/b", "é", &"x".repeat(65), "a:b"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn modes_parse() {
        assert_eq!("fast".parse::<Mode>(), Ok(Mode::Fast));
        assert_eq!("emulation".parse::<Mode>(), Ok(Mode::Emulation));
        assert!("x".parse::<Mode>().is_err());
        assert_eq!(Mode::Emulation.to_string(), "emulation");
    }
}
