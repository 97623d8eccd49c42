//! Objects: probe (`HEAD`), read (`GET`, ranges too), write (`PUT`), delete or purge
//! (`DELETE`), and the listing of a pool (`GET` without a key).

use bytes::Bytes;
use optio_proto::answer::{Answer, Refusal};
use optio_proto::request::{Basis, ByteRange, WriteAt};
use optio_proto::wire;
use optio_proto::{ErrorKind, ListQuery, ObjectInfo, ObjectVersion};

use crate::store::{LIST_LIMIT_MAX, PutOutcome, PutRequest, SmallDelete, SmallPut, is_small_put};

use super::incoming::Incoming;
use super::state::AppState;
use super::target::{Handled, Target, fail};

/// Reads and writes in place up to this size run on the request's own task (page-cache
/// work of microseconds); larger ones, and whole objects, on the blocking pool.
const SMALL_IO_BYTES: u64 = 64 * 1024;

pub(super) fn probe(target: &Target, key: &str, want_choice: bool) -> Handled {
    let info = target.store.info(target.pool, key);
    let deleted = match info {
        None => target.store.tombstone(target.pool, key),
        Some(_) => None,
    };
    let record = want_choice.then(|| target.store.record(target.pool, key)).flatten();
    Ok(Answer::Probed { info, deleted, record })
}

pub(super) async fn get_object(target: &Target, key: String, range: Option<ByteRange>) -> Handled {
    if let Some(version) = target.wait_newer {
        let bound = std::time::Duration::from_millis(wire::WAIT_NEWER_MAX_MS);
        target.store.wait_newer(target.pool, &key, version, bound).await;
    }
    let Some(mark) = target.as_of else {
        let (info, range, body) = read_object(target, key, range).await?;
        return Ok(Answer::Object { info, range, body });
    };
    // A read as of a snapshot reads the head or the clone that snapshot sees (answered
    // under the head's key), or finds nothing: the object did not exist then. The head
    // chosen may be changed by a write under a newer snapshot between the choice and the read
    // (the read takes the key's stripe, the choice does not): that write kept the head's
    // content as a clone first, so a head read at a version not below the mark is chosen
    // again — the clone then — rather than answered.
    for _ in 0..ASOF_ATTEMPTS {
        let Some(held) = target.store.key_as_of(target.pool, &key, mark) else {
            return Err(fail(ErrorKind::NotFound, "no such object at that snapshot"));
        };
        let (mut info, sent, body) = match read_object(target, held.clone(), range).await {
            Ok(read) => read,
            // The head deleted since it was chosen (a shrink under a newer snapshot, which
            // kept it as a clone first): choose again.
            Err(refusal) if held == key && refusal.kind == ErrorKind::NotFound => continue,
            Err(refusal) => return Err(refusal),
        };
        if held == key && info.version >= mark {
            continue;
        }
        info.key = key;
        return Ok(Answer::Object { info, range: sent, body });
    }
    Err(fail(
        ErrorKind::VersionConflict,
        format!("'{key}' changed under {ASOF_ATTEMPTS} reads as of a snapshot; read again"),
    ))
}

/// Reads of the head as of a snapshot that may each find it changed since it was chosen (one
/// suffices: the second choice is the clone the change kept).
const ASOF_ATTEMPTS: usize = 4;

/// Reads `key` (a range of it): what it is, the range sent, the bytes.
async fn read_object(
    target: &Target,
    key: String,
    range: Option<ByteRange>,
) -> Result<(ObjectInfo, Option<(u64, u64)>, Bytes), Refusal> {
    let store = target.store.clone();
    let pool = target.pool;
    let range = match range {
        None => None,
        Some(range) => {
            let Some(size) = store.info(pool, &key).map(|info| info.size_bytes) else {
                return Err(fail(ErrorKind::NotFound, "no such object"));
            };
            Some(range.resolve(size).ok_or_else(|| {
                fail(
                    ErrorKind::BadRequest,
                    format!("range '{}' is outside the object's {size} bytes", range.encode()),
                )
            })?)
        }
    };
    // (A whole write of another size between the size check and the read makes the range a
    // bad request; the reader asks again.)
    let (info, data) = match range {
        // A small range of a block object is a read or two from the page cache, most often:
        // done here rather than handed to a blocking thread and back (two thread switches
        // that cost more than the read).
        Some((start, end)) if end - start < SMALL_IO_BYTES && store.is_block_object(pool, &key) => {
            store
                .read_range(pool, &key, start, end)
                .map(|(info, data)| (info, Bytes::from(data)))?
        }
        _ => tokio::task::spawn_blocking(move || match range {
            Some((start, end)) => store
                .read_range(pool, &key, start, end)
                .map(|(info, data)| (info, Bytes::from(data))),
            None => store.get_bytes(pool, &key),
        })
        .await
        .map_err(|e| fail(ErrorKind::Io, format!("read task failed: {e}")))??,
    };
    Ok((info, range, data))
}

