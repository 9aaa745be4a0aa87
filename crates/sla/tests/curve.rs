//! Unit tests for constructors, evaluation, containment and error cases.

use sla::{difference, sum, Curve, SlaError};

fn c(points: &[(f64, f64)]) -> Curve {
    Curve::new(points.to_vec()).unwrap()
}

#[test]
fn new_validates() {
    assert_eq!(Curve::new(vec![]), Err(SlaError::Empty));
    assert_eq!(
        Curve::new(vec![(0.0, f64::NAN)]),
        Err(SlaError::NonFinite { index: 0 })
    );
    assert_eq!(
        Curve::new(vec![(0.0, 1.0), (f64::INFINITY, 0.0)]),
        Err(SlaError::NonFinite { index: 1 })
    );
    assert_eq!(
        Curve::new(vec![(0.0, 1.0), (1.0, -1.0)]),
        Err(SlaError::Negative { index: 1 })
    );
    assert_eq!(
        Curve::new(vec![(1.0, 1.0)]),
        Err(SlaError::NotStartingAtZero { w: 1.0 })
    );
    assert_eq!(
        Curve::new(vec![(0.0, 2.0), (2.0, 1.0), (1.0, 0.0)]),
        Err(SlaError::WriteNotIncreasing { index: 2 })
    );
    assert_eq!(
        Curve::new(vec![(0.0, 2.0), (1.0, 1.0), (1.0, 0.5)]),
        Err(SlaError::WriteNotIncreasing { index: 2 })
    );
    assert_eq!(
        Curve::new(vec![(0.0, 1.0), (1.0, 2.0)]),
        Err(SlaError::ReadIncreasing { index: 1 })
    );
}

#[test]
fn new_normalises() {
    let curve = c(&[
        (0.0, 4.0),
        (0.0, 4.0),
        (1.0, 3.0),
        (2.0, 2.0),
        (2.0, 2.0),
        (4.0, 0.0),
    ]);
    assert_eq!(curve.points(), &[(0.0, 4.0), (4.0, 0.0)]);
    assert_eq!(curve.w_max(), 4.0);
    let single = c(&[(0.0, 5.0)]);
    assert_eq!(single.points(), &[(0.0, 5.0)]);
    assert_eq!(single.eval(0.0), Some(5.0));
    assert_eq!(single.eval(0.1), None);
}

#[test]
fn eval_interpolates_and_rejects_outside() {
    let curve = c(&[(0.0, 10.0), (2.0, 8.0), (4.0, 0.0)]);
    assert_eq!(curve.eval(0.0), Some(10.0));
    assert_eq!(curve.eval(1.0), Some(9.0));
    assert_eq!(curve.eval(3.0), Some(4.0));
    assert_eq!(curve.eval(4.0), Some(0.0));
    assert_eq!(curve.eval(4.5), None);
    assert_eq!(curve.eval(-0.5), None);
    assert_eq!(curve.eval(f64::NAN), None);
    assert!(curve.is_concave());
    assert!(!c(&[(0.0, 10.0), (1.0, 2.0), (4.0, 0.0)]).is_concave());
}

#[test]
fn from_samples_builds_upper_hull() {
    let curve =
        Curve::from_samples(&[(1.0, 1.0), (0.5, 3.0), (2.0, 2.0), (3.0, 0.0), (1.0, 0.5)]).unwrap();
    // (0, 3) from the axis, (0.5, 3), (2, 2), (3, 0); (1, 1) and (1, 0.5) lie inside.
    assert_eq!(
        curve.points(),
        &[(0.0, 3.0), (0.5, 3.0), (2.0, 2.0), (3.0, 0.0)]
    );
    assert!(curve.is_concave());
    // Collinear samples merge.
    let line = Curve::from_samples(&[(0.0, 2.0), (1.0, 1.0), (2.0, 0.0)]).unwrap();
    assert_eq!(line.points(), &[(0.0, 2.0), (2.0, 0.0)]);
    // Only a read sample: a single point at w = 0.
    let reads = Curve::from_samples(&[(0.0, 7.0)]).unwrap();
    assert_eq!(reads.points(), &[(0.0, 7.0)]);
}

