//! The HTTP/1.1 adapter of the server's core ([`crate::serve`]): an HTTP request decoded once
//! into [`Asked`] (device routes in [`optio_proto::route`], headers in
//! [`optio_proto::wire`]; the server's own routes in [`optio_proto::own`]), served, and its
//! typed answer encoded ([`optio_proto::answer::Answer::encode`],
//! [`optio_proto::own::OwnAnswer::encode`]) with what every device answer carries: the
//! server's epoch, the device's metrics and the incarnation. Frames reach the same adapter
//! (the connection turns each into a request); the local socket decodes first, to take opens
//! only, and hands over its decoded request ([`crate::conn::Predecoded`]).

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use optio_proto::answer::{Encoded, Envelope};

use crate::conn::{LocalPeer, PeerEntity, Plaintext, Predecoded, Sealed};
use crate::serve::{AppState, Asked, Connection, Head, Incoming, Said, Served, serve};

/// The router: every request goes to the one adapter.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(adapter).with_state(state)
}

/// Decodes, serves and answers one HTTP request; a refused request's body is read and
/// thrown away first (see [`Incoming::discard`]).
async fn adapter(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let started = Instant::now();
    let (mut parts, body) = request.into_parts();
    let predecoded = parts.extensions.remove::<Predecoded>();
    let path_and_query = parts.uri.path_and_query().map_or(parts.uri.path(), |p| p.as_str());
    let asked = match predecoded {
        Some(request) => Asked::Device(Ok(request.0)),
        None => Asked::decode(
            parts.method.as_str(),
            path_and_query,
            |name| parts.headers.get(name).map(HeaderValue::as_bytes),
            state.auth.metrics_public(),
        ),
    };
    let headers: Vec<(&str, &str)> = parts
        .headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let unprintable_signed = parts.headers.iter().find_map(|(name, value)| {
        (optio_proto::auth::is_signed_header(name.as_str()) && value.to_str().is_err())
            .then_some(name.as_str())
    });
    let head = Head {
        method: parts.method.as_str(),
        path_and_query,
        headers: &headers,
        unprintable_signed,
    };
    let connection = Connection {
        local: parts.extensions.get::<LocalPeer>().is_some(),
        plaintext: parts.extensions.get::<Plaintext>().is_some(),
        peer: parts.extensions.get::<PeerEntity>().map(|peer| peer.0.clone()),
    };
    let sealed = parts.extensions.get::<Sealed>().is_some();
    let mut body = Incoming::new(body, &parts.headers, sealed);
    let served = serve(&state, asked, head, &connection, &mut body, started).await;
    if served.refusal().is_some() {
        body.discard().await;
    }
    respond(&state, served)
}

/// The HTTP answer of `served`; a device answer (or any refusal) with the server's epoch,
/// the device's metrics and, on a success, the server's incarnation.
fn respond(state: &AppState, served: Served) -> Response {
    let encoded: Encoded<Bytes> = match served.said {
        Said::Own(answer) => {
            let encoded = answer.encode();
            Encoded { status: encoded.status, headers: encoded.headers, body: encoded.body.into() }
        }
        Said::Device(answer) => {
            let refused = answer.refusal().is_some();
            let envelope = Envelope {
                epoch: Some(state.map.epoch()),
                metrics: served.store.as_deref().map(|store| state.metrics(store)),
                incarnation: (!refused).then_some(state.incarnation),
            };
            answer.encode(&envelope)
        }
    };
    let body = if encoded.body.is_empty() { Body::empty() } else { Body::from(encoded.body) };
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(encoded.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in &encoded.headers {
        insert(headers, name, value);
    }
    if let Some(file) = served.file {
        response.extensions_mut().insert(file);
    }
    response
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}
