//! The harvester's decisions, written once: what an idle home lends as a gSSD,
//! what a group of unsold channels lends, and the new expiries at a refresh.
//!
//! The daemon's `control::Harvester` and the fleet simulator both call these
//! functions between asking their policies and touching their pools: the
//! daemon then lends real blocks and builds a hidden vSSD on them, the
//! simulator inserts the gSSD into its modelled pool. Neither side rounds,
//! checks or quantises on its own, so a decision that differs between them can
//! only come from what they feed in. No I/O and no clock of their own: `now`
//! is read from the caller's clock (monotonic in the daemon, virtual in the
//! simulator).

use crate::{LendPolicy, Lendable, UnsoldPolicy};
use std::collections::BTreeMap;

use clock::Nanos;

/// What a home lends: a gSSD of `per_unit` blocks on each parallel unit of
/// the first `channels` entries of [`Lendable::per_channel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LendPlan {
    /// Channels lent (the first of [`Lendable::per_channel`]).
    pub channels: u32,
    /// Blocks lent on each parallel unit of those channels.
    pub per_unit: u64,
    /// Blocks lent in all: `per_unit` × units × `channels`, whole chunks.
    pub capacity: u64,
    /// How long the policy predicts they stay free (at least one granule).
    pub lasts: Nanos,
}

/// What `home` lends now, if anything: the policy's offer, spread evenly over
/// the units of its first channels (never beyond what each can spare), rounded
/// down to whole capacity chunks ([`Lendable::chunk_blocks`]), and only if it
/// lasts at least one duration `granule`.
pub fn plan_lend(
    policy: &mut dyn LendPolicy,
    now: Nanos,
    home: &Lendable<'_>,
    granule: Nanos,
) -> Option<LendPlan> {
    let offer = policy.offer(now, home)?;
    let n = (offer.channels as usize).min(home.per_channel.len()) as u32;
    let k = home.units.max(1) * u64::from(n);
    if n == 0 || offer.lasts < granule {
        return None;
    }
    // The largest per-unit count whose total is whole chunks: a multiple of
    // chunk / gcd(k, chunk).
    let chunk = home.chunk_blocks.max(1);
    let step = chunk / gcd(k, chunk);
    let per_unit = home.per_unit(offer.channels, offer.blocks) / step * step;
    (per_unit > 0).then_some(LendPlan {
        channels: n,
        per_unit,
        capacity: per_unit * k,
        lasts: offer.lasts,
    })
}

/// What a group of unsold `channels` of `device`, `blocks_per_channel` each,
/// lends now: (capacity in whole chunks of `chunk_blocks`, how long the
/// unsold policy predicts they stay unsold). `None` when they make less than
/// one chunk.
pub fn plan_unsold(
    unsold: &mut dyn UnsoldPolicy,
    now: Nanos,
    device: &str,
    channels: &[u32],
    blocks_per_channel: u64,
    chunk_blocks: u64,
) -> Option<(u64, Nanos)> {
    let chunk = chunk_blocks.max(1);
    let cap = blocks_per_channel * channels.len() as u64 / chunk * chunk;
    (cap > 0).then(|| (cap, unsold.lifetime(now, device, channels)))
}

/// Who lent a pooled gSSD, as the refresh asks its policy about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lender<'a> {
    /// A home, by its key ([`crate::HomeSample::home`]).
    Home(u64),
    /// Unsold channels of a device.
    Unsold {
        /// The device.
        device: &'a str,
        /// Its channels the gSSD spans.
        channels: &'a [u32],
    },
}

/// The new expiries of pooled gSSDs (by id) at a refresh at `now`, for
/// `harvest::GssdPool::refresh`: a lent gSSD's from its home's policy
/// ([`LendPolicy::expiry`]; `None` leaves it as it is), an unsold one's from
/// the unsold policy; each rounded down to whole duration `granule`s from
/// `now` (never before `now`).
pub fn expiry_updates<'a>(
    policy: &mut dyn LendPolicy,
    unsold: &mut dyn UnsoldPolicy,
    now: Nanos,
    granule: Nanos,
    gssds: impl IntoIterator<Item = (u64, Lender<'a>)>,
) -> Vec<(u64, Nanos)> {
    let g = granule.max(1);
    gssds
        .into_iter()
        .filter_map(|(id, lender)| {
            let t = match lender {
                Lender::Home(k) => policy.expiry(now, k)?,
                Lender::Unsold { device, channels } => {
                    now.saturating_add(unsold.lifetime(now, device, channels))
                }
            };
            Some((id, now + (t.max(now) - now) / g * g))
        })
        .collect()
}

