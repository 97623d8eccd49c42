//! Errors: decoding stored bytes, and the kinds of errors servers answer with.

use serde::{Deserialize, Serialize};

/// Why stored bytes (an object file or a choice record) cannot be trusted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// Shorter than its header says.
    #[error("truncated: only {bytes} bytes")]
    Truncated {
        /// Bytes present.
        bytes: usize,
    },
    /// Does not start with the magic number.
    #[error("not an Optio file (bad magic number)")]
    BadMagic,
    /// Written by a newer format.
    #[error("format version {found} is newer than this build reads ({supported}); upgrade Optio")]
    UnsupportedVersion {
        /// Version found.
        found: u16,
        /// Newest version this build reads.
        supported: u16,
    },
    /// The header's checksum does not match.
    #[error("header checksum mismatch")]
    HeaderChecksum,
    /// The stored key is not UTF-8.
    #[error("stored key is not UTF-8")]
    KeyNotUtf8,
    /// The data is not as long as the header says.
    #[error("data is {found} bytes, the header says {expected}")]
    SizeMismatch {
        /// Size in the header.
        expected: u64,
        /// Size found.
        found: u64,
    },
    /// The data's checksum does not match.
    #[error("data checksum mismatch: header says {expected:08x}, data has {found:08x}")]
    DataChecksum {
        /// Checksum in the header.
        expected: u32,
        /// Checksum of the data found.
        found: u32,
    },
}

/// The kinds of errors a server answers with, one HTTP status each (the kind also travels in
/// the `x-optio-error` header and the JSON body, so a client never guesses from the status).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// Malformed request: bad key, bad header value, checksum mismatch of the body (400).
    BadRequest,
    /// No such object, record or route (404).
    NotFound,
    /// This server does not serve the device named in the request (421).
    Misdirected,
    /// The object is larger than the server's maximum (413).
    TooLarge,
    /// The device has no room for the object (507).
    Full,
    /// The request's epoch is older than the server's: refresh the map and retry (409).
    StaleEpoch,
    /// The request's epoch is newer than any map the server can load: retry later (409).
    UnknownEpoch,
    /// A newer version of the object is already stored; the write is superseded (412).
    VersionConflict,
    /// The stored replica failed its checksum; it has been quarantined (500).
    Corrupt,
    /// The disk failed (500).
    Io,
    /// The server is stopping (503).
    Unavailable,
    /// The device is catching up on writes it missed while it was down (or is marked down in
    /// the map): it takes writes but serves no reads until it holds every version its peers
    /// hold; read another replica (503).
    Recovering,
    /// The client stopped sending the request's body for longer than the server's body
    /// timeout; nothing was stored and the connection is closed (408).
    Timeout,
    /// The server does not hold its lease in the map store (it cannot reach it, or the
    /// monitor fenced it before marking it down): it serves nothing and applied nothing, and
    /// catches up before it serves reads again; go around it as around a server that is not
    /// running (503).
    Fenced,
    /// The request is not signed, or its signature, timestamp or nonce was refused (401).
    Unauthorized,
    /// The signing entity may not do this (403).
    Forbidden,
}

impl ErrorKind {
    /// The HTTP status code.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::Misdirected => 421,
            ErrorKind::TooLarge => 413,
            ErrorKind::Full => 507,
            ErrorKind::StaleEpoch | ErrorKind::UnknownEpoch => 409,
            ErrorKind::VersionConflict => 412,
            ErrorKind::Corrupt | ErrorKind::Io => 500,
            ErrorKind::Unavailable | ErrorKind::Recovering | ErrorKind::Fenced => 503,
            ErrorKind::Timeout => 408,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden => 403,
        }
    }

    /// The name used in the `x-optio-error` header.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad-request",
            ErrorKind::NotFound => "not-found",
            ErrorKind::Misdirected => "misdirected",
            ErrorKind::TooLarge => "too-large",
            ErrorKind::Full => "full",
            ErrorKind::StaleEpoch => "stale-epoch",
            ErrorKind::UnknownEpoch => "unknown-epoch",
            ErrorKind::VersionConflict => "version-conflict",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Io => "io",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Recovering => "recovering",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Fenced => "fenced",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
        }
    }

    /// Every kind.
    pub const ALL: [ErrorKind; 16] = [
        ErrorKind::BadRequest,
        ErrorKind::NotFound,
        ErrorKind::Misdirected,
        ErrorKind::TooLarge,
        ErrorKind::Full,
        ErrorKind::StaleEpoch,
        ErrorKind::UnknownEpoch,
        ErrorKind::VersionConflict,
        ErrorKind::Corrupt,
        ErrorKind::Io,
        ErrorKind::Unavailable,
        ErrorKind::Recovering,
        ErrorKind::Timeout,
        ErrorKind::Fenced,
        ErrorKind::Unauthorized,
        ErrorKind::Forbidden,
    ];

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// The JSON body of an error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The kind.
    pub error: ErrorKind,
    /// What was wrong and what to do, for people.
    pub reason: String,
    /// The server's epoch.
    pub epoch: u64,
}
