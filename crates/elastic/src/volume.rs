//! What the controller drives: a pool of disks under one file system.
//!
//! The trait is the paper's GET_FS_STATS / ADD_DISK / REMOVE_DISK (§III-C). Adds and
//! removes block, as in the paper; the time they take is what the controller learns
//! from the clock it is given after they return. A real btrfs volume (in the
//! `flexssd` binary) and the trace replayer ([`crate::sim`]) both implement it.

use clock::Nanos;
use serde::{Deserialize, Serialize};

use crate::Result;

/// File-system statistics at one probe. Counters are cumulative since the volume was
/// created so the controller can take differences.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsStats {
    /// Bytes in use as the file system reports them.
    pub used: u64,
    /// Bytes written to the pool's disks so far (the predictor's `wb`).
    pub written: u64,
    /// Bytes read from the pool's disks so far (for I/O pressure).
    pub read: u64,
}

/// Where a disk is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskState {
    /// Part of the pool.
    Active,
    /// Being added.
    Adding,
    /// The file system is moving data off it.
    Removing,
}

/// One disk of the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskInfo {
    /// Name (a vSSD name, or a file name for sparse-file disks).
    pub name: String,
    /// Capacity in bytes.
    pub bytes: u64,
    /// Block device it is attached as, if any.
    pub device: Option<String>,
    /// State.
    pub state: DiskState,
}

/// A multi-disk file system the controller can grow and shrink.
pub trait Volume {
    /// Current statistics (GET_FS_STATS).
    fn stats(&mut self, now: Nanos) -> Result<FsStats>;
    /// Adds a disk of `bytes` (ADD_DISK); returns the new pool size.
    fn add_disk(&mut self, bytes: u64, now: Nanos) -> Result<u64>;
    /// Removes the most recently added disk once the file system has moved its data
    /// off it (REMOVE_DISK); returns the new pool size. On error the disk must still be
    /// attached and the file system consistent.
    fn remove_disk(&mut self, now: Nanos) -> Result<u64>;
    /// The disks, oldest first.
    fn disks(&self) -> Vec<DiskInfo>;
    /// Pool size: the sum of the disks' capacities.
    fn size(&self) -> u64 {
        self.disks().iter().map(|d| d.bytes).sum()
    }
}
