//! Property tests: under random reads, writes (aligned or not), trims,
//! write-zeroes, checkpoints and crashes, every read returns the last write.
//!
//! The reference model is `blockdev::MemDev`. A "crash" drops the vSSD without a
//! clean close and re-opens it from the same flash and checkpoint store, which is
//! what a `kill -9` of the daemon leaves behind (every programmed page survives).
//! Beside the content, the allocation map is checked against a page-level model:
//! a page is data once any byte of it is written (or zeroed in part), and a hole
//! again once a trim or write-zeroes covers it whole; holes always read as zeros.

use std::sync::Arc;

use blockdev::{Alloc, BlockDev, MemDev};
use clock::VirtualClock;
use flash::{Backend, FlashDevice, Geometry, Timing};
use ftl::{
    max_capacity, CheckpointStore, Extent, GcPolicyKind, MemCheckpoints, Placement, Vssd,
    VssdConfig,
};
use proptest::prelude::*;
use rng::SplitMix64;

fn geo() -> Geometry {
    Geometry {
        channels: 2,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 12,
        pages_per_block: 8,
        page_size: 512,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Write { off: u64, len: u64, byte: u8 },
    Read { off: u64, len: u64 },
    Trim { off: u64, len: u64 },
    Zero { off: u64, len: u64 },
    Checkpoint,
    Crash,
}

fn op(cap: u64) -> impl Strategy<Value = Op> {
    let range = (0..cap).prop_flat_map(move |off| (Just(off), 1..=(cap - off).min(2048)));
    prop_oneof![
        10 => (range.clone(), any::<u8>()).prop_map(|((off, len), byte)| Op::Write { off, len, byte }),
        4 => range.clone().prop_map(|(off, len)| Op::Read { off, len }),
        2 => range.clone().prop_map(|(off, len)| Op::Trim { off, len }),
        1 => range.prop_map(|(off, len)| Op::Zero { off, len }),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Crash),
    ]
}

fn cfg(g: &Geometry, gc: GcPolicyKind) -> VssdConfig {
    let extents: Vec<Extent> = (0..g.channels)
        .map(|c| Extent::whole_channel(g, c))
        .collect();
    let capacity_bytes = max_capacity(g, &extents);
    VssdConfig {
        id: 1,
        name: "t".into(),
        extents,
        capacity_bytes,
        gc,
        lent: Vec::new(),
    }
}

fn check_content(v: &Vssd, m: &MemDev) -> Vec<u8> {
    let n = m.size() as usize;
    let mut a = vec![0u8; n];
    let mut b = vec![0u8; n];
    v.read(0, &mut a).unwrap();
    m.read(0, &mut b).unwrap();
    assert!(a == b, "device content differs from the model");
    a
}

fn check_all(v: &Vssd, m: &MemDev, mapped: &[bool]) {
    let a = check_content(v, m);
    let n = a.len();
    // The allocation map, page by page, and holes read as zeros.
    let ps = (n / mapped.len()) as u64;
    let mut want = Vec::new();
    for &d in mapped {
        blockdev::push_extent(&mut want, ps, if d { Alloc::Data } else { Alloc::Hole });
    }
    let got = v.allocation(0, n as u64).unwrap();
    assert_eq!(got, want, "allocation map differs from the page model");
    let mut at = 0usize;
    for e in &got {
        if e.alloc == Alloc::Hole {
            assert!(
                a[at..at + e.len as usize].iter().all(|&x| x == 0),
                "a hole at {at} holds data"
            );
        }
        at += e.len as usize;
    }
    // An unaligned sub-range is clipped to what was asked.
    let sub = v.allocation(ps + 7, ps).unwrap();
    assert_eq!(blockdev::covered(&sub), ps);
}

/// Marks the pages a write of `[off, off+len)` maps.
fn model_write(mapped: &mut [bool], ps: u64, off: u64, len: u64) {
    for p in off / ps..(off + len).div_ceil(ps) {
        mapped[p as usize] = true;
    }
}

/// A trim or zeroing: whole pages become holes, partial ones are rewritten.
fn model_zero(mapped: &mut [bool], ps: u64, off: u64, len: u64) {
    let (first, last) = (off.div_ceil(ps), (off + len) / ps);
    if first >= last {
        return model_write(mapped, ps, off, len);
    }
    model_write(mapped, ps, off, first * ps - off);
    model_write(mapped, ps, last * ps, off + len - last * ps);
    for p in first..last {
        mapped[p as usize] = false;
    }
}

