//! The map in a file: one machine's map store.
//!
//! * The map is Optio TOML at one path (`DIR/map.toml` for a cluster directory), replaced
//!   atomically: a temporary file beside it, fsynced, renamed over the old one, the directory
//!   fsynced. A reader sees the old map or the new one, never a mix.
//! * Every write that depends on what is stored (create-if-absent, compare-and-swap) and every
//!   unconditional replacement holds an exclusive lock (`flock`) on a lock file beside the map
//!   (`map.toml.lock`) around its read-compare-write, so two editors on one machine cannot both
//!   win. The lock file is never deleted: deleting a lock file lets two processes lock two
//!   different files. Readers take no lock (the rename makes reads safe).
//! * Status documents live in `status/{member}.json` beside the map, each replaced atomically.
//!
//! These functions are synchronous (small files); [`crate::MapSource`] runs them on tokio's
//! blocking pool, and [`crate::mapstore`] offers them to synchronous callers.

use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use optio_placement::{ClusterMap, Epoch};

use crate::codec::{self, STATUS_BYTES_MAX};
use crate::{ClusterError, durable};

/// How long a writer waits for the map's lock before giving up.
pub const LOCK_WAIT_MAX: Duration = Duration::from_secs(10);
/// Pause between two attempts to take the lock.
const LOCK_POLL_INTERVAL: Duration = Duration::from_millis(5);
/// The name of the map file in a cluster directory.
pub const MAP_FILE_NAME: &str = "map.toml";
/// The directory, beside the map file, holding the members' status documents.
pub const STATUS_DIR_NAME: &str = "status";
/// Largest map file read, in bytes (a map of tens of thousands of devices stays far below).
pub const MAP_FILE_BYTES_MAX: u64 = 256 << 20;

/// A map file and what lives beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStore {
    path: PathBuf,
}

/// What identifies one version of a file without reading it: modification time, length,
/// inode. The inode matters: a map replaced by a rename within the clock's granularity, with
/// the same length, is still a new file.
pub type FileStamp = (SystemTime, u64, u64);

