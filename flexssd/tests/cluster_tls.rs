//! The fleet API over HTTPS with a token: two schedulers serve TLS, a create
//! sent to the follower is forwarded to the active one over HTTPS (trusting
//! `--peer-ca`), a wrong token gets 401, and a client that does not trust the
//! CA is told to give `--ca-file`. Needs etcd and openssl; skips saying which
//! is missing.

mod support;

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use support::{free_port, have, Daemon};

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The last `n` bytes of a log, for a failure message.
fn tail(p: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let cut = s.len().saturating_sub(n);
    let cut = (cut..=s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    s[cut..].to_string()
}

fn fleet(dir: &Path, url: &str, token: &str, ca: bool, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flexssd"));
    if ca {
        c.arg("--ca-file").arg(dir.join("ca.pem"));
    }
    c.arg("--cluster")
        .arg(url)
        .args(args)
        .env("FLEXSSD_TOKEN", token)
        .env_remove("FLEXSSD_CA_FILE")
        .output()
        .unwrap()
}

#[test]
fn fleet_api_over_https_with_a_token_forwards_to_the_active_scheduler() {
    require!(
        have("etcd"),
        "etcd is not installed (make test installs etcd-server)"
    );
    require!(
        have("openssl"),
        "openssl is not installed (make test installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=fleet-ca",
        ],
    );
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "s.key",
            "-out",
            "s.csr",
            "-subj",
            "/CN=scheduler",
        ],
    );
    std::fs::write(d.join("ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "s.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "s.pem",
            "-days",
            "2",
            "-extfile",
            "ext",
        ],
    );
    std::fs::write(d.join("token"), "fleet-secret-123\n").unwrap();

    let (cport, pport) = (free_port(), free_port());
    let etcd_url = format!("http://127.0.0.1:{cport}");
    let _etcd = Kill(
        Command::new("etcd")
            .arg("--name=e1")
            .arg(format!("--data-dir={}", d.join("etcd").display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{pport}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{pport}"
            ))
            .arg(format!("--initial-cluster=e1=http://127.0.0.1:{pport}"))
            .stdout(std::fs::File::create(d.join("etcd.log")).unwrap())
            .stderr(std::fs::File::create(d.join("etcd.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let nbd_port = free_port();
    let _host = Daemon::start_nbd(
        &format!(
            r#"
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

[cluster]
endpoints = ["{etcd_url}"]
host_id = "h1"
advertise_nbd = "127.0.0.1:{nbd_port}"
advertise_api = "http://127.0.0.1:1"
lease_ttl_s = 2
"#
        ),
        &format!("tcp = \"127.0.0.1:{nbd_port}\""),
        &[],
    );
    let mut scheds = Vec::new();
    let mut urls = Vec::new();
    for id in ["s1", "s2"] {
        let port = free_port();
        let log = std::fs::File::create(d.join(format!("{id}.log"))).unwrap();
        scheds.push(Kill(
            Command::new(env!("CARGO_BIN_EXE_flexssd"))
                .args(["cluster", "serve", "--ttl", "2", "--id", id])
                .arg(format!("--etcd={etcd_url}"))
                .arg(format!("--listen=127.0.0.1:{port}"))
                .arg("--tls-cert")
                .arg(d.join("s.pem"))
                .arg("--tls-key")
                .arg(d.join("s.key"))
                .arg("--api-token-file")
                .arg(d.join("token"))
                .arg("--peer-ca")
                .arg(d.join("ca.pem"))
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap(),
        ));
        urls.push(format!("https://127.0.0.1:{port}"));
    }
    let logs = || {
        ["s1", "s2"]
            .iter()
            .map(|id| std::fs::read_to_string(d.join(format!("{id}.log"))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    // Wait for a leader that sees the host, through either scheduler.
    let t0 = Instant::now();
    let mut last = vec![String::new(); urls.len()];
    let (active, follower) = loop {
        let mut found = None;
        for (i, u) in urls.iter().enumerate() {
            let out = fleet(
                d,
                u,
                "fleet-secret-123",
                true,
                &["cluster", "status", "--json"],
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            if v["active"] == true && v["hosts_alive"] == 1 {
                found = Some((i, 1 - i));
            }
            last[i] = format!(
                "{u}: {} {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if let Some(f) = found {
            break f;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no active scheduler seeing h1 within 60 s; the last answers:\n{}\nthe schedulers' logs:\n{}\netcd's log ends:\n{}\nthe host's log:\n{}",
            last.join("\n"),
            logs(),
            tail(&d.join("etcd.err"), 4000),
            _host.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = fleet(
        d,
        &urls[active],
        "fleet-secret-123",
        true,
        &["cluster", "status", "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["leader"]["api"]
            .as_str()
            .unwrap_or_default()
            .starts_with("https://"),
        "the active scheduler advertises its HTTPS URL: {v}"
    );

    // A create through the follower is forwarded over HTTPS and placed.
    let out = fleet(
        d,
        &urls[follower],
        "fleet-secret-123",
        true,
        &["vssd", "create", "v1", "--channels", "2"],
    );
    assert!(
        out.status.success(),
        "create through the follower: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        logs()
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("nbd://127.0.0.1:{nbd_port}/v1"))
    );

    // A wrong token is refused; so is a client that does not trust the CA.
    let out = fleet(d, &urls[follower], "wrong", true, &["vssd", "list"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid token"));
    let out = fleet(
        d,
        &urls[active],
        "fleet-secret-123",
        false,
        &["vssd", "list"],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--ca-file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
