//! Per-format line parsers.

use std::collections::HashMap;
use std::num::IntErrorKind;

use crate::{LineError, Op, Request, MAX_REQUEST_BYTES, SECTOR};

/// Parses one non-blank, non-comment, trimmed line. `Ok(None)` skips the
/// line (a header, or a record that is not a read or write request).
pub trait LineParser {
    /// Parses `line` into a request, `Ok(None)` to skip it.
    fn parse_line(&mut self, line: &str) -> Result<Option<Request>, LineError>;
}

const NS_PER_S: u64 = 1_000_000_000;

pub(crate) fn parse_u64(field: &'static str, s: &str) -> Result<u64, LineError> {
    s.parse::<u64>().map_err(|e| {
        let value = s.to_string();
        match e.kind() {
            IntErrorKind::PosOverflow => LineError::Overflow { field, value },
            _ if s.len() > 1
                && s.starts_with('-')
                && s[1..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                LineError::Negative { field, value }
            }
            _ => LineError::BadNumber { field, value },
        }
    })
}

pub(crate) fn parse_u32(field: &'static str, s: &str) -> Result<u32, LineError> {
    let v = parse_u64(field, s)?;
    u32::try_from(v).map_err(|_| LineError::Overflow {
        field,
        value: s.to_string(),
    })
}

/// `s` parsed as an integer and multiplied by `unit`, with overflow checked.
fn parse_scaled(field: &'static str, s: &str, unit: u64) -> Result<u64, LineError> {
    parse_u64(field, s)?
        .checked_mul(unit)
        .ok_or_else(|| LineError::Overflow {
            field,
            value: s.to_string(),
        })
}

/// A request length: `s` parsed as an integer and multiplied by `unit` (1
/// for bytes, [`SECTOR`] for sectors), overflow checked, and refused over
/// [`MAX_REQUEST_BYTES`].
pub(crate) fn parse_len(field: &'static str, s: &str, unit: u64) -> Result<u64, LineError> {
    let bytes = parse_scaled(field, s, unit)?;
    if bytes > MAX_REQUEST_BYTES {
        return Err(LineError::TooLong {
            field,
            value: s.to_string(),
            bytes,
            max: MAX_REQUEST_BYTES,
        });
    }
    Ok(bytes)
}

/// Decimal seconds (`1456095145.133076000`) to nanoseconds, exactly;
/// digits past the ninth decimal are truncated.
pub(crate) fn parse_secs_ns(field: &'static str, s: &str) -> Result<u64, LineError> {
    let value = || s.to_string();
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) {
        if s.starts_with('-') && s.len() > 1 {
            let rest = &s[1..];
            let (i, f) = rest.split_once('.').unwrap_or((rest, ""));
            if !i.is_empty() && digits(i) && digits(f) {
                return Err(LineError::Negative {
                    field,
                    value: value(),
                });
            }
        }
        return Err(LineError::BadNumber {
            field,
            value: value(),
        });
    }
    let overflow = || LineError::Overflow {
        field,
        value: value(),
    };
    let secs: u64 = int.parse().map_err(|_| overflow())?;
    let mut ns: u64 = 0;
    for i in 0..9 {
        let d = frac.as_bytes().get(i).map_or(0, |b| u64::from(b - b'0'));
        ns = ns * 10 + d;
    }
    secs.checked_mul(NS_PER_S)
        .and_then(|v| v.checked_add(ns))
        .ok_or_else(overflow)
}

/// Exactly `N` fields, or a column-count error.
fn fields<'a, const N: usize>(
    it: impl Iterator<Item = &'a str>,
) -> Result<[&'a str; N], LineError> {
    let mut out = [""; N];
    let mut n = 0;
    for f in it {
        if n < N {
            out[n] = f;
        }
        n += 1;
    }
    if n == N {
        Ok(out)
    } else {
        Err(LineError::ColumnCount {
            expected: N.to_string(),
            found: n,
        })
    }
}

pub(crate) fn csv(line: &str) -> impl Iterator<Item = &str> {
    line.split(',').map(str::trim)
}

