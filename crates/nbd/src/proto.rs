//! The NBD wire format: constants, and pure, synchronous parsers, validators and
//! encoders.
//!
//! Nothing in this module does I/O or touches a device. The connection code in the
//! rest of the crate reads bytes off the socket and hands them to these functions;
//! the fuzz targets call the very same functions on arbitrary input. Every parser
//! takes a byte slice of any length and returns an error rather than panicking.
//!
//! All integers on the wire are big-endian ("network byte order").

use blockdev::{Alloc, BlockSizes, MapExtent};

// ---------------------------------------------------------------------------------
// Magic numbers
// ---------------------------------------------------------------------------------

/// `NBDMAGIC`: first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle greeting magic, and the magic that starts every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply in fixed newstyle negotiation.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission-phase request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// ---------------------------------------------------------------------------------
// Handshake flags
// ---------------------------------------------------------------------------------

/// Handshake flag: the server speaks fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can omit the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: the client does not want the 124 zero bytes.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// ---------------------------------------------------------------------------------
// Transmission flags
// ---------------------------------------------------------------------------------

/// Transmission flag: always set.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
/// Transmission flag: the export is read-only.
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
/// Transmission flag: `NBD_CMD_FLUSH` is supported.
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
/// Transmission flag: `NBD_CMD_FLAG_FUA` is supported.
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
/// Transmission flag: the medium is rotational.
pub const TFLAG_ROTATIONAL: u16 = 1 << 4;
/// Transmission flag: `NBD_CMD_TRIM` is supported.
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
/// Transmission flag: `NBD_CMD_WRITE_ZEROES` (and `NO_HOLE`) is supported.
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Transmission flag: `NBD_CMD_FLAG_DF` is supported on reads.
pub const TFLAG_SEND_DF: u16 = 1 << 7;
/// Transmission flag: several connections to the export see one consistent cache.
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
/// Transmission flag: `NBD_CMD_CACHE` is understood.
pub const TFLAG_SEND_CACHE: u16 = 1 << 10;
/// Transmission flag: `NBD_CMD_FLAG_FAST_ZERO` is understood (a zeroing that
/// would cost as much as writing the zeros fails at once with `ENOTSUP`).
pub const TFLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// ---------------------------------------------------------------------------------
// Options and option replies
// ---------------------------------------------------------------------------------

/// Option: choose an export and enter transmission (no error reply possible).
pub const OPT_EXPORT_NAME: u32 = 1;
/// Option: end the negotiation.
pub const OPT_ABORT: u32 = 2;
/// Option: list the exports.
pub const OPT_LIST: u32 = 3;
/// Option: upgrade the connection to TLS.
pub const OPT_STARTTLS: u32 = 5;
/// Option: describe an export.
pub const OPT_INFO: u32 = 6;
/// Option: describe an export and enter transmission.
pub const OPT_GO: u32 = 7;
/// Option: use structured replies in transmission.
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// Option: list metadata contexts (this server has one: `base:allocation`).
pub const OPT_LIST_META_CONTEXT: u32 = 9;
/// Option: select metadata contexts for `NBD_CMD_BLOCK_STATUS`.
pub const OPT_SET_META_CONTEXT: u32 = 10;

/// Option reply: success, or end of a list.
pub const REP_ACK: u32 = 1;
/// Option reply: one export of an `NBD_OPT_LIST`.
pub const REP_SERVER: u32 = 2;
/// Option reply: one item of information for `NBD_OPT_INFO` / `NBD_OPT_GO`.
pub const REP_INFO: u32 = 3;
/// Option reply: one metadata context of a list or a selection.
pub const REP_META_CONTEXT: u32 = 4;
/// Option reply error: the option is not supported.
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
/// Option reply error: refused by policy.
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
/// Option reply error: the option's data is malformed.
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
/// Option reply error: the export does not exist.
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
/// `NBD_REP_ERR_TLS_REQD`: the server requires TLS before this option.
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
/// Option reply error: the server is shutting down.
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;

/// Information type: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;
/// Information type: canonical export name.
pub const INFO_NAME: u16 = 1;
/// Information type: human-readable description.
pub const INFO_DESCRIPTION: u16 = 2;
/// Information type: block size constraints.
pub const INFO_BLOCK_SIZE: u16 = 3;

// ---------------------------------------------------------------------------------
// Commands, command flags, reply types, errors
// ---------------------------------------------------------------------------------

/// Command: read.
pub const CMD_READ: u16 = 0;
/// Command: write (followed by the payload).
pub const CMD_WRITE: u16 = 1;
/// Command: soft disconnect.
pub const CMD_DISC: u16 = 2;
/// Command: flush.
pub const CMD_FLUSH: u16 = 3;
/// Command: trim (discard).
pub const CMD_TRIM: u16 = 4;
/// Command: cache (prefetch hint).
pub const CMD_CACHE: u16 = 5;
/// Command: write zeroes.
pub const CMD_WRITE_ZEROES: u16 = 6;
/// Command: block status of a range, for the negotiated metadata contexts.
pub const CMD_BLOCK_STATUS: u16 = 7;

/// Command flag: force unit access.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag: write zeroes must not punch a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Command flag: do not fragment the structured read reply.
pub const CMD_FLAG_DF: u16 = 1 << 2;
/// Command flag: block status of one extent only.
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
/// Command flag: write zeroes only if that is much faster than writing them,
/// else fail at once with `ENOTSUP`.
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// Structured reply flag: last chunk of the reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// Structured reply type: no payload (final chunk).
pub const REPLY_TYPE_NONE: u16 = 0;
/// Structured reply type: data at an offset.
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// Structured reply type: block status descriptors of one metadata context.
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
/// Structured reply type: error with a message.
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

/// Operation not permitted (write to a read-only export).
pub const EPERM: u32 = 1;
/// Input/output error.
pub const EIO: u32 = 5;
/// Invalid argument.
pub const EINVAL: u32 = 22;
/// No space left on the device.
pub const ENOSPC: u32 = 28;
/// Value too large (a read longer than the maximum payload).
pub const EOVERFLOW: u32 = 75;
/// Not supported (a fast zero the export cannot do fast).
pub const ENOTSUP: u32 = 95;
/// The server is shutting down.
pub const ESHUTDOWN: u32 = 108;

// ---------------------------------------------------------------------------------
// Metadata contexts
// ---------------------------------------------------------------------------------

/// The one metadata context this server offers: holes and zeroes.
pub const META_BASE_ALLOCATION: &str = "base:allocation";
/// The context ID this server gives `base:allocation` when it is selected.
pub const META_BASE_ALLOCATION_ID: u32 = 1;
/// `base:allocation` state bit: the extent is not allocated (a hole).
pub const STATE_HOLE: u32 = 1 << 0;
/// `base:allocation` state bit: the extent reads as zeroes.
pub const STATE_ZERO: u32 = 1 << 1;
/// Most descriptors one block status reply carries (512 KiB of them); a map
/// with more is answered for its first part, as the protocol allows.
pub const MAX_STATUS_DESCRIPTORS: usize = 64 * 1024;

