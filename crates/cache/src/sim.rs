//! The trace-driven simulator: tenants' traces merged by time, requests split
//! into 4 KiB blocks on the fly, one policy per run, hit/miss and IO cost per
//! tenant.
//!
//! Why it is built this way:
//! * **streaming**: each trace is read as it is replayed, never loaded, so a
//!   run's memory is the policy's metadata, whatever the trace length;
//! * **k-way merge**: each trace is one tenant (VM) and starts at time zero
//!   (its first request); tenants are interleaved by time with a binary heap,
//!   as if they ran side by side. A trace whose timestamps step back (the
//!   Tencent sample does) is replayed in file order, its clock held at the
//!   latest time seen, so the policies see time that never decreases;
//! * **one compiled loop per policy**: the loop is generic over the policy
//!   type ([`crate::PolicyVisitor`]), so the policy's access code is inlined
//!   and nothing is allocated per request;
//! * **runs in parallel**: [`run_matrix`] runs policy × size combinations on
//!   worker threads, each streaming the traces itself.
//!
//! Volumes inside one trace (MSR disk numbers, Tencent volume ids, DiskSim
//! devices) are separate address spaces of the same tenant.
//!
//! `span_secs` optionally stretches every tenant's timeline to the same
//! length, so that short excerpts of different lengths overlap for the whole
//! run and epoch-based policies see several epochs; it changes only time,
//! never order within a tenant. A trace longer than the span is cut there
//! (its requests after the span are left out) rather than compressed, which
//! would multiply its intensity. `max_stretch` refuses a span that stretches
//! some trace by more than that factor: a trace stretched 1,000 times has its
//! bursts spread over hours, and epoch-based policies would be judged on a
//! burstiness that is not the trace's. A first pass over each trace finds its
//! earliest and latest time stamps, and time then runs from the earliest
//! (rather than from the first request, as without stretching).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc as Shared, Mutex};

use clock::Clock;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use trace::{BoxedTrace, Format, Op, Request, TraceError};

use crate::cost::{LineEvent, OpCounts, RequestTally};
use crate::{
    Access, CacheError, CachePolicy, CostModel, Events, Key, Ledger, PolicyConfig, PolicyKind,
    PolicyVisitor, TenantOccupancy, WritePolicy, Zones, BLOCK_BYTES, LINE_BITS, MAX_LINE,
};

/// The longest `span_secs`: 18,446,744,073 s, the most whole seconds 64-bit
/// nanoseconds hold. Stretched times reach the span, and a longer one would
/// saturate them all at `u64::MAX`, silently changing the results.
pub const MAX_SPAN_SECS: f64 = 18_446_744_073.0;

/// Everything a run needs besides the traces, the policy and the size.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Policy parameters.
    pub policy: PolicyConfig,
    /// Device latencies for the IO cost.
    pub cost: CostModel,
    /// How writes reach the disk (see [`WritePolicy`]); write-through by
    /// default, as the live tier.
    pub write_policy: WritePolicy,
    /// Stretch every tenant's timeline to this many seconds, cutting longer
    /// ones there (see the module documentation); `None` keeps trace time.
    pub span_secs: Option<f64>,
    /// With `span_secs`: the most any trace may be stretched (a factor);
    /// `None`: no limit.
    pub max_stretch: Option<f64>,
}

impl SimConfig {
    /// Checks the policy and cost parameters and the span.
    pub fn validate(&self) -> Result<(), CacheError> {
        self.policy.validate()?;
        self.cost.validate()?;
        if let Some(s) = self.span_secs {
            if !(s.is_finite() && s > 0.0) {
                return Err(CacheError::Config(format!(
                    "span_secs = {s}: must be positive"
                )));
            }
            if s > MAX_SPAN_SECS {
                return Err(CacheError::Config(format!(
                    "span_secs = {s}: more than {MAX_SPAN_SECS} s (584 years), past which \
                     stretched times overflow 64-bit nanoseconds"
                )));
            }
        }
        if let Some(m) = self.max_stretch {
            if !(m.is_finite() && m >= 1.0) {
                return Err(CacheError::Config(format!(
                    "max_stretch = {m}: must be at least 1"
                )));
            }
            if self.span_secs.is_none() {
                return Err(CacheError::Config(
                    "max_stretch limits the stretching of span_secs: give a span too".into(),
                ));
            }
        }
        Ok(())
    }
}

/// A tenant's trace, which the simulator may open several times.
pub trait Source: Sync {
    /// The tenant's name in results.
    fn name(&self) -> &str;
    /// A fresh stream of the trace from its start.
    fn open(&self) -> Result<BoxedTrace, TraceError>;
}

/// A trace file in one of the [`trace`] formats.
#[derive(Debug, Clone)]
pub struct FileSource {
    /// Name in results (the file name by default).
    pub name: String,
    /// Its format.
    pub format: Format,
    /// Its path.
    pub path: PathBuf,
}

impl FileSource {
    /// From a `FORMAT:PATH` spec; named after the file.
    pub fn from_spec(spec: &str) -> Result<FileSource, CacheError> {
        let (format, path) = trace::parse_spec(spec)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| spec.to_string());
        Ok(FileSource { name, format, path })
    }
}

impl Source for FileSource {
    fn name(&self) -> &str {
        &self.name
    }
    fn open(&self) -> Result<BoxedTrace, TraceError> {
        trace::open(self.format, &self.path)
    }
}

/// Requests held in memory (tests, generated workloads).
#[derive(Debug, Clone)]
pub struct MemSource {
    /// Name in results.
    pub name: String,
    /// The requests, in trace order.
    pub requests: Shared<Vec<Request>>,
}

