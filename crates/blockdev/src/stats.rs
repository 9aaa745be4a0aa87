//! Per-export I/O counters: a layer that counts operations and bytes as the client
//! sees them, before any FTL amplification, and, given a clock, histograms of the
//! *modelled* device latency (completion time minus issue time). The modelled
//! latency is what the emulated flash would take, free of host scheduling noise,
//! which is how tenant isolation is judged on a small, busy host.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use clock::Clock;

use crate::{BlockDev, Completion, Histogram, IoResult, LatencySummary, Layer, Loan};

/// Counters shared between a [`StatsLayer`] and whoever reports them.
#[derive(Debug, Default)]
pub struct IoStats {
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
    trims: AtomicU64,
    trim_bytes: AtomicU64,
    errors: AtomicU64,
    read_latency: Histogram,
    write_latency: Histogram,
}

/// A point-in-time copy of [`IoStats`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatsSnapshot {
    /// Read requests completed.
    pub reads: u64,
    /// Write requests completed (write-zeroes included).
    pub writes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written (write-zeroes included).
    pub write_bytes: u64,
    /// Flushes completed.
    pub flushes: u64,
    /// Trims completed.
    pub trims: u64,
    /// Bytes trimmed.
    pub trim_bytes: u64,
    /// Requests that failed.
    pub errors: u64,
    /// Modelled read latency since the last [`IoStats::reset_latency`] (emulation mode).
    pub read_latency: LatencySummary,
    /// Modelled write latency since the last [`IoStats::reset_latency`] (emulation mode).
    pub write_latency: LatencySummary,
}

impl IoStats {
    /// Copies the counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            reads: self.reads.load(Relaxed),
            writes: self.writes.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            flushes: self.flushes.load(Relaxed),
            trims: self.trims.load(Relaxed),
            trim_bytes: self.trim_bytes.load(Relaxed),
            errors: self.errors.load(Relaxed),
            read_latency: self.read_latency.summary(),
            write_latency: self.write_latency.summary(),
        }
    }

    /// Starts a new latency window (counters are not touched).
    pub fn reset_latency(&self) {
        self.read_latency.reset();
        self.write_latency.reset();
    }

    fn count(&self, r: IoResult, ops: &AtomicU64, bytes: Option<(&AtomicU64, u64)>) -> IoResult {
        match r {
            Ok(_) => {
                ops.fetch_add(1, Relaxed);
                if let Some((b, n)) = bytes {
                    b.fetch_add(n, Relaxed);
                }
            }
            Err(_) => {
                self.errors.fetch_add(1, Relaxed);
            }
        }
        r
    }
}

/// Counts every request that passes through it.
pub struct StatsLayer {
    inner: Arc<dyn BlockDev>,
    stats: Arc<IoStats>,
    clock: Option<Arc<dyn Clock>>,
}

impl StatsLayer {
    /// Wraps `inner`, counting into `stats`.
    pub fn new(inner: Arc<dyn BlockDev>, stats: Arc<IoStats>) -> Self {
        Self {
            inner,
            stats,
            clock: None,
        }
    }

