//! [`MapSource`]: where the map lives — a file or etcd — behind one interface.
//!
//! Every operation means the same on both stores:
//!
//! | operation | file | etcd |
//! |---|---|---|
//! | [`load`](MapSource::load) | read `map.toml` | range `{prefix}/map` |
//! | [`initialize`](MapSource::initialize) | under the lock: write if absent | txn: map key's create revision is 0 → put map and epoch |
//! | [`replace`](MapSource::replace) | under the lock: write | txn: put map and epoch |
//! | [`compare_and_swap`](MapSource::compare_and_swap) | under the lock: read, compare the epoch, write | txn: `{prefix}/epoch` is the expected epoch → put map and epoch |
//! | [`apply`](MapSource::apply) ([`crate::edit`]) | load, apply a `MapChange`, compare-and-swap; a lost race applies it again | the same |
//! | [`watch`](MapSource::watch) | poll the file's inode, mtime and length every 100 ms | the v3 watch stream, re-established after failures |
//! | [`put_status`](MapSource::put_status) | `status/{member}.json` beside the map | `{prefix}/status/{member}` |
//!
//! Writes to the file are atomic (temporary file, fsync, rename, directory fsync); see
//! [`crate::file`] and [`crate::etcd`] for the details of each store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use optio_placement::{ClusterMap, Epoch};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ClusterError;
use crate::codec::{STATUS_BYTES_MAX, validate_member};
use crate::etcd::{EtcdStore, EtcdWatcher};
use crate::file::{FileStamp, FileStore};

/// How often a watcher of a map file looks at it.
pub const FILE_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Where a cluster's map lives.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum MapSource {
    /// A map file (one machine).
    File(FileStore),
    /// An etcd cluster, under a key prefix.
    Etcd(EtcdStore),
}

