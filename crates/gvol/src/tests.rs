//! Unit tests: error cases, splitting, migration (stepwise, cancelled, failing,
//! deadline), a proptest against a flat model, and a two-thread verify-while-migrating
//! test. Paced migrations have their own module ([`pacing`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use blockdev::{Alloc, BlockDev, IoError, IoResult, Layer, Layered, MapExtent, MemDev};
use clock::VirtualClock;
use proptest::prelude::*;
use rng::SplitMix64;

use crate::*;

mod pacing;

const K4: u64 = 4096;

fn mem(size: u64) -> Arc<dyn BlockDev> {
    Arc::new(MemDev::new(size))
}

fn read_vec(v: &GhostVolume, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0xEEu8; len];
    v.read(off, &mut b).unwrap();
    b
}

/// A read as loans ([`BlockDev::read_lent`]), their bytes in order.
fn lent_vec(v: &GhostVolume, off: u64, len: usize) -> Vec<u8> {
    let (_, loans) = v.read_lent(off, len).expect("a volume lends").unwrap();
    loans.iter().flat_map(|l| l.bytes().to_vec()).collect()
}

#[test]
fn unbacked_reads_zero_and_writes_enospc() {
    let v = GhostVolume::new("v", 16 * K4);
    assert_eq!(read_vec(&v, 100, 5000), vec![0; 5000]);
    let e = v.write(0, b"x", false).unwrap_err();
    assert!(matches!(e, IoError::NoSpace(_)), "{e}");
    assert_eq!(e.errno(), 28);
    // Trim and write-zeroes of unbacked bytes succeed: they already read zeros.
    v.trim(0, 16 * K4).unwrap();
    v.write_zeroes(0, 16 * K4, false).unwrap();
    v.flush().unwrap();
}

#[test]
fn out_of_range_requests_fail() {
    let v = GhostVolume::new("v", 16 * K4);
    v.attach(0, 16 * K4, 1, mem(16 * K4), 0).unwrap();
    let mut b = [0u8; 2];
    assert!(matches!(
        v.read(16 * K4 - 1, &mut b),
        Err(IoError::OutOfRange { .. })
    ));
    assert!(matches!(
        v.write(u64::MAX, b"ab", false),
        Err(IoError::OutOfRange { .. })
    ));
    assert!(v.trim(16 * K4, 1).is_err());
    assert!(v.write_zeroes(0, 16 * K4 + 1, false).is_err());
}

#[test]
fn a_write_partly_unbacked_writes_nothing() {
    let v = GhostVolume::new("v", 16 * K4);
    let d = mem(4 * K4);
    v.attach(0, 4 * K4, 1, d.clone(), 0).unwrap();
    let data = vec![7u8; 2 * K4 as usize];
    assert!(matches!(
        v.write(3 * K4, &data, false),
        Err(IoError::NoSpace(_))
    ));
    assert_eq!(read_vec(&v, 3 * K4, K4 as usize), vec![0; K4 as usize]);
}

#[test]
fn attach_validates() {
    let v = GhostVolume::new("v", 16 * K4);
    assert!(matches!(
        v.attach(1, K4, 1, mem(K4), 0),
        Err(GvolError::Misaligned { .. })
    ));
    assert!(matches!(
        v.attach(0, 0, 1, mem(K4), 0),
        Err(GvolError::Misaligned { .. })
    ));
    assert!(matches!(
        v.attach(12 * K4, 8 * K4, 1, mem(8 * K4), 0),
        Err(GvolError::OutOfRange { .. })
    ));
    assert_eq!(
        v.attach(0, 4 * K4, 1, mem(4 * K4), K4),
        Err(GvolError::TooSmall {
            gssd_id: 1,
            need: 5 * K4,
            size: 4 * K4
        })
    );
    v.attach(4 * K4, 4 * K4, 1, mem(4 * K4), 0).unwrap();
    assert_eq!(
        v.attach(6 * K4, 4 * K4, 2, mem(4 * K4), 0),
        Err(GvolError::Overlap {
            offset: 6 * K4,
            len: 4 * K4,
            existing: 4 * K4
        })
    );
    assert!(matches!(
        v.attach(0, 5 * K4, 2, mem(8 * K4), 0),
        Err(GvolError::Overlap { .. })
    ));
    // Adjacent on both sides is fine.
    v.attach(0, 4 * K4, 2, mem(4 * K4), 0).unwrap();
    v.attach(8 * K4, 4 * K4, 3, mem(4 * K4), 0).unwrap();
    assert_eq!(v.backed_bytes(), 12 * K4);
    assert_eq!(v.detach(5 * K4).unwrap_err(), GvolError::NoSegment(5 * K4));
}

