//! `flexssd sim harvest`: the BlockFlex fleet simulation of the paper's §5.2
//! (Figures 15–17) — harvest tenants matched against regular tenants' predicted
//! harvestable capacity and bandwidth (sold) and against unsold server channels
//! (unsold), through the `harvest` crate's pool, on a virtual clock.
//!
//! The simulator is the `fleet` crate; this module reads the traces, drives it with
//! a progress bar, and writes the table, JSON, CSV and an SVG of before/after bars.
//! Every output says which parts are synthetic (the fitted generators, the harvest
//! tenants) and which are real (the cluster excerpts, the Azure arrivals).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use clock::{Clock, SEC};
use fleet::{Fleet, FleetConfig, PredictorKind, Scenario, ScenarioReport, UtilStats};
use plotters::prelude::*;
use serde::Serialize;

/// Options of `flexssd sim harvest`.
#[derive(Debug, Args)]
pub struct HarvestArgs {
    /// Regular tenants (VMs with one vSSD each) in the sold scenario (paper: 4,000).
    #[arg(long, default_value_t = 4000)]
    pub regular: usize,
    /// Harvest tenants arriving over the run (paper: 60,000).
    #[arg(long, default_value_t = 60_000)]
    pub harvest: usize,
    /// Measured hours (after the warm-up).
    #[arg(long, default_value_t = 168)]
    pub hours: u64,
    /// Hours of warm-up: predictors observe, nobody harvests.
    #[arg(long, default_value_t = 24)]
    pub warmup_hours: u64,
    /// Master seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Predictor of regular vSSDs' harvestable resources: oracle, last, histogram, or the daemon's own lending policies fixed, lstm and quantile (crates/lend; the learned ones train per home: small fleets). Several, comma-separated, run the sold scenario once per predictor on the same fleet (see --per-predictor-csv).
    #[arg(long, default_value = "last")]
    pub predictor: String,
    /// Predictor of unsold servers' harvestable channels (paper §4.4.1: histogram), or the daemon's unsold policies unsold-histogram and unsold-fixed (groups of 4 channels).
    #[arg(long, default_value = "histogram")]
    pub unsold_predictor: String,
    /// Servers in the unsold scenario (paper: 1,400).
    #[arg(long, default_value_t = 1400)]
    pub unsold_hosts: usize,
    /// Mean share of the unsold servers' channels sold to Azure arrivals.
    #[arg(long, default_value_t = 0.7)]
    pub unsold_load: f64,
    /// Which gSSD best fit gives a demand among those of the smallest sufficient
    /// size: the nearest sufficient expiry, or the paper's farthest first.
    #[arg(long, default_value = "nearest", value_parser = ["nearest", "farthest"])]
    pub expiry_order: String,
    /// Turn away a demand that no single gSSD covers instead of splitting it
    /// over several (biggest first, all or nothing, as the daemon does).
    #[arg(long)]
    pub no_split: bool,
    /// Scenarios to run: sold, unsold or both.
    #[arg(long, default_value = "both", value_parser = ["sold", "unsold", "both"])]
    pub scenario: String,
    /// Directory with the Alibaba 2018 and Google 2011 excerpts.
    #[arg(
        long = "cluster-traces",
        value_name = "DIR",
        default_value = "../shared/traces/cluster"
    )]
    pub cluster_traces: PathBuf,
    /// Directory with the Azure V1 arrivals and flavour map.
    #[arg(long, value_name = "DIR", default_value = "../shared/traces/azure")]
    pub azure: PathBuf,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write the utilisation summary as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write each VM's and SSD's average utilisation (for CDFs) as CSV.
    #[arg(long, value_name = "FILE")]
    pub units_csv: Option<PathBuf>,
    /// Write before/after bars like Figures 15–17 as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Write one row per sold-scenario predictor (capacity-hours harvested,
    /// reclamations, migrations, gains) as CSV.
    #[arg(long, value_name = "FILE")]
    pub per_predictor_csv: Option<PathBuf>,
    /// Plot the sold-scenario predictors side by side as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub per_predictor_plot: Option<PathBuf>,
    /// Settings of the learned predictors (`lstm`, `quantile`,
    /// `quantile-prior`): a TOML `predict::PredictorConfig`, as the daemon's
    /// `[harvest.predictor]` and `sim predict --config` take it; `--predictor`
    /// picks the model. Default: the built-in settings.
    #[arg(long, value_name = "FILE")]
    pub predictor_config: Option<PathBuf>,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Output<'a> {
    note: &'static str,
    config: &'a FleetConfig,
    /// The learned predictors' settings, when `--predictor-config` gave them.
    #[serde(skip_serializing_if = "Option::is_none")]
    predictor_config: Option<&'a predict::PredictorConfig>,
    provenance: &'a fleet::Provenance,
    scenarios: &'a [ScenarioReport],
    sim_seconds: f64,
}