/// An open, read-only descriptor of a block object's file (`GET` with `x-optio-open`), for a
/// local reader: the object's headers, no body, and the descriptor, which the local socket
/// sends with the answer. Refused on any other connection (`local` false).
pub(super) async fn open_object(
    target: &Target,
    key: String,
    local: bool,
) -> Result<(Answer<Bytes>, std::fs::File), Refusal> {
    if !local {
        return Err(fail(
            ErrorKind::BadRequest,
            format!("{} is answered on the server's local socket only", wire::OPEN),
        ));
    }
    let store = target.store.clone();
    let pool = target.pool;
    let (file, info) = tokio::task::spawn_blocking(move || store.open_block_file(pool, &key))
        .await
        .map_err(|e| fail(ErrorKind::Io, format!("open task failed: {e}")))??;
    Ok((Answer::Opened { info }, file))
}

/// The version a write stores: the one it names (not too far ahead of this server's clock),
/// or this server's clock.
fn written_version(version: Option<ObjectVersion>) -> Result<ObjectVersion, Refusal> {
    let version = version.unwrap_or_else(now_version);
    check_not_ahead(version)?;
    Ok(version)
}

/// A whole-object write ([`optio_proto::request::Op::Put`]).
pub(super) struct Put {
    pub(super) key: String,
    pub(super) version: Option<ObjectVersion>,
    pub(super) checksum: Option<u32>,
    pub(super) pg_seed: Option<u32>,
}

pub(super) async fn put_object(
    state: &AppState,
    target: &Target,
    put: Put,
    body: &mut Incoming,
) -> Handled {
    let limit = state.max_object_bytes;
    let Put { key, version, checksum, pg_seed } = put;
    // (A refusal's body is thrown away by the caller.)
    let version = body.check_length(limit).and_then(|()| written_version(version))?;
    let received = body.receive(state.auth.enabled(), limit).await?;
    let store = target.store.clone();
    let (pool, epoch, snap) = (target.pool, target.epoch, target.snap);
    if snap.is_none() && is_small_put(&key, received.len()) {
        // Small and no snapshot to keep: the device's writer stores it in a batch with the
        // others queued meanwhile (one sync; `crate::store`'s `put`). The hash of a small
        // body is checked here.
        if !received.hash_matches() {
            return Err(body_hash_refusal(state, body.had_hash()));
        }
        let put =
            SmallPut { pool, key, parts: received.into_parts(), version, checksum, pg_seed, epoch };
        let outcome = store.put_small(put).await?;
        return Ok(Answer::Written { version, created: outcome == PutOutcome::Stored });
    }
    let outcome = tokio::task::spawn_blocking(move || {
        if !received.hash_matches() {
            return Ok(None);
        }
        let data = &received.slices();
        store
            .put_in(&PutRequest { pool, key: &key, data, version, checksum, pg_seed, epoch }, snap)
            .map(Some)
    })
    .await
    .map_err(|e| fail(ErrorKind::Io, format!("write task failed: {e}")))??;
    let Some(outcome) = outcome else {
        return Err(body_hash_refusal(state, body.had_hash()));
    };
    Ok(Answer::Written { version, created: outcome == PutOutcome::Stored })
}

