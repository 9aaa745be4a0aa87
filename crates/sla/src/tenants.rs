//! Tenant SLA curves for the placement experiments: synthetic workload
//! groups, and curves derived from block-trace throughput samples.
//!
//! The paper (§3) obtains a tenant's SLA curve by sampling its read and write
//! throughput once a second and taking the upper convex hull of the samples
//! ([`Curve::from_samples`]); §6.1 then "randomly generates" read-intensive,
//! write-intensive and mixed tenants without saying how. Both routes are
//! here, and both end in the same hull:
//!
//! * [`synthetic_curve`] draws per-second samples from a documented,
//!   synthetic distribution for each [`Workload`] class. It is a model, not
//!   data.
//! * [`throughput_samples`] turns a stream of block requests (from any trace
//!   format, read by the caller — this crate does no I/O) into per-window
//!   `(write, read)` throughput samples. The traces at hand are short
//!   samples from production systems with arbitrary absolute rates, so
//!   [`scale_to_peak`] rescales a trace curve to a drawn size while keeping
//!   its shape (the read/write mix over time, which is what placement is
//!   about).
//!
//! Throughput is in 4 KiB I/Os per second, the unit of the device curves
//! (measured with 4 KiB random I/O, the worst case): a request of `len`
//! bytes counts as `ceil(len / 4096)` I/Os.

use std::fmt;
use std::str::FromStr;

use rng::SplitMix64;
use serde::{Deserialize, Serialize};

use crate::{Curve, SlaError};

/// The three tenant classes of §6.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Mostly reads (index serving, photo tagging).
    ReadIntensive,
    /// Mostly writes (logging, ingest).
    WriteIntensive,
    /// A read/write mix that drifts over time (YCSB A on RocksDB).
    Mixed,
}

impl Workload {
    /// Every class.
    pub const ALL: [Workload; 3] = [
        Workload::ReadIntensive,
        Workload::WriteIntensive,
        Workload::Mixed,
    ];

    /// Short name: `read`, `write`, `mixed`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::ReadIntensive => "read",
            Workload::WriteIntensive => "write",
            Workload::Mixed => "mixed",
        }
    }

    /// The range of the read fraction of one synthetic sample (of I/Os).
    pub fn read_fraction_range(self) -> (f64, f64) {
        match self {
            Workload::ReadIntensive => (0.85, 1.0),
            Workload::WriteIntensive => (0.0, 0.3),
            Workload::Mixed => (0.3, 0.85),
        }
    }

    /// The class of a workload whose I/Os are `read_fraction` reads, by the
    /// same boundaries as [`Workload::read_fraction_range`]: ≥ 0.85 read,
    /// ≤ 0.3 write, mixed in between.
    pub fn classify(read_fraction: f64) -> Workload {
        if read_fraction >= 0.85 {
            Workload::ReadIntensive
        } else if read_fraction <= 0.3 {
            Workload::WriteIntensive
        } else {
            Workload::Mixed
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that is not a workload class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown workload class {0:?}: expected read, write or mixed")]
pub struct ParseWorkloadError(pub String);

impl FromStr for Workload {
    type Err = ParseWorkloadError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "read" | "read-intensive" => Ok(Workload::ReadIntensive),
            "write" | "write-intensive" => Ok(Workload::WriteIntensive),
            "mixed" => Ok(Workload::Mixed),
            _ => Err(ParseWorkloadError(s.to_string())),
        }
    }
}

/// Parameters of the synthetic tenants (and of the sizes given to trace
/// curves).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenParams {
    /// Per-second samples per tenant (the paper's YCSB trace: 12 minutes).
    pub samples: usize,
    /// Smallest peak size (total 4 KiB I/Os per second).
    pub size_min: f64,
    /// Largest peak size; sizes are log-uniform in between.
    pub size_max: f64,
    /// Each sample's total rate is `size × U(load_min, 1)`.
    pub load_min: f64,
}

impl Default for GenParams {
    /// 60 samples; peak sizes log-uniform in 2 000 – 40 000 I/O/s (so a
    /// tenant is roughly 1–30 % of the default P95 SSD's read rate, and the
    /// largest write-heavy ones need several units at P99.9); load 20–100 %.
    fn default() -> Self {
        GenParams {
            samples: 60,
            size_min: 2_000.0,
            size_max: 40_000.0,
            load_min: 0.2,
        }
    }
}

/// A synthetic tenant of `class`: a peak size `S` log-uniform in
/// `[size_min, size_max)`, then `samples` samples, each with total rate
/// `S · U(load_min, 1)` and read fraction uniform in the class's
/// [`Workload::read_fraction_range`]; the curve is their upper convex hull.
pub fn synthetic_curve(class: Workload, params: &GenParams, rng: &mut SplitMix64) -> Curve {
    let size = rng.log_uniform(params.size_min, params.size_max);
    let (flo, fhi) = class.read_fraction_range();
    let samples: Vec<(f64, f64)> = (0..params.samples.max(1))
        .map(|_| {
            let total = size * rng.uniform(params.load_min, 1.0);
            let f = rng.uniform(flo, fhi);
            (total * (1.0 - f), total * f)
        })
        .collect();
    Curve::from_samples(&samples).expect("finite, non-negative samples")
}

