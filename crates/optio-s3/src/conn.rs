//! The gateway's connections: the accept loop, a limit on connections, and timeouts for slow
//! or stalled clients, over HTTP/1.1 and HTTP/2 (h2c, and h2 over TLS).
//!
//! The limits, phases, timeouts and accept pauses are [`optio_net::listen`]'s, shared with
//! the storage servers' connections (`optio-server/src/conn.rs`), so that one set of numbers
//! and one phase machine describe both. Each connection is in one of three
//! phases, which decide how long it may stay silent:
//!
//! * **head** — from the moment it is accepted (its TLS handshake included), or from the first
//!   byte of its next HTTP/1 request, until a request's headers are complete: at most the
//!   *header timeout* (default 10 s). A slowloris client that trickles its headers is closed
//!   when it runs out;
//! * **busy** — requests are in flight (HTTP/1: one; HTTP/2: its streams), from their headers
//!   until their answers are sent: a request body that sends no byte for the *body timeout*
//!   (default 30 s) fails the request, and an answer the client reads nothing of for as long
//!   fails the connection (a client that asks for an object and never reads it);
//! * **idle** — no request in flight: closed after the *idle timeout* (default 60 s).
//!
//! hyper's own `header_read_timeout` is not used: it also runs while a keep-alive connection
//! waits for its next request, so it cannot tell slow headers from an idle connection (Go's
//! `net/http` splits them the same way, as `ReadHeaderTimeout` and `IdleTimeout`). An HTTP/2
//! connection's bytes while it is idle (pings, window updates, headers of a stream not yet
//! complete) do not start a head phase: such a connection is closed by the idle timeout unless a
//! request completes its headers. HTTP/2 connections are also pinged every
//! [`H2_KEEP_ALIVE_INTERVAL`] and closed when a ping goes unanswered for
//! [`H2_KEEP_ALIVE_TIMEOUT`], and carry at most [`H2_STREAMS_MAX`] requests at once.
//!
//! **The connection limit** (default: half the soft limit on open files, at most 4,096, at
//! least 64) bounds the file descriptors connections use, so the gateway never runs out of
//! them (the other half is for its connections to the storage servers). A connection accepted
//! at the limit makes the gateway close the connection that has been idle (or sending its
//! headers) the longest, and is served once it is gone: an idle crowd cannot keep a client out.
//! When every connection has a request in flight, the new connection is closed at once (each
//! request in flight is bounded by the body timeout).
//!
//! An accept that fails for want of resources (EMFILE, ENFILE, ENOBUFS) pauses the loop, from
//! [`ACCEPT_ERROR_PAUSE_MIN`] doubling to [`ACCEPT_ERROR_PAUSE_MAX`] while it goes on failing,
//! and is logged at most once per [`ACCEPT_ERROR_LOG_INTERVAL`] with the count of the others.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use optio_net::listen::{
    AcceptErrors, BusyGuard, Registry, Tracked, Watched, admit, is_connection_error, sleep_until,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub use optio_net::listen::{
    ACCEPT_ERROR_LOG_INTERVAL, ACCEPT_ERROR_PAUSE_MAX, ACCEPT_ERROR_PAUSE_MIN,
    BODY_TIMEOUT_DEFAULT, BodyTimeout, CONNECTIONS_DEFAULT_MAX, CONNECTIONS_DEFAULT_MIN,
    CONNECTIONS_MAX, HEADER_TIMEOUT_DEFAULT, IDLE_TIMEOUT_DEFAULT, Limits, LimitsError, TimedBody,
    default_max_connections,
};

/// Requests one HTTP/2 connection carries at once.
pub const H2_STREAMS_MAX: u32 = 100;
/// How often an HTTP/2 connection is pinged.
pub const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long a ping may go unanswered before the HTTP/2 connection is closed.
pub const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// What the logs call the gateway's connections.
const LABEL: &str = "S3 connection";

/// One connection: its phase ([`Tracked`], shared by its I/O, its service and its task);
/// and what it holds of the gateway's shared budgets.
pub(crate) struct Connection {
    tracked: Arc<Tracked>,
    /// Its share of the bytes of bodies read before their signature can be checked
    /// ([`crate::buffered`]).
    pub(crate) buffered_share: Arc<Semaphore>,
}

impl Connection {
    /// A connection whose share of the buffered bodies' budget is `buffered_share_bytes`.
    fn new(buffered_share_bytes: usize) -> Connection {
        Connection {
            tracked: Arc::new(Tracked::new(LABEL)),
            buffered_share: Arc::new(Semaphore::new(buffered_share_bytes)),
        }
    }
}

