//! A whole cluster on one machine: one `optio server` process per host, each on a free
//! loopback port, and the map (with the servers' addresses) in `DIR/map.toml` — or, with
//! `etcd`, in an etcd started for the cluster (its data in `DIR/etcd/`; `DIR/map-source`
//! names it, so that `--cluster DIR` finds the map wherever it lives).
//!
//! Servers are started with `--exit-with-stdin`: each keeps a pipe from this process as its
//! standard input and exits when it closes, so no server outlives the cluster, even when the
//! process holding it is killed with SIGKILL.

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use optio_cluster::dir::{DIRTY_SOURCE_FILE, MAP_SOURCE_FILE};
use optio_cluster::lockfile::{self, LockError};
use optio_cluster::{ClusterError, MapSource, mapstore};

use crate::LocalError;
use crate::etcd::EtcdServer;
use optio_proto::ServerHealth;
use optio_proto::auth::Cap;
use optio_proto::own::{OwnAnswer, OwnRequest};

pub use crate::host::{DeviceDef, HostPlacement};

mod supervise;

pub use supervise::{
    DOWN_GRACE_DEFAULT, Event, OUT_GRACE_DEFAULT, RESTART_BACKOFF_MAX, RESTART_BACKOFF_MIN,
    Supervision, lease_ttl,
};

/// Runs `future` to completion on a runtime of its own, on a thread of its own (so it works
/// from synchronous code and from inside another runtime alike).
fn block_on<F>(future: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime can be built")
                    .block_on(future)
            })
            .join()
            .expect("the map store's calls do not panic")
    })
}

/// How long a server may take to start (print its address) or to answer `/health`.
pub const SERVER_START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a stopping server may take before it is killed.
pub const SERVER_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two polls of a condition (a bounded wait, never a synchronisation).
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// The line a server prints on standard output once it listens: `optio-server listening on
/// ADDR`.
pub const LISTENING_PREFIX: &str = "optio-server listening on ";

/// The shape of a local cluster.
#[derive(Clone, Debug)]
pub struct LocalClusterSpec {
    /// Zones.
    pub zones: u32,
    /// Hosts per zone (one server process each).
    pub hosts_per_zone: u32,
    /// Devices per host.
    pub devices_per_host: u32,
    /// Capacity of each device.
    pub capacity_bytes: u64,
    /// Largest object a server takes (`None`: the server's default).
    pub max_object_bytes: Option<u64>,
    /// PGs of the `crush` pool.
    pub pg_num: u32,
    /// Replicas.
    pub replicas: u32,
    /// Candidates per object (CHOICE's k) of the `data` and `blobs` pools.
    pub choices: u32,
    /// Their policy.
    pub policy: String,
    /// Keep the map in an etcd started for the cluster (data in `DIR/etcd/`) rather than in
    /// `DIR/map.toml`.
    pub etcd: bool,
    /// Migration rate limit of each server, bytes per second (`None`: unlimited).
    pub migration_rate_bytes_per_sec: Option<u64>,
    /// Transfers in flight per server while migrating (`None`: the server's default).
    pub migration_concurrency: Option<usize>,
    /// The dirty table of elastic pools (`None`: the local log under the cluster directory;
    /// `redis://HOST:PORT`: a Redis list), recorded in `DIR/dirty-source`.
    pub dirty: Option<String>,
    /// Run a re-integration process (`optio reintegrate --mode MODE`: `selective` or `full`);
    /// `None`: none.
    pub reintegration: Option<String>,
    /// Its rate limit, bytes per second.
    pub reintegration_rate_bytes_per_sec: Option<u64>,
    /// The address servers listen on (each on a free port), `127.0.0.1` by default; tests of
    /// partitions use an address other network namespaces can reach.
    pub bind: String,
    /// How old a tombstone must be before scrubbing may remove it (`None`: the server's
    /// default, 24 h).
    pub tombstone_grace: Option<Duration>,
    /// How servers keep what a snapshot sees (`optio server --snapshot-copy HOW`: `blocks`,
    /// `redirect`); `None`: the server's default (`objects`).
    pub snapshot_copy: Option<String>,
    /// With the map in etcd: the life of each server's fencing lease (`None`: the server's
    /// default, 10 s).
    pub fence_ttl: Option<Duration>,
    /// Authentication: a keyring in the cluster directory (`keyring`, made if absent, with
    /// `client.admin` and one `server.HOST` per server) that every server verifies requests
    /// against; `false`: servers run with `--no-auth`.
    pub auth: bool,
    /// TLS: a throwaway certificate authority and a server certificate for the bind address,
    /// made in `DIR/tls/` (`ca.pem`, `server.pem`, `server-key.pem`); servers take TLS.
    pub tls: bool,
    /// Servers serve `/metrics` without a signature (`--metrics-public`), for Prometheus.
    pub metrics_public: bool,
    /// Fixed ports: the servers listen on this port and the next ones, in host order (z1-h1,
    /// z1-h2, …); `None`: each on a free port.
    pub base_port: Option<u16>,
    /// Worker threads of each server (`None`: its share of the machine's cores, at least one;
    /// [`workers_per_server`]).
    pub server_workers: Option<usize>,
    /// The hosts, placed by an emulation ([`crate::emulate`]): each server in its network
    /// namespace, on its address, in its cgroups, with its devices' attributes. `None`: the
    /// zones × hosts × devices above, every server on this machine's `bind` address.
    pub placements: Option<Vec<HostPlacement>>,
    /// The map's rules, buckets and pools as Optio TOML, in place of the six pools of a local
    /// cluster (the devices are written before it).
    pub pools_toml: Option<String>,
    /// An erasure-coded pool [`ERASURE_POOL`] with this profile (`K+M`) besides the six
    /// replicated ones (`optio up --erasure`).
    pub erasure: Option<String>,
}

