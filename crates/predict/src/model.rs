//! The model families behind one interface: a level model and a duration model per
//! resource. [`level_model`] and [`duration_model`] pick the family from
//! [`PredictorConfig::model`]; adding a family is one file and one match arm in each.

use std::fmt::Debug;

use clock::Nanos;

use crate::config::{LevelModelConfig, Model, PredictorConfig};
use crate::duration::DurationPredictor;
use crate::level::LevelPredictor;
use crate::quantile::{QuantileDuration, QuantileLevel};
use crate::PredictError;

/// Predicts the next window's level of one resource (bandwidth or capacity).
pub trait LevelModel: Debug + Send + Sync {
    /// Records the window ending at `now`: its features and the level it needed;
    /// returns whether the model trained.
    fn observe(&mut self, now: Nanos, features: Vec<f32>, level: u32)
        -> Result<bool, PredictError>;
    /// The next window's level before provisioning, `None` until warm.
    fn predict(&self) -> Result<Option<u32>, PredictError>;
    /// Bytes of per-vSSD model state.
    fn model_bytes(&self) -> usize;
    /// The paper's LSTM, if this is one (batched inference stacks those).
    fn as_lstm(&self) -> Option<&LevelPredictor> {
        None
    }
}

/// Predicts how long usage stays at or below a level.
pub trait DurationModel: Debug + Send + Sync {
    /// Records the level of the window ending at `now`.
    fn observe(&mut self, now: Nanos, level: u32) -> Result<(), PredictError>;
    /// Remaining time for which usage stays at or below `level`, as of `now`.
    fn predict(&self, level: u32, now: Nanos) -> Result<Nanos, PredictError>;
    /// Bytes of per-vSSD model state.
    fn model_bytes(&self) -> usize;
    /// The paper's LSTM sub-predictors, if these are.
    fn as_lstm(&self) -> Option<&DurationPredictor> {
        None
    }
}

/// The level model `cfg.model` selects, for `features` inputs with LSTM settings `m`.
pub fn level_model(
    cfg: &PredictorConfig,
    m: &LevelModelConfig,
    features: usize,
    seed: u64,
) -> Result<Box<dyn LevelModel>, PredictError> {
    Ok(match cfg.model {
        Model::Lstm => Box::new(LevelPredictor::new(cfg, m, features, seed)?),
        Model::Quantile => Box::new(QuantileLevel::new(cfg, None)?),
    })
}

/// The duration model `cfg.model` selects.
pub fn duration_model(
    cfg: &PredictorConfig,
    seed: u64,
) -> Result<Box<dyn DurationModel>, PredictError> {
    Ok(match cfg.model {
        Model::Lstm => Box::new(DurationPredictor::new(cfg, seed)?),
        Model::Quantile => Box::new(QuantileDuration::new(cfg, None)?),
    })
}

impl LevelModel for LevelPredictor {
    fn observe(&mut self, now: Nanos, f: Vec<f32>, level: u32) -> Result<bool, PredictError> {
        LevelPredictor::observe(self, now, f, level)
    }
    fn predict(&self) -> Result<Option<u32>, PredictError> {
        LevelPredictor::predict(self)
    }
    fn model_bytes(&self) -> usize {
        LevelPredictor::model_bytes(self)
    }
    fn as_lstm(&self) -> Option<&LevelPredictor> {
        Some(self)
    }
}

impl DurationModel for DurationPredictor {
    fn observe(&mut self, now: Nanos, level: u32) -> Result<(), PredictError> {
        DurationPredictor::observe(self, now, level)
    }
    fn predict(&self, level: u32, now: Nanos) -> Result<Nanos, PredictError> {
        DurationPredictor::predict(self, level, now)
    }
    fn model_bytes(&self) -> usize {
        DurationPredictor::model_bytes(self)
    }
    fn as_lstm(&self) -> Option<&DurationPredictor> {
        Some(self)
    }
}

impl LevelModel for QuantileLevel {
    fn observe(&mut self, now: Nanos, _f: Vec<f32>, level: u32) -> Result<bool, PredictError> {
        Ok(QuantileLevel::observe(self, now, level))
    }
    fn predict(&self) -> Result<Option<u32>, PredictError> {
        Ok(QuantileLevel::predict(self))
    }
    fn model_bytes(&self) -> usize {
        QuantileLevel::model_bytes(self)
    }
}

impl DurationModel for QuantileDuration {
    fn observe(&mut self, now: Nanos, level: u32) -> Result<(), PredictError> {
        QuantileDuration::observe(self, now, level);
        Ok(())
    }
    fn predict(&self, level: u32, now: Nanos) -> Result<Nanos, PredictError> {
        Ok(QuantileDuration::predict(self, level, now))
    }
    fn model_bytes(&self) -> usize {
        QuantileDuration::model_bytes(self)
    }
}
