//! Configuration of the predictors, as serde structs (TOML/JSON), every field
//! defaulted to the paper's setting so an empty table is the paper's predictor.

use serde::{Deserialize, Serialize};

use crate::PredictError;

/// The most levels ([`PredictorConfig::levels`]): 256. Levels are channels of a
/// vSSD (bandwidth) or sixteenths of its capacity, 16 by default; the models keep
/// one output (level classifiers) or one LSTM (duration sub-predictors) per
/// level, so a mistyped count of, say, 100,000 would take hours to build.
pub const MAX_LEVELS: u32 = 256;

/// The longest time a setting may name (training period and window, the duration
/// unit and cap): 366 days, in seconds, so that times in nanoseconds never
/// overflow when added.
pub const MAX_TIME_S: f64 = 366.0 * 24.0 * 3600.0;

/// The shortest training period and window: 1 ms (a window of the inputs lasts
/// 18 seconds or more).
pub const MIN_TIME_S: f64 = 0.001;

/// The most LSTM hidden units, sequence length, duration history, training
/// samples, epochs and remembered runs a setting may name: far above any of
/// the paper's (at most 50) and low enough that a typo fails fast instead of
/// exhausting memory or time.
pub const MAX_COUNT: usize = 10_000;

/// Checks for [`PredictorConfig::validate`]; each names the key.
struct Check {
    prefix: &'static str,
}

impl Check {
    fn err(&self, key: &str, v: impl std::fmt::Display, range: &str) -> PredictError {
        PredictError::Config(format!("{}{key} = {v}: must be {range}", self.prefix))
    }
    fn count(&self, key: &str, v: usize) -> Result<(), PredictError> {
        if (1..=MAX_COUNT).contains(&v) {
            Ok(())
        } else {
            Err(self.err(key, v, &format!("from 1 to {MAX_COUNT}")))
        }
    }
    fn range(&self, key: &str, v: f64, lo: f64, hi: f64) -> Result<(), PredictError> {
        if v.is_finite() && (lo..=hi).contains(&v) {
            Ok(())
        } else {
            Err(self.err(key, v, &format!("a number from {lo} to {hi}")))
        }
    }
    fn positive(&self, key: &str, v: f64) -> Result<(), PredictError> {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(self.err(key, v, "a positive number"))
        }
    }
}

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
    fn validate(&self, c: &Check) -> Result<(), PredictError> {
        c.count("hidden", self.hidden)?;
        c.positive("lr", self.lr)?;
        c.count("seq_len", self.seq_len)
    }

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
    /// Train through candle's autograd and optimizer, the reference the
    /// hand-written training step (`cell.rs`) is tested against, instead of
    /// by hand. Same maths, several times slower; for benchmarks.
    pub autograd: bool,
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
            autograd: false,
        }
    }
}

impl DurationConfig {
    fn validate(&self) -> Result<(), PredictError> {
        let c = Check {
            prefix: "duration.",
        };
        c.count("hidden", self.hidden)?;
        c.positive("lr", self.lr)?;
        c.count("history", self.history)?;
        c.range("time_unit_s", self.time_unit_s, MIN_TIME_S, MAX_TIME_S)?;
        if self.max_units == 0 || self.cap_s() > MAX_TIME_S {
            return Err(c.err(
                "max_units",
                self.max_units,
                &format!(
                    "at least 1, and at most {MAX_TIME_S} s in all (time_unit_s = {})",
                    self.time_unit_s
                ),
            ));
        }
        c.count("train_samples", self.train_samples)?;
        c.range("quantile", self.quantile, 0.0, 1.0)
    }

    /// The longest predicted duration in seconds.
    pub fn cap_s(&self) -> f64 {
        self.time_unit_s * self.max_units as f64
    }
}

