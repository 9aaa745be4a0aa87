//! FTL data-path cost per 4 KiB operation on the memory backend (fast mode: the
//! modelled completion time is computed and ignored), including GC once the
//! vSSD is full. `cargo bench -p ftl --bench ftl`.

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;

use blockdev::BlockDev;
use clock::MonotonicClock;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flash::{Backend, FlashDevice, Geometry, Timing};
use ftl::{default_capacity, Extent, GcPolicyKind, MemCheckpoints, Vssd, VssdConfig};
use rng::SplitMix64;

fn vssd() -> Arc<Vssd> {
    let g = Geometry {
        channels: 8,
        dies_per_channel: 4,
        planes_per_die: 1,
        blocks_per_plane: 32,
        pages_per_block: 256,
        page_size: 4096,
    };
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
    let extents: Vec<Extent> = (0..8).map(|c| Extent::whole_channel(&g, c)).collect();
    let cfg = VssdConfig {
        id: 1,
        name: "bench".into(),
        capacity_bytes: default_capacity(&g, &extents),
        extents,
        gc: GcPolicyKind::Greedy,
        lent: Vec::new(),
    };
    Vssd::create(
        dev,
        cfg,
        Arc::new(MonotonicClock::new()),
        Arc::new(MemCheckpoints::default()),
    )
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let v = vssd();
    let pages = v.size() / 4096;
    let data = vec![0xA5u8; 4096];
    // Fill once so reads hit flash and writes trigger GC.
    for p in 0..pages {
        v.write(p * 4096, &data, false).unwrap();
    }
    let mut r = SplitMix64::new(1);
    let mut next = move || r.below(pages as usize) as u64;
    let mut g = c.benchmark_group("vssd_4k");
    g.throughput(Throughput::Bytes(4096));
    g.bench_function("random_write_full_device", |b| {
        b.iter(|| v.write(next() * 4096, &data, false).unwrap())
    });
    let mut buf = vec![0u8; 4096];
    g.bench_function("random_read", |b| {
        b.iter(|| v.read(next() * 4096, &mut buf).unwrap())
    });
    g.bench_function("sub_page_write_512", |b| {
        b.iter(|| v.write(next() * 4096 + 512, &data[..512], false).unwrap())
    });
    g.finish();
    let s = v.stats();
    eprintln!(
        "write amplification after the run: {:.2}, GC runs {}",
        s.write_amplification(),
        s.gc_runs
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
