//! The quantile model (`model = "quantile"`): conditional distributions read out at a
//! quantile, learned offline from other vSSDs (a prior) and online from this one.
//!
//! Why this shape. The paper's accuracy is asymmetric: a level prediction counts as
//! accurate when it is *at least* the next level, a duration when it is *at most* the
//! time the level lasts. The prediction that maximises accuracy for a given waste is
//! therefore a quantile of the predicted distribution, not its most likely value (the
//! LSTM's argmax) or its mean (MSE durations). And the most informative input by far is
//! the current level: levels move rarely at 18-second windows and move by a few
//! levels at 30-minute ones, so the model is a *residual* on last-value: it learns
//! where the next level lies relative to the current one.
//!
//! * **Levels** ([`QuantileLevel`]): for each current level `c`, the distribution of
//!   the next level is `(w0 · prior(·|c) + own(·|c)) / (w0 + n_c)`: `own` counts this
//!   vSSD's transitions from `c` (older ones fade, `memory`), `prior` the transitions
//!   of the training vSSDs ([`LevelPrior`]), and without a prior "the level stays" (a
//!   point mass at `c`). The prediction is the `level_quantile` of that distribution.
//!   Untrained (no prior, nothing seen from `c`) it is exactly last-value.
//! * **Durations** ([`QuantileDuration`]): for each level `i`, the lengths of past runs
//!   of "usage at or below `i`" (own, and the prior's with total weight `w0`), plus a
//!   run of length zero with weight `zero_weight`. Given that the current run has
//!   lasted `e`, the remaining time is the `duration_quantile` of `d - e` over the runs
//!   with `d > e` (survival analysis on the empirical distribution). The zero-length
//!   run keeps a vSSD with few runs seen from promising much (a quantile below
//!   `1 / (n + 1)` of `n` runs is not estimable); untrained the prediction is zero.
//!   A run that has outlived every run seen (own and prior, runs that reached the
//!   cap included, since they are counted only up to it) is the one case the
//!   empirical distribution cannot speak to: a home idle longer than ever, longer
//!   than the cap, or at a level it never exceeded, would be promised nothing
//!   however long it stays idle. There the remaining time is read off the scale-free ("Lindy") prior for
//!   a run of age `e`, `P(remaining <= t) = t / (e + t)`: `e · q / (1 - q)` at
//!   quantile `q` (0.18 e at the default 0.15), so a longer idle promises more.
//!
//! Training is counting: an observation adds one transition and possibly one run, so
//! the cost per window is a few memory writes; a prediction sorts at most `memory`
//! own runs merged with the prior's sorted ones.

use std::collections::VecDeque;
use std::sync::Arc;

use clock::{Nanos, SEC};
use serde::{Deserialize, Serialize};

use crate::config::PredictorConfig;
use crate::level::secs;
use crate::PredictError;

/// Transition probabilities between levels learned offline from training series:
/// `rows[c][l]` = P(next level `l` | current level `c`); an all-zero row means "no
/// data from `c`".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelPrior {
    /// One row per current level, summing to 1 (or all zero).
    pub rows: Vec<Vec<f32>>,
}

impl LevelPrior {
    /// Counts the transitions of every series (levels above `levels` are clamped) and
    /// normalises each row.
    pub fn fit<'a>(levels: u32, series: impl IntoIterator<Item = &'a [u32]>) -> Self {
        let n = levels as usize + 1;
        let mut rows = vec![vec![0f64; n]; n];
        for s in series {
            for w in s.windows(2) {
                rows[(w[0] as usize).min(n - 1)][(w[1] as usize).min(n - 1)] += 1.0;
            }
        }
        let rows = rows
            .into_iter()
            .map(|r| {
                let t: f64 = r.iter().sum();
                r.iter()
                    .map(|&v| if t > 0.0 { (v / t) as f32 } else { 0.0 })
                    .collect()
            })
            .collect();
        Self { rows }
    }
}

/// Lengths of runs of "usage at or below level `i`" learned offline, in seconds
/// (capped), sorted, per level `i`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DurationPrior {
    /// Sorted run lengths in seconds, one list per level.
    pub runs: Vec<Vec<f32>>,
}

