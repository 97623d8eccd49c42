//! Local files read as of a snapshot: a clone's fall-through to its ancestors and a reader of
//! `VOL@SNAP`. Unlike a writer's own objects, whose version the writer knows, what such a
//! read must return is the newest content below the snapshot's mark; a replica's head file
//! that holds a version below the mark is that content (every clone a server keeps is older
//! than its head), for as long as it holds that version, which every read checks. A head at
//! or above the mark (written since the snapshot) is read through the servers, which choose
//! the clone the snapshot sees.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::LocalFile;

/// How long an object whose local file could not serve a snapshot's reads (no replica here,
/// written since the snapshot, …) is read through the servers before it is asked again.
const RETRY: Duration = Duration::from_secs(1);

/// The files open, by data key (which names the volume), at most `max`.
pub(super) struct AsOfFiles {
    slots: Mutex<HashMap<String, Slot>>,
    max: usize,
}

#[derive(Clone)]
enum Slot {
    Open(Arc<LocalFile>),
    Unusable(Instant),
}

/// What is known of a key's local file.
pub(super) enum Lookup {
    /// Open at the client's current epoch: read it.
    Open(Arc<LocalFile>),
    /// None could serve a moment ago: read through the servers.
    Unusable,
    /// Never asked, asked long ago, or opened under an older map: open it.
    Ask,
}

impl AsOfFiles {
    pub(super) fn new(max: usize) -> AsOfFiles {
        AsOfFiles { slots: Mutex::default(), max: max.max(1) }
    }

    pub(super) fn lookup(&self, key: &str, epoch: u64) -> Lookup {
        match self.slots.lock().expect("as-of files lock").get(key) {
            Some(Slot::Open(file)) if file.epoch == epoch => Lookup::Open(file.clone()),
            Some(Slot::Unusable(retry)) if Instant::now() < *retry => Lookup::Unusable,
            _ => Lookup::Ask,
        }
    }

    /// Records what opening `key` gave (`None`: no file usable).
    pub(super) fn opened(&self, key: &str, file: Option<Arc<LocalFile>>) {
        let mut slots = self.slots.lock().expect("as-of files lock");
        if !slots.contains_key(key) && slots.len() >= self.max {
            // Full: let one go (any: a snapshot's reads have no order worth keeping).
            let victim = slots.keys().next().cloned();
            if let Some(victim) = victim {
                slots.remove(&victim);
            }
        }
        let slot = match file {
            Some(file) => Slot::Open(file),
            None => Slot::Unusable(Instant::now() + RETRY),
        };
        slots.insert(key.to_string(), slot);
    }

    /// A read of `file` missed (its version changed, a block failed its checksum): it is
    /// closed, and the key read through the servers for a while.
    pub(super) fn missed(&self, key: &str, file: &Arc<LocalFile>) {
        let mut slots = self.slots.lock().expect("as-of files lock");
        if matches!(slots.get(key), Some(Slot::Open(open)) if Arc::ptr_eq(open, file)) {
            slots.insert(key.to_string(), Slot::Unusable(Instant::now() + RETRY));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.lock().expect("as-of files lock").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_keys_are_not_asked_again_at_once_and_the_table_stays_bounded() {
        let files = AsOfFiles::new(3);
        assert!(matches!(files.lookup("a", 1), Lookup::Ask));
        files.opened("a", None);
        assert!(matches!(files.lookup("a", 1), Lookup::Unusable));
        for key in ["b", "c", "d", "e"] {
            files.opened(key, None);
        }
        assert_eq!(files.len(), 3);
    }
}
