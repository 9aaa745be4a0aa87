//! Connecting to etcd: endpoints, TLS client certificates or a user and
//! password, and the first connection retried with a log line that says so.

use std::path::Path;
use std::time::Duration;

use control::ClusterSettings;
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use tracing::warn;

use crate::ClusterError;

/// How to reach etcd.
#[derive(Debug, Clone, Default)]
pub struct EtcdConfig {
    /// Client endpoints (`http://` or `https://`).
    pub endpoints: Vec<String>,
    /// CA certificate (PEM) for `https://` endpoints.
    pub ca_file: Option<std::path::PathBuf>,
    /// Client certificate and key (PEM), for etcd's `--client-cert-auth`.
    pub identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// User name and the file holding its password.
    pub user: Option<(String, std::path::PathBuf)>,
}

impl EtcdConfig {
    /// From a host's `[cluster]` section.
    pub fn from_settings(s: &ClusterSettings) -> Self {
        EtcdConfig {
            endpoints: s.endpoints.clone(),
            ca_file: s.etcd_tls.as_ref().map(|t| t.ca_file.clone()),
            identity: s
                .etcd_tls
                .as_ref()
                .and_then(|t| match (&t.cert_file, &t.key_file) {
                    (Some(c), Some(k)) => Some((c.clone(), k.clone())),
                    _ => None,
                }),
            user: match (&s.etcd_user, &s.etcd_password_file) {
                (Some(u), Some(p)) => Some((u.clone(), p.clone())),
                _ => None,
            },
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ClusterError> {
    std::fs::read(path).map_err(|error| ClusterError::File {
        path: path.display().to_string(),
        error,
    })
}

/// How often an idle connection to etcd is pinged: at least etcd's default
/// `--grpc-keepalive-min-time` (5 s), with room to spare.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Connects once.
pub async fn connect(cfg: &EtcdConfig) -> Result<Client, ClusterError> {
    if cfg.endpoints.is_empty() {
        return Err(ClusterError::Invalid("no etcd endpoints given".into()));
    }
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5))
        // etcd's gRPC server refuses pings closer than its
        // `--grpc-keepalive-min-time` (5 s by default): three such pings on a
        // connection with no stream traffic and it closes the connection
        // ("too many pings"). A follower scheduler or an idle host, whose
        // streams carry nothing for seconds, then lost its watch and its
        // election every 8 s. Ping every 10 s; leases detect a dead peer.
        .with_keep_alive(KEEPALIVE_INTERVAL, Duration::from_secs(5))
        .with_keep_alive_while_idle(true);
    if let Some(ca) = &cfg.ca_file {
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(ca)?));
        if let Some((c, k)) = &cfg.identity {
            tls = tls.identity(Identity::from_pem(read(c)?, read(k)?));
        }
        opts = opts.with_tls(tls);
    }
    if let Some((user, file)) = &cfg.user {
        let pw = String::from_utf8_lossy(&read(file)?).trim().to_string();
        opts = opts.with_user(user.clone(), pw);
    }
    let mut client = Client::connect(&cfg.endpoints, Some(opts)).await?;
    // `connect` is lazy about the network: ask for something so that an
    // unreachable etcd is an error here, not at the first real request.
    client.status().await?;
    Ok(client)
}

/// Connects, retrying every second with a log line per failure, `attempts`
/// times (0: for ever).
pub async fn connect_retrying(cfg: &EtcdConfig, attempts: u32) -> Result<Client, ClusterError> {
    let mut n = 0;
    loop {
        match connect(cfg).await {
            Ok(c) => return Ok(c),
            Err(e @ (ClusterError::File { .. } | ClusterError::Invalid(_))) => return Err(e),
            Err(e) => {
                n += 1;
                if attempts != 0 && n >= attempts {
                    return Err(e);
                }
                warn!(endpoints = ?cfg.endpoints, error = %e, attempt = n, "etcd is unreachable; retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Every key-value under `prefix`, read in pages (one response is limited
/// to a few MiB by gRPC; a fleet's index is larger than that).
pub async fn get_prefix(
    client: &mut Client,
    prefix: &str,
) -> Result<Vec<etcd_client::KeyValue>, ClusterError> {
    Ok(get_prefix_at(client, prefix, 0).await?.0)
}

/// Like [`get_prefix`] at revision `rev` (0: the latest), returning the
/// revision read, so that several prefixes can be read as one snapshot.
pub async fn get_prefix_at(
    client: &mut Client,
    prefix: &str,
    mut rev: i64,
) -> Result<(Vec<etcd_client::KeyValue>, i64), ClusterError> {
    const PAGE: i64 = 2000;
    let mut end = prefix.as_bytes().to_vec();
    // The range end of a prefix: its last byte plus one ('/' + 1 = '0').
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let mut out = Vec::new();
    let mut from = prefix.as_bytes().to_vec();
    loop {
        let mut opts = etcd_client::GetOptions::new()
            .with_range(end.clone())
            .with_limit(PAGE);
        if rev != 0 {
            // Every page from the first page's revision: one consistent view.
            opts = opts.with_revision(rev);
        }
        let resp = client.get(from.clone(), Some(opts)).await?;
        if rev == 0 {
            rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        }
        let more = resp.more();
        let kvs = resp.kvs();
        if let Some(last) = kvs.last() {
            from = last.key().to_vec();
            from.push(0);
        }
        out.extend(kvs.iter().cloned());
        if !more || kvs.is_empty() {
            return Ok((out, rev));
        }
    }
}
