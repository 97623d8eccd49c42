//! The HTTP API's names: headers, their encodings (decoded strictly: a malformed value is a
//! [`HeaderError`], never a default), and the percent-encoding of keys in URLs. The paths are
//! built and parsed by [`crate::route`], requests by [`crate::request`], answers by
//! [`crate::answer`]; the JSON bodies are in [`crate::body`].
//!
//! Routes (every object and choice route names the device, since one server may serve
//! several):
//!
//! | method | path | what |
//! |---|---|---|
//! | `PUT` | `/v1/dev/{device}/objects/{pool}/{key}` | store (body = data) |
//! | `GET` | `/v1/dev/{device}/objects/{pool}/{key}` | read (`Range: bytes=a-b` allowed) |
//! | `HEAD` | `/v1/dev/{device}/objects/{pool}/{key}` | probe: exists? + metrics |
//! | `DELETE` | `/v1/dev/{device}/objects/{pool}/{key}` | delete (a tombstone stays), or purge |
//! | `PUT` + `x-optio-offset` | `/v1/dev/{device}/objects/{pool}/{key}` | write in place (block objects) |
//! | `GET` | `/v1/dev/{device}/objects/{pool}?prefix=&pg=&limit=&after=` | list |
//! | `POST` | `/v1/dev/{device}/objects/{pool}` | make every acknowledged write durable (flush) |
//! | `PUT` | `/v1/dev/{device}/choices/{pool}/{key}` | create a choice record if absent |
//! | `GET`, `DELETE` | `/v1/dev/{device}/choices/{pool}/{key}` | read, remove a record |
//! | `GET` | `/v1/status`, `/metrics`, `/health` | JSON status, Prometheus text, liveness |

/// The map epoch the client used (requests) or the server holds (answers).
pub const EPOCH: &str = "x-optio-epoch";
/// The error kind of an error answer.
pub const ERROR: &str = "x-optio-error";
/// On an error answer: its reason (also in the JSON body, which HEAD answers lack).
pub const REASON: &str = "x-optio-reason";
/// The device's metrics, piggybacked on every object and choice answer.
pub const METRICS: &str = "x-optio-metrics";
/// The object version (requests: the version written; answers: the version stored).
pub const VERSION: &str = "x-optio-version";
/// crc32c of the data, 8 hex digits (requests: checked before storing; answers: stored).
pub const CHECKSUM: &str = "x-optio-checksum";
/// Size of the whole object in bytes (answers).
pub const SIZE: &str = "x-optio-size";
/// PG seed the object was placed in (requests and answers).
pub const PG: &str = "x-optio-pg";
/// The object's summary ([`crate::summary`]), in hexadecimal (answers, when it has one).
pub const SUMMARY: &str = "x-optio-summary";
/// On a probe of the object's home: also answer the choice record, if any (`1`).
pub const WANT_CHOICE: &str = "x-optio-want-choice";
/// The choice record, `candidate/choices/writer` (answers).
pub const CHOICE: &str = "x-optio-choice";
/// A random number a server draws at start (answers): a change means it restarted.
pub const INCARNATION: &str = "x-optio-incarnation";
/// On a record PUT: answer before the record is committed (it is visible at once, durable
/// at the next group commit); without it the answer waits for the commit.
pub const DEFER_SYNC: &str = "x-optio-defer-sync";
/// On a record GET: answer when the record's latest change is committed.
pub const WAIT_DURABLE: &str = "x-optio-wait-durable";
/// On a record PUT answer: `1` when this request created the record.
pub const CHOICE_CREATED: &str = "x-optio-choice-created";
/// On a record PUT with [`REPLACE_IF_WRITER`]: do not replace when another writer's create of
/// the key was refused moments ago (its copies elsewhere are being undone).
pub const UNLESS_CONTENDED: &str = "x-optio-unless-contended";
/// On a record PUT: replace the record if its writer is this one (the creator re-choosing).
pub const REPLACE_IF_WRITER: &str = "x-optio-replace-if-writer";

/// On a probe answer (404): the version the object was deleted at (a tombstone stands).
pub const DELETED: &str = "x-optio-deleted";
/// On a DELETE: remove the copy entirely — object or tombstone — if the stored version is
/// not newer than [`VERSION`] (`1`): for copies a placement no longer names. Needs the `admin`
/// or `server` capability. Without it a DELETE leaves a tombstone.
pub const PURGE: &str = "x-optio-purge";
/// On a DELETE: take back one's own write that could not complete (`1`): the copy is removed
/// only if it is a live object of exactly [`VERSION`], written within
/// [`UNDO_AGE_MAX_MS`] of the server's clock; tombstones and older versions stay. Needs
/// `write`.
pub const UNDO: &str = "x-optio-undo";
/// On a `DELETE` with [`VERSION`]: version `VERSION` of an erasure-coded object's chunk is
/// decodable (written to at least the pool's `min_size` chunks), so the device drops the
/// earlier versions it kept while it was written (docs/erasure.md). Needs the write capability.
pub const COMMIT: &str = "x-optio-commit";
/// How old a version an undo ([`UNDO`]) may remove, in milliseconds.
pub const UNDO_AGE_MAX_MS: u64 = 10 * 60 * 1000;
/// On a `GET` of an object: a peer catching up on missed writes is reading (`1`); answered
/// even while this device is catching up itself (a version is only taken when newer).
pub const CATCH_UP: &str = "x-optio-catch-up";

