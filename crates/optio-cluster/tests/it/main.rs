//! Integration tests of optio-cluster: the map sources against real files and a real etcd.

mod sources;
mod statuses;
mod store;
mod support;
mod unreachable;
mod watch;
