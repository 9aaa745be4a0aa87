//! The IO cost model of the GREM paper (Section IV-C, Fig. 7): the total
//! latency of the SSD and HDD operations a cache policy causes, counting both
//! serving IOs and moving content between the disk and the cache.
//!
//! Why it matters: hit ratio alone flatters fine-grained policies. GLRU and
//! CAR admit a 4 KiB line on every miss and write dirty lines back one by one;
//! the coarse policies (vFRM, GREM, D-GREM) move 128 KiB lines once per epoch.
//! The paper measured its latencies on an Intel DC S3500 (80 GB) SSD and a
//! WD20EURS 5400 rpm HDD at 4 KiB and 128 KiB, but does not print the numbers,
//! so the defaults here are derived from those devices' data sheets:
//!
//! * SSD: 50 µs read and 65 µs write typical 4 KiB latency; 340 MB/s read and
//!   100 MB/s write sequential bandwidth for the extra 124 KiB of a 128 KiB
//!   IO: 423 µs and 1335 µs;
//! * HDD: 5400 rpm gives 5.56 ms average rotational latency; with an assumed
//!   8.9 ms average seek (typical of 3.5-inch desktop drives; WD does not
//!   publish it) and 110 MB/s sustained transfer, a random 4 KiB IO costs
//!   14.5 ms and a 128 KiB one 15.6 ms, for reads and writes alike.
//!
//! An IO of `b` bytes costs the straight line through the two points
//! (4 KiB, `*_4k_us`) and (128 KiB, `*_128k_us`), extended beyond them: the
//! intercept is the per-IO cost (for the HDD, seek and rotation), the slope
//! the transfer. A *sequential run* of `b` bytes, contiguous on disk, is
//! charged as one IO of its size, split into IOs of at most
//! [`MAX_IO_BYTES`] (1 MiB) each: the seek is paid once per 1 MiB, not once
//! per line. That is the paper's definition (Section IV-C: "SSD/HDD access and
//! SSD-HDD contents updating latencies", measured "under 4KB and 128KB cache
//! lines") applied to what a cache actually issues.
//!
//! What is charged, per request ([`Ledger::charge_request`]) and per set of
//! content moves ([`Ledger::drain_moves`]); the simulator ([`crate::sim`])
//! and the live tier (crate `tier`) both charge through a [`Ledger`]:
//!
//! | event | charge |
//! |---|---|
//! | read hit | one SSD read of the request's hit blocks |
//! | read miss | one HDD read spanning the request's first to last missed block (a cache reads the gap rather than seek twice), plus one SSD write of the admitted lines (fill) |
//! | read miss that fills its line into free flash (`fill_free_flash`) | the request's HDD read widens to cover the line ("read around"), plus one SSD write of the line; the request's later blocks in that line are served from that read |
//! | write, [`WritePolicy::WriteThrough`] | one HDD write of the request (as with no cache), plus one SSD write of its blocks that hit or were admitted |
//! | write, [`WritePolicy::WriteBack`] | one SSD write of the blocks that hit or were admitted (their lines become dirty), plus one HDD write spanning the first to last block that was neither |
//! | dirty lines evicted while serving one request (write-back) | per run of lines contiguous on disk: one SSD read and one HDD write of the run (coalesced write-back) |
//! | lines migrated into the cache while serving one request (coarse policies' epoch ends) | per run of contiguous lines (a 1 MiB bin is one run of eight 128 KiB lines): one HDD read and one SSD write of the run |
//!
//! A clean line that leaves the cache costs nothing. Only the 4 KiB-line
//! policies admit on a miss, so the fill of an admitted line is the block the
//! miss read anyway.
//!
//! The *normalised* cost divides by the cost of the same requests with no
//! cache at all (every request one HDD IO of its size, split at
//! [`MAX_IO_BYTES`]), so 1.0 means the cache saved nothing and values above
//! 1.0 mean its content updates cost more than its hits saved. Under
//! write-through the cost exceeds that only by SSD operations (a few percent
//! at most) and by content migrations; under write-back it can exceed it when
//! dirty lines are evicted in scattered order, each then its own HDD write
//! where the requests that dirtied them may have been one.

