//! Unit tests of the host manager on small memory- and file-backed devices.

use std::sync::Arc;

use blockdev::BlockDev;
use clock::VirtualClock;
use flash::Geometry;
use ftl::{GcPolicyKind, MemCheckpoints};
use nbd::ExportRegistry;

use super::*;
use crate::{ByteSize, ErrorKind};

/// 8 channels × 2 dies × 1 plane × 16 blocks × 64 pages × 4 KiB = 64 MiB.
fn small_geo() -> Geometry {
    Geometry {
        channels: 8,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 16,
        pages_per_block: 64,
        page_size: 4096,
    }
}

fn config_text(data_dir: &str, backend: &str, vssds: &str) -> String {
    format!(
        r#"
        data_dir = "{data_dir}"
        [[devices]]
        name = "ssd0"
        backend = "{backend}"
        [devices.geometry]
        channels = 8
        dies_per_channel = 2
        blocks_per_plane = 16
        pages_per_block = 64
        {vssds}
        "#
    )
}

fn mem_config(vssds: &str) -> Config {
    Config::from_toml(&config_text("/nonexistent", "memory", vssds)).unwrap()
}

fn mem_manager(vssds: &str) -> HostManager {
    HostManager::open_with(
        &mem_config(vssds),
        Arc::new(VirtualClock::new(0)),
        ControlStore::memory().unwrap(),
        Arc::new(MemCheckpoints::default()),
    )
    .unwrap()
}

fn spec(name: &str, channels: u32) -> VssdSpec {
    VssdSpec {
        name: name.into(),
        channels: Some(channels),
        ..Default::default()
    }
}

fn placed(name: &str, ids: &[u32], blocks: Option<&str>) -> VssdSpec {
    VssdSpec {
        name: name.into(),
        channel_ids: Some(ids.to_vec()),
        blocks: blocks.map(|b| b.parse().unwrap()),
        ..Default::default()
    }
}

/// A vSSD the daemon creates places its pages as the config says for the
/// daemon's mode: filled in fast mode, striped in emulation mode, unless
/// `placement` names one (reopened vSSDs take it at the same place,
/// `insert_entry_locked`).
#[test]
fn vssds_place_their_pages_as_the_mode_and_config_say() {
    for (head, want) in [
        ("", ftl::Placement::Fill),
        ("mode = \"emulation\"", ftl::Placement::Stripe),
        ("placement = \"stripe\"", ftl::Placement::Stripe),
        (
            "mode = \"emulation\"\nplacement = \"fill\"",
            ftl::Placement::Fill,
        ),
    ] {
        let text = format!("{head}\n{}", config_text("/nonexistent", "memory", ""));
        let m = HostManager::open_with(
            &Config::from_toml(&text).unwrap(),
            Arc::new(VirtualClock::new(0)),
            ControlStore::memory().unwrap(),
            Arc::new(MemCheckpoints::default()),
        )
        .unwrap();
        m.create_vssd(&spec("a", 2)).unwrap();
        assert_eq!(m.vssd("a").unwrap().placement(), want, "config {head:?}");
    }
}

#[test]
fn create_takes_the_lowest_free_channels() {
    let m = mem_manager("");
    let a = m.create_vssd(&spec("a", 3)).unwrap();
    assert_eq!(a.channels, vec![0, 1, 2]);
    assert_eq!(a.device, "ssd0");
    assert_eq!(a.state, VssdState::Active);
    let geo = small_geo();
    let extents: Vec<Extent> = (0..3).map(|c| Extent::whole_channel(&geo, c)).collect();
    assert_eq!(a.extents, extents);
    assert_eq!(a.capacity_bytes, ftl::default_capacity(&geo, &extents));
    let b = m.create_vssd(&spec("b", 2)).unwrap();
    assert_eq!(b.channels, vec![3, 4]);
    assert_ne!(a.id, b.id);
    m.delete_vssd("a").unwrap();
    let c = m.create_vssd(&spec("c", 4)).unwrap();
    assert_eq!(c.channels, vec![0, 1, 2, 5]);
    let names: Vec<String> = m.list().into_iter().map(|v| v.name).collect();
    assert_eq!(names, ["b", "c"]);
    assert_eq!(m.get("b").unwrap(), b);
}

