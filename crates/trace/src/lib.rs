//! Streaming readers of block I/O traces.
//!
//! Every format is read line by line from any [`BufRead`] with one reused line
//! buffer, and yields `Result<Request, TraceError>`. Blank lines and lines
//! starting with `#` are skipped in every format; a header line, where the
//! format has one, is validated and skipped.
//!
//! | [`Format`] | time unit | offset / length unit | volume |
//! |---|---|---|---|
//! | `msr` | Windows filetime (100 ns), made relative to the first request | bytes | disk number |
//! | `tencent` | seconds | 512-byte sectors | volume id |
//! | `systor` | seconds (decimal) | bytes | LUN |
//! | `cloudphysics` | seconds | size bytes, lbn 512-byte sectors | 0 |
//! | `disksim` | nanoseconds (MQSim ASCII) | 512-byte sectors | device |
//! | `fio-iolog` | v3: milliseconds, v2: none (0) | bytes | file, by first appearance |
//! | `blkparse` | seconds (decimal) | 512-byte sectors | `major,minor`, by first appearance |
//! | `umass` | seconds (decimal) | LBA 512-byte sectors, size bytes | ASU |
//! | `fiu` | nanoseconds, made relative to the first request | 512-byte sectors | `major minor`, by first appearance |
//! | `oracle` | seconds (libCacheSim `oracleGeneral` binary, 24-byte records) | object id × 4096, size bytes | 0 |
//!
//! One file per format: the text formats of the first releases in `formats.rs`,
//! UMass SPC in `umass.rs`, FIU SRCMap/IODedup in `fiu.rs`, libCacheSim's
//! binary format in `oracle.rs`.

mod fiu;
mod formats;
pub mod oracle;
mod umass;

use std::collections::HashSet;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use fiu::Fiu;
pub use formats::{Blkparse, CloudPhysics, DiskSim, FioIolog, LineParser, Msr, Systor, Tencent};
pub use oracle::OracleReader;
pub use umass::Umass;

/// Size of a sector in the sector-addressed formats.
pub const SECTOR: u64 = 512;

/// The longest request the text readers accept, in bytes: 1 GiB.
///
/// No real block trace comes near it: Linux caps one bio at 4 GiB (its size
/// is 32 bits) and devices advertise far less (the kernel's NBD client
/// 32 MiB, NVMe drives typically 128 KiB to 2 MiB), the NBD protocol's
/// length field is 32 bits, and this workspace's NBD server takes at most
/// 32 MiB per request. A longer request is a corrupt line; refusing it keeps
/// the consumers that walk a request block by block (the cache simulator,
/// `trace stats`) from walking billions of blocks. The binary `oracle`
/// format's sizes are 32 bits, so it is bounded at 4 GiB by construction and
/// not checked against this limit.
pub const MAX_REQUEST_BYTES: u64 = 1 << 30;

/// Direction of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// A read.
    Read,
    /// A write.
    Write,
}

/// One block I/O request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// Arrival time in nanoseconds (see the format table for the origin).
    pub time_ns: u64,
    /// Device / LUN / volume id; 0 where the format has none.
    pub volume: u32,
    /// Read or write.
    pub op: Op,
    /// Byte offset.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// What is wrong with one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The line has the wrong number of columns.
    #[error("expected {expected} columns, found {found}")]
    ColumnCount {
        /// The column counts the format allows (e.g. "3 or 5").
        expected: String,
        /// The columns the line has.
        found: usize,
    },
    /// A numeric column does not parse.
    #[error("unparsable {field} {value:?}")]
    BadNumber {
        /// The column's name.
        field: &'static str,
        /// Its text.
        value: String,
    },
    /// A column that must not be negative is.
    #[error("negative {field} {value:?}")]
    Negative {
        /// The column's name.
        field: &'static str,
        /// Its text.
        value: String,
    },
    /// A number does not fit (or a computed byte address would not).
    #[error("{field} {value:?} overflows")]
    Overflow {
        /// The column's name.
        field: &'static str,
        /// Its text.
        value: String,
    },
    /// A request is longer than [`MAX_REQUEST_BYTES`].
    #[error(
        "{field} {value:?} is {bytes} bytes, over the limit of {max} bytes (1 GiB) per request"
    )]
    TooLong {
        /// The length column's name.
        field: &'static str,
        /// Its text.
        value: String,
        /// The length in bytes.
        bytes: u64,
        /// The limit, [`MAX_REQUEST_BYTES`].
        max: u64,
    },
    /// The operation column is neither a read nor a write the format knows.
    #[error("unknown op code {value:?}")]
    UnknownOp {
        /// The op column's text.
        value: String,
    },
    /// The file's header line is not the one the format requires.
    #[error("bad header {found:?}, expected {expected:?}")]
    BadHeader {
        /// The header(s) the format accepts.
        expected: String,
        /// The line found instead.
        found: String,
    },
    /// Anything else wrong with the line, described.
    #[error("{0}")]
    Other(String),
}

