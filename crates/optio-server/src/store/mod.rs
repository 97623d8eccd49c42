//! One device: a data directory of durable, checksummed object files and choice records,
//! with their metadata held in memory (CHOICE: "the server always keeps object metadata in
//! memory, so it is fast to check the object existence").
//!
//! Layout under the device directory:
//!
//! * `objects/{pool}/{hh}/{hash}` — one file per object: header, key, data
//!   ([`optio_proto::ObjectHeader`]); `hash` is the key's xxh3-128 in hex and `hh` its first
//!   two digits.
//! * `choices.log` — the choice records of the objects whose home this device is
//!   ([`crate::records`]).
//! * `tmp/` — files being written; emptied at start (a crash leaves only these behind).
//! * `quarantine/` — files that failed verification, kept for inspection.
//!
//! All of it is private to the server's user: directories are created 0700 and files 0600
//! ([`crate::disk`]). A server refuses a device directory that group or others can write, or
//! that another user owns, and tightens one that they can read to 0700 (see
//! [`DeviceStore::open`]).
//!
//! A write goes to `tmp/`, is fsynced, then renamed into place and the directory fsynced, so
//! a partly written object is never visible. Writes to one key are serialized by a striped
//! lock held only around the version check and the rename.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bytes::Bytes;
use optio_net::buffers::BufferPool;
use optio_placement::{Epoch, PoolId};
use optio_proto::summary::{SUMMARY_BYTES, SUMMARY_PREFIX_BYTES, summary_hex, summary_of};
use optio_proto::{
    ChoiceRecord, Deleted, HEADER_BYTES, KEY_BYTES_MAX, Listing, ObjectHeader, ObjectInfo,
    ObjectVersion, PoolSpace,
};

use crate::disk::Disk;
use crate::error::StoreError;
use crate::journal::Journal;
use crate::records::RecordLog;

mod blocks;
mod cow;
mod partials;
mod redirect;
mod redirects;
pub use partials::SnapshotCopy;
mod purge;
mod put;
mod release;
mod writer;
pub use writer::{DeleteOutcome, PutOutcome, SmallDelete, SmallPut, is_small_put};
#[cfg(test)]
mod snap_tests;
mod snapshots;
mod trimmed;
mod watch;
pub use blocks::WriteAt;

/// Lock stripes per device (writes to keys in different stripes never wait on each other).
const STRIPES: usize = 1024;
/// Most objects one listing returns.
pub const LIST_LIMIT_MAX: usize = 10_000;

/// What a device is: its id, directory and configured capacity.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// The device id in the map.
    pub id: u32,
    /// The data directory.
    pub dir: PathBuf,
    /// Bytes the device may hold (object files, headers included).
    pub capacity_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    size_bytes: u64,
    file_bytes: u64,
    version: ObjectVersion,
    checksum: u32,
    pg_seed: Option<u32>,
    epoch: Epoch,
    deleted: bool,
    /// A block object ([`optio_proto::blocks`]): written in place, read by ranges.
    blocks: bool,
    /// The summary at the start of the data ([`optio_proto::summary`]), shown in listings.
    summary: Option<[u8; SUMMARY_BYTES]>,
}

/// One stored object or tombstone, as the rebalancer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// Pool.
    pub pool: PoolId,
    /// Key.
    pub key: String,
    /// Version stored.
    pub version: ObjectVersion,
    /// The candidate's PG seed or engine input, from the header.
    pub pg_seed: Option<u32>,
    /// Bytes of the file (header, key and data).
    pub file_bytes: u64,
    /// A tombstone (deleted at `version`).
    pub deleted: bool,
}

/// A write to store.
#[derive(Clone, Copy, Debug)]
pub struct PutRequest<'a> {
    /// Pool.
    pub pool: PoolId,
    /// Key (validated).
    pub key: &'a str,
    /// Data, in pieces (in order; usually the pieces it arrived in).
    pub data: &'a [&'a [u8]],
    /// Version; a stored newer version wins.
    pub version: ObjectVersion,
    /// crc32c the client computed, checked before storing.
    pub checksum: Option<u32>,
    /// PG seed.
    pub pg_seed: Option<u32>,
    /// Writer's epoch.
    pub epoch: Epoch,
}

/// How a record create ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Created (or replaced by its writer) as asked.
    Created(ChoiceRecord),
    /// Another record was there first; it stays.
    Exists(ChoiceRecord),
}

/// One device's objects and records.
pub struct DeviceStore {
    id: u32,
    root: PathBuf,
    capacity_bytes: u64,
    disk: Arc<dyn Disk>,
    /// Buffers whole-object reads reuse ([`optio_net::buffers`]).
    read_buffers: Arc<BufferPool>,
    /// Reads waiting for a key to change ([`watch`]).
    watchers: Arc<watch::Watchers>,
    index: RwLock<BTreeMap<(PoolId, String), Entry>>,
    records: RecordLog,
    /// Small whole-object writes and tombstones, durable by group commit ([`crate::journal`]).
    journal: Journal,
    stripes: Vec<Mutex<()>>,
    used_bytes: AtomicU64,
    reserved_bytes: AtomicU64,
    unflushed_bytes: AtomicU64,
    latency_ewma_us: AtomicU64,
    temp_counter: AtomicU64,
    known_dirs: Mutex<HashSet<PathBuf>>,
    corrupt_found: AtomicU64,
    /// The erasure-coded pools requests named (their chunks keep earlier versions as clones
    /// under any key, not only volume data: [`snapshots`]).
    erasure_pools: RwLock<Vec<PoolId>>,
    /// Snapshot clones a trim removed (the newest version removed of each), so that a peer's
    /// copy of one is not stored afterwards ([`DeviceStore::refuse_trimmed`]). The last
    /// [`TRIMMED_KEPT`] at least, not kept across a restart: it covers the races of the
    /// moment, not history.
    trimmed: Mutex<trimmed::Trimmed>,
    /// Snapshot clones being filled block by block by their heads' writes ([`cow`]).
    partials: partials::Partials,
    /// How writes in place after a snapshot keep what it sees ([`SnapshotCopy`] as a number).
    copy_mode: std::sync::atomic::AtomicU8,
    /// Heads redirected after a snapshot ([`redirect`]).
    redirects: redirects::Redirects,
    /// The queue of the device's writer of small objects ([`put`]), started at its first.
    writer: writer::WriterQueue,
    /// Large files replaced by smaller ones, closed in the background ([`release`]).
    releaser: release::Releaser,
    /// The device directory's lock ([`LOCK_FILE`]), held while the store is open; the kernel
    /// drops it when the process ends, however it ends.
    _lock: std::fs::File,
}

/// Trimmed clones a store remembers at least, and at most twice as many
/// ([`DeviceStore::refuse_trimmed`]).
const TRIMMED_KEPT: usize = 1 << 15;

/// The lock file in a device directory: one server process per device.
pub const LOCK_FILE: &str = "optio-server.lock";
/// How long opening a device waits for its lock (a store of this process being closed may
/// still hold it for a moment) before saying another server has it.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Takes the device directory's lock, or says who holds it.
fn lock_device(root: &Path) -> Result<std::fs::File, StoreError> {
    use optio_cluster::lockfile::{self, LockError};
    let path = root.join(LOCK_FILE);
    lockfile::hold(&path, LOCK_WAIT).map_err(|error| match error {
        LockError::Held { holder } => StoreError::InUse { dir: root.to_path_buf(), holder },
        LockError::Io(e) => StoreError::io("lock", &path)(e),
    })
}

