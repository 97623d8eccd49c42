//! Writes in place and ranged reads: what block volumes are made of.
//!
//! An object written in place is a *block object* of a fixed size whose never-written bytes
//! read as zeros. Its first write creates it the way any first write does — CHOICE picks one
//! of its k candidates by the pool's policy and the home records the choice — carrying only
//! the bytes written. Later writes go to the chosen candidate's replicas as writes in place,
//! each naming the version it is based on (the one its writer left), so that the replicas
//! apply one object's writes in the same order; the caller keeps what each write returns
//! ([`Written`]) and passes it to the next, so a known object needs no probe.
//!
//! When the fast path cannot be sure — the map is moving data (a transition), a replica
//! holds another version than the writer's (it missed a write while down), or the object
//! turns out to exist when a create was meant — the object is read whole, changed, and
//! written whole, through the same path as any object, so read repair, rebalancing,
//! migration, tombstones and elastic re-integration see an ordinary object.

use bytes::Bytes;
use futures_util::future::join_all;
use optio_proto::{ErrorKind, ObjectVersion, checksum, validate_key};

use crate::candidates::Candidate;
use crate::error::ClientError;
use crate::quorum::{Decision, Outcome, Round, RoundKind, VERSION_BUMPS_MAX};
use crate::transport::{Answer, Failure, Op};

use super::locate::placement_seed;
use super::write::{Create, resend_unanswered};
use super::{Client, RETRIES_MAX, View};

/// Where, and at which version, a writer left an object it wrote in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The candidate holding it.
    pub candidate: u8,
    /// Its devices, primary first.
    pub devices: Vec<u32>,
    /// The version it is at.
    pub version: ObjectVersion,
}

impl Written {
    /// Left on `candidate` at `version`.
    fn on(candidate: &Candidate, version: ObjectVersion) -> Written {
        Written {
            candidate: candidate.index,
            devices: candidate.devices.iter().map(|d| d.0).collect(),
            version,
        }
    }

    /// What a whole write reported.
    fn from_report(report: super::write::PutReport) -> Written {
        Written { candidate: report.candidate, devices: report.devices, version: report.version }
    }
}

/// What a write in place writes.
#[derive(Clone, Debug)]
pub enum Patch {
    /// These bytes.
    Data(Bytes),
    /// This many zero bytes (whole blocks are freed).
    Zeroes(u64),
}

impl Patch {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Patch::Data(data) => data.len() as u64,
            Patch::Zeroes(n) => *n,
        }
    }

    /// As sent: the body and the zero bytes to write instead of one.
    fn body_and_zeroes(&self) -> (Bytes, u64) {
        match self {
            Patch::Data(data) => (data.clone(), 0),
            Patch::Zeroes(n) => (Bytes::new(), *n),
        }
    }
}

/// Why the fast path gave up.
enum Slow {
    /// Write the object whole.
    Rewrite,
    /// Some replicas hold an older version than the base, or none — they missed writes, or
    /// the map moved the object and rebalancing has not brought it there yet — and none holds
    /// a newer one: a whole rewrite would do, or, for a compare-and-swap, bringing them up.
    Behind {
        /// Those replicas (indices into the candidate's devices).
        stale: Vec<usize>,
        /// The version written, and by how many replicas (`None`: by none).
        applied: Option<(ObjectVersion, usize)>,
    },
    /// The map changed: locate again.
    Relocate,
    /// A failure to report.
    Failed(ClientError),
}

