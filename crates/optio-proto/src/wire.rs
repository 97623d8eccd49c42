//! The HTTP API's names: paths, headers, and the percent-encoding of keys in URLs.
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
//! | `GET` | `/v1/dev/{device}/objects/{pool}?prefix=&pg=&limit=` | list |
//! | `PUT` | `/v1/dev/{device}/choices/{pool}/{key}` | create a choice record if absent |
//! | `GET`, `DELETE` | `/v1/dev/{device}/choices/{pool}/{key}` | read, remove a record |
//! | `GET` | `/v1/status`, `/metrics`, `/health` | JSON status, Prometheus text, liveness |

/// The map epoch the client used (requests) or the server holds (answers).
pub const EPOCH: &str = "x-optio-epoch";
/// The error kind of an error answer.
pub const ERROR: &str = "x-optio-error";
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
/// not newer than [`VERSION`] (`1`): for copies a placement no longer names and for undoing a
/// write. Without it a DELETE leaves a tombstone.
pub const PURGE: &str = "x-optio-purge";

/// Percent-encodes every byte but ASCII letters, digits and `-._~`.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Decodes `%XX` escapes; `None` for a malformed escape.
pub fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
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
    }
}
