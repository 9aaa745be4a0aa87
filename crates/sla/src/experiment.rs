//! The §6.1 comparison: how many storage units each provisioning method
//! needs for the same tenants.
//!
//! The paper compares Regulator's placement with three methods that place
//! tenants *randomly* among the units that can take them:
//!
//! * **IOPS** — the usual cloud offering, an aggregate read + write budget.
//!   A tenant must reserve the largest `w + r` its curve reaches; a unit can
//!   sell the largest `X` such that *every* mix with `w + r ≤ X` keeps it
//!   within its curve.
//! * **Weighted IOPS** — a write costs `k` reads (ReFlex); the paper uses
//!   `k` = 3, 6, 20 at P95, P99, P99.9. Same as IOPS with `r + k·w`.
//! * **SLA curve** — tenants and units described by their curves (so
//!   admission is exact), but random placement and random new-unit types.
//! * **Regulator** — curves, best fit by curve alignment, least-cost new
//!   units, striping ([`crate::placement`]).
//!
//! A budget `r + k·w ≤ X` *is* an SLA curve, the straight line from `(0, X)`
//! to `(X/k, 0)`, so the two scalar baselines run on the same engine as the
//! others after linearisation: a tenant becomes the smallest such line above
//! its curve ([`linear_envelope`]), a unit the largest such line below its
//! curve ([`inscribed_line`]), and the sum and difference of lines of one
//! slope are exactly scalar addition and subtraction. Everything else —
//! striping, new-unit rule, random choices — is then identical, so the
//! comparison isolates what each method knows about the workload.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, CatalogError, Percentile};
use crate::placement::{
    Metric, NewUnitPolicy, PlacementError, Placer, PlacerConfig, Selection, TenantId, TenantSla,
    Usage,
};
use crate::Curve;

/// A provisioning method of §6.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Aggregate IOPS, random placement.
    Iops,
    /// Weighted IOPS, random placement.
    WeightedIops,
    /// SLA curves, random placement.
    SlaRandom,
    /// SLA curves with Regulator's placement.
    Regulator,
}

impl Method {
    /// Every method, in the paper's order.
    pub const ALL: [Method; 4] = [
        Method::Iops,
        Method::WeightedIops,
        Method::SlaRandom,
        Method::Regulator,
    ];

    /// Name in tables and files.
    pub fn name(self) -> &'static str {
        match self {
            Method::Iops => "iops",
            Method::WeightedIops => "weighted-iops",
            Method::SlaRandom => "sla-random",
            Method::Regulator => "regulator",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown method {s:?}: expected iops, weighted-iops, sla-random or regulator"
                )
            })
    }
}

/// Settings shared by every method of one comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentConfig {
    /// Regulator's alignment metric.
    pub metric: Metric,
    /// Weighted-IOPS write weight per percentile.
    pub write_weights: BTreeMap<Percentile, f64>,
    /// How the three baselines pick a type for a new unit.
    pub baseline_new_unit: NewUnitPolicy,
    /// Stripe limit for every method.
    pub max_stripes: usize,
}

impl Default for ExperimentConfig {
    /// Dot product; the paper's weights 3, 6, 20; random new-unit types for
    /// the baselines (the paper's "randomly into available storage units");
    /// up to 64 stripes.
    fn default() -> Self {
        ExperimentConfig {
            metric: Metric::Dot,
            write_weights: [
                (Percentile::P95, 3.0),
                (Percentile::P99, 6.0),
                (Percentile::P999, 20.0),
            ]
            .into_iter()
            .collect(),
            baseline_new_unit: NewUnitPolicy::Random,
            max_stripes: 64,
        }
    }
}

/// Errors of a comparison run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExperimentError {
    /// No write weight for a percentile, or a bad one.
    #[error("no valid weighted-IOPS write weight for {0} (need a finite weight > 0)")]
    Weight(Percentile),
    /// Linearising the catalogue left no usable unit type.
    #[error("linearising the unit catalogue for {method}: {source}")]
    Catalog {
        /// The method.
        method: Method,
        /// Why.
        source: CatalogError,
    },
    /// An error other than an admission rejection.
    #[error("{method}: {source}")]
    Placement {
        /// The method.
        method: Method,
        /// Why.
        source: PlacementError,
    },
}

/// What one method used for one population.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The method.
    pub method: Method,
    /// Units, disks and cost in use after every tenant arrived.
    pub usage: Usage,
    /// Tenants striped over more than one unit.
    pub striped: usize,
    /// Tenants rejected by admission control, with the first reason.
    pub rejected: usize,
    /// The first rejection's message, if any.
    pub first_rejection: Option<String>,
}

