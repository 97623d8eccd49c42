//! Whole-object writes: one at a time ([`DeviceStore::put_in`]), and small ones in batches
//! that share one wait for the journal ([`DeviceStore::write_many`]), fed by the device's
//! writer thread ([`DeviceStore::put_small`]).
//!
//! Why a writer thread (issue 39): a small write stored from the blocking pool cost each
//! replica's server about six context switches (the pool's thread woken and parked again, a
//! wait on the journal's condition variable for the shared sync, the request's task woken),
//! and on two cores the switches were a third of the servers' samples in a profile of 4 KiB
//! writes at 16 in flight. The writer takes every small write queued meanwhile, appends their
//! records, waits for one sync, writes their files and answers them: one wake-up of the
//! thread per batch instead of several per write.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, Weak, mpsc};

use optio_placement::{Epoch, PoolId};
use optio_proto::snap::SnapContext;
use optio_proto::summary::SUMMARY_PREFIX_BYTES;
use optio_proto::{ObjectHeader, ObjectVersion, checksum_append};

use super::writer::{DeleteOutcome, Done, Job, PutOutcome, Reply, SmallDelete, SmallPut};
use super::{
    DeviceStore, Entry, PutRequest, Reservation, STRIPES, check_version, entry_of, key_hash,
    prefix_of,
};
use crate::error::StoreError;
use crate::journal::{Applying, JOURNAL_OBJECT_MAX};

/// Most writes one batch of the writer thread takes.
const BATCH_MAX: usize = 256;

/// A record appended: its guard, its sequence number, and the entry stored before.
type Begun<'s> = (Applying<'s>, u64, Option<Entry>);

/// A write checked and its file's header built, not yet stored.
struct Staged<'s> {
    /// Held until the file is written (or that failed); a tombstone needs none.
    _reservation: Option<Reservation<'s>>,
    path: PathBuf,
    head: Vec<u8>,
    entry: Entry,
    file_bytes: u64,
    /// The write's result once stored.
    done: Done,
}

/// A small write of a batch ([`DeviceStore::write_many`]).
#[derive(Clone, Copy)]
pub(super) enum Small<'a> {
    /// A whole object.
    Put(PutRequest<'a>),
    /// A delete (its tombstone).
    Delete {
        pool: PoolId,
        key: &'a str,
        version: Option<ObjectVersion>,
        epoch: Epoch,
        pg_seed: Option<u32>,
    },
}

impl<'a> Small<'a> {
    fn pool_key(&self) -> (PoolId, &'a str) {
        match self {
            Small::Put(request) => (request.pool, request.key),
            Small::Delete { pool, key, .. } => (*pool, key),
        }
    }

    /// The data after the file's header (none for a tombstone).
    fn data(&self) -> &'a [&'a [u8]] {
        match self {
            Small::Put(request) => request.data,
            Small::Delete { .. } => &[],
        }
    }
}

impl Staged<'_> {
    /// The object file's content: the header, then the data.
    fn content<'a>(&'a self, data: &[&'a [u8]]) -> Vec<&'a [u8]> {
        std::iter::once(&self.head[..]).chain(data.iter().copied()).collect()
    }
}

/// A write of a batch whose record is appended to the journal, not yet known durable.
struct Journaled<'s> {
    index: usize,
    staged: Staged<'s>,
    applying: Applying<'s>,
    seq: u64,
    existing: Option<Entry>,
    _stripe: MutexGuard<'s, ()>,
}

impl DeviceStore {
    /// Stores an object durably (blocking: call from a blocking thread).
    pub fn put(&self, request: &PutRequest<'_>) -> Result<PutOutcome, StoreError> {
        self.put_in(request, None)
    }

