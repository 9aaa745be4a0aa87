//! The fleet scheduler: placement, leadership and host loss.
//!
//! Every scheduler process keeps a view of the fleet (live hosts and device
//! allocations) from watches on etcd, and campaigns for the lease-held
//! leader key. Only the active one places and deletes; the others answer
//! reads and say who is active ([`ClusterError::NotLeader`]).
//!
//! A placement is decided on the view and committed in a transaction that
//! compares the revision of the chosen device's allocation, the absence of
//! the name and the presence of the host, and writes the allocation, the name
//! index, the host's desired key and an event together. Requests that arrive
//! together are planned one after another and committed in one transaction
//! (group commit, up to [`BATCH`]), which is what lets one scheduler book
//! thousands of vSSDs a second against etcd's disk-bound commit latency. If anything changed meanwhile (another
//! scheduler that still thinks it leads, a host that went away), the
//! transaction fails, the device is re-read, and the decision is made again.
//! No lock is held across an etcd call: the view is a map behind a mutex
//! taken only to read or update it, and this scheduler's own changes do not
//! race each other because one task, the committer, makes them all in the
//! order they were asked for.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, WatchOptions,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sla::catalog::Catalog;
use sla::placement::{Metric, Placer, PlacerConfig, TenantId};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::etcd::{self, EtcdConfig};
use crate::keys::{
    decode, encode, AllocMode, DeviceAlloc, FleetEvent, FleetHarvest, FleetVssd, HostRecord, Keys,
    LeaderRecord, ObservedState, ObservedVssd, UnitTenant,
};
use crate::{ClusterError, WallMs};

mod harvest;
pub use harvest::FleetHarvestStatus;

/// A scheduler's settings.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// How to reach etcd.
    pub etcd: EtcdConfig,
    /// Key prefix.
    pub prefix: String,
    /// This scheduler's id.
    pub id: String,
    /// Its API URL (what followers point clients to).
    pub api: String,
    /// Leader lease TTL.
    pub ttl: Duration,
    /// Unit types for placement by SLA curve.
    pub catalog: Catalog,
    /// Best-fit metric.
    pub metric: Metric,
    /// Events kept in etcd; older ones are deleted (checked every 30 s).
    pub keep_events: usize,
}

/// `POST /v1/vssds` on the fleet: what to create.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// Name, unique in the fleet (also the NBD export name).
    pub name: String,
    /// Whole channels (placement by channel count). Default 1 without `sla`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<u32>,
    /// SLA curve and percentile (placement by curve on a shared unit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<sla::placement::TenantSla>,
    /// Exported size in bytes (required with `sla`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// Owning tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Only this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Regular, or harvest (it may then ask for harvest volumes).
    #[serde(default, skip_serializing_if = "crate::keys::is_regular")]
    pub role: control::TenantRole,
}

/// A fleet vSSD with what its host reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VssdStatus {
    /// Placement.
    #[serde(flatten)]
    pub vssd: FleetVssd,
    /// `ready`, `pending` (the host has not reported yet), `error`, or
    /// `unavailable` (its host is lost).
    pub state: String,
    /// The host's error, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where clients attach it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Exported size, once ready.
    #[serde(default)]
    pub capacity_bytes: u64,
}

/// A host as `cluster hosts` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostStatus {
    /// Host id.
    pub id: String,
    /// `alive` (registered) or `lost` (has bookings, no registration).
    pub state: String,
    /// Its registration, when alive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<HostRecord>,
    /// vSSDs booked on it.
    pub vssds: usize,
    /// Channels booked on it (units count all their channels).
    pub booked_channels: u32,
    /// Channels on its devices.
    pub total_channels: u32,
}

/// A gSSD of the fleet-wide pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetGssd {
    /// The host lending it.
    pub host: String,
    /// That host's NBD address.
    pub nbd: String,
    /// Its <capacity, bandwidth, expiry>.
    #[serde(flatten)]
    pub gssd: crate::keys::GssdSummary,
}

/// `cluster status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetStatus {
    /// This scheduler.
    pub scheduler: String,
    /// Whether it is the active one.
    pub active: bool,
    /// The active one, if any.
    pub leader: Option<LeaderRecord>,
    /// Hosts registered.
    pub hosts_alive: usize,
    /// Hosts with bookings but no registration.
    pub hosts_lost: usize,
    /// vSSDs booked.
    pub vssds: usize,
    /// SLA units in use.
    pub units: usize,
    /// Channels booked / on live hosts.
    pub channels_booked: u32,
    /// Channels on live hosts.
    pub channels_total: u32,
}

#[derive(Debug, Default)]
struct View {
    hosts: BTreeMap<String, (HostRecord, i64)>,
    allocs: BTreeMap<(String, String), (DeviceAlloc, i64)>,
    /// Devices whose allocation does not parse: never placed on (their
    /// bookings are unknown) until someone fixes the value.
    bad: BTreeSet<(String, String)>,
}

impl View {
    fn usable(&self, host: &str, device: &str) -> bool {
        self.bad.is_empty() || !self.bad.contains(&(host.to_string(), device.to_string()))
    }
}

impl View {
    fn apply_host(&mut self, key: &[u8], value: &[u8], create_rev: i64) -> Option<String> {
        match decode::<HostRecord>(key, value) {
            Ok(h) => {
                let new = self.hosts.get(&h.id).is_none_or(|(_, r)| *r != create_rev);
                let id = h.id.clone();
                self.hosts.insert(h.id.clone(), (h, create_rev));
                new.then_some(id)
            }
            Err(e) => {
                warn!(error = %e, "refusing a host record");
                None
            }
        }
    }

    fn apply_alloc(&mut self, keys: &Keys, key: &[u8], value: Option<(&[u8], i64)>) {
        self.apply_alloc_at(keys, key, value, 0);
    }

    /// `delete_rev`: the revision of a delete (0: unknown, always applies).
    fn apply_alloc_at(
        &mut self,
        keys: &Keys,
        key: &[u8],
        value: Option<(&[u8], i64)>,
        delete_rev: i64,
    ) {
        let k = String::from_utf8_lossy(key);
        let Some(rest) = k.strip_prefix(&keys.allocs()) else {
            return;
        };
        let Some((host, dev)) = rest.split_once('/') else {
            warn!(key = %k, "refusing an allocation key that names no device");
            return;
        };
        let id = (host.to_string(), dev.to_string());
        // Never go back: a watch event can arrive after this scheduler has
        // already recorded its own later write (or its tentative plan at the
        // same revision), and must not undo it.
        let newer = |rev: i64| self.allocs.get(&id).is_some_and(|(_, r)| *r >= rev);
        match value {
            None if delete_rev > 0 && newer(delete_rev) => {}
            None => {
                self.bad.remove(&id);
                self.allocs.remove(&id);
            }
            Some((_, rev)) if newer(rev) => {}
            Some((v, rev)) => match decode::<DeviceAlloc>(key, v) {
                Ok(a) => {
                    self.bad.remove(&id);
                    self.allocs.insert(id, (a, rev));
                }
                Err(e) => {
                    warn!(error = %e, "refusing an allocation; the device is not placed on until it is fixed");
                    self.allocs.remove(&id);
                    self.bad.insert(id);
                }
            },
        }
    }
}