/// The bytes of a lent read, in order.
fn lent_bytes(loans: &[blockdev::Loan]) -> Vec<u8> {
    loans.iter().flat_map(|l| l.bytes().to_vec()).collect()
}

/// A lent read of the whole vSSD, held while the vSSD is overwritten four
/// times over (GC erases every block it lent from): it keeps the bytes it
/// read, because each erase recalled it first.
#[test]
fn a_lent_read_keeps_its_bytes_while_gc_erases_its_blocks() {
    for placement in [Placement::Stripe, Placement::Fill] {
        let g = geo();
        let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
        let clock = Arc::new(VirtualClock::new(0));
        let c = cfg(&g, GcPolicyKind::Greedy);
        let cap = c.capacity_bytes as usize;
        let v = Vssd::create(dev, c, clock.clone(), Arc::new(MemCheckpoints::default())).unwrap();
        v.set_placement(placement);
        let first: Vec<u8> = (0..cap).map(|i| (i % 251) as u8).collect();
        v.write(0, &first, false).unwrap();
        v.trim(4096, 2048).unwrap();
        let mut want = first.clone();
        want[4096..4096 + 2048].fill(0);
        let (_, loans) = v.read_lent(0, cap).expect("a vSSD lends").unwrap();
        assert!(loans.len() > 1, "runs and a hole: {} loans", loans.len());
        let mut rng = SplitMix64::new(7);
        for round in 0..4u8 {
            for _ in 0..cap / 512 {
                let at = rng.below(cap / 512) * 512;
                clock.advance(1_000);
                v.write(at as u64, &[round ^ 0xee; 512], false).unwrap();
            }
        }
        assert!(v.stats().gc_runs > 0, "GC ran");
        assert!(
            loans.iter().any(|l| l.recalled()),
            "GC recalled the loans of blocks it erased"
        );
        assert!(
            lent_bytes(&loans) == want,
            "the lent read kept its bytes ({placement:?})"
        );
    }
}

fn run(ops: Vec<Op>, gc: GcPolicyKind, placement: Placement) {
    let g = geo();
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
    let clock = Arc::new(VirtualClock::new(0));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(MemCheckpoints::default());
    let c = cfg(&g, gc);
    let cap = c.capacity_bytes;
    let mut v = Vssd::create(dev.clone(), c.clone(), clock.clone(), ckpt.clone()).unwrap();
    v.set_placement(placement);
    let m = MemDev::new(cap);
    let ps = u64::from(g.page_size);
    let mut mapped = vec![false; (cap / ps) as usize];
    // Lent reads still held, with the bytes they read.
    let mut held: Vec<(Vec<blockdev::Loan>, Vec<u8>)> = Vec::new();
    for op in ops {
        for (k, (loans, want)) in held.iter().enumerate() {
            assert!(lent_bytes(loans) == *want, "lent read {k} changed");
        }
        clock.advance(10_000);
        match op {
            Op::Write { off, len, byte } => {
                let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                v.write(off, &data, false).unwrap();
                m.write(off, &data, false).unwrap();
                model_write(&mut mapped, ps, off, len);
            }
            Op::Read { off, len } => {
                let mut a = vec![0u8; len as usize];
                let mut b = vec![0u8; len as usize];
                v.read(off, &mut a).unwrap();
                m.read(off, &mut b).unwrap();
                assert_eq!(a, b, "read at {off}+{len}");
                // The same read lent: the same bytes, kept while later
                // writes, GC, trims and crashes go on.
                let (_, loans) = v
                    .read_lent(off, len as usize)
                    .expect("a vSSD lends")
                    .unwrap();
                assert_eq!(lent_bytes(&loans), b, "lent read at {off}+{len}");
                held.push((loans, b));
                if held.len() > 16 {
                    held.remove(0);
                }
            }
            Op::Trim { off, len } => {
                v.trim(off, len).unwrap();
                m.trim(off, len).unwrap();
                model_zero(&mut mapped, ps, off, len);
            }
            Op::Zero { off, len } => {
                v.write_zeroes(off, len, false).unwrap();
                m.write_zeroes(off, len, false).unwrap();
                model_zero(&mut mapped, ps, off, len);
            }
            Op::Checkpoint => v.checkpoint().unwrap(),
            Op::Crash => {
                drop(v);
                v = Vssd::open(dev.clone(), c.clone(), clock.clone(), ckpt.clone()).unwrap();
                v.set_placement(placement);
                check_all(&v, &m, &mapped);
            }
        }
    }
    check_all(&v, &m, &mapped);
    drop(v);
    let v = Vssd::open(dev, c, clock, ckpt).unwrap();
    check_all(&v, &m, &mapped);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn read_returns_last_write_greedy(ops in proptest::collection::vec(op(cfg(&geo(), GcPolicyKind::Greedy).capacity_bytes), 1..1200)) {
        run(ops, GcPolicyKind::Greedy, Placement::Stripe);
    }

    /// Filled, a request's pages often lie side by side, and reads take
    /// them as one run of the block (`Vssd::read`).
    #[test]
    fn read_returns_last_write_filled(ops in proptest::collection::vec(op(cfg(&geo(), GcPolicyKind::Greedy).capacity_bytes), 1..1200)) {
        run(ops, GcPolicyKind::Greedy, Placement::Fill);
    }

    #[test]
    fn read_returns_last_write_cost_benefit(ops in proptest::collection::vec(op(cfg(&geo(), GcPolicyKind::CostBenefit).capacity_bytes), 1..1200)) {
        run(ops, GcPolicyKind::CostBenefit, Placement::Stripe);
    }
}

