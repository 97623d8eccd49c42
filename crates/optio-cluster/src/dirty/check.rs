//! What one `push` may be given: at most [`PUSH_ENTRIES_MAX`] entries, each by the rules of
//! [`DirtyEntry`] ([`check_entry`]), a refusal saying which entry and why.

use super::codec::check_entry;
use super::{DirtyEntry, DirtyError, PUSH_ENTRIES_MAX};

/// Checks what one `push` is given.
pub(crate) fn check_entries(entries: &[DirtyEntry]) -> Result<(), DirtyError> {
    if entries.len() > PUSH_ENTRIES_MAX {
        return Err(DirtyError::TooMany {
            operation: "push",
            count: entries.len() as u64,
            max: PUSH_ENTRIES_MAX as u64,
        });
    }
    for (index, entry) in entries.iter().enumerate() {
        check_entry(entry).map_err(|reason| DirtyError::InvalidEntry {
            index,
            pool: entry.pool,
            key: entry.key.chars().take(64).collect(),
            reason,
        })?;
    }
    Ok(())
}