#[test]
fn from_samples_errors() {
    assert_eq!(Curve::from_samples(&[]), Err(SlaError::Empty));
    assert_eq!(
        Curve::from_samples(&[(1.0, 1.0), (f64::NAN, 1.0)]),
        Err(SlaError::NonFinite { index: 1 })
    );
    assert_eq!(
        Curve::from_samples(&[(-1.0, 1.0)]),
        Err(SlaError::Negative { index: 0 })
    );
}

#[test]
fn sum_of_concave_curves() {
    let a = c(&[(0.0, 10.0), (2.0, 8.0), (4.0, 0.0)]); // slopes -1, -4
    let b = c(&[(0.0, 6.0), (3.0, 0.0)]); // slope -2
    let s = sum(&a, &b).unwrap();
    assert_eq!(
        s.points(),
        &[(0.0, 16.0), (2.0, 14.0), (5.0, 8.0), (7.0, 0.0)]
    );
    assert_eq!((&a + &b).unwrap(), s);
}

#[test]
fn sum_rejects_non_concave() {
    let bad = c(&[(0.0, 10.0), (1.0, 2.0), (4.0, 0.0)]);
    let good = c(&[(0.0, 1.0), (1.0, 0.0)]);
    assert_eq!(
        sum(&bad, &good),
        Err(SlaError::NotConcave { which: "first" })
    );
    assert_eq!(
        sum(&good, &bad),
        Err(SlaError::NotConcave { which: "second" })
    );
    assert!(matches!(
        difference(&good, &bad),
        Err(SlaError::NotConcave { .. })
    ));
}

#[test]
fn contains_checks_domain_and_values() {
    let a = c(&[(0.0, 10.0), (4.0, 0.0)]);
    assert!(a.contains(&a));
    assert!(a.contains(&c(&[(0.0, 5.0), (2.0, 4.0)])));
    assert!(!a.contains(&c(&[(0.0, 5.0), (5.0, 0.0)])));
    assert!(!a.contains(&c(&[(0.0, 11.0), (1.0, 0.0)])));
    // Below at both ends but above in the middle.
    let big = c(&[(0.0, 10.0), (2.0, 10.0), (4.0, 0.0)]);
    assert!(!c(&[(0.0, 10.0), (4.0, 0.0)]).contains(&big));
    assert!(big.contains(&a));
}

#[test]
fn difference_linear_case() {
    let a = c(&[(0.0, 10.0), (10.0, 0.0)]);
    let b = c(&[(0.0, 3.0), (3.0, 0.0)]);
    let d = difference(&a, &b).unwrap();
    // D(w) = min_j (10 - w - j) - (3 - j) = 7 - w on [0, 7].
    assert_eq!(d.points(), &[(0.0, 7.0), (7.0, 0.0)]);
    assert!(a.contains(&sum(&d, &b).unwrap()));
    assert_eq!((&a - &b).unwrap(), d);
}

#[test]
fn difference_truncates_at_zero_and_rejects_uncontained() {
    let a = c(&[(0.0, 10.0), (4.0, 10.0), (5.0, 0.0)]);
    let b = c(&[(0.0, 2.0), (1.0, 2.0)]);
    let d = difference(&a, &b).unwrap();
    // D(w) = min(A(w) - 2, A(w + 1) - 2): 8 up to w = 3, then 8 - 10 (w - 3),
    // which reaches 0 at w = 3.8 (before the domain end 4).
    assert_eq!(d.w_max(), 3.8);
    assert!((d.eval(3.0).unwrap() - 8.0).abs() < 1e-9);
    assert!(a.contains(&sum(&d, &b).unwrap()));

    let too_wide = c(&[(0.0, 1.0), (6.0, 0.0)]);
    assert!(matches!(
        difference(&a, &too_wide),
        Err(SlaError::NotContained { .. })
    ));
    let too_high = c(&[(0.0, 11.0)]);
    assert!(matches!(
        difference(&a, &too_high),
        Err(SlaError::NotContained { .. })
    ));
}

#[test]
fn serde_round_trip_and_validation() {
    let a = c(&[(0.0, 10.0), (2.0, 8.0), (4.0, 0.0)]);
    let json = serde_json::to_string(&a).unwrap();
    assert_eq!(json, "[[0.0,10.0],[2.0,8.0],[4.0,0.0]]");
    let back: Curve = serde_json::from_str(&json).unwrap();
    assert_eq!(back, a);
    assert!(serde_json::from_str::<Curve>("[[0.0,1.0],[1.0,2.0]]").is_err());
    assert!(serde_json::from_str::<Curve>("[]").is_err());
}
