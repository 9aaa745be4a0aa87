//! The fixed policy: every idle home lends `lend_fraction` of what its FTL can
//! spare for `lend_for_s`, refreshed while it stays idle; unsold channels stay
//! free for `lend_for_s`.

use clock::{Nanos, SEC};

use super::{LendPolicy, Lendable, Offer, UnsoldPolicy};
use crate::config::HarvestSettings;

/// A fixed share for a fixed time.
#[derive(Debug, Clone)]
pub struct Fixed {
    fraction: f64,
    lend_for: Nanos,
}

impl Fixed {
    /// The policy of `[harvest] policy = "fixed"`.
    pub fn new(s: &HarvestSettings) -> Self {
        Self {
            fraction: s.lend_fraction,
            lend_for: s.lend_for_s.saturating_mul(SEC),
        }
    }
}

impl LendPolicy for Fixed {
    fn offer(&mut self, _now: Nanos, home: &Lendable<'_>) -> Option<Offer> {
        let per_plane = home.per_channel.iter().map(|&(_, b)| b).min()?;
        Some(Offer {
            channels: home.per_channel.len(),
            per_plane: (f64::from(per_plane) * self.fraction).floor() as u64,
            lasts: self.lend_for,
        })
    }

    fn expiry(&mut self, now: Nanos, _home: &str) -> Option<Nanos> {
        Some(now.saturating_add(self.lend_for))
    }
}

/// Unsold channels stay free for `lend_for_s`, renewed at each refresh.
#[derive(Debug, Clone)]
pub struct FixedLifetime {
    lend_for: Nanos,
}

impl FixedLifetime {
    /// The policy of `[harvest] unsold_policy = "fixed"`.
    pub fn new(s: &HarvestSettings) -> Self {
        Self {
            lend_for: s.lend_for_s.saturating_mul(SEC),
        }
    }
}

impl UnsoldPolicy for FixedLifetime {
    fn lifetime(&mut self, _now: Nanos, _device: &str, _channels: &[u32]) -> Nanos {
        self.lend_for
    }

    fn sold(&mut self, _now: Nanos, _device: &str, _channels: &[u32]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lends_the_fraction_of_the_scarcest_channel_for_the_fixed_time() {
        let s = HarvestSettings {
            lend_fraction: 0.5,
            lend_for_s: 100,
            ..HarvestSettings::default()
        };
        let mut p = Fixed::new(&s);
        let per = [(0, 10), (1, 7)];
        let home = Lendable {
            name: "a",
            channels: 2,
            extent_blocks: 32,
            per_channel: &per,
        };
        assert_eq!(
            p.offer(5, &home),
            Some(Offer {
                channels: 2,
                per_plane: 3,
                lasts: 100 * SEC
            })
        );
        assert_eq!(p.expiry(5, "a"), Some(5 + 100 * SEC));
        let none = Lendable {
            per_channel: &[],
            ..home
        };
        assert_eq!(p.offer(5, &none), None, "nothing lendable, nothing offered");
        assert_eq!(FixedLifetime::new(&s).lifetime(0, "d", &[1]), 100 * SEC);
    }
}
