//! Hand-written inputs: fio iolog, blkparse, skip rules, specs and errors.

use std::io::Cursor;

use trace::{
    parse_spec, reader, stats, Format, LineError, Op, Request, TraceError, MAX_REQUEST_BYTES,
};

fn read(format: Format, text: &str) -> Vec<Result<Request, TraceError>> {
    reader(format, Cursor::new(text.to_string()), "<stream>").collect()
}

fn ok(format: Format, text: &str) -> Vec<Request> {
    read(format, text)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}"))
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

/// The first error in `text`; checks the message names the source and line.
fn err(format: Format, text: &str, line: u64) -> LineError {
    let e = read(format, text)
        .into_iter()
        .find_map(Result::err)
        .unwrap_or_else(|| panic!("no error for {format} input {text:?}"));
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("<stream>:{line}: ")), "{msg}");
    assert_eq!(e.line(), Some(line), "{msg}");
    e.kind().cloned().unwrap()
}

#[test]
fn fio_v2() {
    let text = "fio version 2 iolog\n\
                /dev/sdb add\n\
                /tmp/f add\n\
                /dev/sdb open\n\
                /tmp/f open\n\
                /tmp/f write 4096 8192\n\
                /dev/sdb read 0 4096\n\
                \n\
                # comment\n\
                /dev/sdb sync\n\
                /tmp/f trim 0 4096\n\
                /dev/sdb close\n\
                /tmp/f close\n";
    assert_eq!(
        ok(Format::FioIolog, text),
        vec![
            req(0, 1, Op::Write, 4096, 8192),
            req(0, 0, Op::Read, 0, 4096)
        ]
    );
}

#[test]
fn fio_v3() {
    let text = "fio version 3 iolog\n\
                0 /tmp/a add\n\
                0 /tmp/a open\n\
                5 /tmp/a read 512 4096\n\
                7 /tmp/b write 1048576 131072\n\
                9 /tmp/a write 0 512\n\
                12 /tmp/a close\n";
    assert_eq!(
        ok(Format::FioIolog, text),
        vec![
            req(5_000_000, 0, Op::Read, 512, 4096),
            req(7_000_000, 1, Op::Write, 1_048_576, 131_072),
            req(9_000_000, 0, Op::Write, 0, 512),
        ]
    );
}

#[test]
fn fio_errors() {
    let f = Format::FioIolog;
    assert!(matches!(
        err(f, "/tmp/a add\n", 1),
        LineError::BadHeader { .. }
    ));
    assert!(matches!(
        err(f, "fio version 4 iolog\n", 1),
        LineError::BadHeader { .. }
    ));
    assert!(matches!(
        err(f, "fio version 2 iolog\n/tmp/a add\n/tmp/a read 0\n", 3),
        LineError::ColumnCount { found: 3, .. }
    ));
    assert!(matches!(
        err(f, "fio version 3 iolog\n1 /tmp/a read 0\n", 2),
        LineError::ColumnCount { found: 4, .. }
    ));
    assert_eq!(
        err(f, "fio version 2 iolog\n/tmp/a frob 0 1\n", 2),
        LineError::UnknownOp {
            value: "frob".into()
        }
    );
    assert!(matches!(
        err(f, "fio version 2 iolog\n/tmp/a read x1 4096\n", 2),
        LineError::BadNumber { .. }
    ));
    assert!(matches!(
        err(f, "fio version 3 iolog\n-3 /tmp/a read 0 4096\n", 2),
        LineError::Negative { .. }
    ));
    assert!(matches!(
        err(
            f,
            "fio version 3 iolog\n18446744073709551615 /tmp/a read 0 1\n",
            2
        ),
        LineError::Overflow { .. }
    ));
}

