//! Shared SSD cache management for multi-tenant hosts, and a trace-driven
//! simulator that runs the very same policy code.
//!
//! Why one crate for both: the cache tier of the daemon and the simulator must
//! make the same decisions, so the replacement policies sit behind one trait
//! ([`CachePolicy`]) that knows nothing of devices, files or clocks. Time is a
//! number passed in with each access (virtual nanoseconds), evictions are
//! reported into a caller-owned reusable buffer ([`Events`]), and nothing in
//! here allocates per access on the hot path.
//!
//! Policies, one file each under [`policy`], chosen by name through
//! [`PolicyKind`]:
//!
//! | name | what | line | placement |
//! |---|---|---|---|
//! | `glru` | global LRU | 4 KiB | on every miss |
//! | `arc` | ARC (Megiddo & Modha, FAST'03) | 4 KiB | on every miss |
//! | `car` | CAR, Clock with Adaptive Replacement (Bansal & Modha, FAST'04) | 4 KiB | on every miss |
//! | `vfrm` | VMware vFRM: fair competition for one pool by global bin popularity, 1 MiB bins, lazy epochs | 128 KiB | at epoch ends |
//! | `isolation` | performance isolation: vFRM's machinery on equal per-tenant reservations | 128 KiB | at epoch ends |
//! | `grem` | GREM: long-term zone reserved by aged popularity, short-term zone competed (Algorithm 1) | 128 KiB | at epoch ends |
//! | `dgrem` | D-GREM: GREM plus burst detector and dynamic zone sizes | 128 KiB | at epoch ends |
//!
//! The four coarse policies place whole bins by default; [`BinFill`] lets them
//! place only the lines of a bin that were read, or choose per tenant from
//! what its reads show (`adaptive`, ours).
//!
//! Addresses are in *blocks* of [`BLOCK_BYTES`] (4 KiB): an [`Access`] names one
//! block of one address space. A policy caches whole *lines* of
//! [`CachePolicy::line_blocks`] blocks; capacities, evictions and admissions
//! are counted in lines. The IO cost model of the paper is [`CostModel`]; the
//! simulator is [`sim`]; the workload characterisation of the paper's Table I
//! is [`characterise`].

mod bins;
pub mod characterise;
pub mod cost;
mod list;
pub mod policy;
pub mod sim;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use characterise::{characterise, WorkloadStats};
pub use cost::{CostModel, Ledger, WritePolicy};
pub use sim::{RunResult, SimConfig, TenantResult};

/// Size of the addressing unit, the block: 4 KiB, the paper's fine cache line.
pub const BLOCK_BYTES: u64 = 4096;
/// Bits of a [`Key`] that hold the line number.
pub const LINE_BITS: u32 = 44;
/// Largest address-space id a [`Key`] can hold.
pub const MAX_SPACE: u32 = (1 << (64 - LINE_BITS)) - 1;
/// Largest line number a [`Key`] can hold.
pub const MAX_LINE: u64 = (1 << LINE_BITS) - 1;

/// A cache key: an address space (a tenant's volume) and a block or line
/// number in it, packed into one `u64` so hashing is one multiply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key(u64);

impl Key {
    /// Packs `space` (at most [`MAX_SPACE`]) and `line` (at most [`MAX_LINE`]).
    pub fn new(space: u32, line: u64) -> Result<Key, CacheError> {
        if space > MAX_SPACE {
            return Err(CacheError::KeyRange {
                what: "address space id",
                value: u64::from(space),
                max: u64::from(MAX_SPACE),
            });
        }
        if line > MAX_LINE {
            return Err(CacheError::KeyRange {
                what: "block number",
                value: line,
                max: MAX_LINE,
            });
        }
        Ok(Key((u64::from(space) << LINE_BITS) | line))
    }

    /// The address space (a tenant's volume).
    pub fn space(self) -> u32 {
        (self.0 >> LINE_BITS) as u32
    }

    /// The block or line number within the address space.
    pub fn line(self) -> u64 {
        self.0 & MAX_LINE
    }

    /// The same space with the number divided by `2^shift`: a block key to
    /// the key of the line or bin holding it.
    #[inline]
    pub fn coarsen(self, shift: u32) -> Key {
        Key((self.0 & !MAX_LINE) | ((self.0 & MAX_LINE) >> shift))
    }

