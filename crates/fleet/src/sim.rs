//! The fleet: populations of homes (regular vSSDs, or unsold servers), a stream of
//! harvest tenants, and the discrete-event loop that matches them through
//! [`harvest::GssdPool`].
//!
//! # Time
//!
//! A [`clock::VirtualClock`] advancing in 5-minute steps (the Azure bin and the
//! resolution of the usage series); every decision reads its time from it, as
//! the daemon's harvester reads its monotonic clock. Harvest-tenant arrivals and
//! job ends are events at their own instants inside a step (the clock is set to
//! each), taken in time order from a sorted arrival list and a min-heap of ends;
//! usage, reclamation checks and predictions happen at step boundaries (the
//! paper predicts every 3 minutes; our data is 5-minute bins). The refresh timer
//! is the harvest crate's [`harvest::RefreshTimer`].
//!
//! # The daemon's decisions
//!
//! What a home lends, what unsold channels lend and the expiries at a refresh
//! are decided by the functions the daemon's `control::Harvester` calls
//! ([`lend::plan_lend`], [`lend::plan_unsold`], [`lend::expiry_updates`]) with
//! the daemon's policy types ([`Policies`]); matching, release and early
//! reclamation are the [`harvest::GssdPool`] the daemon uses. What stays the
//! simulator's own is the model around them: usage from traces instead of FTL
//! counters, and migrations and erases that take no time.
//!
//! # One pool, and why
//!
//! In the paper each server's vSSD manager has a pool and harvest VMs land on a
//! server. A fleet scheduler that sends each harvest VM to the server with the
//! best-fitting gSSD is equivalent to one best-fit over every pool, so the simulator
//! keeps a single [`harvest::GssdPool`] for the fleet (ids = lending slots: a home's
//! index, since a home lends at most one gSSD, or one of a server's 16 slots for
//! groups of unsold channels), which is also what makes 60,000 requests cheap.
//!
//! # What happens at each step
//!
//! 1. Every home's usage for the step is shown to the predictor (`observe`).
//! 2. Early reclamation: a home whose real usage plus what it lends exceeds its
//!    allotment takes its gSSD back ([`harvest::GssdPool::remove`] when unassigned,
//!    [`harvest::GssdPool::early_reclaim`] when assigned: migrate, or evict = exception).
//! 3. The refresh timer: the policies refresh every pooled gSSD's expiry
//!    ([`lend::expiry_updates`]), expired unassigned gSSDs leave the pool
//!    ([`harvest::GssdPool::refresh`]); expired assigned ones are reclaimed early.
//! 4. Homes that lend nothing ask the policy and create the gSSD
//!    [`lend::plan_lend`] makes of its offer (even over the free channels, whole
//!    chunks, at least one granule); with an unsold policy, a server's unsold
//!    channels (its highest: sold channels are its lowest) are one group for
//!    [`lend::plan_unsold`], and a server whose channels get sold tells the
//!    policy ([`UnsoldPolicy::sold`]), as the daemon's reclaim hook does.
//! 5. Events inside the step in time order: job ends ([`harvest::GssdPool::release`]:
//!    back to the pool or erased and home, for each gSSD the tenant holds) and
//!    arrivals ([`harvest::GssdPool::harvest_split`]: the best fit of the
//!    demand rounded up, else several gSSDs, biggest first, as the daemon's
//!    `create_volume`; nothing = unserved, not an exception: the request is
//!    turned away before it starts).
//! 6. Utilisation is sampled for every home and every SSD, before (regular usage
//!    only) and after (plus the harvest tenants' shares on its gSSDs).
//!
//! # Several gSSDs per tenant
//!
//! A demand that no single gSSD covers is split (BlockFlex Figure 12,
//! under-harvesting at arrival): the tenant's share on each gSSD is the
//! daemon's segment rule, capacity and channels still missing up to what the
//! gSSD has, in the order taken. An early reclamation costs the tenant only
//! the reclaimed gSSD's share ([`harvest::Demand::remaining`] of that share):
//! a replacement holding it migrates the share; with none the tenant is
//! evicted and its other gSSDs are released. `FleetConfig::split = false`
//! turns such demands away, as the simulator did before.
//!
//! A synthetic tenant's real demand is its predicted demand (the demand side
//! of the predictors is out of scope here), so under-harvesting during a job
//! does not arise.

use std::sync::Arc;

use clock::{Nanos, SEC};
use harvest::{Demand, HarvestConfig};
use rng::SplitMix64;
use serde::{Deserialize, Serialize};

