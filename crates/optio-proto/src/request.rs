//! A request to one device as one typed value, for both ends of the wire: the client encodes
//! it ([`Request::method`], [`Request::path`], [`Request::headers`]) and the server decodes
//! it ([`Request::decode`]) once, then authenticates, counts and dispatches that one value
//! ([`Request::needed_cap`], [`Op::kind`]).
//!
//! The head only: a write's bytes travel beside it (an HTTP body or a frame's body), so a
//! client borrows its keys ([`Cow::Borrowed`]) and encodes without copying the data; the
//! decoder owns what it parsed.
//!
//! The wire format is the one [`crate::wire`] and [`crate::route`] name, unchanged, so
//! senders and servers of before and after this type interoperate. Decoding is strict where
//! a value is present (a malformed header is an error, never a default) and lenient where it
//! always was (headers a request does not use are ignored; presence flags such as
//! [`wire::WANT_CHOICE`] take any value).

use std::borrow::Cow;

use optio_placement::PoolId;

use crate::auth::Cap;
use crate::route::{self, Area, Route};
use crate::snap::SnapContext;
use crate::wire;
use crate::{ChoiceRecord, ErrorKind, ListQuery, ObjectVersion, is_gateway_key};

/// The query of a `POST` to a pool that is a trim ([`Op::Trim`]) rather than a flush.
pub const TRIM_QUERY: &str = "trim";

/// The HTTP methods a device request uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`.
    Head,
    /// `PUT`.
    Put,
    /// `POST`.
    Post,
    /// `DELETE`.
    Delete,
}

impl Method {
    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }

    /// The method named `name` (none: one no device route takes).
    pub fn parse(name: &str) -> Option<Method> {
        match name {
            "GET" => Some(Method::Get),
            "HEAD" => Some(Method::Head),
            "PUT" => Some(Method::Put),
            "POST" => Some(Method::Post),
            "DELETE" => Some(Method::Delete),
            _ => None,
        }
    }
}

/// A `Range` header's byte range, as sent (resolved against an object's size by
/// [`ByteRange::resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteRange {
    /// `bytes=first-last`, inclusive.
    Span {
        /// First byte.
        first: u64,
        /// Last byte (clamped to the object's last).
        last: u64,
    },
    /// `bytes=first-`: from `first` to the end.
    From(u64),
    /// `bytes=-n`: the last `n` bytes.
    Suffix(u64),
}

impl ByteRange {
    /// The header's value.
    pub fn encode(self) -> String {
        match self {
            ByteRange::Span { first, last } => format!("bytes={first}-{last}"),
            ByteRange::From(first) => format!("bytes={first}-"),
            ByteRange::Suffix(count) => format!("bytes=-{count}"),
        }
    }

    /// `bytes=a-b`, `bytes=a-`, `bytes=-n` (blanks around the numbers allowed).
    pub fn parse(text: &str) -> Option<ByteRange> {
        let spec = text.trim().strip_prefix("bytes=")?;
        let (a, b) = spec.split_once('-')?;
        match (a.trim(), b.trim()) {
            ("", n) => Some(ByteRange::Suffix(n.parse().ok()?)),
            (a, "") => Some(ByteRange::From(a.parse().ok()?)),
            (a, b) => Some(ByteRange::Span { first: a.parse().ok()?, last: b.parse().ok()? }),
        }
    }

    /// The inclusive `(first, last)` bytes of an object of `size` bytes (none: no byte of
    /// it, or an empty object).
    pub fn resolve(self, size: u64) -> Option<(u64, u64)> {
        let end = size.checked_sub(1)?;
        let (first, last) = match self {
            ByteRange::Suffix(count) => (size.saturating_sub(count), end),
            ByteRange::From(first) => (first, end),
            ByteRange::Span { first, last } => (first, last.min(end)),
        };
        (first <= last && first < size).then_some((first, last))
    }
}

/// What a write in place is based on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Basis {
    /// The write creates the object, of this size (holes read as zeros): [`wire::SIZE`].
    Create {
        /// The object's size.
        size_bytes: u64,
    },
    /// The write changes the object at this version: [`wire::BASE`].
    Change {
        /// The version the writer read.
        base: ObjectVersion,
    },
}

/// A write in place ([`wire::OFFSET`]) of a block object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteAt<'a> {
    /// Key.
    pub key: Cow<'a, str>,
    /// Where in the object.
    pub offset: u64,
    /// Zero bytes to write instead of a body (0: the body is written).
    pub zeroes: u64,
    /// A create of the object or a change of a version of it.
    pub basis: Basis,
    /// The version after the write (none: the server's clock).
    pub version: Option<ObjectVersion>,
    /// crc32c of the body.
    pub checksum: Option<u32>,
    /// PG seed (or placement key) the object is placed by.
    pub pg_seed: Option<u32>,
    /// Durable before the answer (FUA).
    pub sync: bool,
}

