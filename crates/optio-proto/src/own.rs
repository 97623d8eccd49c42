//! The server's own routes — `/health`, `/metrics`, `/v1/status` and `/v1/scrub` — as one
//! typed request ([`OwnRequest`]) and one typed answer ([`OwnAnswer`]) for both ends of the
//! wire, as [`crate::request`] and [`crate::answer`] are for device routes. The server
//! decodes a request once ([`OwnRequest::decode`]) and authenticates, serves and encodes from
//! that value; a client encodes the request ([`OwnRequest::path`]) and decodes the answer
//! ([`OwnAnswer::decode`]) — a refusal there is the same [`Refusal`] device routes answer, so
//! `optio status` says `unauthorized: …` rather than "HTTP 401".
//!
//! The wire form is the one servers have always used (JSON bodies, the Prometheus text
//! format), so senders and readers of before and after these types interoperate.

use crate::answer::{AnswerBody, Encoded, Refusal};
use crate::auth::Cap;
use crate::request::{DecodeError, Method};
use crate::route::{HEALTH_PATH, METRICS_PATH, SCRUB_PATH, STATUS_PATH};
use crate::{ErrorKind, ScrubReport, ServerHealth, ServerStatus};

/// A request to one of the server's own routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnRequest {
    /// `GET /health`: liveness, open to all.
    Health,
    /// `GET /metrics`: Prometheus metrics.
    Metrics,
    /// `GET /v1/status`: the server's status as JSON.
    Status,
    /// `POST /v1/scrub?…`: a scrub pass now, answered when it is over.
    Scrub(ScrubQuery),
}

/// What a scrub pass on demand covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubQuery {
    /// Re-read and verify every replica too (`deep=true`).
    pub deep: bool,
    /// Only this pool (`pool=ID`).
    pub pool: Option<u32>,
    /// Bytes read per second at most (`rate=N`; none: no limit).
    pub rate: Option<u64>,
}

impl ScrubQuery {
    /// The query string (without `?`).
    pub fn encode(&self) -> String {
        let mut parts = vec![format!("deep={}", self.deep)];
        if let Some(pool) = self.pool {
            parts.push(format!("pool={pool}"));
        }
        if let Some(rate) = self.rate {
            parts.push(format!("rate={rate}"));
        }
        parts.join("&")
    }

    /// Parses a query string: `deep`, `pool` and `rate`; other parameters are ignored (as
    /// they always were), a malformed value of these three is an error.
    pub fn parse(query: &str) -> Result<ScrubQuery, BadScrubQuery> {
        let mut parsed = ScrubQuery::default();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = |expected: &'static str| BadScrubQuery {
                name: name.to_string(),
                value: value.to_string(),
                expected,
            };
            match name {
                "deep" => {
                    parsed.deep = match value {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad("true or false")),
                    }
                }
                "pool" => parsed.pool = Some(value.parse().map_err(|_| bad("a pool id"))?),
                "rate" => {
                    parsed.rate = Some(value.parse().map_err(|_| bad("bytes per second"))?);
                }
                _ => {}
            }
        }
        Ok(parsed)
    }
}

/// A scrub query parameter whose value is not what it takes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{SCRUB_PATH}: {name}={value:?} is not {expected}")]
pub struct BadScrubQuery {
    /// The parameter.
    pub name: String,
    /// Its value.
    pub value: String,
    /// What it takes.
    pub expected: &'static str,
}

impl OwnRequest {
    /// Whether `path` (without its query) is one of the server's own routes.
    pub fn is_own_path(path: &str) -> bool {
        matches!(path, HEALTH_PATH | METRICS_PATH | STATUS_PATH | SCRUB_PATH)
    }

    /// The HTTP method.
    pub fn method(&self) -> Method {
        match self {
            OwnRequest::Scrub(_) => Method::Post,
            _ => Method::Get,
        }
    }

    /// The path, with its query.
    pub fn path(&self) -> String {
        match self {
            OwnRequest::Health => HEALTH_PATH.to_string(),
            OwnRequest::Metrics => METRICS_PATH.to_string(),
            OwnRequest::Status => STATUS_PATH.to_string(),
            OwnRequest::Scrub(query) => format!("{SCRUB_PATH}?{}", query.encode()),
        }
    }

