//! The gateway's operations on the cluster, in S3's terms but free of HTTP: users, buckets,
//! objects (inline or striped), listings and multipart uploads. [`crate::s3`] maps the S3 API
//! onto these.
//!
//! Names in the cluster (the metadata pool holds users and buckets; a bucket's pool the rest):
//!
//! | key | what |
//! |---|---|
//! | `.s3/user/{name}` | a user: its access key |
//! | `.s3/key/{access key}` | an access key: its user and secret |
//! | `.s3/bucket/{name}` | a bucket: its id and pool (created at the record's version) |
//! | `{id}/{key}` | an object's head ([`crate::format`]) |
//! | `{id}~d/{stripe}.{index}` | striped data |
//! | `.s3/u/{id}/{key}\u{1}{upload id}` | a multipart upload in progress (listed in S3's order) |
//! | `.s3/p/{id}/{upload id}/{part}` | an uploaded part: its stripe, with its MD5 and size as summary |
//!
//! Every name under `.s3/` ([`optio_proto::GATEWAY_PREFIX`]) is the gateway's own state: the
//! servers let only entities with the `gateway` capability (or `admin`) read, list or write
//! them, so that a cluster key that may read objects cannot read S3 secrets, and one that may
//! write cannot mint S3 credentials or forge uploads. (Multipart uploads begun with a gateway
//! older than this layout, under `{id}~u/` and `{id}~p/`, are not seen: begin them again.)

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt, TryStreamExt};
use md5::{Digest, Md5};
use optio_client::transport::Chunks;
use optio_client::{Client, ClientError};
use optio_proto::{ObjectInfo, validate_key};
use serde::{Deserialize, Serialize};

use crate::format::{
    self, Head, INLINE_BYTES_MAX, Meta, STRIPE_OBJECT_BYTES, Stripe, Summary, decode_head,
    encode_head, head_bytes_needed, random_id,
};

/// Largest single PUT and largest part (S3's 5 GiB).
pub const PUT_BYTES_MAX: u64 = 5 << 30;
/// Largest object (S3's 5 TiB).
pub const OBJECT_BYTES_MAX: u64 = 5 << 40;
/// Smallest part but the last (S3's 5 MiB).
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// Most parts of an upload.
pub const PARTS_MAX: i32 = 10_000;
/// How long a bucket or a user's secret is trusted from memory.
const CACHE_TTL: Duration = Duration::from_secs(5);
/// The first read of a head whose size is not known: enough for any head's metadata of a
/// few parts, and for small objects whole.
const HEAD_READ_BYTES: u64 = 64 << 10;
/// Data objects written or read at once for one request.
const STRIPE_PARALLEL: usize = 4;

const USER_PREFIX: &str = ".s3/user/";
const KEY_PREFIX: &str = ".s3/key/";
const BUCKET_PREFIX: &str = ".s3/bucket/";
const UPLOADS_PREFIX: &str = ".s3/u/";
const PARTS_PREFIX: &str = ".s3/p/";
/// Separates an upload's key from its id in an upload record's name.
const UPLOAD_SEP: char = '\u{1}';

/// What went wrong, in S3's terms.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("the bucket '{0}' does not exist")]
    /// No such bucket.
    NoSuchBucket(String),
    #[error("the bucket '{0}' exists already")]
    /// Bucket exists.
    BucketExists(String),
    #[error("the bucket '{0}' is not empty")]
    /// Bucket not empty.
    BucketNotEmpty(String),
    #[error("no object '{0}'")]
    /// No such key.
    NoSuchKey(String),
    #[error("no multipart upload '{0}'")]
    /// No such upload.
    NoSuchUpload(String),
    #[error("{0}")]
    /// Invalid part.
    InvalidPart(String),
    #[error("the parts are not in ascending order of part number")]
    /// Invalid part order.
    InvalidPartOrder,
    #[error("part {part} is {size} bytes; every part but the last must be at least 5 MiB")]
    /// Entity too small.
    EntityTooSmall {
        /// The part number.
        part: i32,
        /// Its size.
        size: u64,
    },
    #[error("{0} bytes is more than S3 allows here ({1} bytes)")]
    /// A body or object above S3's limit (its size, the limit).
    EntityTooLarge(u64, u64),
    #[error("the key is too long: {0}")]
    /// Key too long.
    KeyTooLong(String),
    #[error("{0}")]
    /// Invalid argument.
    InvalidArgument(String),
    #[error("the Content-MD5 does not match the data received")]
    /// Bad digest.
    BadDigest,
    #[error("the {0} checksum sent does not match the data received")]
    /// An additional checksum (`x-amz-checksum-*`) that does not match.
    BadChecksum(String),
    #[error("no user '{0}'")]
    /// No such user.
    NoSuchUser(String),
    #[error("the user '{0}' exists already")]
    /// User exists.
    UserExists(String),
    #[error("the request body could not be read: {0}")]
    /// The request's body failed while it was read.
    Body(String),
    #[error("{0}")]
    /// What the cluster holds does not decode (damaged, or not the gateway's).
    Corrupt(String),
    #[error(transparent)]
    /// The cluster refused or failed.
    Client(ClientError),
}

impl From<ClientError> for GatewayError {
    fn from(error: ClientError) -> GatewayError {
        GatewayError::Client(error)
    }
}

impl From<format::FormatError> for GatewayError {
    fn from(error: format::FormatError) -> GatewayError {
        GatewayError::Corrupt(error.to_string())
    }
}

type Result<T, E = GatewayError> = std::result::Result<T, E>;

/// A bucket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// The name.
    pub name: String,
    /// Random, so that a bucket made again under an old name sees nothing of the old one.
    pub id: String,
    /// The pool its objects live in.
    pub pool: String,
    /// The user who owns it: only that user may use it (`None`: made with `optio s3 bucket
    /// create` without `--owner`, and every user may use it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Its PublicAccessBlock settings (block public ACLs, ignore public ACLs, block public
    /// policy, restrict public buckets), kept for the clients that set and read them: the
    /// gateway grants no public access whatever they say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_access_block: Option<[bool; 4]>,
}

impl Bucket {
    /// Whether `user` may use the bucket.
    pub fn usable_by(&self, user: &str) -> bool {
        self.owner.as_deref().is_none_or(|owner| owner == user)
    }

    fn head_key(&self, key: &str) -> Result<String> {
        if key.is_empty() {
            return Err(GatewayError::InvalidArgument("an object key may not be empty".into()));
        }
        checked_key(format!("{}/{key}", self.id))
    }

