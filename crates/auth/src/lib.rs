//! Bearer tokens for the daemon's HTTP API, and who may see what.
//!
//! The control API creates and deletes vSSDs, erases flash and hands out
//! harvested capacity, so once it listens beyond the loopback interface every
//! request has to say who sends it. This crate is the pure part of that: no
//! I/O besides the OS random source, no store, no HTTP, so that it can be
//! tested on its own and reviewed in one sitting. The daemon keeps the records
//! in its control store and checks them in a middleware (`flexssd/src/api.rs`).
//!
//! Design decisions, and why:
//!
//! * **Format `fxs_<id>_<secret>`** ([`NewToken::bearer`]): `id` is 16 hex
//!   digits (64 random bits), `secret` 64 hex digits (256 random bits). The id
//!   is not secret: it names the record, so a check is one lookup by key (no
//!   scan over every hash) and `flexssd token list` / `revoke` can name a token
//!   without showing it. The prefix makes a leaked token easy to recognise
//!   (secret scanners, logs).
//! * **Randomness from the OS** (`getrandom`), never from the workspace's
//!   seeded `rng` crate, which is reproducible by design.
//! * **Only a hash is stored** ([`TokenRecord::hash`]): SHA-256 of the id and
//!   the secret, so a copy of the control store does not give API access. A
//!   slow password hash (argon2, scrypt) would buy nothing here: the secret has
//!   256 bits of entropy, far beyond any brute force, and a fast hash keeps
//!   every request's check in the microseconds.
//! * **Constant-time comparison** (`subtle`) of the presented token's hash with
//!   the stored one, so response timing says nothing about how close a guess
//!   was.
//! * **Secrets are never printed by accident**: [`NewToken`] and [`Presented`]
//!   redact the secret in their `Debug` output; the only way to the secret is
//!   [`NewToken::bearer`], called once to show the token to its owner.
//! * **Two roles** ([`Role`]): an admin token sees and changes everything; a
//!   tenant token only what its tenant owns ([`Principal::owns`]). Records are
//!   owned by a tenant name (the same names NBD TLS uses as identities), so one
//!   tenant's token and its NBD key open the same vSSDs.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Every token starts with this.
pub const PREFIX: &str = "fxs_";
/// Hex digits of a token id (64 bits).
pub const ID_HEX: usize = 16;
/// Hex digits of a token secret (256 bits).
pub const SECRET_HEX: usize = 64;
/// Separates the hashed fields, and names the scheme so that a future format
/// never collides with this one.
const HASH_DOMAIN: &[u8] = b"flexssd-api-token-v1\0";

/// Why a token could not be made or read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// The OS random source failed (the daemon cannot make tokens).
    #[error("the operating system's random source failed: {0}")]
    Random(String),
    /// A presented credential is not a flexssd bearer token; the message says
    /// what is wrong with it, never what it contains.
    #[error("malformed credentials: {0}")]
    Malformed(&'static str),
    /// An unknown role name.
    #[error("unknown role {0:?}: use admin or tenant")]
    UnknownRole(String),
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Sees and changes everything, including tokens.
    Admin,
    /// Sees and changes only what its tenant owns.
    Tenant,
}

