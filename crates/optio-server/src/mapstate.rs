//! The map as a server knows it: the whole map with its compiled placement (the rebalancer
//! needs it), its epoch and the location of each device. It is followed by the mechanism the
//! clients use too ([`optio_cluster::follow`]): a new map is installed when the map store
//! announces one (polled file or etcd watch) or when a request carries a newer epoch, and is
//! compiled off the async workers.

use std::collections::HashMap;
use std::sync::Arc;

use optio_cluster::follow::{FollowError, Followed, MapFollower};
use optio_cluster::source::MapSource;
use optio_placement::{ClusterMap, MapError, Placement};

/// Why a map could not be compiled for a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerMapError {
    /// The map's placement does not compile (a rule or pool it cannot map with).
    #[error("cannot compile the map's placement: {0}")]
    Placement(#[source] MapError),
}

/// Why a map could not be installed: read, compiled ([`ServerMapError`]) or handed over.
pub type MapInstallError = FollowError<ServerMapError>;

/// A map and its compiled placement.
pub struct ServerMap {
    /// The map.
    pub map: ClusterMap,
    /// Its placement.
    pub placement: Placement,
    /// The location path of each device (`zone=z1/host=z1-h1`).
    locations: HashMap<u32, String>,
    /// See [`ServerMap::downs`].
    downs: HashMap<u32, u64>,
}

impl ServerMap {
    /// Compiles `map`.
    pub fn new(map: ClusterMap) -> Result<ServerMap, ServerMapError> {
        let placement = Placement::new(&map).map_err(ServerMapError::Placement)?;
        let locations = map
            .devices()
            .iter()
            .map(|d| {
                let path: Vec<String> =
                    map.location(d.id).iter().map(|(t, n)| format!("{t}={n}")).collect();
                (d.id.0, path.join("/"))
            })
            .collect();
        let downs = map.devices().iter().filter(|d| !d.up).map(|d| (d.id.0, 1)).collect();
        Ok(ServerMap { map, placement, locations, downs })
    }

    /// How many of the maps this server installed since it started marked `device` down —
    /// or may have: a map installed after a gap in epochs counts the devices that a skipped
    /// map may have marked down, which the new map records
    /// ([`Device::may_have_been_down_since`](optio_placement::Device::may_have_been_down_since)
    /// the epoch installed before: its `up_from` and `down_at`). A map that does not record
    /// them (written before Optio did) counts every device, as any could have been marked
    /// down. The count only grows along the maps a server installs, so a device whose count
    /// changed between two maps looked at was (perhaps) marked down in between, even if the
    /// map that did so was never looked at (the catch-up looks at the newest map only); a
    /// device that no map marked down keeps its count, and serves on.
    pub fn downs(&self, device: u32) -> u64 {
        self.downs.get(&device).copied().unwrap_or(0)
    }

    /// The map's epoch.
    pub fn epoch(&self) -> u64 {
        self.map.epoch().0
    }
}

impl Followed for ServerMap {
    type Error = ServerMapError;

    fn compile(map: ClusterMap, previous: Option<&ServerMap>) -> Result<ServerMap, ServerMapError> {
        let mut compiled = ServerMap::new(map)?;
        if let Some(previous) = previous {
            let skipped = compiled.epoch() > previous.epoch() + 1;
            let seen = previous.map.epoch();
            for device in compiled.map.devices() {
                let unseen_down = skipped && device.up && device.may_have_been_down_since(seen);
                let count = compiled.downs.entry(device.id.0).or_default();
                *count += previous.downs(device.id.0) + u64::from(unseen_down);
            }
        }
        Ok(compiled)
    }

    fn epoch(&self) -> u64 {
        self.map.epoch().0
    }
}

/// The server's view of the map.
#[derive(Debug)]
pub struct MapState {
    follower: Arc<MapFollower<ServerMap>>,
}

impl MapState {
    /// A view of the map kept in `source` (none: epoch 0, no checks, no locations).
    pub fn new(source: Option<MapSource>) -> MapState {
        MapState { follower: Arc::new(MapFollower::new(source)) }
    }

    /// Where the map lives.
    pub fn source(&self) -> Option<&MapSource> {
        self.follower.source()
    }

    /// The epoch held.
    pub fn epoch(&self) -> u64 {
        self.follower.epoch()
    }

    /// Whether epochs are checked (a map is configured).
    pub fn checks_epochs(&self) -> bool {
        self.follower.source().is_some()
    }

    /// The map held, compiled (`None` before the first one).
    pub fn current(&self) -> Option<Arc<ServerMap>> {
        self.follower.current()
    }

    /// Every newer map, as it is installed.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Option<Arc<ServerMap>>> {
        self.follower.subscribe()
    }

    /// The location path of a device (`zone=z1/host=z1-h1`).
    pub fn location(&self, device: u32) -> String {
        self.current().and_then(|m| m.locations.get(&device).cloned()).unwrap_or_default()
    }

    /// Installs `map` if it is newer than the one held (blocking: compiles its placement).
    /// Returns whether the epoch changed; a map whose epoch went backwards is ignored.
    pub fn install(&self, map: ClusterMap) -> Result<bool, MapInstallError> {
        self.follower.install(map)
    }

    /// Installs `map` from a blocking thread (compiling a placement may take a while).
    pub async fn install_async(&self, map: ClusterMap) -> Result<bool, MapInstallError> {
        self.follower.install_async(map).await
    }

    /// Reads the stored map now and installs it if it is newer (a request carried a newer
    /// epoch than the one held). A map not stored yet is not an error (a local cluster
    /// writes it after its servers start).
    pub async fn reload(&self) -> Result<bool, MapInstallError> {
        self.follower.refresh().await
    }

    /// Follows the map store until the process ends: every newer map is installed within the
    /// store's delivery time (a file is polled every 100 ms; etcd pushes changes).
    pub async fn follow(self: Arc<Self>) {
        self.follower.clone().follow().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stored_map_that_does_not_parse_is_a_load_error() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("map.toml");
        std::fs::write(&path, "format_version = \"not a number\"\n").expect("written");
        let state = MapState::new(Some(MapSource::file(&path)));
        let refused = state.reload().await;
        assert!(matches!(refused, Err(FollowError::Load(_))), "{refused:?}");
        assert_eq!(state.epoch(), 0, "nothing installed");
        let text = state.reload().await.expect_err("the same failure again").to_string();
        assert!(text.contains("map.toml"), "{text}");
    }
}