impl Client {
    /// Writes `patch` at `offset` of the block object `key` of `size` bytes (never written:
    /// all zeros), in place. `known` is what the previous write of this writer returned
    /// (`None`: the object is looked up). With `sync`, the replicas make it durable before
    /// answering (NBD's FUA); otherwise it is acknowledged from their page cache and made
    /// durable by [`sync_devices`](Self::sync_devices).
    #[allow(clippy::too_many_arguments)]
    pub async fn write_in_place(
        &self,
        pool_name: &str,
        key: &str,
        size: u64,
        offset: u64,
        patch: &Patch,
        known: Option<&Written>,
        sync: bool,
    ) -> Result<Written, ClientError> {
        validate_key(key)?;
        let end = offset.checked_add(patch.len());
        if patch.len() == 0 || end.is_none_or(|end| end > size) {
            return Err(ClientError::Config(format!(
                "{} bytes at offset {offset} are not within the {size} bytes of '{key}'",
                patch.len()
            )));
        }
        let mut known = known.cloned();
        // The dirty-table entry of an elastic pool below full power, recorded once for the
        // write whichever way it goes.
        let mut noted = None;
        for _ in 0..RETRIES_MAX {
            let view = self.view();
            let pool = view.pool(pool_name)?;
            if self.in_transition(&view, pool) {
                break;
            }
            let current = match known.take() {
                Some(written) => Some(written),
                None => match self.stat(pool_name, key).await {
                    Ok(location) => Some(Written::on(&location.candidate, location.info.version)),
                    Err(ClientError::NotFound { .. }) => None,
                    Err(error) => return Err(error),
                },
            };
            let Some(current) = current else {
                return match self.create_in_place(pool_name, key, size, offset, patch, noted).await
                {
                    Err(ClientError::Exists { .. }) => break,
                    other => other,
                };
            };
            let candidates = self.candidates_in(&view, pool, key);
            let Some(candidate) = candidates.get(usize::from(current.candidate)) else {
                continue;
            };
            self.note_dirty(&view, pool, key, &mut noted).await?;
            match self
                .patch_replicas(&view, pool, key, candidate, current.version, offset, patch, sync)
                .await
            {
                Ok(version) => {
                    self.inner.cache.insert(pool.0, key, candidate.index);
                    return Ok(Written::on(candidate, version));
                }
                Err(Slow::Relocate) => continue,
                Err(Slow::Rewrite | Slow::Behind { .. }) => break,
                Err(Slow::Failed(error)) => return Err(error),
            }
        }
        self.rewrite_whole(pool_name, key, size, offset, patch, noted).await
    }

    /// Replaces the bytes at `offset` of the block object `key` if it is still at version
    /// `base` on every replica that runs: a compare-and-swap (a volume's lock is taken with
    /// it). A newer version anywhere is [`ClientError::Changed`]; nothing is rewritten whole.
    /// Replicas that lack `base` while the object's newest version is `base` (they missed a
    /// write, or the map moved the object and rebalancing has not brought it yet) are first
    /// brought to it from a good copy, so that a map change does not make the swap fail until
    /// rebalancing is over.
    pub async fn compare_and_write(
        &self,
        pool_name: &str,
        key: &str,
        offset: u64,
        data: Bytes,
        base: ObjectVersion,
    ) -> Result<Written, ClientError> {
        validate_key(key)?;
        for _ in 0..RETRIES_MAX {
            let view = self.view();
            let pool = view.pool(pool_name)?;
            let location = self.stat(pool_name, key).await?;
            let candidate = &location.candidate;
            let patch = Patch::Data(data.clone());
            match self.patch_replicas(&view, pool, key, candidate, base, offset, &patch, true).await
            {
                Ok(version) => {
                    return Ok(Written::on(candidate, version));
                }
                Err(Slow::Relocate) => continue,
                Err(Slow::Rewrite) => return Err(ClientError::Changed { key: key.to_string() }),
                Err(Slow::Behind { stale, applied }) => {
                    let target = applied.map_or(base, |(version, _)| version);
                    let repaired = self
                        .bring_to(&view, pool, pool_name, key, candidate, target, &stale)
                        .await?;
                    if let Some((version, accepted)) = applied {
                        // The swap took on every replica that held the base; the others now
                        // hold what it wrote too.
                        let needed = self.min_size(&view, pool);
                        if accepted + repaired >= needed {
                            return Ok(Written::on(candidate, version));
                        }
                        return Err(ClientError::NotEnoughReplicas {
                            key: key.to_string(),
                            acked: accepted + repaired,
                            needed,
                            failures: "replicas behind the base could not be brought up".into(),
                        });
                    }
                }
                Err(Slow::Failed(error)) => return Err(error),
            }
        }
        Err(ClientError::EpochRetries { attempts: RETRIES_MAX })
    }

