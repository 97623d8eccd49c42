//! `/v1/status` (JSON), `/metrics` (Prometheus text) and `/health`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use optio_proto::{DeviceStatus, ServerHealth, ServerStatus};

use super::AppState;

pub(super) async fn health(State(state): State<Arc<AppState>>) -> Response {
    let recovering = state.devices.keys().filter(|id| state.catchup.refuses_reads(**id)).count();
    let health = ServerHealth {
        status: "ok".to_string(),
        recovering: u32::try_from(recovering).unwrap_or(u32::MAX),
        fenced: !state.fence.serving(),
        // The first hex digits of the keyring file's hash as loaded (empty with
        // authentication off), so that `optio auth` can wait until every server holds its
        // change.
        keyring: Some(state.auth.keyring_digest()),
        epoch: state.map.epoch(),
    };
    let json = serde_json::to_vec(&health).expect("health serializes");
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

pub(super) fn server_status(state: &AppState) -> ServerStatus {
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
                recovering: state.catchup.refuses_reads(*id),
                caught_up: state.catchup.pulled(*id),
                scrub: state.scrubber.last(*id).0,
                scrub_repaired: state.scrubber.last(*id).1,
                scrub_unrepairable: state.scrubber.last(*id).2,
            }
        })
        .collect();
    ServerStatus {
        epoch: state.map.epoch(),
        devices,
        migration: state.rebalancer.status(),
        fenced: !state.fence.serving(),
        local: state.local_socket.clone(),
    }
}

pub(super) async fn status(State(state): State<Arc<AppState>>) -> Response {
    let json = serde_json::to_vec(&server_status(&state)).expect("status serializes");
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

/// The query of `POST /v1/scrub`.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct ScrubQuery {
    /// Re-read and verify every replica too.
    deep: Option<bool>,
    /// Only this pool.
    pool: Option<u32>,
    /// Bytes read per second at most (default: no limit).
    rate: Option<u64>,
}

/// A scrub pass now, on every device; answers the reports when it is over.
pub(super) async fn scrub(
    State(state): State<Arc<AppState>>,
    axum::extract::Query(query): axum::extract::Query<ScrubQuery>,
) -> Response {
    let pool = query.pool.map(optio_placement::PoolId);
    let reports = state.scrubber.scrub(query.deep.unwrap_or(false), pool, query.rate).await;
    let json = serde_json::to_vec(&reports).expect("reports serialize");
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

pub(super) async fn prometheus(State(state): State<Arc<AppState>>) -> Response {
    let text = state.telemetry.render(&state);
    ([(header::CONTENT_TYPE, optio_net::exposition::CONTENT_TYPE)], text).into_response()
}
