//! Copy-on-write per block for volume snapshots: *partial clones*.
//!
//! The first write in place after a snapshot to a volume's block object used to copy the whole
//! object (4 MiB by default) to its clone before changing 4 KiB of it: a volume written at
//! random right after a snapshot copied itself whole, three times, before its writes went on.
//! Now such a clone starts *partial*: a sparse file with the clone's header, the head's
//! checksum table as it was, and a bitmap of the blocks the clone holds — none at first. Each
//! write in place to the head first copies the blocks it changes that the clone does not hold
//! yet into the clone and sets their bits — made durable by the device's journal (a
//! `WRITE_AT` record; concurrent writes share its `fdatasync`), or by a sync of the clone
//! when they are more than a record holds — then writes the head. By that order a block the clone does not hold is, on the disk, the head's block as
//! the snapshot saw it, whenever the machine stops.
//!
//! The mark lies in the clone file's first [`BLOCK_BYTES`], after its header and key (at most
//! 64 + `KEY_BYTES_MAX` bytes), at [`MARK_AT`]: [`MAGIC`], the block count (u32, little
//! endian), 4 zero bytes, then the bitmap (bit `b % 8` of byte `b / 8`: block `b` held). A
//! whole clone has zeros there (a hole), as every other block object has.
//!
//! A partial clone exists only on its device, only while its head is a block object changed
//! in place. Everything else sees whole clones: a read of a partial clone (a snapshot's or a
//! clone volume's read, a transfer to another device, a scrub) first *completes* it — copies
//! the blocks it lacks from the head, each verified against the clone's table, syncs, then
//! clears the mark and syncs again — and so does everything that would replace or remove the
//! head (a whole write, a delete, a purge, the next snapshot's clone). A clone whose every
//! block was copied by writes is complete too. A head found missing or damaged takes its
//! partial clone with it (quarantined, so that repair fetches the clone whole from a
//! replica). A trim removes a partial clone without completing it.

use std::sync::atomic::Ordering;

use optio_placement::PoolId;
use optio_proto::blocks::{BLOCK_BYTES, BlockLayout, decode_table};
use optio_proto::checksum;
use optio_proto::snap::parse_clone_key;

use super::partials::{
    MARK_AT, MARK_HEAD_BYTES, Partial, Shared, SnapshotCopy, bitmap_bytes, decode_mark, fits,
};
use super::{DeviceStore, Entry, entry_of};
use crate::error::StoreError;
use crate::journal::{JOURNAL_OBJECT_MAX, PART_HEADER_BYTES};

/// What a completion found.
enum Fill {
    /// The blocks the clone lacked, read from the head and verified: (block, bytes).
    Blocks(Vec<(u64, Vec<u8>)>),
    /// The head cannot give them (gone, damaged, changed behind the server's back).
    Lost(String),
}

impl DeviceStore {
    /// Starts `clone` as a partial clone of the live block object `key` (entry `head`), for
    /// a write in place under a snapshot that sees it (the caller holds `key`'s stripe and
    /// checked [`fits`]): its header, its mark (no block held) and the head's checksum table,
    /// synced and renamed into place. No data is copied.
    pub(super) fn begin_partial(
        &self,
        pool: PoolId,
        key: &str,
        clone: &str,
        head: &Entry,
    ) -> Result<(), StoreError> {
        let (_, _, table) = self.head_page_and_table(pool, key, clone, head)?;
        let layout = BlockLayout::new(clone.len(), head.size_bytes);
        let header = super::snapshots::clone_header(pool, head);
        let encoded = header.encode(clone);
        let partial = Partial {
            clone: clone.to_string(),
            layout,
            held: vec![0; bitmap_bytes(layout.blocks)],
            gone: false,
        };
        let mark = partial.mark();
        let file_bytes = layout.file_bytes();
        let reservation = self.reserve(file_bytes)?;
        let to = self.path_of(pool, clone);
        self.ensure_parent(&to)?;
        let temp = self.temp_path();
        let parts: [(u64, &[u8]); 3] =
            [(0, &encoded), (MARK_AT, &mark), (layout.table_offset, &table)];
        if let Err(error) = self.disk.write_sparse_temp(&temp, &parts, file_bytes, true) {
            let _ = self.disk.remove(&temp);
            return Err(StoreError::Io { operation: "write", path: temp, source: error });
        }
        self.publish(&temp, to, pool, clone, entry_of(&header, file_bytes, &[]))?;
        drop(reservation);
        self.partials.insert(pool, key, partial);
        tracing::debug!(device = self.id, key, clone, "partial clone started for a snapshot");
        Ok(())
    }

