//! # optio-server
//!
//! Optio's storage daemon: one or more devices (data directories with a configured capacity)
//! behind one HTTP endpoint. It is deliberately simple — CHOICE's "simple server, clever
//! client": it stores, verifies and serves objects, answers probes with the device's metrics
//! piggybacked, keeps choice records with an atomic create-if-absent, and refuses requests
//! from a stale epoch. Placement, choices and replication are the client's job
//! (`optio-client`), so the server never needs to compute a placement.
//!
//! Design decisions (details in `docs/store.md`):
//!
//! * **Durable or invisible.** A write goes to a temporary file, is fsynced, renamed into
//!   place and the directory fsynced; a crash leaves at most a temporary file, removed at the
//!   next start. Every stored file carries a header with a format version, the key, the size,
//!   crc32c checksums and the version ([`optio_proto::ObjectHeader`]).
//! * **Every read verifies.** A replica that fails its checksum is moved to `quarantine/`,
//!   reported as `corrupt` (500), and repaired by the client from another replica.
//! * **Metadata in memory.** Probes and listings never touch the disk.
//! * **All I/O behind [`Disk`]**, so tests inject a full disk or a crash before the rename.
//! * **Metrics** ([`optio_proto::DeviceMetrics`]): CPU and memory utilisation from `/proc`
//!   honouring cgroup limits, space against the configured capacity, an EWMA of service
//!   time, unflushed bytes, the location path from the map.
//!
//! ```no_run
//! # async fn example() -> Result<(), optio_server::ServerError> {
//! use optio_server::{DeviceConfig, Server, ServerConfig};
//! let config = ServerConfig {
//!     devices: vec![DeviceConfig { id: 0, dir: "/tmp/optio/dev0".into(), capacity_bytes: 1 << 30 }],
//!     ..ServerConfig::default()
//! };
//! let server = Server::bind(config).await?;
//! println!("listening on {}", server.local_addr());
//! server.serve(std::future::pending()).await
//! # }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
pub mod catchup;
pub mod conn;
pub mod disk;
pub mod emulated;
mod error;
pub mod fence;
mod http;
pub mod in_process;
pub mod journal;
mod mapstate;
pub mod peer;
pub mod rebalance;
pub mod records;
pub mod scrub;
mod serve;
pub mod store;
pub mod system;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;

use std::sync::Arc;
use std::time::Duration;

pub use conn::Limits;
pub use conn::local::LOCAL_SOCKET_MODE;
pub use disk::{Disk, Fault, FaultyDisk, RealDisk};
pub use emulated::EmulatedDisk;
pub use error::StoreError;
pub use in_process::InProcess;
pub use mapstate::{MapState, ServerMap};
pub use optio_proto::{DeviceStatus, Listing, ServerStatus};
pub use optio_proto::{MigrationPhase, MigrationStatus};
pub use rebalance::{MigrationConfig, Rebalancer};
pub use store::{DeviceConfig, DeviceStore, SnapshotCopy};

/// Largest object a server takes by default.
pub const OBJECT_BYTES_MAX_DEFAULT: u64 = 64 << 20;
/// How often CPU and memory are sampled.
pub const SYSTEM_SAMPLE_INTERVAL: Duration = Duration::from_millis(1000);

/// How to run a server.
#[derive(Clone)]
pub struct ServerConfig {
    /// Address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// The devices served.
    pub devices: Vec<DeviceConfig>,
    /// Where the map lives — a file or etcd — (for epochs, locations and rebalancing); none:
    /// no epoch checks.
    pub map: Option<optio_cluster::source::MapSource>,
    /// Largest object taken (413 above).
    pub max_object_bytes: u64,
    /// The disk of each device (default: the real file system), by device id.
    pub disks: HashMap<u32, Arc<dyn Disk>>,
    /// How to move data when the map changes (`state_dir` defaults to the first device's
    /// directory).
    pub migration: MigrationConfig,
    /// How to scrub.
    pub scrub: scrub::ScrubConfig,
    /// Longest time from accepting a connection, or from the first byte of a request, to the
    /// end of the request's headers; the connection is closed after it.
    pub header_timeout: Duration,
    /// Longest time a request's body may send nothing; the request fails with 408 `timeout`
    /// and the connection is closed.
    pub body_timeout: Duration,
    /// Longest time a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Most connections open at once; at the limit, the connection idle the longest is closed
    /// to make room for a new one (default: [`conn::default_max_connections`]).
    pub max_connections: usize,
    /// With the map in etcd: the life of the server's fencing lease (see [`fence`]); it
    /// serves only while it holds the lease.
    pub fence_ttl: Duration,
    /// The keyring requests are verified against (`None`: authentication off — anyone who
    /// reaches the port may do anything).
    pub keyring: Option<std::path::PathBuf>,
    /// Serve `/metrics` without a signature.
    pub metrics_public: bool,
    /// The identity this server signs its requests to other servers with (migration,
    /// catching up, scrubbing).
    pub credentials: Option<optio_proto::auth::Credentials>,
    /// TLS: this server's certificate chain and private key (PEM); none: plain HTTP.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The certificate authority this server trusts when it talks to other servers over TLS.
    pub tls_ca: Option<std::path::PathBuf>,
    /// A Unix socket where clients on this machine open block objects' files for reading
    /// (local reads, [`conn::local`]); none: no local reads.
    pub local_socket: Option<std::path::PathBuf>,
    /// How writes in place after a volume snapshot keep what it sees ([`SnapshotCopy`]).
    pub snapshot_copy: SnapshotCopy,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            devices: Vec::new(),
            map: None,
            max_object_bytes: OBJECT_BYTES_MAX_DEFAULT,
            disks: HashMap::new(),
            migration: MigrationConfig::default(),
            scrub: scrub::ScrubConfig::default(),
            header_timeout: conn::HEADER_TIMEOUT_DEFAULT,
            body_timeout: conn::BODY_TIMEOUT_DEFAULT,
            idle_timeout: conn::IDLE_TIMEOUT_DEFAULT,
            max_connections: conn::default_max_connections(),
            fence_ttl: fence::FENCE_TTL_DEFAULT,
            keyring: None,
            metrics_public: false,
            credentials: None,
            tls: None,
            tls_ca: None,
            local_socket: None,
            snapshot_copy: SnapshotCopy::default(),
        }
    }
}

