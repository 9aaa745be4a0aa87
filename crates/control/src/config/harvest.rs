//! `[harvest]`: the settings of BlockFlex storage harvesting.
//!
//! Its own file because it is the largest section and the only one with
//! policies of its own (how much a regular vSSD lends, how long unsold
//! channels stay unsold) and the predictors' settings: the harvester reads
//! these and nothing else of the configuration.

use serde::{Deserialize, Serialize};

use crate::ByteSize;

/// The lowest non-zero `migrate_rate`, bytes per second: anything slower is
/// taken for a missing unit (`"64"` meant as `"64M"`), since it would take a
/// 1 GiB gSSD more than four hours to move.
const MIN_MIGRATE_RATE: u64 = 64 << 10;

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
    /// Histogram policy: the quantile of unsold stretches, ended and still
    /// running, at which an unsold gSSD is given what is left of a stretch of
    /// its channels' age (0–1; default 0.2: four in five are expected to last
    /// longer; see `lend::UnsoldHistogramPolicy`).
    pub unsold_quantile: f64,
    /// Time an evicted harvest volume gets to move off, seconds. Default 300
    /// (cut short if its home runs out of room first: regular tenants come
    /// first, as in the paper).
    pub eviction_grace_s: u64,
    /// How long a regular tenant's write that ran out of room, with its blocks
    /// lent, waits for them to come back before it fails with ENOSPC, in
    /// milliseconds. Default 10000; 0: it fails at once. The home asks for
    /// its blocks from the write path, so the wait is one erase or one
    /// migration, not a period.
    pub reclaim_wait_ms: u64,
    /// Copy unit of a live migration, bytes. Default 1 MiB.
    pub migrate_chunk_bytes: u64,
    /// Bandwidth limit of a live migration's background copy, bytes per second
    /// (`"64M"` style, or an integer); `0` (default): no limit. Chunks are
    /// spaced by `migrate_chunk_bytes / migrate_rate` on the daemon's clock, so
    /// that moving a volume does not take the flash from the tenants on the
    /// same channels. A non-zero rate below 64 KiB/s is refused (a missing unit).
    pub migrate_rate: ByteSize,
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
    /// Harvest tenants ask for flash on their own: each harvest tenant's vSSD
    /// gets the predictors on the demand side (`[harvest.predictor]`, fed
    /// every `window_s`), and when they predict it at or above
    /// `auto_request_at` of its capacity or bandwidth, the harvester creates
    /// a harvest volume it owns (`<tenant>-auto-<seconds>`), of
    /// `auto_request_share` of its capacity, for the predicted duration; the
    /// volume is released once the demand passed and that time is over (and
    /// no request reached it for a period). Default `false`: requests are
    /// made by hand (`POST /v1/harvest/volumes`), which stays possible.
    pub auto_request: bool,
    /// The predicted share of its own vSSD (capacity or bandwidth) at which a
    /// harvest tenant asks (0 < x <= 1). Default 0.9.
    pub auto_request_at: f64,
    /// What a harvest tenant asks for, as a share of its own capacity (and of
    /// its channels when bandwidth runs short; at least one channel).
    /// Default 0.5 (0 < x <= 4).
    pub auto_request_share: f64,
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
            reclaim_wait_ms: 10_000,
            migrate_chunk_bytes: 1 << 20,
            migrate_rate: ByteSize(0),
            priority_slack_us: 1,
            policy: LendPolicyKind::Predicted,
            window_s: 18,
            predictor: predict::PredictorConfig::default(),
            auto_request: false,
            auto_request_at: 0.9,
            auto_request_share: 0.5,
        }
    }
}

impl HarvestSettings {
    /// Checks what the types alone cannot; the message names the key.
    pub(super) fn validate(&self) -> std::result::Result<(), String> {
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
        self.predictor
            .validate()
            .map_err(|e| format!("harvest.predictor: {e}"))?;
        if self.enabled && (self.policy == LendPolicyKind::Predicted || self.auto_request) {
            predict::VssdPredictor::new(&self.predictor, predict::Role::Harvestable, 0)
                .map_err(|e| format!("harvest.predictor: {e}"))?;
        }
        if !(self.auto_request_at > 0.0 && self.auto_request_at <= 1.0) {
            return Err(format!(
                "harvest.auto_request_at = {} must be in (0, 1]",
                self.auto_request_at
            ));
        }
        if !(self.auto_request_share > 0.0 && self.auto_request_share <= 4.0) {
            return Err(format!(
                "harvest.auto_request_share = {} must be in (0, 4]",
                self.auto_request_share
            ));
        }
        if !self.migrate_chunk_bytes.is_multiple_of(4096) {
            return Err(format!(
                "harvest.migrate_chunk_bytes = {} must be a multiple of 4096",
                self.migrate_chunk_bytes
            ));
        }
        if self.migrate_rate.0 != 0 && self.migrate_rate.0 < MIN_MIGRATE_RATE {
            return Err(format!(
                "harvest.migrate_rate = {} is below {}/s: write the unit (e.g. \"64M\" for 64 MiB/s), or 0 for no limit",
                self.migrate_rate.0,
                crate::format_size(MIN_MIGRATE_RATE)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_off() {
        let s = HarvestSettings::default();
        assert!(!s.enabled);
        s.validate().unwrap();
        // Turning it on with the default (predicted) policy builds predictors.
        HarvestSettings { enabled: true, ..s }.validate().unwrap();
    }

    #[test]
    fn migrate_rate_is_a_size_and_zero_is_no_limit() {
        let parse = |t: &str| toml::from_str::<HarvestSettings>(t).unwrap();
        assert_eq!(HarvestSettings::default().migrate_rate, ByteSize(0));
        assert_eq!(parse("").migrate_rate, ByteSize(0), "unlimited by default");
        for (t, want) in [
            ("migrate_rate = \"64M\"", 64 << 20),
            ("migrate_rate = \"512K\"", 512 << 10),
            ("migrate_rate = 1048576", 1 << 20),
            ("migrate_rate = 0", 0),
        ] {
            let h = parse(t);
            assert_eq!(h.migrate_rate, ByteSize(want), "{t}");
            h.validate().unwrap();
        }
        HarvestSettings {
            migrate_rate: ByteSize(MIN_MIGRATE_RATE),
            ..Default::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn bad_settings_name_the_key() {
        let bad = [
            (
                HarvestSettings {
                    tick_ms: 0,
                    ..Default::default()
                },
                "harvest.tick_ms must be greater than 0",
            ),
            (
                HarvestSettings {
                    unsold_quantile: 1.5,
                    ..Default::default()
                },
                "harvest.unsold_quantile",
            ),
            (
                HarvestSettings {
                    lend_for_s: 60,
                    ..Default::default()
                },
                "shorter than one duration granule",
            ),
            (
                HarvestSettings {
                    migrate_chunk_bytes: 1000,
                    ..Default::default()
                },
                "multiple of 4096",
            ),
            (
                HarvestSettings {
                    migrate_rate: ByteSize(64),
                    ..Default::default()
                },
                "harvest.migrate_rate = 64 is below 64K/s",
            ),
        ];
        for (s, want) in bad {
            let e = s.validate().unwrap_err();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }
}
