//! Catching up: a device that may have missed writes serves no reads until it holds every
//! version its peers hold of the objects placed on it.
//!
//! **When a device may have missed writes.** Clients write every replica of a set that is
//! running — a replica is skipped only when the map marks its device down or its server
//! refuses the connection (nothing listens: the process is dead) — so a running device that
//! serves reads never lacks an acknowledged write. A device can have missed some only if its
//! server was not running (it starts here: every device begins *recovering*) or if the map
//! marked it down (it stops serving reads at once and is recovering again when the map marks
//! it up).
//!
//! **Catching up.** A recovering device takes writes (versions order them) but answers reads
//! and probes of objects with `recovering` (503), so clients read another replica. Meanwhile
//! it lists every peer device that is up in the map (objects and tombstones, page by page);
//! for each key whose replica set under the current map includes it and of which the peer
//! holds a newer version, it fetches that version (or records the tombstone). Once every
//! peer has answered, the device serves. A peer that does not answer is retried with backoff
//! until it does or a newer map marks it down; a newer map restarts the pass. Versions make
//! every step safe to repeat and to race with clients' writes: a store keeps the newest.
//!
//! The race with a write in flight: a client whose write was refused by this server (it was
//! not running) checks the refused replica again once the others have answered; by then this
//! server listens, so the write reaches it directly if the listing of a peer came too early.
//!
//! The race with a write of the epoch before: the device lists its peers at the epoch that
//! marked it up; a peer still storing a write of an earlier epoch (which went around this
//! device) holds the listing until that write is stored (`serve::admitted`), so the listing
//! has it.
//!
//! **Maps not looked at.** This task looks at the newest map only, and a server may never
//! install some maps (a polled file changed twice between two reads). A device marked down
//! and up again between two maps looked at — or after a gap in epochs in which the newest map
//! records that it was marked down (its `up_from` or `down_at` is in the gap; a map that does
//! not record them counts every device) — is caught up as if the down had been seen
//! ([`ServerMap::downs`]). A device no skipped map marked down serves on: no write went
//! around it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use optio_net::{Call, Endpoint, HttpTransport, Op, Transport};
use optio_placement::{DeviceId, Epoch, PoolId, ReplicaSet};
use optio_proto::{ErrorKind, ListQuery, ObjectVersion};

use crate::mapstate::{MapState, ServerMap};
use crate::peer::PeerError;
use crate::store::{DeviceStore, PutRequest};

/// Keys asked per listing page.
const PAGE_KEYS: usize = 1000;
/// First wait before retrying a pass that could not finish; doubles up to the maximum.
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(200);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// One device's catch-up state.
#[derive(Debug, Default)]
struct DeviceState {
    recovering: AtomicBool,
    /// The map marked the device down since its choice records were last dropped.
    marked_down: AtomicBool,
    /// Versions fetched from peers (objects and tombstones), since start.
    pulled: AtomicU64,
    /// The map's [`downs`](ServerMap::downs) count of the device at the last step.
    downs_seen: AtomicU64,
}

/// The catch-up of a server's devices.
pub struct CatchUp {
    devices: HashMap<u32, Arc<DeviceStore>>,
    map: Arc<MapState>,
    transport: HttpTransport,
    state: HashMap<u32, DeviceState>,
    /// Wakes [`CatchUp::run`] when devices are marked recovering outside a map change.
    wake: tokio::sync::Notify,
}

/// How one pass over the peers ended.
enum Pass {
    /// Every peer answered: the device holds what they hold.
    Done,
    /// A newer map arrived: start over with it.
    MapChanged,
}

impl CatchUp {
    /// The catch-up of `devices`: each starts recovering when a map is followed (a server
    /// without a map has no peers and serves at once).
    pub fn new(
        devices: HashMap<u32, Arc<DeviceStore>>,
        map: Arc<MapState>,
        transport: HttpTransport,
    ) -> CatchUp {
        let recovering = map.checks_epochs();
        let state = devices
            .keys()
            .map(|&id| {
                let state = DeviceState::default();
                state.recovering.store(recovering, Ordering::Release);
                (id, state)
            })
            .collect();
        CatchUp { devices, map, transport, state, wake: tokio::sync::Notify::new() }
    }

    /// Whether `device` must not serve reads now: it is catching up, or the map held marks it
    /// down.
    pub fn refuses_reads(&self, device: u32) -> bool {
        let recovering =
            self.state.get(&device).is_some_and(|s| s.recovering.load(Ordering::Acquire));
        recovering
            || self
                .map
                .current()
                .is_some_and(|m| m.map.device(DeviceId(device)).is_some_and(|d| !d.up))
    }

    /// Lets every device serve reads without catching up: for a server whose caller knows
    /// its devices missed no write (a fresh cluster run in process, where no catch-up runs:
    /// [`crate::InProcess::caught_up`]).
    pub(crate) fn mark_all_caught_up(&self) {
        for state in self.state.values() {
            state.recovering.store(false, Ordering::Release);
        }
    }

