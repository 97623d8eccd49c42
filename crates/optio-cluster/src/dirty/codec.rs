//! Byte formats: a dirty entry (the Redis list element and the local log's record payload),
//! the local log's record framing, its file header and its head file.
//!
//! All integers are little-endian. Every format starts with a tag or magic and a format
//! number, so that a later release can read what this one wrote.
//!
//! ```text
//! entry   := tag 0x01 | pool u32 | version u64 | key (the rest: 1..=1024 bytes of UTF-8, no NUL)
//! record  := payload_bytes u32 | crc32c(payload_bytes ‖ payload) u32 | payload (an entry)
//! header  := "OPTDIRTY" | format u32 = 1 | 0 u32 | generation u64 | 0 u32 | crc32c(first 28) u32
//! head    := "OPTDHEAD" | format u32 = 1 | 0 u32 | generation u64 | offset u64 | index u64
//!            | crc32c(first 40) u32 | 0 u32
//! ```

use super::{DirtyEntry, KEY_BYTES_MAX};

/// The first byte of an encoded entry: its format.
pub(crate) const ENTRY_TAG: u8 = 1;
/// Tag, pool and version.
const ENTRY_FIXED_BYTES: usize = 1 + 4 + 8;
/// The smallest encoded entry (a one-byte key).
pub(crate) const ENTRY_BYTES_MIN: usize = ENTRY_FIXED_BYTES + 1;
/// The largest encoded entry.
pub(crate) const ENTRY_BYTES_MAX: usize = ENTRY_FIXED_BYTES + KEY_BYTES_MAX;
/// Length and checksum before each record's payload.
pub(crate) const RECORD_PREFIX_BYTES: usize = 8;
/// The largest record.
pub(crate) const RECORD_BYTES_MAX: usize = RECORD_PREFIX_BYTES + ENTRY_BYTES_MAX;

/// The log file's magic.
const LOG_MAGIC: &[u8; 8] = b"OPTDIRTY";
/// The head file's magic.
const HEAD_MAGIC: &[u8; 8] = b"OPTDHEAD";
/// The version of the log and head formats.
const FORMAT: u32 = 1;
/// The log file's header.
pub(crate) const HEADER_BYTES: u64 = 32;
/// The head file.
pub(crate) const HEAD_BYTES: usize = 48;

/// Why bytes are not an entry, a log header or a head, or why an entry breaks the rules of
/// [`DirtyEntry`]. [`super::DirtyError`] says where (the file, the Redis list and position, the
/// entry's index) and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// An empty key.
    #[error("the key is empty; keys are 1 to {KEY_BYTES_MAX} bytes of UTF-8")]
    KeyEmpty,
    /// A key over [`KEY_BYTES_MAX`] bytes.
    #[error("the key is {bytes} bytes long; keys are at most {KEY_BYTES_MAX} bytes")]
    KeyTooLong {
        /// Its length.
        bytes: usize,
    },
    /// A key with a NUL byte.
    #[error("the key holds a NUL byte at {at}; keys may not contain NUL")]
    KeyNul {
        /// The byte's position.
        at: usize,
    },
    /// A key that is not UTF-8.
    #[error("the key is not UTF-8: {0}")]
    KeyNotUtf8(std::str::Utf8Error),
    /// An encoded entry of an impossible length.
    #[error("{bytes} bytes long; an entry is {ENTRY_BYTES_MIN} to {ENTRY_BYTES_MAX} bytes")]
    EntryLength {
        /// Its length.
        bytes: usize,
    },
    /// An encoded entry of another format.
    #[error("format tag {tag} (this version reads {ENTRY_TAG})")]
    EntryTag {
        /// The tag read.
        tag: u8,
    },
    /// A log or head file cut short (or too long, for the head).
    #[error("the {file} is {bytes} bytes, {expected} expected")]
    Length {
        /// "header" or "head file".
        file: &'static str,
        /// Its length.
        bytes: usize,
        /// The length of one.
        expected: u64,
    },
    /// A file that is not Optio's.
    #[error("not an Optio {what} (wrong magic)")]
    Magic {
        /// "dirty log" or "dirty-log head".
        what: &'static str,
    },
    /// A header or head whose checksum does not match its bytes.
    #[error("the {what}'s checksum does not match")]
    Checksum {
        /// "header" or "head".
        what: &'static str,
    },
    /// A header or head of another format.
    #[error("format {format}; this version reads format {FORMAT}")]
    Format {
        /// The format read.
        format: u32,
    },
    /// A head pointing where no record can start.
    #[error("offset {offset} is impossible after {records} records")]
    HeadOffset {
        /// The offset it holds.
        offset: u64,
        /// The records popped it holds.
        records: u64,
    },
}

/// Checks an entry against the rules of [`DirtyEntry`]; `Err` says why not.
pub(crate) fn check_entry(entry: &DirtyEntry) -> Result<(), CodecError> {
    check_key(entry.key.as_bytes()).map(|_| ())
}

