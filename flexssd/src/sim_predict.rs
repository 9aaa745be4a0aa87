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

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use clock::{Nanos, SEC};
use plotters::prelude::*;
use predict::readers::{read_blockflex, read_cloudphysics};
use predict::{
    level_of, over_provision, DurationPredictor, DurationPrior, LevelPredictor, LevelPrior,
    PredictorConfig, QuantileDuration, QuantileLevel,
};
use serde::Serialize;

/// Options of `flexssd sim predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Test inputs, `blockflex:PATH` (an artifact input; `sz` in the file name means
    /// capacity, otherwise bandwidth) or `cloudphysics:PATH` (a 30-minute feature CSV;
    /// gives both). A directory takes every file in it. Default (without `--split`):
    /// every file in `../shared/traces/blockflex/` and `../shared/traces/cloudphysics-30min/`.
    #[arg(long = "input", value_name = "KIND:PATH")]
    pub inputs: Vec<String>,
    /// Training inputs (same form as `--input`): the quantile model's prior is fitted
    /// on them, per source; results are reported on the test inputs only.
    #[arg(long = "train", value_name = "KIND:PATH")]
    pub train: Vec<String>,
    /// A split file: lines `train KIND NAME` or `test KIND NAME` (`#` comments), NAME a
    /// file under `--traces` (`blockflex/` or `cloudphysics-30min/`). Instead of
    /// `--input`/`--train`.
    #[arg(long, value_name = "FILE")]
    pub split: Option<PathBuf>,
    /// Root of the traces a split file names (default `../shared/traces`).
    #[arg(long, value_name = "DIR")]
    pub traces: Option<PathBuf>,
    /// Models to run beside last-value: `lstm` (the paper's), `quantile` (ours, with
    /// the prior of the training inputs and without: `quantile_online`).
    #[arg(long, value_delimiter = ',', default_value = "lstm,quantile")]
    pub models: Vec<String>,
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
    /// Write the accuracy/waste trade-off (every model's knob swept, ratio 0) as CSV.
    #[arg(long, value_name = "FILE")]
    pub tradeoff: Option<PathBuf>,
    /// Write an SVG plot of the accuracy/waste trade-off.
    #[arg(long, value_name = "FILE.svg")]
    pub tradeoff_plot: Option<PathBuf>,
    /// Write measured training and inference cost per model as CSV.
    #[arg(long, value_name = "FILE")]
    pub cost: Option<PathBuf>,
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
    /// `lstm`, `quantile`, `quantile_online` or `last` (baseline).
    pub model: &'static str,
    /// Provisioning ratio in percent.
    pub ratio_pct: f64,
    /// Predictions judged.
    pub n: u64,
    /// Share accurate; None (JSON null, an empty CSV field) when `n` is 0, as
    /// are the shares below.
    pub accuracy: Option<f64>,
    /// Share above the actual.
    pub over: Option<f64>,
    /// Share below the actual.
    pub under: Option<f64>,
    /// Share of resources (levels) or time (durations) left idle.
    pub waste: Option<f64>,
}

/// One point of a model's accuracy/waste trade-off on one input (ratio 0).
#[derive(Debug, Clone, Serialize)]
pub struct TradeRow {
    /// Input file name.
    pub input: String,
    /// `blockflex` or `cloudphysics`.
    pub source: &'static str,
    /// As in [`Row`].
    pub metric: &'static str,
    /// As in [`Row`].
    pub model: &'static str,
    /// The knob: `q=0.80` (quantile), `+1` (levels raised), `x0.50` (durations scaled).
    pub knob: String,
    /// Share accurate.
    pub accuracy: f64,
    /// Share left idle.
    pub waste: f64,
}

/// Measured cost of one model on one resource, over all inputs of a source.
#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    /// `blockflex` or `cloudphysics`.
    pub source: &'static str,
    /// `bandwidth` or `capacity`.
    pub resource: &'static str,
    /// As in [`Row`].
    pub model: &'static str,
    /// Training periods measured.
    pub rounds: u64,
    /// Mean time of one training period (level and duration models), ms.
    pub train_ms_mean: f64,
    /// Longest training period, ms.
    pub train_ms_max: f64,
    /// Mean time of one prediction (level and duration), µs.
    pub infer_us_mean: f64,
    /// Per-vSSD model state, bytes (for the LSTM, weights and Adam moments).
    pub model_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
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

