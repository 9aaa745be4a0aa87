//! One run of one scenario: the lending slots, the events and the step loop,
//! deciding through the daemon's `lend` functions on a virtual clock (see the
//! parent module's docs for the steps).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use clock::{Clock, Nanos, VirtualClock};
use harvest::{
    classify, Demand, Gssd, GssdPool, HarvestConfig, ReclaimAction, RefreshTimer, Resources,
};
use lend::{FixedLifetime, HomeSample, Lendable, Lender, UnsoldPolicy};

use super::{
    Fleet, Policies, Population, Scenario, ScenarioReport, UnitAverages, UtilStats, LEND_FOR, NONE,
    STEP,
};
use crate::{Counters, FleetError};

/// What a lending slot lends: a home's one gSSD, or one group of a server's
/// unsold channels (gSSD id = slot).
#[derive(Debug, Clone, Copy)]
struct HomeState {
    lent: bool,
    cap: u64,
    bw: u32,
    tenant: u32,
    /// The tenant's share on this gSSD: blocks of its demand it holds (the
    /// daemon's segment: what is still missing, up to the gSSD's capacity,
    /// in the order the split took the gSSDs) and channels of its demand.
    share_cap: u64,
    share_bw: u32,
    /// Since when the tenant holds it.
    since: Nanos,
    /// An unsold group: its channels (the first `bw`).
    group: [u32; UNSOLD_GROUP],
}

impl HomeState {
    /// Its unsold group's channels.
    fn group(&self) -> &[u32] {
        &self.group[..(self.bw as usize).min(UNSOLD_GROUP)]
    }
}

const IDLE: HomeState = HomeState {
    lent: false,
    cap: 0,
    bw: 0,
    tenant: NONE,
    share_cap: 0,
    share_bw: 0,
    since: 0,
    group: [0; UNSOLD_GROUP],
};

/// Channels per gSSD of unsold channels: the daemon's default `unsold_group`.
const UNSOLD_GROUP: usize = 4;

/// Lending slots per server where unsold channels lend in groups: a server
/// of 16 channels never has more groups than channels.
const UNSOLD_SLOTS: usize = 16;

/// Channel numbers: a home lends its first free ones, a server's regular
/// tenants hold its lowest.
const CHANNELS: [u32; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Running,
    Done,
    Evicted,
    Unserved,
}

/// Time sums and maxima of [cap before, cap after, bw before, bw after] per unit.
struct Acc {
    sum: Vec<[f64; 4]>,
    max: Vec<[f32; 4]>,
    samples: usize,
}

impl Acc {
    fn new(n: usize) -> Self {
        Self {
            sum: vec![[0.0; 4]; n],
            max: vec![[0.0; 4]; n],
            samples: 0,
        }
    }

    #[inline]
    fn add(&mut self, i: usize, v: [f32; 4]) {
        let (s, m) = (&mut self.sum[i], &mut self.max[i]);
        for k in 0..4 {
            s[k] += v[k] as f64;
            m[k] = m[k].max(v[k]);
        }
    }

    fn averages(&self) -> UnitAverages {
        let n = self.samples.max(1) as f64;
        self.sum
            .iter()
            .map(|s| [0, 1, 2, 3].map(|k| (s[k] / n) as f32))
            .collect()
    }

    fn stats(&self, dim: usize) -> UtilStats {
        let avgs = self.averages();
        let (b, a) = (2 * dim, 2 * dim + 1);
        let mut st = UtilStats {
            units: avgs.len(),
            ..UtilStats::default()
        };
        for (i, v) in avgs.iter().enumerate() {
            let m = &self.max[i];
            st.avg_before += v[b] as f64;
            st.avg_after += v[a] as f64;
            st.max_before += m[b] as f64;
            st.max_after += m[a] as f64;
            if v[b] < 0.6 {
                st.under60_units += 1;
                st.under60_avg_before += v[b] as f64;
                st.under60_avg_after += v[a] as f64;
                st.under60_max_before += m[b] as f64;
                st.under60_max_after += m[a] as f64;
            }
        }
        let n = st.units.max(1) as f64;
        st.avg_before /= n;
        st.avg_after /= n;
        st.max_before /= n;
        st.max_after /= n;
        let u = st.under60_units.max(1) as f64;
        st.under60_avg_before /= u;
        st.under60_avg_after /= u;
        st.under60_max_before /= u;
        st.under60_max_after /= u;
        st
    }
}

