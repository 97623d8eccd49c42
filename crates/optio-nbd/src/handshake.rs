//! The fixed-newstyle handshake: the greeting, then option haggling until the client chooses
//! an export, aborts, or — on a server that requires TLS — asks for TLS (`NBD_OPT_STARTTLS`),
//! after which haggling goes on inside TLS with the exports the client's certificate allows.
//!
//! The NBD protocol's "FORCEDTLS" mode: before TLS, every option but `NBD_OPT_STARTTLS` and
//! `NBD_OPT_ABORT` is answered `NBD_REP_ERR_TLS_REQD` (the export list included), and
//! `NBD_OPT_EXPORT_NAME`, which cannot be answered with an error, ends the connection.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::export::{Export, Exports};
use crate::proto::{self, OptionHeader, REP_ERR_INVALID, REP_ERR_UNKNOWN};
use crate::server::{Limits, NbdError};

/// Longest option data taken.
const OPTION_DATA_MAX: u32 = 64 << 10;
/// The preferred block size advertised (the page size: smaller writes cost a read-modify-write
/// in most exports).
const PREFERRED_BLOCK: u32 = 4096;

/// What the client said in the greeting, and what is left of its option budget.
pub(crate) struct Negotiation {
    /// The client speaks fixed newstyle (TLS needs it).
    pub(crate) fixed_newstyle: bool,
    /// The client takes no zero padding after `NBD_OPT_EXPORT_NAME`'s reply.
    no_zeroes: bool,
    /// Options the client may still send before choosing an export.
    options_left: usize,
    /// The client negotiated structured replies (`NBD_OPT_STRUCTURED_REPLY`).
    structured: bool,
    /// The metadata contexts the last `NBD_OPT_SET_META_CONTEXT` selected, and for which
    /// export name (they hold only if the client goes on with that name).
    meta: Option<(String, Vec<Context>)>,
}

/// A metadata context this server offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Context {
    /// `base:allocation`.
    Allocation,
    /// `qemu:allocation-depth` (exports that know their layers).
    Depth,
}

impl Context {
    /// Its id in `NBD_REP_META_CONTEXT` and block-status chunks.
    pub(crate) fn id(self) -> u32 {
        match self {
            Context::Allocation => 1,
            Context::Depth => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Context::Allocation => proto::CONTEXT_BASE_ALLOCATION,
            Context::Depth => proto::CONTEXT_ALLOCATION_DEPTH,
        }
    }

    /// The contexts `export` offers.
    fn offered(export: &dyn Export) -> Vec<Context> {
        let mut out = vec![Context::Allocation];
        if export.allocation_depth() {
            out.push(Context::Depth);
        }
        out
    }
}

/// What the client negotiated for the transmission phase.
#[derive(Clone, Debug, Default)]
pub(crate) struct Session {
    /// Structured replies: reads answered in chunks, errors as error chunks.
    pub(crate) structured: bool,
    /// The metadata contexts `NBD_CMD_BLOCK_STATUS` reports (none: it is refused).
    pub(crate) contexts: Vec<Context>,
}

/// The contexts of `offered` that `queries` select: for a list, `namespace:` matches every
/// context of its namespace, and no query at all every context; for a set, whole names only.
/// Unknown namespaces and names are ignored, as the protocol asks.
fn select(offered: &[Context], queries: &[String], list: bool) -> Vec<Context> {
    if list && queries.is_empty() {
        return offered.to_vec();
    }
    offered
        .iter()
        .copied()
        .filter(|context| {
            let name = context.name();
            let namespace = &name[..=name.find(':').expect("a namespace")];
            queries.iter().any(|query| query == name || (list && query == namespace))
        })
        .collect()
}

/// What option haggling may offer at this point of a connection.
pub(crate) enum Stage<'a> {
    /// Exports served to whoever connected (no TLS here).
    Open(&'a dyn Exports),
    /// TLS is required and has not started: only `NBD_OPT_STARTTLS` and `NBD_OPT_ABORT`.
    BeforeTls,
    /// Inside TLS: the exports the client's certificate allows, or why it is refused.
    AfterTls(Result<&'a dyn Exports, &'a str>),
}

