//! Interoperability: the real NBD clients (libnbd's nbdinfo and nbdcopy, qemu-img,
//! qemu-io, fio's nbd engine) against the server on a Unix socket. A test whose
//! client is not installed prints why and passes without running.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use blockdev::{BlockDev, IoResult, MemDev};
use clock::{Clock, MonotonicClock};
use nbd::Export;

mod support;
use rng::SplitMix64;
use support::Running;

fn have(tool: &str) -> bool {
    let found = Command::new("which")
        .arg(tool)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !found {
        eprintln!("SKIP: `{tool}` is not installed; this interoperability test does not run");
    }
    found
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

fn mem(name: &str, size: u64) -> (Export, Arc<MemDev>) {
    let dev = Arc::new(MemDev::new(size));
    let e = Export {
        name: name.into(),
        description: format!("test device {name}"),
        dev: dev.clone(),
        pace: None,
        gate: None,
        owner: None,
    };
    (e, dev)
}

/// A MemDev whose operations complete 50 µs after they are issued, on a
/// monotonic clock: an export in emulation mode.
#[derive(Debug)]
struct Slow {
    inner: MemDev,
    clock: Arc<dyn Clock>,
}

impl Slow {
    fn done(&self) -> u64 {
        self.clock.now() + 50_000
    }
}

impl BlockDev for Slow {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, o: u64, b: &mut [u8]) -> IoResult {
        self.inner.read(o, b).map(|_| self.done())
    }
    fn write(&self, o: u64, d: &[u8], f: bool) -> IoResult {
        self.inner.write(o, d, f).map(|_| self.done())
    }
    fn flush(&self) -> IoResult {
        Ok(self.done())
    }
    fn trim(&self, o: u64, l: u64) -> IoResult {
        self.inner.trim(o, l).map(|_| self.done())
    }
    fn write_zeroes(&self, o: u64, l: u64, f: bool) -> IoResult {
        self.inner.write_zeroes(o, l, f).map(|_| self.done())
    }
}

fn paced(name: &str, size: u64) -> Export {
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
    Export {
        name: name.into(),
        description: "paced device".into(),
        dev: Arc::new(Slow {
            inner: MemDev::new(size),
            clock: clock.clone(),
        }),
        pace: Some(clock),
        gate: None,
        owner: None,
    }
}

/// Deterministic pseudo-random bytes (seeded SplitMix64), with some zero runs.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut r = SplitMix64::new(seed);
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let x = r.next_u64();
        if x.is_multiple_of(17) {
            v.extend(std::iter::repeat_n(0, 70_000));
        } else {
            v.extend_from_slice(&x.to_le_bytes());
        }
    }
    v.truncate(len);
    v
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn contents(dev: &dyn BlockDev) -> Vec<u8> {
    let mut v = vec![0u8; dev.size() as usize];
    dev.read(0, &mut v).unwrap();
    v
}

#[test]
fn nbdinfo_lists_exports() {
    if !have("nbdinfo") {
        return;
    }
    let (a, _) = mem("alpha", 1 << 20);
    let (b, _) = mem("beta", 2 << 20);
    let s = Running::serve(vec![a, b]);
    let out = run(Command::new("nbdinfo").arg("--list").arg(s.uri("")));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "export=\"alpha\"",
        "export=\"beta\"",
        "description: test device alpha",
        "description: test device beta",
        "export-size: 1048576",
        "export-size: 2097152",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn nbdinfo_describes_an_export() {
    if !have("nbdinfo") {
        return;
    }
    let (a, _) = mem("disk", 64 << 20);
    let s = Running::serve(vec![a]);
    let out = run(Command::new("nbdinfo").arg(s.uri("disk")));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "export-size: 67108864",
        "is_read_only: false",
        "can_flush: true",
        "can_fua: true",
        "can_trim: true",
        "can_zero: true",
        "can_cache: true",
        "can_multi_conn: true",
        "block_size_minimum: 1",
        "block_size_preferred: 4096",
        "block_size_maximum: 33554432",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    // The default export answers the empty name.
    let out = run(Command::new("nbdinfo").arg("--size").arg(s.uri("")));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "67108864");
    // An unknown export is refused.
    let out = Command::new("nbdinfo").arg(s.uri("nope")).output().unwrap();
    assert!(!out.status.success());
}

