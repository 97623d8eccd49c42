//! # optio-net
//!
//! Typed requests to one device's server, and what their answers mean: the transport the
//! client uses for everything and servers use to migrate objects to each other. A [`Call`]
//! names the device, the pool, the sender's map epoch and an [`Op`] (probe, get, put,
//! delete, list, and the choice-record operations); the routes, headers and bodies are
//! `optio-proto`'s. [`Transport`] is the trait the client sends through: [`HttpTransport`]
//! (one connection pool per process) in production, a fault-injecting one in tests. Error
//! answers become [`Failure`]s with the server's [`ErrorKind`](optio_proto::ErrorKind), except a 404 on a probe or a
//! record request, which is an answer (the object or record is simply absent); an answer
//! whose headers are malformed is a [`Failure::Malformed`], never a zero.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod bodies;
pub mod buffers;
mod chunks;
mod error;
pub use error::TransportError;
mod failure;
pub use failure::{CONNECT_TIMEOUT, Failure, POOL_IDLE_TIMEOUT, REQUEST_TIMEOUT, STATUS_TIMEOUT};
pub mod exposition;
mod frames;
mod op;
pub use op::{Call, Endpoint, FRAMED_BYTES_MAX, Op};
pub mod listen;
pub mod local;
pub use chunks::Chunks;
pub mod throttle;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use optio_placement::PoolId;
use optio_proto::answer::{Envelope, Refusal};
use optio_proto::own::{OwnAnswer, OwnAnswerError, OwnRequest, ScrubQuery};
use optio_proto::request::OpKind;
use optio_proto::route;
use optio_proto::wire;
use optio_proto::{
    ChoiceRecord, DeviceMetrics, ListQuery, Listing, ObjectInfo, ObjectVersion, ServerStatus,
};
pub use reqwest::Method;

/// A successful answer.
#[derive(Clone, Debug)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Stored object, from the answer's headers.
    pub info: Option<ObjectInfo>,
    /// Choice record, if the answer carried one.
    pub record: Option<ChoiceRecord>,
    /// The device's metrics.
    pub metrics: Option<DeviceMetrics>,
    /// The server's incarnation (changes when it restarts).
    pub incarnation: Option<u64>,
    /// On a probe that found no object: the version it was deleted at, if a tombstone stands.
    pub deleted: Option<ObjectVersion>,
    /// A listing's page.
    pub listing: Option<Listing>,
    /// An object's bytes, in the chunks they arrived in.
    pub body: Chunks,
}

/// An answer, or why there is none (with the metrics the error answer carried, if any).
pub type Reply = Result<Answer, (Failure, Option<DeviceMetrics>)>;

/// A boxed future, for [`Transport`]'s methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a process talks to devices: over HTTP ([`HttpTransport`]), or in tests through a
/// transport that loses, delays or rewrites answers.
pub trait Transport: Send + Sync + 'static {
    /// Sends a call; error answers become [`Failure::Refused`], except a 404 on a probe or a
    /// record request, which is an answer ([`Op::absent_is_an_answer`]).
    fn send<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Reply>;

    /// The `/v1/status` of the server at `addr`.
    fn server_status<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<ServerStatus, Failure>>;

    /// Sends `call` (an [`Op::Open`]) to the server's local socket at `socket` (see
    /// [`local`]): the object's headers and an open, read-only descriptor of its file. A
    /// transport without local reads fails every call (the default).
    fn open_local<'a>(
        &'a self,
        call: Call<'a>,
        socket: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(Answer, std::fs::File), Failure>> {
        let _ = (call, socket);
        Box::pin(async { Err(Failure::Unreachable("this transport has no local reads".into())) })
    }

    /// One page of a device's listing of `pool`.
    fn list<'a>(
        &'a self,
        endpoint: &'a Endpoint,
        pool: PoolId,
        epoch: u64,
        query: ListQuery,
    ) -> BoxFuture<'a, Result<(Answer, Listing), Failure>> {
        Box::pin(async move {
            let call = Call::new(endpoint, pool, epoch, Op::List(query));
            let mut answer = self.send(call).await.map_err(|(failure, _)| failure)?;
            let listing = answer.listing.take().ok_or_else(|| {
                Failure::Malformed("a listing's answer without a listing".to_string())
            })?;
            Ok((answer, listing))
        })
    }
}

