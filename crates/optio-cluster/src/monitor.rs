//! The monitor: marks devices `down` in the map when their server has not answered for the
//! down grace, `out` after the out grace, and back `up` / `in` when it answers again — what
//! Ceph's monitors do with OSD heartbeats. `optio up` runs one for its cluster; `optio
//! manager` runs one for a cluster of servers started one by one (the map in a file or in
//! etcd). One monitor acts per cluster: see [`crate::manager`] for how a second one stands by.
//!
//! A server *answers* when `GET /health` on its address (as the map gives it) answers 200
//! within [`HEALTH_TIMEOUT`]. A server whose address **refuses the connection** — nothing
//! listens: the process is gone — is marked down at once, without the grace (Ceph's
//! `osd_fast_fail_on_connection_refused`): writes would go around it anyway, and choices of
//! new objects whose home it is need the map to say so. Only devices the monitor itself marked out are marked in again
//! (a device an operator set out stays out). Each change is [`MapSource::apply`]: a
//! compare-and-swap on the epoch, applied again to the newer map when someone else changed it
//! meanwhile; a change that leaves data below its pool's `min_size` is made (the device is
//! gone either way) and logged as a warning.
//!
//! **Fencing.** With the map in etcd, servers hold leases (see `etcd/fence.rs`) and serve only
//! while they hold them. Before marking a silent device down, the monitor fences it — a marker
//! that keeps its server from taking a new lease, and the revocation of the one it holds —
//! and marks it down only once the revoked lease's TTL has passed, so the server has stopped
//! serving before any client writes around it. The fence is lifted once the server answers
//! again and the map has it up.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use optio_placement::{ClusterMap, DeviceId, MapChange, MovementSample};

use crate::{ApplyOptions, ClusterError, MapSource};

/// How long a health check may take.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a server may not answer before its devices are marked down, by default (Ceph's
/// `osd_heartbeat_grace`).
pub const DOWN_GRACE_DEFAULT: Duration = Duration::from_secs(20);
/// How long before they are marked out, by default (Ceph's `mon_osd_down_out_interval`).
pub const OUT_GRACE_DEFAULT: Duration = Duration::from_secs(600);

/// The objects the monitor's [`ChangeReport`](optio_placement::ChangeReport)s simulate per
/// pool: enough to see a pool fall below `min_size`, few enough for every round.
const MONITOR_SAMPLE: MovementSample = MovementSample { objects: 1_000, object_bytes: 4 << 20 };

/// The graces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Graces {
    /// Mark devices down after this long without an answer.
    pub down: Duration,
    /// Mark them out after this long.
    pub out: Duration,
}

impl Default for Graces {
    fn default() -> Graces {
        Graces { down: DOWN_GRACE_DEFAULT, out: OUT_GRACE_DEFAULT }
    }
}

/// A change the monitor made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marked {
    /// The devices.
    pub devices: Vec<u32>,
    /// `down`, `out`, `up` or `in` — or `fenced`: the devices' server lost its lease and
    /// they are marked down once it has run out (the epoch is unchanged).
    pub state: &'static str,
    /// The map's epoch after the change.
    pub epoch: u64,
}

impl std::fmt::Display for Marked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "marked device(s) {:?} {} (epoch {})", self.devices, self.state, self.epoch)
    }
}

