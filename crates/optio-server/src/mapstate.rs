//! The map as a server knows it: the whole map with its compiled placement (the rebalancer
//! needs it), its epoch and the location of each device. A new map is installed when the map
//! store announces one (polled file or etcd watch) or when a request carries a newer epoch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use optio_cluster::source::MapSource;
use optio_placement::{ClusterMap, Epoch, Placement};

/// A map and its compiled placement.
pub struct ServerMap {
    /// The map.
    pub map: ClusterMap,
    /// Its placement.
    pub placement: Placement,
}

impl ServerMap {
    /// Compiles `map`.
    pub fn new(map: ClusterMap) -> Result<ServerMap, String> {
        let placement =
            Placement::new(&map).map_err(|e| format!("cannot compile the map's placement: {e}"))?;
        Ok(ServerMap { map, placement })
    }

    /// The map's epoch.
    pub fn epoch(&self) -> u64 {
        self.map.epoch().0
    }
}

/// The server's view of the map.
pub struct MapState {
    source: Option<MapSource>,
    epoch: AtomicU64,
    locations: RwLock<HashMap<u32, String>>,
    current: RwLock<Option<Arc<ServerMap>>>,
    changes: tokio::sync::watch::Sender<Option<Arc<ServerMap>>>,
}

impl std::fmt::Debug for MapState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapState")
            .field("source", &self.source.as_ref().map(|s| s.describe()))
            .field("epoch", &self.epoch())
            .finish()
    }
}

impl MapState {
    /// A view of the map kept in `source` (none: epoch 0, no checks, no locations).
    pub fn new(source: Option<MapSource>) -> MapState {
        MapState {
            source,
            epoch: AtomicU64::new(0),
            locations: RwLock::new(HashMap::new()),
            current: RwLock::new(None),
            changes: tokio::sync::watch::channel(None).0,
        }
    }

    /// Where the map lives.
    pub fn source(&self) -> Option<&MapSource> {
        self.source.as_ref()
    }

    /// The epoch held.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Whether epochs are checked (a map is configured).
    pub fn checks_epochs(&self) -> bool {
        self.source.is_some()
    }

    /// The map held, compiled (`None` before the first one).
    pub fn current(&self) -> Option<Arc<ServerMap>> {
        self.current.read().expect("map lock").clone()
    }

    /// Every newer map, as it is installed.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Option<Arc<ServerMap>>> {
        self.changes.subscribe()
    }

    /// The location path of a device (`zone=z1/host=z1-h1`).
    pub fn location(&self, device: u32) -> String {
        self.locations.read().expect("locations lock").get(&device).cloned().unwrap_or_default()
    }

    /// Installs `map` if it is newer than the one held (blocking: compiles its placement).
    /// Returns whether the epoch changed; a map whose epoch went backwards is ignored.
    pub fn install(&self, map: ClusterMap) -> Result<bool, String> {
        let epoch = map.epoch().0;
        let old = self.epoch();
        if epoch < old || (epoch == old && self.current().is_some()) {
            if epoch < old {
                tracing::warn!(epoch, held = old, "ignoring a map whose epoch went backwards");
            }
            return Ok(false);
        }
        let locations = map
            .devices()
            .iter()
            .map(|d| {
                let path: Vec<String> =
                    map.location(d.id).iter().map(|(t, n)| format!("{t}={n}")).collect();
                (d.id.0, path.join("/"))
            })
            .collect();
        let compiled = Arc::new(ServerMap::new(map)?);
        *self.locations.write().expect("locations lock") = locations;
        *self.current.write().expect("map lock") = Some(compiled.clone());
        self.epoch.store(epoch, Ordering::Release);
        self.changes.send_replace(Some(compiled));
        if epoch != old {
            tracing::info!(epoch, previous = old, "map epoch changed");
        }
        Ok(epoch != old)
    }

    /// Installs `map` from a blocking thread (compiling a placement may take a while).
    pub async fn install_async(self: &Arc<Self>, map: ClusterMap) -> Result<bool, String> {
        let state = self.clone();
        tokio::task::spawn_blocking(move || state.install(map))
            .await
            .map_err(|e| format!("installing the map failed: {e}"))?
    }

    /// Reads the stored map now and installs it if it is newer (a request carried a newer
    /// epoch than the one held). A map not stored yet is not an error (a local cluster
    /// writes it after its servers start).
    pub async fn refresh(self: &Arc<Self>) -> Result<bool, String> {
        let Some(source) = &self.source else { return Ok(false) };
        match source.load_if_present().await.map_err(|e| e.report())? {
            Some(map) => self.install_async(map).await,
            None => Ok(false),
        }
    }

    /// Follows the map store until the process ends: every newer map is installed within the
    /// store's delivery time (a file is polled every 100 ms; etcd pushes changes).
    pub async fn follow(self: Arc<Self>) {
        let Some(source) = self.source.clone() else { return };
        let held = self.epoch();
        let mut watcher =
            source.watch_after((held > 0 || self.current().is_some()).then_some(Epoch(held)));
        loop {
            match watcher.next().await {
                Ok(map) => {
                    if let Err(error) = self.install_async(map).await {
                        tracing::warn!(%error, "cannot install the new map");
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "the map store gave a map that cannot be used");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        }
    }
}
