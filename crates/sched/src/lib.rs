//! Regulator's SLA-enforcing I/O scheduler (APSys'21 §4.2, Algorithm 1).
//!
//! Tenants that share a storage unit each have an SLA curve: the most read
//! throughput they may use at each write throughput. The unit has a curve too, the
//! most it can serve while its read tail latency holds. Time is cut into slices;
//! in each slice a tenant may issue requests while its usage so far is under its
//! curve, and the unit's usage must stay under the unit's curve. A tenant over its
//! curve may *burst* into spare unit capacity when it opted in, when nobody under
//! its curve is being held back, and in weighted round-robin with other bursting
//! tenants. Requests larger than [`SchedConfig::piece_bytes`] (64 KiB, as in the
//! paper) are split so that large requests cannot starve small ones.
//!
//! # How it fits flexssd
//!
//! The scheduler is an admission [`Gate`]: the NBD server asks
//! the tenant's [`TenantGate`] when a request may start, waits asynchronously, and
//! then submits it to the vSSD. A reservation books the request into the first
//! slice with room, so a throttled tenant's requests queue in order, as in the
//! paper's per-tenant waiting queues, without occupying any thread while they
//! wait.
//!
//! # Differences from the paper's pseudo-code, and why
//!
//! * Algorithm 1 checks the curve *before* submitting, so a slice can overshoot by
//!   one request, and forgets everything at the next slice, so a tenant whose
//!   curve allows one write every 25 slices can still write in every slice. Here
//!   usage is carried from slice to slice (it decays by one slice's worth per
//!   slice, measured by the curve's gauge): a token bucket in the curve's two
//!   dimensions, [`SchedConfig::bucket_ms`] deep. The long-run rate is the
//!   curve even when one request exceeds a slice's budget (a 64 KiB piece
//!   against a 2 KiB-per-slice budget, say), and the depth lets a costly write
//!   pass without holding up the reads behind it.
//! * The paper's scheduler runs in a polling thread that drains queues at each
//!   slice; reservations give the same order and rates with no polling thread.
//! * Curve units: throughput in operations of [`SchedConfig::unit_bytes`] (4 KiB)
//!   per second, so a curve reads like the paper's KIOPS figures and a 64 KiB
//!   request counts as 16 operations.
//!
//! No wall clock: time comes from the injected [`Clock`].

mod region;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use blockdev::{Admit, Dir, Gate, IoError, IoResult, Nanos};
use clock::Clock;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sla::Curve;

use region::Region;

/// Scheduler settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedConfig {
    /// Length of a time slice in microseconds. Shorter slices shape traffic more
    /// smoothly; longer ones cost less bookkeeping.
    pub slice_us: u64,
    /// Requests larger than this are split into pieces of at most this size.
    pub piece_bytes: u64,
    /// Size of one operation in the curves' unit (curves are in these per second).
    pub unit_bytes: u64,
    /// Depth of each tenant's bucket, in milliseconds of its curve: a tenant may
    /// run ahead of its curve by this much before it waits. The long-run rate is
    /// the curve either way; depth lets one expensive request (a write, on a
    /// curve that allows few) pass without stalling the tenant's cheap ones.
    pub bucket_ms: u64,
}

impl Default for SchedConfig {
    fn default() -> Self {
        Self {
            slice_us: 1000,
            piece_bytes: 64 * 1024,
            unit_bytes: 4096,
            bucket_ms: 100,
        }
    }
}

/// Errors of the scheduler's control interface.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchedError {
    /// The settings are unusable.
    #[error("invalid scheduler setting: {0}")]
    Config(String),
    /// No tenant of that name.
    #[error("no tenant named {0:?}")]
    UnknownTenant(String),
    /// A tenant of that name is already registered.
    #[error("tenant {0:?} is already registered")]
    DuplicateTenant(String),
    /// A weight of zero would starve the tenant of spare bandwidth forever.
    #[error("tenant {0:?}: weight must be at least 1")]
    ZeroWeight(String),
}

/// A tenant's service agreement with the scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSla {
    /// The tenant's SLA curve (write vs read throughput, in operations of
    /// [`SchedConfig::unit_bytes`] per second). `None`: not limited by a curve of
    /// its own, only by the unit's.
    #[serde(default)]
    pub curve: Option<Curve>,
    /// Share of spare unit bandwidth when bursting (weighted round robin).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Whether the tenant may burst above its curve into spare capacity.
    #[serde(default)]
    pub burst: bool,
}

