//! The command-line client: each subcommand is one or two calls to the HTTP API.
//!
//! Errors come back as one line: the daemon's own message for a refused request, or
//! how to start the daemon when it cannot be reached.
//!
//! Credentials and TLS trust are process-wide ([`configure`], from the global
//! `--token-file` / `FLEXSSD_TOKEN` and `--ca-file` options), so that every
//! subcommand's client sends the same bearer token and trusts the same CA
//! without each one passing them along. The token is only ever put in the
//! `Authorization` header: no error message or output repeats it.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use anyhow::{anyhow, bail, Context, Result};
use control::{format_size, DeviceInfo, HostStats, VssdInfo, VssdSpec};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::{Info, VssdDetail};
use crate::{DeviceCmd, VssdCmd};

/// What every client of this process sends and trusts.
#[derive(Default)]
struct Settings {
    /// `Authorization` header value, `Bearer fxs_...`.
    authorization: Option<String>,
    /// TLS trust for https URLs when `--ca-file` is given (ureq's built-in
    /// roots otherwise).
    tls: Option<Arc<rustls::ClientConfig>>,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Sets up the bearer token and the TLS trust of every client made after it:
/// the token from `token_file` (whole file, surrounding white space ignored)
/// or else the `FLEXSSD_TOKEN` environment variable; with `ca_file`, https
/// URLs are trusted only if that PEM file's CA certificates sign them.
pub fn configure(token_file: Option<&Path>, ca_file: Option<&Path>) -> Result<()> {
    let token = match token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --token-file {}", path.display()))?;
            let t = text.trim().to_string();
            if t.is_empty() {
                bail!("--token-file {} is empty", path.display());
            }
            Some(t)
        }
        None => std::env::var("FLEXSSD_TOKEN")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty()),
    };
    if let Some(t) = &token {
        if t.chars().any(|c| !c.is_ascii_graphic()) {
            bail!(
                "the API token (from {}) has characters a token never has; expected fxs_<id>_<secret>",
                if token_file.is_some() { "--token-file" } else { "FLEXSSD_TOKEN" }
            );
        }
    }
    let tls = match ca_file {
        Some(path) => Some(Arc::new(tls_trusting(path)?)),
        None => None,
    };
    let _ = SETTINGS.set(Settings {
        authorization: token.map(|t| format!("Bearer {t}")),
        tls,
    });
    Ok(())
}