/// Which model family predicts levels and durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Model {
    /// The paper's LSTMs (`[bandwidth]`, `[capacity]`, `[duration]`).
    #[default]
    Lstm,
    /// Conditional-distribution quantile model (`[quantile]`): the distribution of
    /// the next level given the current one, and of a run's remaining time given how
    /// long it has lasted, read out at a chosen quantile. Untrained it is last-value.
    Quantile,
}

/// The quantile model (`model = "quantile"`, see `crate::quantile`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuantileConfig {
    /// Quantile of the next level's predicted distribution that is predicted: the
    /// share of windows the prediction should cover before provisioning.
    pub level_quantile: f64,
    /// Quantile of the remaining time of a run that is predicted: about the share of
    /// predictions allowed to outlast the run.
    pub duration_quantile: f64,
    /// Weight, in transitions, of the prior (or, without a prior, of "the level stays")
    /// against the vSSD's own transitions from a level.
    pub level_prior_weight: f64,
    /// Weight, in runs, of the prior run lengths against the vSSD's own runs.
    pub duration_prior_weight: f64,
    /// Weight, in runs, of a run that ends at once: with `n` runs seen, nothing is
    /// promised unless `duration_quantile` exceeds about `1 / (n + 1)`.
    pub zero_weight: f64,
    /// Transitions from a level and runs at a level remembered (older ones fade).
    pub memory: usize,
}

impl QuantileConfig {
    fn validate(&self) -> Result<(), PredictError> {
        let c = Check {
            prefix: "quantile.",
        };
        c.range("level_quantile", self.level_quantile, 0.0, 1.0)?;
        c.range("duration_quantile", self.duration_quantile, 0.0, 1.0)?;
        for (key, v) in [
            ("level_prior_weight", self.level_prior_weight),
            ("duration_prior_weight", self.duration_prior_weight),
            ("zero_weight", self.zero_weight),
        ] {
            c.range(key, v, 0.0, f64::MAX)?;
        }
        c.count("memory", self.memory)
    }
}

impl Default for QuantileConfig {
    fn default() -> Self {
        Self {
            level_quantile: 0.8,
            duration_quantile: 0.15,
            level_prior_weight: 3.0,
            duration_prior_weight: 5.0,
            zero_weight: 1.0,
            memory: 256,
        }
    }
}

/// Everything a per-vSSD predictor needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PredictorConfig {
    /// Model family: `lstm` (the paper's) or `quantile`.
    pub model: Model,
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
    /// The quantile model's settings.
    pub quantile: QuantileConfig,
}

impl PredictorConfig {
    /// Checks every setting against its range; the error names the key (as in
    /// the TOML, `duration.hidden`) and the range. The daemon's
    /// `[harvest.predictor]`, `sim predict --config` and `sim harvest
    /// --predictor-config` all go through here, as does every predictor's
    /// constructor.
    pub fn validate(&self) -> Result<(), PredictError> {
        let c = Check { prefix: "" };
        if !(1..=MAX_LEVELS).contains(&self.levels) {
            return Err(c.err("levels", self.levels, &format!("from 1 to {MAX_LEVELS}")));
        }
        c.range("ratio", self.ratio, 0.0, 1.0)?;
        c.range("train_every_s", self.train_every_s, MIN_TIME_S, MAX_TIME_S)?;
        c.range(
            "train_window_s",
            self.train_window_s,
            MIN_TIME_S,
            MAX_TIME_S,
        )?;
        c.count("min_train_samples", self.min_train_samples)?;
        c.count("epochs", self.epochs)?;
        self.bandwidth.validate(&Check {
            prefix: "bandwidth.",
        })?;
        self.capacity.validate(&Check {
            prefix: "capacity.",
        })?;
        self.duration.validate()?;
        self.quantile.validate()
    }
}

