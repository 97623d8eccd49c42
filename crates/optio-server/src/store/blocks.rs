//! Writes in place and ranged reads of block objects ([`optio_proto::blocks`]): what block
//! volumes need, so that a 4 KiB write into a 4 MiB object rewrites 4 KiB and its checksum.
//!
//! Ordering: a write in place names the version it is based on (the one its writer last
//! wrote); a replica applies it only on exactly that version, so replicas apply one object's
//! writes in the same order, and a replica that missed one refuses the next
//! ([`StoreError::BaseMismatch`]) until the writer rewrites the object whole.
//!
//! On disk a write goes data first, then — in one `pwrite` — the header with the new version
//! and whole-data checksum and the blocks' checksums, into the page cache; with `sync` (FUA)
//! the file's data is synced before the answer, and [`DeviceStore::sync_all`] (FLUSH) syncs
//! the whole file system. A server killed between these steps leaves the old version in the
//! header and a block whose checksum no longer matches: the next read of it reports the
//! replica corrupt, the reader takes another replica and repairs this one, and the device,
//! having restarted, catches up on the newer version from its peers anyway.

use optio_placement::{Epoch, PoolId};
use optio_proto::blocks::{
    BLOCK_BYTES, BLOCK_OBJECT_BYTES_MAX, BlockLayout, decode_table, encode_table, first_bad_block,
    whole_after, zeros_checksum,
};
use optio_proto::{ObjectHeader, ObjectInfo, ObjectVersion, checksum};

use super::{DeviceStore, Entry, PutOutcome, entry_of, info_of};
use crate::error::StoreError;

/// A write in place.
#[derive(Clone, Copy, Debug)]
pub struct WriteAt<'a> {
    /// Pool.
    pub pool: PoolId,
    /// Key (validated).
    pub key: &'a str,
    /// Where the write starts in the object.
    pub offset: u64,
    /// The bytes written (empty with `zeroes`).
    pub data: &'a [u8],
    /// Instead of data, this many zero bytes (the whole blocks among them are punched out).
    pub zeroes: u64,
    /// The object's size, when the write creates it (holes read as zeros).
    pub size: u64,
    /// The version the write is based on; none: the object is created by this write.
    pub base: Option<ObjectVersion>,
    /// The version the object has after the write.
    pub version: ObjectVersion,
    /// crc32c of `data`, checked before anything is written.
    pub checksum: Option<u32>,
    /// PG seed (for a new object).
    pub pg_seed: Option<u32>,
    /// Writer's epoch.
    pub epoch: Epoch,
    /// Sync the object's data before answering (FUA).
    pub sync: bool,
}

impl WriteAt<'_> {
    fn len(&self) -> u64 {
        if self.zeroes > 0 { self.zeroes } else { self.data.len() as u64 }
    }
}

/// The blocks a write touches, as they are after it.
struct Patched {
    /// First block.
    first: u64,
    /// The blocks' bytes after the write.
    bytes: Vec<u8>,
    /// Their checksums after the write.
    crcs: Vec<u32>,
}

impl DeviceStore {
    /// Writes in place (blocking): creates a block object, or changes one based on the
    /// version stored. A plain object (written whole) becomes a block object on its first
    /// write in place.
    pub fn write_at(&self, request: &WriteAt<'_>) -> Result<PutOutcome, StoreError> {
        self.write_at_in(request, None)
    }

