//! What a server needs of the connections it accepts, shared by the storage servers
//! (`optio-server/src/conn.rs`) and the S3 gateway (`optio-s3/src/conn.rs`), so that one set
//! of numbers and one phase machine describe both: the limits ([`Limits`]), each
//! connection's phase ([`Tracked`]), the open connections for the limit ([`Registry`],
//! [`admit`]), the accept loop's error pauses ([`AcceptErrors`]), the socket that reports
//! reads ([`Watched`]) and request bodies under the body timeout ([`TimedBody`]). Each
//! server keeps its own accept loop and protocol (frames and the local socket; HTTP/2 and
//! TLS for the gateway).
//!
//! Each connection is in one of three phases, which decide how long it may stay silent:
//!
//! * **head** — from the moment it is accepted (its TLS handshake included), or from the
//!   first byte of its next HTTP/1 request, until a request's headers are complete: at most
//!   the *header timeout* (default 10 s). A slowloris client that trickles its headers is
//!   closed when it runs out;
//! * **busy** — requests are in flight, from their headers until their answers are sent: a
//!   request body that sends no byte for the *body timeout* (default 30 s) fails the request;
//! * **idle** — no request in flight: closed after the *idle timeout* (default 60 s).
//!
//! hyper's own `header_read_timeout` is not used: it also runs while a keep-alive connection
//! waits for its next request, so it cannot tell slow headers from an idle connection (Go's
//! `net/http` splits them the same way, as `ReadHeaderTimeout` and `IdleTimeout`).
//!
//! **The connection limit** (default: half the soft limit on open files, at most 4,096, at
//! least 64) bounds the file descriptors connections use. A connection accepted at the limit
//! makes the server close the connection that has been idle (or sending its headers) the
//! longest, and is served once it is gone: an idle crowd cannot keep a client out. When
//! every connection has a request in flight, the new connection is closed at once (each
//! request in flight is bounded by the body timeout).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Default longest time from accepting a connection, or from the first byte of a request, to
/// the end of its headers.
pub const HEADER_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Default longest a request body may send nothing.
pub const BODY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Default longest a connection may stay open with no request in flight.
pub const IDLE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);
/// The default connection limit is at most this …
pub const CONNECTIONS_DEFAULT_MAX: usize = 4096;
/// … and at least this many.
pub const CONNECTIONS_DEFAULT_MIN: usize = 64;
/// The largest connection limit taken.
pub const CONNECTIONS_MAX: usize = 1 << 20;
/// How long a connection accepted at the limit waits for the connection closed in its favour.
pub const EVICTION_WAIT: Duration = Duration::from_secs(1);
/// The accept loop's first pause after an error that is not about one connection (EMFILE,
/// ENFILE, ENOBUFS) …
pub const ACCEPT_ERROR_PAUSE_MIN: Duration = Duration::from_millis(50);
/// … doubling while it goes on failing, up to this.
pub const ACCEPT_ERROR_PAUSE_MAX: Duration = Duration::from_secs(1);
/// Such errors are logged at most once per this interval (with the count of the others).
pub const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The connection limit used when none is configured: half the soft limit on open files
/// (the other half is for the process's own files and its connections to other servers),
/// within [`CONNECTIONS_DEFAULT_MIN`]..=[`CONNECTIONS_DEFAULT_MAX`].
pub fn default_max_connections() -> usize {
    let soft = crate::local::open_files_soft_limit().unwrap_or(u64::MAX);
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

/// Why [`Limits`] are refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsError {
    /// A timeout is zero.
    #[error("the {0} is zero; it must be positive")]
    ZeroTimeout(&'static str),
    /// The connection limit is out of range.
    #[error("the connection limit is {0}; it must be 1 to {CONNECTIONS_MAX}")]
    Connections(usize),
}

impl Limits {
    /// Refuses zero timeouts and limits out of range.
    pub fn check(&self) -> Result<(), LimitsError> {
        for (name, value) in [
            ("header timeout", self.header_timeout),
            ("body timeout", self.body_timeout),
            ("idle timeout", self.idle_timeout),
        ] {
            if value.is_zero() {
                return Err(LimitsError::ZeroTimeout(name));
            }
        }
        if !(1..=CONNECTIONS_MAX).contains(&self.max_connections) {
            return Err(LimitsError::Connections(self.max_connections));
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
    /// No request in flight, since then.
    Idle(Instant),
}

/// One connection's phase, shared by its I/O, its service and its task.
#[derive(Debug)]
pub struct Tracked {
    phase: Mutex<Phase>,
    /// Wakes the connection's task: its phase changed, it is asked to close, or the server
    /// stops.
    wake: Notify,
    /// The accept loop asks it to make room.
    evict: AtomicBool,
    /// It speaks HTTP/2: its reads do not start a head phase (pings, window updates and
    /// the headers of a stream not yet complete arrive while it is idle).
    http2: AtomicBool,
    /// What its logs call it (`connection`, `S3 connection`).
    label: &'static str,
}

impl Tracked {
    /// A connection accepted now (in its head phase), named `label` in logs.
    pub fn new(label: &'static str) -> Tracked {
        Tracked {
            phase: Mutex::new(Phase::Head(Instant::now())),
            wake: Notify::new(),
            evict: AtomicBool::new(false),
            http2: AtomicBool::new(false),
            label,
        }
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().expect("the phase lock is never poisoned")
    }

    /// Marks it as speaking HTTP/2.
    pub fn set_http2(&self) {
        self.http2.store(true, Ordering::Relaxed);
    }

    /// Whether it speaks HTTP/2.
    pub fn is_http2(&self) -> bool {
        self.http2.load(Ordering::Relaxed)
    }

    /// Bytes arrived: an idle HTTP/1 connection starts a request.
    pub fn on_read(&self) {
        if self.is_http2() {
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
    pub fn busy(self: &Arc<Self>) -> BusyGuard {
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
    pub fn deadline(&self, limits: &Limits) -> Option<Instant> {
        match self.phase() {
            Phase::Head(since) => Some(since + limits.header_timeout),
            Phase::Idle(since) => Some(since + limits.idle_timeout),
            Phase::Busy(_) => None,
        }
    }

    /// Since when it has had no request in flight; `None` while busy.
    pub fn quiet_since(&self) -> Option<Instant> {
        match self.phase() {
            Phase::Head(since) | Phase::Idle(since) => Some(since),
            Phase::Busy(_) => None,
        }
    }

    /// Whether its phase's timeout has passed (checked again when the timer fires: a request
    /// may have begun meanwhile).
    pub fn timed_out(&self, limits: &Limits) -> bool {
        let expired = self.deadline(limits).is_some_and(|d| d <= Instant::now());
        if expired {
            tracing::debug!(phase = ?self.phase(), "{} timed out: closed", self.label);
        }
        expired
    }

    /// Whether it should close to make room at the connection limit: asked to, and still
    /// quiet (a request that began since cancels the request).
    pub fn evicted(&self) -> bool {
        if !self.evict.load(Ordering::Relaxed) {
            return false;
        }
        if self.quiet_since().is_some() {
            tracing::debug!("at the connection limit: closed the {} idle the longest", self.label);
            return true;
        }
        self.evict.store(false, Ordering::Relaxed); // busy after all
        false
    }

    /// Waits until something of its phase changes (see [`Tracked::wake`]).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }

    /// Wakes its task (the server stops, say).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Returns when the connection should close: its phase timed out, the connection limit
    /// needs its place while it is quiet, or `stopping` completes.
    pub async fn until_closed(&self, limits: &Limits, stopping: impl Future<Output = ()>) {
        let mut stopping = std::pin::pin!(stopping);
        loop {
            tokio::select! {
                () = sleep_until(self.deadline(limits)) => {
                    if self.timed_out(limits) {
                        return;
                    }
                }
                () = self.changed() => {}
                () = &mut stopping => return,
            }
            if self.evicted() {
                return;
            }
        }
    }
}

/// Marks the end of a request when dropped.
#[derive(Debug)]
pub struct BusyGuard(Arc<Tracked>);

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
#[derive(Debug, Default)]
pub struct Registry {
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Tracked>>>,
}

impl Registry {
    /// Counts `connection` as open until [`Registry::remove`]d with the id returned.
    pub fn add(&self, connection: Arc<Tracked>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open.lock().expect("the registry lock is never poisoned").insert(id, connection);
        id
    }

    /// The connection `id` closed.
    pub fn remove(&self, id: u64) {
        self.open.lock().expect("the registry lock is never poisoned").remove(&id);
    }

    /// Asks the connection quiet for the longest to close; false if every one is busy.
    pub fn evict_one(&self) -> bool {
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

/// A permit for a new connection: at once below the limit; at the limit, once the connection
/// quiet for the longest has closed; `None` when every connection is busy. `label` names the
/// connections in logs.
pub async fn admit(
    permits: &Arc<Semaphore>,
    registry: &Registry,
    max_connections: usize,
    label: &'static str,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(permit) = permits.clone().try_acquire_owned() {
        return Some(permit);
    }
    if !registry.evict_one() {
        tracing::warn!(
            max_connections,
            "{label} refused: every connection has a request in flight"
        );
        return None;
    }
    tracing::debug!(max_connections, "at the {label} limit: closing the oldest idle one");
    match tokio::time::timeout(EVICTION_WAIT, permits.clone().acquire_owned()).await {
        Ok(Ok(permit)) => Some(permit),
        _ => None,
    }
}

/// The accept loop's errors: how long to pause, and what to log.
#[derive(Debug)]
pub struct AcceptErrors {
    pause: Duration,
    logged: Option<Instant>,
    unlogged: u64,
    label: &'static str,
}

impl AcceptErrors {
    /// No error yet; `label` names the connections in logs.
    pub fn new(label: &'static str) -> AcceptErrors {
        AcceptErrors { pause: ACCEPT_ERROR_PAUSE_MIN, logged: None, unlogged: 0, label }
    }

    /// Logs `error`, which happened at `now` (or counts it, within
    /// [`ACCEPT_ERROR_LOG_INTERVAL`] of the last one logged), and returns how long to pause.
    pub fn failed(&mut self, error: &io::Error, now: Instant) -> Duration {
        if self.logged.is_none_or(|at| now.duration_since(at) >= ACCEPT_ERROR_LOG_INTERVAL) {
            tracing::warn!(
                %error,
                since_last_logged = self.unlogged,
                "cannot accept {}s; pausing the accept loop (see --max-connections)",
                self.label
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

    /// An accept succeeded: the next error pauses from the start again.
    pub fn succeeded(&mut self) {
        self.pause = ACCEPT_ERROR_PAUSE_MIN;
    }
}

/// Errors about one connection only (the accept loop goes on at once).
pub fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Sleeps until `deadline`, or forever without one.
pub async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// A socket that tells its connection when bytes arrive, and fails a write that makes no
/// progress for the write timeout (a client that reads nothing of its answer would hold its
/// connection busy, where no phase timeout runs, for ever).
#[derive(Debug)]
pub struct Watched<S> {
    inner: S,
    connection: Arc<Tracked>,
    write_timeout: Duration,
    /// Since a write was first refused for want of room, the time it gives up.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Watched<S> {
    /// `inner`, reporting its reads to `connection`, its writes failing after
    /// `write_timeout` without progress.
    pub fn new(inner: S, connection: Arc<Tracked>, write_timeout: Duration) -> Watched<S> {
        Watched { inner, connection, write_timeout, stalled: None }
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

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
/// timeout while the server waits for it, and sets `ended` (if given) once read to its end.
#[derive(Debug)]
pub struct TimedBody {
    inner: Incoming,
    timeout: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    ended: Option<Arc<AtomicBool>>,
}

impl TimedBody {
    /// `inner` under `timeout`.
    pub fn new(inner: Incoming, timeout: Duration, ended: Option<Arc<AtomicBool>>) -> TimedBody {
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

#[cfg(test)]
mod tests;
