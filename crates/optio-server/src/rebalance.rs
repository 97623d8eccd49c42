//! Rebalancing: when the map's epoch changes, a server moves what it holds to where the new
//! map places it — objects, tombstones and choice records — rate-limited, with bounded
//! concurrency, resuming after a restart.
//!
//! **What moves.** For every object (or tombstone) a device holds, the header's candidate
//! seed gives its replica set under the new map, `new`, and under the last map this server
//! finished rebalancing to, `old` (kept in memory and in `rebalanced-map.toml` in the state
//! directory, so that a restart resumes where it stood). Copies go to the members of `new`
//! that are not in `old`; the device drops its own copy when it is not in `new`, once every
//! member of `new` holds this version or a newer one. Elastic pools are placed at full power
//! (membership versions change who is written to, not where data belongs: copies offloaded
//! while servers were inactive are selective re-integration's work, not rebalancing's). A
//! choice record whose home (candidate 0's primary) changed goes to the new home
//! (create-if-absent: a record already there wins) and is then removed here.
//!
//! **Who sends.** Each copy is sent by one holder: the first member of `old` that is still
//! in the map and up (the *designated* sender) sends without asking; the other holders only
//! ask (HEAD) before dropping their own copy, and send only what is missing. When `old` is
//! unknown, or in a retry round, every transfer asks first.
//!
//! **Safety.** Transfers carry the object's version; a target keeps the newest version and
//! refuses an older one, and a delete leaves a tombstone, so a transfer that races with a
//! client's write or delete never brings back an older state. A copy is dropped only after
//! its targets confirmed, and only if it did not change meanwhile. Everything a round could
//! not finish (a target unreachable, full, or at an older epoch) is retried in the next round,
//! with backoff, until it succeeds or a newer map arrives.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use optio_net::throttle::Throttle;
use optio_net::{Call, Endpoint, Failure, HttpTransport, Op, Transport};
use optio_placement::{DeviceId, ITEM_NONE, PoolId, ReplicaSet};
use optio_proto::{ChoiceRecord, ErrorKind, MigrationPhase, MigrationStatus};

use crate::mapstate::{MapState, ServerMap};
use crate::peer::PeerError;
use crate::store::{DeviceStore, Held};

/// Transfers in flight at once, by default.
pub const CONCURRENCY_DEFAULT: usize = 4;
/// Most transfers in flight at once.
pub const CONCURRENCY_MAX: usize = 256;
/// The file, in the state directory, holding the map the server last finished rebalancing to.
pub const REBALANCED_MAP_FILE: &str = "rebalanced-map.toml";
/// First wait before retrying what a round could not finish; doubles up to the maximum.
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(500);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Rate and ETA are computed over this window.
const RATE_WINDOW: Duration = Duration::from_secs(5);

/// How a server rebalances.
#[derive(Clone, Debug)]
pub struct MigrationConfig {
    /// Bytes per second sent at most (`None`: no limit).
    pub rate_bytes_per_sec: Option<u64>,
    /// Transfers in flight at once (1 to [`CONCURRENCY_MAX`]).
    pub concurrency: usize,
    /// Where the server keeps what it must remember across restarts (`None`: nothing kept; a
    /// restart re-checks every copy). Its files are written 0600.
    pub state_dir: Option<PathBuf>,
}

impl Default for MigrationConfig {
    fn default() -> MigrationConfig {
        MigrationConfig {
            rate_bytes_per_sec: None,
            concurrency: CONCURRENCY_DEFAULT,
            state_dir: None,
        }
    }
}

/// One copy to send or check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Send without asking (the designated sender, first round).
    Send,
    /// Ask first; send only if the target lacks this version.
    Check,
}

#[derive(Clone, Debug)]
struct CopyTask {
    device: u32,
    held: Held,
    targets: Vec<(u32, Mode)>,
    /// Drop this device's copy once every target has it.
    drop_local: bool,
    /// A chunk of an erasure-coded object that its device no longer holds a position for:
    /// the new placement's device at each position (none: a hole). It goes to the device of
    /// its own position only (its index is in its header), never where another chunk of its
    /// object is.
    chunk_slots: Option<Vec<Option<u32>>>,
}

#[derive(Clone, Debug)]
struct RecordTask {
    device: u32,
    pool: PoolId,
    key: String,
    record: ChoiceRecord,
    home: u32,
}

