//! Snapshot clones seen from the client: they are placed by their head's seed, not by their
//! own key, so they are reached through their head's location ([`optio_proto::snap`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::future::join_all;
use optio_proto::snap::parse_clone_key;
use optio_proto::{ErrorKind, ObjectVersion};

use crate::error::ClientError;
use crate::transport::{Endpoint, Failure, Op};

use super::locate::placement_seed;
use super::write::resend_unanswered;
use super::{Client, RETRIES_MAX};

impl Client {
    /// Removes the snapshot clone `clone` (a key [`optio_proto::snap::clone_key`] made) of
    /// version `version` from every replica of its head's placement that runs (each server
    /// removes it outright, leaving no tombstone: a copy that comes back is never read, and
    /// the next trim removes it). The head's candidate is located without a probe where the
    /// pool has one candidate or the client remembers the choice; a head that cannot be
    /// located (deleted, in a pool of several candidates) keeps its clones. Returns the
    /// replicas' devices it did not reach because their server was not running: their copy
    /// stays until a later trim removes it.
    pub async fn delete_clone(
        &self,
        pool_name: &str,
        clone: &str,
        version: ObjectVersion,
    ) -> Result<Vec<u32>, ClientError> {
        let Some((head, _)) = parse_clone_key(clone) else {
            return Err(ClientError::Config(format!("'{clone}' is not a snapshot clone's key")));
        };
        // A map that changes under it (a device marked down or up) relocates the head and
        // sends the deletions again, as writes do. A device not reached by an earlier attempt
        // stays not reached unless a later one reaches it: the new map (its server marked
        // down meanwhile) may no longer address it, and its copy stays there all the same.
        let mut attempts = 0;
        let mut not_reached: Vec<u32> = Vec::new();
        loop {
            let located = self.retry_located(pool_name, head, &mut attempts).await?;
            let (view, pool) = (&located.view, located.pool);
            let endpoints = self.endpoints(view, located.candidate())?;
            // Each device is given [`CLONE_DELETE_TIMEOUT`] to answer: one that does not (its
            // server died or restarted under the request) keeps its copy until a later run,
            // rather than holding up the deletions behind this one for a request timeout.
            let delete = |endpoint| {
                let op =
                    Op::Delete { key: clone, version: Some(version), purge: false, pg_seed: None };
                let call = self.call(self.object_call(view, endpoint, pool, op));
                async move {
                    tokio::time::timeout(CLONE_DELETE_TIMEOUT, call).await.unwrap_or_else(|_| {
                        Err(Failure::Unreachable(format!(
                            "no answer within {} s",
                            CLONE_DELETE_TIMEOUT.as_secs_f64()
                        )))
                    })
                }
            };
            let mut results = join_all(endpoints.iter().map(delete)).await;
            // A deletion that was not answered (its server not running, no answer within the
            // bound, or the connection broke under it: the server just died, or closed an idle
            // connection) is sent again on a new connection, as writes and deletes are: a
            // server that is gone then refuses it. At most one more bound for a silent device.
            resend_unanswered(&mut results, |i| delete(&endpoints[i])).await;
            let mut failures = Vec::new();
            for (endpoint, result) in endpoints.iter().zip(results) {
                match result {
                    Ok(_) => not_reached.retain(|d| *d != endpoint.device),
                    Err(failure) if failure.kind() == Some(ErrorKind::NotFound) => {
                        not_reached.retain(|d| *d != endpoint.device)
                    }
                    // Not running, no answer, or the connection dropped again: not reached, as
                    // a server that is down (the trim keeps its job until a run reaches every
                    // device). Purged clones leave no tombstone: sending again is harmless.
                    Err(failure) if failure.is_not_running() || failure.is_unreachable() => {
                        if !not_reached.contains(&endpoint.device) {
                            not_reached.push(endpoint.device);
                        }
                    }
                    Err(failure) => failures.push((endpoint.device, failure)),
                }
            }
            if failures.is_empty() {
                return Ok(not_reached);
            }
            let refs: Vec<_> = failures.iter().map(|(_, failure)| failure).collect();
            if attempts < RETRIES_MAX && self.epoch_retry(&refs).await? {
                continue;
            }
            let failures: Vec<String> = failures
                .iter()
                .map(|(device, failure)| format!("device {device}: {failure}"))
                .collect();
            return Err(ClientError::Unreadable {
                key: clone.to_string(),
                failures: failures.join("; "),
            });
        }
    }
}

/// A snapshot clone to remove ([`Client::delete_clones`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloneToTrim {
    /// Its key ([`optio_proto::snap::clone_key`]).
    pub key: String,
    /// The version its key names.
    pub version: ObjectVersion,
    /// The placement seed a listing gave for its copies, if it did: in a pool of several
    /// candidates, it tells which candidate holds them without asking.
    pub seed: Option<u32>,
}

