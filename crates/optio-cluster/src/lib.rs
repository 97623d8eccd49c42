//! # optio-cluster
//!
//! Where an Optio cluster's map (and its dirty table) lives.
//!
//! * [`MapSource`] ([`source`]): one interface over the two places a map can live — a file
//!   (`map.toml` in a cluster directory: one machine, the embedded default) or etcd (beyond one
//!   machine: `etcd://HOST:PORT[/prefix]`). Both offer the same operations: load the map, store
//!   it only if none is stored, replace it, compare-and-swap it on its epoch (two editors of
//!   the same epoch: exactly one wins, the other gets [`ClusterError::Conflict`]), apply a
//!   change to it ([`edit`]: load, apply, report, epoch + 1, swap, the change applied again
//!   after a lost race), watch it (each newer map, epochs strictly increasing),
//!   and keep one small status document per member (migration progress for `optio status`).
//! * [`etcd`]: the etcd backend, a small client of etcd's v3 JSON gateway over HTTP — chosen
//!   over the `etcd-client` crate because that one runs `protoc` at build time, which a fresh
//!   machine does not have; the gateway is etcd's documented API and needs nothing to build.
//! * [`file`](mod@file): the file backend: atomic replacement (temporary file, fsync, rename, directory
//!   fsync) and an exclusive lock file around every read-compare-write.
//! * [`mapstore`]: the original synchronous functions over a map file, kept for callers that
//!   are not async (`optio up`); they run on the file backend.
//! * [`codec`]: what both back ends share below them — the map's encoding, member names,
//!   size limits; [`durable`]: the one atomic, durable file replacement.
//! * [`dir`]: a cluster directory (`--cluster DIR`): where its map and dirty table live;
//!   [`lockfile`]: a data directory held by one process.
//! * [`dirty`]: elastic consistent hashing's dirty table (a local log or a Redis list).
//! * [`keyring`]: the keyring's files (secret keys: read only when private, written with mode
//!   0600, atomically, never through a link); what a keyring holds and how requests are
//!   signed is `optio-proto`'s, which does no file I/O. [`private`]: the other files only
//!   their owner may use.
//!
//! `optio up`'s supervisor and the real etcd and Redis that tests start live in the
//! `optio-local` crate, which servers and clients do not link.
//!
//! The design is written up in `docs/cluster.md` ("Where the map lives").
//!
//! ```no_run
//! use optio_cluster::{ApplyOptions, ClusterError, MapEdit, MapSource};
//! use optio_placement::{DeviceId, MapChange, MovementSample};
//!
//! # async fn example() -> Result<(), ClusterError> {
//! let source = MapSource::parse("etcd://127.0.0.1:2379/optio")?;
//! let map = source.load().await?;
//! let mut watcher = source.watch_after(Some(map.epoch()));
//! // Mark device 3 down: the new map gets epoch + 1; if someone changed the map meanwhile,
//! // the change is applied again to theirs (nothing is overwritten).
//! let change = MapChange::SetState { device: DeviceId(3), up: Some(false), is_in: None };
//! let sample = MovementSample { objects: 1_000, object_bytes: 4 << 20 };
//! let options = ApplyOptions::Judged { sample, allow_below_min_size: true };
//! let MapEdit { old, new, report, .. } = source.apply(&change, options).await?;
//! println!("short of copies: {:?}", report.map(|r| r.short_of_copies));
//! assert_eq!(new.epoch().0, old.epoch().0 + 1);
//! let newer = watcher.next().await?; // the map just stored, or a newer one
//! assert!(newer.epoch() > map.epoch());
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod codec;
pub mod dir;
pub mod dirty;
pub mod durable;
pub mod edit;
pub mod etcd;
pub mod file;
pub mod follow;
pub mod keyring;
pub mod lockfile;
pub mod mapstore;
pub mod monitor;
pub mod private;
pub mod secret;
pub mod source;

pub use codec::validate_member;
pub use edit::{APPLY_ATTEMPTS_MAX, ApplyOptions, MapEdit};
pub use source::{MapSource, MapWatcher};

