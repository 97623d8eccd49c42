//! `optio status`: every server's epoch and rebalancing progress — what it moved, what
//! remains, its rate and ETA — asked from the servers themselves.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use optio_net::{HttpTransport, Transport};
use optio_placement::{ClusterMap, DeviceId};
use optio_proto::ServerStatus;

use super::live::LiveMap;
use crate::output::{Table, bytes};

/// Arguments of `optio status`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  optio status --cluster /tmp/optio
  optio status --map etcd://127.0.0.1:2379 --watch

The health line: HEALTH_OK (exit 0) when every device is up, in, answering and serving and
no data is moving; HEALTH_WARN (exit 2) when some are down, out, silent or catching up, or
data is moving (writes still succeed); HEALTH_ERR (exit 3) when some placement group has
fewer than its pool's min_size replicas serving (its writes are refused). Exit 1: the status
could not be read.")]
pub struct Args {
    #[command(flatten)]
    pub live: LiveMap,
    /// Follow the progress with progress bars until every server is done.
    #[arg(long)]
    pub watch: bool,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// One server's answer.
pub struct ServerRow {
    /// Its address.
    pub addr: String,
    /// The devices the map gives it.
    pub devices: Vec<u32>,
    /// Its status, or why it could not be read.
    pub status: Result<ServerStatus, String>,
}

/// Asks every server named in the map for its status.
pub async fn servers(map: &ClusterMap, transport: &HttpTransport) -> Vec<ServerRow> {
    let mut by_addr: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
    for device in map.devices() {
        if let Some(addr) = &device.addr {
            by_addr.entry(addr.clone()).or_default().push(device.id.0);
        }
    }
    let answers =
        futures_util::future::join_all(by_addr.keys().map(|addr| async move {
            transport.server_status(addr).await.map_err(|f| f.to_string())
        }))
        .await;
    by_addr
        .into_iter()
        .zip(answers)
        .map(|((addr, devices), status)| ServerRow { addr, devices, status })
        .collect()
}

fn eta(seconds: Option<u64>) -> String {
    match seconds {
        None => "-".into(),
        Some(s) if s < 120 => format!("{s}s"),
        Some(s) => format!("{}m{:02}s", s / 60, s % 60),
    }
}

/// The name of the server at a row: its devices' host buckets (their parent buckets when the
/// map has no `host` type), or the devices' names.
pub fn server_name(map: &ClusterMap, row: &ServerRow) -> String {
    let host = map.type_by_name("host");
    let mut names: Vec<String> = Vec::new();
    for id in &row.devices {
        let item = optio_placement::ItemId(*id as i32);
        let name = match host.and_then(|t| map.ancestor_of_type(item, t)) {
            Some(bucket) => bucket.name.clone(),
            None => match map.parent(item).and_then(|b| map.bucket(b)) {
                Some(bucket) => bucket.name.clone(),
                None => map.item_name(item).unwrap_or("-").to_string(),
            },
        };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names.join(",")
}

/// A transport failure, short: "connection refused", "no answer within 2s"…
fn short_reason(error: &str) -> String {
    let lower = error.to_lowercase();
    for (marker, short) in [
        ("connection refused", "not running (connection refused)"),
        ("timed out", "no answer (timed out)"),
        ("no route to host", "unreachable (no route to host)"),
        ("certificate", "TLS refused (certificate)"),
        ("fenced", "fenced (its lease lapsed)"),
    ] {
        if lower.contains(marker) {
            return short.to_string();
        }
    }
    let last = error.rsplit(": ").next().unwrap_or(error);
    last.chars().take(80).collect()
}

fn table(map: &ClusterMap, rows: &[ServerRow]) -> String {
    let mut table = Table::new(&[
        "server",
        "address",
        "devices",
        "epoch",
        "phase",
        "moved",
        "moved bytes",
        "remaining",
        "rate",
        "ETA",
        "note",
    ])
    .left(&[0, 1, 2, 4, 10]);
    let mut ordered: Vec<&ServerRow> = rows.iter().collect();
    ordered.sort_by_cached_key(|row| (server_name(map, row), row.addr.clone()));
    for row in ordered {
        let devices = row.devices.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",");
        match &row.status {
            Ok(status) => {
                let m = &status.migration;
                let stale = status.epoch < map.epoch().0;
                table.row(vec![
                    server_name(map, row),
                    row.addr.clone(),
                    devices,
                    status.epoch.to_string(),
                    m.phase.name().into(),
                    format!("{}/{}", m.copies_done, m.copies_planned),
                    bytes(m.bytes_moved as f64),
                    bytes(m.remaining_bytes as f64),
                    format!("{}/s", bytes(m.rate_bytes_per_sec as f64)),
                    eta(m.eta_seconds),
                    if stale {
                        format!("behind the map's epoch {}", map.epoch())
                    } else {
                        m.last_error.clone().unwrap_or_default()
                    },
                ]);
            }
            Err(error) => table.row(vec![
                server_name(map, row),
                row.addr.clone(),
                devices,
                "-".into(),
                "unreachable".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                short_reason(error),
            ]),
        }
    }
    table.render()
}

/// The cluster's health, as `optio status` prints it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Health {
    /// `HEALTH_OK`, `HEALTH_WARN` or `HEALTH_ERR`.
    pub level: &'static str,
    /// Why it is not OK, one line each.
    pub problems: Vec<String>,
    /// What is worth knowing but needs nothing (devices out of the map's placement).
    pub notes: Vec<String>,
    /// Placement groups (of the pools that have them) with every replica up and serving.
    pub pgs_healthy: u64,
    /// With fewer replicas than the pool's size (devices down or out of their set), but at
    /// least min_size serving: writes are acknowledged, degraded.
    pub pgs_degraded: u64,
    /// With every replica placed but some not serving yet (catching up, or not answering).
    pub pgs_recovering: u64,
    /// With fewer than min_size replicas serving: writes are refused.
    pub pgs_inactive: u64,
}