    /// Before a write in place changes blocks `first..=last` of `key` (the caller holds its
    /// stripe; `crcs`: their checksums as stored, `layout`: the head's), copies those its
    /// partial clone does not hold yet into the clone and makes them durable.
    pub(super) fn keep_blocks(
        &self,
        pool: PoolId,
        key: &str,
        layout: &BlockLayout,
        (first, last): (u64, u64),
        crcs: &[u32],
    ) -> Result<(), StoreError> {
        let Some(shared) = self.partials.get(pool, key) else { return Ok(()) };
        // The bits change only under the head's stripe, which the caller holds: the lock is
        // let go while the head is read (a head found missing or damaged drops the clone).
        let (missing, data_offset) = {
            let partial = shared.lock().expect("partial lock");
            let missing: Vec<u64> = (first..=last).filter(|&b| !partial.holds(b)).collect();
            (if partial.gone { Vec::new() } else { missing }, partial.layout.data_offset)
        };
        let (Some(&lo), Some(&hi)) = (missing.first(), missing.last()) else { return Ok(()) };
        let start = lo * BLOCK_BYTES as u64;
        let end = ((hi + 1) * BLOCK_BYTES as u64).min(layout.size);
        let bytes =
            self.read_at_or_forget(pool, key, layout.data_offset + start, (end - start) as usize)?;
        let mut parts: Vec<(u64, &[u8])> = Vec::new();
        for &b in &missing {
            let at = ((b - lo) * BLOCK_BYTES as u64) as usize;
            let block = &bytes[at..at + layout.block_len(b)];
            let expected = crcs[(b - first) as usize];
            let found = checksum(block);
            if found != expected {
                let path = self.path_of(pool, key);
                self.forget(pool, key);
                self.quarantine(&path);
                return Err(StoreError::Corrupt {
                    path,
                    error: optio_proto::FormatError::DataChecksum { expected, found },
                });
            }
            // A block of zeros stays a hole of the clone, which reads as zeros.
            if block.iter().any(|&byte| byte != 0) {
                parts.push((data_offset + b * BLOCK_BYTES as u64, block));
            }
        }
        let mut partial = shared.lock().expect("partial lock");
        if partial.gone {
            return Ok(());
        }
        let mut held = partial.held.clone();
        for &b in &missing {
            held[(b / 8) as usize] |= 1 << (b % 8);
        }
        let (from, to) = ((lo / 8) as usize, (hi / 8) as usize + 1);
        parts.push((MARK_AT + (MARK_HEAD_BYTES + from) as u64, &held[from..to]));
        let clone_path = self.path_of(pool, &partial.clone);
        let journaled: u64 =
            parts.iter().map(|(_, bytes)| (PART_HEADER_BYTES + bytes.len()) as u64).sum();
        if journaled <= JOURNAL_OBJECT_MAX {
            // Durable by the device's journal (one shared fdatasync of its log for the
            // concurrent writes), the clone's file written behind it.
            let applying = self
                .journal
                .write_at(&clone_path, &parts)
                .map_err(StoreError::io("journal", &clone_path))?;
            self.disk
                .write_at(&clone_path, &parts, false)
                .map_err(StoreError::io("write", &clone_path))?;
            drop(applying);
        } else {
            self.disk
                .write_at(&clone_path, &parts, true)
                .map_err(StoreError::io("write", &clone_path))?;
        }
        for &b in &missing {
            partial.hold(b);
        }
        if partial.whole() {
            self.clear_mark(&mut partial, pool, key, &shared)?;
        }
        Ok(())
    }