use optio_placement::Epoch;

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The map could not be parsed.
    #[error("{what}")]
    Map {
        /// What was being done (`cannot parse the map at …`).
        what: String,
        /// Why it failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file could not be created, read or written.
    #[error("{what}")]
    Io {
        /// What was being done (`cannot write /c/map.toml`).
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A file or document is larger than what is read back.
    #[error("{what} is {bytes} bytes, more than the {limit} allowed")]
    TooLarge {
        /// The file or document.
        what: String,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// Another process holds the map file's lock for too long.
    #[error(
        "another process has held the map's lock {} for over {waited:?}; is an `optio` command stuck?",
        lock.display()
    )]
    LockTimeout {
        /// The lock file.
        lock: std::path::PathBuf,
        /// How long this process waited.
        waited: std::time::Duration,
    },
    /// No map is stored at the source yet.
    #[error(
        "no map stored at {source_name}: start a cluster with `optio up --dir DIR` (`--etcd` \
         for a map in etcd), or give a map file"
    )]
    NoMap {
        /// The source, as [`MapSource::describe`] gives it.
        source_name: String,
    },
    /// A compare-and-swap lost: the stored map is no longer the epoch the change was made to.
    #[error(
        "the map changed underneath you (now epoch {}, you edited epoch {}): re-read it and retry",
        found.0,
        expected.0
    )]
    Conflict {
        /// The epoch the change was made to.
        expected: Epoch,
        /// The epoch stored now.
        found: Epoch,
    },
    /// A change to the map was refused by the change itself.
    #[error("the change was refused: {0}")]
    Change(String),
    /// A change to the map was refused by the map's validation.
    #[error("the change was refused: invalid map")]
    Invalid(#[source] optio_placement::MapError),
    /// A [`MapChange`](optio_placement::MapChange) does not apply to the stored map (a device
    /// it names is gone, a weight out of range…): nothing was stored.
    #[error("the change was refused: {0}")]
    Refused(optio_placement::MapError),
    /// A change would leave data with fewer copies than its pool's `min_size` (see
    /// [`ChangeReport::below_min_size`](optio_placement::ChangeReport::below_min_size)), and
    /// the editor did not allow it: nothing was stored.
    #[error(
        "the change (to epoch {}) leaves data with fewer copies than its pool's min_size in {pools}: \
         writes to it would fail until devices return; nothing was stored",
        epoch.0
    )]
    BelowMinSize {
        /// The epoch the change was applied to.
        epoch: Epoch,
        /// The pools, by name.
        pools: String,
    },
    /// A blocking map file operation did not finish (its task panicked or was cancelled).
    #[error("a map file operation failed")]
    Task(#[source] tokio::task::JoinError),
    /// The map source (`--map`) is not a valid file path or etcd URL.
    #[error("invalid map source `{spec}`: {reason}")]
    BadSource {
        /// What was given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The credentials or TLS files the map source (`--map`) is reached with are wrong.
    #[error("invalid map source `{spec}`: {source}")]
    BadAccess {
        /// What was given (a password in it hidden).
        spec: String,
        /// What is wrong.
        #[source]
        source: secret::AccessError,
    },
    /// A member name for a status document is invalid.
    #[error("invalid member name {name:?}: {reason}")]
    BadMember {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A member's status document could not be encoded or decoded.
    #[error("the status of member {member} at {source_name}: {reason}")]
    Status {
        /// The member.
        member: String,
        /// The source.
        source_name: String,
        /// What went wrong.
        reason: String,
    },
    /// etcd did not answer (refused, timed out, connection broken).
    #[error("cannot reach etcd at {url} ({reason}): is it running? check --map")]
    EtcdUnreachable {
        /// The endpoint, `http://HOST:PORT`.
        url: String,
        /// The underlying error.
        reason: String,
    },
    /// etcd answered, but with an error or something this client does not understand.
    #[error("etcd at {url} {reason}")]
    Etcd {
        /// The endpoint, `http://HOST:PORT`.
        url: String,
        /// What it answered.
        reason: String,
    },
}

impl ClusterError {
    /// The message with every cause after it (`cannot write /c/map.toml: No space left on
    /// device`), for a log line or an error that carries text.
    pub fn report(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(error) = cause {
            text.push_str(": ");
            text.push_str(&error.to_string());
            cause = error.source();
        }
        text
    }

    /// An [`ClusterError::Io`] maker for `map_err`: what was being done, the error added later.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
        let what = what.into();
        move |source| ClusterError::Io { what, source }
    }
}
