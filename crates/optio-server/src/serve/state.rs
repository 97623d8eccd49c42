//! What every request's handling shares: the devices served here, the map, the background
//! machinery (rebalancing, catch-up, scrubbing, fencing), authentication and telemetry.

use std::collections::HashMap;
use std::sync::Arc;

use optio_placement::Epoch;
use optio_proto::answer::Refusal;
use optio_proto::{DeviceMetrics, ErrorKind};

use crate::mapstate::MapState;
use crate::store::DeviceStore;
use crate::system::SystemMetrics;

use super::admitted::WritesInFlight;
use super::metrics::ServerMetrics;

/// What every handler shares.
pub struct AppState {
    pub(crate) devices: HashMap<u32, Arc<DeviceStore>>,
    pub(crate) map: Arc<MapState>,
    pub(crate) system: Arc<SystemMetrics>,
    pub(crate) max_object_bytes: u64,
    /// Prometheus metrics.
    pub(crate) telemetry: ServerMetrics,
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
    pub(crate) writes: WritesInFlight,
    /// The local socket, as `/v1/status` shows it.
    pub(crate) local_socket: Option<optio_proto::LocalSocket>,
    /// The address the server listens on (`host:port`), a target signed requests may name
    /// besides its devices' addresses in the map.
    pub(crate) listen_addr: Option<String>,
}

impl AppState {
    /// Whether `target` (a signed request's [`optio_proto::wire::TARGET`]) names this
    /// server: the address the map gives one of its devices, or the address it listens on.
    pub(crate) fn is_own_target(&self, target: &str) -> bool {
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

    /// The metrics a device's answers carry (CHOICE's piggybacking).
    pub(crate) fn metrics(&self, store: &DeviceStore) -> DeviceMetrics {
        let used = store.used_bytes();
        let capacity = store.capacity_bytes();
        DeviceMetrics {
            device: store.id(),
            cpu_permille: self.system.cpu_permille(),
            memory_permille: self.system.memory_permille(),
            space_permille: if capacity == 0 {
                1000
            } else {
                u16::try_from((u128::from(used) * 1000 / u128::from(capacity)).min(1000))
                    .unwrap_or(1000)
            },
            used_bytes: used,
            capacity_bytes: capacity,
            latency_us: store.latency_us(),
            unflushed_bytes: store.unflushed_bytes(),
            location: self.map.location(store.id()),
        }
    }

    /// The device `device`, if this server serves it; else `misdirected`.
    pub(crate) fn device(&self, device: u32) -> Result<Arc<DeviceStore>, Refusal> {
        self.devices.get(&device).cloned().ok_or_else(|| {
            let mut served: Vec<u32> = self.devices.keys().copied().collect();
            served.sort_unstable();
            Refusal::new(
                ErrorKind::Misdirected,
                format!("device {device} is not served here (this server serves {served:?})"),
            )
        })
    }

    /// The epoch a request's writes are stamped with: the sender's, or this server's when it
    /// names none.
    pub(crate) fn epoch_of(&self, asked: Option<u64>) -> Epoch {
        Epoch(asked.unwrap_or(self.map.epoch()))
    }

    /// Refuses a request whose epoch is stale, or newer than any map this server can load.
    pub(crate) async fn check_epoch(&self, asked: Option<u64>) -> Result<(), Refusal> {
        let Some(asked) = asked else { return Ok(()) };
        if !self.map.checks_epochs() {
            return Ok(());
        }
        let held = self.map.epoch();
        if asked < held {
            return Err(Refusal::new(
                ErrorKind::StaleEpoch,
                format!("epoch {asked} is stale; the map is at epoch {held}: reload it and retry"),
            ));
        }
        if asked > held {
            if let Err(error) = self.map.reload().await {
                tracing::warn!(%error, "cannot read the map");
            }
            let held = self.map.epoch();
            if asked > held {
                return Err(Refusal::new(
                    ErrorKind::UnknownEpoch,
                    format!("epoch {asked} is unknown here; this server holds epoch {held}"),
                ));
            }
        }
        Ok(())
    }

    /// Commits every device's choice records and marks the shutdown clean.
    pub(crate) async fn close_records(&self) {
        for store in self.devices.values() {
            let store = store.clone();
            if let Ok(Err(error)) = tokio::task::spawn_blocking(move || store.close_records()).await
            {
                tracing::warn!(%error, "closing the choice records failed");
            }
        }
    }

    /// Commits every device's queued choice records (group commit).
    pub(crate) async fn commit_records(&self) {
        for store in self.devices.values() {
            let store = store.clone();
            if let Ok(Err(error)) =
                tokio::task::spawn_blocking(move || store.commit_records()).await
            {
                tracing::warn!(%error, "committing choice records failed");
            }
        }
    }
}
