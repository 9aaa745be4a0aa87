//! NBD over TLS: the protocol's `NBD_OPT_STARTTLS`, with nbdkit's conventions, and
//! who may see which export.
//!
//! # Why it is built this way
//!
//! * **nbdkit's conventions, so real clients work unchanged.** A PSK file is
//!   psktool's `username:hexkey`, one per line; a certificate directory holds
//!   `ca-cert.pem`, `server-cert.pem` and `server-key.pem`, as nbdkit's
//!   `--tls-certificates` expects. libnbd (`nbdinfo`, `nbdcopy`, `nbdfuse`, fio's
//!   nbd engine) and qemu find the same files where they look for them.
//! * **OpenSSL, not our own TLS.** rustls has no external-PSK support, and the
//!   clients' PSK mode is the common way to run NBD over TLS, so the server uses
//!   OpenSSL (through `tokio-openssl`) for both PSK and X.509.
//! * **The TLS identity is the tenant.** The PSK username, or the common name of
//!   a client certificate the CA signed, names the tenant; [`may_open`] is the one
//!   pure function that decides what a client may list and open, so it is tested
//!   on its own and the handshake only asks it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use openssl::ex_data::Index;
use openssl::nid::Nid;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslFiletype, SslMethod, SslRef, SslSessionCacheMode,
    SslVerifyMode,
};

/// Whether the server offers, requires or refuses TLS (nbdkit's `--tls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// No TLS: `NBD_OPT_STARTTLS` is refused and every export is visible (local use).
    #[default]
    Off,
    /// TLS offered: a client that upgrades sees its own exports and the shared
    /// ones; a client that does not sees only the shared ones.
    On,
    /// TLS required: every option but `STARTTLS` and `ABORT` is refused until
    /// the client upgrades.
    Require,
}

impl std::str::FromStr for TlsMode {
    type Err = TlsError;
    fn from_str(s: &str) -> Result<Self, TlsError> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "require" => Ok(Self::Require),
            other => Err(TlsError::Mode(other.to_string())),
        }
    }
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A mode other than off, on and require.
    #[error("unknown TLS mode {0:?}: use off, on or require")]
    Mode(String),
    /// A line of a PSK file that is not `username:hexkey`.
    #[error("PSK file line {line}: {why} (expected psktool's username:hexkey)")]
    PskLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// TLS is on but there is nothing to authenticate with.
    #[error("TLS is {0} but neither a PSK file nor a certificate directory is configured")]
    NoCredentials(&'static str),
    /// A PSK file with no key in it.
    #[error("PSK file {0} holds no key")]
    EmptyPsk(PathBuf),
    /// OpenSSL refused the keys or certificates.
    #[error("{what}: {source}")]
    Ssl {
        /// What was being loaded.
        what: String,
        /// OpenSSL's errors.
        source: openssl::error::ErrorStack,
    },
}

/// Pre-shared keys by username (psktool's file format).
#[derive(Clone, Default)]
pub struct PskKeys(BTreeMap<String, Vec<u8>>);

impl std::fmt::Debug for PskKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys themselves.
        f.debug_struct("PskKeys")
            .field("users", &self.0.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl PskKeys {
    /// Parses psktool's format: `username:hexkey` per line; blank lines and
    /// lines starting with `#` are skipped.
    pub fn parse(text: &str) -> Result<Self, TlsError> {
        let mut keys = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let bad = |why: &str| TlsError::PskLine {
                line,
                why: why.to_string(),
            };
            let (user, hex) = l.split_once(':').ok_or_else(|| bad("no ':'"))?;
            if user.is_empty() {
                return Err(bad("empty username"));
            }
            if hex.is_empty() || hex.len() % 2 != 0 || hex.len() > 2 * 256 {
                return Err(bad("the key must be 1 to 256 bytes of hex digits"));
            }
            let key: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|k| u8::from_str_radix(&hex[k..k + 2], 16))
                .collect::<Result<_, _>>()
                .map_err(|_| bad("the key is not hexadecimal"))?;
            if keys.insert(user.to_string(), key).is_some() {
                return Err(bad(&format!("username {user:?} appears twice")));
            }
        }
        Ok(Self(keys))
    }

    /// Reads and parses a PSK file.
    pub fn load(path: &Path) -> Result<Self, TlsError> {
        let text = std::fs::read_to_string(path).map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let keys = Self::parse(&text)?;
        if keys.0.is_empty() {
            return Err(TlsError::EmptyPsk(path.to_path_buf()));
        }
        Ok(keys)
    }

    /// The usernames (never the keys).
    pub fn users(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    fn key(&self, user: &[u8]) -> Option<&[u8]> {
        let user = std::str::from_utf8(user).ok()?;
        self.0.get(user).map(Vec::as_slice)
    }
}

