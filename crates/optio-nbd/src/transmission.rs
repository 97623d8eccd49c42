//! The transmission phase: requests read in order, executed concurrently, answered as each
//! completes — with a bound on the bytes held.
//!
//! Every read and write holds its bytes in two budgets from the moment it is taken off the
//! socket until its reply has been handed to the socket: the connection's
//! ([`Limits::max_bytes_in_flight`]) and the server's, shared by all its connections
//! ([`Limits::max_total_bytes_in_flight`]). When either is spent, no further request is read:
//! a client that does not read its replies stops being read itself (backpressure through its
//! own socket), instead of the server buffering replies for it. A reply the client does not
//! take within [`Limits::reply_timeout`] ends the connection, giving its budget back; a
//! connection with nothing in flight that sends nothing for [`Limits::idle_timeout`] is closed
//! while the server is crowded ([`Limits::idle_close_connections`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::export::{Errno, Export, Extent};
use crate::handshake::{Context, Session};
use crate::proto::{self, Command, Request};
use crate::server::{Limits, NbdError, Server};

/// Units of the byte budgets (a request holds a whole number of them, at least one).
pub(crate) const BUDGET_UNIT_BYTES: usize = 64 << 10;
/// Bytes of the socket read buffer.
const READ_BUFFER_BYTES: usize = 256 << 10;
/// Bytes of the socket write buffer.
const WRITE_BUFFER_BYTES: usize = 64 << 10;
/// Request and reply data cross the socket in pieces of this size, each within its timeout:
/// a slow client is not a stalled one.
const PIECE_BYTES: usize = 1 << 20;

/// Budget units for `bytes`.
pub(crate) fn units(bytes: usize) -> usize {
    bytes.div_ceil(BUDGET_UNIT_BYTES).max(1)
}

/// Bytes held in both budgets: given back when dropped.
struct Held {
    _connection: OwnedSemaphorePermit,
    _total: OwnedSemaphorePermit,
}

/// The two budgets a connection's requests draw on.
struct Budgets {
    connection: Arc<Semaphore>,
    connection_units: usize,
    total: Arc<Semaphore>,
    total_units: usize,
}

impl Budgets {
    /// Waits until `bytes` fit in both budgets (the connection's first: a connection waiting
    /// for the shared budget holds only its own).
    async fn hold(&self, bytes: usize) -> Held {
        let units = units(bytes);
        let connection = u32::try_from(units.min(self.connection_units)).expect("limits checked");
        let total = u32::try_from(units.min(self.total_units)).expect("limits checked");
        let connection = self
            .connection
            .clone()
            .acquire_many_owned(connection)
            .await
            .expect("the connection's budget is never closed");
        let total = self
            .total
            .clone()
            .acquire_many_owned(total)
            .await
            .expect("the server's budget is never closed");
        Held { _connection: connection, _total: total }
    }
}

/// A reply on its way to the socket — a simple reply, or a structured one's chunks — with
/// the bytes it holds in the budgets.
struct Reply {
    /// The reply's header (with the chunks' small payloads).
    head: Vec<u8>,
    /// The data after it.
    data: Option<Bytes>,
    _held: Option<Held>,
}

/// Most descriptors in one block-status chunk (the protocol's bound is 2^20): a reply holds
/// at most this many per context, and the client asks again from where it stops.
pub(crate) const EXTENTS_MAX: usize = 4096;

/// Bytes of the largest block-status reply (both contexts, every descriptor).
const BLOCK_STATUS_BYTES_MAX: usize = 2 * (proto::CHUNK_HEADER_BYTES + 4 + 8 * EXTENTS_MAX);

/// The bytes of data a request brings or asks for, held while it is in flight: a write's
/// data, a read's answer (none for a read that will be refused as too long), a block status'
/// descriptors at their most.
fn data_bytes(request: &Request, limits: &Limits) -> Option<usize> {
    match request.command {
        Command::Read | Command::Write if request.length <= limits.max_request_bytes => {
            Some(request.length as usize)
        }
        Command::BlockStatus => Some(BLOCK_STATUS_BYTES_MAX),
        _ => None,
    }
}