    /// [`write_at`](Self::write_at) under a volume's snapshot context: what is stored is
    /// first kept as a clone when the newest snapshot sees it ([`optio_proto::snap`]).
    pub fn write_at_in(
        &self,
        request: &WriteAt<'_>,
        snap: Option<optio_proto::snap::SnapContext>,
    ) -> Result<PutOutcome, StoreError> {
        if request.zeroes > 0 && !request.data.is_empty() {
            return Err(StoreError::BadRange("a write of zeroes carries no data".into()));
        }
        if let Some(sent) = request.checksum {
            let computed = checksum(request.data);
            if sent != computed {
                return Err(StoreError::ChecksumMismatch { sent, computed });
            }
        }
        let _stripe = self.stripe(request.key);
        let existing = self.entry(request.pool, request.key);
        let live = existing.filter(|e| !e.deleted);
        if let Some(entry) = live
            && entry.version == request.version
        {
            // A retried write whose answer was lost.
            return Ok(PutOutcome::AlreadyStored);
        }
        let in_place = live.is_some_and(|e| e.blocks);
        self.preserve_for(request.pool, request.key, snap, request.version, in_place)?;
        match (request.base, live) {
            (None, None) => {
                if let Some(tomb) = existing
                    && tomb.version >= request.version
                {
                    return Err(StoreError::VersionConflict {
                        stored: tomb.version,
                        offered: request.version,
                    });
                }
                self.create_blocks(request)
            }
            (Some(base), Some(entry)) if entry.version == base => {
                if request.version <= entry.version {
                    return Err(StoreError::VersionConflict {
                        stored: entry.version,
                        offered: request.version,
                    });
                }
                if entry.blocks {
                    self.patch_blocks(request, &entry)
                } else {
                    self.convert_and_patch(request, &entry)
                }
            }
            (base, live) => Err(StoreError::BaseMismatch { stored: live.map(|e| e.version), base }),
        }
    }

    /// The bytes `[start, end]` of an object (blocking), reading and verifying only the blocks
    /// they lie in when it is a block object.
    pub fn read_range(
        &self,
        pool: PoolId,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<(ObjectInfo, Vec<u8>), StoreError> {
        self.settle_clone(pool, key)?;
        let Some(entry) = self.live_entry(pool, key) else { return Err(StoreError::NotFound) };
        if !entry.blocks {
            let (info, mut data) = self.get(pool, key)?;
            check_range(start, end - start + 1, info.size_bytes)?;
            data.truncate(end as usize + 1);
            data.drain(..start as usize);
            return Ok((info, data));
        }
        let _stripe = self.stripe(key);
        let Some(entry) = self.live_entry(pool, key) else { return Err(StoreError::NotFound) };
        let layout = BlockLayout::new(key.len(), entry.size_bytes);
        check_range(start, end - start + 1, entry.size_bytes)?;
        let (first, last) = layout.blocks_of(start, end - start + 1);
        let path = self.path_of(pool, key);
        let head_len = (layout.table_offset + 4 * (last + 1)) as usize;
        let block_start = first * BLOCK_BYTES as u64;
        let block_end = ((last + 1) * BLOCK_BYTES as u64).min(entry.size_bytes);
        // The header up to the blocks' checksums, and the blocks: one open, two reads.
        let ranges =
            [(0, head_len), (layout.data_offset + block_start, (block_end - block_start) as usize)];
        let [head, mut bytes]: [Vec<u8>; 2] = self
            .read_ranges_or_forget(pool, key, &ranges)?
            .try_into()
            .expect("one buffer per range");
        self.head_checked(&head, pool, key, &entry, &path)?;
        // The blocks a redirected head does not hold are its clone's ([`super::redirect`]).
        let redirected = self.redirected(pool, key);
        let from_clone = match &redirected {
            Some(redirected) => self.fill_from_clone(pool, redirected, first, &mut bytes)?,
            None => Vec::new(),
        };
        let table = decode_table(&head[layout.table_offset as usize + 4 * first as usize..]);
        if let Some((block, expected, found)) = first_bad_block(&layout, first, &table, &bytes) {
            if from_clone.contains(&block) {
                // The clone is damaged: it takes the head with it.
                let clone = redirected.map(|r| r.clone).unwrap_or_default();
                let clone_path = self.path_of(pool, &clone);
                self.forget(pool, &clone);
                self.quarantine(&clone_path);
                return Err(StoreError::Corrupt {
                    path: clone_path,
                    error: optio_proto::FormatError::DataChecksum { expected, found },
                });
            }
            self.forget(pool, key);
            self.quarantine(&path);
            return Err(StoreError::Corrupt {
                path,
                error: optio_proto::FormatError::DataChecksum { expected, found },
            });
        }
        let from = (start - block_start) as usize;
        let data = bytes[from..from + (end - start + 1) as usize].to_vec();
        Ok((info_of(key, &entry), data))
    }

    /// An open, read-only descriptor of the live block object `key`'s file, and the object
    /// (blocking): what a local reader reads the object through ([`optio_net::local`]). The
    /// file's header is checked against the index first, so the descriptor is of the file
    /// the index describes; from then on the reader compares the header with the version it
    /// expects on every read (the file may be written in place, replaced or removed).
    pub fn open_block_file(
        &self,
        pool: PoolId,
        key: &str,
    ) -> Result<(std::fs::File, ObjectInfo), StoreError> {
        use std::os::unix::fs::FileExt;
        self.settle_clone(pool, key)?;
        let _stripe = self.stripe(key);
        let Some(entry) = self.live_entry(pool, key) else { return Err(StoreError::NotFound) };
        if !entry.blocks {
            return Err(StoreError::BadRange(format!(
                "'{key}' was written whole, not in place: local reads take block objects only"
            )));
        }
        let path = self.path_of(pool, key);
        let file = match self.disk.open_read(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.forget(pool, key);
                return Err(StoreError::NotFound);
            }
            Err(e) => return Err(StoreError::Io { operation: "open", path, source: e }),
        };
        let layout = BlockLayout::new(key.len(), entry.size_bytes);
        let mut head = vec![0u8; layout.table_offset as usize];
        if let Err(e) = file.read_exact_at(&mut head, 0) {
            return Err(StoreError::Io { operation: "read", path, source: e });
        }
        self.head_checked(&head, pool, key, &entry, &path)?;
        Ok((file, info_of(key, &entry)))
    }

