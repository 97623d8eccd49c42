//! The HTTP API (routes in [`optio_proto::route`], headers in [`optio_proto::wire`]). A
//! device request is decoded once, by the guard, into [`optio_proto::request::Request`]:
//! authentication's capability, the metrics' operation and the dispatch to a handler all read
//! that one value, and a request that does not decode gets a 400 with the reason in Optio's
//! error format (after authentication, by the rule its head alone gives). Frames reach the
//! same decode through the router; the local socket decodes first to take opens only.
//!
//! The core is [`serve`]: a decoded request (with its body, [`incoming::Incoming`]) in, a
//! typed [`Answer`] out — the device checked, fencing, epochs, dispatch to a handler. Handlers
//! by area, `objects` (probe, read, write, delete, list) and `choices` (choice records),
//! return answers and refusals as values; no HTTP type reaches them. One adapter,
//! [`AppState::respond`], encodes an answer ([`Answer::encode`], the form clients decode with
//! [`Answer::decode`]) with the server's epoch, the device's metrics and the incarnation,
//! for HTTP/1.1 and frames alike (frames run through the same router). `status` serves
//! `/v1/status`, `/metrics` and `/health`, routed by path.

mod admitted;
mod choices;
mod incoming;
mod metrics;
mod objects;
mod status;

pub(crate) use metrics::ServerMetrics;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use bytes::Bytes;
use optio_placement::{Epoch, PoolId};
use optio_proto::answer::{Answer, Envelope, Refusal};
use optio_proto::auth::{AuthError, Cap};
use optio_proto::request::{self as device, DecodeError, Op, OpKind};
use optio_proto::route;
use optio_proto::{DeviceMetrics, ErrorKind, Route};

use crate::conn::LocalFile;
use crate::mapstate::MapState;
use crate::store::DeviceStore;
use crate::system::SystemMetrics;

use choices::{delete_record, get_record, put_record, wait_durable};
use incoming::Incoming;
use metrics::Operation;
use objects::{
    delete_object, get_object, list, open_object, probe, put_object, sync_device, write_in_place,
};
use status::{health, prometheus, status};

/// What every handler shares.
pub struct AppState {
    pub(crate) devices: HashMap<u32, Arc<DeviceStore>>,
    pub(crate) map: Arc<MapState>,
    pub(crate) system: Arc<SystemMetrics>,
    pub(crate) max_object_bytes: u64,
    /// Prometheus metrics.
    pub(crate) telemetry: metrics::ServerMetrics,
    /// A random number drawn at start: a client that sees it change knows the server
    /// restarted (and may have lost records not yet committed).
    pub(crate) incarnation: u64,
    /// Moves data when the map changes.
    pub(crate) rebalancer: Arc<crate::Rebalancer>,
    /// Catches up devices that may have missed writes; they serve no reads meanwhile.
    pub(crate) catchup: Arc<crate::catchup::CatchUp>,
    /// Verifies and repairs replicas.
    pub(crate) scrubber: Arc<crate::scrub::Scrubber>,
    /// Whether the server holds its lease (with the map in etcd).
    pub(crate) fence: Arc<crate::fence::Fence>,
    /// Who may do what.
    pub(crate) auth: Arc<crate::auth::Auth>,
    /// Object writes in flight by epoch: listings at a newer epoch wait for them.
    pub(crate) writes: admitted::WritesInFlight,
    /// The local socket, as `/v1/status` shows it.
    pub(crate) local_socket: Option<optio_proto::LocalSocket>,
    /// The address the server listens on (`host:port`), a target signed requests may name
    /// besides its devices' addresses in the map.
    pub(crate) listen_addr: Option<String>,
}

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(route::HEALTH_PATH, get(health))
        .route(route::METRICS_PATH, get(prometheus))
        .route(route::STATUS_PATH, get(status))
        .route(route::SCRUB_PATH, axum::routing::post(status::scrub))
        .fallback(dispatch)
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// What a request needs: `None` for `/health` (liveness only) and, with `--metrics-public`,
/// `/metrics`; a device request what its decoded value says ([`device::Request::needed_cap`];
/// one that does not decode, what its head says: [`DecodeError::needed`]).
fn needed(state: &AppState, path: &str, decoded: Option<&Decoded>) -> Option<Cap> {
    Some(match path {
        route::HEALTH_PATH => return None,
        route::METRICS_PATH => return (!state.auth.metrics_public()).then_some(Cap::Admin),
        route::STATUS_PATH => Cap::Read,
        route::SCRUB_PATH => Cap::Admin,
        _ => match decoded.map(|decoded| &decoded.0) {
            Some(Ok(request)) => request.needed_cap(),
            Some(Err(error)) => error.needed,
            None => Cap::Admin,
        },
    })
}

