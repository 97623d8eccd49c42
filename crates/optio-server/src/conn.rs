//! Connections: the accept loop (plain HTTP, TLS told by its first byte, mutual TLS), the
//! upgrade to frames ([`frames`]) and the local socket ([`local`]), with the limits, phases
//! and timeouts of [`optio_net::listen`] (what `axum::serve` does not have), which the S3
//! gateway shares:
//!
//! * **head** — from the moment a connection is accepted, or from the first byte of its next
//!   request, until the request's headers are complete: at most the *header timeout*
//!   (default 10 s);
//! * **busy** — a request is being handled (its body read, its answer written): a body that
//!   sends no byte for the *body timeout* (default 30 s) fails the request with 408
//!   `timeout` and closes the connection, and an answer the client reads nothing of for as
//!   long closes the connection;
//! * **idle** — a keep-alive connection between requests: closed after the *idle timeout*
//!   (default 60 s).
//!
//! **The connection limit** (default: half the soft limit on open files, at most 4,096, at
//! least 64) bounds the file descriptors connections use, so the server never runs out of
//! them. A connection accepted at the limit makes the server close the connection that has
//! been idle (or sending its headers) the longest, and is served once it is gone: an idle
//! crowd cannot stop `/health` from answering. When every connection has a request in
//! flight, the new connection is closed at once (each request in flight is bounded by the
//! body timeout). An accept that fails for want of resources pauses the loop, 50 ms doubling
//! to 1 s while it goes on failing, logged at most once per 10 s.

mod frames;
pub(crate) mod local;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::http::{Request, Response};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use optio_net::listen::{
    AcceptErrors, BusyGuard, Registry, TimedBody, Tracked, Watched, admit, is_connection_error,
    sleep_until,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

pub use optio_net::listen::{
    BODY_TIMEOUT_DEFAULT, BodyTimeout, CONNECTIONS_DEFAULT_MAX, CONNECTIONS_DEFAULT_MIN,
    CONNECTIONS_MAX, HEADER_TIMEOUT_DEFAULT, IDLE_TIMEOUT_DEFAULT, Limits, LimitsError,
    default_max_connections,
};

/// What the logs call the server's connections.
const LABEL: &str = "connection";

/// One connection: its phase ([`Tracked`], shared with its I/O, its service and its task)
/// and its upgrade to frames, if it asked for one.
pub(crate) struct Connection {
    pub(crate) tracked: Arc<Tracked>,
    /// The connection asked to be upgraded to frames (see [`frames`]).
    upgrade: Mutex<Option<hyper::upgrade::OnUpgrade>>,
}

impl Connection {
    fn new() -> Connection {
        Connection { tracked: Arc::new(Tracked::new(LABEL)), upgrade: Mutex::new(None) }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then waits for the connections
/// to finish their requests.
/// Marks a request that came over a plain connection to a server that takes TLS: only the
/// open endpoints (`/health`, a public `/metrics`) serve it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plaintext;

/// Marks a request that came over TLS: its records, sealed by a key only the two ends hold,
/// carry its head and body together, so a signed request's body needs no hash of its own
/// ([`crate::serve`]'s `Incoming`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sealed;

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
    let mut accept_errors = AcceptErrors::new(LABEL);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    accept_errors.succeeded();
                    stream
                }
                Err(error) => {
                    if !is_connection_error(&error) {
                        let pause = accept_errors.failed(&error, Instant::now());
                        tokio::time::sleep(pause).await;
                    }
                    continue;
                }
            },
        };
        // Answers go out at once: a connection upgraded to frames carries many answers at a
        // time, and Nagle's algorithm would hold a small one back until the client
        // acknowledged the one before (the client delays its acknowledgements).
        let _ = stream.set_nodelay(true);
        let Some(permit) = admit(&permits, &registry, limits.max_connections, LABEL).await else {
            drop(stream);
            continue;
        };
        let connection = Arc::new(Connection::new());
        let id = registry.add(connection.tracked.clone());
        let registry = registry.clone();
        let router = router.clone();
        let stopping = stopping.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => {
                    let channel = Channel::default();
                    serve_connection(stream, router, connection, limits, stopping, channel).await;
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
                                    let channel = Channel { plaintext: false, sealed: true, peer };
                                    serve_connection(
                                        stream, router, connection, limits, stopping, channel,
                                    )
                                    .await;
                                }
                                Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                                Err(_) => tracing::debug!("TLS handshake timed out"),
                            }
                        }
                        Ok(Ok(1)) => {
                            let channel = Channel { plaintext: true, sealed: false, peer: None };
                            serve_connection(stream, router, connection, limits, stopping, channel)
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

/// What a connection is: what its requests are marked with, over HTTP/1.1 and in frames
/// alike.
#[derive(Clone, Default)]
pub(crate) struct Channel {
    /// Plain, to a server that takes TLS ([`Plaintext`]).
    plaintext: bool,
    /// TLS ([`Sealed`]: a request's head and body come in records only the two ends can seal).
    sealed: bool,
    /// The client certificate it showed ([`PeerEntity`]).
    peer: Option<Arc<PeerCertificate>>,
}

impl Channel {
    /// Marks a request that came on this connection.
    pub(crate) fn mark(&self, extensions: &mut axum::http::Extensions) {
        if self.plaintext {
            extensions.insert(Plaintext);
        }
        if self.sealed {
            extensions.insert(Sealed);
        }
        if let Some(peer) = &self.peer {
            extensions.insert(PeerEntity(peer.clone()));
        }
    }
}

async fn serve_connection<S>(
    stream: S,
    router: Router,
    connection: Arc<Connection>,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
    channel: Channel,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let tracked = connection.tracked.clone();
    let io = TokioIo::new(Watched::new(stream, tracked.clone(), limits.body_timeout));
    // (Frames upgraded from a TLS connection go in its records: sealed as its HTTP is.)
    let context = frames::Context { router: router.clone(), channel: channel.clone() };
    let service = Service {
        router,
        connection: connection.clone(),
        body_timeout: limits.body_timeout,
        channel,
    };
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    let mut stopped = *stopping.borrow();
    if stopped {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        let deadline = tracked.deadline(&limits);
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
                if tracked.timed_out(&limits) {
                    return; // nothing in flight: dropping it closes the socket
                }
            }
            () = tracked.changed() => {}
            changed = stopping.changed(), if !stopped => {
                stopped = true;
                if changed.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
        if tracked.evicted() {
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
    let stopped = async move {
        let _ = stopping.wait_for(|stopped| *stopped).await;
    };
    connection.tracked.until_closed(limits, stopped).await;
}

/// The router as a hyper service: request bodies get the body timeout, and the connection is
/// busy until the answer's body is sent or dropped.
#[derive(Clone)]
struct Service {
    router: Router,
    connection: Arc<Connection>,
    body_timeout: Duration,
    /// What its requests are marked with.
    channel: Channel,
}

type ServiceFuture = Pin<Box<dyn Future<Output = Result<Response<Answer>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = ServiceFuture;

    fn call(&self, mut request: Request<Incoming>) -> ServiceFuture {
        let guard = self.connection.tracked.busy();
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
        let mut request =
            request.map(|body| axum::body::Body::new(TimedBody::new(body, timeout, None)));
        self.channel.mark(request.extensions_mut());
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

    /// (The limits, phases and timeouts are `optio_net::listen`'s, tested there; this is
    /// the server's own body error type, axum's, holding the timeout.)
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
