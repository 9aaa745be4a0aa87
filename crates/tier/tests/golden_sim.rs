//! Golden test: the live tier and the simulator, replaying the same real
//! trace, count the same hits and charge the same IO cost.
//!
//! The trace is the MSR Cambridge `hm_0` excerpt in `../shared/traces/block/`
//! (1,000 requests over 127 s), replayed in full: through
//! `cache::sim::run_one`, and through a [`CacheTier`] over memory devices
//! (one volume per MSR disk, each request at its trace time on a virtual
//! clock). Epochs are 5 s so that D-GREM sees 25 of them. Each policy is
//! checked under both write policies; the device operations (counts and
//! bytes of SSD and HDD reads and writes) must be equal, not just close, and
//! every read through the tier must return what was last written there.
//! A missing trace is a failure, not a skip.

use std::path::PathBuf;
use std::sync::Arc;

use blockdev::{BlockDev, MemDev};
use cache::cost::OpCounts;
use cache::sim::{run_one, FileSource, Source};
use cache::{BinFill, CostModel, PolicyConfig, PolicyKind, SimConfig, WritePolicy};
use clock::VirtualClock;
use tier::{CacheTier, TierSetup, VolumeSpec};
use trace::{Format, Op};

const FILE: &str = "msr-hm0-sample.csv";

fn trace_path() -> PathBuf {
    let d = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/traces/block"
    ));
    assert!(
        d.is_dir(),
        "the trace samples are missing: {} (clone the project with ../shared beside it)",
        d.display()
    );
    d.join(FILE)
}

/// 5-second epochs (the excerpt is two minutes long), the given bin fill.
fn policy_config(fill: BinFill) -> PolicyConfig {
    PolicyConfig {
        epoch_secs: 5.0,
        bin_fill: fill,
        ..PolicyConfig::default()
    }
}

/// Hits, misses and device operations of one replay.
#[derive(Debug, PartialEq)]
struct Tally {
    read_hits: u64,
    read_misses: u64,
    write_hits: u64,
    write_misses: u64,
    ops: OpCounts,
    baseline_ops: OpCounts,
}

fn simulate(kind: PolicyKind, cache_bytes: u64, wp: WritePolicy, cfg: &PolicyConfig) -> Tally {
    let sources: Vec<Box<dyn Source>> = vec![Box::new(FileSource {
        name: FILE.into(),
        format: Format::Msr,
        path: trace_path(),
    })];
    let cfg = SimConfig {
        policy: cfg.clone(),
        write_policy: wp,
        ..SimConfig::default()
    };
    let t = run_one(&sources, kind, cache_bytes, &cfg).unwrap().total;
    Tally {
        read_hits: t.read_hits,
        read_misses: t.read_misses,
        write_hits: t.write_hits,
        write_misses: t.write_misses,
        ops: t.ops,
        baseline_ops: t.baseline_ops,
    }
}

fn replay_live(kind: PolicyKind, cache_bytes: u64, wp: WritePolicy, cfg: &PolicyConfig) -> Tally {
    let reqs: Vec<trace::Request> = trace::open(Format::Msr, trace_path())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // One volume per disk, in order of first appearance (as the simulator
    // numbers address spaces), each large enough for its requests.
    let mut disks: Vec<(u32, u64)> = Vec::new();
    for r in &reqs {
        let end = r.offset + r.len;
        match disks.iter_mut().find(|d| d.0 == r.volume) {
            Some(d) => d.1 = d.1.max(end),
            None => disks.push((r.volume, end)),
        }
    }
    let sizes: Vec<u64> = disks.iter().map(|d| ((d.1 >> 20) + 2) << 20).collect();
    let total: u64 = sizes.iter().sum();
    let clock = Arc::new(VirtualClock::new(0));
    let tier = CacheTier::new(
        TierSetup {
            name: "golden".into(),
            policy: kind,
            policy_config: cfg.clone(),
            cache_bytes,
            volumes: sizes
                .iter()
                .enumerate()
                .map(|(i, &size)| VolumeSpec {
                    name: format!("disk{i}"),
                    size,
                })
                .collect(),
            write_policy: wp,
        },
        Arc::new(MemDev::new(total)),
        Arc::new(MemDev::new(cache_bytes)),
        clock.clone(),
    )
    .unwrap();
    // What each volume must read back.
    let shadow: Vec<MemDev> = sizes.iter().map(|&s| MemDev::new(s)).collect();
    let first = reqs[0].time_ns;
    for (i, r) in reqs.iter().enumerate() {
        if r.len == 0 {
            continue;
        }
        clock.set(r.time_ns.saturating_sub(first));
        let d = disks.iter().position(|d| d.0 == r.volume).unwrap();
        let v = &tier.volumes()[d];
        match r.op {
            Op::Write => {
                let data: Vec<u8> = (0..r.len)
                    .map(|j| (i as u64 * 31 + j / 512) as u8)
                    .collect();
                v.write(r.offset, &data, false).unwrap();
                shadow[d].write(r.offset, &data, false).unwrap();
            }
            Op::Read => {
                let mut got = vec![0u8; r.len as usize];
                let mut want = vec![0u8; r.len as usize];
                v.read(r.offset, &mut got).unwrap();
                shadow[d].read(r.offset, &mut want).unwrap();
                assert!(got == want, "request {i}: a read returned stale data");
            }
        }
    }
    let s = tier.stats();
    let mut t = Tally {
        read_hits: 0,
        read_misses: 0,
        write_hits: 0,
        write_misses: 0,
        ops: OpCounts::default(),
        baseline_ops: OpCounts::default(),
    };
    for v in &s.volumes {
        t.read_hits += v.read_hits;
        t.read_misses += v.read_misses;
        t.write_hits += v.write_hits;
        t.write_misses += v.write_misses;
        t.ops.merge(&v.ops);
        t.baseline_ops.merge(&v.baseline_ops);
    }
    t
}

