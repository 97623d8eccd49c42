//! The client: placement, choices, replication, epochs, repair.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use optio_cluster::source::MapSource;
use optio_placement::{ClusterMap, Placement, PoolId};
use optio_proto::{
    ChoiceRecord, DeviceMetrics, ErrorKind, ListQuery, Listing, ObjectInfo, ObjectVersion,
    checksum, validate_key,
};

use crate::cache::ChoiceCache;
use crate::candidates::{Candidate, candidates};
use crate::error::ClientError;
use crate::intent::IntentLog;
use crate::policy::{self, Policy};
use crate::transport::{Answer, Call, Endpoint, Failure, HttpTransport, Op, Transport};

#[path = "reintegrate.rs"]
mod reintegrate;
#[path = "transition.rs"]
mod transition;
pub use reintegrate::{ReintegrationConfig, ReintegrationMode, ReintegrationStatus};
pub use transition::STATUS_POLL_INTERVAL;
use transition::watch_map;

/// Attempts of one operation across epoch changes and lost races.
pub const RETRIES_MAX: usize = 8;
/// Wait before retrying after a server said our epoch is newer than its own.
const UNKNOWN_EPOCH_BACKOFF: Duration = Duration::from_millis(20);
/// Most pages of one device's listing.
const LIST_PAGES_MAX: usize = 10_000;

/// What the earlier attempts of one write learned: the candidates it gave up on because a
/// device refused the object for lack of room, and those devices (full for the next choice).
#[derive(Clone, Debug, Default)]
struct Excluded {
    candidates: Vec<u8>,
    full_devices: Vec<optio_placement::DeviceId>,
}

impl Excluded {
    fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }
}

/// How a client behaves.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// A policy overriding the pool's for this client's new objects (`first`, `random`,
    /// `local`, `memory`, `cpu`, `space`, `latency`, `journal`); `None`: the pool's. The number
    /// of candidates, k, is the pool's (`choices` in the map): every client must agree on it.
    pub policy: Option<String>,
    /// Where this client runs (`(type, name)` levels, root first), for the `local` policy.
    pub location: Vec<(String, String)>,
    /// Replicas that must acknowledge a write (w); `None`: all of the replica set.
    pub write_quorum: Option<usize>,
    /// Directory of intent logs (`None`: no intent log).
    pub intent_dir: Option<PathBuf>,
    /// Most objects in the choice cache.
    pub cache_entries_max: usize,
    /// Test hook: abort the process right after a choice record is created, before the
    /// object is written (the crash the intent log is for).
    pub crash_after_choice_record: bool,
    /// The dirty table: where writes and deletes to `elastic` pools that are not at full
    /// power are recorded before they are sent (selective re-integration reads it). Without
    /// one, such writes are refused.
    pub dirty: Option<Arc<optio_cluster::dirty::DirtyTable>>,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            policy: None,
            location: Vec::new(),
            write_quorum: None,
            intent_dir: None,
            cache_entries_max: crate::cache::CACHE_ENTRIES_MAX_DEFAULT,
            crash_after_choice_record: false,
            dirty: None,
        }
    }
}

/// Counters of what a client did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Probes sent (HEAD requests).
    pub probes: u64,
    /// Choice lookups answered by the cache.
    pub cache_hits: u64,
    /// Choice lookups that had to ask the servers.
    pub cache_misses: u64,
    /// Choice records created.
    pub records_created: u64,
    /// Times the map was reloaded after a stale-epoch refusal.
    pub map_refreshes: u64,
    /// Replicas repaired.
    pub repairs: u64,
    /// Corrupt replicas reported by servers.
    pub corrupt_replicas: u64,
}

#[derive(Debug, Default)]
struct Counters {
    probes: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    records_created: AtomicU64,
    map_refreshes: AtomicU64,
    repairs: AtomicU64,
    corrupt_replicas: AtomicU64,
}

/// The map and its compiled placement, and the one before it (while data may still be
/// moving from where that one placed it).
struct View {
    map: ClusterMap,
    placement: Placement,
    previous: Option<Arc<Previous>>,
}

/// The map held before the current one, compiled.
struct Previous {
    placement: Placement,
}

impl View {
    fn epoch(&self) -> u64 {
        self.map.epoch().0
    }

    fn pool(&self, name: &str) -> Result<PoolId, ClientError> {
        if let Some(pool) = self.map.pool_by_name(name) {
            return Ok(pool.id);
        }
        if let Ok(id) = name.parse::<u32>()
            && let Some(pool) = self.map.pool(PoolId(id))
        {
            return Ok(pool.id);
        }
        let known: Vec<&str> = self.map.pools().iter().map(|p| p.name.as_str()).collect();
        Err(ClientError::NoPool { pool: name.to_string(), known: known.join(", ") })
    }

    fn endpoint(&self, device: optio_placement::DeviceId) -> Result<Endpoint, ClientError> {
        let addr = self
            .map
            .device(device)
            .and_then(|d| d.addr.clone())
            .ok_or(ClientError::NoAddress { device: device.0 })?;
        Ok(Endpoint { device: device.0, addr })
    }
}

/// Where an object lives, as [`Client::stat`] reports it.
#[derive(Clone, Debug)]
pub struct ObjectLocation {
    /// The candidate holding it.
    pub candidate: Candidate,
    /// What its primary (or the first replica that answered) stores.
    pub info: ObjectInfo,
}

/// What a write did.
#[derive(Clone, Debug)]
pub struct PutReport {
    /// The candidate written.
    pub candidate: u8,
    /// The devices written, primary first.
    pub devices: Vec<u32>,
    /// Version written.
    pub version: ObjectVersion,
    /// Probes this write sent.
    pub probes: u32,
}

/// One candidate in a probe report.
#[derive(Clone, Debug)]
pub struct CandidateProbe {
    /// The candidate.
    pub candidate: Candidate,
    /// What its primary stores, if anything.
    pub info: Option<ObjectInfo>,
    /// The primary's metrics (`None`: unreachable).
    pub metrics: Option<DeviceMetrics>,
    /// Why the primary could not be probed.
    pub error: Option<String>,
}

/// What [`Client::probe`] found.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    /// Each candidate.
    pub candidates: Vec<CandidateProbe>,
    /// The choice record at the home, if any.
    pub record: Option<ChoiceRecord>,
    /// The candidate holding the object, if any.
    pub holder: Option<u8>,
}

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

/// The clever client. Cheap to clone (shares one connection pool, cache and map).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    source: MapSource,
    view: RwLock<Arc<View>>,
    transport: Arc<dyn Transport>,
    cache: ChoiceCache,
    intents: Option<IntentLog>,
    in_flight: AtomicUsize,
    device_metrics: Mutex<HashMap<u32, (DeviceMetrics, Instant)>>,
    counters: Counters,
    writer: u64,
    last_version: AtomicU64,
    config: ClientConfig,
    policy: Option<optio_placement::PolicySpec>,
    location: Option<optio_placement::choice::Location>,
    /// The newest epoch every server reported done moving data for.
    settled_epoch: AtomicU64,
}

/// Compiles a map for the client.
fn compile(map: ClusterMap, source: &MapSource) -> Result<View, ClientError> {
    let placement = Placement::new(&map)
        .map_err(|e| ClientError::Map { path: source.describe(), reason: e.to_string() })?;
    Ok(View { map, placement, previous: None })
}

async fn load_map(source: &MapSource) -> Result<View, ClientError> {
    let map = source
        .load()
        .await
        .map_err(|e| ClientError::Map { path: source.describe(), reason: e.to_string() })?;
    compile(map, source)
}

fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// An id for this client: unique enough across processes and restarts.
fn writer_id() -> u64 {
    let marker = 0u8;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(&std::process::id().to_le_bytes());
    hasher.update(&now_micros().to_le_bytes());
    hasher.update(&(std::ptr::addr_of!(marker) as usize).to_le_bytes());
    hasher.update(format!("{:?}", std::thread::current().id()).as_bytes());
    hasher.digest()
}

/// The candidate a write goes to.
#[derive(Clone, Copy, Debug)]
struct Chosen {
    candidate: u8,
    /// Set when this write created the choice record: the home's incarnation then. The
    /// write is acknowledged only once the home is known to have kept running (so kept
    /// the record) until the object was stored.
    created: Option<u64>,
}

/// What the home answered to a record request.
struct Recorded {
    candidate: u8,
    created: bool,
    incarnation: u64,
    home_info: Option<ObjectInfo>,
}

/// The engine input a candidate stands for, as stored in object headers (`x-optio-pg`): its
/// PG seed, or its placement key for pools without PGs.
fn placement_seed(candidate: &Candidate) -> u32 {
    candidate.pg.map(|pg| pg.seed).unwrap_or(candidate.placement_key)
}

/// A policy named by a client to override its pools': a built-in one, weights aside
/// (`composite` takes its weights from a pool in the map).
fn policy_override(name: &str) -> Result<optio_placement::PolicySpec, ClientError> {
    let spec = optio_placement::PolicySpec::from_name(name).ok_or_else(|| {
        ClientError::Config(format!(
            "unknown policy '{name}'; known: {}",
            policy::POLICY_NAMES.join(", ")
        ))
    })?;
    if matches!(spec, optio_placement::PolicySpec::Composite(_)) {
        return Err(ClientError::Config(
            "a client cannot override a pool's policy with 'composite' (it needs weights); set policy = \"composite\" and policy_weights on the pool in the map".into(),
        ));
    }
    Ok(spec)
}

/// The candidates whose primary did not answer its probe.
fn unanswered(candidates: &[Candidate], probes: &[Probed]) -> Vec<u8> {
    candidates.iter().zip(probes).filter(|(_, p)| p.answer.is_err()).map(|(c, _)| c.index).collect()
}

/// The candidate a stored object belongs to, from the seed in its header.
fn holder_of(candidates: &[Candidate], info: Option<&ObjectInfo>) -> Option<u8> {
    let seed = info?.pg_seed?;
    candidates.iter().find(|c| placement_seed(c) == seed).map(|c| c.index)
}

/// A first write that created its choice record and took less than this from the record
/// request to the last replica's acknowledgement needs no further check: a home that crashed
/// refuses new records for longer (`optio_server::records::RECORD_GRACE_AFTER_CRASH`, 2 s).
pub const RECORD_LEASE: Duration = Duration::from_secs(1);
/// How long a client waits for a home that refuses records just after a crash.
const HOME_GRACE_WAIT_MAX: Duration = Duration::from_secs(4);

/// How long metrics heard from a device stay fresh enough to choose on without probing.
pub const METRICS_FRESH: Duration = Duration::from_secs(2);

/// How one candidate's primary answered a probe.
struct Probed {
    answer: Result<Answer, Failure>,
}

impl Client {
    /// A client of the cluster whose map is the file `map_path` (see
    /// [`connect_source`](Self::connect_source)).
    pub async fn connect(map_path: &Path, config: ClientConfig) -> Result<Client, ClientError> {
        Client::connect_source(MapSource::file(map_path), config).await
    }

    /// A client of the cluster whose map lives in `source` (a file or etcd). It follows the
    /// map from then on: a new epoch is installed as soon as the store delivers it. Recovers
    /// the writes left in doubt by crashed clients when `config.intent_dir` is set.
    pub async fn connect_source(
        source: MapSource,
        config: ClientConfig,
    ) -> Result<Client, ClientError> {
        let policy = config.policy.as_deref().map(policy_override).transpose()?;
        let location = (!config.location.is_empty()).then(|| {
            optio_placement::choice::Location::from_levels(
                config.location.iter().map(|(t, n)| (t.as_str(), n.as_str())),
            )
        });
        let view = load_map(&source).await?;
        let transport = Arc::new(HttpTransport::new().map_err(ClientError::Config)?);
        let intents = match &config.intent_dir {
            Some(dir) => Some(IntentLog::open(dir).map_err(ClientError::IntentLog)?),
            None => None,
        };
        let client = Client {
            inner: Arc::new(Inner {
                source,
                view: RwLock::new(Arc::new(view)),
                transport,
                cache: ChoiceCache::new(config.cache_entries_max),
                intents,
                in_flight: AtomicUsize::new(0),
                device_metrics: Mutex::new(HashMap::new()),
                counters: Counters::default(),
                writer: writer_id(),
                last_version: AtomicU64::new(0),
                config,
                policy,
                location,
                settled_epoch: AtomicU64::new(0),
            }),
        };
        let epoch = client.epoch();
        tokio::spawn(watch_map(Arc::downgrade(&client.inner), epoch));
        if let Some(dir) = client.inner.config.intent_dir.clone() {
            client.recover(&dir).await?;
        }
        Ok(client)
    }

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

