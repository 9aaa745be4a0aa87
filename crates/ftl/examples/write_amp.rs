//! Write amplification of the FTL under a few classic workloads, on the memory
//! backend and a virtual clock (deterministic: the same build prints the same
//! numbers). Used to compare FTL builds side by side (BENCHMARKS.md):
//!
//! ```text
//! cargo run --release -p ftl --example write_amp
//! ```
//!
//! Each workload first fills the vSSD sequentially (default capacity: 12.5%
//! over-provisioning), then overwrites it `ROUNDS` times its size; the write
//! amplification counted is that of the overwrites only (flash pages programmed
//! per host page written). Workloads:
//!
//! - `uniform 4k`: random 4 KiB pages, uniform over the device;
//! - `hot/cold 4k`: 80% of writes to 20% of the pages (the hot set), the rest
//!   uniform over the other 80%;
//! - `uniform 128k`: random 128 KiB requests (32 pages), aligned.

use std::sync::Arc;

use blockdev::BlockDev;
use clock::VirtualClock;
use flash::{Backend, FlashDevice, Geometry, Timing};
use ftl::{default_capacity, Extent, GcPolicyKind, MemCheckpoints, Vssd, VssdConfig};
use rng::SplitMix64;

const PAGE: u64 = 4096;
const ROUNDS: u64 = 3;

fn vssd(gc: GcPolicyKind) -> (Arc<VirtualClock>, Arc<Vssd>) {
    let g = Geometry {
        channels: 4,
        dies_per_channel: 2,
        planes_per_die: 1,
        blocks_per_plane: 64,
        pages_per_block: 64,
        page_size: PAGE as u32,
    };
    let dev = Arc::new(FlashDevice::open(&Backend::Memory, g, Timing::default()).unwrap());
    let extents: Vec<Extent> = (0..g.channels)
        .map(|c| Extent::whole_channel(&g, c))
        .collect();
    let cfg = VssdConfig {
        id: 1,
        name: "wa".into(),
        capacity_bytes: default_capacity(&g, &extents),
        extents,
        gc,
        lent: Vec::new(),
    };
    let clock = Arc::new(VirtualClock::new(0));
    let v = Vssd::create(dev, cfg, clock.clone(), Arc::new(MemCheckpoints::default())).unwrap();
    (clock, v)
}

/// Overwrite-phase write amplification of `workload` under `gc`.
fn run(workload: &str, gc: GcPolicyKind) -> f64 {
    let (clock, v) = vssd(gc);
    let pages = v.size() / PAGE;
    let chunk = vec![0x5Au8; (32 * PAGE) as usize];
    let mut p = 0;
    while p < pages {
        let n = 32.min(pages - p);
        v.write(p * PAGE, &chunk[..(n * PAGE) as usize], false)
            .unwrap();
        p += n;
    }
    let before = v.stats();
    let mut r = SplitMix64::new(42);
    let hot = pages / 5;
    let mut written = 0;
    while written < ROUNDS * pages {
        let (lba, n) = match workload {
            "uniform 4k" => (r.below(pages as usize) as u64, 1),
            "hot/cold 4k" => {
                if r.below(10) < 8 {
                    (r.below(hot as usize) as u64, 1)
                } else {
                    (hot + r.below((pages - hot) as usize) as u64, 1)
                }
            }
            "uniform 128k" => (r.below((pages / 32) as usize) as u64 * 32, 32),
            w => panic!("unknown workload {w}"),
        };
        let n = n.min(pages - lba);
        v.write(lba * PAGE, &chunk[..(n * PAGE) as usize], false)
            .unwrap();
        written += n;
        clock.advance(10_000);
    }
    let after = v.stats();
    (after.flash_pages_written - before.flash_pages_written) as f64
        / (after.host_pages_written - before.host_pages_written) as f64
}

fn main() {
    println!("workload,gc,write_amplification");
    for w in ["uniform 4k", "hot/cold 4k", "uniform 128k"] {
        for (name, gc) in [
            ("greedy", GcPolicyKind::Greedy),
            ("cost-benefit", GcPolicyKind::CostBenefit),
        ] {
            println!("{w},{name},{:.3}", run(w, gc));
        }
    }
}
