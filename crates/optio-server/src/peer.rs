//! Why bringing a device's copies in line with a peer's failed: the catch-up after a gap,
//! the scrubber's repairs and the rebalancer's transfers share these.

use optio_net::Failure;
use optio_placement::PoolId;

use crate::error::StoreError;

/// Why a transfer between a device of this server and a peer device failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// A newer map arrived during a catch-up pass: the pass starts over with it.
    #[error("a newer map arrived")]
    MapChanged,
    /// The map gives the peer device no address.
    #[error("device {device} has no address in the map")]
    NoAddress {
        /// The peer device.
        device: u32,
    },
    /// Listing a pool of the peer failed.
    #[error("listing pool {} of device {device}: {failure}", pool.0)]
    List {
        /// The pool.
        pool: PoolId,
        /// The peer device.
        device: u32,
        /// What the transport said.
        #[source]
        failure: Failure,
    },
    /// Reading an object from the peer failed.
    #[error("reading '{key}' from device {device}: {failure}")]
    Read {
        /// The object.
        key: String,
        /// The peer device.
        device: u32,
        /// What the transport said.
        #[source]
        failure: Failure,
    },
    /// The peer answered a read without the object's headers.
    #[error("device {device} answered '{key}' without object headers")]
    NoHeaders {
        /// The object.
        key: String,
        /// The peer device.
        device: u32,
    },
    /// The peer refused a transfer or did not answer.
    #[error("{0}")]
    Send(#[source] Failure),
    /// A fetched version could not be stored here.
    #[error("storing a fetched version: {0}")]
    Store(#[source] StoreError),
    /// A tombstone could not be recorded here.
    #[error("recording the tombstone of '{key}': {source}")]
    Tombstone {
        /// The object.
        key: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// A blocking task reading or writing the store panicked or was cancelled.
    #[error("{what} task failed: {source}")]
    Task {
        /// `read`, `write` or `delete`.
        what: &'static str,
        /// Why.
        #[source]
        source: tokio::task::JoinError,
    },
}
