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
//!
//! The operations are split by family, as S3 groups them: `users` (users and their keys),
//! `bucket`, `put` (receiving a body, inline or into a stripe, and publishing its head),
//! `get` (opening a head, reading ranges), `copy`, `delete`, `list` (ordered pages
//! with delimiters), `multipart` and `sweep` (stripes no head names). Below them:
//! `gateway` (the client and what it remembers), `layout` (the names and records above)
//! and `error`.

mod bucket;
mod copy;
mod delete;
mod error;
mod gateway;
mod get;
mod layout;
mod list;
mod multipart;
mod put;
mod sweep;
mod users;

pub use error::GatewayError;
pub use gateway::Gateway;
pub use get::Opened;
pub use layout::Bucket;
pub use list::{ListPage, Listed};
pub use multipart::{PartInfo, Upload};
pub use sweep::Sweep;
pub use users::{KeyPair, User, validate_user_name};

/// Largest single PUT and largest part (S3's 5 GiB).
pub const PUT_BYTES_MAX: u64 = 5 << 30;
/// Largest object (S3's 5 TiB).
pub const OBJECT_BYTES_MAX: u64 = 5 << 40;
/// Smallest part but the last (S3's 5 MiB).
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// Most parts of an upload.
pub const PARTS_MAX: i32 = 10_000;
