//! The per-vSSD predictor: bandwidth and capacity level predictors, their duration
//! predictors, the duration selector and provisioning, behind the [`Predictor`] trait.

use std::sync::Arc;

use clock::Nanos;

use crate::config::{Model, PredictorConfig};
use crate::lstm::Lstm;
use crate::model::{duration_model, level_model, DurationModel, LevelModel};
use crate::provision::over_provision;
use crate::quantile::{DurationPrior, LevelPrior, QuantileDuration, QuantileLevel};
use crate::PredictError;

/// Priors of the quantile model (`model = "quantile"`) for a vSSD's two
/// resources, fitted offline on other vSSDs' level series
/// ([`LevelPrior::fit`], [`DurationPrior::fit`]). The default, no prior, is
/// the model learned online from the vSSD alone (what the daemon runs).
#[derive(Debug, Clone, Default)]
pub struct QuantilePriors {
    /// Next-level distributions of bandwidth.
    pub bandwidth: Option<Arc<LevelPrior>>,
    /// Next-level distributions of capacity.
    pub capacity: Option<Arc<LevelPrior>>,
    /// Run lengths of bandwidth at or below each level.
    pub bandwidth_runs: Option<Arc<DurationPrior>>,
    /// Run lengths of capacity at or below each level.
    pub capacity_runs: Option<Arc<DurationPrior>>,
}

impl QuantilePriors {
    /// Whether no prior is set.
    pub fn is_empty(&self) -> bool {
        self.bandwidth.is_none()
            && self.capacity.is_none()
            && self.bandwidth_runs.is_none()
            && self.capacity_runs.is_none()
    }
}

/// Statistics of one window of a vSSD's I/O, each as a fraction (0..=1) of the vSSD's
/// full scale: bandwidth of its provisioned bandwidth (channels × channel bandwidth),
/// IOPS of its IOPS ceiling, utilisation of its capacity.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowStats {
    /// Highest bandwidth in the window.
    pub bw_max: f32,
    /// Lowest bandwidth in the window.
    pub bw_min: f32,
    /// Average bandwidth over the window.
    pub bw_avg: f32,
    /// Highest IOPS in the window.
    pub iops_max: f32,
    /// Lowest IOPS in the window.
    pub iops_min: f32,
    /// Average IOPS over the window.
    pub iops_avg: f32,
    /// Highest utilisation (used share of capacity) in the window.
    pub util_max: f32,
    /// Lowest utilisation in the window.
    pub util_min: f32,
    /// Average utilisation over the window.
    pub util_avg: f32,
}

impl WindowStats {
    /// Stats of a window where everything is constant (one sample).
    pub fn flat(bw: f32, iops: f32, util: f32) -> Self {
        Self {
            bw_max: bw,
            bw_min: bw,
            bw_avg: bw,
            iops_max: iops,
            iops_min: iops,
            iops_avg: iops,
            util_max: util,
            util_min: util,
            util_avg: util,
        }
    }

    fn bw_features(&self) -> Vec<f32> {
        vec![
            self.bw_max,
            self.bw_min,
            self.bw_avg,
            self.iops_max,
            self.iops_min,
            self.iops_avg,
        ]
    }
}

/// The level (0..=`levels`) a fraction needs: the smallest level whose share covers it.
pub fn level_of(frac: f32, levels: u32) -> u32 {
    ((frac.clamp(0.0, 1.0) * levels as f32 - 1e-4)
        .ceil()
        .max(0.0) as u32)
        .min(levels)
}

/// Which side of harvesting a vSSD is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A harvest VM: predict its demand (over-provision; selector takes the longer duration).
    Demand,
    /// A regular VM: predict what it leaves spare (under-provision; selector takes the shorter).
    Harvestable,
}

/// One prediction for a vSSD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    /// Predicted bandwidth usage in channels after provisioning (`0..=levels`).
    pub bandwidth: u32,
    /// Predicted capacity usage in levels (sixteenths by default) after provisioning.
    pub capacity: u32,
    /// Channels that can be harvested (`levels - bandwidth`; meaningful for [`Role::Harvestable`]).
    pub spare_bandwidth: u32,
    /// Capacity levels that can be harvested (`levels - capacity`).
    pub spare_capacity: u32,
    /// How long the prediction holds, after provisioning and the selector.
    pub duration: Nanos,
    /// False until the models have enough history; the prediction is then the
    /// conservative one (full demand, nothing spare, zero duration).
    pub warm: bool,
}

/// What the daemon's harvester and the fleet simulator call per vSSD.
pub trait Predictor {
    /// Feeds the statistics of the window ending at `now` (call once per window).
    fn observe(&mut self, now: Nanos, w: &WindowStats) -> Result<(), PredictError>;
    /// The current prediction of usage and its duration, as of `now`.
    fn predict(&self, now: Nanos) -> Result<Prediction, PredictError>;
}

