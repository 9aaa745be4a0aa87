//! The level predictors (bandwidth in channels, capacity in sixteenths): an LSTM
//! classifier over the last few windows' statistics, retrained online.
//!
//! Each observation is one window's feature vector plus the level the window
//! actually needed (the class). A sample is "the `seq_len` windows up to t" labelled
//! with "the level at t+1"; every `train_every_s` the model takes `epochs` Adam steps
//! on the samples whose label lies in the last `train_window_s` (at least
//! `min_train_samples` of them), which is the paper's "every three minutes on the
//! preceding 15 minutes".

use std::collections::VecDeque;

use clock::{Nanos, SEC};

use crate::config::{LevelModelConfig, Loss, PredictorConfig};
use crate::lstm::{Head, Lstm};
use crate::PredictError;

/// An online LSTM classifier of the next window's level.
#[derive(Debug)]
pub struct LevelPredictor {
    pub(crate) model: Lstm,
    seq_len: usize,
    levels: u32,
    obs: VecDeque<(Nanos, Vec<f32>, u32)>,
    last_train: Option<Nanos>,
    train_every: Nanos,
    window: Nanos,
    min_samples: usize,
    epochs: usize,
    trained: u64,
}

impl LevelPredictor {
    /// A predictor of levels `0..=cfg.levels` over observations of `features` values,
    /// with the model settings `m` (bandwidth or capacity) and weights from `seed`.
    pub fn new(
        cfg: &PredictorConfig,
        m: &LevelModelConfig,
        features: usize,
        seed: u64,
    ) -> Result<Self, PredictError> {
        if features == 0 || m.seq_len == 0 || m.hidden == 0 || cfg.levels == 0 {
            return Err(PredictError::Config(
                "features, seq_len, hidden and levels must be positive".into(),
            ));
        }
        let head = match m.loss {
            Loss::CrossEntropy => Head::CrossEntropy,
            Loss::Mse => Head::SoftmaxMse,
        };
        Ok(Self {
            model: Lstm::new(
                features,
                m.hidden,
                cfg.levels as usize + 1,
                head,
                m.lr,
                seed,
            )?,
            seq_len: m.seq_len,
            levels: cfg.levels,
            obs: VecDeque::new(),
            last_train: None,
            train_every: secs(cfg.train_every_s),
            window: secs(cfg.train_window_s),
            min_samples: cfg.min_train_samples.max(1),
            epochs: cfg.epochs.max(1),
            trained: 0,
        })
    }

    /// Records one window at `now`: its features and the level it needed; trains when
    /// a training period has passed. Returns whether it trained.
    pub fn observe(
        &mut self,
        now: Nanos,
        features: Vec<f32>,
        level: u32,
    ) -> Result<bool, PredictError> {
        if features.len() != self.model.features {
            return Err(PredictError::Shape {
                expected: self.model.features,
                got: features.len(),
            });
        }
        self.obs.push_back((now, features, level.min(self.levels)));
        let cutoff = now.saturating_sub(self.window);
        let t = self.seq_len;
        while self.obs.len() > t + self.min_samples + 1 && self.obs[t].0 < cutoff {
            self.obs.pop_front();
        }
        let due = match self.last_train {
            None => true,
            Some(l) => now.saturating_sub(l) >= self.train_every,
        };
        if due && self.obs.len() > t {
            self.train(cutoff)?;
            self.last_train = Some(now);
            return Ok(true);
        }
        Ok(false)
    }

    fn train(&mut self, cutoff: Nanos) -> Result<(), PredictError> {
        let t = self.seq_len;
        let n = self.obs.len();
        // Targets at index k in [t, n): inputs k-t..k.
        let in_window = (t..n).filter(|&k| self.obs[k].0 >= cutoff).count();
        let take = in_window.max(self.min_samples).min(n - t);
        let mut xs = Vec::with_capacity(take * t * self.model.features);
        let mut ys = Vec::with_capacity(take);
        for k in n - take..n {
            for j in k - t..k {
                xs.extend_from_slice(&self.obs[j].1);
            }
            ys.push(self.obs[k].2 as f32);
        }
        for _ in 0..self.epochs {
            self.model.train(&xs, t, &ys)?;
        }
        self.trained += 1;
        Ok(())
    }

    /// The input sequence for predicting the next window, if there is enough history.
    pub(crate) fn input(&self) -> Option<Vec<f32>> {
        let n = self.obs.len();
        if n < self.seq_len {
            return None;
        }
        Some(
            self.obs
                .range(n - self.seq_len..)
                .flat_map(|o| o.1.iter().copied())
                .collect(),
        )
    }

    /// Windows per input sequence.
    pub(crate) fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// The predicted level of the next window (before provisioning), or `None` until
    /// `seq_len` windows have been observed.
    pub fn predict(&self) -> Result<Option<u32>, PredictError> {
        match self.input() {
            None => Ok(None),
            Some(x) => Ok(Some(self.model.predict(x, self.seq_len)? as u32)),
        }
    }

    /// Training steps taken so far.
    pub fn trainings(&self) -> u64 {
        self.trained
    }

    /// Bytes of model state (weights and Adam moments).
    pub fn model_bytes(&self) -> usize {
        self.model.bytes()
    }
}

pub(crate) fn secs(s: f64) -> Nanos {
    (s.max(0.0) * SEC as f64) as Nanos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_a_step_change() {
        let cfg = PredictorConfig {
            levels: 4,
            epochs: 5,
            ..Default::default()
        };
        let m = LevelModelConfig {
            lr: 0.05,
            ..LevelModelConfig::bandwidth()
        };
        let mut p = LevelPredictor::new(&cfg, &m, 1, 3).unwrap();
        assert_eq!(p.predict().unwrap(), None);
        for i in 0..200u64 {
            let lvl = if i < 100 { 1 } else { 3 };
            p.observe(i * 18 * SEC, vec![lvl as f32 / 4.0], lvl)
                .unwrap();
        }
        assert_eq!(p.predict().unwrap(), Some(3));
        assert!(p.trainings() > 10);
        assert!(p.observe(0, vec![0.0, 1.0], 0).is_err());
    }
}