impl std::str::FromStr for Role {
    type Err = AuthError;
    fn from_str(s: &str) -> Result<Self, AuthError> {
        match s {
            "admin" => Ok(Role::Admin),
            "tenant" => Ok(Role::Tenant),
            other => Err(AuthError::UnknownRole(other.to_string())),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Admin => "admin",
            Role::Tenant => "tenant",
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The stored form of a token: hex SHA-256 over the scheme, the id and the
/// secret.
fn hash(id: &str, secret: &str) -> String {
    let mut h = Sha256::new();
    h.update(HASH_DOMAIN);
    h.update(id.as_bytes());
    h.update(b"\0");
    h.update(secret.as_bytes());
    hex(&h.finalize())
}

/// A freshly generated token: the only value that holds a secret in the clear.
pub struct NewToken {
    id: String,
    secret: String,
}

impl fmt::Debug for NewToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewToken")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl NewToken {
    /// A new token from the OS random source.
    pub fn generate() -> Result<Self, AuthError> {
        let mut id = [0u8; ID_HEX / 2];
        let mut secret = [0u8; SECRET_HEX / 2];
        getrandom::fill(&mut id).map_err(|e| AuthError::Random(e.to_string()))?;
        getrandom::fill(&mut secret).map_err(|e| AuthError::Random(e.to_string()))?;
        Ok(NewToken {
            id: hex(&id),
            secret: hex(&secret),
        })
    }

    /// Its id (not secret).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The whole token, `fxs_<id>_<secret>`, to show its owner once; what the
    /// client sends as `Authorization: Bearer <token>`.
    pub fn bearer(&self) -> String {
        format!("{PREFIX}{}_{}", self.id, self.secret)
    }

    /// The record to store: everything but the secret, which only its hash
    /// stands for. `created_s` is the creation time in Unix seconds.
    pub fn record(&self, tenant: &str, role: Role, created_s: u64) -> TokenRecord {
        TokenRecord {
            id: self.id.clone(),
            tenant: tenant.to_string(),
            role,
            created_s,
            hash: hash(&self.id, &self.secret),
        }
    }
}

/// A token as a client presented it, parsed but not yet checked.
#[derive(Clone, PartialEq, Eq)]
pub struct Presented<'a> {
    id: &'a str,
    secret: &'a str,
}

impl fmt::Debug for Presented<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Presented")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl<'a> Presented<'a> {
    /// Parses `fxs_<16 hex>_<64 hex>` (surrounding white space ignored, so a
    /// token file may end in a newline).
    pub fn parse(token: &'a str) -> Result<Self, AuthError> {
        let rest = token
            .trim()
            .strip_prefix(PREFIX)
            .ok_or(AuthError::Malformed(
                "a flexssd token starts with fxs_ (expected fxs_<id>_<secret>)",
            ))?;
        let (id, secret) = rest.split_once('_').ok_or(AuthError::Malformed(
            "expected fxs_<id>_<secret>: the id and the secret are separated by '_'",
        ))?;
        if !is_lower_hex(id, ID_HEX) {
            return Err(AuthError::Malformed(
                "the token id must be 16 lowercase hex digits",
            ));
        }
        if !is_lower_hex(secret, SECRET_HEX) {
            return Err(AuthError::Malformed(
                "the token secret must be 64 lowercase hex digits",
            ));
        }
        Ok(Presented { id, secret })
    }

    /// Parses the value of an `Authorization` header: `Bearer <token>` (the
    /// scheme is case-insensitive, RFC 7235).
    pub fn from_authorization(header: &'a str) -> Result<Self, AuthError> {
        let (scheme, token) = header.trim().split_once(' ').ok_or(AuthError::Malformed(
            "the Authorization header must be `Bearer <token>`",
        ))?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(AuthError::Malformed(
                "only the Bearer scheme is accepted (`Authorization: Bearer <token>`)",
            ));
        }
        Self::parse(token)
    }

    /// The id, to look the record up by.
    pub fn id(&self) -> &'a str {
        self.id
    }
}

/// A token as the daemon stores it: who it belongs to and the hash of its
/// secret, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRecord {
    /// Its id, the key of the record.
    pub id: String,
    /// The tenant it acts for (for an admin token, a label of who holds it).
    pub tenant: String,
    /// What it may do.
    pub role: Role,
    /// Created, Unix seconds.
    pub created_s: u64,
    /// Hex SHA-256 of the scheme, the id and the secret.
    pub hash: String,
}

impl TokenRecord {
    /// Whether `p` is this token: same id, and its secret hashes to the stored
    /// hash, compared in constant time.
    pub fn verify(&self, p: &Presented<'_>) -> bool {
        let ids = self.id.as_bytes().ct_eq(p.id.as_bytes());
        let hashes = self.hash.as_bytes().ct_eq(hash(p.id, p.secret).as_bytes());
        (ids & hashes).into()
    }

