//! What a regular vSSD lends, and for how long: one [`LendPolicy`] per file.
//!
//! The harvester asks its policy three things: to learn from every home's
//! counters at each period ([`LendPolicy::observe`], run with no lock that I/O
//! or reads take, since the predicted policy trains LSTMs there), what a home
//! may lend now ([`LendPolicy::offer`]), and until when flash it lent stays free
//! ([`LendPolicy::expiry`]). Unsold channels have no tenant to learn from, so
//! their lifetime is an [`UnsoldPolicy`]'s.
//!
//! Adding a policy is one file here and one arm in [`lend_policy`] or
//! [`unsold_policy`].

use std::collections::BTreeMap;

use clock::Nanos;

use super::api::PredictionInfo;
use super::{DeviceView, HomeView};
use crate::config::{HarvestSettings, LendPolicyKind, UnsoldPolicyKind};
use crate::Result;

mod fixed;
mod predicted;
mod unsold;

pub use fixed::{Fixed, FixedLifetime};
pub use predicted::Predicted;
pub use unsold::UnsoldHistogramPolicy;

/// One home's counters at one period, for the policies to learn from.
#[derive(Debug, Clone, PartialEq)]
pub struct HomeSample {
    /// The home vSSD.
    pub name: String,
    /// Its record id (seeds its predictors).
    pub id: u64,
    /// When sampled.
    pub at: Nanos,
    /// Bytes its clients read and wrote so far.
    pub bytes: u64,
    /// Requests its clients issued so far.
    pub ops: u64,
    /// Share of its capacity holding data (0–1).
    pub util: f64,
    /// Channels it owns.
    pub channels: usize,
    /// Its full bandwidth, bytes/s (channels × channel rate).
    pub bw_full: f64,
    /// Its full IOPS (dies × 1 / page read time).
    pub iops_full: f64,
}

impl HomeSample {
    /// Samples `home` at `now`; `None` if its device is unknown.
    pub fn of(home: &HomeView, devices: &[DeviceView], now: Nanos) -> Option<Self> {
        let d = devices.iter().find(|d| d.name == home.device)?;
        let io = home.io.snapshot();
        let ftl = home.vssd.stats();
        let nch = home.channels().len() as f64;
        Some(Self {
            name: home.name.clone(),
            id: home.id,
            at: now,
            bytes: io.read_bytes + io.write_bytes,
            ops: io.reads + io.writes,
            util: (ftl.mapped_pages * u64::from(d.geometry.page_size)) as f64
                / home.capacity_bytes.max(1) as f64,
            channels: home.channels().len(),
            bw_full: nch * d.timing.channel_mbps as f64 * 1e6,
            iops_full: nch * f64::from(d.geometry.dies_per_channel) * 1e9
                / d.timing.read_ns.max(1) as f64,
        })
    }
}

/// What a home could lend now, as its FTL says.
#[derive(Debug, Clone, Copy)]
pub struct Lendable<'a> {
    /// The home vSSD.
    pub name: &'a str,
    /// Channels it owns.
    pub channels: usize,
    /// Blocks per plane of its largest extent.
    pub extent_blocks: u32,
    /// (channel, blocks per plane its FTL can empty), in the order lending
    /// takes them.
    pub per_channel: &'a [(u32, u32)],
}

/// A policy's answer for one home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Lend on the first this many entries of [`Lendable::per_channel`].
    pub channels: usize,
    /// Blocks per plane to lend on each.
    pub per_plane: u64,
    /// How long they are predicted to stay free.
    pub lasts: Nanos,
}

/// Decides what a regular vSSD lends and for how long.
pub trait LendPolicy: Send {
    /// Every home's counters at this period (the learned policy trains here).
    fn observe(&mut self, _now: Nanos, _homes: &[HomeSample]) -> Result<()> {
        Ok(())
    }
    /// What `home` may lend now; `None`: nothing.
    fn offer(&mut self, now: Nanos, home: &Lendable<'_>) -> Option<Offer>;
    /// Until when the flash `home` lent stays free, as of a refresh at `now`;
    /// `None` leaves the expiry as it is.
    fn expiry(&mut self, now: Nanos, home: &str) -> Option<Nanos>;
    /// What the policy predicts per home now, for `harvest status`.
    fn predictions(&self, _now: Nanos) -> BTreeMap<String, PredictionInfo> {
        BTreeMap::new()
    }
}

/// Decides how long unsold channels stay unsold.
pub trait UnsoldPolicy: Send {
    /// How long `channels` of `device`, unsold at `now`, are predicted to stay so.
    fn lifetime(&mut self, now: Nanos, device: &str, channels: &[u32]) -> Nanos;
    /// A regular vSSD took `channels` of `device` at `now`: they are sold.
    fn sold(&mut self, now: Nanos, device: &str, channels: &[u32]);
}

/// The lending policy the settings name.
pub fn lend_policy(s: &HarvestSettings) -> Box<dyn LendPolicy> {
    match s.policy {
        LendPolicyKind::Fixed => Box::new(Fixed::new(s)),
        LendPolicyKind::Predicted => Box::new(Predicted::new(s)),
    }
}

/// The unsold-channel policy the settings name.
pub fn unsold_policy(s: &HarvestSettings) -> Box<dyn UnsoldPolicy> {
    match s.unsold_policy {
        UnsoldPolicyKind::Fixed => Box::new(FixedLifetime::new(s)),
        UnsoldPolicyKind::Histogram => Box::new(UnsoldHistogramPolicy::new(s)),
    }
}
