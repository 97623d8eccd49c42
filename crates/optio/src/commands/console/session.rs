//! Who uses the console: a login exchanges an entity of the cluster keyring and its key (or an
//! `OPTIO1` signature made with it) for a session — a random token in an `HttpOnly`,
//! `SameSite=Strict` cookie (`Secure` over HTTPS) that lasts [`SESSION_TTL`] — and a CSRF token
//! the page sends back in [`CSRF_HEADER`] with every mutation. Each request is checked against
//! the keyring as it is now (followed on disk): an entity removed, or given a lesser
//! capability, loses what it lost at its next request.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use optio_proto::auth::{Cap, Credentials, Key, Keyring, Signed, WINDOW_MS};

/// The session cookie's name.
pub const COOKIE: &str = "optio_console";
/// The header a mutation carries its session's CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a session lasts after its login.
pub const SESSION_TTL: Duration = Duration::from_secs(30 * 60);
/// Most sessions open at once: a login beyond them (after the expired ones are dropped) is
/// refused (503) rather than letting logins grow the console's memory without bound.
pub const SESSIONS_MAX: usize = 1024;
/// Most login nonces remembered (signature logins within [`WINDOW_MS`]) against replays.
pub const NONCES_MAX: usize = 16_384;
/// The path a login signature signs (`POST`, no headers).
pub const LOGIN_PATH: &str = "/api/v1/login";

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No session, an expired one, or an entity the keyring no longer has (401).
    Unauthenticated(String),
    /// A session whose entity may not do this, or a mutation without its CSRF token (403).
    Forbidden(String),
    /// Too many sessions (503).
    Busy(String),
}

/// A session.
#[derive(Clone, Debug)]
pub struct Session {
    /// The entity logged in.
    pub entity: String,
    /// Its capability, as the keyring said at this request.
    pub cap: Cap,
    /// The CSRF token mutations must carry.
    pub csrf: String,
    /// When it ends.
    pub expires: Instant,
    /// A hash of the key the login proved (the session ends when the keyring no longer
    /// accepts that key: rotated past its grace, or revoked).
    key_stamp: blake3::Hash,
}

/// A key's stamp: what a session keeps of the key its login proved.
fn key_stamp(key: &Key) -> blake3::Hash {
    blake3::hash(key.to_base64().as_bytes())
}

/// Whether `entity` still accepts the key stamped `stamp` at `now_ms`: its key, or its
/// previous one within the grace a rotation gave it.
fn accepts(entity: &optio_proto::auth::Entity, stamp: &blake3::Hash, now_ms: u64) -> bool {
    key_stamp(&entity.key) == *stamp
        || entity
            .previous
            .as_ref()
            .is_some_and(|(key, until)| now_ms / 1000 < *until && key_stamp(key) == *stamp)
}

/// What a login presents.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Login {
    /// The entity (`client.NAME`).
    pub entity: String,
    /// Its key, base64 as in its key file.
    #[serde(default)]
    pub key: Option<String>,
    /// Or an `x-optio-auth` value signing `POST /api/v1/login` (no headers) with it.
    #[serde(default)]
    pub signature: Option<String>,
}

/// The keyring as last read, and the file's modification time and length then.
struct Followed {
    keyring: Keyring,
    stamp: Option<(SystemTime, u64)>,
}

