//! Trace replay on a virtual clock (`flexssd sim elastic`).
//!
//! A usage trace is a time series of used bytes (and, optionally, cumulative
//! written bytes), for example the CSV that `flexssd elastic run --csv` records. The
//! [`TraceVolume`] plays it back: usage is interpolated linearly between points, an
//! add makes its disk usable after `add_s`, a remove keeps the disk allocated while
//! the file system would move the disk's share of the data off it at `move_bps`.
//! The controller is the very same [`Controller`] as in real mode, and the metrics are
//! the same [`WasteMeter`]. What the replay cannot show: the feedback of the
//! elasticity on the application (a real run slows down or fails when full; a replay
//! only counts the intervals in which usage was above the allocation).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use clock::{Nanos, SEC};
use serde::{Deserialize, Serialize};

use crate::config::{ElasticConfig, MAX_TIME_S};
use crate::controller::{Controller, Sample};
use crate::metrics::{Summary, WasteMeter};
use crate::volume::{DiskInfo, DiskState, FsStats, Volume};
use crate::{Error, Result};

/// How long the simulated volume's operations take.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimTiming {
    /// Seconds from the start of an add until the disk is usable.
    pub add_s: f64,
    /// Fixed seconds of a remove.
    pub remove_s: f64,
    /// Bytes per second the file system moves off a disk being removed.
    pub move_bps: f64,
}

impl SimTiming {
    /// Checks that the times are finite, from 0 to [`MAX_TIME_S`] seconds, and
    /// the move rate finite and positive; a field out of range is named.
    pub fn validate(&self) -> Result<()> {
        for (n, v) in [("add_s", self.add_s), ("remove_s", self.remove_s)] {
            if !(v.is_finite() && (0.0..=MAX_TIME_S).contains(&v)) {
                return Err(Error::Replay(format!(
                    "{n} must be from 0 to {MAX_TIME_S} seconds, not {v}"
                )));
            }
        }
        if !(self.move_bps.is_finite() && self.move_bps >= 1.0) {
            return Err(Error::Replay(format!(
                "move_bps must be a finite number of at least 1 byte per second, not {}",
                self.move_bps
            )));
        }
        Ok(())
    }
}

impl Default for SimTiming {
    fn default() -> Self {
        SimTiming {
            add_s: 1.0,
            remove_s: 1.0,
            move_bps: 100.0 * (1 << 20) as f64,
        }
    }
}

/// A point of a usage trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TracePoint {
    /// Time.
    pub t: Nanos,
    /// Used bytes.
    pub used: u64,
    /// Cumulative written bytes, if the trace has them.
    pub written: Option<u64>,
    /// Bytes promised to writes not yet allocated ([`FsStats::pending`]), if the
    /// trace has them.
    pub pending: Option<u64>,
}

/// Reads a usage trace: CSV with a header naming a time column (`t_s`, seconds) and a
/// `used` column (bytes), optionally `written` (cumulative bytes) and `pending`
/// (bytes, or empty where the file system did not report them). Other columns are
/// ignored, so a `flexssd elastic run --csv` file replays as is. Lines starting with
/// `#` are comments. Times run from 0 to [`MAX_TIME_S`] seconds, byte counts below
/// 2^64; a value outside is an error naming its line.
pub fn read_trace(path: &Path) -> Result<Vec<TracePoint>> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::Trace {
        file: name.clone(),
        line: 0,
        msg: e.to_string(),
    })?;
    parse_trace(&text, &name)
}

