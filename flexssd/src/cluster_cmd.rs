//! `flexssd cluster`: the fleet scheduler's server and the fleet-wide client
//! commands.
//!
//! `cluster serve` runs one scheduler process: it campaigns for leadership
//! in etcd and serves the fleet API. Any number may run; the active one
//! places, the others forward changes to it (so a client may talk to any of
//! them, and keeps working when the active one dies and another takes over).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use cluster::etcd::EtcdConfig;
use cluster::keys::FleetEvent;
use cluster::scheduler::{FleetStatus, HostStatus, VssdStatus};
use cluster::{CreateRequest, Scheduler, SchedulerConfig};
use control::format_size;
use sla::catalog::{Catalog, Percentile};
use sla::placement::Metric;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::client::{table, Client};

/// `flexssd cluster ...`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    cmd: ClusterCmd,
}

impl ClusterArgs {
    /// Whether this runs a server (which must keep SIGPIPE ignored).
    pub fn is_serve(&self) -> bool {
        matches!(self.cmd, ClusterCmd::Serve(_))
    }
}

#[derive(Debug, Subcommand)]
enum ClusterCmd {
    /// Run a fleet scheduler (elected through etcd) and the fleet API.
    Serve(Box<ServeArgs>),
    /// List the fleet's hosts, alive and lost.
    Hosts {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Scale benchmark: many light host agents and a scheduler against one
    /// real etcd (scripts/bench-cluster.sh starts one).
    Bench(BenchArgs),
    /// The fleet at a glance: the active scheduler, hosts, vSSDs, channels.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// How a scheduler or the benchmark reaches etcd.
#[derive(Debug, Args)]
struct EtcdArgs {
    /// etcd endpoints, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        env = "FLEXSSD_ETCD",
        default_value = "http://127.0.0.1:2379"
    )]
    etcd: Vec<String>,
    /// CA certificate of etcd's server certificate (https endpoints).
    #[arg(long, value_name = "FILE")]
    etcd_ca: Option<PathBuf>,
    /// Client certificate for etcd (with --etcd-key).
    #[arg(long, value_name = "FILE", requires = "etcd_key")]
    etcd_cert: Option<PathBuf>,
    /// Client key for etcd.
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// etcd user (with --etcd-password-file).
    #[arg(long, requires = "etcd_password_file")]
    etcd_user: Option<String>,
    /// File holding the etcd user's password.
    #[arg(long, value_name = "FILE", requires = "etcd_user")]
    etcd_password_file: Option<PathBuf>,
}

impl EtcdArgs {
    fn config(&self) -> EtcdConfig {
        EtcdConfig {
            endpoints: self.etcd.clone(),
            ca_file: self.etcd_ca.clone(),
            identity: self.etcd_cert.clone().zip(self.etcd_key.clone()),
            user: self.etcd_user.clone().zip(self.etcd_password_file.clone()),
        }
    }
}

/// `flexssd cluster bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    etcd: EtcdArgs,
    /// Light host agents, one lease each.
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Devices per host.
    #[arg(long, default_value_t = 2)]
    devices: u32,
    /// Channels per device.
    #[arg(long, default_value_t = 16)]
    channels: u32,
    /// vSSDs to place (1-3 channels each).
    #[arg(long, default_value_t = 10_000)]
    placements: usize,
    /// Placement requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Host lease TTL, seconds.
    #[arg(long, default_value_t = 10)]
    ttl: u64,
    /// etcd connections the agents share.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn bench(a: &BenchArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    let wall = cluster::system_wall();
    let cfg = cluster::bench::BenchConfig {
        etcd: a.etcd.config(),
        prefix: format!("/flexssd-bench-{}", wall()),
        hosts: a.hosts,
        devices: a.devices,
        channels: a.channels,
        placements: a.placements,
        concurrency: a.concurrency,
        ttl: Duration::from_secs(a.ttl.max(1)),
        connections: a.connections,
    };
    let quiet = a.json;
    let r = rt
        .block_on(cluster::bench::run(cfg, wall, |phase| {
            if !quiet {
                eprintln!("bench: {phase}");
            }
        }))
        .context("the cluster benchmark")?;
    if a.json {
        return crate::client::json(&r);
    }
    println!(
        "hosts registered:   {} in {:.1} s",
        r.hosts_registered, r.register_s
    );
    println!(
        "placements:         {} ok, {} failed, in {:.1} s = {:.0}/s (p50 {:.1} ms, p99 {:.1} ms)",
        r.placed, r.failed, r.place_s, r.placements_per_s, r.place_p50_ms, r.place_p99_ms
    );
    println!(
        "host loss detected: {:.2} s after the kill (TTL {:.0} s)",
        r.loss_detect_s, r.ttl_s
    );
    println!(
        "etcd:               {} keys ({:.1} per host), {:.0} value bytes per host, db {} bytes",
        r.keys, r.keys_per_host, r.value_bytes_per_host, r.db_bytes
    );
    Ok(())
}

