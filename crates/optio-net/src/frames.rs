//! The client side of frames (see [`optio_proto::frames`]): one connection per server,
//! upgraded from HTTP/1.1, with every request sent as a frame and answered in any order.
//!
//! A connection is opened on the first request to a server and kept; a task reads its answers
//! and hands each to the request waiting for it. When it breaks (the server died, restarted or
//! closed it when idle), every request in flight on it fails as [`Failure::Dropped`] — sent,
//! perhaps applied, never answered: the caller sends it again, which opens a new connection.
//! A server that does not take the upgrade (an older one) is asked again after
//! [`UNSUPPORTED_RETRY`], over HTTP/1.1 meanwhile. A request without an answer within
//! [`REQUEST_TIMEOUT`] breaks its connection, as HTTP drops one whose request timed out.
//!
//! A transport that speaks TLS opens its frames connections with TLS too (the same client
//! configuration as its HTTP/1.1 connections): the upgrade and every frame after it go in
//! TLS records.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use optio_proto::frames::{self, PREFIX_BYTES};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::failure::{CONNECT_TIMEOUT, Failure, POOL_IDLE_TIMEOUT, REQUEST_TIMEOUT};

/// How long a server that refused the upgrade is talked to over HTTP/1.1 before it is asked
/// again.
pub const UNSUPPORTED_RETRY: Duration = Duration::from_secs(60);
/// The longest answer to the upgrade request read.
const UPGRADE_ANSWER_BYTES_MAX: usize = 8 << 10;
/// Bytes read from a connection's socket at once.
const READ_BUFFER_BYTES: usize = 64 << 10;
/// Bodies up to this size are copied behind their frame's head (one write); larger ones are
/// written after it.
const INLINE_BODY_BYTES_MAX: usize = 64 << 10;

/// A connection's reading side (plain TCP, or TLS), buffered.
type Reader = BufReader<Box<dyn AsyncRead + Send + Unpin>>;
/// A connection's writing side.
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// An answer as it came: status, headers and body.
pub(crate) struct RawAnswer {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// Why a request did not go over frames.
pub(crate) enum NotSent {
    /// The server does not take frames: send it over HTTP/1.1.
    Unsupported,
    /// It failed.
    Failed(Failure),
}

/// Frames connections, one per server address.
pub(crate) struct Frames {
    open: RwLock<HashMap<String, Arc<Connection>>>,
    /// One connection attempt per address at a time, and how the last one that failed
    /// ended.
    dialing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Dialed>>>>>,
    /// Addresses that refused the upgrade, and when.
    unsupported: Mutex<HashMap<String, Instant>>,
    /// How long a request waits for its answer ([`REQUEST_TIMEOUT`]).
    answer_timeout: Duration,
    /// TLS for every connection (none: plain TCP).
    tls: Option<tokio_rustls::TlsConnector>,
}

impl Default for Frames {
    fn default() -> Frames {
        Frames {
            open: RwLock::default(),
            dialing: Mutex::default(),
            unsupported: Mutex::default(),
            answer_timeout: REQUEST_TIMEOUT,
            tls: None,
        }
    }
}

impl std::fmt::Debug for Frames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.open.read().map(|o| o.len()).unwrap_or(0);
        f.debug_struct("Frames").field("open", &open).finish()
    }
}

/// A connection attempt that failed: when it ended, and how.
struct Dialed {
    at: Instant,
    failure: Failure,
}

/// Connections kept at most (past it the least useful are dropped: the whole table).
const CONNECTIONS_KEPT: usize = 4096;

impl Frames {
    /// Frames connections over TLS configured by `config` (the one the transport's HTTP/1.1
    /// connections use: the same trusted CA and client certificate).
    pub(crate) fn with_tls(config: rustls::ClientConfig) -> Frames {
        Frames {
            tls: Some(tokio_rustls::TlsConnector::from(Arc::new(config))),
            ..Frames::default()
        }
    }

    /// Sends a request to the server at `addr` and waits for its answer.
    pub(crate) async fn send(
        &self,
        addr: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Bytes>,
    ) -> Result<RawAnswer, NotSent> {
        let connection = self.connection(addr).await?;
        connection.send(method, path, headers, body).await.map_err(NotSent::Failed)
    }