/// A state to set on devices: its name, the devices, and the new up / in flags.
type StateChange = (&'static str, Vec<u32>, Option<bool>, Option<bool>);

/// A monitor of the servers named in a map.
#[derive(Debug)]
pub struct Monitor {
    source: MapSource,
    graces: Graces,
    /// Since when each address has not answered.
    silent_since: HashMap<String, Instant>,
    /// The devices this monitor marked out.
    marked_out: HashSet<u32>,
    /// Devices fenced and waiting to be marked down, with when that may happen.
    fenced_until: HashMap<u32, Instant>,
    /// This monitor's name in fence markers.
    holder: String,
    /// Devices fenced in this round.
    just_fenced: Vec<u32>,
}

impl Monitor {
    /// A monitor of the map in `source`.
    pub fn new(source: MapSource, graces: Graces) -> Monitor {
        Monitor {
            source,
            graces,
            silent_since: HashMap::new(),
            marked_out: HashSet::new(),
            fenced_until: HashMap::new(),
            holder: format!("monitor (pid {})", std::process::id()),
            just_fenced: Vec::new(),
        }
    }

    /// Changes the graces (silences already counted stay counted).
    pub fn set_graces(&mut self, graces: Graces) {
        self.graces = graces;
    }

    /// One round: checks every server's health and marks devices as the graces say.
    pub async fn round(&mut self) -> Result<Vec<Marked>, ClusterError> {
        let map = self.source.load().await?;
        let mut by_addr: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for device in map.devices() {
            if let Some(addr) = &device.addr {
                by_addr.entry(addr.clone()).or_default().push(device.id.0);
            }
        }
        let answered = futures_util::future::join_all(by_addr.keys().map(|a| check(a))).await;
        let now = Instant::now();
        let mut refused = HashSet::new();
        for (addr, health) in by_addr.keys().zip(&answered) {
            if *health == Health::Answers {
                self.silent_since.remove(addr);
            } else {
                self.silent_since.entry(addr.clone()).or_insert(now);
            }
            if *health == Health::Refused {
                refused.extend(by_addr[addr].iter().copied());
            }
        }
        self.silent_since.retain(|addr, _| by_addr.contains_key(addr));
        let silent: HashMap<u32, Duration> = by_addr
            .iter()
            .filter_map(|(addr, devices)| {
                self.silent_since.get(addr).map(|since| (devices, now - *since))
            })
            .flat_map(|(devices, silent)| devices.iter().map(move |d| (*d, silent)))
            .collect();
        let fenced = self.source.fenced().await?;
        let marked = self.apply(&map, &silent, &refused, now).await?;
        // Lift the fence of each device whose server answers and that the map has up again.
        let map = if marked.is_empty() { map } else { self.source.load().await? };
        for device in fenced {
            let up = map.device(DeviceId(device)).is_some_and(|d| d.up);
            if up && !silent.contains_key(&device) {
                self.source.unfence(device).await?;
                tracing::info!(
                    device,
                    "lifted the fence: the server answers and the map has it up"
                );
            }
        }
        Ok(marked)
    }

    /// Marks what the silences say on `map`.
    async fn apply(
        &mut self,
        map: &ClusterMap,
        silent: &HashMap<u32, Duration>,
        refused: &HashSet<u32>,
        now: Instant,
    ) -> Result<Vec<Marked>, ClusterError> {
        let (mut down, mut out, mut up, mut back_in) = (vec![], vec![], vec![], vec![]);
        for device in map.devices().iter().filter(|d| d.addr.is_some()) {
            let id = device.id.0;
            match silent.get(&id) {
                None => {
                    self.fenced_until.remove(&id);
                    if !device.up {
                        up.push(id);
                    }
                    if !device.is_in && self.marked_out.contains(&id) {
                        back_in.push(id);
                    }
                }
                Some(silent) => {
                    let refused = refused.contains(&id);
                    if device.up
                        && (*silent >= self.graces.down || refused)
                        && self.fenced(id, now, refused).await?
                    {
                        down.push(id);
                    }
                    if device.is_in && *silent >= self.graces.out {
                        out.push(id);
                    }
                }
            }
        }
        let mut marked = Vec::new();
        if !self.just_fenced.is_empty() {
            let devices = std::mem::take(&mut self.just_fenced);
            marked.push(Marked { devices, state: "fenced", epoch: map.epoch().0 });
        }
        let changes: [StateChange; 4] = [
            ("down", down, Some(false), None),
            ("out", out, None, Some(false)),
            ("up", up, Some(true), None),
            ("in", back_in, None, Some(true)),
        ];
        for (state, devices, up, is_in) in changes {
            if devices.is_empty() {
                continue;
            }
            let mut epoch = 0;
            for &device in &devices {
                let change = MapChange::SetState { device: DeviceId(device), up, is_in };
                epoch = self.change(&change).await?;
                match state {
                    "down" => {
                        self.fenced_until.remove(&device);
                    }
                    "out" => {
                        self.marked_out.insert(device);
                    }
                    "in" => {
                        self.marked_out.remove(&device);
                    }
                    _ => {}
                }
            }
            marked.push(Marked { devices, state, epoch });
        }
        Ok(marked)
    }

    /// Whether `device`, to be marked down, is fenced and may be marked now: fences it the
    /// first time (revoking its server's lease), then waits for the lease's TTL — unless its
    /// address refused the connection (no process serves there).
    async fn fenced(
        &mut self,
        device: u32,
        now: Instant,
        refused: bool,
    ) -> Result<bool, ClusterError> {
        if let Some(until) = self.fenced_until.get(&device) {
            return Ok(refused || now >= *until);
        }
        match self.source.fence(device, &self.holder).await? {
            None => Ok(true),
            Some(_) if refused => Ok(true),
            Some(ttl) => {
                tracing::info!(
                    device,
                    ?ttl,
                    "fenced: its server's lease is revoked; marking it down once the lease has run out"
                );
                self.fenced_until.insert(device, Instant::now() + ttl);
                self.just_fenced.push(device);
                Ok(false)
            }
        }
    }

    /// Applies `change` to the stored map ([`MapSource::apply`]: epoch + 1, a
    /// compare-and-swap, applied again after a lost race); the new epoch. A device that does
    /// not answer is marked whatever copies that leaves (clients must stop writing to it), but
    /// a change that leaves data with fewer copies than its pool's `min_size` is logged as a
    /// warning: writes to that data fail until devices return.
    async fn change(&self, change: &MapChange) -> Result<u64, ClusterError> {
        let options = ApplyOptions::Judged { sample: MONITOR_SAMPLE, allow_below_min_size: true };
        let edit = self.source.apply(change, options).await?;
        if let Some(report) = edit.report.as_ref().filter(|r| r.below_min_size()) {
            for pool in report.short_of_copies.iter().filter(|p| p.newly_below_min_size()) {
                tracing::warn!(
                    epoch = edit.new.epoch().0,
                    pool = %pool.name,
                    below_min_size = pool.below_min_size,
                    sampled = pool.sampled,
                    min_size = pool.min_size,
                    "{change:?} leaves data with fewer copies than its pool's min_size: writes to it fail until devices return"
                );
            }
        }
        Ok(edit.new.epoch().0)
    }
}

/// What a health check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// `GET /health` answered 200 within [`HEALTH_TIMEOUT`].
    Answers,
    /// The connection was refused: nothing listens at the address.
    Refused,
    /// Anything else: no answer in time, a reset, another status.
    Silent,
}

