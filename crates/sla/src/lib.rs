//! SLA curves and SLA arithmetic, after Regulator (APSys'21), §3.
//!
//! A [`Curve`] maps a tenant's (or a device's) write throughput `w` to the
//! largest read throughput `r(w)` that still meets a read tail-latency bound.
//! Curves are defined on `[0, w_max]`; beyond `w_max` the curve is undefined,
//! i.e. that write rate is not allowed at all.
//!
//! # Representation and exactness
//!
//! A curve is stored as its breakpoints `(w_i, r_i)`: `w_0 = 0`, `w` strictly
//! increasing, `r` non-increasing and non-negative, with linear interpolation
//! in between. Every curve this crate builds is piecewise linear *by
//! construction*, and each operation maps piecewise-linear curves to
//! piecewise-linear curves whose breakpoints can be enumerated from the
//! inputs' breakpoints, so nothing is sampled or approximated:
//!
//! * [`Curve::from_samples`] is an upper convex hull — its vertices are
//!   sample points.
//! * [`sum`] (Definition 1, a max-plus convolution) of two *concave* curves is
//!   the concave curve whose segments are the operands' segments sorted by
//!   decreasing slope (the hypograph of the sum is the Minkowski sum of the
//!   hypographs). Its breakpoints are partial sums of the inputs' segment
//!   vectors.
//! * [`difference`] (Definition 2, a min-plus deconvolution) of concave curves
//!   is `D(w) = min_k A(w + b_k) − B(b_k)` over `B`'s breakpoints `b_k` (the
//!   minimum over the split of a concave-minus-concave function is reached at
//!   a kink of `−B`, which is convex). It is a lower envelope of finitely many
//!   shifted copies of `A`; between consecutive shifted breakpoints of `A`
//!   every copy is affine, so the envelope's breakpoints are those shifted
//!   breakpoints plus pairwise line crossings, all of which are enumerated.
//!
//! The only error is IEEE-754 rounding of those few additions and divisions.
//! Comparisons therefore use a tolerance: two values `x`, `y` are treated as
//! equal when `|x − y| <= EPSILON * max(1, |x|, |y|)` (see [`EPSILON`]).
//! Normalisation drops breakpoints whose `w` coincides (within tolerance)
//! with the previous one and merges collinear breakpoints, so every curve has
//! a canonical, minimal breakpoint list.
//!
//! `sum` and `difference` require concave operands (they return
//! [`SlaError::NotConcave`] otherwise). Concave curves are closed under both
//! operations, and [`Curve::from_samples`] always produces concave curves, so
//! the whole algebra stays exact on the curves the system builds.

//!
//! # Placement
//!
//! On top of the arithmetic, [`placement`] places tenants' curves on storage
//! units (Regulator §4.1), [`catalog`] describes the storage-unit types,
//! [`tenants`] builds tenant curves (synthetic groups, or throughput samples
//! of block traces) and [`experiment`] runs the paper's §6.1 comparison
//! against IOPS, weighted-IOPS and random-placement baselines. All of it is
//! pure: no I/O, no clocks, and randomness only from an explicit seed
//! ([`rng::SplitMix64`], from the workspace's `rng` crate).

pub mod catalog;
pub mod experiment;
pub mod placement;
pub mod tenants;

use serde::{Deserialize, Serialize};

/// Relative tolerance used for every floating-point comparison in this crate.
///
/// `x` and `y` compare equal when `|x − y| <= EPSILON * max(1, |x|, |y|)`;
/// i.e. absolute `1e-9` for small values and relative `1e-9` for large ones.
pub const EPSILON: f64 = 1e-9;

/// Tolerance for comparing two values of the magnitudes of `x` and `y`.
fn tol(x: f64, y: f64) -> f64 {
    EPSILON * 1f64.max(x.abs()).max(y.abs())
}

/// `x <= y` up to the crate tolerance.
fn le(x: f64, y: f64) -> bool {
    x <= y + tol(x, y)
}

