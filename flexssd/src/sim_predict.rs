//! `flexssd sim predict`: accuracy of the BlockFlex predictors (`crates/predict`) on
//! real inputs, as in the paper's Figure 14.
//!
//! Each input is replayed on a virtual clock through the same online predictors the
//! daemon uses. Every step the level predictor predicts the next window's level
//! before seeing it; every training period (3 minutes; every window for 30-minute
//! inputs) the duration sub-predictor of the current level predicts how long usage
//! will stay at or below it, checked against the rest of the series. One pass gives
//! every provisioning ratio, since provisioning only rescales a prediction.
//!
//! Definitions (paper §4.4.3): a level prediction is accurate if, over-provisioned by
//! the ratio, it is at least the actual level; a duration prediction is accurate if,
//! under-provisioned by the ratio, the resource lasts at least that long (compared in
//! whole allocation units of 30 minutes, as the artifact does). Over/under count the
//! provisioned prediction above/below the actual. Waste is what provisioning leaves
//! idle: for levels, the mean of (provisioned - actual)⁺ as a share of the device
//! (channels or capacity); for durations, the share of the actual available time that
//! the prediction does not use. A "last" model (predict the current level, or the
//! time the current run has already lasted) is run beside the LSTM as a baseline.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use clock::{Nanos, SEC};
use plotters::prelude::*;
use predict::readers::{read_blockflex, read_cloudphysics};
use predict::{level_of, over_provision, DurationPredictor, LevelPredictor, PredictorConfig};
use serde::Serialize;

/// Options of `flexssd sim predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Inputs, `blockflex:PATH` (an artifact input; `sz` in the file name means
    /// capacity, otherwise bandwidth) or `cloudphysics:PATH` (a 30-minute feature CSV;
    /// gives both). A directory takes every file in it. Default: every file in
    /// `../shared/traces/blockflex/` and `../shared/traces/cloudphysics-30min/`.
    #[arg(long = "input", value_name = "KIND:PATH")]
    pub inputs: Vec<String>,
    /// Provisioning ratios in percent.
    #[arg(long, value_delimiter = ',', default_value = "0,5,10,20,30")]
    pub ratios: Vec<f64>,
    /// Predictor configuration (TOML, `predict::PredictorConfig`); default: the paper's.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print JSON rows instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write the rows as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write an SVG plot of accuracy against ratio (Figure 14 style).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// One result row: one input, metric, model and ratio.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Input file name.
    pub input: String,
    /// `blockflex` or `cloudphysics`.
    pub source: &'static str,
    /// `bandwidth`, `capacity`, `bandwidth_duration` or `capacity_duration`.
    pub metric: &'static str,
    /// `lstm` or `last` (baseline).
    pub model: &'static str,
    /// Provisioning ratio in percent.
    pub ratio_pct: f64,
    /// Predictions judged.
    pub n: u64,
    /// Share accurate.
    pub accuracy: f64,
    /// Share above the actual.
    pub over: f64,
    /// Share below the actual.
    pub under: f64,
    /// Share of resources (levels) or time (durations) left idle.
    pub waste: f64,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Bandwidth,
    Capacity,
}

/// Tallies for one (metric, model, ratio).
#[derive(Debug, Default, Clone)]
struct Tally {
    n: u64,
    ok: u64,
    over: u64,
    under: u64,
    waste: f64,
    base: f64,
}

struct Series {
    name: String,
    source: &'static str,
    kind: Kind,
    step_s: f64,
    feats: Vec<Vec<f32>>,
    levels: Vec<u32>,
}

fn default_inputs() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces");
    let root = if root.exists() {
        root
    } else {
        PathBuf::from("../shared/traces")
    };
    vec![
        format!("blockflex:{}", root.join("blockflex").display()),
        format!("cloudphysics:{}", root.join("cloudphysics-30min").display()),
    ]
}

fn expand(spec: &str) -> Result<Vec<(String, PathBuf)>> {
    let Some((kind, path)) = spec.split_once(':') else {
        bail!("input {spec:?}: expected KIND:PATH with KIND blockflex or cloudphysics");
    };
    if kind != "blockflex" && kind != "cloudphysics" {
        bail!("input {spec:?}: unknown kind {kind:?} (blockflex or cloudphysics)");
    }
    let p = PathBuf::from(path);
    let mut files = Vec::new();
    if p.is_dir() {
        for e in std::fs::read_dir(&p).with_context(|| format!("read {}", p.display()))? {
            let e = e?.path();
            if e.is_file() {
                files.push((kind.to_string(), e));
            }
        }
        files.sort();
    } else if p.is_file() {
        files.push((kind.to_string(), p));
    } else {
        bail!("input {spec:?}: {} does not exist", p.display());
    }
    Ok(files)
}

