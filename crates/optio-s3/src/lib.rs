//! # optio-s3
//!
//! Optio's S3 gateway: the S3 API — buckets, objects, ranges, conditional requests, copies,
//! multipart uploads, ordered listings with delimiters — served on an Optio cluster by any
//! number of stateless gateways ([`serve`]). [s3s](https://docs.rs/s3s) parses the requests and
//! verifies their SigV4 signatures; [`store`] maps the operations onto Optio's objects, laid
//! out as [`format`] says; [`s3`] connects the two.
//!
//! Optio's own extension: `x-optio-policy` on a PUT (or a multipart upload's creation)
//! places that new object by the named CHOICE policy, within the pool's k candidates; and
//! `x-optio-pool` on a bucket's creation picks the pool its objects live in.

#![deny(missing_docs)]

mod answer;
pub mod buffered;
pub mod conn;
pub mod format;
mod metrics;
pub mod s3;
mod serve;
pub mod sigv2;
pub mod store;

pub use buffered::CHUNKED_BODY_MAX;
pub use metrics::{METRICS_PATH, Metrics};
pub use serve::{ServeConfig, serve};
pub use store::{Gateway, GatewayError};
