//! `flexssd trace`: look at block traces before simulating them.
//!
//! * `stats` prints the workload characterisation of the GREM paper's Table I
//!   (hit ratio under 1 GiB LRU, working volume, working set, sequential and
//!   write ratios, peak IOPS in 5-minute windows), which is how one tells a
//!   cache-friendly tenant from a cache-unfriendly one;
//! * `blocks` writes the 4 KiB block accesses the simulator replays (same
//!   merge, same address spaces) as a libCacheSim `oracleGeneral` file, so
//!   that libCacheSim can be run on exactly the same stream to cross-check
//!   hit counts (`scripts/bench-cache.sh`).

use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use cache::sim::{for_each_block, FileSource, Source};
use cache::{characterise, SimConfig, WorkloadStats};
use clap::{Args, Subcommand};

/// Trace subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCmd {
    /// Workload characterisation (GREM Table I) of each trace.
    Stats(StatsArgs),
    /// Write the block accesses the simulator would replay as libCacheSim
    /// oracleGeneral (one 24-byte record per 4 KiB block).
    Blocks(BlocksArgs),
}

/// Options of `flexssd trace stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Traces as FORMAT:PATH.
    #[arg(value_name = "FORMAT:PATH", required = true)]
    pub traces: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `flexssd trace blocks`.
#[derive(Debug, Args)]
pub struct BlocksArgs {
    /// A tenant's trace as FORMAT:PATH; repeat for more tenants (merged by
    /// time as `flexssd sim cache` merges them).
    #[arg(long = "trace", value_name = "FORMAT:PATH", required = true)]
    pub traces: Vec<String>,
    /// Output file.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// Runs a trace subcommand.
pub fn run(c: &TraceCmd) -> Result<()> {
    match c {
        TraceCmd::Stats(a) => stats(a),
        TraceCmd::Blocks(a) => blocks(a),
    }
}

fn stats(a: &StatsArgs) -> Result<()> {
    let mut rows: Vec<(String, WorkloadStats)> = Vec::new();
    for spec in &a.traces {
        let it = trace::open_spec(spec)?;
        let s = characterise(it).with_context(|| format!("trace {spec}"))?;
        rows.push((spec.clone(), s));
    }
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(t, s)| serde_json::json!({ "trace": t, "stats": s }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", table(&rows));
    }
    Ok(())
}

const GIB: f64 = (1u64 << 30) as f64;

fn table(rows: &[(String, WorkloadStats)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<40} {:>9} {:>8} {:>10} {:>10} {:>7} {:>7} {:>10} {:>10}",
        "trace", "requests", "hit%", "WV GiB", "WS GiB", "seq%", "wr%", "peak IOPS", "duration s"
    );
    for (name, w) in rows {
        let short = name.rsplit('/').next().unwrap_or(name);
        let _ = writeln!(
            s,
            "{:<40} {:>9} {:>8.2} {:>10.4} {:>10.4} {:>7.2} {:>7.2} {:>10.2} {:>10.1}",
            short,
            w.requests,
            100.0 * w.lru_1g_hit_ratio,
            w.working_volume_bytes as f64 / GIB,
            w.working_set_bytes as f64 / GIB,
            100.0 * w.sequential_ratio,
            100.0 * w.write_ratio,
            w.peak_iops,
            w.duration_s
        );
    }
    s
}

fn blocks(a: &BlocksArgs) -> Result<()> {
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    for spec in &a.traces {
        sources.push(Box::new(FileSource::from_spec(spec)?));
    }
    let f = std::fs::File::create(&a.out).with_context(|| format!("create {}", a.out.display()))?;
    let mut w = BufWriter::new(f);
    let mut err: Option<std::io::Error> = None;
    let mut n = 0u64;
    for_each_block(&sources, &SimConfig::default(), |x| {
        if err.is_none() {
            let t = u32::try_from(x.time_ns / 1_000_000_000).unwrap_or(u32::MAX);
            if let Err(e) = trace::oracle::write_record(&mut w, t, x.key.raw(), 4096) {
                err = Some(e);
            }
            n += 1;
        }
    })?;
    if let Some(e) = err {
        return Err(e).with_context(|| format!("write {}", a.out.display()));
    }
    w.flush()
        .with_context(|| format!("write {}", a.out.display()))?;
    eprintln!("{n} block accesses written to {}", a.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_and_blocks_on_a_small_trace() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.csv");
        std::fs::write(&p, "0,0,4096,r,0.0\n0,8,4096,w,1.0\n0,0,8192,r,2.0\n").unwrap();
        let spec = format!("umass:{}", p.display());
        run(&TraceCmd::Stats(StatsArgs {
            traces: vec![spec.clone()],
            json: true,
        }))
        .unwrap();
        let out = d.path().join("b.bin");
        run(&TraceCmd::Blocks(BlocksArgs {
            traces: vec![spec.clone()],
            out: out.clone(),
        }))
        .unwrap();
        let recs: Vec<_> = trace::open(trace::Format::OracleGeneral, &out)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        // 1 + 1 + 2 blocks; block numbers are the object ids.
        let ids: Vec<u64> = recs.iter().map(|r| r.offset / 4096).collect();
        assert_eq!(ids, vec![0, 1, 0, 1]);
        let bad = d.path().join("bad.csv");
        std::fs::write(&bad, "0,0,4096,r,0.0\n0,zz,4096,w,1.0\n").unwrap();
        let e = run(&TraceCmd::Stats(StatsArgs {
            traces: vec![format!("umass:{}", bad.display())],
            json: false,
        }))
        .unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("bad.csv:2") && msg.contains("LBA"), "{msg}");
    }
}
