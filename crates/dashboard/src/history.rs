//! Recent rates from cumulative counters.
//!
//! The API's counters are totals since the daemon started, which say little
//! about what a tenant does now. The daemon samples every vSSD's counters on
//! its own clock every `sample_ms` into a [`History`] that keeps `window_s`
//! of them; the dashboard and `GET /v1/vssds/{name}/rates` show the rates
//! between consecutive samples. Timestamps are passed in, never read here.

use std::collections::{BTreeMap, VecDeque};

use control::VssdStats;
use serde::{Deserialize, Serialize};

/// One vSSD's counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// When, ns on the daemon's clock.
    pub at_ns: u64,
    /// Read requests so far.
    pub reads: u64,
    /// Write requests so far.
    pub writes: u64,
    /// Bytes read so far.
    pub read_bytes: u64,
    /// Bytes written so far.
    pub write_bytes: u64,
    /// Host pages written so far (FTL).
    pub host_pages: u64,
    /// Flash pages programmed so far (FTL: host, GC, trim records).
    pub flash_pages: u64,
    /// GC runs so far.
    pub gc_runs: u64,
}

impl Sample {
    /// The sample of `s` at `at_ns`.
    pub fn of(at_ns: u64, s: &VssdStats) -> Self {
        Sample {
            at_ns,
            reads: s.io.reads,
            writes: s.io.writes,
            read_bytes: s.io.read_bytes,
            write_bytes: s.io.write_bytes,
            host_pages: s.ftl.host_pages_written,
            flash_pages: s.ftl.flash_pages_written,
            gc_runs: s.ftl.gc_runs,
        }
    }

    /// Whether every counter of `later` is at least this one's (else the
    /// vSSD was re-created under the same name and its counters restarted).
    fn precedes(&self, later: &Sample) -> bool {
        later.at_ns > self.at_ns
            && later.reads >= self.reads
            && later.writes >= self.writes
            && later.read_bytes >= self.read_bytes
            && later.write_bytes >= self.write_bytes
            && later.host_pages >= self.host_pages
            && later.flash_pages >= self.flash_pages
            && later.gc_runs >= self.gc_runs
    }
}

/// The rates between two consecutive samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    /// End of the interval, ns on the daemon's clock.
    pub at_ns: u64,
    /// Its length, ns.
    pub dt_ns: u64,
    /// Read requests per second.
    pub read_iops: f64,
    /// Write requests per second.
    pub write_iops: f64,
    /// Bytes read per second.
    pub read_bps: f64,
    /// Bytes written per second.
    pub write_bps: f64,
    /// Reads in 4 KiB operations per second (the SLA curves' unit).
    pub read_ops_4k: f64,
    /// Writes in 4 KiB operations per second.
    pub write_ops_4k: f64,
    /// Flash pages per host page in the interval (none when nothing was
    /// written).
    pub write_amplification: Option<f64>,
    /// GC runs in the interval.
    pub gc_runs: u64,
}

impl Rate {
    fn between(a: &Sample, b: &Sample) -> Rate {
        let dt = (b.at_ns - a.at_ns) as f64 / 1e9;
        let per = |x: u64, y: u64| (y - x) as f64 / dt;
        let host = b.host_pages - a.host_pages;
        Rate {
            at_ns: b.at_ns,
            dt_ns: b.at_ns - a.at_ns,
            read_iops: per(a.reads, b.reads),
            write_iops: per(a.writes, b.writes),
            read_bps: per(a.read_bytes, b.read_bytes),
            write_bps: per(a.write_bytes, b.write_bytes),
            read_ops_4k: per(a.read_bytes, b.read_bytes) / 4096.0,
            write_ops_4k: per(a.write_bytes, b.write_bytes) / 4096.0,
            write_amplification: (host > 0)
                .then(|| (b.flash_pages - a.flash_pages) as f64 / host as f64),
            gc_runs: b.gc_runs - a.gc_runs,
        }
    }
}

/// A window of samples per vSSD.
#[derive(Debug, Clone, Default)]
pub struct History {
    window_ns: u64,
    by_vssd: BTreeMap<String, VecDeque<Sample>>,
}

impl History {
    /// Keeps `window_ns` of samples.
    pub fn new(window_ns: u64) -> Self {
        History {
            window_ns,
            by_vssd: BTreeMap::new(),
        }
    }

