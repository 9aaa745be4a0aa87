//! The `[elastic]` configuration: which policy, the disk sizes and the paper's
//! constants (§III-C, §IV-B). Defaults are the paper's: INIT 1 GB, INC 2 GB,
//! TMIN 1 s, TMAX 5 s, AD 10 s, RD 60 s, a 5-second reactive probe and an 8 GB
//! pre-allocated disk. Sizes are bytes or strings with a K/M/G/T suffix (powers of
//! 1024); times are seconds.

use clock::{Nanos, SEC};
use serde::{Deserialize, Deserializer, Serialize};

use crate::{Error, Result};

/// `FromStr` for a config enum from the names it is written with (as serde
/// spells them in TOML), and an error naming the choices for any other.
macro_rules! from_names {
    ($t:ty, $what:literal, $($name:literal => $v:expr,)+) => {
        impl std::str::FromStr for $t {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                match s {
                    $($name => Ok($v),)+
                    _ => Err(Error::Config(format!(
                        "unknown {} {s:?} ({})",
                        $what,
                        one_of(&[$($name),+])
                    ))),
                }
            }
        }
    };
}

/// `a`, `a or b`, `a, b or c`.
fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Which decision policy drives the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// The paper's adaptive predictor and controller (Algorithms 1 and 2),
    /// "predictive-addrm".
    #[default]
    Predictive,
    /// §IV-B 1: one large disk of `prealloc` bytes, never changed.
    Prealloc,
    /// §IV-B 2: add an increment when free space drops below the reserve.
    ReactiveAdd,
    /// §IV-B 3: reactive-add, and remove the last added disk when free space exceeds
    /// reserve plus increment.
    ReactiveAddrm,
}

impl PolicyKind {
    /// Every policy, in the order the experiments report them.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::Prealloc,
        PolicyKind::ReactiveAdd,
        PolicyKind::ReactiveAddrm,
        PolicyKind::Predictive,
    ];

    /// The policy's name as written in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Predictive => "predictive",
            PolicyKind::Prealloc => "prealloc",
            PolicyKind::ReactiveAdd => "reactive-add",
            PolicyKind::ReactiveAddrm => "reactive-addrm",
        }
    }
}

from_names!(PolicyKind, "policy",
    "predictive" => PolicyKind::Predictive,
    "predictive-addrm" => PolicyKind::Predictive,
    "prealloc" => PolicyKind::Prealloc,
    "reactive-add" => PolicyKind::ReactiveAdd,
    "reactive-addrm" => PolicyKind::ReactiveAddrm,
);

/// What Algorithm 2 adds to used space for the bytes written during its history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum WrittenCorrection {
    /// The paper's line 21 as printed: every byte written during the history
    /// (`wb_max - wb_min`), even the part that used space already shows.
    Window,
    /// Ours: the bytes the file system reports as promised to writes but not
    /// allocated yet ([`crate::FsStats::pending`]; btrfs's `bytes_may_use`),
    /// and where it reports none, [`WrittenCorrection::Estimated`]. The
    /// paper's term stands in for exactly these bytes ("new data that was not
    /// flushed yet"); measured, it counts neither bytes already in `used` nor
    /// ones written and deleted within the history, which the estimate takes
    /// for pending.
    #[default]
    Pending,
    /// The bytes written during the history less what used space grew over it,
    /// at least 0, whatever the file system reports. Under flat usage (the case
    /// the paper argues from: writes that may not be flushed yet) it is the
    /// paper's term; under growing usage it does not count the same bytes
    /// twice, once in `used` and once as pending.
    Estimated,
}

from_names!(WrittenCorrection, "written correction",
    "window" => WrittenCorrection::Window,
    "pending" => WrittenCorrection::Pending,
    "estimated" => WrittenCorrection::Estimated,
);

/// Which probes Algorithm 2's regression of written bytes (the write trend it
/// extrapolates `future` ahead) is fitted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Trend {
    /// The paper's line 16: the whole history. While used space stays flat the
    /// history is never trimmed, so a write burst that has ended keeps its
    /// slope in the fit, and the prediction above usage, for as long.
    History,
    /// Ours: only the probes within the window, the span the controller looks
    /// back over; after a burst ends the trend falls to 0 within one window.
    #[default]
    Window,
}

