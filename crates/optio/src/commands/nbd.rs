//! `optio nbd`: serves block volumes over the Network Block Device protocol (`optio-nbd`),
//! for fio (`--ioengine=nbd`), qemu (`nbd://`), qemu-img, nbdcopy, nbdfuse and the kernel.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use optio_client::ClientError;
use optio_client::volume::{self, OpenOptions, Volume, VolumeError};
use optio_nbd::{Errno, Export, Exports, IoFuture, Limits};

use crate::commands::client::ClusterConn;

/// `optio nbd`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Volumes to serve (default: every volume).
    pub volumes: Vec<String>,
    /// TCP address to listen on (the NBD port is 10809).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Unix socket to listen on (instead of, or as well as, --listen).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Serve the volumes read-only (no lock taken; others may write).
    #[arg(long)]
    pub read_only: bool,
    /// Take the volumes' locks even if another client holds them (one that is gone).
    #[arg(long)]
    pub break_lock: bool,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 64)]
    pub queue_depth: usize,
    /// Read every block through the servers, even where a replica's server runs on this
    /// machine. By default such reads go to the replica's file directly (its server hands
    /// over an open descriptor once per object; every read checks the file holds the version
    /// this writer last wrote, else reads through the servers; docs/volumes.md). Read-only
    /// serving never reads locally.
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
}

pub fn run(args: Args) -> Result<()> {
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
    for name in &names {
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
        exports.push((name.clone(), Arc::new(VolumeExport { volume: volume.clone(), size })));
        opened.push(volume);
    }
    let exports: Arc<dyn Exports> = Arc::new(exports);
    let limits = Limits { max_in_flight: args.queue_depth.max(1), ..Limits::default() };
    let listen = match (&args.listen, &args.socket) {
        (None, None) => Some("127.0.0.1:10809".to_string()),
        (listen, _) => listen.clone(),
    };
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(addr) = listen {
        let listener = tokio::net::TcpListener::bind(&addr).await.with_context(|| {
            format!("cannot listen on {addr} (another server there? pick another with --listen)")
        })?;
        let local = listener.local_addr()?;
        for name in &names {
            println!("serving nbd://{local}/{name}");
        }
        let exports = exports.clone();
        tasks.spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else { continue };
                let _ = stream.set_nodelay(true);
                let exports = exports.clone();
                tokio::spawn(async move {
                    if let Err(error) = optio_nbd::serve(stream, exports, limits).await {
                        tracing::warn!(%peer, "NBD connection ended: {error}");
                    }
                });
            }
        });
    }
    if let Some(path) = &args.socket {
        let _ = std::fs::remove_file(path);
        let listener = tokio::net::UnixListener::bind(path)
            .with_context(|| format!("cannot listen on {}", path.display()))?;
        for name in &names {
            println!("serving nbd+unix:///{name}?socket={}", path.display());
        }
        let exports = exports.clone();
        tasks.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let exports = exports.clone();
                tokio::spawn(async move {
                    if let Err(error) = optio_nbd::serve(stream, exports, limits).await {
                        tracing::warn!("NBD connection ended: {error}");
                    }
                });
            }
        });
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tasks.abort_all();
    for volume in &opened {
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
    if let Some(path) = &args.socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}
