//! Lending: data survives relocation, lent blocks are erased and never used by the
//! home, a gSSD on them never leaks into the home, recovery respects them, and
//! every error case.

use std::collections::HashMap;

use blockdev::{IoError, MemDev};
use clock::VirtualClock;
use flash::{Backend, BlockId, Timing};
use proptest::prelude::*;

use super::*;
use crate::{default_capacity, GcPolicyKind, MemCheckpoints};

const PS: usize = 512;

fn geo() -> Geometry {
    Geometry {
        channels: 3,
        dies_per_channel: 2,
        planes_per_die: 2,
        blocks_per_plane: 16,
        pages_per_block: 8,
        page_size: PS as u32,
    }
}

struct Rig {
    g: Geometry,
    dev: Arc<FlashDevice>,
    clock: Arc<VirtualClock>,
    ckpt: Arc<dyn CheckpointStore>,
}

impl Rig {
    fn new(g: Geometry) -> Self {
        Self {
            g,
            dev: Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap()),
            clock: Arc::new(VirtualClock::new(0)),
            ckpt: Arc::new(MemCheckpoints::default()),
        }
    }

    /// A home vSSD on channels `chans` with `cap` of `max_capacity`'s pages.
    fn home_cfg(&self, chans: std::ops::Range<u32>, frac: f64) -> VssdConfig {
        let extents: Vec<Extent> = chans.map(|c| Extent::whole_channel(&self.g, c)).collect();
        let max = max_capacity(&self.g, &extents) / PS as u64;
        VssdConfig {
            id: 1,
            name: "home".into(),
            capacity_bytes: ((max as f64 * frac) as u64).max(1) * PS as u64,
            extents,
            gc: GcPolicyKind::Greedy,
            lent: Vec::new(),
        }
    }

    fn create(&self, cfg: VssdConfig) -> Arc<Vssd> {
        Vssd::create(self.dev.clone(), cfg, self.clock.clone(), self.ckpt.clone()).unwrap()
    }

    fn open(&self, cfg: VssdConfig) -> Arc<Vssd> {
        Vssd::open(self.dev.clone(), cfg, self.clock.clone(), self.ckpt.clone()).unwrap()
    }

    /// A gSSD (owner `id`) on `extents`, as the control plane would make one.
    fn gssd(&self, id: u32, extents: &[Extent]) -> Arc<Vssd> {
        self.create(VssdConfig {
            id,
            name: format!("g{id}"),
            extents: extents.to_vec(),
            capacity_bytes: default_capacity(&self.g, extents),
            gc: GcPolicyKind::Greedy,
            lent: Vec::new(),
        })
    }

    /// Every block of `extents`.
    fn blocks_of(&self, extents: &[Extent]) -> Vec<BlockId> {
        (0..self.g.total_blocks())
            .filter(|&b| extents.iter().any(|e| e.contains(&self.g, b)))
            .collect()
    }
}

fn page(lba: u64, tag: u8) -> Vec<u8> {
    let mut p = vec![tag; PS];
    p[..8].copy_from_slice(&lba.to_le_bytes());
    p
}

fn check(v: &Vssd, m: &MemDev) {
    let mut a = vec![0u8; m.size() as usize];
    let mut b = vec![0u8; m.size() as usize];
    v.read(0, &mut a).unwrap();
    m.read(0, &mut b).unwrap();
    assert!(a == b, "vSSD content differs from the model");
}

/// Overwrites every logical page of `v` several times so that every block has
/// been used and live data sits in the top blocks too.
fn churn(v: &Vssd, m: &MemDev, lbas: u64, rounds: u8) {
    for r in 0..rounds {
        for lba in 0..lbas {
            let p = page(lba, r.wrapping_add(lba as u8));
            v.write(lba * PS as u64, &p, false).unwrap();
            m.write(lba * PS as u64, &p, false).unwrap();
        }
    }
}

#[test]
fn lend_moves_data_erases_and_never_allocates_there() {
    let rig = Rig::new(geo());
    let v = rig.create(rig.home_cfg(0..2, 1.0));
    let m = MemDev::new(v.size());
    let lbas = v.size() / PS as u64 / 4;
    churn(&v, &m, lbas, 6);
    let per_ch = v.lendable();
    assert_eq!(per_ch.len(), 2);
    let n = per_ch[0].1;
    assert!(n > 0, "{per_ch:?}");
    let ext = v.lend(&[0], n).unwrap();
    assert_eq!(
        ext,
        vec![Extent {
            channel: 0,
            first_block: 16 - n,
            blocks: n
        }]
    );
    assert!(v.stats().lend_pages_moved > 0, "nothing was relocated");
    assert_eq!(v.lent(), ext);
    assert_eq!(v.config().lent, ext);
    assert_eq!(v.stats().lent_blocks, u64::from(n) * 2 * 2);
    let lent_blocks = rig.blocks_of(&ext);
    assert_eq!(lent_blocks.len(), (n * 2 * 2) as usize);
    for &b in &lent_blocks {
        assert_eq!(rig.dev.write_ptr(b), 0, "lent block {b} not erased");
    }
    check(&v, &m);
    // Heavy writes and trims afterwards never touch the lent blocks.
    churn(&v, &m, lbas, 8);
    v.trim(0, 4 * PS as u64).unwrap();
    m.trim(0, 4 * PS as u64).unwrap();
    for &b in &lent_blocks {
        assert_eq!(rig.dev.write_ptr(b), 0, "home allocated lent block {b}");
    }
    check(&v, &m);
    assert_eq!(v.lendable()[0], (0, 0), "a lent channel lends no more");
    // And taking back makes them usable again.
    assert_eq!(v.take_back(&ext).unwrap(), 0, "nothing to erase");
    assert!(v.lent().is_empty() && v.config().lent.is_empty());
    assert_eq!(v.stats().lent_blocks, 0);
    churn(&v, &m, lbas, 8);
    assert!(lent_blocks.iter().any(|&b| rig.dev.write_ptr(b) > 0));
    check(&v, &m);
}