/// What a request asks of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// `HEAD` an object: is it there, plus metrics; with `want_choice` the home also answers
    /// its choice record.
    Probe {
        /// Key.
        key: Cow<'a, str>,
        /// Ask for the choice record too ([`wire::WANT_CHOICE`]).
        want_choice: bool,
    },
    /// `GET` an object, or a byte range of it.
    Get {
        /// Key.
        key: Cow<'a, str>,
        /// The range asked for.
        range: Option<ByteRange>,
    },
    /// `GET` an open descriptor of a block object's file ([`wire::OPEN`]; local socket only).
    Open {
        /// Key.
        key: Cow<'a, str>,
    },
    /// `GET` a whole object for a device catching up ([`wire::CATCH_UP`]).
    Fetch {
        /// Key.
        key: Cow<'a, str>,
    },
    /// `PUT` one version of an object.
    Put {
        /// Key.
        key: Cow<'a, str>,
        /// Version written (none: the server's clock).
        version: Option<ObjectVersion>,
        /// crc32c of the body.
        checksum: Option<u32>,
        /// PG seed (or placement key) the object is placed by.
        pg_seed: Option<u32>,
    },
    /// `PUT` in place.
    WriteAt(WriteAt<'a>),
    /// `POST` to a pool: make every acknowledged write durable.
    Sync,
    /// `POST` to a pool with the query [`TRIM_QUERY`]: remove the snapshot clones its body
    /// lists ([`crate::snap::encode_trim_body`]) outright, as [`Op::Delete`] of each at the
    /// version its key names would (one request for many: a trim's deletions).
    Trim,
    /// `DELETE` an object: a tombstone, or with `purge` the copy removed entirely.
    Delete {
        /// Key.
        key: Cow<'a, str>,
        /// Version deleted (or purged up to).
        version: Option<ObjectVersion>,
        /// Remove the copy instead of leaving a tombstone ([`wire::PURGE`]).
        purge: bool,
        /// PG seed kept with a tombstone.
        pg_seed: Option<u32>,
    },
    /// `DELETE` one's own failed write ([`wire::UNDO`]).
    Undo {
        /// Key.
        key: Cow<'a, str>,
        /// The version written.
        version: ObjectVersion,
    },
    /// `DELETE` the kept earlier versions of an erasure-coded object's chunk once version
    /// `version` of it is decodable ([`wire::COMMIT`]).
    Commit {
        /// Key.
        key: Cow<'a, str>,
        /// The version committed.
        version: ObjectVersion,
    },
    /// `GET` one page of the pool's listing.
    List(Cow<'a, ListQuery>),
    /// `GET` a choice record.
    GetRecord {
        /// Key.
        key: Cow<'a, str>,
        /// Answer once the record's latest change is committed ([`wire::WAIT_DURABLE`]).
        wait_durable: bool,
    },
    /// `PUT` a choice record: create it if absent (or replace this writer's own).
    PutRecord {
        /// Key.
        key: Cow<'a, str>,
        /// The record.
        record: ChoiceRecord,
        /// Replace the record if its writer is this one.
        replace_if_writer: Option<u64>,
        /// Do not replace when another writer's create was refused moments ago.
        unless_contended: bool,
        /// Answer before the record is committed.
        defer_sync: bool,
    },
    /// `DELETE` a choice record.
    DeleteRecord {
        /// Key.
        key: Cow<'a, str>,
    },
}

/// What kind of operation a request is, for metrics: known from its route, method and
/// [`wire::OPEN`] / [`wire::OFFSET`] alone, so a request whose other headers are malformed
/// is still counted as what it tried to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// [`Op::Probe`].
    Probe,
    /// [`Op::Get`] and [`Op::Fetch`].
    Get,
    /// [`Op::Put`].
    Put,
    /// [`Op::WriteAt`].
    Write,
    /// [`Op::Open`].
    Open,
    /// [`Op::Delete`] and [`Op::Undo`].
    Delete,
    /// [`Op::List`].
    List,
    /// [`Op::Sync`].
    Sync,
    /// [`Op::GetRecord`].
    RecordGet,
    /// [`Op::PutRecord`].
    RecordPut,
    /// [`Op::DeleteRecord`].
    RecordDelete,
}

