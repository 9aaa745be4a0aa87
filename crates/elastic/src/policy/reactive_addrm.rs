//! §IV-B 3, incremental add-remove with a free-space reserve: reactive-add, and the
//! last added disk is removed whenever free space exceeds reserve plus increment (so
//! free space does not fall below the reserve after the removal).

use clock::Nanos;

use super::reactive_add::add_rule;
use super::{Action, Decision, Policy};
use crate::config::{ElasticConfig, PolicyKind};
use crate::volume::FsStats;

/// The `reactive-addrm` baseline.
#[derive(Debug, Clone)]
pub struct ReactiveAddrm {
    init: u64,
    inc: u64,
    reserve: u64,
    interval: Nanos,
}

impl ReactiveAddrm {
    /// From the config's init, increment, reserve and reactive interval.
    pub fn new(cfg: &ElasticConfig) -> Self {
        ReactiveAddrm {
            init: cfg.init,
            inc: cfg.increment,
            reserve: cfg.reserve,
            interval: cfg.reactive_interval(),
        }
    }
}

impl Policy for ReactiveAddrm {
    fn kind(&self) -> PolicyKind {
        PolicyKind::ReactiveAddrm
    }
    fn first_disk(&self) -> u64 {
        self.init
    }
    fn decide(&mut self, _now: Nanos, stats: FsStats, size: u64) -> Decision {
        let free = size.saturating_sub(stats.used);
        let action = match add_rule(stats, size, self.reserve, self.inc) {
            Some(a) => a,
            None if free > self.reserve + self.inc => Action::Remove,
            None => Action::None,
        };
        Decision {
            action,
            next: self.interval,
            expected: stats.used + self.reserve,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const G: u64 = 1 << 30;

    #[test]
    fn removes_when_free_exceeds_reserve_plus_increment() {
        let cfg = ElasticConfig {
            reserve: G,
            ..Default::default()
        };
        let mut p = ReactiveAddrm::new(&cfg);
        let s = |used| FsStats {
            used,
            ..Default::default()
        };
        assert_eq!(p.decide(0, s(G / 2), G).action, Action::Add(2 * G));
        // free 3.5 G > 1 + 2
        assert_eq!(p.decide(0, s(G / 2), 4 * G).action, Action::Remove);
        // free exactly 3 G: keep
        assert_eq!(p.decide(0, s(G), 4 * G).action, Action::None);
    }
}