#[test]
fn two_segments_never_share_a_block() {
    let v = GhostVolume::new("v", 16 * K4);
    let d = mem(16 * K4);
    v.attach(0, 4 * K4, 1, d.clone(), 2 * K4).unwrap();
    let shared = |existing| GvolError::SharedBlocks {
        gssd_id: 1,
        base: 5 * K4,
        len: 4 * K4,
        existing,
    };
    assert_eq!(
        v.attach(8 * K4, 4 * K4, 1, d.clone(), 5 * K4),
        Err(shared(0))
    );
    // The same bytes of another device are fine; so are other bytes of this one.
    v.attach(8 * K4, 2 * K4, 1, d.clone(), 6 * K4).unwrap();
    v.attach(4 * K4, 2 * K4, 1, d.clone(), 0).unwrap();
    // Nor may a migration land on bytes in use, its own segment's included.
    assert!(matches!(
        v.migrate(0, 1, d.clone(), 0),
        Err(GvolError::SharedBlocks { existing: 0, .. })
    ));
    let m = v
        .start_migration(4 * K4, 2, mem(4 * K4), 0, opts(K4))
        .unwrap();
    let dst = mem(8 * K4);
    let m2 = v.start_migration(0, 2, dst.clone(), 0, opts(K4)).unwrap();
    assert!(matches!(
        v.attach(12 * K4, 4 * K4, 3, dst.clone(), 2 * K4),
        Err(GvolError::SharedBlocks { existing: 0, .. })
    ));
    drop((m, m2));
    v.attach(12 * K4, 4 * K4, 3, dst, 2 * K4).unwrap();
}

#[test]
fn segment_info_round_trips_as_json_and_rejects_unknown_fields() {
    let v = GhostVolume::new("v", 16 * K4);
    v.attach(0, 4 * K4, 7, mem(8 * K4), 4 * K4).unwrap();
    let _m = v.start_migration(0, 8, mem(4 * K4), 0, opts(K4)).unwrap();
    let segs = v.segments();
    let json = serde_json::to_string(&segs).unwrap();
    let back: Vec<SegmentInfo> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, segs);
    assert_eq!(back[0].migration.as_ref().unwrap().to_gssd, 8);
    let bad = r#"{"offset":0,"len":1,"gssd_id":1,"base":0,"migration":null,"extra":1}"#;
    assert!(serde_json::from_str::<SegmentInfo>(bad).is_err());
}

#[test]
fn requests_spanning_segments_are_split_with_base_offsets() {
    let v = GhostVolume::new("v", 16 * K4);
    let a = mem(8 * K4);
    let b = mem(8 * K4);
    v.attach(0, 2 * K4, 1, a.clone(), 3 * K4).unwrap();
    v.attach(2 * K4, 2 * K4, 2, b.clone(), 5 * K4).unwrap();
    let data: Vec<u8> = (0..3 * K4).map(|i| (i % 251) as u8).collect();
    v.write(K4, &data, true).unwrap();
    assert_eq!(read_vec(&v, K4, data.len()), data);
    // Where it landed on each gSSD.
    let mut on_a = vec![0u8; K4 as usize];
    a.read(4 * K4, &mut on_a).unwrap();
    assert_eq!(on_a, data[..K4 as usize]);
    let mut on_b = vec![0u8; 2 * K4 as usize];
    b.read(5 * K4, &mut on_b).unwrap();
    assert_eq!(on_b, data[K4 as usize..]);
    // Trim across the boundary, then a read that also covers a hole.
    v.trim(K4 + 10, 2 * K4).unwrap();
    let r = read_vec(&v, 0, 8 * K4 as usize);
    let mut want = vec![0u8; 8 * K4 as usize];
    want[K4 as usize..4 * K4 as usize].copy_from_slice(&data);
    want[(K4 + 10) as usize..(3 * K4 + 10) as usize].fill(0);
    assert_eq!(r, want);
    v.write_zeroes(0, 4 * K4, false).unwrap();
    assert_eq!(read_vec(&v, 0, 4 * K4 as usize), vec![0; 4 * K4 as usize]);
}

#[test]
fn detach_returns_target_and_zeroes_the_range() {
    let v = GhostVolume::new("v", 8 * K4);
    let d = mem(4 * K4);
    v.attach(0, 4 * K4, 9, d.clone(), 0).unwrap();
    v.write(0, b"secret", false).unwrap();
    let (info, t) = v.detach(0).unwrap();
    assert_eq!(
        (info.gssd_id, info.len, t.gssd_id, t.base),
        (9, 4 * K4, 9, 0)
    );
    assert_eq!(read_vec(&v, 0, 6), vec![0; 6]);
    assert!(v.write(0, b"x", false).is_err());
    assert!(v.segments().is_empty());
}

