//! A real etcd for tests: Debian's `etcd` binary (package `etcd-server`) on free loopback
//! ports with a fresh data directory, stopped when dropped.
//!
//! Nothing here is a fake: tests of the etcd map source, and of anything built on it in other
//! crates, run against the real server. Use it like this:
//!
//! ```no_run
//! use optio_local::etcd::{EtcdServer, etcd_available};
//!
//! if !etcd_available() {
//!     return; // skipped with a message (but under CI=true, etcd_available panics instead)
//! }
//! let etcd = EtcdServer::start().expect("etcd starts");
//! let source = optio_cluster::MapSource::parse(&etcd.url()).expect("an etcd source");
//! ```
//!
//! A test that wants a prefix of its own appends it: `format!("{}/mine", etcd.url())`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// The etcd binary looked up on `PATH`.
pub const ETCD_BINARY: &str = "etcd";
/// How long etcd may take to answer `/health` after it was started.
pub const ETCD_START_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause between two polls of `/health`.
const HEALTH_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How long one `/health` request may take.
const HEALTH_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// How many times a start is tried with other ports when a port was taken meanwhile.
const START_ATTEMPTS_MAX: u32 = 3;
/// How many lines of etcd's log an error quotes.
const LOG_LINES_QUOTED: usize = 5;

/// Distinguishes the directories of several servers started by one process.
static SERVER_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Whether Debian's `etcd` is installed. When it is not: under `CI=true` this panics ("install
/// Debian's etcd-server"), so that a CI run cannot silently skip the etcd tests; otherwise it
/// prints that the test is skipped and returns `false`.
pub fn etcd_available() -> bool {
    if etcd_binary().is_some() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("etcd is required when CI=true: install Debian's etcd-server");
    }
    eprintln!("skipping: etcd not found (install Debian's etcd-server to run this test)");
    false
}

fn etcd_binary() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|dir| dir.join(ETCD_BINARY)).find(|p| p.is_file())
    })
}

/// A single-member etcd on loopback, with its data in a temporary directory (removed when it
/// is dropped) — or, for `optio up --etcd`, in a directory of the cluster's (kept).
#[derive(Debug)]
pub struct EtcdServer {
    binary: PathBuf,
    dir: PathBuf,
    keep_dir: bool,
    client_port: u16,
    peer_port: u16,
    /// Plain HTTP `/health` and `/metrics` (etcd's `--listen-metrics-urls`), for a TLS etcd.
    metrics_port: u16,
    options: EtcdOptions,
    child: Option<Child>,
}

/// How a test etcd differs from the default.
#[derive(Clone, Debug, Default)]
pub struct EtcdOptions {
    /// TLS on the client port.
    pub tls: Option<EtcdTls>,
    /// How long an authentication token lives unused (`--auth-token-ttl`, seconds).
    pub auth_token_ttl: Option<u32>,
}

/// TLS for a test etcd's client port.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    /// Its certificate (PEM), valid for 127.0.0.1.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA whose client certificates it takes (`--trusted-ca-file`).
    pub ca: PathBuf,
    /// Whether a client must show a certificate (`--client-cert-auth`).
    pub client_cert_auth: bool,
}

/// Why an etcd could not be started or set up.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No etcd binary.
    #[error("etcd is not installed: install Debian's etcd-server (apt-get install etcd-server)")]
    NotInstalled,
    /// A file, port or process could not be made.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The process exited while starting (its log's end quoted).
    #[error("etcd exited ({status}) while starting; {log}")]
    Exited {
        /// How it exited.
        status: std::process::ExitStatus,
        /// The end of its log.
        log: String,
    },
    /// It did not answer `/health` in time (its log's end quoted).
    #[error("etcd did not become healthy within {limit:?}; {log}")]
    Unhealthy {
        /// How long it was given.
        limit: Duration,
        /// The end of its log.
        log: String,
    },
    /// An administrative call was refused or failed.
    #[error("etcd {operation}: {reason}")]
    Call {
        /// The call (`auth/user/add`).
        operation: String,
        /// Its answer's status line, or why there was none.
        reason: String,
    },
    /// What this fixture does not do.
    #[error("{0}")]
    Unsupported(&'static str),
}

impl EtcdError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EtcdError {
        let what = what.into();
        move |source| EtcdError::Io { what, source }
    }

    /// Whether etcd could not bind a port another process took meanwhile.
    fn address_in_use(&self) -> bool {
        matches!(self, EtcdError::Exited { log, .. } if log.contains("address already in use"))
    }
}

