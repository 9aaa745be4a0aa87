//! NAND timing parameters.
//!
//! Besides the latencies of the three NAND operations and the bus, a die can
//! *suspend* a program or an erase to serve a read and resume it afterwards, as
//! every modern NAND part and controller does: without it a read that lands on a
//! die busy programming waits for the whole program (hundreds of µs), and a
//! tenant's read tail latency is set by its neighbours' writes.

use clock::Nanos;
use serde::{Deserialize, Serialize};

use crate::FlashError;

/// Latencies of the NAND operations and the channel bus.
///
/// Defaults are those of a TLC-class part scaled so that one channel of the default
/// geometry writes at about 40 MB/s and reads at about 300 MB/s: a vSSD's bandwidth
/// is then set by its channel count, as in the BlockFlex paper, at rates this
/// emulator can sustain through NBD on a small machine.
///
/// Program and erase suspend are on by default (`max_suspends` > 0). With
/// `max_suspends = 0` the timing is exactly that of a part without suspension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timing {
    /// Page read (array to register), ns.
    pub read_ns: Nanos,
    /// Page program (register to array), ns.
    pub program_ns: Nanos,
    /// Block erase, ns.
    pub erase_ns: Nanos,
    /// Channel bus throughput in MB/s (10^6 bytes per second) for data transfer.
    pub channel_mbps: u64,
    /// Program suspend latency, ns: from a read's arrival at a die that is
    /// programming until the die can start the read. A program suspends at the
    /// end of its current program/verify pulse, so this is of the order of one
    /// pulse: tens of µs (Wu & He, "Reducing SSD Read Latency via NAND Flash
    /// Program and Erase Suspension", FAST'12, suspend at ISPP pulse boundaries;
    /// TLC datasheets give program-suspend latencies of 10–100 µs). Default 20 µs.
    pub program_suspend_ns: Nanos,
    /// Erase suspend latency, ns: as `program_suspend_ns` for an erase, which
    /// suspends at the end of its current erase pulse (longer than a program
    /// pulse). Default 40 µs.
    pub erase_suspend_ns: Nanos,
    /// Resume overhead, ns: the time a resumed program or erase loses to restart
    /// (re-applying bias voltages, a verify before the next pulse). It adds to the
    /// suspended operation's completion, not to the read's. Default 10 µs.
    pub resume_ns: Nanos,
    /// The most reads one program or erase may serve ahead of itself (by being
    /// suspended, or before it starts); after that, reads wait for it, so a
    /// stream of reads cannot hold a write off forever. This is the controller's
    /// policy, not a NAND constant. `0` turns suspension off. Default 8.
    pub max_suspends: u32,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            read_ns: 40_000,
            program_ns: 400_000,
            erase_ns: 3_000_000,
            channel_mbps: 400,
            program_suspend_ns: 20_000,
            erase_suspend_ns: 40_000,
            resume_ns: 10_000,
            max_suspends: 8,
        }
    }
}

impl Timing {
    /// Time to move `bytes` over one channel's bus.
    pub fn transfer_ns(&self, bytes: u64) -> Nanos {
        (bytes * 1000).div_ceil(self.channel_mbps.max(1))
    }

    /// Whether reads may suspend programs and erases (`max_suspends` > 0).
    pub fn suspend_enabled(&self) -> bool {
        self.max_suspends > 0
    }

    /// The same timing with program and erase suspension off.
    pub fn without_suspend(self) -> Self {
        Self {
            max_suspends: 0,
            ..self
        }
    }

    /// Checks the values that would make the model meaningless; the error names
    /// the key.
    pub fn validate(&self) -> Result<(), FlashError> {
        let bad = |key: &'static str, reason: String| Err(FlashError::BadTiming { key, reason });
        if self.channel_mbps == 0 {
            return bad("channel_mbps", "must be at least 1".into());
        }
        if self.suspend_enabled() && self.program_suspend_ns >= self.program_ns {
            return bad(
                "program_suspend_ns",
                format!(
                    "{} ns is not shorter than the program itself (program_ns = {}); \
                     set max_suspends = 0 to turn suspension off",
                    self.program_suspend_ns, self.program_ns
                ),
            );
        }
        if self.suspend_enabled() && self.erase_suspend_ns >= self.erase_ns {
            return bad(
                "erase_suspend_ns",
                format!(
                    "{} ns is not shorter than the erase itself (erase_ns = {}); \
                     set max_suspends = 0 to turn suspension off",
                    self.erase_suspend_ns, self.erase_ns
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_time() {
        let t = Timing {
            channel_mbps: 400,
            ..Default::default()
        };
        assert_eq!(t.transfer_ns(4000), 10_000);
    }

    #[test]
    fn suspend_is_on_by_default_and_can_be_turned_off() {
        let t = Timing::default();
        assert!(t.suspend_enabled());
        assert!(t.validate().is_ok());
        assert!(!t.without_suspend().suspend_enabled());
    }

    #[test]
    fn bad_timing_names_the_key() {
        let t = Timing {
            program_suspend_ns: 500_000,
            ..Default::default()
        };
        let e = t.validate().unwrap_err().to_string();
        assert!(e.contains("program_suspend_ns"), "{e}");
        assert!(t.without_suspend().validate().is_ok());
        let t = Timing {
            erase_suspend_ns: 3_000_000,
            ..Default::default()
        };
        assert!(t
            .validate()
            .unwrap_err()
            .to_string()
            .contains("erase_suspend_ns"));
        let t = Timing {
            channel_mbps: 0,
            ..Default::default()
        };
        assert!(t
            .validate()
            .unwrap_err()
            .to_string()
            .contains("channel_mbps"));
    }

    #[test]
    fn unknown_keys_are_refused() {
        use serde::de::value::{Error, MapDeserializer};
        let map = MapDeserializer::<_, Error>::new(std::iter::once(("suspend_ns", 1u64)));
        let e = Timing::deserialize(map).unwrap_err().to_string();
        assert!(e.contains("suspend_ns"), "{e}");
        let map = MapDeserializer::<_, Error>::new(std::iter::once(("max_suspends", 0u32)));
        let t = Timing::deserialize(map).unwrap();
        assert_eq!(
            t,
            Timing::default().without_suspend(),
            "missing keys take defaults"
        );
    }
}
