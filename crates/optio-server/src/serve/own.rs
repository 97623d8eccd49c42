//! The server's own routes: `/health`, `/v1/status`, `/metrics` and `/v1/scrub`, each
//! answering an [`OwnAnswer`].

use optio_proto::own::{OwnAnswer, OwnRequest};
use optio_proto::{DeviceStatus, ServerHealth, ServerStatus};

use super::metrics::Gauges;
use super::state::AppState;

/// Serves a request to one of the server's own routes.
pub(super) async fn serve_own(state: &AppState, request: OwnRequest) -> OwnAnswer {
    match request {
        OwnRequest::Health => OwnAnswer::Health(health(state)),
        OwnRequest::Status => OwnAnswer::Status(Box::new(server_status(state))),
        OwnRequest::Metrics => {
            let gauges = Gauges {
                fence_lapses: state.fence.lapses(),
                auth_refusals: state.auth.refusals(),
                cpu_permille: state.system.cpu_permille(),
                memory_permille: state.system.memory_permille(),
            };
            OwnAnswer::Metrics(state.telemetry.render(&server_status(state), &gauges))
        }
        OwnRequest::Scrub(query) => {
            let pool = query.pool.map(optio_placement::PoolId);
            OwnAnswer::Scrubbed(state.scrubber.scrub(query.deep, pool, query.rate).await)
        }
    }
}

fn health(state: &AppState) -> ServerHealth {
    let recovering = state.devices.keys().filter(|id| state.catchup.refuses_reads(**id)).count();
    ServerHealth {
        status: "ok".to_string(),
        recovering: u32::try_from(recovering).unwrap_or(u32::MAX),
        fenced: !state.fence.serving(),
        // The first hex digits of the keyring file's hash as loaded (empty with
        // authentication off), so that `optio auth` can wait until every server holds its
        // change.
        keyring: Some(state.auth.keyring_digest()),
        epoch: state.map.epoch(),
    }
}

/// The server's status, as `/v1/status` answers it.
pub(super) fn server_status(state: &AppState) -> ServerStatus {
    let mut ids: Vec<u32> = state.devices.keys().copied().collect();
    ids.sort_unstable();
    let devices = ids
        .iter()
        .map(|id| {
            let store = &state.devices[id];
            let (scrub, scrub_repaired, scrub_unrepairable) = state.scrubber.last(*id);
            // The objects and each pool's space, in one pass over the device's index.
            let (objects, pools) = store.pool_space();
            DeviceStatus {
                metrics: state.metrics(store),
                objects,
                records: store.records_held() as u64,
                corrupt_found: store.corrupt_found(),
                recovering: state.catchup.refuses_reads(*id),
                caught_up: state.catchup.pulled(*id),
                scrub,
                scrubbing: state.scrubber.progress(*id),
                scrub_repaired,
                scrub_unrepairable,
                pools,
            }
        })
        .collect();
    ServerStatus {
        epoch: state.map.epoch(),
        devices,
        migration: state.rebalancer.status(),
        fenced: !state.fence.serving(),
        local: state.local_socket.clone(),
        cpu_seconds: crate::system::process_cpu_seconds(),
        syncs: crate::disk::syncs(),
    }
}