use std::fmt;
use std::str::FromStr;

use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

use crate::{CacheError, Events, Key, Outcome, BLOCK_BYTES};

/// Largest single device IO the model charges: a longer sequential run is
/// charged as several IOs of at most this size (a typical maximum transfer
/// of a block device queue, and the paper's bin size).
pub const MAX_IO_BYTES: u64 = 1 << 20;

/// How writes reach the disk.
///
/// The default is [`WritePolicy::WriteThrough`]: the live tier rebuilds its
/// cache cold at every start, so write-through is the setting that never
/// leaves the only copy of data in the cache. The simulator takes the same
/// default so that both agree unless told otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WritePolicy {
    /// Every write goes to the HDD; blocks that hit or are admitted are also
    /// updated in the SSD. Nothing is ever dirty.
    #[default]
    WriteThrough,
    /// Writes that hit or are admitted go to the SSD only and leave their
    /// line dirty; a dirty line is written back when it leaves the cache.
    /// Writes that neither hit nor are admitted go to the HDD.
    WriteBack,
}

impl WritePolicy {
    /// Both, in a fixed order.
    pub const ALL: [WritePolicy; 2] = [WritePolicy::WriteThrough, WritePolicy::WriteBack];

    /// The name used in configurations and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            WritePolicy::WriteThrough => "write-through",
            WritePolicy::WriteBack => "write-back",
        }
    }
}

impl fmt::Display for WritePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for WritePolicy {
    type Err = CacheError;
    fn from_str(s: &str) -> Result<Self, CacheError> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "write-through" | "through" | "wt" => Ok(WritePolicy::WriteThrough),
            "write-back" | "back" | "wb" => Ok(WritePolicy::WriteBack),
            _ => Err(CacheError::Config(format!(
                "unknown write policy {s:?}, expected write-through or write-back"
            ))),
        }
    }
}

const SMALL: f64 = 4096.0;
const LARGE: f64 = 131072.0;

/// Device latencies for the IO cost model, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostModel {
    /// SSD read of 4 KiB.
    pub ssd_read_4k_us: f64,
    /// SSD write of 4 KiB.
    pub ssd_write_4k_us: f64,
    /// SSD read of 128 KiB.
    pub ssd_read_128k_us: f64,
    /// SSD write of 128 KiB.
    pub ssd_write_128k_us: f64,
    /// HDD read of 4 KiB (random).
    pub hdd_read_4k_us: f64,
    /// HDD write of 4 KiB (random).
    pub hdd_write_4k_us: f64,
    /// HDD read of 128 KiB (random).
    pub hdd_read_128k_us: f64,
    /// HDD write of 128 KiB (random).
    pub hdd_write_128k_us: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            ssd_read_4k_us: 50.0,
            ssd_write_4k_us: 65.0,
            ssd_read_128k_us: 423.0,
            ssd_write_128k_us: 1335.0,
            hdd_read_4k_us: 14_500.0,
            hdd_write_4k_us: 14_500.0,
            hdd_read_128k_us: 15_600.0,
            hdd_write_128k_us: 15_600.0,
        }
    }
}

/// The four device operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevOp {
    /// Read from the SSD.
    SsdRead = 0,
    /// Write to the SSD.
    SsdWrite = 1,
    /// Read from the HDD.
    HddRead = 2,
    /// Write to the HDD.
    HddWrite = 3,
}

/// Operation and byte counts per [`DevOp`], from which a cost follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OpCounts {
    /// Operations, indexed by [`DevOp`].
    pub ops: [u64; 4],
    /// Bytes, indexed by [`DevOp`].
    pub bytes: [u64; 4],
}

