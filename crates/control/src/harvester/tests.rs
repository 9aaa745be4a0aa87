//! The harvester on small memory- and file-backed devices and a virtual clock:
//! every case of the paper's Table 1, the reclaim paths, security, restarts and
//! bad requests.

use std::sync::Arc;

use blockdev::BlockDev;
use clock::{Clock, VirtualClock, SEC};
use ftl::MemCheckpoints;
use nbd::ExportRegistry;

use super::*;
use crate::{ByteSize, Config, ControlStore, ErrorKind, HostManager, VssdSpec};

/// 8 channels × 2 dies × 1 plane × 32 blocks × 32 pages × 4 KiB = 64 MiB; a
/// chunk is 8 blocks (1/64 of 512), a channel 64 blocks (8 MiB raw).
fn config_text(data_dir: &str, backend: &str, harvest: &str) -> String {
    format!(
        r#"
        data_dir = "{data_dir}"
        [[devices]]
        name = "ssd0"
        backend = "{backend}"
        [devices.geometry]
        channels = 8
        dies_per_channel = 2
        blocks_per_plane = 32
        pages_per_block = 32
        [harvest]
        enabled = true
        policy = "fixed"
        granule_s = 60
        refresh_s = 30
        reclaim_horizon_s = 60
        lend_for_s = 600
        eviction_grace_s = 120
        migrate_chunk_bytes = 65536
        {harvest}
        "#
    )
}

struct H {
    m: HostManager,
    clock: Arc<VirtualClock>,
}

fn mem(harvest: &str) -> H {
    mem_text(&config_text("/nonexistent", "memory", harvest))
}

fn mem_text(text: &str) -> H {
    let clock = Arc::new(VirtualClock::new(0));
    let cfg = Config::from_toml(text).unwrap();
    let m = HostManager::open_with(
        &cfg,
        clock.clone(),
        ControlStore::memory().unwrap(),
        Arc::new(MemCheckpoints::default()),
    )
    .unwrap();
    H { m, clock }
}

fn vssd(m: &HostManager, name: &str, ch: &[u32], role: crate::config::TenantRole) {
    m.create_vssd(&VssdSpec {
        name: name.into(),
        channel_ids: Some(ch.to_vec()),
        role,
        ..Default::default()
    })
    .unwrap();
}

fn regular(m: &HostManager, name: &str, ch: &[u32]) {
    vssd(m, name, ch, crate::config::TenantRole::Regular)
}

fn harvester(m: &HostManager, name: &str, ch: &[u32]) {
    vssd(m, name, ch, crate::config::TenantRole::Harvest)
}