/// The HTTP transport: one connection pool per process, and the identity its requests are
/// signed with (none: unsigned, for servers run with `--no-auth`).
#[derive(Clone, Debug)]
pub struct HttpTransport {
    http: reqwest::Client,
    /// Shared by the transport's clones, so that a new key (a rotation) reaches all of them.
    credentials: Option<Signer>,
    /// `http` or `https`.
    scheme: &'static str,
    /// Recent bodies and their hashes: a write sends the same buffer to every replica, and
    /// is hashed once (see [`HttpTransport::body_hash`]).
    hashes: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<(bytes::Bytes, String)>>>,
    /// Each server address's URL (`scheme://addr/`), parsed once: a request's URL is that with
    /// its path set, which skips parsing and IDNA-checking the host on every request.
    bases: std::sync::Arc<std::sync::RwLock<std::collections::HashMap<String, reqwest::Url>>>,
    /// Frames connections (see [`optio_proto::frames`]), plain or TLS as the transport is, for
    /// the requests that fit a frame; none: everything over HTTP/1.1 (`OPTIO_FRAMES=0`).
    frames: Option<std::sync::Arc<frames::Frames>>,
    /// Connections to servers' local sockets ([`local`]).
    locals: std::sync::Arc<local::Locals>,
}

/// The environment variable that turns frames off (`0`): every request over HTTP/1.1.
pub const FRAMES_ENV: &str = "OPTIO_FRAMES";

/// Frames connections (TLS configured by `tls`, else plain), unless [`FRAMES_ENV`] is `0`.
fn frames_unless_disabled(
    tls: Option<&rustls::ClientConfig>,
) -> Option<std::sync::Arc<frames::Frames>> {
    if std::env::var(FRAMES_ENV).is_ok_and(|v| v.trim() == "0") {
        return None;
    }
    Some(std::sync::Arc::new(match tls {
        None => frames::Frames::default(),
        Some(config) => frames::Frames::with_tls(config.clone()),
    }))
}

/// Server addresses whose URLs are kept (past it the cache starts again).
const BASES_KEPT: usize = 4096;

/// The identity a transport signs with, replaceable while it runs.
type Signer = std::sync::Arc<std::sync::RwLock<std::sync::Arc<optio_proto::auth::Credentials>>>;

/// The path and query of `url`, as they go on the wire (as the URL parser normalised them):
/// what is signed.
fn path_and_query(url: &reqwest::Url) -> String {
    match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    }
}

/// A request's URL, parsed once (for the request and for its signature).
fn parse_url(text: &str) -> Result<reqwest::Url, Failure> {
    reqwest::Url::parse(text)
        .map_err(|e| Failure::Unreachable(format!("bad address in {text}: {e}")))
}

/// Bodies whose hashes are remembered, at most.
const HASHES_KEPT: usize = 64;

/// The bytes of remembered bodies, at most (the newest is kept whatever its size).
const HASHED_BYTES_KEPT: usize = 16 << 20;

impl HttpTransport {
    /// A transport whose requests are signed with `credentials` (see [`optio_proto::auth`]).
    pub fn with_credentials(
        credentials: Option<optio_proto::auth::Credentials>,
    ) -> Result<HttpTransport, TransportError> {
        HttpTransport::with_options(credentials, None, None)
    }

    /// A transport signing with `credentials` and speaking TLS to servers whose certificate
    /// the CA in `tls_ca` (PEM) signed (none: plain HTTP), showing them the client certificate
    /// and key in `identity` (mutual TLS: a server that knows the certificate's entity takes
    /// its unsigned requests as that entity's).
    pub fn with_options(
        credentials: Option<optio_proto::auth::Credentials>,
        tls_ca: Option<&std::path::Path>,
        identity: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<HttpTransport, TransportError> {
        if identity.is_some() && tls_ca.is_none() {
            return Err(TransportError::IdentityWithoutCa);
        }
        let mut transport = match tls_ca {
            None => HttpTransport::new()?,
            Some(ca) => {
                let config = optio_tls::client_config(ca, identity)?;
                let frames = frames_unless_disabled(Some(&config));
                let http = HttpTransport::builder()
                    .use_preconfigured_tls(config)
                    .build()
                    .map_err(|source| TransportError::Build { scheme: "HTTPS", source })?;
                HttpTransport {
                    http,
                    credentials: None,
                    scheme: "https",
                    hashes: Default::default(),
                    bases: Default::default(),
                    frames,
                    locals: Default::default(),
                }
            }
        };
        transport.credentials = credentials
            .map(|c| std::sync::Arc::new(std::sync::RwLock::new(std::sync::Arc::new(c))));
        Ok(transport)
    }

    fn builder() -> reqwest::ClientBuilder {
        optio_tls::install_crypto_provider();
        reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true)
            .pool_max_idle_per_host(256)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
    }

