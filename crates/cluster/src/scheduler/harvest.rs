//! Fleet-wide harvesting: BlockFlex's gSSD pool over every host.
//!
//! A harvest tenant is a fleet vSSD with role `harvest`, on any host. Its
//! request is served from the best-fit gSSD anywhere in the fleet, as the
//! hosts last published their pools, and the volume's NBD export is on the
//! host that lends the flash. The scheduler picks the *host*; the host's own
//! harvester, which owns its pool, picks the gSSDs (best fit again, several
//! if no one covers the demand). Published pools can be a few seconds old, so
//! a host may refuse: the scheduler then withdraws the booking and tries the
//! next host in best-fit order.
//!
//! Each booking is one etcd transaction that checks the name is free (among
//! vSSDs and harvest volumes), the tenant's record is the one checked, and
//! the host is registered. Requests run one after another on their own task
//! (a host answers in milliseconds, but a slow one must not hold up vSSD
//! placements), so two requests never aim at the same stale gSSD together.
//!
//! When a host is lost, its harvest volumes go through the eviction path:
//! an event, the index marks them evicted, and their desired keys go, so a
//! host that comes back erases and returns their gSSDs. A lease lost to a
//! partition evicts as a real crash does: harvest tenants are preemptible by
//! design.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::{Scheduler, View};
use crate::etcd;
use crate::keys::{decode, encode, FleetHarvest, FleetVssd, HarvestState, ObservedHarvest};
use crate::ClusterError;

/// How long a request waits for the chosen host to report before it answers
/// `pending` (the host will still serve the volume when it can).
const HOST_WAIT: Duration = Duration::from_secs(20);

/// Hosts tried, in best-fit order, before a request is refused.
const MAX_HOSTS: usize = 4;

/// A fleet harvest volume with what its host reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetHarvestStatus {
    /// The booking.
    #[serde(flatten)]
    pub volume: FleetHarvest,
    /// `active`, `migrating`, `evicting`, `evicted`, `error`, `pending` (the
    /// host has not reported yet) or `unavailable` (its host is lost).
    pub state: String,
    /// The host's error, or why it was evicted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where the tenant attaches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Exported bytes, once served.
    #[serde(default)]
    pub size_bytes: u64,
    /// gSSD ids on the host backing it.
    #[serde(default)]
    pub gssds: Vec<u64>,
}

/// A harvest job, run in order by the harvest task.
pub(super) enum HarvestJob {
    Create {
        req: control::HarvestRequest,
        /// A tenant token's tenant: the harvest tenant must be its.
        caller: Option<String>,
        tx: tokio::sync::oneshot::Sender<Result<FleetHarvestStatus, ClusterError>>,
    },
    Release {
        name: String,
        tx: tokio::sync::oneshot::Sender<Result<(), ClusterError>>,
    },
}

/// The hosts to try for a demand, best fit first, or what the fleet has at
/// best when none can serve it.
#[derive(Debug, PartialEq)]
pub(super) enum Candidates {
    /// Hosts in the order to try.
    Hosts(Vec<String>),
    /// Nothing fits: what was short.
    Short(String),
}