/// A TLS client configuration that trusts the CA certificates of a PEM file.
pub(crate) fn tls_trusting(path: &Path) -> Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading --ca-file {}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .with_context(|| format!("--ca-file {}: unusable certificate", path.display()))?;
    }
    if roots.is_empty() {
        bail!(
            "--ca-file {}: no PEM CERTIFICATE in the file",
            path.display()
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The host of `base` when it is plain `http://` to somewhere other than this
/// machine (where a bearer token would cross a network unencrypted).
fn plaintext_remote(base: &str) -> Option<&str> {
    let rest = base.strip_prefix("http://")?;
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    (!loopback).then_some(host)
}

/// A client of one daemon's API.
pub struct Client {
    base: String,
    agent: ureq::Agent,
    authorization: Option<String>,
}

impl Client {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:8740`).
    pub fn new(base: &str) -> Self {
        let base = base.trim_end_matches('/');
        let base = if base.contains("://") {
            base.to_string()
        } else {
            format!("http://{base}")
        };
        let settings = SETTINGS.get();
        let mut agent = ureq::AgentBuilder::new()
            .timeout_connect(std::time::Duration::from_secs(5))
            .timeout(std::time::Duration::from_secs(600));
        if let Some(tls) = settings.and_then(|s| s.tls.clone()) {
            agent = agent.tls_config(tls);
        }
        let authorization = settings.and_then(|s| s.authorization.clone());
        if let Some(host) = authorization.as_ref().and(plaintext_remote(&base)) {
            eprintln!(
                "warning: sending the API token in plain HTTP to {host}, where anyone on the path can read it; use https://"
            );
        }
        Self {
            base,
            agent: agent.build(),
            authorization,
        }
    }

    /// A request to `path`, with the bearer token when there is one.
    fn request(&self, method: &str, path: &str) -> ureq::Request {
        let r = self.agent.request(method, &format!("{}{path}", self.base));
        match &self.authorization {
            Some(a) => r.set("Authorization", a),
            None => r,
        }
    }

    fn handle<T: DeserializeOwned>(&self, r: Result<ureq::Response, ureq::Error>) -> Result<T> {
        match r {
            Ok(resp) => resp
                .into_json()
                .map_err(|e| anyhow!("bad response from the daemon at {}: {e}", self.base)),
            Err(ureq::Error::Status(code, resp)) => {
                let body = resp.into_string().unwrap_or_default();
                let msg = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
                    .unwrap_or_else(|| format!("HTTP {code}: {}", body.trim()));
                Err(anyhow!("{msg}"))
            }
            Err(ureq::Error::Transport(t)) => {
                let why = std::error::Error::source(&t)
                    .map(|e| e.to_string())
                    .or_else(|| t.message().map(str::to_string))
                    .unwrap_or_else(|| t.kind().to_string());
                if why.contains("certificate") {
                    return Err(anyhow!(
                        "the flexssd daemon at {} has a TLS certificate this client does not trust ({why}); give its CA with --ca-file (env FLEXSSD_CA_FILE)",
                        self.base
                    ));
                }
                Err(anyhow!(
                    "cannot reach the flexssd daemon at {} ({why}); is it running? Start it with `flexssd serve` (or point --api / FLEXSSD_API at it)",
                    self.base
                ))
            }
        }
    }

    /// `GET path`, decoded.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.handle(self.request("GET", path).call())
    }

    /// `POST path` with a JSON body, decoded.
    pub fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T> {
        self.handle(self.request("POST", path).send_json(body))
    }

    /// `DELETE path`, decoded.
    pub fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.handle(self.request("DELETE", path).call())
    }

    /// `PUT path` with a JSON body, decoded.
    pub fn put<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T> {
        self.handle(self.request("PUT", path).send_json(body))
    }
}

/// Prints rows as a left-aligned table with a header.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        println!("{}", s.join("  ").trim_end());
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

pub(crate) fn json<T: Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub(crate) fn channels(ch: &[u32]) -> String {
    control::channel_list(ch)
}

fn gc_name(gc: ftl::GcPolicyKind) -> &'static str {
    match gc {
        ftl::GcPolicyKind::Greedy => "greedy",
        ftl::GcPolicyKind::CostBenefit => "cost-benefit",
    }
}

fn state_name(s: control::VssdState) -> &'static str {
    match s {
        control::VssdState::Creating => "creating",
        control::VssdState::Active => "active",
        control::VssdState::Deleting => "deleting",
    }
}

fn blocks_of(v: &VssdInfo) -> String {
    let mut ranges: Vec<String> = v
        .extents
        .iter()
        .map(|e| format!("{}..{}", e.first_block, e.first_block + e.blocks))
        .collect();
    ranges.dedup();
    ranges.join(",")
}

/// `flexssd vssd ...`
pub fn vssd(c: &Client, cmd: &VssdCmd) -> Result<()> {
    match cmd {
        VssdCmd::Create {
            name,
            channels: n,
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
            if host.is_some() || percentile.is_some() {
                bail!("--host and --percentile place a vSSD in a fleet: give --cluster URL (or FLEXSSD_CLUSTER)");
            }
            let spec = VssdSpec {
                role: *role,
                tenant: tenant.clone(),
                sla: sla.to_sla()?,
                name: name.clone(),
                device: device.clone(),
                channels: *n,
                channel_ids: channel_ids.clone(),
                blocks: *blocks,
                capacity: capacity.map(control::ByteSize),
                gc: gc.unwrap_or_default(),
            };
            let v: VssdInfo = c.post("/v1/vssds", &spec)?;
            println!(
                "created vSSD {} on {} channels {} ({}), {} GC",
                v.name,
                v.device,
                channels(&v.channels),
                format_size(v.capacity_bytes),
                gc_name(v.gc)
            );
            if let Ok(info) = c.get::<Info>("/v1/info") {
                println!("export: nbd+unix:///{}?socket={}", v.name, info.nbd_socket);
            }
            Ok(())
        }
        VssdCmd::List { json: as_json } => {
            let list: Vec<VssdInfo> = c.get("/v1/vssds")?;
            if *as_json {
                return json(&list);
            }
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|v| {
                    vec![
                        v.name.clone(),
                        v.device.clone(),
                        channels(&v.channels),
                        blocks_of(v),
                        format_size(v.capacity_bytes),
                        gc_name(v.gc).into(),
                        state_name(v.state).into(),
                    ]
                })
                .collect();
            table(
                &[
                    "NAME", "DEVICE", "CHANNELS", "BLOCKS", "CAPACITY", "GC", "STATE",
                ],
                &rows,
            );
            Ok(())
        }
        VssdCmd::Show {
            name,
            json: as_json,
        } => {
            let d: VssdDetail = c.get(&format!("/v1/vssds/{name}"))?;
            if *as_json {
                return json(&d);
            }
            let v = &d.info;
            println!("name:        {}", v.name);
            println!("id:          {}", v.id);
            println!("state:       {}", state_name(v.state));
            println!("device:      {}", v.device);
            println!("channels:    {}", channels(&v.channels));
            println!("blocks:      {} (of each plane)", blocks_of(v));
            println!(
                "capacity:    {} ({} bytes)",
                format_size(v.capacity_bytes),
                v.capacity_bytes
            );
            println!("gc:          {}", gc_name(v.gc));
            if let Some(s) = &d.stats {
                println!(
                    "reads:       {} ({})",
                    s.io.reads,
                    format_size(s.io.read_bytes)
                );
                println!(
                    "writes:      {} ({})",
                    s.io.writes,
                    format_size(s.io.write_bytes)
                );
                println!("flushes:     {}", s.io.flushes);
                println!(
                    "trims:       {} ({})",
                    s.io.trims,
                    format_size(s.io.trim_bytes)
                );
                println!("errors:      {}", s.io.errors);
                println!("write amp.:  {:.3}", s.write_amplification);
                println!(
                    "gc runs:     {} ({} pages moved)",
                    s.ftl.gc_runs, s.ftl.gc_pages_moved
                );
                println!(
                    "erases:      {} (erase count {}..{})",
                    s.ftl.block_erases, s.ftl.min_erase_count, s.ftl.max_erase_count
                );
                println!(
                    "blocks:      {} free of {}",
                    s.ftl.free_blocks, s.ftl.total_blocks
                );
                println!("mapped:      {} pages", s.ftl.mapped_pages);
            }
            Ok(())
        }
        VssdCmd::Delete { name } => {
            let _: serde_json::Value = c.delete(&format!("/v1/vssds/{name}"))?;
            println!("deleted vSSD {name} (its flash is erased)");
            Ok(())
        }
    }
}

fn device_rows(list: &[DeviceInfo]) -> Vec<Vec<String>> {
    list.iter()
        .map(|d| {
            vec![
                d.name.clone(),
                match &d.backend {
                    flash::Backend::Memory => "memory".into(),
                    flash::Backend::File { path } => path.display().to_string(),
                },
                format_size(d.raw_bytes),
                d.geometry.channels.to_string(),
                channels(&d.free_channels),
                if d.vssds.is_empty() {
                    "-".into()
                } else {
                    d.vssds.join(",")
                },
                format!(
                    "{}/{:.2}/{}",
                    d.erase_count.min, d.erase_count.avg, d.erase_count.max
                ),
            ]
        })
        .collect()
}

const DEVICE_HEADER: [&str; 7] = [
    "NAME",
    "BACKEND",
    "RAW",
    "CHANNELS",
    "FREE",
    "VSSDS",
    "ERASES(min/avg/max)",
];

/// `flexssd device ...`
pub fn device(c: &Client, cmd: &DeviceCmd) -> Result<()> {
    match cmd {
        DeviceCmd::List { json: as_json } => {
            let list: Vec<DeviceInfo> = c.get("/v1/devices")?;
            if *as_json {
                return json(&list);
            }
            table(&DEVICE_HEADER, &device_rows(&list));
            Ok(())
        }
    }
}

/// `flexssd stats`
pub fn stats(c: &Client, as_json: bool) -> Result<()> {
    let s: HostStats = c.get("/v1/stats")?;
    if as_json {
        return json(&s);
    }
    let rows: Vec<Vec<String>> = s
        .vssds
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                v.io.reads.to_string(),
                v.io.writes.to_string(),
                format_size(v.io.read_bytes),
                format_size(v.io.write_bytes),
                format!("{:.3}", v.write_amplification),
                v.ftl.gc_runs.to_string(),
                v.ftl.block_erases.to_string(),
                format!("{}/{}", v.ftl.free_blocks, v.ftl.total_blocks),
                v.ftl.mapped_pages.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "VSSD",
            "READS",
            "WRITES",
            "READ",
            "WRITTEN",
            "WA",
            "GC",
            "ERASES",
            "FREE/BLOCKS",
            "MAPPED",
        ],
        &rows,
    );
    println!();
    let rows: Vec<Vec<String>> = s
        .devices
        .iter()
        .map(|d| {
            vec![
                d.name.clone(),
                d.stats.page_reads.to_string(),
                d.stats.page_programs.to_string(),
                d.stats.block_erases.to_string(),
                format!(
                    "{}/{:.2}/{}",
                    d.erase_count.min, d.erase_count.avg, d.erase_count.max
                ),
                channels(&d.free_channels),
            ]
        })
        .collect();
    table(
        &[
            "DEVICE",
            "PAGE READS",
            "PAGE PROGRAMS",
            "BLOCK ERASES",
            "ERASES(min/avg/max)",
            "FREE CHANNELS",
        ],
        &rows,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::plaintext_remote;

    #[test]
    fn tokens_over_plain_http_to_other_hosts_are_flagged() {
        for local in [
            "http://127.0.0.1:8740",
            "http://localhost:8740/",
            "http://[::1]:8740",
            "https://10.0.0.5:8740",
        ] {
            assert_eq!(plaintext_remote(local), None, "{local}");
        }
        assert_eq!(plaintext_remote("http://10.0.0.5:8740"), Some("10.0.0.5"));
        assert_eq!(plaintext_remote("http://storage-1/v1"), Some("storage-1"));
        assert_eq!(plaintext_remote("http://[fd00::1]:8740"), Some("fd00::1"));
    }
}
