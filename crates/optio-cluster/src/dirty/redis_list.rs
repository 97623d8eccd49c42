//! The dirty table in a Redis LIST, as in seed 004: `RPUSH` appends, `LRANGE` scans, `LPOP key
//! count` removes; with a local spill log for when Redis does not answer.
//!
//! **Elements.** Each element is one entry in the binary format of [`super::codec`] (a format
//! tag, the pool and version as fixed-width integers, then the key's bytes): compact, and
//! unambiguous whatever the key holds (spaces, newlines), since the key is the rest.
//!
//! **Redis down.** A push that Redis does not acknowledge (refused, timed out, dropped, or an
//! error answer) goes to the spill — a [`LocalDirtyLog`] in its own directory, durable when the
//! push returns — with a warning. For [`REDIS_RETRY_INTERVAL`] after a failure, pushes go
//! straight to the spill without trying Redis, so a dead server costs writes at most one
//! [`REDIS_CONNECT_TIMEOUT`] per interval. While the spill holds entries, every push first
//! tries to drain it and, if it cannot, appends behind it, so entries reach Redis in order.
//! A background task drains every [`DRAIN_INTERVAL`] too, so entries do not wait for the next
//! push; and `range`, `len` and `pop_front` drain first, then fail with
//! [`DirtyError::RedisUnreachable`] while Redis is down.
//!
//! **Draining** holds an exclusive `flock` on the spill's `drain.lock` (one drainer among all
//! processes sharing the spill), reads a batch from the spill's head, `RPUSH`es it, then pops
//! it from the spill. A crash (or a lost answer) between the two sends the batch again: an
//! entry may be duplicated in Redis, never lost. Duplicates are harmless: re-integrating an
//! object twice finds it in place the second time.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue, RedisError};

use super::check::check_entries;
use super::codec;
use super::local::LocalDirtyLog;
use super::{DirtyEntry, DirtyError, RANGE_ENTRIES_MAX};
use crate::secret::AccessError;

/// The list's key unless the spec gives `?list=NAME`.
pub const LIST_DEFAULT: &str = "optio:dirty";
/// How long connecting to Redis may take.
pub const REDIS_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long Redis may take to answer a command.
pub const REDIS_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// After a failure, pushes go straight to the spill for this long before Redis is tried again.
pub const REDIS_RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// How often the background task looks for spilled entries to drain.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(250);
/// Entries moved by one `RPUSH` when draining.
const DRAIN_BATCH_ENTRIES: usize = 1000;
/// Batches moved by one drain before it lets others go (the rest waits for the next drain).
const DRAIN_BATCHES_MAX: usize = 1000;
/// The longest list key.
const LIST_NAME_BYTES_MAX: usize = 256;
/// The spill's drain lock file.
const DRAIN_LOCK_FILE: &str = "drain.lock";

/// The dirty table in a Redis list, with a local spill.
#[derive(Clone)]
pub struct RedisDirtyTable {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisDirtyTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// What the table and its background drainer share.
struct Inner {
    client: redis::Client,
    /// The server's URL without its password, for messages.
    url: String,
    /// The list's key.
    list: String,
    /// Where pushes go while Redis does not answer.
    spill: LocalDirtyLog,
    /// The connection, made on first use and dropped when it fails.
    connection: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    /// When Redis last failed.
    failed_at: Mutex<Option<Instant>>,
    /// Whether pushes are going to the spill (warned once per outage).
    spilling: AtomicBool,
}

impl RedisDirtyTable {
    /// Opens the list named by `spec` (`redis://HOST:PORT[/DB][?list=NAME]`) with its spill in
    /// `spill_root/LIST` (the list's name with bytes other than `A-Za-z0-9_-` as `%XX`), so
    /// that tables of several lists sharing a directory never drain into each other's list.
    /// Redis being down is not an error here: it is logged and pushes spill.
    pub async fn open(spec: &str, spill_root: &Path) -> Result<RedisDirtyTable, DirtyError> {
        let access = RedisAccess::from_env(&VARS)
            .map_err(|source| DirtyError::BadAccess { spec: redact(spec), source })?;
        RedisDirtyTable::open_with(spec, spill_root, &access).await
    }

