//! The host agent: one host's membership of the fleet.
//!
//! A session is: grant a lease, register the host's record under it, read the
//! vSSDs desired for this host and converge to them, then watch for changes
//! while keeping the lease alive and republishing the host's record when it
//! changes. Any etcd error ends the session; the agent logs it and starts a
//! new one, so a restarted etcd, a lost lease or a partition all heal the same
//! way, by re-registering and reconciling from scratch. Reconciling is
//! idempotent: a vSSD the host already runs as desired is left alone.
//!
//! What the fleet created is told apart from the host's own vSSDs by the
//! observed keys: the agent deletes a vSSD only when it once reported it under
//! `observed/{host}/` and it is no longer desired.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, PutOptions, WatchOptions};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::etcd::{self, EtcdConfig};
use crate::keys::{
    decode, encode, DeviceSummary, FleetHarvest, FleetVssd, GssdSummary, HarvestState, HostRecord,
    Keys, ObservedHarvest, ObservedState, ObservedVssd,
};
use crate::{ClusterError, WallMs};

/// What the agent needs of its host. Calls may block (they create vSSDs and
/// erase flash): the agent runs them on the blocking pool.
pub trait HostPort: Send + Sync + 'static {
    /// The host's clock now, milliseconds (gSSD expiries are on this clock).
    fn now_ms(&self) -> u64;
    /// The host's devices, as the fleet sees them.
    fn devices(&self) -> Vec<DeviceSummary>;
    /// The host's gSSD pool.
    fn gssds(&self) -> Vec<GssdSummary>;
    /// Makes sure vSSD `v` runs here as placed; returns its exported size.
    /// Idempotent: a vSSD already running with this placement is fine.
    fn ensure_vssd(&self, v: &FleetVssd) -> Result<u64, String>;
    /// Removes vSSD `name` (fine if it does not exist).
    fn remove_vssd(&self, name: &str) -> Result<(), String>;
    /// Makes sure harvest volume `h` is served here (its tenant lives
    /// anywhere in the fleet); returns its report. Idempotent.
    fn ensure_harvest(&self, h: &FleetHarvest) -> Result<ObservedHarvest, String>;
    /// The report on harvest volume `name`, `None` if the host has none.
    fn harvest_report(&self, name: &str) -> Option<ObservedHarvest>;
    /// Releases harvest volume `name`, erasing its gSSDs (fine if it does
    /// not exist).
    fn release_harvest(&self, name: &str) -> Result<(), String>;
}

/// The agent's settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// How to reach etcd.
    pub etcd: EtcdConfig,
    /// Key prefix.
    pub prefix: String,
    /// This host's id.
    pub host_id: String,
    /// Advertised NBD `HOST:PORT`.
    pub nbd: String,
    /// Whether the host's NBD server speaks TLS (exports are then advertised
    /// as `nbds://`).
    pub nbd_tls: bool,
    /// Advertised API URL.
    pub api: String,
    /// Catalogue unit type of its devices.
    pub unit_type: String,
    /// Lease TTL.
    pub ttl: Duration,
    /// How often to republish the host record.
    pub publish: Duration,
}

impl AgentConfig {
    /// From a host's `[cluster]` section (`nbd_tls` false: set it from `[nbd]`).
    pub fn from_settings(s: &control::ClusterSettings) -> Self {
        AgentConfig {
            etcd: EtcdConfig::from_settings(s),
            prefix: s.prefix.clone(),
            host_id: s.host_id.clone(),
            nbd: s.advertise_nbd.clone(),
            nbd_tls: false,
            api: s.advertise_api.clone(),
            unit_type: s.unit_type.clone(),
            ttl: Duration::from_secs(s.lease_ttl_s),
            publish: Duration::from_millis(s.publish_interval_ms),
        }
    }
}

/// A running agent.
pub struct Agent {
    cfg: AgentConfig,
    keys: Keys,
    host: Arc<dyn HostPort>,
    started_ms: u64,
    clock_origin_ms: u64,
}

impl Agent {
    /// An agent for `host`.
    pub fn new(cfg: AgentConfig, host: Arc<dyn HostPort>, wall: WallMs) -> Self {
        let started_ms = wall();
        let clock_origin_ms = started_ms.saturating_sub(host.now_ms());
        Agent {
            keys: Keys::new(&cfg.prefix),
            cfg,
            host,
            started_ms,
            clock_origin_ms,
        }
    }

    fn record(&self, devices: Vec<DeviceSummary>, gssds: Vec<GssdSummary>) -> HostRecord {
        HostRecord {
            id: self.cfg.host_id.clone(),
            nbd: self.cfg.nbd.clone(),
            api: self.cfg.api.clone(),
            unit_type: self.cfg.unit_type.clone(),
            devices,
            gssds,
            started_ms: self.started_ms,
            clock_origin_ms: self.clock_origin_ms,
        }
    }

