//! One way to make an NBD export, and one registry of them.
//!
//! Every export — a regular vSSD, a harvest volume over gSSDs, a cache-tier
//! volume — is a block device wrapped the same way: a statistics layer (with the
//! modelled latency in emulation mode), the reply pacing of the mode, and an
//! optional admission gate. [`Exports::wrap`] does that wrapping and
//! [`Exports::add`] publishes the result under a name and an [`ExportKind`].
//!
//! The registry is its own small map behind its own lock, which guards nothing
//! but map updates: an NBD handshake (`lookup`, `list`) never waits on a vSSD
//! being created, a harvester tick, an erase or a predictor's training. Hidden
//! devices (a gSSD's vSSD, a tier's cache vSSD) are simply never added, so no
//! caller filters them out by hand.

use std::collections::BTreeMap;
use std::sync::Arc;

use blockdev::{BlockDev, Gate, IoStats, Layered, StatsLayer};
use clock::Clock;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::Mode;

/// What an export serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExportKind {
    /// A regular or harvest tenant's vSSD.
    Vssd,
    /// A volume of a cache tier.
    TierVolume,
    /// A harvest volume over gSSDs.
    HarvestVolume,
}

/// A device wrapped for export: what NBD clients talk to, and its counters.
#[derive(Clone)]
pub struct Wrapped {
    /// The device behind its statistics layer.
    pub export: Arc<dyn BlockDev>,
    /// Requests as the clients issued them.
    pub io: Arc<IoStats>,
}

/// What is published under an export name.
#[derive(Clone)]
pub struct Publish {
    /// vSSD, tier volume or harvest volume.
    pub kind: ExportKind,
    /// Order among the vSSDs for the default export (`""`): lowest first.
    pub order: u64,
    /// Sent in `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION`.
    pub description: String,
    /// The device, already [`wrapped`](Exports::wrap).
    pub dev: Arc<dyn BlockDev>,
    /// Admission control, if any.
    pub gate: Option<Arc<dyn Gate>>,
    /// The tenant that owns it; with NBD TLS only that tenant lists and opens
    /// it (`nbd::tls::may_open`). `None`: shared.
    pub owner: Option<String>,
}

type Entry = Publish;

/// The host's exports, by name.
pub struct Exports {
    mode: Mode,
    clock: Arc<dyn Clock>,
    map: RwLock<BTreeMap<String, Entry>>,
}