/// Parses a usage trace's text (see [`read_trace`]); `file` names it in errors.
pub fn parse_trace(text: &str, file: &str) -> Result<Vec<TracePoint>> {
    let err = |line: usize, msg: String| Error::Trace {
        file: file.to_string(),
        line,
        msg,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let Some((hl, header)) = lines.next() else {
        return Err(err(
            1,
            "empty trace: expected a header with t_s and used".into(),
        ));
    };
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let find = |n: &str| cols.iter().position(|c| *c == n);
    let (Some(ti), Some(ui)) = (find("t_s"), find("used")) else {
        return Err(err(
            hl + 1,
            format!("header {header:?} must name columns t_s and used"),
        ));
    };
    let wi = find("written");
    let pi = find("pending");
    let mut out: Vec<TracePoint> = Vec::new();
    for (i, l) in lines {
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        let get = |c: usize, what: &str, max: f64| -> Result<f64> {
            let s = f
                .get(c)
                .ok_or_else(|| err(i + 1, format!("missing {what} column")))?;
            let v = s
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| err(i + 1, format!("{what} {s:?} is not a number ≥ 0")))?;
            if v > max {
                return Err(err(i + 1, format!("{what} {s:?} is over {max}")));
            }
            Ok(v)
        };
        // Byte counts: below 2^64 (as f64, the largest one under it).
        const MAX_BYTES: f64 = 18_446_744_073_709_549_568.0;
        let bytes = |c: usize, what: &str| get(c, what, MAX_BYTES).map(|v| v as u64);
        let t = (get(ti, "t_s", MAX_TIME_S)? * SEC as f64).round() as Nanos;
        if out.last().is_some_and(|p| p.t > t) {
            return Err(err(i + 1, format!("time {} goes backwards", f[ti])));
        }
        let used = bytes(ui, "used")?;
        let written = match wi {
            Some(c) => Some(bytes(c, "written")?),
            None => None,
        };
        let pending = match pi {
            Some(c) if f.get(c).is_some_and(|s| !s.is_empty()) => Some(bytes(c, "pending")?),
            _ => None,
        };
        out.push(TracePoint {
            t,
            used,
            written,
            pending,
        });
    }
    if out.is_empty() {
        return Err(err(hl + 1, "trace has a header but no points".into()));
    }
    Ok(out)
}

/// A volume whose usage follows a trace.
#[derive(Debug, Clone)]
pub struct TraceVolume {
    points: Vec<(Nanos, u64)>,
    /// Cumulative written at each point.
    written: Vec<u64>,
    /// Pending bytes at each point, where the trace reports them.
    pending: Vec<Option<u64>>,
    timing: SimTiming,
    disks: Vec<DiskInfo>,
    /// (t, allocated bytes) whenever the usable allocation changes.
    timeline: Vec<(Nanos, u64)>,
    /// When the last operation completes; shared with the replay's clock, which
    /// reads it after an action to learn how long the action took.
    busy_until: Arc<AtomicU64>,
    next_id: u32,
}

fn interp(a: (Nanos, u64), b: (Nanos, u64), t: Nanos) -> u64 {
    if b.0 <= a.0 {
        return b.1;
    }
    let f = (t - a.0) as f64 / (b.0 - a.0) as f64;
    (a.1 as f64 + (b.1 as f64 - a.1 as f64) * f).round() as u64
}

impl TraceVolume {
    /// From `(t, used)` points (time-ordered); written bytes are the cumulative
    /// increases of usage.
    pub fn new(points: Vec<(Nanos, u64)>, timing: SimTiming) -> Self {
        let tp: Vec<TracePoint> = points
            .iter()
            .map(|&(t, used)| TracePoint {
                t,
                used,
                written: None,
                pending: None,
            })
            .collect();
        Self::from_trace(&tp, timing)
    }

    /// From trace points; where a point has no written count, usage increases count.
    pub fn from_trace(tp: &[TracePoint], timing: SimTiming) -> Self {
        let mut written = Vec::with_capacity(tp.len());
        let mut acc = 0u64;
        let mut prev = 0u64;
        for p in tp {
            acc += p.used.saturating_sub(prev);
            prev = p.used;
            written.push(p.written.unwrap_or(acc));
        }
        TraceVolume {
            points: tp.iter().map(|p| (p.t, p.used)).collect(),
            written,
            pending: tp.iter().map(|p| p.pending).collect(),
            timing,
            disks: vec![],
            timeline: vec![],
            busy_until: Arc::default(),
            next_id: 0,
        }
    }

    fn value(&self, t: Nanos, of: impl Fn(usize) -> u64) -> u64 {
        let i = self.points.partition_point(|p| p.0 <= t);
        if i == 0 {
            return of(0);
        }
        if i == self.points.len() {
            return of(i - 1);
        }
        interp(
            (self.points[i - 1].0, of(i - 1)),
            (self.points[i].0, of(i)),
            t,
        )
    }

    /// Used bytes at `t`.
    pub fn used_at(&self, t: Nanos) -> u64 {
        self.value(t, |i| self.points[i].1)
    }

    /// When the last operation finishes (the virtual clock after it).
    pub fn busy_until(&self) -> Nanos {
        self.busy_until.load(Ordering::Relaxed)
    }

    /// Usable allocation changes `(t, bytes)`.
    pub fn timeline(&self) -> &[(Nanos, u64)] {
        &self.timeline
    }