    /// Completes `key`'s partial clone, if it has one, and `key` itself if it is a redirected
    /// head (the caller holds `key`'s stripe): the blocks the clone lacks are copied from the
    /// head. A head that cannot give them (missing,
    /// damaged) takes the clone with it: it is quarantined, and repair brings it back whole
    /// from a replica. Refused only when the clone cannot be written (the head must then not
    /// change).
    pub(super) fn complete_partial(&self, pool: PoolId, key: &str) -> Result<(), StoreError> {
        // A redirected head is made whole too ([`super::redirect`]).
        self.complete_redirect(pool, key)?;
        let Some(shared) = self.partials.get(pool, key) else { return Ok(()) };
        let mut partial = shared.lock().expect("partial lock");
        if partial.gone {
            return Ok(());
        }
        match self.fill_of(pool, key, &partial) {
            Fill::Blocks(blocks) => {
                let data_offset = partial.layout.data_offset;
                let parts: Vec<(u64, &[u8])> = blocks
                    .iter()
                    .filter(|(_, block)| block.iter().any(|&byte| byte != 0))
                    .map(|(b, block)| (data_offset + b * BLOCK_BYTES as u64, &block[..]))
                    .collect();
                let clone_path = self.path_of(pool, &partial.clone);
                self.disk
                    .write_at(&clone_path, &parts, true)
                    .map_err(StoreError::io("write", &clone_path))?;
                for (b, _) in &blocks {
                    partial.hold(*b);
                }
                self.clear_mark(&mut partial, pool, key, &shared)
            }
            Fill::Lost(reason) => {
                drop(partial);
                tracing::warn!(
                    device = self.id,
                    key,
                    reason,
                    "a partial snapshot clone cannot be completed from its head: it is dropped here, to be repaired from a replica"
                );
                self.drop_partial(pool, key);
                Ok(())
            }
        }
    }

    /// The blocks `partial` lacks, read from the head `key` and verified against the clone's
    /// table.
    fn fill_of(&self, pool: PoolId, key: &str, partial: &Partial) -> Fill {
        let layout = partial.layout;
        let Some(head) = self.live_entry(pool, key) else {
            return Fill::Lost("the head is not stored".into());
        };
        if !head.blocks || head.size_bytes != layout.size {
            return Fill::Lost("the head is no longer the block object the clone was".into());
        }
        let clone_path = self.path_of(pool, &partial.clone);
        let table = match self
            .disk
            .read_at(&clone_path, &[(layout.table_offset, (4 * layout.blocks) as usize)])
        {
            Ok(mut read) => decode_table(&read.pop().expect("one buffer per range")),
            Err(error) => return Fill::Lost(format!("the clone's table: {error}")),
        };
        let head_path = self.path_of(pool, key);
        let head_data = BlockLayout::new(key.len(), layout.size).data_offset;
        let missing = partial.missing();
        match self.read_checked_blocks(&head_path, head_data, &layout, (&missing, &table), "head") {
            Ok(blocks) => Fill::Blocks(blocks),
            Err(reason) => Fill::Lost(reason),
        }
    }

    /// Makes the whole clone `partial` an ordinary one: its mark cleared, durably; it leaves
    /// the partial clones.
    fn clear_mark(
        &self,
        partial: &mut Partial,
        pool: PoolId,
        key: &str,
        shared: &Shared,
    ) -> Result<(), StoreError> {
        let clone_path = self.path_of(pool, &partial.clone);
        // Its blocks (some written behind journal records, not synced) and a bitmap saying it
        // holds them all, durable before the journal forgets those records; then no replay
        // writes into it any more, and the mark goes.
        self.disk
            .write_at(&clone_path, &[(MARK_AT + MARK_HEAD_BYTES as u64, &partial.held)], true)
            .map_err(StoreError::io("write", &clone_path))?;
        self.journal.forget(&clone_path).map_err(StoreError::io("journal", &clone_path))?;
        let zeros = vec![0u8; MARK_HEAD_BYTES + partial.held.len()];
        self.disk
            .write_at(&clone_path, &[(MARK_AT, &zeros)], true)
            .map_err(StoreError::io("write", &clone_path))?;
        partial.gone = true;
        self.partials.remove(pool, key, Some(shared));
        tracing::debug!(device = self.id, key, clone = partial.clone, "partial clone completed");
        Ok(())
    }

