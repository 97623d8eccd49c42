//! Scrubbing: a background, rate-limited pass over every object a device holds, and the same
//! pass on demand (`POST /v1/scrub`, `optio scrub`).
//!
//! * **Light** (every pass): each replica's version is compared with the other replicas of
//!   its set (one probe each); a replica older than another — it missed a write or a delete —
//!   fetches the newest version (or records the tombstone) from the replica that has it.
//! * **Deep** (every `deep_interval`, or `--deep`): each replica is also re-read and its
//!   header and checksums verified (the store's read path: a file that fails is quarantined,
//!   one that went missing is forgotten, one holding another key or version is quarantined).
//!   A damaged replica is repaired from a replica holding the same version or a newer one; if
//!   none does, it stays quarantined and is reported as unrepairable.
//!
//! Each device repairs only itself (it pulls; it never writes to a peer), so two devices
//! scrubbing the same set never race, and versions make every repair safe against clients'
//! writes. Deep passes are limited to `rate` bytes read per second so that foreground I/O
//! keeps most of the disk.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use optio_net::{Call, Endpoint, HttpTransport, Op, Transport};
use optio_placement::{PoolId, ReplicaSet};
use optio_proto::{ObjectVersion, ScrubProgress, ScrubReport};

use crate::catchup::{fetch_version, held_version, record_tombstone};
use crate::error::StoreError;
use crate::mapstate::{MapState, ServerMap};
use crate::store::DeviceStore;
use optio_net::throttle::Throttle;

/// Deep-scrub read rate by default, bytes per second.
pub const SCRUB_RATE_DEFAULT: u64 = 8 << 20;
/// Time between two background passes by default.
pub const SCRUB_INTERVAL_DEFAULT: Duration = Duration::from_secs(3600);
/// Time between two deep background passes by default.
pub const DEEP_SCRUB_INTERVAL_DEFAULT: Duration = Duration::from_secs(24 * 3600);
/// How old a tombstone must be before it may be removed, by default.
pub const TOMBSTONE_GRACE_DEFAULT: Duration = Duration::from_secs(24 * 3600);
/// Problems kept in a report.
const PROBLEMS_MAX: usize = 20;

/// How a server scrubs.
#[derive(Clone, Debug)]
pub struct ScrubConfig {
    /// Bytes re-read per second at most by background deep passes (`None`: no limit).
    pub rate_bytes_per_sec: Option<u64>,
    /// Time between background passes (`None`: no background scrubbing).
    pub interval: Option<Duration>,
    /// Time between deep background passes.
    pub deep_interval: Duration,
    /// How old a tombstone must be before a light pass may remove it (`None`: never).
    pub tombstone_grace: Option<Duration>,
}

impl Default for ScrubConfig {
    fn default() -> ScrubConfig {
        ScrubConfig {
            rate_bytes_per_sec: Some(SCRUB_RATE_DEFAULT),
            interval: Some(SCRUB_INTERVAL_DEFAULT),
            deep_interval: DEEP_SCRUB_INTERVAL_DEFAULT,
            tombstone_grace: Some(TOMBSTONE_GRACE_DEFAULT),
        }
    }
}

/// A server's scrubber.
pub struct Scrubber {
    devices: HashMap<u32, Arc<DeviceStore>>,
    map: Arc<MapState>,
    config: ScrubConfig,
    transport: HttpTransport,
    /// One pass at a time.
    running: tokio::sync::Mutex<()>,
    /// Each device's last report and its totals (repaired, unrepairable).
    reports: Mutex<HashMap<u32, (ScrubReport, u64, u64)>>,
    /// The pass under way on a device: how far it is, and when it started.
    under_way: Mutex<HashMap<u32, (ScrubProgress, Instant)>>,
    /// Whether data is moving (tombstones are kept meanwhile).
    rebalancer: Arc<crate::Rebalancer>,
    /// Whether this server's devices serve (a device catching up collects nothing).
    catchup: Arc<crate::catchup::CatchUp>,
}

