//! Writes: fan-out to the chosen candidate's replicas, acknowledged at the write quorum; the
//! pipelined first write of a warm client; undoing a write that must not stand.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use optio_placement::{PolicySpec, PoolId};
use optio_proto::{ErrorKind, ObjectVersion, checksum, validate_key};

use crate::candidates::Candidate;
use crate::error::ClientError;
use crate::quorum::{Decision, Outcome, QuorumRule, Round, RoundKind};
use crate::transport::{Answer, Endpoint, Failure, Op};

use super::choose::{Chosen, Excluded};
use super::locate::{Keyed, placement_seed};
use super::{Client, RETRIES_MAX, View};

/// What a write did.
#[derive(Clone, Debug)]
pub struct PutReport {
    /// The candidate written.
    pub candidate: u8,
    /// The devices written, primary first.
    pub devices: Vec<u32>,
    /// Version written.
    pub version: ObjectVersion,
    /// Probes this write sent.
    pub probes: u32,
}

/// A first write that created its choice record and took less than this from the record
/// request to the last replica's acknowledgement needs no further check: a home that crashed
/// refuses new records for longer (`optio_server::records::RECORD_GRACE_AFTER_CRASH`, 2 s).
pub const RECORD_LEASE: Duration = Duration::from_secs(1);

/// How many times a request whose connection dropped is sent again (each time on another
/// connection) before the replica counts as not answering.
pub(super) const DROPPED_RESENDS: usize = 4;

/// One version of an object, as written to each replica.
#[derive(Clone, Copy)]
pub(super) struct Payload<'a> {
    pub(super) data: &'a Bytes,
    pub(super) crc: u32,
    pub(super) version: ObjectVersion,
    /// A block object created by a write in place, instead of a whole object.
    pub(super) create: Option<Create>,
}

/// The creation of a block object by its first write in place: `data` (or `zeroes` zero
/// bytes) at `offset` of an object of `size` bytes whose other bytes read as zeros.
#[derive(Clone, Copy, Debug)]
pub(super) struct Create {
    pub(super) offset: u64,
    pub(super) size: u64,
    pub(super) zeroes: u64,
}

/// One attempt's write on the wire: the candidate chosen, the replicas written to, their
/// answers and the version written.
struct Sent {
    chosen: Chosen,
    endpoints: Vec<Endpoint>,
    results: Vec<Result<Answer, Failure>>,
    version: ObjectVersion,
}

impl Client {
    /// Writes an object: r replicas on the chosen candidate's replica set, acknowledged when
    /// w of them (default all) are durable.
    pub async fn put(&self, pool: &str, key: &str, data: Bytes) -> Result<PutReport, ClientError> {
        self.put_noted(pool, key, data, None, None).await
    }

    /// [`put`](Self::put), a new object placed by `policy` (a policy name, as
    /// [`ClientConfig::policy`](super::ClientConfig::policy)) instead of the client's or the
    /// pool's: the seed's per-request policy. An object that exists keeps its placement.
    pub async fn put_with_policy(
        &self,
        pool: &str,
        key: &str,
        data: Bytes,
        policy: &str,
    ) -> Result<PutReport, ClientError> {
        let policy = super::policy_override(policy)?;
        self.put_noted(pool, key, data, None, Some(&policy)).await
    }

    /// [`put`](Self::put), for a write whose dirty-table entry was already recorded at the
    /// membership version `dirty_noted` (a write in place falling back to a whole write).
    pub(super) async fn put_noted(
        &self,
        pool: &str,
        key: &str,
        data: Bytes,
        dirty_noted: Option<u64>,
        policy: Option<&PolicySpec>,
    ) -> Result<PutReport, ClientError> {
        if self.erasure_pool(pool)?.is_some() {
            return self.put_erasure(pool, key, data).await;
        }
        validate_key(key)?;
        let intent = match &self.inner.intents {
            Some(log) => {
                Some(log.begin(self.view().pool(pool)?.0, key).map_err(ClientError::IntentLog)?)
            }
            None => None,
        };
        self.inner.in_flight.fetch_add(1, Ordering::AcqRel);
        let result = self.put_attempts(pool, key, data, None, dirty_noted, policy).await;
        let in_flight = self.inner.in_flight.fetch_sub(1, Ordering::AcqRel) - 1;
        if let (Some(log), Some(intent)) = (&self.inner.intents, intent) {
            log.end(intent);
            log.compact_if_idle(in_flight);
        }
        result
    }

