//! # optio-s3
//!
//! Optio's S3 gateway: the S3 API — buckets, objects, ranges, conditional requests, copies,
//! multipart uploads, ordered listings with delimiters — served on an Optio cluster by any
//! number of stateless gateways ([`serve`]). [s3s](https://docs.rs/s3s) parses the requests and
//! verifies their SigV4 signatures; [`store`] maps the operations onto Optio's objects, laid
//! out as [`format`] says; [`s3`] connects the two.
//!
//! Optio's own extension: `x-optio-policy` on a PUT (or a multipart upload's creation)
//! places that new object by the named CHOICE policy, within the pool's k candidates; and
//! `x-optio-pool` on a bucket's creation picks the pool its objects live in.

#![deny(missing_docs)]

pub mod format;
pub mod s3;
pub mod store;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use optio_net::exposition::Registry;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::service::S3ServiceBuilder;
use s3s::{S3Result, s3_error};

pub use store::{Gateway, GatewayError};

/// The path the gateway answers Prometheus on (no bucket name starts with `_`).
pub const METRICS_PATH: &str = "/_optio/metrics";

/// The gateway's Prometheus metrics: requests per S3 operation and HTTP status, and their
/// latencies per operation (to the response's head; a body streamed after it excluded).
#[derive(Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    next_id: AtomicU64,
}

const REQUESTS: &str = "optio_s3_requests_total";
const DURATION: &str = "optio_s3_request_duration_seconds";

impl Default for Metrics {
    fn default() -> Metrics {
        let registry = Registry::new();
        registry.describe_counter(REQUESTS, "S3 requests answered, by operation and HTTP status.");
        registry.describe_histogram(
            DURATION,
            "Time to answer an S3 request (to the response's head), by operation.",
        );
        registry.describe_gauge(
            "optio_s3_build_info",
            "The gateway's version (the value is always 1).",
        );
        registry.gauge("optio_s3_build_info", &[("version", env!("CARGO_PKG_VERSION"))]).set(1.0);
        Metrics { registry, next_id: AtomicU64::new(0) }
    }
}

impl Metrics {
    fn count(&self, operation: &str, status: u16, elapsed: std::time::Duration) {
        let status = status.to_string();
        self.registry
            .counter(REQUESTS, &[("operation", operation), ("status", &status)])
            .increment(1);
        self.registry
            .histogram(DURATION, &[("operation", operation)])
            .record(elapsed.as_secs_f64());
    }

    /// The metrics in Prometheus' text format.
    pub fn render(&self) -> String {
        self.registry.render()
    }
}

/// Where the access check leaves the operation's name for the metrics.
#[derive(Clone, Default)]
struct OperationSlot(Arc<Mutex<Option<String>>>);

struct Users(Arc<Gateway>);

#[async_trait::async_trait]
impl S3Auth for Users {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.secret_of(access_key).await {
            Ok(Some(secret)) => Ok(SecretKey::from(secret)),
            Ok(None) => Err(s3_error!(
                InvalidAccessKeyId,
                "no such access key; make one with `optio s3 user create NAME`"
            )),
            Err(error) => Err(s3::to_s3(error)),
        }
    }
}

/// Signed requests of a known user may use the buckets that user owns (and those made for
/// every user); anonymous requests nothing.
struct Owners(Arc<Gateway>);

impl Owners {
    /// Refuses `user` a bucket another user owns (a bucket that does not exist is left to the
    /// operation, which says so).
    async fn check_bucket(&self, user: &str, name: &str) -> S3Result<()> {
        match self.0.bucket(name).await {
            Ok(bucket) if !bucket.usable_by(user) => {
                Err(s3_error!(AccessDenied, "the bucket '{name}' belongs to another user"))
            }
            Ok(_) | Err(GatewayError::NoSuchBucket(_)) => Ok(()),
            Err(error) => Err(s3::to_s3(error)),
        }
    }
}