    /// Runs sessions until `stop` turns true, re-registering after every
    /// failure. With `first_attempts` > 0, gives up (returning the error) if
    /// the very first connection fails that many times.
    pub async fn run(
        self,
        stop: watch::Receiver<bool>,
        first_attempts: u32,
    ) -> Result<(), ClusterError> {
        let client = etcd::connect_retrying(&self.cfg.etcd, first_attempts).await?;
        self.run_on(client, stop).await
    }

    /// Like [`Agent::run`] on an established client (many light agents of
    /// the scale benchmark share a few connections).
    pub async fn run_on(
        self,
        mut client: Client,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), ClusterError> {
        loop {
            match self.session(&mut client, &mut stop).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    warn!(host = %self.cfg.host_id, error = %e, "fleet session ended; re-registering in 1 s");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => return Ok(()),
            }
            match etcd::connect(&self.cfg.etcd).await {
                Ok(c) => client = c,
                Err(e) => {
                    warn!(host = %self.cfg.host_id, error = %e, "etcd is unreachable; retrying")
                }
            }
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn HostPort) -> T + Send + 'static,
    ) -> T {
        let host = self.host.clone();
        tokio::task::spawn_blocking(move || f(host.as_ref()))
            .await
            .expect("host call panicked")
    }

    async fn snapshot(&self) -> HostRecord {
        let (d, g) = self.blocking(|h| (h.devices(), h.gssds())).await;
        self.record(d, g)
    }

    /// One registration: returns `Ok` only when asked to stop.
    async fn session(
        &self,
        client: &mut Client,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), ClusterError> {
        let ttl = self.cfg.ttl.as_secs().max(1) as i64;
        let lease = client.lease_grant(ttl, None).await?.id();
        let (mut keeper, mut acks) = client.lease_keep_alive(lease).await?;
        let mut published = self.snapshot().await;
        let hkey = self.keys.host(&self.cfg.host_id);
        client
            .put(
                hkey.clone(),
                encode(&published),
                Some(PutOptions::new().with_lease(lease)),
            )
            .await?;
        info!(host = %self.cfg.host_id, lease, ttl, "registered with the fleet");

        // Desired and observed state now, then changes from that revision on.
        let prefix = self.keys.desired_of(&self.cfg.host_id);
        let resp = client
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await?;
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        let mut desired = BTreeMap::new();
        for kv in resp.kvs() {
            match decode::<FleetVssd>(kv.key(), kv.value()) {
                Ok(v) => {
                    desired.insert(v.name.clone(), v);
                }
                Err(e) => warn!(error = %e, "ignoring a desired vSSD"),
            }
        }
        let oprefix = self.keys.observed_of(&self.cfg.host_id);
        let observed: BTreeSet<String> = client
            .get(
                oprefix,
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await?
            .kvs()
            .iter()
            .map(|kv| Keys::last(&String::from_utf8_lossy(kv.key())).to_string())
            .collect();
        for gone in observed.iter().filter(|n| !desired.contains_key(*n)) {
            self.remove(client, gone).await?;
        }
        for v in desired.values() {
            self.converge(client, v).await?;
        }
        let mut stream = client
            .watch(
                prefix,
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(rev + 1),
                ),
            )
            .await?;
        // Harvest volumes the fleet placed here, the same way.
        let (mut hseen, hrev) = self.harvest_reconcile(client).await?;
        let mut hstream = client
            .watch(
                self.keys.hdesired_of(&self.cfg.host_id),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(hrev + 1),
                ),
            )
            .await?;

        let mut renew = tokio::time::interval(self.cfg.ttl / 3);
        let mut publish = tokio::time::interval(self.cfg.publish);
        loop {
            tokio::select! {
                _ = stop.changed() => {
                    // A planned stop: give the lease back so the fleet knows at once.
                    let _ = client.lease_revoke(lease).await;
                    return Ok(());
                }
                _ = renew.tick() => {
                    keeper.keep_alive().await?;
                    match acks.message().await? {
                        Some(a) if a.ttl() > 0 => {}
                        _ => return Err(ClusterError::Conflict(format!("lease {lease} expired"))),
                    }
                }
                _ = publish.tick() => {
                    let now = self.snapshot().await;
                    if now != published {
                        client.put(hkey.clone(), encode(&now), Some(PutOptions::new().with_lease(lease))).await?;
                        published = now;
                    }
                    self.harvest_refresh(client, &mut hseen).await?;
                }
                msg = hstream.message() => {
                    let Some(resp) = msg? else {
                        return Err(ClusterError::Conflict("the watch on desired harvest volumes closed".into()));
                    };
                    if resp.canceled() {
                        return Err(ClusterError::Conflict(format!("the harvest watch was cancelled: {}", resp.cancel_reason())));
                    }
                    for ev in resp.events() {
                        let Some(kv) = ev.kv() else { continue };
                        let key = String::from_utf8_lossy(kv.key()).into_owned();
                        match ev.event_type() {
                            EventType::Put => match decode::<FleetHarvest>(kv.key(), kv.value()) {
                                Ok(h) => {
                                    let prev = hseen.get(&h.name).cloned();
                                    let o = self.harvest_converge(client, &h, prev.as_ref()).await?;
                                    hseen.insert(h.name.clone(), o);
                                }
                                Err(e) => warn!(error = %e, "ignoring a desired harvest volume"),
                            },
                            EventType::Delete => {
                                let name = Keys::last(&key).to_string();
                                hseen.remove(&name);
                                self.harvest_release(client, &name).await?;
                            }
                        }
                    }
                }
                msg = stream.message() => {
                    let Some(resp) = msg? else {
                        return Err(ClusterError::Conflict("the watch on desired state closed".into()));
                    };
                    if resp.canceled() {
                        return Err(ClusterError::Conflict(format!("the watch was cancelled: {}", resp.cancel_reason())));
                    }
                    for ev in resp.events() {
                        let Some(kv) = ev.kv() else { continue };
                        let key = String::from_utf8_lossy(kv.key()).into_owned();
                        match ev.event_type() {
                            EventType::Put => match decode::<FleetVssd>(kv.key(), kv.value()) {
                                Ok(v) => self.converge(client, &v).await?,
                                Err(e) => warn!(error = %e, "ignoring a desired vSSD"),
                            },
                            EventType::Delete => self.remove(client, Keys::last(&key)).await?,
                        }
                    }
                }
            }
        }
    }

    async fn converge(&self, client: &mut Client, v: &FleetVssd) -> Result<(), ClusterError> {
        let want = v.clone();
        let res = self.blocking(move |h| h.ensure_vssd(&want)).await;
        let obs = match res {
            Ok(bytes) => ObservedVssd {
                state: ObservedState::Ready,
                error: None,
                capacity_bytes: bytes,
                uri: Some(self.uri(&v.name)),
            },
            Err(e) => {
                warn!(vssd = %v.name, error = %e, "cannot create a desired vSSD");
                ObservedVssd {
                    state: ObservedState::Error,
                    error: Some(e),
                    capacity_bytes: 0,
                    uri: None,
                }
            }
        };
        client
            .put(
                self.keys.observed(&self.cfg.host_id, &v.name),
                encode(&obs),
                None,
            )
            .await?;
        Ok(())
    }

    fn uri(&self, name: &str) -> String {
        format!(
            "{}://{}/{}",
            if self.cfg.nbd_tls { "nbds" } else { "nbd" },
            self.cfg.nbd,
            name
        )
    }

    /// Session start for harvest volumes: releases what the host served and
    /// the fleet no longer wants, serves what it wants. Returns the reports
    /// written and the revision to watch from.
    async fn harvest_reconcile(
        &self,
        client: &mut Client,
    ) -> Result<(BTreeMap<String, ObservedHarvest>, i64), ClusterError> {
        let host = &self.cfg.host_id;
        let resp = client
            .get(
                self.keys.hdesired_of(host),
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        let desired: Vec<FleetHarvest> = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                decode(kv.key(), kv.value())
                    .map_err(|e| warn!(error = %e, "ignoring a desired harvest volume"))
                    .ok()
            })
            .collect();
        let mut prev: BTreeMap<String, Option<ObservedHarvest>> = BTreeMap::new();
        for kv in client
            .get(
                self.keys.hobserved_of(host),
                Some(GetOptions::new().with_prefix()),
            )
            .await?
            .kvs()
        {
            let name = Keys::last(&String::from_utf8_lossy(kv.key())).to_string();
            let o = decode::<ObservedHarvest>(kv.key(), kv.value())
                .map_err(|e| warn!(error = %e, "ignoring a harvest report"))
                .ok();
            prev.insert(name, o);
        }
        for gone in prev
            .keys()
            .filter(|n| !desired.iter().any(|h| &&h.name == n))
        {
            self.harvest_release(client, gone).await?;
        }
        let mut seen = BTreeMap::new();
        for h in &desired {
            let p = prev.get(&h.name).cloned().flatten();
            let o = self.harvest_converge(client, h, p.as_ref()).await?;
            seen.insert(h.name.clone(), o);
        }
        Ok((seen, rev))
    }

    /// Serves one desired harvest volume and reports on it. A volume the
    /// host once served and no longer has was evicted here (its gSSDs were
    /// reclaimed with nowhere to migrate): it is reported `evicted`, never
    /// created again behind the tenant's back.
    async fn harvest_converge(
        &self,
        client: &mut Client,
        h: &FleetHarvest,
        prev: Option<&ObservedHarvest>,
    ) -> Result<ObservedHarvest, ClusterError> {
        let served_before = prev.is_some_and(|o| o.state != HarvestState::Error);
        let want = h.clone();
        let res = self
            .blocking(move |hp| match hp.harvest_report(&want.name) {
                Some(r) => Ok(Some(r)),
                None if served_before => Ok(None),
                None => hp.ensure_harvest(&want).map(Some),
            })
            .await;
        let obs = match res {
            Ok(Some(mut r)) => {
                r.uri = Some(self.uri(&h.name));
                r
            }
            Ok(None) => evicted(
                prev,
                "its host no longer serves it (its gSSDs were reclaimed)",
            ),
            Err(e) => {
                warn!(volume = %h.name, error = %e, "cannot create a desired harvest volume");
                ObservedHarvest {
                    state: HarvestState::Error,
                    error: Some(e),
                    uri: None,
                    size_bytes: 0,
                    gssds: Vec::new(),
                    until_s: 0,
                    evict_by_s: None,
                }
            }
        };
        if prev != Some(&obs) {
            client
                .put(
                    self.keys.hobserved(&self.cfg.host_id, &h.name),
                    encode(&obs),
                    None,
                )
                .await?;
        }
        Ok(obs)
    }

    /// Republishes the reports of served volumes that changed (migrating,
    /// under eviction notice, evicted).
    async fn harvest_refresh(
        &self,
        client: &mut Client,
        seen: &mut BTreeMap<String, ObservedHarvest>,
    ) -> Result<(), ClusterError> {
        let live: Vec<String> = seen
            .iter()
            .filter(|(_, o)| !matches!(o.state, HarvestState::Evicted | HarvestState::Error))
            .map(|(n, _)| n.clone())
            .collect();
        if live.is_empty() {
            return Ok(());
        }
        let reports = self
            .blocking(move |hp| {
                live.into_iter()
                    .map(|n| {
                        let r = hp.harvest_report(&n);
                        (n, r)
                    })
                    .collect::<Vec<_>>()
            })
            .await;
        for (name, r) in reports {
            let prev = seen.get(&name);
            let obs = match r {
                Some(mut r) => {
                    r.uri = Some(self.uri(&name));
                    r
                }
                None => evicted(
                    prev,
                    "its host no longer serves it (its gSSDs were reclaimed)",
                ),
            };
            if prev != Some(&obs) {
                client
                    .put(
                        self.keys.hobserved(&self.cfg.host_id, &name),
                        encode(&obs),
                        None,
                    )
                    .await?;
                seen.insert(name, obs);
            }
        }
        Ok(())
    }

    async fn harvest_release(&self, client: &mut Client, name: &str) -> Result<(), ClusterError> {
        let n = name.to_string();
        if let Err(e) = self.blocking(move |h| h.release_harvest(&n)).await {
            warn!(volume = %name, error = %e, "cannot release a harvest volume the fleet no longer wants");
            let obs = ObservedHarvest {
                state: HarvestState::Error,
                error: Some(format!("releasing: {e}")),
                uri: None,
                size_bytes: 0,
                gssds: Vec::new(),
                until_s: 0,
                evict_by_s: None,
            };
            client
                .put(
                    self.keys.hobserved(&self.cfg.host_id, name),
                    encode(&obs),
                    None,
                )
                .await?;
            return Ok(());
        }
        client
            .delete(self.keys.hobserved(&self.cfg.host_id, name), None)
            .await?;
        Ok(())
    }

    async fn remove(&self, client: &mut Client, name: &str) -> Result<(), ClusterError> {
        let n = name.to_string();
        if let Err(e) = self.blocking(move |h| h.remove_vssd(&n)).await {
            warn!(vssd = %name, error = %e, "cannot remove a vSSD the fleet no longer wants");
            let obs = ObservedVssd {
                state: ObservedState::Error,
                error: Some(format!("removing: {e}")),
                capacity_bytes: 0,
                uri: None,
            };
            client
                .put(
                    self.keys.observed(&self.cfg.host_id, name),
                    encode(&obs),
                    None,
                )
                .await?;
            return Ok(());
        }
        client
            .delete(self.keys.observed(&self.cfg.host_id, name), None)
            .await?;
        Ok(())
    }
}

/// The report of a volume that is gone from its host.
fn evicted(prev: Option<&ObservedHarvest>, why: &str) -> ObservedHarvest {
    ObservedHarvest {
        state: HarvestState::Evicted,
        error: Some(why.to_string()),
        uri: None,
        size_bytes: prev.map_or(0, |p| p.size_bytes),
        gssds: Vec::new(),
        until_s: prev.map_or(0, |p| p.until_s),
        evict_by_s: None,
    }
}
