//! Snapshot clones seen from the client: they are placed by their head's seed, not by their
//! own key, so they are reached through their head's location ([`optio_proto::snap`]).

use std::time::Duration;

use futures_util::future::join_all;
use optio_proto::snap::parse_clone_key;
use optio_proto::{ErrorKind, ObjectVersion};

use crate::error::ClientError;
use crate::transport::{Failure, Op};

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

/// How long a device is given to answer the deletion of a snapshot clone before it counts as
/// not reached (the transport's own bound, [`crate::transport::REQUEST_TIMEOUT`], is a minute:
/// a trim deletes in order, and one request to a server that died under it held every later
/// deletion up that long).
pub(crate) const CLONE_DELETE_TIMEOUT: Duration = Duration::from_secs(10);
