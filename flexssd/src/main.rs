//! `flexssd`: the daemon and its command-line client.
//!
//! `flexssd serve` runs a host: the [`control::HostManager`] (emulated flash devices
//! and per-tenant vSSDs), an NBD server exporting every vSSD, and an HTTP/JSON control
//! API with Prometheus metrics. Every other subcommand is a thin client of that API,
//! so the CLI, scripts and orchestration all go through one interface.

mod api;
mod client;
mod cluster_api;
mod cluster_cmd;
mod dashboard_cmd;
mod elastic_cmd;
mod harvest_cmd;
mod metrics;
mod plot;
mod progress;
mod serve;
mod sim_cache;
mod sim_harvest;
mod sim_predict;
mod sim_sla;
mod sla_cmd;
mod tier_cmd;
mod token_cmd;
mod trace_cmd;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use clock::MonotonicClock;
use control::{parse_size, BlockRange, Mode};
use ftl::GcPolicyKind;

/// Default address of the daemon's API for the client commands.
const DEFAULT_API_URL: &str = "http://127.0.0.1:8740";

/// Software-defined flash for multi-tenant clouds: emulated open-channel SSDs carved
/// into per-tenant virtual SSDs, served over NBD.
#[derive(Debug, Parser)]
#[command(name = "flexssd", version, propagate_version = true)]
struct Cli {
    /// URL of the daemon's HTTP API, for the client commands.
    #[arg(long, env = "FLEXSSD_API", default_value = DEFAULT_API_URL, value_name = "URL")]
    api: String,
    /// File holding the API token for the client commands (default: the
    /// FLEXSSD_TOKEN environment variable; none when neither is set).
    #[arg(long, global = true, env = "FLEXSSD_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// PEM file of the CA that signed the daemon's HTTPS certificate (default:
    /// the built-in public roots).
    #[arg(long, global = true, env = "FLEXSSD_CA_FILE", value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// URL of a fleet scheduler's API (`flexssd cluster serve`): `vssd`
    /// and `events` then act on the whole fleet.
    #[arg(long, global = true, env = "FLEXSSD_CLUSTER", value_name = "URL")]
    cluster: Option<String>,
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon: host manager, NBD server and HTTP API.
    Serve(ServeArgs),
    /// Create, list, show and delete vSSDs.
    Vssd(VssdArgs),
    /// Show the flash devices.
    Device(DeviceArgs),
    /// Show the counters of every vSSD and device.
    Stats(StatsArgs),
    /// Configuration helpers.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Draw plots (SVG) from experiment CSV files.
    #[command(subcommand)]
    Plot(plot::PlotCmd),
    /// Simulators: the same policy code on a virtual clock, driven by traces.
    #[command(subcommand)]
    Sim(SimCmd),
    /// Inspect block I/O traces.
    #[command(subcommand)]
    Trace(trace_cmd::TraceCmd),
    /// SLA curves (Regulator): measure devices, set tenant curves.
    Sla(sla_cmd::SlaArgs),
    /// Shared flash cache tiers: list, show, change policy or size live.
    Tier(tier_cmd::TierArgs),
    /// Transparent elasticity: grow and shrink a btrfs volume of vSSDs (IPDPS'14).
    Elastic(elastic_cmd::ElasticArgs),
    /// BlockFlex harvesting: status, harvest volumes (request, release, show).
    Harvest(harvest_cmd::HarvestArgs),
    /// Ghost vSSDs (gSSDs): the harvest pool.
    Gssd(harvest_cmd::GssdArgs),
    /// The harvester's event log: creations, harvests, expiries, reclaims,
    /// migrations, evictions and exceptions.
    Events(harvest_cmd::EventsArgs),
    /// API tokens (admins): create, list, revoke.
    Token(token_cmd::TokenArgs),
    /// A fleet of hosts on etcd: run a scheduler, list hosts, fleet status.
    Cluster(cluster_cmd::ClusterArgs),
    /// The operator dashboard (the daemon serves it at /dashboard): serve it
    /// over synthetic data to measure it at scale.
    Dashboard(dashboard_cmd::DashboardArgs),
}

#[derive(Debug, Subcommand)]
enum SimCmd {
    /// Trace-driven shared SSD cache simulation (GREM, D-GREM and baselines).
    Cache(sim_cache::CacheArgs),
    /// SLA-aware placement of tenant curves on storage units (Regulator §6.1).
    SlaPlacement(sim_sla::PlacementArgs),
    /// Accuracy of the BlockFlex predictors on real inputs (Figure 14).
    Predict(sim_predict::PredictArgs),
    /// Elastic storage: replay a used-space trace through the grow/shrink controller.
    Elastic(elastic_cmd::SimArgs),
    /// BlockFlex fleet simulation: harvest tenants against regular tenants (§5.2).
    Harvest(sim_harvest::HarvestArgs),
}

