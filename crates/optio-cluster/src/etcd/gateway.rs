//! etcd's v3 JSON gateway on the wire: base64 keys and values, 64-bit integers as strings,
//! zero values left out; and the reading of its answers and errors.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;

use super::{REQUEST_TIMEOUT, RESPONSE_BYTES_MAX};

/// The end of the range of keys starting with `prefix` (etcd's `range_end`): the prefix with
/// its last byte incremented (bytes 0xff dropped first).
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: the range runs to the end of the key space.
    vec![0]
}

pub(super) fn encode(text: &str) -> String {
    BASE64.encode(text.as_bytes())
}

/// A transport error's chain of causes, without reqwest's "error sending request" preamble.
pub(super) fn reason(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return format!("no answer within {REQUEST_TIMEOUT:?}");
    }
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !causes.iter().any(|c: &String| c.contains(&text)) {
            causes.push(text);
        }
        source = cause.source();
    }
    match causes.last() {
        Some(innermost) => innermost.clone(),
        None => error.to_string(),
    }
}

/// Reads a whole response body, at most [`RESPONSE_BYTES_MAX`].
pub(super) async fn read_body(response: &mut reqwest::Response) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| reason(&e))? {
        if bytes.len() + chunk.len() > RESPONSE_BYTES_MAX {
            return Err(format!("an answer longer than {RESPONSE_BYTES_MAX} bytes"));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The `message` of a gateway error body, or the body itself, shortened.
pub(super) fn error_message(bytes: &[u8]) -> String {
    #[derive(Deserialize)]
    struct GatewayError {
        message: String,
    }
    match serde_json::from_slice::<GatewayError>(bytes) {
        Ok(error) => error.message,
        Err(_) => snippet(bytes),
    }
}

/// The beginning of a body, for error messages.
pub(super) fn snippet(bytes: &[u8]) -> String {
    const SNIPPET_CHARS_MAX: usize = 200;
    let text = String::from_utf8_lossy(bytes);
    let mut shown: String = text.chars().take(SNIPPET_CHARS_MAX).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

/// A 64-bit integer that the gateway sends as a decimal string (or, leniently, a number).
pub(super) fn integer<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Integer {
        Text(String),
        Number(u64),
    }
    match Integer::deserialize(deserializer)? {
        Integer::Number(n) => Ok(n),
        Integer::Text(text) => text.parse().map_err(serde::de::Error::custom),
    }
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ResponseHeader {
    #[serde(default, deserialize_with = "integer")]
    pub(super) revision: u64,
}

#[derive(Debug, Deserialize)]
pub(super) struct KeyValue {
    #[serde(default)]
    pub(super) key: String,
    #[serde(default)]
    pub(super) value: String,
    #[serde(default, deserialize_with = "integer")]
    pub(super) mod_revision: u64,
}

#[derive(Debug, Deserialize)]
pub(super) struct RangeResponse {
    #[serde(default)]
    pub(super) header: ResponseHeader,
    #[serde(default)]
    pub(super) kvs: Vec<KeyValue>,
    #[serde(default)]
    pub(super) more: bool,
}

/// `lease/grant`'s answer.
#[derive(Debug, Deserialize)]
pub(super) struct LeaseGrant {
    #[serde(rename = "ID", default, deserialize_with = "integer")]
    pub(super) id: u64,
}

/// `lease/keepalive`'s answer (one message of the stream): a TTL of 0 means the lease expired.
#[derive(Debug, Deserialize)]
pub(super) struct LeaseKeepAlive {
    #[serde(default)]
    pub(super) result: Option<LeaseKeepAliveResult>,
}

#[derive(Debug, Deserialize)]
pub(super) struct LeaseKeepAliveResult {
    #[serde(rename = "TTL", default, deserialize_with = "integer")]
    pub(super) ttl: u64,
}

#[derive(Debug, Deserialize)]
pub(super) struct TxnResponse {
    #[serde(default)]
    pub(super) succeeded: bool,
    #[serde(default)]
    pub(super) responses: Vec<ResponseOp>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ResponseOp {
    #[serde(default)]
    pub(super) response_range: Option<RangeResponse>,
}

#[derive(Debug, Deserialize)]
pub(super) struct WatchMessage {
    #[serde(default)]
    pub(super) result: Option<WatchResult>,
    #[serde(default)]
    pub(super) error: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct WatchResult {
    #[serde(default)]
    pub(super) created: bool,
    #[serde(default)]
    pub(super) canceled: bool,
    #[serde(default)]
    pub(super) cancel_reason: String,
    #[serde(default, deserialize_with = "integer")]
    pub(super) compact_revision: u64,
    #[serde(default)]
    pub(super) events: Vec<WatchEvent>,
}

#[derive(Debug, Deserialize)]
pub(super) struct WatchEvent {
    /// Absent for a put (the zero value), `"DELETE"` for a delete.
    #[serde(default, rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) kv: Option<KeyValue>,
}
