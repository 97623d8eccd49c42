//! A device's answer to a request as one typed value, for both ends of the wire: the server
//! builds an [`Answer`] and encodes it ([`Answer::encode`]: status, headers, body), the
//! client decodes what arrived ([`Answer::decode`]) knowing only what it asked
//! ([`OpKind`] and key). This is the one place the wire form of an answer is defined; it is
//! the form servers have always sent, so senders and readers of before and after this type
//! interoperate.
//!
//! An answer is one of the operations' successes or a [`Refusal`], plus an [`Envelope`]: the
//! server's epoch, the device's metrics (CHOICE's piggybacking) and the server's
//! incarnation, which every device answer carries and the server adds in one place.
//!
//! The body is a type parameter: the server hands over an object's bytes as it holds them
//! (or a stream of them), the client decodes the chunks it received; only JSON bodies
//! (listings, refusals) are read through [`AnswerBody`].
//!
//! Decoding is strict where a value is present (a malformed header is an error, never a
//! default, as [`crate::wire`]'s decoders are) and lenient where it always was: the metrics
//! are advisory (a malformed value reads as none), and a refusal is a refusal whatever else
//! it carries — its kind comes from [`wire::ERROR`], or, from a proxy that is not Optio, from
//! its status. Two things travel as the answer's, not the object's: an [`ObjectInfo`]'s
//! `epoch` is the answer's epoch ([`wire::EPOCH`], the server's), and its `key` is the key
//! asked for.

use std::borrow::Cow;

use crate::request::OpKind;
use crate::wire::{self, HeaderError};
use crate::{
    ChoiceRecord, DeviceMetrics, ErrorBody, ErrorKind, Listing, ObjectInfo, ObjectVersion,
};

/// The most characters of a refusal's reason that go in [`wire::REASON`] (the whole reason
/// goes in the JSON body, which answers to `HEAD` lack).
pub const REASON_HEADER_CHARS_MAX: usize = 300;

/// What a device answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer<B> {
    /// A probe's answer: the object (200), or none (404 without an error kind, with the
    /// version of a tombstone if one stands); with the choice record when asked for. A record
    /// request a device has nothing for reads as one too (no server sends that today).
    Probed {
        /// The object ([`wire::object_headers`]).
        info: Option<ObjectInfo>,
        /// The version a tombstone stands at ([`wire::DELETED`]).
        deleted: Option<ObjectVersion>,
        /// The choice record ([`wire::CHOICE`]).
        record: Option<ChoiceRecord>,
    },
    /// An object's bytes (200), or a range of them (206, with `content-range`).
    Object {
        /// The object.
        info: ObjectInfo,
        /// The inclusive range sent (none: the whole object).
        range: Option<(u64, u64)>,
        /// The bytes.
        body: B,
    },
    /// An open descriptor of a block object's file (200, no body): the descriptor travels
    /// beside the answer (the local socket's).
    Opened {
        /// The object.
        info: ObjectInfo,
    },
    /// A write stored (201), or already stored (200): whole or in place.
    Written {
        /// The version stored ([`wire::VERSION`]).
        version: ObjectVersion,
        /// Whether this request stored it.
        created: bool,
    },
    /// Done, nothing to say (204): deleted, undone, purged, synced, record removed.
    Done,
    /// A page of a listing (200, JSON).
    Listed(Listing),
    /// A choice record: read (200), created (201, [`wire::CHOICE_CREATED`]) or the one that
    /// was there (200); a record request is also a probe, so the object comes with it.
    Record {
        /// The record.
        record: ChoiceRecord,
        /// Whether this request created it.
        created: bool,
        /// The object, if the device holds it.
        info: Option<ObjectInfo>,
    },
    /// An error answer.
    Refused(Refusal),
}

/// An error answer: its kind (and so its status), the reason, and on a version conflict the
/// version stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Error kind.
    pub kind: ErrorKind,
    /// What was wrong and what to do, for people.
    pub reason: String,
    /// On [`ErrorKind::VersionConflict`]: the version the device holds ([`wire::VERSION`]),
    /// so that a writer whose clock runs behind can write above it. Sent with any kind,
    /// read with that one only.
    pub stored: Option<ObjectVersion>,
}

impl Refusal {
    /// A refusal of `kind` for `reason`.
    pub fn new(kind: ErrorKind, reason: impl Into<String>) -> Refusal {
        Refusal { kind, reason: reason.into(), stored: None }
    }
}