/// Header handling for CSV formats with an optional header line: the first
/// content line is the header if it starts with a letter; it must then match.
#[derive(Debug, Default)]
struct Header {
    checked: bool,
}

impl Header {
    fn skip(&mut self, line: &str, expected: &str) -> Result<bool, LineError> {
        if self.checked {
            return Ok(false);
        }
        self.checked = true;
        if !line.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Ok(false);
        }
        let norm: String = line.chars().filter(|c| !c.is_whitespace()).collect();
        if norm.eq_ignore_ascii_case(expected) {
            Ok(true)
        } else {
            Err(LineError::BadHeader {
                expected: expected.to_string(),
                found: line.to_string(),
            })
        }
    }
}

/// MSR Cambridge CSV:
/// `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, timestamp
/// in Windows filetime (100 ns units) made relative to the first request.
#[derive(Debug, Default)]
pub struct Msr {
    first: Option<u64>,
}

impl LineParser for Msr {
    fn parse_line(&mut self, line: &str) -> Result<Option<Request>, LineError> {
        let [ts, _host, disk, ty, off, size, _resp] = fields::<7>(csv(line))?;
        let t = parse_u64("timestamp", ts)?;
        let volume = parse_u32("disk number", disk)?;
        let op = if ty.eq_ignore_ascii_case("read") {
            Op::Read
        } else if ty.eq_ignore_ascii_case("write") {
            Op::Write
        } else {
            return Err(LineError::UnknownOp {
                value: ty.to_string(),
            });
        };
        let offset = parse_u64("offset", off)?;
        let len = parse_len("size", size, 1)?;
        let first = *self.first.get_or_insert(t);
        let rel = t.checked_sub(first).ok_or_else(|| LineError::Negative {
            field: "timestamp relative to the first request",
            value: ts.to_string(),
        })?;
        let time_ns = rel.checked_mul(100).ok_or_else(|| LineError::Overflow {
            field: "timestamp",
            value: ts.to_string(),
        })?;
        Ok(Some(Request {
            time_ns,
            volume,
            op,
            offset,
            len,
        }))
    }
}

/// Tencent CBS: `ts_s,offset_sectors,size_sectors,op(0=read,1=write),volume`.
#[derive(Debug, Default)]
pub struct Tencent;

impl LineParser for Tencent {
    fn parse_line(&mut self, line: &str) -> Result<Option<Request>, LineError> {
        let [ts, off, size, op, vol] = fields::<5>(csv(line))?;
        let time_ns = parse_scaled("timestamp", ts, NS_PER_S)?;
        let offset = parse_scaled("offset", off, SECTOR)?;
        let len = parse_len("size", size, SECTOR)?;
        let op = match op {
            "0" => Op::Read,
            "1" => Op::Write,
            _ => {
                return Err(LineError::UnknownOp {
                    value: op.to_string(),
                })
            }
        };
        let volume = parse_u32("volume id", vol)?;
        Ok(Some(Request {
            time_ns,
            volume,
            op,
            offset,
            len,
        }))
    }
}

/// SNIA SYSTOR'17: `Timestamp,Response,IOType,LUN,Offset,Size`, seconds as a
/// decimal, `R`/`W`, bytes.
#[derive(Debug, Default)]
pub struct Systor {
    header: Header,
}

impl LineParser for Systor {
    fn parse_line(&mut self, line: &str) -> Result<Option<Request>, LineError> {
        if self
            .header
            .skip(line, "Timestamp,Response,IOType,LUN,Offset,Size")?
        {
            return Ok(None);
        }
        let [ts, _resp, ty, lun, off, size] = fields::<6>(csv(line))?;
        let time_ns = parse_secs_ns("timestamp", ts)?;
        let op = match ty {
            "R" | "r" => Op::Read,
            "W" | "w" => Op::Write,
            _ => {
                return Err(LineError::UnknownOp {
                    value: ty.to_string(),
                })
            }
        };
        let volume = parse_u32("LUN", lun)?;
        let offset = parse_u64("offset", off)?;
        let len = parse_len("size", size, 1)?;
        Ok(Some(Request {
            time_ns,
            volume,
            op,
            offset,
            len,
        }))
    }
}