#[test]
fn gssd_data_never_reaches_the_home() {
    let rig = Rig::new(geo());
    let v = rig.create(rig.home_cfg(0..2, 1.0));
    let m = MemDev::new(v.size());
    let lbas = v.size() / PS as u64 / 4;
    churn(&v, &m, lbas, 3);
    let n = v.lendable().iter().map(|&(_, n)| n).min().unwrap();
    let ext = v.lend(&[0, 1], n).unwrap();
    assert_eq!(ext.len(), 2);
    let gs = rig.gssd(7, &ext);
    let secret = vec![0xBBu8; gs.size() as usize];
    gs.write(0, &secret, false).unwrap();
    // Both keep working side by side.
    churn(&v, &m, lbas, 2);
    let mut back = vec![0u8; gs.size() as usize];
    gs.read(0, &mut back).unwrap();
    assert!(back == secret);
    check(&v, &m);
    // The harvest tenant leaves without erasing (take_back must do it).
    drop(gs);
    let t = v.take_back(&ext).unwrap();
    assert!(t > 0, "the gSSD's blocks needed erasing");
    for b in rig.blocks_of(&ext) {
        assert_eq!(rig.dev.write_ptr(b), 0, "block {b} not erased on take-back");
    }
    // Scan everything the home can reach, then again once it reuses the blocks.
    for _ in 0..2 {
        let mut all = vec![0u8; v.size() as usize];
        v.read(0, &mut all).unwrap();
        for (i, p) in all.chunks(PS).enumerate() {
            assert!(
                p.iter().all(|&x| x == 0) || p[..8] == (i as u64).to_le_bytes(),
                "home page {i} holds neither its data nor zeros"
            );
            assert!(p != [0xBBu8; PS], "home page {i} holds the gSSD's data");
        }
        check(&v, &m);
        churn(&v, &m, v.size() / PS as u64, 2);
    }
}

#[test]
fn take_back_erases_in_parallel_and_erase_all_empties() {
    let rig = Rig::new(geo());
    let v = rig.create(rig.home_cfg(0..3, 0.2));
    let ext = v.lend(&[0, 1, 2], 4).unwrap();
    let gs = rig.gssd(9, &ext);
    // Fill the gSSD completely (every block written at least once).
    let full = vec![0x5Au8; gs.size() as usize];
    gs.write(0, &full, false).unwrap();
    gs.write(0, &full, false).unwrap();
    rig.clock.advance(1_000_000_000_000); // every die idle again
    let blocks = rig.blocks_of(&ext);
    let busiest = |rig: &Rig| {
        (0..3)
            .flat_map(|c| (0..2).map(move |d| (c, d)))
            .map(|(c, d)| {
                blocks
                    .iter()
                    .filter(|&&b| {
                        let pu = rig.g.pu_of(b);
                        pu.channel == c && pu.die == d && rig.dev.write_ptr(b) > 0
                    })
                    .count() as u64
            })
            .max()
            .unwrap()
    };
    let erase = Timing::default().erase_ns;
    // erase_all: dies in parallel, one die's blocks in sequence.
    let worst = busiest(&rig);
    assert!(worst > 1);
    assert_eq!(gs.erase_all().unwrap(), worst * erase);
    for &b in &blocks {
        assert_eq!(rig.dev.write_ptr(b), 0);
    }
    let mut back = vec![1u8; gs.size() as usize];
    gs.read(0, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 0), "erase_all left data readable");
    // The gSSD stays usable, and reopens empty.
    gs.write(0, &[3u8; PS], false).unwrap();
    let gcfg = gs.config();
    rig.clock.advance(1_000_000_000_000);
    assert_eq!(gs.erase_all().unwrap(), erase);
    drop(gs);
    let gs = rig.open(gcfg);
    gs.read(0, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 0));
    // take_back of written blocks: time of the busiest die (2 planes × 4 blocks
    // per die at most), not the sum over the channels.
    gs.write(0, &full, false).unwrap();
    drop(gs);
    rig.clock.advance(1_000_000_000_000);
    let per_die: Vec<u64> = (0..3)
        .flat_map(|c| (0..2).map(move |d| (c, d)))
        .map(|(c, d)| {
            blocks
                .iter()
                .filter(|&&b| {
                    let pu = rig.g.pu_of(b);
                    pu.channel == c && pu.die == d && rig.dev.write_ptr(b) > 0
                })
                .count() as u64
        })
        .collect();
    let t = v.take_back(&ext).unwrap();
    assert_eq!(t, per_die.iter().max().unwrap() * erase, "{per_die:?}");
}