use crate::gen::{self, DemandGen, LevelChain};
use crate::predict::{Histogram, LastWindow, Oracle, Usage};
use crate::traces::Inputs;
use crate::{FleetError, STEP_S};

mod run;
use lend::{FixedLifetime, LendPolicy, Lendable, UnsoldHistogramPolicy, UnsoldPolicy};
use run::Run;

const STEP: Nanos = STEP_S * SEC;
const NONE: u32 = u32::MAX;

/// Settings of a fleet. Defaults are the paper's §5.2 setup.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FleetConfig {
    /// Regular tenants (VMs with one vSSD each) for the sold scenario (paper: 4,000).
    pub regular: usize,
    /// Harvest tenants over the run (paper: 60,000).
    pub harvest: usize,
    /// Measured hours.
    pub hours: u64,
    /// Hours of history before measuring: predictors observe, nobody harvests.
    pub warmup_hours: u64,
    /// Master seed.
    pub seed: u64,
    /// Servers of the unsold scenario (paper: 1,400).
    pub unsold_hosts: usize,
    /// Mean share of the unsold servers' channels sold, which sets how many of the
    /// Azure arrivals land on them (the public excerpt has no server count).
    pub unsold_load: f64,
    /// Channels per SSD (paper: 16).
    pub channels_per_ssd: u32,
    /// Blocks per channel (paper: 64 GB of 4 MB blocks = 16,384).
    pub blocks_per_channel: u64,
    /// Harvest granularity and timers (chunk = 16 GB, 30 minutes, 15-minute refresh).
    pub harvest_cfg: HarvestConfig,
    /// A demand that no single gSSD covers is split over several, biggest
    /// first, all or nothing ([`harvest::GssdPool::harvest_split`], as the
    /// daemon's `create_volume`); `false`: such a demand is turned away.
    pub split: bool,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            regular: 4000,
            harvest: 60_000,
            hours: 168,
            warmup_hours: 24,
            seed: 1,
            unsold_hosts: 1400,
            unsold_load: 0.7,
            channels_per_ssd: 16,
            blocks_per_channel: 16_384,
            harvest_cfg: HarvestConfig::default(),
            split: true,
        }
    }
}

impl FleetConfig {
    /// Rejects settings the simulator cannot run, naming the setting.
    pub fn validate(&self) -> Result<(), FleetError> {
        let bad = |m: &str| Err(FleetError::BadParam(m.to_string()));
        self.harvest_cfg.validate()?;
        if self.hours == 0 {
            return bad("--hours must be at least 1");
        }
        if self.regular == 0 && self.unsold_hosts == 0 {
            return bad("no homes: --regular and --unsold-hosts are both 0");
        }
        if self.channels_per_ssd != 16 {
            return bad(
                "channels per SSD must be 16 (the Azure flavours are mapped to 16 channels)",
            );
        }
        if self.blocks_per_channel == 0 || self.blocks_per_channel > u32::MAX as u64 / 16 {
            return bad("blocks per channel must be in 1..=268435455");
        }
        if !(self.unsold_load > 0.0 && self.unsold_load <= 1.0) {
            return bad("--unsold-load must be in (0, 1]");
        }
        if self.regular > 10_000_000 || self.harvest > 100_000_000 || self.hours > 24 * 365 {
            return bad("fleet too large (at most 10M regular, 100M harvest, 1 year)");
        }
        Ok(())
    }

    fn steps(&self) -> (usize, usize) {
        let per_h = (3600 / STEP_S) as usize;
        (
            self.warmup_hours as usize * per_h,
            self.hours as usize * per_h,
        )
    }
}

/// Which homes a run harvests from: the paper's Figures 15–16 (sold) or 17 (unsold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Regular tenants' vSSDs (underutilised capacity and bandwidth).
    Sold,
    /// Unsold channels of servers that host Azure VM arrivals.
    Unsold,
}

impl Scenario {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Sold => "sold",
            Scenario::Unsold => "unsold",
        }
    }
}