/// `flexssd cluster serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    etcd: EtcdArgs,
    /// This scheduler's id (unique among schedulers).
    #[arg(long)]
    id: String,
    /// Address of the fleet API.
    #[arg(long, default_value = "127.0.0.1:8750")]
    listen: SocketAddr,
    /// The URL others reach this API at (default: http://LISTEN).
    #[arg(long)]
    advertise: Option<String>,
    /// Key prefix in etcd.
    #[arg(long, default_value = "/flexssd")]
    prefix: String,
    /// Leader lease TTL, seconds.
    #[arg(long, default_value_t = 5)]
    ttl: u64,
    /// Unit catalogue for placement by SLA curve (TOML, as `sim sla-placement --catalog`).
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// Best-fit metric: dot, l2 or area.
    #[arg(long, default_value = "dot")]
    metric: Metric,
    /// File holding the bearer token every request to the fleet API must carry
    /// (default: none; then listen only on loopback).
    #[arg(long, value_name = "FILE")]
    api_token_file: Option<PathBuf>,
    /// Serve the fleet API over HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's PEM private key.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM CA that signed the other schedulers' certificates, trusted when
    /// forwarding a change to the active one over HTTPS (default: --ca-file).
    #[arg(long, value_name = "FILE")]
    peer_ca: Option<PathBuf>,
    /// Events kept in etcd (the oldest beyond are deleted every 30 s).
    #[arg(long, default_value_t = 10_000)]
    keep_events: usize,
    /// Serve on a non-loopback address without --api-token-file and TLS.
    #[arg(long)]
    insecure: bool,
    /// Give up if etcd cannot be reached this many times at start (0: retry for ever).
    #[arg(long, default_value_t = 0)]
    connect_attempts: u32,
}

/// Runs `flexssd cluster ...`; `cluster_url` is the fleet API for the client commands.
pub fn run(a: &ClusterArgs, cluster_url: &str, ca_file: Option<&std::path::Path>) -> Result<()> {
    match &a.cmd {
        ClusterCmd::Serve(s) => serve(s, ca_file),
        ClusterCmd::Bench(b) => bench(b),
        ClusterCmd::Hosts { json } => {
            let hosts: Vec<HostStatus> = Client::new(cluster_url).get("/v1/cluster/hosts")?;
            if *json {
                return crate::client::json(&hosts);
            }
            let rows: Vec<Vec<String>> = hosts
                .iter()
                .map(|h| {
                    let r = h.record.as_ref();
                    vec![
                        h.id.clone(),
                        h.state.clone(),
                        r.map_or("-".into(), |r| r.nbd.clone()),
                        r.map_or(0, |r| r.devices.len()).to_string(),
                        format!("{}/{}", h.booked_channels, h.total_channels),
                        h.vssds.to_string(),
                        r.map_or(0, |r| r.gssds.len()).to_string(),
                    ]
                })
                .collect();
            table(
                &[
                    "HOST",
                    "STATE",
                    "NBD",
                    "DEVICES",
                    "BOOKED/CHANNELS",
                    "VSSDS",
                    "GSSDS",
                ],
                &rows,
            );
            Ok(())
        }
        ClusterCmd::Status { json } => {
            let s: FleetStatus = Client::new(cluster_url).get("/v1/cluster/status")?;
            if *json {
                return crate::client::json(&s);
            }
            println!(
                "active scheduler: {}",
                s.leader
                    .as_ref()
                    .map_or("none".to_string(), |l| format!("{} ({})", l.id, l.api))
            );
            println!(
                "hosts:            {} alive, {} lost",
                s.hosts_alive, s.hosts_lost
            );
            println!("vSSDs:            {} ({} SLA units)", s.vssds, s.units);
            println!(
                "channels:         {} booked of {}",
                s.channels_booked, s.channels_total
            );
            Ok(())
        }
    }
}

