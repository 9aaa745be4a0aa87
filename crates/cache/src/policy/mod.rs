//! The replacement policies, one file each.
//!
//! The conventional policies ([`glru`], [`arc`], [`car`]) decide on every
//! access at 4 KiB lines, as the paper's baselines do. The coarse policies
//! ([`vfrm`], [`isolation`], [`grem`], [`dgrem`]) keep popularity per 1 MiB bin and change
//! the cache's content only at epoch ends (lazy, asynchronous placement in the
//! real systems), moving whole bins as 128 KiB lines; between epochs a miss
//! does not admit anything.

pub mod arc;
pub mod car;
pub mod dgrem;
pub mod glru;
pub mod grem;
pub mod isolation;
pub mod vfrm;

use crate::TenantOccupancy;

/// Per-tenant resident line counts as [`TenantOccupancy`] entries.
pub(crate) fn push_occupancy(
    resident: &[u64],
    reserved: Option<&[u64]>,
    out: &mut Vec<TenantOccupancy>,
) {
    let n = resident.len().max(reserved.map_or(0, <[u64]>::len));
    for t in 0..n {
        out.push(TenantOccupancy {
            tenant: t as u32,
            resident_lines: resident.get(t).copied().unwrap_or(0),
            reserved_lines: reserved.map(|r| r.get(t).copied().unwrap_or(0)),
        });
    }
}