    /// The identity requests are signed with.
    pub fn credentials(&self) -> Option<std::sync::Arc<optio_proto::auth::Credentials>> {
        let signer = self.credentials.as_ref()?;
        Some(signer.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }

    /// Signs with `key` from now on (the same entity; its key was rotated), in this transport
    /// and every clone of it. Nothing happens to a transport that does not sign.
    pub fn rekey(&self, key: optio_proto::auth::Key) {
        if let Some(signer) = &self.credentials {
            let mut held = signer.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            let id = held.id.clone();
            *held = std::sync::Arc::new(optio_proto::auth::Credentials { id, key });
        }
    }

    /// Adds the signature to a request of `method` to `url` at the server `addr` (the
    /// target it is signed for); no other header is signed.
    fn signed(
        &self,
        mut request: reqwest::RequestBuilder,
        method: &str,
        url: &reqwest::Url,
        addr: &str,
    ) -> reqwest::RequestBuilder {
        let mut headers = Vec::new();
        self.add_target(&mut headers, addr);
        for (name, value) in &headers {
            request = request.header(*name, value);
        }
        match self.signature(method, url, &headers) {
            Some(signature) => request.header(optio_proto::auth::AUTH_HEADER, signature),
            None => request,
        }
    }

    /// Names the server at `addr` as a signed request's target ([`wire::TARGET`]): the
    /// signature then holds there only. Nothing for a transport that does not sign.
    fn add_target(&self, headers: &mut Vec<(&'static str, String)>, addr: &str) {
        if self.credentials.is_some() {
            headers.push((wire::TARGET, addr.to_string()));
        }
    }

    /// The signature of a request of `method` to `url` whose signed headers are `headers`
    /// (none: this transport does not sign).
    fn signature(
        &self,
        method: &str,
        url: &reqwest::Url,
        headers: &[(&str, String)],
    ) -> Option<String> {
        let credentials = self.credentials()?;
        let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Some(credentials.sign(method, &path_and_query(url), &pairs, now_ms))
    }

    /// The BLAKE3 hash of `data`, computed once per buffer (a write sends one buffer to
    /// every replica). A remembered body is held (a clone of its `Bytes`), so its memory is
    /// neither freed nor changed while remembered: a body at the same address with the same
    /// length is the same bytes, and nothing of the content is read to tell (an XXH3 of every
    /// body was 12 % of a client's samples writing 4 MiB objects; a CRC cannot tell apart
    /// blocks that end with their own CRC, such as ext4's superblocks).
    fn body_hash(&self, data: &bytes::Bytes) -> String {
        let same = |seen: &bytes::Bytes| seen.as_ptr() == data.as_ptr() && seen.len() == data.len();
        if let Some((_, hash)) =
            self.hashes.lock().expect("hashes lock").iter().find(|(seen, _)| same(seen))
        {
            return hash.clone();
        }
        let hash = optio_proto::auth::content_hash(data);
        let mut hashes = self.hashes.lock().expect("hashes lock");
        hashes.push_back((data.clone(), hash.clone()));
        let mut held: usize = hashes.iter().map(|(body, _)| body.len()).sum();
        while hashes.len() > 1 && (hashes.len() > HASHES_KEPT || held > HASHED_BYTES_KEPT) {
            if let Some((body, _)) = hashes.pop_front() {
                held -= body.len();
            }
        }
        hash
    }

    /// A transport with a connection pool (unsigned requests).
    pub fn new() -> Result<HttpTransport, TransportError> {
        let http = HttpTransport::builder()
            .build()
            .map_err(|source| TransportError::Build { scheme: "HTTP", source })?;
        Ok(HttpTransport {
            http,
            credentials: None,
            scheme: "http",
            hashes: Default::default(),
            bases: Default::default(),
            frames: frames_unless_disabled(None),
            locals: Default::default(),
        })
    }

    /// The URL of `path_and_query` (already percent-encoded) on the server at `addr`: the same
    /// URL as parsing the whole text gives.
    fn url_of(&self, addr: &str, path_and_query: &str) -> Result<reqwest::Url, Failure> {
        let cached = self.bases.read().expect("bases lock").get(addr).cloned();
        let mut url = match cached {
            Some(url) => url,
            None => {
                let url = parse_url(&format!("{}://{addr}/", self.scheme))?;
                let mut bases = self.bases.write().expect("bases lock");
                if bases.len() >= BASES_KEPT {
                    bases.clear();
                }
                bases.insert(addr.to_string(), url.clone());
                url
            }
        };
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path_and_query, None),
        };
        url.set_path(path);
        url.set_query(query);
        Ok(url)
    }