impl MemSource {
    /// Wraps `requests` under `name`.
    pub fn new(name: impl Into<String>, requests: Vec<Request>) -> Self {
        MemSource {
            name: name.into(),
            requests: Shared::new(requests),
        }
    }
}

struct MemIter {
    reqs: Shared<Vec<Request>>,
    i: usize,
}

impl Iterator for MemIter {
    type Item = Result<Request, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        let r = self.reqs.get(self.i).copied()?;
        self.i += 1;
        Some(Ok(r))
    }
}

impl Source for MemSource {
    fn name(&self) -> &str {
        &self.name
    }
    fn open(&self) -> Result<BoxedTrace, TraceError> {
        Ok(Box::new(MemIter {
            reqs: self.requests.clone(),
            i: 0,
        }))
    }
}

/// Results for one tenant (or the total over all tenants).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TenantResult {
    /// Tenant name (`total` for the sum).
    pub name: String,
    /// Requests replayed.
    pub requests: u64,
    /// Zero-length requests, skipped.
    pub empty_requests: u64,
    /// Block (4 KiB) reads that hit.
    pub read_hits: u64,
    /// Block reads that missed.
    pub read_misses: u64,
    /// Block writes that hit.
    pub write_hits: u64,
    /// Block writes that missed.
    pub write_misses: u64,
    /// Lines admitted on a miss.
    pub admitted_lines: u64,
    /// Lines evicted.
    pub evicted_lines: u64,
    /// Evicted lines that were dirty and written back.
    pub writebacks: u64,
    /// Lines migrated into the cache at epoch ends.
    pub migrated_lines: u64,
    /// Device operations caused, for the cost (content moves included).
    pub ops: OpCounts,
    /// The part of `ops` that moved content: write-backs and migrations.
    pub move_ops: OpCounts,
    /// Device operations with no cache (every request to the HDD).
    pub baseline_ops: OpCounts,
    /// IO cost in µs (see [`crate::cost`]).
    pub cost_us: f64,
    /// IO cost with no cache, µs.
    pub baseline_cost_us: f64,
    /// The part of `cost_us` spent moving content (write-backs, migrations).
    pub move_cost_us: f64,
    /// Hits over all block accesses.
    pub hit_ratio: Option<f64>,
    /// Read hits over block reads.
    pub read_hit_ratio: Option<f64>,
    /// Write hits over block writes.
    pub write_hit_ratio: Option<f64>,
    /// `cost_us / baseline_cost_us`.
    pub normalised_cost: Option<f64>,
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

impl TenantResult {
    /// Block accesses.
    pub fn accesses(&self) -> u64 {
        self.read_hits + self.read_misses + self.write_hits + self.write_misses
    }

    /// Hits.
    pub fn hits(&self) -> u64 {
        self.read_hits + self.write_hits
    }

    fn merge(&mut self, o: &TenantResult) {
        self.requests += o.requests;
        self.empty_requests += o.empty_requests;
        self.read_hits += o.read_hits;
        self.read_misses += o.read_misses;
        self.write_hits += o.write_hits;
        self.write_misses += o.write_misses;
        self.admitted_lines += o.admitted_lines;
        self.evicted_lines += o.evicted_lines;
        self.writebacks += o.writebacks;
        self.migrated_lines += o.migrated_lines;
        self.ops.merge(&o.ops);
        self.move_ops.merge(&o.move_ops);
        self.baseline_ops.merge(&o.baseline_ops);
    }

    fn finish(&mut self, cost: &CostModel) {
        self.cost_us = cost.cost_us(&self.ops);
        self.baseline_cost_us = cost.cost_us(&self.baseline_ops);
        self.move_cost_us = cost.cost_us(&self.move_ops);
        self.hit_ratio = ratio(self.hits(), self.accesses());
        self.read_hit_ratio = ratio(self.read_hits, self.read_hits + self.read_misses);
        self.write_hit_ratio = ratio(self.write_hits, self.write_hits + self.write_misses);
        self.normalised_cost =
            (self.baseline_cost_us > 0.0).then(|| self.cost_us / self.baseline_cost_us);
    }
}

/// Results of one policy at one cache size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    /// The policy.
    pub policy: PolicyKind,
    /// The cache size asked for, bytes.
    pub cache_bytes: u64,
    /// Capacity in lines.
    pub capacity_lines: u64,
    /// Line size, bytes.
    pub line_bytes: u64,
    /// Per tenant, in the order of the sources.
    pub tenants: Vec<TenantResult>,
    /// Sum over the tenants.
    pub total: TenantResult,
    /// Zone sizes at the end (GREM, D-GREM).
    pub zones: Option<Zones>,
    /// Per-tenant occupancy at the end.
    pub occupancy: Vec<TenantOccupancy>,
    /// Wall time of the run, ns, when the runner was given a clock.
    pub elapsed_ns: Option<u64>,
}

impl RunResult {
    /// Requests per second of wall time, when timed.
    pub fn requests_per_sec(&self) -> Option<f64> {
        self.elapsed_ns
            .filter(|&n| n > 0)
            .map(|n| self.total.requests as f64 * 1e9 / n as f64)
    }
}

/// Per-tenant replay state.
struct Cursor {
    it: BoxedTrace,
    name: String,
    first: Option<u64>,
    clock: u64,
    /// How trace time becomes simulated time, when stretched.
    scale: Option<Scale>,
    memo: Option<(u32, u32)>,
}

