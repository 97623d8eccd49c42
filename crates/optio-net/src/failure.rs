//! What can go wrong talking to a device ([`Failure`]), and the transport's timeouts: the
//! leaf the HTTP transport, frames and local reads all name (so that they do not name the
//! crate's root, which names them).

use std::time::Duration;

use optio_proto::{ErrorKind, ObjectVersion};

/// Connect timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Whole-request timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an idle pooled connection is kept: below a server's default idle timeout (60 s),
/// so that the client closes an idle connection before the server does and never sends a
/// request on a connection the server is closing.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(50);
/// Timeout of a status request.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// What went wrong talking to a device.
#[derive(Clone, Debug)]
pub enum Failure {
    /// No answer (reset, timeout, no route): the server may be running and may even have
    /// applied the request.
    Unreachable(String),
    /// Nothing listens at the address (the connection was refused): the server is not
    /// running, so it applied nothing, and when it runs again it catches up on what it missed
    /// before serving reads.
    NotRunning(String),
    /// The connection broke under the request (reset, closed): typically a pooled connection
    /// to a server that died; the request may or may not have been applied, and sending it
    /// again takes a fresh connection.
    Dropped(String),
    /// An answer that does not say what Optio's answers say (a malformed header or body).
    Malformed(String),
    /// An error answer.
    Refused {
        /// Kind.
        kind: ErrorKind,
        /// Reason.
        reason: String,
        /// The server's epoch.
        epoch: Option<u64>,
        /// On `version-conflict`: the version the device holds.
        stored: Option<ObjectVersion>,
    },
}

impl std::error::Error for Failure {}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unreachable(reason) => write!(f, "unreachable ({reason})"),
            Failure::NotRunning(reason) => write!(f, "not running ({reason})"),
            Failure::Dropped(reason) => write!(f, "connection dropped ({reason})"),
            Failure::Malformed(reason) => write!(f, "{reason}"),
            Failure::Refused { kind, reason, .. } => write!(f, "{}: {reason}", kind.name()),
        }
    }
}

impl Failure {
    /// What an I/O error of kind `kind` on the way to a server says of it, as the failure's
    /// constructor: refused, it is not running; reset, aborted, a broken pipe or a stream cut
    /// short, the connection broke (the server went away under it: sent again on a new
    /// connection, which finds out which); `None` for any other error.
    pub fn of_io(kind: std::io::ErrorKind) -> Option<fn(String) -> Failure> {
        use std::io::ErrorKind as Io;
        match kind {
            Io::ConnectionRefused => Some(Failure::NotRunning),
            Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe | Io::UnexpectedEof => {
                Some(Failure::Dropped)
            }
            _ => None,
        }
    }

    /// The error kind, for refusals.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Failure::Refused { kind, .. } => Some(*kind),
            Failure::Unreachable(_)
            | Failure::NotRunning(_)
            | Failure::Dropped(_)
            | Failure::Malformed(_) => None,
        }
    }

    /// Whether the server is known to have applied nothing and to catch up before it serves
    /// again — its connection was refused (not running), or it answered `fenced` (it lost
    /// its lease): a replica a write may go around.
    pub fn is_not_running(&self) -> bool {
        matches!(self, Failure::NotRunning(_) | Failure::Refused { kind: ErrorKind::Fenced, .. })
    }

    /// On a version conflict, the version the device holds.
    pub fn stored_version(&self) -> Option<ObjectVersion> {
        match self {
            Failure::Refused { stored, .. } => *stored,
            _ => None,
        }
    }

    /// Whether the device did not answer at all (not running, unreachable, or the connection
    /// dropped).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Failure::Unreachable(_) | Failure::NotRunning(_) | Failure::Dropped(_))
    }

    /// Whether the connection broke under the request (worth sending again at once: the next
    /// attempt takes another connection).
    pub fn is_dropped(&self) -> bool {
        matches!(self, Failure::Dropped(_))
    }
}
