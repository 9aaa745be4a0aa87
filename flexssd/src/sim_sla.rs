//! `flexssd sim sla-placement` (being written).
use clap::Args;
/// Options of `flexssd sim sla-placement`.
#[derive(Debug, Args)]
pub struct PlacementArgs {}
/// Runs the placement experiment.
pub fn run(_a: &PlacementArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
