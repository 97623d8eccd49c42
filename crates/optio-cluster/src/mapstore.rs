//! The map in a file, for synchronous callers: read it, replace it atomically, update it to
//! the next epoch. These run on [`crate::file::FileStore`] (same atomic replacement, same
//! lock file); async code, and code that should work with etcd too, uses [`crate::MapSource`].

use std::path::{Path, PathBuf};

use optio_placement::{ClusterMap, ClusterMapBuilder, Epoch};

use crate::ClusterError;
use crate::file::FileStore;

/// The map file of a cluster directory.
pub fn map_path(dir: &Path) -> PathBuf {
    FileStore::in_dir(dir).path().to_path_buf()
}

/// Reads and validates a map file ([`ClusterError::NoMap`] if there is none).
pub fn load(path: &Path) -> Result<ClusterMap, ClusterError> {
    FileStore::new(path).load()
}

/// Writes `map` to `path` as Optio TOML, whatever was there: a temporary file, fsynced,
/// renamed over the old one, the directory fsynced, under the map's lock. Readers see the old
/// map or the new one, never a mix.
pub fn store(path: &Path, map: &ClusterMap) -> Result<(), ClusterError> {
    FileStore::new(path).replace(map)
}

/// Applies `change` to the map at `path` and stores the result with the next epoch; returns
/// the new map. The map's lock is held from the read to the write, so a concurrent editor
/// waits rather than being overwritten.
pub fn update(
    path: &Path,
    change: impl FnOnce(&mut ClusterMapBuilder),
) -> Result<ClusterMap, ClusterError> {
    let store = FileStore::new(path);
    store.locked(|| {
        let map = store.load()?;
        let mut builder = map.to_builder();
        change(&mut builder);
        builder.epoch = Epoch(map.epoch().0 + 1);
        let next = builder.build().map_err(ClusterError::Invalid)?.with_state_epochs(Some(&map));
        store.write_locked(&next)?;
        Ok(next)
    })
}
