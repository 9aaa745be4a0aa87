//! §IV-B 2, incremental additive with a free-space reserve: probe every 5 seconds;
//! whenever free space is below the reserve, add an increment. Never removes.

use clock::Nanos;

use super::{Action, Decision, Policy};
use crate::config::{ElasticConfig, PolicyKind};
use crate::volume::FsStats;

/// The `reactive-add` baseline.
#[derive(Debug, Clone)]
pub struct ReactiveAdd {
    init: u64,
    inc: u64,
    reserve: u64,
    interval: Nanos,
}

impl ReactiveAdd {
    /// From the config's init, increment, reserve and reactive interval.
    pub fn new(cfg: &ElasticConfig) -> Self {
        ReactiveAdd {
            init: cfg.init,
            inc: cfg.increment,
            reserve: cfg.reserve,
            interval: cfg.reactive_interval(),
        }
    }
}

/// The shared rule of both reactive baselines: add when `free < reserve`.
pub(super) fn add_rule(stats: FsStats, size: u64, reserve: u64, inc: u64) -> Option<Action> {
    let free = size.saturating_sub(stats.used);
    // With no reserve, "below the reserve" is "full".
    if free < reserve || free == 0 {
        Some(Action::Add(inc))
    } else {
        None
    }
}

impl Policy for ReactiveAdd {
    fn kind(&self) -> PolicyKind {
        PolicyKind::ReactiveAdd
    }
    fn first_disk(&self) -> u64 {
        self.init
    }
    fn decide(&mut self, _now: Nanos, stats: FsStats, size: u64) -> Decision {
        Decision {
            action: add_rule(stats, size, self.reserve, self.inc).unwrap_or(Action::None),
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
    fn adds_below_the_reserve_and_never_removes() {
        let cfg = ElasticConfig {
            reserve: 2 * G,
            ..Default::default()
        };
        let mut p = ReactiveAdd::new(&cfg);
        let s = |used| FsStats {
            used,
            ..Default::default()
        };
        assert_eq!(p.decide(0, s(G / 2), G).action, Action::Add(2 * G));
        assert_eq!(p.decide(0, s(G), 3 * G).action, Action::None);
        assert_eq!(p.decide(0, s(0), 9 * G).action, Action::None);
        let d = p.decide(0, s(0), 9 * G);
        assert_eq!((d.next, d.expected), (5 * clock::SEC, 2 * G));
    }
}
