//! Snapshot clones seen from the client: they are placed by their head's seed, not by their
//! own key, so they are reached through their head's location ([`optio_proto::snap`]).

use futures_util::future::join_all;
use optio_proto::snap::parse_clone_key;
use optio_proto::{ErrorKind, ObjectVersion};

use crate::error::ClientError;
use crate::transport::Op;

use super::Client;

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
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, head);
        let not_found =
            || ClientError::NotFound { pool: pool_name.to_string(), key: head.to_string() };
        let chosen = self.locate(&view, pool, head, &candidates).await?.ok_or_else(not_found)?;
        let endpoints = self.endpoints(&view, &candidates[usize::from(chosen)])?;
        let pg_seed = None;
        let calls = endpoints.iter().map(|endpoint| {
            let op = Op::Delete { key: clone, version: Some(version), purge: false, pg_seed };
            self.call(self.object_call(&view, endpoint, pool, op))
        });
        let (mut failures, mut not_reached) = (Vec::new(), Vec::new());
        for (endpoint, result) in endpoints.iter().zip(join_all(calls).await) {
            match result {
                Ok(_) => {}
                Err(failure) if failure.kind() == Some(ErrorKind::NotFound) => {}
                Err(failure) if failure.is_not_running() => not_reached.push(endpoint.device),
                Err(failure) => failures.push(format!("device {}: {failure}", endpoint.device)),
            }
        }
        if failures.is_empty() {
            return Ok(not_reached);
        }
        Err(ClientError::Unreadable { key: clone.to_string(), failures: failures.join("; ") })
    }
}