fn load(kind: &str, path: &Path, levels: u32) -> Result<Vec<Series>> {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let f = File::open(path).with_context(|| format!("open {}", path.display()))?;
    let r = BufReader::new(f);
    let file = path.display().to_string();
    if kind == "blockflex" {
        let s = read_blockflex(r, &file, levels)?;
        let capacity = name.contains("sz");
        let lv = levels as f32;
        let feats = s
            .levels
            .iter()
            .map(|&l| {
                let x = l as f32 / lv;
                if capacity {
                    vec![x, x, x, 0.0]
                } else {
                    vec![x; 6]
                }
            })
            .collect::<Vec<_>>();
        let mut feats = feats;
        if capacity {
            for i in 1..feats.len() {
                feats[i][3] = feats[i][2] - feats[i - 1][2];
            }
        }
        return Ok(vec![Series {
            name,
            source: "blockflex",
            kind: if capacity {
                Kind::Capacity
            } else {
                Kind::Bandwidth
            },
            step_s: s.step_s,
            feats,
            levels: s.levels,
        }]);
    }
    let s = read_cloudphysics(r, &file)?;
    let bw = Series {
        name: name.clone(),
        source: "cloudphysics",
        kind: Kind::Bandwidth,
        step_s: s.step_s,
        feats: s
            .windows
            .iter()
            .map(|w| {
                vec![
                    w.bw_max, w.bw_min, w.bw_avg, w.iops_max, w.iops_min, w.iops_avg,
                ]
            })
            .collect(),
        levels: s
            .windows
            .iter()
            .map(|w| level_of(w.bw_max, levels))
            .collect(),
    };
    let mut prev = None;
    let cap = Series {
        name,
        source: "cloudphysics",
        kind: Kind::Capacity,
        step_s: s.step_s,
        feats: s
            .windows
            .iter()
            .map(|w| {
                let ch = prev.map_or(0.0, |p| w.util_avg - p);
                prev = Some(w.util_avg);
                vec![w.util_max, w.util_min, w.util_avg, ch]
            })
            .collect(),
        levels: s
            .windows
            .iter()
            .map(|w| level_of(w.util_max, levels))
            .collect(),
    };
    Ok(vec![bw, cap])
}

/// Warm-up predictions not judged (the artifact skips 5).
const WARMUP: usize = 5;

/// Runs one series; returns tallies indexed [metric 0=level 1=duration][model][ratio].
fn evaluate(
    cfg: &PredictorConfig,
    s: &Series,
    ratios: &[f64],
    seed: u64,
    tick: &dyn Fn(),
) -> Result<Vec<Vec<Vec<Tally>>>> {
    let m = match s.kind {
        Kind::Bandwidth => &cfg.bandwidth,
        Kind::Capacity => &cfg.capacity,
    };
    let nf = s.feats.first().map_or(1, |f| f.len());
    let mut lp = LevelPredictor::new(cfg, m, nf, seed)?;
    let mut dp = DurationPredictor::new(cfg, seed.wrapping_add(1))?;
    let mut t = vec![vec![vec![Tally::default(); ratios.len()]; 2]; 2];
    let step: Nanos = (s.step_s * SEC as f64) as Nanos;
    let l = cfg.levels;
    let unit = cfg.duration.time_unit_s;
    let cap_s = cfg.duration.cap_s();
    let every = ((cfg.train_every_s / s.step_s).round() as usize).max(1);
    let n = s.levels.len();
    // next_above[i][k]: first index > k... computed lazily: for each index k and level
    // i, the time until the level exceeds i. Scan backwards per level.
    let mut until = vec![vec![None::<usize>; n]; l as usize + 1];
    for (i, u) in until.iter_mut().enumerate() {
        let mut next: Option<usize> = None;
        for k in (0..n).rev() {
            if s.levels[k] as usize > i {
                next = Some(k);
            }
            u[k] = next;
        }
    }
    let mut judged = 0usize;
    // Start of the current run at or below the current level.
    let mut run_start = 0usize;
    // `k` is the window number: it times the step and indexes several series.
    #[allow(clippy::needless_range_loop)]
    for k in 0..n {
        tick();
        let now = k as Nanos * step;
        // Level: predict window k from windows < k, then observe it.
        if k > 0 {
            if let Some(pred) = lp.predict()? {
                judged += 1;
                if judged > WARMUP {
                    let actual = s.levels[k];
                    for (model, p) in [(0, pred), (1, s.levels[k - 1])] {
                        for (ri, r) in ratios.iter().enumerate() {
                            let pv = over_provision(p, r / 100.0, l);
                            let ta = &mut t[0][model][ri];
                            ta.n += 1;
                            if pv >= actual {
                                ta.ok += 1;
                            }
                            if pv > actual {
                                ta.over += 1;
                                ta.waste += (pv - actual) as f64 / l as f64;
                            }
                            if pv < actual {
                                ta.under += 1;
                            }
                        }
                    }
                }
            }
        }
        lp.observe(now, s.feats[k].clone(), s.levels[k])?;
        dp.observe(now, s.levels[k])?;
        if k == 0 || s.levels[k] != s.levels[k - 1] {
            run_start = k;
        }
        // Duration: at every training period, for the current level.
        if k % every == 0 && judged > WARMUP {
            let i = s.levels[k] as usize;
            let actual_s = match until[i][k] {
                Some(e) => ((e - k) as f64 * s.step_s).min(cap_s),
                None if (n - k) as f64 * s.step_s >= cap_s => cap_s,
                None => continue, // censored by the end of the series
            };
            let lstm_s = dp.predict(i as u32, now)? as f64 / SEC as f64;
            // Baseline: the run will last as long again as it has so far.
            let last_s = (((k - run_start) as f64) * s.step_s).min(cap_s);
            let au = (actual_s / unit).floor();
            for (model, p) in [(0, lstm_s), (1, last_s)] {
                for (ri, r) in ratios.iter().enumerate() {
                    let pu = (p / (1.0 + r / 100.0) / unit).floor();
                    let ta = &mut t[1][model][ri];
                    ta.n += 1;
                    if pu <= au {
                        ta.ok += 1;
                        ta.waste += (au - pu) * unit;
                    }
                    ta.base += actual_s;
                    if pu > au {
                        ta.over += 1;
                    }
                    if pu < au {
                        ta.under += 1;
                    }
                }
            }
        }
    }
    Ok(t)
}

