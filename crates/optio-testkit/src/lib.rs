//! # optio-testkit
//!
//! What Optio's tests need and its programs do not: [`promtool`], Prometheus' own checker of
//! a `/metrics` exposition. A dev-dependency only.
//!
//! The real etcd and Redis the tests start are not here: `optio up --etcd` and `optio bench io
//! elastic` start the same processes at run time, so they are `optio-local`'s (with the
//! `optio up` supervisor), and the tests use them from there.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod promtool;