/// Checks a key's bytes: non-empty UTF-8 of at most [`KEY_BYTES_MAX`] bytes, no NUL.
fn check_key(key: &[u8]) -> Result<&str, CodecError> {
    if key.is_empty() {
        return Err(CodecError::KeyEmpty);
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(CodecError::KeyTooLong { bytes: key.len() });
    }
    if let Some(at) = key.iter().position(|&b| b == 0) {
        return Err(CodecError::KeyNul { at });
    }
    std::str::from_utf8(key).map_err(CodecError::KeyNotUtf8)
}

/// Appends the encoding of a valid entry (see [`check_entry`]) to `out`.
pub(crate) fn encode_entry(entry: &DirtyEntry, out: &mut Vec<u8>) {
    debug_assert!(check_entry(entry).is_ok(), "encode_entry is given checked entries");
    out.push(ENTRY_TAG);
    out.extend_from_slice(&entry.pool.to_le_bytes());
    out.extend_from_slice(&entry.version.to_le_bytes());
    out.extend_from_slice(entry.key.as_bytes());
}

/// Decodes an entry; `Err` says why the bytes are not one.
pub(crate) fn decode_entry(bytes: &[u8]) -> Result<DirtyEntry, CodecError> {
    if bytes.len() < ENTRY_BYTES_MIN || bytes.len() > ENTRY_BYTES_MAX {
        return Err(CodecError::EntryLength { bytes: bytes.len() });
    }
    if bytes[0] != ENTRY_TAG {
        return Err(CodecError::EntryTag { tag: bytes[0] });
    }
    let pool = u32::from_le_bytes(bytes[1..5].try_into().expect("4 bytes by the length check"));
    let version = u64::from_le_bytes(bytes[5..13].try_into().expect("8 bytes by the length check"));
    let key = check_key(&bytes[ENTRY_FIXED_BYTES..])?;
    Ok(DirtyEntry { pool, key: key.to_string(), version })
}

/// The checksum of a record: over its length field and its payload.
fn record_crc(length: [u8; 4], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&length), payload)
}

/// Appends a record holding a valid entry to `out`; returns the record's size in bytes.
pub(crate) fn encode_record(entry: &DirtyEntry, out: &mut Vec<u8>) -> u64 {
    let start = out.len();
    out.extend_from_slice(&[0; RECORD_PREFIX_BYTES]);
    encode_entry(entry, out);
    let payload_bytes =
        u32::try_from(out.len() - start - RECORD_PREFIX_BYTES).expect("an entry is small");
    let length = payload_bytes.to_le_bytes();
    let crc = record_crc(length, &out[start + RECORD_PREFIX_BYTES..]);
    out[start..start + 4].copy_from_slice(&length);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    (out.len() - start) as u64
}

/// What a record's 8-byte prefix says.
pub(crate) enum RecordPrefix {
    /// A plausible record whose payload is this many bytes.
    Payload {
        /// Payload size.
        bytes: usize,
        /// Expected checksum.
        crc: u32,
    },
    /// Not a record: a torn or damaged tail starts here.
    Invalid,
}

