//! Measuring a storage unit's SLA curve (Regulator §3): the most read throughput
//! it serves at each write throughput while a read tail-latency bound holds.
//!
//! The search is the same for every kind of unit and is written once
//! ([`measure_curve`]) against a [`Prober`], which runs one load point — reads at
//! `r` and writes at `w` operations of 4 KiB per second, random, the worst case —
//! and reports the read latency at the percentile. [`EmulatedProber`] runs the
//! load open-loop on a scratch copy of an emulated unit (same geometry and timing,
//! its own memory, a virtual clock: reads queue behind programs, erases and
//! garbage collection exactly as the model says, and no tenant's data or timeline
//! is touched). The binary adds a prober that drives any block device or file
//! with fio.
//!
//! Search: first the largest write rate at which a light read stream still meets
//! the bound (`w_max`), by bisection; then, at evenly spaced write rates up to
//! `w_max`, the largest read rate that meets it, by bisection. The curve is the
//! upper convex hull of those samples, as in the paper, up to the first write
//! rate at which no read rate fits.

use std::sync::Arc;

use blockdev::BlockDev;
use clock::{Clock, Nanos, VirtualClock, SEC};
use flash::{Backend, FlashDevice, Geometry, Timing};
use ftl::{Extent, MemCheckpoints, Vssd, VssdConfig};
use rng::SplitMix64;
use serde::{Deserialize, Serialize};
use sla::catalog::Percentile;
use sla::Curve;

use crate::{ControlError, Result};

/// A unit's measured curve, as stored with its device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitCurve {
    /// Read-latency percentile the bound applies to.
    pub percentile: Percentile,
    /// The latency bound, in microseconds.
    pub bound_us: f64,
    /// Write vs read throughput, in 4 KiB operations per second.
    pub curve: Curve,
    /// The measured samples behind the curve.
    #[serde(default)]
    pub samples: Vec<Sample>,
}

/// One measured load point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    /// Write rate, 4 KiB operations per second.
    pub write_iops: f64,
    /// Largest read rate that met the bound at that write rate.
    pub read_iops: f64,
    /// Read latency at the percentile at that point, in microseconds.
    pub latency_us: f64,
}

/// Runs one load point.
pub trait Prober {
    /// Read latency (ns) at `quantile` with reads at `read_iops` and writes at
    /// `write_iops` (4 KiB random each, open loop).
    fn probe(&mut self, read_iops: f64, write_iops: f64, quantile: f64) -> Result<u64>;
    /// Upper bounds for the search: (read, write) operations per second no unit of
    /// this kind can exceed.
    fn ceilings(&self) -> (f64, f64);
}

/// How to search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpec {
    /// Percentile of read latency.
    pub percentile: Percentile,
    /// Bound on that percentile, in nanoseconds.
    pub bound_ns: u64,
    /// Number of write rates sampled between 0 and `w_max` (at least 2).
    pub write_points: usize,
    /// Bisection steps per search (precision is 2^-steps of the ceiling).
    pub steps: u32,
}

impl Default for SearchSpec {
    fn default() -> Self {
        Self {
            percentile: Percentile::P95,
            bound_ns: 500_000,
            write_points: 6,
            steps: 9,
        }
    }
}

/// Largest `x` in `[0, hi]` whose probed latency meets `bound`, assuming
/// latency grows with `x`; with the latency measured there (`(0, 0)` if even a
/// tiny load fails).
fn bisect(
    hi: f64,
    steps: u32,
    bound: u64,
    mut probe: impl FnMut(f64) -> Result<u64>,
) -> Result<(f64, u64)> {
    let top = probe(hi)?;
    if top <= bound {
        return Ok((hi, top));
    }
    let (mut lo, mut lo_lat, mut hi) = (0.0, 0, hi);
    for _ in 0..steps {
        let mid = 0.5 * (lo + hi);
        let lat = probe(mid)?;
        if lat <= bound {
            (lo, lo_lat) = (mid, lat);
        } else {
            hi = mid;
        }
    }
    Ok((lo, lo_lat))
}

