//! Where the emulated flash keeps its bytes.
//!
//! Two regions, both memory mappings: the page data, and a metadata region holding
//! a header, the per-block erase counts and the per-page OOB records. With the file
//! backend both are `MAP_SHARED` mappings of sparse files that serve reads (a read
//! is a `memcpy` out of the page cache); writes go through the file descriptor
//! (`pwrite`, see `Store::put` for why not through the mapping), and either way the
//! kernel persists them even if the process is killed. `sync` is `msync`.
//!
//! The data file is sparse: a block is allocated in the host file system,
//! whole, when its first page is programmed (zeros over its holes: the
//! other pages are erased, so no read or crash state can tell), so the
//! programs that follow allocate nothing and their syncs need no
//! file-system journal commit. A database committing after every 4 KiB write
//! paid one per flush: 1.42-1.46x the flush rate with it (`bench-flush.sh`).
//! Not on copy-on-write host file systems (btrfs, ZFS, bcachefs), which
//! allocate anew at every overwrite.
//! An erase for reuse (garbage collection: the same
//! tenant programs the block again) keeps it allocated, so the programs that
//! follow allocate nothing; an erase of a block that changes hands (a vSSD
//! created, lent, taken back or destroyed) punches a hole in the data file, so
//! the bytes are gone, not just forgotten (see [`Store::erase`]). So the file
//! only shrinks when flash changes hands: TRIM and GC give no host space back.
//!
//! A tenant's sync ([`Store::sync_dirty`]) writes back what it changed and
//! pays for one metadata commit however many ranges and files. The ranges of
//! the dirty blocks of one run the tenant holds alone are one span
//! ([`crate::OwnRuns`]: clean pages in between cost a page-cache lookup, and
//! no other tenant's pages lie there), other blocks a range each; all are
//! rounded out to OS pages, so an OS page shared with another tenant's OOB
//! records or erase counts (run edges, the erase-count table) is written back
//! whole. Every span of both files is first written back with
//! `sync_file_range` (no commit, no flush), then the last range of the data
//! file gets an `msync`: four `sync_file_range` calls and one `msync` for a
//! vSSD on neighbouring whole channels, instead of two per dirty block and
//! file. The data file's fsync commits the journal transaction that holds
//! the block allocations of both files' write-back (sparse files) and
//! flushes the device's cache. (Syncing the files one after the other
//! committed twice: a flush measured 2 fsyncs of 0.2–8 ms each.) That relies
//! on the file system's fsync committing an inode's metadata as a whole, as
//! ext4 and XFS do; on any other file system each range gets its own `msync`.
//!
//! The metadata file (about 1% of the data file) has every block allocated
//! (its holes are filled with zeros when it is opened), so its write-back
//! changes no file-system metadata: when the data file has ranges to sync,
//! the metadata file's pages, written back first, are made durable by the
//! data file's fsync's cache flush, and only that one fsync is issued.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use memmap2::{MmapOptions, MmapRaw};
use serde::{Deserialize, Serialize};

use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::crashrec::{CrashImage, CrashPoint, Recorder, Region, UnitKind};
use crate::dirty::{coalesce, spans, OwnRuns};
use crate::{BlockId, DirtySet, FlashError, Geometry, Oob, PageId, Result, OOB_SIZE};

const HEADER: usize = 4096;
const FILE_MAGIC: &[u8; 8] = b"FLEXSSD1";

/// Where the device's bytes live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum Backend {
    /// Anonymous memory: fast, lost when the process exits.
    Memory,
    /// A sparse data file `PATH` and a metadata file `PATH.meta`; survives restarts
    /// and `kill -9`.
    File {
        /// Path of the data file.
        path: PathBuf,
    },
}

pub(crate) struct Store {
    geo: Geometry,
    data: MmapRaw,
    meta: MmapRaw,
    data_file: Option<File>,
    meta_file: Option<File>,
    /// fsync of a range commits the whole inode's metadata (ext4, XFS).
    inode_fsync: bool,
    /// A block's first program allocates the whole block (see
    /// [`Store::program`]): every file system but copy-on-write ones, which
    /// allocate anew at every overwrite, so a fill would only double the
    /// bytes written.
    fill_blocks: bool,
    erase_off: usize,
    oob_off: usize,
    /// Power-loss recording, once started (see [`crate::crashrec`]).
    rec: OnceLock<Mutex<Recorder>>,
}

/// OS page size the ranges are aligned to (msync needs page-aligned starts).
const OS_PAGE: usize = 4096;

/// The magic number of the file system holding `f` (`statfs`'s `f_type`),
/// if it can be read.
fn fs_magic(f: &File) -> Option<i64> {
    use std::os::fd::AsRawFd;
    // SAFETY: statfs is plain old data; all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs fills the struct we pass; the descriptor is ours.
    if unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_type as i64)
}