    /// Whether `key` is a live block object (written in place).
    pub fn is_block_object(&self, pool: PoolId, key: &str) -> bool {
        self.live_entry(pool, key).is_some_and(|e| e.blocks)
    }

    /// Makes every write to this device's file system durable (blocking): FLUSH.
    pub fn sync_all(&self) -> Result<(), StoreError> {
        self.disk.sync_fs(&self.root).map_err(StoreError::io("sync", &self.root))
    }

    pub(super) fn read_at_or_forget(
        &self,
        pool: PoolId,
        key: &str,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, StoreError> {
        let mut read = self.read_ranges_or_forget(pool, key, &[(offset, len)])?;
        Ok(read.pop().expect("one buffer per range"))
    }

    /// Reads `ranges` of `key`'s file; a file that is gone or short is forgotten (and a short
    /// one quarantined).
    pub(super) fn read_ranges_or_forget(
        &self,
        pool: PoolId,
        key: &str,
        ranges: &[(u64, usize)],
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let path = self.path_of(pool, key);
        match self.disk.read_at(&path, ranges) {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.forget(pool, key);
                self.corrupt_found.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Err(StoreError::NotFound)
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                self.forget(pool, key);
                self.quarantine(&path);
                Err(StoreError::Mismatch {
                    path,
                    reason: "the file is shorter than its layout".into(),
                })
            }
            Err(e) => Err(StoreError::Io { operation: "read", path, source: e }),
        }
    }

    /// [`check_head`](Self::check_head), a file that fails it forgotten and quarantined (at
    /// `path`, its file), so that the client repairs this replica from a good one.
    pub(super) fn head_checked(
        &self,
        head: &[u8],
        pool: PoolId,
        key: &str,
        entry: &Entry,
        path: &std::path::Path,
    ) -> Result<(), StoreError> {
        let Err(mismatch) = self.check_head(head, pool, key, entry) else { return Ok(()) };
        self.forget(pool, key);
        self.quarantine(path);
        Err(StoreError::Mismatch { path: path.to_path_buf(), reason: mismatch.to_string() })
    }

    /// Checks that a block object's file starts with the header the index has.
    pub(super) fn check_head(
        &self,
        head: &[u8],
        pool: PoolId,
        key: &str,
        entry: &Entry,
    ) -> Result<(), HeadMismatch> {
        match ObjectHeader::decode_prefix(head) {
            Ok((header, stored_key, _)) => {
                if stored_key != key || header.pool != pool {
                    Err(HeadMismatch::Key { key: stored_key.to_string(), pool: header.pool })
                } else if header.version != entry.version || !header.blocks {
                    Err(HeadMismatch::Version { found: header.version, stored: entry.version })
                } else {
                    Ok(())
                }
            }
            Err(error) => Err(HeadMismatch::Damaged(error)),
        }
    }

