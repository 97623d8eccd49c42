//! The map in a file: read it, and replace it atomically with a newer epoch.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use optio_placement::{ClusterMap, ClusterMapBuilder, Epoch};

use crate::ClusterError;

/// The map file of a cluster directory.
pub fn map_path(dir: &Path) -> PathBuf {
    dir.join("map.toml")
}

/// Reads and validates a map file.
pub fn load(path: &Path) -> Result<ClusterMap, ClusterError> {
    let text = fs::read_to_string(path)
        .map_err(|e| ClusterError::Map(format!("cannot read {}: {e}", path.display())))?;
    optio_mapfile::parse(&text)
        .map_err(|e| ClusterError::Map(format!("cannot parse {}: {e}", path.display())))
}

/// Writes `map` to `path` as Optio TOML: a temporary file, fsynced, renamed over the old one,
/// the directory fsynced. Readers see the old map or the new one, never a mix.
pub fn store(path: &Path, map: &ClusterMap) -> Result<(), ClusterError> {
    let io = |e: std::io::Error| ClusterError::Map(format!("cannot write {}: {e}", path.display()));
    let text = optio_mapfile::optio_toml::write(map);
    let temp = path.with_extension(format!("toml.tmp.{}", std::process::id()));
    let mut file = fs::File::create(&temp).map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    fs::rename(&temp, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(())
}

/// Applies `change` to the map at `path` and stores the result with the next epoch; returns
/// the new map.
pub fn update(
    path: &Path,
    change: impl FnOnce(&mut ClusterMapBuilder),
) -> Result<ClusterMap, ClusterError> {
    let map = load(path)?;
    let mut builder = map.to_builder();
    change(&mut builder);
    builder.epoch = Epoch(map.epoch().0 + 1);
    let next = builder.build().map_err(|e| ClusterError::Map(format!("invalid change: {e}")))?;
    store(path, &next)?;
    Ok(next)
}