// ---------------------------------------------------------------------------------
// Sizes and limits
// ---------------------------------------------------------------------------------

/// Length of the server's initial greeting (magic, magic, handshake flags).
pub const GREETING_LEN: usize = 18;
/// Length of an option header (magic, option, length).
pub const OPTION_HEADER_LEN: usize = 16;
/// Length of a transmission request header.
pub const REQUEST_HEADER_LEN: usize = 28;
/// Length of a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Length of a structured reply chunk header.
pub const STRUCTURED_HEADER_LEN: usize = 20;
/// Longest option payload the server accepts; a longer one ends the connection
/// (a client that sends that much during the handshake is hostile or broken).
pub const MAX_OPTION_LEN: u32 = 64 * 1024;
/// Longest string (export name, message) the protocol allows.
pub const MAX_STRING_LEN: usize = 4096;

// ---------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------

/// A violation of the protocol that leaves the connection unusable: the server
/// answers it by closing the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// Fewer bytes than the message needs.
    #[error("message truncated: need {need} bytes, got {got}")]
    Truncated {
        /// Bytes the message needs.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// A message did not start with the magic number the protocol requires there.
    #[error("bad magic number {0:#x}")]
    BadMagic(u64),
    /// The client set client flags this server does not know.
    #[error("unknown client flags {0:#x}")]
    BadClientFlags(u32),
    /// An option carries more data than [`MAX_OPTION_LEN`].
    #[error("option {option} carries {len} bytes, more than the {MAX_OPTION_LEN}-byte limit")]
    OptionTooLong {
        /// The option number.
        option: u32,
        /// Its announced data length.
        len: u32,
    },
    /// A write announces a payload larger than the server's maximum: its bytes
    /// cannot be trusted to be a payload, so the stream cannot be resynchronised.
    #[error("write payload of {len} bytes exceeds the {max}-byte maximum")]
    PayloadTooLarge {
        /// Announced payload length.
        len: u32,
        /// The server's maximum payload.
        max: u32,
    },
}