/// A write in place (`PUT` with `x-optio-offset`): creates a block object or changes one,
/// based on the version the writer names ([`crate::store::WriteAt`]).
pub(super) async fn write_in_place(
    state: &AppState,
    target: &Target,
    write: WriteAt<'static>,
    body: &mut Incoming,
) -> Handled {
    let limit = optio_proto::blocks::BLOCK_OBJECT_BYTES_MAX;
    let version = body.check_length(limit).and_then(|()| written_version(write.version))?;
    let WriteAt { key, offset, zeroes, basis, checksum, pg_seed, sync, .. } = write;
    let (base, size) = match basis {
        Basis::Change { base } => (Some(base), 0),
        Basis::Create { size_bytes } => (None, size_bytes),
    };
    let received = body.receive(state.auth.enabled(), limit).await?;
    let store = target.store.clone();
    let (pool, epoch, snap) = (target.pool, target.epoch, target.snap);
    let preserves = store.would_preserve(pool, &key, snap);
    let write = move || {
        if !received.hash_matches() {
            return Ok(None);
        }
        store
            .write_at_in(
                &crate::store::WriteAt {
                    pool,
                    key: &key,
                    offset,
                    data: &received.joined(),
                    zeroes,
                    size,
                    base,
                    version,
                    checksum,
                    pg_seed,
                    epoch,
                    sync,
                },
                snap,
            )
            .map(Some)
    };
    // A small change to an existing block object, not synced, is page-cache work: done here
    // (see SMALL_IO_BYTES); creations, syncs and large writes go to the blocking pool.
    let small = base.is_some()
        && !sync
        && (zeroes.max(body.declared_bytes()) < SMALL_IO_BYTES)
        && !preserves;
    let outcome = if small {
        write()?
    } else {
        tokio::task::spawn_blocking(write)
            .await
            .map_err(|e| fail(ErrorKind::Io, format!("write task failed: {e}")))??
    };
    let Some(outcome) = outcome else {
        return Err(body_hash_refusal(state, body.had_hash()));
    };
    Ok(Answer::Written { version, created: outcome == PutOutcome::Stored })
}

/// `POST` on a device's pool: every write it acknowledged is made durable (NBD's FLUSH).
pub(super) async fn sync_device(target: &Target) -> Handled {
    let store = target.store.clone();
    tokio::task::spawn_blocking(move || store.sync_all())
        .await
        .map_err(|e| fail(ErrorKind::Io, format!("sync task failed: {e}")))??;
    Ok(Answer::Done)
}

/// A trim ([`optio_proto::request::Op::Trim`]): removes the snapshot clones the body names
/// outright, as a delete of each would, with one sync per directory.
pub(super) async fn trim_clones(state: &AppState, target: &Target, body: &mut Incoming) -> Handled {
    use optio_proto::snap::{TRIM_BODY_BYTES_MAX, decode_trim_body};
    let limit = TRIM_BODY_BYTES_MAX as u64;
    if body.declared_bytes() > limit {
        return Err(fail(
            ErrorKind::TooLarge,
            format!(
                "a trim's body is {} bytes; at most {limit}: send its clones in several trims",
                body.declared_bytes()
            ),
        ));
    }
    let received = body.receive(state.auth.enabled(), limit).await?;
    let store = target.store.clone();
    let pool = target.pool;
    let outcome = tokio::task::spawn_blocking(move || {
        if !received.hash_matches() {
            return Ok(None);
        }
        let bytes = received.joined();
        let clones = decode_trim_body(&bytes)
            .map_err(|e| crate::error::StoreError::BadRange(e.to_string()))?;
        store.trim_clones(pool, &clones).map(Some)
    })
    .await
    .map_err(|e| fail(ErrorKind::Io, format!("trim task failed: {e}")))??;
    if outcome.is_none() {
        return Err(body_hash_refusal(state, body.had_hash()));
    }
    Ok(Answer::Done)
}

/// The refusal of a body that does not match its signed hash (or of a signed PUT without
/// one), counted and logged.
fn body_hash_refusal(state: &AppState, had_hash: bool) -> Refusal {
    use optio_proto::auth::{AuthError, CONTENT_HASH_HEADER};
    let error = if had_hash {
        AuthError::BadSignature("the request (its body does not match the signed hash)".into())
    } else {
        AuthError::Malformed(format!(
            "a signed PUT must carry {CONTENT_HASH_HEADER}, the BLAKE3 hash of its body"
        ))
    };
    state.auth.count_refusal(&error);
    fail(ErrorKind::Unauthorized, error.to_string())
}

/// How far ahead of this server's clock a written version may be. Versions are writers' clock
/// readings (microseconds); one from the far future would win over every later write until
/// the clocks catch up (or forever, at `u64::MAX`).
pub(super) const VERSION_AHEAD_MAX_MICROS: u64 = 10_000_000;

