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