/// Why an option's data is malformed (answered with `NBD_REP_ERR_INVALID`; the
/// negotiation goes on).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid option data: {0}")]
pub struct InvalidOption(pub &'static str);

// ---------------------------------------------------------------------------------
// Small big-endian helpers (slices are length-checked by the callers)
// ---------------------------------------------------------------------------------

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

fn need(b: &[u8], n: usize) -> Result<(), ProtoError> {
    if b.len() < n {
        Err(ProtoError::Truncated {
            need: n,
            got: b.len(),
        })
    } else {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Handshake
// ---------------------------------------------------------------------------------

/// The server's greeting: `NBDMAGIC`, `IHAVEOPT`, and the handshake flags
/// (fixed newstyle, no zeroes).
pub fn greeting() -> [u8; GREETING_LEN] {
    let mut g = [0u8; GREETING_LEN];
    g[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    g[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    g[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    g
}

/// What the client said in its 32-bit flags word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags {
    /// The client speaks fixed newstyle.
    pub fixed_newstyle: bool,
    /// The client does not want the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
    pub no_zeroes: bool,
}

/// Parses the client flags. The protocol requires the server to drop a client
/// that sets a flag the server does not know.
pub fn parse_client_flags(raw: u32) -> Result<ClientFlags, ProtoError> {
    if raw & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(ProtoError::BadClientFlags(raw));
    }
    Ok(ClientFlags {
        fixed_newstyle: raw & FLAG_C_FIXED_NEWSTYLE != 0,
        no_zeroes: raw & FLAG_C_NO_ZEROES != 0,
    })
}

/// The 16-byte header of a client option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// The option number (`OPT_*`).
    pub option: u32,
    /// Length of the data that follows.
    pub length: u32,
}

/// Parses an option header: checks the `IHAVEOPT` magic and the length limit.
pub fn parse_option_header(b: &[u8]) -> Result<OptionHeader, ProtoError> {
    need(b, OPTION_HEADER_LEN)?;
    let magic = be64(b, 0);
    if magic != IHAVEOPT {
        return Err(ProtoError::BadMagic(magic));
    }
    let option = be32(b, 8);
    let length = be32(b, 12);
    if length > MAX_OPTION_LEN {
        return Err(ProtoError::OptionTooLong {
            option,
            len: length,
        });
    }
    Ok(OptionHeader { option, length })
}

/// The data of an `NBD_OPT_INFO` or `NBD_OPT_GO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// The export name ("" for the default export).
    pub name: String,
    /// The information types the client asked for (`INFO_*`), possibly unknown ones.
    pub requests: Vec<u16>,
}

impl InfoRequest {
    /// Whether the client asked for information type `info`.
    pub fn wants(&self, info: u16) -> bool {
        self.requests.contains(&info)
    }
}

fn parse_name(b: &[u8]) -> Result<String, InvalidOption> {
    if b.len() > MAX_STRING_LEN {
        return Err(InvalidOption("export name longer than 4096 bytes"));
    }
    let s = std::str::from_utf8(b).map_err(|_| InvalidOption("export name is not UTF-8"))?;
    if s.contains('\0') {
        return Err(InvalidOption("export name contains NUL"));
    }
    Ok(s.to_owned())
}

/// Parses the data of `NBD_OPT_INFO` / `NBD_OPT_GO`: a 32-bit name length, the
/// name, a 16-bit request count and that many 16-bit information types, with no
/// bytes left over.
pub fn parse_info_request(data: &[u8]) -> Result<InfoRequest, InvalidOption> {
    if data.len() < 6 {
        return Err(InvalidOption("shorter than 6 bytes"));
    }
    let name_len = be32(data, 0) as usize;
    if name_len > data.len() - 6 {
        return Err(InvalidOption("name length reaches past the option data"));
    }
    let name = parse_name(&data[4..4 + name_len])?;
    let at = 4 + name_len;
    let n = be16(data, at) as usize;
    let rest = &data[at + 2..];
    if rest.len() != 2 * n {
        return Err(InvalidOption(
            "information request count does not match the length",
        ));
    }
    let requests = rest
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    Ok(InfoRequest { name, requests })
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRequest {
    /// The export the contexts are for.
    pub name: String,
    /// The queries (context names or, for a list, namespaces such as `base:`).
    pub queries: Vec<String>,
}

/// Parses the data of a meta context option: a 32-bit export name length, the
/// name, a 32-bit query count, and that many (32-bit length, string) queries,
/// with no bytes left over.
pub fn parse_meta_request(data: &[u8]) -> Result<MetaRequest, InvalidOption> {
    if data.len() < 8 {
        return Err(InvalidOption("shorter than 8 bytes"));
    }
    let name_len = be32(data, 0) as usize;
    if name_len > data.len() - 8 {
        return Err(InvalidOption("name length reaches past the option data"));
    }
    let name = parse_name(&data[4..4 + name_len])?;
    let mut at = 4 + name_len;
    let n = be32(data, at) as usize;
    at += 4;
    // Each query takes at least its 4-byte length: a count the data cannot
    // hold is refused before anything is allocated for it.
    if n > (data.len() - at) / 4 {
        return Err(InvalidOption("query count does not match the length"));
    }
    let mut queries = Vec::with_capacity(n);
    for _ in 0..n {
        if data.len() - at < 4 {
            return Err(InvalidOption("query count does not match the length"));
        }
        let len = be32(data, at) as usize;
        at += 4;
        if len > data.len() - at {
            return Err(InvalidOption("query length reaches past the option data"));
        }
        if len > MAX_STRING_LEN {
            return Err(InvalidOption("query longer than 4096 bytes"));
        }
        let q = std::str::from_utf8(&data[at..at + len])
            .map_err(|_| InvalidOption("query is not UTF-8"))?;
        if q.contains('\0') {
            return Err(InvalidOption("query contains NUL"));
        }
        queries.push(q.to_owned());
        at += len;
    }
    if at != data.len() {
        return Err(InvalidOption("bytes left over after the queries"));
    }
    // A context is answered once however often it is asked for.
    let mut seen = std::collections::HashSet::new();
    queries.retain(|q| seen.insert(q.clone()));
    Ok(MetaRequest { name, queries })
}

/// Whether a meta context request names `base:allocation`: for a list, no
/// query at all (list everything), `base:` (the whole namespace) or the name;
/// for a selection, the exact name only. Other namespaces match nothing here.
pub fn wants_base_allocation(queries: &[String], list: bool) -> bool {
    if list && queries.is_empty() {
        return true;
    }
    queries
        .iter()
        .any(|q| q == META_BASE_ALLOCATION || (list && q == "base:"))
}

/// Appends an `NBD_REP_META_CONTEXT` reply naming context `id`.
pub fn put_meta_context(out: &mut Vec<u8>, option: u32, id: u32, name: &str) {
    let mut data = Vec::with_capacity(4 + name.len());
    data.extend_from_slice(&id.to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    put_option_reply(out, option, REP_META_CONTEXT, &data);
}

/// One client option, decoded and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOption {
    /// `NBD_OPT_EXPORT_NAME` with its export name.
    ExportName(String),
    /// `NBD_OPT_EXPORT_NAME` whose name is not a valid string: the server cannot
    /// answer it with an error, so it must hang up.
    BadExportName,
    /// `NBD_OPT_ABORT`.
    Abort,
    /// `NBD_OPT_LIST`.
    List,
    /// `NBD_OPT_INFO`.
    Info(InfoRequest),
    /// `NBD_OPT_GO`.
    Go(InfoRequest),
    /// `NBD_OPT_STRUCTURED_REPLY`.
    StructuredReply,
    /// `NBD_OPT_STARTTLS`: upgrade the connection to TLS.
    StartTls,
    /// `NBD_OPT_LIST_META_CONTEXT`.
    ListMetaContext(MetaRequest),
    /// `NBD_OPT_SET_META_CONTEXT`.
    SetMetaContext(MetaRequest),
    /// A known option whose data is malformed: answer `NBD_REP_ERR_INVALID`.
    Invalid {
        /// The option number.
        option: u32,
        /// What is wrong.
        reason: InvalidOption,
    },
    /// An option this server does not implement: answer `NBD_REP_ERR_UNSUP`.
    Unsupported(u32),
}

/// Decodes an option given its number and its (already length-limited) data.
pub fn parse_option(option: u32, data: &[u8]) -> ClientOption {
    let invalid = |reason| ClientOption::Invalid { option, reason };
    match option {
        OPT_EXPORT_NAME => match parse_name(data) {
            Ok(name) => ClientOption::ExportName(name),
            Err(_) => ClientOption::BadExportName,
        },
        // The spec asks servers to ignore data sent with NBD_OPT_ABORT.
        OPT_ABORT => ClientOption::Abort,
        OPT_LIST if data.is_empty() => ClientOption::List,
        OPT_LIST => invalid(InvalidOption("NBD_OPT_LIST carries data")),
        OPT_INFO | OPT_GO => match parse_info_request(data) {
            Ok(req) if option == OPT_INFO => ClientOption::Info(req),
            Ok(req) => ClientOption::Go(req),
            Err(reason) => invalid(reason),
        },
        OPT_STRUCTURED_REPLY if data.is_empty() => ClientOption::StructuredReply,
        OPT_STARTTLS if data.is_empty() => ClientOption::StartTls,
        OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => match parse_meta_request(data) {
            Ok(req) if option == OPT_LIST_META_CONTEXT => ClientOption::ListMetaContext(req),
            Ok(req) => ClientOption::SetMetaContext(req),
            Err(reason) => invalid(reason),
        },
        OPT_STARTTLS => invalid(InvalidOption("NBD_OPT_STARTTLS carries data")),
        OPT_STRUCTURED_REPLY => invalid(InvalidOption("NBD_OPT_STRUCTURED_REPLY carries data")),
        other => ClientOption::Unsupported(other),
    }
}

/// Appends one option reply (header and data) to `out`.
pub fn put_option_reply(out: &mut Vec<u8>, option: u32, reply: u32, data: &[u8]) {
    out.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// Appends an `NBD_REP_SERVER` reply for one export of an `NBD_OPT_LIST`.
pub fn put_list_entry(out: &mut Vec<u8>, name: &str, description: &str) {
    let name = truncate_str(name, MAX_STRING_LEN);
    let description = truncate_str(description, MAX_STRING_LEN);
    let mut data = Vec::with_capacity(4 + name.len() + description.len());
    data.extend_from_slice(&(name.len() as u32).to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(description.as_bytes());
    put_option_reply(out, OPT_LIST, REP_SERVER, &data);
}

/// The reply to `NBD_OPT_EXPORT_NAME`: size, transmission flags and, unless the
/// client negotiated no-zeroes, 124 zero bytes.
pub fn export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut v = Vec::with_capacity(134);
    v.extend_from_slice(&size.to_be_bytes());
    v.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        v.resize(v.len() + 124, 0);
    }
    v
}

/// Data of an `NBD_REP_INFO` reply of type `NBD_INFO_EXPORT`.
pub fn info_export(size: u64, flags: u16) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0..2].copy_from_slice(&INFO_EXPORT.to_be_bytes());
    b[2..10].copy_from_slice(&size.to_be_bytes());
    b[10..12].copy_from_slice(&flags.to_be_bytes());
    b
}

/// Data of an `NBD_REP_INFO` reply of type `NBD_INFO_BLOCK_SIZE`.
pub fn info_block_size(bs: BlockSizes) -> [u8; 14] {
    let mut b = [0u8; 14];
    b[0..2].copy_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    b[2..6].copy_from_slice(&bs.minimum.to_be_bytes());
    b[6..10].copy_from_slice(&bs.preferred.to_be_bytes());
    b[10..14].copy_from_slice(&bs.maximum.to_be_bytes());
    b
}

/// Data of an `NBD_REP_INFO` reply carrying a string (`NBD_INFO_NAME`,
/// `NBD_INFO_DESCRIPTION`).
pub fn info_string(info: u16, s: &str) -> Vec<u8> {
    let s = truncate_str(s, MAX_STRING_LEN);
    let mut v = Vec::with_capacity(2 + s.len());
    v.extend_from_slice(&info.to_be_bytes());
    v.extend_from_slice(s.as_bytes());
    v
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The block size constraints to advertise for a device, made to follow the
/// protocol's rules whatever the device reports: the minimum is a power of two
/// no larger than 64 KiB, the preferred size a power of two of at least
/// max(minimum, 512), and the maximum is capped by `max_payload`, a multiple of
/// the minimum, and at least the preferred size where `max_payload` allows.
pub fn effective_block_sizes(dev: BlockSizes, max_payload: u32) -> BlockSizes {
    let minimum = dev.minimum.clamp(1, 1 << 16).next_power_of_two();
    let preferred = dev
        .preferred
        .max(minimum)
        .clamp(512, 1 << 30)
        .next_power_of_two();
    let mut maximum = dev.maximum.min(max_payload).max(minimum);
    maximum -= maximum % minimum;
    if maximum < preferred && preferred <= max_payload {
        maximum = preferred;
    }
    let preferred = if preferred > maximum {
        // max_payload is tiny: the largest power of two that still fits.
        (1u32 << (31 - maximum.leading_zeros())).max(minimum)
    } else {
        preferred
    };
    BlockSizes {
        minimum,
        preferred,
        maximum,
    }
}

// ---------------------------------------------------------------------------------
// Transmission
// ---------------------------------------------------------------------------------

/// The 28-byte header of a transmission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags (`CMD_FLAG_*`).
    pub flags: u16,
    /// Command type (`CMD_*`).
    pub kind: u16,
    /// Opaque cookie ("handle") the reply must echo.
    pub cookie: u64,
    /// Byte offset in the export.
    pub offset: u64,
    /// Length in bytes (of the payload for a write).
    pub length: u32,
}

/// Parses a request header: checks the magic and decodes the fields.
pub fn parse_request(b: &[u8]) -> Result<RequestHeader, ProtoError> {
    need(b, REQUEST_HEADER_LEN)?;
    let magic = be32(b, 0);
    if magic != REQUEST_MAGIC {
        return Err(ProtoError::BadMagic(u64::from(magic)));
    }
    Ok(RequestHeader {
        flags: be16(b, 4),
        kind: be16(b, 6),
        cookie: be64(b, 8),
        offset: be64(b, 16),
        length: be32(b, 24),
    })
}

/// Encodes a request header (for clients and tests).
pub fn encode_request(h: &RequestHeader) -> [u8; REQUEST_HEADER_LEN] {
    let mut b = [0u8; REQUEST_HEADER_LEN];
    b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&h.flags.to_be_bytes());
    b[6..8].copy_from_slice(&h.kind.to_be_bytes());
    b[8..16].copy_from_slice(&h.cookie.to_be_bytes());
    b[16..24].copy_from_slice(&h.offset.to_be_bytes());
    b[24..28].copy_from_slice(&h.length.to_be_bytes());
    b
}