impl OpCounts {
    /// Records one operation of `bytes`.
    #[inline]
    pub fn add(&mut self, op: DevOp, bytes: u64) {
        self.ops[op as usize] += 1;
        self.bytes[op as usize] += bytes;
    }

    /// Records a sequential run of `bytes`: one operation per started
    /// [`MAX_IO_BYTES`]. Nothing for zero bytes.
    #[inline]
    pub fn add_run(&mut self, op: DevOp, bytes: u64) {
        if bytes > 0 {
            self.ops[op as usize] += bytes.div_ceil(MAX_IO_BYTES);
            self.bytes[op as usize] += bytes;
        }
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &OpCounts) {
        for i in 0..4 {
            self.ops[i] += other.ops[i];
            self.bytes[i] += other.bytes[i];
        }
    }
}

/// Lines contiguous on disk: `lines` lines of address space `space` from
/// line `first` on (in the policy's line units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// The address space.
    pub space: u32,
    /// First line.
    pub first: u64,
    /// Number of lines, at least one.
    pub lines: u64,
}

/// Sorts `keys` (line keys), drops duplicates and appends the runs of
/// consecutive lines of one space to `out`.
pub fn runs(keys: &mut [Key], out: &mut Vec<Run>) {
    keys.sort_unstable();
    let mut cur: Option<Run> = None;
    for &k in keys.iter() {
        match &mut cur {
            Some(r) if r.space == k.space() && r.first + r.lines == k.line() => r.lines += 1,
            Some(r) if r.space == k.space() && r.first + r.lines > k.line() => {}
            _ => {
                if let Some(r) = cur.take() {
                    out.push(r);
                }
                cur = Some(Run {
                    space: k.space(),
                    first: k.line(),
                    lines: 1,
                });
            }
        }
    }
    out.extend(cur);
}

/// What one request did, block by block, as far as the cost is concerned.
/// Fill it with [`RequestTally::block`] in block order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestTally {
    /// A write rather than a read.
    pub write: bool,
    /// Blocks the request touches.
    pub blocks: u64,
    /// Blocks that hit.
    pub hits: u64,
    /// Blocks that missed.
    pub misses: u64,
    /// Missed blocks whose line was admitted on the miss.
    pub admitted: u64,
    /// First and last missed block (index within the request).
    pub miss_span: Option<(u64, u64)>,
    /// First and last block that neither hit nor was admitted.
    pub bypass_span: Option<(u64, u64)>,
    /// The request's first block (absolute), to place [`Self::around`].
    pub first_block: u64,
    /// First and last block (absolute) of the lines a read miss filled into
    /// free flash: read in the request's own HDD read ("read around");
    /// meaningful when [`Self::around_lines`] is not 0.
    pub around: (u64, u64),
    /// Lines read around.
    pub around_lines: u64,
    /// Blocks that hit a line read around by this very request: served from
    /// its HDD read, not from the SSD.
    pub around_hits: u64,
}

fn widen(span: &mut Option<(u64, u64)>, i: u64) {
    *span = Some(match *span {
        None => (i, i),
        Some((a, b)) => (a.min(i), b.max(i)),
    });
}

fn span_blocks(span: Option<(u64, u64)>) -> u64 {
    span.map_or(0, |(a, b)| b - a + 1)
}

impl RequestTally {
    /// A tally for a read (`write == false`) or write request.
    pub fn new(write: bool) -> Self {
        RequestTally {
            write,
            ..RequestTally::default()
        }
    }

    /// A tally for a request whose first block is `first_block` (needed
    /// only for [`Self::read_around`]).
    pub fn at(write: bool, first_block: u64) -> Self {
        RequestTally {
            write,
            first_block,
            ..RequestTally::default()
        }
    }

    /// A read miss filled the line of blocks `first..=last` (absolute) into
    /// free flash: the request's HDD read widens to cover it, and the line
    /// is written to the SSD from it.
    pub fn read_around(&mut self, first: u64, last: u64) {
        self.around = if self.around_lines == 0 {
            (first, last)
        } else {
            (self.around.0.min(first), self.around.1.max(last))
        };
        self.around_lines += 1;
    }

