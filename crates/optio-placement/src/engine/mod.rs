//! The placement engines, one module each: [`crush`](crate::crush) (Ceph's CRUSH, at the
//! crate root), [`ring`], [`attributed`], [`elastic`] and [`balanced`], and the virtual-node
//! index the consistent-hashing engines share ([`vnode`]).

pub mod attributed;
pub mod balanced;
pub mod crush;
pub mod elastic;
pub mod ring;
pub mod vnode;