impl DurationPrior {
    /// Runs of every series, each a list of levels in windows of `step_s` seconds.
    /// Runs cut by the end of a series count only if they reached the cap.
    pub fn fit<'a>(
        levels: u32,
        cap_s: f64,
        series: impl IntoIterator<Item = (&'a [u32], f64)>,
    ) -> Self {
        let n = levels as usize + 1;
        let mut runs = vec![Vec::new(); n];
        for (s, step) in series {
            for (i, out) in runs.iter_mut().enumerate() {
                let mut start: Option<usize> = None;
                for (k, &l) in s.iter().enumerate() {
                    if l as usize <= i {
                        start.get_or_insert(k);
                    } else if let Some(st) = start.take() {
                        out.push((((k - st) as f64 * step).min(cap_s)) as f32);
                    }
                }
                if let Some(st) = start {
                    let d = (s.len() - st) as f64 * step;
                    if d >= cap_s {
                        out.push(cap_s as f32);
                    }
                }
            }
        }
        for r in &mut runs {
            r.sort_by(f32::total_cmp);
        }
        Self { runs }
    }
}

/// The quantile level model of one resource of one vSSD.
#[derive(Debug, Clone)]
pub struct QuantileLevel {
    levels: u32,
    q: f64,
    w0: f64,
    decay: f32,
    prior: Option<Arc<LevelPrior>>,
    /// Own transition weights `[from][to]`.
    own: Vec<Vec<f32>>,
    last: Option<u32>,
}

fn check(cfg: &PredictorConfig) -> Result<(), PredictError> {
    let q = &cfg.quantile;
    let ok = |v: f64| v.is_finite() && (0.0..=1.0).contains(&v);
    let weight = |v: f64| v.is_finite() && v >= 0.0;
    let valid = cfg.levels > 0
        && ok(q.level_quantile)
        && ok(q.duration_quantile)
        && weight(q.level_prior_weight)
        && weight(q.duration_prior_weight)
        && weight(q.zero_weight)
        && q.memory > 0;
    if !valid {
        return Err(PredictError::Config(
            "quantile: quantiles must lie in 0..=1, weights be non-negative, memory and levels positive"
                .into(),
        ));
    }
    Ok(())
}

impl QuantileLevel {
    /// A model of levels `0..=cfg.levels`, with an optional prior (shared by many vSSDs).
    pub fn new(
        cfg: &PredictorConfig,
        prior: Option<Arc<LevelPrior>>,
    ) -> Result<Self, PredictError> {
        check(cfg)?;
        let n = cfg.levels as usize + 1;
        if let Some(p) = &prior {
            if p.rows.len() != n || p.rows.iter().any(|r| r.len() != n) {
                return Err(PredictError::Config(format!(
                    "quantile: level prior is not {n} x {n}"
                )));
            }
        }
        Ok(Self {
            levels: cfg.levels,
            q: cfg.quantile.level_quantile,
            w0: cfg.quantile.level_prior_weight,
            decay: 1.0 - 1.0 / cfg.quantile.memory as f32,
            prior,
            own: vec![vec![0.0; n]; n],
            last: None,
        })
    }

    /// Records the level of the window ending at `now`. Always "trains" (counts).
    pub fn observe(&mut self, _now: Nanos, level: u32) -> bool {
        let level = level.min(self.levels);
        if let Some(p) = self.last {
            let row = &mut self.own[p as usize];
            for v in row.iter_mut() {
                *v *= self.decay;
            }
            row[level as usize] += 1.0;
        }
        self.last = Some(level);
        true
    }

    /// The next level at quantile `q` of the predicted distribution, or `None` before
    /// the first observation.
    pub fn predict_at(&self, q: f64) -> Option<u32> {
        let c = self.last? as usize;
        let own = &self.own[c];
        let n: f64 = own.iter().map(|&v| v as f64).sum();
        let prior = self
            .prior
            .as_ref()
            .map(|p| &p.rows[c])
            .filter(|r| r.iter().any(|&v| v > 0.0));
        let total = self.w0 + n;
        if total <= 0.0 {
            return Some(c as u32);
        }
        let target = q.clamp(0.0, 1.0) * total - 1e-9;
        let mut acc = 0.0;
        for (l, &o) in own.iter().enumerate() {
            let p = match prior {
                Some(r) => r[l] as f64,
                None => f64::from(u8::from(l == c)),
            };
            acc += self.w0 * p + o as f64;
            if acc >= target && acc > 0.0 {
                return Some(l as u32);
            }
        }
        Some(self.levels)
    }

    /// The next level at the configured quantile.
    pub fn predict(&self) -> Option<u32> {
        self.predict_at(self.q)
    }