/// The least CRUSH weight of a placed device (one of 16 MiB or less).
const PLACED_WEIGHT_MIN: f64 = 1.0 / 65536.0;

impl Default for LocalClusterSpec {
    fn default() -> LocalClusterSpec {
        LocalClusterSpec {
            zones: 3,
            hosts_per_zone: 3,
            devices_per_host: 1,
            capacity_bytes: 16 << 30,
            max_object_bytes: None,
            pg_num: 128,
            replicas: 3,
            choices: 2,
            policy: "space".into(),
            etcd: false,
            migration_rate_bytes_per_sec: None,
            migration_concurrency: None,
            dirty: None,
            reintegration: Some("selective".into()),
            reintegration_rate_bytes_per_sec: None,
            bind: "127.0.0.1".into(),
            snapshot_copy: None,
            tombstone_grace: None,
            fence_ttl: None,
            auth: false,
            tls: false,
            metrics_public: false,
            base_port: None,
            server_workers: None,
            placements: None,
            pools_toml: None,
            erasure: None,
        }
    }
}

/// The Prometheus file-based service discovery file `optio up` writes in its directory.
pub const PROMETHEUS_TARGETS_FILE: &str = "prometheus-targets.json";

/// Writes `DIR/prometheus-targets.json` for `servers` (Prometheus' `file_sd_configs`): one
/// target per server, labelled with its host; rewritten in place (a rename) when it changes.
pub fn write_prometheus_targets(dir: &Path, servers: &[ServerProcess]) -> Result<(), LocalError> {
    let targets: Vec<serde_json::Value> = servers
        .iter()
        .map(|s| serde_json::json!({"targets": [s.addr], "labels": {"job": "optio", "host": s.host}}))
        .collect();
    let path = dir.join(PROMETHEUS_TARGETS_FILE);
    let text =
        serde_json::to_string_pretty(&targets).map_err(|e| LocalError::Spec(e.to_string()))?;
    optio_cluster::durable::replace_private(&path, text.as_bytes())
        .map_err(LocalError::io(format!("cannot write {}", path.display())))
}

/// The `crush` pool of a local cluster.
pub const CRUSH_POOL: &str = "data";
/// The `ring` pool of a local cluster.
pub const RING_POOL: &str = "blobs";
/// A `crush` pool without choices (k = 1), for comparisons.
pub const PLAIN_POOL: &str = "plain";
/// The `attributed` pool of a local cluster (with the same choices as `data`).
pub const ATTRIBUTED_POOL: &str = "hetero";
/// The `elastic` pool of a local cluster (k = 1: its primaries are what matters).
pub const ELASTIC_POOL: &str = "elastic";
/// A `crush` pool with Optio's incremental balanced placement (`balanced = "incremental"`,
/// k = 1): every device within one PG of its share, and map edits carry its state forward.
pub const BALANCED_POOL: &str = "balanced";

/// The erasure-coded `crush` pool of a local cluster started with an erasure profile
/// (`optio up --erasure K+M`).
pub const ERASURE_POOL: &str = "ec";

/// One host of a generated map: its name (`zZONE-hHOST`: the zone is the part before `-`),
/// the address of its server, if known, and its devices.
#[derive(Clone, Debug)]
pub struct MapHost {
    /// `z1-h1`.
    pub name: String,
    /// `IP:PORT` of its server.
    pub addr: Option<String>,
    /// Its devices' ids.
    pub devices: Vec<u32>,
}

/// The hosts of `spec`'s layout (zones × hosts × devices, devices numbered from 0 host by
/// host), without addresses.
pub fn layout(spec: &LocalClusterSpec) -> Vec<MapHost> {
    if let Some(placements) = &spec.placements {
        return placements
            .iter()
            .map(|p| MapHost {
                name: p.name.clone(),
                addr: None,
                devices: p.devices.iter().map(|d| d.id).collect(),
            })
            .collect();
    }
    let mut id = 0u32;
    let mut hosts = Vec::new();
    for zone in 1..=spec.zones {
        for host in 1..=spec.hosts_per_zone {
            let devices = (id..id + spec.devices_per_host).collect();
            id += spec.devices_per_host;
            hosts.push(MapHost { name: format!("z{zone}-h{host}"), addr: None, devices });
        }
    }
    hosts
}

