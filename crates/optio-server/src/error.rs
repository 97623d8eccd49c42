//! Errors of a device's store.

use std::io;
use std::path::PathBuf;

use optio_proto::{ErrorKind, FormatError, ObjectVersion};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No such object or record.
    #[error("not found")]
    NotFound,
    /// The device has no room.
    #[error(
        "device {device} is full: {used_bytes} of {capacity_bytes} bytes used, {needed_bytes} more needed"
    )]
    Full {
        /// The device.
        device: u32,
        /// Bytes the write needed.
        needed_bytes: u64,
        /// Bytes used.
        used_bytes: u64,
        /// Configured capacity.
        capacity_bytes: u64,
    },
    /// A newer version is stored.
    #[error("version {stored:?} is stored, newer than {offered:?}")]
    VersionConflict {
        /// Stored version.
        stored: ObjectVersion,
        /// Offered version.
        offered: ObjectVersion,
    },
    /// A write in place was based on another version than the one stored (this replica
    /// missed a write, or the object is not there): the writer rewrites the object whole.
    #[error(
        "the write in place is based on version {base:?}, but {} is stored",
        stored.map_or("no object".to_string(), |v| format!("version {}", v.0))
    )]
    BaseMismatch {
        /// Stored version (none: no live object).
        stored: Option<ObjectVersion>,
        /// The version the write was based on (none: a new object).
        base: Option<ObjectVersion>,
    },
    /// A range outside the object, or a write in place on an object that cannot take one.
    #[error("{0}")]
    BadRange(String),
    /// The body does not match the checksum the client sent.
    #[error("body checksum is {computed:08x}, the request says {sent:08x}")]
    ChecksumMismatch {
        /// Sent by the client.
        sent: u32,
        /// Computed over the body.
        computed: u32,
    },
    /// A stored file failed verification; it was moved to quarantine.
    #[error("replica at {path} is corrupt ({error}); moved to quarantine")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        error: FormatError,
    },
    /// A stored file holds another version or another key than the index says was stored
    /// (a file replaced behind the server's back); it was moved to quarantine.
    #[error("replica at {path} is not what was stored ({reason}); moved to quarantine")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// Another server process holds the device directory.
    #[error(
        "device directory {} is in use by another optio server{}: stop it first, or give this server other directories",
        dir.display(),
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    InUse {
        /// The device directory.
        dir: PathBuf,
        /// The process holding it, as it wrote in the lock file.
        holder: Option<u32>,
    },
    /// Group or others can write the device directory: any local user could replace or
    /// delete objects, so the server does not start on it.
    #[error(
        "device directory {} has mode {mode:04o}: group or others can write it, so any local user could replace or delete its objects; run `chmod 700 {}` (and check nothing in it was changed), then start the server again",
        dir.display(),
        dir.display()
    )]
    WritableByOthers {
        /// The device directory.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The device directory belongs to another user than the server's.
    #[error(
        "device directory {} is owned by uid {owner}, not by this server's uid {server}: run the server as its owner, or give the directory to the server's user (`chown -R {server} {}`) and make it private (`chmod 700 {}`)",
        dir.display(),
        dir.display(),
        dir.display()
    )]
    OwnedByOther {
        /// The device directory.
        dir: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// The server's (effective) uid.
        server: u32,
    },
    /// The disk failed.
    #[error("{operation} {path}: {source}")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl StoreError {
    /// The wire kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::NotFound => ErrorKind::NotFound,
            StoreError::Full { .. } => ErrorKind::Full,
            StoreError::VersionConflict { .. } | StoreError::BaseMismatch { .. } => {
                ErrorKind::VersionConflict
            }
            StoreError::BadRange(_) => ErrorKind::BadRequest,
            StoreError::ChecksumMismatch { .. } => ErrorKind::BadRequest,
            StoreError::Corrupt { .. } | StoreError::Mismatch { .. } => ErrorKind::Corrupt,
            StoreError::Io { source, .. } if source.kind() == io::ErrorKind::StorageFull => {
                ErrorKind::Full
            }
            StoreError::Io { .. }
            | StoreError::InUse { .. }
            | StoreError::WritableByOthers { .. }
            | StoreError::OwnedByOther { .. } => ErrorKind::Io,
        }
    }

    pub(crate) fn io(
        operation: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(io::Error) -> StoreError {
        let path = path.to_path_buf();
        move |source| StoreError::Io { operation, path, source }
    }
}

/// A store error as a device answers it: its kind, its text, and on a version conflict the
/// version stored (a writer whose clock runs behind then writes above it).
impl From<StoreError> for optio_proto::answer::Refusal {
    fn from(error: StoreError) -> optio_proto::answer::Refusal {
        let stored = match &error {
            StoreError::VersionConflict { stored, .. } => Some(*stored),
            StoreError::BaseMismatch { stored, .. } => Some(stored.unwrap_or_default()),
            _ => None,
        };
        optio_proto::answer::Refusal { kind: error.kind(), reason: error.to_string(), stored }
    }
}
