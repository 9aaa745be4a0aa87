//! Decision policies: one per file, all behind [`Policy`].
//!
//! A policy sees one probe at a time — the time, the file-system statistics and the
//! pool size — and answers what to do now, when to probe next and what it expects
//! the volume to need ("expected" in the paper's Figure 2(b): prediction plus reserve
//! for the predictive policy, used plus reserve for the reactive ones). Safety guards
//! that hold whatever the policy says (never below one disk, never remove a disk the
//! data would not fit without) live in the [`crate::Controller`], not here.

mod prealloc;
mod predictive;
mod reactive_add;
mod reactive_addrm;

pub use prealloc::Prealloc;
pub use predictive::Predictive;
pub use reactive_add::ReactiveAdd;
pub use reactive_addrm::ReactiveAddrm;

use clock::Nanos;

use crate::config::{ElasticConfig, PolicyKind};
use crate::volume::FsStats;

/// What to do after a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    None,
    /// Add a disk of this many bytes.
    Add(u64),
    /// Remove the most recently added disk.
    Remove,
}

/// A policy's answer to one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// What to do now.
    pub action: Action,
    /// How long to sleep before the next probe.
    pub next: Nanos,
    /// The space the policy expects to need, bytes.
    pub expected: u64,
}

/// A grow/shrink decision policy.
pub trait Policy: Send + std::fmt::Debug {
    /// Which policy this is.
    fn kind(&self) -> PolicyKind;
    /// Size of the disk the volume starts with.
    fn first_disk(&self) -> u64;
    /// The decision for a probe at `now` that saw `stats` on a pool of `size` bytes.
    fn decide(&mut self, now: Nanos, stats: FsStats, size: u64) -> Decision;
    /// An add this policy asked for completed and took `took` (the policies that
    /// do not plan ahead ignore it).
    fn added(&mut self, took: Nanos) {
        let _ = took;
    }
}

/// The policy `cfg` names, started at time `now`.
pub fn build(cfg: &ElasticConfig, now: Nanos) -> Box<dyn Policy> {
    match cfg.policy {
        PolicyKind::Predictive => Box::new(Predictive::new(cfg, now)),
        PolicyKind::Prealloc => Box::new(Prealloc::new(cfg)),
        PolicyKind::ReactiveAdd => Box::new(ReactiveAdd::new(cfg)),
        PolicyKind::ReactiveAddrm => Box::new(ReactiveAddrm::new(cfg)),
    }
}