    fn objects_prefix(&self) -> String {
        format!("{}/", self.id)
    }

    fn data_key(&self, stripe: &str, index: u64) -> String {
        format!("{}~d/{stripe}.{index:08x}", self.id)
    }

    fn upload_key(&self, key: &str, upload: &str) -> Result<String> {
        checked_key(format!("{}{key}{UPLOAD_SEP}{upload}", self.uploads_prefix()))
    }

    fn uploads_prefix(&self) -> String {
        format!("{UPLOADS_PREFIX}{}/", self.id)
    }

    fn part_key(&self, upload: &str, part: i32) -> String {
        format!("{}{part:05}", self.parts_prefix(upload))
    }

    fn parts_prefix(&self, upload: &str) -> String {
        format!("{}{upload}/", self.all_parts_prefix())
    }

    fn all_parts_prefix(&self) -> String {
        format!("{PARTS_PREFIX}{}/", self.id)
    }
}

/// An Optio key made from an S3 key, if Optio takes it (its room is the S3 key's less the
/// bucket's prefix).
fn checked_key(full: String) -> Result<String> {
    validate_key(&full).map_err(|e| GatewayError::KeyTooLong(e.to_string()))?;
    Ok(full)
}

/// A stored user.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct UserRecord {
    access_key: String,
}

/// A stored access key.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct KeyRecord {
    user: String,
    secret_key: String,
}

/// A user, as listed.
#[derive(Clone, Debug, Serialize)]
pub struct User {
    /// The name.
    pub name: String,
    /// The access key.
    pub access_key: String,
    /// Creation or last rotation, microseconds since the Unix epoch.
    pub created_micros: u64,
}

/// A new key pair, shown once.
#[derive(Clone, Debug, Serialize)]
pub struct KeyPair {
    /// The access key.
    pub access_key: String,
    /// The secret key.
    pub secret_key: String,
}

/// An object read: its head, when it was written, and how to fetch its bytes.
#[derive(Debug)]
pub struct Opened {
    /// The head.
    pub head: Head,
    /// When it was written (its version: microseconds since the Unix epoch).
    pub modified_micros: u64,
    /// Bytes of the head already read (its inline data may be among them), in the chunks they
    /// arrived in.
    first: Chunks,
    bucket: Bucket,
    head_key: String,
}

impl Opened {
    /// The summary.
    pub fn summary(&self) -> &Summary {
        &self.head.summary
    }

    /// The bytes `range` of the object if they were read with its head (a small object read
    /// whole): no further request is needed.
    pub fn already_read(&self, range: &std::ops::Range<u64>) -> Option<Chunks> {
        if self.head.summary.striped {
            return None;
        }
        let start = self.head.data_offset + range.start as usize;
        let end = self.head.data_offset + range.end as usize;
        (end <= self.first.len()).then(|| self.first.slice(start, end))
    }
}

/// One page of a listing.
#[derive(Debug, Default)]
pub struct ListPage {
    /// Keys (without the bucket), with what the listing knows of them.
    pub objects: Vec<Listed>,
    /// Common prefixes (with a delimiter).
    pub prefixes: Vec<String>,
    /// More follow.
    pub truncated: bool,
    /// Where the next page starts (after this key or prefix), when truncated.
    pub next: Option<String>,
}

/// An object in a listing.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The key.
    pub key: String,
    /// The summary.
    pub summary: Summary,
    /// When it was written (its version: microseconds since the Unix epoch).
    pub modified_micros: u64,
}

/// A multipart upload, as listed.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The key.
    pub key: String,
    /// The upload id.
    pub upload_id: String,
    /// When the upload started (microseconds since the Unix epoch).
    pub initiated_micros: u64,
}

/// An upload's record: what the object gets when it completes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct UploadRecord {
    meta: Meta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
}

/// An uploaded part.
#[derive(Debug, Clone)]
pub struct PartInfo {
    /// The number.
    pub number: i32,
    /// The summary.
    pub summary: Summary,
    /// When it was written (its version: microseconds since the Unix epoch).
    pub modified_micros: u64,
}

/// The gateway: an Optio client and what it remembers.
pub struct Gateway {
    client: Client,
    meta_pool: String,
    buckets: Mutex<HashMap<String, (Bucket, Instant)>>,
    secrets: Mutex<HashMap<String, (KeyRecord, Instant)>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("meta_pool", &self.meta_pool).finish_non_exhaustive()
    }
}

fn json<T: Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("records serialise"))
}

fn parse<T: for<'a> Deserialize<'a>>(what: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| GatewayError::Corrupt(format!("{what}: {e}")))
}

fn summary_of(info: &ObjectInfo) -> Option<Summary> {
    info.summary.as_deref().and_then(Summary::from_hex)
}

/// Makes an access key (20 upper-case letters and digits, as AWS's) or a secret (40 chars).
fn random_text(len: usize, alphabet: &[u8]) -> String {
    let mut raw = vec![0u8; len];
    getrandom::fill(&mut raw).expect("the system's random number generator works");
    raw.iter().map(|b| alphabet[usize::from(*b) % alphabet.len()] as char).collect()
}

fn new_key_pair() -> KeyPair {
    const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    const SECRET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    KeyPair {
        access_key: format!("OPT{}", random_text(17, UPPER)),
        secret_key: random_text(40, SECRET),
    }
}

/// Checks a user name: 1 to 64 letters, digits and `_.@-`.
pub fn validate_user_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.@-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(GatewayError::InvalidArgument(format!(
            "'{name}' is not a valid user name: use 1 to 64 letters, digits and _ . @ -"
        )))
    }
}

impl Gateway {
    /// A gateway on `client`, keeping users and buckets in `meta_pool`.
    pub fn new(client: Client, meta_pool: &str) -> Result<Gateway> {
        client.map().pool_by_name(meta_pool).ok_or_else(|| {
            GatewayError::InvalidArgument(format!(
                "the cluster has no pool '{meta_pool}' for the gateway's users and buckets"
            ))
        })?;
        Ok(Gateway {
            client,
            meta_pool: meta_pool.to_string(),
            buckets: Mutex::new(HashMap::new()),
            secrets: Mutex::new(HashMap::new()),
        })
    }

