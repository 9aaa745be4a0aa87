//! Cost-benefit victim selection (Rosenblum & Ousterhout, LFS): prefers old blocks
//! with little live data, because cold data that is moved once stays put, while a
//! young block's pages are likely to be invalidated soon for free.

use super::{Candidate, GcPolicy};
use clock::Nanos;

/// Maximises `age × (1 − u) / (2u)` where `u` is the valid fraction.
#[derive(Debug, Clone, Copy, Default)]
pub struct CostBenefit;

impl CostBenefit {
    fn score(c: &Candidate, now: Nanos) -> f64 {
        let u = c.valid as f64 / c.pages.max(1) as f64;
        let age = now.saturating_sub(c.last_write) as f64 + 1.0;
        if u == 0.0 {
            return f64::INFINITY;
        }
        age * (1.0 - u) / (2.0 * u)
    }
}

impl GcPolicy for CostBenefit {
    fn name(&self) -> &'static str {
        "cost-benefit"
    }

    fn choose(&self, c: &[Candidate], now: Nanos) -> usize {
        let mut best = 0;
        let mut best_score = f64::NEG_INFINITY;
        for (i, cand) in c.iter().enumerate() {
            let s = Self::score(cand, now);
            if s > best_score {
                best = i;
                best_score = s;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_old_blocks_over_slightly_emptier_young_ones() {
        let young = Candidate {
            valid: 3,
            pages: 8,
            erase_count: 0,
            last_write: 1_000,
        };
        let old = Candidate {
            valid: 4,
            pages: 8,
            erase_count: 0,
            last_write: 0,
        };
        assert_eq!(CostBenefit.choose(&[young, old], 1_100), 1);
        let empty = Candidate {
            valid: 0,
            pages: 8,
            erase_count: 0,
            last_write: 1_099,
        };
        assert_eq!(CostBenefit.choose(&[young, old, empty], 1_100), 2);
    }
}
