//! Real kernel file systems on a vSSD: nbdfuse exposes the export as a file, a
//! loop device turns it into a block device, mkfs/mount/fsck run unchanged.
//! Needs root, /dev/fuse, loop devices and nbdfuse; says why it skips otherwise.

mod support;
use std::path::Path;
use support::*;

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
    filesystem_cycle_on(SMALL_DEVICE, mkfs, fsck)
}

/// [`filesystem_cycle`] on a daemon configured with `device` (its vSSD
/// named "default").
fn filesystem_cycle_on(device: &str, mkfs: &[&str], fsck: &[&str]) {
    if let Err(why) = fs_ready() {
        eprintln!("SKIP filesystem test: {why}");
        return;
    }
    require!(have(mkfs[0]), format!("{} is not installed", mkfs[0]));
    let mut d = Daemon::start(device);
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

#[test]
fn xfs_on_a_vssd() {
    // SMALL_DEVICE with twice the blocks: XFS wants at least 300 MiB.
    let device = SMALL_DEVICE.replace("blocks_per_plane = 32", "blocks_per_plane = 64");
    assert_ne!(device, SMALL_DEVICE);
    filesystem_cycle_on(&device, &["mkfs.xfs", "-q", "-f"], &["xfs_repair", "-n"]);
}
