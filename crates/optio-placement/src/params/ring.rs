//! The `ring` engine's parameters ([`engine::ring`](crate::engine::ring)).

use crate::ids::TypeId;

/// Parameters of the `ring` engine (consistent hashing with virtual nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingParams {
    /// Capacity one virtual node stands for; a device gets ⌈capacity / vnode_bytes⌉ vnodes
    /// (at most [`RING_VNODES_PER_DEVICE_MAX`](crate::engine::ring::RING_VNODES_PER_DEVICE_MAX)).
    pub vnode_bytes: u64,
    /// Replicas go to distinct buckets of this type (e.g. zone) when set, else only to
    /// distinct devices.
    pub failure_domain: Option<TypeId>,
}

impl Default for RingParams {
    fn default() -> RingParams {
        RingParams { vnode_bytes: 8 << 30, failure_domain: None }
    }
}
