//! An emulated open-channel SSD.
//!
//! This crate knows nothing of FTLs (like MQSim's flash back end). It provides:
//!
//! * [`Geometry`]: channels × dies × planes × blocks × pages, and the flat
//!   addresses ([`BlockId`], [`PageId`]) used everywhere else;
//! * the NAND rules, enforced with clear errors: a page is programmed once, in order
//!   within its block, and only an erase (of a whole block) makes it writable again;
//!   reading a page that holds nothing is an error;
//! * a timing model ([`Timing`]): every operation takes an issue time and returns
//!   its completion time, computed from per-channel bus and per-die timelines, so a
//!   read queues behind programs and erases on the same die. That is what makes a
//!   tenant's read tail latency depend on who else writes to its dies. A read
//!   that finds its die programming or erasing suspends that operation (after a
//!   suspend latency) and the operation resumes after it, with a resume overhead
//!   and a cap on suspensions per operation, as real NAND does;
//! * an out-of-band area per page ([`Oob`]), written atomically with the page, from
//!   which an FTL rebuilds its mapping after a crash;
//! * per-block erase counts (wear);
//! * two backends: memory, and a sparse file that survives the process ([`Backend`]).
//!   Both are memory mappings: a read is a `memcpy` out of the mapping (or a
//!   loan of it); a program is a `pwrite` to the file, or on the memory backend
//!   a copy with non-temporal stores into the mapping (programs write cold
//!   pages). An erase punches a hole, so erased data is gone from the file,
//!   not merely unmapped.

pub mod crashrec;
mod device;
mod dirty;
mod geometry;
mod oob;
mod store;
mod timing;

pub use crashrec::{CrashImage, CrashPoint, Unit, UnitKind};
pub use device::{DeviceStats, FlashDevice};
pub use dirty::{DirtySet, OwnRuns};
pub use geometry::{BlockId, Geometry, PageId, Pu};
pub use oob::{Oob, OobKind, OOB_SIZE};
pub use store::Backend;
pub use timing::Timing;

/// Errors of the flash model. NAND-rule violations are bugs in the caller (the FTL)
/// and say exactly which rule was broken.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    /// An address component is out of range for the geometry.
    #[error("{what} {value} is out of range (device has {max})")]
    OutOfRange {
        /// Which address component.
        what: &'static str,
        /// The value given.
        value: u64,
        /// How many exist.
        max: u64,
    },
    /// A program that is not at the block's write pointer (NAND pages are programmed
    /// in order, once, between erases).
    #[error("NAND rule: block {block} page {page} programmed out of order (next programmable page is {next})")]
    ProgramOutOfOrder {
        /// Block.
        block: BlockId,
        /// Page within the block.
        page: u32,
        /// The block's write pointer.
        next: u32,
    },
    /// A program to a block whose pages are all programmed.
    #[error("NAND rule: block {block} is full; erase it before programming again")]
    BlockFull {
        /// Block.
        block: BlockId,
    },
    /// A read of a page that was never programmed since its block's last erase.
    #[error("read of erased page {page} in block {block}")]
    ReadErased {
        /// Block.
        block: BlockId,
        /// Page within the block.
        page: u32,
    },
    /// A block was programmed while its erase was booked but not finished
    /// (see `FlashDevice::erase_for_reuse_later`).
    #[error("block {block} was programmed before its erase was finished")]
    EraseUnfinished {
        /// Block.
        block: BlockId,
    },
    /// A block's bytes were to be discarded while it holds programmed pages.
    #[error("block {block} holds programmed pages: erase it before discarding its bytes")]
    NotErased {
        /// Block.
        block: BlockId,
    },
    /// A buffer of the wrong size.
    #[error("buffer of {got} bytes where {expected} were expected")]
    BadLength {
        /// Expected length.
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// The geometry is unusable.
    #[error("invalid geometry: {0}")]
    BadGeometry(String),
    /// A timing parameter is unusable.
    #[error("invalid timing: {key}: {reason}")]
    BadTiming {
        /// The `[devices.timing]` key at fault.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The device file exists but was made with another geometry or is not a
    /// flexssd device.
    #[error("device file {path}: {reason}")]
    BadDeviceFile {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The backing store failed.
    #[error("backing store: {0}")]
    Io(#[from] std::io::Error),
}

/// Result type of this crate.
pub type Result<T, E = FlashError> = std::result::Result<T, E>;
