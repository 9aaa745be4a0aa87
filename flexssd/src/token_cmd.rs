//! `flexssd token`: the HTTP API's bearer tokens (admins only).
//!
//! `create` prints the new token once, alone on stdout so that a script can
//! put it straight into a file (`flexssd token create ... > t && chmod 600 t`);
//! the daemon keeps only its hash, so it cannot be shown again. `list` shows
//! ids, tenants, roles and creation times, never a secret; `revoke` makes a
//! token useless from the next request on.

use anyhow::Result;
use auth::{Role, TokenInfo};
use clap::{Args, Subcommand};

use crate::api::{CreatedToken, TokenRequest};
use crate::client::{table, Client};

/// Options of `flexssd token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(flatten)]
    pub client: crate::ClientOpts,
    #[command(subcommand)]
    cmd: TokenCmd,
}

#[derive(Debug, Subcommand)]
enum TokenCmd {
    /// Make a token and print it (once: only its hash is kept).
    Create {
        /// The tenant it acts for: a tenant token sees and changes only the
        /// vSSDs (and their harvest volumes) whose tenant this is. For an admin
        /// token, a label of who holds it.
        #[arg(long)]
        tenant: String,
        /// admin (everything, tokens included) or tenant (its own resources).
        #[arg(long, value_name = "admin|tenant", default_value = "tenant")]
        role: Role,
    },
    /// List the tokens: id, tenant, role, created (never the secret).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token: it is refused from the next request on.
    Revoke {
        /// The token's id (`flexssd token list`; the 16 hex digits after fxs_).
        id: String,
    },
}

/// Unix seconds as an HTTP date (UTC), e.g. `Fri, 01 May 2026 12:00:00 GMT`.
fn date(secs: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// Runs a token subcommand against the daemon at `api`.
pub fn run(a: &TokenArgs, api: &str) -> Result<()> {
    let c = Client::new(api);
    match &a.cmd {
        TokenCmd::Create { tenant, role } => {
            let t: CreatedToken = c.post(
                "/v1/tokens",
                &TokenRequest {
                    tenant: tenant.clone(),
                    role: *role,
                },
            )?;
            eprintln!(
                "created {} token {} for {:?}; it is shown only now (keep it in a file of mode 0600 for --token-file, or in FLEXSSD_TOKEN)",
                t.info.role, t.info.id, t.info.tenant
            );
            println!("{}", t.token);
            Ok(())
        }
        TokenCmd::List { json } => {
            let list: Vec<TokenInfo> = c.get("/v1/tokens")?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|t| {
                    vec![
                        t.id.clone(),
                        t.tenant.clone(),
                        t.role.to_string(),
                        date(t.created_s),
                    ]
                })
                .collect();
            table(&["ID", "TENANT", "ROLE", "CREATED"], &rows);
            Ok(())
        }
        TokenCmd::Revoke { id } => {
            let _: serde_json::Value = c.delete(&format!("/v1/tokens/{id}"))?;
            println!("revoked token {id}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_utc() {
        assert_eq!(super::date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(super::date(1_700_000_000), "Tue, 14 Nov 2023 22:13:20 GMT");
    }
}
