//! The fleet across network namespaces: three host daemons, each in a network
//! namespace of its own joined to this one by a veth pair, register with a
//! real etcd over their veth, a scheduler places a vSSD on each, and fio's nbd
//! engine writes and verifies every export across the veths, as clients on
//! other machines would. Needs root (namespaces), etcd and fio; skips saying
//! which is missing.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{free_port, have, is_root};

/// Namespaces and links made by this test, removed on drop.
struct Net {
    names: Vec<String>,
    links: Vec<String>,
}

impl Net {
    fn ip(args: &[&str]) {
        let out = Command::new("ip").args(args).output().expect("run ip");
        assert!(
            out.status.success(),
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Namespace `ns` with `10.{net}.{k}.2` inside and `10.{net}.{k}.1` here.
    fn add(&mut self, ns: &str, outside: &str, inside: &str, host_addr: &str, ns_addr: &str) {
        Net::ip(&["netns", "add", ns]);
        self.names.push(ns.to_string());
        Net::ip(&[
            "link", "add", outside, "type", "veth", "peer", "name", inside,
        ]);
        self.links.push(outside.to_string());
        Net::ip(&["link", "set", inside, "netns", ns]);
        Net::ip(&["addr", "add", &format!("{host_addr}/24"), "dev", outside]);
        Net::ip(&["link", "set", outside, "up"]);
        Net::ip(&[
            "netns",
            "exec",
            ns,
            "ip",
            "addr",
            "add",
            &format!("{ns_addr}/24"),
            "dev",
            inside,
        ]);
        Net::ip(&["netns", "exec", ns, "ip", "link", "set", inside, "up"]);
        Net::ip(&["netns", "exec", ns, "ip", "link", "set", "lo", "up"]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for l in &self.links {
            let _ = Command::new("ip").args(["link", "del", l]).status();
        }
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// A process killed on drop, with its log file.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(cmd: &mut Command, log: &Path) -> Proc {
        let f = std::fs::File::create(log).unwrap();
        let child = cmd
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("spawn");
        Proc {
            child,
            log: log.to_path_buf(),
        }
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fleet(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flexssd"))
        .arg("--cluster")
        .arg(url)
        .args(args)
        .output()
        .unwrap()
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool, logs: &dyn Fn() -> String) {
    let t0 = Instant::now();
    while !ok() {
        if t0.elapsed() > limit {
            panic!("{what}: not within {limit:?}\n{}", logs());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn hosts_in_their_own_network_namespaces_serve_fleet_vssds_over_veth() {
    require!(is_root(), "network namespaces need root");
    require!(have("ip"), "iproute2's ip is not installed");
    require!(
        have("etcd"),
        "etcd is not installed (make test installs etcd-server)"
    );
    require!(have("fio"), "fio is not installed (make test installs it)");
    let dir = tempfile::tempdir().unwrap();
    // Unique per run, short (interface names are at most 15 bytes).
    let tag = std::process::id() % 10_000;
    let net_octet = 100 + (tag % 100);
    let mut net = Net {
        names: Vec::new(),
        links: Vec::new(),
    };
    let hosts = 3;
    for k in 1..=hosts {
        net.add(
            &format!("fx{tag}h{k}"),
            &format!("fx{tag}o{k}"),
            &format!("fx{tag}i{k}"),
            &format!("10.{net_octet}.{k}.1"),
            &format!("10.{net_octet}.{k}.2"),
        );
    }

    // etcd here, reachable from every namespace at its veth address.
    let (cport, pport) = (free_port(), free_port());
    let etcd = Proc::spawn(
        Command::new("etcd")
            .arg("--name=e1")
            .arg(format!("--data-dir={}", dir.path().join("etcd").display()))
            .arg(format!("--listen-client-urls=http://0.0.0.0:{cport}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{cport}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{pport}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{pport}"
            ))
            .arg(format!("--initial-cluster=e1=http://127.0.0.1:{pport}")),
        &dir.path().join("etcd.log"),
    );

    // The hosts, each inside its namespace: NBD and the API on its veth address.
    let mut daemons = Vec::new();
    for k in 1..=hosts {
        let addr = format!("10.{net_octet}.{k}.2");
        let hdir = dir.path().join(format!("h{k}"));
        std::fs::create_dir_all(&hdir).unwrap();
        let cfg = hdir.join("flexssd.toml");
        std::fs::write(
            &cfg,
            format!(
                r#"data_dir = "{data}"
[api]
listen = "{addr}:8740"
[nbd]
socket = "{sock}"
tcp = "{addr}:10809"
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
endpoints = ["http://10.{net_octet}.{k}.1:{cport}"]
host_id = "h{k}"
advertise_nbd = "{addr}:10809"
advertise_api = "http://{addr}:8740"
lease_ttl_s = 3
"#,
                data = hdir.join("data").display(),
                sock = hdir.join("nbd.sock").display(),
            ),
        )
        .unwrap();
        daemons.push(Proc::spawn(
            Command::new("ip")
                .args(["netns", "exec", &format!("fx{tag}h{k}")])
                .arg(env!("CARGO_BIN_EXE_flexssd"))
                .args(["serve", "--insecure", "--config"])
                .arg(&cfg)
                .stdin(Stdio::null()),
            &hdir.join("daemon.log"),
        ));
    }
    let sport = free_port();
    let sched = Proc::spawn(
        Command::new(env!("CARGO_BIN_EXE_flexssd"))
            .args(["cluster", "serve", "--id", "s1", "--ttl", "2"])
            .arg(format!("--etcd=http://127.0.0.1:{cport}"))
            .arg(format!("--listen=127.0.0.1:{sport}")),
        &dir.path().join("sched.log"),
    );
    let url = format!("http://127.0.0.1:{sport}");
    let logs = || {
        let mut s = format!("--- etcd\n{}\n--- scheduler\n{}\n", etcd.log(), sched.log());
        for (k, d) in daemons.iter().enumerate() {
            s += &format!("--- h{}\n{}\n", k + 1, d.log());
        }
        s
    };

    // The fleet's last answer goes into the failure message (a run in the
    // full suite once waited 60 s while every host had joined within 1 s).
    let last = std::cell::RefCell::new(String::new());
    wait_for(
        "three hosts registered over their veths",
        Duration::from_secs(60),
        || {
            let out = fleet(&url, &["cluster", "hosts", "--json"]);
            *last.borrow_mut() = format!(
                "status {}, stdout {}, stderr {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v.as_array()
                .is_some_and(|a| a.iter().filter(|h| h["state"] == "alive").count() == hosts)
        },
        &|| {
            format!(
                "--- last `cluster hosts --json`\n{}\n{}",
                last.borrow(),
                logs()
            )
        },
    );
    for k in 1..=hosts {
        let out = fleet(
            &url,
            &[
                "vssd",
                "create",
                &format!("v{k}"),
                "--channels",
                "2",
                "--host",
                &format!("h{k}"),
            ],
        );
        assert!(
            out.status.success(),
            "create on h{k}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            logs()
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("nbd://10.{net_octet}.{k}.2:10809/v{k}")),
            "the export is on h{k}'s own address: {text}"
        );
    }
    for k in 1..=hosts {
        let uri = format!("nbd://10.{net_octet}.{k}.2:10809/v{k}");
        let out = Command::new("fio")
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
                "--output-format=terse",
                "--verify_state_save=0",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "fio verify over the veth to h{k}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            logs()
        );
    }
}
