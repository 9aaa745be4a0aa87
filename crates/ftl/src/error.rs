//! Errors of the FTL.

/// Why an FTL operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FtlError {
    /// The flash model refused an operation (a bug in the FTL if it is a NAND rule).
    #[error("flash: {0}")]
    Flash(#[from] flash::FlashError),
    /// The configuration cannot work (capacity too large, extents out of range...).
    #[error("invalid vSSD configuration: {0}")]
    Config(String),
    /// Every parallel unit is full of live data.
    #[error("vSSD {0} is out of free flash (all blocks hold live data)")]
    NoSpace(String),
    /// A lend ran out of free flash while it moved data, because host writes
    /// running beside it used the room [`crate::Vssd::lendable`] had counted on
    /// (or the free blocks could not be reclaimed in time). Nothing was lent and
    /// nothing was lost; the caller may retry with fewer blocks or later.
    #[error("vSSD {0} ran out of free flash while a lend moved data; nothing was lent")]
    LendNoRoom(String),
    /// Recovery found state that contradicts itself.
    #[error("recovery of vSSD {name}: {reason}")]
    Recovery {
        /// vSSD name.
        name: String,
        /// What is inconsistent.
        reason: String,
    },
    /// Reading or writing a checkpoint failed.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// The vSSD was destroyed.
    #[error("vSSD {0} has been deleted")]
    Gone(String),
    /// A lend named a channel the vSSD has no flash on.
    #[error("vSSD {name} has no flash on channel {channel}")]
    UnknownChannel {
        /// vSSD name.
        name: String,
        /// The channel asked for.
        channel: u32,
    },
    /// A lend asked for more blocks than [`crate::Vssd::lendable`] allows now.
    #[error(
        "vSSD {name} can lend at most {lendable} blocks per plane on channel {channel}, not {asked}"
    )]
    NotLendable {
        /// vSSD name.
        name: String,
        /// The channel.
        channel: u32,
        /// Blocks per plane asked for.
        asked: u32,
        /// Blocks per plane it could lend.
        lendable: u32,
    },
    /// A channel already has a lent range (one per channel).
    #[error("vSSD {name} already lends blocks on channel {channel} (one lent range per channel)")]
    AlreadyLent {
        /// vSSD name.
        name: String,
        /// The channel.
        channel: u32,
    },
    /// `take_back` named an extent that is not (exactly) one the vSSD lent.
    #[error("vSSD {name} has not lent {extent:?}")]
    NotLent {
        /// vSSD name.
        name: String,
        /// The extent named.
        extent: crate::Extent,
    },
    /// A lend or take-back request that means nothing: no channels, zero blocks, or a
    /// channel or extent named twice.
    #[error("vSSD {name}: bad lend request: {reason}")]
    BadLend {
        /// vSSD name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl From<FtlError> for blockdev::IoError {
    fn from(e: FtlError) -> Self {
        match e {
            FtlError::NoSpace(m) => blockdev::IoError::NoSpace(m),
            FtlError::Gone(m) => blockdev::IoError::Gone(m),
            other => blockdev::IoError::Media(other.to_string()),
        }
    }
}
