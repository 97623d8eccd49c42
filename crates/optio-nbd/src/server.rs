//! One NBD connection: the fixed-newstyle handshake, then the transmission phase with many
//! requests in flight, answered out of order.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{Semaphore, mpsc};

use crate::export::{Errno, Export, Exports};
use crate::proto::{self, Command, OptionHeader, Request};

/// How much one connection may hold and take.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Requests executing at once (a client's queue depth beyond this waits on the socket).
    pub max_in_flight: usize,
    /// Largest read or write (advertised as the maximum block size); a larger write ends the
    /// connection (its data cannot be skipped safely), a larger read gets `EINVAL`.
    pub max_request_bytes: u32,
    /// Bytes of write data held at once, across the requests in flight.
    pub max_bytes_in_flight: usize,
    /// Longest handshake.
    pub handshake_timeout: Duration,
    /// Most options before an export is chosen.
    pub max_options: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_in_flight: 64,
            max_request_bytes: 32 << 20,
            max_bytes_in_flight: 256 << 20,
            handshake_timeout: Duration::from_secs(10),
            max_options: 64,
        }
    }
}

/// Longest option data taken.
const OPTION_DATA_MAX: u32 = 64 << 10;
/// The preferred block size advertised (the page size: smaller writes cost a read-modify-write
/// in most exports).
const PREFERRED_BLOCK: u32 = 4096;
/// Units of the write-data budget.
const BUDGET_UNIT: usize = 64 << 10;

/// Why a connection ended other than by the client's `NBD_CMD_DISC` or `NBD_OPT_ABORT`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NbdError {
    /// The socket failed.
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The client sent something the protocol does not allow; it was disconnected.
    #[error("the client broke the NBD protocol: {0}")]
    Protocol(String),
    /// The client did not finish the handshake in time.
    #[error("the client did not finish the handshake within {0:?}")]
    HandshakeTimeout(Duration),
}

/// Serves one connection: the handshake (an export chosen from `exports`), then its requests,
/// until the client disconnects. Every request in flight is answered before this returns.
pub async fn serve<S>(stream: S, exports: Arc<dyn Exports>, limits: Limits) -> Result<(), NbdError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (reader, writer) = tokio::io::split(stream);
    let mut reader = BufReader::with_capacity(256 << 10, reader);
    let mut writer = BufWriter::with_capacity(64 << 10, writer);
    let chosen = tokio::time::timeout(
        limits.handshake_timeout,
        handshake(&mut reader, &mut writer, &*exports, &limits),
    )
    .await
    .map_err(|_| NbdError::HandshakeTimeout(limits.handshake_timeout))??;
    match chosen {
        Some(export) => transmission(reader, writer, export, limits).await,
        None => Ok(()),
    }
}

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

async fn send<W: AsyncWrite + Unpin>(writer: &mut W, bytes: &[u8]) -> Result<(), NbdError> {
    writer.write_all(bytes).await?;
    writer.flush().await?;
    Ok(())
}

