//! Connections: the accept loop, with a limit on connections and timeouts for slow or stalled
//! clients (what `axum::serve` does not have).
//!
//! Each connection is in one of three phases, which decide how long it may stay silent:
//!
//! * **head** — from the moment it is accepted, or from the first byte of its next request,
//!   until the request's headers are complete: at most the *header timeout* (default 10 s);
//! * **busy** — a request is being handled (its body read, its answer written): a body that
//!   sends no byte for the *body timeout* (default 30 s) fails the request with 408 `timeout`
//!   and closes the connection;
//! * **idle** — a keep-alive connection between requests: closed after the *idle timeout*
//!   (default 60 s).
//!
//! This is how Go's `net/http` splits its `ReadHeaderTimeout` and `IdleTimeout` (hyper's own
//! `header_read_timeout` also runs while a keep-alive connection waits for its next request,
//! so it cannot tell slow headers from an idle connection).
//!
//! **The connection limit** (default: half the soft limit on open files, at most 4,096, at
//! least 64) bounds the file descriptors connections use, so the server never runs out of
//! them. A connection accepted at the limit makes the server close the connection that has
//! been idle (or sending its headers) the longest, and is served once it is gone: an idle
//! crowd cannot stop `/health` from answering. When every connection has a request in flight,
//! the new connection is closed at once (each request in flight is bounded by the body
//! timeout).

mod frames;
pub(crate) mod local;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::http::{Request, Response};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use optio_net::local::open_files_soft_limit;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

/// Default longest time from accepting a connection, or from the first byte of a request,
/// to the end of its headers.
pub const HEADER_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Default longest time a request body may send nothing.
pub const BODY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Default longest time a keep-alive connection may wait for its next request.
pub const IDLE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);
/// The connection limit's default is at most this many…
pub const CONNECTIONS_DEFAULT_MAX: usize = 4096;
/// … and at least this many.
pub const CONNECTIONS_DEFAULT_MIN: usize = 64;
/// The largest connection limit taken.
pub const CONNECTIONS_MAX: usize = 1 << 20;
/// How long a connection accepted at the limit waits for the connection closed in its favour.
const EVICTION_WAIT: Duration = Duration::from_secs(1);
/// How long the accept loop pauses after an error that is not about one connection (e.g.
/// EMFILE: out of file descriptors).
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The connection limit used when none is configured: half the soft limit on open files
/// (the other half is for object files, the map and the logs), within
/// [`CONNECTIONS_DEFAULT_MIN`]..=[`CONNECTIONS_DEFAULT_MAX`].
pub fn default_max_connections() -> usize {
    let soft = open_files_soft_limit().unwrap_or(u64::MAX);
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

impl BodyTimeout {
    /// The timeout found in `error`'s chain of sources, if the body timed out.
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTimeout> {
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(timeout) = error.downcast_ref::<BodyTimeout>() {
                return Some(timeout);
            }
            next = error.source();
        }
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for (the rest of) a request's headers, since then.
    Head(Instant),
    /// Requests in flight (HTTP/1: one).
    Busy(u32),
    /// Between requests, since then.
    Idle(Instant),
}

/// One connection's phase, shared by its I/O, its service and its task.
pub(crate) struct Connection {
    phase: Mutex<Phase>,
    /// Wakes the connection's task: its phase changed, it is asked to close, or the server
    /// stops.
    wake: Notify,
    /// The accept loop asks it to make room.
    evict: AtomicBool,
    /// The connection asked to be upgraded to frames (see [`frames`]).
    upgrade: Mutex<Option<hyper::upgrade::OnUpgrade>>,
}

impl Connection {
    fn new() -> Connection {
        Connection {
            phase: Mutex::new(Phase::Head(Instant::now())),
            wake: Notify::new(),
            evict: AtomicBool::new(false),
            upgrade: Mutex::new(None),
        }
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().expect("the phase lock is never poisoned")
    }

    /// Bytes arrived: an idle connection starts a request.
    fn on_read(&self) {
        let mut phase = self.phase.lock().expect("the phase lock is never poisoned");
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Head(Instant::now());
            drop(phase);
            self.wake.notify_one();
        }
    }

    /// A request's headers are in: busy until the guard (held by the answer's body) drops.
    pub(crate) fn busy(self: &Arc<Self>) -> BusyGuard {
        let mut phase = self.phase.lock().expect("the phase lock is never poisoned");
        *phase = match *phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            Phase::Head(_) | Phase::Idle(_) => Phase::Busy(1),
        };
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
    fn timed_out(&self, limits: &Limits) -> bool {
        let expired = self.deadline(limits).is_some_and(|d| d <= Instant::now());
        if expired {
            tracing::debug!(phase = ?self.phase(), "connection timed out: closed");
        }
        expired
    }

    /// Whether it should close to make room at the connection limit: asked to, and still
    /// quiet (a request that began since cancels the request).
    fn evicted(&self) -> bool {
        if !self.evict.load(Ordering::Relaxed) {
            return false;
        }
        if self.quiet_since().is_some() {
            tracing::debug!("at the connection limit: closed the connection idle the longest");
            return true;
        }
        self.evict.store(false, Ordering::Relaxed); // busy after all
        false
    }
}

