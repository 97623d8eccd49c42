//! A real Redis for tests: Debian's `redis-server` on a free loopback port with a temporary
//! directory, stopped (or killed) by the test.
//!
//! ```no_run
//! use optio_local::redis::{RedisServer, redis_available};
//! if redis_available() {
//!     let mut redis = RedisServer::start().expect("redis-server starts");
//!     println!("{}", redis.url());
//!     redis.restart().expect("it comes back with its data");
//! }
//! ```

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Redis server binary.
pub const REDIS_SERVER: &str = "redis-server";
/// How long a starting server may take to answer PING.
pub const REDIS_START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a stopping server may take to exit before it is killed.
pub const REDIS_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many free ports `start` tries (another process may take the port first).
const START_ATTEMPTS_MAX: u32 = 3;
/// Pause between two polls of a condition (a bounded wait, not a synchronisation).
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// The server's log file in its directory.
const LOG_FILE: &str = "redis.log";

/// Whether `redis-server` is installed (it answers `--version`).
pub fn redis_installed() -> bool {
    Command::new(REDIS_SERVER)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Whether `redis-server` is installed. When it is not: under `CI=true` this panics (CI must
/// test Redis: install Debian's `redis-server`); otherwise it prints that the test is skipped
/// and returns `false`.
pub fn redis_available() -> bool {
    if redis_installed() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!(
            "`{REDIS_SERVER}` is not installed and CI=true: install Debian's redis-server \
             (`apt-get install -y redis-server`; scripts/test.sh does it)"
        );
    }
    eprintln!(
        "skipping: `{REDIS_SERVER}` is not installed (apt-get install -y redis-server to run \
         this test)"
    );
    false
}

/// A `redis-server` process owned by a test; killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// An address it listens on besides loopback (the one [`url`](Self::url) names).
    address: Option<Ipv4Addr>,
    dir: tempfile::TempDir,
    password: Option<String>,
    /// TLS, on a port of its own beside the plain one (which this harness keeps for its PING
    /// and SHUTDOWN).
    tls: Option<(RedisTls, u16)>,
}