impl Default for PredictorConfig {
    fn default() -> Self {
        Self {
            model: Model::Lstm,
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
            quantile: QuantileConfig::default(),
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
        let c: PredictorConfig =
            toml::from_str("model = \"quantile\"\n[quantile]\nlevel_quantile = 0.9").unwrap();
        assert_eq!(c.model, Model::Quantile);
        assert_eq!(c.quantile.level_quantile, 0.9);
        assert!(toml::from_str::<PredictorConfig>("model = \"gru\"").is_err());
        assert!(toml::from_str::<PredictorConfig>("[quantile]\nlevel_q = 0.9").is_err());
    }

    fn invalid(toml: &str) -> String {
        let c: PredictorConfig = toml::from_str(toml).unwrap();
        c.validate()
            .expect_err(toml)
            .to_string()
            .strip_prefix("bad predictor config: ")
            .unwrap()
            .to_string()
    }

    #[test]
    fn validate_names_the_key_and_its_range() {
        PredictorConfig::default().validate().unwrap();
        assert_eq!(invalid("levels = 0"), "levels = 0: must be from 1 to 256");
        assert_eq!(
            invalid("levels = 100000"),
            "levels = 100000: must be from 1 to 256"
        );
        assert_eq!(
            invalid("ratio = nan"),
            "ratio = NaN: must be a number from 0 to 1"
        );
        assert_eq!(
            invalid("ratio = -1.0"),
            "ratio = -1: must be a number from 0 to 1"
        );
        assert!(invalid("train_every_s = 0.0")
            .starts_with("train_every_s = 0: must be a number from 0.001 to"));
        assert!(invalid("train_window_s = inf").starts_with("train_window_s = inf: "));
        assert_eq!(invalid("epochs = 0"), "epochs = 0: must be from 1 to 10000");
        assert_eq!(
            invalid("min_train_samples = 0"),
            "min_train_samples = 0: must be from 1 to 10000"
        );
        assert_eq!(
            invalid("[bandwidth]\nhidden = 0"),
            "bandwidth.hidden = 0: must be from 1 to 10000"
        );
        assert_eq!(
            invalid("[capacity]\nlr = -0.1"),
            "capacity.lr = -0.1: must be a positive number"
        );
        assert_eq!(
            invalid("[capacity]\nseq_len = 0"),
            "capacity.seq_len = 0: must be from 1 to 10000"
        );
        assert_eq!(
            invalid("[duration]\nhistory = 0"),
            "duration.history = 0: must be from 1 to 10000"
        );
        assert!(invalid("[duration]\ntime_unit_s = 0.0").starts_with("duration.time_unit_s = 0: "));
        assert!(invalid("[duration]\nmax_units = 0")
            .starts_with("duration.max_units = 0: must be at least 1"));
        assert!(invalid("[duration]\nmax_units = 4000000000")
            .starts_with("duration.max_units = 4000000000: "));
        assert_eq!(
            invalid("[duration]\nquantile = 1.5"),
            "duration.quantile = 1.5: must be a number from 0 to 1"
        );
        assert_eq!(
            invalid("[quantile]\nlevel_quantile = 2.0"),
            "quantile.level_quantile = 2: must be a number from 0 to 1"
        );
        assert!(
            invalid("[quantile]\nzero_weight = -1.0").starts_with("quantile.zero_weight = -1: ")
        );
        assert_eq!(
            invalid("[quantile]\nmemory = 0"),
            "quantile.memory = 0: must be from 1 to 10000"
        );
        // The settings the scripts and results pages use stay valid.
        for ok in [
            "epochs = 1\n[duration]\nhidden = 8\n",
            "ratio = 0.0\n[quantile]\nduration_quantile = 0.5\n",
            "[duration]\nmax_units = 100\n[quantile]\nduration_quantile = 0.5\n",
            "[duration]\nloss = \"pinball\"\nquantile = 0.2\n",
            "model = \"quantile\"\n[quantile]\nduration_quantile = 0.5\nzero_weight = 0.1\n",
        ] {
            let c: PredictorConfig = toml::from_str(ok).unwrap();
            c.validate().unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }
}