    /// Records the next block of the request as a hit on a line this request
    /// read around: a hit, served from the request's HDD read.
    pub fn block_around(&mut self) {
        self.blocks += 1;
        self.hits += 1;
        self.around_hits += 1;
    }

    /// Blocks the request's HDD read spans (reads): its missed blocks and
    /// the lines it read around, as one run.
    fn hdd_read_blocks(&self) -> u64 {
        match (self.miss_span, self.around_lines) {
            (m, 0) => span_blocks(m),
            (Some((a, b)), _) => {
                let (a, b) = (self.first_block + a, self.first_block + b);
                b.max(self.around.1) - a.min(self.around.0) + 1
            }
            (None, _) => self.around.1 - self.around.0 + 1,
        }
    }

    /// Records the next block of the request: a hit, or a miss whose line was
    /// admitted or not.
    #[inline]
    pub fn block(&mut self, hit: bool, admitted: bool) {
        let i = self.blocks;
        self.blocks += 1;
        if hit {
            self.hits += 1;
            return;
        }
        self.misses += 1;
        widen(&mut self.miss_span, i);
        if admitted {
            self.admitted += 1;
        } else {
            widen(&mut self.bypass_span, i);
        }
    }

    /// Charges the request with no cache: one HDD IO of its size.
    pub fn charge_baseline(&self, ops: &mut OpCounts) {
        let op = if self.write {
            DevOp::HddWrite
        } else {
            DevOp::HddRead
        };
        ops.add_run(op, self.blocks * BLOCK_BYTES);
    }
}

/// Kind of a content move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Dirty lines written back to the HDD as they left the cache.
    WriteBack,
    /// Lines copied from the HDD into the cache ahead of use (migration).
    Fill,
}

impl Move {
    /// Charges a move of `bytes` (one run) to `ops`.
    pub fn charge(self, bytes: u64, ops: &mut OpCounts) {
        match self {
            Move::WriteBack => {
                ops.add_run(DevOp::SsdRead, bytes);
                ops.add_run(DevOp::HddWrite, bytes);
            }
            Move::Fill => {
                ops.add_run(DevOp::HddRead, bytes);
                ops.add_run(DevOp::SsdWrite, bytes);
            }
        }
    }
}

/// What a line event was, as [`Ledger::events`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEvent {
    /// A clean line left the cache.
    Evicted,
    /// A dirty line left the cache (it will be written back).
    EvictedDirty,
    /// A line was migrated into the cache.
    Migrated,
}

/// The cost bookkeeping shared by the simulator and the live tier: which
/// lines are dirty, and which content moves one request caused, merged into
/// runs when the request is done. One per policy instance.
#[derive(Debug, Clone)]
pub struct Ledger {
    write_policy: WritePolicy,
    line_blocks: u64,
    shift: u32,
    dirty: FxHashSet<u64>,
    writeback: Vec<Key>,
    fills: Vec<Key>,
    runs: Vec<Run>,
    /// Lines the request under way reads around (line keys).
    around: Vec<Key>,
}

/// Lines one request may read around; a fill beyond them is a move of its
/// own. Bounds the work per request, for the simulator and the live tier
/// alike.
pub const AROUND_LINES: usize = 128;

impl Ledger {
    /// A ledger for a policy of `line_blocks` blocks per line (a power of two).
    pub fn new(write_policy: WritePolicy, line_blocks: u64) -> Ledger {
        debug_assert!(line_blocks.is_power_of_two());
        Ledger {
            write_policy,
            line_blocks,
            shift: line_blocks.trailing_zeros(),
            dirty: FxHashSet::default(),
            writeback: Vec::new(),
            fills: Vec::new(),
            runs: Vec::new(),
            around: Vec::new(),
        }
    }

    /// Starts a request: forgets the lines the one before read around.
    #[inline]
    pub fn start_request(&mut self) {
        if !self.around.is_empty() {
            self.around.clear();
        }
    }