/// `mix` tenants of each class, drawn with `rng` and shuffled into a random
/// arrival order (placement is online, so order matters; the classes arrive
/// interleaved).
pub fn synthetic_population(
    mix: &[(Workload, usize)],
    params: &GenParams,
    rng: &mut SplitMix64,
) -> Vec<(Workload, Curve)> {
    let mut out = Vec::new();
    for &(class, n) in mix {
        for _ in 0..n {
            out.push((class, synthetic_curve(class, params, rng)));
        }
    }
    rng.shuffle(&mut out);
    out
}

/// One block request, as far as throughput is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoEvent {
    /// Arrival time, nanoseconds (any origin).
    pub time_ns: u64,
    /// A write (else a read).
    pub write: bool,
    /// Length in bytes.
    pub bytes: u64,
}

/// Per-window throughput of a request stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputSamples {
    /// `(write, read)` in 4 KiB I/Os per second, one per window from the
    /// first request's window to the last's (empty windows included).
    pub samples: Vec<(f64, f64)>,
    /// Windows with at least one request.
    pub busy_windows: usize,
    /// Reads over all I/Os (4 KiB units), 0 for an empty stream.
    pub read_fraction: f64,
}

/// I/Os of 4 KiB in a request of `bytes` (at least 1).
pub fn io_units(bytes: u64) -> u64 {
    bytes.div_ceil(4096).max(1)
}

/// The most windows [`throughput_samples`] makes: a million, 32 MB of counts
/// and samples per stream. The paper samples once a second, so a million
/// windows cover 11 days at its rate; a span that needs more is a window too
/// short for the trace.
pub const MAX_WINDOWS: u64 = 1_000_000;

/// Splits `events` (in any order) into windows of `window_ns` (at least 1)
/// starting at the earliest event and returns each window's `(write, read)`
/// rate in 4 KiB I/Os per second. Empty input gives no samples. Every window
/// from the first event's to the last's is kept, empty or not, so a span
/// that needs more than [`MAX_WINDOWS`] is refused
/// ([`SlaError::TooManyWindows`]) before anything is allocated.
pub fn throughput_samples(
    events: impl IntoIterator<Item = IoEvent>,
    window_ns: u64,
) -> Result<ThroughputSamples, SlaError> {
    let window_ns = window_ns.max(1);
    let events: Vec<IoEvent> = events.into_iter().collect();
    let Some(t0) = events.iter().map(|e| e.time_ns).min() else {
        return Ok(ThroughputSamples {
            samples: Vec::new(),
            busy_windows: 0,
            read_fraction: 0.0,
        });
    };
    let t1 = events.iter().map(|e| e.time_ns).max().unwrap_or(t0);
    let windows = (t1 - t0) / window_ns + 1;
    if windows > MAX_WINDOWS {
        return Err(SlaError::TooManyWindows {
            windows,
            window_ns,
            span_ns: t1 - t0,
            max: MAX_WINDOWS,
        });
    }
    let n = windows as usize;
    let mut counts = vec![(0u64, 0u64); n];
    let (mut reads, mut total) = (0u64, 0u64);
    for e in &events {
        let i = ((e.time_ns - t0) / window_ns) as usize;
        let u = io_units(e.bytes);
        if e.write {
            counts[i].0 += u;
        } else {
            counts[i].1 += u;
            reads += u;
        }
        total += u;
    }
    let per_sec = 1e9 / window_ns as f64;
    Ok(ThroughputSamples {
        busy_windows: counts.iter().filter(|c| c.0 + c.1 > 0).count(),
        samples: counts
            .into_iter()
            .map(|(w, r)| (w as f64 * per_sec, r as f64 * per_sec))
            .collect(),
        read_fraction: if total > 0 {
            reads as f64 / total as f64
        } else {
            0.0
        },
    })
}

/// The largest total rate `w + r` the curve allows (at one of its
/// breakpoints, since `w + r` is linear between them).
pub fn peak_total(c: &Curve) -> f64 {
    c.points().iter().map(|&(w, r)| w + r).fold(0.0, f64::max)
}

