//! Storage-unit types: what the placement engine can open, and what each
//! costs.
//!
//! Regulator (§4) describes both tenants and storage units by an
//! `<SLA curve, read tail-latency requirement>` tuple, and gives each *type*
//! of storage unit a cost `P` (price, power, …). Real fleets are
//! heterogeneous, and the same device offers a different curve at each
//! percentile, so a [`UnitType`] carries one curve per [`Percentile`] it can
//! guarantee, plus its cost and the number of physical disks it occupies
//! (a redundant array built with Flash on Rails, as the paper does for
//! P99.9, is one unit made of several disks).
//!
//! A [`Catalog`] is read from TOML or JSON (`deny_unknown_fields`, so a typo
//! is an error, not a silently ignored field). Curves are given inline as
//! `[[w, r], …]` breakpoints, exactly the JSON form in which
//! [`crate::Curve`] serialises, so a curve measured by
//! `flexssd sla measure-device` can be pasted in as it is.
//!
//! [`Catalog::builtin`] is the documented default in `default_units.toml`
//! beside this file: illustrative numbers, not measurements (the file says
//! where each shape comes from).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Curve;

/// The read tail-latency percentile of an SLA: the latency bound (fixed per
/// class by the operator, e.g. 500 µs) must hold for this fraction of reads.
///
/// Serialised as `"p95"`, `"p99"`, `"p99.9"`; parsing also accepts `P95`,
/// `95`, `p999`, `99.9`, … (case-insensitive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Percentile {
    /// 95th percentile.
    #[serde(rename = "p95", alias = "P95")]
    P95,
    /// 99th percentile.
    #[serde(rename = "p99", alias = "P99")]
    P99,
    /// 99.9th percentile.
    #[serde(rename = "p99.9", alias = "p999", alias = "P99.9", alias = "P999")]
    P999,
}

impl Percentile {
    /// Every percentile, loosest first.
    pub const ALL: [Percentile; 3] = [Percentile::P95, Percentile::P99, Percentile::P999];

    /// The canonical name: `p95`, `p99` or `p99.9`.
    pub fn name(self) -> &'static str {
        match self {
            Percentile::P95 => "p95",
            Percentile::P99 => "p99",
            Percentile::P999 => "p99.9",
        }
    }

    /// The quantile as a fraction (0.95, 0.99, 0.999).
    pub fn quantile(self) -> f64 {
        match self {
            Percentile::P95 => 0.95,
            Percentile::P99 => 0.99,
            Percentile::P999 => 0.999,
        }
    }
}

impl fmt::Display for Percentile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that is not a percentile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown percentile {0:?}: expected p95, p99 or p99.9")]
pub struct ParsePercentileError(pub String);

impl FromStr for Percentile {
    type Err = ParsePercentileError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_prefix('p').unwrap_or(&t);
        match t {
            "95" => Ok(Percentile::P95),
            "99" => Ok(Percentile::P99),
            "99.9" | "999" => Ok(Percentile::P999),
            _ => Err(ParsePercentileError(s.to_string())),
        }
    }
}

/// One type of storage unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitType {
    /// Unique name (referred to in results).
    pub name: String,
    /// Free text: what the unit is and where its numbers come from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Cost of one unit (`P` in the paper), in any consistent unit; > 0.
    pub cost: f64,
    /// Physical disks one unit occupies (default 1).
    #[serde(default = "one")]
    pub disks: u32,
    /// How many units of this type exist; absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<u32>,
    /// The unit's SLA curve at each percentile it can guarantee, in 4 KiB
    /// I/Os per second (`[[w, r], …]`). Must be concave (the SLA
    /// arithmetic is exact on concave curves).
    pub curves: BTreeMap<Percentile, Curve>,
}

fn one() -> u32 {
    1
}

impl UnitType {
    /// The unit's curve at `p`, if it offers that percentile.
    pub fn curve(&self, p: Percentile) -> Option<&Curve> {
        self.curves.get(&p)
    }
}

