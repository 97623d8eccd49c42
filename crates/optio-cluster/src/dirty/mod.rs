//! The elastic dirty table: which objects were written while the cluster was not at full power.
//!
//! Elastic consistent hashing (seed 004, "Tracking Dirty Data" and Algorithm 2) lets a pool run
//! with some servers inactive; a write then skips them ("write-availability offloading"). Each
//! such write is recorded here as (pool, key, membership version) *before* it is sent, so that
//! selective re-integration migrates only those objects when servers come back, instead of
//! re-scanning everything.
//!
//! The table is a FIFO list. Writers (clients, possibly several processes) append at the tail
//! with [`DirtyTable::push`]; the re-integrator reads oldest-first from an offset with
//! [`DirtyTable::range`] (Algorithm 2's `fetch_dirty_entry`, restarted from 0 when the version
//! changes) and, at full power, removes what it has re-integrated with
//! [`DirtyTable::pop_front`] (`remove_dirty_entry`).
//!
//! Two backends sit behind one enum (an enum rather than a trait object: two backends, known
//! here, with async methods):
//!
//! * [`LocalDirtyLog`] (spec `local`, the default): an append-only, checksummed log file with
//!   group commit, for one machine; several processes may share it.
//! * [`RedisDirtyTable`] (spec `redis://HOST:PORT[/DB][?list=NAME]`): a Redis LIST, as in the
//!   paper (`RPUSH`, `LRANGE`, `LPOP key count`). When Redis does not answer, pushes go to a
//!   local spill log and are moved to Redis, in order, when it answers again.
//!
//! Entries may repeat (the same object written twice, or an entry re-sent after a crash) and
//! may name objects whose write then failed: re-integration must take each entry as "look at
//! this object", never as "this object exists in this version". See `docs/dirty-table.md`.
//!
//! ```no_run
//! # async fn example() -> Result<(), optio_cluster::dirty::DirtyError> {
//! use optio_cluster::dirty::{DirtyEntry, DirtyTable};
//! let table = DirtyTable::open(None, "/var/lib/optio".as_ref()).await?;
//! table.push(&[DirtyEntry { pool: 3, key: "photos/cat.jpg".into(), version: 9 }]).await?;
//! for entry in table.range(0, 100).await? {
//!     println!("{} written in version {}", entry.key, entry.version);
//! }
//! table.pop_front(1).await?;
//! # Ok(()) }
//! ```

use std::path::Path;

mod codec;
mod error;
mod local;
mod redis_list;

pub use error::DirtyError;
pub use local::{COMPACT_POPPED_BYTES_MIN, GROUP_BYTES_MAX, LOG_BYTES_MAX, LocalDirtyLog};
pub use redis_list::{
    DRAIN_INTERVAL, LIST_DEFAULT, PASSWORD_ENV, PASSWORD_FILE_ENV, REDIS_CONNECT_TIMEOUT,
    REDIS_RESPONSE_TIMEOUT, REDIS_RETRY_INTERVAL, RedisAccess, RedisDirtyTable, redact_spec,
    spec_holds_password,
};

/// The longest key, in bytes (the same as Optio's object keys).
pub const KEY_BYTES_MAX: usize = 1024;
/// The most entries one `push` may carry.
pub const PUSH_ENTRIES_MAX: usize = 4096;
/// The most entries one `range` may return and one `pop_front` may remove.
pub const RANGE_ENTRIES_MAX: usize = 10_000;
/// The local log's directory under the local directory.
pub const LOCAL_SUBDIR: &str = "dirty";
/// The Redis backend's spill log's directory under the local directory.
pub const SPILL_SUBDIR: &str = "dirty-spill";

/// One dirty object: written in `version` while the pool was not at full power.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DirtyEntry {
    /// The object's pool.
    pub pool: u32,
    /// The object's key: non-empty UTF-8 of at most [`KEY_BYTES_MAX`] bytes, without NUL.
    pub key: String,
    /// The membership version the object was written in.
    pub version: u64,
}