/// What TLS is made of.
#[derive(Debug, Clone, Default)]
pub struct TlsSetup {
    /// Off, on or require.
    pub mode: TlsMode,
    /// Pre-shared keys (psktool format), if any.
    pub psk: Option<PskKeys>,
    /// A directory laid out as nbdkit's `--tls-certificates`, if any.
    pub certificates: Option<PathBuf>,
    /// Refuse a client without a certificate signed by `ca-cert.pem`
    /// (nbdkit's `--tls-verify-peer`). A client certificate is always checked
    /// when one is sent.
    pub verify_peer: bool,
}

/// The server's TLS: its mode and its OpenSSL context.
pub struct Tls {
    mode: TlsMode,
    ctx: SslContext,
    /// Where the PSK callback leaves the username it accepted (OpenSSL does not
    /// report it after a TLS 1.3 handshake through the old-style callback).
    psk_user: Index<Ssl, String>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("mode", &self.mode).finish()
    }
}

impl Tls {
    /// Builds the server's TLS context; `None` when the mode is off.
    pub fn new(setup: TlsSetup) -> Result<Option<Self>, TlsError> {
        let mode_name = match setup.mode {
            TlsMode::Off => return Ok(None),
            TlsMode::On => "on",
            TlsMode::Require => "require",
        };
        if setup.psk.is_none() && setup.certificates.is_none() {
            return Err(TlsError::NoCredentials(mode_name));
        }
        let ssl = |what: &str| {
            let what = what.to_string();
            move |source| TlsError::Ssl { what, source }
        };
        let mut b = SslContextBuilder::new(SslMethod::tls_server())
            .map_err(ssl("creating the TLS context"))?;
        b.set_min_proto_version(Some(openssl::ssl::SslVersion::TLS1_2))
            .map_err(ssl("TLS versions"))?;
        // A reply lent by the device may be retried from a copy at another
        // address (a loan recalled while the socket was full; see
        // `conn::write_parts`): the same bytes, so let OpenSSL accept it.
        b.set_mode(openssl::ssl::SslMode::ACCEPT_MOVING_WRITE_BUFFER);
        // TLS 1.2 needs the PSK cipher suites named.
        b.set_cipher_list("HIGH:!aNULL:!MD5:!RC4:PSK")
            .map_err(ssl("cipher list"))?;
        // TLS 1.3: only SHA-256 suites. OpenSSL treats a key from the PSK
        // callback as a SHA-256 session; with a SHA-384 suite chosen it would
        // drop that PSK without checking its binder and fall back to a
        // certificate handshake, after the callback had already named the
        // user. With SHA-256 suites only, every key handed out is proven by
        // the client's binder or the handshake fails.
        b.set_ciphersuites("TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256")
            .map_err(ssl("TLS 1.3 cipher suites"))?;
        // In the server's order: AES-GCM first. Clients list AES-256-GCM
        // (not offered here) before ChaCha20, so on the client's order
        // GnuTLS clients (libnbd, qemu) got ChaCha20-Poly1305, which their
        // nettle decrypts at a fraction of AES-GCM's speed on AES-NI: 128 KiB
        // reads fell from 0.62x to 0.27x of nbdkit (which gets AES-256-GCM).
        b.set_options(openssl::ssl::SslOptions::CIPHER_SERVER_PREFERENCE);
        // No resumption: every session authenticates afresh, so a reused
        // session can only mean an external PSK (see `identity`).
        b.set_num_tickets(0).map_err(ssl("session tickets"))?;
        b.set_session_cache_mode(SslSessionCacheMode::OFF);
        if let Some(dir) = &setup.certificates {
            let file = |name: &str| dir.join(name);
            for f in ["ca-cert.pem", "server-cert.pem", "server-key.pem"] {
                if !file(f).is_file() {
                    return Err(TlsError::Read {
                        path: file(f),
                        source: std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            "missing (the directory is laid out as nbdkit's --tls-certificates)",
                        ),
                    });
                }
            }
            b.set_certificate_chain_file(file("server-cert.pem"))
                .map_err(ssl("loading server-cert.pem"))?;
            b.set_private_key_file(file("server-key.pem"), SslFiletype::PEM)
                .map_err(ssl("loading server-key.pem"))?;
            b.check_private_key()
                .map_err(ssl("server-key.pem does not match server-cert.pem"))?;
            b.set_ca_file(file("ca-cert.pem"))
                .map_err(ssl("loading ca-cert.pem"))?;
            let mut verify = SslVerifyMode::PEER;
            if setup.verify_peer {
                verify |= SslVerifyMode::FAIL_IF_NO_PEER_CERT;
            }
            b.set_verify(verify);
        }
        let psk_user = Ssl::new_ex_index::<String>().map_err(ssl("TLS session data"))?;
        if let Some(keys) = setup.psk {
            b.set_psk_server_callback(move |ssl, identity, out| {
                // An unknown user gets no key, which fails the handshake.
                match identity.and_then(|u| Some((u, keys.key(u)?))) {
                    Some((user, k)) if k.len() <= out.len() => {
                        out[..k.len()].copy_from_slice(k);
                        let user = String::from_utf8_lossy(user).into_owned();
                        ssl.set_ex_data(psk_user, user);
                        Ok(k.len())
                    }
                    _ => Ok(0),
                }
            });
        }
        Ok(Some(Self {
            mode: setup.mode,
            ctx: b.build(),
            psk_user,
        }))
    }

    /// On or require.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    pub(crate) fn context(&self) -> &SslContext {
        &self.ctx
    }
}