/// Picks hosts for `capacity` bytes on `bandwidth` channels lasting until
/// `until_ms` (fleet time). First, hosts by their best single gSSD that
/// covers the whole demand (smallest capacity, then bandwidth, then the
/// nearest sufficient expiry: BlockFlex's best fit); then hosts whose free
/// gSSDs together cover it (the host under-harvests), smallest total first.
pub(super) fn candidates(v: &View, capacity: u64, bandwidth: u32, until_ms: u64) -> Candidates {
    let mut single: Vec<((u64, u32, u64), &str)> = Vec::new();
    let mut multi: Vec<((u64, u32), &str)> = Vec::new();
    let mut free = 0usize;
    let mut largest = (0u64, 0u32, "");
    for (id, (h, _)) in &v.hosts {
        let lasting: Vec<_> = h
            .gssds
            .iter()
            .filter(|g| !g.in_use)
            .filter(|g| {
                h.clock_origin_ms
                    .saturating_add(g.expiry_s.saturating_mul(1000))
                    >= until_ms
            })
            .collect();
        free += lasting.len();
        if let Some(best) = lasting
            .iter()
            .filter(|g| g.capacity_bytes >= capacity && g.bandwidth >= bandwidth)
            .map(|g| (g.capacity_bytes, g.bandwidth, g.expiry_s))
            .min()
        {
            single.push((best, id));
            continue;
        }
        let total = (
            lasting.iter().map(|g| g.capacity_bytes).sum::<u64>(),
            lasting.iter().map(|g| g.bandwidth).sum::<u32>(),
        );
        if total.0 > largest.0 {
            largest = (total.0, total.1, id);
        }
        if total.0 >= capacity && total.1 >= bandwidth {
            multi.push((total, id));
        }
    }
    single.sort();
    multi.sort();
    let hosts: Vec<String> = single
        .into_iter()
        .map(|(_, h)| h.to_string())
        .chain(multi.into_iter().map(|(_, h)| h.to_string()))
        .collect();
    if !hosts.is_empty() {
        return Candidates::Hosts(hosts);
    }
    Candidates::Short(format!(
        "{free} free gSSD(s) last long enough on {} live host(s){}",
        v.hosts.len(),
        if largest.2.is_empty() {
            String::new()
        } else {
            format!(
                "; the most on one host is {} on {} channel(s) ({})",
                control::format_size(largest.0),
                largest.1,
                largest.2
            )
        }
    ))
}

fn check(req: &control::HarvestRequest) -> Result<(), ClusterError> {
    if !control::valid_name(&req.name) {
        return Err(ClusterError::Invalid(format!(
            "name {:?}: use 1-64 characters of A-Z, a-z, 0-9, '.', '_', '-'",
            req.name
        )));
    }
    if req.capacity.0 == 0 || req.bandwidth == 0 {
        return Err(ClusterError::Invalid(format!(
            "harvest volume {:?}: needs a capacity above 0 bytes and at least 1 channel",
            req.name
        )));
    }
    if req.duration_s == Some(0) {
        return Err(ClusterError::Invalid(format!(
            "harvest volume {:?}: duration_s must be above 0",
            req.name
        )));
    }
    Ok(())
}

fn status_of(
    volume: FleetHarvest,
    alive: bool,
    obs: Option<ObservedHarvest>,
) -> FleetHarvestStatus {
    let mut s = FleetHarvestStatus {
        volume,
        state: "pending".into(),
        error: None,
        uri: None,
        size_bytes: 0,
        gssds: Vec::new(),
    };
    if let Some(why) = &s.volume.evicted {
        s.state = HarvestState::Evicted.name().into();
        s.error = Some(why.clone());
        return s;
    }
    if !alive {
        s.state = "unavailable".into();
        s.error = Some(format!("host {} is lost", s.volume.host));
        return s;
    }
    if let Some(o) = obs {
        s.state = o.state.name().into();
        s.error = o.error;
        s.uri = o.uri;
        s.size_bytes = o.size_bytes;
        s.gssds = o.gssds;
    }
    s
}

impl Scheduler {
    /// A harvest tenant asks for flash anywhere in the fleet (active
    /// scheduler only). Waits for the chosen host to serve it (up to 20 s,
    /// then answers `pending`).
    pub async fn harvest_request(
        &self,
        req: &control::HarvestRequest,
    ) -> Result<FleetHarvestStatus, ClusterError> {
        self.harvest_request_as(req, None).await
    }

    /// [`Scheduler::harvest_request`] for a tenant token of `caller` (`None`:
    /// an admin): a harvest tenant that is another tenant's vSSD is
    /// [`ClusterError::no_harvest_tenant`], given where a missing one is, so
    /// the caller cannot tell the two apart by any other check's answer.
    pub async fn harvest_request_as(
        &self,
        req: &control::HarvestRequest,
        caller: Option<&str>,
    ) -> Result<FleetHarvestStatus, ClusterError> {
        self.await_leader().await;
        if !self.is_active() {
            return Err(self.not_leader());
        }
        check(req)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.hqueue
            .send(HarvestJob::Create {
                req: req.clone(),
                caller: caller.map(str::to_string),
                tx,
            })
            .map_err(|_| ClusterError::Conflict("the scheduler is stopping".into()))?;
        rx.await
            .map_err(|_| ClusterError::Conflict("the scheduler is stopping".into()))?
    }