impl EtcdServer {
    /// Starts etcd on two free loopback ports (client and peer) with a fresh data directory
    /// and waits until `/health` says it is healthy (at most [`ETCD_START_TIMEOUT`]). Its
    /// output goes to `etcd.log` in its directory, quoted in errors.
    pub fn start() -> Result<EtcdServer, EtcdError> {
        EtcdServer::start_with(EtcdOptions::default())
    }

    /// Starts etcd as [`start`](Self::start) does, with `options` (over TLS, its `/health` is
    /// on a plain metrics port).
    pub fn start_with(options: EtcdOptions) -> Result<EtcdServer, EtcdError> {
        let unique = SERVER_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir()
            .join(format!("optio-etcd-{}-{unique}-{nanos}", std::process::id()));
        EtcdServer::start_at(dir, false, options)
    }

    /// Starts etcd as [`start`](Self::start) does, with its data in `dir` (created if needed,
    /// kept when the server is dropped): `optio up --etcd` runs its cluster's etcd this way.
    pub fn start_in(dir: &Path) -> Result<EtcdServer, EtcdError> {
        EtcdServer::start_at(dir.to_path_buf(), true, EtcdOptions::default())
    }

    fn start_at(
        dir: PathBuf,
        keep_dir: bool,
        options: EtcdOptions,
    ) -> Result<EtcdServer, EtcdError> {
        let binary = etcd_binary().ok_or(EtcdError::NotInstalled)?;
        std::fs::create_dir_all(&dir)
            .map_err(EtcdError::io(format!("cannot create {}", dir.display())))?;
        let mut server = EtcdServer {
            binary,
            dir,
            keep_dir,
            client_port: 0,
            peer_port: 0,
            metrics_port: 0,
            options,
            child: None,
        };
        // A port found free can be taken by someone else before etcd binds it: try others.
        let mut attempt = 1;
        loop {
            server.client_port = free_port()?;
            server.peer_port = free_port()?;
            server.metrics_port = free_port()?;
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(error) if attempt < START_ATTEMPTS_MAX && error.address_in_use() => {
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// `etcd://127.0.0.1:PORT` (`etcds://` over TLS), a [`optio_cluster::MapSource`] spec
    /// (default prefix).
    pub fn url(&self) -> String {
        let scheme = match self.options.tls {
            None => optio_cluster::etcd::SCHEME,
            Some(_) => optio_cluster::etcd::TLS_SCHEME,
        };
        format!("{scheme}127.0.0.1:{}", self.client_port)
    }

    /// `http://127.0.0.1:PORT` (`https://` over TLS), etcd's client endpoint.
    pub fn endpoint(&self) -> String {
        let scheme = if self.options.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The data and log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// etcd's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Whether the process runs (it was started and not stopped).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills etcd (SIGKILL, as a crash) and waits for it; the data directory stays.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops etcd if it runs and starts it again with the same data directory and ports.
    pub fn restart(&mut self) -> Result<(), EtcdError> {
        self.stop();
        self.launch()
    }

    /// Adds `users` (each with a role of its name) and turns etcd's authentication on, through
    /// the gateway on a plain client port (a TLS etcd: not supported here). A user named `root`
    /// must be among them (etcd's rule).
    pub fn enable_auth(&self, users: &[EtcdUser]) -> Result<(), EtcdError> {
        if self.options.tls.is_some() {
            return Err(EtcdError::Unsupported("enable_auth needs a plain client port"));
        }
        let call = |operation: &str, body: serde_json::Value| -> Result<(), EtcdError> {
            let body = body.to_string();
            let request = format!(
                "POST /v3/{operation} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let failed = |reason: String| EtcdError::Call { operation: operation.into(), reason };
            let answer =
                plain_request(self.client_port, &request).map_err(|e| failed(e.to_string()))?;
            match answer.lines().next() {
                Some(status) if status.contains(" 200 ") => Ok(()),
                status => Err(failed(status.unwrap_or("no answer").to_string())),
            }
        };
        use base64::Engine as _;
        let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        for user in users {
            let name = &user.name;
            call("auth/user/add", serde_json::json!({"name": name, "password": user.password}))?;
            call("auth/role/add", serde_json::json!({"name": name}))?;
            call("auth/user/grant", serde_json::json!({"user": name, "role": name}))?;
            if let Some(prefix) = &user.prefix {
                let mut end = prefix.clone().into_bytes();
                if let Some(last) = end.last_mut() {
                    *last += 1;
                }
                let end = String::from_utf8(end)
                    .map_err(|_| EtcdError::Unsupported("a user's prefix must be ASCII"))?;
                let permission = serde_json::json!({
                    "name": name,
                    "perm": {"permType": "READWRITE", "key": encode(prefix), "range_end": encode(&end)}
                });
                call("auth/role/grant", permission)?;
            }
        }
        call("auth/enable", serde_json::json!({}))
    }

    fn launch(&mut self) -> Result<(), EtcdError> {
        let log_path = self.log_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(EtcdError::io(format!("cannot open {}", log_path.display())))?;
        let log_err = log
            .try_clone()
            .map_err(EtcdError::io(format!("cannot open {}", log_path.display())))?;
        let client_url = self.endpoint();
        let peer_url = format!("http://127.0.0.1:{}", self.peer_port);
        let name = "optio-test";
        let mut command = Command::new(&self.binary);
        if let Some(ttl) = self.options.auth_token_ttl {
            command.arg("--auth-token-ttl").arg(ttl.to_string());
        }
        if let Some(tls) = &self.options.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--listen-metrics-urls")
                .arg(format!("http://127.0.0.1:{}", self.metrics_port));
            if tls.client_cert_auth {
                command.arg("--client-cert-auth");
            }
        }
        let child = command
            .arg("--name")
            .arg(name)
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(format!("{name}={peer_url}"))
            .arg("--max-request-bytes")
            .arg(optio_cluster::etcd::ETCD_REQUEST_BYTES.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .map_err(EtcdError::io(format!("cannot start {}", self.binary.display())))?;
        self.child = Some(child);
        self.wait_healthy()
    }

    /// Polls `/health` until it says `"health":"true"`, the process exits, or the deadline.
    fn wait_healthy(&mut self) -> Result<(), EtcdError> {
        let deadline = Instant::now() + ETCD_START_TIMEOUT;
        loop {
            let port =
                if self.options.tls.is_some() { self.metrics_port } else { self.client_port };
            if health(port) {
                return Ok(());
            }
            let exited = match self.child.as_mut() {
                Some(child) => child.try_wait().ok().flatten(),
                None => None,
            };
            if let Some(status) = exited {
                self.child = None;
                return Err(EtcdError::Exited { status, log: self.log_tail() });
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(EtcdError::Unhealthy {
                    limit: ETCD_START_TIMEOUT,
                    log: self.log_tail(),
                });
            }
            std::thread::sleep(HEALTH_POLL_INTERVAL);
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let mut tail: Vec<&str> = log.lines().rev().take(LOG_LINES_QUOTED).collect();
        tail.reverse();
        format!("its log {} ends with: {}", self.log_path().display(), tail.join(" | "))
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A loopback port free right now (the listener is closed before etcd binds it).
fn free_port() -> Result<u16, EtcdError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(EtcdError::io("cannot find a free port"))?;
    listener.local_addr().map(|a| a.port()).map_err(EtcdError::io("cannot find a free port"))
}

/// Whether etcd on `port` answers `/health` with `"health":"true"` (plain HTTP/1.0).
fn health(port: u16) -> bool {
    let answer = plain_request(port, "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    answer.is_ok_and(|a| a.replace(' ', "").contains("\"health\":\"true\""))
}

/// One plain HTTP/1.0 exchange with etcd on `port`: the whole answer.
fn plain_request(port: u16, request: &str) -> std::io::Result<String> {
    let addr = (Ipv4Addr::LOCALHOST, port).into();
    let mut stream = TcpStream::connect_timeout(&addr, HEALTH_REQUEST_TIMEOUT)?;
    stream.set_read_timeout(Some(HEALTH_REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(HEALTH_REQUEST_TIMEOUT))?;
    stream.write_all(request.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// An etcd user for [`EtcdServer::enable_auth`].
#[derive(Clone, Debug)]
pub struct EtcdUser {
    /// Its name.
    pub name: String,
    /// Its password.
    pub password: String,
    /// The key prefix it may read and write (`/optio/`: the keys from there to the prefix's
    /// end); `None`: everything (etcd's `root` role).
    pub prefix: Option<String>,
}
