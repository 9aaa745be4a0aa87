//! `[cluster]`: joining a fleet of hosts on etcd. Absent: the host is on its
//! own, exactly as without a fleet.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How this host joins the fleet (see `docs/cluster.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSettings {
    /// etcd client endpoints, e.g. `["http://127.0.0.1:2379"]` (`https://` with `[cluster.etcd_tls]`).
    pub endpoints: Vec<String>,
    /// This host's id, unique in the fleet: 1-64 characters of `[A-Za-z0-9._-]`.
    pub host_id: String,
    /// The NBD address clients of other hosts use, `HOST:PORT` (the `[nbd] tcp` listener).
    pub advertise_nbd: String,
    /// The HTTP API base URL others use, e.g. `http://10.0.0.5:8080`.
    pub advertise_api: String,
    /// Registration lease TTL, seconds: the host counts as lost this long after its
    /// agent stops renewing. Default 10.
    #[serde(default = "default_ttl")]
    pub lease_ttl_s: u64,
    /// Key prefix in etcd. Default `/flexssd`.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// The catalogue unit type this host's devices provide, for placement by SLA
    /// curve (`flexssd sim sla-placement`'s catalogue). Default `ssd`.
    #[serde(default = "default_unit_type")]
    pub unit_type: String,
    /// How often the agent republishes its devices and gSSD pool, milliseconds. Default 2000.
    #[serde(default = "default_publish")]
    pub publish_interval_ms: u64,
    /// etcd client certificates (etcd's `--client-cert-auth`). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_tls: Option<EtcdTls>,
    /// etcd user name (etcd's auth), with `etcd_password_file`. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_user: Option<String>,
    /// File holding the etcd user's password (never the password itself). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_password_file: Option<PathBuf>,
}

/// Client TLS towards etcd.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdTls {
    /// CA certificate (PEM) that signed etcd's server certificate.
    pub ca_file: PathBuf,
    /// This client's certificate (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// This client's private key (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

fn default_ttl() -> u64 {
    10
}
fn default_prefix() -> String {
    "/flexssd".into()
}
fn default_unit_type() -> String {
    "ssd".into()
}
fn default_publish() -> u64 {
    2000
}

impl ClusterSettings {
    /// Checks the section; the message names the key.
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.endpoints.is_empty() {
            return Err("cluster.endpoints: list at least one etcd endpoint".into());
        }
        if !super::valid_name(&self.host_id) {
            return Err(format!(
                "cluster.host_id {:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'",
                self.host_id
            ));
        }
        if !(1..=3600).contains(&self.lease_ttl_s) {
            return Err(format!(
                "cluster.lease_ttl_s = {}: use 1 to 3600 seconds",
                self.lease_ttl_s
            ));
        }
        if !self.prefix.starts_with('/') || self.prefix.len() < 2 {
            return Err(format!(
                "cluster.prefix {:?}: use an absolute key prefix such as \"/flexssd\"",
                self.prefix
            ));
        }
        if self
            .advertise_nbd
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .is_none()
        {
            return Err(format!(
                "cluster.advertise_nbd {:?}: use HOST:PORT",
                self.advertise_nbd
            ));
        }
        if !(self.advertise_api.starts_with("http://")
            || self.advertise_api.starts_with("https://"))
        {
            return Err(format!(
                "cluster.advertise_api {:?}: use an http:// or https:// URL",
                self.advertise_api
            ));
        }
        if self.publish_interval_ms < 100 {
            return Err("cluster.publish_interval_ms: use at least 100".into());
        }
        if self.etcd_user.is_some() != self.etcd_password_file.is_some() {
            return Err("cluster.etcd_user and cluster.etcd_password_file go together".into());
        }
        Ok(())
    }
}
