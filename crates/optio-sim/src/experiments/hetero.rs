//! Harness shared by the attributed-CH experiments: the paper's two node types and maps of
//! them with one pool per engine.

use optio_placement::{
    AttributedSpec, ClusterMap, ClusterMapBuilder, DeviceSpec, EngineRef, PoolSpec, RingSpec,
};

/// One gibibyte (the paper's c_throttle of "1 GB").
pub const GIB: u64 = 1 << 30;

/// A node type: capacity, bandwidth, zone and class.
#[derive(Clone, Copy, Debug)]
pub struct NodeType {
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// Bandwidth in MB/s.
    pub bandwidth_mb_per_s: u32,
    /// Zone name.
    pub zone: &'static str,
    /// Device class.
    pub class: &'static str,
}

/// The paper's HDD node ⟨4096 GB, 146 MB/s, zone0⟩.
pub const HDD: NodeType =
    NodeType { capacity_bytes: 4096 * GIB, bandwidth_mb_per_s: 146, zone: "zone0", class: "hdd" };
/// The paper's SSD node ⟨1024 GB, 540 MB/s, zone1⟩.
pub const SSD: NodeType =
    NodeType { capacity_bytes: 1024 * GIB, bandwidth_mb_per_s: 540, zone: "zone1", class: "ssd" };

/// Node `id` of a map of alternating types (even ids `first`, odd ids `second`).
pub fn node(id: u32, first: NodeType, second: NodeType) -> DeviceSpec {
    let t = if id.is_multiple_of(2) { first } else { second };
    let host = format!("node{id}");
    let mut device = DeviceSpec::new(id)
        .capacity(t.capacity_bytes)
        .weight(weight_of(t.capacity_bytes))
        .at(&[("zone", t.zone), ("host", &host)]);
    device.bandwidth_mb_per_s = t.bandwidth_mb_per_s;
    device.class = Some(t.class.to_string());
    device
}

/// CRUSH weight of a node: 1.0 per 4 TiB (not per TiB, so that 32,768 nodes fit the 16.16
/// bucket weights); only `crush` reads it, in proportion.
pub fn weight_of(capacity_bytes: u64) -> optio_placement::Weight {
    let fixed = (u128::from(capacity_bytes) << 16) / (4u128 << 40);
    optio_placement::Weight(u32::try_from(fixed).unwrap_or(u32::MAX).max(1))
}

/// A devices-only builder of `nodes` nodes alternating `first` and `second`.
pub fn nodes(count: u32, first: NodeType, second: NodeType) -> ClusterMapBuilder {
    let mut builder = ClusterMapBuilder::new();
    builder.devices = (0..count).map(|id| node(id, first, second)).collect();
    builder
}

/// An attributed pool: c_throttle `throttle_bytes`, sector size `s`, `size` replicas.
pub fn attributed_pool(id: u32, throttle_bytes: u64, s: u32, size: u32) -> PoolSpec {
    let mut pool = PoolSpec::crush(id, "attributed", 0, size);
    pool.engine = EngineRef::Attributed(AttributedSpec {
        throttle_bytes: Some(throttle_bytes),
        sector_size: Some(s),
        zone_type: None,
        distinct_zones: false,
        bandwidth_tolerance_percent: None,
        sector_base: None,
        selection: None,
    });
    pool
}

/// A ring pool with `vnode_bytes` per virtual node.
pub fn ring_pool(id: u32, vnode_bytes: u64, size: u32) -> PoolSpec {
    let mut pool = PoolSpec::crush(id, "ring", 0, size);
    pool.engine =
        EngineRef::Ring(RingSpec { vnode_bytes: Some(vnode_bytes), failure_domain: None });
    pool
}

/// An elastic pool with default p and B.
pub fn elastic_pool(id: u32, size: u32) -> PoolSpec {
    let mut pool = PoolSpec::crush(id, "elastic", 0, size);
    pool.engine = EngineRef::elastic();
    pool
}

/// The same nodes in one straw2 bucket (the paper's CRUSH configuration: "configured in one
/// bucket"), with a rule choosing `size` devices from it and a pool of 4096 PGs.
pub fn crush_one_bucket(count: u32, first: NodeType, second: NodeType, size: u32) -> ClusterMap {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..count {
        let mut device = node(id, first, second);
        device.location = vec![("root".into(), "default".into())];
        builder = builder.device(device);
    }
    builder
        .rule(optio_placement::RuleSpec {
            id: optio_placement::RuleId(0),
            name: "one_bucket".into(),
            kind: optio_placement::RuleKind::Replicated,
            min_size: 1,
            max_size: 10,
            steps: vec![
                optio_placement::StepSpec::Take {
                    item: optio_placement::ItemRef::Name("default".into()),
                    class: None,
                },
                optio_placement::StepSpec::Choose {
                    leaf: false,
                    indep: false,
                    num: 0,
                    type_name: "osd".into(),
                },
                optio_placement::StepSpec::Emit,
            ],
        })
        .pool(PoolSpec::crush(1, "crush", 4096, size))
        .build()
        .expect("a one-bucket map is valid")
}
