//! Golden hit and miss counts of every policy on every real trace in
//! `../shared/traces/block/`.
//!
//! Where the numbers come from: they are this simulator's output, pinned so
//! that any change in behaviour shows. The GLRU and ARC rows (default
//! configuration) are also what libCacheSim 0.3.5 (`LRU`, `ARC`,
//! `process_trace`) counts on the same 4 KiB block stream exported with
//! `flexssd trace blocks`: `scripts/bench-cache.sh` runs both side by side at
//! these cache sizes and fails if any count differs. CAR, vFRM, GREM and
//! D-GREM have no reference implementation to compare with; their rows are
//! regression values, and their logic is checked by the unit and property
//! tests. Each trace here is one tenant, on which vFRM's fair competition and
//! the isolation baseline (the same machinery on per-tenant reservations) are
//! the same policy: their rows must agree, and they do; where they differ, on
//! several tenants, is checked in `policy/vfrm.rs`.
//!
//! Two configurations: the paper's (5-minute epochs, trace time), under which
//! only the two-hour CloudPhysics excerpt lives long enough for the coarse
//! policies to place anything, and the coarse policies again with every trace
//! stretched to one hour (`span_secs = 3600`, 12 epochs). The Tencent sample
//! has whole-second time stamps over one second, interleaved out of order, so
//! no epoch ever ends in it even when stretched: its coarse rows are all misses.
//!
//! Set `GOLDEN_PRINT=1` to print the table instead of checking it.

use std::path::PathBuf;

use cache::sim::{run_matrix, FileSource, Source};
use cache::{PolicyKind, SimConfig};
use clock::VirtualClock;
use trace::Format;

/// (file, format, cache bytes)
const TRACES: [(&str, Format, u64); 7] = [
    ("msr-hm0-sample.csv", Format::Msr, 2 << 20),
    ("tencent-cbs-sample.csv", Format::Tencent, 256 << 20),
    ("systor17-sample.csv", Format::Systor, 8 << 20),
    ("systor17-additional-sample.csv", Format::Systor, 4 << 20),
    (
        "cloudphysics-io-sample.csv",
        Format::CloudPhysics,
        256 << 20,
    ),
    ("mqsim-wsrch-small.trace", Format::DiskSim, 64 << 20),
    ("mqsim-tpcc-small.trace", Format::DiskSim, 16 << 20),
];

/// (file, policy, stretched to one hour, [read hits, read misses, write hits, write misses])
type Row = (&'static str, &'static str, bool, [u64; 4]);