    /// The blocks `request` touches, as they are after it; `old` reads a block as stored
    /// (verified), for blocks the write covers only in part.
    fn patched(
        &self,
        layout: &BlockLayout,
        request: &WriteAt<'_>,
        mut old: impl FnMut(u64) -> Result<Vec<u8>, StoreError>,
    ) -> Result<Patched, StoreError> {
        let len = request.len();
        let (first, last) = layout.blocks_of(request.offset, len);
        let start = first * BLOCK_BYTES as u64;
        let end = ((last + 1) * BLOCK_BYTES as u64).min(layout.size);
        let mut bytes = vec![0u8; (end - start) as usize];
        let write_from = (request.offset - start) as usize;
        let write_to = write_from + len as usize;
        if write_from > 0 {
            let block = old(first)?;
            bytes[..block.len()].copy_from_slice(&block);
        }
        if write_to < bytes.len() && (last > first || write_from == 0) {
            let block = old(last)?;
            let at = ((last - first) * BLOCK_BYTES as u64) as usize;
            bytes[at..at + block.len()].copy_from_slice(&block);
        }
        if request.zeroes > 0 {
            bytes[write_from..write_to].fill(0);
        } else {
            bytes[write_from..write_to].copy_from_slice(request.data);
        }
        let crcs = (first..=last)
            .map(|b| {
                let at = ((b - first) * BLOCK_BYTES as u64) as usize;
                checksum(&bytes[at..at + layout.block_len(b)])
            })
            .collect();
        Ok(Patched { first, bytes, crcs })
    }

    fn create_blocks(&self, request: &WriteAt<'_>) -> Result<PutOutcome, StoreError> {
        let size = request.size;
        if size == 0 || size > BLOCK_OBJECT_BYTES_MAX {
            return Err(StoreError::BadRange(format!(
                "a block object is 1 byte to {BLOCK_OBJECT_BYTES_MAX} bytes; {size} was asked"
            )));
        }
        check_range(request.offset, request.len(), size)?;
        let layout = BlockLayout::new(request.key.len(), size);
        // Nothing stored yet: the blocks around the write are zeros.
        let patched = self.patched(&layout, request, |b| Ok(vec![0u8; layout.block_len(b)]))?;
        let mut table: Vec<u32> =
            (0..layout.blocks).map(|b| zero_block_crc(layout.block_len(b))).collect();
        let mut whole = zeros_checksum(size);
        for (i, crc) in patched.crcs.iter().enumerate() {
            let b = patched.first + i as u64;
            whole = whole_after(whole, table[b as usize], *crc, after(&layout, b));
            table[b as usize] = *crc;
        }
        let header = self.block_header(request, size, whole);
        let head = header.encode(request.key);
        let table_bytes = encode_table(&table);
        let data_at = layout.data_offset + patched.first * BLOCK_BYTES as u64;
        let mut parts: Vec<(u64, &[u8])> = vec![(0, &head), (layout.table_offset, &table_bytes)];
        if request.zeroes == 0 {
            parts.push((data_at, &patched.bytes));
        }
        self.store_blocks(request, &header, &parts, layout.file_bytes())
    }

    /// Writes a whole block object file (`parts` at their offsets, holes elsewhere) and
    /// publishes it in place of whatever the key held, as a write of a whole object is.
    fn store_blocks(
        &self,
        request: &WriteAt<'_>,
        header: &ObjectHeader,
        parts: &[(u64, &[u8])],
        file_bytes: u64,
    ) -> Result<PutOutcome, StoreError> {
        let reservation = self.reserve(file_bytes)?;
        let path = self.path_of(request.pool, request.key);
        self.ensure_parent(&path)?;
        let temp = self.temp_path();
        self.disk
            .write_sparse_temp(&temp, parts, file_bytes, true)
            .map_err(StoreError::io("write", &temp))?;
        self.publish(&temp, path, request.pool, request.key, entry_of(header, file_bytes, &[]))?;
        drop(reservation);
        Ok(PutOutcome::Stored)
    }