    /// The packed representation.
    #[inline]
    pub fn raw(self) -> u64 {
        self.0
    }

    /// Rebuilds a key from [`Key::raw`].
    #[inline]
    pub fn from_raw(raw: u64) -> Key {
        Key(raw)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.space(), self.line())
    }
}

/// One block access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Virtual time in nanoseconds; must not decrease from one access to the next.
    pub time_ns: u64,
    /// The tenant (VM) the access belongs to; reservations are per tenant.
    pub tenant: u32,
    /// The block accessed (in [`BLOCK_BYTES`] units).
    pub key: Key,
    /// A write rather than a read.
    pub write: bool,
}

/// What one access did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    /// The block was in the cache.
    pub hit: bool,
    /// On a miss: the block's line was placed in the cache by this access.
    pub admitted: bool,
    /// On a miss: the block's line was copied into free flash after the
    /// miss was served, and is in [`Events::migrated_in`] (coarse policies
    /// with [`PolicyConfig::fill_free_flash`]).
    pub filled: bool,
}

/// Lines that left or entered the cache during one call, beyond the accessed
/// line's own admission (which [`Outcome::admitted`] tells). The caller owns
/// it, clears it when it has handled the contents, and reuses it, so the hot
/// path does not allocate.
#[derive(Debug, Default, Clone)]
pub struct Events {
    /// Lines evicted, as `(space, line)` keys in the policy's line units.
    pub evicted: Vec<Key>,
    /// Lines placed into the cache ahead of any access to them (epoch
    /// migrations of the coarse policies), in the policy's line units.
    pub migrated_in: Vec<Key>,
}

impl Events {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empties both lists, keeping their memory.
    pub fn clear(&mut self) {
        self.evicted.clear();
        self.migrated_in.clear();
    }

    /// True when neither list holds anything.
    pub fn is_empty(&self) -> bool {
        self.evicted.is_empty() && self.migrated_in.is_empty()
    }
}

/// How much of the cache one tenant holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TenantOccupancy {
    /// The tenant.
    pub tenant: u32,
    /// Lines of this tenant in the cache.
    pub resident_lines: u64,
    /// Lines reserved for this tenant (vFRM share, GREM long-term zone
    /// reservation); `None` for policies without reservations.
    pub reserved_lines: Option<u64>,
}

/// Zone sizes of the two-zone policies (GREM, D-GREM), in lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Zones {
    /// Capacity of the long-term zone `Z_L` (sum of the tenants' reservations).
    pub long_term_lines: u64,
    /// Capacity of the short-term zone `Z_S`.
    pub short_term_lines: u64,
}

/// A cache replacement policy: decides hit or miss, admission and eviction.
///
/// Implementations hold only metadata (keys), never data, and are driven
/// entirely by their inputs, so the same object serves the simulator and a
/// cache-tier data path.
pub trait CachePolicy: Send {
    /// Which policy this is.
    fn kind(&self) -> PolicyKind;

    /// Blocks per cache line (1 for 4 KiB lines, 32 for 128 KiB lines).
    fn line_blocks(&self) -> u64;

    /// Capacity in lines.
    fn capacity(&self) -> u64;

    /// Lines resident now; never more than [`CachePolicy::capacity`].
    fn len(&self) -> u64;

    /// True when nothing is cached.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Handles one block access: pushes every line that leaves the cache (and
    /// any line migrated in ahead of use) into `events` without clearing it.
    fn access(&mut self, a: Access, events: &mut Events) -> Outcome;

    /// A hint that block `key` will be accessed soon, so the policy can ask
    /// the CPU to fetch its metadata ahead (no effect on decisions). `depth`
    /// says how soon: 0 far ahead (fetch the index slot), 1 nearer (find the
    /// entry, fetch it), 2 next (fetch what an access will touch beside it).
    /// Callers that look ahead in their request stream call it at each depth.
    #[inline]
    fn prefetch(&self, key: Key, depth: u8) {
        let _ = (key, depth);
    }

    /// Whether the block `key` is cached (no side effects).
    fn contains(&self, key: Key) -> bool;

    /// Changes the capacity to `total_lines`, evicting into `events` at once
    /// if the cache shrinks.
    fn resize(&mut self, total_lines: u64, events: &mut Events) -> Result<(), CacheError>;