/// A device request, decoded once (by the guard, or by the local socket before it) for
/// authentication, metrics and dispatch alike: an extension of the HTTP request.
#[derive(Clone, Debug)]
pub(crate) struct Decoded(pub(crate) Result<device::Request<'static>, DecodeError>);

/// Decodes `request` as a device request; `None` for the server's own routes (`/health`,
/// `/metrics`, `/v1/status`, `/v1/scrub`), which are routed by path.
pub(crate) fn decode(request: &Request) -> Option<Decoded> {
    decode_of(request.method(), request.uri(), request.headers())
}

/// [`decode`] of a request taken apart.
fn decode_head(parts: &axum::http::request::Parts) -> Option<Decoded> {
    decode_of(&parts.method, &parts.uri, &parts.headers)
}

fn decode_of(
    method: &axum::http::Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
) -> Option<Decoded> {
    if matches!(
        uri.path(),
        route::HEALTH_PATH | route::METRICS_PATH | route::STATUS_PATH | route::SCRUB_PATH
    ) {
        return None;
    }
    let path_and_query = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let header = |name: &'static str| headers.get(name).map(HeaderValue::as_bytes);
    Some(Decoded(device::Request::decode(method.as_str(), path_and_query, header)))
}

/// The capability of the entity a request was authenticated as (an extension the guard
/// sets; absent with authentication off, when every request may do everything).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallerCap(pub(crate) Cap);

/// Whether a request may see the gateway's own keys in a listing.
pub(crate) fn sees_gateway_state(extensions: &axum::http::Extensions) -> bool {
    extensions.get::<CallerCap>().is_none_or(|caller| caller.0.allows(Cap::Gateway))
}

/// Authenticates and authorises every request before anything else sees it (see
/// [`crate::auth`]): 401 `unauthorized` or 403 `forbidden` with the reason, counted in
/// `/metrics` and logged; the request has no effect.
async fn guard(State(state): State<Arc<AppState>>, mut request: Request, next: Next) -> Response {
    // A signed header whose value is not visible ASCII would be left out of the signature
    // (it has no text form) yet act by its presence: refused, as frames refuse them.
    if let Some(name) = request.headers().iter().find_map(|(name, value)| {
        (optio_proto::auth::is_signed_header(name.as_str()) && value.to_str().is_err())
            .then(|| name.as_str().to_string())
    }) {
        let reason = format!("the header {name} holds bytes other than visible ASCII");
        if state.auth.enabled() {
            state.auth.count_refusal(&AuthError::Malformed(reason.clone()));
        }
        return state.refuse(request, fail(ErrorKind::BadRequest, reason)).await;
    }
    if request.extensions().get::<Decoded>().is_none()
        && let Some(decoded) = decode(&request)
    {
        request.extensions_mut().insert(decoded);
    }
    let path_and_query =
        request.uri().path_and_query().map_or(request.uri().path(), |p| p.as_str());
    let headers: Vec<(&str, &str)> = request
        .headers()
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let seen = crate::auth::Request {
        method: request.method().as_str(),
        path: path_and_query,
        headers: &headers,
    };
    if request.extensions().get::<crate::conn::Plaintext>().is_some() {
        let path = request.uri().path();
        let open = path == route::HEALTH_PATH
            || (path == route::METRICS_PATH && state.auth.metrics_public());
        if !open {
            // Its nonce is spent: refused here, it cannot be sent again over TLS.
            state.auth.spend(seen);
            drop(headers);
            let refusal = fail(
                ErrorKind::Forbidden,
                "this server takes TLS: connect with https (the client's --tls-ca, or OPTIO_TLS_CA); \
                 plain HTTP serves /health only",
            );
            return state.refuse(request, refusal).await;
        }
    }
    if !state.auth.enabled() {
        drop(headers);
        return next.run(request).await;
    }
    let Some(need) = needed(&state, request.uri().path(), request.extensions().get()) else {
        drop(headers);
        return next.run(request).await;
    };
    let peer = request.extensions().get::<crate::conn::PeerEntity>().map(|p| p.0.clone());
    let is_own_target = |target: &str| state.is_own_target(target);
    let checked = state.auth.check(seen, need, peer.as_deref(), &is_own_target);
    drop(headers);
    match checked {
        Ok(caller) => {
            let mut request = request;
            if let Some(caller) = caller {
                request.extensions_mut().insert(CallerCap(caller.cap));
            }
            next.run(request).await
        }
        Err(error) => {
            let kind = match error {
                AuthError::Forbidden { .. } => ErrorKind::Forbidden,
                _ => ErrorKind::Unauthorized,
            };
            state.refuse(request, fail(kind, error.to_string())).await
        }
    }
}

/// Commits every device's choice records and marks the shutdown clean.
pub(crate) async fn close_records(state: &Arc<AppState>) {
    for store in state.devices.values() {
        let store = store.clone();
        if let Ok(Err(error)) = tokio::task::spawn_blocking(move || store.close_records()).await {
            tracing::warn!(%error, "closing the choice records failed");
        }
    }
}

/// Commits every device's queued choice records (group commit).
pub(crate) async fn commit_records(state: &Arc<AppState>) {
    for store in state.devices.values() {
        let store = store.clone();
        if let Ok(Err(error)) = tokio::task::spawn_blocking(move || store.commit_records()).await {
            tracing::warn!(%error, "committing choice records failed");
        }
    }
}

fn fail(kind: ErrorKind, reason: impl Into<String>) -> Refusal {
    Refusal::new(kind, reason)
}

/// What a handler answers.
type Handled = Result<Answer<Bytes>, Refusal>;

/// What the core answers: the answer, the device whose metrics go with it, and the open file
/// an open answers with (the local socket sends it).
pub(crate) struct Served {
    answer: Answer<Bytes>,
    store: Option<Arc<DeviceStore>>,
    file: Option<LocalFile>,
}

impl Served {
    fn refused(refusal: Refusal, store: Option<Arc<DeviceStore>>) -> Served {
        Served { answer: Answer::Refused(refusal), store, file: None }
    }
}

impl AppState {
    /// Whether `target` (a signed request's [`optio_proto::wire::TARGET`]) names this server: the address
    /// the map gives one of its devices, or the address it listens on.
    fn is_own_target(&self, target: &str) -> bool {
        if self.listen_addr.as_deref() == Some(target) {
            return true;
        }
        let Some(map) = self.map.current() else { return false };
        self.devices.keys().any(|id| {
            map.map
                .device(optio_placement::DeviceId(*id))
                .and_then(|device| device.addr.as_deref())
                .is_some_and(|addr| addr == target)
        })
    }

    fn metrics(&self, store: &DeviceStore) -> DeviceMetrics {
        let used = store.used_bytes();
        let capacity = store.capacity_bytes();
        DeviceMetrics {
            device: store.id(),
            cpu_permille: self.system.cpu_permille(),
            memory_permille: self.system.memory_permille(),
            space_permille: if capacity == 0 {
                1000
            } else {
                (u128::from(used) * 1000 / u128::from(capacity)).min(1000) as u16
            },
            used_bytes: used,
            capacity_bytes: capacity,
            latency_us: store.latency_us(),
            unflushed_bytes: store.unflushed_bytes(),
            location: self.map.location(store.id()),
        }
    }

    /// The HTTP answer of `served`, with what every device answer carries: the server's
    /// epoch, the device's metrics and (on a success) the server's incarnation.
    fn respond(&self, served: Served) -> Response {
        let refused = served.answer.refusal().is_some();
        let envelope = Envelope {
            epoch: Some(self.map.epoch()),
            metrics: served.store.as_deref().map(|store| self.metrics(store)),
            incarnation: (!refused).then_some(self.incarnation),
        };
        let encoded = served.answer.encode(&envelope);
        let body = if encoded.body.is_empty() { Body::empty() } else { Body::from(encoded.body) };
        let mut response = Response::new(body);
        *response.status_mut() =
            StatusCode::from_u16(encoded.status).expect("answers have valid statuses");
        let headers = response.headers_mut();
        for (name, value) in &encoded.headers {
            insert(headers, name, value);
        }
        if let Some(file) = served.file {
            response.extensions_mut().insert(file);
        }
        response
    }

    /// Refuses `request` before it is decoded or served (its body thrown away first).
    async fn refuse(&self, request: Request, refusal: Refusal) -> Response {
        let (parts, body) = request.into_parts();
        Incoming::new(body, &parts.headers).discard().await;
        self.respond(Served::refused(refusal, None))
    }

    /// Refuses a request whose epoch is stale, or newer than any map this server can load.
    async fn check_epoch(self: &Arc<Self>, asked: Option<u64>) -> Result<(), Refusal> {
        let Some(asked) = asked else { return Ok(()) };
        if !self.map.checks_epochs() {
            return Ok(());
        }
        let held = self.map.epoch();
        if asked < held {
            return Err(fail(
                ErrorKind::StaleEpoch,
                format!("epoch {asked} is stale; the map is at epoch {held}: reload it and retry"),
            ));
        }
        if asked > held {
            if let Err(error) = self.map.refresh().await {
                tracing::warn!(%error, "cannot read the map");
            }
            let held = self.map.epoch();
            if asked > held {
                return Err(fail(
                    ErrorKind::UnknownEpoch,
                    format!("epoch {asked} is unknown here; this server holds epoch {held}"),
                ));
            }
        }
        Ok(())
    }
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

/// The device and pool a request is for, and the epoch its writes are stamped with (the
/// sender's, or this server's when it names none).
struct Target {
    store: Arc<DeviceStore>,
    pool: PoolId,
    epoch: Epoch,
    /// A write's snapshot context ([`optio_proto::snap`]).
    snap: Option<optio_proto::snap::SnapContext>,
    /// A read's snapshot mark.
    as_of: Option<optio_proto::ObjectVersion>,
}

/// The device `device`, if this server serves it.
fn served(state: &AppState, device: u32) -> Result<Arc<DeviceStore>, Refusal> {
    state.devices.get(&device).cloned().ok_or_else(|| {
        let mut served: Vec<u32> = state.devices.keys().copied().collect();
        served.sort_unstable();
        fail(
            ErrorKind::Misdirected,
            format!("device {device} is not served here (this server serves {served:?})"),
        )
    })
}

/// A device request as the core takes it: decoded once, and what the connection says of its
/// sender.
struct Asked {
    /// The request, or why it does not decode.
    decoded: Result<device::Request<'static>, DecodeError>,
    /// For a request that does not decode: the device its path names, if it parses (the
    /// refusal carries that device's metrics, or is `misdirected`).
    routed_device: Option<u32>,
    /// Who sent it.
    caller: Caller,
}

/// What the connection says of a request's sender.
#[derive(Clone, Copy, Debug)]
struct Caller {
    /// Whether it came over the local socket (opens are answered there only).
    local: bool,
    /// Whether it may see the gateway's own keys in a listing.
    sees_gateway_state: bool,
}

/// The HTTP adapter of device requests (the router's fallback): the request decoded (by the
/// guard, usually), served, counted, and its answer encoded; a refusal's body is read and
/// thrown away first (see [`Incoming::discard`]).
async fn dispatch(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let started = Instant::now();
    let (mut parts, body) = request.into_parts();
    let decoded = match parts.extensions.remove::<Decoded>().or_else(|| decode_head(&parts)) {
        Some(decoded) => decoded.0,
        // (The server's own routes never fall through to here.)
        None => Err(DecodeError {
            kind: ErrorKind::NotFound,
            reason: format!("no route {}", parts.uri.path()),
            needed: Cap::Admin,
            kind_of_op: None,
        }),
    };
    let op: Operation = match &decoded {
        Ok(decoded) => Some(decoded.op.kind()),
        Err(error) => error.kind_of_op,
    };
    let routed_device = match &decoded {
        Ok(_) => None,
        Err(_) => Route::parse(parts.uri.path()).ok().map(|route| route.device),
    };
    let asked = Asked {
        decoded,
        routed_device,
        caller: Caller {
            local: parts.extensions.get::<crate::conn::LocalPeer>().is_some(),
            sees_gateway_state: sees_gateway_state(&parts.extensions),
        },
    };
    let mut body = Incoming::new(body, &parts.headers);
    let served = serve(&state, asked, &mut body, started).await;
    let refused = served.answer.refusal().map(|refusal| refusal.kind);
    if refused.is_some() {
        body.discard().await;
    }
    state.telemetry.observe(op, refused, started.elapsed());
    state.respond(served)
}

/// The core: serves a request that arrived at `started` to one of this server's devices —
/// the device served here, the server not fenced, the sender's epoch current, a listing
/// after the writes of older epochs — and dispatches it to its handler.
async fn serve(
    state: &Arc<AppState>,
    asked: Asked,
    body: &mut Incoming,
    started: Instant,
) -> Served {
    let request = match asked.decoded {
        Ok(request) => request,
        Err(error) => {
            let store = match asked.routed_device.map(|device| served(state, device)) {
                Some(Err(misdirected)) => return Served::refused(misdirected, None),
                Some(Ok(store)) => Some(store),
                None => None,
            };
            return Served::refused(fail(error.kind, error.reason), store);
        }
    };
    let store = match served(state, request.device) {
        Ok(store) => store,
        Err(misdirected) => return Served::refused(misdirected, None),
    };
    if !state.fence.serving() {
        let refusal = fail(
            ErrorKind::Fenced,
            "this server holds no lease in the map store (it cannot reach it, or the monitor \
             fenced it before marking it down): it serves nothing; use the other replicas",
        );
        return Served::refused(refusal, Some(store));
    }
    let kind = request.op.kind();
    // The epoch checked, when one is (a server without a map checks none).
    let checked = request.epoch.filter(|_| state.map.checks_epochs());
    // Counted before the epoch check (see `admitted`).
    let _admitted = match (kind, checked) {
        (OpKind::Put | OpKind::Write | OpKind::Delete, Some(epoch)) => {
            Some(state.writes.admit(epoch))
        }
        _ => None,
    };
    if let Err(refusal) = state.check_epoch(request.epoch).await {
        return Served::refused(refusal, Some(store));
    }
    if let (OpKind::List, Some(epoch)) = (kind, checked)
        && let Err(older) = state.writes.settle_before(epoch, admitted::SETTLE_WAIT_MAX).await
    {
        let refusal = fail(
            ErrorKind::Unavailable,
            format!(
                "{older} write(s) of an epoch before {epoch} are still being stored here; list again shortly"
            ),
        );
        return Served::refused(refusal, Some(store));
    }
    let epoch = Epoch(request.epoch.unwrap_or(state.map.epoch()));
    let (snap, as_of) = (request.snap, request.as_of);
    let target = Target { store: store.clone(), pool: request.pool, epoch, snap, as_of };
    let handled = handle(state, target, request.op, asked.caller, body).await;
    store.record_latency(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    match handled {
        Ok((answer, file)) => Served { answer, store: Some(store), file },
        Err(refusal) => Served::refused(refusal, Some(store)),
    }
}

/// Dispatches a decoded operation to its handler.
async fn handle(
    state: &Arc<AppState>,
    target: Target,
    op: Op<'static>,
    caller: Caller,
    body: &mut Incoming,
) -> Result<(Answer<Bytes>, Option<LocalFile>), Refusal> {
    let reads = matches!(op, Op::Probe { .. } | Op::Get { .. } | Op::Open { .. });
    if reads && state.catchup.refuses_reads(target.store.id()) {
        return Err(fail(
            ErrorKind::Recovering,
            format!(
                "device {} is catching up on writes it missed (or the map marks it down); read another replica",
                target.store.id()
            ),
        ));
    }
    let answer = match op {
        Op::List(query) => list(&target, &query, caller.sees_gateway_state),
        Op::Sync => sync_device(&target).await,
        Op::Probe { key, want_choice } => probe(&target, &key, want_choice),
        Op::Open { key } => {
            let (answer, file) = open_object(&target, key.into_owned(), caller.local).await?;
            return Ok((answer, Some(LocalFile(Arc::new(file)))));
        }
        Op::Get { key, range } => get_object(&target, key.into_owned(), range).await,
        Op::Fetch { key } => get_object(&target, key.into_owned(), None).await,
        Op::Put { key, version, checksum, pg_seed } => {
            let put = objects::Put { key: key.into_owned(), version, checksum, pg_seed };
            put_object(state, &target, put, body).await
        }
        Op::WriteAt(write) => write_in_place(state, &target, write, body).await,
        Op::Delete { key, version, purge, pg_seed } => {
            let removal = objects::Removal::Delete { version, purge, pg_seed };
            delete_object(&target, key.into_owned(), removal).await
        }
        Op::Undo { key, version } => {
            delete_object(&target, key.into_owned(), objects::Removal::Undo { version }).await
        }
        Op::GetRecord { key, wait_durable: wait } => {
            if wait {
                wait_durable(&target, &key).await?;
            }
            get_record(&target, &key)
        }
        Op::PutRecord { key, record, replace_if_writer, unless_contended, defer_sync } => {
            let put = choices::PutRecord {
                key: key.into_owned(),
                record,
                replace_if_writer,
                unless_contended,
                defer_sync,
            };
            put_record(state, &target, put).await
        }
        Op::DeleteRecord { key } => delete_record(&target, key.into_owned()).await,
    };
    Ok((answer?, None))
}
