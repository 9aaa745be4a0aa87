//! Ghost vSSD metadata (paper Figure 10), the harvesting granularity (§4.3.2) and
//! harvest demands.
//!
//! A gSSD is a chunk of flash that a regular vSSD (its *home*), or the device's
//! unsold channels, can lend for a predicted time. The pool and the reclaim rules only
//! need this metadata; the blocks themselves live in the data plane, which the
//! `ghost` handle points to.

use clock::Nanos;
use serde::{Deserialize, Serialize};

use crate::HarvestError;

/// Identifier of a gSSD, chosen by the caller (the daemon or the simulator).
pub type GssdId = u64;
/// Identifier of a harvest tenant (the paper's `vm_id`).
pub type TenantId = u64;
/// Identifier of a regular vSSD (a gSSD's home) or of a data-plane vSSD.
pub type VssdId = u64;

/// Granularity and timer settings of the harvester.
///
/// The paper harvests in chunks of one channel, 16 GB of a 1 TB device and
/// 30 minutes, refreshes expiries every 15 minutes, and erases a released gSSD
/// instead of pooling it when it expires within 30 minutes. All of these are
/// settings here because our emulated geometries are much smaller than the paper's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HarvestConfig {
    /// Capacity granule in flash blocks. Default 4096: 16 GB of 4 MB blocks, the
    /// paper's chunk on its 1 TB device (1/64 of it); see
    /// [`HarvestConfig::chunk_for_device`] to scale it to another geometry.
    pub chunk_blocks: u64,
    /// Duration granule in seconds (default 1800, 30 minutes): a gSSD must last at
    /// least this long, and its lifetime is rounded down to a multiple of it.
    pub duration_granule_s: u64,
    /// Period of the expiry-refresh timer in seconds (default 900, 15 minutes).
    pub refresh_interval_s: u64,
    /// A released gSSD that expires within this many seconds is erased and returned
    /// to its home instead of going back to the pool (default 1800, 30 minutes).
    pub reclaim_horizon_s: u64,
    /// Which of the gSSDs that fit a demand and last long enough best fit picks:
    /// the nearest sufficient expiry (default) or the paper's farthest first.
    pub expiry_order: ExpiryOrder,
}

/// Among the gSSDs of the smallest sufficient size that last long enough for a
/// demand, which one best fit gives it. The paper keeps each size's list
/// ordered farthest expiry first and takes from the front; the nearest
/// sufficient expiry keeps long-lived gSSDs for long demands. `flexssd sim
/// harvest --expiry-order` measures one against the other
/// (`docs/results/fleet.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpiryOrder {
    /// The gSSD whose expiry is nearest while still covering the demand.
    #[default]
    Nearest,
    /// The gSSD that lasts longest (the paper's list order).
    Farthest,
}

impl std::str::FromStr for ExpiryOrder {
    type Err = HarvestError;
    fn from_str(s: &str) -> Result<Self, HarvestError> {
        match s {
            "nearest" => Ok(Self::Nearest),
            "farthest" => Ok(Self::Farthest),
            _ => Err(HarvestError::BadExpiryOrder(s.to_string())),
        }
    }
}

impl Default for HarvestConfig {
    fn default() -> Self {
        Self {
            chunk_blocks: 4096,
            duration_granule_s: 1800,
            refresh_interval_s: 900,
            reclaim_horizon_s: 1800,
            expiry_order: ExpiryOrder::Nearest,
        }
    }
}

impl HarvestConfig {
    /// The paper's chunk (16 GB of 1 TB, i.e. 1/64 of the device) scaled to a device
    /// of `total_blocks` blocks; at least one block.
    pub fn chunk_for_device(total_blocks: u64) -> u64 {
        (total_blocks / 64).max(1)
    }

    /// Checks that every granule and period is non-zero.
    pub fn validate(&self) -> Result<(), HarvestError> {
        for (field, v) in [
            ("chunk_blocks", self.chunk_blocks),
            ("duration_granule_s", self.duration_granule_s),
            ("refresh_interval_s", self.refresh_interval_s),
            ("reclaim_horizon_s", self.reclaim_horizon_s),
        ] {
            if v == 0 {
                return Err(HarvestError::BadConfig { field });
            }
        }
        Ok(())
    }

    /// The duration granule in nanoseconds.
    pub fn duration_granule(&self) -> Nanos {
        self.duration_granule_s.saturating_mul(clock::SEC)
    }

    /// The refresh period in nanoseconds.
    pub fn refresh_interval(&self) -> Nanos {
        self.refresh_interval_s.saturating_mul(clock::SEC)
    }

    /// The reclaim horizon in nanoseconds.
    pub fn reclaim_horizon(&self) -> Nanos {
        self.reclaim_horizon_s.saturating_mul(clock::SEC)
    }