/// Fills the device many times over so GC must run, with crashes in between.
#[test]
fn heavy_overwrite_with_crashes_keeps_data() {
    let g = geo();
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
    let clock = Arc::new(VirtualClock::new(0));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(MemCheckpoints::default());
    let c = cfg(&g, GcPolicyKind::Greedy);
    let cap = c.capacity_bytes;
    let m = MemDev::new(cap);
    let mut v = Vssd::create(dev.clone(), c.clone(), clock.clone(), ckpt.clone()).unwrap();
    let mut r = SplitMix64::new(12345);
    let (mut gc_runs, mut host, mut flash) = (0, 0, 0);
    for round in 0..40 {
        for _ in 0..200 {
            let page = r.below((cap / 512) as usize) as u64;
            let data = vec![r.next_u64() as u8; 512];
            v.write(page * 512, &data, false).unwrap();
            m.write(page * 512, &data, false).unwrap();
            clock.advance(1000);
        }
        if round % 3 == 0 {
            let off = r.below((cap / 2) as usize) as u64;
            v.trim(off, 4096).unwrap();
            m.trim(off, 4096).unwrap();
        }
        let s = v.stats();
        (gc_runs, host, flash) = (
            gc_runs + s.gc_runs,
            host + s.host_pages_written,
            flash + s.flash_pages_written,
        );
        drop(v);
        v = Vssd::open(dev.clone(), c.clone(), clock.clone(), ckpt.clone()).unwrap();
        check_content(&v, &m);
    }
    assert!(gc_runs > 50, "GC must have run: {gc_runs}");
    let wa = flash as f64 / host as f64;
    assert!(wa > 1.0 && wa < 6.0, "write amplification {wa}");
    let s = v.stats();
    assert!(
        s.max_erase_count - s.min_erase_count < 20,
        "wear-aware allocation keeps wear even: {s:?}"
    );
}

/// The file backend: drop everything (device included) as a kill -9 would, reopen.
#[test]
fn file_backend_crash_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let g = geo();
    let backend = Backend::File {
        path: dir.path().join("ssd"),
    };
    let ckpt: Arc<dyn CheckpointStore> =
        Arc::new(ftl::DirCheckpoints::new(dir.path().join("ckpt")).unwrap());
    let clock = Arc::new(VirtualClock::new(0));
    let c = cfg(&g, GcPolicyKind::Greedy);
    let m = MemDev::new(c.capacity_bytes);
    {
        let dev = Arc::new(FlashDevice::open(&backend, g, Timing::default()).unwrap());
        let v = Vssd::create(dev, c.clone(), clock.clone(), ckpt.clone()).unwrap();
        for i in 0..500u64 {
            let off = (i * 7919 * 512) % (c.capacity_bytes - 1024);
            let data = vec![i as u8; 700];
            v.write(off, &data, false).unwrap();
            m.write(off, &data, false).unwrap();
        }
        v.write_zeroes(1024, 5000, false).unwrap();
        m.write_zeroes(1024, 5000, false).unwrap();
    }
    let dev = Arc::new(FlashDevice::open(&backend, g, Timing::default()).unwrap());
    let v = Vssd::open(dev, c, clock, ckpt).unwrap();
    check_content(&v, &m);
}

