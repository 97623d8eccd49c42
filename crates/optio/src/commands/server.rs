//! `optio server`: one storage server process serving one or more devices.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use optio_local::cluster::LISTENING_PREFIX;
use optio_server::{DeviceConfig, Server, ServerConfig};

use crate::output::{parse_duration, parse_size};

/// Longest configuration file read.
const CONFIG_BYTES_MAX: u64 = 1 << 20;
/// Most worker threads a server takes (`--workers`).
pub(crate) const WORKERS_MAX: u16 = 1024;

/// `optio server --config FILE …` as the flags the file holds followed by the command line's
/// own (later flags override earlier ones; `--device` accumulates). Other commands' arguments
/// are returned unchanged. `flags`: the server's long flags and whether each takes a value.
pub fn expand_config(
    args: Vec<std::ffi::OsString>,
    flags: &[(String, bool)],
) -> Result<Vec<std::ffi::OsString>> {
    if args.get(1).and_then(|a| a.to_str()) != Some("server") {
        return Ok(args);
    }
    let position = args
        .iter()
        .position(|a| a == "--config" || a.to_str().is_some_and(|a| a.starts_with("--config=")));
    let Some(position) = position else { return Ok(args) };
    let (path, taken) = match args[position].to_str().and_then(|a| a.strip_prefix("--config=")) {
        Some(path) => (PathBuf::from(path), 1),
        None => match args.get(position + 1) {
            Some(path) => (PathBuf::from(path), 2),
            None => bail!("--config needs a FILE"),
        },
    };
    let size = std::fs::metadata(&path)
        .with_context(|| format!("cannot read the configuration {}", path.display()))?
        .len();
    if size > CONFIG_BYTES_MAX {
        bail!(
            "{} is {size} bytes: a configuration file is at most {CONFIG_BYTES_MAX}",
            path.display()
        );
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the configuration {}", path.display()))?;
    let table: toml::Table =
        text.parse().with_context(|| format!("{} is not valid TOML", path.display()))?;
    let mut expanded: Vec<std::ffi::OsString> = args[..2].to_vec();
    for (key, value) in &table {
        let Some((_, takes_value)) = flags.iter().find(|(name, _)| name == key) else {
            let known: Vec<&str> = flags.iter().map(|(n, _)| n.as_str()).collect();
            bail!(
                "{}: unknown setting `{key}` (the settings are the long flags of `optio server --help`: {})",
                path.display(),
                known.join(", ")
            );
        };
        if key == "config" {
            bail!("{}: a configuration file cannot name another (`config`)", path.display());
        }
        let scalar = |value: &toml::Value| -> Result<String> {
            match value {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(i) => Ok(i.to_string()),
                toml::Value::Float(f) => Ok(f.to_string()),
                other => bail!(
                    "{}: `{key}` is {}, not a string or number",
                    path.display(),
                    other.type_str()
                ),
            }
        };
        match (value, takes_value) {
            (toml::Value::Boolean(on), false) => {
                if *on {
                    expanded.push(format!("--{key}").into());
                }
            }
            (_, false) => bail!("{}: `{key}` is a switch: write `{key} = true`", path.display()),
            (toml::Value::Array(items), true) => {
                for item in items {
                    expanded.push(format!("--{key}").into());
                    expanded.push(scalar(item)?.into());
                }
            }
            (value, true) => {
                expanded.push(format!("--{key}").into());
                expanded.push(scalar(value)?.into());
            }
        }
    }
    expanded.extend(args[2..position].iter().cloned());
    expanded.extend(args[position + taken..].iter().cloned());
    Ok(expanded)
}

/// `--snapshot-copy`: [`optio_server::SnapshotCopy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SnapshotCopyArg {
    /// Copy the whole object at its first write after a snapshot.
    Objects,
    /// Copy only the blocks each write changes.
    Blocks,
    /// Copy nothing: the object's file becomes the snapshot's, a new sparse file takes the
    /// writes, and reads of blocks not written since read the snapshot's.
    Redirect,
}

/// Arguments of `optio server`.
#[derive(clap::Args, Debug)]
#[command(
    args_override_self = true,
    after_help = "A configuration file (--config FILE) holds the same settings as TOML, one per long
