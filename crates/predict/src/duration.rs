//! Duration predictors: how long a level lasts.
//!
//! One sub-predictor per level `i` (paper §4.4.2): it learns how long "usage stays at
//! or below `i`" lasts, from the history of past such runs. That one quantity serves
//! both sides: for a harvest VM, a demand of `i` is satisfied while its usage stays at
//! or below `i`; for a regular VM, `levels - i` spare units stay harvestable while its
//! usage stays at or below `i`.
//!
//! The input of sub-predictor `i` is the last `history` completed run lengths at `i`,
//! each paired with the time already spent in the current run; the output is the
//! remaining time of the current run, as a fraction of the cap (`max_units` ×
//! `time_unit_s`, the artifact's 12.5 hours). Samples are taken once per training
//! period while a run is on; they become labelled when the run ends (or when it has
//! lasted past the cap), and each sub-predictor takes `epochs` Adam steps on its
//! latest `train_samples` labelled samples in every period that brought new labels.

use std::collections::VecDeque;

use clock::{Nanos, SEC};

use crate::cell::{Adam, Job, Loss, Scratch};
use crate::config::{DurationLoss, PredictorConfig};
use crate::level::secs;
use crate::lstm::{Head, Lstm};
use crate::PredictError;

#[derive(Debug)]
pub(crate) struct Sub {
    run_start: Option<Nanos>,
    completed: VecDeque<f32>,
    pending: VecDeque<(Nanos, Vec<f32>)>,
    labelled: VecDeque<(Vec<f32>, f32)>,
    new_labels: usize,
    trained: bool,
}

/// Per-level duration sub-predictors for one resource (bandwidth or capacity).
#[derive(Debug)]
pub struct DurationPredictor {
    /// The sub-predictors' models, one per level.
    pub(crate) models: Vec<Lstm>,
    pub(crate) subs: Vec<Sub>,
    history: usize,
    cap: Nanos,
    every: Nanos,
    last_tick: Option<Nanos>,
    train_samples: usize,
    epochs: usize,
    /// Training by hand (`cell.rs`): each sub-predictor's Adam state, the
    /// loss, the learning rate, reusable buffers. `None`: through candle.
    by_hand: Option<ByHand>,
}

#[derive(Debug)]
struct ByHand {
    adams: Vec<Adam>,
    loss: Loss,
    lr: f64,
    scratch: Scratch,
}

impl DurationPredictor {
    /// Sub-predictors for levels `0..=cfg.levels`, weights seeded from `seed`.
    pub fn new(cfg: &PredictorConfig, seed: u64) -> Result<Self, PredictError> {
        let d = &cfg.duration;
        if d.history == 0 || d.hidden == 0 || d.max_units == 0 || d.time_unit_s <= 0.0 {
            return Err(PredictError::Config(
                "duration history, hidden, max_units and time_unit_s must be positive".into(),
            ));
        }
        let head = match d.loss {
            DurationLoss::Mse => Head::Regression,
            DurationLoss::Pinball => Head::Pinball,
        };
        let n = cfg.levels as usize + 1;
        let models = (0..n as u64)
            .map(|i| {
                let mut m = Lstm::new(2, d.hidden, 1, head, d.lr, seed.wrapping_add(i * 7919))?;
                m.q = d.quantile.clamp(0.0, 1.0) as f32;
                if !d.autograd {
                    m.drop_optimizer();
                }
                Ok(m)
            })
            .collect::<Result<Vec<_>, PredictError>>()?;
        let subs = (0..n)
            .map(|_| {
                Ok(Sub {
                    run_start: None,
                    completed: VecDeque::new(),
                    pending: VecDeque::new(),
                    labelled: VecDeque::new(),
                    new_labels: 0,
                    trained: false,
                })
            })
            .collect::<Result<Vec<_>, PredictError>>()?;
        Ok(Self {
            models,
            subs,
            history: d.history,
            cap: secs(d.cap_s()),
            every: secs(cfg.train_every_s),
            last_tick: None,
            train_samples: d.train_samples.max(1),
            epochs: cfg.epochs.max(1),
            by_hand: (!d.autograd).then(|| ByHand {
                adams: vec![Adam::default(); n],
                loss: match d.loss {
                    DurationLoss::Mse => Loss::Mse,
                    DurationLoss::Pinball => Loss::Pinball(d.quantile.clamp(0.0, 1.0) as f32),
                },
                lr: d.lr,
                scratch: Scratch::default(),
            }),
        })
    }

