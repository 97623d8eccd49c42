//! Authentication: entities, their keys and capabilities (the keyring), and the signature
//! every request carries.
//!
//! **Entities.** `client.NAME` (a person's or a program's identity) and `server.NAME` (one
//! per server). Each has a 256-bit secret key and one capability: `read` (get, probe, list,
//! status), `write` (read, plus put, delete and choice records), `admin` (everything: scrub,
//! metrics, unconditional purges) or `server` (everything, for the traffic between servers:
//! migration, catching up, scrubbing's repairs). A key may have a previous key still accepted
//! until a time (rotation without downtime).
//!
//! **The signature.** A request carries
//! `x-optio-auth: OPTIO1 id=ENTITY,ts=UNIX_MS,nonce=32_HEX,sig=64_HEX`, where `sig` is the
//! keyed BLAKE3 hash (a MAC) under the entity's key of the canonical request:
//!
//! ```text
//! OPTIO1\n METHOD\n PATH?QUERY\n TS\n NONCE\n ENTITY\n
//! name:value\n   (every x-optio-* header but x-optio-auth, and range; sorted)
//! ```
//!
//! A request with a body also carries `x-optio-content-blake3` (the BLAKE3 hash of the body,
//! hex), which is signed like every `x-optio-*` header; the server hashes the body as it
//! reads it and refuses it unless the hashes match, before the body has any effect. The
//! server refuses a timestamp outside its window (± [`WINDOW_MS`] by default) and a nonce it
//! has seen (its replay cache covers the window), so a captured request cannot be replayed.
//!
//! **Client certificates.** Over mutual TLS an unsigned request is the entity its client
//! certificate names, but only when the keyring records that certificate for the entity: the
//! SHA-256 fingerprint of its DER encoding ([`CertFingerprint`]; what `openssl x509 -noout
//! -fingerprint -sha256` prints). Rotating an entity revokes its certificates (at once, or at
//! the end of the rotation's grace) and removing it drops them, so a stolen certificate dies
//! with the key it was issued beside. An entity with no certificate recorded (every entity of
//! a keyring written before certificates were recorded) is refused by certificate.
//!
//! **Files.** This module holds a keyring's text ([`Keyring::parse`], [`Keyring::to_toml`])
//! and does no I/O; `optio_cluster::keyring` reads and writes keyring and key files.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

/// The request header carrying the signature.
pub const AUTH_HEADER: &str = "x-optio-auth";
/// The request header carrying the body's BLAKE3 hash (hex).
pub const CONTENT_HASH_HEADER: &str = "x-optio-content-blake3";
/// The scheme name at the start of [`AUTH_HEADER`].
pub const SCHEME: &str = "OPTIO1";
/// How far a request's timestamp may be from the server's clock, by default.
pub const WINDOW_MS: u64 = 30_000;
/// Longest [`AUTH_HEADER`] accepted.
pub const HEADER_BYTES_MAX: usize = 512;
/// Longest entity name.
pub const NAME_BYTES_MAX: usize = 64;
/// The default client entity.
pub const ADMIN: &str = "client.admin";
/// Most client certificates recorded for one entity at a time (and as many from before its
/// last rotation, during the grace).
pub const CERTS_PER_ENTITY_MAX: usize = 8;

/// What an entity may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cap {
    /// Get, probe, list, status.
    Read,
    /// Read, plus put, delete and choice records.
    Write,
    /// Write, plus the S3 gateway's own state: keys under [`crate::GATEWAY_PREFIX`] (users,
    /// secrets, buckets, multipart uploads), which no lesser capability reads, lists or writes.
    Gateway,
    /// Everything: scrub, metrics, purges.
    Admin,
    /// Everything, as a server: migration, catching up.
    Server,
}

impl Cap {
    /// Whether an entity with this capability may do what needs `need`.
    pub fn allows(self, need: Cap) -> bool {
        match self {
            Cap::Admin | Cap::Server => true,
            Cap::Gateway => matches!(need, Cap::Read | Cap::Write | Cap::Gateway),
            Cap::Write => matches!(need, Cap::Read | Cap::Write),
            Cap::Read => need == Cap::Read,
        }
    }

    /// The capability named `name`.
    pub fn parse(name: &str) -> Result<Cap, AuthError> {
        match name {
            "read" => Ok(Cap::Read),
            "write" => Ok(Cap::Write),
            "gateway" => Ok(Cap::Gateway),
            "admin" => Ok(Cap::Admin),
            "server" => Ok(Cap::Server),
            other => Err(AuthError::Keyring(format!(
                "unknown capability '{other}': use read, write, gateway, admin or server"
            ))),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Cap::Read => "read",
            Cap::Write => "write",
            Cap::Gateway => "gateway",
            Cap::Admin => "admin",
            Cap::Server => "server",
        }
    }
}

impl fmt::Display for Cap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A 256-bit secret key. Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; 32]);