impl Cursor {
    /// Next request with its time made relative, scaled and non-decreasing.
    #[inline]
    fn pull(&mut self) -> Result<Option<Request>, CacheError> {
        let mut r = loop {
            let Some(r) = self.it.next() else {
                return Ok(None);
            };
            let r = r?;
            // A trace longer than the span is cut there.
            if self.scale.is_some_and(|s| r.time_ns > s.cut) {
                continue;
            }
            break r;
        };
        let t = match self.scale {
            None => {
                let first = *self.first.get_or_insert(r.time_ns);
                r.time_ns.saturating_sub(first)
            }
            Some(s) => (r.time_ns.saturating_sub(s.origin) as f64 * s.factor) as u64,
        };
        self.clock = self.clock.max(t);
        r.time_ns = self.clock;
        Ok(Some(r))
    }
}

/// The tenants' streams merged by time.
struct Merge {
    cursors: Vec<Cursor>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    pending: Vec<Option<Request>>,
    spaces: FxHashMap<(u32, u32), u32>,
    /// Tenant of each address space.
    space_tenant: Vec<u32>,
    primed: bool,
}

impl Merge {
    fn open(sources: &[Box<dyn Source>], scales: &[Option<Scale>]) -> Result<Merge, CacheError> {
        if sources.is_empty() {
            return Err(CacheError::Input("no trace given".into()));
        }
        if sources.len() > u32::MAX as usize {
            return Err(CacheError::Input("too many traces".into()));
        }
        let mut cursors = Vec::with_capacity(sources.len());
        for (s, &scale) in sources.iter().zip(scales) {
            cursors.push(Cursor {
                it: s.open()?,
                name: s.name().to_string(),
                first: None,
                clock: 0,
                scale,
                memo: None,
            });
        }
        let n = cursors.len();
        Ok(Merge {
            cursors,
            heap: BinaryHeap::with_capacity(n),
            pending: vec![None; n],
            spaces: FxHashMap::default(),
            space_tenant: Vec::new(),
            primed: false,
        })
    }

    fn space(&mut self, tenant: u32, volume: u32) -> Result<u32, CacheError> {
        let c = &mut self.cursors[tenant as usize];
        if let Some((v, s)) = c.memo {
            if v == volume {
                return Ok(s);
            }
        }
        let next = self.space_tenant.len() as u32;
        let s = *self.spaces.entry((tenant, volume)).or_insert(next);
        if s == next {
            if next > crate::MAX_SPACE {
                return Err(CacheError::Input(format!(
                    "more than {} volumes over all traces",
                    crate::MAX_SPACE as u64 + 1
                )));
            }
            self.space_tenant.push(tenant);
        }
        self.cursors[tenant as usize].memo = Some((volume, s));
        Ok(s)
    }

    /// The next request over all tenants: (tenant, address space, request).
    #[inline]
    fn next(&mut self) -> Result<Option<(u32, u32, Request)>, CacheError> {
        let (tenant, r) = if self.cursors.len() == 1 {
            match self.cursors[0].pull()? {
                Some(r) => (0, r),
                None => return Ok(None),
            }
        } else {
            if !self.primed {
                self.primed = true;
                for t in 0..self.cursors.len() {
                    if let Some(r) = self.cursors[t].pull()? {
                        self.heap.push(Reverse((r.time_ns, t as u32)));
                        self.pending[t] = Some(r);
                    }
                }
            }
            let Some(Reverse((_, t))) = self.heap.pop() else {
                return Ok(None);
            };
            let r = self.pending[t as usize].take().expect("pending request");
            if let Some(n) = self.cursors[t as usize].pull()? {
                self.heap.push(Reverse((n.time_ns, t)));
                self.pending[t as usize] = Some(n);
            }
            (t, r)
        };
        let space = self.space(tenant, r.volume)?;
        Ok(Some((tenant, space, r)))
    }
}

/// Earliest and latest time stamp of each trace, for stretching.
fn time_ranges(sources: &[Box<dyn Source>]) -> Result<Vec<(u64, u64)>, CacheError> {
    sources
        .iter()
        .map(|s| {
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            for r in s.open()? {
                let t = r?.time_ns;
                lo = lo.min(t);
                hi = hi.max(t);
            }
            Ok((lo.min(hi), hi))
        })
        .collect()
}

/// How one trace's time becomes simulated time when stretched: from `origin`,
/// times `factor`; requests after `cut` (trace time) are left out.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scale {
    origin: u64,
    factor: f64,
    cut: u64,
}

type Scales = Vec<Option<Scale>>;

fn scales(sources: &[Box<dyn Source>], cfg: &SimConfig) -> Result<Scales, CacheError> {
    let Some(span) = cfg.span_secs else {
        return Ok(vec![None; sources.len()]);
    };
    let span_ns = span * 1e9;
    sources
        .iter()
        .zip(time_ranges(sources)?)
        .map(|(s, (lo, hi))| {
            let d = (hi - lo) as f64;
            if d >= span_ns {
                // Longer than the span: cut, not compressed.
                return Ok(Some(Scale {
                    origin: lo,
                    factor: 1.0,
                    cut: lo.saturating_add(span_ns as u64),
                }));
            }
            let factor = if d == 0.0 { 0.0 } else { span_ns / d };
            if let Some(m) = cfg.max_stretch {
                if d == 0.0 || factor > m {
                    return Err(CacheError::Config(format!(
                        "trace {} lasts {:.3} s: stretching it to the {span} s span is {}, more than max_stretch {m}x",
                        s.name(),
                        d / 1e9,
                        if d == 0.0 { "unbounded".to_string() } else { format!("{factor:.1}x") }
                    )));
                }
            }
            Ok(Some(Scale {
                origin: lo,
                factor,
                cut: hi,
            }))
        })
        .collect()
}

