//! Properties: requests written as DiskSim text, MSR CSV and FIU text read
//! back equal, within each format's granularity; and no line, however
//! malformed, makes any reader panic.

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

    #[test]
    fn fiu_roundtrip(reqs in requests(), boot in 0u64..(1 << 50), names in prop::collection::vec("[a-z]{1,8}( [a-z]{1,5})?", 64)) {
        // FIU: ns since boot made relative, sectors, devices by first appearance.
        let t0 = reqs.first().map_or(0, |r| r.time_ns);
        let mut devs: Vec<u32> = Vec::new();
        let expected: Vec<Request> = reqs
            .iter()
            .map(|r| {
                let dev = r.volume % 4;
                let id = devs.iter().position(|d| *d == dev).unwrap_or_else(|| { devs.push(dev); devs.len() - 1 });
                Request {
                    time_ns: r.time_ns - t0,
                    volume: id as u32,
                    offset: r.offset / 512 * 512,
                    len: r.len / 512 * 512,
                    ..*r
                }
            })
            .collect();
        let mut text = String::new();
        for (i, r) in reqs.iter().enumerate() {
            let op = if r.op == Op::Read { "R" } else { "W" };
            let md5 = if i % 2 == 0 { " 0123456789abcdef0123456789ABCDEF" } else { "" };
            writeln!(text, "{} {} {} {} {} {op} 8 {}{md5}", boot + r.time_ns, 100 + i, names[i], r.offset / 512, r.len / 512, r.volume % 4).unwrap();
        }
        prop_assert_eq!(read(Format::Fiu, text), expected);
    }

    #[test]
    fn no_line_makes_a_reader_panic(lines in prop::collection::vec("[ -~]{0,80}", 0..8), pick in any::<prop::sample::Index>()) {
        let text = lines.join("\n");
        let f = Format::ALL[pick.index(Format::ALL.len())];
        // Errors are fine (they name the line); panics are not.
        let _ = reader(f, Cursor::new(text.into_bytes()), "<fuzz>").count();
    }
}