impl OpKind {
    /// Every kind, in declaration order (`kind as usize` indexes it).
    pub const ALL: [OpKind; 11] = [
        OpKind::Probe,
        OpKind::Get,
        OpKind::Put,
        OpKind::Write,
        OpKind::Open,
        OpKind::Delete,
        OpKind::List,
        OpKind::Sync,
        OpKind::RecordGet,
        OpKind::RecordPut,
        OpKind::RecordDelete,
    ];

    /// Its name in metrics (`op="…"`).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Probe => "probe",
            OpKind::Get => "get",
            OpKind::Put => "put",
            OpKind::Write => "write",
            OpKind::Open => "open",
            OpKind::Delete => "delete",
            OpKind::List => "list",
            OpKind::Sync => "sync",
            OpKind::RecordGet => "record_get",
            OpKind::RecordPut => "record_put",
            OpKind::RecordDelete => "record_delete",
        }
    }
}

/// One request to a device: where, at which epoch, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// Device.
    pub device: u32,
    /// Pool.
    pub pool: PoolId,
    /// The sender's map epoch ([`wire::EPOCH`]).
    pub epoch: Option<u64>,
    /// What is asked.
    pub op: Op<'a>,
    /// On a write ([`Op::Put`], [`Op::WriteAt`], [`Op::Delete`] without purge): the volume's
    /// newest snapshot ([`wire::SNAP`]).
    pub snap: Option<SnapContext>,
    /// On a read ([`Op::Get`]): the snapshot mark to read as of ([`wire::AS_OF`]).
    pub as_of: Option<ObjectVersion>,
    /// On a whole read ([`Op::Get`] without a range, not as of a snapshot): answer once the
    /// object is above this version, or after [`wire::WAIT_NEWER_MAX_MS`] ([`wire::WAIT_NEWER`]).
    pub wait_newer: Option<ObjectVersion>,
}

/// Why a request does not decode: the kind the server answers with (`BadRequest`, or
/// `NotFound` for a path that is no route), the reason, and what the request needed and
/// tried to be, so that it is authenticated and counted as before it was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct DecodeError {
    /// Error kind.
    pub kind: ErrorKind,
    /// Reason, for people.
    pub reason: String,
    /// The capability the request needs ([`needed_cap_of_head`]).
    pub needed: Cap,
    /// What it tried to be, when its route and method say.
    pub kind_of_op: Option<OpKind>,
}