fn big_cfg(g: &Geometry, id: u32, channels: std::ops::Range<u32>) -> VssdConfig {
    let extents: Vec<Extent> = channels.map(|c| Extent::whole_channel(g, c)).collect();
    let capacity_bytes = ftl::default_capacity(g, &extents);
    VssdConfig {
        id,
        name: format!("v{id}"),
        extents,
        capacity_bytes,
        gc: GcPolicyKind::Greedy,
        lent: Vec::new(),
    }
}

/// In model time, a vSSD's sequential write bandwidth follows its channel count.
#[test]
fn bandwidth_scales_with_channels_in_model_time() {
    let g = Geometry {
        channels: 16,
        dies_per_channel: 4,
        planes_per_die: 1,
        blocks_per_plane: 32,
        pages_per_block: 64,
        page_size: 4096,
    };
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
    let clock = Arc::new(VirtualClock::new(0));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(MemCheckpoints::default());
    let v8 = Vssd::create(
        dev.clone(),
        big_cfg(&g, 1, 0..8),
        clock.clone(),
        ckpt.clone(),
    )
    .unwrap();
    let v2 = Vssd::create(
        dev.clone(),
        big_cfg(&g, 2, 8..10),
        clock.clone(),
        ckpt.clone(),
    )
    .unwrap();
    let data = vec![0x5au8; 128 * 1024];
    let bytes = 16u64 << 20;
    let mut t8 = 0;
    let mut t2 = 0;
    for i in 0..bytes / data.len() as u64 {
        t8 = t8.max(v8.write(i * data.len() as u64, &data, false).unwrap());
        t2 = t2.max(v2.write(i * data.len() as u64, &data, false).unwrap());
    }
    let ratio = t2 as f64 / t8 as f64;
    assert!(
        (ratio - 4.0).abs() / 4.0 < 0.15,
        "8-channel vs 2-channel bandwidth ratio {ratio}"
    );
}

/// A write of many pages is programmed a flash unit's run at a time; while GC
/// has nothing to do, that places, times and records every page exactly as
/// writing the same pages one request each: same completion times, same
/// bytes and OOB records on every flash page, same write pointers. The
/// writes cross block boundaries (8 pages a block), where a unit without
/// room for its share takes its page the page-at-a-time way. For both
/// placements: striped, and filled a unit's block at a time.
#[test]
fn a_multi_page_write_lands_as_page_by_page() {
    lands_as_page_by_page(Placement::Stripe);
}

/// Filled, pages written one after another (single pages at scattered
/// addresses, as a database's commits write them) lie side by side in one
/// unit's block until it is full, then in the next unit's: what a flush
/// writes back is one range. Striped, they are one page a unit.
#[test]
fn filled_writes_lie_side_by_side_until_the_block_is_full() {
    let g = geo();
    let ps = u64::from(g.page_size);
    let ppb = u64::from(g.pages_per_block);
    let units = u64::from(g.channels * g.dies_per_channel);
    for placement in [Placement::Fill, Placement::Stripe] {
        let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
        let clock = Arc::new(VirtualClock::new(0));
        let ckpt: Arc<dyn CheckpointStore> = Arc::new(MemCheckpoints::default());
        let v = Vssd::create(dev.clone(), cfg(&g, GcPolicyKind::Greedy), clock, ckpt).unwrap();
        assert_eq!(v.placement(), Placement::Stripe, "a new vSSD stripes");
        v.set_placement(placement);
        // Distinct, scattered addresses.
        let lbas: Vec<u64> = (0..ppb + 3).map(|i| (i * 37) % (v.size() / ps)).collect();
        for (i, &lba) in lbas.iter().enumerate() {
            v.write(lba * ps, &vec![i as u8; ps as usize], false)
                .unwrap();
        }
        // The flash page of each write's LBA, in write order.
        let mut gp = Vec::new();
        for &lba in &lbas {
            let newest = (0..g.total_pages())
                .filter_map(|p| dev.oob(p).map(|o| (p, o)))
                .filter(|(_, o)| o.lba == lba && matches!(o.kind, flash::OobKind::Data))
                .max_by_key(|(_, o)| o.seq)
                .unwrap();
            gp.push(newest.0);
        }
        let blocks: std::collections::BTreeSet<u64> = gp.iter().map(|p| p / ppb).collect();
        match placement {
            Placement::Fill => {
                assert!(
                    gp[..ppb as usize].windows(2).all(|w| w[1] == w[0] + 1),
                    "filled: the first block's pages in write order: {gp:?}"
                );
                assert_eq!(blocks.len(), 2, "filled: one block, then the next unit's");
            }
            Placement::Stripe => {
                assert_eq!(blocks.len() as u64, units, "striped: a page per unit");
            }
        }
    }
}

