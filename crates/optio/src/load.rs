//! Loading maps from files, with errors that name the file and line.

use std::path::Path;

use anyhow::{Context, Result, bail};
use optio_mapfile::Format;
use optio_placement::ClusterMap;

/// A loaded map and where it came from.
pub struct LoadedMap {
    pub map: ClusterMap,
    pub format: Format,
}

/// Reads and parses a map: a map file in any supported format, or a live cluster's map — a
/// cluster directory (its `map.toml`, or the etcd its `map-source` names) or
/// `etcd://HOST:PORT[/prefix]` (`etcds://` over TLS).
pub fn load_map(path: &Path) -> Result<LoadedMap> {
    let spec = path.to_string_lossy();
    if spec.starts_with("etcd://") || spec.starts_with("etcds://") || path.is_dir() {
        return load_live(path, &spec);
    }
    let metadata = std::fs::metadata(path)
        .with_context(|| format!("cannot read map file '{}'", path.display()))?;
    if metadata.len() > optio_mapfile::MAP_FILE_BYTES_MAX as u64 {
        bail!(
            "map file '{}' has {} bytes; map files are limited to {} bytes",
            path.display(),
            metadata.len(),
            optio_mapfile::MAP_FILE_BYTES_MAX
        );
    }
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read map file '{}'", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "map file '{}' is not UTF-8 text (invalid byte at offset {}); a map is Optio TOML, Ceph text (crushtool -d) or Ceph JSON (crushtool --dump) — a binary crushmap must be decompiled first with `crushtool -d`",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let format = optio_mapfile::detect(&text);
    let map = optio_mapfile::parse_as(&text, format).map_err(|error| {
        let location = match error.line {
            Some(line) => format!("{}:{line}", path.display()),
            None => path.display().to_string(),
        };
        anyhow::anyhow!("{location}: {} (read as {})", error.kind, format.name())
    })?;
    Ok(LoadedMap { map, format })
}

/// A live cluster's map, as its servers and clients see it (Optio TOML where it is stored).
fn load_live(path: &Path, spec: &str) -> Result<LoadedMap> {
    let source = if path.is_dir() {
        optio_cluster::dir::cluster_source(path)
            .with_context(|| format!("cannot find the map of cluster directory '{spec}'"))?
    } else {
        optio_cluster::MapSource::parse(spec)?
    };
    let map = crate::rt::runtime()?
        .block_on(source.load())
        .with_context(|| format!("cannot read the map at {}", source.describe()))?;
    Ok(LoadedMap { map, format: Format::OptioToml })
}