    /// The tenant is done with a harvest volume: its booking goes and its
    /// host erases and returns the gSSDs (active scheduler only).
    pub async fn harvest_release(&self, name: &str) -> Result<(), ClusterError> {
        self.await_leader().await;
        if !self.is_active() {
            return Err(self.not_leader());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.hqueue
            .send(HarvestJob::Release {
                name: name.to_string(),
                tx,
            })
            .map_err(|_| ClusterError::Conflict("the scheduler is stopping".into()))?;
        rx.await
            .map_err(|_| ClusterError::Conflict("the scheduler is stopping".into()))?
    }

    /// Runs harvest jobs one after another.
    pub(super) async fn harvest_worker(
        self: std::sync::Arc<Self>,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<HarvestJob>,
    ) {
        while let Some(job) = rx.recv().await {
            match job {
                HarvestJob::Create { req, caller, tx } => {
                    let _ = tx.send(self.harvest_now(&req, caller.as_deref()).await);
                }
                HarvestJob::Release { name, tx } => {
                    let _ = tx.send(self.harvest_release_now(&name).await);
                }
            }
        }
    }

    async fn harvest_now(
        &self,
        req: &control::HarvestRequest,
        caller: Option<&str>,
    ) -> Result<FleetHarvestStatus, ClusterError> {
        if !self.is_active() {
            return Err(self.not_leader());
        }
        let mut c = self.client.clone();
        let tkey = self.keys.vssd(&req.tenant);
        let got = c.get(tkey.clone(), None).await?;
        let Some(kv) = got.kvs().first() else {
            return Err(ClusterError::no_harvest_tenant(&req.tenant));
        };
        let trev = kv.mod_revision();
        let tenant: FleetVssd = decode(kv.key(), kv.value())?;
        if caller.is_some_and(|c| tenant.tenant.as_deref() != Some(c)) {
            // Another tenant's vSSD is no vSSD at all, for this caller.
            return Err(ClusterError::no_harvest_tenant(&req.tenant));
        }
        if tenant.role != control::TenantRole::Harvest {
            return Err(ClusterError::Invalid(format!(
                "vSSD {:?} is not a harvest tenant (its role is regular): create the tenant with --role harvest",
                req.tenant
            )));
        }
        let dur_ms = req.duration_s.unwrap_or(0).saturating_mul(1000);
        let until_ms = (self.wall)().saturating_add(dur_ms);
        let hosts = match candidates(&self.view.lock(), req.capacity.0, req.bandwidth, until_ms) {
            Candidates::Hosts(h) => h,
            Candidates::Short(why) => return Err(self.short(req, &why)),
        };
        let hkey = self.keys.harvest(&req.name);
        let mut refused = Vec::new();
        for host in hosts.into_iter().take(MAX_HOSTS) {
            let rec = FleetHarvest {
                name: req.name.clone(),
                tenant: req.tenant.clone(),
                host: host.clone(),
                capacity_bytes: req.capacity.0,
                bandwidth: req.bandwidth,
                duration_s: req.duration_s,
                owner: tenant.tenant.clone(),
                evicted: None,
            };
            let mut ev = self.make_event(
                "harvest-placed",
                Some(&host),
                format!(
                    "harvest volume {} of {} ({} on {} channel(s)) placed on {host}",
                    req.name,
                    req.tenant,
                    control::format_size(req.capacity.0),
                    req.bandwidth
                ),
            );
            ev.tenant = rec.owner.clone();
            let txn = Txn::new()
                .when(vec![
                    Compare::create_revision(hkey.clone(), CompareOp::Equal, 0),
                    Compare::create_revision(self.keys.vssd(&req.name), CompareOp::Equal, 0),
                    Compare::mod_revision(tkey.clone(), CompareOp::Equal, trev),
                    Compare::create_revision(self.keys.host(&host), CompareOp::Greater, 0),
                ])
                .and_then(vec![
                    TxnOp::put(hkey.clone(), encode(&rec), None),
                    TxnOp::put(self.keys.hdesired(&host, &req.name), encode(&rec), None),
                    TxnOp::put(self.event_key(), encode(&ev), None),
                ])
                .or_else(vec![
                    TxnOp::get(hkey.clone(), None),
                    TxnOp::get(self.keys.vssd(&req.name), None),
                    TxnOp::get(tkey.clone(), None),
                ]);
            let resp = c.txn(txn).await?;
            if !resp.succeeded() {
                let found: Vec<bool> = resp
                    .op_responses()
                    .iter()
                    .map(|r| matches!(r, etcd_client::TxnOpResponse::Get(g) if !g.kvs().is_empty()))
                    .collect();
                if found.first() == Some(&true) || found.get(1) == Some(&true) {
                    return Err(ClusterError::Exists(format!(
                        "a vSSD or harvest volume named {:?} already exists in the fleet",
                        req.name
                    )));
                }
                if found.get(2) != Some(&true) {
                    return Err(ClusterError::NotFound(format!(
                        "harvest tenant {:?} was deleted meanwhile",
                        req.tenant
                    )));
                }
                // The tenant changed or the host went away: next host.
                refused.push(format!("{host}: changed while booking"));
                continue;
            }
            let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
            match self.await_report(&host, &req.name).await? {
                None => {
                    info!(volume = %req.name, host, "harvest volume booked; its host has not reported yet");
                    return Ok(status_of(rec, true, None));
                }
                Some(o) if o.state != HarvestState::Error => {
                    // Mark its gSSDs taken until the host republishes its pool.
                    if let Some((h, _)) = self.view.lock().hosts.get_mut(&host) {
                        for g in h.gssds.iter_mut().filter(|g| o.gssds.contains(&g.id)) {
                            g.in_use = true;
                        }
                    }
                    return Ok(status_of(rec, true, Some(o)));
                }
                Some(o) => {
                    let why = o.error.unwrap_or_default();
                    warn!(volume = %req.name, host, error = %why, "a host refused a harvest volume; trying the next");
                    refused.push(format!("{host}: {why}"));
                    self.withdraw(&req.name, &host, rev).await?;
                }
            }
        }
        Err(self.short(
            req,
            &format!(
                "every host with a fitting gSSD refused ({})",
                refused.join("; ")
            ),
        ))
    }

    fn short(&self, req: &control::HarvestRequest, why: &str) -> ClusterError {
        ClusterError::NoRoom(format!(
            "no gSSD in the fleet for harvest volume {:?}: {} on {} channel(s){} wanted; {why}",
            req.name,
            control::format_size(req.capacity.0),
            req.bandwidth,
            req.duration_s
                .map(|s| format!(" for {s} s"))
                .unwrap_or_default()
        ))
    }

    /// Waits for the host's first report on a volume (`None`: it did not
    /// answer in time).
    async fn await_report(
        &self,
        host: &str,
        name: &str,
    ) -> Result<Option<ObservedHarvest>, ClusterError> {
        let mut c = self.client.clone();
        let key = self.keys.hobserved(host, name);
        let until = tokio::time::Instant::now() + HOST_WAIT;
        while tokio::time::Instant::now() < until {
            let got = c.get(key.clone(), None).await?;
            if let Some(kv) = got.kvs().first() {
                return Ok(Some(decode(kv.key(), kv.value())?));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(None)
    }

    /// Takes back a booking its host refused.
    async fn withdraw(&self, name: &str, host: &str, rev: i64) -> Result<(), ClusterError> {
        let mut c = self.client.clone();
        let hkey = self.keys.harvest(name);
        c.txn(
            Txn::new()
                .when(vec![Compare::mod_revision(
                    hkey.clone(),
                    CompareOp::Equal,
                    rev,
                )])
                .and_then(vec![
                    TxnOp::delete(hkey, None),
                    TxnOp::delete(self.keys.hdesired(host, name), None),
                ]),
        )
        .await?;
        Ok(())
    }

    async fn harvest_release_now(&self, name: &str) -> Result<(), ClusterError> {
        if !self.is_active() {
            return Err(self.not_leader());
        }
        let mut c = self.client.clone();
        let hkey = self.keys.harvest(name);
        for _ in 0..8 {
            let got = c.get(hkey.clone(), None).await?;
            let Some(kv) = got.kvs().first() else {
                return Err(ClusterError::no_harvest_volume(name));
            };
            let h: FleetHarvest = decode(kv.key(), kv.value())?;
            let mut ev = self.make_event(
                "harvest-released",
                Some(&h.host),
                format!(
                    "harvest tenant {} released volume {name} on {}",
                    h.tenant, h.host
                ),
            );
            ev.tenant = h.owner.clone();
            let resp = c
                .txn(
                    Txn::new()
                        .when(vec![Compare::mod_revision(
                            hkey.clone(),
                            CompareOp::Equal,
                            kv.mod_revision(),
                        )])
                        .and_then(vec![
                            TxnOp::delete(hkey.clone(), None),
                            TxnOp::delete(self.keys.hdesired(&h.host, name), None),
                            TxnOp::put(self.event_key(), encode(&ev), None),
                        ]),
                )
                .await?;
            if resp.succeeded() {
                return Ok(());
            }
        }
        Err(ClusterError::Conflict(format!(
            "could not release {name:?}: the fleet kept changing; try again"
        )))
    }

    /// A lost host's harvest volumes go through the eviction path (active
    /// scheduler only): an event each, marked evicted in the index, and no
    /// longer desired, so the host erases them if it comes back.
    pub(super) async fn evict_harvests_of(&self, host: &str) {
        if !self.is_active() {
            return;
        }
        let mut c = self.client.clone();
        let all = match etcd::get_prefix(&mut c, &self.keys.harvests()).await {
            Ok(a) => a,
            Err(e) => {
                warn!(host, error = %e, "cannot read the fleet's harvest volumes to evict the lost host's");
                return;
            }
        };
        for kv in &all {
            let Ok(mut h) = decode::<FleetHarvest>(kv.key(), kv.value())
                .map_err(|e| warn!(error = %e, "ignoring a harvest volume record"))
            else {
                continue;
            };
            if h.host != host || h.evicted.is_some() {
                continue;
            }
            h.evicted = Some(format!("host {host} was lost"));
            let mut ev = self.make_event(
                "harvest-evicted",
                Some(host),
                format!(
                    "harvest volume {} of {} evicted: host {host} was lost",
                    h.name, h.tenant
                ),
            );
            ev.tenant = h.owner.clone();
            let res = c
                .txn(
                    Txn::new()
                        .when(vec![Compare::mod_revision(
                            kv.key().to_vec(),
                            CompareOp::Equal,
                            kv.mod_revision(),
                        )])
                        .and_then(vec![
                            TxnOp::put(kv.key().to_vec(), encode(&h), None),
                            TxnOp::delete(self.keys.hdesired(host, &h.name), None),
                            TxnOp::put(self.event_key(), encode(&ev), None),
                        ]),
                )
                .await;
            if let Err(e) = res {
                warn!(volume = %h.name, error = %e, "cannot evict a lost host's harvest volume");
            }
        }
    }

    /// Every fleet harvest volume with its host's report.
    pub async fn harvest_list(&self) -> Result<Vec<FleetHarvestStatus>, ClusterError> {
        let mut c = self.client.clone();
        let vols = etcd::get_prefix(&mut c, &self.keys.harvests()).await?;
        let mut out = Vec::new();
        for kv in &vols {
            let h: FleetHarvest = match decode(kv.key(), kv.value()) {
                Ok(h) => h,
                Err(e) => {
                    warn!(error = %e, "ignoring a harvest volume record");
                    continue;
                }
            };
            let alive = self.view.lock().hosts.contains_key(&h.host);
            let o = if alive && h.evicted.is_none() {
                self.report(&mut c, &h.host, &h.name).await?
            } else {
                None
            };
            out.push(status_of(h, alive, o));
        }
        Ok(out)
    }

    /// One fleet harvest volume.
    pub async fn harvest_show(&self, name: &str) -> Result<FleetHarvestStatus, ClusterError> {
        let mut c = self.client.clone();
        let got = c.get(self.keys.harvest(name), None).await?;
        let kv = got
            .kvs()
            .first()
            .ok_or_else(|| ClusterError::no_harvest_volume(name))?;
        let h: FleetHarvest = decode(kv.key(), kv.value())?;
        let alive = self.view.lock().hosts.contains_key(&h.host);
        let o = if alive && h.evicted.is_none() {
            self.report(&mut c, &h.host, name).await?
        } else {
            None
        };
        Ok(status_of(h, alive, o))
    }

    async fn report(
        &self,
        c: &mut etcd_client::Client,
        host: &str,
        name: &str,
    ) -> Result<Option<ObservedHarvest>, ClusterError> {
        let got = c.get(self.keys.hobserved(host, name), None).await?;
        Ok(match got.kvs().first() {
            None => None,
            Some(kv) => decode::<ObservedHarvest>(kv.key(), kv.value())
                .map_err(|e| warn!(error = %e, "ignoring a harvest report"))
                .ok(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{GssdSummary, HostRecord};

    fn host(id: &str, origin_ms: u64, gssds: &[(u64, u64, u32, u64, bool)]) -> HostRecord {
        HostRecord {
            id: id.into(),
            nbd: format!("{id}:10809"),
            api: format!("http://{id}"),
            unit_type: "t".into(),
            devices: Vec::new(),
            gssds: gssds
                .iter()
                .map(|&(id, cap, bw, exp, in_use)| GssdSummary {
                    id,
                    capacity_bytes: cap,
                    bandwidth: bw,
                    expiry_s: exp,
                    in_use,
                })
                .collect(),
            started_ms: origin_ms,
            clock_origin_ms: origin_ms,
        }
    }

    fn view(hosts: Vec<HostRecord>) -> View {
        let mut v = View::default();
        for h in hosts {
            v.hosts.insert(h.id.clone(), (h, 1));
        }
        v
    }

    const G: u64 = 1 << 30;

    #[test]
    fn best_fit_over_the_fleet_then_hosts_that_cover_it_together() {
        let v = view(vec![
            // a: one big gSSD; b: the smallest that fits; c: two halves.
            host("a", 0, &[(1, 8 * G, 4, 1000, false)]),
            host(
                "b",
                0,
                &[(1, 2 * G, 2, 1000, false), (2, G, 1, 1000, false)],
            ),
            host("c", 0, &[(1, G, 1, 1000, false), (2, G, 1, 1000, false)]),
            // d: fits, but in use; e: fits, but expires too soon.
            host("d", 0, &[(1, 2 * G, 2, 1000, true)]),
            host("e", 0, &[(1, 2 * G, 2, 10, false)]),
        ]);
        assert_eq!(
            candidates(&v, 2 * G, 2, 100_000),
            Candidates::Hosts(vec!["b".into(), "a".into(), "c".into()])
        );
    }

    #[test]
    fn expiry_is_read_on_each_hosts_own_clock() {
        // Same expiry_s, but host late's clock started 50 s later in fleet time.
        let v = view(vec![
            host("early", 0, &[(1, G, 1, 60, false)]),
            host("late", 50_000, &[(1, G, 1, 60, false)]),
        ]);
        assert_eq!(
            candidates(&v, G, 1, 90_000),
            Candidates::Hosts(vec!["late".into()])
        );
    }

    #[test]
    fn nothing_fits_says_what_the_fleet_has() {
        let v = view(vec![host("a", 0, &[(1, G, 1, 1000, false)])]);
        let Candidates::Short(why) = candidates(&v, 4 * G, 1, 0) else {
            panic!("a 4 GiB demand fits nowhere");
        };
        assert!(why.contains("1 free gSSD"), "{why}");
        assert!(why.contains("1G on 1 channel(s) (a)"), "{why}");
    }

    #[test]
    fn requests_are_checked() {
        let ok = control::HarvestRequest {
            name: "h1".into(),
            tenant: "t".into(),
            capacity: control::ByteSize(G),
            bandwidth: 1,
            duration_s: None,
        };
        assert!(check(&ok).is_ok());
        let mut bad = ok.clone();
        bad.name = "a b".into();
        assert!(check(&bad).is_err());
        let mut bad = ok.clone();
        bad.bandwidth = 0;
        assert!(check(&bad).is_err());
        let mut bad = ok;
        bad.duration_s = Some(0);
        assert!(check(&bad).unwrap_err().to_string().contains("duration_s"));
    }
}
