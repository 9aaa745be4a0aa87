//! `flexssd sim sla-placement`: Regulator's §6.1 experiment — how many
//! storage units (disks) the same tenants need when they are provisioned by
//! aggregate IOPS, by weighted IOPS, by SLA curves placed at random, and by
//! Regulator's SLA-aware placement.
//!
//! The algorithms are the `sla` crate's ([`sla::experiment`],
//! [`sla::placement`]); this module is the harness around them: it builds
//! the tenant populations (synthetic groups, or curves derived from block
//! traces read with the `trace` crate, which keeps `sla` free of I/O), runs
//! every method on every population for several seeded trials, and writes a
//! table, CSV, JSON and an SVG bar chart. Everything is a pure function of
//! the options, so a committed command reproduces every number.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use plotters::prelude::*;
use serde::Serialize;

use rng::SplitMix64;
use sla::catalog::{Catalog, Percentile};
use sla::experiment::{run_method, ExperimentConfig, Method, Outcome};
use sla::placement::{Metric, NewUnitPolicy};
use sla::tenants::{
    peak_total, scale_to_peak, synthetic_population, throughput_samples, GenParams, IoEvent,
    Workload, MAX_WINDOWS,
};
use sla::Curve;

/// Options of `flexssd sim sla-placement`.
#[derive(Debug, Args)]
pub struct PlacementArgs {
    /// Tenants per population (the paper: 300).
    #[arg(long, default_value_t = 300)]
    pub tenants: usize,
    /// Master seed; trial t uses streams derived from (seed, t, ...).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Independent trials (populations and random choices) per cell.
    #[arg(long, default_value_t = 5)]
    pub trials: usize,
    /// Storage-unit catalogue, TOML or JSON (by extension `.json`). Default:
    /// the built-in illustrative catalogue (`sla/src/default_units.toml`).
    #[arg(long, value_name = "FILE")]
    pub units: Option<PathBuf>,
    /// Regulator's curve-alignment metric: dot, l2 or area.
    #[arg(long, default_value = "dot")]
    pub metric: Metric,
    /// Percentile classes to run.
    #[arg(long, value_delimiter = ',', default_value = "p95,p99,p99.9")]
    pub percentiles: Vec<Percentile>,
    /// Synthetic groups: paper (one third each of read-intensive,
    /// write-intensive and mixed, as in §6.1), read, write, mixed.
    #[arg(long, value_delimiter = ',', default_value = "paper,read,write,mixed")]
    pub groups: Vec<String>,
    /// Derive tenant curves from a block trace (FORMAT:PATH, as in
    /// `flexssd trace`; repeatable) instead of the synthetic groups: each
    /// volume with enough busy windows gives one curve shape.
    #[arg(long = "trace", value_name = "FORMAT:PATH")]
    pub traces: Vec<String>,
    /// Throughput windows per trace file (window = file's time span / this),
    /// unless --window-ms is given; 1 to 1,000,000.
    #[arg(long, default_value_t = 60)]
    pub windows: u64,
    /// Fixed throughput window in milliseconds for every trace: at least
    /// 0.001 (1 µs), and at most 1,000,000 windows over a trace's span.
    #[arg(long)]
    pub window_ms: Option<f64>,
    /// Volumes with fewer busy windows are left out of the trace pool.
    #[arg(long, default_value_t = 8)]
    pub min_busy_windows: usize,
    /// Weighted-IOPS write weights at p95, p99, p99.9 (the paper: 3, 6, 20).
    #[arg(long, value_delimiter = ',', default_value = "3,6,20")]
    pub write_weights: Vec<f64>,
    /// How the baselines choose a type for a new unit: random (the paper's
    /// random placement), cheapest, or least-cost (Regulator's rule).
    #[arg(long, default_value = "random")]
    pub baseline_new_unit: NewUnitPolicy,
    /// Most units one tenant may be striped over.
    #[arg(long, default_value_t = 64)]
    pub max_stripes: usize,
    /// Smallest tenant peak (4 KiB I/O per second, reads + writes).
    #[arg(long, default_value_t = 2000.0)]
    pub size_min: f64,
    /// Largest tenant peak; sizes are log-uniform in between.
    #[arg(long, default_value_t = 40000.0)]
    pub size_max: f64,
    /// Write the summary rows as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Draw disks used per method as an SVG bar chart.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Place exactly these tenants, in order, with Regulator's placement (no
    /// synthetic populations, no baselines): a JSON array of
    /// `{"curve": [[w, r], ...], "percentile": "p99"}`, e.g. the requests a
    /// fleet was given, to compare the units it used.
    #[arg(long, value_name = "FILE")]
    pub requests: Option<PathBuf>,
}

