//! Serving a connection upgraded to frames (see [`optio_proto::frames`]): many requests in
//! flight on one connection, each run through the same router as an HTTP/1.1 request and
//! answered as soon as it is done.
//!
//! The connection keeps its place in the server's connection limit and its timeouts: it is
//! busy while a request is in flight, its next frame's head must arrive within the header
//! timeout once its first byte has, and it is closed when it has been idle for the idle
//! timeout, when the limit needs its place while it is quiet, or when the server stops (after
//! the requests in flight are answered). A frame that breaks the protocol closes it, with a
//! log line.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use axum::Router;
use axum::http::{HeaderValue, Method, Request, header};
use bytes::Bytes;
use optio_proto::ErrorKind;
use optio_proto::answer::{self, Answer, Envelope};
use optio_proto::frames::{self, FrameError, PREFIX_BYTES};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinSet;

use super::{Connection, Limits, LocalFile};

/// Bytes read from a connection's socket at once.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// Requests in flight on one connection at most: the next frame is read once one of them is
/// answered (as a connection of HTTP/1.1 has one, this bounds what a connection holds).
const IN_FLIGHT_MAX: usize = 128;

/// What a frame's request is served with.
#[derive(Clone)]
pub(crate) struct Context {
    pub(crate) router: Router,
    /// The connection it came on, whose marks its requests take.
    pub(crate) channel: super::Channel,
}

/// Serves frames on `io` until the client closes it, a frame breaks the protocol, a timeout
/// or the connection limit closes it, or the server stops.
pub(crate) async fn serve<S>(
    io: S,
    context: Context,
    connection: Arc<Connection>,
    limits: Limits,
    stopping: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (reader, writer) = tokio::io::split(io);
    // Frames that arrive together are read with one system call.
    let reader = tokio::io::BufReader::with_capacity(READ_BUFFER_BYTES, reader);
    let writer = Arc::new(Mutex::new(writer));
    let mut in_flight = JoinSet::new();
    tokio::select! {
        result = read_frames(reader, &context, &connection, &writer, &mut in_flight) => {
            match result {
                Err(Ended::Protocol(error)) => {
                    tracing::warn!(%error, "a client broke the frames protocol: disconnected");
                }
                Err(error) => tracing::debug!(%error, "frames connection ended"),
                Ok(()) => {}
            }
        }
        () = super::watch_quiet(&connection, &limits, stopping) => {}
    }
    // The requests in flight are answered (each is bounded by the server's own timeouts).
    while in_flight.join_next().await.is_some() {}
    let _ = writer.lock().await.shutdown().await;
}

/// Why a frames connection ended.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("the client closed the connection")]
    Closed,
    #[error("reading from the client failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the client broke the protocol: {0}")]
    Protocol(#[from] FrameError),
}

async fn read_frames<R, W>(
    mut reader: R,
    context: &Context,
    connection: &Arc<Connection>,
    writer: &Arc<Mutex<W>>,
    in_flight: &mut JoinSet<()>,
) -> Result<(), Ended>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut head = Vec::new();
    loop {
        let mut prefix = [0u8; PREFIX_BYTES];
        match reader.read_exact(&mut prefix).await {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(Ended::Closed);
            }
            Err(error) => return Err(error.into()),
        }
        let (head_len, body_len) = frames::decode_prefix(prefix)?;
        head.resize(head_len, 0);
        reader.read_exact(&mut head).await?;
        let body = optio_net::bodies::read_body(&mut reader, body_len).await?;
        let request = match build_request(&head, body, context) {
            Ok(request) => request,
            Err(Refusal::Protocol(error)) => return Err(error.into()),
            Err(Refusal::Request { id, reason }) => {
                tracing::debug!(id, %reason, "a framed request refused");
                let answer = refusal(id, &reason);
                write_frame(writer, Frame::whole(answer)).await?;
                continue;
            }
        };
        let busy = connection.tracked.busy();
        let (id, request) = request;
        // (An answer's open file is for the local socket only: none is made here.)
        let router = context.router.clone();
        let mut answering = Box::pin(async move { answer(router, id, request).await.0 });
        // A request the handler answers without waiting (a small read or write in place) is
        // answered here: a task of its own would cost a wake-up of another thread for nothing.
        let polled = std::future::poll_fn(|cx| Poll::Ready(answering.as_mut().poll(cx))).await;
        if let Poll::Ready(frame) = polled {
            write_frame(writer, frame).await?;
            drop(busy);
            continue;
        }
        let writer = writer.clone();
        // Reap the requests already answered, so the set holds only those in flight, and
        // read no more frames while the connection has its most in flight.
        while in_flight.try_join_next().is_some() {}
        while in_flight.len() >= IN_FLIGHT_MAX {
            in_flight.join_next().await;
        }
        in_flight.spawn(async move {
            let frame = answering.await;
            if let Err(error) = write_frame(&writer, frame).await {
                tracing::debug!(%error, "cannot send a framed answer");
            }
            drop(busy);
        });
    }
}