impl Scrubber {
    /// A scrubber of `devices`.
    pub fn new(
        devices: HashMap<u32, Arc<DeviceStore>>,
        map: Arc<MapState>,
        config: ScrubConfig,
        rebalancer: Arc<crate::Rebalancer>,
        catchup: Arc<crate::catchup::CatchUp>,
        transport: HttpTransport,
    ) -> Scrubber {
        Scrubber {
            devices,
            map,
            config,
            transport,
            running: tokio::sync::Mutex::new(()),
            reports: Mutex::new(HashMap::new()),
            under_way: Mutex::new(HashMap::new()),
            rebalancer,
            catchup,
        }
    }

    /// Whether a tombstone of `version` on `device` may go, as far as this server can tell
    /// alone: older than the grace, every device that is in is up, no data moving here, the
    /// device serving (not catching up). The replicas are asked next.
    fn may_collect(&self, map: &ServerMap, device: u32, version: ObjectVersion) -> bool {
        let Some(grace) = self.config.tombstone_grace else { return false };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        now.saturating_sub(version.0) >= grace.as_micros() as u64
            && map.map.devices().iter().all(|d| d.up || !d.is_in)
            && self.rebalancer.status().settled_at(map.epoch())
            && !self.catchup.refuses_reads(device)
    }

    /// The last report of `device` and its totals (repaired, unrepairable) since start.
    pub fn last(&self, device: u32) -> (Option<ScrubReport>, u64, u64) {
        match self.reports.lock().expect("reports lock").get(&device) {
            Some((report, repaired, unrepairable)) => {
                (Some(report.clone()), *repaired, *unrepairable)
            }
            None => (None, 0, 0),
        }
    }

    /// How far the pass under way on `device` is, if one is.
    pub fn progress(&self, device: u32) -> Option<ScrubProgress> {
        let under_way = self.under_way.lock().expect("progress lock");
        under_way.get(&device).map(|(progress, started)| ScrubProgress {
            seconds: started.elapsed().as_secs_f64(),
            ..progress.clone()
        })
    }

    /// Notes how far the pass of `report.device` is (of `total` objects).
    fn note_progress(&self, report: &ScrubReport, total: u64, started: Instant) {
        let progress = ScrubProgress {
            deep: report.deep,
            objects: report.objects,
            objects_total: total,
            bytes_read: report.bytes_read,
            seconds: 0.0,
        };
        self.under_way.lock().expect("progress lock").insert(report.device, (progress, started));
    }

    /// Background passes until the process ends: a light pass every interval, a deep one
    /// when the deep interval has passed since the last.
    pub async fn run(self: Arc<Self>) {
        let Some(interval) = self.config.interval else { return };
        let mut last_deep = Instant::now();
        loop {
            tokio::time::sleep(interval).await;
            let deep = last_deep.elapsed() >= self.config.deep_interval;
            if deep {
                last_deep = Instant::now();
            }
            let reports = self.scrub(deep, None, self.config.rate_bytes_per_sec).await;
            for report in reports {
                if report.damaged + report.stale > 0 {
                    tracing::warn!(
                        device = report.device,
                        damaged = report.damaged,
                        stale = report.stale,
                        repaired = report.repaired,
                        unrepairable = report.unrepairable,
                        "scrub found damaged or stale replicas"
                    );
                }
            }
        }
    }

