//! # optio-net
//!
//! HTTP requests to one device's server, and what their answers mean: the transport the
//! client uses for everything and servers use to migrate objects to each other. One
//! connection pool per process; every request carries the sender's map epoch; error answers
//! become [`Failure`]s with the server's [`ErrorKind`], except a 404 on a probe or a record
//! read, which is an answer (the object or record is simply absent).

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::time::Duration;

use bytes::Bytes;
use optio_placement::PoolId;
use optio_proto::wire::{self, percent_encode};
use optio_proto::{ChoiceRecord, DeviceMetrics, ErrorBody, ErrorKind, ObjectInfo, ObjectVersion};
use reqwest::Method;

/// Connect timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Whole-request timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Timeout of a status request.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// A device and where its server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Device id.
    pub device: u32,
    /// `host:port`.
    pub addr: String,
}

/// What went wrong talking to a device.
#[derive(Clone, Debug)]
pub enum Failure {
    /// No answer (connection refused, reset, timeout).
    Unreachable(String),
    /// An error answer.
    Refused {
        /// Kind.
        kind: ErrorKind,
        /// Reason.
        reason: String,
        /// The server's epoch.
        epoch: Option<u64>,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unreachable(reason) => write!(f, "unreachable ({reason})"),
            Failure::Refused { kind, reason, .. } => write!(f, "{}: {reason}", kind.name()),
        }
    }
}

impl Failure {
    /// The error kind, for refusals.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Failure::Refused { kind, .. } => Some(*kind),
            Failure::Unreachable(_) => None,
        }
    }
}

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
    /// Body.
    pub body: Bytes,
}

/// The HTTP side of the client.
#[derive(Clone, Debug)]
pub struct Transport {
    http: reqwest::Client,
}

/// One request.
#[derive(Clone)]
pub struct Call<'a> {
    /// Method.
    pub method: Method,
    /// Device.
    pub endpoint: &'a Endpoint,
    /// `objects` or `choices`.
    pub area: &'static str,
    /// Pool.
    pub pool: PoolId,
    /// Key (none: a listing).
    pub key: Option<&'a str>,
    /// Query string (listings).
    pub query: Option<String>,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// Body.
    pub body: Option<Bytes>,
    /// The client's epoch.
    pub epoch: u64,
}

impl Transport {
    /// A transport with a connection pool.
    pub fn new() -> Result<Transport, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true)
            .pool_max_idle_per_host(256)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Transport { http })
    }

    /// Sends a call; error answers become [`Failure::Refused`], except 404 on a probe or a
    /// record read, which is an answer.
    pub async fn send(&self, call: Call<'_>) -> Result<Answer, (Failure, Option<DeviceMetrics>)> {
        let mut url = format!(
            "http://{}/v1/dev/{}/{}/{}",
            call.endpoint.addr, call.endpoint.device, call.area, call.pool.0
        );
        if let Some(key) = call.key {
            url.push('/');
            url.push_str(&percent_encode(key));
        }
        if let Some(query) = &call.query {
            url.push('?');
            url.push_str(query);
        }
        let is_probe = call.method == Method::HEAD || call.area == "choices";
        let mut request = self.http.request(call.method, url).header(wire::EPOCH, call.epoch);
        for (name, value) in call.headers {
            request = request.header(name, value);
        }
        if let Some(body) = call.body {
            request = request.body(body);
        }
        let response =
            request.send().await.map_err(|e| (Failure::Unreachable(error_chain(&e)), None))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let metrics = text(wire::METRICS).and_then(|m| DeviceMetrics::from_header(&m));
        let body = response
            .bytes()
            .await
            .map_err(|e| (Failure::Unreachable(error_chain(&e)), metrics.clone()))?;
        if status >= 400 && !(status == 404 && is_probe && text(wire::ERROR).is_none()) {
            let parsed: Option<ErrorBody> = serde_json::from_slice(&body).ok();
            let kind =
                text(wire::ERROR).and_then(|k| ErrorKind::from_name(&k)).unwrap_or(match status {
                    404 => ErrorKind::NotFound,
                    413 => ErrorKind::TooLarge,
                    507 => ErrorKind::Full,
                    _ => ErrorKind::Io,
                });
            let reason = parsed
                .as_ref()
                .map(|b| b.reason.clone())
                .unwrap_or_else(|| format!("HTTP {status}"));
            let epoch = text(wire::EPOCH).and_then(|e| e.parse().ok());
            return Err((Failure::Refused { kind, reason, epoch }, metrics));
        }
        let info = match (text(wire::SIZE), text(wire::VERSION), text(wire::CHECKSUM)) {
            (Some(size), Some(version), Some(checksum)) => Some(ObjectInfo {
                key: call.key.unwrap_or_default().to_string(),
                size_bytes: size.parse().unwrap_or(0),
                version: ObjectVersion(version.parse().unwrap_or(0)),
                checksum: u32::from_str_radix(&checksum, 16).unwrap_or(0),
                pg_seed: text(wire::PG).and_then(|p| p.parse().ok()),
                epoch: text(wire::EPOCH).and_then(|e| e.parse().ok()).unwrap_or(0),
            }),
            _ => None,
        };
        let record = text(wire::CHOICE).and_then(|c| wire::parse_choice_header(&c));
        let incarnation = text(wire::INCARNATION).and_then(|i| u64::from_str_radix(&i, 16).ok());
        let deleted = text(wire::DELETED).and_then(|v| v.parse().ok()).map(ObjectVersion);
        Ok(Answer { status, info, record, metrics, incarnation, deleted, body })
    }
}

impl Transport {
    /// A server's `/v1/status` (JSON), or why it could not be read.
    pub async fn server_status(&self, addr: &str) -> Result<Bytes, Failure> {
        let url = format!("http://{addr}/v1/status");
        let response = self
            .http
            .get(url)
            .timeout(STATUS_TIMEOUT)
            .send()
            .await
            .map_err(|e| Failure::Unreachable(error_chain(&e)))?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(|e| Failure::Unreachable(error_chain(&e)))?;
        if status != 200 {
            return Err(Failure::Refused {
                kind: ErrorKind::Io,
                reason: format!("/v1/status answered HTTP {status}"),
                epoch: None,
            });
        }
        Ok(body)
    }
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
