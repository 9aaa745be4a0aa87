//! A curve as a region of (write, read) throughput, and its gauge.
//!
//! An SLA curve `C` bounds the set of admissible operating points
//! `{(w, r) : 0 <= w <= w_max, 0 <= r <= C(w)}`. Because `C` is non-increasing the
//! set is star-shaped around the origin, so every usage vector `u` has a *gauge*
//! `g(u)`: the smallest `λ` with `u / λ` inside the region. `g(u) <= 1` means `u`
//! is within the curve; `g(u) = 2` means `u` is worth two time slices of the
//! curve's rate. The scheduler uses the gauge to carry a slice's overshoot into the
//! following slices, so that the long-run rate equals the curve even when single
//! requests are larger than a slice's budget.

use sla::Curve;

/// A curve scaled to a time slice: rates become byte budgets.
#[derive(Debug, Clone)]
pub(crate) struct Region {
    curve: Curve,
    /// Bytes per slice for one unit of the curve's rate.
    scale: f64,
}

impl Region {
    /// `curve` in operations of `unit_bytes` per second, over slices of `slice_s`.
    pub(crate) fn new(curve: Curve, unit_bytes: u64, slice_s: f64) -> Self {
        Self {
            curve,
            scale: unit_bytes as f64 * slice_s,
        }
    }

    /// The curve itself.
    pub(crate) fn curve(&self) -> &Curve {
        &self.curve
    }

    /// Whether the region admits any traffic in direction `(dw, dr)` at all.
    pub(crate) fn allows(&self, write: bool) -> bool {
        if write {
            self.curve.w_max() > 0.0
        } else {
            self.curve.points()[0].1 > 0.0
        }
    }

    /// Whether the usage `(w, r)` (bytes in one slice) lies strictly inside the
    /// region, i.e. its gauge is below 1. Zero usage is always inside.
    pub(crate) fn inside(&self, w: f64, r: f64) -> bool {
        if w <= 0.0 && r <= 0.0 {
            return true;
        }
        let (x, y) = (w / self.scale, r / self.scale);
        if x >= self.curve.w_max() && x > 0.0 {
            return false;
        }
        match self.curve.eval(x) {
            // Pure writes below w_max are inside even where the curve allows
            // no reads there.
            Some(c) => y < c || (y == 0.0 && x < self.curve.w_max()),
            None => false,
        }
    }

    /// The gauge of `(w, r)`: the smallest `λ >= 0` with `(w, r) / λ` inside the
    /// region (`f64::INFINITY` if no such `λ`, e.g. reads against a curve that
    /// allows none). Exact: the ray from the origin through `(w, r)` leaves the
    /// star-shaped region through exactly one edge of its boundary (the curve's
    /// segments, then the vertical edge at `w_max`), found by intersecting the
    /// ray with each edge.
    pub(crate) fn gauge(&self, w: f64, r: f64) -> f64 {
        if w <= 0.0 && r <= 0.0 {
            return 0.0;
        }
        let d = (w / self.scale, r / self.scale);
        let cross = |a: (f64, f64), b: (f64, f64)| a.0 * b.1 - a.1 * b.0;
        let pts = self.curve.points();
        let wmax = self.curve.w_max();
        // Largest t with t·d on the boundary.
        let mut best: f64 = 0.0;
        let mut hit = false;
        let mut edge = |p: (f64, f64), q: (f64, f64)| {
            let e = (q.0 - p.0, q.1 - p.1);
            let den = cross(d, e);
            if den.abs() <= f64::MIN_POSITIVE {
                return;
            }
            let t = cross(p, e) / den;
            let u = cross(p, d) / den;
            if t > 0.0 && (-1e-12..=1.0 + 1e-12).contains(&u) {
                best = best.max(t);
                hit = true;
            }
        };
        for seg in pts.windows(2) {
            edge(seg[0], seg[1]);
        }
        let last = *pts.last().expect("a curve has a point");
        if last.1 > 0.0 {
            edge(last, (wmax, 0.0));
        }
        if d.0 <= 0.0 && pts[0].1 > 0.0 {
            // Straight up the read axis: leaves at (0, C(0)).
            best = best.max(pts[0].1 / d.1);
            hit = true;
        }
        if d.1 <= 0.0 && wmax > 0.0 {
            // Along the write axis: leaves at (w_max, 0).
            best = best.max(wmax / d.0);
            hit = true;
        }
        if !hit || best <= 0.0 {
            return f64::INFINITY;
        }
        1.0 / best
    }