/// A fresh memory device of geometry `g` holding one greedy vSSD over all
/// its channels with `placement`, on a clock of its own: one of two twins a
/// test gives the same requests in two ways.
fn fresh(g: Geometry, placement: Placement) -> (Arc<FlashDevice>, Arc<VirtualClock>, Arc<Vssd>) {
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
    let clock = Arc::new(VirtualClock::new(0));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(MemCheckpoints::default());
    let v = Vssd::create(
        dev.clone(),
        cfg(&g, GcPolicyKind::Greedy),
        clock.clone(),
        ckpt,
    )
    .unwrap();
    v.set_placement(placement);
    (dev, clock, v)
}

/// A multi-page read, which takes the pages lying side by side in a block
/// as one run, returns the bytes, the completion time and the flash page
/// count of the page-by-page reads of a twin vSSD given the same writes,
/// with writes (and GC) between the reads so programs are under way. For
/// both placements; filled, most requests are runs.
#[test]
fn a_multi_page_read_reads_as_page_by_page() {
    for placement in [Placement::Fill, Placement::Stripe] {
        let g = geo();
        let ps = u64::from(g.page_size);
        let (da, ca, a) = fresh(g, placement);
        let (db, cb, b) = fresh(g, placement);
        let mut rng = SplitMix64::new(11);
        let cap = a.size();
        for step in 0..3000u64 {
            let off = rng.next_u64() % cap;
            let len = (1 + rng.next_u64() % (12 * ps)).min(cap - off);
            if step % 3 == 0 {
                let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ (step as u8)).collect();
                assert_eq!(
                    a.write(off, &data, false).unwrap(),
                    b.write(off, &data, false).unwrap()
                );
            } else {
                let mut whole = vec![0u8; len as usize];
                let ta = a.read(off, &mut whole).unwrap();
                let mut parts = vec![0u8; len as usize];
                let (mut tb, mut pos) = (0, 0u64);
                while pos < len {
                    let n = (ps - (off + pos) % ps).min(len - pos);
                    let part = &mut parts[pos as usize..(pos + n) as usize];
                    tb = tb.max(b.read(off + pos, part).unwrap());
                    pos += n;
                }
                assert_eq!(
                    whole, parts,
                    "{placement:?}: bytes of read {step} ({len} at {off})"
                );
                assert_eq!(
                    ta, tb,
                    "{placement:?}: completion of read {step} ({len} at {off})"
                );
            }
            ca.advance(20_000);
            cb.advance(20_000);
        }
        assert!(
            a.stats().gc_runs > 0,
            "{placement:?}: GC ran between the reads"
        );
        assert_eq!(da.stats(), db.stats(), "{placement:?}: device counters");
        assert_eq!(a.stats().flash_pages_read, b.stats().flash_pages_read);
    }
}

/// [`a_multi_page_write_lands_as_page_by_page`] with the pages filled a
/// unit's block at a time: a filled write's pages land side by side.
#[test]
fn a_filled_multi_page_write_lands_as_page_by_page() {
    lands_as_page_by_page(Placement::Fill);
}

fn lands_as_page_by_page(placement: Placement) {
    let g = Geometry {
        blocks_per_plane: 48,
        ..geo()
    };
    let ps = u64::from(g.page_size);
    let (da, ca, a) = fresh(g, placement);
    let (db, cb, b) = fresh(g, placement);
    let mut rng = SplitMix64::new(7);
    // Half the capacity: GC never runs.
    let mut written = 0;
    let mut step = 0u64;
    while written < a.size() / 2 {
        let off = rng.next_u64() % (a.size() / 2);
        let len = (1 + rng.next_u64() % (20 * ps)).min(a.size() - off);
        let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ (step as u8)).collect();
        let ta = a.write(off, &data, false).unwrap();
        // The same bytes, a page (or part of one) per request.
        let mut tb = 0;
        let mut pos = 0u64;
        while pos < len {
            let n = (ps - (off + pos) % ps).min(len - pos);
            let d = &data[pos as usize..(pos + n) as usize];
            tb = tb.max(b.write(off + pos, d, false).unwrap());
            pos += n;
        }
        assert_eq!(
            ta, tb,
            "completion time of write {step} ({len} bytes at {off})"
        );
        written += len;
        step += 1;
        ca.advance(5_000);
        cb.advance(5_000);
    }
    assert_eq!(a.stats().gc_runs, 0, "GC must not run in this test");
    assert!(step > 20);
    let mut pa = vec![0u8; g.page_size as usize];
    let mut pb = pa.clone();
    for blk in 0..g.total_blocks() {
        assert_eq!(da.write_ptr(blk), db.write_ptr(blk), "block {blk}");
        for p in 0..da.write_ptr(blk) {
            let gp = g.first_page(blk) + u64::from(p);
            da.read(gp, 0, &mut pa, 0).unwrap();
            db.read(gp, 0, &mut pb, 0).unwrap();
            assert_eq!(pa, pb, "page {gp}");
            assert_eq!(da.oob(gp), db.oob(gp), "OOB of page {gp}");
        }
    }
    check_content(&a, &b_as_mem(&b));
}

