//! What `optio bench elastic` (objects on one machine) and `optio bench io elastic` (volumes on
//! the emulated cluster) share of seed 004's 3-phase test: the ways of resizing, the map
//! changes that shrink and grow a cluster, the wait for a phase's map and for data movement,
//! the replicas that writes in a partial membership offloaded, the audit of selective
//! re-integration against them, and machine-hours over the ideal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use optio_client::ReintegrationStatus;
use optio_local::cluster::LocalCluster;
use optio_placement::{ActiveSpec, ClusterMap, DeviceId, MapChange, Placement, ReplicaSet};

/// Servers, replicas and servers made inactive, as in the paper.
pub const SERVERS: u32 = 10;
/// Replicas per object (the paper's 2-way replication).
pub const REPLICAS: u32 = 2;
/// Servers turned down for phase 2.
pub const INACTIVE: u32 = 4;
/// The longest data movement after a resize.
pub const MOVEMENT_TIMEOUT: Duration = Duration::from_secs(600);
/// Pause between two looks at data movement (a bounded wait).
const MOVEMENT_POLL: Duration = Duration::from_millis(50);

/// A way of resizing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// No resizing: every server on all the time (the elastic pool at full power).
    None,
    /// Plain consistent hashing (a `ring` pool): shrinking marks servers out and waits for
    /// the clean-up; growing marks them in and the servers rebalance.
    Original,
    /// The elastic pool; at full power re-integration copies everything the layout puts on
    /// the returning servers.
    Full,
    /// The elastic pool, re-integrating only what the dirty table names.
    Selective,
}

impl Mode {
    /// Every mode, in the order runs and plots show them.
    pub const ALL: [Mode; 4] = [Mode::None, Mode::Original, Mode::Full, Mode::Selective];

