//! The gateway's connections: the accept loop, a limit on connections, and timeouts for slow
//! or stalled clients, over HTTP/1.1 and HTTP/2 (h2c, and h2 over TLS).
//!
//! Built as the storage servers' connections are (`optio-server/src/conn.rs`), with the same
//! defaults, so that one set of numbers describes both. Each connection is in one of three
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

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Default longest time from accepting a connection, or from the first byte of a request, to
/// the end of its headers.
pub const HEADER_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Default longest time a request body may send nothing, or a client read nothing of an
/// answer.
pub const BODY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Default longest time a connection may wait with no request in flight.
pub const IDLE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);
/// The connection limit's default is at most this many…
pub const CONNECTIONS_DEFAULT_MAX: usize = 4096;
/// … and at least this many.
pub const CONNECTIONS_DEFAULT_MIN: usize = 64;
/// The largest connection limit taken.
pub const CONNECTIONS_MAX: usize = 1 << 20;
/// Requests one HTTP/2 connection may have in flight at once.
pub const H2_STREAMS_MAX: u32 = 100;
/// How often an HTTP/2 connection is pinged.
pub const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long a ping may go unanswered before its connection is closed.
pub const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a connection accepted at the limit waits for the connection closed in its favour.
const EVICTION_WAIT: Duration = Duration::from_secs(1);
/// The accept loop's first pause after an error that is not about one connection (EMFILE:
/// out of file descriptors)…
pub const ACCEPT_ERROR_PAUSE_MIN: Duration = Duration::from_millis(50);
/// … doubling, while accepts go on failing, up to this.
pub const ACCEPT_ERROR_PAUSE_MAX: Duration = Duration::from_secs(1);
/// Accept errors are logged at most once per this.
pub const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The connection limit used when none is configured: half the soft limit on open files (the
/// other half is for the gateway's connections to the storage servers), within
/// [`CONNECTIONS_DEFAULT_MIN`]..=[`CONNECTIONS_DEFAULT_MAX`].
pub fn default_max_connections() -> usize {
    let soft = optio_net::local::open_files_soft_limit().unwrap_or(u64::MAX);
    usize::try_from(soft / 2)
        .unwrap_or(usize::MAX)
        .clamp(CONNECTIONS_DEFAULT_MIN, CONNECTIONS_DEFAULT_MAX)
}

/// How connections are limited and timed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// See [`HEADER_TIMEOUT_DEFAULT`].
    pub header_timeout: Duration,
    /// See [`BODY_TIMEOUT_DEFAULT`].
    pub body_timeout: Duration,
    /// See [`IDLE_TIMEOUT_DEFAULT`].
    pub idle_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: HEADER_TIMEOUT_DEFAULT,
            body_timeout: BODY_TIMEOUT_DEFAULT,
            idle_timeout: IDLE_TIMEOUT_DEFAULT,
            max_connections: default_max_connections(),
        }
    }
}

impl Limits {
    /// Refuses zero timeouts and limits out of range.
    pub fn check(&self) -> Result<(), String> {
        for (name, value) in [
            ("header timeout", self.header_timeout),
            ("body timeout", self.body_timeout),
            ("idle timeout", self.idle_timeout),
        ] {
            if value.is_zero() {
                return Err(format!("the {name} is zero; it must be positive"));
            }
        }
        if !(1..=CONNECTIONS_MAX).contains(&self.max_connections) {
            return Err(format!(
                "the connection limit is {}; it must be 1 to {CONNECTIONS_MAX}",
                self.max_connections
            ));
        }
        Ok(())
    }
}

/// A request body that sent nothing for the body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the client sent no byte of the request body for {} s", .0.as_secs_f64())]
pub struct BodyTimeout(pub Duration);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for (the rest of) a request's headers, since then.
    Head(Instant),
    /// Requests in flight.
    Busy(u32),
    /// No request in flight, since then.
    Idle(Instant),
}

/// One connection: its phase, shared by its I/O, its service and its task; and what it holds
/// of the gateway's shared budgets.
pub(crate) struct Connection {
    phase: Mutex<Phase>,
    /// Wakes the connection's task: its phase changed, or it is asked to close.
    wake: Notify,
    /// The accept loop asks it to make room.
    evict: AtomicBool,
    /// It speaks HTTP/2 (seen on its first request): its reads do not start a head phase.
    http2: AtomicBool,
    /// Its share of the bytes of bodies read before their signature can be checked
    /// ([`crate::buffered`]).
    pub(crate) buffered_share: Arc<Semaphore>,
}

impl Connection {
    /// A connection whose share of the buffered bodies' budget is `buffered_share_bytes`.
    fn new(buffered_share_bytes: usize) -> Connection {
        Connection {
            phase: Mutex::new(Phase::Head(Instant::now())),
            wake: Notify::new(),
            evict: AtomicBool::new(false),
            http2: AtomicBool::new(false),
            buffered_share: Arc::new(Semaphore::new(buffered_share_bytes)),
        }
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().expect("the phase lock is never poisoned")
    }

