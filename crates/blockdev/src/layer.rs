//! Layers: block devices that wrap another one and change part of its behaviour.
//!
//! Implement [`Layer`] (only `inner` is required; every other method delegates by
//! default) and wrap the value in [`Layered`] to get a [`BlockDev`].

use std::sync::Arc;

use crate::{BlockDev, BlockSizes, Completion, IoResult, Loan, MapExtent};

/// A block device that forwards to an inner device unless it overrides a method.
pub trait Layer: Send + Sync {
    /// The device this layer wraps.
    fn inner(&self) -> &Arc<dyn BlockDev>;

    /// Size in bytes (default: the inner device's).
    fn size(&self) -> u64 {
        self.inner().size()
    }
    /// Block-size constraints (default: the inner device's).
    fn block_sizes(&self) -> BlockSizes {
        self.inner().block_sizes()
    }
    /// See [`BlockDev::read`].
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        self.inner().read(offset, buf)
    }
    /// See [`BlockDev::read_lent`]. Default: `None`, not the inner device's
    /// loans, which would bypass a layer that overrides [`Layer::read`]; a
    /// layer that reads through unchanged forwards them itself.
    fn read_lent(&self, offset: u64, len: usize) -> Option<IoResult<(Completion, Vec<Loan>)>> {
        let _ = (offset, len);
        None
    }
    /// See [`BlockDev::write`].
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        self.inner().write(offset, data, fua)
    }
    /// See [`BlockDev::flush`].
    fn flush(&self) -> IoResult {
        self.inner().flush()
    }
    /// See [`BlockDev::sync_fua`].
    fn sync_fua(&self) -> IoResult {
        self.inner().sync_fua()
    }
    /// See [`BlockDev::trim`].
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.inner().trim(offset, len)
    }
    /// See [`BlockDev::write_zeroes`].
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        self.inner().write_zeroes(offset, len, fua)
    }
    /// See [`BlockDev::fast_zero`].
    fn fast_zero(&self) -> bool {
        self.inner().fast_zero()
    }
    /// See [`BlockDev::read_only`].
    fn read_only(&self) -> bool {
        self.inner().read_only()
    }
    /// See [`BlockDev::allocation`].
    fn allocation(&self, offset: u64, len: u64) -> IoResult<Vec<MapExtent>> {
        self.inner().allocation(offset, len)
    }
}

/// Adapts any [`Layer`] into a [`BlockDev`].
#[derive(Debug)]
pub struct Layered<L>(pub L);

impl<L: Layer> BlockDev for Layered<L> {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn block_sizes(&self) -> BlockSizes {
        self.0.block_sizes()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        self.0.read(offset, buf)
    }
    fn read_lent(&self, offset: u64, len: usize) -> Option<IoResult<(Completion, Vec<Loan>)>> {
        self.0.read_lent(offset, len)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        self.0.write(offset, data, fua)
    }
    fn flush(&self) -> IoResult {
        self.0.flush()
    }
    fn sync_fua(&self) -> IoResult {
        self.0.sync_fua()
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.0.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        self.0.write_zeroes(offset, len, fua)
    }
    fn fast_zero(&self) -> bool {
        self.0.fast_zero()
    }
    fn read_only(&self) -> bool {
        self.0.read_only()
    }
    fn allocation(&self, offset: u64, len: u64) -> IoResult<Vec<MapExtent>> {
        self.0.allocation(offset, len)
    }
}