impl Op<'_> {
    /// The HTTP method.
    pub fn method(&self) -> Method {
        match self {
            Op::Probe { .. } => Method::Head,
            Op::Get { .. }
            | Op::Open { .. }
            | Op::Fetch { .. }
            | Op::List(_)
            | Op::GetRecord { .. } => Method::Get,
            Op::Put { .. } | Op::WriteAt(_) | Op::PutRecord { .. } => Method::Put,
            Op::Sync | Op::Trim => Method::Post,
            Op::Delete { .. } | Op::Undo { .. } | Op::Commit { .. } | Op::DeleteRecord { .. } => {
                Method::Delete
            }
        }
    }

    /// Objects or choice records.
    pub fn area(&self) -> Area {
        match self {
            Op::GetRecord { .. } | Op::PutRecord { .. } | Op::DeleteRecord { .. } => Area::Choices,
            _ => Area::Objects,
        }
    }

    /// The key (none: a listing or a flush).
    pub fn key(&self) -> Option<&str> {
        match self {
            Op::Probe { key, .. }
            | Op::Get { key, .. }
            | Op::Open { key }
            | Op::Fetch { key }
            | Op::Put { key, .. }
            | Op::WriteAt(WriteAt { key, .. })
            | Op::Delete { key, .. }
            | Op::Undo { key, .. }
            | Op::Commit { key, .. }
            | Op::GetRecord { key, .. }
            | Op::PutRecord { key, .. }
            | Op::DeleteRecord { key } => Some(key),
            Op::List(_) | Op::Sync | Op::Trim => None,
        }
    }

    /// What kind of operation this is.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Probe { .. } => OpKind::Probe,
            Op::Get { .. } | Op::Fetch { .. } => OpKind::Get,
            Op::Open { .. } => OpKind::Open,
            Op::Put { .. } => OpKind::Put,
            Op::WriteAt(_) => OpKind::Write,
            Op::Sync => OpKind::Sync,
            Op::Delete { .. } | Op::Undo { .. } | Op::Commit { .. } | Op::Trim => OpKind::Delete,
            Op::List(_) => OpKind::List,
            Op::GetRecord { .. } => OpKind::RecordGet,
            Op::PutRecord { .. } => OpKind::RecordPut,
            Op::DeleteRecord { .. } => OpKind::RecordDelete,
        }
    }

    /// The request's headers besides the epoch (Optio's and `range`), in the order they are
    /// sent, appended to `out`.
    pub fn encode_headers(&self, out: &mut Vec<(&'static str, String)>) {
        let one = || "1".to_string();
        match self {
            Op::Probe { want_choice, .. } => {
                if *want_choice {
                    out.push((wire::WANT_CHOICE, one()));
                }
            }
            Op::Get { range, .. } => {
                if let Some(range) = range {
                    out.push(("range", range.encode()));
                }
            }
            Op::Fetch { .. } => out.push((wire::CATCH_UP, one())),
            Op::Open { .. } => out.push((wire::OPEN, one())),
            Op::Put { version, checksum, pg_seed, .. } => {
                push_written(out, *version, *checksum);
                if let Some(seed) = pg_seed {
                    out.push((wire::PG, seed.to_string()));
                }
            }
            Op::WriteAt(write) => write.encode_headers(out),
            Op::Delete { version, purge, pg_seed, .. } => {
                if let Some(version) = version {
                    out.push((wire::VERSION, version.0.to_string()));
                }
                if *purge {
                    out.push((wire::PURGE, one()));
                }
                if let Some(seed) = pg_seed {
                    out.push((wire::PG, seed.to_string()));
                }
            }
            Op::Undo { version, .. } => {
                out.push((wire::VERSION, version.0.to_string()));
                out.push((wire::UNDO, one()));
            }
            Op::Commit { version, .. } => {
                out.push((wire::VERSION, version.0.to_string()));
                out.push((wire::COMMIT, one()));
            }
            Op::GetRecord { wait_durable, .. } => {
                if *wait_durable {
                    out.push((wire::WAIT_DURABLE, one()));
                }
            }
            Op::List(_) | Op::Sync | Op::Trim | Op::DeleteRecord { .. } => {}
            Op::PutRecord { record, replace_if_writer, unless_contended, defer_sync, .. } => {
                out.push((wire::CHOICE, wire::choice_header(record)));
                if let Some(writer) = replace_if_writer {
                    out.push((wire::REPLACE_IF_WRITER, wire::encode_hex(*writer)));
                }
                if *unless_contended {
                    out.push((wire::UNLESS_CONTENDED, one()));
                }
                if *defer_sync {
                    out.push((wire::DEFER_SYNC, one()));
                }
            }
        }
    }
}

/// The version and checksum of a write, as a PUT carries them.
fn push_written(
    out: &mut Vec<(&'static str, String)>,
    version: Option<ObjectVersion>,
    checksum: Option<u32>,
) {
    if let Some(version) = version {
        out.push((wire::VERSION, version.0.to_string()));
    }
    if let Some(checksum) = checksum {
        out.push((wire::CHECKSUM, wire::encode_checksum(checksum)));
    }
}

impl WriteAt<'_> {
    fn encode_headers(&self, out: &mut Vec<(&'static str, String)>) {
        push_written(out, self.version, self.checksum);
        out.push((wire::OFFSET, self.offset.to_string()));
        match self.basis {
            Basis::Change { base } => out.push((wire::BASE, base.0.to_string())),
            Basis::Create { size_bytes } => out.push((wire::SIZE, size_bytes.to_string())),
        }
        if self.zeroes > 0 {
            out.push((wire::ZEROES, self.zeroes.to_string()));
        }
        if self.sync {
            out.push((wire::SYNC, "1".to_string()));
        }
        if let Some(seed) = self.pg_seed {
            out.push((wire::PG, seed.to_string()));
        }
    }
}

impl Request<'_> {
    /// The HTTP method.
    pub fn method(&self) -> Method {
        self.op.method()
    }

    /// The path and query.
    pub fn path(&self) -> String {
        let mut path = route::device_path(self.device, self.op.area(), self.pool, self.op.key());
        if let Op::List(query) = &self.op {
            let query = query.to_query();
            if !query.is_empty() {
                path.push('?');
                path.push_str(&query);
            }
        }
        if let Op::Trim = &self.op {
            path.push('?');
            path.push_str(TRIM_QUERY);
        }
        path
    }

    /// The headers: the operation's ([`Op::encode_headers`]), then the epoch.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = Vec::with_capacity(8);
        self.op.encode_headers(&mut headers);
        if let Some(snap) = self.snap {
            headers.push((wire::SNAP, snap.encode()));
        }
        if let Some(mark) = self.as_of {
            headers.push((wire::AS_OF, mark.0.to_string()));
        }
        if let Some(version) = self.wait_newer {
            headers.push((wire::WAIT_NEWER, version.0.to_string()));
        }
        if let Some(epoch) = self.epoch {
            headers.push((wire::EPOCH, epoch.to_string()));
        }
        headers
    }

    /// The capability the request needs: `server` to catch up, `admin` to purge, `read` to
    /// probe, read and list, `write` for the rest; at least `gateway` for the gateway's own
    /// keys and listings of them ([`crate::GATEWAY_PREFIX`]).
    pub fn needed_cap(&self) -> Cap {
        let need = match &self.op {
            Op::Fetch { .. } => return Cap::Server,
            Op::Probe { .. }
            | Op::Get { .. }
            | Op::Open { .. }
            | Op::List(_)
            | Op::GetRecord { .. } => Cap::Read,
            Op::Delete { purge: true, .. } => Cap::Admin,
            _ => Cap::Write,
        };
        let gateway_state = match &self.op {
            Op::List(query) => query.prefix.as_deref().is_some_and(is_gateway_key),
            op => op.key().is_some_and(is_gateway_key),
        };
        if gateway_state { need.max(Cap::Gateway) } else { need }
    }
}

