//! Configuration of the predictors, as serde structs (TOML/JSON), every field
//! defaulted to the paper's setting so an empty table is the paper's predictor.

use serde::{Deserialize, Serialize};

/// Loss used to train the softmax (classification) predictors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    /// Cross-entropy on the logits (default): the gradient does not vanish when the
    /// softmax is confidently wrong, so a model that is retrained once per 3 minutes
    /// follows a level change in a few steps.
    #[default]
    CrossEntropy,
    /// MSE between the softmax and a one-hot target, as the BlockFlex artifact does.
    Mse,
}

/// One level (bandwidth or capacity) classifier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LevelModelConfig {
    /// LSTM hidden units.
    pub hidden: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// Observations (windows) per input sequence.
    pub seq_len: usize,
    /// Loss of the softmax head.
    pub loss: Loss,
}

impl LevelModelConfig {
    /// The paper's bandwidth predictor: 16 hidden units, learning rate 0.005.
    pub fn bandwidth() -> Self {
        Self {
            hidden: 16,
            lr: 0.005,
            seq_len: 3,
            loss: Loss::CrossEntropy,
        }
    }
    /// The paper's capacity predictor: 4 hidden units, learning rate 0.04.
    pub fn capacity() -> Self {
        Self {
            hidden: 4,
            lr: 0.04,
            ..Self::bandwidth()
        }
    }
}

impl Default for LevelModelConfig {
    fn default() -> Self {
        Self::bandwidth()
    }
}

/// Loss of the duration sub-predictors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DurationLoss {
    /// Mean squared error (the paper's): predicts the mean remaining time, which a
    /// skewed run-length distribution often does not reach.
    #[default]
    Mse,
    /// Pinball (quantile) loss at [`DurationConfig::quantile`]: predicts a low quantile
    /// of the remaining time, so "lasts at least as predicted" holds about
    /// `1 - quantile` of the time by construction.
    Pinball,
}

/// The duration sub-predictors (one per level).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DurationConfig {
    /// LSTM hidden units of each sub-predictor (paper: 50).
    pub hidden: usize,
    /// Adam learning rate (the artifact's 0.003).
    pub lr: f64,
    /// Past durations at the level fed to its sub-predictor.
    pub history: usize,
    /// Allocation granularity in seconds (the artifact's 30 minutes); accuracy is
    /// judged in whole units.
    pub time_unit_s: f64,
    /// Longest duration predicted, in units (the artifact's 25, 12.5 hours).
    pub max_units: u32,
    /// Labelled samples per training step of a sub-predictor.
    pub train_samples: usize,
    /// Training loss.
    pub loss: DurationLoss,
    /// Quantile of the pinball loss.
    pub quantile: f64,
}

impl Default for DurationConfig {
    fn default() -> Self {
        Self {
            hidden: 50,
            lr: 0.003,
            history: 6,
            time_unit_s: 1800.0,
            max_units: 25,
            train_samples: 32,
            loss: DurationLoss::Mse,
            quantile: 0.2,
        }
    }
}

impl DurationConfig {
    /// The longest predicted duration in seconds.
    pub fn cap_s(&self) -> f64 {
        self.time_unit_s * self.max_units as f64
    }
}

/// Everything a per-vSSD predictor needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PredictorConfig {
    /// Top level of bandwidth and capacity (levels run 0..=levels): channels of the
    /// vSSD for bandwidth, sixteenths of its capacity for capacity.
    pub levels: u32,
    /// Provisioning ratio: predicted demand is over-provisioned and predicted
    /// harvestable resources under-provisioned by this fraction (paper: 5%).
    pub ratio: f64,
    /// Online training period in seconds (paper: 3 minutes).
    pub train_every_s: f64,
    /// Training looks back this far, in seconds (paper: 15 minutes).
    pub train_window_s: f64,
    /// At least this many samples per training step, reaching further back when the
    /// window holds fewer (inputs with 30-minute windows).
    pub min_train_samples: usize,
    /// Adam steps per training period (on the whole window's samples; the artifact
    /// takes one step per sample, about ten per period at 18-second windows).
    pub epochs: usize,
    /// Seed of the weight initialisation.
    pub seed: u64,
    /// Bandwidth predictor.
    pub bandwidth: LevelModelConfig,
    /// Capacity predictor.
    pub capacity: LevelModelConfig,
    /// Duration sub-predictors.
    pub duration: DurationConfig,
}

impl Default for PredictorConfig {
    fn default() -> Self {
        Self {
            levels: 16,
            ratio: 0.05,
            train_every_s: 180.0,
            train_window_s: 900.0,
            min_train_samples: 8,
            epochs: 5,
            seed: 42,
            bandwidth: LevelModelConfig::bandwidth(),
            capacity: LevelModelConfig::capacity(),
            duration: DurationConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_toml_is_the_paper_and_unknown_fields_fail() {
        let c: PredictorConfig = toml::from_str("").unwrap();
        assert_eq!(c, PredictorConfig::default());
        assert_eq!(c.capacity.hidden, 4);
        let c: PredictorConfig =
            toml::from_str("ratio = 0.1\n[bandwidth]\nloss = \"mse\"").unwrap();
        assert_eq!(c.ratio, 0.1);
        assert_eq!(c.bandwidth.loss, Loss::Mse);
        assert!(toml::from_str::<PredictorConfig>("ratoi = 0.1").is_err());
        assert!(toml::from_str::<PredictorConfig>("[duration]\nhiden = 3").is_err());
    }
}