/// Errors from building or combining SLA curves.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SlaError {
    /// No points (or samples) were given.
    #[error("an SLA curve needs at least one point")]
    Empty,
    /// A coordinate was NaN or infinite.
    #[error("point {index} has a non-finite coordinate")]
    NonFinite {
        /// Index of the offending point.
        index: usize,
    },
    /// A coordinate was negative.
    #[error("point {index} has a negative coordinate")]
    Negative {
        /// Index of the offending point.
        index: usize,
    },
    /// The first breakpoint is not at write throughput 0.
    #[error("the curve must start at w = 0, but its first point has w = {w}")]
    NotStartingAtZero {
        /// The first point's write throughput.
        w: f64,
    },
    /// Write throughputs are not strictly increasing.
    #[error("point {index} does not have a larger write throughput than the previous point")]
    WriteNotIncreasing {
        /// Index of the offending point.
        index: usize,
    },
    /// Read throughput increases with write throughput.
    #[error("point {index} has a larger read throughput than the previous point")]
    ReadIncreasing {
        /// Index of the offending point.
        index: usize,
    },
    /// An operation that needs concave curves got a non-concave one.
    #[error("the {which} operand is not concave")]
    NotConcave {
        /// Which operand: "first" or "second".
        which: &'static str,
    },
    /// [`Curve::scale`] with a factor that is not finite and positive.
    #[error("scale factor {factor} is not finite and positive")]
    BadScale {
        /// The rejected factor.
        factor: f64,
    },
    /// [`tenants::throughput_samples`] would need more windows than
    /// [`tenants::MAX_WINDOWS`].
    #[error(
        "{windows} throughput windows of {window_ns} ns over a span of {span_ns} ns, \
         more than the {max} allowed: use a longer window"
    )]
    TooManyWindows {
        /// The windows the span needs.
        windows: u64,
        /// The window length.
        window_ns: u64,
        /// From the earliest event to the latest.
        span_ns: u64,
        /// [`tenants::MAX_WINDOWS`].
        max: u64,
    },
    /// `difference(a, b)` where `a` does not contain `b`.
    #[error("the curve being subtracted is not contained in the other: {reason}")]
    NotContained {
        /// Why containment fails.
        reason: String,
    },
}

/// An exact, piecewise-linear, non-increasing SLA curve on `[0, w_max]`.
///
/// Serialises as its list of `[w, r]` breakpoints; deserialising validates
/// (and normalises) like [`Curve::new`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(f64, f64)>", into = "Vec<(f64, f64)>")]
pub struct Curve {
    points: Vec<(f64, f64)>,
}

impl TryFrom<Vec<(f64, f64)>> for Curve {
    type Error = SlaError;
    fn try_from(points: Vec<(f64, f64)>) -> Result<Self, SlaError> {
        Curve::new(points)
    }
}

impl From<Curve> for Vec<(f64, f64)> {
    fn from(c: Curve) -> Self {
        c.points
    }
}

impl Curve {
    /// Builds a curve from breakpoints `(w, r)`, validating and normalising.
    ///
    /// Requirements: at least one point; all coordinates finite and
    /// non-negative; the first `w` is 0; `w` strictly increasing (a repeated
    /// point — same `w` and same `r` within tolerance — is dropped); `r`
    /// non-increasing. Collinear interior points are merged.
    pub fn new(points: Vec<(f64, f64)>) -> Result<Self, SlaError> {
        if points.is_empty() {
            return Err(SlaError::Empty);
        }
        for (index, &(w, r)) in points.iter().enumerate() {
            if !w.is_finite() || !r.is_finite() {
                return Err(SlaError::NonFinite { index });
            }
            if w < 0.0 || r < 0.0 {
                return Err(SlaError::Negative { index });
            }
        }
        if points[0].0 != 0.0 {
            return Err(SlaError::NotStartingAtZero { w: points[0].0 });
        }
        let mut kept: Vec<(f64, f64)> = Vec::with_capacity(points.len());
        for (index, &(w, r)) in points.iter().enumerate() {
            if let Some(&(pw, pr)) = kept.last() {
                let same_w = (w - pw).abs() <= tol(w, pw);
                if same_w && (r - pr).abs() <= tol(r, pr) {
                    continue; // duplicate point
                }
                if w <= pw || same_w {
                    return Err(SlaError::WriteNotIncreasing { index });
                }
                if r > pr {
                    return Err(SlaError::ReadIncreasing { index });
                }
            }
            kept.push((w, r));
        }
        Ok(Curve {
            points: merge_collinear(kept),
        })
    }