fn default_weight() -> u32 {
    1
}

impl Default for TenantSla {
    fn default() -> Self {
        Self {
            curve: None,
            weight: 1,
            burst: false,
        }
    }
}

/// Counters of one tenant since it registered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TenantStats {
    /// Pieces admitted within the tenant's curve.
    pub pieces: u64,
    /// Bytes read, all admitted pieces.
    pub read_bytes: u64,
    /// Bytes written, all admitted pieces.
    pub write_bytes: u64,
    /// Bytes admitted above the tenant's curve, as bursts.
    pub burst_bytes: u64,
    /// Pieces that had to wait for a later slice.
    pub delayed: u64,
    /// Total time pieces were held back, in nanoseconds.
    pub delay_ns: u64,
    /// Pieces refused because the curve never allows them.
    pub refused: u64,
    /// Times a bursting tenant was told to ask again (no spare capacity).
    pub retries: u64,
}

/// A tenant's view for reports: its agreement and counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantReport {
    /// Tenant name.
    pub name: String,
    /// Its agreement.
    pub sla: TenantSla,
    /// Its counters.
    pub stats: TenantStats,
}

struct Tenant {
    sla: TenantSla,
    region: Option<Region>,
    /// Slice index of the usage below (the tenant's latest reservation).
    slice: u64,
    /// Usage within its curve in `slice`, bytes, with carried overshoot.
    w: f64,
    r: f64,
    /// Burst bytes in `burst_slice`, for weighted round robin.
    burst_slice: u64,
    burst: f64,
    stats: TenantStats,
    /// The tenant's terms ([`Gate::terms`]): new at every change of its curve
    /// or of the unit's.
    terms: u64,
}

impl Tenant {
    /// Moves the tenant's accounting forward to slice `s`.
    fn advance(&mut self, s: u64) {
        if s > self.slice {
            if let Some(reg) = &self.region {
                (self.w, self.r) = reg.decay(self.w, self.r, s - self.slice);
            } else {
                (self.w, self.r) = (0.0, 0.0);
            }
            self.slice = s;
        }
    }

    /// Under its curve with `depth` slices of bucket: the carried usage is worth
    /// less than `depth` slices of the curve.
    fn under_curve(&self, depth: f64) -> bool {
        self.region
            .as_ref()
            .is_none_or(|g| g.inside(self.w / depth, self.r / depth))
    }

    /// Normalised burst bytes in slice `s` (0 if it has not burst in `s`).
    fn burst_share(&self, s: u64) -> f64 {
        if self.burst_slice == s {
            self.burst / f64::from(self.sla.weight)
        } else {
            0.0
        }
    }
}

/// Unit usage in one slice.
#[derive(Debug, Clone, Copy, Default)]
struct SliceUse {
    w: f64,
    r: f64,
    /// A request under its tenant's curve was pushed out of this slice by the
    /// unit's curve: no bursts may use this slice.
    held_back: bool,
    /// The unit's curve is used up in this slice (set when a booking spilled
    /// into the next one, so rounding can never reopen it).
    full: bool,
}

struct State {
    tenants: BTreeMap<String, Tenant>,
    unit: Option<Region>,
    /// Usage of slices `base..base + slices.len()`.
    base: u64,
    slices: VecDeque<SliceUse>,
}

impl State {
    /// Slice `s`'s usage; a slice already forgotten (`s` before `base`) reads
    /// as the oldest kept one, so no caller can index outside the window.
    fn slice_mut(&mut self, s: u64) -> &mut SliceUse {
        let i = s.saturating_sub(self.base) as usize;
        if i >= self.slices.len() {
            self.slices.resize(i + 1, SliceUse::default());
        }
        &mut self.slices[i]
    }

    /// Forgets slices before `s` (they are in the past).
    fn trim_before(&mut self, s: u64) {
        while self.base < s && !self.slices.is_empty() {
            self.slices.pop_front();
            self.base += 1;
        }
        if self.slices.is_empty() {
            self.base = self.base.max(s);
        }
    }

