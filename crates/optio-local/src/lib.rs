//! # optio-local
//!
//! Optio on one machine, outside the libraries that servers and clients link:
//!
//! * [`cluster`]: `optio up`'s supervisor — one `optio server` process per host on free
//!   loopback ports, the map with their addresses (in a file under the cluster directory, or
//!   in an etcd it starts), no orphans. The store's integration tests use it too.
//! * [`etcd`]: a real etcd (Debian's `etcd-server`) on free loopback ports, for
//!   `optio up --etcd` and for tests.
//! * [`redis`]: a real Redis (Debian's `redis-server`) on a free loopback port, for `optio
//!   bench io elastic` (the dirty table in Redis) and for tests of the dirty table.
//! * [`tls`]: a throwaway certificate authority (`optio up --tls`, tests).
//! * [`emulate`]: one machine made to behave like several racks of hosts — network
//!   namespaces, rate-limited links, host conditions — for `optio up --emulate` and `optio
//!   bench io`.
//!
//! Everything here is something `optio` runs; what only tests need (promtool's check of a
//! metrics exposition) is in the `optio-testkit` crate, a dev-dependency.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod cluster;
pub mod emulate;
pub mod etcd;
pub mod host;
pub mod redis;
pub mod tls;

pub use cluster::{LocalCluster, LocalClusterSpec};

use optio_cluster::ClusterError;

/// Why the local cluster could not be started, changed or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// The map store failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A file, directory or process could not be created, read or started.
    #[error("{what}")]
    Io {
        /// What was being done (`cannot start /usr/bin/optio`).
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Another supervisor runs a cluster in this directory.
    #[error(
        "the cluster directory {} is in use by another `optio up`{}: stop it first (Ctrl-C, or kill it), or pick another directory",
        dir.display(),
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    InUse {
        /// The cluster directory.
        dir: std::path::PathBuf,
        /// The process holding it, as it wrote in the lock file.
        holder: Option<u32>,
    },
    /// The cluster's etcd did not start.
    #[error(transparent)]
    Etcd(#[from] crate::etcd::EtcdError),
    /// The cluster's shape is invalid, or names a device it does not have.
    #[error("{0}")]
    Spec(String),
    /// A server (or the cluster's etcd) did not start or answer.
    #[error("{0}")]
    Server(String),
    /// The map made for the cluster is invalid (a bug in the supervisor).
    #[error("the generated map is invalid")]
    Generated(#[source] optio_mapfile::ParseError),
    /// A change to the map was refused by its validation.
    #[error("invalid change")]
    Change(#[source] optio_placement::MapError),
}

impl LocalError {
    /// A [`LocalError::Io`] maker for `map_err`: what was being done, the error added later.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LocalError {
        let what = what.into();
        move |source| LocalError::Io { what, source }
    }
}