fn rows_of(s: &Series, t: &[Vec<Vec<Tally>>], ratios: &[f64]) -> Vec<Row> {
    let mut out = Vec::new();
    let names = match s.kind {
        Kind::Bandwidth => ["bandwidth", "bandwidth_duration"],
        Kind::Capacity => ["capacity", "capacity_duration"],
    };
    for (mi, metric) in names.iter().enumerate() {
        for (model, mname) in ["lstm", "last"].iter().enumerate() {
            for (ri, r) in ratios.iter().enumerate() {
                let ta = &t[mi][model][ri];
                let n = ta.n.max(1) as f64;
                out.push(Row {
                    input: s.name.clone(),
                    source: s.source,
                    metric,
                    model: mname,
                    ratio_pct: *r,
                    n: ta.n,
                    accuracy: ta.ok as f64 / n,
                    over: ta.over as f64 / n,
                    under: ta.under as f64 / n,
                    waste: if mi == 0 {
                        ta.waste / n
                    } else {
                        ta.waste / ta.base.max(1e-9)
                    },
                });
            }
        }
    }
    out
}

/// Runs `flexssd sim predict`.
pub fn run(a: &PredictArgs) -> Result<()> {
    tune_for_small_tensors();
    let cfg: PredictorConfig = match &a.config {
        Some(p) => toml::from_str(
            &std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?,
        )
        .with_context(|| format!("parse {}", p.display()))?,
        None => PredictorConfig::default(),
    };
    if a.ratios.iter().any(|r| !r.is_finite() || *r < 0.0) {
        bail!("--ratios must be non-negative percentages");
    }
    let specs = if a.inputs.is_empty() {
        default_inputs()
    } else {
        a.inputs.clone()
    };
    let mut files = Vec::new();
    for s in &specs {
        files.extend(expand(s)?);
    }
    let mut series = Vec::new();
    for (k, p) in &files {
        series.extend(load(k, p, cfg.levels)?);
    }
    // Progress in windows (every series' time steps), so the bar moves while
    // the long series run and not only when one finishes.
    let windows: usize = series.iter().map(|s| s.levels.len()).sum();
    let pb = crate::progress::bar(
        windows as u64,
        "[{bar:40}] {pos}/{len} windows of {msg} series ({elapsed}, {eta} left)",
        a.json,
    );
    pb.set_message(series.len().to_string());
    // Longest series first, handed out to one worker per core.
    let mut order: Vec<usize> = (0..series.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(series[i].levels.len()));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(series.len().max(1));
    let mut results: Vec<Option<Vec<Row>>> = vec![None; series.len()];
    let done = std::sync::Mutex::new(&mut results);
    std::thread::scope(|sc| -> Result<()> {
        let hs: Vec<_> = (0..workers)
            .map(|_| {
                sc.spawn(|| -> Result<()> {
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&si) = order.get(k) else {
                            return Ok(());
                        };
                        let s = &series[si];
                        let seed = cfg.seed.wrapping_add(si as u64 * 1000);
                        let t = evaluate(&cfg, s, &a.ratios, seed, &|| pb.inc(1))
                            .with_context(|| format!("{} ({:?})", s.name, s.kind))?;
                        done.lock().expect("no panics")[si] = Some(rows_of(s, &t, &a.ratios));
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().expect("worker panicked")?;
        }
        Ok(())
    })?;
    pb.finish_and_clear();
    let rows: Vec<Row> = results.into_iter().flatten().flatten().collect();
    if let Some(p) = &a.csv {
        let mut w = csv::Writer::from_path(p).with_context(|| format!("create {}", p.display()))?;
        for r in &rows {
            w.serialize(r)?;
        }
        w.flush()?;
    }
    if let Some(p) = &a.plot {
        plot(&rows, p)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<13} {:<19} {:<5} {:>6} {:>7} {:>9} {:>7} {:>7} {:>7}",
            "source", "metric", "model", "ratio%", "inputs", "accuracy", "over", "under", "waste"
        );
        for (source, metric, model, ratio, v) in averages(&rows) {
            println!(
                "{:<13} {:<19} {:<5} {:>6} {:>7} {:>8.1}% {:>6.1}% {:>6.1}% {:>6.1}%",
                source,
                metric,
                model,
                ratio,
                v[4] as u64,
                100.0 * v[0],
                100.0 * v[1],
                100.0 * v[2],
                100.0 * v[3]
            );
        }
    }
    Ok(())
}