/// Marks the end of a request when dropped.
pub(crate) struct BusyGuard(Arc<Connection>);

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

/// Serves `router` on `listener` until `shutdown` completes, then waits for the connections
/// to finish their requests.
/// Marks a request that came over a plain connection to a server that takes TLS: only the
/// open endpoints (`/health`, a public `/metrics`) serve it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plaintext;

/// The client certificate a request's connection showed (mutual TLS; the CA checked it in the
/// handshake).
#[derive(Clone, Debug)]
pub(crate) struct PeerEntity(pub(crate) Arc<PeerCertificate>);

/// A client certificate shown over mutual TLS: the entity it names and its fingerprint, which
/// the keyring must record for that entity ([`crate::auth::Auth::check`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCertificate {
    /// Its subject's common name: the entity it stands for.
    pub entity: String,
    /// The SHA-256 hash of its DER encoding.
    pub fingerprint: optio_proto::auth::CertFingerprint,
}

/// Marks a request that came over the server's local socket ([`local`]): only there is an
/// open descriptor of an object's file answered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LocalPeer;

/// A device request the local socket decoded already (to take opens only): the adapter
/// serves it without decoding it again.
#[derive(Clone, Debug)]
pub(crate) struct Predecoded(pub(crate) optio_proto::request::Request<'static>);

/// An answer's open file, sent to a local client with the answer (`SCM_RIGHTS`).
#[derive(Clone, Debug)]
pub(crate) struct LocalFile(pub(crate) Arc<std::fs::File>);

/// The client certificate a TLS connection showed, if any, with a common name.
fn peer_entity(connection: &rustls::ServerConnection) -> Option<Arc<PeerCertificate>> {
    let cert = connection.peer_certificates()?.first()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?.as_str().ok()?;
    let fingerprint = optio_proto::auth::CertFingerprint::of_der(cert.as_ref());
    Some(Arc::new(PeerCertificate { entity: name.to_string(), fingerprint }))
}

/// Bytes read from a TLS connection's socket at once (rustls asks for 4 KiB at a time).
const TLS_READ_BUFFER: usize = 64 << 10;

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let registry = Arc::new(Registry::default());
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    if !is_connection_error(&error) {
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    }
                    continue;
                }
            },
        };
        // Answers go out at once: a connection upgraded to frames carries many answers at a
        // time, and Nagle's algorithm would hold a small one back until the client
        // acknowledged the one before (the client delays its acknowledgements).
        let _ = stream.set_nodelay(true);
        let Some(permit) = admit(&permits, &registry, limits.max_connections).await else {
            drop(stream);
            continue;
        };
        let connection = Arc::new(Connection::new());
        let id = registry.add(connection.clone());
        let registry = registry.clone();
        let router = router.clone();
        let stopping = stopping.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => {
                    serve_connection(stream, router, connection, limits, stopping, false, None)
                        .await;
                }
                Some(acceptor) => {
                    // TLS or plain, told by the first byte; both within the header timeout.
                    let mut first = [0u8; 1];
                    let peeked =
                        tokio::time::timeout(limits.header_timeout, stream.peek(&mut first));
                    match peeked.await {
                        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {
                            // rustls reads at most 4 KiB per call: a buffer below it turns
                            // the 1,024 reads of a 4 MiB body into 64 system calls.
                            let stream =
                                tokio::io::BufReader::with_capacity(TLS_READ_BUFFER, stream);
                            let handshake = tokio::time::timeout(
                                limits.header_timeout,
                                acceptor.accept(stream),
                            );
                            match handshake.await {
                                Ok(Ok(stream)) => {
                                    let peer = peer_entity(stream.get_ref().1);
                                    serve_connection(
                                        stream, router, connection, limits, stopping, false, peer,
                                    )
                                    .await;
                                }
                                Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                                Err(_) => tracing::debug!("TLS handshake timed out"),
                            }
                        }
                        Ok(Ok(1)) => {
                            serve_connection(
                                stream, router, connection, limits, stopping, true, None,
                            )
                            .await;
                        }
                        _ => {}
                    }
                }
            }
            registry.remove(id);
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    // Every connection holds a permit until it ends.
    let all = u32::try_from(limits.max_connections).expect("limits are checked");
    let _ = permits.acquire_many(all).await;
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
            "connection refused: every connection has a request in flight"
        );
        return None;
    }
    tracing::debug!(max_connections, "at the connection limit: closing the oldest idle one");
    match tokio::time::timeout(EVICTION_WAIT, permits.clone().acquire_owned()).await {
        Ok(Ok(permit)) => Some(permit),
        _ => None,
    }
}