impl Key {
    /// A new random key (from the operating system's generator).
    pub fn generate() -> Result<Key, AuthError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| AuthError::Keyring(format!("cannot draw a random key: {e}")))?;
        Ok(Key(bytes))
    }

    /// The key as base64 (what key files hold).
    pub fn to_base64(&self) -> String {
        BASE64.encode(self.0)
    }

    /// Parses base64.
    pub fn from_base64(text: &str) -> Result<Key, AuthError> {
        let bytes = BASE64
            .decode(text.trim())
            .map_err(|e| AuthError::Keyring(format!("a key is not valid base64: {e}")))?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            AuthError::Keyring(format!("a key is {} bytes; keys are 32 bytes", b.len()))
        })?;
        Ok(Key(bytes))
    }

    fn mac(&self, text: &[u8]) -> blake3::Hash {
        blake3::keyed_hash(&self.0, text)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<secret>)")
    }
}

/// One entity of a keyring.
#[derive(Clone, Debug)]
pub struct Entity {
    /// `client.NAME` or `server.NAME`.
    pub name: String,
    /// Its key.
    pub key: Key,
    /// What it may do.
    pub cap: Cap,
    /// The key it had before its last rotation, accepted until the given Unix time (s).
    pub previous: Option<(Key, u64)>,
}

/// The SHA-256 hash of a certificate's DER encoding: how the keyring names the client
/// certificates it accepts. Shown as 64 lowercase hex digits; parsed from that or from
/// OpenSSL's `AB:CD:…` form.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CertFingerprint([u8; 32]);

impl CertFingerprint {
    /// The fingerprint of the certificate `der` (its DER encoding).
    pub fn of_der(der: &[u8]) -> CertFingerprint {
        use sha2::Digest as _;
        CertFingerprint(sha2::Sha256::digest(der).into())
    }

    /// Parses 64 hex digits, with or without a `:` between bytes, in either case.
    pub fn parse(text: &str) -> Result<CertFingerprint, AuthError> {
        let digits: String = text.trim().chars().filter(|c| *c != ':').collect();
        let invalid = || {
            AuthError::Keyring(format!(
                "'{text}' is not a SHA-256 certificate fingerprint (64 hex digits)"
            ))
        };
        if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid());
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).map_err(|_| invalid())?;
        }
        Ok(CertFingerprint(bytes))
    }

    /// 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        crate::hex::hex_bytes(&self.0)
    }
}

impl fmt::Display for CertFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for CertFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CertFingerprint({})", self.to_hex())
    }
}

/// The client certificates the keyring records for one entity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertPins {
    /// Those issued since its last rotation.
    pub current: Vec<CertFingerprint>,
    /// Those issued before it, accepted until the given Unix time (s): the rotation's grace.
    pub previous: Option<(Vec<CertFingerprint>, u64)>,
}

impl CertPins {
    /// Whether the certificate `fingerprint` is accepted at `now_secs`.
    pub fn accepts(&self, fingerprint: &CertFingerprint, now_secs: u64) -> bool {
        self.current.contains(fingerprint)
            || self
                .previous
                .as_ref()
                .is_some_and(|(old, until)| now_secs < *until && old.contains(fingerprint))
    }

    fn is_empty(&self) -> bool {
        self.current.is_empty() && self.previous.is_none()
    }
}

/// The keyring file's form.
#[derive(Debug, Default, Serialize, Deserialize)]
struct KeyringFile {
    #[serde(default, rename = "entity")]
    entities: Vec<EntityFile>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntityFile {
    name: String,
    key: String,
    caps: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous_until: Option<u64>,
    /// SHA-256 fingerprints of its client certificates (hex).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    certs: Vec<String>,
    /// Those of its certificates from before its last rotation…
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    previous_certs: Vec<String>,
    /// … accepted until this Unix time (s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous_certs_until: Option<u64>,
}

/// Entities by name: the cluster's keyring (every entity; servers and `optio auth` use it), or
/// a client's key file (its own entity only).
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    entities: BTreeMap<String, Entity>,
    /// The client certificates recorded for each entity (absent: none).
    certs: BTreeMap<String, CertPins>,
}

/// Checks an entity name: `client.NAME` or `server.NAME`, NAME of letters, digits, `-`, `_`
/// and `.`, 64 bytes at most in all.
pub fn validate_name(name: &str) -> Result<(), AuthError> {
    let ok_kind = name.starts_with("client.") || name.starts_with("server.");
    let rest = name.split_once('.').map_or("", |(_, r)| r);
    let ok_chars =
        rest.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok_kind || rest.is_empty() || !ok_chars || name.len() > NAME_BYTES_MAX {
        return Err(AuthError::Keyring(format!(
            "'{name}' is not an entity name: use client.NAME or server.NAME (letters, digits, \
             '-', '_', '.'; at most {NAME_BYTES_MAX} bytes)"
        )));
    }
    Ok(())
}

impl Keyring {
    /// An empty keyring.
    pub fn new() -> Keyring {
        Keyring::default()
    }