/// Distinguishes the owner probes of devices opened at once by one process.
static PROBE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Checks the existing device directory `root` before anything in it is read or trusted:
///
/// * refuses it when group or others can write it ([`StoreError::WritableByOthers`]): they
///   could replace or delete objects;
/// * refuses it when another user owns it ([`StoreError::OwnedByOther`]). The server's uid is
///   the owner of a file it creates there for the purpose and removes at once (the crate has
///   no unsafe code to ask the kernel with `geteuid`);
/// * tightens it to 0700, with a warning, when group or others can read or enter it: device
///   directories made before Optio kept its data private are 0755, with 0644 files in them.
///   Only the directory itself is changed; what is in it is out of other users' reach behind
///   it, and the files written from now on are 0600.
fn secure_device_dir(root: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let metadata = std::fs::metadata(root).map_err(StoreError::io("inspect", root))?;
    let mode = metadata.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(StoreError::WritableByOthers { dir: root.to_path_buf(), mode });
    }
    let n = PROBE_COUNTER.fetch_add(1, Ordering::Relaxed);
    let probe = root.join(format!(".owner-probe.{}.{n}", std::process::id()));
    let _ = std::fs::remove_file(&probe);
    let server = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(crate::disk::FILE_MODE)
        .open(&probe)
        .and_then(|file| file.metadata())
        .map(|probed| probed.uid());
    let _ = std::fs::remove_file(&probe);
    let server = server.map_err(StoreError::io("create", &probe))?;
    if metadata.uid() != server {
        return Err(StoreError::OwnedByOther {
            dir: root.to_path_buf(),
            owner: metadata.uid(),
            server,
        });
    }
    if mode & 0o077 != 0 {
        let tightened = mode & !0o077;
        tracing::warn!(
            dir = %root.display(),
            "device directory was {mode:04o}, open to group or others: tightened to {tightened:04o}"
        );
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(tightened))
            .map_err(StoreError::io("chmod", root))?;
    }
    Ok(())
}

fn key_hash(key: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(key.as_bytes())
}

/// The file of object `key` of `pool` under a device directory (for tools and tests that
/// inspect or damage stored files).
pub fn object_path(device_dir: &Path, pool: PoolId, key: &str) -> PathBuf {
    let hash = format!("{:032x}", key_hash(key));
    device_dir.join("objects").join(pool.0.to_string()).join(&hash[..2]).join(hash)
}

impl DeviceStore {
    /// Opens (creating) the device directory: removes what a crash left in `tmp/`, loads
    /// every object's header and every record, quarantining what fails verification.
    ///
    /// A new directory is created 0700. An existing one is refused when group or others can
    /// write it ([`StoreError::WritableByOthers`]) or another user owns it
    /// ([`StoreError::OwnedByOther`]), and tightened to 0700 with a warning when group or
    /// others can read it (as device directories made by earlier versions can).
    pub fn open(config: &DeviceConfig, disk: Arc<dyn Disk>) -> Result<DeviceStore, StoreError> {
        let root = config.dir.clone();
        disk.create_dir_all(&root).map_err(StoreError::io("create", &root))?;
        secure_device_dir(&root)?;
        for sub in ["objects", "tmp", "quarantine"] {
            let dir = root.join(sub);
            disk.create_dir_all(&dir).map_err(StoreError::io("create", &dir))?;
        }
        // Before anything is cleaned up: the temporary files of a server still running there
        // are not leftovers.
        let lock = lock_device(&root)?;
        let tmp = root.join("tmp");
        for leftover in disk.list(&tmp).map_err(StoreError::io("list", &tmp))? {
            disk.remove(&leftover).map_err(StoreError::io("remove", &leftover))?;
        }
        // What the journal holds is written back before the objects are indexed.
        let (journal, _) = Journal::open(&root, Arc::clone(&disk))
            .map_err(StoreError::io("replay the journal of", &root))?;
        let records =
            RecordLog::open(&root, disk.as_ref(), &root.join("tmp").join("choices.log.new"))?;
        let store = DeviceStore {
            id: config.id,
            root,
            capacity_bytes: config.capacity_bytes,
            disk,
            read_buffers: optio_net::buffers::shared().clone(),
            watchers: Arc::default(),
            index: RwLock::new(BTreeMap::new()),
            records,
            journal,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            used_bytes: AtomicU64::new(0),
            reserved_bytes: AtomicU64::new(0),
            unflushed_bytes: AtomicU64::new(0),
            latency_ewma_us: AtomicU64::new(0),
            temp_counter: AtomicU64::new(0),
            known_dirs: Mutex::new(HashSet::new()),
            corrupt_found: AtomicU64::new(0),
            erasure_pools: RwLock::default(),
            trimmed: Mutex::new(trimmed::Trimmed::new(TRIMMED_KEPT)),
            partials: partials::Partials::default(),
            copy_mode: std::sync::atomic::AtomicU8::new(0),
            redirects: redirects::Redirects::default(),
            writer: std::sync::Mutex::new(None),
            releaser: release::Releaser::default(),
            _lock: lock,
        };
        let (marked, redirected) = store.load()?;
        store.load_partials(marked);
        store.load_redirects(redirected);
        Ok(store)
    }

    /// Files under `dir/{pool}/{hh}/`, with their pool.
    fn walk(&self, dir: &Path) -> Result<Vec<(PoolId, PathBuf)>, StoreError> {
        let mut out = Vec::new();
        for pool_dir in self.disk.list(dir).map_err(StoreError::io("list", dir))? {
            let Some(pool) =
                pool_dir.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            for sub in self.disk.list(&pool_dir).map_err(StoreError::io("list", &pool_dir))? {
                for file in self.disk.list(&sub).map_err(StoreError::io("list", &sub))? {
                    out.push((PoolId(pool), file));
                }
            }
        }
        Ok(out)
    }

    /// Indexes the device's files; returns the partial snapshot clones among them ([`cow`])
    /// and the redirected heads with the version of the clone each names ([`redirect`]).
    #[allow(clippy::type_complexity)]
    fn load(
        &self,
    ) -> Result<(Vec<(PoolId, String)>, Vec<(PoolId, String, ObjectVersion)>), StoreError> {
        let mut index = BTreeMap::new();
        let mut used = 0u64;
        let mut marked = Vec::new();
        let mut redirected = Vec::new();
        let prefix_bytes = (HEADER_BYTES + KEY_BYTES_MAX + SUMMARY_PREFIX_BYTES)
            .max(partials::PREFIX_FOR_MARK)
            .max(redirects::PREFIX_FOR_MARK);
        for (pool, path) in self.walk(&self.root.join("objects"))? {
            let prefix = self
                .disk
                .read_prefix(&path, prefix_bytes)
                .map_err(StoreError::io("read", &path))?;
            let file_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            match ObjectHeader::decode_prefix(&prefix) {
                Ok((header, key, data))
                    if header.pool == pool && header.file_bytes(key.len()) == file_bytes =>
                {
                    if header.blocks
                        && self.path_of(pool, key) != path
                        && let Some(indexed) =
                            self.load_misplaced(pool, &path, &prefix, &header, key, &mut index)
                    {
                        used += if indexed { file_bytes } else { 0 };
                        continue;
                    }
                    used += file_bytes;
                    if partials::partial_magic_at(&prefix, key, header.blocks) {
                        marked.push((pool, key.to_string()));
                    }
                    if let Some(clone) = redirects::redirected_to(&prefix, key, header.blocks) {
                        redirected.push((pool, key.to_string(), clone));
                    }
                    let entry =
                        entry_of(&header, file_bytes, prefix.get(data..).unwrap_or_default());
                    index.insert((pool, key.to_string()), entry);
                }
                _ => self.quarantine(&path),
            }
        }
        self.used_bytes.store(used, Ordering::Relaxed);
        *self.index.write().expect("index lock") = index;
        Ok((marked, redirected))
    }

    fn quarantine(&self, path: &Path) {
        self.corrupt_found.fetch_add(1, Ordering::Relaxed);
        let name = path.file_name().map(|n| n.to_owned()).unwrap_or_default();
        let stamp = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let to = self.root.join("quarantine").join(format!("{}.{stamp}", name.to_string_lossy()));
        tracing::warn!(device = self.id, path = %path.display(), "quarantining a corrupt file");
        if self.disk.rename(path, &to).is_err() {
            let _ = self.disk.remove(path);
        }
    }

