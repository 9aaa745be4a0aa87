//! Overhead of the predictors per vSSD, against the paper's Table 3 (training 475 ms,
//! inference 7.3 ms, 1.7 MB per vSSD): one training period and one inference of each
//! predictor, model size, and predicting for N vSSDs batched against one by one;
//! the duration predictors' training by hand and through candle's autograd.
//! Run by `scripts/bench-predict.sh`; prints one JSON object.
//!
//! The inputs are synthetic (a level pattern that changes every few windows); only
//! the timings are reported, and they do not depend on the values.

use std::time::Instant;

use clock::SEC;
use predict::{
    predict_batch, DurationPredictor, LevelPredictor, Predictor, PredictorConfig, Role,
    VssdPredictor, WindowStats,
};

const STEP: u64 = 18 * SEC;

fn pattern(i: u64) -> u32 {
    [2, 2, 5, 5, 5, 1, 8, 8, 3, 0, 0, 6][((i / 7) % 12) as usize]
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// (mean training-period ms, max training-period ms, inference ms) of a level predictor.
fn level(cfg: &PredictorConfig, capacity: bool) -> (f64, f64, f64, usize) {
    let (m, nf) = if capacity {
        (&cfg.capacity, 4)
    } else {
        (&cfg.bandwidth, 6)
    };
    let mut p = LevelPredictor::new(cfg, m, nf, 1).unwrap();
    let (mut tsum, mut tmax, mut tn) = (0.0, 0.0f64, 0);
    for i in 0..400u64 {
        let l = pattern(i);
        let x = l as f32 / 16.0;
        let t0 = Instant::now();
        let trained = p.observe(i * STEP, vec![x; nf], l).unwrap();
        let dt = ms(t0.elapsed());
        if trained && i > 60 {
            tsum += dt;
            tmax = tmax.max(dt);
            tn += 1;
        }
    }
    let t0 = Instant::now();
    let reps = 200;
    for _ in 0..reps {
        std::hint::black_box(p.predict().unwrap());
    }
    (
        tsum / tn as f64,
        tmax,
        ms(t0.elapsed()) / reps as f64,
        p.model_bytes(),
    )
}

fn duration(cfg: &PredictorConfig) -> (f64, f64, f64, usize) {
    let mut d = DurationPredictor::new(cfg, 1).unwrap();
    let (mut tsum, mut tmax, mut tn) = (0.0, 0.0f64, 0);
    let every = (cfg.train_every_s / 18.0).round() as u64;
    for i in 0..3000u64 {
        let t0 = Instant::now();
        d.observe(i * STEP, pattern(i)).unwrap();
        let dt = ms(t0.elapsed());
        if i % every == 0 && i > 1000 {
            tsum += dt;
            tmax = tmax.max(dt);
            tn += 1;
        }
    }
    let now = 3000 * STEP;
    let reps = 200;
    let t0 = Instant::now();
    for k in 0..reps {
        std::hint::black_box(d.predict(pattern(k), now).unwrap());
    }
    (
        tsum / tn as f64,
        tmax,
        ms(t0.elapsed()) / reps as f64,
        d.model_bytes(),
    )
}

fn main() {
    // As the daemon and `flexssd sim predict` run them.
    predict::tune_process_for_training();
    let n: usize = std::env::args().nth(1).map_or(1000, |s| s.parse().unwrap());
    let cfg = PredictorConfig::default();
    let bw = level(&cfg, false);
    let cap = level(&cfg, true);
    let dur = duration(&cfg);
    // The same duration training through candle's autograd, the reference the
    // hand-written step is tested against: the ratio of the two is the speed-up.
    let mut reference = cfg.clone();
    reference.duration.autograd = true;
    let dur_autograd = duration(&reference);
    let row = |name: &str, v: (f64, f64, f64, usize)| {
        format!(
            "\"{name}\": {{\"train_period_ms\": {:.3}, \"train_period_max_ms\": {:.3}, \"inference_ms\": {:.4}, \"model_bytes\": {}}}",
            v.0, v.1, v.2, v.3
        )
    };
    // Many vSSDs: warm them cheaply (1 Adam step per period), then predict.
    let warm_cfg = PredictorConfig {
        epochs: 1,
        ..cfg.clone()
    };
    let t0 = Instant::now();
    let mut ps: Vec<VssdPredictor> = (0..n)
        .map(|k| VssdPredictor::new(&warm_cfg, Role::Harvestable, k as u64).unwrap())
        .collect();
    for (k, p) in ps.iter_mut().enumerate() {
        for i in 0..40u64 {
            let x = pattern(i + k as u64) as f32 / 16.0;
            p.observe(i * STEP, &WindowStats::flat(x, x, 0.5 * x))
                .unwrap();
        }
    }
    let warm_s = t0.elapsed().as_secs_f64();
    let now = 40 * STEP;
    let bytes: usize = ps.iter().map(|p| p.model_bytes()).sum::<usize>() / n;
    let t0 = Instant::now();
    let one: Vec<_> = ps.iter().map(|p| p.predict(now).unwrap()).collect();
    let one_ms = ms(t0.elapsed());
    let refs: Vec<&VssdPredictor> = ps.iter().collect();
    let t0 = Instant::now();
    let batch = predict_batch(&refs, now).unwrap();
    let batch_ms = ms(t0.elapsed());
    let same = one
        .iter()
        .zip(&batch)
        .filter(|(a, b)| a.bandwidth == b.bandwidth && a.capacity == b.capacity)
        .count();
    println!(
        "{{{}, {}, {}, {}, \"vssd_model_bytes\": {bytes}, \"fleet\": {{\"vssds\": {n}, \"warmup_s\": {warm_s:.1}, \"one_by_one_ms\": {one_ms:.1}, \"batched_ms\": {batch_ms:.1}, \"same_levels\": {same}}}}}",
        row("bandwidth", bw),
        row("capacity", cap),
        row("duration_per_resource", dur),
        row("duration_per_resource_autograd", dur_autograd),
    );
}
