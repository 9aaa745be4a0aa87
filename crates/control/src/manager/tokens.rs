//! The HTTP API's bearer tokens, kept in the control store.
//!
//! The token logic (format, hashing, checks, roles) is the `auth` crate's; the
//! manager only records and forgets tokens, because it is the one writer of
//! the control store. A record holds the hash of a token, never the token, so
//! nothing here can log or return a secret: [`HostManager::create_api_token`]
//! hands the one clear copy to its caller, who shows it to its owner once.

use auth::{NewToken, Role, TokenRecord};
use tracing::info;

use super::HostManager;
use crate::config::valid_name;
use crate::{ControlError, Result};

impl HostManager {
    /// Every API token (their records: ids, tenants, roles, hashes).
    pub fn api_tokens(&self) -> Result<Vec<TokenRecord>> {
        self.store.tokens()
    }

    /// The record of the API token with this id, if there is one.
    pub fn api_token(&self, id: &str) -> Result<Option<TokenRecord>> {
        self.store.token(id)
    }

    /// Whether any admin token exists.
    pub fn has_admin_token(&self) -> Result<bool> {
        Ok(self.store.tokens()?.iter().any(|t| t.role == Role::Admin))
    }

    /// Makes and records a token for `tenant` (a name like a vSSD's) with
    /// `role`, created at `created_s` (Unix seconds). The returned
    /// [`NewToken`] is the only copy of its secret.
    pub fn create_api_token(
        &self,
        tenant: &str,
        role: Role,
        created_s: u64,
    ) -> Result<(NewToken, TokenRecord)> {
        if !valid_name(tenant) {
            return Err(ControlError::InvalidTenant(tenant.to_string()));
        }
        // The daemon's fault, not the request's: 500.
        let token = NewToken::generate().map_err(|e| ControlError::Io {
            what: "making an API token".into(),
            source: std::io::Error::other(e),
        })?;
        let rec = token.record(tenant, role, created_s);
        self.store.insert_token(&rec)?;
        info!(id = %rec.id, tenant, %role, "API token created");
        Ok((token, rec))
    }

    /// Revokes (forgets) the token with this id: it is refused from the next
    /// request on.
    pub fn revoke_api_token(&self, id: &str) -> Result<TokenRecord> {
        let rec = self
            .store
            .remove_token(id)?
            .ok_or_else(|| ControlError::NoSuchToken(id.to_string()))?;
        info!(id, tenant = %rec.tenant, role = %rec.role, "API token revoked");
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use auth::{Presented, Role};
    use clock::VirtualClock;
    use ftl::MemCheckpoints;

    use crate::{Config, ControlStore, ErrorKind, HostManager};

    fn manager() -> HostManager {
        HostManager::open_with(
            &Config::from_toml("").unwrap(),
            Arc::new(VirtualClock::new(0)),
            ControlStore::memory().unwrap(),
            Arc::new(MemCheckpoints::default()),
        )
        .unwrap()
    }

    #[test]
    fn tokens_are_created_checked_listed_and_revoked() {
        let m = manager();
        assert!(!m.has_admin_token().unwrap());
        let (t, rec) = m.create_api_token("tenant-a", Role::Tenant, 10).unwrap();
        assert!(!m.has_admin_token().unwrap());
        let bearer = t.bearer();
        let p = Presented::parse(&bearer).unwrap();
        let stored = m.api_token(p.id()).unwrap().unwrap();
        assert_eq!(stored, rec);
        assert!(stored.verify(&p));
        m.create_api_token("ops", Role::Admin, 11).unwrap();
        assert!(m.has_admin_token().unwrap());
        assert_eq!(m.api_tokens().unwrap().len(), 2);
        m.revoke_api_token(t.id()).unwrap();
        assert_eq!(m.api_token(t.id()).unwrap(), None);
        let e = m.revoke_api_token(t.id()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.to_string().contains("token list"), "{e}");
    }

    #[test]
    fn a_bad_tenant_name_is_refused_and_named() {
        let e = manager()
            .create_api_token("a b", Role::Tenant, 0)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest);
        assert!(e.to_string().contains("\"a b\""), "{e}");
    }
}
