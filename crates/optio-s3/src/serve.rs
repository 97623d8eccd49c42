//! Serving the S3 API: each connection's requests ([`crate::conn`]) go through the refusals
//! made before s3s sees them (CORS preflights, expired presigned URLs, SigV2 unless allowed),
//! SigV2's check ([`crate::sigv2`]), the buffered bodies' budget ([`crate::buffered`]), then
//! s3s — which checks SigV4 signatures with the users' secrets ([`Users`]) and the bucket's
//! owner ([`Owners`]) — and [`crate::s3`]; every answer is counted in [`Metrics`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::service::S3ServiceBuilder;
use s3s::{S3Error, S3Result, s3_error};

use crate::answer::{error_answer, s3_answer};
use crate::metrics::{METRICS_PATH, Metrics};
use crate::store::{Gateway, GatewayError};
use crate::{buffered, conn, s3, sigv2};

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
    /// HTTPS: the gateway's certificate and key (`optio_tls::server_config`); `None`:
    /// plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The connection limit and timeouts ([`conn`]).
    pub limits: conn::Limits,
    /// Longest time a body read before its signature is checked may take to arrive
    /// ([`buffered`]).
    pub buffered_body_timeout: std::time::Duration,
    /// Take requests signed with AWS Signature Version 2 (checked as [`sigv2`] says); refused
    /// otherwise.
    pub allow_sigv2: bool,
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            region: "us-east-1".into(),
            domains: Vec::new(),
            tls: None,
            limits: conn::Limits::default(),
            buffered_body_timeout: buffered::TIME_LIMIT_DEFAULT,
            allow_sigv2: false,
        }
    }
}

/// What every request's answer needs.
#[derive(Clone)]
struct Shared(Arc<SharedInner>);

struct SharedInner {
    service: s3s::service::S3Service,
    metrics: Arc<Metrics>,
    budget: buffered::Budget,
    /// Secrets, for SigV2 requests checked here.
    users: Users,
    /// Virtual hosts, as s3s reads them (for SigV2's string to sign).
    host: Option<s3s::host::MultiDomain>,
    allow_sigv2: bool,
}

impl conn::Handler for Shared {
    async fn handle(
        &self,
        request: http::Request<conn::TimedBody>,
        connection: Arc<conn::Connection>,
    ) -> http::Response<s3s::Body> {
        answer(&self.0, &connection, request).await
    }
}

/// Serves the S3 API of `gateway` on `listener` until `stop` completes (errors only on a
/// bad configuration).
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    config: ServeConfig,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
    config.limits.check().map_err(|e| invalid(e.to_string()))?;
    if config.buffered_body_timeout.is_zero() {
        return Err(invalid("the buffered-body time limit is zero; it must be positive".into()));
    }
    let mut builder = S3ServiceBuilder::new(s3::OptioS3::new(gateway.clone(), &config.region));
    builder.set_auth(Users(gateway.clone()));
    builder.set_access(Owners(gateway.clone()));
    let domains = || {
        s3s::host::MultiDomain::new(&config.domains)
            .map_err(|e| invalid(format!("bad --domain: {e}")))
    };
    let host = if config.domains.is_empty() {
        None
    } else {
        builder.set_host(domains()?);
        Some(domains()?)
    };
    let shared = Shared(Arc::new(SharedInner {
        service: builder.build(),
        metrics,
        budget: buffered::Budget::new(config.buffered_body_timeout),
        users: Users(gateway),
        host,
        allow_sigv2: config.allow_sigv2,
    }));
    let tls = config.tls.map(tokio_rustls::TlsAcceptor::from);
    conn::serve(listener, tls, config.limits, buffered::CONNECTION_SHARE_BYTES, shared, stop).await;
    Ok(())
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

/// A request's query, its names and values decoded as s3s decodes them (so that a name sent
/// percent-encoded, `X-Amz-%45xpires`, is checked as the name s3s reads); `None` when it cannot
/// be decoded (s3s refuses such a request).
fn decoded_query(uri: &http::Uri) -> Option<Vec<(String, String)>> {
    match uri.query() {
        None => Some(Vec::new()),
        Some(query) => serde_urlencoded::from_str(query).ok(),
    }
}