#[test]
fn evicted_bytes_fail_instead_of_reading_as_zeros() {
    // Segments: [0, 4) on gSSD 1 (evicted below), [4, 8) on gSSD 2; [8, 12) unbacked.
    let v = GhostVolume::new("v", 12 * K4);
    v.attach(0, 4 * K4, 1, mem(4 * K4), 0).unwrap();
    v.attach(4 * K4, 4 * K4, 2, mem(4 * K4), 0).unwrap();
    v.write(0, &[7u8; 8 * K4 as usize], false).unwrap();
    let (info, _) = v.evict(0).unwrap();
    assert_eq!((info.gssd_id, info.len), (1, 4 * K4));
    assert_eq!(v.lost(), vec![(0, 4 * K4)]);
    let eio = |r: IoResult| r.unwrap_err().errno();
    let mut b = vec![0u8; 2 * K4 as usize];
    // Reads, as copies and as loans, fail: wholly and partly lost alike.
    assert_eq!(eio(v.read(K4, &mut b)), 5);
    assert_eq!(eio(v.read(3 * K4, &mut b)), 5, "straddles lost and backed");
    assert_eq!(v.read_lent(0, 512).unwrap().unwrap_err().errno(), 5);
    // Writes and write-zeroes fail before touching anything; a trim is a no-op.
    assert_eq!(eio(v.write(3 * K4, &[1u8; 2 * K4 as usize], false)), 5);
    assert_eq!(eio(v.write_zeroes(3 * K4, 2 * K4, false)), 5);
    v.trim(0, 8 * K4).unwrap();
    // The backed segment is untouched by the refused requests (then trimmed above).
    v.write(4 * K4, b"alive", false).unwrap();
    assert_eq!(read_vec(&v, 4 * K4, 5), b"alive");
    // Never-backed bytes still read as zeros and refuse writes with ENOSPC.
    assert_eq!(read_vec(&v, 8 * K4, 4), vec![0; 4]);
    assert_eq!(eio(v.write(8 * K4, b"x", false)), 28);
    // Block status: lost bytes are data (unknown contents), not a zero hole.
    let data = |len| MapExtent {
        len,
        alloc: Alloc::Data,
    };
    assert_eq!(v.allocation(K4, 2 * K4).unwrap(), vec![data(2 * K4)]);
    let map = v.allocation(0, 12 * K4).unwrap();
    assert_eq!(map[0].alloc, Alloc::Data);
    assert_eq!(
        map.last().unwrap(),
        &MapExtent {
            len: 4 * K4,
            alloc: Alloc::Hole
        }
    );
    assert_eq!(blockdev::covered(&map), 12 * K4);
    // The bytes cannot be backed again, and a plain detach loses nothing.
    assert!(matches!(
        v.attach(2 * K4, 2 * K4, 3, mem(4 * K4), 0),
        Err(GvolError::Lost { lost: 0, .. })
    ));
    v.detach(4 * K4).unwrap();
    assert_eq!(read_vec(&v, 4 * K4, 4), vec![0; 4]);
    assert_eq!(v.lost(), vec![(0, 4 * K4)]);
}

#[test]
fn lost_ranges_are_restored_merged_and_checked() {
    let v = GhostVolume::new("v", 16 * K4);
    v.attach(8 * K4, 4 * K4, 1, mem(4 * K4), 0).unwrap();
    v.mark_lost(0, 2 * K4).unwrap();
    v.mark_lost(2 * K4, 2 * K4).unwrap();
    v.mark_lost(K4, 2 * K4).unwrap();
    assert_eq!(
        v.lost(),
        vec![(0, 4 * K4)],
        "touching and overlapping ranges merge"
    );
    assert!(matches!(
        v.mark_lost(6 * K4, 4 * K4),
        Err(GvolError::Overlap { existing, .. }) if existing == 8 * K4
    ));
    assert!(matches!(
        v.mark_lost(12 * K4, 8 * K4),
        Err(GvolError::OutOfRange { .. })
    ));
    assert!(matches!(
        v.mark_lost(100, K4),
        Err(GvolError::Misaligned { .. })
    ));
    let mut b = [0u8; 1];
    assert_eq!(v.read(4 * K4 - 1, &mut b).unwrap_err().errno(), 5);
    v.read(4 * K4, &mut b).unwrap();
}

fn opts(chunk: u64) -> MigrateOptions {
    MigrateOptions {
        chunk_bytes: chunk,
        ..MigrateOptions::default()
    }
}

