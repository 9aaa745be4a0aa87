//! Access cost of every policy on an in-memory, synthetic Zipf(1.2) block
//! sequence (no trace parsing): `cargo bench -p cache`. The end-to-end
//! comparison with libCacheSim, parsing included, is `scripts/bench-cache.sh`.

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use cache::{Access, Events, Key, PolicyConfig, PolicyKind};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rng::SplitMix64;

/// Deterministic Zipf(alpha) sample over `n` objects (inverse CDF on the
/// workspace's seeded generator), with object ids scattered by a multiplicative hash.
fn zipf(len: usize, n: usize, alpha: f64) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(n);
    let mut acc = 0.0;
    for k in 1..=n {
        acc += (k as f64).powf(-alpha);
        cdf.push(acc);
    }
    let mut r = SplitMix64::new(0x2545_F491_4F6C_DD1D);
    (0..len)
        .map(|_| {
            let u = r.next_f64() * acc;
            let rank = cdf.partition_point(|&c| c < u).min(n - 1) as u64;
            rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % (n as u64 * 4)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let seq = zipf(1 << 20, 200_000, 1.2);
    let cfg = PolicyConfig {
        epoch_secs: 1.0,
        ..PolicyConfig::default()
    };
    let mut g = c.benchmark_group("access");
    g.throughput(Throughput::Elements(seq.len() as u64));
    g.sample_size(10);
    for &kind in PolicyKind::ALL {
        g.bench_function(kind.name(), |b| {
            b.iter_batched(
                || kind.build(20_000 * 4096, &cfg).unwrap(),
                |mut p| {
                    let mut ev = Events::new();
                    let mut hits = 0u64;
                    for (i, &x) in seq.iter().enumerate() {
                        let a = Access {
                            time_ns: i as u64 * 10_000,
                            tenant: (x & 3) as u32,
                            key: Key::new((x & 3) as u32, x).unwrap(),
                            write: false,
                        };
                        hits += u64::from(p.access(a, &mut ev).hit);
                        ev.clear();
                    }
                    hits
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