const NOTE: &str = "harvest tenants and most regular tenants are SYNTHETIC (generators fitted to \
the real Alibaba 2018 / Google 2011 excerpts and to the paper's stated demand ranges); \
the first regular tenants replay the real series; unsold servers replay real Azure V1 \
arrivals with synthetic lifetimes and placement";

/// Runs `flexssd sim harvest`. The simulation runs on its own virtual clock;
/// `wall` only times the whole run for the "in N s" line and `sim_seconds`.
pub fn run(a: &HarvestArgs, wall: &dyn Clock) -> Result<()> {
    let preds: Vec<PredictorKind> = a
        .predictor
        .split(',')
        .map(|p| p.trim().parse())
        .collect::<Result<_, _>>()?;
    let upred: PredictorKind = a.unsold_predictor.parse()?;
    let learned: Option<predict::PredictorConfig> = match &a.predictor_config {
        Some(p) => Some(
            toml::from_str(
                &std::fs::read_to_string(p)
                    .with_context(|| format!("read --predictor-config {}", p.display()))?,
            )
            .with_context(|| format!("parse --predictor-config {}", p.display()))?,
        ),
        None => None,
    };
    if let (Some(c), Some(p)) = (&learned, &a.predictor_config) {
        c.validate()
            .with_context(|| format!("--predictor-config {}", p.display()))?;
    }
    let cfg = FleetConfig {
        regular: a.regular,
        harvest: a.harvest,
        hours: a.hours,
        warmup_hours: a.warmup_hours,
        seed: a.seed,
        unsold_hosts: a.unsold_hosts,
        unsold_load: a.unsold_load,
        harvest_cfg: fleet::HarvestConfig {
            expiry_order: a.expiry_order.parse()?,
            ..FleetConfig::default().harvest_cfg
        },
        split: !a.no_split,
        ..FleetConfig::default()
    };
    cfg.validate()?;
    let sold = preds.iter().map(|&p| (Scenario::Sold, p));
    let scenarios: Vec<(Scenario, PredictorKind)> = match a.scenario.as_str() {
        "sold" => sold.collect(),
        "unsold" => vec![(Scenario::Unsold, upred)],
        _ => sold.chain([(Scenario::Unsold, upred)]).collect(),
    };
    let inputs = fleet::load(&a.cluster_traces, &a.azure)?;
    let t0 = wall.now();
    let fl = Fleet::build(&cfg, &inputs)?;
    let scenarios: Vec<_> = scenarios
        .into_iter()
        .filter(|(s, _)| !fl.population(*s).homes.is_empty())
        .collect();
    let bar = crate::progress::bar(
        (fl.total_steps() * scenarios.len()) as u64,
        "{msg:>8} [{bar:40}] {pos}/{len} steps of 5 min ({eta} left)",
        a.json,
    );
    let mut reports = Vec::new();
    for (s, k) in scenarios {
        bar.set_message(s.name());
        let mut p = fl.predictor_with(k, s, learned.as_ref().unwrap_or(&Default::default()))?;
        reports.push(fl.run(s, &mut p, &mut || bar.inc(1))?);
    }
    bar.finish_and_clear();
    let secs = wall.now().saturating_sub(t0) as f64 / SEC as f64;
    if crate::progress::interactive(a.json) {
        eprintln!(
            "simulated {} harvest tenants against {} regular tenants and {} unsold servers, {} h, in {secs:.2} s",
            cfg.harvest, cfg.regular, cfg.unsold_hosts, cfg.hours
        );
    }
    if a.json {
        let out = Output {
            note: NOTE,
            config: &cfg,
            predictor_config: learned.as_ref(),
            provenance: fl.provenance(),
            scenarios: &reports,
            sim_seconds: secs,
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&fl, &reports);
    }
    if let Some(p) = &a.csv {
        write_csv(p, &reports)?;
    }
    if let Some(p) = &a.units_csv {
        write_units(p, &reports)?;
    }
    if let Some(p) = &a.plot {
        plot(p, &reports)?;
    }
    let solds: Vec<&ScenarioReport> = reports
        .iter()
        .filter(|r| r.scenario == Scenario::Sold)
        .collect();
    if let Some(p) = &a.per_predictor_csv {
        write_per_predictor(p, &solds)?;
    }
    if let Some(p) = &a.per_predictor_plot {
        plot_per_predictor(p, &solds)?;
    }
    Ok(())
}

