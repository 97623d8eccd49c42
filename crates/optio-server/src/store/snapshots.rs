//! Copy-on-write for volume snapshots, on the device itself ([`optio_proto::snap`]).
//!
//! Before a write under a snapshot context changes (or deletes) an object whose stored
//! version is below the context's mark, the stored content is kept as a *clone*: an ordinary
//! object of this device, keyed [`clone_key`]`(key, version)`, with the head's pool, PG seed,
//! version, checksum and data. A block object's file is copied (a reflink where the file
//! system has them) and its header rewritten for the clone's key — the blocks lie at the same
//! offsets under any key of at most [`CLONED_KEY_BYTES_MAX`] bytes — then synced and renamed
//! into place as every object is, so a crash leaves the head alone, or the head and a whole
//! clone. A deleted object's tombstone is kept as a tombstone under the clone's key, so a
//! snapshot taken between a delete and a re-create reads zeros.
//!
//! A clone is made once: its key names the version it keeps, and a content already kept is
//! not kept again. A clone no snapshot sees any more is removed outright by a trim (a
//! delete of its key, with no tombstone; see [`DeviceStore::delete_in`]).
//! Because clones are ordinary objects placed by their head's seed, rebalancing, catching up,
//! scrubbing and repair carry and compare them as they do every object.

use optio_placement::PoolId;
use optio_proto::blocks::{BLOCK_BYTES, BlockLayout};
use optio_proto::checksum;
use optio_proto::snap::{
    CLONED_KEY_BYTES_MAX, CLONED_PREFIX, SnapContext, clone_key, clone_prefix, parse_clone_key,
    visible_at,
};
use optio_proto::{ObjectHeader, ObjectVersion};

use super::{DeviceStore, Entry};
use crate::error::StoreError;

/// How many blocks a completion reads at a time (1 MiB): [`DeviceStore::read_checked_blocks`].
const RUN_BLOCKS: usize = 256;

/// The header of a clone of the live object `head`: its pool, seed, size, checksum, version
/// and epoch (the key is the clone's, given when it is encoded).
pub(super) fn clone_header(pool: PoolId, head: &Entry) -> ObjectHeader {
    ObjectHeader {
        pool,
        pg_seed: head.pg_seed,
        size_bytes: head.size_bytes,
        checksum: head.checksum,
        version: head.version,
        epoch: head.epoch,
        deleted: false,
        blocks: head.blocks,
    }
}

impl DeviceStore {
    /// The live block object `key`'s (entry `head`) first page up to its checksum table, and
    /// the table, read and checked against the index (the caller holds `key`'s stripe): what
    /// a clone of it under `clone` starts from without its data. The layout is the head's;
    /// the clone's lies at the same offsets.
    pub(super) fn head_page_and_table(
        &self,
        pool: PoolId,
        key: &str,
        clone: &str,
        head: &Entry,
    ) -> Result<(BlockLayout, Vec<u8>, Vec<u8>), StoreError> {
        let layout = BlockLayout::new(key.len(), head.size_bytes);
        let clone_layout = BlockLayout::new(clone.len(), head.size_bytes);
        assert_eq!(
            (layout.table_offset, layout.data_offset),
            (clone_layout.table_offset, clone_layout.data_offset),
            "keys of at most CLONED_KEY_BYTES_MAX bytes keep the table's offset"
        );
        let table_bytes = (4 * layout.blocks) as usize;
        let ranges = [(0, layout.table_offset as usize), (layout.table_offset, table_bytes)];
        let [page, table]: [Vec<u8>; 2] = self
            .read_ranges_or_forget(pool, key, &ranges)?
            .try_into()
            .expect("one buffer per range");
        self.head_checked(&page, pool, key, head, &self.path_of(pool, key))?;
        Ok((layout, page, table))
    }