    /// [`put`](Self::put) under a volume's snapshot context: what is stored is first kept as
    /// a clone when the newest snapshot sees it ([`optio_proto::snap`]).
    pub fn put_in(
        &self,
        request: &PutRequest<'_>,
        snap: Option<optio_proto::snap::SnapContext>,
    ) -> Result<PutOutcome, StoreError> {
        let Some(prepared) = self.prepare_put(request)? else {
            return Ok(PutOutcome::AlreadyStored);
        };
        let Staged { path, entry, file_bytes, .. } = &prepared;
        let content = prepared.content(request.data);
        if *file_bytes <= JOURNAL_OBJECT_MAX {
            // Small: made durable by the journal, under the key's stripe.
            let _stripe = self.stripe(request.key);
            self.refuse_trimmed(request.pool, request.key, request.version)?;
            self.preserve_for(request.pool, request.key, snap, request.version, false)?;
            self.unflushed_bytes.fetch_add(*file_bytes, Ordering::Relaxed);
            let stored =
                self.store_journaled(path.clone(), request.pool, request.key, *entry, &content);
            self.unflushed_bytes.fetch_sub(*file_bytes, Ordering::Relaxed);
            stored?;
            return Ok(PutOutcome::Stored);
        }
        let temp = self.temp_path();
        self.unflushed_bytes.fetch_add(*file_bytes, Ordering::Relaxed);
        let written = self.disk.write_temp(&temp, &content, true);
        self.unflushed_bytes.fetch_sub(*file_bytes, Ordering::Relaxed);
        written.map_err(StoreError::io("write", &temp))?;
        let _stripe = self.stripe(request.key);
        if let Err(error) =
            self.refuse_trimmed(request.pool, request.key, request.version).and_then(|()| {
                self.preserve_for(request.pool, request.key, snap, request.version, false)
            })
        {
            let _ = self.disk.remove(&temp);
            return Err(error);
        }
        self.publish(&temp, path.clone(), request.pool, request.key, *entry)?;
        Ok(PutOutcome::Stored)
    }

