//! The host manager's cache tiers: `[[tiers]]` built at start-up, their
//! volumes registered as NBD exports, and their live policy and size.
//!
//! A tier's cache is an ordinary vSSD (`<tier>.cache`), placed and accounted
//! for like any other, so channels stay isolated and other vSSDs cannot land
//! on its flash. Only the tier writes to it: it is not exported, cannot be
//! deleted while the tier exists, and its name (and the tier's volume names)
//! cannot be taken by a new vSSD. Because the tier writes through, the cache
//! never holds the only copy of anything: at every start the old cache vSSD
//! is erased and a new one created, so a changed placement or size in the
//! configuration simply takes effect, and the cache starts cold.

use std::path::PathBuf;
use std::sync::Arc;

use ::tier::{CacheTier, FileStore, HddModel, TierSetup, TierStats, VolumeSpec};
use blockdev::{BlockDev, IoStats, StatsSnapshot};
use cache::{PolicyConfig, PolicyKind};
use serde::{Deserialize, Serialize};
use tracing::info;

use super::{channels_of, HostManager, State};
use crate::config::TierSpec;
use crate::exports::{ExportKind, Publish};
use crate::{format_size, Config, ControlError, Result, VssdSpec};

/// What the API and the CLI show about a tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierInfo {
    /// Tier name.
    pub name: String,
    /// Its cache vSSD.
    pub cache_vssd: String,
    /// Device of the cache vSSD.
    pub device: String,
    /// Channels of the cache vSSD.
    pub channels: Vec<u32>,
    /// Backing file.
    pub backing: PathBuf,
    /// Size of the backing file, bytes.
    pub backing_bytes: u64,
    /// The disk model timing the backing file, if any.
    pub hdd: Option<HddModel>,
    /// The policies' parameters.
    pub policy_params: PolicyConfig,
    /// Policy, sizes, zones, and per-volume hit and miss counters.
    pub stats: TierStats,
    /// Requests as each volume's NBD clients issued them, in volume order.
    pub volume_io: Vec<TierVolumeIo>,
}

/// Request counters of one tier volume's export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierVolumeIo {
    /// Volume name.
    pub name: String,
    /// Its counters.
    pub io: StatsSnapshot,
}

pub(super) struct TierVolumeEntry {
    name: String,
    export: Arc<dyn BlockDev>,
    io: Arc<IoStats>,
    tenant: Option<String>,
}

pub(super) struct TierEntry {
    cache_vssd: String,
    device: String,
    channels: Vec<u32>,
    backing: PathBuf,
    backing_bytes: u64,
    hdd: Option<HddModel>,
    tier: Arc<CacheTier>,
    volumes: Vec<TierVolumeEntry>,
}

impl State {
    /// The tier that owns `name` (one of its volumes, or its cache vSSD).
    pub(super) fn tier_owning(&self, name: &str) -> Option<&str> {
        self.tiers
            .iter()
            .find(|(_, t)| t.cache_vssd == name || t.volumes.iter().any(|v| v.name == name))
            .map(|(n, _)| n.as_str())
    }

    /// Whether `name` is the cache vSSD of a tier.
    pub(super) fn is_tier_cache(&self, name: &str) -> bool {
        self.tiers.values().any(|t| t.cache_vssd == name)
    }
}

fn tier_err(e: ::tier::TierError) -> ControlError {
    ControlError::Tier(e)
}

impl HostManager {
    /// Builds every configured tier: erases its old cache vSSD if there is
    /// one, creates it afresh, opens the backing file and registers the
    /// volumes.
    pub(super) fn open_tiers(&self, config: &Config) -> Result<()> {
        for spec in &config.tiers {
            self.open_tier(config, spec)
                .map_err(|e| e.context(format!("tier {:?}", spec.name)))?;
        }
        Ok(())
    }