/// A built-in predictor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PredictorKind {
    /// [`Oracle`].
    Oracle,
    /// [`LastWindow`].
    Last,
    /// [`Histogram`] (the paper's fleet-wide heuristic).
    Histogram,
    /// The daemon's fixed policy (`lend::Fixed`): half of what is free, for
    /// two hours (the daemon's defaults).
    Fixed,
    /// The daemon's learned policy (`lend::Predicted`): BlockFlex's LSTMs per
    /// home, fed a window of three steps. Trains every home's models online:
    /// slow at the paper's fleet size, meant for small fleets.
    Lstm,
    /// The daemon's learned policy with `model = "quantile"` (our best
    /// predictor, `predict::quantile`): per home, the next level and a run's
    /// remaining time read out at a quantile of distributions counted online
    /// from the home's own history (no prior, as the daemon runs it), fed a
    /// window of three steps.
    Quantile,
    /// Sold scenario only: [`PredictorKind::Quantile`] starting from priors
    /// fitted on as many other regular tenants as the fleet has, at least
    /// [`PRIOR_HOMES`], synthetic and never this fleet's
    /// ([`Fleet::quantile_priors`]): the model as it is meant to be used,
    /// trained offline on other vSSDs and online on its own.
    #[serde(rename = "quantile-prior")]
    QuantilePrior,
    /// Unsold scenario only: the daemon's unsold policy
    /// [`UnsoldHistogramPolicy`] at its defaults (20% quantile of the
    /// host's past unsold stretches per group size, two hours without
    /// history), servers lending groups of four unsold channels.
    #[serde(rename = "unsold-histogram")]
    UnsoldHistogram,
    /// Unsold scenario only: the daemon's [`FixedLifetime`] of two hours, on
    /// groups of four unsold channels.
    #[serde(rename = "unsold-fixed")]
    UnsoldFixed,
}

impl std::str::FromStr for PredictorKind {
    type Err = FleetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "oracle" => Ok(Self::Oracle),
            "last" => Ok(Self::Last),
            "histogram" => Ok(Self::Histogram),
            "fixed" => Ok(Self::Fixed),
            "lstm" | "predicted" => Ok(Self::Lstm),
            "quantile" => Ok(Self::Quantile),
            "quantile-prior" => Ok(Self::QuantilePrior),
            "unsold-histogram" => Ok(Self::UnsoldHistogram),
            "unsold-fixed" => Ok(Self::UnsoldFixed),
            _ => Err(FleetError::BadParam(format!(
                "unknown predictor {s:?} (oracle, last, histogram, fixed, lstm, quantile, quantile-prior; unsold servers also unsold-histogram, unsold-fixed)"
            ))),
        }
    }
}

/// The daemon's defaults (`[harvest]` of `control::HarvestSettings`) for the
/// policies the simulator builds: lend for two hours, the 20% quantile of the
/// unsold history, 30-minute granules.
const LEND_FOR: Nanos = 7200 * SEC;
const UNSOLD_QUANTILE: f64 = 0.2;

/// The policies one run drives, the daemon's harvester's types: what a home
/// lends ([`LendPolicy`]) and, where servers lend their unsold channels the
/// way the daemon does, how long those stay unsold ([`UnsoldPolicy`]).
pub struct Policies {
    /// What a home lends and for how long.
    pub lend: Box<dyn LendPolicy>,
    /// `Some`: each server of the unsold scenario lends its unsold channels as
    /// one group through [`lend::plan_unsold`] with this policy (the daemon's
    /// `unsold_policy`), and `lend` is not asked. `None`: servers lend through
    /// `lend` like homes.
    pub unsold: Option<Box<dyn UnsoldPolicy>>,
    /// The name in reports.
    pub name: String,
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies")
            .field("name", &self.name)
            .finish()
    }
}

impl Policies {
    /// Homes lend through `lend`.
    pub fn lending(lend: Box<dyn LendPolicy>) -> Self {
        let name = lend.name().to_string();
        Self {
            lend,
            unsold: None,
            name,
        }
    }

    /// Unsold channels lend through `unsold`, reported as `name`.
    pub fn unsold(unsold: Box<dyn UnsoldPolicy>, name: &str) -> Self {
        Self {
            lend: Box::new(NoLend),
            unsold: Some(unsold),
            name: name.to_string(),
        }
    }
}

/// Lends nothing: the home side of a run where only unsold channels lend.
struct NoLend;

impl LendPolicy for NoLend {
    fn name(&self) -> &str {
        "none"
    }

    fn offer(&mut self, _now: Nanos, _home: &Lendable<'_>) -> Option<lend::Offer> {
        None
    }
}

/// One home: a regular vSSD or an unsold server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Home {
    /// Channels allotted.
    pub channels: u32,
    /// Blocks allotted.
    pub blocks: u64,
    /// The SSD (server) it lives on.
    pub host: u32,
}