/// Errors about one connection only (the accept loop goes on at once).
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

async fn serve_connection<S>(
    stream: S,
    router: Router,
    connection: Arc<Connection>,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
    plaintext: bool,
    peer: Option<Arc<PeerCertificate>>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(Watched { inner: stream, connection: connection.clone() });
    let context = frames::Context { router: router.clone(), plaintext, peer: peer.clone() };
    let service = Service {
        router,
        connection: connection.clone(),
        body_timeout: limits.body_timeout,
        plaintext,
        peer,
    };
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    let mut stopped = *stopping.borrow();
    if stopped {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        let deadline = connection.deadline(&limits);
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended");
                    return;
                }
                let upgrade = connection.upgrade.lock().expect("the upgrade lock is never poisoned").take();
                if let Some(upgrade) = upgrade {
                    match upgrade.await {
                        Ok(upgraded) => {
                            let io = TokioIo::new(upgraded);
                            frames::serve(io, context, connection, limits, stopping).await;
                        }
                        Err(error) => tracing::debug!(%error, "the upgrade to frames failed"),
                    }
                }
                return;
            }
            () = sleep_until(deadline) => {
                if connection.timed_out(&limits) {
                    return; // nothing in flight: dropping it closes the socket
                }
            }
            () = connection.wake.notified() => {}
            changed = stopping.changed(), if !stopped => {
                stopped = true;
                if changed.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
        if connection.evicted() {
            return;
        }
    }
}

