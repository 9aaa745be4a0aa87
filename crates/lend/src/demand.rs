//! Harvest tenants that ask for flash on their own (BlockFlex §4.4: "for
//! harvest VMs, BlockFlex will predict their demanded storage capacity and
//! bandwidth, as well as how long the demand will last").
//!
//! Each harvest tenant's vSSD gets the paper's predictors on the *demand*
//! side ([`Role::Demand`]: over-provisioned levels, the longer of the two
//! durations). A predictor only sees its own vSSD, so what it can tell is
//! that the tenant is about to fill it (capacity) or saturate it (bandwidth)
//! and for how long, not by how much it would go past. [`plan_demand`] turns
//! that into a request of a fixed step (a share of the tenant's own vSSD) for
//! the predicted duration, and into a release once the demand has passed and
//! the time asked for is over. The daemon's harvester carries the plan out
//! (a harvest volume the tenant owns); it is one decision, written here,
//! beside the lending policies.

use clock::Nanos;
use predict::{Prediction, PredictorConfig, QuantilePriors, Role};

use crate::learners::Learners;
use crate::{HomeSample, PolicyError};

/// The demand predictors of every harvest tenant.
#[derive(Debug)]
pub struct DemandPredictors {
    tenants: Learners,
}

impl DemandPredictors {
    /// Predictors with `cfg`, fed one window of samples every `window`.
    pub fn new(cfg: PredictorConfig, window: Nanos) -> Self {
        Self {
            tenants: Learners::new(cfg, window, Role::Demand, QuantilePriors::default()),
        }
    }

    /// Learns from this period's samples of every harvest tenant (one not in
    /// `tenants` is forgotten) and predicts for all of them.
    ///
    /// # Errors
    /// A tenant's predictors failed.
    pub fn observe(&mut self, now: Nanos, tenants: &[HomeSample]) -> Result<(), PolicyError> {
        self.tenants.observe(now, tenants)
    }

    /// The latest prediction for `tenant` and the levels it is counted in.
    pub fn prediction(&self, tenant: u64) -> Option<(Prediction, u32)> {
        let (p, _) = self.tenants.latest(tenant)?;
        Some((p, self.tenants.cfg().levels.max(1)))
    }

    /// Every latest prediction, by tenant key.
    pub fn predictions(&self) -> Vec<(u64, Prediction)> {
        self.tenants.predictions()
    }
}

/// When a harvest tenant asks, and for how much.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DemandRule {
    /// Ask when the predicted capacity or bandwidth level reaches this share
    /// of the tenant's own vSSD (0 < `request_at` <= 1).
    pub request_at: f64,
    /// Ask for this share of the tenant's own capacity (and, when bandwidth is
    /// what runs short, of its channels; at least one channel).
    pub share: f64,
}

/// What a harvest tenant's own flash looks like, and what it holds already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantNow {
    /// Bytes of its own vSSD.
    pub capacity_bytes: u64,
    /// Channels of its own vSSD.
    pub channels: u32,
    /// The end of the harvest volume its predictor asked for, if it holds one.
    pub held_until: Option<Nanos>,
}

/// What the tenant's demand predictor does this period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemandAct {
    /// Nothing.
    Hold,
    /// Ask for a harvest volume.
    Request {
        /// Bytes (4 KiB multiples, at least 4 KiB).
        capacity_bytes: u64,
        /// Channels (at least one).
        bandwidth: u32,
        /// For how long (at least one granule).
        lasts: Nanos,
    },
    /// Give the volume it asked for back: the demand passed and its time is over.
    Release,
}

