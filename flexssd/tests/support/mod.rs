//! Harness for black-box tests: runs the real `flexssd` binary on a private data
//! directory and drives it with real NBD clients.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Small geometry so tests are fast: 8 channels × 2 dies × 32 blocks × 1 MiB = 512 MiB;
/// a 4-channel vSSD exports 216 MiB (enough for btrfs).
pub const SMALL_DEVICE: &str = r#"
[[devices]]
name = "ssd0"
backend = "file"
[devices.geometry]
channels = 8
dies_per_channel = 2
planes_per_die = 1
blocks_per_plane = 32
pages_per_block = 256
page_size = 4096

[[vssds]]
name = "default"
channels = 4
"#;

/// A running daemon. Killed on drop.
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    pub args: Vec<String>,
    pub api: String,
    pub sock: PathBuf,
    pub config: PathBuf,
    /// With `[api] auth = "token"`: the admin token the daemon wrote to
    /// `<data_dir>/admin.token`, sent by [`Daemon::get`], [`Daemon::cli`] and
    /// [`http`].
    pub token: Option<String>,
    /// With HTTPS: the CA that signed the daemon's certificate.
    pub ca: Option<PathBuf>,
}

/// Whether `cmd` is on the PATH.
pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Skips the test (returning from it) with a reason when `cond` is false.
#[macro_export]
macro_rules! require {
    ($cond:expr, $why:expr) => {
        if !$cond {
            eprintln!("SKIP {}: {}", module_path!(), $why);
            return;
        }
    };
}