/// Whether the file system of `f` commits an inode's metadata as a whole on a
/// ranged fsync (see the module docs).
fn whole_inode_fsync(f: &File) -> bool {
    const EXT4_SUPER_MAGIC: i64 = 0xEF53;
    const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
    matches!(fs_magic(f), Some(EXT4_SUPER_MAGIC | XFS_SUPER_MAGIC))
}

/// Whether the file system of `f` writes every overwrite to a new place
/// (btrfs, ZFS, bcachefs): allocating a block ahead buys nothing there.
pub(crate) fn copy_on_write(f: &File) -> bool {
    const BTRFS_SUPER_MAGIC: i64 = 0x9123_683E;
    const ZFS_SUPER_MAGIC: i64 = 0x2FC1_2FC1;
    const BCACHEFS_SUPER_MAGIC: i64 = 0xCA45_1A4E;
    matches!(
        fs_magic(f),
        Some(BTRFS_SUPER_MAGIC | ZFS_SUPER_MAGIC | BCACHEFS_SUPER_MAGIC)
    )
}

// SAFETY: the raw mappings are plain memory; `FlashDevice` serialises all access to
// any one block under that block's channel lock, so no two threads touch the same
// bytes at once.
unsafe impl Send for Store {}
// SAFETY: as for `Send` above.
unsafe impl Sync for Store {}

fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

impl Store {
    fn meta_len(geo: &Geometry) -> (usize, usize, usize) {
        let erase_off = HEADER;
        let oob_off = round_up(erase_off + geo.total_blocks() as usize * 4, 4096);
        let len = oob_off + geo.total_pages() as usize * OOB_SIZE;
        (erase_off, oob_off, len)
    }

    fn header(geo: &Geometry) -> Vec<u8> {
        let mut h = Vec::with_capacity(64);
        h.extend_from_slice(FILE_MAGIC);
        for v in [
            1u32,
            geo.channels,
            geo.dies_per_channel,
            geo.planes_per_die,
            geo.blocks_per_plane,
            geo.pages_per_block,
            geo.page_size,
        ] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        h
    }

