//! Predictors of harvestable resources: how much of a home (a regular vSSD, or an
//! unsold server) is free and for how long.
//!
//! # Why a trait
//!
//! The paper predicts with LSTMs (§4.4.2) and, for unsold servers, a histogram of
//! past availability (§4.4.1). The LSTMs live in another crate (`predict`) that
//! this simulator must not wait for, so the simulator talks to a
//! [`HarvestPredictor`]: it shows the predictor every home's usage once per step
//! ([`HarvestPredictor::observe`], where an online learner trains) and asks for a
//! prediction when a home has no gSSD ([`HarvestPredictor::predict`]). An LSTM
//! predictor plugs in by implementing these two methods: keep one model (or one
//! hidden state) per home index in `observe`, feed it the window statistics the
//! paper uses (max, min and mean over the last 15 minutes = 3 steps of
//! [`HomeView::used_channels`] and [`HomeView::used_blocks`]), and in `predict`
//! return its bandwidth and capacity outputs, under-provisioned by the ratio, with
//! the minimum of the two duration predictions. Nothing else in the simulator
//! changes; `Fleet::run` takes a `&mut dyn HarvestPredictor`.
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
//!   before, across all homes (a histogram per capacity class).

use std::sync::Arc;

use clock::Nanos;

/// What a predictor sees of one home at one step: its allotment and its usage up to
/// and including now (never the future).
#[derive(Debug, Clone, Copy)]
pub struct HomeView<'a> {
    /// Channels allotted to the home.
    pub alloc_channels: u32,
    /// Blocks allotted to the home.
    pub alloc_blocks: u64,
    /// The capacity granule (a gSSD's capacity is a multiple of it): free capacity
    /// below it cannot be lent, so predictors can skip their duration search.
    pub chunk_blocks: u64,
    /// Channels in use per step, the last element being now.
    pub used_channels: &'a [u8],
    /// Blocks in use per step, the last element being now.
    pub used_blocks: &'a [u32],
}

impl HomeView<'_> {
    /// The step index of now (0-based from the start of the series).
    pub fn now(&self) -> usize {
        self.used_blocks.len() - 1
    }
}

/// A prediction of harvestable resources, before rounding to the harvest
/// granularity (the simulator rounds down with `HarvestConfig::harvestable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    /// Blocks free to lend.
    pub free_blocks: u64,
    /// Channels free to lend.
    pub free_channels: u32,
    /// How long they stay free, from now.
    pub lasts: Nanos,
}

/// Predicts harvestable resources per home. See the module docs for how an LSTM
/// predictor implements it.
pub trait HarvestPredictor {
    /// A short name for reports (`oracle`, `last`, `histogram`, ...).
    fn name(&self) -> &str;

    /// Sees home `home`'s usage at this step (called for every home, every step,
    /// before any prediction of the step). Online learners train here; the default
    /// does nothing.
    fn observe(&mut self, _home: usize, _view: &HomeView<'_>) {}

    /// What home `home` can lend from now, or `None` for nothing. Called only for
    /// homes that lend no gSSD at the moment.
    fn predict(&mut self, home: usize, view: &HomeView<'_>) -> Option<Prediction>;
}

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

impl HarvestPredictor for Oracle {
    fn name(&self) -> &str {
        "oracle"
    }

    fn predict(&mut self, home: usize, v: &HomeView<'_>) -> Option<Prediction> {
        let now = v.now();
        let ch = self.usage.channels_of(home);
        let bl = self.usage.blocks_of(home);
        let end = (now + self.granule_steps).min(ch.len());
        if end - now < self.granule_steps {
            return None;
        }
        let peak_c = ch[now..end].iter().copied().max().unwrap_or(0) as u32;
        let peak_b = bl[now..end].iter().copied().max().unwrap_or(0) as u64;
        let free_channels = v.alloc_channels.saturating_sub(peak_c);
        let chunk = v.chunk_blocks.max(1);
        let free_blocks = v.alloc_blocks.saturating_sub(peak_b) / chunk * chunk;
        if free_channels == 0 || free_blocks == 0 {
            return None;
        }
        let lim_c = v.alloc_channels - free_channels;
        let lim_b = v.alloc_blocks - free_blocks;
        let lasts = match (now..ch.len()).find(|&s| ch[s] as u32 > lim_c || bl[s] as u64 > lim_b) {
            Some(last) => (last - now) as Nanos * STEP,
            // Free to the end of the data: assume it stays free for the longest
            // job (8.5 days) beyond, so that jobs running past the end of the run
            // are not refused for lack of data.
            None => (ch.len() - now) as Nanos * STEP + BEYOND,
        };
        Some(Prediction {
            free_blocks,
            free_channels,
            lasts,
        })
    }
}

/// Last-window minus margin (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastWindow {
    /// Window in steps (3 = the paper's 15 minutes).
    pub window: usize,
    /// Under-provisioning of the harvestable prediction (0.05 = the paper's 5%).
    pub margin: f64,
    /// Longest look back for the duration, in steps (576 = 2 days).
    pub max_lookback: usize,
}

impl Default for LastWindow {
    fn default() -> Self {
        Self {
            window: 3,
            margin: 0.05,
            max_lookback: 576,
        }
    }
}

impl HarvestPredictor for LastWindow {
    fn name(&self) -> &str {
        "last"
    }

