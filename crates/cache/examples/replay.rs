//! Replays one trace with one policy at one size and prints the hit counts
//! and the speed: `cargo run --release -p cache --example replay -- FORMAT:PATH POLICY SIZE_BYTES`.
//! The CLI (`flexssd sim cache`) is the full tool; this is for profiling the
//! engine alone.

use cache::sim::{run_matrix, FileSource, Source};
use cache::{PolicyKind, SimConfig};
use clock::MonotonicClock;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        return Err("usage: replay FORMAT:PATH POLICY SIZE_BYTES".into());
    }
    let sources: Vec<Box<dyn Source>> = vec![Box::new(FileSource::from_spec(&args[1])?)];
    let kind: PolicyKind = args[2].parse()?;
    let bytes: u64 = args[3].parse()?;
    let r = run_matrix(
        &sources,
        &[(kind, bytes)],
        &SimConfig::default(),
        1,
        &MonotonicClock::new(),
    )?
    .remove(0);
    println!(
        "{} {} hits {} misses {} req/s {:.0}",
        r.policy,
        r.cache_bytes,
        r.total.hits(),
        r.total.accesses() - r.total.hits(),
        r.requests_per_sec().unwrap_or(0.0)
    );
    Ok(())
}