impl Tally {
    fn level(&mut self, pv: u32, actual: u32, l: u32) {
        self.n += 1;
        if pv >= actual {
            self.ok += 1;
        }
        if pv > actual {
            self.over += 1;
            self.waste += (pv - actual) as f64 / l as f64;
        }
        if pv < actual {
            self.under += 1;
        }
    }

    /// Predicted and actual in whole units of `unit` seconds; `actual_s` the actual time.
    fn duration(&mut self, pu: f64, au: f64, actual_s: f64, unit: f64) {
        self.n += 1;
        if pu <= au {
            self.ok += 1;
            self.waste += (au - pu) * unit;
        }
        self.base += actual_s;
        if pu > au {
            self.over += 1;
        }
        if pu < au {
            self.under += 1;
        }
    }

    fn accuracy(&self) -> f64 {
        self.ok as f64 / self.n.max(1) as f64
    }

    fn waste(&self, level: bool) -> f64 {
        if level {
            self.waste / self.n.max(1) as f64
        } else {
            self.waste / self.base.max(1e-9)
        }
    }
}

struct Series {
    name: String,
    source: &'static str,
    kind: Kind,
    step_s: f64,
    feats: Vec<Vec<f32>>,
    levels: Vec<u32>,
}

fn traces_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces");
    if root.exists() {
        root
    } else {
        PathBuf::from("../shared/traces")
    }
}

fn default_inputs() -> Vec<String> {
    let root = traces_root();
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

/// The (train, test) input specs of a split file.
fn read_split(path: &Path, root: &Path) -> Result<(Vec<String>, Vec<String>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("read split file {}", path.display()))?;
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let bad = || {
            anyhow::anyhow!(
                "{}:{}: expected `train|test KIND NAME` (KIND blockflex or cloudphysics), found {line:?}",
                path.display(),
                i + 1
            )
        };
        let [set, kind, name] = f[..] else {
            return Err(bad());
        };
        let dir = match kind {
            "blockflex" => "blockflex",
            "cloudphysics" => "cloudphysics-30min",
            _ => return Err(bad()),
        };
        if name.contains('/') || name == ".." {
            bail!(
                "{}:{}: NAME {name:?} must be a file name",
                path.display(),
                i + 1
            );
        }
        let spec = format!("{kind}:{}", root.join(dir).join(name).display());
        match set {
            "train" => train.push(spec),
            "test" => test.push(spec),
            _ => return Err(bad()),
        }
    }
    Ok((train, test))
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

/// Model names, in tally order; `last` is always run.
const MODELS: [&str; 4] = ["lstm", "quantile", "quantile_online", "last"];
const LSTM: usize = 0;
const QUANT: usize = 1;
const QONLINE: usize = 2;
const LAST: usize = 3;

/// Knobs of the trade-off: quantiles of the quantile models, levels added to or
/// durations scaled from the point predictions of the LSTM and last-value.
const LEVEL_QS: [f64; 8] = [0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98];
const DUR_QS: [f64; 8] = [0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5];
const LEVEL_ADD: [u32; 5] = [0, 1, 2, 3, 4];
const DUR_SCALE: [f64; 8] = [1.0, 0.75, 0.5, 0.35, 0.25, 0.15, 0.1, 0.05];

fn knobs(level: bool, model: usize) -> Vec<String> {
    let quant = model == QUANT || model == QONLINE;
    match (level, quant) {
        (true, true) => LEVEL_QS.iter().map(|q| format!("q={q:.2}")).collect(),
        (false, true) => DUR_QS.iter().map(|q| format!("q={q:.2}")).collect(),
        (true, false) => LEVEL_ADD.iter().map(|a| format!("+{a}")).collect(),
        (false, false) => DUR_SCALE.iter().map(|s| format!("x{s:.2}")).collect(),
    }
}

/// Priors fitted on the training inputs of one source and resource.
#[derive(Clone, Default)]
struct Priors {
    level: Option<Arc<LevelPrior>>,
    duration: Option<Arc<DurationPrior>>,
}

