//! The learned policy (BlockFlex §4.4): every home's bandwidth, IOPS and
//! utilisation, sampled each period as fractions of what it owns, feed its LSTM
//! predictors one window every `window`; a warm home lends the predicted spare
//! share of its capacity on the predicted spare channels, for the predicted
//! duration.
//!
//! All predictions are made once per period, in one batched forward pass
//! (`predict::predict_batch`), right after the predictors learned: `offer`,
//! `expiry` and `predictions` read that result.

use clock::Nanos;
use predict::{Prediction, PredictorConfig, QuantilePriors, Role};

use crate::learners::Learners;
use crate::{HomeSample, LendPolicy, Lendable, Offer, PolicyError};

/// Lends what each home's learned predictors say is spare.
#[derive(Debug)]
pub struct Predicted {
    homes: Learners,
}

impl Predicted {
    /// Predictors with `cfg`, fed one window of samples every `window`.
    pub fn new(cfg: PredictorConfig, window: Nanos) -> Self {
        Self::with_priors(cfg, window, QuantilePriors::default())
    }

    /// As [`Predicted::new`], every home's quantile model starting from
    /// `priors` (learned from other homes; `model = "quantile"` only, else
    /// the first `observe` fails).
    pub fn with_priors(cfg: PredictorConfig, window: Nanos, priors: QuantilePriors) -> Self {
        Self {
            homes: Learners::new(cfg, window, Role::Harvestable, priors),
        }
    }

    /// (channels, share of capacity, duration) a home's prediction leaves spare.
    fn spare(&self, home: u64) -> Option<(u32, f64, Nanos)> {
        let (p, nch) = self.homes.latest(home)?;
        let levels = f64::from(self.homes.cfg().levels.max(1));
        let channels = (f64::from(p.spare_bandwidth) / levels * f64::from(nch)).floor() as u32;
        let share = f64::from(p.spare_capacity) / levels;
        (p.warm && channels > 0 && share > 0.0 && p.duration > 0)
            .then_some((channels, share, p.duration))
    }
}

impl LendPolicy for Predicted {
    fn name(&self) -> &str {
        "predicted"
    }

    fn observe(&mut self, now: Nanos, homes: &[HomeSample]) -> Result<(), PolicyError> {
        self.homes.observe(now, homes)
    }

    fn offer(&mut self, _now: Nanos, home: &Lendable<'_>) -> Option<Offer> {
        let (n, share, lasts) = self.spare(home.home)?;
        // The predicted spare share of the whole home, on its first `n`
        // channels, never beyond what each of them can spare.
        let n = n.min(home.per_channel.len() as u32);
        if n == 0 {
            return None;
        }
        let by_share = (share * f64::from(home.extent_blocks) * f64::from(home.channels)
            / f64::from(n))
        .floor() as u64;
        let units = home.units.max(1) * u64::from(n);
        let per_unit = home.per_unit(n, by_share * units);
        Some(Offer {
            channels: n,
            blocks: per_unit * units,
            lasts,
        })
    }

    fn expiry(&mut self, now: Nanos, home: u64) -> Option<Nanos> {
        self.homes.latest(home).filter(|(p, _)| p.warm)?;
        Some(
            self.spare(home)
                .map_or(now, |(_, _, lasts)| now.saturating_add(lasts)),
        )
    }

    fn predictions(&self) -> Vec<(u64, Prediction)> {
        self.homes.predictions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::SEC;

    #[test]
    fn cold_predictors_lend_nothing_and_homes_that_leave_are_forgotten() {
        let cfg = PredictorConfig::default();
        let mut p = Predicted::new(cfg, SEC);
        let per = [(0, 20), (1, 20), (2, 20), (3, 20)];
        let home = Lendable {
            home: 7,
            channels: 4,
            blocks: 4 * 32,
            extent_blocks: 32,
            units: 1,
            chunk_blocks: 1,
            per_channel: &per,
        };
        let idle = HomeSample {
            home: 7,
            channels: 4,
            blocks: 4 * 32,
            used_channels: 0,
            used_blocks: 8,
            bw: 0.0,
            iops: 0.0,
            util: 0.06,
        };
        p.observe(0, &[idle]).unwrap();
        assert_eq!(p.offer(0, &home), None, "cold");
        assert_eq!(p.expiry(0, 7), None, "cold predictors leave expiries alone");
        // Lending once warm is the daemon's test (control: the predicted
        // policy lends what it predicts spare); here, what the policy keeps.
        for t in 1..5u64 {
            p.observe(t * SEC, &[idle]).unwrap();
        }
        assert_eq!(p.predictions().len(), 1);
        p.observe(300 * SEC, &[]).unwrap();
        assert!(p.predictions().is_empty(), "a home that left is forgotten");
    }
}