    fn convert_and_patch(
        &self,
        request: &WriteAt<'_>,
        entry: &Entry,
    ) -> Result<PutOutcome, StoreError> {
        let (_, data) = self.read_checked(request.pool, request.key, entry)?;
        let size = data.len() as u64;
        if size == 0 || size > BLOCK_OBJECT_BYTES_MAX {
            return Err(StoreError::BadRange(format!(
                "an object of {size} bytes cannot be written in place (1 byte to {BLOCK_OBJECT_BYTES_MAX}); write it whole"
            )));
        }
        check_range(request.offset, request.len(), size)?;
        let layout = BlockLayout::new(request.key.len(), size);
        let mut data = Vec::from(data);
        let (from, to) = (request.offset as usize, (request.offset + request.len()) as usize);
        if request.zeroes > 0 {
            data[from..to].fill(0);
        } else {
            data[from..to].copy_from_slice(request.data);
        }
        let table: Vec<u32> = (0..layout.blocks)
            .map(|b| {
                let at = (b * BLOCK_BYTES as u64) as usize;
                checksum(&data[at..at + layout.block_len(b)])
            })
            .collect();
        let header = self.block_header(request, size, checksum(&data));
        let head = header.encode(request.key);
        let table_bytes = encode_table(&table);
        let parts: [(u64, &[u8]); 3] =
            [(0, &head), (layout.table_offset, &table_bytes), (layout.data_offset, &data)];
        self.store_blocks(request, &header, &parts, layout.file_bytes())
    }

    fn patch_blocks(&self, request: &WriteAt<'_>, entry: &Entry) -> Result<PutOutcome, StoreError> {
        let (pool, key) = (request.pool, request.key);
        let layout = BlockLayout::new(key.len(), entry.size_bytes);
        check_range(request.offset, request.len(), entry.size_bytes)?;
        let path = self.path_of(pool, key);
        // A replay must not bring back the whole object this write changes in place.
        self.journal.forget(&path).map_err(StoreError::io("journal", &path))?;
        let (first, last) = layout.blocks_of(request.offset, request.len());
        // Everything from the header to the last table entry the write changes: read once,
        // changed in memory, written back in one piece after the data.
        let mut meta =
            self.read_at_or_forget(pool, key, 0, (layout.table_offset + 4 * (last + 1)) as usize)?;
        self.head_checked(&meta, pool, key, entry, &path)?;
        let old_crcs = decode_table(&meta[(layout.table_offset + 4 * first) as usize..]);
        // What a snapshot still sees of these blocks is kept first ([`super::cow`]).
        self.keep_blocks(pool, key, &layout, (first, last), &old_crcs)?;
        // A redirected head's blocks not written since are its clone's ([`super::redirect`]).
        let redirected = self.redirected(pool, key);
        let patched = self.patched(&layout, request, |b| {
            let at = layout.data_offset + b * BLOCK_BYTES as u64;
            let block = match &redirected {
                Some(redirected) if !redirected.holds(b) => {
                    let mut block = vec![0u8; layout.block_len(b)];
                    self.fill_from_clone(pool, redirected, b, &mut block)?;
                    block
                }
                _ => self.read_at_or_forget(pool, key, at, layout.block_len(b))?,
            };
            let expected = old_crcs[(b - first) as usize];
            let found = checksum(&block);
            if found != expected {
                self.forget(pool, key);
                self.quarantine(&path);
                return Err(StoreError::Corrupt {
                    path: path.clone(),
                    error: optio_proto::FormatError::DataChecksum { expected, found },
                });
            }
            Ok(block)
        })?;
        let mut whole = entry.checksum;
        for (i, crc) in patched.crcs.iter().enumerate() {
            let b = patched.first + i as u64;
            whole = whole_after(whole, old_crcs[i], *crc, after(&layout, b));
        }
        let header = self.block_header(request, entry.size_bytes, whole);
        let head = header.encode(key);
        meta[..head.len()].copy_from_slice(&head);
        let table_at = (layout.table_offset + 4 * first) as usize;
        meta[table_at..].copy_from_slice(&encode_table(&patched.crcs));
        let data_at = layout.data_offset + first * BLOCK_BYTES as u64;
        let first_start = first * BLOCK_BYTES as u64;
        let last_end = first_start + patched.bytes.len() as u64;
        let mut parts: Vec<(u64, &[u8])> = Vec::new();
        // Zeroes over whole blocks are punched out; only the blocks at the edges are written.
        let end = request.offset + request.len();
        let hole_from = request.offset.div_ceil(BLOCK_BYTES as u64) * BLOCK_BYTES as u64;
        let hole_to = if end == entry.size_bytes {
            end
        } else {
            end / BLOCK_BYTES as u64 * BLOCK_BYTES as u64
        };
        // A redirected head writes its zeros: a hole there would read the clone's block.
        if request.zeroes > 0 && hole_to > hole_from && redirected.is_none() {
            self.disk
                .punch(&path, layout.data_offset + hole_from, hole_to - hole_from)
                .map_err(StoreError::io("punch", &path))?;
            let bytes = &patched.bytes;
            if hole_from > first_start {
                parts.push((data_at, &bytes[..(hole_from - first_start) as usize]));
            }
            if hole_to < last_end {
                let from = (hole_to - first_start) as usize;
                parts.push((data_at + from as u64, &bytes[from..]));
            }
        } else {
            parts.push((data_at, &patched.bytes));
        }
        parts.push((0, &meta));
        self.disk.write_at(&path, &parts, request.sync).map_err(StoreError::io("write", &path))?;
        if redirected.is_some() {
            self.note_held(pool, key, (first, last));
        }
        let mut index = self.index.write().expect("index lock");
        index.insert((pool, key.to_string()), entry_of(&header, layout.file_bytes(), &[]));
        drop(index);
        self.watchers.changed(pool, key);
        Ok(PutOutcome::Stored)
    }