/// Cost measured on one series for one model.
#[derive(Debug, Default, Clone)]
struct Cost {
    rounds: u64,
    train_ns: f64,
    train_max_ns: f64,
    /// Level predictions and their time.
    infer_n: u64,
    infer_ns: f64,
    /// Duration predictions and their time.
    dinfer_n: u64,
    dinfer_ns: f64,
    bytes: usize,
}

impl Cost {
    fn add(&mut self, o: &Cost) {
        self.rounds += o.rounds;
        self.train_ns += o.train_ns;
        self.train_max_ns = self.train_max_ns.max(o.train_max_ns);
        self.infer_n += o.infer_n;
        self.infer_ns += o.infer_ns;
        self.dinfer_n += o.dinfer_n;
        self.dinfer_ns += o.dinfer_ns;
        self.bytes = self.bytes.max(o.bytes);
    }
}

/// Results of one series.
struct Eval {
    /// Indexed `[metric: 0 = level, 1 = duration][model][ratio]`.
    t: Vec<Vec<Vec<Tally>>>,
    /// Indexed `[metric][model][knob]`.
    curve: Vec<Vec<Vec<Tally>>>,
    cost: Vec<Cost>,
}

/// The models of one series under test.
struct Models {
    lstm: Option<(LevelPredictor, DurationPredictor)>,
    quant: Option<[(QuantileLevel, QuantileDuration); 2]>,
}