    /// The name in tables and plots.
    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "no resizing",
            Mode::Original => "original CH",
            Mode::Full => "primary+full",
            Mode::Selective => "primary+selective",
        }
    }

    /// The name on the command line.
    pub fn arg(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Original => "original",
            Mode::Full => "full",
            Mode::Selective => "selective",
        }
    }

    /// `name` (as on the command line), one of `allowed`.
    pub fn parse(name: &str, allowed: &[Mode]) -> Result<Mode> {
        allowed.iter().copied().find(|m| m.arg() == name.trim()).with_context(|| {
            format!(
                "unknown mode '{name}': use {}",
                allowed.iter().map(|m| m.arg()).collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// The pool the workload uses.
    pub fn pool(self) -> &'static str {
        match self {
            Mode::Original => optio_local::cluster::RING_POOL,
            _ => optio_local::cluster::ELASTIC_POOL,
        }
    }

    /// The re-integration process's mode (`optio reintegrate --mode`), if one runs.
    pub fn reintegration(self) -> Option<String> {
        match self {
            Mode::Full => Some("full".into()),
            Mode::Selective => Some("selective".into()),
            Mode::None | Mode::Original => None,
        }
    }

    /// Whether it resizes at all.
    pub fn resizes(self) -> bool {
        self != Mode::None
    }

    /// Whether it is an elastic-CH resizing (membership versions and a dirty table).
    pub fn elastic(self) -> bool {
        matches!(self, Mode::Full | Mode::Selective)
    }

    /// Servers on in phase 2.
    pub fn phase2_servers(self) -> u32 {
        if self.resizes() { SERVERS - INACTIVE } else { SERVERS }
    }
}

/// The devices of the servers made inactive: the last ranks.
pub fn inactive_devices(map: &ClusterMap) -> Vec<DeviceId> {
    let order: Vec<DeviceId> = match map.membership() {
        Some(m) => m.order.clone(),
        None => map.devices().iter().map(|d| d.id).collect(),
    };
    order[order.len().saturating_sub(INACTIVE as usize)..].to_vec()
}

/// The map changes that shrink the cluster to `SERVERS - INACTIVE` active servers: original
/// consistent hashing marks the inactive devices out, elastic CH makes a membership version
/// of the first ranks; nothing without resizing.
pub fn shrink_changes(mode: Mode, map: &ClusterMap) -> Vec<MapChange> {
    match mode {
        Mode::None => Vec::new(),
        Mode::Original => inactive_devices(map)
            .into_iter()
            .map(|device| MapChange::SetState { device, up: None, is_in: Some(false) })
            .collect(),
        Mode::Full | Mode::Selective => {
            vec![MapChange::SetActive(ActiveSpec::FirstRanks(SERVERS - INACTIVE))]
        }
    }
}

/// The map changes that bring `inactive` back (the devices [`shrink_changes`] turned down).
pub fn grow_changes(mode: Mode, inactive: &[DeviceId]) -> Vec<MapChange> {
    match mode {
        Mode::None => Vec::new(),
        Mode::Original => inactive
            .iter()
            .map(|device| MapChange::SetState { device: *device, up: None, is_in: Some(true) })
            .collect(),
        Mode::Full | Mode::Selective => vec![MapChange::SetActive(ActiveSpec::FirstRanks(SERVERS))],
    }
}

/// Makes the map `changes` (one epoch each) and waits until every server holds the last of
/// them; returns that epoch (the current one when there is nothing to change). A phase that
/// starts afterwards with a client that loaded the map since runs under it.
pub fn apply(cluster: &LocalCluster, changes: &[MapChange]) -> Result<u64> {
    let mut epoch = cluster.load_map()?.epoch().0;
    for change in changes {
        epoch = cluster.change_map(change)?.epoch().0;
    }
    cluster.wait_for_epoch(epoch).context("the servers did not take the resized map")?;
    Ok(epoch)
}

/// A transport to `cluster`'s servers, signing as client.admin with its keyring when it has
/// one (a cluster started with authentication answers only signed status requests).
fn transport(cluster: &LocalCluster) -> Result<optio_net::HttpTransport> {
    crate::commands::identity::Identity::default()
        .transport(Some(cluster.dir()))
        .context("cannot make an HTTP transport to the servers")
}

/// Bytes the servers' rebalancing has moved so far.
pub async fn moved_by_servers(cluster: &LocalCluster) -> Result<u64> {
    let transport = transport(cluster)?;
    let map = cluster.load_map()?;
    Ok(crate::commands::status::servers(&map, &transport)
        .await
        .iter()
        .filter_map(|r| r.status.as_ref().ok())
        .map(|s| s.migration.total_bytes_moved)
        .sum())
}

/// Whether every up server has settled at the map's epoch (no rebalancing left).
pub async fn settled(cluster: &LocalCluster) -> Result<bool> {
    let transport = transport(cluster)?;
    let map = cluster.load_map()?;
    Ok(crate::commands::status::all_done(
        &map,
        &crate::commands::status::servers(&map, &transport).await,
    ))
}

/// What the re-integration process reported last (empty before it reports).
pub async fn reintegration(cluster: &LocalCluster) -> ReintegrationStatus {
    cluster
        .source()
        .statuses::<ReintegrationStatus>()
        .await
        .ok()
        .and_then(|mut s| s.remove(crate::commands::reintegrate::STATUS_MEMBER))
        .unwrap_or_default()
}

/// Waits until data movement after a resize at `started` is over (original: the servers
/// settled; elastic: one membership version left and the dirty table empty); returns the
/// seconds since `started`.
pub async fn wait_moved(cluster: &LocalCluster, mode: Mode, started: Instant) -> Result<f64> {
    loop {
        let done = match mode {
            Mode::None => true,
            Mode::Original => settled(cluster).await?,
            Mode::Full | Mode::Selective => {
                let versions = cluster.load_map()?.membership().map_or(1, |m| m.versions.len());
                versions == 1 && reintegration(cluster).await.dirty_entries == 0
            }
        };
        if done {
            return Ok(started.elapsed().as_secs_f64());
        }
        if started.elapsed() > MOVEMENT_TIMEOUT {
            bail!("data movement did not end within {} s", MOVEMENT_TIMEOUT.as_secs());
        }
        tokio::time::sleep(MOVEMENT_POLL).await;
    }
}

/// The replicas that writes of `keys` in `map`'s current membership version offloaded: the
/// devices of their full-power placement that the current placement skips.
pub fn offloaded<'a>(map: &ClusterMap, pool: &str, keys: impl IntoIterator<Item = &'a str>) -> u64 {
    let Ok(placement) = Placement::new(map) else { return 0 };
    let Some(pool) = placement.pool_by_name(pool) else { return 0 };
    let mut scratch = placement.scratch();
    let (mut now, mut full) = (ReplicaSet::new(), ReplicaSet::new());
    keys.into_iter()
        .map(|key| {
            let (_, engine_key) = pool.object_key(key);
            pool.place(engine_key, &mut scratch, &mut now);
            pool.place_full_power(engine_key, &mut scratch, &mut full);
            full.devices().filter(|d| !now.contains(*d)).count() as u64
        })
        .sum()
}

/// Selective re-integration against the offloaded replicas the workload implies.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Audit {
    /// Replicas it copied.
    pub replicas_copied: u64,
    /// Of those, offloaded replicas brought back.
    pub offloaded_copied: u64,
    /// Offloaded replicas it found current already (a phase-3 rewrite came first).
    pub offloaded_current: u64,
    /// The offloaded replicas of phase 2's writes.
    pub offloaded: u64,
    /// Of those, replicas of objects phase 3 rewrote (at most this many can be found current).
    pub offloaded_rewritten: u64,
}

