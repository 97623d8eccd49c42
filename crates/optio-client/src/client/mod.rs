//! The client: the map it follows, the calls it sends, and one operation per module —
//! [`locate`] (candidates, the choice cache, probes), [`choose`] (where a new object goes,
//! recorded at its home), [`write`], [`read`] (careful reads across transitions), [`delete`],
//! [`repair`], [`list`], [`transition`] (while data moves) and [`reintegrate`].

mod choose;
mod delete;
mod erasure;
mod inplace;
mod list;
mod local;
mod locate;
mod read;
mod reintegrate;
mod repair;
mod snapclone;
mod transition;
mod write;

pub use inplace::{Patch, Written};
pub use list::ListCursor;
pub use local::{LocalFile, LocalMiss};
pub use locate::{CandidateProbe, ObjectLocation, ProbeReport};
pub use read::{RECOVERING_BACKOFF_MAX, RECOVERING_BACKOFF_MIN, RECOVERING_RETRIES_MAX};
pub use reintegrate::{
    BROUGHT_BACK_TRACKED_MAX, ReadFailure, Reintegration, ReintegrationConfig, ReintegrationError,
    ReintegrationMode, ReintegrationStatus,
};
pub use repair::ReplicaState;
pub use snapclone::CloneToTrim;
pub use transition::STATUS_POLL_INTERVAL;
pub use write::PutReport;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use optio_cluster::follow::{Followed, MapFollower};
use optio_cluster::source::MapSource;
use optio_placement::{ClusterMap, Placement, PoolId};
use optio_proto::{DeviceMetrics, ErrorKind, ObjectVersion};

use crate::cache::ChoiceCache;
use crate::error::ClientError;
use crate::intent::IntentLog;
use crate::policy;
use crate::transport::{Answer, Call, Endpoint, Failure, HttpTransport, Op, Transport};

use transition::watch_settling;

/// Attempts of one operation across epoch changes and lost races.
pub const RETRIES_MAX: usize = 8;

/// Wait before retrying after a server said our epoch is newer than its own.
const UNKNOWN_EPOCH_BACKOFF: Duration = Duration::from_millis(20);
/// How long a refused connection counts as a sign that a server is not running.
const REFUSED_FRESH: Duration = Duration::from_secs(10);
/// The longest a write waits for the map to mark down a server that refuses connections,
/// when the choice of a new object needs it (its home, or every candidate, on that server).
const DOWN_WAIT_MAX: Duration = Duration::from_secs(5);

/// How a client behaves.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// A policy overriding the pool's for this client's new objects (`first`, `random`,
    /// `local`, `memory`, `cpu`, `space`, `latency`, `journal`); `None`: the pool's. The number
    /// of candidates, k, is the pool's (`choices` in the map): every client must agree on it.
    pub policy: Option<String>,
    /// Where this client runs (`(type, name)` levels, root first), for the `local` policy.
    pub location: Vec<(String, String)>,
    /// The fewest durable copies a write needs (w), instead of the pool's `min_size`.
    /// Every replica whose server is running is always written and must acknowledge; only
    /// replicas whose servers are not running are gone around, down to w.
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
    /// The identity requests are signed with (none: unsigned, for servers without auth).
    pub credentials: Option<optio_proto::auth::Credentials>,
    /// The certificate authority to trust: talk TLS to the servers (none: plain HTTP).
    pub tls_ca: Option<PathBuf>,
    /// A client certificate and its key (PEM) shown to the servers (mutual TLS): with no
    /// `credentials`, the servers take the certificate's common name as the entity.
    pub tls_identity: Option<(PathBuf, PathBuf)>,
    /// Local reads (a block object's file opened through its server's local socket) only from
    /// servers of these hosts (their `host` level in the map); `None`: from any server on this
    /// machine. An emulated cluster runs every host on one machine, where only a client's own
    /// host is local.
    pub local_read_hosts: Option<Vec<String>>,
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
            credentials: None,
            tls_ca: None,
            tls_identity: None,
            local_read_hosts: None,
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
    /// Writes acknowledged without a replica whose server was not running (degraded: that
    /// replica catches up when it returns).
    pub degraded_writes: u64,
    /// The newest epoch every server reported done moving data for: below the map's epoch,
    /// reads and deletes ask every device that may hold a copy, not only the replicas the
    /// current map names.
    pub settled_epoch: u64,
}

