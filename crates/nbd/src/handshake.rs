//! Fixed-newstyle option haggling: from the greeting to the choice of an export.

use blockdev::BlockSizes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::inbuf::InBuf;
use crate::proto::{self, ClientOption};
use crate::tls::{self, TlsMode};
use crate::{Export, NbdError, ServerConfig};

/// Most options one connection may send before the server gives up on it.
const MAX_OPTIONS: usize = 4096;

/// The outcome of a successful negotiation.
pub(crate) struct Negotiated {
    pub export: Export,
    pub structured: bool,
    /// `base:allocation` was selected for this export: block status allowed.
    pub block_status: bool,
    pub size: u64,
    pub block: BlockSizes,
}

/// Transmission flags for `export` in a session that did (or did not) negotiate
/// structured replies.
pub(crate) fn transmission_flags(export: &Export, structured: bool, config: &ServerConfig) -> u16 {
    let mut f = proto::TFLAG_HAS_FLAGS
        | proto::TFLAG_SEND_FLUSH
        | proto::TFLAG_SEND_FUA
        | proto::TFLAG_SEND_TRIM
        | proto::TFLAG_SEND_WRITE_ZEROES
        | proto::TFLAG_SEND_FAST_ZERO
        | proto::TFLAG_SEND_CACHE;
    if config.multi_conn {
        f |= proto::TFLAG_CAN_MULTI_CONN;
    }
    if export.dev.read_only() {
        f |= proto::TFLAG_READ_ONLY;
    }
    if structured {
        // Reads are always answered with a single data chunk.
        f |= proto::TFLAG_SEND_DF;
    }
    f
}

async fn send<W: AsyncWrite + Unpin>(w: &mut W, out: &mut Vec<u8>) -> Result<(), NbdError> {
    w.write_all(out).await?;
    w.flush().await?;
    out.clear();
    Ok(())
}

fn put_error(out: &mut Vec<u8>, option: u32, reply: u32, msg: &str) {
    proto::put_option_reply(
        out,
        option,
        reply,
        proto::truncate_str(msg, proto::MAX_STRING_LEN).as_bytes(),
    );
}

/// Where a connection stands in its handshake: kept across a TLS upgrade.
#[derive(Default)]
pub(crate) struct Session {
    /// The client's flags, once read (from the first phase).
    client: Option<proto::ClientFlags>,
    /// The session runs over TLS.
    pub secure: bool,
    /// The tenant TLS authenticated, if any.
    pub identity: Option<String>,
}

/// How a phase of option haggling ended.
pub(crate) enum Outcome {
    /// The client ended it cleanly (`NBD_OPT_ABORT`, or hanging up between options).
    Closed,
    /// The client asked for TLS and got the ACK: the caller upgrades the stream
    /// and haggles again.
    StartTls,
    /// The client chose an export.
    Go(Negotiated),
}

