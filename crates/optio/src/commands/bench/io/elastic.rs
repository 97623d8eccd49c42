//! Elastic consistent hashing's 3-phase test (seed 004 §V-A, Fig. 7, after SpringFS) on
//! volumes on the emulated cluster: 10 server hosts in 2 racks, 2-way replication, a volume
//! per client written and read by fio through `optio nbd` in a client host of each rack
//! (local reads off), the elastic pools' dirty table in Redis. Once per way of resizing
//! ([`Mode`]), each on a cluster of its own:
//!
//! * phase 1, full power: fio writes every volume sequentially (4 MiB blocks);
//! * resize down: 4 of the 10 servers turned down — a membership version of the first 6 ranks
//!   (elastic CH), or marked out and waited for while their data moves away (original CH's
//!   clean-up before power-off); nothing without resizing;
//! * phase 2, light: rate-limited, writes two thirds of its bytes (over and over the first
//!   tenth of each volume, its hot set) and reads a third (at random over the volume), as the
//!   paper's 8.4 GB written and 4.2 GB read at 20 MB/s after 14 GB;
//! * resize up, and phase 3 at once while data moves: the volumes read sequentially, their
//!   last fifth written (20 % writes, not touching the hot set: every offloaded replica must
//!   be copied back).
//!
//! Every mode migrates under one budget (`optio bench elastic`'s): re-integration copies at
//! the rate, original CH's servers rebalance at a tenth of it each. Each phase starts with
//! `optio nbd` started after the resize, on the map every server holds. Reported: throughput
//! over time (fio's bandwidth logs), each phase's throughput and time, the bytes each resize
//! moved, the selective audit, the machine's CPU, and machine-hours over the ideal (servers on
//! × time over servers following the load) beside Table II.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use optio_local::emulate::EmulatedHost;
use optio_local::emulate::spec::{Conditions, EmulationSpec};
use optio_sim::{Plot, PlotKind, Report, Series, Table};
use serde_json::json;

use super::context::IoContext;
use super::cpu::Meter;
use super::fio::{self, Job};
use super::rig::{Nbd, NbdOptions, Phase, Rig};
use super::stats::median;
use crate::commands::bench::resizing::{self, Audit, INACTIVE, Mode, REPLICAS, SERVERS};
use crate::output::bytes;

const RACKS: u32 = 2;
const HOSTS_PER_RACK: u32 = SERVERS / RACKS;
/// A 4 MiB block: fio's request and the volumes' object size.
const BLOCK: u64 = 4 << 20;
/// Each client's volume at scale 1, and the smallest.
const VOLUME_BYTES: u64 = 96 << 20;
const VOLUME_BYTES_MIN: u64 = 16 << 20;
/// Phase 2 moves this share of phase 1's bytes (the paper: 12.6 GB after 14 GB), two thirds
/// written.
const PHASE2_SHARE: f64 = 0.9;
/// Phase 2's writes fall on this share of each volume (its first objects), by default.
pub const HOT_FRACTION: f64 = 0.1;
/// The range `--hot-fraction` takes.
pub const HOT_FRACTION_RANGE: std::ops::RangeInclusive<f64> = 0.02..=0.5;
/// Phase 3 writes this share of each volume (its last objects) and reads the rest.
const PHASE3_WRITE_FRACTION: f64 = 0.2;
/// Phase 2's rate over all clients, bytes per second (the paper's 20 MB/s against its
/// cluster's ~100 MB/s; here against this machine's).
const PHASE2_BYTES_PER_SEC: u64 = 6_000_000;
/// The migration budget, bytes per second, every mode, by default.
pub const MIGRATION_BYTES_PER_SEC: u64 = 8_000_000;