    /// Whether a fill on the next read miss would be read around (the
    /// request has room for another line).
    #[inline]
    pub fn can_read_around(&self) -> bool {
        self.around.len() < AROUND_LINES
    }

    /// Whether the request under way reads any line around.
    #[inline]
    pub fn reading_around(&self) -> bool {
        !self.around.is_empty()
    }

    /// The lines the request under way reads around (line keys).
    pub fn around_lines(&self) -> &[Key] {
        &self.around
    }

    /// A read's block `block` (a block key) with outcome `o`, when it
    /// filled its line into free flash ([`Outcome::filled`]) or the request
    /// reads lines around: tallies it and returns true if it is read around
    /// (the fill, charged with the request's own HDD read, or a hit on a
    /// line the request filled, served from that read); false leaves it to
    /// the caller. A fill queued as a move by [`Ledger::events`] is taken
    /// off the queue.
    #[cold]
    #[inline(never)]
    pub fn around_block(&mut self, o: Outcome, block: Key, tally: &mut RequestTally) -> bool {
        let line = block.coarsen(self.shift);
        let first = line.line() << self.shift;
        if o.filled && self.can_read_around() {
            if let Some(i) = self.fills.iter().rposition(|k| *k == line) {
                self.fills.swap_remove(i);
            }
            self.around.push(line);
            tally.read_around(first, first + self.line_blocks - 1);
            tally.block(false, false);
            return true;
        }
        if o.hit && self.around.contains(&line) {
            tally.block_around();
            return true;
        }
        false
    }

    /// The write policy.
    pub fn write_policy(&self) -> WritePolicy {
        self.write_policy
    }

    /// Bytes per line.
    pub fn line_bytes(&self) -> u64 {
        self.line_blocks * BLOCK_BYTES
    }

    /// Records a block write that hit or was admitted: under write-back its
    /// line is dirty from now on. `block` is a block key.
    #[inline]
    pub fn wrote(&mut self, block: Key) {
        if self.write_policy == WritePolicy::WriteBack {
            self.dirty.insert(block.coarsen(self.shift).raw());
        }
    }

    /// [`Ledger::wrote`] for a write access whose outcome was `o`.
    #[inline]
    pub fn access(&mut self, block: Key, write: bool, o: Outcome) {
        if write && (o.hit || o.admitted) {
            self.wrote(block);
        }
    }

    /// Whether line `line` (a line key) is dirty.
    pub fn is_dirty(&self, line: Key) -> bool {
        self.dirty.contains(&line.raw())
    }

    /// Lines dirty now.
    pub fn dirty_lines(&self) -> usize {
        self.dirty.len()
    }

    /// Takes the events of one policy call: each evicted line that is still
    /// out of the cache and each migrated line that is still in it (an event
    /// list does not say in which order things happened; `cached` answers for
    /// a line key) is reported to `on`, and a dirty evicted line is queued for
    /// write-back. Does not clear `ev`.
    pub fn events(
        &mut self,
        ev: &Events,
        cached: impl Fn(Key) -> bool,
        mut on: impl FnMut(Key, LineEvent),
    ) {
        for &k in &ev.evicted {
            if cached(k) {
                continue;
            }
            if self.dirty.remove(&k.raw()) {
                self.writeback.push(k);
                on(k, LineEvent::EvictedDirty);
            } else {
                on(k, LineEvent::Evicted);
            }
        }
        for &k in &ev.migrated_in {
            if cached(k) {
                self.fills.push(k);
                on(k, LineEvent::Migrated);
            }
        }
    }

    /// Marks line `line` (a line key) clean and queues it for write-back if
    /// it was dirty; says whether it was.
    pub fn clean(&mut self, line: Key) -> bool {
        let was = self.dirty.remove(&line.raw());
        if was {
            self.writeback.push(line);
        }
        was
    }

