//! Errors of the control plane.
//!
//! Every error says what was wrong in words a user of the CLI can act on, and has an
//! [`ErrorKind`] so that the HTTP API can map it to a status code without parsing
//! messages.

/// Broad classes of failure, for mapping to HTTP status codes and exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or asks for something impossible (HTTP 400).
    BadRequest,
    /// The named vSSD or device does not exist (HTTP 404).
    NotFound,
    /// The request conflicts with existing state: duplicate name, overlapping
    /// placement (HTTP 409).
    Conflict,
    /// Not enough free flash (channels) for the request (HTTP 507).
    NoSpace,
    /// Anything else: store, flash or FTL failure (HTTP 500).
    Internal,
}

/// Why a control-plane operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A vSSD name that cannot be an NBD export name.
    #[error(
        "invalid vSSD name {0:?}: a name is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"
    )]
    InvalidName(String),
    /// A vSSD of that name exists already.
    #[error("a vSSD named {0:?} already exists")]
    Duplicate(String),
    /// No vSSD of that name.
    #[error("no vSSD named {0:?}")]
    NoSuchVssd(String),
    /// No device of that name.
    #[error("no device named {0:?}")]
    NoSuchDevice(String),
    /// No cache tier of that name.
    #[error("no cache tier named {0:?}")]
    NoSuchTier(String),
    /// The name belongs to a cache tier (one of its volumes or its cache vSSD).
    #[error("{name:?} belongs to cache tier {tier:?} (a tier volume or the tier's cache vSSD)")]
    TierName {
        /// The name asked for.
        name: String,
        /// The tier that owns it.
        tier: String,
    },
    /// A cache tier refused a change or could not be built.
    #[error(transparent)]
    Tier(tier::TierError),
    /// Not enough unused channels.
    #[error("not enough free channels: {requested} requested, {free} free on device {device}")]
    NotEnoughChannels {
        /// Device searched.
        device: String,
        /// Channels asked for.
        requested: u32,
        /// Channels with no vSSD on them.
        free: u32,
    },
    /// An explicit placement overlaps flash that another vSSD owns.
    #[error("placement overlaps vSSD {other:?} on channel {channel} (blocks {ours} vs {theirs})")]
    Overlap {
        /// The vSSD that owns the flash already.
        other: String,
        /// The channel where they meet.
        channel: u32,
        /// The requested block range.
        ours: String,
        /// The other vSSD's block range on that channel.
        theirs: String,
    },
    /// A capacity above what the flash can hold.
    #[error("capacity {requested} bytes is more than the {max} bytes this placement can hold (at most {max_human})")]
    CapacityTooLarge {
        /// Requested (rounded up to a page).
        requested: u64,
        /// Largest possible.
        max: u64,
        /// `max` in human units.
        max_human: String,
    },
    /// Any other malformed request.
    #[error("{0}")]
    Invalid(String),
    /// The configuration is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// The embedded control store failed.
    #[error("control store: {0}")]
    Store(String),
    /// The FTL failed.
    #[error(transparent)]
    Ftl(#[from] ftl::FtlError),
    /// The flash model failed (opening a device, mostly).
    #[error("flash device {device}: {source}")]
    Flash {
        /// Device name.
        device: String,
        /// What went wrong.
        source: flash::FlashError,
    },
    /// No harvest volume of that name.
    #[error("no harvest volume named {0:?}")]
    NoSuchHarvestVolume(String),
    /// Under-harvesting that no gSSD can cover (BlockFlex's exception): the
    /// tenant asked for more than the pool holds now.
    #[error("cannot harvest {wanted}: {why}")]
    UnderHarvest {
        /// What was asked for.
        wanted: String,
        /// What the pool could not give.
        why: String,
    },
    /// The operation must wait for harvested flash to come back: a harvest
    /// volume has been told to move off by a deadline.
    #[error("{what}: its flash is lent to harvest volume {volume}, which must move off by t = {deadline_s} s; retry after that")]
    Reclaiming {
        /// What was attempted.
        what: String,
        /// The harvest volume still on the flash.
        volume: String,
        /// Its deadline, seconds on the daemon's clock.
        deadline_s: u64,
    },
    /// A harvest request while the harvester is off.
    #[error("the harvester is off: set `enabled = true` in the [harvest] section of the daemon's configuration and restart it (see docs/config.md)")]
    HarvesterOff,
    /// A harvest request naming a tenant that is not a harvest tenant.
    #[error("{0} is not a harvest tenant: create its vSSD with role \"harvest\"")]
    NotHarvestTenant(String),
    /// A name reserved for the system (gSSD vSSDs are `gssd-<number>`).
    #[error("{0:?}: names gssd-<number> are reserved for gSSDs")]
    ReservedName(String),
    /// A gSSD's vSSD cannot be deleted by hand.
    #[error(
        "{0} is a gSSD: it goes back to its home when its harvest volume is released or reclaimed"
    )]
    IsGssd(String),
    /// A harvest tenant's vSSD still has harvest volumes.
    #[error(
        "{tenant} is the harvest tenant of volume {volume}: release its harvest volumes first"
    )]
    HasHarvestVolumes {
        /// The tenant's vSSD.
        tenant: String,
        /// One of its volumes.
        volume: String,
    },
    /// A vSSD's predictors failed (the daemon's fault, not the request's).
    #[error("the predictors of {vssd} failed: {message}")]
    Predictor {
        /// The vSSD whose predictors failed.
        vssd: String,
        /// What failed.
        message: String,
    },
    /// The harvesting library refused an operation.
    #[error(transparent)]
    Harvest(#[from] harvest::HarvestError),
    /// A harvest volume's mapping refused an operation.
    #[error(transparent)]
    Gvol(#[from] gvol::GvolError),
    /// A file-system operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

impl ControlError {
    /// The class of the error.
    pub fn kind(&self) -> ErrorKind {
        use ControlError::*;
        match self {
            InvalidName(_) | CapacityTooLarge { .. } | Invalid(_) | Config(_) => {
                ErrorKind::BadRequest
            }
            NoSuchVssd(_) | NoSuchDevice(_) | NoSuchTier(_) | NoSuchHarvestVolume(_) => {
                ErrorKind::NotFound
            }
            UnderHarvest { .. } => ErrorKind::NoSpace,
            HarvesterOff | HasHarvestVolumes { .. } => ErrorKind::Conflict,
            NotHarvestTenant(_) | ReservedName(_) | IsGssd(_) => ErrorKind::BadRequest,
            Predictor { .. } => ErrorKind::Internal,
            Reclaiming { .. } => ErrorKind::Conflict,
            Harvest(_) => ErrorKind::BadRequest,
            Gvol(_) => ErrorKind::Internal,
            Duplicate(_) | Overlap { .. } | TierName { .. } => ErrorKind::Conflict,
            Tier(tier::TierError::Invalid(_) | tier::TierError::Cache(_)) => ErrorKind::BadRequest,
            Tier(_) => ErrorKind::Internal,
            NotEnoughChannels { .. } => ErrorKind::NoSpace,
            Ftl(ftl::FtlError::Config(_)) => ErrorKind::BadRequest,
            Ftl(ftl::FtlError::NoSpace(_)) => ErrorKind::NoSpace,
            Store(_) | Ftl(_) | Flash { .. } | Io { .. } => ErrorKind::Internal,
        }
    }
}

/// Result type of this crate.
pub type Result<T, E = ControlError> = std::result::Result<T, E>;

/// Converts any redb error into [`ControlError::Store`].
pub(crate) fn store_err(e: impl Into<redb::Error>) -> ControlError {
    ControlError::Store(e.into().to_string())
}