/// What `optio bench io elastic` may be told besides the scale.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The share of each volume phase 2 writes.
    pub hot_fraction: f64,
    /// The migration budget, bytes per second.
    pub migration_bytes_per_sec: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options { hot_fraction: HOT_FRACTION, migration_bytes_per_sec: MIGRATION_BYTES_PER_SEC }
    }
}
/// I/Os in flight per fio job.
const IODEPTH: u32 = 4;
const BURST_BYTES: u64 = 64 << 10;
/// Table II of the paper: machine-hours over ideal, (trace, original CH, primary+full,
/// primary+selective).
const TABLE_II: [(&str, f64, f64, f64); 2] =
    [("CC-a", 1.32, 1.24, 1.21), ("CC-b", 1.51, 1.37, 1.33)];

fn cluster(context: &IoContext) -> EmulationSpec {
    super::rig::uniform_spec(
        RACKS,
        HOSTS_PER_RACK,
        context.host_bits.unwrap_or(100_000_000),
        context.rack_bits.unwrap_or(400_000_000),
        BURST_BYTES,
        &Conditions::default(),
    )
}

/// The pool of `mode`: a ring whose replicas go to distinct hosts (the paper's flat
/// consistent hashing: racks would leave a shrunk rack's one active host every replica of
/// it), or the elastic pool.
fn pools(mode: Mode) -> String {
    match mode {
        Mode::Original => format!(
            "[[pools]]\nid = 1\nname = \"{}\"\nengine = \"ring\"\nsize = {REPLICAS}\nvnode_bytes = {}\nfailure_domain = \"host\"\n",
            Mode::Original.pool(),
            256u64 << 20
        ),
        _ => format!(
            "[[pools]]\nid = 2\nname = \"{}\"\nengine = \"elastic\"\nsize = {REPLICAS}\n",
            Mode::Full.pool()
        ),
    }
}

/// The sizes (and the migration budget) of a run.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    migration_bytes_per_sec: u64,
    volume_bytes: u64,
    hot_bytes: u64,
    phase2_loops: u32,
    phase2_read_bytes: u64,
    phase3_write_bytes: u64,
}

impl Sizes {
    fn new(context: &IoContext, options: Options) -> Sizes {
        let volume_bytes = context.scaled(VOLUME_BYTES, VOLUME_BYTES_MIN).div_ceil(BLOCK) * BLOCK;
        let objects = volume_bytes / BLOCK;
        let blocks = |fraction: f64| ((objects as f64 * fraction).round() as u64).max(1) * BLOCK;
        let hot_bytes = blocks(options.hot_fraction);
        let phase2_bytes = volume_bytes as f64 * PHASE2_SHARE;
        Sizes {
            migration_bytes_per_sec: options.migration_bytes_per_sec,
            volume_bytes,
            hot_bytes,
            phase2_loops: ((phase2_bytes * 2.0 / 3.0 / hot_bytes as f64).round() as u32).max(1),
            phase2_read_bytes: ((phase2_bytes / 3.0) as u64 / BLOCK).max(1) * BLOCK,
            phase3_write_bytes: blocks(PHASE3_WRITE_FRACTION).min(volume_bytes - hot_bytes),
        }
    }
}

/// What one run of one mode measured.
#[derive(Clone, Debug)]
struct Run {
    mode: Mode,
    /// (seconds since phase 1 started, MB/s over the clients).
    samples: Vec<(f64, f64)>,
    phase_starts: [f64; 3],
    phase_seconds: [f64; 3],
    phase_mb_per_s: [f64; 3],
    phase_cpu_percent: [f64; 3],
    cpu_percent: f64,
    shrink_bytes: u64,
    shrink_seconds: f64,
    grow_bytes: u64,
    grow_seconds: f64,
    cross_rack_bytes: u64,
    /// Servers on × seconds, phase 1 to the end of phase 3.
    server_seconds: f64,
    dirty_entries: u64,
    audit: Option<Audit>,
}

