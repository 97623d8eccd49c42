//! The map as a server knows it: its epoch and the location of each device, reloaded when
//! the map file changes (polled) or when a request carries a newer epoch.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::SystemTime;

/// The server's view of the map.
#[derive(Debug)]
pub struct MapState {
    path: Option<PathBuf>,
    epoch: AtomicU64,
    locations: RwLock<HashMap<u32, String>>,
    stamp: Mutex<Option<(SystemTime, u64, u64)>>,
}

impl MapState {
    /// A view of the map file at `path` (none: epoch 0, no checks, no locations).
    pub fn new(path: Option<PathBuf>) -> MapState {
        MapState {
            path,
            epoch: AtomicU64::new(0),
            locations: RwLock::new(HashMap::new()),
            stamp: Mutex::new(None),
        }
    }

    /// The epoch held.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Whether epochs are checked (a map file is configured).
    pub fn checks_epochs(&self) -> bool {
        self.path.is_some()
    }

    /// The location path of a device (`zone=z1/host=z1-h1`).
    pub fn location(&self, device: u32) -> String {
        self.locations.read().expect("locations lock").get(&device).cloned().unwrap_or_default()
    }

    /// Rereads the map file if it changed (blocking). Returns whether the epoch changed. A
    /// missing file is not an error (a local cluster writes it after its servers start); a
    /// map whose epoch went backwards is ignored.
    pub fn reload(&self) -> Result<bool, String> {
        let Some(path) = &self.path else { return Ok(false) };
        let Ok(meta) = std::fs::metadata(path) else { return Ok(false) };
        // The inode too: a map replaced by a rename within the clock's granularity, with the
        // same length, is still a new file.
        use std::os::unix::fs::MetadataExt;
        let stamp = (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len(), meta.ino());
        let mut last = self.stamp.lock().expect("stamp lock");
        if *last == Some(stamp) {
            return Ok(false);
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the map {}: {e}", path.display()))?;
        let map = optio_mapfile::parse(&text)
            .map_err(|e| format!("cannot parse the map {}: {e}", path.display()))?;
        *last = Some(stamp);
        let epoch = map.epoch().0;
        let old = self.epoch();
        if epoch < old {
            tracing::warn!(epoch, held = old, "ignoring a map whose epoch went backwards");
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
        *self.locations.write().expect("locations lock") = locations;
        self.epoch.store(epoch, Ordering::Release);
        if epoch != old {
            tracing::info!(epoch, previous = old, "map epoch changed");
        }
        Ok(epoch != old)
    }
}