fn req(name: &str, tenant: &str, mib: u64, bw: u32, secs: u64) -> HarvestRequest {
    HarvestRequest {
        name: name.into(),
        tenant: tenant.into(),
        capacity: ByteSize(mib << 20),
        bandwidth: bw,
        duration_s: Some(secs),
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = rng::SplitMix64::new(seed);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

fn export(m: &HostManager, name: &str) -> Arc<dyn BlockDev> {
    m.lookup(name).expect("exported").dev
}

fn write_all(dev: &dyn BlockDev, seed: u64) {
    let chunk = 64 << 10;
    let mut off = 0;
    while off < dev.size() {
        let n = chunk.min(dev.size() - off) as usize;
        dev.write(off, &pattern(seed + off, n), false).unwrap();
        off += n as u64;
    }
    dev.flush().unwrap();
}

fn check_all(dev: &dyn BlockDev, seed: u64) {
    let chunk = 64 << 10;
    let mut off = 0;
    let mut buf = vec![0u8; chunk as usize];
    while off < dev.size() {
        let n = chunk.min(dev.size() - off) as usize;
        dev.read(off, &mut buf[..n]).unwrap();
        assert!(
            buf[..n] == pattern(seed + off, n)[..],
            "wrong data at {off}"
        );
        off += n as u64;
    }
}

fn kinds(m: &HostManager) -> Vec<HarvestEventKind> {
    m.harvest_events(0).into_iter().map(|e| e.kind).collect()
}

/// Drives ticks (on the virtual clock) until no migration is in flight.
fn settle(h: &H) {
    for _ in 0..10_000 {
        h.m.harvest_tick().unwrap();
        if h.m.harvest_status().migrations == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("migrations did not finish");
}

#[test]
fn unsold_channels_and_idle_free_blocks_become_gssds() {
    let h = mem("");
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    h.m.harvest_tick().unwrap();
    let g = h.m.gssds();
    // Channels 4-7 are unsold: one gSSD of 4 channels; "reg" is idle and lends.
    let unsold: Vec<_> = g.iter().filter(|g| g.home.is_none()).collect();
    assert_eq!(unsold.len(), 1, "{g:?}");
    assert_eq!(unsold[0].channels, vec![4, 5, 6, 7]);
    assert_eq!(unsold[0].capacity_blocks, 4 * 64);
    let lent: Vec<_> = g
        .iter()
        .filter(|g| g.home.as_deref() == Some("reg"))
        .collect();
    assert_eq!(lent.len(), 1, "a home lends at most one gSSD: {g:?}");
    assert_eq!(lent[0].channels, vec![0, 1]);
    assert!(lent[0].capacity_blocks > 0 && lent[0].capacity_blocks % 8 == 0);
    // The home never shares a block with its gSSD.
    let home = h.m.vssd("reg").unwrap();
    assert_eq!(home.lent().len(), 2);
    // Harvest tenants' vSSDs lend nothing; gSSDs are hidden from `vssd list`
    // and from NBD.
    assert!(g.iter().all(|g| g.home.as_deref() != Some("hv")));
    assert!(h.m.list().iter().all(|v| !v.name.starts_with("gssd-")));
    assert!(h.m.lookup(&g[0].vssd).is_none());
    // A second tick creates nothing new.
    h.m.harvest_tick().unwrap();
    assert_eq!(h.m.gssds().len(), 2);
    assert_eq!(kinds(&h.m), vec![HarvestEventKind::Created; 2]);
    let s = h.m.harvest_status();
    assert_eq!((s.gssds, s.unsold_channels), (2, 4));
}

#[test]
fn a_harvest_volume_belongs_to_its_harvest_tenants_owner() {
    let h = mem("");
    regular(&h.m, "reg", &[0, 1]);
    h.m.create_vssd(&VssdSpec {
        name: "hv".into(),
        channel_ids: Some(vec![2, 3]),
        role: crate::config::TenantRole::Harvest,
        tenant: Some("carol".into()),
        ..Default::default()
    })
    .unwrap();
    h.m.harvest_tick().unwrap();
    h.m.harvest_volume_create(&req("v1", "hv", 1, 1, 120))
        .unwrap();
    assert_eq!(h.m.lookup("v1").unwrap().owner.as_deref(), Some("carol"));
    assert_eq!(h.m.lookup("reg").unwrap().owner, None);
}

#[test]
fn a_volume_is_served_by_best_fit_and_released_erased() {
    let h = mem("");
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    h.m.harvest_tick().unwrap();
    let small =
        h.m.gssds()
            .into_iter()
            .min_by_key(|g| g.capacity_blocks)
            .unwrap();
    // A demand the smaller gSSD covers goes there (best fit), not to the unsold one.
    let mib = (small.capacity_bytes >> 20).max(1);
    let v =
        h.m.harvest_volume_create(&req("v1", "hv", mib, 1, 120))
            .unwrap();
    assert_eq!(v.segments.len(), 1);
    assert_eq!(v.segments[0].gssd, small.id);
    let dev = export(&h.m, "v1");
    write_all(&*dev, 1);
    check_all(&*dev, 1);
    let g = h.m.gssds().into_iter().find(|g| g.id == small.id).unwrap();
    assert_eq!(
        (g.in_use, g.volume.as_deref(), g.tenant.as_deref()),
        (true, Some("v1"), Some("hv"))
    );
    // Job end long before expiry: the gSSD is erased and goes back to the pool.
    h.m.harvest_volume_release("v1").unwrap();
    assert!(h.m.lookup("v1").is_none());
    let g = h.m.gssds().into_iter().find(|g| g.id == small.id).unwrap();
    assert_eq!(g.state, "pool");
    assert!(kinds(&h.m).contains(&HarvestEventKind::Pooled));
    // The next tenant on it reads zeros only.
    h.m.harvest_volume_create(&req("v2", "hv", mib, 1, 120))
        .unwrap();
    let dev = export(&h.m, "v2");
    let mut buf = vec![0xAAu8; dev.size() as usize];
    dev.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "a new tenant saw old data");
    // Released close to its expiry: erased and returned home instead.
    h.clock.advance(600 * SEC - 30 * SEC);
    h.m.harvest_volume_release("v2").unwrap();
    assert!(h.m.gssds().iter().all(|g| g.id != small.id));
    assert!(h.m.vssd("reg").unwrap().lent().is_empty());
}

#[test]
fn under_harvest_attaches_several_gssds_or_raises_an_exception() {
    let h = mem("");
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    h.m.harvest_tick().unwrap();
    let total: u64 = h.m.gssds().iter().map(|g| g.capacity_bytes).sum();
    let biggest = h.m.gssds().iter().map(|g| g.capacity_bytes).max().unwrap();
    // More than any one gSSD, less than all: two gSSDs back one volume.
    let want = (biggest >> 20) + 1;
    assert!(want << 20 <= total);
    let v =
        h.m.harvest_volume_create(&req("big", "hv", want, 1, 120))
            .unwrap();
    assert_eq!(v.segments.len(), 2, "{v:?}");
    let dev = export(&h.m, "big");
    write_all(&*dev, 7);
    check_all(&*dev, 7);
    // Nothing left: an exception, and nothing half-taken.
    let before = h.m.gssds();
    let e =
        h.m.harvest_volume_create(&req("more", "hv", 1, 1, 120))
            .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace, "{e}");
    assert!(e.to_string().contains("cannot harvest"), "{e}");
    assert_eq!(h.m.gssds(), before);
    assert!(h.m.lookup("more").is_none());
    assert_eq!(kinds(&h.m).last(), Some(&HarvestEventKind::Exception));
    // Too long a demand is an exception as well (nothing lasts 2 hours).
    h.m.harvest_volume_release("big").unwrap();
    let e =
        h.m.harvest_volume_create(&req("long", "hv", 1, 1, 7200))
            .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace);
}

/// Fills the home until its FTL wants its lent blocks back.
fn fill_home(h: &H, name: &str) {
    let dev = h.m.export_dev(name).unwrap();
    let home = h.m.vssd(name).unwrap();
    let chunk = 256 << 10;
    let mut off = 0;
    while !home.needs_reclaim() {
        assert!(
            off < dev.size(),
            "the home filled up without asking for its blocks"
        );
        dev.write(off, &pattern(99 + off, chunk), false).unwrap();
        off += chunk as u64;
    }
}

