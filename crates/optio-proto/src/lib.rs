//! # optio-proto
//!
//! What Optio's storage servers and clients agree on, with no sockets and no files: object
//! keys and their limits, the on-disk object header, choice records, the metrics a server
//! piggybacks on every answer, the HTTP header names, a device request and its answer as
//! typed values with both their encoding and their decoding ([`request`], [`answer`]), and
//! the error kinds with the status codes they travel as.
//!
//! "No files" holds for secrets too: [`auth`] parses and formats a keyring's text and signs
//! and verifies requests with its keys, but reading and writing keyring files (mode 0600,
//! atomic, never through a link) is `optio_cluster::keyring`'s.
//!
//! Design decisions:
//!
//! * **Everything stored is versioned and checksummed.** An object file is a fixed 64-byte
//!   header (magic, format version, pool, PG, key length, size, crc32c of the data, object
//!   version, epoch, crc32c of the header) followed by the key and the data, so a flipped
//!   byte anywhere is caught on read ([`ObjectHeader`]).
//! * **Integers on the wire.** Utilisations travel as per-mille integers and latencies as
//!   microseconds ([`DeviceMetrics`]), so that every client parses the same numbers.
//! * **Errors are kinds** ([`ErrorKind`]) mapped one-to-one to HTTP status codes, with a
//!   reason for people and the server's epoch for clients that must refresh.
//!
//! ```
//! use optio_proto::{ObjectHeader, ObjectVersion, validate_key};
//! use optio_placement::{Epoch, PoolId};
//!
//! validate_key("photos/2024/cat.jpg").expect("a valid key");
//! assert!(validate_key("").is_err());
//!
//! let data = b"hello";
//! let header = ObjectHeader::new(PoolId(1), None, "greeting", data, ObjectVersion(7), Epoch(3));
//! let mut file = header.encode("greeting");
//! file.extend_from_slice(data);
//! let (decoded, key, body) = ObjectHeader::decode(&file).expect("intact");
//! assert_eq!((decoded, key, body), (header, "greeting", &data[..]));
//! let last = file.len() - 1;
//! file[last] ^= 1; // a flipped bit in the data
//! assert!(ObjectHeader::decode(&file).is_err());
//! ```

#![forbid(unsafe_code)]
#![warn(clippy::cast_possible_truncation)]
#![deny(missing_docs)]

pub mod answer;
pub mod auth;
pub mod blocks;
pub mod body;
pub mod choice;
mod error;
pub mod frames;
mod header;
pub mod hex;
mod key;
mod metrics;
mod migration;
pub mod own;
pub mod request;
pub mod route;
pub mod snap;
pub mod summary;
pub mod wire;

pub use body::{
    Deleted, DeviceStatus, ListQuery, Listing, LocalSocket, PoolSpace, ScrubProgress, ScrubReport,
    ServerHealth, ServerStatus,
};
pub use choice::ChoiceRecord;
pub use error::{ErrorBody, ErrorKind, FormatError};
pub use header::{HEADER_BYTES, OBJECT_FORMAT_VERSION, ObjectHeader, checksum, checksum_append};
pub use key::{
    GATEWAY_PREFIX, KEY_BYTES_MAX, KeyError, is_gateway_key, validate_key, validate_key_bytes,
};
pub use metrics::DeviceMetrics;
pub use migration::{MigrationPhase, MigrationStatus};
pub use route::{Area, Route, RouteError};

use serde::{Deserialize, Serialize};

/// The version of an object: writers stamp every write with a larger one (microseconds since
/// the Unix epoch, made strictly increasing per client), and a replica keeps the largest it
/// has seen, so replicas written in any order converge.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ObjectVersion(pub u64);

/// What a server knows about one stored object (a probe's answer, a listing's row).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectInfo {
    /// The key.
    pub key: String,
    /// Size of the data in bytes.
    pub size_bytes: u64,
    /// Version.
    pub version: ObjectVersion,
    /// crc32c of the data.
    pub checksum: u32,
    /// The placement group the writer placed it in (seed), if the pool has PGs.
    pub pg_seed: Option<u32>,
    /// The epoch of the map the writer used.
    pub epoch: u64,
    /// The object's summary ([`summary`]), in hexadecimal, in listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}
