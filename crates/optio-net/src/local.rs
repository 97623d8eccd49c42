//! Local reads: a client on the same machine as a server asks it, over the server's Unix
//! socket, for an open read-only descriptor of a block object's file, and then reads the file
//! itself — no request, no server process woken, per read (as HDFS's short-circuit reads do).
//!
//! The socket speaks frames ([`optio_proto::frames`]), one request at a time per connection,
//! each an ordinary signed request run through the server's router (authentication, epochs,
//! a device that is catching up refuses); an [`Op::Open`](crate::Op::Open) answer carries the
//! descriptor as `SCM_RIGHTS` ancillary data on its first bytes. Whether what the client reads
//! through the descriptor is current is the reader's business: it compares the file's header
//! version with the version it expects on every read (`optio-client`'s `local` module).
//!
//! This module holds the descriptor passing for both sides ([`send_frame`], [`recv_frame`])
//! and the client's connections ([`Locals`]).

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use optio_proto::frames::{self, PREFIX_BYTES};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use tokio::io::Interest;
use tokio::net::UnixStream;

use crate::failure::Failure;

/// Most descriptors taken from one message (an answer carries at most one; more are closed).
const FDS_PER_MESSAGE_MAX: usize = 4;
/// The largest answer frame a client reads from a local socket (an open's answer is headers
/// and, on an error, a short JSON body).
pub const LOCAL_ANSWER_BYTES_MAX: usize = 1 << 20;
/// How long a client waits for a local socket's answer.
pub const LOCAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Local sockets a client keeps connections to (past it the cache starts again).
const SOCKETS_KEPT: usize = 1024;