    fn path_of(&self, pool: PoolId, key: &str) -> PathBuf {
        object_path(&self.root, pool, key)
    }

    /// Makes sure the directory of `path` exists: on the first use of a pool in an area,
    /// all 256 `{hh}` directories are made at once, with one fsync of their parent, so that
    /// no write pays for a directory's creation.
    fn ensure_parent(&self, path: &Path) -> Result<(), StoreError> {
        let dir = path.parent().expect("object paths have parents");
        let pool_dir = dir.parent().expect("object paths have a pool directory");
        let mut known = self.known_dirs.lock().expect("dirs lock");
        if known.contains(pool_dir) {
            return Ok(());
        }
        self.disk.create_dir_all(pool_dir).map_err(StoreError::io("create", pool_dir))?;
        for hh in 0..=255u8 {
            let sub = pool_dir.join(format!("{hh:02x}"));
            self.disk.create_dir(&sub).map_err(StoreError::io("create", &sub))?;
        }
        self.disk.sync(pool_dir).map_err(StoreError::io("sync", pool_dir))?;
        known.insert(pool_dir.to_path_buf());
        Ok(())
    }

    fn temp_path(&self) -> PathBuf {
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        self.root.join("tmp").join(format!("{}.{n}", std::process::id()))
    }

    fn stripe(&self, key: &str) -> MutexGuard<'_, ()> {
        let i = (key_hash(key) as usize) % STRIPES;
        self.stripes[i].lock().expect("stripe lock")
    }

    /// Reserves `bytes` of capacity for a write, or says the device is full.
    fn reserve(&self, bytes: u64) -> Result<Reservation<'_>, StoreError> {
        let reserved = self.reserved_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        let used = self.used_bytes.load(Ordering::Acquire);
        if used + reserved > self.capacity_bytes {
            self.reserved_bytes.fetch_sub(bytes, Ordering::AcqRel);
            return Err(StoreError::Full {
                device: self.id,
                needed_bytes: bytes,
                used_bytes: used,
                capacity_bytes: self.capacity_bytes,
            });
        }
        Ok(Reservation { store: self, bytes })
    }

    fn entry(&self, pool: PoolId, key: &str) -> Option<Entry> {
        self.index.read().expect("index lock").get(&(pool, key.to_string())).copied()
    }

    fn live_entry(&self, pool: PoolId, key: &str) -> Option<Entry> {
        self.entry(pool, key).filter(|e| !e.deleted)
    }

    /// What is stored under `key`, from memory (a probe). Tombstones are not objects.
    pub fn info(&self, pool: PoolId, key: &str) -> Option<ObjectInfo> {
        self.live_entry(pool, key).map(|e| info_of(key, &e))
    }

    /// The version `key` was deleted at, if a tombstone stands for it.
    pub fn tombstone(&self, pool: PoolId, key: &str) -> Option<ObjectVersion> {
        self.entry(pool, key).filter(|e| e.deleted).map(|e| e.version)
    }

    /// Everything stored on this device — objects and tombstones — in (pool, key) order: a
    /// snapshot for the rebalancer.
    pub fn held(&self) -> Vec<Held> {
        let index = self.index.read().expect("index lock");
        index
            .iter()
            .map(|((pool, key), e)| Held {
                pool: *pool,
                key: key.clone(),
                version: e.version,
                pg_seed: e.pg_seed,
                file_bytes: e.file_bytes,
                deleted: e.deleted,
            })
            .collect()
    }

    /// Renames the written `temp` over `path` unless a newer version is stored meanwhile, and
    /// indexes it (the caller holds the key's stripe).
    fn publish(
        &self,
        temp: &Path,
        path: PathBuf,
        pool: PoolId,
        key: &str,
        entry: Entry,
    ) -> Result<(), StoreError> {
        let existing = self.entry(pool, key);
        if let Some(existing) = &existing
            && let Err(error) = check_version(existing, &entry)
        {
            let _ = self.disk.remove(temp);
            return Err(error);
        }
        if let Err(error) = self.journal.forget(&path) {
            let _ = self.disk.remove(temp);
            return Err(StoreError::Io { operation: "journal", path, source: error });
        }
        let replaced = self.hold_if_large(&path, existing.as_ref());
        if let Err(error) = self.disk.publish(temp, &path) {
            let _ = self.disk.remove(temp);
            return Err(StoreError::Io { operation: "rename", path, source: error });
        }
        self.index_published(pool, key, entry);
        if let Some(file) = replaced {
            self.releaser.release(file);
        }
        Ok(())
    }

    /// The file `path` holds, `existing` in the index, open, when it is large enough that
    /// freeing its blocks costs more than the open (the caller is about to replace or remove
    /// it, and hands this to [`release::Releaser`] afterwards); none for a small one, or when
    /// it cannot be opened (the rename or the removal then frees it itself).
    fn hold_if_large(&self, path: &Path, existing: Option<&Entry>) -> Option<std::fs::File> {
        if existing?.file_bytes < release::RELEASE_FROM_BYTES {
            return None;
        }
        self.disk.open_read(path).ok()
    }

    /// Indexes an object just renamed into place, and counts its bytes.
    fn index_published(&self, pool: PoolId, key: &str, entry: Entry) {
        let mut index = self.index.write().expect("index lock");
        let file_bytes = entry.file_bytes;
        let old = index.insert((pool, key.to_string()), entry);
        self.used_bytes.fetch_add(file_bytes, Ordering::AcqRel);
        if let Some(old) = old {
            self.used_bytes.fetch_sub(old.file_bytes, Ordering::AcqRel);
        }
        drop(index);
        self.watchers.changed(pool, key);
    }

    /// Waits until `key` of `pool` is stored at a version above `version`, or is absent (a
    /// tombstone too), or `bound` has passed ([`optio_proto::wire::WAIT_NEWER`]).
    pub async fn wait_newer(
        &self,
        pool: PoolId,
        key: &str,
        version: ObjectVersion,
        bound: std::time::Duration,
    ) {
        let watch = watch::Watchers::watch(&self.watchers, pool, key);
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            // Registered before the look, so that a change between the two is not missed.
            let notified = watch.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.info(pool, key) {
                Some(info) if info.version <= version => {}
                _ => return,
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// Reads and verifies an object (blocking). A replica that fails verification is
    /// quarantined and reported as [`StoreError::Corrupt`].
    pub fn get(&self, pool: PoolId, key: &str) -> Result<(ObjectInfo, Vec<u8>), StoreError> {
        self.get_bytes(pool, key).map(|(info, data)| (info, Vec::from(data)))
    }

    /// [`get`](Self::get), the data where the file was read to (the file's header sliced
    /// off, not moved out of the way: a 4 MiB object is not copied once more to answer it).
    pub fn get_bytes(&self, pool: PoolId, key: &str) -> Result<(ObjectInfo, Bytes), StoreError> {
        self.settle_clone(pool, key)?;
        let Some(entry) = self.live_entry(pool, key) else { return Err(StoreError::NotFound) };
        if entry.blocks {
            // Written in place: read with writes of this key held off, so that no read sees a
            // block whose checksum is being rewritten.
            let _stripe = self.stripe(key);
            // A redirected head is made whole first ([`redirect`]).
            self.complete_redirect(pool, key)?;
            let Some(entry) = self.live_entry(pool, key) else {
                return Err(StoreError::NotFound);
            };
            return self.read_checked(pool, key, &entry);
        }
        match self.read_file(pool, key, false, entry.file_bytes) {
            Ok((info, data)) if info.version == entry.version => Ok((info, data)),
            Ok(_) | Err(StoreError::Mismatch { .. }) => {
                // A write may have replaced the file between the index read and the file
                // read: look again, with writes of this key held off.
                let _stripe = self.stripe(key);
                let Some(entry) = self.live_entry(pool, key) else {
                    return Err(StoreError::NotFound);
                };
                self.read_checked(pool, key, &entry)
            }
            other => other,
        }
    }

    /// Reads the object's file (the caller holds the key's stripe) and checks it holds the
    /// version the index has; a file that does not is quarantined and forgotten, so that the
    /// client repairs this replica from a good one instead of being served an older version.
    fn read_checked(
        &self,
        pool: PoolId,
        key: &str,
        entry: &Entry,
    ) -> Result<(ObjectInfo, Bytes), StoreError> {
        let path = self.path_of(pool, key);
        let reason = match self.read_file(pool, key, true, entry.file_bytes) {
            Ok((info, data)) if info.version == entry.version => return Ok((info, data)),
            Ok((info, _)) => format!(
                "it holds version {} where version {} was stored",
                info.version.0, entry.version.0
            ),
            Err(StoreError::Mismatch { reason, .. }) => reason,
            Err(other) => return Err(other),
        };
        self.forget(pool, key);
        self.quarantine(&path);
        Err(StoreError::Mismatch { path, reason })
    }

    /// The object's file, decoded: its info and data. A file of another key or pool is a
    /// [`StoreError::Mismatch`] (not yet quarantined); an undecodable one is quarantined (read
    /// without the stripe, a [`StoreError::Mismatch`] too: it may be being rewritten), a
    /// missing one forgotten (under the key's stripe, which `locked` says the caller holds).
    /// `file_bytes`: the file's size as the index has it (which buffer to read it into).
    fn read_file(
        &self,
        pool: PoolId,
        key: &str,
        locked: bool,
        file_bytes: u64,
    ) -> Result<(ObjectInfo, Bytes), StoreError> {
        let path = self.path_of(pool, key);
        let mut bytes = self.read_buffers.take(usize::try_from(file_bytes).unwrap_or(usize::MAX));
        match self.disk.read_into(&path, &mut bytes) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // The file went missing behind the server's back: forget it, so probes agree.
                let _stripe = (!locked).then(|| self.stripe(key));
                self.forget(pool, key);
                self.corrupt_found.fetch_add(1, Ordering::Relaxed);
                return Err(StoreError::NotFound);
            }
            Err(e) => return Err(StoreError::Io { operation: "read", path, source: e }),
        };
        match ObjectHeader::decode(&bytes) {
            Ok((header, _, _)) if header.deleted => Err(StoreError::NotFound),
            Ok((header, stored_key, data)) if stored_key == key && header.pool == pool => {
                let file_bytes = bytes.len() as u64;
                let info = info_of(key, &entry_of(&header, file_bytes, data));
                let offset = bytes.len() - data.len();
                Ok((info, BufferPool::bytes(&self.read_buffers, bytes).slice(offset..)))
            }
            Ok((header, stored_key, _)) => Err(StoreError::Mismatch {
                path,
                reason: format!(
                    "it holds key {stored_key:?} of pool {} where key {key:?} of pool {pool} was stored",
                    header.pool
                ),
            }),
            // Without the key's stripe, a file being rewritten in place (a delete's tombstone,
            // a small overwrite) may be read half written: read again under it.
            Err(error) if !locked => Err(StoreError::Mismatch {
                path,
                reason: format!("it did not decode ({error}) while it may have been rewritten"),
            }),
            Err(error) => {
                self.forget(pool, key);
                self.quarantine(&path);
                Err(StoreError::Corrupt { path, error })
            }
        }
    }

    fn forget(&self, pool: PoolId, key: &str) {
        if let Some(old) = self.index.write().expect("index lock").remove(&(pool, key.to_string()))
        {
            self.used_bytes.fetch_sub(old.file_bytes, Ordering::AcqRel);
            self.watchers.changed(pool, key);
        }
        // A head lost takes its partial clone with it ([`cow`]).
        self.drop_partial(pool, key);
        // A head lost leaves its clone; a clone lost takes its redirected head ([`redirect`]).
        self.drop_redirect(pool, key);
    }

    /// Refuses to store `key` at `version` when it is a snapshot clone a trim removed here at
    /// that version or a newer one, as an older version is refused: purged clones leave no
    /// tombstone, so without this a peer's copy stored afterwards would bring it back for
    /// good (the trim is over) — a rebalancing transfer from a device that still held it (a
    /// restarted device the trim went around, sending its copies away on a map that marks it
    /// down; a holder that read its copy just before the trim removed it), a catch-up fetch,
    /// a repair. The caller holds the key's stripe: a trim records its removal before it takes
    /// the stripe to remove the copy, so either this sees the record or the removal comes
    /// after the store and removes what it stored.
    fn refuse_trimmed(
        &self,
        pool: PoolId,
        key: &str,
        version: ObjectVersion,
    ) -> Result<(), StoreError> {
        if self.parse_clone(pool, key).is_none() {
            return Ok(());
        }
        let removed_at = self.trimmed.lock().expect("trimmed lock").removed_at(pool, key);
        match removed_at {
            Some(removed) if removed >= version => {
                Err(StoreError::VersionConflict { stored: removed, offered: version })
            }
            _ => Ok(()),
        }
    }

    /// Takes back a write of `version` that could not complete (see
    /// [`optio_proto::wire::UNDO`]): removes the copy only if it is a live object of exactly
    /// that version — a tombstone, an older or a newer version stays. Whether it was removed.
    pub fn undo(
        &self,
        pool: PoolId,
        key: &str,
        version: ObjectVersion,
    ) -> Result<bool, StoreError> {
        if self.is_erasure(pool) {
            return self.undo_chunk(pool, key, version);
        }
        let _stripe = self.stripe(key);
        let Some(entry) = self.entry(pool, key) else { return Ok(false) };
        if entry.deleted || entry.version != version {
            return Ok(false);
        }
        self.complete_partial(pool, key)?;
        let path = self.path_of(pool, key);
        self.journal.forget(&path).map_err(StoreError::io("journal", &path))?;
        match self.disk.remove(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::Io { operation: "remove", path, source: e }),
        }
        self.forget(pool, key);
        tracing::info!(
            pool = pool.0,
            key,
            version = version.0,
            "undid a write that could not complete"
        );
        Ok(true)
    }

    /// Objects of `pool` in key order, after `after`, with `prefix`, in PG `pg_seed` (and
    /// the tombstones too, with `tombstones`; they count towards `limit`); the gateway's own
    /// keys ([`optio_proto::GATEWAY_PREFIX`]) only with `gateway_state`.
    #[allow(clippy::too_many_arguments)]
    pub fn list(
        &self,
        pool: PoolId,
        prefix: &str,
        pg_seed: Option<u32>,
        after: Option<&str>,
        limit: usize,
        tombstones: bool,
        gateway_state: bool,
    ) -> Listing {
        use std::ops::Bound;
        let index = self.index.read().expect("index lock");
        let start = match after {
            Some(after) => Bound::Excluded((pool, after.to_string())),
            None => Bound::Included((pool, prefix.to_string())),
        };
        let limit = limit.min(LIST_LIMIT_MAX);
        let mut out = Listing { objects: Vec::new(), truncated: false, deleted: Vec::new() };
        for ((p, key), entry) in index.range((start, Bound::Unbounded)) {
            if *p != pool || !key.starts_with(prefix) && key.as_str() > prefix {
                break;
            }
            if entry.deleted && !tombstones
                || !key.starts_with(prefix)
                || pg_seed.is_some_and(|pg| entry.pg_seed != Some(pg))
                || !gateway_state && optio_proto::is_gateway_key(key)
            {
                continue;
            }
            if out.objects.len() + out.deleted.len() == limit {
                out.truncated = true;
                return out;
            }
            if entry.deleted {
                out.deleted.push(Deleted {
                    key: key.clone(),
                    version: entry.version,
                    pg_seed: entry.pg_seed,
                });
            } else {
                out.objects.push(info_of(key, entry));
            }
        }
        out
    }

    /// The choice record of `key`, if this device holds one.
    pub fn record(&self, pool: PoolId, key: &str) -> Option<ChoiceRecord> {
        self.records.get(pool, key)
    }

    /// Creates a choice record if none exists, atomically (only the record's own writer,
    /// named by `replace_if_writer`, may replace it). The record is visible at once and
    /// durable after the next [`commit_records`](Self::commit_records); returns the outcome
    /// and the sequence number that commit must reach.
    pub fn create_record(
        &self,
        pool: PoolId,
        key: &str,
        record: ChoiceRecord,
        replace_if_writer: Option<u64>,
        unless_contended: bool,
    ) -> (RecordOutcome, u64) {
        let (record, created, seq) =
            self.records.create(pool, key, record, replace_if_writer, unless_contended);
        let outcome =
            if created { RecordOutcome::Created(record) } else { RecordOutcome::Exists(record) };
        (outcome, seq)
    }

    /// Every choice record held, in (pool, key) order.
    pub fn records(&self) -> Vec<(PoolId, String, ChoiceRecord)> {
        self.records.all()
    }

    /// Removes a choice record.
    pub fn delete_record(&self, pool: PoolId, key: &str) -> Result<u64, StoreError> {
        self.records.remove(pool, key).ok_or(StoreError::NotFound)
    }

    /// Forgets every choice record (see [`RecordLog::clear`]); returns how many.
    pub fn drop_records(&self) -> usize {
        self.records.clear()
    }

    /// Commits the queued record changes (blocking: one append and one fdatasync).
    pub fn commit_records(&self) -> Result<(), StoreError> {
        self.records.commit(self.disk.as_ref())
    }

    /// Commits the records, checkpoints the journal (nothing to replay at the next start)
    /// and marks the shutdown clean (blocking).
    pub fn close_records(&self) -> Result<(), StoreError> {
        self.journal
            .checkpoint_all()
            .map_err(StoreError::io("checkpoint the journal of", &self.root))?;
        self.records.close(self.disk.as_ref(), &self.temp_path())
    }

    /// The device's journal.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The record log (sequence numbers, waits).
    pub fn record_log(&self) -> &RecordLog {
        &self.records
    }

    /// The device id.
    pub fn id(&self) -> u32 {
        self.id
    }
    /// Bytes used by object files.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }
    /// Configured capacity.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }
    /// Bytes received and not yet durable.
    pub fn unflushed_bytes(&self) -> u64 {
        self.unflushed_bytes.load(Ordering::Relaxed)
    }
    /// Number of objects (tombstones not counted).
    pub fn objects(&self) -> usize {
        self.index.read().expect("index lock").values().filter(|e| !e.deleted).count()
    }
    /// Objects (tombstones not counted) and the bytes of their files, per pool (ascending
    /// pool ids, pools with no object left out), with the total of objects: one pass over the
    /// index, what `/v1/status` reports.
    pub fn pool_space(&self) -> (u64, Vec<PoolSpace>) {
        let index = self.index.read().expect("index lock");
        let mut pools: Vec<PoolSpace> = Vec::new();
        let mut total = 0u64;
        // The index is ordered by pool first: each pool's entries are consecutive.
        for ((pool, _), entry) in index.iter().filter(|(_, e)| !e.deleted) {
            total += 1;
            match pools.last_mut() {
                Some(last) if last.pool == pool.0 => {
                    last.objects += 1;
                    last.bytes = last.bytes.saturating_add(entry.file_bytes);
                }
                _ => pools.push(PoolSpace { pool: pool.0, objects: 1, bytes: entry.file_bytes }),
            }
        }
        (total, pools)
    }
    /// Number of choice records.
    pub fn records_held(&self) -> usize {
        self.records.len()
    }
    /// Corrupt files found (and quarantined) since start.
    pub fn corrupt_found(&self) -> u64 {
        self.corrupt_found.load(Ordering::Relaxed)
    }
    /// Recent service time, EWMA, µs.
    pub fn latency_us(&self) -> u64 {
        self.latency_ewma_us.load(Ordering::Relaxed)
    }
    /// Folds one service time into the EWMA (weight 1/8).
    pub fn record_latency(&self, micros: u64) {
        let _ = self.latency_ewma_us.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some(if old == 0 { micros } else { old - old / 8 + micros / 8 })
        });
    }
}