    /// Checks a whole-object write (its checksum, the version stored) and reserves its room;
    /// none: the same version with the same data is stored already.
    fn prepare_put(&self, request: &PutRequest<'_>) -> Result<Option<Staged<'_>>, StoreError> {
        let computed = request.data.iter().fold(0, |crc, part| checksum_append(crc, part));
        let size_bytes: u64 = request.data.iter().map(|part| part.len() as u64).sum();
        if let Some(sent) = request.checksum
            && sent != computed
        {
            return Err(StoreError::ChecksumMismatch { sent, computed });
        }
        let header = ObjectHeader {
            pool: request.pool,
            pg_seed: request.pg_seed,
            size_bytes,
            checksum: computed,
            version: request.version,
            epoch: request.epoch,
            deleted: false,
            blocks: false,
        };
        let head = header.encode(request.key);
        let file_bytes = head.len() as u64 + header.size_bytes;
        let entry = entry_of(&header, file_bytes, &prefix_of(request.data, SUMMARY_PREFIX_BYTES));
        if let Some(existing) = self.entry(request.pool, request.key) {
            check_version(&existing, &entry)?;
            if !existing.deleted
                && (existing.version, existing.checksum) == (header.version, header.checksum)
            {
                return Ok(None);
            }
        }
        let reservation = self.reserve(file_bytes)?;
        let path = self.path_of(request.pool, request.key);
        self.ensure_parent(&path)?;
        Ok(Some(Staged {
            _reservation: Some(reservation),
            path,
            head,
            entry,
            file_bytes,
            done: Done::Put(PutOutcome::Stored),
        }))
    }

    /// Small writes — whole objects and deletes — without a snapshot context, each stored as
    /// [`put_in`](Self::put_in) or [`delete_in`](Self::delete_in) stores it, their records
    /// appended to the journal one after the other and one wait for all of them (blocking).
    /// One result per write, in order. Writes whose keys share a stripe are stored one group
    /// after the other, in order; a write the journal does not take (too large, a clone's
    /// removal) is stored on its own, after the group before it.
    ///
    /// A group holds its keys' stripes and its records' guards until its files are written,
    /// so nothing in it waits for anything else that could wait for them: a stripe another
    /// thread holds, a journal that must checkpoint first, a partial clone to complete —
    /// each finishes the group before it is waited for.
    pub(super) fn write_many(&self, writes: &[Small<'_>]) -> Vec<Result<Done, StoreError>> {
        let mut results: Vec<Option<Result<Done, StoreError>>> =
            writes.iter().map(|_| None).collect();
        let mut group: Vec<Journaled<'_>> = Vec::new();
        let mut held = vec![false; STRIPES];
        for (index, write) in writes.iter().enumerate() {
            let (pool, key) = write.pool_key();
            let stripe = (key_hash(key) as usize) % STRIPES;
            if held[stripe] {
                self.finish_group(&mut group, writes, &mut results);
                held.fill(false);
            }
            // What a put stores is checked before the stripe, as a put alone does.
            let prepared = match write {
                Small::Put(request) => match self.prepare_put(request) {
                    Ok(Some(prepared)) if prepared.file_bytes <= JOURNAL_OBJECT_MAX => {
                        Some(prepared)
                    }
                    Ok(Some(prepared)) => {
                        drop(prepared);
                        self.finish_group(&mut group, writes, &mut results);
                        held.fill(false);
                        results[index] = Some(self.put_in(request, None).map(Done::Put));
                        continue;
                    }
                    Ok(None) => {
                        results[index] = Some(Ok(Done::Put(PutOutcome::AlreadyStored)));
                        continue;
                    }
                    Err(error) => {
                        results[index] = Some(Err(error));
                        continue;
                    }
                },
                Small::Delete { version, epoch, pg_seed, .. } => {
                    if self.parse_clone(pool, key).is_some() {
                        // A clone's removal (a trim) is no tombstone.
                        self.finish_group(&mut group, writes, &mut results);
                        held.fill(false);
                        let removed = self.delete_in(pool, key, *version, *epoch, *pg_seed, None);
                        results[index] = Some(removed.map(Done::Delete));
                        continue;
                    }
                    None
                }
            };
            // Nothing waits while the group holds stripes and records not applied (another
            // writer holding this stripe may be waiting for the journal's checkpoint of
            // them): a stripe held elsewhere, or a partial clone to complete (journaled
            // too), finish the group first.
            let guard = match self.stripes[stripe].try_lock() {
                Ok(guard) if group.is_empty() || !self.has_partial(pool, key) => guard,
                Ok(guard) => {
                    drop(guard);
                    self.finish_group(&mut group, writes, &mut results);
                    held.fill(false);
                    self.stripes[stripe].lock().expect("stripe lock")
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    self.finish_group(&mut group, writes, &mut results);
                    held.fill(false);
                    self.stripes[stripe].lock().expect("stripe lock")
                }
                Err(std::sync::TryLockError::Poisoned(_)) => panic!("stripe lock poisoned"),
            };
            held[stripe] = true;
            // Under the stripe: the checks of a write alone, and the file it stores.
            let staged = match (write, prepared) {
                (Small::Put(request), Some(prepared)) => {
                    let version = request.version;
                    self.refuse_trimmed(pool, key, version)
                        .and_then(|()| self.preserve_for(pool, key, None, version, false))
                        .map(|()| Ok(prepared))
                }
                (Small::Delete { version, epoch, pg_seed, .. }, _) => {
                    self.stage_tombstone(pool, key, *version, *epoch, *pg_seed, None)
                }
                (Small::Put(_), None) => unreachable!("a put is prepared above"),
            };
            let staged = match staged {
                Ok(Ok(staged)) => staged,
                Ok(Err(done)) => {
                    results[index] = Some(Ok(done));
                    continue;
                }
                Err(error) => {
                    results[index] = Some(Err(error));
                    continue;
                }
            };
            let content = staged.content(write.data());
            let mut begun =
                self.journal_begin(&staged.path, pool, key, &staged.entry, &content, false);
            if let Ok(None) = begun {
                // The journal waits for a checkpoint, which waits for this group's files.
                self.finish_group(&mut group, writes, &mut results);
                held.fill(false);
                held[stripe] = true;
                begun = self.journal_begin(&staged.path, pool, key, &staged.entry, &content, true);
            }
            drop(content);
            match begun {
                Ok(None) => unreachable!("an append that waits appends"),
                Ok(Some((applying, seq, existing))) => {
                    self.unflushed_bytes.fetch_add(staged.file_bytes, Ordering::Relaxed);
                    group.push(Journaled {
                        index,
                        staged,
                        applying,
                        seq,
                        existing,
                        _stripe: guard,
                    });
                }
                Err(error) => results[index] = Some(Err(error)),
            }
        }
        self.finish_group(&mut group, writes, &mut results);
        results
            .into_iter()
            .map(|result| result.expect("every write of a batch has its result"))
            .collect()
    }

    /// Waits until the group's records are durable, then writes and indexes its files, and
    /// releases their stripes.
    fn finish_group<'s>(
        &'s self,
        group: &mut Vec<Journaled<'s>>,
        writes: &[Small<'_>],
        results: &mut [Option<Result<Done, StoreError>>],
    ) {
        let Some(last) = group.iter().map(|journaled| journaled.seq).max() else { return };
        let durable = self.journal.wait_durable(last);
        for journaled in group.drain(..) {
            let Journaled { index, staged, applying, existing, _stripe, .. } = journaled;
            let write = &writes[index];
            let result = match &durable {
                Ok(()) => self.journal_finish(
                    &staged.path,
                    write.pool_key(),
                    staged.entry,
                    &staged.content(write.data()),
                    applying,
                    existing,
                ),
                Err(error) => Err(StoreError::Io {
                    operation: "journal",
                    path: staged.path.clone(),
                    source: io::Error::new(error.kind(), error.to_string()),
                }),
            };
            self.unflushed_bytes.fetch_sub(staged.file_bytes, Ordering::Relaxed);
            results[index] = Some(result.map(|()| staged.done));
        }
    }

    /// Deletes an object (blocking), leaving a tombstone so that no older copy can come
    /// back: with `version`, a tombstone at that version (recorded even when nothing was
    /// stored, refused with [`StoreError::VersionConflict`] when a newer version is);
    /// without, a tombstone at the stored version (nothing to do when nothing is stored).
    pub fn delete(
        &self,
        pool: PoolId,
        key: &str,
        version: Option<ObjectVersion>,
        epoch: Epoch,
        pg_seed: Option<u32>,
    ) -> Result<DeleteOutcome, StoreError> {
        self.delete_in(pool, key, version, epoch, pg_seed, None)
    }

    /// [`delete`](Self::delete) under a volume's snapshot context: what is stored is first
    /// kept as a clone when the newest snapshot sees it. Such a delete names its version.
    pub fn delete_in(
        &self,
        pool: PoolId,
        key: &str,
        version: Option<ObjectVersion>,
        epoch: Epoch,
        pg_seed: Option<u32>,
        snap: Option<SnapContext>,
    ) -> Result<DeleteOutcome, StoreError> {
        if self.parse_clone(pool, key).is_some() {
            // A snapshot's clone no snapshot sees any more (a trim): removed outright. No
            // tombstone is needed: a copy that comes back (from a replica that missed the
            // trim) is never the newest content below any snapshot's mark, so no read sees
            // it, and the next trim removes it again. Recorded before it is removed, so that
            // a copy a peer still held (catching up, rebalancing, repair, while the trim
            // reaches the replicas one by one) is not stored afterwards: once the trim is over
            // nothing would remove it ([`DeviceStore::refuse_trimmed`]).
            if let Some(version) = version {
                self.trimmed.lock().expect("trimmed lock").note(pool, key, version);
            }
            let removed = self.purge(pool, key, version)?;
            return Ok(if removed { DeleteOutcome::Deleted } else { DeleteOutcome::Absent });
        }
        if let (Some(snap), None) = (snap, version) {
            return Err(StoreError::BadRange(format!(
                "a delete of '{key}' under snapshot {} must name its version",
                snap.seq
            )));
        }
        let _stripe = self.stripe(key);
        match self.stage_tombstone(pool, key, version, epoch, pg_seed, snap)? {
            Err(Done::Delete(outcome)) => Ok(outcome),
            Err(Done::Put(_)) => unreachable!("a delete's outcome"),
            Ok(staged) => {
                let Done::Delete(outcome) = staged.done else { unreachable!("a delete's outcome") };
                self.store_journaled(
                    staged.path.clone(),
                    pool,
                    key,
                    staged.entry,
                    &[&staged.head],
                )?;
                Ok(outcome)
            }
        }
    }

    /// A delete's checks under the key's stripe (the caller holds it), and the tombstone it
    /// stores; or how it ended without one (nothing stored, or that tombstone already).
    fn stage_tombstone(
        &self,
        pool: PoolId,
        key: &str,
        version: Option<ObjectVersion>,
        epoch: Epoch,
        pg_seed: Option<u32>,
        snap: Option<SnapContext>,
    ) -> Result<Result<Staged<'_>, Done>, StoreError> {
        let existing = self.entry(pool, key);
        let was_live = existing.is_some_and(|e| !e.deleted);
        let outcome = if was_live { DeleteOutcome::Deleted } else { DeleteOutcome::Absent };
        let version = match (version, existing) {
            (Some(version), Some(entry)) if entry.version > version => {
                return Err(StoreError::VersionConflict {
                    stored: entry.version,
                    offered: version,
                });
            }
            (Some(version), _) => version,
            (None, Some(entry)) if !entry.deleted => entry.version,
            (None, _) => return Ok(Err(Done::Delete(DeleteOutcome::Absent))),
        };
        if existing.is_some_and(|e| e.deleted && e.version == version) {
            return Ok(Err(Done::Delete(outcome)));
        }
        // The copy's own seed, else the one the deleter sent (a tombstone for a key this
        // device never held: rebalancing and catching up place it by its seed).
        let pg_seed = existing.and_then(|e| e.pg_seed).or(pg_seed);
        self.preserve_for(pool, key, snap, version, false)?;
        let mut staged = self.tombstone_staged(pool, key, version, pg_seed, epoch)?;
        staged.done = Done::Delete(outcome);
        Ok(Ok(staged))
    }

    /// Replaces whatever `key` holds by a tombstone at `version` (blocking), unless a newer
    /// version is stored.
    pub(super) fn write_tombstone(
        &self,
        pool: PoolId,
        key: &str,
        version: ObjectVersion,
        pg_seed: Option<u32>,
        epoch: Epoch,
    ) -> Result<(), StoreError> {
        let staged = self.tombstone_staged(pool, key, version, pg_seed, epoch)?;
        self.store_journaled(staged.path.clone(), pool, key, staged.entry, &[&staged.head])
    }

    /// A tombstone's file. It needs no room check: it replaces something at least as large,
    /// or is a few dozen bytes that must not be refused (a refused delete would be undone
    /// later). Durable by the journal.
    fn tombstone_staged(
        &self,
        pool: PoolId,
        key: &str,
        version: ObjectVersion,
        pg_seed: Option<u32>,
        epoch: Epoch,
    ) -> Result<Staged<'_>, StoreError> {
        let header = ObjectHeader::tombstone(pool, pg_seed, version, epoch);
        let head = header.encode(key);
        let file_bytes = head.len() as u64;
        let path = self.path_of(pool, key);
        self.ensure_parent(&path)?;
        let entry = entry_of(&header, file_bytes, &[]);
        Ok(Staged {
            _reservation: None,
            path,
            head,
            entry,
            file_bytes,
            done: Done::Delete(DeleteOutcome::Deleted),
        })
    }

