//! The HTTP API (routes in [`optio_proto::route`], headers in [`optio_proto::wire`]). A
//! device request is decoded once, by the guard, into [`optio_proto::request::Request`]:
//! authentication's capability, the metrics' operation and the dispatch to a handler all read
//! that one value, and a request that does not decode gets a 400 with the reason in Optio's
//! error format (after authentication, by the rule its head alone gives). Frames reach the
//! same decode through the router; the local socket decodes first to take opens only.
//!
//! Handlers by area: `objects` (probe, read, write, delete, list), `choices` (choice
//! records) and `status` (`/v1/status`, `/metrics`, `/health`, routed by path); this module
//! authenticates, checks epochs and turns failures into Optio's error answers.

mod admitted;
mod choices;
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
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use optio_placement::{Epoch, PoolId};
use optio_proto::auth::{AuthError, Cap};
use optio_proto::request::{self as device, DecodeError, Op, OpKind};
use optio_proto::{DeviceMetrics, ErrorBody, ErrorKind, Route};
use optio_proto::{route, wire};

use crate::error::StoreError;
use crate::mapstate::MapState;
use crate::store::DeviceStore;
use crate::system::SystemMetrics;

use choices::{delete_record, get_record, put_record, wait_durable};
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
    let uri = request.uri();
    if matches!(
        uri.path(),
        route::HEALTH_PATH | route::METRICS_PATH | route::STATUS_PATH | route::SCRUB_PATH
    ) {
        return None;
    }
    let path_and_query = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let headers = request.headers();
    let header = |name: &'static str| headers.get(name).map(HeaderValue::as_bytes);
    Some(Decoded(device::Request::decode(request.method().as_str(), path_and_query, header)))
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
        let (parts, body) = request.into_parts();
        discard(body, &parts.headers).await;
        let reason = format!("the header {name} holds bytes other than visible ASCII");
        if state.auth.enabled() {
            state.auth.count_refusal(&AuthError::Malformed(reason.clone()));
        }
        return state.error_response(fail(ErrorKind::BadRequest, reason), None);
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
            let (parts, body) = request.into_parts();
            discard(body, &parts.headers).await;
            let failure = fail(
                ErrorKind::Forbidden,
                "this server takes TLS: connect with https (the client's --tls-ca, or OPTIO_TLS_CA); \
                 plain HTTP serves /health only",
            );
            return state.error_response(failure, None);
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
            let (parts, body) = request.into_parts();
            discard(body, &parts.headers).await;
            state.error_response(fail(kind, error.to_string()), None)
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

struct Failure {
    kind: ErrorKind,
    reason: String,
    /// On a version conflict: the version stored (sent as `x-optio-version`, so that a writer
    /// whose clock runs behind can write above it).
    stored: Option<optio_proto::ObjectVersion>,
}

fn fail(kind: ErrorKind, reason: impl Into<String>) -> Failure {
    Failure { kind, reason: reason.into(), stored: None }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Failure {
        let stored = match &error {
            StoreError::VersionConflict { stored, .. } => Some(*stored),
            StoreError::BaseMismatch { stored, .. } => Some(stored.unwrap_or_default()),
            _ => None,
        };
        Failure { kind: error.kind(), reason: error.to_string(), stored }
    }
}

impl AppState {
    /// Whether `target` (a signed request's [`wire::TARGET`]) names this server: the address
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