    pub(super) async fn put_attempts(
        &self,
        pool_name: &str,
        key: &str,
        data: Bytes,
        create: Option<Create>,
        mut dirty_noted: Option<u64>,
        policy: Option<&PolicySpec>,
    ) -> Result<PutReport, ClientError> {
        let crc = checksum(&data);
        let size_bytes = create.map_or(data.len() as u64, |c| c.size);
        let mut excluded = Excluded::default();
        let mut version_bumps = 0;
        let mut waited_for_down = false;
        for _attempt in 0..RETRIES_MAX {
            let view = self.view();
            let pool = view.pool(pool_name)?;
            let replicas = view.map.pool(pool).map_or(0, |p| p.size as usize);
            if let Some(w) = self.inner.config.write_quorum
                && w > replicas
            {
                return Err(ClientError::Config(format!(
                    "a write quorum of {w} is above the {replicas} replicas of pool '{pool_name}'; give 1 to {replicas}"
                )));
            }
            self.note_dirty(&view, pool, key, &mut dirty_noted).await?;
            let candidates = self.candidates_in(&view, pool, key);
            let at = Keyed { view: &view, pool, key, candidates: &candidates };
            let probes_before = self.inner.counters.probes.load(Ordering::Relaxed);
            let started = Instant::now();
            let sent = match self.choose_and_send(at, &excluded, policy, &data, crc, create).await {
                Err(ClientError::EpochRetries { .. }) => continue,
                // A new object's choice needs its home (or a candidate without a dead
                // device), and a server refused the connection while the map still has it
                // up: the monitor marks it down within a round; then the choice goes on
                // without it, as for any device down.
                Err(
                    error @ (ClientError::HomeUnreachable { .. }
                    | ClientError::NoCandidate { .. }
                    | ClientError::CandidateUnreachable { .. }),
                ) if !waited_for_down && self.refused_while_up(&view, &candidates) => {
                    waited_for_down = true;
                    if self.await_newer_map(view.epoch(), super::DOWN_WAIT_MAX).await {
                        continue;
                    }
                    return Err(error);
                }
                other => other?,
            };
            let Sent {
                chosen: Chosen { candidate: chosen, created },
                endpoints,
                mut results,
                version,
            } = sent;
            let candidate = &candidates[usize::from(chosen)];
            // A replica that did not answer gets the same version once more (a lost reply is
            // answered "already stored"); one whose server was not running is asked again now
            // that the others answered: a server that started meanwhile catches up by listing
            // its peers, and may have listed them before this write reached them.
            let payload = Payload { data: &data, crc, version, create };
            resend_unanswered(&mut results, |i| {
                let put = put_op(key, candidate, payload);
                self.call(self.object_call(&view, &endpoints[i], pool, put))
            })
            .await;
            // A create in place that finds the object there (written meanwhile, or missed by
            // the probe that said it was new) must not replace it: the caller writes whole.
            if create.is_some()
                && results
                    .iter()
                    .any(|r| matches!(r, Err(f) if f.kind() == Some(ErrorKind::VersionConflict)))
            {
                self.undo(&view, pool, key, &endpoints, &results, version).await;
                return Err(ClientError::Exists { key: key.to_string() });
            }
            // The one quorum rule (crate::quorum) decides: every running replica and at least
            // min_size hold the write, or it goes again (a newer map, a newer version held).
            let rule = self.quorum_rule(&view, pool, endpoints.len());
            let round = Round::of(
                rule,
                results.iter().map(|r| Outcome::of(RoundKind::Write, r, Some(version))),
            );
            let (acked, needed) = match round.decide(version_bumps) {
                Decision::WriteAbove(stored) => {
                    version_bumps += 1;
                    self.raise_version_floor(stored);
                    continue;
                }
                Decision::RefreshMap => {
                    let kinds: Vec<&Failure> =
                        results.iter().filter_map(|r| r.as_ref().err()).collect();
                    if self.epoch_retry(&kinds).await? {
                        continue;
                    }
                    (round.acked(), round.needed())
                }
                Decision::Durable { degraded } => {
                    if degraded {
                        self.inner.counters.degraded_writes.fetch_add(1, Ordering::Relaxed);
                    }
                    // A record this write created is safe once the object is stored, if the
                    // home did not crash meanwhile: either the write took less than the lease
                    // (a home that crashed refuses records for longer than that), or its
                    // incarnation is unchanged.
                    if let Some(incarnation) = created
                        && started.elapsed() >= RECORD_LEASE
                        && !self.home_kept_record(at, chosen, incarnation, &results).await
                    {
                        // The home restarted while we wrote: our record may be lost, and
                        // another client may have chosen another candidate since. Undo, and
                        // start over.
                        tracing::info!(key, "the home restarted during a first write; retrying");
                        self.undo(&view, pool, key, &endpoints, &results, version).await;
                        self.inner.cache.remove(pool.0, key);
                        continue;
                    }
                    self.inner.cache.insert(pool.0, key, chosen);
                    let probes = self.inner.counters.probes.load(Ordering::Relaxed) - probes_before;
                    return Ok(PutReport {
                        candidate: chosen,
                        devices: candidate.devices.iter().map(|d| d.0).collect(),
                        version,
                        probes: probes as u32,
                    });
                }
                Decision::Short { acked, needed } => (acked, needed),
            };
            let failures: Vec<(&Endpoint, &Failure)> = endpoints
                .iter()
                .zip(&results)
                .filter_map(|(e, r)| r.as_ref().err().map(|f| (e, f)))
                .filter(|(_, f)| f.kind() != Some(ErrorKind::VersionConflict))
                .collect();
            if let Some((_, Failure::Refused { reason, .. })) =
                failures.iter().find(|(_, f)| f.kind() == Some(ErrorKind::TooLarge))
            {
                return Err(ClientError::TooLarge { key: key.to_string(), reason: reason.clone() });
            }
            let full = failures.iter().any(|(_, f)| f.kind() == Some(ErrorKind::Full));
            if full && candidates.len() > 1 && excluded.candidates.len() + 1 < candidates.len() {
                // Steer around the full device: undo what was written, choose again.
                self.undo(&view, pool, key, &endpoints, &results, version).await;
                self.inner.cache.remove(pool.0, key);
                excluded.candidates.push(chosen);
                excluded.full_devices.extend(
                    failures
                        .iter()
                        .filter(|(_, f)| f.kind() == Some(ErrorKind::Full))
                        .map(|(e, _)| optio_placement::DeviceId(e.device)),
                );
                continue;
            }
            let details: Vec<String> = failures
                .iter()
                .map(|(e, f)| format!("device {} at {}: {f}", e.device, e.addr))
                .collect();
            if full {
                return Err(ClientError::NoRoom {
                    key: key.to_string(),
                    size_bytes,
                    details: details.join("; "),
                });
            }
            return Err(ClientError::NotEnoughReplicas {
                key: key.to_string(),
                acked,
                needed,
                failures: details.join("; "),
            });
        }
        Err(ClientError::EpochRetries { attempts: RETRIES_MAX })
    }

