//! Predictors of harvestable resources: how much of a home (a regular vSSD, or an
//! unsold server) is free and for how long.
//!
//! # One trait with the daemon
//!
//! Every predictor here is a [`lend::LendPolicy`], the trait the daemon's
//! harvester runs: the simulator shows it every home's usage once per step
//! ([`LendPolicy::observe`], where an online learner trains) and asks what a home
//! that lends nothing may lend now ([`LendPolicy::offer`]). So the daemon's own
//! policies (`lend::Fixed`, the LSTMs of `lend::Predicted`) run here unchanged,
//! beside these baselines, which keep the history they need themselves.
//!
//! The three built in:
//!
//! * [`Oracle`]: perfect knowledge of the future (it is constructed with the whole
//!   series). It lends what is free over the next duration granule and predicts
//!   exactly how long that lasts, so it never causes an early reclamation: the
//!   upper bound for a greedy harvester (not a global optimum: lending less could
//!   sometimes last longer).
//! * [`LastWindow`]: the conservative baseline: free = allotment − the peak of the
//!   last window − a margin (the paper's 5% provisioning ratio), predicted to last
//!   as long as it has already lasted (capped), at least one granule.
//! * [`Histogram`]: the §4.4.1 heuristic: lend everything free now, for the
//!   `quantile` of the durations that the same number of free channels has lasted
//!   before, across all homes (a histogram per capacity class, kept in the same
//!   `predict::UnsoldHistogram` as the daemon's unsold policy). The unsold
//!   scenario runs the daemon's `lend::UnsoldHistogramPolicy` itself instead
//!   (see `Fleet::predictor`).

use std::collections::VecDeque;
use std::sync::Arc;

use clock::Nanos;
use lend::{HomeSample, LendPolicy, Lendable, Offer};

/// Per-home usage over the whole simulated time, shared with the [`Oracle`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Usage {
    /// Steps per home.
    pub steps: usize,
    /// Channels in use, home-major (`home * steps + step`).
    pub channels: Vec<u8>,
    /// Blocks in use, home-major.
    pub blocks: Vec<u32>,
}

impl Usage {
    /// Home `h`'s channel series.
    pub fn channels_of(&self, h: usize) -> &[u8] {
        &self.channels[h * self.steps..(h + 1) * self.steps]
    }

    /// Home `h`'s block series.
    pub fn blocks_of(&self, h: usize) -> &[u32] {
        &self.blocks[h * self.steps..(h + 1) * self.steps]
    }
}

/// The simulator's step, for converting steps to time.
const STEP: Nanos = crate::STEP_S * clock::SEC;

/// How long the [`Oracle`] assumes a home free at the end of the data stays free.
const BEYOND: Nanos = 9 * 86_400 * clock::SEC;

/// Perfect future knowledge (an upper bound; see the module docs).
#[derive(Debug, Clone)]
pub struct Oracle {
    usage: Arc<Usage>,
    granule_steps: usize,
}

impl Oracle {
    /// An oracle over the whole `usage` (the future included), lending for at least
    /// `granule` (the harvest duration granule).
    pub fn new(usage: Arc<Usage>, granule: Nanos) -> Self {
        Self {
            usage,
            granule_steps: granule.div_ceil(STEP).max(1) as usize,
        }
    }
}

impl LendPolicy for Oracle {
    fn name(&self) -> &str {
        "oracle"
    }

    fn offer(&mut self, now: Nanos, v: &Lendable<'_>) -> Option<Offer> {
        let home = v.home as usize;
        let now = (now / STEP) as usize;
        let ch = self.usage.channels_of(home);
        let bl = self.usage.blocks_of(home);
        let end = (now + self.granule_steps).min(ch.len());
        if end.saturating_sub(now) < self.granule_steps {
            return None;
        }
        let peak_c = ch[now..end].iter().copied().max().unwrap_or(0) as u32;
        let peak_b = bl[now..end].iter().copied().max().unwrap_or(0) as u64;
        let free_channels = v.channels.saturating_sub(peak_c);
        let chunk = v.chunk_blocks.max(1);
        let free_blocks = v.blocks.saturating_sub(peak_b) / chunk * chunk;
        if free_channels == 0 || free_blocks == 0 {
            return None;
        }
        let lim_c = v.channels - free_channels;
        let lim_b = v.blocks - free_blocks;
        let lasts = match (now..ch.len()).find(|&s| ch[s] as u32 > lim_c || bl[s] as u64 > lim_b) {
            Some(last) => (last - now) as Nanos * STEP,
            // Free to the end of the data: assume it stays free for the longest
            // job (8.5 days) beyond, so that jobs running past the end of the run
            // are not refused for lack of data.
            None => (ch.len() - now) as Nanos * STEP + BEYOND,
        };
        Some(Offer {
            channels: free_channels,
            blocks: free_blocks,
            lasts,
        })
    }
}

