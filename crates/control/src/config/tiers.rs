//! `[[tiers]]`: shared flash cache tiers (GREM / D-GREM and their baselines).
//!
//! A tier is a slow backing store (a sparse file, optionally timed like a
//! hard disk) cut into tenant volumes, each exported over NBD, and cached in
//! a vSSD carved from an emulated SSD (placed like any vSSD) under one
//! replacement policy that all its tenants share. Tiers are built from the
//! configuration at every start: the cache starts cold (the backing store
//! holds everything, the cache only copies), so nothing about a tier is
//! recorded except its cache vSSD, which is erased and created again.

use std::collections::HashSet;
use std::path::PathBuf;

use cache::{PolicyConfig, PolicyKind, WritePolicy};
use serde::{Deserialize, Deserializer, Serialize};
use tier::HddModel;

use crate::config::valid_name;
use crate::{BlockRange, ByteSize, Config, ControlError, Result};

/// Suffix of the name of a tier's cache vSSD (`<tier>.cache`).
pub const CACHE_VSSD_SUFFIX: &str = ".cache";

/// One `[[tiers]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSpec {
    /// Tier name: 1-58 characters of `[A-Za-z0-9._-]` (its cache vSSD is
    /// called `<name>.cache`).
    pub name: String,
    /// Device to carve the cache vSSD from. Default: the first device with
    /// enough free channels (or the first device, with `channel_ids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Cache vSSD on this many whole channels (the lowest-numbered free ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<u32>,
    /// Or on exactly these channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_ids: Option<Vec<u32>>,
    /// With `channel_ids`: only these blocks of each plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<BlockRange>,
    /// Cache size (the cache vSSD's capacity, and the most the cache can be
    /// resized to), a multiple of 4 KiB. Default: the placement's raw flash
    /// less 12.5% over-provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_size: Option<ByteSize>,
    /// Replacement policy: glru, car, arc, vfrm, isolation, grem or dgrem. Default
    /// `dgrem`.
    #[serde(default = "default_policy", deserialize_with = "de_policy")]
    pub policy: PolicyKind,
    /// The policies' parameters (line and bin sizes, epoch length, GREM's
    /// aging, D-GREM's α, β, γ, ...). Default: the paper's.
    #[serde(default)]
    pub policy_params: PolicyConfig,
    /// How writes reach the backing store: `write-through` (the default:
    /// every write goes to the backing file, the cache only copies) or
    /// `write-back` (writes that hit or are admitted stay in the cache until
    /// their line is evicted or a flush comes; contiguous dirty lines go back
    /// together).
    #[serde(default)]
    pub write_policy: WritePolicy,
    /// Backing file. Default `<data_dir>/<name>.backing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backing: Option<PathBuf>,
    /// Size of the backing file. Default: the volumes' sizes added up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backing_size: Option<ByteSize>,
    /// Time the backing file like a hard disk (`[tiers.hdd]`, an empty
    /// table for the defaults). Default: untimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hdd: Option<HddModel>,
    /// The tenant volumes, laid out in this order in the backing file.
    pub volumes: Vec<TierVolumeSpec>,
}

/// One tenant volume of a tier (`[[tiers.volumes]]` or `volumes = [{...}]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierVolumeSpec {
    /// Volume name, also its NBD export name.
    pub name: String,
    /// Size, a multiple of 4 KiB.
    pub size: ByteSize,
    /// The tenant that owns it (see [`VssdSpec::tenant`](crate::VssdSpec::tenant)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

fn default_policy() -> PolicyKind {
    PolicyKind::Dgrem
}

/// Parses a policy name like the API and the simulator do (`lru`, `D-GREM`
/// are accepted too), with an error that lists the names.
fn de_policy<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<PolicyKind, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

impl TierSpec {
    /// Name of the tier's cache vSSD: `<name>.cache`.
    pub fn cache_vssd(&self) -> String {
        format!("{}{CACHE_VSSD_SUFFIX}", self.name)
    }

    /// The volumes' sizes added up.
    pub fn volumes_bytes(&self) -> u64 {
        self.volumes.iter().map(|v| v.size.0).sum()
    }

