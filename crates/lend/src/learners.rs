//! Per-vSSD learned predictors fed one window of samples at a time: what the
//! learned lending policy ([`crate::Predicted`], regular vSSDs, predicting
//! what they leave spare) and harvest tenants' demand
//! ([`crate::DemandPredictors`], predicting what they will need) share. Only
//! the predictors' side ([`Role`]) differs.

use std::collections::BTreeMap;

use clock::Nanos;
use predict::{
    Prediction, Predictor, PredictorConfig, QuantilePriors, Role, VssdPredictor, WindowStats,
};

use crate::{HomeSample, PolicyError};

/// One vSSD's predictors and the samples of its current window.
#[derive(Debug)]
struct Learner {
    p: VssdPredictor,
    /// (bandwidth, IOPS, utilisation) fractions sampled in this window.
    samples: Vec<(f32, f32, f32)>,
    window_start: Nanos,
    /// Channels the vSSD owns.
    channels: u32,
}

/// The predictors of a set of vSSDs, all on one side.
#[derive(Debug)]
pub(crate) struct Learners {
    cfg: PredictorConfig,
    /// What every new vSSD's quantile models start from (empty: nothing).
    priors: QuantilePriors,
    window: Nanos,
    role: Role,
    vssds: BTreeMap<u64, Learner>,
    latest: BTreeMap<u64, Prediction>,
}

impl Learners {
    /// Predictors on side `role` with `cfg`, fed one window every `window`,
    /// each new vSSD's quantile models starting from `priors`.
    pub(crate) fn new(
        cfg: PredictorConfig,
        window: Nanos,
        role: Role,
        priors: QuantilePriors,
    ) -> Self {
        Self {
            cfg,
            priors,
            window,
            role,
            vssds: BTreeMap::new(),
            latest: BTreeMap::new(),
        }
    }

    /// The predictors' configuration.
    pub(crate) fn cfg(&self) -> &PredictorConfig {
        &self.cfg
    }

    /// Adds this period's samples (a vSSD not sampled is forgotten), feeds a
    /// window to every vSSD whose window is full, then predicts for all of
    /// them in one batched pass.
    pub(crate) fn observe(
        &mut self,
        now: Nanos,
        samples: &[HomeSample],
    ) -> Result<(), PolicyError> {
        self.vssds
            .retain(|k, _| samples.iter().any(|h| h.home == *k));
        for s in samples {
            let l = match self.vssds.entry(s.home) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(Learner {
                    p: VssdPredictor::with_priors(&self.cfg, self.role, s.home, &self.priors)
                        .map_err(|source| PolicyError::Predictor {
                            home: s.home,
                            source,
                        })?,
                    samples: Vec::new(),
                    window_start: now,
                    channels: s.channels,
                }),
            };
            l.channels = s.channels;
            let frac = |x: f32| x.clamp(0.0, 1.0);
            l.samples.push((frac(s.bw), frac(s.iops), frac(s.util)));
            if now.saturating_sub(l.window_start) >= self.window {
                let w = window_stats(&l.samples);
                l.p.observe(now, &w)
                    .map_err(|source| PolicyError::Predictor {
                        home: s.home,
                        source,
                    })?;
                l.samples.clear();
                l.window_start = now;
            }
        }
        let keys: Vec<u64> = self.vssds.keys().copied().collect();
        let ps: Vec<&VssdPredictor> = self.vssds.values().map(|l| &l.p).collect();
        let out = predict::predict_batch(&ps, now).map_err(|source| PolicyError::Predictor {
            home: keys.first().copied().unwrap_or(0),
            source,
        })?;
        self.latest = keys.into_iter().zip(out).collect();
        Ok(())
    }

    /// The latest prediction for `vssd` and the channels it owns.
    pub(crate) fn latest(&self, vssd: u64) -> Option<(Prediction, u32)> {
        Some((*self.latest.get(&vssd)?, self.vssds.get(&vssd)?.channels))
    }

    /// Every latest prediction, by vSSD key.
    pub(crate) fn predictions(&self) -> Vec<(u64, Prediction)> {
        self.latest.iter().map(|(&k, &p)| (k, p)).collect()
    }
}

fn window_stats(samples: &[(f32, f32, f32)]) -> WindowStats {
    let n = samples.len() as f32;
    let col = |f: fn(&(f32, f32, f32)) -> f32| {
        let max = samples.iter().map(f).fold(0.0, f32::max);
        let min = samples.iter().map(f).fold(1.0, f32::min);
        (max, min, samples.iter().map(f).sum::<f32>() / n)
    };
    let (bw_max, bw_min, bw_avg) = col(|s| s.0);
    let (iops_max, iops_min, iops_avg) = col(|s| s.1);
    let (util_max, util_min, util_avg) = col(|s| s.2);
    WindowStats {
        bw_max,
        bw_min,
        bw_avg,
        iops_max,
        iops_min,
        iops_avg,
        util_max,
        util_min,
        util_avg,
    }
}