impl Health {
    /// The exit code of `optio status`: 0 OK, 2 WARN, 3 ERR (1 is left to errors).
    pub fn exit_code(&self) -> u8 {
        match self.level {
            "HEALTH_OK" => 0,
            "HEALTH_WARN" => 2,
            _ => 3,
        }
    }
}

/// Placement groups by state (see [`Health`]'s fields).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PgStates {
    /// Every replica up and serving.
    pub healthy: u64,
    /// Fewer replicas than the pool's size, at least min_size serving.
    pub degraded: u64,
    /// Every replica placed, some not serving yet.
    pub recovering: u64,
    /// Fewer than min_size replicas serving.
    pub inactive: u64,
}

/// The state of every placement group of `map`'s pools when the devices `serving` serve:
/// every PG placed, so a function of the epoch and `serving` only (the console keeps it for
/// as long as both stay the same).
pub fn pg_states(map: &ClusterMap, serving: &std::collections::BTreeSet<u32>) -> PgStates {
    let mut states = PgStates::default();
    if let Ok(placement) = optio_placement::Placement::new(map) {
        let mut scratch = placement.scratch();
        let mut set = optio_placement::ReplicaSet::new();
        for pool in placement.pools().filter(|p| p.pool().pg_num > 0) {
            let info = pool.pool();
            for seed in 0..info.pg_num {
                pool.place(pool.key_of_seed(seed), &mut scratch, &mut set);
                states.count(info, &set, serving);
            }
        }
    }
    states
}

/// [`pg_states`] from the PGs' sets of a map placed already.
pub fn pg_states_placed(
    map: &ClusterMap,
    placed: &optio_placement::analysis::PlacedMap,
    serving: &std::collections::BTreeSet<u32>,
) -> PgStates {
    let mut states = PgStates::default();
    for pool in &placed.pools {
        let Some(info) = map.pool(pool.pool) else { continue };
        for set in pool.pg_sets() {
            states.count(info, &set, serving);
        }
    }
    states
}

