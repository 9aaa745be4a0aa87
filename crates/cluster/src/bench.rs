//! The scale benchmark: many light host agents and one scheduler against one
//! real etcd, all in this process.
//!
//! A light agent is the real [`Agent`] (same sessions, lease, keep-alive,
//! watch and reports) over an in-memory host ([`LightHost`]) that "creates"
//! a vSSD by recording it, so that a 2-core machine can run a thousand of
//! them. The scheduler is the real [`Scheduler`]. What is measured is the
//! control plane: registration, placements per second, loss detection, and
//! what each host costs etcd in keys and bytes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::watch;

use crate::agent::{Agent, AgentConfig, HostPort};
use crate::etcd::{self, EtcdConfig};
use crate::keys::{DeviceSummary, FleetHarvest, FleetVssd, GssdSummary, ObservedHarvest};
use crate::scheduler::{CreateRequest, Scheduler, SchedulerConfig};
use crate::{ClusterError, WallMs};

/// A host that keeps its vSSDs in memory.
pub struct LightHost {
    devices: u32,
    channels: u32,
    vssds: Mutex<BTreeMap<String, FleetVssd>>,
}

impl LightHost {
    /// A host with `devices` devices of `channels` channels each.
    pub fn new(devices: u32, channels: u32) -> Self {
        LightHost {
            devices,
            channels,
            vssds: Mutex::new(BTreeMap::new()),
        }
    }
}

