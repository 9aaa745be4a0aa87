//! Per-export I/O counters: a layer that counts operations and bytes as the client
//! sees them, before any FTL amplification.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::{BlockDev, IoResult, Layer};

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
        }
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
}

impl StatsLayer {
    /// Wraps `inner`, counting into `stats`.
    pub fn new(inner: Arc<dyn BlockDev>, stats: Arc<IoStats>) -> Self {
        Self { inner, stats }
    }
}

impl Layer for StatsLayer {
    fn inner(&self) -> &Arc<dyn BlockDev> {
        &self.inner
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        let n = buf.len() as u64;
        let r = self.inner.read(offset, buf);
        self.stats
            .count(r, &self.stats.reads, Some((&self.stats.read_bytes, n)))
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        let r = self.inner.write(offset, data, fua);
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
    }
}