#[derive(Default)]
struct Plan {
    copies: Vec<CopyTask>,
    records: Vec<RecordTask>,
}

#[derive(Default)]
struct Progress {
    copies_done: AtomicU64,
    bytes_moved: AtomicU64,
    copies_removed: AtomicU64,
    records_moved: AtomicU64,
    failures: AtomicU64,
    total_bytes_moved: AtomicU64,
    total_copies_moved: AtomicU64,
}

/// A server's rebalancer.
pub struct Rebalancer {
    devices: HashMap<u32, Arc<DeviceStore>>,
    map: Arc<MapState>,
    config: MigrationConfig,
    transport: HttpTransport,
    limiter: Throttle,
    progress: Progress,
    status: Mutex<MigrationStatus>,
    samples: Mutex<Vec<(Instant, u64)>>,
}

/// Why the migration settings cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrationError {
    /// The number of transfers at once is out of range.
    #[error("migration concurrency must be 1 to {CONCURRENCY_MAX}, not {concurrency}")]
    Concurrency {
        /// The number given.
        concurrency: usize,
    },
}

/// How one transfer ended.
enum Sent {
    /// The target holds this version or a newer one (`bytes` sent to make it so).
    Confirmed { bytes: u64 },
    /// This device's copy changed meanwhile: plan again.
    Changed,
}

impl Rebalancer {
    /// A rebalancer for `devices`, following `map`.
    pub fn new(
        devices: HashMap<u32, Arc<DeviceStore>>,
        map: Arc<MapState>,
        config: MigrationConfig,
        transport: HttpTransport,
    ) -> Result<Rebalancer, MigrationError> {
        if config.concurrency == 0 || config.concurrency > CONCURRENCY_MAX {
            return Err(MigrationError::Concurrency { concurrency: config.concurrency });
        }
        Ok(Rebalancer {
            devices,
            map,
            limiter: Throttle::new(config.rate_bytes_per_sec),
            config,
            transport,
            progress: Progress::default(),
            status: Mutex::new(MigrationStatus::default()),
            samples: Mutex::new(Vec::new()),
        })
    }

    /// The current progress.
    pub fn status(&self) -> MigrationStatus {
        self.status.lock().expect("status lock").clone()
    }

