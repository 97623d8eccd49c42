//! CRUSH, bit-compatible with Ceph.
//!
//! * [`hash`] — rjenkins1 (`crush_hash32_*`) and Ceph's object-name hash.
//! * [`ln`] — `crush_ln`, the fixed-point log2 of straw2, with Ceph's verbatim tables.
//! * [`CrushMap`] — a map's buckets and rules compiled into flat arrays.
//! * [`CrushMap::do_rule`] — `crush_do_rule`: take / choose / chooseleaf, firstn and indep,
//!   emit, every `set_*` step and tunable, the reweight vector and choose_args.
//!
//! Every bucket algorithm Ceph has is implemented: uniform, list, tree, straw and straw2.
//! Multi-step-retry (MSR) rules of Ceph 19+ are refused by the map parsers.

mod compiled;
pub mod hash;
pub mod ln;
mod ln_tables;
mod mapper;
mod straw2;

pub use compiled::{ChooseArgsRef, CrushMap};
pub use mapper::CrushWork;
pub use straw2::Simd;
