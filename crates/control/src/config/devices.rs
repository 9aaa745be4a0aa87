//! `[[devices]]`: the emulated flash devices and their SLA schedulers.
//!
//! Its own file because a device's settings (backend, geometry, timing,
//! prefaulting, `[devices.scheduler]`) are checked and used together when
//! the host opens its flash, apart from what is placed on it.

use std::collections::HashSet;
use std::path::PathBuf;

use flash::{Geometry, Timing};
use serde::{Deserialize, Serialize};

use super::valid_name;

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

/// Checks the devices: valid unique names, usable geometries, backend-only
/// settings on the right backend. Returns their names; the message names the
/// key.
pub(super) fn validate(devices: &[DeviceConfig]) -> Result<HashSet<&str>, String> {
    let mut names = HashSet::new();
    for (i, d) in devices.iter().enumerate() {
        if !valid_name(&d.name) {
            return Err(format!(
                "devices[{i}].name {:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'",
                d.name
            ));
        }
        if !names.insert(d.name.as_str()) {
            return Err(format!(
                "devices[{i}].name: device {:?} is defined twice",
                d.name
            ));
        }
        if d.prefault && d.backend != BackendKind::Memory {
            return Err(format!(
                "devices[{i}].prefault (device {}): only the memory backend can be prefaulted",
                d.name
            ));
        }
        if let Err(e) = d.geometry.validate() {
            return Err(format!("devices[{i}].geometry (device {}): {e}", d.name));
        }
        match d.timing.validate() {
            Ok(()) => {}
            Err(flash::FlashError::BadTiming { key, reason }) => {
                return Err(format!(
                    "devices[{i}].timing.{key} (device {}): {reason}",
                    d.name
                ));
            }
            Err(e) => return Err(format!("devices[{i}].timing (device {}): {e}", d.name)),
        }
        if d.backend == BackendKind::Memory && d.path.is_some() {
            return Err(format!(
                "devices[{i}].path: device {} has backend \"memory\", which takes no path",
                d.name
            ));
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn prefault_only_for_memory_devices() {
        let e =
            Config::from_toml("[[devices]]\nname = \"a\"\nbackend = \"file\"\nprefault = true\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("devices[0].prefault"), "{e}");
        let c =
            Config::from_toml("[[devices]]\nname = \"a\"\nbackend = \"memory\"\nprefault = true\n")
                .unwrap();
        assert!(c.devices[0].prefault);
    }

    #[test]
    fn suspend_keys_parse_and_bad_ones_are_named() {
        let c = Config::from_toml(
            "[[devices]]\nname = \"a\"\n[devices.timing]\nprogram_suspend_ns = 30000\n\
             erase_suspend_ns = 50000\nresume_ns = 5000\nmax_suspends = 2\n",
        )
        .unwrap();
        let t = c.devices[0].timing;
        assert_eq!(
            (
                t.program_suspend_ns,
                t.erase_suspend_ns,
                t.resume_ns,
                t.max_suspends
            ),
            (30_000, 50_000, 5_000, 2)
        );
        let e = Config::from_toml(
            "[[devices]]\nname = \"a\"\n[devices.timing]\nprogram_suspend_ns = 900000\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("devices[0].timing.program_suspend_ns"), "{e}");
        let e = Config::from_toml("[[devices]]\nname = \"a\"\n[devices.timing]\nsuspend_ns = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("suspend_ns"), "{e}");
        // Off: any suspend latency is accepted, it is never used.
        assert!(Config::from_toml(
            "[[devices]]\nname = \"a\"\n[devices.timing]\nmax_suspends = 0\nprogram_suspend_ns = 900000\n",
        )
        .is_ok());
    }

    #[test]
    fn the_scheduler_defaults_are_the_schedulers() {
        let d = sched::SchedConfig::default();
        let s = super::SchedulerSettings::default();
        assert!(s.enabled);
        let c = s.sched_config();
        assert_eq!(
            (c.slice_us, c.piece_bytes, c.bucket_ms),
            (d.slice_us, d.piece_bytes, d.bucket_ms)
        );
    }
}