/// Runs one phase of the handshake on `stream`: from the greeting (first phase
/// only) to the choice of an export, the end, or a TLS upgrade.
pub(crate) async fn negotiate<S>(
    registry: &dyn crate::ExportRegistry,
    config: &ServerConfig,
    session: &mut Session,
    inbuf: &mut InBuf,
    stream: &mut S,
) -> Result<Outcome, NbdError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut out = Vec::with_capacity(512);
    let client = match session.client {
        Some(c) => c,
        None => {
            out.extend_from_slice(&proto::greeting());
            send(stream, &mut out).await?;
            if !inbuf.fill(stream, 4).await? {
                return Ok(Outcome::Closed);
            }
            let raw = u32::from_be_bytes(inbuf.data()[..4].try_into().expect("4 bytes"));
            inbuf.consume(4);
            let c = proto::parse_client_flags(raw)?;
            session.client = Some(c);
            c
        }
    };
    let mode = config.tls.as_ref().map_or(TlsMode::Off, |t| t.mode());
    let tls_missing = mode == TlsMode::Require && !session.secure;
    // Whether this client may see an export owned by `owner` (the one rule).
    let may = |owner: Option<&str>| tls::may_open(mode, session.identity.as_deref(), owner);
    let visible = |e: &Export| may(e.owner.as_deref());
    // An export this client may not see does not exist, as far as it can tell.
    // The default export ("") is the registry's default when this client may
    // see it, else the first export it may see: another tenant's default must
    // neither show nor hide anything.
    let lookup = |name: &str| match registry.lookup(name).filter(|e| visible(e)) {
        None if name.is_empty() && mode != TlsMode::Off => registry
            .list()
            .into_iter()
            .find(|l| may(l.owner.as_deref()))
            .and_then(|l| registry.lookup(&l.name))
            .filter(|e| visible(e)),
        found => found,
    };

    let mut structured = false;
    // The export `base:allocation` was last selected for (by
    // NBD_OPT_SET_META_CONTEXT); it counts only if the client then opens that
    // same export.
    let mut meta_for: Option<String> = None;
    let mut data = Vec::new();
    for _ in 0..MAX_OPTIONS {
        match inbuf.fill(stream, proto::OPTION_HEADER_LEN).await? {
            true => {}
            false if inbuf.len() == 0 => return Ok(Outcome::Closed),
            false => return Err(NbdError::HungUp),
        }
        let hdr = proto::parse_option_header(&inbuf.data()[..proto::OPTION_HEADER_LEN])?;
        inbuf.consume(proto::OPTION_HEADER_LEN);
        data.resize(hdr.length as usize, 0);
        if !inbuf.read_exact(stream, &mut data).await? {
            return Err(NbdError::HungUp);
        }
        let option = hdr.option;
        let parsed = proto::parse_option(option, &data);
        if tls_missing
            && !matches!(
                parsed,
                ClientOption::StartTls | ClientOption::Abort | ClientOption::Invalid { .. }
            )
        {
            if matches!(
                parsed,
                ClientOption::ExportName(_) | ClientOption::BadExportName
            ) {
                // NBD_OPT_EXPORT_NAME has no error reply: hang up.
                return Err(NbdError::TlsRequired);
            }
            put_error(
                &mut out,
                option,
                proto::REP_ERR_TLS_REQD,
                "this server requires TLS: upgrade with NBD_OPT_STARTTLS first",
            );
            send(stream, &mut out).await?;
            continue;
        }
        match parsed {
            ClientOption::StartTls => {
                if mode == TlsMode::Off {
                    // As nbdkit answers: a client that merely prefers TLS
                    // goes on in plaintext.
                    put_error(
                        &mut out,
                        option,
                        proto::REP_ERR_UNSUP,
                        "TLS is off on this server",
                    );
                } else if session.secure {
                    put_error(
                        &mut out,
                        option,
                        proto::REP_ERR_INVALID,
                        "TLS is on already",
                    );
                } else {
                    proto::put_option_reply(&mut out, option, proto::REP_ACK, &[]);
                    send(stream, &mut out).await?;
                    return Ok(Outcome::StartTls);
                }
            }
            ClientOption::ExportName(name) => {
                let Some(export) = lookup(&name) else {
                    return Err(NbdError::UnknownExport(name));
                };
                let flags = transmission_flags(&export, structured, config);
                let size = export.dev.size();
                out.extend_from_slice(&proto::export_name_reply(size, flags, client.no_zeroes));
                send(stream, &mut out).await?;
                let block =
                    proto::effective_block_sizes(export.dev.block_sizes(), config.max_payload);
                let block_status = structured && meta_for.as_deref() == Some(&export.name);
                return Ok(Outcome::Go(Negotiated {
                    export,
                    structured,
                    block_status,
                    size,
                    block,
                }));
            }
            ClientOption::BadExportName => {
                return Err(NbdError::UnknownExport(
                    String::from_utf8_lossy(&data).into_owned(),
                ));
            }
            ClientOption::Abort => {
                proto::put_option_reply(&mut out, option, proto::REP_ACK, &[]);
                // The client may already have gone; that is fine.
                let _ = send(stream, &mut out).await;
                return Ok(Outcome::Closed);
            }
            ClientOption::List => {
                for l in registry.list() {
                    if may(l.owner.as_deref()) {
                        proto::put_list_entry(&mut out, &l.name, &l.description);
                    }
                }
                proto::put_option_reply(&mut out, option, proto::REP_ACK, &[]);
            }
            ClientOption::Info(req) | ClientOption::Go(req) => {
                let go = option == proto::OPT_GO;
                match lookup(&req.name) {
                    None => put_error(
                        &mut out,
                        option,
                        proto::REP_ERR_UNKNOWN,
                        &format!("no export named {:?}", req.name),
                    ),
                    Some(export) => {
                        let flags = transmission_flags(&export, structured, config);
                        let size = export.dev.size();
                        let block = proto::effective_block_sizes(
                            export.dev.block_sizes(),
                            config.max_payload,
                        );
                        proto::put_option_reply(
                            &mut out,
                            option,
                            proto::REP_INFO,
                            &proto::info_export(size, flags),
                        );
                        if req.wants(proto::INFO_NAME) {
                            let d = proto::info_string(proto::INFO_NAME, &export.name);
                            proto::put_option_reply(&mut out, option, proto::REP_INFO, &d);
                        }
                        if req.wants(proto::INFO_DESCRIPTION) {
                            let d =
                                proto::info_string(proto::INFO_DESCRIPTION, &export.description);
                            proto::put_option_reply(&mut out, option, proto::REP_INFO, &d);
                        }
                        // Always advertised: the spec lets a server send it unasked,
                        // and clients that understand it honour the maximum.
                        proto::put_option_reply(
                            &mut out,
                            option,
                            proto::REP_INFO,
                            &proto::info_block_size(block),
                        );
                        proto::put_option_reply(&mut out, option, proto::REP_ACK, &[]);
                        if go {
                            send(stream, &mut out).await?;
                            let block_status =
                                structured && meta_for.as_deref() == Some(&export.name);
                            return Ok(Outcome::Go(Negotiated {
                                export,
                                structured,
                                block_status,
                                size,
                                block,
                            }));
                        }
                    }
                }
            }
            ClientOption::ListMetaContext(req) | ClientOption::SetMetaContext(req) => {
                let set = option == proto::OPT_SET_META_CONTEXT;
                if set {
                    // A new selection replaces the old one, even a failed one.
                    meta_for = None;
                }
                if !structured {
                    put_error(
                        &mut out,
                        option,
                        proto::REP_ERR_INVALID,
                        "metadata contexts need structured replies: send NBD_OPT_STRUCTURED_REPLY first",
                    );
                } else {
                    match lookup(&req.name) {
                        None => put_error(
                            &mut out,
                            option,
                            proto::REP_ERR_UNKNOWN,
                            &format!("no export named {:?}", req.name),
                        ),
                        Some(export) => {
                            if proto::wants_base_allocation(&req.queries, !set) {
                                // In a list the ID is reserved (zero).
                                let id = if set {
                                    proto::META_BASE_ALLOCATION_ID
                                } else {
                                    0
                                };
                                proto::put_meta_context(
                                    &mut out,
                                    option,
                                    id,
                                    proto::META_BASE_ALLOCATION,
                                );
                                if set {
                                    meta_for = Some(export.name.clone());
                                }
                            }
                            proto::put_option_reply(&mut out, option, proto::REP_ACK, &[]);
                        }
                    }
                }
            }
            ClientOption::StructuredReply => {
                structured = true;
                proto::put_option_reply(&mut out, option, proto::REP_ACK, &[]);
            }
            ClientOption::Invalid { reason, .. } => {
                put_error(
                    &mut out,
                    option,
                    proto::REP_ERR_INVALID,
                    &reason.to_string(),
                );
            }
            ClientOption::Unsupported(_) => {
                put_error(
                    &mut out,
                    option,
                    proto::REP_ERR_UNSUP,
                    "option not supported",
                );
            }
        }
        send(stream, &mut out).await?;
        if data.capacity() > 4096 {
            data = Vec::new();
        }
    }
    Err(NbdError::TooManyOptions)
}