impl PgStates {
    /// Counts a PG of pool `info` placed on `set`, given the devices `serving`.
    fn count(
        &mut self,
        info: &optio_placement::Pool,
        set: &optio_placement::ReplicaSet,
        serving: &std::collections::BTreeSet<u32>,
    ) {
        let members = set.devices().count() as u32;
        let live = set.devices().filter(|d| serving.contains(&d.0)).count() as u32;
        if live < info.min_size {
            self.inactive += 1;
        } else if members < info.size {
            self.degraded += 1;
        } else if live < members {
            self.recovering += 1;
        } else {
            self.healthy += 1;
        }
    }
}

/// The health of the cluster `map` describes, from its servers' answers: which devices are
/// down, out, not answering or catching up, and what that does to each placement group.
pub fn health(map: &ClusterMap, rows: &[ServerRow]) -> Health {
    health_with(map, rows, pg_states)
}

/// [`health`], with the placement groups' states from `pgs` (given the devices serving).
pub fn health_with(
    map: &ClusterMap,
    rows: &[ServerRow],
    pgs: impl FnOnce(&ClusterMap, &std::collections::BTreeSet<u32>) -> PgStates,
) -> Health {
    let mut serving = std::collections::BTreeSet::new();
    let mut problems = Vec::new();
    let mut warn = false;
    let names = |ids: &[u32]| ids.iter().map(|d| format!("osd.{d}")).collect::<Vec<_>>().join(", ");
    let (mut down, mut out, mut silent, mut recovering) = (vec![], vec![], vec![], vec![]);
    for device in map.devices() {
        // A device out of the placement holds nothing the cluster needs (once data moved
        // off it): a note, not a problem, whether it is up or down.
        if !device.is_in {
            out.push(device.id.0);
        } else if !device.up {
            down.push(device.id.0);
        }
    }
    for row in rows {
        match &row.status {
            Ok(status) => {
                for device in &status.devices {
                    let id = device.metrics.device;
                    if device.recovering {
                        if map.device(DeviceId(id)).is_some_and(|d| d.up) {
                            recovering.push(id);
                        }
                    } else {
                        serving.insert(id);
                    }
                }
            }
            Err(_) => silent.extend(
                row.devices.iter().filter(|d| map.device(DeviceId(**d)).is_some_and(|d| d.up)),
            ),
        }
    }
    let mut notes = Vec::new();
    if !out.is_empty() {
        notes.push(format!("{} device(s) out: {}", out.len(), names(&out)));
    }
    for (list, what) in [
        (&down, "down"),
        (&silent, "up in the map but not answering"),
        (&recovering, "catching up on missed writes"),
    ] {
        if !list.is_empty() {
            warn = true;
            problems.push(format!("{} device(s) {what}: {}", list.len(), names(list)));
        }
    }
    if !all_done(map, rows) {
        warn = true;
        problems.push("data is moving to where this epoch places it".into());
    }
    let PgStates { healthy, degraded, recovering: recovering_pgs, inactive } = pgs(map, &serving);
    if inactive > 0 {
        problems.insert(
            0,
            format!("{inactive} placement group(s) with fewer than min_size replicas serving: their writes are refused"),
        );
    }
    if degraded + recovering_pgs > 0 {
        warn = true;
    }
    let level = if inactive > 0 {
        "HEALTH_ERR"
    } else if warn {
        "HEALTH_WARN"
    } else {
        "HEALTH_OK"
    };
    Health {
        level,
        problems,
        notes,
        pgs_healthy: healthy,
        pgs_degraded: degraded,
        pgs_recovering: recovering_pgs,
        pgs_inactive: inactive,
    }
}

