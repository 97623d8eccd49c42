//! Removing a copy outright (no tombstone): copies a device no longer holds for the
//! placement, snapshot clones a trim removes, and admins' purges.

use std::path::{Path, PathBuf};

use optio_placement::PoolId;
use optio_proto::ObjectVersion;

use super::DeviceStore;
use crate::error::StoreError;

impl DeviceStore {
    /// Removes an object or tombstone entirely (blocking), if the stored version is not newer
    /// than `up_to` (any, without): for copies on a device the placement no longer names, and
    /// for undoing a write. Returns whether something was removed.
    pub fn purge(
        &self,
        pool: PoolId,
        key: &str,
        up_to: Option<ObjectVersion>,
    ) -> Result<bool, StoreError> {
        Ok(self.purge_then(pool, key, up_to, true)?.is_some())
    }

    /// [`DeviceStore::purge`]; with `durable` false the removal is not made durable: the
    /// caller syncs the directory returned (the file's, when a copy was removed).
    pub(super) fn purge_then(
        &self,
        pool: PoolId,
        key: &str,
        up_to: Option<ObjectVersion>,
        durable: bool,
    ) -> Result<Option<PathBuf>, StoreError> {
        // A partial clone removed stops being one; a head removed completes its own first
        // (its clone is an object of this device, whose transfer reads it whole: [`super::cow`]).
        self.release_partial(pool, key);
        // A clone removed first makes whole the head redirected to it ([`super::redirect`]).
        self.settle_redirect_to(pool, key)?;
        let _stripe = self.stripe(key);
        self.complete_partial(pool, key)?;
        let Some(entry) = self.entry(pool, key) else { return Ok(None) };
        if let Some(up_to) = up_to
            && entry.version > up_to
        {
            return Err(StoreError::VersionConflict { stored: entry.version, offered: up_to });
        }
        let path = self.path_of(pool, key);
        self.journal.forget(&path).map_err(StoreError::io("journal", &path))?;
        // A large file's blocks are freed by the device's releasing thread ([`super::release`]).
        let held = self.hold_if_large(&path, Some(&entry));
        let removed =
            if durable { self.disk.remove(&path) } else { self.disk.remove_unsynced(&path) };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::Io { operation: "remove", path, source: e }),
        }
        self.forget(pool, key);
        if let Some(file) = held {
            self.releaser.release(file);
        }
        Ok(Some(path.parent().map_or_else(|| self.root.clone(), Path::to_path_buf)))
    }
}
