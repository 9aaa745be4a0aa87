//! The slow backing store of a cache tier: a sparse file, optionally timed by
//! a disk (HDD) latency model.
//!
//! Why a model rather than a real disk: the point of a cache tier is the gap
//! between flash and a spinning disk, and a test machine has neither. The data
//! goes to a plain file (so it survives restarts and any file system can hold
//! it); the time each request *would* take on a disk comes from [`HddModel`],
//! which keeps the head position and a timeline per store, so sequential
//! requests cost only their transfer and random ones a seek plus half a
//! revolution. Like every flexssd device, operations return their completion
//! time on the injected clock and never read the wall clock; without a model
//! they return the issue time (untimed).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use blockdev::{
    check_range, push_extent, Alloc, BlockDev, BlockSizes, IoError, IoResult, MapExtent,
};
use clock::{Clock, Nanos};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::TierError;

/// Latency model of a hard disk: seek, rotational latency and transfer.
///
/// A request that starts where the previous one ended costs only its transfer;
/// one a little ahead (within `near_bytes`) costs the time for the platter to
/// pass the gap; any other pays a seek that grows with the square root of the
/// distance (from `min_seek_us` next door to `max_seek_us` across the whole
/// store) plus half a revolution (the average rotational latency: the angular
/// position is not modelled). Requests queue on one timeline: a disk serves
/// one request at a time. Reads and writes cost the same (no write cache).
///
/// Defaults describe a 7200 RPM desktop disk.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HddModel {
    /// Spindle speed, revolutions per minute. Default 7200 (half a revolution:
    /// 4.17 ms).
    pub rpm: u32,
    /// Shortest seek (to a neighbouring track), microseconds. Default 600.
    pub min_seek_us: u64,
    /// Full-stroke seek, microseconds. Default 16000.
    pub max_seek_us: u64,
    /// Sustained media transfer rate, MB/s (10^6 bytes). Default 160.
    pub transfer_mb_s: u64,
    /// Forward gaps up to this many bytes are read past instead of seeking
    /// (about a track). Default 1048576.
    pub near_bytes: u64,
}

impl Default for HddModel {
    fn default() -> Self {
        HddModel {
            rpm: 7200,
            min_seek_us: 600,
            max_seek_us: 16_000,
            transfer_mb_s: 160,
            near_bytes: 1 << 20,
        }
    }
}

impl HddModel {
    /// Checks the values; the error names the bad one.
    pub fn validate(&self) -> Result<(), TierError> {
        let bad = |m: String| Err(TierError::Invalid(format!("hdd model: {m}")));
        if self.rpm == 0 {
            return bad("rpm = 0: must be at least 1".into());
        }
        if self.transfer_mb_s == 0 {
            return bad("transfer_mb_s = 0: must be at least 1".into());
        }
        if self.min_seek_us > self.max_seek_us {
            return bad(format!(
                "min_seek_us = {} is more than max_seek_us = {}",
                self.min_seek_us, self.max_seek_us
            ));
        }
        Ok(())
    }

    /// Nanoseconds to move `len` bytes under the head.
    pub fn transfer_ns(&self, len: u64) -> Nanos {
        // bytes / (MB/s) = µs; times 1000 for ns.
        (len as u128 * 1000 / self.transfer_mb_s as u128) as Nanos
    }

    /// Half a revolution, nanoseconds.
    pub fn half_rotation_ns(&self) -> Nanos {
        30_000_000_000 / self.rpm as u64
    }

    /// Seek time over `distance` bytes of a store of `span` bytes.
    pub fn seek_ns(&self, distance: u64, span: u64) -> Nanos {
        let frac = (distance as f64 / span.max(1) as f64)
            .clamp(0.0, 1.0)
            .sqrt();
        let us = self.min_seek_us as f64 + (self.max_seek_us - self.min_seek_us) as f64 * frac;
        (us * 1000.0).round() as Nanos
    }

    /// Service time of a request of `len` bytes at `offset` with the head at
    /// `head`, on a store of `span` bytes.
    pub fn service_ns(&self, head: u64, offset: u64, len: u64, span: u64) -> Nanos {
        let position = if offset == head {
            0
        } else if offset > head && offset - head <= self.near_bytes {
            self.transfer_ns(offset - head)
        } else {
            self.seek_ns(offset.abs_diff(head), span) + self.half_rotation_ns()
        };
        position + self.transfer_ns(len)
    }
}