from_names!(Trend, "trend",
    "history" => Trend::History,
    "window" => Trend::Window,
);

/// Over what span Algorithm 2's short-term rate (line 15) is measured before
/// it is extrapolated `future` ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ShortTerm {
    /// The paper's line 15: between the last two probes. At TMIN the span is
    /// a fraction of `future` (1 s against 12 s at the paper's constants), so
    /// a one-probe burst is extrapolated twelvefold.
    Probe,
    /// Ours: over the last `future` of the history (all of it where it is
    /// shorter): look back as far as the prediction looks ahead. A sustained
    /// rate reads the same; a burst counts once, not scaled up.
    #[default]
    Horizon,
}

from_names!(ShortTerm, "short-term span",
    "probe" => ShortTerm::Probe,
    "horizon" => ShortTerm::Horizon,
);

/// Where the predictive policy's AD (the time an add takes, part of how far
/// ahead it predicts: `2·next + AD`) comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AddDelay {
    /// The paper's: `add_delay_s`, a constant "set to a conservative value"
    /// (§III-C), for the whole run.
    #[default]
    Fixed,
    /// Ours: `add_delay_s` until the volume has added a disk, then twice the
    /// slowest add it has seen (an add blocks until the disk is in the file
    /// system, so that is the delay the look-ahead must cover). Adds slower
    /// than `add_delay_s` raise it; faster ones stop the policy allocating
    /// for a delay the volume never has.
    Measured,
}

from_names!(AddDelay, "add delay",
    "fixed" => AddDelay::Fixed,
    "measured" => AddDelay::Measured,
);

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parameters of the elastic controller (the `[elastic]` section).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ElasticConfig {
    /// Decision policy.
    pub policy: PolicyKind,
    /// INIT: size of the initial disk, bytes.
    #[serde(deserialize_with = "size")]
    pub init: u64,
    /// INC: size of every added disk, bytes.
    #[serde(deserialize_with = "size")]
    pub increment: u64,
    /// R: the preventive reserve, bytes.
    #[serde(deserialize_with = "size")]
    pub reserve: u64,
    /// Size of the single disk of the `prealloc` policy, bytes.
    #[serde(deserialize_with = "size")]
    pub prealloc: u64,
    /// TMIN: finest probing interval, seconds.
    pub tmin_s: f64,
    /// TMAX: coarsest probing interval, seconds.
    pub tmax_s: f64,
    /// AD: the (conservative) time an add takes, seconds.
    pub add_delay_s: f64,
    /// Whether AD stays `add_delay_s` (`fixed`, the paper's) or follows the
    /// volume's own adds once it has made one (`measured`, ours).
    pub add_delay: AddDelay,
    /// RD: time without uncertainty before a removal is allowed, seconds.
    pub remove_delay_s: f64,
    /// Fixed probing interval of the reactive baselines (§IV-B: 5 s), seconds.
    pub reactive_interval_s: f64,
    /// "Under I/O pressure": read plus written bytes per second since the previous
    /// probe at or above this. The paper gives no number; 8 MiB/s is ours.
    #[serde(deserialize_with = "size")]
    pub io_pressure_bps: u64,
    /// Ours, not the paper's: a prediction exceeding usage by no more than
    /// `max(R, uncertainty_floor)` is not "uncertain". With R = 0 the paper's test
    /// `pred - used > R` fires on any write at all — the file system's own periodic
    /// commits write a few KiB — so an idle volume never became removable.
    #[serde(deserialize_with = "size")]
    pub uncertainty_floor: u64,
    /// How the predictor counts recent writes not yet visible in used space:
    /// `window` (the paper's Algorithm 2 as printed), `pending` (ours, the
    /// default: what the file system reports, else as `estimated`) or
    /// `estimated` (writes less the growth of used space over the same
    /// history).
    pub written_correction: WrittenCorrection,
    /// Which probes the predictor's write trend is fitted to: `history` (the
    /// paper's Algorithm 2 as printed) or `window` (ours, the default).
    pub trend: Trend,
    /// Over what span the predictor's short-term rate is measured: `horizon`
    /// (ours, the default: as far back as the prediction looks ahead) or
    /// `probe` (the paper's: the last two probes).
    pub short_term: ShortTerm,
    /// Most disks the pool may hold (a guard against runaway growth), 0 = unlimited.
    pub max_disks: u32,
}