/// Checks the server at `addr`: `GET /health` within [`HEALTH_TIMEOUT`].
pub async fn check(addr: &str) -> Health {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let check = async {
        let mut stream = match tokio::net::TcpStream::connect(addr).await {
            Ok(stream) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Health::Refused;
            }
            Err(_) => return Health::Silent,
        };
        let mut head = [0u8; 12];
        let answered = async {
            stream.write_all(b"GET /health HTTP/1.0\r\nHost: optio\r\n\r\n").await.ok()?;
            stream.read_exact(&mut head).await.ok()
        };
        match answered.await {
            Some(_) if head.starts_with(b"HTTP/1.") && &head[9..12] == b"200" => Health::Answers,
            _ => Health::Silent,
        }
    };
    tokio::time::timeout(HEALTH_TIMEOUT, check).await.unwrap_or(Health::Silent)
}

/// Whether the server at `addr` answers `GET /health` with 200 within [`HEALTH_TIMEOUT`].
pub async fn answers(addr: &str) -> bool {
    check(addr).await == Health::Answers
}

/// The lock file, next to a map file, held by the cluster's acting monitor.
pub const MANAGER_LOCK_FILE: &str = "manager.lock";

/// The right to act as a cluster's monitor: one at a time, so that two monitors never mark
/// the same device in turns.
#[derive(Debug)]
pub enum Leadership {
    /// The map is in a file: [`MANAGER_LOCK_FILE`] next to it, held with `flock` (the kernel
    /// releases it however the process ends).
    File(std::fs::File),
    /// The map is in etcd: its manager key, held with a lease kept alive each round (it
    /// expires when the holder stops).
    Etcd {
        /// The store.
        store: crate::etcd::EtcdStore,
        /// The lease.
        lease: u64,
    },
}

