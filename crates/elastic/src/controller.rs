//! The controller: runs a [`Policy`] against a [`Volume`] one probe at a time.
//!
//! The caller owns the clock and the sleeping: [`Controller::step`] takes `now`,
//! probes, acts, and returns when the next probe is due. That keeps this loop free of
//! wall-clock reads, so the binary drives it from a monotonic clock and the simulator
//! from a virtual one. Whatever the policy decides, two guards hold here: the pool
//! never drops below one disk, and a disk is never removed while the used bytes plus
//! the reserve would not fit on the remaining disks (the paper leaves this to its
//! prediction; we check it so a baseline's or a stale prediction's removal is skipped
//! rather than attempted). A failed add or remove is reported in the sample and the
//! loop goes on: the volume promises to stay consistent with the disk still there.

use clock::Nanos;
use serde::{Deserialize, Serialize};

use crate::config::{ElasticConfig, PolicyKind};
use crate::policy::{self, Action, Policy};
use crate::volume::{FsStats, Volume};
use crate::Result;

/// One probe's record: the time series of `flexssd elastic run --csv` and of the
/// simulator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Probe time.
    pub t: Nanos,
    /// Used bytes.
    pub used: u64,
    /// Expected bytes (prediction plus reserve, or used plus reserve).
    pub expected: u64,
    /// Allocated bytes (pool size) after the action.
    pub allocated: u64,
    /// Disks in the pool after the action.
    pub disks: usize,
    /// Cumulative bytes written on the application's behalf (what the predictor
    /// reads).
    pub written: u64,
    /// Cumulative bytes the file system wrote relocating its own data (not in
    /// `written`).
    #[serde(default)]
    pub relocated: u64,
    /// Bytes promised to writes not yet allocated, where the file system reports
    /// them ([`FsStats::pending`]).
    #[serde(default)]
    pub pending: Option<u64>,
    /// What was done: "", "add", "remove", "add-failed", "remove-failed",
    /// "remove-skipped".
    pub action: String,
    /// Time the action took.
    pub action_ns: Nanos,
    /// The volume's error, if the action failed.
    pub error: Option<String>,
}

/// Runs a policy against a volume.
#[derive(Debug)]
pub struct Controller<V: Volume> {
    volume: V,
    policy: Box<dyn Policy>,
    reserve: u64,
    max_disks: u32,
    adds: u32,
    removes: u32,
    failed_ops: u32,
}

impl<V: Volume> Controller<V> {
    /// Starts the policy `cfg` names at `now`, adding the first disk to `volume` if
    /// it has none (line 1 of Algorithm 1).
    pub fn start(cfg: &ElasticConfig, mut volume: V, now: Nanos) -> Result<Self> {
        cfg.validate()?;
        let policy = policy::build(cfg, now);
        if volume.disks().is_empty() {
            volume.add_disk(policy.first_disk(), now)?;
        }
        Ok(Controller {
            volume,
            policy,
            reserve: cfg.reserve,
            max_disks: cfg.max_disks,
            adds: 0,
            removes: 0,
            failed_ops: 0,
        })
    }

    /// The policy in use.
    pub fn policy(&self) -> PolicyKind {
        self.policy.kind()
    }

    /// The volume.
    pub fn volume(&self) -> &V {
        &self.volume
    }

    /// The volume, mutable (for manual operations by the caller).
    pub fn volume_mut(&mut self) -> &mut V {
        &mut self.volume
    }

    /// Consumes the controller, returning the volume (to tear it down).
    pub fn into_volume(self) -> V {
        self.volume
    }

    /// Disks added and removed so far (not counting the first), and failed operations.
    pub fn counts(&self) -> (u32, u32, u32) {
        (self.adds, self.removes, self.failed_ops)
    }

    /// Whether removing the newest disk keeps at least one disk and room for the used
    /// bytes, the bytes promised to writes not yet allocated (where the file system
    /// reports them: they take space at write-back), and the reserve.
    pub fn removal_is_safe(&self, stats: &FsStats) -> bool {
        let disks = self.volume.disks();
        if disks.len() <= 1 {
            return false;
        }
        let rest: u64 = disks[..disks.len() - 1].iter().map(|d| d.bytes).sum();
        stats
            .used
            .saturating_add(stats.pending.unwrap_or(0))
            .saturating_add(self.reserve)
            <= rest
    }

