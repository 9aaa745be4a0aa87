//! Golden tests on the real samples in /work/shared/traces/block/.

use std::path::PathBuf;

use trace::{open, open_spec, stats, Format, Op, Request, TraceStats};

fn sample(name: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/traces/block"
    ));
    // CI always has ../shared beside the clone: a missing input is a failure,
    // never a silent skip.
    assert!(
        dir.is_dir(),
        "the trace samples are missing: {} (clone the project with ../shared beside it)",
        dir.display()
    );
    Some(dir.join(name))
}

fn read_all(format: Format, name: &str) -> Option<Vec<Request>> {
    let path = sample(name)?;
    let reqs: Result<Vec<_>, _> = open(format, &path).expect("open").collect();
    Some(reqs.unwrap_or_else(|e| panic!("{e}")))
}

#[allow(clippy::too_many_arguments)]
fn check(
    reqs: &[Request],
    requests: u64,
    reads: u64,
    writes: u64,
    bytes_read: u64,
    bytes_written: u64,
    volumes: usize,
    first: Request,
    last: Request,
) -> TraceStats {
    let s = stats(reqs.iter().copied().map(Ok)).unwrap();
    assert_eq!(s.requests, requests, "requests");
    assert_eq!(s.reads, reads, "reads");
    assert_eq!(s.writes, writes, "writes");
    assert_eq!(s.bytes_read, bytes_read, "bytes read");
    assert_eq!(s.bytes_written, bytes_written, "bytes written");
    assert_eq!(s.volumes, volumes, "volumes");
    assert_eq!(reqs.first(), Some(&first), "first request");
    assert_eq!(reqs.last(), Some(&last), "last request");
    assert_eq!(s.first_time_ns, Some(first.time_ns));
    assert_eq!(s.last_time_ns, Some(last.time_ns));
    s
}

fn req(time_ns: u64, volume: u32, op: Op, offset: u64, len: u64) -> Request {
    Request {
        time_ns,
        volume,
        op,
        offset,
        len,
    }
}

#[test]
fn msr_hm0() {
    let Some(r) = read_all(Format::Msr, "msr-hm0-sample.csv") else {
        return;
    };
    // 128166385295514663 is the first filetime; the last is 1,272,334,941 units later.
    let s = check(
        &r,
        1000,
        508,
        492,
        6_108_672,
        3_580_928,
        1,
        req(0, 0, Op::Write, 9_056_014_336, 2048),
        req(127_233_494_100, 0, Op::Read, 11_946_549_248, 4096),
    );
    assert_eq!(s.max_time_ns, Some(127_233_494_100)); // 127 s
}

#[test]
fn tencent_cbs() {
    let Some(r) = read_all(Format::Tencent, "tencent-cbs-sample.csv") else {
        return;
    };
    let s = check(
        &r,
        50_000,
        24_521,
        25_479,
        646_755_328,
        871_636_992,
        2038,
        req(
            1_538_323_200_000_000_000,
            1058,
            Op::Write,
            4_247_200 * 512,
            128 * 512,
        ),
        req(
            1_538_323_200_000_000_000,
            10799,
            Op::Write,
            8_526_920 * 512,
            128 * 512,
        ),
    );
    // Second line is one second earlier: the trace spans 1 s.
    assert_eq!(
        r[1],
        req(
            1_538_323_199_000_000_000,
            1063,
            Op::Read,
            13_896_880 * 512,
            128 * 512
        )
    );
    assert_eq!(
        s.max_time_ns.unwrap() - s.min_time_ns.unwrap(),
        1_000_000_000
    );
}

// The README says 1,000 requests each; the files hold 1,000 lines including
// the header, i.e. 999 requests.
#[test]
fn systor17() {
    let Some(r) = read_all(Format::Systor, "systor17-sample.csv") else {
        return;
    };
    check(
        &r,
        999,
        826,
        173,
        36_355_584,
        2_766_848,
        1,
        req(
            1_456_095_145_133_076_000,
            0,
            Op::Read,
            899_056_122_368,
            131_072,
        ),
        req(
            1_456_095_147_574_052_000,
            0,
            Op::Read,
            4_238_867_714_048,
            4096,
        ),
    );
}

#[test]
fn systor17_additional() {
    let Some(r) = read_all(Format::Systor, "systor17-additional-sample.csv") else {
        return;
    };
    check(
        &r,
        999,
        700,
        299,
        18_406_400,
        2_286_080,
        1,
        req(
            1_455_591_804_310_701_000,
            0,
            Op::Read,
            203_468_398_592,
            32_768,
        ),
        req(
            1_455_591_805_634_876_000,
            0,
            Op::Read,
            280_552_051_200,
            4096,
        ),
    );
}

#[test]
fn cloudphysics() {
    let Some(r) = read_all(Format::CloudPhysics, "cloudphysics-io-sample.csv") else {
        return;
    };
    let s = check(
        &r,
        113_872,
        46_974,
        66_898,
        1_797_412_352,
        2_408_565_760,
        1,
        req(5_633_898_000_000_000, 0, Op::Write, 42_932_745 * 512, 512),
        req(5_641_098_000_000_000, 0, Op::Write, 42_936_150 * 512, 512),
    );
    // Time is in seconds: the excerpt spans exactly 2 h.
    assert_eq!(
        s.max_time_ns.unwrap() - s.min_time_ns.unwrap(),
        7200 * 1_000_000_000
    );
}

// The README says 24,782; the last line has no newline, so `wc -l` undercounts.
#[test]
fn mqsim_wsrch() {
    let Some(r) = read_all(Format::DiskSim, "mqsim-wsrch-small.trace") else {
        return;
    };
    check(
        &r,
        24_783,
        24_779,
        4,
        382_085_120,
        32_768,
        6,
        req(11_413_000, 0, Op::Read, 657_728 * 512, 16 * 512),
        req(60_066_625_000, 1, Op::Read, 34_371_424 * 512, 64 * 512),
    );
}

#[test]
fn mqsim_tpcc() {
    let Some(r) = read_all(Format::DiskSim, "mqsim-tpcc-small.trace") else {
        return;
    };
    check(
        &r,
        6999,
        4381,
        2618,
        36_315_136,
        23_403_520,
        16,
        req(938_513_000, 4, Op::Write, 264_719_034 * 512, 16 * 512),
        req(1_075_002_000, 7, Op::Write, 160_057_354 * 512, 16 * 512),
    );
}

#[test]
fn open_by_spec() {
    let Some(path) = sample("mqsim-tpcc-small.trace") else {
        return;
    };
    let spec = format!("disksim:{}", path.display());
    let s = stats(open_spec(&spec).unwrap()).unwrap();
    assert_eq!(s.requests, 6999);
}

#[test]
fn open_missing_file_names_path() {
    let err = match open(Format::Msr, "/nonexistent/trace.csv") {
        Ok(_) => panic!("opened a missing file"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("/nonexistent/trace.csv"), "{err}");
}
