//! The fixed policy: every idle home lends a fixed share of what it can spare,
//! for a fixed time, refreshed while it stays idle; unsold channels stay free
//! for that time too.

use clock::Nanos;

use crate::{LendPolicy, Lendable, Offer, UnsoldPolicy};

/// A fixed share for a fixed time.
#[derive(Debug, Clone)]
pub struct Fixed {
    fraction: f64,
    lend_for: Nanos,
}

impl Fixed {
    /// Lends `fraction` (0–1) of what a home can spare on each of its channels,
    /// for `lend_for`.
    pub fn new(fraction: f64, lend_for: Nanos) -> Self {
        Self { fraction, lend_for }
    }
}

impl LendPolicy for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }

    fn offer(&mut self, _now: Nanos, home: &Lendable<'_>) -> Option<Offer> {
        let spare = home.per_channel.iter().map(|&(_, b)| b).min()?;
        let per_unit = (f64::from(spare) * self.fraction).floor() as u64;
        let n = home.per_channel.len() as u64;
        Some(Offer {
            channels: n as u32,
            blocks: per_unit * home.units.max(1) * n,
            lasts: self.lend_for,
        })
    }

    fn expiry(&mut self, now: Nanos, _home: u64) -> Option<Nanos> {
        Some(now.saturating_add(self.lend_for))
    }
}

/// Unsold channels stay free for a fixed time, renewed at each refresh.
#[derive(Debug, Clone)]
pub struct FixedLifetime {
    lend_for: Nanos,
}

impl FixedLifetime {
    /// Unsold channels live `lend_for`.
    pub fn new(lend_for: Nanos) -> Self {
        Self { lend_for }
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
    use clock::SEC;

    #[test]
    fn lends_the_fraction_of_the_scarcest_channel_for_the_fixed_time() {
        let mut p = Fixed::new(0.5, 100 * SEC);
        let per = [(0, 10), (1, 7)];
        let home = Lendable {
            home: 1,
            channels: 2,
            blocks: 128,
            extent_blocks: 32,
            units: 2,
            chunk_blocks: 4,
            per_channel: &per,
        };
        let o = p.offer(5, &home).unwrap();
        assert_eq!(
            o,
            Offer {
                channels: 2,
                blocks: 3 * 2 * 2,
                lasts: 100 * SEC
            }
        );
        assert_eq!(home.per_unit(o.channels, o.blocks), 3);
        assert_eq!(p.expiry(5, 1), Some(5 + 100 * SEC));
        let none = Lendable {
            per_channel: &[],
            ..home
        };
        assert_eq!(p.offer(5, &none), None, "nothing lendable, nothing offered");
        assert_eq!(
            FixedLifetime::new(100 * SEC).lifetime(0, "d", &[1]),
            100 * SEC
        );
    }
}