    /// Brings the replicas `stale` (indices into `candidate`'s devices) to version `target`
    /// of `key` from the newest copy the read path finds (following a transition to where the
    /// object was); returns how many took it. [`ClientError::Changed`] when that copy is not
    /// at `target` (another writer came).
    #[allow(clippy::too_many_arguments)]
    async fn bring_to(
        &self,
        view: &View,
        pool: optio_placement::PoolId,
        pool_name: &str,
        key: &str,
        candidate: &Candidate,
        target: ObjectVersion,
        stale: &[usize],
    ) -> Result<usize, ClientError> {
        let (info, data) = match self.get_range(pool_name, key, None).await {
            Ok(found) => found,
            Err(ClientError::NotFound { .. }) => {
                return Err(ClientError::Changed { key: key.to_string() });
            }
            Err(error) => return Err(error),
        };
        if info.version != target {
            return Err(ClientError::Changed { key: key.to_string() });
        }
        let endpoints = self.endpoints(view, candidate)?;
        let targets: Vec<_> = stale.iter().filter_map(|i| endpoints.get(*i).cloned()).collect();
        let mut repaired = 0;
        for (device, outcome) in
            self.repair(view, pool, key, &targets, (&info, &data), candidate).await
        {
            match outcome {
                Ok(()) => repaired += 1,
                Err(reason) => {
                    tracing::debug!(key, device, %reason, "could not bring a replica up");
                }
            }
        }
        Ok(repaired)
    }