/// Refuses a version further ahead of this server's clock than [`VERSION_AHEAD_MAX_MICROS`].
fn check_not_ahead(version: ObjectVersion) -> Result<(), Refusal> {
    let now = now_version();
    if version.0 <= now.0.saturating_add(VERSION_AHEAD_MAX_MICROS) {
        return Ok(());
    }
    Err(fail(
        ErrorKind::BadRequest,
        format!(
            "version {} is {:.1} s ahead of this server's clock (at most {} s is taken): check the writer's clock (NTP)",
            version.0,
            (version.0 - now.0) as f64 / 1e6,
            VERSION_AHEAD_MAX_MICROS / 1_000_000
        ),
    ))
}

/// A version from this server's clock, for writes that carry none.
pub(super) fn now_version() -> ObjectVersion {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    ObjectVersion(micros)
}

/// Commits a version of an erasure-coded chunk ([`optio_proto::wire::COMMIT`]): drops the
/// earlier versions kept while it was written.
pub(super) async fn commit_chunk(target: &Target, key: String, version: ObjectVersion) -> Handled {
    if !target.store.is_erasure(target.pool) {
        return Err(fail(
            ErrorKind::BadRequest,
            format!("pool {} is not erasure-coded: there is nothing to commit", target.pool.0),
        ));
    }
    let store = target.store.clone();
    let pool = target.pool;
    tokio::task::spawn_blocking(move || store.commit(pool, &key, version))
        .await
        .map_err(|e| fail(ErrorKind::Io, format!("commit task failed: {e}")))??;
    Ok(Answer::Done)
}

/// How a DELETE removes an object ([`optio_proto::request::Op::Delete`] and `Undo`).
pub(super) enum Removal {
    /// A tombstone at `version`, or with `purge` the copy removed if not newer.
    Delete { version: Option<ObjectVersion>, purge: bool, pg_seed: Option<u32> },
    /// One's own recent write of exactly `version` taken back.
    Undo { version: ObjectVersion },
}

pub(super) async fn delete_object(target: &Target, key: String, removal: Removal) -> Handled {
    let version = match &removal {
        Removal::Delete { version, .. } => *version,
        Removal::Undo { version } => Some(*version),
    };
    if let Some(version) = version {
        check_not_ahead(version)?;
    }
    if let Removal::Undo { version } = removal {
        let age_ms = now_version().0.saturating_sub(version.0) / 1000;
        if age_ms > wire::UNDO_AGE_MAX_MS {
            return Err(fail(
                ErrorKind::Forbidden,
                format!(
                    "version {} was written {age_ms} ms ago; an undo takes back only writes of the last {} ms (removing older copies is a purge, for admins)",
                    version.0,
                    wire::UNDO_AGE_MAX_MS
                ),
            ));
        }
    }
    let store = target.store.clone();
    let (pool, epoch, snap) = (target.pool, target.epoch, target.snap);
    if let Removal::Delete { version, purge: false, pg_seed } = removal
        && snap.is_none()
        && store.parse_clone(pool, &key).is_none()
    {
        // A tombstone, no snapshot to keep: through the device's writer, in a batch with
        // the small writes queued meanwhile (`crate::store`'s `put`).
        let delete = SmallDelete { pool, key, version, epoch, pg_seed };
        if store.delete_small(delete).await? == crate::store::DeleteOutcome::Absent {
            return Err(fail(ErrorKind::NotFound, "no such object"));
        }
        return Ok(Answer::Done);
    }
    let removed = tokio::task::spawn_blocking(move || match removal {
        Removal::Undo { version } => store.undo(pool, &key, version),
        Removal::Delete { version, purge: true, .. } => store.purge(pool, &key, version),
        Removal::Delete { version, purge: false, pg_seed } => store
            .delete_in(pool, &key, version, epoch, pg_seed, snap)
            .map(|outcome| outcome == crate::store::DeleteOutcome::Deleted),
    })
    .await
    .map_err(|e| fail(ErrorKind::Io, format!("delete task failed: {e}")))??;
    if !removed {
        return Err(fail(ErrorKind::NotFound, "no such object"));
    }
    Ok(Answer::Done)
}

/// A page of a device's listing; without `gateway_state`, the gateway's own keys are left
/// out (see [`optio_proto::GATEWAY_PREFIX`]).
pub(super) fn list(target: &Target, query: &ListQuery, gateway_state: bool) -> Handled {
    let listing = target.store.list(
        target.pool,
        query.prefix.as_deref().unwrap_or(""),
        query.pg,
        query.after.as_deref(),
        query.limit.unwrap_or(LIST_LIMIT_MAX),
        query.tombstones.unwrap_or(false),
        gateway_state,
    );
    Ok(Answer::Listed(listing))
}