/// One scheduler process.
pub struct Scheduler {
    cfg: SchedulerConfig,
    keys: Keys,
    client: Client,
    view: Mutex<View>,
    leader: Mutex<Option<LeaderRecord>>,
    active: AtomicBool,
    queue: tokio::sync::mpsc::UnboundedSender<Job>,
    hqueue: tokio::sync::mpsc::UnboundedSender<harvest::HarvestJob>,
    wall: WallMs,
    seq: AtomicU64,
}

/// A placer rebuilt from the view: the placer, its unit ids → (host,
/// device), and the next free tenant id.
type RebuiltPlacer = (Placer, BTreeMap<u64, (String, String)>, u64);

/// Most placements committed in one transaction: 4 writes and up to 3
/// compares each, within etcd's default limit of 128 operations per
/// transaction.
const BATCH: usize = 24;

/// A placement request waiting for the committer.
struct Pending {
    req: CreateRequest,
    tx: tokio::sync::oneshot::Sender<Result<VssdStatus, ClusterError>>,
}

/// What the committer does, in the order asked: it is the one task that
/// changes bookings, so they never race each other and need no lock.
enum Job {
    Create(Pending),
    Delete {
        name: String,
        tx: tokio::sync::oneshot::Sender<Result<(), ClusterError>>,
    },
}

/// What one placement decided, before it is committed.
struct Plan {
    vssd: FleetVssd,
    alloc: DeviceAlloc,
    expect_rev: i64,
}

fn blocks_for(capacity: u64, row_bytes: u64) -> u32 {
    // The FTL exports 7/8 of the raw flash by default: ask for enough raw.
    let raw = capacity.saturating_mul(8).div_ceil(7);
    (raw.div_ceil(row_bytes.max(1)) as u32).max(2)
}

impl Scheduler {
    /// Connects (retrying `attempts` times, 0: for ever), loads the fleet's
    /// state and starts the watches and the campaign.
    pub async fn start(
        cfg: SchedulerConfig,
        wall: WallMs,
        stop: watch::Receiver<bool>,
        attempts: u32,
    ) -> Result<Arc<Scheduler>, ClusterError> {
        let client = etcd::connect_retrying(&cfg.etcd, attempts).await?;
        let (queue, rx) = tokio::sync::mpsc::unbounded_channel();
        let (hqueue, hrx) = tokio::sync::mpsc::unbounded_channel();
        let s = Arc::new(Scheduler {
            keys: Keys::new(&cfg.prefix),
            cfg,
            client,
            view: Mutex::new(View::default()),
            leader: Mutex::new(None),
            active: AtomicBool::new(false),
            queue,
            hqueue,
            wall,
            seq: AtomicU64::new(0),
        });
        let rev = s.load().await?;
        tokio::spawn(s.clone().watch_loop(rev, stop.clone()));
        tokio::spawn(s.clone().campaign_loop(stop));
        tokio::spawn(s.clone().committer(rx));
        tokio::spawn(s.clone().harvest_worker(hrx));
        Ok(s)
    }

    /// Whether this scheduler is the active one.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }

    /// The key layout.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The active scheduler, as last seen.
    pub fn leader(&self) -> Option<LeaderRecord> {
        self.leader.lock().clone()
    }

    fn not_leader(&self) -> ClusterError {
        ClusterError::NotLeader {
            leader: self
                .leader()
                .filter(|l| l.id != self.cfg.id)
                .map(|l| l.api)
                .unwrap_or_else(|| "none".into()),
        }
    }

    async fn load(&self) -> Result<i64, ClusterError> {
        let mut c = self.client.clone();
        let (hosts, rev) = etcd::get_prefix_at(&mut c, &self.keys.hosts(), 0).await?;
        let (allocs, _) = etcd::get_prefix_at(&mut c, &self.keys.allocs(), rev).await?;
        let mut v = View::default();
        for kv in &hosts {
            v.apply_host(kv.key(), kv.value(), kv.create_revision());
        }
        for kv in &allocs {
            v.apply_alloc(&self.keys, kv.key(), Some((kv.value(), kv.mod_revision())));
        }
        *self.view.lock() = v;
        Ok(rev)
    }

    async fn watch_loop(self: Arc<Self>, mut rev: i64, mut stop: watch::Receiver<bool>) {
        loop {
            match self.watch_once(rev, &mut stop).await {
                Ok(()) => return,
                Err(e) => warn!(error = %e, "the fleet watch ended; reloading in 1 s"),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => return,
            }
            // Missed changes: read everything again (hosts that went away
            // meanwhile are lost; the events say so when we lead).
            let before: BTreeSet<String> = self.view.lock().hosts.keys().cloned().collect();
            match self.load().await {
                Ok(r) => {
                    rev = r;
                    let after: BTreeSet<String> = self.view.lock().hosts.keys().cloned().collect();
                    for lost in before.difference(&after) {
                        self.host_lost(lost).await;
                    }
                }
                Err(e) => warn!(error = %e, "cannot reload the fleet"),
            }
        }
    }

    async fn watch_once(
        &self,
        rev: i64,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), ClusterError> {
        let mut c = self.client.clone();
        let mut hosts = c
            .watch(
                self.keys.hosts(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(rev + 1),
                ),
            )
            .await?;
        let mut allocs = c
            .watch(
                self.keys.allocs(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(rev + 1),
                ),
            )
            .await?;
        loop {
            tokio::select! {
                _ = stop.changed() => return Ok(()),
                m = hosts.message() => {
                    let Some(resp) = m? else { return Err(ClusterError::Conflict("host watch closed".into())) };
                    for ev in resp.events() {
                        let Some(kv) = ev.kv() else { continue };
                        let key = String::from_utf8_lossy(kv.key()).into_owned();
                        match ev.event_type() {
                            EventType::Put => {
                                let joined = self.view.lock().apply_host(kv.key(), kv.value(), kv.create_revision());
                                if let Some(h) = joined {
                                    info!(host = %h, "host joined the fleet");
                                    self.event("host-joined", Some(&h), format!("host {h} registered")).await;
                                }
                            }
                            EventType::Delete => {
                                let id = Keys::last(&key).to_string();
                                if self.view.lock().hosts.remove(&id).is_some() {
                                    self.host_lost(&id).await;
                                }
                            }
                        }
                    }
                }
                m = allocs.message() => {
                    let Some(resp) = m? else { return Err(ClusterError::Conflict("allocation watch closed".into())) };
                    let mut v = self.view.lock();
                    for ev in resp.events() {
                        let Some(kv) = ev.kv() else { continue };
                        match ev.event_type() {
                            EventType::Put => v.apply_alloc(&self.keys, kv.key(), Some((kv.value(), kv.mod_revision()))),
                            EventType::Delete => v.apply_alloc_at(&self.keys, kv.key(), None, kv.mod_revision()),
                        }
                    }
                }
            }
        }
    }

    async fn host_lost(&self, host: &str) {
        let names: Vec<String> = {
            let v = self.view.lock();
            v.allocs
                .iter()
                .filter(|((h, _), _)| h == host)
                .flat_map(|(_, (a, _))| {
                    a.channels
                        .values()
                        .cloned()
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .chain(a.tenants.iter().map(|t| t.name.clone()))
                })
                .collect()
        };
        warn!(host, vssds = names.len(), "host lost (its lease expired)");
        self.event(
            "host-lost",
            Some(host),
            format!(
                "host {host} lost its registration; unavailable until it returns: {}",
                if names.is_empty() {
                    "no vSSDs".to_string()
                } else {
                    names.join(", ")
                }
            ),
        )
        .await;
        self.evict_harvests_of(host).await;
    }

