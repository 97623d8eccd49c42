//! `optio bench elastic`: the 3-phase workload of the elastic consistent hashing paper (seed
//! 004, §V-A, after SpringFS) on a local 10-server cluster with 2-way replication, once per
//! way of resizing:
//!
//! * `original`: plain consistent hashing (a `ring` pool): shrinking marks the 4 servers out
//!   and waits while their data moves to the others (clean-up before power-off); growing marks
//!   them in and their share moves back (servers' rebalancing).
//! * `full`: the elastic pool with primary servers and the equal-work layout; shrinking is a new
//!   membership version (nothing moves); at full power re-integration copies to the returning
//!   servers everything the layout puts there, as if they were empty.
//! * `selective`: the same, re-integrating only what the dirty table names (Algorithm 2).
//!
//! Phase 1 writes the data set at full power; phase 2 runs light (rate-limited, writes two
//! thirds of its operations, as the paper's 8.4 GB written and 4.2 GB read) with 4 of the 10
//! servers inactive, its writes falling on a hot tenth of the objects; phase 3 runs at full
//! power with 20 % writes. Reported: throughput over time, each phase's throughput, the bytes
//! migrated by each resize, and for selective re-integration the replicas it copied against
//! the offloaded replicas the dirty table implies.
//!
//! **One migration budget for every mode** (`--migration-rate`, 32 MiB/s by default): data
//! moves at most that fast in the whole cluster, whoever moves it — re-integration runs in one
//! process at the rate, and original consistent hashing's rebalancing runs in each of the 10
//! servers at a tenth of it (a server's only knob is its own rate), so the ten together move
//! at most as much. (Before, original consistent hashing migrated unthrottled, as the paper's
//! Sheepdog did: it was not compared under the same limit.) The report gives the rate each
//! resize achieved.
//!
//! **Each phase starts on its map.** A resize is a map change; the next phase starts once
//! every server and the workload's client hold the new map, so that every write of phase 2
//! goes to the partial membership (and is recorded dirty) and no write of phase 3 does. (Before,
//! the first writes of a phase could still carry the previous map: phase-2 writes at full
//! power offloaded nothing, phase-3 writes in the partial version offloaded more, and the
//! audit of selective re-integration — copied against offloaded — drifted by a few replicas
//! from run to run.)

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use optio_client::{Client, ClientConfig, ReintegrationStatus};
use optio_local::cluster::{LocalCluster, LocalClusterSpec};
use optio_placement::{ClusterMap, MapChange};
use optio_sim::{Plot, PlotKind, Report, Series, Table};
use serde_json::json;

use super::resizing::{self, INACTIVE, Mode, REPLICAS, SERVERS};
use crate::output::{bytes, parse_size};

/// Arguments of `optio bench elastic`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Objects written in phase 1 (the data set).
    #[arg(long, default_value_t = 960)]
    pub objects: usize,
    /// Object size.
    #[arg(long, default_value = "256KiB")]
    pub size: String,
    /// Phase 2's bytes (read and written) as a share of phase 1's (the paper: 12.6 GB after
    /// 14 GB).
    #[arg(long, default_value_t = 0.9)]
    pub phase2_share: f64,
    /// Phase 2's rate limit (the paper's light phase ran at 20 MB/s).
    #[arg(long, default_value = "8MiB")]
    pub phase2_rate: String,
    /// Share of the objects phase 2's writes fall on (its working set).
    #[arg(long, default_value_t = 0.1)]
    pub hot_fraction: f64,
    /// Operations of phase 3 (20 % writes).
    #[arg(long, default_value_t = 2400)]
    pub phase3_ops: usize,
    /// Migration budget, per second, the same for every mode: re-integration (full,
    /// selective) copies at this rate; original consistent hashing's servers rebalance at a
    /// tenth of it each, so that the 10 together move at most this much.
    #[arg(long, default_value = "32MiB", alias = "reintegration-rate")]
    pub migration_rate: String,
    /// Operations in flight.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Which ways of resizing to run (comma-separated).
    #[arg(long, default_value = "original,full,selective", value_delimiter = ',')]
    pub modes: Vec<String>,
    /// Keep the clusters' directories here (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    /// Draw throughput over time to FILE (.png or .svg).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// Throughput is sampled this often.
const SAMPLE: Duration = Duration::from_millis(250);

