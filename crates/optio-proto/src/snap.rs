//! Snapshots of block volumes, as the store sees them: a *snapshot context* on writes and a
//! *mark* to read as of, and the names of the clones that keep a data object's content for
//! the snapshots that still see it (`docs/volumes.md`, "Snapshots and clones").
//!
//! A snapshot is a *mark*: an [`ObjectVersion`] that no write takes, above the version of
//! every write acknowledged before the snapshot and below the version of every write issued
//! after it (versions are the writer's hybrid logical clock, and a volume has one writer at a
//! time, which raises its clock past the newest mark before it writes). So the content a
//! snapshot sees of an object is the newest content with a version below its mark.
//!
//! A write carries the newest mark of its volume ([`SnapContext`]). Before a server changes
//! (or deletes) an object whose stored version is below that mark, it keeps what is stored
//! as a *clone*, an ordinary object named [`clone_key`]`(key, version)` on the same device,
//! with the head's placement seed, version and data: once per content, never over the
//! network. A read as of a mark ([`wire::AS_OF`](crate::wire::AS_OF)) is answered from the
//! newest of the head and its clones whose version is below the mark.

use crate::{KEY_BYTES_MAX, ObjectVersion};

/// Only keys under this prefix (block volumes' data objects) have clones: a key of another
/// shape that happens to end in `@` and 16 hex digits is never taken for a clone.
pub const CLONED_PREFIX: &str = "volume_data.";
/// Separates a data object's key from its clone's version.
pub const CLONE_SEPARATOR: char = '@';
/// Bytes a clone's key adds to its head's: the separator and 16 hex digits.
pub const CLONE_SUFFIX_BYTES: usize = 17;
/// The longest key that can have clones.
pub const CLONED_KEY_BYTES_MAX: usize = KEY_BYTES_MAX - CLONE_SUFFIX_BYTES;

/// What a write of a volume's data object carries: the newest snapshot of the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SnapContext {
    /// The newest snapshot's id (the volume's snapshot sequence), for logs and errors.
    pub seq: u64,
    /// The newest snapshot's mark: content stored at a version below it is kept as a clone
    /// before it is changed.
    pub mark: ObjectVersion,
}

impl SnapContext {
    /// As sent: `SEQ:MARK`.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.seq, self.mark.0)
    }

    /// `SEQ:MARK`, both decimal.
    pub fn parse(text: &str) -> Option<SnapContext> {
        let (seq, mark) = text.split_once(':')?;
        Some(SnapContext { seq: seq.parse().ok()?, mark: ObjectVersion(mark.parse().ok()?) })
    }
}

/// The key of the clone of `key` that keeps its content at `version`.
pub fn clone_key(key: &str, version: ObjectVersion) -> String {
    format!("{key}{CLONE_SEPARATOR}{:016x}", version.0)
}

/// The prefix every clone of `key` starts with.
pub fn clone_prefix(key: &str) -> String {
    format!("{key}{CLONE_SEPARATOR}")
}

/// The head's key and the version of a clone's key (none: not a clone's key).
pub fn parse_clone_key(key: &str) -> Option<(&str, ObjectVersion)> {
    parse_clone_key_any(key).filter(|(head, _)| head.starts_with(CLONED_PREFIX))
}

/// The head's key and the version of a clone's key of any head (an erasure-coded pool's
/// chunks keep earlier versions under these: docs/erasure.md); none: not a clone's key.
pub fn parse_clone_key_any(key: &str) -> Option<(&str, ObjectVersion)> {
    let at = key.len().checked_sub(CLONE_SUFFIX_BYTES)?;
    let (head, suffix) = key.split_at_checked(at)?;
    let hex = suffix.strip_prefix(CLONE_SEPARATOR)?;
    if head.is_empty()
        || hex.len() != 16
        || !hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    let version = u64::from_str_radix(hex, 16).ok()?;
    Some((head, ObjectVersion(version)))
}

/// Which of an object's contents a read as of `mark` sees: among `(version, deleted)` of the
/// head and its clones, the newest below `mark`; `None` (the object did not exist then) when
/// there is none or it is a deletion. The index of the one chosen, else `None`. At equal
/// versions the first listed wins (list the head first).
pub fn visible_at(contents: &[(ObjectVersion, bool)], mark: ObjectVersion) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, (version, _)) in contents.iter().enumerate() {
        if *version < mark && best.is_none_or(|b| *version > contents[b].0) {
            best = Some(i);
        }
    }
    best.filter(|&b| !contents[b].1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn clone_keys_round_trip_and_others_are_not_clones() {
        let key = clone_key("volume_data.ab.0000000000000001", ObjectVersion(0x1234));
        assert_eq!(key, "volume_data.ab.0000000000000001@0000000000001234");
        assert_eq!(
            parse_clone_key(&key),
            Some(("volume_data.ab.0000000000000001", ObjectVersion(0x1234)))
        );
        for not in [
            "",
            "a",
            "@0000000000001234",
            "volume_data.a@000000000000123G",
            "volume_data.a@00000000000012345",
            "volume_data.a#0000000000001234",
            "volume_data.a@000000000000ABCD",
            "photos/a@0000000000001234",
        ] {
            assert_eq!(parse_clone_key(not), None, "{not}");
        }
    }

    #[test]
    fn a_read_sees_the_newest_content_below_its_mark() {
        let v = ObjectVersion;
        // Head at 30, clones at 10 and 20.
        let contents = [(v(30), false), (v(10), false), (v(20), false)];
        assert_eq!(visible_at(&contents, v(5)), None, "before the object existed");
        assert_eq!(visible_at(&contents, v(15)), Some(1));
        assert_eq!(visible_at(&contents, v(25)), Some(2));
        assert_eq!(visible_at(&contents, v(31)), Some(0));
        // Deleted at 20 (a clone of the deletion), recreated at 30.
        let contents = [(v(30), false), (v(10), false), (v(20), true)];
        assert_eq!(visible_at(&contents, v(25)), None);
        // A clone of the head's own version (a write that failed after the clone): the head.
        let contents = [(v(10), false), (v(10), false)];
        assert_eq!(visible_at(&contents, v(11)), Some(0));
    }

    proptest! {
        #[test]
        fn contexts_round_trip(seq in any::<u64>(), mark in any::<u64>()) {
            let context = SnapContext { seq, mark: ObjectVersion(mark) };
            prop_assert_eq!(SnapContext::parse(&context.encode()), Some(context));
        }

        #[test]
        fn parsing_never_panics(text in "\\PC{0,40}") {
            let _ = SnapContext::parse(&text);
            let _ = parse_clone_key(&text);
        }
    }
}