/// While GC is busy, a request's pages on one unit still sit side by side in
/// the unit's active block, GC's moves for them after them, so they can go to
/// the device together: for most requests (462 of 547 here; 163 before GC's
/// steps could follow a request's pages). Those that meet a block boundary,
/// or whose GC steps may drain a victim whole or choose a second one, go page
/// by page, GC's moves between their pages. And every read returns the last write. Whole-page requests of
/// up to three pages per unit overwrite a vSSD three times. For both
/// placements.
#[test]
fn a_request_keeps_its_pages_together_while_gc_moves_others() {
    keeps_pages_together(Placement::Stripe);
}

/// [`a_request_keeps_its_pages_together_while_gc_moves_others`], filled.
#[test]
fn a_filled_request_keeps_its_pages_together_while_gc_moves_others() {
    keeps_pages_together(Placement::Fill);
}

fn keeps_pages_together(placement: Placement) {
    let g = Geometry {
        blocks_per_plane: 16,
        pages_per_block: 64,
        ..geo()
    };
    let ps = u64::from(g.page_size);
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
    let clock = Arc::new(VirtualClock::new(0));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(MemCheckpoints::default());
    let mut c = cfg(&g, GcPolicyKind::Greedy);
    c.capacity_bytes = c.capacity_bytes / ps * 7 / 8 * ps;
    let v = Vssd::create(dev.clone(), c, clock.clone(), ckpt).unwrap();
    v.set_placement(placement);
    let m = MemDev::new(v.size());
    let pages = v.size() / ps;
    let units = u64::from(g.channels * g.dies_per_channel);
    let mut rng = SplitMix64::new(11);
    let mut written = 0;
    let mut step = 0u64;
    let (mut checked, mut together) = (0, 0);
    while written < 3 * v.size() {
        let n = 2 + rng.next_u64() % (3 * units - 1);
        let lba = rng.next_u64() % (pages - n + 1);
        let data: Vec<u8> = (0..n * ps).map(|i| (i / ps) as u8 ^ step as u8).collect();
        let moved = v.stats().gc_pages_moved;
        v.write(lba * ps, &data, false).unwrap();
        m.write(lba * ps, &data, false).unwrap();
        written += n * ps;
        step += 1;
        clock.advance(5_000);
        // Only requests during which GC moved pages count.
        if v.stats().gc_pages_moved == moved {
            continue;
        }
        // Where the request's pages are: the newest copy of each of its LBAs.
        let mut at: Vec<Option<(u64, u64)>> = vec![None; n as usize];
        for blk in 0..g.total_blocks() {
            for p in 0..dev.write_ptr(blk) {
                let gp = g.first_page(blk) + u64::from(p);
                let Some(o) = dev.oob(gp) else { continue };
                if o.lba >= lba && o.lba < lba + n && matches!(o.kind, flash::OobKind::Data) {
                    let k = (o.lba - lba) as usize;
                    if at[k].is_none_or(|(_, s)| o.seq > s) {
                        at[k] = Some((gp, o.seq));
                    }
                }
            }
        }
        let mut by_block = std::collections::BTreeMap::<u64, Vec<u64>>::new();
        for (gp, _) in at
            .iter()
            .map(|x| x.expect("every page of the request is on flash"))
        {
            by_block
                .entry(gp / u64::from(g.pages_per_block))
                .or_default()
                .push(gp);
        }
        checked += 1;
        if by_block.values_mut().all(|gps| {
            gps.sort_unstable();
            gps.last().unwrap() - gps[0] + 1 == gps.len() as u64
        }) {
            together += 1;
        }
    }
    let s = v.stats();
    assert!(s.gc_runs > 20, "GC must run in this test: {s:?}");
    assert!(checked > 200, "only {checked} requests met GC");
    assert!(
        together * 4 >= checked * 3,
        "only {together} of {checked} requests that GC moved pages during kept their pages together"
    );
    check_content(&v, &m);
}

