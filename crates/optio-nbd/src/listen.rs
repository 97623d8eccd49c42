//! Taking connections: the accept loop shared by TCP and Unix sockets, with the server's
//! connection limit, a pause after accept errors (out of descriptors: `EMFILE`) instead of a
//! spin, and logging that a flood of bad clients cannot turn into a flood of lines.
//!
//! A Unix socket ([`UnixSocket::bind`]) is made mode 0600, and a connection from any user but
//! the socket's owner (or root) is closed at once, which also covers the instant between
//! `bind` and `chmod`.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};

use crate::server::{Access, NbdError, Server};

/// The pause after an accept error other than one connection's own (out of descriptors, out
/// of memory): the loop does not spin, and the connection waiting in the backlog is taken
/// once descriptors are free again.
pub const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// Lines of one kind logged per [`LOG_WINDOW`]; the rest are counted and the count logged
/// with the next line let through.
pub const LOG_LINES_PER_WINDOW: u32 = 10;
/// The window of [`LOG_LINES_PER_WINDOW`].
pub const LOG_WINDOW: Duration = Duration::from_secs(10);

/// What connections come from.
pub trait Listener: Send + Sync + 'static {
    /// A connection.
    type Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static;
    /// The next connection and who it is from (for the log).
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Stream, String)>> + Send;
}

impl Listener for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;

    async fn accept(&self) -> io::Result<(Self::Stream, String)> {
        let (stream, peer) = tokio::net::TcpListener::accept(self).await?;
        // Replies go out at once: Nagle's algorithm would hold a small one back.
        let _ = stream.set_nodelay(true);
        Ok((stream, peer.to_string()))
    }
}

/// A Unix socket only its owner (and root) may use.
pub struct UnixSocket {
    listener: tokio::net::UnixListener,
    path: PathBuf,
    owner_uid: u32,
    refusals: LogLimit,
}

