//! `optio bench`: write then read N objects; or measure probe round trips; or the cost of
//! probing on a first small write; and experiments on clusters of their own ([`elastic`]).

pub mod elastic;
pub mod io;
pub mod payload;
pub mod resizing;
#[cfg(feature = "s3")]
pub mod s3;
mod workload;

use std::time::Instant;

use anyhow::{Context, Result, bail};
use optio_client::Client;
use serde::Serialize;

pub use self::payload::payload;
use crate::commands::client::ClusterArgs;
use crate::output::{self, parse_size};
use workload::{KeyOp, each_key, percentile, phase, run_id};
pub use workload::{Phase, read_all, write_all};

/// What to measure.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Write N objects, then read them back (cached: no probes).
    ReadWrite,
    /// Round trips of a probe (HEAD of an object's home), one at a time.
    Probe,
    /// First writes of new objects, one at a time, with probing (k candidates) and without
    /// (k = 1), interleaved.
    FirstWrite,
}

/// Experiments `optio bench` runs on clusters of their own.
#[derive(clap::Subcommand, Debug)]
pub enum Experiment {
    /// The elastic-CH paper's 3-phase workload on a local 10-server cluster: original
    /// consistent hashing against full and selective re-integration (table, --json, --plot).
    Elastic(elastic::Args),
    /// The seed papers' I/O experiments on an emulated multi-rack cluster (needs root): fio
    /// on volumes, links rate-limited, host conditions emulated (docs/reproduction.md).
    Io(io::Args),
    /// The S3 gateway against Optio's own client on one cluster: PUT/GET throughput side by
    /// side, or (--list-keys N) listing speed.
    #[cfg(feature = "s3")]
    S3(s3::Args),
}

/// Arguments of `optio bench`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// An experiment on a cluster of its own (otherwise: measure the cluster of --cluster).
    #[command(subcommand)]
    pub experiment: Option<Experiment>,
    /// What to measure.
    #[arg(long, value_enum, default_value = "read-write")]
    pub mode: Mode,
    /// Objects (or probes).
    #[arg(long, default_value_t = 100)]
    pub objects: usize,
    /// Object size.
    #[arg(long, default_value = "1MiB")]
    pub size: String,
    /// Operations in flight.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// After reading (read-write mode): a `stat` of every object (`optio stat`: a HEAD of
    /// one replica), then its removal (`optio rm`: a tombstone on every replica), each a
    /// phase of its own. Without it, the objects are left in the pool.
    #[arg(long)]
    pub metadata: bool,
    /// Read-write mode: read every object this many times (one phase; the objects read in
    /// turn, each pass in the order of the first): a read phase long enough to profile or
    /// to time on a busy machine.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub read_passes: u32,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// A pool's k and the policy in force (the override, else the pool's).
fn pool_choice(client: &Client, pool: &str, policy: Option<String>) -> Result<(u8, String)> {
    let map = client.map();
    let pool = map.pool_by_name(pool).with_context(|| format!("no pool '{pool}' in the map"))?;
    let choices = u8::try_from(pool.choice.choices).unwrap_or(u8::MAX);
    Ok((choices, policy.unwrap_or_else(|| pool.choice.policy.name().to_string())))
}

#[derive(Serialize)]
struct ReadWriteReport {
    pool: String,
    choices: u8,
    policy: String,
    objects: usize,
    size_bytes: usize,
    concurrency: usize,
    write: Phase,
    read: Phase,
    /// With `--metadata`: a stat of every object.
    #[serde(skip_serializing_if = "Option::is_none")]
    stat: Option<Phase>,
    /// With `--metadata`: the removal of every object.
    #[serde(skip_serializing_if = "Option::is_none")]
    delete: Option<Phase>,
    cache_bytes_per_object: f64,
    /// What each phase cost the processes, per operation.
    cost: PhaseCosts,
}

/// What each phase cost, per operation.
#[derive(Serialize)]
struct PhaseCosts {
    write: Cost,
    read: Cost,
    #[serde(skip_serializing_if = "Option::is_none")]
    stat: Option<Cost>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delete: Option<Cost>,
}