/// Why a server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A device could not be opened.
    #[error("cannot open device {device}: {source}")]
    Device {
        /// The device.
        device: u32,
        /// Why.
        source: StoreError,
    },
    /// The same device twice.
    #[error("device {0} is configured twice")]
    DuplicateDevice(u32),
    /// The map could not be loaded.
    #[error(transparent)]
    Map(#[from] mapstate::MapInstallError),
    /// The migration settings are invalid.
    #[error(transparent)]
    Migration(#[from] rebalance::MigrationError),
    /// The fencing settings are invalid.
    #[error(transparent)]
    Fence(#[from] fence::FenceError),
    /// The connection limits, timeouts or fencing TTL are invalid.
    #[error("{0}")]
    Limits(String),
    /// The keyring cannot be used.
    #[error(transparent)]
    Auth(#[from] auth::KeyringError),
    /// The server's TLS certificate, key or CA cannot be used.
    #[error(transparent)]
    Tls(#[from] optio_tls::TlsError),
    /// The transport to the other servers could not be built.
    #[error(transparent)]
    Transport(#[from] optio_net::TransportError),
    /// The local socket could not be bound.
    #[error(transparent)]
    LocalSocket(#[from] conn::local::LocalSocketError),
    /// The socket could not be bound or served.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A server bound to its address, not yet serving.
pub struct Server {
    listener: tokio::net::TcpListener,
    /// The local socket and its path, if configured.
    local: Option<(tokio::net::UnixListener, std::path::PathBuf)>,
    state: Arc<serve::AppState>,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// The transport this server's own requests go through (re-keyed when its key rotates).
    signer: Option<optio_net::HttpTransport>,
}

impl Server {
    /// Opens the devices, loads the map and binds the socket.
    pub async fn bind(config: ServerConfig) -> Result<Server, ServerError> {
        let limits = Limits {
            header_timeout: config.header_timeout,
            body_timeout: config.body_timeout,
            idle_timeout: config.idle_timeout,
            max_connections: config.max_connections,
        };
        limits.check().map_err(|error| ServerError::Limits(error.to_string()))?;
        let (state, transport) = open_state(&config).await?;
        // Clients with a certificate from the cluster's CA may use it as their identity.
        let tls = match &config.tls {
            Some((cert, key)) => Some(tokio_rustls::TlsAcceptor::from(Arc::new(
                optio_tls::server_config(cert, key, config.tls_ca.as_deref())?,
            ))),
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServerError::Listen { addr: config.listen, source })?;
        let local = match &config.local_socket {
            Some(path) => Some((conn::local::bind(path)?, path.clone())),
            None => None,
        };
        let local_socket = match (&config.local_socket, optio_net::local::boot_id()) {
            (Some(path), Some(boot_id)) => {
                // The path as clients elsewhere in the file system tree reach it.
                let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                Some(optio_proto::LocalSocket { path: path.display().to_string(), boot_id })
            }
            _ => None,
        };
        // (An unspecified address, 0.0.0.0 or ::, names no server: clients address this one by
        // its devices' addresses in the map.)
        let listen_addr = listener
            .local_addr()
            .ok()
            .filter(|addr| !addr.ip().is_unspecified())
            .map(|addr| addr.to_string());
        let state = Arc::new(serve::AppState { local_socket, listen_addr, ..state });
        let signer = Some(transport);
        Ok(Server { listener, local, state, limits, tls, signer })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// The map epoch held.
    pub fn epoch(&self) -> u64 {
        self.state.map.epoch()
    }

    /// Serves until `shutdown` completes, then finishes the requests in flight (connections
    /// are limited and timed out as [`conn`] describes).
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let state = self.state.clone();
        let background = tokio::spawn(background(state.clone()));
        let following = tokio::spawn(state.map.clone().follow());
        let rebalancing = tokio::spawn(state.rebalancer.clone().run());
        let catching_up = tokio::spawn(state.catchup.clone().run());
        let scrubbing = tokio::spawn(state.scrubber.clone().run());
        let fencing = match state.map.source() {
            Some(optio_cluster::source::MapSource::Etcd(store)) if state.fence.is_leased() => {
                let mut ids: Vec<u32> = state.devices.keys().copied().collect();
                ids.sort_unstable();
                Some(tokio::spawn(state.fence.clone().run(
                    store.clone(),
                    ids,
                    state.catchup.clone(),
                )))
            }
            _ => None,
        };
        let keyring_following = tokio::spawn(state.auth.clone().follow(self.signer));
        let state_for_exit = state.clone();
        let app = http::router(state);
        let (stop_local, local_stopping) = tokio::sync::watch::channel(false);
        let local = self.local.map(|(listener, path)| {
            let serving = tokio::spawn(conn::local::serve(
                listener,
                app.clone(),
                self.limits,
                local_stopping,
            ));
            (serving, path)
        });
        conn::serve(self.listener, app, self.limits, self.tls, shutdown).await;
        let _ = stop_local.send(true);
        if let Some((serving, path)) = local {
            let _ = serving.await;
            let _ = std::fs::remove_file(path);
        }
        background.abort();
        following.abort();
        rebalancing.abort();
        catching_up.abort();
        scrubbing.abort();
        keyring_following.abort();
        if let Some(fencing) = fencing {
            fencing.abort();
        }
        state_for_exit.close_records().await;
        Ok(())
    }
}

/// Opens `config`'s devices and loads its map: the state every request is served from
/// (without a local socket or a listening address, which [`Server::bind`] adds), and the
/// transport the server's own requests go through.
async fn open_state(
    config: &ServerConfig,
) -> Result<(serve::AppState, optio_net::HttpTransport), ServerError> {
    let mut devices = HashMap::new();
    for device in &config.devices {
        let disk = config.disks.get(&device.id).cloned().unwrap_or_else(|| Arc::new(RealDisk));
        let device_config = device.clone();
        let store = tokio::task::spawn_blocking(move || DeviceStore::open(&device_config, disk))
            .await
            .expect("opening a device does not panic")
            .map_err(|source| ServerError::Device { device: device.id, source })?;
        store.set_snapshot_copy(config.snapshot_copy);
        if devices.insert(device.id, Arc::new(store)).is_some() {
            return Err(ServerError::DuplicateDevice(device.id));
        }
    }
    let map = Arc::new(MapState::new(config.map.clone()));
    map.reload().await?;
    let mut migration = config.migration.clone();
    if migration.state_dir.is_none() {
        migration.state_dir = config.devices.iter().min_by_key(|d| d.id).map(|d| d.dir.clone());
    }
    let transport = optio_net::HttpTransport::with_options(
        config.credentials.clone(),
        config.tls_ca.as_deref(),
        None,
    )?;
    let rebalancer =
        Arc::new(Rebalancer::new(devices.clone(), map.clone(), migration, transport.clone())?);
    let catchup = Arc::new(catchup::CatchUp::new(devices.clone(), map.clone(), transport.clone()));
    let scrubber = Arc::new(scrub::Scrubber::new(
        devices.clone(),
        map.clone(),
        config.scrub.clone(),
        rebalancer.clone(),
        catchup.clone(),
        transport.clone(),
    ));
    let fence = Arc::new(match &config.map {
        Some(optio_cluster::source::MapSource::Etcd(_)) => fence::Fence::leased(config.fence_ttl)?,
        _ => fence::Fence::open(),
    });
    let auth = Arc::new(match &config.keyring {
        Some(path) => auth::Auth::from_file(path.clone(), config.metrics_public)?,
        None => auth::Auth::off(),
    });
    let telemetry = serve::ServerMetrics::new(devices.keys().copied());
    let state = serve::AppState {
        devices,
        map,
        system: Arc::new(system::SystemMetrics::default()),
        max_object_bytes: config.max_object_bytes,
        telemetry,
        incarnation: incarnation(),
        rebalancer,
        catchup,
        scrubber,
        fence,
        auth,
        writes: Default::default(),
        local_socket: None,
        listen_addr: None,
    };
    Ok((state, transport))
}

/// A random number for this run of the server.
fn incarnation() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(&now.to_le_bytes());
    hasher.update(&std::process::id().to_le_bytes());
    hasher.digest()
}

/// Samples the machine's metrics, commits choice records.
async fn background(state: Arc<serve::AppState>) {
    let mut cpu = system::Sampler::new();
    let mut system_tick = tokio::time::interval(SYSTEM_SAMPLE_INTERVAL);
    let mut record_tick = tokio::time::interval(records::COMMIT_INTERVAL);
    loop {
        tokio::select! {
            _ = system_tick.tick() => state.system.update(&mut cpu),
            _ = record_tick.tick() => state.commit_records().await,
        }
    }
}