    fn block_header(&self, request: &WriteAt<'_>, size: u64, whole: u32) -> ObjectHeader {
        ObjectHeader {
            pool: request.pool,
            pg_seed: request.pg_seed,
            size_bytes: size,
            checksum: whole,
            version: request.version,
            epoch: request.epoch,
            deleted: false,
            blocks: true,
        }
    }
}

/// Bytes of data after block `block`.
fn after(layout: &BlockLayout, block: u64) -> u64 {
    layout.size - block * BLOCK_BYTES as u64 - layout.block_len(block) as u64
}

fn zero_block_crc(len: usize) -> u32 {
    static FULL: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    if len == BLOCK_BYTES {
        *FULL.get_or_init(|| checksum(&[0u8; BLOCK_BYTES]))
    } else {
        zeros_checksum(len as u64)
    }
}

fn check_range(offset: u64, len: u64, size: u64) -> Result<(), StoreError> {
    if len == 0 || offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(StoreError::BadRange(format!(
            "{len} bytes at offset {offset} are not within the object's {size} bytes"
        )));
    }
    Ok(())
}

/// How a block object's header differs from what the index says was stored (the file was
/// replaced or damaged behind the server's back).
#[derive(Debug, thiserror::Error)]
pub(super) enum HeadMismatch {
    /// The file holds another key or another pool's object.
    #[error("it holds key {key:?} of pool {pool}")]
    Key {
        /// The key in the file.
        key: String,
        /// The pool in the file.
        pool: PoolId,
    },
    /// The file holds another version, or an object not written in place.
    #[error("it holds version {} where version {} was stored", found.0, stored.0)]
    Version {
        /// The version in the file.
        found: ObjectVersion,
        /// The version the index has.
        stored: ObjectVersion,
    },
    /// The header does not decode.
    #[error("its header is damaged: {0}")]
    Damaged(#[source] optio_proto::FormatError),
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::disk::RealDisk;
    use crate::store::{DeviceConfig, PutRequest};

    const MIB: u64 = 1 << 20;

    fn open(dir: &std::path::Path) -> DeviceStore {
        let config = DeviceConfig { id: 0, dir: dir.to_path_buf(), capacity_bytes: 64 * MIB };
        DeviceStore::open(&config, Arc::new(RealDisk)).unwrap()
    }

    fn write(
        store: &DeviceStore,
        offset: u64,
        data: &[u8],
        base: Option<u64>,
        version: u64,
    ) -> Result<PutOutcome, StoreError> {
        store.write_at(&WriteAt {
            pool: PoolId(1),
            key: "vol.1/0",
            offset,
            data,
            zeroes: 0,
            size: 4 * MIB,
            base: base.map(ObjectVersion),
            version: ObjectVersion(version),
            checksum: Some(checksum(data)),
            pg_seed: Some(3),
            epoch: Epoch(1),
            sync: false,
        })
    }

    fn zero(store: &DeviceStore, offset: u64, len: u64, base: u64, version: u64) {
        store
            .write_at(&WriteAt {
                pool: PoolId(1),
                key: "vol.1/0",
                offset,
                data: &[],
                zeroes: len,
                size: 4 * MIB,
                base: Some(ObjectVersion(base)),
                version: ObjectVersion(version),
                checksum: None,
                pg_seed: Some(3),
                epoch: Epoch(1),
                sync: true,
            })
            .unwrap();
    }

    /// Applies writes to a model and the store alike, and checks them equal after each.
    #[test]
    fn writes_in_place_read_back_like_a_flat_image() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let mut model = vec![0u8; 4 << 20];
        let mut version = 10u64;
        let pattern = |n: usize, seed: u8| -> Vec<u8> {
            (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
        };
        // A new object written at an unaligned offset: the rest reads as zeros.
        let first = pattern(5000, 1);
        assert_eq!(write(&store, 3000, &first, None, version).unwrap(), PutOutcome::Stored);
        model[3000..8000].copy_from_slice(&first);
        let cases: [(u64, usize); 6] = [
            (0, 4096),
            (4096 * 7 + 5, 1),
            (MIB - 10, 20),
            (4 * MIB - 4096, 4096),
            (12345, 70000),
            (2 * MIB, MIB as usize),
        ];
        for (i, (offset, len)) in cases.into_iter().enumerate() {
            let data = pattern(len, i as u8 + 2);
            write(&store, offset, &data, Some(version), version + 1).unwrap();
            version += 1;
            model[offset as usize..offset as usize + len].copy_from_slice(&data);
            let (info, whole) = store.get(PoolId(1), "vol.1/0").unwrap();
            assert!(whole == model, "case {i}: the object differs from the model");
            assert_eq!(info.checksum, checksum(&model), "case {i}: whole checksum kept current");
            assert_eq!(info.version, ObjectVersion(version));
        }
        // Zeroes: a punched range spanning whole blocks and partial edges.
        zero(&store, 4000, 3 * 4096 + 100, version, version + 1);
        version += 1;
        model[4000..4000 + 3 * 4096 + 100].fill(0);
        for (start, end) in
            [(0u64, 4095u64), (3990, 20000), (MIB - 11, MIB + 11), (4 * MIB - 1, 4 * MIB - 1)]
        {
            let (_, got) = store.read_range(PoolId(1), "vol.1/0", start, end).unwrap();
            assert!(got == model[start as usize..=end as usize], "range {start}-{end}");
        }
        // The header's checksum survives a restart (it is what the index is rebuilt from).
        drop(store);
        let store = open(dir.path());
        let (info, whole) = store.get(PoolId(1), "vol.1/0").unwrap();
        assert!(whole == model);
        assert_eq!((info.version, info.checksum), (ObjectVersion(version), checksum(&model)));
    }

    #[test]
    fn a_write_in_place_needs_the_version_it_was_based_on() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        write(&store, 0, b"one", None, 10).unwrap();
        // Created already: a second create is refused, naming the stored version.
        assert!(matches!(
            write(&store, 0, b"two", None, 11),
            Err(StoreError::BaseMismatch { stored: Some(ObjectVersion(10)), base: None })
        ));
        // Based on a version this replica never had (it missed a write).
        assert!(matches!(
            write(&store, 0, b"two", Some(9), 11),
            Err(StoreError::BaseMismatch { .. })
        ));
        // A retry of an applied write is answered as stored.
        write(&store, 0, b"two", Some(10), 11).unwrap();
        assert_eq!(write(&store, 0, b"two", Some(10), 11).unwrap(), PutOutcome::AlreadyStored);
        // Out of range.
        assert!(matches!(
            write(&store, 4 * MIB - 1, b"xy", Some(11), 12),
            Err(StoreError::BadRange(_))
        ));
        // A deleted object at a newer version is not brought back by a late create.
        store.delete(PoolId(1), "vol.1/0", Some(ObjectVersion(20)), Epoch(1), None).unwrap();
        assert!(matches!(
            write(&store, 0, b"old", None, 15),
            Err(StoreError::VersionConflict { .. })
        ));
        write(&store, 0, b"new", None, 21).unwrap();
    }