    /// Parses a keyring (or key file) from TOML; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Keyring, AuthError> {
        let file: KeyringFile = toml::from_str(text)
            .map_err(|e| AuthError::Keyring(format!("{source} is not a keyring: {e}")))?;
        let mut keyring = Keyring::new();
        for entity in file.entities {
            let context =
                |e: AuthError| AuthError::Keyring(format!("{source}: {}: {e}", entity.name));
            validate_name(&entity.name)
                .map_err(|e| AuthError::Keyring(format!("{source}: {e}")))?;
            let key = Key::from_base64(&entity.key).map_err(context)?;
            let cap = Cap::parse(&entity.caps).map_err(context)?;
            let previous = match (&entity.previous_key, entity.previous_until) {
                (Some(k), Some(until)) => Some((Key::from_base64(k).map_err(context)?, until)),
                (None, None) => None,
                _ => {
                    return Err(AuthError::Keyring(format!(
                        "{source}: {}: previous_key and previous_until go together",
                        entity.name
                    )));
                }
            };
            let pins = parse_pins(&entity).map_err(context)?;
            let name = entity.name.clone();
            if keyring.entities.insert(name.clone(), Entity { name, key, cap, previous }).is_some()
            {
                return Err(AuthError::Keyring(format!("{source}: {} appears twice", entity.name)));
            }
            if !pins.is_empty() {
                keyring.certs.insert(entity.name.clone(), pins);
            }
        }
        Ok(keyring)
    }

    /// The keyring as TOML (with the keys: write it only to a 0600 file, as
    /// `optio_cluster::keyring::save` does).
    pub fn to_toml(&self) -> String {
        let file = KeyringFile {
            entities: self
                .entities
                .values()
                .map(|e| {
                    let pins = self.certs.get(&e.name);
                    let hex = |list: &[CertFingerprint]| list.iter().map(|f| f.to_hex()).collect();
                    let previous = pins.and_then(|p| p.previous.as_ref());
                    EntityFile {
                        name: e.name.clone(),
                        key: e.key.to_base64(),
                        caps: e.cap.name().to_string(),
                        previous_key: e.previous.as_ref().map(|(k, _)| k.to_base64()),
                        previous_until: e.previous.as_ref().map(|(_, until)| *until),
                        certs: pins.map(|p| hex(&p.current)).unwrap_or_default(),
                        previous_certs: previous.map(|(old, _)| hex(old)).unwrap_or_default(),
                        previous_certs_until: previous.map(|(_, until)| *until),
                    }
                })
                .collect(),
        };
        format!(
            "# Optio keyring: secret keys. Keep this file private (mode 0600).\n{}",
            toml::to_string(&file).expect("a keyring serialises")
        )
    }

    /// The entity named `name`.
    pub fn get(&self, name: &str) -> Option<&Entity> {
        self.entities.get(name)
    }

    /// Every entity, by name.
    pub fn entities(&self) -> impl Iterator<Item = &Entity> {
        self.entities.values()
    }

    /// Adds (or replaces) an entity.
    pub fn insert(&mut self, entity: Entity) {
        self.entities.insert(entity.name.clone(), entity);
    }

    /// Removes an entity, and the certificates recorded for it; whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        self.certs.remove(name);
        self.entities.remove(name).is_some()
    }

    /// The client certificates recorded for `name` (none: empty).
    pub fn certificates(&self, name: &str) -> CertPins {
        self.certs.get(name).cloned().unwrap_or_default()
    }

    /// Records the client certificate `fingerprint` for the entity `name` (already there: no
    /// change). At most [`CERTS_PER_ENTITY_MAX`] per entity.
    pub fn record_certificate(
        &mut self,
        name: &str,
        fingerprint: CertFingerprint,
    ) -> Result<(), AuthError> {
        if !self.entities.contains_key(name) {
            return Err(AuthError::Keyring(format!(
                "no entity {name} to record a certificate for (add it with `optio auth add`)"
            )));
        }
        let pins = self.certs.entry(name.to_string()).or_default();
        if pins.current.contains(&fingerprint) {
            return Ok(());
        }
        if pins.current.len() >= CERTS_PER_ENTITY_MAX {
            return Err(AuthError::Keyring(format!(
                "{name} has {CERTS_PER_ENTITY_MAX} certificates recorded already, the most it \
                 may have: `optio auth rotate {name}` revokes them"
            )));
        }
        pins.current.push(fingerprint);
        Ok(())
    }

    /// Forgets the certificate `fingerprint` of `name` (one being replaced); whether it was
    /// recorded.
    pub fn forget_certificate(&mut self, name: &str, fingerprint: &CertFingerprint) -> bool {
        let Some(pins) = self.certs.get_mut(name) else { return false };
        let before = pins.current.len();
        pins.current.retain(|f| f != fingerprint);
        let forgot = pins.current.len() < before;
        if pins.is_empty() {
            self.certs.remove(name);
        }
        forgot
    }

    /// Revokes every certificate of `name`: at once (`until: None`), or from the Unix time
    /// `until` (s) on — a rotation's grace, which replaces any earlier grace's certificates.
    pub fn revoke_certificates(&mut self, name: &str, until: Option<u64>) {
        let Some(pins) = self.certs.remove(name) else { return };
        let pins = CertPins {
            current: Vec::new(),
            previous: until.filter(|_| !pins.current.is_empty()).map(|u| (pins.current, u)),
        };
        if !pins.is_empty() {
            self.certs.insert(name.to_string(), pins);
        }
    }

    /// The entity a client certificate names (`name`, its common name) if the keyring records
    /// that certificate (`fingerprint`) for it at `now_secs`.
    pub fn check_certificate(
        &self,
        name: &str,
        fingerprint: &CertFingerprint,
        now_secs: u64,
    ) -> Result<&Entity, AuthError> {
        let entity =
            self.entities.get(name).ok_or_else(|| AuthError::UnknownEntity(name.to_string()))?;
        let pins = self.certs.get(name);
        if pins.is_some_and(|p| p.accepts(fingerprint, now_secs)) {
            return Ok(entity);
        }
        Err(AuthError::UnknownCertificate {
            id: name.to_string(),
            fingerprint: fingerprint.to_hex(),
            none_recorded: pins.is_none_or(|p| p.current.is_empty()),
        })
    }

    /// Number of entities.
    pub fn len(&self) -> usize {
        self.entities.len()
    }

    /// Whether it has no entity.
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }
}

