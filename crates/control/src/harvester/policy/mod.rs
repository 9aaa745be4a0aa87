//! The harvester's policies: which of `crates/lend`'s [`LendPolicy`] and
//! [`UnsoldPolicy`] the settings name (one match each), and how the harvester
//! turns a home's counters into the [`HomeSample`] they learn from.
//!
//! The policies themselves live in `crates/lend`, one file each, so that the
//! fleet simulator runs the very same types.

use std::collections::BTreeMap;

use clock::{Nanos, SEC};
use lend::{
    Fixed, FixedLifetime, HomeSample, LendPolicy, Predicted, UnsoldHistogramPolicy, UnsoldPolicy,
};

use super::{DeviceView, HomeView};
use crate::config::{HarvestSettings, LendPolicyKind, UnsoldPolicyKind};

/// The lending policy the settings name.
pub fn lend_policy(s: &HarvestSettings) -> Box<dyn LendPolicy> {
    let lend_for = s.lend_for_s.saturating_mul(SEC);
    match s.policy {
        LendPolicyKind::Fixed => Box::new(Fixed::new(s.lend_fraction, lend_for)),
        LendPolicyKind::Predicted => Box::new(Predicted::new(
            s.predictor.clone(),
            s.window_s.saturating_mul(SEC),
        )),
    }
}

/// The unsold-channel policy the settings name.
pub fn unsold_policy(s: &HarvestSettings) -> Box<dyn UnsoldPolicy> {
    let lend_for = s.lend_for_s.saturating_mul(SEC);
    match s.unsold_policy {
        UnsoldPolicyKind::Fixed => Box::new(FixedLifetime::new(lend_for)),
        UnsoldPolicyKind::Histogram => Box::new(UnsoldHistogramPolicy::new(
            s.granule_s,
            s.unsold_quantile,
            lend_for,
        )),
    }
}

/// A policy and what it needs to see rates: each home's counters at the
/// previous period.
pub(super) struct PolicyRt {
    pub(super) policy: Box<dyn LendPolicy>,
    pub(super) sampler: Sampler,
}

impl PolicyRt {
    pub(super) fn new(policy: Box<dyn LendPolicy>) -> Self {
        Self {
            policy,
            sampler: Sampler::default(),
        }
    }
}

/// Turns vSSDs' counters into the samples predictors learn from: it keeps
/// each vSSD's counters of the previous period to see rates.
#[derive(Default)]
pub(super) struct Sampler {
    /// Time, bytes and requests of each vSSD at the previous sample.
    last: BTreeMap<u64, (Nanos, u64, u64)>,
}

impl Sampler {
    /// Samples every vSSD at `now`: bandwidth and IOPS since the previous
    /// sample as fractions of what its channels and dies can do, utilisation as
    /// a fraction of its capacity. A home seen for the first time has no rate
    /// yet and is left out until the next period.
    pub(super) fn sample(
        &mut self,
        homes: &[HomeView],
        devices: &[DeviceView],
        now: Nanos,
    ) -> Vec<HomeSample> {
        self.last.retain(|k, _| homes.iter().any(|h| h.id == *k));
        let mut out = Vec::with_capacity(homes.len());
        for h in homes {
            let Some(d) = devices.iter().find(|d| d.name == h.device) else {
                continue;
            };
            let io = h.io.snapshot();
            let (bytes, ops) = (io.read_bytes + io.write_bytes, io.reads + io.writes);
            let prev = self.last.insert(h.id, (now, bytes, ops));
            let Some((t0, b0, o0)) = prev.filter(|p| now > p.0) else {
                continue;
            };
            let geo = d.geometry;
            let nch = h.channels().len() as u32;
            let units = u64::from(geo.dies_per_channel) * u64::from(geo.planes_per_die);
            let dt = (now - t0) as f64 / 1e9;
            let bw_full = f64::from(nch) * d.timing.channel_mbps as f64 * 1e6;
            let iops_full = f64::from(nch) * f64::from(geo.dies_per_channel) * 1e9
                / d.timing.read_ns.max(1) as f64;
            let bw = (bytes.saturating_sub(b0) as f64 / dt / bw_full).clamp(0.0, 1.0);
            let mapped = h.vssd.stats().mapped_pages;
            out.push(HomeSample {
                home: h.id,
                channels: nch,
                blocks: h.extents.iter().map(|e| u64::from(e.blocks)).sum::<u64>() * units,
                used_channels: (bw * f64::from(nch)).ceil() as u32,
                used_blocks: mapped.div_ceil(u64::from(geo.pages_per_block).max(1)),
                bw: bw as f32,
                iops: (ops.saturating_sub(o0) as f64 / dt / iops_full).clamp(0.0, 1.0) as f32,
                util: ((mapped * u64::from(geo.page_size)) as f64 / h.capacity_bytes.max(1) as f64)
                    .clamp(0.0, 1.0) as f32,
            });
        }
        out
    }
}