#[test]
fn nbdcopy_round_trip() {
    if !have("nbdcopy") {
        return;
    }
    const LEN: usize = 24 << 20;
    let (e, dev) = mem("copy", LEN as u64);
    let (p, _) = (paced("paced", LEN as u64), ());
    let s = Running::serve(vec![e, p]);
    let src = s.path("src.img");
    let data = pattern(LEN, 42);
    std::fs::write(&src, &data).unwrap();
    for export in ["copy", "paced"] {
        run(Command::new("nbdcopy").arg(&src).arg(s.uri(export)));
        let back = s.path(&format!("back-{export}.img"));
        run(Command::new("nbdcopy").arg(s.uri(export)).arg(&back));
        let got = std::fs::read(&back).unwrap();
        assert_eq!(got.len(), LEN);
        assert_eq!(
            fnv(&got),
            fnv(&data),
            "round trip through {export} changed the data"
        );
    }
    assert_eq!(fnv(&contents(&*dev)), fnv(&data));
}

#[test]
fn qemu_img_compare() {
    if !have("qemu-img") {
        return;
    }
    const LEN: usize = 8 << 20;
    let (e, dev) = mem("disk", LEN as u64);
    let s = Running::serve(vec![e]);
    let src = s.path("src.img");
    let data = pattern(LEN, 7);
    std::fs::write(&src, &data).unwrap();
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&src)
        .arg(s.uri("disk")));
    assert_eq!(fnv(&contents(&*dev)), fnv(&data));
    run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&src)
        .arg(s.uri("disk")));
    // One byte changed behind the client's back: compare must notice.
    dev.write(LEN as u64 / 2, &[data[LEN / 2] ^ 0xff], false)
        .unwrap();
    let out = Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&src)
        .arg(s.uri("disk"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn qemu_io_pattern_write_and_read() {
    if !have("qemu-io") {
        return;
    }
    let (e, dev) = mem("disk", 16 << 20);
    let s = Running::serve(vec![e, paced("paced", 16 << 20)]);
    for export in ["disk", "paced"] {
        let out = run(Command::new("qemu-io").args([
            "-f",
            "raw",
            "-c",
            "write -P 0xab 0 1M",
            "-c",
            "read -P 0xab 0 1M",
            "-c",
            "write -z 512k 4k",
            "-c",
            "read -P 0 512k 4k",
            "-c",
            "discard 1M 1M",
            "-c",
            "flush",
            "-c",
            "aio_write -P 0xcd 4M 64k",
            "-c",
            "aio_flush",
            "-c",
            "read -P 0xcd 4M 64k",
            &s.uri(export),
        ]));
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains("wrote 1048576/1048576 bytes at offset 0"),
            "{text}"
        );
        assert!(
            text.contains("read 1048576/1048576 bytes at offset 0"),
            "{text}"
        );
        assert!(!text.to_lowercase().contains("fail"), "{text}");
        assert!(!text.contains("rror"), "{text}");
    }
    let b = contents(&*dev);
    assert!(b[..512 << 10].iter().all(|&x| x == 0xab));
    assert!(b[512 << 10..(512 << 10) + 4096].iter().all(|&x| x == 0));
    assert!(b[4 << 20..(4 << 20) + 65536].iter().all(|&x| x == 0xcd));
}

fn fio(uri: &str, dir: &Path, extra: &[&str]) -> String {
    let out = run(Command::new("fio")
        .current_dir(dir)
        .args([
            "--name=verify",
            "--ioengine=nbd",
            "--size=16m",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--do_verify=1",
        ])
        .arg(format!("--uri={uri}"))
        .args(extra));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("err= 0"), "{text}");
    assert!(!text.contains("verify: bad"), "{text}");
    // The verify pass read back everything it wrote.
    assert!(text.contains("READ: bw="), "{text}");
    assert!(text.contains("WRITE: bw="), "{text}");
    text
}

#[test]
fn fio_verify_crc32c() {
    if !have("fio") {
        return;
    }
    let (e, _) = mem("disk", 64 << 20);
    let s = Running::serve(vec![e, paced("paced", 64 << 20)]);
    fio(
        &s.uri("disk"),
        s.dir.path(),
        &["--rw=randwrite", "--bs=4k", "--iodepth=32"],
    );
    fio(
        &s.uri("disk"),
        s.dir.path(),
        &[
            "--rw=write",
            "--bs=128k",
            "--iodepth=16",
            "--numjobs=2",
            "--offset_increment=20m",
        ],
    );
    fio(
        &s.uri("paced"),
        s.dir.path(),
        &["--rw=randwrite", "--bs=4k", "--iodepth=32"],
    );
}