    /// Marks every dirty line clean and queues it for write-back (a flush,
    /// or a policy change). Returns the lines, sorted.
    pub fn clean_all(&mut self) -> Vec<Key> {
        let mut lines: Vec<Key> = self.dirty.drain().map(Key::from_raw).collect();
        lines.sort_unstable();
        self.writeback.extend_from_slice(&lines);
        lines
    }

    /// Charges one request's own IOs (not the content moves) to `ops`.
    pub fn charge_request(&self, t: &RequestTally, ops: &mut OpCounts) {
        if t.blocks == 0 {
            return;
        }
        if t.write {
            ops.add_run(DevOp::SsdWrite, (t.hits + t.admitted) * BLOCK_BYTES);
            match self.write_policy {
                WritePolicy::WriteThrough => ops.add_run(DevOp::HddWrite, t.blocks * BLOCK_BYTES),
                WritePolicy::WriteBack => {
                    ops.add_run(DevOp::HddWrite, span_blocks(t.bypass_span) * BLOCK_BYTES)
                }
            }
        } else {
            ops.add_run(DevOp::SsdRead, (t.hits - t.around_hits) * BLOCK_BYTES);
            ops.add_run(DevOp::HddRead, t.hdd_read_blocks() * BLOCK_BYTES);
            ops.add_run(
                DevOp::SsdWrite,
                (t.admitted + t.around_lines) * self.line_bytes(),
            );
        }
    }

    /// Hands the content moves queued since the last call to `f`, merged
    /// into runs of contiguous lines (write-backs first), with the bytes to
    /// charge for each (see [`Move::charge`]), and forgets them.
    pub fn drain_moves(&mut self, mut f: impl FnMut(Move, Run, u64)) {
        let line_bytes = self.line_bytes();
        for (m, keys) in [
            (Move::WriteBack, &mut self.writeback),
            (Move::Fill, &mut self.fills),
        ] {
            if keys.is_empty() {
                continue;
            }
            self.runs.clear();
            runs(keys, &mut self.runs);
            keys.clear();
            for r in &self.runs {
                f(m, *r, r.lines * line_bytes);
            }
        }
    }
}

impl CostModel {
    /// Checks that every latency is a positive number and no 128 KiB IO is
    /// cheaper than a 4 KiB one.
    pub fn validate(&self) -> Result<(), CacheError> {
        for (name, small, large) in self.pairs() {
            if !(small.is_finite() && small > 0.0 && large.is_finite() && large > 0.0) {
                return Err(CacheError::Config(format!(
                    "cost model: {name} latencies must be positive numbers (4k = {small}, 128k = {large})"
                )));
            }
            if large < small {
                return Err(CacheError::Config(format!(
                    "cost model: {name}_128k_us = {large} is less than {name}_4k_us = {small}"
                )));
            }
        }
        Ok(())
    }

    /// Parses a TOML document with any of the fields; the rest keep their
    /// defaults. Unknown fields and bad values are errors naming them.
    pub fn from_toml(text: &str) -> Result<Self, CacheError> {
        let c: CostModel = toml::from_str(text).map_err(|e| CacheError::Config(e.to_string()))?;
        c.validate()?;
        Ok(c)
    }