#[derive(Debug, Default)]
struct Counters {
    probes: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    records_created: AtomicU64,
    repairs: AtomicU64,
    corrupt_replicas: AtomicU64,
    degraded_writes: AtomicU64,
}

/// The map and its compiled placement, and the placements of the maps before it that data
/// may still be on (while servers move data).
struct View {
    map: ClusterMap,
    placement: Arc<Placement>,
    /// The maps since the last one every server finished moving data to (that one included),
    /// oldest first: until the servers are done with this map, a copy may still be where any
    /// of them placed it. A second map change before the first settled keeps the first's
    /// placement here (not only the one just before).
    previous: Vec<Previous>,
    /// The client does not know every map data may still be on: this is the first map it
    /// loaded (a client that starts during rebalancing), a map that followed such a one
    /// before the servers settled, a map more than one epoch after the one held (the client
    /// missed one), or more than [`PREVIOUS_MAX`] maps came in a row without settling. While
    /// servers still move data for this epoch, a copy may be on any device.
    previous_unknown: bool,
    /// The newest epoch every server reported done moving data for; shared by every view
    /// of one client.
    settled: Arc<AtomicU64>,
    /// Candidates computed under this map, by (pool, key): a volume's objects and hot keys
    /// are asked for again and again, and CRUSH for k candidates costs more than a lookup.
    candidates: Mutex<HashMap<PoolId, HashMap<String, Vec<crate::Candidate>>>>,
}

/// Keys per pool whose candidates a view keeps (past it the pool's memo starts again).
const CANDIDATES_KEPT: usize = 8192;

/// A map held before the current one, compiled.
#[derive(Clone)]
struct Previous {
    epoch: u64,
    placement: Arc<Placement>,
}

/// How many earlier placements a view keeps while servers have not settled; past it the
/// client reads as if a copy could be on any device.
const PREVIOUS_MAX: usize = 16;

impl View {
    fn epoch(&self) -> u64 {
        self.map.epoch().0
    }

    /// The earlier maps data may still be on: those since the newest epoch every server
    /// reported done with (that one included), oldest first.
    fn unsettled_previous(&self) -> impl Iterator<Item = &Previous> {
        let settled = self.settled.load(Ordering::Acquire);
        self.previous.iter().filter(move |p| p.epoch >= settled)
    }

    /// The pool named `name` (or numbered, as text).
    fn find_pool(&self, name: &str) -> Result<&optio_placement::map::Pool, ClientError> {
        let found = self
            .map
            .pool_by_name(name)
            .or_else(|| name.parse::<u32>().ok().and_then(|id| self.map.pool(PoolId(id))));
        found.ok_or_else(|| {
            let known: Vec<&str> = self.map.pools().iter().map(|p| p.name.as_str()).collect();
            ClientError::NoPool { pool: name.to_string(), known: known.join(", ") }
        })
    }