const BLKPARSE: &str = "\
  8,0    3        1     0.000000000   697  A   W 223490 + 8 <- (8,1) 223427
  8,0    3        2     0.000001000   697  Q   W 223490 + 8 [kjournald]
  8,0    3        3     0.000010000   697  G   W 223490 + 8 [kjournald]
  8,0    3        4     0.000012000   697  P   N [kjournald]
  8,16   0        1     0.500000001  1024  Q  RS 1000 + 16 [dd]
  8,0    0        2     0.600000000     0  m   N cfq697 slice expired
  8,0    1        5     1.250000000   697  Q FWS 0 + 0 [jbd2/sda1-8]
  8,0    1        6     1.300000000   697  Q   N 0 + 0 [kworker]
  8,0    1        7     1.400000000   697  Q  DS 4096 + 256 [fstrim]
  8,0    3        8     2.000000000   697  C   W 223490 + 8 [0]
CPU0 (8,0):
 Reads Queued:           0,        0KiB	 Writes Queued:           1,        4KiB
 Read Dispatches:        0,        0KiB	 Write Dispatches:        0,        0KiB
Total (8,0):
 Reads Queued:           0,        0KiB	 Writes Queued:           1,        4KiB
Throughput (R/W): 0KiB/s / 2KiB/s
Events (8,0): 10 entries
";

#[test]
fn blkparse_queue_events_only() {
    let r = ok(Format::Blkparse, BLKPARSE);
    assert_eq!(
        r,
        vec![
            req(1_000, 0, Op::Write, 223_490 * 512, 8 * 512),
            req(500_000_001, 1, Op::Read, 1000 * 512, 16 * 512),
            req(1_250_000_000, 0, Op::Write, 0, 0),
        ]
    );
    let s = stats(r.into_iter().map(Ok)).unwrap();
    assert_eq!((s.reads, s.writes, s.volumes), (1, 2, 2));
}

#[test]
fn blkparse_errors() {
    let f = Format::Blkparse;
    assert!(matches!(
        err(f, "8,0 3 1 0.0 697 Q\n", 1),
        LineError::ColumnCount { found: 6, .. }
    ));
    assert!(matches!(
        err(f, "8,0 3 1 0.0 697 Q W 12 +\n", 1),
        LineError::ColumnCount { found: 9, .. }
    ));
    assert!(matches!(
        err(
            f,
            "8,0 3 1 0.0 697 Q W 12 + 8 [a]\n8,0 3 1 0.1 697 Q W 1x2 + 8 [a]\n",
            2
        ),
        LineError::BadNumber {
            field: "sector",
            ..
        }
    ));
    assert!(matches!(
        err(f, "8,0 3 1 x.5 697 Q W 12 + 8 [a]\n", 1),
        LineError::BadNumber {
            field: "timestamp",
            ..
        }
    ));
    assert!(matches!(
        err(f, "8,0 3 1 -0.5 697 Q W 12 + 8 [a]\n", 1),
        LineError::Negative { .. }
    ));
    assert!(matches!(
        err(f, "8,0 3 1 0.5 697 Q W 36028797018963968 + 8 [a]\n", 1),
        LineError::Overflow { .. }
    ));
    assert!(matches!(
        err(f, "8,0 3 1 0.5 697 Q W 12 - 8 [a]\n", 1),
        LineError::Other(_)
    ));
    assert!(matches!(err(f, "garbage here\n", 1), LineError::Other(_)));
}