    /// One pass over every device (of `pool` only, if given), reading at most `rate` bytes
    /// per second in a deep pass; one report per device.
    pub async fn scrub(
        &self,
        deep: bool,
        pool: Option<PoolId>,
        rate: Option<u64>,
    ) -> Vec<ScrubReport> {
        let _one = self.running.lock().await;
        let Some(map) = self.map.current() else { return Vec::new() };
        let limiter = Throttle::new(rate);
        let mut ids: Vec<u32> = self.devices.keys().copied().collect();
        ids.sort_unstable();
        let mut out = Vec::new();
        for device in ids {
            let report = self.scrub_device(&map, device, deep, pool, &limiter).await;
            self.under_way.lock().expect("progress lock").remove(&device);
            let mut reports = self.reports.lock().expect("reports lock");
            let totals = reports.entry(device).or_insert_with(|| (ScrubReport::default(), 0, 0));
            totals.1 += report.repaired;
            totals.2 += report.unrepairable;
            totals.0 = report.clone();
            out.push(report);
        }
        out
    }

    async fn scrub_device(
        &self,
        map: &Arc<ServerMap>,
        device: u32,
        deep: bool,
        only: Option<PoolId>,
        limiter: &Throttle,
    ) -> ScrubReport {
        let started = Instant::now();
        let store = &self.devices[&device];
        let mut report = ScrubReport { device, deep, ..ScrubReport::default() };
        let mut scratch = map.placement.scratch();
        let mut set = ReplicaSet::new();
        let mut held = store.held();
        held.retain(|h| only.is_none_or(|p| h.pool == p));
        held.sort_by(|a, b| (a.pool, &a.key).cmp(&(b.pool, &b.key)));
        let total = held.len() as u64;
        self.note_progress(&report, total, started);
        for object in held {
            report.objects += 1;
            // (A lock and a copy per object: nothing beside the object's read or probes.)
            self.note_progress(&report, total, started);
            let Some(pool) = map.placement.pool(object.pool) else { continue };
            // Deep: re-read and verify this replica.
            let mut damaged = false;
            if deep && !object.deleted {
                limiter.acquire(object.file_bytes).await;
                report.bytes_read += object.file_bytes;
                let (reader, key) = (store.clone(), object.key.clone());
                let Ok(read) =
                    tokio::task::spawn_blocking(move || reader.get(object.pool, &key)).await
                else {
                    note(&mut report, format!("'{}': the read task failed", object.key));
                    continue;
                };
                match read {
                    Ok(_) => {}
                    // Overwritten or deleted meanwhile: not damage.
                    Err(StoreError::NotFound)
                        if held_version(store, object.pool, &object.key)
                            .is_some_and(|v| v != object.version)
                            || store.tombstone(object.pool, &object.key).is_some() => {}
                    Err(
                        error @ (StoreError::NotFound
                        | StoreError::Corrupt { .. }
                        | StoreError::Mismatch { .. }),
                    ) => {
                        damaged = true;
                        report.damaged += 1;
                        note(
                            &mut report,
                            format!(
                                "'{}' (pool {}): {}",
                                object.key,
                                object.pool.0,
                                describe(&error)
                            ),
                        );
                    }
                    Err(error) => {
                        note(&mut report, format!("'{}': cannot read: {error}", object.key))
                    }
                }
            }
            if map.map.pool(object.pool).is_some_and(|p| p.erasure.is_some()) {
                // A chunk of an erasure-coded object: its set holds other chunks, not copies
                // to compare it with or repair it from (docs/erasure.md: decoding scrubs are
                // to come).
                continue;
            }
            // Light: compare with the other replicas of its set.
            let Some(seed) = object.pg_seed else { continue };
            pool.place_full_power(pool.key_of_seed(seed), &mut scratch, &mut set);
            let peers: Vec<Endpoint> = set
                .devices()
                .filter(|d| d.0 != device)
                .filter_map(|d| map.map.device(d))
                .filter(|d| d.up)
                .filter_map(|d| d.addr.clone().map(|addr| Endpoint { device: d.id.0, addr }))
                .collect();
            let mine = if damaged { None } else { held_version(store, object.pool, &object.key) };
            // What each peer holds: (version, deleted, peer), newest first.
            let mut theirs: Vec<(ObjectVersion, bool, Endpoint)> = Vec::new();
            let mut unreachable = false;
            for peer in &peers {
                let probe = Call::new(
                    peer,
                    object.pool,
                    map.epoch(),
                    Op::Probe { key: &object.key, want_choice: false },
                );
                match self.transport.send(probe).await {
                    Ok(answer) => match (&answer.info, answer.deleted) {
                        (Some(info), _) if answer.status == 200 => {
                            theirs.push((info.version, false, peer.clone()))
                        }
                        (_, Some(version)) => theirs.push((version, true, peer.clone())),
                        _ => {}
                    },
                    Err(_) => unreachable = true,
                }
            }
            if unreachable {
                report.unreachable += 1;
            }
            // Tombstone collection: once every replica of the set answered and none holds an
            // older live copy (a copy it could bring back), the tombstone has done its work.
            // Every device is up and nothing moves, so no copy is elsewhere; a replica that
            // already removed its tombstone answers "absent", which counts as done.
            if object.deleted
                && !unreachable
                && peers.len() + 1 == set.devices().count()
                && theirs.iter().all(|(version, deleted, _)| *deleted && *version >= object.version)
                && self.may_collect(map, device, object.version)
            {
                let (writer, key, version) = (store.clone(), object.key.clone(), object.version);
                let purged = tokio::task::spawn_blocking(move || {
                    writer.purge(object.pool, &key, Some(version))
                })
                .await;
                if matches!(purged, Ok(Ok(true))) {
                    report.tombstones_collected += 1;
                }
                continue;
            }
            // A damaged replica is repaired only from its own version or a newer one (an
            // older version would silently undo an acknowledged write); a healthy one only
            // from a newer one.
            theirs.retain(|(version, _, _)| {
                if damaged { *version >= object.version } else { mine.is_none_or(|m| *version > m) }
            });
            theirs.sort_by_key(|t| std::cmp::Reverse((t.0, t.1)));
            if theirs.is_empty() {
                if damaged {
                    unrepairable(&mut report, &object);
                }
                continue;
            }
            if !damaged {
                report.stale += 1;
                note(
                    &mut report,
                    format!(
                        "'{}' (pool {}): version {} here, {} on device {}",
                        object.key,
                        object.pool.0,
                        mine.map_or(0, |m| m.0),
                        theirs[0].0.0,
                        theirs[0].2.device
                    ),
                );
            }
            let mut repaired = false;
            for (version, deleted, peer) in &theirs {
                let outcome = if *deleted {
                    record_tombstone(
                        store,
                        object.pool,
                        &object.key,
                        *version,
                        object.pg_seed,
                        map.epoch(),
                    )
                    .await
                } else {
                    fetch_version(
                        &self.transport,
                        store,
                        peer,
                        object.pool,
                        &object.key,
                        map.epoch(),
                    )
                    .await
                };
                match outcome {
                    Ok(true) => {
                        repaired = true;
                        break;
                    }
                    Ok(false) => {}
                    Err(error) => note(
                        &mut report,
                        format!(
                            "'{}': repair from device {} failed: {error}",
                            object.key, peer.device
                        ),
                    ),
                }
            }
            if repaired {
                report.repaired += 1;
            } else if damaged {
                unrepairable(&mut report, &object);
            }
        }
        report.seconds = started.elapsed().as_secs_f64();
        report
    }
}

/// Counts a damaged replica no good replica could repair (it stays quarantined).
fn unrepairable(report: &mut ScrubReport, object: &crate::store::Held) {
    report.unrepairable += 1;
    note(
        report,
        format!(
            "'{}' (pool {}): no good replica to repair it from; quarantined",
            object.key, object.pool.0
        ),
    );
}

fn note(report: &mut ScrubReport, problem: String) {
    if report.problems.len() < PROBLEMS_MAX {
        report.problems.push(problem);
    }
}

fn describe(error: &StoreError) -> String {
    match error {
        StoreError::NotFound => "the file is missing".into(),
        other => other.to_string(),
    }
}
