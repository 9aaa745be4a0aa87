//! Elastic storage on real btrfs: `flexssd elastic run` grows a volume of vSSDs
//! while data is written, refuses (safely) a removal the data would not survive,
//! shrinks back when files are deleted, and releases everything on SIGTERM. The
//! recorded time series then replays through `flexssd sim elastic`.
//! Needs root, /dev/fuse, loop devices, nbdfuse and btrfs-progs; says why it skips.

mod support;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// 8 channels of 320 MiB (1 MiB blocks): each 256 MiB disk is a one-channel vSSD.
const DEVICE: &str = r#"
[[devices]]
name = "ssd0"
backend = "file"
[devices.geometry]
channels = 8
dies_per_channel = 1
planes_per_die = 1
blocks_per_plane = 320
pages_per_block = 256
page_size = 4096
"#;

const M: u64 = 1 << 20;

fn can_run() -> Result<(), String> {
    if !is_root() {
        return Err("needs root for losetup, mount and btrfs device add/remove".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse is missing".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err("no loop devices (/dev/loop-control)".into());
    }
    for t in ["nbdfuse", "losetup", "fusermount3", "mkfs.btrfs", "btrfs"] {
        if !have(t) {
            return Err(format!("{t} is not installed"));
        }
    }
    Ok(())
}

fn status(d: &Daemon, state: &Path) -> serde_json::Value {
    let out = d.cli(&[
        "elastic",
        "status",
        "--json",
        "--state",
        state.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The controller process: SIGTERM and wait on drop, so a failing test still
/// unmounts and detaches before the daemon goes away.
struct Ctl(std::process::Child);

impl Drop for Ctl {
    fn drop(&mut self) {
        let _ = run_any("kill", &["-TERM", &self.0.id().to_string()]);
        let t0 = Instant::now();
        while self.0.try_wait().ok().flatten().is_none() && t0.elapsed().as_secs() < 30 {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed().as_secs() < secs,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn disks(s: &serde_json::Value) -> usize {
    s["disks"].as_array().map_or(0, |a| a.len())
}

#[test]
fn grows_refuses_an_unsafe_removal_shrinks_and_releases() {
    if let Err(why) = can_run() {
        eprintln!("SKIP elastic test: {why}");
        return;
    }
    let t_start = Instant::now();
    let d = Daemon::start(DEVICE);
    let mnt = d.path().join("mnt");
    let state = d.path().join("state");
    let csv = d.path().join("series.csv");
    let cfg = d.path().join("elastic.toml");
    std::fs::write(&cfg, "[elastic]\nmax_disks = 2\n").unwrap();
    let log = std::fs::File::create(d.path().join("elastic.log")).unwrap();
    // reactive-addrm: add when free < 128 MiB, remove when free > 128 + 256 MiB;
    // probes every second (time scale 0.2 of the paper's 5 s).
    let mut ctl = Ctl(Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args([
            "elastic",
            "run",
            "--api",
            &d.api,
            "--mount",
            mnt.to_str().unwrap(),
        ])
        .args([
            "--state",
            state.to_str().unwrap(),
            "--csv",
            csv.to_str().unwrap(),
        ])
        .args([
            "--policy",
            "reactive-addrm",
            "--init",
            "256M",
            "--increment",
            "256M",
        ])
        .args(["--reserve", "128M", "--time-scale", "0.2", "--name", "el"])
        .args(["--config", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap());
    let elog = || std::fs::read_to_string(d.path().join("elastic.log")).unwrap_or_default();
    wait_for("the volume to be mounted", 60, || {
        assert!(
            ctl.0.try_wait().unwrap().is_none(),
            "controller exited: {}",
            elog()
        );
        state.join("status.json").exists() && disks(&status(&d, &state)) == 1
    });

    // Grow: 10 × 32 MiB, slowly enough for a 1-second reactive probe.
    let mut files = vec![];
    for i in 0..10u64 {
        let p = mnt.join(format!("f{i}"));
        random_file(&p, (32 * M) as usize, i + 1);
        files.push(p);
        run("sync", &[]);
        std::thread::sleep(Duration::from_millis(700));
    }
    wait_for("the pool to grow", 30, || disks(&status(&d, &state)) == 2);

    // The pool may not grow past two disks (max_disks), so 320 MiB of data sits on
    // 2 × 256 MiB: removing the newest disk cannot succeed. Ask for it anyway: btrfs
    // refuses, the disk stays, the data is intact.
    let before = status(&d, &state);
    let n = disks(&before);
    let newest = before["disks"][n - 1]["device"]
        .as_str()
        .unwrap()
        .to_string();
    let out = d.cli(&["elastic", "shrink", "--state", state.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("the manual shrink to be tried", 60, || {
        status(&d, &state)["log"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("manual shrink"))
    });
    let after = status(&d, &state);
    let shrink_log: Vec<&str> = after["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .filter(|l| l.contains("manual shrink"))
        .collect();
    assert!(shrink_log[0].contains("failed"), "{shrink_log:?}");
    assert_eq!(disks(&after), n, "a disk went away: {after}");
    let show = run("btrfs", &["filesystem", "show", mnt.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&show.stdout).contains(&newest),
        "{newest} left the file system"
    );
    let hashes: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    run("btrfs", &["scrub", "start", "-B", mnt.to_str().unwrap()]);

    // Shrink: delete all but the first file; the controller removes disks until one
    // is left (free would otherwise exceed reserve + increment).
    for p in &files[1..] {
        std::fs::remove_file(p).unwrap();
    }
    run("sync", &[]);
    wait_for("the pool to shrink to one disk", 60, || {
        disks(&status(&d, &state)) == 1
    });
    assert_eq!(std::fs::read(&files[0]).unwrap(), hashes[0]);
    let vssds = d.get("/v1/vssds").unwrap();
    assert_eq!(
        vssds.matches("\"el-").count(),
        1,
        "released disks keep vSSDs: {vssds}"
    );

    // Clean shutdown: unmounted, loop devices and vSSDs released.
    run("kill", &["-TERM", &ctl.0.id().to_string()]);
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = ctl.0.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed().as_secs() < 30, "controller ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(st.success(), "controller failed: {}", elog());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(mnt.to_str().unwrap()), "still mounted");
    let vssds = d.get("/v1/vssds").unwrap();
    assert!(!vssds.contains("\"el-"), "vSSDs left behind: {vssds}");
    let loops = run("losetup", &["-a"]);
    assert!(
        !String::from_utf8_lossy(&loops.stdout).contains(d.path().to_str().unwrap()),
        "loop devices left behind"
    );

    // Every probe recorded what btrfs had promised to writes not yet allocated.
    let series = std::fs::read_to_string(&csv).unwrap();
    let mut lines = series.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header
        .iter()
        .position(|c| *c == "pending")
        .expect("no pending column");
    let rows: Vec<&str> = lines.collect();
    assert!(!rows.is_empty());
    for r in &rows {
        let v = r.split(',').nth(col).unwrap_or("");
        assert!(v.parse::<u64>().is_ok(), "pending {v:?} in {r:?}");
    }

    // The recorded series replays through the simulator.
    let out = d.cli(&[
        "sim",
        "elastic",
        "--usage-trace",
        csv.to_str().unwrap(),
        "--policy",
        "reactive-addrm",
        "--init",
        "256M",
        "--increment",
        "256M",
        "--reserve",
        "64M",
        "--time-scale",
        "0.2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("reactive-addrm") && text.contains("adds"),
        "{text}"
    );
    eprintln!("elastic test took {:.1} s", t_start.elapsed().as_secs_f64());
}