/// What one run measured.
struct Run {
    mode: Mode,
    samples: Vec<(f64, f64)>,
    phase_mb_per_s: [f64; 3],
    phase_seconds: [f64; 3],
    /// Bytes moved when shrinking (original: the clean-up), and when growing.
    shrink_bytes: u64,
    /// Seconds from shrinking to the end of its data movement (original: the clean-up).
    shrink_seconds: f64,
    grow_bytes: u64,
    /// Seconds from growing to the end of its data movement.
    grow_seconds: f64,
    reintegration: Option<ReintegrationStatus>,
    expected_offloaded: u64,
    /// Of those, the replicas of objects phase 3 rewrote at full power (re-integration finds
    /// them current if the rewrite came first).
    rewritten_offloaded: u64,
    dirty_entries: u64,
    /// When each phase started, seconds.
    phase_starts: [f64; 3],
}

pub fn run(args: Args) -> Result<()> {
    crate::commands::init_logging("error");
    let size = parse_size(&args.size).map_err(anyhow::Error::msg)? as usize;
    let phase2_rate = parse_size(&args.phase2_rate).map_err(anyhow::Error::msg)?;
    let migration_rate = parse_size(&args.migration_rate).map_err(anyhow::Error::msg)?;
    if args.objects < 10 || size == 0 || !(0.0..=1.0).contains(&args.hot_fraction) {
        bail!("use at least 10 objects, a non-zero size and a hot fraction from 0 to 1");
    }
    if migration_rate < u64::from(SERVERS) {
        bail!(
            "--migration-rate {migration_rate}: use at least {SERVERS} bytes per second (each of the {SERVERS} servers gets a tenth)"
        );
    }
    let mut modes = Vec::new();
    for name in &args.modes {
        modes.push(Mode::parse(name, &Mode::ALL[1..])?);
    }
    let temp = tempfile::tempdir().context("cannot make a temporary directory")?;
    let root = args.dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
    let binary = std::env::current_exe().context("cannot find the optio binary")?;
    let runtime = crate::commands::runtime()?;
    let mut runs = Vec::new();
    for mode in modes {
        eprintln!("{}: starting a 10-server cluster…", mode.name());
        let dir = root.join(mode.name().replace(['+', ' '], "-"));
        let _ = std::fs::remove_dir_all(&dir);
        let spec = LocalClusterSpec {
            zones: 2,
            hosts_per_zone: SERVERS / 2,
            replicas: REPLICAS,
            choices: 1,
            capacity_bytes: 64 << 30,
            pg_num: 64,
            reintegration: mode.reintegration(),
            reintegration_rate_bytes_per_sec: Some(migration_rate),
            // The servers' share of the same budget (only original consistent hashing moves
            // data by rebalancing; elastic resizes leave it to re-integration).
            migration_rate_bytes_per_sec: Some(migration_rate / u64::from(SERVERS)),
            ..LocalClusterSpec::default()
        };
        let cluster =
            LocalCluster::start(&binary, &dir, &spec).context("cannot start the cluster")?;
        let run = runtime.block_on(run_mode(&cluster, mode, &args, size, phase2_rate))?;
        drop(cluster);
        runs.push(run);
    }
    let report = report(&runs, &args, size, migration_rate);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json)?);
    } else {
        print!("{}", report.render_text());
    }
    if let Some(path) = &args.plot {
        for file in report.draw(path).context("cannot draw the plot")? {
            eprintln!("wrote {}", file.display());
        }
    }
    Ok(())
}

/// A workload operation.
#[derive(Clone)]
enum Op {
    Write(usize, u64),
    Read(usize),
}

/// Bytes completed by the workload, sampled over time.
struct Meter {
    started: Instant,
    done: AtomicU64,
    stop: std::sync::atomic::AtomicBool,
}