/// The certificates an entity's entry records.
fn parse_pins(entity: &EntityFile) -> Result<CertPins, AuthError> {
    let parse = |list: &[String]| -> Result<Vec<CertFingerprint>, AuthError> {
        if list.len() > CERTS_PER_ENTITY_MAX {
            return Err(AuthError::Keyring(format!(
                "{} certificates recorded; at most {CERTS_PER_ENTITY_MAX}",
                list.len()
            )));
        }
        list.iter().map(|f| CertFingerprint::parse(f)).collect()
    };
    let current = parse(&entity.certs)?;
    let previous = match (entity.previous_certs.is_empty(), entity.previous_certs_until) {
        (false, Some(until)) => Some((parse(&entity.previous_certs)?, until)),
        (true, None) => None,
        _ => {
            return Err(AuthError::Keyring(
                "previous_certs and previous_certs_until go together".into(),
            ));
        }
    };
    Ok(CertPins { current, previous })
}

/// An identity a process signs with.
#[derive(Clone, Debug)]
pub struct Credentials {
    /// The entity.
    pub id: String,
    /// Its key.
    pub key: Key,
}

impl Credentials {
    /// The [`AUTH_HEADER`] value for a request: `headers` are the request's `x-optio-*`
    /// headers (and `range`), [`CONTENT_HASH_HEADER`] included when there is a body.
    pub fn sign(&self, method: &str, path: &str, headers: &[(&str, &str)], ts_ms: u64) -> String {
        let nonce = crate::hex::hex_bytes(&next_nonce(ts_ms));
        self.sign_with_nonce(method, path, headers, ts_ms, &nonce)
    }

    /// [`sign`](Self::sign) with a nonce of the caller's choosing (32 lowercase hex digits):
    /// for tests and tools that replay or probe; a server takes each (entity, nonce) once.
    pub fn sign_with_nonce(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        ts_ms: u64,
        nonce: &str,
    ) -> String {
        let text = canonical(method, path, ts_ms, nonce, &self.id, headers);
        let sig = self.key.mac(text.as_bytes());
        format!("{SCHEME} id={},ts={ts_ms},nonce={nonce},sig={}", self.id, sig.to_hex())
    }
}

/// A fresh nonce that nobody can predict: the BLAKE3 keyed hash of a counter under a 256-bit
/// secret drawn once per process. Knowing other nonces of the same process tells nothing of
/// the next (a plain counter would let anyone who saw one nonce spend the next ones first and
/// make the owner's requests fail as replays); the secret is drawn once, so a request costs
/// no system call.
fn next_nonce(ts_ms: u64) -> [u8; 16] {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let secret = SECRET.get_or_init(|| {
        let mut secret = [0u8; 32];
        if getrandom::fill(&mut secret).is_err() {
            // No entropy source: this process and moment still tell it from the others.
            let unique = format!(
                "{}:{ts_ms}:{:?}:{:?}",
                std::process::id(),
                std::time::Instant::now(),
                std::time::SystemTime::now()
            );
            secret = *blake3::hash(unique.as_bytes()).as_bytes();
        }
        secret
    });
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let hash = blake3::keyed_hash(secret, &count.to_le_bytes());
    let mut nonce = [0u8; 16];
    nonce.copy_from_slice(&hash.as_bytes()[..16]);
    nonce
}

/// The BLAKE3 hash of a body, hex (the [`CONTENT_HASH_HEADER`] value).
pub fn content_hash(body: &[u8]) -> String {
    blake3::hash(body).to_hex().to_string()
}

