//! The dirty table behind one enum, whichever backend holds it.

use std::path::Path;

use super::{DirtyEntry, DirtyError, LOCAL_SUBDIR, LocalDirtyLog, RedisDirtyTable, SPILL_SUBDIR};

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
    /// [`LIST_DEFAULT`](super::LIST_DEFAULT) unless `list` is given) whose spill is `local_dir/dirty-spill/`.
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

    /// Appends `entries` at the tail, in order (at most [`PUSH_ENTRIES_MAX`](super::PUSH_ENTRIES_MAX)); durable when
    /// it returns: fdatasync'd in the local log or the spill, or acknowledged by Redis.
    pub async fn push(&self, entries: &[DirtyEntry]) -> Result<(), DirtyError> {
        match self {
            DirtyTable::Local(log) => log.push(entries).await,
            DirtyTable::Redis(table) => table.push(entries).await,
        }
    }

    /// Up to `count` (at most [`RANGE_ENTRIES_MAX`](super::RANGE_ENTRIES_MAX)) entries from position `start` (0 = the
    /// head), oldest first: `LRANGE start start+count-1`.
    pub async fn range(&self, start: u64, count: usize) -> Result<Vec<DirtyEntry>, DirtyError> {
        match self {
            DirtyTable::Local(log) => log.range(start, count).await,
            DirtyTable::Redis(table) => table.range(start, count).await,
        }
    }

    /// Removes up to `count` (at most [`RANGE_ENTRIES_MAX`](super::RANGE_ENTRIES_MAX)) oldest entries; returns how many
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
