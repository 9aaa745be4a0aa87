//! The HTTP API with `[api] auth = "token"` (and HTTPS), as an operator turns
//! it on: the real daemon, its CLI, curl and a CA made with the openssl CLI.
//! Tenants see and change only their own vSSDs, harvest volumes, SLAs and
//! events, and cannot tell another tenant's from a missing one; bad, missing and revoked tokens get 401; oversized bodies 413
//! while other clients go on; no token reaches the log or the default
//! configuration; a public address needs tokens and TLS or `--insecure`.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

/// 8 channels × 2 dies × 16 blocks × 64 pages × 4 KiB = 64 MiB, in memory.
const SMALL: &str = r#"
[[devices]]
name = "ssd0"
backend = "memory"
[devices.geometry]
channels = 8
dies_per_channel = 2
blocks_per_plane = 16
pages_per_block = 64

[[vssds]]
name = "default"
channels = 2
"#;

const TOKEN_AUTH: &str = "auth = \"token\"\n";

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `flexssd token create` as the daemon's admin; returns the token.
fn new_token(d: &Daemon, tenant: &str, role: &str) -> String {
    let out = d.cli(&["token", "create", "--tenant", tenant, "--role", role]);
    assert!(out.status.success(), "{}", stderr(&out));
    let t = stdout(&out).trim().to_string();
    assert!(t.starts_with("fxs_"), "{t}");
    t
}

/// The names in a JSON list of objects with a `name`.
fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x["name"].as_str().unwrap().to_string())
        .collect()
}

/// Asks, as `token`, `method` on `path` with `{}` replaced by `theirs` (a
/// name another tenant uses) and then by `missing` (a name nobody uses), and
/// checks that both answers are the same: 404, and the same message once each
/// name is written as `NAME`. Returns that message.
fn same_as_missing(
    d: &Daemon,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    theirs: &str,
    missing: &str,
) -> String {
    let ask = |name: &str| {
        let (code, v) = http_as(
            d,
            Some(token),
            method,
            &path.replace("{}", name),
            body.cloned(),
        );
        let msg = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} ({name}): no error: {v}"))
            .replace(name, "NAME");
        (
            code,
            msg,
            v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
        )
    };
    let (a, b) = (ask(theirs), ask(missing));
    assert_eq!(
        a.0, 404,
        "{method} {path} on another tenant's {theirs}: {a:?}"
    );
    assert_eq!(
        a, b,
        "{method} {path}: another tenant's {theirs} is told apart from a missing {missing}"
    );
    a.1
}