/// Runs the experiment: every mode (`runs` times each).
pub fn run(context: &IoContext, modes: &[Mode], options: Options) -> Result<Report> {
    if modes.is_empty() {
        bail!("no modes to run: use --modes with none, original, full, selective");
    }
    let runs = context.runs(1);
    let sizes = Sizes::new(context, options);
    let spec = cluster(context);
    let mut results: Vec<Run> = Vec::new();
    for round in 0..runs {
        for &mode in modes {
            context.say(format!(
                "elastic: run {}/{runs}, {}: starting the emulated cluster…",
                round + 1,
                mode.name()
            ));
            let run = run_mode(context, &spec, mode, sizes)
                .with_context(|| format!("elastic, {}", mode.name()))?;
            if let Some(audit) = &run.audit
                && !audit.exact()
            {
                bail!(
                    "elastic, {}: the audit of selective re-integration failed: {}",
                    mode.name(),
                    audit.note()
                );
            }
            results.push(run);
        }
    }
    Ok(report(context, &spec, modes, runs, sizes, &results))
}

fn run_mode(context: &IoContext, spec: &EmulationSpec, mode: Mode, sizes: Sizes) -> Result<Run> {
    let dir = context.dir.join(mode.arg());
    let rig = Rig::start_with_redis(spec, &pools(mode), &dir, |cluster| {
        cluster.replicas = REPLICAS;
        cluster.reintegration = mode.reintegration();
        cluster.reintegration_rate_bytes_per_sec = Some(sizes.migration_bytes_per_sec);
        cluster.migration_rate_bytes_per_sec =
            Some(sizes.migration_bytes_per_sec / u64::from(SERVERS));
    })?;
    // Started after the rig: its threads are in the router's namespace with this one.
    let runtime = crate::commands::runtime()?;
    let cluster = rig.cluster();
    let clients: Vec<EmulatedHost> = (1..=RACKS)
        .map(|rack| {
            rig.emulation()
                .clients_of(rack)
                .first()
                .map(|h| (*h).clone())
                .with_context(|| format!("no client host in rack {rack}"))
        })
        .collect::<Result<_>>()?;
    let volumes: Vec<String> = (0..clients.len()).map(|i| format!("e{i}")).collect();
    for volume in &volumes {
        rig.create_volume(volume, sizes.volume_bytes, mode.pool())?;
    }
    let log = |phase: u32, client: usize| rig.dir.join(format!("bw-p{phase}-c{client}"));
    let mut samples = Vec::new();
    let meter = Meter::start();
    let started = Instant::now();
    let mut phase_starts = [0.0; 3];
    let mut phases: Vec<Phase> = Vec::new();
    // Phase 1: write every volume at full power.
    context.say(format!("elastic, {}: phase 1 (writing the volumes)…", mode.name()));
    let jobs: Vec<Vec<Job>> = (0..clients.len())
        .map(|i| {
            vec![Job {
                rw: "write".into(),
                size_bytes: sizes.volume_bytes,
                bandwidth_log: Some(log(1, i)),
                ..job(&volumes[i])
            }]
        })
        .collect();
    phases.push(phase(&rig, &clients, &volumes, &jobs, started, &mut phase_starts[0])?);
    // Resize down.
    let map = cluster.load_map()?;
    let inactive = resizing::inactive_devices(&map);
    let before = runtime.block_on(resizing::moved_by_servers(cluster))?;
    let shrunk = Instant::now();
    resizing::apply(cluster, &resizing::shrink_changes(mode, &map))?;
    if mode == Mode::Original {
        context.say(format!("elastic, {}: clean-up before power-off…", mode.name()));
        runtime.block_on(resizing::wait_moved(cluster, mode, shrunk))?;
    }
    let shrink_seconds = shrunk.elapsed().as_secs_f64();
    let shrink_done = started.elapsed().as_secs_f64();
    let shrink_bytes =
        runtime.block_on(resizing::moved_by_servers(cluster))?.saturating_sub(before);
    // Phase 2: light and rate-limited, on the hot sets.
    context.say(format!(
        "elastic, {}: phase 2 ({} servers on)…",
        mode.name(),
        mode.phase2_servers()
    ));
    let per_client = PHASE2_BYTES_PER_SEC / clients.len() as u64;
    let jobs: Vec<Vec<Job>> = (0..clients.len())
        .map(|i| {
            vec![
                Job {
                    name: format!("{}-w", volumes[i]),
                    rw: "write".into(),
                    size_bytes: sizes.hot_bytes,
                    loops: Some(sizes.phase2_loops),
                    rate_bytes_per_sec: Some(per_client * 2 / 3),
                    bandwidth_log: Some(log(2, i)),
                    ..job(&volumes[i])
                },
                Job {
                    name: format!("{}-r", volumes[i]),
                    rw: "randread".into(),
                    size_bytes: sizes.volume_bytes,
                    io_limit_bytes: Some(sizes.phase2_read_bytes),
                    rate_bytes_per_sec: Some(per_client / 3),
                    bandwidth_log: Some(rig.dir.join(format!("bw-p2r-c{i}"))),
                    ..job(&volumes[i])
                },
            ]
        })
        .collect();
    phases.push(phase(&rig, &clients, &volumes, &jobs, started, &mut phase_starts[1])?);
    let phase2_done = started.elapsed().as_secs_f64();
    let partial_map = cluster.load_map()?;
    let mut hot_keys = Vec::new();
    for volume in &volumes {
        hot_keys.extend(hot_objects(&rig, volume, sizes)?);
    }
    let offloaded = if mode.elastic() {
        resizing::offloaded(&partial_map, mode.pool(), hot_keys.iter().map(String::as_str))
    } else {
        0
    };
    let dirty_entries = match (mode.elastic(), rig.dirty_url()) {
        (true, Some(url)) => runtime.block_on(async {
            let table = optio_cluster::dirty::DirtyTable::open(Some(&url), cluster.dir())
                .await
                .context("cannot open the dirty table in Redis")?;
            table.len().await.context("cannot count the dirty table's entries")
        })?,
        _ => 0,
    };
    // Resize up, and phase 3 while data moves.
    context.say(format!("elastic, {}: resizing up, phase 3 while data moves…", mode.name()));
    let before = runtime.block_on(resizing::moved_by_servers(cluster))?;
    let grown = Instant::now();
    resizing::apply(cluster, &resizing::grow_changes(mode, &inactive))?;
    let jobs: Vec<Vec<Job>> = (0..clients.len())
        .map(|i| {
            let write_from = sizes.volume_bytes - sizes.phase3_write_bytes;
            vec![
                Job {
                    name: format!("{}-r", volumes[i]),
                    rw: "read".into(),
                    size_bytes: write_from,
                    bandwidth_log: Some(log(3, i)),
                    ..job(&volumes[i])
                },
                Job {
                    name: format!("{}-w", volumes[i]),
                    rw: "write".into(),
                    size_bytes: sizes.phase3_write_bytes,
                    offset_bytes: write_from,
                    bandwidth_log: Some(rig.dir.join(format!("bw-p3w-c{i}"))),
                    ..job(&volumes[i])
                },
            ]
        })
        .collect();
    let (phase3, grow_seconds) = std::thread::scope(|scope| {
        let work = scope.spawn(|| {
            let mut start = 0.0;
            phase(&rig, &clients, &volumes, &jobs, started, &mut start).map(|p| (p, start))
        });
        let moved = runtime.block_on(resizing::wait_moved(cluster, mode, grown));
        let phase = work.join().map_err(|_| anyhow::anyhow!("phase 3's thread panicked"));
        (phase, moved)
    });
    let (phase3, start3) = phase3??;
    phase_starts[2] = start3;
    phases.push(phase3);
    let grow_seconds = grow_seconds?;
    let end = phase_starts[2] + phases[2].wall_seconds;
    let cpu = meter.stop();
    let status = runtime.block_on(resizing::reintegration(cluster));
    let grow_bytes = if mode.elastic() {
        status.bytes_copied
    } else {
        runtime.block_on(resizing::moved_by_servers(cluster))?.saturating_sub(before)
    };
    let audit = (mode == Mode::Selective).then(|| Audit::new(&status, offloaded, 0));
    for phase in 1..=3u32 {
        let mut points: BTreeMap<u64, f64> = BTreeMap::new();
        for i in 0..clients.len() {
            let mut paths = vec![log(phase, i)];
            match phase {
                2 => paths.push(rig.dir.join(format!("bw-p2r-c{i}"))),
                3 => paths.push(rig.dir.join(format!("bw-p3w-c{i}"))),
                _ => {}
            }
            for path in paths {
                for (t, mb) in fio::bandwidth_log(&path)? {
                    // Whole milliseconds since phase 1 started: the clients' windows add up.
                    let at = ((phase_starts[phase as usize - 1] + t) * 1000.0).round() as u64;
                    *points.entry(at).or_default() += mb;
                }
            }
        }
        samples.extend(points.into_iter().map(|(ms, mb)| (ms as f64 / 1000.0, mb)));
    }
    drop(rig);
    let phase_seconds = [phases[0].wall_seconds, phases[1].wall_seconds, phases[2].wall_seconds];
    // Bytes read and written over the phase's wall time (fio's per-direction rates divide by
    // each direction's own run time).
    let total = |p: &Phase| {
        (p.total(true).io_bytes + p.total(false).io_bytes) as f64 / p.wall_seconds.max(1e-9) / 1e6
    };
    Ok(Run {
        mode,
        samples,
        phase_starts,
        phase_seconds,
        phase_mb_per_s: [total(&phases[0]), total(&phases[1]), total(&phases[2])],
        phase_cpu_percent: [
            phases[0].cpu.busy_percent,
            phases[1].cpu.busy_percent,
            phases[2].cpu.busy_percent,
        ],
        cpu_percent: cpu.busy_percent,
        shrink_bytes,
        shrink_seconds,
        grow_bytes,
        grow_seconds,
        cross_rack_bytes: phases.iter().map(|p| p.traffic.cross_rack_bytes).sum(),
        server_seconds: resizing::server_seconds(&[
            (SERVERS, shrink_done),
            (mode.phase2_servers(), phase2_done - shrink_done),
            (SERVERS, end - phase2_done),
        ]),
        dirty_entries,
        audit,
    })
}