/// The models are tiny, so candle's per-op costs dominate: it asks the OS for the CPU
/// count on every matmul unless `RAYON_NUM_THREADS` is set (one thread is also what
/// tiny matmuls want, and makes results independent of the core count), and glibc
/// returns freed heap to the OS after nearly every op. Parallelism comes from
/// running series on separate threads instead.
fn tune_for_small_tensors() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        // Before any thread is started: nothing else reads the environment concurrently.
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
    // SAFETY: mallopt only changes allocator thresholds; called before other threads.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TOP_PAD, 16 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

type Avg = (String, String, String, f64, [f64; 5]);

/// Mean over inputs (each input weighs the same, as the paper averages workloads) of
/// accuracy, over, under, waste, plus the input count, per (source, metric, model, ratio).
fn averages(rows: &[Row]) -> Vec<Avg> {
    let mut out: Vec<Avg> = Vec::new();
    for r in rows.iter().filter(|r| r.n > 0) {
        let key = (
            r.source.to_string(),
            r.metric.to_string(),
            r.model.to_string(),
            r.ratio_pct,
        );
        let e = match out.iter_mut().find(|o| {
            (o.0.as_str(), o.1.as_str(), o.2.as_str(), o.3)
                == (key.0.as_str(), key.1.as_str(), key.2.as_str(), key.3)
        }) {
            Some(e) => e,
            None => {
                out.push((key.0, key.1, key.2, key.3, [0.0; 5]));
                out.last_mut().expect("pushed")
            }
        };
        e.4[0] += r.accuracy;
        e.4[1] += r.over;
        e.4[2] += r.under;
        e.4[3] += r.waste;
        e.4[4] += 1.0;
    }
    for e in &mut out {
        for k in 0..4 {
            e.4[k] /= e.4[4];
        }
    }
    out
}

fn plot(rows: &[Row], path: &Path) -> Result<()> {
    let avg = averages(rows);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let xmax = avg.iter().map(|a| a.3).fold(5.0, f64::max);
    let ymin = avg
        .iter()
        .filter(|a| a.2 == "lstm")
        .map(|a| a.4[0])
        .fold(1.0, f64::min)
        .min(0.7);
    let mut ch = ChartBuilder::on(&root)
        .caption(
            "Prediction accuracy vs provisioning ratio (LSTM; cf. BlockFlex Fig. 14)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..xmax, (ymin * 100.0 - 2.0)..100.5)?;
    ch.configure_mesh()
        .x_desc("provisioning ratio (%)")
        .y_desc("accuracy (%)")
        .draw()?;
    let mut keys: Vec<(String, String)> = avg
        .iter()
        .filter(|a| a.2 == "lstm")
        .map(|a| (a.0.clone(), a.1.clone()))
        .collect();
    keys.dedup();
    for (i, (src, met)) in keys.iter().enumerate() {
        let c = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = avg
            .iter()
            .filter(|a| &a.0 == src && &a.1 == met && a.2 == "lstm")
            .map(|a| (a.3, 100.0 * a.4[0]))
            .collect();
        ch.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(format!("{src} {met}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        ch.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
    }
    ch.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}