    fn pairs(&self) -> [(&'static str, f64, f64); 4] {
        [
            ("ssd_read", self.ssd_read_4k_us, self.ssd_read_128k_us),
            ("ssd_write", self.ssd_write_4k_us, self.ssd_write_128k_us),
            ("hdd_read", self.hdd_read_4k_us, self.hdd_read_128k_us),
            ("hdd_write", self.hdd_write_4k_us, self.hdd_write_128k_us),
        ]
    }

    /// Intercept (µs) and slope (µs per byte) of an operation's latency line.
    fn line(&self, op: DevOp) -> (f64, f64) {
        let (_, small, large) = self.pairs()[op as usize];
        let slope = (large - small) / (LARGE - SMALL);
        (small - slope * SMALL, slope)
    }

    /// Latency of one `op` of `bytes`, in µs.
    pub fn latency_us(&self, op: DevOp, bytes: u64) -> f64 {
        let (a, k) = self.line(op);
        a + k * bytes as f64
    }

    /// Total latency of the counted operations, in µs. Because the latency
    /// is linear in size, this equals the sum over the single operations.
    pub fn cost_us(&self, c: &OpCounts) -> f64 {
        [
            DevOp::SsdRead,
            DevOp::SsdWrite,
            DevOp::HddRead,
            DevOp::HddWrite,
        ]
        .iter()
        .map(|&op| {
            let (a, k) = self.line(op);
            a * c.ops[op as usize] as f64 + k * c.bytes[op as usize] as f64
        })
        .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_passes_through_both_points_and_sums_linearly() {
        let m = CostModel::default();
        m.validate().unwrap();
        assert!((m.latency_us(DevOp::SsdRead, 4096) - 50.0).abs() < 1e-9);
        assert!((m.latency_us(DevOp::SsdRead, 131072) - 423.0).abs() < 1e-9);
        assert!((m.latency_us(DevOp::HddWrite, 131072) - 15_600.0).abs() < 1e-9);
        let mut c = OpCounts::default();
        c.add(DevOp::HddRead, 4096);
        c.add(DevOp::HddRead, 131072);
        c.add(DevOp::SsdWrite, 65536);
        let direct = m.latency_us(DevOp::HddRead, 4096)
            + m.latency_us(DevOp::HddRead, 131072)
            + m.latency_us(DevOp::SsdWrite, 65536);
        assert!((m.cost_us(&c) - direct).abs() < 1e-6);
    }

    #[test]
    fn runs_merge_contiguous_lines_of_one_space_and_long_runs_split() {
        let k = |s, l| Key::new(s, l).unwrap();
        let mut keys = vec![
            k(0, 5),
            k(1, 6),
            k(0, 3),
            k(0, 4),
            k(0, 4),
            k(1, 8),
            k(0, 9),
        ];
        let mut out = Vec::new();
        runs(&mut keys, &mut out);
        let got: Vec<(u32, u64, u64)> = out.iter().map(|r| (r.space, r.first, r.lines)).collect();
        assert_eq!(got, vec![(0, 3, 3), (0, 9, 1), (1, 6, 1), (1, 8, 1)]);
        let mut c = OpCounts::default();
        c.add_run(DevOp::HddWrite, MAX_IO_BYTES * 2 + 1);
        c.add_run(DevOp::HddWrite, 0);
        assert_eq!((c.ops[3], c.bytes[3]), (3, MAX_IO_BYTES * 2 + 1));
    }

    #[test]
    fn ledger_tracks_dirty_lines_only_under_write_back() {
        let blk = |l| Key::new(0, l).unwrap();
        for wp in WritePolicy::ALL {
            let mut l = Ledger::new(wp, 32);
            l.wrote(blk(33)); // line 1
            l.wrote(blk(64)); // line 2
            let ev = Events {
                evicted: vec![Key::new(0, 1).unwrap(), Key::new(0, 2).unwrap()],
                migrated_in: vec![Key::new(0, 7).unwrap()],
            };
            let mut seen = Vec::new();
            l.events(&ev, |k| k.line() == 7, |k, e| seen.push((k.line(), e)));
            let mut moves = Vec::new();
            l.drain_moves(|m, r, b| moves.push((m, r.first, r.lines, b)));
            if wp == WritePolicy::WriteBack {
                assert_eq!(seen[0], (1, LineEvent::EvictedDirty));
                assert_eq!(moves[0], (Move::WriteBack, 1, 2, 256 << 10));
            } else {
                assert_eq!(seen[0], (1, LineEvent::Evicted));
                assert_eq!(moves[0].0, Move::Fill);
            }
            assert_eq!(seen[2], (7, LineEvent::Migrated));
            assert_eq!(*moves.last().unwrap(), (Move::Fill, 7, 1, 128 << 10));
            assert_eq!(l.dirty_lines(), 0);
        }
        assert_eq!(
            "write-back".parse::<WritePolicy>().unwrap(),
            WritePolicy::WriteBack
        );
        assert!("lazy".parse::<WritePolicy>().is_err());
        assert_eq!(WritePolicy::default(), WritePolicy::WriteThrough);
    }

    #[test]
    fn a_line_read_around_rides_on_the_requests_hdd_read() {
        // A 3-block read at block 40: block 40 misses and fills line 1
        // (blocks 32..=63), 41 and 42 hit that line. One HDD read spans the
        // line (32 blocks, not the 1 missed plus a separate 32), one SSD
        // write of the line, no SSD read, and no move of its own.
        let mut l = Ledger::new(WritePolicy::WriteThrough, 32);
        let line = Key::new(0, 1).unwrap();
        let ev = Events {
            evicted: vec![],
            migrated_in: vec![line],
        };
        l.events(&ev, |_| true, |_, _| {});
        l.start_request();
        let mut t = RequestTally::at(false, 40);
        let filled = Outcome {
            filled: true,
            ..Outcome::default()
        };
        let hit = Outcome {
            hit: true,
            ..Outcome::default()
        };
        assert!(l.around_block(filled, Key::new(0, 40).unwrap(), &mut t));
        assert!(l.reading_around());
        assert_eq!(l.around_lines(), &[line]);
        assert!(l.around_block(hit, Key::new(0, 41).unwrap(), &mut t));
        assert!(l.around_block(hit, Key::new(0, 42).unwrap(), &mut t));
        assert!(
            !l.around_block(hit, Key::new(0, 64).unwrap(), &mut t),
            "another line"
        );
        assert_eq!((t.hits, t.misses, t.around_hits), (2, 1, 2));
        let mut ops = OpCounts::default();
        l.charge_request(&t, &mut ops);
        assert_eq!(ops.bytes[DevOp::HddRead as usize], 32 * BLOCK_BYTES);
        assert_eq!(ops.ops[DevOp::HddRead as usize], 1);
        assert_eq!(ops.bytes[DevOp::SsdWrite as usize], 128 << 10);
        assert_eq!(ops.ops[DevOp::SsdRead as usize], 0);
        let mut moves = 0;
        l.drain_moves(|_, _, _| moves += 1);
        assert_eq!(moves, 0);
        l.start_request();
        assert!(!l.reading_around());
        // A miss span beyond the line widens the read to cover both.
        let mut t = RequestTally::at(false, 60);
        t.read_around(32, 63);
        t.block(false, false);
        for _ in 0..3 {
            t.block_around();
        }
        t.block(false, false); // block 64, past the line
        let mut ops = OpCounts::default();
        l.charge_request(&t, &mut ops);
        assert_eq!(ops.bytes[DevOp::HddRead as usize], 33 * BLOCK_BYTES);
    }

    #[test]
    fn config_rejects_unknown_fields_and_bad_values() {
        let e = toml::from_str::<CostModel>("ssd_read_4k_us = 10\nflash_us = 3\n").unwrap_err();
        assert!(e.to_string().contains("flash_us"), "{e}");
        let m: CostModel = toml::from_str("ssd_read_4k_us = 10").unwrap();
        assert_eq!(m.ssd_read_4k_us, 10.0);
        assert_eq!(m.hdd_read_4k_us, 14_500.0);
        let e = CostModel::from_toml("hdd_read_128k_us = 1.0").unwrap_err();
        assert!(e.to_string().contains("hdd_read_128k_us"), "{e}");
        assert!(CostModel::from_toml("x = 1").is_err());
        let bad = CostModel {
            hdd_read_128k_us: 100.0,
            ..CostModel::default()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("hdd_read_128k_us"), "{e}");
        let bad = CostModel {
            ssd_write_4k_us: -1.0,
            ..CostModel::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("ssd_write"));
    }
}
