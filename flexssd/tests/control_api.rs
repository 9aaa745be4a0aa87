//! Black-box tests of the daemon's control plane: the real `flexssd` binary on a
//! private data directory, driven through its CLI and its HTTP API. (Real NBD
//! clients are exercised by the other test files.)

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod support;
use support::free_port;

/// 8 channels × 2 dies × 16 blocks × 64 pages × 4 KiB = 64 MiB, 8 MiB per channel.
const SMALL: &str = r#"
[[devices]]
name = "ssd0"
[devices.geometry]
channels = 8
dies_per_channel = 2
blocks_per_plane = 16
pages_per_block = 64

[[vssds]]
name = "default"
channels = 4
"#;

/// A daemon on a temporary data directory; killed on drop.
struct Daemon {
    dir: tempfile::TempDir,
    child: Option<Child>,
    api: String,
    config: PathBuf,
    extra: Vec<String>,
}

impl Daemon {
    fn start() -> Daemon {
        Self::start_with(SMALL, &[])
    }

    fn start_with(body: &str, extra: &[&str]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("flexssd-ctl")
            .tempdir()
            .unwrap();
        let port = free_port();
        let config = dir.path().join("flexssd.toml");
        let text = format!(
            "data_dir = \"{}\"\n[api]\nlisten = \"127.0.0.1:{port}\"\n{body}",
            dir.path().join("data").display()
        );
        std::fs::write(&config, text).unwrap();
        // An --api flag overrides the configured address.
        let api = match extra.iter().position(|a| *a == "--api") {
            Some(i) => format!("http://{}", extra[i + 1]),
            None => format!("http://127.0.0.1:{port}"),
        };
        let mut d = Daemon {
            dir,
            child: None,
            api,
            config,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        d.spawn();
        d
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    fn command(&self) -> Command {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("daemon.log"))
            .unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_flexssd"));
        c.arg("serve")
            .arg("--config")
            .arg(&self.config)
            .args(&self.extra);
        c.stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null());
        c
    }