const GOLDEN: &[Row] = &[
    ("msr-hm0-sample.csv", "glru", false, [88, 1449, 465, 471]),
    ("msr-hm0-sample.csv", "car", false, [88, 1449, 466, 470]),
    ("msr-hm0-sample.csv", "arc", false, [88, 1449, 466, 470]),
    ("msr-hm0-sample.csv", "vfrm", false, [0, 1537, 0, 936]),
    ("msr-hm0-sample.csv", "isolation", false, [0, 1537, 0, 936]),
    ("msr-hm0-sample.csv", "grem", false, [0, 1537, 0, 936]),
    ("msr-hm0-sample.csv", "dgrem", false, [0, 1537, 0, 936]),
    ("msr-hm0-sample.csv", "vfrm", true, [0, 1537, 153, 783]),
    ("msr-hm0-sample.csv", "isolation", true, [0, 1537, 153, 783]),
    ("msr-hm0-sample.csv", "grem", true, [0, 1537, 161, 775]),
    ("msr-hm0-sample.csv", "dgrem", true, [0, 1537, 153, 783]),
    (
        "tencent-cbs-sample.csv",
        "glru",
        false,
        [20218, 141200, 6568, 210267],
    ),
    (
        "tencent-cbs-sample.csv",
        "car",
        false,
        [21358, 140060, 6707, 210128],
    ),
    (
        "tencent-cbs-sample.csv",
        "arc",
        false,
        [21358, 140060, 6707, 210128],
    ),
    (
        "tencent-cbs-sample.csv",
        "vfrm",
        false,
        [0, 161418, 0, 216835],
    ),
    (
        "tencent-cbs-sample.csv",
        "isolation",
        false,
        [0, 161418, 0, 216835],
    ),
    (
        "tencent-cbs-sample.csv",
        "grem",
        false,
        [0, 161418, 0, 216835],
    ),
    (
        "tencent-cbs-sample.csv",
        "dgrem",
        false,
        [0, 161418, 0, 216835],
    ),
    (
        "tencent-cbs-sample.csv",
        "vfrm",
        true,
        [0, 161418, 0, 216835],
    ),
    (
        "tencent-cbs-sample.csv",
        "isolation",
        true,
        [0, 161418, 0, 216835],
    ),
    (
        "tencent-cbs-sample.csv",
        "grem",
        true,
        [0, 161418, 0, 216835],
    ),
    (
        "tencent-cbs-sample.csv",
        "dgrem",
        true,
        [0, 161418, 0, 216835],
    ),
    ("systor17-sample.csv", "glru", false, [542, 9089, 82, 753]),
    ("systor17-sample.csv", "car", false, [542, 9089, 83, 752]),
    ("systor17-sample.csv", "arc", false, [542, 9089, 84, 751]),
    ("systor17-sample.csv", "vfrm", false, [0, 9631, 0, 835]),
    ("systor17-sample.csv", "isolation", false, [0, 9631, 0, 835]),
    ("systor17-sample.csv", "grem", false, [0, 9631, 0, 835]),
    ("systor17-sample.csv", "dgrem", false, [0, 9631, 0, 835]),
    ("systor17-sample.csv", "vfrm", true, [1706, 7925, 0, 835]),
    (
        "systor17-sample.csv",
        "isolation",
        true,
        [1706, 7925, 0, 835],
    ),
    ("systor17-sample.csv", "grem", true, [1706, 7925, 0, 835]),
    ("systor17-sample.csv", "dgrem", true, [1706, 7925, 0, 835]),
    (
        "systor17-additional-sample.csv",
        "glru",
        false,
        [248, 4812, 169, 661],
    ),
    (
        "systor17-additional-sample.csv",
        "car",
        false,
        [247, 4813, 169, 661],
    ),
    (
        "systor17-additional-sample.csv",
        "arc",
        false,
        [247, 4813, 169, 661],
    ),
    (
        "systor17-additional-sample.csv",
        "vfrm",
        false,
        [0, 5060, 0, 830],
    ),
    (
        "systor17-additional-sample.csv",
        "isolation",
        false,
        [0, 5060, 0, 830],
    ),
    (
        "systor17-additional-sample.csv",
        "grem",
        false,
        [0, 5060, 0, 830],
    ),
    (
        "systor17-additional-sample.csv",
        "dgrem",
        false,
        [0, 5060, 0, 830],
    ),
    (
        "systor17-additional-sample.csv",
        "vfrm",
        true,
        [585, 4475, 21, 809],
    ),
    (
        "systor17-additional-sample.csv",
        "isolation",
        true,
        [585, 4475, 21, 809],
    ),
    (
        "systor17-additional-sample.csv",
        "grem",
        true,
        [549, 4511, 21, 809],
    ),
    (
        "systor17-additional-sample.csv",
        "dgrem",
        true,
        [585, 4475, 21, 809],
    ),
    (
        "cloudphysics-io-sample.csv",
        "glru",
        false,
        [168519, 317181, 115998, 540171],
    ),
    (
        "cloudphysics-io-sample.csv",
        "car",
        false,
        [139499, 346201, 132603, 523566],
    ),
    (
        "cloudphysics-io-sample.csv",
        "arc",
        false,
        [124925, 360775, 128544, 527625],
    ),
    (
        "cloudphysics-io-sample.csv",
        "vfrm",
        false,
        [76688, 409012, 52160, 604009],
    ),
    (
        "cloudphysics-io-sample.csv",
        "isolation",
        false,
        [76688, 409012, 52160, 604009],
    ),
    (
        "cloudphysics-io-sample.csv",
        "grem",
        false,
        [76824, 408876, 52365, 603804],
    ),
    (
        "cloudphysics-io-sample.csv",
        "dgrem",
        false,
        [76433, 409267, 51853, 604316],
    ),
    // The 2-hour CloudPhysics excerpt is longer than the 1-hour span: it is
    // cut there (its first hour), not compressed into it.
    (
        "cloudphysics-io-sample.csv",
        "vfrm",
        true,
        [46495, 192548, 30121, 299427],
    ),
    (
        "cloudphysics-io-sample.csv",
        "isolation",
        true,
        [46495, 192548, 30121, 299427],
    ),
    (
        "cloudphysics-io-sample.csv",
        "grem",
        true,
        [46613, 192430, 29912, 299636],
    ),
    (
        "cloudphysics-io-sample.csv",
        "dgrem",
        true,
        [46589, 192454, 29550, 299998],
    ),
    ("mqsim-wsrch-small.trace", "glru", false, [279, 93025, 0, 8]),
    ("mqsim-wsrch-small.trace", "car", false, [279, 93025, 0, 8]),
    ("mqsim-wsrch-small.trace", "arc", false, [279, 93025, 0, 8]),
    ("mqsim-wsrch-small.trace", "vfrm", false, [0, 93304, 0, 8]),
    (
        "mqsim-wsrch-small.trace",
        "isolation",
        false,
        [0, 93304, 0, 8],
    ),
    ("mqsim-wsrch-small.trace", "grem", false, [0, 93304, 0, 8]),
    ("mqsim-wsrch-small.trace", "dgrem", false, [0, 93304, 0, 8]),
    ("mqsim-wsrch-small.trace", "vfrm", true, [6144, 87160, 0, 8]),
    (
        "mqsim-wsrch-small.trace",
        "isolation",
        true,
        [6144, 87160, 0, 8],
    ),
    ("mqsim-wsrch-small.trace", "grem", true, [5994, 87310, 0, 8]),
    (
        "mqsim-wsrch-small.trace",
        "dgrem",
        true,
        [6130, 87174, 0, 8],
    ),
    (
        "mqsim-tpcc-small.trace",
        "glru",
        false,
        [11, 12663, 116, 7879],
    ),
    (
        "mqsim-tpcc-small.trace",
        "car",
        false,
        [21, 12653, 116, 7879],
    ),
    (
        "mqsim-tpcc-small.trace",
        "arc",
        false,
        [21, 12653, 116, 7879],
    ),
    ("mqsim-tpcc-small.trace", "vfrm", false, [0, 12674, 0, 7995]),
    (
        "mqsim-tpcc-small.trace",
        "isolation",
        false,
        [0, 12674, 0, 7995],
    ),
    ("mqsim-tpcc-small.trace", "grem", false, [0, 12674, 0, 7995]),
    (
        "mqsim-tpcc-small.trace",
        "dgrem",
        false,
        [0, 12674, 0, 7995],
    ),
    (
        "mqsim-tpcc-small.trace",
        "vfrm",
        true,
        [32, 12642, 544, 7451],
    ),
    (
        "mqsim-tpcc-small.trace",
        "isolation",
        true,
        [32, 12642, 544, 7451],
    ),
    (
        "mqsim-tpcc-small.trace",
        "grem",
        true,
        [126, 12548, 544, 7451],
    ),
    (
        "mqsim-tpcc-small.trace",
        "dgrem",
        true,
        [126, 12548, 547, 7448],
    ),
];