#[test]
fn stepwise_migration_mirrors_writes_and_switches() {
    let v = GhostVolume::new("v", 8 * K4);
    let old = mem(4 * K4);
    let new = mem(6 * K4);
    v.attach(0, 4 * K4, 1, old.clone(), 0).unwrap();
    v.write(0, &[1u8; 4 * K4 as usize], false).unwrap();
    let mut m = v
        .start_migration(0, 2, new.clone(), 2 * K4, opts(K4))
        .unwrap();
    let h = m.handle();
    assert_eq!(h.progress().copied_bytes, 0);
    assert!(matches!(m.step().unwrap(), Step::Copied(p) if p.copied_bytes == K4));
    // Chunk 0 copied: a write there goes to both; chunk 2 not yet: old only.
    v.write(10, b"AB", false).unwrap();
    v.write(2 * K4, b"CD", false).unwrap();
    let mut b = [0u8; 2];
    new.read(2 * K4 + 10, &mut b).unwrap();
    assert_eq!(&b, b"AB");
    new.read(4 * K4, &mut b).unwrap();
    assert_eq!(b, [0, 0]);
    let segs = v.segments();
    assert_eq!(
        segs[0].migration,
        Some(MigrationInfo {
            to_gssd: 2,
            to_base: 2 * K4,
            copied_bytes: K4,
            total_bytes: 4 * K4
        })
    );
    // Refused while migrating.
    assert_eq!(v.detach(0).unwrap_err(), GvolError::Migrating(0));
    assert!(matches!(
        v.start_migration(0, 3, mem(4 * K4), 0, opts(K4)),
        Err(GvolError::Migrating(0))
    ));
    let done = m.run().unwrap();
    assert_eq!((done.old.gssd_id, done.new_gssd, done.len), (1, 2, 4 * K4));
    assert_eq!(h.wait().unwrap().new_gssd, 2);
    assert_eq!(h.progress().fraction(), 1.0);
    // Erase the old blocks: the volume no longer reads them.
    old.trim(0, 4 * K4).unwrap();
    assert_eq!(read_vec(&v, 10, 2), b"AB");
    assert_eq!(read_vec(&v, 2 * K4, 2), b"CD");
    assert_eq!(read_vec(&v, 3 * K4, 1), [1]);
    let s = &v.segments()[0];
    assert_eq!((s.gssd_id, s.base, s.migration.clone()), (2, 2 * K4, None));
}

#[test]
fn migrate_to_a_too_small_device_is_refused() {
    let v = GhostVolume::new("v", 8 * K4);
    v.attach(0, 4 * K4, 1, mem(4 * K4), 0).unwrap();
    assert_eq!(
        v.migrate(0, 2, mem(4 * K4), K4).unwrap_err(),
        GvolError::TooSmall {
            gssd_id: 2,
            need: 5 * K4,
            size: 4 * K4
        }
    );
    assert_eq!(
        v.migrate(K4, 2, mem(4 * K4), 0).unwrap_err(),
        GvolError::NoSegment(K4)
    );
    assert!(matches!(
        v.migrate_with(0, 2, mem(4 * K4), 0, opts(100)),
        Err(GvolError::Misaligned { .. })
    ));
    assert!(v.segments()[0].migration.is_none());
}

#[test]
fn cancel_and_drop_leave_the_old_mapping() {
    let v = GhostVolume::new("v", 8 * K4);
    let old = mem(4 * K4);
    v.attach(0, 4 * K4, 1, old.clone(), 0).unwrap();
    v.write(0, b"keep", false).unwrap();
    let mut m = v.start_migration(0, 2, mem(4 * K4), 0, opts(K4)).unwrap();
    let h = m.handle();
    m.step().unwrap();
    h.cancel();
    assert_eq!(m.step().unwrap_err(), MigrationError::Cancelled);
    assert_eq!(h.wait().unwrap_err(), MigrationError::Cancelled);
    assert_eq!(v.segments()[0].gssd_id, 1);
    assert!(v.segments()[0].migration.is_none());
    assert_eq!(read_vec(&v, 0, 4), b"keep");
    // A dropped driver cancels too, and the segment can migrate again afterwards.
    let m = v.start_migration(0, 2, mem(4 * K4), 0, opts(K4)).unwrap();
    let h = m.handle();
    drop(m);
    assert_eq!(h.outcome().unwrap().unwrap_err(), MigrationError::Cancelled);
    let h = v.migrate(0, 3, mem(4 * K4), 0).unwrap();
    assert_eq!(h.wait().unwrap().new_gssd, 3);
    assert_eq!(read_vec(&v, 0, 4), b"keep");
}

#[test]
fn deadline_cancels_on_the_injected_clock() {
    let clock = Arc::new(VirtualClock::new(0));
    let v = GhostVolume::new("v", 8 * K4);
    v.attach(0, 4 * K4, 1, mem(4 * K4), 0).unwrap();
    let o = MigrateOptions {
        chunk_bytes: K4,
        deadline: Some(Deadline {
            clock: clock.clone(),
            at: 100,
        }),
        pacing: None,
    };
    let mut m = v.start_migration(0, 2, mem(4 * K4), 0, o).unwrap();
    m.step().unwrap();
    clock.advance(100);
    assert_eq!(
        m.step().unwrap_err(),
        MigrationError::DeadlineExceeded {
            deadline: 100,
            now: 100
        }
    );
    assert_eq!(v.segments()[0].gssd_id, 1);
}