/// The homes of one scenario and their usage over the whole run.
#[derive(Debug, Clone)]
pub struct Population {
    /// The homes.
    pub homes: Vec<Home>,
    /// Number of SSDs.
    pub hosts: usize,
    /// Usage per home and step (warm-up included).
    pub usage: Arc<Usage>,
    /// Bandwidth in use as a fraction of the home's bandwidth, in 1/10,000.
    pub bw_bp: Vec<u16>,
    /// Homes whose series are real (the rest are synthetic).
    pub real_homes: usize,
}

/// One harvest tenant (synthetic).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HarvestTenant {
    /// Arrival time.
    pub arrival: Nanos,
    /// Its real demand.
    pub demand: Demand,
    /// Share of its channels' bandwidth it uses (drawn from the real Alibaba
    /// samples) in the sold scenario; the unsold scenario counts allocation.
    pub intensity: f32,
}

/// Where the inputs of a fleet came from, for the reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Provenance {
    /// Regular tenants driven by a real series (a real Alibaba machine for
    /// bandwidth and the real Google job, at an offset, for capacity).
    pub real_regular: usize,
    /// Regular tenants from the fitted chains (synthetic).
    pub synthetic_regular: usize,
    /// Azure arrivals kept (thinning probability) for the unsold pool.
    pub azure_keep: f64,
    /// Azure VMs turned away by a full unsold pool.
    pub azure_turned_away: u64,
    /// Azure 5-minute bins available.
    pub azure_bins: usize,
    /// Harvest tenants are always synthetic.
    pub harvest_tenants_synthetic: bool,
}

/// A fleet ready to run.
#[derive(Debug, Clone)]
pub struct Fleet {
    cfg: FleetConfig,
    warmup: usize,
    steps: usize,
    tenants: Vec<HarvestTenant>,
    sold: Population,
    unsold: Population,
    provenance: Provenance,
    /// The chains regular tenants are drawn from, for training homes.
    chains: SoldChains,
}

/// The generators of synthetic regular tenants, fitted to the real series.
#[derive(Debug, Clone)]
struct SoldChains {
    bw: Vec<LevelChain>,
    cap: LevelChain,
}

/// Steps per window the learned policies are fed (15 minutes).
const WINDOW_STEPS: usize = 3;

/// At least this many other homes train the quantile model's priors, so
/// that a small fleet's priors are not fitted on a handful of series.
pub const PRIOR_HOMES: usize = 1000;

fn empty_population() -> Population {
    Population {
        homes: Vec::new(),
        hosts: 0,
        usage: Arc::new(Usage::default()),
        bw_bp: Vec::new(),
        real_homes: 0,
    }
}

impl Fleet {
    /// Builds the populations and the harvest tenants from the real inputs and the
    /// generators fitted to them, deterministically from `cfg.seed`.
    pub fn build(cfg: &FleetConfig, inputs: &Inputs) -> Result<Self, FleetError> {
        cfg.validate()?;
        if inputs.alibaba.is_empty() || inputs.alibaba.iter().any(|m| m.bw.is_empty()) {
            return Err(FleetError::BadParam("no Alibaba bandwidth series".into()));
        }
        if inputs.google_capacity.len() < 2 {
            return Err(FleetError::BadParam(
                "Google capacity series too short".into(),
            ));
        }
        let (warmup, steps) = cfg.steps();
        let n = warmup + steps;
        let chains = SoldChains {
            bw: inputs
                .alibaba
                .iter()
                .map(|m| LevelChain::fit(&[&m.bw]))
                .collect(),
            cap: {
                let g10: Vec<f32> = inputs.google_capacity.iter().step_by(2).copied().collect();
                LevelChain::fit(&[&g10])
            },
        };
        let sold = Self::build_sold(cfg, inputs, &chains, n, 1, true);
        let (unsold, keep, away) = Self::build_unsold(cfg, inputs, n)?;
        let tenants = Self::build_tenants(cfg, inputs, warmup, steps);
        let provenance = Provenance {
            real_regular: sold.real_homes,
            synthetic_regular: sold.homes.len() - sold.real_homes,
            azure_keep: keep,
            azure_turned_away: away,
            azure_bins: inputs.azure_bins.len(),
            harvest_tenants_synthetic: true,
        };
        Ok(Self {
            cfg: *cfg,
            warmup,
            steps,
            tenants,
            sold,
            unsold,
            provenance,
            chains,
        })
    }