/// What the server knows about the export and the session when it judges a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Export size in bytes.
    pub size: u64,
    /// Advertised block sizes (see [`effective_block_sizes`]); offsets and lengths
    /// must be multiples of `minimum`, and reads and writes at most `maximum` long.
    pub block: BlockSizes,
    /// Largest read or write payload the server will handle at all.
    pub max_payload: u32,
    /// Whether the export refuses writes.
    pub read_only: bool,
    /// Whether structured replies were negotiated.
    pub structured: bool,
    /// Whether `base:allocation` was selected for this export (so
    /// `NBD_CMD_BLOCK_STATUS` may be sent).
    pub block_status: bool,
    /// Whether the export zeroes without writing (`BlockDev::fast_zero`): a
    /// write zeroes with `NBD_CMD_FLAG_FAST_ZERO` runs, else it fails with
    /// `ENOTSUP`.
    pub fast_zero: bool,
}

/// What to do with a request, decided from its header alone.
///
/// Every variant that touches the device carries a range that [`classify`] has
/// checked to lie within the export: `offset + len <= size`, without overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Read `len` bytes at `offset`.
    Read {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        len: u32,
    },
    /// Read the `len`-byte payload, then write it at `offset`.
    Write {
        /// Byte offset.
        offset: u64,
        /// Payload length in bytes.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Flush.
    Flush,
    /// Trim `len` bytes at `offset`.
    Trim {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Zero `len` bytes at `offset`.
    WriteZeroes {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        len: u32,
        /// Force unit access.
        fua: bool,
        /// The client asked that no hole be punched.
        no_hole: bool,
    },
    /// Block status (`base:allocation`) of `len` bytes at `offset`.
    BlockStatus {
        /// Byte offset.
        offset: u64,
        /// Length in bytes (never zero).
        len: u32,
        /// The client wants one extent only.
        req_one: bool,
    },
    /// Cache hint for `len` bytes at `offset` (validated, then acknowledged).
    Cache {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        len: u32,
    },
    /// Soft disconnect: finish what is in flight, then close.
    Disconnect,
    /// Answer with error `errno`, after discarding `skip` payload bytes (non-zero
    /// only for a write whose payload has to be consumed to stay in sync).
    Reject {
        /// The NBD error value.
        errno: u32,
        /// Payload bytes to read and discard first.
        skip: u32,
    },
    /// Close the connection: the stream cannot be trusted any more.
    HangUp(ProtoError),
}

fn in_range(offset: u64, len: u32, size: u64) -> bool {
    matches!(offset.checked_add(u64::from(len)), Some(end) if end <= size)
}

fn aligned(offset: u64, len: u32, min: u32) -> bool {
    let m = u64::from(min.max(1));
    offset.is_multiple_of(m) && u64::from(len).is_multiple_of(m)
}

/// Judges a request header against the export's limits. This is the single place
/// where the server decides whether a request may touch the device.
pub fn classify(h: &RequestHeader, l: &Limits) -> Decision {
    let (offset, len) = (h.offset, h.length);
    let fua = h.flags & CMD_FLAG_FUA != 0;
    let reject = |errno| Decision::Reject { errno, skip: 0 };
    match h.kind {
        CMD_WRITE => {
            if len > l.max_payload {
                return Decision::HangUp(ProtoError::PayloadTooLarge {
                    len,
                    max: l.max_payload,
                });
            }
            let reject = |errno| Decision::Reject { errno, skip: len };
            if h.flags & !CMD_FLAG_FUA != 0 {
                reject(EINVAL)
            } else if l.read_only {
                reject(EPERM)
            } else if !in_range(offset, len, l.size)
                || len > l.block.maximum
                || !aligned(offset, len, l.block.minimum)
            {
                reject(EINVAL)
            } else {
                Decision::Write { offset, len, fua }
            }
        }
        CMD_READ => {
            let allowed = CMD_FLAG_FUA | if l.structured { CMD_FLAG_DF } else { 0 };
            if h.flags & !allowed != 0 {
                reject(EINVAL)
            } else if len > l.max_payload {
                reject(EOVERFLOW)
            } else if !in_range(offset, len, l.size)
                || len > l.block.maximum
                || !aligned(offset, len, l.block.minimum)
            {
                reject(EINVAL)
            } else {
                Decision::Read { offset, len }
            }
        }
        CMD_DISC => Decision::Disconnect,
        CMD_FLUSH => {
            if h.flags & !CMD_FLAG_FUA != 0 {
                reject(EINVAL)
            } else {
                Decision::Flush
            }
        }
        CMD_TRIM | CMD_WRITE_ZEROES | CMD_CACHE => {
            let allowed = match h.kind {
                CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
                _ => CMD_FLAG_FUA,
            };
            if h.flags & !allowed != 0 {
                reject(EINVAL)
            } else if l.read_only && h.kind != CMD_CACHE {
                reject(EPERM)
            } else if !in_range(offset, len, l.size) || !aligned(offset, len, l.block.minimum) {
                reject(EINVAL)
            } else if h.flags & CMD_FLAG_FAST_ZERO != 0 && !l.fast_zero {
                // The spec's "fail quickly": nothing is touched, and the
                // client writes its zeros itself.
                reject(ENOTSUP)
            } else {
                match h.kind {
                    CMD_TRIM => Decision::Trim { offset, len, fua },
                    CMD_CACHE => Decision::Cache { offset, len },
                    _ => Decision::WriteZeroes {
                        offset,
                        len,
                        fua,
                        no_hole: h.flags & CMD_FLAG_NO_HOLE != 0,
                    },
                }
            }
        }
        CMD_BLOCK_STATUS => {
            // Without a selected context the spec asks for EINVAL; a zero
            // length asks about nothing.
            if h.flags & !(CMD_FLAG_FUA | CMD_FLAG_REQ_ONE) != 0
                || !l.block_status
                || len == 0
                || !in_range(offset, len, l.size)
                || !aligned(offset, len, l.block.minimum)
            {
                reject(EINVAL)
            } else {
                Decision::BlockStatus {
                    offset,
                    len,
                    req_one: h.flags & CMD_FLAG_REQ_ONE != 0,
                }
            }
        }
        _ => reject(EINVAL),
    }
}

/// A simple reply header (no payload follows unless it answers a successful read).
pub fn simple_reply(cookie: u64, error: u32) -> [u8; SIMPLE_REPLY_LEN] {
    let mut b = [0u8; SIMPLE_REPLY_LEN];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured reply chunk header announcing `length` payload bytes.
pub fn structured_header(
    flags: u16,
    kind: u16,
    cookie: u64,
    length: u32,
) -> [u8; STRUCTURED_HEADER_LEN] {
    let mut b = [0u8; STRUCTURED_HEADER_LEN];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&length.to_be_bytes());
    b
}

/// The `base:allocation` descriptors (length, state) of a block status reply
/// for a `len`-byte request, from a device's allocation map: holes are
/// `STATE_HOLE | STATE_ZERO`, data 0. Clipped to `len`, at most
/// [`MAX_STATUS_DESCRIPTORS`] (one with `req_one`), zero-length extents
/// dropped; never empty (an empty map becomes one data extent, which is
/// always a true answer).
pub fn status_descriptors(map: &[MapExtent], len: u32, req_one: bool) -> Vec<(u32, u32)> {
    let most = if req_one { 1 } else { MAX_STATUS_DESCRIPTORS };
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut left = u64::from(len);
    for e in map {
        if left == 0 {
            break;
        }
        let n = e.len.min(left);
        if n == 0 {
            continue;
        }
        let state = match e.alloc {
            Alloc::Hole => STATE_HOLE | STATE_ZERO,
            Alloc::Data => 0,
        };
        left -= n;
        let full = out.len() == most;
        match out.last_mut() {
            Some(last) if last.1 == state => last.0 += n as u32,
            _ if full => break,
            _ => out.push((n as u32, state)),
        }
    }
    if out.is_empty() {
        out.push((len, 0));
    }
    out
}

/// Length of a block status reply chunk with `n` descriptors.
pub fn block_status_len(n: usize) -> usize {
    STRUCTURED_HEADER_LEN + 4 + 8 * n
}

/// Writes a final `NBD_REPLY_TYPE_BLOCK_STATUS` chunk for context `context`
/// into `out`, which must be exactly [`block_status_len`]`(descs.len())` long.
pub fn write_block_status(out: &mut [u8], cookie: u64, context: u32, descs: &[(u32, u32)]) {
    out[..STRUCTURED_HEADER_LEN].copy_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        cookie,
        (4 + 8 * descs.len()) as u32,
    ));
    let p = &mut out[STRUCTURED_HEADER_LEN..];
    p[0..4].copy_from_slice(&context.to_be_bytes());
    for (i, (len, state)) in descs.iter().enumerate() {
        let d = &mut p[4 + 8 * i..12 + 8 * i];
        d[0..4].copy_from_slice(&len.to_be_bytes());
        d[4..8].copy_from_slice(&state.to_be_bytes());
    }
}

