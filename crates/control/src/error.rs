//! Errors of the control plane.
//!
//! Every error says what was wrong in words a user of the CLI can act on, and has an
//! [`ErrorKind`] so that the HTTP API can map it to a status code without parsing
//! messages ([`ErrorKind::http_status`]). A variant is chosen by whose fault the
//! error is and what the caller can do about it: [`ControlError::Invalid`] is
//! only for a request that is wrong in itself (HTTP 400); the daemon's own
//! failures (a measurement that broke, a scheduler that refused what the store
//! already holds, a harvester period that failed) have variants of their own
//! that map to 500, so a client never retries a fixed request for them.

/// Broad classes of failure, for mapping to HTTP status codes and exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or asks for something impossible (HTTP 400):
    /// the caller must change it.
    BadRequest,
    /// The named vSSD or device does not exist (HTTP 404).
    NotFound,
    /// The request conflicts with the daemon's state: duplicate name,
    /// overlapping placement, the harvester being off (HTTP 409). The same
    /// request can succeed once that state changes.
    Conflict,
    /// Not enough free flash (channels) for the request (HTTP 507).
    NoSpace,
    /// The daemon's fault, not the request's: store, flash or FTL failure, an
    /// unusable configuration, a failed measurement or harvester period (HTTP
    /// 500).
    Internal,
}

impl ErrorKind {
    /// The HTTP status code of this kind of error: 400, 404, 409, 507 or 500.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::Conflict => 409,
            ErrorKind::NoSpace => 507,
            ErrorKind::Internal => 500,
        }
    }
}

/// Why a control-plane operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A vSSD name that cannot be an NBD export name.
    #[error(
        "invalid vSSD name {0:?}: a name is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"
    )]
    InvalidName(String),
    /// A tenant name that cannot be a TLS identity.
    #[error(
        "invalid tenant name {0:?}: a tenant is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"
    )]
    InvalidTenant(String),
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
    /// A configured cache tier's volume has the name of an existing vSSD
    /// (HTTP 409, like any duplicate name).
    #[error("volume name {volume:?} is taken by a vSSD; rename the volume in tier {tier:?} or delete the vSSD")]
    TierVolumeTaken {
        /// The tier.
        tier: String,
        /// Its volume, whose name a vSSD has.
        volume: String,
    },
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
    /// Any other malformed request: the caller's input is wrong in itself
    /// (HTTP 400). Not for the daemon's own failures.
    #[error("{0}")]
    Invalid(String),
    /// The daemon's configuration is unusable (HTTP 500 if a request meets it,
    /// e.g. no flash devices configured: the request is fine, the daemon is
    /// not set up to serve it; at startup it stops the daemon).
    #[error("configuration: {0}")]
    Config(String),
    /// SLA measurement failed while it ran (the scratch unit or the device
    /// under test broke, or the samples gave no curve): not the request's
    /// fault (HTTP 500).
    #[error("SLA measurement: {0}")]
    Measure(String),
    /// The scheduler refused a vSSD's SLA after the control store recorded it
    /// (HTTP 500: the SLA was checked first, so this is the daemon's fault).
    #[error("the scheduler of vSSD {vssd} refused its SLA: {message}")]
    Scheduler {
        /// The vSSD.
        vssd: String,
        /// What the scheduler said.
        message: String,
    },
    /// A harvester period (`POST /v1/harvest/tick` or the periodic tick)
    /// failed: whatever the cause (a pool insert, a reclaim, a lend), the
    /// harvester's own work went wrong, not the request (HTTP 500).
    #[error("a harvester period failed: {0}")]
    HarvestTick(Box<ControlError>),
    /// Another error, with what was being done; it keeps that error's kind
    /// (see [`ControlError::context`]).
    #[error("{what}: {source}")]
    Context {
        /// What was being done.
        what: String,
        /// The error.
        source: Box<ControlError>,
    },
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
    /// No API token with that id.
    #[error("no API token with id {0:?} (see `flexssd token list`)")]
    NoSuchToken(String),
    /// No measured curve is stored for a device's units of that many channels.
    #[error("device {device:?} has no unit curve stored for {channels}-channel units")]
    NoSuchUnitCurve {
        /// The device.
        device: String,
        /// The unit size, in channels.
        channels: u32,
    },
    /// A new API token's random id is taken (astronomically unlikely; retry).
    #[error("API token id {0:?} exists already; create the token again")]
    TokenIdTaken(String),
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
    /// A harvest request while the harvester is off (HTTP 409, not 503: it
    /// stays off until the operator turns it on and restarts the daemon, so
    /// retrying does not help; the message says how to turn it on).
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
            InvalidName(_) | InvalidTenant(_) | CapacityTooLarge { .. } | Invalid(_) => {
                ErrorKind::BadRequest
            }
            Config(_) | Measure(_) | Scheduler { .. } | HarvestTick(_) => ErrorKind::Internal,
            Context { source, .. } => source.kind(),
            NoSuchVssd(_)
            | NoSuchDevice(_)
            | NoSuchTier(_)
            | NoSuchHarvestVolume(_)
            | NoSuchToken(_)
            | NoSuchUnitCurve { .. } => ErrorKind::NotFound,
            TokenIdTaken(_) => ErrorKind::Conflict,
            UnderHarvest { .. } => ErrorKind::NoSpace,
            HarvesterOff | HasHarvestVolumes { .. } => ErrorKind::Conflict,
            NotHarvestTenant(_) | ReservedName(_) | IsGssd(_) => ErrorKind::BadRequest,
            Predictor { .. } => ErrorKind::Internal,
            Reclaiming { .. } => ErrorKind::Conflict,
            Harvest(_) => ErrorKind::BadRequest,
            Gvol(_) => ErrorKind::Internal,
            Duplicate(_) | Overlap { .. } | TierName { .. } | TierVolumeTaken { .. } => {
                ErrorKind::Conflict
            }
            Tier(tier::TierError::Invalid(_) | tier::TierError::Cache(_)) => ErrorKind::BadRequest,
            Tier(_) => ErrorKind::Internal,
            NotEnoughChannels { .. } => ErrorKind::NoSpace,
            Ftl(ftl::FtlError::Config(_)) => ErrorKind::BadRequest,
            Ftl(ftl::FtlError::NoSpace(_) | ftl::FtlError::LendNoRoom(_)) => ErrorKind::NoSpace,
            Store(_) | Ftl(_) | Flash { .. } | Io { .. } => ErrorKind::Internal,
        }
    }
}

