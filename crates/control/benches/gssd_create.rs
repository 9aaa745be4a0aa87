//! The daemon's whole gSSD creation (BlockFlex Table 3 reports 61 µs for
//! "gSSD creation"; `crates/harvest`'s pool bench times only the pool insert):
//! one harvester period that lends an idle regular vSSD's free blocks, which
//! is the home's FTL emptying and lending them, the gSSD's hidden vSSD built on
//! them (its FTL), its record written to the control store, the pool insert
//! and the event.
//!
//! `cargo bench -p control --bench gssd_create -- --warm-up-time 1 --measurement-time 5`
//!
//! * `memory`: memory-backed flash and an in-memory control store (the cost of
//!   the code alone);
//! * `file`: the daemon's defaults, file-backed flash and the redb store on
//!   disk, whose commit syncs (the cost a host pays).
//!
//! Each iteration opens a fresh host (not timed) with a 4-channel regular
//! vSSD and a harvest tenant, then times the one period that creates the
//! gSSD, and checks that it created exactly one.

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use clock::VirtualClock;
use control::{Config, ControlStore, HostManager, TenantRole, VssdSpec};
use criterion::{criterion_group, criterion_main, Criterion};
use ftl::MemCheckpoints;

fn config(dir: &std::path::Path, backend: &str) -> Config {
    Config::from_toml(&format!(
        r#"
        data_dir = "{}"
        [[devices]]
        name = "ssd0"
        backend = "{backend}"
        [devices.geometry]
        channels = 8
        dies_per_channel = 2
        blocks_per_plane = 64
        pages_per_block = 64
        [harvest]
        enabled = true
        policy = "fixed"
        unsold = false
        granule_s = 60
        lend_for_s = 600
        "#,
        dir.display()
    ))
    .expect("bench config")
}

/// A host with a regular vSSD on channels 0-3 and a harvest tenant on 4-5.
fn host(backend: &str, dir: &std::path::Path) -> HostManager {
    let cfg = config(dir, backend);
    let clock = Arc::new(VirtualClock::new(0));
    let m = if backend == "memory" {
        HostManager::open_with(
            &cfg,
            clock,
            ControlStore::memory().expect("store"),
            Arc::new(MemCheckpoints::default()),
        )
    } else {
        HostManager::open(&cfg, clock)
    }
    .expect("host");
    for (name, ch, role) in [
        ("reg", vec![0, 1, 2, 3], TenantRole::Regular),
        ("hv", vec![4, 5], TenantRole::Harvest),
    ] {
        m.create_vssd(&VssdSpec {
            name: name.into(),
            channel_ids: Some(ch),
            role,
            ..Default::default()
        })
        .expect("vSSD");
    }
    m
}

fn create(c: &mut Criterion) {
    let mut g = c.benchmark_group("gssd_create");
    g.sample_size(20);
    for backend in ["memory", "file"] {
        g.bench_function(backend, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let m = host(backend, dir.path());
                    let t = Instant::now();
                    m.harvest_tick().expect("period");
                    total += t.elapsed();
                    assert_eq!(m.gssds().len(), 1, "one gSSD per period");
                }
                total
            });
        });
    }
    g.finish();
}

criterion_group!(benches, create);
criterion_main!(benches);
