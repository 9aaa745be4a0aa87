//! The cache tier: tenant volumes over one backing store, cached in 4 KiB
//! slots of a flash device under one replacement policy.
//!
//! What lives where:
//! * the **policy** (a [`cache::CachePolicy`]) knows which lines are cached,
//!   in its own line size (4 KiB for GLRU, ARC, CAR; 128 KiB for vFRM, GREM,
//!   D-GREM), and reports evictions and epoch migrations as [`Events`];
//! * the **slot map** says where each cached 4 KiB block sits in the cache
//!   device. It is the ground truth of the data path: a block is served from
//!   flash exactly when it is in the map, and every block in the map holds the
//!   same bytes as the backing store.
//!
//! When a line enters the cache (admitted on a miss, migrated in at an epoch
//! end, or put into free flash by a read that missed it, from that read's own
//! backing read, widened to the line) all of its blocks inside the volume are
//! filled at once, from the
//! data of the request when it covers the line, else with one read of the line
//! from the backing store. When it leaves, its slots go back to the free list.
//! A policy of capacity `C` lines of `L` blocks never holds more than `C * L`
//! blocks, and the tier never sets `C * L` above the device's slot count, so a
//! free slot is always there.
//!
//! Writes follow the tier's [`WritePolicy`]:
//! * **write-through** (the default): every write goes to the backing store
//!   first, then to the cached copies of its blocks; the cache never holds the
//!   only copy of anything;
//! * **write-back**: a write that hits, or whose line is admitted, goes to the
//!   cache only and leaves its line dirty; the rest of the request goes to the
//!   backing store in one write spanning it. A dirty line that leaves the
//!   cache is copied out of its slots at once, and when the request that
//!   evicted it is done, the dirty lines it evicted are written back in runs
//!   of lines contiguous on disk, one backing write per run. Until then a
//!   read of those blocks from the backing store is patched with them. A
//!   flush, a FUA write, a policy change and dropping the tier write every
//!   dirty line back first: the tier's map lives in memory and the cache
//!   starts cold at every start, so the backing store must hold everything
//!   acknowledged as durable.
//!
//! Every request and content move is also charged to its volume through a
//! [`cache::Ledger`], the same bookkeeping the simulator uses, so the tier's
//! [`VolumeStats::ops`] are the IO cost of the paper's model
//! ([`cache::cost`]) for what the tier did, and a replay of a trace through
//! the tier and through the simulator gives the same hits and the same cost.

use std::collections::BTreeMap;
use std::sync::Arc;

use blockdev::{check_range, BlockDev, BlockSizes, IoResult, MapExtent};
use cache::cost::{self, LineEvent, Move, OpCounts, RequestTally, Run};
use cache::{
    Access, CachePolicy, Events, Key, Ledger, Outcome, PolicyConfig, PolicyKind, TenantOccupancy,
    WritePolicy,
};
use clock::{Clock, Nanos};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::TierError;

/// Bytes per block and per cache slot.
const B: u64 = cache::BLOCK_BYTES;

/// One tenant volume of a tier: a name and a size (a multiple of 4 KiB).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeSpec {
    /// Volume name (the daemon exports it over NBD under this name).
    pub name: String,
    /// Size in bytes; a multiple of 4096.
    pub size: u64,
}

/// How to build a [`CacheTier`].
#[derive(Debug, Clone, PartialEq)]
pub struct TierSetup {
    /// Tier name, for messages and statistics.
    pub name: String,
    /// The replacement policy to start with.
    pub policy: PolicyKind,
    /// The policies' parameters (line and bin sizes, epoch length, ...).
    pub policy_config: PolicyConfig,
    /// Cache size to start with, bytes; at most the cache device's size
    /// rounded down to 4 KiB.
    pub cache_bytes: u64,
    /// The tenant volumes, laid out one after the other from the start of
    /// the backing store; each is a tenant of the policy (its index).
    pub volumes: Vec<VolumeSpec>,
    /// How writes reach the backing store (see the module docs).
    pub write_policy: WritePolicy,
}

/// Counters and gauges of one tenant volume. Hits and misses count 4 KiB
/// blocks (a request touching part of a block counts that block); a hit is a
/// block served from (read) or updated in (write) flash.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct VolumeStats {
    /// Volume name.
    pub name: String,
    /// Its tenant number in the policy.
    pub tenant: u32,
    /// Where it starts in the backing store, bytes.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Blocks read from flash.
    pub read_hits: u64,
    /// Blocks read from the backing store.
    pub read_misses: u64,
    /// Blocks written whose cached copy was updated.
    pub write_hits: u64,
    /// Blocks written that were not cached.
    pub write_misses: u64,
    /// Bytes read by clients.
    pub read_bytes: u64,
    /// Bytes written by clients.
    pub write_bytes: u64,
    /// Bytes of this tenant the policy holds in the cache.
    pub resident_bytes: u64,
    /// Bytes reserved for this tenant (vFRM share, GREM long-term zone); `None`
    /// for policies without reservations.
    pub reserved_bytes: Option<u64>,
    /// Device operations charged to this volume by the IO cost model
    /// ([`cache::cost`]): its requests and the content moves of its lines.
    pub ops: OpCounts,
    /// Device operations its requests would have cost with no cache.
    pub baseline_ops: OpCounts,
    /// Dirty lines of this volume written back (write-back only).
    pub written_back_lines: u64,
}