/// `--requests`: what placing a given list of tenants used.
#[derive(Debug, Serialize)]
struct RequestsReport {
    requests: usize,
    placed: usize,
    rejected: Vec<String>,
    units: usize,
    per_type: BTreeMap<String, usize>,
    cost: f64,
}

fn run_requests(a: &PlacementArgs, catalog: Catalog, path: &Path) -> Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --requests {}", path.display()))?;
    let reqs: Vec<sla::placement::TenantSla> = serde_json::from_str(&text).with_context(|| {
        format!(
            "--requests {}: expected a JSON array of {{\"curve\": [[w, r], ...], \"percentile\": \"p99\"}}",
            path.display()
        )
    })?;
    let mut cfg = sla::placement::PlacerConfig::regulator(a.metric);
    cfg.max_stripes = a.max_stripes;
    let mut p = sla::placement::Placer::new(catalog, cfg);
    let mut rejected = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        if let Err(e) = p.place(sla::placement::TenantId(i as u64), r.clone()) {
            rejected.push(format!("request {i}: {e}"));
        }
    }
    let u = p.usage();
    let report = RequestsReport {
        requests: reqs.len(),
        placed: reqs.len() - rejected.len(),
        rejected,
        units: u.units,
        per_type: u.per_type,
        cost: u.cost,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} of {} tenants placed on {} units (cost {:.1})",
            report.placed, report.requests, report.units, report.cost
        );
        for (t, n) in &report.per_type {
            println!("  {t}: {n}");
        }
        for r in &report.rejected {
            println!("  rejected {r}");
        }
    }
    Ok(())
}

/// One curve shape taken from a trace volume.
#[derive(Debug, Clone, Serialize)]
struct PoolEntry {
    name: String,
    file: String,
    class: Workload,
    read_fraction: f64,
    busy_windows: usize,
    window_ms: f64,
    /// Peak reads + writes before rescaling (4 KiB I/O per second).
    peak: f64,
    #[serde(skip)]
    curve: Curve,
}

/// One population's tenants.
struct Population {
    group: String,
    classes: Vec<Workload>,
    curves: Vec<Curve>,
}

/// Summary of one (group, percentile, method) cell over the trials.
#[derive(Debug, Clone, Serialize)]
struct Row {
    source: String,
    group: String,
    percentile: Percentile,
    method: Method,
    trials: usize,
    tenants: usize,
    units_mean: f64,
    disks_mean: f64,
    disks_min: u64,
    disks_max: u64,
    cost_mean: f64,
    striped_mean: f64,
    rejected_total: usize,
    /// Units per type, summed over trials.
    per_type: String,
    /// Disks used relative to SLA curves with random placement (mean over
    /// mean): the paper's "IOPS wastes about 4x" and "curves improve on
    /// weighted IOPS by 41 % / 15 %" compare against this. None (JSON null,
    /// an empty CSV field) where random placement used no disk.
    vs_sla_random: Option<f64>,
    /// Disks used relative to Regulator (mean over mean); None where
    /// Regulator used no disk.
    vs_regulator: Option<f64>,
    /// Share of this method's disks Regulator saves, percent; None where this
    /// method used no disk.
    regulator_saves_pct: Option<f64>,
}