    pub(crate) fn open(backend: &Backend, geo: Geometry) -> Result<(Self, bool)> {
        let (erase_off, oob_off, meta_len) = Self::meta_len(&geo);
        let data_len = geo.total_bytes() as usize;
        match backend {
            Backend::Memory => {
                let data = MmapRaw::from(MmapOptions::new().len(data_len).map_anon()?);
                let meta = MmapRaw::from(MmapOptions::new().len(meta_len).map_anon()?);
                Ok((
                    Store {
                        geo,
                        data,
                        meta,
                        data_file: None,
                        meta_file: None,
                        inode_fsync: false,
                        fill_blocks: false,
                        erase_off,
                        oob_off,
                        rec: OnceLock::new(),
                    },
                    true,
                ))
            }
            Backend::File { path } => {
                let meta_path = meta_path(path);
                let fresh = !meta_path.exists();
                let bad = |reason: String| FlashError::BadDeviceFile {
                    path: meta_path.display().to_string(),
                    reason,
                };
                let meta_file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&meta_path)?;
                let data_file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)?;
                let want = Self::header(&geo);
                if fresh || meta_file.metadata()?.len() == 0 {
                    meta_file.set_len(meta_len as u64)?;
                    data_file.set_len(data_len as u64)?;
                    use std::os::unix::fs::FileExt;
                    meta_file.write_all_at(&want, 0)?;
                    meta_file.sync_all()?;
                } else {
                    use std::os::unix::fs::FileExt;
                    let mut got = vec![0u8; want.len()];
                    meta_file
                        .read_exact_at(&mut got, 0)
                        .map_err(|e| bad(format!("cannot read header: {e}")))?;
                    if &got[..8] != FILE_MAGIC {
                        return Err(bad("not a flexssd device metadata file".into()));
                    }
                    if got != want {
                        return Err(bad(format!(
                            "made with another geometry (file header {:?}, configured {:?}); use the old geometry or a new data directory",
                            &got[8..],
                            &want[8..]
                        )));
                    }
                    if meta_file.metadata()?.len() < meta_len as u64
                        || data_file.metadata()?.len() < data_len as u64
                    {
                        return Err(bad(
                            "file is shorter than its geometry needs (truncated?)".into()
                        ));
                    }
                }
                // Before mapping: a metadata file with every block allocated
                // never needs a journal commit to sync (see the module docs).
                // Metadata files made by earlier releases were sparse; new
                // ones are filled when created.
                if zero_holes(&meta_file, 0, meta_len, NoSeekHole::Rewrite)? {
                    meta_file.sync_all()?;
                }
                let meta = MmapOptions::new().len(meta_len).map_raw(&meta_file)?;
                let data = MmapOptions::new().len(data_len).map_raw(&data_file)?;
                let inode_fsync = whole_inode_fsync(&data_file) && whole_inode_fsync(&meta_file);
                let fill_blocks = !copy_on_write(&data_file);
                Ok((
                    Store {
                        geo,
                        data,
                        meta,
                        data_file: Some(data_file),
                        meta_file: Some(meta_file),
                        inode_fsync,
                        fill_blocks,
                        erase_off,
                        oob_off,
                        rec: OnceLock::new(),
                    },
                    fresh,
                ))
            }
        }
    }

    /// A memory store holding `img` (a crash state; see [`crate::crashrec`]).
    pub(crate) fn from_image(geo: Geometry, img: &CrashImage) -> Result<Self> {
        let (s, _) = Self::open(&Backend::Memory, geo)?;
        if img.data.len() != s.data.len() || img.meta.len() != s.meta.len() {
            return Err(FlashError::BadGeometry(
                "crash image made with another geometry".into(),
            ));
        }
        // SAFETY: both mappings are ours, just made, and as long as the image.
        unsafe {
            std::ptr::copy_nonoverlapping(img.data.as_ptr(), s.data.as_mut_ptr(), img.data.len());
            std::ptr::copy_nonoverlapping(img.meta.as_ptr(), s.meta.as_mut_ptr(), img.meta.len());
        }
        Ok(s)
    }

    /// Starts power-loss recording: what the store holds now is taken as
    /// durable. Idempotent.
    pub(crate) fn record(&self) {
        self.rec.get_or_init(|| {
            // SAFETY: whole, in-bounds ranges of our own mappings.
            let (data, meta) = unsafe {
                (
                    std::slice::from_raw_parts(self.data.as_ptr(), self.data.len()).to_vec(),
                    std::slice::from_raw_parts(self.meta.as_ptr(), self.meta.len()).to_vec(),
                )
            };
            Mutex::new(Recorder::new(data, meta))
        });
    }

    /// The crash point now, if recording.
    pub(crate) fn crash_point(&self) -> Option<CrashPoint> {
        self.rec.get().map(|r| r.lock().point())
    }

    /// Whether the store's bytes can outlive a host crash (a file, or a
    /// recording store), so that OOB records carry a check of their data.
    pub(crate) fn crash_exposed(&self) -> bool {
        self.data_file.is_some() || self.rec.get().is_some()
    }

    /// Programs consecutive pages `first ..` of one block, one per entry of
    /// `data` (each exactly one page) with the OOB record of the same index:
    /// their data, then their OOB records (with a data check where a crash
    /// can tear the two apart). Caller holds the channel lock.
    ///
    /// The pages lie side by side in the data file and so do their records,
    /// so a run is two writes whatever its length (a vectored write of the
    /// pages, one write of the records): a file system's cost per write
    /// (finding and dirtying the page-cache folio, its buffer heads) was
    /// most of the daemon's time under 128 KiB writes made a page at a time
    /// (issue 14). On an error (the host file system out of space, an I/O
    /// error) the pages may hold part of the data but no OOB record is
    /// written, so the caller must not count any of them as programmed.
    pub(crate) fn program_run(&self, first: PageId, data: &[&[u8]], oobs: &[Oob]) -> Result<()> {
        let ps = self.geo.page_size as usize;
        let k = data.len();
        debug_assert_eq!(k, oobs.len());
        debug_assert!(data.iter().all(|d| d.len() == ps));
        debug_assert!(k > 0 && first + k as u64 <= self.geo.total_pages());
        let start = first as usize * ps;
        self.put_pages(start, data)?;
        if let (Some(f), true) = (&self.data_file, self.fill_blocks) {
            if first.is_multiple_of(u64::from(self.geo.pages_per_block)) {
                // The block's first program: allocate the rest of it now,
                // in one write, so the programs that follow (one per flush
                // for a database committing) change no file-system metadata
                // and their flushes need no journal commit. The pages are
                // erased, so zeros over their holes change nothing a read
                // or a crash can see. Only a speed-up: if the host file
                // system is full, the programs that follow fail in its place.
                let end = start + self.geo.block_bytes() as usize;
                let _ = zero_holes(f, start + k * ps, end, NoSeekHole::Skip);
            }
        }
        let checked = self.crash_exposed();
        // The records side by side: on the stack for the usual short run
        // (one page, or a request's few pages on one unit).
        let (mut stack, mut heap) = ([0u8; OOB_SIZE * 8], Vec::new());
        let recs: &mut [u8] = if k <= 8 {
            &mut stack[..k * OOB_SIZE]
        } else {
            heap.resize(k * OOB_SIZE, 0);
            &mut heap
        };
        for ((oob, d), rec) in oobs.iter().zip(data).zip(recs.chunks_exact_mut(OOB_SIZE)) {
            rec.copy_from_slice(&if checked {
                oob.encode_checked(d)
            } else {
                oob.encode()
            });
        }
        let recs = &*recs;
        let oob_at = self.oob_off + first as usize * OOB_SIZE;
        self.put(Region::Meta, oob_at, recs)?;
        if let Some(r) = self.rec.get() {
            let mut r = r.lock();
            for (i, d) in data.iter().enumerate() {
                let p = first + i as u64;
                r.write(UnitKind::PageData, p, Region::Data, start + i * ps, d);
            }
            for (i, rec) in recs.chunks_exact(OOB_SIZE).enumerate() {
                let p = first + i as u64;
                r.write(
                    UnitKind::PageOob,
                    p,
                    Region::Meta,
                    oob_at + i * OOB_SIZE,
                    rec,
                );
            }
        }
        Ok(())
    }

    /// Writes `pages` side by side at byte `off` of the page data: one
    /// vectored write for a file (looping over short writes), copies for
    /// memory.
    fn put_pages(&self, off: usize, pages: &[&[u8]]) -> Result<()> {
        let Some(f) = &self.data_file else {
            let total: usize = pages.iter().map(|d| d.len()).sum();
            assert!(off + total <= self.data.len(), "store write out of bounds");
            let mut at = off;
            for d in pages {
                // SAFETY: in bounds (checked above); callers hold the channel
                // lock of the pages.
                unsafe { stream_copy(self.data.as_mut_ptr().add(at), d) };
                at += d.len();
            }
            return Ok(());
        };
        if let [one] = pages {
            return self.put(Region::Data, off, one);
        }
        let total: usize = pages.iter().map(|d| d.len()).sum();
        assert!(off + total <= self.data.len(), "store write out of bounds");
        write_all_vectored_at(f, pages, off as u64)?;
        Ok(())
    }

    /// Writes `bytes` at byte `off` of the page data or of the metadata.
    ///
    /// A file-backed store writes through the file descriptor (`pwrite`),
    /// never through its mapping, which serves reads only. A store through a
    /// shared mapping dirties whole page-cache folios: the kernel marks every
    /// block of a folio dirty on a write fault, and file systems with large
    /// folios (ext4 since Linux 6.16) cache a file in folios of up to 2 MiB.
    /// Each OOB record or page programmed after a flush then re-dirtied its
    /// folio, and the next flush wrote the whole folio back: pgbench over an
    /// export made the daemon write 18 GB to the host disk for 1 GB of
    /// tenant writes (issue 14). `pwrite` marks only the file-system blocks
    /// it touches, so a flush writes back what changed, and a write into a
    /// hole costs no page fault either.
    fn put(&self, region: Region, off: usize, bytes: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let (file, map) = match region {
            Region::Data => (&self.data_file, &self.data),
            Region::Meta => (&self.meta_file, &self.meta),
        };
        assert!(off + bytes.len() <= map.len(), "store write out of bounds");
        match file {
            Some(f) => f.write_all_at(bytes, off as u64)?,
            // SAFETY: in bounds (checked above); callers hold the channel
            // lock of the page or block the bytes belong to.
            None => unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    map.as_mut_ptr().add(off),
                    bytes.len(),
                )
            },
        }
        Ok(())
    }

    /// Whether page `p`'s data is what its OOB record was written with (see
    /// [`Oob::data_matches`]). Caller holds the page's channel lock.
    pub(crate) fn intact(&self, p: PageId) -> bool {
        let ps = self.geo.page_size as usize;
        // SAFETY: page in range; the bytes are plain data; channel lock held.
        let data = unsafe { std::slice::from_raw_parts(self.page_ptr(p), ps) };
        Oob::data_matches(self.oob(p), data)
    }

    /// Pointer to a page's data. Caller holds the page's channel lock.
    pub(crate) fn page_ptr(&self, p: PageId) -> *mut u8 {
        debug_assert!(p < self.geo.total_pages());
        // SAFETY: in bounds by the check above (callers validate page ids).
        unsafe {
            self.data
                .as_mut_ptr()
                .add(p as usize * self.geo.page_size as usize)
        }
    }

    pub(crate) fn oob(&self, p: PageId) -> &[u8] {
        let off = self.oob_off + p as usize * OOB_SIZE;
        // SAFETY: in bounds; the bytes are plain data.
        unsafe { std::slice::from_raw_parts(self.meta.as_ptr().add(off), OOB_SIZE) }
    }

    /// Writes `len` zero bytes at `off` of a region, without allocating
    /// (erases run on GC's path).
    fn put_zeros(&self, region: Region, off: usize, len: usize) -> Result<()> {
        in_zero_pieces(off, len, |at, z| self.put(region, at, z))
    }

    pub(crate) fn erase_count(&self, b: BlockId) -> u32 {
        let off = self.erase_off + b as usize * 4;
        let mut v = [0u8; 4];
        // SAFETY: in bounds.
        unsafe { std::ptr::copy_nonoverlapping(self.meta.as_ptr().add(off), v.as_mut_ptr(), 4) };
        u32::from_le_bytes(v)
    }

    /// Caller holds the channel lock of the block.
    fn set_erase_count(&self, b: BlockId, n: u32) -> Result<()> {
        self.put(
            Region::Meta,
            self.erase_off + b as usize * 4,
            &n.to_le_bytes(),
        )
    }

    /// Whether the file holds any allocated bytes of block `b` (SEEK_DATA):
    /// false for a block that was never programmed or was punched, and always
    /// false without a data file.
    pub(crate) fn holds_bytes(&self, b: BlockId) -> bool {
        use std::os::fd::AsRawFd;
        let Some(f) = &self.data_file else {
            return false;
        };
        let bytes = self.geo.block_bytes() as i64;
        let start = self.geo.first_page(b) as i64 * i64::from(self.geo.page_size);
        // SAFETY: lseek on our own descriptor.
        let d = unsafe { libc::lseek(f.as_raw_fd(), start as libc::off_t, libc::SEEK_DATA) };
        // No SEEK_DATA on this file system (an error other than "no data
        // after this offset"): assume bytes.
        if d < 0 {
            return std::io::Error::last_os_error().raw_os_error() != Some(libc::ENXIO);
        }
        (d as i64) < start + bytes
    }

    /// Discards a file's bytes of block `b` (hole punched, or zeroed where the
    /// file system cannot punch): what an erase does to a block that changes
    /// hands, and what a block erased for reuse gets before it does. Caller
    /// holds the block's channel lock.
    pub(crate) fn discard(&self, b: BlockId) -> Result<()> {
        let bytes = self.geo.block_bytes() as usize;
        let start = self.geo.first_page(b) as usize * self.geo.page_size as usize;
        let page_aligned = start.is_multiple_of(4096) && bytes.is_multiple_of(4096);
        match (&self.data_file, page_aligned) {
            (Some(f), true) => {
                use std::os::fd::AsRawFd;
                // SAFETY: a hole in our own file, in bounds, under the channel lock.
                let r = unsafe {
                    libc::fallocate(
                        f.as_raw_fd(),
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        start as libc::off_t,
                        bytes as libc::off_t,
                    )
                };
                if r != 0 {
                    // File systems without hole punching: write zeros instead.
                    self.put_zeros(Region::Data, start, bytes)?;
                }
            }
            (Some(_), false) => self.put_zeros(Region::Data, start, bytes)?,
            // Memory: nothing to scrub. The erased pages can no longer be read (a
            // read below the write pointer is the only kind the model allows) and a
            // program overwrites every byte of its page, so no tenant can ever see
            // the old bytes; they live in this process's memory only. Zeroing cost
            // 12.5% of the daemon's CPU on sequential overwrites (perf), and
            // dropping the pages (MADV_DONTNEED) cost 4x on GC-bound writes from
            // refaulting them (`cargo bench -p ftl`).
            (None, _) => {}
        }
        if let Some(r) = self.rec.get() {
            r.lock().write(
                UnitKind::EraseData,
                u64::from(b),
                Region::Data,
                start,
                &vec![0; bytes],
            );
        }
        Ok(())
    }

    /// Erases a block: its OOB records are zeroed and its erase count
    /// incremented; with `discard`, a file's bytes of the block are discarded
    /// too (hole punched, or zeroed).
    ///
    /// Without `discard` (a block its owner erases to reuse: garbage
    /// collection) the file keeps the block's bytes and, above all, its
    /// allocation. The old bytes can never be read back: reading a page of an
    /// erased block is an error of the flash model, a program overwrites its
    /// whole page, and recovery trusts a page only when its OOB record is
    /// intact and, where a crash can tear them apart, matches its data. A
    /// punched hole, by contrast, must be allocated again by the next
    /// programs, and on a file system that makes every sync that follows
    /// write file-system metadata (ext4 without a journal: a synchronous
    /// inode write per `fsync`; with one, a journal commit): pgbench over an
    /// export measured 0.59x of `nbdkit file` with every erase punching.
    /// Blocks that change hands (a new vSSD, a lend and its return, a
    /// delete) are erased with `discard`, so no tenant's bytes outlive its
    /// tenancy in the file either.
    pub(crate) fn erase(&self, b: BlockId, discard: bool) -> Result<()> {
        let ppb = self.geo.pages_per_block as usize;
        let first = self.geo.first_page(b);
        if discard {
            self.discard(b)?;
        }
        let off = self.oob_off + first as usize * OOB_SIZE;
        self.put_zeros(Region::Meta, off, ppb * OOB_SIZE)?;
        let count = self.erase_count(b).saturating_add(1);
        self.set_erase_count(b, count)?;
        if let Some(r) = self.rec.get() {
            let mut r = r.lock();
            let b64 = u64::from(b);
            r.write(
                UnitKind::EraseOob,
                b64,
                Region::Meta,
                off,
                &vec![0; ppb * OOB_SIZE],
            );
            let at = self.erase_off + b as usize * 4;
            r.write(
                UnitKind::EraseCount,
                b64,
                Region::Meta,
                at,
                &count.to_le_bytes(),
            );
        }
        Ok(())
    }

    /// Faults in every page of a memory backend now, so that the first write to
    /// each flash page does not pay for the host allocating and zeroing memory. On
    /// virtual machines that cost dominated the emulator's CPU time (perf: 90% in
    /// `clear_page` at 230 MB/s), which would distort emulation-mode timing.
    pub(crate) fn prefault(&self) -> Result<()> {
        if self.data_file.is_some() {
            return Err(FlashError::BadGeometry(
                "prefault applies to the memory backend only (it would allocate the whole sparse file)".into(),
            ));
        }
        for m in [&self.data, &self.meta] {
            // Huge pages first: with the memory faulted in up front their zeroing
            // cost is paid here, and the scattered page reads that follow random
            // writes miss the TLB far less. (Without prefault they stall the data
            // path zeroing 2 MiB at a time, which measured slower.) Advisory.
            // SAFETY: advice on our own anonymous mapping, in bounds.
            unsafe { libc::madvise(m.as_mut_ptr() as *mut _, m.len(), libc::MADV_HUGEPAGE) };
            // SAFETY: as above.
            let r = unsafe {
                libc::madvise(m.as_mut_ptr() as *mut _, m.len(), libc::MADV_POPULATE_WRITE)
            };
            if r != 0 {
                // Kernels before 5.14: touch every page instead (the bytes are zero).
                for off in (0..m.len()).step_by(4096) {
                    // SAFETY: in bounds; writes the zero the page already holds.
                    unsafe { std::ptr::write_volatile(m.as_mut_ptr().add(off), 0) };
                }
            }
        }
        Ok(())
    }

    pub(crate) fn sync(&self) -> Result<()> {
        if self.data_file.is_some() {
            self.data.flush()?;
            self.meta.flush()?;
        }
        if let Some(r) = self.rec.get() {
            r.lock().synced(None, None);
        }
        Ok(())
    }

    /// Makes durable what `dirty` says changed: the programmed pages' data and
    /// OOB records, and erased blocks' OOB records, erase counts and (when
    /// punched) data. The dirty blocks of one of the caller's `own` runs are
    /// synced as one span per file (see [`OwnRuns`]), other blocks range by
    /// range; beyond the runs, only OS pages shared with the set are written
    /// back (see the module docs).
    pub(crate) fn sync_dirty(&self, dirty: &DirtySet, own: &OwnRuns) -> Result<()> {
        if self.data_file.is_none() && self.rec.get().is_none() {
            return Ok(());
        }
        let ps = self.geo.page_size as usize;
        let mut data = Vec::with_capacity(dirty.len());
        let mut meta = Vec::with_capacity(dirty.len() * 2);
        for (&b, s) in &dirty.blocks {
            let run = own.run_of(b);
            let first = (self.geo.first_page(b) + u64::from(s.lo)) as usize;
            let n = (s.hi - s.lo) as usize;
            data.push((first * ps, n * ps, run));
            meta.push((self.oob_off + first * OOB_SIZE, n * OOB_SIZE, run));
            if s.erased {
                // Erase counts are a region of their own: never one span with
                // the OOB records.
                meta.push((self.erase_off + b as usize * 4, 4, None));
            }
        }
        self.sync_ranges(&data, &meta)
    }

    /// Makes the erases of `blocks` durable: their OOB records and erase
    /// counts in the metadata file, no page data.
    pub(crate) fn sync_erases(&self, blocks: &[BlockId]) -> Result<()> {
        if self.data_file.is_none() && self.rec.get().is_none() {
            return Ok(());
        }
        let ppb = self.geo.pages_per_block as usize;
        let mut meta = Vec::with_capacity(blocks.len() * 2);
        for &b in blocks {
            let first = self.geo.first_page(b) as usize;
            meta.push((self.oob_off + first * OOB_SIZE, ppb * OOB_SIZE, None));
            meta.push((self.erase_off + b as usize * 4, 4, None));
        }
        self.sync_ranges(&[], &meta)
    }

    /// Makes byte ranges of the two files durable: `(offset, length, own
    /// run)` as [`spans`] takes them. The file backend syncs their spans
    /// ([`Store::sync_files`]); a recording store is told the ranges
    /// themselves (rounded to OS pages, not the spans), so writes that
    /// landed between them during the sync stay pending in its crash states.
    fn sync_ranges(
        &self,
        data: &[(usize, usize, Option<usize>)],
        meta: &[(usize, usize, Option<usize>)],
    ) -> Result<()> {
        if let (Some(data_file), Some(meta_file)) = (&self.data_file, &self.meta_file) {
            // Rounded out to OS pages, the last span may pass the end of a
            // mapping (the metadata file's length is no multiple of one),
            // and msync refuses a range past it.
            let within = |v: Vec<(usize, usize)>, end: usize| -> Vec<(usize, usize)> {
                v.into_iter().map(|(o, n)| (o, n.min(end - o))).collect()
            };
            self.sync_files(
                data_file,
                meta_file,
                &within(spans(data, OS_PAGE), self.data.len()),
                &within(spans(meta, OS_PAGE), self.meta.len()),
            )?;
        }
        if let Some(r) = self.rec.get() {
            let exact = |v: &[(usize, usize, Option<usize>)]| {
                coalesce(v.iter().map(|&(o, n, _)| (o, n)).collect(), OS_PAGE)
            };
            r.lock().synced(Some(&exact(data)), Some(&exact(meta)));
        }
        Ok(())
    }

    /// Syncs page-aligned, sorted, disjoint ranges of the two files; see the
    /// module docs for the one-commit scheme.
    fn sync_files(
        &self,
        data_file: &File,
        meta_file: &File,
        data: &[(usize, usize)],
        meta: &[(usize, usize)],
    ) -> Result<()> {
        if !self.inode_fsync {
            // Each range its own msync (see the module docs).
            for (map, ranges) in [(&self.data, data), (&self.meta, meta)] {
                for &(off, len) in ranges {
                    map.flush_range(off, len)?;
                }
            }
            return Ok(());
        }
        // Both files' pages first, then one commit: the blocks the data file's
        // write-back allocates join the journal transaction that its msync
        // commits. Every write is started before any is waited for, so the
        // two files' writes are in flight together (one device round trip).
        let start = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE;
        write_back(data_file, data, start)?;
        write_back(meta_file, meta, start)?;
        write_back(data_file, data, libc::SYNC_FILE_RANGE_WAIT_AFTER)?;
        write_back(meta_file, meta, libc::SYNC_FILE_RANGE_WAIT_AFTER)?;
        match (data.last(), meta.last()) {
            // The metadata file is fully allocated (`zero_holes` at open), so its pages,
            // written back and complete, need no commit: the cache flush of the
            // data file's fsync, which comes after them, makes them durable too.
            (Some(&(off, len)), _) => self.data.flush_range(off, len)?,
            (None, Some(&(off, len))) => self.meta.flush_range(off, len)?,
            (None, None) => {}
        }
        Ok(())
    }
}