/// Runs one series.
fn evaluate(
    cfg: &PredictorConfig,
    s: &Series,
    ratios: &[f64],
    seed: u64,
    run: [bool; 2],
    priors: &Priors,
    tick: &dyn Fn(),
) -> Result<Eval> {
    let m = match s.kind {
        Kind::Bandwidth => &cfg.bandwidth,
        Kind::Capacity => &cfg.capacity,
    };
    let nf = s.feats.first().map_or(1, |f| f.len());
    let mut ms = Models {
        lstm: if run[0] {
            Some((
                LevelPredictor::new(cfg, m, nf, seed)?,
                DurationPredictor::new(cfg, seed.wrapping_add(1))?,
            ))
        } else {
            None
        },
        quant: if run[1] {
            Some([
                (
                    QuantileLevel::new(cfg, priors.level.clone())?,
                    QuantileDuration::new(cfg, priors.duration.clone())?,
                ),
                (
                    QuantileLevel::new(cfg, None)?,
                    QuantileDuration::new(cfg, None)?,
                ),
            ])
        } else {
            None
        },
    };
    let nm = MODELS.len();
    let mut t = vec![vec![vec![Tally::default(); ratios.len()]; nm]; 2];
    let mut curve: Vec<Vec<Vec<Tally>>> = (0..2)
        .map(|mi| {
            (0..nm)
                .map(|md| vec![Tally::default(); knobs(mi == 0, md).len()])
                .collect()
        })
        .collect();
    let mut cost = vec![Cost::default(); nm];
    let mut period_ns = vec![0f64; nm];
    let step: Nanos = (s.step_s * SEC as f64) as Nanos;
    let l = cfg.levels;
    let unit = cfg.duration.time_unit_s;
    let cap_s = cfg.duration.cap_s();
    let every = ((cfg.train_every_s / s.step_s).round() as usize).max(1);
    let n = s.levels.len();
    // until[i][k]: the first window at or after k whose level exceeds i.
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
    // Start of the current run at the current level (last-value's duration).
    let mut run_start = 0usize;
    // `k` is the window number: it times the step and indexes several series.
    #[allow(clippy::needless_range_loop)]
    for k in 0..n {
        tick();
        let now = k as Nanos * step;
        // Level: predict window k from windows < k, then observe it.
        if k >= m.seq_len.max(1) {
            judged += 1;
            let mut preds: [Option<u32>; 4] = [None; 4];
            if let Some((lp, _)) = &ms.lstm {
                let t0 = Instant::now();
                preds[LSTM] = lp.predict()?;
                cost[LSTM].infer_ns += t0.elapsed().as_nanos() as f64;
                cost[LSTM].infer_n += 1;
            }
            if let Some(q) = &ms.quant {
                let t0 = Instant::now();
                preds[QUANT] = q[0].0.predict();
                cost[QUANT].infer_ns += t0.elapsed().as_nanos() as f64;
                cost[QUANT].infer_n += 1;
                preds[QONLINE] = q[1].0.predict();
            }
            preds[LAST] = Some(s.levels[k - 1]);
            if judged > WARMUP {
                let actual = s.levels[k];
                for (md, p) in preds.iter().enumerate() {
                    let Some(p) = *p else { continue };
                    for (ri, r) in ratios.iter().enumerate() {
                        t[0][md][ri].level(over_provision(p, r / 100.0, l), actual, l);
                    }
                    if md == LAST || md == LSTM {
                        for (ki, a) in LEVEL_ADD.iter().enumerate() {
                            curve[0][md][ki].level((p + a).min(l), actual, l);
                        }
                    }
                }
                if let Some(q) = &ms.quant {
                    for (md, qi) in [(QUANT, 0), (QONLINE, 1)] {
                        for (ki, &qv) in LEVEL_QS.iter().enumerate() {
                            let p = q[qi].0.predict_at(qv).unwrap_or(l);
                            curve[0][md][ki].level(p, actual, l);
                        }
                    }
                }
            }
        }
        // Observe (the training the models do happens here).
        if let Some((lp, dp)) = &mut ms.lstm {
            let t0 = Instant::now();
            lp.observe(now, s.feats[k].clone(), s.levels[k])?;
            dp.observe(now, s.levels[k])?;
            period_ns[LSTM] += t0.elapsed().as_nanos() as f64;
        }
        if let Some(q) = &mut ms.quant {
            let t0 = Instant::now();
            q[0].0.observe(now, s.levels[k]);
            q[0].1.observe(now, s.levels[k]);
            period_ns[QUANT] += t0.elapsed().as_nanos() as f64;
            q[1].0.observe(now, s.levels[k]);
            q[1].1.observe(now, s.levels[k]);
        }
        if (k + 1) % every == 0 || k + 1 == n {
            for md in [LSTM, QUANT] {
                let c = &mut cost[md];
                c.rounds += 1;
                c.train_ns += period_ns[md];
                c.train_max_ns = c.train_max_ns.max(period_ns[md]);
                period_ns[md] = 0.0;
            }
        }
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
            let au = (actual_s / unit).floor();
            let secs = |d: Nanos| d as f64 / SEC as f64;
            let mut preds: [Option<f64>; 4] = [None; 4];
            if let Some((_, dp)) = &ms.lstm {
                let t0 = Instant::now();
                preds[LSTM] = Some(secs(dp.predict(i as u32, now)?));
                cost[LSTM].dinfer_ns += t0.elapsed().as_nanos() as f64;
                cost[LSTM].dinfer_n += 1;
            }
            if let Some(q) = &ms.quant {
                let t0 = Instant::now();
                preds[QUANT] = Some(secs(q[0].1.predict(i as u32, now)));
                cost[QUANT].dinfer_ns += t0.elapsed().as_nanos() as f64;
                cost[QUANT].dinfer_n += 1;
                preds[QONLINE] = Some(secs(q[1].1.predict(i as u32, now)));
                for (md, qi) in [(QUANT, 0), (QONLINE, 1)] {
                    let ps = q[qi].1.predict_at(i as u32, now, &DUR_QS);
                    for (ki, p) in ps.iter().enumerate() {
                        curve[1][md][ki].duration((secs(*p) / unit).floor(), au, actual_s, unit);
                    }
                }
            }
            // Baseline: the run will last as long again as it has so far.
            preds[LAST] = Some((((k - run_start) as f64) * s.step_s).min(cap_s));
            for (md, p) in preds.iter().enumerate() {
                let Some(p) = *p else { continue };
                for (ri, r) in ratios.iter().enumerate() {
                    let pu = (p / (1.0 + r / 100.0) / unit).floor();
                    t[1][md][ri].duration(pu, au, actual_s, unit);
                }
                if md == LAST || md == LSTM {
                    for (ki, sc) in DUR_SCALE.iter().enumerate() {
                        curve[1][md][ki].duration((p * sc / unit).floor(), au, actual_s, unit);
                    }
                }
            }
        }
    }
    if let Some((lp, dp)) = &ms.lstm {
        cost[LSTM].bytes = lp.model_bytes() + dp.model_bytes();
    }
    if let Some(q) = &ms.quant {
        cost[QUANT].bytes = q[0].0.model_bytes() + q[0].1.model_bytes();
    }
    Ok(Eval { t, curve, cost })
}