pub(super) struct Run<'a> {
    f: &'a Fleet,
    s: Scenario,
    pop: &'a Population,
    cfg: HarvestConfig,
    /// The run's time, as every decision reads it: set to each step's start
    /// and to each event's instant.
    clock: VirtualClock,
    pool: GssdPool,
    /// Lending slots, `spp` per home (gSSD id = slot): one where homes lend
    /// through a [`lend::LendPolicy`], [`UNSOLD_SLOTS`] where servers lend groups of
    /// unsold channels.
    slots: Vec<HomeState>,
    spp: usize,
    status: Vec<Status>,
    /// The gSSDs (slots) each running tenant holds: one, or several when its
    /// demand was split.
    tenant_gssds: Vec<Vec<u32>>,
    /// Block-seconds held by tenants: granted (whole gSSDs) and used (their
    /// shares of the demand).
    held_block_s: [u128; 2],
    /// Each home's name, as an unsold policy keys its device.
    names: Vec<String>,
    /// Homes that took their flash back lend nothing for a granule (the
    /// daemon's rule).
    cooling: lend::Cooling<usize>,
    /// Whether a demand no single gSSD covers may take several.
    split: bool,
    c: Counters,
}

impl<'a> Run<'a> {
    pub(super) fn new(f: &'a Fleet, s: Scenario, unsold_groups: bool) -> Self {
        let pop = f.population(s);
        let cfg = f.cfg.harvest_cfg;
        let spp = if unsold_groups { UNSOLD_SLOTS } else { 1 };
        Self {
            f,
            s,
            pop,
            cfg,
            clock: VirtualClock::new(0),
            pool: GssdPool::new(cfg).expect("config validated"),
            slots: vec![IDLE; pop.homes.len() * spp],
            spp,
            status: vec![Status::Pending; f.tenants.len()],
            tenant_gssds: vec![Vec::new(); f.tenants.len()],
            held_block_s: [0; 2],
            names: (0..pop.homes.len()).map(|h| format!("ssd{h}")).collect(),
            cooling: lend::Cooling::default(),
            split: f.cfg.split,
            c: Counters::default(),
        }
    }

    fn gssd_home(&self, h: usize) -> Option<u64> {
        // Unsold channels belong to no regular vSSD (Figure 10's home is empty).
        (self.s == Scenario::Sold).then_some(h as u64)
    }

    /// Slot `slot` takes its gSSD back now.
    fn reclaim(&mut self, slot: usize) -> Result<(), FleetError> {
        let now = self.clock.now();
        let t = self.slots[slot].tenant;
        if t == NONE {
            let g = self.pool.remove(slot as u64)?;
            // Past its expiry it is no loss: the refresh timer just has not run yet.
            if g.expiry <= now {
                self.c.expired += 1;
            } else {
                self.c.reclaimed_unassigned += 1;
            }
        } else {
            // The tenant loses only this gSSD's share: a replacement must hold
            // what it uses here, for the rest of its time.
            let tn = &self.f.tenants[t as usize];
            let st = self.slots[slot];
            let need = Demand::remaining(
                &self.cfg,
                st.share_cap.max(1),
                st.share_bw,
                tn.arrival + tn.demand.duration,
                now,
            );
            let r = self.pool.early_reclaim(slot as u64, &need, now)?;
            self.c.reclamations += 1;
            self.held_until(slot, now);
            let held = &mut self.tenant_gssds[t as usize];
            held.retain(|&g| g != slot as u32);
            match r.action {
                ReclaimAction::Migrate { to } => {
                    self.c.migrations += 1;
                    held.push(to as u32);
                    let d = &mut self.slots[to as usize];
                    d.tenant = t;
                    d.share_cap = st.share_cap;
                    d.share_bw = st.share_bw;
                    d.since = now;
                }
                _ => {
                    // A volume missing a piece is gone: the tenant is evicted
                    // and its other gSSDs are released.
                    self.c.exceptions += 1;
                    self.status[t as usize] = Status::Evicted;
                    self.slots[slot] = IDLE;
                    self.release_all(t as usize)?;
                }
            }
        }
        self.slots[slot] = IDLE;
        Ok(())
    }

    /// Counts slot `slot`'s tenant's hold of it up to `now`.
    fn held_until(&mut self, slot: usize, now: Nanos) {
        let st = &self.slots[slot];
        let secs = u128::from(now.saturating_sub(st.since) / clock::SEC);
        self.held_block_s[0] += u128::from(st.cap) * secs;
        self.held_block_s[1] += u128::from(st.share_cap) * secs;
    }