fn dir() -> Option<PathBuf> {
    let d = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/traces/block"
    ));
    // CI always has ../shared beside the clone: a missing input is a failure,
    // never a silent skip.
    assert!(
        d.is_dir(),
        "the trace samples are missing: {} (clone the project with ../shared beside it)",
        d.display()
    );
    Some(d)
}

/// Replays one trace of [`TRACES`] through `kinds` under `cfg`: each
/// policy's name and [read hits, read misses, write hits, write misses].
/// Checks on the way that the zones of GREM and D-GREM add up to the cache.
fn replay(
    dir: &std::path::Path,
    (file, format, bytes): (&str, Format, u64),
    kinds: &[PolicyKind],
    cfg: &SimConfig,
    clock: &VirtualClock,
) -> Vec<(&'static str, [u64; 4])> {
    let sources: Vec<Box<dyn Source>> = vec![Box::new(FileSource {
        name: file.to_string(),
        format,
        path: dir.join(file),
    })];
    let jobs: Vec<(PolicyKind, u64)> = kinds.iter().map(|&k| (k, bytes)).collect();
    run_matrix(&sources, &jobs, cfg, 2, clock)
        .unwrap()
        .into_iter()
        .map(|r| {
            assert!(r
                .zones
                .is_none_or(|z| z.long_term_lines + z.short_term_lines == r.capacity_lines));
            let t = &r.total;
            (
                r.policy.name(),
                [t.read_hits, t.read_misses, t.write_hits, t.write_misses],
            )
        })
        .collect()
}

