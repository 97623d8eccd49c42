//! Integration tests of optio-mapfile. Ceph's `crushtool` and `osdmaptool` are the oracles for
//! the Ceph formats and for placement itself: tests that need them skip with a message when
//! they are missing, and fail when `CI=true`.

mod ceph;
mod support;
mod textmap;

mod balance;
mod crushtool;
mod crushtool_build;
mod crushtool_text;
mod erasure;
mod errors;
mod examples;
mod json_import;
mod osdmaptool;
mod robustness;
mod roundtrip;
