//! Re-integration for `elastic` pools (elastic consistent hashing, seed 004, Algorithm 2).
//!
//! While the cluster is not at full power, writes to elastic pools skip the inactive servers
//! (write-availability offloading) and each is recorded in the dirty table first. When a
//! membership version with more active servers appears, re-integration brings the offloaded
//! copies to where the current version places them:
//!
//! * **Selective** (the paper's): walk the dirty table oldest first (restarting from the oldest
//!   whenever the version changes); for an entry written in a version with fewer active
//!   servers than now, find the object's newest version among the devices of its placement as
//!   of that version, as of now and at full power, copy it to the devices that the current
//!   version names and that lack it, and drop copies no placement names any more. At full
//!   power each entry is removed once handled; when the table is empty the map's older
//!   membership versions are pruned (clients then read from one placement again).
//! * **Full** (the baseline): when servers come back, copy to each of them *every* object the
//!   current version places on it, as consistent hashing does for a server it believes empty,
//!   then drop copies no placement names.
//!
//! Both are rate-limited and report what they did ([`ReintegrationStatus`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use optio_cluster::ClusterError;
use optio_cluster::dirty::{DirtyEntry, DirtyError, DirtyTable};
use optio_net::Failure;
use optio_net::throttle::Throttle;
use optio_placement::{DeviceId, MapChange, MapError, PoolId, ReplicaSet};
use optio_proto::{ErrorKind, ObjectInfo};
use serde::{Deserialize, Serialize};

use crate::transport::{Endpoint, Op};

use super::transition::Held;
use super::{Client, View};
use crate::ClientError;

/// Dirty entries read at once.
pub(super) const BATCH_ENTRIES: usize = 256;

/// Pause when there is nothing to do, or after a failure.
pub(super) const IDLE_WAIT: Duration = Duration::from_millis(200);

pub(super) const FAILURE_WAIT: Duration = Duration::from_secs(1);

/// Most offloaded replicas one cycle of selective re-integration remembers having accounted
/// for, so that [`ReintegrationStatus::offloaded_copied`] and
/// [`ReintegrationStatus::offloaded_current`] count each once (beyond, a replica met again is
/// counted again).
pub const BROUGHT_BACK_TRACKED_MAX: usize = 1 << 18;

/// Which re-integration runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReintegrationMode {
    /// Only the objects in the dirty table (Algorithm 2).
    Selective,
    /// Everything the current version places on the servers that came back (the baseline).
    Full,
}

/// How re-integration runs.
#[derive(Clone, Debug)]
pub struct ReintegrationConfig {
    /// Selective or full.
    pub mode: ReintegrationMode,
    /// Bytes per second copied at most (`None`: no limit).
    pub rate_bytes_per_sec: Option<u64>,
}

/// What re-integration did so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReintegrationStatus {
    /// The mode (`None` before it starts).
    pub mode: Option<ReintegrationMode>,
    /// The membership version in force.
    pub version: u64,
    /// Whether that version is full power.
    pub full_power: bool,
    /// Entries in the dirty table when last looked.
    pub dirty_entries: u64,
    /// Dirty entries handled.
    pub entries_handled: u64,
    /// Replicas copied to the devices that lacked them (stored there: a copy the device
    /// refused because a newer version reached it first is not counted).
    pub replicas_copied: u64,
    /// The offloaded replicas brought back: distinct (object, device) pairs, of the version
    /// of a dirty entry, copied to a device that version skipped. An object with several
    /// dirty entries (written several times while servers were away) counts once per device,
    /// even when a write racing re-integration made a second copy to it necessary; those
    /// second copies, and copies that refreshed a replica such a write had reached only in
    /// part, count in `replicas_copied` only.
    #[serde(default)]
    pub offloaded_copied: u64,
    /// The offloaded replicas found current already: a write at the new version (made after
    /// the servers came back, before re-integration reached the object) had written them.
    /// Each offloaded replica of a live object is counted once, in this or in
    /// `offloaded_copied` (deleted objects' replicas in neither).
    #[serde(default)]
    pub offloaded_current: u64,
    /// Bytes sent to copy replicas.
    pub bytes_copied: u64,
    /// Copies dropped (no placement names their device any more).
    pub copies_dropped: u64,
    /// Times the walk restarted from the oldest entry (a new version).
    pub restarts: u64,
    /// Whether there is nothing left to do.
    pub idle: bool,
    /// The last failure.
    pub last_error: Option<String>,
}

