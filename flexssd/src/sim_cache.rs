//! `flexssd sim cache` (being written).
use clap::Args;
/// Options of `flexssd sim cache`.
#[derive(Debug, Args)]
pub struct CacheArgs {}
/// Runs the cache simulation.
pub fn run(_a: &CacheArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
