//! What idle flash is lent, and for how long: BlockFlex's lending policies
//! (OSDI'22 §4.4) behind one trait, shared by the daemon's harvester and the
//! fleet simulator.
//!
//! # Why a crate of its own
//!
//! The design's promise is the same control code on the daemon's monotonic
//! clock and on the simulator's virtual one. The daemon lends a regular vSSD's
//! emptied blocks and the simulator lends a modelled home's free share, but the
//! *decision* is the same: learn from every home's usage once per period
//! ([`LendPolicy::observe`]), say what a home may lend now and for how long
//! ([`LendPolicy::offer`]), and refresh that duration ([`LendPolicy::expiry`]).
//! So each policy is written once, here, and both callers run it: the daemon's
//! `[harvest] policy` and the simulator's `--predictor` pick from the same
//! types. No I/O, no wall clock: time comes in as [`clock::Nanos`].
//!
//! # Policies
//!
//! * [`Fixed`]: a fixed share of what the home can spare, for a fixed time.
//! * [`Predicted`]: BlockFlex's LSTMs per home (bandwidth, capacity, durations).
//! * [`UnsoldHistogramPolicy`]: unsold channels live for a low quantile of how
//!   long unsold channels of their group size stayed unsold ([`UnsoldPolicy`]).
//!
//! The fleet simulator adds its own baselines (an oracle, last window, the
//! fleet-wide histogram) as implementations of the same trait.
//!
//! # Decisions
//!
//! What a policy's answer becomes is decided once too, in [`plan_lend`] (an
//! idle home's gSSD: even over its units, whole chunks, at least a granule),
//! [`plan_unsold`] (a group of unsold channels), [`expiry_updates`] (the
//! refresh) and [`Cooling`] (who may not lend yet): the daemon's harvester
//! and the simulator call the same code between their policies and their gSSD
//! pools (`harvest::GssdPool`). The order of a period's acts (finish
//! migrations, evictions, early reclamation, the refresh, lending) is
//! written once as well, in [`run_period`] over each side's [`PeriodSteps`].
//! Harvest tenants' own demand predictors ([`DemandPredictors`]) and what
//! they ask for ([`plan_demand`]) live here too.

use clock::Nanos;

mod demand;
mod fixed;
mod learners;
mod period;
mod plan;
mod predicted;
mod unsold;

pub use demand::{plan_demand, DemandAct, DemandPredictors, DemandRule, TenantNow};
pub use fixed::{Fixed, FixedLifetime};
pub use period::{run_period, PeriodSteps};
pub use plan::{expiry_updates, plan_lend, plan_unsold, Cooling, LendPlan, Lender};
pub use predicted::Predicted;
pub use unsold::UnsoldHistogramPolicy;

/// Why a policy could not learn or predict.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A home's predictors failed.
    #[error("the predictors of home {home} failed: {source}")]
    Predictor {
        /// The home's key.
        home: u64,
        /// What failed.
        #[source]
        source: predict::PredictError,
    },
}

/// One home's usage over the last period, as the policies learn from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HomeSample {
    /// The home's key (the daemon: the vSSD's record id; the simulator: its
    /// index). Also seeds a learned policy's models.
    pub home: u64,
    /// Channels the home owns.
    pub channels: u32,
    /// Flash blocks it owns.
    pub blocks: u64,
    /// Channels its load kept busy in the period.
    pub used_channels: u32,
    /// Blocks holding its data.
    pub used_blocks: u64,
    /// Bandwidth used, as a fraction of what its channels can do (0–1).
    pub bw: f32,
    /// IOPS, as a fraction of what its dies can do (0–1).
    pub iops: f32,
    /// Capacity used, as a fraction of what it bought (0–1).
    pub util: f32,
}

/// What a home could lend now.
#[derive(Debug, Clone, Copy)]
pub struct Lendable<'a> {
    /// The home's key.
    pub home: u64,
    /// Channels it owns.
    pub channels: u32,
    /// Flash blocks it owns.
    pub blocks: u64,
    /// Blocks per parallel unit of its largest extent.
    pub extent_blocks: u32,
    /// Parallel units (dies × planes) per channel.
    pub units: u64,
    /// The capacity granule: a gSSD's blocks are a multiple of it.
    pub chunk_blocks: u64,
    /// (channel, blocks per unit it could empty now), in the order lending
    /// takes them.
    pub per_channel: &'a [(u32, u32)],
}

/// A policy's answer for one home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Lend on this many channels (the first of [`Lendable::per_channel`]).
    pub channels: u32,
    /// Lend this many blocks in all, spread evenly over those channels' units.
    pub blocks: u64,
    /// How long they are predicted to stay free.
    pub lasts: Nanos,
}

/// Decides what a home lends and for how long.
pub trait LendPolicy: Send {
    /// A short name for reports (`fixed`, `predicted`, `oracle`, ...).
    fn name(&self) -> &str;
    /// Every home's usage at this period, each home once (a learned policy
    /// trains here, so callers run it with no lock that I/O or reads take).
    fn observe(&mut self, _now: Nanos, _homes: &[HomeSample]) -> Result<(), PolicyError> {
        Ok(())
    }
    /// What `home` may lend now; `None`: nothing.
    fn offer(&mut self, now: Nanos, home: &Lendable<'_>) -> Option<Offer>;
    /// Until when the flash `home` lent stays free, as of a refresh at `now`;
    /// `None` leaves the expiry as it is.
    fn expiry(&mut self, _now: Nanos, _home: u64) -> Option<Nanos> {
        None
    }
    /// What a learned policy predicts per home now (for status pages).
    fn predictions(&self) -> Vec<(u64, predict::Prediction)> {
        Vec::new()
    }
}

/// Decides how long unsold channels stay unsold.
pub trait UnsoldPolicy: Send {
    /// How long `channels` of `device`, unsold at `now`, are predicted to stay so.
    fn lifetime(&mut self, now: Nanos, device: &str, channels: &[u32]) -> Nanos;
    /// A regular tenant took `channels` of `device` at `now`: they are sold.
    fn sold(&mut self, now: Nanos, device: &str, channels: &[u32]);
}

impl Lendable<'_> {
    /// The per-unit count that lends `blocks` on the first `channels` entries of
    /// [`Lendable::per_channel`], capped by what each of them can spare.
    pub fn per_unit(&self, channels: u32, blocks: u64) -> u64 {
        let on = &self.per_channel[..self.per_channel.len().min(channels as usize)];
        let spare = on.iter().map(|&(_, b)| u64::from(b)).min().unwrap_or(0);
        let k = self.units.max(1) * on.len() as u64;
        if k == 0 {
            return 0;
        }
        (blocks / k).min(spare)
    }
}