/// The smallest line `r + k·w = X` above `c`: `X = max (r + k·w)` over
/// `c`'s breakpoints, from `(0, X)` to `(X/k, 0)` (the zero curve for
/// `X = 0`). This is what a tenant must reserve under (weighted) IOPS.
pub fn linear_envelope(c: &Curve, k: f64) -> Curve {
    let x = c
        .points()
        .iter()
        .map(|&(w, r)| r + k * w)
        .fold(0.0, f64::max);
    line(x, k)
}

/// The largest line `r + k·w = X` below a concave `u`:
/// `X = min(u(0), k · w_max(u))` (a line and a concave curve cross at most
/// twice, so checking both ends suffices). What a unit can sell under
/// (weighted) IOPS without breaking its curve.
pub fn inscribed_line(u: &Curve, k: f64) -> Curve {
    line(u.points()[0].1.min(k * u.w_max()), k)
}

fn line(x: f64, k: f64) -> Curve {
    if x <= 0.0 {
        return Curve::zero();
    }
    Curve::new(vec![(0.0, x), (x / k, 0.0)]).expect("a valid line")
}

/// `catalog` with every curve at `p` replaced by its [`inscribed_line`] of
/// slope `-k`; curves at other percentiles and lines of zero size are left
/// out.
pub fn linearize_catalog(
    catalog: &Catalog,
    p: Percentile,
    k: f64,
) -> Result<Catalog, CatalogError> {
    let mut types = Vec::new();
    for t in catalog.types() {
        let Some(c) = t.curve(p) else { continue };
        let l = inscribed_line(c, k);
        if l == Curve::zero() {
            continue;
        }
        let mut t = t.clone();
        t.curves = [(p, l)].into_iter().collect();
        types.push(t);
    }
    Catalog::new(
        format!("{} (linearised, write weight {k})", catalog.description),
        types,
    )
}