/// Why a Unix socket cannot be listened on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SocketError {
    /// Something that is not a socket is at the path.
    #[error("{0} exists and is not a socket: remove it or choose another path")]
    NotASocket(PathBuf),
    /// A live server listens there.
    #[error(
        "{0} is served by another process (another optio nbd?): stop it or choose another path"
    )]
    InUse(PathBuf),
    /// Binding, or setting its mode, failed.
    #[error("cannot listen on {path}: {source}")]
    Bind {
        /// The path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl UnixSocket {
    /// Listens at `path` (mode 0600), taking over a socket file a dead server left there;
    /// anything else at the path, or a socket a live server answers on, is refused.
    pub fn bind(path: &Path) -> Result<UnixSocket, SocketError> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
        let bind_error = |source| SocketError::Bind { path: path.to_path_buf(), source };
        if let Ok(metadata) = std::fs::symlink_metadata(path) {
            if !metadata.file_type().is_socket() {
                return Err(SocketError::NotASocket(path.to_path_buf()));
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(SocketError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(bind_error)?;
        }
        let listener = tokio::net::UnixListener::bind(path).map_err(bind_error)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(bind_error)?;
        let owner_uid = std::fs::metadata(path).map_err(bind_error)?.uid();
        Ok(UnixSocket { listener, path: path.to_path_buf(), owner_uid, refusals: LogLimit::new() })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Listener for UnixSocket {
    type Stream = tokio::net::UnixStream;

    async fn accept(&self) -> io::Result<(Self::Stream, String)> {
        loop {
            let (stream, _) = self.listener.accept().await?;
            // Mode 0600 keeps others out; this also covers a connection made in the instant
            // between bind and chmod.
            let uid = stream.peer_cred().map(|c| c.uid()).ok();
            if uid.is_some_and(|uid| uid == self.owner_uid || uid == 0) {
                return Ok((stream, format!("uid {}", uid.unwrap_or_default())));
            }
            if let Some(skipped) = self.refusals.allow() {
                tracing::warn!(
                    socket = %self.path.display(),
                    ?uid,
                    skipped,
                    "NBD connection refused: only the socket's owner may connect"
                );
            }
        }
    }
}

/// At most [`LOG_LINES_PER_WINDOW`] lines per [`LOG_WINDOW`].
pub(crate) struct LogLimit {
    /// Start of the window, lines let through in it, lines held back since the last one let
    /// through.
    state: Mutex<(Instant, u32, u64)>,
}

impl LogLimit {
    pub(crate) fn new() -> LogLimit {
        LogLimit { state: Mutex::new((Instant::now(), 0, 0)) }
    }

    /// `Some(lines held back before this one)` if this line may be logged.
    pub(crate) fn allow(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (start, count, held_back) = &mut *state;
        if start.elapsed() >= LOG_WINDOW {
            *start = Instant::now();
            *count = 0;
        }
        if *count >= LOG_LINES_PER_WINDOW {
            *held_back += 1;
            return None;
        }
        *count += 1;
        Some(std::mem::take(held_back))
    }
}

/// Errors about one connection only (the accept loop goes on at once).
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// Takes connections from `listener` for ever and serves each with `server` and `access` on a
/// task of its own: at most the server's `max_connections` at once (more are closed as they
/// come); after an accept error, a pause of [`ACCEPT_ERROR_PAUSE`].
pub async fn run<L: Listener>(server: Arc<Server>, listener: L, access: Arc<Access>) {
    let accept_errors = LogLimit::new();
    let over_limit = LogLimit::new();
    let ended = Arc::new(LogLimit::new());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                if let Some(skipped) = accept_errors.allow() {
                    tracing::warn!(
                        %error,
                        skipped,
                        "cannot accept an NBD connection; pausing {ACCEPT_ERROR_PAUSE:?}"
                    );
                }
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let Ok(permit) = server.connections.clone().try_acquire_owned() else {
            if let Some(skipped) = over_limit.allow() {
                tracing::warn!(
                    %peer,
                    max = server.limits().max_connections,
                    skipped,
                    "NBD connection refused: the server has its most connections"
                );
            }
            continue;
        };
        let server = server.clone();
        let access = access.clone();
        let ended = ended.clone();
        tokio::spawn(async move {
            match server.serve(stream, &access).await {
                Ok(()) => {}
                Err(error @ NbdError::Idle(_)) => {
                    tracing::debug!(%peer, "NBD connection ended: {error}")
                }
                Err(error) => {
                    if let Some(skipped) = ended.allow() {
                        tracing::warn!(%peer, skipped, "NBD connection ended: {error}");
                    }
                }
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A listener out of descriptors: every accept fails with `EMFILE`, `failures` times, then
    /// no connection ever comes.
    struct Exhausted {
        accepts: Arc<AtomicUsize>,
        failures: usize,
    }

    impl Listener for Exhausted {
        type Stream = tokio::io::DuplexStream;

        async fn accept(&self) -> io::Result<(Self::Stream, String)> {
            if self.accepts.fetch_add(1, Ordering::SeqCst) < self.failures {
                return Err(io::Error::from_raw_os_error(24)); // EMFILE
            }
            std::future::pending().await
        }
    }

    /// Issue 36, item 4: `let Ok(..) = accept().await else { continue }` spun on EMFILE (the
    /// connection stays in the backlog, so every accept fails at once, for ever). Now each
    /// failure pauses: in one second of (paused, simulated) time, about ten accepts.
    #[tokio::test(start_paused = true)]
    async fn accept_errors_pause_the_loop_instead_of_spinning() {
        let accepts = Arc::new(AtomicUsize::new(0));
        let listener = Exhausted { accepts: accepts.clone(), failures: 1_000 };
        let server = Arc::new(Server::new(crate::Limits::default()).unwrap());
        let exports: Vec<(String, Arc<dyn crate::Export>)> = Vec::new();
        let access = Arc::new(Access::Open(Arc::new(exports)));
        let looping = tokio::spawn(run(server, listener, access));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let made = accepts.load(Ordering::SeqCst);
        looping.abort();
        let bound = (Duration::from_secs(1).as_millis() / ACCEPT_ERROR_PAUSE.as_millis()) as usize;
        assert!(made <= bound + 1, "{made} accepts in a second: the loop spins on EMFILE");
        assert!(made >= bound / 2, "{made} accepts in a second: the loop stopped trying");
    }

    #[test]
    fn log_lines_are_limited_per_window_and_the_rest_counted() {
        let limit = LogLimit::new();
        for _ in 0..LOG_LINES_PER_WINDOW {
            assert_eq!(limit.allow(), Some(0));
        }
        assert_eq!(limit.allow(), None);
        assert_eq!(limit.allow(), None);
        // A new window lets lines through again, the first with the count held back.
        limit.state.lock().unwrap().0 -= LOG_WINDOW;
        assert_eq!(limit.allow(), Some(2));
        assert_eq!(limit.allow(), Some(0));
    }
}
