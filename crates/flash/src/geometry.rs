//! Device geometry and flat physical addresses.

use serde::{Deserialize, Serialize};

use crate::{FlashError, Result};

/// A block's index across the whole device: channel-major, then die, plane, block.
pub type BlockId = u32;
/// A page's index across the whole device: `block * pages_per_block + page`.
pub type PageId = u64;

/// A parallel unit: one die on one channel, the granularity at which operations
/// proceed in parallel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Pu {
    /// Channel.
    pub channel: u32,
    /// Die within the channel.
    pub die: u32,
}

/// The shape of an emulated SSD.
///
/// The default is shaped like the BlockFlex paper's open-channel SSD (16 channels)
/// scaled to fit a laptop: 16 channels × 4 dies × 1 plane × 64 blocks × 256 pages of
/// 4 KiB = 4 GiB, 1 MiB erase blocks, 256 MiB per channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Geometry {
    /// Independent channels (buses).
    pub channels: u32,
    /// Dies per channel.
    pub dies_per_channel: u32,
    /// Planes per die.
    pub planes_per_die: u32,
    /// Erase blocks per plane.
    pub blocks_per_plane: u32,
    /// Pages per erase block.
    pub pages_per_block: u32,
    /// Page size in bytes (a multiple of 512).
    pub page_size: u32,
}

impl Default for Geometry {
    fn default() -> Self {
        Self {
            channels: 16,
            dies_per_channel: 4,
            planes_per_die: 1,
            blocks_per_plane: 64,
            pages_per_block: 256,
            page_size: 4096,
        }
    }
}

impl Geometry {
    /// Checks that the geometry is usable.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(FlashError::BadGeometry(m));
        if self.channels == 0
            || self.dies_per_channel == 0
            || self.planes_per_die == 0
            || self.blocks_per_plane == 0
            || self.pages_per_block == 0
        {
            return bad(format!("every dimension must be at least 1: {self:?}"));
        }
        if self.page_size < 512 || !self.page_size.is_multiple_of(512) || self.page_size > 1 << 20 {
            return bad(format!(
                "page_size {} must be a multiple of 512 up to 1 MiB",
                self.page_size
            ));
        }
        if self.total_blocks_u64() > u32::MAX as u64 / 2 {
            return bad("too many blocks".into());
        }
        if self.total_bytes() > 1 << 46 {
            return bad(format!(
                "{} bytes is more than the 64 TiB this emulator supports",
                self.total_bytes()
            ));
        }
        Ok(())
    }

    fn total_blocks_u64(&self) -> u64 {
        self.channels as u64
            * self.dies_per_channel as u64
            * self.planes_per_die as u64
            * self.blocks_per_plane as u64
    }

    /// Erase blocks in the device.
    pub fn total_blocks(&self) -> u32 {
        self.total_blocks_u64() as u32
    }

    /// Pages in the device.
    pub fn total_pages(&self) -> u64 {
        self.total_blocks_u64() * self.pages_per_block as u64
    }

    /// Raw capacity in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.total_pages() * self.page_size as u64
    }

    /// Blocks on one channel.
    pub fn blocks_per_channel(&self) -> u32 {
        self.dies_per_channel * self.blocks_per_die()
    }

    /// Blocks on one die (all its planes).
    pub fn blocks_per_die(&self) -> u32 {
        self.planes_per_die * self.blocks_per_plane
    }

    /// Bytes in one erase block.
    pub fn block_bytes(&self) -> u64 {
        self.pages_per_block as u64 * self.page_size as u64
    }

    /// Raw bytes on one channel.
    pub fn channel_bytes(&self) -> u64 {
        self.blocks_per_channel() as u64 * self.block_bytes()
    }

    /// The block at `(channel, die, plane, block-in-plane)`.
    pub fn block_id(&self, channel: u32, die: u32, plane: u32, block: u32) -> BlockId {
        ((channel * self.dies_per_channel + die) * self.planes_per_die + plane)
            * self.blocks_per_plane
            + block
    }

    /// The channel a block is on.
    pub fn channel_of(&self, b: BlockId) -> u32 {
        b / self.blocks_per_channel()
    }

    /// The parallel unit (channel, die) a block is on.
    pub fn pu_of(&self, b: BlockId) -> Pu {
        let per_die = self.blocks_per_die();
        let d = b / per_die;
        Pu {
            channel: d / self.dies_per_channel,
            die: d % self.dies_per_channel,
        }
    }

    /// The block's index within its plane.
    pub fn block_in_plane(&self, b: BlockId) -> u32 {
        b % self.blocks_per_plane
    }

    /// The first page of a block.
    pub fn first_page(&self, b: BlockId) -> PageId {
        b as u64 * self.pages_per_block as u64
    }

    /// Splits a page id into (block, page within block).
    pub fn split(&self, p: PageId) -> (BlockId, u32) {
        (
            (p / self.pages_per_block as u64) as BlockId,
            (p % self.pages_per_block as u64) as u32,
        )
    }

    /// Checks a block id.
    pub fn check_block(&self, b: BlockId) -> Result<()> {
        if b >= self.total_blocks() {
            return Err(FlashError::OutOfRange {
                what: "block",
                value: b as u64,
                max: self.total_blocks() as u64,
            });
        }
        Ok(())
    }

    /// Checks a page id.
    pub fn check_page(&self, p: PageId) -> Result<()> {
        if p >= self.total_pages() {
            return Err(FlashError::OutOfRange {
                what: "page",
                value: p,
                max: self.total_pages(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_paper_shaped_and_valid() {
        let g = Geometry::default();
        g.validate().unwrap();
        assert_eq!(g.channels, 16);
        assert_eq!(g.total_bytes(), 4 << 30);
        assert_eq!(g.channel_bytes(), 256 << 20);
    }

    #[test]
    fn addresses_round_trip() {
        let g = Geometry {
            channels: 3,
            dies_per_channel: 2,
            planes_per_die: 2,
            blocks_per_plane: 5,
            ..Default::default()
        };
        for ch in 0..3 {
            for die in 0..2 {
                for pl in 0..2 {
                    for b in 0..5 {
                        let id = g.block_id(ch, die, pl, b);
                        assert_eq!(g.channel_of(id), ch);
                        assert_eq!(g.pu_of(id), Pu { channel: ch, die });
                        assert_eq!(g.block_in_plane(id), b);
                        let p = g.first_page(id) + 7;
                        assert_eq!(g.split(p), (id, 7));
                    }
                }
            }
        }
        assert!(g.check_block(g.total_blocks()).is_err());
    }

    #[test]
    fn rejects_bad_geometry() {
        assert!(Geometry {
            channels: 0,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(Geometry {
            page_size: 1000,
            ..Default::default()
        }
        .validate()
        .is_err());
    }
}
