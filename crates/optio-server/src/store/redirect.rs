//! Redirect-on-write for volume snapshots: *redirected heads* (`--snapshot-copy redirect`).
//!
//! Copying what a snapshot sees before a write changes it costs the writes right after a
//! snapshot dearly on a file system without reflinks: a whole object copied per object
//! ([`SnapshotCopy::Objects`](super::SnapshotCopy)), or a block copied and journaled per
//! write ([`super::cow`]). A redirected head copies nothing. At the first write in place
//! after a snapshot, the head's file *becomes* the clone, and a new, sparse head file takes
//! its place, holding only what is written from then on:
//!
//! 1. a new head file is written in `tmp/` and synced: the old head's header and checksum
//!    table, a *redirect mark* at [`MARK_AT`] (`OPTIOROW`, then the clone's version, u64
//!    little endian) and no data — holes;
//! 2. it is renamed to the clone's path, then the two files are exchanged in one step
//!    (`renameat2(RENAME_EXCHANGE)`): the head's path holds the new file, the clone's path
//!    the old one, data and all;
//! 3. the old file's header is rewritten to name the clone (not synced: see below).
//!
//! From then on, a block of the head is *held* when the head's file has data there (the
//! file system allocated it: `SEEK_DATA`), else it is the clone's. Writes in place write the
//! head's blocks (a write of zeroes writes zeros rather than punching a hole); reads read the
//! held blocks from the head and the others from the clone, all verified against the head's
//! checksum table (whose entries for blocks not held are the clone's). What a block holds
//! and whether it is held become durable together, when the head's data is (a FLUSH, FUA):
//! a crash leaves every block either written or the clone's.
//!
//! Everything else sees whole heads: a whole read of the head (a transfer, a scrub), a
//! replacement or removal of it, the next snapshot's clone and a trim of the clone first
//! *complete* it — the blocks not held are copied from the clone (verified), synced, and the
//! mark cleared. A local reader (`optio-client`'s `client::local`) finds the mark in the head's
//! file, opens the clone too, and reads each block from where it is. A clone lost or damaged takes its redirected head with it
//! (quarantined, so that repair brings both back whole from a replica).
//!
//! A crash during the steps leaves, at the device's next open, either a new head file at
//! the clone's path (its mark says so: it is removed, the old head is whole where it was) or
//! the exchanged files, the clone's header perhaps not yet rewritten (a file at a clone's
//! path whose header names the head at the clone's version: the header is rewritten then).

use optio_placement::PoolId;
use optio_proto::ObjectVersion;
use optio_proto::blocks::{
    BLOCK_BYTES, BlockLayout, REDIRECT_MARK_AT as MARK_AT, REDIRECT_MARK_BYTES, decode_table,
    redirect_mark,
};
use optio_proto::snap::{clone_key, parse_clone_key};

use super::partials::{hold, holds};
use super::redirects::{Redirected, fits, mark};
use super::{DeviceStore, Entry, entry_of};
use crate::error::StoreError;

/// What clears a redirect mark.
const NO_MARK: [u8; REDIRECT_MARK_BYTES] = [0; REDIRECT_MARK_BYTES];