/// Checks what one `push` is given.
pub(crate) fn check_entries(entries: &[DirtyEntry]) -> Result<(), DirtyError> {
    if entries.len() > PUSH_ENTRIES_MAX {
        return Err(DirtyError::TooMany {
            operation: "push",
            count: entries.len() as u64,
            max: PUSH_ENTRIES_MAX as u64,
        });
    }
    for (index, entry) in entries.iter().enumerate() {
        codec::check_entry(entry).map_err(|reason| DirtyError::InvalidEntry {
            index,
            pool: entry.pool,
            key: entry.key.chars().take(64).collect(),
            reason,
        })?;
    }
    Ok(())
}

/// The dirty table, in one of its two backends.
#[derive(Debug)]
#[non_exhaustive]
pub enum DirtyTable {
    /// The local log (spec `local`, the default).
    Local(LocalDirtyLog),
    /// A Redis list with a local spill.
    Redis(RedisDirtyTable),
}

impl DirtyTable {
    /// Opens the table named by `spec`: `None` or `"local"` for the local log in
    /// `local_dir/dirty/`; `"redis://HOST:PORT[/DB][?list=NAME]"` for a Redis list (key
    /// [`LIST_DEFAULT`] unless `list` is given) whose spill is `local_dir/dirty-spill/`.
    ///
    /// Redis being down does not fail `open` (writes must go on): it warns, and pushes spill.
    pub async fn open(spec: Option<&str>, local_dir: &Path) -> Result<DirtyTable, DirtyError> {
        match spec {
            None | Some("local") => {
                Ok(DirtyTable::Local(LocalDirtyLog::open(&local_dir.join(LOCAL_SUBDIR)).await?))
            }
            Some(spec) if spec.starts_with("redis://") || spec.starts_with("rediss://") => {
                Ok(DirtyTable::Redis(
                    RedisDirtyTable::open(spec, &local_dir.join(SPILL_SUBDIR)).await?,
                ))
            }
            Some(spec) => {
                let reason = if spec.starts_with("redis+unix") {
                    "only Redis over TCP (`redis://`, or `rediss://` for TLS) is supported"
                        .to_string()
                } else if spec.is_empty() {
                    "the spec is empty".to_string()
                } else {
                    "unknown backend".to_string()
                };
                Err(DirtyError::InvalidSpec { spec: spec.to_string(), reason })
            }
        }
    }

    /// Appends `entries` at the tail, in order (at most [`PUSH_ENTRIES_MAX`]); durable when
    /// it returns: fdatasync'd in the local log or the spill, or acknowledged by Redis.
    pub async fn push(&self, entries: &[DirtyEntry]) -> Result<(), DirtyError> {
        match self {
            DirtyTable::Local(log) => log.push(entries).await,
            DirtyTable::Redis(table) => table.push(entries).await,
        }
    }

    /// Up to `count` (at most [`RANGE_ENTRIES_MAX`]) entries from position `start` (0 = the
    /// head), oldest first: `LRANGE start start+count-1`.
    pub async fn range(&self, start: u64, count: usize) -> Result<Vec<DirtyEntry>, DirtyError> {
        match self {
            DirtyTable::Local(log) => log.range(start, count).await,
            DirtyTable::Redis(table) => table.range(start, count).await,
        }
    }

    /// Removes up to `count` (at most [`RANGE_ENTRIES_MAX`]) oldest entries; returns how many
    /// were removed (`LPOP key count`). Only the re-integrator calls it, at full power.
    pub async fn pop_front(&self, count: u64) -> Result<u64, DirtyError> {
        match self {
            DirtyTable::Local(log) => log.pop_front(count).await,
            DirtyTable::Redis(table) => table.pop_front(count).await,
        }
    }

    /// How many entries the table holds.
    pub async fn len(&self) -> Result<u64, DirtyError> {
        match self {
            DirtyTable::Local(log) => log.len().await,
            DirtyTable::Redis(table) => table.len().await,
        }
    }

    /// Whether the table is empty (Algorithm 2's `isempty_dirty_table`).
    pub async fn is_empty(&self) -> Result<bool, DirtyError> {
        Ok(self.len().await? == 0)
    }

    /// One line for logs and `optio status`: the backend and where it is (no password).
    pub fn describe(&self) -> String {
        match self {
            DirtyTable::Local(log) => format!("local log in {}", log.dir().display()),
            DirtyTable::Redis(table) => table.describe(),
        }
    }
}
