//! Tests of the cache tier: hits and misses, write-through, unaligned
//! requests, evictions, epoch migrations, live policy changes and resizes,
//! completion times, and a property test against a plain model.

use std::sync::Arc;

use blockdev::{IoStats, Layered, MemDev, StatsLayer};
use clock::{VirtualClock, MS, SEC, US};
use proptest::prelude::*;

use super::*;
use crate::{FileStore, HddModel};

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;

struct Rig {
    clock: Arc<VirtualClock>,
    backing: Arc<MemDev>,
    /// Counts the requests that reach the backing store.
    backing_io: Arc<IoStats>,
    tier: CacheTier,
}

fn rig(policy: PolicyKind, cfg: PolicyConfig, cache_bytes: u64, device: u64, vols: &[u64]) -> Rig {
    rig_with(
        policy,
        cfg,
        cache_bytes,
        device,
        vols,
        WritePolicy::WriteThrough,
    )
}

fn rig_with(
    policy: PolicyKind,
    cfg: PolicyConfig,
    cache_bytes: u64,
    device: u64,
    vols: &[u64],
    write_policy: WritePolicy,
) -> Rig {
    let clock = Arc::new(VirtualClock::new(0));
    let total: u64 = vols.iter().sum();
    let backing = Arc::new(MemDev::new(total));
    let backing_io = Arc::new(IoStats::default());
    let counted: Arc<dyn BlockDev> = Arc::new(Layered(StatsLayer::new(
        backing.clone(),
        backing_io.clone(),
    )));
    let tier = CacheTier::new(
        TierSetup {
            name: "t".into(),
            policy,
            policy_config: cfg,
            cache_bytes,
            volumes: vols
                .iter()
                .enumerate()
                .map(|(i, &size)| VolumeSpec {
                    name: format!("v{i}"),
                    size,
                })
                .collect(),
            write_policy,
        },
        counted,
        Arc::new(MemDev::new(device)),
        clock.clone(),
    )
    .unwrap();
    Rig {
        clock,
        backing,
        backing_io,
        tier,
    }
}

fn glru(cache_bytes: u64, vols: &[u64]) -> Rig {
    rig(
        PolicyKind::Glru,
        PolicyConfig::default(),
        cache_bytes,
        cache_bytes,
        vols,
    )
}

fn read(v: &TierVolume, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    v.read(off, &mut b).unwrap();
    b
}

fn backing_reads(r: &Rig) -> u64 {
    r.backing_io.snapshot().reads
}

#[test]
fn a_miss_admits_under_glru_and_the_next_read_hits_flash() {
    let r = glru(64 * KIB, &[MIB]);
    let v = &r.tier.volumes()[0];
    r.backing.write(8192, &[5u8; 4096], false).unwrap();
    assert_eq!(read(v, 8192, 4096), vec![5u8; 4096]);
    assert_eq!(backing_reads(&r), 1);
    assert_eq!(read(v, 8192, 4096), vec![5u8; 4096]);
    assert_eq!(backing_reads(&r), 1, "the second read came from flash");
    let s = r.tier.stats();
    let vs = &s.volumes[0];
    assert_eq!((vs.read_hits, vs.read_misses), (1, 1));
    assert_eq!(vs.read_bytes, 8192);
    assert_eq!(vs.read_hit_ratio(), 0.5);
    assert_eq!(s.cached_bytes, 4096);
    assert_eq!(vs.resident_bytes, 4096);
    assert_eq!(s.policy, PolicyKind::Glru);
    r.tier.check();
}