/// Zero bytes for writes of zeros, in pieces of this size.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Calls `put(offset, zeros)` over `len` bytes from `off`, in pieces of
/// [`ZEROS`].
fn in_zero_pieces(
    off: usize,
    len: usize,
    mut put: impl FnMut(usize, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(ZEROS.len());
        put(off + done, &ZEROS[..n])?;
        done += n;
    }
    Ok(())
}

/// What [`zero_holes`] does where the file system cannot say where holes are
/// (no `SEEK_HOLE`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum NoSeekHole {
    /// Rewrite the rest of the range with what it holds (allocates it all).
    Rewrite,
    /// Leave the range as it is.
    Skip,
}

/// `pwritev` of `bufs` at `off`, resumed after short writes and
/// interruptions until every byte is written (std's `write_all_at` for a
/// vectored write, which std lacks on stable).
fn write_all_vectored_at(file: &File, bufs: &[&[u8]], mut off: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // Where the unwritten bytes begin: buffer `i`, byte `skip` of it.
    let (mut i, mut skip) = (0usize, 0usize);
    while i < bufs.len() {
        let iov: Vec<libc::iovec> = bufs[i..]
            .iter()
            .enumerate()
            .take(libc::UIO_MAXIOV as usize)
            .map(|(n, b)| {
                let b = if n == 0 { &b[skip..] } else { b };
                libc::iovec {
                    iov_base: b.as_ptr() as *mut libc::c_void,
                    iov_len: b.len(),
                }
            })
            .collect();
        // SAFETY: every iovec points into a live slice of `bufs`, which
        // outlives the call; the kernel only reads them.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                off as libc::off_t,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let mut n = n as usize;
        off += n as u64;
        while n > 0 {
            let left = bufs[i].len() - skip;
            if n < left {
                skip += n;
                n = 0;
            } else {
                n -= left;
                i += 1;
                skip = 0;
            }
        }
        while i < bufs.len() && bufs[i].len() == skip {
            i += 1;
            skip = 0;
        }
    }
    Ok(())
}