/// How option haggling ended.
pub(crate) enum Outcome {
    /// The client chose an export: transmission starts, as negotiated.
    Chosen(Arc<dyn Export>, Session),
    /// The client ended the handshake (`NBD_OPT_ABORT`).
    Aborted,
    /// The client asked for TLS and was answered `NBD_REP_ACK`: the TLS handshake is next.
    StartTls,
}

async fn send<W: AsyncWrite + Unpin>(writer: &mut W, bytes: &[u8]) -> Result<(), NbdError> {
    writer.write_all(bytes).await?;
    writer.flush().await?;
    Ok(())
}

/// `value`, or — when it is an error — none, once the reply `kind` to `option` with the
/// error's text has been sent (the client may then send its next option).
async fn refused<W, T, E>(
    writer: &mut W,
    option: u32,
    kind: u32,
    value: Result<T, E>,
) -> Result<Option<T>, NbdError>
where
    W: AsyncWrite + Unpin,
    E: std::fmt::Display,
{
    match value {
        Ok(value) => Ok(Some(value)),
        Err(reason) => {
            let reason = reason.to_string();
            send(writer, &proto::option_reply(option, kind, reason.as_bytes())).await?;
            Ok(None)
        }
    }
}

/// Sends the greeting and reads the client's flags.
pub(crate) async fn greet<T>(
    stream: &mut BufReader<T>,
    limits: &Limits,
) -> Result<Negotiation, NbdError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&proto::INIT_MAGIC.to_be_bytes());
    greeting.extend_from_slice(&proto::OPT_MAGIC.to_be_bytes());
    greeting.extend_from_slice(&(proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES).to_be_bytes());
    send(stream, &greeting).await?;
    let client_flags = stream.read_u32().await?;
    let known = proto::CLIENT_FIXED_NEWSTYLE | proto::CLIENT_NO_ZEROES;
    if client_flags & !known != 0 {
        return Err(NbdError::Protocol(format!("unknown client flags {client_flags:#x}")));
    }
    Ok(Negotiation {
        fixed_newstyle: client_flags & proto::CLIENT_FIXED_NEWSTYLE != 0,
        no_zeroes: client_flags & proto::CLIENT_NO_ZEROES != 0,
        options_left: limits.max_options,
        structured: false,
        meta: None,
    })
}

impl Negotiation {
    /// What transmission with the export named `name` uses: structured replies if
    /// negotiated, and the metadata contexts selected for that very name.
    fn session(&self, name: &str) -> Session {
        let contexts = match &self.meta {
            Some((selected_for, contexts)) if selected_for == name && self.structured => {
                contexts.clone()
            }
            _ => Vec::new(),
        };
        Session { structured: self.structured, contexts }
    }
}

/// Transmission flags of `export`.
fn transmission_flags(export: &dyn Export) -> u16 {
    let mut flags = proto::TFLAG_HAS_FLAGS
        | proto::TFLAG_SEND_FLUSH
        | proto::TFLAG_SEND_FUA
        | proto::TFLAG_SEND_TRIM
        | proto::TFLAG_SEND_WRITE_ZEROES;
    if export.read_only() {
        flags |= proto::TFLAG_READ_ONLY;
    }
    if export.multi_conn() {
        flags |= proto::TFLAG_CAN_MULTI_CONN;
    }
    flags
}

