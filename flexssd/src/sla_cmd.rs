//! `flexssd sla` (being written).
use clap::Args;
/// Options of `flexssd sla`.
#[derive(Debug, Args)]
pub struct SlaArgs {
    #[command(flatten)]
    pub client: crate::ClientOpts,
}
/// Runs an SLA subcommand.
pub fn run(_a: &SlaArgs, _api: &str) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