    fn open_tier(&self, config: &Config, spec: &TierSpec) -> Result<()> {
        let cache_name = spec.cache_vssd();
        {
            let st = self.state.read();
            for v in &spec.volumes {
                if st.vssds.contains_key(&v.name) {
                    return Err(ControlError::TierVolumeTaken {
                        tier: spec.name.clone(),
                        volume: v.name.clone(),
                    });
                }
            }
        }
        if self.state.read().vssds.contains_key(&cache_name) {
            info!(tier = %spec.name, vssd = %cache_name, "erasing the tier's old cache vSSD");
            self.delete_vssd(&cache_name)?;
        }
        // The cache vSSD is the tier's alone: never exported.
        let info = self
            .create_vssd_as(
                &VssdSpec {
                    name: cache_name.clone(),
                    device: spec.device.clone(),
                    channels: spec.channels,
                    channel_ids: spec.channel_ids.clone(),
                    blocks: spec.blocks,
                    capacity: spec.cache_size,
                    ..VssdSpec::default()
                },
                false,
            )
            .map_err(|e| e.context("creating its cache vSSD"))?;
        let cache_dev = self
            .export_dev(&cache_name)
            .ok_or_else(|| ControlError::NoSuchVssd(cache_name.clone()))?;
        let backing = spec.backing_path(config);
        if let Some(dir) = backing.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| ControlError::Io {
                what: format!("creating {}", dir.display()),
                source,
            })?;
        }
        let store = FileStore::open(&backing, spec.backing_bytes(), spec.hdd, self.clock.clone())
            .map_err(tier_err)?;
        let cache_bytes = spec.cache_size.map_or(info.capacity_bytes, |s| s.0) / 4096 * 4096;
        let tier = CacheTier::new(
            TierSetup {
                name: spec.name.clone(),
                policy: spec.policy,
                policy_config: spec.policy_params.clone(),
                cache_bytes,
                volumes: spec
                    .volumes
                    .iter()
                    .map(|v| VolumeSpec {
                        name: v.name.clone(),
                        size: v.size.0,
                    })
                    .collect(),
                write_policy: spec.write_policy,
            },
            Arc::new(store),
            cache_dev,
            self.clock.clone(),
        )
        .map_err(tier_err)?;
        let volumes: Vec<TierVolumeEntry> = tier
            .volumes()
            .iter()
            .zip(&spec.volumes)
            .map(|(v, vs)| {
                let w = self.exports.wrap(v.clone());
                TierVolumeEntry {
                    name: v.name().to_string(),
                    export: w.export,
                    io: w.io,
                    tenant: vs.tenant.clone(),
                }
            })
            .collect();
        info!(tier = %spec.name, policy = %spec.policy, cache = %format_size(cache_bytes),
              backing = %backing.display(), volumes = spec.volumes.len(), "cache tier ready");
        let entry = TierEntry {
            cache_vssd: cache_name,
            device: info.device,
            channels: channels_of(&info.extents),
            backing,
            backing_bytes: spec.backing_bytes(),
            hdd: spec.hdd,
            tier: Arc::new(tier),
            volumes,
        };
        for v in &entry.volumes {
            self.exports.add(
                &v.name,
                Publish {
                    kind: ExportKind::TierVolume,
                    order: 0,
                    description: Self::describe_tier_volume(&spec.name, &entry, v),
                    dev: v.export.clone(),
                    gate: None,
                    owner: v.tenant.clone(),
                },
            );
        }
        self.state.write().tiers.insert(spec.name.clone(), entry);
        Ok(())
    }

    fn tier_info(name: &str, t: &TierEntry) -> TierInfo {
        TierInfo {
            name: name.to_string(),
            cache_vssd: t.cache_vssd.clone(),
            device: t.device.clone(),
            channels: t.channels.clone(),
            backing: t.backing.clone(),
            backing_bytes: t.backing_bytes,
            hdd: t.hdd,
            policy_params: t.tier.policy_config().clone(),
            stats: t.tier.stats(),
            volume_io: t
                .volumes
                .iter()
                .map(|v| TierVolumeIo {
                    name: v.name.clone(),
                    io: v.io.snapshot(),
                })
                .collect(),
        }
    }

    /// Every tier, by name, with its counters.
    pub fn tiers(&self) -> Vec<TierInfo> {
        let st = self.state.read();
        st.tiers
            .iter()
            .map(|(n, t)| Self::tier_info(n, t))
            .collect()
    }

    /// One tier with its counters.
    pub fn tier(&self, name: &str) -> Result<TierInfo> {
        let st = self.state.read();
        st.tiers
            .get(name)
            .map(|t| Self::tier_info(name, t))
            .ok_or_else(|| ControlError::NoSuchTier(name.into()))
    }

    fn cache_tier(&self, name: &str) -> Result<Arc<CacheTier>> {
        self.state
            .read()
            .tiers
            .get(name)
            .map(|t| t.tier.clone())
            .ok_or_else(|| ControlError::NoSuchTier(name.into()))
    }

    /// Switches a tier to another policy, live: the cache is emptied and the
    /// new policy starts cold; data stays where it is (the backing file).
    /// Not recorded: the next start uses the configured policy.
    pub fn set_tier_policy(&self, name: &str, policy: PolicyKind) -> Result<TierInfo> {
        let t = self.cache_tier(name)?;
        t.set_policy(policy).map_err(tier_err)?;
        info!(tier = %name, %policy, "cache tier policy changed");
        self.tier(name)
    }

    /// Resizes a tier's cache to `bytes` (a multiple of 4 KiB, at most its
    /// cache vSSD's capacity), live. Not recorded: the next start uses the
    /// configured size.
    pub fn resize_tier(&self, name: &str, bytes: u64) -> Result<TierInfo> {
        let t = self.cache_tier(name)?;
        if bytes == 0 || !bytes.is_multiple_of(4096) {
            return Err(ControlError::Invalid(format!(
                "tier {name:?}: cache size {bytes} is not a positive multiple of 4096 bytes"
            )));
        }
        t.resize(bytes / 4096).map_err(tier_err)?;
        info!(tier = %name, size = %format_size(bytes), "cache tier resized");
        self.tier(name)
    }

    fn describe_tier_volume(tname: &str, t: &TierEntry, v: &TierVolumeEntry) -> String {
        format!(
            "flexssd cache-tier volume, {}, of tier {tname} (backing {}{}, cache vSSD {})",
            format_size(v.export.size()),
            t.backing.display(),
            if t.hdd.is_some() {
                " timed as a disk"
            } else {
                ""
            },
            t.cache_vssd
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use blockdev::BlockDev;
    use clock::VirtualClock;
    use ftl::MemCheckpoints;
    use nbd::ExportRegistry;

    use super::*;
    use crate::{ControlStore, ErrorKind};

    const MIB: u64 = 1 << 20;

    /// 8 channels × 2 dies × 16 blocks × 64 pages × 4 KiB: 8 MiB a channel.
    fn config(data_dir: &str, backend: &str, tiers: &str) -> Config {
        Config::from_toml(&format!(
            r#"
            data_dir = "{data_dir}"
            [[devices]]
            name = "ssd0"
            backend = "{backend}"
            [devices.geometry]
            channels = 8
            dies_per_channel = 2
            blocks_per_plane = 16
            pages_per_block = 64
            [[vssds]]
            name = "default"
            channels = 2
            {tiers}
            "#
        ))
        .unwrap()
    }

    const TIER: &str = r#"
        [[tiers]]
        name = "t0"
        channels = 1
        cache_size = "4M"
        policy = "glru"
        volumes = [{ name = "a", size = "8M" }, { name = "b", size = "4M" }]
    "#;

    fn manager(dir: &tempfile::TempDir, tiers: &str) -> Result<HostManager> {
        HostManager::open_with(
            &config(dir.path().to_str().unwrap(), "memory", tiers),
            Arc::new(VirtualClock::new(0)),
            ControlStore::memory().unwrap(),
            Arc::new(MemCheckpoints::default()),
        )
    }

    #[test]
    fn volumes_are_exports_and_the_cache_vssd_is_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(&dir, TIER).unwrap();
        let names: Vec<String> = ExportRegistry::list(&m)
            .into_iter()
            .map(|l| l.name)
            .collect();
        assert_eq!(names, ["default", "a", "b"]);
        assert!(
            m.lookup("t0.cache").is_none(),
            "the cache vSSD is not exported"
        );
        assert_eq!(m.lookup("").unwrap().name, "default");
        let a = m.lookup("a").unwrap();
        assert!(a.description.contains("tier t0"), "{}", a.description);
        assert!(a.gate.is_none() && a.pace.is_none());
        assert_eq!(a.dev.size(), 8 * MIB);
        let b = m.lookup("b").unwrap().dev;
        a.dev.write(4096, &[1u8; 8192], false).unwrap();
        b.write(4096, &[2u8; 4096], false).unwrap();
        let mut buf = vec![0u8; 8192];
        a.dev.read(4096, &mut buf).unwrap();
        assert_eq!(buf, vec![1u8; 8192]);
        // b lies after a in the backing file.
        let raw = std::fs::read(dir.path().join("t0.backing")).unwrap();
        assert_eq!(raw.len() as u64, 12 * MIB);
        assert_eq!(
            &raw[(8 * MIB + 4096) as usize..(8 * MIB + 8192) as usize],
            &[2u8; 4096]
        );
        let t = m.tier("t0").unwrap();
        assert_eq!(t.cache_vssd, "t0.cache");
        assert_eq!(
            t.channels,
            vec![2],
            "the lowest free channel after the default vSSD"
        );
        assert_eq!(t.stats.cache_bytes, 4 * MIB);
        assert_eq!(t.stats.volumes[0].write_misses, 2);
        assert_eq!(t.stats.volumes[0].read_hits, 2);
        assert_eq!(t.volume_io[0].io.reads, 1);
        assert_eq!(t.volume_io[1].io.write_bytes, 4096);
        assert!(m.list().iter().any(|v| v.name == "t0.cache"));
        assert_eq!(m.tiers().len(), 1);
    }

    #[test]
    fn policy_and_size_change_live_and_bad_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(&dir, TIER).unwrap();
        let t = m.set_tier_policy("t0", PolicyKind::Grem).unwrap();
        assert_eq!(t.stats.policy, PolicyKind::Grem);
        assert_eq!(t.stats.long_term_zone_bytes, Some(2 * MIB));
        let t = m.resize_tier("t0", 2 * MIB).unwrap();
        assert_eq!(t.stats.cache_bytes, 2 * MIB);
        assert_eq!(t.stats.long_term_zone_bytes, Some(MIB));
        let e = m.resize_tier("t0", 8 * MIB).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest);
        assert!(
            e.to_string().contains("more than its cache device holds"),
            "{e}"
        );
        let e = m.resize_tier("t0", 5000).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest);
        let e = m.resize_tier("t0", 512 << 10).unwrap_err();
        assert!(e.to_string().contains("too small for grem"), "{e}");
        let e = m.set_tier_policy("nope", PolicyKind::Arc).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(
            e.to_string().contains("no cache tier named \"nope\""),
            "{e}"
        );
        assert_eq!(m.tier("nope").unwrap_err().kind(), ErrorKind::NotFound);
    }

    #[test]
    fn tier_names_cannot_be_taken_or_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(&dir, TIER).unwrap();
        for name in ["a", "t0.cache"] {
            let e = m
                .create_vssd(&VssdSpec {
                    name: name.into(),
                    channels: Some(1),
                    ..VssdSpec::default()
                })
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
            if name == "a" {
                assert!(e.to_string().contains("cache tier \"t0\""), "{e}");
            }
        }
        let e = m.delete_vssd("t0.cache").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
        assert!(m.vssd("t0.cache").is_some());
    }

    #[test]
    fn a_tier_that_cannot_be_built_stops_the_start_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let e = manager(&dir, &TIER.replace("channels = 1", "channels = 7"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tier \"t0\"") && e.contains("not enough free channels"),
            "{e}"
        );
        let e = manager(&dir, &TIER.replace("glru", "grem").replace("4M", "512K"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tier \"t0\"") && e.contains("too small for grem"),
            "{e}"
        );
    }

    #[test]
    fn data_survives_a_restart_and_the_cache_vssd_is_made_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap().to_string();
        let open = || {
            HostManager::open(&config(&d, "file", TIER), Arc::new(VirtualClock::new(0))).unwrap()
        };
        let m = open();
        let id = m.get("t0.cache").unwrap().id;
        m.lookup("b")
            .unwrap()
            .dev
            .write(MIB, &[7u8; 4096], false)
            .unwrap();
        m.shutdown().unwrap();
        drop(m);
        let m = open();
        assert_ne!(m.get("t0.cache").unwrap().id, id, "a new cache vSSD");
        let mut buf = vec![0u8; 4096];
        m.lookup("b").unwrap().dev.read(MIB, &mut buf).unwrap();
        assert_eq!(buf, vec![7u8; 4096]);
        let t = m.tier("t0").unwrap();
        assert_eq!(t.stats.volumes[1].read_misses, 1, "the cache starts cold");
        // A vSSD created meanwhile under a volume's name stops the next start.
        m.shutdown().unwrap();
        drop(m);
        let cfg = config(&d, "file", "");
        let m = HostManager::open(&cfg, Arc::new(VirtualClock::new(0))).unwrap();
        assert!(
            m.lookup("t0.cache").is_some(),
            "without its tier it is a plain vSSD"
        );
        m.create_vssd(&VssdSpec {
            name: "a".into(),
            channels: Some(1),
            ..VssdSpec::default()
        })
        .unwrap();
        m.shutdown().unwrap();
        drop(m);
        let e = HostManager::open(&config(&d, "file", TIER), Arc::new(VirtualClock::new(0)))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
        let e = e.to_string();
        assert!(e.contains("volume name \"a\" is taken by a vSSD"), "{e}");
        assert!(e.starts_with("tier \"t0\": "), "{e}");
    }

    #[test]
    fn a_cache_vssd_that_cannot_be_placed_keeps_its_kind() {
        let dir = tempfile::tempdir().unwrap();
        let e = manager(&dir, &TIER.replace("channels = 1", "channels = 9")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoSpace, "{e}");
        assert!(
            e.to_string().starts_with(
                "tier \"t0\": creating its cache vSSD: not enough free channels: 9 requested"
            ),
            "{e}"
        );
    }
}