    /// Regular tenants drawn from random stream `stream` of the seed; the
    /// first replay the real series when `replay_real`, else all are synthetic.
    fn build_sold(
        cfg: &FleetConfig,
        inputs: &Inputs,
        chains: &SoldChains,
        n: usize,
        stream: u64,
        replay_real: bool,
    ) -> Population {
        if cfg.regular == 0 {
            return empty_population();
        }
        let mut rng = SplitMix64::derive(cfg.seed, &[stream]);
        let (bw_chains, cap_chain) = (&chains.bw, &chains.cap);
        let real = if replay_real {
            inputs.alibaba.len().min(cfg.regular)
        } else {
            0
        };
        let bpc = cfg.blocks_per_channel;
        // vSSD sizes 128, 256 and 512 GB (2, 4, 8 channels), the paper's common
        // sizes, packed first-fit onto 16-channel SSDs (synthetic placement).
        let mut homes = Vec::with_capacity(cfg.regular);
        let mut host_free: Vec<u32> = Vec::new();
        for _ in 0..cfg.regular {
            let ch = [2u32, 4, 8][(rng.next_u64() % 3) as usize];
            let host = match host_free.iter().position(|&f| f >= ch) {
                Some(h) => h,
                None => {
                    host_free.push(cfg.channels_per_ssd);
                    host_free.len() - 1
                }
            };
            host_free[host] -= ch;
            homes.push(Home {
                channels: ch,
                blocks: ch as u64 * bpc,
                host: host as u32,
            });
        }
        let mut usage = Usage {
            steps: n,
            channels: Vec::with_capacity(cfg.regular * n),
            blocks: Vec::with_capacity(cfg.regular * n),
        };
        let mut bw_bp = Vec::with_capacity(cfg.regular * n);
        let gl = inputs.google_capacity.len();
        for (i, h) in homes.iter().enumerate() {
            let (bw, cap): (Vec<f32>, Vec<f32>) = if i < real {
                let m = &inputs.alibaba[i].bw;
                let off = i * gl / real.max(1);
                (
                    (0..n).map(|s| m[s % m.len()]).collect(),
                    (0..n)
                        .map(|s| inputs.google_capacity[(off + s) % gl])
                        .collect(),
                )
            } else {
                let c = &bw_chains[(rng.next_u64() % bw_chains.len() as u64) as usize];
                (
                    c.generate(&mut rng, n, 1),
                    cap_chain.generate(&mut rng, n, 2),
                )
            };
            for s in 0..n {
                let b = bw[s].clamp(0.0, 1.0);
                bw_bp.push((b * 10_000.0).round() as u16);
                usage.channels.push(
                    ((b * h.channels as f32 - 1e-4).ceil().max(0.0) as u32).min(h.channels) as u8,
                );
                let c = cap[s].clamp(0.0, 1.0) as f64;
                usage
                    .blocks
                    .push(((c * h.blocks as f64).ceil() as u64).min(h.blocks) as u32);
            }
        }
        Population {
            homes,
            hosts: host_free.len(),
            usage: Arc::new(usage),
            bw_bp,
            real_homes: real,
        }
    }

    fn build_unsold(
        cfg: &FleetConfig,
        inputs: &Inputs,
        n: usize,
    ) -> Result<(Population, f64, u64), FleetError> {
        if cfg.unsold_hosts == 0 {
            return Ok((empty_population(), 0.0, 0));
        }
        let bins = &inputs.azure_bins;
        if bins.len() < n {
            return Err(FleetError::BadParam(format!(
                "--hours {} plus {} hours of warm-up need {} five-minute Azure bins; the arrival files have {}",
                cfg.hours,
                cfg.warmup_hours,
                n,
                bins.len()
            )));
        }
        // Start as late as the data allows (up to 7 days in) so the servers are in
        // steady state when the run begins.
        let pre = (bins.len() - n).min(7 * 288);
        let vms: usize = bins.iter().map(|b| b.len()).sum();
        let chans: usize = bins.iter().flatten().map(|&c| c as usize).sum();
        let rate = chans as f64 / bins.len() as f64; // channels arriving per step
        let want = cfg.unsold_load * cfg.unsold_hosts as f64 * 16.0;
        let keep = if vms == 0 {
            0.0
        } else {
            (want / (rate * gen::mean_vm_lifetime_steps())).min(1.0)
        };
        let mut rng = SplitMix64::derive(cfg.seed, &[2]);
        let (sold, away) = gen::unsold_occupancy(bins, cfg.unsold_hosts, keep, pre, n, &mut rng);
        let bpc = cfg.blocks_per_channel;
        let bw_bp = sold
            .iter()
            .map(|&c| (c as u32 * 10_000 / 16) as u16)
            .collect();
        let usage = Usage {
            steps: n,
            blocks: sold.iter().map(|&c| (c as u64 * bpc) as u32).collect(),
            channels: sold,
        };
        let homes = (0..cfg.unsold_hosts)
            .map(|h| Home {
                channels: 16,
                blocks: 16 * bpc,
                host: h as u32,
            })
            .collect();
        Ok((
            Population {
                homes,
                hosts: cfg.unsold_hosts,
                usage: Arc::new(usage),
                bw_bp,
                real_homes: cfg.unsold_hosts,
            },
            keep,
            away,
        ))
    }

