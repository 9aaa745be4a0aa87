//! Golden fingerprints: a fixed workload (random full and sub-page writes, trims,
//! write-zeroes, checkpoints, crashes, lending and taking back, both GC policies)
//! run on a virtual clock, hashed together with everything it leaves behind — every
//! modelled completion time, the stats, the checkpoint bytes, and every flash page's
//! data, OOB record, write pointer and erase count.
//!
//! The numbers were recorded before the FTL was split into modules: any change to
//! the on-flash format, the checkpoint bytes, GC's victim choices or the timing of
//! the data path changes them. Update them only for an intended change of
//! behaviour, and say so.
//!
//! Changed on purpose (fc38750 and the commit after it): a multi-page write's
//! pages go to the device together also while GC works (GC's steps after the
//! request's pages on a unit, a victim chosen before them); a trim's record is
//! programmed before its pages are unmapped; and on this small geometry a
//! checkpoint retires trim records at 24 live records (half a block per unit)
//! instead of 256.

use std::sync::Arc;

use blockdev::BlockDev;
use clock::VirtualClock;
use flash::{Backend, FlashDevice, Geometry, Timing};
use ftl::{max_capacity, CheckpointStore, Extent, GcPolicyKind, MemCheckpoints, Vssd, VssdConfig};

/// FNV-1a, 64 bits: stable across Rust versions (unlike `DefaultHasher`).
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn u64(&mut self, x: u64) {
        self.bytes(&x.to_le_bytes());
    }
}

fn geo() -> Geometry {
    Geometry {
        channels: 3,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 16,
        pages_per_block: 8,
        page_size: 512,
    }
}

fn stats_hash(h: &mut Fnv, v: &Vssd) {
    let s = v.stats();
    for x in [
        s.capacity_bytes,
        s.host_pages_written,
        s.flash_pages_written,
        s.flash_pages_read,
        s.gc_runs,
        s.gc_pages_moved,
        s.block_erases,
        s.free_blocks,
        s.total_blocks,
        s.mapped_pages,
        u64::from(s.max_erase_count),
        u64::from(s.min_erase_count),
        s.lent_blocks,
        s.lend_pages_moved,
    ] {
        h.u64(x);
    }
}

/// Runs the workload and returns (fingerprint, gc_runs summed over reopens).
fn run(gc: GcPolicyKind) -> (u64, u64) {
    let g = geo();
    // Suspension off: the fingerprints were recorded before the flash model could
    // suspend a program for a read, and with it off the timing is exactly as it
    // was (`flash`'s `suspend_off_is_the_old_timing` property).
    let timing = Timing::default().without_suspend();
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, timing).unwrap());
    let clock = Arc::new(VirtualClock::new(0));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(MemCheckpoints::default());
    let extents: Vec<Extent> = (0..2).map(|c| Extent::whole_channel(&g, c)).collect();
    let cfg = VssdConfig {
        id: 1,
        name: "golden".into(),
        capacity_bytes: max_capacity(&g, &extents) * 3 / 4 / 512 * 512,
        extents,
        gc,
        lent: Vec::new(),
    };
    let cap = cfg.capacity_bytes;
    let mut v = Vssd::create(dev.clone(), cfg.clone(), clock.clone(), ckpt.clone()).unwrap();
    let mut h = Fnv::new();
    // Keep this inline LCG (not rng::SplitMix64): the golden fingerprints depend on its stream.
    let mut x: u64 = 0x5eed;
    let mut rnd = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    let mut gc_runs = 0;
    let mut cfg_now = cfg.clone();
    let mut lent: Vec<Extent> = Vec::new();
    for step in 0..6000u64 {
        clock.advance(rnd() % 20_000);
        let r = rnd() % 100;
        let t = if r < 70 {
            let page = rnd() % (cap / 512);
            let data = vec![(rnd() & 0xff) as u8; 512];
            v.write(page * 512, &data, false).unwrap()
        } else if r < 82 {
            let off = rnd() % (cap - 1);
            let len = (1 + rnd() % 1500).min(cap - off);
            let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ (step as u8)).collect();
            v.write(off, &data, step % 7 == 0).unwrap()
        } else if r < 88 {
            let off = rnd() % (cap - 1);
            let len = (1 + rnd() % 6000).min(cap - off);
            v.trim(off, len).unwrap()
        } else if r < 91 {
            let off = rnd() % (cap - 1);
            let len = (1 + rnd() % 3000).min(cap - off);
            v.write_zeroes(off, len, false).unwrap()
        } else {
            let off = rnd() % (cap - 1);
            let len = (1 + rnd() % 3000).min(cap - off) as usize;
            let mut buf = vec![0u8; len];
            let t = v.read(off, &mut buf).unwrap();
            h.bytes(&buf);
            t
        };
        h.u64(t);
        if step % 997 == 0 {
            v.checkpoint().unwrap();
            h.bytes(&ckpt.load(1).unwrap().unwrap());
        }
        if step % 1500 == 1499 {
            // Crash: drop without closing, reopen from flash and checkpoint.
            gc_runs += v.stats().gc_runs;
            stats_hash(&mut h, &v);
            drop(v);
            v = Vssd::open(dev.clone(), cfg_now.clone(), clock.clone(), ckpt.clone()).unwrap();
            stats_hash(&mut h, &v);
        }
        if step == 2000 {
            let l = v.lendable();
            for &(c, n) in &l {
                h.u64(u64::from(c));
                h.u64(u64::from(n));
            }
            let n = l.iter().map(|&(_, n)| n).min().unwrap().min(2);
            lent = v.lend(&[1], n).unwrap();
            cfg_now = v.config();
            stats_hash(&mut h, &v);
        }
        if step == 4000 {
            h.u64(u64::from(v.needs_reclaim()));
            h.u64(v.take_back(&lent).unwrap());
            cfg_now = v.config();
            stats_hash(&mut h, &v);
        }
    }
    gc_runs += v.stats().gc_runs;
    stats_hash(&mut h, &v);
    v.close().unwrap();
    h.bytes(&ckpt.load(1).unwrap().unwrap());
    // Everything on flash.
    let mut page = vec![0u8; 512];
    for b in 0..g.total_blocks() {
        let wp = dev.write_ptr(b);
        h.u64(u64::from(wp));
        h.u64(u64::from(dev.erase_count(b)));
        for p in 0..wp {
            let gp = g.first_page(b) + u64::from(p);
            dev.read(gp, 0, &mut page, 0).unwrap();
            h.bytes(&page);
            let o = dev.oob(gp).unwrap();
            h.bytes(&o.encode());
        }
    }
    (h.0, gc_runs)
}

#[test]
fn greedy_fingerprint_is_unchanged() {
    let (fp, gc_runs) = run(GcPolicyKind::Greedy);
    assert!(gc_runs > 100, "the workload must make GC work: {gc_runs}");
    assert_eq!(
        fp, 11202765840183520401,
        "greedy fingerprint (gc runs {gc_runs})"
    );
}

#[test]
fn cost_benefit_fingerprint_is_unchanged() {
    let (fp, gc_runs) = run(GcPolicyKind::CostBenefit);
    assert!(gc_runs > 100, "the workload must make GC work: {gc_runs}");
    assert_eq!(
        fp, 11050596999873205279,
        "cost-benefit fingerprint (gc runs {gc_runs})"
    );
}