/// The capability a request needs, from its head alone, whether or not it decodes: what
/// [`Request::needed_cap`] says of every request that does. A request refused as malformed
/// is authenticated against it first, so a malformed request tells an unauthorised sender
/// nothing more than a well-formed one.
pub fn needed_cap_of_head<'h>(
    method: &str,
    path_and_query: &str,
    header: impl Fn(&'static str) -> Option<&'h [u8]>,
) -> Cap {
    if header(wire::CATCH_UP).is_some() {
        return Cap::Server;
    }
    let need = match method {
        "GET" | "HEAD" => Cap::Read,
        "DELETE" if header(wire::PURGE).is_some() => Cap::Admin,
        _ => Cap::Write,
    };
    let (path, query) = split_query(path_and_query);
    let gateway_state = match Route::parse(path) {
        Ok(Route { key: Some(key), .. }) => is_gateway_key(&key),
        Ok(Route { key: None, .. }) => query
            .and_then(|query| parse_list_query(query).ok())
            .and_then(|query| query.prefix)
            .is_some_and(|prefix| is_gateway_key(&prefix)),
        Err(_) => false,
    };
    if gateway_state { need.max(Cap::Gateway) } else { need }
}

fn split_query(path_and_query: &str) -> (&str, Option<&str>) {
    match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    }
}

/// What is wrong with a request's method, headers or query, once its route is known: the
/// [`DecodeError::reason`] a server answers with is this error's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BadHead {
    /// A request on an object or record without a key.
    #[error("the key is empty; keys are 1 to 1024 bytes of UTF-8")]
    EmptyKey,
    /// A method the route does not take.
    #[error("method {method} is not allowed here")]
    MethodNotAllowed {
        /// The method sent.
        method: String,
    },
    /// A header that must be an integer is not one.
    #[error("{header} is not an integer")]
    NotInteger {
        /// The header.
        header: &'static str,
    },
    /// The PG seed does not fit in 32 bits.
    #[error("{} is not a 32-bit seed", wire::PG)]
    SeedTooLarge,
    /// The checksum header is not 8 hex digits.
    #[error("{} is not 8 hex digits", wire::CHECKSUM)]
    BadChecksum,
    /// A flag header with a value other than `1`.
    #[error("{header} takes the value 1 only")]
    FlagNotOne {
        /// The header.
        header: &'static str,
    },
    /// The catch-up header on anything but a GET of a whole object.
    #[error("{} goes on a GET of a whole object only", wire::CATCH_UP)]
    CatchUpNotWholeGet,
    /// A listing query that does not parse (the parser's message).
    #[error("bad listing query: {reason}")]
    BadListQuery {
        /// Why it does not parse.
        reason: String,
    },
    /// A flush with a query (other than [`TRIM_QUERY`]).
    #[error("a flush takes no query (a trim's is '{TRIM_QUERY}')")]
    FlushWithQuery,
    /// A malformed `range` header.
    #[error("range '{text}' is malformed; send bytes=FIRST-LAST")]
    BadRange {
        /// The header's value.
        text: String,
    },
    /// Purge and undo on one delete.
    #[error("{} and {} do not go together", wire::PURGE, wire::UNDO)]
    PurgeAndUndo,
    /// An undo without the version it undoes.
    #[error("{} needs the version written ({})", wire::UNDO, wire::VERSION)]
    UndoWithoutVersion,
    /// A commit with a purge or an undo.
    #[error("{} goes with neither {} nor {}", wire::COMMIT, wire::PURGE, wire::UNDO)]
    CommitAndRemoval,
    /// A commit without the version committed.
    #[error("{} needs the version committed ({})", wire::COMMIT, wire::VERSION)]
    CommitWithoutVersion,
    /// A choice record header that does not parse.
    #[error("{} must be CANDIDATE/CHOICES/WRITER_HEX", wire::CHOICE)]
    BadChoice,
    /// A choice record whose candidate is not one of its choices.
    #[error("candidate {candidate} is not below choices {choices}")]
    CandidateNotBelowChoices {
        /// The candidate.
        candidate: u8,
        /// The choices.
        choices: u8,
    },
    /// The replace-if-writer header is not hex.
    #[error("{} must be hex", wire::REPLACE_IF_WRITER)]
    BadReplaceIfWriter,
    /// A snapshot context that does not parse.
    #[error("{} must be SEQ:MARK, two integers", wire::SNAP)]
    BadSnap,
    /// A snapshot context on a request that is not a write or delete of an object.
    #[error("{} goes on writes and deletes of objects only", wire::SNAP)]
    SnapNotOnWrite,
    /// A snapshot mark on a request that is not a read of an object.
    #[error("{} goes on reads of objects only", wire::AS_OF)]
    AsOfNotOnRead,
    /// A wait for a newer version on a request that is not a whole read.
    #[error(
        "{} applies to whole reads (GET without a range, not as of a snapshot) only",
        wire::WAIT_NEWER
    )]
    WaitNewerNotOnWholeRead,
}