    fn build_tenants(
        cfg: &FleetConfig,
        inputs: &Inputs,
        warmup: usize,
        steps: usize,
    ) -> Vec<HarvestTenant> {
        let mut rng = SplitMix64::derive(cfg.seed, &[3]);
        let dg = DemandGen {
            blocks_per_gb: (cfg.blocks_per_channel / 64).max(1),
            channel_gb: 64,
        };
        // Intensities: the real Alibaba bandwidth samples (empirical distribution).
        let samples: Vec<f32> = inputs
            .alibaba
            .iter()
            .flat_map(|m| m.bw.iter().copied())
            .collect();
        let start = warmup as Nanos * STEP;
        let span = steps as Nanos * STEP;
        let mut t: Vec<HarvestTenant> = (0..cfg.harvest)
            .map(|_| {
                let arrival = start + rng.next_u64() % span;
                let demand = dg.draw(&mut rng);
                let intensity = samples[(rng.next_u64() % samples.len() as u64) as usize];
                HarvestTenant {
                    arrival,
                    demand,
                    intensity,
                }
            })
            .collect();
        t.sort_by_key(|x| x.arrival);
        t
    }

    /// The configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.cfg
    }

    /// Where the inputs came from.
    pub fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    /// The harvest tenants, by arrival.
    pub fn tenants(&self) -> &[HarvestTenant] {
        &self.tenants
    }

    /// The homes of a scenario.
    pub fn population(&self, s: Scenario) -> &Population {
        match s {
            Scenario::Sold => &self.sold,
            Scenario::Unsold => &self.unsold,
        }
    }

    /// Steps a run of one scenario takes (warm-up included), for progress bars.
    pub fn total_steps(&self) -> usize {
        self.warmup + self.steps
    }

    /// Priors of the quantile model fitted on `homes` regular tenants that
    /// are not this fleet's: synthetic, drawn from the same fitted chains
    /// with another random stream, none replaying a real series (this
    /// fleet's first tenants do), so a policy starting from them is
    /// evaluated on homes it was not trained on. Their series are cut into
    /// the windows the learned policies see (three steps, the maximum of
    /// each), as levels of `cfg.levels`.
    pub fn quantile_priors(
        &self,
        cfg: &predict::PredictorConfig,
        homes: usize,
    ) -> predict::QuantilePriors {
        let tcfg = FleetConfig {
            regular: homes,
            ..self.cfg
        };
        let n = self.warmup + self.steps;
        let empty = Inputs {
            alibaba: Vec::new(),
            google_capacity: Vec::new(),
            azure_bins: Vec::new(),
        };
        let train = Self::build_sold(&tcfg, &empty, &self.chains, n, 7, false);
        let (mut bw, mut cap) = (Vec::new(), Vec::new());
        for (h, home) in train.homes.iter().enumerate() {
            let u = &train.usage;
            let row = h * n..(h + 1) * n;
            let win = |v: Vec<f32>| -> Vec<u32> {
                v.chunks(WINDOW_STEPS)
                    .map(|w| predict::level_of(w.iter().copied().fold(0.0, f32::max), cfg.levels))
                    .collect()
            };
            bw.push(win(u.channels[row.clone()]
                .iter()
                .map(|&c| f32::from(c) / home.channels.max(1) as f32)
                .collect()));
            cap.push(win(u.blocks[row]
                .iter()
                .map(|&b| b as f32 / home.blocks.max(1) as f32)
                .collect()));
        }
        let step_s = (WINDOW_STEPS as u64 * STEP_S) as f64;
        let cap_s = cfg.duration.cap_s();
        let fit = |s: &[Vec<u32>]| {
            (
                Arc::new(predict::LevelPrior::fit(
                    cfg.levels,
                    s.iter().map(Vec::as_slice),
                )),
                Arc::new(predict::DurationPrior::fit(
                    cfg.levels,
                    cap_s,
                    s.iter().map(|l| (l.as_slice(), step_s)),
                )),
            )
        };
        let ((bl, br), (cl, cr)) = (fit(&bw), fit(&cap));
        predict::QuantilePriors {
            bandwidth: Some(bl),
            capacity: Some(cl),
            bandwidth_runs: Some(br),
            capacity_runs: Some(cr),
        }
    }

    /// The built-in policies of `kind` for a scenario's homes; the daemon's
    /// unsold policies (`unsold-histogram`, `unsold-fixed`) only for unsold
    /// servers.
    pub fn predictor(&self, kind: PredictorKind, s: Scenario) -> Result<Policies, FleetError> {
        self.predictor_with(kind, s, &predict::PredictorConfig::default())
    }

    /// As [`Fleet::predictor`], the learned predictors (`lstm`, `quantile`,
    /// `quantile-prior`) with `settings` (the daemon's
    /// `[harvest.predictor]`); its `model` is the one `kind` names. The
    /// other kinds ignore it.
    pub fn predictor_with(
        &self,
        kind: PredictorKind,
        s: Scenario,
        settings: &predict::PredictorConfig,
    ) -> Result<Policies, FleetError> {
        let hc = &self.cfg.harvest_cfg;
        match (kind, s) {
            (PredictorKind::UnsoldHistogram | PredictorKind::UnsoldFixed, Scenario::Sold) => {
                return Err(FleetError::BadParam(
                    "unsold-histogram and unsold-fixed decide how long unsold channels stay unsold: give them to --unsold-predictor".into(),
                ))
            }
            (PredictorKind::QuantilePrior, Scenario::Unsold) => {
                return Err(FleetError::BadParam(
                    "quantile-prior learns from regular tenants: give it to --predictor (sold scenario)".into(),
                ))
            }
            (PredictorKind::UnsoldHistogram, Scenario::Unsold) => {
                return Ok(Policies::unsold(
                    Box::new(UnsoldHistogramPolicy::new(
                        hc.duration_granule_s,
                        UNSOLD_QUANTILE,
                        LEND_FOR,
                    )),
                    "unsold-histogram",
                ))
            }
            (PredictorKind::UnsoldFixed, Scenario::Unsold) => {
                return Ok(Policies::unsold(
                    Box::new(FixedLifetime::new(LEND_FOR)),
                    "unsold-fixed",
                ))
            }
            _ => {}
        }
        let g = hc.duration_granule();
        let learned = |model| {
            Box::new(lend::Predicted::new(
                predict::PredictorConfig {
                    model,
                    ..settings.clone()
                },
                WINDOW_STEPS as Nanos * STEP,
            ))
        };
        let mut p = Policies::lending(match kind {
            PredictorKind::Oracle => Box::new(Oracle::new(self.population(s).usage.clone(), g)),
            PredictorKind::Last => Box::new(LastWindow::default()),
            PredictorKind::Histogram => Box::new(Histogram::new(
                self.population(s).homes.len(),
                g,
                SplitMix64::derive(self.cfg.seed, &[4]).next_u64(),
            )),
            PredictorKind::Fixed => Box::new(lend::Fixed::new(0.5, LEND_FOR)),
            PredictorKind::Lstm => learned(predict::Model::Lstm),
            PredictorKind::Quantile => learned(predict::Model::Quantile),
            PredictorKind::QuantilePrior => {
                let pc = predict::PredictorConfig {
                    model: predict::Model::Quantile,
                    ..settings.clone()
                };
                let priors = self.quantile_priors(&pc, self.cfg.regular.max(PRIOR_HOMES));
                Box::new(lend::Predicted::with_priors(
                    pc,
                    WINDOW_STEPS as Nanos * STEP,
                    priors,
                ))
            }
            PredictorKind::UnsoldHistogram | PredictorKind::UnsoldFixed => {
                unreachable!("matched above")
            }
        });
        // Both learned policies are `lend::Predicted`: report the model.
        match kind {
            PredictorKind::Lstm => p.name = "lstm".into(),
            PredictorKind::Quantile => p.name = "quantile".into(),
            PredictorKind::QuantilePrior => p.name = "quantile-prior".into(),
            _ => {}
        }
        Ok(p)
    }

    /// Runs one scenario with `pred` on a fresh virtual clock, calling
    /// `progress` once per step.
    pub fn run(
        &self,
        scenario: Scenario,
        pred: &mut Policies,
        progress: &mut dyn FnMut(),
    ) -> Result<ScenarioReport, FleetError> {
        Run::new(self, scenario, pred.unsold.is_some()).go(pred, progress)
    }
}