/// Measures a unit's curve with `prober` (see the module docs for the search).
pub fn measure_curve(prober: &mut dyn Prober, spec: &SearchSpec) -> Result<UnitCurve> {
    if spec.write_points < 2 {
        return Err(ControlError::Invalid(
            "write_points must be at least 2".into(),
        ));
    }
    if spec.bound_ns == 0 {
        return Err(ControlError::Invalid(
            "the latency bound must be positive".into(),
        ));
    }
    let q = spec.percentile.quantile();
    let (r_ceil, w_ceil) = prober.ceilings();
    // A light read stream (1% of the read ceiling) to detect where writes alone
    // break the bound.
    let probe_r = (r_ceil * 0.01).max(10.0);
    if prober.probe(probe_r, 0.0, q)? > spec.bound_ns {
        return Err(ControlError::Invalid(format!(
            "the unit cannot meet a {} bound of {} µs even when idle",
            spec.percentile,
            spec.bound_ns as f64 / 1e3
        )));
    }
    let (w_max, _) = bisect(w_ceil, spec.steps, spec.bound_ns, |w| {
        prober.probe(probe_r, w, q)
    })?;
    let mut samples = Vec::new();
    for i in 0..spec.write_points {
        let w = w_max * i as f64 / (spec.write_points - 1) as f64;
        let (r, lat) = bisect(r_ceil, spec.steps, spec.bound_ns, |r| prober.probe(r, w, q))?;
        samples.push(Sample {
            write_iops: w,
            read_iops: r,
            latency_us: lat as f64 / 1e3,
        });
    }
    // The curve ends where reads stop fitting: at the first sampled write rate
    // that leaves no read rate within the bound (the device ages as it is
    // measured, so that can come before w_max), else at w_max.
    let mut pts: Vec<(f64, f64)> = Vec::new();
    for s in &samples {
        pts.push((s.write_iops, s.read_iops));
        if s.read_iops <= 0.0 && s.write_iops > 0.0 {
            break;
        }
    }
    if pts.last().is_some_and(|p| p.1 > 0.0) {
        pts.push((w_max, 0.0));
    }
    let curve = Curve::from_samples(&pts)
        .map_err(|e| ControlError::Measure(format!("measured samples give no curve: {e}")))?;
    Ok(UnitCurve {
        percentile: spec.percentile,
        bound_us: spec.bound_ns as f64 / 1e3,
        curve,
        samples,
    })
}

/// Runs load points on a scratch emulated unit of `channels` channels with the
/// given per-channel geometry and timing.
pub struct EmulatedProber {
    clock: Arc<VirtualClock>,
    vssd: Arc<Vssd>,
    pages: u64,
    page: u64,
    /// Virtual time per load point.
    duration: Nanos,
    /// Completion time of the latest operation (the unit is idle after it).
    horizon: Nanos,
    seed: u64,
    ceilings: (f64, f64),
}

impl std::fmt::Debug for EmulatedProber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedProber")
            .field("pages", &self.pages)
            .field("duration", &self.duration)
            .finish()
    }
}

impl EmulatedProber {
    /// Builds the scratch unit (memory-backed, `channels` channels of `geometry`)
    /// and preconditions it: the whole capacity written once, then half of it
    /// overwritten at random, so that garbage collection runs as in steady state.
    /// `utilization` is the share of the raw flash that holds live data (how
    /// hard GC works depends on it); `None` is a vSSD's default capacity
    /// (87.5%). `duration` is the virtual time of each load point.
    pub fn new(
        geometry: Geometry,
        timing: Timing,
        channels: u32,
        utilization: Option<f64>,
        duration: Nanos,
        seed: u64,
    ) -> Result<Self> {
        if channels == 0 || channels > geometry.channels {
            return Err(ControlError::Invalid(format!(
                "cannot measure {channels} channels of a device with {}",
                geometry.channels
            )));
        }
        if duration < 10 * clock::MS {
            return Err(ControlError::Invalid(
                "a load point must last at least 10 ms".into(),
            ));
        }
        let geo = Geometry {
            channels,
            ..geometry
        };
        let dev = Arc::new(
            FlashDevice::open(&Backend::Memory, geo, timing)
                .map_err(|e| ControlError::Measure(format!("scratch device: {e}")))?,
        );
        let extents: Vec<Extent> = (0..channels)
            .map(|c| Extent::whole_channel(&geo, c))
            .collect();
        let capacity = match utilization {
            None => ftl::default_capacity(&geo, &extents),
            Some(u) if u > 0.0 && u < 1.0 => {
                let raw = geo.total_bytes();
                let page = u64::from(geo.page_size);
                let want = ((raw as f64 * u) as u64 / page).max(1) * page;
                let max = ftl::max_capacity(&geo, &extents);
                if want > max {
                    return Err(ControlError::Invalid(format!(
                        "utilization {u} leaves no room for garbage collection (at most {:.3})",
                        max as f64 / raw as f64
                    )));
                }
                want
            }
            Some(u) => {
                return Err(ControlError::Invalid(format!(
                    "utilization must be between 0 and 1, not {u}"
                )))
            }
        };
        let clock = Arc::new(VirtualClock::new(0));
        let vssd = Vssd::create(
            dev,
            VssdConfig {
                id: 1,
                name: "measure".into(),
                extents,
                capacity_bytes: capacity,
                gc: ftl::GcPolicyKind::default(),
                lent: Vec::new(),
            },
            clock.clone(),
            Arc::new(MemCheckpoints::default()),
        )
        .map_err(|e| ControlError::Measure(format!("scratch vSSD: {e}")))?;
        let page = u64::from(geo.page_size);
        let pages = capacity / page;
        let dies = f64::from(channels * geo.dies_per_channel * geo.planes_per_die);
        let bus_iops = f64::from(channels) * timing.channel_mbps as f64 * 1e6 / page as f64;
        let read_ceiling = (dies * 1e9 / timing.read_ns as f64).min(bus_iops) * 1.1;
        let write_ceiling = (dies * 1e9 / timing.program_ns as f64).min(bus_iops) * 1.1;
        let mut p = Self {
            clock,
            vssd,
            pages,
            page,
            duration,
            horizon: 0,
            seed,
            ceilings: (read_ceiling, write_ceiling),
        };
        p.precondition()?;
        Ok(p)
    }