/// Runs one policy at one cache size over the merged traces.
pub fn run_one(
    sources: &[Box<dyn Source>],
    kind: PolicyKind,
    cache_bytes: u64,
    cfg: &SimConfig,
) -> Result<RunResult, CacheError> {
    cfg.validate()?;
    let sc = scales(sources, cfg)?;
    run_scaled(sources, &sc, kind, cache_bytes, cfg, &())
}

fn run_scaled(
    sources: &[Box<dyn Source>],
    scales: &[Option<Scale>],
    kind: PolicyKind,
    cache_bytes: u64,
    cfg: &SimConfig,
    progress: &dyn Progress,
) -> Result<RunResult, CacheError> {
    let merge = Merge::open(sources, scales)?;
    kind.visit(
        cache_bytes,
        &cfg.policy,
        Replay {
            merge,
            cfg,
            cache_bytes,
            progress,
        },
    )?
}

struct Replay<'a> {
    merge: Merge,
    cfg: &'a SimConfig,
    cache_bytes: u64,
    progress: &'a dyn Progress,
}

impl PolicyVisitor for Replay<'_> {
    type Output = Result<RunResult, CacheError>;
    fn visit<P: CachePolicy + 'static>(self, policy: P) -> Self::Output {
        replay(
            policy,
            self.merge,
            self.cfg,
            self.cache_bytes,
            self.progress,
        )
    }
}

/// Takes the events of one policy call into the ledger, counting them per
/// tenant, and clears them.
#[inline(never)]
fn settle<P: CachePolicy>(
    p: &P,
    ev: &mut Events,
    ledger: &mut Ledger,
    line_blocks: u64,
    space_tenant: &[u32],
    acc: &mut [TenantResult],
) {
    ledger.events(
        ev,
        |k| {
            p.contains(Key::from_raw(
                (k.raw() & !MAX_LINE) | (k.line() * line_blocks),
            ))
        },
        |k, e| {
            let t = &mut acc[space_tenant[k.space() as usize] as usize];
            match e {
                LineEvent::Evicted => t.evicted_lines += 1,
                LineEvent::EvictedDirty => {
                    t.evicted_lines += 1;
                    t.writebacks += 1;
                }
                LineEvent::Migrated => t.migrated_lines += 1,
            }
        },
    );
    ev.clear();
}

fn replay<P: CachePolicy>(
    mut p: P,
    mut merge: Merge,
    cfg: &SimConfig,
    cache_bytes: u64,
    progress: &dyn Progress,
) -> Result<RunResult, CacheError> {
    let line_blocks = p.line_blocks();
    let mut ev = Events::new();
    let mut ledger = Ledger::new(cfg.write_policy, line_blocks);
    let mut acc: Vec<TenantResult> = merge
        .cursors
        .iter()
        .map(|c| TenantResult {
            name: c.name.clone(),
            ..TenantResult::default()
        })
        .collect();
    // Requests are read a few ahead so that the policy can prefetch their
    // metadata (`CachePolicy::prefetch`) while earlier ones are processed.
    const AHEAD: usize = 8;
    let mut ahead: VecDeque<(u32, u32, Request)> = VecDeque::with_capacity(AHEAD + 1);
    let first_block = |space: u32, r: &Request| {
        Key::from_raw((u64::from(space) << LINE_BITS) | ((r.offset / BLOCK_BYTES) & MAX_LINE))
    };
    let mut exhausted = false;
    // Requests replayed since the last progress report.
    let mut unreported = 0u64;
    loop {
        while !exhausted && ahead.len() < AHEAD {
            match merge.next()? {
                Some(x) => {
                    p.prefetch(first_block(x.1, &x.2), 0);
                    ahead.push_back(x);
                }
                None => exhausted = true,
            }
        }
        let Some((tenant, space, r)) = ahead.pop_front() else {
            break;
        };
        unreported += 1;
        if unreported == PROGRESS_BATCH {
            progress.requests(unreported);
            unreported = 0;
        }
        if let Some(x) = ahead.get(AHEAD / 2 - 1) {
            p.prefetch(first_block(x.1, &x.2), 1);
        }
        if let Some(x) = ahead.front() {
            p.prefetch(first_block(x.1, &x.2), 2);
        }
        let t = &mut acc[tenant as usize];
        t.requests += 1;
        if r.len == 0 {
            t.empty_requests += 1;
            continue;
        }
        let end = r.offset.checked_add(r.len).ok_or_else(|| {
            CacheError::Input(format!(
                "{}: request at offset {} of {} bytes runs past 2^64",
                t.name, r.offset, r.len
            ))
        })?;
        let (first, last) = (r.offset / BLOCK_BYTES, (end - 1) / BLOCK_BYTES);
        Key::new(space, last).map_err(|e| CacheError::Input(format!("{}: {e}", t.name)))?;
        let base = u64::from(space) << LINE_BITS;
        let write = r.op == Op::Write;
        let mut tally = RequestTally::at(write, first);
        ledger.start_request();
        for b in first..=last {
            let key = Key::from_raw(base | b);
            let o = p.access(
                Access {
                    time_ns: r.time_ns,
                    tenant,
                    key,
                    write,
                },
                &mut ev,
            );
            if !ev.is_empty() {
                settle(
                    &p,
                    &mut ev,
                    &mut ledger,
                    line_blocks,
                    &merge.space_tenant,
                    &mut acc,
                );
            }
            ledger.access(key, write, o);
            // A fill into free flash, or a hit on a line one filled earlier
            // in this request: read around (the rare path).
            if (o.filled || (o.hit && ledger.reading_around()))
                && ledger.around_block(o, key, &mut tally)
            {
                continue;
            }
            tally.block(o.hit, o.admitted);
        }
        let t = &mut acc[tenant as usize];
        t.admitted_lines += tally.admitted;
        if write {
            t.write_hits += tally.hits;
            t.write_misses += tally.misses;
        } else {
            t.read_hits += tally.hits;
            t.read_misses += tally.misses;
        }
        tally.charge_baseline(&mut t.baseline_ops);
        ledger.charge_request(&tally, &mut t.ops);
        let space_tenant = &merge.space_tenant;
        ledger.drain_moves(|m, run, bytes| {
            let t = &mut acc[space_tenant[run.space as usize] as usize];
            m.charge(bytes, &mut t.ops);
            m.charge(bytes, &mut t.move_ops);
        });
    }
    progress.requests(unreported);
    let mut total = TenantResult {
        name: "total".into(),
        ..TenantResult::default()
    };
    for t in &mut acc {
        t.finish(&cfg.cost);
        total.merge(t);
    }
    total.finish(&cfg.cost);
    debug_assert!(p.len() <= p.capacity());
    let mut occupancy = Vec::new();
    p.occupancy(&mut occupancy);
    Ok(RunResult {
        policy: p.kind(),
        cache_bytes,
        capacity_lines: p.capacity(),
        line_bytes: line_blocks * BLOCK_BYTES,
        tenants: acc,
        total,
        zones: p.zones(),
        occupancy,
        elapsed_ns: None,
    })
}