/// One trial of one cell.
#[derive(Debug, Clone, Serialize)]
struct TrialResult {
    trial: usize,
    group: String,
    percentile: Percentile,
    #[serde(flatten)]
    outcome: Outcome,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    source: &'a str,
    tenants: usize,
    trials: usize,
    seed: u64,
    metric: Metric,
    baseline_new_unit: NewUnitPolicy,
    write_weights: &'a BTreeMap<Percentile, f64>,
    catalogue: &'a Catalog,
    trace_pool: &'a [PoolEntry],
    rows: &'a [Row],
    trial_results: &'a [TrialResult],
}

/// Reads a unit catalogue, naming the file in every error.
fn load_catalog(path: &Path) -> Result<Catalog> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("units file {}", path.display()))?;
    let json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let parsed = if json {
        Catalog::from_json_str(&text)
    } else {
        Catalog::from_toml_str(&text)
    };
    parsed.with_context(|| format!("units file {}", path.display()))
}

/// The curve shapes of every trace volume with at least `min_busy` busy
/// windows.
fn trace_pool(a: &PlacementArgs) -> Result<Vec<PoolEntry>> {
    let mut pool = Vec::new();
    for spec in &a.traces {
        let reqs = trace::open_spec(spec).with_context(|| format!("trace {spec}"))?;
        let mut by_volume: BTreeMap<u32, Vec<IoEvent>> = BTreeMap::new();
        let (mut t0, mut t1) = (u64::MAX, 0u64);
        for r in reqs {
            let r = r.with_context(|| format!("trace {spec}"))?;
            t0 = t0.min(r.time_ns);
            t1 = t1.max(r.time_ns);
            by_volume.entry(r.volume).or_default().push(IoEvent {
                time_ns: r.time_ns,
                write: r.op == trace::Op::Write,
                bytes: r.len,
            });
        }
        ensure!(!by_volume.is_empty(), "trace {spec}: no requests");
        let window_ns = match a.window_ms {
            // Checked by `validate`: at least MIN_WINDOW_MS.
            Some(ms) => (ms * 1e6).round() as u64,
            None => ((t1 - t0) / a.windows.max(1)).max(1),
        };
        let windows = (t1 - t0) / window_ns + 1;
        if windows > MAX_WINDOWS {
            let flag = match a.window_ms {
                Some(ms) => format!("--window-ms {ms}"),
                // A span of fewer nanoseconds than --windows: 1 ns windows.
                None => format!("--windows {} (windows of {window_ns} ns)", a.windows),
            };
            bail!(
                "trace {spec}: {flag} makes {windows} windows over its span of {:.3} s, \
                 more than {MAX_WINDOWS}; use --window-ms {} or more",
                (t1 - t0) as f64 / 1e9,
                (((t1 - t0) / MAX_WINDOWS + 1) as f64 / 1e6).max(MIN_WINDOW_MS)
            );
        }
        let file = Path::new(spec.split_once(':').map_or(spec.as_str(), |s| s.1))
            .file_name()
            .map_or_else(|| spec.clone(), |f| f.to_string_lossy().into_owned());
        let volumes = by_volume.len();
        let mut left_out = 0;
        for (volume, events) in by_volume {
            let s = throughput_samples(events, window_ns)
                .with_context(|| format!("trace {spec} volume {volume}"))?;
            if s.busy_windows < a.min_busy_windows {
                left_out += 1;
                continue;
            }
            let curve = Curve::from_samples(&s.samples)
                .with_context(|| format!("trace {spec} volume {volume}: curve"))?;
            let peak = peak_total(&curve);
            if peak <= 0.0 {
                continue;
            }
            pool.push(PoolEntry {
                name: format!("{file}:{volume}"),
                file: spec.clone(),
                class: Workload::classify(s.read_fraction),
                read_fraction: s.read_fraction,
                busy_windows: s.busy_windows,
                window_ms: window_ns as f64 / 1e6,
                peak,
                curve,
            });
        }
        if left_out > 0 {
            eprintln!(
                "trace {spec}: left out {left_out} of {volumes} volume(s) with fewer than {} busy windows of {:.3} ms",
                a.min_busy_windows,
                window_ns as f64 / 1e6
            );
        }
    }
    ensure!(
        !pool.is_empty(),
        "no trace volume has at least {} busy windows (lower --min-busy-windows or use a smaller --window-ms)",
        a.min_busy_windows
    );
    Ok(pool)
}