/// What a phase cost the cluster's processes, per operation: this client's CPU time, the
/// servers' (every server in the map, from their `/v1/status`) and their syncs. The
/// servers' figures are none when one of them did not say (unreachable, or too old); they
/// include whatever else the servers did meanwhile (another client's requests, rebalancing).
#[derive(Clone, Copy, Debug, Serialize)]
struct Cost {
    client_cpu_us_per_op: f64,
    servers_cpu_us_per_op: Option<f64>,
    syncs_per_op: Option<f64>,
}

/// What the processes had spent when sampled.
#[derive(Clone, Copy, Debug)]
struct Spent {
    client_cpu_seconds: f64,
    servers_cpu_seconds: Option<f64>,
    syncs: Option<u64>,
}

impl Spent {
    /// Samples this process and every server in `client`'s map.
    async fn now(client: &Client, transport: &optio_net::HttpTransport) -> Spent {
        let rows = crate::commands::status::servers(&client.map(), transport).await;
        let mut servers_cpu = Some(0.0);
        let mut syncs = Some(0);
        for row in &rows {
            match &row.status {
                Ok(status) => {
                    servers_cpu = servers_cpu.zip(status.cpu_seconds).map(|(a, b)| a + b);
                    syncs = syncs.map(|n| n + status.syncs);
                }
                Err(_) => (servers_cpu, syncs) = (None, None),
            }
        }
        Spent {
            client_cpu_seconds: optio_server::system::process_cpu_seconds().unwrap_or(0.0),
            servers_cpu_seconds: servers_cpu,
            syncs,
        }
    }

    /// What `operations` cost from `self` to `later`.
    fn cost(self, later: Spent, operations: usize) -> Cost {
        let ops = operations.max(1) as f64;
        let per_op_us = |before: f64, after: f64| (after - before).max(0.0) * 1e6 / ops;
        Cost {
            client_cpu_us_per_op: per_op_us(self.client_cpu_seconds, later.client_cpu_seconds),
            servers_cpu_us_per_op: self
                .servers_cpu_seconds
                .zip(later.servers_cpu_seconds)
                .map(|(a, b)| per_op_us(a, b)),
            syncs_per_op: self
                .syncs
                .zip(later.syncs)
                .map(|(a, b)| b.saturating_sub(a) as f64 / ops),
        }
    }
}

#[derive(Serialize)]
struct ProbeReport {
    probes: usize,
    rtt_us_p50: u64,
    rtt_us_p99: u64,
    rtt_us_mean: u64,
}

#[derive(Serialize)]
struct FirstWriteReport {
    objects: usize,
    size_bytes: usize,
    choices: u8,
    with_probing: Phase,
    without_probing: Phase,
    overhead_mean_percent: f64,
    overhead_p50_percent: f64,
    cached_rewrite_probes: u64,
}

pub fn run(args: Args) -> Result<()> {
    match args.experiment {
        Some(Experiment::Elastic(args)) => return elastic::run(args),
        Some(Experiment::Io(args)) => return io::run(args),
        #[cfg(feature = "s3")]
        Some(Experiment::S3(args)) => return s3::run(args),
        None => {}
    }
    crate::commands::init_logging("warn");
    let size = parse_size(&args.size).map_err(anyhow::Error::msg)? as usize;
    if args.objects == 0 {
        bail!("--objects must be at least 1");
    }
    // One-at-a-time latency runs on one thread: no hand-offs between worker threads.
    let runtime = match args.mode {
        Mode::ReadWrite => crate::commands::runtime()?,
        Mode::Probe | Mode::FirstWrite => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?,
    };
    runtime.block_on(async {
        match args.mode {
            Mode::ReadWrite => read_write(&args, size).await,
            Mode::Probe => probe_rtt(&args).await,
            Mode::FirstWrite => first_write(&args, size).await,
        }
    })
}

