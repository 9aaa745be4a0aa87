//! The cost of the volume's mapping layer against a bare device (4 KiB random reads
//! and writes on the in-memory device), and migration throughput.
//!
//! `cargo bench -p gvol --bench gvol -- --warm-up-time 1 --measurement-time 3`

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;

use blockdev::{BlockDev, MemDev};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use gvol::{GhostVolume, MigrateOptions};
use rng::SplitMix64;

const MIB: u64 = 1 << 20;
const SIZE: u64 = 64 * MIB;
const BLK: usize = 4096;

fn filled(size: u64) -> Arc<dyn BlockDev> {
    let d = MemDev::new(size);
    let mut r = SplitMix64::new(1);
    let mut buf = vec![0u8; MIB as usize];
    for off in (0..size).step_by(MIB as usize) {
        for w in buf.chunks_exact_mut(8) {
            w.copy_from_slice(&r.next_u64().to_le_bytes());
        }
        d.write(off, &buf, false).unwrap();
    }
    Arc::new(d)
}

/// A volume of `SIZE` over `nseg` equal segments on `nseg` gSSDs.
fn volume(nseg: u64) -> GhostVolume {
    let v = GhostVolume::new("bench", SIZE);
    let seg = SIZE / nseg;
    for i in 0..nseg {
        v.attach(i * seg, seg, i, filled(seg), 0).unwrap();
    }
    v
}

/// Random block-aligned offsets from the workspace's seeded generator.
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }
    fn block(&mut self) -> u64 {
        self.0.below((SIZE / BLK as u64) as usize) as u64 * BLK as u64
    }
}

fn io(c: &mut Criterion) {
    let mut g = c.benchmark_group("io_4k");
    g.throughput(Throughput::Bytes(BLK as u64));
    // A volume whose one segment is half migrated (the copier paused): half the
    // writes go to both gSSDs, under the stripe lock.
    let migrating = volume(1);
    let mut half = migrating
        .start_migration(0, 99, filled(SIZE), 0, MigrateOptions::default())
        .unwrap();
    while half.progress().fraction() < 0.5 {
        half.step().unwrap();
    }
    let devs: Vec<(&str, Arc<dyn BlockDev>)> = vec![
        ("bare", filled(SIZE)),
        ("gvol_1seg", Arc::new(volume(1))),
        ("gvol_16seg", Arc::new(volume(16))),
        ("gvol_half_migrated", Arc::new(migrating)),
    ];
    for (name, dev) in &devs {
        let mut rng = Rng::new(42);
        let mut buf = vec![0u8; BLK];
        g.bench_function(format!("randread/{name}"), |b| {
            b.iter(|| dev.read(rng.block(), &mut buf).unwrap())
        });
        let data = vec![0xA5u8; BLK];
        g.bench_function(format!("randwrite/{name}"), |b| {
            b.iter(|| dev.write(rng.block(), &data, false).unwrap())
        });
    }
    g.finish();
    drop(half);
}

/// A device that does nothing: isolates the mapping layer's own cost from MemDev's
/// copy and cache misses, which vary a lot on a loaded machine.
struct Null(u64);

impl BlockDev for Null {
    fn size(&self) -> u64 {
        self.0
    }
    fn read(&self, _: u64, _: &mut [u8]) -> blockdev::IoResult {
        Ok(0)
    }
    fn write(&self, _: u64, _: &[u8], _: bool) -> blockdev::IoResult {
        Ok(0)
    }
    fn flush(&self) -> blockdev::IoResult {
        Ok(0)
    }
    fn trim(&self, _: u64, _: u64) -> blockdev::IoResult {
        Ok(0)
    }
    fn write_zeroes(&self, _: u64, _: u64, _: bool) -> blockdev::IoResult {
        Ok(0)
    }
}

fn map_overhead(c: &mut Criterion) {
    let mut g = c.benchmark_group("map_4k_null");
    let on_null = |nseg: u64| {
        let v = GhostVolume::new("null", SIZE);
        let seg = SIZE / nseg;
        for i in 0..nseg {
            v.attach(i * seg, seg, i, Arc::new(Null(seg)), 0).unwrap();
        }
        v
    };
    let migrating = on_null(1);
    let mut half = migrating
        .start_migration(0, 99, Arc::new(Null(SIZE)), 0, MigrateOptions::default())
        .unwrap();
    while half.progress().fraction() < 0.5 {
        half.step().unwrap();
    }
    let devs: Vec<(&str, Arc<dyn BlockDev>)> = vec![
        ("bare", Arc::new(Null(SIZE))),
        ("gvol_1seg", Arc::new(on_null(1))),
        ("gvol_16seg", Arc::new(on_null(16))),
        ("gvol_half_migrated", Arc::new(migrating)),
    ];
    for (name, dev) in &devs {
        let mut rng = Rng::new(42);
        let mut buf = vec![0u8; BLK];
        g.bench_function(format!("randread/{name}"), |b| {
            b.iter(|| dev.read(rng.block(), &mut buf).unwrap())
        });
        let data = vec![0xA5u8; BLK];
        g.bench_function(format!("randwrite/{name}"), |b| {
            b.iter(|| dev.write(rng.block(), &data, false).unwrap())
        });
    }
    g.finish();
    drop(half);
}

fn migrate(c: &mut Criterion) {
    let mut g = c.benchmark_group("migrate");
    const SEG: u64 = 64 * MIB;
    g.throughput(Throughput::Bytes(SEG));
    g.sample_size(10);
    let src = filled(SEG);
    for chunk in [256 * 1024, MIB, 4 * MIB] {
        g.bench_function(format!("64MiB/chunk_{}KiB", chunk / 1024), |b| {
            b.iter_batched(
                || {
                    let v = GhostVolume::new("m", SEG);
                    v.attach(0, SEG, 1, src.clone(), 0).unwrap();
                    (v, Arc::new(MemDev::new(SEG)) as Arc<dyn BlockDev>)
                },
                |(v, dst)| {
                    let opts = MigrateOptions {
                        chunk_bytes: chunk,
                        ..MigrateOptions::default()
                    };
                    let mut m = v.start_migration(0, 2, dst, 0, opts).unwrap();
                    let done = m.run().unwrap();
                    (v, done)
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, map_overhead, io, migrate);
criterion_main!(benches);
