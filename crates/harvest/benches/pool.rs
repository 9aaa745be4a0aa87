//! gSSD pool: best-fit lookup and gSSD creation with 10,000 gSSDs in the pool, for
//! each concurrency scheme, on one thread and with two threads contending (the paper
//! reports 1.2 µs per lookup and 61 µs per creation).
//!
//! `cargo bench -p harvest --bench pool -- --warm-up-time 1 --measurement-time 3`
//!
//! * `lookup`: `best_fit` for a random demand (read-only; no state changes).
//! * `create`: insert a new gSSD into the full pool *and* remove it again, so that
//!   the pool stays at 10,000; the reported time bounds creation from above.
//! * `harvest_release`: best-fit + assign + release (a full allocation cycle; a
//!   gSSD that the release sends home is inserted again).
//!
//! In the `2threads` variants both threads run the operation back to back; the time
//! is wall time over the iterations each thread did, i.e. the latency one caller
//! sees while another one competes for the pool.

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clock::{Nanos, SEC};
use criterion::{criterion_group, criterion_main, Criterion};
use harvest::{
    Demand, Gssd, HarvestConfig, MutexPool, ReclaimAction, RwPool, ShardedPool, SharedPool,
};
use rng::SplitMix64;

const N: u64 = 10_000;
const MIN30: Nanos = 1800 * SEC;

/// 10,000 gSSDs over the paper's device shapes: 1–64 chunks, 1–16 channels,
/// 30 min to 48 h. Seeded, so that every scheme sees the same pool.
fn fill(p: &dyn SharedPool, cfg: &HarvestConfig) {
    let mut r = SplitMix64::new(0x9E37_79B9_7F4A_7C15);
    for id in 0..N {
        let chunks = 1 + r.below(64) as u64;
        let bw = 1 + r.below(16) as u32;
        let halves = 1 + r.below(96) as u64;
        let g = Gssd::new(
            cfg,
            id,
            Some(id),
            chunks * cfg.chunk_blocks,
            bw,
            0,
            halves * MIN30,
        )
        .unwrap();
        p.insert(g).unwrap();
    }
}

/// 1,024 seeded demands, the same for every scheme.
fn demands(cfg: &HarvestConfig) -> Vec<Demand> {
    let mut r = SplitMix64::new(42);
    (0..1024)
        .map(|_| Demand {
            capacity: (1 + r.below(48) as u64) * cfg.chunk_blocks,
            bandwidth: 1 + r.below(12) as u32,
            duration: (1 + r.below(64) as u64) * MIN30,
        })
        .collect()
}

/// Runs `op(pool, thread, i)` `iters` times on each of `threads` threads.
fn run<F>(p: &Arc<dyn SharedPool>, threads: u64, iters: u64, op: &F) -> Duration
where
    F: Fn(&dyn SharedPool, u64, u64) + Sync,
{
    if threads == 1 {
        let start = Instant::now();
        for i in 0..iters {
            op(&**p, 0, i);
        }
        return start.elapsed();
    }
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let p = p.clone();
            s.spawn(move || {
                for i in 0..iters {
                    op(&*p, t, i);
                }
            });
        }
    });
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let cfg = HarvestConfig::default();
    let ds = demands(&cfg);
    let schemes: Vec<(&str, Arc<dyn SharedPool>)> = vec![
        ("mutex", Arc::new(MutexPool::new(cfg).unwrap())),
        ("rwlock", Arc::new(RwPool::new(cfg).unwrap())),
        ("sharded8", Arc::new(ShardedPool::new(cfg, 8).unwrap())),
    ];
    let mut g = c.benchmark_group("gssd_pool_10k");
    for (name, p) in &schemes {
        fill(&**p, &cfg);
        assert_eq!(p.len(), N as usize);
        for threads in [1u64, 2] {
            let lookup = |p: &dyn SharedPool, t: u64, i: u64| {
                let d = &ds[((i * 2 + t) % 1024) as usize];
                black_box(p.best_fit(d, 0).unwrap());
            };
            g.bench_function(format!("lookup/{name}/{threads}thread"), |b| {
                b.iter_custom(|iters| run(p, threads, iters, &lookup))
            });
            let create = |p: &dyn SharedPool, t: u64, i: u64| {
                // Fresh ids and homes per thread, outside the prefilled range.
                let id = N + 1 + t;
                let g = Gssd::new(
                    &cfg,
                    id,
                    Some(id),
                    (1 + i % 64) * cfg.chunk_blocks,
                    1 + (i % 16) as u32,
                    0,
                    (1 + i % 96) * MIN30,
                )
                .unwrap();
                p.insert(g).unwrap();
                black_box(p.remove(id).unwrap());
            };
            g.bench_function(format!("create/{name}/{threads}thread"), |b| {
                b.iter_custom(|iters| run(p, threads, iters, &create))
            });
            let harvest = |p: &dyn SharedPool, t: u64, i: u64| {
                let d = &ds[((i * 2 + t) % 1024) as usize];
                if let Some(g) = p.harvest(t, d, 0).unwrap() {
                    let r = p.release(g.id, t, 0).unwrap();
                    if r.action != ReclaimAction::ReturnToPool {
                        // It expires within 30 minutes, so it left the pool for its
                        // home: put it back to keep the pool at 10,000.
                        p.insert(Gssd {
                            tenant: None,
                            ..r.gssd
                        })
                        .unwrap();
                    }
                }
            };
            g.bench_function(format!("harvest_release/{name}/{threads}thread"), |b| {
                b.iter_custom(|iters| run(p, threads, iters, &harvest))
            });
        }
        assert_eq!(p.len(), N as usize);
    }
    // Control: two threads, each with its own pool (nothing shared). The gap between
    // this and `lookup/*/2thread` is what sharing one pool costs; the gap between this
    // and `lookup/mutex/1thread` is what the machine (2 cores, other work) costs.
    let private: Vec<MutexPool> = (0..2).map(|_| MutexPool::new(cfg).unwrap()).collect();
    for p in &private {
        fill(p, &cfg);
    }
    g.bench_function("lookup/private_pool_per_thread/2thread", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for (t, p) in private.iter().enumerate() {
                    let ds = &ds;
                    s.spawn(move || {
                        for i in 0..iters {
                            let d = &ds[((i * 2 + t as u64) % 1024) as usize];
                            black_box(p.best_fit(d, 0).unwrap());
                        }
                    });
                }
            });
            start.elapsed()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
