//! The placement engines, one module each: [`crush`](crate::crush) (Ceph's CRUSH, at the
//! crate root), [`ring`], [`attributed`], [`elastic`] and [`balanced`], and the virtual-node
//! index the consistent-hashing engines share ([`vnode`]).
//!
//! Each engine compiles a pool from the map and checks the pool's spec; the parameters a pool
//! stores for it are data the map holds, defined in [`params`](crate::params) and re-exported
//! by the engine's module (`engine::ring::RingParams` is `params::ring::RingParams`).

pub mod attributed;
pub mod balanced;
pub mod crush;
pub mod elastic;
pub mod ring;
pub mod vnode;

pub use crate::params::EngineParams;
