//! The fleet API's tokens, kept in etcd beside the fleet they guard.
//!
//! The same tokens as a host's API (`crates/auth`: `fxs_<id>_<secret>`,
//! stored as a hash under `tokens/{id}`, admin or tenant role), so that an
//! operator gives a tenant one kind of credential for a host and for the
//! fleet. Any scheduler may make, list and revoke them (each is one etcd
//! write, no placement is involved); a request's token is looked up with one
//! point read, so a revocation holds from the next request on, on every
//! scheduler.

use auth::{NewToken, Presented, Role, TokenInfo, TokenRecord};

use super::*;

impl Scheduler {
    /// Makes a token for `tenant` with `role`; returns the bearer string (to
    /// show once) and what may be shown of it later.
    pub async fn token_create(
        &self,
        tenant: &str,
        role: Role,
    ) -> Result<(String, TokenInfo), ClusterError> {
        if tenant.trim().is_empty() || tenant.len() > 64 {
            return Err(ClusterError::Invalid(
                "a token's tenant must be 1-64 characters".into(),
            ));
        }
        let t = NewToken::generate().map_err(|e| ClusterError::Invalid(e.to_string()))?;
        let rec = t.record(tenant, role, (self.wall)() / 1000);
        let key = self.keys.token(t.id());
        let mut c = self.client.clone();
        let resp = c
            .txn(
                Txn::new()
                    .when(vec![Compare::create_revision(
                        key.clone(),
                        CompareOp::Equal,
                        0,
                    )])
                    .and_then(vec![TxnOp::put(key, encode(&rec), None)]),
            )
            .await?;
        if !resp.succeeded() {
            return Err(ClusterError::Conflict(
                "a token id was drawn twice; try again".into(),
            ));
        }
        Ok((t.bearer(), rec.info()))
    }

    /// Every token, without secrets or hashes.
    pub async fn token_list(&self) -> Result<Vec<TokenInfo>, ClusterError> {
        let mut c = self.client.clone();
        let kvs = etcd::get_prefix(&mut c, &self.keys.tokens()).await?;
        Ok(kvs
            .iter()
            .filter_map(|kv| {
                decode::<TokenRecord>(kv.key(), kv.value())
                    .map_err(|e| warn!(error = %e, "ignoring a token record"))
                    .ok()
            })
            .map(|r| r.info())
            .collect())
    }

    /// Revokes token `id`.
    pub async fn token_revoke(&self, id: &str) -> Result<(), ClusterError> {
        let mut c = self.client.clone();
        let resp = c.delete(self.keys.token(id), None).await?;
        if resp.deleted() == 0 {
            return Err(ClusterError::NotFound(format!("no token with id {id:?}")));
        }
        Ok(())
    }

    /// The record of a presented token if it is one of the fleet's and its
    /// secret matches; `None` for an unknown, revoked or wrong token.
    pub async fn token_check(
        &self,
        p: &Presented<'_>,
    ) -> Result<Option<TokenRecord>, ClusterError> {
        let mut c = self.client.clone();
        let got = c.get(self.keys.token(p.id()), None).await?;
        let Some(kv) = got.kvs().first() else {
            return Ok(None);
        };
        let rec: TokenRecord = decode(kv.key(), kv.value())?;
        Ok(rec.verify(p).then_some(rec))
    }
}