    /// Reads `len` bytes at `offset` of `key`: `None` when the object was never written (it
    /// reads as zeros). Only the blocks holding the range are read and verified.
    pub async fn read_in_place(
        &self,
        pool_name: &str,
        key: &str,
        offset: u64,
        len: u64,
    ) -> Result<Option<Bytes>, ClientError> {
        if len == 0 {
            return Ok(Some(Bytes::new()));
        }
        match self.get_range(pool_name, key, Some((offset, offset + len - 1))).await {
            Ok((_, data)) if data.len() as u64 == len => Ok(Some(data)),
            Ok((info, data)) => Err(ClientError::Unreadable {
                key: key.to_string(),
                failures: format!(
                    "{} bytes at offset {offset} asked, {} answered (the object has {} bytes)",
                    len,
                    data.len(),
                    info.size_bytes
                ),
            }),
            Err(ClientError::NotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Makes every write the devices acknowledged durable (NBD's FLUSH): each device that
    /// runs must answer; one whose server is not running has nothing acknowledged to keep
    /// (it catches up from its peers when it returns).
    pub async fn sync_devices(&self, pool_name: &str, devices: &[u32]) -> Result<(), ClientError> {
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let endpoints: Vec<_> = devices
            .iter()
            .map(|d| view.endpoint(optio_placement::DeviceId(*d)))
            .collect::<Result<_, _>>()?;
        let calls = endpoints
            .iter()
            .map(|endpoint| self.call(self.object_call(&view, endpoint, pool, Op::Sync)));
        let mut results = join_all(calls).await;
        // A connection that broke under the request (its server just died, or an idle pooled
        // connection was closed) is tried again on a new one, as writes are: a server that is
        // gone then refuses the connection, and is gone around.
        resend_unanswered(&mut results, |i| {
            self.call(self.object_call(&view, &endpoints[i], pool, Op::Sync))
        })
        .await;
        let failures: Vec<String> = endpoints
            .iter()
            .zip(&results)
            .filter_map(|(e, r)| match r {
                Err(f) if !f.is_not_running() => Some(format!("device {}: {f}", e.device)),
                _ => None,
            })
            .collect();
        if failures.is_empty() {
            return Ok(());
        }
        Err(ClientError::NotEnoughReplicas {
            key: format!("(flush of pool '{pool_name}')"),
            acked: results.len() - failures.len(),
            needed: results.len(),
            failures: failures.join("; "),
        })
    }

    /// The first write of a block object: chosen and recorded like any first write.
    async fn create_in_place(
        &self,
        pool_name: &str,
        key: &str,
        size: u64,
        offset: u64,
        patch: &Patch,
        noted: Option<u64>,
    ) -> Result<Written, ClientError> {
        let (data, zeroes) = patch.body_and_zeroes();
        let create = Create { offset, size, zeroes };
        let report = self.put_attempts(pool_name, key, data, Some(create), noted, None).await?;
        Ok(Written::from_report(report))
    }

    /// The slow path: the object read whole (never written: zeros), changed, written whole.
    async fn rewrite_whole(
        &self,
        pool_name: &str,
        key: &str,
        size: u64,
        offset: u64,
        patch: &Patch,
        noted: Option<u64>,
    ) -> Result<Written, ClientError> {
        let mut whole = match self.get(pool_name, key).await {
            Ok(data) => data.to_vec(),
            Err(ClientError::NotFound { .. }) => vec![0u8; size as usize],
            Err(error) => return Err(error),
        };
        if whole.len() as u64 != size {
            return Err(ClientError::Unreadable {
                key: key.to_string(),
                failures: format!(
                    "it holds {} bytes where a block object of {size} bytes was expected",
                    whole.len()
                ),
            });
        }
        let range = offset as usize..(offset + patch.len()) as usize;
        match patch {
            Patch::Data(data) => whole[range].copy_from_slice(data),
            Patch::Zeroes(_) => whole[range].fill(0),
        }
        let report = self.put_noted(pool_name, key, Bytes::from(whole), noted, None).await?;
        Ok(Written::from_report(report))
    }

    /// One write in place to every replica of `candidate`, based on `base`.
    #[allow(clippy::too_many_arguments)]
    async fn patch_replicas(
        &self,
        view: &View,
        pool: optio_placement::PoolId,
        key: &str,
        candidate: &Candidate,
        base: ObjectVersion,
        offset: u64,
        patch: &Patch,
        sync: bool,
    ) -> Result<ObjectVersion, Slow> {
        let endpoints = self.endpoints(view, candidate).map_err(Slow::Failed)?;
        // A hybrid logical clock: the new version is above the base, even when the base's
        // writer's clock ran ahead of this one's (a snapshot's mark raises a writer's clock).
        self.raise_version_floor(base);
        let version = self.next_version();
        let (data, zeroes) = patch.body_and_zeroes();
        let crc = checksum(&data);
        let op = || Op::WriteAt {
            key,
            data: data.clone(),
            offset,
            zeroes,
            size: 0,
            base: Some(base),
            version,
            checksum: crc,
            pg_seed: Some(placement_seed(candidate)),
            sync,
        };
        let calls = endpoints.iter().map(|e| self.call(self.object_call(view, e, pool, op())));
        let mut results: Vec<Result<Answer, Failure>> = join_all(calls).await;
        resend_unanswered(&mut results, |i| {
            self.call(self.object_call(view, &endpoints[i], pool, op()))
        })
        .await;
        let conflict = |r: &Result<Answer, Failure>| matches!(r, Err(f) if f.kind() == Some(ErrorKind::VersionConflict));
        if results.iter().any(conflict) {
            // Behind: every conflicting replica holds less than the base (none answers with
            // the base or newer, which would mean another writer).
            let behind = |r: &Result<Answer, Failure>| matches!(r, Err(f) if f.stored_version().is_some_and(|stored| stored < base));
            let stale: Vec<usize> = (0..results.len()).filter(|i| conflict(&results[*i])).collect();
            if stale.iter().all(|i| behind(&results[*i])) {
                let accepted = results.iter().filter(|r| r.is_ok()).count();
                let applied = (accepted > 0).then_some((version, accepted));
                return Err(Slow::Behind { stale, applied });
            }
            return Err(Slow::Rewrite);
        }
        // The one quorum rule (crate::quorum), as for whole writes; a version conflict never
        // reaches it (the object is rewritten whole above).
        let rule = self.quorum_rule(view, pool, endpoints.len());
        let round = Round::of(
            rule,
            results.iter().map(|r| Outcome::of(RoundKind::Write, r, Some(version))),
        );
        let (acked, needed) = match round.decide(VERSION_BUMPS_MAX) {
            Decision::Durable { degraded } => {
                if degraded {
                    self.inner
                        .counters
                        .degraded_writes
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                return Ok(version);
            }
            Decision::RefreshMap => {
                let failures: Vec<&Failure> =
                    results.iter().filter_map(|r| r.as_ref().err()).collect();
                match self.epoch_retry(&failures).await {
                    Ok(true) => return Err(Slow::Relocate),
                    Ok(false) => {}
                    Err(error) => return Err(Slow::Failed(error)),
                }
                (round.acked(), round.needed())
            }
            Decision::WriteAbove(_) => unreachable!("decided with no version bumps left"),
            Decision::Short { acked, needed } => (acked, needed),
        };
        let details: Vec<String> = endpoints
            .iter()
            .zip(&results)
            .filter_map(|(e, r)| {
                r.as_ref().err().map(|f| format!("device {} at {}: {f}", e.device, e.addr))
            })
            .collect();
        Err(Slow::Failed(ClientError::NotEnoughReplicas {
            key: key.to_string(),
            acked,
            needed,
            failures: details.join("; "),
        }))
    }
}
