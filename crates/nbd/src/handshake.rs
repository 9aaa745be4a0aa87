//! Fixed-newstyle option haggling: from the greeting to the choice of an export.

use blockdev::BlockSizes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::inbuf::InBuf;
use crate::proto::{self, ClientOption};
use crate::{Export, NbdError, ServerConfig};

/// Most options one connection may send before the server gives up on it.
const MAX_OPTIONS: usize = 4096;

/// The outcome of a successful negotiation.
pub(crate) struct Negotiated {
    pub export: Export,
    pub structured: bool,
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

/// Runs the handshake. Returns `Ok(None)` when the client ends it cleanly
/// (`NBD_OPT_ABORT`, or hanging up between options).
pub(crate) async fn negotiate<R, W>(
    registry: &dyn crate::ExportRegistry,
    config: &ServerConfig,
    inbuf: &mut InBuf,
    rd: &mut R,
    wr: &mut W,
) -> Result<Option<Negotiated>, NbdError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(&proto::greeting());
    send(wr, &mut out).await?;

    if !inbuf.fill(rd, 4).await? {
        return Ok(None);
    }
    let raw = u32::from_be_bytes(inbuf.data()[..4].try_into().expect("4 bytes"));
    inbuf.consume(4);
    let client = proto::parse_client_flags(raw)?;

    let mut structured = false;
    let mut data = Vec::new();
    for _ in 0..MAX_OPTIONS {
        match inbuf.fill(rd, proto::OPTION_HEADER_LEN).await? {
            true => {}
            false if inbuf.len() == 0 => return Ok(None),
            false => return Err(NbdError::HungUp),
        }
        let hdr = proto::parse_option_header(&inbuf.data()[..proto::OPTION_HEADER_LEN])?;
        inbuf.consume(proto::OPTION_HEADER_LEN);
        data.resize(hdr.length as usize, 0);
        if !inbuf.read_exact(rd, &mut data).await? {
            return Err(NbdError::HungUp);
        }
        let option = hdr.option;
        match proto::parse_option(option, &data) {
            ClientOption::ExportName(name) => {
                let Some(export) = registry.lookup(&name) else {
                    return Err(NbdError::UnknownExport(name));
                };
                let flags = transmission_flags(&export, structured, config);
                let size = export.dev.size();
                out.extend_from_slice(&proto::export_name_reply(size, flags, client.no_zeroes));
                send(wr, &mut out).await?;
                let block =
                    proto::effective_block_sizes(export.dev.block_sizes(), config.max_payload);
                return Ok(Some(Negotiated {
                    export,
                    structured,
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
                let _ = send(wr, &mut out).await;
                return Ok(None);
            }
            ClientOption::List => {
                for (name, description) in registry.list() {
                    proto::put_list_entry(&mut out, &name, &description);
                }
                proto::put_option_reply(&mut out, option, proto::REP_ACK, &[]);
            }
            ClientOption::Info(req) | ClientOption::Go(req) => {
                let go = option == proto::OPT_GO;
                match registry.lookup(&req.name) {
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
                            send(wr, &mut out).await?;
                            return Ok(Some(Negotiated {
                                export,
                                structured,
                                size,
                                block,
                            }));
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
        send(wr, &mut out).await?;
        if data.capacity() > 4096 {
            data = Vec::new();
        }
    }
    Err(NbdError::TooManyOptions)
}