    /// Bytes arrived: an idle HTTP/1 connection starts a request.
    fn on_read(&self) {
        if self.http2.load(Ordering::Relaxed) {
            return;
        }
        let mut phase = self.phase.lock().expect("the phase lock is never poisoned");
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Head(Instant::now());
            drop(phase);
            self.wake.notify_one();
        }
    }

    /// A request's headers are in: busy until the guard (held by the answer's body) drops.
    fn busy(self: &Arc<Self>) -> BusyGuard {
        let mut phase = self.phase.lock().expect("the phase lock is never poisoned");
        *phase = match *phase {
            Phase::Busy(n) => Phase::Busy(n.saturating_add(1)),
            Phase::Head(_) | Phase::Idle(_) => Phase::Busy(1),
        };
        drop(phase);
        self.wake.notify_one();
        BusyGuard(self.clone())
    }

    /// When the phase's timeout expires (none while busy).
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        match self.phase() {
            Phase::Head(since) => Some(since + limits.header_timeout),
            Phase::Idle(since) => Some(since + limits.idle_timeout),
            Phase::Busy(_) => None,
        }
    }

    /// Since when it has had no request in flight; `None` while busy.
    fn quiet_since(&self) -> Option<Instant> {
        match self.phase() {
            Phase::Head(since) | Phase::Idle(since) => Some(since),
            Phase::Busy(_) => None,
        }
    }

    /// Whether its phase's timeout has passed (checked again when the timer fires: a request
    /// may have begun meanwhile).
    fn timed_out(&self, limits: &Limits, peer: SocketAddr) -> bool {
        let expired = self.deadline(limits).is_some_and(|d| d <= Instant::now());
        if expired {
            tracing::debug!(%peer, phase = ?self.phase(), "an S3 connection timed out: closed");
        }
        expired
    }

    /// Whether it should close to make room at the connection limit: asked to, and still
    /// quiet (a request that began since cancels the request).
    fn evicted(&self, peer: SocketAddr) -> bool {
        if !self.evict.load(Ordering::Relaxed) {
            return false;
        }
        if self.quiet_since().is_some() {
            tracing::debug!(%peer, "at the connection limit: closed the S3 connection idle the longest");
            return true;
        }
        self.evict.store(false, Ordering::Relaxed); // busy after all
        false
    }
}

/// Marks the end of a request when dropped.
struct BusyGuard(Arc<Connection>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        let mut phase = self.0.phase.lock().expect("the phase lock is never poisoned");
        *phase = match *phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Idle(Instant::now()),
        };
        drop(phase);
        self.0.wake.notify_one();
    }
}

/// The open connections, for the limit.
#[derive(Default)]
struct Registry {
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Connection>>>,
}

impl Registry {
    fn add(&self, connection: Arc<Connection>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open.lock().expect("the registry lock is never poisoned").insert(id, connection);
        id
    }

    fn remove(&self, id: u64) {
        self.open.lock().expect("the registry lock is never poisoned").remove(&id);
    }