fn vssd_names_as(d: &Daemon, token: &str) -> Vec<String> {
    let out = d.cli_as(Some(token), &["vssd", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    names(&serde_json::from_str(&stdout(&out)).unwrap())
}

#[test]
fn tenants_see_and_change_only_their_own_vssds() {
    let d = Daemon::start_api(SMALL, TOKEN_AUTH, None, "", &[]);
    let admin = d.token.clone().expect("the daemon wrote an admin token");
    // The bootstrap token file: the daemon's user only.
    let mode = std::fs::metadata(d.admin_token_path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "admin.token mode {mode:o}");
    assert!(d.log().contains("admin.token"), "{}", d.log());

    let a = new_token(&d, "tenant-a", "tenant");
    let b = new_token(&d, "tenant-b", "tenant");
    let ok = |t: &str, args: &[&str]| {
        let out = d.cli_as(Some(t), args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    ok(&a, &["vssd", "create", "a-db", "--channels", "1"]);
    ok(&b, &["vssd", "create", "b-db", "--channels", "1"]);
    // Each tenant lists its own; the admin sees both and the shared default.
    assert_eq!(vssd_names_as(&d, &a), ["a-db"]);
    assert_eq!(vssd_names_as(&d, &b), ["b-db"]);
    let mut all = vssd_names_as(&d, &admin);
    all.sort();
    assert_eq!(all, ["a-db", "b-db", "default"]);
    // A tenant's vSSD records its tenant.
    let (code, v) = http_as(&d, Some(&a), "GET", "/v1/vssds/a-db", None);
    assert_eq!((code, v["tenant"].as_str()), (200, Some("tenant-a")), "{v}");

    // A cannot touch B's vSSD, nor tell it from one that does not exist: every
    // route that names a vSSD answers as for a missing one, and B's survives.
    let sla = json!({"curve": [[0, 1000], [100, 0]]});
    for (method, path, body) in [
        ("GET", "/v1/vssds/{}", None),
        ("GET", "/v1/vssds/{}/stats", None),
        ("GET", "/v1/vssds/{}/sla", None),
        ("PUT", "/v1/vssds/{}/sla", Some(&sla)),
        ("PUT", "/v1/vssds/{}/sla", Some(&json!(null))),
        ("POST", "/v1/vssds/{}/latency/reset", None),
        ("GET", "/v1/vssds/{}/rates", None),
        ("DELETE", "/v1/vssds/{}", None),
    ] {
        let msg = same_as_missing(&d, &a, method, path, body, "b-db", "nope");
        assert_eq!(msg, "no vSSD named \"NAME\"", "{method} {path}");
        // The shared vSSD (no tenant) is not a tenant's either.
        same_as_missing(&d, &a, method, path, body, "default", "nope");
    }
    let out = d.cli_as(Some(&a), &["vssd", "delete", "b-db"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no vSSD named \"b-db\""),
        "{}",
        stderr(&out)
    );
    assert!(vssd_names_as(&d, &b).contains(&"b-db".to_string()));
    let (code, v) = http_as(&d, Some(&b), "GET", "/v1/vssds/b-db/sla", None);
    assert_eq!(code, 200, "B's SLA was left alone: {v}");
    // Names are global: creating one B uses is refused, the same way as
    // creating one A uses itself (409, saying only that it is taken).
    let create = |name: &str| {
        let (code, v) = http_as(
            &d,
            Some(&a),
            "POST",
            "/v1/vssds",
            Some(json!({"name": name, "channels": 1})),
        );
        (
            code,
            v["error"].as_str().unwrap_or("").replace(name, "NAME"),
        )
    };
    let taken = create("b-db");
    assert_eq!(taken.0, 409, "{taken:?}");
    assert_eq!(
        taken,
        create("a-db"),
        "a name B holds answers as one A holds"
    );
    assert!(!taken.1.contains("tenant-b"), "{taken:?}");
    // Its own SLA it may set.
    ok(&a, &["sla", "set", "a-db", "--sla-curve", "0:1000,100:0"]);
    // No vSSDs for someone else.
    let (code, v) = http_as(
        &d,
        Some(&a),
        "POST",
        "/v1/vssds",
        Some(json!({"name": "x", "channels": 1, "tenant": "tenant-b"})),
    );
    assert_eq!(code, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("tenant-b"), "{v}");
    // Host-wide routes and token management are the admin's.
    for path in [
        "/v1/devices",
        "/v1/tiers",
        "/v1/gssds",
        "/v1/harvest",
        "/v1/tokens",
    ] {
        let (code, v) = http_as(&d, Some(&a), "GET", path, None);
        assert_eq!(code, 403, "{path}: {v}");
        assert!(v["error"].as_str().unwrap().contains("admin"), "{v}");
    }
    let out = d.cli_as(Some(&a), &["token", "create", "--tenant", "tenant-a"]);
    assert!(!out.status.success() && stderr(&out).contains("admin token"));
    // Stats: its own vSSDs only, no devices.
    let (code, v) = http_as(&d, Some(&a), "GET", "/v1/stats", None);
    assert_eq!(code, 200);
    assert_eq!(names(&v["vssds"]), ["a-db"]);
    assert!(v["devices"].as_array().unwrap().is_empty(), "{v}");
    // A deletes its own.
    ok(&a, &["vssd", "delete", "a-db"]);
    assert!(vssd_names_as(&d, &a).is_empty());

    // The token list shows ids, tenants and roles, never a secret.
    let list = d.cli(&["token", "list"]);
    let text = stdout(&list);
    assert!(
        text.contains("tenant-a") && text.contains("admin"),
        "{text}"
    );
    for t in [&admin, &a, &b] {
        let secret = t.rsplit('_').next().unwrap();
        assert!(!text.contains(secret));
        assert!(!d.log().contains(secret), "a token leaked into the log");
    }
    let def = Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(["config", "default"])
        .output()
        .unwrap();
    assert!(!stdout(&def).contains("fxs_"));
}

#[test]
fn an_overlapping_placement_does_not_name_another_tenants_vssd() {
    let d = Daemon::start_api(SMALL, TOKEN_AUTH, None, "", &[]);
    let a = new_token(&d, "tenant-a", "tenant");
    let b = new_token(&d, "tenant-b", "tenant");
    let place = |t: &str, name: &str, blocks: &str| {
        http_as(
            &d,
            Some(t),
            "POST",
            "/v1/vssds",
            Some(json!({"name": name, "channel_ids": [3], "blocks": blocks})),
        )
    };
    let (code, v) = place(&b, "b-secret", "0..10");
    assert_eq!(code, 201, "{v}");
    // A meets B's flash: 409 with the channel and its own blocks only.
    let (code, v) = place(&a, "a-try", "6..16");
    assert_eq!(code, 409, "{v}");
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("channel 3") && msg.contains("6..16"), "{msg}");
    assert!(
        !msg.contains("b-secret") && !msg.contains("0..10"),
        "leaks: {msg}"
    );
    // The admin hears who owns it.
    let admin = d.token.clone().unwrap();
    let (code, v) = place(&admin, "admin-try", "6..16");
    assert_eq!(code, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("b-secret"), "{v}");
}

#[test]
fn missing_malformed_and_revoked_tokens_get_401() {
    let d = Daemon::start_api(SMALL, TOKEN_AUTH, None, "", &[]);
    let a = new_token(&d, "tenant-a", "tenant");
    assert_eq!(http_as(&d, Some(&a), "GET", "/v1/vssds", None).0, 200);
    // No token: 401 with a Bearer challenge and a message saying what to send.
    let r = d.request_as(None, "GET", "/v1/vssds").call();
    let Err(ureq::Error::Status(401, resp)) = r else {
        panic!("expected 401, got {r:?}");
    };
    assert!(resp
        .header("WWW-Authenticate")
        .is_some_and(|h| h.starts_with("Bearer")));
    let body: Value = resp.into_json().unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer"),
        "{body}"
    );
    let out = d.cli_as(None, &["vssd", "list"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("authentication required"),
        "{}",
        stderr(&out)
    );
    // Malformed and made-up tokens.
    let fake = format!("fxs_{}_{}", "0".repeat(16), "0".repeat(64));
    for t in ["nonsense", fake.as_str()] {
        let (code, v) = http_as(&d, Some(t), "GET", "/v1/vssds", None);
        assert_eq!(code, 401, "{t}: {v}");
    }
    // Revoked: 401 from the next request on, and the CLI says why.
    let id = &a[4..20];
    let out = d.cli(&["token", "revoke", id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (code, v) = http_as(&d, Some(&a), "GET", "/v1/vssds", None);
    assert_eq!(code, 401, "{v}");
    assert!(v["error"].as_str().unwrap().contains("revoked"), "{v}");
    let out = d.cli_as(Some(&a), &["vssd", "list"]);
    assert!(!out.status.success() && stderr(&out).contains("revoked"));
    // Revoking it again: 404 naming the id.
    let out = d.cli(&["token", "revoke", id]);
    assert!(!out.status.success() && stderr(&out).contains(id));
    // With tokens on, the metrics need an admin's by default (they name
    // every tenant's vSSDs).
    assert_eq!(http_as(&d, None, "GET", "/metrics", None).0, 401);
}

#[test]
fn metrics_can_be_opened_to_scrapers() {
    let d = Daemon::start_api(
        SMALL,
        "auth = \"token\"\nmetrics_auth = false\n",
        None,
        "",
        &[],
    );
    assert_eq!(http_as(&d, None, "GET", "/metrics", None).0, 200);
    assert_eq!(http_as(&d, None, "GET", "/v1/vssds", None).0, 401);
}

#[test]
fn metrics_auth_needs_an_admin_token() {
    let d = Daemon::start_api(
        SMALL,
        "auth = \"token\"\nmetrics_auth = true\n",
        None,
        "",
        &[],
    );
    let a = new_token(&d, "tenant-a", "tenant");
    assert_eq!(http_as(&d, None, "GET", "/metrics", None).0, 401);
    assert_eq!(http_as(&d, Some(&a), "GET", "/metrics", None).0, 403);
    let (code, text) = http(&d, "GET", "/metrics", None);
    assert_eq!(code, 200);
    assert!(text.as_str().unwrap().contains("flexssd_vssd"), "{text}");
}

/// Harvest volumes and events belong to the owner of their harvest tenant.
#[test]
fn tenants_see_only_their_harvest_volumes_and_events() {
    let body = r#"
[[devices]]
name = "ssd0"
backend = "memory"
[devices.geometry]
channels = 8
dies_per_channel = 2
planes_per_die = 1
blocks_per_plane = 64
pages_per_block = 32
page_size = 4096

[[vssds]]
name = "lender"
channel_ids = [0, 1]

[[vssds]]
name = "hv-a"
channel_ids = [4]
role = "harvest"
tenant = "tenant-a"

[[vssds]]
name = "hv-b"
channel_ids = [5]
role = "harvest"
tenant = "tenant-b"

[harvest]
enabled = true
policy = "fixed"
tick_ms = 100
granule_s = 60
reclaim_horizon_s = 60
lend_for_s = 600
unsold = false
"#;
    let d = Daemon::start_api(body, TOKEN_AUTH, None, "", &[]);
    let a = new_token(&d, "tenant-a", "tenant");
    let b = new_token(&d, "tenant-b", "tenant");
    let t0 = Instant::now();
    while http(&d, "GET", "/v1/gssds", None)
        .1
        .as_array()
        .is_none_or(|g| g.is_empty())
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "no gSSD was lent");
        std::thread::sleep(Duration::from_millis(100));
    }
    let req = |tenant: &str| json!({"name": "vol-a", "tenant": tenant, "capacity": "1M"});
    // A cannot harvest as B's harvest tenant, nor tell it from a missing
    // one, with a good request or with a bad one; it can as its own.
    let ask = |tenant: &str, name: &str, cap: &str| {
        let (code, v) = http_as(
            &d,
            Some(&a),
            "POST",
            "/v1/harvest/volumes",
            Some(json!({"name": name, "tenant": tenant, "capacity": cap})),
        );
        (
            code,
            v["error"].as_str().unwrap_or("").replace(tenant, "NAME"),
        )
    };
    for (name, cap) in [
        ("vol-a", "1M"),
        ("bad name!", "1M"),
        ("vol-a", "0"),
        ("hv-a", "1M"),
    ] {
        assert_eq!(
            ask("hv-b", name, cap),
            ask("no-such-hv", name, cap),
            "harvest request {name:?} {cap}"
        );
    }
    assert_eq!(ask("hv-b", "vol-a", "1M").0, 404);
    let (code, v) = http_as(
        &d,
        Some(&a),
        "POST",
        "/v1/harvest/volumes",
        Some(req("hv-a")),
    );
    assert_eq!(code, 201, "{v}");
    // B neither sees nor releases it; A and the admin see it.
    let list = |t: &str| names(&http_as(&d, Some(t), "GET", "/v1/harvest/volumes", None).1);
    assert!(list(&b).is_empty());
    assert_eq!(list(&a), ["vol-a"]);
    assert_eq!(
        names(&http(&d, "GET", "/v1/harvest/volumes", None).1),
        ["vol-a"]
    );
    for method in ["GET", "DELETE"] {
        let msg = same_as_missing(
            &d,
            &b,
            method,
            "/v1/harvest/volumes/{}",
            None,
            "vol-a",
            "nope",
        );
        assert_eq!(msg, "no harvest volume named \"NAME\"", "{method}");
    }
    // B's vSSD is as unknown to A here too: its rates and SLA.
    same_as_missing(&d, &a, "GET", "/v1/vssds/{}/rates", None, "hv-b", "nope");
    // Events: A's are all about its volume or its vSSDs; B gets none of them;
    // the admin gets every one.
    let events = |t: Option<&str>| {
        http_as(&d, t, "GET", "/v1/events", None)
            .1
            .as_array()
            .unwrap()
            .clone()
    };
    let ea = events(Some(&a));
    assert!(
        ea.iter().any(|e| e["volume"] == "vol-a"),
        "no event about vol-a: {ea:?}"
    );
    assert!(
        ea.iter()
            .all(|e| e["volume"] == "vol-a" || e["home"] == "hv-a"),
        "{ea:?}"
    );
    assert!(events(Some(&b)).iter().all(|e| e["volume"] != "vol-a"));
    let all = events(d.token.as_deref());
    assert!(all.len() >= ea.len() && all.iter().any(|e| e["home"] == "lender"));
    // A releases its volume.
    let out = d.cli_as(Some(&a), &["harvest", "release", "vol-a"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn oversized_bodies_get_413_while_other_clients_are_served() {
    require!(have("curl"), "curl is not installed");
    let d = Daemon::start_api(
        SMALL,
        "auth = \"token\"\nmax_body_bytes = \"64K\"\n",
        None,
        "",
        &[],
    );
    let admin = d.token.clone().unwrap();
    let big = d.path().join("big.json");
    // Valid JSON, just too big: a vSSD spec padded with white space.
    let mut text = String::from("{\"name\": \"big\", \"channels\": 1");
    text.push_str(&" ".repeat(2 << 20));
    text.push('}');
    std::fs::write(&big, text).unwrap();
    let url = format!("{}/v1/vssds", d.api);
    let auth = format!("Authorization: Bearer {admin}");
    let post = |extra: &[&str]| {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "60", "-o", "-", "-w", "\n%{http_code}"])
            .args(["-H", &auth])
            .args(["-H", "Content-Type: application/json"])
            .args(extra)
            .args(["--data-binary", &format!("@{}", big.display()), &url])
            .output()
            .unwrap();
        let text = stdout(&out);
        let (body, code) = text.trim().rsplit_once('\n').unwrap_or(("", text.trim()));
        (code.to_string(), body.to_string())
    };
    // Another client keeps working while big bodies come in. Nothing in the
    // scope asserts, so a failure cannot leave the other client spinning.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (refusals, served) = std::thread::scope(|s| {
        let other = s.spawn(|| {
            let t0 = Instant::now();
            let mut codes = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && t0.elapsed() < Duration::from_secs(120)
            {
                codes.push(http(&d, "GET", "/v1/vssds", None).0);
                std::thread::sleep(Duration::from_millis(5));
            }
            codes
        });
        let mut refusals = Vec::new();
        for _ in 0..5 {
            // With a length (refused before the body is read) and chunked
            // (cut off as it is read): both 413 naming the limit.
            for extra in [
                &["-H", "Expect: 100-continue"][..],
                &["-H", "Transfer-Encoding: chunked"][..],
            ] {
                refusals.push((extra, post(extra)));
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (refusals, other.join())
    });
    for (extra, (code, body)) in refusals {
        assert_eq!(code, "413", "{extra:?}: {body}");
        assert!(body.contains("max_body_bytes"), "{body}");
    }
    let served = served.expect("the other client failed");
    assert!(
        !served.is_empty() && served.iter().all(|&c| c == 200),
        "{served:?}"
    );
    // A body within the limit still works, and nothing big was created.
    let (code, v) = http(
        &d,
        "POST",
        "/v1/vssds",
        Some(json!({"name": "small", "channels": 1})),
    );
    assert_eq!(code, 201, "{v}");
    assert!(!d.get("/v1/vssds").unwrap().contains("\"big\""));
}

/// A CA, and a server certificate for 127.0.0.1 and localhost signed by it,
/// made with the openssl CLI in `dir`: (CA certificate, server certificate,
/// server key).
fn make_pki(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run(
        "openssl",
        &[
            &["req", "-x509"][..],
            &ec[..],
            &[
                "-keyout",
                &p("ca.key"),
                "-out",
                &p("ca.pem"),
                "-days",
                "2",
                "-subj",
                "/CN=flexssd-test-ca",
            ],
        ]
        .concat(),
    );
    run(
        "openssl",
        &[
            &["req"][..],
            &ec[..],
            &[
                "-keyout",
                &p("server.key"),
                "-out",
                &p("server.csr"),
                "-subj",
                "/CN=localhost",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    run(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            &p("server.csr"),
            "-CA",
            &p("ca.pem"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-out",
            &p("server.pem"),
            "-days",
            "2",
            "-extfile",
            &p("san.ext"),
        ],
    );
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

#[test]
fn https_with_a_private_ca() {
    require!(have("openssl"), "the openssl CLI is not installed");
    let pki = tempfile::tempdir().unwrap();
    let (ca, cert, key) = make_pki(pki.path());
    let api = format!(
        "auth = \"token\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let d = Daemon::start_api(SMALL, &api, Some(&ca), "", &[]);
    assert!(d.api.starts_with("https://"));
    // The CLI over HTTPS, trusting the CA through FLEXSSD_CA_FILE (the
    // harness) and through --ca-file.
    let out = cli_ok(&d, &["vssd", "list"]);
    assert!(out.contains("default"), "{out}");
    let token_file = d.admin_token_path();
    let out = Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(["--api", &d.api, "--ca-file", ca.to_str().unwrap()])
        .args(["--token-file", token_file.to_str().unwrap()])
        .args(["vssd", "create", "tls-db", "--channels", "1"])
        .env_remove("FLEXSSD_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // Without the CA the CLI refuses the certificate and says what to do.
    let out = Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(["--api", &d.api, "vssd", "list"])
        .env("FLEXSSD_TOKEN", d.token.as_deref().unwrap())
        .env_remove("FLEXSSD_CA_FILE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--ca-file"), "{}", stderr(&out));
    if have("curl") {
        let auth = format!("Authorization: Bearer {}", d.token.as_deref().unwrap());
        let url = format!("{}/v1/vssds", d.api);
        let out = Command::new("curl")
            .args([
                "-sS",
                "--fail",
                "--cacert",
                ca.to_str().unwrap(),
                "-H",
                &auth,
                &url,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("tls-db"));
        // curl without the CA, and plain HTTP to the HTTPS port, fail.
        let out = Command::new("curl")
            .args(["-sS", "-H", &auth, &url])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let plain = url.replacen("https://", "http://", 1);
        let out = Command::new("curl")
            .args(["-sS", "--fail", "-H", &auth, &plain])
            .output()
            .unwrap();
        assert!(!out.status.success());
    }
    assert!(d.log().contains("https://"), "{}", d.log());
}

#[test]
fn a_public_api_address_needs_tokens_and_tls_or_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let write = |api: &str| {
        let cfg = dir.path().join("c.toml");
        std::fs::write(
            &cfg,
            format!(
                "data_dir = \"{}\"\n[api]\nlisten = \"0.0.0.0:0\"\n{api}",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        cfg
    };
    for api in ["", "auth = \"token\"\n"] {
        let cfg = write(api);
        let out = Command::new(env!("CARGO_BIN_EXE_flexssd"))
            .args(["serve", "--config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{api:?}");
        let err = stderr(&out);
        assert!(
            err.contains("without authentication and TLS") && err.contains("--insecure"),
            "{err}"
        );
    }
    // A bad key file stops the start naming the key and the file.
    let cfg = write(&format!(
        "auth = \"token\"\ntls_cert = \"{0}/none.pem\"\ntls_key = \"{0}/none.key\"\n",
        dir.path().display()
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(["serve", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("[api] tls_cert") && err.contains("none.pem"),
        "{err}"
    );
}
