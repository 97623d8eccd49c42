//! A request to one device as a typed value: the device ([`Endpoint`]), what is asked
//! ([`Op`]: its method, route area, key and `x-optio-*` headers) and the call that carries
//! it with the pool and the sender's epoch ([`Call`]: its path and query). Sending it is the
//! transport's (`http`, `frames`, `local`).
//!
//! The wire form is [`optio_proto::request`]'s, the one the server decodes: [`Op::to_proto`]
//! borrows the operation as that type (keys and query borrowed, the body left beside it), and
//! its method, path and headers are that type's encoding.

use std::borrow::Cow;

use bytes::Bytes;
use optio_placement::PoolId;
use optio_proto::request::{self, Basis, ByteRange, Request};
use optio_proto::route::Area;
use optio_proto::snap::SnapContext;
use optio_proto::{ChoiceRecord, ListQuery, ObjectVersion};
use reqwest::Method;

/// The largest range read or written in place that goes as a frame. Frames save a small
/// request most of its cost; a large one costs its bytes, which HTTP/1.1 streams without
/// holding them whole (a frame is held whole on both sides), and several large ones in flight
/// go over connections of their own instead of one after the other on one (measured: 4 MiB
/// sequential reads at queue depth 8 ran at 0.58 of qemu-nbd as frames, 0.73–0.84 over HTTP).
pub const FRAMED_BYTES_MAX: u64 = 256 << 10;

/// A device and where its server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Device id.
    pub device: u32,
    /// `host:port`.
    pub addr: String,
}

/// What a call asks of a device.
#[derive(Clone, Debug)]
pub enum Op<'a> {
    /// `HEAD` an object: is it there (and a tombstone's version), plus metrics; with
    /// `want_choice`, the home also answers its choice record.
    Probe {
        /// Key.
        key: &'a str,
        /// Ask for the choice record too.
        want_choice: bool,
    },
    /// `GET` an object, or the inclusive byte range of it.
    Get {
        /// Key.
        key: &'a str,
        /// Inclusive byte range.
        range: Option<(u64, u64)>,
    },
    /// `GET` an open, read-only descriptor of a block object's file, with the object's
    /// headers: only over a server's local socket ([`Transport::open_local`]).
    Open {
        /// Key.
        key: &'a str,
    },
    /// `GET` a whole object for a device catching up on missed writes: answered even by a
    /// device that is catching up itself (see `optio-server`'s `catchup`).
    Fetch {
        /// Key.
        key: &'a str,
    },
    /// `PUT` one version of an object.
    Put {
        /// Key.
        key: &'a str,
        /// Data.
        data: Bytes,
        /// Version written.
        version: ObjectVersion,
        /// crc32c of `data`.
        checksum: u32,
        /// PG seed (or placement key) the object is placed by.
        pg_seed: Option<u32>,
    },
    /// `PUT` in place: write `data` (or `zeroes` zero bytes) at `offset` of a block object,
    /// based on version `base` (none: create the object, `size` bytes).
    WriteAt {
        /// Key.
        key: &'a str,
        /// The bytes written (empty with `zeroes`).
        data: Bytes,
        /// Where in the object.
        offset: u64,
        /// Zero bytes to write instead of data.
        zeroes: u64,
        /// The object's size, for a create.
        size: u64,
        /// The version the write is based on (none: a create).
        base: Option<ObjectVersion>,
        /// The version after the write.
        version: ObjectVersion,
        /// crc32c of `data`.
        checksum: u32,
        /// PG seed (or placement key) the object is placed by.
        pg_seed: Option<u32>,
        /// Durable before the answer (FUA).
        sync: bool,
    },
    /// `POST` to a pool of a device: make every write it acknowledged durable (flush).
    Sync,
    /// `POST` to a pool of a device with the query `trim`: remove the snapshot clones `body`
    /// names ([`optio_proto::snap::encode_trim_body`]) outright, as a [`Op::Delete`] of each at
    /// its key's version would.
    Trim {
        /// The clones' keys, each followed by a NUL.
        body: Bytes,
    },
    /// `DELETE` an object: a tombstone at `version`, or with `purge` the copy removed
    /// entirely if not newer than `version`.
    Delete {
        /// Key.
        key: &'a str,
        /// Version deleted (or purged up to).
        version: Option<ObjectVersion>,
        /// Remove the copy (object or tombstone) instead of leaving a tombstone.
        purge: bool,
        /// The PG seed (or placement key) of the object, kept with a tombstone the device did
        /// not hold a copy for (rebalancing and catching up place tombstones by it).
        pg_seed: Option<u32>,
    },
    /// `DELETE` one's own write that could not complete ([`optio_proto::wire::UNDO`]): the copy goes only
    /// if it is a live object of exactly `version`, written recently.
    Undo {
        /// Key.
        key: &'a str,
        /// The version written.
        version: ObjectVersion,
    },
    /// `DELETE` the earlier versions of an erasure-coded chunk kept while version `version`
    /// was written ([`optio_proto::wire::COMMIT`]): that version is decodable.
    Commit {
        /// Key.
        key: &'a str,
        /// The version committed.
        version: ObjectVersion,
    },
    /// `GET` one page of the pool's listing.
    List(ListQuery),
    /// `GET` a choice record.
    GetRecord {
        /// Key.
        key: &'a str,
    },
    /// `PUT` a choice record: create it if absent (or replace this writer's own).
    PutRecord {
        /// Key.
        key: &'a str,
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
        key: &'a str,
    },
}

