//! `flexssd sim cache`: the trace-driven shared-cache simulator. Each
//! `--trace` is a tenant (VM); the tenants' requests are merged by time and
//! replayed against every policy at every cache size, in parallel over the
//! host's cores. Prints hit ratios (read, write, overall) and the normalised
//! IO cost; `--json`/`--csv` for scripts; `--plot` draws the paper's Figures
//! 6 and 7 (hit ratio and IO cost against cache size) with the binary's own
//! SVG plotter.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, ensure, Context, Result};
use cache::sim::{run_matrix_with_progress, FileSource, Progress, Source, MAX_SPAN_SECS};
use cache::{CostModel, PolicyConfig, PolicyKind, RunResult, SimConfig, WritePolicy};
use clap::Args;
use clock::Clock;
use control::parse_size;
use indicatif::{HumanCount, ProgressBar};

/// Options of `flexssd sim cache`.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// A tenant's trace as FORMAT:PATH (formats: msr, tencent, systor,
    /// cloudphysics, disksim, fio-iolog, blkparse, umass, fiu, oracle). Repeat for
    /// more tenants.
    #[arg(long = "trace", value_name = "FORMAT:PATH", required = true)]
    pub traces: Vec<String>,
    /// Policies to compare, comma-separated: glru, car, arc, vfrm, isolation, grem, dgrem.
    #[arg(
        long,
        value_name = "NAME[,NAME...]",
        default_value = "glru,car,arc,vfrm,isolation,grem,dgrem"
    )]
    pub policy: String,
    /// Cache sizes, comma-separated, with K, M, G or T suffixes (powers of 1024).
    #[arg(long = "cache-size", value_name = "SIZE[,SIZE...]", required = true)]
    pub cache_size: String,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write one CSV row per policy, size and tenant (and the total).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Draw the hit ratio against cache size to FILE.svg and the normalised
    /// IO cost to FILE-cost.svg.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Device latencies of the IO cost model (TOML, fields of `CostModel`;
    /// unset fields keep the defaults).
    #[arg(long, value_name = "FILE")]
    pub cost_config: Option<PathBuf>,
    /// Policy parameters (TOML, fields of `PolicyConfig`: epoch_secs, aging,
    /// alpha, beta, gamma, window_epochs, min_zone_fraction, line and bin
    /// sizes, bin_fill).
    #[arg(long, value_name = "FILE")]
    pub policy_config: Option<PathBuf>,
    /// Epoch length of vFRM, GREM and D-GREM in seconds (overrides the
    /// policy config; default 300).
    #[arg(long, value_name = "SECONDS")]
    pub epoch: Option<f64>,
    /// What of a chosen bin vFRM, isolation, GREM and D-GREM put in flash:
    /// whole-bin (every line, the paper's), accessed-lines (the lines of the
    /// bin that were accessed) or adaptive (per tenant, whichever its reads
    /// show pays). Overrides the policy config.
    #[arg(long, value_name = "FILL", value_parser = parse_bin_fill)]
    pub bin_fill: Option<cache::BinFill>,
    /// vFRM, isolation, GREM and D-GREM: a read miss copies its line into
    /// flash at once while flash is free (eviction stays at epoch ends).
    /// Sets the policy config's fill_free_flash.
    #[arg(long)]
    pub fill_free_flash: bool,
    /// How writes reach the disk: write-through (every write goes to the
    /// HDD too; nothing is ever dirty; the live tier's default) or write-back
    /// (writes that hit or are admitted stay in the SSD until their line is
    /// evicted, then are written back, contiguous lines together).
    #[arg(long, value_name = "POLICY", default_value = "write-through", value_parser = parse_write_policy)]
    pub write_policy: WritePolicy,
    /// Stretch every tenant's timeline to this many seconds, so that traces of
    /// different lengths overlap for the whole run; a trace longer than the
    /// span is cut there, not compressed. At most 18,446,744,073 (584 years).
    #[arg(long, value_name = "SECONDS")]
    pub span: Option<f64>,
    /// With --span: refuse to stretch any trace by more than this factor
    /// (the run fails, naming the trace).
    #[arg(long, value_name = "FACTOR")]
    pub max_stretch: Option<f64>,
    /// Worker threads (default: the number of cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print a row per tenant as well as the total.
    #[arg(long)]
    pub per_tenant: bool,
    /// A label written in the CSV's first column (e.g. the name of a mix).
    #[arg(long, default_value = "")]
    pub label: String,
}