#[async_trait::async_trait]
impl S3Access for Owners {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let operation = cx.s3_op().name().to_string();
        if let Some(slot) = cx.extensions_mut().get::<OperationSlot>() {
            *slot.0.lock().expect("slot lock") = Some(operation.clone());
        }
        let Some(credentials) = cx.credentials() else {
            return Err(s3_error!(
                AccessDenied,
                "anonymous requests are refused: sign requests with an access key from `optio s3 user create NAME`"
            ));
        };
        let user = match self.0.user_of(&credentials.access_key).await {
            Ok(Some(user)) => user,
            Ok(None) => return Err(s3_error!(InvalidAccessKeyId)),
            Err(error) => return Err(s3::to_s3(error)),
        };
        // The operations that need to know who asked (CreateBucket, ListBuckets) read it here.
        cx.extensions_mut().insert(s3::Requester(user.clone()));
        // Making a bucket that exists is answered by the operation (BucketAlreadyExists).
        if operation != "CreateBucket" {
            match cx.s3_path() {
                s3s::path::S3Path::Bucket { bucket } | s3s::path::S3Path::Object { bucket, .. } => {
                    self.check_bucket(&user, bucket).await?;
                }
                s3s::path::S3Path::Root => {}
            }
        }
        if let Some(source) = cx.headers().get("x-amz-copy-source").and_then(|v| v.to_str().ok())
            && let Ok(s3s::dto::CopySource::Bucket { bucket, .. }) =
                s3s::dto::CopySource::parse(source)
        {
            self.check_bucket(&user, &bucket).await?;
        }
        Ok(())
    }
}

/// How a gateway serves.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The region clients sign for (`us-east-1` by default, as most clients assume).
    pub region: String,
    /// Host names for virtual-hosted–style requests (`bucket.HOST`); path style always works.
    pub domains: Vec<String>,
    /// HTTPS: the gateway's certificate and key (`optio_net::tls::server_config`); `None`:
    /// plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig { region: "us-east-1".into(), domains: Vec::new(), tls: None }
    }
}

/// Longest time a client may take over the TLS handshake before its connection is closed.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves the S3 API of `gateway` on `listener` until `stop` completes (errors only on a
/// bad configuration).
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    config: ServeConfig,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let mut builder = S3ServiceBuilder::new(s3::OptioS3::new(gateway.clone(), &config.region));
    builder.set_auth(Users(gateway.clone()));
    builder.set_access(Owners(gateway));
    if !config.domains.is_empty() {
        let host = s3s::host::MultiDomain::new(&config.domains).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("bad --domain: {e}"))
        })?;
        builder.set_host(host);
    }
    let service = builder.build();
    let tls = config.tls.map(tokio_rustls::TlsAcceptor::from);
    let lengthless = Arc::new(tokio::sync::Semaphore::new(LENGTHLESS_BUDGET_MIB));
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => return Ok(()),
        };
        // A failed accept (out of file descriptors, a connection reset before it was taken)
        // is the connection's trouble, not the gateway's: it goes on serving the others.
        let (stream, peer): (_, SocketAddr) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "cannot accept an S3 connection");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let metrics = metrics.clone();
        let lengthless = lengthless.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let handle = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let service = service.clone();
                let metrics = metrics.clone();
                let lengthless = lengthless.clone();
                async move {
                    let answered = answer(&service, &metrics, &lengthless, request).await;
                    Ok::<_, std::convert::Infallible>(answered)
                }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let ended = match tls {
                None => builder.serve_connection(TokioIo::new(stream), handle).await,
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                    match handshake.await {
                        Ok(Ok(stream)) => {
                            builder.serve_connection(TokioIo::new(stream), handle).await
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "an S3 client's TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "an S3 client's TLS handshake timed out");
                            return;
                        }
                    }
                }
            };
            if let Err(error) = ended {
                tracing::debug!(%peer, %error, "an S3 connection ended with an error");
            }
        });
    }
}

/// An S3 error answer built here (before s3s sees the request).
fn error_answer(status: http::StatusCode, code: &str, message: &str) -> http::Response<s3s::Body> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    let mut response = http::Response::new(s3s::Body::from(xml));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/xml"));
    response
}

/// Most bytes of a body sent with `Transfer-Encoding: chunked` and no length at all (no
/// `Content-Length`, no `x-amz-decoded-content-length`) that the gateway takes: it reads such a
/// body whole to learn its length, which s3s needs (`curl -T -` sends one).
pub const CHUNKED_BODY_MAX: usize = 64 << 20;

/// MiB that bodies without a length may hold in memory at once, all requests together (they
/// are read before their signature can be checked): four of the largest. Past it, a request
/// gets 503 `SlowDown`.
const LENGTHLESS_BUDGET_MIB: usize = 4 * (CHUNKED_BODY_MAX >> 20);