#[test]
fn early_reclamation_migrates_the_data_online() {
    let h = mem("");
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    h.m.harvest_tick().unwrap();
    let lent = h.m.gssds().into_iter().find(|g| g.home.is_some()).unwrap();
    let mib = (lent.capacity_bytes >> 20).max(1);
    let v =
        h.m.harvest_volume_create(&req("v", "hv", mib, 1, 300))
            .unwrap();
    assert_eq!(v.segments[0].gssd, lent.id);
    let dev = export(&h.m, "v");
    write_all(&*dev, 3);
    // The regular tenant's usage grows: its blocks must come back.
    fill_home(&h, "reg");
    h.m.harvest_tick().unwrap();
    assert!(kinds(&h.m).contains(&HarvestEventKind::MigrationStarted));
    // The tenant keeps working during the copy.
    dev.write(0, &pattern(3, 65536), false).unwrap();
    settle(&h);
    let k = kinds(&h.m);
    assert!(k.contains(&HarvestEventKind::Migrated), "{k:?}");
    assert!(k.contains(&HarvestEventKind::Reclaimed), "{k:?}");
    let v = h.m.harvest_volume("v").unwrap();
    assert_ne!(v.segments[0].gssd, lent.id);
    assert_eq!(v.state, "active");
    check_all(&*dev, 3);
    // The home has its blocks back, and never sees the tenant's data.
    assert!(h.m.vssd("reg").unwrap().lent().is_empty());
    assert!(h.m.gssds().iter().all(|g| g.id != lent.id));
}