    /// The blocks `missing` (ascending) of the block object file `path` whose data starts at
    /// `data_offset` (`layout`: the object's sizes), read a megabyte at a time, each checked
    /// against `table`, the checksums it must have: what a completion copies from one file of
    /// a snapshot pair to the other ([`super::cow`], [`super::redirect`]). `Err` says which
    /// read or which block failed, naming the file as `what`.
    pub(super) fn read_checked_blocks(
        &self,
        path: &std::path::Path,
        data_offset: u64,
        layout: &BlockLayout,
        (missing, table): (&[u64], &[u32]),
        what: &str,
    ) -> Result<Vec<(u64, Vec<u8>)>, String> {
        let mut blocks = Vec::with_capacity(missing.len());
        for run in missing.chunk_by(|a, b| b == &(a + 1)) {
            for piece in run.chunks(RUN_BLOCKS) {
                let (lo, hi) = (piece[0], piece[piece.len() - 1]);
                let start = lo * BLOCK_BYTES as u64;
                let end = ((hi + 1) * BLOCK_BYTES as u64).min(layout.size);
                let bytes =
                    match self.disk.read_at(path, &[(data_offset + start, (end - start) as usize)])
                    {
                        Ok(mut read) => read.pop().expect("one buffer per range"),
                        Err(error) => return Err(format!("the {what}'s read: {error}")),
                    };
                for &b in piece {
                    let at = ((b - lo) * BLOCK_BYTES as u64) as usize;
                    let block = bytes[at..at + layout.block_len(b)].to_vec();
                    if checksum(&block) != table[b as usize] {
                        return Err(format!("block {b} of the {what} is not the one expected"));
                    }
                    blocks.push((b, block));
                }
            }
        }
        Ok(blocks)
    }

    /// Keeps what `key` holds as a clone, if `context` names a snapshot newer than it, before
    /// a write of `version` changes it. The caller holds the key's stripe. A write whose
    /// version is not above the mark is refused: the snapshot would see it.
    pub(super) fn preserve_for(
        &self,
        pool: PoolId,
        key: &str,
        context: Option<SnapContext>,
        version: ObjectVersion,
        in_place: bool,
    ) -> Result<(), StoreError> {
        if !in_place {
            // The head is replaced or removed: a clone filled by its writes is made whole
            // first ([`super::cow`]).
            self.complete_partial(pool, key)?;
        }
        let Some(context) = context else { return Ok(()) };
        let erasure = self.is_erasure(pool);
        if self.parse_clone(pool, key).is_some() || !(erasure || key.starts_with(CLONED_PREFIX)) {
            // A clone is kept as it is (its deletion, a trim, keeps nothing more); keys that
            // are not volume data or chunks of erasure-coded objects have no clones.
            return Ok(());
        }
        if erasure {
            // A chunk keeps what it replaces until the version written is committed
            // (docs/erasure.md): the context only says "keep".
            let Some(head) = self.entry(pool, key) else { return Ok(()) };
            if head.version >= version || key.len() > CLONED_KEY_BYTES_MAX {
                return Ok(());
            }
            let clone = clone_key(key, head.version);
            if self.entry(pool, &clone).is_some_and(|kept| kept.version == head.version) {
                return Ok(());
            }
            if head.deleted {
                return self.write_tombstone(pool, &clone, head.version, head.pg_seed, head.epoch);
            }
            return self.copy_to_clone(pool, key, &clone, &head);
        }
        if version <= context.mark {
            return Err(StoreError::BadRange(format!(
                "write version {} of '{key}' is not above the mark {} of snapshot {}: the writer's clock must pass the snapshot's (reopen the volume)",
                version.0, context.mark.0, context.seq
            )));
        }
        let Some(head) = self.entry(pool, key) else { return Ok(()) };
        if head.version >= context.mark {
            return Ok(());
        }
        if key.len() > CLONED_KEY_BYTES_MAX {
            return Err(StoreError::BadRange(format!(
                "key '{key}' is longer than {CLONED_KEY_BYTES_MAX} bytes: it cannot be kept for a snapshot"
            )));
        }
        let clone = clone_key(key, head.version);
        if self.entry(pool, &clone).is_some_and(|kept| kept.version == head.version) {
            return Ok(());
        }
        if head.deleted {
            return self.write_tombstone(pool, &clone, head.version, head.pg_seed, head.epoch);
        }
        if in_place && head.blocks && self.redirects_writes() {
            // Nothing copied ([`super::redirect`]); a head still redirected to an earlier
            // snapshot's clone is made whole first.
            self.complete_partial(pool, key)?;
            if super::redirects::fits(key.len(), &BlockLayout::new(key.len(), head.size_bytes)) {
                return self.begin_redirect(pool, key, &clone, &head);
            }
        }
        if in_place && head.blocks && self.copies_blocks() {
            // A write in place copies only the blocks it changes ([`super::cow`]); an earlier
            // snapshot's partial clone is made whole first.
            self.complete_partial(pool, key)?;
            let layout = BlockLayout::new(clone.len(), head.size_bytes);
            if super::partials::fits(clone.len(), &layout) {
                return self.begin_partial(pool, key, &clone, &head);
            }
        }
        // A redirected head is copied whole.
        self.complete_redirect(pool, key)?;
        self.copy_to_clone(pool, key, &clone, &head)
    }

