//! Reading, locating and deleting while data moves.
//!
//! After a map change the servers move copies to where the new map places them (rebalancing)
//! — until they are done, a copy may still be only where the previous map placed it, and a
//! replica the new map names may not have the newest version yet. Likewise an `elastic` pool
//! whose map lists more than one membership version may hold data written in an older version
//! where that version put it (offloaded replicas not yet re-integrated). In those windows the
//! client reads *carefully*: it asks every device that may hold a copy — the candidate's
//! replica set under the current map, under the previous map, and for elastic pools as of
//! every membership version — which version it holds (one parallel round of HEADs), and reads
//! the newest; a tombstone newer than any copy means deleted. Deletes leave tombstones on all
//! of those devices. Outside those windows nothing changes: one read from the primary.
//!
//! The client knows the window is over when every server holding an up device answers
//! `/v1/status` with its migration done for the client's epoch (polled every
//! [`STATUS_POLL_INTERVAL`] while it is not). A client that starts during the window never
//! saw the map before: it asks the servers once, before its first read, and while they are
//! not done it asks every up device (issue 13, defect 1: "no object" for acknowledged data
//! during rebalancing).

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use optio_placement::{DeviceId, PoolId, ReplicaSet};
use optio_proto::ObjectVersion;

use crate::candidates::Candidate;
use crate::error::ClientError;
use crate::transport::{Answer, Endpoint, Failure, Op};

use super::locate::placement_seed;
use super::{Client, Inner, View};

/// How often servers are asked whether they finished rebalancing, while some have not.
pub const STATUS_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// What one device holds of a key, ordered as servers order versions: a newer version wins,
/// a tombstone wins a tie with a copy of its version, then the larger checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Held {
    pub(super) version: ObjectVersion,
    pub(super) deleted: bool,
    pub(super) checksum: u32,
}

impl Held {
    /// What a probe's answer says the device holds (`None`: nothing).
    pub(super) fn of(answer: &Answer) -> Option<Held> {
        match (&answer.info, answer.deleted) {
            (Some(info), _) if answer.status == 200 => {
                Some(Held { version: info.version, deleted: false, checksum: info.checksum })
            }
            (_, Some(version)) => Some(Held { version, deleted: true, checksum: 0 }),
            _ => None,
        }
    }
}

/// While data may still be moving (a newer map replaced the one before it), polls the
/// servers' migration progress until every one reports done for the epoch. Ends with the
/// client. (The map itself is followed by [`optio_cluster::follow::MapFollower`].)
pub(super) async fn watch_settling(inner: Weak<Inner>) {
    let mut status_tick = tokio::time::interval(STATUS_POLL_INTERVAL);
    loop {
        status_tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let client = Client { inner };
        let view = client.view();
        if client.unsettled(&view) {
            client.poll_settled(&view).await;
        }
    }
}

impl Client {
    /// Whether some server may still be moving data to where the current map places it.
    pub(super) fn unsettled(&self, view: &View) -> bool {
        (!view.previous.is_empty() || view.previous_unknown)
            && view.settled.load(Ordering::Acquire) < view.epoch()
    }

    /// Whether the client must read as if a copy could be on any device: it does not know
    /// the map before its first one, and the servers are still moving data for it.
    pub(super) fn anywhere(&self, view: &View) -> bool {
        view.previous_unknown && self.unsettled(view)
    }

    /// For a client whose first map this is: asks the servers once whether they finished
    /// moving data for it (a client started during rebalancing must read carefully, though it
    /// never saw the map before; one that starts in a settled cluster reads the fast way).
    pub(super) async fn learn_settling(&self, view: &View) {
        let epoch = view.epoch();
        if view.previous_unknown && self.inner.settled_asked.load(Ordering::Acquire) < epoch {
            self.poll_settled(view).await;
        }
    }

    /// Asks every server with an up device whether it finished rebalancing for the epoch.
    pub(super) async fn poll_settled(&self, view: &View) {
        let mut addrs: Vec<&str> =
            view.map.devices().iter().filter(|d| d.up).filter_map(|d| d.addr.as_deref()).collect();
        addrs.sort_unstable();
        addrs.dedup();
        let epoch = view.epoch();
        let answers = join_all(addrs.iter().map(|a| self.inner.transport.server_status(a))).await;
        let settled = answers
            .iter()
            .all(|answer| answer.as_ref().is_ok_and(|status| status.migration.settled_at(epoch)));
        self.inner.settled_asked.fetch_max(epoch, Ordering::AcqRel);
        if settled {
            view.settled.fetch_max(epoch, Ordering::AcqRel);
            tracing::info!(epoch, "every server finished rebalancing");
        }
    }