impl DeviceStore {
    /// Redirects the live block object `key` (entry `head`) to the new clone `clone`, for a
    /// write in place under a snapshot that sees it (the caller holds `key`'s stripe and
    /// checked [`fits`]). No data is copied ([the module](self)).
    pub(super) fn begin_redirect(
        &self,
        pool: PoolId,
        key: &str,
        clone: &str,
        head: &Entry,
    ) -> Result<(), StoreError> {
        let (layout, mut page, table) = self.head_page_and_table(pool, key, clone, head)?;
        let head_path = self.path_of(pool, key);
        let at = MARK_AT as usize;
        page[at..at + REDIRECT_MARK_BYTES].copy_from_slice(&mark(head.version));
        let file_bytes = layout.file_bytes();
        let reservation = self.reserve(file_bytes)?;
        let clone_path = self.path_of(pool, clone);
        self.ensure_parent(&clone_path)?;
        // A replay must not write what the old file was given into the new one.
        self.journal.forget(&head_path).map_err(StoreError::io("journal", &head_path))?;
        let temp = self.temp_path();
        let parts: [(u64, &[u8]); 2] = [(0, &page), (layout.table_offset, &table)];
        if let Err(error) = self.disk.write_sparse_temp(&temp, &parts, file_bytes, true) {
            let _ = self.disk.remove(&temp);
            return Err(StoreError::Io { operation: "write", path: temp, source: error });
        }
        if let Err(error) = self.disk.rename(&temp, &clone_path) {
            let _ = self.disk.remove(&temp);
            return Err(StoreError::Io { operation: "rename", path: clone_path, source: error });
        }
        if let Err(error) = self.disk.exchange(&head_path, &clone_path) {
            let _ = self.disk.remove(&clone_path);
            return Err(StoreError::Io { operation: "exchange", path: head_path, source: error });
        }
        let header = super::snapshots::clone_header(pool, head);
        if let Err(error) = self.disk.write_at(&clone_path, &[(0, &header.encode(clone))], false) {
            // Put back as it was: the old file at the head's path, the new one removed.
            if self.disk.exchange(&head_path, &clone_path).is_ok() {
                let _ = self.disk.remove(&clone_path);
            }
            return Err(StoreError::Io { operation: "write", path: clone_path, source: error });
        }
        self.index_published(pool, clone, entry_of(&header, file_bytes, &[]));
        drop(reservation);
        let held = vec![0; layout.blocks.div_ceil(8) as usize];
        self.redirects.insert(pool, key, Redirected { clone: clone.to_string(), layout, held });
        tracing::debug!(device = self.id, key, clone, "head redirected for a snapshot");
        Ok(())
    }

    /// `key`'s redirect, if it is a redirected head.
    pub(super) fn redirected(&self, pool: PoolId, key: &str) -> Option<Redirected> {
        self.redirects.get(pool, key)
    }

    /// Notes that a write in place wrote blocks `first..=last` of the redirected head `key`.
    pub(super) fn note_held(&self, pool: PoolId, key: &str, blocks: (u64, u64)) {
        if self.redirects.len() > 0 {
            self.redirects.hold(pool, key, blocks);
        }
    }

    /// Replaces, in `bytes` (blocks `first..` of the redirected head `key`'s data as read from
    /// its file), the blocks the head does not hold by the clone's. Which blocks came from
    /// the clone.
    pub(super) fn fill_from_clone(
        &self,
        pool: PoolId,
        redirected: &Redirected,
        first: u64,
        bytes: &mut [u8],
    ) -> Result<Vec<u64>, StoreError> {
        let layout = redirected.layout;
        let count = (bytes.len() as u64).div_ceil(BLOCK_BYTES as u64);
        let missing: Vec<u64> = (first..first + count).filter(|&b| !redirected.holds(b)).collect();
        if missing.is_empty() {
            return Ok(missing);
        }
        let ranges: Vec<(u64, usize)> = missing
            .chunk_by(|a, b| b == &(a + 1))
            .map(|run| {
                let (lo, hi) = (run[0], run[run.len() - 1]);
                let start = lo * BLOCK_BYTES as u64;
                let end = ((hi + 1) * BLOCK_BYTES as u64).min(layout.size);
                (layout.data_offset + start, (end - start) as usize)
            })
            .collect();
        let read = self.read_ranges_or_forget(pool, &redirected.clone, &ranges)?;
        for ((at, len), data) in ranges.iter().zip(read) {
            let from = (at - layout.data_offset - first * BLOCK_BYTES as u64) as usize;
            bytes[from..from + len].copy_from_slice(&data);
        }
        Ok(missing)
    }