    fn spawn(&mut self) {
        self.child = Some(self.command().spawn().expect("start flexssd"));
        let t0 = Instant::now();
        loop {
            if http(&self.api, "GET", "/v1/vssds", None).0 == 200 {
                return;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited with {st}; log:\n{}", self.log());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "daemon did not come up; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, and the daemon must exit cleanly.
    fn stop(&mut self) {
        let mut c = self.child.take().unwrap();
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = c.try_wait().unwrap() {
                break st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "daemon ignored SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            st.success(),
            "daemon exited with {st} after SIGTERM; log:\n{}",
            self.log()
        );
    }

    /// SIGKILL: a crash.
    fn kill9(&mut self) {
        let mut c = self.child.take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }

    fn cli(&self, args: &[&str]) -> Output {
        cli_at(&self.api, args)
    }

    /// Runs the CLI, which must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "flexssd {args:?} failed:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs the CLI, which must fail with a one-line error containing `want`.
    fn fails(&self, args: &[&str], want: &str) {
        let out = self.cli(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "flexssd {args:?} should fail");
        assert!(
            err.contains(want),
            "flexssd {args:?}: expected {want:?} in:\n{err}"
        );
    }

    fn http(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let (code, text) = http(&self.api, method, path, body);
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    fn names(&self) -> Vec<String> {
        let v: Value = serde_json::from_str(&self.ok(&["vssd", "list", "--json"])).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_string())
            .collect()
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

fn cli_at(api: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(args)
        .env("FLEXSSD_API", api)
        .output()
        .unwrap()
}

/// One HTTP request; (status, body). Status 0 when the server cannot be reached.
fn http(api: &str, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let req = ureq::request(method, &format!("{api}{path}")).timeout(Duration::from_secs(60));
    let r = match body {
        Some(b) => req.send_string(&b.to_string()),
        None => req.call(),
    };
    match r {
        Ok(resp) => (resp.status(), resp.into_string().unwrap()),
        Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap()),
        Err(_) => (0, String::new()),
    }
}

#[test]
fn cli_creates_lists_shows_and_deletes_vssds() {
    let d = Daemon::start();
    let list = d.ok(&["vssd", "list"]);
    let header = list.lines().next().unwrap();
    assert!(
        header.starts_with("NAME") && header.contains("CHANNELS") && header.contains("CAPACITY"),
        "{list}"
    );
    assert!(
        list.lines()
            .any(|l| l.starts_with("default") && l.contains("0-3")),
        "{list}"
    );

    let out = d.ok(&["vssd", "create", "a", "--channels", "2", "--capacity", "4M"]);
    assert!(
        out.contains("created vSSD a") && out.contains("channels 4-5") && out.contains("4M"),
        "{out}"
    );
    assert!(out.contains("nbd+unix:///a?socket="), "{out}");
    d.ok(&[
        "vssd",
        "create",
        "b",
        "--channel-ids",
        "6,7",
        "--blocks",
        "0..8",
        "--gc",
        "cost-benefit",
    ]);
    d.ok(&[
        "vssd",
        "create",
        "c",
        "--channel-ids",
        "7",
        "--blocks",
        "8..16",
    ]);

    let v: Value = serde_json::from_str(&d.ok(&["vssd", "list", "--json"])).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c", "default"]);
    assert_eq!(v[0]["capacity_bytes"], 4 << 20);
    assert_eq!(v[0]["channels"], json!([4, 5]));
    assert_eq!(v[1]["gc"], "cost-benefit");
    assert_eq!(
        v[1]["extents"][0],
        json!({"channel": 6, "first_block": 0, "blocks": 8})
    );
    assert_eq!(v[3]["state"], "active");

    let show = d.ok(&["vssd", "show", "a"]);
    assert!(
        show.contains("capacity:    4M") && show.contains("channels:    4-5"),
        "{show}"
    );
    assert!(show.contains("write amp."), "{show}");
    let s: Value = serde_json::from_str(&d.ok(&["vssd", "show", "b", "--json"])).unwrap();
    assert_eq!(s["name"], "b");
    assert_eq!(s["stats"]["io"]["writes"], 0);

    let dev = d.ok(&["device", "list"]);
    assert!(dev.lines().any(|l| l.starts_with("ssd0")), "{dev}");
    let dev: Value = serde_json::from_str(&d.ok(&["device", "list", "--json"])).unwrap();
    assert_eq!(dev[0]["free_channels"], json!([]));
    assert_eq!(dev[0]["geometry"]["channels"], 8);
    assert_eq!(dev[0]["raw_bytes"], 64 << 20);

    let st: Value = serde_json::from_str(&d.ok(&["stats", "--json"])).unwrap();
    assert_eq!(st["vssds"].as_array().unwrap().len(), 4);
    assert!(d.ok(&["stats"]).contains("default"));

    let out = d.ok(&["vssd", "delete", "a"]);
    assert!(out.contains("deleted vSSD a"), "{out}");
    assert_eq!(d.names(), ["b", "c", "default"]);
    let dev: Value = serde_json::from_str(&d.ok(&["device", "list", "--json"])).unwrap();
    assert_eq!(dev[0]["free_channels"], json!([4, 5]));
    // The freed channels go to the next tenant.
    let out = d.ok(&["--api", &d.api, "vssd", "create", "e", "--channels", "2"]);
    assert!(out.contains("channels 4-5"), "{out}");
}

#[test]
fn cli_errors_are_clear() {
    let d = Daemon::start();
    d.fails(
        &["vssd", "create", "default", "--channels", "1"],
        "already exists",
    );
    d.fails(
        &["vssd", "create", "x", "--channels", "5"],
        "not enough free channels: 5 requested, 4 free",
    );
    d.fails(
        &["vssd", "create", "x", "--channels", "1", "--capacity", "1G"],
        "is more than the",
    );
    d.fails(
        &["vssd", "create", "a/b", "--channels", "1"],
        "invalid vSSD name",
    );
    d.fails(
        &[
            "vssd",
            "create",
            "x",
            "--channels",
            "1",
            "--capacity",
            "12Q",
        ],
        "invalid size",
    );
    d.fails(
        &[
            "vssd",
            "create",
            "x",
            "--channel-ids",
            "0",
            "--blocks",
            "0..8",
        ],
        "overlaps vSSD \"default\"",
    );
    d.fails(
        &["vssd", "create", "x", "--channel-ids", "9"],
        "does not exist",
    );
    d.fails(
        &["vssd", "create", "x", "--channels", "1", "--gc", "fifo"],
        "unknown GC policy",
    );
    d.fails(&["vssd", "show", "nope"], "no vSSD named \"nope\"");
    d.fails(&["vssd", "delete", "nope"], "no vSSD named \"nope\"");
    // Nothing was created by the failures.
    assert_eq!(d.names(), ["default"]);
}

#[test]
fn cli_without_a_daemon_says_how_to_start_one() {
    let api = format!("http://127.0.0.1:{}", free_port());
    for args in [
        &["vssd", "list"][..],
        &["device", "list"],
        &["stats"],
        &["vssd", "create", "x", "--channels", "1"],
    ] {
        let out = cli_at(&api, args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("cannot reach the flexssd daemon") && err.contains("flexssd serve"),
            "{err}"
        );
    }
}

#[test]
fn config_default_prints_the_builtin_configuration() {
    let out = cli_at("http://unused", &["config", "default"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let cfg = control::Config::from_toml(&text).unwrap();
    assert_eq!(cfg, control::Config::default());
    assert_eq!(cfg.devices[0].name, "ssd0");
    assert_eq!(cfg.vssds[0].name, "default");
}

#[test]
fn http_api_status_codes_and_errors() {
    let d = Daemon::start();
    let (code, v) = d.http(
        "POST",
        "/v1/vssds",
        Some(json!({"name": "a", "channels": 1, "capacity": "2M"})),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["capacity_bytes"], 2 << 20);
    let (code, v) = d.http(
        "POST",
        "/v1/vssds",
        Some(json!({"name": "p", "channel_ids": [5, 6], "blocks": "0..8"})),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["channels"], json!([5, 6]));

    let cases = [
        (json!({"name": "a", "channels": 1}), 409, "already exists"),
        (
            json!({"name": "x", "channels": 3}),
            507,
            "not enough free channels",
        ),
        (
            json!({"name": "x", "channels": 1, "capacity": "1T"}),
            400,
            "is more than",
        ),
        (
            json!({"name": "bad name", "channels": 1}),
            400,
            "invalid vSSD name",
        ),
        (
            json!({"name": "x", "channels": 1, "capacity": "lots"}),
            400,
            "invalid size",
        ),
        (
            json!({"name": "x", "channels": 1, "colour": "red"}),
            400,
            "unknown field",
        ),
        (
            json!({"name": "x", "channel_ids": [6], "blocks": "4..12"}),
            409,
            "overlaps vSSD \"p\"",
        ),
        (
            json!({"name": "x", "channel_ids": [7], "blocks": "0..99"}),
            400,
            "outside",
        ),
        (
            json!({"name": "x", "channel_ids": [7], "blocks": "0..4"}),
            400,
            "block range 0..4 is too small to export anything",
        ),
        (
            json!({"name": "x", "channel_ids": [7], "blocks": "0..4"}),
            400,
            "give at least 6 blocks per plane",
        ),
        (
            json!({"name": "x", "channels": 1, "gc": "fifo"}),
            400,
            "unknown variant",
        ),
        (
            json!({"name": "x", "channels": 1, "device": "ssd9"}),
            404,
            "no device named",
        ),
        (json!({"name": "x"}), 400, "channels"),
    ];
    for (body, want_code, want) in cases {
        let (code, v) = d.http("POST", "/v1/vssds", Some(body.clone()));
        assert_eq!(code, want_code, "{body} -> {v}");
        let msg = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{body}: no error field in {v}"));
        assert!(msg.contains(want), "{body}: expected {want:?} in {msg:?}");
    }
    let (code, text) = http(&d.api, "POST", "/v1/vssds", None);
    assert_eq!(code, 400, "{text}");
    let (code, v) = d.http("GET", "/v1/vssds/nope", None);
    assert_eq!(
        (code, v["error"].as_str().unwrap()),
        (404, "no vSSD named \"nope\"")
    );
    assert_eq!(d.http("DELETE", "/v1/vssds/nope", None).0, 404);
    assert_eq!(d.http("GET", "/v1/nothing", None).0, 404);
    // Bad query strings, path numbers and methods are JSON errors that say
    // what is wrong, like every other error of the API.
    for (method, path, want_code, want) in [
        (
            "GET",
            "/v1/events?since=abc",
            400,
            "since = \"abc\" is not a sequence number",
        ),
        (
            "GET",
            "/v1/events?since=-1",
            400,
            "since = \"-1\" is not a sequence number",
        ),
        (
            "GET",
            "/v1/events?since=99999999999999999999",
            400,
            "number too large",
        ),
        ("GET", "/v1/events?sinse=1", 400, "unknown field `sinse`"),
        (
            "PUT",
            "/v1/devices/ssd0/curves/abc",
            400,
            "/v1/devices/ssd0/curves/abc: Invalid URL: Cannot parse `channels`",
        ),
        (
            "PATCH",
            "/v1/vssds",
            405,
            "method PATCH is not allowed on /v1/vssds",
        ),
    ] {
        let body = (method == "PUT").then(|| json!({}));
        let (code, v) = d.http(method, path, body);
        assert_eq!(code, want_code, "{method} {path} -> {v}");
        let msg = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path}: no error field in {v}"));
        assert!(
            msg.contains(want),
            "{method} {path}: expected {want:?} in {msg:?}"
        );
    }
    let Err(ureq::Error::Status(405, resp)) =
        ureq::request("PATCH", &format!("{}/v1/vssds", d.api)).call()
    else {
        panic!("PATCH /v1/vssds was not a 405");
    };
    let allow = resp.header("allow").unwrap_or_default().to_owned();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    let body = resp.into_string().unwrap();
    assert!(body.contains(&allow), "{allow} not in {body}");

    let (code, v) = d.http("GET", "/v1/vssds/a", None);
    assert_eq!(code, 200);
    assert_eq!(
        (v["name"].as_str(), v["device"].as_str()),
        (Some("a"), Some("ssd0"))
    );
    assert_eq!(v["stats"]["ftl"]["capacity_bytes"], 2 << 20);
    let (code, v) = d.http("GET", "/v1/devices", None);
    assert_eq!(code, 200);
    assert_eq!(v[0]["used_channels"], json!([0, 1, 2, 3, 4, 5, 6]));
    assert_eq!(v[0]["erase_count"]["min"], 0);
    let (code, v) = d.http("GET", "/v1/stats", None);
    assert_eq!(code, 200);
    assert_eq!(v["vssds"].as_array().unwrap().len(), 3);
    assert_eq!(v["devices"][0]["name"], "ssd0");
    let (code, v) = d.http("DELETE", "/v1/vssds/a", None);
    assert_eq!((code, &v["deleted"]), (200, &json!("a")));
    assert_eq!(d.http("GET", "/v1/vssds/a", None).0, 404);
    // The harvester is off by default: a tick on request is a conflict with
    // the daemon's state (not bad input), and the message says how to turn it on.
    let (code, v) = d.http("POST", "/v1/harvest/tick", None);
    assert_eq!(code, 409, "{v}");
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains("harvester is off") && msg.contains("enabled = true"),
        "{msg}"
    );
    let out = d.ok(&["harvest", "status"]);
    assert!(
        out.contains("harvester: off: set [harvest] enabled = true") && out.contains("restart"),
        "{out}"
    );
}

#[test]
fn metrics_expose_the_families() {
    let d = Daemon::start();
    let resp = ureq::get(&format!("{}/metrics", d.api)).call().unwrap();
    assert!(
        resp.content_type().contains("openmetrics") || resp.content_type().contains("text/plain")
    );
    let text = resp.into_string().unwrap();
    for family in [
        "flexssd_vssd_read_ops_total{vssd=\"default\"} 0",
        "flexssd_vssd_write_ops_total{vssd=\"default\"} 0",
        "flexssd_vssd_read_bytes_total{vssd=\"default\"} 0",
        "flexssd_vssd_write_bytes_total{vssd=\"default\"} 0",
        "flexssd_vssd_gc_runs_total{vssd=\"default\"}",
        "flexssd_vssd_gc_pages_moved_total{vssd=\"default\"}",
        "flexssd_vssd_block_erases_total{vssd=\"default\"}",
        "flexssd_vssd_write_amplification{vssd=\"default\"}",
        "flexssd_vssd_free_blocks{vssd=\"default\"}",
        "flexssd_vssd_mapped_pages{vssd=\"default\"}",
        "flexssd_device_page_reads_total{device=\"ssd0\"}",
        "flexssd_device_page_programs_total{device=\"ssd0\"}",
        "flexssd_device_block_erases_total{device=\"ssd0\"}",
        "flexssd_device_erase_count_min{device=\"ssd0\"}",
        "flexssd_device_erase_count_max{device=\"ssd0\"}",
        "# TYPE flexssd_vssd_write_amplification gauge",
        "# TYPE flexssd_vssd_read_ops counter",
        "# EOF",
    ] {
        assert!(text.contains(family), "missing {family:?} in:\n{text}");
    }
    // New vSSDs show up at the next scrape.
    d.ok(&["vssd", "create", "t", "--channels", "1"]);
    let text = ureq::get(&format!("{}/metrics", d.api))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        text.contains("flexssd_vssd_read_ops_total{vssd=\"t\"} 0"),
        "{text}"
    );
}

fn snapshot(d: &Daemon) -> Value {
    serde_json::from_str(&d.ok(&["vssd", "list", "--json"])).unwrap()
}

#[test]
fn vssds_survive_sigterm_and_kill9() {
    let mut d = Daemon::start();
    d.ok(&[
        "vssd",
        "create",
        "a",
        "--channels",
        "2",
        "--capacity",
        "3M",
        "--gc",
        "cost-benefit",
    ]);
    d.ok(&[
        "vssd",
        "create",
        "b",
        "--channel-ids",
        "7",
        "--blocks",
        "2..10",
    ]);
    d.ok(&["vssd", "delete", "default"]);
    let before = snapshot(&d);

    d.stop();
    assert!(
        !d.data().join("nbd.sock").exists(),
        "socket removed at clean shutdown"
    );
    assert!(d.log().contains("received SIGTERM"));
    d.spawn();
    assert_eq!(snapshot(&d), before, "after SIGTERM and restart");

    d.kill9();
    d.spawn();
    assert_eq!(snapshot(&d), before, "after kill -9 and restart");
    // The deleted initial vSSD is not re-created, and new ids are fresh.
    let out = d.ok(&["vssd", "create", "c", "--channels", "1"]);
    assert!(out.contains("channels 0"), "{out}");
    let after = snapshot(&d);
    let ids: Vec<u64> = after
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_u64().unwrap())
        .collect();
    assert!(ids[2] > ids[0].max(ids[1]), "{after}");

    // A delete made just before a crash stays done.
    d.ok(&["vssd", "delete", "a"]);
    d.kill9();
    d.spawn();
    assert_eq!(d.names(), ["b", "c"]);
    d.stop();
}

#[test]
fn a_second_daemon_on_the_same_data_dir_is_refused() {
    let d = Daemon::start();
    let mut other = Command::new(env!("CARGO_BIN_EXE_flexssd"));
    other
        .args(["serve", "--config"])
        .arg(&d.config)
        .args(["--api", &format!("127.0.0.1:{}", free_port())]);
    let out = other.output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("another flexssd daemon") && err.contains("is using data directory"),
        "{err}"
    );
    // The first one is unharmed.
    assert_eq!(d.names(), ["default"]);
}

/// Starts `flexssd serve` on the default configuration with a fresh data
/// directory under `dir` and `args`; it must fail at once: returns its stderr.
fn serve_must_fail(dir: &Path, args: &[&str]) -> String {
    let data = dir.join("data");
    let mut c = Command::new(env!("CARGO_BIN_EXE_flexssd"));
    c.args(["serve", "--data-dir"]).arg(&data).args(args);
    c.stdin(Stdio::null());
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "serve {args:?} succeeded: {err}");
    // Nothing at all was created: no data directory, so no device file, no
    // store and no vSSD.
    assert!(
        !data.exists(),
        "serve {args:?} created {}: {:?}",
        data.display(),
        std::fs::read_dir(&data).map(|d| d.count())
    );
    err
}