#[test]
fn headers_comments_and_blank_lines_skipped() {
    let systor = "# exported\n\nTimestamp,Response,IOType,LUN,Offset,Size\n\
                  1.5,0.1,W,3,4096,512\n   \n# end\n";
    assert_eq!(
        ok(Format::Systor, systor),
        vec![req(1_500_000_000, 3, Op::Write, 4096, 512)]
    );
    // Headerless is accepted too.
    assert_eq!(ok(Format::Systor, "2,0,r,0,0,1\n").len(), 1);
    let cp = "version,time,op,size,lbn\n1,10,28,4096,8\n1,11,2A,512,0\n";
    assert_eq!(
        ok(Format::CloudPhysics, cp),
        vec![
            req(10_000_000_000, 0, Op::Read, 4096, 4096),
            req(11_000_000_000, 0, Op::Write, 0, 512)
        ]
    );
    let msr = "\n# c\n100,h,2,Read,512,4096,1\n150,h,2,write,0,512,1\n";
    assert_eq!(
        ok(Format::Msr, msr),
        vec![
            req(0, 2, Op::Read, 512, 4096),
            req(5_000, 2, Op::Write, 0, 512)
        ]
    );
    let tencent = "7,1,8,0,5\r\n8,2,1,1,6\r\n";
    assert_eq!(
        ok(Format::Tencent, tencent),
        vec![
            req(7_000_000_000, 5, Op::Read, 512, 4096),
            req(8_000_000_000, 6, Op::Write, 1024, 512)
        ]
    );
    let disksim = "  10\t1 2 3 1 \n\n20 0 0 1 0\n";
    assert_eq!(
        ok(Format::DiskSim, disksim),
        vec![
            req(10, 1, Op::Read, 1024, 1536),
            req(20, 0, Op::Write, 0, 512)
        ]
    );
}

#[test]
fn msr_errors() {
    let f = Format::Msr;
    let good = "100,h,0,Read,0,512,1\n";
    assert!(matches!(
        err(f, &format!("{good}101,h,0,Read,0,512\n"), 2),
        LineError::ColumnCount { found: 6, .. }
    ));
    assert_eq!(
        err(f, &format!("{good}101,h,0,Read,0,5x2,1\n"), 2),
        LineError::BadNumber {
            field: "size",
            value: "5x2".into()
        }
    );
    assert!(err(f, &format!("{good}101,h,0,Read,0,5x2,1\n"), 2)
        .to_string()
        .contains("\"5x2\""));
    assert_eq!(
        err(f, &format!("{good}101,h,0,Trim,0,512,1\n"), 2),
        LineError::UnknownOp {
            value: "Trim".into()
        }
    );
    assert!(matches!(
        err(f, &format!("{good}101,h,0,Read,-4096,512,1\n"), 2),
        LineError::Negative {
            field: "offset",
            ..
        }
    ));
    // Earlier than the first request.
    assert!(matches!(
        err(f, &format!("{good}99,h,0,Read,0,512,1\n"), 2),
        LineError::Negative { .. }
    ));
    assert!(matches!(
        err(f, "100,h,0,Read,0,99999999999999999999,1\n", 1),
        LineError::Overflow { .. }
    ));
    assert!(matches!(
        err(
            f,
            "0,h,0,Read,0,1,1\n1844674407370955162,h,0,Read,0,1,1\n",
            2
        ),
        LineError::Overflow { .. }
    ));
    assert!(matches!(
        err(f, "0,h,4294967296,Read,0,1,1\n", 1),
        LineError::Overflow {
            field: "disk number",
            ..
        }
    ));
}

#[test]
fn tencent_errors() {
    let f = Format::Tencent;
    assert!(matches!(
        err(f, "1,2,3,0\n", 1),
        LineError::ColumnCount { found: 4, .. }
    ));
    assert!(matches!(
        err(f, "1,2,3,0,1\n1,2,3,2,1\n", 2),
        LineError::UnknownOp { .. }
    ));
    assert!(matches!(
        err(f, "1.5,2,3,0,1\n", 1),
        LineError::BadNumber { .. }
    ));
    assert!(matches!(
        err(f, "1,-2,3,0,1\n", 1),
        LineError::Negative { .. }
    ));
    assert!(matches!(
        err(f, "1,36028797018963968,3,0,1\n", 1),
        LineError::Overflow {
            field: "offset",
            ..
        }
    ));
    assert!(matches!(
        err(f, "18446744074,2,3,0,1\n", 1),
        LineError::Overflow {
            field: "timestamp",
            ..
        }
    ));
}