impl HostPort for LightHost {
    fn now_ms(&self) -> u64 {
        0
    }
    fn devices(&self) -> Vec<DeviceSummary> {
        let v = self.vssds.lock();
        (0..self.devices)
            .map(|d| {
                let name = format!("ssd{d}");
                let used: Vec<u32> = v
                    .values()
                    .filter(|x| x.device == name)
                    .flat_map(|x| x.channels.iter().copied())
                    .collect();
                DeviceSummary {
                    free_channels: (0..self.channels).filter(|c| !used.contains(c)).collect(),
                    name,
                    channels: self.channels,
                    blocks_per_plane: 64,
                    row_bytes: u64::from(self.channels) << 21,
                    spare_blocks: 4,
                    unit_curves: BTreeMap::new(),
                }
            })
            .collect()
    }
    fn gssds(&self) -> Vec<GssdSummary> {
        Vec::new()
    }
    fn ensure_vssd(&self, v: &FleetVssd) -> Result<u64, String> {
        self.vssds.lock().insert(v.name.clone(), v.clone());
        Ok(1 << 30)
    }
    fn remove_vssd(&self, name: &str) -> Result<(), String> {
        self.vssds.lock().remove(name);
        Ok(())
    }
    fn ensure_harvest(&self, h: &FleetHarvest) -> Result<ObservedHarvest, String> {
        Err(format!(
            "harvest volume {:?}: a light host of the scale benchmark has no flash to lend",
            h.name
        ))
    }
    fn harvest_report(&self, _name: &str) -> Option<ObservedHarvest> {
        None
    }
    fn release_harvest(&self, _name: &str) -> Result<(), String> {
        Ok(())
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// etcd.
    pub etcd: EtcdConfig,
    /// Key prefix (a fresh one per run).
    pub prefix: String,
    /// Light hosts.
    pub hosts: usize,
    /// Devices per host.
    pub devices: u32,
    /// Channels per device.
    pub channels: u32,
    /// vSSDs to place.
    pub placements: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Host lease TTL.
    pub ttl: Duration,
    /// etcd connections the agents share.
    pub connections: usize,
}

/// What it measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Hosts registered.
    pub hosts_registered: usize,
    /// Seconds until all had registered.
    pub register_s: f64,
    /// Placements that succeeded.
    pub placed: usize,
    /// Placements refused (no room) or failed.
    pub failed: usize,
    /// Seconds the placements took.
    pub place_s: f64,
    /// Placements per second.
    pub placements_per_s: f64,
    /// Median and 99th percentile of one placement, milliseconds.
    pub place_p50_ms: f64,
    /// 99th percentile, milliseconds.
    pub place_p99_ms: f64,
    /// Seconds from killing one agent (no lease revoke) to the scheduler
    /// seeing the host lost.
    pub loss_detect_s: f64,
    /// The lease TTL, seconds.
    pub ttl_s: f64,
    /// Keys under the prefix.
    pub keys: i64,
    /// Keys per host.
    pub keys_per_host: f64,
    /// Bytes of values under the prefix, per host.
    pub value_bytes_per_host: f64,
    /// etcd's database size, bytes.
    pub db_bytes: i64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Runs the benchmark; `progress` is told what phase it is in.
pub async fn run(
    cfg: BenchConfig,
    wall: WallMs,
    progress: impl Fn(&str),
) -> Result<BenchReport, ClusterError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut clients = Vec::new();
    for _ in 0..cfg.connections.max(1) {
        clients.push(etcd::connect(&cfg.etcd).await?);
    }
    let sched = Scheduler::start(
        SchedulerConfig {
            etcd: cfg.etcd.clone(),
            prefix: cfg.prefix.clone(),
            id: "bench".into(),
            api: "http://127.0.0.1:0".into(),
            ttl: cfg.ttl,
            catalog: sla::catalog::Catalog::builtin(),
            metric: sla::placement::Metric::Dot,
            keep_events: 100_000,
        },
        wall.clone(),
        stop_rx.clone(),
        1,
    )
    .await?;
    progress(&format!("registering {} hosts", cfg.hosts));
    let t0 = Instant::now();
    let mut agents = Vec::new();
    for i in 0..cfg.hosts {
        let host: Arc<dyn HostPort> = Arc::new(LightHost::new(cfg.devices, cfg.channels));
        let a = Agent::new(
            AgentConfig {
                etcd: cfg.etcd.clone(),
                prefix: cfg.prefix.clone(),
                host_id: format!("h{i:06}"),
                nbd: format!("10.0.{}.{}:10809", i / 250, i % 250),
                nbd_tls: false,
                api: format!("http://10.0.{}.{}:8740", i / 250, i % 250),
                unit_type: "ssd".into(),
                ttl: cfg.ttl,
                publish: Duration::from_secs(2),
            },
            host,
            wall.clone(),
        );
        let c = clients[i % clients.len()].clone();
        agents.push(tokio::spawn(a.run_on(c, stop_rx.clone())));
    }
    // Wait for the scheduler to lead and to see every host.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = sched.status();
        if s.active && s.hosts_alive >= cfg.hosts {
            break;
        }
        if Instant::now() > deadline {
            return Err(ClusterError::Conflict(format!(
                "only {} of {} hosts registered in 120 s",
                s.hosts_alive, cfg.hosts
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let register_s = t0.elapsed().as_secs_f64();

    progress(&format!("placing {} vSSDs", cfg.placements));
    let t1 = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..cfg.concurrency.max(1) {
        let (s, next, n) = (sched.clone(), next.clone(), cfg.placements);
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut failed = 0;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let req = CreateRequest {
                    name: format!("v{i:07}"),
                    channels: Some(1 + (i % 3) as u32),
                    ..Default::default()
                };
                let t = Instant::now();
                match s.create(&req).await {
                    Ok(_) => lat.push(t.elapsed().as_secs_f64() * 1e3),
                    Err(_) => failed += 1,
                }
            }
            (lat, failed)
        }));
    }
    let mut lat = Vec::new();
    let mut failed = 0;
    for w in workers {
        let (l, f) = w.await.expect("placement worker");
        lat.extend(l);
        failed += f;
    }
    let place_s = t1.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);

    progress("killing one host agent (no lease revoke)");
    let victim = agents.pop().expect("at least one host");
    let victim_id = format!("h{:06}", cfg.hosts - 1);
    victim.abort();
    let t2 = Instant::now();
    let deadline = Instant::now() + cfg.ttl * 3 + Duration::from_secs(5);
    let loss_detect_s = loop {
        // Lost: no longer registered (listed as lost when it has vSSDs,
        // not listed at all when it has none).
        if !sched
            .hosts()
            .iter()
            .any(|h| h.id == victim_id && h.state == "alive")
        {
            break t2.elapsed().as_secs_f64();
        }
        if Instant::now() > deadline {
            break f64::NAN;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };

    progress("measuring etcd");
    let mut c = clients[0].clone();
    let all = etcd::get_prefix(&mut c, &(cfg.prefix.clone() + "/")).await?;
    let keys = all.len() as i64;
    let value_bytes: usize = all.iter().map(|kv| kv.key().len() + kv.value().len()).sum();
    let db_bytes = c.status().await?.db_size();
    let _ = stop_tx.send(true);
    for a in agents {
        let _ = tokio::time::timeout(Duration::from_secs(5), a).await;
    }
    Ok(BenchReport {
        hosts_registered: cfg.hosts,
        register_s,
        placed: lat.len(),
        failed,
        place_s,
        placements_per_s: lat.len() as f64 / place_s.max(1e-9),
        place_p50_ms: percentile(&lat, 0.5),
        place_p99_ms: percentile(&lat, 0.99),
        loss_detect_s,
        ttl_s: cfg.ttl.as_secs_f64(),
        keys,
        keys_per_host: keys as f64 / cfg.hosts.max(1) as f64,
        value_bytes_per_host: value_bytes as f64 / cfg.hosts.max(1) as f64,
        db_bytes,
    })
}