/// The handshake: the export the client chose (`None`: it aborted).
async fn handshake<R, W>(
    reader: &mut R,
    writer: &mut W,
    exports: &dyn Exports,
    limits: &Limits,
) -> Result<Option<Arc<dyn Export>>, NbdError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&proto::INIT_MAGIC.to_be_bytes());
    greeting.extend_from_slice(&proto::OPT_MAGIC.to_be_bytes());
    greeting.extend_from_slice(&(proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES).to_be_bytes());
    send(writer, &greeting).await?;
    let client_flags = reader.read_u32().await?;
    let known = proto::CLIENT_FIXED_NEWSTYLE | proto::CLIENT_NO_ZEROES;
    if client_flags & !known != 0 {
        return Err(NbdError::Protocol(format!("unknown client flags {client_flags:#x}")));
    }
    let no_zeroes = client_flags & proto::CLIENT_NO_ZEROES != 0;
    for _ in 0..limits.max_options {
        let mut header = [0u8; proto::OPTION_HEADER_BYTES];
        reader.read_exact(&mut header).await?;
        let header = OptionHeader::parse(&header).map_err(NbdError::Protocol)?;
        if header.length > OPTION_DATA_MAX {
            return Err(NbdError::Protocol(format!(
                "option {} carries {} bytes (at most {OPTION_DATA_MAX})",
                header.option, header.length
            )));
        }
        let mut data = vec![0u8; header.length as usize];
        reader.read_exact(&mut data).await?;
        let option = header.option;
        let reply = |kind: u32, data: &[u8]| proto::option_reply(option, kind, data);
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
                if !no_zeroes {
                    answer.extend_from_slice(&[0u8; 124]);
                }
                send(writer, &answer).await?;
                return Ok(Some(export));
            }
            proto::OPT_ABORT => {
                // The client may already be gone.
                let _ = send(writer, &reply(proto::REP_ACK, &[])).await;
                return Ok(None);
            }
            proto::OPT_LIST => {
                if !data.is_empty() {
                    send(writer, &reply(proto::REP_ERR_INVALID, b"NBD_OPT_LIST takes no data"))
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
                send(writer, &answer).await?;
            }
            proto::OPT_INFO | proto::OPT_GO => {
                let (name, items) = match proto::parse_info_request(&data) {
                    Ok(parsed) => parsed,
                    Err(reason) => {
                        send(writer, &reply(proto::REP_ERR_INVALID, reason.as_bytes())).await?;
                        continue;
                    }
                };
                let export = match exports.open(&name) {
                    Ok(export) => export,
                    Err(reason) => {
                        send(writer, &reply(proto::REP_ERR_UNKNOWN, reason.as_bytes())).await?;
                        continue;
                    }
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
                send(writer, &answer).await?;
                if option == proto::OPT_GO {
                    return Ok(Some(export));
                }
            }
            proto::OPT_STARTTLS => {
                send(writer, &reply(proto::REP_ERR_POLICY, b"TLS is not offered")).await?;
            }
            _ => send(writer, &reply(proto::REP_ERR_UNSUP, &[])).await?,
        }
    }
    Err(NbdError::Protocol(format!(
        "more than {} options without choosing an export",
        limits.max_options
    )))
}

/// A simple reply on its way to the socket.
struct Reply {
    cookie: u64,
    error: u32,
    data: Option<Bytes>,
}

/// The transmission phase: requests read in order, executed concurrently, answered as each
/// completes.
async fn transmission<R, W>(
    mut reader: BufReader<R>,
    writer: BufWriter<W>,
    export: Arc<dyn Export>,
    limits: Limits,
) -> Result<(), NbdError>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (replies, pending) = mpsc::channel::<Reply>(limits.max_in_flight.max(1));
    let writing = tokio::spawn(write_replies(writer, pending));
    let slots = Arc::new(Semaphore::new(limits.max_in_flight.max(1)));
    let budget_units = limits.max_bytes_in_flight.div_ceil(BUDGET_UNIT).max(1);
    let budget = Arc::new(Semaphore::new(budget_units));
    let ended = loop {
        let mut header = [0u8; proto::REQUEST_BYTES];
        match reader.read_exact(&mut header).await {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                tracing::debug!("NBD client closed the connection without NBD_CMD_DISC");
                break Ok(());
            }
            Err(error) => break Err(NbdError::Io(error)),
        }
        let request = match Request::parse(&header) {
            Ok(request) => request,
            Err(reason) => break Err(NbdError::Protocol(reason)),
        };
        if request.command == Command::Disconnect {
            break Ok(());
        }
        let slot = slots.clone().acquire_owned().await.expect("the semaphore is never closed");
        let data = if request.command == Command::Write {
            if request.length > limits.max_request_bytes {
                break Err(NbdError::Protocol(format!(
                    "a write of {} bytes (the maximum block size is {})",
                    request.length, limits.max_request_bytes
                )));
            }
            let units = (request.length as usize).div_ceil(BUDGET_UNIT).clamp(1, budget_units);
            let held = budget
                .clone()
                .acquire_many_owned(units as u32)
                .await
                .expect("the semaphore is never closed");
            let mut data = BytesMut::zeroed(request.length as usize);
            if let Err(error) = reader.read_exact(&mut data).await {
                break Err(NbdError::Io(error));
            }
            Some((data.freeze(), held))
        } else {
            None
        };
        let export = export.clone();
        let replies = replies.clone();
        let max = limits.max_request_bytes;
        tokio::spawn(async move {
            let (data, held) = match data {
                Some((data, held)) => (Some(data), Some(held)),
                None => (None, None),
            };
            let reply = execute(&*export, request, data, max).await;
            drop(held);
            // The writer is gone only when the client is.
            let _ = replies.send(reply).await;
            drop(slot);
        });
    };
    // Requests in flight finish and are answered; then the writer ends.
    drop(replies);
    match writing.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) if ended.is_ok() => return Err(NbdError::Io(error)),
        Ok(Err(error)) => tracing::debug!(%error, "NBD replies could not all be sent"),
        Err(error) => tracing::warn!(%error, "the NBD reply writer failed"),
    }
    ended
}