impl VolumeStats {
    /// Read hits over read accesses (0 when there were none).
    pub fn read_hit_ratio(&self) -> f64 {
        ratio(self.read_hits, self.read_misses)
    }

    /// Write hits over write accesses (0 when there were none).
    pub fn write_hit_ratio(&self) -> f64 {
        ratio(self.write_hits, self.write_misses)
    }

    /// All hits over all accesses (0 when there were none).
    pub fn hit_ratio(&self) -> f64 {
        ratio(
            self.read_hits + self.write_hits,
            self.read_misses + self.write_misses,
        )
    }
}

fn ratio(hits: u64, misses: u64) -> f64 {
    if hits + misses == 0 {
        0.0
    } else {
        hits as f64 / (hits + misses) as f64
    }
}

/// What a tier reports: its policy, sizes, zones, movement counters and the
/// counters of each volume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierStats {
    /// Tier name.
    pub name: String,
    /// The policy now.
    pub policy: PolicyKind,
    /// How writes reach the backing store.
    pub write_policy: WritePolicy,
    /// The policy's line size, bytes.
    pub line_bytes: u64,
    /// Cache size now, bytes.
    pub cache_bytes: u64,
    /// Largest cache size: the cache device's 4 KiB slots.
    pub max_cache_bytes: u64,
    /// Bytes of data in the cache now (slots in use).
    pub cached_bytes: u64,
    /// Capacity of the long-term zone `Z_L`, bytes (GREM, D-GREM).
    pub long_term_zone_bytes: Option<u64>,
    /// Capacity of the short-term zone `Z_S`, bytes (GREM, D-GREM).
    pub short_term_zone_bytes: Option<u64>,
    /// Lines filled into the cache (admitted or migrated in).
    pub lines_filled: u64,
    /// Lines that left the cache (evicted, or dropped by a policy change).
    pub lines_evicted: u64,
    /// Policy changes since the tier started.
    pub policy_changes: u64,
    /// Per volume, in tenant order.
    pub volumes: Vec<VolumeStats>,
}

#[derive(Debug)]
struct VolMeta {
    name: String,
    base: u64,
    size: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    read_hits: u64,
    read_misses: u64,
    write_hits: u64,
    write_misses: u64,
    read_bytes: u64,
    write_bytes: u64,
    ops: OpCounts,
    baseline_ops: OpCounts,
    written_back_lines: u64,
}

/// Everything behind the tier's lock.
struct State {
    policy: Box<dyn CachePolicy>,
    /// Blocks per policy line.
    line_blocks: u64,
    cache_bytes: u64,
    /// Cached block → its slot in the cache device.
    map: BTreeMap<Key, u32>,
    free: Vec<u32>,
    events: Events,
    /// Policy time: the clock, never going back.
    last_ns: Nanos,
    counts: Vec<Counts>,
    lines_filled: u64,
    lines_evicted: u64,
    policy_changes: u64,
    /// Line-sized buffer for fills from the backing store.
    scratch: Vec<u8>,
    /// Dirty lines, content moves to charge, the write policy.
    ledger: Ledger,
    /// Blocks of dirty lines that left the cache during the request being
    /// served, waiting to be written back when it is done.
    pending: BTreeMap<Key, Vec<u8>>,
}

struct Shared {
    name: String,
    backing: Arc<dyn BlockDev>,
    cache: Arc<dyn BlockDev>,
    clock: Arc<dyn Clock>,
    policy_config: PolicyConfig,
    slots: u64,
    vols: Vec<VolMeta>,
    state: Mutex<State>,
}

/// A shared cache over one backing store, for several tenant volumes. See
/// the [crate docs](crate) for the design.
pub struct CacheTier {
    shared: Arc<Shared>,
    volumes: Vec<Arc<TierVolume>>,
}

impl std::fmt::Debug for CacheTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheTier")
            .field("name", &self.shared.name)
            .field("slots", &self.shared.slots)
            .field(
                "volumes",
                &self.shared.vols.iter().map(|v| &v.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// One tenant's volume of a [`CacheTier`]: a block device whose bytes live in
/// its region of the backing store, cached by the tier.
pub struct TierVolume {
    shared: Arc<Shared>,
    index: u32,
}

impl std::fmt::Debug for TierVolume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = &self.shared.vols[self.index as usize];
        f.debug_struct("TierVolume")
            .field("tier", &self.shared.name)
            .field("name", &m.name)
            .field("size", &m.size)
            .finish()
    }
}

fn key(space: u32, block: u64) -> Key {
    Key::new(space, block).expect("volume sizes are checked against the key range at setup")
}