    async fn send_http(&self, call: Call<'_>) -> Reply {
        let request = call.request();
        let url =
            self.url_of(&call.endpoint.addr, &request.path()).map_err(|failure| (failure, None))?;
        let asked = request.op.kind();
        let method = call.op.method();
        let mut headers = request.headers();
        self.add_target(&mut headers, &call.endpoint.addr);
        let mut body = None;
        if let Op::Put { data, .. } | Op::WriteAt { data, .. } | Op::Trim { body: data } = &call.op
        {
            // Over TLS the body travels sealed in the records that carry the signed head, so
            // the server takes it without a hash of its own (and hashes nothing).
            if self.credentials.is_some() && self.scheme != "https" {
                let hash = self.body_hash(data);
                headers.push((optio_proto::auth::CONTENT_HASH_HEADER, hash));
            }
            body = Some(data.clone());
        }
        let signature = self.signature(method.as_str(), &url, &headers);
        let key = call.op.key();
        let mut framed = None;
        if let Some(frames) = self.frames.as_ref().filter(|_| call.op.fits_a_frame()) {
            let path = path_and_query(&url);
            let pairs = signed_pairs(&headers, signature.as_deref());
            let sent =
                frames.send(&call.endpoint.addr, method.as_str(), &path, &pairs, body.as_ref());
            match sent.await {
                Ok(answer) => framed = Some(answer),
                Err(frames::NotSent::Unsupported) => {}
                Err(frames::NotSent::Failed(failure)) => return Err((failure, None)),
            }
        }
        let (status, headers, body) =
            match framed {
                Some(answer) => (answer.status, answer.headers, Chunks::from(answer.body)),
                None => {
                    let mut request = self.http.request(method.clone(), url);
                    for (name, value) in &headers {
                        request = request.header(*name, value);
                    }
                    if let Some(signature) = signature {
                        request = request.header(optio_proto::auth::AUTH_HEADER, signature);
                    }
                    if let Some(body) = body {
                        request = request.body(body);
                    }
                    let mut response = request.send().await.map_err(|e| (no_answer(&e), None))?;
                    let status = response.status().as_u16();
                    let headers = response.headers().clone();
                    let mut body = Chunks::default();
                    while let Some(chunk) = response.chunk().await.map_err(|e| {
                        (Failure::Unreachable(error_chain(&e)), metrics_of(&headers))
                    })? {
                        body.push(chunk);
                    }
                    (status, headers, body)
                }
            };
        answer_of(status, &headers, body, asked, key, call.endpoint.device)
    }

    async fn open_local_http(
        &self,
        call: Call<'_>,
        socket: &std::path::Path,
    ) -> Result<(Answer, std::fs::File), Failure> {
        let Op::Open { key } = call.op else {
            return Err(Failure::Malformed("only opens go to a local socket".into()));
        };
        let request = call.request();
        let url = self.url_of(&call.endpoint.addr, &request.path())?;
        let method = call.op.method();
        let mut headers = request.headers();
        self.add_target(&mut headers, &call.endpoint.addr);
        let signature = self.signature(method.as_str(), &url, &headers);
        let pairs = signed_pairs(&headers, signature.as_deref());
        let mut frame = Vec::with_capacity(512);
        optio_proto::frames::encode_request(
            &mut frame,
            1,
            method.as_str(),
            &path_and_query(&url),
            pairs,
            0,
        )
        .map_err(|e| Failure::Malformed(format!("cannot frame the request: {e}")))?;
        let (head, body, fds) = self.locals.exchange(socket, &frame).await?;
        let (_, raw) = frames::raw_answer(&head, body)
            .map_err(|e| Failure::Malformed(format!("local socket {}: {e}", socket.display())))?;
        let body = Chunks::from(raw.body);
        let answer = answer_of(
            raw.status,
            &raw.headers,
            body,
            OpKind::Open,
            Some(key),
            call.endpoint.device,
        )
        .map_err(|(failure, _)| failure)?;
        let fd = local::one_fd(fds).ok_or_else(|| {
            Failure::Malformed(format!(
                "local socket {} answered an open without exactly one descriptor",
                socket.display()
            ))
        })?;
        Ok((answer, std::fs::File::from(fd)))
    }