#[test]
fn a_daemon_on_a_busy_address_fails_before_creating_anything() {
    let d = Daemon::start();
    let busy = d.api.trim_start_matches("http://").to_string();
    let fresh = tempfile::tempdir().unwrap();
    let sock = fresh.path().join("nbd.sock");
    let sock = sock.to_str().unwrap();
    // The API address is taken.
    let err = serve_must_fail(fresh.path(), &["--api", &busy, "--nbd-socket", sock]);
    assert!(
        err.contains(&busy) && err.contains("HTTP API") && err.contains("nothing was created"),
        "{err}"
    );
    // The NBD TCP address is taken (the API's is free).
    let free = format!("127.0.0.1:{}", free_port());
    let err = serve_must_fail(
        fresh.path(),
        &["--api", &free, "--nbd-socket", sock, "--nbd-tcp", &busy],
    );
    assert!(err.contains(&busy) && err.contains("NBD TCP"), "{err}");
    // The NBD unix socket has a server on it.
    let taken = d.data().join("nbd.sock");
    let free = format!("127.0.0.1:{}", free_port());
    let err = serve_must_fail(
        fresh.path(),
        &["--api", &free, "--nbd-socket", taken.to_str().unwrap()],
    );
    assert!(
        err.contains(taken.to_str().unwrap()) && err.contains("in use"),
        "{err}"
    );
    // The first daemon is unharmed, its socket still there.
    assert_eq!(d.names(), ["default"]);
    assert!(taken.exists());
}

