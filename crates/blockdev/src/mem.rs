//! A plain in-memory block device: the reference model in property tests and a
//! stand-in export for protocol tests. It is not a flash model (no timing, no FTL).

use parking_lot::RwLock;

use crate::{check_range, push_extent, Alloc, BlockDev, IoResult, MapExtent};

const CHUNK: usize = 64 * 1024;

/// A sparse in-memory device of fixed size, allocated in 64 KiB chunks on first write.
#[derive(Debug)]
pub struct MemDev {
    size: u64,
    chunks: RwLock<Vec<Option<Box<[u8]>>>>,
}

impl MemDev {
    /// A zero-filled device of `size` bytes.
    pub fn new(size: u64) -> Self {
        let n = size.div_ceil(CHUNK as u64) as usize;
        Self {
            size,
            chunks: RwLock::new((0..n).map(|_| None).collect()),
        }
    }

    fn zero_range(&self, offset: u64, len: u64) {
        let mut chunks = self.chunks.write();
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let ci = (pos / CHUNK as u64) as usize;
            let within = (pos % CHUNK as u64) as usize;
            let n = ((CHUNK - within) as u64).min(end - pos) as usize;
            if let Some(c) = chunks[ci].as_mut() {
                if n == CHUNK {
                    chunks[ci] = None;
                } else {
                    c[within..within + n].fill(0);
                }
            }
            pos += n as u64;
        }
    }
}

impl BlockDev for MemDev {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        check_range(offset, buf.len() as u64, self.size)?;
        let chunks = self.chunks.read();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let ci = (pos / CHUNK as u64) as usize;
            let within = (pos % CHUNK as u64) as usize;
            let n = (CHUNK - within).min(buf.len() - done);
            match &chunks[ci] {
                Some(c) => buf[done..done + n].copy_from_slice(&c[within..within + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
        Ok(0)
    }

    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> IoResult {
        check_range(offset, data.len() as u64, self.size)?;
        let mut chunks = self.chunks.write();
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let ci = (pos / CHUNK as u64) as usize;
            let within = (pos % CHUNK as u64) as usize;
            let n = (CHUNK - within).min(data.len() - done);
            let c = chunks[ci].get_or_insert_with(|| vec![0u8; CHUNK].into_boxed_slice());
            c[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        Ok(0)
    }

    fn flush(&self) -> IoResult {
        Ok(0)
    }

    fn trim(&self, offset: u64, len: u64) -> IoResult {
        check_range(offset, len, self.size)?;
        self.zero_range(offset, len);
        Ok(0)
    }

    fn write_zeroes(&self, offset: u64, len: u64, _fua: bool) -> IoResult {
        check_range(offset, len, self.size)?;
        self.zero_range(offset, len);
        Ok(0)
    }

    /// Whole chunks are dropped, the rest cleared in memory: no payload.
    fn fast_zero(&self) -> bool {
        true
    }

    /// Chunks never written, or wholly trimmed, are holes.
    fn allocation(&self, offset: u64, len: u64) -> IoResult<Vec<MapExtent>> {
        check_range(offset, len, self.size)?;
        let chunks = self.chunks.read();
        let mut map = Vec::new();
        let (mut pos, end) = (offset, offset + len);
        while pos < end {
            let ci = (pos / CHUNK as u64) as usize;
            let n = (CHUNK as u64 - pos % CHUNK as u64).min(end - pos);
            let alloc = match chunks[ci] {
                Some(_) => Alloc::Data,
                None => Alloc::Hole,
            };
            push_extent(&mut map, n, alloc);
            pos += n;
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_returns_last_write_and_zeros_elsewhere() {
        let d = MemDev::new(200_000);
        d.write(65_530, b"hello world", false).unwrap();
        let mut b = vec![1u8; 20];
        d.read(65_525, &mut b).unwrap();
        assert_eq!(&b[..5], &[0; 5]);
        assert_eq!(&b[5..16], b"hello world");
        d.trim(65_531, 3).unwrap();
        d.read(65_530, &mut b[..11]).unwrap();
        assert_eq!(&b[..11], b"h\0\0\0o world");
        assert!(d.write(199_999, b"xy", false).is_err());
    }

    #[test]
    fn allocation_follows_writes_and_trims() {
        let c = CHUNK as u64;
        let d = MemDev::new(4 * c);
        let all = |d: &MemDev| d.allocation(0, 4 * c).unwrap();
        assert_eq!(
            all(&d),
            [MapExtent {
                len: 4 * c,
                alloc: Alloc::Hole
            }]
        );
        d.write(c + 5, b"x", false).unwrap();
        assert_eq!(
            all(&d),
            [
                MapExtent {
                    len: c,
                    alloc: Alloc::Hole
                },
                MapExtent {
                    len: c,
                    alloc: Alloc::Data
                },
                MapExtent {
                    len: 2 * c,
                    alloc: Alloc::Hole
                }
            ]
        );
        // A sub-range is clipped to what was asked.
        assert_eq!(
            d.allocation(c - 10, 20).unwrap(),
            [
                MapExtent {
                    len: 10,
                    alloc: Alloc::Hole
                },
                MapExtent {
                    len: 10,
                    alloc: Alloc::Data
                }
            ]
        );
        d.trim(c, c).unwrap();
        assert_eq!(
            all(&d),
            [MapExtent {
                len: 4 * c,
                alloc: Alloc::Hole
            }]
        );
        assert!(d.allocation(4 * c, 1).is_err());
    }
}