impl CacheTier {
    /// Builds a tier over `backing` with `cache` as its flash, which it
    /// empties (trims) first. Volumes are laid out from offset 0 of the
    /// backing store in the order given.
    pub fn new(
        setup: TierSetup,
        backing: Arc<dyn BlockDev>,
        cache: Arc<dyn BlockDev>,
        clock: Arc<dyn Clock>,
    ) -> Result<CacheTier, TierError> {
        let name = setup.name;
        let bad = |m: String| Err(TierError::Invalid(format!("tier {name:?}: {m}")));
        if setup.volumes.is_empty() {
            return bad("it has no volumes".into());
        }
        if setup.volumes.len() as u64 > u64::from(cache::MAX_SPACE) + 1 {
            return bad(format!(
                "{} volumes is more than the {} a policy can tell apart",
                setup.volumes.len(),
                u64::from(cache::MAX_SPACE) + 1
            ));
        }
        let mut vols: Vec<VolMeta> = Vec::with_capacity(setup.volumes.len());
        let mut base = 0u64;
        for v in &setup.volumes {
            if v.name.is_empty() {
                return bad("a volume has an empty name".into());
            }
            if vols.iter().any(|o| o.name == v.name) {
                return bad(format!("volume {:?} is listed twice", v.name));
            }
            if v.size == 0 || !v.size.is_multiple_of(B) {
                return bad(format!(
                    "volume {:?}: size {} is not a positive multiple of {B} bytes",
                    v.name, v.size
                ));
            }
            if v.size / B > cache::MAX_LINE {
                return bad(format!("volume {:?}: size {} is too large", v.name, v.size));
            }
            vols.push(VolMeta {
                name: v.name.clone(),
                base,
                size: v.size,
            });
            base = base.checked_add(v.size).ok_or_else(|| {
                TierError::Invalid(format!("tier {name:?}: volume sizes overflow"))
            })?;
        }
        if base > backing.size() {
            return bad(format!(
                "its volumes need {base} bytes but the backing store holds {}",
                backing.size()
            ));
        }
        let slots = (cache.size() / B).min(u64::from(u32::MAX));
        if slots == 0 {
            return bad(format!(
                "the cache device of {} bytes holds no {B}-byte slot",
                cache.size()
            ));
        }
        check_size(&name, setup.cache_bytes, slots)?;
        let policy = setup
            .policy
            .build(setup.cache_bytes, &setup.policy_config)?;
        cache
            .trim(0, cache.size())
            .map_err(|source| TierError::Device {
                what: format!("tier {name:?}: emptying the cache device"),
                source,
            })?;
        let state = State {
            line_blocks: policy.line_blocks(),
            cache_bytes: setup.cache_bytes,
            map: BTreeMap::new(),
            free: (0..slots as u32).rev().collect(),
            events: Events::new(),
            last_ns: 0,
            counts: vec![Counts::default(); vols.len()],
            lines_filled: 0,
            lines_evicted: 0,
            policy_changes: 0,
            scratch: Vec::new(),
            ledger: Ledger::new(setup.write_policy, policy.line_blocks()),
            pending: BTreeMap::new(),
            policy,
        };
        let shared = Arc::new(Shared {
            name,
            backing,
            cache,
            clock,
            policy_config: setup.policy_config,
            slots,
            vols,
            state: Mutex::new(state),
        });
        let volumes = (0..shared.vols.len() as u32)
            .map(|index| {
                Arc::new(TierVolume {
                    shared: shared.clone(),
                    index,
                })
            })
            .collect();
        Ok(CacheTier { shared, volumes })
    }

    /// Tier name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The volumes, in tenant order.
    pub fn volumes(&self) -> &[Arc<TierVolume>] {
        &self.volumes
    }

    /// The volume called `name`.
    pub fn volume(&self, name: &str) -> Option<&Arc<TierVolume>> {
        self.volumes.iter().find(|v| v.name() == name)
    }

    /// Largest cache size, bytes: every 4 KiB slot of the cache device.
    pub fn max_cache_bytes(&self) -> u64 {
        self.shared.slots * B
    }

    /// The policy's parameters.
    pub fn policy_config(&self) -> &PolicyConfig {
        &self.shared.policy_config
    }

    /// Switches to policy `kind`, live. The cache is emptied and the new
    /// policy starts cold (a policy cannot take over another's metadata);
    /// the counters carry on. On error (the cache is too small for the new
    /// policy) nothing changes.
    pub fn set_policy(&self, kind: PolicyKind) -> Result<(), TierError> {
        let sh = &self.shared;
        let mut st = sh.state.lock();
        let policy = kind
            .build(st.cache_bytes, &sh.policy_config)
            .map_err(|e| TierError::Invalid(format!("tier {:?}: {e}", sh.name)))?;
        // The old policy's dirty lines go to the backing store first.
        sh.write_back_all(&mut st)
            .map_err(|source| TierError::Device {
                what: format!("tier {:?}: writing back before the policy change", sh.name),
                source,
            })?;
        let resident = st.policy.len();
        st.policy = policy;
        st.line_blocks = st.policy.line_blocks();
        st.ledger = Ledger::new(st.ledger.write_policy(), st.line_blocks);
        st.lines_evicted += resident;
        st.policy_changes += 1;
        let slots: Vec<u32> = std::mem::take(&mut st.map).into_values().collect();
        st.free.extend(slots);
        // Let the flash forget the old contents (fewer pages for its GC to
        // move). The switch itself is done whatever happens here.
        sh.cache
            .trim(0, sh.cache.size())
            .map_err(|source| TierError::Device {
                what: format!(
                    "tier {:?}: now under {kind}, but trimming the cache device failed",
                    sh.name
                ),
                source,
            })?;
        Ok(())
    }