    /// The backing file's size: `backing_size`, or the volumes' total.
    pub fn backing_bytes(&self) -> u64 {
        self.backing_size
            .map_or_else(|| self.volumes_bytes(), |s| s.0)
    }

    /// The backing file: `backing`, or `<data_dir>/<name>.backing`.
    pub fn backing_path(&self, cfg: &Config) -> PathBuf {
        self.backing
            .clone()
            .unwrap_or_else(|| cfg.data_dir.join(format!("{}.backing", self.name)))
    }
}

/// Checks the `[[tiers]]` of `cfg`: names (unique among tiers, volumes and
/// `[[vssds]]`, as they share the NBD export names), placement, sizes, the
/// policy parameters and the disk model.
pub(crate) fn validate(cfg: &Config) -> Result<()> {
    let err = |m: String| Err(ControlError::Config(m));
    let mut exports: HashSet<String> = cfg.vssds.iter().map(|v| v.name.clone()).collect();
    let mut tiers = HashSet::new();
    let mut files = HashSet::new();
    for (i, t) in cfg.tiers.iter().enumerate() {
        let at = format!("tiers[{i}] ({})", t.name);
        if !valid_name(&t.name) || t.name.len() > 64 - CACHE_VSSD_SUFFIX.len() {
            return err(format!(
                "tiers[{i}].name {:?}: use 1-{} characters of A-Z, a-z, 0-9, '.', '_', '-'",
                t.name,
                64 - CACHE_VSSD_SUFFIX.len()
            ));
        }
        if !tiers.insert(t.name.as_str()) {
            return err(format!(
                "tiers[{i}].name: tier {:?} is defined twice",
                t.name
            ));
        }
        if !exports.insert(t.cache_vssd()) {
            return err(format!(
                "{at}: its cache vSSD would be called {:?}, which is taken",
                t.cache_vssd()
            ));
        }
        if let Some(dev) = &t.device {
            if !cfg.devices.iter().any(|d| &d.name == dev) {
                return err(format!(
                    "tiers[{i}].device: no device named {dev:?} in [[devices]]"
                ));
            }
        }
        if t.channels.is_none() && t.channel_ids.is_none() {
            return err(format!(
                "{at}: set channels or channel_ids for its cache vSSD"
            ));
        }
        if let Some(s) = t.cache_size {
            if s.0 == 0 || !s.0.is_multiple_of(4096) {
                return err(format!(
                    "tiers[{i}].cache_size = {}: must be a positive multiple of 4096 bytes",
                    s.0
                ));
            }
        }
        if t.volumes.is_empty() {
            return err(format!(
                "{at}: no volumes; add at least one volumes = [{{ name = \"...\", size = \"1G\" }}]"
            ));
        }
        for (j, v) in t.volumes.iter().enumerate() {
            if !valid_name(&v.name) {
                return err(format!(
                    "tiers[{i}].volumes[{j}].name {:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'",
                    v.name
                ));
            }
            if let Some(t) = v.tenant.as_deref().filter(|t| !valid_name(t)) {
                return err(format!(
                    "tiers[{i}].volumes[{j}].tenant {t:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'"
                ));
            }
            if !exports.insert(v.name.clone()) {
                return err(format!(
                    "tiers[{i}].volumes[{j}].name: {:?} is taken (by a vSSD or another tier volume: they share the NBD export names)",
                    v.name
                ));
            }
            if v.size.0 == 0 || !v.size.0.is_multiple_of(4096) {
                return err(format!(
                    "tiers[{i}].volumes[{j}].size = {}: must be a positive multiple of 4096 bytes",
                    v.size.0
                ));
            }
        }
        if let Some(b) = t.backing_size {
            if b.0 < t.volumes_bytes() {
                return err(format!(
                    "tiers[{i}].backing_size = {}: the volumes need {} bytes",
                    b.0,
                    t.volumes_bytes()
                ));
            }
        }
        if let Err(e) = t.policy_params.validate() {
            return err(format!("tiers[{i}].policy_params: {e}"));
        }
        if let Some(h) = &t.hdd {
            if let Err(e) = h.validate() {
                return err(format!("tiers[{i}].hdd: {e}"));
            }
        }
        if !files.insert(t.backing_path(cfg)) {
            return err(format!(
                "tiers[{i}].backing: {} is the backing file of another tier too",
                t.backing_path(cfg).display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEVICE: &str = "[[devices]]\nname = \"ssd0\"\nbackend = \"memory\"\n";

    fn parse(tiers: &str) -> Result<Config> {
        Config::from_toml(&format!("data_dir = \"/d\"\n{DEVICE}{tiers}"))
    }

    fn err(tiers: &str) -> String {
        parse(tiers).unwrap_err().to_string()
    }

    #[test]
    fn the_default_has_no_tier_and_its_commented_example_is_valid() {
        assert!(Config::default().tiers.is_empty());
        let example: String = crate::DEFAULT_CONFIG
            .lines()
            .skip_while(|l| *l != "# [[tiers]]")
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| {
                l.starts_with("[[tiers]]")
                    || l.split_once(" = ").is_some_and(|(k, _)| !k.contains(' '))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(example.contains("volumes = "), "{example}");
        let c = Config::from_toml(&format!("[[devices]]\nname = \"ssd0\"\n{example}")).unwrap();
        let t = &c.tiers[0];
        assert_eq!((t.name.as_str(), t.volumes.len()), ("tier0", 2));
        assert_eq!(t.policy_params, PolicyConfig::default());
        assert_eq!(t.hdd, Some(HddModel::default()));
    }

    #[test]
    fn a_tier_parses_with_its_defaults() {
        let c = parse(
            r#"
            [[tiers]]
            name = "t0"
            channels = 1
            volumes = [{ name = "a", size = "64M" }, { name = "b", size = 1048576 }]
            "#,
        )
        .unwrap();
        let t = &c.tiers[0];
        assert_eq!(t.policy, PolicyKind::Dgrem);
        assert_eq!(t.policy_params, PolicyConfig::default());
        assert_eq!(t.write_policy, WritePolicy::WriteThrough);
        assert_eq!(t.cache_vssd(), "t0.cache");
        assert_eq!(t.backing_path(&c), PathBuf::from("/d/t0.backing"));
        assert_eq!(t.backing_bytes(), 65 << 20);
        assert_eq!(t.hdd, None);
        assert_eq!(t.cache_size, None);
    }

    #[test]
    fn every_field_parses() {
        let c = parse(
            r#"
            [[tiers]]
            name = "t0"
            device = "ssd0"
            channel_ids = [2, 3]
            blocks = "0..8"
            cache_size = "16M"
            policy = "D-GREM"
            backing = "/x/b.img"
            backing_size = "1G"
            policy_params = { epoch_secs = 2.5, alpha = 0.5 }
            write_policy = "write-back"
            [tiers.hdd]
            rpm = 5400
            [[tiers.volumes]]
            name = "a"
            size = "8M"
            "#,
        )
        .unwrap();
        let t = &c.tiers[0];
        assert_eq!(t.policy, PolicyKind::Dgrem);
        assert_eq!(t.policy_params.epoch_secs, 2.5);
        assert_eq!(t.write_policy, WritePolicy::WriteBack);
        assert_eq!(t.hdd.unwrap().rpm, 5400);
        assert_eq!(t.hdd.unwrap().max_seek_us, HddModel::default().max_seek_us);
        assert_eq!(t.backing_bytes(), 1 << 30);
        assert_eq!(t.blocks, Some(BlockRange { start: 0, end: 8 }));
        assert_eq!(t.cache_size, Some(ByteSize(16 << 20)));
        let lru = parse("[[tiers]]\nname = \"t\"\nchannels = 1\npolicy = \"lru\"\nvolumes = [{ name = \"a\", size = 4096 }]\n").unwrap();
        assert_eq!(lru.tiers[0].policy, PolicyKind::Glru);
    }

    #[test]
    fn bad_tiers_name_the_problem() {
        let vol = "volumes = [{ name = \"a\", size = \"1M\" }]";
        let e = err(&format!(
            "[[tiers]]\nname = \"t\"\nchannels = 1\npolicy = \"lfu\"\n{vol}\n"
        ));
        assert!(
            e.contains("unknown cache policy \"lfu\"")
                && e.contains("glru, car, arc, vfrm, isolation, grem, dgrem"),
            "{e}"
        );
        let e = err(&format!(
            "[[tiers]]\nname = \"t\"\nchannels = 1\ncolour = 1\n{vol}\n"
        ));
        assert!(e.contains("colour"), "{e}");
        let e = err(&format!("[[tiers]]\nname = \"t\"\n{vol}\n"));
        assert!(
            e.contains("tiers[0] (t): set channels or channel_ids"),
            "{e}"
        );
        let e = err("[[tiers]]\nname = \"t\"\nchannels = 1\nvolumes = []\n");
        assert!(e.contains("no volumes"), "{e}");
        let e = err("[[tiers]]\nname = \"t\"\nchannels = 1\n");
        assert!(e.contains("volumes"), "{e}");
        let e = err(
            "[[tiers]]\nname = \"t\"\nchannels = 1\nvolumes = [{ name = \"a\", size = 1000 }]\n",
        );
        assert!(e.contains("tiers[0].volumes[0].size = 1000"), "{e}");
        let e = err("[[tiers]]\nname = \"t\"\nchannels = 1\nvolumes = [{ name = \"a\", size = \"1M\", colour = 2 }]\n");
        assert!(e.contains("colour"), "{e}");
        let e = err(&format!(
            "[[tiers]]\nname = \"t\"\nchannels = 1\ndevice = \"nope\"\n{vol}\n"
        ));
        assert!(e.contains("tiers[0].device"), "{e}");
        let e = err(&format!(
            "[[tiers]]\nname = \"t\"\nchannels = 1\ncache_size = 5000\n{vol}\n"
        ));
        assert!(e.contains("tiers[0].cache_size"), "{e}");
        let e = err(&format!(
            "[[tiers]]\nname = \"t\"\nchannels = 1\nbacking_size = \"512K\"\n{vol}\n"
        ));
        assert!(
            e.contains("tiers[0].backing_size") && e.contains("1048576"),
            "{e}"
        );
        let e = err(&format!(
            "[[tiers]]\nname = \"t\"\nchannels = 1\npolicy_params = {{ beta = -1.0 }}\n{vol}\n"
        ));
        assert!(
            e.contains("tiers[0].policy_params") && e.contains("beta"),
            "{e}"
        );
        let e = err(&format!(
            "[[tiers]]\nname = \"t\"\nchannels = 1\nhdd = {{ rpm = 0 }}\n{vol}\n"
        ));
        assert!(e.contains("tiers[0].hdd") && e.contains("rpm"), "{e}");
        let e = err(&format!(
            "[[tiers]]\nname = \"t\"\nchannels = 1\nhdd = {{ rmp = 1 }}\n{vol}\n"
        ));
        assert!(e.contains("rmp"), "{e}");
        let e = err(&format!(
            "[[tiers]]\nname = \"{}\"\nchannels = 1\n{vol}\n",
            "x".repeat(60)
        ));
        assert!(e.contains("tiers[0].name"), "{e}");
    }

    #[test]
    fn names_are_unique_across_tiers_volumes_and_vssds() {
        let t = |name: &str, vol: &str| {
            format!("[[tiers]]\nname = \"{name}\"\nchannels = 1\nvolumes = [{{ name = \"{vol}\", size = \"1M\" }}]\n")
        };
        let e = err(&format!("{}{}", t("t", "a"), t("t", "b")));
        assert!(e.contains("tier \"t\" is defined twice"), "{e}");
        let e = err(&format!("{}{}", t("t", "a"), t("u", "a")));
        assert!(
            e.contains("tiers[1].volumes[0].name") && e.contains("taken"),
            "{e}"
        );
        let e = err(&format!(
            "[[vssds]]\nname = \"a\"\nchannels = 1\n{}",
            t("t", "a")
        ));
        assert!(e.contains("tiers[0].volumes[0].name"), "{e}");
        let e = err(&format!(
            "[[vssds]]\nname = \"t.cache\"\nchannels = 1\n{}",
            t("t", "a")
        ));
        assert!(e.contains("cache vSSD would be called \"t.cache\""), "{e}");
        let e = err(&t("t", "t.cache"));
        assert!(e.contains("taken"), "{e}");
        let e = err(&format!(
            "{}backing = \"/f\"\n{}backing = \"/f\"\n",
            t("t", "a"),
            t("u", "b")
        ));
        assert!(e.contains("tiers[1].backing"), "{e}");
    }
}