#[test]
fn every_policy_on_every_real_trace() {
    let Some(dir) = dir() else { return };
    let print = std::env::var_os("GOLDEN_PRINT").is_some();
    let clock = VirtualClock::new(0);
    let mut got: Vec<Row> = Vec::new();
    for (file, format, bytes) in TRACES {
        for stretched in [false, true] {
            let cfg = SimConfig {
                span_secs: stretched.then_some(3600.0),
                ..SimConfig::default()
            };
            let kinds: Vec<PolicyKind> = PolicyKind::ALL
                .iter()
                .copied()
                .filter(|k| {
                    !stretched
                        || matches!(
                            k,
                            PolicyKind::Vfrm
                                | PolicyKind::Isolation
                                | PolicyKind::Grem
                                | PolicyKind::Dgrem
                        )
                })
                .collect();
            for (policy, counts) in replay(&dir, (file, format, bytes), &kinds, &cfg, &clock) {
                got.push((file, policy, stretched, counts));
            }
        }
    }
    if print {
        for (f, p, s, c) in &got {
            println!("    ({f:?}, {p:?}, {s}, {c:?}),");
        }
        return;
    }
    assert_eq!(got.len(), GOLDEN.len(), "rows");
    for (g, want) in got.iter().zip(GOLDEN) {
        assert_eq!(g, want, "{} {} stretched={}", g.0, g.1, g.2);
    }
}

/// GREM and D-GREM with our two changes (the adaptive bin fill and free
/// flash filled on a read miss), every trace stretched to one hour: (file,
/// policy, [read hits, read misses, write hits, write misses]). Regression
/// values, like the coarse rows above.
const GOLDEN_PLUS: &[(&str, &str, [u64; 4])] = &[
    ("msr-hm0-sample.csv", "grem", [0, 1537, 200, 736]),
    ("msr-hm0-sample.csv", "dgrem", [0, 1537, 219, 717]),
    (
        "tencent-cbs-sample.csv",
        "grem",
        [29988, 131430, 266, 216569],
    ),
    (
        "tencent-cbs-sample.csv",
        "dgrem",
        [29988, 131430, 266, 216569],
    ),
    ("systor17-sample.csv", "grem", [2025, 7606, 0, 835]),
    ("systor17-sample.csv", "dgrem", [2025, 7606, 0, 835]),
    (
        "systor17-additional-sample.csv",
        "grem",
        [674, 4386, 32, 798],
    ),
    (
        "systor17-additional-sample.csv",
        "dgrem",
        [688, 4372, 47, 783],
    ),
    (
        "cloudphysics-io-sample.csv",
        "grem",
        [47320, 191723, 29711, 299837],
    ),
    (
        "cloudphysics-io-sample.csv",
        "dgrem",
        [47294, 191749, 29525, 300023],
    ),
    ("mqsim-wsrch-small.trace", "grem", [8912, 84392, 0, 8]),
    ("mqsim-wsrch-small.trace", "dgrem", [9048, 84256, 0, 8]),
    ("mqsim-tpcc-small.trace", "grem", [357, 12317, 288, 7707]),
    ("mqsim-tpcc-small.trace", "dgrem", [357, 12317, 291, 7704]),
];

#[test]
fn grem_plus_on_every_real_trace() {
    let Some(dir) = dir() else { return };
    let print = std::env::var_os("GOLDEN_PRINT").is_some();
    let clock = VirtualClock::new(0);
    let mut cfg = SimConfig {
        span_secs: Some(3600.0),
        ..SimConfig::default()
    };
    cfg.policy.bin_fill = cache::BinFill::Adaptive;
    cfg.policy.fill_free_flash = true;
    let mut got = Vec::new();
    for trace in TRACES {
        for (policy, counts) in replay(
            &dir,
            trace,
            &[PolicyKind::Grem, PolicyKind::Dgrem],
            &cfg,
            &clock,
        ) {
            got.push((trace.0, policy, counts));
        }
    }
    if print {
        for (f, p, c) in &got {
            println!("    ({f:?}, {p:?}, {c:?}),");
        }
        return;
    }
    assert_eq!(got.len(), GOLDEN_PLUS.len(), "rows");
    for (g, want) in got.iter().zip(GOLDEN_PLUS) {
        assert_eq!(g, want, "{} {}", g.0, g.1);
    }
}
