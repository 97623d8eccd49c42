//! Deletes: tombstones on every replica (and every device that may hold a copy while data
//! moves), then the choice record; and the removal of stray copies after a crash.

use futures_util::future::join_all;
use optio_proto::{ErrorKind, validate_key};

use crate::error::ClientError;
use crate::quorum::{Decision, Outcome, Round, RoundKind};
use crate::transport::{Endpoint, Failure, Op};

use super::Client;
use super::locate::placement_seed;

impl Client {
    /// Removes an object (every replica, then its choice record).
    pub async fn delete(&self, pool_name: &str, key: &str) -> Result<(), ClientError> {
        if self.erasure_pool(pool_name)?.is_some() {
            return self.delete_erasure(pool_name, key).await;
        }
        validate_key(key)?;
        let mut dirty_noted = None;
        let mut attempts = 0;
        let mut version_bumps = 0;
        // Whether an earlier attempt removed a live copy: an attempt started again (the map
        // changed under it, or a replica held a newer version) finds the tombstones the
        // first one left, and the object it deleted must not be reported as never there.
        let mut found_live = false;
        loop {
            let at = match self.retry_located(pool_name, key, &mut attempts).await {
                Err(ClientError::NotFound { .. }) if found_live => return Ok(()),
                other => other?,
            };
            let (view, pool, candidates) = (&*at.view, at.pool, &at.candidates);
            self.note_dirty(view, pool, key, &mut dirty_noted).await?;
            let candidate = at.candidate();
            // While data moves, every device that may hold a copy gets the tombstone.
            let in_transition = self.in_transition(view, pool);
            let devices = if in_transition {
                self.transition_devices(view, pool, candidate)
            } else {
                candidate.devices.clone()
            };
            let endpoints: Vec<Endpoint> =
                devices.iter().map(|d| view.endpoint(*d)).collect::<Result<_, _>>()?;
            let version = self.next_version();
            let endpoints = &endpoints;
            let send = |i: usize| {
                let delete = Op::Delete {
                    key,
                    version: Some(version),
                    purge: false,
                    pg_seed: Some(placement_seed(candidate)),
                };
                self.call(self.object_call(view, &endpoints[i], pool, delete))
            };
            // With k > 1, the other candidates' devices get the tombstone too (best effort): a
            // copy left there — sent ahead of a record and not undone because its server died —
            // would otherwise be found once the record is gone, and read as the object.
            let strays =
                self.other_candidates(view, pool, candidates, candidate, &devices, in_transition)?;
            let stray_deletes = strays.iter().map(|(endpoint, seed)| {
                let delete =
                    Op::Delete { key, version: Some(version), purge: false, pg_seed: Some(*seed) };
                self.call(self.object_call(view, endpoint, pool, delete))
            });
            // While data moves, the devices only earlier maps name are asked first, then the
            // current ones: a copy moves only toward the current placement and is dropped
            // where it was only once its new devices hold it, so a copy that left an earlier
            // device before the tombstone reached it is on a current one when that is asked.
            // (Asked together, both could answer "no such object" with the copy in flight
            // between them, and a delete of a live object be reported as not found.)
            let current =
                if in_transition { candidate.devices.len().min(endpoints.len()) } else { 0 };
            let replicas = async {
                let earlier = join_all((current..endpoints.len()).map(send)).await;
                let now = join_all((0..current).map(send)).await;
                now.into_iter().chain(earlier).collect::<Vec<_>>()
            };
            let (mut results, stray_results) =
                futures_util::future::join(replicas, join_all(stray_deletes)).await;
            // As for writes: a replica that did not answer is asked once more, and only one
            // whose server is not running is gone around (it catches up on the tombstone).
            super::write::resend_unanswered(&mut results, send).await;
            // Where the object was live, the delete answered Ok (elsewhere NotFound, a
            // tombstone written all the same): found on another candidate's devices — the
            // chosen one guessed while data moves — it is deleted all the same.
            let deleted = results.iter().chain(&stray_results).filter(|r| r.is_ok()).count();
            found_live |= deleted > 0;
            // The one quorum rule (crate::quorum), as for writes: a tombstone written where
            // the object was absent counts, and so does a newer version held once the bumps
            // ran out (a concurrent writer's, which wins).
            let rule = self.quorum_rule(view, pool, endpoints.len());
            let round = Round::of(
                rule,
                results.iter().map(|r| Outcome::of(RoundKind::Delete, r, Some(version))),
            );
            let failures: Vec<&Failure> = results.iter().filter_map(|r| r.as_ref().err()).collect();
            match round.decide(version_bumps) {
                Decision::Durable { .. } => {}
                Decision::RefreshMap if self.epoch_retry(&failures).await? => continue,
                // A replica holding a newer version (a writer's clock ahead of ours): delete
                // again above it, as writes do.
                Decision::WriteAbove(stored) => {
                    version_bumps += 1;
                    self.raise_version_floor(stored);
                    continue;
                }
                Decision::RefreshMap | Decision::Short { .. } => {
                    let (failed, not_running): (Vec<&Failure>, Vec<&Failure>) = failures
                        .iter()
                        .filter(|f| {
                            !matches!(
                                f.kind(),
                                Some(ErrorKind::NotFound | ErrorKind::VersionConflict)
                            )
                        })
                        .partition(|f| !f.is_not_running());
                    return Err(ClientError::NotEnoughReplicas {
                        key: key.to_string(),
                        acked: round.acked(),
                        needed: round.needed(),
                        failures: failed
                            .iter()
                            .chain(&not_running)
                            .map(|f| f.to_string())
                            .collect::<Vec<_>>()
                            .join("; "),
                    });
                }
            }
            if candidates.len() > 1
                && let Some(home) = candidates[0].primary()
            {
                let home = view.endpoint(home)?;
                let _ =
                    self.call(self.object_call(view, &home, pool, Op::DeleteRecord { key })).await;
            }
            self.inner.cache.remove(pool.0, key);
            if !found_live {
                return Err(ClientError::NotFound {
                    pool: pool_name.to_string(),
                    key: key.to_string(),
                });
            }
            return Ok(());
        }
    }