    /// What may be shown about it: everything but the hash.
    pub fn info(&self) -> TokenInfo {
        TokenInfo {
            id: self.id.clone(),
            tenant: self.tenant.clone(),
            role: self.role,
            created_s: self.created_s,
        }
    }
}

/// What `GET /v1/tokens` and `flexssd token list` show about a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Its id.
    pub id: String,
    /// The tenant it acts for.
    pub tenant: String,
    /// What it may do.
    pub role: Role,
    /// Created, Unix seconds.
    pub created_s: u64,
}

/// Who sends a request, once its credentials are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's id; `None` when authentication is off.
    pub token_id: Option<String>,
    /// The tenant it acts for; `None` when authentication is off.
    pub tenant: Option<String>,
    /// What it may do.
    pub role: Role,
}

impl Principal {
    /// Every request when authentication is off: an admin without a token.
    pub fn unauthenticated_admin() -> Self {
        Principal {
            token_id: None,
            tenant: None,
            role: Role::Admin,
        }
    }

    /// The holder of a checked token.
    pub fn of(rec: &TokenRecord) -> Self {
        Principal {
            token_id: Some(rec.id.clone()),
            tenant: Some(rec.tenant.clone()),
            role: rec.role,
        }
    }

    /// Whether it is an admin.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether it may see and change a resource whose owner tenant is
    /// `owner`: an admin anything; a tenant only what its own tenant owns
    /// (a resource without an owner is an admin's).
    pub fn owns(&self, owner: Option<&str>) -> bool {
        match self.role {
            Role::Admin => true,
            Role::Tenant => owner.is_some() && owner == self.tenant.as_deref(),
        }
    }

    /// How to name it in a refusal: `tenant token of "a"`, `admin token of "ops"`.
    pub fn describe(&self) -> String {
        match &self.tenant {
            Some(t) => format!("{} token of {t:?}", self.role),
            None => "this client".to_string(),
        }
    }
}