    /// Bytes of model state (the prior is shared and not counted).
    pub fn model_bytes(&self) -> usize {
        self.own.len() * self.own.len() * 4 + 8
    }
}

/// What is left, at quantile `q` (below 1), of a run that has lasted `age`
/// and outlived everything seen, so that nothing is known of its scale: with
/// the age a uniform share of the whole run, P(remaining <= t) = t / (age + t),
/// whose `q` quantile is `age · q / (1 - q)`. In the unit of `age`.
pub(crate) fn scale_free_remaining(age: f64, q: f64) -> f64 {
    age * q / (1.0 - q)
}

/// The quantile duration model of one resource of one vSSD.
#[derive(Debug, Clone)]
pub struct QuantileDuration {
    levels: u32,
    q: f64,
    w0: f64,
    zero: f64,
    memory: usize,
    cap: Nanos,
    prior: Option<Arc<DurationPrior>>,
    starts: Vec<Option<Nanos>>,
    /// Own completed runs per level, in seconds (capped), oldest first.
    runs: Vec<VecDeque<f32>>,
}

impl QuantileDuration {
    /// A model of durations at levels `0..=cfg.levels`, capped at the duration cap.
    pub fn new(
        cfg: &PredictorConfig,
        prior: Option<Arc<DurationPrior>>,
    ) -> Result<Self, PredictError> {
        check(cfg)?;
        let n = cfg.levels as usize + 1;
        if prior.as_ref().is_some_and(|p| p.runs.len() != n) {
            return Err(PredictError::Config(format!(
                "quantile: duration prior has not {n} levels"
            )));
        }
        Ok(Self {
            levels: cfg.levels,
            q: cfg.quantile.duration_quantile,
            w0: cfg.quantile.duration_prior_weight,
            zero: cfg.quantile.zero_weight,
            memory: cfg.quantile.memory,
            cap: secs(cfg.duration.cap_s()),
            prior,
            starts: vec![None; n],
            runs: vec![VecDeque::new(); n],
        })
    }

    /// Records the level of the window ending at `now`; a run that ends is learned.
    pub fn observe(&mut self, now: Nanos, level: u32) {
        let cap_s = self.cap as f32 / SEC as f32;
        for (i, st) in self.starts.iter_mut().enumerate() {
            if level as usize <= i {
                st.get_or_insert(now);
            } else if let Some(s) = st.take() {
                let d = (now.saturating_sub(s) as f64 / SEC as f64) as f32;
                let r = &mut self.runs[i];
                r.push_back(d.min(cap_s));
                if r.len() > self.memory {
                    r.pop_front();
                }
            }
        }
    }

    /// Remaining time at quantiles `qs` for usage at or below `level`, as of `now`.
    pub fn predict_at(&self, level: u32, now: Nanos, qs: &[f64]) -> Vec<Nanos> {
        let i = (level as usize).min(self.levels as usize);
        if i == self.levels as usize {
            // Usage can never exceed the top level.
            return vec![self.cap; qs.len()];
        }
        let cap_s = self.cap as f32 / SEC as f32;
        let e = self.starts[i].map_or(0.0, |s| (now.saturating_sub(s) as f64 / SEC as f64) as f32);
        // Runs that outlived `e` (or reached the cap), as remaining time.
        let alive = |d: f32| d > e || d >= cap_s;
        let mut own: Vec<f32> = self.runs[i]
            .iter()
            .copied()
            .filter(|&d| alive(d))
            .map(|d| (d - e).max(0.0))
            .collect();
        own.sort_by(f32::total_cmp);
        let pri: Vec<f32> = self
            .prior
            .as_ref()
            .map(|p| {
                p.runs[i]
                    .iter()
                    .copied()
                    .filter(|&d| alive(d))
                    .map(|d| (d - e).max(0.0))
                    .collect()
            })
            .unwrap_or_default();
        // Capped runs stay "alive" at any age, but promise nothing once the
        // current run has passed the cap: only a run longer than `e` speaks.
        let outlived = own.iter().chain(&pri).any(|&r| r > 0.0);
        if !outlived && e > 0.0 {
            // The current run has outlived every run ever seen (or the cap
            // the runs are counted to): the data say nothing about its end,
            // only that it is the longest (see `scale_free_remaining`).
            return qs
                .iter()
                .map(|&q| {
                    let q = q.clamp(0.0, 0.99);
                    secs(scale_free_remaining(f64::from(e), q).min(f64::from(cap_s)))
                })
                .collect();
        }
        let wp = if pri.is_empty() {
            0.0
        } else {
            self.w0 / pri.len() as f64
        };
        let total = own.len() as f64 + wp * pri.len() as f64 + self.zero;
        qs.iter()
            .map(|&q| {
                if total <= 0.0 {
                    return 0;
                }
                let target = q.clamp(0.0, 1.0) * total - 1e-9;
                let mut acc = self.zero;
                if acc >= target && acc > 0.0 {
                    return 0;
                }
                // Merge the two sorted lists, accumulating weight.
                let (mut a, mut b) = (0, 0);
                let mut v = 0.0f32;
                while a < own.len() || b < pri.len() {
                    let take_own = b >= pri.len() || (a < own.len() && own[a] <= pri[b]);
                    if take_own {
                        v = own[a];
                        acc += 1.0;
                        a += 1;
                    } else {
                        v = pri[b];
                        acc += wp;
                        b += 1;
                    }
                    if acc >= target {
                        break;
                    }
                }
                secs((v as f64).min(cap_s as f64))
            })
            .collect()
    }