#[test]
fn not_enough_channels_says_how_many_are_free() {
    let m = mem_manager("");
    m.create_vssd(&spec("a", 6)).unwrap();
    let e = m.create_vssd(&spec("b", 3)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace);
    let msg = e.to_string();
    assert!(
        msg.contains("3 requested") && msg.contains("2 free"),
        "{msg}"
    );
    let e = m.create_vssd(&spec("c", 0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadRequest);
    assert!(m.get("b").is_err());
}

#[test]
fn names_are_checked_and_unique() {
    let m = mem_manager("");
    for bad in ["", "a b", "x/y", &"n".repeat(65)] {
        let e = m.create_vssd(&spec(bad, 1)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest, "{bad}");
        assert!(e.to_string().contains("invalid vSSD name"), "{e}");
    }
    m.create_vssd(&spec("t.1-x_y", 1)).unwrap();
    let e = m.create_vssd(&spec("t.1-x_y", 1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert!(e.to_string().contains("already exists"), "{e}");
}

#[test]
fn capacity_is_rounded_and_bounded() {
    let m = mem_manager("");
    let geo = small_geo();
    let one = [Extent::whole_channel(&geo, 0)];
    let max = ftl::max_capacity(&geo, &one);
    let v = m
        .create_vssd(&VssdSpec {
            capacity: Some(ByteSize(10_000)),
            ..spec("a", 1)
        })
        .unwrap();
    assert_eq!(v.capacity_bytes, 12_288, "rounded up to whole pages");
    assert_eq!(m.export_dev("a").unwrap().size(), 12_288);
    let e = m
        .create_vssd(&VssdSpec {
            capacity: Some(ByteSize(max + 1)),
            ..spec("b", 1)
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadRequest);
    assert!(e.to_string().contains(&max.to_string()), "{e}");
    let e = m
        .create_vssd(&VssdSpec {
            capacity: Some(ByteSize(0)),
            ..spec("b", 1)
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadRequest);
    let v = m
        .create_vssd(&VssdSpec {
            capacity: Some(ByteSize(max)),
            ..spec("b", 1)
        })
        .unwrap();
    assert_eq!(v.capacity_bytes, max);
}

#[test]
fn explicit_placement_shares_channels_without_overlap() {
    let m = mem_manager("");
    let a = m.create_vssd(&placed("a", &[2, 3], Some("0..8"))).unwrap();
    assert_eq!(a.channels, vec![2, 3]);
    assert_eq!(
        a.extents[0],
        Extent {
            channel: 2,
            first_block: 0,
            blocks: 8
        }
    );
    let b = m.create_vssd(&placed("b", &[3], Some("8..16"))).unwrap();
    assert_eq!(
        b.extents,
        vec![Extent {
            channel: 3,
            first_block: 8,
            blocks: 8
        }]
    );
    let e = m
        .create_vssd(&placed("c", &[1, 3], Some("4..12")))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let msg = e.to_string();
    assert!(
        msg.contains("overlaps") && msg.contains("channel 3"),
        "{msg}"
    );
    // Channels partly used count as used for whole-channel placement.
    let d = m.create_vssd(&spec("d", 3)).unwrap();
    assert_eq!(d.channels, vec![0, 1, 4]);
    let dev = m.device("ssd0").unwrap();
    assert_eq!(dev.used_channels, vec![0, 1, 2, 3, 4]);
    assert_eq!(dev.free_channels, vec![5, 6, 7]);
    // Whole-channel explicit placement on a partly used channel overlaps too.
    assert_eq!(
        m.create_vssd(&placed("e", &[2], None)).unwrap_err().kind(),
        ErrorKind::Conflict
    );
    // Data written to the two tenants of channel 3 stays apart.
    let (da, db) = (m.export_dev("a").unwrap(), m.export_dev("b").unwrap());
    da.write(0, &[0xaa; 8192], false).unwrap();
    db.write(0, &[0xbb; 8192], false).unwrap();
    let mut buf = [0u8; 8192];
    da.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 0xaa));
    db.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 0xbb));
}

#[test]
fn bad_placements_are_explained() {
    let m = mem_manager("");
    let cases: Vec<(VssdSpec, &str)> = vec![
        (placed("a", &[8], None), "does not exist"),
        (placed("a", &[1, 1], None), "listed twice"),
        (placed("a", &[1], Some("8..17")), "outside"),
        (placed("a", &[], None), "at least one"),
        // 2 dies, 1 plane: GC's 5 blocks per die leave nothing of 4 or 5.
        (
            placed("a", &[1], Some("0..4")),
            "too small to export anything",
        ),
        (
            placed("a", &[1], Some("3..8")),
            "at least 6 blocks per plane",
        ),
        (
            VssdSpec {
                channels: Some(2),
                ..placed("a", &[1], None)
            },
            "disagrees",
        ),
        (
            VssdSpec {
                blocks: Some("0..4".parse().unwrap()),
                ..spec("a", 1)
            },
            "channel_ids",
        ),
        (
            VssdSpec {
                name: "a".into(),
                ..Default::default()
            },
            "channels",
        ),
    ];
    for (s, want) in cases {
        let e = m.create_vssd(&s).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest, "{s:?}");
        assert!(e.to_string().contains(want), "{s:?}: {e}");
    }
    let e = m
        .create_vssd(&VssdSpec {
            device: Some("nope".into()),
            ..spec("a", 1)
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(m.list().is_empty());
}

#[test]
fn delete_erases_the_flash_and_frees_the_channels() {
    let m = mem_manager("");
    m.create_vssd(&spec("a", 2)).unwrap();
    let dev = m.export_dev("a").unwrap();
    dev.write(0, &vec![7u8; 1 << 20], false).unwrap();
    dev.flush().unwrap();
    let flash = m.flash("ssd0").unwrap();
    let geo = small_geo();
    let blocks =
        |ch: u32| (0..geo.blocks_per_channel()).map(move |i| ch * geo.blocks_per_channel() + i);
    let written = blocks(0)
        .chain(blocks(1))
        .filter(|&b| flash.write_ptr(b) > 0)
        .count();
    assert!(written > 0);
    m.delete_vssd("a").unwrap();
    assert!(
        blocks(0).chain(blocks(1)).all(|b| flash.write_ptr(b) == 0),
        "every block erased"
    );
    let mut buf = [0u8; 4096];
    assert!(
        dev.read(0, &mut buf).is_err(),
        "I/O through a deleted vSSD fails"
    );
    assert_eq!(m.get("a").unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(m.delete_vssd("a").unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(
        m.device("ssd0").unwrap().free_channels,
        (0..8).collect::<Vec<_>>()
    );
    let info = m.device("ssd0").unwrap();
    assert!(info.erase_count.max >= 1 && info.erase_count.min == 0);
    assert!(info.erase_count.avg > 0.0);
    // The name and channels are free again.
    assert_eq!(m.create_vssd(&spec("a", 8)).unwrap().channels.len(), 8);
}

#[test]
fn stats_count_requests_and_flash_work() {
    let m = mem_manager("");
    m.create_vssd(&spec("a", 1)).unwrap();
    let dev = m.export_dev("a").unwrap();
    dev.write(0, &[1u8; 8192], false).unwrap();
    let mut buf = [0u8; 4096];
    dev.read(0, &mut buf).unwrap();
    dev.read(4096, &mut buf).unwrap();
    let s = m.vssd_stats("a").unwrap();
    assert_eq!(
        (s.io.writes, s.io.write_bytes, s.io.reads, s.io.read_bytes),
        (1, 8192, 2, 8192)
    );
    assert_eq!(s.ftl.host_pages_written, 2);
    assert!(s.write_amplification >= 1.0);
    assert_eq!(s.device, "ssd0");
    let all = m.stats();
    assert_eq!(all.vssds.len(), 1);
    assert_eq!(all.devices.len(), 1);
    assert!(all.devices[0].stats.page_programs >= 2);
    assert_eq!(all.devices[0].vssds, vec!["a".to_string()]);
    assert_eq!(all.devices[0].raw_bytes, 64 << 20);
    assert_eq!(m.vssd_stats("zz").unwrap_err().kind(), ErrorKind::NotFound);
}

#[test]
fn export_registry_serves_active_vssds() {
    let m = mem_manager("");
    assert!(m.lookup("").is_none());
    m.create_vssd(&spec("zeta", 1)).unwrap();
    m.create_vssd(&spec("alpha", 1)).unwrap();
    // No "default": the oldest vSSD.
    assert_eq!(m.lookup("").unwrap().name, "zeta");
    m.create_vssd(&spec("default", 1)).unwrap();
    let e = m.lookup("").unwrap();
    assert_eq!(e.name, "default");
    assert!(e.pace.is_none(), "fast mode does not pace");
    assert!(e.description.contains("ssd0"), "{}", e.description);
    assert_eq!(e.dev.size(), m.get("default").unwrap().capacity_bytes);
    assert!(m.lookup("nope").is_none());
    let names: Vec<String> = m.list().into_iter().map(|v| v.name).collect();
    assert_eq!(
        ExportRegistry::list(&m)
            .into_iter()
            .map(|l| l.name)
            .collect::<Vec<_>>(),
        names
    );
    // Requests through the export are counted.
    e.dev.write(0, &[0u8; 4096], false).unwrap();
    assert_eq!(m.vssd_stats("default").unwrap().io.writes, 1);
    m.delete_vssd("default").unwrap();
    assert_eq!(m.lookup("").unwrap().name, "zeta");
}

#[test]
fn emulation_mode_paces_exports() {
    let mut cfg = mem_config("");
    cfg.mode = Mode::Emulation;
    let m = HostManager::open_with(
        &cfg,
        Arc::new(VirtualClock::new(0)),
        ControlStore::memory().unwrap(),
        Arc::new(MemCheckpoints::default()),
    )
    .unwrap();
    m.create_vssd(&spec("a", 1)).unwrap();
    assert!(m.lookup("a").unwrap().pace.is_some());
    assert_eq!(m.mode(), Mode::Emulation);
}

#[test]
fn initial_vssds_are_created_once() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_str().unwrap();
    let text = config_text(dir, "file", "[[vssds]]\nname = \"default\"\nchannels = 4\n[[vssds]]\nname = \"b\"\nchannel_ids = [6]\nblocks = \"0..8\"\ncapacity = \"1M\"");
    let cfg = Config::from_toml(&text).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
    {
        let m = HostManager::open(&cfg, clock.clone()).unwrap();
        assert_eq!(m.get("default").unwrap().channels, vec![0, 1, 2, 3]);
        assert_eq!(m.get("b").unwrap().capacity_bytes, 1 << 20);
        m.delete_vssd("default").unwrap();
        m.shutdown().unwrap();
    }
    let m = HostManager::open(&cfg, clock).unwrap();
    assert!(
        m.get("default").is_err(),
        "a deleted initial vSSD is not re-created"
    );
    assert!(m.get("b").is_ok());
    assert!(d.path().join("control.redb").exists());
    assert!(d.path().join("ssd0.flash").exists());
}

#[test]
fn bad_initial_vssd_is_a_config_error() {
    let cfg = mem_config("[[vssds]]\nname = \"big\"\nchannels = 9");
    let e = HostManager::open_with(
        &cfg,
        Arc::new(VirtualClock::new(0)),
        ControlStore::memory().unwrap(),
        Arc::new(MemCheckpoints::default()),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("big") && e.contains("9 requested"), "{e}");
}

#[test]
fn a_tick_on_request_with_the_harvester_off_says_how_to_turn_it_on() {
    let m = mem_manager("");
    assert!(!m.harvest_settings().enabled);
    let e = m.harvest_tick_now().unwrap_err();
    assert!(matches!(e, ControlError::HarvesterOff), "{e:?}");
    assert_eq!(e.kind().http_status(), 409);
    assert!(
        e.to_string()
            .contains("set `enabled = true` in the [harvest] section"),
        "{e}"
    );
    // The periodic tick just does nothing.
    assert_eq!(m.harvest_tick().unwrap(), 0);
}

#[test]
fn a_host_without_devices_is_a_configuration_error_not_a_bad_request() {
    let cfg = Config::from_toml("data_dir = \"/nonexistent\"").unwrap();
    let m = HostManager::open_with(
        &cfg,
        Arc::new(VirtualClock::new(0)),
        ControlStore::memory().unwrap(),
        Arc::new(MemCheckpoints::default()),
    )
    .unwrap();
    let e = m.create_vssd(&spec("a", 1)).unwrap_err();
    assert!(matches!(e, ControlError::Config(_)), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Internal);
    assert!(e.to_string().contains("no flash devices"), "{e}");
}

fn pattern(i: u64) -> Vec<u8> {
    (0..4096u64).map(|j| (i * 31 + j) as u8).collect()
}

fn file_setup() -> (tempfile::TempDir, Config) {
    let d = tempfile::tempdir().unwrap();
    let text = config_text(d.path().to_str().unwrap(), "file", "");
    let cfg = Config::from_toml(&text).unwrap();
    (d, cfg)
}

#[test]
fn vssds_and_data_survive_a_clean_restart() {
    let (_d, cfg) = file_setup();
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
    {
        let m = HostManager::open(&cfg, clock.clone()).unwrap();
        m.create_vssd(&spec("a", 2)).unwrap();
        m.create_vssd(&VssdSpec {
            gc: GcPolicyKind::CostBenefit,
            ..placed("b", &[5], Some("4..12"))
        })
        .unwrap();
        let dev = m.export_dev("a").unwrap();
        for i in 0..64 {
            dev.write(i * 4096, &pattern(i), false).unwrap();
        }
        m.shutdown().unwrap();
    }
    let m = HostManager::open(&cfg, clock).unwrap();
    let a = m.get("a").unwrap();
    assert_eq!(a.channels, vec![0, 1]);
    let b = m.get("b").unwrap();
    assert_eq!(
        (b.gc, b.extents[0].first_block),
        (GcPolicyKind::CostBenefit, 4)
    );
    let dev = m.export_dev("a").unwrap();
    let mut buf = vec![0u8; 4096];
    for i in 0..64 {
        dev.read(i * 4096, &mut buf).unwrap();
        assert_eq!(buf, pattern(i), "page {i}");
    }
    // New ids never collide with recovered ones.
    let c = m.create_vssd(&spec("c", 1)).unwrap();
    assert!(c.id > a.id.max(b.id));
    assert_eq!(c.channels, vec![2]);
}

#[test]
fn vssds_and_flushed_data_survive_a_crash() {
    let (_d, cfg) = file_setup();
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
    {
        let m = HostManager::open(&cfg, clock.clone()).unwrap();
        m.create_vssd(&spec("a", 1)).unwrap();
        let dev = m.export_dev("a").unwrap();
        for i in 0..32 {
            dev.write(i * 4096, &pattern(i), false).unwrap();
        }
        dev.flush().unwrap();
        // No shutdown: dropping without closing is what a crash looks like to the store.
    }
    let m = HostManager::open(&cfg, clock).unwrap();
    let dev = m.export_dev("a").unwrap();
    let mut buf = vec![0u8; 4096];
    for i in 0..32 {
        dev.read(i * 4096, &mut buf).unwrap();
        assert_eq!(buf, pattern(i), "page {i}");
    }
}

#[test]
fn interrupted_delete_is_finished_at_startup() {
    let (_d, cfg) = file_setup();
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
    let rec;
    {
        let m = HostManager::open(&cfg, clock.clone()).unwrap();
        m.create_vssd(&spec("a", 2)).unwrap();
        m.create_vssd(&spec("keep", 1)).unwrap();
        let dev = m.export_dev("a").unwrap();
        dev.write(0, &vec![9u8; 256 << 10], false).unwrap();
        dev.flush().unwrap();
        // Crash right after the record was marked `deleting`.
        rec = VssdRecord {
            state: VssdState::Deleting,
            ..m.state.read().vssds["a"].rec.clone()
        };
        m.store.put_vssd(&rec).unwrap();
    }
    let m = HostManager::open(&cfg, clock).unwrap();
    assert_eq!(m.get("a").unwrap_err().kind(), ErrorKind::NotFound);
    assert!(m.get("keep").is_ok());
    let flash = m.flash("ssd0").unwrap();
    let geo = small_geo();
    for e in &rec.extents {
        for i in 0..geo.blocks_per_channel() {
            assert_eq!(
                flash.write_ptr(e.channel * geo.blocks_per_channel() + i),
                0,
                "channel {} erased",
                e.channel
            );
        }
    }
    assert_eq!(
        m.device("ssd0").unwrap().free_channels,
        vec![0, 1, 3, 4, 5, 6, 7]
    );
    assert_eq!(m.create_vssd(&spec("n", 2)).unwrap().channels, vec![0, 1]);
}

#[test]
fn interrupted_create_is_undone_at_startup() {
    let (_d, cfg) = file_setup();
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
    {
        let m = HostManager::open(&cfg, clock.clone()).unwrap();
        // Crash after the record, before the FTL was built.
        m.store
            .insert_new_vssd(|id| VssdRecord {
                id,
                name: "half".into(),
                device: "ssd0".into(),
                extents: vec![Extent::whole_channel(&small_geo(), 0)],
                capacity_bytes: 1 << 20,
                gc: GcPolicyKind::Greedy,
                state: VssdState::Creating,
                sla: None,
                kind: Default::default(),
                lent: Vec::new(),
                tenant: None,
            })
            .unwrap();
    }
    let m = HostManager::open(&cfg, clock).unwrap();
    assert!(m.list().is_empty());
    assert_eq!(m.create_vssd(&spec("half", 1)).unwrap().channels, vec![0]);
}

#[test]
fn device_geometry_cannot_change() {
    let (d, cfg) = file_setup();
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
    HostManager::open(&cfg, clock.clone())
        .unwrap()
        .shutdown()
        .unwrap();
    let text =
        config_text(d.path().to_str().unwrap(), "file", "").replace("channels = 8", "channels = 4");
    let e = HostManager::open(&Config::from_toml(&text).unwrap(), clock.clone())
        .unwrap_err()
        .to_string();
    assert!(e.contains("geometry") && e.contains("ssd0"), "{e}");
    // Timing may change.
    let mut cfg2 = cfg.clone();
    cfg2.devices[0].timing.read_ns = 1;
    let m = HostManager::open(&cfg2, clock).unwrap();
    assert_eq!(m.device("ssd0").unwrap().timing.read_ns, 1);
}

#[test]
fn memory_device_vssds_come_back_empty() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config::from_toml(&config_text(d.path().to_str().unwrap(), "memory", "")).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
    {
        let m = HostManager::open(&cfg, clock.clone()).unwrap();
        m.create_vssd(&spec("a", 1)).unwrap();
        m.export_dev("a")
            .unwrap()
            .write(0, &[5u8; 4096], false)
            .unwrap();
        m.shutdown().unwrap();
    }
    let m = HostManager::open(&cfg, clock).unwrap();
    let mut buf = [1u8; 4096];
    m.export_dev("a").unwrap().read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn two_managers_in_one_process() {
    let a = mem_manager("[[vssds]]\nname = \"x\"\nchannels = 8");
    let b = mem_manager("[[vssds]]\nname = \"x\"\nchannels = 8");
    a.export_dev("x")
        .unwrap()
        .write(0, &[1u8; 4096], false)
        .unwrap();
    let mut buf = [9u8; 4096];
    b.export_dev("x").unwrap().read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 0));
}

#[test]
fn channel_lists_are_compact() {
    assert_eq!(channel_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    assert_eq!(channel_list(&[5]), "5");
    assert_eq!(channel_list(&[]), "-");
}

#[test]
fn a_moved_data_dir_still_opens() {
    let top = tempfile::tempdir().unwrap();
    let (a, b) = (top.path().join("a"), top.path().join("b"));
    let cfg_at = |dir: &std::path::Path| {
        Config::from_toml(&config_text(dir.to_str().unwrap(), "file", "")).unwrap()
    };
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
    {
        let m = HostManager::open(&cfg_at(&a), clock.clone()).unwrap();
        m.create_vssd(&spec("v", 1)).unwrap();
        m.export_dev("v")
            .unwrap()
            .write(0, &pattern(3), false)
            .unwrap();
        m.shutdown().unwrap();
    }
    std::fs::rename(&a, &b).unwrap();
    let m = HostManager::open(&cfg_at(&b), clock.clone()).unwrap();
    let mut buf = vec![0u8; 4096];
    m.export_dev("v").unwrap().read(0, &mut buf).unwrap();
    assert_eq!(buf, pattern(3));
    m.shutdown().unwrap();
    drop(m);
    // A device whose file is elsewhere while the recorded one still exists is refused.
    let mut other = cfg_at(&b);
    other.devices[0].path = Some(top.path().join("elsewhere.flash"));
    std::fs::write(top.path().join("elsewhere.flash"), b"").unwrap();
    let e = HostManager::open(&other, clock).unwrap_err().to_string();
    assert!(e.contains("backend") && e.contains("ssd0"), "{e}");
}

// ---------------------------------------------------------------------------------
// SLA scheduling (Regulator)
// ---------------------------------------------------------------------------------

fn linear(r: f64, w: f64) -> ::sla::Curve {
    ::sla::Curve::new(vec![(0.0, r), (w, 0.0)]).unwrap()
}

fn with_sla(mut s: VssdSpec, r: f64, w: f64) -> VssdSpec {
    s.sla = Some(sched::TenantSla {
        curve: Some(linear(r, w)),
        weight: 1,
        burst: false,
    });
    s
}

#[test]
fn vssds_on_the_same_channels_share_a_scheduling_unit() {
    let m = mem_manager("");
    m.create_vssd(&with_sla(placed("a", &[0, 1], Some("0..8")), 1000.0, 100.0))
        .unwrap();
    m.create_vssd(&placed("b", &[0, 1], Some("8..16"))).unwrap();
    m.create_vssd(&spec("c", 2)).unwrap();
    let a = m.vssd_sla("a").unwrap();
    assert_eq!(a.unit_channels, vec![0, 1]);
    assert_eq!(a.neighbours, vec!["b".to_string()]);
    assert_eq!(a.sla.unwrap().curve.unwrap(), linear(1000.0, 100.0));
    let c = m.vssd_sla("c").unwrap();
    assert_eq!(c.unit_channels, vec![2, 3]);
    assert!(c.neighbours.is_empty());
    assert_eq!(m.state.read().units.len(), 2);
    // Every export carries a gate; the unit of a and b is one scheduler.
    let ea = m.lookup("a").unwrap();
    let eb = m.lookup("b").unwrap();
    assert!(ea.gate.is_some() && eb.gate.is_some());
    // Deleting both of a unit's vSSDs drops the unit.
    m.delete_vssd("a").unwrap();
    m.delete_vssd("b").unwrap();
    assert_eq!(m.state.read().units.len(), 1);
}

#[test]
fn slas_and_unit_curves_persist_and_apply_live() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::from_toml(&config_text(dir.path().to_str().unwrap(), "file", "")).unwrap();
    let clock = Arc::new(VirtualClock::new(0));
    let unit = crate::measure::UnitCurve {
        percentile: ::sla::catalog::Percentile::P95,
        bound_us: 500.0,
        curve: linear(5000.0, 500.0),
        samples: vec![],
    };
    {
        let m = HostManager::open(&cfg, clock.clone()).unwrap();
        m.create_vssd(&placed("a", &[0], Some("0..8"))).unwrap();
        assert!(m.vssd_sla("a").unwrap().sla.is_none());
        let info = m
            .set_vssd_sla(
                "a",
                Some(sched::TenantSla {
                    curve: Some(linear(100.0, 10.0)),
                    weight: 2,
                    burst: true,
                }),
            )
            .unwrap();
        assert_eq!(info.sla.as_ref().unwrap().weight, 2);
        m.set_unit_curve("ssd0", 1, Some(unit.clone())).unwrap();
        assert_eq!(m.vssd_sla("a").unwrap().unit_curve, Some(unit.clone()));
        // The live scheduler has both.
        let st = m.state.read();
        let g = st.vssds["a"].gate.clone().unwrap();
        assert_eq!(g.scheduler().unit_curve(), Some(linear(5000.0, 500.0)));
        assert!(g.scheduler().tenant("a").unwrap().sla.burst);
        m.shutdown().unwrap();
    }
    let m = HostManager::open(&cfg, clock).unwrap();
    let a = m.vssd_sla("a").unwrap();
    assert_eq!(a.sla.unwrap().curve.unwrap(), linear(100.0, 10.0));
    assert_eq!(a.unit_curve, Some(unit));
    assert_eq!(m.unit_curves("ssd0").unwrap().len(), 1);
    m.set_unit_curve("ssd0", 1, None).unwrap();
    assert!(m.unit_curves("ssd0").unwrap().is_empty());
}

#[test]
fn bad_slas_are_refused_and_change_nothing() {
    let m = mem_manager("");
    let mut s = spec("a", 1);
    s.sla = Some(sched::TenantSla {
        curve: None,
        weight: 0,
        burst: false,
    });
    let e = m.create_vssd(&s).unwrap_err();
    assert!(e.to_string().contains("weight"), "{e}");
    assert!(m.list().is_empty(), "nothing half-created");
    m.create_vssd(&spec("a", 1)).unwrap();
    let zero = sched::TenantSla {
        curve: Some(::sla::Curve::new(vec![(0.0, 0.0)]).unwrap()),
        weight: 1,
        burst: false,
    };
    let e = m.set_vssd_sla("a", Some(zero)).unwrap_err();
    assert!(e.to_string().contains("allows no I/O"), "{e}");
    assert!(m.vssd_sla("a").unwrap().sla.is_none());
    assert!(m.set_vssd_sla("nope", None).is_err());
    let e = m.set_unit_curve("ssd0", 9, None).unwrap_err();
    assert!(e.to_string().contains("impossible"), "{e}");
    assert!(m.set_unit_curve("ssd9", 1, None).is_err());
    let unit = |bound_us| crate::measure::UnitCurve {
        percentile: ::sla::catalog::Percentile::P95,
        bound_us,
        curve: ::sla::Curve::new(vec![(0.0, 100.0), (10.0, 0.0)]).unwrap(),
        samples: vec![],
    };
    for bad in [-5.0, 0.0, f64::NAN, f64::INFINITY] {
        let e = m.set_unit_curve("ssd0", 2, Some(unit(bad))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest, "{bad}: {e}");
        assert!(e.to_string().contains("bound_us"), "{e}");
    }
    assert!(m.unit_curves("ssd0").unwrap().is_empty());
    let e = m.set_unit_curve("ssd0", 2, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("2-channel units"), "{e}");
    m.set_unit_curve("ssd0", 2, Some(unit(500.0))).unwrap();
    m.set_unit_curve("ssd0", 2, None).unwrap();
}

#[test]
fn a_device_can_opt_out_of_scheduling() {
    let cfg = Config::from_toml(&format!(
        "{}\n[devices.scheduler]\nenabled = false\n",
        config_text("/nonexistent", "memory", "")
    ))
    .unwrap();
    let m = HostManager::open_with(
        &cfg,
        Arc::new(VirtualClock::new(0)),
        ControlStore::memory().unwrap(),
        Arc::new(MemCheckpoints::default()),
    )
    .unwrap();
    m.create_vssd(&spec("a", 1)).unwrap();
    assert!(m.lookup("a").unwrap().gate.is_none());
    assert!(m.vssd_sla("a").unwrap().stats.is_none());
}