impl Op<'_> {
    /// The request this operation is, as [`optio_proto::request`] types it: borrowed, without
    /// the body (no allocation).
    pub fn to_proto(&self) -> request::Op<'_> {
        fn key<'k>(key: &&'k str) -> Cow<'k, str> {
            Cow::Borrowed(*key)
        }
        match self {
            Op::Probe { key: k, want_choice } => {
                request::Op::Probe { key: key(k), want_choice: *want_choice }
            }
            Op::Get { key: k, range } => request::Op::Get {
                key: key(k),
                range: range.map(|(first, last)| ByteRange::Span { first, last }),
            },
            Op::Open { key: k } => request::Op::Open { key: key(k) },
            Op::Fetch { key: k } => request::Op::Fetch { key: key(k) },
            Op::Put { key: k, version, checksum, pg_seed, .. } => request::Op::Put {
                key: key(k),
                version: Some(*version),
                checksum: Some(*checksum),
                pg_seed: *pg_seed,
            },
            Op::WriteAt {
                key: k,
                offset,
                zeroes,
                size,
                base,
                version,
                checksum,
                pg_seed,
                sync,
                ..
            } => request::Op::WriteAt(request::WriteAt {
                key: key(k),
                offset: *offset,
                zeroes: *zeroes,
                basis: match base {
                    Some(base) => Basis::Change { base: *base },
                    None => Basis::Create { size_bytes: *size },
                },
                version: Some(*version),
                checksum: Some(*checksum),
                pg_seed: *pg_seed,
                sync: *sync,
            }),
            Op::Sync => request::Op::Sync,
            Op::Trim { .. } => request::Op::Trim,
            Op::Delete { key: k, version, purge, pg_seed } => request::Op::Delete {
                key: key(k),
                version: *version,
                purge: *purge,
                pg_seed: *pg_seed,
            },
            Op::Undo { key: k, version } => request::Op::Undo { key: key(k), version: *version },
            Op::Commit { key: k, version } => {
                request::Op::Commit { key: key(k), version: *version }
            }
            Op::List(query) => request::Op::List(Cow::Borrowed(query)),
            Op::GetRecord { key: k } => request::Op::GetRecord { key: key(k), wait_durable: false },
            Op::PutRecord { key: k, record, replace_if_writer, unless_contended, defer_sync } => {
                request::Op::PutRecord {
                    key: key(k),
                    record: *record,
                    replace_if_writer: *replace_if_writer,
                    unless_contended: *unless_contended,
                    defer_sync: *defer_sync,
                }
            }
            Op::DeleteRecord { key: k } => request::Op::DeleteRecord { key: key(k) },
        }
    }

    /// The HTTP method.
    pub fn method(&self) -> Method {
        match self.to_proto().method() {
            request::Method::Get => Method::GET,
            request::Method::Head => Method::HEAD,
            request::Method::Put => Method::PUT,
            request::Method::Post => Method::POST,
            request::Method::Delete => Method::DELETE,
        }
    }

    /// Whether the request and its answer are small enough to go in frames (see
    /// [`optio_proto::frames`]): probes, ranged reads and writes in place of at most
    /// [`FRAMED_BYTES_MAX`], flushes, deletes and choice records. Whole objects (reads, writes,
    /// catching up), larger ranges and listings go over HTTP/1.1, which streams them over
    /// connections of their own.
    pub fn fits_a_frame(&self) -> bool {
        let limit = FRAMED_BYTES_MAX;
        match self {
            Op::Probe { .. }
            | Op::Open { .. }
            | Op::Sync
            | Op::Delete { .. }
            | Op::Undo { .. }
            | Op::Commit { .. }
            | Op::GetRecord { .. }
            | Op::PutRecord { .. }
            | Op::DeleteRecord { .. } => true,
            Op::Get { range, .. } => {
                range.is_some_and(|(start, end)| end.saturating_sub(start) < limit)
            }
            Op::WriteAt { data, .. } => data.len() as u64 <= limit,
            Op::Trim { body } => body.len() as u64 <= limit,
            Op::Fetch { .. } | Op::Put { .. } | Op::List(_) => false,
        }
    }

    /// Objects or choice records.
    pub fn area(&self) -> Area {
        self.to_proto().area()
    }

    /// The key (none: a listing).
    pub fn key(&self) -> Option<&str> {
        match self {
            Op::Probe { key, .. }
            | Op::Get { key, .. }
            | Op::Open { key }
            | Op::Fetch { key }
            | Op::Put { key, .. }
            | Op::WriteAt { key, .. }
            | Op::Delete { key, .. }
            | Op::Undo { key, .. }
            | Op::Commit { key, .. }
            | Op::GetRecord { key }
            | Op::PutRecord { key, .. }
            | Op::DeleteRecord { key } => Some(key),
            Op::List(_) | Op::Sync | Op::Trim { .. } => None,
        }
    }

    /// Whether a 404 without an error kind is an answer (the object or record is absent)
    /// rather than a refusal: probes and record requests.
    pub fn absent_is_an_answer(&self) -> bool {
        optio_proto::answer::absent_is_an_answer(self.to_proto().kind())
    }

    /// Whether the device's answer is a probe of it (a record request is one too).
    pub fn is_probe(&self) -> bool {
        matches!(self, Op::Probe { .. } | Op::PutRecord { .. })
    }

    /// The request's Optio headers (besides the epoch), in the order they are sent
    /// ([`request::Op::encode_headers`]).
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = Vec::with_capacity(8);
        self.to_proto().encode_headers(&mut headers);
        headers
    }
}