fn check(kind: PolicyKind, cache_bytes: u64, cfg: &PolicyConfig) -> u64 {
    let model = CostModel::default();
    let mut hits = Vec::new();
    for wp in WritePolicy::ALL {
        let sim = simulate(kind, cache_bytes, wp, cfg);
        let live = replay_live(kind, cache_bytes, wp, cfg);
        assert_eq!(
            live, sim,
            "{kind} ({cfg:?}) under {wp}: live tier (left) and simulator (right)"
        );
        let (a, b) = (model.cost_us(&live.ops), model.cost_us(&sim.ops));
        assert!(
            (a - b).abs() <= 1e-9 * b,
            "{kind} {wp}: cost {a} against {b}"
        );
        eprintln!(
            "{kind} ({}, fill free flash {}) {wp}: hits {}/{} reads, {}/{} writes, normalised cost {:.4}",
            cfg.bin_fill,
            cfg.fill_free_flash,
            sim.read_hits,
            sim.read_hits + sim.read_misses,
            sim.write_hits,
            sim.write_hits + sim.write_misses,
            b / model.cost_us(&sim.baseline_ops)
        );
        hits.push(sim.read_hits + sim.write_hits);
    }
    // The replay is not vacuous: the policy hits, and the write policy does
    // not change what it hits.
    assert!(hits[0] > 0, "{kind}: no hit at all");
    assert_eq!(hits[0], hits[1]);
    hits[0]
}

#[test]
fn glru_live_tier_matches_the_simulator_on_msr_hm0() {
    check(PolicyKind::Glru, 2 << 20, &policy_config(BinFill::WholeBin));
}

#[test]
fn dgrem_live_tier_matches_the_simulator_on_msr_hm0() {
    check(
        PolicyKind::Dgrem,
        8 << 20,
        &policy_config(BinFill::WholeBin),
    );
}

/// Partial bins: the tier copies, serves and drops single lines of a bin.
#[test]
fn dgrem_with_adaptive_fill_live_tier_matches_the_simulator_on_msr_hm0() {
    check(
        PolicyKind::Dgrem,
        2 << 20,
        &policy_config(BinFill::Adaptive),
    );
}

/// Lines copied in between epochs, after the read that missed them: with
/// one-minute epochs and free flash, they are what the cache hits.
#[test]
fn dgrem_filling_free_flash_live_tier_matches_the_simulator_on_msr_hm0() {
    let lazy = PolicyConfig {
        epoch_secs: 60.0,
        ..policy_config(BinFill::Adaptive)
    };
    let eager = PolicyConfig {
        fill_free_flash: true,
        ..lazy.clone()
    };
    let (l, e) = (
        check(PolicyKind::Dgrem, 16 << 20, &lazy),
        check(PolicyKind::Dgrem, 16 << 20, &eager),
    );
    assert!(e > l, "filling free flash hits more: {e} against {l}");
}