    /// Whether a write of `key` under `context` would first keep a clone (a copy: not
    /// page-cache work to do on a request's own task).
    pub fn would_preserve(&self, pool: PoolId, key: &str, context: Option<SnapContext>) -> bool {
        if self.has_partial(pool, key) {
            return true;
        }
        let Some(context) = context else { return false };
        let erasure = self.is_erasure(pool);
        self.entry(pool, key).is_some_and(|head| {
            (head.version < context.mark || erasure)
                && self
                    .entry(pool, &clone_key(key, head.version))
                    .is_none_or(|kept| kept.version != head.version)
        })
    }

    /// Writes the live object `key` (entry `head`) again under `clone`, durably.
    fn copy_to_clone(
        &self,
        pool: PoolId,
        key: &str,
        clone: &str,
        head: &Entry,
    ) -> Result<(), StoreError> {
        let header = clone_header(pool, head);
        let encoded = header.encode(clone);
        let file_bytes = header.file_bytes(clone.len());
        let reservation = self.reserve(file_bytes)?;
        let from = self.path_of(pool, key);
        let to = self.path_of(pool, clone);
        self.ensure_parent(&to)?;
        let temp = self.temp_path();
        let written = if head.blocks {
            let same = BlockLayout::new(key.len(), head.size_bytes).table_offset
                == BlockLayout::new(clone.len(), head.size_bytes).table_offset;
            assert!(same, "keys of at most CLONED_KEY_BYTES_MAX bytes keep the table's offset");
            self.disk
                .copy_temp(&from, &temp)
                .and_then(|()| self.disk.write_at(&temp, &[(0, &encoded)], true))
        } else {
            let (_, data) = self.read_file(pool, key, true, head.file_bytes)?;
            self.disk.write_temp(&temp, &[&encoded, &data], true)
        };
        if let Err(error) = written {
            let _ = self.disk.remove(&temp);
            return Err(StoreError::Io {
                operation: "copy for a snapshot",
                path: from,
                source: error,
            });
        }
        let entry = Entry { file_bytes, ..*head };
        self.publish(&temp, to, pool, clone, entry)?;
        drop(reservation);
        tracing::debug!(device = self.id, key, clone, "kept for a snapshot");
        Ok(())
    }