    /// The trace's `(t, used)` points.
    pub fn points(&self) -> &[(Nanos, u64)] {
        &self.points
    }

    fn push_timeline(&mut self, t: Nanos, bytes: u64) {
        // keep it time-ordered: later operations may finish before earlier ones never,
        // since operations block; equal times replace.
        self.timeline.push((t, bytes));
        self.timeline.sort_by_key(|e| e.0);
    }
}

impl Volume for TraceVolume {
    fn stats(&mut self, now: Nanos) -> Result<FsStats> {
        Ok(FsStats {
            used: self.used_at(now),
            written: self.value(now, |i| self.written[i]),
            read: 0,
            relocated: 0,
            // the newest point's report, as a probe then would have read it
            pending: self.pending[self.points.partition_point(|p| p.0 <= now).max(1) - 1],
        })
    }

    fn add_disk(&mut self, bytes: u64, now: Nanos) -> Result<u64> {
        let ready = now.saturating_add((self.timing.add_s * SEC as f64) as Nanos);
        self.next_id += 1;
        self.disks.push(DiskInfo {
            name: format!("disk{}", self.next_id),
            bytes,
            device: None,
            state: DiskState::Active,
        });
        let size = self.size();
        self.push_timeline(ready, size);
        self.busy_until.store(ready, Ordering::Relaxed);
        Ok(size)
    }

    fn remove_disk(&mut self, now: Nanos) -> Result<u64> {
        if self.disks.len() <= 1 {
            return Err(Error::Volume("cannot remove the last disk".into()));
        }
        let size = self.size();
        let used = self.used_at(now);
        // The data is spread over the disks in proportion to their sizes.
        let share = |bytes: u64| (used as u128 * bytes as u128 / size.max(1) as u128) as u64;
        let pool: Vec<(u64, u64)> = self
            .disks
            .iter()
            .map(|d| (d.bytes, share(d.bytes)))
            .collect();
        let Some(i) = crate::volume::pick_removal(&pool, 0) else {
            return Err(Error::Volume(format!(
                "{used} bytes in use do not fit on the remaining disks after removing any one of {} bytes",
                size
            )));
        };
        let moved = pool[i].1 as f64;
        let secs = self.timing.remove_s + moved / self.timing.move_bps.max(1.0);
        let done = now.saturating_add((secs * SEC as f64) as Nanos);
        self.disks.remove(i);
        let size = self.size();
        self.push_timeline(done, size);
        self.busy_until.store(done, Ordering::Relaxed);
        Ok(size)
    }

    fn disks(&self) -> Vec<DiskInfo> {
        self.disks.clone()
    }
}

/// The result of a replay.
#[derive(Debug, Clone)]
pub struct SimResult {
    /// Every probe.
    pub samples: Vec<Sample>,
    /// 5-second series `(t, used, expected, allocated)` from 0 to the end.
    pub series: Vec<(Nanos, u64, u64, u64)>,
    /// Metrics.
    pub summary: Summary,
}

