//! The cache tier through the real daemon: two tenant volumes of one tier
//! written and verified by fio (crc32c) at the same time while the policy
//! changes (GLRU → GREM → D-GREM → ARC) and the cache shrinks and grows
//! through the API and the CLI; per-tenant hits in /metrics; bad input.

mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

/// One device of 8 channels × 2 dies × 32 blocks × 1 MiB; a tier whose cache
/// vSSD takes one channel (16 MiB of cache) over two 32 MiB volumes. Epochs
/// of half a second so that GREM and D-GREM place content during the test.
const TIER: &str = r#"
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

[[tiers]]
name = "t0"
channels = 1
cache_size = "16M"
policy = "glru"
policy_params = { epoch_secs = 0.5 }
volumes = [{ name = "tenant-a", size = "32M" }, { name = "tenant-b", size = "32M" }]
"#;

const MIB: u64 = 1 << 20;

fn tier(d: &Daemon) -> Value {
    let (code, v) = http(d, "GET", "/v1/tiers/t0", None);
    assert_eq!(code, 200, "{v}");
    v
}

#[test]
fn fio_verifies_two_tenants_while_the_policy_and_size_change() {
    require!(have("fio"), "fio is not installed");
    let d = Daemon::start(TIER);
    let (code, list) = http(&d, "GET", "/v1/tiers", None);
    assert_eq!(code, 200);
    assert_eq!(list[0]["stats"]["policy"], "glru", "{list}");

    // Both tenants at once, one fio with a job each: random 4 KiB writes over
    // 12 MiB each (24 MiB against 16 MiB of cache, then 8 MiB), a new random
    // order at every pass so that writes hit cached blocks too, every write
    // read back and checked soon after (verify_backlog) and again at the end
    // of each pass. Passes rather than a run time, because only then does fio
    // check each block's write number, which catches a stale cached copy (a
    // block from an older pass), not just a torn one; the rate makes the nine
    // passes take about seven seconds, the switches below about five.
    let mut fio = Command::new("timeout")
        .args(["120", "fio", "--ioengine=nbd", "--rw=randwrite", "--bs=4k"])
        .args(["--iodepth=8", "--size=12m", "--randrepeat=0"])
        .args(["--verify=crc32c", "--verify_fatal=1", "--do_verify=1"])
        .args(["--verify_backlog=256", "--verify_state_save=0"])
        .args(["--loops=9", "--rate_iops=4000"])
        .arg("--name=a")
        .arg(format!("--uri={}", d.uri("tenant-a")))
        .arg("--name=b")
        .arg(format!("--uri={}", d.uri("tenant-b")))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    // Each change must land while both jobs are still going.
    let mut running = |what: &str| {
        if let Some(status) = fio.try_wait().unwrap() {
            let mut out = String::new();
            for pipe in [
                fio.stdout.take().map(|p| Box::new(p) as Box<dyn Read>),
                fio.stderr.take().map(|p| Box::new(p) as Box<dyn Read>),
            ]
            .into_iter()
            .flatten()
            {
                let mut p = pipe;
                let _ = p.read_to_string(&mut out);
            }
            panic!(
                "fio ended ({status}) before {what}, {:?} in:\n{out}",
                t0.elapsed()
            );
        }
    };
    std::thread::sleep(Duration::from_millis(1000));

    running("the switch to GREM");
    let (code, v) = http(
        &d,
        "PUT",
        "/v1/tiers/t0/policy",
        Some(json!({"policy": "grem"})),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["stats"]["policy"], "grem");
    assert_eq!(v["stats"]["long_term_zone_bytes"], 8 * MIB);
    std::thread::sleep(Duration::from_millis(1300));
    // Two epoch ends under GREM: it has placed bins, and both tenants have
    // their share of the long-term zone.
    let v = tier(&d);
    assert!(v["stats"]["cached_bytes"].as_u64().unwrap() > 0, "{v}");

    running("the shrink");
    let (code, v) = http(&d, "PUT", "/v1/tiers/t0/size", Some(json!({"size": "8M"})));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["stats"]["cache_bytes"], 8 * MIB);
    assert!(
        v["stats"]["cached_bytes"].as_u64().unwrap() <= 8 * MIB,
        "{v}"
    );
    std::thread::sleep(Duration::from_millis(1000));

    running("the switch to D-GREM");
    let out = cli_ok(&d, &["tier", "set-policy", "t0", "d-grem"]);
    assert!(out.contains("dgrem"), "{out}");
    let m = metrics(&d);
    assert!(
        metric(
            &m,
            "flexssd_tier_zone_bytes{tier=\"t0\",zone=\"long_term\"}"
        )
        .is_some(),
        "{m}"
    );
    assert!(
        m.contains("flexssd_tier_policy{tier=\"t0\",policy=\"dgrem\"} 1"),
        "{m}"
    );
    std::thread::sleep(Duration::from_millis(1300));

    running("the growth");
    let out = cli_ok(&d, &["tier", "set-size", "t0", "16M"]);
    assert!(out.contains("16M"), "{out}");
    std::thread::sleep(Duration::from_millis(800));

    running("the switch to ARC");
    let (code, v) = http(
        &d,
        "PUT",
        "/v1/tiers/t0/policy",
        Some(json!({"policy": "arc"})),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["stats"]["policy"], "arc");
    assert_eq!(v["stats"]["policy_changes"], 3);

    let out = fio.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "fio failed:\n{text}\n{err}\n{}",
        d.log()
    );
    assert!(
        !text.contains("verify: bad") && !err.contains("verify: bad"),
        "{text}\n{err}"
    );
    assert_eq!(text.matches("err= 0").count(), 2, "{text}\n{err}");

    // Per-tenant hits and misses in /metrics, for both tenants.
    let m = metrics(&d);
    for vol in ["tenant-a", "tenant-b"] {
        let labels = format!("{{tier=\"t0\",volume=\"{vol}\",op=\"read\"}}");
        let hits = metric(&m, &format!("flexssd_tier_hits_total{labels}")).unwrap();
        let misses = metric(&m, &format!("flexssd_tier_misses_total{labels}")).unwrap();
        assert!(hits > 0.0 && misses >= 0.0, "{vol}: {hits} hits\n{m}");
        let ratio = metric(&m, &format!("flexssd_tier_hit_ratio{labels}")).unwrap();
        assert!((ratio - hits / (hits + misses)).abs() < 1e-6, "{ratio}");
        assert!(metric(
            &m,
            &format!("flexssd_tier_write_bytes_total{{tier=\"t0\",volume=\"{vol}\"}}")
        )
        .is_some_and(|b| b > 0.0));
    }
    assert!(m.contains("# TYPE flexssd_tier_hits counter"), "{m}");
    assert!(
        !m.contains("flexssd_tier_zone_bytes{"),
        "ARC has no zones:\n{m}"
    );
    let show = cli_ok(&d, &["tier", "show", "t0"]);
    assert!(show.contains("arc") && show.contains("tenant-b"), "{show}");
    let list = cli_ok(&d, &["tier", "list"]);
    assert!(list.contains("t0") && list.contains("t0.cache"), "{list}");
}

