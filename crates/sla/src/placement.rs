//! SLA-aware placement of tenants on storage units (Regulator §4.1).
//!
//! Placing tenants is bin packing where both the items and the bins are SLA
//! curves, and the bins come in several types with different costs. The
//! paper adapts best-fit to that setting; this module implements it, with
//! the details the paper leaves open made explicit:
//!
//! * **State.** Every unit in use keeps its `capacity` (its type's curve at
//!   the unit's percentile), the `load` (the [`sum`] of the curves placed on
//!   it) and the `residual`, `capacity − load` by [`difference`]. The
//!   invariant, checked on every admission, is `load ≤ capacity`: whatever
//!   mix of reads and writes each tenant issues within its own curve, the
//!   unit stays within its curve, so the latency bound holds.
//! * **Phase 1 — best fit.** A tenant (or a stripe of one) fits a unit when
//!   its curve is contained in the unit's residual (and, re-checked exactly,
//!   `load + tenant ≤ capacity`). Among the units that fit, the one with the
//!   smallest [`Metric::misfit`] wins, ties to the lowest [`UnitId`]: the
//!   paper's curve-alignment metrics (dot product, L2 distance, area ratio)
//!   replace "the bin with the least capacity remaining", which has no
//!   meaning for curves.
//! * **Phase 2 — a new unit.** When no unit in use fits, a new unit is
//!   opened of the type that is cheapest *for this tenant*: the type that
//!   minimises `cost × share`, where the share is the smallest `λ` with
//!   `tenant ≤ λ·capacity` ([`Curve::scale`]), the fraction of the unit the
//!   tenant uses up along its most constrained direction. (Counting whole
//!   units instead would always pick the cheapest type for any tenant that
//!   fits one unit, and so could never exploit heterogeneity.)
//! * **Striping.** When the tenant is larger than one unit of the chosen
//!   type (`share > 1`), it is split into `k` equal stripes, the smallest `k`
//!   with `tenant / k ≤ capacity`: data striped evenly over `k` units sends
//!   each of them `1/k` of the reads and `1/k` of the writes at every
//!   instant, so a stripe's curve is the tenant's curve scaled by `1/k` in
//!   both axes, and the sum of the stripes is the tenant's curve again.
//!   Stripes go to distinct units (phase 1 for each, else new units of the
//!   chosen type) — that is what avoids the hotspot.
//! * **Admission control.** A tenant whose SLA cannot be met (no type offers
//!   its percentile, it would need more than [`PlacerConfig::max_stripes`]
//!   units, its curve needs writes from a type that allows none, the limited
//!   inventory of a type is used up, …) gets a [`PlacementError`] naming
//!   why for each type. Placement is transactional: the whole placement
//!   (every stripe, every residual, the random-number state) is computed
//!   first without touching the state and committed only when all of it
//!   succeeded, so a rejected tenant leaves nothing behind.
//! * **Removal.** A removed tenant's stripes leave their units, and each
//!   unit's residual is recomputed from its capacity and its remaining
//!   stripes. In this algebra `(A − B) − C = A − (B + C)`, so that is the
//!   residual "with the tenant's curve added back" — and exactly what it
//!   would be had the tenant never come; naively adding the tenant back onto
//!   the residual (`(A − B) + B`) would only give a lower bound. A unit left
//!   empty is released.
//!
//! Units serve one percentile class each: a unit opened for a P99 tenant
//! runs at its P99 curve and takes only P99 tenants.
//!
//! The same engine, with [`Selection::Random`] and linearised curves, is
//! also each baseline of the §6.1 experiment (see [`crate::experiment`]).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use rng::SplitMix64;
use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, Percentile};
use crate::{difference, sum, Curve, SlaError};

/// Identifies a tenant (chosen by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TenantId(pub u64);

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tenant {}", self.0)
    }
}

/// Identifies a storage unit in use (assigned by the [`Placer`], never
/// reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct UnitId(pub u64);

impl fmt::Display for UnitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unit {}", self.0)
    }
}

/// What a tenant registers with: `<SLA curve, read tail-latency percentile>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSla {
    /// The largest read rate needed at each write rate (4 KiB I/Os per
    /// second); must be concave, e.g. built by [`Curve::from_samples`].
    pub curve: Curve,
    /// The percentile at which the read latency bound must hold.
    pub percentile: Percentile,
}

/// Number of intervals of the grid on which [`Metric::misfit`] compares
/// curves.
pub const GRID: usize = 64;

/// How well a tenant's curve aligns with a unit's residual curve (the
/// paper's three example metrics, §4.1).
///
/// All three compare the curves as vectors of read rates on a common grid:
/// `x_i = i · W / GRID` for `i = 0..=GRID`, where `W` is the write range of
/// the unit's full capacity curve, and a curve `C` becomes
/// `c_i = C(x_i) / R` (0 beyond `C`'s write range), with `R` the capacity's
/// pure-read rate (1 if that is 0). Normalising by the unit makes the
/// metrics dimensionless and comparable across unit types, and the grid lets
/// a read-only curve (a single point at `w = 0`) count for what it is rather
/// than having zero width. With `t` the tenant's vector and `d` the
/// residual's:
///
/// * [`Metric::Dot`]: `1 − (t·d) / (d·d)`. `(t·d)/(d·d)` is the length of
///   `t`'s projection on `d` as a fraction of `d`: the cosine of their angle
///   (shape similarity) times `|t|/|d|` (how much of the residual the tenant
///   fills). In `[0, 1]` when the tenant fits.
/// * [`Metric::L2`]: `sqrt(Σ (d_i − t_i)² / (GRID + 1))`, the root-mean-square
///   distance between the curves: what would be left unused, pointwise.
/// * [`Metric::Area`]: `1 − A(t) / A(d)`, with `A` the trapezoid-rule area
///   under the vector (weights ½, 1, …, 1, ½): one minus the fraction of the
///   residual's area the tenant takes.
///
/// Lower is better for all three; a tenant that fills the residual exactly
/// scores 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Normalised dot product (projection).
    Dot,
    /// L2 distance.
    L2,
    /// Area ratio.
    Area,
}