    /// A replicated pool by name: the operations that serve erasure-coded pools dispatch to
    /// their own paths first (`erasure`), the others refuse them.
    fn pool(&self, name: &str) -> Result<PoolId, ClientError> {
        let pool = self.find_pool(name)?;
        if let Some(erasure) = &pool.erasure {
            return Err(ClientError::ErasureNotServed {
                pool: pool.name.clone(),
                profile: erasure.to_string(),
            });
        }
        Ok(pool.id)
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

/// The clever client. Cheap to clone (shares one connection pool, cache and map).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    source: MapSource,
    /// The map, followed (shared mechanism with the servers: `optio_cluster::follow`).
    map: Arc<MapFollower<View>>,
    /// The task following the map store; aborted when the client goes.
    following: tokio::task::AbortHandle,
    transport: Arc<dyn Transport>,
    cache: ChoiceCache,
    intents: Option<IntentLog>,
    in_flight: AtomicUsize,
    device_metrics: Mutex<HashMap<u32, (DeviceMetrics, Instant)>>,
    /// Devices whose server refused a connection (or answered `fenced`), and when; removed
    /// when they answer.
    refused: Mutex<HashMap<u32, Instant>>,
    counters: Counters,
    writer: u64,
    last_version: AtomicU64,
    config: ClientConfig,
    policy: Option<optio_placement::PolicySpec>,
    location: Option<optio_placement::choice::Location>,
    /// The newest epoch whose settling the servers were asked about at least once.
    settled_asked: AtomicU64,
    /// Servers' local sockets, by address (local reads).
    local_servers: local::LocalServers,
    /// Snapshot contexts by key prefix (a volume's data objects): every write or delete of
    /// a key under one carries it ([`optio_proto::snap`]).
    snap_contexts: std::sync::RwLock<Vec<(String, optio_proto::snap::SnapContext)>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.following.abort();
    }
}

impl Followed for View {
    type Error = optio_placement::MapError;

    fn compile(map: ClusterMap, held: Option<&View>) -> Result<View, optio_placement::MapError> {
        let placement = Arc::new(Placement::new(&map)?);
        let Some(held) = held else {
            return Ok(View {
                map,
                placement,
                previous: Vec::new(),
                previous_unknown: true,
                settled: Arc::new(AtomicU64::new(0)),
                candidates: Mutex::default(),
            });
        };
        // Reads consult the earlier placements too until every server reports it has
        // finished moving data for the new epoch: those since the last settled epoch.
        let settled = held.settled.load(Ordering::Acquire);
        let mut previous: Vec<Previous> =
            held.previous.iter().filter(|p| p.epoch >= settled).cloned().collect();
        previous.push(Previous { epoch: held.epoch(), placement: held.placement.clone() });
        // A map between the two was never seen (epochs advance by one per change): servers
        // may have moved copies to where that one placed them.
        let skipped = map.epoch().0 > held.epoch() + 1;
        let mut previous_unknown = skipped || (held.previous_unknown && settled < held.epoch());
        if previous.len() > PREVIOUS_MAX {
            previous.drain(..previous.len() - PREVIOUS_MAX);
            previous_unknown = true;
        }
        Ok(View {
            map,
            placement,
            previous,
            previous_unknown,
            settled: held.settled.clone(),
            candidates: Mutex::default(),
        })
    }

    fn epoch(&self) -> u64 {
        self.map.epoch().0
    }
}