/// An error reading a trace; always names the source and, where it applies,
/// the 1-based line number.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A line does not parse.
    #[error("{src}:{line}: {kind}")]
    Line {
        /// The trace (its path).
        src: String,
        /// The 1-based line number.
        line: u64,
        /// What is wrong with the line.
        kind: LineError,
    },
    /// Reading the trace failed. The message holds the I/O error's text, so
    /// the error is not also given as its `source()` (a chain printed whole
    /// would say it twice).
    #[error("{src}:{line}: I/O error: {err}")]
    Io {
        /// The trace (its path).
        src: String,
        /// The 1-based number of the line being read.
        line: u64,
        /// The I/O error.
        err: std::io::Error,
    },
    /// The trace cannot be opened (the I/O error's text is in the message, as
    /// for [`TraceError::Io`]).
    #[error("{src}: cannot open: {err}")]
    Open {
        /// The trace (its path).
        src: String,
        /// The I/O error.
        err: std::io::Error,
    },
    /// The trace is gzip-compressed, which no reader takes.
    #[error("{src}: starts with the gzip magic bytes 1f 8b: compressed traces are not supported, decompress it first (gunzip)")]
    Gzip {
        /// The trace (its path).
        src: String,
    },
    /// A `FORMAT:PATH` spec is malformed or names an unknown format.
    #[error("bad trace spec {spec:?}: {reason}")]
    Spec {
        /// The spec as given.
        spec: String,
        /// Why it is rejected.
        reason: String,
    },
}

impl TraceError {
    /// The 1-based line number, where the error has one.
    pub fn line(&self) -> Option<u64> {
        match self {
            TraceError::Line { line, .. } | TraceError::Io { line, .. } => Some(*line),
            _ => None,
        }
    }

    /// What is wrong with the line, for line errors.
    pub fn kind(&self) -> Option<&LineError> {
        match self {
            TraceError::Line { kind, .. } => Some(kind),
            _ => None,
        }
    }
}

/// The trace formats this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// MSR Cambridge (`msr`): Windows filetime, bytes, disk number.
    Msr,
    /// Tencent cloud block storage (`tencent`): seconds, 512-byte sectors.
    Tencent,
    /// SYSTOR '17 (`systor`): decimal seconds, bytes, LUN.
    Systor,
    /// CloudPhysics (`cloudphysics`): seconds, sectors and bytes, one volume.
    CloudPhysics,
    /// DiskSim / MQSim ASCII (`disksim`): nanoseconds, 512-byte sectors.
    DiskSim,
    /// fio's `write_iolog` output (versions 2 and 3).
    FioIolog,
    /// `blkparse` default text output.
    Blkparse,
    /// UMass Trace Repository SPC CSV.
    Umass,
    /// FIU SRCMap / IODedup text (`fiu`).
    Fiu,
    /// libCacheSim `oracleGeneral` binary.
    OracleGeneral,
}

impl Format {
    /// Every format, in the order the documentation lists them.
    pub const ALL: [Format; 10] = [
        Format::Msr,
        Format::Tencent,
        Format::Systor,
        Format::CloudPhysics,
        Format::DiskSim,
        Format::FioIolog,
        Format::Blkparse,
        Format::Umass,
        Format::Fiu,
        Format::OracleGeneral,
    ];

    /// The name used in specs (`msr`, `fio-iolog`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::Tencent => "tencent",
            Format::Systor => "systor",
            Format::CloudPhysics => "cloudphysics",
            Format::DiskSim => "disksim",
            Format::FioIolog => "fio-iolog",
            Format::Blkparse => "blkparse",
            Format::Umass => "umass",
            Format::Fiu => "fiu",
            Format::OracleGeneral => "oracle",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = TraceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| TraceError::Spec {
                spec: s.to_string(),
                reason: format!(
                    "unknown format, expected one of: {}",
                    Format::ALL.map(Format::name).join(", ")
                ),
            })
    }
}

/// A boxed stream of requests, as returned by [`open`].
pub type BoxedTrace = Box<dyn Iterator<Item = Result<Request, TraceError>>>;

/// Streaming reader: drives a per-format [`LineParser`] over a [`BufRead`].
pub struct TraceReader<R, P> {
    input: R,
    parser: P,
    src: String,
    line_no: u64,
    buf: String,
    done: bool,
}

impl<R: BufRead, P: LineParser> TraceReader<R, P> {
    /// `src` names the input in errors (a path, or `"<stream>"`).
    pub fn new(input: R, parser: P, src: impl Into<String>) -> Self {
        TraceReader {
            input,
            parser,
            src: src.into(),
            line_no: 0,
            buf: String::new(),
            done: false,
        }
    }

    /// The 1-based number of the last line read.
    pub fn line_no(&self) -> u64 {
        self.line_no
    }
}

