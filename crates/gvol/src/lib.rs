//! A harvest tenant's volume: one block device whose LBA space is backed by one or
//! more ghost vSSDs (gSSDs), with online migration between gSSDs (BlockFlex,
//! OSDI'22 §4.3.2 Figure 12 and §4.5 "early resource reclamation").
//!
//! # What it is
//!
//! A [`GhostVolume`] has a fixed size, declared when it is created, and a sorted
//! list of *segments*. A segment maps a range of volume bytes to
//! `(gSSD id, device, base)`: volume byte `o` of a segment that starts at `s` lives
//! at byte `base + (o - s)` of the gSSD's device (an `ftl::Vssd` in the daemon, any
//! [`BlockDev`] here). That is the paper's `LBA → [gSSD-ID, gLBA]` translation; the
//! gSSD's own FTL does `gLBA → PBA`. Bytes that no segment covers are *unbacked*:
//! they read as zeros (so a tenant never sees anybody else's data there), and a
//! write to them fails with [`blockdev::IoError::NoSpace`] (ENOSPC on the wire),
//! before any byte of the request is written. Trim and write-zeroes of unbacked
//! bytes succeed: those bytes already read as zeros.
//!
//! Bytes whose segment was *evicted* ([`GhostVolume::evict`]: its gSSD was
//! reclaimed and no other could take the data) are *lost*, not unbacked: the
//! tenant wrote there, and zeros would be a silent lie that a file system would
//! take for its own metadata. Reads of them fail with an I/O error (EIO), and
//! so do writes and write-zeroes; block status reports them as data (their
//! contents are not known to be zero); a trim succeeds and does nothing. They
//! stay lost for the life of the volume ([`GhostVolume::lost`] lists them, so
//! the caller can persist them and restore them with
//! [`GhostVolume::mark_lost`]).
//!
//! # Why one volume over several gSSDs (Figure 12), not one export per gSSD
//!
//! * **The tenant sees one disk that grows.** Under-harvesting (§4.5) is handled by
//!   attaching another gSSD; with one export per gSSD the tenant would have to add a
//!   device to its file system (btrfs can, ext4 cannot) every time, and remove it
//!   again — a slow rebalance that moves data off the device — on every reclaim.
//!   Here the volume is declared at its largest size once and gSSDs fill it in;
//!   the file system is grown with ordinary tools (`resize2fs`, `btrfs filesystem
//!   resize`) within the backed prefix, as the paper says.
//! * **Migration is invisible to the tenant.** Early reclamation moves a segment to
//!   another gSSD under the same LBAs: no device disappears from the tenant's file
//!   system, no NBD connection is dropped, and the switch is one map update.
//! * **One place to enforce security.** Unbacked bytes read as zeros and the old
//!   blocks are handed back to the caller to erase only after the map no longer
//!   points at them.
//!
//! The price is one map lookup per request (a `parking_lot::RwLock` read and a
//! `BTreeMap` search; see the benchmark figures below) and requests that cross a
//! segment boundary being split.
//!
//! # Online migration, and why it is correct
//!
//! [`GhostVolume::migrate`] copies a segment chunk by chunk (1 MiB by default) from
//! its gSSD (the *old* target) to a new one while the tenant keeps doing I/O, then
//! switches the mapping. The scheme:
//!
//! * a `cursor` counts the chunks already copied (chunks are copied in order);
//! * the copier holds a *stripe lock* (chunk index modulo 64) exclusively while it
//!   copies one chunk: read old, write new, advance the cursor;
//! * every write, trim or write-zeroes goes to the old target, per chunk, under that
//!   chunk's stripe lock held shared; if the chunk is already copied
//!   (`chunk < cursor`) it goes to the new target too;
//! * reads go to the old target only;
//! * at the end the copier flushes the new target and takes the volume map's write
//!   lock — every request holds the map's read lock from lookup to completion, so
//!   this waits for in-flight requests — and points the segment at the new target.
//!
//! Invariant: *the old target always holds the latest data of the whole segment*
//! (every mutation goes there first, and it is what the tenant reads), and *every
//! chunk below the cursor is identical on both targets*. A chunk enters the copied
//! set only while the copier holds its stripe exclusively, so no mutation of it is
//! in flight then: the copy reads every completed write. A mutation holds the stripe
//! shared, so it sees a stable answer to "is this chunk copied?": if not, the copier
//! will read its result from the old target later; if so, it writes both. When the
//! cursor reaches the end, both targets hold the same bytes, and the switch happens
//! with no request in flight, so no request ever straddles the two mappings.
//! A write to the chunk being copied waits for that one chunk (and for chunks
//! that share its stripe, one in 64); writes elsewhere do not wait.
//!
//! Cancellation ([`MigrationHandle::cancel`], a [`Deadline`] that passes, a failed
//! read of the old target, or any failed write to the new target — a dual write
//! that fails on the new target still succeeds for the tenant and fails the
//! migration instead) drops the migration state under the map's write lock. The
//! old mapping was never changed and, by the invariant, is complete: the
//! migration leaves it intact. The new target holds a partial copy that the
//! caller should erase.
//!
//! On success, [`MigrationHandle::wait`] returns the old target in [`Migrated`]:
//! no request can reach it any more, and the caller may erase its blocks and give
//! them back to the home vSSD.
//!
//! # Threads
//!
//! [`GhostVolume::migrate`] spawns one thread per migration (named
//! `gvol-mig-<volume>`) and returns a cloneable [`MigrationHandle`]: the control
//! plane polls `progress()` for `flexssd harvest status` and events, and one of its
//! threads `wait()`s. A caller that wants to drive the copy itself (the simulator on
//! a virtual clock, or a test that interleaves I/O with single chunk copies) uses
//! [`GhostVolume::start_migration`] and calls [`Migration::step`]. Dropping an
//! unfinished [`Migration`] cancels it; dropping a [`MigrationHandle`] does not.
//!
//! # Pacing
//!
//! By default the copy runs as fast as the two gSSDs allow, and takes their
//! bandwidth from the tenants that share their flash. [`MigrateOptions::pacing`]
//! limits it to a rate in bytes per second on an injected clock ([`Pacing`]):
//! chunks are spaced by `chunk / rate`. [`Migration::step`] refuses to copy early
//! (it answers [`Step::Wait`] with the time it may), [`Migration::next_step_at`]
//! says when without stepping, and [`Migration::run`] sleeps until then, woken
//! at once by a cancel and ended by a deadline. Pacing only spaces the copy; the
//! correctness argument above does not depend on when chunks are copied.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use blockdev::{BlockDev, MemDev};
//! use gvol::{GhostVolume, MigrateOptions};
//!
//! const MIB: u64 = 1 << 20;
//! // A 64 MiB volume, of which the first 16 MiB live on gSSD 1 at its byte 0.
//! let vol = GhostVolume::new("tenant42", 64 * MIB);
//! let g1: Arc<dyn BlockDev> = Arc::new(MemDev::new(16 * MIB));
//! vol.attach(0, 16 * MIB, 1, g1.clone(), 0)?;
//! vol.write(4096, b"harvested", false)?;
//!
//! // Past the backed prefix: zeros on read, ENOSPC on write.
//! let mut buf = [1u8; 9];
//! vol.read(32 * MIB, &mut buf)?;
//! assert_eq!(buf, [0; 9]);
//! assert_eq!(vol.write(32 * MIB, b"x", false).unwrap_err().errno(), 28);
//!
//! // Under-harvesting: attach gSSD 2 (at its byte 4 MiB) for the next 16 MiB.
//! let g2: Arc<dyn BlockDev> = Arc::new(MemDev::new(20 * MIB));
//! vol.attach(16 * MIB, 16 * MIB, 2, g2, 4 * MIB)?;
//!
//! // Early reclamation of gSSD 1: move its segment to gSSD 3 while I/O goes on.
//! let g3: Arc<dyn BlockDev> = Arc::new(MemDev::new(16 * MIB));
//! let h = vol.migrate_with(0, 3, g3, 0, MigrateOptions::default())?;
//! vol.write(8192, b"during", false)?; // lands on both gSSDs if already copied
//! let done = h.wait().expect("migration succeeds");
//! assert_eq!(done.old.gssd_id, 1);
//! // Nothing reaches gSSD 1 any more: erase it and give it back.
//! done.old.dev.trim(done.old.base, done.len)?;
//! vol.read(4096, &mut buf)?;
//! assert_eq!(&buf, b"harvested");
//! assert_eq!(vol.segments()[0].gssd_id, 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Overhead (benches/gvol.rs)
//!
//! `cargo bench -p gvol --bench gvol -- --warm-up-time 1 --measurement-time 4`, on
//! the 2-core development machine while other builds ran (load 4–7, so ranges
//! over several runs). Against a device that does nothing (`map_4k_null`), the
//! mapping layer costs per 4 KiB request:
//!
//! | volume                              | read     | write    |
//! |-------------------------------------|----------|----------|
//! | bare device                         | 2–4 ns   | 2–4 ns   |
//! | 1 segment                           | 18–20 ns | 20–31 ns |
//! | 16 segments on 16 gSSDs             | 32–56 ns | 35–59 ns |
//! | 1 segment, half migrated (paused)   | 18 ns    | 40 ns, plus the 2nd write |
//!
//! On the in-memory device (`io_4k`, a 4 KiB copy and a cache miss per request)
//! a bare random read or write takes 0.3–0.7 µs and the volume's extra cost is
//! within the run-to-run noise; on flash (tens of µs per page) it is invisible.
//! Migrating 64 MiB between in-memory devices (`migrate`) runs at 1–8 GiB/s
//! with 256 KiB–4 MiB chunks (the low end when the destination's pages are
//! first touched): the copy is bounded by the gSSDs, not by this layer.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use blockdev::{
    check_range, covered, push_extent, Alloc, BlockDev, BlockSizes, Completion, IoError, IoResult,
    Loan, MapExtent,
};
use parking_lot::{Condvar, Mutex, RwLock};