/// Whether two secrets are equal, in time that does not depend on where they
/// differ (for shared secrets such as the fleet API's token).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_token_verifies_against_its_record_and_nothing_else() {
        let t = NewToken::generate().unwrap();
        let rec = t.record("tenant-a", Role::Tenant, 1_700_000_000);
        let bearer = t.bearer();
        assert!(bearer.starts_with("fxs_"));
        assert_eq!(bearer.len(), PREFIX.len() + ID_HEX + 1 + SECRET_HEX);
        let p = Presented::parse(&bearer).unwrap();
        assert_eq!(p.id(), t.id());
        assert!(rec.verify(&p));
        // One secret digit changed: refused.
        let mut wrong = bearer.clone().into_bytes();
        let last = wrong.len() - 1;
        wrong[last] = if wrong[last] == b'0' { b'1' } else { b'0' };
        let wrong = String::from_utf8(wrong).unwrap();
        assert!(!rec.verify(&Presented::parse(&wrong).unwrap()));
        // Another token: refused, even under this record's id.
        let other = NewToken::generate().unwrap();
        assert!(!rec.verify(&Presented::parse(&other.bearer()).unwrap()));
        let spliced = format!(
            "fxs_{}_{}",
            t.id(),
            other.bearer().rsplit('_').next().unwrap()
        );
        assert!(!rec.verify(&Presented::parse(&spliced).unwrap()));
    }

    #[test]
    fn tokens_are_unique_and_the_record_holds_no_secret() {
        let a = NewToken::generate().unwrap();
        let b = NewToken::generate().unwrap();
        assert_ne!(a.id(), b.id());
        assert_ne!(a.bearer(), b.bearer());
        let rec = a.record("ops", Role::Admin, 5);
        let secret = a.bearer().rsplit('_').next().unwrap().to_string();
        let json = serde_json::to_string(&rec).unwrap();
        assert!(!json.contains(&secret), "{json}");
        assert_eq!(rec.hash.len(), 64);
        let info = serde_json::to_string(&rec.info()).unwrap();
        assert!(!info.contains(&rec.hash), "{info}");
        // Debug output redacts the secret.
        assert!(!format!("{a:?}").contains(&secret));
        let bearer = a.bearer();
        let p = Presented::parse(&bearer).unwrap();
        assert!(!format!("{p:?}").contains(&secret));
    }

    #[test]
    fn the_hash_is_pinned() {
        // The stored form must not change between releases, or every token
        // would stop working after an upgrade. Reference value:
        // sha256(b"flexssd-api-token-v1\0" b"0123456789abcdef\0" b"abab...ab").
        let t = NewToken {
            id: "0123456789abcdef".into(),
            secret: "ab".repeat(32),
        };
        assert_eq!(
            t.record("x", Role::Tenant, 0).hash,
            "ffef6af28581cb95fbb7d64ced1f0fe0c865fd18d0a2fa2b365f77e1a7bb1fb2"
        );
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
    }

    #[test]
    fn malformed_tokens_are_refused_without_echoing_them() {
        let good = format!("fxs_{}_{}", "a".repeat(16), "b".repeat(64));
        assert!(Presented::parse(&good).is_ok());
        assert!(Presented::parse(&format!("  {good}\n")).is_ok());
        for (bad, says) in [
            ("", "starts with fxs_"),
            ("Bearer x", "starts with fxs_"),
            ("fxs_abc", "separated by '_'"),
            (&format!("fxs_{}_{}", "a".repeat(15), "b".repeat(64)), "id"),
            (&format!("fxs_{}_{}", "A".repeat(16), "b".repeat(64)), "id"),
            (
                &format!("fxs_{}_{}", "a".repeat(16), "b".repeat(63)),
                "secret",
            ),
            (
                &format!("fxs_{}_{}", "a".repeat(16), "g".repeat(64)),
                "secret",
            ),
            (
                &format!("fxs_{}_{}_", "a".repeat(16), "b".repeat(64)),
                "secret",
            ),
        ] {
            let e = Presented::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
            if bad.len() > 8 {
                assert!(!e.contains(bad), "{e}");
            }
        }
    }

    #[test]
    fn authorization_headers_take_only_bearer() {
        let tok = format!("fxs_{}_{}", "1".repeat(16), "2".repeat(64));
        for ok in [format!("Bearer {tok}"), format!("bearer {tok}")] {
            assert_eq!(
                Presented::from_authorization(&ok).unwrap().id(),
                "1".repeat(16)
            );
        }
        let e = Presented::from_authorization(&format!("Basic {tok}")).unwrap_err();
        assert!(e.to_string().contains("Bearer"), "{e}");
        let e = Presented::from_authorization(&tok).unwrap_err();
        assert!(e.to_string().contains("Bearer <token>"), "{e}");
    }

    #[test]
    fn roles_parse_and_print() {
        assert_eq!("admin".parse::<Role>(), Ok(Role::Admin));
        assert_eq!("tenant".parse::<Role>(), Ok(Role::Tenant));
        let e = "root".parse::<Role>().unwrap_err().to_string();
        assert!(e.contains("admin or tenant"), "{e}");
        assert_eq!(Role::Tenant.to_string(), "tenant");
        assert_eq!(serde_json::to_string(&Role::Admin).unwrap(), "\"admin\"");
    }

    #[test]
    fn tenants_own_only_their_resources_and_admins_everything() {
        let a = Principal::of(&NewToken::generate().unwrap().record("a", Role::Tenant, 0));
        assert!(a.owns(Some("a")));
        assert!(!a.owns(Some("b")));
        assert!(!a.owns(None), "a shared resource is not a tenant's");
        let admin = Principal::of(&NewToken::generate().unwrap().record("ops", Role::Admin, 0));
        assert!(admin.owns(Some("a")) && admin.owns(None));
        assert!(Principal::unauthenticated_admin().owns(Some("b")));
        assert_eq!(a.describe(), "tenant token of \"a\"");
    }
}
