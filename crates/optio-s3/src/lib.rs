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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::service::S3ServiceBuilder;
use s3s::{S3Result, s3_error};

pub use store::{Gateway, GatewayError};

/// The path the gateway answers Prometheus on (no bucket name starts with `_`).
pub const METRICS_PATH: &str = "/_optio/metrics";

/// Requests counted per S3 operation and HTTP status.
#[derive(Debug, Default)]
pub struct Metrics {
    counts: Mutex<BTreeMap<(String, u16), u64>>,
    next_id: AtomicU64,
}

impl Metrics {
    fn count(&self, operation: &str, status: u16) {
        *self
            .counts
            .lock()
            .expect("metrics lock")
            .entry((operation.to_string(), status))
            .or_default() += 1;
    }

    /// The counters in Prometheus' text format.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# HELP optio_s3_requests_total S3 requests answered, by operation and HTTP status.\n# TYPE optio_s3_requests_total counter\n",
        );
        for ((operation, status), count) in self.counts.lock().expect("metrics lock").iter() {
            out.push_str(&format!(
                "optio_s3_requests_total{{operation=\"{operation}\",status=\"{status}\"}} {count}\n"
            ));
        }
        out
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

/// Every signed request of a known user may do everything; anonymous ones nothing.
struct SignedOnly;

#[async_trait::async_trait]
impl S3Access for SignedOnly {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let name = cx.s3_op().name().to_string();
        if let Some(slot) = cx.extensions_mut().get::<OperationSlot>() {
            *slot.0.lock().expect("slot lock") = Some(name);
        }
        if cx.credentials().is_none() {
            return Err(s3_error!(
                AccessDenied,
                "anonymous requests are refused: sign requests with an access key from `optio s3 user create NAME`"
            ));
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
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig { region: "us-east-1".into(), domains: Vec::new() }
    }
}

/// Serves the S3 API of `gateway` on `listener` until `stop` completes.
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    config: ServeConfig,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let mut builder = S3ServiceBuilder::new(s3::OptioS3::new(gateway.clone()));
    builder.set_auth(Users(gateway));
    builder.set_access(SignedOnly);
    if !config.domains.is_empty() {
        let host = s3s::host::MultiDomain::new(&config.domains).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("bad --domain: {e}"))
        })?;
        builder.set_host(host);
    }
    let service = builder.build();
    tokio::pin!(stop);
    loop {
        let (stream, peer): (_, SocketAddr) = tokio::select! {
            accepted = listener.accept() => accepted?,
            () = &mut stop => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let handle = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let service = service.clone();
                let metrics = metrics.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(answer(&service, &metrics, request).await)
                }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection(TokioIo::new(stream), handle);
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "an S3 connection ended with an error");
            }
        });
    }
}

async fn answer(
    service: &s3s::service::S3Service,
    metrics: &Metrics,
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
            http::HeaderValue::from_static("text/plain; version=0.0.4"),
        );
        return response;
    }
    let slot = OperationSlot::default();
    let (parts, body) = request.into_parts();
    let mut request = http::Request::from_parts(parts, s3s::Body::from(body));
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
    metrics.count(&operation, response.status().as_u16());
    response
}
