//! Property: requests written as DiskSim text and as MSR CSV read back equal,
//! within each format's granularity.

use std::fmt::Write as _;
use std::io::Cursor;

use proptest::prelude::*;
use trace::{reader, Format, Op, Request};

fn requests() -> impl Strategy<Value = Vec<Request>> {
    prop::collection::vec(
        (
            0u64..1_000_000_000_000,
            any::<u32>(),
            any::<bool>(),
            0u64..(1 << 50),
            0u64..(1 << 20),
        ),
        0..64,
    )
    .prop_map(|v| {
        let mut t = 0u64;
        v.into_iter()
            .map(|(dt, volume, write, offset, len)| {
                t += dt;
                Request {
                    time_ns: t,
                    volume,
                    op: if write { Op::Write } else { Op::Read },
                    offset,
                    len,
                }
            })
            .collect()
    })
}

fn read(format: Format, text: String) -> Vec<Request> {
    reader(format, Cursor::new(text), "<stream>")
        .collect::<Result<_, _>>()
        .unwrap()
}

proptest! {
    #[test]
    fn disksim_roundtrip(reqs in requests()) {
        // DiskSim addresses whole sectors: round offset and length down.
        let expected: Vec<Request> = reqs
            .iter()
            .map(|r| Request { offset: r.offset / 512 * 512, len: r.len / 512 * 512, ..*r })
            .collect();
        let mut text = String::new();
        for r in &reqs {
            let ty = if r.op == Op::Read { 1 } else { 0 };
            writeln!(text, "{} {} {} {} {}", r.time_ns, r.volume, r.offset / 512, r.len / 512, ty).unwrap();
        }
        prop_assert_eq!(read(Format::DiskSim, text), expected);
    }

    #[test]
    fn msr_roundtrip(reqs in requests(), base in 0u64..(1 << 60)) {
        // MSR time is 100 ns filetime, made relative to the first request.
        let t0 = reqs.first().map_or(0, |r| r.time_ns / 100);
        let expected: Vec<Request> = reqs
            .iter()
            .map(|r| Request { time_ns: (r.time_ns / 100 - t0) * 100, ..*r })
            .collect();
        let mut text = String::new();
        for r in &reqs {
            let op = if r.op == Op::Read { "Read" } else { "Write" };
            writeln!(text, "{},host,{},{},{},{},42", base + r.time_ns / 100, r.volume, op, r.offset, r.len).unwrap();
        }
        prop_assert_eq!(read(Format::Msr, text), expected);
    }
}