    /// [`open`](Self::open) with the credentials in `access` rather than the environment's.
    pub async fn open_with(
        spec: &str,
        spill_root: &Path,
        access: &RedisAccess,
    ) -> Result<RedisDirtyTable, DirtyError> {
        let (client, url, list) = parse_spec(spec, access)?;
        let spill = LocalDirtyLog::open(&spill_root.join(escape_file_name(&list))).await?;
        let inner = Arc::new(Inner {
            client,
            url,
            list,
            spill,
            connection: tokio::sync::Mutex::new(None),
            failed_at: Mutex::new(None),
            spilling: AtomicBool::new(false),
        });
        let ping = inner.run::<String>(&redis::cmd("PING")).await;
        if let Err(error) = &ping
            && is_auth_error(error)
        {
            return Err(DirtyError::InvalidSpec {
                spec: inner.url.clone(),
                reason: format!(
                    "Redis refused the credentials ({error}): give the password in \
                     {PASSWORD_ENV} or a file named by {PASSWORD_FILE_ENV} (never on the command line), \
                     and the ACL user as redis://USER@HOST"
                ),
            });
        }
        if let Err(error) = ping.map_err(|e| inner.error(&e)) {
            inner.note_failure();
            tracing::warn!(
                %error,
                spill = %inner.spill.dir().display(),
                "dirty table: Redis does not answer; pushes go to the local spill until it does"
            );
        }
        let spilled = inner.spill.len().await?;
        if spilled > 0 {
            tracing::info!(spilled, url = %inner.url, "dirty table: spilled entries will move to Redis");
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain_in_background(Arc::downgrade(&inner)));
        }
        Ok(RedisDirtyTable { inner })
    }

    /// The server (without password).
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The list's key.
    pub fn list(&self) -> &str {
        &self.inner.list
    }

    /// The spill log.
    pub fn spill(&self) -> &LocalDirtyLog {
        &self.inner.spill
    }

    /// See [`super::DirtyTable::describe`].
    pub fn describe(&self) -> String {
        format!(
            "Redis list `{}` at {} (spill in {})",
            self.inner.list,
            self.inner.url,
            self.inner.spill.dir().display()
        )
    }

