//! Admission gates: traffic shaping in front of a device.
//!
//! A shaper such as Regulator's SLA scheduler decides *when* a request may start,
//! not what it does, so it is not a [`crate::Layer`]: a layer's synchronous
//! `read` would have to block its caller's thread until the request's time slot,
//! and the NBD server calls devices from a small pool of async workers, where one
//! throttled tenant would then stall every other. Instead the caller asks the gate
//! first ([`Gate::reserve`]), waits for the returned time however suits it (the NBD
//! server waits asynchronously; a simulator advances its virtual clock), and then
//! submits the request to the device.

use std::sync::Arc;

use clock::Clock;

use crate::{IoResult, Nanos};

/// Direction of a gated request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// A read: data flows from the device.
    Read,
    /// A write: data flows to the device.
    Write,
}

/// A gate's answer to a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Booked: submit the request at this time (now or later), and do not ask
    /// again for it.
    At(Nanos),
    /// Not booked: ask again at this time. Used for best-effort traffic that may
    /// only take capacity nobody else claims at the moment it runs.
    Retry(Nanos),
}

/// Admission control for one tenant of a shared device.
pub trait Gate: Send + Sync + std::fmt::Debug {
    /// Asks to run a request of `len` bytes (at most [`Gate::max_piece`]); times
    /// are on [`Gate::clock`]. Errors when the tenant may never issue such a
    /// request (for example a write by a tenant whose SLA allows no writes).
    fn reserve(&self, dir: Dir, len: u64) -> IoResult<Admit>;

    /// The clock the reservation times are on.
    fn clock(&self) -> &Arc<dyn Clock>;

    /// Largest request the gate admits as one piece; the caller splits larger
    /// requests into pieces of at most this size and reserves each in turn.
    fn max_piece(&self) -> u64 {
        u64::MAX
    }

    /// A count that changes whenever the gate's terms change (an SLA set,
    /// relaxed or cleared). A caller waiting for a time booked under older
    /// terms gives the booking back ([`Gate::cancel`]) and asks again, so a
    /// cleared SLA releases pieces it had booked far ahead. Default: terms
    /// that never change.
    fn terms(&self) -> u64 {
        0
    }

    /// Gives back a booking of `len` bytes that [`Gate::reserve`] made for time
    /// `at` and that will not be used. Default: nothing to give back.
    fn cancel(&self, dir: Dir, len: u64, at: Nanos) {
        let _ = (dir, len, at);
    }
}