/// Serves requests on `stream` (what the handshake left: its buffered bytes are the first
/// requests') to `export` until the client disconnects. Every request in flight is answered
/// before this returns.
pub(crate) async fn run<T>(
    stream: BufReader<T>,
    export: Arc<dyn Export>,
    session: Session,
    server: &Server,
) -> Result<(), NbdError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let limits = *server.limits();
    let session = Arc::new(session);
    let buffered = std::io::Cursor::new(stream.buffer().to_vec());
    let (read_half, write_half) = tokio::io::split(stream.into_inner());
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, buffered.chain(read_half));
    let writer = BufWriter::with_capacity(WRITE_BUFFER_BYTES, write_half);
    let in_flight_max = limits.max_in_flight.max(1);
    let (replies, pending) = mpsc::channel::<Reply>(in_flight_max);
    let writing = tokio::spawn(write_replies(writer, pending, limits.reply_timeout));
    let slots = Arc::new(Semaphore::new(in_flight_max));
    let connection_units = units(limits.max_bytes_in_flight);
    let budgets = Budgets {
        connection: Arc::new(Semaphore::new(connection_units)),
        connection_units,
        total_units: units(limits.max_total_bytes_in_flight),
        total: server.total.clone(),
    };
    let ended = loop {
        // The next request's first byte: a connection with nothing in flight may wait for it
        // only so long.
        let first = tokio::select! {
            biased;
            first = reader.read_u8() => first,
            () = replies.closed() => break Err(NbdError::RepliesNotRead(limits.reply_timeout)),
            () = idle(server, &slots, in_flight_max) => {
                break Err(NbdError::Idle(limits.idle_timeout.unwrap_or_default()));
            }
        };
        let first = match first {
            Ok(byte) => byte,
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                tracing::debug!("NBD client closed the connection without NBD_CMD_DISC");
                break Ok(());
            }
            Err(error) => break Err(NbdError::Io(error)),
        };
        let mut header = [0u8; proto::REQUEST_BYTES];
        header[0] = first;
        if let Err(error) = read_within(&mut reader, &mut header[1..], limits.request_timeout).await
        {
            break Err(error);
        }
        let request = match Request::parse(&header) {
            Ok(request) => request,
            Err(reason) => break Err(NbdError::Protocol(reason.to_string())),
        };
        if request.command == Command::Disconnect {
            break Ok(());
        }
        if request.command == Command::Write && request.length > limits.max_request_bytes {
            break Err(NbdError::Protocol(format!(
                "a write of {} bytes (the maximum block size is {})",
                request.length, limits.max_request_bytes
            )));
        }
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = replies.closed() => break Err(NbdError::RepliesNotRead(limits.reply_timeout)),
        };
        let held = match data_bytes(&request, &limits) {
            Some(bytes) => tokio::select! {
                held = budgets.hold(bytes) => Some(held),
                () = replies.closed() => {
                    break Err(NbdError::RepliesNotRead(limits.reply_timeout));
                }
            },
            None => None,
        };
        let data = if request.command == Command::Write {
            let mut data = BytesMut::zeroed(request.length as usize);
            if let Err(error) = read_within(&mut reader, &mut data, limits.request_timeout).await {
                break Err(error);
            }
            Some(data.freeze())
        } else {
            None
        };
        let export = export.clone();
        let session = session.clone();
        let replies = replies.clone();
        let max = limits.max_request_bytes;
        tokio::spawn(async move {
            let mut reply = execute(&*export, &session, request, data, max).await;
            reply._held = held;
            // The writer is gone only when the client is (or stopped reading).
            let _ = replies.send(reply).await;
            drop(slot);
        });
    };
    // Requests in flight finish and are answered; then the writer ends.
    drop(replies);
    match writing.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) if ended.is_ok() => return Err(error),
        Ok(Err(error)) => tracing::debug!(%error, "NBD replies could not all be sent"),
        Err(error) => tracing::warn!(%error, "the NBD reply writer failed"),
    }
    ended
}

/// Completes once the connection has been idle (nothing in flight) for the idle timeout
/// while the server is crowded; never without an idle timeout.
async fn idle(server: &Server, slots: &Semaphore, in_flight_max: usize) {
    let limits = server.limits();
    let Some(timeout) = limits.idle_timeout else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(timeout).await;
        let crowded = server.connections_open() >= limits.idle_close_connections;
        if crowded && slots.available_permits() == in_flight_max {
            return;
        }
    }
}