    /// Appends one entry per tenant known to the policy to `out`.
    fn occupancy(&self, out: &mut Vec<TenantOccupancy>);

    /// Zone sizes, for the two-zone policies.
    fn zones(&self) -> Option<Zones> {
        None
    }
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A policy name that is not one of [`PolicyKind::ALL`].
    #[error("unknown cache policy {name:?}, expected one of: {expected}")]
    UnknownPolicy {
        /// What was asked for.
        name: String,
        /// The valid names.
        expected: String,
    },
    /// A cache too small for the policy's unit of placement.
    #[error("cache size {bytes} bytes is too small for {policy}: it needs at least {min_bytes} bytes ({why})")]
    TooSmall {
        /// The policy.
        policy: PolicyKind,
        /// The size asked for.
        bytes: u64,
        /// The smallest size that works.
        min_bytes: u64,
        /// Which unit sets the minimum.
        why: &'static str,
    },
    /// A value that does not fit a [`Key`].
    #[error("{what} {value} is out of range (at most {max})")]
    KeyRange {
        /// Which part of the key.
        what: &'static str,
        /// The value.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// An invalid configuration value.
    #[error("invalid cache configuration: {0}")]
    Config(String),
    /// A trace could not be read.
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    /// A simulator input problem that is not a trace line.
    #[error("{0}")]
    Input(String),
}

/// What of a chosen bin the coarse policies (vFRM, isolation, GREM, D-GREM)
/// put in flash.
///
/// Why a choice: the GREM paper keeps popularity per 1 MiB bin and caches in
/// 128 KiB lines, but does not say whether a chosen bin brings all its lines.
/// On scattered data (a few hot blocks per bin) whole bins fill the flash
/// with lines nobody asked for; the accessed lines take an eighth of that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BinFill {
    /// Every line of the bin: a bin takes `bin_bytes` of flash.
    #[default]
    WholeBin,
    /// The lines of the bin accessed since it was first seen; lines first
    /// accessed while the bin is placed are added at the next epoch end.
    AccessedLines,
    /// Per tenant, whichever of the two its accesses show pays
    /// (see `Bins::adapt_fill`).
    Adaptive,
}

impl fmt::Display for BinFill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BinFill::WholeBin => "whole-bin",
            BinFill::AccessedLines => "accessed-lines",
            BinFill::Adaptive => "adaptive",
        })
    }
}

impl FromStr for BinFill {
    type Err = CacheError;
    fn from_str(s: &str) -> Result<Self, CacheError> {
        match s {
            "whole-bin" => Ok(BinFill::WholeBin),
            "accessed-lines" => Ok(BinFill::AccessedLines),
            "adaptive" => Ok(BinFill::Adaptive),
            other => Err(CacheError::Config(format!(
                "bin fill {other:?}: expected whole-bin, accessed-lines or adaptive"
            ))),
        }
    }
}

/// Parameters of the policies. Defaults are the paper's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Line size of the conventional policies (GLRU, ARC, CAR), bytes; 4 KiB.
    pub fine_line_bytes: u64,
    /// Line size of the coarse policies (vFRM, GREM, D-GREM), bytes; 128 KiB.
    pub coarse_line_bytes: u64,
    /// Bin size of the coarse policies (unit of popularity and placement), bytes; 1 MiB.
    pub bin_bytes: u64,
    /// What of a bin the coarse policies put in flash when they choose it:
    /// every line, or the lines accessed (see [`BinFill`]).
    pub bin_fill: BinFill,
    /// Coarse policies: a read miss copies its 128 KiB line into flash at
    /// once while flash is free (ours; the paper changes content only at
    /// epoch ends), reading the line with the request's own HDD read.
    /// Nothing is evicted for it: eviction stays lazy, at epoch ends. Off by
    /// default.
    pub fill_free_flash: bool,
    /// Epoch length of the coarse policies, seconds; 300 (5 minutes).
    pub epoch_secs: f64,
    /// Weight of the old long-term popularity at each epoch end (GREM's aging
    /// function: `history = aging * history + last_epoch_count`). The paper
    /// gives no value; 0.5.
    pub aging: f64,
    /// D-GREM burst threshold β on the bursty degree; 0.6.
    pub beta: f64,
    /// D-GREM importance parameter α of the contribution ratio; 0.35.
    pub alpha: f64,
    /// D-GREM threshold multiplier γ; 1.2.
    pub gamma: f64,
    /// D-GREM sliding window, in epochs (the paper's example is 5 min, one
    /// epoch); 1.
    pub window_epochs: u32,
    /// D-GREM minimum size of each zone as a fraction of the cache (the paper
    /// says there is a minimum but not its value); 0.1.
    pub min_zone_fraction: f64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            fine_line_bytes: BLOCK_BYTES,
            coarse_line_bytes: 128 << 10,
            bin_bytes: 1 << 20,
            bin_fill: BinFill::default(),
            fill_free_flash: false,
            epoch_secs: 300.0,
            aging: 0.5,
            beta: 0.6,
            alpha: 0.35,
            gamma: 1.2,
            window_epochs: 1,
            min_zone_fraction: 0.1,
        }
    }
}