async fn run_ops(
    client: &Client,
    pool: &str,
    ops: Vec<Op>,
    size: usize,
    concurrency: usize,
    rate: Option<u64>,
    meter: &Arc<Meter>,
) -> Result<f64> {
    let started = Instant::now();
    let ops = Arc::new(ops);
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (client, ops, next, meter, pool) =
            (client.clone(), ops.clone(), next.clone(), meter.clone(), pool.to_string());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(op) = ops.get(i) else { return Ok::<(), anyhow::Error>(()) };
                if let Some(rate) = rate {
                    let due = Duration::from_secs_f64((i * size) as f64 / rate as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        tokio::time::sleep(wait).await;
                    }
                }
                match op {
                    Op::Write(object, seed) => {
                        let data = super::payload::payload(size, *seed);
                        client
                            .put(&pool, &key(*object), data)
                            .await
                            .with_context(|| format!("writing {}", key(*object)))?;
                    }
                    Op::Read(object) => {
                        let data = client
                            .get(&pool, &key(*object))
                            .await
                            .with_context(|| format!("reading {}", key(*object)))?;
                        if data.len() != size {
                            bail!("{} read back {} bytes, not {size}", key(*object), data.len());
                        }
                    }
                }
                meter.done.fetch_add(size as u64, Ordering::Relaxed);
            }
        });
    }
    while let Some(result) = workers.join_next().await {
        result.context("a workload worker failed")??;
    }
    Ok(started.elapsed().as_secs_f64())
}

fn key(object: usize) -> String {
    format!("vdisk/{object:06}")
}

/// A deterministic sequence (xorshift) for the workload's choices.
struct Sequence(u64);

impl Sequence {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// Makes the map `changes`, then waits until every server and `client` hold the last of
/// them: the next phase's operations all run under it.
async fn resize(cluster: &LocalCluster, client: &Client, changes: &[MapChange]) -> Result<()> {
    let epoch = resizing::apply(cluster, changes)?;
    client.refresh().await.context("the client cannot load the resized map")?;
    if client.epoch() < epoch {
        bail!("the client holds epoch {} after the resize to epoch {epoch}", client.epoch());
    }
    Ok(())
}

async fn run_mode(
    cluster: &LocalCluster,
    mode: Mode,
    args: &Args,
    size: usize,
    phase2_rate: u64,
) -> Result<Run> {
    let dirty = optio_cluster::dirty::DirtyTable::open(None, cluster.dir()).await?;
    let config = ClientConfig { dirty: Some(Arc::new(dirty)), ..ClientConfig::default() };
    let client = Client::connect_source(cluster.source().clone(), config).await?;
    let pool = mode.pool();
    let meter = Arc::new(Meter {
        started: Instant::now(),
        done: AtomicU64::new(0),
        stop: std::sync::atomic::AtomicBool::new(false),
    });
    let sampler = {
        let meter = meter.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut last = 0u64;
            loop {
                tokio::time::sleep(SAMPLE).await;
                let done = meter.done.load(Ordering::Relaxed);
                samples.push((
                    meter.started.elapsed().as_secs_f64(),
                    (done - last) as f64 / SAMPLE.as_secs_f64() / 1e6,
                ));
                last = done;
                if meter.stop.load(Ordering::Relaxed) || samples.len() > 100_000 {
                    return samples;
                }
            }
        })
    };
    let mut seq = Sequence(0x5eed_0e1a_571c);
    let n = args.objects;
    // Phase 1: write the data set at full power.
    eprintln!("{}: phase 1 (write {n} objects)…", mode.name());
    let ops: Vec<Op> = (0..n).map(|i| Op::Write(i, i as u64)).collect();
    let t1 = run_ops(&client, pool, ops, size, args.concurrency, None, &meter).await?;
    let mut phase_starts = [0.0f64; 3];
    // Shrink.
    let map = cluster.load_map()?;
    let inactive = resizing::inactive_devices(&map);
    let before = resizing::moved_by_servers(cluster).await?;
    let shrunk = Instant::now();
    match mode {
        Mode::Original => {
            resize(cluster, &client, &resizing::shrink_changes(mode, &map)).await?;
            // Clean-up: the servers may be powered off only once their data has moved.
            resizing::wait_moved(cluster, mode, shrunk).await?;
        }
        _ => resize(cluster, &client, &resizing::shrink_changes(mode, &map)).await?,
    }
    let shrink_seconds = shrunk.elapsed().as_secs_f64();
    let shrink_bytes = resizing::moved_by_servers(cluster).await?.saturating_sub(before);
    // Phase 2: light, rate-limited, two thirds writes on the hot set.
    let phase2_ops = ((n as f64 * args.phase2_share) as usize).max(3);
    let hot = ((n as f64 * args.hot_fraction) as usize).max(1);
    eprintln!("{}: phase 2 ({phase2_ops} operations, {INACTIVE} servers inactive)…", mode.name());
    let mut written_in_phase2 = BTreeSet::new();
    let ops: Vec<Op> = (0..phase2_ops)
        .map(|i| {
            if i % 3 == 2 {
                Op::Read(seq.below(n))
            } else {
                let object = seq.below(hot);
                written_in_phase2.insert(object);
                Op::Write(object, 1_000_000 + i as u64)
            }
        })
        .collect();
    phase_starts[1] = meter.started.elapsed().as_secs_f64();
    let t2 = run_ops(&client, pool, ops, size, args.concurrency, Some(phase2_rate), &meter).await?;
    let partial_map = cluster.load_map()?;
    let expected_offloaded = match mode {
        Mode::Original => 0,
        _ => offloaded(&partial_map, pool, &written_in_phase2),
    };
    let dirty_entries = match mode {
        Mode::Original => 0,
        _ => optio_cluster::dirty::DirtyTable::open(None, cluster.dir()).await?.len().await?,
    };
    // Grow back, and phase 3 at once: 20 % writes.
    eprintln!("{}: growing back, phase 3 ({} operations)…", mode.name(), args.phase3_ops);
    let before = resizing::moved_by_servers(cluster).await?;
    let grown = Instant::now();
    phase_starts[2] = meter.started.elapsed().as_secs_f64();
    resize(cluster, &client, &resizing::grow_changes(mode, &inactive)).await?;
    let mover = resizing::wait_moved(cluster, mode, grown);
    let ops: Vec<Op> = (0..args.phase3_ops)
        .map(|i| {
            if i % 5 == 4 {
                Op::Write(seq.below(n), 2_000_000 + i as u64)
            } else {
                Op::Read(seq.below(n))
            }
        })
        .collect();
    let rewritten: BTreeSet<usize> = ops
        .iter()
        .filter_map(|op| match op {
            Op::Write(object, _) if written_in_phase2.contains(object) => Some(*object),
            _ => None,
        })
        .collect();
    let work = run_ops(&client, pool, ops, size, args.concurrency, None, &meter);
    let (t3, grow_seconds) = tokio::join!(work, mover);
    let (t3, grow_seconds) = (t3?, grow_seconds?);
    meter.stop.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap_or_default();
    let rewritten_offloaded = match mode {
        Mode::Original => 0,
        _ => offloaded(&partial_map, pool, &rewritten),
    };
    let reintegration_status = match mode {
        Mode::Original => None,
        _ => Some(resizing::reintegration(cluster).await),
    };
    let grow_bytes = match &reintegration_status {
        Some(status) => status.bytes_copied,
        None => resizing::moved_by_servers(cluster).await?.saturating_sub(before),
    };
    let mb = |ops: usize, seconds: f64| (ops * size) as f64 / seconds.max(1e-9) / 1e6;
    Ok(Run {
        mode,
        samples,
        phase_mb_per_s: [mb(n, t1), mb(phase2_ops, t2), mb(args.phase3_ops, t3)],
        phase_seconds: [t1, t2, t3],
        shrink_bytes,
        shrink_seconds,
        grow_bytes,
        grow_seconds,
        reintegration: reintegration_status,
        expected_offloaded,
        rewritten_offloaded,
        dirty_entries,
        phase_starts,
    })
}

