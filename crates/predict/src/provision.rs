//! Over- and under-provisioning by a ratio (paper §4.4.3).
//!
//! Predicted *demand* is rounded up after scaling by `1 + ratio`, so a 5% ratio adds
//! a whole level to any non-zero prediction (as the artifact's `ceil(pred * 1.05)`);
//! predicted *harvestable* quantities are divided by `1 + ratio` and rounded down
//! (the artifact's `floor(pred / 1.05)`).

/// Demand `level` over-provisioned by `ratio`, at most `max`.
pub fn over_provision(level: u32, ratio: f64, max: u32) -> u32 {
    let v = (level as f64 * (1.0 + ratio.max(0.0)) - 1e-9).ceil();
    (v.max(0.0) as u32).min(max).max(level.min(max))
}

/// Harvestable `amount` under-provisioned by `ratio`.
pub fn under_provision(amount: u64, ratio: f64) -> u64 {
    ((amount as f64 / (1.0 + ratio.max(0.0))) + 1e-9).floor() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        assert_eq!(over_provision(0, 0.05, 16), 0);
        assert_eq!(over_provision(1, 0.05, 16), 2);
        assert_eq!(over_provision(5, 0.0, 16), 5);
        assert_eq!(over_provision(10, 0.1, 16), 11);
        assert_eq!(over_provision(10, 0.3, 16), 13);
        assert_eq!(over_provision(16, 0.3, 16), 16);
        assert_eq!(under_provision(100, 0.05), 95);
        assert_eq!(under_provision(105, 0.05), 100);
        assert_eq!(under_provision(7, 0.0), 7);
    }

    proptest! {
        #[test]
        fn bounds(l in 0u32..64, r in 0.0f64..1.0, max in 1u32..64, a in 0u64..1_000_000) {
            let o = over_provision(l, r, max);
            prop_assert!(o >= l.min(max) && o <= max);
            prop_assert!(o as f64 <= (l as f64 * (1.0 + r)).ceil().min(max as f64));
            let u = under_provision(a, r);
            prop_assert!(u <= a);
            prop_assert!(u as f64 >= a as f64 / (1.0 + r) - 1.0);
        }
    }
}