struct Reservation<'a> {
    store: &'a DeviceStore,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.store.reserved_bytes.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

fn check_version(existing: &Entry, offered: &Entry) -> Result<(), StoreError> {
    // Same version and data: a retry. Same version, other data: the larger checksum wins, so
    // that replicas written in any order converge; a tombstone beats a copy of its version
    // (a delete without a version of its own deletes what is stored).
    let newer = (existing.version, existing.deleted, existing.checksum)
        > (offered.version, offered.deleted, offered.checksum);
    if newer {
        return Err(StoreError::VersionConflict {
            stored: existing.version,
            offered: offered.version,
        });
    }
    Ok(())
}

/// The index entry of an object with this header, whose data begins with `data` (block
/// objects and tombstones have no summary).
/// The first `bytes` bytes (or fewer, if there are not so many) of data in `parts`.
fn prefix_of<'a>(parts: &[&'a [u8]], bytes: usize) -> std::borrow::Cow<'a, [u8]> {
    match parts.first() {
        None => std::borrow::Cow::Borrowed(&[]),
        Some(first) if first.len() >= bytes || parts.len() == 1 => {
            std::borrow::Cow::Borrowed(first)
        }
        Some(_) => {
            let mut prefix = Vec::with_capacity(bytes);
            for part in parts {
                let take = (bytes - prefix.len()).min(part.len());
                prefix.extend_from_slice(&part[..take]);
                if prefix.len() == bytes {
                    break;
                }
            }
            std::borrow::Cow::Owned(prefix)
        }
    }
}