    /// The route's name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            OwnRequest::Health => HEALTH_PATH,
            OwnRequest::Metrics => METRICS_PATH,
            OwnRequest::Status => STATUS_PATH,
            OwnRequest::Scrub(_) => SCRUB_PATH,
        }
    }

    /// The capability the request needs: none for `/health` (liveness only) and, when the
    /// server serves them publicly, for `/metrics`.
    pub fn needed_cap(&self, metrics_public: bool) -> Option<Cap> {
        needed_of_path(self.name(), metrics_public)
    }

    /// Decodes a request of `method` to `path_and_query`: `None` when the path is not one of
    /// the server's own routes (a device request, then); an error for a wrong method or a
    /// malformed query, with the capability the route needs (it is authenticated first).
    pub fn decode(
        method: &str,
        path_and_query: &str,
        metrics_public: bool,
    ) -> Option<Result<OwnRequest, DecodeError>> {
        let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
        if !OwnRequest::is_own_path(path) {
            return None;
        }
        let needed = needed_of_path(path, metrics_public);
        let refuse = |kind: ErrorKind, reason: String| DecodeError {
            kind,
            reason,
            // An open route refused as malformed needs nothing more than it would have.
            needed: needed.unwrap_or(Cap::Read),
            kind_of_op: None,
        };
        let wanted = if path == SCRUB_PATH { Method::Post } else { Method::Get };
        // HEAD is GET without the body, as HTTP servers answer it.
        let method_fits = method == wanted.as_str() || (wanted == Method::Get && method == "HEAD");
        if !method_fits {
            let reason = format!("{path} takes {} (not {method})", wanted.as_str());
            return Some(Err(refuse(ErrorKind::BadRequest, reason)));
        }
        Some(match path {
            HEALTH_PATH => Ok(OwnRequest::Health),
            METRICS_PATH => Ok(OwnRequest::Metrics),
            STATUS_PATH => Ok(OwnRequest::Status),
            _ => ScrubQuery::parse(query)
                .map(OwnRequest::Scrub)
                .map_err(|bad| refuse(ErrorKind::BadRequest, bad.to_string())),
        })
    }
}

fn needed_of_path(path: &str, metrics_public: bool) -> Option<Cap> {
    match path {
        HEALTH_PATH => None,
        METRICS_PATH => (!metrics_public).then_some(Cap::Admin),
        STATUS_PATH => Some(Cap::Read),
        _ => Some(Cap::Admin),
    }
}

/// What the server's own routes answer (a refusal is a [`Refusal`], encoded as device
/// answers encode theirs).
#[derive(Clone, Debug)]
pub enum OwnAnswer {
    /// `/health`.
    Health(ServerHealth),
    /// `/metrics`: the Prometheus text exposition.
    Metrics(String),
    /// `/v1/status`.
    Status(Box<ServerStatus>),
    /// `/v1/scrub`: one report per device.
    Scrubbed(Vec<ScrubReport>),
}

/// The `content-type` of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

/// Why an own route's answer does not decode.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OwnAnswerError {
    /// The server refused the request.
    #[error("{}: {}", .0.kind.name(), .0.reason)]
    Refused(Refusal),
    /// A success whose body is not what the route answers.
    #[error("{route} answered a body that does not decode: {reason}")]
    Body {
        /// The route.
        route: &'static str,
        /// Why.
        reason: String,
    },
    /// A status no Optio server answers there.
    #[error("{route} answered HTTP {status}, which no Optio server answers there")]
    Status {
        /// The route.
        route: &'static str,
        /// The status.
        status: u16,
    },
}

impl OwnAnswer {
    /// The answer on the wire (status 200).
    pub fn encode(&self) -> Encoded<Vec<u8>> {
        let json = |value: serde_json::Result<Vec<u8>>| value.expect("answers serialize");
        let (content_type, body) = match self {
            OwnAnswer::Health(health) => ("application/json", json(serde_json::to_vec(health))),
            OwnAnswer::Status(status) => ("application/json", json(serde_json::to_vec(status))),
            OwnAnswer::Scrubbed(reports) => ("application/json", json(serde_json::to_vec(reports))),
            OwnAnswer::Metrics(text) => (PROMETHEUS_TEXT, text.clone().into_bytes()),
        };
        Encoded { status: 200, headers: vec![("content-type", content_type.to_string())], body }
    }

    /// Decodes the answer of `status` with `header` and `body` to `asked`.
    pub fn decode<'h>(
        asked: &OwnRequest,
        status: u16,
        header: impl Fn(&'static str) -> Option<&'h str>,
        body: impl AnswerBody,
    ) -> Result<OwnAnswer, OwnAnswerError> {
        let route = asked.name();
        let bytes = body.bytes();
        if status >= 400 {
            return Err(OwnAnswerError::Refused(Refusal::decode(status, &header, &bytes)));
        }
        if status != 200 {
            return Err(OwnAnswerError::Status { route, status });
        }
        let bad = |reason: String| OwnAnswerError::Body { route, reason };
        Ok(match asked {
            OwnRequest::Health => {
                OwnAnswer::Health(serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?)
            }
            OwnRequest::Status => OwnAnswer::Status(Box::new(
                serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?,
            )),
            OwnRequest::Scrub(_) => {
                OwnAnswer::Scrubbed(serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?)
            }
            OwnRequest::Metrics => OwnAnswer::Metrics(
                String::from_utf8(bytes.into_owned()).map_err(|e| bad(e.to_string()))?,
            ),
        })
    }
}

#[cfg(test)]
mod tests;