/// TLS for a test Redis (`--tls-port`).
#[derive(Clone, Debug)]
pub struct RedisTls {
    /// Its certificate (PEM), valid for 127.0.0.1.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA whose client certificates it takes.
    pub ca: PathBuf,
    /// Whether a client must show a certificate (`--tls-auth-clients yes`).
    pub auth_clients: bool,
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl RedisServer {
    /// Starts a server on a free loopback port with a new temporary directory, an append-only
    /// file synced on every write (`--appendfsync always`, so that even a killed server keeps
    /// what it acknowledged) and no snapshots, and waits until it answers PING.
    pub fn start() -> io::Result<RedisServer> {
        RedisServer::start_with(None, None, None)
    }

    /// [`start`](Self::start), listening on `address` too (a private address of a network
    /// namespace, e.g. an emulated cluster's router: every emulated host reaches it) and named
    /// by [`url`](Self::url). The caller's network namespace is the server's.
    pub fn start_on(address: Ipv4Addr) -> io::Result<RedisServer> {
        RedisServer::start_with(None, None, Some(address))
    }

    /// [`start`](Self::start), requiring `password` of clients (`--requirepass`).
    pub fn start_with_password(password: &str) -> io::Result<RedisServer> {
        RedisServer::start_with(Some(password.to_string()), None, None)
    }

    /// [`start`](Self::start), also taking TLS connections on [`tls_url`](Self::tls_url);
    /// requiring `password` if given.
    pub fn start_tls(tls: RedisTls, password: Option<&str>) -> io::Result<RedisServer> {
        RedisServer::start_with(password.map(String::from), Some(tls), None)
    }

    fn start_with(
        password: Option<String>,
        tls: Option<RedisTls>,
        address: Option<Ipv4Addr>,
    ) -> io::Result<RedisServer> {
        let dir = tempfile::Builder::new().prefix("optio-redis-").tempdir()?;
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS_MAX {
            let port = free_port()?;
            let tls = match &tls {
                Some(tls) => Some((tls.clone(), free_port()?)),
                None => None,
            };
            match spawn(port, dir.path(), password.as_deref(), tls.as_ref(), address) {
                Ok(child) => {
                    return Ok(RedisServer {
                        child: Some(child),
                        port,
                        address,
                        dir,
                        password,
                        tls,
                    });
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.expect("at least one attempt"))
    }

    /// `redis://127.0.0.1:PORT` (`redis://ADDRESS:PORT` when started with
    /// [`start_on`](Self::start_on)).
    pub fn url(&self) -> String {
        format!("redis://{}:{}", self.address.unwrap_or(Ipv4Addr::LOCALHOST), self.port)
    }

    /// `rediss://127.0.0.1:PORT`, the TLS port (when started with [`start_tls`](Self::start_tls)).
    pub fn tls_url(&self) -> Option<String> {
        self.tls.as_ref().map(|(_, port)| format!("rediss://127.0.0.1:{port}"))
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's directory (append-only file, `redis.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the server process is running (as far as this handle knows).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Stops the server cleanly (`SHUTDOWN`), killing it if it does not exit in time.
    pub fn stop(&mut self) -> io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // The answer does not matter: the server closes the connection as it exits.
        let _ = send_command(self.port, "SHUTDOWN");
        let deadline = Instant::now() + REDIS_STOP_TIMEOUT;
        while Instant::now() < deadline {
            if child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// Kills the server (SIGKILL), as a crash would.
    pub fn kill(&mut self) -> io::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Stops the server if it runs and starts it again on the same port and directory (so with
    /// the data it had).
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop()?;
        self.child = Some(spawn(
            self.port,
            self.dir.path(),
            self.password.as_deref(),
            self.tls.as_ref(),
            self.address,
        )?);
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `redis-server` on `port` with its files in `dir` and waits until it answers PING;
/// kills it if it does not.
fn spawn(
    port: u16,
    dir: &Path,
    password: Option<&str>,
    tls: Option<&(RedisTls, u16)>,
    address: Option<Ipv4Addr>,
) -> io::Result<Child> {
    let log = File::options().create(true).append(true).open(dir.join(LOG_FILE))?;
    let mut command = Command::new(REDIS_SERVER);
    if let Some(password) = password {
        command.args(["--requirepass", password]);
    }
    if let Some((tls, tls_port)) = tls {
        command
            .args(["--tls-port", &tls_port.to_string()])
            .arg("--tls-cert-file")
            .arg(&tls.cert)
            .arg("--tls-key-file")
            .arg(&tls.key)
            .arg("--tls-ca-cert-file")
            .arg(&tls.ca)
            .args(["--tls-auth-clients", if tls.auth_clients { "yes" } else { "no" }]);
    }
    let mut child = command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(address.map(|a| a.to_string()))
        .arg("--dir")
        .arg(dir)
        .args(["--save", "", "--appendonly", "yes", "--appendfsync", "always"])
        .args(["--daemonize", "no", "--protected-mode", "no"])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot start {REDIS_SERVER}: {e}")))?;
    let deadline = Instant::now() + REDIS_START_TIMEOUT;
    loop {
        if send_command(port, "PING")
            .is_ok_and(|answer| answer.starts_with("+PONG") || answer.starts_with("-NOAUTH"))
        {
            return Ok(child);
        }
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!(
                "{REDIS_SERVER} on port {port} exited ({status}) before answering; its log:\n{}",
                log_tail(dir)
            )));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{REDIS_SERVER} on port {port} did not answer PING within \
                     {REDIS_START_TIMEOUT:?}; its log:\n{}",
                    log_tail(dir)
                ),
            ));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The last lines of the server's log.
fn log_tail(dir: &Path) -> String {
    let text = fs::read_to_string(dir.join(LOG_FILE)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// A loopback port no one listens on now.
fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    Ok(listener.local_addr()?.port())
}

/// Sends one inline command and returns the first line of the answer.
fn send_command(port: u16, command: &str) -> io::Result<String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.write_all(format!("{command}\r\n").as_bytes())?;
    let mut answer = [0u8; 256];
    let read = stream.read(&mut answer)?;
    Ok(String::from_utf8_lossy(&answer[..read]).lines().next().unwrap_or_default().to_string())
}