/// Homes that took their flash back early, and when: they lend nothing again
/// for one duration granule, so that a busy home is not harvested again the
/// moment it got its blocks back. Keyed as the caller names homes (the daemon:
/// vSSD names; the simulator: home indices).
#[derive(Debug, Clone)]
pub struct Cooling<K> {
    since: BTreeMap<K, Nanos>,
}

impl<K> Default for Cooling<K> {
    fn default() -> Self {
        Self {
            since: BTreeMap::new(),
        }
    }
}

impl<K: Ord> Cooling<K> {
    /// `home` took its flash back at `now`.
    pub fn took_back(&mut self, home: K, now: Nanos) {
        self.since.insert(home, now);
    }

    /// Forgets the homes whose `granule` has passed at `now`.
    pub fn expire(&mut self, now: Nanos, granule: Nanos) {
        self.since.retain(|_, t| now < t.saturating_add(granule));
    }

    /// Whether `home` may not lend at `now`: it took its flash back less
    /// than `granule` ago.
    pub fn cooling(&self, home: &K, now: Nanos, granule: Nanos) -> bool {
        self.since
            .get(home)
            .is_some_and(|t| now < t.saturating_add(granule))
    }

    /// The homes cooling as of the last [`Cooling::expire`].
    pub fn homes(&self) -> impl Iterator<Item = &K> {
        self.since.keys()
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fixed, FixedLifetime};
    use clock::SEC;

    const GRANULE: Nanos = 1800 * SEC;

    #[test]
    fn a_plan_is_even_over_units_whole_chunks_and_at_least_a_granule() {
        let per = [(0, 10), (1, 7), (2, 9)];
        let home = Lendable {
            home: 1,
            channels: 3,
            blocks: 96,
            extent_blocks: 16,
            units: 2,
            chunk_blocks: 8,
            per_channel: &per,
        };
        // Fixed lends all of the scarcest channel's 7 per unit on 3 channels of
        // 2 units: 6 units, so per-unit counts must be multiples of 4 (24 = 3
        // chunks).
        let mut p = Fixed::new(1.0, 3600 * SEC);
        let plan = plan_lend(&mut p, 0, &home, GRANULE).unwrap();
        assert_eq!(
            plan,
            LendPlan {
                channels: 3,
                per_unit: 4,
                capacity: 24,
                lasts: 3600 * SEC
            }
        );
        // Shorter than the 30-minute granule: nothing.
        let mut short = Fixed::new(1.0, 1799 * SEC);
        assert_eq!(plan_lend(&mut short, 0, &home, GRANULE), None);
        // Less than a chunk: nothing.
        let mut little = Fixed::new(0.3, 3600 * SEC);
        assert_eq!(plan_lend(&mut little, 0, &home, GRANULE), None);
    }

    #[test]
    fn unsold_groups_and_refreshed_expiries_come_from_the_policies() {
        let mut u = FixedLifetime::new(5000 * SEC);
        assert_eq!(
            plan_unsold(&mut u, 0, "d", &[0, 1], 12, 8),
            Some((24, 5000 * SEC))
        );
        assert_eq!(plan_unsold(&mut u, 0, "d", &[0], 7, 8), None);
        let mut p = Fixed::new(0.5, 4000 * SEC);
        let now = 100 * SEC;
        let ups = expiry_updates(
            &mut p,
            &mut u,
            now,
            GRANULE,
            [
                (1, Lender::Home(9)),
                (
                    2,
                    Lender::Unsold {
                        device: "d",
                        channels: &[3],
                    },
                ),
            ],
        );
        // Rounded down to 30-minute granules from now.
        assert_eq!(ups, vec![(1, now + 3600 * SEC), (2, now + 3600 * SEC)]);
    }

    #[test]
    fn a_home_that_took_its_flash_back_cools_for_one_granule() {
        let mut c = Cooling::default();
        c.took_back("db", 10 * SEC);
        assert!(c.cooling(&"db", 10 * SEC + GRANULE - 1, GRANULE));
        assert!(!c.cooling(&"db", 10 * SEC + GRANULE, GRANULE));
        assert!(!c.cooling(&"web", 10 * SEC, GRANULE));
        c.expire(10 * SEC + GRANULE - 1, GRANULE);
        assert_eq!(c.homes().count(), 1);
        c.expire(10 * SEC + GRANULE, GRANULE);
        assert_eq!(c.homes().count(), 0);
    }
}