/// Why a catalogue was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CatalogError {
    /// The text is not valid TOML / JSON for a catalogue.
    #[error("cannot parse the unit catalogue as {format}: {message}")]
    Parse {
        /// "TOML" or "JSON".
        format: &'static str,
        /// The parser's message (with line and column where it gives one).
        message: String,
    },
    /// No unit types.
    #[error("the unit catalogue has no unit types")]
    Empty,
    /// A unit type without a name.
    #[error("unit type #{index} has an empty name")]
    EmptyName {
        /// Position in the catalogue (0-based).
        index: usize,
    },
    /// Two types share a name.
    #[error("unit type name {0:?} is used twice")]
    DuplicateName(String),
    /// Cost not finite and positive.
    #[error("unit type {name:?}: cost {cost} is not finite and positive")]
    BadCost {
        /// The type.
        name: String,
        /// The rejected cost.
        cost: f64,
    },
    /// `disks = 0`.
    #[error("unit type {0:?}: disks must be at least 1")]
    ZeroDisks(String),
    /// No curves at all.
    #[error("unit type {0:?} has no curves")]
    NoCurves(String),
    /// A curve that is not concave.
    #[error(
        "unit type {name:?}: the {percentile} curve is not concave (the SLA arithmetic needs concave curves; \
         use the upper convex hull of the measured points, or a concave curve below them)"
    )]
    NotConcave {
        /// The type.
        name: String,
        /// Which curve.
        percentile: Percentile,
    },
    /// A curve that allows nothing.
    #[error("unit type {name:?}: the {percentile} curve allows no reads and no writes")]
    ZeroCurve {
        /// The type.
        name: String,
        /// Which curve.
        percentile: Percentile,
    },
}

/// The storage-unit types the placement engine may open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// Free text about the catalogue as a whole.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The unit types, in preference order for ties.
    pub unit: Vec<UnitType>,
}

/// The embedded default catalogue (see the comments in the file).
pub const DEFAULT_UNITS_TOML: &str = include_str!("default_units.toml");

impl Catalog {
    /// A validated catalogue of `types`.
    pub fn new(description: impl Into<String>, types: Vec<UnitType>) -> Result<Self, CatalogError> {
        let c = Catalog {
            description: description.into(),
            unit: types,
        };
        c.validate()?;
        Ok(c)
    }

