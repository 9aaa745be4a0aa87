//! `[api]`: where the HTTP API listens, who may use it, and over what.
//!
//! Off by default (`auth = "off"`, plain HTTP on the loopback address) so that
//! local use and scripts need nothing. With `auth = "token"` every request
//! carries a bearer token (`flexssd token create`); with `tls_cert` and
//! `tls_key` the API speaks HTTPS. The daemon refuses a non-loopback `listen`
//! without both unless started with `--insecure` (checked by `flexssd serve`,
//! which knows the flag).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::ByteSize;

/// How the API authenticates its clients.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiAuth {
    /// Anyone who reaches the port is an admin (local use).
    #[default]
    Off,
    /// Every request needs `Authorization: Bearer <token>`; tenant tokens see
    /// only their tenant's resources.
    Token,
}

/// HTTP API settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Address the HTTP API listens on. Default `127.0.0.1:8740`.
    #[serde(default = "default_api_listen")]
    pub listen: SocketAddr,
    /// `off` (default) or `token`.
    #[serde(default)]
    pub auth: ApiAuth,
    /// PEM certificate chain (server certificate first); with `tls_key`, the
    /// API serves HTTPS only. Default: none (plain HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// Whether `/metrics` needs an admin token. Default: yes when
    /// `auth = "token"` (the metrics name every tenant's vSSDs); `false` opens
    /// them to scrapers without a token. See [`ApiConfig::metrics_need_token`].
    #[serde(default)]
    pub metrics_auth: Option<bool>,
    /// Largest request body accepted; bigger ones get 413. Default 1 MiB.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: ByteSize,
    /// The operator dashboard (`[api.dashboard]`).
    #[serde(default)]
    pub dashboard: DashboardSettings,
}

/// `[api.dashboard]`: the operator dashboard at `/dashboard`.
///
/// The daemon samples every vSSD's counters every `sample_ms` and keeps
/// `window_s` of them, so that the page can show rates (throughput, IOPS,
/// write amplification, SLA operating points) over the last minutes rather
/// than totals since the start: counters alone cannot say what happens now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DashboardSettings {
    /// Serve the dashboard and sample for it. Default `true`.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// How often the counters are sampled, milliseconds. Default 2000.
    #[serde(default = "default_sample_ms")]
    pub sample_ms: u64,
    /// How much history is kept, seconds. Default 300 (five minutes).
    #[serde(default = "default_window_s")]
    pub window_s: u64,
    /// How often the page asks for fresh data, milliseconds. Default 2000.
    #[serde(default = "default_sample_ms")]
    pub refresh_ms: u64,
    /// Most gSSD, harvest-volume and event rows the page lists (the rest are
    /// counted, not listed). Default 200.
    #[serde(default = "default_rows")]
    pub rows: usize,
}

fn yes() -> bool {
    true
}

fn default_sample_ms() -> u64 {
    2000
}

fn default_window_s() -> u64 {
    300
}

fn default_rows() -> usize {
    200
}

impl Default for DashboardSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            sample_ms: default_sample_ms(),
            window_s: default_window_s(),
            refresh_ms: default_sample_ms(),
            rows: default_rows(),
        }
    }
}

impl DashboardSettings {
    /// Checks what the types alone cannot; the message names the key.
    fn validate(&self) -> Result<(), String> {
        if !(100..=3_600_000).contains(&self.sample_ms) {
            return Err(format!(
                "[api.dashboard] sample_ms = {} is out of range: 100 to 3600000",
                self.sample_ms
            ));
        }
        if !(250..=3_600_000).contains(&self.refresh_ms) {
            return Err(format!(
                "[api.dashboard] refresh_ms = {} is out of range: 250 to 3600000",
                self.refresh_ms
            ));
        }
        if self.window_s * 1000 < 2 * self.sample_ms || self.window_s > 86_400 {
            return Err(format!(
                "[api.dashboard] window_s = {} must hold at least two samples of sample_ms = {} and be at most 86400",
                self.window_s, self.sample_ms
            ));
        }
        if !(1..=100_000).contains(&self.rows) {
            return Err(format!(
                "[api.dashboard] rows = {} is out of range: 1 to 100000",
                self.rows
            ));
        }
        Ok(())
    }
}

fn default_api_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8740))
}

fn default_max_body_bytes() -> ByteSize {
    ByteSize(1 << 20)
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: default_api_listen(),
            auth: ApiAuth::Off,
            tls_cert: None,
            tls_key: None,
            metrics_auth: None,
            max_body_bytes: default_max_body_bytes(),
            dashboard: DashboardSettings::default(),
        }
    }
}