    /// Tenant `t` gives back every gSSD it holds (job end, or eviction):
    /// each goes back to the pool or home by the release rule.
    fn release_all(&mut self, t: usize) -> Result<(), FleetError> {
        let now = self.clock.now();
        for g in std::mem::take(&mut self.tenant_gssds[t]) {
            let g = g as usize;
            self.held_until(g, now);
            let r = self.pool.release(g as u64, t as u64, now)?;
            if r.action == ReclaimAction::ReturnToPool {
                self.c.returned_to_pool += 1;
                let st = &mut self.slots[g];
                st.tenant = NONE;
                st.share_cap = 0;
                st.share_bw = 0;
            } else {
                self.c.erased_on_release += 1;
                self.slots[g] = IDLE;
            }
        }
        Ok(())
    }

    fn end_job(&mut self, t: usize) -> Result<(), FleetError> {
        if self.status[t] != Status::Running {
            return Ok(());
        }
        self.release_all(t)?;
        self.status[t] = Status::Done;
        self.c.completed += 1;
        Ok(())
    }

    fn arrive(
        &mut self,
        t: usize,
        ends: &mut BinaryHeap<Reverse<(Nanos, u32)>>,
    ) -> Result<(), FleetError> {
        let now = self.clock.now();
        let tn = self.f.tenants[t];
        self.c.requests += 1;
        // One gSSD that covers the demand, else several (the daemon's
        // `create_volume`), all or nothing.
        let got = if self.split {
            self.pool.harvest_split(t as u64, &tn.demand, now)?
        } else {
            let q = tn.demand.quantized(&self.cfg);
            self.pool.harvest(t as u64, &q, now)?.map(|g| vec![g])
        };
        match got {
            Some(gs) => {
                self.c.served += 1;
                if gs.len() > 1 {
                    self.c.split_served += 1;
                    self.c.split_gssds += gs.len() as u64;
                }
                self.status[t] = Status::Running;
                let (mut cap, mut bw) = (tn.demand.capacity, tn.demand.bandwidth);
                let mut granted = Resources {
                    capacity: 0,
                    bandwidth: 0,
                    duration: Nanos::MAX,
                };
                for g in &gs {
                    let st = &mut self.slots[g.id as usize];
                    st.tenant = t as u32;
                    st.share_cap = cap.min(g.capacity);
                    st.share_bw = bw.min(g.bandwidth);
                    st.since = now;
                    cap -= st.share_cap;
                    bw -= st.share_bw;
                    granted.capacity += g.capacity;
                    granted.bandwidth += g.bandwidth;
                    granted.duration = granted.duration.min(g.expiry - now);
                }
                self.tenant_gssds[t] = gs.iter().map(|g| g.id as u32).collect();
                ends.push(Reverse((now + tn.demand.duration, t as u32)));
                if let Some((b, c)) = classify(granted, granted, tn.demand.into()).waste {
                    self.c.waste_blocks += b;
                    self.c.waste_channels += c as u64;
                }
            }
            None => {
                self.c.unserved += 1;
                self.status[t] = Status::Unserved;
            }
        }
        Ok(())
    }

