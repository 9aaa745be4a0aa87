//! The block-device abstraction of flexssd's data path.
//!
//! Everything between the NBD server and the flash model is a [`BlockDev`]: a vSSD
//! implements it, and layers (statistics, later the SLA scheduler and the cache tier)
//! wrap an `Arc<dyn BlockDev>` and override only what they change, like nbdkit
//! filters. The NBD server exports any `Arc<dyn BlockDev>`.
//!
//! Every operation returns the time at which it *would* complete on the modelled
//! device ([`Completion`]). The caller decides what to do with it: the daemon in
//! emulation mode waits until then (so a vSSD's bandwidth follows its channel count),
//! in fast mode it replies at once, and the simulator advances a virtual clock.

use std::sync::Arc;

pub use clock::Nanos;

mod extent;
mod gate;
mod guarded;
mod hist;
mod layer;
mod loan;
mod mem;
mod stats;

pub use extent::{covered, push_extent, Alloc, MapExtent};
pub use gate::{Admit, Dir, Gate};
pub use guarded::GuardedWindow;
pub use hist::{Histogram, LatencySummary};
pub use layer::{Layer, Layered};
pub use loan::{Loan, LoanBytes, Recall, ZEROS_LEN};
pub use mem::MemDev;
pub use stats::{IoStats, StatsLayer, StatsSnapshot};

/// When an operation completes on the modelled device, in nanoseconds of the
/// device's clock. Operations that the model does not time return the issue time.
pub type Completion = Nanos;

/// Why a block operation failed. Each variant maps to one errno for the NBD wire
/// protocol ([`IoError::errno`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum IoError {
    /// The request reaches past the end of the device.
    #[error("request at offset {offset} length {len} is outside the device of {size} bytes")]
    OutOfRange {
        /// First byte of the request.
        offset: u64,
        /// Length of the request in bytes.
        len: u64,
        /// Size of the device in bytes.
        size: u64,
    },
    /// The device has no free space left (all flash holds live data).
    #[error("no space left on the device: {0}")]
    NoSpace(String),
    /// The request is malformed (for example misaligned where alignment is needed).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The device refuses writes.
    #[error("the device is read-only")]
    ReadOnly,
    /// The device is being deleted or has been shut down.
    #[error("the device is gone: {0}")]
    Gone(String),
    /// The media or the backing store failed.
    #[error("I/O error: {0}")]
    Media(String),
    /// The tenant's service agreement never allows this request.
    #[error("not permitted: {0}")]
    NotPermitted(String),
}

impl IoError {
    /// The POSIX errno that the NBD protocol sends for this error.
    pub fn errno(&self) -> u32 {
        match self {
            IoError::OutOfRange { .. } | IoError::Invalid(_) => 22, // EINVAL
            IoError::NoSpace(_) => 28,                              // ENOSPC
            IoError::ReadOnly | IoError::NotPermitted(_) => 1,      // EPERM
            IoError::Gone(_) | IoError::Media(_) => 5,              // EIO
        }
    }
}

/// Result of a block operation.
pub type IoResult<T = Completion> = Result<T, IoError>;

/// Block-size constraints a device advertises (NBD_INFO_BLOCK_SIZE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockSizes {
    /// Smallest request alignment the device accepts, a power of two.
    pub minimum: u32,
    /// Alignment below which requests cost a read-modify-write.
    pub preferred: u32,
    /// Largest payload of one read or write.
    pub maximum: u32,
}

impl Default for BlockSizes {
    fn default() -> Self {
        Self {
            minimum: 1,
            preferred: 4096,
            maximum: 32 * 1024 * 1024,
        }
    }
}

/// A byte-addressed block device. All methods take `&self`: implementations do their
/// own locking so that many connections can use one device at once.
pub trait BlockDev: Send + Sync {
    /// Size in bytes.
    fn size(&self) -> u64;

    /// Block-size constraints.
    fn block_sizes(&self) -> BlockSizes {
        BlockSizes::default()
    }

    /// Reads `buf.len()` bytes at `offset`. Never-written or trimmed regions read as zeros.
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult;

    /// Writes `data` at `offset`. With `fua`, the data is durable when this returns.
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult;

    /// Makes every completed write durable.
    fn flush(&self) -> IoResult;

    /// Makes every completed write durable on behalf of a FUA request whose
    /// write, trim or zeroing was done without FUA (the NBD server does that
    /// so the sync can run off its connection's reader and be shared). The
    /// same as [`BlockDev::flush`], except that layers counting client
    /// flushes do not count it. Default: `flush`.
    fn sync_fua(&self) -> IoResult {
        self.flush()
    }

    /// Discards `len` bytes at `offset`; later reads return zeros.
    fn trim(&self, offset: u64, len: u64) -> IoResult;