    fn predict(&mut self, _home: usize, v: &HomeView<'_>) -> Option<Prediction> {
        let n = v.used_blocks.len();
        let w = self.window.clamp(1, n);
        let peak_c = v.used_channels[n - w..].iter().copied().max().unwrap_or(0) as f64;
        let peak_b = v.used_blocks[n - w..].iter().copied().max().unwrap_or(0) as f64;
        let ac = v.alloc_channels as f64;
        let ab = v.alloc_blocks as f64;
        let free_channels = (ac - peak_c - self.margin * ac).floor().max(0.0) as u32;
        let chunk = v.chunk_blocks.max(1);
        let free_blocks = (ab - peak_b - self.margin * ab).floor().max(0.0) as u64 / chunk * chunk;
        if free_channels == 0 || free_blocks == 0 {
            return None;
        }
        let lim_c = v.alloc_channels - free_channels;
        let lim_b = v.alloc_blocks - free_blocks;
        let back = n.min(self.max_lookback);
        let held = (1..=back)
            .find(|&k| v.used_channels[n - k] as u32 > lim_c || v.used_blocks[n - k] as u64 > lim_b)
            .map_or(back, |k| k - 1);
        Some(Prediction {
            free_blocks,
            free_channels,
            lasts: held as Nanos * STEP,
        })
    }
}

/// The unsold-capacity histogram heuristic of §4.4.1 (see the module docs).
#[derive(Debug, Clone)]
pub struct Histogram {
    /// `None`: draw a past duration at random (the paper's rule); `Some(q)`: predict
    /// the `q` quantile of past durations (0.2: 80% of past runs lasted longer).
    pub quantile: Option<f64>,
    rng: sla::rng::SplitMix64,
    /// Fewer past runs than this in a class: predict one granule.
    pub min_samples: usize,
    granule: Nanos,
    /// Per home: free channels at the previous step, and since when each class
    /// `c` (at least `c` free channels) has held.
    state: Vec<(u8, [u32; 17])>,
    /// Per class `c` in 1..=16: run lengths in steps, as a count per length
    /// (lengths above `MAX_RUN` pooled in the last bucket).
    hist: Vec<Vec<u32>>,
    /// Samples per class.
    counts: [u64; 17],
}

/// Longest run length the histogram tells apart (7 days of steps).
const MAX_RUN: usize = 2016;

impl Histogram {
    /// A histogram predictor for `homes` homes drawing past durations (at least
    /// `granule`) with a generator seeded by `seed`.
    pub fn new(homes: usize, granule: Nanos, seed: u64) -> Self {
        Self {
            quantile: None,
            rng: sla::rng::SplitMix64::new(seed),
            min_samples: 20,
            granule,
            state: vec![(0, [0; 17]); homes],
            hist: vec![vec![0; MAX_RUN + 1]; 17],
            counts: [0; 17],
        }
    }

