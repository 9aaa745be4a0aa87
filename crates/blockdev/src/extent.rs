//! Allocation maps: which parts of a device hold data and which are holes.
//!
//! Why: a client copying or backing up a sparse device (`nbdcopy`, `qemu-img
//! convert`, `nbdinfo --map`) should skip what was never written or was
//! trimmed, instead of reading and comparing zeros. Each device knows its own
//! holes (an FTL knows which logical pages are unmapped, a harvest volume which
//! ranges no gSSD backs, a file which ranges the file system has not
//! allocated), so [`BlockDev::allocation`](crate::BlockDev::allocation)
//! reports them as a run of [`MapExtent`]s, and the NBD server turns those into
//! `NBD_CMD_BLOCK_STATUS` replies.

/// What one extent of a device holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alloc {
    /// Written data (or the device cannot tell): reads return what was written.
    Data,
    /// Never written, or trimmed: nothing is stored there and reads return zeros.
    Hole,
}

/// A run of `len` bytes that are all [`Alloc::Data`] or all [`Alloc::Hole`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapExtent {
    /// Length in bytes (never zero in a map that [`push_extent`] built).
    pub len: u64,
    /// What the run holds.
    pub alloc: Alloc,
}

/// Appends `len` bytes of `alloc` to a map, merging with the last extent when
/// it is of the same kind; a zero length adds nothing.
pub fn push_extent(map: &mut Vec<MapExtent>, len: u64, alloc: Alloc) {
    if len == 0 {
        return;
    }
    match map.last_mut() {
        Some(last) if last.alloc == alloc => last.len += len,
        _ => map.push(MapExtent { len, alloc }),
    }
}

/// Total bytes a map covers.
pub fn covered(map: &[MapExtent]) -> u64 {
    map.iter().map(|e| e.len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_merges_runs_and_skips_empty() {
        let mut m = Vec::new();
        push_extent(&mut m, 0, Alloc::Data);
        push_extent(&mut m, 10, Alloc::Hole);
        push_extent(&mut m, 5, Alloc::Hole);
        push_extent(&mut m, 1, Alloc::Data);
        push_extent(&mut m, 0, Alloc::Hole);
        assert_eq!(
            m,
            [
                MapExtent {
                    len: 15,
                    alloc: Alloc::Hole
                },
                MapExtent {
                    len: 1,
                    alloc: Alloc::Data
                }
            ]
        );
        assert_eq!(covered(&m), 16);
    }
}