    /// What a home with `free_blocks` free blocks on `free_channels` channels, free
    /// for `lasts` from now, can lend: each dimension rounded *down* to its granule
    /// (harvestable resources are under-provisioned, never over-promised). `None`
    /// when any dimension is below one granule.
    pub fn harvestable(
        &self,
        free_blocks: u64,
        free_channels: u32,
        lasts: Nanos,
    ) -> Option<(u64, u32, Nanos)> {
        let cap = free_blocks / self.chunk_blocks * self.chunk_blocks;
        let g = self.duration_granule();
        let dur = lasts / g * g;
        (cap > 0 && free_channels > 0 && dur > 0).then_some((cap, free_channels, dur))
    }
}

/// Metadata of one ghost vSSD, the fields of the paper's Figure 10.
///
/// `in_use` and `vm_id` of the figure are one field here, [`Gssd::tenant`], so that
/// they can never disagree; [`Gssd::in_use`] derives the flag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gssd {
    /// Identifier, unique in a pool.
    pub id: GssdId,
    /// Maximum bandwidth, in flash channels (at least one).
    pub bandwidth: u32,
    /// Maximum capacity, in flash blocks (a positive multiple of the chunk).
    pub capacity: u64,
    /// When the gSSD stops being available (predicted by the home's duration
    /// predictor), on the injected clock.
    pub expiry: Nanos,
    /// The harvest tenant it is assigned to, if any (Figure 10's `in_use` + `vm_id`).
    pub tenant: Option<TenantId>,
    /// The regular vSSD whose free blocks it lends; `None` for unsold channels,
    /// which belong to no regular tenant.
    pub home: Option<VssdId>,
    /// The data-plane vSSD that serves this gSSD's blocks (Figure 10's `ghost`
    /// pointer), once the data plane has created it.
    pub ghost: Option<VssdId>,
}

impl Gssd {
    /// A new, unassigned gSSD lending `capacity` blocks on `bandwidth` channels from
    /// `home` for `lasts` from `now`, checked against the granularity of `cfg`.
    ///
    /// The capacity must be a positive multiple of the chunk and the bandwidth at
    /// least one channel; the lifetime must be at least one duration granule and is
    /// rounded down to a multiple of it.
    pub fn new(
        cfg: &HarvestConfig,
        id: GssdId,
        home: Option<VssdId>,
        capacity: u64,
        bandwidth: u32,
        now: Nanos,
        lasts: Nanos,
    ) -> Result<Self, HarvestError> {
        cfg.validate()?;
        if bandwidth == 0 {
            return Err(HarvestError::ZeroBandwidth);
        }
        if capacity == 0 || !capacity.is_multiple_of(cfg.chunk_blocks) {
            return Err(HarvestError::UnalignedCapacity {
                capacity,
                chunk: cfg.chunk_blocks,
            });
        }
        let g = cfg.duration_granule();
        if lasts < g {
            return Err(HarvestError::TooShort { lasts, granule: g });
        }
        Ok(Self {
            id,
            bandwidth,
            capacity,
            expiry: now.saturating_add(lasts / g * g),
            tenant: None,
            home,
            ghost: None,
        })
    }

    /// Whether it is assigned to a harvest tenant (Figure 10's `in_use`).
    pub fn in_use(&self) -> bool {
        self.tenant.is_some()
    }

    /// Whether it covers `d` in capacity and bandwidth and lasts until at least
    /// `now + d.duration`.
    pub fn covers(&self, d: &Demand, now: Nanos) -> bool {
        self.capacity >= d.capacity
            && self.bandwidth >= d.bandwidth
            && self.expiry >= now.saturating_add(d.duration)
    }
}

/// What a harvest tenant asks for: capacity, bandwidth and how long it needs them
/// (its demand predictors' outputs, already over-provisioned by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Demand {
    /// Capacity in flash blocks.
    pub capacity: u64,
    /// Bandwidth in flash channels.
    pub bandwidth: u32,
    /// How long it is needed, in nanoseconds.
    pub duration: Nanos,
}

impl Demand {
    /// Rejects a demand with a zero dimension: it would match anything and mean
    /// nothing.
    pub fn validate(&self) -> Result<(), HarvestError> {
        if self.capacity == 0 || self.bandwidth == 0 || self.duration == 0 {
            return Err(HarvestError::ZeroDemand(*self));
        }
        Ok(())
    }

    /// What a replacement must offer when a tenant's gSSD is reclaimed early
    /// at `now` (§4.5): what the tenant uses on it, `capacity` blocks on
    /// `bandwidth` channels, for the rest of its time (until `until`; at
    /// least a nanosecond), rounded up to `cfg`. Not the reclaimed gSSD's own
    /// size: best fit may have given the tenant more than it asked for, and
    /// asking a replacement for that surplus evicts tenants a smaller gSSD
    /// could hold. The daemon's harvester and the fleet simulator both ask
    /// their pools for this.
    pub fn remaining(
        cfg: &HarvestConfig,
        capacity: u64,
        bandwidth: u32,
        until: Nanos,
        now: Nanos,
    ) -> Demand {
        Demand {
            capacity,
            bandwidth: bandwidth.max(1),
            duration: until.saturating_sub(now).max(1),
        }
        .quantized(cfg)
    }