/// What a request that succeeded answers.
enum Answer {
    /// Nothing but success.
    Done,
    /// A read's bytes.
    Data(Bytes),
    /// A block status' extents (within the request, at least one).
    Extents(Vec<Extent>),
}

/// Runs one request against the export: its reply.
async fn execute(
    export: &dyn Export,
    session: &Session,
    request: Request,
    data: Option<Bytes>,
    max: u32,
) -> Reply {
    let result = run_request(export, session, request, data, max).await;
    encode(session, &request, result)
}

/// Runs one request against the export: what it answers.
async fn run_request(
    export: &dyn Export,
    session: &Session,
    request: Request,
    data: Option<Bytes>,
    max: u32,
) -> Result<Answer, Errno> {
    let known = match request.command {
        Command::BlockStatus => proto::CMD_FLAGS_KNOWN | proto::CMD_FLAG_REQ_ONE,
        _ => proto::CMD_FLAGS_KNOWN,
    };
    if request.flags & !known != 0 {
        return Err(Errno::Invalid);
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
    let done = |result: Result<(), Errno>| result.map(|()| Answer::Done);
    match request.command {
        Command::Read if request.length > max || !in_range => Err(Errno::Invalid),
        Command::Read => match export.read(request.offset, request.length).await {
            Ok(bytes) if bytes.len() == request.length as usize => Ok(Answer::Data(bytes)),
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
        Command::Write => {
            writable(Errno::NoSpace)?;
            done(export.write(request.offset, data.unwrap_or_default(), fua).await)
        }
        Command::Flush => done(export.flush().await),
        Command::Trim => {
            writable(Errno::Invalid)?;
            done(export.trim(request.offset, request.length, fua).await)
        }
        Command::WriteZeroes => {
            writable(Errno::NoSpace)?;
            let may_trim = request.flags & proto::CMD_FLAG_NO_HOLE == 0;
            done(export.write_zeroes(request.offset, request.length, may_trim, fua).await)
        }
        Command::BlockStatus => {
            if session.contexts.is_empty() || request.length == 0 || !in_range {
                return Err(Errno::Invalid);
            }
            let extents = export.block_status(request.offset, request.length).await?;
            Ok(Answer::Extents(within(extents, request.length)))
        }
        Command::Disconnect | Command::Other(_) => Err(Errno::Invalid),
    }
}

/// An export's extents cut to the `length` asked (none of zero length; an empty answer is one
/// extent of data).
fn within(extents: Vec<Extent>, length: u32) -> Vec<Extent> {
    let mut out = Vec::new();
    let mut left = length;
    for mut extent in extents {
        if left == 0 {
            break;
        }
        extent.length = extent.length.min(left);
        if extent.length == 0 {
            continue;
        }
        left -= extent.length;
        out.push(extent);
    }
    if out.is_empty() {
        out.push(Extent::data(length));
    }
    out
}

/// One context's descriptors of `extents`: (length, flags), neighbours with the same flags
/// joined, at most [`EXTENTS_MAX`] (one with `req_one`).
fn descriptors(extents: &[Extent], context: Context, req_one: bool) -> Vec<(u32, u32)> {
    let most = if req_one { 1 } else { EXTENTS_MAX };
    let mut out: Vec<(u32, u32)> = Vec::new();
    for extent in extents {
        let flags = match context {
            Context::Allocation => extent.allocation_flags(),
            Context::Depth => extent.depth,
        };
        let full = out.len() == most;
        match out.last_mut() {
            Some((length, last)) if *last == flags => *length += extent.length,
            _ if full => break,
            _ => out.push((extent.length, flags)),
        }
    }
    out
}

/// A request's result as the bytes of its reply: simple, or structured where negotiated (a
/// read's data or hole, block status, errors).
fn encode(session: &Session, request: &Request, result: Result<Answer, Errno>) -> Reply {
    let cookie = request.cookie;
    let reply = |head: Vec<u8>, data: Option<Bytes>| Reply { head, data, _held: None };
    match result {
        Err(errno) if session.structured => {
            reply(proto::error_chunk(errno.code(), cookie, errno.message()), None)
        }
        Err(errno) => reply(proto::simple_reply(errno.code(), cookie).to_vec(), None),
        Ok(Answer::Data(data)) if session.structured => {
            let length = data.len() as u32;
            if data.iter().all(|b| *b == 0) {
                let mut head = proto::chunk_header(
                    proto::REPLY_FLAG_DONE,
                    proto::REPLY_TYPE_OFFSET_HOLE,
                    cookie,
                    12,
                )
                .to_vec();
                head.extend_from_slice(&request.offset.to_be_bytes());
                head.extend_from_slice(&length.to_be_bytes());
                return reply(head, None);
            }
            let mut head = proto::chunk_header(
                proto::REPLY_FLAG_DONE,
                proto::REPLY_TYPE_OFFSET_DATA,
                cookie,
                8 + length,
            )
            .to_vec();
            head.extend_from_slice(&request.offset.to_be_bytes());
            reply(head, Some(data))
        }
        Ok(Answer::Data(data)) => reply(proto::simple_reply(0, cookie).to_vec(), Some(data)),
        Ok(Answer::Extents(extents)) => {
            let req_one = request.flags & proto::CMD_FLAG_REQ_ONE != 0;
            let mut head = Vec::new();
            for (i, context) in session.contexts.iter().enumerate() {
                let described = descriptors(&extents, *context, req_one);
                let last = i + 1 == session.contexts.len();
                let flags = if last { proto::REPLY_FLAG_DONE } else { 0 };
                let length = 4 + 8 * described.len() as u32;
                let kind = proto::REPLY_TYPE_BLOCK_STATUS;
                head.extend_from_slice(&proto::chunk_header(flags, kind, cookie, length));
                head.extend_from_slice(&context.id().to_be_bytes());
                for (length, flags) in described {
                    head.extend_from_slice(&length.to_be_bytes());
                    head.extend_from_slice(&flags.to_be_bytes());
                }
            }
            reply(head, None)
        }
        Ok(Answer::Done) => reply(proto::simple_reply(0, cookie).to_vec(), None),
    }
}

/// Fills `buffer` from the socket, failing if the client sends none of a piece for `timeout`.
async fn read_within<R: AsyncRead + Unpin>(
    reader: &mut R,
    buffer: &mut [u8],
    timeout: Duration,
) -> Result<(), NbdError> {
    for piece in buffer.chunks_mut(PIECE_BYTES) {
        match tokio::time::timeout(timeout, reader.read_exact(piece)).await {
            Ok(read) => read?,
            Err(_) => return Err(NbdError::RequestTimeout(timeout)),
        };
    }
    Ok(())
}

/// Hands `bytes` to the socket, failing if the client takes none of a piece for `timeout`.
async fn write_within<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
    timeout: Duration,
) -> Result<(), NbdError> {
    for piece in bytes.chunks(PIECE_BYTES) {
        match tokio::time::timeout(timeout, writer.write_all(piece)).await {
            Ok(written) => written?,
            Err(_) => return Err(NbdError::RepliesNotRead(timeout)),
        }
    }
    Ok(())
}

/// Sends replies as they come, flushing when none is waiting; each reply's budget is given
/// back once its bytes are in the socket.
async fn write_replies<W: AsyncWrite + Unpin>(
    mut writer: BufWriter<W>,
    mut pending: mpsc::Receiver<Reply>,
    timeout: Duration,
) -> Result<(), NbdError> {
    while let Some(reply) = pending.recv().await {
        write_within(&mut writer, &reply.head, timeout).await?;
        if let Some(data) = &reply.data {
            write_within(&mut writer, data, timeout).await?;
        }
        if pending.is_empty() {
            match tokio::time::timeout(timeout, writer.flush()).await {
                Ok(flushed) => flushed?,
                Err(_) => return Err(NbdError::RepliesNotRead(timeout)),
            }
        }
        drop(reply);
    }
    match tokio::time::timeout(timeout, writer.flush()).await {
        Ok(flushed) => flushed?,
        Err(_) => return Err(NbdError::RepliesNotRead(timeout)),
    }
    writer.shutdown().await?;
    Ok(())
}
