//! Integration tests of optio-mapfile. Ceph's `crushtool` is the oracle for the Ceph formats:
//! tests that need it skip with a message when it is missing, and fail when `CI=true`.

mod crushtool;
mod errors;
mod examples;
mod robustness;
mod roundtrip;
mod support;