/// Head position and the time the disk becomes idle.
#[derive(Debug, Default)]
struct Head {
    pos: u64,
    busy_until: Nanos,
}

/// A byte-addressed store in a sparse file, with an optional [`HddModel`].
///
/// Reads and writes are `pread`/`pwrite` on the file (no lock is held while
/// they run, so requests overlap like on any file); only the model's head and
/// timeline are behind a mutex. Trim punches a hole, so trimmed ranges read
/// as zeros and take no space.
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    file: File,
    size: u64,
    model: Option<HddModel>,
    head: Mutex<Head>,
    clock: Arc<dyn Clock>,
}

impl FileStore {
    /// Opens (creating if missing) the file at `path` as a store of `size`
    /// bytes. A shorter file is extended with a hole; a longer one is refused,
    /// since its tail would hold data that no volume reaches any more.
    pub fn open(
        path: &Path,
        size: u64,
        model: Option<HddModel>,
        clock: Arc<dyn Clock>,
    ) -> Result<FileStore, TierError> {
        if size == 0 {
            return Err(TierError::Invalid(format!(
                "backing store {}: size must be more than 0 bytes",
                path.display()
            )));
        }
        if let Some(m) = &model {
            m.validate()?;
        }
        let io = |what: &str| {
            let what = format!("{what} {}", path.display());
            move |source| TierError::Io { what, source }
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io("opening backing file"))?;
        let len = file
            .metadata()
            .map_err(io("reading the size of backing file"))?
            .len();
        if len > size {
            return Err(TierError::Invalid(format!(
                "backing file {} holds {len} bytes, more than the configured {size}: refusing to \
                 shrink it (its tail would be lost); configure at least {len} bytes or use another file",
                path.display()
            )));
        }
        if len < size {
            file.set_len(size).map_err(io("extending backing file"))?;
        }
        Ok(FileStore {
            path: path.to_path_buf(),
            file,
            size,
            model,
            head: Mutex::new(Head::default()),
            clock,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The latency model, if timed.
    pub fn model(&self) -> Option<&HddModel> {
        self.model.as_ref()
    }

    /// Books a request on the disk's timeline and returns its completion time
    /// (the issue time when untimed).
    fn book(&self, offset: u64, len: u64) -> Nanos {
        let now = self.clock.now();
        let Some(m) = &self.model else {
            return now;
        };
        let mut h = self.head.lock();
        let start = now.max(h.busy_until);
        let done = start + m.service_ns(h.pos, offset, len, self.size);
        h.pos = offset + len;
        h.busy_until = done;
        done
    }

    fn media(&self, what: &str, offset: u64, len: u64, e: std::io::Error) -> IoError {
        IoError::Media(format!(
            "backing file {}: {what} of {len} bytes at {offset}: {e}",
            self.path.display()
        ))
    }

    fn sync(&self) -> IoResult<()> {
        self.file
            .sync_data()
            .map_err(|e| IoError::Media(format!("backing file {}: sync: {e}", self.path.display())))
    }

    /// Makes `[offset, offset+len)` read as zeros: a punched hole where the
    /// file system supports it, written zeros otherwise.
    fn zero(&self, offset: u64, len: u64) -> IoResult<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: fallocate on a file descriptor we own, with in-range values.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        const CHUNK: u64 = 1 << 20;
        let zeros = vec![0u8; CHUNK.min(len) as usize];
        let mut pos = 0;
        while pos < len {
            let n = (len - pos).min(CHUNK) as usize;
            self.file
                .write_all_at(&zeros[..n], offset + pos)
                .map_err(|e| self.media("zeroing", offset, len, e))?;
            pos += n as u64;
        }
        Ok(())
    }
}

impl BlockDev for FileStore {
    fn size(&self) -> u64 {
        self.size
    }

    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            minimum: 512,
            preferred: 4096,
            maximum: 32 << 20,
        }
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        check_range(offset, buf.len() as u64, self.size)?;
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| self.media("read", offset, buf.len() as u64, e))?;
        Ok(self.book(offset, buf.len() as u64))
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        check_range(offset, data.len() as u64, self.size)?;
        self.file
            .write_all_at(data, offset)
            .map_err(|e| self.media("write", offset, data.len() as u64, e))?;
        if fua {
            self.sync()?;
        }
        Ok(self.book(offset, data.len() as u64))
    }

    fn flush(&self) -> IoResult {
        self.sync()?;
        let now = self.clock.now();
        Ok(now.max(self.head.lock().busy_until))
    }

    fn trim(&self, offset: u64, len: u64) -> IoResult {
        check_range(offset, len, self.size)?;
        self.zero(offset, len)?;
        // Deallocation is bookkeeping, not media time.
        Ok(self.clock.now())
    }

    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        check_range(offset, len, self.size)?;
        self.zero(offset, len)?;
        if fua {
            self.sync()?;
        }
        // A disk writes zeros like any data.
        Ok(self.book(offset, len))
    }
    /// The file system's own map of the file (`SEEK_DATA` / `SEEK_HOLE`):
    /// never-written, trimmed and zeroed ranges are holes there. A file system
    /// that cannot tell reports all data.
    fn allocation(&self, offset: u64, len: u64) -> IoResult<Vec<MapExtent>> {
        check_range(offset, len, self.size)?;
        let fd = self.file.as_raw_fd();
        // SAFETY: lseek on a descriptor we own. It moves the file offset, which
        // nothing else uses (reads and writes name their offsets).
        let seek = |pos: u64, whence| unsafe { libc::lseek(fd, pos as libc::off_t, whence) };
        let end = offset + len;
        let mut map = Vec::new();
        let mut pos = offset;
        while pos < end {
            let data = match seek(pos, libc::SEEK_DATA) {
                // No data at or after pos.
                -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) => end,
                -1 => pos, // cannot tell: data
                d => (d as u64).clamp(pos, end),
            };
            push_extent(&mut map, data - pos, Alloc::Hole);
            pos = data;
            if pos >= end {
                break;
            }
            let hole = match seek(pos, libc::SEEK_HOLE) {
                h if h > pos as libc::off_t => (h as u64).min(end),
                _ => end,
            };
            push_extent(&mut map, hole - pos, Alloc::Data);
            pos = hole;
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::{VirtualClock, MS, US};

    fn store(model: Option<HddModel>) -> (tempfile::TempDir, Arc<VirtualClock>, FileStore) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(VirtualClock::new(0));
        let s = FileStore::open(&dir.path().join("b.img"), 64 << 20, model, clock.clone()).unwrap();
        (dir, clock, s)
    }

    #[test]
    fn allocation_follows_the_files_holes() {
        let (_d, _c, s) = store(None);
        let whole = |s: &FileStore| s.allocation(0, 64 << 20).unwrap();
        if whole(&s)
            != [MapExtent {
                len: 64 << 20,
                alloc: Alloc::Hole,
            }]
        {
            eprintln!("SKIP: this file system does not report holes (SEEK_HOLE)");
            return;
        }
        s.write(1 << 20, &[1u8; 8192], false).unwrap();
        let m = whole(&s);
        assert_eq!(blockdev::covered(&m), 64 << 20);
        // The written range is data, surrounded by holes (the file system's
        // block size may round the data out a little).
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(
            (m[0].alloc, m[1].alloc, m[2].alloc),
            (Alloc::Hole, Alloc::Data, Alloc::Hole)
        );
        assert!(
            m[0].len <= 1 << 20 && m[0].len + m[1].len >= (1 << 20) + 8192,
            "{m:?}"
        );
        // Clipped to the query.
        assert_eq!(
            s.allocation((1 << 20) + 4096, 4096).unwrap(),
            [MapExtent {
                len: 4096,
                alloc: Alloc::Data
            }]
        );
        s.trim(0, 4 << 20).unwrap();
        assert_eq!(
            whole(&s),
            [MapExtent {
                len: 64 << 20,
                alloc: Alloc::Hole
            }]
        );
        assert!(s.allocation(64 << 20, 1).is_err());
    }

    #[test]
    fn reads_return_writes_and_zeros_after_trim() {
        let (_d, _c, s) = store(None);
        let mut b = vec![7u8; 10_000];
        s.read(5000, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0), "a fresh store reads as zeros");
        s.write(4090, b"hello, disk", false).unwrap();
        let mut got = vec![0u8; 11];
        s.read(4090, &mut got).unwrap();
        assert_eq!(&got, b"hello, disk");
        s.trim(0, 1 << 20).unwrap();
        s.read(4090, &mut got).unwrap();
        assert_eq!(got, vec![0u8; 11]);
        s.write(8192, &[9u8; 4096], true).unwrap();
        s.write_zeroes(8192 + 100, 200, false).unwrap();
        let mut blk = vec![0u8; 4096];
        s.read(8192, &mut blk).unwrap();
        assert!(blk[..100].iter().all(|&x| x == 9));
        assert!(blk[100..300].iter().all(|&x| x == 0));
        assert!(blk[300..].iter().all(|&x| x == 9));
        let e = s.read((64 << 20) - 10, &mut got).unwrap_err();
        assert!(matches!(e, IoError::OutOfRange { .. }), "{e}");
    }

    #[test]
    fn untimed_store_completes_at_issue_time() {
        let (_d, c, s) = store(None);
        c.set(123 * US);
        assert_eq!(s.write(0, &[1u8; 4096], false).unwrap(), 123 * US);
        assert_eq!(s.read(1 << 20, &mut [0u8; 4096]).unwrap(), 123 * US);
    }

    #[test]
    fn sequential_is_cheap_and_random_costs_milliseconds() {
        let m = HddModel::default();
        let (_d, c, s) = store(Some(m));
        let mut buf = vec![0u8; 4096];
        // First request: the head starts at 0, so offset 0 is sequential.
        let t1 = s.read(0, &mut buf).unwrap();
        assert_eq!(t1, m.transfer_ns(4096));
        // Next 4 KiB: only its transfer (about 25.6 µs at 160 MB/s).
        let t2 = s.read(4096, &mut buf).unwrap();
        assert_eq!(t2 - t1, m.transfer_ns(4096));
        assert!(t2 - t1 < 30 * US, "{}", t2 - t1);
        // A far jump: seek plus half a revolution, several milliseconds.
        let t3 = s.read(48 << 20, &mut buf).unwrap();
        let random = t3 - t2;
        assert!(random > 4 * MS && random < 25 * MS, "{random}");
        assert_eq!(
            random,
            m.seek_ns((48 << 20) - 8192, 64 << 20) + m.half_rotation_ns() + m.transfer_ns(4096)
        );
        // A small forward skip reads past the gap instead of seeking.
        let t4 = s.read((48 << 20) + 4096 + 65536, &mut buf).unwrap();
        assert_eq!(t4 - t3, m.transfer_ns(65536 + 4096));
        // Requests queue: issued at the same instant, each waits for the one before.
        c.set(t4 + 100 * MS);
        let a = s.write(0, &buf, false).unwrap();
        let b = s.write(32 << 20, &buf, false).unwrap();
        assert!(b > a && a > c.now());
        // Flush completes when the disk is idle.
        assert_eq!(s.flush().unwrap(), b);
    }

    #[test]
    fn model_config_names_bad_values_and_unknown_fields() {
        let m: HddModel = toml::from_str("rpm = 5400").unwrap();
        assert_eq!(m.rpm, 5400);
        assert_eq!(m.max_seek_us, HddModel::default().max_seek_us);
        let e = toml::from_str::<HddModel>("rpms = 5400").unwrap_err();
        assert!(e.to_string().contains("rpms"), "{e}");
        let bad = HddModel {
            rpm: 0,
            ..HddModel::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("rpm"));
        let bad = HddModel {
            min_seek_us: 20_000,
            ..HddModel::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("min_seek_us"));
    }

    #[test]
    fn a_longer_file_is_refused_and_a_shorter_one_extended() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.img");
        let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
        let s = FileStore::open(&p, 1 << 20, None, clock.clone()).unwrap();
        s.write(100, b"keep", false).unwrap();
        drop(s);
        let s = FileStore::open(&p, 2 << 20, None, clock.clone()).unwrap();
        let mut b = [0u8; 4];
        s.read(100, &mut b).unwrap();
        assert_eq!(&b, b"keep");
        drop(s);
        let e = FileStore::open(&p, 1 << 20, None, clock.clone())
            .unwrap_err()
            .to_string();
        assert!(e.contains("refusing to shrink"), "{e}");
        let e = FileStore::open(&p, 0, None, clock).unwrap_err().to_string();
        assert!(e.contains("more than 0"), "{e}");
    }
}