/// Who acts as a cluster's monitor, when [`lead`] finds another does.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ActingMonitor {
    /// The process holding [`MANAGER_LOCK_FILE`] next to the map file.
    LockHolder {
        /// The lock file.
        lock: std::path::PathBuf,
        /// The holder's pid, when the lock file says it.
        pid: Option<u32>,
    },
    /// The holder written in etcd's manager key (empty when it could not be read).
    Etcd {
        /// How the holder named itself (`optio up (pid N)`).
        holder: String,
    },
}

impl std::fmt::Display for ActingMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActingMonitor::LockHolder { lock, pid } => {
                write!(f, "the process holding {}", lock.display())?;
                match pid {
                    Some(pid) => write!(f, " (pid {pid})"),
                    None => Ok(()),
                }
            }
            ActingMonitor::Etcd { holder } => f.write_str(holder),
        }
    }
}

/// Tries to become the acting monitor of the cluster whose map is in `source` (`holder`
/// names this process in etcd; `ttl` is the lease's life there). `Ok(Err(who))` when another
/// acts.
pub async fn lead(
    source: &MapSource,
    holder: &str,
    ttl: Duration,
) -> Result<Result<Leadership, ActingMonitor>, ClusterError> {
    match source {
        MapSource::File(store) => {
            let dir = store.path().parent().unwrap_or(std::path::Path::new("."));
            let path = dir.join(MANAGER_LOCK_FILE);
            match crate::lockfile::hold(&path, Duration::ZERO) {
                Ok(file) => Ok(Ok(Leadership::File(file))),
                Err(crate::lockfile::LockError::Held { holder }) => {
                    Ok(Err(ActingMonitor::LockHolder { lock: path, pid: holder }))
                }
                Err(crate::lockfile::LockError::Io(source)) => Err(ClusterError::Io {
                    what: format!("cannot lock {}", path.display()),
                    source,
                }),
            }
        }
        MapSource::Etcd(store) => Ok(store
            .try_lead(holder, ttl)
            .await?
            .map(|lease| Leadership::Etcd { store: store.clone(), lease })
            .map_err(|holder| ActingMonitor::Etcd { holder })),
    }
}

impl Leadership {
    /// Keeps the right alive; `false` when it was lost (the etcd lease expired: stop acting,
    /// and campaign again).
    pub async fn renew(&self) -> Result<bool, ClusterError> {
        match self {
            Leadership::File(_) => Ok(true),
            Leadership::Etcd { store, lease } => store.keep_leading(*lease).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_monitor_finds_the_lock_holder() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let map = dir.path().join("map.toml");
        let source = MapSource::parse(map.to_str().expect("a UTF-8 path")).expect("a file source");
        let ttl = Duration::from_secs(5);
        let first = lead(&source, "first", ttl).await.expect("no I/O error");
        assert!(matches!(first, Ok(Leadership::File(_))), "{first:?}");
        let second = lead(&source, "second", ttl).await.expect("no I/O error");
        let lock = dir.path().join(MANAGER_LOCK_FILE);
        match second {
            Err(who @ ActingMonitor::LockHolder { .. }) => {
                assert_eq!(
                    who,
                    ActingMonitor::LockHolder { lock: lock.clone(), pid: Some(std::process::id()) }
                );
                assert!(
                    who.to_string().starts_with(&format!("the process holding {}", lock.display()))
                );
            }
            other => panic!("expected the lock's holder, got {other:?}"),
        }
    }
}