#[test]
fn recovery_keeps_lent_ranges_apart() {
    let rig = Rig::new(geo());
    let v = rig.create(rig.home_cfg(0..2, 1.0));
    let m = MemDev::new(v.size());
    let lbas = v.size() / PS as u64 / 4;
    churn(&v, &m, lbas, 5);
    let ext = v.lend(&[1], 5).unwrap();
    let gs = rig.gssd(5, &ext);
    let pattern: Vec<u8> = (0..gs.size()).map(|i| (i % 251) as u8).collect();
    gs.write(0, &pattern, false).unwrap();
    churn(&v, &m, lbas, 1);
    // Crash both (no clean close) and reopen from the persisted configs.
    let (hcfg, gcfg) = (v.config(), gs.config());
    assert_eq!(hcfg.lent, ext);
    drop(v);
    drop(gs);
    let v = rig.open(hcfg.clone());
    let gs = rig.open(gcfg);
    check(&v, &m);
    assert_eq!(v.lent(), ext);
    assert_eq!(v.lendable()[1], (1, 0));
    // The home writes a lot; the gSSD's data stays intact.
    churn(&v, &m, lbas, 6);
    let mut back = vec![0u8; gs.size() as usize];
    gs.read(0, &mut back).unwrap();
    assert!(back == pattern, "home disturbed the gSSD's blocks");
    // A clean reopen, take back, another crash: the blocks are the home's again.
    v.close().unwrap();
    drop(v);
    let v = rig.open(hcfg);
    drop(gs);
    v.take_back(&ext).unwrap();
    churn(&v, &m, v.size() / PS as u64, 2);
    let cfg = v.config();
    assert!(cfg.lent.is_empty());
    drop(v);
    let v = rig.open(cfg);
    check(&v, &m);
}

/// A crash after `lend` returned but before the control plane persisted the new
/// config: the blocks are erased, so recovery simply takes them back.
#[test]
fn crash_before_config_is_persisted_loses_nothing() {
    let rig = Rig::new(geo());
    let cfg = rig.home_cfg(0..2, 1.0);
    let v = rig.create(cfg.clone());
    let m = MemDev::new(v.size());
    churn(&v, &m, v.size() / PS as u64 / 3, 4);
    v.lend(&[0, 1], 3).unwrap();
    drop(v);
    let v = rig.open(cfg);
    assert!(v.lent().is_empty());
    check(&v, &m);
    churn(&v, &m, v.size() / PS as u64, 2);
    check(&v, &m);
}

/// What a pressure hook heard, in order.
type Heard = Arc<parking_lot::Mutex<Vec<Pressure>>>;

fn listen(v: &Vssd, wait: std::time::Duration) -> Heard {
    let heard: Heard = Arc::default();
    let h = heard.clone();
    v.on_pressure(Arc::new(move |_, p| h.lock().push(p)), wait);
    heard
}