/// Reads a record's prefix.
pub(crate) fn decode_record_prefix(prefix: &[u8; RECORD_PREFIX_BYTES]) -> RecordPrefix {
    let bytes = u32::from_le_bytes(prefix[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(prefix[4..8].try_into().expect("4 bytes"));
    if (ENTRY_BYTES_MIN..=ENTRY_BYTES_MAX).contains(&bytes) {
        RecordPrefix::Payload { bytes, crc }
    } else {
        RecordPrefix::Invalid
    }
}

/// Checks a record's payload against its prefix and decodes it; `None` for a torn or damaged
/// record.
pub(crate) fn decode_record_payload(expected_crc: u32, payload: &[u8]) -> Option<DirtyEntry> {
    let length = u32::try_from(payload.len()).ok()?.to_le_bytes();
    if record_crc(length, payload) != expected_crc {
        return None;
    }
    decode_entry(payload).ok()
}

/// The log file's header for `generation`.
pub(crate) fn encode_header(generation: u64) -> [u8; HEADER_BYTES as usize] {
    let mut out = [0u8; HEADER_BYTES as usize];
    out[0..8].copy_from_slice(LOG_MAGIC);
    out[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    out[16..24].copy_from_slice(&generation.to_le_bytes());
    let crc = crc32c::crc32c(&out[0..28]);
    out[28..32].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Reads the log file's header: its generation, or why it is not a header.
pub(crate) fn decode_header(bytes: &[u8]) -> Result<u64, CodecError> {
    if bytes.len() < HEADER_BYTES as usize {
        return Err(CodecError::Length {
            file: "header",
            bytes: bytes.len(),
            expected: HEADER_BYTES,
        });
    }
    if &bytes[0..8] != LOG_MAGIC {
        return Err(CodecError::Magic { what: "dirty log" });
    }
    let crc = u32::from_le_bytes(bytes[28..32].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[0..28]) != crc {
        return Err(CodecError::Checksum { what: "header" });
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if format != FORMAT {
        return Err(CodecError::Format { format });
    }
    Ok(u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes")))
}

/// Where the unpopped entries start: in which generation of the log file, at which byte, after
/// how many records of that file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    /// The log file generation this head belongs to.
    pub generation: u64,
    /// Byte offset of the first unpopped record.
    pub offset: u64,
    /// Records of the file before `offset`.
    pub index: u64,
}

impl Head {
    /// Nothing popped from the file of `generation`.
    pub(crate) fn start(generation: u64) -> Head {
        Head { generation, offset: HEADER_BYTES, index: 0 }
    }
}

/// The head file's bytes.
pub(crate) fn encode_head(head: Head) -> [u8; HEAD_BYTES] {
    let mut out = [0u8; HEAD_BYTES];
    out[0..8].copy_from_slice(HEAD_MAGIC);
    out[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    out[16..24].copy_from_slice(&head.generation.to_le_bytes());
    out[24..32].copy_from_slice(&head.offset.to_le_bytes());
    out[32..40].copy_from_slice(&head.index.to_le_bytes());
    let crc = crc32c::crc32c(&out[0..40]);
    out[40..44].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Reads the head file, or says why it is not one.
pub(crate) fn decode_head(bytes: &[u8]) -> Result<Head, CodecError> {
    if bytes.len() != HEAD_BYTES {
        return Err(CodecError::Length {
            file: "head file",
            bytes: bytes.len(),
            expected: HEAD_BYTES as u64,
        });
    }
    if &bytes[0..8] != HEAD_MAGIC {
        return Err(CodecError::Magic { what: "dirty-log head" });
    }
    let crc = u32::from_le_bytes(bytes[40..44].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[0..40]) != crc {
        return Err(CodecError::Checksum { what: "head" });
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if format != FORMAT {
        return Err(CodecError::Format { format });
    }
    let field = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let head = Head { generation: field(16), offset: field(24), index: field(32) };
    if head.offset < HEADER_BYTES
        || head.offset > head.index.saturating_mul(RECORD_BYTES_MAX as u64) + HEADER_BYTES
    {
        return Err(CodecError::HeadOffset { offset: head.offset, records: head.index });
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str) -> DirtyEntry {
        DirtyEntry { pool: 7, key: key.to_string(), version: u64::MAX - 1 }
    }

    #[test]
    fn entries_round_trip_with_any_bytes_but_nul() {
        for key in ["a", "with space", "line\nbreak", "ünïcødé", &"k".repeat(KEY_BYTES_MAX)] {
            let mut bytes = Vec::new();
            encode_entry(&entry(key), &mut bytes);
            assert_eq!(bytes.len(), 13 + key.len());
            assert_eq!(decode_entry(&bytes), Ok(entry(key)));
        }
    }

    #[test]
    fn bad_entries_are_refused_with_a_reason() {
        assert!(check_entry(&entry("")).unwrap_err().to_string().contains("empty"));
        assert!(check_entry(&entry("a\0b")).unwrap_err().to_string().contains("NUL"));
        assert!(
            check_entry(&entry(&"k".repeat(KEY_BYTES_MAX + 1)))
                .unwrap_err()
                .to_string()
                .contains("1025")
        );
        assert!(decode_entry(&[2; 20]).unwrap_err().to_string().contains("format tag 2"));
        assert!(decode_entry(&[1; 3]).unwrap_err().to_string().contains("3 bytes"));
        let mut bytes = Vec::new();
        encode_entry(&entry("ab"), &mut bytes);
        let last = bytes.len() - 1;
        bytes[last] = 0xff;
        assert!(decode_entry(&bytes).unwrap_err().to_string().contains("UTF-8"));
    }

    #[test]
    fn records_detect_any_flipped_byte() {
        let mut record = Vec::new();
        let bytes = encode_record(&entry("key"), &mut record);
        assert_eq!(bytes as usize, record.len());
        for at in 0..record.len() {
            let mut damaged = record.clone();
            damaged[at] ^= 0x10;
            let prefix: [u8; 8] = damaged[..8].try_into().unwrap();
            let decoded = match decode_record_prefix(&prefix) {
                RecordPrefix::Payload { bytes, crc } if bytes == damaged.len() - 8 => {
                    decode_record_payload(crc, &damaged[8..])
                }
                _ => None,
            };
            assert_eq!(decoded, None, "flipping byte {at} went unnoticed");
        }
    }

    #[test]
    fn header_and_head_round_trip_and_refuse_damage() {
        let header = encode_header(42);
        assert_eq!(decode_header(&header), Ok(42));
        let mut damaged = header;
        damaged[17] ^= 1;
        assert!(decode_header(&damaged).unwrap_err().to_string().contains("checksum"));
        let head = Head { generation: 3, offset: HEADER_BYTES + 22, index: 1 };
        assert_eq!(decode_head(&encode_head(head)), Ok(head));
        assert!(decode_head(&encode_head(head)[..40]).is_err());
        let impossible = Head { generation: 3, offset: 1 << 40, index: 1 };
        assert!(
            decode_head(&encode_head(impossible)).unwrap_err().to_string().contains("impossible")
        );
    }
}