/// The map `optio up` writes (and `optio map init`): `hosts`' devices with `spec`'s capacity,
/// a rule by zone (by host with fewer zones than replicas) and the six pools of a local
/// cluster, at `epoch`.
pub fn map_text(spec: &LocalClusterSpec, hosts: &[MapHost], epoch: u64) -> String {
    let replicas = spec.replicas.min(spec.zones * spec.hosts_per_zone).max(1);
    let domain = if spec.zones >= replicas { "zone" } else { "host" };
    let mut out = String::new();
    let _ =
        writeln!(out, "# Optio local cluster, written by `optio up` (format: docs/map-format.md)");
    let _ = writeln!(out, "format_version = 1\nepoch = {epoch}\n");
    for host in hosts {
        let zone = host.name.split('-').next().unwrap_or("z1");
        let addr = host.addr.as_ref().map(|a| format!("addr = \"{a}\"\n")).unwrap_or_default();
        for id in &host.devices {
            let placed = spec
                .placements
                .iter()
                .flatten()
                .flat_map(|p| p.devices.iter())
                .find(|d| d.id == *id);
            let capacity = placed.map_or(spec.capacity_bytes, |d| d.capacity_bytes);
            // Placed devices weigh their capacity in TiB, as Ceph's do (devices of different
            // sizes); the others 1.0 each.
            let weight = placed.map_or(1.0, |d| {
                (d.capacity_bytes as f64 / (1u64 << 40) as f64).max(PLACED_WEIGHT_MIN)
            });
            let mut attributes = String::new();
            if let Some(class) = placed.and_then(|d| d.class.as_ref()) {
                let _ = writeln!(attributes, "class = \"{class}\"");
            }
            if let Some(bandwidth) = placed.and_then(|d| d.bandwidth_mb_per_sec) {
                let _ = writeln!(attributes, "bandwidth = {bandwidth}");
            }
            let _ = writeln!(
                out,
                "[[devices]]\nid = {id}\ncapacity = {capacity}\nweight = {weight:?}\n{attributes}{addr}location = {{ zone = \"{zone}\", host = \"{}\" }}\n",
                host.name
            );
        }
    }
    if let Some(pools) = &spec.pools_toml {
        out.push_str(pools);
        return out;
    }
    let _ = writeln!(
        out,
        "[[rules]]\nid = 0\nname = \"by_{domain}\"\nsteps = [\"take default\", \"chooseleaf firstn 0 type {domain}\", \"emit\"]\n"
    );
    let choice = format!("choices = {}\npolicy = \"{}\"\n", spec.choices, spec.policy);
    let _ = writeln!(
        out,
        "[[pools]]\nid = 1\nname = \"{CRUSH_POOL}\"\nengine = \"crush\"\nrule = \"by_{domain}\"\npg_num = {}\nsize = {replicas}\n{choice}",
        spec.pg_num
    );
    let vnode = (spec.capacity_bytes / 64).max(1 << 20);
    let _ = writeln!(
        out,
        "[[pools]]\nid = 2\nname = \"{RING_POOL}\"\nengine = \"ring\"\nsize = {replicas}\nvnode_bytes = {vnode}\nfailure_domain = \"{domain}\"\n{choice}"
    );
    let _ = writeln!(
        out,
        "[[pools]]\nid = 3\nname = \"{PLAIN_POOL}\"\nengine = \"crush\"\nrule = \"by_{domain}\"\npg_num = {}\nsize = {replicas}\n",
        spec.pg_num
    );
    let distinct_zones = domain == "zone";
    let _ = writeln!(
        out,
        "[[pools]]\nid = 4\nname = \"{ATTRIBUTED_POOL}\"\nengine = \"attributed\"\nsize = {replicas}\nthrottle = {vnode}\ndistinct_zones = {distinct_zones}\n{choice}"
    );
    let _ = writeln!(
        out,
        "[[pools]]\nid = 5\nname = \"{ELASTIC_POOL}\"\nengine = \"elastic\"\nsize = {replicas}"
    );
    let _ = writeln!(
        out,
        "[[pools]]\nid = 6\nname = \"{BALANCED_POOL}\"\nengine = \"crush\"\nrule = \"by_{domain}\"\npg_num = {}\nsize = {replicas}\nbalanced = \"incremental\"",
        spec.pg_num
    );
    if let Some(profile) = &spec.erasure {
        // One chunk per zone when there are zones enough, else per host, else per device
        // (the map refuses a profile wider than the devices, naming the pool).
        let width: u32 = profile
            .split('+')
            .map(|n| n.trim().parse::<u32>().unwrap_or(0))
            .fold(0, u32::saturating_add);
        let hosts = spec.zones * spec.hosts_per_zone;
        let ec_domain = if spec.zones >= width {
            "zone"
        } else if hosts >= width {
            "host"
        } else {
            "osd"
        };
        let choose = if ec_domain == "osd" { "choose" } else { "chooseleaf" };
        let _ = writeln!(
            out,
            "\n[[rules]]\nid = 1\nname = \"ec_by_{ec_domain}\"\ntype = \"erasure\"\nsteps = [\"set_chooseleaf_tries 5\", \"set_choose_tries 100\", \"take default\", \"{choose} indep 0 type {ec_domain}\", \"emit\"]\n"
        );
        let _ = writeln!(
            out,
            "[[pools]]\nid = 7\nname = \"{ERASURE_POOL}\"\nengine = \"crush\"\nrule = \"ec_by_{ec_domain}\"\npg_num = {}\nerasure = \"{profile}\"",
            spec.pg_num
        );
    }
    out
}

/// One server process.
#[derive(Debug)]
pub struct ServerProcess {
    /// The host it stands for.
    pub host: String,
    /// `host:port`.
    pub addr: String,
    /// Its devices: (id, data directory).
    pub devices: Vec<(u32, PathBuf)>,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    _stdout: Option<BufReader<ChildStdout>>,
}