/// Sends `frame` on `stream`, `fd` (if any) with its first bytes.
pub async fn send_frame(
    stream: &UnixStream,
    frame: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    let mut sent = 0;
    let mut fd = fd;
    while sent < frame.len() {
        stream.writable().await?;
        let attempt = stream.try_io(Interest::WRITABLE, || {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            let fds;
            if let Some(fd) = fd {
                fds = [fd];
                let pushed = control.push(SendAncillaryMessage::ScmRights(&fds));
                debug_assert!(pushed, "the buffer has room for one descriptor");
            }
            rustix::net::sendmsg(
                stream,
                &[IoSlice::new(&frame[sent..])],
                &mut control,
                SendFlags::NOSIGNAL,
            )
            .map_err(std::io::Error::from)
        });
        match attempt {
            Ok(n) => {
                sent += n;
                // The descriptor went with the first bytes.
                fd = None;
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Reads some bytes into `buffer`, and the descriptors that came with them into `fds`;
/// 0 bytes: the peer closed the connection.
async fn recv_some(
    stream: &UnixStream,
    buffer: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> std::io::Result<usize> {
    loop {
        stream.readable().await?;
        let attempt = stream.try_io(Interest::READABLE, || {
            let mut space =
                [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MESSAGE_MAX))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut iov = [IoSliceMut::new(buffer)];
            let received =
                rustix::net::recvmsg(stream, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)
                    .map_err(std::io::Error::from)?;
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(received) = message {
                    fds.extend(received);
                }
            }
            Ok(received.bytes)
        });
        match attempt {
            Ok(n) => return Ok(n),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
}

/// One whole frame from `stream` — its head and body — and the descriptors that came with
/// it. `None`: the peer closed the connection before the frame began. Frames larger than
/// `limit` bytes, or more bytes than the frame, are errors (the connection is then unusable).
pub async fn recv_frame(
    stream: &UnixStream,
    limit: usize,
) -> std::io::Result<Option<(Vec<u8>, Bytes, Vec<OwnedFd>)>> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut fds = Vec::new();
    let mut prefix = [0u8; PREFIX_BYTES];
    let mut have = 0;
    while have < PREFIX_BYTES {
        let n = recv_some(stream, &mut prefix[have..], &mut fds).await?;
        if n == 0 {
            if have == 0 {
                return Ok(None);
            }
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        have += n;
    }
    let (head_len, body_len) = frames::decode_prefix(prefix).map_err(|e| invalid(e.to_string()))?;
    if head_len + body_len > limit {
        return Err(invalid(format!(
            "a frame of {} bytes is over this socket's limit of {limit}",
            head_len + body_len
        )));
    }
    let mut rest = vec![0u8; head_len + body_len];
    let mut have = 0;
    while have < rest.len() {
        let n = recv_some(stream, &mut rest[have..], &mut fds).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        have += n;
    }
    let body = Bytes::from(rest.split_off(head_len));
    Ok(Some((rest, body, fds)))
}

/// A client's connections to local sockets, one per socket, one request at a time on each
/// (opens are rare: one per object a reader holds open).
#[derive(Default)]
pub(crate) struct Locals {
    sockets: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<Option<UnixStream>>>>>,
}

impl std::fmt::Debug for Locals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.sockets.lock().map(|s| s.len()).unwrap_or(0);
        f.debug_struct("Locals").field("sockets", &open).finish()
    }
}

impl Locals {
    /// Sends `frame` (a request) to the local socket at `socket` and returns the answer's
    /// head, body and descriptors. A kept connection that turns out closed (the server
    /// restarted) is replaced once.
    pub(crate) async fn exchange(
        &self,
        socket: &Path,
        frame: &[u8],
    ) -> Result<(Vec<u8>, Bytes, Vec<OwnedFd>), Failure> {
        let slot = {
            let mut sockets = self.sockets.lock().expect("sockets lock");
            if sockets.len() >= SOCKETS_KEPT && !sockets.contains_key(socket) {
                sockets.clear();
            }
            sockets.entry(socket.to_path_buf()).or_default().clone()
        };
        let mut connection = slot.lock().await;
        let shown = socket.display();
        for attempt in 0..2 {
            let kept = connection.is_some();
            if connection.is_none() {
                let stream = UnixStream::connect(socket).await.map_err(|e| match e.kind() {
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => {
                        Failure::NotRunning(format!("local socket {shown}: {e}"))
                    }
                    _ => Failure::Unreachable(format!("local socket {shown}: {e}")),
                })?;
                *connection = Some(stream);
            }
            let stream = connection.as_ref().expect("connected above");
            let exchanged = tokio::time::timeout(LOCAL_TIMEOUT, async {
                send_frame(stream, frame, None).await?;
                recv_frame(stream, LOCAL_ANSWER_BYTES_MAX).await
            })
            .await;
            match exchanged {
                Ok(Ok(Some(answer))) => return Ok(answer),
                // Closed or broken under a kept connection: the server may have restarted.
                Ok(Ok(None)) | Ok(Err(_)) if kept && attempt == 0 => *connection = None,
                Ok(Ok(None)) => {
                    *connection = None;
                    return Err(Failure::Dropped(format!("local socket {shown}: closed")));
                }
                Ok(Err(error)) => {
                    *connection = None;
                    return Err(Failure::Dropped(format!("local socket {shown}: {error}")));
                }
                Err(_) => {
                    *connection = None;
                    return Err(Failure::Unreachable(format!(
                        "local socket {shown}: no answer within {} s",
                        LOCAL_TIMEOUT.as_secs()
                    )));
                }
            }
        }
        Err(Failure::Dropped(format!("local socket {shown}: closed twice")))
    }
}

/// This machine's boot id (`/proc/sys/kernel/random/boot_id`), which tells a server's local
/// socket (from its status) from a same-named path on another machine; none where the kernel
/// has none.
pub fn boot_id() -> Option<String> {
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let id = text.trim();
            (!id.is_empty()).then(|| id.to_string())
        })
        .clone()
}

/// The soft limit on open files (`RLIMIT_NOFILE`), from `/proc/self/limits`; `None` when
/// unknown or unlimited.
pub fn open_files_soft_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find_map(|line| line.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The single descriptor of an answer (extra ones are closed as they drop).
pub(crate) fn one_fd(mut fds: Vec<OwnedFd>) -> Option<OwnedFd> {
    (fds.len() == 1).then(|| fds.pop().expect("one descriptor"))
}

/// Whether `fd` is open (for tests).
#[cfg(test)]
fn is_open(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fstat(fd).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    #[tokio::test]
    async fn a_descriptor_travels_with_its_frame_and_reads_the_same_file() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"the file's bytes").unwrap();
        let mut frame = Vec::new();
        frames::encode_answer(&mut frame, 7, 200, [("x-a", "1")], 3).unwrap();
        frame.extend_from_slice(b"abc");
        send_frame(&a, &frame, Some(file.as_fd())).await.unwrap();
        let (head, body, fds) = recv_frame(&b, 1 << 10).await.unwrap().unwrap();
        let parsed = frames::decode_answer(&head).unwrap();
        assert_eq!((parsed.id, parsed.status, &body[..]), (7, 200, &b"abc"[..]));
        let fd = one_fd(fds).expect("one descriptor");
        assert!(is_open(fd.as_fd()));
        let mut received = std::fs::File::from(fd);
        received.rewind().unwrap();
        let mut read = String::new();
        received.read_to_string(&mut read).unwrap();
        assert_eq!(read, "the file's bytes");
    }

    #[tokio::test]
    async fn frames_without_descriptors_over_the_limit_or_cut_short_are_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut frame = Vec::new();
        frames::encode_answer(&mut frame, 1, 404, [], 0).unwrap();
        send_frame(&a, &frame, None).await.unwrap();
        let (_, _, fds) = recv_frame(&b, 1 << 10).await.unwrap().unwrap();
        assert!(fds.is_empty());
        assert!(one_fd(fds).is_none());

        let mut big = Vec::new();
        frames::encode_answer(&mut big, 2, 200, [], 4096).unwrap();
        big.resize(big.len() + 4096, 0);
        send_frame(&a, &big, None).await.unwrap();
        let error = recv_frame(&b, 1024).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData, "{error}");

        let (a, b) = UnixStream::pair().unwrap();
        let mut cut = Vec::new();
        frames::encode_answer(&mut cut, 3, 200, [], 10).unwrap();
        send_frame(&a, &cut, None).await.unwrap();
        drop(a);
        let error = recv_frame(&b, 1 << 10).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof);

        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(recv_frame(&b, 1 << 10).await.unwrap().is_none(), "closed before a frame");
    }

    #[test]
    fn the_boot_id_is_read_once_and_looks_like_one() {
        let id = boot_id().expect("Linux has a boot id");
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(boot_id(), Some(id));
    }
}