    /// Marks every device recovering — the server served nothing for a while (it lost its
    /// fencing lease) and writes may have gone around it — and starts a pass.
    pub fn mark_all_recovering(&self) {
        if !self.map.checks_epochs() {
            return;
        }
        for state in self.state.values() {
            state.recovering.store(true, Ordering::Release);
        }
        self.wake.notify_one();
    }

    /// Versions `device` fetched from its peers since the server started.
    pub fn pulled(&self, device: u32) -> u64 {
        self.state.get(&device).map_or(0, |s| s.pulled.load(Ordering::Relaxed))
    }

    /// Runs until the process ends: catches up the recovering devices with every new map,
    /// and marks a device recovering again when a map marks it down.
    pub async fn run(self: Arc<Self>) {
        if !self.map.checks_epochs() {
            return;
        }
        let mut maps = self.map.subscribe();
        let mut backoff = RETRY_BACKOFF_MIN;
        loop {
            let current = maps.borrow_and_update().clone();
            let mut unfinished = false;
            if let Some(map) = current {
                let mut ids: Vec<u32> = self.devices.keys().copied().collect();
                ids.sort_unstable();
                for device in ids {
                    match self.step(&map, device).await {
                        Ok(()) => {}
                        Err(error) => {
                            unfinished = true;
                            tracing::info!(device, %error, "catching up: will retry");
                        }
                    }
                }
            }
            if unfinished {
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    changed = maps.changed() => if changed.is_err() { return },
                    _ = self.wake.notified() => {}
                }
                backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
            } else {
                backoff = RETRY_BACKOFF_MIN;
                tokio::select! {
                    changed = maps.changed() => if changed.is_err() { return },
                    _ = self.wake.notified() => {}
                }
            }
        }
    }

    /// Brings one device's state in line with `map`.
    async fn step(&self, map: &Arc<ServerMap>, device: u32) -> Result<(), PeerError> {
        let state = &self.state[&device];
        let up = map.map.device(DeviceId(device)).is_some_and(|d| d.up);
        let downs = map.downs(device);
        let unseen_down = state.downs_seen.swap(downs, Ordering::AcqRel) != downs;
        if !up {
            // Marked down (or not in the map): writes may now go around it.
            if map.map.device(DeviceId(device)).is_some()
                && !state.recovering.swap(true, Ordering::AcqRel)
            {
                tracing::warn!(device, epoch = map.epoch(), "the map marks this device down");
            }
            // Another device is the home of its keys now: the records kept here go stale.
            if map.map.device(DeviceId(device)).is_some()
                && !state.marked_down.swap(true, Ordering::AcqRel)
            {
                self.drop_records(device, "marked down");
            }
            return Ok(());
        }
        if state.marked_down.swap(false, Ordering::AcqRel) {
            // Up again: whatever reached this device while it was down is suspect too; the
            // home that served meanwhile moves its records here.
            self.drop_records(device, "marked up again");
        } else if unseen_down {
            // Marked down and up again (or maps were skipped) since the last map looked at:
            // writes may have gone around it meanwhile, as for a down seen.
            if !state.recovering.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    device,
                    epoch = map.epoch(),
                    "the maps since the last one looked at may have marked this device down; catching up"
                );
            }
            self.drop_records(device, "marked down and up again");
        }
        if !state.recovering.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.pass(map, device).await? {
            Pass::Done => {
                state.recovering.store(false, Ordering::Release);
                tracing::info!(
                    device,
                    epoch = map.epoch(),
                    pulled = state.pulled.load(Ordering::Relaxed),
                    "caught up: serving reads"
                );
                Ok(())
            }
            Pass::MapChanged => Err(PeerError::MapChanged),
        }
    }

    fn drop_records(&self, device: u32, why: &str) {
        let dropped = self.devices[&device].drop_records();
        if dropped > 0 {
            tracing::info!(device, dropped, "{why}: dropped the choice records held here");
        }
    }

    /// One pass over every peer that is up in `map`.
    async fn pass(&self, map: &Arc<ServerMap>, device: u32) -> Result<Pass, PeerError> {
        let mut peers: Vec<Endpoint> = map
            .map
            .devices()
            .iter()
            .filter(|d| d.up && d.id.0 != device)
            .filter_map(|d| d.addr.clone().map(|addr| Endpoint { device: d.id.0, addr }))
            .collect();
        peers.sort_by_key(|e| e.device);
        let pools: Vec<PoolId> = map.map.pools().iter().map(|p| p.id).collect();
        for peer in &peers {
            for &pool in &pools {
                if self.map.epoch() != map.epoch() {
                    return Ok(Pass::MapChanged);
                }
                self.catch_up_from(map, device, peer, pool).await?;
            }
        }
        Ok(Pass::Done)
    }

    /// Fetches from `peer` every newer version of `pool`'s objects placed on `device`.
    async fn catch_up_from(
        &self,
        map: &Arc<ServerMap>,
        device: u32,
        peer: &Endpoint,
        pool: PoolId,
    ) -> Result<(), PeerError> {
        let Some(placement) = map.placement.pool(pool) else { return Ok(()) };
        if map.map.pool(pool).is_some_and(|p| p.erasure.is_some()) {
            // Chunks are not copies: a peer's chunk is not this device's (docs/erasure.md).
            return Ok(());
        }
        let store = &self.devices[&device];
        let mut scratch = map.placement.scratch();
        let mut set = ReplicaSet::new();
        let mut placed_here = |seed: Option<u32>| {
            let Some(seed) = seed else { return false };
            placement.place_full_power(placement.key_of_seed(seed), &mut scratch, &mut set);
            set.contains(DeviceId(device))
        };
        let mut after: Option<String> = None;
        loop {
            let query = ListQuery {
                after: after.clone(),
                limit: Some(PAGE_KEYS),
                tombstones: Some(true),
                ..ListQuery::default()
            };
            let (_, listing) = self
                .transport
                .list(peer, pool, map.epoch(), query)
                .await
                .map_err(|failure| PeerError::List { pool, device: peer.device, failure })?;
            for object in &listing.objects {
                if placed_here(object.pg_seed)
                    && held_version(store, pool, &object.key) < Some(object.version)
                {
                    self.fetch(map, device, peer, pool, &object.key).await?;
                }
            }
            for deleted in &listing.deleted {
                if placed_here(deleted.pg_seed)
                    && held_version(store, pool, &deleted.key) < Some(deleted.version)
                {
                    let epoch = map.epoch();
                    let (key, version, seed) = (&deleted.key, deleted.version, deleted.pg_seed);
                    if record_tombstone(store, pool, key, version, seed, epoch).await? {
                        self.note_pulled(device);
                    }
                }
            }
            match (listing.truncated, listing.last_key()) {
                (true, Some(last)) => after = Some(last.to_string()),
                _ => return Ok(()),
            }
        }
    }

    /// Fetches `key` from `peer` and stores it on `device` (see [`fetch_version`]).
    async fn fetch(
        &self,
        map: &Arc<ServerMap>,
        device: u32,
        peer: &Endpoint,
        pool: PoolId,
        key: &str,
    ) -> Result<(), PeerError> {
        let store = &self.devices[&device];
        if fetch_version(&self.transport, store, peer, pool, key, map.epoch()).await? {
            self.note_pulled(device);
        }
        Ok(())
    }

    fn note_pulled(&self, device: u32) {
        self.state[&device].pulled.fetch_add(1, Ordering::Relaxed);
    }
}

