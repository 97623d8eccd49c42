//! `optio nbd`: serves block volumes over the Network Block Device protocol (`optio-nbd`),
//! for fio (`--ioengine=nbd`), qemu (`nbd://`, `nbds://`), qemu-img, nbdcopy, nbdfuse and the
//! kernel.
//!
//! Who may connect (docs/security.md, "NBD"): by default only this user, on a Unix socket of
//! mode 0600 (`DIR/nbd.sock`). On TCP (`--listen`), TLS is required (`NBD_OPT_STARTTLS`) with
//! a client certificate the cluster's CA signed whose common name is an entity of the
//! keyring: its capability decides (`write`, `admin`: read-write; `read`: read-only). Plain
//! TCP only with `--insecure-plain-tcp`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use optio_client::ClientError;
use optio_client::volume::{self, OpenOptions, Source, Volume, VolumeError};
use optio_nbd::rustls::pki_types::CertificateDer;
use optio_nbd::{
    Access, Authorize, Errno, Export, Exports, Extent, IoFuture, Limits, ReadOnlyExports, Server,
    Tls, WriteBack,
};
use optio_proto::auth::Cap;

use crate::commands::client::ClusterConn;
use crate::commands::identity::KEYRING_FILE;

/// Write-backs in flight per volume with `--write-back`.
const WRITE_BACK_IN_FLIGHT: usize = 32;

/// The Unix socket `optio nbd` listens on by default, in the cluster directory.
pub const SOCKET_FILE: &str = "nbd.sock";
/// The TLS files `optio up --tls` makes, in the cluster directory: the CA, and the
/// certificate and key the NBD server shows (the servers' own).
const TLS_CA_FILE: &str = "tls/ca.pem";
const TLS_CERT_FILE: &str = "tls/server.pem";
const TLS_KEY_FILE: &str = "tls/server-key.pem";