/// [`content_hash`] of a body received in pieces (in order), without joining them.
pub fn content_hash_of_parts(parts: &[&[u8]]) -> String {
    let mut hasher = blake3::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().to_hex().to_string()
}

/// Whether a header is signed: every `x-optio-*` header but the signature itself, and `range`.
pub fn is_signed_header(name: &str) -> bool {
    (name.starts_with("x-optio-") && name != AUTH_HEADER) || name == "range"
}

/// The text a signature covers.
pub fn canonical(
    method: &str,
    path: &str,
    ts_ms: u64,
    nonce: &str,
    id: &str,
    headers: &[(&str, &str)],
) -> String {
    let mut lines: Vec<(String, &str)> = headers
        .iter()
        .filter(|(name, _)| is_signed_header(&name.to_ascii_lowercase()))
        .map(|(name, value)| (name.to_ascii_lowercase(), *value))
        .collect();
    lines.sort();
    let mut text = format!("{SCHEME}\n{method}\n{path}\n{ts_ms}\n{nonce}\n{id}\n");
    for (name, value) in lines {
        text.push_str(&name);
        text.push(':');
        text.push_str(value);
        text.push('\n');
    }
    text
}

/// A parsed [`AUTH_HEADER`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    /// The entity.
    pub id: String,
    /// Its timestamp, Unix milliseconds.
    pub ts_ms: u64,
    /// 32 hex digits.
    pub nonce: String,
    /// 64 hex digits.
    pub sig: String,
}

impl Signed {
    /// Parses an [`AUTH_HEADER`] value (strictly: the scheme, then exactly `id`, `ts`,
    /// `nonce` and `sig`, in that order).
    pub fn parse(value: &str) -> Result<Signed, AuthError> {
        let malformed = |why: &str| AuthError::Malformed(why.to_string());
        if value.len() > HEADER_BYTES_MAX {
            return Err(malformed("the x-optio-auth header is too long"));
        }
        let rest = value
            .strip_prefix(SCHEME)
            .and_then(|r| r.strip_prefix(' '))
            .ok_or_else(|| malformed("the x-optio-auth header does not start with OPTIO1"))?;
        let mut fields = rest.split(',');
        let mut field = |name: &str| {
            fields
                .next()
                .and_then(|f| f.strip_prefix(name))
                .and_then(|f| f.strip_prefix('='))
                .ok_or_else(|| malformed(&format!("the x-optio-auth header lacks {name}=")))
        };
        let id = field("id")?.to_string();
        let ts = field("ts")?;
        let nonce = field("nonce")?.to_string();
        let sig = field("sig")?.to_string();
        if fields.next().is_some() {
            return Err(malformed("the x-optio-auth header has fields after sig"));
        }
        validate_name(&id).map_err(|_| malformed("the x-optio-auth id is not an entity name"))?;
        let ts_ms = ts
            .parse::<u64>()
            .ok()
            .filter(|_| ts.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| malformed("the x-optio-auth ts is not a number"))?;
        let is_hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !is_hex(&nonce, 32) {
            return Err(malformed("the x-optio-auth nonce is not 32 lowercase hex digits"));
        }
        if !is_hex(&sig, 64) {
            return Err(malformed("the x-optio-auth sig is not 64 lowercase hex digits"));
        }
        Ok(Signed { id, ts_ms, nonce, sig })
    }

    /// Checks the signature over the request with the entity's key (or its previous key
    /// while that is accepted, at `now_ms`), and the timestamp against the `window`.
    /// Returns the entity. Replays are the caller's to check (the nonce).
    pub fn verify<'k>(
        &self,
        keyring: &'k Keyring,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        now_ms: u64,
        window_ms: u64,
    ) -> Result<&'k Entity, AuthError> {
        let entity =
            keyring.get(&self.id).ok_or_else(|| AuthError::UnknownEntity(self.id.clone()))?;
        let skew = self.ts_ms as i128 - now_ms as i128;
        if skew.unsigned_abs() > u128::from(window_ms) {
            // Saturated: a skew beyond i64's milliseconds is only further outside the window.
            let skew_ms = i64::try_from(skew).unwrap_or(if skew < 0 { i64::MIN } else { i64::MAX });
            return Err(AuthError::Expired { id: self.id.clone(), skew_ms });
        }
        let text = canonical(method, path, self.ts_ms, &self.nonce, &self.id, headers);
        let sig = blake3::Hash::from_hex(&self.sig)
            .map_err(|_| AuthError::Malformed("the signature is not hex".into()))?;
        // blake3::Hash compares in constant time.
        if entity.key.mac(text.as_bytes()) == sig {
            return Ok(entity);
        }
        if let Some((previous, until)) = &entity.previous
            && now_ms / 1000 < *until
            && previous.mac(text.as_bytes()) == sig
        {
            return Ok(entity);
        }
        Err(AuthError::BadSignature(self.id.clone()))
    }
}