/// Whether every server holding an up device reports its migration done for `epoch`.
pub fn all_done(map: &ClusterMap, rows: &[ServerRow]) -> bool {
    rows.iter().all(|row| {
        let up = row.devices.iter().any(|d| map.device(DeviceId(*d)).is_some_and(|d| d.up));
        !up || row.status.as_ref().is_ok_and(|s| s.migration.settled_at(map.epoch().0))
    })
}

/// The servers' answers as `optio status --json` prints them (and the console serves them):
/// one object per server, its name, address, devices, epoch, migration and device metrics —
/// or the error that kept it from answering.
pub fn servers_json(map: &ClusterMap, rows: &[ServerRow]) -> Vec<serde_json::Value> {
    rows.iter()
        .map(|r| match &r.status {
            Ok(s) => serde_json::json!({
                "name": server_name(map, r), "addr": r.addr, "devices": r.devices,
                "epoch": s.epoch, "migration": s.migration,
                "metrics": s.devices.iter().map(|d| &d.metrics).collect::<Vec<_>>(),
            }),
            Err(e) => serde_json::json!({
                "name": server_name(map, r), "addr": r.addr, "devices": r.devices, "error": e,
            }),
        })
        .collect()
}

/// One pool's space: raw (what its files take on the devices that answered) and logical (an
/// estimate of what clients stored: raw divided by the pool's copy factor).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PoolUsage {
    /// The pool's id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// `replicated` or `erasure`.
    pub kind: &'static str,
    /// How the pool keeps its objects: `3 copies`, `erasure 4+2`.
    pub redundancy: String,
    /// Raw bytes per logical byte: `size` for a replicated pool, (K+M)/K for an erasure-coded
    /// one.
    pub copy_factor: f64,
    /// Bytes of the pool's files (replicas, chunks and kept versions, headers included),
    /// summed over the devices that answered.
    pub raw_bytes: u64,
    /// `raw_bytes` divided by `copy_factor`.
    pub logical_bytes: u64,
    /// The pool's files (replicas, chunks and kept versions; tombstones not counted).
    pub raw_objects: u64,
    /// Objects clients stored, estimated: `raw_objects` divided by the files per object
    /// (`size`, or K+M chunks).
    pub objects: u64,
}

/// Raw and logical space per pool, and their totals ([`space`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Space {
    /// Each pool of the map, in the map's order.
    pub pools: Vec<PoolUsage>,
    /// The pools' raw bytes summed.
    pub raw_bytes: u64,
    /// The pools' logical bytes summed.
    pub logical_bytes: u64,
    /// The pools' raw objects summed.
    pub raw_objects: u64,
    /// The pools' objects (estimated) summed.
    pub objects: u64,
    /// Devices of the map whose server answered (their figures are counted).
    pub devices_reporting: usize,
    /// Devices of the map whose server did not answer (their figures are missing).
    pub devices_missing: usize,
    /// How logical space is estimated, for people.
    pub estimate: &'static str,
}

/// How [`Space`]'s logical figures are estimated.
pub const LOGICAL_ESTIMATE: &str = "logical = raw / the pool's copy factor (its size for a \
     replicated pool, (K+M)/K for an erasure-coded one); objects: raw / its files per object \
     (size, or K+M chunks). An estimate: headers count as data, kept versions and copies in \
     flight during rebalancing count too, and devices not answering are missing";

/// `value` × `num` / `den`, rounded to nearest (no overflow).
fn scaled(value: u64, num: u64, den: u64) -> u64 {
    if den == 0 {
        return value;
    }
    let exact = (u128::from(value) * u128::from(num) + u128::from(den) / 2) / u128::from(den);
    u64::try_from(exact).unwrap_or(u64::MAX)
}