/// Fetches `key` from `peer` (even if the peer is catching up itself) and stores it in
/// `store`; returns whether a version was stored. A newer version stored meanwhile wins; an
/// object deleted or overwritten meanwhile on the peer is left alone (its writer writes this
/// device too).
pub(crate) async fn fetch_version(
    transport: &HttpTransport,
    store: &Arc<DeviceStore>,
    peer: &Endpoint,
    pool: PoolId,
    key: &str,
    epoch: u64,
) -> Result<bool, PeerError> {
    let call = Call::new(peer, pool, epoch, Op::Fetch { key });
    let answer = match transport.send(call).await {
        Ok(answer) => answer,
        Err((failure, _)) if failure.kind() == Some(ErrorKind::NotFound) => return Ok(false),
        Err((failure, _)) => {
            return Err(PeerError::Read { key: key.to_string(), device: peer.device, failure });
        }
    };
    let Some(info) = answer.info else {
        return Err(PeerError::NoHeaders { key: key.to_string(), device: peer.device });
    };
    let store = store.clone();
    let key = key.to_string();
    let result = tokio::task::spawn_blocking(move || {
        store.put(&PutRequest {
            pool,
            key: &key,
            data: &[&answer.body.to_bytes()],
            version: info.version,
            checksum: Some(info.checksum),
            pg_seed: info.pg_seed,
            epoch: Epoch(epoch),
        })
    })
    .await
    .map_err(|source| PeerError::Task { what: "write", source })?;
    // (A snapshot clone a trim removed here is refused as an older version is: the peer had
    // not removed it yet.)
    match result {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::VersionConflict => Ok(false),
        Err(e) => Err(PeerError::Store(e)),
    }
}

/// Records in `store` that `key` was deleted at `version` (a tombstone, kept with `pg_seed`
/// when the store held no copy); returns whether it was recorded (a newer version stored
/// meanwhile wins).
pub(crate) async fn record_tombstone(
    store: &Arc<DeviceStore>,
    pool: PoolId,
    key: &str,
    version: ObjectVersion,
    pg_seed: Option<u32>,
    epoch: u64,
) -> Result<bool, PeerError> {
    let (store, owned) = (store.clone(), key.to_string());
    let result = tokio::task::spawn_blocking(move || {
        store.delete(pool, &owned, Some(version), Epoch(epoch), pg_seed)
    })
    .await
    .map_err(|source| PeerError::Task { what: "delete", source })?;
    match result {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::VersionConflict => Ok(false),
        Err(source) => Err(PeerError::Tombstone { key: key.to_string(), source }),
    }
}

/// The version `store` holds of `key`, live or deleted.
pub(crate) fn held_version(store: &DeviceStore, pool: PoolId, key: &str) -> Option<ObjectVersion> {
    store.info(pool, key).map(|i| i.version).or_else(|| store.tombstone(pool, key))
}