    /// Stores a small object file through the journal (the caller holds the key's stripe):
    /// its content is made durable in the journal first, then the file is written without
    /// syncs — in place: as a new file for a key the device does not hold (no reader opens a
    /// path before it is indexed), over the old file's content when it is a whole object at
    /// least as large (a tombstone always is; see [`crate::disk::Disk::overwrite`]: a reader
    /// without the stripe that sees it half rewritten reads again under the stripe, in
    /// [`get_bytes`](Self::get_bytes)) — else to a temporary file renamed over the old one (a
    /// block object, which local readers and range reads read in place, or a larger file,
    /// which could not be written whole on a full disk). The journal's checkpoint makes the
    /// file durable; a replay rewrites it after a crash, whatever a crash left half written.
    pub(super) fn store_journaled(
        &self,
        path: PathBuf,
        pool: PoolId,
        key: &str,
        entry: Entry,
        content: &[&[u8]],
    ) -> Result<(), StoreError> {
        let Some((applying, seq, existing)) =
            self.journal_begin(&path, pool, key, &entry, content, true)?
        else {
            unreachable!("an append that waits appends")
        };
        self.journal.wait_durable(seq).map_err(|source| StoreError::Io {
            operation: "journal",
            path: path.clone(),
            source,
        })?;
        self.journal_finish(&path, (pool, key), entry, content, applying, existing)
    }