fn metric_names(kind: Kind) -> [&'static str; 2] {
    match kind {
        Kind::Bandwidth => ["bandwidth", "bandwidth_duration"],
        Kind::Capacity => ["capacity", "capacity_duration"],
    }
}

fn rows_of(s: &Series, e: &Eval, ratios: &[f64], run: &[bool; 4]) -> (Vec<Row>, Vec<TradeRow>) {
    let mut out = Vec::new();
    let mut trade = Vec::new();
    for (mi, metric) in metric_names(s.kind).iter().enumerate() {
        for (md, mname) in MODELS.iter().enumerate() {
            if !run[md] {
                continue;
            }
            for (ri, r) in ratios.iter().enumerate() {
                let ta = &e.t[mi][md][ri];
                let n = ta.n as f64;
                let judged = |v: f64| (ta.n > 0).then_some(v);
                out.push(Row {
                    input: s.name.clone(),
                    source: s.source,
                    metric,
                    model: mname,
                    ratio_pct: *r,
                    n: ta.n,
                    accuracy: judged(ta.accuracy()),
                    over: judged(ta.over as f64 / n),
                    under: judged(ta.under as f64 / n),
                    waste: judged(ta.waste(mi == 0)),
                });
            }
            for (ki, knob) in knobs(mi == 0, md).into_iter().enumerate() {
                let ta = &e.curve[mi][md][ki];
                if ta.n == 0 {
                    continue;
                }
                trade.push(TradeRow {
                    input: s.name.clone(),
                    source: s.source,
                    metric,
                    model: mname,
                    knob,
                    accuracy: ta.accuracy(),
                    waste: ta.waste(mi == 0),
                });
            }
        }
    }
    (out, trade)
}