/// Raw and logical space per pool of `map`, from the servers' answers ([`DeviceStatus`]'s
/// `pools`, summed over the devices that answered): what `optio status` prints and the
/// console serves.
///
/// [`DeviceStatus`]: optio_proto::DeviceStatus
pub fn space(map: &ClusterMap, rows: &[ServerRow]) -> Space {
    let mut raw: std::collections::HashMap<u32, (u64, u64)> = Default::default();
    let mut reporting = BTreeSet::new();
    for row in rows {
        let Ok(status) = &row.status else { continue };
        for device in &status.devices {
            reporting.insert(device.metrics.device);
            for pool in &device.pools {
                let entry = raw.entry(pool.pool).or_default();
                entry.0 = entry.0.saturating_add(pool.bytes);
                entry.1 = entry.1.saturating_add(pool.objects);
            }
        }
    }
    let pools: Vec<PoolUsage> = map
        .pools()
        .iter()
        .map(|p| {
            let (raw_bytes, raw_objects) = raw.get(&p.id.0).copied().unwrap_or_default();
            // Bytes: raw × data / stored; objects: raw / files per object.
            let (kind, redundancy, data, stored) = match &p.erasure {
                Some(e) => ("erasure", format!("erasure {e}"), e.k.max(1), e.chunks().max(1)),
                None => {
                    let size = p.size.max(1);
                    let copies = if size == 1 { "1 copy".into() } else { format!("{size} copies") };
                    ("replicated", copies, 1, size)
                }
            };
            PoolUsage {
                id: p.id.0,
                name: p.name.clone(),
                kind,
                redundancy,
                copy_factor: f64::from(stored) / f64::from(data),
                raw_bytes,
                logical_bytes: scaled(raw_bytes, u64::from(data), u64::from(stored)),
                raw_objects,
                objects: scaled(raw_objects, 1, u64::from(stored)),
            }
        })
        .collect();
    let sum = |f: fn(&PoolUsage) -> u64| pools.iter().map(f).fold(0u64, u64::saturating_add);
    Space {
        raw_bytes: sum(|p| p.raw_bytes),
        logical_bytes: sum(|p| p.logical_bytes),
        raw_objects: sum(|p| p.raw_objects),
        objects: sum(|p| p.objects),
        devices_missing: map.devices().iter().filter(|d| !reporting.contains(&d.id.0)).count(),
        devices_reporting: reporting.len(),
        pools,
        estimate: LOGICAL_ESTIMATE,
    }
}

/// [`Space`] as `optio status` prints it: a table of the pools and their total.
fn space_table(space: &Space) -> String {
    let mut table = Table::new(&["pool", "redundancy", "raw", "logical", "raw objects", "objects"])
        .left(&[0, 1]);
    for p in &space.pools {
        table.row(vec![
            p.name.clone(),
            p.redundancy.clone(),
            bytes(p.raw_bytes as f64),
            bytes(p.logical_bytes as f64),
            p.raw_objects.to_string(),
            p.objects.to_string(),
        ]);
    }
    table.row(vec![
        "total".into(),
        String::new(),
        bytes(space.raw_bytes as f64),
        bytes(space.logical_bytes as f64),
        space.raw_objects.to_string(),
        space.objects.to_string(),
    ]);
    table.render()
}