pub(crate) enum Refusal {
    /// The head does not parse: the connection cannot go on.
    Protocol(FrameError),
    /// The head parses but is not a request the router can take.
    Request { id: u64, reason: String },
}

pub(crate) fn build_request(
    head: &[u8],
    body: Bytes,
    context: &Context,
) -> Result<(u64, Request<axum::body::Body>), Refusal> {
    let parsed = frames::decode_request(head).map_err(Refusal::Protocol)?;
    let id = parsed.id;
    let refuse = |reason: String| Refusal::Request { id, reason };
    let method = Method::from_bytes(parsed.method.as_bytes())
        .map_err(|e| refuse(format!("bad method {:?}: {e}", parsed.method)))?;
    let mut builder = Request::builder().method(method.clone()).uri(parsed.path);
    for (name, value) in &parsed.headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder
        .body(axum::body::Body::from(body.clone()))
        .map_err(|e| refuse(format!("bad request: {e}")))?;
    if !body.is_empty() || !matches!(method, Method::GET | Method::HEAD | Method::DELETE) {
        request.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    context.channel.mark(request.extensions_mut());
    Ok((id, request))
}

/// An answer frame: its prefix and head (and a small body after them), then a large body
/// as the handler made it — sent after the head, not copied behind it.
pub(crate) struct Frame {
    /// The prefix and head, and a body of at most [`INLINE_BODY_BYTES`].
    pub(crate) head: Vec<u8>,
    /// A larger body (empty otherwise).
    pub(crate) body: Bytes,
}

/// Bodies up to this size are copied behind the head (one write of one buffer); larger ones
/// (a 4 MiB object read) are written from where they were read to: a copy of 4 MiB into a
/// fresh buffer costs more than a second write.
const INLINE_BODY_BYTES: usize = 16 << 10;

impl Frame {
    /// A frame already whole (a refusal).
    pub(crate) fn whole(head: Vec<u8>) -> Frame {
        Frame { head, body: Bytes::new() }
    }

    /// The frame in one buffer (the local socket's answers, which carry no data).
    pub(crate) fn into_vec(self) -> Vec<u8> {
        let mut out = self.head;
        out.extend_from_slice(&self.body);
        out
    }
}

/// Runs `request` through the router; its answer as a frame, and the open file it carries
/// (an open over the local socket).
pub(crate) async fn answer(
    mut router: Router,
    id: u64,
    request: Request<axum::body::Body>,
) -> (Frame, Option<LocalFile>) {
    // A Router is always ready (its `poll_ready` does nothing).
    let response = match tower_service::Service::call(&mut router, request).await {
        Ok(response) => response,
        Err(infallible) => match infallible {},
    };
    let (mut parts, body) = response.into_parts();
    let file = parts.extensions.remove::<LocalFile>();
    let body = match axum::body::to_bytes(body, frames::BODY_BYTES_MAX).await {
        Ok(body) => body,
        Err(error) => {
            let reason = format!("the answer cannot go in a frame ({error}): use HTTP");
            return (Frame::whole(refusal(id, &reason)), None);
        }
    };
    let headers = parts.headers.iter().filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)));
    let inline = body.len() <= INLINE_BODY_BYTES;
    let mut head = Vec::with_capacity(256 + if inline { body.len() } else { 0 });
    match frames::encode_answer(&mut head, id, parts.status.as_u16(), headers, body.len()) {
        Ok(()) if inline => {
            head.extend_from_slice(&body);
            (Frame::whole(head), file)
        }
        Ok(()) => (Frame { head, body }, file),
        Err(error) => {
            let reason = format!("the answer cannot go in a frame ({error}): use HTTP");
            (Frame::whole(refusal(id, &reason)), None)
        }
    }
}

/// An error answer (`io`, HTTP 500) to request `id`, with `reason`, in the form every
/// refusal takes ([`Answer::encode`]).
pub(crate) fn refusal(id: u64, reason: &str) -> Vec<u8> {
    let refused: Answer<Vec<u8>> = Answer::Refused(answer::Refusal::new(ErrorKind::Io, reason));
    let encoded = refused.encode(&Envelope::default());
    let headers = encoded.headers.iter().map(|(name, value)| (*name, value.as_str()));
    let mut frame = Vec::with_capacity(128 + encoded.body.len());
    frames::encode_answer(&mut frame, id, encoded.status, headers, encoded.body.len())
        .expect("an error answer fits a frame");
    frame.extend_from_slice(&encoded.body);
    frame
}

async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &Mutex<W>,
    frame: Frame,
) -> std::io::Result<()> {
    let mut writer = writer.lock().await;
    optio_net::bodies::write_all_pair(&mut *writer, &frame.head, &frame.body).await?;
    writer.flush().await
}