/// Whether we run as root.
pub fn is_root() -> bool {
    // SAFETY: plain libc call with no arguments.
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A TCP port on 127.0.0.1 that is free now, for a server a test starts
/// later. Taken below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`): a port from that range, free when
/// picked, can become any outgoing connection's source port before the
/// server binds it (a host retrying an etcd that is not up yet made etcd's
/// bind fail with "address already in use"). Ports are tried from an offset
/// that differs per process and per call, so parallel tests and test
/// binaries do not pick the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let (base, span) = (10_000u32, low.saturating_sub(10_000));
    if span >= 1000 {
        let start = std::process::id().wrapping_mul(7919);
        for _ in 0..span {
            let i = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = base + start.wrapping_add(i.wrapping_mul(13)) % span;
            if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
                return port as u16;
            }
        }
    }
    // No room below the ephemeral range: any free port.
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Daemon {
    /// Starts a daemon whose config is `body` plus data dir, API and socket.
    pub fn start(body: &str) -> Daemon {
        Self::start_with_args(body, &[])
    }

    /// Like [`Daemon::start`], with extra `flexssd serve` arguments.
    pub fn start_with_args(body: &str, args: &[&str]) -> Daemon {
        Self::start_nbd(body, "", args)
    }

    /// Like [`Daemon::start_with_args`], with extra `[nbd]` settings.
    pub fn start_nbd(body: &str, nbd: &str, args: &[&str]) -> Daemon {
        Self::start_api(body, "", None, nbd, args)
    }

    /// Like [`Daemon::start_nbd`], with extra `[api]` settings; with `ca`, the
    /// API is reached over HTTPS trusting that CA (`api` must then set
    /// `tls_cert` and `tls_key`). With `auth = "token"` in `api`, the harness
    /// uses the admin token the daemon writes at its first start.
    pub fn start_api(body: &str, api: &str, ca: Option<&Path>, nbd: &str, args: &[&str]) -> Daemon {
        Self::start_full(body, api, ca, nbd, args, None)
    }

    /// Like [`Daemon::start`], with the daemon's data directory at `data`
    /// (e.g. on a file system of the test's own) instead of in its temporary
    /// directory.
    pub fn start_on(body: &str, data: &Path) -> Daemon {
        Self::start_full(body, "", None, "", &[], Some(data))
    }

    fn start_full(
        body: &str,
        api: &str,
        ca: Option<&Path>,
        nbd: &str,
        args: &[&str],
        data: Option<&Path>,
    ) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("flexssd-test")
            .tempdir()
            .unwrap();
        let sock = dir.path().join("nbd.sock");
        let config = dir.path().join("flexssd.toml");
        let scheme = if ca.is_some() { "https" } else { "http" };
        let mut d = Daemon {
            dir,
            child: None,
            args: args.iter().map(|s| s.to_string()).collect(),
            api: String::new(),
            sock,
            config,
            token: None,
            ca: ca.map(Path::to_path_buf),
        };
        // `free_port` closes its probe before the daemon binds, so another
        // test may take the port in between: the daemon then refuses to
        // start ("nothing was created") and we try another port.
        for attempt in 1.. {
            let port = free_port();
            let text = format!(
                "data_dir = \"{}\"\n{body}\n[api]\nlisten = \"127.0.0.1:{port}\"\n{api}\n\n[nbd]\nsocket = \"{}\"\n{nbd}\n",
                data.map_or_else(|| d.dir.path().join("data"), Path::to_path_buf)
                    .display(),
                d.sock.display()
            );
            std::fs::write(&d.config, text).unwrap();
            d.api = format!("{scheme}://127.0.0.1:{port}");
            match d.try_spawn() {
                Ok(()) => break,
                Err(log) if attempt < 5 && log.contains("Address already in use") => {}
                Err(log) => panic!("{log}"),
            }
        }
        d
    }

    fn spawn(&mut self) {
        if let Err(e) = self.try_spawn() {
            panic!("{e}");
        }
    }

    /// Starts the daemon and waits for its API and NBD socket; on failure,
    /// what went wrong with the daemon's log.
    fn try_spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("daemon.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_flexssd"))
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .args(&self.args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start flexssd");
        self.child = Some(child);
        let t0 = Instant::now();
        let token_file = self.admin_token_path();
        loop {
            if self.token.is_none() {
                // Written before the API listens, when auth is on.
                self.token = std::fs::read_to_string(&token_file)
                    .ok()
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty());
            }
            if self.sock.exists() && self.get("/v1/vssds").is_some() {
                return Ok(());
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return Err(format!("daemon exited with {st}; log:\n{}", self.log()));
            }
            if t0.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "daemon did not come up in 60 s; log:\n{}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// `<data_dir>/admin.token`, where the daemon writes its first admin token.
    pub fn admin_token_path(&self) -> PathBuf {
        self.dir.path().join("data").join("admin.token")
    }

    /// An HTTP agent that trusts the daemon's CA, if it has one.
    pub fn agent(&self) -> ureq::Agent {
        let mut b = ureq::AgentBuilder::new();
        if let Some(ca) = &self.ca {
            use rustls::pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
            b = b.tls_config(std::sync::Arc::new(cfg));
        }
        b.build()
    }

    /// A request to the API with `token` (if any) as the bearer token.
    pub fn request_as(&self, token: Option<&str>, method: &str, path: &str) -> ureq::Request {
        let r = self
            .agent()
            .request(method, &format!("{}{path}", self.api))
            .timeout(Duration::from_secs(60));
        match token {
            Some(t) => r.set("Authorization", &format!("Bearer {t}")),
            None => r,
        }
    }

    /// GET on the API (with the admin token, if any); None if it fails.
    pub fn get(&self, path: &str) -> Option<String> {
        self.request_as(self.token.as_deref(), "GET", path)
            .timeout(Duration::from_secs(5))
            .call()
            .ok()?
            .into_string()
            .ok()
    }

    /// The NBD URI of an export.
    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.sock.display())
    }

    /// Runs the CLI against this daemon (as admin when auth is on).
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_as(self.token.as_deref(), args)
    }

    /// Runs the CLI against this daemon with `token` in `FLEXSSD_TOKEN`.
    pub fn cli_as(&self, token: Option<&str>, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_flexssd"));
        c.args(args)
            .env("FLEXSSD_API", &self.api)
            .env_remove("FLEXSSD_TOKEN")
            .env_remove("FLEXSSD_TOKEN_FILE")
            .env_remove("FLEXSSD_CA_FILE");
        if let Some(t) = token {
            c.env("FLEXSSD_TOKEN", t);
        }
        if let Some(ca) = &self.ca {
            c.env("FLEXSSD_CA_FILE", ca);
        }
        c.output().unwrap()
    }

    /// Stops the daemon with SIGTERM (clean shutdown) and waits.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let t0 = Instant::now();
            while c.try_wait().unwrap().is_none() {
                if t0.elapsed() > Duration::from_secs(30) {
                    let _ = c.kill();
                    panic!("daemon ignored SIGTERM for 30 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Kills the daemon with SIGKILL (a crash).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Starts the daemon again on the same data directory.
    pub fn restart(&mut self) {
        let _ = std::fs::remove_file(&self.sock);
        self.spawn();
    }

    /// Data directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs a command with a time limit; panics with its output if it fails.
pub fn run(cmd: &str, args: &[&str]) -> Output {
    let out = Command::new("timeout")
        .arg("300")
        .arg(cmd)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Like [`run`] but returns the output whatever the status.
pub fn run_any(cmd: &str, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("300")
        .arg(cmd)
        .args(args)
        .output()
        .unwrap()
}

/// A deterministic pseudo-random file of `len` bytes.
pub fn random_file(path: &Path, len: usize, seed: u64) {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    std::fs::write(path, v).unwrap();
}

/// The system Python with libnbd's bindings (nbdsh's engine), if present.
pub fn nbd_python() -> Option<&'static str> {
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import nbd"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some("/usr/bin/python3")
}

/// One HTTP request to the daemon's API (as admin when auth is on): (status,
/// JSON body, or the text as a JSON string when it is not JSON).
pub fn http(
    d: &Daemon,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    http_as(d, d.token.as_deref(), method, path, body)
}

/// Like [`http`], with `token` as the bearer token (none: no credentials).
pub fn http_as(
    d: &Daemon,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let req = d.request_as(token, method, path);
    let r = match body {
        Some(b) => req.send_string(&b.to_string()),
        None => req.call(),
    };
    let (code, text) = match r {
        Ok(resp) => (resp.status(), resp.into_string().unwrap()),
        Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap()),
        Err(e) => panic!("{method} {path}: {e}"),
    };
    (
        code,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// The daemon's Prometheus text.
pub fn metrics(d: &Daemon) -> String {
    d.get("/metrics").expect("GET /metrics")
}

/// The value of the metric line that starts with `prefix`.
pub fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Runs the CLI against `d`; panics with its stderr unless it succeeds.
pub fn cli_ok(d: &Daemon, args: &[&str]) -> String {
    let out = d.cli(args);
    assert!(
        out.status.success(),
        "flexssd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether real file systems can be mounted here (root, /dev/fuse, loop
/// devices, nbdfuse); the reason when not.
pub fn fs_ready() -> Result<(), String> {
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
pub struct Attached {
    pub fuse: std::process::Child,
    pub fuse_dir: std::path::PathBuf,
    pub loopdev: String,
    pub mnt: std::path::PathBuf,
}

impl Attached {
    /// Exposes `export` as a file with nbdfuse and attaches a loop device to it.
    pub fn new(d: &Daemon, export: &str) -> Attached {
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

    /// Mounts the loop device on its directory.
    pub fn mount(&self) {
        run("mount", &[&self.loopdev, self.mnt.to_str().unwrap()]);
    }

    /// Unmounts it.
    pub fn umount(&self) {
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

/// Runs `flexssd sim SUB ARGS...` (no daemon needed).
pub fn sim(sub: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(["sim", sub])
        .args(args)
        .output()
        .expect("run flexssd")
}

/// Like [`sim`]; panics with stderr unless it succeeds, returns stdout.
pub fn sim_ok(sub: &str, args: &[&str]) -> String {
    let out = sim(sub, args);
    assert!(
        out.status.success(),
        "flexssd sim {sub} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Like [`sim`]; panics unless it fails, returns stderr.
pub fn sim_fails(sub: &str, args: &[&str]) -> String {
    let out = sim(sub, args);
    assert!(
        !out.status.success(),
        "flexssd sim {sub} {args:?} should fail"
    );
    String::from_utf8(out.stderr).unwrap()
}

/// A file system of the test's own, made with `mkfs` on a loop device over a
/// sparse image and mounted: where a daemon's data directory can live to
/// check the file backend on host file systems other than the one `/tmp` is
/// on. Unmounted and detached on drop (after the daemon using it: declare the
/// `HostFs` first).
pub struct HostFs {
    _dir: tempfile::TempDir,
    pub mnt: PathBuf,
    loopdev: String,
}

impl HostFs {
    /// A `bytes`-byte file system made by `mkfs` (the command and its flags;
    /// the device is appended), or why it cannot be made here.
    pub fn new(mkfs: &[&str], bytes: u64) -> Result<HostFs, String> {
        if !is_root() {
            return Err("needs root for losetup and mount".into());
        }
        if !Path::new("/dev/loop-control").exists() {
            return Err("no loop devices (/dev/loop-control)".into());
        }
        if !have(mkfs[0]) {
            return Err(format!("{} is not installed", mkfs[0]));
        }
        let dir = tempfile::Builder::new()
            .prefix("flexssd-hostfs")
            .tempdir()
            .unwrap();
        let img = dir.path().join("fs.img");
        std::fs::File::create(&img).unwrap().set_len(bytes).unwrap();
        let out = run("losetup", &["--find", "--show", img.to_str().unwrap()]);
        let loopdev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let fs = HostFs {
            _dir: dir,
            mnt,
            loopdev,
        };
        let mut args: Vec<&str> = mkfs[1..].to_vec();
        args.push(&fs.loopdev);
        run(mkfs[0], &args);
        run("mount", &[&fs.loopdev, fs.mnt.to_str().unwrap()]);
        Ok(fs)
    }
}

impl Drop for HostFs {
    fn drop(&mut self) {
        let _ = run_any("umount", &[self.mnt.to_str().unwrap()]);
        let _ = run_any("losetup", &["-d", &self.loopdev]);
    }
}

/// A libnbd Python script: on the export `argv[1]`, writes 1 MiB of 0xab at
/// 1 MiB, asks for a fast zero of it (`NBD_CMD_FLAG_FAST_ZERO`), then a plain
/// one. Prints the outcome of the fast zero (`zeroed` or `enotsup`) and what
/// the range then held (`zeros`, `kept` or `mixed`), then `plain` and the
/// same after the plain zero.
pub const FAST_ZERO_PY: &str = r#"
import errno, nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
assert h.can_zero() and h.can_fast_zero(), "fast zero is not advertised"
MiB = 1 << 20
pattern = b"\xab" * MiB
h.pwrite(pattern, MiB)
def held():
    d = h.pread(MiB, MiB)
    return "zeros" if d == bytes(MiB) else ("kept" if d == pattern else "mixed")
try:
    h.zero(MiB, MiB, nbd.CMD_FLAG_FAST_ZERO)
    outcome = "zeroed"
except nbd.Error as e:
    outcome = "enotsup" if e.errnum == errno.ENOTSUP else "error %s" % e
print(outcome, held())
h.zero(MiB, MiB)
print("plain", held())
h.shutdown()
"#;

/// Runs [`FAST_ZERO_PY`] with `py` on `uri` and returns its output.
pub fn fast_zero_outcome(py: &str, uri: &str) -> String {
    let out = Command::new(py)
        .args(["-c", FAST_ZERO_PY, uri])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fast zero script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
