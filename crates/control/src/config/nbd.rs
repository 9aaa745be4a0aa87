//! `[nbd]`: where the NBD server listens, its TLS, and its limits against
//! clients that hold connections without using them.
//!
//! TLS follows nbdkit's conventions (see `nbd::tls`), so an operator who has
//! run `nbdkit --tls=require --tls-psk=FILE` uses the same files here.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Whether NBD clients may, must or cannot use TLS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NbdTls {
    /// No TLS; every export is visible (local use).
    #[default]
    Off,
    /// TLS offered: authenticated clients see their tenant's exports and the
    /// shared ones, plaintext clients only the shared ones.
    On,
    /// TLS required before anything but `STARTTLS` and `ABORT`.
    Require,
}

/// NBD server settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NbdConfig {
    /// Unix socket path. Default `<data_dir>/nbd.sock`.
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// TCP address, if NBD should also be served over TCP. Default: none.
    #[serde(default)]
    pub tcp: Option<SocketAddr>,
    /// `off` (default), `on` or `require`.
    #[serde(default)]
    pub tls: NbdTls,
    /// Pre-shared keys in psktool's `username:hexkey` format; the username is
    /// the tenant.
    #[serde(default)]
    pub tls_psk_file: Option<PathBuf>,
    /// A directory laid out as nbdkit's `--tls-certificates` (`ca-cert.pem`,
    /// `server-cert.pem`, `server-key.pem`); a client certificate's common
    /// name is the tenant.
    #[serde(default)]
    pub tls_certificates: Option<PathBuf>,
    /// Refuse clients without a certificate the CA signed (nbdkit's
    /// `--tls-verify-peer`). Default false.
    #[serde(default)]
    pub tls_verify_peer: bool,
    /// A client must finish its handshake (TLS included) within this many
    /// milliseconds. Default 10,000.
    #[serde(default = "default_handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
    /// Most NBD connections open at once. Default 1,024.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Most NBD connections one TLS tenant may hold open. Default 64.
    #[serde(default = "default_max_connections_per_tenant")]
    pub max_connections_per_tenant: usize,
    /// Most connections from one source that may be in their handshake at
    /// once; more are closed at once (logged with the source and the limit).
    /// A TCP source is the peer's IPv4 address or IPv6 /64, a Unix-socket
    /// source the peer's uid (see `nbd::Source`). Default 16; 0: no limit.
    #[serde(default = "default_max_handshakes_per_source")]
    pub max_handshakes_per_source: usize,
    /// How many times a connection looks for its next request without
    /// sleeping before its thread parks (`nbd::ServerConfig::spin_polls`):
    /// a client at queue depth 1 is answered without the wake-up of a parked
    /// thread. Default 64 (about 100 µs of CPU at most per idle moment of a
    /// connection); 0 parks at once. At most 100,000.
    #[serde(default = "default_spin_polls")]
    pub spin_polls: u32,
}

fn default_spin_polls() -> u32 {
    nbd::DEFAULT_SPIN_POLLS
}

fn default_handshake_timeout_ms() -> u64 {
    10_000
}

fn default_max_connections() -> usize {
    1024
}

fn default_max_connections_per_tenant() -> usize {
    64
}

fn default_max_handshakes_per_source() -> usize {
    16
}

impl Default for NbdConfig {
    fn default() -> Self {
        Self {
            socket: None,
            tcp: None,
            tls: NbdTls::Off,
            tls_psk_file: None,
            tls_certificates: None,
            tls_verify_peer: false,
            handshake_timeout_ms: default_handshake_timeout_ms(),
            max_connections: default_max_connections(),
            max_connections_per_tenant: default_max_connections_per_tenant(),
            max_handshakes_per_source: default_max_handshakes_per_source(),
            spin_polls: default_spin_polls(),
        }
    }
}

/// The most `spin_polls` accepted.
const MAX_SPIN_POLLS: u32 = 100_000;

impl NbdConfig {
    /// Checks what can be checked without reading the key files.
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.tls != NbdTls::Off && self.tls_psk_file.is_none() && self.tls_certificates.is_none()
        {
            return Err(
                "[nbd] tls is on but neither tls_psk_file nor tls_certificates is set".into(),
            );
        }
        if self.tls_verify_peer && self.tls_certificates.is_none() {
            return Err("[nbd] tls_verify_peer needs tls_certificates".into());
        }
        if self.handshake_timeout_ms == 0 {
            return Err("[nbd] handshake_timeout_ms must be above 0".into());
        }
        if self.spin_polls > MAX_SPIN_POLLS {
            return Err(format!(
                "[nbd] spin_polls = {} is more than {MAX_SPIN_POLLS}: a connection would spin for a tenth of a second or more each time it goes idle",
                self.spin_polls
            ));
        }
        if self.max_connections == 0 || self.max_connections_per_tenant == 0 {
            return Err(
                "[nbd] max_connections and max_connections_per_tenant must be above 0".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn tls_settings_parse_and_bad_ones_are_named() {
        let c = Config::from_toml(
            "[nbd]\ntls = \"require\"\ntls_psk_file = \"/etc/flexssd/keys.psk\"\nmax_connections_per_tenant = 4\n",
        )
        .unwrap();
        assert_eq!(c.nbd.tls, super::NbdTls::Require);
        assert_eq!(c.nbd.max_connections_per_tenant, 4);
        assert_eq!(c.nbd.handshake_timeout_ms, 10_000);
        assert_eq!(c.nbd.max_handshakes_per_source, 16, "the default");
        assert_eq!(c.nbd.spin_polls, nbd::DEFAULT_SPIN_POLLS, "the default");
        for n in [0, 1, 100_000] {
            let c = Config::from_toml(&format!("[nbd]\nspin_polls = {n}\n")).unwrap();
            assert_eq!(c.nbd.spin_polls, n, "0 parks at once; up to 100,000 looks");
        }
        for n in [0, 1, 500] {
            let c =
                Config::from_toml(&format!("[nbd]\nmax_handshakes_per_source = {n}\n")).unwrap();
            assert_eq!(
                c.nbd.max_handshakes_per_source, n,
                "0 is no limit, any other count a cap"
            );
        }
        for (text, says) in [
            ("[nbd]\ntls = \"on\"\n", "neither tls_psk_file"),
            ("[nbd]\ntls = \"sometimes\"\n", "sometimes"),
            ("[nbd]\ntls_verify_peer = true\n", "tls_verify_peer needs"),
            ("[nbd]\nhandshake_timeout_ms = 0\n", "handshake_timeout_ms"),
            ("[nbd]\nspin_polls = 100001\n", "spin_polls = 100001"),
            ("[nbd]\nspin_polls = -1\n", "spin_polls"),
            ("[nbd]\nmax_connections = 0\n", "max_connections"),
            ("[nbd]\ntls_psk = \"x\"\n", "tls_psk"),
            (
                "[nbd]\nmax_handshakes_per_source = -1\n",
                "max_handshakes_per_source",
            ),
            (
                "[nbd]\nmax_handshakes_per_source = \"16\"\n",
                "max_handshakes_per_source",
            ),
            (
                "[nbd]\nmax_handshakes_per_source = 1.5\n",
                "max_handshakes_per_source",
            ),
            (
                "[nbd]\nmax_handshake_per_source = 4\n",
                "max_handshake_per_source",
            ),
        ] {
            let e = Config::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