    /// Deletes copies of `key` on candidates other than the one its record (or probing)
    /// names: what a first write sent ahead of its record leaves when the client crashed
    /// before undoing it.
    async fn remove_strays(&self, pool_name: &str, key: &str) -> Result<(), ClientError> {
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
                Op::Delete { key, version: None, purge: true },
            ))
        });
        join_all(deletes).await;
        Ok(())
    }

    fn view(&self) -> Arc<View> {
        self.inner.view.read().expect("view lock").clone()
    }

    /// The map epoch the client holds.
    pub fn epoch(&self) -> u64 {
        self.view().epoch()
    }

    /// The map the client holds.
    pub fn map(&self) -> ClusterMap {
        self.view().map.clone()
    }

    /// This client's writer id (in the choice records it creates).
    pub fn writer(&self) -> u64 {
        self.inner.writer
    }

    /// Reads the map from its store now; returns whether the epoch advanced. (The client
    /// also follows the store by itself; this is for when a server says our epoch is stale.)
    pub async fn refresh(&self) -> Result<bool, ClientError> {
        let fresh = load_map(&self.inner.source).await?;
        Ok(self.install(fresh))
    }

    /// Installs a newer map, keeping the one held until now as the previous one: reads
    /// consult both placements until every server reports it has finished moving data for
    /// the new epoch.
    fn install(&self, mut fresh: View) -> bool {
        let mut view = self.inner.view.write().expect("view lock");
        if fresh.epoch() <= view.epoch() {
            return false;
        }
        tracing::info!(epoch = fresh.epoch(), previous = view.epoch(), "map refreshed");
        fresh.previous = Some(Arc::new(Previous { placement: view.placement.clone() }));
        *view = Arc::new(fresh);
        self.inner.counters.map_refreshes.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Where the map lives.
    pub fn source(&self) -> &MapSource {
        &self.inner.source
    }

    /// What the client did so far.
    pub fn stats(&self) -> ClientStats {
        let c = &self.inner.counters;
        ClientStats {
            probes: c.probes.load(Ordering::Relaxed),
            cache_hits: c.cache_hits.load(Ordering::Relaxed),
            cache_misses: c.cache_misses.load(Ordering::Relaxed),
            records_created: c.records_created.load(Ordering::Relaxed),
            map_refreshes: c.map_refreshes.load(Ordering::Relaxed),
            repairs: c.repairs.load(Ordering::Relaxed),
            corrupt_replicas: c.corrupt_replicas.load(Ordering::Relaxed),
        }
    }

    /// The choice cache (for measuring it).
    pub fn cache(&self) -> &ChoiceCache {
        &self.inner.cache
    }

    /// The latest metrics heard from each device.
    pub fn device_metrics(&self) -> BTreeMap<u32, DeviceMetrics> {
        self.inner
            .device_metrics
            .lock()
            .expect("metrics lock")
            .iter()
            .map(|(k, (m, _))| (*k, m.clone()))
            .collect()
    }

    /// The candidates of `key` in `pool`.
    pub fn candidates(&self, pool: &str, key: &str) -> Result<Vec<Candidate>, ClientError> {
        let view = self.view();
        let pool = view.pool(pool)?;
        Ok(self.candidates_in(&view, pool, key))
    }

    fn candidates_in(&self, view: &View, pool: PoolId, key: &str) -> Vec<Candidate> {
        let placement = view.placement.pool(pool).expect("pool ids come from this map");
        candidates(&view.placement, &placement, key).1
    }

    fn next_version(&self) -> ObjectVersion {
        let now = now_micros();
        let previous = self
            .inner
            .last_version
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| Some(now.max(last + 1)))
            .expect("the update always succeeds");
        ObjectVersion(now.max(previous + 1))
    }

    async fn call(&self, call: Call<'_>) -> Result<Answer, Failure> {
        let device = call.endpoint.device;
        // A record request answers as a probe of the home, so it counts as one.
        if call.op.is_probe() {
            self.inner.counters.probes.fetch_add(1, Ordering::Relaxed);
        }
        let result = self.inner.transport.send(call).await;
        let metrics = match &result {
            Ok(answer) => answer.metrics.clone(),
            Err((_, metrics)) => metrics.clone(),
        };
        if let Some(metrics) = metrics {
            let now = Instant::now();
            self.inner.device_metrics.lock().expect("metrics lock").insert(device, (metrics, now));
        }
        result.map_err(|(failure, _)| failure)
    }

    /// A call of `op` at `endpoint`, carrying the epoch of `view`.
    fn object_call<'a>(
        &self,
        view: &View,
        endpoint: &'a Endpoint,
        pool: PoolId,
        op: Op<'a>,
    ) -> Call<'a> {
        Call::new(endpoint, pool, view.epoch(), op)
    }

    /// Handles an epoch refusal: reloads the map (stale) or waits (the server lags).
    /// Returns whether the operation should be retried.
    async fn epoch_retry(&self, failures: &[&Failure]) -> Result<bool, ClientError> {
        let stale = failures.iter().any(|f| f.kind() == Some(ErrorKind::StaleEpoch));
        let unknown = failures.iter().any(|f| f.kind() == Some(ErrorKind::UnknownEpoch));
        if stale {
            self.refresh().await?;
            return Ok(true);
        }
        if unknown {
            tokio::time::sleep(UNKNOWN_EPOCH_BACKOFF).await;
            return Ok(true);
        }
        Ok(false)
    }

    /// Probes the primaries of `candidates` in parallel (the home asked for its record too).
    async fn probe_primaries(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
    ) -> Result<Vec<Probed>, ClientError> {
        let mut endpoints = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            let primary = candidate
                .primary()
                .ok_or_else(|| ClientError::NoDevices { key: key.to_string() })?;
            endpoints.push(view.endpoint(primary)?);
        }
        let calls = endpoints.iter().enumerate().map(|(i, endpoint)| {
            let probe = Op::Probe { key, want_choice: i == 0 };
            self.call(self.object_call(view, endpoint, pool, probe))
        });
        Ok(join_all(calls).await.into_iter().map(|answer| Probed { answer }).collect())
    }

    /// Which candidate holds `key`, without writing: the cache, else the home's record or
    /// object, else the other candidates (probed in parallel). `None`: nowhere.
    async fn locate(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
    ) -> Result<Option<u8>, ClientError> {
        if candidates.len() == 1 {
            return Ok(Some(0));
        }
        if let Some(c) = self.inner.cache.get(pool.0, key)
            && usize::from(c) < candidates.len()
        {
            self.inner.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(c));
        }
        self.inner.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
        if self.in_transition(view, pool) {
            return self.locate_careful(view, pool, key, candidates).await;
        }
        let home = self.probe_primaries(view, pool, key, &candidates[..1]).await?;
        let mut failures = Vec::new();
        match &home[0].answer {
            Ok(answer) => {
                if let Some(record) = answer.record
                    && usize::from(record.candidate) < candidates.len()
                {
                    self.inner.cache.insert(pool.0, key, record.candidate);
                    return Ok(Some(record.candidate));
                }
                if answer.status == 200 {
                    self.inner.cache.insert(pool.0, key, 0);
                    return Ok(Some(0));
                }
            }
            Err(failure) => failures.push(failure.clone()),
        }
        // No record at the home (or the home is unreachable): ask the others.
        let home_unreachable = !failures.is_empty();
        let others = self.probe_primaries(view, pool, key, &candidates[1..]).await?;
        for (i, probed) in others.iter().enumerate() {
            match &probed.answer {
                Ok(answer) if answer.status == 200 => {
                    let c = holder_of(candidates, answer.info.as_ref()).unwrap_or(i as u8 + 1);
                    self.inner.cache.insert(pool.0, key, c);
                    return Ok(Some(c));
                }
                Ok(_) => {}
                Err(failure) => failures.push(failure.clone()),
            }
        }
        let refs: Vec<&Failure> = failures.iter().collect();
        if self.epoch_retry(&refs).await? {
            return Err(ClientError::EpochRetries { attempts: 0 });
        }
        // With the home down, candidate 0's other replicas may still have it: read them.
        Ok(home_unreachable.then_some(0))
    }

    /// The candidate a write of `key` goes to, and whether the choice record this write
    /// created still has to become durable: the cache, else an existing record or object,
    /// else the policy's choice, recorded at the home.
    async fn choose_for_write(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        size_bytes: u64,
        excluded: &Excluded,
    ) -> Result<Chosen, ClientError> {
        if candidates.len() == 1 {
            return Ok(Chosen { candidate: 0, created: None });
        }
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
                self.choice_from_recent_metrics(view, pool, key, candidates, size_bytes)
        {
            return self.record_and_probe(view, pool, key, candidates, guess).await;
        }
        let probes = self.probe_primaries(view, pool, key, candidates).await?;
        let failures: Vec<&Failure> =
            probes.iter().filter_map(|p| p.answer.as_ref().err()).collect();
        if self.epoch_retry(&failures).await? {
            return Err(ClientError::EpochRetries { attempts: 0 });
        }
        if excluded.is_empty() {
            if let Ok(answer) = &probes[0].answer
                && let Some(record) = answer.record
                && usize::from(record.candidate) < candidates.len()
            {
                return Ok(Chosen { candidate: record.candidate, created: None });
            }
            let holder = probes.iter().enumerate().find_map(|(i, p)| match &p.answer {
                Ok(a) if a.status == 200 => {
                    Some(holder_of(candidates, a.info.as_ref()).unwrap_or(i as u8))
                }
                _ => None,
            });
            let unreachable: Vec<usize> =
                (0..probes.len()).filter(|&i| probes[i].answer.is_err()).collect();
            let holder = match holder {
                Some(holder) => Some(holder),
                None => self.probe_secondaries(view, pool, key, candidates, &unreachable).await?,
            };
            if let Some(holder) = holder {
                // Stored without a record (written at k = 1, or a record lost): record it.
                let recorded =
                    self.record_choice(view, pool, key, candidates, holder, false, false).await?;
                return Ok(Chosen { candidate: recorded.candidate, created: None });
            }
        }
        // The candidates given up on hold a device that refused the object: full, so the
        // library excludes them (and any other candidate on that device).
        let down = unanswered(candidates, &probes);
        let chosen = self
            .policy_choice(
                view,
                pool,
                key,
                candidates,
                size_bytes,
                &down,
                &excluded.full_devices,
                None,
            )
            .map_err(|details| ClientError::NoRoom { key: key.to_string(), size_bytes, details })?;
        let replace = !excluded.is_empty();
        let recorded =
            self.record_choice(view, pool, key, candidates, chosen as u8, replace, true).await?;
        Ok(Chosen {
            candidate: recorded.candidate,
            created: recorded.created.then_some(recorded.incarnation),
        })
    }

    /// For the candidates (indices) whose primary could not be probed: which one holds the
    /// object, asking their other replicas. A candidate none of whose replicas answers may
    /// hold it, so creating the object elsewhere is refused.
    async fn probe_secondaries(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        unreachable: &[usize],
    ) -> Result<Option<u8>, ClientError> {
        for &i in unreachable {
            let candidate = &candidates[i];
            let endpoints: Vec<Endpoint> = candidate
                .devices
                .iter()
                .skip(1)
                .map(|d| view.endpoint(*d))
                .collect::<Result<_, _>>()?;
            let answers = join_all(endpoints.iter().map(|e| {
                self.call(self.object_call(view, e, pool, Op::Probe { key, want_choice: false }))
            }))
            .await;
            if let Some(answer) = answers.iter().flatten().find(|a| a.status == 200) {
                return Ok(Some(holder_of(candidates, answer.info.as_ref()).unwrap_or(i as u8)));
            }
            if answers.iter().all(|a| a.is_err()) {
                return Err(ClientError::CandidateUnreachable {
                    key: key.to_string(),
                    candidate: i as u8,
                    devices: candidate.devices.iter().map(|d| d.0).collect(),
                });
            }
        }
        Ok(None)
    }

    /// Metrics heard within [`METRICS_FRESH`], by device.
    fn recent_metrics(&self) -> HashMap<u32, DeviceMetrics> {
        let table = self.inner.device_metrics.lock().expect("metrics lock");
        table
            .iter()
            .filter(|(_, (_, at))| at.elapsed() <= METRICS_FRESH)
            .map(|(d, (m, _))| (*d, m.clone()))
            .collect()
    }

    /// The policy's choice over recently heard metrics, when every candidate's primary was
    /// heard from within [`METRICS_FRESH`] (every answer carries its device's metrics).
    fn choice_from_recent_metrics(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        size_bytes: u64,
    ) -> Option<u8> {
        let metrics = self.recent_metrics();
        let fresh =
            candidates.iter().all(|c| c.primary().is_some_and(|p| metrics.contains_key(&p.0)));
        if !fresh {
            return None;
        }
        self.policy_choice(view, pool, key, candidates, size_bytes, &[], &[], None).ok()
    }

    /// The pool's policy (or `policy_override`, else this client's) over the metrics heard
    /// from the candidates' devices: the primaries of the `down` candidates did not answer,
    /// the `full` devices refused the object for lack of room. Err: why none can take it.
    #[allow(clippy::too_many_arguments)]
    fn policy_choice(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        size_bytes: u64,
        down: &[u8],
        full: &[optio_placement::DeviceId],
        policy_override: Option<&optio_placement::PolicySpec>,
    ) -> Result<u8, String> {
        let metrics = self.recent_metrics();
        let mut known: Vec<(optio_placement::DeviceId, policy::Known)> = Vec::new();
        for candidate in candidates {
            for (position, device) in candidate.devices.iter().enumerate() {
                let answered = !(position == 0 && down.contains(&candidate.index));
                match known.iter_mut().find(|(d, _)| d == device) {
                    Some((_, k)) => k.reachable &= answered,
                    None => known.push((
                        *device,
                        policy::Known {
                            metrics: metrics.get(&device.0).cloned(),
                            reachable: answered,
                            refused_full: full.contains(device),
                        },
                    )),
                }
            }
        }
        let table = policy::table(&view.map, known, size_bytes);
        let placement = view.placement.pool(pool).expect("pool ids come from this map");
        let (set, _) = crate::candidates::candidates(&view.placement, &placement, key);
        let request = optio_placement::choice::ChoiceRequest {
            policy: policy_override.or(self.inner.policy.as_ref()).map(|p| p as &dyn Policy),
            client: self.inner.location.as_ref(),
        };
        placement.choose(&set, &table, &request).map(|c| c.key.index).map_err(|e| e.to_string())
    }

    /// One round trip instead of two: creates the record for `guess` at the home (whose
    /// answer is also its probe) while probing the other candidates' primaries. A record
    /// already there wins; so does an object already stored without a record.
    async fn record_and_probe(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        guess: u8,
    ) -> Result<Chosen, ClientError> {
        let record = self.record_choice(view, pool, key, candidates, guess, false, true);
        let others = self.probe_primaries(view, pool, key, &candidates[1..]);
        let (recorded, others) = futures_util::future::join(record, others).await;
        let recorded = recorded?;
        let others = others?;
        if !recorded.created {
            return Ok(Chosen { candidate: recorded.candidate, created: None });
        }
        let holder = holder_of(candidates, recorded.home_info.as_ref()).or_else(|| {
            others.iter().enumerate().find_map(|(i, p)| match &p.answer {
                Ok(a) if a.status == 200 => {
                    Some(holder_of(candidates, a.info.as_ref()).unwrap_or(i as u8 + 1))
                }
                _ => None,
            })
        });
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
    async fn follow_holder(
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
        let answer = self.call(call).await.map_err(|failure| ClientError::HomeUnreachable {
            key: key.to_string(),
            device: home.device,
            addr: home.addr.clone(),
            reason: failure.to_string(),
        })?;
        Ok(Recorded {
            candidate: answer.record.map_or(holder, |r| r.candidate),
            created: answer.status == 201,
            incarnation: answer.incarnation.unwrap_or(0),
            home_info: answer.info,
        })
    }

    /// Creates the choice record at the home (atomic create-if-absent, or a replacement of
    /// this client's own record); returns the candidate recorded, which is another client's
    /// when it was first. With `defer_sync`, the home answers before committing the record
    /// (it is visible at once); the write then confirms the home did not restart.
    #[allow(clippy::too_many_arguments)]
    async fn record_choice(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
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
        let answer = match result {
            Ok(answer) => answer,
            Err(
                failure @ Failure::Refused {
                    kind: ErrorKind::StaleEpoch | ErrorKind::UnknownEpoch,
                    ..
                },
            ) => {
                self.epoch_retry(&[&failure]).await?;
                return Err(ClientError::EpochRetries { attempts: 0 });
            }
            Err(failure) => {
                return Err(ClientError::HomeUnreachable {
                    key: key.to_string(),
                    device: home.device,
                    addr: home.addr.clone(),
                    reason: failure.to_string(),
                });
            }
        };
        let created = answer.status == 201;
        let candidate = answer.record.map(|r| r.candidate).unwrap_or(chosen);
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

    /// Whether the home still holds the record this client created, in the same
    /// incarnation (it did not restart, so it did not lose the record before committing it).
    async fn confirm_record(
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

    fn home(
        &self,
        view: &View,
        key: &str,
        candidates: &[Candidate],
    ) -> Result<Endpoint, ClientError> {
        let device = candidates[0]
            .primary()
            .ok_or_else(|| ClientError::NoDevices { key: key.to_string() })?;
        view.endpoint(device)
    }

    /// Writes an object: r replicas on the chosen candidate's replica set, acknowledged when
    /// w of them (default all) are durable.
    pub async fn put(&self, pool: &str, key: &str, data: Bytes) -> Result<PutReport, ClientError> {
        validate_key(key)?;
        let intent = match &self.inner.intents {
            Some(log) => {
                Some(log.begin(self.view().pool(pool)?.0, key).map_err(ClientError::IntentLog)?)
            }
            None => None,
        };
        self.inner.in_flight.fetch_add(1, Ordering::AcqRel);
        let result = self.put_attempts(pool, key, data).await;
        let in_flight = self.inner.in_flight.fetch_sub(1, Ordering::AcqRel) - 1;
        if let (Some(log), Some(intent)) = (&self.inner.intents, intent) {
            log.end(intent);
            log.compact_if_idle(in_flight);
        }
        result
    }

    async fn put_attempts(
        &self,
        pool_name: &str,
        key: &str,
        data: Bytes,
    ) -> Result<PutReport, ClientError> {
        let crc = checksum(&data);
        let size_bytes = data.len() as u64;
        let mut excluded = Excluded::default();
        let mut dirty_noted = None;
        for _attempt in 0..RETRIES_MAX {
            let view = self.view();
            let pool = view.pool(pool_name)?;
            self.note_dirty(&view, pool, key, &mut dirty_noted).await?;
            let candidates = self.candidates_in(&view, pool, key);
            let probes_before = self.inner.counters.probes.load(Ordering::Relaxed);
            let started = Instant::now();
            let mut written = None;
            let chosen =
                match self.pipeline_guess(&view, pool, key, &candidates, size_bytes, &excluded) {
                    Some(guess) => {
                        // A warm client's first write: the record request, the other candidates'
                        // probes and the object's writes all leave at once. Should the home or a
                        // probe say the object belongs elsewhere, the copies are undone.
                        self.inner.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
                        let target = &candidates[usize::from(guess)];
                        let endpoints = self.endpoints(&view, target)?;
                        let version = self.next_version();
                        let (chosen, results) = futures_util::future::join(
                            self.record_and_probe(&view, pool, key, &candidates, guess),
                            self.fan_out(&view, pool, key, target, &endpoints, &data, crc, version),
                        )
                        .await;
                        if matches!(&chosen, Ok(c) if c.candidate == guess) {
                            written = Some((endpoints, results, version));
                        } else {
                            self.undo(&view, pool, key, &endpoints, &results, version).await;
                        }
                        chosen
                    }
                    None => {
                        self.choose_for_write(&view, pool, key, &candidates, size_bytes, &excluded)
                            .await
                    }
                };
            let Chosen { candidate: chosen, created } = match chosen {
                Err(ClientError::EpochRetries { .. }) => continue,
                other => other?,
            };
            let candidate = &candidates[usize::from(chosen)];
            let (endpoints, results, version) = match written {
                Some(written) => written,
                None => {
                    let endpoints = self.endpoints(&view, candidate)?;
                    let version = self.next_version();
                    let results = self
                        .fan_out(&view, pool, key, candidate, &endpoints, &data, crc, version)
                        .await;
                    (endpoints, results, version)
                }
            };
            let needed =
                self.inner.config.write_quorum.unwrap_or(endpoints.len()).clamp(1, endpoints.len());
            // A replica that already holds a newer version of the object (a concurrent write
            // of the same key) counts: last writer wins, and the newer version is durable.
            let acked = results
                .iter()
                .filter(|r| match r {
                    Ok(_) => true,
                    Err(f) => f.kind() == Some(ErrorKind::VersionConflict),
                })
                .count();
            let failures: Vec<(&Endpoint, &Failure)> = endpoints
                .iter()
                .zip(&results)
                .filter_map(|(e, r)| r.as_ref().err().map(|f| (e, f)))
                .filter(|(_, f)| f.kind() != Some(ErrorKind::VersionConflict))
                .collect();
            // A record this write created is safe once the object is stored, if the home did
            // not crash meanwhile: either the write took less than the lease (a home that
            // crashed refuses records for longer than that), or its incarnation is unchanged.
            if acked >= needed
                && let Some(incarnation) = created
                && started.elapsed() >= RECORD_LEASE
                && !self
                    .home_kept_record(&view, pool, key, &candidates, chosen, incarnation, &results)
                    .await
            {
                // The home restarted while we wrote: our record may be lost, and another
                // client may have chosen another candidate since. Undo, and start over.
                tracing::info!(key, "the home restarted during a first write; retrying");
                self.undo(&view, pool, key, &endpoints, &results, version).await;
                self.inner.cache.remove(pool.0, key);
                continue;
            }
            if acked >= needed {
                self.inner.cache.insert(pool.0, key, chosen);
                let probes = self.inner.counters.probes.load(Ordering::Relaxed) - probes_before;
                return Ok(PutReport {
                    candidate: chosen,
                    devices: candidate.devices.iter().map(|d| d.0).collect(),
                    version,
                    probes: probes as u32,
                });
            }
            let kinds: Vec<&Failure> = failures.iter().map(|(_, f)| *f).collect();
            if self.epoch_retry(&kinds).await? {
                continue;
            }
            if let Some((_, Failure::Refused { reason, .. })) =
                failures.iter().find(|(_, f)| f.kind() == Some(ErrorKind::TooLarge))
            {
                return Err(ClientError::TooLarge { key: key.to_string(), reason: reason.clone() });
            }
            let full = failures.iter().any(|(_, f)| f.kind() == Some(ErrorKind::Full));
            if full && candidates.len() > 1 && excluded.candidates.len() + 1 < candidates.len() {
                // Steer around the full device: undo what was written, choose again.
                self.undo(&view, pool, key, &endpoints, &results, version).await;
                self.inner.cache.remove(pool.0, key);
                excluded.candidates.push(chosen);
                excluded.full_devices.extend(
                    failures
                        .iter()
                        .filter(|(_, f)| f.kind() == Some(ErrorKind::Full))
                        .map(|(e, _)| optio_placement::DeviceId(e.device)),
                );
                continue;
            }
            let details: Vec<String> = failures
                .iter()
                .map(|(e, f)| format!("device {} at {}: {f}", e.device, e.addr))
                .collect();
            if full {
                return Err(ClientError::NoRoom {
                    key: key.to_string(),
                    size_bytes,
                    details: details.join("; "),
                });
            }
            return Err(ClientError::NotEnoughReplicas {
                key: key.to_string(),
                acked,
                needed,
                failures: details.join("; "),
            });
        }
        Err(ClientError::EpochRetries { attempts: RETRIES_MAX })
    }

    /// The candidate a warm client writes a new object to at once (with its record request),
    /// or `None` when the write goes the careful way: k = 1, a cached choice, a re-choice, or
    /// metrics too old to choose on.
    fn pipeline_guess(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        size_bytes: u64,
        excluded: &Excluded,
    ) -> Option<u8> {
        if candidates.len() < 2
            || !excluded.is_empty()
            || self.inner.cache.get(pool.0, key).is_some()
        {
            return None;
        }
        self.choice_from_recent_metrics(view, pool, key, candidates, size_bytes)
    }

    fn endpoints(&self, view: &View, candidate: &Candidate) -> Result<Vec<Endpoint>, ClientError> {
        if candidate.devices.is_empty() {
            return Err(ClientError::NoDevices { key: String::new() });
        }
        candidate.devices.iter().map(|d| view.endpoint(*d)).collect()
    }

    /// Writes one version of the object to every replica of `candidate`, in parallel.
    #[allow(clippy::too_many_arguments)]
    async fn fan_out(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidate: &Candidate,
        endpoints: &[Endpoint],
        data: &Bytes,
        crc: u32,
        version: ObjectVersion,
    ) -> Vec<Result<Answer, Failure>> {
        let calls = endpoints.iter().map(|endpoint| {
            let put = Op::Put {
                key,
                data: data.clone(),
                version,
                checksum: crc,
                pg_seed: Some(placement_seed(candidate)),
            };
            self.call(self.object_call(view, endpoint, pool, put))
        });
        join_all(calls).await
    }

    /// After a first write whose record this client created: whether the home kept running
    /// (same incarnation) until the object was stored. When the home is the chosen
    /// candidate's primary, its answer to the object's write says so at no cost; otherwise
    /// one more round trip asks it.
    #[allow(clippy::too_many_arguments)]
    async fn home_kept_record(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        chosen: u8,
        incarnation: u64,
        results: &[Result<Answer, Failure>],
    ) -> bool {
        let candidate = &candidates[usize::from(chosen)];
        if candidate.primary() == candidates[0].primary()
            && let Some(Ok(answer)) = results.first()
            && answer.incarnation == Some(incarnation)
        {
            return true;
        }
        self.confirm_record(view, pool, key, candidates, chosen, incarnation).await
    }

    /// Removes the replicas of a write that could not complete (only that version).
    async fn undo(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        endpoints: &[Endpoint],
        results: &[Result<Answer, Failure>],
        version: ObjectVersion,
    ) {
        let calls =
            endpoints.iter().zip(results).filter(|(_, r)| r.is_ok()).map(|(endpoint, _)| {
                let purge = Op::Delete { key, version: Some(version), purge: true };
                self.call(self.object_call(view, endpoint, pool, purge))
            });
        join_all(calls).await;
    }

    /// Reads an object.
    pub async fn get(&self, pool: &str, key: &str) -> Result<Bytes, ClientError> {
        self.get_range(pool, key, None).await.map(|(_, data)| data)
    }

    /// Reads an object, or the inclusive byte range `range` of it; verifies the checksum and
    /// repairs replicas found corrupt or missing from a good one.
    pub async fn get_range(
        &self,
        pool_name: &str,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(ObjectInfo, Bytes), ClientError> {
        validate_key(key)?;
        let mut relocated = false;
        for _attempt in 0..RETRIES_MAX {
            let view = self.view();
            let pool = view.pool(pool_name)?;
            let candidates = self.candidates_in(&view, pool, key);
            let chosen = match self.locate(&view, pool, key, &candidates).await {
                Err(ClientError::EpochRetries { .. }) => continue,
                other => other?,
            };
            let Some(chosen) = chosen else {
                return Err(ClientError::NotFound {
                    pool: pool_name.to_string(),
                    key: key.to_string(),
                });
            };
            let candidate = &candidates[usize::from(chosen)];
            let read = if self.in_transition(&view, pool) {
                self.read_careful(&view, pool, key, candidate, range).await
            } else {
                self.read_replicas(&view, pool, key, candidate, range).await
            };
            match read {
                Ok(found) => return Ok(found),
                Err(ReadError::Retry) => continue,
                Err(ReadError::Missing) if !relocated && candidates.len() > 1 => {
                    // A stale cache entry (or fingerprint collision): ask the home again.
                    self.inner.cache.remove(pool.0, key);
                    relocated = true;
                }
                Err(ReadError::Missing) => {
                    return Err(ClientError::NotFound {
                        pool: pool_name.to_string(),
                        key: key.to_string(),
                    });
                }
                Err(ReadError::Failed(error)) => return Err(error),
            }
        }
        Err(ClientError::EpochRetries { attempts: RETRIES_MAX })
    }

    async fn read_replicas(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidate: &Candidate,
        range: Option<(u64, u64)>,
    ) -> Result<(ObjectInfo, Bytes), ReadError> {
        let mut damaged: Vec<Endpoint> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        let mut epoch_failures: Vec<Failure> = Vec::new();
        let mut missing = 0usize;
        for device in &candidate.devices {
            let endpoint = view.endpoint(*device).map_err(ReadError::Failed)?;
            // Ranges are read whole when a repair may be needed, so the checksum is checked.
            let ranged = range.filter(|_| damaged.is_empty());
            let call = self.object_call(view, &endpoint, pool, Op::Get { key, range: ranged });
            match self.call(call).await {
                Ok(answer) => {
                    let Some(info) = answer.info.clone() else {
                        failures.push(format!(
                            "device {}: answer without object headers",
                            endpoint.device
                        ));
                        continue;
                    };
                    if ranged.is_none() && checksum(&answer.body) != info.checksum {
                        self.inner.counters.corrupt_replicas.fetch_add(1, Ordering::Relaxed);
                        failures
                            .push(format!("device {}: data damaged in transit", endpoint.device));
                        continue;
                    }
                    if !damaged.is_empty() {
                        self.repair(view, pool, key, &damaged, (&info, &answer.body), candidate)
                            .await;
                    }
                    let body = match (range, ranged) {
                        (Some((start, end)), None) => {
                            let end = end.min(info.size_bytes.saturating_sub(1));
                            if start > end || start >= info.size_bytes {
                                return Err(ReadError::Failed(ClientError::Refused {
                                    device: endpoint.device,
                                    kind: ErrorKind::BadRequest,
                                    reason: format!(
                                        "range {start}-{end} is outside the object's {} bytes",
                                        info.size_bytes
                                    ),
                                }));
                            }
                            answer.body.slice(start as usize..=end as usize)
                        }
                        _ => answer.body,
                    };
                    return Ok((info, body));
                }
                Err(failure) => {
                    match failure.kind() {
                        Some(ErrorKind::Corrupt) => {
                            self.inner.counters.corrupt_replicas.fetch_add(1, Ordering::Relaxed);
                            damaged.push(endpoint.clone());
                        }
                        Some(ErrorKind::NotFound) => {
                            missing += 1;
                            damaged.push(endpoint.clone());
                        }
                        Some(ErrorKind::StaleEpoch | ErrorKind::UnknownEpoch) => {
                            epoch_failures.push(failure.clone())
                        }
                        Some(ErrorKind::BadRequest) => {
                            return Err(ReadError::Failed(ClientError::Refused {
                                device: endpoint.device,
                                kind: ErrorKind::BadRequest,
                                reason: failure.to_string(),
                            }));
                        }
                        _ => {}
                    }
                    failures.push(format!(
                        "device {} at {}: {failure}",
                        endpoint.device, endpoint.addr
                    ));
                }
            }
        }
        if !epoch_failures.is_empty() {
            let refs: Vec<&Failure> = epoch_failures.iter().collect();
            if self.epoch_retry(&refs).await.map_err(ReadError::Failed)? {
                return Err(ReadError::Retry);
            }
        }
        if missing == candidate.devices.len() {
            return Err(ReadError::Missing);
        }
        Err(ReadError::Failed(ClientError::Unreadable {
            key: key.to_string(),
            failures: failures.join("; "),
        }))
    }

    /// Writes the good copy (same version) to replicas found damaged or missing.
    async fn repair(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        targets: &[Endpoint],
        (info, data): (&ObjectInfo, &Bytes),
        candidate: &Candidate,
    ) -> Vec<(u32, Result<(), String>)> {
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
                let outcome = result.map(|_| ()).map_err(|f| f.to_string());
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
        let mut best: Option<(ObjectInfo, Bytes)> = None;
        let mut states: Vec<Option<ReplicaState>> = vec![None; endpoints.len()];
        for (i, result) in results.iter().enumerate() {
            match result {
                Ok(answer) => match &answer.info {
                    Some(info) if checksum(&answer.body) == info.checksum => {
                        if best.as_ref().is_none_or(|(b, _)| {
                            (info.version, info.checksum) > (b.version, b.checksum)
                        }) {
                            best = Some((info.clone(), answer.body.clone()));
                        }
                    }
                    _ => states[i] = Some(ReplicaState::Repaired("damaged in transit".into())),
                },
                Err(Failure::Unreachable(reason)) => {
                    states[i] = Some(ReplicaState::Failed(format!("unreachable: {reason}")))
                }
                Err(failure) => states[i] = Some(ReplicaState::Repaired(failure.to_string())),
            }
        }
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
                states[i] = Some(ReplicaState::Failed(reason));
            }
        }
        Ok(endpoints
            .iter()
            .zip(states)
            .map(|(e, s)| (e.device, s.unwrap_or(ReplicaState::Good)))
            .collect())
    }

    /// Removes an object (every replica, then its choice record).
    pub async fn delete(&self, pool_name: &str, key: &str) -> Result<(), ClientError> {
        validate_key(key)?;
        let mut dirty_noted = None;
        for _attempt in 0..RETRIES_MAX {
            let view = self.view();
            let pool = view.pool(pool_name)?;
            let candidates = self.candidates_in(&view, pool, key);
            let chosen = match self.locate(&view, pool, key, &candidates).await {
                Err(ClientError::EpochRetries { .. }) => continue,
                other => other?,
            };
            let Some(chosen) = chosen else {
                return Err(ClientError::NotFound {
                    pool: pool_name.to_string(),
                    key: key.to_string(),
                });
            };
            self.note_dirty(&view, pool, key, &mut dirty_noted).await?;
            let candidate = &candidates[usize::from(chosen)];
            // While data moves, every device that may hold a copy gets the tombstone.
            let devices = if self.in_transition(&view, pool) {
                self.transition_devices(&view, pool, candidate)
            } else {
                candidate.devices.clone()
            };
            let endpoints: Vec<Endpoint> =
                devices.iter().map(|d| view.endpoint(*d)).collect::<Result<_, _>>()?;
            let version = self.next_version();
            let results = join_all(endpoints.iter().map(|e| {
                let delete = Op::Delete { key, version: Some(version), purge: false };
                self.call(self.object_call(&view, e, pool, delete))
            }))
            .await;
            let failures: Vec<&Failure> = results.iter().filter_map(|r| r.as_ref().err()).collect();
            if self.epoch_retry(&failures).await? {
                continue;
            }
            let deleted = results.iter().filter(|r| r.is_ok()).count();
            let hard: Vec<String> = failures
                .iter()
                .filter(|f| f.kind() != Some(ErrorKind::NotFound))
                .map(|f| f.to_string())
                .collect();
            if !hard.is_empty() {
                return Err(ClientError::NotEnoughReplicas {
                    key: key.to_string(),
                    acked: deleted,
                    needed: endpoints.len(),
                    failures: hard.join("; "),
                });
            }
            if candidates.len() > 1
                && let Some(home) = candidates[0].primary()
            {
                let home = view.endpoint(home)?;
                let _ =
                    self.call(self.object_call(&view, &home, pool, Op::DeleteRecord { key })).await;
            }
            self.inner.cache.remove(pool.0, key);
            if deleted == 0 {
                return Err(ClientError::NotFound {
                    pool: pool_name.to_string(),
                    key: key.to_string(),
                });
            }
            return Ok(());
        }
        Err(ClientError::EpochRetries { attempts: RETRIES_MAX })
    }

    /// Where an object lives and what is stored.
    pub async fn stat(&self, pool_name: &str, key: &str) -> Result<ObjectLocation, ClientError> {
        validate_key(key)?;
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        let not_found =
            || ClientError::NotFound { pool: pool_name.to_string(), key: key.to_string() };
        let chosen = self.locate(&view, pool, key, &candidates).await?.ok_or_else(not_found)?;
        let candidate = candidates[usize::from(chosen)].clone();
        for device in &candidate.devices {
            let endpoint = view.endpoint(*device)?;
            if let Ok(answer) = self
                .call(self.object_call(
                    &view,
                    &endpoint,
                    pool,
                    Op::Probe { key, want_choice: false },
                ))
                .await
                && let Some(info) = answer.info
            {
                return Ok(ObjectLocation { candidate, info });
            }
        }
        Err(not_found())
    }

    /// Probes every candidate's primary (and the home's record): which candidate holds the
    /// object and each candidate's metrics.
    pub async fn probe(&self, pool_name: &str, key: &str) -> Result<ProbeReport, ClientError> {
        validate_key(key)?;
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        let probes = self.probe_primaries(&view, pool, key, &candidates).await?;
        let mut record = None;
        let mut holder = None;
        let mut out = Vec::new();
        for (candidate, probed) in candidates.into_iter().zip(probes) {
            let (info, metrics, error) = match probed.answer {
                Ok(answer) => {
                    if candidate.index == 0 {
                        record = answer.record;
                    }
                    let info = (answer.status == 200).then_some(answer.info).flatten();
                    (info, answer.metrics, None)
                }
                Err(failure) => (None, None, Some(failure.to_string())),
            };
            if info.is_some() && holder.is_none() {
                holder = Some(candidate.index);
            }
            out.push(CandidateProbe { candidate, info, metrics, error });
        }
        if let Some(record) = record {
            holder = Some(record.candidate);
        }
        Ok(ProbeReport { candidates: out, record, holder })
    }

    /// Which candidate `policy` (default: this client's, else the pool's) would choose for a
    /// new object `key` of `size_bytes`, on metrics fresh from probing the candidates.
    pub async fn policy_pick(
        &self,
        pool_name: &str,
        key: &str,
        size_bytes: u64,
        policy: Option<&str>,
    ) -> Result<u8, ClientError> {
        let spec = policy.map(policy_override).transpose()?;
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        let probes = self.probe_primaries(&view, pool, key, &candidates).await?;
        let down = unanswered(&candidates, &probes);
        self.policy_choice(&view, pool, key, &candidates, size_bytes, &down, &[], spec.as_ref())
            .map_err(|details| ClientError::NoRoom { key: key.to_string(), size_bytes, details })
    }

    /// Probes the primary of candidate 0 once (a probe round trip), returning whether the
    /// object exists there.
    pub async fn probe_once(&self, pool_name: &str, key: &str) -> Result<bool, ClientError> {
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        let probes = self.probe_primaries(&view, pool, key, &candidates[..1]).await?;
        match &probes[0].answer {
            Ok(answer) => Ok(answer.status == 200),
            Err(failure) => Err(ClientError::Refused {
                device: candidates[0].primary().map_or(0, |d| d.0),
                kind: failure.kind().unwrap_or(ErrorKind::Io),
                reason: failure.to_string(),
            }),
        }
    }

    /// Objects in a pool whose keys start with `prefix`, from every device (replicas merged,
    /// newest version shown), in key order.
    pub async fn list(
        &self,
        pool_name: &str,
        prefix: &str,
    ) -> Result<Vec<ObjectInfo>, ClientError> {
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let mut endpoints = Vec::new();
        for device in view.map.devices() {
            if device.up && device.addr.is_some() {
                endpoints.push(view.endpoint(device.id)?);
            }
        }
        let lists =
            endpoints.iter().map(|endpoint| self.list_device(&view, pool, endpoint, prefix));
        let mut merged: BTreeMap<String, ObjectInfo> = BTreeMap::new();
        for result in join_all(lists).await {
            for info in result? {
                match merged.get(&info.key) {
                    Some(old) if old.version >= info.version => {}
                    _ => {
                        merged.insert(info.key.clone(), info);
                    }
                }
            }
        }
        Ok(merged.into_values().collect())
    }

    async fn list_device(
        &self,
        view: &View,
        pool: PoolId,
        endpoint: &Endpoint,
        prefix: &str,
    ) -> Result<Vec<ObjectInfo>, ClientError> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        for _page in 0..LIST_PAGES_MAX {
            let query = ListQuery {
                prefix: Some(prefix.to_string()),
                after: after.clone(),
                ..ListQuery::default()
            };
            let call = self.object_call(view, endpoint, pool, Op::List(query));
            let answer = self.call(call).await.map_err(|f| ClientError::Refused {
                device: endpoint.device,
                kind: f.kind().unwrap_or(ErrorKind::Io),
                reason: f.to_string(),
            })?;
            let listing: Listing =
                serde_json::from_slice(&answer.body).map_err(|e| ClientError::Refused {
                    device: endpoint.device,
                    kind: ErrorKind::Io,
                    reason: format!("bad listing: {e}"),
                })?;
            after = listing.objects.last().map(|o| o.key.clone());
            out.extend(listing.objects);
            if !listing.truncated || after.is_none() {
                break;
            }
        }
        Ok(out)
    }
}

