//! Where the gateway's state lives in the cluster (the table in [`super`]): the names of a
//! bucket's heads, data objects, uploads and parts, and the records stored under `.s3/`.

use bytes::Bytes;
use optio_proto::{ObjectInfo, validate_key};
use serde::{Deserialize, Serialize};

use super::error::{GatewayError, Result};
use crate::format::{Meta, Summary};

pub(super) const USER_PREFIX: &str = ".s3/user/";
pub(super) const KEY_PREFIX: &str = ".s3/key/";
pub(super) const BUCKET_PREFIX: &str = ".s3/bucket/";
pub(super) const UPLOADS_PREFIX: &str = ".s3/u/";
pub(super) const PARTS_PREFIX: &str = ".s3/p/";
/// Separates an upload's key from its id in an upload record's name.
pub(super) const UPLOAD_SEP: char = '\u{1}';

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

    pub(super) fn head_key(&self, key: &str) -> Result<String> {
        if key.is_empty() {
            return Err(GatewayError::InvalidArgument("an object key may not be empty".into()));
        }
        checked_key(format!("{}/{key}", self.id))
    }

    pub(super) fn objects_prefix(&self) -> String {
        format!("{}/", self.id)
    }

    pub(super) fn data_key(&self, stripe: &str, index: u64) -> String {
        format!("{}~d/{stripe}.{index:08x}", self.id)
    }

    pub(super) fn upload_key(&self, key: &str, upload: &str) -> Result<String> {
        checked_key(format!("{}{key}{UPLOAD_SEP}{upload}", self.uploads_prefix()))
    }

    pub(super) fn uploads_prefix(&self) -> String {
        format!("{UPLOADS_PREFIX}{}/", self.id)
    }

    pub(super) fn part_key(&self, upload: &str, part: i32) -> String {
        format!("{}{part:05}", self.parts_prefix(upload))
    }

    pub(super) fn parts_prefix(&self, upload: &str) -> String {
        format!("{}{upload}/", self.all_parts_prefix())
    }

    pub(super) fn all_parts_prefix(&self) -> String {
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
pub(super) struct UserRecord {
    pub(super) access_key: String,
}

/// A stored access key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct KeyRecord {
    pub(super) user: String,
    pub(super) secret_key: String,
}

/// An upload's record: what the object gets when it completes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct UploadRecord {
    pub(super) meta: Meta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) policy: Option<String>,
}

pub(super) fn json<T: Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("records serialise"))
}

pub(super) fn parse<T: for<'a> Deserialize<'a>>(what: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| GatewayError::Corrupt(format!("{what}: {e}")))
}

pub(super) fn summary_of(info: &ObjectInfo) -> Option<Summary> {
    info.summary.as_deref().and_then(Summary::from_hex)
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