    async fn connection(&self, addr: &str) -> Result<Arc<Connection>, NotSent> {
        if let Some(connection) = self.alive(addr) {
            return Ok(connection);
        }
        if self
            .unsupported
            .lock()
            .expect("unsupported lock")
            .get(addr)
            .is_some_and(|at| at.elapsed() < UNSUPPORTED_RETRY)
        {
            return Err(NotSent::Unsupported);
        }
        let dial =
            self.dialing.lock().expect("dialing lock").entry(addr.to_string()).or_default().clone();
        let asked = Instant::now();
        let mut last_failed = dial.lock().await;
        if let Some(connection) = self.alive(addr) {
            return Ok(connection);
        }
        // An attempt that failed while this request waited for it is this request's answer
        // too: requests to a server that drops packets wait one connect timeout together,
        // not one each in turn.
        if let Some(dialed) = last_failed.as_ref()
            && dialed.at >= asked
        {
            return Err(NotSent::Failed(dialed.failure.clone()));
        }
        let connection = match Connection::open(addr, self.answer_timeout, self.tls.as_ref()).await
        {
            Ok(connection) => Arc::new(connection),
            Err(NotSent::Unsupported) => {
                self.unsupported
                    .lock()
                    .expect("unsupported lock")
                    .insert(addr.to_string(), Instant::now());
                return Err(NotSent::Unsupported);
            }
            Err(NotSent::Failed(failure)) => {
                *last_failed = Some(Dialed { at: Instant::now(), failure: failure.clone() });
                return Err(NotSent::Failed(failure));
            }
        };
        let mut open = self.open.write().expect("open lock");
        if open.len() >= CONNECTIONS_KEPT {
            open.clear();
        }
        open.insert(addr.to_string(), connection.clone());
        Ok(connection)
    }

    /// The open connection to `addr`, unless it broke or has been idle so long that the
    /// server may be closing it (a server closes a connection idle for its idle timeout,
    /// 60 s by default; one idle for [`POOL_IDLE_TIMEOUT`] is replaced, as HTTP's pool does).
    fn alive(&self, addr: &str) -> Option<Arc<Connection>> {
        let open = self.open.read().expect("open lock");
        open.get(addr).filter(|c| c.usable()).cloned()
    }
}

/// Requests waiting for their answers, by id.
type Pending = HashMap<u64, oneshot::Sender<RawAnswer>>;

/// What a connection and its reading task share.
struct Shared {
    pending: Mutex<Pending>,
    alive: AtomicBool,
    /// Why it broke.
    broken: Mutex<Option<String>>,
}

impl Shared {
    /// Marks the connection broken: the requests in flight fail as dropped.
    fn break_with(&self, reason: String) {
        self.alive.store(false, Ordering::Release);
        self.broken.lock().expect("broken lock").get_or_insert(reason);
        // Dropping the senders wakes every waiting request.
        self.pending.lock().expect("pending lock").clear();
    }

    fn reason(&self) -> String {
        self.broken.lock().expect("broken lock").clone().unwrap_or_else(|| "closed".to_string())
    }
}

struct Connection {
    addr: String,
    /// When it was opened…
    opened: Instant,
    /// … and how long after that a request was last sent on it, in milliseconds.
    used_ms: AtomicU64,
    writer: tokio::sync::Mutex<Writer>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    reading: tokio::task::AbortHandle,
    answer_timeout: Duration,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reading.abort();
    }
}

/// What a failed connect or TLS handshake says of the server ([`Failure::of_io`]), else
/// unreachable.
fn connect_failure(reason: String, error: &std::io::Error) -> Failure {
    Failure::of_io(error.kind()).unwrap_or(Failure::Unreachable)(reason)
}

impl Connection {
    /// Not broken, and not idle for [`POOL_IDLE_TIMEOUT`].
    fn usable(&self) -> bool {
        let idle_ms = (self.opened.elapsed().as_millis() as u64)
            .saturating_sub(self.used_ms.load(Ordering::Relaxed));
        self.shared.alive.load(Ordering::Acquire) && idle_ms < POOL_IDLE_TIMEOUT.as_millis() as u64
    }