    /// Appends `entries` in order; durable when it returns (acknowledged by Redis, or
    /// fdatasync'd in the spill when Redis does not answer).
    pub async fn push(&self, entries: &[DirtyEntry]) -> Result<(), DirtyError> {
        check_entries(entries)?;
        if entries.is_empty() {
            return Ok(());
        }
        let inner = &self.inner;
        let reason = if inner.in_retry_interval() {
            None
        } else {
            match inner.push_to_redis(entries).await {
                Ok(true) => {
                    if inner.spilling.swap(false, Ordering::Relaxed) {
                        tracing::info!(url = %inner.url, "dirty table: Redis answers again");
                    }
                    return Ok(());
                }
                Ok(false) => None,
                Err(error) => {
                    inner.note_failure();
                    Some(error)
                }
            }
        };
        inner.spill.push(entries).await?;
        if !inner.spilling.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                url = %inner.url,
                error = reason.as_ref().map(ToString::to_string).unwrap_or_default(),
                spill = %inner.spill.dir().display(),
                "dirty table: Redis does not take pushes; they go to the local spill until it does"
            );
        }
        Ok(())
    }

    /// Up to `count` entries from position `start`, oldest first (`LRANGE`), after moving any
    /// spilled entries to Redis.
    pub async fn range(&self, start: u64, count: usize) -> Result<Vec<DirtyEntry>, DirtyError> {
        if count > RANGE_ENTRIES_MAX {
            return Err(DirtyError::TooMany {
                operation: "range",
                count: count as u64,
                max: RANGE_ENTRIES_MAX as u64,
            });
        }
        let inner = &self.inner;
        inner.drain_before_reading().await?;
        // LRANGE takes signed positions; nothing lies past i64::MAX.
        let Ok(first) = i64::try_from(start) else {
            return Ok(Vec::new());
        };
        if count == 0 {
            return Ok(Vec::new());
        }
        let last = first.saturating_add(count as i64 - 1);
        let command = redis::cmd("LRANGE").arg(&inner.list).arg(first).arg(last).clone();
        let values: Vec<Vec<u8>> = inner.command(&command, true).await?;
        values
            .iter()
            .zip(start..)
            .map(|(value, position)| {
                codec::decode_entry(value).map_err(|reason| DirtyError::CorruptRedisEntry {
                    url: inner.url.clone(),
                    list: inner.list.clone(),
                    position,
                    reason,
                })
            })
            .collect()
    }

    /// Removes up to `count` oldest entries (`LPOP key count`); returns how many.
    ///
    /// Not retried inside: when it fails, whether Redis removed the entries is unknown, so
    /// the caller must `range` again rather than repeat the pop (see the module docs).
    pub async fn pop_front(&self, count: u64) -> Result<u64, DirtyError> {
        if count > RANGE_ENTRIES_MAX as u64 {
            return Err(DirtyError::TooMany {
                operation: "pop_front",
                count,
                max: RANGE_ENTRIES_MAX as u64,
            });
        }
        let inner = &self.inner;
        inner.drain_before_reading().await?;
        if count == 0 {
            return Ok(0);
        }
        let command = redis::cmd("LPOP").arg(&inner.list).arg(count).clone();
        let popped: Option<Vec<Vec<u8>>> = inner.command(&command, false).await?;
        Ok(popped.map_or(0, |values| values.len() as u64))
    }

    /// The list's length (`LLEN`), after moving any spilled entries to Redis.
    pub async fn len(&self) -> Result<u64, DirtyError> {
        let inner = &self.inner;
        inner.drain_before_reading().await?;
        inner.command(redis::cmd("LLEN").arg(&inner.list), true).await
    }

    /// Whether the list is empty, after moving any spilled entries to Redis.
    pub async fn is_empty(&self) -> Result<bool, DirtyError> {
        Ok(self.len().await? == 0)
    }

    /// Moves spilled entries to Redis now, in order; returns whether the spill is empty
    /// afterwards (`false` when another process is draining it, or it is larger than one
    /// drain moves).
    pub async fn drain_spill(&self) -> Result<bool, DirtyError> {
        self.inner.drain().await
    }
}

impl Inner {
    /// Whether Redis failed less than [`REDIS_RETRY_INTERVAL`] ago.
    fn in_retry_interval(&self) -> bool {
        let failed_at = *self.failed_at.lock().unwrap_or_else(PoisonError::into_inner);
        failed_at.is_some_and(|at| at.elapsed() < REDIS_RETRY_INTERVAL)
    }