/// Writes zeros into every hole of bytes `[start, end)` of `file` (holes read
/// as zeros already, so no content changes: no crash state differs), so that
/// later writes there allocate nothing. Returns whether it wrote anything.
fn zero_holes(file: &File, start: usize, end: usize, no_seek: NoSeekHole) -> Result<bool> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let fd = file.as_raw_fd();
    let mut wrote = false;
    let mut pos = start;
    while pos < end {
        // SAFETY: lseek on our own descriptor.
        let hole = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_HOLE) };
        if hole < 0 {
            break;
        }
        let hole = (hole as usize).min(end);
        if hole >= end {
            pos = end;
            break;
        }
        // SAFETY: as above.
        let data = unsafe { libc::lseek(fd, hole as libc::off_t, libc::SEEK_DATA) };
        let stop = if data < 0 {
            end
        } else {
            (data as usize).min(end)
        };
        in_zero_pieces(hole, stop - hole, |at, z| {
            Ok(file.write_all_at(z, at as u64)?)
        })?;
        wrote = true;
        pos = stop;
    }
    if pos < end && no_seek == NoSeekHole::Rewrite {
        let mut cur = vec![0u8; (1 << 20).min(end - pos)];
        while pos < end {
            let n = (end - pos).min(cur.len());
            // Rewriting what is there allocates whatever was a hole.
            file.read_exact_at(&mut cur[..n], pos as u64)?;
            file.write_all_at(&cur[..n], pos as u64)?;
            pos += n;
        }
        wrote = true;
    }
    Ok(wrote)
}

