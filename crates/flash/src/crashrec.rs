//! Power-loss recording: what a host crash may leave of the device.
//!
//! `kill -9` keeps every byte of a `MAP_SHARED` mapping (the page cache
//! survives the process). A host crash or power loss does not: the kernel may
//! have written back any subset of the pages dirtied since they were last
//! synced, and the page data and the OOB record of one flash page live in two
//! files, so either may have reached the disk without the other.
//!
//! A device that records ([`FlashDevice::record_crashes`]) keeps, beside its
//! bytes, a *durable image* (what the disk is known to hold: everything a
//! completed sync covered) and the log of every write since, in order, as
//! separate [`Unit`]s: a page's data, its OOB record, the OOB records of an
//! erased block and its erase count (and its data, zeros, when the erase
//! punched it: a block that changes hands; see `Store::erase`), each cut at OS page
//! boundaries (the kernel's unit of write-back). A sync of some byte ranges
//! moves the units inside them into the durable image, as `msync` does.
//! [`CrashPoint::image`] builds one crash state: the durable image plus any
//! subset of the later units (applied in log order), which
//! [`FlashDevice::from_crash_image`] opens as a device for recovery to run on.
//! (The subset model, as in ALICE and CrashMonkey, is a superset of what a
//! kernel can do: it also keeps a later write to an OS page without an earlier
//! one.)
//!
//! Recording is off unless asked for; when off, the data path pays one
//! `OnceLock::get` (a load and a branch) per program, erase and sync.
//!
//! [`FlashDevice::record_crashes`]: crate::FlashDevice::record_crashes
//! [`FlashDevice::from_crash_image`]: crate::FlashDevice::from_crash_image

use std::sync::Arc;

/// OS page size: the kernel writes a mapping back in units of this.
const OS_PAGE: usize = 4096;

/// Which of the two regions of the device a unit writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Region {
    /// Page data.
    Data,
    /// Header, erase counts and OOB records.
    Meta,
}

/// What a unit is a part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnitKind {
    /// A programmed page's data.
    PageData,
    /// A programmed page's OOB record.
    PageOob,
    /// Part of a punched block's data (zeros): an erase of a block that
    /// changes hands, or a discard. An erase for reuse leaves the data.
    EraseData,
    /// An erased block's OOB records (zeros).
    EraseOob,
    /// An erased block's erase count.
    EraseCount,
}

/// One write the kernel may or may not have persisted at a crash: bytes at an
/// offset of one region, inside one OS page.
#[derive(Debug, Clone)]
pub struct Unit {
    /// What it is part of.
    pub kind: UnitKind,
    /// The flash page (for page units) or block (for erase units) it belongs to.
    pub target: u64,
    pub(crate) region: Region,
    pub(crate) off: usize,
    pub(crate) bytes: Box<[u8]>,
}

impl Unit {
    fn apply(&self, img: &mut CrashImage) {
        let buf = match self.region {
            Region::Data => &mut img.data,
            Region::Meta => &mut img.meta,
        };
        buf[self.off..self.off + self.bytes.len()].copy_from_slice(&self.bytes);
    }
}

/// The bytes of a device after a crash: its data and metadata regions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashImage {
    pub(crate) data: Vec<u8>,
    pub(crate) meta: Vec<u8>,
}

/// A moment at which the host may crash: the durable image then, and the
/// writes not yet known durable, in order.
#[derive(Debug, Clone)]
pub struct CrashPoint {
    durable: Arc<CrashImage>,
    units: Vec<Unit>,
}

impl CrashPoint {
    /// The writes since their last sync, oldest first.
    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    /// The crash state that keeps the durable image and exactly the units `i`
    /// with `keep(i)` (indexes into [`CrashPoint::units`]), applied in order.
    pub fn image(&self, mut keep: impl FnMut(usize) -> bool) -> CrashImage {
        let mut img = (*self.durable).clone();
        for (i, u) in self.units.iter().enumerate() {
            if keep(i) {
                u.apply(&mut img);
            }
        }
        img
    }
}

/// The recording state of a device (see the module docs).
#[derive(Debug)]
pub(crate) struct Recorder {
    durable: Arc<CrashImage>,
    pending: Vec<Unit>,
}

impl Recorder {
    /// Starts with `durable` as what the disk holds.
    pub(crate) fn new(data: Vec<u8>, meta: Vec<u8>) -> Self {
        Self {
            durable: Arc::new(CrashImage { data, meta }),
            pending: Vec::new(),
        }
    }

    /// Logs a write of `bytes` at `off` of `region`, cut at OS pages.
    pub(crate) fn write(
        &mut self,
        kind: UnitKind,
        target: u64,
        region: Region,
        off: usize,
        bytes: &[u8],
    ) {
        let mut pos = 0;
        while pos < bytes.len() {
            let at = off + pos;
            let n = (OS_PAGE - at % OS_PAGE).min(bytes.len() - pos);
            self.pending.push(Unit {
                kind,
                target,
                region,
                off: at,
                bytes: bytes[pos..pos + n].into(),
            });
            pos += n;
        }
    }

    /// A sync of `data` and `meta` byte ranges completed: the units inside
    /// them are durable. `None` for a whole region.
    pub(crate) fn synced(
        &mut self,
        data: Option<&[(usize, usize)]>,
        meta: Option<&[(usize, usize)]>,
    ) {
        let inside = |u: &Unit| {
            let ranges = match u.region {
                Region::Data => data,
                Region::Meta => meta,
            };
            ranges.is_none_or(|rs| {
                rs.iter()
                    .any(|&(o, n)| o <= u.off && u.off + u.bytes.len() <= o + n)
            })
        };
        if !self.pending.iter().any(inside) {
            return;
        }
        let img = Arc::make_mut(&mut self.durable);
        let mut rest = Vec::with_capacity(self.pending.len());
        for u in self.pending.drain(..) {
            if inside(&u) {
                u.apply(img);
            } else {
                rest.push(u);
            }
        }
        self.pending = rest;
    }

    /// The crash point now.
    pub(crate) fn point(&self) -> CrashPoint {
        CrashPoint {
            durable: self.durable.clone(),
            units: self.pending.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_cut_at_os_pages_and_synced_ranges_make_them_durable() {
        let mut r = Recorder::new(vec![0; 3 * OS_PAGE], vec![0; OS_PAGE]);
        r.write(UnitKind::EraseData, 0, Region::Data, 100, &[1; 2 * OS_PAGE]);
        r.write(UnitKind::PageOob, 3, Region::Meta, 64, &[2; 32]);
        assert_eq!(r.pending.len(), 4);
        let p = r.point();
        assert_eq!(p.image(|_| false).data, vec![0; 3 * OS_PAGE]);
        let torn = p.image(|i| i == 3);
        assert_eq!(&torn.meta[64..96], &[2; 32]);
        assert!(torn.data.iter().all(|&b| b == 0), "data without OOB");
        r.synced(Some(&[(OS_PAGE, OS_PAGE)]), Some(&[]));
        assert_eq!(r.pending.len(), 3, "only the middle piece was synced");
        assert_eq!(r.point().image(|_| false).data[OS_PAGE], 1);
        r.synced(None, None);
        assert!(r.pending.is_empty());
        assert_eq!(&r.point().image(|_| false).meta[64..96], &[2; 32]);
    }
}
