//! `/v1/status` (JSON), `/metrics` (Prometheus text) and `/health`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use optio_proto::{DeviceStatus, ServerStatus};

use super::AppState;

pub(super) async fn health(State(state): State<Arc<AppState>>) -> Response {
    // `epoch` stays last: simple readers (`optio_local::cluster::health_epoch`) parse it so.
    let recovering = state.devices.keys().filter(|id| state.catchup.refuses_reads(**id)).count();
    let body = format!(
        "{{\"status\":\"ok\",\"recovering\":{recovering},\"fenced\":{},\"epoch\":{}}}",
        !state.fence.serving(),
        state.map.epoch()
    );
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
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
    gauge("device_recovering", "1 while the device catches up on missed writes.", &|d| {
        u64::from(d.recovering)
    });
    gauge("device_caught_up", "Versions fetched from peers while catching up.", &|d| d.caught_up);
    gauge("device_scrub_repaired", "Replicas scrubbing repaired since start.", &|d| {
        d.scrub_repaired
    });
    gauge("device_scrub_unrepairable", "Damaged replicas scrubbing could not repair.", &|d| {
        d.scrub_unrepairable
    });
    let _ = writeln!(
        out,
        "# HELP optio_build_info The server's version (the value is always 1).\n\
         # TYPE optio_build_info gauge\noptio_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        out,
        "# HELP optio_fenced 1 while the server holds no fencing lease and serves nothing.\n\
         # TYPE optio_fenced gauge\noptio_fenced {}\n\
         # HELP optio_fence_lapses_total Times the server stopped serving for want of a lease.\n\
         # TYPE optio_fence_lapses_total counter\noptio_fence_lapses_total {}",
        u64::from(status.fenced),
        state.fence.lapses()
    );
    let _ = writeln!(
        out,
        "# HELP optio_auth_refused_total Requests refused by authentication or authorisation.\n\
         # TYPE optio_auth_refused_total counter"
    );
    for (reason, count) in state.auth.refusals() {
        let _ = writeln!(out, "optio_auth_refused_total{{reason=\"{reason}\"}} {count}");
    }
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