#[test]
fn a_paced_migration_copies_at_migrate_rate_on_the_daemons_clock() {
    // 64 KiB chunks at 64 KiB/s: one chunk per second of the (virtual) clock.
    let h = mem(r#"migrate_rate = "64K""#);
    let chunk = 65536;
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    h.m.harvest_tick().unwrap();
    let lent = h.m.gssds().into_iter().find(|g| g.home.is_some()).unwrap();
    let v =
        h.m.harvest_volume_create(&req("v", "hv", 1, 1, 300))
            .unwrap();
    assert_eq!(v.segments[0].gssd, lent.id);
    let dev = export(&h.m, "v");
    write_all(&*dev, 8);
    fill_home(&h, "reg");
    let t0 = h.clock.now();
    h.m.harvest_tick().unwrap();
    assert!(kinds(&h.m).contains(&HarvestEventKind::MigrationStarted));
    let copied = || {
        h.m.harvest_volume("v")
            .unwrap()
            .migrations
            .first()
            .map(|m| {
                assert_eq!((m.from, m.total), (lent.id, 1 << 20));
                m.copied
            })
    };
    let wait_for = |bytes: u64| {
        for _ in 0..5000 {
            if copied() == Some(bytes) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        panic!("the copy never reached {bytes} bytes: {:?}", copied());
    };
    // The first chunk goes at once; the next waits for the clock, however
    // long the copier's thread runs meanwhile.
    wait_for(chunk);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(copied(), Some(chunk), "copied ahead of the daemon's clock");
    h.clock.advance(SEC);
    wait_for(2 * chunk);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(copied(), Some(2 * chunk), "one chunk per second");
    // The tenant keeps working during the paced copy.
    dev.write(0, &pattern(8, 65536), false).unwrap();
    for n in 3..=16 {
        h.clock.advance(SEC);
        wait_for(n * chunk);
        h.m.harvest_tick().unwrap();
    }
    settle(&h);
    // 16 chunks, one per second: 15 seconds from the first to the last.
    assert_eq!(h.clock.now() - t0, 15 * SEC);
    let k = kinds(&h.m);
    assert!(k.contains(&HarvestEventKind::Migrated), "{k:?}");
    assert_ne!(h.m.harvest_volume("v").unwrap().segments[0].gssd, lent.id);
    check_all(&*dev, 8);
}

#[test]
fn releasing_a_volume_stops_its_paced_migration_at_once() {
    // 1 MiB chunks at 64 KiB/s on a clock that stands still: after its first
    // chunk the copier waits for 16 s of that clock, that is for ever, unless
    // the release wakes it.
    let text = config_text("/nonexistent", "memory", r#"migrate_rate = "64K""#).replace(
        "migrate_chunk_bytes = 65536",
        "migrate_chunk_bytes = 1048576",
    );
    let h = mem_text(&text);
    let chunk = 1 << 20;
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    h.m.harvest_tick().unwrap();
    let v =
        h.m.harvest_volume_create(&req("v", "hv", 2, 1, 300))
            .unwrap();
    assert_eq!(v.segments.len(), 1, "{v:?}");
    fill_home(&h, "reg");
    h.m.harvest_tick().unwrap();
    let copied = |m: &crate::HostManager| {
        m.harvest_volume("v")
            .unwrap()
            .migrations
            .first()
            .map(|m| m.copied)
    };
    for _ in 0..5000 {
        if copied(&h.m) == Some(chunk) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(copied(&h.m), Some(chunk), "the first chunk, then the wait");
    // Released on another thread, so that a release that waits for the clock
    // fails the test instead of hanging it.
    let m = Arc::new(h.m);
    let (tx, rx) = std::sync::mpsc::channel();
    let m2 = m.clone();
    std::thread::spawn(move || tx.send(m2.harvest_volume_release("v")));
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the release waited for the paced copy")
        .unwrap();
    assert!(m.harvest_volume("v").is_err());
    assert_eq!(m.harvest_status().migrations, 0);
    let k = kinds(&m);
    assert!(!k.contains(&HarvestEventKind::Migrated), "{k:?}");
}

#[test]
fn early_reclamation_with_nowhere_to_go_evicts_with_a_deadline() {
    let h = mem("unsold = false");
    regular(&h.m, "reg", &[0, 1, 2, 3, 4, 5]);
    harvester(&h.m, "hv", &[6, 7]);
    h.m.harvest_tick().unwrap();
    assert_eq!(h.m.gssds().len(), 1);
    let g = h.m.gssds().remove(0);
    let mib = (g.capacity_bytes >> 20).max(1);
    h.m.harvest_volume_create(&req("v", "hv", mib, 1, 300))
        .unwrap();
    let dev = export(&h.m, "v");
    write_all(&*dev, 5);
    fill_home(&h, "reg");
    h.m.harvest_tick().unwrap();
    let v = h.m.harvest_volume("v").unwrap();
    assert_eq!(v.state, "evicting");
    assert_eq!(v.evict_by_s, Some(120));
    assert_eq!(kinds(&h.m).last(), Some(&HarvestEventKind::Evicted));
    // Until the deadline the data is all there.
    h.clock.advance(100 * SEC);
    h.m.harvest_tick().unwrap();
    check_all(&*dev, 5);
    // After it, the range is gone: I/O fails (EIO), nothing reads as zeros
    // that the tenant did not write, block status does not call it zero,
    // and the home has its blocks back.
    h.clock.advance(30 * SEC);
    h.m.harvest_tick().unwrap();
    assert!(kinds(&h.m).contains(&HarvestEventKind::EvictionDone));
    let mut buf = vec![0u8; 4096];
    assert_eq!(dev.read(0, &mut buf).unwrap_err().errno(), 5);
    assert_eq!(dev.write(0, &buf, false).unwrap_err().errno(), 5);
    assert!(dev
        .allocation(0, 4096)
        .unwrap()
        .iter()
        .all(|e| e.alloc == blockdev::Alloc::Data));
    let v = h.m.harvest_volume("v").unwrap();
    assert_eq!((v.state.as_str(), v.evict_by_s), ("degraded", None));
    assert_eq!(v.lost.len(), 1);
    assert_eq!(v.lost[0].offset, 0);
    assert!(v.segments.is_empty());
    assert!(h.m.vssd("reg").unwrap().lent().is_empty());
    h.m.harvest_volume_release("v").unwrap();
}

/// Runs `f` with the host's reclaim thread serving pressure signals.
fn with_reclaim_thread(h: &H, f: impl FnOnce()) {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            h.m.serve_pressure(|| stop.load(std::sync::atomic::Ordering::Relaxed))
        });
        // The thread installs the hooks first thing.
        std::thread::sleep(std::time::Duration::from_millis(50));
        f();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

/// A home that writes its whole capacity between two periods, with blocks
/// lent, gets them back from its write path (no period runs here) and loses
/// nothing; without the reclaim thread the same fill runs out of room.
#[test]
fn a_home_filling_up_between_periods_gets_its_blocks_back_in_time() {
    let h = mem("unsold = false");
    regular(&h.m, "reg", &[0, 1, 2, 3, 4, 5]);
    h.m.harvest_tick().unwrap();
    assert!(!h.m.vssd("reg").unwrap().lent().is_empty());
    let dev = export(&h.m, "reg");
    let fill = |seed| {
        let chunk = 64 << 10; // as check_all reads it
        let mut off = 0;
        while off < dev.size() {
            dev.write(off, &pattern(seed + off, chunk), false)?;
            off += chunk as u64;
        }
        Ok::<(), blockdev::IoError>(())
    };
    assert!(
        matches!(fill(7), Err(blockdev::IoError::NoSpace(_))),
        "the fill must need the lent blocks"
    );
    with_reclaim_thread(&h, || fill(8).unwrap());
    check_all(&*dev, 8);
    assert!(h.m.vssd("reg").unwrap().lent().is_empty());
    assert!(kinds(&h.m).contains(&HarvestEventKind::Reclaimed));
}

/// A home whose write has no room left comes before its harvest tenant's
/// notice: the eviction falls due at once, the range is detached, and the
/// home's fill completes.
#[test]
fn a_home_out_of_room_cuts_its_harvest_tenants_notice_short() {
    let h = mem("unsold = false");
    regular(&h.m, "reg", &[0, 1, 2, 3, 4, 5]);
    harvester(&h.m, "hv", &[6, 7]);
    h.m.harvest_tick().unwrap();
    let g = h.m.gssds().remove(0);
    let mib = (g.capacity_bytes >> 20).max(1);
    h.m.harvest_volume_create(&req("v", "hv", mib, 1, 300))
        .unwrap();
    let vol = export(&h.m, "v");
    write_all(&*vol, 5);
    let dev = export(&h.m, "reg");
    with_reclaim_thread(&h, || write_all(&*dev, 9));
    check_all(&*dev, 9);
    let events = h.m.harvest_events(0);
    assert!(
        events
            .iter()
            .any(|e| e.kind == HarvestEventKind::Evicted && e.detail.contains("notice ends now")),
        "{events:?}"
    );
    assert!(kinds(&h.m).contains(&HarvestEventKind::EvictionDone));
    assert!(h.m.vssd("reg").unwrap().lent().is_empty());
    // The harvest tenant's range is gone: I/O there fails, nothing is wrong.
    assert!(vol.write(0, &[0u8; 4096], false).is_err());
    h.m.harvest_volume_release("v").unwrap();
}

#[test]
fn a_regular_vssd_gets_unsold_channels_back() {
    let h = mem("");
    harvester(&h.m, "hv", &[0, 1]);
    h.m.harvest_tick().unwrap();
    // Channels 2-7 unsold: gSSDs of channels 2-5 and 6-7.
    let g = h.m.gssds();
    assert_eq!(g.len(), 2, "{g:?}");
    let four = g.iter().find(|g| g.bandwidth == 4).unwrap().clone();
    let two = g.iter().find(|g| g.bandwidth == 2).unwrap().clone();
    let mib = (two.capacity_bytes >> 20).max(1);
    // The tenant's data sits on the 4-channel gSSD (best fit for 3 channels).
    let v =
        h.m.harvest_volume_create(&req("v", "hv", mib, 3, 120))
            .unwrap();
    assert_eq!(v.segments[0].gssd, four.id);
    let dev = export(&h.m, "v");
    write_all(&*dev, 11);
    // A regular tenant buys 6 channels: the free gSSD goes at once, the used one
    // migrates... to nowhere big enough for 3 channels, so it is evicted and the
    // purchase waits for the deadline.
    let e =
        h.m.create_vssd(&VssdSpec {
            name: "buyer".into(),
            channels: Some(6),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert!(e.to_string().contains("move off by"), "{e}");
    check_all(&*dev, 11);
    // A smaller purchase (2 channels) is served from the free gSSD's channels.
    h.m.create_vssd(&VssdSpec {
        name: "small".into(),
        channels: Some(2),
        ..Default::default()
    })
    .unwrap();
    check_all(&*dev, 11);
}

/// Early reclamation asks for a replacement of what the tenant uses, not of
/// the gSSD best fit gave it: a 1 MiB volume on a 4-channel gSSD moves to a
/// free 2-channel one when a regular tenant buys the four channels (asking for
/// the whole 4-channel gSSD found nothing and evicted it).
#[test]
fn a_replacement_only_has_to_hold_what_the_tenant_uses() {
    let h = mem("");
    harvester(&h.m, "hv", &[0, 1]);
    h.m.harvest_tick().unwrap();
    let g = h.m.gssds();
    let four = g.iter().find(|g| g.bandwidth == 4).unwrap().clone();
    let two = g.iter().find(|g| g.bandwidth == 2).unwrap().clone();
    // The 2-channel gSSD is busy when the small volume arrives, so best fit
    // puts it on the 4-channel one.
    let w =
        h.m.harvest_volume_create(&req("w", "hv", (two.capacity_bytes >> 20).max(1), 2, 300))
            .unwrap();
    assert_eq!(w.segments[0].gssd, two.id);
    let v =
        h.m.harvest_volume_create(&req("v", "hv", 1, 1, 300))
            .unwrap();
    assert_eq!(v.segments[0].gssd, four.id);
    let dev = export(&h.m, "v");
    write_all(&*dev, 21);
    h.m.harvest_volume_release("w").unwrap();
    h.m.harvest_tick().unwrap();
    let free =
        h.m.gssds()
            .into_iter()
            .find(|g| g.bandwidth == 2 && g.volume.is_none())
            .expect("a free 2-channel gSSD again");
    assert!(free.capacity_bytes < four.capacity_bytes);
    // A regular tenant buys channels 2-5.
    let _ = h.m.create_vssd(&VssdSpec {
        name: "buyer".into(),
        channel_ids: Some(vec![2, 3, 4, 5]),
        ..Default::default()
    });
    let k = kinds(&h.m);
    assert!(k.contains(&HarvestEventKind::MigrationStarted), "{k:?}");
    assert!(!k.contains(&HarvestEventKind::Evicted), "{k:?}");
    settle(&h);
    let v = h.m.harvest_volume("v").unwrap();
    assert_eq!(v.state, "active");
    assert_eq!(v.segments[0].gssd, free.id);
    check_all(&*dev, 21);
    // With the four channels free, the purchase goes through.
    if h.m.vssd("buyer").is_none() {
        h.m.create_vssd(&VssdSpec {
            name: "buyer".into(),
            channel_ids: Some(vec![2, 3, 4, 5]),
            ..Default::default()
        })
        .unwrap();
    }
    check_all(&*dev, 21);
}

#[test]
fn bad_requests_are_refused_and_take_nothing() {
    let h = mem("");
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    h.m.harvest_tick().unwrap();
    let before = h.m.gssds();
    for (r, kind, text) in [
        (req("x", "nobody", 1, 1, 60), ErrorKind::NotFound, "nobody"),
        (
            req("x", "reg", 1, 1, 60),
            ErrorKind::BadRequest,
            "not a harvest tenant",
        ),
        (req("x", "hv", 0, 1, 60), ErrorKind::BadRequest, "capacity"),
        (req("x", "hv", 1, 0, 60), ErrorKind::BadRequest, "channel"),
        (
            req("bad name", "hv", 1, 1, 60),
            ErrorKind::BadRequest,
            "invalid",
        ),
        (req("reg", "hv", 1, 1, 60), ErrorKind::Conflict, "reg"),
        (req("x", "hv", 1, 1, 0), ErrorKind::BadRequest, "duration"),
    ] {
        let e = h.m.harvest_volume_create(&r).unwrap_err();
        assert_eq!(e.kind(), kind, "{r:?}: {e}");
        assert!(e.to_string().contains(text), "{r:?}: {e}");
    }
    assert_eq!(h.m.gssds(), before);
    let e = h.m.harvest_volume_release("nope").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    // gSSD names are reserved, gSSDs cannot be deleted as vSSDs.
    let e =
        h.m.create_vssd(&VssdSpec {
            name: "gssd-77".into(),
            channels: Some(1),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadRequest);
    let e = h.m.delete_vssd(&before[0].vssd).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadRequest);
    // Bad settings are refused at start, naming the field.
    for (text, field) in [
        ("tick_ms = 0", "tick_ms"),
        ("lend_fraction = 1.5", "lend_fraction"),
        ("lend_for_s = 10", "lend_for_s"),
        ("migrate_chunk_bytes = 1000", "migrate_chunk_bytes"),
        ("migrate_rate = 64", "migrate_rate"),
        ("migrate_rate = \"lots\"", "migrate_rate"),
        ("migrate_rate = -1", "migrate_rate"),
        ("migrate_rate = 1.5", "migrate_rate"),
        ("bogus = 1", "bogus"),
    ] {
        let e = Config::from_toml(&config_text("/nonexistent", "memory", text))
            .and_then(|c| c.validate().map(|_| c))
            .unwrap_err();
        assert!(e.to_string().contains(field), "{text}: {e}");
    }
}

#[test]
fn deleting_a_home_takes_its_gssd_back_first() {
    let h = mem("unsold = false");
    regular(&h.m, "a", &[0, 1]);
    regular(&h.m, "b", &[2, 3]);
    harvester(&h.m, "hv", &[4, 5]);
    h.m.harvest_tick().unwrap();
    let ga =
        h.m.gssds()
            .into_iter()
            .find(|g| g.home.as_deref() == Some("a"))
            .unwrap();
    let mib = (ga.capacity_bytes >> 20).max(1);
    let v =
        h.m.harvest_volume_create(&req("v", "hv", mib, 1, 120))
            .unwrap();
    let on = v.segments[0].gssd;
    let dev = export(&h.m, "v");
    write_all(&*dev, 21);
    let home =
        h.m.gssds()
            .into_iter()
            .find(|g| g.id == on)
            .unwrap()
            .home
            .unwrap();
    // Deleting the home migrates the volume to the other home's gSSD first.
    h.m.delete_vssd(&home).unwrap();
    let v = h.m.harvest_volume("v").unwrap();
    assert_ne!(v.segments[0].gssd, on);
    check_all(&*dev, 21);
    // A harvest tenant with volumes cannot go before them.
    let e = h.m.delete_vssd("hv").unwrap_err();
    assert!(e.to_string().contains("release its harvest volumes"), "{e}");
}

#[test]
fn volumes_and_gssds_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::from_toml(&config_text(dir.path().to_str().unwrap(), "file", "")).unwrap();
    let clock = Arc::new(VirtualClock::new(0));
    let gid;
    {
        let m = HostManager::open(&cfg, clock.clone()).unwrap();
        regular(&m, "reg", &[0, 1]);
        harvester(&m, "hv", &[2, 3]);
        m.harvest_tick().unwrap();
        let g = m.gssds().into_iter().find(|g| g.home.is_some()).unwrap();
        gid = g.id;
        let mib = (g.capacity_bytes >> 20).max(1);
        m.harvest_volume_create(&req("v", "hv", mib, 1, 300))
            .unwrap();
        write_all(&*export(&m, "v"), 31);
        m.shutdown().unwrap();
    }
    let m = HostManager::open(&cfg, clock.clone()).unwrap();
    let v = m.harvest_volume("v").unwrap();
    assert_eq!(v.segments[0].gssd, gid);
    check_all(&*export(&m, "v"), 31);
    let g = m.gssds();
    assert_eq!(g.len(), 2);
    assert!(g.iter().any(|g| g.id == gid && g.in_use));
    // The home still lends exactly the gSSD's blocks.
    assert_eq!(m.vssd("reg").unwrap().lent().len(), 2);
}

#[test]
fn an_eviction_survives_a_restart_as_notice_and_as_loss() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::from_toml(&config_text(
        dir.path().to_str().unwrap(),
        "file",
        "unsold = false",
    ))
    .unwrap();
    let clock = Arc::new(VirtualClock::new(0));
    let open = || H {
        m: HostManager::open(&cfg, clock.clone()).unwrap(),
        clock: clock.clone(),
    };
    {
        let h = open();
        regular(&h.m, "reg", &[0, 1, 2, 3, 4, 5]);
        harvester(&h.m, "hv", &[6, 7]);
        h.m.harvest_tick().unwrap();
        let g = h.m.gssds().remove(0);
        let mib = (g.capacity_bytes >> 20).max(1);
        h.m.harvest_volume_create(&req("v", "hv", mib, 1, 300))
            .unwrap();
        write_all(&*export(&h.m, "v"), 5);
        fill_home(&h, "reg");
        h.m.harvest_tick().unwrap();
        assert_eq!(h.m.harvest_volume("v").unwrap().state, "evicting");
        h.m.shutdown().unwrap();
    }
    // Under notice across the restart: the data is still all there.
    {
        let h = open();
        let v = h.m.harvest_volume("v").unwrap();
        assert_eq!((v.state.as_str(), v.evict_by_s), ("evicting", Some(120)));
        assert_eq!(v.segments[0].evict_by, Some(120 * SEC));
        check_all(&*export(&h.m, "v"), 5);
        h.clock.advance(130 * SEC);
        h.m.harvest_tick().unwrap();
        assert_eq!(h.m.harvest_volume("v").unwrap().state, "degraded");
        h.m.shutdown().unwrap();
    }
    // Lost across the restart: reads fail, they do not turn into zeros.
    let h = open();
    let v = h.m.harvest_volume("v").unwrap();
    assert_eq!(v.state, "degraded");
    assert_eq!(v.lost.len(), 1);
    let mut buf = vec![0u8; 4096];
    let dev = export(&h.m, "v");
    assert_eq!(dev.read(0, &mut buf).unwrap_err().errno(), 5);
    h.m.harvest_volume_release("v").unwrap();
}

#[test]
fn emulation_mode_gates_volumes_on_shared_channels() {
    // In emulation mode a harvest volume gets the priority gate; building it
    // once took the state lock twice (a deadlock), so run it with a time limit.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let clock = Arc::new(VirtualClock::new(0));
        let text = format!(
            "mode = \"emulation\"\n{}",
            config_text("/nonexistent", "memory", "unsold = false")
        );
        let cfg = Config::from_toml(&text).unwrap();
        let m = HostManager::open_with(
            &cfg,
            clock,
            ControlStore::memory().unwrap(),
            Arc::new(MemCheckpoints::default()),
        )
        .unwrap();
        regular(&m, "reg", &[0, 1]);
        harvester(&m, "hv", &[2, 3]);
        m.harvest_tick().unwrap();
        let g = m.gssds().remove(0);
        let mib = (g.capacity_bytes >> 20).max(1);
        m.harvest_volume_create(&req("v", "hv", mib, 1, 120))
            .unwrap();
        let e = m.lookup("v").unwrap();
        tx.send(e.gate.is_some()).unwrap();
    });
    let gated = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("creating a harvest volume in emulation mode hung");
    assert!(
        gated,
        "a volume on lent blocks must carry the priority gate"
    );
}