    /// The map this server last finished rebalancing to, from the state directory.
    fn load_rebalanced(&self) -> Option<Arc<ServerMap>> {
        let path = self.config.state_dir.as_ref()?.join(REBALANCED_MAP_FILE);
        let text = std::fs::read_to_string(&path).ok()?;
        let map = match optio_mapfile::parse(&text) {
            Ok(map) => map,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "ignoring the last rebalanced map");
                return None;
            }
        };
        match ServerMap::new(map) {
            Ok(map) => Some(Arc::new(map)),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "ignoring the last rebalanced map");
                None
            }
        }
    }

    fn store_rebalanced(&self, map: &ServerMap) {
        let Some(dir) = &self.config.state_dir else { return };
        let path = dir.join(REBALANCED_MAP_FILE);
        let text = optio_cluster::codec::encode_map(&map.map);
        let written = optio_cluster::durable::replace_private(&path, text.as_bytes());
        if let Err(error) = written {
            tracing::warn!(path = %path.display(), %error, "cannot store the rebalanced map");
        }
    }

    /// Runs until the process ends: rebalances to every new map.
    pub async fn run(self: Arc<Self>) {
        let mut changes = self.map.subscribe();
        let mut old = tokio::task::spawn_blocking({
            let this = self.clone();
            move || this.load_rebalanced()
        })
        .await
        .ok()
        .flatten();
        loop {
            let Some(new) = changes.borrow_and_update().clone() else {
                if changes.changed().await.is_err() {
                    return;
                }
                continue;
            };
            if old.as_ref().is_some_and(|o| o.epoch() == new.epoch()) {
                self.finish(&new);
                if changes.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let mut backoff = RETRY_BACKOFF_MIN;
            let mut first_round = true;
            let done = loop {
                self.begin_round(new.epoch(), first_round);
                let plan = self.plan(&new, old.as_deref(), first_round);
                let finished = tokio::select! {
                    finished = self.execute(&new, plan) => finished,
                    _ = changes.changed() => break false,
                };
                if finished {
                    break true;
                }
                first_round = false;
                self.set_phase(MigrationPhase::Retrying);
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = changes.changed() => break false,
                }
                backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
            };
            if done {
                let store = self.clone();
                let finished = new.clone();
                let _ =
                    tokio::task::spawn_blocking(move || store.store_rebalanced(&finished)).await;
                old = Some(new.clone());
                self.finish(&new);
                tracing::info!(epoch = new.epoch(), "rebalancing done");
                if changes.changed().await.is_err() {
                    return;
                }
            }
        }
    }

    fn begin_round(&self, epoch: u64, first_round: bool) {
        let mut status = self.status.lock().expect("status lock");
        if status.epoch != epoch || first_round {
            self.progress.copies_done.store(0, Ordering::Relaxed);
            self.progress.bytes_moved.store(0, Ordering::Relaxed);
            self.progress.copies_removed.store(0, Ordering::Relaxed);
            self.progress.records_moved.store(0, Ordering::Relaxed);
        }
        self.progress.failures.store(0, Ordering::Relaxed);
        status.epoch = epoch;
        status.phase = MigrationPhase::Planning;
        status.last_error = None;
    }

    fn set_phase(&self, phase: MigrationPhase) {
        self.status.lock().expect("status lock").phase = phase;
        self.refresh_status(None);
    }

    fn finish(&self, map: &ServerMap) {
        {
            let mut status = self.status.lock().expect("status lock");
            status.epoch = map.epoch();
            status.phase = MigrationPhase::Done;
            status.remaining_copies = 0;
            status.remaining_bytes = 0;
            status.eta_seconds = Some(0);
        }
        self.refresh_status(None);
    }

    /// Refreshes the counters of the status (and, with `planned`, the plan's size).
    fn refresh_status(&self, planned: Option<(u64, u64)>) {
        let p = &self.progress;
        let bytes_moved = p.bytes_moved.load(Ordering::Relaxed);
        let total = p.total_bytes_moved.load(Ordering::Relaxed);
        let now = Instant::now();
        let rate = {
            let mut samples = self.samples.lock().expect("samples lock");
            samples.push((now, total));
            samples.retain(|(at, _)| now.duration_since(*at) <= RATE_WINDOW);
            let (first_at, first_total) = samples[0];
            let seconds = now.duration_since(first_at).as_secs_f64();
            if seconds > 0.2 { ((total - first_total) as f64 / seconds) as u64 } else { 0 }
        };
        let mut status = self.status.lock().expect("status lock");
        let copies_done = p.copies_done.load(Ordering::Relaxed);
        if let Some((copies, bytes)) = planned {
            // A retry round of the same epoch plans only what is left: what earlier rounds
            // did counts in the plan too, so that done never exceeds planned.
            status.copies_planned = copies_done + copies;
            status.bytes_planned = bytes_moved + bytes;
        }
        status.copies_done = copies_done;
        status.bytes_moved = bytes_moved;
        status.copies_removed = p.copies_removed.load(Ordering::Relaxed);
        status.records_moved = p.records_moved.load(Ordering::Relaxed);
        status.failures = p.failures.load(Ordering::Relaxed);
        status.total_bytes_moved = total;
        status.total_copies_moved = p.total_copies_moved.load(Ordering::Relaxed);
        if status.phase != MigrationPhase::Done {
            status.remaining_copies = status.copies_planned.saturating_sub(status.copies_done);
            status.remaining_bytes = status.bytes_planned.saturating_sub(bytes_moved);
            status.eta_seconds = (rate > 0).then(|| status.remaining_bytes / rate);
        }
        status.rate_bytes_per_sec = rate;
        status.updated_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
    }

    /// What this server must do to bring what it holds from `old` (if known) to `new`.
    fn plan(&self, new: &ServerMap, old: Option<&ServerMap>, first_round: bool) -> Plan {
        let mut plan = Plan::default();
        let mut scratch = new.placement.scratch();
        let mut old_scratch = old.map(|o| o.placement.scratch());
        let mut set = ReplicaSet::new();
        let mut old_set = ReplicaSet::new();
        let mut ids: Vec<u32> = self.devices.keys().copied().collect();
        ids.sort_unstable();
        for device in ids {
            let store = &self.devices[&device];
            let me = DeviceId(device);
            // Marked down but still in: a server that restarted reads a map that still says so
            // until its devices are marked up again. The placement leaves a down device out of
            // every set, but its copies are not wanted anywhere else (a set short of it is
            // degraded, and its data comes back with it); sending them on and dropping them
            // would only bring them all back at the next epoch. Kept until the device is
            // marked up (nothing to do then) or out (moved then). Its choice records still
            // go to the home that takes its place, as they would from a device that is up.
            let kept = new.map.device(me).is_some_and(|d| !d.up && d.is_in);
            for held in if kept { Vec::new() } else { store.held() } {
                let Some(pool) = new.placement.pool(held.pool) else { continue };
                let Some(seed) = held.pg_seed else { continue };
                if new.map.pool(held.pool).is_some_and(|p| p.erasure.is_some()) && !held.deleted {
                    // A chunk goes to its own position's device only, never where another
                    // chunk of its object is (docs/erasure.md). A device still in the set
                    // keeps its chunk (positions are stable: `indep`); a displaced one sends
                    // it on. (Tombstones go to every device of the set, as for replicas.)
                    pool.place_full_power(pool.key_of_seed(seed), &mut scratch, &mut set);
                    if set.is_empty() || set.contains(me) {
                        continue;
                    }
                    let slots = set
                        .as_slice()
                        .iter()
                        .map(|&item| (item >= 0 && item != ITEM_NONE).then_some(item as u32))
                        .collect();
                    plan.copies.push(CopyTask {
                        device,
                        held,
                        targets: Vec::new(),
                        drop_local: true,
                        chunk_slots: Some(slots),
                    });
                    continue;
                }
                pool.place_full_power(pool.key_of_seed(seed), &mut scratch, &mut set);
                let old_members: Option<Vec<u32>> =
                    old.zip(old_scratch.as_mut()).and_then(|(old, old_scratch)| {
                        let pool = old.placement.pool(held.pool)?;
                        pool.place_full_power(pool.key_of_seed(seed), old_scratch, &mut old_set);
                        Some(old_set.devices().map(|d| d.0).collect())
                    });
                if set.is_empty() {
                    // Nowhere to go (every device of the set down or out): keep the copy.
                    continue;
                }
                let in_new = set.contains(me);
                let elastic = pool.is_elastic();
                if elastic && !in_new && old_members.as_ref().is_none_or(|o| !o.contains(&device)) {
                    // Offloaded by an elastic resize: re-integration's, not rebalancing's.
                    continue;
                }
                let new_members: Vec<u32> = set.devices().map(|d| d.0).collect();
                let sender = old_members.as_ref().and_then(|o| designated(o, &new.map));
                let mut targets = Vec::new();
                for &target in new_members.iter().filter(|&&t| t != device) {
                    let is_new = old_members.as_ref().is_none_or(|o| !o.contains(&target));
                    if in_new && !is_new {
                        continue;
                    }
                    if in_new && sender.is_some_and(|s| s != device) && old_members.is_some() {
                        // Another holder sends it; this copy stays where it is.
                        continue;
                    }
                    // A device the old map marked down but in is coming back with what it
                    // held (kept while down, above): ask before sending it anything.
                    let returning = old.is_some_and(|old| {
                        old.map.device(DeviceId(target)).is_some_and(|d| !d.up && d.is_in)
                    });
                    let mode = if first_round && sender == Some(device) && is_new && !returning {
                        Mode::Send
                    } else {
                        Mode::Check
                    };
                    targets.push((target, mode));
                }
                if targets.is_empty() && in_new {
                    continue;
                }
                plan.copies.push(CopyTask {
                    device,
                    held,
                    targets,
                    drop_local: !in_new,
                    chunk_slots: None,
                });
            }
            plan.records.extend(records_to_move(new, device, store));
        }
        plan
    }

    /// Carries out a plan; returns whether every task finished.
    async fn execute(&self, map: &ServerMap, plan: Plan) -> bool {
        let copies = plan.copies.len() as u64;
        // At most: every target may need the whole file (a check finds most already there).
        let bytes: u64 = plan
            .copies
            .iter()
            .filter(|t| !t.held.deleted)
            .map(|t| {
                // A displaced chunk goes to one device (or stays, if its position is a hole).
                let sends = if t.chunk_slots.is_some() { 1 } else { t.targets.len() as u64 };
                t.held.file_bytes * sends
            })
            .sum();
        if copies > 0 || !plan.records.is_empty() {
            tracing::info!(
                epoch = map.epoch(),
                copies,
                bytes,
                records = plan.records.len(),
                "rebalancing"
            );
        }
        self.status.lock().expect("status lock").phase = MigrationPhase::Moving;
        self.refresh_status(Some((copies, bytes)));
        let ticker = async {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                self.refresh_status(None);
            }
        };
        let work = async {
            let copy_results: Vec<bool> = futures_util::stream::iter(plan.copies)
                .map(|task| self.run_copy(map, task))
                .buffer_unordered(self.config.concurrency)
                .collect()
                .await;
            let record_results: Vec<bool> = futures_util::stream::iter(plan.records)
                .map(|task| self.run_record(map, task))
                .buffer_unordered(self.config.concurrency)
                .collect()
                .await;
            copy_results.iter().chain(&record_results).all(|ok| *ok)
        };
        let finished = tokio::select! {
            finished = work => finished,
            _ = ticker => unreachable!("the ticker never ends"),
        };
        self.refresh_status(None);
        finished
    }

    fn fail(&self, error: String) -> bool {
        tracing::debug!(%error, "a rebalancing transfer failed");
        self.progress.failures.fetch_add(1, Ordering::Relaxed);
        self.status.lock().expect("status lock").last_error = Some(error);
        false
    }

    async fn run_copy(&self, map: &ServerMap, mut task: CopyTask) -> bool {
        let store = self.devices[&task.device].clone();
        if let Some(slots) = task.chunk_slots.take() {
            return self.run_chunk_copy(map, &store, task, &slots).await;
        }
        let mut data: Option<bytes::Bytes> = None;
        for &(target, mode) in &task.targets {
            let endpoint = match endpoint(map, target) {
                Ok(endpoint) => endpoint,
                Err(error) => return self.fail(error.to_string()),
            };
            match self.send(map, &store, &task.held, &endpoint, mode, &mut data).await {
                Ok(Sent::Confirmed { bytes }) => {
                    if bytes > 0 {
                        self.progress.bytes_moved.fetch_add(bytes, Ordering::Relaxed);
                        self.progress.total_bytes_moved.fetch_add(bytes, Ordering::Relaxed);
                        self.progress.total_copies_moved.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(Sent::Changed) => {
                    self.progress.copies_done.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(error) => {
                    return self.fail(format!(
                        "{} '{}' to device {target} at {}: {error}",
                        if task.held.deleted { "tombstone of" } else { "object" },
                        task.held.key,
                        endpoint.addr
                    ));
                }
            }
        }
        if task.drop_local {
            let held = task.held.clone();
            let store = store.clone();
            let purged = tokio::task::spawn_blocking(move || {
                store.purge(held.pool, &held.key, Some(held.version))
            })
            .await;
            match purged {
                Ok(Ok(true)) => {
                    self.progress.copies_removed.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Ok(false)) => {}
                // A newer version arrived meanwhile: the next epoch's plan decides.
                Ok(Err(crate::StoreError::VersionConflict { .. })) => {}
                Ok(Err(error)) => {
                    return self.fail(format!("dropping '{}': {error}", task.held.key));
                }
                Err(error) => return self.fail(format!("dropping '{}': {error}", task.held.key)),
            }
        }
        self.progress.copies_done.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Moves a displaced chunk of an erasure-coded object to the device of its position in
    /// the new placement (`slots`), then drops it here. Kept where the position is a hole or
    /// the device already holds a version of its own (a newer one, written under the new map).
    async fn run_chunk_copy(
        &self,
        map: &ServerMap,
        store: &Arc<DeviceStore>,
        task: CopyTask,
        slots: &[Option<u32>],
    ) -> bool {
        let held = &task.held;
        let reader = store.clone();
        let (pool, key) = (held.pool, held.key.clone());
        let read = tokio::task::spawn_blocking(move || reader.get_bytes(pool, &key)).await;
        let bytes = match read {
            Ok(Ok((info, bytes))) if info.version == held.version => bytes,
            // Overwritten, deleted or damaged meanwhile: the next plan decides.
            _ => {
                self.progress.copies_done.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        };
        let index = match optio_erasure::ChunkRef::parse_unverified(&bytes) {
            Ok(chunk) => usize::from(chunk.index()),
            Err(error) => {
                return self.fail(format!("'{}' is not a chunk: {error}", held.key));
            }
        };
        let Some(target) = slots.get(index).copied().flatten() else {
            // No device at its position now: kept until there is one.
            self.progress.copies_done.fetch_add(1, Ordering::Relaxed);
            return true;
        };
        if target == task.device {
            self.progress.copies_done.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let endpoint = match endpoint(map, target) {
            Ok(endpoint) => endpoint,
            Err(error) => return self.fail(error.to_string()),
        };
        self.limiter.acquire(held.file_bytes).await;
        let put = Call::new(
            &endpoint,
            held.pool,
            map.epoch(),
            Op::Put {
                key: &held.key,
                checksum: optio_proto::checksum(&bytes),
                data: bytes.clone(),
                version: held.version,
                pg_seed: held.pg_seed,
            },
        );
        match self.transport.send(put).await {
            Ok(_) => {
                self.progress.bytes_moved.fetch_add(held.file_bytes, Ordering::Relaxed);
                self.progress.total_bytes_moved.fetch_add(held.file_bytes, Ordering::Relaxed);
                self.progress.total_copies_moved.fetch_add(1, Ordering::Relaxed);
            }
            Err((f, _)) if f.kind() == Some(ErrorKind::VersionConflict) => {
                // The target holds another version: this chunk stays until a plan finds
                // it superseded everywhere (kept rather than risk the only copy).
                self.progress.copies_done.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            Err((failure, _)) => {
                return self.fail(format!(
                    "chunk {index} of '{}' to device {target} at {}: {failure}",
                    held.key, endpoint.addr
                ));
            }
        }
        let (store, held) = (store.clone(), held.clone());
        let purged = tokio::task::spawn_blocking(move || {
            store.purge(held.pool, &held.key, Some(held.version))
        })
        .await;
        match purged {
            Ok(Ok(true)) => {
                self.progress.copies_removed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Ok(false) | Err(crate::StoreError::VersionConflict { .. })) => {}
            Ok(Err(error)) => return self.fail(format!("dropping '{}': {error}", task.held.key)),
            Err(error) => return self.fail(format!("dropping '{}': {error}", task.held.key)),
        }
        self.progress.copies_done.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Makes `endpoint` hold `held` (or newer).
    async fn send(
        &self,
        map: &ServerMap,
        store: &Arc<DeviceStore>,
        held: &Held,
        endpoint: &Endpoint,
        mode: Mode,
        data: &mut Option<bytes::Bytes>,
    ) -> Result<Sent, PeerError> {
        let call = |op| Call::new(endpoint, held.pool, map.epoch(), op);
        let key = held.key.as_str();
        if mode == Mode::Check {
            let probe = call(Op::Probe { key, want_choice: false });
            let answer = self.transport.send(probe).await.map_err(|(f, _)| PeerError::Send(f))?;
            let there = answer.info.as_ref().map(|i| i.version).or(answer.deleted);
            if there.is_some_and(|v| v >= held.version) {
                return Ok(Sent::Confirmed { bytes: 0 });
            }
        }
        if held.deleted {
            let delete = call(Op::Delete {
                key,
                version: Some(held.version),
                purge: false,
                pg_seed: held.pg_seed,
            });
            return match self.transport.send(delete).await {
                Ok(_) => Ok(Sent::Confirmed { bytes: 0 }),
                Err((f, _))
                    if matches!(
                        f.kind(),
                        Some(ErrorKind::NotFound | ErrorKind::VersionConflict)
                    ) =>
                {
                    Ok(Sent::Confirmed { bytes: 0 })
                }
                Err((failure, _)) => Err(PeerError::Send(failure)),
            };
        }
        if data.is_none() {
            let reader = store.clone();
            let (pool, key) = (held.pool, held.key.clone());
            let read = tokio::task::spawn_blocking(move || reader.get_bytes(pool, &key))
                .await
                .map_err(|source| PeerError::Task { what: "read", source })?;
            match read {
                Ok((info, bytes)) if info.version == held.version => {
                    *data = Some(bytes);
                }
                // Overwritten, deleted or damaged meanwhile: plan again.
                Ok(_) | Err(_) => return Ok(Sent::Changed),
            }
        }
        let body = data.clone().expect("read above");
        self.limiter.acquire(held.file_bytes).await;
        let put = call(Op::Put {
            key,
            checksum: optio_proto::checksum(&body),
            data: body,
            version: held.version,
            pg_seed: held.pg_seed,
        });
        match self.transport.send(put).await {
            Ok(_) => Ok(Sent::Confirmed { bytes: held.file_bytes }),
            Err((f, _)) if f.kind() == Some(ErrorKind::VersionConflict) => {
                Ok(Sent::Confirmed { bytes: held.file_bytes })
            }
            Err((failure, _)) => Err(PeerError::Send(failure)),
        }
    }

    async fn run_record(&self, map: &ServerMap, task: RecordTask) -> bool {
        let endpoint = match endpoint(map, task.home) {
            Ok(endpoint) => endpoint,
            Err(error) => return self.fail(error.to_string()),
        };
        let op = Op::PutRecord {
            key: &task.key,
            record: task.record,
            replace_if_writer: None,
            unless_contended: false,
            defer_sync: false,
        };
        let call = Call::new(&endpoint, task.pool, map.epoch(), op);
        if let Err(failure) = self.transport.send(call).await {
            return self.fail(format!(
                "choice record of '{}' to device {} at {}: {}",
                task.key,
                task.home,
                endpoint.addr,
                describe(failure)
            ));
        }
        let store = self.devices[&task.device].clone();
        let removed = tokio::task::spawn_blocking(move || {
            let _ = store.delete_record(task.pool, &task.key);
            store.commit_records()
        })
        .await;
        if let Ok(Err(error)) = removed {
            return self.fail(format!("removing a moved choice record: {error}"));
        }
        self.progress.records_moved.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// The choice records `device` holds whose home under `new` is another device: they move
/// there.
fn records_to_move(new: &ServerMap, device: u32, store: &DeviceStore) -> Vec<RecordTask> {
    let mut scratch = new.placement.scratch();
    let mut moved = Vec::new();
    for (pool_id, key, record) in store.records() {
        let Some(pool) = new.placement.pool(pool_id) else { continue };
        let mut candidates = optio_placement::choice::Candidates::new();
        pool.candidates(&key, &mut scratch, &mut candidates);
        let Some(home) = candidates.iter().next().and_then(|(_, set)| set.primary()) else {
            continue;
        };
        if home != DeviceId(device) {
            moved.push(RecordTask { device, pool: pool_id, key, record, home: home.0 });
        }
    }
    moved
}

/// The first member of `old` that is still in `map` and up: the holder that sends a copy to
/// a new member.
fn designated(old: &[u32], map: &optio_placement::ClusterMap) -> Option<u32> {
    old.iter().copied().find(|d| map.device(DeviceId(*d)).is_some_and(|d| d.up))
}

fn endpoint(map: &ServerMap, device: u32) -> Result<Endpoint, PeerError> {
    let addr = map
        .map
        .device(DeviceId(device))
        .and_then(|d| d.addr.clone())
        .ok_or(PeerError::NoAddress { device })?;
    Ok(Endpoint { device, addr })
}

fn describe((failure, _): (Failure, Option<optio_proto::DeviceMetrics>)) -> String {
    failure.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_concurrency_out_of_range_is_refused_as_such() {
        for concurrency in [0, CONCURRENCY_MAX + 1] {
            let config = MigrationConfig { concurrency, ..MigrationConfig::default() };
            let refused = Rebalancer::new(
                HashMap::new(),
                Arc::new(MapState::new(None)),
                config,
                HttpTransport::new().expect("a transport"),
            )
            .err();
            assert!(
                matches!(refused, Some(MigrationError::Concurrency { concurrency: c }) if c == concurrency),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn a_device_without_an_address_has_no_endpoint() {
        let text = "format_version = 1\nepoch = 1\n\n[[devices]]\nid = 0\ncapacity = 1073741824\nweight = 1.0\nlocation = { host = \"h0\" }\n";
        let map = ServerMap::new(optio_mapfile::parse(text).expect("a map")).expect("compiled");
        let refused = endpoint(&map, 0).err();
        assert!(matches!(refused, Some(PeerError::NoAddress { device: 0 })), "{refused:?}");
        let absent = endpoint(&map, 7).err();
        assert!(matches!(absent, Some(PeerError::NoAddress { device: 7 })), "{absent:?}");
    }
}
