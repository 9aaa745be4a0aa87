//! Black-box tests of the fleet (issue 12, "Must show"): a real `etcd` on
//! loopback ports, real `flexssd serve` hosts with a `[cluster]` section and
//! real `flexssd cluster serve` schedulers, driven through the fleet API, the
//! CLI and real NBD clients (fio's nbd engine, nbdcopy).
//!
//! Every test starts its own etcd, hosts and schedulers on free ports, so the
//! tests can run side by side. Waits poll with deadlines; when a test fails,
//! the logs of everything it started are printed.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{free_port, have, Daemon};

const BIN: &str = env!("CARGO_BIN_EXE_flexssd");
/// Lease TTL of hosts and schedulers in these tests, seconds.
const TTL: u64 = 2;
const MIB: u64 = 1 << 20;

/// Polls `f` every 50 ms until it returns `Some`, or panics after `secs`.
fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether the tools every test needs are here; the reason when not.
fn tools() -> Result<(), String> {
    for t in ["etcd", "etcdctl"] {
        if !have(t) {
            return Err(format!(
                "{t} is not installed (apt-get install etcd-server etcd-client)"
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- etcd

/// A real etcd on loopback ports with its own data directory.
struct Etcd {
    dir: tempfile::TempDir,
    client: u16,
    peer: u16,
    scheme: &'static str,
    /// Extra `etcd` arguments (TLS).
    extra: Vec<String>,
    /// Extra `etcdctl` arguments (TLS client certificate).
    ctl: Vec<String>,
    child: Option<Child>,
}

impl Etcd {
    fn start() -> Etcd {
        Self::start_with("http", Vec::new(), Vec::new())
    }

    fn start_with(scheme: &'static str, extra: Vec<String>, ctl: Vec<String>) -> Etcd {
        let mut e = Etcd {
            dir: tempfile::Builder::new()
                .prefix("flexssd-etcd")
                .tempdir()
                .unwrap(),
            client: free_port(),
            peer: free_port(),
            scheme,
            extra,
            ctl,
            child: None,
        };
        e.spawn();
        e
    }

    fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.client)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .unwrap();
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let child = Command::new("etcd")
            .args(["--name", "e1", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &self.url()])
            .args(["--advertise-client-urls", &self.url()])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("e1={peer}")])
            .args(&self.extra)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        wait_for(30, "etcd to serve", || {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("etcd exited with {st}; log:\n{}", self.log());
            }
            self.ctl_any(&["endpoint", "health"])
                .status
                .success()
                .then_some(())
        });
    }

    /// `etcdctl ARGS` against this etcd, whatever its status.
    fn ctl_any(&self, args: &[&str]) -> Output {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.url()))
            .args(["--dial-timeout=2s", "--command-timeout=5s"])
            .args(&self.ctl)
            .args(args)
            .output()
            .unwrap()
    }

    /// `etcdctl ARGS`; panics unless it succeeds; stdout.
    fn ctl(&self, args: &[&str]) -> String {
        let o = self.ctl_any(args);
        assert!(o.status.success(), "etcdctl {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Every key under `prefix` with its value (values are one-line JSON).
    fn get_prefix(&self, prefix: &str) -> BTreeMap<String, String> {
        let out = self.ctl(&["get", "--prefix", prefix]);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len().is_multiple_of(2), "etcdctl get output:\n{out}");
        lines
            .chunks(2)
            .map(|kv| (kv[0].to_string(), kv[1].to_string()))
            .collect()
    }

    /// The mod revision of `key` (0 if it does not exist).
    fn mod_revision(&self, key: &str) -> i64 {
        let v: Value = serde_json::from_str(&self.ctl(&["get", key, "-w", "json"])).unwrap();
        v["kvs"][0]["mod_revision"].as_i64().unwrap_or(0)
    }

    /// SIGTERM (a clean stop), and wait.
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let t0 = Instant::now();
            while c.try_wait().unwrap().is_none() {
                if t0.elapsed() > Duration::from_secs(20) {
                    let _ = c.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ----------------------------------------------------------- schedulers

/// One `flexssd cluster serve`.
struct Sched {
    id: String,
    port: u16,
    dir: tempfile::TempDir,
    args: Vec<String>,
    child: Option<Child>,
}

impl Sched {
    fn start(etcd: &Etcd, id: &str, extra: &[&str]) -> Sched {
        let mut s = Sched {
            id: id.to_string(),
            port: free_port(),
            dir: tempfile::Builder::new()
                .prefix("flexssd-sched")
                .tempdir()
                .unwrap(),
            args: Vec::new(),
            child: None,
        };
        s.args = [
            "cluster",
            "serve",
            "--etcd",
            &etcd.url(),
            "--id",
            id,
            "--listen",
            &format!("127.0.0.1:{}", s.port),
            "--ttl",
            &TTL.to_string(),
        ]
        .iter()
        .map(|x| x.to_string())
        .chain(extra.iter().map(|x| x.to_string()))
        .collect();
        let log = std::fs::File::create(s.log_path()).unwrap();
        let child = Command::new(BIN)
            .args(&s.args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start flexssd cluster serve");
        s.child = Some(child);
        wait_for(30, "the scheduler's API", || {
            if let Some(st) = s.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("scheduler {id} exited with {st}; log:\n{}", s.log());
            }
            let (code, _) =
                try_http("GET", &format!("{}/v1/cluster/status", s.url()), None).ok()?;
            // 401: up, with authentication on.
            (code == 200 || code == 401).then_some(())
        });
        s
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("scheduler.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn status(&self) -> Value {
        http_ok("GET", &format!("{}/v1/cluster/status", self.url()), None)
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        self.kill9();
    }
}

// ---------------------------------------------------------------- hosts

/// `n` devices of 8 channels × 2 dies × 64 blocks of 1 MiB (1 GiB each).
fn devices(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "[[devices]]\nname = \"ssd{i}\"\nbackend = \"file\"\n[devices.geometry]\n\
                 channels = 8\ndies_per_channel = 2\nplanes_per_die = 1\nblocks_per_plane = 64\n\
                 pages_per_block = 256\npage_size = 4096\n\n"
            )
        })
        .collect()
}

/// A host daemon in the fleet.
struct Host {
    id: String,
    nbd: u16,
    d: Daemon,
}

impl Host {
    /// Starts `flexssd serve` with `ndev` devices and a `[cluster]` section
    /// (plus `extra` lines in it), serving NBD on a TCP port too.
    fn start(endpoint: &str, id: &str, ndev: usize, extra: &str) -> Host {
        let nbd = free_port();
        // The harness picks the API port itself, so the advertised API is a
        // placeholder: nothing in the fleet calls a host's API.
        let body = format!(
            "{}\n[cluster]\nendpoints = [\"{endpoint}\"]\nhost_id = \"{id}\"\n\
             advertise_nbd = \"127.0.0.1:{nbd}\"\nadvertise_api = \"http://127.0.0.1:9\"\n\
             lease_ttl_s = {TTL}\npublish_interval_ms = 500\n{extra}\n",
            devices(ndev)
        );
        let d = Daemon::start_nbd(&body, &format!("tcp = \"127.0.0.1:{nbd}\""), &[]);
        Host {
            id: id.to_string(),
            nbd,
            d,
        }
    }
}

/// Everything one test started; prints every log if the test fails.
struct Fleet {
    etcd: Etcd,
    hosts: Vec<Host>,
    scheds: Vec<Sched>,
}

impl Fleet {
    /// etcd, `nhosts` hosts h1.. with `ndev` devices each, and schedulers s1.. .
    fn start(nhosts: usize, ndev: usize, nsched: usize) -> Fleet {
        let etcd = Etcd::start();
        let mut f = Fleet {
            hosts: Vec::new(),
            scheds: Vec::new(),
            etcd,
        };
        for i in 1..=nsched {
            let s = Sched::start(&f.etcd, &format!("s{i}"), &[]);
            f.scheds.push(s);
            if i == 1 {
                // The first one leads, so which one is active is known.
                f.wait_active(0, 15);
            }
        }
        for i in 1..=nhosts {
            let h = Host::start(&f.etcd.url(), &format!("h{i}"), ndev, "");
            f.hosts.push(h);
        }
        let ids: Vec<String> = f.hosts.iter().map(|h| h.id.clone()).collect();
        if nsched > 0 {
            f.wait_alive(&ids, 30);
        }
        f
    }

    fn url(&self) -> String {
        self.scheds[0].url()
    }

    fn host(&self, id: &str) -> &Host {
        self.hosts.iter().find(|h| h.id == id).unwrap()
    }

    fn host_mut(&mut self, id: &str) -> &mut Host {
        self.hosts.iter_mut().find(|h| h.id == id).unwrap()
    }

    fn wait_active(&self, i: usize, secs: u64) {
        let s = &self.scheds[i];
        wait_for(secs, &format!("scheduler {} to be active", s.id), || {
            s.status()["active"].as_bool().unwrap().then_some(())
        });
    }

    /// The fleet's hosts (GET /v1/cluster/hosts): id → state.
    fn host_states(&self, url: &str) -> BTreeMap<String, String> {
        let v = http_ok("GET", &format!("{url}/v1/cluster/hosts"), None);
        v.as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["id"].as_str().unwrap().to_string(),
                    h["state"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn wait_alive(&self, ids: &[String], secs: u64) {
        let url = self.url();
        wait_for(secs, &format!("hosts {ids:?} to be alive"), || {
            let st = self.host_states(&url);
            ids.iter()
                .all(|i| st.get(i).map(String::as_str) == Some("alive"))
                .then_some(())
        });
    }

    /// GET /v1/vssds: name → status record.
    fn vssds(&self) -> BTreeMap<String, Value> {
        let v = http_ok("GET", &format!("{}/v1/vssds", self.url()), None);
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| (x["name"].as_str().unwrap().to_string(), x.clone()))
            .collect()
    }

    /// Waits until every vSSD in `names` is `ready`; returns the list.
    fn wait_ready(&self, names: &[String], secs: u64) -> BTreeMap<String, Value> {
        let t0 = Instant::now();
        loop {
            let last = self.vssds();
            let not: Vec<String> = names
                .iter()
                .filter(|n| last.get(*n).and_then(|v| v["state"].as_str()) != Some("ready"))
                .map(|n| format!("{n}: {}", last.get(n).map_or(Value::Null, Clone::clone)))
                .collect();
            if not.is_empty() {
                return last;
            }
            if t0.elapsed() > Duration::from_secs(secs) {
                panic!("not ready after {secs} s:\n{}", not.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `flexssd --cluster URL ARGS`.
    fn cli(&self, url: &str, args: &[&str]) -> Output {
        Command::new("timeout")
            .arg("120")
            .arg(BIN)
            .args(["--cluster", url])
            .args(args)
            .env_remove("FLEXSSD_CLUSTER")
            .env_remove("FLEXSSD_API")
            .env_remove("FLEXSSD_TOKEN")
            .env_remove("FLEXSSD_TOKEN_FILE")
            .output()
            .unwrap()
    }

    fn cli_ok(&self, url: &str, args: &[&str]) -> String {
        let o = self.cli(url, args);
        assert!(
            o.status.success(),
            "flexssd --cluster {url} {args:?}: {}",
            text(&o)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The allocation records in etcd: (host, device) → DeviceAlloc JSON.
    fn allocs(&self) -> BTreeMap<(String, String), Value> {
        self.etcd
            .get_prefix("/flexssd/alloc/")
            .into_iter()
            .map(|(k, v)| {
                let rest = k.strip_prefix("/flexssd/alloc/").unwrap();
                let (h, d) = rest.split_once('/').unwrap();
                (
                    (h.to_string(), d.to_string()),
                    serde_json::from_str(&v).unwrap_or_else(|e| panic!("{k}: {e}: {v}")),
                )
            })
            .collect()
    }

    /// The fleet's vSSD index in etcd: name → FleetVssd JSON.
    fn index(&self) -> BTreeMap<String, Value> {
        self.etcd
            .get_prefix("/flexssd/vssds/")
            .into_iter()
            .map(|(k, v)| {
                (
                    k.strip_prefix("/flexssd/vssds/").unwrap().to_string(),
                    serde_json::from_str(&v).unwrap_or_else(|e| panic!("{k}: {e}: {v}")),
                )
            })
            .collect()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for s in &self.scheds {
            eprintln!("===== scheduler {} log =====\n{}", s.id, s.log());
        }
        for h in &self.hosts {
            eprintln!("===== host {} log =====\n{}", h.id, h.d.log());
        }
        let log = self.etcd.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!(
            "===== etcd log (last 40 lines) =====\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
}

// ----------------------------------------------------------------- HTTP

/// One request: (status, JSON body), or why nothing answered.
fn try_http(method: &str, url: &str, body: Option<&Value>) -> Result<(u16, Value), String> {
    let req = ureq::request(method, url).timeout(Duration::from_secs(30));
    let r = match body {
        Some(b) => req
            .set("Content-Type", "application/json")
            .send_string(&b.to_string()),
        None => req.call(),
    };
    let (code, t) = match r {
        Ok(resp) => (resp.status(), resp.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap_or_default()),
        Err(e) => return Err(e.to_string()),
    };
    Ok((code, serde_json::from_str(&t).unwrap_or(Value::String(t))))
}

fn http(method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    try_http(method, url, body).unwrap_or_else(|e| panic!("{method} {url}: no answer: {e}"))
}

fn http_ok(method: &str, url: &str, body: Option<&Value>) -> Value {
    let (code, v) = http(method, url, body);
    assert!(
        (200..300).contains(&code),
        "{method} {url} {body:?}: {code} {v}"
    );
    v
}

/// POST /v1/vssds through `url`; panics unless it is created.
fn create(url: &str, req: Value) -> Value {
    let (code, v) = http("POST", &format!("{url}/v1/vssds"), Some(&req));
    assert_eq!(code, 201, "create {req}: {code} {v}");
    v
}

// ------------------------------------------------------------- helpers

/// `curve` ([[w, r], ...]) scaled by `s`.
fn scaled(curve: &[(f64, f64)], s: f64) -> Value {
    Value::Array(
        curve
            .iter()
            .map(|(w, r)| json!([(w * s).round(), (r * s).round()]))
            .collect(),
    )
}

/// Fifty mixed tenant SLAs: read-heavy, write-heavy and mixed curves at p99
/// and p95, at three sizes.
fn fifty_slas() -> Vec<Value> {
    let kinds: [(&str, &[(f64, f64)]); 5] = [
        ("p99", &[(0.0, 40000.0), (2000.0, 0.0)]),
        ("p99", &[(0.0, 6000.0), (4000.0, 0.0)]),
        ("p99", &[(0.0, 20000.0), (2000.0, 15000.0), (4000.0, 0.0)]),
        ("p95", &[(0.0, 50000.0), (2000.0, 0.0)]),
        ("p95", &[(0.0, 25000.0), (2500.0, 18000.0), (5000.0, 0.0)]),
    ];
    // Heavy enough that no unit takes more than 8 tenants by curve: a unit
    // (64 blocks per plane) has room for 8 tenants of 8 blocks, and the
    // scheduler refuses a curve that fits a full unit (see the report).
    let sizes = [1.0, 1.25, 1.5];
    (0..50)
        .map(|i| {
            let (p, c) = kinds[i % 5];
            json!({ "curve": scaled(c, sizes[(i / 5) % 3]), "percentile": p })
        })
        .collect()
}

fn nbd_uri(v: &Value) -> String {
    v["uri"]
        .as_str()
        .unwrap_or_else(|| panic!("no uri: {v}"))
        .to_string()
}

fn fio_verify(uri: &str, dir: &Path) {
    let out = Command::new("timeout")
        .arg("120")
        .arg("fio")
        .args([
            "--name=verify",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            "--bs=4k",
            "--size=8m",
            "--iodepth=8",
            "--verify=crc32c",
            "--do_verify=1",
            "--output-format=json",
        ])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "fio on {uri}: {}", text(&out));
    // fio's nbd engine prints a line of its own before the JSON.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&stdout[stdout.find('{').unwrap_or(0)..])
        .unwrap_or_else(|e| panic!("fio json ({e}): {}", text(&out)));
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "fio on {uri}: {job}");
    assert!(
        job["write"]["io_bytes"].as_u64().unwrap() >= 8 * MIB,
        "fio wrote too little: {job}"
    );
    assert!(
        job["read"]["io_bytes"].as_u64().unwrap() >= 8 * MIB,
        "fio verified too little: {job}"
    );
}

fn nbdcopy(from: &str, to: &str) {
    support::run("nbdcopy", &[from, to]);
}

// ---------------------------------------------------------------- tests

/// Three hosts of four 8-channel devices, one scheduler: 50 vSSDs with mixed
/// SLA curves and a few by channel count all become ready, on no more SLA
/// units than `sim sla-placement` needs for the same curves, on more than one
/// host; fio's crc32c verify passes on exports of two different hosts.
#[test]
fn fifty_mixed_vssds_on_three_hosts() {
    require!(tools().is_ok(), tools().unwrap_err());
    require!(have("fio"), "fio is not installed");
    let f = Fleet::start(3, 4, 1);
    let url = f.url();
    let slas = fifty_slas();
    let mut names = Vec::new();
    let t0 = Instant::now();
    for (i, s) in slas.iter().enumerate() {
        let name = format!("t{i:02}");
        let cap = (8 + 4 * (i as u64 % 3)) * MIB;
        create(&url, json!({ "name": name, "sla": s, "capacity": cap }));
        names.push(name);
    }
    eprintln!("50 SLA placements in {:?}", t0.elapsed());
    // A few by channel count, through the CLI (which waits for the host).
    for (i, args) in [
        vec!["--channels", "2"],
        vec!["--channels", "3", "--host", "h2"],
        vec!["--channels", "1", "--capacity", "16M"],
    ]
    .iter()
    .enumerate()
    {
        let name = format!("c{i}");
        let mut a = vec!["vssd", "create", &name];
        a.extend(args.iter().copied());
        let out = f.cli_ok(&url, &a);
        assert!(out.contains("export: nbd://127.0.0.1:"), "{out}");
        names.push(name);
    }
    let all = f.wait_ready(&names, 60);
    assert_eq!(
        all["c1"]["host"], "h2",
        "--host h2 was not honoured: {}",
        all["c1"]
    );

    // Units used versus the simulator on the same requests, in the same order.
    let allocs = f.allocs();
    let units: Vec<_> = allocs
        .iter()
        .filter(|(_, a)| a["mode"] == "unit" && !a["tenants"].as_array().unwrap().is_empty())
        .collect();
    let reqs = f.etcd.dir.path().join("requests.json");
    std::fs::write(&reqs, Value::Array(slas.clone()).to_string()).unwrap();
    let sim: Value = serde_json::from_str(&support::sim_ok(
        "sla-placement",
        &[
            "--requests",
            reqs.to_str().unwrap(),
            "--max-stripes",
            "1",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(sim["placed"], 50, "{sim}");
    let sim_units = sim["units"].as_u64().unwrap() as usize;
    eprintln!(
        "fleet SLA units: {} ({:?}); sim sla-placement: {sim_units}",
        units.len(),
        units.iter().map(|(k, _)| k).collect::<Vec<_>>()
    );
    assert!(
        units.len() <= sim_units,
        "the fleet used {} units, the simulator {sim_units}",
        units.len()
    );
    // Every SLA vSSD is a tenant of exactly the unit it says it is on.
    for n in names.iter().filter(|n| n.starts_with('t')) {
        let v = &all[n];
        let key = (
            v["host"].as_str().unwrap().to_string(),
            v["device"].as_str().unwrap().to_string(),
        );
        let a = &allocs[&key];
        assert_eq!(a["mode"], "unit", "{n}: {v}");
        assert!(
            a["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == *n),
            "{n} is not a tenant of {key:?}: {a}"
        );
    }
    let hosts: BTreeSet<&str> = all.values().map(|v| v["host"].as_str().unwrap()).collect();
    assert!(hosts.len() > 1, "all vSSDs landed on {hosts:?}");
    let st = f.scheds[0].status();
    assert_eq!(st["units"].as_u64().unwrap() as usize, units.len(), "{st}");
    assert_eq!(st["vssds"], names.len(), "{st}");

    // fio with crc32c verify on exports of two different hosts.
    let first = &all["t00"];
    let other = all
        .values()
        .find(|v| v["host"] != first["host"] && v["capacity_bytes"].as_u64().unwrap() >= 8 * MIB)
        .expect("a vSSD on another host");
    for v in [first, other] {
        let uri = nbd_uri(v);
        let h = f.host(v["host"].as_str().unwrap());
        assert!(
            uri.starts_with(&format!("nbd://127.0.0.1:{}/", h.nbd)),
            "{uri} is not on {}'s NBD port {}",
            h.id,
            h.nbd
        );
        fio_verify(&uri, f.etcd.dir.path());
    }
}

/// `kill -9` of a host: lost within TTL + 1 s, a `host-lost` event, its vSSD
/// unavailable and no new placements there; after a restart it re-registers,
/// the vSSD is ready again and its data intact.
#[test]
fn host_kill9_is_detected_and_the_host_comes_back_intact() {
    require!(tools().is_ok(), tools().unwrap_err());
    require!(have("nbdcopy"), "nbdcopy is not installed");
    let mut f = Fleet::start(2, 2, 1);
    let url = f.url();
    f.cli_ok(
        &url,
        &[
            "vssd",
            "create",
            "keep",
            "--channels",
            "2",
            "--host",
            "h1",
            "--capacity",
            "8M",
        ],
    );
    f.cli_ok(
        &url,
        &["vssd", "create", "other", "--channels", "1", "--host", "h2"],
    );
    let v = f.wait_ready(&["keep".to_string(), "other".to_string()], 30);
    let uri = nbd_uri(&v["keep"]);
    let dir = f.etcd.dir.path().to_path_buf();
    let src = dir.join("src.bin");
    support::random_file(&src, 8 * MIB as usize, 42);
    nbdcopy(src.to_str().unwrap(), &uri);

    let observed_rev = f.etcd.mod_revision("/flexssd/observed/h1/keep");
    assert!(observed_rev > 0);
    // Give the agent a keep-alive cycle so the kill lands at an arbitrary point.
    std::thread::sleep(Duration::from_millis(300));
    f.host_mut("h1").d.kill9();
    let t0 = Instant::now();
    let mut polls = 0;
    let detected = loop {
        polls += 1;
        if f.host_states(&url).get("h1").map(String::as_str) == Some("lost") {
            break t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "h1 never shown lost"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("host h1 kill -9 detected as lost after {detected:?} (TTL {TTL} s, {polls} polls)");
    // TTL + 1 s, plus 250 ms for the 50 ms poll period and one request.
    assert!(
        detected <= Duration::from_millis(TTL * 1000 + 1000 + 250),
        "loss detected after {detected:?}, more than TTL + 1 s"
    );
    // The CLI says so too.
    let hosts: Value =
        serde_json::from_str(&f.cli_ok(&url, &["cluster", "hosts", "--json"])).unwrap();
    let h1 = hosts
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == "h1")
        .unwrap();
    assert_eq!(h1["state"], "lost", "{hosts}");
    let h2 = hosts
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == "h2")
        .unwrap();
    assert_eq!(h2["state"], "alive", "{hosts}");
    // And the fleet's dashboard: h1 lost without a link, h2 alive with a
    // link to its own dashboard; the page itself needs no token.
    let (code, page) = http("GET", &format!("{url}/dashboard"), None);
    assert_eq!(code, 200);
    assert!(
        page.as_str().unwrap().contains("/v1/cluster/dashboard"),
        "{page}"
    );
    let (code, frag) = http("GET", &format!("{url}/v1/cluster/dashboard"), None);
    assert_eq!(code, 200, "{frag}");
    let frag = frag.as_str().unwrap().to_string();
    assert!(
        frag.contains(r#"<tr data-row="host" data-key="h1" class="lost">"#),
        "{frag}"
    );
    let h2_api = h2["record"]["api"].as_str().unwrap().trim_end_matches('/');
    assert!(
        frag.contains(&format!(r#"href="{h2_api}/dashboard""#)),
        "{frag}"
    );
    let events: Value = serde_json::from_str(&f.cli_ok(&url, &["events", "--json"])).unwrap();
    let lost = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "host-lost" && e["host"] == "h1")
        .unwrap_or_else(|| panic!("no host-lost event for h1: {events}"));
    assert!(lost["detail"].as_str().unwrap().contains("keep"), "{lost}");
    let show: Value =
        serde_json::from_str(&f.cli_ok(&url, &["vssd", "show", "keep", "--json"])).unwrap();
    assert_eq!(show["state"], "unavailable", "{show}");
    assert_eq!(f.vssds()["other"]["state"], "ready");
    // Nothing new lands on the lost host.
    let o = f.cli(
        &url,
        &["vssd", "create", "nope", "--channels", "1", "--host", "h1"],
    );
    assert!(!o.status.success(), "placed on a lost host: {}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no live host named"),
        "{}",
        text(&o)
    );

    // Restart: it re-registers, the vSSD is ready again, the data is intact.
    let t1 = Instant::now();
    f.host_mut("h1").d.restart();
    f.wait_alive(&["h1".to_string()], 30);
    let v = f.wait_ready(&["keep".to_string()], 30);
    // Reconciled: the agent reported the vSSD again (its observed record
    // survives the host, so `ready` alone would not show it).
    wait_for(30, "h1 to report keep again", || {
        (f.etcd.mod_revision("/flexssd/observed/h1/keep") > observed_rev).then_some(())
    });
    eprintln!(
        "h1 restarted, re-registered and reconciled in {:?}",
        t1.elapsed()
    );
    assert_eq!(nbd_uri(&v["keep"]), uri);
    let back = dir.join("back.bin");
    nbdcopy(&uri, back.to_str().unwrap());
    assert!(
        std::fs::read(&src).unwrap() == std::fs::read(&back).unwrap(),
        "the data read back after the restart differs"
    );
    let events = http_ok("GET", &format!("{url}/v1/events?limit=1000"), None);
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "host-joined"
                && e["host"] == "h1"
                && e["at_ms"].as_u64() > lost["at_ms"].as_u64()),
        "no host-joined event for h1 after its loss: {events}"
    );
}

/// Two schedulers: a create sent to the follower is forwarded; after
/// `kill -9` of the active one the other takes over within a few seconds and
/// creates keep working.
#[test]
fn scheduler_kill9_fails_over() {
    require!(tools().is_ok(), tools().unwrap_err());
    let mut f = Fleet::start(1, 2, 2);
    let s2 = f.scheds[1].url();
    let st = f.scheds[1].status();
    assert_eq!(st["active"], false, "{st}");
    assert_eq!(st["leader"]["id"], "s1", "{st}");
    // Through the follower: forwarded to s1.
    let out = f.cli_ok(&s2, &["vssd", "create", "fwd", "--channels", "2"]);
    assert!(out.contains("export: nbd://"), "{out}");
    let placed_by_s1 =
        f.etcd.get_prefix("/flexssd/events/").iter().any(|(k, v)| {
            k.contains("-s1-") && v.contains("vssd-placed") && v.contains("fwd placed")
        });
    assert!(placed_by_s1, "s1 did not place fwd");
    let text = f.cli_ok(&s2, &["cluster", "status", "--json"]);
    let st: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(st["leader"]["id"], "s1", "{st}");

    f.scheds[0].kill9();
    let t0 = Instant::now();
    wait_for(TTL + 8, "s2 to take over", || {
        let st = f.scheds[1].status();
        (st["active"] == true && st["leader"]["id"] == "s2").then_some(())
    });
    let failover = t0.elapsed();
    eprintln!("scheduler failover after kill -9: {failover:?} (TTL {TTL} s)");
    // The leader lease runs out within TTL of the kill; the follower then
    // waits 1 s before it campaigns; 1 s more for slack on a loaded machine.
    assert!(
        failover <= Duration::from_secs(TTL + 3),
        "failover took {failover:?}"
    );
    let st: Value = serde_json::from_str(&f.cli_ok(&s2, &["cluster", "status", "--json"])).unwrap();
    assert_eq!(st["active"], true, "{st}");
    assert_eq!(st["leader"]["id"], "s2", "{st}");
    let out = f.cli_ok(&s2, &["vssd", "create", "after", "--channels", "1"]);
    assert!(out.contains("export: nbd://"), "{out}");
    let url2 = s2.clone();
    let v = http_ok("GET", &format!("{url2}/v1/vssds"), None);
    let names: BTreeSet<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["fwd", "after"]));
    let events = http_ok("GET", &format!("{url2}/v1/events?limit=100"), None);
    assert!(
        events.as_array().unwrap().iter().any(
            |e| e["kind"] == "scheduler-active" && e["detail"].as_str().unwrap().contains("s2")
        ),
        "no scheduler-active event for s2: {events}"
    );
    // Both placements hold distinct channels.
    let idx = f.index();
    let a: BTreeSet<u64> = idx["fwd"]["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    let b: BTreeSet<u64> = idx["after"]["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    if idx["fwd"]["device"] == idx["after"]["device"] {
        assert!(a.is_disjoint(&b), "double booking after failover: {idx:?}");
    }
}

/// A follower scheduler and an idle host keep their etcd connections. etcd
/// closes a connection that pings more often than its
/// `--grpc-keepalive-min-time` (5 s) while no stream carries anything; with
/// 2 s pings the follower lost its watch and its election every 8 s.
#[test]
fn idle_connections_to_etcd_stay_up() {
    require!(tools().is_ok(), tools().unwrap_err());
    let f = Fleet::start(1, 1, 2);
    // Three of etcd's strikes took 8 s; wait past two such rounds.
    std::thread::sleep(Duration::from_secs(18));
    let st = f.scheds[1].status();
    assert_eq!(st["active"], false, "{st}");
    assert_eq!(st["hosts_alive"], 1, "{st}");
    for s in &f.scheds {
        let log = s.log();
        for bad in ["watch ended", "election: retrying", "error"] {
            assert!(
                !log.contains(bad),
                "scheduler {} lost its etcd connection ({bad:?}):\n{log}",
                s.id
            );
        }
    }
    for h in &f.hosts {
        let log = h.d.log();
        assert!(
            !log.contains("WARN") && !log.contains("ERROR"),
            "host {} warned about etcd:\n{log}",
            h.id
        );
    }
}

/// etcd stopped (SIGTERM) for 3 s and restarted on the same data: the hosts
/// re-register, every vSSD is still there, ready, with its data, and new
/// creates work.
#[test]
fn etcd_restart_loses_nothing() {
    require!(tools().is_ok(), tools().unwrap_err());
    require!(have("nbdcopy"), "nbdcopy is not installed");
    let mut f = Fleet::start(2, 2, 1);
    let url = f.url();
    create(
        &url,
        json!({"name": "a", "channels": 2, "host": "h1", "capacity": 8 * MIB}),
    );
    create(&url, json!({"name": "b", "channels": 1, "host": "h2"}));
    create(
        &url,
        json!({"name": "u", "sla": {"curve": [[0, 50000], [5000, 0]], "percentile": "p99"}, "capacity": 16 * MIB}),
    );
    let names: Vec<String> = ["a", "b", "u"].iter().map(|s| s.to_string()).collect();
    let before = f.wait_ready(&names, 30);
    let dir = f.etcd.dir.path().to_path_buf();
    let src = dir.join("src.bin");
    support::random_file(&src, 8 * MIB as usize, 7);
    let uri = nbd_uri(&before["a"]);
    nbdcopy(src.to_str().unwrap(), &uri);
    let index_before = f.index();
    let allocs_before = f.allocs();

    f.etcd.stop();
    std::thread::sleep(Duration::from_secs(3));
    // Meanwhile the scheduler still answers reads from its view.
    let (code, _) = http("GET", &format!("{url}/v1/cluster/hosts"), None);
    assert_eq!(code, 200);
    let t0 = Instant::now();
    f.etcd.spawn();
    f.wait_alive(&["h1".to_string(), "h2".to_string()], 30);
    let after = f.wait_ready(&names, 30);
    eprintln!(
        "after the etcd restart: hosts alive and vSSDs ready in {:?}",
        t0.elapsed()
    );
    assert_eq!(after.len(), 3, "{after:?}");
    assert_eq!(f.index(), index_before, "the vSSD index changed");
    assert_eq!(f.allocs(), allocs_before, "the allocations changed");
    // A new create works once a scheduler leads again.
    let v = wait_for(30, "a create after the etcd restart", || {
        let (code, v) = http(
            "POST",
            &format!("{url}/v1/vssds"),
            Some(&json!({"name": "c", "channels": 1})),
        );
        match code {
            201 => Some(v),
            503 => None,
            _ => panic!("create after the etcd restart: {code} {v}"),
        }
    });
    eprintln!(
        "a create succeeded {:?} after the etcd restart",
        t0.elapsed()
    );
    assert_eq!(v["name"], "c");
    f.wait_ready(&["c".to_string()], 30);
    let back = dir.join("back.bin");
    nbdcopy(&uri, back.to_str().unwrap());
    assert!(
        std::fs::read(&src).unwrap() == std::fs::read(&back).unwrap(),
        "data changed"
    );
    // Still no double booking.
    check_no_double_booking(&f);
}

/// Checks the final fleet state: no channel booked twice, unit tenants on
/// disjoint block ranges, the index agreeing with the allocations, and each
/// host running exactly what the fleet placed on it.
fn check_no_double_booking(f: &Fleet) {
    let allocs = f.allocs();
    let index = f.index();
    // (host, device, channel) → whole-channel vSSD, from the index.
    let mut by_channel: BTreeMap<(String, String, u64), String> = BTreeMap::new();
    for (name, v) in &index {
        assert_eq!(v["name"], *name);
        let key = (
            v["host"].as_str().unwrap().to_string(),
            v["device"].as_str().unwrap().to_string(),
        );
        let a = allocs
            .get(&key)
            .unwrap_or_else(|| panic!("{name} is on {key:?}, which has no allocation"));
        let chans: Vec<u64> = v["channels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        if v.get("blocks").is_some_and(|b| !b.is_null()) {
            // A unit tenant: listed in the unit with the same blocks.
            assert_eq!(a["mode"], "unit", "{name}: {a}");
            let t = a["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == *name)
                .unwrap_or_else(|| panic!("{name} not a tenant of {key:?}: {a}"));
            assert_eq!(t["blocks"], v["blocks"], "{name}");
        } else {
            assert_eq!(a["mode"], "channels", "{name}: {a}");
            for c in &chans {
                let prev = by_channel.insert((key.0.clone(), key.1.clone(), *c), name.clone());
                assert!(
                    prev.is_none(),
                    "channel {c} of {key:?} booked by {prev:?} and {name}"
                );
                assert_eq!(a["channels"][c.to_string()], *name, "{name} ch {c}: {a}");
            }
        }
    }
    for ((h, d), a) in &allocs {
        match a["mode"].as_str().unwrap() {
            "channels" => {
                for (c, n) in a["channels"].as_object().unwrap() {
                    let c: u64 = c.parse().unwrap();
                    let owner = by_channel.get(&(h.clone(), d.clone(), c));
                    assert_eq!(
                        owner.map(String::as_str),
                        n.as_str(),
                        "{h}/{d} channel {c} booked for {n} but the index says {owner:?}"
                    );
                }
            }
            "unit" => {
                let mut ranges: Vec<(u64, u64, String)> = a["tenants"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| {
                        let n = t["name"].as_str().unwrap().to_string();
                        assert!(
                            index.contains_key(&n),
                            "tenant {n} of {h}/{d} not in the index"
                        );
                        assert_eq!(index[&n]["device"], *d);
                        assert_eq!(index[&n]["host"], *h);
                        (
                            t["blocks"][0].as_u64().unwrap(),
                            t["blocks"][1].as_u64().unwrap(),
                            n,
                        )
                    })
                    .collect();
                ranges.sort();
                for w in ranges.windows(2) {
                    assert!(
                        w[0].1 <= w[1].0,
                        "{h}/{d}: blocks of {} and {} overlap: {a}",
                        w[0].2,
                        w[1].2
                    );
                }
                assert!(
                    a["channels"].as_object().is_none_or(|m| m.is_empty()),
                    "{a}"
                );
            }
            m => panic!("{h}/{d}: mode {m}"),
        }
    }
    // Each host runs exactly the vSSDs the fleet placed on it, on the same
    // channels (and blocks).
    for h in &f.hosts {
        let local = support::http(&h.d, "GET", "/v1/vssds", None).1;
        let local: BTreeMap<String, Value> = local
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["name"].as_str().unwrap().to_string(), v.clone()))
            .collect();
        let placed: BTreeSet<&String> = index
            .iter()
            .filter(|(_, v)| v["host"] == *h.id)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            local.keys().collect::<BTreeSet<_>>(),
            placed,
            "host {}",
            h.id
        );
        for n in placed {
            let (l, v) = (&local[n], &index[n]);
            assert_eq!(l["device"], v["device"], "{n} on {}", h.id);
            assert_eq!(l["channels"], v["channels"], "{n} on {}", h.id);
            if let Some(b) = v.get("blocks").filter(|b| !b.is_null()) {
                for x in l["extents"].as_array().unwrap() {
                    let first = x["first_block"].as_u64().unwrap();
                    assert_eq!(first, b[0].as_u64().unwrap(), "{n}: {l}");
                    assert_eq!(
                        first + x["blocks"].as_u64().unwrap(),
                        b[1].as_u64().unwrap(),
                        "{n}: {l}"
                    );
                }
            }
        }
    }
}

/// Two clients create at once, through two schedulers (one forwards to the
/// other), more than the fleet holds: every answer is a placement or a clear
/// refusal, and the final state never books a channel or a block twice.
#[test]
fn concurrent_creates_never_double_book() {
    require!(tools().is_ok(), tools().unwrap_err());
    let f = Fleet::start(2, 3, 2);
    let urls = [f.scheds[0].url(), f.scheds[1].url()];
    let results: Vec<Vec<(String, u16, Value)>> = std::thread::scope(|s| {
        let hs: Vec<_> = ["a", "b"]
            .iter()
            .zip(&urls)
            .map(|(p, url)| {
                s.spawn(move || {
                    (0..15)
                        .map(|i| {
                            let name = format!("{p}{i:02}");
                            let req = if i % 5 == 4 {
                                json!({"name": name, "capacity": 8 * MIB,
                                       "sla": {"curve": [[0, 60000], [6000, 0]], "percentile": "p99"}})
                            } else {
                                json!({"name": name, "channels": 1 + (i % 3)})
                            };
                            let (code, v) = http("POST", &format!("{url}/v1/vssds"), Some(&req));
                            (name, code, v)
                        })
                        .collect()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut placed = Vec::new();
    let mut refused = 0;
    for (name, code, v) in results.iter().flatten() {
        match code {
            201 => placed.push(name.clone()),
            507 => {
                refused += 1;
                let e = v["error"].as_str().unwrap_or_default();
                assert!(
                    e.contains(name.as_str()),
                    "the refusal of {name} does not name it: {v}"
                );
            }
            _ => panic!("create {name}: {code} {v}"),
        }
    }
    eprintln!("{} placed, {refused} refused (no room)", placed.len());
    // 48 channels; the 24 whole-channel requests ask for 48 and the SLA
    // units take whole devices: the fleet fills up.
    assert!(placed.len() >= 15, "only {} placed", placed.len());
    f.wait_ready(&placed, 60);
    let index = f.index();
    assert_eq!(
        index.keys().cloned().collect::<BTreeSet<_>>(),
        placed.iter().cloned().collect()
    );
    check_no_double_booking(&f);
}

/// Bad input: etcd unreachable at start, malformed values under flexssd's
/// keys, a request naming no live host, a bad `cluster.host_id`.
#[test]
fn bad_input_is_refused_clearly() {
    require!(tools().is_ok(), tools().unwrap_err());
    // (a) Nothing listens on the etcd port: the scheduler gives up after 2
    // attempts and says why; a host keeps retrying and says so.
    let dead = free_port();
    let dead_url = format!("http://127.0.0.1:{dead}");
    let out = Command::new("timeout")
        .arg("60")
        .arg(BIN)
        .args([
            "cluster",
            "serve",
            "--etcd",
            &dead_url,
            "--id",
            "s9",
            "--connect-attempts",
            "2",
        ])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && out.status.code() != Some(124),
        "{}",
        text(&out)
    );
    assert!(err.contains("etcd"), "{}", text(&out));
    assert!(
        err.contains(&dead.to_string()),
        "the error does not name the endpoint: {}",
        text(&out)
    );
    let host = Host::start(&dead_url, "h1", 1, "");
    wait_for(15, "the host to log that etcd is unreachable", || {
        let l = host.d.log();
        (l.contains("etcd is unreachable")
            && l.contains("retrying")
            && l.contains(&dead.to_string()))
        .then_some(())
    });
    // It serves its own API meanwhile.
    assert!(host.d.get("/v1/vssds").is_some());
    drop(host);

    // (b) Malformed values under flexssd's keys.
    let f = Fleet::start(1, 2, 1);
    let url = f.url();
    f.etcd.ctl(&["put", "/flexssd/hosts/bogus", "not json"]);
    f.etcd
        .ctl(&["put", "/flexssd/alloc/h1/ssd9", r#"{"mode":"disk"}"#]);
    f.etcd.ctl(&["put", "/flexssd/vssds/junk", "{"]);
    f.etcd.ctl(&["put", "/flexssd/desired/h1/junk", "[1,2]"]);
    let log = wait_for(10, "the scheduler to refuse the malformed keys", || {
        let l = f.scheds[0].log();
        (l.contains("/flexssd/hosts/bogus") && l.contains("/flexssd/alloc/h1/ssd9")).then_some(l)
    });
    assert!(log.contains("malformed value"), "{log}");
    wait_for(10, "the host to refuse the malformed desired key", || {
        f.host("h1")
            .d
            .log()
            .contains("/flexssd/desired/h1/junk")
            .then_some(())
    });
    // Still serving, and placing.
    let hosts = f.host_states(&url);
    assert_eq!(
        hosts.get("h1").map(String::as_str),
        Some("alive"),
        "{hosts:?}"
    );
    assert!(!hosts.contains_key("bogus"), "{hosts:?}");
    let out = f.cli_ok(&url, &["vssd", "create", "ok1", "--channels", "2"]);
    assert!(out.contains("export: nbd://"), "{out}");
    create(
        &url,
        json!({"name": "ok2", "sla": {"curve": [[0, 40000], [2000, 0]], "percentile": "p99"}, "capacity": 8 * MIB}),
    );
    let v = f.wait_ready(&["ok1".to_string(), "ok2".to_string()], 30);
    assert_eq!(v.len(), 2, "the malformed index entry is listed: {v:?}");
    assert!(f.scheds[0].child.as_ref().is_some());
    // A malformed request body is a 400, not a crash.
    let (code, body) = http(
        "POST",
        &format!("{url}/v1/vssds"),
        Some(&json!({"name": "x", "bogus": 1})),
    );
    assert_eq!(code, 400, "{body}");
    let (code, body) = http(
        "POST",
        &format!("{url}/v1/vssds"),
        Some(
            &json!({"name": "y", "sla": {"curve": [[0, 10], [5, 20], [10, 0]], "percentile": "p99"}, "capacity": MIB}),
        ),
    );
    assert_eq!(code, 400, "{body}");

    // (c) A host that does not exist.
    let o = f.cli(
        &url,
        &["vssd", "create", "x", "--channels", "1", "--host", "nosuch"],
    );
    assert!(!o.status.success(), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("no live host named") && e.contains("nosuch"),
        "{}",
        text(&o)
    );
    assert_eq!(f.etcd.ctl(&["get", "/flexssd/vssds/x"]), "");

    // (d) A bad host id in [cluster].
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        format!(
            "data_dir = \"{}\"\n{}\n[cluster]\nendpoints = [\"{}\"]\nhost_id = \"bad id!\"\n\
             advertise_nbd = \"127.0.0.1:{}\"\nadvertise_api = \"http://127.0.0.1:9\"\n\n\
             [api]\nlisten = \"127.0.0.1:{}\"\n\n[nbd]\nsocket = \"{}\"\n",
            dir.path().join("data").display(),
            devices(1),
            f.etcd.url(),
            free_port(),
            free_port(),
            dir.path().join("nbd.sock").display()
        ),
    )
    .unwrap();
    let out = Command::new("timeout")
        .arg("30")
        .arg(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        !out.status.success() && out.status.code() != Some(124),
        "{}",
        text(&out)
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("cluster.host_id"), "{}", text(&out));
}

/// A host started before etcd keeps retrying and joins once etcd is up.
#[test]
fn host_joins_once_etcd_comes_up() {
    require!(tools().is_ok(), tools().unwrap_err());
    // Reserve ports for an etcd that does not run yet.
    let mut e = Etcd {
        dir: tempfile::Builder::new()
            .prefix("flexssd-etcd")
            .tempdir()
            .unwrap(),
        client: free_port(),
        peer: free_port(),
        scheme: "http",
        extra: Vec::new(),
        ctl: Vec::new(),
        child: None,
    };
    let h = Host::start(&e.url(), "late", 1, "");
    wait_for(15, "the host to log that etcd is unreachable", || {
        h.d.log().contains("etcd is unreachable").then_some(())
    });
    e.spawn();
    let f = Fleet {
        scheds: vec![Sched::start(&e, "s1", &[])],
        hosts: vec![h],
        etcd: e,
    };
    f.wait_alive(&["late".to_string()], 30);
    f.cli_ok(&f.url(), &["vssd", "create", "v", "--channels", "1"]);
    f.wait_ready(&["v".to_string()], 30);
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", text(&out));
}

/// etcd with TLS and client-certificate auth (issue 13 item 4): a host with
/// `etcd_tls` and a scheduler with `--etcd-ca/--etcd-cert/--etcd-key`
/// register and place; a client without a certificate is refused.
#[test]
fn etcd_with_client_certificates() {
    require!(tools().is_ok(), tools().unwrap_err());
    require!(have("openssl"), "openssl is not installed");
    let pki = tempfile::Builder::new()
        .prefix("flexssd-pki")
        .tempdir()
        .unwrap();
    let d = pki.path();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut a = vec!["req", "-x509"];
    a.extend(ec);
    a.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=flexssd test CA",
    ]);
    openssl(d, &a);
    for (name, cn, ext) in [
        (
            "server",
            "etcd",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
        ),
        ("client", "flexssd", "extendedKeyUsage=clientAuth\n"),
    ] {
        let mut a = vec!["req"];
        a.extend(ec);
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let crt = format!("{name}.crt");
        let subj = format!("/CN={cn}");
        a.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(d, &a);
        std::fs::write(d.join(format!("{name}.ext")), ext).unwrap();
        let extf = format!("{name}.ext");
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                &extf,
            ],
        );
    }
    let p = |f: &str| d.join(f).display().to_string();
    let e = Etcd::start_with(
        "https",
        vec![
            format!("--cert-file={}", p("server.crt")),
            format!("--key-file={}", p("server.key")),
            "--client-cert-auth".into(),
            format!("--trusted-ca-file={}", p("ca.crt")),
        ],
        vec![
            format!("--cacert={}", p("ca.crt")),
            format!("--cert={}", p("client.crt")),
            format!("--key={}", p("client.key")),
        ],
    );
    // Without a client certificate, etcd refuses.
    let o = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", e.url()))
        .arg(format!("--cacert={}", p("ca.crt")))
        .args([
            "--dial-timeout=2s",
            "--command-timeout=3s",
            "put",
            "/flexssd/x",
            "y",
        ])
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "etcd accepted a client without a certificate: {}",
        text(&o)
    );
    // Neither does the scheduler get in without one.
    let o = Command::new("timeout")
        .arg("60")
        .arg(BIN)
        .args([
            "cluster",
            "serve",
            "--etcd",
            &e.url(),
            "--id",
            "nocert",
            "--connect-attempts",
            "2",
        ])
        .args(["--etcd-ca", &p("ca.crt")])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && o.status.code() != Some(124),
        "{}",
        text(&o)
    );

    let sched = Sched::start(
        &e,
        "s1",
        &[
            "--etcd-ca",
            &p("ca.crt"),
            "--etcd-cert",
            &p("client.crt"),
            "--etcd-key",
            &p("client.key"),
        ],
    );
    let tls = format!(
        "etcd_tls = {{ ca_file = \"{}\", cert_file = \"{}\", key_file = \"{}\" }}",
        p("ca.crt"),
        p("client.crt"),
        p("client.key")
    );
    let h = Host::start(&e.url(), "h1", 2, &tls);
    let f = Fleet {
        etcd: e,
        hosts: vec![h],
        scheds: vec![sched],
    };
    f.wait_active(0, 15);
    f.wait_alive(&["h1".to_string()], 30);
    let out = f.cli_ok(&f.url(), &["vssd", "create", "sec", "--channels", "2"]);
    assert!(out.contains("export: nbd://"), "{out}");
    create(
        &f.url(),
        json!({"name": "sec2", "sla": {"curve": [[0, 40000], [2000, 0]], "percentile": "p99"}, "capacity": 8 * MIB}),
    );
    f.wait_ready(&["sec".to_string(), "sec2".to_string()], 30);
    assert!(f
        .etcd
        .get_prefix("/flexssd/hosts/")
        .contains_key("/flexssd/hosts/h1"));
}

/// A unit whose curve has room but whose blocks are all taken sends the next
/// tenant to a new unit (it was refused), and `host` is obeyed for tenants
/// that would fit an existing unit elsewhere (it was ignored).
#[test]
fn full_units_spill_over_and_host_pins_are_obeyed() {
    require!(tools().is_ok(), tools().unwrap_err());
    let f = Fleet::start(2, 2, 1);
    let url = f.url();
    let light = json!({"curve": [[0, 1000], [100, 0]], "percentile": "p95"});
    let mut units = BTreeSet::new();
    // 64 blocks per plane hold 8 light 8 MiB tenants (data + GC spare each).
    for i in 0..10 {
        let req = json!({"name": format!("l{i}"), "capacity": 8 * MIB, "sla": light});
        let (code, v) = http("POST", &format!("{url}/v1/vssds"), Some(&req));
        assert_eq!(code, 201, "l{i}: {v}");
        units.insert(format!("{}/{}", v["host"], v["device"]));
    }
    assert!(units.len() >= 2, "ten tenants on {units:?}");
    let (code, v) = http(
        "POST",
        &format!("{url}/v1/vssds"),
        Some(&json!({"name": "pinned", "capacity": 8 * MIB, "sla": light, "host": "h2"})),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["host"], "h2", "{v}");
}

/// `[harvest]` for a fleet host: the fixed lending policy, a fast period,
/// and its free channels lent as gSSDs for 600 s.
const HARVEST: &str = "\n[harvest]\nenabled = true\npolicy = \"fixed\"\ntick_ms = 200\n\
    granule_s = 60\nlend_for_s = 600\nunsold = true\nunsold_policy = \"fixed\"\n";

/// The fleet's harvest volumes in etcd: name → FleetHarvest JSON.
fn harvest_index(f: &Fleet) -> BTreeMap<String, Value> {
    f.etcd
        .get_prefix("/flexssd/harvest/")
        .into_iter()
        .map(|(k, v)| {
            (
                k.strip_prefix("/flexssd/harvest/").unwrap().to_string(),
                serde_json::from_str(&v).unwrap_or_else(|e| panic!("{k}: {e}: {v}")),
            )
        })
        .collect()
}

/// Whether the fleet's pool (GET /v1/gssds) has a free gSSD of `host`.
fn free_gssd_on(url: &str, host: &str) -> bool {
    let g = http_ok("GET", &format!("{url}/v1/gssds"), None);
    g.as_array()
        .unwrap()
        .iter()
        .any(|x| x["host"] == host && x["in_use"] == false)
}

/// Names of a host's own harvest volumes (its API).
fn host_volumes(h: &Host) -> Vec<String> {
    let body = h.d.get("/v1/harvest/volumes").unwrap_or_default();
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// BlockFlex's pool, fleet-wide: a harvest tenant on h1 asks the scheduler
/// for flash and gets a volume on h2's gSSD, exported by h2 (fio verifies
/// it); bad requests are refused clearly; release erases it on h2; a lost
/// host's volume goes through the eviction path and the host erases it when
/// it returns; deleting the tenant releases its volumes.
#[test]
fn fleet_harvest_serves_from_any_host() {
    require!(tools().is_ok(), tools().unwrap_err());
    require!(have("fio"), "fio is not installed");
    let mut f = Fleet::start(0, 1, 1);
    let url = f.url();
    let ep = f.etcd.url();
    f.hosts.push(Host::start(&ep, "h1", 1, ""));
    f.hosts.push(Host::start(&ep, "h2", 1, HARVEST));
    f.wait_alive(&["h1".to_string(), "h2".to_string()], 30);
    // The tenant, pinned to h1 (whose harvester is off), and a regular vSSD.
    f.cli_ok(
        &url,
        &[
            "vssd",
            "create",
            "t",
            "--channels",
            "2",
            "--host",
            "h1",
            "--role",
            "harvest",
        ],
    );
    f.cli_ok(
        &url,
        &["vssd", "create", "reg", "--channels", "1", "--host", "h1"],
    );
    f.wait_ready(&["t".to_string(), "reg".to_string()], 30);
    assert_eq!(f.index()["t"]["role"], "harvest");
    // h2's unsold channels become gSSDs, and the fleet's pool shows them.
    wait_for(30, "h2's gSSDs in the fleet pool", || {
        free_gssd_on(&url, "h2").then_some(())
    });

    // Bad requests, each refused with what is wrong.
    let req = |name: &str, tenant: &str, cap: &str| json!({ "name": name, "tenant": tenant, "capacity": cap, "bandwidth": 2, "duration_s": 60 });
    // POST a harvest request: (status, the error's text).
    let post = |body: Value| {
        let (code, e) = http("POST", &format!("{url}/v1/harvest/volumes"), Some(&body));
        (code, e["error"].as_str().unwrap_or_default().to_string())
    };
    let (code, e) = post(req("x", "ghost", "64MiB"));
    assert_eq!(code, 404, "{e}");
    assert!(e.contains("no vSSD named \"ghost\""), "{e}");
    let (code, e) = post(req("x", "reg", "64MiB"));
    assert_eq!(code, 400, "{e}");
    assert!(e.contains("not a harvest tenant"), "{e}");
    let (code, e) = post(req("x", "t", "500GiB"));
    assert!(code >= 400, "{e}");
    assert!(e.contains("no gSSD in the fleet"), "{e}");
    let (code, e) = post(req("reg", "t", "64MiB"));
    assert_eq!(code, 409, "a harvest volume took a vSSD's name: {e}");
    assert!(
        harvest_index(&f).is_empty(),
        "a refused request left a booking"
    );

    // The request, through the CLI: served by h2, exported by h2.
    let out = f.cli_ok(
        &url,
        &[
            "harvest",
            "request",
            "hv1",
            "--tenant",
            "t",
            "--capacity",
            "64M",
            "--bandwidth",
            "2",
            "--duration",
            "60",
        ],
    );
    eprintln!("harvest request: {out}");
    let h2nbd = f.host("h2").nbd;
    let uri = format!("nbd://127.0.0.1:{h2nbd}/hv1");
    assert!(out.contains("on host h2") && out.contains(&uri), "{out}");
    let show: Value = serde_json::from_str(&f.cli_ok(&url, &["harvest", "show", "hv1"])).unwrap();
    assert_eq!(show["state"], "active", "{show}");
    assert_eq!(show["host"], "h2", "{show}");
    assert_eq!(show["tenant"], "t", "{show}");
    assert!(!show["gssds"].as_array().unwrap().is_empty(), "{show}");
    assert_eq!(host_volumes(f.host("h2")), vec!["hv1".to_string()]);
    assert!(host_volumes(f.host("h1")).is_empty());
    fio_verify(&uri, f.etcd.dir.path());
    // A vSSD cannot take the volume's name either.
    let o = f.cli(&url, &["vssd", "create", "hv1", "--channels", "1"]);
    assert!(
        !o.status.success(),
        "a vSSD took a harvest volume's name: {}",
        text(&o)
    );
    // The pool shows its gSSD in use once h2 republishes.
    let used: Vec<u64> = show["gssds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect();
    wait_for(10, "the fleet pool to show hv1's gSSD in use", || {
        let g = http_ok("GET", &format!("{url}/v1/gssds"), None);
        g.as_array()
            .unwrap()
            .iter()
            .any(|x| {
                x["host"] == "h2"
                    && x["in_use"] == true
                    && used.contains(&x["id"].as_u64().unwrap())
            })
            .then_some(())
    });
    let list = f.cli_ok(&url, &["harvest", "volumes"]);
    assert!(list.contains("hv1") && list.contains("active"), "{list}");

    // Release: the booking goes, h2 erases and returns the gSSD.
    f.cli_ok(&url, &["harvest", "release", "hv1"]);
    assert!(harvest_index(&f).is_empty());
    wait_for(30, "h2 to release hv1", || {
        host_volumes(f.host("h2")).is_empty().then_some(())
    });
    let o = f.cli(&url, &["harvest", "release", "hv1"]);
    assert!(
        !o.status.success() && text(&o).contains("no harvest volume named"),
        "{}",
        text(&o)
    );

    // Host loss: the eviction path; the host erases the volume on return.
    f.cli_ok(
        &url,
        &[
            "harvest",
            "request",
            "hv2",
            "--tenant",
            "t",
            "--capacity",
            "64M",
            "--duration",
            "60",
        ],
    );
    wait_for(10, "h2 to serve hv2", || {
        (host_volumes(f.host("h2")) == vec!["hv2".to_string()]).then_some(())
    });
    f.host_mut("h2").d.kill9();
    let t0 = Instant::now();
    let s = wait_for(20, "hv2 to be evicted", || {
        let s = http_ok("GET", &format!("{url}/v1/harvest/volumes/hv2"), None);
        (s["state"] == "evicted").then_some(s)
    });
    eprintln!("h2 killed; hv2 evicted after {:?}: {s}", t0.elapsed());
    let events = http_ok("GET", &format!("{url}/v1/events?limit=1000"), None);
    assert!(
        events.as_array().unwrap().iter().any(
            |e| e["kind"] == "harvest-evicted" && e["detail"].as_str().unwrap().contains("hv2")
        ),
        "no harvest-evicted event: {events}"
    );
    // Nothing is placed on a lost host.
    let (code, e) = post(req("hv3", "t", "64MiB"));
    assert!(
        code >= 400 && e.contains("no gSSD in the fleet"),
        "{code} {e}"
    );
    f.host_mut("h2").d.restart();
    f.wait_alive(&["h2".to_string()], 30);
    wait_for(30, "h2 to erase the evicted hv2", || {
        host_volumes(f.host("h2")).is_empty().then_some(())
    });
    assert_eq!(
        http_ok("GET", &format!("{url}/v1/harvest/volumes/hv2"), None)["state"],
        "evicted"
    );
    f.cli_ok(&url, &["harvest", "release", "hv2"]);

    // Deleting the tenant releases its volumes wherever they are.
    wait_for(30, "h2's gSSDs back in the pool", || {
        free_gssd_on(&url, "h2").then_some(())
    });
    http_ok(
        "POST",
        &format!("{url}/v1/harvest/volumes"),
        Some(&req("hv3", "t", "64MiB")),
    );
    assert_eq!(host_volumes(f.host("h2")), vec!["hv3".to_string()]);
    f.cli_ok(&url, &["vssd", "delete", "t"]);
    assert!(harvest_index(&f).is_empty(), "{:?}", harvest_index(&f));
    wait_for(30, "h2 to release hv3 with its tenant", || {
        host_volumes(f.host("h2")).is_empty().then_some(())
    });
}

/// etcd with authentication on: the scheduler and a host log in as a user
/// whose role may touch only the `/flexssd/` prefix, with the password read
/// from a file; a wrong password is refused with a clear error.
#[test]
fn etcd_with_user_and_password() {
    require!(tools().is_ok(), tools().unwrap_err());
    let mut e = Etcd::start();
    for args in [
        &["user", "add", "root", "--new-user-password=rootpw"][..],
        &["user", "add", "flexssd", "--new-user-password=fxpw"],
        &["role", "add", "fleet"],
        &[
            "role",
            "grant-permission",
            "fleet",
            "--prefix=true",
            "readwrite",
            "/flexssd/",
        ],
        &["user", "grant-role", "flexssd", "fleet"],
        &["auth", "enable"],
    ] {
        e.ctl(args);
    }
    // Without a user, etcd refuses.
    let o = e.ctl_any(&["put", "/flexssd/x", "y"]);
    assert!(
        !o.status.success(),
        "etcd accepted a request with no user: {}",
        text(&o)
    );
    e.ctl = vec!["--user=root:rootpw".into()];
    let dir = e.dir.path().to_path_buf();
    let good = dir.join("fx.pw");
    std::fs::write(&good, "fxpw\n").unwrap();
    let bad = dir.join("bad.pw");
    std::fs::write(&bad, "nope\n").unwrap();

    // A wrong password: the scheduler gives up with a message, not a hang.
    let o = Command::new("timeout")
        .arg("60")
        .arg(BIN)
        .args(["cluster", "serve", "--etcd", &e.url(), "--id", "bad"])
        .args(["--etcd-user", "flexssd", "--etcd-password-file"])
        .arg(&bad)
        .args(["--connect-attempts", "2"])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && o.status.code() != Some(124),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).to_lowercase().contains("authentication"),
        "the error does not say why: {}",
        text(&o)
    );

    let pw = good.display().to_string();
    let sched = Sched::start(
        &e,
        "s1",
        &["--etcd-user", "flexssd", "--etcd-password-file", &pw],
    );
    let h = Host::start(
        &e.url(),
        "h1",
        1,
        &format!("etcd_user = \"flexssd\"\netcd_password_file = \"{pw}\""),
    );
    let f = Fleet {
        etcd: e,
        hosts: vec![h],
        scheds: vec![sched],
    };
    f.wait_active(0, 15);
    f.wait_alive(&["h1".to_string()], 30);
    let out = f.cli_ok(&f.url(), &["vssd", "create", "auth1", "--channels", "2"]);
    assert!(out.contains("export: nbd://"), "{out}");
    f.wait_ready(&["auth1".to_string()], 30);
    assert!(f.index().contains_key("auth1"));
}

/// One request with `Authorization: Bearer token` (none for `None`).
fn http_as(token: Option<&str>, method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    let mut req = ureq::request(method, url).timeout(Duration::from_secs(30));
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let r = match body {
        Some(b) => req
            .set("Content-Type", "application/json")
            .send_string(&b.to_string()),
        None => req.call(),
    };
    let (code, t) = match r {
        Ok(resp) => (resp.status(), resp.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap_or_default()),
        Err(e) => panic!("{method} {url}: no answer: {e}"),
    };
    (code, serde_json::from_str(&t).unwrap_or(Value::String(t)))
}

/// `flexssd --cluster URL ARGS` with FLEXSSD_TOKEN set.
fn cli_as(url: &str, token: &str, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("120")
        .arg(BIN)
        .args(["--cluster", url])
        .args(args)
        .env("FLEXSSD_TOKEN", token)
        .env_remove("FLEXSSD_TOKEN_FILE")
        .env_remove("FLEXSSD_CLUSTER")
        .output()
        .unwrap()
}

/// Fleet tokens: an admin makes tenant tokens with the CLI; a tenant token
/// sees and changes only its own tenant's vSSDs, harvest volumes and events,
/// creates vSSDs for its own tenant only, and is refused (403) the fleet's
/// hosts, pool and tokens; bad or missing credentials are 401, and a revoked
/// token is refused from the next request on.
#[test]
fn fleet_tokens_scope_tenants() {
    require!(tools().is_ok(), tools().unwrap_err());
    let etcd = Etcd::start();
    let admin = "fleet-admin-secret-0123456789";
    let tf = etcd.dir.path().join("admin.token");
    std::fs::write(&tf, format!("{admin}\n")).unwrap();
    let tfs = tf.display().to_string();
    let sched = Sched::start(&etcd, "s1", &["--api-token-file", &tfs]);
    let url = sched.url();
    let ep = etcd.url();
    let mut f = Fleet {
        etcd,
        hosts: Vec::new(),
        scheds: vec![sched],
    };
    f.hosts.push(Host::start(&ep, "h1", 1, ""));
    f.hosts.push(Host::start(&ep, "h2", 1, HARVEST));
    let a = Some(admin);
    wait_for(30, "both hosts alive and h2's gSSDs published", || {
        let (_, hosts) = http_as(a, "GET", &format!("{url}/v1/cluster/hosts"), None);
        let (_, g) = http_as(a, "GET", &format!("{url}/v1/gssds"), None);
        (hosts
            .as_array()?
            .iter()
            .filter(|h| h["state"] == "alive")
            .count()
            == 2
            && !g.as_array()?.is_empty())
        .then_some(())
    });
    // Tokens, made by the admin with the CLI: printed once, listed without secrets.
    let make = |tenant: &str| {
        let o = cli_as(&url, admin, &["token", "create", "--tenant", tenant]);
        assert!(o.status.success(), "token create: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let alice = make("alice");
    let bob = make("bob");
    assert!(alice.starts_with("fxs_") && alice != bob, "{alice}");
    let list = cli_as(&url, admin, &["token", "list"]);
    let listed = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(
        listed.contains("alice") && listed.contains("bob"),
        "{listed}"
    );
    assert!(
        !listed.contains(&alice[21..]),
        "token list shows a secret: {listed}"
    );
    assert!(!f
        .etcd
        .get_prefix("/flexssd/tokens/")
        .values()
        .any(|v| v.contains(&alice[21..])));

    // No token, a garbage one: 401.
    assert_eq!(
        http_as(None, "GET", &format!("{url}/v1/vssds"), None).0,
        401
    );
    assert_eq!(
        http_as(Some("fxs_nope"), "GET", &format!("{url}/v1/vssds"), None).0,
        401
    );
    // Creates: for one's own tenant only.
    let (code, v) = http_as(
        Some(&alice),
        "POST",
        &format!("{url}/v1/vssds"),
        Some(&json!({"name": "a1", "channels": 1, "host": "h1"})),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(f.index()["a1"]["tenant"], "alice");
    // A host that is not alive is refused without listing the live ones: the
    // fleet's hosts are the admin's to list.
    let (code, v) = http_as(
        Some(&alice),
        "POST",
        &format!("{url}/v1/vssds"),
        Some(&json!({"name": "a-pinned", "channels": 1, "host": "nosuch"})),
    );
    assert_eq!(code, 404, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.contains("no live host named \"nosuch\""), "{v}");
    assert!(
        !e.contains("h1") && !e.contains("h2"),
        "names live hosts: {v}"
    );
    let (code, v) = http_as(
        Some(&alice),
        "POST",
        &format!("{url}/v1/vssds"),
        Some(&json!({"name": "a2", "channels": 1, "tenant": "bob"})),
    );
    assert_eq!(code, 403, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("another tenant"),
        "{v}"
    );
    for (name, role) in [("b1", "regular"), ("bh", "harvest")] {
        let (code, v) = http_as(
            Some(&bob),
            "POST",
            &format!("{url}/v1/vssds"),
            Some(&json!({"name": name, "channels": 1, "host": "h1", "role": role})),
        );
        assert_eq!(code, 201, "{v}");
    }
    wait_for(30, "bob's vSSDs ready", || {
        let (_, l) = http_as(Some(&bob), "GET", &format!("{url}/v1/vssds"), None);
        (l.as_array()?
            .iter()
            .filter(|v| v["state"] == "ready")
            .count()
            == 2)
            .then_some(())
    });
    let (code, v) = http_as(
        Some(&bob),
        "POST",
        &format!("{url}/v1/harvest/volumes"),
        Some(&json!({"name": "bv", "tenant": "bh", "capacity": "64MiB"})),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["owner"], "bob", "{v}");

    // Alice sees only her own.
    let (_, l) = http_as(Some(&alice), "GET", &format!("{url}/v1/vssds"), None);
    let names: Vec<&str> = l
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["a1"], "{l}");
    let (_, l) = http_as(Some(&bob), "GET", &format!("{url}/v1/vssds"), None);
    assert_eq!(l.as_array().unwrap().len(), 2, "{l}");
    let (_, l) = http_as(a, "GET", &format!("{url}/v1/vssds"), None);
    assert_eq!(l.as_array().unwrap().len(), 3, "the admin sees all: {l}");
    // Bob's vSSDs, harvest volume and harvest tenant do not exist for alice:
    // each answers as a name nobody uses, in status and message.
    let as_alice = |method: &str, path: &str, body: Option<&Value>, name: &str| {
        let (code, v) = http_as(
            Some(&alice),
            method,
            &format!("{url}{}", path.replace("{}", name)),
            body.map(|b| serde_json::from_str(&b.to_string().replace("{}", name)).unwrap())
                .as_ref(),
        );
        let msg = v["error"]
            .as_str()
            .unwrap_or_default()
            .replace(name, "NAME");
        (code, msg)
    };
    let harvest_as = json!({"name": "av", "tenant": "{}", "capacity": "64MiB"});
    let bad_harvest_as = json!({"name": "av", "tenant": "{}", "capacity": "0"});
    for (method, path, body, theirs, says) in [
        (
            "GET",
            "/v1/vssds/{}",
            None,
            "b1",
            "no vSSD named \"NAME\" in the fleet",
        ),
        (
            "DELETE",
            "/v1/vssds/{}",
            None,
            "b1",
            "no vSSD named \"NAME\" in the fleet",
        ),
        (
            "GET",
            "/v1/vssds/{}",
            None,
            "bh",
            "no vSSD named \"NAME\" in the fleet",
        ),
        (
            "GET",
            "/v1/harvest/volumes/{}",
            None,
            "bv",
            "no harvest volume named \"NAME\" in the fleet",
        ),
        (
            "DELETE",
            "/v1/harvest/volumes/{}",
            None,
            "bv",
            "no harvest volume named \"NAME\" in the fleet",
        ),
        (
            "POST",
            "/v1/harvest/volumes",
            Some(&harvest_as),
            "bh",
            "no vSSD named \"NAME\" in the fleet",
        ),
        (
            "POST",
            "/v1/harvest/volumes",
            Some(&bad_harvest_as),
            "bh",
            "",
        ),
    ] {
        let got = as_alice(method, path, body, theirs);
        assert_eq!(
            got,
            as_alice(method, path, body, "nobody"),
            "alice {method} {path} tells bob's {theirs} from a missing name"
        );
        if !says.is_empty() {
            assert_eq!(got.0, 404, "alice {method} {path} {theirs}: {got:?}");
            assert!(
                got.1.starts_with(says),
                "alice {method} {path} {theirs}: {got:?}"
            );
        }
    }
    // Names are global: a name bob uses is taken for alice too, and answers as
    // a name she uses herself (409, nothing about whose it is).
    let create = |name: &str| {
        as_alice(
            "POST",
            "/v1/vssds",
            Some(&json!({"name": "{}", "channels": 1})),
            name,
        )
    };
    let taken = create("b1");
    assert_eq!(taken.0, 409, "{taken:?}");
    assert_eq!(taken, create("a1"));
    assert!(!taken.1.contains("bob"), "{taken:?}");
    // The fleet's own routes are the admin's: 403, naming no one else's name.
    for (method, path, body) in [
        ("GET", "/v1/cluster/hosts", None),
        ("GET", "/v1/cluster/status", None),
        ("GET", "/v1/gssds", None),
        ("GET", "/v1/tokens", None),
        (
            "POST",
            "/v1/tokens",
            Some(json!({"tenant": "alice", "role": "admin"})),
        ),
    ] {
        let (code, v) = http_as(Some(&alice), method, &format!("{url}{path}"), body.as_ref());
        assert_eq!(code, 403, "alice {method} {path}: {v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("tenant token of \"alice\""),
            "{v}"
        );
    }
    let (_, l) = http_as(
        Some(&alice),
        "GET",
        &format!("{url}/v1/harvest/volumes"),
        None,
    );
    assert_eq!(l, json!([]));
    let (_, ev) = http_as(
        Some(&alice),
        "GET",
        &format!("{url}/v1/events?limit=1000"),
        None,
    );
    let ev = ev.as_array().unwrap();
    assert!(
        !ev.is_empty() && ev.iter().all(|e| e["tenant"] == "alice"),
        "{ev:?}"
    );
    let (_, ev) = http_as(
        Some(&bob),
        "GET",
        &format!("{url}/v1/events?limit=1000"),
        None,
    );
    assert!(
        ev.as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "harvest-placed"),
        "{ev}"
    );
    // b1 survived alice's attempt.
    assert!(f.index().contains_key("b1"));

    // Revoked: refused from the next request on.
    let id = &alice[4..20];
    let o = cli_as(&url, admin, &["token", "revoke", id]);
    assert!(o.status.success(), "{}", text(&o));
    let (code, v) = http_as(Some(&alice), "GET", &format!("{url}/v1/vssds"), None);
    assert_eq!(code, 401, "{v}");
    // Bob deleting his harvest tenant releases his volume.
    let (code, v) = http_as(Some(&bob), "DELETE", &format!("{url}/v1/vssds/bh"), None);
    assert_eq!(code, 200, "{v}");
    assert!(harvest_index(&f).is_empty());
}
