//! Reads: from the located candidate's replicas (repairing the damaged ones), or carefully,
//! comparing versions across every device that may hold a copy, while data moves.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use optio_placement::{DeviceId, PoolId};
use optio_proto::{ErrorKind, ObjectInfo, ObjectVersion, validate_key};

use crate::candidates::Candidate;
use crate::error::ClientError;
use crate::transport::{Chunks, Endpoint, Failure, Op};

use super::transition::Held;
use super::{Client, View};

/// Waits of one read for replicas that all answered `recovering` (catching up on writes they
/// may have missed: after a restart, or a map that marked them down); then the read fails with
/// what they answered. With [`RECOVERING_BACKOFF_MIN`] doubling up to
/// [`RECOVERING_BACKOFF_MAX`], about 13 s in all: a catch-up lists its peers' metadata once.
pub const RECOVERING_RETRIES_MAX: usize = 12;
/// The first wait for recovering replicas; it doubles after each.
pub const RECOVERING_BACKOFF_MIN: Duration = Duration::from_millis(25);
/// The longest wait for recovering replicas.
pub const RECOVERING_BACKOFF_MAX: Duration = Duration::from_secs(2);

pub(super) enum ReadError {
    Retry,
    Missing,
    /// No replica could serve the read, and every one that could hold the object answered
    /// `recovering`: they will once caught up (the error if they do not in time).
    Recovering(ClientError),
    Failed(ClientError),
}

/// Whether a device answered `recovering` (catching up: it serves once caught up).
fn is_recovering(failure: &Failure) -> bool {
    failure.kind() == Some(ErrorKind::Recovering)
}

/// What [`Client::newest_copy`] found.
pub(super) enum Newest {
    /// The newest version is a live copy on `holders` (some other devices may have failed).
    Live { holders: Vec<Endpoint>, failures: Vec<String> },
    /// Deleted, or on none of the devices.
    Deleted,
}

impl Client {
    /// Reads an object.
    pub async fn get(&self, pool: &str, key: &str) -> Result<Bytes, ClientError> {
        self.get_range(pool, key, None).await.map(|(_, data)| data)
    }