/// A device that fails writes once told to.
struct Flaky {
    inner: MemDev,
    fail: AtomicBool,
}

impl BlockDev for Flaky {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, o: u64, b: &mut [u8]) -> IoResult {
        self.inner.read(o, b)
    }
    fn write(&self, o: u64, d: &[u8], f: bool) -> IoResult {
        if self.fail.load(Ordering::SeqCst) {
            return Err(IoError::Media("flaky".into()));
        }
        self.inner.write(o, d, f)
    }
    fn flush(&self) -> IoResult {
        Ok(0)
    }
    fn trim(&self, o: u64, l: u64) -> IoResult {
        self.inner.trim(o, l)
    }
    fn write_zeroes(&self, o: u64, l: u64, f: bool) -> IoResult {
        if self.fail.load(Ordering::SeqCst) {
            return Err(IoError::Media("flaky".into()));
        }
        self.inner.write_zeroes(o, l, f)
    }
}

#[test]
fn a_failing_new_gssd_fails_the_migration_not_the_tenant() {
    let v = GhostVolume::new("v", 8 * K4);
    v.attach(0, 4 * K4, 1, mem(4 * K4), 0).unwrap();
    let flaky = Arc::new(Flaky {
        inner: MemDev::new(4 * K4),
        fail: AtomicBool::new(false),
    });
    let mut m = v.start_migration(0, 2, flaky.clone(), 0, opts(K4)).unwrap();
    m.step().unwrap();
    flaky.fail.store(true, Ordering::SeqCst);
    // A dual write: the tenant's write succeeds on the old gSSD.
    v.write(0, b"ok", false).unwrap();
    let e = m.step().unwrap_err();
    assert!(
        matches!(e, MigrationError::Target(IoError::Media(_))),
        "{e}"
    );
    assert_eq!(v.segments()[0].gssd_id, 1);
    assert_eq!(read_vec(&v, 0, 2), b"ok");
    // And when the copy itself fails.
    let mut m = v.start_migration(0, 2, flaky.clone(), 0, opts(K4)).unwrap();
    v.write(0, b"x", false).unwrap(); // make chunk 0 non-zero
    assert!(matches!(m.step(), Err(MigrationError::Target(_))));
    assert!(v.segments()[0].migration.is_none());
}

/// A device whose first write after arming blocks until released: it holds the
/// copier in the middle of a chunk copy.
struct Gate {
    inner: MemDev,
    armed: AtomicBool,
    entered: std::sync::mpsc::SyncSender<()>,
    release: parking_lot::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl BlockDev for Gate {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, o: u64, b: &mut [u8]) -> IoResult {
        self.inner.read(o, b)
    }
    fn write(&self, o: u64, d: &[u8], f: bool) -> IoResult {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.entered.send(()).unwrap();
            self.release.lock().recv().unwrap();
        }
        self.inner.write(o, d, f)
    }
    fn flush(&self) -> IoResult {
        Ok(0)
    }
    fn trim(&self, o: u64, l: u64) -> IoResult {
        self.inner.trim(o, l)
    }
    fn write_zeroes(&self, o: u64, l: u64, f: bool) -> IoResult {
        self.inner.write_zeroes(o, l, f)
    }
}

#[test]
fn a_write_to_the_chunk_being_copied_waits_for_that_chunk_only() {
    let v = GhostVolume::new("v", 8 * K4);
    v.attach(0, 4 * K4, 1, mem(4 * K4), 0).unwrap();
    v.write(0, &[5u8; 4 * K4 as usize], false).unwrap();
    let (entered_tx, entered_rx) = std::sync::mpsc::sync_channel(1);
    let (release_tx, release_rx) = std::sync::mpsc::sync_channel(1);
    let gate = Arc::new(Gate {
        inner: MemDev::new(4 * K4),
        armed: AtomicBool::new(true),
        entered: entered_tx,
        release: parking_lot::Mutex::new(release_rx),
    });
    let mut m = v.start_migration(0, 2, gate.clone(), 0, opts(K4)).unwrap();
    let copier = std::thread::spawn(move || {
        m.step().unwrap();
        m
    });
    // The copier has read chunk 0 from the old gSSD and is writing it to the new.
    entered_rx.recv().unwrap();
    let blocked_done = Arc::new(AtomicBool::new(false));
    let blocked = {
        let v = v.clone();
        let done = blocked_done.clone();
        std::thread::spawn(move || {
            v.write(100, b"after", false).unwrap();
            done.store(true, Ordering::SeqCst);
        })
    };
    // A write to chunk 2 (another stripe, not copied) goes through meanwhile.
    v.write(2 * K4, b"elsewhere", false).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    assert!(
        !blocked_done.load(Ordering::SeqCst),
        "the chunk-0 write did not wait"
    );
    release_tx.send(()).unwrap();
    let mut m = copier.join().unwrap();
    blocked.join().unwrap();
    // It went to both gSSDs once chunk 0 was copied, so the copy is not stale.
    let mut b = [0u8; 5];
    gate.read(100, &mut b).unwrap();
    assert_eq!(&b, b"after");
    let done = m.run().unwrap();
    done.old.dev.trim(0, 4 * K4).unwrap();
    assert_eq!(read_vec(&v, 100, 5), b"after");
    assert_eq!(read_vec(&v, 2 * K4, 9), b"elsewhere");
    assert_eq!(read_vec(&v, 3 * K4, 1), [5]);
}

