//! `flexssd trace` (being written).
use clap::Subcommand;
/// Trace subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCmd {
    /// Workload characterisation (GREM Table I).
    Stats,
}
/// Runs a trace subcommand.
pub fn run(_c: &TraceCmd) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