    /// Builds a curve from points computed by this crate's algorithms: sorts
    /// by `w`, merges near-duplicate `w`s, clamps rounding noise (tiny
    /// negatives, tiny increases of `r`) and merges collinear points.
    fn from_computed(mut pts: Vec<(f64, f64)>) -> Curve {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut kept: Vec<(f64, f64)> = Vec::with_capacity(pts.len());
        for (i, (w, r)) in pts.into_iter().enumerate() {
            let w = if i == 0 { 0.0 } else { w.max(0.0) };
            let r = r.max(0.0);
            match kept.last_mut() {
                Some(last) if (w - last.0).abs() <= tol(w, last.0) => {
                    last.1 = last.1.min(r);
                }
                Some(last) => {
                    let r = r.min(last.1);
                    kept.push((w, r));
                }
                None => kept.push((w, r)),
            }
        }
        Curve {
            points: merge_collinear(kept),
        }
    }

    /// Builds the SLA curve of sampled `(write, read)` throughput points, as
    /// the paper does: the upper boundary of the convex hull of the samples
    /// together with their projections onto the axes, i.e. starting at
    /// `(0, max r)` and ending at the largest sampled write throughput.
    ///
    /// The result is always concave and non-increasing. Errors on an empty
    /// slice or on non-finite / negative samples.
    pub fn from_samples(samples: &[(f64, f64)]) -> Result<Self, SlaError> {
        if samples.is_empty() {
            return Err(SlaError::Empty);
        }
        for (index, &(w, r)) in samples.iter().enumerate() {
            if !w.is_finite() || !r.is_finite() {
                return Err(SlaError::NonFinite { index });
            }
            if w < 0.0 || r < 0.0 {
                return Err(SlaError::Negative { index });
            }
        }
        let r_top = samples.iter().map(|s| s.1).fold(0.0, f64::max);
        let mut pts: Vec<(f64, f64)> = samples.to_vec();
        pts.push((0.0, r_top));
        // Sort by w ascending, r descending, so the highest point of each
        // vertical line comes first and the others are dropped.
        pts.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        pts.dedup_by(|next, prev| next.0 == prev.0);
        // Andrew's monotone chain, upper hull.
        let mut hull: Vec<(f64, f64)> = Vec::with_capacity(pts.len());
        for p in pts {
            while hull.len() >= 2 {
                let o = hull[hull.len() - 2];
                let a = hull[hull.len() - 1];
                // Pop `a` unless it lies strictly above the chord o–p.
                if cross(o, a, p) >= 0.0 {
                    hull.pop();
                } else {
                    break;
                }
            }
            hull.push(p);
        }
        Ok(Curve::from_computed(hull))
    }

    /// The zero curve `{(0, 0)}`: no reads, no writes. It is the identity of
    /// [`sum`] and subtracting it with [`difference`] changes nothing.
    pub fn zero() -> Curve {
        Curve {
            points: vec![(0.0, 0.0)],
        }
    }

    /// The curve with both throughputs multiplied by `factor`:
    /// `(f·C)(w) = f · C(w / f)` on `[0, f · w_max]`, i.e. every breakpoint
    /// `(w, r)` becomes `(f·w, f·r)`. Exact (one multiplication per
    /// coordinate) and concavity-preserving.
    ///
    /// This is how a tenant is split into `k` stripes (`factor = 1/k`): a
    /// stripe sees `1/k` of the tenant's reads and `1/k` of its writes at
    /// every instant, so its curve is the tenant's curve shrunk by `k` along
    /// both axes, and [`sum`] of the `k` stripes gives the tenant's curve back
    /// (the hypograph of a concave curve is convex, and the Minkowski sum of
    /// `k` copies of a convex set shrunk by `k` is the set itself).
    ///
    /// Errors with [`SlaError::BadScale`] unless `factor` is finite and > 0.
    pub fn scale(&self, factor: f64) -> Result<Curve, SlaError> {
        if !factor.is_finite() || factor <= 0.0 {
            return Err(SlaError::BadScale { factor });
        }
        Ok(Curve::from_computed(
            self.points
                .iter()
                .map(|&(w, r)| (w * factor, r * factor))
                .collect(),
        ))
    }

    /// The breakpoints `(w, r)`, sorted by strictly increasing `w`.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// The largest allowed write throughput (the last breakpoint's `w`).
    pub fn w_max(&self) -> f64 {
        self.points[self.points.len() - 1].0
    }

    /// The read throughput allowed at write throughput `w`, or `None` when
    /// `w` is outside `[0, w_max]` (beyond the tolerance) or NaN.
    pub fn eval(&self, w: f64) -> Option<f64> {
        if w.is_nan() || w < -tol(w, 0.0) || w > self.w_max() + tol(w, self.w_max()) {
            return None;
        }
        Some(self.eval_clamped(w))
    }

