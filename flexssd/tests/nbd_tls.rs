//! The daemon's NBD server with `[nbd] tls = "require"` and a PSK file, as an
//! operator configures it: real clients over TLS, refusals without it, and the
//! refusal to serve a non-loopback TCP address in plaintext.

mod support;

use std::process::Command;

use support::{cli_ok, have, Daemon, SMALL_DEVICE};

const KEY: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";
const KEY_B: &str = "b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5";

#[test]
fn the_daemon_serves_nbd_over_tls_only() {
    require!(have("nbdinfo"), "nbdinfo (libnbd-bin) is not installed");
    let keys_dir = tempfile::tempdir().unwrap();
    let keys = keys_dir.path().join("keys.psk");
    std::fs::write(&keys, format!("tenant-a:{KEY}\ntenant-b:{KEY_B}\n")).unwrap();
    let d = Daemon::start_nbd(
        SMALL_DEVICE,
        &format!(
            "tls = \"require\"\ntls_psk_file = \"{}\"\nhandshake_timeout_ms = 2000\n",
            keys.display()
        ),
        &[],
    );
    let tls_uri = format!(
        "nbds+unix://tenant-a@/default?socket={}&tls-psk-file={}",
        d.sock.display(),
        keys.display()
    );
    let out = Command::new("nbdinfo")
        .args(["--size", &tls_uri])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    // Each tenant lists its own vSSDs and the shared one (`default`), never
    // the other's, and cannot open the other's.
    cli_ok(
        &d,
        &[
            "vssd",
            "create",
            "a-db",
            "--channels",
            "1",
            "--tenant",
            "tenant-a",
        ],
    );
    cli_ok(
        &d,
        &[
            "vssd",
            "create",
            "b-db",
            "--channels",
            "1",
            "--tenant",
            "tenant-b",
        ],
    );
    let uri = |who: &str, export: &str| {
        format!(
            "nbds+unix://{who}@/{export}?socket={}&tls-psk-file={}",
            d.sock.display(),
            keys.display()
        )
    };
    let list = |who: &str| {
        let out = Command::new("nbdinfo")
            .args(["--list", "--json", &uri(who, "")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let a = list("tenant-a");
    assert!(
        a.contains("\"a-db\"") && a.contains("\"default\"") && !a.contains("b-db"),
        "{a}"
    );
    let b = list("tenant-b");
    assert!(b.contains("\"b-db\"") && !b.contains("a-db"), "{b}");
    let out = Command::new("nbdinfo")
        .arg(uri("tenant-a", "b-db"))
        .output()
        .unwrap();
    assert!(!out.status.success(), "tenant-a opened tenant-b's vSSD");
    let out = Command::new("nbdinfo")
        .arg(uri("tenant-b", "b-db"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Plaintext is refused.
    let out = Command::new("nbdinfo")
        .arg(d.uri("default"))
        .output()
        .unwrap();
    assert!(!out.status.success(), "plaintext client was served");
    // No key material in the log or the default config.
    assert!(!d.log().contains(KEY), "the PSK leaked into the log");
    let def = Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(["config", "default"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&def.stdout).contains(KEY));
}

/// Starts `flexssd serve` on a config whose `[nbd]` section is `nbd`, expects
/// it to refuse to start, and returns what it said.
fn refused_start(dir: &std::path::Path, nbd: &str) -> String {
    let cfg = dir.join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "data_dir = \"{}\"\n[api]\nlisten = \"127.0.0.1:0\"\n[nbd]\n{nbd}",
            dir.join("data").display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(["serve", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the daemon started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn plaintext_nbd_on_a_public_address_needs_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let err = refused_start(dir.path(), "tcp = \"0.0.0.0:0\"\n");
    assert!(
        err.contains("without TLS") && err.contains("--insecure"),
        "{err}"
    );
}

#[test]
fn a_bad_psk_file_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.psk");
    std::fs::write(&keys, "tenant-a:not-hex\n").unwrap();
    let err = refused_start(
        dir.path(),
        &format!("tls = \"require\"\ntls_psk_file = \"{}\"\n", keys.display()),
    );
    assert!(
        err.contains("tls_psk_file") && err.contains("line 1"),
        "{err}"
    );
}
