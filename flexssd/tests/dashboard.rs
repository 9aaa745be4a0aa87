//! The operator dashboard in a real browser: Debian's headless Chromium,
//! driven through chromedriver by Python selenium (`scripts/dashboard_browser.py`),
//! against the real daemon with token authentication on.
//!
//! The host has two regular tenants' vSSDs (one with an SLA curve), a harvest
//! tenant, gSSDs lent by both regular vSSDs, and a harvest volume that
//! migrates live from one gSSD to the other. The copy is paced by
//! `[harvest] migrate_rate` (1 MiB/s in 256 KiB chunks, so moving the 8 MiB
//! volume takes about 8 s): the page is read while it is half-way, and its
//! migration rows (volume, offset, gSSDs, bytes copied with the progress bar
//! and percentage, total), the volume's `migrating` state and the gSSDs'
//! states must match `/v1/harvest/volumes/v` and `/v1/gssds` read right after
//! (the page may be one refresh behind on the bytes copied, never ahead).
//! Once the migration has finished, the page is read the way a person reads
//! it, as visible text, and every number is compared with the API's JSON: the
//! flash map's owners and wear, each vSSD's counters, rates, latency and SLA
//! curve with its operating points, the gSSD pool, the volume, and the event
//! log. It must update live (a write made while the page is open shows up
//! without a reload), and a tenant's token must show that tenant's vSSDs and
//! nothing of the other's.
//!
//! With `FLEXSSD_DASHBOARD_SHOTS=DIR` it also saves screenshots there
//! (`scripts/dashboard-screenshots.sh` writes the README's into docs/img).

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dashboard::{fmt_bytes, fmt_ns, fmt_num, fmt_rate};
use serde_json::{json, Value};
use support::*;

const HOST: &str = r#"
mode = "emulation"

[[devices]]
name = "ssd0"
backend = "file"
[devices.geometry]
channels = 8
dies_per_channel = 2
planes_per_die = 1
blocks_per_plane = 64
pages_per_block = 32
page_size = 4096

[[vssds]]
name = "a"
channel_ids = [0, 1]
tenant = "alice"

[[vssds]]
name = "b"
channel_ids = [2, 3]
tenant = "bob"

[[vssds]]
name = "hv"
channel_ids = [4, 5]
role = "harvest"
tenant = "alice"

[harvest]
enabled = true
policy = "fixed"
tick_ms = 100
granule_s = 60
reclaim_horizon_s = 60
lend_for_s = 600
unsold = false
# The volume's 8 MiB move in 32 chunks, one every 250 ms: about 8 s, long
# enough to read the page half-way.
migrate_chunk_bytes = 262144
migrate_rate = "1M"
"#;

const API: &str = r#"auth = "token"
[api.dashboard]
sample_ms = 500
window_s = 600
refresh_ms = 500
"#;

const PY: &str = "/usr/bin/python3";

