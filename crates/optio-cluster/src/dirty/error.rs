//! Why a dirty-table operation failed.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Why a dirty-table operation failed.
///
/// Every message says what failed, where (file, offset, URL, entry) and what to do. The enum is
/// `Clone` (I/O errors are shared behind an [`Arc`]) so that one failed group commit can answer
/// every push that was part of it.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirtyError {
    /// The table's spec (`--dirty-table`, the map's setting) is not one Optio understands.
    #[error(
        "invalid dirty-table spec `{spec}`: {reason}; use `local` or \
         `redis://[USER@]HOST:PORT[/DB][?list=NAME]` (`rediss://` over TLS)"
    )]
    InvalidSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The credentials or TLS files the table's Redis is reached with are wrong.
    #[error(
        "invalid dirty-table spec `{spec}`: {source}; use `local` or \
         `redis://[USER@]HOST:PORT[/DB][?list=NAME]` (`rediss://` over TLS)"
    )]
    BadAccess {
        /// The spec as given (a password in it hidden).
        spec: String,
        /// What is wrong.
        #[source]
        source: crate::secret::AccessError,
    },
    /// An entry given to `push` breaks a rule (key empty, too long, containing NUL).
    #[error("dirty entry #{index} (pool {pool}, key {key:?}) is invalid: {reason}")]
    InvalidEntry {
        /// Its position in the slice given to `push`.
        index: usize,
        /// Its pool.
        pool: u32,
        /// Its key, cut to 64 bytes.
        key: String,
        /// What is wrong with it.
        reason: super::codec::CodecError,
    },
    /// A call asked for more entries than one call may carry.
    #[error(
        "{operation} of {count} entries is more than the {max} one call may carry; split it \
         into several calls"
    )]
    TooMany {
        /// `push`, `range` or `pop_front`.
        operation: &'static str,
        /// How many were asked for.
        count: u64,
        /// The limit.
        max: u64,
    },
    /// A file of the local log could not be created, read, written or synced.
    #[error("cannot {operation} {}: {source}", path.display())]
    Io {
        /// What was being done (`append to`, `read`, `fdatasync`, …).
        operation: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: Arc<io::Error>,
    },
    /// A file of the local log is not in the expected format (not a torn tail, which is
    /// repaired silently, but a damaged header or head file).
    #[error(
        "{} is damaged at byte {offset}: {reason}; move the directory aside and re-create it \
         (its entries only make re-integration faster: a full scan finds the same objects)",
        path.display()
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where in it.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The local log reached its size limit: the re-integrator has not popped entries for a
    /// long time.
    #[error(
        "the dirty log {} would grow to {bytes} bytes, over its limit of {max} bytes; bring \
         the cluster back to full power so that re-integration can pop entries",
        path.display()
    )]
    Full {
        /// The log file.
        path: PathBuf,
        /// Its size after the refused append.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// Redis did not answer (refused, timed out, connection dropped). Pushes go to the local
    /// spill meanwhile; reads and pops fail with this error until Redis returns.
    #[error(
        "cannot reach Redis at {url}: {message}; re-integration pauses until it returns \
         (pushes are kept in the local spill meanwhile)"
    )]
    RedisUnreachable {
        /// The server (password removed).
        url: String,
        /// What the client library said.
        message: String,
    },
    /// Redis answered with an error (wrong type at the list's key, out of memory, no
    /// permission, …).
    #[error("Redis at {url} refused a command on list `{list}`: {message}")]
    Redis {
        /// The server (password removed).
        url: String,
        /// The list's key.
        list: String,
        /// Redis's answer.
        message: String,
    },
    /// An element of the Redis list is not a dirty entry this version understands.
    #[error(
        "element {position} of Redis list `{list}` at {url} is not a dirty entry: {reason}; \
         remove it (LSET then LREM) or point Optio at another list with `?list=NAME`"
    )]
    CorruptRedisEntry {
        /// The server (password removed).
        url: String,
        /// The list's key.
        list: String,
        /// Its position from the head of the list.
        position: u64,
        /// Why it does not decode.
        reason: super::codec::CodecError,
    },
    /// A background task of the table stopped before answering (a bug: please report it).
    #[error("the dirty table's {task} stopped before answering: {reason}")]
    Background {
        /// Which task.
        task: &'static str,
        /// Why.
        reason: String,
    },
}

impl DirtyError {
    /// An [`DirtyError::Io`] about `path`.
    pub(crate) fn io(operation: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        DirtyError::Io { operation, path: path.into(), source: Arc::new(source) }
    }
}
