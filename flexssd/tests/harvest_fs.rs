//! A real btrfs file system on a harvest tenant's storage: its own vSSD plus a
//! harvest volume added with `btrfs device add`, both through nbdfuse and a loop
//! device. The regular tenant that lent the volume's flash fills up and takes it
//! back, so the volume migrates live under the mounted file system; every file
//! still reads back and scrub finds nothing. Then the tenant gives the flash
//! back the way a file system does (`btrfs device remove`, then release) and
//! loses nothing. Needs root, /dev/fuse, loop devices, nbdfuse and btrfs-progs;
//! says why it skips otherwise.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::*;

/// 8 channels × 2 dies × 64 blocks × 1 MiB. Regular tenants a and b (2
/// channels each) lend 96 blocks each when idle; hv's own vSSD is 128 MiB so
/// that btrfs soon allocates on the harvested device too.
const CONFIG: &str = r#"
[[devices]]
name = "ssd0"
backend = "file"
[devices.geometry]
channels = 8
dies_per_channel = 2
planes_per_die = 1
blocks_per_plane = 64
pages_per_block = 256
page_size = 4096

[[vssds]]
name = "a"
channel_ids = [0, 1]

[[vssds]]
name = "b"
channel_ids = [2, 3]

[[vssds]]
name = "hv"
channel_ids = [4, 5]
capacity = "128M"
role = "harvest"

[harvest]
enabled = true
policy = "fixed"
tick_ms = 100
granule_s = 60
reclaim_horizon_s = 60
lend_for_s = 3600
unsold = false
"#;

fn files(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..12u64 {
        let p = dir.join(format!("f{i}"));
        random_file(&p, 4 << 20, 100 + i);
        out.push((p.clone(), std::fs::read(&p).unwrap()));
    }
    run("sync", &[]);
    out
}

fn verify(files: &[(std::path::PathBuf, Vec<u8>)], mnt: &Path, when: &str) {
    run("sync", &[]);
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    for (p, want) in files {
        let got = std::fs::read(p).unwrap_or_else(|e| panic!("{when}: {}: {e}", p.display()));
        assert!(&got == want, "{when}: {} differs", p.display());
    }
    let out = run("btrfs", &["scrub", "start", "-B", mnt.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("no errors found") || text.contains("Error summary:    no errors"),
        "{when}: scrub: {text}"
    );
}

/// Bytes of data btrfs has allocated on `dev`.
fn data_on(mnt: &Path, dev: &str) -> u64 {
    let out = run("btrfs", &["device", "usage", "-b", mnt.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut on = false;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            on = line.starts_with(dev);
        } else if on && line.trim_start().starts_with("Data,") {
            return line.rsplit(' ').next().unwrap().trim().parse().unwrap_or(0);
        }
    }
    0
}

#[test]
fn btrfs_grows_onto_harvested_flash_survives_a_migration_and_gives_it_back() {
    if let Err(why) = fs_ready() {
        eprintln!("SKIP harvest_fs: {why}");
        return;
    }
    if !have("mkfs.btrfs") || !have("fio") {
        eprintln!("SKIP harvest_fs: btrfs-progs or fio is not installed");
        return;
    }
    let d = Daemon::start(CONFIG);
    let t0 = Instant::now();
    while d
        .get("/v1/gssds")
        .is_none_or(|g| g.matches("\"id\"").count() < 2)
    {
        assert!(t0.elapsed() < Duration::from_secs(20), "no gSSDs lent");
        std::thread::sleep(Duration::from_millis(50));
    }
    let base = Attached::new(&d, "hv");
    run(
        "mkfs.btrfs",
        &["-f", "-q", "-d", "single", "-m", "single", &base.loopdev],
    );
    base.mount();
    let mnt = base.mnt.clone();

    // Grow onto harvested flash.
    cli_ok(
        &d,
        &[
            "harvest",
            "request",
            "h1",
            "--tenant",
            "hv",
            "--capacity",
            "64M",
            "--duration",
            "600",
        ],
    );
    let h1 = Attached::new(&d, "h1");
    run(
        "btrfs",
        &["device", "add", "-f", &h1.loopdev, mnt.to_str().unwrap()],
    );
    let written = files(&mnt);
    // Spread the data over both devices (the allocator picks the device with
    // the most unallocated space, so relocated chunks land on the new one).
    run("btrfs", &["balance", "start", "-d", mnt.to_str().unwrap()]);
    assert!(
        data_on(&mnt, &h1.loopdev) > 0,
        "btrfs put no data on the harvested device; the test proves nothing"
    );
    let (_, v) = http(&d, "GET", "/v1/harvest/volumes/h1", None);
    let first = v["segments"][0]["gssd"].as_u64().unwrap();
    let (_, g) = http(&d, "GET", "/v1/gssds", None);
    let home = g
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"].as_u64() == Some(first))
        .unwrap()["home"]
        .as_str()
        .unwrap()
        .to_string();

    // The lender's own tenant fills up: it takes its blocks back, and the
    // volume moves to the other lender's gSSD under the mounted file system.
    let fill = run_any(
        "fio",
        &[
            "--ioengine=nbd",
            "--rw=write",
            "--bs=1m",
            "--size=140m",
            "--rate=30m",
            "--name=fill",
            &format!("--uri={}", d.uri(&home)),
        ],
    );
    assert!(
        fill.status.success(),
        "{}",
        String::from_utf8_lossy(&fill.stderr)
    );
    let t0 = Instant::now();
    loop {
        let (_, v) = http(&d, "GET", "/v1/harvest/volumes/h1", None);
        if v["state"] == "active" && v["segments"][0]["gssd"].as_u64() != Some(first) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no migration: {}",
            cli_ok(&d, &["events"])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    verify(&written, &mnt, "after the live migration");

    // Give the flash back as a file system does: btrfs moves the data off the
    // device first, then the volume is released.
    run(
        "btrfs",
        &["device", "remove", &h1.loopdev, mnt.to_str().unwrap()],
    );
    drop(h1);
    cli_ok(&d, &["harvest", "release", "h1"]);
    verify(&written, &mnt, "after giving the harvested device back");
    base.umount();
    base.mount();
    verify(&written, &mnt, "after a remount");
}
