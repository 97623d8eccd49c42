//! The HTTP API (routes in [`optio_proto::wire`]). One handler parses the path itself so that
//! every malformed request gets a 400 with a reason in Optio's error format.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use optio_placement::{Epoch, PoolId};
use optio_proto::{
    Area, ChoiceRecord, DeviceMetrics, DeviceStatus, ErrorBody, ErrorKind, ListQuery, Listing,
    ObjectInfo, ObjectVersion, Route, ServerStatus,
};
use optio_proto::{route, wire};

use crate::error::StoreError;
use crate::mapstate::MapState;
use crate::store::{DeviceStore, LIST_LIMIT_MAX, PutRequest, RecordOutcome};
use crate::system::SystemMetrics;

/// Request counters, by operation.
#[derive(Debug, Default)]
pub struct Counters {
    probes: AtomicU64,
    gets: AtomicU64,
    puts: AtomicU64,
    deletes: AtomicU64,
    lists: AtomicU64,
    records: AtomicU64,
    errors: AtomicU64,
}

/// What every handler shares.
pub struct AppState {
    pub(crate) devices: HashMap<u32, Arc<DeviceStore>>,
    pub(crate) map: Arc<MapState>,
    pub(crate) system: Arc<SystemMetrics>,
    pub(crate) max_object_bytes: u64,
    pub(crate) counters: Counters,
    /// A random number drawn at start: a client that sees it change knows the server
    /// restarted (and may have lost records not yet committed).
    pub(crate) incarnation: u64,
    /// Moves data when the map changes.
    pub(crate) rebalancer: Arc<crate::Rebalancer>,
}

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(route::HEALTH_PATH, get(health))
        .route(route::METRICS_PATH, get(prometheus))
        .route(route::STATUS_PATH, get(status))
        .fallback(dispatch)
        .with_state(state)
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
}

fn fail(kind: ErrorKind, reason: impl Into<String>) -> Failure {
    Failure { kind, reason: reason.into() }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Failure {
        Failure { kind: error.kind(), reason: error.to_string() }
    }
}

impl AppState {
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
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        let epoch = self.map.epoch();
        let body = ErrorBody { error: failure.kind, reason: failure.reason, epoch };
        let json = serde_json::to_vec(&body).expect("error bodies serialize");
        let mut response = Response::new(Body::from(json));
        *response.status_mut() =
            StatusCode::from_u16(failure.kind.status()).expect("error kinds have valid statuses");
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(wire::ERROR, HeaderValue::from_static(failure.kind.name()));
        if let Some(store) = store {
            insert(headers, wire::METRICS, &self.metrics(store).to_header());
        }
        insert(headers, wire::EPOCH, &epoch.to_string());
        response
    }

    /// Refuses a request whose epoch is stale, or newer than any map this server can load.
    async fn check_epoch(self: &Arc<Self>, headers: &HeaderMap) -> Result<(), Failure> {
        let Some(value) = headers.get(wire::EPOCH) else { return Ok(()) };
        if !self.map.checks_epochs() {
            return Ok(());
        }
        let asked: u64 = value
            .to_str()
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| fail(ErrorKind::BadRequest, "x-optio-epoch is not an integer"))?;
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

