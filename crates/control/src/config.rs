//! Daemon configuration.
//!
//! One TOML file describes a host: where its state lives, how it serves (fast or
//! emulated timing, API address, NBD socket), which emulated flash devices it has,
//! and which vSSDs to create on first start. Every struct rejects unknown fields so
//! that a typo is an error rather than a silently ignored setting, and every field
//! has a documented default; [`DEFAULT_CONFIG`] is the built-in configuration and
//! doubles as the reference documentation (`flexssd config default` prints it).
//!
//! This file holds the top level: the whole [`Config`], how it is loaded and
//! checked. Each section has a file of its own, with its types, defaults and
//! checks, so that a section can be read and changed without the others:
//!
//! * `api`: `[api]`, the HTTP API's address, authentication, HTTPS and limits
//!   ([`ApiConfig`]);
//! * `nbd`: `[nbd]`, the NBD server's sockets, TLS and limits ([`NbdConfig`]);
//! * `config/default.toml`: the built-in configuration, [`DEFAULT_CONFIG`], kept
//!   as a plain TOML file so it reads (and diffs) like the file a user writes;
//! * `devices`: `[[devices]]` and `[devices.scheduler]` ([`DeviceConfig`],
//!   [`SchedulerSettings`]);
//! * `vssds`: `[[vssds]]` ([`VssdSpec`], also the body of `POST /v1/vssds`) and
//!   the name rules ([`valid_name`]);
//! * `tiers`: `[[tiers]]`, shared flash cache tiers ([`TierSpec`]);
//! * `harvest`: `[harvest]`, BlockFlex storage harvesting ([`HarvestSettings`]);
//! * `cluster`: `[cluster]`, joining a fleet on etcd ([`ClusterSettings`]).

use std::path::{Path, PathBuf};

use flash::Backend;
use serde::{Deserialize, Serialize};

use crate::{ControlError, Result};

mod api;
mod cluster;
mod devices;
mod harvest;
mod nbd;
mod tiers;
mod vssds;
pub use api::{ApiAuth, ApiConfig, DashboardSettings};
pub use cluster::{ClusterSettings, EtcdTls};
pub use devices::{BackendKind, DeviceConfig, SchedulerSettings};
pub use harvest::{HarvestSettings, LendPolicyKind, UnsoldPolicyKind};
pub use nbd::{NbdConfig, NbdTls};
pub use tiers::{TierSpec, TierVolumeSpec, CACHE_VSSD_SUFFIX};
pub use vssds::{valid_name, TenantRole, VssdSpec};

/// The built-in configuration, used when the daemon is given no config file. It is
/// also the reference: every key is shown with its default value.
pub const DEFAULT_CONFIG: &str = include_str!("config/default.toml");

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

/// Where vSSDs put the pages they write among their parallel units (see
/// [`ftl::Placement`]), as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementSetting {
    /// Fill in fast mode (where modelled time paces no reply, so striping
    /// buys the tenant nothing and costs the file backend a write-back range
    /// per unit at every flush), stripe in emulation mode (where a vSSD's
    /// bandwidth follows its channel count only if its pages stripe).
    #[default]
    Auto,
    /// Page by page over the units, round-robin.
    Stripe,
    /// One unit's open block at a time.
    Fill,
}

impl PlacementSetting {
    /// The placement vSSDs use under `mode`.
    pub fn resolve(self, mode: Mode) -> ftl::Placement {
        match (self, mode) {
            (PlacementSetting::Auto, Mode::Fast) | (PlacementSetting::Fill, _) => {
                ftl::Placement::Fill
            }
            (PlacementSetting::Auto, Mode::Emulation) | (PlacementSetting::Stripe, _) => {
                ftl::Placement::Stripe
            }
        }
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
    /// Where vSSDs put the pages they write among their parallel units.
    /// Default [`PlacementSetting::Auto`].
    #[serde(default)]
    pub placement: PlacementSetting,
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
    /// Fleet membership on etcd. Default: none (a host on its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterSettings>,
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("./flexssd-data")
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
        self.harvest.validate().map_err(ControlError::Config)?;
        if let Some(c) = &self.cluster {
            c.validate().map_err(ControlError::Config)?;
        }
        self.nbd.validate().map_err(ControlError::Config)?;
        self.api.validate().map_err(ControlError::Config)?;
        let devices = devices::validate(&self.devices).map_err(ControlError::Config)?;
        vssds::validate(&self.vssds, &devices).map_err(ControlError::Config)?;
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
    use flash::{Geometry, Timing};
    use ftl::GcPolicyKind;

    use super::*;
    use crate::{BlockRange, ByteSize};

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

    fn err(text: &str) -> String {
        Config::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn bad_configs_name_the_field() {
        assert!(err("data_dri = 'x'").contains("data_dri"));
        assert!(err("mode = 'slow'").contains("slow"));
        assert!(err("placement = 'diagonal'").contains("diagonal"));
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
    fn modes_parse() {
        assert_eq!("fast".parse::<Mode>(), Ok(Mode::Fast));
        assert_eq!("emulation".parse::<Mode>(), Ok(Mode::Emulation));
        assert!("x".parse::<Mode>().is_err());
        assert_eq!(Mode::Emulation.to_string(), "emulation");
    }

    #[test]
    fn placement_follows_the_mode_unless_set() {
        use ftl::Placement;
        let p = |text: &str| {
            let c = Config::from_toml(text).unwrap();
            c.placement.resolve(c.mode)
        };
        assert_eq!(Config::default().placement, PlacementSetting::Auto);
        assert_eq!(p(""), Placement::Fill, "fast mode fills");
        assert_eq!(p("mode = 'emulation'"), Placement::Stripe);
        assert_eq!(p("placement = 'stripe'"), Placement::Stripe);
        assert_eq!(p("mode = 'emulation'\nplacement = 'fill'"), Placement::Fill);
        assert_eq!(
            p("placement = 'auto'\nmode = 'emulation'"),
            Placement::Stripe
        );
    }

    #[test]
    fn the_embedded_default_is_the_reference_file() {
        assert!(DEFAULT_CONFIG.starts_with("# flexssd configuration."));
        assert!(DEFAULT_CONFIG.ends_with("# etcd_password_file = \"/etc/flexssd/etcd.password\"\n"));
        // Every section the types know is shown (commented out or not).
        for section in [
            "[api]",
            "[nbd]",
            "[[devices]]",
            "[devices.scheduler]",
            "[[vssds]]",
            "[[tiers]]",
            "[harvest]",
            "[cluster]",
        ] {
            assert!(DEFAULT_CONFIG.contains(section), "{section}");
        }
    }
}