/// Last-window minus margin (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct LastWindow {
    /// Window in steps (3 = the paper's 15 minutes).
    pub window: usize,
    /// Under-provisioning of the harvestable prediction (0.05 = the paper's 5%).
    pub margin: f64,
    /// Longest look back for the duration, in steps (576 = 2 days).
    pub max_lookback: usize,
    /// Per home, (channels, blocks) in use at the last `max_lookback` steps,
    /// the newest last (saturated to 16 and 32 bits: 8 bytes a step).
    history: Vec<VecDeque<(u16, u32)>>,
}

impl Default for LastWindow {
    fn default() -> Self {
        Self {
            window: 3,
            margin: 0.05,
            max_lookback: 576,
            history: Vec::new(),
        }
    }
}

impl LendPolicy for LastWindow {
    fn name(&self) -> &str {
        "last"
    }

    fn observe(&mut self, _now: Nanos, homes: &[HomeSample]) -> Result<(), lend::PolicyError> {
        let keep = self.max_lookback.max(self.window).max(1);
        for h in homes {
            let i = h.home as usize;
            if self.history.len() <= i {
                self.history.resize_with(i + 1, VecDeque::new);
            }
            let q = &mut self.history[i];
            if q.len() == keep {
                q.pop_front();
            }
            q.push_back((
                h.used_channels.min(u32::from(u16::MAX)) as u16,
                h.used_blocks.min(u64::from(u32::MAX)) as u32,
            ));
        }
        Ok(())
    }

    fn offer(&mut self, _now: Nanos, v: &Lendable<'_>) -> Option<Offer> {
        let q = self
            .history
            .get(v.home as usize)
            .filter(|q| !q.is_empty())?;
        let n = q.len();
        let w = self.window.clamp(1, n);
        let peak_c = f64::from(q.range(n - w..).map(|x| x.0).max().unwrap_or(0));
        let peak_b = f64::from(q.range(n - w..).map(|x| x.1).max().unwrap_or(0));
        let ac = v.channels as f64;
        let ab = v.blocks as f64;
        let free_channels = (ac - peak_c - self.margin * ac).floor().max(0.0) as u32;
        let chunk = v.chunk_blocks.max(1);
        let free_blocks = (ab - peak_b - self.margin * ab).floor().max(0.0) as u64 / chunk * chunk;
        if free_channels == 0 || free_blocks == 0 {
            return None;
        }
        let lim_c = v.channels - free_channels;
        let lim_b = v.blocks - free_blocks;
        let back = n.min(self.max_lookback);
        let held = (1..=back)
            .find(|&k| u32::from(q[n - k].0) > lim_c || u64::from(q[n - k].1) > lim_b)
            .map_or(back, |k| k - 1);
        Some(Offer {
            channels: free_channels,
            blocks: free_blocks,
            lasts: held as Nanos * STEP,
        })
    }
}

/// The unsold-capacity histogram heuristic of §4.4.1 (see the module docs), on
/// the same [`::predict::UnsoldHistogram`] as the daemon's
/// [`lend::UnsoldHistogramPolicy`]: one class per number of free channels.
#[derive(Debug, Clone)]
pub struct Histogram {
    /// `None`: draw a past duration at random (the paper's rule); `Some(q)`: predict
    /// the `q` quantile of past durations (0.2: 80% of past runs lasted longer).
    pub quantile: Option<f64>,
    rng: rng::SplitMix64,
    /// Fewer past runs than this in a class: predict one granule.
    pub min_samples: usize,
    granule: Nanos,
    /// Per home: free channels at the previous step, and since when each class
    /// `c` (at least `c` free channels) has held.
    state: Vec<(u8, [u32; 17])>,
    /// Per class `c` in 1..=16: how long `c` free channels lasted, in buckets of
    /// one step (runs above `MAX_RUN` steps pooled at `MAX_RUN`).
    hist: ::predict::UnsoldHistogram,
    /// Per home: (channels, blocks) in use at the latest step.
    last: Vec<(u32, u64)>,
}

/// Longest run length the histogram tells apart (7 days of steps).
const MAX_RUN: usize = 2016;

impl Histogram {
    /// A histogram predictor for `homes` homes drawing past durations (at least
    /// `granule`) with a generator seeded by `seed`.
    pub fn new(homes: usize, granule: Nanos, seed: u64) -> Self {
        Self {
            quantile: None,
            rng: rng::SplitMix64::new(seed),
            min_samples: 20,
            granule,
            state: vec![(0, [0; 17]); homes],
            hist: ::predict::UnsoldHistogram::new(crate::STEP_S),
            last: vec![(0, 0); homes],
        }
    }

    fn quantile_steps(&mut self, class: usize) -> Option<usize> {
        if (self.hist.count(class as u64) as usize) < self.min_samples {
            return None;
        }
        let q = match self.quantile {
            Some(q) => q,
            None => self.rng.next_f64(),
        };
        self.hist
            .predict(class as u64, q)
            .map(|d| (d / STEP) as usize)
    }
}

impl LendPolicy for Histogram {
    fn name(&self) -> &str {
        "histogram"
    }