#[test]
fn serve_flags_override_the_config() {
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("x.sock");
    let port = free_port();
    let d = Daemon::start_with(
        SMALL,
        &[
            "--mode",
            "emulation",
            "--api",
            &format!("127.0.0.1:{port}"),
            "--nbd-socket",
            sock.to_str().unwrap(),
        ],
    );
    assert_eq!(d.api, format!("http://127.0.0.1:{port}"));
    let (code, text) = http(&d.api, "GET", "/v1/info", None);
    assert_eq!(code, 200, "{}", d.log());
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["mode"], "emulation");
    assert_eq!(Path::new(v["nbd_socket"].as_str().unwrap()), sock);
    assert!(sock.exists());
    let configured = std::fs::read_to_string(&d.config).unwrap();
    let configured = configured
        .lines()
        .find(|l| l.starts_with("listen"))
        .unwrap()
        .split('"')
        .nth(1)
        .unwrap()
        .to_string();
    assert_eq!(
        http(&format!("http://{configured}"), "GET", "/v1/info", None).0,
        0,
        "the config's API address is overridden"
    );
    assert!(
        d.log()
            .contains(&format!("nbd+unix:///default?socket={}", sock.display())),
        "{}",
        d.log()
    );
}

#[test]
fn bad_config_is_a_clear_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "data_dir = \"x\"\n[[devices]]\nname = \"ssd0\"\n[devices.geometry]\nchanels = 4\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(["serve", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chanels") && err.contains("bad.toml"), "{err}");
}