/// Why a request or a keyring was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No [`AUTH_HEADER`].
    #[error(
        "the request is not signed (no x-optio-auth header): give the client a key (--id, --keyring)"
    )]
    Missing,
    /// An unparseable header.
    #[error("{0}")]
    Malformed(String),
    /// An entity the keyring does not know.
    #[error("unknown entity '{0}' (not in the server's keyring, or removed)")]
    UnknownEntity(String),
    /// The signature does not match (wrong key, or the request was altered).
    #[error(
        "the signature of {0} does not match the request (wrong key, or the request or its body was altered)"
    )]
    BadSignature(String),
    /// The timestamp is outside the window.
    #[error(
        "the request of {id} is {skew_ms} ms from the server's clock, outside its window: check the clocks (NTP), or the request was replayed late"
    )]
    Expired {
        /// The entity.
        id: String,
        /// Request time minus server time.
        skew_ms: i64,
    },
    /// The nonce was seen before.
    #[error("the request of {0} was already received (a replay)")]
    Replayed(String),
    /// The entity may not do this.
    #[error("{id} may {has} but this needs {needs}")]
    Forbidden {
        /// The entity.
        id: String,
        /// Its capability.
        has: Cap,
        /// What the request needs.
        needs: Cap,
    },
    /// A client certificate the keyring does not record for the entity it names (mutual TLS).
    #[error(
        "the client certificate of {id} (SHA-256 {fingerprint}) is not one the keyring records \
         for it{}: issue a new one with `optio auth cert {id}` (or record one your CA issued \
         with `optio auth cert {id} --from CERT.pem`), or sign the requests instead",
        if *none_recorded {
            " (it records none: revoked by a rotation, or a keyring from before certificates \
             were recorded)"
        } else {
            " (revoked by a rotation, or issued elsewhere)"
        }
    )]
    UnknownCertificate {
        /// The entity its common name names.
        id: String,
        /// Its SHA-256 fingerprint (hex).
        fingerprint: String,
        /// Whether the keyring records no certificate at all for the entity.
        none_recorded: bool,
    },
    /// A keyring problem (files, names, keys).
    #[error("{0}")]
    Keyring(String),
    /// The request was signed for another server ([`crate::wire::TARGET`]), or names none.
    #[error(
        "the request of {id} was signed for the server at '{target}', not this one (a request is valid only at the server it was sent to)"
    )]
    WrongTarget {
        /// The entity.
        id: String,
        /// The target it names (empty: none).
        target: String,
    },
    /// The server's keyring file changed and cannot be loaded: until it can, only `admin` and
    /// `server` entities still in the file are served (removals take effect at once).
    #[error(
        "the server cannot load its changed keyring ({0}); until it is fixed only admin and server entities are served"
    )]
    KeyringUnavailable(String),
}

impl AuthError {
    /// The reason's short name (Prometheus label, logs).
    pub fn label(&self) -> &'static str {
        match self {
            AuthError::Missing => "unsigned",
            AuthError::Malformed(_) => "malformed",
            AuthError::UnknownEntity(_) => "unknown_entity",
            AuthError::BadSignature(_) => "bad_signature",
            AuthError::Expired { .. } => "expired",
            AuthError::Replayed(_) => "replayed",
            AuthError::Forbidden { .. } => "forbidden",
            AuthError::UnknownCertificate { .. } => "unknown_certificate",
            AuthError::Keyring(_) => "keyring",
            AuthError::WrongTarget { .. } => "wrong_target",
            AuthError::KeyringUnavailable(_) => "keyring_unavailable",
        }
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation, reason = "test data: small values, or truncation wanted")]
mod tests {
    use super::*;

    fn keyring() -> (Keyring, Credentials) {
        let key = Key::generate().unwrap();
        let mut keyring = Keyring::new();
        keyring.insert(Entity {
            name: "client.a".into(),
            key: key.clone(),
            cap: Cap::Write,
            previous: None,
        });
        (keyring, Credentials { id: "client.a".into(), key })
    }