/// CloudPhysics CSV: `version,time,op,size,lbn`; time in seconds (the sample
/// spans 7,200 units over its 2 hours), op a SCSI opcode in hex
/// (`28`/`2a`, also the 6-, 12- and 16-byte variants), size in bytes, lbn in
/// 512-byte sectors. No volume (0).
#[derive(Debug, Default)]
pub struct CloudPhysics {
    header: Header,
}

impl LineParser for CloudPhysics {
    fn parse_line(&mut self, line: &str) -> Result<Option<Request>, LineError> {
        if self.header.skip(line, "version,time,op,size,lbn")? {
            return Ok(None);
        }
        let [version, ts, op, size, lbn] = fields::<5>(csv(line))?;
        parse_u64("version", version)?;
        let time_ns = parse_scaled("time", ts, NS_PER_S)?;
        let op = match op.to_ascii_lowercase().as_str() {
            "28" | "08" | "a8" | "88" => Op::Read,
            "2a" | "0a" | "aa" | "8a" => Op::Write,
            _ => {
                return Err(LineError::UnknownOp {
                    value: op.to_string(),
                })
            }
        };
        let len = parse_len("size", size, 1)?;
        let offset = parse_scaled("lbn", lbn, SECTOR)?;
        Ok(Some(Request {
            time_ns,
            volume: 0,
            op,
            offset,
            len,
        }))
    }
}

/// DiskSim ASCII as MQSim reads it:
/// `time_ns device lba_sectors size_sectors type(1=read,0=write)`.
#[derive(Debug, Default)]
pub struct DiskSim;

impl LineParser for DiskSim {
    fn parse_line(&mut self, line: &str) -> Result<Option<Request>, LineError> {
        let [ts, dev, lba, size, ty] = fields::<5>(line.split_whitespace())?;
        let time_ns = parse_u64("time", ts)?;
        let volume = parse_u32("device", dev)?;
        let offset = parse_scaled("lba", lba, SECTOR)?;
        let len = parse_len("size", size, SECTOR)?;
        let op = match ty {
            "1" => Op::Read,
            "0" => Op::Write,
            _ => {
                return Err(LineError::UnknownOp {
                    value: ty.to_string(),
                })
            }
        };
        Ok(Some(Request {
            time_ns,
            volume,
            op,
            offset,
            len,
        }))
    }
}

/// Up to `N` whitespace-separated fields and the total count.
fn ws_fields<const N: usize>(line: &str) -> ([&str; N], usize) {
    let mut out = [""; N];
    let mut n = 0;
    for f in line.split_whitespace() {
        if n < N {
            out[n] = f;
        }
        n += 1;
    }
    (out, n)
}

/// Maps names to dense ids by first appearance.
#[derive(Debug, Default)]
pub(crate) struct Ids<K> {
    map: HashMap<K, u32>,
}

impl<K: std::hash::Hash + Eq> Ids<K> {
    pub(crate) fn id(&mut self, key: K) -> u32 {
        let next = self.map.len() as u32;
        *self.map.entry(key).or_insert(next)
    }
}

/// fio iolog, version 2 (`filename action [offset length]`) or 3
/// (`timestamp_ms filename action [offset length]`). `add`/`open`/`close`
/// and the non-data actions `sync`, `datasync`, `trim`, `wait` are skipped.
/// Files get volume ids by first appearance; v2 times are 0.
#[derive(Debug, Default)]
pub struct FioIolog {
    version: Option<u8>,
    files: Ids<String>,
}