fn read_file(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("read {what} {}", path.display()))
}

fn parse_bin_fill(s: &str) -> Result<cache::BinFill, String> {
    s.parse().map_err(|e: cache::CacheError| e.to_string())
}

fn parse_write_policy(s: &str) -> Result<WritePolicy, String> {
    s.parse().map_err(|e: cache::CacheError| e.to_string())
}

/// Parses `--cache-size`; every size must be positive.
fn parse_sizes(s: &str) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let v = parse_size(part).map_err(anyhow::Error::msg)?;
        if v == 0 {
            bail!("cache size {part:?} is zero");
        }
        out.push(v);
    }
    if out.is_empty() {
        bail!("no cache size in {s:?}");
    }
    Ok(out)
}

/// Builds the simulator configuration from the options.
fn config(a: &CacheArgs) -> Result<SimConfig> {
    let mut policy: PolicyConfig = match &a.policy_config {
        Some(p) => PolicyConfig::from_toml(&read_file(p, "policy config")?)
            .with_context(|| format!("policy config {}", p.display()))?,
        None => PolicyConfig::default(),
    };
    if let Some(e) = a.epoch {
        policy.epoch_secs = e;
    }
    if let Some(f) = a.bin_fill {
        policy.bin_fill = f;
    }
    if a.fill_free_flash {
        policy.fill_free_flash = true;
    }
    let cost: CostModel = match &a.cost_config {
        Some(p) => CostModel::from_toml(&read_file(p, "cost config")?)
            .with_context(|| format!("cost config {}", p.display()))?,
        None => CostModel::default(),
    };
    if let Some(s) = a.span {
        ensure!(
            s.is_finite() && s > 0.0 && s <= MAX_SPAN_SECS,
            "--span must be more than 0 and at most {MAX_SPAN_SECS} seconds (past which \
             stretched times overflow 64-bit nanoseconds), got {s}"
        );
    }
    let cfg = SimConfig {
        policy,
        cost,
        write_policy: a.write_policy,
        span_secs: a.span,
        max_stretch: a.max_stretch,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// The runs finished on the bar's position, the requests replayed (over all
/// runs) in its message.
struct Bar {
    bar: ProgressBar,
    requests: AtomicU64,
}

impl Progress for Bar {
    fn requests(&self, n: u64) {
        let total = self.requests.fetch_add(n, Ordering::Relaxed) + n;
        self.bar.set_message(HumanCount(total).to_string());
    }
    fn job_done(&self) {
        self.bar.inc(1);
    }
}

/// Runs the cache simulation; `wall` times each run (`elapsed_s`).
pub fn run(a: &CacheArgs, wall: &dyn Clock) -> Result<()> {
    let kinds = PolicyKind::parse_list(&a.policy)?;
    let sizes = parse_sizes(&a.cache_size)?;
    let cfg = config(a)?;
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    for spec in &a.traces {
        let s = FileSource::from_spec(spec)?;
        if !s.path.is_file() {
            bail!("trace {spec:?}: {} is not a file", s.path.display());
        }
        sources.push(Box::new(s));
    }
    let jobs: Vec<(PolicyKind, u64)> = kinds
        .iter()
        .flat_map(|&k| sizes.iter().map(move |&b| (k, b)))
        .collect();
    let threads = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    if crate::progress::interactive(a.json) {
        eprintln!(
            "simulating {} tenant(s), {} run(s) on {} thread(s)...",
            sources.len(),
            jobs.len(),
            threads.min(jobs.len())
        );
    }
    let progress = Bar {
        bar: crate::progress::bar(
            jobs.len() as u64,
            "[{bar:20}] {pos}/{len} runs, {msg} requests replayed ({elapsed})",
            a.json,
        ),
        requests: AtomicU64::new(0),
    };
    progress.bar.set_message("0");
    let results = run_matrix_with_progress(&sources, &jobs, &cfg, threads, wall, &progress);
    progress.bar.finish_and_clear();
    let results = results?;
    if let Some(p) = &a.csv {
        std::fs::write(p, csv(&a.label, a.write_policy, &results))
            .with_context(|| format!("write {}", p.display()))?;
    }
    if let Some(p) = &a.plot {
        plot(p, &results, &a.label)?;
    }
    if a.json {
        let out = serde_json::json!({
            "traces": a.traces,
            "config": cfg,
            "results": results,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", table(&results, a.per_tenant));
    }
    Ok(())
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{:.2}", 100.0 * v))
}

fn size_str(b: u64) -> String {
    control::format_size(b)
}

/// The human-readable table.
fn table(results: &[RunResult], per_tenant: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<7} {:>9} {:<24} {:>10} {:>7} {:>7} {:>7} {:>9} {:>10}",
        "policy", "cache", "tenant", "accesses", "read%", "write%", "hit%", "norm.cost", "req/s"
    );
    for r in results {
        let mut rows: Vec<&cache::TenantResult> = Vec::new();
        if per_tenant && r.tenants.len() > 1 {
            rows.extend(r.tenants.iter());
        }
        rows.push(&r.total);
        for t in rows {
            let rate = if t.name == "total" {
                r.requests_per_sec()
                    .map_or_else(String::new, |v| format!("{v:.0}"))
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "{:<7} {:>9} {:<24} {:>10} {:>7} {:>7} {:>7} {:>9} {:>10}",
                r.policy.name(),
                size_str(r.cache_bytes),
                t.name,
                t.accesses(),
                pct(t.read_hit_ratio),
                pct(t.write_hit_ratio),
                pct(t.hit_ratio),
                t.normalised_cost
                    .map_or_else(|| "-".to_string(), |v| format!("{v:.4}")),
                rate
            );
        }
    }
    s
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.6}"))
}

/// `s` as one CSV field: as is, or quoted (RFC 4180, quotes doubled) where it
/// holds a comma, a quote or a line break.
fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// Long CSV: one row per (policy, size, tenant), the total included; the
/// label and tenant names are quoted where they need it.
fn csv(label: &str, write_policy: WritePolicy, results: &[RunResult]) -> String {
    let mut s = String::from(
        "label,policy,cache_bytes,cache_mib,tenant,requests,accesses,read_hits,read_misses,write_hits,write_misses,hit_ratio,read_hit_ratio,write_hit_ratio,cost_us,baseline_cost_us,normalised_cost,move_cost_us,evicted_lines,writebacks,migrated_lines,elapsed_s,requests_per_s,write_policy\n",
    );
    for r in results {
        for t in r.tenants.iter().chain(std::iter::once(&r.total)) {
            let timed = t.name == "total";
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.1},{:.1},{},{:.1},{},{},{},{},{},{}",
                csv_field(label),
                r.policy,
                r.cache_bytes,
                r.cache_bytes as f64 / (1u64 << 20) as f64,
                csv_field(&t.name),
                t.requests,
                t.accesses(),
                t.read_hits,
                t.read_misses,
                t.write_hits,
                t.write_misses,
                opt(t.hit_ratio),
                opt(t.read_hit_ratio),
                opt(t.write_hit_ratio),
                t.cost_us,
                t.baseline_cost_us,
                opt(t.normalised_cost),
                t.move_cost_us,
                t.evicted_lines,
                t.writebacks,
                t.migrated_lines,
                if timed {
                    r.elapsed_ns
                        .map_or_else(String::new, |n| format!("{:.6}", n as f64 / 1e9))
                } else {
                    String::new()
                },
                if timed {
                    r.requests_per_sec()
                        .map_or_else(String::new, |v| format!("{v:.0}"))
                } else {
                    String::new()
                },
                write_policy,
            );
        }
    }
    s
}

