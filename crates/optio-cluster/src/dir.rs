//! A cluster directory (`--cluster DIR`, what `optio up` makes): where its map and its dirty
//! table live when that is not under the directory itself.

use std::fs;
use std::path::Path;

use crate::{ClusterError, MapSource};

/// The file in a cluster directory that names where its map lives when that is not
/// `DIR/map.toml` (one line: a [`MapSource`] spec such as `etcd://127.0.0.1:2379/optio`).
pub const MAP_SOURCE_FILE: &str = "map-source";

/// The file in a cluster directory that names its dirty table when that is not the local log
/// under the directory (one line: a `redis://` spec).
pub const DIRTY_SOURCE_FILE: &str = "dirty-source";

/// The dirty table spec of the cluster in `dir`: what `DIR/dirty-source` names, else `None`
/// (the local log under `DIR`).
pub fn cluster_dirty_spec(dir: &Path) -> Result<Option<String>, ClusterError> {
    match fs::read_to_string(dir.join(DIRTY_SOURCE_FILE)) {
        Ok(spec) => Ok(Some(spec.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ClusterError::io(format!(
            "cannot read {}",
            dir.join(DIRTY_SOURCE_FILE).display()
        ))(e)),
    }
}

/// Where the map of the cluster in `dir` lives: what `DIR/map-source` names, else
/// `DIR/map.toml`.
pub fn cluster_source(dir: &Path) -> Result<MapSource, ClusterError> {
    match fs::read_to_string(dir.join(MAP_SOURCE_FILE)) {
        Ok(spec) => MapSource::parse(spec.trim()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(MapSource::dir(dir)),
        Err(e) => {
            Err(ClusterError::io(format!("cannot read {}", dir.join(MAP_SOURCE_FILE).display()))(e))
        }
    }
}
