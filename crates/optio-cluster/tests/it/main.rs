//! optio-cluster's integration tests: one binary, one module per subject.

mod dirty_local;
mod dirty_redis;