/// Runs `optio status`; returns the exit code ([`Health::exit_code`]).
pub fn run(args: Args) -> Result<u8> {
    crate::commands::init_logging("warn");
    let source = args.live.source()?;
    let runtime = crate::commands::runtime()?;
    runtime.block_on(async move {
        let transport = args.live.transport()?;
        if !args.watch {
            let map = source.load().await?;
            let rows = servers(&map, &transport).await;
            let health = health(&map, &rows);
            let jobs = if rows.iter().any(|r| r.status.is_ok()) {
                volume_jobs(&source, args.live.transport()?).await
            } else {
                Err("no server answers".into())
            };
            let space = space(&map, &rows);
            if args.json {
                let json = servers_json(&map, &rows);
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "map": source.describe(), "epoch": map.epoch().0,
                        "settled": all_done(&map, &rows), "servers": json, "health": health,
                        "space": space,
                        "volume_jobs": match &jobs {
                            Ok(jobs) => serde_json::to_value(jobs)?,
                            Err(error) => serde_json::json!({ "error": error }),
                        },
                    }))?
                );
            } else {
                println!("map {} at epoch {}", source.describe(), map.epoch());
                print!("{}", table(&map, &rows));
                if let Some(line) = reintegration_line(&source, &map).await {
                    println!("{line}");
                }
                let answering = rows.iter().filter(|r| r.status.is_ok()).count();
                println!(
                    "{}",
                    if answering == 0 {
                        "no server answers: nothing can move, and nothing is known of its progress"
                    } else if all_done(&map, &rows) {
                        "every server is done: data is where this epoch places it"
                    } else if answering < rows.len() {
                        "rebalancing waits for the servers that do not answer (`optio status --watch` follows it)"
                    } else {
                        "rebalancing is under way (`optio status --watch` follows it)"
                    }
                );
                println!(
                    "placement groups: {} healthy, {} degraded, {} recovering, {} inactive",
                    health.pgs_healthy, health.pgs_degraded, health.pgs_recovering, health.pgs_inactive
                );
                println!("space per pool (raw: the files on the devices; logical: what clients stored, estimated):");
                print!("{}", space_table(&space));
                println!("  ({})", space.estimate);
                if space.devices_missing > 0 {
                    println!(
                        "  ({} device(s) did not answer: their space is not counted)",
                        space.devices_missing
                    );
                }
                println!("health: {}", health.level);
                for problem in &health.problems {
                    println!("  {problem}");
                }
                for note in &health.notes {
                    println!("  (note) {note}");
                }
                match &jobs {
                    Ok(jobs) if jobs.is_empty() => {}
                    Ok(jobs) => {
                        println!("volume jobs (in the background):");
                        for job in jobs {
                            println!("  {}", job_line(job));
                        }
                    }
                    Err(error) => println!("volume jobs: unknown ({error})"),
                }
            }
            return Ok(health.exit_code());
        }
        watch(&source, &transport).await.map(|()| 0)
    })
}

/// The volumes' background jobs (snapshot trims, removals), within 5 s.
async fn volume_jobs(
    source: &optio_cluster::source::MapSource,
    transport: HttpTransport,
) -> Result<Vec<optio_client::trim::PendingJob>, String> {
    let listed = async {
        let client = optio_client::Client::connect_with_transport(
            source.clone(),
            optio_client::ClientConfig::default(),
            std::sync::Arc::new(transport),
        )
        .await
        .map_err(|e| e.to_string())?;
        optio_client::trim::pending(&client).await.map_err(|e| e.to_string())
    };
    match tokio::time::timeout(Duration::from_secs(5), listed).await {
        Ok(result) => result,
        Err(_) => Err("the volume headers were not listed within 5 s".into()),
    }
}

/// One background job, for people.
fn job_line(job: &optio_client::trim::PendingJob) -> String {
    let (what, counted) = match job.kind {
        "remove" => ("removing volume", "copies removed"),
        "flatten" => ("flattening clone", "objects copied"),
        _ => ("trimming the snapshot copies of", "copies removed"),
    };
    let age = optio_client::volume::now_unix_s().saturating_sub(job.started_unix_s);
    let progress = if job.objects == 0 {
        "not listed yet".to_string()
    } else {
        format!(
            "{} of {} objects ({:.0} %)",
            job.done,
            job.objects,
            100.0 * job.done as f64 / job.objects as f64
        )
    };
    format!(
        "{what} '{}' (pool {}): {progress}, {} {counted}, asked {age} s ago{}",
        job.volume,
        job.pool,
        job.count,
        job.by.as_ref().map(|b| format!(", by {b}")).unwrap_or_default()
    )
}

