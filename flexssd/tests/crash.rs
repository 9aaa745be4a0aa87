//! kill -9 during writes: every write acknowledged with FUA (or followed by an
//! acknowledged flush) is there after a restart, and the vSSDs are all back.

mod support;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use support::*;

const WRITER: &str = r#"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
n = 0
while True:
    blk = n % 40000
    buf = (n.to_bytes(8, 'little') + blk.to_bytes(8, 'little')) * 256
    h.pwrite(buf, blk * 4096, nbd.CMD_FLAG_FUA)
    print(n, flush=True)
    n += 1
"#;

const CHECKER: &str = r#"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
last = int(sys.argv[2])
bad = 0
# The newest acknowledged write of each block must be there; never-written blocks read zeros.
newest = {}
for n in range(last + 1):
    newest[n % 40000] = n
for blk, n in newest.items():
    got = h.pread(4096, blk * 4096)
    want = (n.to_bytes(8, 'little') + blk.to_bytes(8, 'little')) * 256
    # The write in flight at the kill (last+1) may or may not have landed.
    alt = ((n + 40000).to_bytes(8, 'little') + blk.to_bytes(8, 'little')) * 256 if n + 40000 == last + 1 else None
    if got != want and got != alt:
        bad += 1
        if bad < 5:
            print("block", blk, "expected write", n, "got", got[:16].hex(), file=sys.stderr)
print("checked", len(newest), "bad", bad)
sys.exit(1 if bad else 0)
"#;

#[test]
fn kill_9_during_fua_writes_loses_nothing_acknowledged() {
    let Some(py) = nbd_python() else {
        eprintln!("SKIP kill -9 test: libnbd's Python bindings (python3-libnbd) are not installed");
        return;
    };
    let mut d = Daemon::start(SMALL_DEVICE);
    kill_9_rounds(&mut d, py);
}

/// The flash's files on a host file system of their own, made with `mkfs`:
/// the file backend leans on the host file system (hole punching, `SEEK_HOLE`,
/// whole-block allocation where overwrites allocate nothing, whole-inode
/// `fsync` on ext4 and XFS, none of that on copy-on-write btrfs), so the
/// kill -9 rounds run on each kind it treats differently.
fn kill_9_on_host_fs(mkfs: &[&str]) {
    let Some(py) = nbd_python() else {
        eprintln!("SKIP kill -9 test: libnbd's Python bindings (python3-libnbd) are not installed");
        return;
    };
    let host = match HostFs::new(mkfs, 2 << 30) {
        Ok(h) => h,
        Err(why) => {
            eprintln!("SKIP kill -9 on {}: {why}", mkfs[0]);
            return;
        }
    };
    let mut d = Daemon::start_on(SMALL_DEVICE, &host.mnt.join("data"));
    kill_9_rounds(&mut d, py);
    d.stop();
    assert!(
        host.mnt.join("data").read_dir().unwrap().count() > 0,
        "the daemon kept its data elsewhere"
    );
}

#[test]
fn kill_9_with_the_flash_on_xfs() {
    kill_9_on_host_fs(&["mkfs.xfs", "-q", "-f"]);
}

#[test]
fn kill_9_with_the_flash_on_btrfs() {
    kill_9_on_host_fs(&["mkfs.btrfs", "-q", "-f"]);
}

/// Three rounds of FUA writes, kill -9 and restart, each checked, on a daemon
/// started with [`SMALL_DEVICE`]; then both vSSDs are still listed.
fn kill_9_rounds(d: &mut Daemon, py: &str) {
    let out = d.cli(&["vssd", "create", "second", "--channels", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for round in 0..3 {
        let mut w = Command::new(py)
            .args(["-c", WRITER, &d.uri("default")])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(w.stdout.take().unwrap()).lines();
        let target = 3000 + round * 2000;
        let mut last: i64 = -1;
        while last < target {
            last = lines
                .next()
                .expect("writer stopped early")
                .unwrap()
                .trim()
                .parse()
                .unwrap();
        }
        d.kill9();
        // Drain what the writer printed before it noticed the crash.
        for l in lines.map_while(Result::ok) {
            last = l.trim().parse().unwrap_or(last);
        }
        let _ = w.wait();
        d.restart();
        let out = Command::new(py)
            .args(["-c", CHECKER, &d.uri("default"), &last.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "round {round}: after kill -9, acknowledged writes are missing: {} {}\nlog:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            d.log()
        );
    }
    let list = d.cli(&["vssd", "list", "--json"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("\"second\"") && text.contains("\"default\""),
        "{text}"
    );
}