    /// Evaluates at `w` clamped into `[0, w_max]`.
    fn eval_clamped(&self, w: f64) -> f64 {
        let pts = &self.points;
        let w = w.clamp(0.0, self.w_max());
        // First index whose w is > the query.
        let i = pts.partition_point(|p| p.0 <= w);
        if i == 0 {
            return pts[0].1;
        }
        if i == pts.len() {
            return pts[i - 1].1;
        }
        let (w0, r0) = pts[i - 1];
        let (w1, r1) = pts[i];
        r0 + (r1 - r0) * ((w - w0) / (w1 - w0))
    }

    /// Whether `other <= self`: `other`'s domain lies within `self`'s and
    /// `other(w) <= self(w)` for every `w` in `other`'s domain (within
    /// tolerance in both coordinates). Exact: the difference of two
    /// piecewise-linear functions is linear between their joint breakpoints,
    /// so checking those suffices.
    pub fn contains(&self, other: &Curve) -> bool {
        self.containment_failure(other).is_none()
    }

    fn containment_failure(&self, other: &Curve) -> Option<String> {
        if !le(other.w_max(), self.w_max()) {
            return Some(format!(
                "its w_max {} exceeds {}",
                other.w_max(),
                self.w_max()
            ));
        }
        let ws = self
            .points
            .iter()
            .map(|p| p.0)
            .filter(|&w| w <= other.w_max())
            .chain(other.points.iter().map(|p| p.0));
        for w in ws {
            // Tolerance in both coordinates: a breakpoint that rounding moved
            // by a hair in `w` must not fail on a steep segment, where that
            // hair becomes a large step in `r`. Curves never increase, so
            // looking a tolerance to the left is the generous side.
            let slack = w - tol(w, self.w_max());
            let (mine, theirs) = (self.eval_clamped(slack), other.eval_clamped(w));
            if !le(theirs, mine) {
                return Some(format!("at w = {w} it allows r = {theirs} > {mine}"));
            }
        }
        None
    }

    /// Whether the curve is concave (each breakpoint on or above the chord of
    /// its neighbours, within tolerance).
    pub fn is_concave(&self) -> bool {
        self.points
            .windows(3)
            .all(|t| le(interp(t[0], t[2], t[1].0), t[1].1))
    }
}

/// Twice the signed area of the triangle o, a, b (positive: counter-clockwise).
fn cross(o: (f64, f64), a: (f64, f64), b: (f64, f64)) -> f64 {
    (a.0 - o.0) * (b.1 - o.1) - (a.1 - o.1) * (b.0 - o.0)
}

/// The line through `p` and `q` evaluated at `w`.
fn interp(p: (f64, f64), q: (f64, f64), w: f64) -> f64 {
    p.1 + (q.1 - p.1) * ((w - p.0) / (q.0 - p.0))
}

/// Drops interior points that lie on the line through their neighbours.
fn merge_collinear(pts: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(pts.len());
    for p in pts {
        while out.len() >= 2 {
            let o = out[out.len() - 2];
            let a = out[out.len() - 1];
            let on_line = interp(o, p, a.0);
            if (on_line - a.1).abs() <= tol(on_line, a.1) {
                out.pop();
            } else {
                break;
            }
        }
        out.push(p);
    }
    out
}

fn require_concave(a: &Curve, b: &Curve) -> Result<(), SlaError> {
    if !a.is_concave() {
        return Err(SlaError::NotConcave { which: "first" });
    }
    if !b.is_concave() {
        return Err(SlaError::NotConcave { which: "second" });
    }
    Ok(())
}

/// Definition 1: `(A + B)(w) = max_{w1 + w2 = w} A(w1) + B(w2)` on
/// `[0, w_max(A) + w_max(B)]`, the aggregate requirement of two tenants.
///
/// Exact for concave curves: the result starts at `A(0) + B(0)` and follows
/// the segments of both operands in order of decreasing slope. Returns
/// [`SlaError::NotConcave`] for non-concave operands.
pub fn sum(a: &Curve, b: &Curve) -> Result<Curve, SlaError> {
    require_concave(a, b)?;
    let mut segs: Vec<(f64, f64)> = a
        .points
        .windows(2)
        .chain(b.points.windows(2))
        .map(|s| (s[1].0 - s[0].0, s[1].1 - s[0].1))
        .collect();
    // Decreasing slope dr/dw (dw > 0): s1 before s2 iff dr1*dw2 > dr2*dw1.
    segs.sort_by(|s1, s2| (s2.1 * s1.0).total_cmp(&(s1.1 * s2.0)));
    let mut pts = Vec::with_capacity(segs.len() + 1);
    let (mut w, mut r) = (0.0, a.points[0].1 + b.points[0].1);
    pts.push((w, r));
    for (dw, dr) in segs {
        w += dw;
        r += dr;
        pts.push((w, r));
    }
    Ok(Curve::from_computed(pts))
}