/// `sync_file_range` over page-aligned `ranges` of `file` with `flags`: starts
/// their write-back (`WRITE`) or waits for it (`WAIT_AFTER`), with no metadata
/// commit and no device cache flush.
fn write_back(file: &File, ranges: &[(usize, usize)], flags: libc::c_uint) -> Result<()> {
    use std::os::fd::AsRawFd;
    for &(off, len) in ranges {
        // SAFETY: a syscall on our own descriptor with in-file ranges.
        let rc = unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                off as libc::off64_t,
                len as libc::off64_t,
                flags,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
    }
    Ok(())
}

/// The metadata file that goes with a data file.
pub(crate) fn meta_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".meta");
    PathBuf::from(s)
}

/// Copies `src` to `dst` (memory backend: a program's page data). Pages
/// are large and cold: a program writes pages nobody read lately, so the
/// ordinary copy first reads every cache line of the destination in
/// (a read for ownership) and then evicts warm lines to make room. On
/// x86-64 a copy of a whole number of 64-byte lines to an aligned
/// destination uses non-temporal stores, which write whole lines to memory
/// without reading them first; 128 KiB sequential writes over NBD spent 16%
/// of the connection's time in this copy (`perf record`, BENCHMARKS.md).
/// The fence at the end orders the stores before the channel lock's
/// release, so a reader that takes the lock next sees them.
///
/// # Safety
///
/// `dst` is valid for `src.len()` bytes of writes and does not overlap
/// `src`.
unsafe fn stream_copy(dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let n = src.len();
        if n >= 4096 && n.is_multiple_of(64) && (dst as usize).is_multiple_of(16) {
            let mut i = 0;
            while i < n {
                // SAFETY: `i + 64 <= n`; SSE2 is part of x86-64; `dst + i`
                // is 16-byte aligned as `dst` is and `i` is a multiple of 64.
                unsafe {
                    let s = src.as_ptr().add(i) as *const __m128i;
                    let d = dst.add(i) as *mut __m128i;
                    let a = _mm_loadu_si128(s);
                    let b = _mm_loadu_si128(s.add(1));
                    let c = _mm_loadu_si128(s.add(2));
                    let e = _mm_loadu_si128(s.add(3));
                    _mm_stream_si128(d, a);
                    _mm_stream_si128(d.add(1), b);
                    _mm_stream_si128(d.add(2), c);
                    _mm_stream_si128(d.add(3), e);
                }
                i += 64;
            }
            // SAFETY: SSE is part of x86-64.
            unsafe { _mm_sfence() };
            return;
        }
    }
    // SAFETY: as the caller promises.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streaming copy puts every byte where the plain one would, for
    /// sizes on both sides of its threshold and its line multiple, aligned
    /// and unaligned sources and destinations, and leaves the bytes around
    /// the destination alone.
    #[test]
    fn stream_copy_copies_exactly() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for len in [0, 1, 63, 64, 4032, 4095, 4096, 4160, 8192, 12_288, 16_000] {
            for (s_off, d_off) in [(0, 0), (3, 0), (0, 16), (5, 8), (1, 1)] {
                let mut dst = vec![0xEEu8; len + 64];
                let (lo, hi) = dst.split_at_mut(d_off);
                // SAFETY: `hi` holds `len + 64 - d_off >= len` bytes and is
                // a buffer of its own.
                unsafe { stream_copy(hi.as_mut_ptr(), &src[s_off..s_off + len]) };
                assert!(lo.iter().all(|&b| b == 0xEE), "before, len {len}");
                assert_eq!(
                    &hi[..len],
                    &src[s_off..s_off + len],
                    "len {len}, offsets {s_off} {d_off}"
                );
                assert!(hi[len..].iter().all(|&b| b == 0xEE), "after, len {len}");
            }
        }
    }

    /// More buffers than one `pwritev` takes (`UIO_MAXIOV`), of uneven
    /// sizes, some empty: every byte lands where it belongs.
    #[test]
    fn vectored_writes_go_past_the_iovec_limit() {
        let dir = tempfile::tempdir().unwrap();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        let bufs: Vec<Vec<u8>> = (0..1500u32)
            .map(|i| vec![(i % 251) as u8; (i % 7 * 3) as usize])
            .collect();
        let refs: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
        write_all_vectored_at(&f, &refs, 100).unwrap();
        let want: Vec<u8> = bufs.concat();
        let mut got = vec![0u8; want.len()];
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut got, 100).unwrap();
        assert_eq!(got, want);
        assert_eq!(f.metadata().unwrap().len(), 100 + want.len() as u64);
    }
}
