//! The async runtime of the commands that talk to a cluster.

use anyhow::{Context, Result};

/// A multi-threaded runtime for the commands that talk to servers.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