#[test]
fn writes_go_through_and_cached_copies_follow() {
    let r = glru(64 * KIB, &[MIB]);
    let v = &r.tier.volumes()[0];
    // A write miss: the backing store has it, and GLRU admits the line from
    // the request's own bytes (no read of the backing store).
    v.write(0, &[1u8; 4096], false).unwrap();
    let mut b = vec![0u8; 4096];
    r.backing.read(0, &mut b).unwrap();
    assert_eq!(b, vec![1u8; 4096]);
    assert_eq!(backing_reads(&r), 0);
    // A write hit updates the copy; the backing store has it too.
    v.write(100, &[2u8; 50], false).unwrap();
    r.backing.read(0, &mut b).unwrap();
    assert_eq!(&b[100..150], &[2u8; 50]);
    let got = read(v, 0, 4096);
    assert_eq!(got, b, "the cached copy was updated");
    assert_eq!(backing_reads(&r), 0, "served from flash");
    let vs = &r.tier.stats().volumes[0];
    assert_eq!((vs.write_hits, vs.write_misses, vs.read_hits), (1, 1, 1));
    // A partial write of an uncached block fills it from the backing store
    // (after the write, so the copy is current).
    v.write(3 * 4096 + 10, b"abc", false).unwrap();
    assert_eq!(backing_reads(&r), 1);
    let got = read(v, 3 * 4096, 4096);
    assert_eq!(&got[10..13], b"abc");
    assert_eq!(backing_reads(&r), 1);
    r.tier.check();
}

#[test]
fn write_back_keeps_writes_in_flash_and_writes_evicted_runs_back_at_once() {
    let r = rig_with(
        PolicyKind::Glru,
        PolicyConfig::default(),
        64 * KIB,
        64 * KIB,
        &[MIB],
        WritePolicy::WriteBack,
    );
    let v = &r.tier.volumes()[0];
    let writes = |r: &Rig| r.backing_io.snapshot().writes;
    // 64 KiB written: all admitted, all dirty, nothing on the backing store.
    v.write(0, &[5u8; 65536], false).unwrap();
    assert_eq!(writes(&r), 0);
    let mut b = vec![0u8; 65536];
    r.backing.read(0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0));
    assert_eq!(read(v, 4096, 4096), vec![5u8; 4096]);
    // A 64 KiB read elsewhere evicts all 16 dirty lines while it is served:
    // they go back as one write when it is done, and its own misses are one
    // backing read.
    let reads0 = backing_reads(&r);
    assert_eq!(read(v, 512 * KIB, 65536), vec![0u8; 65536]);
    assert_eq!(writes(&r), 1);
    assert_eq!(backing_reads(&r) - reads0, 1);
    r.backing.read(0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 5));
    let vs = &r.tier.stats().volumes[0];
    assert_eq!(vs.written_back_lines, 16);
    assert_eq!(vs.ops.ops[cache::cost::DevOp::HddWrite as usize], 1);
    // A write hit dirties a line again; a flush writes it back and keeps
    // it cached.
    v.write(512 * KIB, &[9u8; 4096], false).unwrap();
    assert_eq!(writes(&r), 1);
    v.flush().unwrap();
    assert_eq!(writes(&r), 2);
    r.backing.read(512 * KIB, &mut b[..4096]).unwrap();
    assert_eq!(&b[..4096], &[9u8; 4096]);
    assert_eq!(read(v, 512 * KIB, 4096), vec![9u8; 4096]);
    assert_eq!(r.tier.stats().write_policy, WritePolicy::WriteBack);
    r.tier.check();
}

#[test]
fn unaligned_requests_span_blocks_and_volumes_stay_apart() {
    let r = glru(32 * KIB, &[256 * KIB, 128 * KIB]);
    let (a, b) = (&r.tier.volumes()[0], &r.tier.volumes()[1]);
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    a.write(4000, &data, false).unwrap();
    b.write(4000, &[9u8; 300], false).unwrap();
    assert_eq!(read(a, 4000, 10_000), data);
    assert_eq!(read(a, 4090, 20), data[90..110].to_vec());
    let got = read(b, 3990, 320);
    assert_eq!(&got[..10], &[0u8; 10]);
    assert_eq!(&got[10..310], &[9u8; 300]);
    assert_eq!(&got[310..], &[0u8; 10]);
    // Volume b starts right after a in the backing store.
    let mut raw = [0u8; 300];
    r.backing.read(256 * KIB + 4000, &mut raw).unwrap();
    assert_eq!(raw, [9u8; 300]);
    assert!(a.read(256 * KIB - 1, &mut [0u8; 2]).is_err());
    assert_eq!(a.size(), 256 * KIB);
    assert_eq!(b.name(), "v1");
    r.tier.check();
}