impl Audit {
    /// `status` against `offloaded` replicas, `rewritten` of them of objects phase 3 rewrote.
    pub fn new(status: &ReintegrationStatus, offloaded: u64, rewritten: u64) -> Audit {
        Audit {
            replicas_copied: status.replicas_copied,
            offloaded_copied: status.offloaded_copied,
            offloaded_current: status.offloaded_current,
            offloaded,
            offloaded_rewritten: rewritten,
        }
    }

    /// Each offloaded replica copied or found current, once: together exactly the offloaded
    /// replicas, and found current only where phase 3 rewrote.
    pub fn exact(&self) -> bool {
        self.offloaded_copied + self.offloaded_current == self.offloaded
            && self.offloaded_current <= self.offloaded_rewritten
    }

    /// The report's sentence.
    pub fn note(&self) -> String {
        let extra = self.replicas_copied.saturating_sub(self.offloaded_copied);
        format!(
            "selective re-integration copied {} replicas, {} of them offloaded replicas brought back to the devices the dirty entries' version skipped, and found {} offloaded replicas current already (a phase-3 rewrite came first); phase 2's writes offloaded {} replicas ({} of them of objects phase 3 rewrote): {}{}",
            self.replicas_copied,
            self.offloaded_copied,
            self.offloaded_current,
            self.offloaded,
            self.offloaded_rewritten,
            if self.exact() {
                "it accounted for exactly the offloaded replicas"
            } else {
                "MISMATCH"
            },
            if extra > 0 {
                format!(
                    "; the other {extra} copies refreshed replicas that a phase-3 write racing re-integration had not reached yet"
                )
            } else {
                String::new()
            }
        )
    }
}

/// Server-seconds of a run: the sum of servers on × seconds over its `segments`.
pub fn server_seconds(segments: &[(u32, f64)]) -> f64 {
    segments.iter().map(|(servers, seconds)| f64::from(*servers) * seconds.max(0.0)).sum()
}

/// The ideal server-seconds: servers follow the load — all of them for phases 1 and 3, the
/// active ones for phase 2 — for the phases' durations without resizing (`phase_seconds`).
pub fn ideal_server_seconds(phase_seconds: [f64; 3]) -> f64 {
    server_seconds(&[
        (SERVERS, phase_seconds[0]),
        (SERVERS - INACTIVE, phase_seconds[1]),
        (SERVERS, phase_seconds[2]),
    ])
}

/// Each phase's shortest duration among `runs` (mode → phase seconds), the no-resizing run's
/// if there is one: the durations the ideal assumes.
pub fn ideal_phase_seconds(runs: &BTreeMap<Mode, [f64; 3]>) -> [f64; 3] {
    if let Some(none) = runs.get(&Mode::None) {
        return *none;
    }
    let mut best = [f64::INFINITY; 3];
    for phases in runs.values() {
        for (b, p) in best.iter_mut().zip(phases) {
            *b = b.min(*p);
        }
    }
    best.map(|b| if b.is_finite() { b } else { 0.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_their_arguments_only() {
        assert_eq!(Mode::parse("selective", &Mode::ALL).expect("known"), Mode::Selective);
        let error = Mode::parse("none", &Mode::ALL[1..]).expect_err("not allowed");
        assert!(error.to_string().contains("original, full, selective"), "{error}");
        assert!(Mode::parse("sideways", &Mode::ALL).is_err());
    }

    #[test]
    fn the_audit_is_exact_only_when_every_offloaded_replica_is_accounted_once() {
        let status = |copied, current| ReintegrationStatus {
            replicas_copied: copied + 1,
            offloaded_copied: copied,
            offloaded_current: current,
            ..ReintegrationStatus::default()
        };
        assert!(Audit::new(&status(30, 4), 34, 5).exact());
        assert!(!Audit::new(&status(31, 4), 34, 5).exact(), "one copy too many");
        assert!(!Audit::new(&status(30, 4), 34, 3).exact(), "current without a rewrite");
        assert!(Audit::new(&status(30, 4), 34, 5).note().contains("exactly"));
    }

    #[test]
    fn machine_time_counts_servers_on_and_the_ideal_follows_the_load() {
        assert_eq!(server_seconds(&[(10, 2.0), (6, 5.0)]), 50.0);
        let ideal = ideal_server_seconds([10.0, 30.0, 10.0]);
        assert_eq!(ideal, 100.0 + 180.0 + 100.0);
        let mut runs = BTreeMap::new();
        runs.insert(Mode::Full, [12.0, 30.0, 15.0]);
        runs.insert(Mode::Original, [11.0, 31.0, 20.0]);
        assert_eq!(ideal_phase_seconds(&runs), [11.0, 30.0, 15.0]);
        runs.insert(Mode::None, [13.0, 30.0, 14.0]);
        assert_eq!(ideal_phase_seconds(&runs), [13.0, 30.0, 14.0]);
    }
}
