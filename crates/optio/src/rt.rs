//! The async runtime of the commands that talk to a cluster.

use anyhow::{Context, Result};

/// A multi-threaded runtime for the commands that talk to servers.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    runtime_with_workers(None)
}

/// A multi-threaded runtime with `workers` worker threads (default: tokio's, one per core,
/// or `TOKIO_WORKER_THREADS`).
pub fn runtime_with_workers(workers: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder.enable_all().build().context("cannot start the async runtime")
}