/// Why the browser test cannot run here, if it cannot.
fn browser_missing() -> Option<String> {
    for (path, pkg) in [
        ("/usr/bin/chromium", "chromium"),
        ("/usr/bin/chromedriver", "chromium-driver"),
        (PY, "python3"),
    ] {
        if !std::path::Path::new(path).exists() {
            return Some(format!("{path} is missing (Debian package {pkg})"));
        }
    }
    let ok = Command::new(PY)
        .args(["-c", "import selenium"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (!ok).then(|| "python3 cannot import selenium (Debian package python3-selenium)".into())
}

fn script() -> String {
    format!(
        "{}/../scripts/dashboard_browser.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn get(d: &Daemon, token: &str, path: &str) -> Value {
    let (code, v) = http_as(d, Some(token), "GET", path, None);
    assert_eq!(code, 200, "GET {path}: {v}");
    v
}

fn fio(d: &Daemon, export: &str, args: &[&str]) {
    let uri = format!("--uri={}", d.uri(export));
    let mut all = vec!["--ioengine=nbd", "--name=dash", uri.as_str()];
    all.extend_from_slice(args);
    let out = run_any("fio", &all);
    assert!(
        out.status.success(),
        "fio on {export}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the page showed: visible text of each `data-f` cell by row kind and key.
struct Page(Value);

impl Page {
    fn rows(&self, kind: &str) -> BTreeMap<String, Value> {
        self.0["rows"][kind]
            .as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    fn cell(&self, kind: &str, key: &str, field: &str) -> String {
        self.0["rows"][kind][key][field]
            .as_str()
            .unwrap_or_else(|| panic!("no {kind} {key:?} {field} on the page: {}", self.0["rows"]))
            .to_string()
    }
}

/// Runs the browser script; with `watch`, calls `meanwhile` once the page has
/// been read once (the script waits for the watched cell to change).
fn browse(d: &Daemon, token: &str, args: &[&str], watch: Option<(&str, &dyn Fn())>) -> Page {
    let tf = d.path().join(format!("token-{}", &token[..12]));
    std::fs::write(&tf, token).unwrap();
    let mut c = Command::new("timeout");
    c.args(["180", PY, &script()])
        .arg("--url")
        .arg(format!("{}/dashboard", d.api))
        .arg("--token-file")
        .arg(&tf)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((w, _)) = watch {
        c.args(["--watch", w]);
    }
    let mut child = c.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut err = String::new();
    let mut lines = BufReader::new(stderr).lines();
    if let Some((_, meanwhile)) = watch {
        for line in lines.by_ref() {
            let line = line.unwrap();
            if line.trim() == "READY" {
                meanwhile();
                break;
            }
            err.push_str(&line);
            err.push('\n');
        }
    }
    for line in lines {
        err.push_str(&line.unwrap());
        err.push('\n');
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the browser script failed ({}):\n{err}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    Page(serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}")))
}

/// Compares the admin's page, read while the volume migrates, with the API's
/// JSON read right after it: the migration rows, the volume's state and the
/// gSSDs' states; the first difference. The bytes copied move on between the
/// two reads, so the page's may be behind the API's, but never ahead, and both
/// must be half-way.
fn compare_migrating(d: &Daemon, admin: &str, p: &Page) -> Result<(), String> {
    let v = get(d, admin, "/v1/harvest/volumes/v");
    let gssds = get(d, admin, "/v1/gssds");
    let api = v["migrations"].as_array().cloned().unwrap_or_default();
    let rows = p.rows("migration");
    let keys: Vec<String> = api.iter().map(|m| format!("v@{}", m["offset"])).collect();
    if rows.keys().cloned().collect::<Vec<_>>() != keys || api.is_empty() {
        return Err(format!(
            "migration rows {:?}, the API has {keys:?} (a migration must be in progress)",
            rows.keys().collect::<Vec<_>>()
        ));
    }
    for m in &api {
        let key = format!("v@{}", m["offset"]);
        let num = |f: &str| m[f].as_u64().unwrap();
        let (copied, total) = (num("copied"), num("total"));
        let cell = |f: &str| p.cell("migration", &key, f);
        for (what, page, want) in [
            ("volume", cell("volume"), "v".to_string()),
            ("offset", cell("offset"), num("offset").to_string()),
            ("from gSSD", cell("from"), num("from").to_string()),
            ("to gSSD", cell("to"), num("to").to_string()),
            ("total", cell("total"), fmt_bytes(total)),
            (
                "progress bar's max",
                cell("_progress_max"),
                total.to_string(),
            ),
        ] {
            if page != want {
                return Err(format!(
                    "{key} {what}: page shows {page:?}, API says {want:?}"
                ));
            }
        }
        let shown: u64 = cell("_progress_value")
            .parse()
            .map_err(|e| format!("{key} progress bar: {e}"))?;
        if !(0 < shown && shown <= copied && copied < total) {
            return Err(format!(
                "{key}: the page shows {shown} bytes copied, the API {copied} right after, of {total}: \
                 not half-way, or the page ahead of the API"
            ));
        }
        let pct = format!("{:.0}%", shown as f64 * 100.0 / total as f64);
        for (what, page, want) in [
            ("bytes copied", cell("copied"), fmt_bytes(shown)),
            ("percentage", cell("_progress_text"), pct),
        ] {
            if page != want {
                return Err(format!(
                    "{key} {what}: page shows {page:?}, its progress bar says {want:?}"
                ));
            }
        }
    }
    let state = p.cell("volume", "v", "state");
    if state != "migrating" || v["state"] != "migrating" {
        return Err(format!(
            "volume state: page shows {state:?}, API says {}",
            v["state"]
        ));
    }
    for g in gssds.as_array().unwrap() {
        let id = g["id"].to_string();
        let (page, api) = (p.cell("gssd", &id, "state"), g["state"].as_str().unwrap());
        if page != api {
            return Err(format!(
                "gSSD {id} state: page shows {page:?}, API says {api:?}"
            ));
        }
    }
    let from = api[0]["from"].to_string();
    if p.cell("gssd", &from, "state") != "migrating-out" {
        return Err(format!("gSSD {from} is not shown migrating out"));
    }
    Ok(())
}

/// Compares the admin's page with the API's JSON; the first difference.
fn compare_admin(d: &Daemon, admin: &str, p: &Page) -> Result<(), String> {
    macro_rules! same {
        ($what:expr, $page:expr, $api:expr) => {{
            let (a, b) = ($page, $api);
            if a != b {
                return Err(format!("{}: page shows {a:?}, API says {b:?}", $what));
            }
        }};
    }
    // vSSDs: every one, with its counters and rates.
    let vssds = get(d, admin, "/v1/vssds");
    let names: Vec<String> = vssds
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    same!(
        "vSSD rows",
        p.rows("vssd").keys().cloned().collect::<Vec<_>>(),
        names.clone()
    );
    for n in &names {
        let v = get(d, admin, &format!("/v1/vssds/{n}"));
        let st = &v["stats"];
        let num = |x: &Value| x.as_u64().unwrap();
        same!(
            format!("{n} capacity"),
            p.cell("vssd", n, "capacity_bytes"),
            fmt_bytes(num(&v["capacity_bytes"]))
        );
        same!(
            format!("{n} channels"),
            p.cell("vssd", n, "channels"),
            v["channels"].as_array().unwrap().len().to_string()
        );
        same!(
            format!("{n} tenant"),
            p.cell("vssd", n, "tenant"),
            v["tenant"].as_str().unwrap_or("").to_string()
        );
        same!(
            format!("{n} written"),
            p.cell("vssd", n, "write_bytes"),
            fmt_bytes(num(&st["io"]["write_bytes"]))
        );
        same!(
            format!("{n} read"),
            p.cell("vssd", n, "read_bytes"),
            fmt_bytes(num(&st["io"]["read_bytes"]))
        );
        same!(
            format!("{n} GC runs"),
            p.cell("vssd", n, "gc_runs"),
            fmt_num(num(&st["ftl"]["gc_runs"]))
        );
        same!(
            format!("{n} WA"),
            p.cell("vssd", n, "write_amplification"),
            format!("{:.2}", st["write_amplification"].as_f64().unwrap())
        );
        same!(
            format!("{n} free blocks"),
            p.cell("vssd", n, "free_blocks"),
            format!(
                "{} / {}",
                fmt_num(num(&st["ftl"]["free_blocks"])),
                fmt_num(num(&st["ftl"]["total_blocks"]))
            )
        );
        // The rates of the interval the page shows (sampling goes on).
        let at: u64 = p.cell("vssd", n, "_at").parse().unwrap();
        let rates = get(d, admin, &format!("/v1/vssds/{n}/rates"));
        let last = rates["rates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["at_ns"].as_u64() == Some(at))
            .cloned();
        if at != 0 && last.is_none() {
            return Err(format!(
                "{n}: the page shows rates up to {at} ns, the API has none then"
            ));
        }
        same!(
            format!("{n} write IOPS"),
            p.cell("vssd", n, "write_iops"),
            fmt_rate(last.as_ref().map(|r| r["write_iops"].as_f64().unwrap()))
        );
        same!(
            format!("{n} read IOPS"),
            p.cell("vssd", n, "read_iops"),
            fmt_rate(last.as_ref().map(|r| r["read_iops"].as_f64().unwrap()))
        );
    }
    // b in detail: latency percentiles, GC, and its SLA curve with one
    // operating point per rate interval.
    let b = get(d, admin, "/v1/vssds/b");
    for dir in ["read", "write"] {
        let l = &b["stats"]["io"][format!("{dir}_latency")];
        same!(
            format!("b {dir} latency count"),
            p.cell("latency", dir, "count"),
            fmt_num(l["count"].as_u64().unwrap())
        );
        same!(
            format!("b {dir} p99"),
            p.cell("latency", dir, "p99_ns"),
            if l["count"] == 0 {
                "—".to_string()
            } else {
                fmt_ns(l["p99_ns"].as_u64().unwrap())
            }
        );
    }
    same!(
        "b GC pages moved",
        p.cell("gc2", "b", "gc_pages_moved"),
        fmt_num(b["stats"]["ftl"]["gc_pages_moved"].as_u64().unwrap())
    );
    let sla = get(d, admin, "/v1/vssds/b/sla");
    let curve: Vec<String> = sla["sla"]["curve"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pt| format!("{}:{}", pt[0].as_f64().unwrap(), pt[1].as_f64().unwrap()))
        .collect();
    same!(
        "b SLA curve",
        p.0["sla"]["tenant_curve"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        curve.join(",")
    );
    let (first_at, last_at) = (
        p.0["sla"]["first_at"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap(),
        p.0["sla"]["last_at"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap(),
    );
    let rates_b = get(d, admin, "/v1/vssds/b/rates")["rates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| (first_at..=last_at).contains(&r["at_ns"].as_u64().unwrap()))
        .count();
    same!(
        "b operating points",
        p.0["sla"]["points"].as_u64().unwrap() as usize,
        rates_b
    );
    // The flash map: each owner's cells, and the wear layer's scale.
    let fm = get(d, admin, "/v1/devices/ssd0/flash");
    let owners = p.rows("owner");
    for o in fm["owners"].as_array().unwrap() {
        let cells = o["cells"].as_u64().unwrap();
        let key = match (o["name"].as_str(), o["kind"].as_str().unwrap()) {
            (Some(n), _) => n.to_string(),
            (None, "free") => "(free)".into(),
            (None, _) => "(unsold)".into(),
        };
        if cells == 0 && o["name"].is_null() {
            continue;
        }
        let shown = owners
            .get(&key)
            .and_then(|r| r["cells"].as_str())
            .ok_or_else(|| format!("owner {key} is not in the legend: {owners:?}"))?;
        same!(format!("cells of {key}"), shown.to_string(), fmt_num(cells));
    }
    let max = fm["erase_max"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .max()
        .unwrap();
    same!(
        "the wear layer's top",
        p.0["flash"]["ssd0"]["max_erase"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        max.to_string()
    );
    // The gSSD pool.
    let gssds = get(d, admin, "/v1/gssds");
    let rows = p.rows("gssd");
    same!("gSSD rows", rows.len(), gssds.as_array().unwrap().len());
    for g in gssds.as_array().unwrap() {
        let id = g["id"].as_u64().unwrap().to_string();
        same!(
            format!("gSSD {id} capacity"),
            p.cell("gssd", &id, "capacity_bytes"),
            fmt_bytes(g["capacity_bytes"].as_u64().unwrap())
        );
        same!(
            format!("gSSD {id} bandwidth"),
            p.cell("gssd", &id, "bandwidth"),
            g["bandwidth"].to_string()
        );
        same!(
            format!("gSSD {id} expiry"),
            p.cell("gssd", &id, "expiry_s"),
            g["expiry_s"].to_string()
        );
        same!(
            format!("gSSD {id} state"),
            p.cell("gssd", &id, "state"),
            g["state"].as_str().unwrap().to_string()
        );
        same!(
            format!("gSSD {id} lender"),
            p.cell("gssd", &id, "home"),
            g["home"].as_str().unwrap_or("unsold").to_string()
        );
    }
    same!(
        "gSSDs in the pool",
        p.cell("pool", "gssds", "gssds"),
        fmt_num(gssds.as_array().unwrap().len() as u64)
    );
    // The harvest volume, its migrations and eviction deadline.
    let v = get(d, admin, "/v1/harvest/volumes/v");
    same!(
        "volume state",
        p.cell("volume", "v", "state"),
        v["state"].as_str().unwrap().to_string()
    );
    same!(
        "volume size",
        p.cell("volume", "v", "size_bytes"),
        fmt_bytes(v["size_bytes"].as_u64().unwrap())
    );
    let segs: Vec<String> = v["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["gssd"].to_string())
        .collect();
    same!(
        "volume gSSDs",
        p.cell("volume", "v", "gssds"),
        segs.join(", ")
    );
    same!(
        "volume eviction deadline",
        p.cell("volume", "v", "evict_by_s")
            .split(' ')
            .next()
            .unwrap_or("")
            .to_string(),
        v["evict_by_s"]
            .as_u64()
            .map_or(String::new(), |e| e.to_string())
    );
    same!(
        "migrations in progress",
        p.rows("migration").len(),
        v["migrations"].as_array().map_or(0, Vec::len)
    );
    // The event log: the total, and each listed event as the API has it.
    let events = get(d, admin, "/v1/events");
    let events = events.as_array().unwrap();
    same!(
        "events in the log",
        p.0["events_total"].as_str().unwrap_or("").to_string(),
        events.len().to_string()
    );
    for (seq, row) in p.rows("event") {
        let e = events
            .iter()
            .find(|e| e["seq"].as_u64() == seq.parse().ok())
            .ok_or_else(|| format!("event {seq} is on the page, not in the API"))?;
        same!(
            format!("event {seq} kind"),
            row["kind"].as_str().unwrap(),
            e["kind"].as_str().unwrap()
        );
        same!(
            format!("event {seq} detail"),
            row["detail"].as_str().unwrap(),
            e["detail"].as_str().unwrap()
        );
    }
    Ok(())
}

#[test]
fn the_dashboard_shows_what_the_api_says_live_and_only_to_whom_it_may() {
    if let Some(why) = browser_missing() {
        eprintln!("SKIP the dashboard browser test: {why} (scripts/test.sh installs it as root)");
        return;
    }
    require!(have("fio"), "fio is not installed");
    let d = Daemon::start_api(HOST, API, None, "", &[]);
    let admin = d
        .token
        .clone()
        .expect("auth is on: the daemon wrote an admin token");
    let token = |tenant: &str| {
        let (code, v) = http(&d, "POST", "/v1/tokens", Some(json!({"tenant": tenant})));
        assert_eq!(code, 201, "{v}");
        v["token"].as_str().unwrap().to_string()
    };
    let (alice, bob) = (token("alice"), token("bob"));
    let (code, v) = http(
        &d,
        "PUT",
        "/v1/vssds/b/sla",
        Some(json!({"curve": [[0, 20000], [5000, 0]], "weight": 1, "burst": false})),
    );
    assert_eq!(code, 200, "{v}");

    // Both regular vSSDs lend; the harvest tenant gets a volume; its home
    // fills up and takes its blocks back, so the volume migrates live.
    wait_for("two gSSDs", Duration::from_secs(30), || {
        get(&d, &admin, "/v1/gssds").as_array().unwrap().len() == 2
    });
    let (code, v) = http(
        &d,
        "POST",
        "/v1/harvest/volumes",
        Some(json!({"name": "v", "tenant": "hv", "capacity": "8M", "duration_s": 300})),
    );
    assert_eq!(code, 201, "{v}");
    let first = v["segments"][0]["gssd"].as_u64().unwrap();
    fio(&d, "v", &["--rw=write", "--bs=64k", "--size=4m"]);
    let home = get(&d, &admin, "/v1/gssds")
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"].as_u64() == Some(first))
        .unwrap()["home"]
        .as_str()
        .unwrap()
        .to_string();
    fio(&d, &home, &["--rw=write", "--bs=256k", "--size=17m"]);
    // The paced copy takes seconds: read the page while it is half-way.
    wait_for("the migration to start", Duration::from_secs(30), || {
        get(&d, &admin, "/v1/harvest/volumes/v")["migrations"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["copied"].as_u64() > Some(0)))
    });
    let page = browse(&d, &admin, &[], None);
    if let Err(e) = compare_migrating(&d, &admin, &page) {
        panic!(
            "the page half-way through the migration disagrees with the API: {e}\n{}",
            page.0["rows"]
        );
    }
    eprintln!(
        "half-way through the migration, the page showed {}",
        page.0["rows"]["migration"]
    );
    // b reads and writes for a few seconds (its operating points) while the
    // copy goes on.
    fio(
        &d,
        "b",
        &[
            "--rw=randrw",
            "--bs=4k",
            "--size=8m",
            "--rate_iops=800,400",
            "--runtime=3",
            "--time_based",
        ],
    );
    wait_for("b's rates", Duration::from_secs(10), || {
        get(&d, &admin, "/v1/vssds/b/rates")["rates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["write_iops"].as_f64().unwrap() > 0.0)
    });
    wait_for("the migration to finish", Duration::from_secs(60), || {
        get(&d, &admin, "/v1/events")
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "migrated")
    });
    // Idle from here: the last interval's rates settle to zero.
    std::thread::sleep(Duration::from_millis(1200));

    let shots = std::env::var("FLEXSSD_DASHBOARD_SHOTS").ok();
    let shot = |name: &str| {
        shots
            .as_ref()
            .map(|dir| vec!["--screenshot".to_string(), format!("{dir}/{name}")])
            .unwrap_or_default()
    };

    // The admin's page: it must follow a write made while it is open.
    let before = get(&d, &admin, "/v1/vssds/b")["stats"]["io"]["write_bytes"]
        .as_u64()
        .unwrap();
    let write_b = || {
        fio(
            &d,
            "b",
            &["--rw=write", "--bs=64k", "--size=3m", "--offset=8m"],
        )
    };
    let mut last_err = String::new();
    let mut ok = false;
    for attempt in 0..3 {
        let mut args = vec!["--vssd".to_string(), "b".into(), "--wear".into()];
        if attempt == 0 {
            args.extend(shot("dashboard-admin.png"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let page = if attempt == 0 {
            let p = browse(&d, &admin, &args, Some(("vssd:b:write_bytes", &write_b)));
            assert!(
                p.0["login_shown"] == true,
                "auth is on: the page must ask for a token"
            );
            assert_eq!(
                p.0["watch_before"].as_str().unwrap(),
                fmt_bytes(before),
                "the first read showed b's written bytes as the API had them"
            );
            p
        } else {
            browse(&d, &admin, &args, None)
        };
        assert_eq!(
            page.0["flash"]["ssd0"]["wear_visible"], true,
            "the wear toggle shows the layer"
        );
        assert!(page.0["flash"]["ssd0"]["owner_rects"].as_u64().unwrap() >= 8);
        match compare_admin(&d, &admin, &page) {
            Ok(()) => {
                ok = true;
                break;
            }
            Err(e) => {
                // The host moves on (a harvester tick, a sample) between the
                // page's read and the API's: read both again.
                eprintln!("attempt {attempt}: {e}");
                last_err = e;
            }
        }
    }
    assert!(ok, "the page disagrees with the API: {last_err}");
    let after = get(&d, &admin, "/v1/vssds/b")["stats"]["io"]["write_bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(
        after,
        before + (3 << 20),
        "b took the write made while the page was open"
    );

    // alice sees her vSSDs and volume, nothing of bob's, and no host-wide view.
    let tenant_shot = shot("dashboard-tenant.png");
    let args: Vec<&str> = tenant_shot.iter().map(String::as_str).collect();
    let page = browse(&d, &alice, &args, None);
    let keys: Vec<String> = page.rows("vssd").keys().cloned().collect();
    assert_eq!(keys, ["a", "hv"], "alice's vSSDs");
    assert_eq!(page.rows("volume").keys().collect::<Vec<_>>(), ["v"]);
    let html = page.0["html"].as_str().unwrap();
    assert!(
        !html.contains("bob") && !html.contains(r#"data-key="b""#),
        "alice's page shows bob's: {html}"
    );
    assert!(page.rows("gssd").is_empty() && page.0["flash"].as_object().unwrap().is_empty());
    assert!(html.contains("The flash map is host-wide: an admin token sees it."));
    let mine = get(&d, &alice, "/v1/events").as_array().unwrap().len();
    assert_eq!(page.0["events_total"].as_str().unwrap(), mine.to_string());
    assert_eq!(
        page.cell("vssd", "a", "write_bytes"),
        fmt_bytes(
            get(&d, &alice, "/v1/vssds/a")["stats"]["io"]["write_bytes"]
                .as_u64()
                .unwrap()
        )
    );

    // bob sees b only, and no harvest volume.
    let page = browse(&d, &bob, &[], None);
    assert_eq!(page.rows("vssd").keys().collect::<Vec<_>>(), ["b"]);
    assert!(page.rows("volume").is_empty());
    assert!(!page.0["html"].as_str().unwrap().contains("alice"));
}

#[test]
fn the_page_needs_no_token_but_its_data_does_and_bad_queries_say_why() {
    let d = Daemon::start_api(HOST, API, None, "", &[]);
    // The page and its files are static: no token needed, no data inside.
    for (path, ty) in [
        ("/dashboard", "text/html"),
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/style.css", "text/css"),
    ] {
        let r = d.request_as(None, "GET", path).call().unwrap();
        assert!(
            r.content_type().starts_with(ty),
            "{path}: {}",
            r.content_type()
        );
        let csp = r
            .header("content-security-policy")
            .unwrap_or("")
            .to_string();
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        let body = r.into_string().unwrap();
        assert!(
            !body.contains("alice") && !body.contains("fxs_"),
            "{path} leaks: {body}"
        );
    }
    // The fragment, the rates and the flash map need one.
    for path in [
        "/v1/dashboard",
        "/v1/vssds/a/rates",
        "/v1/devices/ssd0/flash",
    ] {
        let (code, v) = http_as(&d, None, "GET", path, None);
        assert_eq!(code, 401, "{path}: {v}");
    }
    let (code, v) = http(&d, "POST", "/v1/tokens", Some(json!({"tenant": "alice"})));
    assert_eq!(code, 201, "{v}");
    let alice = v["token"].as_str().unwrap().to_string();
    let (code, v) = http_as(&d, Some(&alice), "GET", "/v1/devices/ssd0/flash", None);
    assert_eq!(code, 403, "{v}");
    // Another tenant's vSSD answers exactly as a missing one: a token
    // learns nothing about names it does not own.
    let (code, v) = http_as(&d, Some(&alice), "GET", "/v1/vssds/b/rates", None);
    assert_eq!(code, 404, "{v}");
    let (code2, v2) = http_as(&d, Some(&alice), "GET", "/v1/vssds/nosuch/rates", None);
    assert_eq!(code2, 404, "{v2}");
    // Bad queries are refused with the reason.
    let admin = d.token.clone().unwrap();
    for (q, want) in [
        ("?rows=0", "rows=0"),
        ("?vssd=a%20b", "not a vSSD name"),
        ("?colour=red", "unknown field"),
    ] {
        let r = d
            .request_as(Some(&admin), "GET", &format!("/v1/dashboard{q}"))
            .call();
        let Err(ureq::Error::Status(code, resp)) = r else {
            panic!("{q} was accepted");
        };
        let body = resp.into_string().unwrap();
        assert_eq!(code, 400, "{q}: {body}");
        assert!(body.contains(want), "{q}: {body}");
    }
    // The flash map covers every cell once, and the owners add up.
    let (_, fm) = http(&d, "GET", "/v1/devices/ssd0/flash", None);
    let cells = fm["cells"].as_array().unwrap().len() as u64;
    assert_eq!(cells, 8 * 64);
    let sum: u64 = fm["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["cells"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, cells, "{fm}");
    let owner_of = |name: &str| {
        fm["owners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == name)
            .unwrap()["cells"]
            .as_u64()
            .unwrap()
    };
    // hv owns channels 4 and 5 whole; 6 and 7 are unsold.
    assert_eq!(owner_of("hv"), 2 * 64);
    let unsold = fm["owners"][1]["cells"].as_u64().unwrap();
    assert_eq!(fm["owners"][1]["kind"], "unsold");
    assert_eq!(unsold, 2 * 64);
}
