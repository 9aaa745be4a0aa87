//! `flexssd tier`: the daemon's shared flash cache tiers (`[[tiers]]`).
//!
//! `list` and `show` print each tier's policy, sizes, GREM zones and the hit
//! ratio of every tenant volume; `set-policy` and `set-size` change a tier
//! live through the API (a policy change empties the cache; data stays in the
//! backing file). Like every client command, nothing here touches a tier
//! except through the daemon.

use anyhow::Result;
use clap::{Args, Subcommand};
use control::{format_size, TierInfo};
use serde_json::json;

use crate::client::{table, Client};

/// Options of `flexssd tier`.
#[derive(Debug, Args)]
pub struct TierArgs {
    #[command(flatten)]
    pub client: crate::ClientOpts,
    #[command(subcommand)]
    cmd: TierCmd,
}

#[derive(Debug, Subcommand)]
enum TierCmd {
    /// List the cache tiers with their policy, size and hit ratio.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one tier: sizes, zones, and each volume's hits and misses.
    Show {
        /// Tier name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Change a tier's replacement policy live; the cache starts again empty.
    SetPolicy {
        /// Tier name.
        name: String,
        /// glru, car, arc, vfrm, isolation, grem or dgrem.
        policy: String,
    },
    /// Resize a tier's cache live (at most its cache vSSD's capacity).
    SetSize {
        /// Tier name.
        name: String,
        /// New size: bytes or with a K/M/G/T suffix, a multiple of 4 KiB.
        #[arg(value_parser = control::parse_size, value_name = "SIZE")]
        size: u64,
    },
}

/// Runs a tier subcommand against the daemon at `api`.
pub fn run(a: &TierArgs, api: &str) -> Result<()> {
    let c = Client::new(api);
    match &a.cmd {
        TierCmd::List { json } => {
            let tiers: Vec<TierInfo> = c.get("/v1/tiers")?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&tiers)?);
                return Ok(());
            }
            if tiers.is_empty() {
                println!("no cache tiers (add [[tiers]] to the configuration)");
                return Ok(());
            }
            let rows: Vec<Vec<String>> = tiers
                .iter()
                .map(|t| {
                    let s = &t.stats;
                    let (h, m) = s.volumes.iter().fold((0, 0), |(h, m), v| {
                        (
                            h + v.read_hits + v.write_hits,
                            m + v.read_misses + v.write_misses,
                        )
                    });
                    vec![
                        t.name.clone(),
                        s.policy.to_string(),
                        format_size(s.cache_bytes),
                        format_size(s.cached_bytes),
                        t.cache_vssd.clone(),
                        s.volumes
                            .iter()
                            .map(|v| v.name.as_str())
                            .collect::<Vec<_>>()
                            .join(","),
                        percent(h, m),
                    ]
                })
                .collect();
            table(
                &[
                    "NAME",
                    "POLICY",
                    "CACHE",
                    "CACHED",
                    "CACHE-VSSD",
                    "VOLUMES",
                    "HIT%",
                ],
                &rows,
            );
            Ok(())
        }
        TierCmd::Show { name, json } => {
            let t: TierInfo = c.get(&format!("/v1/tiers/{name}"))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                show(&t);
            }
            Ok(())
        }
        TierCmd::SetPolicy { name, policy } => {
            let t: TierInfo = c.put(
                &format!("/v1/tiers/{name}/policy"),
                &json!({ "policy": policy }),
            )?;
            println!(
                "tier {} now uses {} (cache emptied; {} of cache)",
                t.name,
                t.stats.policy,
                format_size(t.stats.cache_bytes)
            );
            Ok(())
        }
        TierCmd::SetSize { name, size } => {
            let t: TierInfo = c.put(&format!("/v1/tiers/{name}/size"), &json!({ "size": size }))?;
            println!(
                "tier {} cache is now {} ({} cached)",
                t.name,
                format_size(t.stats.cache_bytes),
                format_size(t.stats.cached_bytes)
            );
            Ok(())
        }
    }
}

fn percent(hits: u64, misses: u64) -> String {
    if hits + misses == 0 {
        "-".into()
    } else {
        format!("{:.1}", 100.0 * hits as f64 / (hits + misses) as f64)
    }
}

fn show(t: &TierInfo) {
    let s = &t.stats;
    println!("tier {}", t.name);
    println!(
        "  policy:        {} ({} lines)",
        s.policy,
        format_size(s.line_bytes)
    );
    println!(
        "  cache:         {} of at most {}, {} in use, on vSSD {} ({} channels {})",
        format_size(s.cache_bytes),
        format_size(s.max_cache_bytes),
        format_size(s.cached_bytes),
        t.cache_vssd,
        t.device,
        control::channel_list(&t.channels)
    );
    if let (Some(l), Some(z)) = (s.long_term_zone_bytes, s.short_term_zone_bytes) {
        println!(
            "  zones:         long-term {}, short-term {}",
            format_size(l),
            format_size(z)
        );
    }
    println!(
        "  backing:       {} ({}{})",
        t.backing.display(),
        format_size(t.backing_bytes),
        match &t.hdd {
            Some(h) => format!(", timed as a {} RPM disk", h.rpm),
            None => String::new(),
        }
    );
    println!(
        "  movement:      {} lines filled, {} evicted, {} policy changes",
        s.lines_filled, s.lines_evicted, s.policy_changes
    );
    let rows: Vec<Vec<String>> = s
        .volumes
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                format_size(v.size),
                v.read_hits.to_string(),
                v.read_misses.to_string(),
                percent(v.read_hits, v.read_misses),
                v.write_hits.to_string(),
                v.write_misses.to_string(),
                percent(v.write_hits, v.write_misses),
                format_size(v.resident_bytes),
                v.reserved_bytes.map_or("-".into(), format_size),
            ]
        })
        .collect();
    println!();
    table(
        &[
            "VOLUME",
            "SIZE",
            "READ-HITS",
            "READ-MISSES",
            "READ-HIT%",
            "WRITE-HITS",
            "WRITE-MISSES",
            "WRITE-HIT%",
            "RESIDENT",
            "RESERVED",
        ],
        &rows,
    );
}