    /// Appends an event (only the active scheduler writes events).
    async fn event(&self, kind: &str, host: Option<&str>, detail: String) {
        if !self.is_active() {
            return;
        }
        let ev = self.make_event(kind, host, detail);
        let mut c = self.client.clone();
        if let Err(e) = c.put(self.event_key(), encode(&ev), None).await {
            warn!(error = %e, "cannot write a fleet event");
        }
    }

    fn make_event(&self, kind: &str, host: Option<&str>, detail: String) -> FleetEvent {
        FleetEvent {
            seq: 0,
            at_ms: (self.wall)(),
            kind: kind.into(),
            host: host.map(str::to_string),
            detail,
        }
    }

    fn event_key(&self) -> String {
        self.keys.event(
            (self.wall)(),
            &self.cfg.id,
            self.seq.fetch_add(1, Ordering::Relaxed),
        )
    }

    async fn campaign_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            match self.campaign(&mut stop).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => warn!(error = %e, "scheduler election: retrying in 1 s"),
            }
            self.active.store(false, Ordering::SeqCst);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// One campaign: lead until the lease is lost, or follow until the
    /// leader key goes. `Ok(true)`: stop was asked for.
    async fn campaign(&self, stop: &mut watch::Receiver<bool>) -> Result<bool, ClusterError> {
        let mut c = self.client.clone();
        let key = self.keys.leader();
        let me = LeaderRecord {
            id: self.cfg.id.clone(),
            api: self.cfg.api.clone(),
        };
        let ttl = self.cfg.ttl.as_secs().max(1) as i64;
        let lease = c.lease_grant(ttl, None).await?.id();
        let txn = Txn::new()
            .when(vec![Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then(vec![TxnOp::put(
                key.clone(),
                encode(&me),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else(vec![TxnOp::get(key.clone(), None)]);
        let resp = c.txn(txn).await?;
        if resp.succeeded() {
            info!(id = %me.id, "this scheduler is now the active one");
            *self.leader.lock() = Some(me.clone());
            self.active.store(true, Ordering::SeqCst);
            // Anything that changed while nobody led: re-read, and report
            // hosts that hold bookings but are not registered.
            if let Ok(_rev) = self.load().await {
                let lost: Vec<String> = {
                    let v = self.view.lock();
                    v.allocs
                        .keys()
                        .map(|(h, _)| h.clone())
                        .filter(|h| !v.hosts.contains_key(h))
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect()
                };
                self.event(
                    "scheduler-active",
                    None,
                    format!("scheduler {} is active", me.id),
                )
                .await;
                for h in lost {
                    self.host_lost(&h).await;
                }
            }
            let (mut keeper, mut acks) = c.lease_keep_alive(lease).await?;
            let mut tick = tokio::time::interval(self.cfg.ttl / 3);
            let mut trim_every = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    _ = stop.changed() => {
                        self.active.store(false, Ordering::SeqCst);
                        let _ = c.lease_revoke(lease).await;
                        return Ok(true);
                    }
                    _ = tick.tick() => {
                        if trim_every.elapsed() >= Duration::from_secs(30) {
                            trim_every = tokio::time::Instant::now();
                            if let Err(e) = self.trim_events().await {
                                warn!(error = %e, "cannot trim the event log");
                            }
                        }
                        keeper.keep_alive().await?;
                        match acks.message().await? {
                            Some(a) if a.ttl() > 0 => {}
                            _ => {
                                self.active.store(false, Ordering::SeqCst);
                                return Err(ClusterError::Conflict("the leader lease expired".into()));
                            }
                        }
                    }
                }
            }
        }
        let _ = c.lease_revoke(lease).await;
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        for r in resp.op_responses() {
            if let etcd_client::TxnOpResponse::Get(g) = r {
                if let Some(kv) = g.kvs().first() {
                    match decode::<LeaderRecord>(kv.key(), kv.value()) {
                        Ok(l) => *self.leader.lock() = Some(l),
                        Err(e) => warn!(error = %e, "the leader key holds no leader record"),
                    }
                }
            }
        }
        // Follow: wait for the leader key to go.
        let mut w = c
            .watch(key, Some(WatchOptions::new().with_start_revision(rev + 1)))
            .await?;
        loop {
            tokio::select! {
                _ = stop.changed() => return Ok(true),
                m = w.message() => {
                    let Some(resp) = m? else { return Ok(false) };
                    if resp.events().iter().any(|e| e.event_type() == EventType::Delete) {
                        *self.leader.lock() = None;
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// Places and books a new vSSD (active scheduler only).
    pub async fn create(&self, req: &CreateRequest) -> Result<VssdStatus, ClusterError> {
        self.await_leader().await;
        if !self.is_active() {
            return Err(self.not_leader());
        }
        validate(req)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.queue
            .send(Job::Create(Pending {
                req: req.clone(),
                tx,
            }))
            .map_err(|_| ClusterError::Conflict("the scheduler is stopping".into()))?;
        rx.await
            .map_err(|_| ClusterError::Conflict("the scheduler is stopping".into()))?
    }

    /// Group commit: takes what is queued (up to [`BATCH`] requests), plans
    /// them one after the other on the view, and books them all in one
    /// transaction. If that fails (something changed under the batch), each
    /// is retried on its own, so one conflict costs a batch its speed, never
    /// its correctness.
    async fn committer(self: Arc<Self>, mut rx: tokio::sync::mpsc::UnboundedReceiver<Job>) {
        let mut carry: Vec<Pending> = Vec::new();
        let mut next: Option<Job> = None;
        loop {
            let mut batch = std::mem::take(&mut carry);
            // Creates queued together form a batch; a delete ends it and
            // runs after it, so jobs take effect in the order they came.
            let mut delete = None;
            loop {
                let job = match next.take() {
                    Some(j) => j,
                    None if batch.is_empty() => match rx.recv().await {
                        Some(j) => j,
                        None => return,
                    },
                    None => match rx.try_recv() {
                        Ok(j) => j,
                        Err(_) => break,
                    },
                };
                match job {
                    Job::Create(p) if batch.len() < BATCH => batch.push(p),
                    j @ Job::Create(_) => {
                        next = Some(j);
                        break;
                    }
                    Job::Delete { name, tx } => {
                        delete = Some((name, tx));
                        break;
                    }
                }
            }
            // A name twice in one batch waits for the next one.
            let mut names = BTreeSet::new();
            let (now, later): (Vec<Pending>, Vec<Pending>) = batch
                .into_iter()
                .partition(|p| names.insert(p.req.name.clone()));
            carry = later;
            if !now.is_empty() {
                self.commit_batch(now).await;
            }
            if let Some((name, tx)) = delete {
                let _ = tx.send(self.delete_now(&name).await);
            }
        }
    }

    async fn commit_batch(&self, batch: Vec<Pending>) {
        if !self.is_active() {
            for p in batch {
                let _ = p.tx.send(Err(self.not_leader()));
            }
            return;
        }
        // Plan on the view, leaving each plan's allocation in it (with the
        // revision the transaction must still find) for the next plan.
        let mut planned: Vec<(Pending, Plan)> = Vec::new();
        let mut touched: BTreeMap<(String, String), Option<(DeviceAlloc, i64)>> = BTreeMap::new();
        // Each device's allocation after the last plan on it: what is written
        // (never re-read from the view, which the watch may update meanwhile).
        let mut finals: BTreeMap<(String, String), DeviceAlloc> = BTreeMap::new();
        {
            let mut v = self.view.lock();
            for p in batch {
                match self.plan(&v, &p.req) {
                    Err(e) => {
                        let _ = p.tx.send(Err(e));
                    }
                    Ok(plan) => {
                        let key = (plan.vssd.host.clone(), plan.vssd.device.clone());
                        let before = v.allocs.get(&key).cloned();
                        touched.entry(key.clone()).or_insert(before);
                        finals.insert(key.clone(), plan.alloc.clone());
                        v.allocs.insert(key, (plan.alloc.clone(), plan.expect_rev));
                        planned.push((p, plan));
                    }
                }
            }
        }
        if planned.is_empty() {
            return;
        }
        let mut cmps = Vec::new();
        let mut ops = Vec::new();
        let mut hosts = BTreeSet::new();
        for (key, before) in &touched {
            let akey = self.keys.alloc(&key.0, &key.1);
            cmps.push(match before {
                None => Compare::create_revision(akey.clone(), CompareOp::Equal, 0),
                Some((_, rev)) => Compare::mod_revision(akey.clone(), CompareOp::Equal, *rev),
            });
            hosts.insert(key.0.clone());
        }
        for h in &hosts {
            cmps.push(Compare::create_revision(
                self.keys.host(h),
                CompareOp::Greater,
                0,
            ));
        }
        for (key, a) in &finals {
            ops.push(TxnOp::put(self.keys.alloc(&key.0, &key.1), encode(a), None));
        }
        for (_, plan) in &planned {
            let vkey = self.keys.vssd(&plan.vssd.name);
            cmps.push(Compare::create_revision(vkey.clone(), CompareOp::Equal, 0));
            // Harvest volumes share the fleet's export names.
            cmps.push(Compare::create_revision(
                self.keys.harvest(&plan.vssd.name),
                CompareOp::Equal,
                0,
            ));
            ops.push(TxnOp::put(vkey, encode(&plan.vssd), None));
            ops.push(TxnOp::put(
                self.keys.desired(&plan.vssd.host, &plan.vssd.name),
                encode(&plan.vssd),
                None,
            ));
            ops.push(TxnOp::put(
                self.event_key(),
                encode(&self.placed_event(&plan.vssd)),
                None,
            ));
        }
        let mut c = self.client.clone();
        let res = c.txn(Txn::new().when(cmps).and_then(ops)).await;
        match res {
            Ok(resp) if resp.succeeded() => {
                let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                let mut v = self.view.lock();
                for (key, a) in finals {
                    let newer = v.allocs.get(&key).is_some_and(|(_, r)| *r > rev);
                    if !newer {
                        v.allocs.insert(key, (a, rev));
                    }
                }
                drop(v);
                for (p, plan) in planned {
                    let _ = p.tx.send(Ok(VssdStatus {
                        vssd: plan.vssd,
                        state: "pending".into(),
                        error: None,
                        uri: None,
                        capacity_bytes: 0,
                    }));
                }
            }
            other => {
                // Undo the tentative allocations, then one by one.
                {
                    let mut v = self.view.lock();
                    for (key, before) in touched {
                        match before {
                            Some(b) => {
                                v.allocs.insert(key, b);
                            }
                            None => {
                                v.allocs.remove(&key);
                            }
                        }
                    }
                }
                if let Err(e) = other {
                    warn!(error = %e, "a batch of placements failed; retrying them one by one");
                }
                for (p, _) in planned {
                    let r = self.create_one(&p.req).await;
                    let _ = p.tx.send(r);
                }
            }
        }
    }

    fn placed_event(&self, v: &FleetVssd) -> FleetEvent {
        self.make_event(
            "vssd-placed",
            Some(&v.host),
            format!(
                "{} placed on {}/{} channels {:?}{}",
                v.name,
                v.host,
                v.device,
                v.channels,
                v.blocks
                    .map(|(s, e)| format!(" blocks {s}..{e}"))
                    .unwrap_or_default()
            ),
        )
    }

    /// Places one request on its own (from the committer).
    async fn create_one(&self, req: &CreateRequest) -> Result<VssdStatus, ClusterError> {
        if !self.is_active() {
            return Err(self.not_leader());
        }
        let mut c = self.client.clone();
        let vkey = self.keys.vssd(&req.name);
        for _ in 0..8 {
            let plan = {
                let v = self.view.lock();
                self.plan(&v, req)?
            };
            let akey = self.keys.alloc(&plan.vssd.host, &plan.vssd.device);
            let alloc_cmp = if plan.expect_rev == 0 {
                Compare::create_revision(akey.clone(), CompareOp::Equal, 0)
            } else {
                Compare::mod_revision(akey.clone(), CompareOp::Equal, plan.expect_rev)
            };
            let ev = self.placed_event(&plan.vssd);
            let txn = Txn::new()
                .when(vec![
                    Compare::create_revision(vkey.clone(), CompareOp::Equal, 0),
                    Compare::create_revision(self.keys.harvest(&req.name), CompareOp::Equal, 0),
                    alloc_cmp,
                    // The host must still be registered.
                    Compare::create_revision(
                        self.keys.host(&plan.vssd.host),
                        CompareOp::Greater,
                        0,
                    ),
                ])
                .and_then(vec![
                    TxnOp::put(akey.clone(), encode(&plan.alloc), None),
                    TxnOp::put(vkey.clone(), encode(&plan.vssd), None),
                    TxnOp::put(
                        self.keys.desired(&plan.vssd.host, &plan.vssd.name),
                        encode(&plan.vssd),
                        None,
                    ),
                    TxnOp::put(self.event_key(), encode(&ev), None),
                ])
                .or_else(vec![
                    TxnOp::get(vkey.clone(), None),
                    TxnOp::get(self.keys.harvest(&req.name), None),
                ]);
            let resp = c.txn(txn).await?;
            if resp.succeeded() {
                let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                self.view.lock().allocs.insert(
                    (plan.vssd.host.clone(), plan.vssd.device.clone()),
                    (plan.alloc, rev),
                );
                return Ok(VssdStatus {
                    vssd: plan.vssd,
                    state: "pending".into(),
                    error: None,
                    uri: None,
                    capacity_bytes: 0,
                });
            }
            let taken = resp
                .op_responses()
                .iter()
                .any(|r| matches!(r, etcd_client::TxnOpResponse::Get(g) if !g.kvs().is_empty()));
            if taken {
                return Err(ClusterError::Exists(format!(
                    "a vSSD or harvest volume named {:?} already exists in the fleet",
                    req.name
                )));
            }
            // The device or the host changed under us: re-read both.
            self.refresh(&plan.vssd.host, &plan.vssd.device).await?;
        }
        Err(ClusterError::Conflict(format!(
            "could not book {:?}: the fleet kept changing under 8 attempts; try again",
            req.name
        )))
    }

    async fn refresh(&self, host: &str, device: &str) -> Result<(), ClusterError> {
        let mut c = self.client.clone();
        let akey = self.keys.alloc(host, device);
        let a = c.get(akey.clone(), None).await?;
        let h = c.get(self.keys.host(host), None).await?;
        let mut v = self.view.lock();
        match a.kvs().first() {
            Some(kv) => v.apply_alloc(&self.keys, kv.key(), Some((kv.value(), kv.mod_revision()))),
            None => v.apply_alloc(&self.keys, akey.as_bytes(), None),
        }
        match h.kvs().first() {
            Some(kv) => {
                v.apply_host(kv.key(), kv.value(), kv.create_revision());
            }
            None => {
                v.hosts.remove(host);
            }
        }
        Ok(())
    }

    fn plan(&self, v: &View, req: &CreateRequest) -> Result<Plan, ClusterError> {
        if let Some(h) = &req.host {
            if !v.hosts.contains_key(h) {
                let alive: Vec<&str> = v.hosts.keys().map(String::as_str).collect();
                return Err(ClusterError::NotFound(format!(
                    "no live host named {h:?} in the fleet (alive: {})",
                    if alive.is_empty() {
                        "none".to_string()
                    } else {
                        alive.join(", ")
                    }
                )));
            }
        }
        if v.hosts.is_empty() {
            return Err(ClusterError::NoRoom(
                "no host is registered with the fleet: start a daemon with a [cluster] section"
                    .into(),
            ));
        }
        match &req.sla {
            None => self.plan_channels(v, req, req.channels.unwrap_or(1)),
            Some(s) => self.plan_unit(v, req, s),
        }
    }

    fn plan_channels(&self, v: &View, req: &CreateRequest, n: u32) -> Result<Plan, ClusterError> {
        // Best fit: the device with the fewest free channels that still has
        // n (an exact fit ends the search). Nothing is cloned while scanning.
        let empty = DeviceAlloc {
            mode: AllocMode::Channels,
            channels: BTreeMap::new(),
            tenants: Vec::new(),
            percentile: None,
        };
        let mut best: Option<(usize, &str, &str, &DeviceAlloc, i64)> = None;
        let mut largest = (0usize, String::new());
        'hosts: for (hid, (h, _)) in &v.hosts {
            if req.host.as_ref().is_some_and(|x| x != hid) {
                continue;
            }
            let mine: BTreeMap<&str, (&DeviceAlloc, i64)> = v
                .allocs
                .range((hid.clone(), String::new())..)
                .take_while(|((h2, _), _)| h2 == hid)
                .map(|((_, d), (a, r))| (d.as_str(), (a, *r)))
                .collect();
            for d in &h.devices {
                if !v.usable(hid, &d.name) {
                    continue;
                }
                let (alloc, rev) = mine.get(d.name.as_str()).copied().unwrap_or((&empty, 0));
                if alloc.mode == AllocMode::Unit && !alloc.tenants.is_empty() {
                    continue;
                }
                let free = d
                    .free_channels
                    .iter()
                    .filter(|c| !alloc.channels.contains_key(c))
                    .count();
                if free > largest.0 {
                    largest = (free, format!("{hid}/{}", d.name));
                }
                if free < n as usize {
                    continue;
                }
                if best.as_ref().is_none_or(|b| free < b.0) {
                    best = Some((free, hid, &d.name, alloc, rev));
                    if free == n as usize {
                        break 'hosts;
                    }
                }
            }
        }
        let Some((_, host, device, alloc, rev)) = best else {
            return Err(ClusterError::NoRoom(format!(
                "no device in the fleet has {n} free channels for {:?}: the most free on one device is {}{} ({} live hosts)",
                req.name,
                largest.0,
                if largest.1.is_empty() { String::new() } else { format!(" on {}", largest.1) },
                v.hosts.len()
            )));
        };
        let dev = v.hosts[host]
            .0
            .devices
            .iter()
            .find(|d| d.name == device)
            .expect("scanned");
        let free: Vec<u32> = dev
            .free_channels
            .iter()
            .copied()
            .filter(|c| !alloc.channels.contains_key(c))
            .collect();
        let mut alloc = alloc.clone();
        let chans: Vec<u32> = free.into_iter().take(n as usize).collect();
        alloc.mode = AllocMode::Channels;
        for c in &chans {
            alloc.channels.insert(*c, req.name.clone());
        }
        Ok(Plan {
            vssd: FleetVssd {
                name: req.name.clone(),
                host: host.to_string(),
                device: device.to_string(),
                channels: chans,
                blocks: None,
                capacity: req.capacity,
                sla: None,
                tenant: req.tenant.clone(),
                role: req.role,
            },
            alloc,
            expect_rev: rev,
        })
    }

    /// Rebuilds the placer from the view's SLA units on live hosts, with the
    /// inventory of each type limited to the devices that can be units.
    fn placer(
        &self,
        v: &View,
        host: Option<&str>,
        exclude: &BTreeSet<(String, String)>,
    ) -> Result<RebuiltPlacer, ClusterError> {
        // Only the devices this request may use: on the named host, not
        // excluded (a unit already found too full for it), parseable.
        let ok = |hid: &str, dev: &str| {
            host.is_none_or(|h| h == hid)
                && v.usable(hid, dev)
                && (exclude.is_empty() || !exclude.contains(&(hid.to_string(), dev.to_string())))
        };
        let mut catalog = self.cfg.catalog.clone();
        let types: Vec<String> = catalog.types().iter().map(|t| t.name.clone()).collect();
        let mut avail = vec![0u32; types.len()];
        for (hid, (h, _)) in &v.hosts {
            let Some(ti) = types.iter().position(|t| *t == h.unit_type) else {
                continue;
            };
            for d in h.devices.iter().filter(|d| ok(hid, &d.name)) {
                match v.allocs.get(&(hid.clone(), d.name.clone())) {
                    Some((a, _)) if a.mode == AllocMode::Unit && !a.tenants.is_empty() => {
                        avail[ti] += 1
                    }
                    Some((a, _)) if !a.is_empty() => {}
                    _ if d.free_channels.len() as u32 == d.channels => avail[ti] += 1,
                    _ => {}
                }
            }
        }
        let mut list = catalog.types().to_vec();
        for (t, n) in list.iter_mut().zip(&avail) {
            t.available = Some(t.available.map_or(*n, |a| a.min(*n)));
        }
        catalog = Catalog::new(catalog.description.clone(), list)
            .map_err(|e| ClusterError::Invalid(format!("the unit catalogue: {e}")))?;
        let mut cfg = PlacerConfig::regulator(self.cfg.metric);
        cfg.max_stripes = 1;
        let mut p = Placer::new(catalog, cfg);
        let mut units = BTreeMap::new();
        let mut next = 0u64;
        for ((hid, dev), (a, _)) in &v.allocs {
            if a.mode != AllocMode::Unit
                || a.tenants.is_empty()
                || !v.hosts.contains_key(hid)
                || !ok(hid, dev)
            {
                continue;
            }
            let h = &v.hosts[hid].0;
            let Some(ti) = types.iter().position(|t| *t == h.unit_type) else {
                continue;
            };
            let Some(pc) = a.percentile else { continue };
            let tenants: Vec<(TenantId, sla::placement::TenantSla)> = a
                .tenants
                .iter()
                .map(|t| {
                    next += 1;
                    (TenantId(next), t.sla.clone())
                })
                .collect();
            match p.restore_unit(ti, pc, tenants) {
                Ok(u) => {
                    units.insert(u.0, (hid.clone(), dev.clone()));
                }
                Err(e) => {
                    warn!(host = %hid, device = %dev, error = %e, "a unit's tenants exceed it; not placing on it")
                }
            }
        }
        Ok((p, units, next + 1))
    }

    fn plan_unit(
        &self,
        v: &View,
        req: &CreateRequest,
        s: &sla::placement::TenantSla,
    ) -> Result<Plan, ClusterError> {
        let capacity = req.capacity.ok_or_else(|| {
            ClusterError::Invalid(format!(
                "vSSD {:?}: placement by SLA curve needs a capacity (bytes)",
                req.name
            ))
        })?;
        // A unit whose curve fits but whose blocks are taken is left out and
        // the placer asked again, which then picks another unit or opens one.
        let mut exclude = BTreeSet::new();
        let mut full = Vec::new();
        loop {
            match self.plan_unit_once(v, req, s, capacity, &exclude)? {
                Ok(plan) => return Ok(plan),
                Err((host, device, why)) => {
                    full.push(why);
                    if !exclude.insert((host, device)) || exclude.len() > 4096 {
                        break;
                    }
                }
            }
        }
        Err(ClusterError::NoRoom(full.join("; ")))
    }

    /// One try of [`Scheduler::plan_unit`]: `Ok(Err(..))` names a unit that
    /// fits the curve but has no room for the blocks.
    #[allow(clippy::type_complexity)]
    fn plan_unit_once(
        &self,
        v: &View,
        req: &CreateRequest,
        s: &sla::placement::TenantSla,
        capacity: u64,
        exclude: &BTreeSet<(String, String)>,
    ) -> Result<Result<Plan, (String, String, String)>, ClusterError> {
        let (mut placer, units, tid) = self.placer(v, req.host.as_deref(), exclude)?;
        let stripes = placer.place(TenantId(tid), s.clone()).map_err(|e| {
            ClusterError::NoRoom(format!(
                "vSSD {:?}: {e}{}",
                req.name,
                if exclude.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} units fit the curve but had no room for its blocks)",
                        exclude.len()
                    )
                }
            ))
        })?;
        let unit = stripes[0].unit;
        let (host, device) = match units.get(&unit.0) {
            Some(hd) => hd.clone(),
            None => {
                // A new unit: a whole free device of that type, on the host
                // with the most such devices (spreads units over hosts).
                let tname =
                    &placer.catalog().types()[placer.unit(unit).expect("placed").type_index()].name;
                let mut best: Option<(usize, String, String)> = None;
                for (hid, (h, _)) in &v.hosts {
                    if &h.unit_type != tname || req.host.as_ref().is_some_and(|x| x != hid) {
                        continue;
                    }
                    let free: Vec<&str> = h
                        .devices
                        .iter()
                        .filter(|d| {
                            v.usable(hid, &d.name)
                                && !exclude.contains(&(hid.clone(), d.name.clone()))
                                && d.free_channels.len() as u32 == d.channels
                                && v.allocs
                                    .get(&(hid.clone(), d.name.clone()))
                                    .is_none_or(|(a, _)| a.is_empty())
                        })
                        .map(|d| d.name.as_str())
                        .collect();
                    if let Some(first) = free.first() {
                        if best.as_ref().is_none_or(|b| free.len() > b.0) {
                            best = Some((free.len(), hid.clone(), first.to_string()));
                        }
                    }
                }
                let (_, h, d) = best.ok_or_else(|| {
                    ClusterError::NoRoom(format!(
                        "vSSD {:?}: no free device of unit type {tname} on a live host{}",
                        req.name,
                        req.host
                            .as_ref()
                            .map(|h| format!(" {h}"))
                            .unwrap_or_default()
                    ))
                })?;
                (h, d)
            }
        };
        let hrec = &v.hosts[&host].0;
        let dev = hrec
            .devices
            .iter()
            .find(|d| d.name == device)
            .expect("device from the view");
        let (mut alloc, rev) = v
            .allocs
            .get(&(host.clone(), device.clone()))
            .cloned()
            .unwrap_or((
                DeviceAlloc {
                    mode: AllocMode::Unit,
                    channels: BTreeMap::new(),
                    tenants: Vec::new(),
                    percentile: None,
                },
                0,
            ));
        alloc.mode = AllocMode::Unit;
        alloc.channels.clear();
        alloc.percentile = Some(s.percentile);
        let need = blocks_for(capacity, dev.row_bytes) + dev.spare_blocks;
        // First fit among the tenants' block ranges.
        let mut taken: Vec<(u32, u32)> = alloc.tenants.iter().map(|t| t.blocks).collect();
        taken.sort_unstable();
        let mut start = 0u32;
        let mut found = None;
        for (a, b) in taken.iter().copied().chain(std::iter::once((
            dev.blocks_per_plane,
            dev.blocks_per_plane,
        ))) {
            if a >= start && a - start >= need {
                found = Some(start);
                break;
            }
            start = start.max(b);
        }
        let Some(first) = found else {
            let why = format!(
                "vSSD {:?}: its curve fits unit {host}/{device}, but the unit has no {need} free blocks per plane for {capacity} bytes (it has {} per plane, {} tenants)",
                req.name,
                dev.blocks_per_plane,
                alloc.tenants.len()
            );
            return Ok(Err((host, device, why)));
        };
        let blocks = (first, first + need);
        alloc.tenants.push(UnitTenant {
            name: req.name.clone(),
            blocks,
            sla: s.clone(),
        });
        Ok(Ok(Plan {
            vssd: FleetVssd {
                name: req.name.clone(),
                host,
                device,
                channels: (0..dev.channels).collect(),
                blocks: Some(blocks),
                capacity: Some(capacity),
                sla: Some(s.clone()),
                tenant: req.tenant.clone(),
                role: req.role,
            },
            alloc,
            expect_rev: rev,
        }))
    }

    /// Keeps the event log to its last [`SchedulerConfig::keep_events`]
    /// entries: one count and, when over, one range delete of the oldest.
    async fn trim_events(&self) -> Result<(), ClusterError> {
        let mut c = self.client.clone();
        let prefix = self.keys.events();
        let n = c
            .get(
                prefix.clone(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await?
            .count();
        let excess = n - self.cfg.keep_events as i64;
        if excess <= 0 {
            return Ok(());
        }
        let oldest = c
            .get(
                prefix.clone(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_sort(SortTarget::Key, SortOrder::Ascend)
                        .with_limit(excess),
                ),
            )
            .await?;
        if let Some(last) = oldest.kvs().last() {
            let mut end = last.key().to_vec();
            end.push(0);
            c.delete(
                prefix,
                Some(etcd_client::DeleteOptions::new().with_range(end)),
            )
            .await?;
            info!(
                deleted = excess,
                kept = self.cfg.keep_events,
                "trimmed the fleet event log"
            );
        }
        Ok(())
    }

    /// While nobody leads (at start, or between a leader's death and the
    /// next election), waits up to one lease TTL for someone to, so that a
    /// request is served or forwarded rather than refused.
    async fn await_leader(&self) {
        let until = tokio::time::Instant::now() + self.cfg.ttl + Duration::from_secs(1);
        while !self.is_active() && self.leader().is_none() && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Deletes a fleet vSSD and frees its booking (active scheduler only).
    pub async fn delete(&self, name: &str) -> Result<(), ClusterError> {
        self.await_leader().await;
        if !self.is_active() {
            return Err(self.not_leader());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.queue
            .send(Job::Delete {
                name: name.to_string(),
                tx,
            })
            .map_err(|_| ClusterError::Conflict("the scheduler is stopping".into()))?;
        rx.await
            .map_err(|_| ClusterError::Conflict("the scheduler is stopping".into()))?
    }

    /// Deletes one vSSD (from the committer).
    async fn delete_now(&self, name: &str) -> Result<(), ClusterError> {
        if !self.is_active() {
            return Err(self.not_leader());
        }
        let mut c = self.client.clone();
        let vkey = self.keys.vssd(name);
        for _ in 0..8 {
            let got = c.get(vkey.clone(), None).await?;
            let Some(kv) = got.kvs().first() else {
                return Err(ClusterError::NotFound(format!(
                    "no vSSD named {name:?} in the fleet"
                )));
            };
            let vrev = kv.mod_revision();
            let v: FleetVssd = decode(kv.key(), kv.value())?;
            let akey = self.keys.alloc(&v.host, &v.device);
            let a = c.get(akey.clone(), None).await?;
            let mut ops = vec![
                TxnOp::delete(vkey.clone(), None),
                TxnOp::delete(self.keys.desired(&v.host, name), None),
            ];
            let mut cmps = vec![Compare::mod_revision(vkey.clone(), CompareOp::Equal, vrev)];
            let mut new_alloc = None;
            if let Some(akv) = a.kvs().first() {
                let mut alloc: DeviceAlloc = decode(akv.key(), akv.value())?;
                alloc.channels.retain(|_, n| n != name);
                alloc.tenants.retain(|t| t.name != name);
                cmps.push(Compare::mod_revision(
                    akey.clone(),
                    CompareOp::Equal,
                    akv.mod_revision(),
                ));
                if alloc.is_empty() {
                    ops.push(TxnOp::delete(akey.clone(), None));
                } else {
                    ops.push(TxnOp::put(akey.clone(), encode(&alloc), None));
                    new_alloc = Some(alloc);
                }
            }
            // A harvest tenant's volumes go with it, wherever they are.
            let mut released = Vec::new();
            if v.role == control::TenantRole::Harvest {
                let (vols, rev) = etcd::get_prefix_at(&mut c, &self.keys.harvests(), 0).await?;
                cmps.push(
                    Compare::mod_revision(self.keys.harvests(), CompareOp::Less, rev + 1)
                        .with_prefix(),
                );
                for kv in &vols {
                    let Ok(h) = decode::<FleetHarvest>(kv.key(), kv.value()) else {
                        continue;
                    };
                    if h.tenant == name {
                        ops.push(TxnOp::delete(kv.key().to_vec(), None));
                        ops.push(TxnOp::delete(self.keys.hdesired(&h.host, &h.name), None));
                        released.push(h.name);
                    }
                }
            }
            let ev = self.make_event(
                "vssd-deleted",
                Some(&v.host),
                format!(
                    "{name} deleted from {}/{}{}",
                    v.host,
                    v.device,
                    if released.is_empty() {
                        String::new()
                    } else {
                        format!("; its harvest volumes released: {}", released.join(", "))
                    }
                ),
            );
            ops.push(TxnOp::put(self.event_key(), encode(&ev), None));
            let resp = c.txn(Txn::new().when(cmps).and_then(ops)).await?;
            if resp.succeeded() {
                let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                let mut view = self.view.lock();
                match new_alloc {
                    Some(a) => {
                        view.allocs
                            .insert((v.host.clone(), v.device.clone()), (a, rev));
                    }
                    None => {
                        view.allocs.remove(&(v.host.clone(), v.device.clone()));
                    }
                }
                return Ok(());
            }
        }
        Err(ClusterError::Conflict(format!(
            "could not delete {name:?}: the fleet kept changing; try again"
        )))
    }

    /// Every fleet vSSD with its host's report.
    pub async fn list(&self) -> Result<Vec<VssdStatus>, ClusterError> {
        let mut c = self.client.clone();
        let vs = etcd::get_prefix(&mut c, &self.keys.vssds()).await?;
        let obs = etcd::get_prefix(&mut c, &self.keys.observed_all()).await?;
        let mut observed: BTreeMap<(String, String), ObservedVssd> = BTreeMap::new();
        let base = self.keys.observed_all();
        for kv in &obs {
            let k = String::from_utf8_lossy(kv.key()).into_owned();
            let Some((h, n)) = k.strip_prefix(&base).and_then(|r| r.split_once('/')) else {
                continue;
            };
            match decode::<ObservedVssd>(kv.key(), kv.value()) {
                Ok(o) => {
                    observed.insert((h.to_string(), n.to_string()), o);
                }
                Err(e) => warn!(error = %e, "ignoring an observed record"),
            }
        }
        let alive: BTreeSet<String> = self.view.lock().hosts.keys().cloned().collect();
        let mut out = Vec::new();
        for kv in &vs {
            let v: FleetVssd = match decode(kv.key(), kv.value()) {
                Ok(v) => v,
                Err(e) => {
                    warn!(error = %e, "ignoring a fleet vSSD record");
                    continue;
                }
            };
            let o = observed.remove(&(v.host.clone(), v.name.clone()));
            let (state, error, uri, bytes) = if !alive.contains(&v.host) {
                (
                    "unavailable".to_string(),
                    Some(format!("host {} is lost", v.host)),
                    None,
                    0,
                )
            } else {
                match o {
                    None => ("pending".into(), None, None, 0),
                    Some(o) => (
                        match o.state {
                            ObservedState::Ready => "ready".into(),
                            ObservedState::Error => "error".into(),
                        },
                        o.error,
                        o.uri,
                        o.capacity_bytes,
                    ),
                }
            };
            out.push(VssdStatus {
                vssd: v,
                state,
                error,
                uri,
                capacity_bytes: bytes,
            });
        }
        Ok(out)
    }

    /// One fleet vSSD: two point reads (its index entry, its host's report).
    pub async fn show(&self, name: &str) -> Result<VssdStatus, ClusterError> {
        let mut c = self.client.clone();
        let got = c.get(self.keys.vssd(name), None).await?;
        let kv = got.kvs().first().ok_or_else(|| {
            ClusterError::NotFound(format!("no vSSD named {name:?} in the fleet"))
        })?;
        let v: FleetVssd = decode(kv.key(), kv.value())?;
        let alive = self.view.lock().hosts.contains_key(&v.host);
        if !alive {
            return Ok(VssdStatus {
                error: Some(format!("host {} is lost", v.host)),
                vssd: v,
                state: "unavailable".into(),
                uri: None,
                capacity_bytes: 0,
            });
        }
        let o = c.get(self.keys.observed(&v.host, name), None).await?;
        let o = match o.kvs().first() {
            None => None,
            Some(kv) => Some(decode::<ObservedVssd>(kv.key(), kv.value())?),
        };
        Ok(match o {
            None => VssdStatus {
                vssd: v,
                state: "pending".into(),
                error: None,
                uri: None,
                capacity_bytes: 0,
            },
            Some(o) => VssdStatus {
                vssd: v,
                state: match o.state {
                    ObservedState::Ready => "ready".into(),
                    ObservedState::Error => "error".into(),
                },
                error: o.error,
                uri: o.uri,
                capacity_bytes: o.capacity_bytes,
            },
        })
    }

    /// Hosts, alive and lost.
    pub fn hosts(&self) -> Vec<HostStatus> {
        let v = self.view.lock();
        // One pass over the allocations: vSSD names and booked channels per host.
        let mut per: BTreeMap<&str, (BTreeSet<&str>, u32)> = BTreeMap::new();
        for ((h, dev), (a, _)) in &v.allocs {
            let e = per.entry(h.as_str()).or_default();
            e.0.extend(a.channels.values().map(String::as_str));
            e.1 += a.channels.len() as u32;
            if a.mode == AllocMode::Unit && !a.tenants.is_empty() {
                e.0.extend(a.tenants.iter().map(|t| t.name.as_str()));
                // A unit books every channel of its own device.
                e.1 += v
                    .hosts
                    .get(h)
                    .and_then(|(r, _)| r.devices.iter().find(|d| d.name == *dev))
                    .map_or(0, |d| d.channels);
            }
        }
        let mut ids: BTreeSet<&str> = v.hosts.keys().map(String::as_str).collect();
        ids.extend(per.keys().copied());
        ids.into_iter()
            .map(|id| {
                let (names, booked) = per.get(id).cloned().unwrap_or_default();
                let record = v.hosts.get(id).map(|(r, _)| r.clone());
                HostStatus {
                    state: if record.is_some() { "alive" } else { "lost" }.into(),
                    total_channels: record
                        .as_ref()
                        .map_or(0, |r| r.devices.iter().map(|d| d.channels).sum()),
                    id: id.to_string(),
                    record,
                    vssds: names.len(),
                    booked_channels: booked,
                }
            })
            .collect()
    }

    /// Every live host's gSSDs, best fit first for a demand of one channel:
    /// the fleet-wide pool as the hosts last published it.
    pub fn gssds(&self) -> Vec<FleetGssd> {
        let v = self.view.lock();
        let mut out: Vec<FleetGssd> = v
            .hosts
            .values()
            .flat_map(|(h, _)| {
                h.gssds.iter().map(|g| FleetGssd {
                    host: h.id.clone(),
                    nbd: h.nbd.clone(),
                    gssd: g.clone(),
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (a.gssd.in_use, a.gssd.capacity_bytes, &a.host, a.gssd.id).cmp(&(
                b.gssd.in_use,
                b.gssd.capacity_bytes,
                &b.host,
                b.gssd.id,
            ))
        });
        out
    }

    /// The fleet at a glance.
    pub fn status(&self) -> FleetStatus {
        let hosts = self.hosts();
        let v = self.view.lock();
        FleetStatus {
            scheduler: self.cfg.id.clone(),
            active: self.is_active(),
            leader: self.leader(),
            hosts_alive: hosts.iter().filter(|h| h.state == "alive").count(),
            hosts_lost: hosts.iter().filter(|h| h.state == "lost").count(),
            vssds: hosts.iter().map(|h| h.vssds).sum(),
            units: v
                .allocs
                .values()
                .filter(|(a, _)| a.mode == AllocMode::Unit && !a.tenants.is_empty())
                .count(),
            channels_booked: hosts
                .iter()
                .filter(|h| h.state == "alive")
                .map(|h| h.booked_channels)
                .sum(),
            channels_total: hosts.iter().map(|h| h.total_channels).sum(),
        }
    }

    /// The last `limit` events after sequence number `since` (0: all), oldest
    /// first.
    pub async fn events(&self, limit: i64, since: u64) -> Result<Vec<FleetEvent>, ClusterError> {
        let mut c = self.client.clone();
        let mut opts = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(limit);
        if since > 0 {
            // Sequence numbers are the events' etcd revisions.
            opts = opts.with_min_mod_revision(since as i64 + 1);
        }
        let resp = c.get(self.keys.events(), Some(opts)).await?;
        let mut out: Vec<FleetEvent> = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                decode::<FleetEvent>(kv.key(), kv.value())
                    .map(|mut e| {
                        e.seq = kv.mod_revision() as u64;
                        e
                    })
                    .map_err(|e| warn!(error = %e, "ignoring an event"))
                    .ok()
            })
            .collect();
        out.reverse();
        Ok(out)
    }
}

fn validate(req: &CreateRequest) -> Result<(), ClusterError> {
    if !control::valid_name(&req.name) {
        return Err(ClusterError::Invalid(format!(
            "name {:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'",
            req.name
        )));
    }
    if req.sla.is_some() && req.channels.is_some() {
        return Err(ClusterError::Invalid(format!(
            "vSSD {:?}: give an SLA curve or a channel count, not both",
            req.name
        )));
    }
    if req.channels == Some(0) {
        return Err(ClusterError::Invalid(format!(
            "vSSD {:?}: channels must be at least 1",
            req.name
        )));
    }
    if let Some(s) = &req.sla {
        if !s.curve.is_concave() {
            return Err(ClusterError::Invalid(format!(
                "vSSD {:?}: the SLA curve is not concave",
                req.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_capacity_with_over_provisioning() {
        // 1 MiB rows: 7 MiB exported needs 8 MiB raw.
        assert_eq!(blocks_for(7 << 20, 1 << 20), 8);
        assert_eq!(blocks_for(1, 1 << 20), 2);
    }

    #[test]
    fn the_view_never_goes_back_to_an_older_allocation() {
        // The watch can deliver this scheduler's own earlier write after it
        // recorded a later one (the race that once lost a booking).
        let keys = Keys::new("/fx");
        let mut v = View::default();
        let alloc = |names: &[(u32, &str)]| DeviceAlloc {
            mode: AllocMode::Channels,
            channels: names.iter().map(|(c, n)| (*c, n.to_string())).collect(),
            tenants: Vec::new(),
            percentile: None,
        };
        let k = keys.alloc("h1", "ssd0");
        let newer = encode(&alloc(&[(0, "a"), (1, "b")]));
        let older = encode(&alloc(&[(0, "a")]));
        v.apply_alloc(&keys, k.as_bytes(), Some((&newer, 7)));
        v.apply_alloc(&keys, k.as_bytes(), Some((&older, 5)));
        v.apply_alloc(&keys, k.as_bytes(), Some((&older, 7)));
        let id = ("h1".to_string(), "ssd0".to_string());
        assert_eq!(v.allocs[&id].0.channels.len(), 2);
        // A delete older than what is known is ignored too; a later one applies.
        v.apply_alloc_at(&keys, k.as_bytes(), None, 6);
        assert!(v.allocs.contains_key(&id));
        v.apply_alloc_at(&keys, k.as_bytes(), None, 9);
        assert!(!v.allocs.contains_key(&id));
        // A value that does not parse marks the device unusable.
        v.apply_alloc(&keys, k.as_bytes(), Some((b"{", 10)));
        assert!(!v.usable("h1", "ssd0"));
    }

    #[test]
    fn requests_are_checked() {
        let mut r = CreateRequest {
            name: "bad name".into(),
            ..Default::default()
        };
        assert!(validate(&r).unwrap_err().to_string().contains("bad name"));
        r.name = "ok".into();
        r.channels = Some(0);
        assert!(validate(&r).is_err());
    }
}
