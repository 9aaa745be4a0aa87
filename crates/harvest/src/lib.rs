//! BlockFlex storage harvesting as a library: ghost vSSDs, the gSSD pool, best-fit
//! matching and the reclaim and exception decisions (OSDI'22 §4.3 and §4.5).
//!
//! # Why a library with no I/O
//!
//! Two very different callers run the same harvesting logic: the daemon, which lends
//! real emulated flash to harvest tenants over NBD (issue 3), and the fleet
//! simulator, which replays 60,000 harvest tenants against 4,000 regular ones on a
//! virtual clock (issue 4). So this crate owns only the decisions: it never touches
//! flash, never reads the wall clock (time comes in as [`clock::Nanos`]), and returns
//! actions ([`ReclaimAction`], [`UnderHarvestAction`]) that each caller carries out
//! on its own data plane or model.
//!
//! # Pieces
//!
//! * [`Gssd`]: Figure 10's metadata; [`HarvestConfig`]: the granularity (one channel,
//!   a block chunk, 30 minutes) and timers; [`Demand`]: what a harvest tenant asks.
//! * [`GssdPool`]: Figure 11's lists keyed by <capacity, bandwidth>, sorted by expiry
//!   farthest first; best-fit; insert, remove, assign, release; the refresh that
//!   drops expired unassigned gSSDs; early reclamation with a reserved replacement.
//!   The [`pool`] module docs say exactly what "best" means.
//! * [`reclaim`]: the pure rules ([`plan_release`], [`plan_early_reclaim`],
//!   [`plan_under_harvest`]), the Table 1 classifier [`classify`], and the
//!   caller-driven [`RefreshTimer`].
//! * [`concurrent`]: the pool shared between threads, in three schemes.
//!
//! # Example
//!
//! ```
//! use clock::SEC;
//! use harvest::{Demand, Gssd, GssdPool, HarvestConfig, ReclaimAction};
//!
//! let cfg = HarvestConfig { chunk_blocks: 64, ..HarvestConfig::default() };
//! let mut pool = GssdPool::new(cfg)?;
//! // vSSD 7 is predicted to have 128 free blocks on 2 channels for 3 hours.
//! let (cap, bw, lasts) = cfg.harvestable(150, 2, 3 * 3600 * SEC).unwrap();
//! pool.insert(Gssd::new(&cfg, 1, Some(7), cap, bw, 0, lasts)?)?;
//! // Harvest tenant 42 needs 100 blocks on 1 channel for an hour.
//! let d = Demand { capacity: 100, bandwidth: 1, duration: 3600 * SEC };
//! let got = pool.harvest(42, &d, 0)?.expect("gSSD 1 fits");
//! assert_eq!((got.id, got.tenant), (1, Some(42)));
//! // Job done after an hour: 2 hours are left, so the gSSD goes back to the pool.
//! let r = pool.release(1, 42, 3600 * SEC)?;
//! assert_eq!(r.action, ReclaimAction::ReturnToPool);
//! # Ok::<(), harvest::HarvestError>(())
//! ```
//!
//! # Concurrency scheme, and why
//!
//! The paper allocates from lock-free CAS lists. Here [`MutexPool`] (one
//! `parking_lot::Mutex` around a [`GssdPool`]), [`RwPool`] (one `parking_lot::RwLock`,
//! lookups shared) and [`ShardedPool`] (8 shards by id, a lookup asking every shard)
//! were measured with `benches/pool.rs` on this 2-core machine, 10,000 gSSDs in the
//! pool (`cargo bench -p harvest --bench pool -- --warm-up-time 1
//! --measurement-time 3`); time per operation as seen by each thread:
//!
//! | operation (10,000 gSSDs)          | paper  | mutex  | rwlock | sharded8 |
//! |-----------------------------------|--------|--------|--------|----------|
//! | best-fit lookup, 1 thread         | 1.2 µs | 52 ns  | 57 ns  | 425 ns   |
//! | best-fit lookup, 2 threads        |        | 116 ns | 103 ns | 664 ns   |
//! | creation (insert+remove), 1 thread| 61 µs  | 152 ns | 148 ns | 267 ns   |
//! | creation (insert+remove), 2 thr.  |        | 312 ns | 414 ns | 447 ns   |
//! | harvest+release, 1 thread         |        | 204 ns | 180 ns | 821 ns   |
//! | harvest+release, 2 threads        |        | 434 ns | 571 ns | 4.1 µs   |
//!
//! (Criterion's point estimates from one run, 2026-11-21, with a load average of
//! 2–3 from other work on the two cores; the two-thread lookup of `mutex` ranged
//! 104–178 ns over five runs. A control with one private pool per thread runs
//! lookups at 54–71 ns per thread, so sharing one pool costs about 30–100 ns per
//! lookup here.)
//!
//! **flexssd uses [`MutexPool`]**: one lock is 23x faster than the paper for a
//! lookup and 400x for a creation on one thread, and 10x and 195x with two threads
//! contending in this run (the contended lookup was 7–11.5x across runs, so it
//! meets the 10x goal only when the machine is quiet). Sharding loses everywhere: a best fit must ask every shard (8 lock
//! round trips), and creation takes a second lock for the one-gSSD-per-home map.
//! The reader-writer lock helps only read-only lookups under contention (about 10%,
//! within run-to-run noise) and is slower for every change, and allocation
//! (harvest) is a change. Like [`RwPool`], and unlike [`ShardedPool`], its best fit
//! is linearizable (exactly the best gSSD at the instant of the call) and its early
//! reclamation reserves the replacement and removes the old gSSD in one atomic
//! step. Lock-free lists would only pay off with many more cores allocating at once
//! than a host's harvest manager sees; gSSDs live for hours.