    /// Asks the server at `addr` for a scrub pass now (`POST /v1/scrub?QUERY`) and waits for
    /// its reports, one per device, however long the pass takes.
    pub async fn scrub(
        &self,
        addr: &str,
        query: ScrubQuery,
    ) -> Result<Vec<optio_proto::ScrubReport>, Failure> {
        let asked = OwnRequest::Scrub(query);
        match self.own(addr, &asked, Duration::from_secs(24 * 3600)).await? {
            OwnAnswer::Scrubbed(reports) => Ok(reports),
            other => Err(Failure::Malformed(format!("{} answered {other:?}", asked.name()))),
        }
    }

    /// The server at `addr`'s `/metrics`: Prometheus' text format (signed as this transport's
    /// identity: the servers answer it to `admin` entities unless their metrics are public).
    pub async fn server_metrics(&self, addr: &str) -> Result<String, Failure> {
        match self.own(addr, &OwnRequest::Metrics, STATUS_TIMEOUT).await? {
            OwnAnswer::Metrics(text) => Ok(text),
            other => Err(Failure::Malformed(format!("/metrics answered {other:?}"))),
        }
    }

    async fn server_status_http(&self, addr: &str) -> Result<ServerStatus, Failure> {
        match self.own(addr, &OwnRequest::Status, STATUS_TIMEOUT).await? {
            OwnAnswer::Status(status) => Ok(*status),
            other => Err(Failure::Malformed(format!("{} answered {other:?}", route::STATUS_PATH))),
        }
    }

    /// Sends a request to one of the server's own routes and decodes its answer (a refusal
    /// with its kind and reason, as device answers have theirs).
    async fn own(
        &self,
        addr: &str,
        asked: &OwnRequest,
        timeout: Duration,
    ) -> Result<OwnAnswer, Failure> {
        let url = parse_url(&format!("{}://{addr}{}", self.scheme, asked.path()))?;
        let method = asked.method();
        let request = match method {
            optio_proto::request::Method::Post => self.http.post(url.clone()),
            _ => self.http.get(url.clone()),
        }
        .timeout(timeout);
        let response = self
            .signed(request, method.as_str(), &url, addr)
            .send()
            .await
            .map_err(|e| no_answer(&e))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(|e| Failure::Unreachable(error_chain(&e)))?;
        let header = |name: &'static str| headers.get(name).and_then(|v| v.to_str().ok());
        OwnAnswer::decode(asked, status, header, body.as_ref()).map_err(|error| match error {
            OwnAnswerError::Refused(refusal) => Failure::Refused {
                kind: refusal.kind,
                reason: format!("{}: {}", asked.name(), refusal.reason),
                epoch: None,
                stored: None,
            },
            other => Failure::Malformed(other.to_string()),
        })
    }
}

impl Transport for HttpTransport {
    fn send<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Reply> {
        Box::pin(self.send_http(call))
    }

    fn server_status<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, Result<ServerStatus, Failure>> {
        Box::pin(self.server_status_http(addr))
    }

    fn open_local<'a>(
        &'a self,
        call: Call<'a>,
        socket: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(Answer, std::fs::File), Failure>> {
        Box::pin(self.open_local_http(call, socket))
    }
}

/// A request's headers as name–value pairs, with its signature (if signed) last: what a frame
/// carries.
fn signed_pairs<'h>(
    headers: &'h [(&'static str, String)],
    signature: Option<&'h str>,
) -> Vec<(&'h str, &'h str)> {
    let mut pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    if let Some(signature) = signature {
        pairs.push((optio_proto::auth::AUTH_HEADER, signature));
    }
    pairs
}

/// The device metrics an answer's headers piggyback, if any.
fn metrics_of(headers: &reqwest::header::HeaderMap) -> Option<DeviceMetrics> {
    Envelope::metrics_of(|name| headers.get(name).and_then(|v| v.to_str().ok()))
}

/// What the answer of `status` with `headers` and `body` to `call` means, as the HTTP
/// transport reads it: an [`Answer`], or the refusal it carries with the metrics it
/// piggybacked. For transports that reach a server some other way (an in-process server in
/// tests) and must read its answers exactly as [`HttpTransport`] does.
#[allow(clippy::result_large_err)]
pub fn reply_of(
    call: &Call<'_>,
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: Chunks,
) -> Reply {
    answer_of(status, headers, body, call.op.to_proto().kind(), call.op.key(), call.endpoint.device)
}

