//! # optio-cluster
//!
//! Where an Optio cluster's map lives and how a local cluster runs.
//!
//! * [`mapstore`]: the map in a file (the embedded default): read it, replace it atomically
//!   with the next epoch. Servers poll it and clients reload it when a server says their
//!   epoch is stale. (etcd comes in a later issue.)
//! * [`local`]: `optio up`'s cluster: one `optio server` process per host on free loopback
//!   ports, the map with their addresses written under the cluster directory, no orphans.
//!
//! ```no_run
//! use optio_cluster::local::{LocalCluster, LocalClusterSpec};
//! let cluster = LocalCluster::start("target/debug/optio".as_ref(), "/tmp/optio".as_ref(),
//!     &LocalClusterSpec::default()).expect("started");
//! println!("map at {}", cluster.map_path().display());
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod dirty;
pub mod local;
pub mod mapstore;

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The map could not be read, parsed or written.
    #[error("{0}")]
    Map(String),
    /// A server did not start or answer.
    #[error("{0}")]
    Server(String),
    /// The cluster's shape is invalid.
    #[error("{0}")]
    Spec(String),
    /// A file could not be created or written.
    #[error("{0}")]
    Io(String),
}