    /// Resizes the cache to `lines` 4 KiB lines, live. Shrinking evicts at
    /// once (each policy chooses what); growing gives the policy room to
    /// admit more. At most [`CacheTier::max_cache_bytes`] / 4096 lines, and
    /// at least one of the policy's lines (bins for the coarse policies).
    pub fn resize(&self, lines: u64) -> Result<(), TierError> {
        let sh = &self.shared;
        let bytes = lines
            .checked_mul(B)
            .ok_or_else(|| TierError::Invalid(format!("{lines} lines is too large")))?;
        check_size(&sh.name, bytes, sh.slots)?;
        let mut st = sh.state.lock();
        // Check the size with a throw-away policy, so the error is in bytes.
        st.policy
            .kind()
            .build(bytes, &sh.policy_config)
            .map_err(|e| TierError::Invalid(format!("tier {:?}: {e}", sh.name)))?;
        let line_lines = bytes / (st.line_blocks * B);
        let mut ev = std::mem::take(&mut st.events);
        let r = st.policy.resize(line_lines, &mut ev);
        st.events = ev;
        if let Err(e) = r {
            st.events.clear();
            return Err(TierError::Invalid(format!("tier {:?}: {e}", sh.name)));
        }
        st.cache_bytes = bytes;
        // Shrinking only evicts (and, under write-back, writes dirty lines
        // back): report a device failure if there is one.
        sh.settle(&mut st)
            .and_then(|_| sh.end_request(&mut st))
            .map_err(|source| TierError::Device {
                what: format!("tier {:?}: resizing", sh.name),
                source,
            })?;
        Ok(())
    }

    /// Counters and gauges now.
    pub fn stats(&self) -> TierStats {
        let sh = &self.shared;
        let st = sh.state.lock();
        let line_bytes = st.line_blocks * B;
        let mut occ: Vec<TenantOccupancy> = Vec::new();
        st.policy.occupancy(&mut occ);
        let zones = st.policy.zones();
        let volumes = sh
            .vols
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let c = st.counts[i];
                let o = occ.iter().find(|o| o.tenant == i as u32);
                VolumeStats {
                    name: m.name.clone(),
                    tenant: i as u32,
                    offset: m.base,
                    size: m.size,
                    read_hits: c.read_hits,
                    read_misses: c.read_misses,
                    write_hits: c.write_hits,
                    write_misses: c.write_misses,
                    read_bytes: c.read_bytes,
                    write_bytes: c.write_bytes,
                    resident_bytes: o.map_or(0, |o| o.resident_lines * line_bytes),
                    reserved_bytes: match o {
                        Some(o) => o.reserved_lines.map(|l| l * line_bytes),
                        // A tenant the policy has not seen has nothing reserved.
                        None => zones.map(|_| 0),
                    },
                    ops: c.ops,
                    baseline_ops: c.baseline_ops,
                    written_back_lines: c.written_back_lines,
                }
            })
            .collect();
        TierStats {
            name: sh.name.clone(),
            policy: st.policy.kind(),
            write_policy: st.ledger.write_policy(),
            line_bytes,
            cache_bytes: st.cache_bytes,
            max_cache_bytes: sh.slots * B,
            cached_bytes: st.map.len() as u64 * B,
            long_term_zone_bytes: zones.map(|z| z.long_term_lines * line_bytes),
            short_term_zone_bytes: zones.map(|z| z.short_term_lines * line_bytes),
            lines_filled: st.lines_filled,
            lines_evicted: st.lines_evicted,
            policy_changes: st.policy_changes,
            volumes,
        }
    }

    /// Checks the tier's internal invariants (tests): every slot is either
    /// free or holds exactly one block, and every cached block of a clean
    /// line holds the backing store's bytes.
    #[cfg(test)]
    fn check(&self) {
        self.check_with(true)
    }

    /// [`CacheTier::check`], comparing the cached bytes only if `data`.
    #[cfg(test)]
    fn check_with(&self, data: bool) {
        let sh = &self.shared;
        let st = sh.state.lock();
        let mut seen = vec![false; sh.slots as usize];
        for &s in st.map.values().chain(st.free.iter()) {
            assert!(!seen[s as usize], "slot {s} is used twice");
            seen[s as usize] = true;
        }
        assert!(seen.iter().all(|&x| x), "a slot is lost");
        assert!(st.pending.is_empty(), "write-backs left pending");
        assert!(
            st.map.len() as u64 * B <= st.cache_bytes,
            "{} blocks cached in a cache of {} bytes",
            st.map.len(),
            st.cache_bytes
        );
        let (mut a, mut b) = (vec![0u8; B as usize], vec![0u8; B as usize]);
        for (&k, &s) in &st.map {
            assert!(
                st.policy.contains(k),
                "block {k} is cached but not in the policy"
            );
            if !data
                || st
                    .ledger
                    .is_dirty(k.coarsen(st.line_blocks.trailing_zeros()))
            {
                continue;
            }
            let m = &sh.vols[k.space() as usize];
            sh.cache.read(u64::from(s) * B, &mut a).unwrap();
            sh.backing.read(m.base + k.line() * B, &mut b).unwrap();
            assert!(a == b, "block {k} in slot {s} is stale");
        }
    }
}

fn check_size(name: &str, bytes: u64, slots: u64) -> Result<(), TierError> {
    if bytes == 0 || !bytes.is_multiple_of(B) {
        return Err(TierError::Invalid(format!(
            "tier {name:?}: cache size {bytes} is not a positive multiple of {B} bytes"
        )));
    }
    if bytes > slots * B {
        return Err(TierError::Invalid(format!(
            "tier {name:?}: cache size {bytes} bytes is more than its cache device holds ({} bytes)",
            slots * B
        )));
    }
    Ok(())
}

impl Shared {
    fn vol(&self, v: u32) -> &VolMeta {
        &self.vols[v as usize]
    }

    /// The policy's time for a request issued now.
    fn tick(&self, st: &mut State) -> Nanos {
        st.last_ns = st.last_ns.max(self.clock.now());
        st.last_ns
    }