    /// Chooses how writes in place after a snapshot keep what it sees (at start).
    pub fn set_snapshot_copy(&self, copy: SnapshotCopy) {
        self.copy_mode.store(copy.as_u8(), Ordering::Relaxed);
    }

    /// Whether writes in place after a snapshot copy blocks rather than objects.
    pub(super) fn copies_blocks(&self) -> bool {
        self.copy_mode.load(Ordering::Relaxed) == SnapshotCopy::Blocks.as_u8()
    }

    /// Whether writes in place after a snapshot redirect their head ([`super::redirect`]).
    pub(super) fn redirects_writes(&self) -> bool {
        self.copy_mode.load(Ordering::Relaxed) == SnapshotCopy::Redirect.as_u8()
    }

    /// Completes the partial clone `key` is, if it is one, before it is read whole or in
    /// part (the caller holds no stripe).
    pub(super) fn settle_clone(&self, pool: PoolId, key: &str) -> Result<(), StoreError> {
        if self.partials.len() == 0 {
            return Ok(());
        }
        let Some((head, _)) = parse_clone_key(key) else { return Ok(()) };
        let Some(shared) = self.partials.get(pool, head) else { return Ok(()) };
        if shared.lock().expect("partial lock").clone != key {
            return Ok(());
        }
        let _stripe = self.stripe(head);
        self.complete_partial(pool, head)
    }

    /// Whether `key` has a partial clone (its writes in place may copy blocks into it).
    pub(super) fn has_partial(&self, pool: PoolId, key: &str) -> bool {
        self.partials.get(pool, key).is_some()
    }

    /// Drops `key`'s partial clone, forgotten and quarantined: its head was lost.
    pub(super) fn drop_partial(&self, pool: PoolId, key: &str) {
        if self.partials.len() == 0 {
            return;
        }
        let Some(shared) = self.partials.remove(pool, key, None) else { return };
        let clone = {
            let mut partial = shared.lock().expect("partial lock");
            partial.gone = true;
            partial.clone.clone()
        };
        let path = self.path_of(pool, &clone);
        self.forget(pool, &clone);
        self.quarantine(&path);
    }

    /// A trim removes `clone`: if it is partial, it stops being one, uncompleted.
    pub(super) fn release_partial(&self, pool: PoolId, clone: &str) {
        if self.partials.len() == 0 {
            return;
        }
        let Some((head, _)) = parse_clone_key(clone) else { return };
        let Some(shared) = self.partials.get(pool, head) else { return };
        {
            let mut partial = shared.lock().expect("partial lock");
            if partial.clone != clone {
                return;
            }
            partial.gone = true;
        }
        self.partials.remove(pool, head, Some(&shared));
    }