enum ReadError {
    Retry,
    Missing,
    Failed(ClientError),
}

#[cfg(test)]
mod tests {
    use optio_placement::DeviceId;

    use super::*;

    /// A client of a map of 6 devices on 6 hosts whose pools `data` (crush) and `blobs` (ring)
    /// have the given k and policy, and `plain` has none. No server listens: nothing here
    /// sends a request.
    async fn client(dir: &Path, choices: u32, policy: &str, own: Option<&str>) -> Client {
        let mut text = String::from("format_version = 1\nepoch = 1\n\n");
        for id in 0..6 {
            text.push_str(&format!(
                "[[devices]]\nid = {id}\ncapacity = 1073741824\nweight = 1.0\naddr = \"127.0.0.1:9\"\nlocation = {{ zone = \"z1\", host = \"h{id}\" }}\n\n"
            ));
        }
        text.push_str(&format!(
            "[[rules]]\nid = 0\nname = \"by_host\"\nsteps = [\"take default\", \"chooseleaf firstn 0 type host\", \"emit\"]\n\n\
             [[pools]]\nid = 1\nname = \"data\"\nengine = \"crush\"\nrule = \"by_host\"\npg_num = 64\nsize = 3\nchoices = {choices}\npolicy = \"{policy}\"\n\n\
             [[pools]]\nid = 2\nname = \"blobs\"\nengine = \"ring\"\nsize = 3\nvnode_bytes = 16777216\nfailure_domain = \"host\"\nchoices = {choices}\npolicy = \"{policy}\"\n\n\
             [[pools]]\nid = 3\nname = \"plain\"\nengine = \"crush\"\nrule = \"by_host\"\npg_num = 64\nsize = 3\n"
        ));
        let path = dir.join("map.toml");
        std::fs::write(&path, text).expect("write the map");
        let config = ClientConfig { policy: own.map(str::to_string), ..ClientConfig::default() };
        Client::connect(&path, config).await.expect("connect")
    }

