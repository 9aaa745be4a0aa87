//! `flexssd harvest`, `flexssd gssd` and `flexssd events`: BlockFlex harvesting
//! through the daemon's API.
//!
//! A harvest tenant (a vSSD created with `--role harvest`) asks for flash with
//! `harvest request`; the daemon answers with a harvest volume, an NBD export
//! backed by one or more gSSDs, which the tenant uses like any block device (for
//! example as one more device of its btrfs file system) and gives back with
//! `harvest release`. `gssd list` shows the pool, `events` what the harvester did.

use anyhow::Result;
use clap::{Args, Subcommand};
use control::{
    format_size, GssdInfo, HarvestEvent, HarvestRequest, HarvestStatus, HarvestVolumeInfo,
};

use crate::client::{table, Client};

/// Options of `flexssd harvest`.
#[derive(Debug, Args)]
pub struct HarvestArgs {
    #[command(flatten)]
    pub client: crate::ClientOpts,
    #[command(subcommand)]
    cmd: HarvestCmd,
}

#[derive(Debug, Subcommand)]
enum HarvestCmd {
    /// The harvester: settings, gSSDs lent and in use, events by kind.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A harvest tenant asks for flash: creates a harvest volume (an NBD export).
    Request {
        /// Volume (export) name.
        name: String,
        /// The harvest tenant: a vSSD created with --role harvest.
        #[arg(long)]
        tenant: String,
        /// Usable size: bytes or with a K/M/G/T suffix.
        #[arg(long, value_parser = control::parse_size, value_name = "SIZE")]
        capacity: u64,
        /// Bandwidth in channels.
        #[arg(long, default_value_t = 1)]
        bandwidth: u32,
        /// For how long, seconds (default: one duration granule).
        #[arg(long, value_name = "SECONDS")]
        duration: Option<u64>,
    },
    /// Job end: give a harvest volume back (its gSSDs are erased).
    Release {
        /// Volume name.
        name: String,
    },
    /// List harvest volumes.
    Volumes {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one harvest volume: segments, migrations, eviction deadline.
    Show {
        /// Volume name.
        name: String,
    },
    /// Run one harvester period now instead of waiting for the next tick.
    Tick,
}

impl HarvestCmd {
    /// The API body of `harvest request` (host or fleet); `None` for the
    /// other subcommands.
    fn request(&self) -> Option<HarvestRequest> {
        match self {
            HarvestCmd::Request {
                name,
                tenant,
                capacity,
                bandwidth,
                duration,
            } => Some(HarvestRequest {
                name: name.clone(),
                tenant: tenant.clone(),
                capacity: control::ByteSize(*capacity),
                bandwidth: *bandwidth,
                duration_s: *duration,
            }),
            _ => None,
        }
    }
}

/// Options of `flexssd gssd`.
#[derive(Debug, Args)]
pub struct GssdArgs {
    #[command(flatten)]
    pub client: crate::ClientOpts,
    #[command(subcommand)]
    cmd: GssdCmd,
}

impl GssdArgs {
    /// Whether JSON output was asked for.
    pub fn json(&self) -> bool {
        match self.cmd {
            GssdCmd::List { json } => json,
        }
    }
}

#[derive(Debug, Subcommand)]
enum GssdCmd {
    /// List gSSDs: capacity, bandwidth, expiry, in use, tenant, home.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Options of `flexssd events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pub client: crate::ClientOpts,
    /// Only events after this sequence number.
    #[arg(long, default_value_t = 0)]
    pub since: u64,
    /// Keep printing new events (every second) until interrupted.
    #[arg(long)]
    pub follow: bool,
    /// Print JSON lines.
    #[arg(long)]
    pub json: bool,
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Runs `flexssd harvest ...`.
pub fn harvest(a: &HarvestArgs, api: &str) -> Result<()> {
    let c = Client::new(api);
    match &a.cmd {
        HarvestCmd::Status { json } => {
            let s: HarvestStatus = c.get("/v1/harvest")?;
            if *json {
                return print_json(&s);
            }
            println!(
                "harvester: {}",
                if s.enabled {
                    format!("on, every {} ms", s.settings.tick_ms)
                } else {
                    "off: set [harvest] enabled = true in the daemon's config and restart it (see docs/config.md)".into()
                }
            );
            println!(
                "gSSDs: {} ({} in use), {} blocks lent by regular vSSDs, {} unsold channels",
                s.gssds, s.gssds_in_use, s.lent_blocks, s.unsold_channels
            );
            println!(
                "harvest volumes: {} ({} migrating, {} under eviction notice)",
                s.volumes, s.migrations, s.evicting
            );
            let ev: Vec<String> = s
                .events
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            println!(
                "policy: {}",
                match s.settings.policy {
                    control::LendPolicyKind::Predicted =>
                        "predicted (BlockFlex LSTMs per regular vSSD)",
                    control::LendPolicyKind::Fixed => "fixed",
                }
            );
            if !s.predictions.is_empty() {
                let l = s.settings.predictor.levels;
                let rows: Vec<Vec<String>> = s
                    .predictions
                    .iter()
                    .map(|(n, p)| {
                        vec![
                            n.clone(),
                            if p.warm { "yes" } else { "no (lends nothing)" }.into(),
                            format!("{}/{l}", p.bandwidth_level),
                            format!("{}/{l}", p.capacity_level),
                            format!("{}/{l}, {}/{l}", p.spare_levels.0, p.spare_levels.1),
                            p.duration_s.to_string(),
                        ]
                    })
                    .collect();
                table(
                    &["VSSD", "WARM", "BANDWIDTH", "CAPACITY", "SPARE", "FOR_S"],
                    &rows,
                );
            }
            if !s.demand.is_empty() {
                let l = s.settings.predictor.levels;
                println!(
                    "harvest tenants' demand (auto_request at {:.0}% of their own vSSD):",
                    s.settings.auto_request_at * 100.0
                );
                let rows: Vec<Vec<String>> = s
                    .demand
                    .iter()
                    .map(|(n, p)| {
                        vec![
                            n.clone(),
                            if p.warm { "yes" } else { "no (asks nothing)" }.into(),
                            format!("{}/{l}", p.bandwidth_level),
                            format!("{}/{l}", p.capacity_level),
                            p.duration_s.to_string(),
                        ]
                    })
                    .collect();
                table(&["TENANT", "WARM", "BANDWIDTH", "CAPACITY", "FOR_S"], &rows);
            }
            println!(
                "events: {}",
                if ev.is_empty() {
                    "none".into()
                } else {
                    ev.join(", ")
                }
            );
            Ok(())
        }
        cmd @ HarvestCmd::Request { .. } => {
            let req = cmd.request().expect("a request");
            let v: HarvestVolumeInfo = c.post("/v1/harvest/volumes", &req)?;
            let ids: Vec<String> = v.segments.iter().map(|s| s.gssd.to_string()).collect();
            println!(
                "harvest volume {} for {}: {} on gSSD {} until t = {} s",
                v.name,
                v.tenant,
                format_size(v.size_bytes),
                ids.join(","),
                v.until_s
            );
            Ok(())
        }
        HarvestCmd::Release { name } => {
            let _: serde_json::Value = c.delete(&format!("/v1/harvest/volumes/{name}"))?;
            println!("released harvest volume {name} (its gSSDs are erased)");
            Ok(())
        }
        HarvestCmd::Volumes { json } => {
            let vs: Vec<HarvestVolumeInfo> = c.get("/v1/harvest/volumes")?;
            if *json {
                return print_json(&vs);
            }
            let rows: Vec<Vec<String>> = vs
                .iter()
                .map(|v| {
                    vec![
                        v.name.clone(),
                        v.tenant.clone(),
                        format_size(v.size_bytes),
                        v.segments
                            .iter()
                            .map(|s| s.gssd.to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                        v.until_s.to_string(),
                        match v.evict_by_s {
                            Some(t) => format!("evicting (by {t} s)"),
                            None => v.state.clone(),
                        },
                    ]
                })
                .collect();
            table(
                &["NAME", "TENANT", "SIZE", "GSSDS", "UNTIL_S", "STATE"],
                &rows,
            );
            Ok(())
        }
        HarvestCmd::Show { name } => {
            let v: HarvestVolumeInfo = c.get(&format!("/v1/harvest/volumes/{name}"))?;
            print_json(&v)
        }
        HarvestCmd::Tick => {
            let r: serde_json::Value = c.post("/v1/harvest/tick", &serde_json::json!({}))?;
            println!("harvester period done: {} event(s)", r["events"]);
            Ok(())
        }
    }
}

/// Runs `flexssd --cluster URL harvest ...`: the request goes to the fleet
/// scheduler, which serves it from the best-fit gSSD anywhere in the fleet.
pub fn fleet_harvest(a: &HarvestArgs, url: &str) -> Result<()> {
    use cluster::scheduler::FleetHarvestStatus;
    let c = Client::new(url);
    match &a.cmd {
        HarvestCmd::Status { .. } | HarvestCmd::Tick => anyhow::bail!(
            "`harvest status` and `harvest tick` act on one host's harvester: use --api URL (a host's, from `flexssd --cluster URL cluster hosts --json`); fleet-wide, `gssd list` shows the pool"
        ),
        cmd @ HarvestCmd::Request { .. } => {
            let req = cmd.request().expect("a request");
            let v: FleetHarvestStatus = c.post("/v1/harvest/volumes", &req)?;
            match &v.uri {
                Some(uri) => println!(
                    "harvest volume {} for {} on host {}: {} on gSSD(s) {}\n{uri}",
                    v.volume.name,
                    v.volume.tenant,
                    v.volume.host,
                    format_size(v.size_bytes),
                    v.gssds
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                None => println!(
                    "harvest volume {} for {} booked on host {}; the host has not served it yet (see `harvest show {}`)",
                    v.volume.name, v.volume.tenant, v.volume.host, v.volume.name
                ),
            }
            Ok(())
        }
        HarvestCmd::Release { name } => {
            let _: serde_json::Value = c.delete(&format!("/v1/harvest/volumes/{name}"))?;
            println!("released harvest volume {name} (its host erases its gSSDs)");
            Ok(())
        }
        HarvestCmd::Volumes { json } => {
            let vs: Vec<FleetHarvestStatus> = c.get("/v1/harvest/volumes")?;
            if *json {
                return print_json(&vs);
            }
            let rows: Vec<Vec<String>> = vs
                .iter()
                .map(|v| {
                    vec![
                        v.volume.name.clone(),
                        v.volume.tenant.clone(),
                        v.volume.host.clone(),
                        format_size(v.size_bytes.max(v.volume.capacity_bytes)),
                        v.state.clone(),
                        v.uri.clone().or_else(|| v.error.clone()).unwrap_or_default(),
                    ]
                })
                .collect();
            table(
                &["NAME", "TENANT", "HOST", "SIZE", "STATE", "URI_OR_ERROR"],
                &rows,
            );
            Ok(())
        }
        HarvestCmd::Show { name } => {
            let v: FleetHarvestStatus = c.get(&format!("/v1/harvest/volumes/{name}"))?;
            print_json(&v)
        }
    }
}

/// Runs `flexssd gssd ...`.
pub fn gssd(a: &GssdArgs, api: &str) -> Result<()> {
    let c = Client::new(api);
    match &a.cmd {
        GssdCmd::List { json } => {
            let gs: Vec<GssdInfo> = c.get("/v1/gssds")?;
            if *json {
                return print_json(&gs);
            }
            let rows: Vec<Vec<String>> = gs
                .iter()
                .map(|g| {
                    vec![
                        g.id.to_string(),
                        g.device.clone(),
                        control::channel_list(&g.channels),
                        g.capacity_blocks.to_string(),
                        format_size(g.capacity_bytes),
                        g.expiry_s.to_string(),
                        if g.in_use { "yes" } else { "no" }.into(),
                        g.tenant.clone().unwrap_or_else(|| "-".into()),
                        g.volume.clone().unwrap_or_else(|| "-".into()),
                        g.home.clone().unwrap_or_else(|| "(unsold)".into()),
                        g.state.clone(),
                    ]
                })
                .collect();
            table(
                &[
                    "ID", "DEVICE", "CHANNELS", "BLOCKS", "SIZE", "EXPIRY_S", "IN_USE", "TENANT",
                    "VOLUME", "HOME", "STATE",
                ],
                &rows,
            );
            Ok(())
        }
    }
}

/// Runs `flexssd events`.
pub fn events(a: &EventsArgs, api: &str) -> Result<()> {
    let c = Client::new(api);
    let mut since = a.since;
    loop {
        let evs: Vec<HarvestEvent> = c.get(&format!("/v1/events?since={since}"))?;
        for e in &evs {
            if a.json {
                println!("{}", serde_json::to_string(e)?);
            } else {
                println!(
                    "{:>6} t={:>10.3}s {:<17} {}",
                    e.seq,
                    e.at_ns as f64 / 1e9,
                    e.kind.name(),
                    e.detail
                );
            }
            since = since.max(e.seq);
        }
        if !a.follow {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}