/// Why a step of re-integration failed (it pauses, then tries again).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReintegrationError {
    /// The dirty table could not be read or popped.
    #[error(transparent)]
    Dirty(#[from] DirtyError),
    /// The client could not reach the devices or reload the map.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A device that may hold a copy did not answer the survey.
    #[error("device {device} at {addr} did not answer for '{key}': {failure}")]
    NoAnswer {
        /// The device.
        device: u32,
        /// Its address.
        addr: String,
        /// The object.
        key: String,
        /// What the transport said.
        #[source]
        failure: Failure,
    },
    /// No device holding the newest version could give it.
    #[error("cannot read '{key}' to re-integrate it: {}", join(failures))]
    Unreadable {
        /// The object.
        key: String,
        /// Why each device that holds it failed.
        failures: Vec<ReadFailure>,
    },
    /// A copy to a device failed.
    #[error("copying '{key}' to device {device}: {failure}")]
    Copy {
        /// The object.
        key: String,
        /// The device.
        device: u32,
        /// What the transport said.
        #[source]
        failure: Failure,
    },
    /// A tombstone could not be sent to a device.
    #[error("deleting '{key}' on device {device}: {failure}")]
    Delete {
        /// The object.
        key: String,
        /// The device.
        device: u32,
        /// What the transport said.
        #[source]
        failure: Failure,
    },
    /// A copy no placement names could not be dropped.
    #[error("dropping '{key}' from device {device}: {failure}")]
    Drop {
        /// The object.
        key: String,
        /// The device.
        device: u32,
        /// What the transport said.
        #[source]
        failure: Failure,
    },
    /// A device's objects could not be listed (full mode).
    #[error("listing device {device}: {failure}")]
    List {
        /// The device.
        device: u32,
        /// What the transport said.
        #[source]
        failure: Failure,
    },
    /// The map could not be read to prune its older membership versions (the message
    /// carries the causes).
    #[error("{}", .0.report())]
    LoadMap(ClusterError),
    /// Pruning the older membership versions does not apply to the map.
    #[error(transparent)]
    Prune(#[from] MapError),
    /// The pruned map could not be stored.
    #[error("{0}")]
    StoreMap(#[source] ClusterError),
}

/// Why one device holding the newest version of an object could not give it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadFailure {
    /// It answered with another version, or a body that fails its checksum.
    #[error("device {device}: changed or damaged")]
    Changed {
        /// The device.
        device: u32,
    },
    /// It did not answer.
    #[error("device {device}: {failure}")]
    Failed {
        /// The device.
        device: u32,
        /// What the transport said.
        #[source]
        failure: Failure,
    },
}

fn join(failures: &[ReadFailure]) -> String {
    failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Where one object's copies belong under the current membership version.
struct Spread {
    /// The devices that must hold the newest version (the current placement).
    to: Vec<DeviceId>,
    /// The devices whose copies stay (`to` and the full-power placement).
    keep: Vec<DeviceId>,
    /// The devices that may hold a copy (sorted, no duplicates).
    look: Vec<DeviceId>,
    /// The object's placement key (kept with a tombstone sent to a device without a copy).
    seed: u32,
}

/// Where the walk stands.
#[derive(Default)]
pub(super) struct Walk {
    pub(super) version: Option<u64>,
    pub(super) cursor: u64,
    /// Full mode: the servers active when last looked, and whether the last copy round ended.
    pub(super) active: Option<Vec<DeviceId>>,
    pub(super) full_done: bool,
    /// Selective mode: the offloaded replicas accounted for in this cycle (copied, or found
    /// current) — (the dirty entry's version, pool, key, device) — at most
    /// [`BROUGHT_BACK_TRACKED_MAX`]; emptied when the versions are pruned.
    pub(super) accounted: HashSet<(u64, u32, String, u32)>,
}

/// The offloaded replicas of one dirty entry: the devices its version skipped.
struct Offloaded<'a> {
    /// The entry's membership version.
    version: u64,
    /// The devices of the current placement that version did not write.
    skipped: &'a [DeviceId],
}

impl Client {
    /// Runs re-integration until `stop` completes, reporting into `status`.
    pub async fn reintegrate(
        &self,
        table: &DirtyTable,
        config: &ReintegrationConfig,
        status: &Mutex<ReintegrationStatus>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        Reintegration::new(self, table, config, status).run(stop).await;
    }
}

/// One run of re-integration: the client it copies with, the dirty table it walks, where the
/// walk stands, its pace and what it reports.
pub struct Reintegration<'a> {
    client: &'a Client,
    table: &'a DirtyTable,
    mode: ReintegrationMode,
    status: &'a Mutex<ReintegrationStatus>,
    walk: Walk,
    /// Paces the copies (`--rate`).
    pacer: Throttle,
}