/// Counts of what happened in a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Harvest tenants that arrived.
    pub requests: u64,
    /// Of which got a gSSD on arrival.
    pub served: u64,
    /// Of the served, those whose demand no single gSSD covered, served on
    /// several (under-harvesting, Figure 12).
    pub split_served: u64,
    /// gSSDs those split demands took, together.
    pub split_gssds: u64,
    /// Of which found no gSSD that fits (turned away before starting).
    pub unserved: u64,
    /// Jobs that ran to their end.
    pub completed: u64,
    /// Tenants still running when the run ended.
    pub running_at_end: u64,
    /// gSSDs created.
    pub gssds_created: u64,
    /// Unassigned gSSDs dropped at expiry (by the refresh timer, or by their home
    /// needing the flash after the expiry and before the timer ran).
    pub expired: u64,
    /// Released gSSDs put back in the pool.
    pub returned_to_pool: u64,
    /// Released gSSDs erased and given back home (expiring within the horizon).
    pub erased_on_release: u64,
    /// Unassigned gSSDs taken back early by their home (no tenant affected).
    pub reclaimed_unassigned: u64,
    /// Early reclamations of assigned gSSDs (a tenant affected).
    pub reclamations: u64,
    /// Of which migrated the tenant to another gSSD.
    pub migrations: u64,
    /// Of which found no gSSD: the tenant is evicted (an exception).
    pub exceptions: u64,
    /// gSSDs still in the pool at the end (assigned or not).
    pub live_at_end: u64,
    /// Blocks granted beyond real demands at assignment (Table 1 waste), summed.
    pub waste_blocks: u64,
    /// Channels granted beyond real demands at assignment, summed.
    pub waste_channels: u64,
    /// Capacity harvested, in GB-hours: each gSSD a tenant held (whole, as
    /// granted) times how long it held it, up to the end of the run.
    pub capacity_gb_hours: u64,
    /// The same for the tenants' real demands (their shares of the gSSDs
    /// they held): what harvesting served, without the rounding up.
    pub used_gb_hours: u64,
    /// Home-steps where usage plus what is lent exceeded the allotment after the
    /// reclamation check (must be 0).
    pub invariant_violations: u64,
}