/// What every device answer carries besides the answer itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Envelope {
    /// The server's map epoch ([`wire::EPOCH`]).
    pub epoch: Option<u64>,
    /// The device's metrics ([`wire::METRICS`]).
    pub metrics: Option<DeviceMetrics>,
    /// The server's incarnation ([`wire::INCARNATION`]): successes only.
    pub incarnation: Option<u64>,
}

/// An answer on the wire: status, headers (names lower-case, values as sent) and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded<B> {
    /// HTTP status.
    pub status: u16,
    /// Headers, in the order they are sent.
    pub headers: Vec<(&'static str, String)>,
    /// Body.
    pub body: B,
}

/// A body whose bytes a decoder can read (for the JSON of listings and refusals).
pub trait AnswerBody {
    /// The bytes, in one piece.
    fn bytes(&self) -> Cow<'_, [u8]>;
}

impl AnswerBody for Vec<u8> {
    fn bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self)
    }
}

impl AnswerBody for &[u8] {
    fn bytes(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self)
    }
}

/// Why an answer does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// A header is present but malformed.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// A header the answer needs is absent.
    #[error("no header {name} in an answer of status {status}")]
    Missing {
        /// The header.
        name: &'static str,
        /// The answer's status.
        status: u16,
    },
    /// A status no Optio server answers to the request.
    #[error("status {status}, which no server answers to a {} request", .asked.name())]
    Status {
        /// What was asked.
        asked: OpKind,
        /// The status.
        status: u16,
    },
    /// A listing's body is not a listing.
    #[error("a bad listing: {0}")]
    Listing(String),
}

/// The `content-type` of JSON bodies.
const JSON: &str = "application/json";

impl<B> Answer<B> {
    /// Its HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Answer::Probed { info: Some(_), .. } => 200,
            Answer::Probed { info: None, .. } => 404,
            Answer::Object { range: None, .. } => 200,
            Answer::Object { range: Some(_), .. } => 206,
            Answer::Opened { .. } | Answer::Listed(_) => 200,
            Answer::Written { created, .. } | Answer::Record { created, .. } => {
                if *created {
                    201
                } else {
                    200
                }
            }
            Answer::Done => 204,
            Answer::Refused(refusal) => refusal.kind.status(),
        }
    }

    /// The refusal, if it is one.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Answer::Refused(refusal) => Some(refusal),
            _ => None,
        }
    }
}

impl<B: From<Vec<u8>> + Default> Answer<B> {
    /// The answer on the wire, with `envelope`'s headers last.
    pub fn encode(self, envelope: &Envelope) -> Encoded<B> {
        let status = self.status();
        let mut headers = Vec::with_capacity(12);
        let body = match self {
            Answer::Probed { info, deleted, record } => {
                if let Some(info) = &info {
                    headers.extend(wire::object_headers(info));
                }
                if let Some(deleted) = deleted {
                    headers.push((wire::DELETED, deleted.0.to_string()));
                }
                if let Some(record) = record {
                    headers.push((wire::CHOICE, wire::choice_header(&record)));
                }
                B::default()
            }
            Answer::Object { info, range, body } => {
                headers.extend(wire::object_headers(&info));
                if let Some((first, last)) = range {
                    let size = info.size_bytes;
                    headers.push(("content-range", format!("bytes {first}-{last}/{size}")));
                }
                body
            }
            Answer::Opened { info } => {
                headers.extend(wire::object_headers(&info));
                B::default()
            }
            Answer::Written { version, .. } => {
                headers.push((wire::VERSION, version.0.to_string()));
                B::default()
            }
            Answer::Done => B::default(),
            Answer::Listed(listing) => {
                headers.push(("content-type", JSON.to_string()));
                B::from(serde_json::to_vec(&listing).expect("listings serialize"))
            }
            Answer::Record { record, created, info } => {
                headers.push((wire::CHOICE, wire::choice_header(&record)));
                if created {
                    headers.push((wire::CHOICE_CREATED, "1".to_string()));
                }
                if let Some(info) = &info {
                    headers.extend(wire::object_headers(info));
                }
                B::default()
            }
            Answer::Refused(refusal) => B::from(refusal.encode(envelope.epoch, &mut headers)),
        };
        envelope.encode(&mut headers);
        Encoded { status, headers, body }
    }
}

