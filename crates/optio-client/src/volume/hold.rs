//! A write-back cache above a volume (`optio nbd --write-back`): what its hook is (the
//! volume calls it before a snapshot, `crate::snapshot`, so that the snapshot holds every
//! write the cache acknowledged).

use std::sync::Arc;

/// What a write-back cache above a volume returns while it keeps writes out
/// ([`Volume::set_hold_writes`](super::Volume::set_hold_writes)): dropping it lets them in again.
pub type HeldWrites = Box<dyn std::any::Any + Send>;

/// A write-back cache's hook before a snapshot ([`Volume::set_hold_writes`](super::Volume::set_hold_writes)).
pub type HoldWrites = Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<HeldWrites, String>> + Send>,
        > + Send
        + Sync,
>;