    /// Connects to `addr` (with TLS if `tls`) and upgrades the connection to frames.
    async fn open(
        addr: &str,
        answer_timeout: Duration,
        tls: Option<&tokio_rustls::TlsConnector>,
    ) -> Result<Connection, NotSent> {
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                let reason = format!("connect to {addr}: {error}");
                return Err(NotSent::Failed(connect_failure(reason, &error)));
            }
            Err(_) => return Err(silent(addr, "connect to", CONNECT_TIMEOUT)),
        };
        let _ = stream.set_nodelay(true);
        let (reader, mut writer): (Box<dyn AsyncRead + Send + Unpin>, Writer) = match tls {
            None => {
                let (reader, writer) = stream.into_split();
                (Box::new(reader), Box::new(writer))
            }
            Some(connector) => {
                let name = server_name(addr).map_err(NotSent::Failed)?;
                // The handshake is answered by the server's code, as the upgrade is.
                let stream =
                    match tokio::time::timeout(answer_timeout, connector.connect(name, stream))
                        .await
                    {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(error)) => {
                            let reason = format!("TLS handshake with {addr}: {error}");
                            return Err(NotSent::Failed(connect_failure(reason, &error)));
                        }
                        Err(_) => return Err(silent(addr, "TLS handshake with", answer_timeout)),
                    };
                let (reader, writer) = tokio::io::split(stream);
                (Box::new(reader), Box::new(writer))
            }
        };
        let mut reader: Reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
        let upgrade = async {
            let request = format!(
                "GET {} HTTP/1.1\r\nhost: {addr}\r\nconnection: upgrade\r\nupgrade: {}\r\n\r\n",
                frames::UPGRADE_PATH,
                frames::PROTOCOL
            );
            writer.write_all(request.as_bytes()).await?;
            writer.flush().await?;
            read_upgrade_answer(&mut reader).await
        };
        // The answer to the upgrade comes from the server's own code, not from its kernel as
        // the connection does: a loaded server is given as long as for any answer.
        let switched = match tokio::time::timeout(answer_timeout, upgrade).await {
            Ok(Ok(switched)) => switched,
            Ok(Err(error)) => {
                return Err(NotSent::Failed(Failure::Dropped(format!(
                    "upgrade at {addr}: {error}"
                ))));
            }
            Err(_) => return Err(silent(addr, "upgrade at", answer_timeout)),
        };
        if !switched {
            return Err(NotSent::Unsupported);
        }
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
            broken: Mutex::new(None),
        });
        let reading = tokio::spawn(read_answers(reader, shared.clone(), addr.to_string()));
        Ok(Connection {
            addr: addr.to_string(),
            opened: Instant::now(),
            used_ms: AtomicU64::new(0),
            writer: tokio::sync::Mutex::new(writer),
            shared,
            next_id: AtomicU64::new(0),
            reading: reading.abort_handle(),
            answer_timeout,
        })
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Bytes>,
    ) -> Result<RawAnswer, Failure> {
        let body_len = body.map_or(0, Bytes::len);
        self.used_ms.fetch_max(self.opened.elapsed().as_millis() as u64, Ordering::Relaxed);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut frame = Vec::with_capacity(512 + body_len.min(INLINE_BODY_BYTES_MAX));
        frames::encode_request(&mut frame, id, method, path, headers.iter().copied(), body_len)
            .map_err(|e| Failure::Malformed(format!("cannot frame the request: {e}")))?;
        let (sender, receiver) = oneshot::channel();
        self.shared.pending.lock().expect("pending lock").insert(id, sender);
        // Forgets the request if it is dropped unanswered (cancelled or timed out).
        let _waiting = Waiting { shared: &self.shared, id };
        if !self.shared.alive.load(Ordering::Acquire) {
            return Err(Failure::Dropped(format!(
                "frames connection to {}: {}",
                self.addr,
                self.shared.reason()
            )));
        }
        {
            let mut writer = self.writer.lock().await;
            // A frame written in part breaks the connection for everyone: a request dropped
            // while writing (cancelled) breaks it explicitly.
            let mut torn = Torn { shared: &self.shared, armed: true };
            let written = async {
                match body {
                    Some(body) if body.len() <= INLINE_BODY_BYTES_MAX => {
                        frame.extend_from_slice(body);
                        writer.write_all(&frame).await?;
                    }
                    Some(body) => {
                        writer.write_all(&frame).await?;
                        writer.write_all(body).await?;
                    }
                    None => writer.write_all(&frame).await?,
                }
                // (TLS may hold the last record's bytes until flushed; TCP holds none.)
                writer.flush().await
            };
            if let Err(error) = written.await {
                self.shared.break_with(format!("sending failed: {error}"));
                return Err(Failure::Dropped(format!(
                    "frames connection to {}: {error}",
                    self.addr
                )));
            }
            torn.armed = false;
        }
        match tokio::time::timeout(self.answer_timeout, receiver).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(Failure::Dropped(self.shared.reason())),
            Err(_) => {
                let reason = format!(
                    "no answer from {} within {} s",
                    self.addr,
                    self.answer_timeout.as_secs_f64()
                );
                // As HTTP drops a connection whose request timed out: the next request opens
                // a new one instead of queueing behind a server that stopped answering on
                // this one (requests still in flight on it fail as dropped and are resent).
                self.shared.break_with(reason.clone());
                Err(Failure::Unreachable(reason))
            }
        }
    }
}