/// The synthetic groups; the position is the group's stable id in seeds.
const GROUPS: [&str; 4] = ["paper", "read", "write", "mixed"];

fn group_mix(group: &str, n: usize) -> Result<Vec<(Workload, usize)>> {
    Ok(match group {
        "paper" => vec![
            (Workload::ReadIntensive, n / 3),
            (Workload::WriteIntensive, n / 3),
            (Workload::Mixed, n - 2 * (n / 3)),
        ],
        "read" => vec![(Workload::ReadIntensive, n)],
        "write" => vec![(Workload::WriteIntensive, n)],
        "mixed" => vec![(Workload::Mixed, n)],
        other => bail!("unknown group {other:?}: expected paper, read, write or mixed"),
    })
}

/// The populations of one trial. The same population is used at every
/// percentile, so differences across percentiles come from the devices.
fn populations(
    a: &PlacementArgs,
    params: &GenParams,
    pool: &[PoolEntry],
    trial: usize,
) -> Result<Vec<Population>> {
    let mut out = Vec::new();
    if !pool.is_empty() {
        // Each trace file is equally likely, then each of its volumes: a
        // file with many volumes (tpcc: 16) must not crowd out the others.
        let mut files: Vec<&str> = Vec::new();
        for e in pool {
            if !files.contains(&e.file.as_str()) {
                files.push(&e.file);
            }
        }
        let mut rng = SplitMix64::derive(a.seed, &[trial as u64, 1000]);
        let (mut classes, mut curves) = (Vec::new(), Vec::new());
        for _ in 0..a.tenants {
            let file = files[rng.below(files.len())];
            let vols: Vec<&PoolEntry> = pool.iter().filter(|e| e.file == file).collect();
            let e = vols[rng.below(vols.len())];
            let size = rng.log_uniform(params.size_min, params.size_max);
            classes.push(e.class);
            curves.push(scale_to_peak(&e.curve, size).context("rescaling a trace curve")?);
        }
        out.push(Population {
            group: "traces".into(),
            classes,
            curves,
        });
        return Ok(out);
    }
    for g in &a.groups {
        let mix = group_mix(g, a.tenants)?;
        let gi = GROUPS.iter().position(|x| x == g).unwrap_or(GROUPS.len());
        let mut rng = SplitMix64::derive(a.seed, &[trial as u64, gi as u64]);
        let tenants = synthetic_population(&mix, params, &mut rng);
        out.push(Population {
            group: g.clone(),
            classes: tenants.iter().map(|t| t.0).collect(),
            curves: tenants.into_iter().map(|t| t.1).collect(),
        });
    }
    Ok(out)
}

/// The shortest `--window-ms`: 1 µs (the finest traces stamp requests in
/// 100 ns units; a shorter window holds at most one request).
const MIN_WINDOW_MS: f64 = 0.001;

fn validate(a: &PlacementArgs) -> Result<()> {
    ensure!(a.tenants > 0, "--tenants must be at least 1");
    ensure!(
        (1..=MAX_WINDOWS).contains(&a.windows),
        "--windows must be from 1 to {MAX_WINDOWS}, got {}",
        a.windows
    );
    if let Some(ms) = a.window_ms {
        ensure!(
            ms.is_finite() && ms >= MIN_WINDOW_MS,
            "--window-ms must be at least {MIN_WINDOW_MS} (1 µs), got {ms}"
        );
    }
    ensure!(a.trials > 0, "--trials must be at least 1");
    ensure!(!a.percentiles.is_empty(), "--percentiles is empty");
    ensure!(
        a.write_weights.len() == 3,
        "--write-weights needs three weights (p95, p99, p99.9), got {}",
        a.write_weights.len()
    );
    for &w in &a.write_weights {
        ensure!(
            w.is_finite() && w > 0.0,
            "--write-weights must be finite and positive, got {w}"
        );
    }
    ensure!(
        a.size_min.is_finite() && a.size_min > 0.0 && a.size_max > a.size_min,
        "need 0 < --size-min < --size-max, got {} and {}",
        a.size_min,
        a.size_max
    );
    ensure!(a.max_stripes > 0, "--max-stripes must be at least 1");
    if a.traces.is_empty() {
        ensure!(!a.groups.is_empty(), "--groups is empty");
        for g in &a.groups {
            group_mix(g, 1)?;
        }
    }
    Ok(())
}