    /// The devices of `candidates` other than `chosen` and not in `devices`, with the
    /// placement seed of their candidate.
    fn other_candidates(
        &self,
        view: &super::View,
        pool: optio_placement::PoolId,
        candidates: &[crate::Candidate],
        chosen: &crate::Candidate,
        devices: &[optio_placement::DeviceId],
        in_transition: bool,
    ) -> Result<Vec<(Endpoint, u32)>, ClientError> {
        let mut out: Vec<(Endpoint, u32)> = Vec::new();
        for candidate in candidates.iter().filter(|c| c.index != chosen.index) {
            // While data moves, a copy may still be where the previous map put it.
            let held = if in_transition {
                self.transition_devices(view, pool, candidate)
            } else {
                candidate.devices.clone()
            };
            for device in held.iter().filter(|d| !devices.contains(d)) {
                let endpoint = view.endpoint(*device)?;
                if !out.iter().any(|(e, _)| e.device == endpoint.device) {
                    out.push((endpoint, placement_seed(candidate)));
                }
            }
        }
        Ok(out)
    }

    /// Deletes copies of `key` on candidates other than the one its record (or probing)
    /// names: what a first write sent ahead of its record leaves when the client crashed
    /// before undoing it.
    pub(super) async fn remove_strays(
        &self,
        pool_name: &str,
        key: &str,
    ) -> Result<(), ClientError> {
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        if candidates.len() < 2 {
            return Ok(());
        }
        let Some(located) = self.locate(&view, pool, key, &candidates).await? else {
            return Ok(());
        };
        let keep = &candidates[usize::from(located)].devices;
        let mut strays: Vec<Endpoint> = Vec::new();
        for candidate in candidates.iter().filter(|c| c.index != located) {
            for device in candidate.devices.iter().filter(|d| !keep.contains(d)) {
                let endpoint = view.endpoint(*device)?;
                if !strays.contains(&endpoint) {
                    strays.push(endpoint);
                }
            }
        }
        let deletes = strays.iter().map(|e| {
            self.call(self.object_call(
                &view,
                e,
                pool,
                Op::Delete { key, version: None, purge: true, pg_seed: None },
            ))
        });
        join_all(deletes).await;
        Ok(())
    }
}