impl PolicyConfig {
    /// Checks every value; the error names the bad one.
    pub fn validate(&self) -> Result<(), CacheError> {
        let bad = |m: String| Err(CacheError::Config(m));
        for (name, v) in [
            ("fine_line_bytes", self.fine_line_bytes),
            ("coarse_line_bytes", self.coarse_line_bytes),
            ("bin_bytes", self.bin_bytes),
        ] {
            if v < BLOCK_BYTES || !v.is_power_of_two() {
                return bad(format!(
                    "{name} = {v}: must be a power of two of at least {BLOCK_BYTES}"
                ));
            }
        }
        if self.bin_bytes < self.coarse_line_bytes {
            return bad(format!(
                "bin_bytes = {} is smaller than coarse_line_bytes = {}",
                self.bin_bytes, self.coarse_line_bytes
            ));
        }
        if self.bin_bytes / self.coarse_line_bytes > 64 {
            return bad(format!(
                "bin_bytes = {} holds {} lines of coarse_line_bytes = {}: at most 64",
                self.bin_bytes,
                self.bin_bytes / self.coarse_line_bytes,
                self.coarse_line_bytes
            ));
        }
        if !(self.epoch_secs.is_finite() && self.epoch_secs > 0.0) {
            return bad(format!(
                "epoch_secs = {}: must be positive",
                self.epoch_secs
            ));
        }
        for (name, v) in [
            ("aging", self.aging),
            ("alpha", self.alpha),
            ("min_zone_fraction", self.min_zone_fraction),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("{name} = {v}: must be within [0, 1]"));
            }
        }
        if self.min_zone_fraction > 0.5 {
            return bad(format!(
                "min_zone_fraction = {}: two zones cannot each have more than half",
                self.min_zone_fraction
            ));
        }
        for (name, v) in [("beta", self.beta), ("gamma", self.gamma)] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(format!("{name} = {v}: must be a non-negative number"));
            }
        }
        if self.window_epochs == 0 {
            return bad("window_epochs = 0: must be at least 1".to_string());
        }
        Ok(())
    }

    /// Parses a TOML document with any of the fields; the rest keep their
    /// defaults. Unknown fields and bad values are errors naming them.
    pub fn from_toml(text: &str) -> Result<Self, CacheError> {
        let c: PolicyConfig =
            toml::from_str(text).map_err(|e| CacheError::Config(e.to_string()))?;
        c.validate()?;
        Ok(c)
    }

    /// Epoch length in nanoseconds.
    pub fn epoch_ns(&self) -> u64 {
        (self.epoch_secs * 1e9).round().max(1.0) as u64
    }
}

/// Implemented by code that wants a concrete policy type (so the simulator's
/// loop is compiled once per policy, with the policy's code inlined).
pub trait PolicyVisitor {
    /// What the visit returns.
    type Output;
    /// Called with the freshly built policy.
    fn visit<P: CachePolicy + 'static>(self, policy: P) -> Self::Output;
}

struct Boxer;

impl PolicyVisitor for Boxer {
    type Output = Box<dyn CachePolicy>;
    fn visit<P: CachePolicy + 'static>(self, policy: P) -> Box<dyn CachePolicy> {
        Box::new(policy)
    }
}