/// Streams the merged, block-split accesses exactly as a run replays them
/// (same merge, same time handling, same address spaces), calling `f` for
/// each block. For exporting the stream to other simulators.
pub fn for_each_block(
    sources: &[Box<dyn Source>],
    cfg: &SimConfig,
    mut f: impl FnMut(Access),
) -> Result<(), CacheError> {
    cfg.validate()?;
    let sc = scales(sources, cfg)?;
    let mut merge = Merge::open(sources, &sc)?;
    while let Some((tenant, space, r)) = merge.next()? {
        if r.len == 0 {
            continue;
        }
        let name = &merge.cursors[tenant as usize].name;
        let end = r.offset.checked_add(r.len).ok_or_else(|| {
            CacheError::Input(format!(
                "{name}: request at offset {} runs past 2^64",
                r.offset
            ))
        })?;
        let (first, last) = (r.offset / BLOCK_BYTES, (end - 1) / BLOCK_BYTES);
        Key::new(space, last).map_err(|e| CacheError::Input(format!("{name}: {e}")))?;
        for b in first..=last {
            f(Access {
                time_ns: r.time_ns,
                tenant,
                key: Key::new(space, b)?,
                write: r.op == Op::Write,
            });
        }
    }
    Ok(())
}

/// Requests a run replays between two [`Progress::requests`] reports.
pub const PROGRESS_BATCH: u64 = 1 << 16;

/// Where [`run_matrix_with_progress`] reports how far it is, from its worker
/// threads (for a progress bar; `()` reports nowhere).
pub trait Progress: Sync {
    /// `n` more requests were replayed, in batches of [`PROGRESS_BATCH`]
    /// (and the rest at the end of each run).
    fn requests(&self, n: u64);
    /// One `(policy, cache size)` job finished.
    fn job_done(&self);
}

impl Progress for () {
    fn requests(&self, _: u64) {}
    fn job_done(&self) {}
}

/// Runs every `(policy, cache size)` job on up to `threads` threads, each
/// job streaming the traces itself. Results come back in job order, each
/// with its wall time measured on `clock`. Stops at the first error.
pub fn run_matrix(
    sources: &[Box<dyn Source>],
    jobs: &[(PolicyKind, u64)],
    cfg: &SimConfig,
    threads: usize,
    clock: &dyn Clock,
) -> Result<Vec<RunResult>, CacheError> {
    run_matrix_with_progress(sources, jobs, cfg, threads, clock, &())
}