impl ControlError {
    /// This error, with what was being done, keeping its kind.
    pub fn context(self, what: impl Into<String>) -> Self {
        ControlError::Context {
            what: what.into(),
            source: Box::new(self),
        }
    }

    /// This error as the failure of a harvester period (HTTP 500): nothing in
    /// a period is the caller's fault, whatever kind the cause has elsewhere.
    pub fn in_harvest_tick(self) -> Self {
        match self {
            e @ ControlError::HarvestTick(_) => e,
            e => ControlError::HarvestTick(Box::new(e)),
        }
    }
}

/// Result type of this crate.
pub type Result<T, E = ControlError> = std::result::Result<T, E>;

/// Converts any redb error into [`ControlError::Store`].
pub(crate) fn store_err(e: impl Into<redb::Error>) -> ControlError {
    ControlError::Store(e.into().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(e: &ControlError) -> u16 {
        e.kind().http_status()
    }

    #[test]
    fn bad_input_is_400_and_the_daemons_own_failures_are_500() {
        assert_eq!(
            status(&ControlError::Invalid("channels must be at least 1".into())),
            400
        );
        assert_eq!(status(&ControlError::InvalidName("a b".into())), 400);
        assert_eq!(
            status(&ControlError::Measure("probe read: flash".into())),
            500
        );
        assert_eq!(
            status(&ControlError::Scheduler {
                vssd: "a".into(),
                message: "unknown tenant".into()
            }),
            500
        );
        assert_eq!(
            status(&ControlError::Config(
                "no flash devices are configured".into()
            )),
            500
        );
        assert_eq!(status(&ControlError::Store("disk full".into())), 500);
    }

    #[test]
    fn state_conflicts_are_409_and_missing_names_404() {
        assert_eq!(status(&ControlError::HarvesterOff), 409);
        assert_eq!(status(&ControlError::Duplicate("a".into())), 409);
        assert_eq!(
            status(&ControlError::TierVolumeTaken {
                tier: "t0".into(),
                volume: "a".into()
            }),
            409
        );
        assert_eq!(status(&ControlError::NoSuchVssd("a".into())), 404);
        assert_eq!(
            status(&ControlError::NotEnoughChannels {
                device: "ssd0".into(),
                requested: 9,
                free: 8
            }),
            507
        );
    }

    #[test]
    fn context_keeps_the_kind_and_adds_the_words() {
        let e = ControlError::NotEnoughChannels {
            device: "ssd0".into(),
            requested: 9,
            free: 8,
        }
        .context("creating its cache vSSD")
        .context("tier \"t0\"");
        assert_eq!(e.kind(), ErrorKind::NoSpace);
        assert_eq!(status(&e), 507);
        assert!(
            e.to_string()
                .starts_with("tier \"t0\": creating its cache vSSD: not enough free channels"),
            "{e}"
        );
        let e = ControlError::Duplicate("a".into()).context("x");
        assert_eq!(e.kind(), ErrorKind::Conflict);
    }

    #[test]
    fn anything_out_of_a_harvester_period_is_500_with_its_cause() {
        let causes = [
            ControlError::Harvest(harvest::HarvestError::ZeroBandwidth),
            ControlError::Ftl(ftl::FtlError::Config("extent out of range".into())),
            ControlError::Invalid("x".into()),
            ControlError::NoSuchVssd("gssd-3".into()),
        ];
        for cause in causes {
            let was = status(&cause);
            let msg = cause.to_string();
            let e = cause.in_harvest_tick();
            assert_eq!(status(&e), 500, "{e} (was {was})");
            assert!(e.to_string().contains(&msg), "{e}");
            assert!(
                e.to_string().starts_with("a harvester period failed: "),
                "{e}"
            );
            // Wrapping twice does not stack.
            assert_eq!(
                e.in_harvest_tick()
                    .to_string()
                    .matches("period failed")
                    .count(),
                1
            );
        }
    }
}