    fn error_response(&self, failure: Failure, store: Option<&DeviceStore>) -> Response {
        let epoch = self.map.epoch();
        let stored = failure.stored;
        // The reason goes in a header too: HEAD answers (probes) have no body.
        let short: String = failure
            .reason
            .chars()
            .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
            .take(300)
            .collect();
        let body = ErrorBody { error: failure.kind, reason: failure.reason, epoch };
        let json = serde_json::to_vec(&body).expect("error bodies serialize");
        let mut response = Response::new(Body::from(json));
        *response.status_mut() =
            StatusCode::from_u16(failure.kind.status()).expect("error kinds have valid statuses");
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(wire::ERROR, HeaderValue::from_static(failure.kind.name()));
        if let Ok(value) = HeaderValue::from_str(&short) {
            headers.insert(wire::REASON, value);
        }
        if failure.kind == ErrorKind::Timeout {
            // The rest of a stalled body is not waited for: the connection closes.
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some(store) = store {
            insert(headers, wire::METRICS, &self.metrics(store).to_header());
        }
        insert(headers, wire::EPOCH, &epoch.to_string());
        if let Some(stored) = stored {
            insert(headers, wire::VERSION, &stored.0.to_string());
        }
        response
    }

    /// Refuses a request whose epoch is stale, or newer than any map this server can load.
    async fn check_epoch(self: &Arc<Self>, asked: Option<u64>) -> Result<(), Failure> {
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
}

/// The device `device`, if this server serves it.
fn served(state: &AppState, device: u32) -> Result<Arc<DeviceStore>, Failure> {
    state.devices.get(&device).cloned().ok_or_else(|| {
        let mut served: Vec<u32> = state.devices.keys().copied().collect();
        served.sort_unstable();
        fail(
            ErrorKind::Misdirected,
            format!("device {device} is not served here (this server serves {served:?})"),
        )
    })
}

async fn dispatch(State(state): State<Arc<AppState>>, mut request: Request) -> Response {
    let started = Instant::now();
    let decoded = match request.extensions_mut().remove::<Decoded>().or_else(|| decode(&request)) {
        Some(decoded) => decoded.0,
        // (The server's own routes never fall through to here.)
        None => Err(DecodeError {
            kind: ErrorKind::NotFound,
            reason: format!("no route {}", request.uri().path()),
            needed: Cap::Admin,
            kind_of_op: None,
        }),
    };
    let op: Operation = match &decoded {
        Ok(decoded) => Some(decoded.op.kind()),
        Err(error) => error.kind_of_op,
    };
    let response = serve(&state, decoded, request, started, op).await;
    let error =
        response.headers().get(wire::ERROR).and_then(|v| ErrorKind::from_name(v.to_str().ok()?));
    state.telemetry.observe(op, error, started.elapsed());
    response
}

/// Refuses a request that does not decode: the device it names is not served here
/// (misdirected), or the reason it does not decode, with the device's metrics.
async fn refuse_malformed(state: &AppState, error: DecodeError, request: Request) -> Response {
    let store = match Route::parse(request.uri().path()) {
        Ok(route) => match served(state, route.device) {
            Ok(store) => Some(store),
            Err(failure) => {
                let (parts, body) = request.into_parts();
                discard(body, &parts.headers).await;
                return state.error_response(failure, None);
            }
        },
        Err(_) => None,
    };
    let (parts, body) = request.into_parts();
    discard(body, &parts.headers).await;
    state.error_response(fail(error.kind, error.reason), store.as_deref())
}

/// Serves a decoded request to a device (`op`: its kind) that arrived at `started`.
async fn serve(
    state: &Arc<AppState>,
    decoded: Result<device::Request<'static>, DecodeError>,
    request: Request,
    started: Instant,
    op: Operation,
) -> Response {
    let decoded = match decoded {
        Ok(decoded) => decoded,
        Err(error) => return refuse_malformed(state, error, request).await,
    };
    let store = match served(state, decoded.device) {
        Ok(store) => store,
        Err(failure) => {
            let (parts, body) = request.into_parts();
            discard(body, &parts.headers).await;
            return state.error_response(failure, None);
        }
    };
    if !state.fence.serving() {
        let (parts, body) = request.into_parts();
        discard(body, &parts.headers).await;
        let failure = fail(
            ErrorKind::Fenced,
            "this server holds no lease in the map store (it cannot reach it, or the monitor \
             fenced it before marking it down): it serves nothing; use the other replicas",
        );
        return state.error_response(failure, Some(&store));
    }
    // The epoch checked, when one is (a server without a map checks none).
    let checked = decoded.epoch.filter(|_| state.map.checks_epochs());
    // Counted before the epoch check (see `admitted`).
    let _admitted = match (op, checked) {
        (Some(OpKind::Put | OpKind::Write | OpKind::Delete), Some(epoch)) => {
            Some(state.writes.admit(epoch))
        }
        _ => None,
    };
    if let Err(failure) = state.check_epoch(decoded.epoch).await {
        let (parts, body) = request.into_parts();
        discard(body, &parts.headers).await;
        return state.error_response(failure, Some(&store));
    }
    if let (Some(OpKind::List), Some(epoch)) = (op, checked)
        && let Err(older) = state.writes.settle_before(epoch, admitted::SETTLE_WAIT_MAX).await
    {
        let failure = fail(
            ErrorKind::Unavailable,
            format!(
                "{older} write(s) of an epoch before {epoch} are still being stored here; list again shortly"
            ),
        );
        return state.error_response(failure, Some(&store));
    }
    let epoch = Epoch(decoded.epoch.unwrap_or(state.map.epoch()));
    let target = Target { store: store.clone(), pool: decoded.pool, epoch };
    let result = handle(state, target, decoded.op, request).await;
    store.record_latency(started.elapsed().as_micros() as u64);
    match result {
        Ok(mut response) => {
            let headers = response.headers_mut();
            insert(headers, wire::METRICS, &state.metrics(&store).to_header());
            insert(headers, wire::EPOCH, &state.map.epoch().to_string());
            insert(headers, wire::INCARNATION, &format!("{:x}", state.incarnation));
            response
        }
        Err(failure) => state.error_response(failure, Some(&store)),
    }
}

/// Dispatches a decoded operation to its handler.
async fn handle(
    state: &Arc<AppState>,
    target: Target,
    op: Op<'static>,
    request: Request,
) -> Result<Response, Failure> {
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
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
    match op {
        Op::List(query) => list(&target, &query, sees_gateway_state(&parts.extensions)),
        Op::Sync => sync_device(&target).await,
        Op::Probe { key, want_choice } => probe(&target, &key, want_choice),
        Op::Open { key } => {
            let local = parts.extensions.get::<crate::conn::LocalPeer>().is_some();
            open_object(&target, key.into_owned(), local).await
        }
        Op::Get { key, range } => get_object(&target, key.into_owned(), range).await,
        Op::Fetch { key } => get_object(&target, key.into_owned(), None).await,
        Op::Put { key, version, checksum, pg_seed } => {
            let put = objects::Put { key: key.into_owned(), version, checksum, pg_seed };
            put_object(state, &target, put, headers, body).await
        }
        Op::WriteAt(write) => write_in_place(state, &target, write, headers, body).await,
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
    }
}

fn header_u64(headers: &HeaderMap, name: &str) -> Result<Option<u64>, Failure> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Some)
            .ok_or_else(|| fail(ErrorKind::BadRequest, format!("{name} is not an integer"))),
    }
}

/// The largest refused body the server reads (and throws away) before answering.
const DISCARD_BYTES_MAX: u64 = 1 << 30;

/// The longest it spends reading one.
const DISCARD_TIME_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads and drops the body of a refused request (up to [`DISCARD_BYTES_MAX`] bytes and
/// [`DISCARD_TIME_MAX`]) before the refusal is sent. A client still writing the body — a
/// 4 MiB object sent to a server that no longer serves its device, or one above the size
/// limit — then reads the answer (421, 413, … and the reason) instead of a reset connection:
/// what nginx calls a lingering close. A body declared larger, or sent slower, is not read to
/// its end: the connection closes.
async fn discard(body: Body, headers: &HeaderMap) {
    use futures_util::StreamExt as _;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared == Some(0) || declared.is_some_and(|length| length > DISCARD_BYTES_MAX) {
        return;
    }
    let mut stream = body.into_data_stream();
    let _ = tokio::time::timeout(DISCARD_TIME_MAX, async {
        let mut read = 0u64;
        while let Some(Ok(chunk)) = stream.next().await {
            read += chunk.len() as u64;
            if read > DISCARD_BYTES_MAX {
                break;
            }
        }
    })
    .await;
}