#[test]
fn the_learned_predictors_decide_what_an_idle_vssd_lends_and_for_how_long() {
    // Small models so that the test trains in debug builds in seconds, and a
    // slow bus (1 MB/s per channel) so that a short burst is a real bandwidth
    // level: the predictors learn from level changes.
    let text = config_text("/nonexistent", "memory", "unsold = false\ngranule_s = 30")
        .replace("granule_s = 60\n", "")
        .replace("policy = \"fixed\"", "policy = \"predicted\"")
        .replace("[harvest]", "[devices.timing]\nchannel_mbps = 1\n[harvest]")
        + "\n[harvest.predictor]\nepochs = 1\n[harvest.predictor.duration]\nhidden = 8\n";
    let h = mem_text(&text);
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    assert_eq!(
        h.m.harvest_settings().policy,
        crate::config::LendPolicyKind::Predicted
    );
    // Cold predictors lend nothing.
    h.m.harvest_tick().unwrap();
    assert!(h.m.gssds().is_empty());
    // A mostly idle vSSD: every tenth window of 18 s starts with a 1 MiB burst
    // (half its bandwidth for that second) that is then trimmed away.
    let dev = h.m.export_dev("reg").unwrap();
    let mut lent_at = None;
    'outer: for w in 0..300u64 {
        for tick in 0..18u64 {
            if w % 10 == 0 && tick == 0 {
                dev.write(0, &pattern(w, 1 << 20), false).unwrap();
            }
            if w % 10 == 0 && tick == 1 {
                dev.trim(0, 1 << 20).unwrap();
            }
            h.clock.advance(SEC);
            h.m.harvest_tick().unwrap();
            if !h.m.gssds().is_empty() {
                lent_at = Some(clock::Clock::now(&*h.clock) / SEC);
                break 'outer;
            }
        }
    }
    let t = lent_at.unwrap_or_else(|| {
        panic!(
            "the predictors never lent anything: {:?}",
            h.m.harvest_status().predictions
        )
    });
    // It lends what they predict spare, for as long as they predict.
    let g = h.m.gssds().remove(0);
    assert_eq!(g.home.as_deref(), Some("reg"));
    assert!(g.capacity_blocks > 0);
    let p = &h.m.harvest_status().predictions["reg"];
    assert!(p.warm && p.duration_s >= 30, "{p:?}");
    assert_eq!(g.expiry_s, t + p.duration_s / 30 * 30, "{g:?} vs {p:?}");
    assert!(h
        .m
        .harvest_events(0)
        .iter()
        .any(|e| e.kind == HarvestEventKind::Created));
}