// ---- proptest: a read returns the last write, across attach/migrate/detach ----

/// The volume is `SLOTS` slots of `SLOT` bytes; a segment covers one slot.
const SLOT: u64 = 3 * K4;
const SLOTS: u64 = 6;

#[derive(Debug, Clone)]
enum Op {
    Write {
        off: u64,
        len: u64,
        seed: u8,
    },
    Read {
        off: u64,
        len: u64,
    },
    Trim {
        off: u64,
        len: u64,
    },
    Zero {
        off: u64,
        len: u64,
    },
    Attach {
        slot: u64,
        base_pages: u64,
    },
    Detach {
        slot: u64,
    },
    StartMigrate {
        slot: u64,
        base_pages: u64,
        chunk_pages: u64,
    },
    Step {
        slot: u64,
    },
    Cancel {
        slot: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let size = SLOT * SLOTS;
    let range = (0..size).prop_flat_map(move |o| (Just(o), 1..=(size - o).min(3 * SLOT)));
    prop_oneof![
        4 => (range.clone(), any::<u8>()).prop_map(|((off, len), seed)| Op::Write { off, len, seed }),
        3 => range.clone().prop_map(|(off, len)| Op::Read { off, len }),
        1 => range.clone().prop_map(|(off, len)| Op::Trim { off, len }),
        1 => range.prop_map(|(off, len)| Op::Zero { off, len }),
        2 => (0..SLOTS, 0..3u64).prop_map(|(slot, base_pages)| Op::Attach { slot, base_pages }),
        1 => (0..SLOTS).prop_map(|slot| Op::Detach { slot }),
        2 => (0..SLOTS, 0..3u64, 1..4u64)
            .prop_map(|(slot, base_pages, chunk_pages)| Op::StartMigrate { slot, base_pages, chunk_pages }),
        4 => (0..SLOTS).prop_map(|slot| Op::Step { slot }),
        1 => (0..SLOTS).prop_map(|slot| Op::Cancel { slot }),
    ]
}

fn covered(backed: &[bool], off: u64, len: u64) -> bool {
    (off / SLOT..=(off + len - 1) / SLOT).all(|s| backed[s as usize])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_read_returns_the_last_write(ops in prop::collection::vec(op(), 1..80)) {
        let size = SLOT * SLOTS;
        let v = GhostVolume::new("p", size);
        let mut model = vec![0u8; size as usize];
        let mut backed = [false; SLOTS as usize];
        let mut migs: Vec<Option<Migration>> = (0..SLOTS).map(|_| None).collect();
        let mut next_id = 1;
        for op in ops {
            match op {
                Op::Write { off, len, seed } => {
                    let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8) | 1).collect();
                    let r = v.write(off, &data, false);
                    if covered(&backed, off, len) {
                        prop_assert!(r.is_ok(), "{r:?}");
                        model[off as usize..(off + len) as usize].copy_from_slice(&data);
                    } else {
                        prop_assert!(matches!(r, Err(IoError::NoSpace(_))), "{r:?}");
                    }
                }
                Op::Read { off, len } => {
                    prop_assert_eq!(read_vec(&v, off, len as usize), &model[off as usize..(off + len) as usize]);
                    prop_assert_eq!(lent_vec(&v, off, len as usize), &model[off as usize..(off + len) as usize]);
                }
                Op::Trim { off, len } | Op::Zero { off, len } => {
                    if matches!(op, Op::Trim { .. }) {
                        v.trim(off, len).unwrap();
                    } else {
                        v.write_zeroes(off, len, false).unwrap();
                    }
                    model[off as usize..(off + len) as usize].fill(0);
                }
                Op::Attach { slot, base_pages } => {
                    let base = base_pages * K4;
                    let r = v.attach(slot * SLOT, SLOT, next_id, mem(base + SLOT), base);
                    next_id += 1;
                    prop_assert_eq!(r.is_ok(), !backed[slot as usize]);
                    backed[slot as usize] = true;
                }
                Op::Detach { slot } => {
                    let r = v.detach(slot * SLOT);
                    if !backed[slot as usize] {
                        prop_assert_eq!(r.unwrap_err(), GvolError::NoSegment(slot * SLOT));
                    } else if migs[slot as usize].is_some() {
                        prop_assert_eq!(r.unwrap_err(), GvolError::Migrating(slot * SLOT));
                    } else {
                        r.unwrap();
                        backed[slot as usize] = false;
                        let s = (slot * SLOT) as usize;
                        model[s..s + SLOT as usize].fill(0);
                    }
                }
                Op::StartMigrate { slot, base_pages, chunk_pages } => {
                    let base = base_pages * K4;
                    let r = v.start_migration(slot * SLOT, next_id, mem(base + SLOT), base, opts(chunk_pages * K4));
                    next_id += 1;
                    if !backed[slot as usize] {
                        prop_assert!(r.is_err());
                    } else if migs[slot as usize].is_some() {
                        prop_assert_eq!(r.unwrap_err(), GvolError::Migrating(slot * SLOT));
                    } else {
                        migs[slot as usize] = Some(r.unwrap());
                    }
                }
                Op::Step { slot } => {
                    if let Some(m) = migs[slot as usize].as_mut() {
                        if let Step::Done(done) = m.step().unwrap() {
                            // Erase the old blocks, as the control plane would: a read
                            // still served from them would now return zeros.
                            done.old.dev.trim(done.old.base, done.len).unwrap();
                            migs[slot as usize] = None;
                        }
                    }
                }
                Op::Cancel { slot } => {
                    if let Some(m) = migs[slot as usize].take() {
                        m.handle().cancel();
                        drop(m);
                    }
                }
            }
        }
        // Finish every migration, then everything reads as the model says.
        for m in migs.iter_mut().flatten() {
            let done = m.run().unwrap();
            done.old.dev.trim(done.old.base, done.len).unwrap();
        }
        prop_assert_eq!(read_vec(&v, 0, size as usize), model);
    }
}