impl Refusal {
    /// Appends the refusal's headers; its JSON body.
    fn encode(self, epoch: Option<u64>, headers: &mut Vec<(&'static str, String)>) -> Vec<u8> {
        // The reason goes in a header too: HEAD answers (probes) have no body.
        let short: String = self
            .reason
            .chars()
            .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
            .take(REASON_HEADER_CHARS_MAX)
            .collect();
        headers.push(("content-type", JSON.to_string()));
        headers.push((wire::ERROR, self.kind.name().to_string()));
        headers.push((wire::REASON, short));
        if self.kind == ErrorKind::Timeout {
            // The rest of a stalled body is not waited for: the connection closes.
            headers.push(("connection", "close".to_string()));
        }
        if let Some(stored) = self.stored {
            headers.push((wire::VERSION, stored.0.to_string()));
        }
        let body = ErrorBody { error: self.kind, reason: self.reason, epoch: epoch.unwrap_or(0) };
        serde_json::to_vec(&body).expect("error bodies serialize")
    }

    /// The refusal an answer of `status` (at least 400) carries: lenient, since a refusal is
    /// one whatever else it says.
    pub(crate) fn decode<'h>(
        status: u16,
        header: &impl Fn(&'static str) -> Option<&'h str>,
        body: &[u8],
    ) -> Refusal {
        let kind = header(wire::ERROR).and_then(ErrorKind::from_name).unwrap_or(match status {
            404 => ErrorKind::NotFound,
            413 => ErrorKind::TooLarge,
            507 => ErrorKind::Full,
            _ => ErrorKind::Io,
        });
        let parsed: Option<ErrorBody> = serde_json::from_slice(body).ok();
        let reason = parsed
            .map(|body| body.reason)
            .or_else(|| header(wire::REASON).map(str::to_string))
            .unwrap_or_else(|| format!("HTTP {status}"));
        let stored = (kind == ErrorKind::VersionConflict)
            .then(|| header(wire::VERSION).and_then(|v| v.parse().ok()).map(ObjectVersion))
            .flatten();
        Refusal { kind, reason, stored }
    }
}

impl Envelope {
    fn encode(&self, headers: &mut Vec<(&'static str, String)>) {
        if let Some(metrics) = &self.metrics {
            headers.push((wire::METRICS, metrics.to_header()));
        }
        if let Some(epoch) = self.epoch {
            headers.push((wire::EPOCH, epoch.to_string()));
        }
        if let Some(incarnation) = self.incarnation {
            headers.push((wire::INCARNATION, wire::encode_hex(incarnation)));
        }
    }

    /// The metrics an answer carries (a malformed value reads as none: they are advisory).
    pub fn metrics_of<'h>(
        header: impl Fn(&'static str) -> Option<&'h str>,
    ) -> Option<DeviceMetrics> {
        header(wire::METRICS).and_then(DeviceMetrics::from_header)
    }
}

/// Whether a 404 without an error kind answers `asked` (the object or record is absent)
/// rather than refusing it: probes and record requests.
pub fn absent_is_an_answer(asked: OpKind) -> bool {
    matches!(asked, OpKind::Probe | OpKind::RecordGet | OpKind::RecordPut | OpKind::RecordDelete)
}

impl<B: AnswerBody> Answer<B> {
    /// Decodes the answer of `status` with `header` (a header's value by its lower-case name,
    /// if present) and `body` to a request of kind `asked` for `key`.
    pub fn decode<'h>(
        asked: OpKind,
        key: Option<&str>,
        status: u16,
        header: impl Fn(&'static str) -> Option<&'h str>,
        body: B,
    ) -> Result<(Answer<B>, Envelope), AnswerError> {
        let metrics = Envelope::metrics_of(&header);
        let absent = status == 404 && absent_is_an_answer(asked) && header(wire::ERROR).is_none();
        if status >= 400 && !absent {
            let epoch = header(wire::EPOCH).and_then(|e| e.parse().ok());
            let refusal = Refusal::decode(status, &header, &body.bytes());
            return Ok((Answer::Refused(refusal), Envelope { epoch, metrics, incarnation: None }));
        }
        let epoch = decode_u64(&header, wire::EPOCH)?;
        let incarnation = header(wire::INCARNATION)
            .map(|value| wire::decode_hex_u64(wire::INCARNATION, value))
            .transpose()?;
        let envelope = Envelope { epoch, metrics, incarnation };
        let info = decode_info(&header, key, epoch.unwrap_or(0))?;
        let needs_info = |info: Option<ObjectInfo>| {
            info.ok_or(AnswerError::Missing { name: wire::SIZE, status })
        };
        let record = match header(wire::CHOICE) {
            None => None,
            Some(text) => Some(
                wire::parse_choice_header(text)
                    .ok_or_else(|| HeaderError { name: wire::CHOICE, value: text.to_string() })?,
            ),
        };
        let needs_record = |record: Option<ChoiceRecord>| {
            record.ok_or(AnswerError::Missing { name: wire::CHOICE, status })
        };
        let answer = match (asked, status) {
            (_, 404) => Answer::Probed {
                info: None,
                deleted: decode_u64(&header, wire::DELETED)?.map(ObjectVersion),
                record,
            },
            (OpKind::Probe, 200) => Answer::Probed {
                info: Some(needs_info(info)?),
                deleted: decode_u64(&header, wire::DELETED)?.map(ObjectVersion),
                record,
            },
            (OpKind::Get, 200) => Answer::Object { info: needs_info(info)?, range: None, body },
            (OpKind::Get, 206) => {
                let info = needs_info(info)?;
                let range = decode_content_range(&header, info.size_bytes)?;
                Answer::Object { info, range: Some(range), body }
            }
            (OpKind::Open, 200) => Answer::Opened { info: needs_info(info)? },
            (OpKind::Put | OpKind::Write, 200 | 201) => {
                let version = decode_u64(&header, wire::VERSION)?
                    .ok_or(AnswerError::Missing { name: wire::VERSION, status })?;
                Answer::Written { version: ObjectVersion(version), created: status == 201 }
            }
            (OpKind::Delete | OpKind::Sync | OpKind::RecordDelete, 204) => Answer::Done,
            (OpKind::List, 200) => {
                let listing = serde_json::from_slice(&body.bytes())
                    .map_err(|e| AnswerError::Listing(e.to_string()))?;
                Answer::Listed(listing)
            }
            (OpKind::RecordGet, 200) | (OpKind::RecordPut, 200 | 201) => {
                Answer::Record { record: needs_record(record)?, created: status == 201, info }
            }
            _ => return Err(AnswerError::Status { asked, status }),
        };
        Ok((answer, envelope))
    }
}

fn decode_u64<'h>(
    header: &impl Fn(&'static str) -> Option<&'h str>,
    name: &'static str,
) -> Result<Option<u64>, HeaderError> {
    header(name).map(|value| wire::decode_u64(name, value)).transpose()
}

/// The object an answer describes, when it carries [`wire::SIZE`], [`wire::VERSION`] and
/// [`wire::CHECKSUM`]; every one of its headers present must be well formed.
fn decode_info<'h>(
    header: &impl Fn(&'static str) -> Option<&'h str>,
    key: Option<&str>,
    epoch: u64,
) -> Result<Option<ObjectInfo>, HeaderError> {
    let malformed = |name, value: &str| HeaderError { name, value: value.to_string() };
    let (Some(size), Some(version), Some(checksum)) =
        (header(wire::SIZE), header(wire::VERSION), header(wire::CHECKSUM))
    else {
        return Ok(None);
    };
    Ok(Some(ObjectInfo {
        key: key.unwrap_or_default().to_string(),
        size_bytes: wire::decode_u64(wire::SIZE, size)?,
        version: ObjectVersion(wire::decode_u64(wire::VERSION, version)?),
        checksum: wire::decode_checksum(checksum)?,
        pg_seed: match header(wire::PG) {
            None => None,
            Some(pg) => Some(pg.parse().map_err(|_| malformed(wire::PG, pg))?),
        },
        epoch,
        summary: match header(wire::SUMMARY) {
            None => None,
            Some(text) if crate::summary::summary_from_hex(text).is_some() => Some(text.into()),
            Some(text) => return Err(malformed(wire::SUMMARY, text)),
        },
    }))
}

/// A 206's `content-range: bytes FIRST-LAST/SIZE`, of an object of `size_bytes`.
fn decode_content_range<'h>(
    header: &impl Fn(&'static str) -> Option<&'h str>,
    size_bytes: u64,
) -> Result<(u64, u64), AnswerError> {
    const NAME: &str = "content-range";
    let text = header(NAME).ok_or(AnswerError::Missing { name: NAME, status: 206 })?;
    let malformed = || HeaderError { name: NAME, value: text.to_string() };
    let (span, size) =
        text.strip_prefix("bytes ").and_then(|rest| rest.split_once('/')).ok_or_else(malformed)?;
    let (first, last) = span.split_once('-').ok_or_else(malformed)?;
    let parse = |text: &str| text.parse::<u64>().map_err(|_| malformed());
    let (first, last, size) = (parse(first)?, parse(last)?, parse(size)?);
    if size != size_bytes || first > last || last >= size {
        return Err(malformed().into());
    }
    Ok((first, last))
}

#[cfg(test)]
mod tests;
