//! The IO cost model of the GREM paper (Section IV-C, Fig. 7): the total
//! latency of the SSD and HDD operations a cache policy causes, counting both
//! serving IOs and moving content between the disk and the cache.
//!
//! Why it matters: hit ratio alone flatters fine-grained policies. GLRU and
//! CAR admit a 4 KiB line on every miss and write dirty lines back one by one;
//! the coarse policies (vFRM, GREM, D-GREM) move 128 KiB lines once per epoch.
//! The paper measured its latencies on an Intel DC S3500 (80 GB) SSD and a
//! WD20EURS 5400 rpm HDD at 4 KiB and 128 KiB, but does not print the numbers,
//! so the defaults here are derived from those devices' data sheets:
//!
//! * SSD: 50 µs read and 65 µs write typical 4 KiB latency; 340 MB/s read and
//!   100 MB/s write sequential bandwidth for the extra 124 KiB of a 128 KiB
//!   IO: 423 µs and 1335 µs;
//! * HDD: 5400 rpm gives 5.56 ms average rotational latency; with an assumed
//!   8.9 ms average seek (typical of 3.5-inch desktop drives; WD does not
//!   publish it) and 110 MB/s sustained transfer, a random 4 KiB IO costs
//!   14.5 ms and a 128 KiB one 15.6 ms, for reads and writes alike.
//!
//! An IO of `b` bytes costs the straight line through the two points
//! (4 KiB, `*_4k_us`) and (128 KiB, `*_128k_us`), extended beyond them. What
//! is charged ([`crate::sim`] applies it per request):
//!
//! | event | charge |
//! |---|---|
//! | read hit | SSD read of the hit blocks |
//! | read miss | HDD read of the missed blocks, plus an SSD write of the admitted lines (fill) |
//! | write hit, or write miss that is admitted | SSD write (the line is then dirty) |
//! | write miss not admitted (coarse policies) | HDD write |
//! | eviction of a dirty line | SSD read + HDD write of the line |
//! | migration of a line into the cache (coarse policies' epoch updates) | HDD read + SSD write of the line |
//!
//! The *normalised* cost divides by the cost of the same requests with no
//! cache at all (every request one HDD IO of its size), so 1.0 means the cache
//! saved nothing and values above 1.0 mean its content updates cost more than
//! its hits saved.

use serde::{Deserialize, Serialize};

use crate::CacheError;

const SMALL: f64 = 4096.0;
const LARGE: f64 = 131072.0;

/// Device latencies for the IO cost model, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostModel {
    /// SSD read of 4 KiB.
    pub ssd_read_4k_us: f64,
    /// SSD write of 4 KiB.
    pub ssd_write_4k_us: f64,
    /// SSD read of 128 KiB.
    pub ssd_read_128k_us: f64,
    /// SSD write of 128 KiB.
    pub ssd_write_128k_us: f64,
    /// HDD read of 4 KiB (random).
    pub hdd_read_4k_us: f64,
    /// HDD write of 4 KiB (random).
    pub hdd_write_4k_us: f64,
    /// HDD read of 128 KiB (random).
    pub hdd_read_128k_us: f64,
    /// HDD write of 128 KiB (random).
    pub hdd_write_128k_us: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            ssd_read_4k_us: 50.0,
            ssd_write_4k_us: 65.0,
            ssd_read_128k_us: 423.0,
            ssd_write_128k_us: 1335.0,
            hdd_read_4k_us: 14_500.0,
            hdd_write_4k_us: 14_500.0,
            hdd_read_128k_us: 15_600.0,
            hdd_write_128k_us: 15_600.0,
        }
    }
}

/// The four device operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevOp {
    /// Read from the SSD.
    SsdRead = 0,
    /// Write to the SSD.
    SsdWrite = 1,
    /// Read from the HDD.
    HddRead = 2,
    /// Write to the HDD.
    HddWrite = 3,
}

/// Operation and byte counts per [`DevOp`], from which a cost follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OpCounts {
    /// Operations, indexed by [`DevOp`].
    pub ops: [u64; 4],
    /// Bytes, indexed by [`DevOp`].
    pub bytes: [u64; 4],
}

impl OpCounts {
    /// Records one operation of `bytes`.
    #[inline]
    pub fn add(&mut self, op: DevOp, bytes: u64) {
        self.ops[op as usize] += 1;
        self.bytes[op as usize] += bytes;
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &OpCounts) {
        for i in 0..4 {
            self.ops[i] += other.ops[i];
            self.bytes[i] += other.bytes[i];
        }
    }
}