#[test]
fn evictions_free_slots_for_what_comes_next() {
    let r = glru(16 * KIB, &[MIB]);
    let v = &r.tier.volumes()[0];
    for blk in 0..40u64 {
        v.write(blk * 4096, &[blk as u8; 4096], false).unwrap();
        r.tier.check();
    }
    let s = r.tier.stats();
    assert_eq!(s.cached_bytes, 16 * KIB, "four slots, all in use");
    assert_eq!((s.lines_filled, s.lines_evicted), (40, 36));
    // The four most recent are cached; older ones come from the backing store.
    let before = backing_reads(&r);
    for blk in 36..40u64 {
        assert_eq!(read(v, blk * 4096, 4096), vec![blk as u8; 4096]);
    }
    assert_eq!(backing_reads(&r), before);
    assert_eq!(read(v, 0, 4096), vec![0u8; 4096]);
    assert_eq!(backing_reads(&r), before + 1);
    r.tier.check();
}

fn fast_epochs() -> PolicyConfig {
    PolicyConfig {
        epoch_secs: 1.0,
        ..PolicyConfig::default()
    }
}

#[test]
fn grem_migrates_at_epoch_ends_then_serves_hits_from_flash() {
    let r = rig(
        PolicyKind::Grem,
        fast_epochs(),
        4 * MIB,
        4 * MIB,
        &[8 * MIB, 8 * MIB],
    );
    let (a, b) = (&r.tier.volumes()[0], &r.tier.volumes()[1]);
    let pattern: Vec<u8> = (0..MIB).map(|i| (i * 7 % 253) as u8).collect();
    a.write(2 * MIB, &pattern, false).unwrap();
    b.write(0, &[3u8; 4096], false).unwrap();
    // Within the first epoch nothing is placed: every access misses.
    for _ in 0..3 {
        assert_eq!(read(a, 2 * MIB, MIB as usize), pattern);
    }
    let s = r.tier.stats();
    assert_eq!(s.cached_bytes, 0);
    assert_eq!(s.volumes[0].read_hits, 0);
    // The epoch ends at the next access: the bin is migrated in (read once
    // from the backing store), and from then on served from flash.
    r.clock.advance(SEC + MS);
    let before = backing_reads(&r);
    assert_eq!(read(a, 2 * MIB, MIB as usize), pattern);
    let s = r.tier.stats();
    assert!(s.cached_bytes >= MIB, "{s:?}");
    assert_eq!(s.volumes[0].read_hits, MIB / 4096);
    assert_eq!(s.long_term_zone_bytes, Some(2 * MIB));
    assert_eq!(s.short_term_zone_bytes, Some(2 * MIB));
    assert!(s.volumes[0].resident_bytes >= MIB);
    assert!(s.volumes[0].reserved_bytes.is_some());
    let after_migration = backing_reads(&r);
    assert!(after_migration > before);
    assert_eq!(read(a, 2 * MIB + 4096, 8192), pattern[4096..12288].to_vec());
    assert_eq!(backing_reads(&r), after_migration);
    // Write-through keeps the migrated copy current.
    a.write(2 * MIB + 10, b"fresh", false).unwrap();
    assert_eq!(&read(a, 2 * MIB, 20)[10..15], b"fresh");
    assert_eq!(backing_reads(&r), after_migration);
    r.tier.check();
}

#[test]
fn policy_changes_empty_the_cache_and_keep_the_counters() {
    let r = glru(MIB, &[2 * MIB, 2 * MIB]);
    let v = &r.tier.volumes()[0];
    v.write(0, &vec![4u8; 64 * 1024], false).unwrap();
    assert_eq!(r.tier.stats().cached_bytes, 64 * KIB);
    r.tier.set_policy(PolicyKind::Arc).unwrap();
    let s = r.tier.stats();
    assert_eq!(
        (s.policy, s.cached_bytes, s.policy_changes),
        (PolicyKind::Arc, 0, 1)
    );
    assert_eq!(s.volumes[0].write_misses, 16);
    r.tier.check();
    let before = backing_reads(&r);
    assert_eq!(read(v, 0, 4096), vec![4u8; 4096]);
    assert_eq!(backing_reads(&r), before + 1, "the new policy starts cold");
    for k in [
        PolicyKind::Car,
        PolicyKind::Vfrm,
        PolicyKind::Grem,
        PolicyKind::Dgrem,
    ] {
        r.tier.set_policy(k).unwrap();
        assert_eq!(read(v, 0, 8192), vec![4u8; 8192]);
        r.tier.check();
    }
    assert_eq!(r.tier.stats().line_bytes, 128 * KIB);
    // Too small for the coarse policies' bins: refused, nothing changes.
    r.tier.set_policy(PolicyKind::Glru).unwrap();
    r.tier.resize(128).unwrap();
    let e = r.tier.set_policy(PolicyKind::Grem).unwrap_err().to_string();
    assert!(e.contains("too small") && e.contains("1048576"), "{e}");
    assert_eq!(r.tier.stats().policy, PolicyKind::Glru);
}