    /// Asks the connection quiet for the longest to close; false if every one is busy.
    fn evict_one(&self) -> bool {
        let open = self.open.lock().expect("the registry lock is never poisoned");
        let oldest = open
            .values()
            .filter(|c| !c.evict.load(Ordering::Relaxed))
            .filter_map(|c| c.quiet_since().map(|since| (since, c)))
            .min_by_key(|(since, _)| *since);
        match oldest {
            Some((_, connection)) => {
                connection.evict.store(true, Ordering::Relaxed);
                connection.wake.notify_one();
                true
            }
            None => false,
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
    let mut errors = AcceptErrors::default();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                errors.pause = ACCEPT_ERROR_PAUSE_MIN;
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
        let Some(permit) = admit(&permits, &registry, limits.max_connections).await else {
            drop(stream);
            continue;
        };
        let connection = Arc::new(Connection::new(buffered_share_bytes));
        let id = registry.add(connection.clone());
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

/// The accept loop's errors: how long to pause, and what to log.
struct AcceptErrors {
    pause: Duration,
    logged: Option<Instant>,
    unlogged: u64,
}

impl Default for AcceptErrors {
    fn default() -> AcceptErrors {
        AcceptErrors { pause: ACCEPT_ERROR_PAUSE_MIN, logged: None, unlogged: 0 }
    }
}

impl AcceptErrors {
    /// Logs `error`, which happened at `now` (or counts it, within
    /// [`ACCEPT_ERROR_LOG_INTERVAL`] of the last one logged), and returns how long to pause.
    fn failed(&mut self, error: &io::Error, now: Instant) -> Duration {
        if self.logged.is_none_or(|at| now.duration_since(at) >= ACCEPT_ERROR_LOG_INTERVAL) {
            tracing::warn!(
                %error,
                since_last_logged = self.unlogged,
                "cannot accept S3 connections; pausing the accept loop (see --max-connections)"
            );
            self.logged = Some(now);
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(ACCEPT_ERROR_PAUSE_MAX);
        pause
    }
}

/// A permit for a new connection: at once below the limit; at the limit, once the connection
/// quiet for the longest has closed; `None` when every connection is busy.
async fn admit(
    permits: &Arc<Semaphore>,
    registry: &Registry,
    max_connections: usize,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(permit) = permits.clone().try_acquire_owned() {
        return Some(permit);
    }
    if !registry.evict_one() {
        tracing::warn!(
            max_connections,
            "S3 connection refused: every connection has a request in flight"
        );
        return None;
    }
    tracing::debug!(max_connections, "at the S3 connection limit: closing the oldest idle one");
    match tokio::time::timeout(EVICTION_WAIT, permits.clone().acquire_owned()).await {
        Ok(Ok(permit)) => Some(permit),
        _ => None,
    }
}

/// Errors about one connection only.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
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
    let io = TokioIo::new(Watched {
        inner: stream,
        connection: connection.clone(),
        write_timeout: limits.body_timeout,
        stalled: None,
    });
    let service = {
        let connection = connection.clone();
        hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let busy = connection.busy();
            if request.version() == http::Version::HTTP_2 {
                connection.http2.store(true, Ordering::Relaxed);
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
        let deadline = connection.deadline(&limits);
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(error) = ended {
                    let error = chain(&*error);
                    tracing::debug!(%peer, %error, "an S3 connection ended with an error");
                }
                return;
            }
            () = sleep_until(deadline) => {
                if connection.timed_out(&limits, peer) {
                    return; // nothing in flight: dropping it closes the socket
                }
            }
            () = connection.wake.notified() => {}
        }
        if connection.evicted(peer) {
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

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The socket, telling its connection when bytes arrive, and failing a write that makes no
/// progress for the write timeout (a client that reads nothing of its answer).
struct Watched<S> {
    inner: S,
    connection: Arc<Connection>,
    write_timeout: Duration,
    /// Since a write was first refused for want of room, the time it gives up.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Watched<S> {
    /// `poll`'s result, or an error when writes have been pending for the write timeout.
    fn progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.write_timeout;
        let stalled = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(stalled.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the client read nothing of the answer for {} s", timeout.as_secs_f64()),
        )))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = ready!(Pin::new(&mut self.inner).poll_read(cx, buf));
        if buf.filled().len() > before {
            self.connection.on_read();
        }
        Poll::Ready(result)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body that fails with [`BodyTimeout`] when the client sends nothing for the body
/// timeout while the gateway waits for it, and sets `ended` once read to its end.
pub(crate) struct TimedBody {
    inner: Incoming,
    timeout: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    ended: Option<Arc<AtomicBool>>,
}

impl TimedBody {
    fn new(inner: Incoming, timeout: Duration, ended: Option<Arc<AtomicBool>>) -> TimedBody {
        TimedBody { inner, timeout, sleep: None, ended }
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            self.sleep = None;
            if (frame.is_none() || self.inner.is_end_stream())
                && let Some(ended) = &self.ended
            {
                ended.store(true, Ordering::Release);
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let timeout = self.timeout;
        let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(Some(Err(Box::new(BodyTimeout(timeout)))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_limit_is_within_its_bounds_and_below_the_file_limit() {
        let limit = default_max_connections();
        assert!((CONNECTIONS_DEFAULT_MIN..=CONNECTIONS_DEFAULT_MAX).contains(&limit), "{limit}");
        if let Some(soft) = optio_net::local::open_files_soft_limit()
            && soft >= 2 * CONNECTIONS_DEFAULT_MIN as u64
        {
            assert!(limit as u64 <= soft / 2, "{limit} of {soft} files");
        }
    }

    #[test]
    fn zero_timeouts_and_limits_are_refused() {
        let limits = Limits { max_connections: 8, ..Limits::default() };
        assert_eq!(limits.check(), Ok(()));
        let zero = Limits { header_timeout: Duration::ZERO, ..limits };
        assert!(zero.check().unwrap_err().contains("header timeout is zero"));
        let none = Limits { max_connections: 0, ..limits };
        assert!(none.check().unwrap_err().contains("connection limit is 0"));
        let huge = Limits { max_connections: CONNECTIONS_MAX + 1, ..limits };
        assert!(huge.check().is_err());
    }

    #[test]
    fn accept_errors_back_off_and_are_logged_at_most_once_per_interval() {
        let mut errors = AcceptErrors::default();
        let emfile = io::Error::from_raw_os_error(24);
        let start = Instant::now();
        let mut pauses = Vec::new();
        for i in 0..8 {
            pauses.push(errors.failed(&emfile, start + Duration::from_millis(i)));
        }
        assert_eq!(pauses[0], ACCEPT_ERROR_PAUSE_MIN);
        assert_eq!(pauses[1], ACCEPT_ERROR_PAUSE_MIN * 2);
        assert_eq!(*pauses.last().unwrap(), ACCEPT_ERROR_PAUSE_MAX);
        assert!(pauses.windows(2).all(|w| w[0] <= w[1]), "{pauses:?}");
        // Within the interval, the errors after the first are counted, not logged.
        assert_eq!(errors.unlogged, 7);
        errors.failed(&emfile, start + ACCEPT_ERROR_LOG_INTERVAL);
        assert_eq!(errors.unlogged, 0, "logged again once the interval passed");
    }
}