    /// Finds the partial clones among the objects just indexed (at open; [`super::DeviceStore`]'s
    /// load saw their mark's magic, [`super::partials::partial_magic_at`]): each is checked to
    /// have its head, a block object of its size; one that has not is quarantined.
    /// `marked`: the clones whose file showed the mark's magic when it was indexed.
    pub(super) fn load_partials(&self, marked: Vec<(PoolId, String)>) {
        let clones: Vec<(PoolId, String, Entry)> = {
            let index = self.index.read().expect("index lock");
            marked
                .into_iter()
                .filter_map(|(pool, key)| {
                    let entry = *index.get(&(pool, key.clone()))?;
                    (entry.blocks && !entry.deleted && parse_clone_key(&key).is_some())
                        .then_some((pool, key, entry))
                })
                .collect()
        };
        for (pool, clone, entry) in clones {
            let layout = BlockLayout::new(clone.len(), entry.size_bytes);
            if !fits(clone.len(), &layout) {
                continue;
            }
            let path = self.path_of(pool, &clone);
            let want = MARK_HEAD_BYTES + bitmap_bytes(layout.blocks);
            let read = self.disk.read_at(&path, &[(MARK_AT, want)]);
            let mark = match read.as_ref().map(|r| decode_mark(&r[0], layout.blocks)) {
                Ok(Ok(None)) => continue,
                Ok(Ok(Some(bitmap))) => Some(bitmap),
                Ok(Err(())) | Err(_) => None,
            };
            let (head, _) = parse_clone_key(&clone).expect("filtered");
            let head_ok = self
                .live_entry(pool, head)
                .is_some_and(|h| h.blocks && h.size_bytes == entry.size_bytes);
            match mark {
                Some(held) if head_ok => {
                    let partial = Partial { clone: clone.clone(), layout, held, gone: false };
                    self.partials.insert(pool, head, partial);
                }
                _ => {
                    tracing::warn!(
                        device = self.id,
                        clone,
                        "a partial snapshot clone without its head, or with a damaged mark: quarantined, to be repaired from a replica"
                    );
                    self.forget(pool, &clone);
                    self.quarantine(&path);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::sync::Arc;

    use optio_placement::Epoch;
    use optio_proto::ObjectVersion;
    use optio_proto::snap::{SnapContext, clone_key};

    use super::super::snap_tests::{KEY, POOL, SIZE, as_of, original, snap};
    use super::*;
    use crate::disk::{Disk, Fault, FaultyDisk, RealDisk};
    use crate::store::{PutRequest, WriteAt};

    fn open_on(dir: &std::path::Path, disk: Arc<dyn Disk>) -> DeviceStore {
        super::super::snap_tests::open(dir, disk, SnapshotCopy::Blocks)
    }

    fn write_at(
        store: &DeviceStore,
        offset: u64,
        data: &[u8],
        base: Option<u64>,
        version: u64,
        context: Option<SnapContext>,
    ) -> Result<crate::store::PutOutcome, StoreError> {
        super::super::snap_tests::write(store, offset, (data, 0), (base, version), context)
    }

    fn allocated(dir: &std::path::Path, version: u64) -> u64 {
        let clone = clone_key(KEY, ObjectVersion(version));
        let path = super::super::object_path(dir, POOL, &clone);
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    /// A write in place after a snapshot copies the blocks it changes, not the object; the
    /// clone is partial across a restart; a read of the snapshot sees every block as it was
    /// (completing the clone), the head sees the writes.
    #[test]
    fn a_write_in_place_after_a_snapshot_copies_only_the_blocks_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path(), Arc::new(RealDisk));
        let before = original();
        write_at(&store, 0, &before, None, 10, None).unwrap();
        write_at(&store, 4096 + 100, b"after one", Some(10), 20, snap(15)).unwrap();
        assert!(store.has_partial(POOL, KEY));
        assert!(allocated(dir.path(), 10) < 64 * 1024, "{}", allocated(dir.path(), 10));
        write_at(&store, 5 * 4096, &[7u8; 8192], Some(20), 30, snap(15)).unwrap();
        // Block 9 was zeros: kept as a hole.
        write_at(&store, 9 * 4096, b"nine", Some(30), 40, snap(15)).unwrap();
        assert!(allocated(dir.path(), 10) < 64 * 1024);
        drop(store);
        let store = open_on(dir.path(), Arc::new(RealDisk));
        assert!(store.has_partial(POOL, KEY), "partial across a restart");
        write_at(&store, SIZE - 3, b"end", Some(40), 50, snap(15)).unwrap();
        let mut after = before.clone();
        after[4096 + 100..4096 + 109].copy_from_slice(b"after one");
        after[5 * 4096..7 * 4096].fill(7);
        after[9 * 4096..9 * 4096 + 4].copy_from_slice(b"nine");
        after[SIZE as usize - 3..].copy_from_slice(b"end");
        assert!(as_of(&store, 15) == before, "the snapshot sees the object as it was");
        assert!(!store.has_partial(POOL, KEY), "completed by its read");
        assert!(allocated(dir.path(), 10) >= SIZE - 8 * 4096);
        assert!(as_of(&store, 51) == after);
        let (info, whole) = store.get(POOL, &clone_key(KEY, ObjectVersion(10))).unwrap();
        assert!(whole == before);
        assert_eq!(info.checksum, checksum(&before));
        drop(store);
        let store = open_on(dir.path(), Arc::new(RealDisk));
        assert!(!store.has_partial(POOL, KEY), "completed for good");
        assert!(as_of(&store, 15) == before);
    }

    /// The head replaced whole, and the next snapshot's first write, complete the partial
    /// clone before they go on; a clone whose every block was copied by writes is complete.
    #[test]
    fn a_whole_write_or_the_next_snapshot_completes_the_partial_clone_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path(), Arc::new(RealDisk));
        let before = original();
        write_at(&store, 0, &before, None, 10, None).unwrap();
        write_at(&store, 0, b"one", Some(10), 20, snap(15)).unwrap();
        let mut at_25 = before.clone();
        at_25[..3].copy_from_slice(b"one");
        // Snapshot 2 at 25: the clone of 10 is completed, one of 20 started.
        write_at(&store, 4096, b"two", Some(20), 30, snap(25)).unwrap();
        assert!(store.has_partial(POOL, KEY));
        assert_eq!(store.partials.len(), 1);
        let whole_10 = allocated(dir.path(), 10);
        assert!(whole_10 >= SIZE - 4096, "{whole_10}");
        let put = store.put_in(
            &PutRequest {
                pool: POOL,
                key: KEY,
                data: &[b"small now"],
                version: ObjectVersion(40),
                checksum: None,
                pg_seed: Some(3),
                epoch: Epoch(1),
            },
            snap(25),
        );
        put.unwrap();
        assert!(!store.has_partial(POOL, KEY), "completed before the head was replaced");
        assert!(as_of(&store, 15) == before);
        assert!(as_of(&store, 25) == at_25);
        // A small object: two writes copy both of its blocks, and it is complete.
        const SMALL: &str = "volume_data.cd.0000000000000002";
        let small = |offset, data: &[u8], base, version, context| {
            store.write_at_in(
                &WriteAt {
                    pool: POOL,
                    key: SMALL,
                    offset,
                    data,
                    zeroes: 0,
                    size: 8192,
                    base,
                    version: ObjectVersion(version),
                    checksum: None,
                    pg_seed: Some(3),
                    epoch: Epoch(1),
                    sync: false,
                },
                context,
            )
        };
        small(0, &[1u8; 8192], None, 10, None).unwrap();
        small(0, b"a", Some(ObjectVersion(10)), 20, snap(15)).unwrap();
        assert!(store.has_partial(POOL, SMALL));
        small(4096, b"b", Some(ObjectVersion(20)), 30, snap(15)).unwrap();
        assert!(!store.has_partial(POOL, SMALL), "every block copied: complete");
        let clone = store.key_as_of(POOL, SMALL, ObjectVersion(15)).unwrap();
        assert_eq!(store.read_range(POOL, &clone, 0, 8191).unwrap().1, vec![1u8; 8192]);
    }

    /// A trim removes a partial clone without completing it, and the head's writes go on; a
    /// clone that cannot be written refuses the head's write, which changes nothing; a head
    /// lost takes its partial clone with it.
    #[test]
    fn a_partial_clone_is_trimmed_refuses_writes_it_cannot_keep_and_goes_with_its_head() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(FaultyDisk::new());
        let store = open_on(dir.path(), disk.clone());
        let before = original();
        write_at(&store, 0, &before, None, 10, None).unwrap();
        write_at(&store, 0, b"one", Some(10), 20, snap(15)).unwrap();
        // The clone cannot be written: the head's write is refused and changes nothing (the
        // journal, whose sync failed, takes nothing more until the server restarts).
        disk.set_fault(Some(Fault::WriteError));
        assert!(write_at(&store, 8192, b"two", Some(20), 30, snap(15)).is_err());
        disk.set_fault(None);
        drop(store);
        let store = open_on(dir.path(), disk.clone());
        assert!(store.has_partial(POOL, KEY));
        assert_eq!(store.read_range(POOL, KEY, 8192, 8194).unwrap().1, before[8192..8195]);
        write_at(&store, 8192, b"two", Some(20), 30, snap(15)).unwrap();
        let clone = clone_key(KEY, ObjectVersion(10));
        assert_eq!(store.trim_clones(POOL, &[(&clone, ObjectVersion(10))]).unwrap(), 1);
        assert!(!store.has_partial(POOL, KEY));
        write_at(&store, 3 * 4096, b"three", Some(30), 40, snap(15)).unwrap();
        assert!(store.info(POOL, &clone).is_none(), "not made again");
        assert_eq!(store.read_range(POOL, KEY, 3 * 4096, 3 * 4096 + 4).unwrap().1, b"three");
        // A new partial clone (snapshot 45), then the head's file is lost.
        write_at(&store, 0, b"four", Some(40), 50, snap(45)).unwrap();
        assert!(store.has_partial(POOL, KEY));
        let clone = clone_key(KEY, ObjectVersion(40));
        std::fs::remove_file(store.path_of(POOL, KEY)).unwrap();
        assert!(store.read_range(POOL, KEY, 0, 3).is_err());
        assert!(!store.has_partial(POOL, KEY));
        assert!(store.info(POOL, &clone).is_none(), "dropped, to be repaired from a replica");
        drop(store);
        let store = open_on(dir.path(), Arc::new(RealDisk));
        assert!(store.info(POOL, &clone).is_none());
        assert_eq!(store.partials.len(), 0);
    }