    /// Early reclamation on real usage at `step`: a home whose usage plus what
    /// it lends exceeds its allotment takes its gSSD back and cools (the
    /// daemon's `needs_reclaim`); a server's groups that regular tenants'
    /// channels reach are taken back and sold (the daemon's reclaim hook).
    fn reclaim_needed(&mut self, pols: &mut Policies, step: usize) -> Result<(), FleetError> {
        let now = self.clock.now();
        let pop = self.pop;
        let usage = &*pop.usage;
        let n = usage.steps;
        for h in 0..pop.homes.len() {
            let o = h * n + step;
            let home = pop.homes[h];
            let used_c = u32::from(usage.channels[o]);
            match pols.unsold.as_deref_mut() {
                Some(u) => {
                    // Regular tenants hold a server's lowest channels.
                    for slot in h * self.spp..(h + 1) * self.spp {
                        let st = self.slots[slot];
                        let group = st.group();
                        if st.lent && group.iter().any(|&c| c < used_c) {
                            u.sold(now, &self.names[h], group);
                            self.reclaim(slot)?;
                        }
                    }
                }
                None => {
                    let st = self.slots[h];
                    if st.lent
                        && (used_c + st.bw > home.channels
                            || u64::from(usage.blocks[o]) + st.cap > home.blocks)
                    {
                        self.cooling.took_back(h, now);
                        self.reclaim(h)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The refresh (every `refresh_interval_s`): the policies give each pooled
    /// gSSD its new expiry, as in the daemon ([`lend::expiry_updates`]);
    /// unassigned gSSDs that expired leave the pool, assigned ones are
    /// reclaimed early.
    fn refresh(&mut self, pols: &mut Policies) -> Result<(), FleetError> {
        let now = self.clock.now();
        let mut fixed = FixedLifetime::new(LEND_FOR);
        let unsold_groups = pols.unsold.is_some();
        let unsold: &mut dyn UnsoldPolicy = match pols.unsold.as_deref_mut() {
            Some(u) => u,
            // Never asked: without an unsold policy every gSSD is a home's.
            None => &mut fixed,
        };
        let lenders: Vec<(u64, Lender<'_>)> = self
            .pool
            .iter()
            .map(|g| {
                let slot = g.id as usize;
                let h = slot / self.spp;
                let l = if unsold_groups {
                    let st = &self.slots[slot];
                    Lender::Unsold {
                        device: &self.names[h],
                        channels: st.group(),
                    }
                } else {
                    Lender::Home(h as u64)
                };
                (g.id, l)
            })
            .collect();
        let updates = lend::expiry_updates(
            pols.lend.as_mut(),
            unsold,
            now,
            self.cfg.duration_granule(),
            lenders,
        );
        let rep = self.pool.refresh(now, &updates);
        for g in rep.dropped {
            self.c.expired += 1;
            self.slots[g.id as usize] = IDLE;
        }
        for id in rep.expired_in_use {
            // An eviction earlier in this loop may have released it.
            if self.pool.get(id).is_some_and(|g| g.in_use()) {
                self.reclaim(id as usize)?;
            }
        }
        Ok(())
    }

    /// Puts a new gSSD in slot `slot` of home `h`.
    fn create(
        &mut self,
        slot: usize,
        h: usize,
        cap: u64,
        group: &[u32],
        lasts: Nanos,
    ) -> Result<(), FleetError> {
        let bw = group.len() as u32;
        let g = Gssd::new(
            &self.cfg,
            slot as u64,
            self.gssd_home(h),
            cap,
            bw,
            self.clock.now(),
            lasts,
        )?;
        self.pool.insert(g)?;
        self.c.gssds_created += 1;
        let mut st = HomeState {
            lent: true,
            cap,
            bw,
            ..IDLE
        };
        let k = group.len().min(UNSOLD_GROUP);
        st.group[..k].copy_from_slice(&group[..k]);
        self.slots[slot] = st;
        Ok(())
    }

    /// Homes that lend nothing ask the policies, and lend what the daemon's
    /// decisions make of the answer ([`lend::plan_lend`]); with an unsold
    /// policy, each server's unsold channels that no gSSD holds become gSSDs
    /// of [`UNSOLD_GROUP`] channels ([`lend::plan_unsold`]), as the daemon's.
    fn lend_idle(
        &mut self,
        pols: &mut Policies,
        step: usize,
        free: &mut Vec<(u32, u32)>,
    ) -> Result<(), FleetError> {
        let now = self.clock.now();
        let pop = self.pop;
        let usage = &*pop.usage;
        let n = usage.steps;
        let chunk = self.cfg.chunk_blocks;
        let granule = self.cfg.duration_granule();
        self.cooling.expire(now, granule);
        for h in 0..pop.homes.len() {
            let home = pop.homes[h];
            let o = h * n + step;
            let used_c = u32::from(usage.channels[o]);
            if let Some(u) = pols.unsold.as_deref_mut() {
                let slots = h * self.spp..(h + 1) * self.spp;
                let mut held = 0u32;
                for st in self.slots[slots.clone()].iter().filter(|s| s.lent) {
                    for &c in st.group() {
                        held |= 1 << c;
                    }
                }
                let mut avail = [0u32; 16];
                let mut na = 0;
                for c in used_c..home.channels.min(16) {
                    if held & (1 << c) == 0 {
                        avail[na] = c;
                        na += 1;
                    }
                }
                for group in avail[..na].chunks(UNSOLD_GROUP) {
                    let Some(slot) = slots.clone().find(|&s| !self.slots[s].lent) else {
                        break;
                    };
                    let bpc = self.f.cfg.blocks_per_channel;
                    let Some((cap, lasts)) =
                        lend::plan_unsold(u, now, &self.names[h], group, bpc, chunk)
                    else {
                        continue;
                    };
                    if lasts >= granule {
                        self.create(slot, h, cap, group, lasts)?;
                    }
                }
                continue;
            }
            if self.slots[h].lent || self.cooling.cooling(&h, now, granule) {
                continue;
            }
            // What is free now, spread over the free channels, as the daemon's
            // FTL reports what it could empty on each.
            let (fc, fb) = (
                home.channels.saturating_sub(used_c),
                home.blocks.saturating_sub(u64::from(usage.blocks[o])),
            );
            free.clear();
            free.extend((0..fc).map(|c| {
                (
                    c,
                    (fb / u64::from(fc.max(1))).min(u64::from(u32::MAX)) as u32,
                )
            }));
            let ask = Lendable {
                home: h as u64,
                channels: home.channels,
                blocks: home.blocks,
                extent_blocks: (home.blocks / u64::from(home.channels.max(1))) as u32,
                units: 1,
                chunk_blocks: chunk,
                per_channel: free,
            };
            if let Some(p) = lend::plan_lend(pols.lend.as_mut(), now, &ask, granule) {
                self.create(h, h, p.capacity, &CHANNELS[..p.channels as usize], p.lasts)?;
            }
        }
        Ok(())
    }

    pub(super) fn go(
        mut self,
        pols: &mut Policies,
        progress: &mut dyn FnMut(),
    ) -> Result<ScenarioReport, FleetError> {
        let pop = self.pop;
        let usage = &*pop.usage;
        let n = usage.steps;
        let warmup = self.f.warmup;
        let nh = pop.homes.len();
        let mut vm = Acc::new(nh);
        let mut ssd = Acc::new(pop.hosts);
        let mut host_sum = vec![[0f64; 6]; pop.hosts];
        let mut timer = RefreshTimer::new(warmup as Nanos * STEP, self.cfg.refresh_interval());
        let mut ends: BinaryHeap<Reverse<(Nanos, u32)>> = BinaryHeap::new();
        let mut next = 0usize;
        let tenants = &self.f.tenants;
        let sold = self.s == Scenario::Sold;
        let mut samples: Vec<HomeSample> = Vec::with_capacity(nh);
        let mut free: Vec<(u32, u32)> = Vec::new();
        for step in 0..n {
            self.clock.set(step as Nanos * STEP);
            let now = self.clock.now();
            samples.clear();
            samples.extend((0..nh).map(|h| {
                let o = h * n + step;
                let home = pop.homes[h];
                let (c, b) = (u32::from(usage.channels[o]), u64::from(usage.blocks[o]));
                HomeSample {
                    home: h as u64,
                    channels: home.channels,
                    blocks: home.blocks,
                    used_channels: c,
                    used_blocks: b,
                    bw: c as f32 / home.channels.max(1) as f32,
                    iops: c as f32 / home.channels.max(1) as f32,
                    util: b as f32 / home.blocks.max(1) as f32,
                }
            }));
            pols.lend
                .observe(now, &samples)
                .map_err(|e| FleetError::BadParam(format!("predictor {}: {e}", pols.name)))?;
            if step < warmup {
                progress();
                continue;
            }
            // 2-4. the daemon's period: early reclamation on real usage, the
            // refresh when its timer fires, lending.
            lend::run_period(&mut SimPeriod {
                run: &mut self,
                pols,
                step,
                now,
                timer: &mut timer,
                free: &mut free,
            })?;
            // 5. events inside the step, in time order (ends before arrivals at a tie)
            let until = now + STEP;
            loop {
                let te = ends.peek().map_or(Nanos::MAX, |e| e.0 .0);
                let ta = tenants.get(next).map_or(Nanos::MAX, |t| t.arrival);
                let t = te.min(ta);
                if t >= until {
                    break;
                }
                self.clock.set(t);
                if te <= ta {
                    let Reverse((_, id)) = ends.pop().expect("peeked");
                    self.end_job(id as usize)?;
                } else {
                    self.arrive(next, &mut ends)?;
                    next += 1;
                }
            }
            // 6. utilisation
            for hs in host_sum.iter_mut() {
                *hs = [0.0; 6];
            }
            for h in 0..nh {
                let home = pop.homes[h];
                let o = h * n + step;
                let used_b = usage.blocks[o] as u64;
                let (mut lent_b, mut lent_c, mut tc, mut tb) = (0u64, 0u32, 0f64, 0f64);
                for st in &self.slots[h * self.spp..(h + 1) * self.spp] {
                    if !st.lent {
                        continue;
                    }
                    lent_b += st.cap;
                    lent_c += st.bw;
                    if st.tenant != NONE {
                        let tn = &tenants[st.tenant as usize];
                        let i = if sold { tn.intensity } else { 1.0 };
                        tc += st.share_cap as f64;
                        tb += st.share_bw as f64 * i as f64;
                    }
                }
                if used_b + lent_b > home.blocks
                    || usage.channels[o] as u32 + lent_c > home.channels
                {
                    self.c.invariant_violations += 1;
                }
                let bw_b = pop.bw_bp[o] as f64 / 10_000.0 * home.channels as f64;
                let hb = home.blocks as f64;
                let hc = home.channels as f64;
                vm.add(
                    h,
                    [
                        (used_b as f64 / hb) as f32,
                        ((used_b as f64 + tc) / hb) as f32,
                        (bw_b / hc) as f32,
                        ((bw_b + tb) / hc) as f32,
                    ],
                );
                let hs = &mut host_sum[home.host as usize];
                hs[0] += used_b as f64;
                hs[1] += used_b as f64 + tc;
                hs[2] += hb;
                hs[3] += bw_b;
                hs[4] += bw_b + tb;
                hs[5] += hc;
            }
            vm.samples += 1;
            for (i, hs) in host_sum.iter().enumerate() {
                ssd.add(
                    i,
                    [
                        (hs[0] / hs[2]) as f32,
                        (hs[1] / hs[2]) as f32,
                        (hs[3] / hs[5]) as f32,
                        (hs[4] / hs[5]) as f32,
                    ],
                );
            }
            ssd.samples += 1;
            progress();
        }
        let end = n as Nanos * STEP;
        for slot in 0..self.slots.len() {
            if self.slots[slot].tenant != NONE {
                self.held_until(slot, end);
            }
        }
        // GB-hours: a channel is 64 GB.
        let gb_h = |bs: u128| (bs * 64 / (u128::from(self.f.cfg.blocks_per_channel) * 3600)) as u64;
        self.c.capacity_gb_hours = gb_h(self.held_block_s[0]);
        self.c.used_gb_hours = gb_h(self.held_block_s[1]);
        self.c.running_at_end = self
            .status
            .iter()
            .filter(|&&s| s == Status::Running)
            .count() as u64;
        self.c.live_at_end = self.pool.len() as u64;
        Ok(ScenarioReport {
            scenario: self.s,
            predictor: pols.name.clone(),
            homes: nh,
            ssds: pop.hosts,
            vm_capacity: vm.stats(0),
            vm_bandwidth: vm.stats(1),
            ssd_capacity: ssd.stats(0),
            ssd_bandwidth: ssd.stats(1),
            counters: self.c,
            vm_averages: vm.averages(),
            ssd_averages: ssd.averages(),
        })
    }
}

/// One period's acts on the modelled fleet, in the daemon's order.
struct SimPeriod<'r, 'a, 'p> {
    run: &'r mut Run<'a>,
    pols: &'p mut Policies,
    step: usize,
    now: Nanos,
    timer: &'r mut RefreshTimer,
    free: &'r mut Vec<(u32, u32)>,
}

impl lend::PeriodSteps for SimPeriod<'_, '_, '_> {
    type Error = FleetError;

    /// Nothing: a modelled migration completes the moment it starts
    /// ([`Run::reclaim`]).
    fn finish_migrations(&mut self) -> Result<(), FleetError> {
        Ok(())
    }

    /// Nothing: a modelled tenant with no replacement is evicted at once.
    fn due_evictions(&mut self) -> Result<(), FleetError> {
        Ok(())
    }

    fn reclaim_where_needed(&mut self) -> Result<(), FleetError> {
        self.run.reclaim_needed(self.pols, self.step)
    }

    fn refresh_due(&mut self) -> bool {
        self.timer.fire(self.now)
    }

    fn refresh(&mut self) -> Result<(), FleetError> {
        self.run.refresh(self.pols)
    }

    fn lend_idle(&mut self) -> Result<(), FleetError> {
        self.run.lend_idle(self.pols, self.step, self.free)
    }

    /// Nothing: the simulated harvest tenants arrive with their demand (the
    /// fleet's generators), rather than predicting it.
    fn serve_demand(&mut self) -> Result<(), FleetError> {
        Ok(())
    }
}
