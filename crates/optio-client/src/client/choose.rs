//! Where a write goes: the cached choice, an existing record or object, or the policy's
//! choice, recorded at the object's home with an atomic create-if-absent.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use optio_placement::PoolId;
use optio_proto::{ChoiceRecord, ErrorKind, ObjectInfo};

use crate::candidates::Candidate;
use crate::error::ClientError;
use crate::quorum::{Decision, Outcome, QuorumRule, Round, RoundKind, VERSION_BUMPS_MAX};
use crate::transport::{Answer, Endpoint, Failure, Op};

use super::locate::{Keyed, Probed, newest_holder, unanswered};
use super::{Client, UNKNOWN_EPOCH_BACKOFF, View};

/// What the earlier attempts of one write learned: the candidates it gave up on because a
/// device refused the object for lack of room, and those devices (full for the next choice).
#[derive(Clone, Debug, Default)]
pub(super) struct Excluded {
    pub(super) candidates: Vec<u8>,
    pub(super) full_devices: Vec<optio_placement::DeviceId>,
}

impl Excluded {
    pub(super) fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }
}

/// The candidate a write goes to.
#[derive(Clone, Copy, Debug)]
pub(super) struct Chosen {
    pub(super) candidate: u8,
    /// Set when this write created the choice record: the home's incarnation then. The
    /// write is acknowledged only once the home is known to have kept running (so kept
    /// the record) until the object was stored.
    pub(super) created: Option<u64>,
}

/// What the home answered to a record request.
pub(super) struct Recorded {
    pub(super) candidate: u8,
    pub(super) created: bool,
    pub(super) incarnation: u64,
    pub(super) home_info: Option<ObjectInfo>,
}

/// How long a client waits for a home that refuses records just after a crash.
pub(super) const HOME_GRACE_WAIT_MAX: Duration = Duration::from_secs(4);