/// Longest validity of a presigned URL (S3's limit).
const PRESIGNED_SECONDS_MAX: i64 = 7 * 24 * 3600;

/// Requests refused before they reach s3s: CORS preflights (no CORS is configured), presigned
/// URLs whose `X-Amz-Expires` is out of S3's range (1 s to 7 days) or past, and SigV2 requests
/// unless they are allowed.
fn refuse_early<B>(
    request: &http::Request<B>,
    query: &[(String, String)],
    allow_sigv2: bool,
) -> Option<http::Response<s3s::Body>> {
    if request.method() == http::Method::OPTIONS {
        return Some(error_answer(
            http::StatusCode::BAD_REQUEST,
            "BadRequest",
            "Insufficient information. Origin request header needed.",
        ));
    }
    if !allow_sigv2 && sigv2::is_sigv2(request, query) {
        return Some(s3_answer(sigv2::refused()));
    }
    let denied = |message: &str| {
        Some(s3_answer(S3Error::with_message(s3s::S3ErrorCode::AccessDenied, message.to_string())))
    };
    let mut date = None;
    let mut expires = Vec::new();
    for (name, value) in query {
        match name.as_str() {
            "X-Amz-Expires" => expires.push(value),
            "X-Amz-Date" => date = Some(value),
            _ => {}
        }
    }
    for expires in &expires {
        let Ok(seconds) = expires.parse::<i64>() else {
            return denied("X-Amz-Expires is not a number of seconds");
        };
        if !(1..=PRESIGNED_SECONDS_MAX).contains(&seconds) {
            return denied("X-Amz-Expires must be from 1 second to 7 days (604800)");
        }
        let signed = date.and_then(|d| {
            let format =
                time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
            time::PrimitiveDateTime::parse(d, format).ok()
        });
        if let Some(signed) = signed
            && signed.assume_utc() + time::Duration::seconds(seconds)
                < time::OffsetDateTime::now_utc()
        {
            return denied("Request has expired");
        }
    }
    None
}

async fn answer(
    shared: &SharedInner,
    connection: &conn::Connection,
    request: http::Request<conn::TimedBody>,
) -> http::Response<s3s::Body> {
    let metrics = &shared.metrics;
    let request_id = format!(
        "{:016x}",
        metrics.next_id.fetch_add(1, Ordering::Relaxed) ^ std::process::id() as u64
    );
    if request.uri().path() == METRICS_PATH && request.method() == http::Method::GET {
        let mut response =
            http::Response::new(s3s::Body::from(metrics.render(shared.budget.held())));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(optio_net::exposition::CONTENT_TYPE),
        );
        return response;
    }
    let started = std::time::Instant::now();
    let refused = |refusal: http::Response<s3s::Body>| {
        metrics.count("Refused", refusal.status().as_u16(), started.elapsed());
        refusal
    };
    // A query s3s cannot decode is refused by s3s, before any signature is checked.
    let query = decoded_query(request.uri()).unwrap_or_default();
    if let Some(refusal) = refuse_early(&request, &query, shared.allow_sigv2) {
        return refused(refusal);
    }
    if sigv2::is_sigv2(&request, &query) {
        let host = shared.host.as_ref().map(|h| h as &dyn s3s::host::S3Host);
        let now = time::OffsetDateTime::now_utc();
        if let Err(error) = sigv2::verify(&request, &query, host, &shared.users, now).await {
            return refused(s3_answer(error));
        }
    }
    let slot = OperationSlot::default();
    let (mut request, _buffered) =
        match buffered::prepare(request, &shared.budget, &connection.buffered_share).await {
            Ok(taken) => taken,
            Err(refusal) => return refused(refusal),
        };
    request.extensions_mut().insert(slot.clone());
    let mut response = match shared.service.call(request).await {
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
    tracing::debug!(%operation, status = response.status().as_u16(), "answered an S3 request");
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