/// `b`'s whole content, as a reference device for [`check_content`].
fn b_as_mem(b: &Vssd) -> MemDev {
    let m = MemDev::new(b.size());
    let mut all = vec![0u8; b.size() as usize];
    b.read(0, &mut all).unwrap();
    m.write(0, &all, false).unwrap();
    m
}

/// Destroying a vSSD erases its flash: a new vSSD on the same channels reads zeros,
/// and the old handle refuses I/O.
#[test]
fn destroy_erases_before_reuse() {
    let g = geo();
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
    let clock = Arc::new(VirtualClock::new(0));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(MemCheckpoints::default());
    let c = cfg(&g, GcPolicyKind::Greedy);
    let v = Vssd::create(dev.clone(), c.clone(), clock.clone(), ckpt.clone()).unwrap();
    let cap = c.capacity_bytes;
    v.write(0, &vec![0xEE; cap as usize], false).unwrap();
    v.destroy().unwrap();
    assert!(v.read(0, &mut [0u8; 512]).is_err());
    assert!(ckpt.load(1).unwrap().is_none());
    for b in 0..g.total_blocks() {
        assert_eq!(dev.write_ptr(b), 0, "block {b} not erased");
    }
    let w = Vssd::create(dev.clone(), VssdConfig { id: 2, ..c }, clock, ckpt).unwrap();
    let mut all = vec![1u8; cap as usize];
    w.read(0, &mut all).unwrap();
    assert!(
        all.iter().all(|&x| x == 0),
        "the next tenant must not see old data"
    );
}

/// Bad configurations are refused with a reason.
#[test]
fn bad_configs_are_refused() {
    let g = geo();
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
    let clock = Arc::new(VirtualClock::new(0));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(MemCheckpoints::default());
    let good = cfg(&g, GcPolicyKind::Greedy);
    let cases = [
        VssdConfig {
            capacity_bytes: good.capacity_bytes + 512,
            ..good.clone()
        },
        VssdConfig {
            capacity_bytes: 1000,
            ..good.clone()
        },
        VssdConfig {
            extents: vec![Extent {
                channel: 9,
                first_block: 0,
                blocks: 1,
            }],
            ..good.clone()
        },
        VssdConfig {
            extents: vec![Extent {
                channel: 0,
                first_block: 10,
                blocks: 5,
            }],
            ..good.clone()
        },
        VssdConfig {
            extents: vec![
                Extent {
                    channel: 0,
                    first_block: 0,
                    blocks: 6,
                },
                Extent {
                    channel: 0,
                    first_block: 5,
                    blocks: 2,
                },
            ],
            capacity_bytes: 512,
            ..good.clone()
        },
        VssdConfig {
            extents: vec![],
            ..good.clone()
        },
    ];
    for c in cases {
        let e = Vssd::create(dev.clone(), c.clone(), clock.clone(), ckpt.clone()).unwrap_err();
        assert!(
            e.to_string().contains("invalid vSSD configuration"),
            "{c:?}: {e}"
        );
    }
    // Out-of-range I/O is refused and changes nothing.
    let v = Vssd::create(dev, good.clone(), clock, ckpt).unwrap();
    assert!(v
        .write(good.capacity_bytes - 10, &[1u8; 20], false)
        .is_err());
    let mut b = [9u8; 10];
    v.read(good.capacity_bytes - 10, &mut b).unwrap();
    assert_eq!(b, [0u8; 10]);
    assert!(v.read(u64::MAX - 5, &mut b).is_err());
}

/// A greedy-GC vSSD on a small file-backed device (2 units of 12 blocks of
/// 8 pages), with what a test needs to reopen it.
struct FileVssd {
    dir: tempfile::TempDir,
    g: Geometry,
    backend: Backend,
    ckpt: Arc<dyn CheckpointStore>,
    clock: Arc<VirtualClock>,
    dev: Arc<FlashDevice>,
    c: VssdConfig,
    v: Arc<Vssd>,
}