/// The full BlockFlex predictor of one vSSD.
#[derive(Debug)]
pub struct VssdPredictor {
    cfg: PredictorConfig,
    role: Role,
    bw: Box<dyn LevelModel>,
    cap: Box<dyn LevelModel>,
    bw_dur: Box<dyn DurationModel>,
    cap_dur: Box<dyn DurationModel>,
    last_util: Option<f32>,
}

impl VssdPredictor {
    /// A predictor for a vSSD on side `role`; `seed` varies the initial weights
    /// (deterministic for a given seed).
    pub fn new(cfg: &PredictorConfig, role: Role, seed: u64) -> Result<Self, PredictError> {
        Self::with_priors(cfg, role, seed, &QuantilePriors::default())
    }

    /// As [`VssdPredictor::new`], with the quantile model's priors (learned
    /// from other vSSDs). Priors need `model = "quantile"`.
    pub fn with_priors(
        cfg: &PredictorConfig,
        role: Role,
        seed: u64,
        priors: &QuantilePriors,
    ) -> Result<Self, PredictError> {
        cfg.validate()?;
        if !priors.is_empty() {
            if cfg.model != Model::Quantile {
                return Err(PredictError::Config(
                    "priors are for model = \"quantile\" only".into(),
                ));
            }
            return Ok(Self {
                cfg: cfg.clone(),
                role,
                bw: Box::new(QuantileLevel::new(cfg, priors.bandwidth.clone())?),
                cap: Box::new(QuantileLevel::new(cfg, priors.capacity.clone())?),
                bw_dur: Box::new(QuantileDuration::new(cfg, priors.bandwidth_runs.clone())?),
                cap_dur: Box::new(QuantileDuration::new(cfg, priors.capacity_runs.clone())?),
                last_util: None,
            });
        }
        let s = cfg.seed ^ seed.wrapping_mul(0x9E37_79B9);
        Ok(Self {
            cfg: cfg.clone(),
            role,
            bw: level_model(cfg, &cfg.bandwidth, 6, s)?,
            cap: level_model(cfg, &cfg.capacity, 4, s.wrapping_add(1))?,
            bw_dur: duration_model(cfg, s.wrapping_add(2))?,
            cap_dur: duration_model(cfg, s.wrapping_add(3))?,
            last_util: None,
        })
    }

    /// The side this predictor is on.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Bytes of model state held (weights and Adam moments of every model).
    pub fn model_bytes(&self) -> usize {
        self.bw.model_bytes()
            + self.cap.model_bytes()
            + self.bw_dur.model_bytes()
            + self.cap_dur.model_bytes()
    }

    fn finish(
        &self,
        now: Nanos,
        bw: Option<u32>,
        cap: Option<u32>,
        bw_d: Nanos,
        cap_d: Nanos,
    ) -> Prediction {
        let l = self.cfg.levels;
        let (Some(b), Some(c)) = (bw, cap) else {
            return Prediction {
                bandwidth: l,
                capacity: l,
                spare_bandwidth: 0,
                spare_capacity: 0,
                duration: 0,
                warm: false,
            };
        };
        let _ = now;
        let r = self.cfg.ratio;
        let (b, c) = (over_provision(b, r, l), over_provision(c, r, l));
        let duration = match self.role {
            Role::Demand => ((bw_d.max(cap_d) as f64) * (1.0 + r)) as Nanos,
            Role::Harvestable => ((bw_d.min(cap_d) as f64) / (1.0 + r)) as Nanos,
        };
        Prediction {
            bandwidth: b,
            capacity: c,
            spare_bandwidth: l - b,
            spare_capacity: l - c,
            duration,
            warm: true,
        }
    }
}

impl Predictor for VssdPredictor {
    fn observe(&mut self, now: Nanos, w: &WindowStats) -> Result<(), PredictError> {
        let l = self.cfg.levels;
        let change = self.last_util.map_or(0.0, |p| w.util_avg - p);
        self.last_util = Some(w.util_avg);
        let (bl, cl) = (level_of(w.bw_max, l), level_of(w.util_max, l));
        self.bw.observe(now, w.bw_features(), bl)?;
        self.cap
            .observe(now, vec![w.util_max, w.util_min, w.util_avg, change], cl)?;
        self.bw_dur.observe(now, bl)?;
        self.cap_dur.observe(now, cl)?;
        Ok(())
    }

