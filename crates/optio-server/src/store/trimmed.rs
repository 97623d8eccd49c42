//! The snapshot clones a trim removed from a device, remembered so that a peer's copy of one
//! (rebalancing, catch-up, repair) is not stored again ([`super::DeviceStore`] checks it).

use std::collections::HashMap;

use optio_placement::PoolId;
use optio_proto::ObjectVersion;

/// The snapshot clones a trim removed from a device, with the newest version removed of
/// each: the last `kept` removals at least, however long the trim — two generations of at
/// most `kept` each, the older one dropped when the newer one is full (not all at once: the
/// removals of the moment are the ones a peer's copy can race with).
#[derive(Debug)]
pub(super) struct Trimmed {
    kept: usize,
    current: HashMap<(PoolId, String), ObjectVersion>,
    previous: HashMap<(PoolId, String), ObjectVersion>,
}

impl Trimmed {
    pub(super) fn new(kept: usize) -> Trimmed {
        Trimmed { kept, current: HashMap::new(), previous: HashMap::new() }
    }

    /// Records that `key` was removed at `version`.
    pub(super) fn note(&mut self, pool: PoolId, key: &str, version: ObjectVersion) {
        let id = (pool, key.to_string());
        if self.current.len() >= self.kept && !self.current.contains_key(&id) {
            self.previous = std::mem::take(&mut self.current);
        }
        let newest = self.current.entry(id).or_insert(version);
        *newest = (*newest).max(version);
    }

    /// The newest version of `key` removed, if it is remembered.
    pub(super) fn removed_at(&self, pool: PoolId, key: &str) -> Option<ObjectVersion> {
        if self.current.is_empty() {
            return None;
        }
        let id = (pool, key.to_string());
        self.current.get(&id).copied().max(self.previous.get(&id).copied())
    }
}
