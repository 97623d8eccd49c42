//! The local socket: a Unix socket where clients on this machine ask for open, read-only
//! descriptors of block objects' files (local reads, see [`optio_net::local`]).
//!
//! A connection carries frames, one request at a time. Each request is an ordinary signed
//! request, run through the same router as any other — authentication and capabilities,
//! epochs, fencing, a device catching up refuses — and only opens (`GET` with
//! [`wire::OPEN`]) are taken: anything else (a `PUT` or `DELETE` carrying the header too) is
//! refused with an error answer. The socket is open to the server's user and group only. An open's answer
//! carries the descriptor with its first bytes. A connection that breaks the protocol, stays
//! silent for the idle timeout, or is over [`LOCAL_CONNECTIONS_MAX`] is closed; when the
//! server stops, each connection finishes the request it is serving.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use optio_proto::frames::HEAD_BYTES_MAX;
use optio_proto::request as device;
use optio_proto::wire;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};

use super::frames::{Context, Refusal, answer, build_request, refusal};
use super::{Limits, LocalPeer, Predecoded};

/// The local socket's mode: read-write for the server's user and group (run `optio nbd` as
/// that user, or in that group), nothing for others.
pub const LOCAL_SOCKET_MODE: u32 = 0o660;

/// Most connections to the local socket at once (a client keeps one per server).
pub const LOCAL_CONNECTIONS_MAX: usize = 256;

/// Why the local socket cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LocalSocketError {
    /// The path is taken by something that is not a socket.
    #[error("{0} exists and is not a socket: remove it or choose another --local-socket")]
    NotASocket(PathBuf),
    /// Another process serves the path.
    #[error("{0} is served by another process (a server already runs with this --local-socket)")]
    InUse(PathBuf),
    /// Binding failed.
    #[error("cannot listen on the local socket {path}: {source}")]
    Bind {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Binds the local socket at `path`, taking over a socket file a dead server left there, with
/// mode [`LOCAL_SOCKET_MODE`]: the server's user and group connect (each request is also
/// authenticated on its own, as over TCP), other users cannot.
pub fn bind(path: &Path) -> Result<UnixListener, LocalSocketError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let bind_error = |source| LocalSocketError::Bind { path: path.to_path_buf(), source };
    if let Ok(metadata) = std::fs::symlink_metadata(path) {
        if !metadata.file_type().is_socket() {
            return Err(LocalSocketError::NotASocket(path.to_path_buf()));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(LocalSocketError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(bind_error)?;
    }
    let listener = UnixListener::bind(path).map_err(bind_error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(LOCAL_SOCKET_MODE))
        .map_err(bind_error)?;
    Ok(listener)
}

/// Serves `router`'s opens on `listener` until `stopping` turns true.
pub(crate) async fn serve(
    listener: UnixListener,
    router: Router,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(LOCAL_CONNECTIONS_MAX));
    let mut connections = tokio::task::JoinSet::new();
    let mut accept_errors = optio_net::listen::AcceptErrors::new("local connection");
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    accept_errors.succeeded();
                    stream
                }
                Err(error) => {
                    let pause = accept_errors.failed(&error, tokio::time::Instant::now());
                    tokio::time::sleep(pause).await;
                    continue;
                }
            },
            changed = stopping.changed() => {
                if changed.is_err() || *stopping.borrow() {
                    break;
                }
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(
                max = LOCAL_CONNECTIONS_MAX,
                "local connection refused: the local socket has its most connections"
            );
            continue;
        };
        while connections.try_join_next().is_some() {}
        let router = router.clone();
        let stopping = stopping.clone();
        connections.spawn(async move {
            serve_connection(stream, router, limits, stopping).await;
            drop(permit);
        });
    }
    // Each connection ends after the request it is serving.
    while connections.join_next().await.is_some() {}
}

async fn serve_connection(
    stream: UnixStream,
    router: Router,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
) {
    let context = Context { router: router.clone(), channel: Default::default() };
    loop {
        let received = tokio::select! {
            received = tokio::time::timeout(
                limits.idle_timeout,
                optio_net::local::recv_frame(&stream, HEAD_BYTES_MAX),
            ) => received,
            _ = stopping.changed() => return,
        };
        // (Descriptors a client sent are closed as `_fds` drops.)
        let (head, body, _fds) = match received {
            Ok(Ok(Some(frame))) => frame,
            Ok(Ok(None)) => return,
            Ok(Err(error)) => {
                tracing::warn!(%error, "a local client broke the frames protocol: disconnected");
                return;
            }
            Err(_) => return, // idle for the idle timeout
        };
        let (frame, file) = match build_request(&head, body, &context) {
            Ok((id, mut request)) => {
                // Decoded here as the adapter would (which then does not decode it again).
                let path_and_query =
                    request.uri().path_and_query().map_or(request.uri().path(), |p| p.as_str());
                let decoded =
                    device::Request::decode(request.method().as_str(), path_and_query, |name| {
                        request.headers().get(name).map(|value| value.as_bytes())
                    });
                if let Ok(open @ device::Request { op: device::Op::Open { .. }, .. }) = decoded {
                    request.extensions_mut().insert(LocalPeer);
                    request.extensions_mut().insert(Predecoded(open));
                    let (frame, file) = answer(router.clone(), id, request).await;
                    (frame.into_vec(), file)
                } else {
                    let reason = format!("the local socket takes opens only ({})", wire::OPEN);
                    (refusal(id, &reason), None)
                }
            }
            Err(Refusal::Request { id, reason }) => (refusal(id, &reason), None),
            Err(Refusal::Protocol(error)) => {
                tracing::warn!(%error, "a local client broke the frames protocol: disconnected");
                return;
            }
        };
        let fd = file.as_ref().map(|f| f.0.as_fd());
        if let Err(error) = optio_net::local::send_frame(&stream, &frame, fd).await {
            tracing::debug!(%error, "cannot answer a local client");
            return;
        }
    }
}