impl ServerProcess {
    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// A running local cluster. Dropping it stops the servers.
#[derive(Debug)]
pub struct LocalCluster {
    dir: PathBuf,
    binary: PathBuf,
    spec: LocalClusterSpec,
    servers: Vec<ServerProcess>,
    source: MapSource,
    etcd: Option<EtcdServer>,
    reintegrator: Option<(Child, ChildStdin)>,
    /// What supervision knows of each server (same order as `servers`).
    watches: Vec<supervise::Watch>,
    /// The acting monitor (marking devices down, out, up, in), once supervision started.
    monitor: supervise::Acting,
    /// The cluster directory's lock ([`LOCK_FILE`]), held while the cluster lives; the kernel
    /// releases it when this process ends, however it ends.
    _lock: fs::File,
}

/// The lock file in a cluster directory: one supervisor per directory.
pub const LOCK_FILE: &str = "optio-up.lock";

/// Takes the cluster directory's lock, or says who holds it.
fn lock_dir(dir: &Path) -> Result<fs::File, LocalError> {
    let path = dir.join(LOCK_FILE);
    lockfile::hold(&path, Duration::ZERO).map_err(|error| match error {
        LockError::Held { holder } => LocalError::InUse { dir: dir.to_path_buf(), holder },
        LockError::Io(e) => LocalError::io(format!("cannot lock {}", path.display()))(e),
    })
}

/// Makes the cluster directory `dir` (mode 0700, and its missing parents) or takes group and
/// others' permissions away from the one there: it holds the keyring, the TLS keys, logs that
/// name object keys and the dirty table. Returns its canonical path.
fn private_cluster_dir(dir: &Path) -> Result<PathBuf, LocalError> {
    optio_cluster::private::create_dir_all(dir)
        .map_err(LocalError::io(format!("cannot create {}", dir.display())))?;
    let dir = fs::canonicalize(dir).map_err(LocalError::io(dir.display().to_string()))?;
    optio_cluster::private::tighten(&dir).map_err(LocalError::io(format!(
        "cannot make {} private (mode 0700; it holds keys and logs)",
        dir.display()
    )))?;
    Ok(dir)
}

/// The longest path a Unix socket's address holds (108 bytes with the final NUL).
const LOCAL_SOCKET_PATH_MAX: usize = 107;

/// Worker threads for each of `servers` server processes sharing a machine with `cores`
/// cores: their share of the cores, at least one. tokio's default — a worker per core in
/// every process — makes a request wake a second worker to look for more work; with nine
/// servers on two cores that cost the servers 12–21 % more CPU per 4 KiB read at queue depth
/// 32 (docs/benchmarks.md, "One request thread per server").
pub fn workers_per_server(servers: usize, cores: usize) -> usize {
    (cores / servers.max(1)).max(1)
}

fn device_capacity_arg(id: u32, dir: &Path, capacity: u64) -> String {
    format!("{id}:{capacity}:{}", dir.display())
}

impl LocalCluster {
    /// Starts the servers (the `server` subcommand of `binary`), then writes the map with
    /// their addresses under `dir` (the next epoch if a map was there) and waits until every
    /// server holds it. Device data in `dir` from an earlier run is kept.
    pub fn start(
        binary: &Path,
        dir: &Path,
        spec: &LocalClusterSpec,
    ) -> Result<LocalCluster, LocalError> {
        if spec.zones == 0 || spec.hosts_per_zone == 0 || spec.devices_per_host == 0 {
            return Err(LocalError::Spec(
                "zones, hosts and devices per host must be at least 1".into(),
            ));
        }
        if let Some(dirty) = &spec.dirty
            && optio_cluster::dirty::spec_holds_password(dirty)
        {
            return Err(LocalError::Spec(format!(
                "the dirty table's URL {} holds a password: it would be written to \
                 DIR/{DIRTY_SOURCE_FILE} and be on the command line, where every local user \
                 reads it; give the URL without it (redis://USER@HOST:PORT) and the password in \
                 {} or in a file named by {}",
                optio_cluster::dirty::redact_spec(dirty),
                optio_cluster::dirty::PASSWORD_ENV,
                optio_cluster::dirty::PASSWORD_FILE_ENV
            )));
        }
        let dir = private_cluster_dir(dir)?;
        let lock = lock_dir(&dir)?;
        let source_file = dir.join(MAP_SOURCE_FILE);
        let (source, etcd) = if spec.etcd {
            let etcd = EtcdServer::start_in(&dir.join("etcd"))?;
            let url = etcd.url();
            optio_cluster::durable::replace_private(&source_file, format!("{url}\n").as_bytes())
                .map_err(LocalError::io(format!("cannot write {}", source_file.display())))?;
            (MapSource::parse(&url)?, Some(etcd))
        } else {
            match fs::remove_file(&source_file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(
                        LocalError::io(format!("cannot remove {}", source_file.display()))(e),
                    );
                }
            }
            (MapSource::dir(&dir), None)
        };
        let mut cluster = LocalCluster {
            dir: dir.clone(),
            binary: binary.to_path_buf(),
            spec: spec.clone(),
            servers: Vec::new(),
            source,
            etcd,
            reintegrator: None,
            watches: Vec::new(),
            monitor: None,
            _lock: lock,
        };
        let dirty_file = dir.join(DIRTY_SOURCE_FILE);
        let written = match &spec.dirty {
            Some(dirty) => optio_cluster::durable::replace_private(
                &dirty_file,
                format!("{dirty}\n").as_bytes(),
            ),
            None => fs::remove_file(&dirty_file).or_else(|e| {
                if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) }
            }),
        };
        written.map_err(LocalError::io(dirty_file.display().to_string()))?;
        if spec.auth {
            // Every server's entity before any server starts: each verifies its peers from the
            // keyring it reads at start (and reloads within a second).
            let names: Vec<String> =
                layout(spec).iter().map(|host| format!("server.{}", host.name)).collect();
            let mut entities: Vec<(&str, Cap)> = vec![(optio_proto::auth::ADMIN, Cap::Admin)];
            entities.extend(names.iter().map(|n| (n.as_str(), Cap::Server)));
            ensure_entities(&dir.join(KEYRING_FILE), &entities)?;
        }
        if spec.tls {
            // After the keyring: client.admin's certificate is recorded in it.
            ensure_tls(&dir, &spec.bind)?;
        }
        for (index, host) in layout(spec).into_iter().enumerate() {
            let devices: Vec<(u32, PathBuf)> =
                host.devices.iter().map(|id| (*id, dir.join(format!("dev{id}")))).collect();
            let port = match spec.base_port {
                None => 0,
                Some(base) => u16::try_from(usize::from(base) + index).map_err(|_| {
                    LocalError::Spec(format!(
                        "--base-port {base}: {} servers do not fit below port 65536",
                        index + 1
                    ))
                })?,
            };
            let bind = spec
                .placements
                .as_ref()
                .and_then(|p| p.get(index))
                .map_or(spec.bind.as_str(), |p| p.bind.as_str());
            let listen = format!("{bind}:{port}");
            let server = cluster.spawn(&host.name, &devices, &listen)?;
            cluster.servers.push(server);
            cluster.watches.push(Default::default());
        }
        let previous =
            block_on(cluster.source.load_if_present()).ok().flatten().map_or(0, |m| m.epoch().0);
        let text = cluster.map_text(previous + 1);
        let map = optio_mapfile::parse(&text).map_err(LocalError::Generated)?;
        block_on(cluster.source.replace(&map))?;
        cluster.wait_for_epoch(previous + 1)?;
        // Every server starts catching up (it may have missed writes while it was stopped);
        // the cluster is ready once they all serve reads.
        for server in &cluster.servers {
            wait_caught_up(&server.addr)?;
        }
        if let Some(mode) = spec.reintegration.clone()
            && map.membership().is_some()
        {
            cluster.spawn_reintegrator(&mode)?;
        }
        Ok(cluster)
    }

    fn spawn(
        &self,
        host: &str,
        devices: &[(u32, PathBuf)],
        listen: &str,
    ) -> Result<ServerProcess, LocalError> {
        let (log_path, log) = self.open_log(host)?;
        let placement = self.spec.placements.iter().flatten().find(|p| p.name == host).cloned();
        let mut command = match placement.as_ref().and_then(|p| p.launcher.split_first()) {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&self.binary);
                command
            }
            None => Command::new(&self.binary),
        };
        command
            .arg("server")
            .arg("--listen")
            .arg(listen)
            .arg("--map")
            .arg(self.source_spec())
            .arg("--name")
            .arg(host)
            .arg("--exit-with-stdin");
        // Local reads for clients on this machine (`optio nbd`), where the path fits a Unix
        // socket's address.
        let socket = self.dir.join(format!("{host}.sock"));
        if socket.as_os_str().len() <= LOCAL_SOCKET_PATH_MAX {
            command.arg("--local-socket").arg(&socket);
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = self
            .spec
            .server_workers
            .unwrap_or_else(|| workers_per_server(layout(&self.spec).len(), cores));
        command.arg("--workers").arg(workers.to_string());
        if self.spec.tls {
            // Made (or renewed) once, by `start`.
            let tls = tls_files(&self.dir);
            command.arg("--tls-cert").arg(&tls.cert).arg("--tls-key").arg(&tls.key);
            command.arg("--tls-ca").arg(&tls.ca);
        }
        if self.spec.auth {
            let keyring = self.dir.join(KEYRING_FILE);
            // Its entity went into the keyring before the first server started.
            let id = format!("server.{host}");
            command.arg("--keyring").arg(&keyring).arg("--id").arg(&id);
        } else {
            command.arg("--no-auth");
        }
        if self.spec.metrics_public {
            command.arg("--metrics-public");
        }
        if let Some(rate) = self.spec.migration_rate_bytes_per_sec {
            command.arg("--migration-rate").arg(rate.to_string());
        }
        if let Some(concurrency) = self.spec.migration_concurrency {
            command.arg("--migration-concurrency").arg(concurrency.to_string());
        }
        for (id, dir) in devices {
            command.arg("--device").arg(device_capacity_arg(*id, dir, self.spec.capacity_bytes));
        }
        if let Some(placement) = &placement {
            command.args(&placement.server_args);
        }
        if let Some(max) = self.spec.max_object_bytes {
            command.arg("--max-object-size").arg(max.to_string());
        }
        if let Some(how) = &self.spec.snapshot_copy {
            command.arg("--snapshot-copy").arg(how);
        }
        if let Some(grace) = self.spec.tombstone_grace {
            command.arg("--tombstone-grace").arg(format!("{}ms", grace.as_millis()));
        }
        if let Some(ttl) = self.spec.fence_ttl {
            command.arg("--fence-ttl").arg(format!("{}s", ttl.as_secs()));
        }
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::from(log));
        let mut child = command
            .spawn()
            .map_err(LocalError::io(format!("cannot start {}", self.binary.display())))?;
        if let Some(placement) = &placement
            && let Err(error) = crate::emulate::cgroup::join(child.id(), &placement.cgroups)
        {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LocalError::Server(format!("server {host}: {error}")));
        }
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut line = String::new();
        // The server prints its address as soon as it listens, or exits (closing stdout).
        let read = stdout.read_line(&mut line);
        let addr = match (read, line.trim().strip_prefix(LISTENING_PREFIX)) {
            (Ok(_), Some(addr)) => addr.to_string(),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let log = fs::read_to_string(&log_path).unwrap_or_default();
                return Err(LocalError::Server(format!(
                    "server {host} did not start; its log {} says: {}",
                    log_path.display(),
                    log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
                )));
            }
        };
        Ok(ServerProcess {
            host: host.to_string(),
            addr,
            devices: devices.to_vec(),
            child: Some(child),
            stdin,
            _stdout: Some(stdout),
        })
    }

    /// `DIR/{name}.log`, opened for appending (a child process's standard error).
    fn open_log(&self, name: &str) -> Result<(PathBuf, fs::File), LocalError> {
        let path = self.dir.join(format!("{name}.log"));
        // Logs name object keys: the owner's only.
        let log = optio_cluster::private::append(&path)
            .map_err(LocalError::io(format!("cannot open {}", path.display())))?;
        Ok((path, log))
    }

    /// Starts `optio reintegrate --mode MODE` for the cluster (logs in `DIR/reintegrator.log`);
    /// like the servers, it exits when its standard input closes.
    fn spawn_reintegrator(&mut self, mode: &str) -> Result<(), LocalError> {
        let (_, log) = self.open_log("reintegrator")?;
        let mut command = Command::new(&self.binary);
        command
            .arg("reintegrate")
            .arg("--cluster")
            .arg(&self.dir)
            .arg("--mode")
            .arg(mode)
            .arg("--exit-with-stdin");
        if let Some(rate) = self.spec.reintegration_rate_bytes_per_sec {
            command.arg("--rate").arg(rate.to_string());
        }
        command.env_remove("OPTIO_CLUSTER").env_remove("OPTIO_DIRTY");
        command.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::from(log));
        let mut child = command
            .spawn()
            .map_err(LocalError::io(format!("cannot start {}", self.binary.display())))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        self.reintegrator = Some((child, stdin));
        Ok(())
    }

    /// Stops the re-integration process, if one runs (and starts one in `mode`, if given).
    pub fn set_reintegration(&mut self, mode: Option<&str>) -> Result<(), LocalError> {
        if let Some((mut child, stdin)) = self.reintegrator.take() {
            drop(stdin);
            let deadline = Instant::now() + SERVER_STOP_TIMEOUT;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(POLL_INTERVAL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        match mode {
            Some(mode) => self.spawn_reintegrator(mode),
            None => Ok(()),
        }
    }

    fn map_text(&self, epoch: u64) -> String {
        let hosts: Vec<MapHost> = self
            .servers
            .iter()
            .map(|server| MapHost {
                name: server.host.clone(),
                addr: Some(server.addr.clone()),
                devices: server.devices.iter().map(|(id, _)| *id).collect(),
            })
            .collect();
        map_text(&self.spec, &hosts, epoch)
    }

    /// The cluster directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The map file (when the map lives in a file; see [`source`](Self::source)).
    pub fn map_path(&self) -> PathBuf {
        mapstore::map_path(&self.dir)
    }

    /// Where the map lives.
    pub fn source(&self) -> &MapSource {
        &self.source
    }

    /// The map source as a `--map` argument: the map file, or the etcd URL.
    pub fn source_spec(&self) -> String {
        match &self.etcd {
            Some(etcd) => etcd.url(),
            None => self.map_path().display().to_string(),
        }
    }

    /// The cluster's etcd, when it has one.
    pub fn etcd(&mut self) -> Option<&mut EtcdServer> {
        self.etcd.as_mut()
    }

    /// The map as stored now.
    pub fn load_map(&self) -> Result<optio_placement::ClusterMap, LocalError> {
        Ok(block_on(self.source.load())?)
    }

    /// Applies `change` to the stored map ([`MapSource::apply`](optio_cluster::MapSource::apply):
    /// epoch + 1, a compare-and-swap, applied again after a lost race) and returns the new
    /// map; servers pick it up by themselves. The supervisor makes what it is asked to, even
    /// a change that leaves data below its pool's `min_size`, without a report
    /// ([`ApplyOptions::Unjudged`](optio_cluster::ApplyOptions::Unjudged)): tests and benches
    /// make changes in quick succession.
    pub fn change_map(
        &self,
        change: &optio_placement::MapChange,
    ) -> Result<optio_placement::ClusterMap, LocalError> {
        match block_on(self.source.apply(change, optio_cluster::ApplyOptions::Unjudged)) {
            Ok(edit) => Ok(edit.new),
            Err(ClusterError::Refused(error)) => Err(LocalError::Change(error)),
            Err(error) => Err(error.into()),
        }
    }

    /// The servers.
    pub fn servers(&self) -> &[ServerProcess] {
        &self.servers
    }

    /// The server holding `device`.
    fn server_of(&self, device: u32) -> Result<usize, LocalError> {
        self.servers
            .iter()
            .position(|s| s.devices.iter().any(|(id, _)| *id == device))
            .ok_or_else(|| LocalError::Spec(format!("no server holds device {device}")))
    }

    /// The data directory of `device`.
    pub fn device_dir(&self, device: u32) -> Result<PathBuf, LocalError> {
        let server = &self.servers[self.server_of(device)?];
        Ok(server
            .devices
            .iter()
            .find(|(id, _)| *id == device)
            .map(|(_, d)| d.clone())
            .expect("found above"))
    }

    /// Kills the server holding `device` with SIGKILL (a crash).
    pub fn kill(&mut self, device: u32) -> Result<(), LocalError> {
        let i = self.server_of(device)?;
        let server = &mut self.servers[i];
        if let Some(mut child) = server.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        server.stdin = None;
        server._stdout = None;
        Ok(())
    }

    /// Restarts the server holding `device` on its old address and waits until it holds the
    /// current epoch.
    pub fn restart(&mut self, device: u32) -> Result<(), LocalError> {
        let i = self.server_of(device)?;
        self.kill(device)?;
        let (host, devices, addr) = {
            let s = &self.servers[i];
            (s.host.clone(), s.devices.clone(), s.addr.clone())
        };
        let deadline = Instant::now() + SERVER_START_TIMEOUT;
        // The old socket may linger a moment after the kill; retry the bind within a bound.
        let server = loop {
            match self.spawn(&host, &devices, &addr) {
                Ok(server) => break server,
                Err(error) if Instant::now() > deadline => return Err(error),
                Err(_) => std::thread::sleep(POLL_INTERVAL * 10),
            }
        };
        self.servers[i] = server;
        let epoch = self.load_map()?.epoch().0;
        wait_for(&self.servers[i].addr, epoch)
    }

    /// Waits until every running server holds `epoch` (or a newer one).
    pub fn wait_for_epoch(&self, epoch: u64) -> Result<(), LocalError> {
        for server in self.servers.iter().filter(|s| s.child.is_some()) {
            wait_for(&server.addr, epoch)?;
        }
        Ok(())
    }

    /// Stops every server: closes their standard input (they exit cleanly), waits a bounded
    /// time, then kills what is left.
    pub fn stop(&mut self) {
        let _ = self.set_reintegration(None);
        for server in &mut self.servers {
            server.stdin = None;
        }
        let deadline = Instant::now() + SERVER_STOP_TIMEOUT;
        for server in &mut self.servers {
            if let Some(mut child) = server.child.take() {
                loop {
                    match child.try_wait() {
                        Ok(Some(_)) => break,
                        Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL_INTERVAL),
                        _ => {
                            let _ = child.kill();
                            let _ = child.wait();
                            break;
                        }
                    }
                }
            }
            server._stdout = None;
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a server reports on `/health` (a plain HTTP/1.0 request), if it answers: the answer
/// decoded as every client decodes it ([`OwnAnswer::decode`]); a keyring digest that is not
/// hex reads as none.
pub fn health(addr: &str) -> Option<ServerHealth> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let asked = OwnRequest::Health;
    let request =
        format!("{} {} HTTP/1.0\r\nHost: optio\r\n\r\n", asked.method().as_str(), asked.path());
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = RawResponse::split(&response)?;
    let header = |name: &'static str| {
        response.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    };
    match OwnAnswer::decode(&asked, response.status, header, response.body) {
        Ok(OwnAnswer::Health(mut health)) => {
            health.keyring =
                health.keyring.filter(|digest| digest.bytes().all(|b| b.is_ascii_hexdigit()));
            Some(health)
        }
        _ => None,
    }
}

/// An HTTP/1.x response taken apart.
struct RawResponse<'a> {
    status: u16,
    /// (name, value)
    headers: Vec<(&'a str, &'a str)>,
    body: &'a [u8],
}