/// Replays `trace` through the controller `cfg` names until `end` (default: the
/// trace's last point). The end must not be before the trace's first point, nor
/// more than [`MAX_TIME_S`] after it; the timing must pass [`SimTiming::validate`].
pub fn simulate(
    cfg: &ElasticConfig,
    trace: &[TracePoint],
    timing: SimTiming,
    end: Option<Nanos>,
) -> Result<SimResult> {
    cfg.validate()?;
    timing.validate()?;
    let t0 = trace.first().map(|p| p.t).unwrap_or(0);
    let end = end.unwrap_or_else(|| trace.last().map(|p| p.t).unwrap_or(0));
    let secs = |t: Nanos| t as f64 / SEC as f64;
    if end < t0 {
        return Err(Error::Replay(format!(
            "the end, {} s, is before the trace's first point at {} s",
            secs(end),
            secs(t0)
        )));
    }
    if secs(end - t0) > MAX_TIME_S {
        return Err(Error::Replay(format!(
            "the end, {} s, is more than {MAX_TIME_S} s after the trace's first point at {} s",
            secs(end),
            secs(t0)
        )));
    }
    let vol = TraceVolume::from_trace(trace, timing);
    let mut ctl = Controller::start(cfg, vol, t0)?;
    // the first disk is there from the start
    let first = ctl.volume().size();
    let mut samples = vec![];
    let mut now = t0;
    // the virtual clock after an action: when the volume finishes it
    let busy = Arc::clone(&ctl.volume().busy_until);
    while now <= end {
        let (s, next) = ctl.step(now, &|| busy.load(Ordering::Relaxed).max(now))?;
        samples.push(s);
        // Saturating: `now` then passes any `end` the checks above allow.
        now = now
            .saturating_add(next.max(1))
            .max(busy.load(Ordering::Relaxed));
    }
    // Usage and allocation as step functions: usage at every trace point and probe,
    // allocation from the timeline, expected from the probes.
    let vol = ctl.volume();
    let mut events: Vec<(Nanos, u8, u64)> = vec![(t0, 1, first)];
    events.extend(vol.timeline().iter().map(|&(t, a)| (t, 1, a)));
    events.extend(samples.iter().map(|s| (s.t, 2, s.expected)));
    events.sort_by_key(|e| (e.0, e.1));
    let mut meter = WasteMeter::new();
    let (mut alloc, mut exp) = (first, 0);
    let step = crate::metrics::INTERVAL;
    let mut ei = 0;
    let mut t = t0;
    // sample on the 5-second grid directly: used from the trace, the rest as of t
    while t <= end {
        while ei < events.len() && events[ei].0 <= t {
            match events[ei].1 {
                1 => alloc = events[ei].2,
                _ => exp = events[ei].2,
            }
            ei += 1;
        }
        meter.record(t, vol.used_at(t), exp, alloc);
        let Some(next) = t.checked_add(step) else {
            break;
        };
        t = next;
    }
    let (waste, _) = meter.waste(end);
    // Failures at the trace's own resolution: points whose usage is above the usable
    // allocation of that moment.
    let alloc_at = |t: Nanos| {
        let mut a = first;
        for &(et, v) in vol.timeline() {
            if et > t {
                break;
            }
            a = v;
        }
        a
    };
    let failures = trace
        .iter()
        .filter(|p| p.t <= end && p.used > alloc_at(p.t))
        .count() as u32;
    let (adds, removes, failed_ops) = ctl.counts();
    let series = meter.series(end);
    let summary = Summary {
        duration_s: (end - t0) as f64 / SEC as f64,
        waste_gbh: waste,
        failures,
        adds,
        removes,
        failed_ops,
        peak_allocated: series.iter().map(|s| s.3).max().unwrap_or(0),
        peak_used: series.iter().map(|s| s.1).max().unwrap_or(0),
    };
    Ok(SimResult {
        samples,
        series,
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyKind;
    const M: u64 = 1 << 20;

    /// The microbenchmark's shape at 1/4 scale: idle 10 s, write 1.6 G at 100 MiB/s,
    /// hold, read and delete 1 G over 20 s, cool down.
    fn micro() -> Vec<TracePoint> {
        let mut v = vec![];
        let mut written = 0;
        for s in 0..=120u64 {
            let s = s.saturating_sub(10);
            let used = if s <= 16 {
                s * 100 * M
            } else if s <= 20 {
                1600 * M
            } else if s <= 40 {
                1600 * M - (s - 20) * 50 * M
            } else {
                600 * M
            };
            if s <= 16 {
                written = s * 100 * M;
            }
            v.push(TracePoint {
                t: v.len() as u64 * SEC,
                used,
                written: Some(written),
                pending: None,
            });
        }
        v
    }

    /// Sizes and times at 1/4 of the paper's.
    fn cfg(policy: PolicyKind, reserve: u64) -> ElasticConfig {
        ElasticConfig {
            policy,
            reserve,
            init: 256 * M,
            increment: 512 * M,
            prealloc: 2048 * M,
            tmin_s: 0.25,
            tmax_s: 1.25,
            add_delay_s: 2.5,
            remove_delay_s: 15.0,
            reactive_interval_s: 1.25,
            ..Default::default()
        }
    }

    #[test]
    fn parses_traces_and_names_bad_lines() {
        let t = parse_trace("# c\nt_s,used,written\n0,10,0\n1.5,20,30\n", "x.csv").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].t, 1_500_000_000);
        assert_eq!(t[1].written, Some(30));
        let e = parse_trace("t_s,used\n0,1\n1,-3\n", "x.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.csv:3:"), "{e}");
        let e = parse_trace("time,used\n", "y.csv").unwrap_err().to_string();
        assert!(e.contains("y.csv:1:") && e.contains("t_s"), "{e}");
        let e = parse_trace("t_s,used\n2,1\n1,1\n", "z")
            .unwrap_err()
            .to_string();
        assert!(e.contains("backwards"), "{e}");
        // pending: a number, or empty where the file system reported none
        let t = parse_trace("t_s,used,pending\n0,10,\n1,20,7\n", "p.csv").unwrap();
        assert_eq!((t[0].pending, t[1].pending), (None, Some(7)));
        let e = parse_trace("t_s,used,pending\n0,10,x\n", "p.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.csv:2:") && e.contains("pending"), "{e}");
        // a replay reads the newest point's report
        let mut v = TraceVolume::from_trace(&t, SimTiming::default());
        assert_eq!(v.stats(500_000_000).unwrap().pending, None);
        assert_eq!(v.stats(SEC).unwrap().pending, Some(7));
        assert_eq!(v.stats(9 * SEC).unwrap().pending, Some(7));
    }

    #[test]
    fn out_of_range_times_and_bytes_name_their_line() {
        // 1e30 s once saturated to u64::MAX ns and the replay never ended.
        let e = parse_trace("t_s,used\n0,100\n1e30,10\n", "h.csv")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "h.csv:3: t_s \"1e30\" is over 31622400");
        let e = parse_trace("t_s,used\n0,1e30\n", "h.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("h.csv:2: used \"1e30\" is over"), "{e}");
        let e = parse_trace("t_s,used,written\n0,1,18446744073709551616\n", "h.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("h.csv:2: written"), "{e}");
        let t = parse_trace("t_s,used\n0,1\n31622400,18446744073709549568\n", "h.csv").unwrap();
        assert_eq!(t[1].t, 31_622_400 * SEC);
        assert_eq!(t[1].used, 18_446_744_073_709_549_568);
    }

    #[test]
    fn a_replay_refuses_an_end_out_of_range_and_bad_timing() {
        let trace = [
            TracePoint {
                t: 10 * SEC,
                used: 0,
                written: None,
                pending: None,
            },
            TracePoint {
                t: 20 * SEC,
                used: 10 * M,
                written: None,
                pending: None,
            },
        ];
        let c = cfg(PolicyKind::ReactiveAddrm, 0);
        let t = SimTiming::default();
        let e = simulate(&c, &trace, t, Some(5 * SEC))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "replay: the end, 5 s, is before the trace's first point at 10 s"
        );
        let e = simulate(&c, &trace, t, Some(u64::MAX))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is more than 31622400 s after"), "{e}");
        for (bad, field) in [
            (
                SimTiming {
                    add_s: f64::NAN,
                    ..t
                },
                "add_s",
            ),
            (SimTiming { add_s: -5.0, ..t }, "add_s"),
            (
                SimTiming {
                    remove_s: 1e30,
                    ..t
                },
                "remove_s",
            ),
            (SimTiming { move_bps: 0.0, ..t }, "move_bps"),
            (
                SimTiming {
                    move_bps: -1.0,
                    ..t
                },
                "move_bps",
            ),
            (
                SimTiming {
                    move_bps: f64::NAN,
                    ..t
                },
                "move_bps",
            ),
        ] {
            let e = simulate(&c, &trace, bad, None).unwrap_err().to_string();
            assert!(e.starts_with(&format!("replay: {field} must be")), "{e}");
        }
        // An end at the first point, or past the last, is fine.
        let r = simulate(&c, &trace, t, Some(10 * SEC)).unwrap();
        assert_eq!(r.summary.duration_s, 0.0);
        let r = simulate(&c, &trace, t, Some(100 * SEC)).unwrap();
        assert_eq!(r.summary.duration_s, 90.0);
    }

    #[test]
    fn prealloc_wastes_its_free_space_and_never_fails() {
        let r = simulate(
            &cfg(PolicyKind::Prealloc, 0),
            &micro(),
            SimTiming::default(),
            None,
        )
        .unwrap();
        assert_eq!(r.summary.failures, 0);
        assert_eq!((r.summary.adds, r.summary.removes), (0, 0));
        assert!(r.summary.waste_gbh > 0.0);
    }

    #[test]
    fn predictive_without_reserve_beats_reactive_without_reserve() {
        let p = simulate(
            &cfg(PolicyKind::Predictive, 0),
            &micro(),
            SimTiming::default(),
            None,
        )
        .unwrap();
        let r = simulate(
            &cfg(PolicyKind::ReactiveAddrm, 0),
            &micro(),
            SimTiming::default(),
            None,
        )
        .unwrap();
        assert_eq!(p.summary.failures, 0, "{:?}", p.summary);
        assert!(r.summary.failures > 0, "{:?}", r.summary);
        let pre = simulate(
            &cfg(PolicyKind::Prealloc, 0),
            &micro(),
            SimTiming::default(),
            None,
        )
        .unwrap();
        assert!(p.summary.waste_gbh < pre.summary.waste_gbh);
    }

    #[test]
    fn replay_is_deterministic() {
        let a = simulate(
            &cfg(PolicyKind::Predictive, 0),
            &micro(),
            SimTiming::default(),
            None,
        )
        .unwrap();
        let b = simulate(
            &cfg(PolicyKind::Predictive, 0),
            &micro(),
            SimTiming::default(),
            None,
        )
        .unwrap();
        assert_eq!(a.samples, b.samples);
    }

    /// A job that writes in bursts: 80 MiB within one 0.25 s probe every 2 s,
    /// up to 800 MiB, then deletes it all (the multi-volume job's sort phases).
    fn bursts() -> Vec<TracePoint> {
        let q = SEC / 4;
        (0..240u64)
            .map(|i| {
                let used = if i < 80 {
                    (i / 8 + 1).min(10) * 80 * M
                } else {
                    5 * M
                };
                TracePoint {
                    t: i * q,
                    used,
                    written: Some((i.min(79) / 8 + 1) * 80 * M),
                    pending: None,
                }
            })
            .collect()
    }

    #[test]
    fn over_the_horizon_bursts_are_not_extrapolated_into_disks() {
        use crate::config::ShortTerm;
        let run = |span| {
            let c = ElasticConfig {
                short_term: span,
                increment: 256 * M,
                ..cfg(PolicyKind::Predictive, 0)
            };
            simulate(&c, &bursts(), SimTiming::default(), None)
                .unwrap()
                .summary
        };
        let (probe, horizon) = (run(ShortTerm::Probe), run(ShortTerm::Horizon));
        assert_eq!(
            (probe.failures, horizon.failures),
            (0, 0),
            "{probe:?} {horizon:?}"
        );
        assert!(
            horizon.peak_allocated < probe.peak_allocated
                && horizon.waste_gbh < probe.waste_gbh * 0.9,
            "{probe:?} {horizon:?}"
        );
    }

    /// The microbenchmark as unlimited disks run it: 1.6 G written at 320 MiB/s
    /// in 5 s (a point every 0.25 s), held, 1 G deleted from 15 s, idle.
    fn fast() -> Vec<TracePoint> {
        (0..=240u64)
            .map(|i| {
                // used space shows the writes one second late
                let used = (i.saturating_sub(4) * 80 * M).min(1600 * M)
                    - (i.saturating_sub(60) * 50 * M).min(1000 * M);
                TracePoint {
                    t: i * SEC / 4,
                    used,
                    written: Some((i * 80 * M).min(1600 * M)),
                    pending: None,
                }
            })
            .collect()
    }

    #[test]
    fn measured_add_delay_follows_the_volumes_adds() {
        use crate::config::AddDelay;
        let run = |ad, ad_s, add_s| {
            let c = ElasticConfig {
                add_delay: ad,
                add_delay_s: ad_s,
                ..cfg(PolicyKind::Predictive, 0)
            };
            let timing = SimTiming {
                add_s,
                ..SimTiming::default()
            };
            simulate(&c, &fast(), timing, None).unwrap().summary
        };
        // adds of 0.1 s against a configured AD of 2.5 s: the measured look-ahead
        // allocates less, and no write fails
        let (fixed, measured) = (
            run(AddDelay::Fixed, 2.5, 0.1),
            run(AddDelay::Measured, 2.5, 0.1),
        );
        assert_eq!(
            (fixed.failures, measured.failures),
            (0, 0),
            "{fixed:?} {measured:?}"
        );
        assert!(
            measured.peak_allocated < fixed.peak_allocated && measured.waste_gbh < fixed.waste_gbh,
            "{fixed:?} {measured:?}"
        );
        // adds of 1 s against a configured 0.1 s: the measured AD plans further ahead
        let (fixed, measured) = (
            run(AddDelay::Fixed, 0.1, 1.0),
            run(AddDelay::Measured, 0.1, 1.0),
        );
        assert!(
            measured.peak_allocated > fixed.peak_allocated && measured.failures <= fixed.failures,
            "{fixed:?} {measured:?}"
        );
    }
}