    /// Remaining time at the configured quantile.
    pub fn predict(&self, level: u32, now: Nanos) -> Nanos {
        self.predict_at(level, now, &[self.q])[0]
    }

    /// Bytes of model state (the prior is shared and not counted).
    pub fn model_bytes(&self) -> usize {
        self.starts.len() * (16 + 4 * self.memory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Model;

    fn cfg() -> PredictorConfig {
        PredictorConfig {
            model: Model::Quantile,
            ..Default::default()
        }
    }

    #[test]
    fn untrained_level_model_is_last_value() {
        let c = cfg();
        let mut m = QuantileLevel::new(&c, None).unwrap();
        assert_eq!(m.predict(), None);
        for (k, l) in [3u32, 7, 0, 16, 5].into_iter().enumerate() {
            // Every level seen for the first time: nothing learned from it yet.
            m.observe(k as Nanos, l);
            for q in [0.0, 0.5, 0.8, 1.0] {
                assert_eq!(m.predict_at(q), Some(l), "level {l} q {q}");
            }
        }
    }

    #[test]
    fn level_model_learns_where_a_level_moves() {
        let c = cfg();
        let mut m = QuantileLevel::new(&c, None).unwrap();
        // From 4 the next level is 4 half of the time and 6 the other half.
        for k in 0..400u64 {
            m.observe(k, if k % 4 == 1 { 6 } else { 4 });
        }
        m.observe(400, 4);
        assert_eq!(m.predict_at(0.2), Some(4));
        assert_eq!(m.predict_at(0.8), Some(6));
        // A prior that says "from 2, up to 9" is used until the vSSD has its own data.
        let mut rows = vec![vec![0f32; 17]; 17];
        rows[2][9] = 1.0;
        let mut m = QuantileLevel::new(&c, Some(Arc::new(LevelPrior { rows }))).unwrap();
        m.observe(0, 2);
        assert_eq!(m.predict_at(0.5), Some(9));
        for k in 1..50 {
            m.observe(k, 2);
        }
        assert_eq!(m.predict_at(0.5), Some(2));
    }

    #[test]
    fn level_prior_fits_rows() {
        let p = LevelPrior::fit(2, [&[0u32, 0, 1, 0, 2][..]]);
        let third = 1.0f32 / 3.0;
        assert_eq!(p.rows[0], vec![third, third, third]);
        assert_eq!(p.rows[1], vec![1.0, 0.0, 0.0]);
        assert_eq!(p.rows[2], vec![0.0, 0.0, 0.0]);
    }

    #[test]
    fn untrained_duration_model_promises_nothing_and_top_level_lasts() {
        let c = cfg();
        let m = QuantileDuration::new(&c, None).unwrap();
        assert_eq!(m.predict(3, 100 * SEC), 0);
        assert_eq!(m.predict(16, 100 * SEC), secs(c.duration.cap_s()));
    }

    #[test]
    fn duration_model_reads_a_low_quantile_of_the_remaining_time() {
        let c = PredictorConfig {
            quantile: crate::config::QuantileConfig {
                zero_weight: 0.0,
                ..Default::default()
            },
            ..cfg()
        };
        let mut m = QuantileDuration::new(&c, None).unwrap();
        // Runs at level 0 of 1..=10 hours, separated by one window at level 5.
        let mut t = 0;
        for h in 1..=10u64 {
            m.observe(t, 0);
            t += h * 3600 * SEC;
            m.observe(t, 5);
            t += 60 * SEC;
        }
        m.observe(t, 0);
        let q = |qs: f64, now| m.predict_at(0, now, &[qs])[0] as f64 / 3600.0 / SEC as f64;
        // Fresh run: the 15% quantile of 1..=10 h is 2 h.
        assert!((q(0.15, t) - 2.0).abs() < 1e-6, "{}", q(0.15, t));
        // After 5 h, the runs still alive are 6..=10 h: 1..=5 h left.
        assert!((q(0.15, t + 5 * 3600 * SEC) - 1.0).abs() < 1e-6);
        // With a zero-length run of weight 1 among 10 runs, q below 1/11 gives zero.
        let mut z = m.clone();
        z.zero = 1.0;
        assert_eq!(z.predict_at(0, t, &[0.05])[0], 0);
        assert!(z.predict_at(0, t, &[0.2])[0] > 0);
    }

    #[test]
    fn a_run_longer_than_any_seen_promises_a_share_of_its_age() {
        let c = cfg();
        let mut m = QuantileDuration::new(&c, None).unwrap();
        // Never above level 0: no run has ended at any level.
        for w in 0..=100u64 {
            m.observe(w * 18 * SEC, 0);
        }
        let age = 100 * 18; // seconds
        let want = |q: f64| secs(age as f64 * q / (1.0 - q));
        assert_eq!(m.predict_at(0, 100 * 18 * SEC, &[0.15])[0], want(0.15));
        assert_eq!(m.predict_at(3, 100 * 18 * SEC, &[0.5])[0], want(0.5));
        // Older, more: the promise grows with the age.
        assert!(m.predict(0, 200 * 18 * SEC) > m.predict(0, 100 * 18 * SEC));
        // One run seen that lasts longer than the current one: the data speak
        // again (with the zero-length run at the default weight, nothing yet).
        let mut m = QuantileDuration::new(&c, None).unwrap();
        m.observe(0, 0);
        m.observe(10_000 * SEC, 5);
        m.observe(10_018 * SEC, 0);
        assert_eq!(m.predict(0, 10_100 * SEC), 0);
        // Runs counted to the cap promise nothing past it; the age does.
        let cap = c.duration.cap_s() as u64;
        let mut m = QuantileDuration::new(&c, None).unwrap();
        for k in 0..8u64 {
            let t = k * (cap + 100) * SEC;
            m.observe(t, 0);
            m.observe(t + (cap + 50) * SEC, 5);
        }
        let t = 8 * (cap + 100) * SEC;
        m.observe(t, 0);
        assert!(
            m.predict(0, t + cap / 2 * SEC) > 0,
            "before the cap the runs speak"
        );
        let past = t + 2 * cap * SEC;
        assert_eq!(m.predict_at(0, past, &[0.5])[0], secs(cap as f64));
        assert_eq!(
            m.predict_at(0, past, &[0.15])[0],
            secs(2.0 * cap as f64 * 0.15 / 0.85)
        );
    }

    #[test]
    fn duration_prior_counts_runs_and_capped_tails() {
        let p = DurationPrior::fit(2, 100.0, [(&[0u32, 0, 2, 1, 1, 1][..], 10.0)]);
        // Level 0: one run of 20 s (the tail at 1 is not at or below 0).
        assert_eq!(p.runs[0], vec![20.0]);
        // Level 1: 20 s, then a tail of 30 s cut by the end (dropped: below the cap).
        assert_eq!(p.runs[1], vec![20.0]);
        // Level 2: one run of the whole series, 60 s, cut below the cap: dropped.
        assert!(p.runs[2].is_empty());
        let p = DurationPrior::fit(2, 50.0, [(&[0u32, 0, 2, 1, 1, 1][..], 10.0)]);
        assert_eq!(p.runs[2], vec![50.0]);
    }

    #[test]
    fn bad_settings_are_rejected() {
        let mut c = cfg();
        c.quantile.level_quantile = 1.5;
        assert!(QuantileLevel::new(&c, None).is_err());
        let mut c = cfg();
        c.quantile.memory = 0;
        assert!(QuantileDuration::new(&c, None).is_err());
        let c = cfg();
        let bad = LevelPrior {
            rows: vec![vec![0.0; 3]; 3],
        };
        assert!(QuantileLevel::new(&c, Some(Arc::new(bad))).is_err());
    }
}