/// Length of a final `NBD_REPLY_TYPE_ERROR` chunk carrying `msg` (truncated to
/// [`MAX_STRING_LEN`]).
pub fn structured_error_len(msg: &str) -> usize {
    STRUCTURED_HEADER_LEN + 6 + truncate_str(msg, MAX_STRING_LEN).len()
}

/// Writes a final `NBD_REPLY_TYPE_ERROR` chunk into `out`, which must be exactly
/// [`structured_error_len`]`(msg)` bytes long.
pub fn write_structured_error(out: &mut [u8], cookie: u64, errno: u32, msg: &str) {
    let msg = truncate_str(msg, MAX_STRING_LEN);
    let payload = 6 + msg.len();
    out[..STRUCTURED_HEADER_LEN].copy_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        cookie,
        payload as u32,
    ));
    let p = &mut out[STRUCTURED_HEADER_LEN..];
    p[0..4].copy_from_slice(&errno.to_be_bytes());
    p[4..6].copy_from_slice(&(msg.len() as u16).to_be_bytes());
    p[6..6 + msg.len()].copy_from_slice(msg.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            size: 1 << 20,
            block: BlockSizes {
                minimum: 1,
                preferred: 4096,
                maximum: 65536,
            },
            max_payload: 1 << 17,
            read_only: false,
            structured: false,
            block_status: false,
            fast_zero: true,
        }
    }

    fn req(kind: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
        RequestHeader {
            flags,
            kind,
            cookie: 7,
            offset,
            length,
        }
    }

    #[test]
    fn request_roundtrip_and_bad_magic() {
        let h = req(CMD_WRITE, CMD_FLAG_FUA, 0x1122_3344_5566_7788, 0xdead_beef);
        let b = encode_request(&h);
        assert_eq!(parse_request(&b), Ok(h));
        let mut bad = b;
        bad[0] ^= 1;
        assert!(matches!(parse_request(&bad), Err(ProtoError::BadMagic(_))));
        assert_eq!(
            parse_request(&b[..27]),
            Err(ProtoError::Truncated { need: 28, got: 27 })
        );
    }

    #[test]
    fn option_header_checks_magic_and_length() {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        b[8..12].copy_from_slice(&OPT_GO.to_be_bytes());
        b[12..16].copy_from_slice(&10u32.to_be_bytes());
        assert_eq!(
            parse_option_header(&b),
            Ok(OptionHeader {
                option: OPT_GO,
                length: 10
            })
        );
        b[12..16].copy_from_slice(&(MAX_OPTION_LEN + 1).to_be_bytes());
        assert!(matches!(
            parse_option_header(&b),
            Err(ProtoError::OptionTooLong { .. })
        ));
        b[0] = 0;
        assert!(matches!(
            parse_option_header(&b),
            Err(ProtoError::BadMagic(_))
        ));
        assert!(matches!(
            parse_option_header(&b[..3]),
            Err(ProtoError::Truncated { .. })
        ));
    }

    #[test]
    fn client_flags() {
        assert_eq!(
            parse_client_flags(3),
            Ok(ClientFlags {
                fixed_newstyle: true,
                no_zeroes: true
            })
        );
        assert_eq!(
            parse_client_flags(0),
            Ok(ClientFlags {
                fixed_newstyle: false,
                no_zeroes: false
            })
        );
        assert_eq!(parse_client_flags(4), Err(ProtoError::BadClientFlags(4)));
    }

    fn info_data(name: &[u8], reqs: &[u16]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name);
        d.extend_from_slice(&(reqs.len() as u16).to_be_bytes());
        for r in reqs {
            d.extend_from_slice(&r.to_be_bytes());
        }
        d
    }

    #[test]
    fn info_request_parsing() {
        let d = info_data(b"disk", &[INFO_BLOCK_SIZE, INFO_NAME]);
        let r = parse_info_request(&d).unwrap();
        assert_eq!(r.name, "disk");
        assert!(r.wants(INFO_BLOCK_SIZE) && r.wants(INFO_NAME) && !r.wants(INFO_DESCRIPTION));
        // Too short, name too long for the data, count mismatch, trailing byte.
        assert!(parse_info_request(&d[..5]).is_err());
        let mut long = d.clone();
        long[0..4].copy_from_slice(&100u32.to_be_bytes());
        assert!(parse_info_request(&long).is_err());
        let mut extra = d.clone();
        extra.push(0);
        assert!(parse_info_request(&extra).is_err());
        let mut short = d.clone();
        short.pop();
        assert!(parse_info_request(&short).is_err());
        // u32::MAX name length must not overflow.
        let mut huge = d;
        huge[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_info_request(&huge).is_err());
        assert!(parse_info_request(&info_data(&[0xff, 0xfe], &[])).is_err());
    }

    #[test]
    fn option_decoding() {
        assert_eq!(parse_option(OPT_LIST, &[]), ClientOption::List);
        assert!(matches!(
            parse_option(OPT_LIST, &[1]),
            ClientOption::Invalid { .. }
        ));
        assert_eq!(parse_option(OPT_ABORT, &[1, 2]), ClientOption::Abort);
        assert_eq!(
            parse_option(OPT_STRUCTURED_REPLY, &[]),
            ClientOption::StructuredReply
        );
        assert!(matches!(
            parse_option(OPT_STRUCTURED_REPLY, &[0]),
            ClientOption::Invalid { .. }
        ));
        assert_eq!(
            parse_option(OPT_EXPORT_NAME, b"x"),
            ClientOption::ExportName("x".into())
        );
        assert_eq!(
            parse_option(OPT_EXPORT_NAME, &[0xff]),
            ClientOption::BadExportName
        );
        assert_eq!(parse_option(OPT_STARTTLS, &[]), ClientOption::StartTls);
        assert_eq!(
            parse_option(999, &[1, 2, 3]),
            ClientOption::Unsupported(999)
        );
        assert!(matches!(
            parse_option(OPT_GO, &info_data(b"", &[])),
            ClientOption::Go(_)
        ));
        assert!(matches!(
            parse_option(OPT_INFO, &info_data(b"", &[])),
            ClientOption::Info(_)
        ));
    }

    #[test]
    fn classify_range_and_overflow() {
        let l = limits();
        assert_eq!(
            classify(&req(CMD_READ, 0, 0, 4096), &l),
            Decision::Read {
                offset: 0,
                len: 4096
            }
        );
        assert_eq!(
            classify(&req(CMD_READ, 0, (1 << 20) - 4096, 4096), &l),
            Decision::Read {
                offset: (1 << 20) - 4096,
                len: 4096
            }
        );
        assert_eq!(
            classify(&req(CMD_READ, 0, (1 << 20) - 4095, 4096), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 0
            }
        );
        assert_eq!(
            classify(&req(CMD_READ, 0, u64::MAX, 2), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 0
            }
        );
        // Longer than the payload limit: EOVERFLOW; longer than the advertised
        // maximum block but within the payload limit: EINVAL.
        assert_eq!(
            classify(&req(CMD_READ, 0, 0, (1 << 17) + 1), &l),
            Decision::Reject {
                errno: EOVERFLOW,
                skip: 0
            }
        );
        assert_eq!(
            classify(&req(CMD_READ, 0, 0, 65537), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 0
            }
        );
    }

    #[test]
    fn classify_writes() {
        let mut l = limits();
        assert_eq!(
            classify(&req(CMD_WRITE, CMD_FLAG_FUA, 8, 16), &l),
            Decision::Write {
                offset: 8,
                len: 16,
                fua: true
            }
        );
        assert_eq!(
            classify(&req(CMD_WRITE, 0, 1 << 20, 16), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 16
            }
        );
        assert_eq!(
            classify(&req(CMD_WRITE, CMD_FLAG_DF, 0, 16), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 16
            }
        );
        assert!(matches!(
            classify(&req(CMD_WRITE, 0, 0, (1 << 17) + 1), &l),
            Decision::HangUp(ProtoError::PayloadTooLarge { .. })
        ));
        l.read_only = true;
        assert_eq!(
            classify(&req(CMD_WRITE, 0, 0, 16), &l),
            Decision::Reject {
                errno: EPERM,
                skip: 16
            }
        );
        assert_eq!(
            classify(&req(CMD_TRIM, 0, 0, 16), &l),
            Decision::Reject {
                errno: EPERM,
                skip: 0
            }
        );
        assert_eq!(
            classify(&req(CMD_WRITE_ZEROES, 0, 0, 16), &l),
            Decision::Reject {
                errno: EPERM,
                skip: 0
            }
        );
        assert_eq!(
            classify(&req(CMD_CACHE, 0, 0, 16), &l),
            Decision::Cache { offset: 0, len: 16 }
        );
    }

    #[test]
    fn classify_flags_and_unknown_commands() {
        let mut l = limits();
        assert_eq!(
            classify(&req(99, 0, 0, 0), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 0
            }
        );
        // Block status without a selected context: EINVAL.
        assert_eq!(
            classify(&req(CMD_BLOCK_STATUS, 0, 0, 512), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 0
            }
        );
        assert_eq!(
            classify(&req(CMD_READ, CMD_FLAG_DF, 0, 512), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 0
            }
        );
        l.structured = true;
        assert_eq!(
            classify(&req(CMD_READ, CMD_FLAG_DF, 0, 512), &l),
            Decision::Read {
                offset: 0,
                len: 512
            }
        );
        assert_eq!(
            classify(&req(CMD_FLUSH, 1 << 9, 0, 0), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 0
            }
        );
        assert_eq!(
            classify(&req(CMD_FLUSH, CMD_FLAG_FUA, 0, 0), &l),
            Decision::Flush
        );
        assert_eq!(
            classify(
                &req(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE | CMD_FLAG_FUA, 0, 512),
                &l
            ),
            Decision::WriteZeroes {
                offset: 0,
                len: 512,
                fua: true,
                no_hole: true
            }
        );
        assert_eq!(
            classify(&req(CMD_TRIM, CMD_FLAG_NO_HOLE, 0, 512), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 0
            }
        );
        assert_eq!(
            classify(&req(CMD_DISC, 0xffff, 5, 5), &l),
            Decision::Disconnect
        );
    }

    #[test]
    fn fast_zero_runs_where_zeroing_is_fast_and_fails_at_once_elsewhere() {
        let fast = limits();
        let zero = |flags, l: &Limits| classify(&req(CMD_WRITE_ZEROES, flags, 4096, 8192), l);
        let run = Decision::WriteZeroes {
            offset: 4096,
            len: 8192,
            fua: false,
            no_hole: false,
        };
        assert_eq!(zero(CMD_FLAG_FAST_ZERO, &fast), run);
        // NO_HOLE is kept by an unmap too: the vSSD's capacity is reserved.
        assert!(matches!(
            zero(CMD_FLAG_FAST_ZERO | CMD_FLAG_NO_HOLE, &fast),
            Decision::WriteZeroes { no_hole: true, .. }
        ));
        let slow = Limits {
            fast_zero: false,
            ..fast
        };
        let notsup = Decision::Reject {
            errno: ENOTSUP,
            skip: 0,
        };
        assert_eq!(zero(CMD_FLAG_FAST_ZERO, &slow), notsup);
        assert_eq!(zero(CMD_FLAG_FAST_ZERO | CMD_FLAG_FUA, &slow), notsup);
        // Without the flag the slow export zeroes as before.
        assert_eq!(zero(0, &slow), run);
        // A malformed or forbidden request is refused as such first.
        let einval = Decision::Reject {
            errno: EINVAL,
            skip: 0,
        };
        assert_eq!(
            classify(
                &req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 1 << 20, 4096),
                &slow
            ),
            einval
        );
        let ro = Limits {
            read_only: true,
            ..fast
        };
        assert_eq!(
            zero(CMD_FLAG_FAST_ZERO, &ro),
            Decision::Reject {
                errno: EPERM,
                skip: 0
            }
        );
        // The flag belongs to write zeroes only.
        for kind in [CMD_TRIM, CMD_CACHE, CMD_READ, CMD_FLUSH] {
            assert_eq!(
                classify(&req(kind, CMD_FLAG_FAST_ZERO, 0, 512), &fast),
                einval,
                "command {kind}"
            );
        }
    }

    #[test]
    fn classify_block_status() {
        let mut l = limits();
        l.structured = true;
        l.block_status = true;
        l.block.minimum = 512;
        let l = l;
        let bs = |flags, offset, len| classify(&req(CMD_BLOCK_STATUS, flags, offset, len), &l);
        let einval = Decision::Reject {
            errno: EINVAL,
            skip: 0,
        };
        assert_eq!(
            bs(CMD_FLAG_REQ_ONE | CMD_FLAG_FUA, 512, 4096),
            Decision::BlockStatus {
                offset: 512,
                len: 4096,
                req_one: true
            }
        );
        assert_eq!(
            bs(0, 0, 1 << 20),
            Decision::BlockStatus {
                offset: 0,
                len: 1 << 20,
                req_one: false
            }
        );
        // Past the end, overflowing, empty, misaligned, unknown flag.
        assert_eq!(bs(0, 512, 1 << 20), einval);
        assert_eq!(bs(0, u64::MAX - 511, 1024), einval);
        assert_eq!(bs(0, 0, 0), einval);
        assert_eq!(bs(0, 100, 512), einval);
        assert_eq!(bs(CMD_FLAG_DF, 0, 512), einval);
        // A read-only export still answers block status.
        let ro = Limits {
            read_only: true,
            ..l
        };
        assert!(matches!(
            classify(&req(CMD_BLOCK_STATUS, 0, 0, 512), &ro),
            Decision::BlockStatus { .. }
        ));
    }

    #[test]
    fn meta_requests() {
        let data = |name: &[u8], qs: &[&[u8]]| {
            let mut d = (name.len() as u32).to_be_bytes().to_vec();
            d.extend_from_slice(name);
            d.extend_from_slice(&(qs.len() as u32).to_be_bytes());
            for q in qs {
                d.extend_from_slice(&(q.len() as u32).to_be_bytes());
                d.extend_from_slice(q);
            }
            d
        };
        let r = parse_meta_request(&data(
            b"disk",
            &[b"base:allocation", b"x-y:z", b"base:allocation"],
        ))
        .unwrap();
        assert_eq!(r.name, "disk");
        assert_eq!(
            r.queries,
            ["base:allocation", "x-y:z"],
            "duplicates dropped"
        );
        assert!(wants_base_allocation(&r.queries, false));
        assert!(wants_base_allocation(&["base:".into()], true));
        assert!(!wants_base_allocation(&["base:".into()], false));
        assert!(wants_base_allocation(&[], true));
        assert!(!wants_base_allocation(&[], false));
        assert!(!wants_base_allocation(
            &["qemu:dirty-bitmap:a".into()],
            true
        ));
        let good = data(b"", &[b"base:"]);
        assert!(parse_meta_request(&good).is_ok());
        // Truncated, trailing byte, a count the data cannot hold, a query
        // reaching past the end, bad UTF-8, NUL.
        assert!(parse_meta_request(&good[..7]).is_err());
        let mut extra = good.clone();
        extra.push(0);
        assert!(parse_meta_request(&extra).is_err());
        let mut many = good.clone();
        many[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_meta_request(&many).is_err());
        let mut long = good.clone();
        long[8..12].copy_from_slice(&100u32.to_be_bytes());
        assert!(parse_meta_request(&long).is_err());
        assert!(parse_meta_request(&data(b"", &[&[0xff]])).is_err());
        assert!(parse_meta_request(&data(b"", &[b"a\0"])).is_err());
        assert!(matches!(
            parse_option(OPT_SET_META_CONTEXT, &good),
            ClientOption::SetMetaContext(_)
        ));
        assert!(matches!(
            parse_option(OPT_LIST_META_CONTEXT, &good),
            ClientOption::ListMetaContext(_)
        ));
        assert!(matches!(
            parse_option(OPT_LIST_META_CONTEXT, &[1]),
            ClientOption::Invalid { .. }
        ));
    }

    #[test]
    fn block_status_descriptors_and_encoding() {
        let e = |len, alloc| MapExtent { len, alloc };
        let map = [
            e(4096, Alloc::Hole),
            e(0, Alloc::Data),
            e(4096, Alloc::Hole),
            e(8192, Alloc::Data),
            e(1 << 20, Alloc::Hole),
        ];
        let hz = STATE_HOLE | STATE_ZERO;
        assert_eq!(
            status_descriptors(&map, 20480, false),
            [(8192, hz), (8192, 0), (4096, hz)],
            "merged, zero lengths dropped, clipped to the request"
        );
        assert_eq!(status_descriptors(&map, 20480, true), [(8192, hz)]);
        assert_eq!(status_descriptors(&[], 512, false), [(512, 0)]);
        let many: Vec<MapExtent> = (0..2 * MAX_STATUS_DESCRIPTORS)
            .map(|i| e(512, if i % 2 == 0 { Alloc::Data } else { Alloc::Hole }))
            .collect();
        assert_eq!(
            status_descriptors(&many, u32::MAX, false).len(),
            MAX_STATUS_DESCRIPTORS
        );
        let d = [(8192, hz), (512, 0)];
        let mut out = vec![0u8; block_status_len(d.len())];
        write_block_status(&mut out, 9, META_BASE_ALLOCATION_ID, &d);
        assert_eq!(&out[4..6], &REPLY_FLAG_DONE.to_be_bytes());
        assert_eq!(&out[6..8], &REPLY_TYPE_BLOCK_STATUS.to_be_bytes());
        assert_eq!(&out[16..20], &20u32.to_be_bytes());
        assert_eq!(&out[20..24], &META_BASE_ALLOCATION_ID.to_be_bytes());
        assert_eq!(&out[24..28], &8192u32.to_be_bytes());
        assert_eq!(&out[28..32], &hz.to_be_bytes());
        assert_eq!(&out[32..36], &512u32.to_be_bytes());
        assert_eq!(&out[36..40], &0u32.to_be_bytes());
    }

    #[test]
    fn classify_alignment() {
        let mut l = limits();
        l.block.minimum = 512;
        assert_eq!(
            classify(&req(CMD_READ, 0, 512, 1024), &l),
            Decision::Read {
                offset: 512,
                len: 1024
            }
        );
        assert_eq!(
            classify(&req(CMD_READ, 0, 1, 512), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 0
            }
        );
        assert_eq!(
            classify(&req(CMD_WRITE, 0, 0, 100), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 100
            }
        );
        assert_eq!(
            classify(&req(CMD_TRIM, 0, 0, 100), &l),
            Decision::Reject {
                errno: EINVAL,
                skip: 0
            }
        );
    }

    #[test]
    fn block_sizes_are_sanitised() {
        let bs = |minimum, preferred, maximum| BlockSizes {
            minimum,
            preferred,
            maximum,
        };
        assert_eq!(
            effective_block_sizes(bs(1, 4096, 32 << 20), 32 << 20),
            bs(1, 4096, 32 << 20)
        );
        // Capped by max_payload.
        assert_eq!(
            effective_block_sizes(bs(512, 4096, u32::MAX), 1 << 20),
            bs(512, 4096, 1 << 20)
        );
        // Nonsense from the device.
        assert_eq!(effective_block_sizes(bs(0, 0, 0), 1 << 20), bs(1, 512, 512));
        assert_eq!(
            effective_block_sizes(bs(3000, 5000, 10_000), 1 << 20),
            bs(4096, 8192, 8192)
        );
        assert_eq!(
            effective_block_sizes(bs(1 << 20, 1, 1), 1 << 25),
            bs(1 << 16, 1 << 16, 1 << 16)
        );
        // Maximum rounded down to a multiple of the minimum.
        assert_eq!(
            effective_block_sizes(bs(4096, 4096, 100_000), 1 << 25),
            bs(4096, 4096, 98_304)
        );
        // A tiny payload limit wins over the preferred size.
        assert_eq!(
            effective_block_sizes(bs(1, 4096, 1 << 20), 1000),
            bs(1, 512, 1000)
        );
        for (a, b, c, p) in [
            (1, 1, 1, 1u32),
            (7, 9, 13, 4096),
            (65536, 1 << 31, u32::MAX, u32::MAX),
        ] {
            let e = effective_block_sizes(bs(a, b, c), p);
            assert!(e.minimum.is_power_of_two() && e.minimum <= 65536);
            assert!(e.preferred.is_power_of_two() && e.preferred >= e.minimum);
            assert!(e.maximum.is_multiple_of(e.minimum) && e.maximum <= p.max(e.minimum));
        }
    }

    #[test]
    fn encoders() {
        let r = simple_reply(0x0102_0304_0506_0708, 22);
        assert_eq!(&r[0..4], &SIMPLE_REPLY_MAGIC.to_be_bytes());
        assert_eq!(&r[4..8], &22u32.to_be_bytes());
        assert_eq!(&r[8..16], &0x0102_0304_0506_0708u64.to_be_bytes());
        let mut v = vec![0u8; structured_error_len("bad")];
        write_structured_error(&mut v, 9, 5, "bad");
        assert_eq!(&v[4..6], &REPLY_FLAG_DONE.to_be_bytes());
        assert_eq!(&v[6..8], &REPLY_TYPE_ERROR.to_be_bytes());
        assert_eq!(&v[16..20], &9u32.to_be_bytes());
        assert_eq!(&v[20..24], &5u32.to_be_bytes());
        assert_eq!(&v[24..26], &3u16.to_be_bytes());
        assert_eq!(&v[26..], b"bad");
        assert_eq!(export_name_reply(5, 1, false).len(), 134);
        assert_eq!(export_name_reply(5, 1, true).len(), 10);
        assert_eq!(truncate_str("héllo", 2), "h");
        let g = greeting();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
    }
}