    /// Metrics from every device, `space_permille` of device d being `space(d)`.
    fn hear(client: &Client, space: impl Fn(u32) -> u16) {
        let mut table = client.inner.device_metrics.lock().unwrap();
        for device in 0..6 {
            let metrics = DeviceMetrics {
                device,
                space_permille: space(device),
                capacity_bytes: 1 << 30,
                ..DeviceMetrics::default()
            };
            table.insert(device, (metrics, Instant::now()));
        }
    }

    fn choose(client: &Client, pool: &str, key: &str, down: &[u8], full: &[u32]) -> Option<u8> {
        let view = client.view();
        let pool = view.pool(pool).unwrap();
        let candidates = client.candidates_in(&view, pool, key);
        let full: Vec<DeviceId> = full.iter().map(|&d| DeviceId(d)).collect();
        client.policy_choice(&view, pool, key, &candidates, 1, down, &full, None).ok()
    }

    #[tokio::test]
    async fn k_and_the_policy_are_the_pools_unless_overridden() {
        let dir = tempfile::tempdir().unwrap();
        let pooled = client(dir.path(), 3, "space", None).await;
        let first = client(dir.path(), 3, "space", Some("first")).await;
        for pool in ["data", "blobs"] {
            let mut moved = 0;
            for i in 0..50 {
                let key = format!("object-{i}");
                let candidates = pooled.candidates(pool, &key).unwrap();
                assert_eq!(candidates.len(), 3, "k = 3, from the map");
                assert_eq!(
                    first.candidates(pool, &key).unwrap(),
                    candidates,
                    "an override keeps k"
                );
                // Candidate 0's devices fuller than the others: `space` moves the object
                // whenever another candidate avoids them, `first` never does.
                let home: Vec<u32> = candidates[0].devices.iter().map(|d| d.0).collect();
                let space = |d: u32| if home.contains(&d) { 700 } else { 100 };
                hear(&pooled, space);
                hear(&first, space);
                let spare = candidates[1..]
                    .iter()
                    .position(|c| c.devices.iter().all(|d| !home.contains(&d.0)))
                    .map(|p| p as u8 + 1);
                assert_eq!(
                    choose(&pooled, pool, &key, &[], &[]),
                    Some(spare.unwrap_or(0)),
                    "{key}"
                );
                assert_eq!(choose(&first, pool, &key, &[], &[]), Some(0), "{key}");
                moved += usize::from(spare.is_some());
            }
            assert!(moved > 0, "{pool}: some object had a candidate away from its home's devices");
        }
        assert_eq!(pooled.candidates("plain", "object-0").unwrap().len(), 1, "k = 1 by default");
    }