/// [`run_matrix`], reporting replayed requests and finished jobs to
/// `progress` as it goes.
pub fn run_matrix_with_progress(
    sources: &[Box<dyn Source>],
    jobs: &[(PolicyKind, u64)],
    cfg: &SimConfig,
    threads: usize,
    clock: &dyn Clock,
    progress: &dyn Progress,
) -> Result<Vec<RunResult>, CacheError> {
    cfg.validate()?;
    if jobs.is_empty() {
        return Err(CacheError::Input("no policy and cache size to run".into()));
    }
    for &(kind, bytes) in jobs {
        // Fail fast on sizes a policy cannot take, before reading anything.
        kind.build(bytes, &cfg.policy)?;
    }
    let sc = scales(sources, cfg)?;
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<RunResult, CacheError>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    let threads = threads.clamp(1, jobs.len());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= jobs.len() {
                    break;
                }
                let (kind, bytes) = jobs[j];
                let t0 = clock.now();
                let r = run_scaled(sources, &sc, kind, bytes, cfg, progress).map(|mut r| {
                    r.elapsed_ns = Some(clock.now().saturating_sub(t0));
                    r
                });
                progress.job_done();
                let failed = r.is_err();
                results.lock().expect("results lock")[j] = Some(r);
                if failed {
                    next.store(jobs.len(), Ordering::Relaxed);
                }
            });
        }
    });
    let mut out = Vec::with_capacity(jobs.len());
    for r in results
        .into_inner()
        .expect("results lock")
        .into_iter()
        .flatten()
    {
        out.push(r?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::DevOp;
    use clock::VirtualClock;

    fn req(t: u64, vol: u32, op: Op, off: u64, len: u64) -> Request {
        Request {
            time_ns: t,
            volume: vol,
            op,
            offset: off,
            len,
        }
    }

    fn src(name: &str, reqs: Vec<Request>) -> Box<dyn Source> {
        Box::new(MemSource::new(name, reqs))
    }

    #[test]
    fn splits_requests_into_blocks_and_counts_reads_and_writes() {
        let s = vec![src(
            "a",
            vec![
                req(0, 0, Op::Read, 0, 8192),    // 2 misses
                req(1, 0, Op::Read, 4096, 8192), // block 1 hit, block 2 miss
                req(2, 0, Op::Write, 0, 1),      // block 0 hit
                req(3, 1, Op::Write, 0, 4096),   // other volume: miss
                req(4, 0, Op::Read, 0, 0),       // empty
            ],
        )];
        let r = run_one(&s, PolicyKind::Glru, 1 << 20, &SimConfig::default()).unwrap();
        let t = &r.total;
        assert_eq!((t.read_hits, t.read_misses), (1, 3));
        assert_eq!((t.write_hits, t.write_misses), (1, 1));
        assert_eq!((t.requests, t.empty_requests), (5, 1));
        assert_eq!(t.hit_ratio, Some(2.0 / 6.0));
        assert_eq!(t.admitted_lines, 4);
        // Baseline: 4 HDD IOs; with the cache: 2 HDD reads.
        assert_eq!(t.baseline_ops.ops, [0, 0, 2, 2]);
        assert_eq!(t.ops.ops[DevOp::HddRead as usize], 2);
        // Write-through (the default): both writes still go to the disk, and
        // the read with one hit block still reads its missed block from it:
        // every request reaches the disk, so the cost is the baseline's plus
        // the SSD operations.
        assert_eq!(t.ops.ops[DevOp::HddWrite as usize], 2);
        let n = t.normalised_cost.unwrap();
        assert!(n > 1.0 && n < 1.05, "{n}");
    }

    #[test]
    fn dirty_lines_are_written_back_on_eviction() {
        let s = vec![src(
            "a",
            vec![
                req(0, 0, Op::Write, 0, 4096),
                req(1, 0, Op::Read, 4096, 4096), // evicts dirty block 0
                req(2, 0, Op::Read, 8192, 4096), // evicts clean block 1
            ],
        )];
        let wb = SimConfig {
            write_policy: WritePolicy::WriteBack,
            ..SimConfig::default()
        };
        let r = run_one(&s, PolicyKind::Glru, 4096, &wb).unwrap();
        assert_eq!(r.total.evicted_lines, 2);
        assert_eq!(r.total.writebacks, 1);
        assert_eq!(r.total.ops.ops[DevOp::HddWrite as usize], 1);
        // Write-through: the write itself went to the disk, nothing is dirty.
        let r = run_one(&s, PolicyKind::Glru, 4096, &SimConfig::default()).unwrap();
        assert_eq!((r.total.evicted_lines, r.total.writebacks), (2, 0));
        assert_eq!(r.total.ops.ops[DevOp::HddWrite as usize], 1);
        assert_eq!(r.total.ops.ops[DevOp::SsdWrite as usize], 3);
    }

    #[test]
    fn contiguous_write_backs_coalesce_and_scattered_ones_do_not() {
        let wb = SimConfig {
            write_policy: WritePolicy::WriteBack,
            ..SimConfig::default()
        };
        // 16 contiguous dirty blocks, then a 64 KiB read elsewhere that
        // evicts all of them while it is served: one 64 KiB HDD write.
        let s = vec![src(
            "a",
            vec![
                req(0, 0, Op::Write, 0, 64 << 10),
                req(1, 0, Op::Read, 1 << 30, 64 << 10),
            ],
        )];
        let r = run_one(&s, PolicyKind::Glru, 64 << 10, &wb).unwrap();
        let t = &r.total;
        assert_eq!(t.writebacks, 16);
        assert_eq!(t.ops.ops[DevOp::HddWrite as usize], 1);
        assert_eq!(t.ops.bytes[DevOp::HddWrite as usize], 64 << 10);
        // Exactly the no-cache cost of the write, plus SSD traffic: the
        // read misses cost the baseline's read.
        assert_eq!(t.ops.ops[DevOp::HddRead as usize], 1);
        // SSD traffic adds about 5 % here (64 KiB written twice and read once).
        assert!(t.normalised_cost.unwrap() < 1.06, "{t:?}");
        // The same 16 blocks written one by one, 1 MiB apart: 16 write-backs,
        // 16 HDD writes, as the 16 writes cost with no cache.
        let mut reqs: Vec<Request> = (0..16u64)
            .map(|i| req(i, 0, Op::Write, i << 20, 4096))
            .collect();
        reqs.push(req(20, 0, Op::Read, 1 << 30, 64 << 10));
        let r = run_one(&[src("b", reqs)], PolicyKind::Glru, 64 << 10, &wb).unwrap();
        assert_eq!(r.total.ops.ops[DevOp::HddWrite as usize], 16);
    }

    #[test]
    fn misses_of_one_request_cost_one_hdd_io_and_long_runs_are_split() {
        // Blocks 1 and 3 cached; a read of 0..5 misses 0, 2, 4: one HDD read
        // of blocks 0..=4, as a cache reads the gaps rather than seek thrice.
        let s = vec![src(
            "a",
            vec![
                req(0, 0, Op::Read, 4096, 4096),
                req(1, 0, Op::Read, 3 * 4096, 4096),
                req(2, 0, Op::Read, 0, 5 * 4096),
                // 3 MiB + 4 KiB: four IOs with no cache and with one.
                req(3, 0, Op::Read, 1 << 30, (3 << 20) + 4096),
            ],
        )];
        let r = run_one(&s, PolicyKind::Glru, 1 << 20, &SimConfig::default()).unwrap();
        let t = &r.total;
        assert_eq!(t.read_hits, 2);
        assert_eq!(t.ops.ops[DevOp::HddRead as usize], 2 + 1 + 4);
        assert_eq!(
            t.ops.bytes[DevOp::HddRead as usize],
            (2 + 5) * 4096 + (3 << 20) + 4096
        );
        assert_eq!(t.baseline_ops.ops[DevOp::HddRead as usize], 3 + 4);
    }

    #[test]
    fn tenants_are_merged_by_time_from_their_own_start() {
        // Tenant b's trace starts at 1000 s: relative to its start it is
        // interleaved with a's. Both touch "the same" offsets, which are
        // different address spaces.
        let a = vec![req(0, 0, Op::Read, 0, 4096), req(10, 0, Op::Read, 0, 4096)];
        let b = vec![
            req(1_000_000, 0, Op::Read, 0, 4096),
            req(1_000_005, 0, Op::Read, 0, 4096),
        ];
        let s = vec![src("a", a), src("b", b)];
        let r = run_one(&s, PolicyKind::Glru, 4096, &SimConfig::default()).unwrap();
        // Order a0 b0 b5 a10 with one line: a misses twice, b hits once.
        assert_eq!(r.tenants[0].hits(), 0);
        assert_eq!(r.tenants[1].hits(), 1);
        assert_eq!(r.total.requests, 4);
        assert_eq!(r.tenants[0].name, "a");
    }

    #[test]
    fn out_of_order_times_are_held_and_stretching_changes_only_time() {
        // 10 ms apart, every tenth request stamped 50 ms early (held).
        let reqs: Vec<Request> = (0..400u64)
            .map(|i| {
                let t = i * 10_000_000 - if i % 10 == 9 { 50_000_000 } else { 0 };
                req(t, 0, Op::Read, (i % 30) << 20, 4096)
            })
            .collect();
        let s = vec![src("a", reqs)];
        let cfg = SimConfig {
            policy: PolicyConfig {
                epoch_secs: 1.0,
                ..PolicyConfig::default()
            },
            ..SimConfig::default()
        };
        // Natively 4 s: GREM places bins after the first epoch and hits.
        let native = run_one(&s, PolicyKind::Grem, 64 << 20, &cfg).unwrap();
        assert!(native.total.hits() > 0);
        // A 0.5 s span cuts the 4 s trace there (it is not compressed): only
        // the first half second is replayed, within one epoch, so nothing is
        // ever placed.
        let cut = run_one(
            &s,
            PolicyKind::Grem,
            64 << 20,
            &SimConfig {
                span_secs: Some(0.5),
                ..cfg.clone()
            },
        )
        .unwrap();
        assert!(cut.total.accesses() > 0);
        assert!(cut.total.accesses() < native.total.accesses() / 4);
        assert_eq!(cut.total.hits(), 0);
        // LRU does not care about time at all.
        let a = run_one(&s, PolicyKind::Glru, 64 << 20, &cfg).unwrap();
        let b = run_one(
            &s,
            PolicyKind::Glru,
            64 << 20,
            &SimConfig {
                span_secs: Some(5.0),
                ..cfg
            },
        )
        .unwrap();
        assert_eq!(a.total, b.total);
    }

    /// A span stretches a shorter trace (here 10x: a trace of 1 s to 10 s),
    /// and `max_stretch` refuses one that would stretch a trace further,
    /// naming it; a longer trace is cut, never compressed.
    #[test]
    fn stretching_is_capped_and_long_traces_are_cut() {
        let one_s: Vec<Request> = (0..100u64)
            .map(|i| {
                req(
                    i * 10_000_000 + 10_000_000,
                    0,
                    Op::Read,
                    (i % 7) << 12,
                    4096,
                )
            })
            .collect();
        let ten_s: Vec<Request> = (0..100u64)
            .map(|i| req(i * 100_000_000, 0, Op::Read, (i % 7) << 12, 4096))
            .collect();
        let s = vec![src("short", one_s.clone()), src("long", ten_s)];
        let cfg = |span: f64, cap: Option<f64>| SimConfig {
            span_secs: Some(span),
            max_stretch: cap,
            ..SimConfig::default()
        };
        let ok = run_one(&s, PolicyKind::Glru, 1 << 20, &cfg(5.0, Some(10.0))).unwrap();
        // "long" is cut at 5 s: about half of its requests.
        assert!((140..=160).contains(&ok.total.requests), "{:?}", ok.total);
        let e = run_one(&s, PolicyKind::Glru, 1 << 20, &cfg(20.0, Some(10.0)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("short") && e.contains("max_stretch 10x"), "{e}");
        // A trace of one instant cannot be stretched at all.
        let point = vec![src("point", vec![req(7, 0, Op::Read, 0, 4096)])];
        assert!(run_one(&point, PolicyKind::Glru, 1 << 20, &cfg(1.0, Some(10.0))).is_err());
        assert!(SimConfig {
            max_stretch: Some(0.5),
            ..cfg(1.0, None)
        }
        .validate()
        .is_err());
        assert!(SimConfig {
            max_stretch: Some(2.0),
            span_secs: None,
            ..SimConfig::default()
        }
        .validate()
        .is_err());
        // Without a cap any stretch goes.
        run_one(&s[..1], PolicyKind::Glru, 1 << 20, &cfg(1000.0, None)).unwrap();
    }

    /// A span past 2^64 ns once saturated every stretched time, silently.
    #[test]
    fn a_span_that_overflows_nanoseconds_is_refused() {
        let span = |s: f64| SimConfig {
            span_secs: Some(s),
            ..SimConfig::default()
        };
        span(MAX_SPAN_SECS).validate().unwrap();
        assert!((MAX_SPAN_SECS * 1e9) < u64::MAX as f64);
        assert!(((MAX_SPAN_SECS + 1.0) * 1e9) > u64::MAX as f64);
        for s in [1.9e10, 1e300] {
            let e = span(s).validate().unwrap_err().to_string();
            assert!(e.contains("more than 18446744073 s"), "{e}");
        }
        let reqs = vec![
            req(0, 0, Op::Read, 0, 4096),
            req(1_000_000_000, 0, Op::Read, 0, 4096),
        ];
        let e = run_one(&[src("a", reqs)], PolicyKind::Glru, 1 << 20, &span(2e10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("span_secs = 20000000000"), "{e}");
    }

    #[test]
    fn matrix_runs_in_parallel_in_job_order_and_fails_fast() {
        let reqs: Vec<Request> = (0..2000u64)
            .map(|i| req(i * 1_000_000, 0, Op::Read, (i * i % 997) * 4096, 4096))
            .collect();
        let s = vec![src("a", reqs)];
        let jobs = [
            (PolicyKind::Glru, 64 << 10),
            (PolicyKind::Arc, 64 << 10),
            (PolicyKind::Glru, 1 << 20),
            (PolicyKind::Car, 256 << 10),
        ];
        let clock = VirtualClock::new(0);
        let cfg = SimConfig::default();
        let r = run_matrix(&s, &jobs, &cfg, 2, &clock).unwrap();
        assert_eq!(r.len(), 4);
        for (res, &(k, b)) in r.iter().zip(&jobs) {
            assert_eq!((res.policy, res.cache_bytes), (k, b));
            let single = run_one(&s, k, b, &cfg).unwrap();
            assert_eq!(res.total, single.total);
        }
        assert!(r[2].total.hits() >= r[0].total.hits());
        let e = run_matrix(&s, &[(PolicyKind::Grem, 4096)], &cfg, 2, &clock).unwrap_err();
        assert!(e.to_string().contains("too small"), "{e}");
        assert!(run_matrix(&[], &jobs, &cfg, 1, &clock).is_err());
    }

    #[test]
    fn progress_counts_every_request_of_every_job() {
        use std::sync::atomic::AtomicU64;
        #[derive(Default)]
        struct Count {
            requests: AtomicU64,
            jobs: AtomicU64,
        }
        impl Progress for Count {
            fn requests(&self, n: u64) {
                self.requests.fetch_add(n, Ordering::Relaxed);
            }
            fn job_done(&self) {
                self.jobs.fetch_add(1, Ordering::Relaxed);
            }
        }
        let n = PROGRESS_BATCH + 123;
        let reqs: Vec<Request> = (0..n)
            .map(|i| req(i * 1_000, 0, Op::Read, (i % 4099) * 4096, 4096))
            .collect();
        let s = vec![src("a", reqs)];
        let jobs = [(PolicyKind::Glru, 64 << 10), (PolicyKind::Arc, 64 << 10)];
        let c = Count::default();
        let cfg = SimConfig::default();
        let r = run_matrix_with_progress(&s, &jobs, &cfg, 2, &VirtualClock::new(0), &c).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(c.requests.into_inner(), 2 * n);
        assert_eq!(c.jobs.into_inner(), 2);
    }

    #[test]
    fn block_stream_matches_what_a_run_sees() {
        let a = vec![
            req(0, 0, Op::Read, 0, 8192),
            req(5, 3, Op::Write, 4096, 4096),
        ];
        let b = vec![req(2, 0, Op::Read, 0, 4096)]; // at 0 from its own start
        let s = vec![src("a", a), src("b", b)];
        let mut seen = vec![];
        for_each_block(&s, &SimConfig::default(), |x| {
            seen.push((x.time_ns, x.tenant, x.key.space(), x.key.line(), x.write))
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                (0, 0, 0, 0, false),
                (0, 0, 0, 1, false),
                (0, 1, 1, 0, false),
                (5, 0, 2, 1, true)
            ]
        );
    }

    #[test]
    fn huge_offsets_are_reported_not_wrapped() {
        let s = vec![src("big", vec![req(0, 0, Op::Read, u64::MAX - 10, 4096)])];
        let e = run_one(&s, PolicyKind::Glru, 4096, &SimConfig::default()).unwrap_err();
        assert!(e.to_string().contains("big"), "{e}");
        let s = vec![src("far", vec![req(0, 0, Op::Read, 1 << 60, 4096)])];
        let e = run_one(&s, PolicyKind::Glru, 4096, &SimConfig::default()).unwrap_err();
        assert!(
            e.to_string().contains("far") && e.to_string().contains("block number"),
            "{e}"
        );
    }
}