    /// Records a write or delete of `key` in the dirty table before it is sent, when `pool`
    /// is elastic and its membership version is not at full power (once per version and
    /// operation: `noted` remembers the version recorded).
    pub(super) async fn note_dirty(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        noted: &mut Option<u64>,
    ) -> Result<(), ClientError> {
        let elastic = view.placement.pool(pool).is_some_and(|p| p.is_elastic());
        let Some(membership) = view.map.membership().filter(|_| elastic) else { return Ok(()) };
        let current = membership.current();
        if membership.is_full_power(current) || *noted == Some(current.version) {
            return Ok(());
        }
        let failed = |reason: String| ClientError::Dirty {
            key: key.to_string(),
            pool: view.map.pool(pool).map_or_else(|| pool.0.to_string(), |p| p.name.clone()),
            version: current.version,
            reason,
        };
        let Some(table) = &self.inner.config.dirty else {
            return Err(failed(
                "this client has no dirty table (ClientConfig::dirty; the CLI uses the cluster's)"
                    .into(),
            ));
        };
        let entry = optio_cluster::dirty::DirtyEntry {
            pool: pool.0,
            key: key.to_string(),
            version: current.version,
        };
        table.push(&[entry]).await.map_err(|e| failed(e.to_string()))?;
        *noted = Some(current.version);
        Ok(())
    }

    /// Whether reads of `pool` must compare versions across placements (see the module).
    pub(super) fn in_transition(&self, view: &View, pool: PoolId) -> bool {
        if self.unsettled(view) {
            return true;
        }
        view.placement.pool(pool).is_some_and(|p| p.membership_versions().nth(1).is_some())
    }

    /// Every device that may hold a copy of `candidate`: its replica set now, under the
    /// maps since the last settled one while servers are still moving data, and for elastic pools as of every
    /// membership version and at full power. Current members first.
    pub(super) fn transition_devices(
        &self,
        view: &View,
        pool: PoolId,
        candidate: &Candidate,
    ) -> Vec<DeviceId> {
        let mut devices = candidate.devices.clone();
        // A device an earlier map named but the current one no longer has (removed, which
        // the CLI allows only once it holds no last copy) or gives no address cannot be
        // asked.
        let reachable =
            |device: DeviceId| view.map.device(device).is_some_and(|d| d.addr.is_some());
        let mut add = |set: &ReplicaSet| {
            for device in set.devices() {
                if !devices.contains(&device) && reachable(device) {
                    devices.push(device);
                }
            }
        };
        if self.anywhere(view) {
            // Where the map before placed it is unknown: every device that is up.
            for device in view.map.devices().iter().filter(|d| d.up && d.addr.is_some()) {
                if !devices.contains(&device.id) {
                    devices.push(device.id);
                }
            }
            return devices;
        }
        let seed = placement_seed(candidate);
        let mut set = ReplicaSet::new();
        if self.unsettled(view) {
            for previous in view.unsettled_previous() {
                if let Some(old_pool) = previous.placement.pool(pool) {
                    let mut scratch = previous.placement.scratch();
                    old_pool.place(old_pool.key_of_seed(seed), &mut scratch, &mut set);
                    add(&set);
                }
            }
        }
        if let Some(placement) = view.placement.pool(pool)
            && placement.is_elastic()
        {
            let key = placement.key_of_seed(seed);
            let mut scratch = view.placement.scratch();
            placement.place_full_power(key, &mut scratch, &mut set);
            add(&set);
            for version in placement.membership_versions() {
                placement.place_as_of(version, key, &mut set);
                add(&set);
            }
        }
        devices
    }

    /// Probes `key` on `devices` in parallel: their endpoints and answers.
    pub(super) async fn probe_devices(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        devices: &[DeviceId],
    ) -> Result<(Vec<Endpoint>, Vec<Result<Answer, Failure>>), ClientError> {
        let endpoints: Vec<Endpoint> =
            devices.iter().map(|d| view.endpoint(*d)).collect::<Result<_, _>>()?;
        let heads = join_all(endpoints.iter().map(|e| {
            self.call(self.object_call(view, e, pool, Op::Probe { key, want_choice: false }))
        }))
        .await;
        Ok((endpoints, heads))
    }
}