impl Metric {
    /// Every metric.
    pub const ALL: [Metric; 3] = [Metric::Dot, Metric::L2, Metric::Area];

    /// The name used on the command line: `dot`, `l2`, `area`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Dot => "dot",
            Metric::L2 => "l2",
            Metric::Area => "area",
        }
    }

    /// The misfit of `tenant` on a unit whose residual is `residual` and
    /// whose full capacity is `capacity` (see the type's documentation for
    /// the formulas). Lower is better.
    pub fn misfit(self, tenant: &Curve, residual: &Curve, capacity: &Curve) -> f64 {
        self.misfit_vectors(&grid(tenant, capacity), &grid(residual, capacity))
    }

    fn misfit_vectors(self, t: &[f64], d: &[f64]) -> f64 {
        match self {
            Metric::Dot => {
                let dd: f64 = d.iter().map(|x| x * x).sum();
                let td: f64 = t.iter().zip(d).map(|(a, b)| a * b).sum();
                if dd > 0.0 {
                    1.0 - td / dd
                } else {
                    0.0
                }
            }
            Metric::L2 => {
                let ss: f64 = t.iter().zip(d).map(|(a, b)| (b - a) * (b - a)).sum();
                (ss / d.len() as f64).sqrt()
            }
            Metric::Area => {
                let ad = trapezoid(d);
                if ad > 0.0 {
                    1.0 - trapezoid(t) / ad
                } else {
                    0.0
                }
            }
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that is not a metric.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown metric {0:?}: expected dot, l2 or area")]
pub struct ParseMetricError(pub String);

impl FromStr for Metric {
    type Err = ParseMetricError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "dot" => Ok(Metric::Dot),
            "l2" => Ok(Metric::L2),
            "area" => Ok(Metric::Area),
            _ => Err(ParseMetricError(s.to_string())),
        }
    }
}

/// `C` on the metric grid of `capacity` (see [`Metric`]).
fn grid(c: &Curve, capacity: &Curve) -> Vec<f64> {
    let r0 = capacity.points()[0].1;
    let norm = if r0 > 0.0 { r0 } else { 1.0 };
    let w = capacity.w_max();
    (0..=GRID)
        .map(|i| {
            let x = w * i as f64 / GRID as f64;
            c.eval(x).map_or(0.0, |r| r / norm)
        })
        .collect()
}

/// Trapezoid-rule area under a grid vector, in grid steps.
fn trapezoid(v: &[f64]) -> f64 {
    let n = v.len();
    if n < 2 {
        return v.first().copied().unwrap_or(0.0);
    }
    v.iter().sum::<f64>() - (v[0] + v[n - 1]) / 2.0
}

/// Which unit in use receives a tenant that fits several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Selection {
    /// Best fit: the smallest misfit under the metric (Regulator).
    BestFit(Metric),
    /// Uniformly at random among the units that fit (the paper's baselines).
    Random,
}

/// Which type of unit to open when no unit in use fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NewUnitPolicy {
    /// Least `cost × share` for this tenant (Regulator; see the module docs).
    LeastCost,
    /// The type with the lowest cost per unit (then least cost for the
    /// tenant): the naive operator.
    Cheapest,
    /// A uniformly random type among those that can take the tenant.
    Random,
}

impl NewUnitPolicy {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            NewUnitPolicy::LeastCost => "least-cost",
            NewUnitPolicy::Cheapest => "cheapest",
            NewUnitPolicy::Random => "random",
        }
    }
}

impl fmt::Display for NewUnitPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that is not a new-unit policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown new-unit policy {0:?}: expected least-cost, cheapest or random")]
pub struct ParseNewUnitPolicyError(pub String);

impl FromStr for NewUnitPolicy {
    type Err = ParseNewUnitPolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "least-cost" => Ok(NewUnitPolicy::LeastCost),
            "cheapest" => Ok(NewUnitPolicy::Cheapest),
            "random" => Ok(NewUnitPolicy::Random),
            _ => Err(ParseNewUnitPolicyError(s.to_string())),
        }
    }
}

/// Settings of a [`Placer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacerConfig {
    /// Phase 1 rule.
    pub selection: Selection,
    /// Phase 2 rule.
    pub new_unit: NewUnitPolicy,
    /// The most units one tenant may be striped over; larger tenants are
    /// rejected.
    pub max_stripes: usize,
    /// Seed of the random choices (random selection and random new-unit
    /// types); unused by the deterministic rules.
    pub seed: u64,
}

impl PlacerConfig {
    /// Regulator's placement: best fit under `metric`, least cost for new
    /// units, up to 64 stripes.
    pub fn regulator(metric: Metric) -> Self {
        PlacerConfig {
            selection: Selection::BestFit(metric),
            new_unit: NewUnitPolicy::LeastCost,
            max_stripes: 64,
            seed: 0,
        }
    }
}