/// What re-integration reports, if it runs (elastic maps).
async fn reintegration_line(
    source: &optio_cluster::source::MapSource,
    map: &ClusterMap,
) -> Option<String> {
    let membership = map.membership()?;
    let statuses = source.statuses::<optio_client::ReintegrationStatus>().await.ok()?;
    let current = membership.current();
    let mut line = format!(
        "membership version {}: {} of {} servers active{}",
        current.version,
        membership.active_count(current),
        membership.order.len(),
        if membership.versions.len() > 1 {
            format!(" ({} versions kept until re-integration is done)", membership.versions.len())
        } else {
            String::new()
        }
    );
    if let Some(r) = statuses.get(super::reintegrate::STATUS_MEMBER) {
        line.push_str(&format!(
            "\nre-integration ({}): {} dirty entries left, {} handled, {} replicas ({}) copied, {} copies dropped{}",
            match r.mode {
                Some(optio_client::ReintegrationMode::Full) => "full",
                _ => "selective",
            },
            r.dirty_entries,
            r.entries_handled,
            r.replicas_copied,
            bytes(r.bytes_copied as f64),
            r.copies_dropped,
            r.last_error.as_ref().map(|e| format!("; last error: {e}")).unwrap_or_default()
        ));
    }
    Some(line)
}