/// Answers one request: given the request (its body under the body timeout) and its
/// connection.
pub(crate) trait Handler: Clone + Send + Sync + 'static {
    /// The answer.
    fn handle(
        &self,
        request: http::Request<TimedBody>,
        connection: Arc<Connection>,
    ) -> impl Future<Output = http::Response<s3s::Body>> + Send;
}

/// Serves `handler` on `listener` (TLS first when `tls` is given) until `stop` completes;
/// each connection holds a share of `buffered_share_bytes` of the bodies read before their
/// signature is checked ([`Connection::buffered_share`]).
pub(crate) async fn serve<H: Handler>(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    buffered_share_bytes: usize,
    handler: H,
    stop: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let registry = Arc::new(Registry::default());
    let mut errors = AcceptErrors::new(LABEL);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                errors.succeeded();
                accepted
            }
            // A connection reset or aborted before it was taken: the loop goes on at once.
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                let pause = errors.failed(&error, Instant::now());
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = &mut stop => return,
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Some(permit) = admit(&permits, &registry, limits.max_connections, LABEL).await else {
            drop(stream);
            continue;
        };
        let connection = Arc::new(Connection::new(buffered_share_bytes));
        let id = registry.add(connection.tracked.clone());
        let registry = registry.clone();
        let handler = handler.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            serve_one(stream, peer, tls, connection, limits, handler).await;
            registry.remove(id);
            drop::<OwnedSemaphorePermit>(permit);
        });
    }
}

/// One connection: its TLS handshake (within the header timeout), then HTTP.
async fn serve_one<H: Handler>(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    connection: Arc<Connection>,
    limits: Limits,
    handler: H,
) {
    match tls {
        None => serve_http(stream, peer, connection, limits, handler).await,
        Some(acceptor) => {
            let handshake = tokio::time::timeout(limits.header_timeout, acceptor.accept(stream));
            match handshake.await {
                Ok(Ok(stream)) => serve_http(stream, peer, connection, limits, handler).await,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "an S3 client's TLS handshake failed");
                }
                Err(_) => tracing::debug!(%peer, "an S3 client's TLS handshake timed out"),
            }
        }
    }
}

async fn serve_http<S, H>(
    stream: S,
    peer: SocketAddr,
    connection: Arc<Connection>,
    limits: Limits,
    handler: H,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let tracked = connection.tracked.clone();
    let io = TokioIo::new(Watched::new(stream, tracked.clone(), limits.body_timeout));
    let service = {
        let connection = connection.clone();
        hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let busy = connection.tracked.busy();
            if request.version() == http::Version::HTTP_2 {
                connection.tracked.set_http2();
            }
            // An HTTP/1 request whose body is not read to its end before the answer (an error
            // found from the headers alone, often to a client that waits for `100 Continue`)
            // leaves the connection in doubt: the client may send the body later, or never.
            // hyper then closes the connection after the answer; the answer says so, so that
            // the client does not send its next request on a connection being closed (botocore
            // then reads a stale early answer for it: issue 37, defect 4).
            let http1 = request.version() < http::Version::HTTP_2;
            let ended = Arc::new(AtomicBool::new(request.body().is_end_stream()));
            let request =
                request.map(|body| TimedBody::new(body, limits.body_timeout, Some(ended.clone())));
            let handler = handler.clone();
            let connection = connection.clone();
            async move {
                let mut response = handler.handle(request, connection).await;
                if http1 && !ended.load(Ordering::Acquire) {
                    response
                        .headers_mut()
                        .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
                }
                Ok::<_, Infallible>(response.map(|body| Answer { inner: body, _busy: busy }))
            }
        })
    };
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_STREAMS_MAX)
        .keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    loop {
        let deadline = tracked.deadline(&limits);
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(error) = ended {
                    let error = chain(&*error);
                    tracing::debug!(%peer, %error, "an S3 connection ended with an error");
                }
                return;
            }
            () = sleep_until(deadline) => {
                if tracked.timed_out(&limits) {
                    tracing::debug!(%peer, "an S3 connection timed out: closed");
                    return; // nothing in flight: dropping it closes the socket
                }
            }
            () = tracked.changed() => {}
        }
        if tracked.evicted() {
            tracing::debug!(%peer, "closed to make room at the connection limit");
            return;
        }
    }
}

/// An error and its sources, joined by `: `.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(source) = next {
        text.push_str(": ");
        text.push_str(&source.to_string());
        next = source.source();
    }
    text
}

/// An answer's body, holding its connection busy until sent or dropped.
struct Answer {
    inner: s3s::Body,
    _busy: BusyGuard,
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = <s3s::Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

// (The limits, the phases, the accept loop's pauses and the timed bodies are
// `optio_net::listen`'s, tested there; the gateway's connections are tested end to end in
// `tests/`.)