/// `optio nbd`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Listening (docs/security.md, \"NBD\"):
  default            the Unix socket DIR/nbd.sock, mode 0600: only this user may connect
                     (nbd+unix:///VOLUME?socket=DIR/nbd.sock)
  --listen ADDR      TCP with TLS required (nbds://ADDR/VOLUME): clients show a certificate
                     the cluster's CA signed, CN=client.NAME an entity of the keyring; its
                     capability decides: write or admin read-write, read read-only. Needs a
                     cluster started with `optio up --tls`, or --nbd-tls-cert/-key/-ca
  --listen ADDR --insecure-plain-tcp
                     TCP without TLS or authentication (nbd://ADDR/VOLUME): anyone who can
                     connect reads and writes every volume served
The --tls-ca/--tls-cert/--tls-key flags are how this command reaches the cluster's servers;
the --nbd-tls-* flags are what NBD clients see.")]
pub struct Args {
    /// Volumes to serve (default: every volume).
    pub volumes: Vec<String>,
    #[command(flatten)]
    pub scheduling: crate::commands::SchedulingArgs,
    /// Unix socket to listen on, mode 0600 (default: DIR/nbd.sock, unless --listen is given).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// TCP address to listen on (the NBD port is 10809), TLS required (see below).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The certificate NBD clients see on --listen (PEM; default: DIR/tls/server.pem, which
    /// `optio up --tls` makes).
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub nbd_tls_cert: Option<PathBuf>,
    /// Its private key (PEM; default: DIR/tls/server-key.pem).
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub nbd_tls_key: Option<PathBuf>,
    /// The CA whose client certificates are accepted on --listen (PEM; default:
    /// DIR/tls/ca.pem).
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub nbd_tls_ca: Option<PathBuf>,
    /// The keyring whose entities' capabilities decide what each certificate's holder may
    /// do (default: DIR/keyring; re-read for each connection).
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub nbd_keyring: Option<PathBuf>,
    /// INSECURE: serve --listen on plain TCP, without TLS or any authentication: anyone who
    /// can connect to ADDR reads and writes every volume served.
    #[arg(
        long,
        requires = "listen",
        conflicts_with_all = ["nbd_tls_cert", "nbd_tls_key", "nbd_tls_ca", "nbd_keyring"]
    )]
    pub insecure_plain_tcp: bool,
    /// Serve the volumes read-only (no lock taken; others may write).
    #[arg(long)]
    pub read_only: bool,
    /// Take the volumes' locks even if another client holds them (one that is gone; a holder
    /// that died on this machine is recognised without it).
    #[arg(long)]
    pub break_lock: bool,
    /// Acknowledge writes from this much memory per volume and write them to the servers
    /// behind (e.g. `32MiB`; 0: off, the default). A write is then acknowledged before any
    /// server has it, and is durable once a FLUSH (or a FUA write) that follows it is
    /// answered: a guest that flushes, as Linux and qemu do, loses nothing it was told is
    /// durable, but this process dying loses writes it acknowledged and did not flush (the
    /// guarantee of a disk with a write cache, and of librbd's cache). Off: a write is
    /// acknowledged once every replica's server has it (docs/volumes.md).
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = parse_cache_size)]
    pub write_back: u64,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = optio_nbd::server::IN_FLIGHT_MAX)]
    pub queue_depth: usize,
    /// Close a connection with nothing in flight after this many seconds without a request,
    /// while half the most connections (64 of 128) are open (0: never). qemu, if given
    /// reconnect-delay, reconnects by itself; without it, its requests fail after such a close.
    #[arg(long, value_name = "SECONDS", default_value_t = optio_nbd::server::IDLE_TIMEOUT.as_secs())]
    pub idle_timeout: u64,
    /// Read every block through the servers, even where a replica's server runs on this
    /// machine. By default such reads go to the replica's file directly (its server hands
    /// over an open descriptor once per object; every read checks the file holds the version
    /// this writer last wrote, else reads through the servers; docs/volumes.md). A snapshot
    /// (VOL@SNAP) and a clone's reads of its parent read a file locally while it holds a
    /// version from before the snapshot. Other read-only serving never reads locally.
    #[arg(long)]
    pub no_local_reads: bool,
    /// Local reads only from the servers of this host (its `host` in the map; repeat for
    /// several). Every server of an emulated cluster (`optio up --emulate`) runs on this
    /// machine, but only the client's own host is local to it.
    #[arg(long, value_name = "HOST", conflicts_with = "no_local_reads")]
    pub local_reads_host: Vec<String>,
    /// The policy choosing where new data objects go (default: the pool's; k is the pool's).
    #[arg(long)]
    pub policy: Option<String>,
    /// Where this client runs, for the `local` policy: `zone=z1,host=z1-c1` (the map's
    /// location levels, root first).
    #[arg(long, value_name = "LEVELS")]
    pub location: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// Where `optio nbd` listens, resolved from its flags before any volume is opened.
struct Listeners {
    /// The Unix socket.
    socket: Option<PathBuf>,
    /// The TCP address, and how it is secured.
    tcp: Option<(String, Tcp)>,
}

/// How the TCP listener is secured.
enum Tcp {
    /// `--insecure-plain-tcp`.
    Plain,
    /// TLS with client certificates mapped to the keyring's entities.
    Tls { cert: PathBuf, key: PathBuf, ca: PathBuf, keyring: PathBuf },
}

