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

/// The most clones one trim request ([`crate::request::Op::Trim`]) names.
pub const TRIM_KEYS_MAX: usize = 1024;
/// The longest body of a trim request: [`TRIM_KEYS_MAX`] keys of [`KEY_BYTES_MAX`] bytes, each
/// followed by a NUL.
pub const TRIM_BODY_BYTES_MAX: usize = TRIM_KEYS_MAX * (KEY_BYTES_MAX + 1);

/// A trim request's body: the clones' keys, each followed by a NUL (keys hold no NUL).
pub fn encode_trim_body<'k>(keys: impl IntoIterator<Item = &'k str>) -> Vec<u8> {
    let mut body = Vec::new();
    for key in keys {
        body.extend_from_slice(key.as_bytes());
        body.push(0);
    }
    body
}

/// Why a trim request's body is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrimBodyError {
    /// More than [`TRIM_KEYS_MAX`] keys, or more than [`TRIM_BODY_BYTES_MAX`] bytes.
    #[error(
        "a trim names at most {TRIM_KEYS_MAX} clones in {TRIM_BODY_BYTES_MAX} bytes; send several"
    )]
    TooLarge,
    /// The body does not end with the NUL that ends its last key.
    #[error("a trim's body is keys each followed by a NUL; the last one is not")]
    Unterminated,
    /// A key is not a valid key, or not a snapshot clone's key.
    #[error(
        "entry {at} of the trim ('{key}') is not a snapshot clone's key (KEY@ and 16 lower-case hex digits)"
    )]
    NotAClone {
        /// Its position (from 0).
        at: usize,
        /// The key, lossily decoded and cut to 80 bytes.
        key: String,
    },
}

/// The clones a trim request's body names, each with the version its key names. Keys are
/// checked as keys and as clones' keys of any head ([`parse_clone_key_any`]); which heads have
/// clones in a pool is the server's to check.
pub fn decode_trim_body(body: &[u8]) -> Result<Vec<(&str, ObjectVersion)>, TrimBodyError> {
    if body.len() > TRIM_BODY_BYTES_MAX {
        return Err(TrimBodyError::TooLarge);
    }
    if body.is_empty() {
        return Ok(Vec::new());
    }
    let Some(body) = body.strip_suffix(&[0]) else { return Err(TrimBodyError::Unterminated) };
    let mut clones = Vec::new();
    for (at, raw) in body.split(|b| *b == 0).enumerate() {
        if at >= TRIM_KEYS_MAX {
            return Err(TrimBodyError::TooLarge);
        }
        let not_a_clone = || TrimBodyError::NotAClone {
            at,
            key: String::from_utf8_lossy(&raw[..raw.len().min(80)]).into_owned(),
        };
        let key = std::str::from_utf8(raw).map_err(|_| not_a_clone())?;
        if crate::validate_key(key).is_err() {
            return Err(not_a_clone());
        }
        let (_, version) = parse_clone_key_any(key).ok_or_else(not_a_clone)?;
        clones.push((key, version));
    }
    Ok(clones)
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
    fn a_trim_body_round_trips_and_anything_else_is_refused_with_its_reason() {
        let keys = [
            clone_key("volume_data.ab.0000000000000001", ObjectVersion(7)),
            clone_key("photos/a b\nc", ObjectVersion(u64::MAX)),
        ];
        let body = encode_trim_body(keys.iter().map(String::as_str));
        let decoded = decode_trim_body(&body).unwrap();
        assert_eq!(
            decoded,
            vec![(keys[0].as_str(), ObjectVersion(7)), (keys[1].as_str(), ObjectVersion(u64::MAX))]
        );
        assert_eq!(decode_trim_body(b"").unwrap(), vec![]);
        assert_eq!(decode_trim_body(&body[..body.len() - 1]), Err(TrimBodyError::Unterminated));
        let bad = decode_trim_body(b"volume_data.1\0").unwrap_err();
        assert!(matches!(bad, TrimBodyError::NotAClone { at: 0, .. }), "{bad:?}");
        assert!(bad.to_string().contains("'volume_data.1'"), "{bad}");
        let empty_key = decode_trim_body(b"\0").unwrap_err();
        assert!(matches!(empty_key, TrimBodyError::NotAClone { at: 0, .. }));
        let not_utf8 = [&b"a\xff@0000000000000001"[..], b"\0"].concat();
        assert!(matches!(decode_trim_body(&not_utf8), Err(TrimBodyError::NotAClone { .. })));
        let one = clone_key("k", ObjectVersion(1));
        let many = encode_trim_body(std::iter::repeat_n(one.as_str(), TRIM_KEYS_MAX));
        assert_eq!(decode_trim_body(&many).unwrap().len(), TRIM_KEYS_MAX);
        let too_many = encode_trim_body(std::iter::repeat_n(one.as_str(), TRIM_KEYS_MAX + 1));
        assert_eq!(decode_trim_body(&too_many), Err(TrimBodyError::TooLarge));
        let too_long = vec![b'a'; TRIM_BODY_BYTES_MAX + 1];
        assert_eq!(decode_trim_body(&too_long), Err(TrimBodyError::TooLarge));
    }

    proptest! {
        /// Any bytes: a clear refusal or clones whose keys are clones' keys, never a panic.
        #[test]
        fn any_trim_body_decodes_to_clones_or_a_refusal(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(clones) = decode_trim_body(&body) {
                for (key, version) in clones {
                    prop_assert_eq!(parse_clone_key_any(key).map(|(_, v)| v), Some(version));
                }
            }
        }
    }

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
