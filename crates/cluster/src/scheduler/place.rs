//! Placement: a create request becomes a booking of channels or of a block
//! range on an SLA unit, committed in one etcd transaction.
//!
//! One task, the committer, takes requests in the order they came, plans
//! those queued together one after another on the view, and books them in
//! one transaction (group commit). A failed transaction retries each request
//! on its own on fresh reads. By channel count the plan is a best fit over
//! devices; by curve it is `sla::Placer`, the code `sim sla-placement` runs,
//! rebuilt from the fleet's units for each request.

use super::*;

/// A placer rebuilt from the view: the placer, its unit ids → (host,
/// device), and the next free tenant id.
pub(super) type RebuiltPlacer = (Placer, BTreeMap<u64, (String, String)>, u64);

/// Most placements committed in one transaction: 4 writes and up to 3
/// compares each, within etcd's default limit of 128 operations per
/// transaction.
const BATCH: usize = 24;

/// A placement request waiting for the committer.
pub(super) struct Pending {
    req: CreateRequest,
    tx: tokio::sync::oneshot::Sender<Result<VssdStatus, ClusterError>>,
}

/// What the committer does, in the order asked: it is the one task that
/// changes bookings, so they never race each other and need no lock.
pub(super) enum Job {
    Create(Pending),
    Delete {
        name: String,
        tx: tokio::sync::oneshot::Sender<Result<(), ClusterError>>,
    },
}

/// What one placement decided, before it is committed.
pub(super) struct Plan {
    vssd: FleetVssd,
    alloc: DeviceAlloc,
    expect_rev: i64,
}

pub(super) fn blocks_for(capacity: u64, row_bytes: u64) -> u32 {
    // The FTL exports 7/8 of the raw flash by default: ask for enough raw.
    let raw = capacity.saturating_mul(8).div_ceil(7);
    (raw.div_ceil(row_bytes.max(1)) as u32).max(2)
}

impl Scheduler {
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
    pub(super) async fn committer(
        self: Arc<Self>,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<Job>,
    ) {
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
        let mut ev = self.make_event(
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
        );
        ev.tenant = v.tenant.clone();
        ev
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
                // Not the list of live hosts: tenants may pin their vSSDs, and
                // the fleet's hosts are the admin's to list (GET /v1/cluster/hosts).
                return Err(ClusterError::NotFound(format!(
                    "no live host named {h:?} in the fleet (an admin lists them with `flexssd cluster hosts` or GET /v1/cluster/hosts)"
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