impl MapSource {
    /// Reads a `--map` argument:
    ///
    /// * `etcd://[USER@]HOST[:PORT][/prefix]`: etcd (port 2379, prefix `/optio` when absent),
    ///   `etcds://…` over TLS (credentials from the environment: see [`crate::etcd`]'s
    ///   `PASSWORD_ENV`, `CA_ENV`…); any other `scheme://` is refused;
    /// * otherwise a path: an existing directory, or one written with a trailing `/`, means
    ///   `DIR/map.toml`; an existing file is the map file; a path that does not exist yet is a
    ///   map file if it ends in `.toml`, else a cluster directory (as `optio up --dir` makes).
    pub fn parse(spec: &str) -> Result<MapSource, ClusterError> {
        let bad = |reason: &str| ClusterError::BadSource {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        if spec.is_empty() {
            return Err(bad(
                "it is empty: give a map file, a cluster directory or etcd://HOST:PORT[/prefix]",
            ));
        }
        if let Some((scheme, _)) = spec.split_once("://") {
            let scheme_text = format!("{scheme}://");
            if scheme_text == crate::etcd::SCHEME || scheme_text == crate::etcd::TLS_SCHEME {
                return EtcdStore::parse(spec).map(MapSource::Etcd);
            }
            return Err(bad(&format!(
                "unsupported scheme `{scheme}://`: use etcd://HOST:PORT[/prefix] for etcd \
                 (etcds:// over TLS), or a map file or cluster directory path"
            )));
        }
        Ok(MapSource::File(file_store(Path::new(spec), spec.ends_with('/'))))
    }

    /// The map file `DIR/map.toml` of a cluster directory.
    pub fn dir(dir: &Path) -> MapSource {
        MapSource::File(FileStore::in_dir(dir))
    }

    /// The map file at `path`.
    pub fn file(path: &Path) -> MapSource {
        MapSource::File(FileStore::new(path))
    }

    /// Where the map is, for messages: the file's path, or `etcd://HOST:PORT/prefix`.
    pub fn describe(&self) -> String {
        match self {
            MapSource::File(store) => store.path().display().to_string(),
            MapSource::Etcd(store) => store.describe(),
        }
    }

    /// The stored map; [`ClusterError::NoMap`] ("no map stored at …; run `optio map
    /// init`/`optio up` first") if there is none.
    pub async fn load(&self) -> Result<ClusterMap, ClusterError> {
        match self {
            MapSource::File(store) => blocking(store, FileStore::load).await,
            MapSource::Etcd(store) => store.load().await,
        }
    }

    /// The stored map, if there is one.
    pub async fn load_if_present(&self) -> Result<Option<ClusterMap>, ClusterError> {
        match self {
            MapSource::File(store) => blocking(store, FileStore::load_if_present).await,
            MapSource::Etcd(store) => store.load_if_present().await,
        }
    }

    /// Stores `map` only if no map is stored; `Ok(false)` (and nothing written) if one was.
    ///
    /// Every map a store stores carries its devices' state epochs (`up_from`, `down_at`)
    /// recorded against the map it replaces ([`ClusterMap::with_state_epochs`]), whoever made
    /// it: servers that skip maps learn from the newest alone which devices were marked down.
    pub async fn initialize(&self, map: &ClusterMap) -> Result<bool, ClusterError> {
        match self {
            MapSource::File(store) => {
                let map = map.clone();
                blocking(store, move |store| store.initialize(&map)).await
            }
            MapSource::Etcd(store) => store.initialize(map).await,
        }
    }

    /// Stores `map` whatever is stored (`optio up` writing the map of the servers it started).
    pub async fn replace(&self, map: &ClusterMap) -> Result<(), ClusterError> {
        match self {
            MapSource::File(store) => {
                let map = map.clone();
                blocking(store, move |store| store.replace(&map)).await
            }
            MapSource::Etcd(store) => store.replace(map).await,
        }
    }

    /// Stores `next` only if the stored map's epoch is still `expected`; otherwise
    /// [`ClusterError::Conflict`] with the epoch found (nothing written), or
    /// [`ClusterError::NoMap`]. `next`'s epoch must be newer than `expected`
    /// ([`ClusterError::Change`] otherwise): watchers skip maps that are not. The devices'
    /// state epochs are recorded against the stored map (a map from
    /// [`ClusterMap::apply`] has them already).
    pub async fn compare_and_swap(
        &self,
        expected: Epoch,
        next: &ClusterMap,
    ) -> Result<(), ClusterError> {
        if next.epoch() <= expected {
            return Err(ClusterError::Change(format!(
                "the new map's epoch {} must be newer than the epoch {} it replaces",
                next.epoch().0,
                expected.0
            )));
        }
        match self {
            MapSource::File(store) => {
                let next = next.clone();
                blocking(store, move |store| store.compare_and_swap(expected, &next)).await
            }
            MapSource::Etcd(store) => store.compare_and_swap(expected, next).await,
        }
    }

    /// A watcher of maps newer than the one stored now (any map, if none is stored yet).
    /// Reads the store once: an unreachable etcd or an unparseable map is an error here.
    ///
    /// To follow a map loaded earlier without missing a change made in between, use
    /// [`MapSource::watch_after`] with its epoch.
    pub async fn watch(&self) -> Result<MapWatcher, ClusterError> {
        let current = self.load_if_present().await?;
        Ok(self.watch_after(current.map(|map| map.epoch())))
    }

    /// A watcher of maps whose epoch is newer than `after` (any map when `None`); its first
    /// [`MapWatcher::next`] returns the stored map at once if it is newer already. Makes no
    /// request.
    pub fn watch_after(&self, after: Option<Epoch>) -> MapWatcher {
        let inner = match self {
            MapSource::File(store) => {
                WatcherKind::File(FileWatcher { store: store.clone(), last: after, stamp: None })
            }
            MapSource::Etcd(store) => WatcherKind::Etcd(Box::new(store.watch_after(after))),
        };
        MapWatcher { inner }
    }

    /// Fences `device` before it is marked down (etcd: see [`crate::etcd`]'s `fence`
    /// module): no server may serve it until the fence is lifted. Returns how long to wait
    /// before marking it down — the revoked lease's TTL — or `None` when nothing needs waiting
    /// for (no lease held it; a map file has no leases).
    pub async fn fence(&self, device: u32, holder: &str) -> Result<Option<Duration>, ClusterError> {
        match self {
            MapSource::File(_) => Ok(None),
            MapSource::Etcd(store) => store.fence(device, holder).await,
        }
    }

    /// Lifts the fence on `device`.
    pub async fn unfence(&self, device: u32) -> Result<(), ClusterError> {
        match self {
            MapSource::File(_) => Ok(()),
            MapSource::Etcd(store) => store.unfence(device).await,
        }
    }

    /// The devices fenced now.
    pub async fn fenced(&self) -> Result<Vec<u32>, ClusterError> {
        match self {
            MapSource::File(_) => Ok(Vec::new()),
            MapSource::Etcd(store) => store.fenced().await,
        }
    }

    /// Replaces `member`'s status document with `status` as JSON.
    pub async fn put_status<T: Serialize>(
        &self,
        member: &str,
        status: &T,
    ) -> Result<(), ClusterError> {
        validate_member(member)?;
        let json = serde_json::to_vec(status).map_err(|e| self.status_error(member, &e))?;
        if json.len() as u64 > STATUS_BYTES_MAX {
            return Err(self.status_error(
                member,
                &format!("{} bytes of JSON, more than the {STATUS_BYTES_MAX} allowed", json.len()),
            ));
        }
        match self {
            MapSource::File(store) => {
                let member = member.to_string();
                blocking(store, move |store| store.put_status(&member, &json)).await
            }
            MapSource::Etcd(store) => store.put_status(member, &json).await,
        }
    }

    /// Every member's status document, by member name.
    pub async fn statuses<T: DeserializeOwned>(&self) -> Result<BTreeMap<String, T>, ClusterError> {
        let raw = match self {
            MapSource::File(store) => blocking(store, FileStore::statuses).await?,
            MapSource::Etcd(store) => store.statuses().await?,
        };
        raw.into_iter()
            .map(|(member, json)| {
                let status =
                    serde_json::from_slice(&json).map_err(|e| self.status_error(&member, &e))?;
                Ok((member, status))
            })
            .collect()
    }

    fn status_error(&self, member: &str, reason: &dyn std::fmt::Display) -> ClusterError {
        ClusterError::Status {
            member: member.to_string(),
            source_name: self.describe(),
            reason: reason.to_string(),
        }
    }
}

/// The file store a path means (see [`MapSource::parse`]).
fn file_store(path: &Path, trailing_slash: bool) -> FileStore {
    let is_dir = match std::fs::metadata(path) {
        Ok(meta) => meta.is_dir(),
        Err(_) => trailing_slash || path.extension().is_none_or(|e| e != "toml"),
    };
    if is_dir { FileStore::in_dir(path) } else { FileStore::new(PathBuf::from(path)) }
}

/// Runs a file store operation on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    store: &FileStore,
    f: impl FnOnce(&FileStore) -> Result<T, ClusterError> + Send + 'static,
) -> Result<T, ClusterError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || f(&store)).await.map_err(ClusterError::Task)?
}