fn parse_list_query(query: &str) -> Result<ListQuery, BadHead> {
    serde_urlencoded::from_str(query).map_err(|e| BadHead::BadListQuery { reason: e.to_string() })
}

/// The operation a route and method name (`open` and `offset`: whether [`wire::OPEN`] and
/// [`wire::OFFSET`] are present), or the reason none is.
fn kind_of(
    area: Area,
    keyed: bool,
    method: &str,
    open: bool,
    offset: bool,
) -> Result<OpKind, BadHead> {
    let method_known = Method::parse(method);
    Ok(match (area, keyed, method_known) {
        (Area::Objects, false, Some(Method::Get)) => OpKind::List,
        (Area::Objects, false, Some(Method::Post)) => OpKind::Sync,
        (_, false, _) => {
            return Err(BadHead::EmptyKey);
        }
        (Area::Objects, true, Some(Method::Head)) => OpKind::Probe,
        (Area::Objects, true, Some(Method::Get)) if open => OpKind::Open,
        (Area::Objects, true, Some(Method::Get)) => OpKind::Get,
        (Area::Objects, true, Some(Method::Put)) if offset => OpKind::Write,
        (Area::Objects, true, Some(Method::Put)) => OpKind::Put,
        (Area::Objects, true, Some(Method::Delete)) => OpKind::Delete,
        (Area::Choices, true, Some(Method::Get | Method::Head)) => OpKind::RecordGet,
        (Area::Choices, true, Some(Method::Put)) => OpKind::RecordPut,
        (Area::Choices, true, Some(Method::Delete)) => OpKind::RecordDelete,
        _ => return Err(BadHead::MethodNotAllowed { method: method.to_string() }),
    })
}

/// Reads the headers of one request.
struct Headers<F> {
    header: F,
}

impl<'h, F: Fn(&'static str) -> Option<&'h [u8]>> Headers<F> {
    fn has(&self, name: &'static str) -> bool {
        (self.header)(name).is_some()
    }

    fn text(&self, name: &'static str) -> Option<Option<&'h str>> {
        (self.header)(name).map(|value| std::str::from_utf8(value).ok())
    }

    fn u64(&self, name: &'static str) -> Result<Option<u64>, BadHead> {
        match self.text(name) {
            None => Ok(None),
            Some(text) => text
                .and_then(|text| text.parse().ok())
                .map(Some)
                .ok_or(BadHead::NotInteger { header: name }),
        }
    }

    fn version(&self) -> Result<Option<ObjectVersion>, BadHead> {
        Ok(self.u64(wire::VERSION)?.map(ObjectVersion))
    }

    fn pg_seed(&self) -> Result<Option<u32>, BadHead> {
        self.u64(wire::PG)?
            .map(|seed| u32::try_from(seed).map_err(|_| BadHead::SeedTooLarge))
            .transpose()
    }

    fn checksum(&self) -> Result<Option<u32>, BadHead> {
        match self.text(wire::CHECKSUM) {
            None => Ok(None),
            Some(text) => text
                .and_then(|text| wire::decode_checksum(text).ok())
                .map(Some)
                .ok_or(BadHead::BadChecksum),
        }
    }

    /// A strict flag: absent (false) or `1` (true); anything else is refused.
    fn flag(&self, name: &'static str) -> Result<bool, BadHead> {
        match (self.header)(name) {
            None => Ok(false),
            Some(b"1") => Ok(true),
            Some(_) => Err(BadHead::FlagNotOne { header: name }),
        }
    }
}