    fn note_failure(&self) {
        *self.failed_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// Drains the spill, then `RPUSH`es `entries`; `Ok(false)` when the spill cannot be
    /// drained now (another process is at it), so that the entries must queue behind it.
    async fn push_to_redis(&self, entries: &[DirtyEntry]) -> Result<bool, DirtyError> {
        if self.spill.len().await? > 0 && !self.drain().await? {
            return Ok(false);
        }
        self.rpush(entries).await?;
        Ok(true)
    }

    async fn rpush(&self, entries: &[DirtyEntry]) -> Result<(), DirtyError> {
        let mut command = redis::cmd("RPUSH");
        command.arg(&self.list);
        let mut value = Vec::new();
        for entry in entries {
            value.clear();
            codec::encode_entry(entry, &mut value);
            command.arg(&value[..]);
        }
        self.command::<u64>(&command, true).await.map(|_| ())
    }

    /// Before a read or a pop: moves spilled entries first so that the reader sees them.
    async fn drain_before_reading(&self) -> Result<(), DirtyError> {
        if self.spill.len().await? > 0 {
            self.drain().await?;
        }
        Ok(())
    }

    /// See [`RedisDirtyTable::drain_spill`].
    async fn drain(&self) -> Result<bool, DirtyError> {
        let Some(_lock) = self.try_drain_lock()? else {
            return Ok(false);
        };
        let mut moved = 0;
        let result = async {
            for _ in 0..DRAIN_BATCHES_MAX {
                let batch = self.spill.range(0, DRAIN_BATCH_ENTRIES).await?;
                if batch.is_empty() {
                    return Ok(true);
                }
                self.rpush(&batch).await?;
                // Crash here: the batch is sent again by the next drain (duplicates, no loss).
                self.spill.pop_front(batch.len() as u64).await?;
                moved += batch.len();
            }
            Ok(self.spill.len().await? == 0)
        }
        .await;
        if moved > 0 {
            tracing::info!(moved, url = %self.url, list = %self.list, "dirty table: moved spilled entries to Redis");
        }
        result
    }

    /// The spill's drain lock, if no one else holds it.
    fn try_drain_lock(&self) -> Result<Option<File>, DirtyError> {
        let path = self.spill.dir().join(DRAIN_LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| DirtyError::io("open the lock file", &path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(DirtyError::io("flock", &path, e)),
        }
    }

    /// Runs `command`; when the connection fails and `retry` is set (commands that may run
    /// twice), once more on a new connection: the old one may predate a Redis restart.
    async fn command<T: FromRedisValue>(
        &self,
        command: &redis::Cmd,
        retry: bool,
    ) -> Result<T, DirtyError> {
        let result = match self.run(command).await {
            Err(error) if retry && is_unreachable(&error) => self.run(command).await,
            other => other,
        };
        result.map_err(|error| self.error(&error))
    }

    async fn run<T: FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, RedisError> {
        let mut connection = self.connection().await?;
        let result = command.query_async(&mut connection).await;
        if let Err(error) = &result
            && is_unreachable(error)
        {
            *self.connection.lock().await = None;
        }
        result
    }

    /// The connection, made now if there is none.
    async fn connection(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(REDIS_CONNECT_TIMEOUT))
            .set_response_timeout(Some(REDIS_RESPONSE_TIMEOUT));
        let connect = self.client.get_multiplexed_async_connection_with_config(&config);
        // The connection timeout covers the TCP connect; this bounds the handshake too.
        let connection =
            tokio::time::timeout(REDIS_CONNECT_TIMEOUT + REDIS_RESPONSE_TIMEOUT, connect)
                .await
                .map_err(|_| {
                RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connecting took too long",
                ))
            })??;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    fn error(&self, error: &RedisError) -> DirtyError {
        if is_unreachable(error) {
            DirtyError::RedisUnreachable { url: self.url.clone(), message: error.to_string() }
        } else {
            DirtyError::Redis {
                url: self.url.clone(),
                list: self.list.clone(),
                message: error.to_string(),
            }
        }
    }
}

/// Whether `error` means Redis cannot be reached now (rather than that it refused a command).
fn is_unreachable(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(error.code(), Some("LOADING" | "MASTERDOWN" | "TRYAGAIN"))
}

/// Moves spilled entries to Redis every [`DRAIN_INTERVAL`] until the table is dropped.
async fn drain_in_background(inner: Weak<Inner>) {
    let mut ticks = tokio::time::interval(DRAIN_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.in_retry_interval() || !matches!(inner.spill.len().await, Ok(1..)) {
            continue;
        }
        if let Err(error) = inner.drain().await {
            inner.note_failure();
            tracing::debug!(%error, "dirty table: cannot drain the spill yet");
        }
    }
}

/// Splits `redis://HOST:PORT[/DB][?list=NAME]` into a client, the URL to show (without
/// password) and the list's key.
fn parse_spec(
    spec: &str,
    access: &RedisAccess,
) -> Result<(redis::Client, String, String), DirtyError> {
    let invalid = |reason: String| DirtyError::InvalidSpec { spec: redact(spec), reason };
    let (base, query) = match spec.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (spec, None),
    };
    let tls = base.starts_with("rediss://");
    let Some(rest) = base.strip_prefix("redis://").or_else(|| base.strip_prefix("rediss://"))
    else {
        return Err(invalid("a Redis spec starts with `redis://` (or `rediss://` for TLS)".into()));
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(invalid("the host is missing".to_string()));
    }
    let list = match query {
        None => LIST_DEFAULT.to_string(),
        Some(query) => {
            let Some(name) = query.strip_prefix("list=") else {
                return Err(invalid(format!(
                    "unknown parameter `{query}` (the only one is `list=NAME`)"
                )));
            };
            if name.is_empty() || name.len() > LIST_NAME_BYTES_MAX {
                return Err(invalid(format!(
                    "the list name must be 1 to {LIST_NAME_BYTES_MAX} bytes"
                )));
            }
            if !name.bytes().all(|b| b.is_ascii_graphic()) || name.contains('&') {
                return Err(invalid(format!(
                    "the list name `{name}` may hold only printable ASCII without spaces or `&`"
                )));
            }
            name.to_string()
        }
    };
    let with_password = with_password(base, access.password.clone());
    let client = if tls {
        let certificates = tls_certificates(access)
            .map_err(|source| DirtyError::BadAccess { spec: redact(spec), source })?;
        redis::Client::build_with_tls(with_password.as_str(), certificates)
    } else {
        redis::Client::open(with_password.as_str())
    };
    let client = client.map_err(|e| invalid(e.to_string()))?;
    Ok((client, redact(base), list))
}