/// Sessions, the keyring they are checked against, and the counters the API shows.
pub struct Sessions {
    keyring_path: PathBuf,
    keyring: Mutex<Followed>,
    sessions: Mutex<HashMap<String, Session>>,
    nonces: Mutex<HashMap<String, u64>>,
    /// Whether cookies are `Secure` (the console serves HTTPS).
    pub secure: bool,
    /// Logins refused (wrong key, unknown entity, bad or replayed signature).
    pub login_failures: AtomicU64,
    /// Logins accepted.
    pub logins: AtomicU64,
    /// Requests refused for want of a session or a capability, or of a CSRF token.
    pub refused: AtomicU64,
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A fresh random token, 64 hex digits (256 bits from the operating system).
fn token() -> anyhow::Result<String> {
    let key = Key::generate()?;
    Ok(blake3::hash(key.to_base64().as_bytes()).to_hex().to_string())
}

/// Compares two tokens without leaking where they differ (BLAKE3 hashes compare in constant
/// time).
fn same(a: &str, b: &str) -> bool {
    blake3::hash(a.as_bytes()) == blake3::hash(b.as_bytes())
}

impl Sessions {
    /// Sessions checked against the keyring at `path` (read now: a missing or unreadable
    /// keyring is an error at start, not at the first login).
    pub fn new(path: &Path, secure: bool) -> anyhow::Result<Sessions> {
        let keyring = optio_cluster::keyring::load(path).map_err(|e| {
            anyhow::anyhow!(
                "the console needs the cluster keyring to check logins: {e} (pass --auth-keyring FILE, or --cluster DIR of a cluster made with authentication)"
            )
        })?;
        Ok(Sessions {
            keyring_path: path.to_path_buf(),
            keyring: Mutex::new(Followed { keyring, stamp: stamp(path) }),
            sessions: Mutex::new(HashMap::new()),
            nonces: Mutex::new(HashMap::new()),
            secure,
            login_failures: AtomicU64::new(0),
            logins: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// The keyring, read again if its file changed (a rotation, an entity added or removed).
    /// A keyring that no longer reads keeps the last one read.
    fn keyring(&self) -> Keyring {
        let mut followed = self.keyring.lock().unwrap_or_else(|e| e.into_inner());
        let now = stamp(&self.keyring_path);
        if now != followed.stamp
            && let Ok(keyring) = optio_cluster::keyring::load(&self.keyring_path)
        {
            *followed = Followed { keyring, stamp: now };
        }
        followed.keyring.clone()
    }

    /// The sessions open now.
    pub fn open(&self) -> usize {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        sessions.retain(|_, s| s.expires > now);
        sessions.len()
    }

    /// Checks a login; on success a new session and its cookie token.
    pub fn login(&self, login: &Login) -> Result<(String, Session), Refusal> {
        let refused = |why: &str| {
            self.login_failures.fetch_add(1, Ordering::Relaxed);
            Refusal::Unauthenticated(format!("login refused: {why}"))
        };
        let keyring = self.keyring();
        let now = now_ms();
        let signed = match (&login.key, &login.signature) {
            (Some(key), None) => {
                let key = Key::from_base64(key).map_err(|_| refused("the key is not a key"))?;
                // The key proves itself the way a request's signature does, so the check is
                // the servers' own (constant-time, a rotated key's grace included).
                let credentials = Credentials { id: login.entity.clone(), key };
                credentials.sign("POST", LOGIN_PATH, &[], now)
            }
            (None, Some(signature)) => signature.clone(),
            _ => return Err(refused("give the entity and either its key or a signature")),
        };
        let parsed = Signed::parse(&signed).map_err(|_| refused("the signature is malformed"))?;
        if parsed.id != login.entity {
            return Err(refused("the signature is another entity's"));
        }
        let entity = parsed
            .verify(&keyring, "POST", LOGIN_PATH, &[], now, WINDOW_MS)
            .map_err(|_| refused("wrong entity or key"))?;
        if login.signature.is_some() {
            let mut nonces = self.nonces.lock().unwrap_or_else(|e| e.into_inner());
            nonces.retain(|_, ts| ts.saturating_add(2 * WINDOW_MS) > now);
            let nonce = format!("{}/{}", parsed.id, parsed.nonce);
            if nonces.contains_key(&nonce) || nonces.len() >= NONCES_MAX {
                return Err(refused("the signature was used before"));
            }
            nonces.insert(nonce, now);
        }
        // Which key the login proved: the entity's own, or its previous one in its grace.
        let current_only = {
            let mut keyring = Keyring::new();
            keyring.insert(optio_proto::auth::Entity { previous: None, ..entity.clone() });
            keyring
        };
        let proved_current =
            parsed.verify(&current_only, "POST", LOGIN_PATH, &[], now, WINDOW_MS).is_ok();
        let key_stamp = match (&entity.previous, proved_current) {
            (Some((previous, _)), false) => key_stamp(previous),
            _ => key_stamp(&entity.key),
        };
        let session = Session {
            entity: entity.name.clone(),
            cap: entity.cap,
            key_stamp,
            csrf: token().map_err(|e| Refusal::Busy(e.to_string()))?,
            expires: Instant::now() + SESSION_TTL,
        };
        let token = token().map_err(|e| Refusal::Busy(e.to_string()))?;
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if sessions.len() >= SESSIONS_MAX {
            let now = Instant::now();
            sessions.retain(|_, s| s.expires > now);
            if sessions.len() >= SESSIONS_MAX {
                return Err(Refusal::Busy(format!(
                    "{SESSIONS_MAX} sessions are open: log out of some, or wait for them to expire"
                )));
            }
        }
        sessions.insert(token.clone(), session.clone());
        self.logins.fetch_add(1, Ordering::Relaxed);
        Ok((token, session))
    }

    /// Ends the session of `token`.
    pub fn logout(&self, token: &str) {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(token);
    }

    /// The session of a request's cookie, if it may do what needs `need`; a mutation must
    /// carry the session's CSRF token too.
    pub fn check(
        &self,
        cookie: Option<&str>,
        csrf: Option<&str>,
        need: Cap,
        mutation: bool,
    ) -> Result<(String, Session), Refusal> {
        let result = self.check_inner(cookie, csrf, need, mutation);
        if result.is_err() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn check_inner(
        &self,
        cookie: Option<&str>,
        csrf: Option<&str>,
        need: Cap,
        mutation: bool,
    ) -> Result<(String, Session), Refusal> {
        let unauthenticated = || {
            Refusal::Unauthenticated(
                "no session: log in (POST /api/v1/login) with an entity of the cluster keyring"
                    .into(),
            )
        };
        let token = cookie.ok_or_else(unauthenticated)?;
        let mut session = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            match sessions.get(token) {
                Some(s) if s.expires > Instant::now() => s.clone(),
                Some(_) => {
                    sessions.remove(token);
                    return Err(unauthenticated());
                }
                None => return Err(unauthenticated()),
            }
        };
        let Some(entity) = self.keyring().get(&session.entity).cloned() else {
            self.logout(token);
            return Err(Refusal::Unauthenticated(format!(
                "{} is no longer in the cluster keyring",
                session.entity
            )));
        };
        if !accepts(&entity, &session.key_stamp, now_ms()) {
            self.logout(token);
            return Err(Refusal::Unauthenticated(format!(
                "the key {} logged in with is no longer accepted (rotated or revoked): log in again",
                session.entity
            )));
        }
        session.cap = entity.cap;
        if mutation && !csrf.is_some_and(|c| same(c, &session.csrf)) {
            return Err(Refusal::Forbidden(format!(
                "a change needs the session's CSRF token in the {CSRF_HEADER} header"
            )));
        }
        if !session.cap.allows(need) {
            return Err(Refusal::Forbidden(format!(
                "{} may {} but this needs {need}",
                session.entity, session.cap
            )));
        }
        Ok((token.to_string(), session))
    }

    /// The `Set-Cookie` value of a new session.
    pub fn cookie(&self, token: &str) -> String {
        format!(
            "{COOKIE}={token}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
            SESSION_TTL.as_secs(),
            if self.secure { "; Secure" } else { "" }
        )
    }

    /// The `Set-Cookie` value that ends a session in the browser.
    pub fn cookie_cleared(&self) -> String {
        format!(
            "{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{}",
            if self.secure { "; Secure" } else { "" }
        )
    }
}

/// The session token of a request's `Cookie` header.
pub fn cookie_token(header: Option<&str>) -> Option<&str> {
    header?
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyring_with(entities: &[(&str, Cap)]) -> (tempfile::TempDir, PathBuf, Vec<Key>) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("keyring");
        let mut keyring = Keyring::new();
        let mut keys = Vec::new();
        for (name, cap) in entities {
            let key = Key::generate().expect("a key");
            keys.push(key.clone());
            keyring.insert(optio_proto::auth::Entity {
                name: name.to_string(),
                key,
                cap: *cap,
                previous: None,
            });
        }
        optio_cluster::keyring::save(&keyring, &path).expect("saved");
        (dir, path, keys)
    }

    #[test]
    fn a_key_logs_in_and_a_wrong_one_is_counted() {
        let (_dir, path, keys) = keyring_with(&[("client.admin", Cap::Admin)]);
        let sessions = Sessions::new(&path, false).expect("sessions");
        let good = Login {
            entity: "client.admin".into(),
            key: Some(keys[0].to_base64()),
            signature: None,
        };
        let (token, session) = sessions.login(&good).expect("the right key logs in");
        assert_eq!(session.cap, Cap::Admin);
        let wrong = Login {
            entity: "client.admin".into(),
            key: Some(Key::generate().expect("a key").to_base64()),
            signature: None,
        };
        assert!(matches!(sessions.login(&wrong), Err(Refusal::Unauthenticated(_))));
        assert_eq!(sessions.login_failures.load(Ordering::Relaxed), 1);
        // A mutation needs the CSRF token.
        let forbidden = sessions.check(Some(&token), None, Cap::Admin, true);
        assert!(matches!(forbidden, Err(Refusal::Forbidden(_))), "{forbidden:?}");
        sessions
            .check(Some(&token), Some(&session.csrf), Cap::Admin, true)
            .expect("with the token it may");
    }

    #[test]
    fn a_signature_logs_in_once() {
        let (_dir, path, keys) = keyring_with(&[("client.ro", Cap::Read)]);
        let sessions = Sessions::new(&path, true).expect("sessions");
        let credentials = Credentials { id: "client.ro".into(), key: keys[0].clone() };
        let signature = credentials.sign("POST", LOGIN_PATH, &[], now_ms());
        let login =
            Login { entity: "client.ro".into(), key: None, signature: Some(signature.clone()) };
        let (token, _) = sessions.login(&login).expect("a signature logs in");
        assert!(sessions.cookie(&token).ends_with("; Secure"));
        assert!(matches!(sessions.login(&login), Err(Refusal::Unauthenticated(_))), "a replay");
        assert!(matches!(
            sessions.check(Some(&token), None, Cap::Admin, false),
            Err(Refusal::Forbidden(_))
        ));
    }

    #[test]
    fn a_key_rotated_without_grace_ends_the_sessions_it_opened() {
        let (_dir, path, keys) = keyring_with(&[("client.admin", Cap::Admin)]);
        let sessions = Sessions::new(&path, false).expect("sessions");
        let login = Login {
            entity: "client.admin".into(),
            key: Some(keys[0].to_base64()),
            signature: None,
        };
        let (token, _) = sessions.login(&login).expect("logged in");
        sessions.check(Some(&token), None, Cap::Admin, false).expect("the session holds");
        // Rotated with a grace: the old key's session holds until the grace ends.
        let mut keyring = optio_cluster::keyring::load(&path).expect("the keyring");
        let mut entity = keyring.get("client.admin").expect("admin").clone();
        let until = now_ms() / 1000 + 3600;
        entity.previous = Some((entity.key.clone(), until));
        entity.key = Key::generate().expect("a key");
        keyring.insert(entity.clone());
        optio_cluster::keyring::save(&keyring, &path).expect("saved");
        // (The keyring is read again when its modification time or length changes.)
        std::thread::sleep(Duration::from_millis(20));
        sessions.check(Some(&token), None, Cap::Admin, false).expect("within the grace");
        entity.previous = None;
        keyring.insert(entity);
        optio_cluster::keyring::save(&keyring, &path).expect("saved");
        assert!(matches!(
            sessions.check(Some(&token), None, Cap::Admin, false),
            Err(Refusal::Unauthenticated(_))
        ));
        assert!(matches!(sessions.login(&login), Err(Refusal::Unauthenticated(_))));
    }

    #[test]
    fn the_cookie_token_is_found_among_others() {
        assert_eq!(cookie_token(Some("a=b; optio_console=abc; c=d")), Some("abc"));
        assert_eq!(cookie_token(Some("optio_console=")), None);
        assert_eq!(cookie_token(None), None);
    }
}
