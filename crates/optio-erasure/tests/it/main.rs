//! optio-erasure's integration tests: round trips of every K+M with chunks lost or corrupt,
//! repair, range reads, parity updates, and untrusted chunk bytes.

mod damage;
mod delta;
mod range;
mod round_trip;
mod support;
mod untrusted;
