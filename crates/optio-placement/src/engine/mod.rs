//! The placement engines and what they share.

pub mod vnode;