impl LineParser for FioIolog {
    fn parse_line(&mut self, line: &str) -> Result<Option<Request>, LineError> {
        let Some(version) = self.version else {
            let norm: Vec<&str> = line.split_whitespace().collect();
            let v = match norm.as_slice() {
                ["fio", "version", "2", "iolog"] => 2,
                ["fio", "version", "3", "iolog"] => 3,
                _ => {
                    return Err(LineError::BadHeader {
                        expected: "fio version 2 iolog | fio version 3 iolog".to_string(),
                        found: line.to_string(),
                    })
                }
            };
            self.version = Some(v);
            return Ok(None);
        };
        let (f, n) = ws_fields::<5>(line);
        let (time_ns, rest, n) = if version == 3 {
            if n < 3 {
                return Err(LineError::ColumnCount {
                    expected: "3 or 5".to_string(),
                    found: n,
                });
            }
            let t = parse_scaled("timestamp", f[0], 1_000_000)?;
            (t, &f[1..], n - 1)
        } else {
            if n < 2 {
                return Err(LineError::ColumnCount {
                    expected: "2 or 4".to_string(),
                    found: n,
                });
            }
            (0, &f[..], n)
        };
        let (file, action) = (rest[0], rest[1]);
        let shift = if version == 3 { 1 } else { 0 };
        let op = match action {
            "add" | "open" | "close" => {
                if n != 2 {
                    return Err(LineError::ColumnCount {
                        expected: (2 + shift).to_string(),
                        found: n + shift,
                    });
                }
                self.files.id(file.to_string());
                return Ok(None);
            }
            "sync" | "datasync" | "trim" | "wait" => return Ok(None),
            "read" => Op::Read,
            "write" => Op::Write,
            _ => {
                return Err(LineError::UnknownOp {
                    value: action.to_string(),
                })
            }
        };
        if n != 4 {
            return Err(LineError::ColumnCount {
                expected: (4 + shift).to_string(),
                found: n + shift,
            });
        }
        let offset = parse_u64("offset", rest[2])?;
        let len = parse_len("length", rest[3], 1)?;
        let volume = match self.files.map.get(file) {
            Some(&id) => id,
            None => self.files.id(file.to_string()),
        };
        Ok(Some(Request {
            time_ns,
            volume,
            op,
            offset,
            len,
        }))
    }
}

/// blkparse default text output, e.g.
/// `8,0 3 1 0.000000000 697 Q W 223490 + 8 [kjournald]`.
/// Only `Q` (queue) events whose RWBS holds `R` or `W` are requests; other
/// events are skipped, as is the summary section (from `CPU..`/`Total`).
/// Devices get volume ids by first appearance among requests.
#[derive(Debug, Default)]
pub struct Blkparse {
    in_summary: bool,
    devices: Ids<(u32, u32)>,
}

fn parse_dev(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(',')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

impl LineParser for Blkparse {
    fn parse_line(&mut self, line: &str) -> Result<Option<Request>, LineError> {
        if self.in_summary {
            return Ok(None);
        }
        let (f, n) = ws_fields::<10>(line);
        let Some(dev) = parse_dev(f[0]) else {
            if line.starts_with("CPU") || line.starts_with("Total") {
                self.in_summary = true;
                return Ok(None);
            }
            return Err(LineError::Other(format!(
                "unrecognised line (expected MAJOR,MINOR first, found {:?})",
                f[0]
            )));
        };
        if n < 7 {
            return Err(LineError::ColumnCount {
                expected: "at least 7".to_string(),
                found: n,
            });
        }
        let time_ns = parse_secs_ns("timestamp", f[3])?;
        if f[5] != "Q" {
            return Ok(None);
        }
        let rwbs = f[6];
        let op = if rwbs.contains('W') {
            Op::Write
        } else if rwbs.contains('R') {
            Op::Read
        } else {
            return Ok(None);
        };
        if n < 10 {
            return Err(LineError::ColumnCount {
                expected: "at least 10".to_string(),
                found: n,
            });
        }
        if f[8] != "+" {
            return Err(LineError::Other(format!(
                "expected \"+\" between sector and count, found {:?}",
                f[8]
            )));
        }
        let offset = parse_scaled("sector", f[7], SECTOR)?;
        let len = parse_len("sector count", f[9], SECTOR)?;
        let volume = self.devices.id(dev);
        Ok(Some(Request {
            time_ns,
            volume,
            op,
            offset,
            len,
        }))
    }
}