    /// Moves whatever slice `s` holds beyond the unit's curve into the following
    /// slices, so that a piece larger than a slice's budget fills as many slices
    /// as it is worth and later checks see them as full.
    fn spill(&mut self, s: u64) {
        let Some(unit) = self.unit.clone() else {
            return;
        };
        let mut i = s;
        loop {
            let u = *self.slice_mut(i);
            let g = unit.gauge(u.w, u.r);
            if g <= 1.0 || !g.is_finite() {
                return;
            }
            let f = (g - 1.0) / g;
            let (ew, er) = (u.w * f, u.r * f);
            let cur = self.slice_mut(i);
            cur.w -= ew;
            cur.r -= er;
            cur.full = true;
            let next = self.slice_mut(i + 1);
            next.w += ew;
            next.r += er;
            i += 1;
        }
    }

    /// Whether slice `s` has room under the unit's curve. With a depth of one
    /// slice that is the paper's per-slice check. Deeper, it is a queue bound:
    /// the work the unit has booked from `s` on without a break (slices filled
    /// by spilled pieces, then the first one with room) must be worth less than
    /// `depth` slices, so a costly write occupies the slices it is worth
    /// without shutting cheap reads out of them, and the long-run rate still
    /// follows the curve.
    fn unit_inside(&mut self, s: u64, depth: u64) -> bool {
        let Some(unit) = self.unit.clone() else {
            return true;
        };
        let u = *self.slice_mut(s);
        if depth <= 1 {
            return !u.full && unit.inside(u.w, u.r);
        }
        let d = depth as f64;
        let mut backlog = 0.0;
        let mut i = s;
        loop {
            let x = *self.slice_mut(i);
            if !x.full {
                backlog += unit.gauge(x.w, x.r);
                return backlog < d;
            }
            backlog += 1.0;
            if backlog >= d {
                return false;
            }
            i += 1;
        }
    }
}

/// The scheduler of one storage unit. Cheap to share: all methods take `&self`.
pub struct Scheduler {
    cfg: SchedConfig,
    slice_ns: u64,
    /// Bucket depth in slices (at least 1).
    depth: f64,
    clock: Arc<dyn Clock>,
    /// Nothing to enforce (no curves at all): gates admit at once without locking.
    idle: AtomicBool,
    /// Source of tenants' terms ([`Gate::terms`]), each value used once.
    terms: AtomicU64,
    state: Mutex<State>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("Scheduler")
            .field("cfg", &self.cfg)
            .field("tenants", &st.tenants.keys().collect::<Vec<_>>())
            .field("unit_curve", &st.unit.as_ref().map(|g| g.curve().clone()))
            .finish()
    }
}

/// Most slices a reservation looks ahead before declaring the request
/// impossible; at 1 ms slices this is over an hour of backlog.
const MAX_LOOKAHEAD: u64 = 1 << 22;

