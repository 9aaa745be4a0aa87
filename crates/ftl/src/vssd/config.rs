//! What a vSSD is made of and what it reports: the public configuration types
//! ([`Extent`], [`VssdConfig`]), the counters ([`FtlStats`]), the capacity rules
//! ([`max_capacity`], [`default_capacity`]) and the validation of a configuration.
//!
//! Kept apart from the FTL's mechanics because these are the crate's contract with
//! the control plane (serialised in its state files): they change for different
//! reasons, and more rarely, than mapping, allocation or GC.

use flash::{BlockId, Geometry};
use serde::{Deserialize, Serialize};

use super::mapping::TRIM_REC;
use crate::gc::GC_SOFT;
use crate::{FtlError, GcPolicyKind};

/// A range of blocks on one channel: blocks `first_block .. first_block + blocks` of
/// every plane of every die of `channel`. A vSSD on dedicated channels has one
/// extent per channel covering all of its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Extent {
    /// Channel.
    pub channel: u32,
    /// First block index within each plane.
    pub first_block: u32,
    /// Number of blocks per plane.
    pub blocks: u32,
}

impl Extent {
    /// All the blocks of one channel.
    pub fn whole_channel(geo: &Geometry, channel: u32) -> Self {
        Self {
            channel,
            first_block: 0,
            blocks: geo.blocks_per_plane,
        }
    }

    /// Whether block `b` of a device with geometry `geo` lies in this extent.
    pub fn contains(&self, geo: &Geometry, b: BlockId) -> bool {
        let i = geo.block_in_plane(b);
        geo.channel_of(b) == self.channel
            && i >= self.first_block
            && (i as u64) < self.first_block as u64 + self.blocks as u64
    }
}

/// The block runs a vSSD on `extents` holds alone once `lent` is lent out:
/// every plane's range of each extent, less the lent top of it (see
/// [`flash::OwnRuns`]). A whole channel is one run; neighbouring whole
/// channels join.
pub(crate) fn own_runs(geo: &Geometry, extents: &[Extent], lent: &[Extent]) -> flash::OwnRuns {
    let mut runs = Vec::new();
    for x in extents {
        let mut ranges = vec![(x.first_block, x.first_block + x.blocks)];
        for l in lent.iter().filter(|l| l.channel == x.channel) {
            let (a, b) = (l.first_block, l.first_block + l.blocks);
            ranges = ranges
                .into_iter()
                .flat_map(|(lo, hi)| [(lo, hi.min(a)), (lo.max(b), hi)])
                .filter(|(lo, hi)| lo < hi)
                .collect();
        }
        for die in 0..geo.dies_per_channel {
            for plane in 0..geo.planes_per_die {
                let base = geo.block_id(x.channel, die, plane, 0);
                runs.extend(ranges.iter().map(|&(lo, hi)| base + lo..base + hi));
            }
        }
    }
    flash::OwnRuns::new(runs)
}

/// What a vSSD is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VssdConfig {
    /// Owner id written in every page's OOB record; unique per device.
    pub id: u32,
    /// Human name (the NBD export name).
    pub name: String,
    /// The flash it owns.
    pub extents: Vec<Extent>,
    /// Logical size exported, in bytes (a multiple of the page size).
    pub capacity_bytes: u64,
    /// GC victim policy.
    #[serde(default)]
    pub gc: GcPolicyKind,
    /// Ranges of `extents` lent to ghost vSSDs ([`Vssd::lend`](crate::Vssd::lend)): not this vSSD's
    /// flash until taken back, so it never allocates, reads, scans or erases them.
    /// At most one per channel, each inside one of `extents`.
    #[serde(default)]
    pub lent: Vec<Extent>,
}

/// Counters and gauges of a vSSD.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FtlStats {
    /// Exported size in bytes.
    pub capacity_bytes: u64,
    /// Pages written on behalf of the host (sub-page writes count one page).
    pub host_pages_written: u64,
    /// Pages programmed in flash (host + GC moves + trim records).
    pub flash_pages_written: u64,
    /// Pages read from flash (host reads, read-modify-writes and GC).
    pub flash_pages_read: u64,
    /// GC runs (one victim block each).
    pub gc_runs: u64,
    /// Valid pages moved by GC.
    pub gc_pages_moved: u64,
    /// Blocks erased by this vSSD.
    pub block_erases: u64,
    /// Free (erased) blocks now.
    pub free_blocks: u64,
    /// Blocks owned.
    pub total_blocks: u64,
    /// Logical pages currently mapped.
    pub mapped_pages: u64,
    /// Largest erase count among owned blocks.
    pub max_erase_count: u32,
    /// Smallest erase count among owned blocks.
    pub min_erase_count: u32,
    /// Blocks lent to ghost vSSDs now (counted in `total_blocks`, never free).
    #[serde(default)]
    pub lent_blocks: u64,
    /// Valid pages moved off blocks being lent (also counted in
    /// `flash_pages_written`).
    #[serde(default)]
    pub lend_pages_moved: u64,
    /// Syncs of the vSSD's writes that erases waited for: GC's (on a device
    /// that can outlive a crash, one waits only when its block holds a page
    /// a sync made durable, and then shares one sync with every erase
    /// waiting) and lending's (one each); 0 on memory devices.
    #[serde(default)]
    pub erase_syncs: u64,
}

impl FtlStats {
    /// Flash pages programmed per host page written (1.0 when nothing was written).
    pub fn write_amplification(&self) -> f64 {
        if self.host_pages_written == 0 {
            1.0
        } else {
            self.flash_pages_written as f64 / self.host_pages_written as f64
        }
    }
}