/// The request for s3s. A body sent chunked with no length is read (up to
/// [`CHUNKED_BODY_MAX`], within the gateway's `budget` of such bodies, whose permit comes back
/// with the request and is held until it is answered) and given its `Content-Length`; a longer
/// one is refused with 411 `MissingContentLength`, as s3s would refuse any, saying what to
/// send instead.
async fn with_length(
    request: http::Request<hyper::body::Incoming>,
    budget: &Arc<tokio::sync::Semaphore>,
) -> Result<
    (http::Request<s3s::Body>, Option<tokio::sync::OwnedSemaphorePermit>),
    http::Response<s3s::Body>,
> {
    use http_body_util::BodyExt;
    let headers = request.headers();
    let lengthless = headers
        .get(http::header::TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|c| c.trim().eq_ignore_ascii_case("chunked")))
        && !headers.contains_key(http::header::CONTENT_LENGTH)
        && !headers.contains_key("x-amz-decoded-content-length");
    let (mut parts, body) = request.into_parts();
    if !lengthless {
        return Ok((http::Request::from_parts(parts, s3s::Body::from(body)), None));
    }
    let Ok(permit) = budget.clone().try_acquire_many_owned((CHUNKED_BODY_MAX >> 20) as u32) else {
        // Read what the client is still sending before answering (a lingering close): a
        // client writing its last chunk to a connection already answered and closed gets a
        // broken pipe instead of the 503 and its reason.
        drain(body).await;
        return Err(error_answer(
            http::StatusCode::SERVICE_UNAVAILABLE,
            "SlowDown",
            "too many bodies without a length are being read at once; retry, or send \
             Content-Length",
        ));
    };
    match http_body_util::Limited::new(body, CHUNKED_BODY_MAX).collect().await {
        Ok(collected) => {
            let bytes = collected.to_bytes();
            parts
                .headers
                .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(bytes.len()));
            Ok((http::Request::from_parts(parts, s3s::Body::from(bytes)), Some(permit)))
        }
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(error_answer(
            http::StatusCode::LENGTH_REQUIRED,
            "MissingContentLength",
            "a body sent chunked without a length is taken up to 64 MiB; send Content-Length, \
             or aws-chunked with x-amz-decoded-content-length, for a larger one",
        )),
        Err(_) => Err(error_answer(
            http::StatusCode::BAD_REQUEST,
            "IncompleteBody",
            "the request's chunked body broke off before its last chunk",
        )),
    }
}

/// The most of a refused body [`drain`] reads, and for how long.
const DRAIN_BYTES_MAX: usize = 1 << 20;
const DRAIN_TIME_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads and drops a refused request's body — at most [`DRAIN_BYTES_MAX`] bytes, for at most
/// [`DRAIN_TIME_MAX`] — so that its client reads the refusal rather than a reset connection;
/// a larger or slower body is cut off when the connection closes.
async fn drain(mut body: hyper::body::Incoming) {
    use http_body_util::BodyExt;
    let _ = tokio::time::timeout(DRAIN_TIME_MAX, async {
        let mut read = 0;
        while let Some(Ok(frame)) = body.frame().await {
            read += frame.data_ref().map_or(0, |data| data.len());
            if read > DRAIN_BYTES_MAX {
                break;
            }
        }
    })
    .await;
}

/// GetObjectAttributes' answer with its `ETag` element bare, as S3 writes it there (unlike the
/// `ETag` header and other elements); s3s 0.14 quotes it everywhere.
async fn bare_etag(response: http::Response<s3s::Body>) -> http::Response<s3s::Body> {
    use http_body_util::BodyExt;
    let (mut parts, body) = response.into_parts();
    let Ok(collected) = body.collect().await else {
        return error_answer(
            http::StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "the answer could not be read back to write its ETag",
        );
    };
    let text = String::from_utf8_lossy(&collected.to_bytes()).into_owned();
    let text = unquote_etag(&text);
    parts.headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(text.len()));
    http::Response::from_parts(parts, s3s::Body::from(text))
}

/// `<ETag>"…"</ETag>` (the quotes written plain or as `&quot;`) becomes `<ETag>…</ETag>`.
fn unquote_etag(xml: &str) -> String {
    let mut out = xml.to_string();
    for quote in ["\"", "&quot;"] {
        let open = format!("<ETag>{quote}");
        let close = format!("{quote}</ETag>");
        if let Some(start) = out.find(&open)
            && let Some(end) = out[start + open.len()..].find(&close)
        {
            let inner = out[start + open.len()..start + open.len() + end].to_string();
            out.replace_range(
                start..start + open.len() + end + close.len(),
                &format!("<ETag>{inner}</ETag>"),
            );
        }
    }
    out
}