#[test]
fn resizes_evict_at_once_and_stay_within_the_device() {
    let r = glru(MIB, &[4 * MIB]);
    let v = &r.tier.volumes()[0];
    for blk in 0..256u64 {
        v.write(blk * 4096, &[blk as u8; 4096], false).unwrap();
    }
    assert_eq!(r.tier.stats().cached_bytes, MIB);
    r.tier.resize(64).unwrap();
    let s = r.tier.stats();
    assert_eq!((s.cache_bytes, s.cached_bytes), (256 * KIB, 256 * KIB));
    r.tier.check();
    // The most recent 64 stayed.
    let before = backing_reads(&r);
    assert_eq!(read(v, 255 * 4096, 4096), vec![255u8; 4096]);
    assert_eq!(backing_reads(&r), before);
    r.tier.resize(256).unwrap();
    for blk in 0..256u64 {
        assert_eq!(read(v, blk * 4096, 4096), vec![blk as u8; 4096]);
    }
    assert_eq!(r.tier.stats().cached_bytes, MIB);
    r.tier.check();
    let e = r.tier.resize(257).unwrap_err().to_string();
    assert!(e.contains("more than its cache device holds"), "{e}");
    let e = r.tier.resize(0).unwrap_err().to_string();
    assert!(e.contains("positive multiple"), "{e}");
    assert_eq!(r.tier.max_cache_bytes(), MIB);
}

#[test]
fn trim_and_write_zeroes_drop_cached_copies() {
    let r = glru(MIB, &[MIB]);
    let v = &r.tier.volumes()[0];
    v.write(0, &[7u8; 16384], false).unwrap();
    v.trim(4096, 4096).unwrap();
    v.write_zeroes(8192 + 100, 100, false).unwrap();
    let got = read(v, 0, 16384);
    assert_eq!(&got[..4096], &[7u8; 4096]);
    assert_eq!(&got[4096..8192], &[0u8; 4096]);
    assert_eq!(&got[8192..8292], &[7u8; 100]);
    assert_eq!(&got[8292..8392], &[0u8; 100]);
    assert_eq!(&got[8392..], &[7u8; 16384 - 8392]);
    r.tier.check();
    v.flush().unwrap();
}

#[test]
fn setup_errors_name_the_problem() {
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
    let try_new = |cache_bytes: u64, device: u64, backing: u64, vols: Vec<VolumeSpec>| {
        CacheTier::new(
            TierSetup {
                name: "t0".into(),
                policy: PolicyKind::Grem,
                policy_config: PolicyConfig::default(),
                cache_bytes,
                volumes: vols,
                write_policy: WritePolicy::default(),
            },
            Arc::new(MemDev::new(backing)),
            Arc::new(MemDev::new(device)),
            clock.clone(),
        )
        .unwrap_err()
        .to_string()
    };
    let vol = |name: &str, size: u64| VolumeSpec {
        name: name.into(),
        size,
    };
    let e = try_new(
        4 * MIB,
        4 * MIB,
        2 * MIB,
        vec![vol("a", 2 * MIB), vol("b", MIB)],
    );
    assert!(e.contains("need 3145728 bytes") && e.contains("t0"), "{e}");
    let e = try_new(
        4 * MIB,
        4 * MIB,
        8 * MIB,
        vec![vol("a", MIB), vol("a", MIB)],
    );
    assert!(e.contains("\"a\" is listed twice"), "{e}");
    let e = try_new(4 * MIB, 4 * MIB, 8 * MIB, vec![vol("a", 1000)]);
    assert!(e.contains("multiple of 4096"), "{e}");
    let e = try_new(8 * MIB, 4 * MIB, 8 * MIB, vec![vol("a", MIB)]);
    assert!(e.contains("more than its cache device holds"), "{e}");
    let e = try_new(512 * KIB, 4 * MIB, 8 * MIB, vec![vol("a", MIB)]);
    assert!(e.contains("too small for grem"), "{e}");
    let e = try_new(4 * MIB, 4 * MIB, 8 * MIB, vec![]);
    assert!(e.contains("no volumes"), "{e}");
}