/// What an answer of `status` with `headers` and `body` to a request of kind `asked` for
/// `key`, from `device`, means: an [`Answer`], or the refusal it carries, as
/// [`optio_proto::answer::Answer::decode`] reads it (the one definition both ends share);
/// an answer it does not decode is a [`Failure::Malformed`].
// (`Reply` is what `Transport::send` returns; its error carries the metrics an error answer
// brought, which are larger than clippy likes.)
#[allow(clippy::result_large_err)]
fn answer_of(
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: Chunks,
    asked: OpKind,
    key: Option<&str>,
    device: u32,
) -> Reply {
    use optio_proto::answer::Answer as Decoded;
    let header = |name: &'static str| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let (decoded, envelope) =
        Decoded::decode(asked, key, status, header, body).map_err(|error| {
            let metrics = Envelope::metrics_of(header);
            (Failure::Malformed(format!("device {device} answered {error}")), metrics)
        })?;
    let Envelope { epoch, metrics, incarnation } = envelope;
    let mut answer = Answer {
        status,
        info: None,
        record: None,
        metrics,
        incarnation,
        deleted: None,
        listing: None,
        body: Chunks::default(),
    };
    match decoded {
        Decoded::Refused(Refusal { kind, reason, stored }) => {
            return Err((Failure::Refused { kind, reason, epoch, stored }, answer.metrics));
        }
        Decoded::Probed { info, deleted, record } => {
            (answer.info, answer.deleted, answer.record) = (info, deleted, record);
        }
        Decoded::Object { info, body, .. } => (answer.info, answer.body) = (Some(info), body),
        Decoded::Opened { info } => answer.info = Some(info),
        Decoded::Record { record, info, .. } => (answer.record, answer.info) = (Some(record), info),
        Decoded::Listed(listing) => answer.listing = Some(listing),
        Decoded::Written { .. } | Decoded::Done => {}
    }
    Ok(answer)
}

