//! Garbage collection: the victim policies, and (in `relocate`) the mechanics
//! that collect a victim.
//!
//! Policies: one trait, one file per policy. Adding a policy means one new file and
//! one arm in [`GcPolicyKind::build`]. The mechanics (draining a victim, moving its
//! live pages, the background and foreground thresholds) are crate-internal.

mod cost_benefit;
mod greedy;
mod relocate;

pub use cost_benefit::CostBenefit;
pub use greedy::Greedy;
pub(crate) use relocate::{GC_LOW, GC_SOFT};

use clock::Nanos;
use serde::{Deserialize, Serialize};

/// What a policy knows of a candidate block (a closed block with some invalid pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Valid (live) pages in the block.
    pub valid: u32,
    /// Pages per block.
    pub pages: u32,
    /// Times the block was erased.
    pub erase_count: u32,
    /// When the block was last written (its age is `now - last_write`).
    pub last_write: Nanos,
}

/// Chooses which block to collect.
pub trait GcPolicy: Send + Sync + std::fmt::Debug {
    /// The policy's name as used in configuration.
    fn name(&self) -> &'static str;
    /// Index of the block to collect among `candidates` (never empty).
    fn choose(&self, candidates: &[Candidate], now: Nanos) -> usize;
}

/// The policies, by configuration name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcPolicyKind {
    /// Fewest valid pages first.
    #[default]
    Greedy,
    /// Rosenblum & Ousterhout's cost-benefit: maximise age × (1 − u) / 2u.
    CostBenefit,
}

impl GcPolicyKind {
    /// Instantiates the policy.
    pub fn build(self) -> Box<dyn GcPolicy> {
        match self {
            GcPolicyKind::Greedy => Box::new(Greedy),
            GcPolicyKind::CostBenefit => Box::new(CostBenefit),
        }
    }
}

impl std::str::FromStr for GcPolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "greedy" => Ok(Self::Greedy),
            "cost-benefit" => Ok(Self::CostBenefit),
            _ => Err(format!(
                "unknown GC policy {s:?} (expected greedy or cost-benefit)"
            )),
        }
    }
}
