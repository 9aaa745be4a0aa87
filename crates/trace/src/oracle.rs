//! libCacheSim's `oracleGeneral` binary format, so that flexssd and
//! libCacheSim can replay the very same file (`scripts/bench-cache.sh`).
//!
//! Each record is 24 little-endian bytes: `u32 clock_time` (seconds),
//! `u64 obj_id`, `u32 obj_size` (bytes), `i64 next_access_vtime` (ignored
//! here; -1 when unknown). The format has no volumes and no operation: every
//! record is a read, of `obj_size` bytes at offset `obj_id × 4096`, so an
//! object of 4 KiB is one cache block. Errors name the file and the 1-based
//! record number (in place of a line number).

use std::io::{BufRead, ErrorKind, Read, Write};

use crate::{LineError, Op, Request, TraceError};

/// Bytes per record.
pub const RECORD_BYTES: usize = 24;
/// Bytes of address space per object id.
pub const OBJECT_STRIDE: u64 = 4096;

/// Streaming reader of `oracleGeneral` records.
pub struct OracleReader<R> {
    input: R,
    src: String,
    record: u64,
    done: bool,
}

impl<R: BufRead> OracleReader<R> {
    /// `src` names the input in errors.
    pub fn new(input: R, src: impl Into<String>) -> Self {
        OracleReader {
            input,
            src: src.into(),
            record: 0,
            done: false,
        }
    }

    fn fail(&mut self, kind: LineError) -> Option<Result<Request, TraceError>> {
        self.done = true;
        Some(Err(TraceError::Line {
            src: self.src.clone(),
            line: self.record,
            kind,
        }))
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn fill<R: Read>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: BufRead> Iterator for OracleReader<R> {
    type Item = Result<Request, TraceError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.record += 1;
        let mut b = [0u8; RECORD_BYTES];
        // Fast path: the record is whole in the buffer.
        let fast = match self.input.fill_buf() {
            Ok(buf) if buf.len() >= RECORD_BYTES => {
                b.copy_from_slice(&buf[..RECORD_BYTES]);
                true
            }
            _ => false,
        };
        if fast {
            self.input.consume(RECORD_BYTES);
        } else {
            match fill(&mut self.input, &mut b) {
                Ok(0) => {
                    self.done = true;
                    return None;
                }
                Ok(RECORD_BYTES) => {}
                Ok(n) => {
                    return self.fail(LineError::Other(format!(
                        "truncated record: {n} of {RECORD_BYTES} bytes"
                    )))
                }
                Err(err) => {
                    self.done = true;
                    return Some(Err(TraceError::Io {
                        src: self.src.clone(),
                        line: self.record,
                        err,
                    }));
                }
            }
        }
        let time = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
        let id = u64::from_le_bytes(b[4..12].try_into().expect("8 bytes"));
        let size = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
        let Some(offset) = id.checked_mul(OBJECT_STRIDE) else {
            return self.fail(LineError::Overflow {
                field: "obj_id",
                value: id.to_string(),
            });
        };
        Some(Ok(Request {
            time_ns: u64::from(time) * 1_000_000_000,
            volume: 0,
            op: Op::Read,
            offset,
            len: u64::from(size),
        }))
    }
}

/// Writes one record.
pub fn write_record<W: Write>(
    w: &mut W,
    time_s: u32,
    obj_id: u64,
    obj_size: u32,
) -> std::io::Result<()> {
    let mut b = [0u8; RECORD_BYTES];
    b[0..4].copy_from_slice(&time_s.to_le_bytes());
    b[4..12].copy_from_slice(&obj_id.to_le_bytes());
    b[12..16].copy_from_slice(&obj_size.to_le_bytes());
    b[16..24].copy_from_slice(&(-1i64).to_le_bytes());
    w.write_all(&b)
}
