//! Real kernel file systems on a vSSD: nbdfuse exposes the export as a file, a
//! loop device turns it into a block device, mkfs/mount/fsck run unchanged.
//! Needs root, /dev/fuse, loop devices and nbdfuse; says why it skips otherwise.

mod support;
use std::path::Path;
use support::*;

fn can_run() -> Result<(), String> {
    if !is_root() {
        return Err("needs root for losetup and mount".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse is missing".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err("no loop devices (/dev/loop-control)".into());
    }
    for t in ["nbdfuse", "losetup", "fusermount3"] {
        if !have(t) {
            return Err(format!("{t} is not installed"));
        }
    }
    Ok(())
}

/// nbdfuse mount + loop device, torn down on drop even if the test panics.
struct Attached {
    fuse: std::process::Child,
    fuse_dir: std::path::PathBuf,
    loopdev: String,
    mnt: std::path::PathBuf,
}

impl Attached {
    fn new(d: &Daemon, export: &str) -> Attached {
        let fuse_dir = d.path().join(format!("fuse-{export}"));
        let mnt = d.path().join(format!("mnt-{export}"));
        std::fs::create_dir_all(&fuse_dir).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        let pid = d.path().join(format!("nbdfuse-{export}.pid"));
        let _ = std::fs::remove_file(&pid);
        // nbdfuse serves in the foreground; it writes the pid file once mounted.
        let fuse = std::process::Command::new("nbdfuse")
            .args([
                "-P",
                pid.to_str().unwrap(),
                fuse_dir.to_str().unwrap(),
                &d.uri(export),
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // From here on, Drop cleans up whatever was set up.
        let mut a = Attached {
            fuse,
            fuse_dir,
            loopdev: String::new(),
            mnt,
        };
        let file = a.fuse_dir.join("nbd");
        let t0 = std::time::Instant::now();
        while !(pid.exists() && file.exists()) {
            assert!(a.fuse.try_wait().unwrap().is_none(), "nbdfuse exited early");
            assert!(t0.elapsed().as_secs() < 30, "nbdfuse did not mount in 30 s");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = run("losetup", &["--find", "--show", file.to_str().unwrap()]);
        a.loopdev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        a
    }

    fn mount(&self) {
        run("mount", &[&self.loopdev, self.mnt.to_str().unwrap()]);
    }

    fn umount(&self) {
        run("umount", &[self.mnt.to_str().unwrap()]);
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = run_any("umount", &[self.mnt.to_str().unwrap()]);
        if !self.loopdev.is_empty() {
            let _ = run_any("losetup", &["-d", &self.loopdev]);
        }
        let _ = run_any("fusermount3", &["-u", self.fuse_dir.to_str().unwrap()]);
        let _ = self.fuse.kill();
        let _ = self.fuse.wait();
    }
}

fn fill_and_hash(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for i in 0..12 {
        let p = dir.join(format!("f{i}"));
        random_file(&p, (i + 1) << 20, i as u64 + 7);
        files.push((p.to_string_lossy().to_string(), std::fs::read(&p).unwrap()));
    }
    std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    for i in 0..200 {
        std::fs::write(
            dir.join(format!("sub/deeper/small{i}")),
            format!("file {i}\n").repeat(i + 1),
        )
        .unwrap();
    }
    run("sync", &[]);
    files
}

fn check(files: &[(String, Vec<u8>)], dir: &Path) {
    for (p, want) in files {
        let got = std::fs::read(p).unwrap();
        assert!(&got == want, "{p} differs after remount");
    }
    for i in 0..200 {
        let got = std::fs::read_to_string(dir.join(format!("sub/deeper/small{i}"))).unwrap();
        assert_eq!(got, format!("file {i}\n").repeat(i + 1));
    }
}

fn filesystem_cycle(mkfs: &[&str], fsck: &[&str]) {
    if let Err(why) = can_run() {
        eprintln!("SKIP filesystem test: {why}");
        return;
    }
    require!(have(mkfs[0]), format!("{} is not installed", mkfs[0]));
    let mut d = Daemon::start(SMALL_DEVICE);
    let files;
    {
        let a = Attached::new(&d, "default");
        let mut args: Vec<&str> = mkfs[1..].to_vec();
        args.push(&a.loopdev);
        run(mkfs[0], &args);
        a.mount();
        files = fill_and_hash(&a.mnt);
        // Delete some files so the file system discards and the FTL trims.
        std::fs::remove_file(a.mnt.join("f0")).unwrap();
        let _ = run_any("fstrim", &[a.mnt.to_str().unwrap()]);
        a.umount();
        let mut args: Vec<&str> = fsck[1..].to_vec();
        args.push(&a.loopdev);
        run(fsck[0], &args);
        a.mount();
        check(&files[1..], &a.mnt);
        a.umount();
    }
    // Restart the daemon: the file system is still there and still clean.
    d.stop();
    d.restart();
    let a = Attached::new(&d, "default");
    let mut args: Vec<&str> = fsck[1..].to_vec();
    args.push(&a.loopdev);
    run(fsck[0], &args);
    a.mount();
    check(&files[1..], &a.mnt);
    assert!(!a.mnt.join("f0").exists());
}

#[test]
fn ext4_on_a_vssd() {
    filesystem_cycle(&["mkfs.ext4", "-q", "-F"], &["e2fsck", "-f", "-n"]);
}

#[test]
fn btrfs_on_a_vssd() {
    filesystem_cycle(&["mkfs.btrfs", "-q", "-f"], &["btrfs", "check"]);
}