/// GREM+ (the adaptive bin fill and free flash filled on a read miss) under
/// a real client: fio writes, reads back and checks every block three times
/// over, so reads fill lines between epochs and later writes land on filled
/// lines (write-through updates the cached copy). With one-minute epochs no
/// epoch ends during the test: every read hit is a line a miss filled.
#[test]
fn grem_plus_fills_free_flash_on_read_misses_and_serves_verified_data() {
    require!(have("fio"), "fio is not installed");
    let cfg = TIER
        .replace("policy = \"glru\"", "policy = \"dgrem\"")
        .replace(
        "policy_params = { epoch_secs = 0.5 }",
        "policy_params = { epoch_secs = 60.0, bin_fill = \"adaptive\", fill_free_flash = true }",
    );
    assert!(cfg.contains("fill_free_flash"));
    let d = Daemon::start(&cfg);
    let out = Command::new("timeout")
        .args(["120", "fio", "--ioengine=nbd", "--rw=randwrite", "--bs=4k"])
        .args(["--iodepth=8", "--size=4m", "--randrepeat=0", "--loops=3"])
        .args(["--verify=crc32c", "--verify_fatal=1", "--do_verify=1"])
        .args(["--verify_state_save=0", "--name=a"])
        .arg(format!("--uri={}", d.uri("tenant-a")))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !text.contains("verify: bad") && !err.contains("verify: bad"),
        "fio failed:\n{text}\n{err}\n{}",
        d.log()
    );
    let v = tier(&d);
    assert!(v["stats"]["cached_bytes"].as_u64().unwrap() > 0, "{v}");
    let m = metrics(&d);
    let labels = "{tier=\"t0\",volume=\"tenant-a\",op=\"read\"}";
    let hits = metric(&m, &format!("flexssd_tier_hits_total{labels}")).unwrap();
    assert!(hits > 0.0, "no read hit from filled lines:\n{m}");
}

