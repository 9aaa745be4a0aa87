//! The learned policy (BlockFlex §4.4): every home's bandwidth, IOPS and
//! utilisation, sampled each period as fractions of what it owns, feed its LSTM
//! predictors one window every `window`; a warm home lends the predicted spare
//! share of its capacity on the predicted spare channels, for the predicted
//! duration.
//!
//! All predictions are made once per period, in one batched forward pass
//! (`predict::predict_batch`), right after the predictors learned: `offer`,
//! `expiry` and `predictions` read that result.

use std::collections::BTreeMap;

use clock::Nanos;
use predict::{
    Prediction, Predictor, PredictorConfig, QuantilePriors, Role, VssdPredictor, WindowStats,
};

use crate::{HomeSample, LendPolicy, Lendable, Offer, PolicyError};

/// One home's predictors and the samples of its current window.
#[derive(Debug)]
struct Home {
    p: VssdPredictor,
    /// (bandwidth, IOPS, utilisation) fractions sampled in this window.
    samples: Vec<(f32, f32, f32)>,
    window_start: Nanos,
    /// Channels the home owns.
    channels: u32,
}

/// Lends what each home's learned predictors say is spare.
#[derive(Debug)]
pub struct Predicted {
    cfg: PredictorConfig,
    priors: QuantilePriors,
    window: Nanos,
    homes: BTreeMap<u64, Home>,
    latest: BTreeMap<u64, Prediction>,
}

impl Predicted {
    /// Predictors with `cfg`, fed one window of samples every `window`.
    pub fn new(cfg: PredictorConfig, window: Nanos) -> Self {
        Self::with_priors(cfg, window, QuantilePriors::default())
    }

    /// As [`Predicted::new`], every home's quantile model starting from
    /// `priors` (learned from other homes; `model = "quantile"` only, else
    /// the first `observe` fails).
    pub fn with_priors(cfg: PredictorConfig, window: Nanos, priors: QuantilePriors) -> Self {
        Self {
            cfg,
            priors,
            window,
            homes: BTreeMap::new(),
            latest: BTreeMap::new(),
        }
    }

    /// (channels, share of capacity, duration) a home's prediction leaves spare.
    fn spare(&self, home: u64) -> Option<(u32, f64, Nanos)> {
        let p = self.latest.get(&home)?;
        let nch = f64::from(self.homes.get(&home)?.channels);
        let levels = f64::from(self.cfg.levels.max(1));
        let channels = (f64::from(p.spare_bandwidth) / levels * nch).floor() as u32;
        let share = f64::from(p.spare_capacity) / levels;
        (p.warm && channels > 0 && share > 0.0 && p.duration > 0)
            .then_some((channels, share, p.duration))
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

impl LendPolicy for Predicted {
    fn name(&self) -> &str {
        "predicted"
    }

    fn observe(&mut self, now: Nanos, homes: &[HomeSample]) -> Result<(), PolicyError> {
        self.homes.retain(|k, _| homes.iter().any(|h| h.home == *k));
        for s in homes {
            let h = match self.homes.entry(s.home) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(Home {
                    p: VssdPredictor::with_priors(
                        &self.cfg,
                        Role::Harvestable,
                        s.home,
                        &self.priors,
                    )
                    .map_err(|source| PolicyError::Predictor {
                        home: s.home,
                        source,
                    })?,
                    samples: Vec::new(),
                    window_start: now,
                    channels: s.channels,
                }),
            };
            h.channels = s.channels;
            let frac = |x: f32| x.clamp(0.0, 1.0);
            h.samples.push((frac(s.bw), frac(s.iops), frac(s.util)));
            if now.saturating_sub(h.window_start) >= self.window {
                let w = window_stats(&h.samples);
                h.p.observe(now, &w)
                    .map_err(|source| PolicyError::Predictor {
                        home: s.home,
                        source,
                    })?;
                h.samples.clear();
                h.window_start = now;
            }
        }
        let keys: Vec<u64> = self.homes.keys().copied().collect();
        let ps: Vec<&VssdPredictor> = self.homes.values().map(|h| &h.p).collect();
        let out = predict::predict_batch(&ps, now).map_err(|source| PolicyError::Predictor {
            home: keys.first().copied().unwrap_or(0),
            source,
        })?;
        self.latest = keys.into_iter().zip(out).collect();
        Ok(())
    }

    fn offer(&mut self, _now: Nanos, home: &Lendable<'_>) -> Option<Offer> {
        let (n, share, lasts) = self.spare(home.home)?;
        // The predicted spare share of the whole home, on its first `n`
        // channels, never beyond what each of them can spare.
        let n = n.min(home.per_channel.len() as u32);
        if n == 0 {
            return None;
        }
        let by_share = (share * f64::from(home.extent_blocks) * f64::from(home.channels)
            / f64::from(n))
        .floor() as u64;
        let units = home.units.max(1) * u64::from(n);
        let per_unit = home.per_unit(n, by_share * units);
        Some(Offer {
            channels: n,
            blocks: per_unit * units,
            lasts,
        })
    }

    fn expiry(&mut self, now: Nanos, home: u64) -> Option<Nanos> {
        self.latest.get(&home).filter(|p| p.warm)?;
        Some(
            self.spare(home)
                .map_or(now, |(_, _, lasts)| now.saturating_add(lasts)),
        )
    }

    fn predictions(&self) -> Vec<(u64, Prediction)> {
        self.latest.iter().map(|(&k, &p)| (k, p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::SEC;

    #[test]
    fn cold_predictors_lend_nothing_and_homes_that_leave_are_forgotten() {
        let cfg = PredictorConfig::default();
        let mut p = Predicted::new(cfg, SEC);
        let per = [(0, 20), (1, 20), (2, 20), (3, 20)];
        let home = Lendable {
            home: 7,
            channels: 4,
            blocks: 4 * 32,
            extent_blocks: 32,
            units: 1,
            chunk_blocks: 1,
            per_channel: &per,
        };
        let idle = HomeSample {
            home: 7,
            channels: 4,
            blocks: 4 * 32,
            used_channels: 0,
            used_blocks: 8,
            bw: 0.0,
            iops: 0.0,
            util: 0.06,
        };
        p.observe(0, &[idle]).unwrap();
        assert_eq!(p.offer(0, &home), None, "cold");
        assert_eq!(p.expiry(0, 7), None, "cold predictors leave expiries alone");
        // Lending once warm is the daemon's test (control: the predicted
        // policy lends what it predicts spare); here, what the policy keeps.
        for t in 1..5u64 {
            p.observe(t * SEC, &[idle]).unwrap();
        }
        assert_eq!(p.predictions().len(), 1);
        p.observe(300 * SEC, &[]).unwrap();
        assert!(p.predictions().is_empty(), "a home that left is forgotten");
    }
}