impl Request<'static> {
    /// Decodes a request's head: its method, path and query, and `header` (a header's value
    /// by its lower-case name, if present). Headers a request does not use are ignored.
    pub fn decode<'h>(
        method: &str,
        path_and_query: &str,
        header: impl Fn(&'static str) -> Option<&'h [u8]>,
    ) -> Result<Request<'static>, DecodeError> {
        let headers = Headers { header };
        let refuse = |kind: ErrorKind, reason: String, kind_of_op: Option<OpKind>| DecodeError {
            kind,
            reason,
            needed: needed_cap_of_head(method, path_and_query, &headers.header),
            kind_of_op,
        };
        let (path, query) = split_query(path_and_query);
        let Route { device, area, pool, key } =
            Route::parse(path).map_err(|e| refuse(e.kind, e.reason, None))?;
        let kind = kind_of(
            area,
            key.is_some(),
            method,
            headers.has(wire::OPEN),
            headers.has(wire::OFFSET),
        )
        .map_err(|bad| refuse(ErrorKind::BadRequest, bad.to_string(), None))?;
        let bad = |bad: BadHead| refuse(ErrorKind::BadRequest, bad.to_string(), Some(kind));
        let epoch = headers.u64(wire::EPOCH).map_err(bad)?;
        let op = decode_op(kind, key, query, &headers).map_err(bad)?;
        let (snap, as_of) = decode_snap(&op, &headers).map_err(bad)?;
        let wait_newer = headers.u64(wire::WAIT_NEWER).map_err(bad)?.map(ObjectVersion);
        if wait_newer.is_some() && (as_of.is_some() || !matches!(op, Op::Get { range: None, .. })) {
            return Err(bad(BadHead::WaitNewerNotOnWholeRead));
        }
        Ok(Request { device, pool, epoch, op, snap, as_of, wait_newer })
    }
}

/// The operation of `kind` on `key`, from the query and headers.
fn decode_op<'h, F: Fn(&'static str) -> Option<&'h [u8]>>(
    kind: OpKind,
    key: Option<String>,
    query: Option<&str>,
    headers: &Headers<F>,
) -> Result<Op<'static>, BadHead> {
    let catch_up = headers.has(wire::CATCH_UP);
    let whole_get = kind == OpKind::Get && !headers.has("range");
    if catch_up && !whole_get {
        return Err(BadHead::CatchUpNotWholeGet);
    }
    let Some(key) = key.map(Cow::Owned) else {
        return match kind {
            OpKind::List => match query {
                None => Ok(Op::List(Cow::Owned(ListQuery::default()))),
                Some(query) => parse_list_query(query).map(|query| Op::List(Cow::Owned(query))),
            },
            // (A server from before trims refuses the query: its sender then deletes one by one.)
            _ if query == Some(TRIM_QUERY) => Ok(Op::Trim),
            _ if query.is_some_and(|query| !query.is_empty()) => Err(BadHead::FlushWithQuery),
            _ => Ok(Op::Sync),
        };
    };
    Ok(match kind {
        OpKind::Probe => Op::Probe { key, want_choice: headers.has(wire::WANT_CHOICE) },
        OpKind::Get if catch_up => Op::Fetch { key },
        OpKind::Get => {
            let range = match headers.text("range") {
                None => None,
                Some(text) => {
                    let text = text.unwrap_or("");
                    Some(
                        ByteRange::parse(text)
                            .ok_or_else(|| BadHead::BadRange { text: text.to_string() })?,
                    )
                }
            };
            Op::Get { key, range }
        }
        OpKind::Open => Op::Open { key },
        OpKind::Put => Op::Put {
            key,
            version: headers.version()?,
            checksum: headers.checksum()?,
            pg_seed: headers.pg_seed()?,
        },
        OpKind::Write => Op::WriteAt(decode_write_at(key, headers)?),
        OpKind::Delete => decode_delete(key, headers)?,
        OpKind::RecordGet => Op::GetRecord { key, wait_durable: headers.has(wire::WAIT_DURABLE) },
        OpKind::RecordPut => decode_put_record(key, headers)?,
        OpKind::RecordDelete => Op::DeleteRecord { key },
        OpKind::List | OpKind::Sync => unreachable!("listings and flushes have no key"),
    })
}

