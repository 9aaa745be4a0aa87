//! The BlockFlex fleet simulator (OSDI'22 §5.2, Figures 15–17): thousands of regular
//! tenants and tens of thousands of harvest tenants on a virtual clock, harvesting
//! through the same [`harvest::GssdPool`] code the daemon uses.
//!
//! # Why a simulator beside the daemon
//!
//! The paper's utilisation results come from matching 60,000 harvest VMs against
//! 4,000 regular VMs and 1,400 servers of real cluster traces; no emulated device
//! can run that. Only the *decisions* matter at that scale (what is predicted free,
//! which gSSD a request gets, when a home takes its flash back), and those live in
//! the `harvest` crate as pure functions, so the fleet runs them on a model of usage
//! instead of on flash.
//!
//! # Pieces
//!
//! * [`traces`]: the real inputs (Alibaba 2018 `disk_io_percent` → bandwidth;
//!   Google 2011 local disk space → capacity; Azure V1 arrivals → sold channels),
//!   with errors naming file and line.
//! * [`gen`]: generators fitted to them for fleet scale (synthetic).
//! * [`predict`]: the simulator's baselines (oracle, last window, histogram) as
//!   implementations of `lend::LendPolicy`, the one predictor trait, which the
//!   daemon's harvester runs; the daemon's own policies (`fixed`, the LSTMs, and
//!   for unsold channels `lend::UnsoldHistogramPolicy` and `lend::FixedLifetime`)
//!   run here through it too ([`Policies`]).
//! * [`sim`]: the populations and the discrete-event loop on a
//!   `clock::VirtualClock`, deciding through the daemon's `lend::plan_lend`,
//!   `lend::plan_unsold` and `lend::expiry_updates`; [`Fleet::run`] returns a
//!   [`ScenarioReport`].
//!
//! Deterministic: every random draw comes from `rng::SplitMix64` streams
//! derived from the seed, and time is the virtual clock only.

use std::path::PathBuf;

pub mod gen;
pub mod predict;
pub mod sim;
pub mod traces;

/// The pool's settings, part of [`FleetConfig`] (`harvest_cfg`).
pub use harvest::{ExpiryOrder, HarvestConfig};
pub use predict::{Histogram, LastWindow, Oracle, Usage};
pub use sim::{
    Counters, Fleet, FleetConfig, HarvestTenant, Home, Policies, Population, PredictorKind,
    Provenance, Scenario, ScenarioReport, UtilStats,
};
pub use traces::{load, Inputs, MachineSeries};

/// The simulator's step in seconds (5 minutes, the Azure arrival bin).
pub const STEP_S: u64 = 300;

/// What can go wrong building or running a fleet.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// An input file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A malformed line in an input file (line 0: the file as a whole).
    #[error("{}:{line}: {msg}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// Impossible parameters.
    #[error("{0}")]
    BadParam(String),
    /// The harvest library refused an operation (a simulator bug if it happens).
    #[error("harvest: {0}")]
    Harvest(#[from] harvest::HarvestError),
}

#[cfg(test)]
mod tests;