impl Client {
    /// Removes the snapshot clones `clones` of pool `pool_name`, as [`Client::delete_clone`]
    /// removes each, with one request per device for up to
    /// [`optio_proto::snap::TRIM_KEYS_MAX`] of them (a trim, [`Op::Trim`]): a request per
    /// clone and replica costs the servers more than the removal itself. The candidate that
    /// holds a clone is the only one, the one its listed seed names, or the one the client
    /// remembers; a clone whose candidate none of these tells, or that a device's trim did not
    /// remove for any reason but its server not running or not answering (a map changed
    /// meanwhile, a server from before trims), is removed by [`Client::delete_clone`] after.
    /// Returns the devices not reached, as [`Client::delete_clone`] does.
    pub async fn delete_clones(
        &self,
        pool_name: &str,
        clones: &[CloneToTrim],
    ) -> Result<Vec<u32>, ClientError> {
        use optio_proto::snap::{TRIM_KEYS_MAX, encode_trim_body};
        let view = self.view();
        self.learn_settling(&view).await;
        let pool = view.pool(pool_name)?;
        // Each device's share, in the order given; and the clones sent one by one.
        let mut shares: BTreeMap<u32, (Endpoint, Vec<usize>)> = BTreeMap::new();
        let mut one_by_one: BTreeSet<usize> = BTreeSet::new();
        for (i, clone) in clones.iter().enumerate() {
            let Some((head, _)) = parse_clone_key(&clone.key) else {
                return Err(ClientError::Config(format!(
                    "'{}' is not a snapshot clone's key",
                    clone.key
                )));
            };
            let candidates = self.candidates_in(&view, pool, head);
            let holder = match candidates.as_slice() {
                [only] => Some(only),
                _ => clone
                    .seed
                    .and_then(|seed| candidates.iter().find(|c| placement_seed(c) == seed))
                    .or_else(|| {
                        let remembered = self.inner.cache.get(pool.0, head)?;
                        candidates.get(usize::from(remembered))
                    }),
            };
            let endpoints = holder.and_then(|holder| self.endpoints(&view, holder).ok());
            match endpoints {
                Some(endpoints) => {
                    for endpoint in endpoints {
                        shares
                            .entry(endpoint.device)
                            .or_insert_with(|| (endpoint, Vec::new()))
                            .1
                            .push(i);
                    }
                }
                None => {
                    one_by_one.insert(i);
                }
            }
        }
        let batches: Vec<(&Endpoint, &[usize])> = shares
            .values()
            .flat_map(|(endpoint, share)| share.chunks(TRIM_KEYS_MAX).map(move |c| (endpoint, c)))
            .collect();
        let trim = |b: usize| {
            let (endpoint, share) = batches[b];
            let body = encode_trim_body(share.iter().map(|i| clones[*i].key.as_str()));
            let op = Op::Trim { body: body.into() };
            let call = self.call(self.object_call(&view, endpoint, pool, op));
            async move {
                tokio::time::timeout(CLONE_DELETE_TIMEOUT, call).await.unwrap_or_else(|_| {
                    Err(Failure::Unreachable(format!(
                        "no answer within {} s",
                        CLONE_DELETE_TIMEOUT.as_secs_f64()
                    )))
                })
            }
        };
        let mut results = join_all((0..batches.len()).map(trim)).await;
        resend_unanswered(&mut results, trim).await;
        let mut not_reached: BTreeSet<u32> = BTreeSet::new();
        for ((endpoint, share), result) in batches.iter().zip(results) {
            match result {
                Ok(_) => {}
                Err(failure) if failure.is_not_running() || failure.is_unreachable() => {
                    not_reached.insert(endpoint.device);
                }
                Err(failure) => {
                    tracing::debug!(device = endpoint.device, %failure, clones = share.len(), "a trim was refused: its clones are deleted one by one");
                    one_by_one.extend(share.iter().copied());
                }
            }
        }
        for i in one_by_one {
            let clone = &clones[i];
            match self.delete_clone(pool_name, &clone.key, clone.version).await {
                Ok(missed) => not_reached.extend(missed),
                Err(ClientError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(not_reached.into_iter().collect())
    }
}

/// How long a device is given to answer the deletion of a snapshot clone before it counts as
/// not reached (the transport's own bound, [`crate::transport::REQUEST_TIMEOUT`], is a minute:
/// a trim deletes in order, and one request to a server that died under it held every later
/// deletion up that long).
pub(crate) const CLONE_DELETE_TIMEOUT: Duration = Duration::from_secs(10);