flag, for a service manager (see contrib/optio-server.service):

  listen = \"10.0.0.1:7000\"
  device = [\"0:4TiB:/srv/optio/dev0\", \"1:4TiB:/srv/optio/dev1\"]
  map = \"etcd://10.0.0.10:2379\"
  keyring = \"/etc/optio/keyring\"
  name = \"z1-h1\"
  migration-rate = \"100MiB\"

Flags on the command line override the file's settings (a --device adds a device)."
)]
pub struct Args {
    /// Read settings from this TOML file (keys: the long flags, e.g. `listen`, `device`,
    /// `map`, `keyring`, `fence-ttl`); the command line's flags override them.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on (port 0: any free port; the address bound is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// A device to serve, as ID:CAPACITY:DIR (e.g. 3:100GiB:/srv/optio/dev3); repeatable.
    #[arg(long = "device", value_name = "ID:CAPACITY:DIR", required = true)]
    pub devices: Vec<String>,
    /// Where the cluster map lives: a map file, a cluster directory or
    /// etcd://[USER@]HOST:PORT[/prefix] (followed live: epochs, locations, rebalancing; etcds://
    /// for TLS, credentials from OPTIO_ETCD_PASSWORD(_FILE), OPTIO_ETCD_CA/CERT/KEY).
    #[arg(long, value_name = "SOURCE")]
    pub map: Option<String>,
    /// This server's name: with --keyring, it signs as `server.NAME` unless --id says otherwise
    /// (`optio status` names servers by their devices' hosts in the map, `optio up` by host).
    #[arg(long)]
    pub name: Option<String>,
    /// Most bytes per second sent when moving data after a map change (e.g. 50MiB; 0: no
    /// limit).
    #[arg(long, default_value = "0")]
    pub migration_rate: String,
    /// Transfers in flight at once when moving data after a map change.
    #[arg(long, default_value_t = optio_server::rebalance::CONCURRENCY_DEFAULT)]
    pub migration_concurrency: usize,
    /// Time between background scrub passes (versions compared across replicas; 0: none).
    #[arg(long, default_value = "1h", value_parser = crate::output::parse_duration)]
    pub scrub_interval: std::time::Duration,
    /// Time between deep background passes (every replica re-read and verified too).
    #[arg(long, default_value = "24h", value_parser = crate::output::parse_duration)]
    pub deep_scrub_interval: std::time::Duration,
    /// How old a tombstone (what a delete leaves) must be before scrubbing may remove it, once
    /// every replica holds it, every device is up and no data moves (0: never).
    #[arg(long, default_value = "24h", value_parser = crate::output::parse_duration)]
    pub tombstone_grace: std::time::Duration,
    /// Most bytes per second a background deep scrub reads (0: no limit).
    #[arg(long, default_value = "8MiB")]
    pub scrub_rate: String,
    /// Where the server keeps what it must remember across restarts (default: its first
    /// device's directory).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Largest object taken (larger ones get 413).
    #[arg(long, default_value = "64MiB")]
    pub max_object_size: String,
    /// Longest time a client may take to send a request's headers, counted from the
    /// connection's opening or from the first byte of the request (e.g. 10s, 500ms); the
    /// connection is closed after it.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub header_timeout: String,
    /// Longest time a request's body may send nothing (e.g. 30s); the request fails with 408
    /// `timeout`, nothing is stored and the connection is closed.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub body_timeout: String,
    /// Longest time a keep-alive connection may wait for its next request before the server
    /// closes it (e.g. 60s).
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub idle_timeout: String,
    /// Most client connections open at once (default: half the soft limit on open files,
    /// `ulimit -n`, from 64 to 4096). At the limit, a new connection makes the server close
    /// the connection idle the longest; if every connection has a request in flight, the new
    /// one is closed at once.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// With the map in etcd: the life of the server's fencing lease, in whole seconds (at
    /// least 2s). The server serves only while it holds the lease, renewing it every quarter
    /// of this; cut off from etcd, it stops serving after three quarters of it, before the
    /// monitor can mark its devices down (docs/failures.md, "Fencing").
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::output::parse_duration)]
    pub fence_ttl: std::time::Duration,
    /// The cluster keyring: every request must be signed by an entity in it, with the
    /// capability the request needs (see `optio auth`, docs/security.md). Reloaded when the
    /// file changes.
    #[arg(long, value_name = "FILE", env = "OPTIO_SERVER_KEYRING")]
    pub keyring: Option<PathBuf>,
    /// The entity this server signs its own requests to other servers with (migration,
    /// catching up, scrubbing): `server.NAME` in the keyring (default: server.<--name>).
    #[arg(long = "id", value_name = "ENTITY")]
    pub id: Option<String>,
    /// Serve every request unsigned: anyone who can reach the port may read, write and
    /// delete everything. Only for a machine nobody else shares.
    #[arg(long, conflicts_with = "keyring")]
    pub no_auth: bool,
    /// EMULATION ONLY (`optio bench io`'s slow and fast devices): every device of this server
    /// serves reads at most this fast (bytes per second, e.g. 4MB/s — one read after another,
    /// page cache or not, no seek time). Never for a real deployment.
    #[arg(long, value_name = "RATE")]
    pub emulated_read_rate: Option<String>,
    /// TLS: this server's certificate chain (PEM). With it, the port takes TLS connections;
    /// plain HTTP there serves /health only (and a public /metrics).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS: the certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// TLS: the certificate authority this server trusts when it talks to other servers
    /// (migration, catching up, scrubbing); servers' certificates must be signed by it.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Serve /metrics without a signature (for Prometheus); /health is always open.
    #[arg(long)]
    pub metrics_public: bool,
    /// Threads serving requests (1 to 1024; default: one per core). Servers sharing a
    /// machine do best with their share of its cores each: a request that wakes one worker
    /// also wakes a second to look for more work, and on a machine with more servers than
    /// cores those wake-ups cost more than they serve (`optio up` gives each server its share,
    /// at least one; docs/deploy.md).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=WORKERS_MAX as i64))]
    pub workers: Option<u16>,
    /// A Unix socket where clients on this machine (`optio nbd`) open block objects' files to
    /// read them directly, without a request per read (local reads; each open is a signed
    /// request like any other; docs/volumes.md). Off by default; `optio up` gives each server
    /// one in its cluster directory.
    #[arg(long, value_name = "PATH")]
    pub local_socket: Option<PathBuf>,
    /// How a volume's write after a snapshot keeps what the snapshot sees: `objects` copies
    /// the whole object at its first write after it (writes pause while the objects they
    /// touch are copied, then go at full speed), `blocks` copies only the blocks each write
    /// changes (no pause; each write to a block not yet copied is slower, until the snapshot
    /// is removed), `redirect` copies nothing (the object's file becomes the snapshot's and a
    /// new sparse file takes the writes; the object is copied whole again only when a
    /// transfer, a scrub, the next snapshot or the snapshot's removal needs it).
    /// docs/volumes.md has the measurements.
    #[arg(long, value_enum, env = "OPTIO_SNAPSHOT_COPY", default_value = "objects")]
    pub snapshot_copy: SnapshotCopyArg,
    /// Exit when standard input closes (how `optio up` makes sure no server outlives it).
    #[arg(long)]
    pub exit_with_stdin: bool,
    #[command(flatten)]
    pub scheduling: crate::commands::SchedulingArgs,
}

