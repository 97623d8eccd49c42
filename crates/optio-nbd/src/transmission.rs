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

use crate::export::{Errno, Export};
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

/// A simple reply on its way to the socket, with the bytes it holds in the budgets.
struct Reply {
    cookie: u64,
    error: u32,
    data: Option<Bytes>,
    _held: Option<Held>,
}

/// The bytes of data a request brings or asks for, held while it is in flight: a write's
/// data, a read's answer (none for a read that will be refused as too long).
fn data_bytes(request: &Request, limits: &Limits) -> Option<usize> {
    match request.command {
        Command::Read | Command::Write if request.length <= limits.max_request_bytes => {
            Some(request.length as usize)
        }
        _ => None,
    }
}

/// Serves requests on `stream` (what the handshake left: its buffered bytes are the first
/// requests') to `export` until the client disconnects. Every request in flight is answered
/// before this returns.
pub(crate) async fn run<T>(
    stream: BufReader<T>,
    export: Arc<dyn Export>,
    server: &Server,
) -> Result<(), NbdError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let limits = *server.limits();
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
        let replies = replies.clone();
        let max = limits.max_request_bytes;
        tokio::spawn(async move {
            let mut reply = execute(&*export, request, data, max).await;
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

/// Runs one request against the export: its reply.
async fn execute(export: &dyn Export, request: Request, data: Option<Bytes>, max: u32) -> Reply {
    let cookie = request.cookie;
    let answer = |result: Result<Option<Bytes>, Errno>| match result {
        Ok(data) => Reply { cookie, error: 0, data, _held: None },
        Err(errno) => Reply { cookie, error: errno.code(), data: None, _held: None },
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
        let header = proto::simple_reply(reply.error, reply.cookie);
        write_within(&mut writer, &header, timeout).await?;
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