    fn predict(&self, now: Nanos) -> Result<Prediction, PredictError> {
        let (b, c) = (self.bw.predict()?, self.cap.predict()?);
        let l = self.cfg.levels;
        let bd = self
            .bw_dur
            .predict(over_provision(b.unwrap_or(l), self.cfg.ratio, l), now)?;
        let cd = self
            .cap_dur
            .predict(over_provision(c.unwrap_or(l), self.cfg.ratio, l), now)?;
        Ok(self.finish(now, b, c, bd, cd))
    }
}

/// Predicts for many vSSDs at once: the inputs of all of them are stacked into one
/// tensor, and so are the weights of their models, so each of the four predictors
/// runs one forward pass for the whole batch instead of one per vSSD. Gives the same
/// result as calling [`Predictor::predict`] on each.
pub fn predict_batch(ps: &[&VssdPredictor], now: Nanos) -> Result<Vec<Prediction>, PredictError> {
    let levels = |get: &dyn Fn(&VssdPredictor) -> &dyn LevelModel| -> Result<Vec<Option<u32>>, PredictError> {
        let mut idx = Vec::new();
        let mut models: Vec<(&Lstm, usize)> = Vec::new();
        let mut xs = Vec::new();
        let mut t = 0;
        for (k, p) in ps.iter().enumerate() {
            let Some(lp) = get(p).as_lstm() else { continue };
            if let Some(x) = lp.input() {
                if models.is_empty() {
                    t = lp.seq_len();
                }
                if models.first().is_none_or(|m| m.0.same_shape(&lp.model)) && lp.seq_len() == t {
                    idx.push(k);
                    models.push((&lp.model, 0));
                    xs.extend(x);
                }
            }
        }
        let mut out: Vec<Option<u32>> = vec![None; ps.len()];
        if !idx.is_empty() {
            for (k, v) in idx.iter().zip(Lstm::predict_many(&models, xs, t)?) {
                out[*k] = Some(v as u32);
            }
        }
        // Any left out for a shape mismatch (different configs) go one by one.
        for (k, p) in ps.iter().enumerate() {
            if out[k].is_none() {
                out[k] = get(p).predict()?;
            }
        }
        Ok(out)
    };
    let bws = levels(&|p| p.bw.as_ref())?;
    let caps = levels(&|p| p.cap.as_ref())?;
    let durs = |get: &dyn Fn(&VssdPredictor) -> &dyn DurationModel,
                lv: &[Option<u32>]|
     -> Result<Vec<Nanos>, PredictError> {
        let mut out = vec![0; ps.len()];
        let mut idx = Vec::new();
        let mut models: Vec<(&Lstm, usize)> = Vec::new();
        let mut xs = Vec::new();
        let mut h = 0;
        for (k, p) in ps.iter().enumerate() {
            let l = over_provision(lv[k].unwrap_or(p.cfg.levels), p.cfg.ratio, p.cfg.levels);
            let d = get(p);
            let ready = d
                .as_lstm()
                .and_then(|dp| dp.ready(l, now).map(|r| (dp.history(), r)));
            match ready {
                Some((hist, (m, x)))
                    if models
                        .first()
                        .is_none_or(|f| f.0.same_shape(m.0) && hist == h) =>
                {
                    h = hist;
                    idx.push(k);
                    models.push(m);
                    xs.extend(x);
                }
                _ => out[k] = d.predict(l, now)?,
            }
        }
        if !idx.is_empty() {
            for (k, y) in idx.iter().zip(Lstm::predict_many(&models, xs, h)?) {
                let dp = get(ps[*k]).as_lstm().expect("batched ones are LSTMs");
                out[*k] = dp.denorm(y);
            }
        }
        Ok(out)
    };
    let bd = durs(&|p| p.bw_dur.as_ref(), &bws)?;
    let cd = durs(&|p| p.cap_dur.as_ref(), &caps)?;
    Ok(ps
        .iter()
        .enumerate()
        .map(|(k, p)| p.finish(now, bws[k], caps[k], bd[k], cd[k]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::SEC;

    fn feed(p: &mut VssdPredictor, n: u64, phase: u64) {
        for i in 0..n {
            let busy = ((i + phase) / 20).is_multiple_of(2);
            let bw = if busy { 0.5 } else { 0.125 };
            p.observe(i * 18 * SEC, &WindowStats::flat(bw, bw, 0.25))
                .unwrap();
        }
    }

    #[test]
    fn cold_predictor_is_conservative_then_warms() {
        let cfg = PredictorConfig::default();
        let mut p = VssdPredictor::new(&cfg, Role::Harvestable, 1).unwrap();
        let c = p.predict(0).unwrap();
        assert!(!c.warm);
        assert_eq!((c.bandwidth, c.spare_bandwidth, c.duration), (16, 0, 0));
        feed(&mut p, 60, 0);
        let w = p.predict(60 * 18 * SEC).unwrap();
        assert!(w.warm);
        assert_eq!(w.bandwidth + w.spare_bandwidth, 16);
        assert!(p.model_bytes() > 0);
    }

    #[test]
    fn batch_equals_one_by_one() {
        let cfg = PredictorConfig::default();
        let mut ps: Vec<VssdPredictor> = (0..5)
            .map(|k| {
                VssdPredictor::new(
                    &cfg,
                    if k % 2 == 0 {
                        Role::Demand
                    } else {
                        Role::Harvestable
                    },
                    k,
                )
                .unwrap()
            })
            .collect();
        for (k, p) in ps.iter_mut().enumerate() {
            feed(p, 40 + 7 * k as u64, k as u64 * 3);
        }
        let now = 100 * 18 * SEC;
        let refs: Vec<&VssdPredictor> = ps.iter().collect();
        let batch = predict_batch(&refs, now).unwrap();
        for (p, b) in ps.iter().zip(&batch) {
            let one = p.predict(now).unwrap();
            assert_eq!(one.bandwidth, b.bandwidth);
            assert_eq!(one.capacity, b.capacity);
            let (x, y) = (one.duration as f64, b.duration as f64);
            assert!((x - y).abs() <= 1e-3 * x.max(1.0) + 1e6, "{x} vs {y}");
        }
    }

    #[test]
    fn quantile_model_is_selectable_and_batches_with_lstms() {
        let q = PredictorConfig {
            model: crate::config::Model::Quantile,
            ..Default::default()
        };
        let mut a = VssdPredictor::new(&q, Role::Harvestable, 1).unwrap();
        let mut b = VssdPredictor::new(&PredictorConfig::default(), Role::Harvestable, 2).unwrap();
        assert!(!a.predict(0).unwrap().warm);
        feed(&mut a, 60, 0);
        feed(&mut b, 60, 0);
        let now = 60 * 18 * SEC;
        let one = a.predict(now).unwrap();
        assert!(one.warm && one.bandwidth + one.spare_bandwidth == 16);
        let batch = predict_batch(&[&a, &b, &a], now).unwrap();
        assert_eq!(batch[0], one);
        assert_eq!(batch[2], one);
        assert_eq!(batch[1].bandwidth, b.predict(now).unwrap().bandwidth);
        assert!(a.model_bytes() < b.model_bytes() / 10);
    }

    #[test]
    fn priors_start_the_quantile_model_and_are_refused_for_the_lstms() {
        let q = PredictorConfig {
            model: crate::config::Model::Quantile,
            ..Default::default()
        };
        // Other vSSDs stayed at level 1 of both resources for runs of 31
        // windows, then peaked at 9 for one.
        let series: Vec<u32> = (0..64).map(|i| if i % 32 == 31 { 9 } else { 1 }).collect();
        let priors = QuantilePriors {
            bandwidth: Some(Arc::new(LevelPrior::fit(16, [series.as_slice()]))),
            capacity: Some(Arc::new(LevelPrior::fit(16, [series.as_slice()]))),
            bandwidth_runs: Some(Arc::new(DurationPrior::fit(
                16,
                q.duration.cap_s(),
                [(series.as_slice(), 1020.0)],
            ))),
            capacity_runs: Some(Arc::new(DurationPrior::fit(
                16,
                q.duration.cap_s(),
                [(series.as_slice(), 1020.0)],
            ))),
        };
        assert!(!priors.is_empty() && QuantilePriors::default().is_empty());
        let mut with = VssdPredictor::with_priors(&q, Role::Harvestable, 1, &priors).unwrap();
        let mut without = VssdPredictor::new(&q, Role::Harvestable, 1).unwrap();
        // One short run of its own at level 1, and a new one starting: alone,
        // one run is too few to promise anything at the 15% quantile; with
        // the prior's runs it is not.
        let at = |l: f32| WindowStats {
            bw_max: l / 16.0,
            util_max: l / 16.0,
            util_avg: l / 16.0,
            ..WindowStats::default()
        };
        let mut now = 0;
        for l in [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 9.0, 1.0] {
            with.observe(now, &at(l)).unwrap();
            without.observe(now, &at(l)).unwrap();
            now += 1020 * SEC;
        }
        assert_eq!(without.predict(now).unwrap().duration, 0);
        assert!(with.predict(now).unwrap().duration > 0);
        assert!(matches!(
            VssdPredictor::with_priors(&PredictorConfig::default(), Role::Harvestable, 1, &priors),
            Err(PredictError::Config(_))
        ));
    }

    #[test]
    fn levels_round_up() {
        assert_eq!(level_of(0.0, 16), 0);
        assert_eq!(level_of(1.0 / 16.0, 16), 1);
        assert_eq!(level_of(0.07, 16), 2);
        assert_eq!(level_of(1.5, 16), 16);
    }
}