/// Utilisation of a set of units (VMs or SSDs) before and after harvesting: the
/// mean over units of each unit's time-average and of its time-maximum, for all
/// units and for those whose average before harvesting is under 60%.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct UtilStats {
    /// Units.
    pub units: usize,
    /// Mean of averages, before.
    pub avg_before: f64,
    /// Mean of averages, after.
    pub avg_after: f64,
    /// Mean of maxima, before.
    pub max_before: f64,
    /// Mean of maxima, after.
    pub max_after: f64,
    /// Units under 60% average before.
    pub under60_units: usize,
    /// Their mean average, before.
    pub under60_avg_before: f64,
    /// After.
    pub under60_avg_after: f64,
    /// Their mean maximum, before.
    pub under60_max_before: f64,
    /// After.
    pub under60_max_after: f64,
}

/// Each unit's time-average utilisation (capacity before, after; bandwidth before,
/// after), for CDF plots.
pub type UnitAverages = Vec<[f32; 4]>;

/// The result of one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioReport {
    /// Scenario.
    pub scenario: Scenario,
    /// Predictor name.
    pub predictor: String,
    /// Homes.
    pub homes: usize,
    /// SSDs.
    pub ssds: usize,
    /// Per home (VM), capacity.
    pub vm_capacity: UtilStats,
    /// Per home (VM), bandwidth.
    pub vm_bandwidth: UtilStats,
    /// Per SSD, capacity.
    pub ssd_capacity: UtilStats,
    /// Per SSD, bandwidth.
    pub ssd_bandwidth: UtilStats,
    /// Counters.
    pub counters: Counters,
    /// Per-home averages, for CDFs (not serialised).
    #[serde(skip)]
    pub vm_averages: UnitAverages,
    /// Per-SSD averages, for CDFs (not serialised).
    #[serde(skip)]
    pub ssd_averages: UnitAverages,
}
