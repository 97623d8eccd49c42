//! optio-cluster's integration tests: one binary, one module per subject — the map sources
//! against real files and a real etcd, the dirty table against real files and a real Redis.

mod dirty_local;
mod dirty_redis;
mod etcd_access;
mod sources;
mod statuses;
mod store;
mod support;
mod unreachable;
mod watch;