    #[test]
    fn a_signed_request_verifies_and_any_change_breaks_it() {
        let (keyring, creds) = keyring();
        let headers = [("x-optio-version", "7"), ("x-optio-epoch", "3")];
        let value = creds.sign("PUT", "/v1/dev/0/objects/1/k", &headers, 1_000_000);
        let signed = Signed::parse(&value).unwrap();
        let ok =
            signed.verify(&keyring, "PUT", "/v1/dev/0/objects/1/k", &headers, 1_000_500, WINDOW_MS);
        assert_eq!(ok.unwrap().name, "client.a");
        let verify = |method: &str, path: &str, headers: &[(&str, &str)], now: u64| {
            signed.verify(&keyring, method, path, headers, now, WINDOW_MS).map(|e| e.name.clone())
        };
        assert!(matches!(
            verify("DELETE", "/v1/dev/0/objects/1/k", &headers, 1_000_000),
            Err(AuthError::BadSignature(_))
        ));
        assert!(verify("PUT", "/v1/dev/0/objects/1/j", &headers, 1_000_000).is_err());
        assert!(
            verify(
                "PUT",
                "/v1/dev/0/objects/1/k",
                &[("x-optio-version", "8"), ("x-optio-epoch", "3")],
                1_000_000
            )
            .is_err()
        );
        assert!(
            verify("PUT", "/v1/dev/0/objects/1/k", &[("x-optio-version", "7")], 1_000_000).is_err()
        );
        assert!(
            verify(
                "PUT",
                "/v1/dev/0/objects/1/k",
                &[("x-optio-version", "7"), ("x-optio-epoch", "3"), ("x-optio-purge", "1")],
                1_000_000
            )
            .is_err()
        );
        // Unsigned headers do not matter; header order does not either.
        assert!(
            verify(
                "PUT",
                "/v1/dev/0/objects/1/k",
                &[("x-optio-epoch", "3"), ("user-agent", "x"), ("x-optio-version", "7")],
                1_000_000
            )
            .is_ok()
        );
        assert!(matches!(
            verify("PUT", "/v1/dev/0/objects/1/k", &headers, 1_000_000 + WINDOW_MS + 1),
            Err(AuthError::Expired { .. })
        ));
    }

    /// The same request signed twice at the same millisecond carries two nonces (a server
    /// would refuse the second as a replay otherwise), from threads at once too.
    #[test]
    fn every_signature_has_its_own_nonce() {
        let (_, creds) = keyring();
        let nonces: Vec<String> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        (0..1000)
                            .map(|_| {
                                let value = creds.sign("GET", "/v1/x", &[], 5);
                                Signed::parse(&value).unwrap().nonce
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
        });
        let distinct: std::collections::HashSet<&String> = nonces.iter().collect();
        assert_eq!(distinct.len(), nonces.len());
    }