// ---- two threads: write/verify continuously while segments migrate back and forth ----

const BLK: usize = 4096;

/// Block `block`'s contents at generation `gen`: a stream of its own (so a block
/// read from the wrong place or generation shows), stamped with both.
fn pattern(block: u64, gen: u32) -> Vec<u8> {
    let mut b = vec![0u8; BLK];
    let mut r = SplitMix64::derive(block, &[u64::from(gen)]);
    for w in b.chunks_exact_mut(8) {
        w.copy_from_slice(&r.next_u64().to_le_bytes());
    }
    b[..8].copy_from_slice(&block.to_le_bytes());
    b[8..12].copy_from_slice(&gen.to_le_bytes());
    b
}

/// Yields the CPU around every operation, to widen the windows in which the
/// copier and the tenant's writes interleave.
struct Yieldy(MemDev);

impl BlockDev for Yieldy {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read(&self, o: u64, b: &mut [u8]) -> IoResult {
        std::thread::yield_now();
        let r = self.0.read(o, b);
        std::thread::yield_now();
        r
    }
    fn write(&self, o: u64, d: &[u8], f: bool) -> IoResult {
        std::thread::yield_now();
        let r = self.0.write(o, d, f);
        std::thread::yield_now();
        r
    }
    fn flush(&self) -> IoResult {
        Ok(0)
    }
    fn trim(&self, o: u64, l: u64) -> IoResult {
        self.0.trim(o, l)
    }
    fn write_zeroes(&self, o: u64, l: u64, f: bool) -> IoResult {
        std::thread::yield_now();
        self.0.write_zeroes(o, l, f)
    }
}

