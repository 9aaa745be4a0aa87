//! A shared flash cache tier over a slow backing store: the data path of GREM
//! and D-GREM (and of their baselines).
//!
//! Why a separate layer: the replacement policies of the [`cache`] crate only
//! decide (hit or miss, what to admit, what to evict); something has to move
//! the bytes. A [`CacheTier`] owns a slow backing store (a [`FileStore`], a
//! sparse file that an [`HddModel`] can time like a disk) and a flash device
//! for the cache (in the daemon, a vSSD carved from the emulated SSD), cuts
//! the backing store into several tenant volumes ([`TierVolume`], each a
//! [`blockdev::BlockDev`] that the NBD server exports), and lets one policy,
//! shared by all tenants, decide which 4 KiB blocks live in flash.
//!
//! The design favours being obviously correct over being clever:
//! * **write-through**: every write goes to the backing store first; a cached
//!   copy is then updated in place, so flash never holds anything the backing
//!   store does not, and losing the cache loses nothing;
//! * **one lock** around the policy, the slot map and the device calls of a
//!   request, so no read can fill a slot with data a concurrent write is
//!   replacing (requests of the tier's volumes are serialised; the flash and
//!   the backing store are each a single device anyway);
//! * **a policy change empties the cache** and starts the new policy cold.
//!
//! Every operation returns its completion time on the injected clock, the
//! latest completion among the device operations it did, like every flexssd
//! device; no wall clock is read.

mod backing;
mod cache_tier;

pub use backing::{FileStore, HddModel};
pub use cache_tier::{CacheTier, TierSetup, TierStats, TierVolume, VolumeSpec, VolumeStats};

/// Why a tier could not be built or changed.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    /// A value that cannot work (the message names it).
    #[error("{0}")]
    Invalid(String),
    /// The policy refused (unknown name, a size too small for its lines or bins).
    #[error(transparent)]
    Cache(#[from] cache::CacheError),
    /// A file operation on the backing store failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A device operation failed while the tier was being set up or changed.
    #[error("{what}: {source}")]
    Device {
        /// What was being done.
        what: String,
        /// The error.
        source: blockdev::IoError,
    },
}