mod migrate;

pub use migrate::{
    Deadline, MigrateOptions, Migrated, Migration, MigrationError, MigrationHandle, Pacing, Step,
    DEFAULT_CHUNK,
};

#[cfg(test)]
mod tests;

/// Alignment of segment offsets, lengths and bases, and of migration chunks.
pub const ALIGN: u64 = 4096;

/// Why a change to a volume's segments was refused. The volume is unchanged.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum GvolError {
    /// The segment would reach past the end of the volume.
    #[error("segment at {offset} length {len} is outside the volume of {size} bytes")]
    OutOfRange {
        /// First volume byte of the segment.
        offset: u64,
        /// Length of the segment in bytes.
        len: u64,
        /// Declared size of the volume.
        size: u64,
    },
    /// A value that must be a multiple of [`ALIGN`] (and, for lengths, positive) is not.
    #[error("{what} {value} is not a positive multiple of {ALIGN}")]
    Misaligned {
        /// Which value.
        what: &'static str,
        /// The value given.
        value: u64,
    },
    /// The segment would overlap one that is already attached.
    #[error("segment at {offset} length {len} overlaps the segment at {existing}")]
    Overlap {
        /// First volume byte of the new segment.
        offset: u64,
        /// Length of the new segment.
        len: u64,
        /// First volume byte of the segment already there.
        existing: u64,
    },
    /// No segment starts at this volume offset.
    #[error("no segment starts at volume offset {0}")]
    NoSegment(u64),
    /// The range overlaps bytes that were lost when their segment was evicted:
    /// they cannot be backed again (their data is gone; see the crate docs).
    #[error("range at {offset} length {len} overlaps bytes lost at {lost} (evicted)")]
    Lost {
        /// First volume byte of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// First volume byte of the lost range it overlaps.
        lost: u64,
    },
    /// The segment is being migrated; cancel or wait for the migration first.
    #[error("the segment at volume offset {0} is being migrated")]
    Migrating(u64),
    /// Those bytes of the device already back a segment of this volume (or are the
    /// destination of a migration): two segments must never share a block.
    #[error("bytes [{base}, +{len}) of gSSD {gssd_id} already back the segment at {existing}")]
    SharedBlocks {
        /// The gSSD.
        gssd_id: u64,
        /// First byte asked for on the device.
        base: u64,
        /// Bytes asked for.
        len: u64,
        /// First volume byte of the segment that uses (some of) them.
        existing: u64,
    },
    /// The gSSD's device is too small for `base + len`.
    #[error("gSSD {gssd_id} has {size} bytes, {need} are needed (base + segment length)")]
    TooSmall {
        /// The gSSD.
        gssd_id: u64,
        /// `base + len`.
        need: u64,
        /// The device's size.
        size: u64,
    },
}

