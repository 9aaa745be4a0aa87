//! NBD over TLS with the real clients: libnbd's `nbdinfo` and `nbdcopy` with
//! `nbds+unix://` URIs and a PSK file, `qemu-img` with `tls-creds-psk` and
//! `tls-creds-x509` objects, and certificates made here by `openssl`. Each tenant
//! sees and opens only its own exports; a client without TLS, with a wrong key or
//! with an unknown certificate is refused. A test whose client is not installed
//! prints why and passes without running it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::MemDev;
use nbd::{Export, MapRegistry, PskKeys, Server, ServerConfig, Tls, TlsMode, TlsSetup};

mod support;
use support::Running;

const ALICE_KEY: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const BOB_KEY: &str = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0";

/// A TLS server with exports `alice-db` (alice's, the registry's default),
/// `bob-db` (bob's) and `shared` (no owner).
struct TlsServer(Running);

impl std::ops::Deref for TlsServer {
    type Target = Running;
    fn deref(&self) -> &Running {
        &self.0
    }
}

fn export(name: &str, owner: Option<&str>) -> Export {
    Export {
        name: name.into(),
        description: format!("{name}'s disk"),
        dev: Arc::new(MemDev::new(64 << 20)),
        pace: None,
        gate: None,
        owner: owner.map(str::to_owned),
    }
}

impl TlsServer {
    /// Starts it in TLS mode `mode` with `setup`'s credentials.
    fn start(dir: tempfile::TempDir, mode: TlsMode, setup: TlsSetup, config: ServerConfig) -> Self {
        let tls = Tls::new(TlsSetup { mode, ..setup }).unwrap().map(Arc::new);
        Self(Running::start(
            dir,
            vec![
                export("alice-db", Some("alice")),
                export("bob-db", Some("bob")),
                export("shared", None),
            ],
            ServerConfig { tls, ..config },
        ))
    }

    /// A libnbd URI for `export` as PSK user `user` (keys in `psk`).
    fn psk_uri(&self, export: &str, user: &str, psk: &Path) -> String {
        format!(
            "nbds+unix://{user}@/{export}?socket={}&tls-psk-file={}",
            self.sock.display(),
            psk.display()
        )
    }
}

fn have(tool: &str) -> bool {
    let found = Command::new("which")
        .arg(tool)
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!(
            "SKIP: `{tool}` is not installed (make test installs it); this TLS test does not run"
        );
    }
    found
}

fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

fn ok(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        !out.status.success(),
        "{cmd:?} should have been refused: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn psk_server(mode: TlsMode, config: ServerConfig) -> (TlsServer, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.psk");
    std::fs::write(&keys, format!("alice:{ALICE_KEY}\nbob:{BOB_KEY}\n")).unwrap();
    let setup = TlsSetup {
        psk: Some(PskKeys::load(&keys).unwrap()),
        ..TlsSetup::default()
    };
    (TlsServer::start(dir, mode, setup, config), keys)
}