/// The write path signals `Low` as soon as the threshold is crossed, before any
/// write runs out of space; a write that does run out waits for the lent blocks
/// and succeeds once they are taken back: a full sequential fill with half the
/// device lent loses nothing.
#[test]
fn a_write_out_of_room_waits_for_the_lent_blocks() {
    let rig = Rig::new(geo());
    let v = rig.create(rig.home_cfg(0..2, 1.0));
    let heard = listen(&v, std::time::Duration::from_secs(30));
    let n = v.lendable()[0].1;
    v.lend(&[0], n).unwrap();
    // The "harvester": takes everything back once a write is out of room.
    let (vv, hh) = (v.clone(), heard.clone());
    let reclaimer = std::thread::spawn(move || loop {
        if hh.lock().contains(&Pressure::Out) {
            vv.take_back(&vv.lent()).unwrap();
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    });
    let m = MemDev::new(v.size());
    let pages = v.size() / PS as u64;
    let mut low_at = None;
    for lba in 0..pages {
        let p = page(lba, 0x5a);
        v.write(lba * PS as u64, &p, false).unwrap();
        m.write(lba * PS as u64, &p, false).unwrap();
        if low_at.is_none() && heard.lock().contains(&Pressure::Low) {
            low_at = Some(lba);
        }
    }
    reclaimer.join().unwrap();
    let heard = heard.lock().clone();
    let first_out = heard.iter().position(|&p| p == Pressure::Out);
    assert!(
        first_out.is_some(),
        "the fill never ran out of room: {heard:?}"
    );
    assert_eq!(heard[0], Pressure::Low, "Low must come first: {heard:?}");
    assert!(
        low_at.unwrap() + 4 * u64::from(rig.g.pages_per_block) < pages,
        "Low came only at page {low_at:?} of {pages}"
    );
    assert!(v.lent().is_empty());
    check(&v, &m);
}

/// A write that runs out of room waits at most the hook's limit, then fails
/// with ENOSPC naming the wait; without a hook it fails at once; either way
/// what was acknowledged reads back.
#[test]
fn a_write_out_of_room_fails_when_nothing_comes_back() {
    let rig = Rig::new(geo());
    let v = rig.create(rig.home_cfg(0..2, 1.0));
    let n = v.lendable()[0].1;
    v.lend(&[0], n).unwrap();
    let m = MemDev::new(v.size());
    let fill = |v: &Vssd| -> String {
        for lba in 0..v.size() / PS as u64 {
            let p = page(lba, 0x33);
            match v.write(lba * PS as u64, &p, false) {
                Ok(_) => {
                    m.write(lba * PS as u64, &p, false).unwrap();
                }
                Err(IoError::NoSpace(msg)) => return msg,
                Err(e) => panic!("{e}"),
            }
        }
        panic!("the fill never ran out of room");
    };
    let msg = fill(&v);
    assert!(
        !msg.contains("did not come back"),
        "no hook, no wait: {msg}"
    );
    let heard = listen(&v, std::time::Duration::from_millis(20));
    let msg = fill(&v);
    assert!(
        msg.contains("did not come back within 20 ms"),
        "the error must say what it waited for: {msg}"
    );
    assert!(heard.lock().contains(&Pressure::Out));
    check(&v, &m);
}

#[test]
fn needs_reclaim_fires_well_before_no_space() {
    let rig = Rig::new(geo());
    let v = rig.create(rig.home_cfg(0..2, 1.0));
    assert!(!v.needs_reclaim(), "nothing lent");
    let n = v.lendable()[0].1;
    v.lend(&[0], n).unwrap();
    assert!(!v.needs_reclaim(), "fresh lend must not ask for reclaim");
    let m = MemDev::new(v.size());
    let pages = v.size() / PS as u64;
    let mut signal_at = None;
    let mut lba = 0;
    while lba < pages {
        let p = page(lba, 0x11);
        match v.write(lba * PS as u64, &p, false) {
            Ok(_) => {
                m.write(lba * PS as u64, &p, false).unwrap();
                if signal_at.is_none() && v.needs_reclaim() {
                    signal_at = Some(lba);
                }
                lba += 1;
            }
            Err(IoError::NoSpace(_)) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let at = signal_at.expect("needs_reclaim never fired");
    // The signal must come at least a few blocks' worth of pages before the end.
    let ppb = u64::from(rig.g.pages_per_block);
    assert!(
        lba >= at + 4 * ppb,
        "signal at page {at}, space ran out at {lba}"
    );
    // Whatever happened, what was acknowledged reads back.
    check(&v, &m);
    // Taking the blocks back lets the tenant write everything.
    v.take_back(&v.lent()).unwrap();
    assert!(!v.needs_reclaim());
    while lba < pages {
        let p = page(lba, 0x11);
        v.write(lba * PS as u64, &p, false).unwrap();
        m.write(lba * PS as u64, &p, false).unwrap();
        lba += 1;
    }
    check(&v, &m);
}

#[test]
fn every_error_case() {
    let rig = Rig::new(geo());
    let v = rig.create(rig.home_cfg(0..2, 0.5));
    let lendable = v.lendable();
    let n = lendable[0].1;
    let err = |r: Result<Vec<Extent>, FtlError>| r.unwrap_err();
    assert!(matches!(err(v.lend(&[], 1)), FtlError::BadLend { .. }));
    assert!(matches!(err(v.lend(&[0], 0)), FtlError::BadLend { .. }));
    assert!(matches!(err(v.lend(&[0, 0], 1)), FtlError::BadLend { .. }));
    assert!(matches!(
        err(v.lend(&[0, 2], 1)),
        FtlError::UnknownChannel { channel: 2, .. }
    ));
    assert!(matches!(
        err(v.lend(&[1, 0], n + 1)),
        FtlError::NotLendable { asked, .. } if asked == n + 1
    ));
    // None of the failures lent anything.
    assert!(v.lent().is_empty());
    assert_eq!(v.lendable(), lendable);
    assert_eq!(v.stats().lent_blocks, 0);
    let ext = v.lend(&[0], 2).unwrap();
    assert!(matches!(
        err(v.lend(&[1, 0], 1)),
        FtlError::AlreadyLent { channel: 0, .. }
    ));
    assert_eq!(v.lent(), ext, "a failed second lend lent nothing more");
    assert_eq!(v.lendable()[1], lendable[1]);
    let other = Extent {
        first_block: 0,
        ..ext[0]
    };
    assert!(matches!(
        v.take_back(&[other]).unwrap_err(),
        FtlError::NotLent { .. }
    ));
    assert!(matches!(
        v.take_back(&[ext[0], ext[0]]).unwrap_err(),
        FtlError::BadLend { .. }
    ));
    assert_eq!(v.lent(), ext);
    // Bad lent ranges in a config are refused.
    let base = v.config();
    let bad = |lent: Vec<Extent>| {
        let c = VssdConfig {
            lent,
            id: 3,
            ..base.clone()
        };
        Vssd::create(rig.dev.clone(), c, rig.clock.clone(), rig.ckpt.clone()).unwrap_err()
    };
    let e = |channel, first_block, blocks| Extent {
        channel,
        first_block,
        blocks,
    };
    assert!(matches!(bad(vec![e(2, 0, 1)]), FtlError::Config(_)));
    assert!(matches!(bad(vec![e(0, 10, 7)]), FtlError::Config(_)));
    assert!(matches!(bad(vec![e(0, 3, 0)]), FtlError::Config(_)));
    assert!(matches!(
        bad(vec![e(0, 14, 2), e(0, 0, 1)]),
        FtlError::Config(_)
    ));
    // A destroyed vSSD refuses everything (its lent blocks are left to the borrower).
    v.destroy().unwrap();
    assert!(matches!(err(v.lend(&[1], 1)), FtlError::Gone(_)));
    assert!(matches!(v.take_back(&ext).unwrap_err(), FtlError::Gone(_)));
    assert!(matches!(v.erase_all().unwrap_err(), FtlError::Gone(_)));
}

/// A lend that fails half-way (say, the host filled the unit while data moved)
/// leaves nothing lent: withdrawn blocks return to allocation and GC, moved data
/// stays readable, and the range can be lent later.
#[test]
fn failed_lend_is_rolled_back() {
    let rig = Rig::new(geo());
    let v = rig.create(rig.home_cfg(0..2, 1.0));
    let m = MemDev::new(v.size());
    let lbas = v.size() / PS as u64 / 4;
    churn(&v, &m, lbas, 6);
    let n = v.lendable()[0].1;
    let free_before = v.stats().free_blocks;
    {
        let mut g = v.inner.lock();
        let exts = v.check_lend(&g, &[0], n).unwrap();
        let mut members = Vec::new();
        for &(ei, x) in &exts {
            for pu in v.pus_of_extent(ei) {
                for k in 0..g.pus[pu].blocks.len() {
                    let b = g.pus[pu].blocks[k];
                    if x.contains(&v.geo, g.blocks[b as usize].id) {
                        Vssd::withdraw(&mut g, pu, b);
                        members.push((pu, b));
                    }
                }
            }
        }
        // Evacuate half of them, then fail.
        for &(pu, b) in &members[..members.len() / 2] {
            v.evacuate(&mut g, pu, b, 0).unwrap();
        }
        v.restore(&mut g, &members);
        for b in g.blocks.iter() {
            assert!(matches!(
                b.state,
                BState::Free | BState::Open | BState::Closed
            ));
        }
        for (pu, st) in g.pus.iter().enumerate() {
            for &(ec, b) in &st.free {
                let blk = &g.blocks[b as usize];
                assert_eq!(
                    (blk.pu as usize, blk.state, blk.erase_count),
                    (pu, BState::Free, ec)
                );
                assert_eq!(rig.dev.write_ptr(blk.id), 0);
            }
        }
        let free: usize = g.pus.iter().map(|p| p.free.len()).sum();
        let free_state = g.blocks.iter().filter(|b| b.state == BState::Free).count();
        assert_eq!(free, free_state);
    }
    assert!(v.lent().is_empty());
    assert!(v.stats().free_blocks >= free_before);
    check(&v, &m);
    churn(&v, &m, lbas, 4);
    check(&v, &m);
    let ext = v.lend(&[0], v.lendable()[0].1).unwrap();
    check(&v, &m);
    v.take_back(&ext).unwrap();
}

/// Host I/O on another thread keeps working, and stays correct, while a lend
/// moves data.
#[test]
fn lend_runs_beside_host_io() {
    let rig = Rig::new(geo());
    let v = rig.create(rig.home_cfg(0..2, 1.0));
    let m = MemDev::new(v.size());
    let lbas = v.size() / PS as u64 / 4;
    churn(&v, &m, lbas, 6);
    let start = Arc::new(std::sync::Barrier::new(2));
    let writer = {
        let (v, start) = (v.clone(), start.clone());
        std::thread::spawn(move || {
            let mut last = HashMap::new();
            start.wait();
            for i in 0..4000u64 {
                // Overwrites only, so the valid data (and what is lendable) stays put.
                let lba = (i * 7) % lbas;
                let p = page(lba, (i % 200) as u8 + 1);
                v.write(lba * PS as u64, &p, false).unwrap();
                last.insert(lba, p);
            }
            last
        })
    };
    // One block below the limit: overwrites can shift a block's worth of valid
    // pages from one die to the other.
    let n = v.lendable()[0].1 - 1;
    let range = Extent {
        channel: 0,
        first_block: 16 - n,
        blocks: n,
    };
    let live_in_range = || {
        let g = v.inner.lock();
        g.blocks
            .iter()
            .any(|b| b.valid > 0 && range.contains(&rig.g, b.id))
    };
    for _ in 0..50 {
        if live_in_range() {
            break;
        }
        churn(&v, &m, lbas, 1);
    }
    assert!(live_in_range());
    start.wait();
    // The first lend has live data to move (as in the test above) while the
    // writer runs; then lend and take back until it is done.
    let mut lends = 0;
    while lends == 0 || !writer.is_finished() {
        let writing = !writer.is_finished();
        let ext = match v.lend(&[0], n) {
            Ok(ext) => ext,
            Err(FtlError::NotLendable { .. }) if lends > 0 => continue,
            // The writer used the room while data moved: only possible beside it.
            Err(FtlError::LendNoRoom(_)) if writing => continue,
            Err(e) => panic!("{e}"),
        };
        if lends == 0 {
            assert!(v.stats().lend_pages_moved > 0);
        }
        v.take_back(&ext).unwrap();
        lends += 1;
    }
    for (lba, p) in writer.join().unwrap() {
        m.write(lba * PS as u64, &p, false).unwrap();
    }
    check(&v, &m);
}

#[derive(Debug, Clone)]
enum Op {
    Write {
        lba: u64,
        n: u64,
        tag: u8,
    },
    Trim {
        lba: u64,
        n: u64,
    },
    Read {
        lba: u64,
        n: u64,
    },
    /// Overwrite the whole range a few times, so that every block gets used.
    Churn {
        tag: u8,
    },
    Lend {
        chans: u8,
        blocks: u32,
    },
    TakeBack,
    Checkpoint,
    Crash,
}

fn op(lbas: u64) -> impl Strategy<Value = Op> {
    let range = (0..lbas).prop_flat_map(move |l| (Just(l), 1..=(lbas - l).min(6)));
    prop_oneof![
        12 => (range.clone(), 1u8..).prop_map(|((lba, n), tag)| Op::Write { lba, n, tag }),
        2 => range.clone().prop_map(|(lba, n)| Op::Trim { lba, n }),
        4 => range.prop_map(|(lba, n)| Op::Read { lba, n }),
        1 => (1u8..).prop_map(|tag| Op::Churn { tag }),
        2 => (1u8..4, 1u32..12).prop_map(|(chans, blocks)| Op::Lend { chans, blocks }),
        1 => Just(Op::TakeBack),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Crash),
    ]
}

/// Writes pages `lba..lba+n` with `tag`; if the home runs out of space (only
/// possible with blocks lent, and only after the reclaim signal), reclaims
/// everything as the control plane would and writes again.
fn write(v: &Vssd, gssds: &mut Vec<(Arc<Vssd>, u8)>, lba: u64, n: u64, tag: u8) {
    let data: Vec<u8> = (lba..lba + n).flat_map(|l| page(l, tag)).collect();
    match v.write(lba * PS as u64, &data, false) {
        Ok(_) => {}
        Err(IoError::NoSpace(_)) => {
            assert!(v.needs_reclaim(), "no space without the reclaim signal");
            for (g, _) in gssds.drain(..) {
                g.destroy().unwrap();
            }
            v.take_back(&v.lent()).unwrap();
            v.write(lba * PS as u64, &data, false).unwrap();
        }
        Err(e) => panic!("{e}"),
    }
}

/// A random mix of writes, trims, reads, lends (with a gSSD writing over the lent
/// blocks), take-backs, checkpoints and crashes: every read returns what a
/// HashMap model says, and the gSSD keeps its own data.
fn run(ops: Vec<Op>) {
    let rig = Rig::new(Geometry {
        channels: 2,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 32,
        pages_per_block: 8,
        page_size: PS as u32,
    });
    let mut v = rig.create(rig.home_cfg(0..2, 1.0));
    let lbas = v.size() / PS as u64 / 3;
    let mut model: HashMap<u64, u8> = HashMap::new();
    let mut gssds: Vec<(Arc<Vssd>, u8)> = Vec::new();
    let mut next_id = 10;
    for op in ops {
        rig.clock.advance(50_000);
        match op {
            Op::Write { lba, n, tag } => {
                write(&v, &mut gssds, lba, n, tag);
                for l in lba..lba + n {
                    model.insert(l, tag);
                }
            }
            Op::Churn { tag } => {
                for _ in 0..3 {
                    for l in 0..100 {
                        write(&v, &mut gssds, l, 1, tag);
                        model.insert(l, tag);
                    }
                }
            }
            Op::Trim { lba, n } => {
                v.trim(lba * PS as u64, n * PS as u64).unwrap();
                for l in lba..lba + n {
                    model.remove(&l);
                }
            }
            Op::Read { lba, n } => {
                let mut buf = vec![0u8; (n as usize) * PS];
                v.read(lba * PS as u64, &mut buf).unwrap();
                for (i, p) in buf.chunks(PS).enumerate() {
                    let l = lba + i as u64;
                    match model.get(&l) {
                        Some(&tag) => assert!(p == page(l, tag), "lba {l}"),
                        None => assert!(p.iter().all(|&x| x == 0), "lba {l} not zero"),
                    }
                }
            }
            Op::Lend { chans, blocks } => {
                let chans: Vec<u32> = (0..2).filter(|c| chans & (1 << c) != 0).collect();
                let can = v.lendable();
                let ok = chans
                    .iter()
                    .all(|&c| blocks <= can[c as usize].1 && can[c as usize].1 > 0);
                match v.lend(&chans, blocks) {
                    Ok(ext) => {
                        assert!(ok, "lent more than lendable {can:?}");
                        for b in rig.blocks_of(&ext) {
                            assert_eq!(rig.dev.write_ptr(b), 0);
                        }
                        if max_capacity(&rig.g, &ext) > 0 {
                            let g = rig.gssd(next_id, &ext);
                            let tag = next_id as u8;
                            next_id += 1;
                            g.write(0, &vec![tag; g.size() as usize], false).unwrap();
                            gssds.push((g, tag));
                        }
                    }
                    Err(FtlError::NotLendable { .. } | FtlError::AlreadyLent { .. }) => {
                        assert!(
                            !ok || chans
                                .iter()
                                .any(|c| v.lent().iter().any(|l| l.channel == *c))
                        );
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            Op::TakeBack => {
                for (g, tag) in gssds.drain(..) {
                    let mut buf = vec![0u8; g.size() as usize];
                    g.read(0, &mut buf).unwrap();
                    assert!(buf.iter().all(|&x| x == tag), "gSSD lost its data");
                    drop(g); // the borrower stops; take_back erases
                }
                v.take_back(&v.lent()).unwrap();
            }
            Op::Checkpoint => v.checkpoint().unwrap(),
            Op::Crash => {
                let cfg = v.config();
                drop(v);
                v = rig.open(cfg);
            }
        }
    }
    for (g, tag) in &gssds {
        let mut buf = vec![0u8; g.size() as usize];
        g.read(0, &mut buf).unwrap();
        assert!(buf.iter().all(|x| x == tag), "gSSD lost its data");
    }
    let mut all = vec![0u8; (lbas as usize) * PS];
    v.read(0, &mut all).unwrap();
    for (l, p) in all.chunks(PS).enumerate() {
        match model.get(&(l as u64)) {
            Some(&tag) => assert!(p == page(l as u64, tag), "lba {l}"),
            None => assert!(p.iter().all(|&x| x == 0), "lba {l} not zero"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn home_reads_its_last_writes_across_lends(ops in proptest::collection::vec(op(100), 1..400)) {
        run(ops);
    }
}

/// Regression (docs/results/powerloss.md, "Open bug"): a lend that
/// [`Vssd::lendable`] allowed failed with NoSpace halfway, because lending took
/// every erased block of the range out of the free lists before moving a page,
/// which could leave a unit with no free block outside the range, so GC could
/// not run; GC then failed inside a drain and skipped the page it could not
/// move, and a later drain erased the victim under that live page. Small
/// devices, random overwrites, and a lend of all that `lendable` allows every
/// 37 writes (many of these failed before the fix); every lend must succeed
/// and every logical page must read its last write, then and after.
#[test]
fn lendable_ranges_can_always_be_lent() {
    let g = Geometry {
        channels: 1,
        dies_per_channel: 1,
        planes_per_die: 2,
        blocks_per_plane: 16,
        pages_per_block: 8,
        page_size: PS as u32,
    };
    let mut lends = 0;
    for seed in 240..300u64 {
        let rig = Rig::new(g);
        let v = rig.create(rig.home_cfg(0..1, 1.0));
        let m = MemDev::new(v.size());
        let frac = [0.2, 0.4, 0.6, 0.8, 1.0][(seed % 5) as usize];
        let lbas = (((v.size() / PS as u64) as f64 * frac) as u64).max(1);
        let mut x = seed;
        for i in 0..800u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let lba = (x >> 33) % lbas;
            let p = page(lba, i as u8);
            v.write(lba * PS as u64, &p, false)
                .unwrap_or_else(|e| panic!("seed {seed} write {i}: {e}"));
            m.write(lba * PS as u64, &p, false).unwrap();
            if i % 37 != 36 {
                continue;
            }
            let n = v.lendable()[0].1;
            if n == 0 {
                continue;
            }
            let ext = v
                .lend(&[0], n)
                .unwrap_or_else(|e| panic!("seed {seed} write {i}: lend of {n}: {e}"));
            lends += 1;
            check(&v, &m);
            v.take_back(&ext).unwrap();
        }
        check(&v, &m);
    }
    assert!(lends > 500, "only {lends} lends");
}

/// Regression (the data loss behind the "Open bug" of
/// docs/results/powerloss.md): when GC ran out of free blocks in the middle of
/// a victim (as it did inside a failing lend), the drain had already stepped its
/// cursor past the live page it could not move; the next drain then erased the
/// victim under that page, and reading it failed ("read of erased page"). A
/// drain that fails must leave every page readable and resume where it stopped.
#[test]
fn gc_out_of_room_midway_loses_nothing() {
    let rig = Rig::new(Geometry {
        channels: 1,
        dies_per_channel: 1,
        planes_per_die: 1,
        blocks_per_plane: 16,
        pages_per_block: 8,
        page_size: PS as u32,
    });
    let v = rig.create(rig.home_cfg(0..1, 1.0));
    let m = MemDev::new(v.size());
    // Six blocks of data, then the even pages again: the first six blocks are
    // half stale, so GC's victim has live pages to move.
    for (tag, lbas) in [(1u8, (0..48u64).step_by(1)), (2, (0..48).step_by(2))] {
        for lba in lbas {
            let p = page(lba, tag);
            v.write(lba * PS as u64, &p, false).unwrap();
            m.write(lba * PS as u64, &p, false).unwrap();
        }
    }
    {
        let mut g = v.inner.lock();
        // No free block and no open one: the victim's first live page cannot move.
        if let Some(b) = g.pus[0].active.take() {
            g.blocks[b as usize].state = BState::Closed;
        }
        let free = std::mem::take(&mut g.pus[0].free);
        let now = rig.clock.now();
        assert!(matches!(
            v.gc_once(&mut g, 0, now),
            Err(FtlError::NoSpace(_))
        ));
        g.pus[0].free = free;
        assert!(
            v.gc_once(&mut g, 0, now).unwrap(),
            "the victim was not collected"
        );
    }
    check(&v, &m);
}

/// On a file-backed device, blocks that change hands leave no bytes of their
/// owner in the host file: lending punches the lent range (blocks GC had
/// erased for reuse too), taking it back punches what the gSSD left there,
/// and the home's own syncs stop covering the range while it is lent.
#[test]
fn blocks_that_change_hands_leave_no_bytes_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let g = Geometry {
        page_size: 4096,
        ..geo()
    };
    let rig = Rig {
        g,
        dev: Arc::new(
            FlashDevice::open(
                &Backend::File {
                    path: dir.path().join("ssd"),
                },
                g,
                Timing::default(),
            )
            .unwrap(),
        ),
        clock: Arc::new(VirtualClock::new(0)),
        ckpt: Arc::new(MemCheckpoints::default()),
    };
    let extents = vec![Extent::whole_channel(&g, 0)];
    let max = max_capacity(&g, &extents);
    let v = rig.create(VssdConfig {
        id: 1,
        name: "home".into(),
        capacity_bytes: max / 2 / 4096 * 4096,
        extents,
        gc: GcPolicyKind::Greedy,
        lent: Vec::new(),
    });
    // Every block programmed at least once, and GC has erased some for reuse.
    let pages = v.size() / 4096;
    for r in 0..8u64 {
        for lba in 0..pages {
            v.write(lba * 4096, &vec![(r + lba) as u8 | 1; 4096], false)
                .unwrap();
        }
    }
    v.flush().unwrap();
    assert!(v.stats().gc_runs > 0);
    let whole = (0..g.blocks_per_channel()).collect::<Vec<_>>();
    assert!(whole.iter().all(|&b| rig.dev.holds_bytes(b).unwrap()));
    let n = v.lendable()[0].1;
    assert!(n > 0);
    let top = Extent {
        channel: 0,
        first_block: g.blocks_per_plane - n,
        blocks: n,
    };
    let reused = rig
        .blocks_of(&[top])
        .into_iter()
        .filter(|&b| rig.dev.write_ptr(b) == 0 && rig.dev.holds_bytes(b).unwrap())
        .count();
    assert!(
        reused > 0,
        "no block of the range to lend was erased for reuse"
    );
    let ext = v.lend(&[0], n).unwrap();
    assert_eq!(ext, vec![top]);
    let lent = rig.blocks_of(&ext);
    for &b in &lent {
        assert!(
            !rig.dev.holds_bytes(b).unwrap(),
            "lent block {b} kept the home's bytes"
        );
    }
    // The home's syncs no longer cover the lent range.
    for r in v.own_runs().runs() {
        assert!(
            lent.iter().all(|b| !r.contains(b)),
            "{r:?} covers a lent block"
        );
    }
    let gs = rig.gssd(9, &ext);
    let full = vec![0x5Au8; gs.size() as usize];
    gs.write(0, &full, false).unwrap();
    gs.write(0, &full, false).unwrap();
    gs.flush().unwrap();
    // The gSSD's GC left blocks erased for reuse, holding its old bytes.
    assert!(lent
        .iter()
        .any(|&b| rig.dev.write_ptr(b) == 0 && rig.dev.holds_bytes(b).unwrap()));
    drop(gs);
    v.take_back(&ext).unwrap();
    for &b in &lent {
        assert!(
            !rig.dev.holds_bytes(b).unwrap(),
            "block {b} kept the gSSD's bytes"
        );
    }
    let runs: Vec<_> = v.own_runs().runs().to_vec();
    #[allow(clippy::single_range_in_vec_init)]
    let all = vec![0..g.blocks_per_channel()];
    assert_eq!(runs, all, "the home's runs cover its channel again");
}