async fn read_write(args: &Args, size: usize) -> Result<()> {
    let config = args.cluster.config()?;
    let override_policy = config.policy.clone();
    let client = args.cluster.connect_with(config).await?;
    let pool = &args.cluster.pool;
    let (choices, policy) = pool_choice(&client, pool, override_policy)?;
    let id = run_id();
    let keys: Vec<String> = (0..args.objects).map(|i| format!("bench/{id}/{i}")).collect();
    let data = payload(size, 7);
    let visible = !args.json;
    let transport = args.cluster.conn.identity.transport(Some(&args.cluster.conn.dir()?))?;
    let bar = output::progress(args.objects as u64, "writing", visible);
    let before = Spent::now(&client, &transport).await;
    let (write, _) = write_all(&client, pool, &keys, data, args.concurrency, &bar).await?;
    let written = Spent::now(&client, &transport).await;
    bar.finish_and_clear();
    let reads: Vec<String> = (0..args.read_passes).flat_map(|_| keys.iter().cloned()).collect();
    let bar = output::progress(reads.len() as u64, "reading", visible);
    let read = read_all(&client, pool, &reads, size, args.concurrency, &bar).await?;
    let after = Spent::now(&client, &transport).await;
    bar.finish_and_clear();
    let mut cost = PhaseCosts {
        write: before.cost(written, write.operations),
        read: written.cost(after, read.operations),
        stat: None,
        delete: None,
    };
    let (mut stat, mut delete) = (None, None);
    if args.metadata {
        // Each phase's cost runs from the sample that ended the one before.
        let mut from = after;
        let mut measured = Vec::new();
        for (op, label) in [(KeyOp::Stat, "stat"), (KeyOp::Delete, "removing")] {
            let bar = output::progress(args.objects as u64, label, visible);
            let done = each_key(&client, pool, &keys, op, args.concurrency, &bar).await?;
            let to = Spent::now(&client, &transport).await;
            bar.finish_and_clear();
            measured.push((from.cost(to, done.operations), done));
            from = to;
        }
        let mut measured = measured.into_iter();
        (cost.stat, stat) = measured.next().map(|(c, p)| (Some(c), Some(p))).unwrap_or_default();
        (cost.delete, delete) =
            measured.next().map(|(c, p)| (Some(c), Some(p))).unwrap_or_default();
    }
    let report = ReadWriteReport {
        pool: pool.clone(),
        choices,
        policy,
        objects: args.objects,
        size_bytes: size,
        concurrency: args.concurrency,
        write,
        read,
        stat,
        delete,
        cache_bytes_per_object: client.cache().bytes_per_entry(),
        cost,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{} objects of {} in pool '{}', k = {}, policy '{}', {} in flight\n",
        report.objects,
        output::bytes(size as f64),
        report.pool,
        report.choices,
        report.policy,
        report.concurrency
    );
    let mut table = output::Table::new(&[
        "phase",
        "MB/s",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "probes/op",
        "cache hits",
        "client CPU µs/op",
        "servers CPU µs/op",
        "syncs/op",
    ])
    .left(&[0]);
    let mut phases = vec![("write", &report.write, report.cost.write)];
    phases.push(("read", &report.read, report.cost.read));
    if let (Some(p), Some(cost)) = (&report.stat, report.cost.stat) {
        phases.push(("stat", p, cost));
    }
    if let (Some(p), Some(cost)) = (&report.delete, report.cost.delete) {
        phases.push(("delete", p, cost));
    }
    for (name, p, cost) in phases {
        let unknown = || "?".to_string();
        table.row(vec![
            name.into(),
            if p.bytes == 0 { "-".into() } else { format!("{:.1}", p.mb_per_s) },
            format!("{:.0}", p.operations as f64 / p.seconds.max(1e-9)),
            p.latency_us_p50.to_string(),
            p.latency_us_p99.to_string(),
            format!("{:.2}", p.probes_per_op),
            format!("{:.0}%", p.cache_hit_rate * 100.0),
            format!("{:.0}", cost.client_cpu_us_per_op),
            cost.servers_cpu_us_per_op.map_or_else(unknown, |us| format!("{us:.0}")),
            cost.syncs_per_op.map_or_else(unknown, |n| format!("{n:.2}")),
        ]);
    }
    print!("{}", table.render());
    println!("\nchoice cache: {:.1} bytes per cached object", report.cache_bytes_per_object);
    Ok(())
}