    /// Records every vSSD of `stats` at `now_ns`; forgets vSSDs that are gone
    /// and samples older than the window. A vSSD whose counters went back
    /// (re-created under its name) starts a fresh history.
    pub fn record(&mut self, now_ns: u64, stats: &[VssdStats]) {
        let live: std::collections::BTreeSet<&str> =
            stats.iter().map(|s| s.name.as_str()).collect();
        self.by_vssd.retain(|k, _| live.contains(k.as_str()));
        for s in stats {
            let sample = Sample::of(now_ns, s);
            let q = self.by_vssd.entry(s.name.clone()).or_default();
            if q.back().is_some_and(|last| !last.precedes(&sample)) {
                q.clear();
            }
            q.push_back(sample);
            while q
                .front()
                .is_some_and(|f| now_ns.saturating_sub(f.at_ns) > self.window_ns)
            {
                q.pop_front();
            }
        }
    }

    /// The rates of `name` over the window, oldest first.
    pub fn rates(&self, name: &str) -> Vec<Rate> {
        self.by_vssd.get(name).map_or_else(Vec::new, |q| {
            q.iter()
                .zip(q.iter().skip(1))
                .map(|(a, b)| Rate::between(a, b))
                .collect()
        })
    }

    /// How many vSSDs have samples.
    pub fn len(&self) -> usize {
        self.by_vssd.len()
    }

    /// Whether no vSSD has samples.
    pub fn is_empty(&self) -> bool {
        self.by_vssd.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(name: &str, write_bytes: u64, host: u64, flash: u64) -> VssdStats {
        let mut s: VssdStats = serde_json::from_value(serde_json::json!({
            "name": name, "device": "ssd0", "write_amplification": 1.0,
            "ftl": {"capacity_bytes": 0, "host_pages_written": 0, "flash_pages_written": 0,
                    "flash_pages_read": 0, "gc_runs": 0, "gc_pages_moved": 0, "block_erases": 0,
                    "free_blocks": 0, "total_blocks": 0, "mapped_pages": 0,
                    "max_erase_count": 0, "min_erase_count": 0},
            "io": {"reads": 0, "writes": 0, "read_bytes": 0, "write_bytes": 0, "flushes": 0,
                   "trims": 0, "trim_bytes": 0, "errors": 0,
                   "read_latency": {"count":0,"mean_ns":0,"p50_ns":0,"p95_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0},
                   "write_latency": {"count":0,"mean_ns":0,"p50_ns":0,"p95_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0}}
        }))
        .unwrap();
        s.io.write_bytes = write_bytes;
        s.io.writes = write_bytes / 4096;
        s.ftl.host_pages_written = host;
        s.ftl.flash_pages_written = flash;
        s
    }

    #[test]
    fn rates_are_differences_over_the_interval() {
        let mut h = History::new(10_000_000_000);
        h.record(1_000_000_000, &[stats("a", 0, 0, 0)]);
        h.record(3_000_000_000, &[stats("a", 8 << 20, 2048, 3072)]);
        let r = h.rates("a");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].dt_ns, 2_000_000_000);
        assert_eq!(r[0].write_bps, (4 << 20) as f64);
        assert_eq!(r[0].write_ops_4k, 1024.0);
        assert_eq!(r[0].write_iops, 1024.0);
        assert_eq!(r[0].write_amplification, Some(1.5));
        assert!(h.rates("b").is_empty());
    }

    #[test]
    fn the_window_slides_and_gone_or_restarted_vssds_are_forgotten() {
        let mut h = History::new(5_000_000_000);
        for i in 0..10u64 {
            h.record(i * 1_000_000_000, &[stats("a", i * 4096, i, i)]);
        }
        // Samples at 4..=9 s are within 5 s of 9 s: five rates.
        assert_eq!(h.rates("a").len(), 5);
        // Re-created: counters went back, so no rate spans the restart.
        h.record(10_000_000_000, &[stats("a", 0, 0, 0)]);
        assert!(h.rates("a").is_empty());
        h.record(11_000_000_000, &[stats("b", 0, 0, 0)]);
        assert!(h.rates("a").is_empty());
        assert_eq!(h.len(), 1);
    }
}