impl<'a> Reintegration<'a> {
    /// A run of `config`'s mode over `table`, with `client`, reporting into `status`.
    pub fn new(
        client: &'a Client,
        table: &'a DirtyTable,
        config: &ReintegrationConfig,
        status: &'a Mutex<ReintegrationStatus>,
    ) -> Reintegration<'a> {
        Reintegration {
            client,
            table,
            mode: config.mode,
            status,
            walk: Walk::default(),
            pacer: Throttle::new(config.rate_bytes_per_sec),
        }
    }

    /// Runs until `stop` completes.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) {
        self.status.lock().expect("status lock").mode = Some(self.mode);
        let status = self.status;
        let work = async {
            loop {
                let result = match self.mode {
                    ReintegrationMode::Selective => self.selective_step().await,
                    ReintegrationMode::Full => self.full_step().await,
                };
                match result {
                    Ok(true) => status.lock().expect("status lock").last_error = None,
                    Ok(false) => tokio::time::sleep(IDLE_WAIT).await,
                    Err(error) => {
                        tracing::warn!(%error, "re-integration paused");
                        status.lock().expect("status lock").last_error = Some(error.to_string());
                        tokio::time::sleep(FAILURE_WAIT).await;
                    }
                }
            }
        };
        tokio::select! {
            _ = work => {}
            _ = stop => {}
        }
    }

    /// One batch of Algorithm 2; `Ok(false)` when there was nothing to do.
    async fn selective_step(&mut self) -> Result<bool, ReintegrationError> {
        let view = self.client.view();
        let Some(membership) = view.map.membership() else { return Ok(false) };
        let current = membership.current();
        let full = membership.is_full_power(current);
        if self.walk.version != Some(current.version) {
            // A new version: start again from the oldest entry (line 2 of Algorithm 2).
            self.walk.version = Some(current.version);
            self.walk.cursor = 0;
            self.status.lock().expect("status lock").restarts += 1;
        }
        let entries = self.table.range(self.walk.cursor, BATCH_ENTRIES).await?;
        let left = self.table.len().await?;
        {
            let mut s = self.status.lock().expect("status lock");
            s.version = current.version;
            s.full_power = full;
            s.dirty_entries = left;
            s.idle = entries.is_empty();
        }
        if entries.is_empty() {
            if full && left == 0 && membership.versions.len() > 1 {
                self.prune_versions().await?;
                self.walk.accounted.clear();
                return Ok(true);
            }
            return Ok(false);
        }
        let now_active = membership.active_count(current);
        let mut handled = 0u64;
        for entry in &entries {
            if self.client.view().epoch() != view.epoch() {
                break;
            }
            let then_active =
                membership.version(entry.version).map_or(0, |v| membership.active_count(v));
            if now_active > then_active {
                self.reintegrate_entry(&view, entry).await?;
            }
            handled += 1;
            self.status.lock().expect("status lock").entries_handled += 1;
        }
        if full {
            // Remove only at full power (line 11); the walk stays at the head.
            self.table.pop_front(handled).await?;
        } else {
            self.walk.cursor += handled;
        }
        Ok(true)
    }

    /// Brings one dirty object to where the current version places it.
    async fn reintegrate_entry(
        &mut self,
        view: &View,
        entry: &DirtyEntry,
    ) -> Result<(), ReintegrationError> {
        let pool = PoolId(entry.pool);
        let Some(placement) = view.placement.pool(pool) else { return Ok(()) };
        if !placement.is_elastic() {
            return Ok(());
        }
        let (_, key) = placement.object_key(&entry.key);
        let mut scratch = view.placement.scratch();
        let mut set = ReplicaSet::new();
        placement.place(key, &mut scratch, &mut set);
        let to: Vec<DeviceId> = set.devices().collect();
        placement.place_full_power(key, &mut scratch, &mut set);
        let keep: Vec<DeviceId> = to.iter().copied().chain(set.devices()).collect();
        let mut look: Vec<DeviceId> = keep.clone();
        // The devices the entry's version skipped: its offloaded replicas belong there.
        let mut skipped: Vec<DeviceId> = to.clone();
        if placement.place_as_of(entry.version, key, &mut set) {
            look.extend(set.devices());
            skipped.retain(|d| !set.contains(*d));
        }
        look.sort_unstable();
        look.dedup();
        let spread = Spread { to, keep, look, seed: key };
        let offloaded = Offloaded { version: entry.version, skipped: &skipped };
        self.converge(view, pool, &entry.key, &spread, Some(offloaded)).await?;
        self.converge_clones(view, pool, &entry.key, &spread).await
    }

    /// A volume data object's snapshot clones were made where its writes went, offloaded
    /// devices included (the dirty table names the head only): they go where the head goes.
    async fn converge_clones(
        &mut self,
        view: &View,
        pool: PoolId,
        key: &str,
        spread: &Spread,
    ) -> Result<(), ReintegrationError> {
        if !key.starts_with(optio_proto::snap::CLONED_PREFIX)
            || optio_proto::snap::parse_clone_key(key).is_some()
        {
            return Ok(());
        }
        let (endpoints, _) = self.survey(view, pool, key, &spread.look).await?;
        let prefix = optio_proto::snap::clone_prefix(key);
        let mut clones = std::collections::BTreeSet::new();
        for endpoint in &endpoints {
            match self.client.list_device(view, pool, endpoint, &prefix).await {
                Ok(infos) => clones.extend(infos.into_iter().map(|info| info.key)),
                Err(failure) => {
                    return Err(ReintegrationError::NoAnswer {
                        device: endpoint.device,
                        addr: endpoint.addr.clone(),
                        key: prefix,
                        failure,
                    });
                }
            }
        }
        for clone in &clones {
            self.converge(view, pool, clone, spread, None).await?;
        }
        Ok(())
    }

    /// Makes every device of `to` hold the newest version found on `look`, and drops the
    /// copies on devices of `look` outside `keep`; the first copy of the object to each of
    /// `offloaded`'s devices is counted as an offloaded replica brought back.
    async fn converge(
        &mut self,
        view: &View,
        pool: PoolId,
        key: &str,
        spread: &Spread,
        offloaded: Option<Offloaded<'_>>,
    ) -> Result<(), ReintegrationError> {
        let Spread { to, keep, look, seed } = spread;
        let (endpoints, held) = self.survey(view, pool, key, look).await?;
        let Some(newest) = held.iter().flatten().max().copied() else { return Ok(()) };
        let mut data: Option<(ObjectInfo, Bytes)> = None;
        // Whether `device` holds an offloaded replica of `key` met for the first time (it counts).
        let first_offloaded = |walk: &mut Walk, device: DeviceId| {
            !newest.deleted
                && offloaded.as_ref().is_some_and(|o| {
                    o.skipped.contains(&device) && walk.account(o.version, pool, key, device)
                })
        };
        for (i, endpoint) in endpoints.iter().enumerate() {
            let device = DeviceId(endpoint.device);
            if !to.contains(&device) {
                continue;
            }
            if held[i].is_some_and(|h| h >= newest) {
                if first_offloaded(&mut self.walk, device) {
                    self.status.lock().expect("status lock").offloaded_current += 1;
                }
                continue;
            }
            if newest.deleted {
                let delete = Op::Delete {
                    key,
                    version: Some(newest.version),
                    purge: false,
                    pg_seed: Some(*seed),
                };
                match self.client.call(self.client.object_call(view, endpoint, pool, delete)).await
                {
                    Ok(_) => {}
                    Err(f)
                        if matches!(
                            f.kind(),
                            Some(ErrorKind::NotFound | ErrorKind::VersionConflict)
                        ) => {}
                    Err(failure) => {
                        return Err(ReintegrationError::Delete {
                            key: key.to_string(),
                            device: endpoint.device,
                            failure,
                        });
                    }
                }
                continue;
            }
            if data.is_none() {
                data = Some(self.read_from(view, pool, key, &endpoints, &held, newest).await?);
            }
            let (info, body) = data.as_ref().expect("read above");
            let stored = self.copy_to(view, pool, key, endpoint, info, body).await?;
            self.pacer.acquire(body.len() as u64).await;
            let first = first_offloaded(&mut self.walk, device);
            let mut s = self.status.lock().expect("status lock");
            s.replicas_copied += u64::from(stored);
            s.bytes_copied += body.len() as u64;
            // A copy refused because a newer version got there first: current already.
            s.offloaded_copied += u64::from(first && stored);
            s.offloaded_current += u64::from(first && !stored);
        }
        for (i, endpoint) in endpoints.iter().enumerate() {
            if keep.contains(&DeviceId(endpoint.device)) || held[i].is_none() {
                continue;
            }
            let purge =
                Op::Delete { key, version: Some(newest.version), purge: true, pg_seed: None };
            match self.client.call(self.client.object_call(view, endpoint, pool, purge)).await {
                Ok(_) => self.status.lock().expect("status lock").copies_dropped += 1,
                Err(f)
                    if matches!(
                        f.kind(),
                        Some(ErrorKind::NotFound | ErrorKind::VersionConflict)
                    ) => {}
                Err(failure) => {
                    return Err(ReintegrationError::Drop {
                        key: key.to_string(),
                        device: endpoint.device,
                        failure,
                    });
                }
            }
        }
        Ok(())
    }

    /// What each device of `look` holds of `key`; a device that does not answer fails the
    /// survey (re-integration comes back to it), after taking a newer map if it said so.
    async fn survey(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        look: &[DeviceId],
    ) -> Result<(Vec<Endpoint>, Vec<Option<Held>>), ReintegrationError> {
        let (endpoints, heads) = self.client.probe_devices(view, pool, key, look).await?;
        let mut held = Vec::with_capacity(heads.len());
        for (endpoint, head) in endpoints.iter().zip(&heads) {
            match head {
                Ok(answer) => held.push(Held::of(answer)),
                Err(failure) => {
                    let _ = self.client.epoch_retry(&[failure]).await;
                    return Err(ReintegrationError::NoAnswer {
                        device: endpoint.device,
                        addr: endpoint.addr.clone(),
                        key: key.to_string(),
                        failure: failure.clone(),
                    });
                }
            }
        }
        Ok((endpoints, held))
    }

    /// Reads the newest version of `key` from a device that holds it.
    async fn read_from(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        endpoints: &[Endpoint],
        held: &[Option<Held>],
        newest: Held,
    ) -> Result<(ObjectInfo, Bytes), ReintegrationError> {
        let mut failures = Vec::new();
        for (endpoint, h) in endpoints.iter().zip(held) {
            if *h != Some(newest) {
                continue;
            }
            match self
                .client
                .call(self.client.object_call(view, endpoint, pool, Op::Get { key, range: None }))
                .await
            {
                Ok(answer) => {
                    if let Some(info) = answer.info
                        && answer.body.checksum() == info.checksum
                        && info.version == newest.version
                    {
                        return Ok((info, answer.body.to_bytes()));
                    }
                    failures.push(ReadFailure::Changed { device: endpoint.device });
                }
                Err(failure) => {
                    failures.push(ReadFailure::Failed { device: endpoint.device, failure })
                }
            }
        }
        Err(ReintegrationError::Unreadable { key: key.to_string(), failures })
    }

    /// Copies the version `info` of `key` to `endpoint`; whether it stored it (`false`: the
    /// device holds a newer version, which a write racing re-integration brought).
    async fn copy_to(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        endpoint: &Endpoint,
        info: &ObjectInfo,
        body: &Bytes,
    ) -> Result<bool, ReintegrationError> {
        let put = Op::Put {
            key,
            data: body.clone(),
            version: info.version,
            checksum: info.checksum,
            pg_seed: info.pg_seed,
        };
        match self.client.call(self.client.object_call(view, endpoint, pool, put)).await {
            Ok(_) => Ok(true),
            Err(f) if f.kind() == Some(ErrorKind::VersionConflict) => Ok(false),
            Err(failure) => Err(ReintegrationError::Copy {
                key: key.to_string(),
                device: endpoint.device,
                failure,
            }),
        }
    }

    /// Keeps only the current membership version (a compare-and-swap on the map).
    async fn prune_versions(&self) -> Result<(), ReintegrationError> {
        let old = self.client.inner.source.load().await.map_err(ReintegrationError::LoadMap)?;
        let new = old.apply(&MapChange::PruneVersions, old.epoch())?;
        self.client
            .inner
            .source
            .compare_and_swap(old.epoch(), &new)
            .await
            .map_err(ReintegrationError::StoreMap)?;
        tracing::info!(
            epoch = new.epoch().0,
            "re-integration done: older membership versions pruned"
        );
        self.client.refresh().await?;
        Ok(())
    }

    /// The full baseline: when servers came back, copy to each every object the current
    /// version places on it; then drop copies no placement names.
    async fn full_step(&mut self) -> Result<bool, ReintegrationError> {
        let view = self.client.view();
        let Some(membership) = view.map.membership() else { return Ok(false) };
        let current = membership.current();
        let full = membership.is_full_power(current);
        let active = membership.active_devices(current);
        let dirty_entries = self.table.len().await?;
        {
            let mut s = self.status.lock().expect("status lock");
            s.version = current.version;
            s.full_power = full;
            s.dirty_entries = dirty_entries;
        }
        if self.walk.version == Some(current.version) {
            // This version is handled; at full power the dirty table has nothing left to say.
            if full && self.walk.full_done {
                let mut popped = false;
                while self.table.pop_front(optio_cluster::dirty::RANGE_ENTRIES_MAX as u64).await?
                    > 0
                {
                    popped = true;
                }
                if membership.versions.len() > 1 {
                    self.prune_versions().await?;
                    return Ok(true);
                }
                return Ok(popped);
            }
            self.status.lock().expect("status lock").idle = true;
            return Ok(false);
        }
        let returned: Vec<DeviceId> = match &self.walk.active {
            // The first look: nothing is known to have come back.
            None => Vec::new(),
            Some(previous) => active.iter().copied().filter(|d| !previous.contains(d)).collect(),
        };
        if returned.is_empty() {
            self.walk.version = Some(current.version);
            self.walk.active = Some(active);
            self.walk.full_done = full;
            return Ok(false);
        }
        // The walk moves to this version only once the round succeeded: a failure (a server
        // not answering) makes the next step run the whole round again.
        self.status.lock().expect("status lock").idle = false;
        self.full_round(&view, &active, &returned).await?;
        self.walk.version = Some(current.version);
        self.walk.active = Some(active);
        self.walk.full_done = true;
        Ok(true)
    }

    /// One round of the full mode: every object stored in elastic pools (newest version per
    /// key, listed from every `active` device) brought to where the current version places
    /// it, copied to the `returned` servers whatever they hold.
    async fn full_round(
        &mut self,
        view: &View,
        active: &[DeviceId],
        returned: &[DeviceId],
    ) -> Result<(), ReintegrationError> {
        for pool in view
            .map
            .pools()
            .iter()
            .filter(|p| view.placement.pool(p.id).is_some_and(|pp| pp.is_elastic()))
        {
            let mut keys: BTreeMap<String, ()> = BTreeMap::new();
            for device in active {
                let endpoint = view.endpoint(*device)?;
                let listed = self.client.list_device(view, pool.id, &endpoint, "").await.map_err(
                    |failure| ReintegrationError::List { device: endpoint.device, failure },
                )?;
                for info in listed {
                    keys.insert(info.key, ());
                }
            }
            let placement = view.placement.pool(pool.id).expect("listed above");
            for key in keys.keys() {
                let (_, engine_key) = placement.object_key(key);
                let mut scratch = view.placement.scratch();
                let mut set = ReplicaSet::new();
                placement.place(engine_key, &mut scratch, &mut set);
                let to: Vec<DeviceId> = set.devices().collect();
                placement.place_full_power(engine_key, &mut scratch, &mut set);
                let keep: Vec<DeviceId> = to.iter().copied().chain(set.devices()).collect();
                let mut look = keep.clone();
                look.extend(active.iter().copied());
                look.sort_unstable();
                look.dedup();
                // As consistent hashing does: the returning servers are taken to be empty.
                let forced: Vec<DeviceId> =
                    to.iter().copied().filter(|d| returned.contains(d)).collect();
                let spread = Spread { to, keep, look, seed: engine_key };
                self.converge_forced(view, pool.id, key, &spread, &forced).await?;
            }
        }
        Ok(())
    }

    /// [`converge`](Self::converge), copying to `forced` devices whatever they hold.
    async fn converge_forced(
        &mut self,
        view: &View,
        pool: PoolId,
        key: &str,
        spread: &Spread,
        forced: &[DeviceId],
    ) -> Result<(), ReintegrationError> {
        if !forced.is_empty() {
            let (endpoints, held) = self.survey(view, pool, key, &spread.look).await?;
            if let Some(newest) = held.iter().flatten().max().copied()
                && !newest.deleted
            {
                let (info, body) =
                    self.read_from(view, pool, key, &endpoints, &held, newest).await?;
                for device in forced {
                    let endpoint = view.endpoint(*device)?;
                    let stored = self.copy_to(view, pool, key, &endpoint, &info, &body).await?;
                    self.pacer.acquire(body.len() as u64).await;
                    let mut s = self.status.lock().expect("status lock");
                    s.replicas_copied += u64::from(stored);
                    s.bytes_copied += body.len() as u64;
                }
            }
        }
        self.converge(view, pool, key, spread, None).await
    }
}

