//! Regulator end to end: SLA curves set through the CLI shape a real NBD
//! client's I/O (libnbd's Python bindings), change live, refuse what a curve
//! never allows, and survive a restart; `flexssd sla measure-device` measures
//! and stores a unit curve; bad input gets clear errors.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{nbd_python, Daemon};

/// 4 channels × 4 dies × 8 blocks × 64 pages × 4 KiB: 32 MiB, fast mode.
const BODY: &str = r#"
[[devices]]
name = "ssd0"
backend = "file"
[devices.geometry]
channels = 4
blocks_per_plane = 8
pages_per_block = 64
[[vssds]]
name = "t"
channels = 2
"#;

fn ok(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &std::process::Output) -> String {
    assert!(
        !o.status.success(),
        "unexpected success: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `n` 4 KiB reads (or writes) through libnbd; returns the elapsed time
/// and the first error's text, if any.
fn nbd_io(py: &str, uri: &str, n: u32, write: bool) -> (Duration, Option<String>) {
    let script = format!(
        r#"
import nbd, sys
h = nbd.NBD()
h.connect_uri("{uri}")
buf = bytearray(4096)
try:
    for i in range({n}):
        if {write}:
            h.pwrite(buf, (i % 64) * 4096)
        else:
            h.pread(4096, (i % 64) * 4096)
except nbd.Error as e:
    print("ERR", e.string, e.errno)
    sys.exit(0)
"#,
        write = if write { "True" } else { "False" }
    );
    let t0 = Instant::now();
    let out = Command::new(py).arg("-c").arg(&script).output().unwrap();
    let el = t0.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        el,
        text.lines()
            .find(|l| l.starts_with("ERR"))
            .map(str::to_string),
    )
}

#[test]
fn curves_shape_real_clients_live_and_persist() {
    let Some(py) = nbd_python() else {
        eprintln!("SKIP sla test: libnbd's Python bindings (python3-libnbd) are not installed");
        return;
    };
    let mut d = Daemon::start(BODY);
    let uri = d.uri("t");
    // No curve: 300 reads are quick.
    let (fast, e) = nbd_io(py, &uri, 300, false);
    assert!(e.is_none(), "{e:?}");
    // 200 reads/s (and no writes): 300 reads take about (300 - 20) / 200 s,
    // the first 20 riding on the 100 ms bucket.
    ok(&d.cli(&["sla", "set", "t", "--sla-curve", "0:200"]));
    let (slow, e) = nbd_io(py, &uri, 300, false);
    assert!(e.is_none(), "{e:?}");
    assert!(
        slow >= Duration::from_millis(1200) && slow > fast * 3,
        "limited {slow:?} vs free {fast:?}"
    );
    // That curve allows no writes: refused with EPERM, nothing hangs.
    let (_, e) = nbd_io(py, &uri, 1, true);
    let e = e.expect("a write under a read-only curve fails");
    assert!(e.contains("EPERM"), "{e}");
    let show = ok(&d.cli(&["sla", "show", "t"]));
    assert!(show.contains("curve 0:200"), "{show}");
    assert!(show.contains("1 refused"), "{show}");
    // Counters are in /metrics.
    let m = d.get("/metrics").unwrap();
    assert!(
        m.contains("flexssd_sched_delayed_pieces_total{vssd=\"t\"}"),
        "{m}"
    );
    // The SLA survives a restart...
    d.stop();
    d.restart();
    let show = ok(&d.cli(&["sla", "show", "t", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&show).unwrap();
    assert_eq!(v["sla"]["curve"], serde_json::json!([[0.0, 200.0]]));
    // ...and clearing it (live) lifts the limit.
    ok(&d.cli(&["sla", "set", "t", "--clear"]));
    let (free, e) = nbd_io(py, &uri, 300, false);
    assert!(e.is_none(), "{e:?}");
    assert!(free < slow / 2, "cleared {free:?} vs limited {slow:?}");
}

/// A piece booked far ahead under a tight curve is released when the curve is
/// cleared: it gives its booking back and asks again under the new terms.
#[test]
fn clearing_an_sla_releases_pieces_already_waiting() {
    let Some(py) = nbd_python() else {
        eprintln!("SKIP sla test: libnbd's Python bindings (python3-libnbd) are not installed");
        return;
    };
    let d = Daemon::start(BODY);
    let uri = d.uri("t");
    // 0.01 writes of 4 KiB a second: the first 64 KiB write rides on the
    // bucket, the second is booked minutes ahead.
    ok(&d.cli(&["sla", "set", "t", "--sla-curve", "0:1,0.01:0"]));
    let script = format!(
        r#"
import nbd
h = nbd.NBD()
h.connect_uri("{uri}")
h.pwrite(b"\x43" * 65536, 0)
h.pwrite(b"\x44" * 65536, 65536)
print("written")
"#
    );
    let t0 = Instant::now();
    let mut child = Command::new(py)
        .arg("-c")
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the write was not held back by the curve"
    );
    ok(&d.cli(&["sla", "set", "t", "--clear"]));
    let out = loop {
        if child.try_wait().unwrap().is_some() {
            break child.wait_with_output().unwrap();
        }
        if t0.elapsed() > Duration::from_secs(20) {
            child.kill().ok();
            panic!("the write still waits 20 s after its SLA was cleared");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(String::from_utf8_lossy(&out.stdout).contains("written"));
    let (_, e) = nbd_io(py, &uri, 1, false);
    assert!(e.is_none(), "{e:?}");
}

#[test]
fn bad_slas_and_curves_get_clear_errors() {
    let d = Daemon::start(BODY);
    let e = err(&d.cli(&["sla", "set", "t", "--sla-curve", "0:10,5:20"]));
    assert!(e.contains("invalid SLA curve"), "{e}");
    let e = err(&d.cli(&["sla", "set", "t", "--sla-curve", "0:0"]));
    assert!(e.contains("allows no I/O"), "{e}");
    let e = err(&d.cli(&["sla", "set", "t", "--sla-weight", "0"]));
    assert!(e.contains("weight"), "{e}");
    let e = err(&d.cli(&["sla", "set", "nope", "--sla-curve", "0:10"]));
    assert!(e.contains("nope"), "{e}");
    let e = err(&d.cli(&["sla", "set", "t"]));
    assert!(e.contains("nothing to set"), "{e}");
    // Raw API: malformed bodies and impossible units.
    let put = |path: &str, body: &str| {
        let r = ureq::put(&format!("{}{path}", d.api))
            .set("content-type", "application/json")
            .send_string(body);
        match r {
            Ok(_) => panic!("{path} accepted {body}"),
            Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap()),
            Err(e) => panic!("{e}"),
        }
    };
    let (code, msg) = put("/v1/vssds/t/sla", r#"{"curve": [[0, 10], [5, 20]]}"#);
    assert_eq!(code, 400, "{msg}");
    let (code, msg) = put("/v1/vssds/t/sla", r#"{"curv": [[0, 10]]}"#);
    assert_eq!(code, 400);
    assert!(msg.contains("curv"), "{msg}");
    let unit = r#"{"percentile":"p95","bound_us":500,"curve":[[0,1000],[10,0]]}"#;
    let (code, msg) = put("/v1/devices/ssd0/curves/9", unit);
    assert_eq!(code, 400);
    assert!(msg.contains("impossible"), "{msg}");
    let (code, _) = put("/v1/devices/nope/curves/1", unit);
    assert_eq!(code, 404);
    let (code, msg) = put(
        "/v1/devices/ssd0/curves/1",
        r#"{"percentile":"p42","bound_us":1,"curve":[[0,1]]}"#,
    );
    assert_eq!(code, 400);
    assert!(msg.contains("p42"), "{msg}");
    // A bound that no latency can meet is refused, and nothing is stored.
    let (code, msg) = put(
        "/v1/devices/ssd0/curves/2",
        r#"{"percentile":"p95","bound_us":-5,"curve":[[0,100],[10,0]]}"#,
    );
    assert_eq!(code, 400, "{msg}");
    assert!(msg.contains("bound_us = -5"), "{msg}");
    let stored = ureq::get(&format!("{}/v1/devices/ssd0/curves", d.api))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert_eq!(stored, "{}");
    // Forgetting a curve that was never stored is a 404 that says which.
    let r = ureq::delete(&format!("{}/v1/devices/ssd0/curves/3", d.api)).call();
    let Err(ureq::Error::Status(code, resp)) = r else {
        panic!("deleting a missing curve: {r:?}");
    };
    let msg = resp.into_string().unwrap();
    assert_eq!(code, 404, "{msg}");
    assert!(
        msg.contains(r#"device \"ssd0\" has no unit curve stored for 3-channel units"#),
        "{msg}"
    );
    // measure-device: bad arguments are named.
    let e = err(&d.cli(&[
        "sla",
        "measure-device",
        "--channels",
        "9",
        "--device",
        "ssd0",
    ]));
    assert!(e.contains("9 channels"), "{e}");
    let e = err(&d.cli(&["sla", "measure-device", "--bound", "soon"]));
    assert!(e.contains("not a duration"), "{e}");
}

#[test]
fn measure_device_stores_a_unit_curve_the_scheduler_uses() {
    let d = Daemon::start(BODY);
    let dir = d.path().to_path_buf();
    let csv = dir.join("curve.csv");
    let svg = dir.join("curve.svg");
    let out = ok(&d.cli(&[
        "sla",
        "measure-device",
        "--device",
        "ssd0",
        "--channels",
        "2",
        "--duration",
        "100ms",
        "--points",
        "3",
        "--steps",
        "5",
        "--store",
        "--csv",
        csv.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]));
    assert!(
        out.contains("stored as the curve of ssd0's 2-channel units"),
        "{out}"
    );
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(
        rows.lines().filter(|l| l.starts_with("measured,")).count() == 3,
        "{rows}"
    );
    // Stored with the device, and shown as the unit curve of the 2-channel vSSD.
    let curves = ok(&d.cli(&["sla", "curves", "ssd0"]));
    assert!(
        curves.starts_with("2 channel(s): p95 <= 500 µs"),
        "{curves}"
    );
    let show = ok(&d.cli(&["sla", "show", "t"]));
    assert!(show.contains("unit curve: p95 <= 500 µs"), "{show}");
}

#[test]
fn measure_device_drives_a_file_with_fio() {
    if !support::have("fio") {
        eprintln!("SKIP fio measure-device test: fio is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let json = dir.path().join("curve.json");
    let out = Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(["sla", "measure-device", "--fio"])
        .arg(&img)
        .args(["--direct", "false", "--size", "64M", "--duration", "1s"])
        .args(["--points", "2", "--steps", "3", "--bound", "50ms", "--out"])
        .arg(&json)
        .output()
        .unwrap();
    let text = ok(&out);
    assert!(text.contains("p95 read latency <= 50000 µs"), "{text}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["samples"].as_array().unwrap().len(), 2, "{v}");
    // (How many reads fit depends on the page cache and the host's load, so
    // the numbers are not checked here; the emulated prober's are.)
    assert!(v["curve"].as_array().is_some_and(|c| !c.is_empty()), "{v}");
    // fio's errors come through (a path under a regular file cannot exist).
    let out = Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .args(["sla", "measure-device", "--fio"])
        .arg(img.join("x"))
        .args(["--duration", "1s"])
        .output()
        .unwrap();
    assert!(
        err(&out).contains("fio"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