    /// Removes the snapshot clones `clones` (keys with the version each names) outright, as a
    /// trim's [`DeviceStore::delete_in`] of each does, then makes the removals durable with
    /// one sync of each directory they were in. All are checked to be clones of `pool` first:
    /// a key that is not is refused, and nothing removed. How many copies were removed.
    pub fn trim_clones(
        &self,
        pool: PoolId,
        clones: &[(&str, ObjectVersion)],
    ) -> Result<usize, StoreError> {
        if let Some((key, _)) = clones.iter().find(|(key, _)| self.parse_clone(pool, key).is_none())
        {
            return Err(StoreError::BadRange(format!(
                "'{key}' is not a snapshot clone's key in pool {}: a trim removes clones only",
                pool.0
            )));
        }
        let mut dirs = std::collections::BTreeSet::new();
        let mut removed = 0;
        let mut failed = None;
        for (key, version) in clones {
            // Recorded before it is removed, as a single deletion's is (`refuse_trimmed`).
            self.trimmed.lock().expect("trimmed lock").note(pool, key, *version);
            match self.purge_then(pool, key, Some(*version), false) {
                Ok(Some(dir)) => {
                    removed += 1;
                    dirs.insert(dir);
                }
                Ok(None) => {}
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        // What was removed is made durable even when a removal failed.
        for dir in &dirs {
            self.disk.sync_dir(dir).map_err(StoreError::io("sync", dir))?;
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(removed),
        }
    }

    /// The key whose content a read of `key` as of snapshot mark `mark` returns: the head
    /// or one of its clones (none: the object did not exist then).
    pub fn key_as_of(&self, pool: PoolId, key: &str, mark: ObjectVersion) -> Option<String> {
        let prefix = clone_prefix(key);
        let index = self.index.read().expect("index lock");
        let mut keys: Vec<&str> = Vec::new();
        let mut contents: Vec<(ObjectVersion, bool)> = Vec::new();
        if let Some(head) = index.get(&(pool, key.to_string())) {
            keys.push(key);
            contents.push((head.version, head.deleted));
        }
        for ((_, clone), entry) in index
            .range((pool, prefix.clone())..)
            .take_while(|((p, k), _)| *p == pool && k.starts_with(&prefix))
        {
            if self.parse_clone(pool, clone).is_some_and(|(head, _)| head == key) {
                keys.push(clone);
                contents.push((entry.version, entry.deleted));
            }
        }
        visible_at(&contents, mark).map(|i| keys[i].to_string())
    }

    /// Notes that `pool` is erasure-coded (from the map, by the request that names it): its
    /// chunks keep what they replace under any key ([`DeviceStore::commit`]).
    pub fn note_erasure(&self, pool: PoolId) {
        if !self.is_erasure(pool) {
            let mut pools = self.erasure_pools.write().expect("erasure pools lock");
            if !pools.contains(&pool) {
                pools.push(pool);
            }
        }
    }

    /// Whether `pool` was noted erasure-coded.
    pub fn is_erasure(&self, pool: PoolId) -> bool {
        self.erasure_pools.read().expect("erasure pools lock").contains(&pool)
    }

    /// The head's key and the version of a clone's key in `pool`: volume data's clones in
    /// any pool, any key's in an erasure-coded pool.
    pub(crate) fn parse_clone<'k>(
        &self,
        pool: PoolId,
        key: &'k str,
    ) -> Option<(&'k str, ObjectVersion)> {
        if self.is_erasure(pool) {
            optio_proto::snap::parse_clone_key_any(key)
        } else {
            parse_clone_key(key)
        }
    }

    /// Commits version `version` of an erasure-coded chunk ([`optio_proto::wire::COMMIT`]):
    /// if this device holds that version or a newer one, the earlier versions it kept while
    /// they were replaced are removed. How many were.
    pub fn commit(
        &self,
        pool: PoolId,
        key: &str,
        version: ObjectVersion,
    ) -> Result<usize, StoreError> {
        let Some(head) = self.entry(pool, key) else { return Ok(0) };
        if head.version < version {
            // This device did not get that version: what it kept may still be needed.
            return Ok(0);
        }
        let mut removed = 0;
        for (clone, kept, _) in self.clones_of(pool, key) {
            if kept < version && self.purge(pool, &clone, Some(kept))? {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Takes back version `version` of an erasure-coded chunk (or its tombstone) that was
    /// written to fewer devices than the pool's `min_size`: the newest version kept while it
    /// was written becomes the head again (docs/erasure.md). Whether it was taken back.
    pub(super) fn undo_chunk(
        &self,
        pool: PoolId,
        key: &str,
        version: ObjectVersion,
    ) -> Result<bool, StoreError> {
        let _stripe = self.stripe(key);
        let Some(head) = self.entry(pool, key) else { return Ok(false) };
        if head.version != version {
            return Ok(false);
        }
        let kept = self
            .clones_of(pool, key)
            .into_iter()
            .filter(|(_, v, _)| *v < version)
            .max_by_key(|(_, v, _)| *v);
        // The head is replaced by the kept content, published over it by a rename as every
        // write is (a crash leaves one or the other); its newer version is forgotten first so
        // that the older one may take its place.
        match kept {
            Some((clone, kept_version, true)) => {
                let entry = self.entry(pool, &clone).expect("listed under the stripe");
                self.forget(pool, key);
                self.write_tombstone(pool, key, kept_version, entry.pg_seed, entry.epoch)?;
            }
            Some((clone, _, false)) => {
                let entry = self.entry(pool, &clone).expect("listed under the stripe");
                self.forget(pool, key);
                self.copy_to_clone(pool, &clone, key, &entry)?;
            }
            None => {
                let path = self.path_of(pool, key);
                self.journal.forget(&path).map_err(StoreError::io("journal", &path))?;
                match self.disk.remove(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StoreError::Io { operation: "remove", path, source: e }),
                }
                self.forget(pool, key);
            }
        }
        tracing::info!(
            pool = pool.0,
            key,
            version = version.0,
            "undid a chunk write that could not complete"
        );
        Ok(true)
    }

    /// Every clone of `key` on this device: key, version, and whether it is a tombstone.
    pub fn clones_of(&self, pool: PoolId, key: &str) -> Vec<(String, ObjectVersion, bool)> {
        let prefix = clone_prefix(key);
        let index = self.index.read().expect("index lock");
        index
            .range((pool, prefix.clone())..)
            .take_while(|((p, k), _)| *p == pool && k.starts_with(&prefix))
            .filter(|((_, k), _)| self.parse_clone(pool, k).is_some_and(|(head, _)| head == key))
            .map(|((_, k), e)| (k.clone(), e.version, e.deleted))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use optio_placement::Epoch;
    use optio_proto::checksum;

    use super::*;
    use crate::disk::{Disk, Fault, FaultyDisk, RealDisk};
    use crate::store::trimmed::Trimmed;
    use crate::store::{DeleteOutcome, DeviceConfig, PutOutcome, PutRequest, WriteAt};

    const MIB: u64 = 1 << 20;
    const KEY: &str = "volume_data.ab.0000000000000000";
    const POOL: PoolId = PoolId(1);

    fn open_on(dir: &std::path::Path, disk: Arc<dyn Disk>) -> DeviceStore {
        let config = DeviceConfig { id: 0, dir: dir.to_path_buf(), capacity_bytes: 64 * MIB };
        DeviceStore::open(&config, disk).unwrap()
    }

    fn snap(mark: u64) -> Option<SnapContext> {
        Some(SnapContext { seq: 1, mark: ObjectVersion(mark) })
    }

    fn write(
        store: &DeviceStore,
        data: &[u8],
        base: Option<u64>,
        version: u64,
        context: Option<SnapContext>,
    ) -> Result<PutOutcome, StoreError> {
        store.write_at_in(
            &WriteAt {
                pool: POOL,
                key: KEY,
                offset: 4096,
                data,
                zeroes: 0,
                size: 4 * MIB,
                base: base.map(ObjectVersion),
                version: ObjectVersion(version),
                checksum: Some(checksum(data)),
                pg_seed: Some(3),
                epoch: Epoch(1),
                sync: false,
            },
            context,
        )
    }

    /// The 8 bytes at 4096 of `key` as of `mark` (none: did not exist then).
    fn read_as_of(store: &DeviceStore, mark: u64) -> Option<Vec<u8>> {
        let key = store.key_as_of(POOL, KEY, ObjectVersion(mark))?;
        Some(store.read_range(POOL, &key, 4096, 4096 + 7).unwrap().1)
    }

    fn clone_files(dir: &std::path::Path) -> usize {
        walkdir(dir.join("objects").as_path())
    }

    fn walkdir(dir: &std::path::Path) -> usize {
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        entries.flatten().map(|e| if e.path().is_dir() { walkdir(&e.path()) } else { 1 }).sum()
    }

    #[test]
    fn the_first_write_after_a_snapshot_keeps_a_clone_once_and_reads_see_their_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path(), Arc::new(RealDisk));
        write(&store, b"AAAAAAAA", None, 10, None).unwrap();
        // Snapshot 1 at mark 15: the next write keeps version 10 as a clone.
        write(&store, b"BBBBBBBB", Some(10), 20, snap(15)).unwrap();
        assert_eq!(
            store.clones_of(POOL, KEY),
            vec![(clone_key(KEY, ObjectVersion(10)), ObjectVersion(10), false)]
        );
        // Later writes under the same snapshot keep nothing more.
        write(&store, b"CCCCCCCC", Some(20), 30, snap(15)).unwrap();
        assert_eq!(store.clones_of(POOL, KEY).len(), 1, "cloned once, not twice");
        assert_eq!(clone_files(dir.path()), 2);
        // Snapshot 2 at mark 35: version 30 is kept too.
        write(&store, b"DDDDDDDD", Some(30), 40, snap(35)).unwrap();
        assert_eq!(store.clones_of(POOL, KEY).len(), 2);
        assert_eq!(read_as_of(&store, 5), None, "before the object existed");
        assert_eq!(read_as_of(&store, 15).unwrap(), b"AAAAAAAA");
        assert_eq!(read_as_of(&store, 35).unwrap(), b"CCCCCCCC");
        assert_eq!(read_as_of(&store, 45).unwrap(), b"DDDDDDDD");
        // The clone is a whole object of its own: verified, with the head's seed and version.
        let info = store.info(POOL, &clone_key(KEY, ObjectVersion(10))).unwrap();
        assert_eq!(
            (info.version, info.pg_seed, info.size_bytes),
            (ObjectVersion(10), Some(3), 4 * MIB)
        );
        let (_, whole) = store.get(POOL, &clone_key(KEY, ObjectVersion(10))).unwrap();
        assert_eq!(&whole[4096..4104], b"AAAAAAAA");
        // And it is found again after a restart, as every object is.
        drop(store);
        let store = open_on(dir.path(), Arc::new(RealDisk));
        assert_eq!(store.clones_of(POOL, KEY).len(), 2);
        assert_eq!(read_as_of(&store, 15).unwrap(), b"AAAAAAAA");
    }

    #[test]
    fn an_object_created_after_a_snapshot_did_not_exist_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path(), Arc::new(RealDisk));
        write(&store, b"NEWNEWNE", None, 20, snap(15)).unwrap();
        write(&store, b"NEWERNEW", Some(20), 30, snap(15)).unwrap();
        assert!(store.clones_of(POOL, KEY).is_empty());
        assert_eq!(read_as_of(&store, 15), None);
        assert_eq!(read_as_of(&store, 31).unwrap(), b"NEWERNEW");
    }