/// The failure of a request that got no answer: [`Failure::NotRunning`] when the connection
/// was refused, [`Failure::Unreachable`] otherwise.
fn no_answer(error: &reqwest::Error) -> Failure {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && let Some(failure) = Failure::of_io(io.kind())
        {
            return failure(error_chain(error));
        }
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>()
            && (hyper.is_incomplete_message() || hyper.is_canceled() || hyper.is_closed())
        {
            return Failure::Dropped(error_chain(error));
        }
        source = cause.source();
    }
    Failure::Unreachable(error_chain(error))
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {

    /// Small requests go as frames; whole objects, large ranges and listings stream over HTTP.
    #[test]
    fn only_small_requests_go_as_frames() {
        let get = |range| Op::Get { key: "k", range };
        let max = FRAMED_BYTES_MAX;
        assert!(get(Some((0, 4095))).fits_a_frame());
        assert!(get(Some((4096, 4096 + max - 1))).fits_a_frame());
        assert!(!get(Some((4096, 4096 + max))).fits_a_frame());
        assert!(!get(Some((0, (4 << 20) - 1))).fits_a_frame());
        assert!(!get(None).fits_a_frame());
        let write = |len: u64| Op::WriteAt {
            key: "k",
            data: Bytes::from(vec![0u8; len as usize]),
            offset: 0,
            zeroes: 0,
            size: 4 << 20,
            base: None,
            version: ObjectVersion(1),
            checksum: 0,
            pg_seed: None,
            sync: false,
        };
        assert!(write(4096).fits_a_frame());
        assert!(write(max).fits_a_frame());
        assert!(!write(max + 1).fits_a_frame());
        assert!(Op::Probe { key: "k", want_choice: true }.fits_a_frame());
        assert!(Op::Sync.fits_a_frame());
        assert!(!Op::Fetch { key: "k" }.fits_a_frame());
        let put = Op::Put {
            key: "k",
            data: Bytes::from_static(b"x"),
            version: ObjectVersion(1),
            checksum: 0,
            pg_seed: None,
        };
        assert!(!put.fits_a_frame());
    }

    /// Blocks that end with their own CRC-32C (ext4's superblocks) all have one CRC: a
    /// buffer reused at the same address for another such block must not get the first
    /// one's hash (mkfs.ext4 on a volume had its writes refused as altered). A remembered
    /// buffer cannot be reused while remembered; once forgotten, it is hashed again.
    #[test]
    fn body_hashes_tell_apart_blocks_of_one_length_and_crc_at_one_address() {
        fn self_checksummed(fill: u8) -> Vec<u8> {
            let mut block = vec![fill; 1020];
            let crc = optio_proto::checksum(&block);
            block.extend_from_slice(&crc.to_le_bytes());
            block
        }
        let (a, b) = (self_checksummed(1), self_checksummed(2));
        assert_eq!(optio_proto::checksum(&a), optio_proto::checksum(&b), "the CRC residue");
        let transport = HttpTransport::new().unwrap();
        let mut buffer = bytes::BytesMut::with_capacity(1024);
        buffer.extend_from_slice(&a);
        let first = buffer.freeze();
        let at = first.as_ptr();
        let hash_a = transport.body_hash(&first);
        assert_eq!(transport.body_hash(&first.clone()), hash_a, "a clone is the same body");
        let first = first.try_into_mut().expect_err("a remembered body is held");
        // Forgotten once enough other bodies are remembered (by bytes, then by count).
        let big = bytes::Bytes::from(vec![3u8; HASHED_BYTES_KEPT]);
        transport.body_hash(&big);
        let mut buffer = first.try_into_mut().expect("forgotten: the only reference again");
        buffer.copy_from_slice(&b);
        let second = buffer.freeze();
        assert_eq!(second.as_ptr(), at, "the same buffer");
        let hash_b = transport.body_hash(&second);
        assert_eq!(hash_a, optio_proto::auth::content_hash(&a));
        assert_eq!(hash_b, optio_proto::auth::content_hash(&b));
        for i in 0..=HASHES_KEPT {
            transport.body_hash(&bytes::Bytes::from(vec![i as u8; 8]));
        }
        assert_eq!(transport.hashes.lock().unwrap().len(), HASHES_KEPT, "at most this many");
        assert!(second.try_into_mut().is_ok(), "forgotten by count");
    }
    use super::*;
    use bytes::Bytes;

    #[tokio::test]
    async fn a_refused_connection_is_not_running_and_a_dropped_one_is_dropped() {
        let transport = HttpTransport::new().unwrap();
        // Nothing listens: refused.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = closed.local_addr().unwrap().to_string();
        drop(closed);
        let endpoint = Endpoint { device: 1, addr };
        let call = Call::new(&endpoint, PoolId(1), 1, Op::Get { key: "k", range: None });
        let (failure, _) = transport.send(call).await.unwrap_err();
        assert!(failure.is_not_running(), "{failure}");
        // A server that accepts, then closes without answering: dropped, worth sending again.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = Endpoint { device: 1, addr: listener.local_addr().unwrap().to_string() };
        let server = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 64];
            let _ = socket.read(&mut buffer).await;
            drop(socket);
        });
        let call = Call::new(&endpoint, PoolId(1), 1, Op::Get { key: "k", range: None });
        let (failure, _) = transport.send(call).await.unwrap_err();
        assert!(failure.is_dropped(), "{failure}");
        assert!(failure.is_unreachable() && !failure.is_not_running());
        server.await.unwrap();
    }

    fn endpoint() -> Endpoint {
        Endpoint { device: 4, addr: "127.0.0.1:9".into() }
    }

    /// The requests the typed calls send are the ones the raw calls sent: same methods,
    /// paths, queries and headers.
    #[test]
    fn typed_calls_keep_the_wire_format() {
        let e = endpoint();
        let call = |op| Call::new(&e, PoolId(2), 7, op);
        let probe = call(Op::Probe { key: "a b/c", want_choice: true });
        assert_eq!(probe.op.method(), Method::HEAD);
        assert_eq!(probe.path(), "/v1/dev/4/objects/2/a%20b%2Fc");
        assert_eq!(probe.op.headers(), vec![(wire::WANT_CHOICE, "1".to_string())]);
        assert!(probe.op.absent_is_an_answer() && probe.op.is_probe());

        let get = call(Op::Get { key: "k", range: Some((3, 9)) });
        assert_eq!((get.op.method(), get.path()), (Method::GET, "/v1/dev/4/objects/2/k".into()));
        assert_eq!(get.op.headers(), vec![("range", "bytes=3-9".to_string())]);
        assert!(!get.op.absent_is_an_answer());

        let put = call(Op::Put {
            key: "k",
            data: Bytes::from_static(b"x"),
            version: ObjectVersion(11),
            checksum: 0xab,
            pg_seed: Some(5),
        });
        assert_eq!(put.op.method(), Method::PUT);
        assert_eq!(
            put.op.headers(),
            vec![
                (wire::VERSION, "11".to_string()),
                (wire::CHECKSUM, "000000ab".to_string()),
                (wire::PG, "5".to_string()),
            ]
        );

        let purge = call(Op::Delete {
            key: "k",
            version: Some(ObjectVersion(3)),
            purge: true,
            pg_seed: None,
        });
        assert_eq!(purge.op.method(), Method::DELETE);
        assert_eq!(
            purge.op.headers(),
            vec![(wire::VERSION, "3".to_string()), (wire::PURGE, "1".to_string())]
        );

        let query = ListQuery {
            prefix: Some("p/".into()),
            after: Some("p/x".into()),
            ..ListQuery::default()
        };
        let list = call(Op::List(query));
        assert_eq!(list.op.method(), Method::GET);
        assert_eq!(list.path(), "/v1/dev/4/objects/2?prefix=p%2F&after=p%2Fx");
        assert_eq!(call(Op::List(ListQuery::default())).path(), "/v1/dev/4/objects/2");

        let record = ChoiceRecord { candidate: 1, choices: 3, writer: 0xbeef };
        let put_record = call(Op::PutRecord {
            key: "k",
            record,
            replace_if_writer: Some(0xbeef),
            unless_contended: true,
            defer_sync: true,
        });
        assert_eq!(put_record.op.method(), Method::PUT);
        assert_eq!(put_record.path(), "/v1/dev/4/choices/2/k");
        assert_eq!(
            put_record.op.headers(),
            vec![
                (wire::CHOICE, "1/3/beef".to_string()),
                (wire::REPLACE_IF_WRITER, "beef".to_string()),
                (wire::UNLESS_CONTENDED, "1".to_string()),
                (wire::DEFER_SYNC, "1".to_string()),
            ]
        );
        assert!(put_record.op.absent_is_an_answer() && put_record.op.is_probe());
        let get_record = call(Op::GetRecord { key: "k" });
        assert_eq!((get_record.op.method(), get_record.op.headers()), (Method::GET, vec![]));
        assert!(get_record.op.absent_is_an_answer() && !get_record.op.is_probe());
        assert_eq!(call(Op::DeleteRecord { key: "k" }).op.method(), Method::DELETE);
    }

    /// A URL made from a server's cached base is the URL parsing the whole text gives, for
    /// keys that need percent-encoding, lists with queries and addresses of every form.
    #[test]
    fn urls_from_cached_bases_are_the_parsed_ones() {
        let transport = HttpTransport::new().unwrap();
        let keys = ["k", "a b/c", "50%", "é/ü?x#y", "[::1]", "a+b&c=d", "~.-_", "\u{1f600}"];
        for addr in ["127.0.0.1:9", "[::1]:7000", "localhost:80", "Host.Example:1"] {
            for (device, key) in keys.iter().enumerate() {
                let endpoint = Endpoint { device: device as u32, addr: addr.to_string() };
                let query = ListQuery {
                    prefix: Some((*key).to_string()),
                    after: Some("z".into()),
                    ..ListQuery::default()
                };
                for op in [Op::Get { key, range: None }, Op::List(query)] {
                    let call = Call::new(&endpoint, PoolId(3), 1, op);
                    let whole = parse_url(&format!("http://{addr}{}", call.path())).unwrap();
                    let cached = transport.url_of(addr, &call.path()).unwrap();
                    assert_eq!(cached.as_str(), whole.as_str(), "{addr} {key}");
                    assert_eq!(cached, transport.url_of(addr, &call.path()).unwrap());
                }
            }
        }
    }

    /// A server that answers every connection with `head` (status line and headers).
    fn answering(head: &'static str) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(head.as_bytes());
            }
        });
        addr
    }

    /// An answer whose size or version is malformed is a failure, not an object of 0 bytes
    /// or version 0; a well-formed one decodes.
    #[tokio::test]
    async fn malformed_answer_headers_are_failures() {
        let transport = HttpTransport::new().expect("a transport");
        let transport = &transport;
        let probe = |addr: &str| {
            let endpoint = Endpoint { device: 1, addr: addr.to_string() };
            async move {
                let call =
                    Call::new(&endpoint, PoolId(1), 1, Op::Probe { key: "k", want_choice: false });
                transport.send(call).await
            }
        };
        let good = answering(
            "HTTP/1.1 200 OK\r\nx-optio-size: 5\r\nx-optio-version: 9\r\nx-optio-checksum: 0000000a\r\nx-optio-epoch: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
        let info = probe(&good).await.expect("an answer").info.expect("an object");
        assert_eq!((info.size_bytes, info.version, info.checksum), (5, ObjectVersion(9), 10));
        for head in [
            "HTTP/1.1 200 OK\r\nx-optio-size: five\r\nx-optio-version: 9\r\nx-optio-checksum: 0a\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            "HTTP/1.1 200 OK\r\nx-optio-size: 5\r\nx-optio-version: -9\r\nx-optio-checksum: 0a\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        ] {
            let bad = answering(head);
            match probe(&bad).await {
                Err((Failure::Malformed(reason), _)) => {
                    assert!(reason.contains("malformed"), "{reason}")
                }
                other => panic!("{head}: {other:?}"),
            }
        }
    }
}