impl ApiConfig {
    /// Whether `/metrics` needs an admin token: `metrics_auth`, or by default
    /// whenever the API checks tokens at all.
    pub fn metrics_need_token(&self) -> bool {
        self.auth == ApiAuth::Token && self.metrics_auth.unwrap_or(true)
    }

    /// Whether the API serves HTTPS (`tls_cert` and `tls_key` set).
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some() && self.tls_key.is_some()
    }

    /// Checks what the types alone cannot; the message names the key.
    pub(super) fn validate(&self) -> Result<(), String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => {
                return Err("[api] tls_cert is set but tls_key is not: HTTPS needs both".into())
            }
            (None, Some(_)) => {
                return Err("[api] tls_key is set but tls_cert is not: HTTPS needs both".into())
            }
            _ => {}
        }
        if self.metrics_auth == Some(true) && self.auth == ApiAuth::Off {
            return Err(
                "[api] metrics_auth = true needs auth = \"token\" (there are no tokens to check)"
                    .into(),
            );
        }
        if self.max_body_bytes.0 < 1024 {
            return Err(format!(
                "[api] max_body_bytes = {} is too small: at least 1024 (1K), so that every request body fits",
                self.max_body_bytes.0
            ));
        }
        if self.max_body_bytes.0 > 1 << 30 {
            return Err(format!(
                "[api] max_body_bytes = {} is above 1G: no API request needs that much",
                self.max_body_bytes.0
            ));
        }
        self.dashboard.validate()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn metrics_need_a_token_by_default_once_tokens_are_on() {
        let need = |text: &str| {
            crate::Config::from_toml(text)
                .unwrap()
                .api
                .metrics_need_token()
        };
        assert!(!need(""), "auth off: nothing to check");
        assert!(need("[api]\nauth = \"token\"\n"));
        assert!(!need("[api]\nauth = \"token\"\nmetrics_auth = false\n"));
    }

    use super::*;
    use crate::Config;

    #[test]
    fn api_settings_parse_with_their_defaults() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.api, ApiConfig::default());
        assert_eq!(c.api.auth, ApiAuth::Off);
        assert_eq!(c.api.max_body_bytes, ByteSize(1 << 20));
        assert!(!c.api.tls());
        let c = Config::from_toml(
            "[api]\nlisten = \"0.0.0.0:8740\"\nauth = \"token\"\ntls_cert = \"/etc/flexssd/api.pem\"\ntls_key = \"/etc/flexssd/api.key\"\nmetrics_auth = true\nmax_body_bytes = \"64K\"\n",
        )
        .unwrap();
        assert_eq!(c.api.auth, ApiAuth::Token);
        assert!(c.api.tls() && c.api.metrics_need_token());
        assert_eq!(c.api.max_body_bytes, ByteSize(64 << 10));
    }

    #[test]
    fn the_commented_example_in_the_default_is_valid() {
        // Uncomment the [api] section's keys of the built-in configuration.
        let section = crate::DEFAULT_CONFIG
            .split("[api]")
            .nth(1)
            .and_then(|s| s.split("\n[").next())
            .unwrap();
        let keys: String = section
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| {
                l.split_once(" = ")
                    .is_some_and(|(k, _)| k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(keys.contains("tls_key"), "{keys}");
        let c = Config::from_toml(&format!("[api]\n{keys}")).unwrap();
        assert_eq!(c.api.auth, ApiAuth::Token);
        assert!(c.api.tls());
        assert_eq!(c.api.max_body_bytes, default_max_body_bytes());
    }

    #[test]
    fn bad_api_settings_are_named() {
        for (text, says) in [
            ("[api]\nauth = \"password\"\n", "password"),
            ("[api]\ntls_cert = \"/c.pem\"\n", "tls_key is not"),
            ("[api]\ntls_key = \"/k.pem\"\n", "tls_cert is not"),
            ("[api]\nmetrics_auth = true\n", "metrics_auth"),
            ("[api]\nmax_body_bytes = 10\n", "max_body_bytes"),
            ("[api]\nmax_body_bytes = \"2G\"\n", "max_body_bytes"),
            ("[api]\nmax_body_bytes = \"lots\"\n", "lots"),
            ("[api]\ntoken = \"x\"\n", "token"),
        ] {
            let e = Config::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