/// One stripe of a placed tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stripe {
    /// The unit holding it.
    pub unit: UnitId,
    /// Its curve (the tenant's, scaled by `1/k` for `k` stripes).
    pub curve: Curve,
}

/// A tenant in the system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacedTenant {
    /// What it registered with.
    pub sla: TenantSla,
    /// Where it lives (one stripe unless striped).
    pub stripes: Vec<Stripe>,
}

/// A storage unit in use.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    id: UnitId,
    type_index: usize,
    percentile: Percentile,
    capacity: Curve,
    load: Curve,
    residual: Curve,
    tenants: Vec<(TenantId, Curve)>,
    /// `residual` on the metric grid (cached).
    grid: Vec<f64>,
}

impl Unit {
    /// Its id.
    pub fn id(&self) -> UnitId {
        self.id
    }
    /// Index of its type in the [`Catalog`].
    pub fn type_index(&self) -> usize {
        self.type_index
    }
    /// The percentile class it serves.
    pub fn percentile(&self) -> Percentile {
        self.percentile
    }
    /// Its type's curve at its percentile.
    pub fn capacity(&self) -> &Curve {
        &self.capacity
    }
    /// The sum of the curves placed on it.
    pub fn load(&self) -> &Curve {
        &self.load
    }
    /// `capacity − load` ([`difference`]): the largest curve that still fits.
    pub fn residual(&self) -> &Curve {
        &self.residual
    }
    /// The stripes on it, in arrival order.
    pub fn tenants(&self) -> &[(TenantId, Curve)] {
        &self.tenants
    }

    fn with(id: UnitId, type_index: usize, percentile: Percentile, capacity: Curve) -> Self {
        let grid = grid(&capacity, &capacity);
        Unit {
            id,
            type_index,
            percentile,
            load: Curve::zero(),
            residual: capacity.clone(),
            capacity,
            tenants: Vec::new(),
            grid,
        }
    }
}

/// Units in use, by type and in total.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Storage units in use.
    pub units: usize,
    /// Physical disks in them.
    pub disks: u64,
    /// Their total cost.
    pub cost: f64,
    /// Units in use per type name.
    pub per_type: BTreeMap<String, usize>,
}

/// Why a tenant was not placed (or removed).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlacementError {
    /// The id is already in use.
    #[error("{0} is already placed")]
    Duplicate(TenantId),
    /// No such tenant (removal).
    #[error("there is no {0}")]
    UnknownTenant(TenantId),
    /// The tenant's curve is not concave.
    #[error(
        "the SLA curve is not concave; the SLA arithmetic needs concave curves \
         (build it with Curve::from_samples, the upper convex hull)"
    )]
    NotConcave,
    /// No unit type has a curve at the requested percentile.
    #[error("SLA cannot be met: no storage-unit type offers a {0} curve")]
    NoUnitType(Percentile),
    /// Every type that offers the percentile was tried and none can take the
    /// tenant.
    #[error("SLA cannot be met at {percentile}: {reasons}")]
    Unsatisfiable {
        /// The tenant's percentile.
        percentile: Percentile,
        /// Why, per unit type (`type: reason; …`).
        reasons: String,
    },
    /// Curve arithmetic failed (a bug, not bad input).
    #[error("SLA curve arithmetic failed: {0}")]
    Curve(#[from] SlaError),
}

/// The placement engine: units in use, tenants, and the rules of
/// [`PlacerConfig`]. Everything is in memory and deterministic given the
/// configuration's seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Placer {
    catalog: Catalog,
    config: PlacerConfig,
    rng: SplitMix64,
    units: BTreeMap<UnitId, Unit>,
    tenants: BTreeMap<TenantId, PlacedTenant>,
    next_unit: u64,
}

/// A change to a unit in use, computed before it is committed.
#[derive(Debug)]
struct UnitUpdate {
    id: UnitId,
    load: Curve,
    residual: Curve,
    stripe: Curve,
}

/// A complete placement, computed without touching the state.
#[derive(Debug)]
struct Plan {
    updates: Vec<UnitUpdate>,
    new_units: Vec<Unit>,
    stripes: Vec<Stripe>,
    rng: SplitMix64,
    next_unit: u64,
}

/// Why one option failed while planning: a reason to report, or a real error.
enum Fail {
    Reject(String),
    Fatal(PlacementError),
}

impl From<SlaError> for Fail {
    fn from(e: SlaError) -> Self {
        Fail::Fatal(PlacementError::Curve(e))
    }
}