    /// Chooses the candidate of one attempt and writes one version to its replicas. A warm
    /// client's first write is pipelined: the record request, the other candidates' probes
    /// and the object's writes all leave at once (should the home or a probe say the object
    /// belongs elsewhere, the copies are undone). Otherwise the candidate is chosen first
    /// ([`choose_for_write`](Self::choose_for_write)), then written.
    async fn choose_and_send(
        &self,
        at: Keyed<'_>,
        excluded: &Excluded,
        policy: Option<&PolicySpec>,
        data: &Bytes,
        crc: u32,
        create: Option<Create>,
    ) -> Result<Sent, ClientError> {
        let Keyed { view, pool, key, candidates } = at;
        let size_bytes = create.map_or(data.len() as u64, |c| c.size);
        let mut written = None;
        let chosen = match self.pipeline_guess(at, size_bytes, excluded, policy) {
            Some(guess) => {
                self.inner.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
                let target = &candidates[usize::from(guess)];
                let endpoints = self.endpoints(view, target)?;
                let version = self.next_version();
                let (chosen, results) = futures_util::future::join(
                    self.record_and_probe(view, pool, key, candidates, guess),
                    self.fan_out(
                        view,
                        pool,
                        key,
                        target,
                        &endpoints,
                        Payload { data, crc, version, create },
                    ),
                )
                .await;
                if matches!(&chosen, Ok(c) if c.candidate == guess) {
                    written = Some((endpoints, results, version));
                } else {
                    self.undo(view, pool, key, &endpoints, &results, version).await;
                }
                chosen
            }
            None => self.choose_for_write(at, size_bytes, excluded, policy).await,
        }?;
        let (endpoints, results, version) = match written {
            Some(written) => written,
            None => {
                let candidate = &candidates[usize::from(chosen.candidate)];
                let endpoints = self.endpoints(view, candidate)?;
                let version = self.next_version();
                let payload = Payload { data, crc, version, create };
                let results = self.fan_out(view, pool, key, candidate, &endpoints, payload).await;
                (endpoints, results, version)
            }
        };
        Ok(Sent { chosen, endpoints, results, version })
    }

    /// The candidate a warm client writes a new object to at once (with its record request),
    /// or `None` when the write goes the careful way: k = 1, a cached choice, a re-choice, or
    /// metrics too old to choose on.
    pub(super) fn pipeline_guess(
        &self,
        at: Keyed<'_>,
        size_bytes: u64,
        excluded: &Excluded,
        policy: Option<&PolicySpec>,
    ) -> Option<u8> {
        let Keyed { view, pool, key, candidates } = at;
        if candidates.len() < 2
            || !excluded.is_empty()
            || self.inner.cache.get(pool.0, key).is_some()
        {
            return None;
        }
        self.choice_from_recent_metrics(view, pool, key, candidates, size_bytes, policy)
    }