impl RawResponse<'_> {
    /// `response`'s status, headers and body; none if it is not an HTTP/1.x response.
    fn split(response: &[u8]) -> Option<RawResponse<'_>> {
        let end = response.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = std::str::from_utf8(&response[..end]).ok()?;
        let mut lines = head.split("\r\n");
        let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
        let headers = lines
            .filter_map(|line| line.split_once(':').map(|(n, v)| (n.trim(), v.trim())))
            .collect();
        Some(RawResponse { status, headers, body: &response[end + 4..] })
    }
}

/// The epoch a server reports on `/health`.
pub fn health_epoch(addr: &str) -> Option<u64> {
    health(addr).map(|h| h.epoch)
}

/// Waits until the server at `addr` serves reads on every device (none catching up).
pub fn wait_caught_up(addr: &str) -> Result<(), LocalError> {
    let deadline = Instant::now() + SERVER_START_TIMEOUT;
    loop {
        let held = health(addr);
        if held.as_ref().is_some_and(|h| h.recovering == 0) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LocalError::Server(format!(
                "the server at {addr} did not catch up within {SERVER_START_TIMEOUT:?} ({held:?})"
            )));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Waits until the server at `addr` holds `epoch` or a newer one.
pub fn wait_for(addr: &str, epoch: u64) -> Result<(), LocalError> {
    let deadline = Instant::now() + SERVER_START_TIMEOUT;
    loop {
        let held = health_epoch(addr);
        if held.is_some_and(|held| held >= epoch) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LocalError::Server(format!(
                "the server at {addr} did not reach epoch {epoch} within {SERVER_START_TIMEOUT:?} (it holds {held:?})"
            )));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The keyring file in a cluster directory.
pub const KEYRING_FILE: &str = "keyring";

/// Adds each entity the keyring at `path` lacks (with a new key), creating the file (0600) if
/// needed; entities already there keep their keys.
pub fn ensure_entities(path: &Path, entities: &[(&str, Cap)]) -> Result<(), LocalError> {
    use optio_proto::auth::{Entity, Key, Keyring};
    let mut keyring = if path.exists() {
        optio_cluster::keyring::load(path).map_err(|e| LocalError::Spec(e.to_string()))?
    } else {
        Keyring::new()
    };
    let mut changed = false;
    for (name, cap) in entities {
        if keyring.get(name).is_none() {
            let key = Key::generate().map_err(|e| LocalError::Spec(e.to_string()))?;
            keyring.insert(Entity { name: name.to_string(), key, cap: *cap, previous: None });
            changed = true;
        }
    }
    if changed {
        optio_cluster::keyring::save(&keyring, path)
            .map_err(|e| LocalError::Spec(e.to_string()))?;
    }
    Ok(())
}

/// The files of a local cluster's TLS.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The CA certificate clients trust.
    pub ca: PathBuf,
    /// The servers' certificate.
    pub cert: PathBuf,
    /// Its private key (0600).
    pub key: PathBuf,
    /// `client.admin`'s certificate, for mutual TLS (its key beside it, `client.admin-key.pem`).
    pub admin_cert: PathBuf,
    /// Its private key (0600).
    pub admin_key: PathBuf,
}

/// The TLS files of the cluster in `dir` (made by [`ensure_tls`]).
pub fn tls_files(dir: &Path) -> TlsFiles {
    let tls_dir = dir.join(TLS_DIR);
    TlsFiles {
        ca: tls_dir.join(crate::tls::CA_CERT_FILE),
        cert: tls_dir.join("server.pem"),
        key: tls_dir.join("server-key.pem"),
        admin_cert: tls_dir.join(format!("{}.pem", optio_proto::auth::ADMIN)),
        admin_key: tls_dir.join(format!("{}-key.pem", optio_proto::auth::ADMIN)),
    }
}

/// The directory of a cluster's TLS files.
pub const TLS_DIR: &str = "tls";

/// Makes a throwaway CA (`ca.pem`, `ca-key.pem`), a server certificate for `bind`,
/// 127.0.0.1 and localhost (`server.pem`), and a client certificate for `client.admin`
/// (`client.admin.pem`) in `dir/tls/` — or keeps those there while they are good: each is
/// reissued when missing, near its end or from before certificates were bounded
/// ([`crate::tls::CertInfo::needs_renewal`]), and all of them when the CA is replaced. When
/// `dir` has a keyring, it records `client.admin`'s certificate (servers take a certificate
/// only if the keyring records it); one the keyring does not record — revoked by `optio auth
/// rotate` — is reissued.
pub fn ensure_tls(dir: &Path, bind: &str) -> Result<TlsFiles, LocalError> {
    use crate::tls::{Ca, LEAF_VALIDITY, inspect, now_unix};
    let files = tls_files(dir);
    let tls_dir = dir.join(TLS_DIR);
    let ca = Ca::open_or_create(&tls_dir)?;
    let now = now_unix();
    let stale = |path: &Path| {
        ca.renewed() || inspect(path).map_or(true, |info| info.needs_renewal(now, LEAF_VALIDITY))
    };
    if stale(&files.cert) || !files.key.exists() {
        let mut names = vec!["localhost", "127.0.0.1"];
        if !names.contains(&bind) {
            names.push(bind);
        }
        ca.issue_server(&tls_dir, "server", "optio server", &names)?;
    }
    let keyring_path = dir.join(KEYRING_FILE);
    let admin = optio_proto::auth::ADMIN;
    let mut keyring = if keyring_path.exists() {
        let keyring = optio_cluster::keyring::load(&keyring_path)
            .map_err(|e| LocalError::Spec(e.to_string()))?;
        Some(keyring).filter(|k| k.get(admin).is_some())
    } else {
        None
    };
    let old = inspect(&files.admin_cert).ok().map(|info| info.fingerprint);
    let recorded = match (&keyring, &old) {
        (Some(keyring), Some(old)) => keyring.certificates(admin).accepts(old, now),
        (None, _) => true,
        (Some(_), None) => false,
    };
    if stale(&files.admin_cert) || !files.admin_key.exists() || !recorded {
        let issued = ca.issue_client(&tls_dir, admin, admin)?;
        if let Some(keyring) = &mut keyring {
            if let Some(old) = &old {
                keyring.forget_certificate(admin, old);
            }
            keyring
                .record_certificate(admin, issued.fingerprint)
                .and_then(|()| optio_cluster::keyring::save(keyring, &keyring_path))
                .map_err(|e| LocalError::Spec(e.to_string()))?;
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::workers_per_server;

    #[test]
    fn servers_sharing_a_machine_get_their_share_of_the_cores_and_at_least_one() {
        assert_eq!(workers_per_server(9, 2), 1);
        assert_eq!(workers_per_server(9, 64), 7);
        assert_eq!(workers_per_server(1, 8), 8);
        assert_eq!(workers_per_server(4, 8), 2);
        assert_eq!(workers_per_server(0, 4), 4, "no servers: no division by zero");
        assert_eq!(workers_per_server(3, 0), 1);
    }
}