/// Delivers each newer map, epochs strictly increasing (maps whose epoch is not newer than the
/// last delivered are skipped). Made by [`MapSource::watch`] or [`MapSource::watch_after`].
#[derive(Debug)]
pub struct MapWatcher {
    inner: WatcherKind,
}

#[derive(Debug)]
enum WatcherKind {
    File(FileWatcher),
    Etcd(Box<EtcdWatcher>),
}

impl MapWatcher {
    /// The next newer map. Waits as long as it takes: a missing map file, an unreachable etcd
    /// or a broken watch stream are retried (etcd: with a backoff from 100 ms to 2 s, logged as
    /// warnings), never returned. The one error is a stored map that cannot be read or parsed;
    /// the watcher goes on after it (the next call waits for the next change). Cancel-safe:
    /// dropping the future (say, in `tokio::select!` or a timeout) loses no change.
    pub async fn next(&mut self) -> Result<ClusterMap, ClusterError> {
        match &mut self.inner {
            WatcherKind::File(watcher) => watcher.next().await,
            WatcherKind::Etcd(watcher) => watcher.next().await,
        }
    }

    /// The epoch of the last map delivered, or the one the watcher started after.
    pub fn last_epoch(&self) -> Option<Epoch> {
        match &self.inner {
            WatcherKind::File(watcher) => watcher.last,
            WatcherKind::Etcd(watcher) => watcher.last_epoch(),
        }
    }

    /// How many times an etcd watcher re-established its watch after a failure (always 0 for
    /// a file).
    pub fn reconnects(&self) -> u64 {
        match &self.inner {
            WatcherKind::File(_) => 0,
            WatcherKind::Etcd(watcher) => watcher.reconnects(),
        }
    }
}

/// Polls a map file every [`FILE_POLL_INTERVAL`], reading it when its stamp changes.
#[derive(Debug)]
struct FileWatcher {
    store: FileStore,
    last: Option<Epoch>,
    stamp: Option<FileStamp>,
}

impl FileWatcher {
    async fn next(&mut self) -> Result<ClusterMap, ClusterError> {
        loop {
            let seen = self.stamp;
            let polled = blocking(&self.store, move |store| {
                let stamp = store.stamp();
                if stamp.is_none() || stamp == seen {
                    return Ok((stamp, None));
                }
                Ok((stamp, Some(store.load_if_present())))
            })
            .await?;
            if let (stamp, Some(read)) = polled {
                // Remember this version even when it does not parse: it is reported once.
                self.stamp = stamp;
                match read? {
                    Some(map) if self.last.is_none_or(|last| map.epoch() > last) => {
                        self.last = Some(map.epoch());
                        return Ok(map);
                    }
                    Some(map) => tracing::debug!(
                        source = %self.store.path().display(),
                        epoch = map.epoch().0,
                        "skipping a map that is not newer"
                    ),
                    None => {}
                }
            }
            tokio::time::sleep(FILE_POLL_INTERVAL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_mean_a_file_or_a_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let existing = dir.path().display().to_string();
        let expect = |spec: &str, path: PathBuf| {
            assert_eq!(MapSource::parse(spec).expect(spec), MapSource::file(&path), "{spec}");
        };
        expect(&existing, dir.path().join("map.toml"));
        expect(&format!("{existing}/new"), dir.path().join("new/map.toml"));
        expect(&format!("{existing}/new.toml/"), dir.path().join("new.toml/map.toml"));
        expect(&format!("{existing}/cluster.toml"), dir.path().join("cluster.toml"));
        std::fs::write(dir.path().join("plain"), "").expect("write");
        expect(&format!("{existing}/plain"), dir.path().join("plain"));
    }
}