/// Reads the map from `source` and installs it in `follower` (compiled on a blocking thread).
async fn load_map(
    source: &MapSource,
    follower: &Arc<MapFollower<View>>,
) -> Result<bool, ClientError> {
    let failed = |reason: String| ClientError::Map { path: source.describe(), reason };
    let map = source.load().await.map_err(|e| failed(e.to_string()))?;
    follower.install_async(map).await.map_err(|e| failed(e.to_string()))
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

/// A policy named by a client to override its pools': a built-in one, weights aside
/// (`composite` takes its weights from a pool in the map).
pub(super) fn policy_override(name: &str) -> Result<optio_placement::PolicySpec, ClientError> {
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
        let identity = config.tls_identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        let transport = HttpTransport::with_options(
            config.credentials.clone(),
            config.tls_ca.as_deref(),
            identity,
        )?;
        Client::connect_with_transport(source, config, Arc::new(transport)).await
    }

    /// A client of the cluster whose map lives in `source`, sending through `transport` (in
    /// tests, one that injects faults).
    pub async fn connect_with_transport(
        source: MapSource,
        config: ClientConfig,
        transport: Arc<dyn Transport>,
    ) -> Result<Client, ClientError> {
        let policy = config.policy.as_deref().map(policy_override).transpose()?;
        if config.write_quorum == Some(0) {
            return Err(ClientError::Config(
                "a write quorum of 0 would acknowledge writes nothing stored; give 1 to the pool's replica count".into(),
            ));
        }
        let location = (!config.location.is_empty()).then(|| {
            optio_placement::choice::Location::from_levels(
                config.location.iter().map(|(t, n)| (t.as_str(), n.as_str())),
            )
        });
        let map = Arc::new(MapFollower::new(Some(source.clone())));
        load_map(&source, &map).await?;
        let intents = match &config.intent_dir {
            Some(dir) => Some(IntentLog::open(dir).map_err(ClientError::IntentLog)?),
            None => None,
        };
        let client = Client {
            inner: Arc::new(Inner {
                source,
                following: tokio::spawn(map.clone().follow()).abort_handle(),
                map,
                transport,
                cache: ChoiceCache::new(config.cache_entries_max),
                intents,
                in_flight: AtomicUsize::new(0),
                device_metrics: Mutex::new(HashMap::new()),
                refused: Mutex::new(HashMap::new()),
                counters: Counters::default(),
                writer: writer_id(),
                last_version: AtomicU64::new(0),
                snap_contexts: std::sync::RwLock::new(Vec::new()),
                config,
                policy,
                location,
                settled_asked: AtomicU64::new(0),
                local_servers: Default::default(),
            }),
        };
        tokio::spawn(watch_settling(Arc::downgrade(&client.inner)));
        if let Some(dir) = client.inner.config.intent_dir.clone() {
            client.recover(&dir).await?;
        }
        Ok(client)
    }

    fn view(&self) -> Arc<View> {
        self.inner.map.current().expect("a client holds a map from connect on")
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
        load_map(&self.inner.source, &self.inner.map).await
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
            map_refreshes: self.inner.map.replaced(),
            repairs: c.repairs.load(Ordering::Relaxed),
            corrupt_replicas: c.corrupt_replicas.load(Ordering::Relaxed),
            degraded_writes: c.degraded_writes.load(Ordering::Relaxed),
            settled_epoch: self.view().settled.load(Ordering::Acquire),
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

    /// Makes every later version of this client newer than `seen` (a version a replica holds
    /// that a write of ours did not supersede: a writer whose clock runs ahead of ours, within
    /// the bound servers take). With it, versions order writes as they happen, not as the
    /// writers' clocks say: a hybrid logical clock.
    fn raise_version_floor(&self, seen: ObjectVersion) {
        self.inner.last_version.fetch_max(seen.0, Ordering::AcqRel);
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
        match &result {
            Err((failure, _)) if failure.is_not_running() => {
                self.inner.refused.lock().expect("refused lock").insert(device, Instant::now());
            }
            Ok(_) => {
                self.inner.refused.lock().expect("refused lock").remove(&device);
            }
            Err(_) => {}
        }
        result.map_err(|(failure, _)| failure)
    }

    /// Whether a device of `candidates` that `view` has up refused a connection within
    /// [`REFUSED_FRESH`]: its server is not running, and the monitor marks it down within a
    /// round (see `optio_cluster::monitor`).
    fn refused_while_up(&self, view: &View, candidates: &[crate::Candidate]) -> bool {
        let refused = self.inner.refused.lock().expect("refused lock");
        candidates.iter().flat_map(|c| &c.devices).any(|device| {
            refused.get(&device.0).is_some_and(|at| at.elapsed() <= REFUSED_FRESH)
                && view.map.device(*device).is_some_and(|d| d.up)
        })
    }

    /// Whether `device`'s server refused a connection within [`REFUSED_FRESH`].
    fn refused_lately(&self, device: u32) -> bool {
        let refused = self.inner.refused.lock().expect("refused lock");
        refused.get(&device).is_some_and(|at| at.elapsed() <= REFUSED_FRESH)
    }

    /// Waits, at most `bound`, for a map newer than `epoch`; returns whether one came.
    async fn await_newer_map(&self, epoch: u64, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        loop {
            if self.epoch() > epoch {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            let _ = self.refresh().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A call of `op` at `endpoint`, carrying the epoch of `view`.
    fn object_call<'a>(
        &self,
        view: &View,
        endpoint: &'a Endpoint,
        pool: PoolId,
        op: Op<'a>,
    ) -> Call<'a> {
        let snap = match &op {
            // (A clone is never kept again: its own deletes carry no context.)
            Op::Put { key, .. }
            | Op::WriteAt { key, .. }
            | Op::Delete { key, purge: false, .. }
                if optio_proto::snap::parse_clone_key(key).is_none() =>
            {
                self.snap_context_of(key)
            }
            _ => None,
        };
        let mut call = Call::new(endpoint, pool, view.epoch(), op);
        call.snap = snap;
        call
    }

    /// The snapshot context writes of `key` carry, if any.
    fn snap_context_of(&self, key: &str) -> Option<optio_proto::snap::SnapContext> {
        let contexts = self.inner.snap_contexts.read().expect("snap contexts lock");
        contexts.iter().find(|(prefix, _)| key.starts_with(prefix.as_str())).map(|(_, c)| *c)
    }

    /// Makes every later write or delete of a key starting with `prefix` carry `context`
    /// (none: no context), and every later version of this client newer than its mark: the
    /// servers then keep what a snapshot sees before changing it ([`optio_proto::snap`]).
    pub fn set_snap_context(&self, prefix: &str, context: Option<optio_proto::snap::SnapContext>) {
        if let Some(context) = context {
            self.raise_version_floor(context.mark);
        }
        let mut contexts = self.inner.snap_contexts.write().expect("snap contexts lock");
        contexts.retain(|(p, _)| p != prefix);
        if let Some(context) = context {
            contexts.push((prefix.to_string(), context));
        }
    }

    /// A version no write of this client has taken or will take: above every version it
    /// wrote, below every version it will write (a snapshot's mark).
    pub fn version_mark(&self) -> ObjectVersion {
        self.next_version()
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
}

#[cfg(test)]
mod tests {
    use optio_placement::{
        ClusterMapBuilder, DeviceSpec, ErasureParams, PoolSpec, RuleKind, RuleSpec, StepSpec,
    };

    use super::*;

    /// Until the store codes chunks, an erasure-coded pool is refused, by name and by id,
    /// rather than stored as K + M whole copies; replicated pools are unaffected.
    #[test]
    fn erasure_coded_pools_are_refused_until_served() {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..6u32 {
            let host = format!("h{id}");
            builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
        }
        let mut ec = PoolSpec::crush(2, "ec", 16, 6);
        ec.engine = optio_placement::EngineRef::Crush(optio_placement::CrushSpec {
            rule: Some(optio_placement::RuleRef::Name("ec".into())),
        });
        ec.erasure = Some(ErasureParams { k: 4, m: 2, stripe_unit_bytes: 64 << 10 });
        let map = builder
            .replicated_rule(0, "r", "default", "host")
            .rule(RuleSpec {
                id: optio_placement::RuleId(1),
                name: "ec".into(),
                kind: RuleKind::Erasure,
                min_size: 1,
                max_size: 10,
                steps: vec![
                    StepSpec::Take {
                        item: optio_placement::ItemRef::Name("default".into()),
                        class: None,
                    },
                    StepSpec::Choose { leaf: true, indep: true, num: 0, type_name: "host".into() },
                    StepSpec::Emit,
                ],
            })
            .pool(PoolSpec::crush(1, "data", 16, 3))
            .pool(ec)
            .build()
            .expect("a valid map");
        let placement = Arc::new(Placement::new(&map).expect("compiles"));
        let view = View {
            map,
            placement,
            previous: Vec::new(),
            previous_unknown: false,
            settled: Arc::new(AtomicU64::new(0)),
            candidates: Mutex::new(HashMap::new()),
        };
        assert_eq!(view.pool("data").expect("replicated"), PoolId(1));
        for name in ["ec", "2"] {
            let error = view.pool(name).expect_err("erasure-coded");
            assert!(error.to_string().contains("pool 'ec' is erasure-coded (4+2)"), "{error}");
        }
    }
}
