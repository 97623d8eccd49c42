//! The queue of a device's writer thread (`put`): the writes it takes and how they end.
//! (Types only, so that the store's own file names them without a cycle.)

use std::sync::mpsc;

use bytes::Bytes;
use optio_placement::{Epoch, PoolId};
use optio_proto::{HEADER_BYTES, ObjectVersion};

use crate::error::StoreError;
use crate::journal::JOURNAL_OBJECT_MAX;

/// How a delete ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// A live object was deleted (a tombstone stands in its place).
    Deleted,
    /// No live object was there (a tombstone was recorded if a version was given).
    Absent,
}

/// How a put ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// Stored.
    Stored,
    /// The same version with the same data was already stored (a retried write).
    AlreadyStored,
}

/// A small whole-object write for the device's writer thread (`DeviceStore::put_small`):
/// a `PutRequest` that owns its key and data, without a snapshot context.
pub struct SmallPut {
    /// Pool.
    pub pool: PoolId,
    /// Key (validated).
    pub key: String,
    /// Data, in pieces.
    pub parts: Vec<Bytes>,
    /// Version; a stored newer version wins.
    pub version: ObjectVersion,
    /// crc32c the client computed, checked before storing.
    pub checksum: Option<u32>,
    /// PG seed.
    pub pg_seed: Option<u32>,
    /// Writer's epoch.
    pub epoch: Epoch,
}

/// Whether a whole object of `bytes` under `key` is written through the journal (and may go
/// to `DeviceStore::put_small`).
pub fn is_small_put(key: &str, bytes: u64) -> bool {
    (HEADER_BYTES + key.len()) as u64 + bytes <= JOURNAL_OBJECT_MAX
}

/// A delete for the device's writer thread (`DeviceStore::delete_small`): a
/// `DeviceStore::delete` that owns its key.
pub struct SmallDelete {
    /// Pool.
    pub pool: PoolId,
    /// Key (validated).
    pub key: String,
    /// The version deleted (none: the one stored).
    pub version: Option<ObjectVersion>,
    /// Deleter's epoch.
    pub epoch: Epoch,
    /// PG seed the deleter sent.
    pub pg_seed: Option<u32>,
}

/// A write queued for the writer thread.
pub(super) enum Job {
    Put(SmallPut),
    Delete(SmallDelete),
}

pub(super) type Reply = tokio::sync::oneshot::Sender<Result<Done, StoreError>>;
/// The queue of the device's writer thread.
pub(super) type WriterQueue = std::sync::Mutex<Option<mpsc::Sender<(Job, Reply)>>>;

/// How a small write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Done {
    /// A put's.
    Put(PutOutcome),
    /// A delete's.
    Delete(DeleteOutcome),
}