    fn quantile_steps(&mut self, class: usize) -> Option<usize> {
        if (self.counts[class] as usize) < self.min_samples {
            return None;
        }
        let q = match self.quantile {
            Some(q) => q,
            None => self.rng.next_f64(),
        };
        let target = (q * self.counts[class] as f64).ceil().max(1.0) as u64;
        let mut acc = 0u64;
        for (len, &n) in self.hist[class].iter().enumerate() {
            acc += n as u64;
            if acc >= target {
                return Some(len);
            }
        }
        Some(MAX_RUN)
    }
}

impl HarvestPredictor for Histogram {
    fn name(&self) -> &str {
        "histogram"
    }

    fn observe(&mut self, home: usize, v: &HomeView<'_>) {
        let now = v.now() as u32;
        let free = v
            .alloc_channels
            .saturating_sub(*v.used_channels.last().unwrap_or(&0) as u32)
            .min(16) as u8;
        let (prev, starts) = &mut self.state[home];
        if now == 0 {
            *prev = free;
            for s in starts.iter_mut() {
                *s = 0;
            }
            return;
        }
        if free < *prev {
            for c in (free + 1)..=*prev {
                let len = ((now - starts[c as usize]) as usize).min(MAX_RUN);
                self.hist[c as usize][len] += 1;
                self.counts[c as usize] += 1;
            }
        } else {
            for c in (*prev + 1)..=free {
                starts[c as usize] = now;
            }
        }
        *prev = free;
    }

    fn predict(&mut self, _home: usize, v: &HomeView<'_>) -> Option<Prediction> {
        let n = v.used_blocks.len();
        let free_channels = v
            .alloc_channels
            .saturating_sub(v.used_channels[n - 1] as u32);
        let free_blocks = v.alloc_blocks.saturating_sub(v.used_blocks[n - 1] as u64);
        if free_channels == 0 || free_blocks == 0 {
            return None;
        }
        let lasts = match self.quantile_steps(free_channels.min(16) as usize) {
            Some(s) => (s as Nanos * STEP).max(self.granule),
            None => self.granule,
        };
        Some(Prediction {
            free_blocks,
            free_channels,
            lasts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::SEC;

    fn view<'a>(c: &'a [u8], b: &'a [u32]) -> HomeView<'a> {
        HomeView {
            alloc_channels: 4,
            alloc_blocks: 1000,
            chunk_blocks: 1,
            used_channels: c,
            used_blocks: b,
        }
    }

    #[test]
    fn oracle_sees_the_end() {
        let usage = Arc::new(Usage {
            steps: 20,
            channels: [vec![1u8; 12], vec![3u8; 8]].concat(),
            blocks: vec![100; 20],
        });
        let mut o = Oracle::new(usage.clone(), 1800 * SEC);
        let p = o
            .predict(0, &view(&usage.channels[..3], &usage.blocks[..3]))
            .unwrap();
        assert_eq!((p.free_channels, p.free_blocks), (3, 900));
        assert_eq!(p.lasts, 10 * STEP, "steps 2..12 are free");
        // Too close to the rise for a full granule of 3 free channels: 1 free.
        let p = o
            .predict(0, &view(&usage.channels[..10], &usage.blocks[..10]))
            .unwrap();
        assert_eq!(p.free_channels, 1);
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
        let p = l.predict(0, &view(&c, &b)).unwrap();
        // peak of the last 3 steps: 1 channel, 200 blocks; margin 5%.
        assert_eq!((p.free_channels, p.free_blocks), (2, 750));
        assert_eq!(p.lasts, 5 * STEP, "free for the 5 steps since the 3");
        assert_eq!(l.predict(0, &view(&[4], &[0])), None);
    }

    #[test]
    fn histogram_learns_run_lengths() {
        let mut h = Histogram::new(1, 1800 * SEC, 1);
        h.min_samples = 2;
        h.quantile = Some(0.2);
        // free channels alternate 4 (for 10 steps) and 0 (1 step): runs of 10.
        let mut c = Vec::new();
        for i in 0..60 {
            c.push(if i % 11 == 10 { 4u8 } else { 0 });
            let b = vec![0u32; c.len()];
            h.observe(0, &view(&c, &b));
        }
        assert!(h.counts[4] >= 4);
        assert_eq!(h.quantile_steps(4), Some(10));
        let p = h.predict(0, &view(&[0], &[0])).unwrap();
        assert_eq!(p.lasts, 3000 * SEC, "10 steps of 5 minutes");
    }
}