    /// Reads an object, or the inclusive byte range `range` of it; verifies the checksum and
    /// repairs replicas found corrupt or missing from a good one.
    pub async fn get_range(
        &self,
        pool_name: &str,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(ObjectInfo, Bytes), ClientError> {
        let (info, chunks) = self.get_chunks(pool_name, key, range).await?;
        Ok((info, chunks.to_bytes()))
    }

    /// [`get_range`](Self::get_range), the data in the chunks it arrived in (not gathered into
    /// one buffer): for a caller that passes it on.
    pub async fn get_chunks(
        &self,
        pool_name: &str,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(ObjectInfo, Chunks), ClientError> {
        self.get_chunks_as_of(pool_name, key, range, None).await
    }

    /// [`get_range`](Self::get_range) of `key` as the snapshot with mark `as_of` sees it
    /// ([`optio_proto::snap`]): the head or a clone, from the head's replicas;
    /// [`ClientError::NotFound`] when it did not exist then. Nothing is repaired from it.
    pub async fn get_range_as_of(
        &self,
        pool_name: &str,
        key: &str,
        range: Option<(u64, u64)>,
        as_of: ObjectVersion,
    ) -> Result<(ObjectInfo, Bytes), ClientError> {
        let (info, chunks) = self.get_chunks_as_of(pool_name, key, range, Some(as_of)).await?;
        Ok((info, chunks.to_bytes()))
    }

    /// A whole read of `key` that its server holds until the object is stored above version
    /// `newer_than` (a write landed) or about a second has passed
    /// ([`optio_proto::wire::WAIT_NEWER`]), then answers what it has — which may still be
    /// `newer_than`: callers compare. A long poll, for a volume's lock holder watching its
    /// header. While data moves, with the object's first device down, or with an answer that
    /// cannot be used, it is an ordinary read at once; a caller that loops paces itself.
    pub async fn get_when_newer(
        &self,
        pool_name: &str,
        key: &str,
        newer_than: ObjectVersion,
    ) -> Result<(ObjectInfo, Bytes), ClientError> {
        validate_key(key)?;
        let mut attempts = 0;
        let at = self.retry_located(pool_name, key, &mut attempts).await?;
        let (view, pool) = (&*at.view, at.pool);
        if !self.in_transition(view, pool)
            && let Some(device) = at.candidate().devices.first()
            && let Ok(endpoint) = view.endpoint(*device)
        {
            let mut call = self.object_call(view, &endpoint, pool, Op::Get { key, range: None });
            call.wait_newer = Some(newer_than);
            if let Ok(answer) = self.call(call).await
                && let Some(info) = answer.info.clone()
                && answer.body.checksum() == info.checksum
            {
                return Ok((info, answer.body.to_bytes()));
            }
        }
        self.get_range(pool_name, key, None).await
    }

    async fn get_chunks_as_of(
        &self,
        pool_name: &str,
        key: &str,
        range: Option<(u64, u64)>,
        as_of: Option<ObjectVersion>,
    ) -> Result<(ObjectInfo, Chunks), ClientError> {
        if as_of.is_none() && self.erasure_pool(pool_name)?.is_some() {
            return self.get_erasure(pool_name, key, range).await;
        }
        validate_key(key)?;
        let mut relocated = false;
        let mut attempts = 0;
        let mut recovering_waits = 0;
        let mut backoff = RECOVERING_BACKOFF_MIN;
        loop {
            let at = match self.retry_located(pool_name, key, &mut attempts).await {
                // The head was deleted since the snapshot (its choice record with it): its
                // clones are still where it was.
                Err(ClientError::NotFound { .. }) if as_of.is_some() => {
                    return self.read_unlocated_as_of(pool_name, key, range, as_of).await;
                }
                other => other?,
            };
            let (view, pool) = (&*at.view, at.pool);
            let read = if self.in_transition(view, pool) {
                self.read_careful(view, pool, key, at.candidate(), range, as_of).await
            } else {
                self.read_replicas(view, pool, key, at.candidate(), range, as_of).await
            };
            match read {
                Ok(found) => return Ok(found),
                Err(ReadError::Retry) => continue,
                Err(ReadError::Missing) if !relocated && at.candidates.len() > 1 => {
                    // A stale cache entry (or fingerprint collision): ask the home again.
                    self.inner.cache.remove(pool.0, key);
                    relocated = true;
                }
                Err(ReadError::Missing) => {
                    return Err(ClientError::NotFound {
                        pool: pool_name.to_string(),
                        key: key.to_string(),
                    });
                }
                Err(ReadError::Recovering(error)) => {
                    if recovering_waits == RECOVERING_RETRIES_MAX {
                        return Err(error);
                    }
                    recovering_waits += 1;
                    tracing::debug!(
                        pool = pool_name,
                        key,
                        epoch = view.epoch(),
                        wait_ms = backoff.as_millis() as u64,
                        wait = recovering_waits,
                        "every replica is catching up: reading again after a wait"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(RECOVERING_BACKOFF_MAX);
                    // A wait for catching-up replicas has its own bound: it is not one of the
                    // attempts `retry_located` counts (epoch changes, lost races).
                    attempts -= 1;
                }
                Err(ReadError::Failed(error)) => return Err(error),
            }
        }
    }

    /// A read as of a snapshot of an object no candidate holds a head of (deleted since the
    /// snapshot, a shrink: the choice record went with it). The clones a snapshot still sees
    /// stay on the devices of the candidate the head was on, so each candidate is asked in
    /// turn; nothing found anywhere is [`ClientError::NotFound`].
    async fn read_unlocated_as_of(
        &self,
        pool_name: &str,
        key: &str,
        range: Option<(u64, u64)>,
        as_of: Option<ObjectVersion>,
    ) -> Result<(ObjectInfo, Chunks), ClientError> {
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        let mut unsure = None;
        for candidate in &candidates {
            match self.read_replicas(&view, pool, key, candidate, range, as_of).await {
                Ok(found) => return Ok(found),
                Err(ReadError::Missing) => {}
                Err(ReadError::Failed(error) | ReadError::Recovering(error)) => {
                    unsure = Some(error);
                }
                Err(ReadError::Retry) => {
                    unsure = Some(ClientError::EpochRetries { attempts: 1 });
                }
            }
        }
        Err(unsure
            .unwrap_or(ClientError::NotFound { pool: pool_name.to_string(), key: key.to_string() }))
    }

    pub(super) async fn read_replicas(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidate: &Candidate,
        range: Option<(u64, u64)>,
        as_of: Option<ObjectVersion>,
    ) -> Result<(ObjectInfo, Chunks), ReadError> {
        let mut damaged: Vec<Endpoint> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        let mut epoch_failures: Vec<Failure> = Vec::new();
        let mut missing = 0usize;
        let mut recovering = 0usize;
        for device in &candidate.devices {
            let endpoint = view.endpoint(*device).map_err(ReadError::Failed)?;
            // Ranges are read whole when a repair may be needed, so the checksum is checked.
            // (A read as of a snapshot repairs nothing: what it reads is not the head.)
            let ranged = range.filter(|_| damaged.is_empty() || as_of.is_some());
            let mut call = self.object_call(view, &endpoint, pool, Op::Get { key, range: ranged });
            call.as_of = as_of;
            match self.call(call).await {
                Ok(answer) => {
                    let Some(info) = answer.info.clone() else {
                        failures.push(format!(
                            "device {}: answer without object headers",
                            endpoint.device
                        ));
                        continue;
                    };
                    if ranged.is_none() && answer.body.checksum() != info.checksum {
                        self.inner.counters.corrupt_replicas.fetch_add(1, Ordering::Relaxed);
                        failures
                            .push(format!("device {}: data damaged in transit", endpoint.device));
                        continue;
                    }
                    if !damaged.is_empty() && as_of.is_none() {
                        let whole = answer.body.to_bytes();
                        self.repair(view, pool, key, &damaged, (&info, &whole), candidate).await;
                    }
                    let body = match (range, ranged) {
                        // Read whole for a repair: cut the range asked for.
                        (Some(range), None) => {
                            cut_range(range, &info, &answer.body, endpoint.device)?
                        }
                        _ => answer.body,
                    };
                    return Ok((info, body));
                }
                Err(failure) => {
                    match failure.kind() {
                        Some(ErrorKind::Corrupt) => {
                            self.inner.counters.corrupt_replicas.fetch_add(1, Ordering::Relaxed);
                            damaged.push(endpoint.clone());
                        }
                        Some(ErrorKind::NotFound) => {
                            missing += 1;
                            damaged.push(endpoint.clone());
                        }
                        Some(ErrorKind::StaleEpoch | ErrorKind::UnknownEpoch) => {
                            epoch_failures.push(failure.clone())
                        }
                        Some(ErrorKind::Recovering) => recovering += 1,
                        Some(ErrorKind::BadRequest) => {
                            return Err(ReadError::Failed(ClientError::Refused {
                                device: endpoint.device,
                                kind: ErrorKind::BadRequest,
                                reason: failure.to_string(),
                            }));
                        }
                        _ => {}
                    }
                    failures.push(format!(
                        "device {} at {}: {failure}",
                        endpoint.device, endpoint.addr
                    ));
                }
            }
        }
        self.retry_after_epochs(&epoch_failures).await?;
        if missing == candidate.devices.len() {
            return Err(ReadError::Missing);
        }
        let unreadable =
            ClientError::Unreadable { key: key.to_string(), failures: failures.join("; ") };
        // Replicas without the object, and the others catching up: the copy may be on those.
        if recovering > 0 && recovering + missing == candidate.devices.len() {
            return Err(ReadError::Recovering(unreadable));
        }
        Err(ReadError::Failed(unreadable))
    }

    /// After replicas refused the read's epoch: [`ReadError::Retry`] once the map is
    /// refreshed (a stale epoch) or the servers had a moment to catch up (an unknown one).
    async fn retry_after_epochs(&self, epoch_failures: &[Failure]) -> Result<(), ReadError> {
        let refs: Vec<&Failure> = epoch_failures.iter().collect();
        if self.epoch_retry(&refs).await.map_err(ReadError::Failed)? {
            return Err(ReadError::Retry);
        }
        Ok(())
    }

    /// The newest version of `key` among the devices that may hold a copy of `candidate`, and
    /// the devices holding it (a read while data moves).
    pub(super) async fn newest_copy(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidate: &Candidate,
    ) -> Result<Newest, ReadError> {
        let devices = self.transition_devices(view, pool, candidate);
        let (endpoints, heads) =
            self.probe_devices(view, pool, key, &devices).await.map_err(ReadError::Failed)?;
        let mut newest: Option<Held> = None;
        let mut failures = Vec::new();
        let mut epoch_failures = Vec::new();
        let mut recovering = 0usize;
        for (endpoint, head) in endpoints.iter().zip(&heads) {
            match head {
                Ok(answer) => newest = newest.max(Held::of(answer)),
                Err(failure) => match failure.kind() {
                    Some(ErrorKind::StaleEpoch | ErrorKind::UnknownEpoch) => {
                        epoch_failures.push(failure.clone())
                    }
                    _ => {
                        recovering += usize::from(is_recovering(failure));
                        failures.push(format!(
                            "device {} at {}: {failure}",
                            endpoint.device, endpoint.addr
                        ))
                    }
                },
            }
        }
        self.retry_after_epochs(&epoch_failures).await?;
        if newest.is_none() && recovering > 0 && recovering == failures.len() {
            // Nothing found on the devices that answered; the others are catching up.
            return Err(ReadError::Recovering(ClientError::Unreadable {
                key: key.to_string(),
                failures: failures.join("; "),
            }));
        }
        match newest {
            Some(newest) if !newest.deleted => {
                let holders = endpoints
                    .iter()
                    .zip(&heads)
                    .filter(|(_, head)| head.as_ref().ok().and_then(Held::of) == Some(newest))
                    .map(|(endpoint, _)| endpoint.clone())
                    .collect();
                Ok(Newest::Live { holders, failures })
            }
            Some(_) => Ok(Newest::Deleted),
            None if failures.is_empty() => Ok(Newest::Deleted),
            None => Err(ReadError::Failed(ClientError::Unreadable {
                key: key.to_string(),
                failures: failures.join("; "),
            })),
        }
    }

    /// Reads the newest copy of `key` among every device that may hold one (see the module).
    pub(super) async fn read_careful(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidate: &Candidate,
        range: Option<(u64, u64)>,
        as_of: Option<ObjectVersion>,
    ) -> Result<(ObjectInfo, Chunks), ReadError> {
        let (holders, mut failures) = match self.newest_copy(view, pool, key, candidate).await? {
            Newest::Live { holders, failures } => (holders, failures),
            Newest::Deleted => return Err(ReadError::Missing),
        };
        let mut epoch_failures = Vec::new();
        let mut recovering = 0usize;
        for endpoint in &holders {
            let mut call = self.object_call(view, endpoint, pool, Op::Get { key, range });
            call.as_of = as_of;
            match self.call(call).await {
                Ok(answer) => {
                    let Some(info) = answer.info.clone() else { continue };
                    if range.is_none() && answer.body.checksum() != info.checksum {
                        self.inner.counters.corrupt_replicas.fetch_add(1, Ordering::Relaxed);
                        failures
                            .push(format!("device {}: data damaged in transit", endpoint.device));
                        continue;
                    }
                    return Ok((info, answer.body));
                }
                Err(failure) if failure.kind() == Some(ErrorKind::BadRequest) => {
                    return Err(ReadError::Failed(ClientError::Refused {
                        device: endpoint.device,
                        kind: ErrorKind::BadRequest,
                        reason: failure.to_string(),
                    }));
                }
                Err(failure) => {
                    match failure.kind() {
                        // The map changed between the probes and the read (a membership
                        // version pruned, a device marked down): read again on the new one.
                        Some(ErrorKind::StaleEpoch | ErrorKind::UnknownEpoch) => {
                            epoch_failures.push(failure.clone())
                        }
                        Some(ErrorKind::Recovering) => recovering += 1,
                        _ => {}
                    }
                    failures
                        .push(format!("device {} at {}: {failure}", endpoint.device, endpoint.addr))
                }
            }
        }
        self.retry_after_epochs(&epoch_failures).await?;
        let unreadable =
            ClientError::Unreadable { key: key.to_string(), failures: failures.join("; ") };
        if recovering > 0 && recovering == holders.len() {
            return Err(ReadError::Recovering(unreadable));
        }
        Err(ReadError::Failed(unreadable))
    }

    /// Which candidate holds `key` while data moves: the choice record at the home under the
    /// current map, else under the earlier ones data may still be on, else any candidate with
    /// a live copy on a device that may hold one. `None`: nowhere.
    pub(super) async fn locate_careful(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
    ) -> Result<Option<u8>, ClientError> {
        let mut homes: Vec<DeviceId> = candidates[0].primary().into_iter().collect();
        let current = homes.len();
        for previous in view.unsettled_previous() {
            let Some(old_pool) = previous.placement.pool(pool) else { continue };
            let (_, old) = crate::candidates::candidates(&previous.placement, &old_pool, key);
            if let Some(home) = old.first().and_then(|c| c.primary())
                && !homes.contains(&home)
            {
                homes.push(home);
            }
        }
        for (n, home) in homes.into_iter().enumerate() {
            // An earlier map's home the current map no longer has (removed) is skipped.
            let endpoint = match view.endpoint(home) {
                Ok(endpoint) => endpoint,
                Err(_) if n >= current => continue,
                Err(e) => return Err(e),
            };
            let probe = Op::Probe { key, want_choice: true };
            if let Ok(answer) = self.call(self.object_call(view, &endpoint, pool, probe)).await
                && let Some(record) = answer.record
                && usize::from(record.candidate) < candidates.len()
            {
                self.inner.cache.insert(pool.0, key, record.candidate);
                return Ok(Some(record.candidate));
            }
        }
        let mut unreadable = false;
        for candidate in candidates {
            match self.newest_copy(view, pool, key, candidate).await {
                Ok(Newest::Live { .. }) => {
                    // Found by asking every device, the copy may belong to another
                    // candidate: read it, but do not remember the choice.
                    if !self.anywhere(view) {
                        self.inner.cache.insert(pool.0, key, candidate.index);
                    }
                    return Ok(Some(candidate.index));
                }
                Ok(Newest::Deleted) => {}
                Err(ReadError::Retry) => return Err(ClientError::EpochRetries { attempts: 0 }),
                Err(ReadError::Missing | ReadError::Recovering(_) | ReadError::Failed(_)) => {
                    unreadable = true
                }
            }
        }
        // Candidate 0 may still hold it on a device that did not answer.
        Ok(unreadable.then_some(0))
    }
}

/// The inclusive byte `range` of an object read whole from `device` (a range past its end is
/// cut at the end; one starting past it is refused).
fn cut_range(
    (start, end): (u64, u64),
    info: &ObjectInfo,
    body: &Chunks,
    device: u32,
) -> Result<Chunks, ReadError> {
    let end = end.min(info.size_bytes.saturating_sub(1));
    if start > end || start >= info.size_bytes {
        return Err(ReadError::Failed(ClientError::Refused {
            device,
            kind: ErrorKind::BadRequest,
            reason: format!(
                "range {start}-{end} is outside the object's {} bytes",
                info.size_bytes
            ),
        }));
    }
    Ok(body.slice(start as usize, end as usize + 1))
}