/// Requests refused before they reach s3s: CORS preflights (no CORS is configured), and
/// presigned URLs whose `X-Amz-Expires` is out of S3's range (1 s to 7 days) or past.
fn refuse_early(
    request: &http::Request<hyper::body::Incoming>,
) -> Option<http::Response<s3s::Body>> {
    if request.method() == http::Method::OPTIONS {
        return Some(error_answer(
            http::StatusCode::BAD_REQUEST,
            "BadRequest",
            "Insufficient information. Origin request header needed.",
        ));
    }
    let query = request.uri().query()?;
    let mut expires = None;
    let mut date = None;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("X-Amz-Expires", value)) => expires = Some(value),
            Some(("X-Amz-Date", value)) => date = Some(value),
            _ => {}
        }
    }
    let expires = expires?;
    let denied =
        |message: &str| Some(error_answer(http::StatusCode::FORBIDDEN, "AccessDenied", message));
    let Ok(seconds) = expires.parse::<i64>() else {
        return denied("X-Amz-Expires is not a number of seconds");
    };
    if !(1..=604_800).contains(&seconds) {
        return denied("X-Amz-Expires must be from 1 second to 7 days (604800)");
    }
    let signed = date.and_then(|d| {
        let format =
            time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
        time::PrimitiveDateTime::parse(d, format).ok()
    })?;
    let now = time::OffsetDateTime::now_utc();
    if signed.assume_utc() + time::Duration::seconds(seconds) < now {
        return denied("Request has expired");
    }
    None
}

async fn answer(
    service: &s3s::service::S3Service,
    metrics: &Metrics,
    lengthless: &Arc<tokio::sync::Semaphore>,
    request: http::Request<hyper::body::Incoming>,
) -> http::Response<s3s::Body> {
    let request_id = format!(
        "{:016x}",
        metrics.next_id.fetch_add(1, Ordering::Relaxed) ^ std::process::id() as u64
    );
    if request.uri().path() == METRICS_PATH && request.method() == http::Method::GET {
        let mut response = http::Response::new(s3s::Body::from(metrics.render()));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(optio_net::exposition::CONTENT_TYPE),
        );
        return response;
    }
    let started = std::time::Instant::now();
    if let Some(refusal) = refuse_early(&request) {
        metrics.count("Refused", refusal.status().as_u16(), started.elapsed());
        return refusal;
    }
    let slot = OperationSlot::default();
    let (mut request, _buffered) = match with_length(request, lengthless).await {
        Ok(taken) => taken,
        Err(refusal) => {
            metrics.count("Refused", refusal.status().as_u16(), started.elapsed());
            return refusal;
        }
    };
    request.extensions_mut().insert(slot.clone());
    let mut response = match service.call(request).await {
        Ok(response) => response,
        Err(error) => {
            tracing::warn!(error = ?error, "the S3 service failed a request");
            let mut response = http::Response::new(s3s::Body::empty());
            *response.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    };
    if let Ok(value) = http::HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-amz-request-id", value);
    }
    let operation = slot.0.lock().expect("slot lock").clone().unwrap_or_else(|| "Unknown".into());
    if operation == "GetObjectAttributes" && response.status().is_success() {
        response = bare_etag(response).await;
    }
    metrics.count(&operation, response.status().as_u16(), started.elapsed());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_object_attributes_etag_is_written_bare() {
        let quoted = "<A><ETag>&quot;abc-2&quot;</ETag><ObjectSize>3</ObjectSize></A>";
        assert_eq!(unquote_etag(quoted), "<A><ETag>abc-2</ETag><ObjectSize>3</ObjectSize></A>");
        assert_eq!(unquote_etag("<ETag>\"x\"</ETag>"), "<ETag>x</ETag>");
        assert_eq!(
            unquote_etag("<A><ObjectSize>3</ObjectSize></A>"),
            "<A><ObjectSize>3</ObjectSize></A>"
        );
        assert_eq!(unquote_etag("<ETag>&quot;unterminated</A>"), "<ETag>&quot;unterminated</A>");
    }
}