/// The smallest `λ` with `t ≤ λ·u` and the smallest stripe count `k` with
/// `t / k ≤ u`, or why `t` cannot be striped over at most `max` units `u`.
pub fn share_and_stripes(t: &Curve, u: &Curve, max: usize) -> Result<(f64, usize), String> {
    if t.w_max() > 0.0 && u.w_max() == 0.0 {
        return Err("it allows no writes, and the tenant writes".into());
    }
    if t.points()[0].1 > 0.0 && u.points()[0].1 == 0.0 {
        return Err("it allows no reads, and the tenant reads".into());
    }
    if *t == Curve::zero() {
        return Ok((0.0, 1));
    }
    let fits = |lambda: f64| u.scale(lambda).map(|s| s.contains(t)).unwrap_or(false);
    let limit = 2.0 * max.max(1) as f64;
    let (mut lo, mut hi) = (0.0, 1.0);
    while !fits(hi) {
        lo = hi;
        hi *= 2.0;
        if hi > limit {
            return Err(format!(
                "the tenant needs more than {max} units of it (the stripe limit)"
            ));
        }
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let share = hi;
    let mut k = (share * (1.0 - 1e-9)).ceil().max(1.0) as usize;
    while !t
        .scale(1.0 / k as f64)
        .map(|s| u.contains(&s))
        .unwrap_or(false)
    {
        k += 1;
        if k > max {
            break;
        }
    }
    if k > max {
        return Err(format!(
            "the tenant needs {k} units of it, more than the stripe limit of {max}"
        ));
    }
    Ok((share, k))
}

impl Placer {
    /// An empty system over `catalog`.
    pub fn new(catalog: Catalog, config: PlacerConfig) -> Self {
        let rng = SplitMix64::new(config.seed);
        Placer {
            catalog,
            config,
            rng,
            units: BTreeMap::new(),
            tenants: BTreeMap::new(),
            next_unit: 0,
        }
    }

    /// The unit types.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The rules in force.
    pub fn config(&self) -> &PlacerConfig {
        &self.config
    }

    /// The units in use, by id.
    pub fn units(&self) -> impl Iterator<Item = &Unit> {
        self.units.values()
    }

    /// One unit in use.
    pub fn unit(&self, id: UnitId) -> Option<&Unit> {
        self.units.get(&id)
    }

    /// A placed tenant.
    pub fn tenant(&self, id: TenantId) -> Option<&PlacedTenant> {
        self.tenants.get(&id)
    }

    /// Every placed tenant, by id.
    pub fn tenants(&self) -> impl Iterator<Item = (TenantId, &PlacedTenant)> {
        self.tenants.iter().map(|(&id, t)| (id, t))
    }

    /// Units, disks and cost in use.
    pub fn usage(&self) -> Usage {
        let mut u = Usage::default();
        for unit in self.units.values() {
            let t = &self.catalog.types()[unit.type_index];
            u.units += 1;
            u.disks += u64::from(t.disks);
            u.cost += t.cost;
            *u.per_type.entry(t.name.clone()).or_default() += 1;
        }
        u
    }

    /// Admits tenant `id` with `sla`, or explains why not and changes
    /// nothing. Returns its stripes.
    pub fn place(&mut self, id: TenantId, sla: TenantSla) -> Result<Vec<Stripe>, PlacementError> {
        let plan = self.plan(id, &sla)?;
        let stripes = plan.stripes.clone();
        self.commit(id, sla, plan);
        Ok(stripes)
    }

    /// Re-creates a unit in use with single-stripe tenants already on it, as
    /// a store recorded them (the fleet scheduler rebuilds its placer from
    /// etcd this way). Refuses a type or percentile the catalogue does not
    /// have, a duplicate tenant, or tenants whose sum exceeds the unit.
    pub fn restore_unit(
        &mut self,
        type_index: usize,
        percentile: Percentile,
        tenants: Vec<(TenantId, TenantSla)>,
    ) -> Result<UnitId, PlacementError> {
        let t = self
            .catalog
            .types()
            .get(type_index)
            .ok_or(PlacementError::NoUnitType(percentile))?;
        let capacity = t
            .curve(percentile)
            .ok_or(PlacementError::NoUnitType(percentile))?
            .clone();
        let mut load = Curve::zero();
        for (id, sla) in &tenants {
            if self.tenants.contains_key(id) {
                return Err(PlacementError::Duplicate(*id));
            }
            if sla.percentile != percentile {
                return Err(PlacementError::Unsatisfiable {
                    percentile,
                    reasons: format!("{id} is {} on a {percentile} unit", sla.percentile),
                });
            }
            load = sum(&load, &sla.curve)?;
        }
        if !capacity.contains(&load) {
            return Err(PlacementError::Unsatisfiable {
                percentile,
                reasons: format!("{}: the restored tenants exceed the unit", t.name),
            });
        }
        let id = UnitId(self.next_unit);
        self.next_unit += 1;
        let mut unit = Unit::with(id, type_index, percentile, capacity);
        if !tenants.is_empty() {
            let residual = difference(&unit.capacity, &load)?;
            unit.grid = grid(&residual, &unit.capacity);
            unit.residual = residual;
            unit.load = load;
        }
        for (tid, sla) in tenants {
            unit.tenants.push((tid, sla.curve.clone()));
            let stripe = Stripe {
                unit: id,
                curve: sla.curve.clone(),
            };
            self.tenants.insert(
                tid,
                PlacedTenant {
                    sla,
                    stripes: vec![stripe],
                },
            );
        }
        self.units.insert(id, unit);
        Ok(id)
    }

    /// Removes tenant `id`, recomputing the residual of every unit it was on
    /// (units left empty are released). Returns what it registered with.
    pub fn remove(&mut self, id: TenantId) -> Result<TenantSla, PlacementError> {
        let placed = self
            .tenants
            .get(&id)
            .ok_or(PlacementError::UnknownTenant(id))?;
        // Compute every change first, then commit.
        let mut changes: Vec<(UnitId, Option<Unit>)> = Vec::new();
        for s in &placed.stripes {
            if changes.iter().any(|(u, _)| *u == s.unit) {
                continue;
            }
            let unit = &self.units[&s.unit];
            let rest: Vec<(TenantId, Curve)> = unit
                .tenants
                .iter()
                .filter(|(t, _)| *t != id)
                .cloned()
                .collect();
            if rest.is_empty() {
                changes.push((s.unit, None));
                continue;
            }
            let mut load = Curve::zero();
            let mut residual = unit.capacity.clone();
            let mut sequential = true;
            for (_, c) in &rest {
                load = sum(&load, c)?;
                if sequential {
                    match difference(&residual, c) {
                        Ok(r) => residual = r,
                        Err(_) => sequential = false,
                    }
                }
            }
            if !sequential {
                // Rounding at the containment boundary: subtract the sum.
                residual = difference(&unit.capacity, &load)?;
            }
            let mut new = unit.clone();
            new.grid = grid(&residual, &new.capacity);
            new.load = load;
            new.residual = residual;
            new.tenants = rest;
            changes.push((s.unit, Some(new)));
        }
        for (uid, change) in changes {
            match change {
                Some(u) => {
                    self.units.insert(uid, u);
                }
                None => {
                    self.units.remove(&uid);
                }
            }
        }
        Ok(self.tenants.remove(&id).expect("tenant checked above").sla)
    }

    /// Checks the invariants: every unit's load is the sum of its stripes
    /// and within its capacity, its residual plus its load is within its
    /// capacity, every tenant's stripes are on units that list them and add
    /// up to its curve, and no unit is empty. For tests and audits.
    pub fn check(&self) -> Result<(), String> {
        for u in self.units.values() {
            if u.tenants.is_empty() {
                return Err(format!("{} is in use but empty", u.id));
            }
            let mut load = Curve::zero();
            for (_, c) in &u.tenants {
                load = sum(&load, c).map_err(|e| e.to_string())?;
            }
            if !(load.contains(&u.load) && u.load.contains(&load)) {
                return Err(format!("{}: recorded load differs from its stripes", u.id));
            }
            if !u.capacity.contains(&u.load) {
                return Err(format!("{}: load exceeds capacity", u.id));
            }
            let both = sum(&u.residual, &u.load).map_err(|e| e.to_string())?;
            if !u.capacity.contains(&both) {
                return Err(format!("{}: residual + load exceeds capacity", u.id));
            }
        }
        for (id, t) in &self.tenants {
            let mut total = Curve::zero();
            for s in &t.stripes {
                let u = self
                    .units
                    .get(&s.unit)
                    .ok_or_else(|| format!("{id}: stripe on missing {}", s.unit))?;
                if u.percentile != t.sla.percentile {
                    return Err(format!("{id}: on {} of another percentile", s.unit));
                }
                if !u.tenants.iter().any(|(tid, c)| tid == id && *c == s.curve) {
                    return Err(format!("{id}: {} does not list its stripe", s.unit));
                }
                total = sum(&total, &s.curve).map_err(|e| e.to_string())?;
            }
            let c = &t.sla.curve;
            if !(total.contains(c) && c.contains(&total)) {
                return Err(format!("{id}: stripes do not add up to its curve"));
            }
        }
        for u in self.units.values() {
            for (tid, _) in &u.tenants {
                if !self.tenants.contains_key(tid) {
                    return Err(format!("{}: holds unknown {tid}", u.id));
                }
            }
        }
        Ok(())
    }

    fn plan(&self, id: TenantId, sla: &TenantSla) -> Result<Plan, PlacementError> {
        if self.tenants.contains_key(&id) {
            return Err(PlacementError::Duplicate(id));
        }
        if !sla.curve.is_concave() {
            return Err(PlacementError::NotConcave);
        }
        let p = sla.percentile;
        let types: Vec<usize> = self.catalog.offering(p).collect();
        if types.is_empty() {
            return Err(PlacementError::NoUnitType(p));
        }
        let mut rng = self.rng.clone();
        // Phase 1: the whole tenant in a unit in use.
        if let Some(upd) = self.select(&sla.curve, p, &[], &mut rng)? {
            return Ok(Plan {
                stripes: vec![Stripe {
                    unit: upd.id,
                    curve: sla.curve.clone(),
                }],
                updates: vec![upd],
                new_units: Vec::new(),
                rng,
                next_unit: self.next_unit,
            });
        }
        // Phase 2: new unit(s), trying types in the policy's order.
        let mut reasons: Vec<String> = Vec::new();
        let mut options: Vec<(usize, f64, usize)> = Vec::new();
        for &ti in &types {
            let t = &self.catalog.types()[ti];
            let cap = t.curve(p).expect("offering() lists types with this curve");
            match share_and_stripes(&sla.curve, cap, self.config.max_stripes) {
                Ok((share, k)) => options.push((ti, share * t.cost, k)),
                Err(r) => reasons.push(format!("{}: {r}", t.name)),
            }
        }
        let cost_of = |ti: usize| self.catalog.types()[ti].cost;
        match self.config.new_unit {
            NewUnitPolicy::LeastCost => {
                options.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.2.cmp(&b.2)).then(a.0.cmp(&b.0)))
            }
            NewUnitPolicy::Cheapest => options.sort_by(|a, b| {
                cost_of(a.0)
                    .total_cmp(&cost_of(b.0))
                    .then(a.1.total_cmp(&b.1))
                    .then(a.0.cmp(&b.0))
            }),
            NewUnitPolicy::Random => rng.shuffle(&mut options),
        }
        for (ti, _, k) in options {
            let mut try_rng = rng.clone();
            match self.plan_stripes(&sla.curve, p, ti, k, &mut try_rng) {
                Ok(mut plan) => {
                    plan.rng = try_rng;
                    return Ok(plan);
                }
                Err(Fail::Reject(r)) => {
                    reasons.push(format!("{}: {r}", self.catalog.types()[ti].name))
                }
                Err(Fail::Fatal(e)) => return Err(e),
            }
        }
        Err(PlacementError::Unsatisfiable {
            percentile: p,
            reasons: reasons.join("; "),
        })
    }

    /// Places `k` stripes of `curve`, each in a unit in use when one fits
    /// (only when `k > 1`: phase 1 already failed for the whole tenant),
    /// else in a new unit of type `ti`.
    fn plan_stripes(
        &self,
        curve: &Curve,
        p: Percentile,
        ti: usize,
        k: usize,
        rng: &mut SplitMix64,
    ) -> Result<Plan, Fail> {
        let stripe = if k == 1 {
            curve.clone()
        } else {
            curve.scale(1.0 / k as f64)?
        };
        let ty = &self.catalog.types()[ti];
        let cap = ty.curve(p).expect("type offers p").clone();
        let in_use = self.units.values().filter(|u| u.type_index == ti).count();
        let mut plan = Plan {
            updates: Vec::new(),
            new_units: Vec::new(),
            stripes: Vec::new(),
            rng: rng.clone(),
            next_unit: self.next_unit,
        };
        let mut used: Vec<UnitId> = Vec::new();
        for _ in 0..k {
            if k > 1 {
                let found = self.select(&stripe, p, &used, rng).map_err(Fail::Fatal)?;
                if let Some(upd) = found {
                    used.push(upd.id);
                    plan.stripes.push(Stripe {
                        unit: upd.id,
                        curve: stripe.clone(),
                    });
                    plan.updates.push(upd);
                    continue;
                }
            }
            if let Some(avail) = ty.available {
                if in_use + plan.new_units.len() >= avail as usize {
                    return Err(Fail::Reject(format!(
                        "all {avail} units of it are in use ({k} stripe(s) needed, {} found room in units in use)",
                        plan.updates.len()
                    )));
                }
            }
            if !cap.contains(&stripe) {
                return Err(Fail::Reject("a stripe does not fit an empty unit".into()));
            }
            let uid = UnitId(plan.next_unit);
            plan.next_unit += 1;
            let mut unit = Unit::with(uid, ti, p, cap.clone());
            unit.residual = difference(&cap, &stripe)?;
            unit.grid = grid(&unit.residual, &cap);
            unit.load = stripe.clone();
            used.push(uid);
            plan.stripes.push(Stripe {
                unit: uid,
                curve: stripe.clone(),
            });
            plan.new_units.push(unit);
        }
        Ok(plan)
    }

    /// Phase 1: the unit in use (of percentile `p`, not in `exclude`) that
    /// receives `curve`, with its updated load and residual.
    fn select(
        &self,
        curve: &Curve,
        p: Percentile,
        exclude: &[UnitId],
        rng: &mut SplitMix64,
    ) -> Result<Option<UnitUpdate>, PlacementError> {
        let mut cands: Vec<&Unit> = self
            .units
            .values()
            .filter(|u| u.percentile == p && !exclude.contains(&u.id) && u.residual.contains(curve))
            .collect();
        match self.config.selection {
            Selection::BestFit(metric) => {
                // The tenant on each type's grid, computed once per type.
                let mut per_type: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
                let mut scored: Vec<(f64, &Unit)> = cands
                    .into_iter()
                    .map(|u| {
                        let t = per_type
                            .entry(u.type_index)
                            .or_insert_with(|| grid(curve, &u.capacity));
                        (metric.misfit_vectors(t, &u.grid), u)
                    })
                    .collect();
                scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.id.cmp(&b.1.id)));
                cands = scored.into_iter().map(|(_, u)| u).collect();
            }
            Selection::Random => rng.shuffle(&mut cands),
        }
        for u in cands {
            let load = sum(&u.load, curve)?;
            if !u.capacity.contains(&load) {
                continue; // rounding at the boundary: the exact check wins
            }
            let residual = difference(&u.residual, curve)?;
            return Ok(Some(UnitUpdate {
                id: u.id,
                load,
                residual,
                stripe: curve.clone(),
            }));
        }
        Ok(None)
    }

    fn commit(&mut self, id: TenantId, sla: TenantSla, plan: Plan) {
        for upd in plan.updates {
            let u = self
                .units
                .get_mut(&upd.id)
                .expect("planned on a unit in use");
            u.grid = grid(&upd.residual, &u.capacity);
            u.load = upd.load;
            u.residual = upd.residual;
            u.tenants.push((id, upd.stripe));
        }
        for mut u in plan.new_units {
            u.tenants.push((id, u.load.clone()));
            self.units.insert(u.id, u);
        }
        self.tenants.insert(
            id,
            PlacedTenant {
                sla,
                stripes: plan.stripes,
            },
        );
        self.rng = plan.rng;
        self.next_unit = plan.next_unit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::UnitType;

    fn c(points: &[(f64, f64)]) -> Curve {
        Curve::new(points.to_vec()).unwrap()
    }

    fn unit_type(name: &str, cost: f64, curve: Curve, available: Option<u32>) -> UnitType {
        UnitType {
            name: name.into(),
            description: String::new(),
            cost,
            disks: 1,
            available,
            curves: [(Percentile::P99, curve)].into_iter().collect(),
        }
    }

    fn sla(points: &[(f64, f64)]) -> TenantSla {
        TenantSla {
            curve: c(points),
            percentile: Percentile::P99,
        }
    }

    fn one_type(available: Option<u32>) -> Placer {
        let cat = Catalog::new(
            "",
            vec![unit_type(
                "u",
                1.0,
                c(&[(0.0, 100.0), (10.0, 0.0)]),
                available,
            )],
        )
        .unwrap();
        Placer::new(cat, PlacerConfig::regulator(Metric::Dot))
    }

    #[test]
    fn metrics_prefer_the_aligned_residual() {
        let cap = c(&[(0.0, 100.0), (100.0, 0.0)]);
        // A read-heavy tenant that fits both a read-heavy and a write-heavy
        // residual of similar size.
        let reads = c(&[(0.0, 40.0), (5.0, 35.0), (10.0, 0.0)]);
        let read_room = c(&[(0.0, 60.0), (10.0, 50.0), (20.0, 0.0)]);
        let write_room = c(&[(0.0, 45.0), (60.0, 25.0), (80.0, 0.0)]);
        assert!(read_room.contains(&reads) && write_room.contains(&reads));
        for m in Metric::ALL {
            assert!(
                m.misfit(&reads, &read_room, &cap) < m.misfit(&reads, &write_room, &cap),
                "{m}"
            );
            // An exact fill scores 0.
            assert!(m.misfit(&read_room, &read_room, &cap).abs() < 1e-12, "{m}");
        }
        assert_eq!("l2".parse::<Metric>(), Ok(Metric::L2));
        assert_eq!(
            "cosine".parse::<Metric>().unwrap_err().to_string(),
            "unknown metric \"cosine\": expected dot, l2 or area"
        );
    }

    #[test]
    fn area_metric_matches_hand_computation() {
        let cap = c(&[(0.0, 64.0), (64.0, 0.0)]);
        // Residual = capacity; tenant = the half-size triangle: area 1/4.
        let t = c(&[(0.0, 32.0), (32.0, 0.0)]);
        assert!((Metric::Area.misfit(&t, &cap, &cap) - 0.75).abs() < 1e-12);
        // Dot: t.d / d.d on the grid, computed by hand.
        let d: Vec<f64> = (0..=64).map(|i| (64 - i) as f64 / 64.0).collect();
        let tv: Vec<f64> = (0..=64)
            .map(|i| if i <= 32 { (32 - i) as f64 / 64.0 } else { 0.0 })
            .collect();
        let want = 1.0
            - tv.iter().zip(&d).map(|(a, b)| a * b).sum::<f64>()
                / d.iter().map(|x| x * x).sum::<f64>();
        assert!((Metric::Dot.misfit(&t, &cap, &cap) - want).abs() < 1e-12);
    }

    #[test]
    fn share_and_stripe_count() {
        let u = c(&[(0.0, 100.0), (10.0, 0.0)]);
        assert_eq!(share_and_stripes(&Curve::zero(), &u, 4), Ok((0.0, 1)));
        let (share, k) = share_and_stripes(&c(&[(0.0, 50.0), (5.0, 0.0)]), &u, 4).unwrap();
        assert!((share - 0.5).abs() < 1e-6 && k == 1, "{share} {k}");
        // 2.5 units' worth of reads: 3 stripes.
        let (share, k) = share_and_stripes(&c(&[(0.0, 250.0)]), &u, 4).unwrap();
        assert!((share - 2.5).abs() < 1e-6 && k == 3, "{share} {k}");
        // Exactly 2 units: 2 stripes, not 3.
        let (_, k) = share_and_stripes(&c(&[(0.0, 200.0), (20.0, 0.0)]), &u, 4).unwrap();
        assert_eq!(k, 2);
        let e = share_and_stripes(&c(&[(0.0, 1000.0)]), &u, 4).unwrap_err();
        assert!(e.contains("more than 4 units"), "{e}");
        let e =
            share_and_stripes(&c(&[(0.0, 1.0), (1.0, 0.0)]), &c(&[(0.0, 100.0)]), 4).unwrap_err();
        assert!(e.contains("no writes"), "{e}");
    }

    #[test]
    fn best_fit_fills_then_opens() {
        let mut p = one_type(None);
        // Four quarter-size tenants fill one unit exactly.
        for i in 0..4 {
            let s = p
                .place(TenantId(i), sla(&[(0.0, 25.0), (2.5, 0.0)]))
                .unwrap();
            assert_eq!(s.len(), 1);
            assert_eq!(s[0].unit, UnitId(0));
        }
        assert_eq!(p.usage().units, 1);
        // The fifth needs a new unit.
        let s = p
            .place(TenantId(4), sla(&[(0.0, 25.0), (2.5, 0.0)]))
            .unwrap();
        assert_eq!(s[0].unit, UnitId(1));
        p.check().unwrap();
        let usage = p.usage();
        assert_eq!((usage.units, usage.disks, usage.cost), (2, 2, 2.0));
        assert_eq!(usage.per_type["u"], 2);
    }

    #[test]
    fn stripes_a_tenant_larger_than_a_unit() {
        let mut p = one_type(None);
        let s = p
            .place(TenantId(1), sla(&[(0.0, 250.0), (5.0, 200.0), (25.0, 0.0)]))
            .unwrap();
        assert_eq!(s.len(), 3);
        let units: Vec<UnitId> = s.iter().map(|s| s.unit).collect();
        assert_eq!(units, [UnitId(0), UnitId(1), UnitId(2)]);
        let third = c(&[(0.0, 250.0), (5.0, 200.0), (25.0, 0.0)])
            .scale(1.0 / 3.0)
            .unwrap();
        assert!(s.iter().all(|s| s.curve == third));
        p.check().unwrap();
        // Stripes use room in units in use first, each on a distinct unit.
        let s = p
            .place(TenantId(2), sla(&[(0.0, 30.0), (1.0, 0.0)]))
            .unwrap();
        assert_eq!(s.len(), 1);
        p.check().unwrap();
    }

    #[test]
    fn least_cost_picks_the_type_that_suits_the_tenant() {
        let reads = unit_type("reads", 1.0, c(&[(0.0, 1000.0), (10.0, 0.0)]), None);
        let writes = unit_type("writes", 2.0, c(&[(0.0, 100.0), (100.0, 0.0)]), None);
        let cat = Catalog::new("", vec![reads, writes]).unwrap();
        let mut p = Placer::new(cat.clone(), PlacerConfig::regulator(Metric::L2));
        p.place(TenantId(0), sla(&[(0.0, 100.0)])).unwrap();
        p.place(TenantId(1), sla(&[(0.0, 10.0), (50.0, 0.0)]))
            .unwrap();
        let usage = p.usage();
        assert_eq!(usage.per_type.get("reads"), Some(&1));
        assert_eq!(usage.per_type.get("writes"), Some(&1));
        // The naive operator opens the cheap type for both: the write-heavy
        // tenant needs 5 stripes of it, and the first does not fit next to
        // the reader (who may read 100 while the stripe writes 10).
        let mut cfg = PlacerConfig::regulator(Metric::L2);
        cfg.new_unit = NewUnitPolicy::Cheapest;
        let mut q = Placer::new(cat, cfg);
        q.place(TenantId(0), sla(&[(0.0, 100.0)])).unwrap();
        q.place(TenantId(1), sla(&[(0.0, 10.0), (50.0, 0.0)]))
            .unwrap();
        assert_eq!(q.usage().per_type.get("reads"), Some(&6), "{:?}", q.usage());
        assert_eq!(q.tenant(TenantId(1)).unwrap().stripes.len(), 5);
        q.check().unwrap();
    }

    #[test]
    fn rejects_with_reasons_and_changes_nothing() {
        let mut p = one_type(Some(2));
        p.place(TenantId(0), sla(&[(0.0, 60.0), (6.0, 0.0)]))
            .unwrap();
        let before = p.clone();
        // Needs 3 stripes; only one more unit exists (and the one in use
        // has room for one stripe of 60/3 = 20... so two new units needed).
        let e = p
            .place(TenantId(1), sla(&[(0.0, 260.0), (26.0, 0.0)]))
            .unwrap_err();
        assert!(
            matches!(e, PlacementError::Unsatisfiable { .. })
                && e.to_string().contains("all 2 units of it are in use"),
            "{e}"
        );
        assert_eq!(p, before, "a rejected tenant must leave no trace");
        // Other rejections.
        let e = p
            .place(TenantId(2), sla(&[(0.0, 1e6)]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("stripe limit"), "{e}");
        let e = p
            .place(
                TenantId(3),
                TenantSla {
                    curve: c(&[(0.0, 1.0)]),
                    percentile: Percentile::P95,
                },
            )
            .unwrap_err();
        assert_eq!(e, PlacementError::NoUnitType(Percentile::P95));
        assert_eq!(
            e.to_string(),
            "SLA cannot be met: no storage-unit type offers a p95 curve"
        );
        let e = p
            .place(TenantId(4), sla(&[(0.0, 10.0), (1.0, 2.0), (4.0, 0.0)]))
            .unwrap_err();
        assert_eq!(e, PlacementError::NotConcave);
        assert_eq!(
            p.place(TenantId(0), sla(&[(0.0, 1.0)])).unwrap_err(),
            PlacementError::Duplicate(TenantId(0))
        );
        assert_eq!(p, before);
    }

    #[test]
    fn removal_restores_the_residual() {
        let mut p = one_type(None);
        let a = sla(&[(0.0, 30.0), (2.0, 20.0), (3.0, 0.0)]);
        let b = sla(&[(0.0, 20.0), (4.0, 0.0)]);
        p.place(TenantId(0), a.clone()).unwrap();
        let after_a = p.unit(UnitId(0)).unwrap().residual().clone();
        p.place(TenantId(1), b).unwrap();
        assert_eq!(p.remove(TenantId(1)).unwrap().percentile, Percentile::P99);
        let r = p.unit(UnitId(0)).unwrap().residual();
        assert!(
            r.contains(&after_a) && after_a.contains(r),
            "{r:?} vs {after_a:?}"
        );
        p.check().unwrap();
        // The last tenant leaving releases the unit.
        assert_eq!(p.remove(TenantId(0)).unwrap(), a);
        assert_eq!(p.usage().units, 0);
        assert_eq!(
            p.remove(TenantId(0)).unwrap_err(),
            PlacementError::UnknownTenant(TenantId(0))
        );
        p.check().unwrap();
    }

    #[test]
    fn random_selection_is_seeded() {
        let run = |seed: u64| {
            let mut cfg = PlacerConfig::regulator(Metric::Dot);
            cfg.selection = Selection::Random;
            cfg.new_unit = NewUnitPolicy::Random;
            cfg.seed = seed;
            let cat = Catalog::new(
                "",
                vec![unit_type("u", 1.0, c(&[(0.0, 100.0), (10.0, 0.0)]), None)],
            )
            .unwrap();
            let mut p = Placer::new(cat, cfg);
            // Two units in use, then small tenants that fit either.
            for i in 0..62 {
                let x = if i < 2 { 60.0 } else { 1.0 };
                p.place(TenantId(i), sla(&[(0.0, x), (x / 10.0, 0.0)]))
                    .unwrap();
            }
            p.check().unwrap();
            p.tenants()
                .map(|(_, t)| t.stripes[0].unit.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }
}