impl Walk {
    /// Records that the offloaded replica of `key` on `device`, written in membership version
    /// `version`, was accounted for (copied, or found current); whether it was the first time
    /// (it counts then). Beyond [`BROUGHT_BACK_TRACKED_MAX`] replicas nothing is remembered
    /// and every one counts.
    fn account(&mut self, version: u64, pool: PoolId, key: &str, device: DeviceId) -> bool {
        if self.accounted.len() >= BROUGHT_BACK_TRACKED_MAX {
            return true;
        }
        self.accounted.insert((version, pool.0, key.to_string(), device.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_object_lists_each_device_and_why() {
        let error = ReintegrationError::Unreadable {
            key: "k".into(),
            failures: vec![
                ReadFailure::Changed { device: 1 },
                ReadFailure::Failed { device: 2, failure: Failure::NotRunning("refused".into()) },
            ],
        };
        assert_eq!(
            error.to_string(),
            format!(
                "cannot read 'k' to re-integrate it: device 1: changed or damaged; device 2: {}",
                Failure::NotRunning("refused".into())
            )
        );
        let ReintegrationError::Unreadable { failures, .. } = &error else { unreachable!() };
        assert!(matches!(
            failures[1],
            ReadFailure::Failed { device: 2, failure: Failure::NotRunning(_) }
        ));
    }
}