impl<R: BufRead, P: LineParser> Iterator for TraceReader<R, P> {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.line_no == 0 && !self.done && starts_with_gzip_magic(&mut self.input) {
            self.done = true;
            return Some(Err(TraceError::Gzip {
                src: self.src.clone(),
            }));
        }
        while !self.done {
            self.buf.clear();
            self.line_no += 1;
            match self.input.read_line(&mut self.buf) {
                Ok(0) => {
                    self.done = true;
                    return None;
                }
                Ok(_) => {}
                Err(err) => {
                    self.done = true;
                    return Some(Err(TraceError::Io {
                        src: self.src.clone(),
                        line: self.line_no,
                        err,
                    }));
                }
            }
            let line = self.buf.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match self.parser.parse_line(line) {
                Ok(Some(req)) => return Some(Ok(req)),
                Ok(None) => continue,
                Err(kind) => {
                    return Some(Err(TraceError::Line {
                        src: self.src.clone(),
                        line: self.line_no,
                        kind,
                    }))
                }
            }
        }
        None
    }
}

/// The two bytes every gzip stream starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Whether `input` starts with [`GZIP_MAGIC`]; consumes nothing. An I/O error
/// here is left for the first read to report.
fn starts_with_gzip_magic(input: &mut impl BufRead) -> bool {
    match input.fill_buf() {
        Ok(b) => b.starts_with(&GZIP_MAGIC),
        Err(_) => false,
    }
}

/// A reader of `format` over any `BufRead`; `src` names it in errors.
pub fn reader<R: BufRead + 'static>(format: Format, input: R, src: &str) -> BoxedTrace {
    match format {
        Format::Msr => Box::new(TraceReader::new(input, Msr::default(), src)),
        Format::Tencent => Box::new(TraceReader::new(input, Tencent, src)),
        Format::Systor => Box::new(TraceReader::new(input, Systor::default(), src)),
        Format::CloudPhysics => Box::new(TraceReader::new(input, CloudPhysics::default(), src)),
        Format::DiskSim => Box::new(TraceReader::new(input, DiskSim, src)),
        Format::FioIolog => Box::new(TraceReader::new(input, FioIolog::default(), src)),
        Format::Blkparse => Box::new(TraceReader::new(input, Blkparse::default(), src)),
        Format::Umass => Box::new(TraceReader::new(input, Umass, src)),
        Format::Fiu => Box::new(TraceReader::new(input, Fiu::default(), src)),
        Format::OracleGeneral => Box::new(OracleReader::new(input, src)),
    }
}

/// Open the file at `path` as a trace of `format`.
pub fn open(format: Format, path: impl AsRef<Path>) -> Result<BoxedTrace, TraceError> {
    let path = path.as_ref();
    let src = path.display().to_string();
    let file = File::open(path).map_err(|err| TraceError::Open {
        src: src.clone(),
        err,
    })?;
    Ok(reader(
        format,
        BufReader::with_capacity(1 << 18, file),
        &src,
    ))
}

/// Split a `FORMAT:PATH` spec, e.g. `msr:/traces/hm_0.csv`.
pub fn parse_spec(spec: &str) -> Result<(Format, PathBuf), TraceError> {
    let (fmt, path) = spec.split_once(':').ok_or_else(|| TraceError::Spec {
        spec: spec.to_string(),
        reason: "expected FORMAT:PATH".to_string(),
    })?;
    if path.is_empty() {
        return Err(TraceError::Spec {
            spec: spec.to_string(),
            reason: "empty path".to_string(),
        });
    }
    let format = fmt.parse::<Format>().map_err(|e| match e {
        TraceError::Spec { reason, .. } => TraceError::Spec {
            spec: spec.to_string(),
            reason,
        },
        other => other,
    })?;
    Ok((format, PathBuf::from(path)))
}

/// Open a trace from a `FORMAT:PATH` spec.
pub fn open_spec(spec: &str) -> Result<BoxedTrace, TraceError> {
    let (format, path) = parse_spec(spec)?;
    open(format, path)
}

/// Summary of a trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Read and write requests.
    pub requests: u64,
    /// Read requests.
    pub reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Number of distinct volume ids.
    pub volumes: usize,
    /// Time of the first request in file order.
    pub first_time_ns: Option<u64>,
    /// Time of the last request in file order.
    pub last_time_ns: Option<u64>,
    /// Smallest time seen (traces are not always sorted).
    pub min_time_ns: Option<u64>,
    /// Largest time seen.
    pub max_time_ns: Option<u64>,
}

/// Summarise a stream of requests; stops at the first error.
pub fn stats<I>(iter: I) -> Result<TraceStats, TraceError>
where
    I: IntoIterator<Item = Result<Request, TraceError>>,
{
    let mut s = TraceStats::default();
    let mut volumes = HashSet::new();
    for r in iter {
        let r = r?;
        s.requests += 1;
        match r.op {
            Op::Read => {
                s.reads += 1;
                s.bytes_read = s.bytes_read.saturating_add(r.len);
            }
            Op::Write => {
                s.writes += 1;
                s.bytes_written = s.bytes_written.saturating_add(r.len);
            }
        }
        volumes.insert(r.volume);
        s.first_time_ns.get_or_insert(r.time_ns);
        s.last_time_ns = Some(r.time_ns);
        s.min_time_ns = Some(s.min_time_ns.map_or(r.time_ns, |m| m.min(r.time_ns)));
        s.max_time_ns = Some(s.max_time_ns.map_or(r.time_ns, |m| m.max(r.time_ns)));
    }
    s.volumes = volumes.len();
    Ok(s)
}