#[test]
fn systor_errors() {
    let f = Format::Systor;
    let h = "Timestamp,Response,IOType,LUN,Offset,Size\n";
    assert!(matches!(
        err(f, "Timestamp,IOType,LUN,Offset,Size\n", 1),
        LineError::BadHeader { .. }
    ));
    assert!(matches!(
        err(f, &format!("{h}1.0,0.1,R,0,0\n"), 2),
        LineError::ColumnCount { found: 5, .. }
    ));
    assert!(matches!(
        err(f, &format!("{h}1.0,0.1,X,0,0,1\n"), 2),
        LineError::UnknownOp { .. }
    ));
    assert!(matches!(
        err(f, &format!("{h}1.0.2,0.1,R,0,0,1\n"), 2),
        LineError::BadNumber { .. }
    ));
    assert!(matches!(
        err(f, &format!("{h}-1.0,0.1,R,0,0,1\n"), 2),
        LineError::Negative { .. }
    ));
    assert!(matches!(
        err(f, &format!("{h}18446744074.0,0.1,R,0,0,1\n"), 2),
        LineError::Overflow { .. }
    ));
}

#[test]
fn cloudphysics_errors() {
    let f = Format::CloudPhysics;
    let h = "version,time,op,size,lbn\n";
    assert!(matches!(
        err(f, "version,time,op,lbn\n", 1),
        LineError::BadHeader { .. }
    ));
    assert!(matches!(
        err(f, &format!("{h}1,2,28,512\n"), 2),
        LineError::ColumnCount { found: 4, .. }
    ));
    assert_eq!(
        err(f, &format!("{h}1,2,35,512,0\n"), 2),
        LineError::UnknownOp { value: "35".into() }
    );
    assert!(matches!(
        err(f, &format!("{h}1,2,28,abc,0\n"), 2),
        LineError::BadNumber { field: "size", .. }
    ));
    assert!(matches!(
        err(f, &format!("{h}1,-2,28,512,0\n"), 2),
        LineError::Negative { field: "time", .. }
    ));
    assert!(matches!(
        err(f, &format!("{h}1,2,28,512,36028797018963968\n"), 2),
        LineError::Overflow { field: "lbn", .. }
    ));
}

#[test]
fn disksim_errors() {
    let f = Format::DiskSim;
    assert!(matches!(
        err(f, "1 2 3 4 1\n1 2 3 4 1 6\n", 2),
        LineError::ColumnCount { found: 6, .. }
    ));
    assert!(matches!(
        err(f, "1 2 3 4 2\n", 1),
        LineError::UnknownOp { .. }
    ));
    assert!(matches!(
        err(f, "1.5 2 3 4 1\n", 1),
        LineError::BadNumber { field: "time", .. }
    ));
    assert!(matches!(
        err(f, "1 -2 3 4 1\n", 1),
        LineError::Negative {
            field: "device",
            ..
        }
    ));
    assert!(matches!(
        err(f, "1 2 3 36028797018963968 1\n", 1),
        LineError::Overflow { field: "size", .. }
    ));
}

/// A line of `format` with a request of `len` in the format's length unit,
/// and that unit's name and size in bytes.
fn line_of_len(format: Format, len: u64) -> Option<(String, &'static str, u64)> {
    Some(match format {
        Format::Msr => (format!("100,h,0,Read,0,{len},1\n"), "size", 1),
        Format::Tencent => (format!("1,0,{len},0,1\n"), "size", 512),
        Format::Systor => (format!("1.0,0.1,R,0,0,{len}\n"), "size", 1),
        Format::CloudPhysics => (format!("1,1,28,{len},0\n"), "size", 1),
        Format::DiskSim => (format!("1 0 0 {len} 1\n"), "size", 512),
        Format::FioIolog => (
            format!("fio version 2 iolog\n/f add\n/f read 0 {len}\n"),
            "length",
            1,
        ),
        Format::Blkparse => (
            format!("8,0 0 1 0.5 1 Q R 0 + {len} [x]\n"),
            "sector count",
            512,
        ),
        Format::Umass => (format!("0,0,{len},r,0.5\n"), "size", 1),
        Format::Fiu => (format!("1 2 p 0 {len} R 8 0\n"), "size", 512),
        Format::OracleGeneral => return None,
    })
}