#[test]
fn psk_tenants_list_and_open_only_their_own_exports() {
    if !have("nbdinfo") || !have("nbdcopy") {
        return;
    }
    let (s, keys) = psk_server(TlsMode::Require, ServerConfig::default());
    // alice lists her export and the shared one, never bob's.
    let list =
        ok(Command::new("nbdinfo").args(["--list", "--json", &s.psk_uri("", "alice", &keys)]));
    assert!(list.contains("\"alice-db\""), "{list}");
    assert!(list.contains("\"shared\""), "{list}");
    assert!(
        !list.contains("bob-db"),
        "alice must not see bob's export: {list}"
    );
    // She opens hers; bob's is unknown to her.
    let info = ok(Command::new("nbdinfo").args(["--size", &s.psk_uri("alice-db", "alice", &keys)]));
    assert_eq!(info.trim(), (64u64 << 20).to_string());
    // The default export is the first one each tenant may see.
    for (user, theirs) in [("alice", "alice-db"), ("bob", "bob-db")] {
        let j = ok(Command::new("nbdinfo").args(["--json", &s.psk_uri("", user, &keys)]));
        assert!(
            j.contains(&format!("\"export-name\": \"{theirs}\"")),
            "{user}: {j}"
        );
    }
    let err = fails(Command::new("nbdinfo").args(["--size", &s.psk_uri("bob-db", "alice", &keys)]));
    assert!(
        err.contains("bob-db") || err.to_lowercase().contains("unknown"),
        "{err}"
    );
    // Data goes through TLS intact: nbdcopy in and out.
    let src = s.path("src.bin");
    let data: Vec<u8> = (0..(4u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    ok(Command::new("nbdcopy").args([
        src.to_str().unwrap(),
        &s.psk_uri("alice-db", "alice", &keys),
    ]));
    let back = s.path("back.bin");
    ok(Command::new("nbdcopy").args([
        &s.psk_uri("alice-db", "alice", &keys),
        back.to_str().unwrap(),
    ]));
    let got = std::fs::read(&back).unwrap();
    assert_eq!(
        &got[..data.len()],
        &data[..],
        "nbdcopy over TLS read back what it wrote"
    );
}

#[test]
fn clients_without_tls_or_with_a_wrong_key_are_refused() {
    if !have("nbdinfo") {
        return;
    }
    let (s, keys) = psk_server(TlsMode::Require, ServerConfig::default());
    // Plain NBD when TLS is required.
    let plain = format!("nbd+unix:///shared?socket={}", s.sock.display());
    // (libnbd reports NBD_REP_ERR_TLS_REQD as "not supported" for the export.)
    let err = fails(Command::new("nbdinfo").arg(&plain));
    assert!(err.contains("shared"), "{err}");
    let err = fails(Command::new("nbdinfo").args(["--list", &plain]));
    assert!(!err.contains("alice-db"), "{err}");
    // A wrong key for a known user, and an unknown user.
    let wrong = s.path("wrong.psk");
    std::fs::write(&wrong, format!("alice:{BOB_KEY}\ncarol:{ALICE_KEY}\n")).unwrap();
    fails(Command::new("nbdinfo").arg(s.psk_uri("shared", "alice", &wrong)));
    fails(Command::new("nbdinfo").arg(s.psk_uri("shared", "carol", &wrong)));
    // The right key still works afterwards.
    ok(Command::new("nbdinfo").arg(s.psk_uri("shared", "bob", &keys)));
}

#[test]
fn tls_on_lets_plain_clients_see_only_shared_exports() {
    if !have("nbdinfo") {
        return;
    }
    let (s, keys) = psk_server(TlsMode::On, ServerConfig::default());
    let plain = format!("nbd+unix:///?socket={}", s.sock.display());
    let list = ok(Command::new("nbdinfo").args(["--list", "--json", &plain]));
    assert!(list.contains("\"shared\""), "{list}");
    assert!(
        !list.contains("alice-db") && !list.contains("bob-db"),
        "{list}"
    );
    let list = ok(Command::new("nbdinfo").args(["--list", "--json", &s.psk_uri("", "bob", &keys)]));
    assert!(
        list.contains("\"bob-db\"") && !list.contains("alice-db"),
        "{list}"
    );
}

/// Makes a CA, a server certificate for localhost and client certificates for
/// `alice` (this CA) and `mallory` (another CA), with the openssl CLI.
fn make_certs(dir: &Path) -> bool {
    if !have("openssl") {
        return false;
    }
    let sh = |script: &str| {
        ok(Command::new("bash").arg("-ec").arg(script).current_dir(dir));
    };
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    sh(&format!(
        "openssl req -x509 {key} -keyout ca-key.pem -out ca-cert.pem -days 2 -subj /CN=flexssd-test-ca 2>/dev/null
         openssl req -x509 {key} -keyout evil-ca-key.pem -out evil-ca-cert.pem -days 2 -subj /CN=evil-ca 2>/dev/null
         printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > server.ext
         printf 'extendedKeyUsage=clientAuth\\n' > client.ext
         openssl req {key} -keyout server-key.pem -out server.csr -subj /CN=localhost 2>/dev/null
         openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -out server-cert.pem -days 2 -extfile server.ext 2>/dev/null
         for who in alice:ca mallory:evil-ca; do
           n=${{who%%:*}}; ca=${{who#*:}}
           mkdir -p $n
           openssl req {key} -keyout $n/client-key.pem -out $n.csr -subj /CN=$n 2>/dev/null
           openssl x509 -req -in $n.csr -CA $ca-cert.pem -CAkey $ca-key.pem -CAcreateserial -out $n/client-cert.pem -days 2 -extfile client.ext 2>/dev/null
           cp ca-cert.pem $n/ca-cert.pem
         done"
    ));
    true
}

#[test]
fn x509_client_certificates_name_the_tenant() {
    if !have("nbdinfo") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    if !make_certs(dir.path()) {
        return;
    }
    let certs = dir.path().to_path_buf();
    let setup = TlsSetup {
        certificates: Some(certs.clone()),
        verify_peer: true,
        ..TlsSetup::default()
    };
    let s = TlsServer::start(dir, TlsMode::Require, setup, ServerConfig::default());
    let uri = |export: &str, who: &str| {
        format!(
            "nbds+unix:///{export}?socket={}&tls-certificates={}",
            s.sock.display(),
            certs.join(who).display()
        )
    };
    let list = ok(Command::new("nbdinfo").args(["--list", "--json", &uri("", "alice")]));
    assert!(
        list.contains("\"alice-db\"") && !list.contains("bob-db"),
        "{list}"
    );
    ok(Command::new("nbdinfo").arg(uri("alice-db", "alice")));
    fails(Command::new("nbdinfo").arg(uri("bob-db", "alice")));
    // A certificate from a CA the server does not know.
    fails(Command::new("nbdinfo").arg(uri("shared", "mallory")));

    // qemu-img with an x509 credentials object.
    if have("qemu-img") {
        let out = ok(Command::new("qemu-img").args([
            "info",
            "--object",
            &format!(
                "tls-creds-x509,id=tls0,endpoint=client,dir={}",
                certs.join("alice").display()
            ),
            "--image-opts",
            &format!(
                "driver=nbd,path={},export=alice-db,tls-creds=tls0,tls-hostname=localhost",
                s.sock.display()
            ),
        ]));
        assert!(out.contains("64 MiB"), "{out}");
    }
}

#[test]
fn qemu_img_with_a_psk_credentials_object() {
    if !have("qemu-img") {
        return;
    }
    let (s, keys) = psk_server(TlsMode::Require, ServerConfig::default());
    // qemu reads `keys.psk` from the object's directory.
    let dir = s.path("qemu-psk");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&keys, dir.join("keys.psk")).unwrap();
    let info = |export: &str| {
        output(Command::new("qemu-img").args([
            "info",
            "--object",
            &format!(
                "tls-creds-psk,id=tls0,endpoint=client,dir={},username=alice",
                dir.display()
            ),
            "--image-opts",
            &format!(
                "driver=nbd,path={},export={export},tls-creds=tls0",
                s.sock.display()
            ),
        ]))
    };
    let out = info("alice-db");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("64 MiB"));
    assert!(
        !info("bob-db").status.success(),
        "alice opened bob's export"
    );
}

#[test]
fn idle_and_half_open_clients_do_not_lock_others_out() {
    if !have("nbdinfo") {
        return;
    }
    // Every client here is this test's uid, so the per-source cap would refuse
    // the well-behaved one too: this test is about the handshake timeout alone
    // (the cap has its own test in the crate's unit tests).
    let config = ServerConfig {
        handshake_timeout: Duration::from_millis(500),
        max_connections: 2048,
        max_handshakes_per_source: 0,
        ..ServerConfig::default()
    };
    let (s, keys) = psk_server(TlsMode::Require, config);
    // 1,000 connections that never finish the handshake, and one that sends
    // half an option header and stops.
    let mut idle: Vec<std::os::unix::net::UnixStream> = (0..1000)
        .map(|_| std::os::unix::net::UnixStream::connect(&s.sock).unwrap())
        .collect();
    let mut half = std::os::unix::net::UnixStream::connect(&s.sock).unwrap();
    let mut greeting = [0u8; 18];
    half.read_exact(&mut greeting).unwrap();
    half.write_all(&[0, 0, 0, 3, b'I', b'H', b'A']).unwrap();
    // A well-behaved tenant is still served at once.
    let t = Instant::now();
    ok(Command::new("nbdinfo").arg(s.psk_uri("alice-db", "alice", &keys)));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // After the handshake timeout the server has hung up on all of them.
    std::thread::sleep(Duration::from_millis(1500));
    half.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    assert_eq!(
        half.read_to_end(&mut rest).unwrap(),
        0,
        "half-open client cut off"
    );
    for c in idle.iter_mut().take(50) {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = Vec::new();
        // The greeting, then EOF.
        c.read_to_end(&mut buf).unwrap();
        assert_eq!(buf.len(), 18, "greeting then hang-up");
    }
}

#[test]
fn a_tenant_over_its_connection_limit_is_cut_off() {
    let py_ok = Command::new("/usr/bin/python3")
        .args(["-c", "import nbd"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !py_ok {
        eprintln!("SKIP: libnbd's Python bindings (python3-libnbd) are not installed; this TLS test does not run");
        return;
    }
    let config = ServerConfig {
        max_connections_per_tenant: 2,
        ..ServerConfig::default()
    };
    let (s, keys) = psk_server(TlsMode::Require, config);
    // libnbd's Python bindings hold connections open: two fit, the third is refused, bob is not
    // affected by alice's count.
    let script = format!(
        "import nbd\n\
         hs = []\n\
         for i in range(2):\n\
         \x20   h = nbd.NBD(); h.set_uri_allow_local_file(True); h.connect_uri({a:?}); hs.append(h)\n\
         try:\n\
         \x20   h = nbd.NBD(); h.set_uri_allow_local_file(True); h.connect_uri({a:?}); print('third: connected')\n\
         except nbd.Error as e:\n\
         \x20   print('third: refused')\n\
         h = nbd.NBD(); h.set_uri_allow_local_file(True); h.connect_uri({b:?}); print('bob: connected')\n",
        a = s.psk_uri("alice-db", "alice", &keys),
        b = s.psk_uri("bob-db", "bob", &keys),
    );
    let out = ok(Command::new("/usr/bin/python3").args(["-c", &script]));
    assert!(out.contains("third: refused"), "{out}");
    assert!(out.contains("bob: connected"), "{out}");
}

#[test]
fn tls_over_tcp_with_a_psk() {
    if !have("nbdinfo") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.psk");
    std::fs::write(&keys, format!("alice:{ALICE_KEY}\nbob:{BOB_KEY}\n")).unwrap();
    let reg = MapRegistry::new();
    reg.insert(export("alice-db", Some("alice")));
    reg.insert(export("bob-db", Some("bob")));
    let tls = Tls::new(TlsSetup {
        mode: TlsMode::Require,
        psk: Some(PskKeys::load(&keys).unwrap()),
        ..TlsSetup::default()
    })
    .unwrap()
    .map(Arc::new);
    let server = Server::new(
        Arc::new(reg),
        ServerConfig {
            tls,
            ..ServerConfig::default()
        },
    );
    let (stop, rx) = tokio::sync::watch::channel(false);
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            port_tx.send(l.local_addr().unwrap().port()).unwrap();
            server.serve_tcp(l, rx).await.unwrap();
        });
    });
    let port = port_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let uri = |user: &str, export: &str| {
        format!(
            "nbds://{user}@127.0.0.1:{port}/{export}?tls-psk-file={}",
            keys.display()
        )
    };
    let list = ok(Command::new("nbdinfo").args(["--list", "--json", &uri("alice", "")]));
    assert!(
        list.contains("\"alice-db\"") && !list.contains("bob-db"),
        "{list}"
    );
    ok(Command::new("nbdinfo").arg(uri("bob", "bob-db")));
    fails(Command::new("nbdinfo").arg(uri("bob", "alice-db")));
    // Plaintext over TCP is refused too.
    fails(Command::new("nbdinfo").arg(format!("nbd://127.0.0.1:{port}/alice-db")));
    let _ = stop.send(true);
    thread.join().unwrap();
}