    #[tokio::test]
    async fn a_refused_write_excludes_only_the_candidates_on_the_full_device() {
        let dir = tempfile::tempdir().unwrap();
        let client = client(dir.path(), 2, "first", None).await;
        hear(&client, |_| 100);
        // A key whose home's primary is also in candidate 1, while another of the home's
        // devices is not: that one refusing the object must not exclude candidate 1.
        let (key, refusing) = (0..1000)
            .find_map(|i| {
                let key = format!("object-{i}");
                let c = client.candidates("data", &key).unwrap();
                let (home, other) = (&c[0].devices, &c[1].devices);
                let refusing = home.iter().find(|d| !other.contains(d))?;
                other[1..].contains(&home[0]).then_some((key, refusing.0))
            })
            .expect("such a key");
        assert_eq!(choose(&client, "data", &key, &[], &[]), Some(0), "first: the home");
        assert_eq!(choose(&client, "data", &key, &[], &[refusing]), Some(1));
        let shared = client.candidates("data", &key).unwrap()[0].devices[0].0;
        assert_eq!(choose(&client, "data", &key, &[], &[shared]), None, "both are on it");
        // The home's primary did not answer: candidate 1 has it as a replica, so it is down
        // for both.
        assert_eq!(choose(&client, "data", &key, &[0], &[]), None);
        // A device too full for the object excludes its candidates as a refusal does.
        hear(&client, |d| if d == refusing { 999 } else { 100 });
        assert_eq!(choose(&client, "data", &key, &[], &[]), Some(1));
    }

    #[tokio::test]
    async fn a_client_cannot_override_with_an_unknown_or_weightless_policy() {
        let dir = tempfile::tempdir().unwrap();
        client(dir.path(), 2, "first", None).await;
        let path = dir.path().join("map.toml");
        for (name, says) in [("fastest", "unknown policy 'fastest'"), ("composite", "weights")] {
            let config = ClientConfig { policy: Some(name.into()), ..ClientConfig::default() };
            let error = Client::connect(&path, config).await.err().expect("refused");
            assert!(error.to_string().contains(says), "{error}");
        }
    }
}