impl FileStore {
    /// The map file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> FileStore {
        FileStore { path: path.into() }
    }

    /// The map file of the cluster directory `dir` (`dir/map.toml`).
    pub fn in_dir(dir: &Path) -> FileStore {
        FileStore::new(dir.join(MAP_FILE_NAME))
    }

    /// The map file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lock file beside the map (`map.toml.lock`).
    pub fn lock_path(&self) -> PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".lock");
        self.path.with_file_name(name)
    }

    /// The directory of status documents (`status/` beside the map).
    pub fn status_dir(&self) -> PathBuf {
        self.dir().join(STATUS_DIR_NAME)
    }

    fn dir(&self) -> &Path {
        match self.path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        }
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    /// Reads and validates the map; [`ClusterError::NoMap`] if there is no file.
    pub fn load(&self) -> Result<ClusterMap, ClusterError> {
        self.load_if_present()?.ok_or_else(|| ClusterError::NoMap { source_name: self.describe() })
    }

    /// Reads and validates the map, if there is one.
    pub fn load_if_present(&self) -> Result<Option<ClusterMap>, ClusterError> {
        let Some(text) = read_limited(&self.path, MAP_FILE_BYTES_MAX)? else { return Ok(None) };
        codec::decode_map(&text, &self.describe()).map(Some)
    }

    /// The file's stamp, if it exists.
    pub fn stamp(&self) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(&self.path).ok()?;
        Some((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len(), meta.ino()))
    }

    /// Stores `map` if no map is stored; returns whether it did. The devices' state epochs
    /// it lacks are its own ([`ClusterMap::with_state_epochs`]).
    pub fn initialize(&self, map: &ClusterMap) -> Result<bool, ClusterError> {
        self.locked(|| {
            if self.path.exists() {
                return Ok(false);
            }
            self.write_locked(&map.clone().with_state_epochs(None))?;
            Ok(true)
        })
    }

    /// Stores `map`, whatever is stored, its devices' state epochs recorded against the map
    /// it replaces (if that one can be read).
    pub fn replace(&self, map: &ClusterMap) -> Result<(), ClusterError> {
        self.locked(|| {
            let previous = self.load_if_present().ok().flatten();
            self.write_locked(&map.clone().with_state_epochs(previous.as_ref()))
        })
    }

    /// Stores `next` if the stored map's epoch is `expected`; [`ClusterError::Conflict`] if it
    /// is another, [`ClusterError::NoMap`] if there is none. What the devices' states were
    /// changed by is recorded against the stored map ([`ClusterMap::with_state_epochs`]).
    pub fn compare_and_swap(&self, expected: Epoch, next: &ClusterMap) -> Result<(), ClusterError> {
        self.locked(|| {
            let stored = self.load()?;
            let found = stored.epoch();
            if found != expected {
                return Err(ClusterError::Conflict { expected, found });
            }
            self.write_locked(&next.clone().with_state_epochs(Some(&stored)))
        })
    }

    /// Runs `f` holding the map's exclusive lock (waiting at most [`LOCK_WAIT_MAX`]).
    pub fn locked<T>(
        &self,
        f: impl FnOnce() -> Result<T, ClusterError>,
    ) -> Result<T, ClusterError> {
        let lock_path = self.lock_path();
        let io =
            |e| ClusterError::io(format!("cannot lock the map with {}", lock_path.display()))(e);
        crate::private::create_dir_all(self.dir())
            .map_err(ClusterError::io(format!("cannot create {}", self.dir().display())))?;
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(crate::private::FILE_MODE)
            .open(&lock_path)
            .map_err(io)?;
        let deadline = Instant::now() + LOCK_WAIT_MAX;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(LOCK_POLL_INTERVAL);
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(ClusterError::LockTimeout {
                        lock: lock_path,
                        waited: LOCK_WAIT_MAX,
                    });
                }
                Err(fs::TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        let result = f();
        // Closing the file releases the lock too; unlocking first says so explicitly.
        let _ = file.unlock();
        result
    }

    /// Writes the map atomically, as it is; the caller holds the lock ([`FileStore::locked`])
    /// and records the devices' state epochs ([`ClusterMap::with_state_epochs`]).
    pub fn write_locked(&self, map: &ClusterMap) -> Result<(), ClusterError> {
        // A new map file is its owner's only; one that exists keeps its mode (an operator
        // may have opened it to servers running as another user).
        durable::replace_keeping_mode(&self.path, codec::encode_map(map).as_bytes())
            .map_err(ClusterError::io(format!("cannot write {}", self.path.display())))
    }

    /// The status document of `member` (already validated): `status/{member}.json`.
    pub fn status_path(&self, member: &str) -> PathBuf {
        self.status_dir().join(format!("{member}.json"))
    }

    /// Replaces `member`'s status document with `json`.
    pub fn put_status(&self, member: &str, json: &[u8]) -> Result<(), ClusterError> {
        let dir = self.status_dir();
        crate::private::create_dir_all(&dir)
            .map_err(ClusterError::io(format!("cannot create {}", dir.display())))?;
        let path = self.status_path(member);
        durable::replace_private(&path, json)
            .map_err(ClusterError::io(format!("cannot write {}", path.display())))
    }

    /// Every member's status document, by member name (none when the directory is absent).
    /// Files that are not `*.json` (temporary files of a writer) are ignored.
    pub fn statuses(&self) -> Result<BTreeMap<String, Vec<u8>>, ClusterError> {
        let dir = self.status_dir();
        let io = |e| ClusterError::io(format!("cannot read {}", dir.display()))(e);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(io(e)),
        };
        let mut statuses = BTreeMap::new();
        for entry in entries {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            let Some(member) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if codec::validate_member(member).is_err() {
                continue;
            }
            let path = entry.path();
            // A document removed between the listing and the read is simply not there.
            if let Some(text) = read_limited(&path, STATUS_BYTES_MAX)? {
                statuses.insert(member.to_string(), text.into_bytes());
            }
        }
        Ok(statuses)
    }
}

/// Reads a UTF-8 file of at most `bytes_max` bytes; `None` if it does not exist.
fn read_limited(path: &Path, bytes_max: u64) -> Result<Option<String>, ClusterError> {
    let io = |e| ClusterError::io(format!("cannot read {}", path.display()))(e);
    match fs::metadata(path) {
        Ok(meta) if meta.len() > bytes_max => {
            return Err(ClusterError::TooLarge {
                what: path.display().to_string(),
                bytes: meta.len(),
                limit: bytes_max,
            });
        }
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    }
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_and_status_paths_sit_beside_the_map() {
        let store = FileStore::new("/c/cluster.toml");
        assert_eq!(store.lock_path(), Path::new("/c/cluster.toml.lock"));
        assert_eq!(store.status_path("z1-h1"), Path::new("/c/status/z1-h1.json"));
        let bare = FileStore::new("map.toml");
        assert_eq!(bare.status_dir(), Path::new("./status"));
    }

    #[test]
    fn the_lock_excludes_a_second_holder_until_released() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::in_dir(dir.path());
        store
            .locked(|| {
                let other = fs::File::open(store.lock_path()).expect("open");
                assert!(matches!(other.try_lock(), Err(fs::TryLockError::WouldBlock)));
                Ok(())
            })
            .expect("locked");
        let other = fs::File::open(store.lock_path()).expect("open");
        other.try_lock().expect("free after the holder is done");
    }
}