/// The PSK fallback hole: with a SHA-384 TLS 1.3 suite, OpenSSL would drop a
/// PSK it cannot use without checking the client's binder and carry on with a
/// certificate handshake. The server offers only SHA-256 suites, so a client
/// that insists on SHA-384 gets no session at all.
#[test]
fn a_sha384_only_client_gets_no_session() {
    if !have("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    if !make_certs(dir.path()) {
        return;
    }
    let keys = dir.path().join("keys.psk");
    std::fs::write(&keys, format!("alice:{ALICE_KEY}\n")).unwrap();
    let certs = dir.path().to_path_buf();
    let setup = TlsSetup {
        psk: Some(PskKeys::load(&keys).unwrap()),
        certificates: Some(certs),
        ..TlsSetup::default()
    };
    let s = TlsServer::start(dir, TlsMode::Require, setup, ServerConfig::default());
    let handshake = |suites: &str| handshake_suite(&s.sock, suites).is_some();
    assert!(
        handshake("TLS_AES_128_GCM_SHA256"),
        "a SHA-256 suite works (the harness is sound)"
    );
    assert!(
        !handshake("TLS_AES_256_GCM_SHA384"),
        "a SHA-384-only client got a session"
    );
}

/// A TLS 1.3 handshake after NBD's STARTTLS with a client offering `suites`
/// in that order; the suite the server chose, or `None` without a session.
fn handshake_suite(sock: &std::path::Path, suites: &str) -> Option<String> {
    {
        let mut c = std::os::unix::net::UnixStream::connect(sock).unwrap();
        let mut greeting = [0u8; 18];
        c.read_exact(&mut greeting).unwrap();
        c.write_all(&3u32.to_be_bytes()).unwrap();
        let mut opt = b"IHAVEOPT".to_vec();
        opt.extend_from_slice(&5u32.to_be_bytes()); // NBD_OPT_STARTTLS
        opt.extend_from_slice(&0u32.to_be_bytes());
        c.write_all(&opt).unwrap();
        let mut ack = [0u8; 20];
        c.read_exact(&mut ack).unwrap();
        let mut b =
            openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls_client()).unwrap();
        b.set_min_proto_version(Some(openssl::ssl::SslVersion::TLS1_3))
            .unwrap();
        b.set_ciphersuites(suites).unwrap();
        b.set_verify(openssl::ssl::SslVerifyMode::NONE);
        let tls = b
            .build()
            .configure()
            .unwrap()
            .verify_hostname(false)
            .connect("localhost", c)
            .ok()?;
        tls.ssl().current_cipher().map(|c| c.name().to_string())
    }
}

/// The server picks the suite, AES-GCM first: a client that lists
/// ChaCha20-Poly1305 first (as GnuTLS clients do once AES-256-GCM is not
/// offered) still gets AES-128-GCM, which AES-NI makes several times cheaper
/// for both sides; a client with ChaCha20 only still gets a session.
#[test]
fn the_server_prefers_aes_gcm_to_chacha20() {
    if !have("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    if !make_certs(dir.path()) {
        return;
    }
    let setup = TlsSetup {
        certificates: Some(dir.path().to_path_buf()),
        ..TlsSetup::default()
    };
    let s = TlsServer::start(dir, TlsMode::Require, setup, ServerConfig::default());
    assert_eq!(
        handshake_suite(
            &s.sock,
            "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256"
        )
        .as_deref(),
        Some("TLS_AES_128_GCM_SHA256")
    );
    assert_eq!(
        handshake_suite(&s.sock, "TLS_CHACHA20_POLY1305_SHA256").as_deref(),
        Some("TLS_CHACHA20_POLY1305_SHA256")
    );
}