/// One request to a device: what, where, and the sender's map epoch.
#[derive(Clone, Debug)]
pub struct Call<'a> {
    /// Device.
    pub endpoint: &'a Endpoint,
    /// Pool.
    pub pool: PoolId,
    /// The sender's epoch.
    pub epoch: u64,
    /// What is asked.
    pub op: Op<'a>,
    /// On a write of a volume's data object: its newest snapshot ([`optio_proto::snap`]).
    pub snap: Option<SnapContext>,
    /// On a read: the snapshot mark to read as of.
    pub as_of: Option<ObjectVersion>,
    /// On a whole read: answer once the object is above this version, or after the server's
    /// bound ([`optio_proto::wire::WAIT_NEWER`]).
    pub wait_newer: Option<ObjectVersion>,
}

impl<'a> Call<'a> {
    /// A call of `op` on `pool` at `endpoint`, at `epoch`.
    pub fn new(endpoint: &'a Endpoint, pool: PoolId, epoch: u64, op: Op<'a>) -> Call<'a> {
        Call { endpoint, pool, epoch, op, snap: None, as_of: None, wait_newer: None }
    }

    /// The request as [`optio_proto::request`] types it (borrowed; the body is not in it).
    pub fn request(&self) -> Request<'_> {
        Request {
            device: self.endpoint.device,
            pool: self.pool,
            epoch: Some(self.epoch),
            op: self.op.to_proto(),
            snap: self.snap,
            as_of: self.as_of,
            wait_newer: self.wait_newer,
        }
    }

    /// The request's path and query.
    pub fn path(&self) -> String {
        self.request().path()
    }
}
