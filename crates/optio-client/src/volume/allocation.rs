//! Which bytes of a volume are stored, and where (`docs/nbd.md`, "Structured replies and
//! block status"): what `optio nbd` answers `NBD_CMD_BLOCK_STATUS` with, so that `qemu-img
//! convert`, `qemu-img map` and `nbdcopy` skip what was never written.
//!
//! At data-object granularity: an object is stored or not, whatever it holds. The answer must
//! never call a range unstored that reads as anything but zeros (a backup would lose it), so
//! every source errs towards "stored":
//!
//! * **A writer** (a read-write open, the volume's only one while it holds the lock) lists the
//!   volume's objects once, at the first question, and adds every object it writes from the
//!   moment it opened — noted before the write is sent, so a write that failed half-way counts
//!   as stored. Objects only go away by its own shrinking (still counted: harmless).
//! * **A snapshot** (`VOL@SNAP`) lists the volume's objects and their clones once: an object
//!   is stored if some content of it has a version below the snapshot's mark — what a read as
//!   of the mark finds (clones of deletions counted as content). A snapshot does not change.
//! * **A read-only open of a live volume** (another client may write it) reads the volume's
//!   header for each question. A listing taken while no writer held the lock stands as long
//!   as the header has not changed since (every writer takes the lock, a change of the
//!   header, before it writes); otherwise the volume is listed again, unless a listing began
//!   after the question arrived: never older than the question.
//! * **A clone's ancestors** are snapshots: each listed once, as above. An object a clone
//!   never wrote comes from the nearest ancestor that has it, within that ancestor's overlap
//!   (an object that begins inside the overlap counts whole).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use optio_proto::ObjectVersion;
use optio_proto::snap::{parse_clone_key, visible_at};

/// Where a range of a volume's bytes comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// No data object: the bytes read as zeros.
    Nowhere,
    /// The volume's own data objects (the snapshot's, for `VOL@SNAP`).
    Own,
    /// A clone's ancestor (0: its parent snapshot, 1: the parent's parent…): an object the
    /// clone never wrote.
    Ancestor(usize),
}

/// A volume's listings, kept between questions, and what its writer wrote.
#[derive(Default)]
pub(super) struct Allocation {
    /// The data objects this writer wrote, or began to, since it opened the volume.
    pub(super) written: Mutex<BTreeSet<u64>>,
    /// The volume's own data objects as last listed.
    pub(super) own: tokio::sync::Mutex<Option<Listing>>,
    /// Each ancestor's data objects as its snapshot sees them, nearest first.
    pub(super) ancestors: tokio::sync::OnceCell<Vec<BTreeSet<u64>>>,
}

/// A listing of a volume's own data objects.
pub(super) struct Listing {
    /// When it began.
    pub(super) began: Instant,
    /// The version of the header read just before it, if no writer held the lock then.
    pub(super) quiet: Option<ObjectVersion>,
    pub(super) objects: Arc<BTreeSet<u64>>,
}

impl Allocation {
    /// Notes that this writer writes object `index` (before the write is sent).
    pub(super) fn writing(&self, index: u64) {
        self.written.lock().expect("allocation lock").insert(index);
    }
}

/// Of the listed `(key, version)`s — heads and clones — the indices of the data objects under
/// `prefix` stored now (`as_of` none: a head exists), or as of the mark `as_of` (a content
/// below it; every clone counted as content, a deletion's too: when unsure, stored).
pub(super) fn stored<'a>(
    listed: impl Iterator<Item = (&'a str, ObjectVersion)>,
    prefix: &str,
    as_of: Option<ObjectVersion>,
) -> BTreeSet<u64> {
    let mut contents: BTreeMap<u64, Vec<(ObjectVersion, bool)>> = BTreeMap::new();
    for (key, version) in listed {
        // A clone's version is the one its key names (that of the content it keeps).
        let (head, version, is_head) = match parse_clone_key(key) {
            Some((head, cloned)) => (head, cloned, false),
            None => (key, version, true),
        };
        let index = head.strip_prefix(prefix).and_then(|hex| u64::from_str_radix(hex, 16).ok());
        let Some(index) = index else { continue };
        if as_of.is_none() && !is_head {
            continue;
        }
        contents.entry(index).or_default().push((version, false));
    }
    match as_of {
        None => contents.into_keys().collect(),
        Some(mark) => contents
            .into_iter()
            .filter(|(_, versions)| visible_at(versions, mark).is_some())
            .map(|(index, _)| index)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use optio_proto::snap::clone_key;

    #[test]
    fn stored_objects_now_and_as_of_a_mark() {
        let v = ObjectVersion;
        let prefix = "volume_data.00000000000000ab.";
        let key = |index: u64| format!("{prefix}{index:016x}");
        let listed = [
            // 1: written before the mark and since: its old content kept as a clone.
            (key(1), v(50)),
            (clone_key(&key(1), v(10)), v(50)),
            // 2: created after the mark.
            (key(2), v(40)),
            // 3: written before the mark only.
            (key(3), v(5)),
            // 4: deleted after the mark: only its clone is left.
            (clone_key(&key(4), v(7)), v(7)),
            // Another volume's object, and a key that is no data object.
            ("volume_data.00000000000000cd.0000000000000005".to_string(), v(1)),
            (format!("{prefix}zz"), v(1)),
        ];
        let listed = || listed.iter().map(|(k, version)| (k.as_str(), *version));
        assert_eq!(stored(listed(), prefix, None), BTreeSet::from([1, 2, 3]));
        assert_eq!(stored(listed(), prefix, Some(v(20))), BTreeSet::from([1, 3, 4]));
        assert_eq!(stored(listed(), prefix, Some(v(6))), BTreeSet::from([3]));
        assert_eq!(stored(listed(), prefix, Some(v(5))), BTreeSet::new(), "below the mark");
        assert_eq!(stored(listed(), prefix, Some(v(100))), BTreeSet::from([1, 2, 3, 4]));
    }
}