async fn watch(source: &optio_cluster::source::MapSource, transport: &HttpTransport) -> Result<()> {
    use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
    let bars = MultiProgress::new();
    let style =
        ProgressStyle::with_template("{prefix:>21} {bar:30} {bytes:>10}/{total_bytes:<10} {msg}")
            .expect("a valid template");
    let mut rows_bars: std::collections::BTreeMap<String, ProgressBar> = Default::default();
    loop {
        let map = source.load().await?;
        let rows = servers(&map, transport).await;
        for row in &rows {
            let bar = rows_bars.entry(row.addr.clone()).or_insert_with(|| {
                let bar = bars.add(ProgressBar::new(0));
                bar.set_style(style.clone());
                bar.set_prefix(format!("{} {}", server_name(&map, row), row.addr));
                bar
            });
            match &row.status {
                Ok(status) => {
                    let m = &status.migration;
                    bar.set_length(m.bytes_planned.max(m.bytes_moved));
                    bar.set_position(m.bytes_moved);
                    bar.set_message(format!(
                        "epoch {} {} {}/{} copies, {}/s, ETA {}",
                        status.epoch,
                        m.phase.name(),
                        m.copies_done,
                        m.copies_planned,
                        bytes(m.rate_bytes_per_sec as f64),
                        eta(m.eta_seconds)
                    ));
                }
                Err(error) => {
                    // Nothing is known of its progress: an empty bar, not a full one.
                    bar.set_length(1);
                    bar.set_position(0);
                    bar.set_message(format!("unreachable: {}", short_reason(error)));
                }
            }
        }
        if all_done(&map, &rows) {
            for bar in rows_bars.values() {
                bar.finish();
            }
            println!("every server is done with epoch {}", map.epoch());
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use optio_local::cluster::{ERASURE_POOL, LocalClusterSpec, PLAIN_POOL, layout, map_text};
    use optio_proto::{DeviceMetrics, DeviceStatus, PoolSpace};

    use super::*;

    /// Nine devices (3 zones × 3 hosts), the replicated pools and `ec` = `4+2`.
    fn map() -> ClusterMap {
        let spec = LocalClusterSpec { erasure: Some("4+2".into()), ..LocalClusterSpec::default() };
        optio_mapfile::parse(&map_text(&spec, &layout(&spec), 1)).expect("a valid map")
    }

    /// The PGs' states counted from a map placed once (the console's) are those `pg_states`
    /// counts placing every PG itself, with every device serving and with some not.
    #[test]
    fn pg_states_from_a_placed_map_are_those_of_placing_each_pg() {
        let map = map();
        let placed = optio_placement::analysis::PlacedMap::new(&map, 10).expect("places");
        let all: std::collections::BTreeSet<u32> = (0..9).collect();
        for serving in [all.clone(), (0..6).collect(), (2..3).collect()] {
            let states = pg_states(&map, &serving);
            assert_eq!(pg_states_placed(&map, &placed, &serving), states);
            assert!(states.healthy + states.degraded + states.recovering + states.inactive > 0);
        }
        assert!(pg_states(&map, &all).healthy > 0);
    }

    fn device(id: u32, pools: Vec<PoolSpace>) -> DeviceStatus {
        DeviceStatus {
            metrics: DeviceMetrics { device: id, ..DeviceMetrics::default() },
            objects: pools.iter().map(|p| p.objects).sum(),
            records: 0,
            corrupt_found: 0,
            recovering: false,
            caught_up: 0,
            scrub: None,
            scrubbing: None,
            scrub_repaired: 0,
            scrub_unrepairable: 0,
            pools,
        }
    }

    fn row(id: u32, status: Result<Vec<PoolSpace>, &str>) -> ServerRow {
        ServerRow {
            addr: format!("127.0.0.1:{}", 7000 + id),
            devices: vec![id],
            status: status.map_err(str::to_string).map(|pools| ServerStatus {
                epoch: 1,
                devices: vec![device(id, pools)],
                migration: Default::default(),
                fenced: false,
                local: None,
                cpu_seconds: None,
                syncs: 0,
            }),
        }
    }

    /// Raw is summed over the devices that answered; logical is raw / size for a replicated
    /// pool and raw × K / (K+M) for an erasure-coded one; pools the map does not have, and
    /// devices that did not answer, are not counted (the latter said).
    #[test]
    fn raw_is_summed_and_logical_divided_by_each_pools_copy_factor() {
        let map = map();
        let plain = map.pool_by_name(PLAIN_POOL).expect("plain").id.0;
        let ec = map.pool_by_name(ERASURE_POOL).expect("ec").id.0;
        let space_of = |pool, objects, bytes| PoolSpace { pool, objects, bytes };
        let mut rows: Vec<ServerRow> = (0..3)
            .map(|id| row(id, Ok(vec![space_of(plain, 2, 3000), space_of(ec, 1, 600)])))
            .collect();
        rows.extend((3..6).map(|id| row(id, Ok(vec![space_of(ec, 1, 600), space_of(99, 5, 5)]))));
        rows.extend((6..8).map(|id| row(id, Ok(vec![]))));
        rows.push(row(8, Err("connection refused")));
        let space = space(&map, &rows);
        let pool = |id: u32| space.pools.iter().find(|p| p.id == id).expect("the pool");
        let plain = pool(plain);
        assert_eq!((plain.kind, plain.redundancy.as_str()), ("replicated", "3 copies"));
        assert_eq!((plain.raw_bytes, plain.logical_bytes), (9000, 3000));
        assert_eq!((plain.raw_objects, plain.objects, plain.copy_factor), (6, 2, 3.0));
        let ec = pool(ec);
        assert_eq!((ec.kind, ec.redundancy.as_str()), ("erasure", "erasure 4+2"));
        assert_eq!((ec.raw_bytes, ec.logical_bytes), (3600, 2400));
        assert_eq!((ec.raw_objects, ec.objects, ec.copy_factor), (6, 1, 1.5));
        assert_eq!(space.pools.len(), map.pools().len(), "every pool of the map, none other");
        assert_eq!((space.raw_bytes, space.logical_bytes), (12_600, 5400));
        assert_eq!((space.raw_objects, space.objects), (12, 3));
        assert_eq!((space.devices_reporting, space.devices_missing), (8, 1));
        let text = space_table(&space);
        assert!(text.lines().any(|l| l.starts_with("ec ") && l.contains("erasure 4+2")), "{text}");
        assert!(text.lines().last().is_some_and(|l| l.starts_with("total")), "{text}");
    }
}