#[test]
fn the_default_config_has_harvesting_off_and_its_example_parses() {
    let d = Config::default();
    assert!(!d.harvest.enabled);
    assert_eq!(d.harvest.policy, crate::config::LendPolicyKind::Predicted);
    let example: String = crate::DEFAULT_CONFIG
        .lines()
        .skip_while(|l| *l != "# [harvest]")
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| {
            l.starts_with('[') || l.split_once(" = ").is_some_and(|(k, _)| !k.contains(' '))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let c = Config::from_toml(&example).unwrap();
    assert!(c.harvest.enabled && c.harvest.tick_ms == 1000, "{example}");
    c.validate().unwrap();
}

#[test]
fn a_request_while_the_harvester_is_off_says_so_and_how_to_turn_it_on() {
    let text =
        config_text("/nonexistent", "memory", "").replace("enabled = true", "enabled = false");
    let h = mem_text(&text);
    harvester(&h.m, "hv", &[2, 3]);
    h.m.harvest_tick().unwrap();
    let e =
        h.m.harvest_volume_create(&req("x", "hv", 1, 1, 60))
            .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("harvester is off") && msg.contains("enabled = true"),
        "{msg}"
    );
    assert!(
        h.m.harvest_events(0).is_empty(),
        "no exception event: nothing was tried"
    );
}