#[test]
fn a_request_over_1_gib_is_refused_naming_its_length_column() {
    for format in Format::ALL {
        let Some((_, field, unit)) = line_of_len(format, 0) else {
            continue;
        };
        let max = MAX_REQUEST_BYTES / unit;
        let (text, ..) = line_of_len(format, max).unwrap();
        let got = ok(format, &text);
        assert_eq!(got.len(), 1, "{format}");
        assert_eq!(got[0].len, MAX_REQUEST_BYTES, "{format}");

        // The probe's Tencent line: 99,999,999,999,999 sectors (about 46 PiB).
        for over in [max + 1, 99_999_999_999_999] {
            let (text, ..) = line_of_len(format, over).unwrap();
            let line = text.lines().count() as u64;
            let e = err(format, &text, line);
            assert!(
                matches!(e, LineError::TooLong { field: f, bytes, .. } if f == field && bytes == over * unit),
                "{format}: {e:?}"
            );
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("{field} \"{over}\" is")), "{msg}");
            assert!(msg.contains("1 GiB"), "{msg}");
        }
    }
}

#[test]
fn io_error_names_source_and_line() {
    let bytes = b"1 2 3 4 1\n\xff\xfe 2 3 4 1\n".to_vec();
    let r: Vec<_> = reader(Format::DiskSim, Cursor::new(bytes), "x.trace").collect();
    assert!(r[0].is_ok());
    let msg = r[1].as_ref().unwrap_err().to_string();
    assert!(msg.starts_with("x.trace:2: "), "{msg}");
    assert_eq!(r.len(), 2, "reading stops after an I/O error");
    // The I/O error's text is in the message once: it is not a source too,
    // or a whole chain (anyhow's `{:#}`) would print it twice.
    assert!(std::error::Error::source(r[1].as_ref().unwrap_err()).is_none());
    let e = trace::open(Format::Msr, "/nonexistent/t.csv")
        .err()
        .unwrap();
    assert!(std::error::Error::source(&e).is_none());
    assert_eq!(
        e.to_string(),
        "/nonexistent/t.csv: cannot open: No such file or directory (os error 2)"
    );
}

#[test]
fn a_gzip_compressed_trace_is_named_as_such() {
    for format in Format::ALL {
        if format == Format::OracleGeneral {
            continue;
        }
        let bytes = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff".to_vec();
        let r: Vec<_> = reader(format, Cursor::new(bytes), "t.csv.gz").collect();
        assert_eq!(r.len(), 1, "{format}: reading stops");
        let msg = r[0].as_ref().unwrap_err().to_string();
        assert!(
            msg.starts_with("t.csv.gz: starts with the gzip magic bytes 1f 8b")
                && msg.contains("not supported"),
            "{format}: {msg}"
        );
    }
    // Text that is not gzip is read as before, even when short.
    assert_eq!(ok(Format::DiskSim, "1 2 3 4 1\n").len(), 1);
    assert!(ok(Format::DiskSim, "").is_empty());
}

#[test]
fn specs() {
    for f in Format::ALL {
        assert_eq!(f.name().parse::<Format>().unwrap(), f);
        let (g, p) = parse_spec(&format!("{f}:/a/b.csv")).unwrap();
        assert_eq!((g, p.to_str().unwrap()), (f, "/a/b.csv"));
    }
    assert_eq!(
        parse_spec("fio-iolog:rel/x:y").unwrap().1.to_str(),
        Some("rel/x:y")
    );
    assert!(parse_spec("msr").is_err());
    assert!(parse_spec("msr:").is_err());
    let e = parse_spec("spc:/x").unwrap_err().to_string();
    assert!(e.contains("spc:/x") && e.contains("fio-iolog"), "{e}");
}