/// Options of `flexssd serve`; each overrides the corresponding config setting.
#[derive(Debug, Args)]
struct ServeArgs {
    /// Configuration file (TOML). Default: the built-in configuration
    /// (`flexssd config default`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// State directory (`data_dir`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Reply timing: fast, or emulation (replies wait for the modelled flash).
    #[arg(long, value_name = "fast|emulation")]
    mode: Option<Mode>,
    /// Address for the HTTP API (`[api] listen`).
    #[arg(long = "api", value_name = "ADDR")]
    api_listen: Option<SocketAddr>,
    /// Unix socket for NBD (`[nbd] socket`).
    #[arg(long, value_name = "PATH")]
    nbd_socket: Option<PathBuf>,
    /// Also serve NBD on this TCP address (`[nbd] tcp`).
    #[arg(long, value_name = "ADDR")]
    nbd_tcp: Option<SocketAddr>,
    /// Serve NBD on a non-loopback TCP address without `[nbd] tls = "require"`
    /// (anyone who reaches the port can then open every export), or the HTTP
    /// API on a non-loopback address without `[api] auth = "token"` and
    /// `tls_cert` / `tls_key`.
    #[arg(long)]
    insecure: bool,
}

/// Where the client commands find the daemon.
#[derive(Debug, Args)]
struct ClientOpts {
    /// URL of the daemon's HTTP API [env: FLEXSSD_API] [default: http://127.0.0.1:8740]
    #[arg(long = "api", global = true, value_name = "URL")]
    api: Option<String>,
}

#[derive(Debug, Args)]
struct VssdArgs {
    #[command(flatten)]
    client: ClientOpts,
    #[command(subcommand)]
    cmd: VssdCmd,
}