/// A tier volume's zeros reach its backing disk, which writes them like any
/// data: a fast zero fails at once with ENOTSUP and leaves the bytes alone,
/// and a plain zero still zeroes (through the cache).
#[test]
fn tier_volumes_refuse_a_fast_zero_and_still_zero() {
    let Some(py) = nbd_python() else {
        eprintln!(
            "SKIP tier fast zero: libnbd's Python bindings (python3-libnbd) are not installed"
        );
        return;
    };
    let d = Daemon::start(TIER);
    assert_eq!(
        fast_zero_outcome(py, &d.uri("tenant-a")),
        "enotsup kept\nplain zeros\n",
        "{}",
        d.log()
    );
}

#[test]
fn bad_tier_requests_are_refused_with_the_reason() {
    let d = Daemon::start(TIER);
    let (code, v) = http(
        &d,
        "PUT",
        "/v1/tiers/t0/policy",
        Some(json!({"policy": "lfu"})),
    );
    assert_eq!(code, 400, "{v}");
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains("\"lfu\"") && msg.contains("glru, car, arc, vfrm, isolation, grem, dgrem"),
        "{msg}"
    );
    let (code, v) = http(
        &d,
        "PUT",
        "/v1/tiers/nope/policy",
        Some(json!({"policy": "arc"})),
    );
    assert_eq!(code, 404, "{v}");
    let (code, v) = http(&d, "GET", "/v1/tiers/nope", None);
    assert_eq!(code, 404, "{v}");
    let (code, v) = http(
        &d,
        "PUT",
        "/v1/tiers/t0/policy",
        Some(json!({"policy": "arc", "x": 1})),
    );
    assert_eq!(code, 400, "{v}");
    let (code, v) = http(&d, "PUT", "/v1/tiers/t0/size", Some(json!({"size": "64M"})));
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("more than its cache device holds"),
        "{v}"
    );
    let (code, v) = http(&d, "PUT", "/v1/tiers/t0/size", Some(json!({"size": 5000})));
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("multiple of 4096"),
        "{v}"
    );
    let (code, v) = http(
        &d,
        "PUT",
        "/v1/tiers/t0/size",
        Some(json!({"size": "lots"})),
    );
    assert_eq!(code, 400, "{v}");
    // The policy did not change on any of these.
    assert_eq!(tier(&d)["stats"]["policy"], "glru");
    // The cache vSSD and the volume names belong to the tier.
    let (code, v) = http(&d, "DELETE", "/v1/vssds/t0.cache", None);
    assert_eq!(code, 409, "{v}");
    let (code, v) = http(
        &d,
        "POST",
        "/v1/vssds",
        Some(json!({"name": "tenant-a", "channels": 1})),
    );
    assert_eq!(code, 409, "{v}");
    // The CLI says the same.
    let out = d.cli(&["tier", "set-policy", "t0", "mru"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"mru\"") && err.contains("dgrem"), "{err}");
}

#[test]
fn bad_tier_config_is_a_clear_startup_error() {
    let cases = [
        // A config error: the key and the valid names.
        (TIER.replace("\"glru\"", "\"lfu\""), "glru, car, arc"),
        (
            TIER.replace("size = \"32M\" }]", "size = 5000 }]"),
            "tiers[0].volumes[1].size = 5000",
        ),
        (TIER.replace("cache_size", "cache_sise"), "cache_sise"),
        // Only known when it is built: the placement of its cache vSSD.
        (
            TIER.replace("channels = 1", "channels = 9"),
            "tier \"t0\": creating its cache vSSD: not enough free channels",
        ),
    ];
    for (body, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("tier.toml");
        std::fs::write(
            &cfg,
            format!(
                "data_dir = \"{}\"\n{body}",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_flexssd"))
            .args(["serve", "--api", "127.0.0.1:0", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(!out.status.success(), "started with {want:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "want {want:?} in:\n{err}");
    }
}