    #[test]
    fn a_write_at_or_below_the_mark_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path(), Arc::new(RealDisk));
        write(&store, b"AAAAAAAA", None, 10, None).unwrap();
        let refused = write(&store, b"BBBBBBBB", Some(10), 15, snap(15)).unwrap_err();
        assert!(refused.to_string().contains("not above the mark 15"), "{refused}");
        assert!(store.clones_of(POOL, KEY).is_empty());
    }

    #[test]
    fn whole_writes_and_deletes_keep_clones_too() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path(), Arc::new(RealDisk));
        let put = |data: &[u8], version: u64, context| {
            store.put_in(
                &PutRequest {
                    pool: POOL,
                    key: KEY,
                    data: &[data],
                    version: ObjectVersion(version),
                    checksum: None,
                    pg_seed: Some(3),
                    epoch: Epoch(1),
                },
                context,
            )
        };
        put(b"plain one", 10, None).unwrap();
        put(b"plain two", 20, snap(15)).unwrap();
        let read = |mark| {
            store.key_as_of(POOL, KEY, ObjectVersion(mark)).map(|k| store.get(POOL, &k).unwrap().1)
        };
        assert_eq!(read(15).unwrap(), b"plain one");
        // Deleted under snapshot 25, re-created after snapshot 35.
        let refused = store.delete_in(POOL, KEY, None, Epoch(1), None, snap(25));
        assert!(refused.is_err(), "a delete under a snapshot names its version");
        store.delete_in(POOL, KEY, Some(ObjectVersion(30)), Epoch(1), None, snap(25)).unwrap();
        put(b"plain new", 40, snap(35)).unwrap();
        assert_eq!(read(15).unwrap(), b"plain one");
        assert_eq!(read(25).unwrap(), b"plain two");
        assert_eq!(read(35), None, "deleted when snapshot 35 was taken");
        assert_eq!(read(45).unwrap(), b"plain new");
    }

    #[test]
    fn a_crash_between_the_clone_and_the_write_leaves_either_state_readable() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(FaultyDisk::new());
        let store = open_on(dir.path(), disk.clone());
        write(&store, b"AAAAAAAA", None, 10, None).unwrap();
        // The clone's file is written, then the machine dies before its rename.
        disk.set_fault(Some(Fault::CrashBeforeRename));
        assert!(write(&store, b"BBBBBBBB", Some(10), 20, snap(15)).is_err());
        disk.set_fault(None);
        drop(store);
        let store = open_on(dir.path(), disk.clone());
        // Nothing half-made is visible: the head as it was, no clone, the temp file gone.
        assert!(store.clones_of(POOL, KEY).is_empty());
        assert_eq!(read_as_of(&store, 15).unwrap(), b"AAAAAAAA");
        assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        // The clone made, then a crash before the write: the snapshot reads the clone, the
        // head is unchanged, and the write retried keeps no second clone.
        store.preserve_for(POOL, KEY, snap(15), ObjectVersion(20), false).unwrap();
        drop(store);
        let store = open_on(dir.path(), disk);
        assert_eq!(store.clones_of(POOL, KEY).len(), 1);
        assert_eq!(read_as_of(&store, 15).unwrap(), b"AAAAAAAA");
        assert_eq!(read_as_of(&store, 16).unwrap(), b"AAAAAAAA");
        write(&store, b"BBBBBBBB", Some(10), 20, snap(15)).unwrap();
        assert_eq!(store.clones_of(POOL, KEY).len(), 1);
        assert_eq!(read_as_of(&store, 15).unwrap(), b"AAAAAAAA");
        assert_eq!(read_as_of(&store, 21).unwrap(), b"BBBBBBBB");
    }

    /// A clone a trim removed here does not come back as a peer's copy stored afterwards: a
    /// rebalancing transfer from a device that still held it (one that missed the trim while
    /// its server was down and now sends what it holds away, or one that read its copy just
    /// before the trim removed it), a catch-up fetch or a repair. The copy is refused as an
    /// older version is; small and large files alike. A clone never trimmed is stored.
    #[test]
    fn a_trimmed_clone_sent_by_a_peer_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path(), Arc::new(RealDisk));
        let put = |key: &str, version: u64, data: &[u8]| {
            store.put(&PutRequest {
                pool: POOL,
                key,
                data: &[data],
                version: ObjectVersion(version),
                checksum: None,
                pg_seed: Some(3),
                epoch: Epoch(1),
            })
        };
        let small = b"old content".to_vec();
        let large = vec![7u8; crate::journal::JOURNAL_OBJECT_MAX as usize + 1];
        for (version, data) in [(10, &small), (11, &large)] {
            let clone = clone_key(KEY, ObjectVersion(version));
            put(&clone, version, data).unwrap();
            // The trim removes this device's copy.
            let trimmed = store.delete_in(
                POOL,
                &clone,
                Some(ObjectVersion(version)),
                Epoch(1),
                Some(3),
                None,
            );
            assert_eq!(trimmed.unwrap(), DeleteOutcome::Deleted);
            // A peer's copy of it arrives afterwards.
            let refused = put(&clone, version, data).unwrap_err();
            assert!(matches!(refused, StoreError::VersionConflict { .. }), "{refused}");
            assert!(store.entry(POOL, &clone).is_none(), "the trimmed clone stays away");
        }
        // The trim reaches this device before a copy it is fetching (nothing here yet).
        let fetched = clone_key(KEY, ObjectVersion(9));
        let trimmed = store.delete_in(POOL, &fetched, Some(ObjectVersion(9)), Epoch(1), None, None);
        assert_eq!(trimmed.unwrap(), DeleteOutcome::Absent);
        assert!(put(&fetched, 9, &small).is_err(), "the copy fetched is refused");
        assert_eq!(clone_files(dir.path()), 0);
        let kept = clone_key(KEY, ObjectVersion(12));
        assert_eq!(put(&kept, 12, &small).unwrap(), PutOutcome::Stored);
        assert!(store.entry(POOL, &kept).is_some(), "a clone never trimmed is stored");
    }

    /// A trim of many clones in one request removes each (and remembers it, as a single
    /// deletion does), reopens to none of them, and refuses the whole request, removing
    /// nothing, when it names a key that is not a clone.
    #[test]
    fn a_trim_removes_its_clones_durably_and_refuses_a_key_that_is_not_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path(), Arc::new(RealDisk));
        let put = |key: &str, version: u64| {
            store.put(&PutRequest {
                pool: POOL,
                key,
                data: &[b"kept"],
                version: ObjectVersion(version),
                checksum: None,
                pg_seed: Some(3),
                epoch: Epoch(1),
            })
        };
        put(KEY, 40).unwrap();
        let clones: Vec<String> =
            (10..30).map(|version| clone_key(KEY, ObjectVersion(version))).collect();
        for (version, clone) in (10..30).zip(&clones) {
            put(clone, version).unwrap();
        }
        let named: Vec<(&str, ObjectVersion)> =
            (10..30).zip(&clones).map(|(v, c)| (c.as_str(), ObjectVersion(v))).collect();
        let mut with_head = named.clone();
        with_head.push((KEY, ObjectVersion(40)));
        let refused = store.trim_clones(POOL, &with_head).unwrap_err();
        assert!(refused.to_string().contains("not a snapshot clone"), "{refused}");
        assert_eq!(clone_files(dir.path()), 21, "nothing removed (20 clones and the head)");
        // Half of them, then all (those already gone count for nothing).
        assert_eq!(store.trim_clones(POOL, &named[..10]).unwrap(), 10);
        assert_eq!(store.trim_clones(POOL, &named).unwrap(), 10);
        assert_eq!(clone_files(dir.path()), 1, "the head alone");
        assert!(store.entry(POOL, KEY).is_some(), "the head stays");
        let refused = put(&clones[3], 13).unwrap_err();
        assert!(matches!(refused, StoreError::VersionConflict { .. }), "{refused}");
        drop(store);
        let reopened = open_on(dir.path(), Arc::new(RealDisk));
        assert!(clones.iter().all(|clone| reopened.entry(POOL, clone).is_none()));
        assert!(reopened.entry(POOL, KEY).is_some());
    }

    /// The trimmed clones remembered: the last `kept` at least, however many came before —
    /// never none at all right after many (the newest version removed of each).
    #[test]
    fn the_latest_trimmed_clones_are_remembered_however_many_went_before() {
        let mut trimmed = Trimmed::new(4);
        let key = |i: u64| clone_key(KEY, ObjectVersion(i));
        assert_eq!(trimmed.removed_at(POOL, &key(0)), None);
        for i in 0..100 {
            trimmed.note(POOL, &key(i), ObjectVersion(i));
            for back in 0..4.min(i + 1) {
                let recent = key(i - back);
                assert_eq!(trimmed.removed_at(POOL, &recent), Some(ObjectVersion(i - back)));
            }
        }
        assert_eq!(trimmed.removed_at(POOL, &key(0)), None, "long ago: forgotten");
        assert_eq!(trimmed.removed_at(PoolId(2), &key(99)), None, "another pool's");
        trimmed.note(POOL, &key(99), ObjectVersion(98));
        assert_eq!(trimmed.removed_at(POOL, &key(99)), Some(ObjectVersion(99)), "the newest");
    }
}