async fn health(State(state): State<Arc<AppState>>) -> Response {
    let body = format!("{{\"status\":\"ok\",\"epoch\":{}}}", state.map.epoch());
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn server_status(state: &AppState) -> ServerStatus {
    let mut ids: Vec<u32> = state.devices.keys().copied().collect();
    ids.sort_unstable();
    let devices = ids
        .iter()
        .map(|id| {
            let store = &state.devices[id];
            DeviceStatus {
                metrics: state.metrics(store),
                objects: store.objects() as u64,
                records: store.records_held() as u64,
                corrupt_found: store.corrupt_found(),
            }
        })
        .collect();
    ServerStatus { epoch: state.map.epoch(), devices, migration: state.rebalancer.status() }
}

async fn status(State(state): State<Arc<AppState>>) -> Response {
    let json = serde_json::to_vec(&server_status(&state)).expect("status serializes");
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

async fn prometheus(State(state): State<Arc<AppState>>) -> Response {
    use std::fmt::Write;
    let status = server_status(&state);
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: &dyn Fn(&DeviceStatus) -> u64| {
        let _ = writeln!(out, "# HELP optio_{name} {help}\n# TYPE optio_{name} gauge");
        for device in &status.devices {
            let _ = writeln!(
                out,
                "optio_{name}{{device=\"{}\"}} {}",
                device.metrics.device,
                value(device)
            );
        }
    };
    gauge("device_used_bytes", "Bytes stored on the device.", &|d| d.metrics.used_bytes);
    gauge("device_capacity_bytes", "Configured capacity.", &|d| d.metrics.capacity_bytes);
    gauge("device_objects", "Objects stored.", &|d| d.objects);
    gauge("device_choice_records", "Choice records held.", &|d| d.records);
    gauge("device_latency_us", "Service time EWMA, microseconds.", &|d| d.metrics.latency_us);
    gauge("device_unflushed_bytes", "Bytes not yet durable.", &|d| d.metrics.unflushed_bytes);
    gauge("device_corrupt_found", "Corrupt files quarantined.", &|d| d.corrupt_found);
    let c = &state.counters;
    let _ = writeln!(out, "# HELP optio_requests_total Requests served.");
    let _ = writeln!(out, "# TYPE optio_requests_total counter");
    for (op, counter) in [
        ("probe", &c.probes),
        ("get", &c.gets),
        ("put", &c.puts),
        ("delete", &c.deletes),
        ("list", &c.lists),
        ("record", &c.records),
        ("error", &c.errors),
    ] {
        let _ = writeln!(
            out,
            "optio_requests_total{{op=\"{op}\"}} {}",
            counter.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(out, "# HELP optio_epoch The map epoch held.\n# TYPE optio_epoch gauge");
    let _ = writeln!(out, "optio_epoch {}", status.epoch);
    let _ = writeln!(
        out,
        "# HELP optio_cpu_permille CPU utilisation.\n# TYPE optio_cpu_permille gauge"
    );
    let _ = writeln!(out, "optio_cpu_permille {}", state.system.cpu_permille());
    let _ = writeln!(
        out,
        "# HELP optio_memory_permille Memory utilisation.\n# TYPE optio_memory_permille gauge"
    );
    let _ = writeln!(out, "optio_memory_permille {}", state.system.memory_permille());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// The parsed target of a device request.
struct Target {
    store: Arc<DeviceStore>,
    area: Area,
    pool: PoolId,
    key: Option<String>,
}

fn parse_target(state: &AppState, path: &str) -> Result<Target, Failure> {
    let Route { device, area, pool, key } =
        Route::parse(path).map_err(|e| fail(e.kind, e.reason))?;
    let store = state.devices.get(&device).cloned().ok_or_else(|| {
        let mut served: Vec<u32> = state.devices.keys().copied().collect();
        served.sort_unstable();
        fail(
            ErrorKind::Misdirected,
            format!("device {device} is not served here (this server serves {served:?})"),
        )
    })?;
    Ok(Target { store, area, pool, key })
}

async fn dispatch(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let started = Instant::now();
    let target = match parse_target(&state, request.uri().path()) {
        Ok(target) => target,
        Err(failure) => {
            let (parts, body) = request.into_parts();
            discard(body, &parts.headers).await;
            return state.error_response(failure, None);
        }
    };
    if let Err(failure) = state.check_epoch(request.headers()).await {
        let (parts, body) = request.into_parts();
        discard(body, &parts.headers).await;
        return state.error_response(failure, Some(&target.store));
    }
    let store = target.store.clone();
    let result = handle(&state, target, request).await;
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

async fn handle(
    state: &Arc<AppState>,
    target: Target,
    request: Request,
) -> Result<Response, Failure> {
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    match (target.area, &target.key, parts.method) {
        (Area::Objects, None, Method::GET) => list(state, &target, &parts.uri),
        (_, None, _) => {
            Err(fail(ErrorKind::BadRequest, "the key is empty; keys are 1 to 1024 bytes of UTF-8"))
        }
        (Area::Objects, Some(_), Method::HEAD) => probe(state, &target, headers),
        (Area::Objects, Some(_), Method::GET) => get_object(state, &target, headers).await,
        (Area::Objects, Some(_), Method::PUT) => put_object(state, &target, headers, body).await,
        (Area::Objects, Some(_), Method::DELETE) => delete_object(state, &target, headers).await,
        (Area::Choices, Some(key), Method::GET | Method::HEAD) => {
            if headers.contains_key(wire::WAIT_DURABLE) {
                wait_durable(state, &target, key).await?;
            }
            get_record(state, &target)
        }
        (Area::Choices, Some(_), Method::PUT) => put_record(state, &target, headers).await,
        (Area::Choices, Some(_), Method::DELETE) => delete_record(state, &target).await,
        (_, _, method) => {
            Err(fail(ErrorKind::BadRequest, format!("method {method} is not allowed here")))
        }
    }
}

fn object_headers(headers: &mut HeaderMap, info: &ObjectInfo) {
    for (name, value) in wire::object_headers(info) {
        insert(headers, name, &value);
    }
}

fn probe(
    state: &AppState,
    target: &Target,
    request_headers: &HeaderMap,
) -> Result<Response, Failure> {
    state.counters.probes.fetch_add(1, Ordering::Relaxed);
    let key = target.key.as_deref().expect("routed with a key");
    let info = target.store.info(target.pool, key);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = if info.is_some() { StatusCode::OK } else { StatusCode::NOT_FOUND };
    let headers = response.headers_mut();
    if let Some(info) = &info {
        object_headers(headers, info);
    } else if let Some(deleted) = target.store.tombstone(target.pool, key) {
        insert(headers, wire::DELETED, &deleted.0.to_string());
    }
    if request_headers.contains_key(wire::WANT_CHOICE)
        && let Some(record) = target.store.record(target.pool, key)
    {
        insert(headers, wire::CHOICE, &wire::choice_header(&record));
    }
    Ok(response)
}

async fn get_object(
    state: &AppState,
    target: &Target,
    request_headers: &HeaderMap,
) -> Result<Response, Failure> {
    state.counters.gets.fetch_add(1, Ordering::Relaxed);
    let key = target.key.clone().expect("routed with a key");
    let store = target.store.clone();
    let pool = target.pool;
    let (info, data) = tokio::task::spawn_blocking(move || store.get(pool, &key))
        .await
        .map_err(|e| fail(ErrorKind::Io, format!("read task failed: {e}")))??;
    let range = match request_headers.get(header::RANGE) {
        None => None,
        Some(value) => {
            let text = value.to_str().unwrap_or("");
            Some(parse_range(text, info.size_bytes).ok_or_else(|| {
                fail(
                    ErrorKind::BadRequest,
                    format!(
                        "range '{text}' is malformed or outside the object's {} bytes",
                        info.size_bytes
                    ),
                )
            })?)
        }
    };
    let (status, body) = match range {
        None => (StatusCode::OK, bytes::Bytes::from(data)),
        Some((start, end)) => {
            let body = bytes::Bytes::from(data).slice(start as usize..=end as usize);
            (StatusCode::PARTIAL_CONTENT, body)
        }
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    object_headers(headers, &info);
    if let Some((start, end)) = range {
        insert(
            headers,
            header::CONTENT_RANGE.as_str(),
            &format!("bytes {start}-{end}/{}", info.size_bytes),
        );
    }
    Ok(response)
}

/// `bytes=a-b`, `bytes=a-`, `bytes=-n` → inclusive (start, end) within `size`.
fn parse_range(text: &str, size: u64) -> Option<(u64, u64)> {
    let spec = text.trim().strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    if size == 0 {
        return None;
    }
    let (start, end) = match (a.trim(), b.trim()) {
        ("", n) => {
            let n: u64 = n.parse().ok()?;
            (size.saturating_sub(n), size - 1)
        }
        (a, "") => (a.parse().ok()?, size - 1),
        (a, b) => (a.parse().ok()?, b.parse::<u64>().ok()?.min(size - 1)),
    };
    (start <= end && start < size).then_some((start, end))
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
const DISCARD_BYTES_MAX: u64 = 64 << 20;
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

/// A PUT's headers: its version, checksum, PG seed and epoch; refused when the declared
/// length is above `limit` or a header is malformed.
fn put_headers(
    state: &AppState,
    headers: &HeaderMap,
    limit: u64,
) -> Result<(ObjectVersion, Option<u32>, Option<u32>, Epoch), Failure> {
    if let Some(length) = header_u64(headers, header::CONTENT_LENGTH.as_str())?
        && length > limit
    {
        return Err(fail(
            ErrorKind::TooLarge,
            format!("the object is {length} bytes; this server takes at most {limit}"),
        ));
    }
    let version =
        header_u64(headers, wire::VERSION)?.map(ObjectVersion).unwrap_or_else(now_version);
    let checksum = match headers.get(wire::CHECKSUM) {
        None => None,
        Some(value) => {
            Some(value.to_str().ok().and_then(|v| u32::from_str_radix(v, 16).ok()).ok_or_else(
                || fail(ErrorKind::BadRequest, "x-optio-checksum is not 8 hex digits"),
            )?)
        }
    };
    let pg_seed = header_u64(headers, wire::PG)?.map(|pg| pg as u32);
    let epoch = Epoch(header_u64(headers, wire::EPOCH)?.unwrap_or(state.map.epoch()));
    Ok((version, checksum, pg_seed, epoch))
}

async fn put_object(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Failure> {
    state.counters.puts.fetch_add(1, Ordering::Relaxed);
    let limit = state.max_object_bytes;
    let (version, checksum, pg_seed, epoch) = match put_headers(state, headers, limit) {
        Ok(parsed) => parsed,
        Err(failure) => {
            discard(body, headers).await;
            return Err(failure);
        }
    };
    let body = axum::body::to_bytes(body, limit as usize).await.map_err(|e| {
        fail(ErrorKind::TooLarge, format!("the body could not be read within {limit} bytes: {e}"))
    })?;
    let store = target.store.clone();
    let pool = target.pool;
    let key = target.key.clone().expect("routed with a key");
    let outcome = tokio::task::spawn_blocking(move || {
        store.put(&PutRequest { pool, key: &key, data: &body, version, checksum, pg_seed, epoch })
    })
    .await
    .map_err(|e| fail(ErrorKind::Io, format!("write task failed: {e}")))??;
    let mut response = Response::new(Body::empty());
    *response.status_mut() = match outcome {
        crate::store::PutOutcome::Stored => StatusCode::CREATED,
        crate::store::PutOutcome::AlreadyStored => StatusCode::OK,
    };
    insert(response.headers_mut(), wire::VERSION, &version.0.to_string());
    Ok(response)
}

/// A version from this server's clock, for writes that carry none.
fn now_version() -> ObjectVersion {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    ObjectVersion(micros)
}

async fn delete_object(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
) -> Result<Response, Failure> {
    state.counters.deletes.fetch_add(1, Ordering::Relaxed);
    let version = header_u64(headers, wire::VERSION)?.map(ObjectVersion);
    let purge = headers.get(wire::PURGE).is_some_and(|v| v.as_bytes() == b"1");
    let epoch = Epoch(header_u64(headers, wire::EPOCH)?.unwrap_or(state.map.epoch()));
    let store = target.store.clone();
    let pool = target.pool;
    let key = target.key.clone().expect("routed with a key");
    let removed = tokio::task::spawn_blocking(move || {
        if purge {
            store.purge(pool, &key, version)
        } else {
            store
                .delete(pool, &key, version, epoch)
                .map(|outcome| outcome == crate::store::DeleteOutcome::Deleted)
        }
    })
    .await
    .map_err(|e| fail(ErrorKind::Io, format!("delete task failed: {e}")))??;
    if !removed {
        return Err(fail(ErrorKind::NotFound, "no such object"));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn list(state: &AppState, target: &Target, uri: &axum::http::Uri) -> Result<Response, Failure> {
    state.counters.lists.fetch_add(1, Ordering::Relaxed);
    let query: ListQuery = match uri.query() {
        None => ListQuery::default(),
        Some(_) => axum::extract::Query::try_from_uri(uri)
            .map(|q: axum::extract::Query<ListQuery>| q.0)
            .map_err(|e| fail(ErrorKind::BadRequest, format!("bad listing query: {e}")))?,
    };
    let (objects, truncated) = target.store.list(
        target.pool,
        query.prefix.as_deref().unwrap_or(""),
        query.pg,
        query.after.as_deref(),
        query.limit.unwrap_or(LIST_LIMIT_MAX),
    );
    let json = serde_json::to_vec(&Listing { objects, truncated }).expect("listings serialize");
    Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response())
}

fn get_record(state: &AppState, target: &Target) -> Result<Response, Failure> {
    state.counters.records.fetch_add(1, Ordering::Relaxed);
    let key = target.key.as_deref().expect("routed with a key");
    let record = target
        .store
        .record(target.pool, key)
        .ok_or_else(|| fail(ErrorKind::NotFound, "no choice record"))?;
    let mut response = Response::new(Body::empty());
    insert(response.headers_mut(), wire::CHOICE, &wire::choice_header(&record));
    Ok(response)
}

async fn put_record(
    state: &Arc<AppState>,
    target: &Target,
    headers: &HeaderMap,
) -> Result<Response, Failure> {
    state.counters.records.fetch_add(1, Ordering::Relaxed);
    let record: ChoiceRecord = headers
        .get(wire::CHOICE)
        .and_then(|v| v.to_str().ok())
        .and_then(wire::parse_choice_header)
        .ok_or_else(|| {
            fail(ErrorKind::BadRequest, "x-optio-choice must be CANDIDATE/CHOICES/WRITER_HEX")
        })?;
    if record.candidate >= record.choices {
        return Err(fail(
            ErrorKind::BadRequest,
            format!("candidate {} is not below choices {}", record.candidate, record.choices),
        ));
    }
    let replace = match headers.get(wire::REPLACE_IF_WRITER) {
        None => None,
        Some(v) => {
            Some(v.to_str().ok().and_then(|v| u64::from_str_radix(v, 16).ok()).ok_or_else(
                || fail(ErrorKind::BadRequest, "x-optio-replace-if-writer must be hex"),
            )?)
        }
    };
    let key = target.key.clone().expect("routed with a key");
    if target.store.record_log().in_grace() && target.store.record(target.pool, &key).is_none() {
        return Err(fail(
            ErrorKind::Unavailable,
            "this server restarted after a crash and creates no choice record for a moment; retry",
        ));
    }
    let unless_contended = headers.contains_key(wire::UNLESS_CONTENDED);
    let (outcome, _) =
        target.store.create_record(target.pool, &key, record, replace, unless_contended);
    let (status, record) = match outcome {
        RecordOutcome::Created(r) => (StatusCode::CREATED, r),
        RecordOutcome::Exists(r) => (StatusCode::OK, r),
    };
    if status == StatusCode::CREATED && !headers.contains_key(wire::DEFER_SYNC) {
        wait_durable(state, target, &key).await?;
    }
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    insert(headers, wire::CHOICE, &wire::choice_header(&record));
    if status == StatusCode::CREATED {
        insert(headers, wire::CHOICE_CREATED, "1");
    }
    // A record request is also a probe of this device.
    if let Some(info) = target.store.info(target.pool, &key) {
        object_headers(headers, &info);
    }
    Ok(response)
}

/// Waits until the latest change to `key`'s record is committed, committing now if needed.
async fn wait_durable(state: &AppState, target: &Target, key: &str) -> Result<(), Failure> {
    let _ = state;
    let log = target.store.record_log();
    let seq = log.seq_of(target.pool, key);
    if seq == 0 || log.durable_seq() >= seq {
        return Ok(());
    }
    let mut durable = log.watch();
    let store = target.store.clone();
    tokio::task::spawn_blocking(move || store.commit_records())
        .await
        .map_err(|e| fail(ErrorKind::Io, format!("commit task failed: {e}")))?
        .map_err(|e| fail(ErrorKind::Io, format!("the choice record is not durable: {e}")))?;
    durable
        .wait_for(|d| *d >= seq)
        .await
        .map_err(|_| fail(ErrorKind::Io, "the record log closed"))?;
    Ok(())
}

async fn delete_record(state: &AppState, target: &Target) -> Result<Response, Failure> {
    state.counters.records.fetch_add(1, Ordering::Relaxed);
    let key = target.key.clone().expect("routed with a key");
    target.store.delete_record(target.pool, &key)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::parse_range;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Some((0, 9)));
        assert_eq!(parse_range("bytes=90-", 100), Some((90, 99)));
        assert_eq!(parse_range("bytes=-10", 100), Some((90, 99)));
        assert_eq!(parse_range("bytes=50-500", 100), Some((50, 99)));
        assert_eq!(parse_range("bytes=100-", 100), None);
        assert_eq!(parse_range("bytes=9-0", 100), None);
        assert_eq!(parse_range("items=0-1", 100), None);
        assert_eq!(parse_range("bytes=0-0", 0), None);
    }
}