    /// Completes `key`, if it is a redirected head (the caller holds its stripe): the blocks
    /// it does not hold are copied from its clone, verified, synced, and its mark cleared. A
    /// clone that cannot give them (missing, damaged) takes the head with it: both are
    /// quarantined, and repair brings them back from a replica. Refused only when the head
    /// cannot be written (it then stays redirected).
    pub(super) fn complete_redirect(&self, pool: PoolId, key: &str) -> Result<(), StoreError> {
        let Some(redirected) = self.redirects.get(pool, key) else { return Ok(()) };
        let layout = redirected.layout;
        let head_path = self.path_of(pool, key);
        let missing: Vec<u64> = (0..layout.blocks).filter(|&b| !redirected.holds(b)).collect();
        let mut blocks = Vec::new();
        if !missing.is_empty() {
            let table = match self
                .disk
                .read_at(&head_path, &[(layout.table_offset, (4 * layout.blocks) as usize)])
            {
                Ok(mut read) => decode_table(&read.pop().expect("one buffer per range")),
                Err(error) => {
                    return self.lose_redirected(pool, key, &format!("its table: {error}"));
                }
            };
            let clone_path = self.path_of(pool, &redirected.clone);
            let read = (&missing[..], &table[..]);
            match self.read_checked_blocks(&clone_path, layout.data_offset, &layout, read, "clone")
            {
                Ok(read) => blocks = read,
                Err(reason) => return self.lose_redirected(pool, key, &reason),
            }
            // A block of zeros stays a hole, which reads as zeros once the mark goes.
            blocks.retain(|(_, block)| block.iter().any(|&byte| byte != 0));
        }
        let parts: Vec<(u64, &[u8])> = blocks
            .iter()
            .map(|(b, block)| (layout.data_offset + b * BLOCK_BYTES as u64, &block[..]))
            .collect();
        if !parts.is_empty() {
            self.disk
                .write_at(&head_path, &parts, true)
                .map_err(StoreError::io("write", &head_path))?;
        }
        // A head that holds every block needs no clone: the clearing of its mark need not be
        // durable before the clone goes (the next open clears it too). Otherwise it must.
        let durable = !missing.is_empty();
        self.disk
            .write_at(&head_path, &[(MARK_AT, &NO_MARK)], durable)
            .map_err(StoreError::io("write", &head_path))?;
        self.redirects.remove(pool, key);
        tracing::debug!(
            device = self.id,
            key,
            clone = redirected.clone,
            "redirected head completed"
        );
        Ok(())
    }

    /// A redirected head whose clone cannot complete it: both forgotten and quarantined.
    fn lose_redirected(&self, pool: PoolId, key: &str, why: &str) -> Result<(), StoreError> {
        let Some(redirected) = self.redirects.remove(pool, key) else { return Ok(()) };
        tracing::warn!(
            device = self.id,
            key,
            clone = redirected.clone,
            why,
            "a redirected head cannot be completed from its clone: both are quarantined here, to be repaired from a replica"
        );
        for lost in [key, &redirected.clone] {
            let path = self.path_of(pool, lost);
            self.forget(pool, lost);
            self.quarantine(&path);
        }
        Ok(())
    }

    /// Before the clone `clone` is removed (a trim; the caller holds no stripe): the head
    /// redirected to it, if any, is completed first.
    pub(super) fn settle_redirect_to(&self, pool: PoolId, clone: &str) -> Result<(), StoreError> {
        if self.redirects.len() == 0 {
            return Ok(());
        }
        let Some((head, _)) = parse_clone_key(clone) else { return Ok(()) };
        let _stripe = self.stripe(head);
        match self.redirects.get(pool, head) {
            Some(redirected) if redirected.clone == clone => self.complete_redirect(pool, head),
            _ => Ok(()),
        }
    }

    /// `key` was forgotten: a redirected head's state goes with it (its clone stays whole);
    /// a clone a head is redirected to takes the head with it (quarantined).
    pub(super) fn drop_redirect(&self, pool: PoolId, key: &str) {
        if self.redirects.len() == 0 || self.redirects.remove(pool, key).is_some() {
            return;
        }
        let Some((head, _)) = parse_clone_key(key) else { return };
        if self.redirects.get(pool, head).is_some_and(|r| r.clone == key) {
            let _ = self.lose_redirected(pool, head, "its clone was lost");
        }
    }

