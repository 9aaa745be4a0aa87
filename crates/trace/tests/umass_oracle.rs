//! The UMass SPC and libCacheSim oracleGeneral readers, and that every
//! reader's errors name the file and the line (or record) when reading a
//! real file.

use std::io::{Cursor, Write};

use trace::oracle::{write_record, RECORD_BYTES};
use trace::{open, open_spec, reader, Format, LineError, Op, Request, TraceError};

fn read(format: Format, bytes: &[u8]) -> Vec<Result<Request, TraceError>> {
    reader(format, Cursor::new(bytes.to_vec()), "<stream>").collect()
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
fn umass_spc_lines() {
    // Financial1.spc and WebSearch1.spc style lines, one with an extra field.
    let text = "0,303567,3584,w,0.000000\n\
                1,55590,3072,W,0.000000\n\
                # comment\n\
                \n\
                2,1158352,8192,r,0.010946\n\
                0,20941264,8192,R,0.551706,Alpha/NT\n";
    let got: Vec<Request> = read(Format::Umass, text.as_bytes())
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        got,
        vec![
            req(0, 0, Op::Write, 303_567 * 512, 3584),
            req(0, 1, Op::Write, 55_590 * 512, 3072),
            req(10_946_000, 2, Op::Read, 1_158_352 * 512, 8192),
            req(551_706_000, 0, Op::Read, 20_941_264 * 512, 8192),
        ]
    );
}

#[test]
fn umass_errors_name_line_and_problem() {
    let cases: [(&str, u64, &str); 6] = [
        (
            "0,1,512,r,0.0\n0,1,512,r\n",
            2,
            "expected at least 5 columns, found 4",
        ),
        ("0,x,512,r,0.0\n", 1, "unparsable LBA"),
        ("0,1,512,d,0.0\n", 1, "unknown op code \"d\""),
        ("0,1,512,r,-1.5\n", 1, "negative timestamp"),
        ("-3,1,512,r,0.0\n", 1, "negative ASU"),
        ("0,99999999999999999,512,r,0.0\n", 1, "LBA"),
    ];
    for (text, line, what) in cases {
        let e = read(Format::Umass, text.as_bytes())
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| panic!("no error for {text:?}"));
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("<stream>:{line}: ")), "{msg}");
        assert!(msg.contains(what), "{text:?}: {msg}");
    }
}

#[test]
fn oracle_round_trip_and_truncation() {
    let mut buf = Vec::new();
    write_record(&mut buf, 7, 3, 4096).unwrap();
    write_record(&mut buf, 9, 1 << 40, 512).unwrap();
    assert_eq!(buf.len(), 2 * RECORD_BYTES);
    let got: Vec<Request> = read(Format::OracleGeneral, &buf)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        got,
        vec![
            req(7_000_000_000, 0, Op::Read, 3 * 4096, 4096),
            req(9_000_000_000, 0, Op::Read, (1 << 40) * 4096, 512),
        ]
    );
    buf.extend_from_slice(&[1, 2, 3]);
    let all = read(Format::OracleGeneral, &buf);
    assert_eq!(all.len(), 3, "two records then one error, then the end");
    let e = all[2].as_ref().unwrap_err();
    assert_eq!(e.line(), Some(3));
    assert!(
        e.to_string().contains("truncated record: 3 of 24 bytes"),
        "{e}"
    );
    let mut huge = Vec::new();
    write_record(&mut huge, 0, u64::MAX, 4096).unwrap();
    let e = read(Format::OracleGeneral, &huge).remove(0).unwrap_err();
    assert!(matches!(e.kind(), Some(LineError::Overflow { .. })), "{e}");
}

/// A malformed line in a real file: the message starts with `path:line:`.
#[test]
fn every_text_reader_names_file_and_line() {
    let dir = std::env::temp_dir().join(format!("trace-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good: [(Format, &str); 8] = [
        (Format::Msr, "128166372003061629,hm,0,Read,0,4096,1\n"),
        (Format::Tencent, "1538323200,8,8,0,1\n"),
        (
            Format::Systor,
            "Timestamp,Response,IOType,LUN,Offset,Size\n1.5,0.1,R,0,0,4096\n",
        ),
        (
            Format::CloudPhysics,
            "version,time,op,size,lbn\n1,5,28,4096,0\n",
        ),
        (Format::DiskSim, "100 0 8 8 1\n"),
        (
            Format::FioIolog,
            "fio version 2 iolog\n/f add\n/f open\n/f read 0 4096\n",
        ),
        (Format::Blkparse, "8,0 1 1 0.000000000 1 Q R 8 + 8 [x]\n"),
        (Format::Umass, "0,8,4096,r,0.0\n"),
    ];
    for (format, text) in good {
        let path = dir.join(format!("{format}.txt"));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f.write_all(b"this is not a request\n").unwrap();
        drop(f);
        let lines = text.lines().count() as u64 + 1;
        let results: Vec<_> = open(format, &path).unwrap().collect();
        let e = results
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| panic!("{format}: no error"));
        let want = format!("{}:{lines}: ", path.display());
        assert!(e.to_string().starts_with(&want), "{format}: {e}");
        let spec = format!("{format}:{}", path.display());
        assert!(open_spec(&spec).unwrap().any(|r| r.is_err()));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn new_formats_parse_by_name() {
    assert_eq!("umass".parse::<Format>().unwrap(), Format::Umass);
    assert_eq!("oracle".parse::<Format>().unwrap(), Format::OracleGeneral);
    assert_eq!(Format::ALL.len(), 10);
    let e = "spc".parse::<Format>().unwrap_err().to_string();
    assert!(e.contains("umass") && e.contains("oracle"), "{e}");
}