/// Fleet-wide `vssd create`.
pub fn create(cluster_url: &str, req: &CreateRequest) -> Result<()> {
    let c = Client::new(cluster_url);
    let v: VssdStatus = c.post("/v1/vssds", req)?;
    // The host creates it within a publish period or two; wait for its report.
    let mut last = v;
    for _ in 0..100 {
        if last.state != "pending" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        last = c.get(&format!("/v1/vssds/{}", req.name))?;
    }
    let v = &last.vssd;
    println!(
        "placed vSSD {} on host {} device {} channels {:?}{} ({})",
        v.name,
        v.host,
        v.device,
        v.channels,
        v.blocks
            .map(|(s, e)| format!(" blocks {s}..{e}"))
            .unwrap_or_default(),
        last.state
    );
    match (&last.uri, &last.error) {
        (Some(u), _) => println!("export: {u}"),
        (None, Some(e)) => bail!("the host could not create it: {e}"),
        (None, None) => println!(
            "the host has not reported it yet; see `flexssd --cluster {cluster_url} vssd show {}`",
            v.name
        ),
    }
    Ok(())
}

/// Fleet-wide `vssd list`.
pub fn list(cluster_url: &str, as_json: bool) -> Result<()> {
    let l: Vec<VssdStatus> = Client::new(cluster_url).get("/v1/vssds")?;
    if as_json {
        return crate::client::json(&l);
    }
    let rows: Vec<Vec<String>> = l
        .iter()
        .map(|s| {
            vec![
                s.vssd.name.clone(),
                s.vssd.host.clone(),
                s.vssd.device.clone(),
                crate::client::channels(&s.vssd.channels),
                s.vssd
                    .blocks
                    .map_or("all".into(), |(a, b)| format!("{a}..{b}")),
                format_size(s.capacity_bytes),
                s.state.clone(),
                s.uri.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &[
            "NAME", "HOST", "DEVICE", "CHANNELS", "BLOCKS", "CAPACITY", "STATE", "EXPORT",
        ],
        &rows,
    );
    Ok(())
}

/// Fleet-wide `vssd show`.
pub fn show(cluster_url: &str, name: &str, as_json: bool) -> Result<()> {
    let s: VssdStatus = Client::new(cluster_url).get(&format!("/v1/vssds/{name}"))?;
    if as_json {
        return crate::client::json(&s);
    }
    println!("name:     {}", s.vssd.name);
    println!("host:     {}", s.vssd.host);
    println!("device:   {}", s.vssd.device);
    println!("channels: {}", crate::client::channels(&s.vssd.channels));
    if let Some((a, b)) = s.vssd.blocks {
        println!("blocks:   {a}..{b}");
    }
    println!("state:    {}", s.state);
    if let Some(e) = &s.error {
        println!("error:    {e}");
    }
    if let Some(u) = &s.uri {
        println!("export:   {u}");
    }
    Ok(())
}

/// Fleet-wide `vssd delete`.
pub fn delete(cluster_url: &str, name: &str) -> Result<()> {
    let _: serde_json::Value = Client::new(cluster_url).delete(&format!("/v1/vssds/{name}"))?;
    println!("deleted vSSD {name} from the fleet");
    Ok(())
}

/// Fleet-wide `gssd list`.
pub fn gssds(cluster_url: &str, as_json: bool) -> Result<()> {
    let l: Vec<cluster::scheduler::FleetGssd> = Client::new(cluster_url).get("/v1/gssds")?;
    if as_json {
        return crate::client::json(&l);
    }
    let rows: Vec<Vec<String>> = l
        .iter()
        .map(|g| {
            vec![
                g.host.clone(),
                g.gssd.id.to_string(),
                format_size(g.gssd.capacity_bytes),
                g.gssd.bandwidth.to_string(),
                format!("{} s", g.gssd.expiry_s),
                if g.gssd.in_use { "yes" } else { "no" }.into(),
            ]
        })
        .collect();
    table(
        &[
            "HOST",
            "GSSD",
            "CAPACITY",
            "CHANNELS",
            "EXPIRES AT",
            "IN USE",
        ],
        &rows,
    );
    Ok(())
}

/// Fleet-wide `events`.
pub fn events(cluster_url: &str, since: u64, follow: bool, as_json: bool) -> Result<()> {
    let c = Client::new(cluster_url);
    let mut since = since;
    loop {
        let l: Vec<FleetEvent> = c.get(&format!("/v1/events?limit=1000&since={since}"))?;
        if as_json && !follow {
            return crate::client::json(&l);
        }
        for e in &l {
            if as_json {
                println!("{}", serde_json::to_string(e)?);
            } else {
                println!("{:>8} {} {:<16} {}", e.seq, e.at_ms, e.kind, e.detail);
            }
            since = since.max(e.seq);
        }
        if !follow {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Builds a fleet create request from the CLI's percentile name.
pub fn percentile(s: &str) -> Result<Percentile> {
    s.parse::<Percentile>()
        .map_err(|e| anyhow::anyhow!("--percentile {s:?}: {e}"))
}

fn serve(a: &ServeArgs, ca_file: Option<&std::path::Path>) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if !control::valid_name(&a.id) {
        bail!(
            "--id {:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'",
            a.id
        );
    }
    if !a.listen.ip().is_loopback()
        && !a.insecure
        && (a.api_token_file.is_none() || a.tls_cert.is_none())
    {
        bail!(
            "refusing to serve the fleet API on {} without --api-token-file and --tls-cert/--tls-key: anyone on the path could read or use the token, or place and delete vSSDs (--insecure overrides)",
            a.listen
        );
    }
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(c), Some(k)) => Some(crate::serve::tls_server_config(
            c,
            k,
            "--tls-cert",
            "--tls-key",
        )?),
        _ => None,
    };
    let mut forward = ureq::AgentBuilder::new().timeout(Duration::from_secs(30));
    if let Some(ca) = a.peer_ca.as_deref().or(ca_file) {
        forward = forward.tls_config(Arc::new(crate::client::tls_trusting(ca)?));
    }
    let forward = forward.build();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let catalog = match &a.catalog {
        Some(p) => Catalog::from_toml_str(
            &std::fs::read_to_string(p)
                .with_context(|| format!("reading --catalog {}", p.display()))?,
        )
        .with_context(|| format!("--catalog {}", p.display()))?,
        None => Catalog::builtin(),
    };
    let token = match &a.api_token_file {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .with_context(|| format!("reading --api-token-file {}", p.display()))?;
            let t = t.trim().to_string();
            if t.is_empty() {
                bail!("--api-token-file {} is empty", p.display());
            }
            Some(Arc::<str>::from(t))
        }
        None => None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(a.listen)
            .await
            .with_context(|| format!("binding the fleet API on {}", a.listen))?;
        // Port 0 asks for any free port: advertise the one bound.
        let bound = listener.local_addr().unwrap_or(a.listen);
        let etcd = a.etcd.config();
        let cfg = SchedulerConfig {
            etcd,
            prefix: a.prefix.clone(),
            id: a.id.clone(),
            api: a
                .advertise
                .clone()
                .unwrap_or_else(|| format!("{scheme}://{bound}")),
            ttl: Duration::from_secs(a.ttl.max(1)),
            catalog,
            metric: a.metric,
            keep_events: a.keep_events.max(1),
        };
        let (stop_tx, stop_rx) = watch::channel(false);
        info!(endpoints = ?a.etcd.etcd, "connecting to etcd");
        let sched = Scheduler::start(
            cfg,
            cluster::system_wall(),
            stop_rx.clone(),
            a.connect_attempts,
        )
        .await
        .context("starting the fleet scheduler")?;
        let st = crate::cluster_api::AppState {
            sched,
            token,
            forward,
        };
        let app = crate::cluster_api::router(st);
        info!(id = %a.id, "fleet API listening on {scheme}://{bound}");
        let mut rx = stop_rx.clone();
        let server = match tls {
            None => tokio::spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = rx.wait_for(|s| *s).await;
                    })
                    .await
            }),
            Some(tls) => {
                let handle = axum_server::Handle::new();
                let server = axum_server::tls_rustls::from_tcp_rustls(
                    listener.into_std().context("the fleet API's listener")?,
                    axum_server::tls_rustls::RustlsConfig::from_config(tls),
                )
                .context("serving HTTPS")?
                .handle(handle.clone());
                tokio::spawn(async move {
                    let _ = rx.wait_for(|s| *s).await;
                    handle.graceful_shutdown(Some(Duration::from_secs(5)));
                });
                tokio::spawn(async move { server.serve(app.into_make_service()).await })
            }
        };
        crate::serve::wait_for_signal().await?;
        let _ = stop_tx.send(true);
        if tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .is_err()
        {
            warn!("the fleet API did not stop within 5 s");
        }
        Ok(())
    })
}