/// The name a server at `addr` (`HOST:PORT`) is checked against in the TLS handshake: its
/// address or host name, as in an `https` URL.
fn server_name(addr: &str) -> Result<rustls::pki_types::ServerName<'static>, Failure> {
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => addr,
    };
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| Failure::Unreachable(format!("bad server name in {addr:?}: {e}")))
}

/// `addr` did not answer `what` (connecting, upgrading) within `bound`.
fn silent(addr: &str, what: &str, bound: Duration) -> NotSent {
    NotSent::Failed(Failure::Unreachable(format!(
        "{what} {addr}: no answer within {} s",
        bound.as_secs_f64()
    )))
}

/// Removes a request's entry when it goes away unanswered.
struct Waiting<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.shared.pending.lock().expect("pending lock").remove(&self.id);
    }
}

/// Breaks the connection if dropped while armed (a frame written in part).
struct Torn<'a> {
    shared: &'a Shared,
    armed: bool,
}

impl Drop for Torn<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.break_with("a request was cancelled while it was being sent".into());
        }
    }
}

/// Reads the answer to the upgrade request: whether it is `101 Switching Protocols`.
async fn read_upgrade_answer(reader: &mut Reader) -> std::io::Result<bool> {
    let mut line = Vec::new();
    let mut total = 0usize;
    let mut status = None;
    loop {
        line.clear();
        let n = (&mut *reader)
            .take((UPGRADE_ANSWER_BYTES_MAX - total) as u64)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed during the upgrade",
            ));
        }
        total += n;
        if !line.ends_with(b"\n") {
            return Err(std::io::Error::other("the answer to the upgrade is too long"));
        }
        if status.is_none() {
            let text = String::from_utf8_lossy(&line);
            let mut words = text.split_whitespace();
            status = Some(match (words.next(), words.next()) {
                (Some(version), Some(code)) if version.starts_with("HTTP/1.") => code == "101",
                _ => {
                    return Err(std::io::Error::other(format!(
                        "not an HTTP answer: {:?}",
                        text.trim()
                    )));
                }
            });
            continue;
        }
        if line == b"\r\n" || line == b"\n" {
            // (Another answer's body, if any, is not read: the connection is dropped.)
            return Ok(status.unwrap_or(false));
        }
    }
}

/// Reads answers and hands each to its request, until the connection breaks.
async fn read_answers(mut reader: Reader, shared: Arc<Shared>, addr: String) {
    let reason = loop {
        match read_answer(&mut reader).await {
            Ok((id, answer)) => {
                let sender = shared.pending.lock().expect("pending lock").remove(&id);
                // None: a request that was cancelled or timed out.
                if let Some(sender) = sender {
                    let _ = sender.send(answer);
                }
            }
            Err(reason) => break reason,
        }
    };
    // (This crate does not log: the reason reaches the requests in flight.)
    shared.break_with(format!("{addr}: {reason}"));
}

