//! Following the map: one mechanism for servers and clients. A [`MapFollower`] holds the
//! newest map of a [`MapSource`] in a compiled form of the caller's choosing ([`Followed`]),
//! installs every newer map as the store delivers it (a file is polled every 100 ms; etcd
//! pushes) or when asked to [`refresh`](MapFollower::refresh), compiles it on a blocking
//! thread (a placement may take a while to compile; the async workers go on serving), ignores
//! a map whose epoch went backwards, and tells subscribers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use optio_placement::{ClusterMap, Epoch};
use tokio::sync::watch;

use crate::ClusterError;
use crate::source::MapSource;

/// What a follower keeps of a map: its compiled form.
pub trait Followed: Send + Sync + Sized + 'static {
    /// Why a map could not be compiled.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Compiles `map`; `previous` is the one held until now (none for the first).
    fn compile(map: ClusterMap, previous: Option<&Self>) -> Result<Self, Self::Error>;

    /// The epoch of the map compiled.
    fn epoch(&self) -> u64;
}

/// Why a map could not be installed: `E` is the compiled form's own error
/// ([`Followed::Error`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FollowError<E: std::error::Error + 'static> {
    /// The map could not be compiled.
    #[error(transparent)]
    Compile(E),
    /// The blocking task compiling it panicked or was cancelled.
    #[error("installing the map failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// The stored map could not be read (the message carries its causes).
    #[error("{}", .0.report())]
    Load(ClusterError),
}

/// The newest map of a store, compiled, followed as the store changes.
pub struct MapFollower<T> {
    source: Option<MapSource>,
    epoch: AtomicU64,
    replaced: AtomicU64,
    current: RwLock<Option<Arc<T>>>,
    changes: watch::Sender<Option<Arc<T>>>,
}

impl<T> std::fmt::Debug for MapFollower<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapFollower")
            .field("source", &self.source.as_ref().map(|s| s.describe()))
            .field("epoch", &self.epoch.load(Ordering::Acquire))
            .finish()
    }
}

impl<T: Followed> MapFollower<T> {
    /// A follower of the map kept in `source` (none: epoch 0 and nothing to follow).
    pub fn new(source: Option<MapSource>) -> MapFollower<T> {
        MapFollower {
            source,
            epoch: AtomicU64::new(0),
            replaced: AtomicU64::new(0),
            current: RwLock::new(None),
            changes: watch::channel(None).0,
        }
    }

    /// Where the map lives.
    pub fn source(&self) -> Option<&MapSource> {
        self.source.as_ref()
    }

    /// The epoch held (0 before the first map).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The map held, compiled (`None` before the first one).
    pub fn current(&self) -> Option<Arc<T>> {
        self.current.read().expect("map lock").clone()
    }

    /// How many times a newer map replaced the one held.
    pub fn replaced(&self) -> u64 {
        self.replaced.load(Ordering::Relaxed)
    }