#[test]
fn the_harvester_reaches_exports_only_through_the_registry() {
    // A harvest volume is listed and opened by kind, with no hand filtering:
    // gSSDs never appear, the volume does, and goes with its release.
    let h = mem("");
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    h.m.harvest_tick().unwrap();
    assert!(!h.m.gssds().is_empty());
    h.m.harvest_volume_create(&req("vol", "hv", 1, 1, 60))
        .unwrap();
    let names: Vec<String> = ExportRegistry::list(&h.m)
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(
        names,
        ["hv", "reg", "vol"],
        "vSSDs, then the harvest volume"
    );
    for g in h.m.gssds() {
        assert!(h.m.lookup(&g.vssd).is_none(), "{} is hidden", g.vssd);
    }
    assert!(h.m.lookup("vol").is_some());
    h.m.harvest_volume_release("vol").unwrap();
    assert!(h.m.lookup("vol").is_none());
}

#[test]
fn an_absurd_harvest_capacity_is_refused_not_an_overflow() {
    // Found by the API's random-JSON property test: 2^62 bytes overflowed
    // the block count (a panic in debug builds, a wrong size in release).
    let geo = flash::Geometry {
        channels: 8,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 32,
        pages_per_block: 32,
        page_size: 4096,
    };
    assert!(blocks_for(&geo, u64::MAX, 1) > u64::MAX / geo.block_bytes());
    assert!(blocks_for(&geo, 1 << 62, 4) > (1 << 62) / geo.block_bytes());
    // Ordinary sizes are what they were: 1 MiB on 1 channel of 2 dies.
    assert_eq!(blocks_for(&geo, 1 << 20, 1), 18);
    let h = mem("");
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    h.m.harvest_tick().unwrap();
    let mut r = req("v1", "hv", 0, 1, 120);
    r.capacity = ByteSize(4_903_651_630_152_745_388);
    let e = h.m.harvest_volume_create(&r).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace, "{e}");
}

