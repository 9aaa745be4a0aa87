//! Regular tenants first on shared channels (BlockFlex §4.3: harvesting must not
//! hurt the tenant who bought the flash).
//!
//! A gSSD on lent blocks shares dies with its home vSSD. The flash model serves a
//! die's operations in the order they were booked and cannot preempt one, so
//! priority has to be decided before a harvest request reaches the die: the
//! harvest volume's export gets an admission [`Gate`] that admits a piece only when
//! every die of the channels it shares with regular tenants will be free within
//! `slack` (1 µs by default: idle); otherwise it asks again when the busiest
//! of them frees up. Pieces admitted together would all see idle dies, so the
//! gate also books each admitted piece's share of die time (its pages spread
//! over the shared dies, at the device's read or program time) and counts it as
//! busy for the next. A regular request therefore finds little more than `slack`
//! of harvest work ahead of it on a die, and harvest traffic fills the gaps. Channels of unsold gSSDs are shared with nobody and are not
//! gated. Only in emulation mode, where the dies' timelines follow the clock.

use std::sync::Arc;

use blockdev::{Admit, Dir, Gate, IoResult};
use clock::{Clock, Nanos};
use flash::FlashDevice;
use parking_lot::RwLock;

/// The gate of one harvest volume.
pub(super) struct PriorityGate {
    clock: Arc<dyn Clock>,
    slack: Nanos,
    piece: u64,
    /// (device, channel) the volume shares with a regular tenant.
    shared: RwLock<Vec<(Arc<FlashDevice>, u32)>>,
    /// Die time already promised to admitted pieces that may not have reached
    /// the flash yet.
    booked: parking_lot::Mutex<Nanos>,
}

impl std::fmt::Debug for PriorityGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PriorityGate")
            .field("slack", &self.slack)
            .field("shared_channels", &self.shared.read().len())
            .finish()
    }
}

impl PriorityGate {
    /// A gate admitting pieces of at most `piece` bytes while the shared dies free
    /// up within `slack`.
    pub(super) fn new(clock: Arc<dyn Clock>, slack: Nanos, piece: u64) -> Self {
        Self {
            clock,
            slack,
            piece,
            shared: RwLock::new(Vec::new()),
            booked: parking_lot::Mutex::new(0),
        }
    }

    /// Replaces the shared channels (after the volume's gSSDs changed).
    pub(super) fn set_shared(&self, shared: Vec<(Arc<FlashDevice>, u32)>) {
        *self.shared.write() = shared;
        // Work promised to the old channels says nothing about the new ones.
        *self.booked.lock() = 0;
    }
}

impl Gate for PriorityGate {
    fn reserve(&self, dir: Dir, len: u64) -> IoResult<Admit> {
        let now = self.clock.now();
        let shared = self.shared.read();
        let Some((dev, _)) = shared.first() else {
            return Ok(Admit::At(now));
        };
        let flash_busy = shared
            .iter()
            .map(|(d, c)| d.channel_busy_until(*c))
            .max()
            .unwrap_or(0);
        let mut booked = self.booked.lock();
        let busy = flash_busy.max(*booked);
        if busy > now.saturating_add(self.slack) {
            return Ok(Admit::Retry(busy - self.slack));
        }
        // This piece's share of each shared die: its pages spread over them.
        let geo = dev.geometry();
        let t = dev.timing();
        let dies = (shared.len() as u64 * u64::from(geo.dies_per_channel)).max(1);
        let pages = len.div_ceil(u64::from(geo.page_size)).max(1);
        let op = match dir {
            Dir::Read => t.read_ns,
            Dir::Write => t.program_ns,
        };
        *booked = busy.max(now).saturating_add(pages.div_ceil(dies) * op);
        Ok(Admit::At(now))
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    fn max_piece(&self) -> u64 {
        self.piece
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::VirtualClock;
    use flash::{Geometry, Oob, OobKind, Timing};

    #[test]
    fn harvest_pieces_wait_for_busy_shared_dies_only() {
        let geo = Geometry {
            channels: 2,
            dies_per_channel: 1,
            planes_per_die: 1,
            blocks_per_plane: 4,
            pages_per_block: 8,
            page_size: 4096,
        };
        let t = Timing::default();
        let dev = Arc::new(FlashDevice::memory(geo, t).unwrap());
        let clock = Arc::new(VirtualClock::new(1_000));
        let g = PriorityGate::new(clock.clone(), t.program_ns, 64 << 10);
        assert_eq!(g.max_piece(), 64 << 10);
        // Nothing shared: always admitted.
        assert_eq!(g.reserve(Dir::Write, 4096).unwrap(), Admit::At(1_000));
        assert_eq!(g.reserve(Dir::Write, 4096).unwrap(), Admit::At(1_000));
        g.set_shared(vec![(dev.clone(), 0)]);
        assert_eq!(g.reserve(Dir::Read, 4096).unwrap(), Admit::At(1_000));
        // That read booked one page read on the die: a second piece still fits
        // in the slack, but pieces admitted together cannot pile up unseen.
        assert_eq!(g.reserve(Dir::Write, 4096).unwrap(), Admit::At(1_000));
        match g.reserve(Dir::Write, 4096).unwrap() {
            Admit::Retry(at) => assert_eq!(at, 1_000 + t.read_ns),
            other => panic!("a third piece went ahead of booked work: {other:?}"),
        }
        clock.set(1_000 + t.read_ns + t.program_ns);
        // The regular tenant books three programs on channel 0's die.
        let oob = Oob {
            owner: 1,
            kind: OobKind::Data,
            lba: 0,
            seq: 1,
        };
        let mut done = 0;
        for p in 0..3 {
            done = dev.program(p, &[0u8; 4096], &oob, 1_000).unwrap();
        }
        match g.reserve(Dir::Write, 4096).unwrap() {
            Admit::Retry(at) => assert_eq!(at, done - t.program_ns),
            other => panic!("admitted ahead of the regular tenant: {other:?}"),
        }
        // Once only one program is left ahead, the harvest piece may go.
        clock.set(done - t.program_ns);
        assert_eq!(
            g.reserve(Dir::Write, 4096).unwrap(),
            Admit::At(done - t.program_ns)
        );
        // Busy dies on a channel the volume does not share do not matter.
        g.set_shared(vec![(dev.clone(), 1)]);
        let _ = dev.program(8, &[0u8; 4096], &oob, clock.now()).unwrap();
        assert_eq!(g.reserve(Dir::Write, 4096).unwrap(), Admit::At(clock.now()));
    }
}