/// `c` scaled along both axes so that its [`peak_total`] is `size`.
/// Errors on a zero curve or a bad size.
pub fn scale_to_peak(c: &Curve, size: f64) -> Result<Curve, SlaError> {
    let peak = peak_total(c);
    if peak <= 0.0 {
        return Err(SlaError::BadScale { factor: 0.0 });
    }
    c.scale(size / peak)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_classes_have_their_shape() {
        let mut rng = SplitMix64::new(3);
        let p = GenParams::default();
        for class in Workload::ALL {
            for _ in 0..50 {
                let c = synthetic_curve(class, &p, &mut rng);
                assert!(c.is_concave());
                let (w, r) = (c.w_max(), c.points()[0].1);
                let peak = peak_total(&c);
                assert!(peak <= p.size_max * (1.0 + 1e-9) && peak >= p.size_min * p.load_min);
                match class {
                    Workload::ReadIntensive => {
                        assert!(w <= 0.15 * peak + 1e-6 && r > 0.8 * peak * p.load_min)
                    }
                    Workload::WriteIntensive => {
                        assert!(r <= 0.3 * peak + 1e-6 && w >= 0.7 * peak * p.load_min)
                    }
                    Workload::Mixed => assert!(w <= 0.7 * peak + 1e-6 && r <= 0.85 * peak + 1e-6),
                }
            }
        }
    }

    #[test]
    fn population_is_shuffled_and_seeded() {
        let mix = [
            (Workload::ReadIntensive, 5),
            (Workload::WriteIntensive, 5),
            (Workload::Mixed, 5),
        ];
        let p = GenParams::default();
        let a = synthetic_population(&mix, &p, &mut SplitMix64::new(1));
        let b = synthetic_population(&mix, &p, &mut SplitMix64::new(1));
        assert_eq!(a, b);
        assert_eq!(a.len(), 15);
        let classes: Vec<Workload> = a.iter().map(|x| x.0).collect();
        let mut sorted = classes.clone();
        sorted.sort();
        assert_ne!(classes, sorted, "arrivals should interleave the classes");
        assert_eq!(a.iter().filter(|x| x.0 == Workload::Mixed).count(), 5);
    }

    #[test]
    fn samples_windows_and_units() {
        let ev = |t: u64, write: bool, bytes: u64| IoEvent {
            time_ns: t,
            write,
            bytes,
        };
        // Unsorted; window 0.5 s starting at t = 1 s.
        let s = throughput_samples(
            [
                ev(2_100_000_000, true, 8192),
                ev(1_000_000_000, false, 4096),
                ev(1_200_000_000, false, 100),
                ev(1_400_000_000, true, 4097),
            ],
            500_000_000,
        )
        .unwrap();
        // Windows: [1.0,1.5) r=2 w=2; [1.5,2.0) empty; [2.0,2.5) w=2.
        assert_eq!(s.samples, vec![(4.0, 4.0), (0.0, 0.0), (4.0, 0.0)]);
        assert_eq!(s.busy_windows, 2);
        assert!((s.read_fraction - 2.0 / 6.0).abs() < 1e-12);
        assert_eq!(io_units(0), 1);
        assert_eq!(io_units(4096), 1);
        assert_eq!(io_units(4097), 2);
        let empty = throughput_samples([], 1).unwrap();
        assert!(empty.samples.is_empty() && empty.busy_windows == 0);
        let c = Curve::from_samples(&s.samples).unwrap();
        assert_eq!(c.points(), &[(0.0, 4.0), (4.0, 4.0)]);
    }

    #[test]
    fn too_many_windows_are_refused_before_allocating() {
        let ev = |t: u64| IoEvent {
            time_ns: t,
            write: false,
            bytes: 4096,
        };
        // Exactly MAX_WINDOWS windows of 1 ns.
        let s = throughput_samples([ev(5), ev(5 + MAX_WINDOWS - 1)], 1).unwrap();
        assert_eq!(s.samples.len() as u64, MAX_WINDOWS);
        // One more; and a 1 ns window over an hour (3.6e12 windows).
        let e = throughput_samples([ev(5), ev(5 + MAX_WINDOWS)], 1).unwrap_err();
        assert!(
            matches!(e, SlaError::TooManyWindows { windows, .. } if windows == MAX_WINDOWS + 1)
        );
        let e = throughput_samples([ev(0), ev(3_600_000_000_000)], 0).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "3600000000001 throughput windows of 1 ns over a span of 3600000000000 ns"
            ),
            "{e}"
        );
    }

    #[test]
    fn scaling_to_a_peak_keeps_the_shape() {
        let c = Curve::new(vec![(0.0, 10.0), (2.0, 9.0), (5.0, 0.0)]).unwrap();
        assert_eq!(peak_total(&c), 11.0);
        let s = scale_to_peak(&c, 22.0).unwrap();
        assert_eq!(s.points(), &[(0.0, 20.0), (4.0, 18.0), (10.0, 0.0)]);
        assert!(scale_to_peak(&Curve::zero(), 1.0).is_err());
        assert_eq!(Workload::classify(0.9), Workload::ReadIntensive);
        assert_eq!(Workload::classify(0.2), Workload::WriteIntensive);
        assert_eq!(Workload::classify(0.5), Workload::Mixed);
        assert_eq!("write".parse::<Workload>(), Ok(Workload::WriteIntensive));
        assert!("both".parse::<Workload>().is_err());
    }
}
