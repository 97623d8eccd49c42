//! A write-back cache above a volume (`optio nbd --write-back`): the hook the volume calls
//! before a snapshot, so that the snapshot holds every write the cache acknowledged.

use std::sync::Arc;

use super::{Volume, VolumeError};

/// What a write-back cache above a volume returns while it keeps writes out
/// ([`Volume::set_hold_writes`]): dropping it lets them in again.
pub type HeldWrites = Box<dyn std::any::Any + Send>;

/// A write-back cache's hook before a snapshot ([`Volume::set_hold_writes`]).
pub type HoldWrites = Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<HeldWrites, String>> + Send>,
        > + Send
        + Sync,
>;

impl Volume {
    /// Tells the volume that writes are acknowledged above it before they reach it (a
    /// write-back cache, `optio nbd --write-back`): before each snapshot it calls `hold`,
    /// which writes every acknowledged byte into the volume and keeps new writes out until
    /// the guard it returns is dropped, so the snapshot holds every write acknowledged
    /// before it. A `hold` that fails fails the snapshot (taken again at the next look).
    pub fn set_hold_writes(&self, hold: HoldWrites) {
        *self.hold_writes.lock().expect("hold lock") = Some(hold);
    }

    /// Runs [`Volume::set_hold_writes`]'s hook, if any; its guard.
    pub(crate) async fn hold_writes(&self) -> Result<Option<HeldWrites>, VolumeError> {
        let hold = self.hold_writes.lock().expect("hold lock").clone();
        match hold {
            None => Ok(None),
            Some(hold) => hold().await.map(Some).map_err(|error| {
                VolumeError::Snapshot(format!(
                    "volume '{}': the writes its holder acknowledged could not be written \
                     before the snapshot: {error}",
                    self.name()
                ))
            }),
        }
    }
}