impl CostModel {
    /// Checks that every latency is a positive number and no 128 KiB IO is
    /// cheaper than a 4 KiB one.
    pub fn validate(&self) -> Result<(), CacheError> {
        for (name, small, large) in self.pairs() {
            if !(small.is_finite() && small > 0.0 && large.is_finite() && large > 0.0) {
                return Err(CacheError::Config(format!(
                    "cost model: {name} latencies must be positive numbers (4k = {small}, 128k = {large})"
                )));
            }
            if large < small {
                return Err(CacheError::Config(format!(
                    "cost model: {name}_128k_us = {large} is less than {name}_4k_us = {small}"
                )));
            }
        }
        Ok(())
    }

    /// Parses a TOML document with any of the fields; the rest keep their
    /// defaults. Unknown fields and bad values are errors naming them.
    pub fn from_toml(text: &str) -> Result<Self, CacheError> {
        let c: CostModel = toml::from_str(text).map_err(|e| CacheError::Config(e.to_string()))?;
        c.validate()?;
        Ok(c)
    }

    fn pairs(&self) -> [(&'static str, f64, f64); 4] {
        [
            ("ssd_read", self.ssd_read_4k_us, self.ssd_read_128k_us),
            ("ssd_write", self.ssd_write_4k_us, self.ssd_write_128k_us),
            ("hdd_read", self.hdd_read_4k_us, self.hdd_read_128k_us),
            ("hdd_write", self.hdd_write_4k_us, self.hdd_write_128k_us),
        ]
    }

    /// Intercept (µs) and slope (µs per byte) of an operation's latency line.
    fn line(&self, op: DevOp) -> (f64, f64) {
        let (_, small, large) = self.pairs()[op as usize];
        let slope = (large - small) / (LARGE - SMALL);
        (small - slope * SMALL, slope)
    }

    /// Latency of one `op` of `bytes`, in µs.
    pub fn latency_us(&self, op: DevOp, bytes: u64) -> f64 {
        let (a, k) = self.line(op);
        a + k * bytes as f64
    }

    /// Total latency of the counted operations, in µs. Because the latency
    /// is linear in size, this equals the sum over the single operations.
    pub fn cost_us(&self, c: &OpCounts) -> f64 {
        [
            DevOp::SsdRead,
            DevOp::SsdWrite,
            DevOp::HddRead,
            DevOp::HddWrite,
        ]
        .iter()
        .map(|&op| {
            let (a, k) = self.line(op);
            a * c.ops[op as usize] as f64 + k * c.bytes[op as usize] as f64
        })
        .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_passes_through_both_points_and_sums_linearly() {
        let m = CostModel::default();
        m.validate().unwrap();
        assert!((m.latency_us(DevOp::SsdRead, 4096) - 50.0).abs() < 1e-9);
        assert!((m.latency_us(DevOp::SsdRead, 131072) - 423.0).abs() < 1e-9);
        assert!((m.latency_us(DevOp::HddWrite, 131072) - 15_600.0).abs() < 1e-9);
        let mut c = OpCounts::default();
        c.add(DevOp::HddRead, 4096);
        c.add(DevOp::HddRead, 131072);
        c.add(DevOp::SsdWrite, 65536);
        let direct = m.latency_us(DevOp::HddRead, 4096)
            + m.latency_us(DevOp::HddRead, 131072)
            + m.latency_us(DevOp::SsdWrite, 65536);
        assert!((m.cost_us(&c) - direct).abs() < 1e-6);
    }

    #[test]
    fn config_rejects_unknown_fields_and_bad_values() {
        let e = toml::from_str::<CostModel>("ssd_read_4k_us = 10\nflash_us = 3\n").unwrap_err();
        assert!(e.to_string().contains("flash_us"), "{e}");
        let m: CostModel = toml::from_str("ssd_read_4k_us = 10").unwrap();
        assert_eq!(m.ssd_read_4k_us, 10.0);
        assert_eq!(m.hdd_read_4k_us, 14_500.0);
        let e = CostModel::from_toml("hdd_read_128k_us = 1.0").unwrap_err();
        assert!(e.to_string().contains("hdd_read_128k_us"), "{e}");
        assert!(CostModel::from_toml("x = 1").is_err());
        let bad = CostModel {
            hdd_read_128k_us: 100.0,
            ..CostModel::default()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("hdd_read_128k_us"), "{e}");
        let bad = CostModel {
            ssd_write_4k_us: -1.0,
            ..CostModel::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("ssd_write"));
    }
}