/// Where a segment's bytes live: a gSSD's device and the byte at which the segment
/// starts on it.
#[derive(Clone)]
pub struct Target {
    /// The gSSD's id in the pool.
    pub gssd_id: u64,
    /// The gSSD's block device.
    pub dev: Arc<dyn BlockDev>,
    /// Byte of `dev` that holds the segment's first byte.
    pub base: u64,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("gssd_id", &self.gssd_id)
            .field("base", &self.base)
            .field("dev_size", &self.dev.size())
            .finish()
    }
}

/// A segment as [`GhostVolume::segments`] reports it (for status output and the API).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentInfo {
    /// First volume byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// The gSSD that serves it.
    pub gssd_id: u64,
    /// Byte of that gSSD where the segment starts (the gLBA of its first byte).
    pub base: u64,
    /// The migration in progress, if any.
    pub migration: Option<MigrationInfo>,
}

/// A migration in progress, as [`SegmentInfo`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrationInfo {
    /// The gSSD the segment moves to.
    pub to_gssd: u64,
    /// Byte of that gSSD where the segment will start.
    pub to_base: u64,
    /// Bytes copied so far.
    pub copied_bytes: u64,
    /// Bytes to copy in all (the segment's length).
    pub total_bytes: u64,
}

/// How far a migration has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    /// Bytes copied so far.
    pub copied_bytes: u64,
    /// Bytes to copy in all.
    pub total_bytes: u64,
}

impl Progress {
    /// Fraction done, in `[0, 1]`.
    pub fn fraction(&self) -> f64 {
        if self.total_bytes == 0 {
            1.0
        } else {
            self.copied_bytes as f64 / self.total_bytes as f64
        }
    }
}

/// Number of stripe locks per migration (chunk index modulo this).
const STRIPES: usize = 64;

/// The shared state of one migration: read by the I/O path, advanced by the copier.
pub(crate) struct MigState {
    pub(crate) seg_offset: u64,
    pub(crate) len: u64,
    pub(crate) chunk: u64,
    pub(crate) nchunks: u64,
    pub(crate) from_gssd: u64,
    pub(crate) new: Target,
    /// Chunks `[0, cursor)` are copied (identical on both targets).
    pub(crate) cursor: AtomicU64,
    pub(crate) stripes: Box<[RwLock<()>]>,
    pub(crate) cancel: AtomicBool,
    /// Set (with `target_error`) when a dual write fails on the new target.
    pub(crate) target_failed: AtomicBool,
    pub(crate) target_error: Mutex<Option<IoError>>,
    pub(crate) outcome: Mutex<Option<Result<Migrated, MigrationError>>>,
    pub(crate) finished: Condvar,
    /// A paced copier sleeps on `wake` (with `wake_lock`) between chunks;
    /// [`MigrationHandle::cancel`] notifies it.
    pub(crate) wake_lock: Mutex<()>,
    pub(crate) wake: Condvar,
}