/// Option haggling at `stage`, until the client chooses an export, aborts or starts TLS.
pub(crate) async fn haggle<T>(
    stream: &mut BufReader<T>,
    stage: Stage<'_>,
    negotiation: &mut Negotiation,
    limits: &Limits,
) -> Result<Outcome, NbdError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    while negotiation.options_left > 0 {
        negotiation.options_left -= 1;
        let mut header = [0u8; proto::OPTION_HEADER_BYTES];
        stream.read_exact(&mut header).await?;
        let header = OptionHeader::parse(&header).map_err(|e| NbdError::Protocol(e.to_string()))?;
        if header.length > OPTION_DATA_MAX {
            return Err(NbdError::Protocol(format!(
                "option {} carries {} bytes (at most {OPTION_DATA_MAX})",
                header.option, header.length
            )));
        }
        let mut data = vec![0u8; header.length as usize];
        stream.read_exact(&mut data).await?;
        let option = header.option;
        let reply = |kind: u32, data: &[u8]| proto::option_reply(option, kind, data);
        if option == proto::OPT_ABORT {
            // The client may already be gone.
            let _ = send(stream, &reply(proto::REP_ACK, &[])).await;
            return Ok(Outcome::Aborted);
        }
        if option == proto::OPT_STARTTLS {
            match &stage {
                Stage::Open(_) => {
                    let message = b"TLS is not offered here";
                    send(stream, &reply(proto::REP_ERR_POLICY, message)).await?;
                }
                Stage::AfterTls(_) => {
                    let message = b"TLS is already on";
                    send(stream, &reply(proto::REP_ERR_INVALID, message)).await?;
                }
                Stage::BeforeTls if !data.is_empty() => {
                    let message = b"NBD_OPT_STARTTLS takes no data";
                    send(stream, &reply(proto::REP_ERR_INVALID, message)).await?;
                }
                Stage::BeforeTls => {
                    send(stream, &reply(proto::REP_ACK, &[])).await?;
                    // What was negotiated before TLS is negotiated again inside it.
                    negotiation.structured = false;
                    negotiation.meta = None;
                    return Ok(Outcome::StartTls);
                }
            }
            continue;
        }
        let exports = match &stage {
            Stage::Open(exports) | Stage::AfterTls(Ok(exports)) => *exports,
            Stage::BeforeTls if option == proto::OPT_EXPORT_NAME => {
                // No error reply exists for this option: the connection ends.
                return Err(NbdError::Protocol(
                    "NBD_OPT_EXPORT_NAME before TLS, which this server requires".into(),
                ));
            }
            Stage::BeforeTls => {
                let message = b"this server requires TLS: use NBD_OPT_STARTTLS (nbds://)";
                send(stream, &reply(proto::REP_ERR_TLS_REQD, message)).await?;
                continue;
            }
            Stage::AfterTls(Err(reason)) => {
                if option == proto::OPT_EXPORT_NAME {
                    return Err(NbdError::Refused(reason.to_string()));
                }
                send(stream, &reply(proto::REP_ERR_POLICY, reason.as_bytes())).await?;
                continue;
            }
        };
        match option {
            proto::OPT_EXPORT_NAME => {
                let name = String::from_utf8(data)
                    .map_err(|_| NbdError::Protocol("the export name is not UTF-8".into()))?;
                // The protocol has no error reply here: an unknown export closes the connection.
                let export = exports.open(&name).map_err(|reason| {
                    NbdError::Protocol(format!("NBD_OPT_EXPORT_NAME `{name}`: {reason}"))
                })?;
                let mut answer = Vec::with_capacity(134);
                answer.extend_from_slice(&export.size().to_be_bytes());
                answer.extend_from_slice(&transmission_flags(&*export).to_be_bytes());
                if !negotiation.no_zeroes {
                    answer.extend_from_slice(&[0u8; 124]);
                }
                send(stream, &answer).await?;
                return Ok(Outcome::Chosen(export, negotiation.session(&name)));
            }
            proto::OPT_LIST => {
                if !data.is_empty() {
                    send(stream, &reply(proto::REP_ERR_INVALID, b"NBD_OPT_LIST takes no data"))
                        .await?;
                    continue;
                }
                let mut answer = Vec::new();
                for name in exports.names() {
                    let mut item = (name.len() as u32).to_be_bytes().to_vec();
                    item.extend_from_slice(name.as_bytes());
                    answer.extend_from_slice(&reply(proto::REP_SERVER, &item));
                }
                answer.extend_from_slice(&reply(proto::REP_ACK, &[]));
                send(stream, &answer).await?;
            }
            proto::OPT_INFO | proto::OPT_GO => {
                let parsed = proto::parse_info_request(&data);
                let Some((name, items)) = refused(stream, option, REP_ERR_INVALID, parsed).await?
                else {
                    continue;
                };
                let opened = exports.open(&name);
                let Some(export) = refused(stream, option, REP_ERR_UNKNOWN, opened).await? else {
                    continue;
                };
                let mut info = proto::INFO_EXPORT.to_be_bytes().to_vec();
                info.extend_from_slice(&export.size().to_be_bytes());
                info.extend_from_slice(&transmission_flags(&*export).to_be_bytes());
                let mut answer = reply(proto::REP_INFO, &info);
                for item in items {
                    match item {
                        proto::INFO_NAME => {
                            let mut info = proto::INFO_NAME.to_be_bytes().to_vec();
                            info.extend_from_slice(name.as_bytes());
                            answer.extend_from_slice(&reply(proto::REP_INFO, &info));
                        }
                        proto::INFO_BLOCK_SIZE => {
                            let mut info = proto::INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                            info.extend_from_slice(&1u32.to_be_bytes());
                            info.extend_from_slice(&PREFERRED_BLOCK.to_be_bytes());
                            info.extend_from_slice(&limits.max_request_bytes.to_be_bytes());
                            answer.extend_from_slice(&reply(proto::REP_INFO, &info));
                        }
                        _ => {} // other items are optional
                    }
                }
                answer.extend_from_slice(&reply(proto::REP_ACK, &[]));
                send(stream, &answer).await?;
                if option == proto::OPT_GO {
                    return Ok(Outcome::Chosen(export, negotiation.session(&name)));
                }
            }
            proto::OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    let message = b"NBD_OPT_STRUCTURED_REPLY takes no data";
                    send(stream, &reply(proto::REP_ERR_INVALID, message)).await?;
                    continue;
                }
                negotiation.structured = true;
                send(stream, &reply(proto::REP_ACK, &[])).await?;
            }
            proto::OPT_LIST_META_CONTEXT | proto::OPT_SET_META_CONTEXT => {
                let set = option == proto::OPT_SET_META_CONTEXT;
                if set {
                    // Whatever comes of it, the contexts selected before are no more.
                    negotiation.meta = None;
                    if !negotiation.structured {
                        let message =
                            b"NBD_OPT_SET_META_CONTEXT needs NBD_OPT_STRUCTURED_REPLY first";
                        send(stream, &reply(proto::REP_ERR_INVALID, message)).await?;
                        continue;
                    }
                }
                let parsed = proto::parse_meta_context_request(&data);
                let Some((name, queries)) =
                    refused(stream, option, REP_ERR_INVALID, parsed).await?
                else {
                    continue;
                };
                let opened = exports.open(&name);
                let Some(export) = refused(stream, option, REP_ERR_UNKNOWN, opened).await? else {
                    continue;
                };
                let chosen = select(&Context::offered(&*export), &queries, !set);
                let mut answer = Vec::new();
                for context in &chosen {
                    // A list's ids are reserved: zero.
                    let id = if set { context.id() } else { 0 };
                    let mut item = id.to_be_bytes().to_vec();
                    item.extend_from_slice(context.name().as_bytes());
                    answer.extend_from_slice(&reply(proto::REP_META_CONTEXT, &item));
                }
                answer.extend_from_slice(&reply(proto::REP_ACK, &[]));
                send(stream, &answer).await?;
                if set {
                    negotiation.meta = Some((name, chosen));
                }
            }
            _ => send(stream, &reply(proto::REP_ERR_UNSUP, &[])).await?,
        }
    }
    Err(NbdError::Protocol(format!(
        "more than {} options without choosing an export",
        limits.max_options
    )))
}