/// On a `PUT`: write in place at this byte offset of the object instead of replacing it
/// (a block object, [`crate::blocks`]); the body is the bytes written.
pub const OFFSET: &str = "x-optio-offset";
/// On a write in place: the object version it is based on (absent: the write creates the
/// object, [`SIZE`] bytes, holes reading as zeros).
pub const BASE: &str = "x-optio-base";
/// On a write in place: write this many zero bytes instead of a body (whole blocks are
/// punched out, freeing their space).
pub const ZEROES: &str = "x-optio-zeroes";
/// On a write in place: sync the object's data before answering (`1`, NBD's FUA).
pub const SYNC: &str = "x-optio-sync";
/// On a `GET` of a block object over a server's local socket (`1`): answer with the object's
/// headers and an open, read-only descriptor of its file instead of its bytes (local reads,
/// `docs/volumes.md`).
pub const OPEN: &str = "x-optio-open";
/// On a write of a volume's data object (`PUT`, in place or whole, or `DELETE`): the volume's
/// newest snapshot, `SEQ:MARK` ([`crate::snap::SnapContext`]): what is stored at a version
/// below the mark is kept as a clone before it changes.
pub const SNAP: &str = "x-optio-snap";
/// On a `GET` (whole or ranged): read the object as a snapshot with this mark sees it
/// ([`crate::snap`]): the head or a clone, or not found when it did not exist then.
pub const AS_OF: &str = "x-optio-as-of";
/// On a whole `GET`: answer once the object's version is above this one (a write landed), or
/// after at most [`WAIT_NEWER_MAX_MS`], whichever comes first; at once when the object is
/// absent. A long poll: a volume's lock holder watches its header with it.
pub const WAIT_NEWER: &str = "x-optio-wait-newer";
/// The longest a server holds a [`WAIT_NEWER`] read before it answers what it has.
pub const WAIT_NEWER_MAX_MS: u64 = 1_000;
/// On a signed request: the server it is for, as the client addressed it (`host:port`, the
/// device's address in the map). Signed like every `x-optio-*` header, so that a request
/// captured on its way to one server is refused by every other.
pub const TARGET: &str = "x-optio-target";

/// What [`percent_encode`] escapes: every byte but ASCII letters, digits and `-._~` (RFC 3986's
/// unreserved characters).
const ESCAPED: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Percent-encodes every byte but ASCII letters, digits and `-._~` (upper-case hex digits).
pub fn percent_encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, ESCAPED).to_string()
}

/// Decodes `%XX` escapes; `None` when a `%` is not followed by two hex digits (the
/// `percent-encoding` crate would pass such a `%` through; a key must not have two spellings).
pub fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    for (i, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'%') {
        if !bytes.get(i + 1..i + 3)?.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
    }
    Some(percent_encoding::percent_decode(bytes).collect())
}

/// Formats a choice record for the [`CHOICE`] header.
pub fn choice_header(record: &crate::ChoiceRecord) -> String {
    format!("{}/{}/{:x}", record.candidate, record.choices, record.writer)
}

/// Parses the [`CHOICE`] header.
pub fn parse_choice_header(text: &str) -> Option<crate::ChoiceRecord> {
    let mut parts = text.split('/');
    let candidate = parts.next()?.parse().ok()?;
    let choices = parts.next()?.parse().ok()?;
    let writer = u64::from_str_radix(parts.next()?, 16).ok()?;
    Some(crate::ChoiceRecord { candidate, choices, writer })
}

/// A header that is present but malformed: an error, never a default value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("header {name} is malformed: '{value}'")]
pub struct HeaderError {
    /// The header.
    pub name: &'static str,
    /// Its value.
    pub value: String,
}

fn malformed(name: &'static str, value: &str) -> HeaderError {
    HeaderError { name, value: value.to_string() }
}

/// A decimal integer header ([`EPOCH`], [`VERSION`], [`SIZE`], [`PG`], [`DELETED`]).
pub fn decode_u64(name: &'static str, value: &str) -> Result<u64, HeaderError> {
    value.parse().map_err(|_| malformed(name, value))
}

/// A hexadecimal integer header ([`INCARNATION`], [`REPLACE_IF_WRITER`]).
pub fn decode_hex_u64(name: &'static str, value: &str) -> Result<u64, HeaderError> {
    u64::from_str_radix(value, 16).map_err(|_| malformed(name, value))
}

/// A checksum ([`CHECKSUM`]): hexadecimal.
pub fn decode_checksum(value: &str) -> Result<u32, HeaderError> {
    u32::from_str_radix(value, 16).map_err(|_| malformed(CHECKSUM, value))
}

/// A checksum as [`CHECKSUM`] carries it: 8 hex digits.
pub fn encode_checksum(checksum: u32) -> String {
    format!("{checksum:08x}")
}

/// A hexadecimal header value ([`INCARNATION`], [`REPLACE_IF_WRITER`]).
pub fn encode_hex(value: u64) -> String {
    format!("{value:x}")
}

/// The headers describing a stored object (answers to probes, reads and record requests).
pub fn object_headers(info: &crate::ObjectInfo) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        (SIZE, info.size_bytes.to_string()),
        (VERSION, info.version.0.to_string()),
        (CHECKSUM, encode_checksum(info.checksum)),
    ];
    if let Some(pg) = info.pg_seed {
        headers.push((PG, pg.to_string()));
    }
    if let Some(summary) = &info.summary {
        headers.push((SUMMARY, summary.clone()));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_round_trip() {
        for text in ["plain", "a/b c%d", "é€😀", "%", ""] {
            assert_eq!(percent_decode(&percent_encode(text)).as_deref(), Some(text.as_bytes()));
        }
        assert_eq!(percent_decode("%4"), None);
        assert_eq!(percent_decode("%zz"), None);
        // (`u8::from_str_radix` took a sign: "%+1" was byte 1.)
        assert_eq!(percent_decode("%+1"), None);
        assert_eq!(percent_encode("a/b c~-._é"), "a%2Fb%20c~-._%C3%A9");
    }
}
