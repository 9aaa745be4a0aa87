//! FIU SyLab block traces (the SRCMap and IODedup collections: `homes`,
//! `mail`, `web-vm`, `webresearch`, ...), one request per line:
//!
//! ```text
//! [ts in ns] [pid] [process] [lba] [size in 512-byte blocks] [W or R] [major] [minor] [md5]
//! 89968195792462 20782 gzip 283193184 8 R 6 0 56f11b711d91a065a2b6458eca924523
//! ```
//!
//! * the timestamp is nanoseconds since boot; it is made relative to the first
//!   request, as MSR's is;
//! * LBA and size are in 512-byte sectors (the collections' requests are 4 KiB
//!   pages, 8 sectors);
//! * the volume is the `major,minor` device, numbered by first appearance (as
//!   `blkparse`);
//! * the MD5 of the page's content (IODedup) is optional (SRCMap traces stop
//!   after the minor number) and ignored.
//!
//! A process name may hold spaces, so the fields are taken from both ends: the
//! first two from the front, the rest from the back, and whatever lies
//! between is the process name.

use crate::formats::{parse_len, parse_u32, parse_u64, Ids, LineParser};
use crate::{LineError, Op, Request, SECTOR};

/// FIU SRCMap / IODedup text.
#[derive(Debug, Default)]
pub struct Fiu {
    first: Option<u64>,
    devices: Ids<(u32, u32)>,
}

fn is_md5(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl LineParser for Fiu {
    fn parse_line(&mut self, line: &str) -> Result<Option<Request>, LineError> {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Without the MD5 the line ends at the minor number.
        let tail = if f.last().is_some_and(|s| is_md5(s)) {
            6
        } else {
            5
        };
        if f.len() < 2 + 1 + tail {
            return Err(LineError::ColumnCount {
                expected: "9 (ts pid process lba size op major minor md5), or 8 without the md5"
                    .to_string(),
                found: f.len(),
            });
        }
        let back = &f[f.len() - tail..];
        let (ts, lba, size, op, major, minor) = (f[0], back[0], back[1], back[2], back[3], back[4]);
        let t = parse_u64("timestamp", ts)?;
        let offset =
            parse_u64("lba", lba)?
                .checked_mul(SECTOR)
                .ok_or_else(|| LineError::Overflow {
                    field: "lba",
                    value: lba.to_string(),
                })?;
        let len = parse_len("size", size, SECTOR)?;
        let op = match op {
            "R" | "r" => Op::Read,
            "W" | "w" => Op::Write,
            _ => {
                return Err(LineError::UnknownOp {
                    value: op.to_string(),
                })
            }
        };
        let dev = (parse_u32("major", major)?, parse_u32("minor", minor)?);
        let first = *self.first.get_or_insert(t);
        let time_ns = t.checked_sub(first).ok_or_else(|| LineError::Negative {
            field: "timestamp relative to the first request",
            value: ts.to_string(),
        })?;
        Ok(Some(Request {
            time_ns,
            volume: self.devices.id(dev),
            op,
            offset,
            len,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &[&str]) -> Vec<Result<Option<Request>, LineError>> {
        let mut p = Fiu::default();
        lines.iter().map(|l| p.parse_line(l)).collect()
    }

    #[test]
    fn reads_iodedup_and_srcmap_lines() {
        let r = parse(&[
            "89968195792462 20782 gzip 283193184 8 R 6 0 56f11b711d91a065a2b6458eca924523",
            "89968195800000 4153 nfsd 1072128 16 W 8 16 4fbd8aa2b9ef2bb3d7e6f1b5c7a4d2e0",
            // SRCMap: no MD5; a process name with a space.
            "89968195900000 77 kworker u8 64 8 W 6 0",
        ]);
        let got: Vec<Request> = r.into_iter().map(|x| x.unwrap().unwrap()).collect();
        assert_eq!(
            got[0],
            Request {
                time_ns: 0,
                volume: 0,
                op: Op::Read,
                offset: 283193184 * 512,
                len: 4096,
            }
        );
        assert_eq!(got[1].time_ns, 7538);
        assert_eq!(got[1].volume, 1, "8,16 is a second device");
        assert_eq!((got[1].op, got[1].len), (Op::Write, 8192));
        assert_eq!(
            (got[2].volume, got[2].offset, got[2].len),
            (0, 64 * 512, 4096)
        );
    }

    #[test]
    fn malformed_lines_name_the_problem() {
        let r = parse(&[
            "1 2 p 3 8 R 6",
            "1 2 p x 8 R 6 0 56f11b711d91a065a2b6458eca924523",
            "1 2 p 3 8 Q 6 0",
            "5 2 p 3 8 R 6 0",
            "4 2 p 3 8 R 6 0",
            "1 2 p 3 99999999999999999999 R 6 0",
        ]);
        assert!(
            matches!(r[0], Err(LineError::ColumnCount { found: 7, .. })),
            "{:?}",
            r[0]
        );
        assert!(
            matches!(&r[1], Err(LineError::BadNumber { field: "lba", .. })),
            "{:?}",
            r[1]
        );
        assert!(matches!(&r[2], Err(LineError::UnknownOp { value }) if value == "Q"));
        assert!(r[3].is_ok());
        assert!(
            matches!(r[4], Err(LineError::Negative { .. })),
            "{:?}",
            r[4]
        );
        assert!(
            matches!(r[5], Err(LineError::Overflow { field: "size", .. })),
            "{:?}",
            r[5]
        );
    }
}