/// Declares the policies: one line each, naming the variant, its name on the
/// command line and its type. Everything else (parsing, printing, building)
/// is generated from this list.
macro_rules! policies {
    ($($(#[$doc:meta])* $variant:ident => $name:literal, $ty:ty;)*) => {
        /// The replacement policies, by name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "lowercase")]
        pub enum PolicyKind {
            $($(#[$doc])* $variant,)*
        }

        impl PolicyKind {
            /// Every policy, in table order.
            pub const ALL: &'static [PolicyKind] = &[$(PolicyKind::$variant),*];

            /// The name used on the command line and in results.
            pub fn name(self) -> &'static str {
                match self {
                    $(PolicyKind::$variant => $name,)*
                }
            }

            /// Builds the policy for a cache of `cache_bytes` and hands it to
            /// `visitor` as its concrete type.
            pub fn visit<V: PolicyVisitor>(
                self,
                cache_bytes: u64,
                cfg: &PolicyConfig,
                visitor: V,
            ) -> Result<V::Output, CacheError> {
                cfg.validate()?;
                Ok(match self {
                    $(PolicyKind::$variant => visitor.visit(<$ty>::new(cache_bytes, cfg)?),)*
                })
            }
        }
    };
}

policies! {
    /// Global LRU at 4 KiB lines.
    Glru => "glru", policy::glru::Glru;
    /// CAR at 4 KiB lines.
    Car => "car", policy::car::Car;
    /// ARC at 4 KiB lines.
    Arc => "arc", policy::arc::Arc;
    /// VMware vFRM: fair competition for one pool.
    Vfrm => "vfrm", policy::vfrm::Vfrm;
    /// Performance isolation: vFRM on equal per-tenant reservations.
    Isolation => "isolation", policy::isolation::Isolation;
    /// GREM with fixed half/half zones.
    Grem => "grem", policy::grem::Grem;
    /// D-GREM: GREM with dynamic zone sizes.
    Dgrem => "dgrem", policy::dgrem::Dgrem;
}

impl PolicyKind {
    /// Builds the policy as a trait object.
    pub fn build(
        self,
        cache_bytes: u64,
        cfg: &PolicyConfig,
    ) -> Result<Box<dyn CachePolicy>, CacheError> {
        self.visit(cache_bytes, cfg, Boxer)
    }

    /// Parses a comma-separated list of names (`glru,arc`), rejecting
    /// unknown and repeated names.
    pub fn parse_list(s: &str) -> Result<Vec<PolicyKind>, CacheError> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let k: PolicyKind = part.parse()?;
            if out.contains(&k) {
                return Err(CacheError::Config(format!("policy {k} named twice")));
            }
            out.push(k);
        }
        if out.is_empty() {
            return Err(CacheError::Config(format!("no policy in {s:?}")));
        }
        Ok(out)
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyKind {
    type Err = CacheError;
    fn from_str(s: &str) -> Result<Self, CacheError> {
        let norm: String = s
            .chars()
            .filter(|c| *c != '-' && *c != '_')
            .collect::<String>()
            .to_ascii_lowercase();
        let norm = if norm == "lru" {
            "glru".to_string()
        } else {
            norm
        };
        PolicyKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == norm)
            .ok_or_else(|| CacheError::UnknownPolicy {
                name: s.to_string(),
                expected: PolicyKind::ALL
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// Lines of `line_bytes` in a cache of `cache_bytes`, or an error if there
/// is not even one.
pub(crate) fn lines_for(
    policy: PolicyKind,
    cache_bytes: u64,
    line_bytes: u64,
    why: &'static str,
) -> Result<u64, CacheError> {
    let lines = cache_bytes / line_bytes;
    if lines == 0 {
        return Err(CacheError::TooSmall {
            policy,
            bytes: cache_bytes,
            min_bytes: line_bytes,
            why,
        });
    }
    Ok(lines)
}

/// Adds `n` to `v[i]`, growing `v` with zeros as needed.
#[inline]
pub(crate) fn bump(v: &mut Vec<u64>, i: u32, n: u64) {
    let i = i as usize;
    if i >= v.len() {
        v.resize(i + 1, 0);
    }
    v[i] += n;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_packs_and_rejects_out_of_range() {
        let k = Key::new(7, 123_456).unwrap();
        assert_eq!((k.space(), k.line()), (7, 123_456));
        assert_eq!(k.coarsen(8).line(), 123_456 >> 8);
        assert_eq!(k.coarsen(8).space(), 7);
        assert_eq!(Key::from_raw(k.raw()), k);
        assert!(Key::new(MAX_SPACE, MAX_LINE).is_ok());
        let e = Key::new(MAX_SPACE + 1, 0).unwrap_err().to_string();
        assert!(e.contains("address space id"), "{e}");
        let e = Key::new(0, MAX_LINE + 1).unwrap_err().to_string();
        assert!(e.contains("block number"), "{e}");
    }

    #[test]
    fn policy_names_round_trip_and_unknown_names_are_rejected() {
        for &k in PolicyKind::ALL {
            assert_eq!(k.name().parse::<PolicyKind>().unwrap(), k);
            assert_eq!(k.to_string(), k.name());
        }
        assert_eq!("D-GREM".parse::<PolicyKind>().unwrap(), PolicyKind::Dgrem);
        assert_eq!("lru".parse::<PolicyKind>().unwrap(), PolicyKind::Glru);
        let e = "lfu".parse::<PolicyKind>().unwrap_err().to_string();
        assert!(e.contains("\"lfu\"") && e.contains("glru, car, arc"), "{e}");
        assert_eq!(
            PolicyKind::parse_list("glru, grem").unwrap(),
            vec![PolicyKind::Glru, PolicyKind::Grem]
        );
        assert!(PolicyKind::parse_list("arc,arc").is_err());
        assert!(PolicyKind::parse_list("").is_err());
    }

    #[test]
    fn zero_and_tiny_caches_are_rejected_with_the_reason() {
        let cfg = PolicyConfig::default();
        for &k in PolicyKind::ALL {
            let e = k.build(0, &cfg).err().expect("zero size accepted");
            assert!(e.to_string().contains("too small"), "{k}: {e}");
        }
        let e = PolicyKind::Grem.build(512 << 10, &cfg).err().unwrap();
        assert!(e.to_string().contains("1048576"), "{e}");
        assert!(PolicyKind::Glru.build(4096, &cfg).is_ok());
    }

    #[test]
    fn config_validation_names_the_bad_field() {
        let ok = PolicyConfig::default();
        ok.validate().unwrap();
        let cases: Vec<(PolicyConfig, &str)> = vec![
            (
                PolicyConfig {
                    bin_bytes: 3000,
                    ..ok.clone()
                },
                "bin_bytes",
            ),
            (
                PolicyConfig {
                    epoch_secs: 0.0,
                    ..ok.clone()
                },
                "epoch_secs",
            ),
            (
                PolicyConfig {
                    alpha: 1.5,
                    ..ok.clone()
                },
                "alpha",
            ),
            (
                PolicyConfig {
                    min_zone_fraction: 0.7,
                    ..ok.clone()
                },
                "min_zone_fraction",
            ),
            (
                PolicyConfig {
                    window_epochs: 0,
                    ..ok.clone()
                },
                "window_epochs",
            ),
            (
                PolicyConfig {
                    coarse_line_bytes: 4 << 20,
                    ..ok.clone()
                },
                "bin_bytes",
            ),
            (
                PolicyConfig {
                    coarse_line_bytes: 4096,
                    ..ok.clone()
                },
                "at most 64",
            ),
        ];
        for (cfg, field) in cases {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
            let e = PolicyKind::Glru
                .build(1 << 20, &cfg)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
    }

    #[test]
    fn config_rejects_unknown_fields() {
        let e = toml::from_str::<PolicyConfig>("alpha = 0.3\nbogus = 1\n").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let c: PolicyConfig = toml::from_str("alpha = 0.3").unwrap();
        assert_eq!(c.alpha, 0.3);
        assert_eq!(c.beta, 0.6);
        assert_eq!(c.bin_fill, BinFill::WholeBin);
        let c = PolicyConfig::from_toml("bin_fill = \"adaptive\"").unwrap();
        assert_eq!(c.bin_fill, BinFill::Adaptive);
        let e = PolicyConfig::from_toml("bin_fill = \"half\"").unwrap_err();
        assert!(e.to_string().contains("bin_fill"), "{e}");
        for f in [BinFill::WholeBin, BinFill::AccessedLines, BinFill::Adaptive] {
            assert_eq!(f.to_string().parse::<BinFill>().unwrap(), f);
        }
        let e = "half".parse::<BinFill>().unwrap_err().to_string();
        assert!(e.contains("whole-bin, accessed-lines or adaptive"), "{e}");
    }
}