impl Scheduler {
    /// A scheduler for a unit whose curve is `unit_curve` (`None`: the unit's
    /// capacity is not limited, only tenants' curves are enforced).
    pub fn new(
        cfg: SchedConfig,
        unit_curve: Option<Curve>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, SchedError> {
        if cfg.slice_us == 0 {
            return Err(SchedError::Config("slice_us must be positive".into()));
        }
        if cfg.piece_bytes < 512 {
            return Err(SchedError::Config(
                "piece_bytes must be at least 512".into(),
            ));
        }
        if cfg.unit_bytes == 0 {
            return Err(SchedError::Config("unit_bytes must be positive".into()));
        }
        let slice_ns = cfg.slice_us * 1000;
        let depth = ((cfg.bucket_ms * 1000) as f64 / cfg.slice_us as f64).max(1.0);
        let s = Self {
            cfg,
            slice_ns,
            depth,
            clock,
            idle: AtomicBool::new(unit_curve.is_none()),
            terms: AtomicU64::new(0),
            state: Mutex::new(State {
                tenants: BTreeMap::new(),
                unit: None,
                base: 0,
                slices: VecDeque::new(),
            }),
        };
        s.state.lock().unit = unit_curve.map(|c| s.region(c));
        Ok(s)
    }

    fn region(&self, c: Curve) -> Region {
        Region::new(c, self.cfg.unit_bytes, self.cfg.slice_us as f64 * 1e-6)
    }

    fn update_idle(&self, st: &State) {
        let idle = st.unit.is_none() && st.tenants.values().all(|t| t.region.is_none());
        self.idle.store(idle, Ordering::Release);
    }

    /// New terms for `t`, whose curve (or the unit's) changed: its waiters
    /// booked under the old ones give their slots back and ask again
    /// ([`Gate::terms`]), from now. Its cursor may stand at a slot booked far
    /// ahead under the old curve, so it comes back to `now_slice` (its carried
    /// usage was decayed to that slot: for the moment after a change, a
    /// little lenient).
    fn new_terms(&self, t: &mut Tenant, now_slice: u64) {
        t.terms = self.terms.fetch_add(1, Ordering::Relaxed) + 1;
        t.slice = t.slice.min(now_slice);
    }

    /// Gives back `tenant`'s booking of `len` bytes for time `at` (see
    /// [`Gate::cancel`]): its carried usage, and the slice's where it is still
    /// booked. Usage a full slice spilled into the next ones stays there, a
    /// little conservatively.
    fn cancel(&self, tenant: &str, dir: Dir, len: u64, at: Nanos) {
        let mut st = self.state.lock();
        let lenf = len as f64;
        if let Some(t) = st.tenants.get_mut(tenant) {
            match dir {
                Dir::Read => t.r = (t.r - lenf).max(0.0),
                Dir::Write => t.w = (t.w - lenf).max(0.0),
            }
        }
        let s = at / self.slice_ns;
        if s >= st.base && ((s - st.base) as usize) < st.slices.len() {
            let u = st.slice_mut(s);
            match dir {
                Dir::Read => u.r = (u.r - lenf).max(0.0),
                Dir::Write => u.w = (u.w - lenf).max(0.0),
            }
        }
    }

    /// The settings.
    pub fn config(&self) -> SchedConfig {
        self.cfg
    }

    /// Replaces the unit's curve (live).
    pub fn set_unit_curve(&self, curve: Option<Curve>) {
        let mut st = self.state.lock();
        st.unit = curve.map(|c| self.region(c));
        let now_slice = self.clock.now() / self.slice_ns;
        for t in st.tenants.values_mut() {
            self.new_terms(t, now_slice);
        }
        self.update_idle(&st);
    }

    /// The unit's curve.
    pub fn unit_curve(&self) -> Option<Curve> {
        self.state.lock().unit.as_ref().map(|g| g.curve().clone())
    }

    /// Registers a tenant and returns its gate.
    pub fn add_tenant(
        self: &Arc<Self>,
        name: &str,
        sla: TenantSla,
    ) -> Result<TenantGate, SchedError> {
        if sla.weight == 0 {
            return Err(SchedError::ZeroWeight(name.into()));
        }
        let mut st = self.state.lock();
        if st.tenants.contains_key(name) {
            return Err(SchedError::DuplicateTenant(name.into()));
        }
        let now_slice = self.clock.now() / self.slice_ns;
        st.tenants.insert(
            name.into(),
            Tenant {
                region: sla.curve.clone().map(|c| self.region(c)),
                sla,
                slice: now_slice,
                w: 0.0,
                r: 0.0,
                burst_slice: 0,
                burst: 0.0,
                stats: TenantStats::default(),
                terms: self.terms.fetch_add(1, Ordering::Relaxed) + 1,
            },
        );
        self.update_idle(&st);
        Ok(TenantGate {
            sched: self.clone(),
            name: name.into(),
        })
    }

    /// Changes a tenant's agreement (live). The usage carried so far is kept;
    /// requests waiting for a slot booked under the old agreement are asked
    /// again by their callers ([`Gate::terms`]).
    pub fn set_tenant(&self, name: &str, sla: TenantSla) -> Result<(), SchedError> {
        if sla.weight == 0 {
            return Err(SchedError::ZeroWeight(name.into()));
        }
        let region = sla.curve.clone().map(|c| self.region(c));
        let mut st = self.state.lock();
        let t = st
            .tenants
            .get_mut(name)
            .ok_or_else(|| SchedError::UnknownTenant(name.into()))?;
        t.sla = sla;
        t.region = region;
        self.new_terms(t, self.clock.now() / self.slice_ns);
        self.update_idle(&st);
        Ok(())
    }

    /// Removes a tenant; its gate refuses further requests.
    pub fn remove_tenant(&self, name: &str) -> Result<(), SchedError> {
        let mut st = self.state.lock();
        st.tenants
            .remove(name)
            .ok_or_else(|| SchedError::UnknownTenant(name.into()))?;
        self.update_idle(&st);
        Ok(())
    }

    /// Every tenant's agreement and counters, by name.
    pub fn report(&self) -> Vec<TenantReport> {
        let st = self.state.lock();
        st.tenants
            .iter()
            .map(|(n, t)| TenantReport {
                name: n.clone(),
                sla: t.sla.clone(),
                stats: t.stats.clone(),
            })
            .collect()
    }

    /// One tenant's agreement and counters.
    pub fn tenant(&self, name: &str) -> Result<TenantReport, SchedError> {
        let st = self.state.lock();
        let t = st
            .tenants
            .get(name)
            .ok_or_else(|| SchedError::UnknownTenant(name.into()))?;
        Ok(TenantReport {
            name: name.into(),
            sla: t.sla.clone(),
            stats: t.stats.clone(),
        })
    }

    /// Books one piece of `len` bytes (at most `piece_bytes`) for `tenant`.
    ///
    /// Traffic within the tenant's curve is booked into the first slice (from the
    /// tenant's previous booking on) where the tenant is under its curve and the
    /// unit under its own: requests queue in order, as in the paper's per-tenant
    /// queues. Traffic above the curve of a tenant that may burst is only booked
    /// into the *current* slice, when it has spare unit capacity that no
    /// request within its curve was denied, and in weighted turn with the other
    /// bursting tenants; otherwise the tenant is told to ask again next slice
    /// (by then it may be back under its curve). Bursts thus never take
    /// capacity ahead of traffic that the curves guarantee.
    fn reserve(&self, tenant: &str, dir: Dir, len: u64) -> IoResult<Admit> {
        let now = self.clock.now();
        if self.idle.load(Ordering::Acquire) {
            // Fast path: nothing to enforce. Counters are still kept, so that
            // reports stay true; the lock is uncontended in this case.
            let mut st = self.state.lock();
            if let Some(t) = st.tenants.get_mut(tenant) {
                t.stats.pieces += 1;
                match dir {
                    Dir::Read => t.stats.read_bytes += len,
                    Dir::Write => t.stats.write_bytes += len,
                }
                return Ok(Admit::At(now));
            }
            return Err(IoError::Gone(format!(
                "tenant {tenant:?} is not registered"
            )));
        }
        let write = dir == Dir::Write;
        let lenf = len as f64;
        let mut guard = self.state.lock();
        // Read the clock again under the lock: another thread may have moved
        // the slice window on since `now` was read, and slices before it are
        // gone.
        let now = self.clock.now().max(now);
        let now_slice = (now / self.slice_ns).max(guard.base);
        let st = &mut *guard;
        st.trim_before(now_slice);
        let Some(t) = st.tenants.get_mut(tenant) else {
            return Err(IoError::Gone(format!(
                "tenant {tenant:?} is not registered"
            )));
        };
        let what = if write { "writes" } else { "reads" };
        if let Some(reg) = &t.region {
            if !reg.allows(write) && !t.sla.burst {
                t.stats.refused += 1;
                return Err(IoError::NotPermitted(format!(
                    "the SLA curve of tenant {tenant:?} allows no {what}"
                )));
            }
        }
        if let Some(unit) = &st.unit {
            if !unit.allows(write) {
                t.stats.refused += 1;
                return Err(IoError::NotPermitted(format!(
                    "the storage unit's curve allows no {what}"
                )));
            }
        }
        let mut s = t.slice.max(now_slice);
        for _ in 0..MAX_LOOKAHEAD {
            let t = st.tenants.get_mut(tenant).expect("checked above");
            t.advance(s);
            let under = t.under_curve(self.depth);
            let may_burst = t.sla.burst;
            let unit_ok = st.unit_inside(s, self.depth as u64);
            if under {
                if unit_ok {
                    let t = st.tenants.get_mut(tenant).expect("checked above");
                    if write {
                        t.w += lenf;
                    } else {
                        t.r += lenf;
                    }
                    return Ok(Admit::At(self.book(st, tenant, s, dir, len, now, false)));
                }
                st.slice_mut(s).held_back = true;
                s += 1;
                continue;
            }
            if may_burst {
                if s == now_slice
                    && unit_ok
                    && !st.slice_mut(s).held_back
                    && self.my_turn(st, tenant, s)
                {
                    let t = st.tenants.get_mut(tenant).expect("checked above");
                    if t.burst_slice != s {
                        t.burst_slice = s;
                        t.burst = 0.0;
                    }
                    t.burst += lenf;
                    return Ok(Admit::At(self.book(st, tenant, s, dir, len, now, true)));
                }
                let t = st.tenants.get_mut(tenant).expect("checked above");
                t.stats.retries += 1;
                return Ok(Admit::Retry(
                    now.max((s.max(now_slice) + 1) * self.slice_ns),
                ));
            }
            // Over its curve and no bursting: jump to the first slice where the
            // tenant is back under it (its usage pays off one slice's worth per
            // slice, and it may carry up to `depth` slices' worth).
            let t = &st.tenants[tenant];
            let skip = match &t.region {
                Some(reg) => ((reg.gauge(t.w, t.r) - self.depth).floor() as u64 + 1).max(1),
                None => 1,
            };
            s += skip;
        }
        Err(IoError::Media(format!(
            "tenant {tenant:?}: no slot within {MAX_LOOKAHEAD} slices"
        )))
    }

    /// Weighted round robin over spare capacity: `tenant` may take the next
    /// piece of slice `s` if its bursts so far in `s`, divided by its weight, are
    /// not ahead of any other tenant's that has been bursting (in `s` or the
    /// slice before).
    fn my_turn(&self, st: &State, tenant: &str, s: u64) -> bool {
        let mine = st.tenants[tenant].burst_share(s);
        st.tenants
            .iter()
            .filter(|(n, o)| n.as_str() != tenant && o.sla.burst && o.burst_slice + 1 >= s)
            .all(|(_, o)| mine <= o.burst_share(s))
    }

    /// Records a booking of `len` bytes in slice `s` and returns its start time.
    #[allow(clippy::too_many_arguments)]
    fn book(
        &self,
        st: &mut State,
        tenant: &str,
        s: u64,
        dir: Dir,
        len: u64,
        now: Nanos,
        burst: bool,
    ) -> Nanos {
        let u = st.slice_mut(s);
        match dir {
            Dir::Read => u.r += len as f64,
            Dir::Write => u.w += len as f64,
        }
        st.spill(s);
        let start = now.max(s * self.slice_ns);
        let t = st.tenants.get_mut(tenant).expect("booked tenant exists");
        t.stats.pieces += 1;
        match dir {
            Dir::Read => t.stats.read_bytes += len,
            Dir::Write => t.stats.write_bytes += len,
        }
        if burst {
            t.stats.burst_bytes += len;
        }
        if start > now {
            t.stats.delayed += 1;
            t.stats.delay_ns += start - now;
        }
        start
    }
}

/// One tenant's handle on a [`Scheduler`]: its admission [`Gate`].
#[derive(Clone)]
pub struct TenantGate {
    sched: Arc<Scheduler>,
    name: String,
}

impl std::fmt::Debug for TenantGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantGate")
            .field("tenant", &self.name)
            .finish()
    }
}

impl TenantGate {
    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The scheduler this gate belongs to.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.sched
    }
}

impl Gate for TenantGate {
    fn reserve(&self, dir: Dir, len: u64) -> IoResult<Admit> {
        self.sched.reserve(&self.name, dir, len)
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.sched.clock
    }

    fn max_piece(&self) -> u64 {
        self.sched.cfg.piece_bytes
    }

    /// This tenant's terms; a removed tenant's are `u64::MAX`, so that its
    /// waiters ask again and are refused.
    fn terms(&self) -> u64 {
        let st = self.sched.state.lock();
        st.tenants.get(&self.name).map_or(u64::MAX, |t| t.terms)
    }

    fn cancel(&self, dir: Dir, len: u64, at: Nanos) {
        self.sched.cancel(&self.name, dir, len, at);
    }
}

#[cfg(test)]
mod tests;
