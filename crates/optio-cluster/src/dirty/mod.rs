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

mod check;
mod codec;
mod entry;
mod error;
mod local;
mod redis_list;
mod table;

pub use codec::CodecError as DirtyCodecError;
pub use entry::DirtyEntry;
pub use error::DirtyError;
pub use local::{COMPACT_POPPED_BYTES_MIN, GROUP_BYTES_MAX, LOG_BYTES_MAX, LocalDirtyLog};
pub use redis_list::{
    DRAIN_INTERVAL, LIST_DEFAULT, PASSWORD_ENV, PASSWORD_FILE_ENV, REDIS_CONNECT_TIMEOUT,
    REDIS_RESPONSE_TIMEOUT, REDIS_RETRY_INTERVAL, RedisAccess, RedisDirtyTable, redact_spec,
    spec_holds_password,
};
pub use table::DirtyTable;

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