    /// What the index's load does with a block object's file found at a path that is not its
    /// key's: a clone whose header was not yet rewritten gets it and is indexed
    /// (`Some(true)`), a redirect's leftover is removed (`Some(false)`); anything else is not a
    /// redirect's (`None`).
    pub(super) fn load_misplaced(
        &self,
        pool: PoolId,
        path: &std::path::Path,
        prefix: &[u8],
        header: &optio_proto::ObjectHeader,
        key: &str,
        index: &mut std::collections::BTreeMap<(PoolId, String), Entry>,
    ) -> Option<bool> {
        let clone = clone_key(key, header.version);
        if parse_clone_key(key).is_some() || self.path_of(pool, &clone) != path {
            return None;
        }
        if redirect_mark(prefix).is_some() {
            tracing::info!(
                device = self.id,
                key,
                "removing the new head of a redirect a crash interrupted"
            );
            let _ = self.disk.remove(path);
            return Some(false);
        }
        let rewritten = header.encode(&clone);
        let file_bytes = BlockLayout::new(clone.len(), header.size_bytes).file_bytes();
        if let Err(error) = self.disk.write_at(path, &[(0, &rewritten)], true) {
            tracing::warn!(device = self.id, clone, %error, "a redirected clone's header could not be rewritten: quarantined");
            self.quarantine(path);
            return Some(false);
        }
        index.insert((pool, clone), entry_of(header, file_bytes, &[]));
        Some(true)
    }