    /// One probe at `now`; returns the sample and the delay until the next probe.
    /// `clock` is read after an action to learn how long it took (for a real volume
    /// the caller passes its monotonic clock, for a simulation the virtual one).
    pub fn step(&mut self, now: Nanos, clock: &dyn Fn() -> Nanos) -> Result<(Sample, Nanos)> {
        let stats = self.volume.stats(now)?;
        let size = self.volume.size();
        let d = self.policy.decide(now, stats, size);
        let mut action = String::new();
        let mut error = None;
        let mut action_ns = 0;
        match d.action {
            Action::None => {}
            Action::Add(bytes) => {
                if self.max_disks > 0 && self.volume.disks().len() >= self.max_disks as usize {
                    action = "add-skipped".into();
                } else {
                    let added = self.volume.add_disk(bytes, now);
                    action_ns = clock().saturating_sub(now);
                    match added {
                        Ok(_) => {
                            self.adds += 1;
                            action = "add".into();
                            self.policy.added(action_ns);
                        }
                        Err(e) => {
                            self.failed_ops += 1;
                            action = "add-failed".into();
                            error = Some(e.to_string());
                        }
                    }
                }
            }
            Action::Remove => {
                if !self.removal_is_safe(&stats) {
                    action = "remove-skipped".into();
                } else {
                    match self.volume.remove_disk(now) {
                        Ok(_) => {
                            self.removes += 1;
                            action = "remove".into();
                        }
                        Err(e) => {
                            self.failed_ops += 1;
                            action = "remove-failed".into();
                            error = Some(e.to_string());
                        }
                    }
                    action_ns = clock().saturating_sub(now);
                }
            }
        }
        let sample = Sample {
            t: now,
            used: stats.used,
            expected: d.expected,
            allocated: self.volume.size(),
            disks: self.volume.disks().len(),
            written: stats.written,
            relocated: stats.relocated,
            pending: stats.pending,
            action,
            action_ns,
            error,
        };
        Ok((sample, d.next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::TraceVolume;
    use proptest::prelude::*;

    const M: u64 = 1 << 20;

    fn cfg(policy: PolicyKind, reserve: u64) -> ElasticConfig {
        ElasticConfig {
            policy,
            reserve,
            init: 100 * M,
            increment: 100 * M,
            prealloc: 1000 * M,
            ..Default::default()
        }
    }

    #[test]
    fn starts_with_the_first_disk() {
        let v = TraceVolume::new(vec![(0, 0)], Default::default());
        let c = Controller::start(&cfg(PolicyKind::Prealloc, 0), v, 0).unwrap();
        assert_eq!(c.volume().size(), 1000 * M);
        let v = TraceVolume::new(vec![(0, 0)], Default::default());
        let c = Controller::start(&cfg(PolicyKind::Predictive, 0), v, 0).unwrap();
        assert_eq!(c.volume().size(), 100 * M);
    }

    proptest! {
        /// Whatever the usage does, the pool never has fewer than one disk and a
        /// removal never leaves less than used + reserve.
        #[test]
        fn never_removes_what_would_not_fit(
            steps in proptest::collection::vec((0u64..400, 1u64..20), 1..60),
            reserve in 0u64..200,
            pol in 0usize..4,
        ) {
            let mut trace = vec![];
            let mut t = 0;
            for (used, dt) in &steps {
                trace.push((t, used * M));
                t += dt * clock::SEC;
            }
            let policy = PolicyKind::ALL[pol];
            let c = cfg(policy, reserve * M);
            let v = TraceVolume::new(trace.clone(), Default::default());
            let mut ctl = Controller::start(&c, v, 0).unwrap();
            let mut now = 0;
            while now <= t {
                let before = ctl.volume_mut().stats(now).unwrap();
                let (s, next) = ctl.step(now, &|| now).unwrap();
                prop_assert!(s.disks >= 1);
                if s.action == "remove" {
                    prop_assert!(before.used + c.reserve <= s.allocated,
                        "removed to {} with used {} reserve {}", s.allocated, before.used, c.reserve);
                }
                now += next;
            }
        }
    }
}