/// Places `tenants` (all at percentile `p`, in the given arrival order) with
/// `method` and reports what it used. Admission rejections are counted, not
/// fatal; `seed` drives the random choices.
pub fn run_method(
    method: Method,
    tenants: &[Curve],
    p: Percentile,
    catalog: &Catalog,
    cfg: &ExperimentConfig,
    seed: u64,
) -> Result<Outcome, ExperimentError> {
    let weight = |p: Percentile| -> Result<f64, ExperimentError> {
        match cfg.write_weights.get(&p) {
            Some(&k) if k.is_finite() && k > 0.0 => Ok(k),
            _ => Err(ExperimentError::Weight(p)),
        }
    };
    let k = match method {
        Method::Iops => Some(1.0),
        Method::WeightedIops => Some(weight(p)?),
        Method::SlaRandom | Method::Regulator => None,
    };
    let catalog = match k {
        Some(k) => linearize_catalog(catalog, p, k)
            .map_err(|source| ExperimentError::Catalog { method, source })?,
        None => catalog.clone(),
    };
    let config = match method {
        Method::Regulator => PlacerConfig {
            seed,
            max_stripes: cfg.max_stripes,
            ..PlacerConfig::regulator(cfg.metric)
        },
        _ => PlacerConfig {
            selection: Selection::Random,
            new_unit: cfg.baseline_new_unit,
            max_stripes: cfg.max_stripes,
            seed,
        },
    };
    let mut placer = Placer::new(catalog, config);
    let (mut striped, mut rejected, mut first_rejection) = (0, 0, None);
    for (i, c) in tenants.iter().enumerate() {
        let curve = match k {
            Some(k) => linear_envelope(c, k),
            None => c.clone(),
        };
        match placer.place(
            TenantId(i as u64),
            TenantSla {
                curve,
                percentile: p,
            },
        ) {
            Ok(stripes) => striped += usize::from(stripes.len() > 1),
            Err(e @ (PlacementError::Unsatisfiable { .. } | PlacementError::NoUnitType(_))) => {
                rejected += 1;
                first_rejection.get_or_insert_with(|| format!("tenant {i}: {e}"));
            }
            Err(source) => return Err(ExperimentError::Placement { method, source }),
        }
    }
    Ok(Outcome {
        method,
        usage: placer.usage(),
        striped,
        rejected,
        first_rejection,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::UnitType;

    fn c(points: &[(f64, f64)]) -> Curve {
        Curve::new(points.to_vec()).unwrap()
    }

    #[test]
    fn lines() {
        let t = c(&[(0.0, 10.0), (4.0, 8.0), (6.0, 0.0)]);
        // max(r + w) = 12 at (4, 8).
        assert_eq!(
            linear_envelope(&t, 1.0).points(),
            &[(0.0, 12.0), (12.0, 0.0)]
        );
        // max(r + 3w) = 20 at (4, 8); the line contains the curve.
        let l = linear_envelope(&t, 3.0);
        assert!(l.contains(&t));
        assert_eq!(l.points()[0].1, 20.0);
        assert_eq!(linear_envelope(&Curve::zero(), 3.0), Curve::zero());
        // A read-only tenant is charged as if it might write.
        assert_eq!(linear_envelope(&c(&[(0.0, 6.0)]), 3.0).w_max(), 2.0);
        let u = c(&[(0.0, 360.0), (40.0, 320.0), (120.0, 0.0)]);
        assert_eq!(
            inscribed_line(&u, 1.0).points(),
            &[(0.0, 120.0), (120.0, 0.0)]
        );
        assert_eq!(
            inscribed_line(&u, 3.0).points(),
            &[(0.0, 360.0), (120.0, 0.0)]
        );
        assert_eq!(
            inscribed_line(&u, 6.0).points(),
            &[(0.0, 360.0), (60.0, 0.0)]
        );
        for k in [0.5, 1.0, 3.0, 20.0] {
            assert!(u.contains(&inscribed_line(&u, k)), "{k}");
        }
    }

    fn catalog() -> Catalog {
        Catalog::new(
            "",
            vec![UnitType {
                name: "ssd".into(),
                description: String::new(),
                cost: 1.0,
                disks: 1,
                available: None,
                curves: [(
                    Percentile::P95,
                    c(&[(0.0, 100.0), (20.0, 90.0), (30.0, 0.0)]),
                )]
                .into_iter()
                .collect(),
            }],
        )
        .unwrap()
    }

    #[test]
    fn methods_on_a_hand_sized_population() {
        // Ten read-only tenants of 30 reads: curves fit 3 per unit (90 of
        // 100 reads), so 4 units. IOPS sells min(100, 30) = 30 per unit: one
        // tenant per unit, 10 units. Weighted (k = 3): min(100, 90) = 90, 3
        // per unit, 4 units.
        let tenants = vec![c(&[(0.0, 30.0)]); 10];
        let cfg = ExperimentConfig::default();
        let run = |m| run_method(m, &tenants, Percentile::P95, &catalog(), &cfg, 1).unwrap();
        assert_eq!(run(Method::Iops).usage.units, 10);
        assert_eq!(run(Method::WeightedIops).usage.units, 4);
        assert_eq!(run(Method::SlaRandom).usage.units, 4);
        assert_eq!(run(Method::Regulator).usage.units, 4);
        // A tenant needing two units is striped, not rejected.
        let big = vec![c(&[(0.0, 150.0), (10.0, 140.0), (40.0, 0.0)])];
        let o = run_method(
            Method::Regulator,
            &big,
            Percentile::P95,
            &catalog(),
            &cfg,
            1,
        )
        .unwrap();
        assert_eq!((o.usage.units, o.striped, o.rejected), (2, 1, 0));
        // Unoffered percentile: every tenant rejected, with the reason.
        let o = run_method(
            Method::Regulator,
            &tenants,
            Percentile::P99,
            &catalog(),
            &cfg,
            1,
        )
        .unwrap();
        assert_eq!(o.rejected, 10);
        assert!(o
            .first_rejection
            .unwrap()
            .contains("no storage-unit type offers a p99 curve"));
        let e =
            run_method(Method::Iops, &tenants, Percentile::P99, &catalog(), &cfg, 1).unwrap_err();
        assert!(e.to_string().contains("no unit types"), "{e}");
        let mut bad = cfg.clone();
        bad.write_weights.clear();
        let e = run_method(
            Method::WeightedIops,
            &tenants,
            Percentile::P95,
            &catalog(),
            &bad,
            1,
        )
        .unwrap_err();
        assert_eq!(e, ExperimentError::Weight(Percentile::P95));
    }

    #[test]
    fn complementary_tenants_pair_up() {
        // A unit holds exactly one read-heavy and one write-heavy tenant
        // (its curve is their sum); any two of a kind do not fit together.
        let a = c(&[(0.0, 60.0), (10.0, 50.0), (20.0, 0.0)]);
        let b = c(&[(0.0, 40.0), (50.0, 30.0), (80.0, 0.0)]);
        let u = crate::sum(&a, &b).unwrap();
        let cat = Catalog::new(
            "",
            vec![UnitType {
                name: "u".into(),
                description: String::new(),
                cost: 1.0,
                disks: 1,
                available: None,
                curves: [(Percentile::P99, u)].into_iter().collect(),
            }],
        )
        .unwrap();
        let mut tenants: Vec<Curve> = (0..20).flat_map(|_| [a.clone(), b.clone()]).collect();
        rng::SplitMix64::new(5).shuffle(&mut tenants);
        let cfg = ExperimentConfig::default();
        for m in [Method::Regulator, Method::SlaRandom] {
            let o = run_method(m, &tenants, Percentile::P99, &cat, &cfg, 7).unwrap();
            assert_eq!(o.usage.units, 20, "{m}: {o:?}");
        }
        assert_eq!("regulator".parse::<Method>(), Ok(Method::Regulator));
        assert!("best".parse::<Method>().is_err());
    }
}