    /// Every newer map, as it is installed.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<T>>> {
        self.changes.subscribe()
    }

    /// Installs `map` if it is newer than the one held (blocking: compiles it). Returns
    /// whether the epoch changed; a map whose epoch went backwards is ignored.
    pub fn install(&self, map: ClusterMap) -> Result<bool, FollowError<T::Error>> {
        let epoch = map.epoch().0;
        let old = self.epoch();
        let held = self.current();
        if epoch < old || (epoch == old && held.is_some()) {
            if epoch < old {
                tracing::warn!(epoch, held = old, "ignoring a map whose epoch went backwards");
            }
            return Ok(false);
        }
        let compiled = Arc::new(T::compile(map, held.as_deref()).map_err(FollowError::Compile)?);
        {
            let mut current = self.current.write().expect("map lock");
            if current.as_ref().is_some_and(|c| c.epoch() >= epoch) {
                // Another install of this epoch or a newer one won meanwhile.
                return Ok(false);
            }
            *current = Some(compiled.clone());
            self.epoch.store(epoch, Ordering::Release);
        }
        if held.is_some() {
            self.replaced.fetch_add(1, Ordering::Relaxed);
        }
        self.changes.send_replace(Some(compiled));
        if epoch != old {
            tracing::info!(epoch, previous = old, "map epoch changed");
        }
        Ok(epoch != old)
    }

    /// Installs `map` from a blocking thread (compiling a placement may take a while).
    pub async fn install_async(
        self: &Arc<Self>,
        map: ClusterMap,
    ) -> Result<bool, FollowError<T::Error>> {
        let follower = self.clone();
        tokio::task::spawn_blocking(move || follower.install(map))
            .await
            .map_err(FollowError::Task)?
    }

    /// Reads the stored map now and installs it if it is newer (say, a peer carried a newer
    /// epoch than the one held). A map not stored yet is not an error (a local cluster
    /// writes it after its servers start).
    pub async fn refresh(self: &Arc<Self>) -> Result<bool, FollowError<T::Error>> {
        let Some(source) = &self.source else { return Ok(false) };
        match source.load_if_present().await.map_err(FollowError::Load)? {
            Some(map) => self.install_async(map).await,
            None => Ok(false),
        }
    }

    /// Follows the map store until the task is dropped or aborted: every newer map is
    /// installed within the store's delivery time.
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
                // The runtime is shutting down (a command ending): its blocking tasks are
                // cancelled, which is no fault of the map store's.
                Err(crate::ClusterError::Task(join)) if join.is_cancelled() => return,
                Err(error) => {
                    tracing::warn!(%error, "the map store gave a map that cannot be used");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the tests keep of a map: its epoch, and the epoch of the one it replaced.
    struct Kept {
        epoch: u64,
        previous: Option<u64>,
    }

    /// The tests' compile error: an epoch over [`Kept::EPOCH_MAX`].
    #[derive(Debug, PartialEq, Eq, thiserror::Error)]
    #[error("epoch {0} is too new for the tests")]
    struct TooNew(u64);

    impl Kept {
        const EPOCH_MAX: u64 = 100;
    }

    impl Followed for Kept {
        type Error = TooNew;

        fn compile(map: ClusterMap, previous: Option<&Kept>) -> Result<Kept, TooNew> {
            if map.epoch().0 > Kept::EPOCH_MAX {
                return Err(TooNew(map.epoch().0));
            }
            Ok(Kept { epoch: map.epoch().0, previous: previous.map(|p| p.epoch) })
        }

        fn epoch(&self) -> u64 {
            self.epoch
        }
    }

    fn map(epoch: u64) -> ClusterMap {
        let text = format!(
            "format_version = 1\nepoch = {epoch}\n\n[[devices]]\nid = 0\ncapacity = 1073741824\nweight = 1.0\nlocation = {{ host = \"h0\" }}\n"
        );
        optio_mapfile::parse(&text).expect("a map")
    }

    #[test]
    fn newer_maps_replace_older_ones_and_backward_epochs_are_ignored() {
        let follower: MapFollower<Kept> = MapFollower::new(None);
        let mut changes = follower.subscribe();
        assert_eq!((follower.epoch(), follower.replaced()), (0, 0));
        let install = |epoch| follower.install(map(epoch)).expect("installed");
        assert!(install(3));
        assert!(changes.has_changed().unwrap());
        assert_eq!(changes.borrow_and_update().as_ref().map(|k| k.epoch), Some(3));
        assert_eq!(follower.replaced(), 0, "the first map replaces nothing");
        assert!(!install(3), "the same epoch again");
        assert!(!install(2), "an epoch going backwards");
        assert!(!changes.has_changed().unwrap());
        assert!(install(5));
        let held = follower.current().expect("a map");
        assert_eq!((held.epoch, held.previous), (5, Some(3)));
        assert_eq!((follower.epoch(), follower.replaced()), (5, 1));
    }

    #[test]
    fn a_map_that_does_not_compile_is_a_compile_error_and_changes_nothing() {
        let follower: MapFollower<Kept> = MapFollower::new(None);
        follower.install(map(5)).expect("installed");
        let refused = follower.install(map(Kept::EPOCH_MAX + 1));
        assert!(matches!(refused, Err(FollowError::Compile(TooNew(101)))), "{refused:?}");
        assert_eq!(follower.epoch(), 5, "the map held stays");
    }
}