/// A real vSSD (FTL over the flash model) as the cache and a timed disk as
/// the backing store: completion times are those of the devices touched.
#[test]
fn completion_is_the_latest_device_operation() {
    use flash::{Backend, FlashDevice, Geometry, Timing};
    use ftl::{Extent, MemCheckpoints, Vssd, VssdConfig};
    let geo = Geometry {
        channels: 2,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 16,
        pages_per_block: 64,
        page_size: 4096,
    };
    let clock = Arc::new(VirtualClock::new(0));
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, geo, Timing::default()).unwrap());
    let vssd = Vssd::create(
        dev,
        VssdConfig {
            id: 1,
            name: "t.cache".into(),
            extents: vec![Extent::whole_channel(&geo, 0)],
            capacity_bytes: 4 * MIB,
            gc: Default::default(),
            lent: Vec::new(),
        },
        clock.clone(),
        Arc::new(MemCheckpoints::default()),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hdd = HddModel::default();
    let backing =
        FileStore::open(&dir.path().join("b"), 64 * MIB, Some(hdd), clock.clone()).unwrap();
    let tier = CacheTier::new(
        TierSetup {
            name: "t".into(),
            policy: PolicyKind::Glru,
            policy_config: PolicyConfig::default(),
            cache_bytes: 4 * MIB,
            volumes: vec![VolumeSpec {
                name: "v".into(),
                size: 64 * MIB,
            }],
            write_policy: WritePolicy::default(),
        },
        Arc::new(backing),
        vssd,
        clock.clone(),
    )
    .unwrap();
    let v = &tier.volumes()[0];
    let mut buf = vec![0u8; 4096];
    // A random miss pays a seek and half a revolution (and the fill's program).
    clock.set(SEC);
    let t = v.read(40 * MIB, &mut buf).unwrap() - SEC;
    assert!(t > 4 * MS && t < 30 * MS, "miss took {t} ns");
    // A hit is a flash read: tens of microseconds.
    clock.set(2 * SEC);
    let t = v.read(40 * MIB, &mut buf).unwrap() - 2 * SEC;
    assert!((40 * US..MS).contains(&t), "hit took {t} ns");
    // A write goes through to the disk: at least its transfer, after a seek.
    clock.set(3 * SEC);
    let t = v.write(MIB, &buf, false).unwrap() - 3 * SEC;
    assert!(t > 4 * MS, "write took {t} ns");
    tier.check();
}

// ---- property test: the tier against a plain model ----

#[derive(Debug, Clone)]
enum Op {
    Read {
        vol: usize,
        off: u64,
        len: u64,
    },
    Write {
        vol: usize,
        off: u64,
        len: u64,
        seed: u8,
    },
    Trim {
        vol: usize,
        off: u64,
        len: u64,
    },
    Zero {
        vol: usize,
        off: u64,
        len: u64,
    },
    Policy(PolicyKind),
    Resize(u64),
    Wait(u64),
}

/// Volume sizes: not multiples of lines or bins, so lines cross volume ends.
const VOLS: [u64; 3] = [1536 * KIB, 2 * MIB + 12 * KIB, 768 * KIB];
/// Cache device: 640 slots.
const DEVICE: u64 = 2560 * KIB;