fn entry_of(header: &ObjectHeader, file_bytes: u64, data: &[u8]) -> Entry {
    let plain = !header.blocks && !header.deleted;
    Entry {
        summary: if plain { summary_of(data) } else { None },
        size_bytes: header.size_bytes,
        file_bytes,
        version: header.version,
        checksum: header.checksum,
        pg_seed: header.pg_seed,
        epoch: header.epoch,
        deleted: header.deleted,
        blocks: header.blocks,
    }
}

fn info_of(key: &str, entry: &Entry) -> ObjectInfo {
    ObjectInfo {
        key: key.to_string(),
        size_bytes: entry.size_bytes,
        version: entry.version,
        checksum: entry.checksum,
        pg_seed: entry.pg_seed,
        epoch: entry.epoch.0,
        summary: entry.summary.as_ref().map(summary_hex),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::RealDisk;
    use crate::journal::JOURNAL_OBJECT_MAX;
    use optio_proto::checksum_append;

    fn put(
        store: &DeviceStore,
        key: &str,
        data: &[u8],
        version: u64,
    ) -> Result<PutOutcome, StoreError> {
        store.put(&PutRequest {
            pool: PoolId(1),
            key,
            data: &[data],
            version: ObjectVersion(version),
            checksum: None,
            pg_seed: Some(7),
            epoch: Epoch(1),
        })
    }

    /// A read waiting for a newer version ([`DeviceStore::wait_newer`]) is held while nothing
    /// changes and answered by the write that changes the key (a small, journaled write and a
    /// large one alike) or a delete — not by a write of another key — and is not held at all
    /// when the key is absent or already newer; a wait on nothing new ends at its bound.
    #[tokio::test]
    async fn a_wait_for_a_newer_version_ends_with_the_change_of_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 30 };
        let store = Arc::new(DeviceStore::open(&config, Arc::new(RealDisk)).unwrap());
        let long = std::time::Duration::from_secs(600);
        let pending =
            |wait: &mut std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
                let waker = std::task::Waker::noop();
                wait.as_mut().poll(&mut std::task::Context::from_waker(waker)).is_pending()
            };
        // Absent: at once.
        let mut wait: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
            Box::pin(store.wait_newer(PoolId(1), "h", ObjectVersion(0), long));
        assert!(!pending(&mut wait), "an absent key is answered at once");
        put(&store, "h", b"one", 1).unwrap();
        for (data, version) in [(vec![2u8; 100], 2), (vec![3u8; 300 << 10], 3)] {
            let store2 = store.clone();
            let mut wait: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
                Box::pin(async move {
                    store2.wait_newer(PoolId(1), "h", ObjectVersion(version - 1), long).await
                });
            assert!(pending(&mut wait), "held while nothing changed");
            put(&store, "other", b"x", version).unwrap();
            assert!(pending(&mut wait), "another key's write does not answer it");
            put(&store, "h", &data, version).unwrap();
            tokio::time::timeout(std::time::Duration::from_secs(60), wait)
                .await
                .expect("the write of the key answers the wait");
        }
        let mut newer: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
            Box::pin(store.wait_newer(PoolId(1), "h", ObjectVersion(2), long));
        assert!(!pending(&mut newer), "already newer: at once");
        let store2 = store.clone();
        let mut wait: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> = Box::pin(
            async move { store2.wait_newer(PoolId(1), "h", ObjectVersion(3), long).await },
        );
        assert!(pending(&mut wait));
        store.delete(PoolId(1), "h", None, Epoch(1), Some(7)).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(60), wait)
            .await
            .expect("a delete answers the wait");
        put(&store, "h", b"four", 4).unwrap_or(PutOutcome::Stored);
        // Nothing changes: the bound ends it.
        store
            .wait_newer(PoolId(1), "other", ObjectVersion(9), std::time::Duration::from_millis(20))
            .await;
    }

    /// Data received in pieces (small ones journaled, large ones written whole; a first
    /// piece shorter than a summary's prefix) is stored exactly as when it comes in one:
    /// the same file bytes, checksum, and summary.
    #[test]
    fn data_in_pieces_is_stored_as_data_in_one() {
        use optio_proto::summary::SUMMARY_MAGIC;
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 30 };
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        for size in [0usize, 5, 4096, JOURNAL_OBJECT_MAX as usize + 1, 3 << 20] {
            let mut data = SUMMARY_MAGIC.to_vec();
            data.extend((0..size).map(|i| (i * 7 + size) as u8));
            let whole = format!("whole-{size}");
            put(&store, &whole, &data, 1).unwrap();
            // Pieces of 3, 1, 1000, 65536 bytes… and the rest.
            let mut pieces: Vec<&[u8]> = Vec::new();
            let mut rest = &data[..];
            for len in [3usize, 1, 1000, 65_536].into_iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (piece, tail) = rest.split_at(len.min(rest.len()));
                pieces.push(piece);
                rest = tail;
            }
            let pieced = format!("pieced-{size}");
            let checksum = data.iter().fold(0, |crc, b| checksum_append(crc, &[*b]));
            store
                .put(&PutRequest {
                    pool: PoolId(1),
                    key: &pieced,
                    data: &pieces,
                    version: ObjectVersion(1),
                    checksum: Some(checksum),
                    pg_seed: Some(7),
                    epoch: Epoch(1),
                })
                .expect("the checksum of the pieces is the data's");
            let (a, b) = (store.info(PoolId(1), &whole), store.info(PoolId(1), &pieced));
            let (a, b) = (a.unwrap(), b.unwrap());
            assert_eq!((a.size_bytes, a.checksum), (b.size_bytes, b.checksum), "{size}");
            assert_eq!((a.summary.is_some(), &a.summary), (size >= SUMMARY_BYTES, &b.summary));
            assert_eq!(store.get(PoolId(1), &pieced).unwrap().1, data, "{size}");
        }
        // A wrong checksum of pieces is refused.
        let error = store
            .put(&PutRequest {
                pool: PoolId(1),
                key: "wrong",
                data: &[b"ab", b"c"],
                version: ObjectVersion(1),
                checksum: Some(checksum_append(0, b"abd")),
                pg_seed: Some(7),
                epoch: Epoch(1),
            })
            .unwrap_err();
        assert!(matches!(error, StoreError::ChecksumMismatch { .. }), "{error}");
    }

    #[test]
    fn a_device_directory_is_opened_by_one_store_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 20 };
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        let Err(error) = DeviceStore::open(&config, Arc::new(RealDisk)) else {
            panic!("a second store opened a device directory in use");
        };
        assert!(
            matches!(error, StoreError::InUse { holder: Some(pid), .. } if pid == std::process::id())
        );
        assert!(error.to_string().contains("in use by another optio server"), "{error}");
        drop(store);
        DeviceStore::open(&config, Arc::new(RealDisk)).expect("free once the first is closed");
    }

    #[test]
    fn summaries_are_listed_rebuilt_at_start_and_dropped_by_overwrites_and_deletes() {
        use optio_proto::summary::SUMMARY_MAGIC;
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 20 };
        let mut data = SUMMARY_MAGIC.to_vec();
        data.extend([0xabu8; SUMMARY_BYTES]);
        data.extend_from_slice(b"the object");
        let listed = |store: &DeviceStore| -> Vec<Option<String>> {
            store
                .list(PoolId(1), "", None, None, 10, false, true)
                .objects
                .into_iter()
                .map(|o| o.summary)
                .collect()
        };
        {
            let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
            put(&store, "a", &data, 1).unwrap();
            put(&store, "b", b"no summary here", 1).unwrap();
            assert_eq!(listed(&store), vec![Some("ab".repeat(SUMMARY_BYTES)), None]);
            assert_eq!(store.get(PoolId(1), "a").unwrap().0.summary, Some("ab".repeat(32)));
        }
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        assert_eq!(listed(&store), vec![Some("ab".repeat(SUMMARY_BYTES)), None], "rebuilt");
        put(&store, "a", b"plain now", 2).unwrap();
        put(&store, "b", &data, 2).unwrap();
        assert_eq!(listed(&store), vec![None, Some("ab".repeat(SUMMARY_BYTES))]);
        store.delete(PoolId(1), "b", Some(ObjectVersion(3)), Epoch(1), None).unwrap();
        let with_tombstones = store.list(PoolId(1), "", None, None, 10, true, true);
        assert_eq!(with_tombstones.deleted.len(), 1);
    }

    /// The permission bits of `path`.
    fn mode_of(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// Every directory and file under `dir`, `dir` included.
    fn tree(dir: &Path) -> Vec<PathBuf> {
        let mut out = vec![dir.to_path_buf()];
        let mut i = 0;
        while i < out.len() {
            if out[i].is_dir() {
                let entries = std::fs::read_dir(&out[i]).unwrap();
                out.extend(entries.map(|e| e.unwrap().path()));
            }
            i += 1;
        }
        out
    }

    #[test]
    fn a_new_device_directory_and_everything_written_in_it_are_private() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("dev0");
        let config = DeviceConfig { id: 0, dir: dir.clone(), capacity_bytes: 1 << 20 };
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        put(&store, "object", b"data", 1).unwrap();
        store.delete(PoolId(1), "gone", Some(ObjectVersion(2)), Epoch(1), Some(7)).unwrap();
        let record = ChoiceRecord { candidate: 1, choices: 2, writer: 9 };
        store.create_record(PoolId(1), "object", record, None, false);
        store.commit_records().unwrap();
        store.close_records().unwrap(); // the clean-shutdown marker
        assert_eq!(mode_of(&dir), 0o700);
        assert_eq!(mode_of(&object_path(&dir, PoolId(1), "object")), 0o600);
        assert_eq!(mode_of(&object_path(&dir, PoolId(1), "gone")), 0o600, "tombstone");
        assert_eq!(mode_of(&dir.join("choices.log")), 0o600);
        let entries = tree(&dir);
        assert!(entries.len() > 256 + 6, "{} entries", entries.len());
        for path in entries {
            let want = if path.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(mode_of(&path), want, "{} is {:04o}", path.display(), mode_of(&path));
            let name = path.file_name().unwrap().to_string_lossy();
            assert!(!name.starts_with(".owner-probe"), "probe left behind: {}", path.display());
        }
    }

    #[test]
    fn a_device_directory_group_or_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        for mode in [0o777, 0o770, 0o702] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let config =
                DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 20 };
            let Err(error) = DeviceStore::open(&config, Arc::new(RealDisk)) else {
                panic!("a {mode:04o} device directory was opened");
            };
            assert!(matches!(error, StoreError::WritableByOthers { mode: m, .. } if m == mode));
            let message = error.to_string();
            assert!(message.contains(&dir.path().display().to_string()), "{message}");
            assert!(message.contains(&format!("{mode:04o}")), "{message}");
            assert!(message.contains("chmod 700"), "{message}");
            // Refused before anything was written there, and left as it was.
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
            assert_eq!(mode_of(dir.path()), mode);
        }
    }

    #[test]
    fn a_readable_device_directory_of_an_older_version_is_tightened_to_0700() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 20 };
        drop(DeviceStore::open(&config, Arc::new(RealDisk)).unwrap());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        assert_eq!(mode_of(dir.path()), 0o700);
        put(&store, "k", b"v", 1).unwrap();
        assert_eq!(store.get(PoolId(1), "k").unwrap().1, b"v");
    }

    #[test]
    fn a_device_directory_another_user_owns_is_refused() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let me = std::fs::metadata(dir.path()).unwrap().uid();
        let other = if me == 54_321 { 54_322 } else { 54_321 };
        if std::os::unix::fs::chown(dir.path(), Some(other), None).is_err() {
            eprintln!("skipped: only root can give a directory to another user");
            return;
        }
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 20 };
        let Err(error) = DeviceStore::open(&config, Arc::new(RealDisk)) else {
            panic!("a device directory of uid {other} was opened by uid {me}");
        };
        assert!(
            matches!(error, StoreError::OwnedByOther { owner, server, .. } if owner == other && server == me),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains(&dir.path().display().to_string()), "{message}");
        assert!(message.contains("chown"), "{message}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing left behind");
    }

    #[test]
    fn small_writes_and_deletes_lost_in_a_crash_are_written_back_from_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 24 };
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        put(&store, "small", b"one", 10).unwrap();
        put(&store, "small", b"two", 11).unwrap();
        put(&store, "purged", b"p", 10).unwrap();
        put(&store, "deleted", b"d", 10).unwrap();
        let large = vec![5u8; (JOURNAL_OBJECT_MAX + 1) as usize];
        put(&store, "large", &large, 10).unwrap();
        assert!(store.purge(PoolId(1), "purged", None).unwrap());
        store.delete(PoolId(1), "deleted", Some(ObjectVersion(12)), Epoch(1), None).unwrap();
        assert_eq!(store.journal().pending(), 2, "the small object and the tombstone");
        // A crash (no clean shutdown) where the files' writeback was lost: what the
        // journal holds was acknowledged and comes back; the purge stays.
        drop(store);
        std::fs::write(object_path(dir.path(), PoolId(1), "small"), b"").unwrap();
        std::fs::remove_file(object_path(dir.path(), PoolId(1), "deleted")).unwrap();
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        assert_eq!(store.get(PoolId(1), "small").unwrap().1, b"two");
        assert_eq!(store.tombstone(PoolId(1), "deleted"), Some(ObjectVersion(12)));
        assert!(store.entry(PoolId(1), "purged").is_none(), "a purged object stays purged");
        assert_eq!(store.get(PoolId(1), "large").unwrap().1, large, "synced on its own");
        assert_eq!(store.corrupt_found(), 0);
        // A clean shutdown checkpoints: nothing is written back at the next start.
        store.close_records().unwrap();
        drop(store);
        std::fs::remove_file(object_path(dir.path(), PoolId(1), "small")).unwrap();
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        assert!(store.entry(PoolId(1), "small").is_none());
    }

    /// A delete's tombstone and a small overwrite no larger than the file are written over
    /// the file's content (same inode, cut to its new length); a larger one replaces the
    /// file; what is written reads back, and the tombstone survives a restart.
    #[test]
    fn a_tombstone_and_a_smaller_overwrite_rewrite_the_file_in_place() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 24 };
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        let inode = |key: &str| {
            let meta = std::fs::metadata(object_path(dir.path(), PoolId(1), key)).unwrap();
            (meta.ino(), meta.len())
        };
        put(&store, "gone", &[1u8; 4096], 10).unwrap();
        let (before, _) = inode("gone");
        store.delete(PoolId(1), "gone", Some(ObjectVersion(11)), Epoch(1), None).unwrap();
        let tombstone_bytes = store.entry(PoolId(1), "gone").unwrap().file_bytes;
        assert_eq!(inode("gone"), (before, tombstone_bytes), "the tombstone written in place");
        assert!(matches!(store.get(PoolId(1), "gone"), Err(StoreError::NotFound)));

        put(&store, "k", &[2u8; 4096], 10).unwrap();
        let (before, _) = inode("k");
        put(&store, "k", &[3u8; 1000], 11).unwrap();
        assert_eq!(inode("k").0, before, "a smaller overwrite in place");
        assert_eq!(store.get(PoolId(1), "k").unwrap().1, vec![3u8; 1000]);
        put(&store, "k", &[4u8; 8192], 12).unwrap();
        assert_ne!(inode("k").0, before, "a larger one replaces the file");
        assert_eq!(store.get(PoolId(1), "k").unwrap().1, vec![4u8; 8192]);
        assert_eq!(store.corrupt_found(), 0);
        drop(store);
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        assert_eq!(store.tombstone(PoolId(1), "gone"), Some(ObjectVersion(11)));
        assert_eq!(store.get(PoolId(1), "k").unwrap().1, vec![4u8; 8192]);
        assert_eq!(store.corrupt_found(), 0);
    }

    /// A file of 64 KiB or more that a smaller one replaces (a tombstone over a 1 MiB
    /// object, 1 KiB written over 100 KiB) is not cut down in place but replaced by a rename,
    /// and its inode, held open meanwhile, is closed by the device's releasing thread (so the
    /// blocks are freed there, not in the writer's thread); a large object renamed over
    /// another releases the old one too. What is written reads back, and survives a restart.
    #[test]
    fn a_large_file_replaced_by_a_small_one_is_renamed_over_and_released() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 26 };
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        let inode =
            |key: &str| std::fs::metadata(object_path(dir.path(), PoolId(1), key)).unwrap().ino();
        let released = release::tests::wait_until_closed;
        put(&store, "big", &vec![1u8; 1 << 20], 10).unwrap();
        let before = inode("big");
        store.delete(PoolId(1), "big", Some(ObjectVersion(11)), Epoch(1), None).unwrap();
        assert_ne!(inode("big"), before, "the tombstone renamed over the large file");
        released(before);
        assert!(matches!(store.get(PoolId(1), "big"), Err(StoreError::NotFound)));

        put(&store, "shrinks", &vec![2u8; 100 << 10], 10).unwrap();
        let before = inode("shrinks");
        put(&store, "shrinks", &[3u8; 1024], 11).unwrap();
        assert_ne!(inode("shrinks"), before, "1 KiB renamed over 100 KiB");
        released(before);
        assert_eq!(store.get(PoolId(1), "shrinks").unwrap().1, vec![3u8; 1024]);

        put(&store, "large", &vec![4u8; 1 << 20], 10).unwrap();
        let before = inode("large");
        put(&store, "large", &vec![5u8; 2 << 20], 11).unwrap();
        released(before);
        assert_eq!(store.get(PoolId(1), "large").unwrap().1, vec![5u8; 2 << 20]);
        assert_eq!(store.corrupt_found(), 0);
        drop(store);
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        assert_eq!(store.tombstone(PoolId(1), "big"), Some(ObjectVersion(11)));
        assert_eq!(store.get(PoolId(1), "shrinks").unwrap().1, vec![3u8; 1024]);
        assert_eq!(store.get(PoolId(1), "large").unwrap().1, vec![5u8; 2 << 20]);
        assert_eq!(store.corrupt_found(), 0);
    }

    /// Readers that race rewrites in place (overwrites of one size, deletes, writes again)
    /// see a whole version or nothing, and never take a file being rewritten for a damaged
    /// one: nothing is quarantined.
    #[test]
    fn reads_racing_rewrites_in_place_see_whole_versions_and_quarantine_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 26 };
        let store = Arc::new(DeviceStore::open(&config, Arc::new(RealDisk)).unwrap());
        let data = |version: u64| vec![(version % 251) as u8; 3000];
        put(&store, "k", &data(1), 1).unwrap();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (store, done) = (store.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        match store.get(PoolId(1), "k") {
                            Ok((info, bytes)) => assert_eq!(bytes, data(info.version.0)),
                            Err(StoreError::NotFound) => {}
                            Err(other) => panic!("a read racing a rewrite: {other}"),
                        }
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for version in 2..3000u64 {
            if version % 3 == 0 {
                store.delete(PoolId(1), "k", Some(ObjectVersion(version)), Epoch(1), None).unwrap();
            } else {
                put(&store, "k", &data(version), version).unwrap();
            }
        }
        done.store(true, Ordering::Relaxed);
        let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(reads > 0);
        assert_eq!(store.corrupt_found(), 0, "a file being rewritten was taken for damage");
    }

    #[test]
    fn a_small_write_whose_journal_sync_fails_is_refused_and_not_visible() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 20 };
        let disk = Arc::new(crate::disk::FaultyDisk::new());
        let store = DeviceStore::open(&config, disk.clone()).unwrap();
        put(&store, "k", b"one", 10).unwrap();
        disk.set_fault(Some(crate::disk::Fault::SyncError));
        let error = put(&store, "k", b"two", 11).unwrap_err();
        assert!(error.to_string().contains("journal"), "{error}");
        assert_eq!(store.get(PoolId(1), "k").unwrap().1, b"one", "the refused write is not seen");
        assert!(put(&store, "other", b"x", 1).is_err(), "the device takes no more small writes");
    }

    /// Puts in two pools and a delete: each pool's objects and the bytes of their files, the
    /// deleted object (its tombstone) in neither, and the total the sum of the pools'.
    #[test]
    fn the_space_per_pool_counts_each_pools_live_objects_and_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 30 };
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        let put_in = |pool: u32, key: &str, len: usize| {
            store
                .put(&PutRequest {
                    pool: PoolId(pool),
                    key,
                    data: &[&vec![7u8; len]],
                    version: ObjectVersion(10),
                    checksum: None,
                    pg_seed: Some(1),
                    epoch: Epoch(1),
                })
                .unwrap();
        };
        put_in(1, "a", 100);
        put_in(1, "b", 200_000);
        put_in(4, "a", 10);
        put_in(4, "c", 3000);
        put_in(4, "d", 50);
        let file_bytes = |pool: u32, key: &str| store.entry(PoolId(pool), key).unwrap().file_bytes;
        let bytes_1 = file_bytes(1, "a") + file_bytes(1, "b");
        assert!(bytes_1 > 200_100, "headers included: {bytes_1}");
        let (total, pools) = store.pool_space();
        assert_eq!(total, 5);
        assert_eq!(pools.len(), 2, "{pools:?}");
        assert_eq!(pools[0], PoolSpace { pool: 1, objects: 2, bytes: bytes_1 });
        let bytes_4 = file_bytes(4, "a") + file_bytes(4, "c") + file_bytes(4, "d");
        assert_eq!(pools[1], PoolSpace { pool: 4, objects: 3, bytes: bytes_4 });
        assert_eq!(store.used_bytes(), bytes_1 + bytes_4, "the device's own count agrees");
        let deleted = file_bytes(4, "c");
        store.delete(PoolId(4), "c", Some(ObjectVersion(20)), Epoch(1), None).unwrap();
        let (total, pools) = store.pool_space();
        assert_eq!(total, 4);
        assert_eq!(total, store.objects() as u64);
        assert_eq!(pools[0], PoolSpace { pool: 1, objects: 2, bytes: bytes_1 });
        assert_eq!(pools[1], PoolSpace { pool: 4, objects: 2, bytes: bytes_4 - deleted });
        // Every object of a pool gone: the pool is left out.
        store.delete(PoolId(1), "a", Some(ObjectVersion(20)), Epoch(1), None).unwrap();
        store.delete(PoolId(1), "b", Some(ObjectVersion(20)), Epoch(1), None).unwrap();
        let (total, pools) = store.pool_space();
        assert_eq!((total, pools.len(), pools[0].pool), (2, 1, 4));
    }

    #[test]
    fn a_delete_leaves_a_tombstone_that_older_copies_cannot_pass() {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig { id: 0, dir: dir.path().to_path_buf(), capacity_bytes: 1 << 20 };
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        put(&store, "k", b"one", 10).unwrap();
        assert_eq!(
            store.delete(PoolId(1), "k", Some(ObjectVersion(20)), Epoch(1), None).unwrap(),
            DeleteOutcome::Deleted
        );
        assert!(store.info(PoolId(1), "k").is_none());
        assert_eq!(store.tombstone(PoolId(1), "k"), Some(ObjectVersion(20)));
        assert!(matches!(store.get(PoolId(1), "k"), Err(StoreError::NotFound)));
        // A migration bringing the older copy back is refused; a newer write wins.
        assert!(matches!(put(&store, "k", b"one", 10), Err(StoreError::VersionConflict { .. })));
        assert_eq!(store.objects(), 0);
        assert_eq!(store.pool_space(), (0, vec![]), "a tombstone takes no space in the count");
        assert!(store.list(PoolId(1), "", None, None, 10, false, true).objects.is_empty());
        // A tombstone is recorded even where nothing was stored, and survives a restart.
        store.delete(PoolId(1), "never", Some(ObjectVersion(5)), Epoch(1), Some(7)).unwrap();
        drop(store);
        let store = DeviceStore::open(&config, Arc::new(RealDisk)).unwrap();
        assert_eq!(store.tombstone(PoolId(1), "never"), Some(ObjectVersion(5)));
        let held = store.held();
        assert!(held.iter().all(|h| h.deleted) && held.len() == 2, "{held:?}");
        // The seed the deleter sent is kept with a tombstone for a key never held here.
        let never = held.iter().find(|h| h.key == "never").unwrap();
        assert_eq!(never.pg_seed, Some(7));
        put(&store, "k", b"two", 30).unwrap();
        assert_eq!(store.get(PoolId(1), "k").unwrap().1, b"two");
        // A delete without a version removes what is stored, at its version.
        store.delete(PoolId(1), "k", None, Epoch(1), None).unwrap();
        assert_eq!(store.tombstone(PoolId(1), "k"), Some(ObjectVersion(30)));
        // Purge removes the tombstone itself, unless something newer is stored.
        assert!(matches!(
            store.purge(PoolId(1), "k", Some(ObjectVersion(29))),
            Err(StoreError::VersionConflict { .. })
        ));
        assert!(store.purge(PoolId(1), "k", Some(ObjectVersion(30))).unwrap());
        assert!(store.tombstone(PoolId(1), "k").is_none());
        assert!(!store.purge(PoolId(1), "k", None).unwrap());
    }
}
