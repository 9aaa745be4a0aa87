//! NAND timing parameters.

use clock::Nanos;
use serde::{Deserialize, Serialize};

/// Latencies of the NAND operations and the channel bus.
///
/// Defaults are those of a TLC-class part scaled so that one channel of the default
/// geometry writes at about 40 MB/s and reads at about 300 MB/s: a vSSD's bandwidth
/// is then set by its channel count, as in the BlockFlex paper, at rates this
/// emulator can sustain through NBD on a small machine.
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
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            read_ns: 40_000,
            program_ns: 400_000,
            erase_ns: 3_000_000,
            channel_mbps: 400,
        }
    }
}

impl Timing {
    /// Time to move `bytes` over one channel's bus.
    pub fn transfer_ns(&self, bytes: u64) -> Nanos {
        (bytes * 1000).div_ceil(self.channel_mbps.max(1))
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
}
