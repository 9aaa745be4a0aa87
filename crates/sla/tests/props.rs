//! Property tests of the SLA arithmetic on random concave curves built from
//! random throughput samples.

use proptest::prelude::*;
use sla::{difference, sum, Curve, SlaError};

/// Comparison tolerance for the properties (relative to the values' scale).
fn close(x: f64, y: f64) -> bool {
    (x - y).abs() <= 1e-7 * 1f64.max(x.abs()).max(y.abs())
}

fn samples() -> impl Strategy<Value = Vec<(f64, f64)>> {
    prop::collection::vec((0u32..=4000, 0u32..=4000), 1..12).prop_map(|v| {
        v.into_iter()
            .map(|(w, r)| (f64::from(w) / 4.0, f64::from(r) / 4.0))
            .collect()
    })
}

fn curve() -> impl Strategy<Value = Curve> {
    samples().prop_map(|s| Curve::from_samples(&s).unwrap())
}

/// Same domain and values at every breakpoint of either curve.
fn same_curve(a: &Curve, b: &Curve) -> bool {
    close(a.w_max(), b.w_max())
        && a.points().iter().chain(b.points()).all(|&(w, _)| {
            let w = w.min(a.w_max()).min(b.w_max());
            close(a.eval(w).unwrap(), b.eval(w).unwrap())
        })
}

/// `A(i) + B(w - i)` over the splits that are breakpoints of either term:
/// the maximum of a piecewise-linear function of `i` is at one of them.
fn split_max(a: &Curve, b: &Curve, w: f64) -> f64 {
    let lo = (w - b.w_max()).max(0.0);
    let hi = w.min(a.w_max());
    let cands = a
        .points()
        .iter()
        .map(|p| p.0)
        .chain(b.points().iter().map(|p| w - p.0))
        .chain([lo, hi])
        .filter(|&i| i >= lo && i <= hi);
    cands
        .map(|i| a.eval(i).unwrap() + b.eval((w - i).max(0.0)).unwrap())
        .fold(f64::NEG_INFINITY, f64::max)
}