/// A 4 MiB job on `volume`, `IODEPTH` deep (the rest filled in by the phase).
fn job(volume: &str) -> Job {
    Job {
        name: volume.into(),
        volume: volume.into(),
        block_bytes: BLOCK,
        numjobs: 1,
        iodepth: IODEPTH,
        ..Job::default()
    }
}

/// Starts `optio nbd` for each client (on the map the servers hold now), runs `jobs` on all
/// of them, stops them (they flush); `start` gets the phase's start, seconds after `started`.
fn phase(
    rig: &Rig,
    clients: &[EmulatedHost],
    volumes: &[String],
    jobs: &[Vec<Job>],
    started: Instant,
    start: &mut f64,
) -> Result<Phase> {
    let mut servers: Vec<Nbd> = Vec::new();
    let opening = Instant::now();
    for (client, volume) in clients.iter().zip(volumes) {
        servers.push(rig.nbd(client, &[volume.to_string()], &NbdOptions::default())?);
    }
    let opening_seconds = opening.elapsed().as_secs_f64();
    let work: Vec<_> = clients
        .iter()
        .zip(&servers)
        .zip(jobs)
        .map(|((client, nbd), jobs)| (client, nbd, jobs.clone()))
        .collect();
    *start = started.elapsed().as_secs_f64();
    let mut phase = rig.fio_all(&work)?;
    // Opening the volumes is part of the phase.
    phase.wall_seconds += opening_seconds;
    for mut nbd in servers {
        nbd.stop();
    }
    Ok(phase)
}