    /// Also records modelled read and write latency, measured from `clock`'s time at
    /// issue to the completion time the device returns. Use it in emulation mode,
    /// where the device's timelines follow the clock.
    pub fn timed(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    fn latency(&self, h: &Histogram, issued: u64, r: &IoResult) {
        if let (Some(_), Ok(done)) = (&self.clock, r) {
            h.record(done.saturating_sub(issued));
        }
    }

    fn now(&self) -> u64 {
        self.clock.as_ref().map_or(0, |c| c.now())
    }
}

impl Layer for StatsLayer {
    fn inner(&self) -> &Arc<dyn BlockDev> {
        &self.inner
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        let n = buf.len() as u64;
        let t = self.now();
        let r = self.inner.read(offset, buf);
        self.latency(&self.stats.read_latency, t, &r);
        self.stats
            .count(r, &self.stats.reads, Some((&self.stats.read_bytes, n)))
    }
    /// Forwards the inner device's loans, counted as a read.
    fn read_lent(&self, offset: u64, len: usize) -> Option<IoResult<(Completion, Vec<Loan>)>> {
        let t = self.now();
        let r = self.inner.read_lent(offset, len)?;
        let done = r.as_ref().map(|(d, _)| *d).map_err(Clone::clone);
        self.latency(&self.stats.read_latency, t, &done);
        let counted = self.stats.count(
            done,
            &self.stats.reads,
            Some((&self.stats.read_bytes, len as u64)),
        );
        Some(counted.and(r))
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        let t = self.now();
        let r = self.inner.write(offset, data, fua);
        self.latency(&self.stats.write_latency, t, &r);
        self.stats.count(
            r,
            &self.stats.writes,
            Some((&self.stats.write_bytes, data.len() as u64)),
        )
    }
    fn flush(&self) -> IoResult {
        let r = self.inner.flush();
        self.stats.count(r, &self.stats.flushes, None)
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        let r = self.inner.trim(offset, len);
        self.stats
            .count(r, &self.stats.trims, Some((&self.stats.trim_bytes, len)))
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        let r = self.inner.write_zeroes(offset, len, fua);
        self.stats
            .count(r, &self.stats.writes, Some((&self.stats.write_bytes, len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Layered, MemDev};

    #[test]
    fn counts_successes_and_errors() {
        let stats = Arc::new(IoStats::default());
        let dev = Layered(StatsLayer::new(Arc::new(MemDev::new(8192)), stats.clone()));
        dev.write(0, &[1; 4096], false).unwrap();
        let mut b = [0u8; 512];
        dev.read(0, &mut b).unwrap();
        assert!(dev.read(8000, &mut b).is_err());
        dev.trim(0, 4096).unwrap();
        let s = stats.snapshot();
        assert_eq!(
            (s.reads, s.read_bytes, s.writes, s.write_bytes),
            (1, 512, 1, 4096)
        );
        assert_eq!((s.trims, s.trim_bytes, s.errors), (1, 4096, 1));
        assert_eq!(s.read_latency.count, 0, "no clock, no latency");
    }

    /// A device that completes every request 50 µs after the clock's now.
    struct Slow(Arc<clock::VirtualClock>, MemDev);
    impl BlockDev for Slow {
        fn size(&self) -> u64 {
            self.1.size()
        }
        fn read(&self, o: u64, b: &mut [u8]) -> IoResult {
            self.1.read(o, b)?;
            Ok(self.0.now() + 50_000)
        }
        fn write(&self, o: u64, d: &[u8], f: bool) -> IoResult {
            self.1.write(o, d, f)?;
            Ok(self.0.now() + 400_000)
        }
        fn flush(&self) -> IoResult {
            Ok(0)
        }
        fn trim(&self, o: u64, l: u64) -> IoResult {
            self.1.trim(o, l)
        }
        fn write_zeroes(&self, o: u64, l: u64, f: bool) -> IoResult {
            self.1.write_zeroes(o, l, f)
        }
    }

    #[test]
    fn records_modelled_latency_with_a_clock() {
        let clock = Arc::new(clock::VirtualClock::new(1_000));
        let stats = Arc::new(IoStats::default());
        let dev = Layered(
            StatsLayer::new(
                Arc::new(Slow(clock.clone(), MemDev::new(8192))),
                stats.clone(),
            )
            .timed(clock),
        );
        let mut b = [0u8; 512];
        for _ in 0..10 {
            dev.read(0, &mut b).unwrap();
        }
        dev.write(0, &b, false).unwrap();
        let s = stats.snapshot();
        assert_eq!(s.read_latency.count, 10);
        assert!(
            (50_000..=53_200).contains(&s.read_latency.p99_ns),
            "{:?}",
            s.read_latency
        );
        assert_eq!(s.write_latency.count, 1);
        stats.reset_latency();
        assert_eq!(stats.snapshot().read_latency.count, 0);
        assert_eq!(
            stats.snapshot().reads,
            10,
            "counters survive a latency reset"
        );
    }
}