#![warn(missing_docs)]

pub mod concurrent;
pub mod gssd;
pub mod pool;
pub mod reclaim;

pub use concurrent::{MutexPool, RwPool, ShardedPool, SharedPool};
pub use gssd::{Demand, ExpiryOrder, Gssd, GssdId, HarvestConfig, TenantId, VssdId};
pub use pool::{GssdPool, Reclaimed, RefreshReport};
pub use reclaim::{
    classify, plan_early_reclaim, plan_release, plan_under_harvest, Exceptions, ReclaimAction,
    RefreshTimer, Resources, UnderHarvestAction,
};

use clock::Nanos;

/// Everything that can go wrong in the harvesting library: bad input, or an
/// operation that does not match the gSSD's state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HarvestError {
    /// A configuration granule or period is zero.
    #[error("harvest config: {field} must be greater than zero")]
    BadConfig {
        /// The offending field.
        field: &'static str,
    },
    /// An expiry order that is neither `nearest` nor `farthest`.
    #[error("expiry order {0:?}: use nearest or farthest")]
    BadExpiryOrder(String),
    /// A demand with a zero capacity, bandwidth or duration.
    #[error(
        "demand {0:?} has a zero dimension: capacity, bandwidth and duration must all be positive"
    )]
    ZeroDemand(Demand),
    /// A gSSD with no channel.
    #[error("a gSSD needs at least one channel of bandwidth")]
    ZeroBandwidth,
    /// A gSSD capacity that is not a positive multiple of the chunk.
    #[error(
        "gSSD capacity {capacity} blocks is not a positive multiple of the {chunk}-block chunk"
    )]
    UnalignedCapacity {
        /// The capacity given, in blocks.
        capacity: u64,
        /// The chunk, in blocks.
        chunk: u64,
    },
    /// A gSSD that would last less than one duration granule.
    #[error("gSSD would last {lasts} ns, less than the {granule} ns duration granule")]
    TooShort {
        /// How long it would last.
        lasts: Nanos,
        /// The granule.
        granule: Nanos,
    },
    /// A gSSD id already in the pool.
    #[error("gSSD {0} is already in the pool")]
    DuplicateId(GssdId),
    /// A second gSSD for one home vSSD (the paper allows one per vSSD).
    #[error("vSSD {home} already lends gSSD {existing}; a vSSD may lend only one gSSD at a time")]
    HomeAlreadyLends {
        /// The home vSSD.
        home: VssdId,
        /// The gSSD it already lends.
        existing: GssdId,
    },
    /// A gSSD inserted already assigned.
    #[error("gSSD {0} is assigned to a tenant; only unassigned gSSDs can be added to the pool")]
    InsertAssigned(GssdId),
    /// No such gSSD in the pool.
    #[error("no gSSD {0} in the pool")]
    UnknownGssd(GssdId),
    /// The gSSD is assigned to a tenant.
    #[error("gSSD {id} is in use by harvest tenant {tenant}")]
    InUse {
        /// The gSSD.
        id: GssdId,
        /// Its tenant.
        tenant: TenantId,
    },
    /// A release by a tenant that does not hold the gSSD.
    #[error("gSSD {id} is not assigned to tenant {tenant} (assigned to {actual:?})")]
    NotAssignedTo {
        /// The gSSD.
        id: GssdId,
        /// The tenant that tried to release it.
        tenant: TenantId,
        /// Its actual tenant, if any.
        actual: Option<TenantId>,
    },
}

#[cfg(test)]
mod proptests;