/// The rows of a report: (unit, resource, stats).
fn rows(r: &ScenarioReport) -> Vec<(&'static str, &'static str, UtilStats)> {
    let mut v = Vec::new();
    if r.scenario == Scenario::Sold {
        v.push(("vm", "capacity", r.vm_capacity));
        v.push(("vm", "bandwidth", r.vm_bandwidth));
    }
    v.push(("ssd", "capacity", r.ssd_capacity));
    v.push(("ssd", "bandwidth", r.ssd_bandwidth));
    v
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

fn print_table(fl: &Fleet, reports: &[ScenarioReport]) {
    let p = fl.provenance();
    println!("# {NOTE}");
    println!(
        "# regular tenants: {} real, {} synthetic; Azure arrivals kept {:.3}, {} turned away",
        p.real_regular, p.synthetic_regular, p.azure_keep, p.azure_turned_away
    );
    for r in reports {
        println!(
            "\n{} ({} homes on {} SSDs, predictor {}):",
            r.scenario.name(),
            r.homes,
            r.ssds,
            r.predictor
        );
        println!(
            "  {:<4} {:<9} {:<7} {:>6}  {:>7} {:>7} {:>6}  {:>7} {:>7} {:>6}",
            "unit", "resource", "subset", "units", "avg", "after", "x", "max", "after", "x"
        );
        for (u, res, s) in rows(r) {
            for (sub, n, ab, aa, mb, ma) in [
                (
                    "all",
                    s.units,
                    s.avg_before,
                    s.avg_after,
                    s.max_before,
                    s.max_after,
                ),
                (
                    "<60%",
                    s.under60_units,
                    s.under60_avg_before,
                    s.under60_avg_after,
                    s.under60_max_before,
                    s.under60_max_after,
                ),
            ] {
                println!(
                    "  {u:<4} {res:<9} {sub:<7} {n:>6}  {:>6.1}% {:>6.1}% {:>5.2}x  {:>6.1}% {:>6.1}% {:>5.2}x",
                    100.0 * ab,
                    100.0 * aa,
                    ratio(aa, ab),
                    100.0 * mb,
                    100.0 * ma,
                    ratio(ma, mb)
                );
            }
        }
        let c = &r.counters;
        println!(
            "  requests {} served {} (split over several gSSDs {}) unserved {} completed {} running {}",
            c.requests, c.served, c.split_served, c.unserved, c.completed, c.running_at_end
        );
        println!(
            "  capacity harvested {} GB-hours granted, {} GB-hours used by tenants",
            c.capacity_gb_hours, c.used_gb_hours
        );
        println!(
            "  gSSDs created {} expired {} back to pool {} erased on release {} taken back unassigned {}",
            c.gssds_created, c.expired, c.returned_to_pool, c.erased_on_release, c.reclaimed_unassigned
        );
        println!(
            "  early reclamations {} migrations {} exceptions {}",
            c.reclamations, c.migrations, c.exceptions
        );
    }
}

fn write_csv(path: &Path, reports: &[ScenarioReport]) -> Result<()> {
    let mut w =
        csv::Writer::from_path(path).with_context(|| format!("create {}", path.display()))?;
    w.write_record([
        "scenario",
        "predictor",
        "unit",
        "resource",
        "subset",
        "units",
        "avg_before",
        "avg_after",
        "max_before",
        "max_after",
        "requests",
        "served",
        "split_served",
        "capacity_gb_hours",
        "used_gb_hours",
        "reclamations",
        "migrations",
        "exceptions",
        "data",
    ])?;
    for r in reports {
        let c = &r.counters;
        for (u, res, s) in rows(r) {
            for (sub, n, ab, aa, mb, ma) in [
                (
                    "all",
                    s.units,
                    s.avg_before,
                    s.avg_after,
                    s.max_before,
                    s.max_after,
                ),
                (
                    "under60",
                    s.under60_units,
                    s.under60_avg_before,
                    s.under60_avg_after,
                    s.under60_max_before,
                    s.under60_max_after,
                ),
            ] {
                w.write_record(
                    [
                        r.scenario.name().to_string(),
                        r.predictor.clone(),
                        u.to_string(),
                        res.to_string(),
                        sub.to_string(),
                        n.to_string(),
                        format!("{ab:.4}"),
                        format!("{aa:.4}"),
                        format!("{mb:.4}"),
                        format!("{ma:.4}"),
                    ]
                    .into_iter()
                    .chain(counter_fields(c))
                    .chain(["synthetic".to_string()]),
                )?;
            }
        }
    }
    w.flush()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

fn write_units(path: &Path, reports: &[ScenarioReport]) -> Result<()> {
    let mut w =
        csv::Writer::from_path(path).with_context(|| format!("create {}", path.display()))?;
    w.write_record([
        "scenario",
        "unit",
        "index",
        "capacity_before",
        "capacity_after",
        "bandwidth_before",
        "bandwidth_after",
    ])?;
    for r in reports {
        let sets: Vec<(&str, &fleet::sim::UnitAverages)> = if r.scenario == Scenario::Sold {
            vec![("vm", &r.vm_averages), ("ssd", &r.ssd_averages)]
        } else {
            vec![("ssd", &r.ssd_averages)]
        };
        for (u, avgs) in sets {
            for (i, v) in avgs.iter().enumerate() {
                w.write_record([
                    r.scenario.name().to_string(),
                    u.to_string(),
                    i.to_string(),
                    format!("{:.4}", v[0]),
                    format!("{:.4}", v[1]),
                    format!("{:.4}", v[2]),
                    format!("{:.4}", v[3]),
                ])?;
            }
        }
    }
    w.flush()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// Grouped before/after bars, one panel per paper figure: 15 (sold, capacity per
/// VM), 16 (sold, bandwidth per VM), 17 (unsold, capacity per SSD).
fn plot(path: &Path, reports: &[ScenarioReport]) -> Result<()> {
    let mut panels: Vec<(String, UtilStats)> = Vec::new();
    for r in reports {
        match r.scenario {
            Scenario::Sold => {
                panels.push((
                    format!("Fig. 15: capacity per VM ({})", r.predictor),
                    r.vm_capacity,
                ));
                panels.push((
                    format!("Fig. 16: bandwidth per VM ({})", r.predictor),
                    r.vm_bandwidth,
                ));
            }
            Scenario::Unsold => panels.push((
                format!("Fig. 17: unsold, per SSD ({})", r.predictor),
                r.ssd_capacity,
            )),
        }
    }
    anyhow::ensure!(!panels.is_empty(), "nothing to plot");
    let root = SVGBackend::new(path, (420 * panels.len() as u32, 380)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "Utilisation before and after harvesting (SYNTHETIC fleet)",
        ("sans-serif", 16),
    )?;
    for (area, (title, s)) in root.split_evenly((1, panels.len())).iter().zip(&panels) {
        let groups = [
            ("avg", s.avg_before, s.avg_after),
            ("max", s.max_before, s.max_after),
            ("avg <60%", s.under60_avg_before, s.under60_avg_after),
            ("max <60%", s.under60_max_before, s.under60_max_after),
        ];
        let mut ch = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 13))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0f64..4f64, 0f64..100f64)?;
        ch.configure_mesh()
            .disable_x_mesh()
            .x_labels(4)
            .x_label_formatter(&|x| {
                groups
                    .get(x.floor() as usize)
                    .map_or(String::new(), |g| g.0.to_string())
            })
            .y_desc("utilisation %")
            .draw()?;
        for (i, (_, b, a)) in groups.iter().enumerate() {
            let x = i as f64;
            ch.draw_series([
                Rectangle::new(
                    [(x + 0.15, 0.0), (x + 0.48, 100.0 * b)],
                    BLUE.mix(0.5).filled(),
                ),
                Rectangle::new(
                    [(x + 0.52, 0.0), (x + 0.85, 100.0 * a)],
                    RED.mix(0.6).filled(),
                ),
            ])?;
        }
        ch.draw_series([Rectangle::new(
            [(3.05, 92.0), (3.15, 96.0)],
            BLUE.mix(0.5).filled(),
        )])?
        .label("before");
        ch.draw_series([Rectangle::new(
            [(3.05, 86.0), (3.15, 90.0)],
            RED.mix(0.6).filled(),
        )])?
        .label("after");
        ch.draw_series([
            Text::new("before", (3.2, 96.0), ("sans-serif", 11)),
            Text::new("after", (3.2, 90.0), ("sans-serif", 11)),
        ])?;
    }
    root.present()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// One row per predictor of the sold scenario: what harvesting gained with it.
fn write_per_predictor(path: &Path, solds: &[&ScenarioReport]) -> Result<()> {
    let mut w =
        csv::Writer::from_path(path).with_context(|| format!("create {}", path.display()))?;
    w.write_record([
        "predictor",
        "homes",
        "requests",
        "served",
        "split_served",
        "capacity_gb_hours",
        "used_gb_hours",
        "early_reclamations",
        "migrations",
        "exceptions",
        "vm_capacity_avg_before",
        "vm_capacity_avg_after",
        "vm_under60_units",
        "vm_under60_avg_before",
        "vm_under60_avg_after",
        "vm_bandwidth_avg_before",
        "vm_bandwidth_avg_after",
        "data",
    ])?;
    for r in solds {
        let (c, v, b) = (&r.counters, &r.vm_capacity, &r.vm_bandwidth);
        w.write_record(
            [r.predictor.clone(), r.homes.to_string()]
                .into_iter()
                .chain(counter_fields(c))
                .chain([
                    format!("{:.4}", v.avg_before),
                    format!("{:.4}", v.avg_after),
                    v.under60_units.to_string(),
                    format!("{:.4}", v.under60_avg_before),
                    format!("{:.4}", v.under60_avg_after),
                    format!("{:.4}", b.avg_before),
                    format!("{:.4}", b.avg_after),
                    "synthetic".to_string(),
                ]),
        )?;
    }
    w.flush()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// The predictors side by side: capacity-hours harvested (granted and used),
/// early reclamations (migrated, evicted), and the VM capacity gain.
fn plot_per_predictor(path: &Path, solds: &[&ScenarioReport]) -> Result<()> {
    anyhow::ensure!(!solds.is_empty(), "no sold-scenario run to plot");
    let root = SVGBackend::new(path, (1260, 400)).into_drawing_area();
    draw_per_predictor(&root, solds)?;
    root.present()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// One panel of the per-predictor plot: title, y label, two bars per
/// predictor, and what the two bars are.
type Panel<'a> = (&'a str, &'a str, Vec<(f64, f64)>, [&'a str; 2]);

fn draw_per_predictor<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    solds: &[&ScenarioReport],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "Harvesting per predictor, sold scenario, {} VMs (SYNTHETIC fleet)",
            solds[0].homes
        ),
        ("sans-serif", 16),
    )?;
    let panels = root.split_evenly((1, 3));
    let n = solds.len();
    let tb = |v: u64| v as f64 / 1000.0;
    let data: [Panel; 3] = [
        (
            "capacity harvested",
            "TB-hours",
            solds
                .iter()
                .map(|r| {
                    (
                        tb(r.counters.capacity_gb_hours),
                        tb(r.counters.used_gb_hours),
                    )
                })
                .collect(),
            ["granted", "used"],
        ),
        (
            "early reclamations",
            "count",
            solds
                .iter()
                .map(|r| (r.counters.migrations as f64, r.counters.exceptions as f64))
                .collect(),
            ["migrated", "evicted"],
        ),
        (
            "VM capacity gain (after / before)",
            "x",
            solds
                .iter()
                .map(|r| {
                    let v = &r.vm_capacity;
                    (
                        ratio(v.avg_after, v.avg_before),
                        ratio(v.under60_avg_after, v.under60_avg_before),
                    )
                })
                .collect(),
            ["all VMs", "VMs < 60%"],
        ),
    ];
    for (area, (title, ylab, vals, legend)) in panels.iter().zip(data) {
        let stacked = title == "early reclamations";
        let top = vals
            .iter()
            .map(|&(a, b)| if stacked { a + b } else { a.max(b) })
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.25;
        let mut ch = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 13))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..n as f64, 0f64..top)?;
        ch.configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                solds
                    .get(x.floor() as usize)
                    .map_or(String::new(), |r| r.predictor.clone())
            })
            .y_desc(ylab)
            .draw()?;
        for (i, &(a, b)) in vals.iter().enumerate() {
            let x = i as f64;
            let bars = if stacked {
                [
                    Rectangle::new([(x + 0.2, 0.0), (x + 0.8, a)], BLUE.mix(0.5).filled()),
                    Rectangle::new([(x + 0.2, a), (x + 0.8, a + b)], RED.mix(0.6).filled()),
                ]
            } else {
                [
                    Rectangle::new([(x + 0.15, 0.0), (x + 0.48, a)], BLUE.mix(0.5).filled()),
                    Rectangle::new([(x + 0.52, 0.0), (x + 0.85, b)], RED.mix(0.6).filled()),
                ]
            };
            ch.draw_series(bars)?;
        }
        ch.draw_series([
            Rectangle::new(
                [(0.05, top * 0.93), (0.12, top * 0.97)],
                BLUE.mix(0.5).filled(),
            ),
            Rectangle::new(
                [(0.05, top * 0.86), (0.12, top * 0.90)],
                RED.mix(0.6).filled(),
            ),
        ])?;
        ch.draw_series([
            Text::new(legend[0], (0.15, top * 0.97), ("sans-serif", 11)),
            Text::new(legend[1], (0.15, top * 0.90), ("sans-serif", 11)),
        ])?;
    }
    Ok(())
}

/// The counters both CSVs carry, in their column order: requests, served,
/// split, capacity and used GB-hours, reclamations, migrations, exceptions.
fn counter_fields(c: &fleet::Counters) -> [String; 8] {
    [
        c.requests.to_string(),
        c.served.to_string(),
        c.split_served.to_string(),
        c.capacity_gb_hours.to_string(),
        c.used_gb_hours.to_string(),
        c.reclamations.to_string(),
        c.migrations.to_string(),
        c.exceptions.to_string(),
    ]
}