/// What a harvest tenant's predictor does now. A cold predictor does
/// nothing. A warm one that predicts capacity or bandwidth at or above
/// `rule.request_at` of the tenant's own vSSD asks (unless it holds a volume
/// already) for `rule.share` of its capacity, for the predicted duration
/// (at least `granule`), on one channel or, when bandwidth runs short,
/// `rule.share` of its channels. It releases the volume once the prediction
/// falls below the threshold and the time it asked for is over: until then
/// the tenant keeps what it was promised.
pub fn plan_demand(
    prediction: Option<(Prediction, u32)>,
    tenant: TenantNow,
    rule: DemandRule,
    now: Nanos,
    granule: Nanos,
) -> DemandAct {
    let Some((p, levels)) = prediction.filter(|(p, _)| p.warm) else {
        return DemandAct::Hold;
    };
    let levels = f64::from(levels.max(1));
    let (cap, bw) = (
        f64::from(p.capacity) / levels,
        f64::from(p.bandwidth) / levels,
    );
    let short_bw = bw >= rule.request_at;
    let wants = cap >= rule.request_at || short_bw;
    match tenant.held_until {
        None if wants => {
            let bytes = (tenant.capacity_bytes as f64 * rule.share) as u64;
            let bandwidth = if short_bw {
                ((f64::from(tenant.channels) * rule.share).ceil() as u32).max(1)
            } else {
                1
            };
            DemandAct::Request {
                capacity_bytes: (bytes / 4096).max(1) * 4096,
                bandwidth,
                lasts: p.duration.max(granule),
            }
        }
        Some(until) if !wants && now >= until => DemandAct::Release,
        _ => DemandAct::Hold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::SEC;

    const RULE: DemandRule = DemandRule {
        request_at: 0.9,
        share: 0.5,
    };
    const G: Nanos = 60 * SEC;

    fn pred(cap: u32, bw: u32, duration: Nanos, warm: bool) -> Option<(Prediction, u32)> {
        Some((
            Prediction {
                bandwidth: bw,
                capacity: cap,
                spare_bandwidth: 16 - bw,
                spare_capacity: 16 - cap,
                duration,
                warm,
            },
            16,
        ))
    }

    fn tenant(held_until: Option<Nanos>) -> TenantNow {
        TenantNow {
            capacity_bytes: 64 << 20,
            channels: 4,
            held_until,
        }
    }

    #[test]
    fn a_tenant_about_to_fill_its_vssd_asks_for_a_share_for_the_predicted_time() {
        assert_eq!(
            plan_demand(pred(15, 2, 300 * SEC, true), tenant(None), RULE, 0, G),
            DemandAct::Request {
                capacity_bytes: 32 << 20,
                bandwidth: 1,
                lasts: 300 * SEC
            }
        );
        // Bandwidth short: a share of its channels too; at least a granule.
        assert_eq!(
            plan_demand(pred(4, 16, 10 * SEC, true), tenant(None), RULE, 0, G),
            DemandAct::Request {
                capacity_bytes: 32 << 20,
                bandwidth: 2,
                lasts: G
            }
        );
    }

    #[test]
    fn cold_or_calm_predictors_ask_for_nothing_and_one_volume_is_enough() {
        assert_eq!(
            plan_demand(pred(16, 16, SEC, false), tenant(None), RULE, 0, G),
            DemandAct::Hold,
            "cold"
        );
        assert_eq!(plan_demand(None, tenant(None), RULE, 0, G), DemandAct::Hold);
        assert_eq!(
            plan_demand(pred(8, 8, SEC, true), tenant(None), RULE, 0, G),
            DemandAct::Hold,
            "calm"
        );
        assert_eq!(
            plan_demand(pred(16, 16, SEC, true), tenant(Some(G)), RULE, 0, G),
            DemandAct::Hold,
            "holds one already"
        );
    }

    #[test]
    fn a_volume_goes_back_only_when_the_demand_passed_and_its_time_is_over() {
        let calm = pred(4, 1, SEC, true);
        assert_eq!(
            plan_demand(calm, tenant(Some(2 * G)), RULE, G, G),
            DemandAct::Hold,
            "its time is not over"
        );
        assert_eq!(
            plan_demand(calm, tenant(Some(2 * G)), RULE, 2 * G, G),
            DemandAct::Release
        );
        assert_eq!(
            plan_demand(pred(16, 1, SEC, true), tenant(Some(2 * G)), RULE, 3 * G, G),
            DemandAct::Hold,
            "still in demand"
        );
    }
}
