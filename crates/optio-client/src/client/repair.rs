//! Repair: verifying every replica of an object, bringing them to the newest intact version,
//! and recovering the writes a crashed client left in doubt.

use std::path::Path;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::future::join_all;
use optio_placement::PoolId;
use optio_proto::{ErrorKind, ObjectInfo, validate_key};

use crate::candidates::Candidate;
use crate::error::ClientError;
use crate::intent::IntentLog;
use crate::transport::{Answer, Endpoint, Failure, Op};

use super::locate::placement_seed;
use super::{Client, View};

/// One replica in a verification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaState {
    /// Holds the newest version, intact.
    Good,
    /// Was missing, corrupt or older, and was repaired.
    Repaired(String),
    /// Could not be reached or repaired.
    Failed(String),
}

impl Client {
    /// Re-probes and repairs the objects whose writes were in doubt when a client crashed.
    /// Returns how many objects were recovered.
    pub async fn recover(&self, dir: &Path) -> Result<usize, ClientError> {
        let (doubts, files) = IntentLog::orphans(dir).map_err(ClientError::IntentLog)?;
        let view = self.view();
        for doubt in &doubts {
            self.inner.cache.remove(doubt.pool, &doubt.key);
            let Some(pool) = view.map.pool(PoolId(doubt.pool)) else { continue };
            let pool_name = pool.name.clone();
            let verified = self.verify(&pool_name, &doubt.key).await;
            if verified.is_ok() || matches!(verified, Err(ClientError::NotFound { .. })) {
                self.remove_strays(&pool_name, &doubt.key).await?;
            }
            match verified {
                Ok(_) | Err(ClientError::NotFound { .. }) => {}
                Err(error) => {
                    tracing::warn!(key = %doubt.key, %error, "recovery of a write in doubt failed");
                    return Err(error);
                }
            }
        }
        IntentLog::forget(&files);
        Ok(doubts.len())
    }

    /// Writes the good copy (same version) to replicas found damaged or missing.
    pub(super) async fn repair(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        targets: &[Endpoint],
        (info, data): (&ObjectInfo, &Bytes),
        candidate: &Candidate,
    ) -> Vec<(u32, Result<(), Failure>)> {
        let calls = targets.iter().map(|endpoint| {
            let put = Op::Put {
                key,
                data: data.clone(),
                version: info.version,
                checksum: info.checksum,
                pg_seed: Some(placement_seed(candidate)),
            };
            self.call(self.object_call(view, endpoint, pool, put))
        });
        let results = join_all(calls).await;
        targets
            .iter()
            .zip(results)
            .map(|(endpoint, result)| {
                let outcome = result.map(|_| ());
                if outcome.is_ok() {
                    self.inner.counters.repairs.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(key, device = endpoint.device, "repaired a replica");
                }
                (endpoint.device, outcome)
            })
            .collect()
    }

    /// Reads every replica of an object and brings them all to the newest intact version.
    pub async fn verify(
        &self,
        pool_name: &str,
        key: &str,
    ) -> Result<Vec<(u32, ReplicaState)>, ClientError> {
        validate_key(key)?;
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        let Some(chosen) = self.locate(&view, pool, key, &candidates).await? else {
            return Err(ClientError::NotFound {
                pool: pool_name.to_string(),
                key: key.to_string(),
            });
        };
        let candidate = &candidates[usize::from(chosen)];
        let endpoints: Vec<Endpoint> =
            candidate.devices.iter().map(|d| view.endpoint(*d)).collect::<Result<_, _>>()?;
        let reads = endpoints.iter().map(|endpoint| {
            self.call(self.object_call(&view, endpoint, pool, Op::Get { key, range: None }))
        });
        let results = join_all(reads).await;
        let (best, mut states) = newest_intact(&results);
        let Some((info, data)) = best else {
            if results.iter().all(|r| matches!(r, Err(f) if f.kind() == Some(ErrorKind::NotFound)))
            {
                return Err(ClientError::NotFound {
                    pool: pool_name.to_string(),
                    key: key.to_string(),
                });
            }
            let failures: Vec<String> =
                results.iter().filter_map(|r| r.as_ref().err().map(|f| f.to_string())).collect();
            return Err(ClientError::Unreadable {
                key: key.to_string(),
                failures: failures.join("; "),
            });
        };
        let mut targets = Vec::new();
        for (i, result) in results.iter().enumerate() {
            let stale = matches!(result, Ok(a) if a.info.as_ref().is_some_and(|x| (x.version, x.checksum) != (info.version, info.checksum)));
            if stale {
                states[i] = Some(ReplicaState::Repaired("older version".into()));
            }
            if matches!(states[i], Some(ReplicaState::Repaired(_))) {
                targets.push(endpoints[i].clone());
            }
        }
        let repaired = self.repair(&view, pool, key, &targets, (&info, &data), candidate).await;
        for (device, outcome) in repaired {
            if let Err(reason) = outcome {
                let i = endpoints
                    .iter()
                    .position(|e| e.device == device)
                    .expect("a target is an endpoint");
                states[i] = Some(ReplicaState::Failed(reason.to_string()));
            }
        }
        Ok(endpoints
            .iter()
            .zip(states)
            .map(|(e, s)| (e.device, s.unwrap_or(ReplicaState::Good)))
            .collect())
    }
}

/// The newest intact copy among the replicas' answers to a read, and what is known of each
/// replica so far: damaged or missing ones are to be repaired, unreachable ones failed.
fn newest_intact(
    results: &[Result<Answer, Failure>],
) -> (Option<(ObjectInfo, Bytes)>, Vec<Option<ReplicaState>>) {
    let mut best: Option<(ObjectInfo, Bytes)> = None;
    let mut states: Vec<Option<ReplicaState>> = vec![None; results.len()];
    for (i, result) in results.iter().enumerate() {
        match result {
            Ok(answer) => match &answer.info {
                Some(info) if answer.body.checksum() == info.checksum => {
                    if best.as_ref().is_none_or(|(b, _)| {
                        (info.version, info.checksum) > (b.version, b.checksum)
                    }) {
                        best = Some((info.clone(), answer.body.to_bytes()));
                    }
                }
                _ => states[i] = Some(ReplicaState::Repaired("damaged in transit".into())),
            },
            Err(
                Failure::Unreachable(reason)
                | Failure::NotRunning(reason)
                | Failure::Dropped(reason),
            ) => states[i] = Some(ReplicaState::Failed(format!("unreachable: {reason}"))),
            Err(failure) => states[i] = Some(ReplicaState::Repaired(failure.to_string())),
        }
    }
    (best, states)
}
