//! Transparent storage elasticity (Nicolae, Riteau, Keahey, IPDPS'14).
//!
//! A file system spread over a pool of disks grows (a disk is added) and shrinks (the
//! last added disk is removed) while applications use it. Deciding *when* is the whole
//! problem: too late and the application runs out of space, too early and space is
//! wasted. This crate holds the decision logic only — the paper's predictor
//! (Algorithm 2), its controller (Algorithm 1) and the three baselines of §IV-B — with
//! no I/O and no wall clock: time comes in as [`clock::Nanos`], and the disks are
//! behind the [`Volume`] trait. That is what lets the same [`Controller`] drive a real
//! btrfs volume made of flexssd vSSDs (`flexssd elastic run`) and a replayed
//! used-space trace on a virtual clock ([`sim`], `flexssd sim elastic`), and what
//! makes the tests deterministic.

pub mod config;
pub mod controller;
pub mod metrics;
pub mod policy;
pub mod predictor;
pub mod sim;
pub mod volume;

pub use config::{AddDelay, ElasticConfig, PolicyKind, ShortTerm, Trend, WrittenCorrection};
pub use controller::{Controller, Sample};
pub use metrics::{Summary, WasteMeter};
pub use policy::{Action, Decision, Policy};
pub use predictor::Predictor;
pub use volume::{
    pick_removal, removal_order, DiskInfo, DiskState, FsStats, RelocationAccount, Volume,
};

/// Errors of the elastic controller, its configuration and its traces.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of range or inconsistent.
    #[error("invalid elastic config: {0}")]
    Config(String),
    /// The configuration text does not parse.
    #[error("invalid elastic config: {0}")]
    Toml(#[from] toml::de::Error),
    /// A usage trace line does not parse.
    #[error("{file}:{line}: {msg}")]
    Trace {
        /// Trace file name.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        msg: String,
    },
    /// A replay's options are out of range (its end, its timing).
    #[error("replay: {0}")]
    Replay(String),
    /// The volume refused or failed an operation (the volume is left consistent).
    #[error("volume: {0}")]
    Volume(String),
}

/// Result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