    /// Tells the policy about block `block` of volume `v`, then carries out
    /// what it decided (evictions, migrations). Returns the policy's outcome
    /// and the completion of the device operations that took.
    /// With `around`, a line the policy filled into free flash on this read
    /// miss is left to the caller, which reads it with the request's own
    /// backing read (see [`cache::RequestTally::read_around`]).
    fn access(
        &self,
        st: &mut State,
        v: u32,
        block: u64,
        write: bool,
        now: Nanos,
        around: bool,
    ) -> IoResult<(Outcome, Nanos)> {
        let a = Access {
            time_ns: now,
            tenant: v,
            key: key(v, block),
            write,
        };
        let mut ev = std::mem::take(&mut st.events);
        let o = st.policy.access(a, &mut ev);
        if around && o.filled {
            let line = key(v, block / st.line_blocks);
            if let Some(i) = ev.migrated_in.iter().rposition(|k| *k == line) {
                ev.migrated_in.swap_remove(i);
            }
        }
        st.events = ev;
        Ok((o, self.settle(st)?))
    }

    /// Applies the pending events: frees the slots of lines that left (and
    /// are still out: an event list does not say in which order things
    /// happened), copying out the blocks of dirty ones for write-back, and
    /// fills lines that came in (and are still in), contiguous lines with
    /// one backing read. The ledger queues the moves for charging.
    fn settle(&self, st: &mut State) -> IoResult {
        let mut done = 0;
        if st.events.is_empty() {
            return Ok(done);
        }
        let ev = std::mem::take(&mut st.events);
        let lb = st.line_blocks;
        let mut left: Vec<(Key, bool)> = Vec::new();
        let mut came: Vec<Key> = Vec::new();
        {
            let State { policy, ledger, .. } = &mut *st;
            ledger.events(
                &ev,
                |k| policy.contains(key(k.space(), k.line() * lb)),
                |k, e| match e {
                    LineEvent::Evicted => left.push((k, false)),
                    LineEvent::EvictedDirty => left.push((k, true)),
                    LineEvent::Migrated => came.push(k),
                },
            );
        }
        let mut result = Ok(());
        for (line, dirty) in left {
            let first = line.line() * lb;
            st.lines_evicted += 1;
            if dirty {
                if let Err(e) = self.stash(st, line.space(), first) {
                    result = Err(e);
                }
            }
            self.drop_blocks(st, line.space(), first, first + lb);
        }
        if result.is_ok() && !came.is_empty() {
            let mut runs = Vec::new();
            cost::runs(&mut came, &mut runs);
            for r in runs {
                match self.fill_run(st, r) {
                    Ok(t) => done = done.max(t),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        let mut ev = ev;
        ev.clear();
        st.events = ev;
        result.map(|()| done)
    }

    /// Copies the cached blocks of the dirty line starting at block `first`
    /// of volume `v` out of the cache into the pending write-backs.
    fn stash(&self, st: &mut State, v: u32, first: u64) -> IoResult<()> {
        let end = self.line_end(st, v, first);
        if first >= end {
            return Ok(());
        }
        let cached: Vec<(Key, u32)> = st
            .map
            .range(key(v, first)..key(v, end))
            .map(|(&k, &s)| (k, s))
            .collect();
        for (k, slot) in cached {
            let mut buf = vec![0u8; B as usize];
            self.cache.read(u64::from(slot) * B, &mut buf)?;
            st.pending.insert(k, buf);
        }
        Ok(())
    }

    /// Ends a request: charges the content moves it caused to their volumes
    /// and writes the dirty lines it evicted back to the backing store, one
    /// write per run of blocks contiguous on disk.
    fn end_request(&self, st: &mut State) -> IoResult {
        let mut wb: Vec<Run> = Vec::new();
        {
            let State { ledger, counts, .. } = &mut *st;
            ledger.drain_moves(|m, run, bytes| {
                let c = &mut counts[run.space as usize];
                m.charge(bytes, &mut c.ops);
                if m == Move::WriteBack {
                    c.written_back_lines += run.lines;
                    wb.push(run);
                }
            });
        }
        let mut done = 0;
        let lb = st.line_blocks;
        for r in wb {
            let (first, end) = (r.first * lb, (r.first + r.lines) * lb);
            let v = r.space;
            let blocks: Vec<(Key, Vec<u8>)> = {
                let keys: Vec<Key> = st
                    .pending
                    .range(key(v, first)..key(v, end.min(cache::MAX_LINE)))
                    .map(|(&k, _)| k)
                    .collect();
                keys.into_iter()
                    .map(|k| (k, st.pending.remove(&k).expect("pending block")))
                    .collect()
            };
            // Contiguous pieces (a trimmed block leaves a gap).
            let mut i = 0;
            while i < blocks.len() {
                let mut j = i + 1;
                while j < blocks.len() && blocks[j].0.line() == blocks[j - 1].0.line() + 1 {
                    j += 1;
                }
                let data: Vec<u8> = blocks[i..j]
                    .iter()
                    .flat_map(|(_, d)| d.iter().copied())
                    .collect();
                let at = self.vol(v).base + blocks[i].0.line() * B;
                done = done.max(self.backing.write(at, &data, false)?);
                i = j;
            }
        }
        debug_assert!(
            st.pending.is_empty(),
            "pending blocks outside any write-back run"
        );
        st.pending.clear();
        Ok(done)
    }

    /// Writes every dirty line back (flush, policy change, drop): they stay
    /// cached, clean.
    fn write_back_all(&self, st: &mut State) -> IoResult {
        if st.ledger.dirty_lines() == 0 {
            return Ok(0);
        }
        let lb = st.line_blocks;
        for line in st.ledger.clean_all() {
            self.stash(st, line.space(), line.line() * lb)?;
        }
        self.end_request(st)
    }

    /// Forgets the cached blocks `first..end` of volume `v`.
    fn drop_blocks(&self, st: &mut State, v: u32, first: u64, end: u64) {
        let end = end.min(self.vol(v).size / B);
        if first >= end {
            return;
        }
        let gone: Vec<Key> = st
            .map
            .range(key(v, first)..=key(v, end - 1))
            .map(|(&k, _)| k)
            .collect();
        for k in gone {
            if let Some(s) = st.map.remove(&k) {
                st.free.push(s);
            }
        }
    }

    /// Blocks of the policy line starting at block `first` that lie inside
    /// volume `v`: `first..end`.
    fn line_end(&self, st: &State, v: u32, first: u64) -> u64 {
        (first + st.line_blocks).min(self.vol(v).size / B)
    }

    /// Whether every block of the line starting at `first` is cached already.
    fn line_cached(&self, st: &State, v: u32, first: u64) -> bool {
        let end = self.line_end(st, v, first);
        st.map.range(key(v, first)..key(v, end.max(first))).count() as u64 == end - first
    }

    /// Reads whole blocks from block `first` of volume `v` into `buf` from the
    /// backing store, patched with the pending write-backs (the newer bytes).
    fn read_backing(&self, st: &State, v: u32, first: u64, buf: &mut [u8]) -> IoResult {
        let t = self.backing.read(self.vol(v).base + first * B, buf)?;
        let n = buf.len() as u64 / B;
        if n > 0 && !st.pending.is_empty() {
            for (k, d) in st.pending.range(key(v, first)..=key(v, first + n - 1)) {
                let at = ((k.line() - first) * B) as usize;
                buf[at..at + B as usize].copy_from_slice(d);
            }
        }
        Ok(t)
    }

    /// Reads the line starting at block `first` of volume `v` (its part inside
    /// the volume) from the backing store into `st.scratch`, unless it is all
    /// cached. Returns the blocks read and the completion.
    fn load_line(&self, st: &mut State, v: u32, first: u64) -> IoResult<(u64, Nanos)> {
        let end = self.line_end(st, v, first);
        if first >= end || self.line_cached(st, v, first) {
            return Ok((0, 0));
        }
        let n = end - first;
        let mut data = std::mem::take(&mut st.scratch);
        data.resize((n * B) as usize, 0);
        let t = self.read_backing(st, v, first, &mut data);
        st.scratch = data;
        Ok((n, t?))
    }

    /// Reads the line starting at block `first` of volume `v` from the
    /// backing store (unless it is all cached) and caches the blocks of it
    /// that are not cached yet. The line's bytes stay in `st.scratch`.
    /// Returns the blocks read and the completion.
    fn fill_line(&self, st: &mut State, v: u32, first: u64) -> IoResult<(u64, Nanos)> {
        let (n, t) = self.load_line(st, v, first)?;
        if n == 0 {
            return Ok((0, t));
        }
        let data = std::mem::take(&mut st.scratch);
        let r = self.install(st, v, first, &data);
        st.scratch = data;
        Ok((n, t.max(r?)))
    }

    /// Fills the lines of `r` (migrated in) with one backing read of the part
    /// of the run inside the volume, caching the blocks not cached yet.
    fn fill_run(&self, st: &mut State, r: Run) -> IoResult {
        let v = r.space;
        let lb = st.line_blocks;
        let first = r.first * lb;
        let end = ((r.first + r.lines) * lb).min(self.vol(v).size / B);
        if first >= end {
            return Ok(0);
        }
        if st.map.range(key(v, first)..key(v, end)).count() as u64 == end - first {
            return Ok(0);
        }
        let mut data = vec![0u8; ((end - first) * B) as usize];
        let t = self.read_backing(st, v, first, &mut data)?;
        let line_bytes = (lb * B) as usize;
        let mut done = t;
        for (i, chunk) in data.chunks(line_bytes).enumerate() {
            done = done.max(self.install(st, v, first + i as u64 * lb, chunk)?);
        }
        Ok(done)
    }

    /// Caches the blocks of `data` (whole blocks, starting at block `first` of
    /// volume `v`) that are not cached yet.
    fn install(&self, st: &mut State, v: u32, first: u64, data: &[u8]) -> IoResult {
        let mut done = 0;
        let mut filled = false;
        let mut result = Ok(());
        for (i, chunk) in data.chunks(B as usize).enumerate() {
            let k = key(v, first + i as u64);
            if st.map.contains_key(&k) {
                continue;
            }
            let Some(slot) = st.free.pop() else {
                // Cannot happen: the policy never holds more blocks than
                // there are slots. Serving from the backing store stays
                // correct, so do that rather than fail the request.
                debug_assert!(false, "tier {}: no free cache slot", self.name);
                break;
            };
            match self.cache.write(u64::from(slot) * B, chunk, false) {
                Ok(t) => {
                    done = done.max(t);
                    st.map.insert(k, slot);
                    filled = true;
                }
                Err(e) => {
                    st.free.push(slot);
                    result = Err(e);
                    break;
                }
            }
        }
        if filled {
            st.lines_filled += 1;
        }
        result.map(|()| done)
    }

    /// Charges a finished request to volume `v` (its own IOs and its
    /// baseline; the moves are charged by [`Shared::end_request`]).
    fn charge(&self, st: &mut State, v: u32, t: &RequestTally) {
        let State { ledger, counts, .. } = &mut *st;
        let c = &mut counts[v as usize];
        t.charge_baseline(&mut c.baseline_ops);
        ledger.charge_request(t, &mut c.ops);
        if t.write {
            c.write_hits += t.hits;
            c.write_misses += t.misses;
        } else {
            c.read_hits += t.hits;
            c.read_misses += t.misses;
        }
    }

    fn read(&self, v: u32, offset: u64, buf: &mut [u8]) -> IoResult {
        let m = self.vol(v);
        check_range(offset, buf.len() as u64, m.size)?;
        let mut st = self.state.lock();
        let now = self.tick(&mut st);
        let mut done = now;
        let lb = st.line_blocks;
        let mut tally = RequestTally::at(false, offset / B);
        st.ledger.start_request();
        // Blocks served from the backing read: (block, position in buf,
        // offset within the block, bytes, admitted).
        let mut missed: Vec<(u64, usize, usize, usize, bool)> = Vec::new();
        let mut pos = 0usize;
        while pos < buf.len() {
            let at = offset + pos as u64;
            let (block, within) = (at / B, (at % B) as usize);
            let n = (B as usize - within).min(buf.len() - pos);
            let can = st.ledger.can_read_around();
            let (o, t) = self.access(&mut st, v, block, false, now, can)?;
            done = done.max(t);
            let k = key(v, block);
            // A line this miss filled into free flash, or a hit on one an
            // earlier block of this request filled: read around, with the
            // request's backing read below (the ledger's rule, as in the
            // simulator); the line is installed from it.
            if (o.filled || (o.hit && st.ledger.reading_around()))
                && st.ledger.around_block(o, k, &mut tally)
            {
                missed.push((block, pos, within, n, false));
                pos += n;
                continue;
            }
            // A line the miss filled into free flash beyond the lines read
            // around is in the map already; this block was still a miss (the
            // policy's word), read below.
            let slot = if o.filled {
                None
            } else {
                st.map.get(&k).copied()
            };
            if let Some(slot) = slot {
                tally.block(true, false);
                let part = &mut buf[pos..pos + n];
                done = done.max(self.cache.read(u64::from(slot) * B + within as u64, part)?);
            } else {
                let admitted = !o.filled && st.policy.contains(k);
                tally.block(false, admitted);
                missed.push((block, pos, within, n, admitted));
            }
            pos += n;
        }
        if let (Some(&(lo, ..)), Some(&(hi, ..))) = (missed.first(), missed.last()) {
            // One backing read spanning the misses and the lines read around
            // (the gaps are read, not sought over), then the admitted lines
            // are cached from it.
            let vol_blocks = m.size / B;
            let lines: Vec<u64> = st.ledger.around_lines().iter().map(|l| l.line()).collect();
            let (lo, hi) = lines.iter().fold((lo, hi), |(a, b), &l| {
                (a.min(l * lb), b.max(((l + 1) * lb).min(vol_blocks) - 1))
            });
            let mut span = vec![0u8; ((hi - lo + 1) * B) as usize];
            done = done.max(self.read_backing(&st, v, lo, &mut span)?);
            for &(block, pos, within, n, admitted) in &missed {
                let from = ((block - lo) * B) as usize;
                buf[pos..pos + n].copy_from_slice(&span[from + within..from + within + n]);
                let k = key(v, block);
                if admitted && st.policy.contains(k) && !st.map.contains_key(&k) {
                    if st.line_blocks == 1 {
                        done = done.max(self.install(
                            &mut st,
                            v,
                            block,
                            &span[from..from + B as usize],
                        )?);
                    } else {
                        let first = block / st.line_blocks * st.line_blocks;
                        done = done.max(self.fill_line(&mut st, v, first)?.1);
                    }
                }
            }
            for l in lines {
                let first = l * lb;
                let end = ((l + 1) * lb).min(vol_blocks);
                let (a, b) = (((first - lo) * B) as usize, ((end - lo) * B) as usize);
                done = done.max(self.install(&mut st, v, first, &span[a..b])?);
            }
        }
        self.charge(&mut st, v, &tally);
        st.counts[v as usize].read_bytes += buf.len() as u64;
        done = done.max(self.end_request(&mut st)?);
        Ok(done)
    }

    fn write(&self, v: u32, offset: u64, data: &[u8], fua: bool) -> IoResult {
        let m = self.vol(v);
        check_range(offset, data.len() as u64, m.size)?;
        let mut st = self.state.lock();
        let now = self.tick(&mut st);
        let through = st.ledger.write_policy() == WritePolicy::WriteThrough;
        let mut done = now;
        if through {
            // The backing store first, so whatever the cache does next
            // (update, fill, migrate) copies the new bytes.
            done = done.max(self.backing.write(m.base + offset, data, fua)?);
        }
        let end = offset + data.len() as u64;
        let mut tally = RequestTally::new(true);
        // First and last block that neither hit nor was admitted.
        let mut bypass: Option<(u64, u64)> = None;
        let mut pos = 0usize;
        while pos < data.len() {
            let at = offset + pos as u64;
            let (block, within) = (at / B, at % B);
            let n = (B as usize - within as usize).min(data.len() - pos);
            let part = &data[pos..pos + n];
            let (_, t) = self.access(&mut st, v, block, true, now, false)?;
            done = done.max(t);
            let k = key(v, block);
            let cached = st.map.contains_key(&k);
            let admitted = !cached && st.policy.contains(k);
            if admitted {
                let first = block / st.line_blocks * st.line_blocks;
                let line_end = self.line_end(&st, v, first);
                if offset <= first * B && end >= line_end * B {
                    // The request holds the whole line.
                    let from = (first * B - offset) as usize;
                    let to = (line_end * B - offset) as usize;
                    done = done.max(self.install(&mut st, v, first, &data[from..to])?);
                } else {
                    done = done.max(self.fill_line(&mut st, v, first)?.1);
                }
            }
            tally.block(cached, admitted);
            if cached || admitted {
                st.ledger.wrote(k);
                if let Some(&slot) = st.map.get(&k) {
                    if let Err(e) = self.cache.write(u64::from(slot) * B + within, part, false) {
                        // The copy may be half-written: forget it. Under
                        // write-back the block is lost with it (the error
                        // says so).
                        st.map.remove(&k);
                        st.free.push(slot);
                        return Err(e);
                    }
                }
            } else {
                bypass = Some(bypass.map_or((block, block), |(a, _)| (a, block)));
            }
            pos += n;
        }
        // Dirty lines this request evicted go back before its own bytes, so
        // that the newer bytes land last.
        done = done.max(self.end_request(&mut st)?);
        let mut charged = tally;
        if !through {
            if fua {
                // Durable now: the whole request goes to the backing store too.
                done = done.max(self.backing.write(m.base + offset, data, true)?);
                charged.bypass_span = Some((0, tally.blocks - 1));
            } else if let Some((a, b)) = bypass {
                let from = (a * B).max(offset);
                let to = ((b + 1) * B).min(end);
                let slice = &data[(from - offset) as usize..(to - offset) as usize];
                done = done.max(self.backing.write(m.base + from, slice, false)?);
            }
        }
        self.charge(&mut st, v, &charged);
        // The counts are of what happened, whatever was charged.
        st.counts[v as usize].write_bytes += data.len() as u64;
        Ok(done)
    }

    /// Trim and write-zeroes: the backing store's operation, then the cached
    /// copies of every block touched are dropped (a later read refills them).
    fn zero(&self, v: u32, offset: u64, len: u64, op: impl FnOnce(u64) -> IoResult) -> IoResult {
        let m = self.vol(v);
        check_range(offset, len, m.size)?;
        let mut st = self.state.lock();
        let now = self.tick(&mut st);
        let mut done = now;
        if len > 0 && st.ledger.dirty_lines() > 0 {
            // Dirty lines the range touches go back first: a partly covered
            // block keeps the rest of its bytes only on the backing store.
            let lb = st.line_blocks;
            let (lo, hi) = (offset / B / lb, (offset + len).div_ceil(B).div_ceil(lb));
            for line in lo..hi {
                if st.ledger.clean(key(v, line)) {
                    self.stash(&mut st, v, line * lb)?;
                }
            }
            done = done.max(self.end_request(&mut st)?);
        }
        done = done.max(op(m.base + offset)?);
        if len > 0 {
            self.drop_blocks(&mut st, v, offset / B, (offset + len).div_ceil(B));
        }
        Ok(done)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Nothing may stay only in the cache: its map dies with the tier.
        let mut st = self.state.lock();
        let _ = self.write_back_all(&mut st);
    }
}

impl TierVolume {
    /// Volume name.
    pub fn name(&self) -> &str {
        &self.shared.vols[self.index as usize].name
    }

    /// Its tenant number in the tier's policy.
    pub fn tenant(&self) -> u32 {
        self.index
    }

    /// Name of the tier it belongs to.
    pub fn tier(&self) -> &str {
        &self.shared.name
    }
}

impl BlockDev for TierVolume {
    fn size(&self) -> u64 {
        self.shared.vol(self.index).size
    }

    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            minimum: 512,
            preferred: B as u32,
            maximum: 32 << 20,
        }
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        self.shared.read(self.index, offset, buf)
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        self.shared.write(self.index, offset, data, fua)
    }

    fn flush(&self) -> IoResult {
        // Under write-back the dirty lines go to the backing store first;
        // under write-through the cache holds nothing the backing store lacks.
        let sh = &self.shared;
        let now = sh.clock.now();
        let done = sh.write_back_all(&mut sh.state.lock())?;
        Ok(now.max(done).max(sh.backing.flush()?))
    }

    fn trim(&self, offset: u64, len: u64) -> IoResult {
        let b = &self.shared.backing;
        self.shared
            .zero(self.index, offset, len, |at| b.trim(at, len))
    }

    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        let b = &self.shared.backing;
        self.shared
            .zero(self.index, offset, len, |at| b.write_zeroes(at, len, fua))
    }
    /// The backing store's map of this volume's range: once dirty lines are
    /// written back (write-back) the backing store holds every byte written,
    /// and a trimmed or zeroed range is a hole there.
    fn allocation(&self, offset: u64, len: u64) -> IoResult<Vec<MapExtent>> {
        let m = self.shared.vol(self.index);
        check_range(offset, len, m.size)?;
        self.shared.write_back_all(&mut self.shared.state.lock())?;
        self.shared.backing.allocation(m.base + offset, len)
    }
}

#[cfg(test)]
mod tests;