    /// Makes `len` bytes at `offset` read as zeros. With `fua`, durable on return.
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult;

    /// Whether [`BlockDev::write_zeroes`] costs far less than writing the
    /// zeros: the range is unmapped or dropped, its bytes never written. NBD
    /// serves `NBD_CMD_FLAG_FAST_ZERO` from it: a client that asks for a
    /// fast zero (to zero a whole target up front only if that is cheap)
    /// gets it here, and from a device that answers `false` an immediate
    /// `ENOTSUP`, after which it writes its zeros as it goes. Default:
    /// `false`, the answer that never misleads.
    fn fast_zero(&self) -> bool {
        false
    }

    /// Whether writes are refused.
    fn read_only(&self) -> bool {
        false
    }

    /// Reads `len` bytes at `offset` as [`Loan`]s of the device's own memory,
    /// in order, for a reply sent without copying the data out first. `None`
    /// (the default) from a device that cannot lend: the caller then reads
    /// with [`BlockDev::read`]. The loans hold the data as of the read, as
    /// `read` would have copied it, for as long as they live.
    fn read_lent(&self, offset: u64, len: usize) -> Option<IoResult<(Completion, Vec<Loan>)>> {
        let _ = (offset, len);
        None
    }

    /// Which parts of `[offset, offset + len)` hold data and which are holes
    /// (never written or trimmed: they read as zeros), as consecutive extents
    /// starting at `offset`. A device may answer for a prefix only (at least one
    /// byte when `len > 0`) when the range is large; callers ask again for the
    /// rest. The default, for devices that do not track holes, is one extent of
    /// data: always true, never skipped.
    fn allocation(&self, offset: u64, len: u64) -> IoResult<Vec<MapExtent>> {
        check_range(offset, len, self.size())?;
        let mut map = Vec::with_capacity(1);
        push_extent(&mut map, len, Alloc::Data);
        Ok(map)
    }
}

/// Checks that `[offset, offset + len)` lies within a device of `size` bytes.
pub fn check_range(offset: u64, len: u64, size: u64) -> IoResult<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(IoError::OutOfRange { offset, len, size }),
    }
}

impl<T: BlockDev + ?Sized> BlockDev for Arc<T> {
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn block_sizes(&self) -> BlockSizes {
        (**self).block_sizes()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        (**self).read(offset, buf)
    }
    fn read_lent(&self, offset: u64, len: usize) -> Option<IoResult<(Completion, Vec<Loan>)>> {
        (**self).read_lent(offset, len)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        (**self).write(offset, data, fua)
    }
    fn flush(&self) -> IoResult {
        (**self).flush()
    }
    fn sync_fua(&self) -> IoResult {
        (**self).sync_fua()
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        (**self).trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        (**self).write_zeroes(offset, len, fua)
    }
    fn fast_zero(&self) -> bool {
        (**self).fast_zero()
    }
    fn read_only(&self) -> bool {
        (**self).read_only()
    }
    fn allocation(&self, offset: u64, len: u64) -> IoResult<Vec<MapExtent>> {
        (**self).allocation(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_check_catches_overflow_and_past_end() {
        assert!(check_range(0, 10, 10).is_ok());
        assert!(check_range(10, 0, 10).is_ok());
        assert!(check_range(5, 6, 10).is_err());
        assert!(check_range(u64::MAX, 2, 10).is_err());
    }

    /// A device without hole tracking reports all data, and checks the range.
    #[test]
    fn default_allocation_is_all_data() {
        let d = MemDevNoHoles(MemDev::new(8192));
        assert_eq!(
            d.allocation(512, 4096).unwrap(),
            [MapExtent {
                len: 4096,
                alloc: Alloc::Data
            }]
        );
        assert!(d.allocation(0, 0).unwrap().is_empty());
        assert!(matches!(
            d.allocation(8000, 4096),
            Err(IoError::OutOfRange { .. })
        ));
    }

    /// Forwards everything but `allocation`, which keeps the trait's default.
    struct MemDevNoHoles(MemDev);

    impl BlockDev for MemDevNoHoles {
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
            self.0.read(offset, buf)
        }
        fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
            self.0.write(offset, data, fua)
        }
        fn flush(&self) -> IoResult {
            self.0.flush()
        }
        fn trim(&self, offset: u64, len: u64) -> IoResult {
            self.0.trim(offset, len)
        }
        fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
            self.0.write_zeroes(offset, len, fua)
        }
    }

    #[test]
    fn errno_mapping() {
        assert_eq!(IoError::NoSpace("x".into()).errno(), 28);
        assert_eq!(
            IoError::OutOfRange {
                offset: 0,
                len: 1,
                size: 0
            }
            .errno(),
            22
        );
        assert_eq!(IoError::Media("x".into()).errno(), 5);
    }
}