/// `auto_request`: a harvest tenant that fills its vSSD gets a volume its
/// demand predictor asked for, one at a time; once it empties its vSSD and
/// the time asked for is over, the volume goes back. Off (the default), the
/// same tenant gets nothing.
#[test]
fn a_harvest_tenants_demand_predictor_asks_for_flash_and_gives_it_back() {
    let text = |auto: bool| {
        config_text(
            "/nonexistent",
            "memory",
            &format!("window_s = 1\nauto_request = {auto}"),
        )
        // gSSDs that last as long as the demand the predictor sees.
        .replace("lend_for_s = 600", "lend_for_s = 1000000")
            + "\n[harvest.predictor]\nmodel = \"quantile\"\n"
    };
    let fill = |h: &H| {
        let dev = export(&h.m, "hv");
        let n = dev.size() / 20 * 19 / 4096 * 4096;
        let mut off = 0;
        while off < n {
            let len = (256u64 << 10).min(n - off) as usize;
            dev.write(off, &pattern(off, len), false).unwrap();
            off += len as u64;
        }
        dev.flush().unwrap();
    };
    let auto_volumes = |h: &H| -> Vec<HarvestVolumeInfo> {
        h.m.harvest_volumes()
            .into_iter()
            .filter(|v| v.name.starts_with("hv-auto-"))
            .collect()
    };

    // Off: nothing, however full the tenant is.
    let off = mem_text(&text(false));
    regular(&off.m, "reg", &[0, 1]);
    harvester(&off.m, "hv", &[2, 3]);
    fill(&off);
    for _ in 0..10 {
        off.clock.advance(SEC);
        off.m.harvest_tick().unwrap();
    }
    assert!(off.m.harvest_volumes().is_empty());

    let h = mem_text(&text(true));
    regular(&h.m, "reg", &[0, 1]);
    harvester(&h.m, "hv", &[2, 3]);
    // An idle tenant asks for nothing.
    for _ in 0..5 {
        h.clock.advance(SEC);
        h.m.harvest_tick().unwrap();
    }
    assert!(auto_volumes(&h).is_empty());
    // A tenant about to be full asks for half its capacity, once.
    fill(&h);
    for _ in 0..10 {
        h.clock.advance(SEC);
        h.m.harvest_tick().unwrap();
    }
    let vols = auto_volumes(&h);
    assert_eq!(vols.len(), 1, "{vols:?} {:?}", h.m.harvest_events(0));
    let v = &vols[0];
    let own = h.m.vssd("hv").unwrap().size();
    assert_eq!(v.tenant, "hv");
    assert_eq!(v.size_bytes, own / 2 / 4096 * 4096);
    let ev = h.m.harvest_events(0);
    let asked = ev
        .iter()
        .find(|e| e.kind == HarvestEventKind::Demand)
        .expect("a demand event");
    assert!(asked.detail.contains("asked for"), "{}", asked.detail);
    // It is the tenant's to use like any harvest volume.
    let dev = export(&h.m, &v.name);
    write_all(&*dev, 31);
    check_all(&*dev, 31);
    // The tenant empties its vSSD; the volume stays until its time is over
    // and it has been idle for a period.
    let own_dev = export(&h.m, "hv");
    own_dev.trim(0, own_dev.size()).unwrap();
    for _ in 0..5 {
        h.clock.advance(SEC);
        h.m.harvest_tick().unwrap();
    }
    assert_eq!(auto_volumes(&h).len(), 1, "its time is not over");
    h.clock
        .advance(v.until_s.saturating_sub(h.clock.now() / SEC) * SEC);
    for _ in 0..3 {
        h.clock.advance(SEC);
        h.m.harvest_tick().unwrap();
    }
    assert!(auto_volumes(&h).is_empty(), "{:?}", h.m.harvest_events(0));
    assert!(h
        .m
        .harvest_events(0)
        .iter()
        .any(|e| e.kind == HarvestEventKind::Demand && e.detail.contains("gave volume")));
}