#[derive(Debug, Subcommand)]
enum VssdCmd {
    /// Create a vSSD on dedicated channels (or an explicit placement).
    Create {
        /// Name, also the NBD export name (1-64 characters of A-Z a-z 0-9 . _ -).
        name: String,
        /// Number of whole channels (the lowest-numbered free ones).
        #[arg(long, required_unless_present_any = ["channel_ids", "percentile"])]
        channels: Option<u32>,
        /// Exported size: bytes or with a K/M/G/T suffix (default: raw flash less 12.5%).
        #[arg(long, value_parser = parse_size, value_name = "SIZE")]
        capacity: Option<u64>,
        /// Garbage-collection policy: greedy or cost-benefit.
        #[arg(long, value_name = "POLICY")]
        gc: Option<GcPolicyKind>,
        /// Explicit channels, e.g. 0,1 (instead of --channels).
        #[arg(long, value_delimiter = ',', value_name = "IDS")]
        channel_ids: Option<Vec<u32>>,
        /// With --channel-ids: only these blocks of each plane, e.g. 0..32.
        #[arg(long, value_name = "A..B", requires = "channel_ids")]
        blocks: Option<BlockRange>,
        /// Device (default: the first with enough free channels).
        #[arg(long)]
        device: Option<String>,
        #[command(flatten)]
        sla: sla_cmd::SlaOpts,
        /// Tenant role: regular (buys its channels; idle flash may be
        /// harvested) or harvest (may ask for harvest volumes).
        #[arg(long, value_name = "regular|harvest", default_value = "regular")]
        role: control::TenantRole,
        /// The tenant that owns it: with NBD TLS, only the client whose PSK
        /// username or certificate name is this tenant lists and opens it.
        #[arg(long)]
        tenant: Option<String>,
        /// With --cluster: place it on this host only.
        #[arg(long)]
        host: Option<String>,
        /// With --cluster and --sla-curve: the read-latency percentile the
        /// curve holds at (p95, p99, p99.9); the fleet places it by curve.
        #[arg(long, value_name = "P")]
        percentile: Option<String>,
    },
    /// List vSSDs.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one vSSD with its counters.
    Show {
        /// vSSD name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a vSSD; its flash is erased.
    Delete {
        /// vSSD name.
        name: String,
    },
}

#[derive(Debug, Args)]
struct DeviceArgs {
    #[command(flatten)]
    client: ClientOpts,
    #[command(subcommand)]
    cmd: DeviceCmd,
}

#[derive(Debug, Subcommand)]
enum DeviceCmd {
    /// List devices with their free channels and wear.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
struct StatsArgs {
    #[command(flatten)]
    client: ClientOpts,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Print the built-in configuration, which documents every setting.
    Default,
}

/// `vssd ...` on the whole fleet (`--cluster URL`).
fn fleet_vssd(url: &str, cmd: &VssdCmd) -> anyhow::Result<()> {
    match cmd {
        VssdCmd::Create {
            name,
            channels,
            capacity,
            gc,
            channel_ids,
            blocks,
            device,
            sla,
            role,
            tenant,
            host,
            percentile,
        } => {
            if channel_ids.is_some() || blocks.is_some() || device.is_some() || gc.is_some() {
                anyhow::bail!("with --cluster the scheduler places the vSSD: --channel-ids, --blocks, --device and --gc are not available (name a --host instead)");
            }
            if sla.weight.is_some() || sla.burst {
                anyhow::bail!("--sla-weight and --sla-burst are not available with --cluster (the fleet places by curve and percentile); set them on the host afterwards with `flexssd --api URL sla set`");
            }
            let sla = match (&sla.curve, percentile) {
                (Some(c), Some(p)) => Some(sla::placement::TenantSla {
                    curve: sla_cmd::parse_curve(c)?,
                    percentile: cluster_cmd::percentile(p)?,
                }),
                (Some(_), None) => anyhow::bail!(
                    "--sla-curve with --cluster needs --percentile (p95, p99 or p99.9)"
                ),
                (None, Some(_)) => anyhow::bail!("--percentile needs --sla-curve"),
                (None, None) => None,
            };
            let req = cluster::CreateRequest {
                name: name.clone(),
                channels: if sla.is_some() { None } else { *channels },
                sla,
                capacity: *capacity,
                tenant: tenant.clone(),
                host: host.clone(),
                role: *role,
            };
            cluster_cmd::create(url, &req)
        }
        VssdCmd::List { json } => cluster_cmd::list(url, *json),
        VssdCmd::Show { name, json } => cluster_cmd::show(url, name, *json),
        VssdCmd::Delete { name } => cluster_cmd::delete(url, name),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let serving = match &cli.cmd {
        Command::Serve(_) => true,
        Command::Cluster(a) => a.is_serve(),
        Command::Dashboard(_) => true,
        _ => false,
    };
    if !serving {
        // A client command piped into `head` or `grep -q` should end quietly
        // on a closed pipe, as other command-line tools do, not panic. The
        // servers keep Rust's default (writes to a closed socket are errors).
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    if let Err(e) = client::configure(cli.token_file.as_deref(), cli.ca_file.as_deref()) {
        eprintln!("flexssd: {e:#}");
        return ExitCode::FAILURE;
    }
    let api_url = |o: &ClientOpts| o.api.clone().unwrap_or_else(|| cli.api.clone());
    let result = match &cli.cmd {
        Command::Serve(args) => serve::run(args),
        Command::Vssd(a) => match &cli.cluster {
            Some(url) => fleet_vssd(url, &a.cmd),
            None => client::vssd(&client::Client::new(&api_url(&a.client)), &a.cmd),
        },
        Command::Device(a) => client::device(&client::Client::new(&api_url(&a.client)), &a.cmd),
        Command::Stats(a) => client::stats(&client::Client::new(&api_url(&a.client)), a.json),
        Command::Plot(p) => plot::run(p),
        Command::Sim(SimCmd::Cache(a)) => sim_cache::run(a, &MonotonicClock::new()),
        Command::Sim(SimCmd::SlaPlacement(a)) => sim_sla::run(a),
        Command::Sim(SimCmd::Predict(a)) => sim_predict::run(a),
        Command::Sim(SimCmd::Harvest(a)) => sim_harvest::run(a, &MonotonicClock::new()),
        Command::Trace(t) => trace_cmd::run(t),
        Command::Sla(a) => sla_cmd::run(a, &api_url(&a.client)),
        Command::Tier(a) => tier_cmd::run(a, &api_url(&a.client)),
        Command::Elastic(a) => elastic_cmd::run(a, a.api.as_deref().unwrap_or(&cli.api)),
        Command::Sim(SimCmd::Elastic(a)) => elastic_cmd::sim(a),
        Command::Harvest(a) => match &cli.cluster {
            Some(url) => harvest_cmd::fleet_harvest(a, url),
            None => harvest_cmd::harvest(a, &api_url(&a.client)),
        },
        Command::Gssd(a) => match &cli.cluster {
            Some(url) => cluster_cmd::gssds(url, a.json()),
            None => harvest_cmd::gssd(a, &api_url(&a.client)),
        },
        Command::Events(a) => match &cli.cluster {
            Some(url) => cluster_cmd::events(url, a.since, a.follow, a.json),
            None => harvest_cmd::events(a, &api_url(&a.client)),
        },
        Command::Cluster(a) => cluster_cmd::run(
            a,
            cli.cluster.as_deref().unwrap_or("http://127.0.0.1:8750"),
            cli.ca_file.as_deref(),
        ),
        Command::Token(a) => match &cli.cluster {
            Some(url) => token_cmd::run(a, url),
            None => token_cmd::run(a, &api_url(&a.client)),
        },
        Command::Dashboard(a) => dashboard_cmd::run(a),
        Command::Config(ConfigCmd::Default) => {
            print!("{}", control::DEFAULT_CONFIG);
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flexssd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
