//! # optio-client
//!
//! Optio's clever client (CHOICE's "simple server, clever client"): it computes placement
//! from the cluster map, gives every object k candidate placements, probes the candidates'
//! primaries on first access (the servers piggyback their metrics), lets a policy choose where
//! a new object goes, records that choice at the object's home with an atomic
//! create-if-absent, and caches it in 8–14 bytes an object so that later accesses send no
//! probe. It replicates by fan-out, acknowledges a write when w replicas are durable, carries
//! the map epoch on every request and refreshes when a server says it is stale, repairs
//! replicas found corrupt or missing, and keeps an intent log so that a crash leaves no
//! object in doubt.
//!
//! Design decisions (and why) are in `docs/store.md`.
//!
//! ```no_run
//! # async fn example() -> Result<(), optio_client::ClientError> {
//! use optio_client::{Client, ClientConfig};
//! // k and the policy are the pool's (in the map); a client may override the policy.
//! let config = ClientConfig { policy: Some("space".into()), ..ClientConfig::default() };
//! let client = Client::connect("cluster/map.toml".as_ref(), config).await?;
//! let report = client.put("objects", "hello.txt", "hello".into()).await?;
//! println!("written on candidate {} (devices {:?})", report.candidate, report.devices);
//! assert_eq!(&client.get("objects", "hello.txt").await?[..], b"hello");
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod cache;
pub mod candidates;
mod client;
pub mod diff;
pub mod diff_stream;
mod error;
pub mod flatten;
pub mod intent;
mod pace;
pub mod policy;
mod quorum;
pub mod removal;
pub mod snapshot;
pub mod trim;
pub mod volume;
/// The HTTP transport (the `optio-net` crate, shared with the servers' migration).
pub use optio_net as transport;

pub use cache::ChoiceCache;
pub use candidates::{CHOICES_MAX, Candidate};
pub use client::{
    BROUGHT_BACK_TRACKED_MAX, CandidateProbe, Client, ClientConfig, ClientStats, CloneToTrim,
    ListCursor, LocalFile, LocalMiss, ObjectLocation, Patch, ProbeReport, PutReport,
    RECOVERING_BACKOFF_MAX, RECOVERING_BACKOFF_MIN, RECOVERING_RETRIES_MAX, RETRIES_MAX,
    ReadFailure, Reintegration, ReintegrationConfig, ReintegrationError, ReintegrationMode,
    ReintegrationStatus, ReplicaState, STATUS_POLL_INTERVAL, Written,
};
pub use error::ClientError;