    /// The usage left after `k` slices have passed: `u · max(0, g(u) − k) / g(u)`.
    pub(crate) fn decay(&self, w: f64, r: f64, k: u64) -> (f64, f64) {
        if k == 0 || (w <= 0.0 && r <= 0.0) {
            return (w, r);
        }
        let g = self.gauge(w, r);
        if !g.is_finite() {
            // Cannot happen for admitted traffic (directions a curve does not
            // allow are refused), but never keep an unpayable debt.
            return (0.0, 0.0);
        }
        let f = ((g - k as f64) / g).max(0.0);
        (w * f, r * f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linear(r0: f64, w0: f64) -> Region {
        // Unit bytes 1, slice 1 s: budgets equal the curve's values.
        Region::new(Curve::new(vec![(0.0, r0), (w0, 0.0)]).unwrap(), 1, 1.0)
    }

    #[test]
    fn inside_follows_the_curve() {
        let g = linear(100.0, 10.0);
        assert!(g.inside(0.0, 0.0));
        assert!(g.inside(0.0, 99.0));
        assert!(!g.inside(0.0, 100.0));
        assert!(g.inside(5.0, 49.0));
        assert!(!g.inside(5.0, 51.0));
        assert!(g.inside(9.0, 0.0));
        assert!(!g.inside(10.0, 0.0));
    }

    #[test]
    fn gauge_of_a_linear_curve_is_the_normalised_load() {
        let g = linear(100.0, 10.0);
        for &(w, r) in &[
            (5.0, 50.0),
            (10.0, 0.0),
            (0.0, 300.0),
            (2.5, 25.0),
            (20.0, 100.0),
        ] {
            let want = w / 10.0 + r / 100.0;
            let got = g.gauge(w, r);
            assert!(
                (got - want).abs() < 1e-6 * want.max(1.0),
                "{w},{r}: {got} vs {want}"
            );
        }
        assert_eq!(g.gauge(0.0, 0.0), 0.0);
    }

    #[test]
    fn gauge_is_infinite_in_forbidden_directions() {
        let read_only = Region::new(Curve::new(vec![(0.0, 100.0)]).unwrap(), 1, 1.0);
        assert!(read_only.gauge(1.0, 0.0).is_infinite());
        assert!(!read_only.allows(true));
        assert!(read_only.allows(false));
        let write_only = Region::new(Curve::new(vec![(0.0, 0.0), (10.0, 0.0)]).unwrap(), 1, 1.0);
        assert!(write_only.gauge(0.0, 1.0).is_infinite());
        assert!(!write_only.allows(false));
        assert!((write_only.gauge(5.0, 0.0) - 0.5).abs() < 1e-6);
    }

    #[test]
    fn decay_pays_one_slice_per_slice() {
        let g = linear(100.0, 10.0);
        let (w, r) = g.decay(0.0, 250.0, 1);
        assert!(w == 0.0 && (r - 150.0).abs() < 1e-6);
        let (_, r) = g.decay(0.0, 250.0, 2);
        assert!((r - 50.0).abs() < 1e-6);
        assert_eq!(g.decay(0.0, 250.0, 3), (0.0, 0.0));
        assert_eq!(g.decay(3.0, 30.0, 0), (3.0, 30.0));
    }

    #[test]
    fn scale_turns_rates_into_slice_budgets() {
        // 1000 ops/s of 4 KiB over 1 ms slices: 1 op = 4096 bytes per slice.
        let g = Region::new(
            Curve::new(vec![(0.0, 1000.0), (100.0, 0.0)]).unwrap(),
            4096,
            1e-3,
        );
        assert!(g.inside(0.0, 4095.0));
        assert!(!g.inside(0.0, 4096.0));
        assert!((g.gauge(0.0, 8192.0) - 2.0).abs() < 1e-6);
    }
}