/// The data objects phase 2 writes: the first `hot_bytes` of `volume`.
fn hot_objects(rig: &Rig, volume: &str, sizes: Sizes) -> Result<Vec<String>> {
    let text = rig.optio(&["volume", "info", volume, "--json"])?;
    let value: serde_json::Value = serde_json::from_str(&text).context("volume info --json")?;
    let id = value["id"].as_str().context("volume info --json has no id")?;
    let object_bytes = value["object_size"].as_u64().unwrap_or(BLOCK).max(1);
    Ok((0..sizes.hot_bytes.div_ceil(object_bytes))
        .map(|index| optio_client::volume::data_key(id, index))
        .collect())
}

fn report(
    context: &IoContext,
    spec: &EmulationSpec,
    modes: &[Mode],
    runs: u32,
    sizes: Sizes,
    results: &[Run],
) -> Report {
    let of = |mode: Mode| results.iter().filter(move |r| r.mode == mode);
    let med = |mode: Mode, f: &dyn Fn(&Run) -> f64| median(&of(mode).map(f).collect::<Vec<_>>());
    let phase_seconds: BTreeMap<Mode, [f64; 3]> = modes
        .iter()
        .map(|&m| (m, [0, 1, 2].map(|p| med(m, &|r: &Run| r.phase_seconds[p]))))
        .collect();
    let ideal = resizing::ideal_server_seconds(resizing::ideal_phase_seconds(&phase_seconds));
    let over_ideal = |r: &Run| r.server_seconds / ideal.max(1e-9);
    let clients = RACKS;
    let mut table = Table::new(
        &format!(
            "elastic — 3-phase test on volumes, {SERVERS} servers in {RACKS} racks, {REPLICAS}-way replication, {clients} clients × {} volume, {INACTIVE} servers off in phase 2, migration at most {}/s in every mode; median of {runs} run(s)",
            bytes(sizes.volume_bytes as f64),
            bytes(sizes.migration_bytes_per_sec as f64)
        ),
        &[
            "resizing",
            "phase 1 MB/s",
            "phase 2 MB/s",
            "phase 3 MB/s",
            "phase 3 s",
            "moved shrinking",
            "shrinking s",
            "moved growing",
            "growing s",
            "CPU busy %",
            "machine-hours / ideal",
        ],
    );
    for &mode in modes {
        table.row(vec![
            mode.name().into(),
            format!("{:.1}", med(mode, &|r| r.phase_mb_per_s[0])),
            format!("{:.1}", med(mode, &|r| r.phase_mb_per_s[1])),
            format!("{:.1}", med(mode, &|r| r.phase_mb_per_s[2])),
            format!("{:.1}", med(mode, &|r| r.phase_seconds[2])),
            bytes(med(mode, &|r| r.shrink_bytes as f64)),
            format!("{:.1}", med(mode, &|r| r.shrink_seconds)),
            bytes(med(mode, &|r| r.grow_bytes as f64)),
            format!("{:.1}", med(mode, &|r| r.grow_seconds)),
            format!("{:.0}", med(mode, &|r| r.cpu_percent)),
            format!("{:.2}", med(mode, &over_ideal)),
        ]);
    }
    let mut paper = Table::new(
        "machine-hours over ideal: the paper's Table II (traces of days, many resizes) beside one resize cycle here",
        &["", "original CH", "primary+full", "primary+selective"],
    );
    for (trace, original, full, selective) in TABLE_II {
        paper.row(vec![
            format!("paper, {trace}"),
            format!("{original:.2}"),
            format!("{full:.2}"),
            format!("{selective:.2}"),
        ]);
    }
    let here = |mode: Mode| {
        if modes.contains(&mode) { format!("{:.2}", med(mode, &over_ideal)) } else { "-".into() }
    };
    paper.row(vec![
        "Optio, emulated".into(),
        here(Mode::Original),
        here(Mode::Full),
        here(Mode::Selective),
    ]);
    let audits: Vec<&Audit> = of(Mode::Selective).filter_map(|r| r.audit.as_ref()).collect();
    let mut notes =
        vec![format!("scale {}; the paper's figure: seed 004 Fig. 7 and Table II", context.scale)];
    if let Some(last) = audits.last() {
        notes.push(format!(
            "selective audit exact in {} of {} run(s); last run: {}",
            audits.iter().filter(|a| a.exact()).count(),
            audits.len(),
            last.note()
        ));
    }
    let full = med(Mode::Full, &|r| r.grow_bytes as f64);
    let selective = med(Mode::Selective, &|r| r.grow_bytes as f64);
    if modes.contains(&Mode::Full) && modes.contains(&Mode::Selective) {
        notes.push(format!(
            "selective re-integration moved {:.1}x less than full ({} against {})",
            full / selective.max(1.0),
            bytes(selective),
            bytes(full)
        ));
    }
    notes.push(format!(
        "machine-hours: servers on × time from phase 1's start to phase 3's end ({SERVERS} in phases 1 and 3 and while original CH cleans up, {} in phase 2 when resizing); ideal: {SERVERS}, {}, {SERVERS} servers for the phases' durations without resizing ({})",
        SERVERS - INACTIVE,
        SERVERS - INACTIVE,
        if modes.contains(&Mode::None) { "the no-resizing run's" } else { "the shortest of the runs'" }
    ));
    let differences = vec![
        "the paper: modified Sheepdog on 10 servers (HDDs, 10 GbE), one KVM guest's 100 GB virtual disk, Filebench; here: Optio volumes over optio nbd, fio, 10 emulated server hosts in 2 racks (links rate-limited by tc tbf, no delay), one client host per rack, every process on this machine's 2 shared cores and memory (/dev/shm)".to_string(),
        format!(
            "data: the paper's 14 GB phase 1, 12.6 GB phase 2 at 20 MB/s and 14 GB phase 3; here {} per volume × {clients} in phase 1, phase 2 {:.0} % of it at {} MB/s in all (two thirds written over the first {} of each volume, a third read at random), phase 3 the volumes once ({:.0} % written, the last objects, the hot sets only read)",
            bytes(sizes.volume_bytes as f64),
            PHASE2_SHARE * 100.0,
            PHASE2_BYTES_PER_SEC / 1_000_000,
            bytes(sizes.hot_bytes as f64),
            PHASE3_WRITE_FRACTION * 100.0
        ),
        format!(
            "one migration budget, {}/s, for every mode (the paper's original CH migrated unthrottled): re-integration in one process at that rate, original CH's rebalancing in each server at a tenth of it",
            bytes(sizes.migration_bytes_per_sec as f64)
        ),
        "original CH here is a ring whose replicas go to distinct hosts (the paper's had no racks); the elastic pool orders ranks by host name, so the 4 servers turned down are rack 2's last 4".into(),
        "the paper's Fig. 7 shows no resizing, original CH and selective; primary+full is added here. Table II comes from days-long traces with many resizes; here machine-hours cover one shrink and one grow, so the phases' lengths set the values".into(),
        "phases start on a new optio nbd once every server holds the resized map (a real client would keep running)".into(),
    ];
    notes.extend(differences.iter().map(|d| format!("differs: {d}")));
    notes.push("CPU busy %: the machine's, over the whole run; per phase in the JSON".into());
    let first = |mode: Mode| of(mode).next();
    let mut series: Vec<Series> = modes
        .iter()
        .filter_map(|&m| {
            first(m).map(|r| Series { name: m.name().into(), points: r.samples.clone() })
        })
        .collect();
    series.retain(|s| !s.points.is_empty());
    let plot = Plot {
        title: "3-phase test on volumes: client throughput over time (seed 004 Fig. 7's shape; first run of each mode)".into(),
        kind: PlotKind::Line,
        x_label: "seconds since phase 1 started".into(),
        y_label: "MB/s (fio, all clients)".into(),
        series,
        log_x: false,
    };
    let bars = Plot {
        title:
            "machine-hours over ideal: Optio (emulated, one resize cycle) and the paper's Table II"
                .into(),
        kind: PlotKind::Bars,
        x_label: "0: original CH   1: primary+full   2: primary+selective".into(),
        y_label: "machine-hours / ideal".into(),
        series: std::iter::once(Series {
            name: "Optio (median of runs)".into(),
            points: [Mode::Original, Mode::Full, Mode::Selective]
                .iter()
                .enumerate()
                .filter(|(_, m)| modes.contains(m))
                .map(|(x, m)| (x as f64, med(*m, &over_ideal)))
                .collect(),
        })
        .chain(TABLE_II.iter().map(|(trace, o, f, s)| Series {
            name: format!("paper, {trace}"),
            points: vec![(0.0, *o), (1.0, *f), (2.0, *s)],
        }))
        .collect(),
        log_x: false,
    };
    let json = json!({
        "experiment": "elastic", "scale": context.scale, "runs": runs,
        "servers": SERVERS, "racks": RACKS, "replicas": REPLICAS, "inactive": INACTIVE,
        "clients": clients, "volume_bytes": sizes.volume_bytes, "hot_bytes": sizes.hot_bytes, "hot_fraction": sizes.hot_bytes as f64 / sizes.volume_bytes as f64,
        "phase2_loops": sizes.phase2_loops, "phase2_read_bytes": sizes.phase2_read_bytes,
        "phase3_write_bytes": sizes.phase3_write_bytes,
        "phase2_bytes_per_sec": PHASE2_BYTES_PER_SEC,
        "migration_rate_bytes_per_sec": sizes.migration_bytes_per_sec,
        "server_migration_rate_bytes_per_sec": sizes.migration_bytes_per_sec / u64::from(SERVERS),
        "dirty_table": "redis",
        "differences": differences, "emulation": spec.to_toml(),
        "ideal_server_seconds": ideal,
        "paper_table_ii": TABLE_II.iter().map(|(t, o, f, s)| json!({"trace": t, "original": o, "full": f, "selective": s})).collect::<Vec<_>>(),
        "audit_exact_runs": audits.iter().filter(|a| a.exact()).count(),
        "audit_runs": audits.len(),
        "rows": modes.iter().map(|&m| json!({
            "mode": m.arg(), "name": m.name(),
            "phase_mb_per_s_median": ([0, 1, 2].map(|p| med(m, &|r: &Run| r.phase_mb_per_s[p]))),
            "phase_seconds_median": phase_seconds.get(&m),
            "machine_hours_over_ideal_median": med(m, &over_ideal),
            "cpu_busy_percent_median": med(m, &|r| r.cpu_percent),
            "runs": of(m).map(|r| run_json(r, over_ideal(r))).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    Report {
        title: "optio bench io elastic".into(),
        tables: vec![table, paper],
        notes,
        json,
        plots: vec![plot, bars],
    }
}

/// One run's JSON.
fn run_json(r: &Run, over_ideal: f64) -> serde_json::Value {
    json!({
                "phase_mb_per_s": r.phase_mb_per_s,
                "phase_seconds": r.phase_seconds,
                "phase_starts_seconds": r.phase_starts,
                "phase_cpu_busy_percent": r.phase_cpu_percent,
                "cpu_busy_percent": r.cpu_percent,
                "bytes_moved_shrinking": r.shrink_bytes,
                "shrinking_seconds": r.shrink_seconds,
                "bytes_moved_growing": r.grow_bytes,
                "growing_seconds": r.grow_seconds,
                "cross_rack_bytes": r.cross_rack_bytes,
                "server_seconds": r.server_seconds,
                "machine_hours_over_ideal": over_ideal,
                "dirty_entries": r.dirty_entries,
                "audit": r.audit.as_ref().map(|a| json!({
                    "replicas_copied": a.replicas_copied,
                    "offloaded_copied": a.offloaded_copied,
                    "offloaded_current": a.offloaded_current,
                    "offloaded": a.offloaded,
                    "exact": a.exact(),
                })),
                "throughput": r.samples.iter().map(|(t, mb)| json!([t, mb])).collect::<Vec<_>>(),
    })
}
