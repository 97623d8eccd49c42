//! End-to-end tests of the `optio` binary: what a user types, what they see, and how it fails;
//! and of the store: server processes on ephemeral loopback ports, real files, real clients.

#![allow(missing_docs)]

mod support;

mod analyze;
mod bad_input;
mod choice;
mod diff;
mod map;
mod place;

// The store (issue 5).
mod cli;
mod client_crash;
mod crash;
mod faults;
mod race;
mod roundtrip;
mod store_support;

// Map changes, rebalancing, etcd, elastic resizing (issue 6).
mod elastic;
mod etcd_cluster;
mod rebalance;

// Failures: detection, degraded writes, catching up, supervision (issue 13).
mod failures;
mod metrics;
mod partition;
mod scrub;

// Authentication and authorisation (issue 14), and the holes issue 36 closed.
#[cfg(feature = "s3")]
mod request_security;
mod security;

// Block volumes (issue 15).
mod volumes;
// Volume snapshots (issue 40).
mod snapshots;
// Block status over NBD for backup tools (issue 40).
mod block_status;
// Incremental backup and space of volume snapshots (issue 40).
mod volume_backup;
// Snapshots and clones with real clients: fio verify, qemu-img, kill -9 (issue 40).
mod snapshot_clients;
// Storage servers and optio nbd killed during snap rm, flatten and clone (issue 40).
mod snapshot_faults;

// Who may use `optio nbd`, and how much one client may make it hold (issue 36).
mod nbd_security;

// The web console and its admin API (issue 42).
mod console;

// The S3 gateway (issue 16).
#[cfg(feature = "s3")]
mod s3;
// The S3 gateway's defences (issue 36).
#[cfg(feature = "s3")]
mod s3_security;

// Erasure-coded pools (issue 41).
mod erasure;

// The emulated multi-rack cluster and `optio bench io` (issue 38).
mod emulate;

pub use store_support::*;
