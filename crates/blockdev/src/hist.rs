//! A lock-free latency histogram: log-linear buckets (16 per power of two, so a
//! reported percentile is within 6.25% of the true value), atomics only, cheap
//! enough to record every request on the data path.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// Counts of values (nanoseconds) in log-linear buckets.
pub struct Histogram {
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
    max: AtomicU64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("summary", &self.summary())
            .finish()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }
}

fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = exp - SUB_BITS;
    let mantissa = ((v >> shift) as usize) & (SUB - 1);
    ((shift as usize + 1) << SUB_BITS) + mantissa
}

/// The largest value that falls in bucket `b` (what percentiles report).
fn upper(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let shift = (b >> SUB_BITS) - 1;
    let mantissa = (b & (SUB - 1)) as u128 | SUB as u128;
    (((mantissa + 1) << shift) - 1).min(u64::MAX as u128) as u64
}

/// Percentiles of a histogram, in nanoseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LatencySummary {
    /// Values recorded.
    pub count: u64,
    /// Mean.
    pub mean_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 95th percentile.
    pub p95_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest value.
    pub max_ns: u64,
}

impl Histogram {
    /// Records one value.
    pub fn record(&self, v: u64) {
        self.counts[bucket(v)].fetch_add(1, Relaxed);
        self.sum.fetch_add(v, Relaxed);
        self.max.fetch_max(v, Relaxed);
    }

    /// Forgets everything recorded.
    pub fn reset(&self) {
        for c in self.counts.iter() {
            c.store(0, Relaxed);
        }
        self.sum.store(0, Relaxed);
        self.max.store(0, Relaxed);
    }

    /// The value at quantile `q` (0..=1) of `counts`.
    fn quantile(counts: &[u64], total: u64, q: f64) -> u64 {
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (b, &c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return upper(b);
            }
        }
        0
    }

    /// Count, mean, percentiles and maximum.
    pub fn summary(&self) -> LatencySummary {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return LatencySummary::default();
        }
        let max = self.max.load(Relaxed);
        let q = |x| Self::quantile(&counts, total, x).min(max);
        LatencySummary {
            count: total,
            mean_ns: self.sum.load(Relaxed) / total,
            p50_ns: q(0.5),
            p95_ns: q(0.95),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn percentiles_of_a_uniform_range() {
        let h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        let s = h.summary();
        assert_eq!(s.count, 10_000);
        assert_eq!(s.max_ns, 10_000_000);
        for (got, want) in [
            (s.p50_ns, 5_000_000f64),
            (s.p99_ns, 9_900_000.0),
            (s.p999_ns, 9_990_000.0),
        ] {
            assert!((got as f64 - want).abs() / want < 0.07, "{got} vs {want}");
        }
        h.reset();
        assert_eq!(h.summary(), LatencySummary::default());
    }

    proptest! {
        #[test]
        fn bucket_bounds_hold(v in any::<u64>()) {
            let b = bucket(v);
            prop_assert!(b < BUCKETS);
            prop_assert!(upper(b) >= v);
            // Relative error of the bucket's upper bound is under 1/16.
            prop_assert!(v < 16 || (upper(b) - v) as f64 <= v as f64 / 16.0 + 1.0);
        }
    }
}