    /// Parses and validates a TOML catalogue (`[[unit]]` tables).
    pub fn from_toml_str(text: &str) -> Result<Self, CatalogError> {
        let c: Catalog = toml::from_str(text).map_err(|e| CatalogError::Parse {
            format: "TOML",
            message: e.to_string().trim_end().to_string(),
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Parses and validates a JSON catalogue (`{"unit": [...]}`).
    pub fn from_json_str(text: &str) -> Result<Self, CatalogError> {
        let c: Catalog = serde_json::from_str(text).map_err(|e| CatalogError::Parse {
            format: "JSON",
            message: e.to_string(),
        })?;
        c.validate()?;
        Ok(c)
    }

    /// The embedded default catalogue ([`DEFAULT_UNITS_TOML`]).
    pub fn builtin() -> Self {
        Catalog::from_toml_str(DEFAULT_UNITS_TOML)
            .expect("the embedded default catalogue is valid (checked by a unit test)")
    }

    /// Checks the rules listed on [`CatalogError`].
    pub fn validate(&self) -> Result<(), CatalogError> {
        if self.unit.is_empty() {
            return Err(CatalogError::Empty);
        }
        let mut names = std::collections::BTreeSet::new();
        for (index, t) in self.unit.iter().enumerate() {
            if t.name.trim().is_empty() {
                return Err(CatalogError::EmptyName { index });
            }
            if !names.insert(t.name.as_str()) {
                return Err(CatalogError::DuplicateName(t.name.clone()));
            }
            if !t.cost.is_finite() || t.cost <= 0.0 {
                return Err(CatalogError::BadCost {
                    name: t.name.clone(),
                    cost: t.cost,
                });
            }
            if t.disks == 0 {
                return Err(CatalogError::ZeroDisks(t.name.clone()));
            }
            if t.curves.is_empty() {
                return Err(CatalogError::NoCurves(t.name.clone()));
            }
            for (&percentile, c) in &t.curves {
                if !c.is_concave() {
                    return Err(CatalogError::NotConcave {
                        name: t.name.clone(),
                        percentile,
                    });
                }
                if c.w_max() == 0.0 && c.points()[0].1 == 0.0 {
                    return Err(CatalogError::ZeroCurve {
                        name: t.name.clone(),
                        percentile,
                    });
                }
            }
        }
        Ok(())
    }

    /// The unit types, in file order.
    pub fn types(&self) -> &[UnitType] {
        &self.unit
    }

    /// Indices of the types that offer percentile `p`.
    pub fn offering(&self, p: Percentile) -> impl Iterator<Item = usize> + '_ {
        self.unit
            .iter()
            .enumerate()
            .filter(move |(_, t)| t.curves.contains_key(&p))
            .map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_parses_and_prints() {
        for (s, p) in [
            ("p95", Percentile::P95),
            ("P95", Percentile::P95),
            ("95", Percentile::P95),
            ("p99", Percentile::P99),
            ("p99.9", Percentile::P999),
            ("P999", Percentile::P999),
            ("99.9", Percentile::P999),
        ] {
            assert_eq!(s.parse::<Percentile>(), Ok(p), "{s}");
        }
        let e = "p90".parse::<Percentile>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown percentile \"p90\": expected p95, p99 or p99.9"
        );
        assert_eq!(Percentile::P999.to_string(), "p99.9");
        assert_eq!(
            serde_json::to_string(&Percentile::P999).unwrap(),
            "\"p99.9\""
        );
        let back: Percentile = serde_json::from_str("\"p999\"").unwrap();
        assert_eq!(back, Percentile::P999);
        assert!(Percentile::P95 < Percentile::P999);
        assert_eq!(Percentile::P99.quantile(), 0.99);
    }

    #[test]
    fn builtin_catalogue_is_valid_and_round_trips() {
        let c = Catalog::builtin();
        assert!(c.types().len() >= 2);
        assert_eq!(c.offering(Percentile::P95).count(), 1);
        assert!(c.offering(Percentile::P999).count() >= 2);
        for t in c.types() {
            assert!(!t.description.is_empty(), "{} needs a description", t.name);
        }
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(Catalog::from_json_str(&json).unwrap(), c);
    }

    const ONE: &str = r#"
[[unit]]
name = "a"
cost = 2
[unit.curves]
p95 = [[0, 100], [10, 0]]
"p99.9" = [[0, 50]]
"#;

    #[test]
    fn parses_toml_with_defaults() {
        let c = Catalog::from_toml_str(ONE).unwrap();
        let t = &c.types()[0];
        assert_eq!((t.cost, t.disks, t.available), (2.0, 1, None));
        assert_eq!(t.curve(Percentile::P95).unwrap().w_max(), 10.0);
        assert_eq!(t.curve(Percentile::P999).unwrap().points(), &[(0.0, 50.0)]);
        assert!(t.curve(Percentile::P99).is_none());
    }

    /// A measured curve in `sla::Curve`'s own JSON form can be used inline.
    #[test]
    fn json_accepts_serialised_curves() {
        let measured = Curve::new(vec![(0.0, 300.0), (20.0, 250.0), (30.0, 0.0)]).unwrap();
        let text = format!(
            r#"{{"unit": [{{"name": "emu", "cost": 1, "curves": {{"p99": {}}}}}]}}"#,
            serde_json::to_string(&measured).unwrap()
        );
        let c = Catalog::from_json_str(&text).unwrap();
        assert_eq!(c.types()[0].curve(Percentile::P99), Some(&measured));
    }

    fn err(text: &str) -> String {
        Catalog::from_toml_str(text).unwrap_err().to_string()
    }

    #[test]
    fn rejects_bad_catalogues() {
        assert!(err("unit = []").contains("no unit types"));
        let e = err(&ONE.replace("cost = 2", "cost = 2\ncolour = \"red\""));
        assert!(
            e.contains("TOML") && e.contains("unknown field `colour`"),
            "{e}"
        );
        let e = err(&ONE.replace("p95 =", "p90 ="));
        assert!(e.contains("unknown variant `p90`"), "{e}");
        let e = err(&ONE.replace("cost = 2", "cost = -1"));
        assert!(e.contains("cost -1 is not finite and positive"), "{e}");
        let e = err(&ONE.replace("cost = 2", "cost = 2\ndisks = 0"));
        assert!(e.contains("disks must be at least 1"), "{e}");
        let e = err(&ONE.replace("[[0, 100], [10, 0]]", "[[0, 100], [1, 10], [10, 0]]"));
        assert!(e.contains("p95 curve is not concave"), "{e}");
        let e = err(&ONE.replace("[[0, 100], [10, 0]]", "[[0, 100], [10, 200]]"));
        assert!(e.contains("larger read throughput"), "{e}");
        let e = err(&ONE.replace("[[0, 50]]", "[[0, 0]]"));
        assert!(e.contains("allows no reads and no writes"), "{e}");
        let e = err(&format!("{ONE}\n{ONE}"));
        assert!(e.contains("\"a\" is used twice"), "{e}");
        let e = err("[[unit]]\nname = \"x\"\ncost = 1\ncurves = {}\n");
        assert!(e.contains("has no curves"), "{e}");
        let e = Catalog::from_json_str("{\"unit\": [")
            .unwrap_err()
            .to_string();
        assert!(e.contains("JSON"), "{e}");
    }
}