impl Default for ElasticConfig {
    fn default() -> Self {
        ElasticConfig {
            policy: PolicyKind::Predictive,
            init: 1 << 30,
            increment: 2 << 30,
            reserve: 0,
            prealloc: 8 << 30,
            tmin_s: 1.0,
            tmax_s: 5.0,
            add_delay_s: 10.0,
            add_delay: AddDelay::Fixed,
            remove_delay_s: 60.0,
            reactive_interval_s: 5.0,
            io_pressure_bps: 8 << 20,
            uncertainty_floor: 4 << 20,
            written_correction: WrittenCorrection::Pending,
            trend: Trend::Window,
            short_term: ShortTerm::Horizon,
            max_disks: 64,
        }
    }
}

/// The shortest probing interval (`tmin_s`, `tmax_s`, `reactive_interval_s`):
/// 1 ms. A probe reads the file system's usage, which takes about that long;
/// a shorter interval (say `--time-scale 1e-12`) only makes a replay step
/// through the trace nanosecond by nanosecond.
pub const MIN_INTERVAL_S: f64 = 0.001;

/// The longest time the configuration and a replay deal in: 366 days, in
/// seconds. Intervals and delays beyond it are mistakes (units), and times in
/// nanoseconds stay far from `u64::MAX` (584 years), so that no sum of them
/// wraps.
pub const MAX_TIME_S: f64 = 366.0 * 24.0 * 3600.0;

fn secs(s: f64) -> Nanos {
    (s * SEC as f64).round() as Nanos
}

impl ElasticConfig {
    /// Parses a TOML `[elastic]` table's body (the keys only).
    pub fn from_toml(text: &str) -> Result<Self> {
        let c: ElasticConfig = toml::from_str(text)?;
        c.validate()?;
        Ok(c)
    }

    /// Reads the `[elastic]` table of a TOML document (other tables are ignored, so it
    /// can live in the daemon's config file); no table means the defaults.
    pub fn from_document(text: &str) -> Result<Self> {
        #[derive(Deserialize)]
        struct Doc {
            elastic: Option<ElasticConfig>,
        }
        let d: Doc = toml::from_str(text)?;
        let c = d.elastic.unwrap_or_default();
        c.validate()?;
        Ok(c)
    }

    /// Checks that the values make sense together.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.init == 0 || self.increment == 0 || self.prealloc == 0 {
            return bad("init, increment and prealloc must be more than 0 bytes".into());
        }
        for (n, v) in [
            ("tmin_s", self.tmin_s),
            ("tmax_s", self.tmax_s),
            ("reactive_interval_s", self.reactive_interval_s),
        ] {
            if !(v.is_finite() && (MIN_INTERVAL_S..=MAX_TIME_S).contains(&v)) {
                return bad(format!(
                    "{n} must be from {MIN_INTERVAL_S} to {MAX_TIME_S} seconds, not {v}"
                ));
            }
        }
        for (n, v) in [
            ("add_delay_s", self.add_delay_s),
            ("remove_delay_s", self.remove_delay_s),
        ] {
            if !(v.is_finite() && (0.0..=MAX_TIME_S).contains(&v)) {
                return bad(format!(
                    "{n} must be from 0 to {MAX_TIME_S} seconds, not {v}"
                ));
            }
        }
        if self.tmin_s > self.tmax_s {
            return bad(format!(
                "tmin_s ({}) must not exceed tmax_s ({})",
                self.tmin_s, self.tmax_s
            ));
        }
        Ok(())
    }

    /// TMIN in nanoseconds.
    pub fn tmin(&self) -> Nanos {
        secs(self.tmin_s)
    }
    /// TMAX in nanoseconds.
    pub fn tmax(&self) -> Nanos {
        secs(self.tmax_s)
    }
    /// AD in nanoseconds.
    pub fn add_delay(&self) -> Nanos {
        secs(self.add_delay_s)
    }
    /// RD in nanoseconds.
    pub fn remove_delay(&self) -> Nanos {
        secs(self.remove_delay_s)
    }
    /// The reactive baselines' probing interval in nanoseconds.
    pub fn reactive_interval(&self) -> Nanos {
        secs(self.reactive_interval_s)
    }
    /// Size of the first disk under this config's policy.
    pub fn first_disk(&self) -> u64 {
        match self.policy {
            PolicyKind::Prealloc => self.prealloc,
            _ => self.init,
        }
    }
}