/// The snapshot context of a write and the mark of a read, each refused on any other request.
fn decode_snap<'h, F: Fn(&'static str) -> Option<&'h [u8]>>(
    op: &Op<'_>,
    headers: &Headers<F>,
) -> Result<(Option<SnapContext>, Option<ObjectVersion>), BadHead> {
    let snap = match headers.text(wire::SNAP) {
        None => None,
        Some(text) => Some(text.and_then(SnapContext::parse).ok_or(BadHead::BadSnap)?),
    };
    let as_of = headers.u64(wire::AS_OF)?.map(ObjectVersion);
    let writes = matches!(op, Op::Put { .. } | Op::WriteAt(_) | Op::Delete { purge: false, .. });
    if snap.is_some() && !writes {
        return Err(BadHead::SnapNotOnWrite);
    }
    if as_of.is_some() && !matches!(op, Op::Get { .. }) {
        return Err(BadHead::AsOfNotOnRead);
    }
    Ok((snap, as_of))
}

fn decode_write_at<'h, F: Fn(&'static str) -> Option<&'h [u8]>>(
    key: Cow<'static, str>,
    headers: &Headers<F>,
) -> Result<WriteAt<'static>, BadHead> {
    let version = headers.version()?;
    let checksum = headers.checksum()?;
    let pg_seed = headers.pg_seed()?;
    let offset = headers.u64(wire::OFFSET)?.unwrap_or(0);
    let base = headers.u64(wire::BASE)?.map(ObjectVersion);
    let size_bytes = headers.u64(wire::SIZE)?.unwrap_or(0);
    let zeroes = headers.u64(wire::ZEROES)?.unwrap_or(0);
    let sync = (headers.header)(wire::SYNC) == Some(b"1");
    let basis = match base {
        Some(base) => Basis::Change { base },
        None => Basis::Create { size_bytes },
    };
    Ok(WriteAt { key, offset, zeroes, basis, version, checksum, pg_seed, sync })
}

fn decode_delete<'h, F: Fn(&'static str) -> Option<&'h [u8]>>(
    key: Cow<'static, str>,
    headers: &Headers<F>,
) -> Result<Op<'static>, BadHead> {
    let version = headers.version()?;
    let purge = headers.flag(wire::PURGE)?;
    let undo = headers.flag(wire::UNDO)?;
    if headers.flag(wire::COMMIT)? {
        return match (purge || undo, version) {
            (true, _) => Err(BadHead::CommitAndRemoval),
            (false, None) => Err(BadHead::CommitWithoutVersion),
            (false, Some(version)) => Ok(Op::Commit { key, version }),
        };
    }
    match (purge, undo, version) {
        (true, true, _) => Err(BadHead::PurgeAndUndo),
        (_, true, None) => Err(BadHead::UndoWithoutVersion),
        (_, true, Some(version)) => Ok(Op::Undo { key, version }),
        (purge, false, version) => {
            Ok(Op::Delete { key, version, purge, pg_seed: headers.pg_seed()? })
        }
    }
}

fn decode_put_record<'h, F: Fn(&'static str) -> Option<&'h [u8]>>(
    key: Cow<'static, str>,
    headers: &Headers<F>,
) -> Result<Op<'static>, BadHead> {
    let record = headers
        .text(wire::CHOICE)
        .flatten()
        .and_then(wire::parse_choice_header)
        .ok_or(BadHead::BadChoice)?;
    if record.candidate >= record.choices {
        return Err(BadHead::CandidateNotBelowChoices {
            candidate: record.candidate,
            choices: record.choices,
        });
    }
    let replace_if_writer = match headers.text(wire::REPLACE_IF_WRITER) {
        None => None,
        Some(text) => Some(
            text.and_then(|text| wire::decode_hex_u64(wire::REPLACE_IF_WRITER, text).ok())
                .ok_or(BadHead::BadReplaceIfWriter)?,
        ),
    };
    Ok(Op::PutRecord {
        key,
        record,
        replace_if_writer,
        unless_contended: headers.has(wire::UNLESS_CONTENDED),
        defer_sync: headers.has(wire::DEFER_SYNC),
    })
}

#[cfg(test)]
mod tests;