impl Client {
    /// The candidate a write of `key` goes to, and whether the choice record this write
    /// created still has to become durable: the cache, else an existing record or object,
    /// else the policy's choice, recorded at the home.
    pub(super) async fn choose_for_write(
        &self,
        at: Keyed<'_>,
        size_bytes: u64,
        excluded: &Excluded,
        policy: Option<&optio_placement::PolicySpec>,
    ) -> Result<Chosen, ClientError> {
        let Keyed { view, pool, key, candidates } = at;
        if candidates.len() == 1 {
            return Ok(Chosen { candidate: 0, created: None });
        }
        let at = Keyed { view, pool, key, candidates };
        if excluded.is_empty()
            && let Some(c) = self.inner.cache.get(pool.0, key)
            && usize::from(c) < candidates.len()
        {
            self.inner.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Chosen { candidate: c, created: None });
        }
        self.inner.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
        if excluded.is_empty()
            && let Some(guess) =
                self.choice_from_recent_metrics(view, pool, key, candidates, size_bytes, policy)
        {
            return self.record_and_probe(view, pool, key, candidates, guess).await;
        }
        let probes = self.probe_primaries(view, pool, key, candidates).await?;
        let failures: Vec<&Failure> =
            probes.iter().filter_map(|p| p.answer.as_ref().err()).collect();
        if self.epoch_retry(&failures).await? {
            return Err(ClientError::EpochRetries { attempts: 0 });
        }
        if excluded.is_empty()
            && let Some(existing) = self.existing_choice(at, &probes).await?
        {
            return Ok(existing);
        }
        // The candidates given up on hold a device that refused the object: full, so the
        // library excludes them (and any other candidate on that device).
        let down = unanswered(candidates, &probes);
        let chosen = self
            .policy_choice(at, size_bytes, &down, &excluded.full_devices, policy)
            .map_err(|error| ClientError::no_choice(key, size_bytes, error))?;
        let replace = !excluded.is_empty();
        let recorded = self.record_choice(at, chosen as u8, replace, true).await?;
        Ok(Chosen {
            candidate: recorded.candidate,
            created: recorded.created.then_some(recorded.incarnation),
        })
    }

    /// The candidate already chosen for `key`, from the probes of every candidate's primary:
    /// the home's record, else the candidate holding a copy (asking the other replicas of the
    /// candidates whose primary did not answer), recorded then. `None`: a new object.
    async fn existing_choice(
        &self,
        at: Keyed<'_>,
        probes: &[Probed],
    ) -> Result<Option<Chosen>, ClientError> {
        let Keyed { view, pool, key, candidates } = at;
        if let Ok(answer) = &probes[0].answer
            && let Some(record) = answer.record
            && usize::from(record.candidate) < candidates.len()
        {
            return Ok(Some(Chosen { candidate: record.candidate, created: None }));
        }
        let holder = newest_holder(
            candidates,
            probes.iter().enumerate().filter_map(|(i, p)| match &p.answer {
                Ok(a) if a.status == 200 => Some((i as u8, a.info.as_ref())),
                _ => None,
            }),
        );
        let unreachable: Vec<usize> =
            (0..probes.len()).filter(|&i| probes[i].answer.is_err()).collect();
        let holder = match holder {
            Some(holder) => Some(holder),
            None => self.probe_secondaries(view, pool, key, candidates, &unreachable).await?,
        };
        let Some(holder) = holder else { return Ok(None) };
        // Stored without a record (written at k = 1, or a record lost): record it.
        let recorded = self.record_choice(at, holder, false, false).await?;
        Ok(Some(Chosen { candidate: recorded.candidate, created: None }))
    }

    /// One round trip instead of two: creates the record for `guess` at the home (whose
    /// answer is also its probe) while probing the other candidates' primaries. A record
    /// already there wins; so does an object already stored without a record.
    pub(super) async fn record_and_probe(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        guess: u8,
    ) -> Result<Chosen, ClientError> {
        let at = Keyed { view, pool, key, candidates };
        let record = self.record_choice(at, guess, false, true);
        let others = self.probe_primaries(view, pool, key, &candidates[1..]);
        let (recorded, others) = futures_util::future::join(record, others).await;
        let recorded = recorded?;
        let others = others?;
        if !recorded.created {
            return Ok(Chosen { candidate: recorded.candidate, created: None });
        }
        // The home's copy counts when its seed names a candidate (the home device may serve
        // more than one).
        let at_home = recorded
            .home_info
            .as_ref()
            .filter(|info| super::locate::holder_of(candidates, Some(info)).is_some())
            .map(|info| (0u8, Some(info)));
        let holder = newest_holder(
            candidates,
            at_home.into_iter().chain(others.iter().enumerate().filter_map(
                |(i, p)| match &p.answer {
                    Ok(a) if a.status == 200 => Some((i as u8 + 1, a.info.as_ref())),
                    _ => None,
                },
            )),
        );
        let holder = match holder {
            Some(holder) => Some(holder),
            None => {
                let unreachable: Vec<usize> = (0..others.len())
                    .filter(|&i| others[i].answer.is_err())
                    .map(|i| i + 1)
                    .collect();
                self.probe_secondaries(view, pool, key, candidates, &unreachable).await?
            }
        };
        match holder {
            Some(holder) if holder != guess => {
                // Follow an object stored without a record, unless the home says another
                // writer just lost the race for this key: then the copies are that writer's,
                // sent ahead of its record request, and it is undoing them.
                let fixed = self.follow_holder(view, pool, key, candidates, holder).await?;
                if fixed.candidate == guess {
                    return Ok(Chosen { candidate: guess, created: Some(recorded.incarnation) });
                }
                Ok(Chosen { candidate: fixed.candidate, created: None })
            }
            _ => Ok(Chosen { candidate: guess, created: Some(recorded.incarnation) }),
        }
    }

    /// Points this client's new record at `holder`, unless the key is contended.
    pub(super) async fn follow_holder(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        holder: u8,
    ) -> Result<Recorded, ClientError> {
        let home = self.home(view, key, candidates)?;
        let record = ChoiceRecord {
            candidate: holder,
            choices: candidates.len() as u8,
            writer: self.inner.writer,
        };
        let op = Op::PutRecord {
            key,
            record,
            replace_if_writer: Some(self.inner.writer),
            unless_contended: true,
            defer_sync: false,
        };
        let call = self.object_call(view, &home, pool, op);
        let answer = self.recorded(key, &home, self.call(call).await).await?;
        let candidate = answer.record.map_or(holder, |r| r.candidate);
        check_recorded(key, &home, candidate, candidates)?;
        Ok(Recorded {
            candidate,
            created: answer.status == 201,
            incarnation: answer.incarnation.unwrap_or(0),
            home_info: answer.info,
        })
    }

    /// Creates the choice record at the home (atomic create-if-absent, or a replacement of
    /// this client's own record); returns the candidate recorded, which is another client's
    /// when it was first. With `defer_sync`, the home answers before committing the record
    /// (it is visible at once); the write then confirms the home did not restart.
    pub(super) async fn record_choice(
        &self,
        Keyed { view, pool, key, candidates }: Keyed<'_>,
        chosen: u8,
        replace: bool,
        defer_sync: bool,
    ) -> Result<Recorded, ClientError> {
        let home = self.home(view, key, candidates)?;
        let record = ChoiceRecord {
            candidate: chosen,
            choices: candidates.len() as u8,
            writer: self.inner.writer,
        };
        let op = Op::PutRecord {
            key,
            record,
            replace_if_writer: replace.then_some(self.inner.writer),
            unless_contended: false,
            defer_sync,
        };
        let call = self.object_call(view, &home, pool, op);
        let waited = Instant::now();
        let mut result = self.call(call.clone()).await;
        while matches!(&result, Err(f) if f.kind() == Some(ErrorKind::Unavailable))
            && waited.elapsed() < HOME_GRACE_WAIT_MAX
        {
            tokio::time::sleep(UNKNOWN_EPOCH_BACKOFF * 2).await;
            result = self.call(call.clone()).await;
        }
        let answer = self.recorded(key, &home, result).await?;
        let created = answer.status == 201;
        let candidate = answer.record.map(|r| r.candidate).unwrap_or(chosen);
        check_recorded(key, &home, candidate, candidates)?;
        if created {
            self.inner.counters.records_created.fetch_add(1, Ordering::Relaxed);
            if self.inner.config.crash_after_choice_record {
                eprintln!("optio-client: crashing after the choice record, as configured");
                std::process::abort();
            }
        }
        Ok(Recorded {
            candidate,
            created,
            incarnation: answer.incarnation.unwrap_or(0),
            home_info: answer.info,
        })
    }

    /// The home's answer to a record request, under the one quorum rule (crate::quorum) for a
    /// round of one: the home must answer; a refusal of this client's map refreshes it and
    /// starts the write again ([`ClientError::EpochRetries`], which the write retries).
    async fn recorded(
        &self,
        key: &str,
        home: &Endpoint,
        result: Result<Answer, Failure>,
    ) -> Result<Answer, ClientError> {
        let round = Round::of(QuorumRule::RECORD, [Outcome::of(RoundKind::Record, &result, None)]);
        match (round.decide(VERSION_BUMPS_MAX), result) {
            (Decision::Durable { .. }, Ok(answer)) => Ok(answer),
            (Decision::RefreshMap, Err(failure)) => {
                self.epoch_retry(&[&failure]).await?;
                Err(ClientError::EpochRetries { attempts: 0 })
            }
            (_, Err(failure)) => Err(ClientError::HomeUnreachable {
                key: key.to_string(),
                device: home.device,
                addr: home.addr.clone(),
                reason: failure.to_string(),
            }),
            (decision, Ok(_)) => unreachable!("an answered record decided {decision:?}"),
        }
    }

    /// Whether the home still holds the record this client created, in the same
    /// incarnation (it did not restart, so it did not lose the record before committing it).
    pub(super) async fn confirm_record(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        chosen: u8,
        incarnation: u64,
    ) -> bool {
        let Ok(home) = self.home(view, key, candidates) else { return false };
        match self.call(self.object_call(view, &home, pool, Op::GetRecord { key })).await {
            Ok(answer) => {
                answer.incarnation == Some(incarnation)
                    && answer
                        .record
                        .is_some_and(|r| r.candidate == chosen && r.writer == self.inner.writer)
            }
            Err(_) => false,
        }
    }
}

/// Refuses a candidate a home's record names that the pool does not have: what comes from the
/// network indexes nothing until it is checked.
fn check_recorded(
    key: &str,
    home: &Endpoint,
    candidate: u8,
    candidates: &[Candidate],
) -> Result<(), ClientError> {
    if usize::from(candidate) < candidates.len() {
        return Ok(());
    }
    Err(ClientError::BadRecord {
        key: key.to_string(),
        device: home.device,
        candidate,
        choices: candidates.len(),
    })
}