    fn precondition(&mut self) -> Result<()> {
        let buf = vec![0x5au8; self.page as usize];
        let mut rng = SplitMix64::derive(self.seed, &[0]);
        let mut t = self.horizon;
        let write = |lba: u64, t: &mut Nanos| -> Result<()> {
            self.clock.set(*t);
            let done = self
                .vssd
                .write(lba * self.page, &buf, false)
                .map_err(|e| ControlError::Measure(format!("preconditioning: {e}")))?;
            // Keep the writer just behind the device, so no queue builds up.
            *t = (*t).max(done.saturating_sub(SEC / 1000));
            Ok(())
        };
        for lba in 0..self.pages {
            write(lba, &mut t)?;
        }
        for _ in 0..self.pages / 2 {
            write(rng.next_u64() % self.pages, &mut t)?;
        }
        self.horizon = self.clock.now().max(t) + SEC;
        Ok(())
    }
}

impl Prober for EmulatedProber {
    fn probe(&mut self, read_iops: f64, write_iops: f64, quantile: f64) -> Result<u64> {
        let start = self.horizon;
        let end = start + self.duration;
        let warm = start + self.duration / 10;
        let mut rng = SplitMix64::derive(self.seed, &[1]);
        let mut next_r = if read_iops > 0.0 {
            start as f64 + rng.exponential(1e9 / read_iops)
        } else {
            f64::INFINITY
        };
        let mut next_w = if write_iops > 0.0 {
            start as f64 + rng.exponential(1e9 / write_iops)
        } else {
            f64::INFINITY
        };
        let mut buf = vec![0u8; self.page as usize];
        let data = vec![0xa5u8; self.page as usize];
        let mut lat = Vec::new();
        let mut horizon = start;
        loop {
            let is_read = next_r <= next_w;
            let t = if is_read { next_r } else { next_w };
            if t >= end as f64 {
                break;
            }
            let t = t as Nanos;
            self.clock.set(t);
            let off = (rng.next_u64() % self.pages) * self.page;
            let done = if is_read {
                let d = self
                    .vssd
                    .read(off, &mut buf)
                    .map_err(|e| ControlError::Measure(format!("probe read: {e}")))?;
                if t >= warm {
                    lat.push(d.saturating_sub(t));
                }
                next_r += rng.exponential(1e9 / read_iops);
                d
            } else {
                let d = self
                    .vssd
                    .write(off, &data, false)
                    .map_err(|e| ControlError::Measure(format!("probe write: {e}")))?;
                next_w += rng.exponential(1e9 / write_iops);
                d
            };
            horizon = horizon.max(done);
        }
        // Let the unit drain before the next point.
        self.horizon = horizon.max(end) + 100 * clock::MS;
        if lat.is_empty() {
            return Ok(0);
        }
        let k = ((quantile * lat.len() as f64).ceil() as usize).clamp(1, lat.len()) - 1;
        let (_, v, _) = lat.select_nth_unstable(k);
        Ok(*v)
    }