    fn input(&self, i: usize, now: Nanos) -> Vec<f32> {
        let s = &self.subs[i];
        let elapsed = s.run_start.map_or(0.0, |st| {
            (now.saturating_sub(st) as f64 / self.cap as f64).min(1.0)
        }) as f32;
        let pad = self.history.saturating_sub(s.completed.len());
        let mut x = Vec::with_capacity(2 * self.history);
        for _ in 0..pad {
            x.extend([0.0, elapsed]);
        }
        for &d in s
            .completed
            .iter()
            .skip(s.completed.len().saturating_sub(self.history))
        {
            x.extend([d, elapsed]);
        }
        x
    }

    /// Records the level of the window ending at `now`; at each training period takes
    /// samples and trains the sub-predictors that have new labels.
    pub fn observe(&mut self, now: Nanos, level: u32) -> Result<(), PredictError> {
        let cap = self.cap;
        let keep = 4 * self.train_samples;
        for (i, s) in self.subs.iter_mut().enumerate() {
            if level as usize <= i {
                s.run_start.get_or_insert(now);
            } else if let Some(st) = s.run_start.take() {
                let d = now.saturating_sub(st).min(cap);
                s.completed.push_back(d as f32 / cap as f32);
                if s.completed.len() > 64 {
                    s.completed.pop_front();
                }
                for (t, x) in s.pending.drain(..) {
                    let rem = now.saturating_sub(t).min(cap);
                    s.labelled.push_back((x, rem as f32 / cap as f32));
                    s.new_labels += 1;
                }
            }
            // Runs already longer than the cap label their oldest samples as "cap".
            while let Some((t, _)) = s.pending.front() {
                if now.saturating_sub(*t) < cap {
                    break;
                }
                let (_, x) = s.pending.pop_front().expect("front");
                s.labelled.push_back((x, 1.0));
                s.new_labels += 1;
            }
            while s.labelled.len() > keep {
                s.labelled.pop_front();
            }
        }
        let due = self
            .last_tick
            .is_none_or(|l| now.saturating_sub(l) >= self.every);
        if !due {
            return Ok(());
        }
        self.last_tick = Some(now);
        let mut fresh = false;
        for i in 0..self.subs.len() {
            if self.subs[i].run_start.is_some() {
                let x = self.input(i, now);
                self.subs[i].pending.push_back((now, x));
            }
            fresh |= self.subs[i].new_labels > 0;
        }
        if !fresh {
            return Ok(());
        }
        let (b, w) = (self.train_samples, 2 * self.history);
        let chosen: Vec<usize> = (0..self.subs.len())
            .filter(|&i| self.subs[i].new_labels > 0)
            .collect();
        if let Some(hand) = &mut self.by_hand {
            // Each sub-predictor with new labels on its latest `train_samples`
            // (only the real ones: padding would add nothing to a gradient).
            let mut xs = Vec::with_capacity(b * w);
            let mut ys = Vec::with_capacity(b);
            for &i in &chosen {
                let s = &mut self.subs[i];
                s.new_labels = 0;
                s.trained = true;
                xs.clear();
                ys.clear();
                for (x, y) in s.labelled.iter().skip(s.labelled.len().saturating_sub(b)) {
                    xs.extend_from_slice(x);
                    ys.push(*y);
                }
                let model = &mut self.models[i];
                let cell = model.cell();
                let mut p = model.flat()?;
                let job = Job {
                    xs: &xs,
                    t: self.history,
                    ys: &ys,
                    batch: b,
                    loss: hand.loss,
                    lr: hand.lr,
                    epochs: self.epochs,
                };
                cell.train(&mut p, &mut hand.adams[i], &job, &mut hand.scratch);
                model.set_flat(&p)?;
            }
            return Ok(());
        }
        // Through candle: the sub-predictors with new labels train together,
        // each on its latest `train_samples` (padding masked out): one pass
        // instead of one per level.
        let m = chosen.len();
        let mut xs = vec![0f32; m * b * w];
        let mut ys = vec![0f32; m * b];
        let mut mask = vec![0f32; m * b];
        for (c, &i) in chosen.iter().enumerate() {
            let s = &mut self.subs[i];
            s.new_labels = 0;
            s.trained = true;
            let n = s.labelled.len().min(b);
            for (j, (x, y)) in s.labelled.iter().skip(s.labelled.len() - n).enumerate() {
                let k = c * b + j;
                xs[k * w..(k + 1) * w].copy_from_slice(x);
                ys[k] = *y;
                mask[k] = 1.0;
            }
        }
        let mut group: Vec<&mut Lstm> = self
            .models
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| chosen.contains(i))
            .map(|(_, m)| m)
            .collect();
        for _ in 0..self.epochs {
            Lstm::train_group(&mut group, &xs, self.history, b, &ys, &mask)?;
        }
        Ok(())
    }

    /// Predicted remaining time (nanoseconds, at most the cap) for which usage stays at
    /// or below `level`, as of `now`. Until its sub-predictor has trained: the mean
    /// past run at that level less the time already spent, or zero with no history.
    pub fn predict(&self, level: u32, now: Nanos) -> Result<Nanos, PredictError> {
        let i = (level as usize).min(self.subs.len() - 1);
        let s = &self.subs[i];
        if !s.trained {
            return Ok(self.fallback(i, now));
        }
        let y = self.models[i].predict(self.input(i, now), self.history)?;
        Ok(self.denorm(y))
    }

    pub(crate) fn fallback(&self, i: usize, now: Nanos) -> Nanos {
        let s = &self.subs[i];
        if s.completed.is_empty() {
            return 0;
        }
        let mean = s.completed.iter().sum::<f32>() / s.completed.len() as f32;
        let el = s.run_start.map_or(0, |st| now.saturating_sub(st));
        self.denorm(mean).saturating_sub(el)
    }

    pub(crate) fn denorm(&self, y: f32) -> Nanos {
        (y.clamp(0.0, 1.0) as f64 * self.cap as f64) as Nanos
    }

    pub(crate) fn ready(&self, level: u32, now: Nanos) -> Option<((&Lstm, usize), Vec<f32>)> {
        let i = (level as usize).min(self.subs.len() - 1);
        self.subs[i]
            .trained
            .then(|| ((&self.models[i], 0), self.input(i, now)))
    }

    pub(crate) fn history(&self) -> usize {
        self.history
    }

    /// Bytes of model state of all sub-predictors (weights and Adam moments).
    pub fn model_bytes(&self) -> usize {
        self.models.iter().map(Lstm::bytes).sum()
    }

    /// The cap on predicted durations, in seconds.
    pub fn cap_s(&self) -> f64 {
        self.cap as f64 / SEC as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_a_regular_run_length() {
        // Usage alternates: 1 hour at level 0, 10 minutes at level 2. Sub-predictor 0
        // should learn that a fresh run at level 0 lasts about an hour.
        let cfg = PredictorConfig {
            levels: 2,
            epochs: 10,
            duration: crate::config::DurationConfig {
                hidden: 8,
                lr: 0.02,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut d = DurationPredictor::new(&cfg, 5).unwrap();
        let step = 180 * SEC;
        let mut t = 0;
        for _cycle in 0..40 {
            for _ in 0..20 {
                d.observe(t, 0).unwrap();
                t += step;
            }
            for _ in 0..4 {
                d.observe(t, 2).unwrap();
                t += step;
            }
        }
        d.observe(t, 0).unwrap();
        let p = d.predict(0, t).unwrap() as f64 / SEC as f64;
        assert!(
            (2400.0..4800.0).contains(&p),
            "predicted {p} s, run is 3600 s"
        );
        // Level 2 is never exceeded: its samples are labelled with the cap.
        assert!(d.predict(2, t).unwrap() > d.predict(0, t).unwrap());
    }
}
