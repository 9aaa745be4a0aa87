//! Greedy victim selection: the block with the fewest valid pages, ties broken by
//! the lower erase count (a little wear levelling for free).

use super::{Candidate, GcPolicy};
use clock::Nanos;

/// Fewest valid pages first.
#[derive(Debug, Clone, Copy, Default)]
pub struct Greedy;

impl GcPolicy for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }

    fn choose(&self, c: &[Candidate], _now: Nanos) -> usize {
        (0..c.len())
            .min_by_key(|&i| (c[i].valid, c[i].erase_count))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_fewest_valid() {
        let c = |valid, erase_count| Candidate {
            valid,
            pages: 8,
            erase_count,
            last_write: 0,
        };
        assert_eq!(Greedy.choose(&[c(5, 0), c(2, 9), c(2, 1), c(7, 0)], 0), 2);
    }
}