    /// The first half of [`store_journaled`](Self::store_journaled): checks the version
    /// stored and appends the record; its guard and sequence number, and the entry stored
    /// before. None without `wait` when the append would wait ([`Journal::append_put`]).
    ///
    /// [`Journal::append_put`]: crate::journal::Journal::append_put
    fn journal_begin(
        &self,
        path: &Path,
        pool: PoolId,
        key: &str,
        entry: &Entry,
        content: &[&[u8]],
        wait: bool,
    ) -> Result<Option<Begun<'_>>, StoreError> {
        let existing = self.entry(pool, key);
        if let Some(existing) = &existing {
            check_version(existing, entry)?;
        }
        let appended = self.journal.append_put(path, content, wait).map_err(|source| {
            StoreError::Io { operation: "journal", path: path.to_path_buf(), source }
        })?;
        Ok(appended.map(|(applying, seq)| (applying, seq, existing)))
    }

    /// The second half, once the record is durable: writes the file and indexes it.
    fn journal_finish(
        &self,
        path: &Path,
        (pool, key): (PoolId, &str),
        entry: Entry,
        content: &[&[u8]],
        applying: Applying<'_>,
        existing: Option<Entry>,
    ) -> Result<(), StoreError> {
        let in_place = match &existing {
            None => match self.disk.write_temp(path, content, false) {
                Ok(()) => true,
                // A file the index does not know (a write that failed before): replaced.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
                Err(source) => {
                    return Err(StoreError::Io {
                        operation: "write",
                        path: path.to_path_buf(),
                        source,
                    });
                }
            },
            // A large file cut down would free its blocks here, in the writer's thread:
            // replaced by a rename instead, and released in the background.
            Some(old)
                if !old.blocks
                    && entry.file_bytes <= old.file_bytes
                    && old.file_bytes - entry.file_bytes < super::release::RELEASE_FROM_BYTES =>
            {
                // A failure (the file gone, an I/O error) may have left it half written: the
                // classic way below replaces it whole, or fails the write.
                self.disk.overwrite(path, content).is_ok()
            }
            Some(_) => false,
        };
        let mut replaced = None;
        if !in_place {
            let temp = self.temp_path();
            self.disk.write_temp(&temp, content, false).map_err(StoreError::io("write", &temp))?;
            replaced = self.hold_if_large(path, existing.as_ref());
            if let Err(source) = self.disk.rename(&temp, path) {
                let _ = self.disk.remove(&temp);
                return Err(StoreError::Io {
                    operation: "rename",
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
        drop(applying);
        self.index_published(pool, key, entry);
        if let Some(file) = replaced {
            self.releaser.release(file);
        }
        Ok(())
    }

    /// Stores a small whole object ([`is_small_put`]) through the device's writer thread,
    /// in a batch with the others queued meanwhile ([`write_many`](Self::write_many)).
    pub async fn put_small(self: &Arc<Self>, put: SmallPut) -> Result<PutOutcome, StoreError> {
        match self.through_writer(Job::Put(put)).await? {
            Done::Put(outcome) => Ok(outcome),
            Done::Delete(_) => unreachable!("a put's result"),
        }
    }

    /// Deletes an object as [`delete`](Self::delete) does, through the device's writer
    /// thread, in a batch with the writes queued meanwhile.
    pub async fn delete_small(
        self: &Arc<Self>,
        delete: SmallDelete,
    ) -> Result<DeleteOutcome, StoreError> {
        match self.through_writer(Job::Delete(delete)).await? {
            Done::Delete(outcome) => Ok(outcome),
            Done::Put(_) => unreachable!("a delete's result"),
        }
    }

    async fn through_writer(self: &Arc<Self>, job: Job) -> Result<Done, StoreError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.queue(job, reply)?;
        answer.await.unwrap_or_else(|_| Err(self.writer_stopped()))
    }

    /// Queues a write for the writer thread, starting it if it is not running.
    fn queue(self: &Arc<Self>, job: Job, reply: Reply) -> Result<(), StoreError> {
        let mut queue = self.writer.lock().expect("writer lock");
        let job = match queue.as_ref() {
            Some(sender) => match sender.send((job, reply)) {
                Ok(()) => return Ok(()),
                // The thread ended (a panic): started again below.
                Err(mpsc::SendError(job)) => job,
            },
            None => (job, reply),
        };
        let (sender, receiver) = mpsc::channel();
        let store = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("optio-writer".into())
            .spawn(move || run_writer(&store, &receiver))
            .map_err(|source| StoreError::Io {
                operation: "start the writer thread of",
                path: self.root.clone(),
                source,
            })?;
        sender.send(job).map_err(|_| self.writer_stopped())?;
        *queue = Some(sender);
        Ok(())
    }

    fn writer_stopped(&self) -> StoreError {
        StoreError::Io {
            operation: "write through the writer thread of",
            path: self.root.clone(),
            source: io::Error::other("the device's writer thread stopped"),
        }
    }
}

/// The writer thread: takes every write queued, stores them as one batch, answers each;
/// ends when the store is gone (its queue then closes).
fn run_writer(store: &Weak<DeviceStore>, queue: &mpsc::Receiver<(Job, Reply)>) {
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        while jobs.len() < BATCH_MAX {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        // (Dropping the replies tells their writers the store is gone.)
        let Some(store) = store.upgrade() else { return };
        let slices: Vec<Vec<&[u8]>> = jobs
            .iter()
            .map(|(job, _)| match job {
                Job::Put(put) => put.parts.iter().map(|part| &part[..]).collect(),
                Job::Delete(_) => Vec::new(),
            })
            .collect();
        let writes: Vec<Small<'_>> = jobs
            .iter()
            .zip(&slices)
            .map(|((job, _), data)| match job {
                Job::Put(put) => Small::Put(PutRequest {
                    pool: put.pool,
                    key: &put.key,
                    data,
                    version: put.version,
                    checksum: put.checksum,
                    pg_seed: put.pg_seed,
                    epoch: put.epoch,
                }),
                Job::Delete(delete) => Small::Delete {
                    pool: delete.pool,
                    key: &delete.key,
                    version: delete.version,
                    epoch: delete.epoch,
                    pg_seed: delete.pg_seed,
                },
            })
            .collect();
        let results = store.write_many(&writes);
        drop(writes);
        drop(slices);
        for ((_, reply), result) in jobs.into_iter().zip(results) {
            let _ = reply.send(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::RealDisk;
    use crate::store::DeviceConfig;
    use bytes::Bytes;

    const POOL: PoolId = PoolId(1);

    fn open(dir: &Path) -> DeviceStore {
        let config = DeviceConfig { id: 0, dir: dir.to_path_buf(), capacity_bytes: 1 << 30 };
        DeviceStore::open(&config, Arc::new(RealDisk)).unwrap()
    }

    fn request<'a>(key: &'a str, data: &'a [&'a [u8]], version: u64) -> PutRequest<'a> {
        PutRequest {
            pool: POOL,
            key,
            data,
            version: ObjectVersion(version),
            checksum: None,
            pg_seed: Some(3),
            epoch: Epoch(1),
        }
    }

    fn read(store: &DeviceStore, key: &str) -> (u64, Vec<u8>) {
        let (info, data) = store.get(POOL, key).unwrap();
        (info.version.0, data)
    }

    /// `check` holds on `store`, and on the device opened again after it is closed.
    fn holds_and_after_a_reopen(store: DeviceStore, dir: &Path, check: impl Fn(&DeviceStore)) {
        check(&store);
        drop(store);
        check(&open(dir));
    }

    /// A batch stores each write as [`DeviceStore::put_in`] alone would, in order: two
    /// writes of one key (the later wins), a retry (already stored), an older version
    /// (refused), a bad checksum (refused, nothing stored), a write too large for the journal
    /// (stored on its own); and what it stored is there after a reopen.
    #[test]
    fn a_batch_stores_each_write_as_one_alone_would_and_durably() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let big = vec![7u8; 200 << 10];
        let (a1, a2, b, c) = ([&b"a one"[..]], [&b"a two"[..]], [&b"bee"[..]], [&b"sea"[..]]);
        let large = [&big[..]];
        let mut bad = request("bad", &c, 1);
        bad.checksum = Some(1);
        let writes = [
            request("a", &a1, 1),
            request("b", &b, 1),
            request("a", &a2, 2),
            request("b", &b, 1),
            request("a", &a1, 1),
            bad,
            request("large", &large, 1),
            request("c", &c, 4),
        ]
        .map(Small::Put);
        let results = store.write_many(&writes);
        assert!(matches!(results[0], Ok(Done::Put(PutOutcome::Stored))), "{:?}", results[0]);
        assert!(matches!(results[1], Ok(Done::Put(PutOutcome::Stored))), "{:?}", results[1]);
        assert!(matches!(results[2], Ok(Done::Put(PutOutcome::Stored))), "{:?}", results[2]);
        assert!(matches!(results[3], Ok(Done::Put(PutOutcome::AlreadyStored))), "{:?}", results[3]);
        assert!(matches!(results[4], Err(StoreError::VersionConflict { .. })), "{:?}", results[4]);
        assert!(matches!(results[5], Err(StoreError::ChecksumMismatch { .. })), "{:?}", results[5]);
        assert!(matches!(results[6], Ok(Done::Put(PutOutcome::Stored))), "{:?}", results[6]);
        assert!(matches!(results[7], Ok(Done::Put(PutOutcome::Stored))), "{:?}", results[7]);
        let check = |store: &DeviceStore| {
            assert_eq!(read(store, "a"), (2, b"a two".to_vec()));
            assert_eq!(read(store, "b"), (1, b"bee".to_vec()));
            assert_eq!(read(store, "c"), (4, b"sea".to_vec()));
            assert_eq!(read(store, "large"), (1, big.clone()));
            assert!(matches!(store.get(POOL, "bad"), Err(StoreError::NotFound)));
        };
        assert!(store.journal.pending() > 0, "the small files are durable by the journal");
        holds_and_after_a_reopen(store, dir.path(), check);
    }

    /// Deletes in a batch, between writes, end as a delete alone would: a tombstone where
    /// the object was (deleted), a tombstone recorded at the version named for a key never
    /// held (absent), nothing for an absent key without a version, an older version
    /// refused; the tombstones are there after a reopen.
    #[test]
    fn deletes_in_a_batch_leave_tombstones_as_a_delete_alone_would() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (a, b) = ([&b"aaa"[..]], [&b"bbb"[..]]);
        let delete = |key, version: Option<u64>| Small::Delete {
            pool: POOL,
            key,
            version: version.map(ObjectVersion),
            epoch: Epoch(1),
            pg_seed: Some(3),
        };
        let writes = [
            Small::Put(request("a", &a, 5)),
            Small::Put(request("b", &b, 5)),
            delete("a", None),
            delete("b", Some(4)),
            delete("never", Some(9)),
            delete("nothing", None),
            Small::Put(request("c", &a, 1)),
        ];
        let results: Vec<_> = store.write_many(&writes);
        let deleted = |outcome| Some(Done::Delete(outcome));
        assert_eq!(results[0].as_ref().ok(), Some(&Done::Put(PutOutcome::Stored)));
        assert_eq!(results[1].as_ref().ok(), Some(&Done::Put(PutOutcome::Stored)));
        assert_eq!(results[2].as_ref().ok(), deleted(DeleteOutcome::Deleted).as_ref());
        assert!(matches!(results[3], Err(StoreError::VersionConflict { .. })), "{:?}", results[3]);
        assert_eq!(results[4].as_ref().ok(), deleted(DeleteOutcome::Absent).as_ref());
        assert_eq!(results[5].as_ref().ok(), deleted(DeleteOutcome::Absent).as_ref());
        let check = |store: &DeviceStore| {
            assert!(matches!(store.get(POOL, "a"), Err(StoreError::NotFound)));
            assert_eq!(store.tombstone(POOL, "a"), Some(ObjectVersion(5)));
            assert_eq!(read(store, "b"), (5, b"bbb".to_vec()));
            assert_eq!(store.tombstone(POOL, "never"), Some(ObjectVersion(9)));
            assert_eq!(store.tombstone(POOL, "nothing"), None);
            assert_eq!(read(store, "c"), (1, b"aaa".to_vec()));
        };
        holds_and_after_a_reopen(store, dir.path(), check);
    }

    /// A batch of more records than the journal's two segments hold, none sharing a stripe
    /// (one group): the journal would wait for a checkpoint of the group's own records, so
    /// the group is finished first, and every write is stored.
    #[test]
    fn a_batch_larger_than_the_journal_is_stored_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let data = vec![9u8; 120 << 10];
        let parts = [&data[..]];
        let mut used = vec![false; STRIPES];
        let mut keys = Vec::new();
        let count = (2 * crate::journal::SEGMENT_BYTES / (120 << 10) + 20) as usize;
        for i in 0.. {
            let key = format!("k{i}");
            let stripe = (key_hash(&key) as usize) % STRIPES;
            if !used[stripe] {
                used[stripe] = true;
                keys.push(key);
            }
            if keys.len() == count {
                break;
            }
        }
        let writes: Vec<_> = keys.iter().map(|key| Small::Put(request(key, &parts, 1))).collect();
        let results = store.write_many(&writes);
        for (key, result) in keys.iter().zip(&results) {
            assert!(matches!(result, Ok(Done::Put(PutOutcome::Stored))), "{key}: {result:?}");
        }
        for key in &keys {
            assert_eq!(read(&store, key).1.len(), data.len(), "{key}");
        }
    }

    /// The writer thread answers many writes sent at once, each with its own result, and
    /// does not keep its store open: dropping the store releases the device (its lock).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_answers_each_write_and_ends_with_its_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(open(dir.path()));
        let mut tasks = Vec::new();
        for i in 0..200u64 {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let put = SmallPut {
                    pool: POOL,
                    key: format!("w{}", i % 50),
                    parts: vec![Bytes::from(format!("value {i}"))],
                    version: ObjectVersion(i + 1),
                    checksum: None,
                    pg_seed: None,
                    epoch: Epoch(1),
                };
                store.put_small(put).await
            }));
        }
        for task in tasks {
            match task.await.unwrap() {
                // A later version of the same key may come first.
                Ok(PutOutcome::Stored) | Err(StoreError::VersionConflict { .. }) => {}
                other => panic!("{other:?}"),
            }
        }
        for k in 0..50u64 {
            let (version, data) = read(&store, &format!("w{k}"));
            assert_eq!(data, format!("value {}", version - 1).into_bytes());
            assert_eq!((version - 1) % 50, k);
        }
        assert!(store.writer.lock().unwrap().is_some(), "the writer was started");
        let delete = |key: &str| SmallDelete {
            pool: POOL,
            key: key.to_string(),
            version: None,
            epoch: Epoch(1),
            pg_seed: None,
        };
        assert_eq!(store.delete_small(delete("w3")).await.unwrap(), DeleteOutcome::Deleted);
        assert_eq!(store.delete_small(delete("w3")).await.unwrap(), DeleteOutcome::Absent);
        assert!(matches!(store.get(POOL, "w3"), Err(StoreError::NotFound)));
        drop(store);
        // The thread holds no reference: the store is closed, and opens again at once.
        let reopened = open(dir.path());
        assert_eq!(read(&reopened, "w7").1, b"value 157".to_vec());
    }
}
