//! BlockFlex's learned predictors (OSDI'22 §4.4), for storage harvesting.
//!
//! Harvesting needs to know, per vSSD, how much bandwidth (channels) and capacity it
//! will use and for how long, so that spare resources of regular vSSDs can be lent to
//! harvest vSSDs without being reclaimed too early. BlockFlex learns this online per
//! vSSD with small LSTMs:
//!
//! * a **bandwidth** classifier over the max/min/average of bandwidth and IOPS per
//!   window (16 hidden units, lr 0.005, softmax over channel counts);
//! * a **capacity** classifier over the max/min/average utilisation and its latest
//!   change (4 hidden units, lr 0.04);
//! * **duration** predictors, one regression sub-predictor per level (50 hidden units),
//!   trained on the history of how long usage stayed at or below that level; the
//!   selector takes the longer of the bandwidth and capacity durations for demand and
//!   the shorter for harvestable resources;
//! * **provisioning**: predicted demand is over-provisioned and predicted harvestable
//!   resources under-provisioned by a ratio (5% by default), which is what lifts the
//!   paper's accuracy from 79–93% to 93–96%;
//! * a **histogram heuristic** for unsold vSSDs ([`UnsoldHistogram`]).
//!
//! `model = "quantile"` ([`QuantileConfig`], `quantile.rs`) swaps the LSTMs for
//! conditional distributions read out at a quantile (a residual on last-value for
//! levels, survival analysis for durations); see that module for why.
//!
//! All models train with Adam, every `train_every_s` (3 minutes) on the preceding
//! `train_window_s` (15 minutes), on a clock the caller passes in ([`clock::Nanos`]);
//! nothing here reads the wall clock or does I/O beyond parsing readers it is given.
//! The classifiers use cross-entropy by default (MSE on a one-hot target, the
//! artifact's choice, is [`Loss::Mse`]): cross-entropy keeps a useful gradient when the
//! softmax is confidently wrong, which an online model that sees a level change
//! needs.
//!
//! # How to call it
//!
//! ```
//! use predict::{predict_batch, Predictor, PredictorConfig, Role, VssdPredictor, WindowStats};
//! use clock::SEC;
//!
//! let cfg = PredictorConfig::default(); // the paper's settings, 16 levels, 5% ratio
//! let mut p = VssdPredictor::new(&cfg, Role::Harvestable, /* vSSD id as seed */ 7)?;
//! // Every window (say 18 s), feed that window's statistics as fractions of the
//! // vSSD's provisioned bandwidth, IOPS and capacity...
//! for i in 0..30u64 {
//!     p.observe(i * 18 * SEC, &WindowStats::flat(0.25, 0.2, 0.5))?;
//! }
//! // ...and ask what it will leave spare, and for how long.
//! let now = 30 * 18 * SEC;
//! let pr = p.predict(now)?;
//! assert!(pr.warm && pr.spare_bandwidth + pr.bandwidth == cfg.levels);
//! let _expires_at = now + pr.duration;
//! // Many vSSDs at once: one stacked forward pass per model kind.
//! let all = predict_batch(&[&p], now)?;
//! assert_eq!(all[0], pr);
//! # Ok::<(), predict::PredictError>(())
//! ```

mod cell;
mod config;
mod duration;
mod level;
mod lstm;
mod model;
mod provision;
mod quantile;
pub mod readers;
mod tune;
mod unsold;
mod vssd;

pub use config::{
    DurationConfig, DurationLoss, LevelModelConfig, Loss, Model, PredictorConfig, QuantileConfig,
    MAX_COUNT, MAX_LEVELS, MAX_TIME_S, MIN_TIME_S,
};
pub use duration::DurationPredictor;
pub use level::LevelPredictor;
pub use model::{duration_model, level_model, DurationModel, LevelModel};
pub use provision::{over_provision, under_provision};
pub use quantile::{DurationPrior, LevelPrior, QuantileDuration, QuantileLevel};
pub use tune::tune_process_for_training;
pub use unsold::{Survival, UnsoldHistogram};
pub use vssd::{
    level_of, predict_batch, Prediction, Predictor, QuantilePriors, Role, VssdPredictor,
    WindowStats,
};

/// Errors of the predictors and readers.
#[derive(Debug, thiserror::Error)]
pub enum PredictError {
    /// A tensor operation failed (a bug, or out of memory).
    #[error("tensor: {0}")]
    Tensor(#[from] candle_core::Error),
    /// A configuration value is out of range.
    #[error("bad predictor config: {0}")]
    Config(String),
    /// An observation had the wrong number of features.
    #[error("expected {expected} features, got {got}")]
    Shape {
        /// Features the model takes.
        expected: usize,
        /// Features given.
        got: usize,
    },
    /// Bad input data, with the file and 1-based line.
    #[error("{file}:{line}: {msg}")]
    Parse {
        /// File name as given by the caller.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        msg: String,
    },
}