/// Runs `flexssd sim predict`.
pub fn run(a: &PredictArgs) -> Result<()> {
    predict::tune_process_for_training();
    let cfg: PredictorConfig = match &a.config {
        Some(p) => toml::from_str(
            &std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?,
        )
        .with_context(|| format!("parse {}", p.display()))?,
        None => PredictorConfig::default(),
    };
    if let Some(p) = &a.config {
        cfg.validate()
            .with_context(|| format!("--config {}", p.display()))?;
    }
    if a.ratios.iter().any(|r| !r.is_finite() || *r < 0.0) {
        bail!("--ratios must be non-negative percentages");
    }
    let mut run_models = [false, false, false, true];
    for m in &a.models {
        match m.as_str() {
            "lstm" => run_models[LSTM] = true,
            "quantile" => {
                run_models[QUANT] = true;
                run_models[QONLINE] = true;
            }
            other => bail!("--models: unknown model {other:?} (lstm, quantile)"),
        }
    }
    let (train_specs, test_specs) = match &a.split {
        Some(f) => {
            if !a.inputs.is_empty() || !a.train.is_empty() {
                bail!("--split names the inputs: give either --split or --input/--train");
            }
            let root = a.traces.clone().unwrap_or_else(traces_root);
            read_split(f, &root)?
        }
        None if a.inputs.is_empty() => (a.train.clone(), default_inputs()),
        None => (a.train.clone(), a.inputs.clone()),
    };
    if test_specs.is_empty() {
        bail!("no test inputs (the split file lists no `test` line)");
    }
    let mut test_files = Vec::new();
    for s in &test_specs {
        test_files.extend(expand(s)?);
    }
    let mut train_files = Vec::new();
    for s in &train_specs {
        train_files.extend(expand(s)?);
    }
    for (_, p) in &train_files {
        let canon = |q: &Path| q.canonicalize().unwrap_or_else(|_| q.to_path_buf());
        if test_files.iter().any(|(_, q)| canon(q) == canon(p)) {
            bail!(
                "{} is both a training and a test input: results on unseen inputs need disjoint sets",
                p.display()
            );
        }
    }
    let mut series = Vec::new();
    for (k, p) in &test_files {
        series.extend(load(k, p, cfg.levels)?);
    }
    let mut train = Vec::new();
    for (k, p) in &train_files {
        train.extend(load(k, p, cfg.levels)?);
    }
    // Priors per (source, resource), from the training series only.
    let mut priors: BTreeMap<(&'static str, bool), Priors> = BTreeMap::new();
    for src in ["blockflex", "cloudphysics"] {
        for kind in [Kind::Bandwidth, Kind::Capacity] {
            let ts: Vec<&Series> = train
                .iter()
                .filter(|s| s.source == src && s.kind == kind)
                .collect();
            if ts.is_empty() {
                continue;
            }
            priors.insert(
                (src, kind == Kind::Capacity),
                Priors {
                    level: Some(Arc::new(LevelPrior::fit(
                        cfg.levels,
                        ts.iter().map(|s| s.levels.as_slice()),
                    ))),
                    duration: Some(Arc::new(DurationPrior::fit(
                        cfg.levels,
                        cfg.duration.cap_s(),
                        ts.iter().map(|s| (s.levels.as_slice(), s.step_s)),
                    ))),
                },
            );
        }
    }
    let quiet = a.json || crate::progress::interactive(a.json);
    if !a.json {
        eprintln!(
            "sim predict: {} test series ({} files), {} training series ({} files), models {}",
            series.len(),
            test_files.len(),
            train.len(),
            train_files.len(),
            MODELS
                .iter()
                .zip(run_models)
                .filter(|m| m.1)
                .map(|m| *m.0)
                .collect::<Vec<_>>()
                .join(",")
        );
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
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(series.len().max(1));
    type Out = (Vec<Row>, Vec<TradeRow>, Vec<Cost>);
    let mut results: Vec<Option<Out>> = vec![None; series.len()];
    let done = std::sync::Mutex::new(&mut results);
    let none = Priors::default();
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
                        let pr = priors
                            .get(&(s.source, s.kind == Kind::Capacity))
                            .unwrap_or(&none);
                        let run = [run_models[LSTM], run_models[QUANT]];
                        let e = evaluate(&cfg, s, &a.ratios, seed, run, pr, &|| pb.inc(1))
                            .with_context(|| format!("{} ({:?})", s.name, s.kind))?;
                        let (rows, trade) = rows_of(s, &e, &a.ratios, &run_models);
                        done.lock().expect("no panics")[si] = Some((rows, trade, e.cost));
                        let f = finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                        if !quiet {
                            // Not a terminal (a script's log): one line per series.
                            eprintln!(
                                "  [{f}/{}] {} {:?} done ({:.0} s)",
                                series.len(),
                                s.name,
                                s.kind,
                                started.elapsed().as_secs_f64()
                            );
                        }
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
    let mut rows: Vec<Row> = Vec::new();
    let mut trade: Vec<TradeRow> = Vec::new();
    let mut costs: BTreeMap<(&'static str, &'static str, usize), Cost> = BTreeMap::new();
    // Series with no prediction judged at all: too short.
    let mut short: Vec<String> = Vec::new();
    for (si, r) in results.into_iter().enumerate() {
        let (r, t, c) = r.expect("every series ran");
        let s = &series[si];
        if r.iter().all(|x| x.n == 0) {
            short.push(format!(
                "{} ({:?}, {} windows)",
                s.name,
                s.kind,
                s.levels.len()
            ));
        }
        rows.extend(r);
        trade.extend(t);
        let res = if s.kind == Kind::Capacity {
            "capacity"
        } else {
            "bandwidth"
        };
        for md in [LSTM, QUANT] {
            if c[md].rounds > 0 && run_models[md] {
                costs.entry((s.source, res, md)).or_default().add(&c[md]);
            }
        }
    }
    let needs = format!(
        "a series needs the level models' sequence length ({} windows for bandwidth, {} \
         for capacity), {WARMUP} warm-up predictions and one judged: {} and {} windows",
        cfg.bandwidth.seq_len,
        cfg.capacity.seq_len,
        cfg.bandwidth.seq_len + WARMUP + 1,
        cfg.capacity.seq_len + WARMUP + 1
    );
    if rows.iter().all(|r| r.n == 0) {
        bail!(
            "no input is long enough to evaluate ({needs}): {}",
            short.join(", ")
        );
    }
    if !short.is_empty() {
        eprintln!(
            "sim predict: too short to evaluate, left out of the averages ({needs}): {}",
            short.join(", ")
        );
    }
    if let Some(p) = &a.csv {
        let mut w = csv::Writer::from_path(p).with_context(|| format!("create {}", p.display()))?;
        for r in &rows {
            w.serialize(r)?;
        }
        w.flush()?;
    }
    if let Some(p) = &a.tradeoff {
        let mut w = csv::Writer::from_path(p).with_context(|| format!("create {}", p.display()))?;
        for r in &trade {
            w.serialize(r)?;
        }
        w.flush()?;
    }
    let cost_rows: Vec<CostRow> = costs
        .iter()
        .map(|(&(source, resource, md), c)| CostRow {
            source,
            resource,
            model: MODELS[md],
            rounds: c.rounds,
            train_ms_mean: c.train_ns / c.rounds.max(1) as f64 / 1e6,
            train_ms_max: c.train_max_ns / 1e6,
            infer_us_mean: c.infer_ns / c.infer_n.max(1) as f64 / 1e3
                + c.dinfer_ns / c.dinfer_n.max(1) as f64 / 1e3,
            model_bytes: c.bytes,
        })
        .collect();
    if let Some(p) = &a.cost {
        let mut w = csv::Writer::from_path(p).with_context(|| format!("create {}", p.display()))?;
        for r in &cost_rows {
            w.serialize(r)?;
        }
        w.flush()?;
    }
    if let Some(p) = &a.plot {
        plot(&rows, p)?;
    }
    if let Some(p) = &a.tradeoff_plot {
        plot_tradeoff(&trade, p)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{:<13} {:<19} {:<15} {:>6} {:>7} {:>9} {:>7} {:>7} {:>7}",
            "source", "metric", "model", "ratio%", "inputs", "accuracy", "over", "under", "waste"
        );
        for (source, metric, model, ratio, v) in averages(&rows) {
            println!(
                "{:<13} {:<19} {:<15} {:>6} {:>7} {:>8.1}% {:>6.1}% {:>6.1}% {:>6.1}%",
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
        for c in &cost_rows {
            println!(
                "cost {} {} {}: training {:.3} ms per period (max {:.3}), inference {:.1} us, {} bytes",
                c.source,
                c.resource,
                c.model,
                c.train_ms_mean,
                c.train_ms_max,
                c.infer_us_mean,
                c.model_bytes
            );
        }
    }
    Ok(())
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
        // n > 0: every share is there.
        e.4[0] += r.accuracy.unwrap_or_default();
        e.4[1] += r.over.unwrap_or_default();
        e.4[2] += r.under.unwrap_or_default();
        e.4[3] += r.waste.unwrap_or_default();
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
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let shown = |m: &str| m == "lstm" || m == "quantile";
    let xmax = avg.iter().map(|a| a.3).fold(5.0, f64::max);
    let ymin = avg
        .iter()
        .filter(|a| shown(&a.2))
        .map(|a| a.4[0])
        .fold(1.0, f64::min)
        .min(0.7);
    let mut ch = ChartBuilder::on(&root)
        .caption(
            "Prediction accuracy vs provisioning ratio (paper LSTM dashed, quantile solid; cf. BlockFlex Fig. 14)",
            ("sans-serif", 16),
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
        .filter(|a| shown(&a.2))
        .map(|a| (a.0.clone(), a.1.clone()))
        .collect();
    keys.sort();
    keys.dedup();
    for (i, (src, met)) in keys.iter().enumerate() {
        let c = Palette99::pick(i).to_rgba();
        for model in ["lstm", "quantile"] {
            let pts: Vec<(f64, f64)> = avg
                .iter()
                .filter(|a| &a.0 == src && &a.1 == met && a.2 == model)
                .map(|a| (a.3, 100.0 * a.4[0]))
                .collect();
            if pts.is_empty() {
                continue;
            }
            if model == "lstm" {
                ch.draw_series(DashedLineSeries::new(pts.clone(), 6, 4, c.stroke_width(2)))?;
                ch.draw_series(pts.iter().map(|&p| Cross::new(p, 4, c.stroke_width(2))))?;
            } else {
                ch.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                    .label(format!("{src} {met}"))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                ch.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
            }
        }
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

/// Accuracy (x) against waste (y) per source and metric, one curve per model, each
/// point one setting of the model's knob, averaged over inputs.
fn plot_tradeoff(trade: &[TradeRow], path: &Path) -> Result<()> {
    // (source, metric, model, knob) -> sums of accuracy, waste, count.
    let mut avg: BTreeMap<(&str, &str, &str, String), [f64; 3]> = BTreeMap::new();
    for t in trade {
        let e = avg
            .entry((t.source, t.metric, t.model, t.knob.clone()))
            .or_default();
        e[0] += t.accuracy;
        e[1] += t.waste;
        e[2] += 1.0;
    }
    let sources: Vec<&str> = {
        let mut v: Vec<&str> = avg.keys().map(|k| k.0).collect();
        v.dedup();
        v
    };
    let metrics = [
        "bandwidth",
        "capacity",
        "bandwidth_duration",
        "capacity_duration",
    ];
    let root =
        SVGBackend::new(path, (1400, 380 * sources.len().max(1) as u32 + 40)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "Accuracy vs waste, unseen inputs, provisioning 0 % (knob: quantile q for ours; +levels / x duration for last-value and the LSTM)",
        ("sans-serif", 16),
    )?;
    let panels = root.split_evenly((sources.len().max(1), metrics.len()));
    // Drawn in this order: ours last, on top (on the artifact's levels it coincides
    // with last-value).
    let styles = [
        ("last", BLACK.to_rgba()),
        ("lstm", Palette99::pick(1).to_rgba()),
        ("quantile_online", Palette99::pick(4).to_rgba()),
        ("quantile", Palette99::pick(0).to_rgba()),
    ];
    for (si, src) in sources.iter().enumerate() {
        for (mi, met) in metrics.iter().enumerate() {
            let area = &panels[si * metrics.len() + mi];
            let pts = |model: &str| -> Vec<(f64, f64)> {
                let mut v: Vec<(f64, f64)> = avg
                    .iter()
                    .filter(|(k, _)| k.0 == *src && k.1 == *met && k.2 == model)
                    .map(|(_, a)| (100.0 * a[0] / a[2], 100.0 * a[1] / a[2]))
                    .collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                v
            };
            let all: Vec<(f64, f64)> = styles.iter().flat_map(|(m, _)| pts(m)).collect();
            if all.is_empty() {
                continue;
            }
            let xmin = all.iter().map(|p| p.0).fold(100.0, f64::min).max(50.0) - 1.0;
            let ymax = all
                .iter()
                .filter(|p| p.0 >= xmin)
                .map(|p| p.1)
                .fold(1.0, f64::max)
                * 1.05;
            let mut ch = ChartBuilder::on(area)
                .caption(format!("{src} {met}"), ("sans-serif", 14))
                .margin(8)
                .x_label_area_size(30)
                .y_label_area_size(40)
                .build_cartesian_2d(xmin..100.5, 0.0..ymax)?;
            ch.configure_mesh()
                .x_desc("accuracy (%)")
                .y_desc("waste (%)")
                .draw()?;
            for (model, c) in styles {
                let p: Vec<(f64, f64)> = pts(model).into_iter().filter(|p| p.0 >= xmin).collect();
                if p.is_empty() {
                    continue;
                }
                ch.draw_series(LineSeries::new(p.clone(), c.stroke_width(2)))?
                    .label(model)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 14, y)], c.stroke_width(2))
                    });
                ch.draw_series(p.iter().map(|&q| Circle::new(q, 3, c.filled())))?;
            }
            if si == 0 && mi == 0 {
                ch.configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()?;
            }
        }
    }
    root.present()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}