impl Tls {
    /// The tenant a finished TLS handshake authenticated: the PSK username, or
    /// else the common name of the client's (CA-verified) certificate.
    pub(crate) fn identity(&self, ssl: &SslRef) -> Option<String> {
        // The callback's username counts only if the session really rests on
        // that PSK: in TLS 1.3 an external PSK makes the session "reused"
        // (there is no other resumption here), in TLS 1.2 the cipher is a PSK one.
        let psk_used = ssl.session_reused()
            || ssl
                .current_cipher()
                .is_some_and(|c| c.name().contains("PSK"));
        if let Some(user) = ssl.ex_data(self.psk_user).filter(|_| psk_used) {
            return Some(user.clone());
        }
        let cert = ssl.peer_certificate()?;
        let cn = cert.subject_name().entries_by_nid(Nid::COMMONNAME).next()?;
        cn.data().to_string().ok()
    }
}

/// Whether a client may list and open an export: the whole authorization rule.
///
/// * TLS off: everything (local use, as before TLS existed).
/// * An export with no owner is shared: every client the mode lets in sees it.
/// * An owned export is seen only by the client whose TLS identity is its owner;
///   a client that did not authenticate sees none.
pub fn may_open(mode: TlsMode, client: Option<&str>, owner: Option<&str>) -> bool {
    match (mode, owner) {
        (TlsMode::Off, _) | (_, None) => true,
        (_, Some(owner)) => client == Some(owner),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_files_parse_as_psktool_writes_them() {
        let k = PskKeys::parse("# keys\nalice:0123abcd\n\nbob:FF00\n").unwrap();
        assert_eq!(k.users().collect::<Vec<_>>(), ["alice", "bob"]);
        assert_eq!(k.key(b"alice"), Some(&[0x01, 0x23, 0xab, 0xcd][..]));
        assert_eq!(k.key(b"bob"), Some(&[0xff, 0x00][..]));
        assert_eq!(k.key(b"carol"), None);
        assert!(
            !format!("{k:?}").contains("0123"),
            "Debug never shows a key"
        );
    }

    #[test]
    fn bad_psk_lines_are_named() {
        for (text, line, why) in [
            ("alice", 1, "no ':'"),
            ("a:00\n:0011", 2, "empty username"),
            ("alice:abc", 1, "hex"),
            ("alice:zz", 1, "not hexadecimal"),
            ("alice:00\nalice:11", 2, "twice"),
        ] {
            let e = PskKeys::parse(text).unwrap_err().to_string();
            assert!(e.contains(&format!("line {line}")), "{text:?}: {e}");
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }

    #[test]
    fn tls_needs_credentials_and_known_modes() {
        assert!(Tls::new(TlsSetup::default()).unwrap().is_none());
        let e = Tls::new(TlsSetup {
            mode: TlsMode::Require,
            ..TlsSetup::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("neither a PSK file"), "{e}");
        assert!("maybe".parse::<TlsMode>().is_err());
        assert_eq!("require".parse::<TlsMode>().unwrap(), TlsMode::Require);
        let e = Tls::new(TlsSetup {
            mode: TlsMode::On,
            certificates: Some(PathBuf::from("/nonexistent")),
            ..TlsSetup::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("ca-cert.pem"), "{e}");
    }

    #[test]
    fn who_sees_what() {
        use TlsMode::*;
        // Off: unchanged local behaviour.
        assert!(may_open(Off, None, Some("alice")));
        // Shared exports: anyone let in.
        assert!(may_open(On, None, None));
        assert!(may_open(Require, Some("bob"), None));
        // Owned exports: the owner only.
        assert!(may_open(Require, Some("alice"), Some("alice")));
        assert!(!may_open(Require, Some("bob"), Some("alice")));
        assert!(!may_open(On, None, Some("alice")));
    }
}