/// Runs one request against the export: its reply.
async fn execute(export: &dyn Export, request: Request, data: Option<Bytes>, max: u32) -> Reply {
    let cookie = request.cookie;
    let answer = |result: Result<Option<Bytes>, Errno>| match result {
        Ok(data) => Reply { cookie, error: 0, data },
        Err(errno) => Reply { cookie, error: errno.code(), data: None },
    };
    if request.flags & !proto::CMD_FLAGS_KNOWN != 0 {
        return answer(Err(Errno::Invalid));
    }
    let fua = request.flags & proto::CMD_FLAG_FUA != 0;
    let in_range = request
        .offset
        .checked_add(u64::from(request.length))
        .is_some_and(|end| end <= export.size());
    let writable = |beyond: Errno| {
        if export.read_only() {
            Err(Errno::Perm)
        } else if !in_range {
            Err(beyond)
        } else {
            Ok(())
        }
    };
    let result = match request.command {
        Command::Read if request.length > max || !in_range => Err(Errno::Invalid),
        Command::Read => match export.read(request.offset, request.length).await {
            Ok(bytes) if bytes.len() == request.length as usize => Ok(Some(bytes)),
            Ok(bytes) => {
                tracing::error!(
                    asked = request.length,
                    got = bytes.len(),
                    "an export answered a read with the wrong length"
                );
                Err(Errno::Io)
            }
            Err(errno) => Err(errno),
        },
        Command::Write => match writable(Errno::NoSpace) {
            Ok(()) => {
                export.write(request.offset, data.unwrap_or_default(), fua).await.map(|()| None)
            }
            Err(errno) => Err(errno),
        },
        Command::Flush => export.flush().await.map(|()| None),
        Command::Trim => match writable(Errno::Invalid) {
            Ok(()) => export.trim(request.offset, request.length, fua).await.map(|()| None),
            Err(errno) => Err(errno),
        },
        Command::WriteZeroes => match writable(Errno::NoSpace) {
            Ok(()) => {
                let may_trim = request.flags & proto::CMD_FLAG_NO_HOLE == 0;
                export
                    .write_zeroes(request.offset, request.length, may_trim, fua)
                    .await
                    .map(|()| None)
            }
            Err(errno) => Err(errno),
        },
        Command::Disconnect | Command::Other(_) => Err(Errno::Invalid),
    };
    answer(result)
}

/// Sends replies as they come, flushing when none is waiting.
async fn write_replies<W: AsyncWrite + Unpin>(
    mut writer: BufWriter<W>,
    mut pending: mpsc::Receiver<Reply>,
) -> std::io::Result<()> {
    while let Some(reply) = pending.recv().await {
        writer.write_all(&proto::simple_reply(reply.error, reply.cookie)).await?;
        if let Some(data) = &reply.data {
            writer.write_all(data).await?;
        }
        if pending.is_empty() {
            writer.flush().await?;
        }
    }
    writer.flush().await?;
    writer.shutdown().await
}