/// The environment variable holding the Redis password (AUTH / ACL), when the URL has none.
pub const PASSWORD_ENV: &str = "OPTIO_REDIS_PASSWORD";
/// The environment variable naming a file holding it.
pub const PASSWORD_FILE_ENV: &str = "OPTIO_REDIS_PASSWORD_FILE";

/// The environment variable naming the CA certificate (PEM) a `rediss://` Redis is checked
/// with (unset: the system's trusted roots).
pub const CA_ENV: &str = "OPTIO_REDIS_CA";
/// The environment variable naming a client certificate (PEM) shown to a `rediss://` Redis
/// (its `tls-auth-clients`).
pub const CERT_ENV: &str = "OPTIO_REDIS_CERT";
/// The environment variable naming that certificate's private key (PEM).
pub const KEY_ENV: &str = "OPTIO_REDIS_KEY";

/// The credentials a Redis dirty table is opened with, besides its URL: the password (AUTH,
/// or the ACL user's of `redis://USER@HOST`, when the URL has none) and, for `rediss://`, the
/// CA (none: the system's roots) and an optional client certificate.
pub type RedisAccess = crate::secret::Access;

/// The variables Redis's credentials come from.
pub const VARS: crate::secret::AccessVars = crate::secret::AccessVars {
    password: PASSWORD_ENV,
    password_file: PASSWORD_FILE_ENV,
    ca: CA_ENV,
    cert: CERT_ENV,
    key: KEY_ENV,
};

/// The certificates of a `rediss://` connection, read.
fn tls_certificates(access: &RedisAccess) -> Result<redis::TlsCertificates, AccessError> {
    let read = |path: &Path| {
        std::fs::read(path)
            .map_err(|e| AccessError::ReadFile { path: path.into(), source: Arc::new(e) })
    };
    let client_tls = match &access.identity {
        Some((cert, key)) => {
            Some(redis::ClientTlsConfig { client_cert: read(cert)?, client_key: read(key)? })
        }
        None => None,
    };
    let root_cert = access.ca.as_deref().map(read).transpose()?;
    optio_tls::install_crypto_provider();
    Ok(redis::TlsCertificates { client_tls, root_cert })
}

/// `base` with `password` when it has no password of its own (`redis://HOST`, or
/// `redis://USER@HOST` for an ACL user): passwords stay off command lines.
fn with_password(base: &str, password: Option<String>) -> String {
    let Some(password) = password else { return base.to_string() };
    let (scheme, rest) = base.split_once("://").unwrap_or(("redis", base));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let (user, host) = match authority.rsplit_once('@') {
        Some((user, _)) if user.contains(':') => return base.to_string(),
        Some((user, host)) => (user, host),
        None => ("", authority),
    };
    let encoded: String = password
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("{scheme}://{user}:{encoded}@{host}{path}")
}

/// Whether Redis refused the credentials (or wants some).
fn is_auth_error(error: &RedisError) -> bool {
    matches!(error.kind(), redis::ErrorKind::AuthenticationFailed)
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
        || error.to_string().contains("NOAUTH")
        || error.to_string().contains("WRONGPASS")
}