impl std::fmt::Debug for Exports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exports")
            .field("mode", &self.mode)
            .field(
                "names",
                &self.map.read().keys().cloned().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Exports {
    /// An empty registry for exports replying in `mode` on `clock`.
    pub fn new(mode: Mode, clock: Arc<dyn Clock>) -> Self {
        Self {
            mode,
            clock,
            map: RwLock::new(BTreeMap::new()),
        }
    }

    /// Wraps `dev` for export: a statistics layer, timed by the clock in
    /// emulation mode (only there do device timelines follow the clock, so only
    /// there is the modelled latency meaningful).
    pub fn wrap(&self, dev: Arc<dyn BlockDev>) -> Wrapped {
        let io = Arc::new(IoStats::default());
        let mut layer = StatsLayer::new(dev, io.clone());
        if self.mode == Mode::Emulation {
            layer = layer.timed(self.clock.clone());
        }
        Wrapped {
            export: Arc::new(Layered(layer)),
            io,
        }
    }

    /// Publishes an export as `name`; replaces an export of that name.
    pub fn add(&self, name: &str, export: Publish) {
        self.map.write().insert(name.to_string(), export);
    }

    /// Withdraws `name`: new handshakes no longer find it (open connections keep
    /// their device until they close, and fail once it is gone).
    pub fn remove(&self, name: &str) {
        self.map.write().remove(name);
    }

    /// Replaces the admission gate of `name`, if it is exported.
    pub fn set_gate(&self, name: &str, gate: Option<Arc<dyn Gate>>) {
        if let Some(e) = self.map.write().get_mut(name) {
            e.gate = gate;
        }
    }

    /// The kind of the export `name`, if there is one.
    pub fn kind(&self, name: &str) -> Option<ExportKind> {
        self.map.read().get(name).map(|e| e.kind)
    }

    /// Names of the exports of one kind, sorted.
    pub fn names(&self, kind: ExportKind) -> Vec<String> {
        self.map
            .read()
            .iter()
            .filter(|(_, e)| e.kind == kind)
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn export(&self, name: &str, e: &Entry) -> nbd::Export {
        nbd::Export {
            name: name.to_string(),
            description: e.description.clone(),
            dev: e.dev.clone(),
            pace: match self.mode {
                Mode::Fast => None,
                Mode::Emulation => Some(self.clock.clone()),
            },
            gate: e.gate.clone(),
            owner: e.owner.clone(),
        }
    }
}

impl nbd::ExportRegistry for Exports {
    /// The export of that name; `""` is the vSSD named `default`, or else the
    /// oldest vSSD.
    fn lookup(&self, name: &str) -> Option<nbd::Export> {
        let map = self.map.read();
        if name.is_empty() {
            let (n, e) = map
                .get_key_value("default")
                .filter(|(_, e)| e.kind == ExportKind::Vssd)
                .or_else(|| {
                    map.iter()
                        .filter(|(_, e)| e.kind == ExportKind::Vssd)
                        .min_by_key(|(_, e)| e.order)
                })?;
            return Some(self.export(n, e));
        }
        map.get(name).map(|e| self.export(name, e))
    }

    /// Every export: vSSDs, then tier volumes, then harvest volumes, each by
    /// name.
    fn list(&self) -> Vec<nbd::Listing> {
        let map = self.map.read();
        let mut out: Vec<(ExportKind, &String, &Entry)> =
            map.iter().map(|(n, e)| (e.kind, n, e)).collect();
        out.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        out.into_iter()
            .map(|(_, n, e)| nbd::Listing {
                name: n.clone(),
                description: e.description.clone(),
                owner: e.owner.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::MemDev;
    use nbd::ExportRegistry;

    fn dev() -> Arc<dyn BlockDev> {
        Arc::new(MemDev::new(1 << 20))
    }

    #[test]
    fn default_is_named_default_else_the_oldest_vssd_and_lists_go_by_kind() {
        let clock: Arc<dyn Clock> = Arc::new(clock::VirtualClock::new(0));
        let ex = Exports::new(Mode::Fast, clock);
        assert!(ex.lookup("").is_none(), "nothing exported yet");
        let w = ex.wrap(dev());
        ex.add(
            "zz",
            Publish {
                kind: ExportKind::HarvestVolume,
                order: 0,
                description: "h".into(),
                dev: w.export,
                gate: None,
                owner: None,
            },
        );
        ex.add(
            "b",
            Publish {
                kind: ExportKind::Vssd,
                order: 7,
                description: "b".into(),
                dev: ex.wrap(dev()).export,
                gate: None,
                owner: None,
            },
        );
        ex.add(
            "a",
            Publish {
                kind: ExportKind::Vssd,
                order: 9,
                description: "a".into(),
                dev: ex.wrap(dev()).export,
                gate: None,
                owner: None,
            },
        );
        ex.add(
            "t",
            Publish {
                kind: ExportKind::TierVolume,
                order: 0,
                description: "t".into(),
                dev: ex.wrap(dev()).export,
                gate: None,
                owner: None,
            },
        );
        assert_eq!(ex.lookup("").unwrap().name, "b", "lowest order among vSSDs");
        ex.add(
            "default",
            Publish {
                kind: ExportKind::Vssd,
                order: 99,
                description: "d".into(),
                dev: ex.wrap(dev()).export,
                gate: None,
                owner: None,
            },
        );
        assert_eq!(ex.lookup("").unwrap().name, "default");
        let names: Vec<String> = ex.list().into_iter().map(|l| l.name).collect();
        assert_eq!(names, ["a", "b", "default", "t", "zz"]);
        assert_eq!(ex.names(ExportKind::HarvestVolume), ["zz"]);
        ex.remove("zz");
        assert!(ex.lookup("zz").is_none());
        assert_eq!(ex.kind("t"), Some(ExportKind::TierVolume));
    }
}