    /// The demand rounded *up* to the granularity of `cfg` (demands are
    /// over-provisioned, never under-served).
    pub fn quantized(&self, cfg: &HarvestConfig) -> Demand {
        let c = cfg.chunk_blocks.max(1);
        let g = cfg.duration_granule().max(1);
        Demand {
            capacity: self.capacity.div_ceil(c).saturating_mul(c),
            bandwidth: self.bandwidth,
            duration: self.duration.div_ceil(g).saturating_mul(g),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::SEC;

    const MIN30: Nanos = 1800 * SEC;

    #[test]
    fn a_replacement_needs_what_the_tenant_uses_for_the_rest_of_its_time() {
        let cfg = HarvestConfig::default();
        let c = cfg.chunk_blocks;
        let g = cfg.duration_granule();
        let d = Demand::remaining(&cfg, c + 1, 0, 3 * g + 5, g);
        assert_eq!(d.capacity, 2 * c, "capacity rounds up to chunks");
        assert_eq!(d.bandwidth, 1, "at least one channel");
        assert_eq!(d.duration, 3 * g, "the rest of its time, in granules");
        // Past its end: still a valid demand, for the shortest time.
        let late = Demand::remaining(&cfg, c, 2, g, 2 * g);
        assert_eq!(late.duration, g);
        assert!(late.validate().is_ok());
    }

    #[test]
    fn granularity_is_enforced() {
        let cfg = HarvestConfig::default();
        let g = Gssd::new(&cfg, 1, Some(7), 8192, 2, 100, 3 * MIN30 + 5).unwrap();
        assert_eq!(g.expiry, 100 + 3 * MIN30, "lifetime rounded down to 30 min");
        assert!(!g.in_use());
        assert_eq!(
            Gssd::new(&cfg, 1, None, 4095, 1, 0, MIN30),
            Err(HarvestError::UnalignedCapacity {
                capacity: 4095,
                chunk: 4096
            })
        );
        assert_eq!(
            Gssd::new(&cfg, 1, None, 0, 1, 0, MIN30).unwrap_err(),
            HarvestError::UnalignedCapacity {
                capacity: 0,
                chunk: 4096
            }
        );
        assert_eq!(
            Gssd::new(&cfg, 1, None, 4096, 0, 0, MIN30),
            Err(HarvestError::ZeroBandwidth)
        );
        assert!(matches!(
            Gssd::new(&cfg, 1, None, 4096, 1, 0, MIN30 - 1),
            Err(HarvestError::TooShort { .. })
        ));
    }

    #[test]
    fn harvestable_rounds_down_and_demand_rounds_up() {
        let cfg = HarvestConfig::default();
        assert_eq!(
            cfg.harvestable(10_000, 3, 95 * 60 * SEC),
            Some((8192, 3, 3 * MIN30))
        );
        assert_eq!(cfg.harvestable(4095, 3, 95 * 60 * SEC), None);
        assert_eq!(cfg.harvestable(4096, 0, 95 * 60 * SEC), None);
        assert_eq!(cfg.harvestable(4096, 1, MIN30 - 1), None);
        let d = Demand {
            capacity: 4097,
            bandwidth: 2,
            duration: MIN30 + 1,
        }
        .quantized(&cfg);
        assert_eq!(
            d,
            Demand {
                capacity: 8192,
                bandwidth: 2,
                duration: 2 * MIN30
            }
        );
        assert_eq!(HarvestConfig::chunk_for_device(262_144), 4096);
    }

    #[test]
    fn zero_demands_are_rejected() {
        for d in [
            Demand {
                capacity: 0,
                bandwidth: 1,
                duration: 1,
            },
            Demand {
                capacity: 1,
                bandwidth: 0,
                duration: 1,
            },
            Demand {
                capacity: 1,
                bandwidth: 1,
                duration: 0,
            },
        ] {
            assert_eq!(d.validate(), Err(HarvestError::ZeroDemand(d)));
        }
    }

    #[test]
    fn config_parses_strictly() {
        let cfg: HarvestConfig = toml::from_str("chunk_blocks = 64").unwrap();
        assert_eq!(cfg.chunk_blocks, 64);
        assert_eq!(cfg.refresh_interval(), 900 * SEC);
        assert!(toml::from_str::<HarvestConfig>("chunk_block = 64").is_err());
        let bad: HarvestConfig = toml::from_str("refresh_interval_s = 0").unwrap();
        assert_eq!(
            bad.validate(),
            Err(HarvestError::BadConfig {
                field: "refresh_interval_s"
            })
        );
    }
}