/// `name` as one file name (never `.` or `..`): bytes other than `A-Za-z0-9_-` as `%XX`.
fn escape_file_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `spec` without the password of its `user:password@` part.
/// Whether a Redis spec carries a password in its URL (`redis://USER:PASSWORD@HOST` or
/// `redis://:PASSWORD@HOST`).
pub fn spec_holds_password(spec: &str) -> bool {
    let Some((_, rest)) = spec.split_once("://") else { return false };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    rest[..authority_end]
        .rsplit_once('@')
        .and_then(|(user, _)| user.split_once(':'))
        .is_some_and(|(_, password)| !password.is_empty())
}

/// A Redis spec as it may be shown: its user and password, if any, replaced by `***`.
pub fn redact_spec(spec: &str) -> String {
    redact(spec)
}

fn redact(spec: &str) -> String {
    let Some((scheme, rest)) = spec.split_once("://") else {
        return spec.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => spec.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_in_specs_are_found() {
        use super::spec_holds_password;
        for spec in ["redis://:pw@h:1", "redis://app:pw@h:1/2?list=x", "rediss://a:b@h"] {
            assert!(spec_holds_password(spec), "{spec}");
        }
        for spec in ["redis://h:1", "redis://app@h:1", "redis://h:1/2?list=a:b@c", "x"] {
            assert!(!spec_holds_password(spec), "{spec}");
        }
    }

    #[test]
    fn a_password_from_the_environment_goes_into_the_url_only_without_one() {
        use super::with_password;
        let pw = || Some("p@ss word".to_string());
        assert_eq!(with_password("redis://h:1/2", pw()), "redis://:p%40ss%20word@h:1/2");
        assert_eq!(with_password("redis://app@h:1", pw()), "redis://app:p%40ss%20word@h:1");
        assert_eq!(with_password("redis://app:own@h:1", pw()), "redis://app:own@h:1");
        assert_eq!(with_password("redis://h:1", None), "redis://h:1");
    }

    use super::*;

    #[test]
    fn specs_name_a_server_and_a_list() {
        let (_, url, list) = parse_spec("redis://127.0.0.1:6379", &RedisAccess::default()).unwrap();
        assert_eq!((url.as_str(), list.as_str()), ("redis://127.0.0.1:6379", LIST_DEFAULT));
        let (_, url, list) =
            parse_spec("redis://db.example:7000/3?list=pool:dirty", &RedisAccess::default())
                .unwrap();
        assert_eq!((url.as_str(), list.as_str()), ("redis://db.example:7000/3", "pool:dirty"));
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let reason = |spec: &str| match parse_spec(spec, &RedisAccess::default()) {
            Err(DirtyError::InvalidSpec { reason, .. }) => reason,
            other => panic!("{spec}: {other:?}"),
        };
        assert!(reason("redis://").contains("host"));
        assert!(reason("redis://:6379").contains("host"));
        assert!(reason("redis://h:1?db=2").contains("unknown parameter"));
        assert!(reason("redis://h:1?list=").contains("1 to"));
        assert!(reason("redis://h:1?list=a b").contains("printable"));
        assert!(!reason("redis://h:port").is_empty());
    }

    #[test]
    fn an_unreadable_ca_is_a_bad_access_naming_the_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ca = dir.path().join("absent-ca.pem");
        let access = RedisAccess { ca: Some(ca.clone()), ..RedisAccess::default() };
        let error = parse_spec("rediss://u:secret@h:1", &access).unwrap_err();
        assert!(
            matches!(&error, DirtyError::BadAccess { source: AccessError::ReadFile { path, .. }, .. } if *path == ca),
            "{error:?}"
        );
        assert!(!error.to_string().contains("secret"), "{error}");
    }

    #[test]
    fn list_names_make_safe_file_names() {
        assert_eq!(escape_file_name("optio:dirty"), "optio%3Adirty");
        assert_eq!(escape_file_name(".."), "%2E%2E");
        assert_eq!(escape_file_name("a/b_c-D9"), "a%2Fb_c-D9");
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(redact("redis://user:secret@h:1/2?list=x"), "redis://***@h:1/2?list=x");
        assert_eq!(redact("redis://h:1/2"), "redis://h:1/2");
        let error = parse_spec("redis://u:secret@h:1?bad", &RedisAccess::default()).unwrap_err();
        assert!(!error.to_string().contains("secret"), "{error}");
    }
}
