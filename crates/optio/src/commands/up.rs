//! `optio up`: a whole local cluster in one command.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use optio_local::cluster::{
    ATTRIBUTED_POOL, BALANCED_POOL, CRUSH_POOL, ELASTIC_POOL, ERASURE_POOL, LocalCluster,
    LocalClusterSpec, PLAIN_POOL, RING_POOL, Supervision,
};

use crate::output::{self, parse_size};

/// How often the supervisor looks at its servers.
const SUPERVISION_INTERVAL: Duration = Duration::from_millis(250);

/// Arguments of `optio up`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Cluster directory: the map (`map.toml`), device data (`devN/`), server logs.
    #[arg(long, default_value = "optio-cluster")]
    pub dir: PathBuf,
    /// Zones.
    #[arg(long, default_value_t = 3)]
    pub zones: u32,
    /// Hosts per zone (one server process each).
    #[arg(long, default_value_t = 3)]
    pub hosts: u32,
    /// Devices per host.
    #[arg(long, default_value_t = 1)]
    pub devices_per_host: u32,
    /// Capacity of each device.
    #[arg(long, default_value = "16GiB")]
    pub capacity: String,
    /// Largest object a server takes.
    #[arg(long, default_value = "64MiB")]
    pub max_object_size: String,
    /// Candidates per object (CHOICE's k) of the pools `data` and `blobs` (`plain` has 1).
    #[arg(long, default_value_t = 2)]
    pub choices: u8,
    /// Their policy for new objects.
    #[arg(long, default_value = "space")]
    pub policy: String,
    /// Replicas of every pool.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Also an erasure-coded pool `ec` with this profile, K data + M parity chunks (e.g.
    /// `4+2`: needs K+M devices; one chunk per zone, else per host, else per device).
    #[arg(long, value_name = "K+M", value_parser = parse_erasure)]
    pub erasure: Option<String>,
    /// Keep the map in an etcd started for the cluster (Debian's etcd-server; its data in
    /// DIR/etcd/) instead of DIR/map.toml: client commands still find it with --cluster DIR.
    #[arg(long)]
    pub etcd: bool,
    /// Most bytes per second each server sends when moving data after a map change (0: no
    /// limit).
    #[arg(long, default_value = "0")]
    pub migration_rate: String,
    /// The dirty table of elastic pools: `local` (a log under DIR) or redis://[USER@]HOST:PORT
    /// (a Redis list, as in the elastic-CH paper). No password in the URL (refused: it would be
    /// on this command line and in DIR/dirty-source): give it in OPTIO_REDIS_PASSWORD or a file
    /// named by OPTIO_REDIS_PASSWORD_FILE, which the cluster's processes inherit.
    #[arg(long, default_value = "local", value_name = "SPEC")]
    pub dirty: String,
    /// Re-integration of elastic pools: selective (only what the dirty table names), full
    /// (the baseline) or none.
    #[arg(long, default_value = "selective", value_parser = ["selective", "full", "none"])]
    pub reintegration: String,
    /// Leave a server that dies dead (tests that want the corpse); by default it is restarted,
    /// with a backoff from 0.5 s doubling to 30 s.
    #[arg(long)]
    pub no_restart: bool,
    #[command(flatten)]
    pub trim: super::trim_worker::TrimRate,
    /// Run the servers without authentication (anyone who reaches their ports may read and
    /// write everything). By default `optio up` makes a keyring in the cluster directory
    /// (`DIR/keyring`: client.admin and one server.HOST per server) and every request is
    /// signed; `optio` commands find it there.
    #[arg(long)]
    pub no_auth: bool,
    /// Encrypt the traffic: a throwaway certificate authority and a server certificate are
    /// made in DIR/tls/, servers take TLS (plain HTTP serves /health only) and `optio`
    /// commands trust DIR/tls/ca.pem.
    #[arg(long)]
    pub tls: bool,
    /// Serve /metrics without a signature (for Prometheus: point its file_sd_configs at
    /// DIR/prometheus-targets.json).
    #[arg(long)]
    pub metrics_public: bool,
    /// How the servers keep what a volume snapshot sees when a write changes it: `objects`
    /// (copy the whole object at its first write after the snapshot), `blocks` (copy only
    /// the blocks each write changes) or `redirect` (copy nothing: the object's file becomes
    /// the snapshot's, a new sparse file takes the writes); see `optio server --help`.
    #[arg(
        long,
        value_enum,
        env = "OPTIO_SNAPSHOT_COPY",
        default_value = "objects",
        value_name = "HOW"
    )]
    pub snapshot_copy: super::server::SnapshotCopyArg,
    /// Fixed ports: servers listen on 127.0.0.1:PORT, PORT+1, … in host order (z1-h1, z1-h2,
    /// …), for a Prometheus configuration or a firewall written in advance; by default each
    /// takes a free port (DIR/prometheus-targets.json lists them either way).
    #[arg(long, value_name = "PORT")]
    pub base_port: Option<u16>,
    /// Worker threads of each server (1 to 1024; default: each server's share of the
    /// machine's cores, at least one: a server woken with more workers than it has cores
    /// wakes a second worker for nothing).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=super::server::WORKERS_MAX as i64))]
    pub server_workers: Option<u16>,
    /// Mark a server's devices down in the map once it has not answered for this long (writes
    /// then go around them; Ceph's osd_heartbeat_grace).
    #[arg(long, default_value = "20s", value_parser = crate::output::parse_duration)]
    pub down_grace: std::time::Duration,
    /// Mark them out after this long (their data is re-replicated on other devices; Ceph's
    /// mon_osd_down_out_interval).
    #[arg(long, default_value = "10m", value_parser = crate::output::parse_duration)]
    pub out_grace: std::time::Duration,
    /// An emulated multi-rack cluster (needs root): the racks, hosts, devices, link rates and
    /// host conditions of FILE (docs/emulation.md), each host's server in a network namespace
    /// of its own behind rate-limited links. Replaces --zones, --hosts, --devices-per-host,
    /// --capacity.
    #[arg(long, value_name = "FILE")]
    pub emulate: Option<PathBuf>,
}