impl MigState {
    pub(crate) fn progress(&self) -> Progress {
        let c = self.cursor.load(Ordering::Acquire);
        Progress {
            copied_bytes: (c * self.chunk).min(self.len),
            total_bytes: self.len,
        }
    }

    fn stripe(&self, chunk: u64) -> &RwLock<()> {
        &self.stripes[(chunk % STRIPES as u64) as usize]
    }

    fn fail_target(&self, e: IoError) {
        let mut g = self.target_error.lock();
        if g.is_none() {
            *g = Some(e);
        }
        self.target_failed.store(true, Ordering::Release);
    }
}

pub(crate) struct Segment {
    pub(crate) len: u64,
    pub(crate) target: Target,
    pub(crate) mig: Option<Arc<MigState>>,
}

pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) size: u64,
    /// Segments by first volume byte. Every request holds the read lock from lookup
    /// to completion; attach, detach and the migration switch take the write lock.
    pub(crate) map: RwLock<BTreeMap<u64, Segment>>,
    /// Lost ranges (first byte -> length): evicted segments' bytes. Changed
    /// only with `map`'s write lock held (so a request, which holds its read
    /// lock, sees one answer), read under `map`'s read lock.
    pub(crate) lost: RwLock<BTreeMap<u64, u64>>,
}

/// A harvest tenant's volume: a fixed-size [`BlockDev`] whose bytes are mapped, by
/// segments, onto gSSDs. Cheap to clone (the clones share one volume), so the NBD
/// export and the control plane can each hold one.
#[derive(Clone)]
pub struct GhostVolume {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for GhostVolume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GhostVolume")
            .field("name", &self.inner.name)
            .field("size", &self.inner.size)
            .field("segments", &self.segments())
            .finish()
    }
}

fn aligned(what: &'static str, value: u64, positive: bool) -> Result<(), GvolError> {
    if !value.is_multiple_of(ALIGN) || (positive && value == 0) {
        Err(GvolError::Misaligned { what, value })
    } else {
        Ok(())
    }
}

/// One piece of a request after splitting at segment boundaries.
enum Piece<'a> {
    /// `len` bytes at `seg_off` of `seg`, `buf_off` bytes into the request.
    Mapped {
        seg: &'a Segment,
        seg_off: u64,
        buf_off: u64,
        len: u64,
    },
    /// `len` unbacked bytes, `buf_off` bytes into the request.
    Hole { buf_off: u64, len: u64 },
}