    fn observe(&mut self, now: Nanos, homes: &[HomeSample]) -> Result<(), lend::PolicyError> {
        let now = (now / STEP) as u32;
        for h in homes {
            let home = h.home as usize;
            self.last[home] = (h.used_channels, h.used_blocks);
            let free = h.channels.saturating_sub(h.used_channels).min(16) as u8;
            let (prev, starts) = &mut self.state[home];
            if now == 0 {
                *prev = free;
                for s in starts.iter_mut() {
                    *s = 0;
                }
                continue;
            }
            if free < *prev {
                for c in (free + 1)..=*prev {
                    let len = ((now - starts[c as usize]) as usize).min(MAX_RUN);
                    self.hist.record(u64::from(c), len as Nanos * STEP);
                }
            } else {
                for c in (*prev + 1)..=free {
                    starts[c as usize] = now;
                }
            }
            *prev = free;
        }
        Ok(())
    }

    fn offer(&mut self, _now: Nanos, v: &Lendable<'_>) -> Option<Offer> {
        let (used_c, used_b) = *self.last.get(v.home as usize)?;
        let free_channels = v.channels.saturating_sub(used_c);
        let free_blocks = v.blocks.saturating_sub(used_b);
        if free_channels == 0 || free_blocks == 0 {
            return None;
        }
        let lasts = match self.quantile_steps(free_channels.min(16) as usize) {
            Some(s) => (s as Nanos * STEP).max(self.granule),
            None => self.granule,
        };
        Some(Offer {
            channels: free_channels,
            blocks: free_blocks,
            lasts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::SEC;

    fn home() -> Lendable<'static> {
        Lendable {
            home: 0,
            channels: 4,
            blocks: 1000,
            extent_blocks: 250,
            units: 1,
            chunk_blocks: 1,
            per_channel: &[],
        }
    }

    fn sample(c: u8, b: u32) -> HomeSample {
        HomeSample {
            home: 0,
            channels: 4,
            blocks: 1000,
            used_channels: u32::from(c),
            used_blocks: u64::from(b),
            bw: f32::from(c) / 4.0,
            iops: f32::from(c) / 4.0,
            util: b as f32 / 1000.0,
        }
    }

    /// Feeds steps `0..c.len()` and asks at the last one.
    fn feed(p: &mut dyn LendPolicy, c: &[u8], b: &[u32]) -> Option<Offer> {
        for (i, (&c, &b)) in c.iter().zip(b).enumerate() {
            p.observe(i as Nanos * STEP, &[sample(c, b)]).unwrap();
        }
        p.offer((c.len() as Nanos - 1) * STEP, &home())
    }

    #[test]
    fn oracle_sees_the_end() {
        let usage = Arc::new(Usage {
            steps: 20,
            channels: [vec![1u8; 12], vec![3u8; 8]].concat(),
            blocks: vec![100; 20],
        });
        let mut o = Oracle::new(usage.clone(), 1800 * SEC);
        let p = o.offer(2 * STEP, &home()).unwrap();
        assert_eq!((p.channels, p.blocks), (3, 900));
        assert_eq!(p.lasts, 10 * STEP, "steps 2..12 are free");
        // Too close to the rise for a full granule of 3 free channels: 1 free.
        let p = o.offer(9 * STEP, &home()).unwrap();
        assert_eq!(p.channels, 1);
        assert_eq!(
            p.lasts,
            11 * STEP + BEYOND,
            "to the end of the series and beyond"
        );
    }

    #[test]
    fn last_window_keeps_a_margin_and_extrapolates() {
        let c = [3u8, 1, 1, 1, 1, 1];
        let b = [0u32, 100, 100, 100, 200, 100];
        let mut l = LastWindow::default();
        let p = feed(&mut l, &c, &b).unwrap();
        // peak of the last 3 steps: 1 channel, 200 blocks; margin 5%.
        assert_eq!((p.channels, p.blocks), (2, 750));
        assert_eq!(p.lasts, 5 * STEP, "free for the 5 steps since the 3");
        assert_eq!(feed(&mut LastWindow::default(), &[4], &[0]), None);
        // Its look-back is bounded: the history it keeps is too.
        let mut short = LastWindow {
            max_lookback: 2,
            ..LastWindow::default()
        };
        let p = feed(&mut short, &c, &b).unwrap();
        assert_eq!(p.lasts, 2 * STEP);
    }

    #[test]
    fn histogram_learns_run_lengths() {
        let mut h = Histogram::new(1, 1800 * SEC, 1);
        h.min_samples = 2;
        h.quantile = Some(0.2);
        // free channels alternate 4 (for 10 steps) and 0 (1 step): runs of 10.
        for i in 0..60u64 {
            let c = if i % 11 == 10 { 4u8 } else { 0 };
            h.observe(i * STEP, &[sample(c, 0)]).unwrap();
        }
        assert!(h.hist.count(4) >= 4);
        assert_eq!(h.quantile_steps(4), Some(10));
        h.observe(60 * STEP, &[sample(0, 0)]).unwrap();
        let p = h.offer(60 * STEP, &home()).unwrap();
        assert_eq!(p.lasts, 3000 * SEC, "10 steps of 5 minutes");
    }
}