    #[test]
    fn nonces_cannot_be_predicted_from_earlier_ones() {
        // A counter (or a fixed prefix and a counter) would let whoever saw one nonce spend
        // the next ones first: consecutive nonces must share no half and not count up.
        let (_, creds) = keyring();
        let nonce = |_| {
            let value = creds.sign("GET", "/v1/x", &[], 5);
            u128::from_str_radix(&Signed::parse(&value).unwrap().nonce, 16).unwrap()
        };
        let nonces: Vec<u128> = (0..64).map(nonce).collect();
        for pair in nonces.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert_ne!(a >> 64, b >> 64, "consecutive nonces share their first half");
            assert_ne!(a as u64, b as u64, "consecutive nonces share their second half");
            assert_ne!(a.wrapping_add(1), b, "nonces count up");
        }
    }

    #[test]
    fn a_previous_key_is_accepted_until_its_time() {
        let (mut keyring, old) = keyring();
        let new = Key::generate().unwrap();
        keyring.insert(Entity {
            name: "client.a".into(),
            key: new,
            cap: Cap::Write,
            previous: Some((old.key.clone(), 2_000)),
        });
        let value = old.sign("GET", "/p", &[], 1_500_000);
        let signed = Signed::parse(&value).unwrap();
        assert!(signed.verify(&keyring, "GET", "/p", &[], 1_500_000, WINDOW_MS).is_ok());
        let late = old.sign("GET", "/p", &[], 2_000_000);
        let late = Signed::parse(&late).unwrap();
        assert!(matches!(
            late.verify(&keyring, "GET", "/p", &[], 2_000_000, WINDOW_MS),
            Err(AuthError::BadSignature(_))
        ));
    }

    #[test]
    fn keyrings_round_trip_and_bad_ones_are_refused() {
        let (keyring, _) = keyring();
        let text = keyring.to_toml();
        let back = Keyring::parse(&text, "k").unwrap();
        assert_eq!(back.get("client.a").unwrap().key, keyring.get("client.a").unwrap().key);
        assert!(
            Keyring::parse("[[entity]]\nname = \"bob\"\nkey = \"AA==\"\ncaps = \"read\"\n", "k")
                .is_err()
        );
        let short = "[[entity]]\nname = \"client.b\"\nkey = \"AA==\"\ncaps = \"read\"\n";
        assert!(Keyring::parse(short, "k").unwrap_err().to_string().contains("32 bytes"));
        let caps = text.replace("caps = \"write\"", "caps = \"root\"");
        assert!(Keyring::parse(&caps, "k").unwrap_err().to_string().contains("unknown capability"));
    }

    /// Issue 36 item 9: the keyring records each entity's client certificates; a rotation
    /// revokes them (at once, or after its grace), a removal drops them, and a keyring from
    /// before certificates were recorded accepts none.
    #[test]
    fn recorded_certificates_round_trip_and_are_revoked_with_their_entity() {
        let (mut keyring, _) = keyring();
        let first = CertFingerprint::of_der(b"first certificate");
        let second = CertFingerprint::of_der(b"second certificate");
        // Before any is recorded (an older keyring): refused, and the reason says so.
        let error = keyring.check_certificate("client.a", &first, 100).unwrap_err();
        assert!(
            matches!(&error, AuthError::UnknownCertificate { none_recorded: true, .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("optio auth cert client.a"), "{error}");
        assert_eq!(error.label(), "unknown_certificate");
        keyring.record_certificate("client.a", first).unwrap();
        keyring.record_certificate("client.a", first).unwrap();
        assert_eq!(keyring.certificates("client.a").current, vec![first], "no duplicate");
        assert!(keyring.record_certificate("client.nobody", first).is_err());
        assert_eq!(keyring.check_certificate("client.a", &first, 100).unwrap().name, "client.a");
        assert!(keyring.check_certificate("client.a", &second, 100).is_err());
        // A rotation with a grace: the old certificate until then, the new one from now.
        keyring.revoke_certificates("client.a", Some(200));
        keyring.record_certificate("client.a", second).unwrap();
        let back = Keyring::parse(&keyring.to_toml(), "k").unwrap();
        assert_eq!(back.certificates("client.a"), keyring.certificates("client.a"));
        for keyring in [&keyring, &back] {
            assert!(keyring.check_certificate("client.a", &first, 199).is_ok());
            assert!(keyring.check_certificate("client.a", &first, 200).is_err(), "grace over");
            assert!(keyring.check_certificate("client.a", &second, 10_000).is_ok());
        }
        // Without a grace: nothing is left.
        keyring.revoke_certificates("client.a", None);
        for fingerprint in [&first, &second] {
            assert!(keyring.check_certificate("client.a", fingerprint, 100).is_err());
        }
        keyring.record_certificate("client.a", first).unwrap();
        assert!(keyring.forget_certificate("client.a", &first));
        assert!(keyring.check_certificate("client.a", &first, 100).is_err());
        // Removed: unknown, and its certificates gone with it.
        keyring.record_certificate("client.a", first).unwrap();
        assert!(keyring.remove("client.a"));
        let error = keyring.check_certificate("client.a", &first, 100).unwrap_err();
        assert!(matches!(error, AuthError::UnknownEntity(_)), "{error:?}");
        assert_eq!(keyring.certificates("client.a"), CertPins::default());
    }

    #[test]
    fn fingerprints_parse_in_both_forms_and_bad_ones_are_refused() {
        let fingerprint = CertFingerprint::of_der(b"x");
        let hex = fingerprint.to_hex();
        assert_eq!(CertFingerprint::parse(&hex).unwrap(), fingerprint);
        let openssl: Vec<String> = (0..32).map(|i| hex[2 * i..2 * i + 2].to_uppercase()).collect();
        assert_eq!(CertFingerprint::parse(&openssl.join(":")).unwrap(), fingerprint);
        for bad in ["", "abc", &hex[1..], &format!("{hex}00"), &hex.replace('a', "g")] {
            assert!(CertFingerprint::parse(bad).is_err(), "{bad}");
        }
        // In a keyring: a bad one, too many, or a grace without its time are refused.
        let (keyring, _) = keyring();
        let text = keyring.to_toml();
        let with =
            |extra: &str| text.replace("caps = \"write\"", &format!("caps = \"write\"\n{extra}"));
        assert!(Keyring::parse(&with(&format!("certs = [\"{hex}\"]")), "k").is_ok());
        assert!(Keyring::parse(&with("certs = [\"zz\"]"), "k").is_err());
        let many = vec![format!("\"{hex}\""); CERTS_PER_ENTITY_MAX + 1].join(",");
        let error = Keyring::parse(&with(&format!("certs = [{many}]")), "k").unwrap_err();
        assert!(error.to_string().contains("at most"), "{error}");
        let error =
            Keyring::parse(&with(&format!("previous_certs = [\"{hex}\"]")), "k").unwrap_err();
        assert!(error.to_string().contains("go together"), "{error}");
    }

    #[test]
    fn caps_nest() {
        assert!(Cap::Admin.allows(Cap::Server) && Cap::Server.allows(Cap::Admin));
        assert!(Cap::Write.allows(Cap::Read) && !Cap::Write.allows(Cap::Admin));
        assert!(!Cap::Read.allows(Cap::Write));
    }

    #[test]
    fn keys_are_never_shown() {
        let key = Key::generate().unwrap();
        assert_eq!(format!("{key:?}"), "Key(<secret>)");
    }

    proptest::proptest! {
        #[test]
        fn the_header_parser_never_panics(value in ".{0,600}") {
            let _ = Signed::parse(&value);
        }

        #[test]
        fn headers_made_by_sign_parse_back(ts in 0u64..u64::MAX / 2, name in "[a-z0-9]{1,20}") {
            let creds = Credentials { id: format!("client.{name}"), key: Key::generate().unwrap() };
            let value = creds.sign("GET", "/", &[], ts);
            let signed = Signed::parse(&value).unwrap();
            proptest::prop_assert_eq!(signed.ts_ms, ts);
            proptest::prop_assert_eq!(signed.id, creds.id);
        }
    }
}
