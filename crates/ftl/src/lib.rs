//! Virtual SSDs (vSSDs): isolated, per-tenant flash translation layers.
//!
//! A [`Vssd`] owns a set of [`Extent`]s of one [`flash::FlashDevice`] (normally whole
//! channels, as in BlockFlex, so tenants never share a die) and turns them into a
//! byte-addressed [`blockdev::BlockDev`]:
//!
//! * **page-level mapping** (logical page → physical page), writes striped page by
//!   page over the vSSD's parallel units (channel first, then die), sub-page writes
//!   by read-modify-write;
//! * **garbage collection** per parallel unit when its free blocks run low, with the
//!   victim chosen by a [`gc::GcPolicy`] (greedy or cost-benefit), moved pages keeping
//!   their sequence numbers;
//! * **wear-aware allocation**: a new block is the least-erased free block of its unit;
//! * **TRIM / write-zeroes** that unmap pages and persist a trim record in flash;
//! * **crash recovery** from the pages' out-of-band records plus checkpoints
//!   ([`CheckpointStore`]): a checkpoint records, for each mapped logical page, the
//!   sequence number of its current content; recovery scans the OOB area, maps the
//!   checkpointed pages, then replays every newer data page and trim record in
//!   sequence order. Checkpoints are what let trim records be dropped;
//! * **lending** (BlockFlex harvesting): [`Vssd::lend`] empties the top blocks of
//!   some channels and hands them out as [`Extent`]s on which a ghost vSSD (another
//!   `Vssd`, another owner id) is built; the home never touches them until
//!   [`Vssd::take_back`] erases them, [`Vssd::needs_reclaim`] says when it wants
//!   them back (and [`Vssd::on_pressure`] signals it from the write path, where a
//!   write that ran out of space waits for the blocks instead of failing), and
//!   `VssdConfig::lent` makes the lent state survive restarts.

mod checkpoint;
mod error;
pub mod gc;
mod vssd;

pub use checkpoint::{CheckpointStore, DirCheckpoints, MemCheckpoints};
pub use error::FtlError;
pub use gc::GcPolicyKind;
pub use vssd::{
    default_capacity, max_capacity, Extent, FtlStats, Placement, Pressure, PressureHook, Vssd,
    VssdConfig,
};