fn small_file_vssd() -> FileVssd {
    let dir = tempfile::tempdir().unwrap();
    let g = Geometry {
        channels: 1,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 12,
        pages_per_block: 8,
        page_size: 4096,
    };
    let backend = Backend::File {
        path: dir.path().join("ssd"),
    };
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(MemCheckpoints::default());
    let clock = Arc::new(VirtualClock::new(0));
    let dev = Arc::new(FlashDevice::open(&backend, g, Timing::default()).unwrap());
    let c = cfg(&g, GcPolicyKind::Greedy);
    let v = Vssd::create(dev.clone(), c.clone(), clock.clone(), ckpt.clone()).unwrap();
    FileVssd {
        dir,
        g,
        backend,
        ckpt,
        clock,
        dev,
        c,
        v,
    }
}

/// On the file backend GC's erase waits for the vSSD's writes only when the
/// block holds a page a sync made durable (a FLUSH or FUA write may depend on
/// it), and waiting erases share one sync: random writes that never flush
/// make GC erase with no sync at all (it was one sync per erase), and with a
/// flush every 64 writes GC syncs far less often than it erases. The data
/// stays right, and after a restart.
#[test]
fn gc_erases_wait_only_for_durable_pages_and_share_syncs() {
    let FileVssd {
        dir: _dir,
        g,
        backend,
        ckpt,
        clock,
        c,
        v,
        ..
    } = small_file_vssd();
    let m = MemDev::new(c.capacity_bytes);
    let pages = c.capacity_bytes / 4096;
    let mut r = SplitMix64::new(11);
    let mut write = |i: u64| {
        let off = r.below(pages as usize) as u64 * 4096;
        let data = vec![(i % 251) as u8 + 1; 4096];
        v.write(off, &data, false).unwrap();
        m.write(off, &data, false).unwrap();
    };
    for i in 0..pages * 6 {
        write(i);
    }
    let s = v.stats();
    assert!(s.gc_runs > 10, "{s:?}");
    assert_eq!(s.erase_syncs, 0, "GC synced with nothing durable: {s:?}");
    check_content(&v, &m);
    for i in 0..pages * 6 {
        write(i);
        if i % 64 == 0 {
            v.flush().unwrap();
        }
    }
    v.flush().unwrap();
    let t = v.stats();
    let runs = t.gc_runs - s.gc_runs;
    println!("{} erase syncs for {runs} GC runs", t.erase_syncs);
    assert!(runs > 10, "{t:?}");
    assert!(
        t.erase_syncs * 3 < runs,
        "{} erase syncs for {runs} GC runs",
        t.erase_syncs
    );
    check_content(&v, &m);
    v.close().unwrap();
    drop(v);
    let dev = Arc::new(FlashDevice::open(&backend, g, Timing::default()).unwrap());
    let v = Vssd::open(dev, c, clock, ckpt).unwrap();
    check_content(&v, &m);
}

/// Garbage collection erases blocks for reuse: on the file backend they stay
/// allocated in the host file (programming them again allocates nothing, so
/// a sync writes no file-system metadata), while the data stays right; once
/// the vSSD is destroyed, none of its bytes are left in the file.
#[test]
fn gc_keeps_the_file_allocated_and_a_destroy_leaves_nothing() {
    let FileVssd {
        dir, g, dev, c, v, ..
    } = small_file_vssd();
    let path = dir.path().join("ssd");
    let m = MemDev::new(c.capacity_bytes);
    let pages = c.capacity_bytes / 4096;
    let mut r = SplitMix64::new(7);
    for i in 0..pages * 6 {
        let off = r.below(pages as usize) as u64 * 4096;
        let data = vec![(i % 251) as u8 + 1; 4096];
        v.write(off, &data, false).unwrap();
        m.write(off, &data, false).unwrap();
        if i % 16 == 0 {
            v.flush().unwrap();
        }
    }
    v.flush().unwrap();
    check_content(&v, &m);
    assert!(v.stats().gc_runs > 10, "{:?}", v.stats());
    let reused: Vec<u32> = (0..g.total_blocks())
        .filter(|&b| dev.write_ptr(b) == 0 && dev.erase_count(b) > 0)
        .collect();
    assert!(!reused.is_empty(), "no block erased by GC is free now");
    for &b in &reused {
        assert!(
            dev.holds_bytes(b).unwrap(),
            "block {b}, erased for reuse, was punched"
        );
    }
    v.destroy().unwrap();
    for b in 0..g.total_blocks() {
        assert!(!dev.holds_bytes(b).unwrap(), "block {b} outlived the vSSD");
    }
    assert!(std::fs::read(&path).unwrap().iter().all(|&x| x == 0));
}
