//! UMass Trace Repository SPC format (the Financial and WebSearch traces the
//! GREM paper uses): `ASU,LBA,Size,Opcode,Timestamp[,more...]`.
//!
//! * ASU: application specific unit, an integer (the volume);
//! * LBA: logical block address in 512-byte sectors;
//! * Size: bytes;
//! * Opcode: `r`/`R` read, `w`/`W` write;
//! * Timestamp: seconds since the start of the trace, a decimal.
//!
//! The SPC specification allows optional fields after the timestamp; they
//! are ignored. There is no header line.

use crate::formats::{csv, parse_len, parse_secs_ns, parse_u32, parse_u64, LineParser};
use crate::{LineError, Op, Request, SECTOR};

/// UMass SPC CSV.
#[derive(Debug, Default)]
pub struct Umass;

impl LineParser for Umass {
    fn parse_line(&mut self, line: &str) -> Result<Option<Request>, LineError> {
        let mut it = csv(line);
        let mut f = [""; 5];
        let mut n = 0;
        for (slot, v) in f.iter_mut().zip(&mut it) {
            *slot = v;
            n += 1;
        }
        if n < 5 {
            return Err(LineError::ColumnCount {
                expected: "at least 5".to_string(),
                found: n,
            });
        }
        let [asu, lba, size, op, ts] = f;
        let volume = parse_u32("ASU", asu)?;
        let offset =
            parse_u64("LBA", lba)?
                .checked_mul(SECTOR)
                .ok_or_else(|| LineError::Overflow {
                    field: "LBA",
                    value: lba.to_string(),
                })?;
        let len = parse_len("size", size, 1)?;
        let op = match op {
            "r" | "R" => Op::Read,
            "w" | "W" => Op::Write,
            _ => {
                return Err(LineError::UnknownOp {
                    value: op.to_string(),
                })
            }
        };
        let time_ns = parse_secs_ns("timestamp", ts)?;
        Ok(Some(Request {
            time_ns,
            volume,
            op,
            offset,
            len,
        }))
    }
}