    /// The Optio client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn get_opt(&self, pool: &str, key: &str) -> Result<Option<(ObjectInfo, Bytes)>> {
        match self.client.get_range(pool, key, None).await {
            Ok(found) => Ok(Some(found)),
            Err(ClientError::NotFound { .. }) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    async fn delete_quiet(&self, pool: &str, key: &str) -> Result<()> {
        match self.client.delete(pool, key).await {
            Ok(()) | Err(ClientError::NotFound { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Every object of `pool` under `prefix` (for small namespaces: users, buckets, parts).
    async fn list_all(&self, pool: &str, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut cursor = self.client.list_cursor(pool, prefix, None, 1000)?;
        let mut out = Vec::new();
        while let Some(info) = cursor.next(&self.client).await? {
            out.push(info);
        }
        Ok(out)
    }

    // ---- users ----

    /// Makes a user and its first key pair.
    pub async fn create_user(&self, name: &str) -> Result<KeyPair> {
        validate_user_name(name)?;
        if self.get_opt(&self.meta_pool, &format!("{USER_PREFIX}{name}")).await?.is_some() {
            return Err(GatewayError::UserExists(name.to_string()));
        }
        self.issue_key(name).await
    }

    async fn issue_key(&self, name: &str) -> Result<KeyPair> {
        let pair = new_key_pair();
        let key = KeyRecord { user: name.to_string(), secret_key: pair.secret_key.clone() };
        let pool = &self.meta_pool;
        self.client.put(pool, &format!("{KEY_PREFIX}{}", pair.access_key), json(&key)).await?;
        let user = UserRecord { access_key: pair.access_key.clone() };
        self.client.put(pool, &format!("{USER_PREFIX}{name}"), json(&user)).await?;
        Ok(pair)
    }

    async fn user(&self, name: &str) -> Result<(UserRecord, u64)> {
        validate_user_name(name)?;
        match self.get_opt(&self.meta_pool, &format!("{USER_PREFIX}{name}")).await? {
            Some((info, bytes)) => Ok((parse("a user record", &bytes)?, info.version.0)),
            None => Err(GatewayError::NoSuchUser(name.to_string())),
        }
    }

    /// Every user.
    pub async fn users(&self) -> Result<Vec<User>> {
        let mut out = Vec::new();
        for info in self.list_all(&self.meta_pool, USER_PREFIX).await? {
            let name = info.key[USER_PREFIX.len()..].to_string();
            let (record, created_micros) = self.user(&name).await?;
            out.push(User { name, access_key: record.access_key, created_micros });
        }
        Ok(out)
    }

    /// Removes a user and its key.
    pub async fn remove_user(&self, name: &str) -> Result<()> {
        let (record, _) = self.user(name).await?;
        self.delete_quiet(&self.meta_pool, &format!("{KEY_PREFIX}{}", record.access_key)).await?;
        self.delete_quiet(&self.meta_pool, &format!("{USER_PREFIX}{name}")).await?;
        Ok(())
    }

    /// Gives a user a new key pair; the old one stops working (on every gateway within
    /// [`CACHE_TTL`], the time a gateway trusts a secret it has read).
    pub async fn rotate_user(&self, name: &str) -> Result<KeyPair> {
        let (old, _) = self.user(name).await?;
        let pair = self.issue_key(name).await?;
        self.delete_quiet(&self.meta_pool, &format!("{KEY_PREFIX}{}", old.access_key)).await?;
        self.secrets.lock().expect("secrets lock").remove(&old.access_key);
        Ok(pair)
    }

    /// The secret of an access key, if it is one.
    pub async fn secret_of(&self, access_key: &str) -> Result<Option<String>> {
        Ok(self.key_record(access_key).await?.map(|record| record.secret_key))
    }

    /// The user an access key belongs to, if it is one.
    pub async fn user_of(&self, access_key: &str) -> Result<Option<String>> {
        Ok(self.key_record(access_key).await?.map(|record| record.user))
    }

    async fn key_record(&self, access_key: &str) -> Result<Option<KeyRecord>> {
        if let Some((record, at)) = self.secrets.lock().expect("secrets lock").get(access_key)
            && at.elapsed() < CACHE_TTL
        {
            return Ok(Some(record.clone()));
        }
        let plausible = !access_key.is_empty()
            && access_key.len() <= 128
            && access_key.bytes().all(|b| b.is_ascii_alphanumeric());
        if !plausible {
            return Ok(None);
        }
        let key = format!("{KEY_PREFIX}{access_key}");
        let Some((_, bytes)) = self.get_opt(&self.meta_pool, &key).await? else {
            self.secrets.lock().expect("secrets lock").remove(access_key);
            return Ok(None);
        };
        let record: KeyRecord = parse("an access key record", &bytes)?;
        self.secrets
            .lock()
            .expect("secrets lock")
            .insert(access_key.to_string(), (record.clone(), Instant::now()));
        Ok(Some(record))
    }

    // ---- buckets ----

    /// Makes a bucket in `pool` (default: the metadata pool), owned by `owner` (`None`: every
    /// user's). Making again a bucket one owns changes nothing and succeeds, as in S3's
    /// `us-east-1`; another's is [`GatewayError::BucketExists`].
    pub async fn create_bucket(
        &self,
        name: &str,
        pool: Option<&str>,
        owner: Option<&str>,
    ) -> Result<Bucket> {
        let pool = pool.unwrap_or(&self.meta_pool);
        if self.client.map().pool_by_name(pool).is_none() {
            return Err(GatewayError::InvalidArgument(format!(
                "the cluster has no pool '{pool}' (x-optio-pool)"
            )));
        }
        let key = format!("{BUCKET_PREFIX}{name}");
        validate_key(&key).map_err(|e| GatewayError::InvalidArgument(e.to_string()))?;
        if let Some(existing) = self.bucket_record(name).await? {
            if owner.is_some() && existing.owner.as_deref() == owner {
                return Ok(existing);
            }
            return Err(GatewayError::BucketExists(name.to_string()));
        }
        let bucket = Bucket {
            name: name.to_string(),
            id: random_id(6),
            pool: pool.to_string(),
            owner: owner.map(str::to_string),
            public_access_block: None,
        };
        self.client.put(&self.meta_pool, &key, json(&bucket)).await?;
        Ok(self.remember(bucket))
    }

    /// A bucket's record as stored (`None`: no such bucket; the name is not checked).
    async fn bucket_record(&self, name: &str) -> Result<Option<Bucket>> {
        let key = format!("{BUCKET_PREFIX}{name}");
        match self.get_opt(&self.meta_pool, &key).await? {
            Some((_, bytes)) => Ok(Some(parse("a bucket record", &bytes)?)),
            None => {
                self.buckets.lock().expect("buckets lock").remove(name);
                Ok(None)
            }
        }
    }

    /// Keeps a bucket in memory for [`CACHE_TTL`].
    fn remember(&self, bucket: Bucket) -> Bucket {
        self.buckets
            .lock()
            .expect("buckets lock")
            .insert(bucket.name.clone(), (bucket.clone(), Instant::now()));
        bucket
    }

    /// A bucket by name.
    pub async fn bucket(&self, name: &str) -> Result<Bucket> {
        if let Some((bucket, at)) = self.buckets.lock().expect("buckets lock").get(name)
            && at.elapsed() < CACHE_TTL
        {
            return Ok(bucket.clone());
        }
        if validate_key(&format!("{BUCKET_PREFIX}{name}")).is_err() {
            return Err(GatewayError::NoSuchBucket(name.to_string()));
        }
        match self.bucket_record(name).await? {
            Some(bucket) => Ok(self.remember(bucket)),
            None => Err(GatewayError::NoSuchBucket(name.to_string())),
        }
    }

    /// Every bucket, with its creation time (microseconds), in name order.
    pub async fn buckets(&self) -> Result<Vec<(String, u64)>> {
        Ok(self
            .list_all(&self.meta_pool, BUCKET_PREFIX)
            .await?
            .into_iter()
            .map(|info| (info.key[BUCKET_PREFIX.len()..].to_string(), info.version.0))
            .collect())
    }

    /// Sets (or, with `None`, removes) a bucket's PublicAccessBlock settings.
    pub async fn set_public_access_block(
        &self,
        name: &str,
        settings: Option<[bool; 4]>,
    ) -> Result<Bucket> {
        let Some(mut bucket) = self.bucket_record(name).await? else {
            return Err(GatewayError::NoSuchBucket(name.to_string()));
        };
        bucket.public_access_block = settings;
        let key = format!("{BUCKET_PREFIX}{name}");
        self.client.put(&self.meta_pool, &key, json(&bucket)).await?;
        Ok(self.remember(bucket))
    }

    /// Removes an empty bucket (multipart uploads in progress are aborted).
    pub async fn delete_bucket(&self, name: &str) -> Result<()> {
        let bucket = self.bucket(name).await?;
        let mut objects =
            self.client.list_cursor(&bucket.pool, &bucket.objects_prefix(), None, 1)?;
        if objects.next(&self.client).await?.is_some() {
            return Err(GatewayError::BucketNotEmpty(name.to_string()));
        }
        for upload in self.list_uploads(&bucket, "", None, usize::MAX).await?.0 {
            self.abort_upload(&bucket, &upload.key, &upload.upload_id).await?;
        }
        self.delete_quiet(&self.meta_pool, &format!("{BUCKET_PREFIX}{name}")).await?;
        self.buckets.lock().expect("buckets lock").remove(name);
        Ok(())
    }

    // ---- objects ----

    /// Stores an object from `body` (at most [`PUT_BYTES_MAX`] bytes), placed by `policy` if
    /// given; `check` is given the data's MD5 once the body is in, before anything is
    /// published, and may refuse it (Content-MD5, S3's additional checksums). Returns its
    /// summary and version.
    pub async fn put_object<S, E>(
        &self,
        bucket: &Bucket,
        key: &str,
        body: S,
        meta: Meta,
        policy: Option<&str>,
        check: impl FnOnce(&[u8; 16]) -> Result<()>,
    ) -> Result<(Summary, u64)>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let head_key = bucket.head_key(key)?;
        let head = encode_head(&Summary::default(), &meta);
        let received = self.receive(bucket, body, PUT_BYTES_MAX, Some(&head), policy).await?;
        let (md5, size) = (received.md5, received.size);
        if let Err(error) = check(&md5) {
            self.drop_stripes(bucket, &received.stripes).await;
            return Err(error);
        }
        let summary = Summary { md5, parts: 0, size, striped: !received.stripes.is_empty() };
        let meta = Meta { stripes: received.stripes, ..meta };
        self.publish(bucket, &head_key, summary, &meta, received.inline, policy).await
    }

    /// Writes a head, replacing whatever the key held (the stripes of a striped object it
    /// replaces are deleted after).
    async fn publish(
        &self,
        bucket: &Bucket,
        head_key: &str,
        summary: Summary,
        meta: &Meta,
        inline: Option<BytesMut>,
        policy: Option<&str>,
    ) -> Result<(Summary, u64)> {
        let old = self.old_stripes(bucket, head_key).await?;
        let data = match inline {
            // The head was encoded before the data came (its summary is filled in now), and
            // the data received after it: no copy.
            Some(mut head_and_data) => {
                format::patch_summary(&mut head_and_data, &summary);
                head_and_data.freeze()
            }
            None => Bytes::from(encode_head(&summary, meta)),
        };
        let report = match self.put_placed(&bucket.pool, head_key, data, policy).await {
            Ok(report) => report,
            Err(error) => {
                self.drop_stripes(bucket, &meta.stripes).await;
                return Err(error.into());
            }
        };
        self.drop_stripes(bucket, &old).await;
        Ok((summary, report.version.0))
    }

    /// The stripes of the striped object at `head_key`, if one is stored there.
    async fn old_stripes(&self, bucket: &Bucket, head_key: &str) -> Result<Vec<Stripe>> {
        let info = match self.client.stat(&bucket.pool, head_key).await {
            Ok(location) => location.info,
            Err(ClientError::NotFound { .. }) => return Ok(Vec::new()),
            Err(error) => return Err(error.into()),
        };
        if !summary_of(&info).is_some_and(|s| s.striped) {
            return Ok(Vec::new());
        }
        match self.read_head(bucket, head_key).await {
            Ok(opened) => Ok(opened.head.meta.stripes),
            Err(GatewayError::NoSuchKey(_)) => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    /// Deletes stripes' data objects; failures are logged and left for a later sweep.
    async fn drop_stripes(&self, bucket: &Bucket, stripes: &[Stripe]) {
        let keys: Vec<String> = stripes
            .iter()
            .flat_map(|s| (0..s.objects()).map(|i| bucket.data_key(&s.id, i)))
            .collect();
        let pool = bucket.pool.as_str();
        futures_util::stream::iter(keys)
            .map(|key| self.delete_logged(pool, key))
            .buffer_unordered(STRIPE_PARALLEL * 2)
            .collect::<Vec<()>>()
            .await;
    }

    async fn delete_logged(&self, pool: &str, key: String) {
        if let Err(error) = self.delete_quiet(pool, &key).await {
            tracing::warn!(key, %error, "could not delete a stripe's data object");
        }
    }

    /// Writes an object placed by `policy` if given, else by the pool's.
    async fn put_placed(
        &self,
        pool: &str,
        key: &str,
        data: Bytes,
        policy: Option<&str>,
    ) -> Result<optio_client::PutReport, ClientError> {
        match policy {
            Some(policy) => self.client.put_with_policy(pool, key, data, policy).await,
            None => self.client.put(pool, key, data).await,
        }
    }

    /// Writes one data object of a stripe, placed as its object's head is.
    async fn put_piece(
        &self,
        pool: &str,
        key: String,
        piece: Bytes,
        policy: Option<&str>,
    ) -> Result<(), ClientError> {
        self.put_placed(pool, &key, piece, policy).await.map(|_| ())
    }

    /// Reads a request body: after `head` (the encoded head, its summary to be filled in)
    /// when it fits inline, else — and always without a head — into a new stripe, whose data
    /// objects `policy` places if given.
    async fn receive<S, E>(
        &self,
        bucket: &Bucket,
        mut body: S,
        max: u64,
        head: Option<&[u8]>,
        policy: Option<&str>,
    ) -> Result<Received>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut md5 = Md5::new();
        let mut buffer = BytesMut::new();
        let mut size = 0u64;
        let mut stripe: Option<(String, u64)> = head.is_none().then(|| (random_id(16), 0));
        // Bytes of `buffer` that are the head, not data.
        let mut skip = 0;
        if let Some(head) = head {
            buffer.reserve(head.len() + 64 * 1024);
            buffer.extend_from_slice(head);
            skip = head.len();
        }
        let mut writes = futures_util::stream::FuturesUnordered::new();
        let mut failed: Option<GatewayError> = None;
        loop {
            let chunk = match body.next().await {
                Some(Ok(chunk)) => chunk,
                Some(Err(error)) => {
                    failed = Some(GatewayError::Body(error.to_string()));
                    break;
                }
                None => break,
            };
            size += chunk.len() as u64;
            if size > max {
                failed = Some(GatewayError::EntityTooLarge(size, max));
                break;
            }
            md5.update(&chunk);
            buffer.extend_from_slice(&chunk);
            if stripe.is_none() && buffer.len() - skip > INLINE_BYTES_MAX {
                stripe = Some((random_id(16), 0));
                let _ = buffer.split_to(skip);
                skip = 0;
            }
            while let Some((id, next)) = &mut stripe
                && buffer.len() as u64 >= STRIPE_OBJECT_BYTES
            {
                let piece = buffer.split_to(STRIPE_OBJECT_BYTES as usize).freeze();
                let key = bucket.data_key(id, *next);
                *next += 1;
                writes.push(self.put_piece(&bucket.pool, key, piece, policy));
                while writes.len() >= STRIPE_PARALLEL {
                    if let Some(Err(error)) = writes.next().await {
                        failed = Some(error.into());
                    }
                }
                if failed.is_some() {
                    break;
                }
            }
            if failed.is_some() {
                break;
            }
        }
        if failed.is_none()
            && let Some((id, next)) = &stripe
            && !buffer.is_empty()
        {
            let key = bucket.data_key(id, *next);
            let piece = std::mem::take(&mut buffer).freeze();
            writes.push(self.put_piece(&bucket.pool, key, piece, policy));
        }
        while let Some(result) = writes.next().await {
            if let Err(error) = result
                && failed.is_none()
            {
                failed = Some(error.into());
            }
        }
        let stripes = match stripe {
            Some((id, _)) => vec![Stripe { id, size }],
            None => Vec::new(),
        };
        if let Some(error) = failed {
            self.drop_stripes(bucket, &stripes).await;
            return Err(error);
        }
        let inline = stripes.is_empty().then_some(buffer);
        Ok(Received { md5: md5.finalize().into(), size, stripes, inline })
    }

    /// Reads an object's head (and, for a small object, its data with it).
    pub async fn open(&self, bucket: &Bucket, key: &str, whole: bool) -> Result<Opened> {
        let head_key = bucket.head_key(key)?;
        if whole {
            let (info, chunks) = match self.client.get_chunks(&bucket.pool, &head_key, None).await {
                Ok(found) => found,
                Err(ClientError::NotFound { .. }) => {
                    return Err(GatewayError::NoSuchKey(key.to_string()));
                }
                Err(error) => return Err(error.into()),
            };
            // The head (magic, summary, metadata) in one buffer; the data stays in its chunks.
            let fixed = chunks.slice(0, format::FIXED_BYTES).to_bytes();
            let needed = head_bytes_needed(&fixed)?;
            let head = decode_head(&chunks.slice(0, needed).to_bytes())?;
            let inline = chunks.len() - head.data_offset;
            if !head.summary.striped && inline as u64 != head.summary.size {
                return Err(GatewayError::Corrupt(format!(
                    "the head of {key} holds {inline} bytes of data where its summary says {}",
                    head.summary.size
                )));
            }
            return Ok(Opened {
                head,
                modified_micros: info.version.0,
                first: chunks,
                bucket: bucket.clone(),
                head_key,
            });
        }
        self.read_head(bucket, &head_key).await.map_err(|e| match e {
            GatewayError::NoSuchKey(_) => GatewayError::NoSuchKey(key.to_string()),
            other => other,
        })
    }

    async fn read_head(&self, bucket: &Bucket, head_key: &str) -> Result<Opened> {
        let first = self.client.get_range(&bucket.pool, head_key, Some((0, HEAD_READ_BYTES - 1)));
        let (info, mut bytes) = match first.await {
            Ok(found) => found,
            Err(ClientError::NotFound { .. }) => {
                return Err(GatewayError::NoSuchKey(head_key.to_string()));
            }
            Err(error) => return Err(error.into()),
        };
        let needed = head_bytes_needed(&bytes)?;
        if needed > bytes.len() && (bytes.len() as u64) < info.size_bytes {
            let (_, rest) = self
                .client
                .get_range(&bucket.pool, head_key, Some((bytes.len() as u64, needed as u64 - 1)))
                .await?;
            let mut all = BytesMut::from(&bytes[..]);
            all.extend_from_slice(&rest);
            bytes = all.freeze();
        }
        let head = decode_head(&bytes)?;
        Ok(Opened {
            head,
            modified_micros: info.version.0,
            first: bytes.into(),
            bucket: bucket.clone(),
            head_key: head_key.to_string(),
        })
    }

    /// The bytes `range` (end exclusive) of an opened object, as a stream of chunks.
    pub fn read(
        &self,
        opened: Opened,
        range: std::ops::Range<u64>,
    ) -> impl Stream<Item = Result<Bytes>> + Send + '_ {
        let Opened { head, first, bucket, head_key, .. } = opened;
        // (Each piece is read in the chunks it arrives in, and they are passed on as they are.)
        let stripes = head.meta.stripes.clone();
        let data_offset = head.data_offset as u64;
        enum Piece {
            Ready(Chunks),
            Inline(u64, u64),
            Data(String, u64, u64),
        }
        let mut pieces = Vec::new();
        if stripes.is_empty() {
            let (start, end) = (data_offset + range.start, data_offset + range.end);
            if end <= first.len() as u64 {
                pieces.push(Piece::Ready(first.slice(start as usize, end as usize)));
            } else if start < end {
                pieces.push(Piece::Inline(start, end));
            }
        } else {
            let mut base = 0u64;
            for stripe in &stripes {
                let (lo, hi) = (range.start.max(base), range.end.min(base + stripe.size));
                if lo < hi {
                    for (index, within, len) in
                        optio_client::volume::split(lo - base, hi - lo, STRIPE_OBJECT_BYTES)
                    {
                        pieces.push(Piece::Data(bucket.data_key(&stripe.id, index), within, len));
                    }
                }
                base += stripe.size;
            }
        }
        let pool = bucket.pool.clone();
        futures_util::stream::iter(pieces)
            .map(move |piece| {
                let pool = pool.clone();
                let head_key = head_key.clone();
                async move {
                    let (key, start, len) = match piece {
                        Piece::Ready(bytes) => return Ok(bytes),
                        Piece::Inline(start, end) => (head_key, start, end - start),
                        Piece::Data(key, start, len) => (key, start, len),
                    };
                    let range = Some((start, start + len - 1));
                    let (_, bytes) = self.client.get_chunks(&pool, &key, range).await.map_err(
                        |e| match e {
                            ClientError::NotFound { .. } => GatewayError::Corrupt(format!(
                                "the data object {key} is missing (the object was overwritten or deleted while it was read)"
                            )),
                            other => other.into(),
                        },
                    )?;
                    if bytes.len() as u64 != len {
                        return Err(GatewayError::Corrupt(format!(
                            "the data object {key} holds {} bytes at {start}, {len} expected",
                            bytes.len()
                        )));
                    }
                    Ok(bytes)
                }
            })
            .buffered(2)
            .map_ok(|chunks| futures_util::stream::iter(chunks.into_chunks().into_iter().map(Ok)))
            .try_flatten()
    }

    /// Deletes an object (nothing if it does not exist).
    pub async fn delete_object(&self, bucket: &Bucket, key: &str) -> Result<()> {
        let head_key = bucket.head_key(key)?;
        let old = self.old_stripes(bucket, &head_key).await?;
        self.delete_quiet(&bucket.pool, &head_key).await?;
        self.drop_stripes(bucket, &old).await;
        Ok(())
    }

    /// Copies an opened object's bytes `range` to `key` in `to` with `meta`, as a single-part
    /// object.
    pub async fn copy_object(
        &self,
        opened: Opened,
        range: std::ops::Range<u64>,
        to: &Bucket,
        key: &str,
        meta: Meta,
    ) -> Result<(Summary, u64)> {
        let head_key = to.head_key(key)?;
        let stream = Box::pin(self.read(opened, range));
        let head = encode_head(&Summary::default(), &meta);
        let received = self.receive(to, stream, PUT_BYTES_MAX, Some(&head), None).await?;
        let summary = Summary {
            md5: received.md5,
            parts: 0,
            size: received.size,
            striped: !received.stripes.is_empty(),
        };
        let meta = Meta { stripes: received.stripes, ..meta };
        self.publish(to, &head_key, summary, &meta, received.inline, None).await
    }

    /// A page of the objects of `bucket` under `prefix`, after `after` (a key or a common
    /// prefix the previous page ended with), rolled up at `delimiter`.
    pub async fn list(
        &self,
        bucket: &Bucket,
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage> {
        let base = bucket.objects_prefix();
        let full_prefix = format!("{base}{prefix}");
        let start = after.filter(|a| *a >= prefix).map(|a| format!("{base}{a}"));
        let mut cursor =
            self.client.list_cursor(&bucket.pool, &full_prefix, start.as_deref(), max_keys)?;
        let delimiter = delimiter.filter(|d| !d.is_empty());
        let mut page = ListPage::default();
        // A common prefix the previous page ended with is not shown again.
        let mut last_prefix: Option<String> = after.map(str::to_string);
        let mut count = 0usize;
        if max_keys == 0 {
            return Ok(page);
        }
        while let Some(info) = cursor.next(&self.client).await? {
            let key = &info.key[base.len()..];
            let rolled = delimiter.and_then(|d| {
                key[prefix.len()..].find(d).map(|at| key[..prefix.len() + at + d.len()].to_string())
            });
            if let Some(common) = &rolled
                && last_prefix.as_deref() == Some(common.as_str())
            {
                cursor.skip_to(&format!("{base}{common}{}", char::MAX));
                continue;
            }
            if count == max_keys {
                page.truncated = true;
                break;
            }
            count += 1;
            match rolled {
                Some(common) => {
                    cursor.skip_to(&format!("{base}{common}{}", char::MAX));
                    page.next = Some(common.clone());
                    last_prefix = Some(common.clone());
                    page.prefixes.push(common);
                }
                None => {
                    let Some(summary) = summary_of(&info) else {
                        tracing::warn!(key = %info.key, "an object without an S3 head in a bucket; not listed");
                        count -= 1;
                        continue;
                    };
                    page.next = Some(key.to_string());
                    page.objects.push(Listed {
                        key: key.to_string(),
                        summary,
                        modified_micros: info.version.0,
                    });
                }
            }
        }
        if !page.truncated {
            page.next = None;
        }
        Ok(page)
    }

    // ---- multipart uploads ----

    /// Starts a multipart upload of `key`; returns its id.
    pub async fn create_upload(
        &self,
        bucket: &Bucket,
        key: &str,
        meta: Meta,
        policy: Option<&str>,
    ) -> Result<String> {
        bucket.head_key(key)?;
        let upload = random_id(16);
        let record = UploadRecord { meta, policy: policy.map(str::to_string) };
        self.client.put(&bucket.pool, &bucket.upload_key(key, &upload)?, json(&record)).await?;
        Ok(upload)
    }

    async fn upload_record(
        &self,
        bucket: &Bucket,
        key: &str,
        upload: &str,
    ) -> Result<UploadRecord> {
        let valid = upload.len() == 32 && upload.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return Err(GatewayError::NoSuchUpload(upload.to_string()));
        }
        match self.get_opt(&bucket.pool, &bucket.upload_key(key, upload)?).await? {
            Some((_, bytes)) => parse("an upload record", &bytes),
            None => Err(GatewayError::NoSuchUpload(upload.to_string())),
        }
    }

    /// Stores part `number` of an upload from `body`; returns its summary (its ETag).
    pub async fn upload_part<S, E>(
        &self,
        bucket: &Bucket,
        key: &str,
        upload: &str,
        number: i32,
        body: S,
        content_md5: Option<[u8; 16]>,
    ) -> Result<Summary>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        if !(1..=PARTS_MAX).contains(&number) {
            return Err(GatewayError::InvalidArgument(format!(
                "part number {number} is not between 1 and {PARTS_MAX}"
            )));
        }
        let record = self.upload_record(bucket, key, upload).await?;
        let policy = record.policy.as_deref();
        let received = self.receive(bucket, body, PUT_BYTES_MAX, None, policy).await?;
        let stripe = received.stripes[0].clone();
        if content_md5.is_some_and(|m| m != received.md5) {
            self.drop_stripes(bucket, std::slice::from_ref(&stripe)).await;
            return Err(GatewayError::BadDigest);
        }
        let summary = Summary { md5: received.md5, parts: 0, size: received.size, striped: true };
        let part_key = bucket.part_key(upload, number);
        let old = self.part_stripe(bucket, &part_key).await?;
        let meta = Meta { stripes: vec![stripe.clone()], ..Meta::default() };
        let record = Bytes::from(encode_head(&summary, &meta));
        if let Err(error) = self.client.put(&bucket.pool, &part_key, record).await {
            self.drop_stripes(bucket, &[stripe]).await;
            return Err(error.into());
        }
        self.drop_stripes(bucket, &old).await;
        Ok(summary)
    }

    /// The stripe a part record names, if it exists.
    async fn part_stripe(&self, bucket: &Bucket, part_key: &str) -> Result<Vec<Stripe>> {
        match self.get_opt(&bucket.pool, part_key).await? {
            Some((_, bytes)) => Ok(decode_head(&bytes)?.meta.stripes),
            None => Ok(Vec::new()),
        }
    }

    /// The parts of an upload, in part-number order.
    pub async fn list_parts(
        &self,
        bucket: &Bucket,
        key: &str,
        upload: &str,
    ) -> Result<Vec<PartInfo>> {
        self.upload_record(bucket, key, upload).await?;
        let prefix = bucket.parts_prefix(upload);
        let mut parts = Vec::new();
        for info in self.list_all(&bucket.pool, &prefix).await? {
            let Ok(number) = info.key[prefix.len()..].parse::<i32>() else { continue };
            let Some(summary) = summary_of(&info) else { continue };
            parts.push(PartInfo { number, summary, modified_micros: info.version.0 });
        }
        Ok(parts)
    }

    /// Completes an upload from `chosen` (part number, ETag as sent) in order.
    pub async fn complete_upload(
        &self,
        bucket: &Bucket,
        key: &str,
        upload: &str,
        chosen: &[(i32, String)],
    ) -> Result<(Summary, u64)> {
        let record = self.upload_record(bucket, key, upload).await?;
        if chosen.is_empty() {
            return Err(GatewayError::InvalidArgument(
                "a multipart upload is completed with at least one part".into(),
            ));
        }
        if chosen.windows(2).any(|w| w[0].0 > w[1].0) {
            return Err(GatewayError::InvalidPartOrder);
        }
        let mut stored: HashMap<i32, (Summary, Stripe)> = HashMap::new();
        for part in self.list_parts(bucket, key, upload).await? {
            let stripes = self.part_stripe(bucket, &bucket.part_key(upload, part.number)).await?;
            if let Some(stripe) = stripes.into_iter().next() {
                stored.insert(part.number, (part.summary, stripe));
            }
        }
        // A part named twice (sent again while its first upload ran) counts once, as the
        // upload stored last, if one of the ETags named is that upload's.
        let mut named: Vec<(i32, Vec<&str>)> = Vec::new();
        for (number, etag) in chosen {
            match named.last_mut() {
                Some((last, etags)) if last == number => etags.push(etag),
                _ => named.push((*number, vec![etag])),
            }
        }
        let mut md5s = Md5::new();
        let mut stripes = Vec::new();
        let mut size = 0u64;
        for (i, (number, etags)) in named.iter().enumerate() {
            let Some((summary, stripe)) = stored.get(number) else {
                return Err(GatewayError::InvalidPart(format!(
                    "part {number} was not uploaded (or was aborted)"
                )));
            };
            if let Some(etag) = etags.iter().find(|e| e.trim_matches('"') != summary.etag())
                && !etags.iter().any(|e| e.trim_matches('"') == summary.etag())
            {
                return Err(GatewayError::InvalidPart(format!(
                    "part {number}'s ETag is {}, not {etag}",
                    summary.etag()
                )));
            }
            if i + 1 < named.len() && summary.size < PART_BYTES_MIN {
                return Err(GatewayError::EntityTooSmall { part: *number, size: summary.size });
            }
            md5s.update(summary.md5);
            size += summary.size;
            stripes.push(stripe.clone());
        }
        if size > OBJECT_BYTES_MAX {
            return Err(GatewayError::EntityTooLarge(size, OBJECT_BYTES_MAX));
        }
        let summary =
            Summary { md5: md5s.finalize().into(), parts: named.len() as u32, size, striped: true };
        let head_key = bucket.head_key(key)?;
        let meta = Meta { stripes: stripes.clone(), ..record.meta };
        // An empty object made of one empty part is still striped (its stripe has no data).
        let result =
            self.publish(bucket, &head_key, summary, &meta, None, record.policy.as_deref());
        let written = result.await?;
        // The parts not chosen are dropped; the chosen ones now belong to the object.
        let kept: std::collections::HashSet<&str> = stripes.iter().map(|s| s.id.as_str()).collect();
        let unused: Vec<Stripe> = stored
            .values()
            .filter(|(_, s)| !kept.contains(s.id.as_str()))
            .map(|(_, s)| s.clone())
            .collect();
        self.drop_stripes(bucket, &unused).await;
        self.forget_upload(bucket, key, upload, stored.keys().copied()).await?;
        Ok(written)
    }

    async fn forget_upload(
        &self,
        bucket: &Bucket,
        key: &str,
        upload: &str,
        parts: impl Iterator<Item = i32>,
    ) -> Result<()> {
        for number in parts {
            self.delete_quiet(&bucket.pool, &bucket.part_key(upload, number)).await?;
        }
        self.delete_quiet(&bucket.pool, &bucket.upload_key(key, upload)?).await
    }

    /// Abandons an upload: its parts' data is deleted.
    pub async fn abort_upload(&self, bucket: &Bucket, key: &str, upload: &str) -> Result<()> {
        let parts = self.list_parts(bucket, key, upload).await?;
        for part in &parts {
            let stripes = self.part_stripe(bucket, &bucket.part_key(upload, part.number)).await?;
            self.drop_stripes(bucket, &stripes).await;
        }
        self.forget_upload(bucket, key, upload, parts.iter().map(|p| p.number)).await
    }

    /// Deletes the stripes of `bucket` that no head and no uploaded part names and whose data
    /// was written more than `min_age` ago: what a gateway that died between writing data and
    /// writing its head, or two gateways replacing one object at once, left behind. (Stripes
    /// younger than `min_age` may belong to a PUT or part still in flight, so they are kept.)
    /// With `dry_run`, only counts.
    pub async fn sweep(&self, bucket: &Bucket, min_age: Duration, dry_run: bool) -> Result<Sweep> {
        let mut named: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut report = Sweep::default();
        // The stripes every striped head and every part record names.
        for prefix in [bucket.objects_prefix(), bucket.all_parts_prefix()] {
            let mut cursor = self.client.list_cursor(&bucket.pool, &prefix, None, 1000)?;
            while let Some(info) = cursor.next(&self.client).await? {
                if !summary_of(&info).is_some_and(|s| s.striped) {
                    continue;
                }
                report.heads_read += 1;
                match self.read_head(bucket, &info.key).await {
                    Ok(opened) => named.extend(opened.head.meta.stripes.into_iter().map(|s| s.id)),
                    // Deleted since it was listed: its stripes go with it.
                    Err(GatewayError::NoSuchKey(_)) => {}
                    Err(error) => return Err(error),
                }
            }
        }
        let data_prefix = format!("{}~d/", bucket.id);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let young = |version: u64| now.saturating_sub(version) < min_age.as_micros() as u64;
        // Data objects by stripe, and whether any of a stripe's is young.
        let mut unnamed: std::collections::BTreeMap<String, (Vec<(String, u64)>, bool)> =
            std::collections::BTreeMap::new();
        let mut cursor = self.client.list_cursor(&bucket.pool, &data_prefix, None, 1000)?;
        while let Some(info) = cursor.next(&self.client).await? {
            report.data_objects += 1;
            let Some((stripe, _)) = info.key[data_prefix.len()..].rsplit_once('.') else {
                continue;
            };
            if named.contains(stripe) {
                continue;
            }
            let entry = unnamed.entry(stripe.to_string()).or_default();
            entry.1 |= young(info.version.0);
            entry.0.push((info.key.clone(), info.size_bytes));
        }
        for (_, (objects, is_young)) in unnamed {
            if is_young {
                report.young_kept += objects.len();
                continue;
            }
            report.stripes_deleted += 1;
            for (key, size) in objects {
                report.objects_deleted += 1;
                report.bytes_freed += size;
                if !dry_run {
                    self.delete_quiet(&bucket.pool, &key).await?;
                }
            }
        }
        Ok(report)
    }

    /// Uploads in progress under `prefix`, in (key, upload id) order, after `after` (a key and
    /// an upload id), at most `max`; and whether more follow.
    pub async fn list_uploads(
        &self,
        bucket: &Bucket,
        prefix: &str,
        after: Option<(&str, &str)>,
        max: usize,
    ) -> Result<(Vec<Upload>, bool)> {
        let base = bucket.uploads_prefix();
        let start = after.map(|(key, upload)| format!("{base}{key}{UPLOAD_SEP}{upload}"));
        let mut cursor = self.client.list_cursor(
            &bucket.pool,
            &format!("{base}{prefix}"),
            start.as_deref(),
            max.min(1000),
        )?;
        let mut out = Vec::new();
        while let Some(info) = cursor.next(&self.client).await? {
            let Some((key, upload)) = info.key[base.len()..].rsplit_once(UPLOAD_SEP) else {
                continue;
            };
            if out.len() == max {
                return Ok((out, true));
            }
            out.push(Upload {
                key: key.to_string(),
                upload_id: upload.to_string(),
                initiated_micros: info.version.0,
            });
        }
        Ok((out, false))
    }
}

/// What a [`Gateway::sweep`] found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sweep {
    /// Striped heads and part records read for the stripes they name.
    pub heads_read: usize,
    /// Data objects in the bucket.
    pub data_objects: usize,
    /// Stripes no head or part names, deleted (or, in a dry run, to delete).
    pub stripes_deleted: usize,
    /// Their data objects.
    pub objects_deleted: usize,
    /// Their bytes (each counted once, not per replica).
    pub bytes_freed: u64,
    /// Data objects of unnamed stripes kept because they are recent.
    pub young_kept: usize,
}

/// A body received.
struct Received {
    md5: [u8; 16],
    size: u64,
    stripes: Vec<Stripe>,
    /// The head and the data after it, when the data is inline.
    inline: Option<BytesMut>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateways_own_state_is_under_the_protected_prefix() {
        for prefix in [USER_PREFIX, KEY_PREFIX, BUCKET_PREFIX, UPLOADS_PREFIX, PARTS_PREFIX] {
            assert!(optio_proto::is_gateway_key(prefix), "{prefix}");
        }
        let bucket = Bucket {
            name: "b".into(),
            id: "0123".into(),
            pool: "data".into(),
            owner: None,
            public_access_block: None,
        };
        assert!(optio_proto::is_gateway_key(&bucket.upload_key("k", "up").unwrap()));
        assert!(optio_proto::is_gateway_key(&bucket.part_key("up", 1)));
        // An object's head and data are the bucket's objects, not the gateway's state.
        assert!(!optio_proto::is_gateway_key(&bucket.head_key("k").unwrap()));
        assert!(!optio_proto::is_gateway_key(&bucket.data_key("stripe", 0)));
    }
}