/// Draws the hit ratio (`out`) and the normalised IO cost (`out` with
/// `-cost` before the extension) of the totals against log2 of the cache size
/// in MiB, one line per policy, with `flexssd plot lines`.
pub(crate) fn plot(out: &Path, results: &[RunResult], label: &str) -> Result<()> {
    let mut pts = String::from("policy,log2_cache_mib,hit_pct,norm_cost\n");
    for r in results {
        let x = (r.cache_bytes as f64 / (1u64 << 20) as f64).log2();
        let _ = writeln!(
            pts,
            "{},{x},{},{}",
            r.policy,
            100.0 * r.total.hit_ratio.unwrap_or(0.0),
            r.total.normalised_cost.unwrap_or(0.0)
        );
    }
    let tmp = out.with_extension("points.csv");
    std::fs::write(&tmp, pts).with_context(|| format!("write {}", tmp.display()))?;
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plot".into());
    let cost_out = out.with_file_name(format!("{stem}-cost.svg"));
    // Built through the command-line parser, so options that `plot lines`
    // gains later keep their defaults here.
    #[derive(clap::Parser)]
    struct Lines {
        #[command(flatten)]
        args: crate::plot::LinesArgs,
    }
    let draw = |y: &str, file: &Path, title: &str, ylabel: &str| -> Result<()> {
        let argv: Vec<std::ffi::OsString> = vec![
            "plot".into(),
            "--csv".into(),
            tmp.clone().into(),
            "--x".into(),
            "log2_cache_mib".into(),
            "--y".into(),
            y.into(),
            "--series".into(),
            "policy".into(),
            "--out".into(),
            file.into(),
            "--title".into(),
            title.into(),
            "--xlabel".into(),
            "cache size, log2(MiB)".into(),
            "--ylabel".into(),
            ylabel.into(),
        ];
        let l = <Lines as clap::Parser>::try_parse_from(argv)?;
        crate::plot::run(&crate::plot::PlotCmd::Lines(l.args))
    };
    let titled = |t: &str| {
        if label.is_empty() {
            t.to_string()
        } else {
            format!("{t}: {label}")
        }
    };
    let r = draw("hit_pct", out, &titled("IO hit ratio"), "hit ratio (%)").and_then(|_| {
        draw(
            "norm_cost",
            &cost_out,
            &titled("IO cost (normalised to no cache)"),
            "normalised IO cost",
        )
    });
    let _ = std::fs::remove_file(&tmp);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        a: CacheArgs,
    }

    fn args(extra: &[&str]) -> CacheArgs {
        let mut v = vec!["x"];
        v.extend_from_slice(extra);
        Cli::try_parse_from(v).unwrap().a
    }

    fn trace_file(dir: &Path) -> PathBuf {
        let p = dir.join("t.disksim");
        let mut text = String::new();
        for i in 0..3000u64 {
            // 1 ms apart, a hot set of 50 blocks and a cold scan.
            let lba = if i % 2 == 0 {
                (i * 7 % 50) * 8
            } else {
                100_000 + i * 8
            };
            let _ = writeln!(text, "{} 0 {lba} 8 {}", i * 1_000_000, i % 3 % 2);
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn sizes_and_policies_are_checked() {
        assert_eq!(parse_sizes("4K, 1M").unwrap(), vec![4096, 1 << 20]);
        assert!(parse_sizes("0").unwrap_err().to_string().contains("zero"));
        assert!(parse_sizes("lots").is_err());
        assert!(parse_sizes(",").is_err());
        let d = tempfile::tempdir().unwrap();
        let t = trace_file(d.path());
        let spec = format!("disksim:{}", t.display());
        let a = args(&[
            "--trace",
            &spec,
            "--policy",
            "glru,lfu",
            "--cache-size",
            "1M",
        ]);
        let e = run(&a, &clock::VirtualClock::new(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown cache policy \"lfu\""), "{e}");
        let a = args(&["--trace", "disksim:/no/such", "--cache-size", "1M"]);
        let e = run(&a, &clock::VirtualClock::new(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/no/such"), "{e}");
        let a = args(&["--trace", &spec, "--policy", "grem", "--cache-size", "64K"]);
        let e = format!("{:#}", run(&a, &clock::VirtualClock::new(0)).unwrap_err());
        assert!(e.contains("too small"), "{e}");
    }

    #[test]
    fn bin_fill_overrides_the_policy_config_and_bad_values_are_named() {
        let d = tempfile::tempdir().unwrap();
        let pc = d.path().join("p.toml");
        std::fs::write(&pc, "bin_fill = \"accessed-lines\"\n").unwrap();
        let a = args(
            &[
                "--trace",
                "disksim:t",
                "--cache-size",
                "1M",
                "--policy-config",
            ]
            .into_iter()
            .chain([pc.to_str().unwrap()])
            .collect::<Vec<_>>(),
        );
        assert_eq!(
            config(&a).unwrap().policy.bin_fill,
            cache::BinFill::AccessedLines
        );
        let a = args(&[
            "--trace",
            "disksim:t",
            "--cache-size",
            "1M",
            "--policy-config",
            pc.to_str().unwrap(),
            "--bin-fill",
            "adaptive",
        ]);
        assert_eq!(
            config(&a).unwrap().policy.bin_fill,
            cache::BinFill::Adaptive
        );
        assert!(!config(&a).unwrap().policy.fill_free_flash);
        let a = args(&[
            "--trace",
            "disksim:t",
            "--cache-size",
            "1M",
            "--fill-free-flash",
        ]);
        assert!(config(&a).unwrap().policy.fill_free_flash);
        let e = Cli::try_parse_from(["x", "--trace", "disksim:t", "--bin-fill", "half"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("half") && e.contains("adaptive"), "{e}");
    }

    #[test]
    fn runs_writes_csv_and_plots() {
        let d = tempfile::tempdir().unwrap();
        let t = trace_file(d.path());
        let spec = format!("disksim:{}", t.display());
        let csv_path = d.path().join("r.csv");
        let svg = d.path().join("fig.svg");
        let cost = d.path().join("cost.toml");
        std::fs::write(&cost, "hdd_read_4k_us = 10000\n").unwrap();
        let a = args(&[
            "--trace",
            &spec,
            "--trace",
            &spec,
            "--policy",
            "glru,dgrem",
            "--cache-size",
            "1M,4M",
            "--csv",
            csv_path.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
            "--cost-config",
            cost.to_str().unwrap(),
            "--epoch",
            "0.5",
            "--label",
            "mix",
            "--write-policy",
            "write-back",
        ]);
        run(&a, &clock::VirtualClock::new(0)).unwrap();
        let text = std::fs::read_to_string(&csv_path).unwrap();
        assert!(text.lines().nth(1).unwrap().ends_with(",write-back"));
        // 2 policies x 2 sizes x (2 tenants + total) rows + header.
        assert_eq!(text.lines().count(), 1 + 2 * 2 * 3);
        assert!(text
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("mix,glru,1048576,1,t.disksim,3000,"));
        assert!(std::fs::read_to_string(&svg).unwrap().contains("polyline"));
        assert!(d.path().join("fig-cost.svg").exists());
        assert!(!d.path().join("fig.points.csv").exists());
        let bad = d.path().join("bad.toml");
        std::fs::write(&bad, "hdd_read_4k_us = 10000\nfloppy_us = 1\n").unwrap();
        let a = args(&[
            "--trace",
            &spec,
            "--cache-size",
            "1M",
            "--cost-config",
            bad.to_str().unwrap(),
        ]);
        let e = format!("{:#}", run(&a, &clock::VirtualClock::new(0)).unwrap_err());
        assert!(e.contains("floppy_us") && e.contains("bad.toml"), "{e}");
    }

    #[test]
    fn a_span_past_64_bit_nanoseconds_is_refused() {
        for span in ["2e10", "1e300", "0", "NaN"] {
            let a = args(&["--trace", "disksim:t", "--cache-size", "1M", "--span", span]);
            let e = config(&a).unwrap_err().to_string();
            assert!(
                e.starts_with("--span must be more than 0 and at most 18446744073 seconds"),
                "{span}: {e}"
            );
        }
        let a = args(&[
            "--trace",
            "disksim:t",
            "--cache-size",
            "1M",
            "--span",
            "18446744073",
        ]);
        assert_eq!(config(&a).unwrap().span_secs, Some(18_446_744_073.0));
    }

    #[test]
    fn labels_and_tenant_names_are_quoted_where_csv_needs_it() {
        assert_eq!(csv_field("mix"), "mix");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");

        let d = tempfile::tempdir().unwrap();
        let t = trace_file(d.path());
        let odd = d.path().join("we,ird.disksim");
        std::fs::copy(&t, &odd).unwrap();
        let csv_path = d.path().join("r.csv");
        let a = args(&[
            "--trace",
            &format!("disksim:{}", odd.display()),
            "--policy",
            "glru",
            "--cache-size",
            "1M",
            "--csv",
            csv_path.to_str().unwrap(),
            "--label",
            "mix, \"1\"",
        ]);
        run(&a, &clock::VirtualClock::new(0)).unwrap();
        let mut rd = csv::Reader::from_path(&csv_path).unwrap();
        let width = rd.headers().unwrap().len();
        let rows: Vec<csv::StringRecord> = rd.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 2);
        for r in &rows {
            assert_eq!(r.len(), width, "{r:?}");
            assert_eq!(&r[0], "mix, \"1\"");
            assert_eq!(&r[23], "write-through");
        }
        assert_eq!(&rows[0][4], "we,ird.disksim");
        assert_eq!(&rows[1][4], "total");
    }
}