    /// Finds the redirected heads among the objects just indexed (at open; the load read
    /// their mark, and the version of the clone it names): each is checked to have its clone;
    /// what it holds is what its file has data for. One whose clone is missing is quarantined,
    /// unless it holds every block (then it needs the clone no more, and its mark is cleared).
    pub(super) fn load_redirects(&self, marked: Vec<(PoolId, String, ObjectVersion)>) {
        for (pool, key, version) in marked {
            let Some(entry) = self.live_entry(pool, &key).filter(|e| e.blocks) else { continue };
            let layout = BlockLayout::new(key.len(), entry.size_bytes);
            if !fits(key.len(), &layout) {
                continue;
            }
            let path = self.path_of(pool, &key);
            let clone = clone_key(&key, version);
            let clone_ok = self.live_entry(pool, &clone).is_some_and(|c| {
                c.blocks && c.size_bytes == entry.size_bytes && c.version == version
            });
            let end = layout.data_offset + layout.size;
            let held = self.disk.data_ranges(&path, layout.data_offset, end).ok().map(|ranges| {
                let mut held = vec![0u8; layout.blocks.div_ceil(8) as usize];
                for (start, end) in ranges {
                    let first = (start - layout.data_offset) / BLOCK_BYTES as u64;
                    let last = (end - 1 - layout.data_offset) / BLOCK_BYTES as u64;
                    for b in first..=last.min(layout.blocks - 1) {
                        hold(&mut held, b);
                    }
                }
                held
            });
            match held {
                // Every block written since: the head needs its clone no more (a completion
                // whose clearing of the mark was not durable when the clone went).
                Some(held) if (0..layout.blocks).all(|b| holds(&held, b)) => {
                    if let Err(error) = self.disk.write_at(&path, &[(MARK_AT, &NO_MARK)], true) {
                        tracing::warn!(device = self.id, key, %error, "a redirected head's mark could not be cleared");
                    }
                }
                Some(held) if clone_ok => {
                    self.redirects.insert(pool, &key, Redirected { clone, layout, held });
                }
                _ => {
                    tracing::warn!(
                        device = self.id,
                        key,
                        "a redirected head without its clone, or whose data could not be mapped: quarantined, to be repaired from a replica"
                    );
                    self.forget(pool, &key);
                    self.quarantine(&path);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{FileExt, MetadataExt};
    use std::sync::Arc;

    use optio_placement::Epoch;
    use optio_proto::snap::SnapContext;

    use optio_proto::checksum;

    use super::super::snap_tests::{KEY, POOL, SIZE, as_of, original, snap};
    use super::*;
    use crate::disk::{Disk, Fault, FaultyDisk, RealDisk};
    use crate::store::{PutRequest, SnapshotCopy, object_path};

    fn open_on(dir: &std::path::Path) -> DeviceStore {
        open_with(dir, Arc::new(RealDisk))
    }

    fn open_with(dir: &std::path::Path, disk: Arc<dyn Disk>) -> DeviceStore {
        super::super::snap_tests::open(dir, disk, SnapshotCopy::Redirect)
    }

    fn write(
        store: &DeviceStore,
        offset: u64,
        data: &[u8],
        zeroes: u64,
        written: (Option<u64>, u64),
        context: Option<SnapContext>,
    ) -> Result<crate::store::PutOutcome, StoreError> {
        super::super::snap_tests::write(store, offset, (data, zeroes), written, context)
    }

    fn allocated(dir: &std::path::Path, key: &str) -> u64 {
        std::fs::metadata(object_path(dir, POOL, key)).unwrap().blocks() * 512
    }

    /// The object at version 10, written whole, then three writes in place under a snapshot
    /// at 15 (one of zeroes): what the head and the snapshot should read.
    fn redirected_with_writes(store: &DeviceStore) -> (Vec<u8>, Vec<u8>) {
        let before = original();
        write(store, 0, &before, 0, (None, 10), None).unwrap();
        write(store, 4096 + 100, b"after one", 0, (Some(10), 20), snap(15)).unwrap();
        assert!(store.redirected(POOL, KEY).is_some());
        write(store, 5 * 4096, &[7u8; 8192], 0, (Some(20), 30), snap(15)).unwrap();
        write(store, 11 * 4096, &[], 3 * 4096, (Some(30), 40), snap(15)).unwrap();
        let mut after = before.clone();
        after[4096 + 100..4096 + 109].copy_from_slice(b"after one");
        after[5 * 4096..7 * 4096].fill(7);
        after[11 * 4096..14 * 4096].fill(0);
        (before, after)
    }

    /// A write in place after a snapshot copies nothing: the old file is the clone, the new
    /// head holds the blocks written (zeroes written, not punched); both read right, across
    /// a restart (the blocks held found again from the file's data); a local reader is
    /// given the head and finds its mark; a whole read completes it.
    #[test]
    fn a_write_after_a_snapshot_copies_nothing_and_both_versions_read_right() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path());
        let (before, after) = redirected_with_writes(&store);
        let clone = clone_key(KEY, ObjectVersion(10));
        assert!(allocated(dir.path(), KEY) < 64 * 1024, "{}", allocated(dir.path(), KEY));
        assert!(allocated(dir.path(), &clone) >= SIZE - 4096);
        assert!(store.read_range(POOL, KEY, 0, SIZE - 1).unwrap().1 == after);
        assert_eq!(
            store.read_range(POOL, KEY, 4096 + 90, 4096 + 110).unwrap().1,
            after[4096 + 90..=4096 + 110]
        );
        assert!(as_of(&store, 15) == before, "the snapshot sees the object as it was");
        let (file, _) = store.open_block_file(POOL, KEY).expect("local readers read it too");
        let mut page = vec![0u8; 4096];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut page, 0).unwrap();
        assert_eq!(optio_proto::blocks::redirect_mark(&page), Some(10), "and find its mark");
        drop(store);
        let store = open_on(dir.path());
        let redirected = store.redirected(POOL, KEY).expect("redirected across a restart");
        let held: Vec<u64> = (0..1024).filter(|&b| redirected.holds(b)).collect();
        assert_eq!(held, vec![1, 5, 6, 11, 12, 13]);
        assert!(store.read_range(POOL, KEY, 0, SIZE - 1).unwrap().1 == after);
        write(&store, SIZE - 3, b"end", 0, (Some(40), 50), snap(15)).unwrap();
        let mut after = after;
        after[SIZE as usize - 3..].copy_from_slice(b"end");
        assert!(as_of(&store, 15) == before);
        let (info, whole) = store.get(POOL, KEY).unwrap();
        assert!(whole == after, "a whole read sees the writes and the clone's blocks");
        assert_eq!(info.checksum, checksum(&after));
        assert!(store.redirected(POOL, KEY).is_none(), "completed by the whole read");
        assert!(store.open_block_file(POOL, KEY).is_ok());
        drop(store);
        let store = open_on(dir.path());
        assert!(store.redirected(POOL, KEY).is_none(), "completed for good");
        assert!(store.read_range(POOL, KEY, 0, SIZE - 1).unwrap().1 == after);
        assert!(as_of(&store, 15) == before);
    }

    /// The next snapshot's first write, a trim of the clone and a whole write complete the
    /// head before they go on.
    #[test]
    fn the_next_snapshot_a_trim_and_a_whole_write_complete_the_head_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path());
        let (before, at_45) = redirected_with_writes(&store);
        // Snapshot 2 at 45: the head is completed, then redirected to a clone of 40.
        write(&store, 0, b"two", 0, (Some(40), 50), snap(45)).unwrap();
        let redirected = store.redirected(POOL, KEY).unwrap();
        assert_eq!(redirected.clone, clone_key(KEY, ObjectVersion(40)));
        assert!(allocated(dir.path(), &redirected.clone) >= SIZE - 8 * 4096);
        let mut now = at_45.clone();
        now[..3].copy_from_slice(b"two");
        assert!(as_of(&store, 15) == before);
        assert!(as_of(&store, 45) == at_45);
        assert!(store.read_range(POOL, KEY, 0, SIZE - 1).unwrap().1 == now);
        // The snapshot at 45 removed: its clone's trim completes the head first.
        let clone = redirected.clone;
        assert_eq!(store.trim_clones(POOL, &[(&clone, ObjectVersion(40))]).unwrap(), 1);
        assert!(store.redirected(POOL, KEY).is_none());
        assert!(store.info(POOL, &clone).is_none());
        assert!(store.read_range(POOL, KEY, 0, SIZE - 1).unwrap().1 == now);
        // Redirected again under snapshot 55, then replaced whole.
        write(&store, 4096, b"three", 0, (Some(50), 60), snap(55)).unwrap();
        assert!(store.redirected(POOL, KEY).is_some());
        let put = PutRequest {
            pool: POOL,
            key: KEY,
            data: &[b"small now"],
            version: ObjectVersion(70),
            checksum: None,
            pg_seed: Some(3),
            epoch: Epoch(1),
        };
        store.put_in(&put, snap(55)).unwrap();
        assert!(store.redirected(POOL, KEY).is_none());
        assert_eq!(store.get(POOL, KEY).unwrap().1, b"small now");
        assert!(as_of(&store, 15) == before);
        assert!(as_of(&store, 55) == now);
    }

    /// A crash between the steps: the new head renamed to the clone's path but not exchanged
    /// is removed at the next open (the old head whole); exchanged but the clone's header not
    /// yet rewritten, the header is rewritten at the next open and both read right.
    #[test]
    fn a_crash_during_a_redirect_leaves_either_state_readable() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path());
        let before = original();
        write(&store, 0, &before, 0, (None, 10), None).unwrap();
        let head_path = store.path_of(POOL, KEY);
        let clone = clone_key(KEY, ObjectVersion(10));
        let clone_path = store.path_of(POOL, &clone);
        let layout = BlockLayout::new(KEY.len(), SIZE);
        let mut page = vec![0u8; layout.table_offset as usize];
        std::fs::File::open(&head_path).unwrap().read_exact_at(&mut page, 0).unwrap();
        drop(store);
        // The first crash: a new head at the clone's path, not exchanged.
        std::fs::create_dir_all(clone_path.parent().unwrap()).unwrap();
        std::fs::copy(&head_path, &clone_path).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&clone_path).unwrap();
        file.write_all_at(&mark(ObjectVersion(10)), MARK_AT).unwrap();
        drop(file);
        let store = open_on(dir.path());
        assert!(!clone_path.exists(), "the leftover is removed");
        assert!(store.info(POOL, &clone).is_none());
        assert!(store.read_range(POOL, KEY, 0, SIZE - 1).unwrap().1 == before);
        // The second: exchanged, the clone's header as the head's was.
        write(&store, 4096, b"one", 0, (Some(10), 20), snap(15)).unwrap();
        drop(store);
        let file = std::fs::OpenOptions::new().write(true).open(&clone_path).unwrap();
        file.write_all_at(&page, 0).unwrap();
        drop(file);
        let store = open_on(dir.path());
        assert_eq!(store.info(POOL, &clone).unwrap().version, ObjectVersion(10));
        assert!(store.redirected(POOL, KEY).is_some());
        assert!(as_of(&store, 15) == before);
        let mut after = before.clone();
        after[4096..4099].copy_from_slice(b"one");
        assert!(store.read_range(POOL, KEY, 0, SIZE - 1).unwrap().1 == after);
        assert_eq!(store.get(POOL, &clone).unwrap().1, before, "its header names the clone");
    }

    /// A clone lost takes the head redirected to it with it (quarantined, for repair from a
    /// replica), at a read and at the next open.
    #[test]
    fn a_lost_clone_takes_its_redirected_head_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path());
        redirected_with_writes(&store);
        let clone = clone_key(KEY, ObjectVersion(10));
        std::fs::remove_file(store.path_of(POOL, &clone)).unwrap();
        assert!(store.read_range(POOL, KEY, 0, 4095).is_err());
        assert!(store.info(POOL, KEY).is_none(), "the head went with its clone");
        assert!(store.redirected(POOL, KEY).is_none());
        // Again, the clone lost while the server was down.
        write(&store, 0, &original(), 0, (None, 100), None).unwrap();
        write(&store, 0, b"x", 0, (Some(100), 110), snap(105)).unwrap();
        let clone = clone_key(KEY, ObjectVersion(100));
        let clone_path = store.path_of(POOL, &clone);
        drop(store);
        std::fs::remove_file(clone_path).unwrap();
        let store = open_on(dir.path());
        assert!(store.info(POOL, KEY).is_none());
        assert_eq!(store.redirects.len(), 0);
    }

    /// A redirect that fails at any step (the new head not written, not renamed, not
    /// exchanged) refuses the write and changes nothing: the head whole where it was, no
    /// clone, nothing left at the clone's path; the next write redirects.
    #[test]
    fn a_redirect_that_fails_refuses_its_write_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(FaultyDisk::new());
        let store = open_with(dir.path(), disk.clone());
        let before = original();
        write(&store, 0, &before, 0, (None, 10), None).unwrap();
        let clone = clone_key(KEY, ObjectVersion(10));
        for fault in [Fault::WriteError, Fault::CrashBeforeRename, Fault::Full] {
            disk.set_fault(Some(fault));
            assert!(write(&store, 0, b"x", 0, (Some(10), 20), snap(15)).is_err(), "{fault:?}");
            disk.set_fault(None);
            assert!(store.redirected(POOL, KEY).is_none());
            assert!(store.info(POOL, &clone).is_none());
            assert!(!store.path_of(POOL, &clone).exists(), "{fault:?}");
            assert!(store.read_range(POOL, KEY, 0, SIZE - 1).unwrap().1 == before);
        }
        drop(store);
        let store = open_with(dir.path(), disk);
        assert!(store.read_range(POOL, KEY, 0, SIZE - 1).unwrap().1 == before);
        write(&store, 0, b"x", 0, (Some(10), 20), snap(15)).unwrap();
        assert!(store.redirected(POOL, KEY).is_some());
        assert!(as_of(&store, 15) == before);
    }

    /// A head that holds every block needs no clone: the trim's completion clears its mark
    /// without a sync, and a head found at the next open with its mark but without its clone
    /// is whole, not lost.
    #[test]
    fn a_head_written_whole_after_the_snapshot_needs_its_clone_no_more() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path());
        write(&store, 0, &original(), 0, (None, 10), None).unwrap();
        let now = vec![5u8; SIZE as usize];
        write(&store, 0, &now, 0, (Some(10), 20), snap(15)).unwrap();
        assert!(store.redirected(POOL, KEY).is_some_and(|r| (0..1024).all(|b| r.holds(b))));
        let clone = clone_key(KEY, ObjectVersion(10));
        drop(store);
        std::fs::remove_file(object_path(dir.path(), POOL, &clone)).unwrap();
        let store = open_on(dir.path());
        assert!(store.redirected(POOL, KEY).is_none());
        assert!(store.read_range(POOL, KEY, 0, SIZE - 1).unwrap().1 == now);
        assert_eq!(store.get(POOL, KEY).unwrap().1, now);
    }
}