/// Why an answer frame could not be read: the connection breaks with it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    /// The server closed the connection between answers.
    #[error("the server closed the connection")]
    Closed,
    /// Reading from the socket failed.
    #[error("reading failed: {0}")]
    Read(#[source] std::io::Error),
    /// The frame's prefix or head is not a valid answer frame.
    #[error(transparent)]
    Frame(#[from] frames::FrameError),
    /// A header's name is not a valid HTTP header name.
    #[error("bad header name {name:?}: {source}")]
    HeaderName {
        /// The name as it came.
        name: String,
        /// Why it is not valid.
        #[source]
        source: reqwest::header::InvalidHeaderName,
    },
    /// A header's value is not a valid HTTP header value.
    #[error("bad header value: {0}")]
    HeaderValue(#[source] reqwest::header::InvalidHeaderValue),
}

async fn read_answer(reader: &mut Reader) -> Result<(u64, RawAnswer), AnswerError> {
    let mut prefix = [0u8; PREFIX_BYTES];
    reader.read_exact(&mut prefix).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => AnswerError::Closed,
        _ => AnswerError::Read(e),
    })?;
    let (head_len, body_len) = frames::decode_prefix(prefix)?;
    let mut head = vec![0u8; head_len];
    reader.read_exact(&mut head).await.map_err(AnswerError::Read)?;
    let body = crate::bodies::read_body(reader, body_len).await.map_err(AnswerError::Read)?;
    raw_answer(&head, body)
}