impl Listeners {
    fn resolve(args: &Args, dir: &Path) -> Result<Listeners> {
        let socket = match (&args.socket, &args.listen) {
            (Some(path), _) => Some(path.clone()),
            (None, None) => Some(dir.join(SOCKET_FILE)),
            (None, Some(_)) => None,
        };
        let Some(addr) = args.listen.clone() else {
            return Ok(Listeners { socket, tcp: None });
        };
        if args.insecure_plain_tcp {
            return Ok(Listeners { socket, tcp: Some((addr, Tcp::Plain)) });
        }
        let or_default =
            |given: &Option<PathBuf>, file: &str| given.clone().unwrap_or_else(|| dir.join(file));
        let cert = or_default(&args.nbd_tls_cert, TLS_CERT_FILE);
        let key = or_default(&args.nbd_tls_key, TLS_KEY_FILE);
        let ca = or_default(&args.nbd_tls_ca, TLS_CA_FILE);
        let missing: Vec<String> = [&cert, &key, &ca]
            .into_iter()
            .filter(|path| !path.exists())
            .map(|path| path.display().to_string())
            .collect();
        if !missing.is_empty() {
            bail!(
                "refusing to serve NBD on TCP {addr} without TLS (no {}): over TCP, clients must \
                 start TLS (nbds://) and show a certificate the cluster's CA signed. Start the \
                 cluster with `optio up --tls` (its tls/ directory holds what is needed), or pass \
                 --nbd-tls-cert, --nbd-tls-key and --nbd-tls-ca; or serve on the Unix socket \
                 (the default without --listen); or, where everyone who can reach {addr} may \
                 read and write every volume, pass --insecure-plain-tcp",
                missing.join(", ")
            );
        }
        let keyring = or_default(&args.nbd_keyring, KEYRING_FILE);
        optio_cluster::keyring::load(&keyring).with_context(|| {
            format!(
                "NBD clients on {addr} are authorised by the keyring {} (their certificate's \
                 common name is an entity there): pass --nbd-keyring FILE if it is elsewhere",
                keyring.display()
            )
        })?;
        Ok(Listeners { socket, tcp: Some((addr, Tcp::Tls { cert, key, ca, keyring })) })
    }
}

/// The common name of a certificate's subject.
fn common_name(certificate: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?.as_str().ok()?;
    Some(name.to_string())
}

/// What a TLS client may do with the volumes: its certificate's common name is an entity of
/// the keyring that records that very certificate for it (`optio auth cert`; the keyring is
/// re-read for each connection, so `optio auth rm`, a rotation or a changed capability holds
/// from the next connection on), whose capability decides — `write`, `admin` (or
/// `server`): read-write; `read`: read-only; anything else, or no certificate: refused.
struct KeyringAuthority {
    keyring: PathBuf,
    exports: Arc<dyn Exports>,
    read_only: Arc<dyn Exports>,
}

impl Authorize for KeyringAuthority {
    fn authorize(
        &self,
        certificate: Option<&CertificateDer<'static>>,
    ) -> Result<Arc<dyn Exports>, String> {
        let certificate = certificate.ok_or(
            "a client certificate is required: one the cluster's CA signed whose common name is \
             an entity of its keyring (CN=client.NAME)",
        )?;
        let entity = common_name(certificate).ok_or(
            "the client certificate has no common name: it should name an entity (CN=client.NAME)",
        )?;
        let keyring = optio_cluster::keyring::load(&self.keyring).map_err(|error| {
            tracing::warn!("cannot read the keyring that authorises NBD clients: {error}");
            "the server cannot check certificates now (its keyring is unreadable)".to_string()
        })?;
        if keyring.get(&entity).is_none() {
            return Err(format!("{entity} is not an entity of the cluster's keyring"));
        }
        // As the storage servers do: only a certificate the keyring records for the entity
        // (rotating or removing the entity revokes it).
        let fingerprint = optio_proto::auth::CertFingerprint::of_der(certificate.as_ref());
        let found = keyring
            .check_certificate(&entity, &fingerprint, now_secs())
            .map_err(|error| error.to_string())?;
        let exports = if found.cap.allows(Cap::Write) {
            self.exports.clone()
        } else if found.cap.allows(Cap::Read) {
            self.read_only.clone()
        } else {
            return Err(format!("{entity} ({}) may not read volumes", found.cap));
        };
        tracing::debug!(%entity, cap = %found.cap, "NBD client authenticated");
        Ok(exports)
    }
}