    pub(super) fn endpoints(
        &self,
        view: &View,
        candidate: &Candidate,
    ) -> Result<Vec<Endpoint>, ClientError> {
        if candidate.devices.is_empty() {
            return Err(ClientError::NoDevices { key: String::new() });
        }
        candidate.devices.iter().map(|d| view.endpoint(*d)).collect()
    }

    /// The fewest durable copies a write of `pool` needs: the client's write quorum if set,
    /// else the pool's `min_size`.
    pub(super) fn min_size(&self, view: &View, pool: PoolId) -> usize {
        self.inner
            .config
            .write_quorum
            .unwrap_or_else(|| view.map.pool(pool).map_or(1, |p| p.min_size as usize))
    }

    /// The quorum rule of a round of `pool` sent to `replicas` devices.
    pub(super) fn quorum_rule(&self, view: &View, pool: PoolId, replicas: usize) -> QuorumRule {
        QuorumRule { replicas, min_size: self.min_size(view, pool) }
    }

    /// Writes one version of the object to every replica of `candidate`, in parallel.
    pub(super) async fn fan_out(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidate: &Candidate,
        endpoints: &[Endpoint],
        payload: Payload<'_>,
    ) -> Vec<Result<Answer, Failure>> {
        let calls = endpoints.iter().map(|endpoint| {
            self.call(self.object_call(view, endpoint, pool, put_op(key, candidate, payload)))
        });
        join_all(calls).await
    }

    /// After a first write whose record this client created: whether the home kept running
    /// (same incarnation) until the object was stored. When the home is the chosen
    /// candidate's primary, its answer to the object's write says so at no cost; otherwise
    /// one more round trip asks it.
    pub(super) async fn home_kept_record(
        &self,
        Keyed { view, pool, key, candidates }: Keyed<'_>,
        chosen: u8,
        incarnation: u64,
        results: &[Result<Answer, Failure>],
    ) -> bool {
        let candidate = &candidates[usize::from(chosen)];
        if candidate.primary() == candidates[0].primary()
            && let Some(Ok(answer)) = results.first()
            && answer.incarnation == Some(incarnation)
        {
            return true;
        }
        self.confirm_record(view, pool, key, candidates, chosen, incarnation).await
    }

    /// Removes the replicas of a write that could not complete (only that version).
    pub(super) async fn undo(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        endpoints: &[Endpoint],
        results: &[Result<Answer, Failure>],
        version: ObjectVersion,
    ) {
        let calls =
            endpoints.iter().zip(results).filter(|(_, r)| r.is_ok()).map(|(endpoint, _)| {
                self.call(self.object_call(view, endpoint, pool, Op::Undo { key, version }))
            });
        join_all(calls).await;
    }
}

/// The write of one version of `key` to a replica of `candidate`.
fn put_op<'a>(
    key: &'a str,
    candidate: &Candidate,
    Payload { data, crc, version, create }: Payload<'_>,
) -> Op<'a> {
    let pg_seed = Some(placement_seed(candidate));
    match create {
        None => Op::Put { key, data: data.clone(), version, checksum: crc, pg_seed },
        Some(Create { offset, size, zeroes }) => Op::WriteAt {
            key,
            data: data.clone(),
            offset,
            zeroes,
            size,
            base: None,
            version,
            checksum: crc,
            pg_seed,
            sync: false,
        },
    }
}

/// Sends again, with `send(i)`, every request of `results` that did not answer (its server
/// not running, no answer at all, or the connection dropped) and puts the new outcome in its
/// place: once, and up to [`DROPPED_RESENDS`] times while connections keep dropping (each
/// attempt takes another pooled connection; those to a server that died are all broken).
/// Writes and deletes both go through it.
pub(super) async fn resend_unanswered<F, Fut>(results: &mut [Result<Answer, Failure>], send: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<Answer, Failure>>,
{
    for round in 0..DROPPED_RESENDS {
        let again: Vec<usize> = (0..results.len())
            .filter(|&i| match &results[i] {
                Err(f) if round == 0 => f.is_unreachable(),
                Err(f) => f.is_dropped(),
                Ok(_) => false,
            })
            .collect();
        if again.is_empty() {
            return;
        }
        let retried = join_all(again.iter().map(|&i| send(i))).await;
        for (i, result) in again.into_iter().zip(retried) {
            results[i] = result;
        }
    }
}
