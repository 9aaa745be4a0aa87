//! The predicted policy (BlockFlex §4.4): every home's bandwidth, IOPS and
//! utilisation, sampled at each period as fractions of what it bought, feed its
//! LSTM predictors one window every `window_s`; a warm home lends the predicted
//! spare share of its capacity on the predicted spare channels, for the
//! predicted duration.
//!
//! All predictions are made once per period, in one batched forward pass
//! (`predict::predict_batch`), right after the predictors learned: `offer`,
//! `expiry` and `harvest status` read that result.

use std::collections::BTreeMap;

use clock::{Nanos, SEC};
use predict::{Prediction, Predictor, PredictorConfig, Role, VssdPredictor, WindowStats};

use super::{HomeSample, LendPolicy, Lendable, Offer, PredictionInfo};
use crate::config::HarvestSettings;
use crate::{ControlError, Result};

/// One home's predictors and the samples of its current window.
#[derive(Debug)]
struct Home {
    p: VssdPredictor,
    /// Time, bytes and requests at the previous sample.
    last: (Nanos, u64, u64),
    /// (bandwidth, IOPS, utilisation) fractions sampled in this window.
    samples: Vec<(f32, f32, f32)>,
    window_start: Nanos,
    /// Channels the home owns.
    channels: usize,
}

/// Lends what each home's learned predictors say is spare.
#[derive(Debug)]
pub struct Predicted {
    cfg: PredictorConfig,
    window: Nanos,
    homes: BTreeMap<String, Home>,
    latest: BTreeMap<String, Prediction>,
}

impl Predicted {
    /// The policy of `[harvest] policy = "predicted"`.
    pub fn new(s: &HarvestSettings) -> Self {
        Self {
            cfg: s.predictor.clone(),
            window: s.window_s.saturating_mul(SEC),
            homes: BTreeMap::new(),
            latest: BTreeMap::new(),
        }
    }

    /// (channels, share of capacity, duration) a prediction leaves spare.
    fn spare(&self, home: &str) -> Option<(u32, f64, Nanos)> {
        let p = self.latest.get(home)?;
        let nch = self.homes.get(home)?.channels as f64;
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
    fn observe(&mut self, now: Nanos, homes: &[HomeSample]) -> Result<()> {
        self.homes.retain(|n, _| homes.iter().any(|h| &h.name == n));
        for s in homes {
            let h = match self.homes.entry(s.name.clone()) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(Home {
                    p: VssdPredictor::new(&self.cfg, Role::Harvestable, s.id).map_err(|e| {
                        ControlError::Predictor {
                            vssd: s.name.clone(),
                            message: e.to_string(),
                        }
                    })?,
                    last: (now, s.bytes, s.ops),
                    samples: Vec::new(),
                    window_start: now,
                    channels: 0,
                }),
            };
            h.channels = s.channels;
            let (t0, b0, o0) = h.last;
            if now > t0 {
                let dt = (now - t0) as f64 / 1e9;
                let frac = |x: f64| x.clamp(0.0, 1.0) as f32;
                h.samples.push((
                    frac(s.bytes.saturating_sub(b0) as f64 / dt / s.bw_full),
                    frac(s.ops.saturating_sub(o0) as f64 / dt / s.iops_full),
                    frac(s.util),
                ));
                h.last = (now, s.bytes, s.ops);
            }
            if now.saturating_sub(h.window_start) >= self.window && !h.samples.is_empty() {
                let w = window_stats(&h.samples);
                h.p.observe(now, &w).map_err(|e| ControlError::Predictor {
                    vssd: s.name.clone(),
                    message: e.to_string(),
                })?;
                h.samples.clear();
                h.window_start = now;
            }
        }
        let names: Vec<&String> = self.homes.keys().collect();
        let ps: Vec<&VssdPredictor> = self.homes.values().map(|h| &h.p).collect();
        let out = predict::predict_batch(&ps, now).map_err(|e| ControlError::Predictor {
            vssd: "(batch)".into(),
            message: e.to_string(),
        })?;
        self.latest = names.into_iter().cloned().zip(out).collect();
        Ok(())
    }

    fn offer(&mut self, _now: Nanos, home: &Lendable<'_>) -> Option<Offer> {
        let (n, share, lasts) = self.spare(home.name)?;
        // The predicted spare share of the whole vSSD, on its first `n`
        // channels, never beyond what the FTL can spare.
        let on = &home.per_channel[..home.per_channel.len().min(n as usize)];
        let per_plane = on.iter().map(|&(_, b)| b).min()?;
        let by_share =
            (share * f64::from(home.extent_blocks) * home.channels as f64 / f64::from(n)).floor();
        Some(Offer {
            channels: on.len(),
            per_plane: (by_share as u64).min(u64::from(per_plane)),
            lasts,
        })
    }

    fn expiry(&mut self, now: Nanos, home: &str) -> Option<Nanos> {
        self.latest.get(home).filter(|p| p.warm)?;
        Some(
            self.spare(home)
                .map_or(now, |(_, _, lasts)| now.saturating_add(lasts)),
        )
    }

    fn predictions(&self, _now: Nanos) -> BTreeMap<String, PredictionInfo> {
        self.latest
            .iter()
            .map(|(n, p)| {
                (
                    n.clone(),
                    PredictionInfo {
                        warm: p.warm,
                        bandwidth_level: p.bandwidth,
                        capacity_level: p.capacity,
                        spare_levels: (p.spare_bandwidth, p.spare_capacity),
                        duration_s: p.duration / SEC,
                    },
                )
            })
            .collect()
    }
}