/// The offloaded replicas of writes of `objects` in `map`'s current version.
fn offloaded(map: &ClusterMap, pool: &str, objects: &BTreeSet<usize>) -> u64 {
    let keys: Vec<String> = objects.iter().map(|object| key(*object)).collect();
    resizing::offloaded(map, pool, keys.iter().map(String::as_str))
}

/// Megabytes per second of `bytes` moved in `seconds`.
fn moved_mb_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / seconds.max(1e-9) / 1e6
}

fn report(runs: &[Run], args: &Args, size: usize, migration_rate: u64) -> Report {
    let mut table = Table::new(
        &format!(
            "3-phase workload, {SERVERS} servers, {REPLICAS}-way replication, {} objects of {} ({} in phase 1), {INACTIVE} servers inactive in phase 2, migration at most {}/s in every mode",
            args.objects,
            bytes(size as f64),
            bytes((args.objects * size) as f64),
            bytes(migration_rate as f64)
        ),
        &[
            "resizing",
            "phase 1 MB/s",
            "phase 2 MB/s",
            "phase 3 MB/s",
            "moved shrinking",
            "moved growing",
            "growing took s",
            "growing MB/s",
            "replicas copied",
            "offloaded copied + current",
            "offloaded (dirty)",
        ],
    );
    for run in runs {
        let copied = run.reintegration.as_ref().map(|r| r.replicas_copied);
        table.row(vec![
            run.mode.name().into(),
            format!("{:.1}", run.phase_mb_per_s[0]),
            format!("{:.1}", run.phase_mb_per_s[1]),
            format!("{:.1}", run.phase_mb_per_s[2]),
            bytes(run.shrink_bytes as f64),
            bytes(run.grow_bytes as f64),
            format!("{:.1}", run.grow_seconds),
            format!("{:.1}", moved_mb_per_s(run.grow_bytes, run.grow_seconds)),
            copied.map_or("-".into(), |c| c.to_string()),
            match (run.mode, &run.reintegration) {
                (Mode::Selective, Some(r)) => {
                    format!("{} + {}", r.offloaded_copied, r.offloaded_current)
                }
                _ => "-".into(),
            },
            if run.mode == Mode::Original {
                "-".into()
            } else {
                format!("{} ({} entries)", run.expected_offloaded, run.dirty_entries)
            },
        ]);
    }
    let mut notes = Vec::new();
    let full = runs.iter().find(|r| r.mode == Mode::Full);
    let selective = runs.iter().find(|r| r.mode == Mode::Selective);
    if let (Some(full), Some(selective)) = (full, selective) {
        notes.push(format!(
            "selective re-integration moved {:.1}x less data than full re-integration ({} against {})",
            full.grow_bytes as f64 / selective.grow_bytes.max(1) as f64,
            bytes(selective.grow_bytes as f64),
            bytes(full.grow_bytes as f64)
        ));
    }
    if let Some(selective) = selective {
        let status = selective.reintegration.clone().unwrap_or_default();
        let audit = resizing::Audit::new(
            &status,
            selective.expected_offloaded,
            selective.rewritten_offloaded,
        );
        notes.push(audit.note());
    }
    notes.push("phase 3 runs while data moves; its throughput includes that cost (the paper's Fig. 7: original consistent hashing recovers last)".into());
    notes.push(format!(
        "every mode migrates under one budget of {}/s: re-integration in one process at that rate, original consistent hashing's rebalancing in each of the {SERVERS} servers at a tenth of it (growing MB/s: what each achieved)",
        bytes(migration_rate as f64)
    ));
    let json = json!({
        "servers": SERVERS, "replicas": REPLICAS, "inactive": INACTIVE,
        "objects": args.objects, "object_bytes": size,
        "migration_rate_bytes_per_sec": migration_rate,
        "server_migration_rate_bytes_per_sec": migration_rate / u64::from(SERVERS),
        "runs": runs.iter().map(|r| json!({
            "mode": r.mode.name(),
            "phase_mb_per_s": r.phase_mb_per_s,
            "phase_seconds": r.phase_seconds,
            "bytes_moved_shrinking": r.shrink_bytes,
            "shrinking_seconds": r.shrink_seconds,
            "growing_mb_per_s": moved_mb_per_s(r.grow_bytes, r.grow_seconds),
            "bytes_moved_growing": r.grow_bytes,
            "growing_seconds": r.grow_seconds,
            "replicas_copied": r.reintegration.as_ref().map(|s| s.replicas_copied),
            "offloaded_replicas_copied": r.reintegration.as_ref().map(|s| s.offloaded_copied),
            "offloaded_replicas_found_current": r.reintegration.as_ref().map(|s| s.offloaded_current),
            "offloaded_replicas": r.expected_offloaded,
            "offloaded_replicas_rewritten_in_phase3": r.rewritten_offloaded,
            "phase_starts_seconds": r.phase_starts,
            "dirty_entries": r.dirty_entries,
            "throughput": r.samples.iter().map(|(t, mb)| json!([t, mb])).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    let plot = Plot {
        title: "3-phase workload: throughput over time".into(),
        kind: PlotKind::Line,
        x_label: "seconds".into(),
        y_label: "MB/s".into(),
        series: runs
            .iter()
            .map(|r| Series { name: r.mode.name().into(), points: r.samples.clone() })
            .collect(),
        log_x: false,
    };
    Report {
        title: "optio bench elastic".into(),
        tables: vec![table],
        notes,
        json,
        plots: vec![plot],
    }
}
