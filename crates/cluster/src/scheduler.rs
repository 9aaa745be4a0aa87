//! The fleet scheduler: leadership, and the API every part below serves.
//!
//! Every scheduler process keeps a view of the fleet (live hosts and device
//! allocations) from watches on etcd, and campaigns for the lease-held
//! leader key. Only the active one places, deletes and harvests; the others
//! answer reads and say who is active ([`ClusterError::NotLeader`]).
//!
//! The parts, one file each:
//!
//! * `view.rs`: the view, its load and watches, host loss;
//! * `place.rs`: placement by channel count or SLA curve, committed by one
//!   task in group-commit transactions that compare every allocation's
//!   revision, every name's absence and every host's presence;
//! * `delete.rs`: deleting a vSSD;
//! * `harvest.rs`: harvest requests served from the fleet-wide gSSD pool;
//! * `reads.rs`: lists, shows, hosts, status, events;
//! * this file: the scheduler itself, the election and the event log.
//!
//! No lock is held across an etcd call: the view is a map behind a mutex
//! taken only to read or update it, and this scheduler's own changes do not
//! race each other because one task, the committer, makes them all in the
//! order they were asked for (and another makes harvest bookings).

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

mod delete;
mod harvest;
mod place;
mod reads;
mod tokens;
mod view;

pub use harvest::FleetHarvestStatus;
use place::Job;
use view::View;

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
            tenant: None,
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
            // Hosts that hold bookings but are not registered went away
            // while nobody led: report them, from a fresh read. The view is
            // left to the watch, which has run all along: replacing it here
            // raced with it, and a host that registered while the read was
            // under way vanished from the new leader's view for good (the
            // fleet HTTPS test saw it once in a dozen runs under load).
            if let Ok((v, _rev)) = self.snapshot().await {
                let lost: Vec<String> = v
                    .allocs
                    .keys()
                    .map(|(h, _)| h.clone())
                    .filter(|h| !v.hosts.contains_key(h))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
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
}