/// Returns when a connection that serves frames should close: its phase timed out, the
/// connection limit needs its place while it is quiet, or the server stops.
pub(crate) async fn watch_quiet(
    connection: &Connection,
    limits: &Limits,
    mut stopping: watch::Receiver<bool>,
) {
    loop {
        if *stopping.borrow() {
            return;
        }
        let deadline = connection.deadline(limits);
        tokio::select! {
            () = sleep_until(deadline) => {
                if connection.timed_out(limits) {
                    return;
                }
            }
            () = connection.wake.notified() => {}
            changed = stopping.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        if connection.evicted() {
            return;
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The socket, telling its connection when bytes arrive.
struct Watched<S> {
    inner: S,
    connection: Arc<Connection>,
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
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router as a hyper service: request bodies get the body timeout, and the connection is
/// busy until the answer's body is sent or dropped.
#[derive(Clone)]
struct Service {
    router: Router,
    connection: Arc<Connection>,
    body_timeout: Duration,
    /// A plain connection to a server that takes TLS.
    plaintext: bool,
    /// The entity its client certificate names (mutual TLS).
    peer: Option<Arc<PeerCertificate>>,
}

type ServiceFuture = Pin<Box<dyn Future<Output = Result<Response<Answer>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = ServiceFuture;

    fn call(&self, mut request: Request<Incoming>) -> ServiceFuture {
        let guard = self.connection.busy();
        if wants_frames(&request) {
            let upgrade = hyper::upgrade::on(&mut request);
            *self.connection.upgrade.lock().expect("the upgrade lock is never poisoned") =
                Some(upgrade);
            let answer = Response::builder()
                .status(axum::http::StatusCode::SWITCHING_PROTOCOLS)
                .header(axum::http::header::CONNECTION, "upgrade")
                .header(axum::http::header::UPGRADE, optio_proto::frames::PROTOCOL)
                .body(Answer { inner: axum::body::Body::empty(), _busy: guard })
                .expect("a valid answer");
            return Box::pin(async move { Ok(answer) });
        }
        let timeout = self.body_timeout;
        let mut request = request
            .map(|body| axum::body::Body::new(TimedBody { inner: body, timeout, sleep: None }));
        if self.plaintext {
            request.extensions_mut().insert(Plaintext);
        }
        if let Some(peer) = &self.peer {
            request.extensions_mut().insert(PeerEntity(peer.clone()));
        }
        let mut router = self.router.clone();
        Box::pin(async move {
            // A Router is always ready (its `poll_ready` does nothing).
            let response = tower_service::Service::call(&mut router, request).await?;
            Ok(response.map(|body| Answer { inner: body, _busy: guard }))
        })
    }
}

/// Whether `request` asks to upgrade its connection to frames (`GET /v1/frames`,
/// `Upgrade: optio-frames/1`).
fn wants_frames<B>(request: &Request<B>) -> bool {
    request.method() == axum::http::Method::GET
        && request.uri().path() == optio_proto::frames::UPGRADE_PATH
        && request.headers().get(axum::http::header::UPGRADE).is_some_and(|v| {
            v.as_bytes().eq_ignore_ascii_case(optio_proto::frames::PROTOCOL.as_bytes())
        })
}

/// A request body that fails with [`BodyTimeout`] when the client sends nothing for the
/// body timeout while the handler waits for it.
struct TimedBody {
    inner: Incoming,
    timeout: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
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
pub(crate) struct Answer {
    inner: axum::body::Body,
    _busy: BusyGuard,
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = axum::Error;

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
        if let Some(soft) = open_files_soft_limit()
            && soft >= 2 * CONNECTIONS_DEFAULT_MIN as u64
        {
            assert!(limit as u64 <= soft / 2, "{limit} of {soft} files");
        }
    }

    #[test]
    fn zero_timeouts_and_limits_are_refused() {
        let limits = Limits {
            header_timeout: HEADER_TIMEOUT_DEFAULT,
            body_timeout: BODY_TIMEOUT_DEFAULT,
            idle_timeout: IDLE_TIMEOUT_DEFAULT,
            max_connections: 8,
        };
        assert_eq!(limits.check(), Ok(()));
        let zero = Limits { body_timeout: Duration::ZERO, ..limits };
        assert!(zero.check().unwrap_err().contains("body timeout is zero"));
        let none = Limits { max_connections: 0, ..limits };
        assert!(none.check().unwrap_err().contains("connection limit is 0"));
        let huge = Limits { max_connections: CONNECTIONS_MAX + 1, ..limits };
        assert!(huge.check().is_err());
    }

    #[test]
    fn a_timeout_is_found_in_a_chain_of_errors() {
        let inner: Box<dyn std::error::Error + Send + Sync> =
            Box::new(BodyTimeout(Duration::from_secs(3)));
        let wrapped = axum::Error::new(inner);
        assert_eq!(BodyTimeout::find(&wrapped).map(|t| t.0), Some(Duration::from_secs(3)));
        let other = axum::Error::new(std::io::Error::other("reset"));
        assert!(BodyTimeout::find(&other).is_none());
    }
}