    /// The blocks a write keeps are durable by the journal before the head changes: a crash
    /// that loses the clone's writeback (its block and its bitmap) is repaired by the replay,
    /// and the snapshot reads the object as it was.
    #[test]
    fn blocks_kept_but_lost_from_the_page_cache_in_a_crash_come_back_from_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_on(dir.path(), Arc::new(RealDisk));
        let before = original();
        write_at(&store, 0, &before, None, 10, None).unwrap();
        write_at(&store, 3 * 4096, b"three", Some(10), 20, snap(15)).unwrap();
        write_at(&store, 6 * 4096, b"six", Some(20), 30, snap(15)).unwrap();
        assert!(store.journal().pending() > 0, "journaled, not synced on its own");
        let clone = super::super::object_path(dir.path(), POOL, &clone_key(KEY, ObjectVersion(10)));
        drop(store);
        // What the kernel had not written back when the machine stopped: the kept blocks
        // and the bitmap's bytes (the file as the partial clone's creation synced it).
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(&clone).unwrap();
        let layout = BlockLayout::new(KEY.len() + 17, SIZE);
        for b in [3u64, 6] {
            file.write_all_at(&[0u8; BLOCK_BYTES], layout.data_offset + b * 4096).unwrap();
        }
        file.write_all_at(&[0u8; 128], MARK_AT + MARK_HEAD_BYTES as u64).unwrap();
        drop(file);
        let store = open_on(dir.path(), Arc::new(RealDisk));
        assert!(store.has_partial(POOL, KEY));
        assert!(as_of(&store, 15) == before, "the snapshot as it was");
        let mut after = before.clone();
        after[3 * 4096..3 * 4096 + 5].copy_from_slice(b"three");
        after[6 * 4096..6 * 4096 + 3].copy_from_slice(b"six");
        assert!(as_of(&store, 31) == after);
        assert_eq!(store.corrupt_found(), 0);
    }
}