/// `K+M`, checked as a profile (the same limits as the map's).
fn parse_erasure(text: &str) -> Result<String, String> {
    optio_erasure::Profile::parse(text).map(|p| p.to_string()).map_err(|e| e.to_string())
}

pub fn run(args: Args) -> Result<()> {
    crate::commands::init_logging("warn");
    // An emulation first: the supervisor then watches its servers from the router's namespace.
    let emulation = match &args.emulate {
        Some(file) => Some(super::emulate::start(file, &args.dir)?),
        None => None,
    };
    let mut spec = LocalClusterSpec {
        zones: args.zones,
        hosts_per_zone: args.hosts,
        devices_per_host: args.devices_per_host,
        capacity_bytes: parse_size(&args.capacity).map_err(anyhow::Error::msg)?,
        max_object_bytes: Some(parse_size(&args.max_object_size).map_err(anyhow::Error::msg)?),
        choices: u32::from(args.choices),
        policy: args.policy.clone(),
        replicas: args.replicas,
        erasure: args.erasure.clone(),
        etcd: args.etcd,
        migration_rate_bytes_per_sec: Some(
            parse_size(&args.migration_rate).map_err(anyhow::Error::msg)?,
        )
        .filter(|r| *r > 0),
        dirty: (args.dirty != "local").then(|| args.dirty.clone()),
        reintegration: (args.reintegration != "none").then(|| args.reintegration.clone()),
        auth: !args.no_auth,
        metrics_public: args.metrics_public,
        snapshot_copy: (args.snapshot_copy != super::server::SnapshotCopyArg::Objects)
            .then(|| clap::ValueEnum::to_possible_value(&args.snapshot_copy))
            .flatten()
            .map(|value| value.get_name().to_string()),
        base_port: args.base_port,
        server_workers: args.server_workers.map(usize::from),
        tls: args.tls,
        ..LocalClusterSpec::default()
    };
    if let Some(emulation) = &emulation {
        super::emulate::place(emulation, &mut spec);
    }
    let binary = std::env::current_exe().context("cannot find the optio binary")?;
    if args.out_grace < args.down_grace {
        anyhow::bail!(
            "--out-grace ({:?}) is shorter than --down-grace ({:?}): a device is marked down before it is marked out",
            args.out_grace,
            args.down_grace
        );
    }
    let mut cluster =
        LocalCluster::start(&binary, &args.dir, &spec).context("cannot start the local cluster")?;
    let dir = cluster.dir().display().to_string();
    let mut table = output::Table::new(&["server", "address", "devices", "pid"]).left(&[0, 1, 2]);
    for server in cluster.servers() {
        let devices: Vec<String> =
            server.devices.iter().map(|(id, _)| format!("osd.{id}")).collect();
        table.row(vec![
            server.host.clone(),
            server.addr.clone(),
            devices.join(","),
            server.pid().map(|p| p.to_string()).unwrap_or_default(),
        ]);
    }
    println!(
        "Optio local cluster: {} zones × {} hosts × {} device(s), {} each, epoch {}\n",
        spec.zones,
        spec.hosts_per_zone,
        spec.devices_per_host,
        output::bytes(spec.capacity_bytes as f64),
        cluster.load_map()?.epoch()
    );
    print!("{}", table.render());
    if let Some(emulation) = &emulation {
        super::emulate::print_usage(emulation, cluster.dir());
    }
    optio_local::cluster::write_prometheus_targets(cluster.dir(), cluster.servers())?;
    let last_device = cluster.load_map()?.devices().iter().map(|d| d.id.0).max().unwrap_or(0);
    println!(
        "\nmap: {}\n{}\npools: {CRUSH_POOL} (crush), {RING_POOL} (ring), {ATTRIBUTED_POOL} (attributed) with k = {} candidates, policy '{}'; {PLAIN_POOL} (crush), {ELASTIC_POOL} (elastic) and {BALANCED_POOL} (crush, incremental balanced placement) with k = 1{}\n\nUse it from another terminal:\n  export OPTIO_CLUSTER={dir}\n  echo hello | optio put greeting -\n  optio get greeting\n  optio probe greeting\n  optio ls\n  optio bench --objects 200 --size 1MiB\n  optio map set-state {last_device} --out   # data moves off device {last_device}\n  optio status --watch\n\nCtrl-C stops the cluster.",
        cluster.source().describe(),
        if spec.auth {
            format!(
                "keyring: {dir}/keyring (client.admin signs every optio command; `optio auth add client.NAME --caps read` makes more)"
            )
        } else {
            "authentication: off (--no-auth)".to_string()
        } + &if spec.tls {
            format!(
                "\nTLS: servers take https; clients trust {dir}/tls/ca.pem \
                 (client.admin's certificate for mutual TLS: {dir}/tls/client.admin.pem)"
            )
        } else {
            String::new()
        },
        args.choices,
        args.policy,
        spec.erasure
            .as_ref()
            .map(|p| format!("; {ERASURE_POOL} (crush, erasure-coded {p}: optio put --pool {ERASURE_POOL} KEY FILE)"))
            .unwrap_or_default(),
    );
    let policy = Supervision {
        restart: !args.no_restart,
        down_grace: args.down_grace,
        out_grace: args.out_grace,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = crate::commands::runtime()?;
    let transport =
        crate::commands::identity::Identity::default().transport(Some(cluster.dir()))?;
    runtime.spawn(super::trim_worker::run(
        cluster.source().clone(),
        transport,
        args.trim.trim_rate,
        "optio up",
    ));
    let signalled = stop.clone();
    runtime.spawn(async move {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("SIGTERM can be handled");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        signalled.store(true, Ordering::Release);
    });
    while !stop.load(Ordering::Acquire) {
        match cluster.supervise(&policy) {
            Ok(events) => {
                for event in events {
                    eprintln!("optio up: {event}");
                }
            }
            Err(error) => eprintln!("optio up: supervision: {:#}", anyhow::Error::from(error)),
        }
        std::thread::sleep(SUPERVISION_INTERVAL);
    }
    eprintln!("stopping the servers…");
    drop(cluster);
    if let Some(mut emulation) = emulation {
        emulation.cleanup().context("cannot remove the emulation")?;
        eprintln!("emulation removed.");
    }
    eprintln!("stopped.");
    Ok(())
}
