//! A fleet of flexssd hosts with etcd as its only source of truth.
//!
//! Three parts, one file each, sharing the key layout of [`keys`]:
//!
//! * [`agent`]: runs inside `flexssd serve` on every host with a `[cluster]`
//!   section. It registers the host under a lease it keeps alive, publishes
//!   the host's devices and gSSD pool, and converges the host to the vSSDs
//!   desired for it, writing back what it observed. It reaches the host only
//!   through the [`agent::HostPort`] trait, so the scale benchmark can run a
//!   thousand light agents against the same protocol.
//! * [`scheduler`]: at most one active at a time, elected through a
//!   lease-held key. It places vSSDs by SLA curve (the same `sla::Placer`
//!   that `flexssd sim sla-placement` runs) or by channel count, each as one
//!   etcd transaction that compares the device's allocation revision, and it
//!   turns host lease expiries into `host-lost` events.
//! * [`etcd`]: connecting (TLS client certificates or user and password),
//!   with the retry and logging every caller wants.
//!
//! Nothing here holds a lock across an etcd call: the scheduler's view of the
//! fleet is a map behind a mutex that is updated, never awaited under.

pub mod agent;
pub mod bench;
pub mod etcd;
pub mod host;
pub mod keys;
pub mod scheduler;

pub use agent::{Agent, HostPort};
pub use keys::Keys;
pub use scheduler::{CreateRequest, Scheduler, SchedulerConfig};

/// What goes wrong in the fleet.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// etcd could not be reached or refused a request.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// A value under flexssd's keys is not a valid record.
    #[error("malformed value under {key}: {reason}")]
    Malformed {
        /// The key.
        key: String,
        /// Why it does not parse.
        reason: String,
    },
    /// The request is invalid (the message says which field and why).
    #[error("{0}")]
    Invalid(String),
    /// Something named does not exist (a host, a vSSD).
    #[error("{0}")]
    NotFound(String),
    /// The name is taken.
    #[error("{0}")]
    Exists(String),
    /// The fleet has no room: the message says what was short.
    #[error("{0}")]
    NoRoom(String),
    /// This scheduler is not the active one.
    #[error("this scheduler is not the active one (the active one is {leader})")]
    NotLeader {
        /// The active scheduler's API URL, or `none`.
        leader: String,
    },
    /// Too many conflicting updates; try again.
    #[error("{0}")]
    Conflict(String),
    /// A local file (certificate, password) could not be read.
    #[error("{path}: {error}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        error: std::io::Error,
    },
}

impl ClusterError {
    /// There is no fleet vSSD `name`. The one message for it: the fleet API
    /// gives a tenant token exactly this for another tenant's vSSD too, so
    /// that a tenant cannot tell the two apart.
    pub fn no_vssd(name: &str) -> Self {
        ClusterError::NotFound(format!("no vSSD named {name:?} in the fleet"))
    }

    /// There is no fleet harvest volume `name` (see [`ClusterError::no_vssd`]).
    pub fn no_harvest_volume(name: &str) -> Self {
        ClusterError::NotFound(format!("no harvest volume named {name:?} in the fleet"))
    }

    /// A harvest request names a harvest tenant `name` that is no fleet vSSD
    /// (see [`ClusterError::no_vssd`]).
    pub fn no_harvest_tenant(name: &str) -> Self {
        ClusterError::NotFound(format!(
            "no vSSD named {name:?} in the fleet: a harvest tenant is a fleet vSSD created with --role harvest"
        ))
    }

    /// The HTTP status an API answers with.
    pub fn http_status(&self) -> u16 {
        match self {
            ClusterError::Invalid(_) | ClusterError::Malformed { .. } => 400,
            ClusterError::NotFound(_) => 404,
            ClusterError::Exists(_) | ClusterError::Conflict(_) => 409,
            ClusterError::NoRoom(_) => 507,
            ClusterError::NotLeader { .. } | ClusterError::Etcd(_) => 503,
            ClusterError::File { .. } => 500,
        }
    }
}

/// Reads wall-clock milliseconds since the Unix epoch, for the timestamps
/// humans read in records and events (never to decide anything). Injected, so
/// tests can pin it.
pub type WallMs = std::sync::Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system's wall clock, for the daemon.
pub fn system_wall() -> WallMs {
    std::sync::Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    })
}