/// Parses `1G`, `512M`, `4096` (powers of 1024).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        None => (t, 1u64),
        Some((i, _)) => {
            let mul = match t[i..].to_ascii_uppercase().trim_end_matches(['B', 'I']) {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                u => return Err(format!("invalid size {s:?}: unknown unit {u:?}")),
            };
            (&t[..i], mul)
        }
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("invalid size {s:?}: not a number"))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(format!("invalid size {s:?}"));
    }
    Ok((v * mul as f64).round() as u64)
}

fn size<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum S {
        N(u64),
        T(String),
    }
    match S::deserialize(d)? {
        S::N(n) => Ok(n),
        S::T(t) => parse_size(&t).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_papers() {
        let c = ElasticConfig::default();
        assert_eq!(c.init, 1 << 30);
        assert_eq!(c.increment, 2 << 30);
        assert_eq!(c.tmin(), SEC);
        assert_eq!(c.tmax(), 5 * SEC);
        assert_eq!(c.add_delay(), 10 * SEC);
        assert_eq!(c.remove_delay(), 60 * SEC);
        assert_eq!(ElasticConfig::from_toml("").unwrap(), c);
    }

    #[test]
    fn parses_sizes_and_policies() {
        let c = ElasticConfig::from_toml(
            "policy = 'reactive-addrm'\ninit = '256M'\nincrement = 536870912\nreserve = '0.5G'",
        )
        .unwrap();
        assert_eq!(c.policy, PolicyKind::ReactiveAddrm);
        assert_eq!(c.init, 256 << 20);
        assert_eq!(c.increment, 512 << 20);
        assert_eq!(c.reserve, 512 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(
            "prealloc".parse::<PolicyKind>().unwrap(),
            PolicyKind::Prealloc
        );
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        let e = ElasticConfig::from_toml("polcy = 'x'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field"), "{e}");
        let e = ElasticConfig::from_toml("tmin_s = 9.0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tmin_s"), "{e}");
        let e = ElasticConfig::from_toml("init = '1X'")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown unit"), "{e}");
        assert!("fast".parse::<PolicyKind>().is_err());
        let e = ElasticConfig::from_document("[api]\nx = 1\n[elastic]\ntmax_s = -1.0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tmax_s"), "{e}");
        let c = ElasticConfig::from_document("[elastic]\nreserve = '1G'").unwrap();
        assert_eq!(c.reserve, 1 << 30);
        let e = ElasticConfig::from_toml("short_term = 'last'")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("short_term") || e.contains("unknown variant"),
            "{e}"
        );
        let e = "last".parse::<ShortTerm>().unwrap_err().to_string();
        assert!(e.contains("probe or horizon"), "{e}");
        let e = "x".parse::<AddDelay>().unwrap_err().to_string();
        assert!(
            e.contains("unknown add delay \"x\" (fixed or measured)"),
            "{e}"
        );
        let e = "x".parse::<PolicyKind>().unwrap_err().to_string();
        assert!(
            e.contains("prealloc, reactive-add or reactive-addrm)"),
            "{e}"
        );
        assert_eq!(
            "predictive-addrm".parse::<PolicyKind>().unwrap(),
            PolicyKind::Predictive
        );
        let c = ElasticConfig::from_toml("short_term = 'horizon'").unwrap();
        assert_eq!(c.short_term, ShortTerm::Horizon);
    }

    #[test]
    fn intervals_and_delays_stay_in_range() {
        for (key, v) in [
            ("tmin_s", "1e-12"),
            ("reactive_interval_s", "0.0001"),
            ("tmax_s", "1e30"),
            ("add_delay_s", "1e30"),
            ("remove_delay_s", "nan"),
            ("add_delay_s", "-1.0"),
        ] {
            let e = ElasticConfig::from_toml(&format!("{key} = {v}"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("{key} must be from")),
                "{key} = {v}: {e}"
            );
        }
        let c = ElasticConfig::from_toml("tmin_s = 0.001\ntmax_s = 31622400.0\nadd_delay_s = 0.0")
            .unwrap();
        assert_eq!(c.tmin(), 1_000_000);
    }
}