/// An answer frame's head (after its prefix) and body as a [`RawAnswer`], with its id.
pub(crate) fn raw_answer(head: &[u8], body: Bytes) -> Result<(u64, RawAnswer), AnswerError> {
    let parsed = frames::decode_answer(head)?;
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    for (name, value) in parsed.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|source| AnswerError::HeaderName { name: name.to_string(), source })?;
        let value = HeaderValue::from_str(value).map_err(AnswerError::HeaderValue)?;
        headers.append(name, value);
    }
    Ok((parsed.id, RawAnswer { status: parsed.status, headers, body }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// Reads the upgrade request and answers `answer`.
    async fn take_upgrade<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, answer: &str) {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "the upgrade request");
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with(&format!("GET {} HTTP/1.1\r\n", frames::UPGRADE_PATH)), "{head}");
        assert!(head.contains(&format!("upgrade: {}\r\n", frames::PROTOCOL)), "{head}");
        stream.write_all(answer.as_bytes()).await.unwrap();
    }

    const SWITCH: &str = "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: optio-frames/1\r\n\r\n";

    /// Reads one request frame: its id, path and body.
    async fn take_request<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(u64, String, Vec<u8>)> {
        let mut prefix = [0u8; PREFIX_BYTES];
        stream.read_exact(&mut prefix).await.ok()?;
        let (head_len, body_len) = frames::decode_prefix(prefix).unwrap();
        let mut head = vec![0u8; head_len];
        stream.read_exact(&mut head).await.unwrap();
        let mut body = vec![0u8; body_len];
        stream.read_exact(&mut body).await.unwrap();
        let request = frames::decode_request(&head).unwrap();
        Some((request.id, request.path.to_string(), body))
    }

    async fn send_answer<S: AsyncWrite + Unpin>(stream: &mut S, id: u64, status: u16, body: &[u8]) {
        let mut frame = Vec::new();
        frames::encode_answer(&mut frame, id, status, [("x-test", "yes")], body.len()).unwrap();
        frame.extend_from_slice(body);
        stream.write_all(&frame).await.unwrap();
        stream.flush().await.unwrap();
    }

    /// A certificate for 127.0.0.1 and its key (PEM files in `dir`), and a client
    /// configuration that trusts it.
    fn tls_pair(dir: &std::path::Path, name: &str) -> (rustls::ServerConfig, rustls::ClientConfig) {
        optio_tls::install_crypto_provider();
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.key_pair.serialize_pem()).unwrap();
        let server = optio_tls::server_config(&cert, &key, None).unwrap();
        let client = optio_tls::client_config(&cert, None).unwrap();
        (server, client)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn over_tls_the_upgrade_and_every_frame_go_in_records() {
        let dir = tempfile::tempdir().unwrap();
        let (server_config, client_config) = tls_pair(dir.path(), "server");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            // Anything but a TLS handshake fails here.
            let mut stream = acceptor.accept(stream).await.expect("a TLS handshake");
            take_upgrade(&mut stream, SWITCH).await;
            let mut requests = Vec::new();
            for _ in 0..2 {
                requests.push(take_request(&mut stream).await.unwrap());
            }
            for (id, path, body) in requests.into_iter().rev() {
                let text = format!("{path} {} bytes", body.len());
                send_answer(&mut stream, id, 201, text.as_bytes()).await;
            }
            let _ = take_request(&mut stream).await;
        });
        let frames = Frames::with_tls(client_config);
        // A small body goes behind its head, a large one after it: both reach the server.
        let (small, large) = (Bytes::from(vec![1u8; 3000]), Bytes::from(vec![2u8; 300_000]));
        let (a, b) = tokio::join!(
            frames.send(&addr, "PUT", "/small", &[], Some(&small)),
            frames.send(&addr, "PUT", "/large", &[], Some(&large)),
        );
        let (Ok(a), Ok(b)) = (a, b) else { panic!("a request over TLS failed") };
        assert_eq!((a.status, &a.body[..]), (201, &b"/small 3000 bytes"[..]));
        assert_eq!((b.status, &b.body[..]), (201, &b"/large 300000 bytes"[..]));
        drop(frames);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_server_whose_certificate_is_not_trusted_is_unreachable_over_tls() {
        let dir = tempfile::tempdir().unwrap();
        let (server_config, _) = tls_pair(dir.path(), "server");
        let (_, trusts_another) = tls_pair(dir.path(), "another");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            acceptor.accept(stream).await.is_err()
        });
        let frames = Frames::with_tls(trusts_another);
        match frames.send(&addr, "GET", "/x", &[], None).await {
            Err(NotSent::Failed(Failure::Unreachable(reason))) => {
                assert!(reason.contains("TLS handshake with"), "{reason}");
            }
            Err(NotSent::Failed(other)) => panic!("not unreachable: {other:?}"),
            Err(NotSent::Unsupported) => panic!("taken for a server without frames"),
            Ok(_) => panic!("an untrusted server was answered"),
        }
        assert!(server.await.unwrap(), "the server saw the handshake fail");
    }

    #[test]
    fn server_names_are_the_host_of_the_address() {
        let name = |addr: &str| server_name(addr).map(|n| n.to_str().into_owned());
        assert_eq!(name("127.0.0.1:7001").unwrap(), "127.0.0.1");
        assert_eq!(name("[::1]:7001").unwrap(), "::1");
        assert_eq!(name("server-1.rack2:7001").unwrap(), "server-1.rack2");
        assert!(name("not a name:1").is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_reach_their_requests_in_any_order() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            take_upgrade(&mut stream, SWITCH).await;
            let mut requests = Vec::new();
            for _ in 0..3 {
                requests.push(take_request(&mut stream).await.unwrap());
            }
            // Answered last first; each answer's body is its request's path and body.
            for (id, path, body) in requests.into_iter().rev() {
                let text = format!("{path} {}", String::from_utf8(body).unwrap());
                send_answer(&mut stream, id, 200, text.as_bytes()).await;
            }
            // The connection stays open until the client is done.
            let _ = take_request(&mut stream).await;
        });
        let frames = Frames::default();
        let send = |n: u32| {
            let frames = &frames;
            let addr = addr.clone();
            async move {
                let body = Bytes::from(format!("body {n}"));
                let path = format!("/p/{n}");
                frames.send(&addr, "PUT", &path, &[("x-n", "1")], Some(&body)).await
            }
        };
        let (a, b, c) = tokio::join!(send(1), send(2), send(3));
        for (n, answer) in [(1, a), (2, b), (3, c)] {
            let Ok(answer) = answer else { panic!("request {n} failed") };
            assert_eq!(answer.status, 200);
            assert_eq!(answer.headers["x-test"], "yes");
            assert_eq!(answer.body, format!("/p/{n} body {n}").as_bytes());
        }
        drop(frames);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_server_that_does_not_upgrade_is_left_to_http() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            take_upgrade(&mut stream, "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").await;
            // No second connection comes (within the retry interval).
            tokio::time::timeout(Duration::from_millis(300), listener.accept()).await.is_err()
        });
        let frames = Frames::default();
        for _ in 0..2 {
            let sent = frames.send(&addr, "GET", "/x", &[], None).await;
            assert!(matches!(sent, Err(NotSent::Unsupported)));
        }
        assert!(server.await.unwrap(), "the server was asked once");
    }

    /// A test server's side of a connection, plain or TLS.
    trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
    impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

    /// Accepts a connection on `listener`, with TLS if `acceptor`.
    async fn accept(
        listener: &TcpListener,
        acceptor: Option<&tokio_rustls::TlsAcceptor>,
    ) -> Box<dyn Io> {
        let (stream, _) = listener.accept().await.unwrap();
        match acceptor {
            None => Box::new(stream),
            Some(acceptor) => Box::new(acceptor.accept(stream).await.expect("a TLS handshake")),
        }
    }

    /// A server that takes a request and closes its connection unanswered, then answers on
    /// the next: the first request fails as dropped, the second opens a new connection (TLS
    /// when `tls`).
    async fn a_broken_connection_is_dropped_and_replaced(tls: bool) {
        let dir = tempfile::tempdir().unwrap();
        let (acceptor, frames) = if tls {
            let (server, client) = tls_pair(dir.path(), "server");
            (Some(tokio_rustls::TlsAcceptor::from(Arc::new(server))), Frames::with_tls(client))
        } else {
            (None, Frames::default())
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            // The first connection takes a request and closes: it is never answered.
            let mut stream = accept(&listener, acceptor.as_ref()).await;
            take_upgrade(&mut stream, SWITCH).await;
            take_request(&mut stream).await.unwrap();
            drop(stream);
            // The second answers.
            let mut stream = accept(&listener, acceptor.as_ref()).await;
            take_upgrade(&mut stream, SWITCH).await;
            let (id, _, _) = take_request(&mut stream).await.unwrap();
            send_answer(&mut stream, id, 204, b"").await;
            let _ = take_request(&mut stream).await;
        });
        match frames.send(&addr, "DELETE", "/k", &[], None).await {
            Err(NotSent::Failed(Failure::Dropped(reason))) => {
                assert!(reason.contains("closed"), "{reason}");
            }
            Err(NotSent::Failed(other)) => panic!("dropped, not {other}"),
            Err(NotSent::Unsupported) => panic!("dropped, not unsupported"),
            Ok(_) => panic!("an answer from a server that closed"),
        }
        let answer = frames.send(&addr, "DELETE", "/k", &[], None).await;
        assert!(matches!(answer, Ok(RawAnswer { status: 204, .. })));
        drop(frames);
        server.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_broken_connection_fails_its_requests_as_dropped_and_the_next_opens_a_new_one() {
        a_broken_connection_is_dropped_and_replaced(false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_broken_tls_connection_fails_its_requests_as_dropped_and_the_next_opens_a_new_one() {
        a_broken_connection_is_dropped_and_replaced(true).await;
    }

    /// Requests waiting for a connection attempt that fails take its failure: a server that
    /// accepts nothing costs them one connect timeout together, not one each in turn.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_waiting_for_a_connection_that_fails_share_its_failure() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // Accepts connections and never answers the upgrade; counts them.
        let accepted = Arc::new(AtomicU64::new(0));
        let server = {
            let accepted = accepted.clone();
            tokio::spawn(async move {
                let mut held = Vec::new();
                while let Ok((stream, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    held.push(stream);
                }
            })
        };
        let frames = Frames { answer_timeout: Duration::from_millis(500), ..Frames::default() };
        let send = || frames.send(&addr, "HEAD", "/k", &[], None);
        let (a, b, c, d) = tokio::join!(send(), send(), send(), send());
        let sent = [a, b, c, d];
        for result in &sent {
            let Err(NotSent::Failed(failure)) = result else { panic!("a failure") };
            assert!(failure.to_string().contains("no answer within"), "{failure}");
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 1, "one attempt for the four requests");
        // A request that comes after the failure tries again.
        assert!(send().await.is_err());
        assert_eq!(accepted.load(Ordering::Relaxed), 2, "a later request dials again");
        server.abort();
    }

    /// A request that gets no answer in time breaks its connection: the next one opens a new
    /// connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_that_times_out_breaks_its_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            // The first connection takes a request and never answers it.
            let (mut first, _) = listener.accept().await.unwrap();
            take_upgrade(&mut first, SWITCH).await;
            take_request(&mut first).await.unwrap();
            // The second answers.
            let (mut stream, _) = listener.accept().await.unwrap();
            take_upgrade(&mut stream, SWITCH).await;
            let (id, _, _) = take_request(&mut stream).await.unwrap();
            send_answer(&mut stream, id, 200, b"").await;
            let _ = take_request(&mut stream).await;
            drop(first);
        });
        let frames = Frames { answer_timeout: Duration::from_millis(300), ..Frames::default() };
        match frames.send(&addr, "GET", "/k", &[], None).await {
            Err(NotSent::Failed(Failure::Unreachable(reason))) => {
                assert!(reason.contains("no answer"), "{reason}");
            }
            _ => panic!("a timeout"),
        }
        let answer = frames.send(&addr, "GET", "/k", &[], None).await;
        assert!(
            matches!(answer, Ok(RawAnswer { status: 200, .. })),
            "answered on a new connection"
        );
        drop(frames);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn nothing_listening_is_not_running() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let sent = Frames::default().send(&addr, "HEAD", "/k", &[], None).await;
        assert!(matches!(sent, Err(NotSent::Failed(Failure::NotRunning(_)))));
    }

    /// The frame's head after its prefix, as [`raw_answer`] takes it.
    fn answer_head(headers: &[(&str, &str)]) -> Vec<u8> {
        let mut frame = Vec::new();
        frames::encode_answer(&mut frame, 7, 200, headers.iter().copied(), 0).expect("encoded");
        frame.split_off(PREFIX_BYTES)
    }

    #[test]
    fn an_answer_with_a_bad_header_name_is_that_error() {
        let head = answer_head(&[("bad(name)", "x")]);
        let error = raw_answer(&head, Bytes::new()).err().expect("refused");
        assert!(
            matches!(&error, AnswerError::HeaderName { name, .. } if name == "bad(name)"),
            "{error:?}"
        );
        let (id, answer) = raw_answer(&answer_head(&[("x-a", "b")]), Bytes::new()).expect("read");
        assert_eq!(
            (id, answer.status, &answer.headers["x-a"]),
            (7, 200, &HeaderValue::from_static("b"))
        );
    }

    #[test]
    fn a_truncated_answer_head_is_a_frame_error() {
        let head = answer_head(&[("x-a", "b")]);
        let error = raw_answer(&head[..head.len() - 1], Bytes::new()).err().expect("refused");
        assert!(matches!(error, AnswerError::Frame(_)), "{error:?}");
    }

    /// A connect refused is a server not running; one reset or aborted, a server going away,
    /// sent again on a new connection (a write with a replica killed under it then finds it
    /// not running, and goes on without it); anything else is unreachable.
    #[test]
    fn a_connect_reset_is_sent_again_and_a_connect_refused_is_not_running() {
        use std::io::{Error, ErrorKind};
        let failure = |kind| connect_failure("connect".into(), &Error::from(kind));
        assert!(failure(ErrorKind::ConnectionRefused).is_not_running());
        assert!(failure(ErrorKind::ConnectionReset).is_dropped());
        assert!(failure(ErrorKind::ConnectionAborted).is_dropped());
        let other = failure(ErrorKind::HostUnreachable);
        assert!(other.is_unreachable() && !other.is_dropped() && !other.is_not_running());
    }
}