/// A volume as an NBD export.
struct VolumeExport {
    volume: Arc<Volume>,
    size: u64,
}

fn errno(operation: &str, volume: &Volume, error: VolumeError) -> Errno {
    let code = match &error {
        VolumeError::ReadOnly(_) | VolumeError::LockLost(_) => Errno::Perm,
        VolumeError::OutOfRange { .. } => Errno::Invalid,
        VolumeError::Client(ClientError::NoRoom { .. }) => Errno::NoSpace,
        _ => Errno::Io,
    };
    tracing::warn!(volume = %volume.name(), "{operation} failed: {error}");
    code
}

impl Export for VolumeExport {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_only(&self) -> bool {
        self.volume.read_only()
    }

    /// Every connection goes through this one open volume: a write acknowledged on one is
    /// on the replicas, where a read on another finds it, and a flush on any flushes all.
    fn multi_conn(&self) -> bool {
        true
    }

    fn read(&self, offset: u64, length: u32) -> IoFuture<'_, Bytes> {
        Box::pin(async move {
            self.volume
                .read(offset, u64::from(length))
                .await
                .map_err(|e| errno("read", &self.volume, e))
        })
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> IoFuture<'_, ()> {
        Box::pin(async move {
            self.volume.write(offset, data, fua).await.map_err(|e| errno("write", &self.volume, e))
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        Box::pin(
            async move { self.volume.flush().await.map_err(|e| errno("flush", &self.volume, e)) },
        )
    }

    fn trim(&self, offset: u64, length: u32, fua: bool) -> IoFuture<'_, ()> {
        Box::pin(async move {
            self.volume
                .write_zeroes(offset, u64::from(length), fua)
                .await
                .map_err(|e| errno("trim", &self.volume, e))
        })
    }

    fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        _may_trim: bool,
        fua: bool,
    ) -> IoFuture<'_, ()> {
        Box::pin(async move {
            self.volume
                .write_zeroes(offset, u64::from(length), fua)
                .await
                .map_err(|e| errno("write-zeroes", &self.volume, e))
        })
    }

    /// Data objects never written are holes that read as zeros; stored ones data (depth 1);
    /// a clone's objects that come from its parent chain data too (depth 2 and on). When the
    /// volume's objects cannot be listed, all data: never a hole that is not one.
    fn block_status(&self, offset: u64, length: u32) -> IoFuture<'_, Vec<Extent>> {
        Box::pin(async move {
            let runs = match self.volume.allocation(offset, u64::from(length)).await {
                Ok(runs) => runs,
                Err(error) => {
                    tracing::warn!(
                        volume = %self.volume.name(),
                        "block status: cannot tell which objects are stored, answering all data: {error}"
                    );
                    return Ok(vec![Extent::data(length)]);
                }
            };
            Ok(runs
                .into_iter()
                .map(|(bytes, source)| {
                    // Runs add up to the request's length, a u32.
                    let length = u32::try_from(bytes).unwrap_or(u32::MAX);
                    match source {
                        Source::Nowhere => Extent::hole(length),
                        Source::Own => Extent::data(length),
                        Source::Ancestor(n) => Extent {
                            length,
                            hole: false,
                            zero: false,
                            depth: u32::try_from(n).map_or(u32::MAX, |n| n.saturating_add(2)),
                        },
                    }
                })
                .collect())
        })
    }

    fn allocation_depth(&self) -> bool {
        true
    }
}

pub fn run(args: Args) -> Result<()> {
    // Before any thread starts: they inherit it.
    crate::commands::schedule_daemon(args.scheduling);
    crate::commands::init_logging("info");
    crate::commands::runtime()?.block_on(serve(args))
}