#[test]
fn verify_while_migrating_back_and_forth() {
    const SEG: u64 = 128 * 1024;
    const NSEG: u64 = 4;
    const ROUNDS: usize = 8;
    let size = SEG * NSEG;
    let nblocks = size / BLK as u64;
    let v = GhostVolume::new("mt", size);
    // Two gSSDs, each with room for every segment: segment i sits at base i*SEG.
    let a: Arc<dyn BlockDev> = Arc::new(Yieldy(MemDev::new(size)));
    let b: Arc<dyn BlockDev> = Arc::new(Yieldy(MemDev::new(size)));
    for i in 0..NSEG {
        v.attach(i * SEG, SEG, 1, a.clone(), i * SEG).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicUsize::new(0));

    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let v = v.clone();
            let stop = stop.clone();
            let ops = ops.clone();
            std::thread::spawn(move || {
                // Writer w owns the blocks with index % 2 == w, and knows their
                // generation: like fio's verify, every read is checked.
                let mut gens = vec![0u32; nblocks as usize];
                let mut r = SplitMix64::derive(0x1234_5678, &[w]);
                while !stop.load(Ordering::Relaxed) {
                    let x = r.next_u64();
                    let blk = (x % (nblocks / 2)) * 2 + w;
                    let off = blk * BLK as u64;
                    if x & 0x30 != 0 {
                        gens[blk as usize] += 1;
                        v.write(off, &pattern(blk, gens[blk as usize]), false)
                            .unwrap();
                    }
                    let mut got = vec![0u8; BLK];
                    v.read(off, &mut got).unwrap();
                    let g = gens[blk as usize];
                    let want = if g == 0 {
                        vec![0u8; BLK]
                    } else {
                        pattern(blk, g)
                    };
                    assert!(got == want, "writer {w}: block {blk} gen {g}: wrong data");
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                gens
            })
        })
        .collect();

    let mut ops_during = 0;
    for round in 0..ROUNDS {
        let (to_id, to) = if round % 2 == 0 {
            (2, b.clone())
        } else {
            (1, a.clone())
        };
        for i in 0..NSEG {
            let before = ops.load(Ordering::Relaxed);
            // Driven here, chunk by chunk, letting the writers verify at
            // least one I/O between chunks: the overlap does not depend on
            // how busy the machine is.
            let mut m = v
                .start_migration(i * SEG, to_id, to.clone(), i * SEG, opts(8 * 1024))
                .unwrap();
            let done = loop {
                match m.step().unwrap() {
                    Step::Done(d) => break d,
                    Step::Copied(_) => {
                        let at = ops.load(Ordering::Relaxed);
                        let t0 = std::time::Instant::now();
                        while ops.load(Ordering::Relaxed) == at {
                            assert!(
                                t0.elapsed() < std::time::Duration::from_secs(30),
                                "the writers made no progress during a migration"
                            );
                            std::thread::yield_now();
                        }
                    }
                    Step::Wait(t) => panic!("an unpaced migration asked to wait until {t}"),
                }
            };
            ops_during += ops.load(Ordering::Relaxed) - before;
            // Erase the old blocks: any read still routed there would see zeros.
            done.old.dev.trim(done.old.base, done.len).unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut final_gens = vec![0u32; nblocks as usize];
    for (w, t) in writers.into_iter().enumerate() {
        let gens = t.join().unwrap();
        for blk in (w..nblocks as usize).step_by(2) {
            final_gens[blk] = gens[blk];
        }
    }
    eprintln!("verified I/Os during migrations: {ops_during}");
    assert!(
        ops_during > 200,
        "only {ops_during} verified I/Os overlapped migrations"
    );
    // Every block is right at the end, and the data is on gSSD 1 (even rounds: home).
    for blk in 0..nblocks {
        let mut got = vec![0u8; BLK];
        v.read(blk * BLK as u64, &mut got).unwrap();
        let g = final_gens[blk as usize];
        let want = if g == 0 {
            vec![0u8; BLK]
        } else {
            pattern(blk, g)
        };
        assert!(got == want, "block {blk}");
        let mut raw = vec![0u8; BLK];
        a.read(blk * BLK as u64, &mut raw).unwrap();
        assert!(raw == want, "block {blk} on gSSD 1");
    }
    assert!(v.segments().iter().all(|s| s.gssd_id == 1));
}

/// A device that zeroes by writing zeros: a layer that says so over any
/// other.
struct WritesZeros(Arc<dyn BlockDev>);

impl Layer for WritesZeros {
    fn inner(&self) -> &Arc<dyn BlockDev> {
        &self.0
    }
    fn fast_zero(&self) -> bool {
        false
    }
}

#[test]
fn fast_zero_only_when_every_target_zeroes_fast() {
    let slow = || -> Arc<dyn BlockDev> { Arc::new(Layered(WritesZeros(mem(8 * K4)))) };
    let v = GhostVolume::new("v", 16 * K4);
    assert!(v.fast_zero(), "nothing backed: zeroing touches nothing");
    v.attach(0, 8 * K4, 1, mem(8 * K4), 0).unwrap();
    assert!(v.fast_zero());
    // A migration writes zeros to its new target as well.
    let m = v.start_migration(0, 2, slow(), 0, opts(K4)).unwrap();
    assert!(!v.fast_zero(), "a migration's new target zeroes by writing");
    drop(m);
    let w = GhostVolume::new("w", 16 * K4);
    w.attach(0, 8 * K4, 1, mem(8 * K4), 0).unwrap();
    w.attach(8 * K4, 8 * K4, 2, slow(), 0).unwrap();
    assert!(!w.fast_zero(), "one segment that writes its zeros");
}