    #[test]
    fn an_object_written_whole_takes_writes_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let mut data = vec![7u8; 64 * 1024];
        store
            .put(&PutRequest {
                pool: PoolId(1),
                key: "vol.1/0",
                data: &[&data],
                version: ObjectVersion(5),
                checksum: None,
                pg_seed: Some(3),
                epoch: Epoch(1),
            })
            .unwrap();
        store
            .write_at(&WriteAt {
                pool: PoolId(1),
                key: "vol.1/0",
                offset: 100,
                data: b"patch",
                zeroes: 0,
                size: 0,
                base: Some(ObjectVersion(5)),
                version: ObjectVersion(6),
                checksum: None,
                pg_seed: Some(3),
                epoch: Epoch(1),
                sync: false,
            })
            .unwrap();
        data[100..105].copy_from_slice(b"patch");
        let (info, got) = store.get(PoolId(1), "vol.1/0").unwrap();
        assert!(got == data);
        assert_eq!(info.checksum, checksum(&data));
    }

    #[test]
    fn a_damaged_block_is_caught_by_a_ranged_read_and_quarantined() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        write(&store, 0, &vec![9u8; 3 * 4096], None, 10).unwrap();
        let path = crate::store::object_path(dir.path(), PoolId(1), "vol.1/0");
        let layout = BlockLayout::new("vol.1/0".len(), 4 * MIB);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(layout.data_offset + 4096 + 17) as usize] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        // Another block still reads (only the blocks read are verified)...
        assert!(store.read_range(PoolId(1), "vol.1/0", 0, 4095).is_ok());
        // ...the damaged one does not, and the replica is set aside for repair.
        assert!(matches!(
            store.read_range(PoolId(1), "vol.1/0", 4096, 4096 + 99),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(store.info(PoolId(1), "vol.1/0").is_none());
        assert!(!path.exists());
    }

    #[test]
    fn a_head_of_another_key_or_version_is_that_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        write(&store, 0, &[7u8; 4096], None, 10).unwrap();
        let entry = store.live_entry(PoolId(1), "vol.1/0").expect("stored");
        let path = crate::store::object_path(dir.path(), PoolId(1), "vol.1/0");
        let head = std::fs::read(&path).unwrap();
        assert!(store.check_head(&head, PoolId(1), "vol.1/0", &entry).is_ok());
        let other = store.check_head(&head, PoolId(1), "vol.1/1", &entry);
        assert!(
            matches!(&other, Err(HeadMismatch::Key { key, pool }) if key == "vol.1/0" && *pool == PoolId(1)),
            "{other:?}"
        );
        let older = Entry { version: ObjectVersion(9), ..entry };
        let version = store.check_head(&head, PoolId(1), "vol.1/0", &older);
        assert!(
            matches!(version, Err(HeadMismatch::Version { found, stored }) if found == ObjectVersion(10) && stored == ObjectVersion(9)),
            "{version:?}"
        );
        let damaged = store.check_head(&head[..3], PoolId(1), "vol.1/0", &entry);
        assert!(matches!(damaged, Err(HeadMismatch::Damaged(_))), "{damaged:?}");
    }
}