fn parse_device(text: &str) -> Result<DeviceConfig> {
    let mut parts = text.splitn(3, ':');
    let (Some(id), Some(capacity), Some(dir)) = (parts.next(), parts.next(), parts.next()) else {
        bail!("--device '{text}' is not ID:CAPACITY:DIR (e.g. 0:10GiB:/srv/optio/dev0)");
    };
    let id: u32 =
        id.parse().with_context(|| format!("device id '{id}' in '{text}' is not a number"))?;
    let capacity_bytes = parse_size(capacity).map_err(anyhow::Error::msg)?;
    if dir.is_empty() {
        bail!("--device '{text}' has an empty directory");
    }
    Ok(DeviceConfig { id, dir: PathBuf::from(dir), capacity_bytes })
}

pub fn run(args: Args) -> Result<()> {
    // Before any thread starts: they inherit it.
    crate::commands::schedule_daemon(args.scheduling);
    // What an operator needs (map epochs, rebalancing, refusals, keyring reloads) is at info.
    crate::commands::init_logging("info");
    let devices = args.devices.iter().map(|d| parse_device(d)).collect::<Result<Vec<_>>>()?;
    let max_object_bytes = parse_size(&args.max_object_size).map_err(anyhow::Error::msg)?;
    let rate = parse_size(&args.migration_rate)
        .map_err(|e| anyhow::anyhow!("--migration-rate: {e} (bytes per second, e.g. 50MiB)"))?;
    let scrub_rate = parse_size(&args.scrub_rate)
        .map_err(|e| anyhow::anyhow!("--scrub-rate: {e} (bytes per second, e.g. 8MiB)"))?;
    let map = args.map.as_deref().map(optio_cluster::source::MapSource::parse).transpose()?;
    let timeout = |flag: &str, text: &str| {
        let duration = parse_duration(text).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))?;
        if duration.is_zero() {
            bail!("--{flag} is zero; give a positive duration (e.g. 10s)");
        }
        Ok(duration)
    };
    let header_timeout = timeout("header-timeout", &args.header_timeout)?;
    let body_timeout = timeout("body-timeout", &args.body_timeout)?;
    let idle_timeout = timeout("idle-timeout", &args.idle_timeout)?;
    let max_connections =
        args.max_connections.unwrap_or_else(optio_server::conn::default_max_connections);
    if !(1..=optio_server::conn::CONNECTIONS_MAX).contains(&max_connections) {
        bail!(
            "--max-connections {max_connections} is out of range (1 to {})",
            optio_server::conn::CONNECTIONS_MAX
        );
    }
    let credentials = match (&args.keyring, args.no_auth) {
        (None, false) => bail!(
            "no keyring: pass --keyring FILE (create one with `optio auth init --keyring FILE`), \
             or --no-auth to let anyone who reaches the port read and write everything"
        ),
        (None, true) => None,
        (Some(path), _) => {
            let id = match (&args.id, &args.name) {
                (Some(id), _) => id.clone(),
                (None, Some(name)) => format!("server.{name}"),
                (None, None) => bail!("--keyring needs --id server.NAME (or --name NAME)"),
            };
            Some(optio_cluster::keyring::credentials(path, &id).with_context(|| {
                format!("cannot use the server identity {id}: add it with `optio auth add {id} --caps server`")
            })?)
        }
    };
    let mut disks: std::collections::HashMap<u32, std::sync::Arc<dyn optio_server::Disk>> =
        std::collections::HashMap::new();
    if let Some(rate) = &args.emulated_read_rate {
        let bytes_per_sec = parse_size(rate.trim_end_matches("/s")).map_err(|e| {
            anyhow::anyhow!("--emulated-read-rate: {e} (bytes per second, e.g. 4MB/s)")
        })?;
        if bytes_per_sec < optio_server::emulated::EMULATED_READ_RATE_MIN {
            bail!(
                "--emulated-read-rate {rate} is below {} bytes per second",
                optio_server::emulated::EMULATED_READ_RATE_MIN
            );
        }
        tracing::warn!(
            bytes_per_sec,
            "emulation: every device of this server reads at most this fast (--emulated-read-rate)"
        );
        for device in &devices {
            disks.insert(
                device.id,
                std::sync::Arc::new(optio_server::EmulatedDisk::new(
                    optio_server::RealDisk,
                    bytes_per_sec,
                )),
            );
        }
    }
    let config = ServerConfig {
        disks,
        listen: args.listen,
        devices,
        map,
        max_object_bytes,
        migration: optio_server::MigrationConfig {
            rate_bytes_per_sec: (rate > 0).then_some(rate),
            concurrency: args.migration_concurrency,
            state_dir: args.state_dir,
        },
        scrub: optio_server::scrub::ScrubConfig {
            rate_bytes_per_sec: Some(scrub_rate).filter(|r| *r > 0),
            interval: Some(args.scrub_interval).filter(|i| !i.is_zero()),
            deep_interval: args.deep_scrub_interval,
            tombstone_grace: Some(args.tombstone_grace).filter(|g| !g.is_zero()),
        },
        header_timeout,
        body_timeout,
        idle_timeout,
        max_connections,
        fence_ttl: args.fence_ttl,
        keyring: args.keyring.clone(),
        metrics_public: args.metrics_public,
        credentials,
        tls: args.tls_cert.clone().zip(args.tls_key.clone()),
        tls_ca: args.tls_ca.clone(),
        local_socket: args.local_socket.clone(),
        snapshot_copy: match args.snapshot_copy {
            SnapshotCopyArg::Objects => optio_server::SnapshotCopy::Objects,
            SnapshotCopyArg::Blocks => optio_server::SnapshotCopy::Blocks,
            SnapshotCopyArg::Redirect => optio_server::SnapshotCopy::Redirect,
        },
    };
    let _ = &args.name;
    let runtime = crate::commands::runtime_with_workers(args.workers.map(usize::from))?;
    runtime.block_on(async move {
        let server = Server::bind(config).await.context("cannot start the server")?;
        {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            // Ignore a closed stdout: the address is also in the log.
            let _ = writeln!(stdout, "{LISTENING_PREFIX}{}", server.local_addr());
            let _ = stdout.flush();
        }
        tracing::info!(addr = %server.local_addr(), epoch = server.epoch(), "serving");
        server.serve(shutdown_signal(args.exit_with_stdin)).await.context("the server failed")
    })
}

/// Completes on Ctrl-C, SIGTERM, or (with `exit_with_stdin`) when standard input closes.
pub async fn shutdown_signal(exit_with_stdin: bool) {
    let (stdin_closed_tx, stdin_closed) = tokio::sync::oneshot::channel::<()>();
    if exit_with_stdin {
        std::thread::spawn(move || {
            use std::io::Read;
            let mut sink = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = stdin_closed_tx.send(());
        });
    } else {
        std::mem::forget(stdin_closed_tx);
    }
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM can be handled");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
        _ = stdin_closed => {}
    }
}