/// The largest capacity in bytes a vSSD on `extents` may export: all its flash but
/// the blocks GC needs to make progress, and at most 95% of it.
pub fn max_capacity(geo: &Geometry, extents: &[Extent]) -> u64 {
    let blocks: u64 = extents.iter().map(|e| e.blocks as u64).sum::<u64>()
        * geo.dies_per_channel as u64
        * geo.planes_per_die as u64;
    let pus = extents.len() as u64 * geo.dies_per_channel as u64;
    let usable = blocks.saturating_sub(pus * (GC_SOFT as u64 + 2));
    let pages =
        (usable * geo.pages_per_block as u64).min(blocks * geo.pages_per_block as u64 * 95 / 100);
    pages * geo.page_size as u64
}

/// The capacity a vSSD on `extents` exports unless told otherwise: 87.5% of its raw
/// flash (12.5% over-provisioning), within [`max_capacity`].
pub fn default_capacity(geo: &Geometry, extents: &[Extent]) -> u64 {
    let raw: u64 = extents.iter().map(|e| e.blocks as u64).sum::<u64>()
        * geo.dies_per_channel as u64
        * geo.planes_per_die as u64
        * geo.block_bytes();
    let pages = raw * 7 / 8 / geo.page_size as u64;
    (pages * geo.page_size as u64).min(max_capacity(geo, extents))
}

/// Refuses a configuration that the device cannot hold or that makes no sense.
pub(super) fn validate(geo: &Geometry, cfg: &VssdConfig) -> Result<(), FtlError> {
    let bad = |m: String| Err(FtlError::Config(format!("vSSD {}: {m}", cfg.name)));
    if cfg.extents.is_empty() {
        return bad("has no flash (no extents)".into());
    }
    for (i, e) in cfg.extents.iter().enumerate() {
        if e.channel >= geo.channels {
            return bad(format!(
                "channel {} does not exist (device has {})",
                e.channel, geo.channels
            ));
        }
        if e.blocks == 0 || e.first_block as u64 + e.blocks as u64 > geo.blocks_per_plane as u64 {
            return bad(format!(
                "block range {}..{} on channel {} is empty or past the {} blocks per plane",
                e.first_block,
                e.first_block as u64 + e.blocks as u64,
                e.channel,
                geo.blocks_per_plane
            ));
        }
        for o in &cfg.extents[..i] {
            if o.channel == e.channel
                && o.first_block < e.first_block + e.blocks
                && e.first_block < o.first_block + o.blocks
            {
                return bad(format!("extents overlap on channel {}", e.channel));
            }
        }
    }
    let max = max_capacity(geo, &cfg.extents);
    if cfg.capacity_bytes == 0 || !cfg.capacity_bytes.is_multiple_of(geo.page_size as u64) {
        return bad(format!(
            "capacity {} must be a positive multiple of the {}-byte page",
            cfg.capacity_bytes, geo.page_size
        ));
    }
    if cfg.capacity_bytes > max {
        return bad(format!(
            "capacity {} exceeds the {} bytes its flash can hold with GC headroom",
            cfg.capacity_bytes, max
        ));
    }
    if cfg.capacity_bytes / geo.page_size as u64 >= TRIM_REC as u64 {
        return bad("too many logical pages".into());
    }
    for (i, l) in cfg.lent.iter().enumerate() {
        let inside = cfg.extents.iter().any(|e| {
            e.channel == l.channel
                && e.first_block <= l.first_block
                && l.first_block as u64 + l.blocks as u64 <= e.first_block as u64 + e.blocks as u64
        });
        if l.blocks == 0 || !inside {
            return bad(format!(
                "lent range {}..{} on channel {} is empty or not inside one of its extents",
                l.first_block,
                l.first_block as u64 + l.blocks as u64,
                l.channel
            ));
        }
        if cfg.lent[..i].iter().any(|o| o.channel == l.channel) {
            return bad(format!("more than one lent range on channel {}", l.channel));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry {
            channels: 4,
            dies_per_channel: 2,
            planes_per_die: 1,
            blocks_per_plane: 8,
            pages_per_block: 4,
            page_size: 4096,
        }
    }

    /// Whole neighbouring channels are one run; a lent top of a channel and a
    /// vSSD on part of each plane leave a run per plane.
    #[test]
    fn own_runs_are_the_extents_less_what_is_lent() {
        let g = geo();
        let whole = [Extent::whole_channel(&g, 1), Extent::whole_channel(&g, 2)];
        #[allow(clippy::single_range_in_vec_init)]
        let one = vec![16..48];
        assert_eq!(own_runs(&g, &whole, &[]).runs(), one);
        let lent = [Extent {
            channel: 2,
            first_block: 6,
            blocks: 2,
        }];
        // Channel 2's dies hold blocks 32..40 and 40..48; the top two of each
        // are lent.
        assert_eq!(own_runs(&g, &whole, &lent).runs(), &[16..38, 40..46]);
        let part = [Extent {
            channel: 0,
            first_block: 2,
            blocks: 3,
        }];
        assert_eq!(own_runs(&g, &part, &[]).runs(), &[2..5, 10..13]);
        // Every run is the vSSD's own: no block of another extent in it.
        for r in own_runs(&g, &whole, &lent).runs() {
            for b in r.clone() {
                assert!(whole.iter().any(|x| x.contains(&g, b)));
                assert!(!lent.iter().any(|x| x.contains(&g, b)));
            }
        }
    }
}