fn max_abs_slope(c: &Curve) -> f64 {
    c.points()
        .windows(2)
        .map(|s| ((s[1].1 - s[0].1) / (s[1].0 - s[0].0)).abs())
        .fold(0.0, f64::max)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn from_samples_is_concave_and_covers_samples(s in samples()) {
        let c = Curve::from_samples(&s).unwrap();
        prop_assert!(c.is_concave());
        for &(w, r) in &s {
            prop_assert!(c.eval(w).unwrap() + 1e-9 >= r);
        }
    }

    #[test]
    fn sum_commutes(a in curve(), b in curve()) {
        let ab = sum(&a, &b).unwrap();
        let ba = sum(&b, &a).unwrap();
        prop_assert!(same_curve(&ab, &ba), "{ab:?} vs {ba:?}");
    }

    #[test]
    fn sum_is_associative(a in curve(), b in curve(), c in curve()) {
        let left = sum(&sum(&a, &b).unwrap(), &c).unwrap();
        let right = sum(&a, &sum(&b, &c).unwrap()).unwrap();
        prop_assert!(same_curve(&left, &right), "{left:?} vs {right:?}");
    }

    #[test]
    fn sum_contains_operands(a in curve(), b in curve()) {
        let s = sum(&a, &b).unwrap();
        prop_assert!(s.is_concave());
        prop_assert!(s.contains(&a));
        prop_assert!(s.contains(&b));
    }

    #[test]
    fn sum_matches_brute_force(a in curve(), b in curve(), frac in 0.0f64..=1.0) {
        let s = sum(&a, &b).unwrap();
        let w = frac * s.w_max();
        let got = s.eval(w).unwrap();
        // Exact oracle: maximum over the breakpoint splits.
        prop_assert!(close(got, split_max(&a, &b, w)), "{got} vs {}", split_max(&a, &b, w));
        // Fine grid of splits: never above the sum, and within the
        // Lipschitz bound of it.
        let lo = (w - b.w_max()).max(0.0);
        let hi = w.min(a.w_max());
        let n = 2000;
        let step = (hi - lo) / f64::from(n);
        let grid = (0..=n)
            .map(|k| lo + step * f64::from(k))
            .map(|i| a.eval(i.min(hi)).unwrap() + b.eval((w - i.min(hi)).max(0.0)).unwrap())
            .fold(f64::NEG_INFINITY, f64::max);
        prop_assert!(grid <= got + 1e-7 * got.max(1.0));
        let slack = (max_abs_slope(&a) + max_abs_slope(&b)) * step;
        prop_assert!(got <= grid + slack + 1e-7 * got.max(1.0));
    }

    #[test]
    fn sum_minus_operand_contains_other(a in curve(), b in curve()) {
        let s = sum(&a, &b).unwrap();
        let d = difference(&s, &b).unwrap();
        prop_assert!(d.is_concave());
        prop_assert!(d.contains(&a), "{d:?} should contain {a:?}");
    }

    #[test]
    fn difference_is_the_largest_residual(a in curve(), b in curve(), frac in 0.0f64..=1.0) {
        // Make `a` contain `b` by adding another curve.
        let big = sum(&a, &b).unwrap();
        let d = difference(&big, &b).unwrap();
        // D + B fits in A (the defining constraint) ...
        prop_assert!(big.contains(&sum(&d, &b).unwrap()));
        // ... and D(w) is the minimum over splits j of A(w + j) - B(j),
        // attained at a breakpoint of B or of A shifted by w.
        let w = frac * d.w_max();
        let oracle = b
            .points()
            .iter()
            .map(|p| p.0)
            .chain(big.points().iter().map(|p| p.0 - w))
            .filter(|&j| j >= 0.0 && j <= b.w_max())
            .map(|j| big.eval((w + j).min(big.w_max())).unwrap() - b.eval(j).unwrap())
            .fold(f64::INFINITY, f64::min);
        prop_assert!(close(d.eval(w).unwrap(), oracle.max(0.0)));
    }

    #[test]
    fn difference_of_uncontained_is_error(a in curve(), b in curve(), extra in 0.25f64..100.0) {
        // `higher` is strictly above `b` at w = 0, so `b` cannot contain it.
        let higher = Curve::new(b.points().iter().map(|&(w, r)| (w, r + a.eval(0.0).unwrap() + extra)).collect()).unwrap();
        prop_assert!(!b.contains(&higher));
        let err = difference(&b, &higher);
        prop_assert!(matches!(err, Err(SlaError::NotContained { .. })), "{:?}", err);
        // Wider domain: also not contained.
        let wider = Curve::new(vec![(0.0, 0.0), (b.w_max() + extra, 0.0)]).unwrap();
        let err = difference(&b, &wider);
        prop_assert!(matches!(err, Err(SlaError::NotContained { .. })), "{:?}", err);
    }

    #[test]
    fn serde_round_trips(a in curve()) {
        let back: Curve = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        prop_assert_eq!(back, a);
    }

    /// `(A − B) − C = A − (B + C)`: subtracting tenants one by one gives the
    /// same residual as subtracting their sum, which is what lets the
    /// placement engine keep residuals incrementally and recompute them on
    /// removal.
    #[test]
    fn successive_differences_equal_difference_of_sum(a in curve(), b in curve(), c in curve()) {
        let big = sum(&sum(&a, &b).unwrap(), &c).unwrap();
        let one_by_one = difference(&difference(&big, &b).unwrap(), &c).unwrap();
        let at_once = difference(&big, &sum(&b, &c).unwrap()).unwrap();
        prop_assert!(same_curve(&one_by_one, &at_once), "{one_by_one:?} vs {at_once:?}");
        prop_assert!(one_by_one.contains(&a));
    }

    /// Striping: `k` copies of `C / k` add up to `C`.
    #[test]
    fn stripes_add_up(a in curve(), k in 1usize..6) {
        let part = a.scale(1.0 / k as f64).unwrap();
        prop_assert!(part.is_concave());
        let mut total = Curve::zero();
        for _ in 0..k {
            total = sum(&total, &part).unwrap();
        }
        prop_assert!(same_curve(&total, &a), "{total:?} vs {a:?}");
        prop_assert!(a.scale(0.0).is_err() && a.scale(f64::NAN).is_err());
    }
}