fn op() -> impl Strategy<Value = Op> {
    let at = || {
        (0..3usize, 0u64..1 << 21, 1u64..40_000).prop_map(|(vol, off, len)| {
            let size = VOLS[vol];
            let off = off % size;
            (vol, off, len.min(size - off))
        })
    };
    prop_oneof![
        6 => at().prop_map(|(vol, off, len)| Op::Read { vol, off, len }),
        // Favour a few hot places so that there are hits to get wrong.
        4 => (0..3usize, 0u64..24, 1u64..3).prop_map(|(vol, blk, n)| Op::Read {
            vol,
            off: blk * 4096,
            len: n * 4096
        }),
        5 => (at(), any::<u8>()).prop_map(|((vol, off, len), seed)| Op::Write { vol, off, len, seed }),
        3 => (0..3usize, 0u64..24, any::<u8>()).prop_map(|(vol, blk, seed)| Op::Write {
            vol,
            off: blk * 4096,
            len: 4096,
            seed
        }),
        1 => at().prop_map(|(vol, off, len)| Op::Trim { vol, off, len }),
        1 => at().prop_map(|(vol, off, len)| Op::Zero { vol, off, len }),
        1 => proptest::sample::select(PolicyKind::ALL.to_vec()).prop_map(Op::Policy),
        1 => (1u64..=640).prop_map(Op::Resize),
        2 => (0u64..30).prop_map(|ms| Op::Wait(ms * MS)),
    ]
}

fn small_bins() -> PolicyConfig {
    PolicyConfig {
        coarse_line_bytes: 16 * KIB,
        bin_bytes: 64 * KIB,
        epoch_secs: 0.01,
        ..PolicyConfig::default()
    }
}

fn bytes(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i * 31 % 251) as u8))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn reads_return_the_last_write_through_policy_changes_and_resizes(
        start in proptest::sample::select(PolicyKind::ALL.to_vec()),
        write_policy in proptest::sample::select(WritePolicy::ALL.to_vec()),
        coarse_default in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let cfg = if coarse_default {
            PolicyConfig { epoch_secs: 0.01, ..PolicyConfig::default() }
        } else {
            small_bins()
        };
        let r = rig_with(start, cfg, 2 * MIB, DEVICE, &VOLS, write_policy);
        let mut model: Vec<Vec<u8>> = VOLS.iter().map(|&s| vec![0u8; s as usize]).collect();
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Read { vol, off, len } => {
                    let got = read(&r.tier.volumes()[vol], off, len as usize);
                    let want = &model[vol][off as usize..(off + len) as usize];
                    prop_assert!(got == want, "read {:?} differs from the model", (vol, off, len));
                }
                Op::Write { vol, off, len, seed } => {
                    let d = bytes(seed, len);
                    r.tier.volumes()[vol].write(off, &d, false).unwrap();
                    model[vol][off as usize..(off + len) as usize].copy_from_slice(&d);
                }
                Op::Trim { vol, off, len } => {
                    r.tier.volumes()[vol].trim(off, len).unwrap();
                    model[vol][off as usize..(off + len) as usize].fill(0);
                }
                Op::Zero { vol, off, len } => {
                    r.tier.volumes()[vol].write_zeroes(off, len, false).unwrap();
                    model[vol][off as usize..(off + len) as usize].fill(0);
                }
                // Sizes or policies a policy cannot take are refused and
                // change nothing; the data must not care either way.
                Op::Policy(k) => { let _ = r.tier.set_policy(k); }
                Op::Resize(lines) => { let _ = r.tier.resize(lines); }
                Op::Wait(ns) => { r.clock.advance(ns); }
            }
            // The slot accounting every time, the cached bytes now and then.
            r.tier.check_with(i % 4 == 0);
        }
        for (vol, want) in model.iter().enumerate() {
            let got = read(&r.tier.volumes()[vol], 0, want.len());
            prop_assert!(&got == want, "volume {} differs at the end", vol);
        }
        r.tier.check();
        // After a flush the backing store holds every byte, whatever the
        // write policy (write-back writes its dirty lines back).
        r.tier.volumes()[0].flush().unwrap();
        let mut base = 0u64;
        for want in &model {
            let mut got = vec![0u8; want.len()];
            r.backing.read(base, &mut got).unwrap();
            prop_assert!(&got == want, "the backing store differs after a flush");
            base += want.len() as u64;
        }
    }
}
