//! §IV-B 1, static worst-case pre-allocation: one large disk from the start, never
//! changed. Probing only records the time series.

use clock::Nanos;

use super::{Action, Decision, Policy};
use crate::config::{ElasticConfig, PolicyKind};
use crate::volume::FsStats;

/// The `prealloc` baseline.
#[derive(Debug, Clone)]
pub struct Prealloc {
    size: u64,
    interval: Nanos,
}

impl Prealloc {
    /// From the config's `prealloc` size; probes at the reactive interval.
    pub fn new(cfg: &ElasticConfig) -> Self {
        Prealloc {
            size: cfg.prealloc,
            interval: cfg.reactive_interval(),
        }
    }
}

impl Policy for Prealloc {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Prealloc
    }
    fn first_disk(&self) -> u64 {
        self.size
    }
    fn decide(&mut self, _now: Nanos, stats: FsStats, _size: u64) -> Decision {
        Decision {
            action: Action::None,
            next: self.interval,
            expected: stats.used,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_acts() {
        let mut p = Prealloc::new(&ElasticConfig::default());
        assert_eq!(p.first_disk(), 8 << 30);
        let s = FsStats {
            used: 9 << 30,
            ..Default::default()
        };
        assert_eq!(p.decide(0, s, 8 << 30).action, Action::None);
    }
}