/// Splits `[offset, offset + len)` into mapped pieces and holes, in order.
fn split(
    map: &BTreeMap<u64, Segment>,
    offset: u64,
    len: u64,
    mut f: impl FnMut(Piece<'_>) -> IoResult<()>,
) -> IoResult<()> {
    let end = offset + len;
    let mut pos = offset;
    while pos < end {
        let containing = match map.range(..=pos).next_back() {
            Some((&s, seg)) if pos < s + seg.len => Some((s, seg)),
            _ => None,
        };
        match containing {
            Some((s, seg)) => {
                let n = end.min(s + seg.len) - pos;
                f(Piece::Mapped {
                    seg,
                    seg_off: pos - s,
                    buf_off: pos - offset,
                    len: n,
                })?;
                pos += n;
            }
            None => {
                let next = map.range(pos..).next().map_or(end, |(&s, _)| s.min(end));
                f(Piece::Hole {
                    buf_off: pos - offset,
                    len: next - pos,
                })?;
                pos = next;
            }
        }
    }
    Ok(())
}

/// The segment (and its first byte) that holds all of `[offset, offset + len)`, if
/// one does: the common case, served without splitting.
/// Reads `len` bytes of `dev` at `at` as loans: its own if it lends, else
/// one loan of a copy.
fn lend_from(dev: &dyn BlockDev, at: u64, len: usize) -> IoResult<(Completion, Vec<Loan>)> {
    if let Some(r) = dev.read_lent(at, len) {
        return r;
    }
    let mut b = vec![0u8; len].into_boxed_slice();
    let done = dev.read(at, &mut b)?;
    Ok((done, vec![Loan::owned(b)]))
}

fn within(map: &BTreeMap<u64, Segment>, offset: u64, len: u64) -> Option<(u64, &Segment)> {
    match map.range(..=offset).next_back() {
        Some((&s, seg)) if offset + len <= s + seg.len => Some((s, seg)),
        _ => None,
    }
}

/// Applies a mutation (`op(target, device offset, piece offset, piece length)`) to
/// `len` bytes at `seg_off` of `seg`, to both targets where a migration has
/// already copied the chunk (see the module docs for why this is correct).
fn mutate(
    seg: &Segment,
    seg_off: u64,
    len: u64,
    op: &mut dyn FnMut(&Target, u64, u64, u64) -> IoResult,
) -> IoResult {
    let Some(m) = &seg.mig else {
        return op(&seg.target, seg.target.base + seg_off, 0, len);
    };
    let mut done = 0;
    let mut completion: Completion = 0;
    while done < len {
        let pos = seg_off + done;
        let chunk = pos / m.chunk;
        let n = ((chunk + 1) * m.chunk).min(seg_off + len) - pos;
        let _g = m.stripe(chunk).read();
        completion = completion.max(op(&seg.target, seg.target.base + pos, done, n)?);
        if chunk < m.cursor.load(Ordering::Acquire) && !m.target_failed.load(Ordering::Acquire) {
            match op(&m.new, m.new.base + pos, done, n) {
                Ok(c) => completion = completion.max(c),
                // The tenant's write is safe on the old target; the migration fails.
                Err(e) => m.fail_target(e),
            }
        }
        done += n;
    }
    Ok(completion)
}

impl GhostVolume {
    /// An empty volume of `size_bytes` (nothing backed yet: reads return zeros,
    /// writes fail with ENOSPC until segments are attached).
    pub fn new(name: impl Into<String>, size_bytes: u64) -> Self {
        Self {
            inner: Arc::new(Inner {
                name: name.into(),
                size: size_bytes,
                map: RwLock::new(BTreeMap::new()),
                lost: RwLock::new(BTreeMap::new()),
            }),
        }
    }

    /// The volume's name (its NBD export name).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Bytes of the volume that some segment backs.
    pub fn backed_bytes(&self) -> u64 {
        self.inner.map.read().values().map(|s| s.len).sum()
    }

    /// Maps `len` volume bytes at `volume_offset` to bytes `[base, base + len)` of
    /// gSSD `gssd_id`'s device `dev`. Offsets, lengths and bases are multiples of
    /// [`ALIGN`]; the range must lie within the volume, overlap no other segment, and
    /// fit on `dev`. The bytes read as whatever `dev` holds there, so hand in an
    /// erased range (the security rule: a block is erased before it changes hands).
    pub fn attach(
        &self,
        volume_offset: u64,
        len: u64,
        gssd_id: u64,
        dev: Arc<dyn BlockDev>,
        base: u64,
    ) -> Result<SegmentInfo, GvolError> {
        aligned("volume offset", volume_offset, false)?;
        aligned("segment length", len, true)?;
        aligned("gSSD base", base, false)?;
        self.within_volume(volume_offset, len)?;
        check_fits(gssd_id, &*dev, base, len)?;
        let mut map = self.inner.map.write();
        no_segment_in(&map, volume_offset, len)?;
        check_unshared(&map, gssd_id, &dev, base, len)?;
        if let Some((l, _)) = self.lost_within(volume_offset, len) {
            return Err(GvolError::Lost {
                offset: volume_offset,
                len,
                lost: l,
            });
        }
        map.insert(
            volume_offset,
            Segment {
                len,
                target: Target { gssd_id, dev, base },
                mig: None,
            },
        );
        Ok(SegmentInfo {
            offset: volume_offset,
            len,
            gssd_id,
            base,
            migration: None,
        })
    }

    /// Unmaps the segment that starts at `volume_offset` (its bytes then read as
    /// zeros and refuse writes) and returns where it lived, so the caller can erase
    /// those blocks. Waits for requests in flight on the volume. Refused while the
    /// segment is being migrated.
    pub fn detach(&self, volume_offset: u64) -> Result<(SegmentInfo, Target), GvolError> {
        self.unmap(volume_offset, false)
    }

    /// As [`GhostVolume::detach`], for a segment whose data is lost with it (its
    /// gSSD is reclaimed and nothing could take the data): its bytes then fail
    /// reads and writes (see the crate docs) instead of reading as zeros.
    pub fn evict(&self, volume_offset: u64) -> Result<(SegmentInfo, Target), GvolError> {
        self.unmap(volume_offset, true)
    }

    fn unmap(&self, volume_offset: u64, lost: bool) -> Result<(SegmentInfo, Target), GvolError> {
        let mut map = self.inner.map.write();
        let seg = map
            .get(&volume_offset)
            .ok_or(GvolError::NoSegment(volume_offset))?;
        if seg.mig.is_some() {
            return Err(GvolError::Migrating(volume_offset));
        }
        let seg = map.remove(&volume_offset).expect("looked up above");
        if lost {
            self.add_lost(volume_offset, seg.len);
        }
        let info = SegmentInfo {
            offset: volume_offset,
            len: seg.len,
            gssd_id: seg.target.gssd_id,
            base: seg.target.base,
            migration: None,
        };
        Ok((info, seg.target))
    }

    /// Marks `len` unbacked bytes at `volume_offset` as lost, as
    /// [`GhostVolume::evict`] left them (for a caller restoring a volume it
    /// persisted). Same alignment and range rules as [`GhostVolume::attach`];
    /// the range must overlap no segment.
    pub fn mark_lost(&self, volume_offset: u64, len: u64) -> Result<(), GvolError> {
        aligned("volume offset", volume_offset, false)?;
        aligned("lost length", len, true)?;
        self.within_volume(volume_offset, len)?;
        let map = self.inner.map.write();
        no_segment_in(&map, volume_offset, len)?;
        self.add_lost(volume_offset, len);
        drop(map);
        Ok(())
    }

    /// Records `[offset, offset + len)` as lost, merged with the lost ranges
    /// it overlaps or touches (so that [`GhostVolume::lost_within`] needs to
    /// look at one range before `offset`). The caller holds the map's write
    /// lock.
    fn add_lost(&self, offset: u64, len: u64) {
        let mut lost = self.inner.lost.write();
        lost.insert(offset, len);
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(lost.len());
        for (&o, &l) in lost.iter() {
            match merged.last_mut() {
                Some((mo, ml)) if *mo + *ml >= o => *ml = (*ml).max(o + l - *mo),
                _ => merged.push((o, l)),
            }
        }
        *lost = merged.into_iter().collect();
    }

    /// Refuses a range that reaches past the end of the volume.
    fn within_volume(&self, offset: u64, len: u64) -> Result<(), GvolError> {
        if offset.checked_add(len).is_none_or(|e| e > self.inner.size) {
            return Err(GvolError::OutOfRange {
                offset,
                len,
                size: self.inner.size,
            });
        }
        Ok(())
    }

    /// The lost ranges, `(first byte, length)` in volume order.
    pub fn lost(&self) -> Vec<(u64, u64)> {
        self.inner
            .lost
            .read()
            .iter()
            .map(|(&o, &l)| (o, l))
            .collect()
    }

    /// The first lost range that overlaps `[offset, offset + len)`, if any.
    fn lost_within(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let lost = self.inner.lost.read();
        if lost.is_empty() {
            return None;
        }
        let end = offset.saturating_add(len);
        let before = lost
            .range(..offset)
            .next_back()
            .filter(|(&o, &l)| o + l > offset);
        before
            .or_else(|| lost.range(offset..end).next())
            .map(|(&o, &l)| (o, l))
    }

    /// The error for a request that touches lost bytes `(o, l)`.
    fn lost_error(&self, (o, l): (u64, u64)) -> IoError {
        IoError::Media(format!(
            "volume {}: bytes [{o}, {}) were lost when their gSSD was reclaimed with nowhere to move them (evicted)",
            self.inner.name,
            o + l
        ))
    }

    /// Fails if `[offset, offset + len)` holds lost bytes. Lost ranges never
    /// overlap a segment (`attach` refuses them, `mark_lost` refuses a
    /// segment, `evict` removes the segment), so a request that one segment
    /// holds never needs to ask, and one check covers the others whole.
    fn check_not_lost(&self, offset: u64, len: u64) -> IoResult<()> {
        match self.lost_within(offset, len) {
            Some(r) => Err(self.lost_error(r)),
            None => Ok(()),
        }
    }

    /// The segments, in volume order, with any migration's progress.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.inner
            .map
            .read()
            .iter()
            .map(|(&offset, s)| SegmentInfo {
                offset,
                len: s.len,
                gssd_id: s.target.gssd_id,
                base: s.target.base,
                migration: s.mig.as_ref().map(|m| {
                    let p = m.progress();
                    MigrationInfo {
                        to_gssd: m.new.gssd_id,
                        to_base: m.new.base,
                        copied_bytes: p.copied_bytes,
                        total_bytes: p.total_bytes,
                    }
                }),
            })
            .collect()
    }

    /// Moves the segment that starts at `volume_offset` to `[base, base + len)` of
    /// gSSD `gssd_id` online, on a thread this call spawns, with the default options
    /// (1 MiB chunks, no deadline). See [`GhostVolume::migrate_with`].
    pub fn migrate(
        &self,
        volume_offset: u64,
        gssd_id: u64,
        dev: Arc<dyn BlockDev>,
        base: u64,
    ) -> Result<MigrationHandle, GvolError> {
        self.migrate_with(volume_offset, gssd_id, dev, base, MigrateOptions::default())
    }

    /// Moves the segment that starts at `volume_offset` to `[base, base + len)` of
    /// gSSD `gssd_id` online, on a thread this call spawns (module docs: the scheme
    /// and why it is correct). The returned handle reports progress, cancels, and
    /// waits for the outcome.
    pub fn migrate_with(
        &self,
        volume_offset: u64,
        gssd_id: u64,
        dev: Arc<dyn BlockDev>,
        base: u64,
        opts: MigrateOptions,
    ) -> Result<MigrationHandle, GvolError> {
        let mut m = self.start_migration(volume_offset, gssd_id, dev, base, opts)?;
        let handle = m.handle();
        std::thread::Builder::new()
            .name(format!("gvol-mig-{}", self.inner.name))
            .spawn(move || {
                let _ = m.run();
            })
            .expect("spawning a migration thread");
        Ok(handle)
    }

    /// Starts a migration that the caller drives with [`Migration::step`] (or
    /// [`Migration::run`]) on its own thread: for a simulator on a virtual clock, or
    /// to interleave I/O with single chunk copies. From this call on, mutations of
    /// already-copied chunks go to both gSSDs.
    pub fn start_migration(
        &self,
        volume_offset: u64,
        gssd_id: u64,
        dev: Arc<dyn BlockDev>,
        base: u64,
        opts: MigrateOptions,
    ) -> Result<Migration, GvolError> {
        aligned("gSSD base", base, false)?;
        aligned("migration chunk", opts.chunk_bytes, true)?;
        let mut map = self.inner.map.write();
        let seg = map
            .get(&volume_offset)
            .ok_or(GvolError::NoSegment(volume_offset))?;
        if seg.mig.is_some() {
            return Err(GvolError::Migrating(volume_offset));
        }
        let len = seg.len;
        check_fits(gssd_id, &*dev, base, len)?;
        check_unshared(&map, gssd_id, &dev, base, len)?;
        let seg = map.get_mut(&volume_offset).expect("looked up above");
        let state = Arc::new(MigState {
            seg_offset: volume_offset,
            len: seg.len,
            chunk: opts.chunk_bytes,
            nchunks: seg.len.div_ceil(opts.chunk_bytes),
            from_gssd: seg.target.gssd_id,
            new: Target { gssd_id, dev, base },
            cursor: AtomicU64::new(0),
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            cancel: AtomicBool::new(false),
            target_failed: AtomicBool::new(false),
            target_error: Mutex::new(None),
            outcome: Mutex::new(None),
            finished: Condvar::new(),
            wake_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        seg.mig = Some(state.clone());
        let old = seg.target.clone();
        Ok(Migration::new(
            self.inner.clone(),
            state,
            old,
            opts.deadline,
            opts.pacing,
        ))
    }

    fn check(&self, offset: u64, len: u64) -> IoResult<()> {
        check_range(offset, len, self.inner.size)
    }

    fn unbacked(&self, offset: u64, len: u64) -> IoError {
        IoError::NoSpace(format!(
            "volume {}: bytes [{offset}, {}) are not backed by any gSSD",
            self.inner.name,
            offset + len
        ))
    }
}

/// Refuses `[base, base + len)` of `dev` if any segment (or migration destination)
/// of `map` already uses some of those bytes of the same device.
fn check_unshared(
    map: &BTreeMap<u64, Segment>,
    gssd_id: u64,
    dev: &Arc<dyn BlockDev>,
    base: u64,
    len: u64,
) -> Result<(), GvolError> {
    let p = Arc::as_ptr(dev) as *const ();
    let clash = |t: &Target, tlen: u64| {
        Arc::as_ptr(&t.dev) as *const () == p && t.base < base + len && base < t.base + tlen
    };
    for (&existing, seg) in map {
        if clash(&seg.target, seg.len) || seg.mig.as_ref().is_some_and(|m| clash(&m.new, m.len)) {
            return Err(GvolError::SharedBlocks {
                gssd_id,
                base,
                len,
                existing,
            });
        }
    }
    Ok(())
}

/// Refuses `[offset, offset + len)` if a segment of `map` overlaps it.
fn no_segment_in(map: &BTreeMap<u64, Segment>, offset: u64, len: u64) -> Result<(), GvolError> {
    match map.range(..offset + len).next_back() {
        Some((&s, seg)) if s + seg.len > offset => Err(GvolError::Overlap {
            offset,
            len,
            existing: s,
        }),
        _ => Ok(()),
    }
}

fn check_fits(gssd_id: u64, dev: &dyn BlockDev, base: u64, len: u64) -> Result<(), GvolError> {
    let need = base.saturating_add(len);
    if need > dev.size() {
        return Err(GvolError::TooSmall {
            gssd_id,
            need,
            size: dev.size(),
        });
    }
    Ok(())
}

impl GhostVolume {
    /// [`BlockDev::read_lent`]: see there.
    fn lend(&self, offset: u64, len: usize) -> IoResult<(Completion, Vec<Loan>)> {
        self.check(offset, len as u64)?;
        let map = self.inner.map.read();
        if let Some((s, seg)) = within(&map, offset, len as u64) {
            return lend_from(&*seg.target.dev, seg.target.base + offset - s, len);
        }
        self.check_not_lost(offset, len as u64)?;
        let mut completion = 0;
        let mut loans = Vec::new();
        split(&map, offset, len as u64, |p| {
            match p {
                Piece::Mapped {
                    seg, seg_off, len, ..
                } => {
                    let (c, l) =
                        lend_from(&*seg.target.dev, seg.target.base + seg_off, len as usize)?;
                    completion = completion.max(c);
                    loans.extend(l);
                }
                Piece::Hole { len, .. } => Loan::push_zeros(&mut loans, len as usize),
            }
            Ok(())
        })?;
        Ok((completion, loans))
    }
}

impl BlockDev for GhostVolume {
    fn size(&self) -> u64 {
        self.inner.size
    }

    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            minimum: 512,
            preferred: ALIGN as u32,
            maximum: 32 << 20,
        }
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        self.check(offset, buf.len() as u64)?;
        let map = self.inner.map.read();
        if let Some((s, seg)) = within(&map, offset, buf.len() as u64) {
            return seg.target.dev.read(seg.target.base + offset - s, buf);
        }
        self.check_not_lost(offset, buf.len() as u64)?;
        let mut completion = 0;
        split(&map, offset, buf.len() as u64, |p| {
            match p {
                Piece::Mapped {
                    seg,
                    seg_off,
                    buf_off,
                    len,
                } => {
                    let b = &mut buf[buf_off as usize..(buf_off + len) as usize];
                    // The old target is complete during a migration: read it.
                    let c = seg.target.dev.read(seg.target.base + seg_off, b)?;
                    completion = completion.max(c);
                }
                Piece::Hole { buf_off, len } => {
                    buf[buf_off as usize..(buf_off + len) as usize].fill(0);
                }
            }
            Ok(())
        })?;
        Ok(completion)
    }

    /// The read as loans: each piece lent by its gSSD (a vSSD lends its
    /// flash pages; a target that cannot lend is read into a loan of its
    /// own), holes as zeros. A piece under migration is read from the old
    /// target, as [`BlockDev::read`] reads it; its erase after the switch
    /// recalls the loans first.
    fn read_lent(&self, offset: u64, len: usize) -> Option<IoResult<(Completion, Vec<Loan>)>> {
        Some(self.lend(offset, len))
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        let len = data.len() as u64;
        self.check(offset, len)?;
        let map = self.inner.map.read();
        if let Some((s, seg)) = within(&map, offset, len) {
            return mutate(seg, offset - s, len, &mut |t, at, o, n| {
                t.dev.write(at, &data[o as usize..(o + n) as usize], fua)
            });
        }
        // Refuse before writing anything if some byte is lost or unbacked.
        self.check_not_lost(offset, len)?;
        split(&map, offset, len, |p| match p {
            Piece::Hole { buf_off, len } => Err(self.unbacked(offset + buf_off, len)),
            Piece::Mapped { .. } => Ok(()),
        })?;
        let mut completion = 0;
        split(&map, offset, len, |p| {
            if let Piece::Mapped {
                seg,
                seg_off,
                buf_off,
                len,
            } = p
            {
                let c = mutate(seg, seg_off, len, &mut |t, at, o, n| {
                    let s = (buf_off + o) as usize;
                    t.dev.write(at, &data[s..s + n as usize], fua)
                })?;
                completion = completion.max(c);
            }
            Ok(())
        })?;
        Ok(completion)
    }

    fn flush(&self) -> IoResult {
        let map = self.inner.map.read();
        let mut seen: Vec<*const ()> = Vec::new();
        let mut completion = 0;
        let mut flush_once = |t: &Target| -> IoResult<()> {
            let p = Arc::as_ptr(&t.dev) as *const ();
            if !seen.contains(&p) {
                seen.push(p);
                completion = completion.max(t.dev.flush()?);
            }
            Ok(())
        };
        for seg in map.values() {
            flush_once(&seg.target)?;
            if let Some(m) = &seg.mig {
                if let Err(e) = flush_once(&m.new) {
                    m.fail_target(e);
                }
            }
        }
        Ok(completion)
    }

    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.check(offset, len)?;
        let map = self.inner.map.read();
        let mut completion = 0;
        split(&map, offset, len, |p| {
            if let Piece::Mapped {
                seg, seg_off, len, ..
            } = p
            {
                let c = mutate(seg, seg_off, len, &mut |t, at, _, n| t.dev.trim(at, n))?;
                completion = completion.max(c);
            }
            Ok(())
        })?;
        Ok(completion)
    }

    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        self.check(offset, len)?;
        let map = self.inner.map.read();
        // Lost bytes cannot be made to read as zeros: refuse before zeroing any.
        self.check_not_lost(offset, len)?;
        let mut completion = 0;
        split(&map, offset, len, |p| {
            if let Piece::Mapped {
                seg, seg_off, len, ..
            } = p
            {
                let c = mutate(seg, seg_off, len, &mut |t, at, _, n| {
                    t.dev.write_zeroes(at, n, fua)
                })?;
                completion = completion.max(c);
            }
            Ok(())
        })?;
        Ok(completion)
    }

    /// Zeroing goes to the gSSDs behind the mapped segments (and, in a
    /// migration, to the new target too); unbacked ranges already read as
    /// zeros and cost nothing. So: fast when every target is.
    fn fast_zero(&self) -> bool {
        self.inner.map.read().values().all(|s| {
            s.target.dev.fast_zero() && s.mig.as_ref().is_none_or(|m| m.new.dev.fast_zero())
        })
    }
    /// Unbacked ranges are holes (they read as zeros; a write there fails),
    /// lost ranges data (their contents are unknown; reading them fails);
    /// a backed range is whatever its gSSD reports, from the old target while
    /// a migration is copying (it is complete, as for reads). A gSSD that
    /// answers for a prefix only ends the answer there.
    fn allocation(&self, offset: u64, len: u64) -> IoResult<Vec<MapExtent>> {
        self.check(offset, len)?;
        let map = self.inner.map.read();
        let mut out = Vec::new();
        let mut short = false;
        split(&map, offset, len, |p| {
            if short {
                return Ok(());
            }
            match p {
                Piece::Mapped {
                    seg, seg_off, len, ..
                } => {
                    let part = seg.target.dev.allocation(seg.target.base + seg_off, len)?;
                    short = covered(&part) < len;
                    for e in part {
                        push_extent(&mut out, e.len, e.alloc);
                    }
                }
                Piece::Hole { buf_off, len } => {
                    // Lost bytes are data of unknown contents, not zeros.
                    let (mut pos, end) = (offset + buf_off, offset + buf_off + len);
                    while pos < end {
                        match self.lost_within(pos, end - pos) {
                            Some((o, l)) => {
                                let (a, b) = (o.max(pos), (o + l).min(end));
                                push_extent(&mut out, a - pos, Alloc::Hole);
                                push_extent(&mut out, b - a, Alloc::Data);
                                pos = b;
                            }
                            None => {
                                push_extent(&mut out, end - pos, Alloc::Hole);
                                pos = end;
                            }
                        }
                    }
                }
            }
            Ok(())
        })?;
        Ok(out)
    }
}
