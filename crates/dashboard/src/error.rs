//! What the dashboard refuses, with a message that says what to send instead.

use thiserror::Error;

/// A dashboard request that cannot be answered.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DashboardError {
    /// A query parameter is malformed or out of range.
    #[error("invalid dashboard query: {0}")]
    BadQuery(String),
    /// The vSSD asked for in detail does not exist (or is not the caller's).
    #[error("no vSSD {0:?} to show in detail (is it yours, and active?)")]
    NoSuchVssd(String),
}