/// Definition 2: the residual capacity of `a` after admitting `b`, i.e. the
/// largest curve `C` with `C + B <= A` (domain included):
/// `D(w) = min_{0 <= j <= w_max(B)} A(w + j) − B(j)` for
/// `w ∈ [0, w_max(A) − w_max(B)]`, truncated where it would become negative
/// (a non-increasing curve cannot recover). This is the paper's formula with
/// the `j` for which `B` is undefined imposing no constraint, restricted to
/// the `w` where `C + B` stays inside `A`'s domain.
///
/// Errors: [`SlaError::NotContained`] if `a` does not contain `b`;
/// [`SlaError::NotConcave`] for non-concave operands.
pub fn difference(a: &Curve, b: &Curve) -> Result<Curve, SlaError> {
    require_concave(a, b)?;
    if let Some(reason) = a.containment_failure(b) {
        return Err(SlaError::NotContained { reason });
    }
    let top = (a.w_max() - b.w_max()).max(0.0);
    let shifts: Vec<(f64, f64)> = b.points.clone(); // (b_k, B(b_k))
    let d = |w: f64| {
        shifts
            .iter()
            .map(|&(bk, rb)| a.eval_clamped(w + bk) - rb)
            .fold(f64::INFINITY, f64::min)
    };
    // Breakpoints of every shifted copy A(w + b_k).
    let mut cuts: Vec<f64> = vec![0.0, top];
    for &(ai, _) in &a.points {
        for &(bk, _) in &shifts {
            let w = ai - bk;
            if w > 0.0 && w < top {
                cuts.push(w);
            }
        }
    }
    cuts.sort_by(f64::total_cmp);
    cuts.dedup_by(|x, y| (*x - *y).abs() <= tol(*x, *y));
    let mut ws = cuts.clone();
    // Between consecutive cuts each copy is affine: add pairwise crossings.
    for win in cuts.windows(2) {
        let (l, r) = (win[0], win[1]);
        let at_l: Vec<f64> = shifts
            .iter()
            .map(|&(bk, rb)| a.eval_clamped(l + bk) - rb)
            .collect();
        let at_r: Vec<f64> = shifts
            .iter()
            .map(|&(bk, rb)| a.eval_clamped(r + bk) - rb)
            .collect();
        for j in 0..shifts.len() {
            for k in j + 1..shifts.len() {
                let hl = at_l[j] - at_l[k];
                let hr = at_r[j] - at_r[k];
                if (hl > 0.0 && hr < 0.0) || (hl < 0.0 && hr > 0.0) {
                    ws.push(l + (r - l) * (hl / (hl - hr)));
                }
            }
        }
    }
    ws.sort_by(f64::total_cmp);
    let mut pts: Vec<(f64, f64)> = Vec::with_capacity(ws.len());
    for w in ws {
        let r = d(w);
        if le(0.0, r) {
            pts.push((w, r.max(0.0)));
            continue;
        }
        // First negative value: cut the curve where it crosses zero.
        if let Some(&(pw, pr)) = pts.last() {
            let z = pw + (w - pw) * (pr / (pr - r));
            pts.push((z, 0.0));
        }
        break;
    }
    if pts.is_empty() {
        // Unreachable after the containment check (D(0) >= 0), but be safe.
        return Err(SlaError::NotContained {
            reason: "no residual capacity at w = 0".into(),
        });
    }
    Ok(Curve::from_computed(pts))
}

impl std::ops::Add for &Curve {
    type Output = Result<Curve, SlaError>;
    /// Same as [`sum`].
    fn add(self, rhs: &Curve) -> Self::Output {
        sum(self, rhs)
    }
}

impl std::ops::Sub for &Curve {
    type Output = Result<Curve, SlaError>;
    /// Same as [`difference`].
    fn sub(self, rhs: &Curve) -> Self::Output {
        difference(self, rhs)
    }
}