/// Runs the experiment.
pub fn run(a: &PlacementArgs) -> Result<()> {
    validate(a)?;
    let catalog = match &a.units {
        Some(p) => load_catalog(p)?,
        None => Catalog::builtin(),
    };
    if let Some(path) = &a.requests {
        return run_requests(a, catalog, path);
    }
    for &p in &a.percentiles {
        ensure!(
            catalog.offering(p).next().is_some(),
            "no unit type in the catalogue offers a {p} curve (types: {}); \
             add one or drop {p} from --percentiles",
            catalog
                .types()
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let cfg = ExperimentConfig {
        metric: a.metric,
        write_weights: Percentile::ALL
            .into_iter()
            .zip(a.write_weights.iter().copied())
            .collect(),
        baseline_new_unit: a.baseline_new_unit,
        max_stripes: a.max_stripes,
    };
    let params = GenParams {
        size_min: a.size_min,
        size_max: a.size_max,
        ..GenParams::default()
    };
    let pool = if a.traces.is_empty() {
        Vec::new()
    } else {
        trace_pool(a)?
    };
    let source = if pool.is_empty() {
        "synthetic"
    } else {
        "traces"
    };

    let mut trials: Vec<TrialResult> = Vec::new();
    let mut class_counts: BTreeMap<(String, Workload), usize> = BTreeMap::new();
    for t in 0..a.trials {
        for pop in populations(a, &params, &pool, t)? {
            let gi = GROUPS
                .iter()
                .position(|&g| g == pop.group)
                .unwrap_or(GROUPS.len());
            for c in &pop.classes {
                *class_counts.entry((pop.group.clone(), *c)).or_default() += 1;
            }
            for &p in &a.percentiles {
                for (mi, m) in Method::ALL.into_iter().enumerate() {
                    // Streams keyed by stable ids, so a run of a subset of
                    // groups or percentiles reproduces the full run's cells.
                    let pi = Percentile::ALL.iter().position(|&x| x == p).unwrap_or(0);
                    let seed =
                        SplitMix64::derive(a.seed, &[t as u64, gi as u64, pi as u64, mi as u64])
                            .next_u64();
                    let outcome = run_method(m, &pop.curves, p, &catalog, &cfg, seed)
                        .with_context(|| format!("group {}, {p}", pop.group))?;
                    trials.push(TrialResult {
                        trial: t,
                        group: pop.group.clone(),
                        percentile: p,
                        outcome,
                    });
                }
            }
        }
    }
    let rows = summarize(source, a.tenants, &trials);

    if let Some(path) = &a.csv {
        write_csv(path, &rows).with_context(|| format!("write {}", path.display()))?;
    }
    if let Some(path) = &a.plot {
        let title = format!(
            "Disks used by {} tenants ({source}, mean of {} trials; bars: min-max)",
            a.tenants, a.trials
        );
        bar_chart(path, &title, &rows).with_context(|| format!("write {}", path.display()))?;
    }
    if a.json {
        let report = Report {
            source,
            tenants: a.tenants,
            trials: a.trials,
            seed: a.seed,
            metric: a.metric,
            baseline_new_unit: a.baseline_new_unit,
            write_weights: &cfg.write_weights,
            catalogue: &catalog,
            trace_pool: &pool,
            rows: &rows,
            trial_results: &trials,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(a, source, &catalog, &rows, &pool, &class_counts);
    }
    Ok(())
}

/// One row per (group, percentile, method), in run order.
fn summarize(source: &str, tenants: usize, trials: &[TrialResult]) -> Vec<Row> {
    let mut keys: Vec<(String, Percentile, Method)> = Vec::new();
    for t in trials {
        let k = (t.group.clone(), t.percentile, t.outcome.method);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let cell = |g: &str, p: Percentile, m: Method| -> Vec<&Outcome> {
        trials
            .iter()
            .filter(|t| t.group == g && t.percentile == p && t.outcome.method == m)
            .map(|t| &t.outcome)
            .collect()
    };
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    keys.iter()
        .map(|(g, p, m)| {
            let os = cell(g, *p, *m);
            let disks: Vec<f64> = os.iter().map(|o| o.usage.disks as f64).collect();
            let disks_of = |m: Method| {
                mean(
                    &cell(g, *p, m)
                        .iter()
                        .map(|o| o.usage.disks as f64)
                        .collect::<Vec<_>>(),
                )
            };
            let (dm, rm, sm) = (
                mean(&disks),
                disks_of(Method::Regulator),
                disks_of(Method::SlaRandom),
            );
            let mut per_type: BTreeMap<&str, usize> = BTreeMap::new();
            for o in &os {
                for (name, n) in &o.usage.per_type {
                    *per_type.entry(name).or_default() += n;
                }
            }
            Row {
                source: source.into(),
                group: g.clone(),
                percentile: *p,
                method: *m,
                trials: os.len(),
                tenants,
                units_mean: mean(&os.iter().map(|o| o.usage.units as f64).collect::<Vec<_>>()),
                disks_mean: dm,
                disks_min: os.iter().map(|o| o.usage.disks).min().unwrap_or(0),
                disks_max: os.iter().map(|o| o.usage.disks).max().unwrap_or(0),
                cost_mean: mean(&os.iter().map(|o| o.usage.cost).collect::<Vec<_>>()),
                striped_mean: mean(&os.iter().map(|o| o.striped as f64).collect::<Vec<_>>()),
                rejected_total: os.iter().map(|o| o.rejected).sum(),
                per_type: per_type
                    .iter()
                    .map(|(n, c)| format!("{n}:{c}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                vs_sla_random: (sm > 0.0).then(|| dm / sm),
                vs_regulator: (rm > 0.0).then(|| dm / rm),
                regulator_saves_pct: (dm > 0.0).then(|| 100.0 * (1.0 - rm / dm)),
            }
        })
        .collect()
}

fn write_csv(path: &Path, rows: &[Row]) -> Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    for r in rows {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}

fn print_table(
    a: &PlacementArgs,
    source: &str,
    catalog: &Catalog,
    rows: &[Row],
    pool: &[PoolEntry],
    class_counts: &BTreeMap<(String, Workload), usize>,
) {
    println!(
        "Regulator §6.1 placement ({source} tenants): {} tenants per population, {} trial(s) from seed {}, \
         metric {}, baselines' new units: {}",
        a.tenants, a.trials, a.seed, a.metric, a.baseline_new_unit
    );
    if !pool.is_empty() {
        println!("trace curve shapes ({}):", pool.len());
        for e in pool {
            println!(
                "  {:<40} {:<5} reads {:>5.1}%  busy windows {:>4} of {:.3} ms  peak {:.0} I/O/s",
                e.name,
                e.class.name(),
                100.0 * e.read_fraction,
                e.busy_windows,
                e.window_ms,
                e.peak
            );
        }
    }
    let mut groups: Vec<&str> = Vec::new();
    for r in rows {
        if !groups.contains(&r.group.as_str()) {
            groups.push(&r.group);
        }
    }
    for g in groups {
        let mix: Vec<String> = Workload::ALL
            .iter()
            .filter_map(|c| {
                class_counts.get(&(g.to_string(), *c)).map(|&n| {
                    let mean = n as f64 / a.trials as f64;
                    if n % a.trials == 0 {
                        format!("{mean:.0} {}", c.name())
                    } else {
                        format!("{mean:.1} {}", c.name())
                    }
                })
            })
            .collect();
        println!("group {g}: {} (mean per trial)", mix.join(", "));
    }
    println!();
    println!("Disks used (mean over trials, min-max) and Regulator's saving against each method:");
    println!(
        "{:<7} {:<6} {:>18} {:>18} {:>18} {:>18}   {:>8} {:>8} {:>8}",
        "group",
        "pct",
        "iops",
        "weighted-iops",
        "sla-random",
        "regulator",
        "vs iops",
        "vs w-iops",
        "vs rand"
    );
    let mut seen: Vec<(String, Percentile)> = Vec::new();
    for r in rows {
        let key = (r.group.clone(), r.percentile);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let get = |m: Method| {
            rows.iter()
                .find(|x| x.group == r.group && x.percentile == r.percentile && x.method == m)
        };
        let cell = |m: Method| {
            get(m).map_or("-".to_string(), |x| {
                format!("{:.1} ({}-{})", x.disks_mean, x.disks_min, x.disks_max)
            })
        };
        let save = |m: Method| {
            get(m).map_or("-".to_string(), |x| {
                x.regulator_saves_pct
                    .map_or("n/a".to_string(), |v| format!("{v:.1}%"))
            })
        };
        println!(
            "{:<7} {:<6} {:>18} {:>18} {:>18} {:>18}   {:>8} {:>8} {:>8}",
            r.group,
            r.percentile.name(),
            cell(Method::Iops),
            cell(Method::WeightedIops),
            cell(Method::SlaRandom),
            cell(Method::Regulator),
            save(Method::Iops),
            save(Method::WeightedIops),
            save(Method::SlaRandom)
        );
    }
    println!();
    println!(
        "The paper's comparisons (disks of one method over another's; paper: IOPS about 4x SLA curves; \
         curves +41% (p95) / +15% (p99) over weighted IOPS; Regulator +44% at p99.9):"
    );
    println!(
        "{:<7} {:<6} {:>22} {:>22} {:>22} {:>22}",
        "group",
        "pct",
        "iops / sla-random",
        "w-iops / sla-random",
        "sla-random / regul.",
        "iops / regulator"
    );
    let mut seen: Vec<(String, Percentile)> = Vec::new();
    for r in rows {
        let key = (r.group.clone(), r.percentile);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let get = |m: Method| {
            rows.iter()
                .find(|x| x.group == r.group && x.percentile == r.percentile && x.method == m)
        };
        let ratio = |m: Method, against_regulator: bool| {
            get(m).map_or("-".to_string(), |x| {
                let v = if against_regulator {
                    x.vs_regulator
                } else {
                    x.vs_sla_random
                };
                v.map_or("n/a".to_string(), |v| format!("{v:.2}x"))
            })
        };
        println!(
            "{:<7} {:<6} {:>22} {:>22} {:>22} {:>22}",
            r.group,
            r.percentile.name(),
            ratio(Method::Iops, false),
            ratio(Method::WeightedIops, false),
            ratio(Method::SlaRandom, true),
            ratio(Method::Iops, true)
        );
    }
    let rejected: usize = rows.iter().map(|r| r.rejected_total).sum();
    if rejected > 0 {
        println!("\n{rejected} tenant placement(s) rejected by admission control (see --json).");
    }
    let none_placed: Vec<String> = rows
        .iter()
        .filter(|r| r.rejected_total >= r.trials * r.tenants)
        .map(|r| format!("{} {} {}", r.group, r.percentile.name(), r.method))
        .collect();
    if !none_placed.is_empty() {
        println!(
            "No tenant was placed (every one rejected, so no disk used and the ratios are n/a) in: {}.",
            none_placed.join(", ")
        );
    }
    let types: Vec<String> = rows
        .iter()
        .filter(|r| catalog.offering(r.percentile).count() > 1)
        .map(|r| {
            format!(
                "  {} {} {}: {}",
                r.group,
                r.percentile.name(),
                r.method,
                r.per_type
            )
        })
        .collect();
    if !types.is_empty() {
        println!("\nUnits per type (summed over trials) where the catalogue offers several:");
        for t in types {
            println!("{t}");
        }
    }
}

/// Grouped bars: one cluster per (group, percentile), one bar per method
/// (mean disks), with a min-max whisker.
fn bar_chart(path: &Path, title: &str, rows: &[Row]) -> Result<()> {
    let mut clusters: Vec<(String, Percentile)> = Vec::new();
    for r in rows {
        let k = (r.group.clone(), r.percentile);
        if !clusters.contains(&k) {
            clusters.push(k);
        }
    }
    ensure!(!clusters.is_empty(), "nothing to plot");
    let labels: Vec<String> = clusters
        .iter()
        .map(|(g, p)| format!("{g} {}", p.name()))
        .collect();
    let ymax = rows.iter().map(|r| r.disks_max as f64).fold(1.0, f64::max) * 1.1;
    let n = clusters.len() as f64;
    let width = (160.0 + 110.0 * n).clamp(700.0, 1800.0) as u32;
    let root = SVGBackend::new(path, (width, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5f64..n - 0.5, 0f64..ymax)?;
    let fmt = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
            labels[i as usize].clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(clusters.len())
        .x_label_formatter(&fmt)
        .y_desc("disks used")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    let palette = [
        RGBColor(214, 39, 40),
        RGBColor(255, 127, 14),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
    ];
    let bar = 0.2;
    for (mi, m) in Method::ALL.into_iter().enumerate() {
        let color = palette[mi % palette.len()];
        let off = (mi as f64 - 1.5) * bar;
        let mine: Vec<(f64, &Row)> = clusters
            .iter()
            .enumerate()
            .filter_map(|(ci, (g, p))| {
                rows.iter()
                    .find(|r| &r.group == g && r.percentile == *p && r.method == m)
                    .map(|r| (ci as f64 + off, r))
            })
            .collect();
        chart
            .draw_series(mine.iter().map(|&(x, r)| {
                Rectangle::new(
                    [
                        (x - bar / 2.0 * 0.9, 0.0),
                        (x + bar / 2.0 * 0.9, r.disks_mean),
                    ],
                    color.filled(),
                )
            }))?
            .label(m.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
        chart.draw_series(mine.iter().map(|&(x, r)| {
            PathElement::new(
                vec![(x, r.disks_min as f64), (x, r.disks_max as f64)],
                BLACK.stroke_width(1),
            )
        }))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_errors_name_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("units.toml");
        std::fs::write(&p, "[[unit]]\nname = \"x\"\ncost = 1\nspeed = 3\n").unwrap();
        let e = format!("{:#}", load_catalog(&p).unwrap_err());
        assert!(
            e.contains("units.toml") && e.contains("unknown field `speed`"),
            "{e}"
        );
        let j = d.path().join("units.json");
        std::fs::write(&j, Catalog::builtin().unit.len().to_string()).unwrap();
        let e = format!("{:#}", load_catalog(&j).unwrap_err());
        assert!(e.contains("units.json") && e.contains("JSON"), "{e}");
        let e = format!(
            "{:#}",
            load_catalog(&d.path().join("none.toml")).unwrap_err()
        );
        assert!(e.contains("none.toml"), "{e}");
    }

    #[test]
    fn group_mixes() {
        assert_eq!(
            group_mix("paper", 300).unwrap(),
            vec![
                (Workload::ReadIntensive, 100),
                (Workload::WriteIntensive, 100),
                (Workload::Mixed, 100)
            ]
        );
        assert_eq!(
            group_mix("paper", 10)
                .unwrap()
                .iter()
                .map(|x| x.1)
                .sum::<usize>(),
            10
        );
        assert!(group_mix("all", 3).is_err());
    }
}