    fn ceilings(&self) -> (f64, f64) {
        self.ceilings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit with a known linear capacity: latency is 100 µs under it and
    /// 10 ms over it.
    struct Linear {
        r: f64,
        w: f64,
        calls: u32,
    }

    impl Prober for Linear {
        fn probe(&mut self, r: f64, w: f64, _q: f64) -> Result<u64> {
            self.calls += 1;
            Ok(if r / self.r + w / self.w < 1.0 {
                100_000
            } else {
                10_000_000
            })
        }
        fn ceilings(&self) -> (f64, f64) {
            (self.r * 2.0, self.w * 2.0)
        }
    }

    #[test]
    fn search_recovers_a_known_curve() {
        let mut p = Linear {
            r: 100_000.0,
            w: 10_000.0,
            calls: 0,
        };
        let spec = SearchSpec {
            steps: 14,
            ..SearchSpec::default()
        };
        let u = measure_curve(&mut p, &spec).unwrap();
        for w in [0.0, 2500.0, 5000.0, 7500.0, 9000.0] {
            let want = 100_000.0 * (1.0 - w / 10_000.0);
            let got = u.curve.eval(w).unwrap();
            assert!(
                (got - want).abs() <= 0.01 * 100_000.0,
                "at {w}: {got} vs {want}"
            );
        }
        // The light read stream (1% of the read ceiling, 2% of this unit) used
        // to find w_max takes its share.
        assert!(
            (9_700.0..=10_000.0).contains(&u.curve.w_max()),
            "{}",
            u.curve.w_max()
        );
    }

    #[test]
    fn impossible_bounds_are_reported() {
        let mut p = Linear {
            r: 100.0,
            w: 10.0,
            calls: 0,
        };
        let spec = SearchSpec {
            bound_ns: 50_000,
            ..SearchSpec::default()
        };
        let e = measure_curve(&mut p, &spec).unwrap_err();
        assert!(e.to_string().contains("even when idle"), "{e}");
        let spec = SearchSpec {
            write_points: 1,
            ..SearchSpec::default()
        };
        assert!(measure_curve(&mut p, &spec).is_err());
    }

    /// A prober whose device breaks after `ok` load points.
    struct Breaks {
        ok: u32,
    }

    impl Prober for Breaks {
        fn probe(&mut self, _r: f64, _w: f64, _q: f64) -> Result<u64> {
            if self.ok == 0 {
                return Err(ControlError::Measure("probe read: flash: bad block".into()));
            }
            self.ok -= 1;
            Ok(100_000)
        }
        fn ceilings(&self) -> (f64, f64) {
            (1000.0, 100.0)
        }
    }

    #[test]
    fn a_bad_search_is_the_callers_fault_and_a_broken_run_the_daemons() {
        use crate::ErrorKind;
        let mut p = Linear {
            r: 100.0,
            w: 10.0,
            calls: 0,
        };
        for spec in [
            SearchSpec {
                write_points: 1,
                ..SearchSpec::default()
            },
            SearchSpec {
                bound_ns: 0,
                ..SearchSpec::default()
            },
            SearchSpec {
                bound_ns: 50_000,
                ..SearchSpec::default()
            },
        ] {
            let e = measure_curve(&mut p, &spec).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BadRequest, "{e}");
        }
        let geo = Geometry::default();
        let e = EmulatedProber::new(geo, Timing::default(), 99, None, SEC, 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest, "{e}");
        let e = measure_curve(&mut Breaks { ok: 3 }, &SearchSpec::default()).unwrap_err();
        assert!(matches!(e, ControlError::Measure(_)), "{e:?}");
        assert_eq!(e.kind().http_status(), 500);
        assert!(
            e.to_string().contains("probe read: flash: bad block"),
            "{e}"
        );
    }

    #[test]
    fn emulated_reads_queue_behind_programs() {
        let geo = Geometry {
            blocks_per_plane: 16,
            pages_per_block: 64,
            ..Geometry::default()
        };
        let mut p =
            EmulatedProber::new(geo, Timing::default(), 1, None, 50 * clock::MS, 1).unwrap();
        let idle = p.probe(1000.0, 0.0, 0.95).unwrap();
        // One channel of 4 dies: reads alone take about the 40 µs array read
        // plus the 10 µs transfer.
        assert!((40_000..=120_000).contains(&idle), "idle p95 {idle}");
        // Writes at 80% of the program throughput make reads wait for programs.
        let busy = p.probe(1000.0, 8000.0, 0.95).unwrap();
        assert!(busy > 2 * idle, "busy p95 {busy} vs idle {idle}");
        assert!(EmulatedProber::new(geo, Timing::default(), 99, None, SEC, 1).is_err());
        let e = EmulatedProber::new(geo, Timing::default(), 1, Some(0.99), SEC, 1).unwrap_err();
        assert!(e.to_string().contains("no room"), "{e}");
        assert!(EmulatedProber::new(geo, Timing::default(), 1, Some(1.5), SEC, 1).is_err());
        assert!(
            EmulatedProber::new(geo, Timing::default(), 1, Some(0.5), 20 * clock::MS, 1).is_ok()
        );
    }
}
