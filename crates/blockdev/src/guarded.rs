//! A guarded window: a test device for bounds checking.
//!
//! The device is `size` bytes in the middle of a larger [`MemDev`] with guard zones
//! of `guard` bytes filled with a pattern on both sides. Offsets are forwarded
//! *unchecked* (wrapping on overflow), so any request that a layer above failed to
//! bounds-check lands in a guard zone, where [`GuardedWindow::guards_intact`]
//! sees it. An allocation query (which changes nothing) outside the window is
//! recorded instead, and counts as a broken guard. The NBD server's
//! hostile-client property tests and fuzz targets use it.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::{BlockDev, IoResult, MapExtent, MemDev};

const PATTERN: u8 = 0x5a;

/// A `size`-byte window with guard zones on both sides; see the module docs.
#[derive(Debug)]
pub struct GuardedWindow {
    inner: MemDev,
    size: u64,
    guard: u64,
    /// An allocation query reached outside the window.
    queried_outside: AtomicBool,
}

impl GuardedWindow {
    /// A zeroed window of `size` bytes between two `guard`-byte guard zones.
    pub fn new(size: u64, guard: u64) -> Self {
        let inner = MemDev::new(size + 2 * guard);
        let fill = vec![PATTERN; guard as usize];
        inner.write(0, &fill, false).expect("in range");
        inner.write(guard + size, &fill, false).expect("in range");
        Self {
            inner,
            size,
            guard,
            queried_outside: AtomicBool::new(false),
        }
    }

    /// Whether both guard zones still hold their pattern, and no allocation
    /// query reached outside the window.
    pub fn guards_intact(&self) -> bool {
        if self.queried_outside.load(Ordering::Relaxed) {
            return false;
        }
        let mut b = vec![0u8; self.guard as usize];
        self.inner.read(0, &mut b).expect("in range");
        let low = b.iter().all(|&x| x == PATTERN);
        self.inner
            .read(self.guard + self.size, &mut b)
            .expect("in range");
        low && b.iter().all(|&x| x == PATTERN)
    }

    /// The window's current bytes.
    pub fn window(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.size as usize];
        self.inner.read(self.guard, &mut b).expect("in range");
        b
    }
}

impl BlockDev for GuardedWindow {
    fn size(&self) -> u64 {
        self.size
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        self.inner.read(offset.wrapping_add(self.guard), buf)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        self.inner.write(offset.wrapping_add(self.guard), data, fua)
    }
    fn flush(&self) -> IoResult {
        Ok(0)
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.inner.trim(offset.wrapping_add(self.guard), len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        self.inner
            .write_zeroes(offset.wrapping_add(self.guard), len, fua)
    }
    fn fast_zero(&self) -> bool {
        self.inner.fast_zero()
    }
    fn allocation(&self, offset: u64, len: u64) -> IoResult<Vec<MapExtent>> {
        if !matches!(offset.checked_add(len), Some(end) if end <= self.size) {
            self.queried_outside.store(true, Ordering::Relaxed);
        }
        let at = offset.wrapping_add(self.guard);
        let len = len.min(self.inner.size().saturating_sub(at));
        self.inner.allocation(at.min(self.inner.size()), len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchecked_requests_land_in_the_guards() {
        let w = GuardedWindow::new(4096, 1024);
        w.write(0, &[1u8; 4096], false).unwrap();
        assert!(w.guards_intact());
        assert_eq!(w.window(), vec![1u8; 4096]);
        w.write(4090, &[2u8; 10], false).unwrap();
        assert!(
            !w.guards_intact(),
            "a write past the end must hit the high guard"
        );
        let w = GuardedWindow::new(4096, 1024);
        w.write(u64::MAX - 3, &[2u8; 2], false).unwrap();
        assert!(
            !w.guards_intact(),
            "a wrapped offset must hit the low guard"
        );
        let w = GuardedWindow::new(4096, 1024);
        w.allocation(0, 4096).unwrap();
        assert!(w.guards_intact());
        let _ = w.allocation(4000, 200);
        assert!(!w.guards_intact(), "a query past the end must be seen");
    }
}