/// `zone=z1,host=z1-c1` (or `/`-separated) as location levels.
fn parse_location(text: &str) -> Result<Vec<(String, String)>> {
    let mut levels = Vec::new();
    for level in text.split([',', '/']).filter(|l| !l.trim().is_empty()) {
        let Some((kind, name)) = level.split_once('=') else {
            bail!("--location {text:?}: each level is TYPE=NAME, e.g. zone=z1,host=z1-c1");
        };
        levels.push((kind.trim().to_string(), name.trim().to_string()));
    }
    if levels.is_empty() {
        bail!("--location is empty: give the client's location, e.g. zone=z1,host=z1-c1");
    }
    Ok(levels)
}

async fn serve(args: Args) -> Result<()> {
    // Where to listen is settled first: a refusal (plain TCP without the flag) takes no lock.
    let listeners = Listeners::resolve(&args, &args.cluster.dir()?)?;
    let mut config = args.cluster.config()?;
    if let Some(policy) = &args.policy {
        policy
            .parse::<optio_placement::PolicySpec>()
            .map_err(|e| anyhow::anyhow!("--policy {policy}: {e}"))?;
        config.policy = Some(policy.clone());
    }
    if let Some(location) = &args.location {
        config.location = parse_location(location)?;
    }
    if !args.local_reads_host.is_empty() {
        config.local_read_hosts = Some(args.local_reads_host.clone());
    }
    let client = args.cluster.connect_with(config).await?;
    let names = if args.volumes.is_empty() {
        volume::list(&client).await?.into_iter().map(|h| h.name).collect()
    } else {
        args.volumes.clone()
    };
    if names.is_empty() {
        bail!("no volumes to serve; create one with `optio volume create NAME SIZE`");
    }
    let options = OpenOptions {
        read_only: args.read_only,
        break_lock: args.break_lock,
        local_reads: !args.no_local_reads,
    };
    let mut exports: Vec<(String, Arc<dyn Export>)> = Vec::new();
    let mut opened: Vec<Arc<Volume>> = Vec::new();
    let mut caches: Vec<(String, Arc<WriteBack>)> = Vec::new();
    for name in &names {
        // A snapshot (VOL@SNAP) is served read-only whatever the other exports are.
        let options =
            if name.contains('@') { OpenOptions { read_only: true, ..options } } else { options };
        let volume = match Volume::open(&client, name, options).await {
            Ok(volume) => volume,
            Err(error) => {
                for volume in &opened {
                    let _ = volume.close().await;
                }
                return Err(error).with_context(|| format!("cannot open volume '{name}'"));
            }
        };
        let size = volume.size();
        let export: Arc<dyn Export> = Arc::new(VolumeExport { volume: volume.clone(), size });
        let export = if args.write_back > 0 && !volume.read_only() {
            let cache = Arc::new(WriteBack::new(export, args.write_back, WRITE_BACK_IN_FLIGHT));
            // Before a snapshot, what the cache holds goes into the volume.
            volume.set_hold_writes(WriteBack::hold_hook(&cache));
            caches.push((name.clone(), cache.clone()));
            cache as Arc<dyn Export>
        } else {
            export
        };
        exports.push((name.clone(), export));
        opened.push(volume);
    }
    let exports: Arc<dyn Exports> = Arc::new(exports);
    let idle_timeout = (args.idle_timeout > 0).then(|| Duration::from_secs(args.idle_timeout));
    let limits =
        Limits { max_in_flight: args.queue_depth.max(1), idle_timeout, ..Limits::default() };
    let server = Arc::new(Server::new(limits).context("bad limits")?);
    let mut tasks = tokio::task::JoinSet::new();
    if let Err(error) = listen(&listeners, &names, &exports, &server, &mut tasks).await {
        drain(&caches).await;
        close(&opened).await;
        return Err(error);
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tasks.abort_all();
    drain(&caches).await;
    close(&opened).await;
    if let Some(path) = &listeners.socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Binds the listeners, prints what is served where, and starts taking connections.
async fn listen(
    listeners: &Listeners,
    names: &[String],
    exports: &Arc<dyn Exports>,
    server: &Arc<Server>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<()> {
    if let Some((addr, tcp)) = &listeners.tcp {
        let (access, scheme) = match tcp {
            Tcp::Plain => {
                tracing::warn!(
                    "serving NBD on {addr} without TLS or authentication (--insecure-plain-tcp): \
                     anyone who can connect reads and writes every volume served"
                );
                (Access::Open(exports.clone()), "nbd")
            }
            Tcp::Tls { cert, key, ca, keyring } => {
                let config = optio_tls::server_config(cert, key, Some(ca))
                    .context("cannot set up TLS for NBD")?;
                let authority = KeyringAuthority {
                    keyring: keyring.clone(),
                    exports: exports.clone(),
                    read_only: Arc::new(ReadOnlyExports(exports.clone())),
                };
                let tls = Tls { config: Arc::new(config), authorize: Arc::new(authority) };
                (Access::Tls(tls), "nbds")
            }
        };
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
            format!("cannot listen on {addr} (another server there? pick another with --listen)")
        })?;
        let local = listener.local_addr()?;
        for name in names {
            println!("serving {scheme}://{local}/{name}");
        }
        tasks.spawn(optio_nbd::listen::run(server.clone(), listener, Arc::new(access)));
    }
    if let Some(path) = &listeners.socket {
        let socket = optio_nbd::UnixSocket::bind(path)
            .context("cannot listen on the NBD socket (--socket PATH to choose another)")?;
        for name in names {
            println!("serving nbd+unix:///{name}?socket={}", path.display());
        }
        let access = Arc::new(Access::Open(exports.clone()));
        tasks.spawn(optio_nbd::listen::run(server.clone(), socket, access));
    }
    Ok(())
}

/// How long a stopping `optio nbd` keeps trying to write its write-back caches.
const DRAIN_PATIENCE: Duration = Duration::from_secs(60);

/// Writes what the write-back caches hold into their volumes (before they are closed),
/// trying again for up to [`DRAIN_PATIENCE`] while the servers refuse (the cache retries
/// each write-back itself); a lost lock ends it at once.
async fn drain(caches: &[(String, Arc<WriteBack>)]) {
    let deadline = tokio::time::Instant::now() + DRAIN_PATIENCE;
    for (name, cache) in caches {
        let dirty = cache.dirty_bytes();
        loop {
            let error = match cache.drain().await {
                Ok(()) => {
                    tracing::info!(volume = %name, bytes = dirty, "write-back cache written");
                    break;
                }
                Err(error) => error,
            };
            let fatal = matches!(error, Errno::Perm | Errno::Shutdown);
            if fatal || tokio::time::Instant::now() >= deadline {
                tracing::error!(
                    volume = %name,
                    bytes = cache.dirty_bytes(),
                    "cannot write the write-back cache into the volume ({}); the writes it \
                     acknowledged and no FLUSH covered are lost",
                    error.message()
                );
                break;
            }
            tracing::warn!(
                volume = %name,
                bytes = cache.dirty_bytes(),
                "writing the write-back cache: {}; trying again",
                error.message()
            );
        }
    }
}

/// `--write-back`'s size.
fn parse_cache_size(text: &str) -> Result<u64, String> {
    crate::output::parse_size(text).map_err(|error| {
        format!("{error} (the write-back cache's size per volume, e.g. 32MiB; 0 turns it off)")
    })
}

/// Flushes and closes the volumes (releasing their locks), logging what each did.
async fn close(opened: &[Arc<Volume>]) {
    for volume in opened {
        let (reads, local) = volume.object_reads();
        tracing::info!(
            volume = %volume.name(),
            object_reads = reads,
            local_reads = local,
            writes = volume.writes(),
            "closing"
        );
        if let Err(error) = volume.close().await {
            tracing::warn!(volume = %volume.name(), "cannot close cleanly: {error}");
        }
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