async fn probe_rtt(args: &Args) -> Result<()> {
    let client = args.cluster.connect().await?;
    let pool = &args.cluster.pool;
    let id = run_id();
    // Warm the connection pool.
    for i in 0..20 {
        client.probe_once(pool, &format!("probe/{id}/warm{i}")).await?;
    }
    let mut latencies = Vec::with_capacity(args.objects);
    for i in 0..args.objects {
        let key = format!("probe/{id}/{i}");
        let t = Instant::now();
        client.probe_once(pool, &key).await?;
        latencies.push(t.elapsed().as_micros() as u64);
    }
    latencies.sort_unstable();
    let report = ProbeReport {
        probes: latencies.len(),
        rtt_us_p50: percentile(&latencies, 50.0),
        rtt_us_p99: percentile(&latencies, 99.0),
        rtt_us_mean: latencies.iter().sum::<u64>() / latencies.len() as u64,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} probes: round trip p50 {} µs, p99 {} µs, mean {} µs",
            report.probes, report.rtt_us_p50, report.rtt_us_p99, report.rtt_us_mean
        );
    }
    Ok(())
}

async fn first_write(args: &Args, size: usize) -> Result<()> {
    let config = args.cluster.config()?;
    let probing = args.cluster.connect_with(config.clone()).await?;
    let plain = args.cluster.connect_with(config).await?;
    let pool = &args.cluster.pool;
    let (choices, _) = pool_choice(&probing, pool, None)?;
    if choices < 2 {
        bail!("pool '{pool}' has k = {choices}: first writes probe only in a pool with choices");
    }
    let plain_pool = optio_local::cluster::PLAIN_POOL;
    let id = run_id();
    let data = payload(size, 11);
    for i in 0..10 {
        probing.put(pool, &format!("first/{id}/warm-p{i}"), data.clone()).await?;
        plain.put(plain_pool, &format!("first/{id}/warm-n{i}"), data.clone()).await?;
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let (p0, n0) = (probing.stats(), plain.stats());
    let bar = output::progress(args.objects as u64, "first writes", !args.json);
    for i in 0..args.objects {
        let t = Instant::now();
        probing.put(pool, &format!("first/{id}/p{i}"), data.clone()).await?;
        with.push(t.elapsed().as_micros() as u64);
        let t = Instant::now();
        plain.put(plain_pool, &format!("first/{id}/n{i}"), data.clone()).await?;
        without.push(t.elapsed().as_micros() as u64);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let total = (size * args.objects) as u64;
    let with_seconds = with.iter().sum::<u64>() as f64 / 1e6;
    let without_seconds = without.iter().sum::<u64>() as f64 / 1e6;
    let with_phase = phase(&mut with, total, with_seconds, p0, probing.stats());
    let without_phase = phase(&mut without, total, without_seconds, n0, plain.stats());
    // Cached rewrites: no probe.
    let before = probing.stats().probes;
    for i in 0..args.objects.min(50) {
        probing.put(pool, &format!("first/{id}/p{i}"), data.clone()).await?;
    }
    let cached_rewrite_probes = probing.stats().probes - before;
    let overhead = |a: u64, b: u64| (a as f64 / b.max(1) as f64 - 1.0) * 100.0;
    let report = FirstWriteReport {
        objects: args.objects,
        size_bytes: size,
        choices,
        overhead_mean_percent: overhead(with_phase.latency_us_mean, without_phase.latency_us_mean),
        overhead_p50_percent: overhead(with_phase.latency_us_p50, without_phase.latency_us_p50),
        with_probing: with_phase,
        without_probing: without_phase,
        cached_rewrite_probes,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "first {} writes, {} objects: with probing (k = {}) mean {} µs p50 {} µs ({:.2} probes/op); without (k = 1) mean {} µs p50 {} µs; overhead {:+.1}% mean, {:+.1}% p50; cached rewrites sent {} probes",
        output::bytes(size as f64),
        report.objects,
        choices,
        report.with_probing.latency_us_mean,
        report.with_probing.latency_us_p50,
        report.with_probing.probes_per_op,
        report.without_probing.latency_us_mean,
        report.without_probing.latency_us_p50,
        report.overhead_mean_percent,
        report.overhead_p50_percent,
        report.cached_rewrite_probes
    );
    Ok(())
}
