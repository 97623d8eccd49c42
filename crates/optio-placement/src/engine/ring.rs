//! The `ring` engine: consistent hashing with capacity-weighted virtual nodes, as Sheepdog and
//! Dynamo place data.
//!
//! Every device gets ⌈capacity × reweight / vnode_bytes⌉ virtual nodes (1 to 65,536), at
//! positions `hash32_2(device id, vnode index)` on a 32-bit ring. A key's replicas are the
//! owners of the first virtual nodes at or after the key's position, skipping devices already
//! chosen, devices that are down, and — when the pool names a failure domain — devices in a
//! domain already chosen.
//!
//! Layout: one sorted array of (position, owner) pairs (4 + 4 bytes per virtual node, so the
//! scan that finds a key's successor has already loaded its owner) plus a table of 2^k bucket
//! starts indexed by the top bits of a position (about 1.6 bytes per virtual node), so a
//! lookup is one table read and a scan of about two entries. The walk from a virtual node to
//! the next distinct devices depends on nothing but the node (the map is compiled), so when
//! the map is compiled each node's owner word also records how far the walk from it goes for
//! the second and the third replica (4 bits each, in bits the owner index does not use): up to
//! three replicas are then the successor and two more reads, no walk and no comparisons —
//! the same devices, in the same order, for no extra memory.
//!
//! Invariants: a vnode's position depends only on its device and index, so adding or removing
//! a device (or changing its capacity) changes only the arcs of its own virtual nodes.

use crate::engine::vnode::{RingIndex, vnode_position};
use crate::error::{MapError, MapErrorKind as Kind, Subject};
use crate::ids::{DeviceId, ITEM_NONE, ItemId};
use crate::map::{ClusterMap, Device, PartialMap};
use crate::narrow::index32;
use crate::replica::ReplicaSet;

pub use crate::params::ring::RingParams;

/// Most virtual nodes one device may have.
pub const RING_VNODES_PER_DEVICE_MAX: u64 = 65_536;
/// Most virtual nodes one ring may have (about 150 MB of lookup tables); the builder refuses
/// ring pools whose `vnode_bytes` would exceed it.
pub const RING_VNODES_MAX: u64 = 1 << 24;

/// A compiled ring.
#[derive(Clone, Debug)]
pub struct Ring {
    /// Virtual nodes in ring order: position and owner side by side, one cache line for both.
    vnodes: Vec<VNode>,
    index: RingIndex,
    /// Per owner: device id, failure-domain number, whether it is up.
    device_ids: Vec<u32>,
    domains: Vec<u32>,
    up: Vec<bool>,
    /// How many distinct failure domains (or devices) hold an up device.
    available: usize,
}

/// One virtual node of a compiled ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
struct VNode {
    position: u32,
    /// The owner index ([`OWNER_MASK`]) and the [`walk`](Ring::walk_hints) from this node:
    /// bits 28–31 the distance to the second replica's node, bits 24–27 from there to the
    /// third's (0: unknown — the owner is down, a step is longer than 15, the walk passes the
    /// end of the ring, or there are fewer distinct domains).
    owner: u32,
}

impl VNode {
    /// The index of its device in the owner tables.
    #[inline(always)]
    fn owner(&self) -> usize {
        (self.owner & OWNER_MASK) as usize
    }
}

/// Owner word: the owner index (rings hold at most [`RING_VNODES_MAX`] = 2^24 virtual nodes,
/// so at most 2^24 owners).
const OWNER_MASK: u32 = (1 << 24) - 1;
/// Owner word: where the distance to the second replica's node sits.
const SECOND_SHIFT: u32 = 28;
/// Owner word: where the distance from the second replica's node to the third's sits.
const THIRD_SHIFT: u32 = 24;
/// Longest recorded walk step.
const HINT_MAX: usize = 15;

/// How many virtual nodes a device gets: ⌈capacity × reweight / vnode_bytes⌉ (reweight in
/// 16.16), between 1 and [`RING_VNODES_PER_DEVICE_MAX`]. Computed exactly in 128 bits: rounding
/// the capacity × reweight product down first (as an earlier version did) lost a vnode
/// whenever the effective capacity had a fraction of a byte above a multiple of `vnode_bytes`.
pub fn vnode_count(capacity_bytes: u64, reweight: u32, vnode_bytes: u64) -> u32 {
    let effective = u128::from(capacity_bytes) * u128::from(reweight);
    let per_vnode = u128::from(vnode_bytes.max(1)) << 16;
    let count = effective.div_ceil(per_vnode).clamp(1, u128::from(RING_VNODES_PER_DEVICE_MAX));
    u32::try_from(count).expect("clamped to RING_VNODES_PER_DEVICE_MAX (65,536)")
}

impl Ring {
    /// Builds the ring of `map` with `params`. Devices that are out or have zero weight,
    /// reweight or capacity get no virtual nodes.
    pub fn new(map: &ClusterMap, params: &RingParams) -> Ring {
        let mut device_ids = Vec::new();
        let mut domains = Vec::new();
        let mut up = Vec::new();
        let mut vnodes: Vec<(u32, u32)> = Vec::new();
        let mut domain_numbers: Vec<i32> = Vec::new();
        for device in map.devices() {
            if !device.is_in
                || device.weight.0 == 0
                || device.reweight.0 == 0
                || device.capacity_bytes == 0
            {
                continue;
            }
            let owner = index32(device_ids.len());
            let count = vnode_count(device.capacity_bytes, device.reweight.0, params.vnode_bytes);
            for vnode in 0..count {
                vnodes.push((vnode_position(device.id, vnode), owner));
            }
            let domain = params
                .failure_domain
                .and_then(|t| map.ancestor_of_type(ItemId(device.id.0 as i32), t))
                .map(|bucket| bucket.id.0);
            let number = match domain {
                Some(bucket) => match domain_numbers.iter().position(|d| *d == bucket) {
                    Some(n) => index32(n),
                    None => {
                        domain_numbers.push(bucket);
                        index32(domain_numbers.len()) - 1
                    }
                },
                None => u32::MAX - owner,
            };
            device_ids.push(device.id.0);
            domains.push(number);
            up.push(device.up);
        }
        vnodes.sort_unstable();
        let mut available_domains: Vec<u32> =
            domains.iter().zip(&up).filter(|(_, up)| **up).map(|(d, _)| *d).collect();
        available_domains.sort_unstable();
        available_domains.dedup();
        let index = RingIndex::new(vnodes.len(), |i| vnodes[i].0);
        let mut ring = Ring {
            vnodes: vnodes.iter().map(|&(position, owner)| VNode { position, owner }).collect(),
            index,
            device_ids,
            domains,
            up,
            available: available_domains.len(),
        };
        ring.walk_hints();
        ring
    }

    /// Records in each node's owner word how far the walk from it goes to the second and the
    /// third replica (see [`VNode::owner`]), when its owner is up, both steps are at most
    /// [`HINT_MAX`] and the walk does not pass the end of the ring.
    fn walk_hints(&mut self) {
        let n = self.vnodes.len();
        let mut hints = vec![0u32; n];
        for (i, hint) in hints.iter_mut().enumerate() {
            let first = self.vnodes[i].owner();
            if !self.up[first] {
                continue;
            }
            let mut picked = [i, i, i];
            let mut domains = [self.domains[first]; 3];
            let mut found = 1;
            for step in 1..=(2 * HINT_MAX).min(n.saturating_sub(1)) {
                let j = (i + step) % n;
                let owner = self.vnodes[j].owner();
                let domain = self.domains[owner];
                if self.up[owner] && !domains[..found].contains(&domain) {
                    (picked[found], domains[found]) = (step, domain);
                    found += 1;
                    if found == 3 {
                        break;
                    }
                }
            }
            let (second, third) = (picked[1], picked[2].wrapping_sub(picked[1]));
            // Not across the end of the ring (the last few nodes walk), so that the lookup
            // adds without wrapping.
            if found == 3 && second <= HINT_MAX && third <= HINT_MAX && i + second + third < n {
                // Both at most HINT_MAX (15).
                *hint = index32(second) << SECOND_SHIFT | index32(third) << THIRD_SHIFT;
            }
        }
        for (vnode, hint) in self.vnodes.iter_mut().zip(hints) {
            vnode.owner |= hint;
        }
    }

    /// Number of virtual nodes.
    pub fn vnode_count(&self) -> usize {
        self.vnodes.len()
    }

    /// Bytes of memory the lookup structures use.
    pub fn memory_bytes(&self) -> usize {
        self.vnodes.capacity() * std::mem::size_of::<VNode>()
            + self.index.memory_bytes()
            + self.device_ids.capacity() * 4
            + self.domains.capacity() * 4
            + self.up.capacity()
    }

    /// The first virtual node at or after `key` (wrapping).
    #[inline]
    fn successor(&self, key: u32) -> usize {
        self.index.successor_near(key, &self.vnodes, |v| v.position)
    }

    /// The primary device of `key`: the owner of its successor, skipping down devices.
    #[inline]
    pub fn primary(&self, key: u32) -> Option<DeviceId> {
        if self.available == 0 {
            return None;
        }
        let mut i = self.successor(key);
        loop {
            let owner = self.vnodes[i].owner();
            if self.up[owner] {
                return Some(DeviceId(self.device_ids[owner]));
            }
            i += 1;
            if i == self.vnodes.len() {
                i = 0;
            }
        }
    }

    /// Up to `replicas` devices for `key`, on distinct devices (and failure domains), primary
    /// first. Fewer when the ring has fewer distinct up domains.
    #[inline]
    pub fn place(&self, key: u32, replicas: usize, out: &mut ReplicaSet) {
        out.clear();
        let wanted = replicas.min(self.available).min(out.capacity());
        if wanted == 0 {
            return;
        }
        let i = self.successor(key);
        let word = self.vnodes[i].owner;
        let second = (word >> SECOND_SHIFT) as usize;
        let third = (word >> THIRD_SHIFT & 0xf) as usize;
        if wanted <= 3 && second != 0 && third != 0 {
            // The walk recorded when the map was compiled.
            let nodes = [i, i + second, i + second + third];
            out.fill(wanted, |r| {
                let owner = self.vnodes[nodes[r]].owner();
                self.device_ids.get(owner).map_or(ITEM_NONE, |d| *d as i32)
            });
            return;
        }
        self.place_walk(i, wanted, out);
    }

    /// [`place`](Self::place) the long way: the walk from the successor `i`, node by node.
    fn place_walk(&self, mut i: usize, wanted: usize, out: &mut ReplicaSet) {
        let mut chosen_domains = [0u32; crate::replica::REPLICAS_MAX];
        let n = self.vnodes.len();
        while out.len() < wanted {
            let owner = self.vnodes[i].owner();
            let domain = self.domains[owner];
            if self.up[owner] && !chosen_domains[..out.len()].contains(&domain) {
                chosen_domains[out.len()] = domain;
                out.push(self.device_ids[owner] as i32);
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }
}

/// A ring pool's engine parameters as given (defaults unresolved).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingSpec {
    /// Bytes per virtual node (default 8 GiB).
    pub vnode_bytes: Option<u64>,
    /// Failure domain type name (replicas in distinct buckets of this type).
    pub failure_domain: Option<String>,
}

/// Resolves a ring pool's parameters: `vnode_bytes` (default 8 GiB, at least one byte, and
/// not so small that the ring exceeds [`RING_VNODES_MAX`]) and the failure domain's type.
pub(crate) fn resolve_params(
    map: &PartialMap<'_>,
    subject: &Subject,
    vnode_bytes: Option<u64>,
    failure_domain: Option<&str>,
) -> Result<RingParams, MapError> {
    let vnode_bytes = vnode_bytes.unwrap_or(RingParams::default().vnode_bytes);
    if vnode_bytes == 0 {
        return Err(MapError::new(
            subject.clone(),
            Kind::OutOfRange {
                field: "vnode_bytes",
                value: "0".into(),
                reason: "a virtual node must stand for at least one byte".into(),
            },
        ));
    }
    check_ring_size(subject, map.devices(), vnode_bytes)?;
    let failure_domain = match failure_domain {
        Some(name) => Some(map.type_id(subject, name)?),
        None => None,
    };
    Ok(RingParams { vnode_bytes, failure_domain })
}

/// Refuses a ring that would hold more than [`RING_VNODES_MAX`](crate::engine::ring::RING_VNODES_MAX)
/// virtual nodes (8 bytes each, plus the index): `vnode_bytes` too small for the capacity.
fn check_ring_size(
    subject: &Subject,
    devices: &[Device],
    vnode_bytes: u64,
) -> Result<(), MapError> {
    let vnodes: u64 = devices
        .iter()
        .filter(|d| d.is_in && d.weight.0 > 0 && d.reweight.0 > 0 && d.capacity_bytes > 0)
        .map(|d| {
            u64::from(crate::engine::ring::vnode_count(d.capacity_bytes, d.reweight.0, vnode_bytes))
        })
        .sum();
    let max = crate::engine::ring::RING_VNODES_MAX;
    if vnodes > max {
        let capacity: u128 = devices.iter().map(|d| u128::from(d.capacity_bytes)).sum();
        let suggested = capacity.div_ceil(u128::from(max / 2)).max(1);
        return Err(MapError::new(
            subject.clone(),
            Kind::OutOfRange {
                field: "vnode_bytes",
                value: vnode_bytes.to_string(),
                reason: format!(
                    "the ring would have {vnodes} virtual nodes, more than {max}; raise vnode_bytes to {suggested} or more"
                ),
            },
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The ring against a naive reference (a sorted list of every virtual node, scanned
    //! linearly), and the consistent-hashing guarantees: a device's arrival, departure or
    //! failure changes exactly the keys on its arcs.

    use super::*;
    use crate::builder::{ClusterMapBuilder, DeviceSpec, EngineRef, PoolSpec};
    use crate::crush::hash::hash32_2;
    use crate::ids::{PoolId, TypeId, Weight};
    use crate::map::TIB;

    const GIB: u64 = 1 << 30;
    const KEYS: u32 = 20_000;

    /// `devices` devices of 1–4 TiB; device `i` in host `i % hosts`.
    fn builder(devices: u32, hosts: u32) -> ClusterMapBuilder {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..devices {
            builder = builder.device(device(id, hosts));
        }
        builder
    }

    fn device(id: u32, hosts: u32) -> DeviceSpec {
        let host = format!("host{}", id % hosts);
        DeviceSpec::new(id).capacity(TIB * u64::from(1 + id % 4)).at(&[("host", &host)])
    }

    /// Builds the map with a ring pool (64 GiB vnodes) and compiles its ring.
    fn ring_of(builder: ClusterMapBuilder, failure_domain: Option<&str>) -> (ClusterMap, Ring) {
        let mut pool = PoolSpec::crush(1, "objects", 0, 1);
        pool.engine = EngineRef::Ring(crate::builder::RingSpec {
            vnode_bytes: Some(64 * GIB),
            failure_domain: failure_domain.map(String::from),
        });
        let map = builder.pool(pool).build().expect("valid map");
        let crate::map::EngineSpec::Ring(params) = map.pool(PoolId(1)).expect("pool").engine_spec()
        else {
            unreachable!("a ring pool")
        };
        let ring = Ring::new(&map, &params);
        (map, ring)
    }

    /// The reference: every vnode in one sorted list, scanned linearly from the key.
    struct Naive<'a> {
        map: &'a ClusterMap,
        vnodes: Vec<(u32, u32)>,
        failure_domain: Option<TypeId>,
        up_domains: usize,
    }

    impl<'a> Naive<'a> {
        fn new(map: &'a ClusterMap, failure_domain: Option<TypeId>) -> Naive<'a> {
            let mut naive = Naive { map, vnodes: Vec::new(), failure_domain, up_domains: 0 };
            let mut up_domains = Vec::new();
            for d in map.devices() {
                if !d.is_in || d.weight.0 == 0 || d.reweight.0 == 0 || d.capacity_bytes == 0 {
                    continue;
                }
                let exact = (u128::from(d.capacity_bytes) * u128::from(d.reweight.0))
                    .div_ceil(u128::from(64 * GIB) << 16);
                let count = exact.clamp(1, 65_536) as u32;
                naive.vnodes.extend((0..count).map(|v| (vnode_position(d.id, v), d.id.0)));
                if d.up {
                    up_domains.push(naive.domain(d.id.0));
                }
            }
            naive.vnodes.sort_unstable();
            up_domains.sort_unstable();
            up_domains.dedup();
            naive.up_domains = up_domains.len();
            naive
        }

        fn domain(&self, id: u32) -> i64 {
            self.failure_domain
                .and_then(|t| self.map.ancestor_of_type(ItemId(id as i32), t))
                .map_or(i64::from(id) + (1 << 40), |b| i64::from(b.id.0))
        }

        fn place(&self, key: u32, replicas: usize) -> Vec<i32> {
            let wanted = replicas.min(self.up_domains);
            let start = self.vnodes.iter().position(|v| v.0 >= key).unwrap_or(0);
            let mut chosen: Vec<i32> = Vec::new();
            let mut domains: Vec<i64> = Vec::new();
            for i in 0..self.vnodes.len() {
                if chosen.len() == wanted {
                    break;
                }
                let id = self.vnodes[(start + i) % self.vnodes.len()].1;
                let up = self.map.device(DeviceId(id)).is_some_and(|d| d.up);
                if up && !domains.contains(&self.domain(id)) {
                    domains.push(self.domain(id));
                    chosen.push(id as i32);
                }
            }
            chosen
        }
    }

    fn place(ring: &Ring, key: u32, replicas: usize) -> Vec<i32> {
        let mut out = ReplicaSet::new();
        ring.place(key, replicas, &mut out);
        out.as_slice().to_vec()
    }

    /// Keys spread over the whole ring (not just its first arcs).
    fn keys() -> impl Iterator<Item = u32> {
        (0..KEYS).map(|i| hash32_2(i, 0x5eed))
    }

    #[test]
    fn vnode_counts_are_capacity_times_reweight_over_vnode_bytes_rounded_up() {
        let cases = [
            // (capacity, reweight, vnode_bytes, vnodes)
            (8 * GIB, 0x10000, 8 * GIB, 1),
            (8 * GIB + 1, 0x10000, 8 * GIB, 2),
            (TIB, 0x10000, 8 * GIB, 128),
            (TIB, 0x8000, 8 * GIB, 64),
            (3, 0x8000, 1, 2), // 1.5 vnodes → 2 (rounding the product first gave 1)
            (16 * GIB + 1, 0x8000, 8 * GIB, 2), // 8 GiB + 0.5 byte → 2
            (1, 0x10000, 8 * GIB, 1), // at least one
            (u64::MAX, 0x10000, 1, 65_536), // at most 65,536
        ];
        for (capacity, reweight, vnode_bytes, expected) in cases {
            assert_eq!(
                vnode_count(capacity, reweight, vnode_bytes),
                expected,
                "capacity {capacity}, reweight {reweight:#x}, vnode_bytes {vnode_bytes}"
            );
        }
        // And in a ring: one device of 1 TiB at reweight 0.75, 8 GiB vnodes → 96.
        let mut device = DeviceSpec::new(0).capacity(TIB);
        device.reweight = Weight(0xc000);
        let map = ClusterMapBuilder::new().device(device).build().expect("valid");
        let ring = Ring::new(&map, &RingParams::default());
        assert_eq!(ring.vnode_count(), 96);
    }

    #[test]
    fn out_zero_weight_and_zero_reweight_devices_get_no_vnodes() {
        let mut builder = builder(4, 2);
        builder.devices[0].is_in = false;
        builder.devices[1].weight = Some(Weight::ZERO);
        builder.devices[2].reweight = Weight::ZERO;
        let (_, ring) = ring_of(builder, None);
        // Only device 3 (4 TiB, 64 GiB vnodes) is left.
        assert_eq!(ring.vnode_count(), 64);
        for key in keys().take(1000) {
            assert_eq!(place(&ring, key, 3), vec![3], "key {key:#x}");
        }
    }

    #[test]
    fn matches_the_naive_ring() {
        for failure_domain in [None, Some("host")] {
            let mut builder = builder(24, 5);
            builder.devices[4].up = false;
            builder.devices[9].reweight = Weight(0x4000);
            let (map, ring) = ring_of(builder, failure_domain);
            let naive = Naive::new(&map, failure_domain.and_then(|t| map.type_by_name(t)));
            for key in keys() {
                for replicas in [1, 3, 6] {
                    assert_eq!(
                        place(&ring, key, replicas),
                        naive.place(key, replicas),
                        "key {key:#x}, {replicas} replicas, failure domain {failure_domain:?}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// The recorded walk gives what the walk gives, on random rings: 1 to 40 devices of
        /// random sizes, some down, with and without failure domains, 1 to 6 replicas.
        #[test]
        fn the_recorded_walk_is_the_walk(
            devices in proptest::collection::vec((1u64..6, proptest::bool::weighted(0.85)), 1..40),
            hosts in 1u32..8,
            by_host in proptest::bool::ANY,
            keys in proptest::collection::vec(proptest::num::u32::ANY, 300),
        ) {
            let mut b = ClusterMapBuilder::new();
            for (id, (tib, up)) in devices.iter().enumerate() {
                let mut spec = device(index32(id), hosts).capacity(TIB * tib);
                spec.up = *up;
                b = b.device(spec);
            }
            let (_, ring) = ring_of(b, by_host.then_some("host"));
            let mut hinted = 0;
            for &key in &keys {
                let i = ring.successor(key);
                hinted += usize::from(ring.vnodes[i].owner >> THIRD_SHIFT != 0);
                for replicas in 1..=6 {
                    let mut walked = ReplicaSet::new();
                    let wanted = replicas.min(ring.available);
                    if wanted > 0 {
                        ring.place_walk(i, wanted, &mut walked);
                    }
                    proptest::prop_assert_eq!(
                        place(&ring, key, replicas),
                        walked.as_slice().to_vec(),
                        "key {:#x}, {} replicas", key, replicas
                    );
                }
            }
            // The fast path is taken (whenever three domains are up, nearly always).
            proptest::prop_assert!(ring.available < 3 || hinted > 0);
        }
    }

    #[test]
    fn replicas_are_distinct_devices_in_distinct_failure_domains() {
        let (map, ring) = ring_of(builder(24, 5), Some("host"));
        let host = map.type_by_name("host").expect("host type");
        for key in keys() {
            let set = place(&ring, key, 4);
            assert_eq!(set.len(), 4);
            let mut hosts: Vec<i32> = set
                .iter()
                .map(|&d| map.ancestor_of_type(ItemId(d), host).expect("located").id.0)
                .collect();
            hosts.sort_unstable();
            hosts.dedup();
            assert_eq!(hosts.len(), 4, "key {key:#x}: {set:?} shares a host");
        }
        // More replicas than hosts: one per host, no more.
        for key in keys().take(2000) {
            assert_eq!(place(&ring, key, 8).len(), 5, "key {key:#x}");
        }
    }

    #[test]
    fn adding_a_device_moves_exactly_the_keys_on_its_arcs() {
        for failure_domain in [None, Some("host")] {
            let (_, before) = ring_of(builder(20, 5), failure_domain);
            let (_, after) = ring_of(builder(20, 5).device(device(20, 5)), failure_domain);
            let new = 20;
            let mut moved = 0;
            for key in keys() {
                let (old_set, new_set) = (place(&before, key, 3), place(&after, key, 3));
                let old_primary = before.primary(key).expect("a primary").0 as i32;
                let new_primary = after.primary(key).expect("a primary").0 as i32;
                // The new device's arcs are exactly the keys whose successor vnode is its.
                let on_its_arc = after.vnodes[after.successor(key)].owner();
                let on_its_arc = after.device_ids[on_its_arc] as i32 == new;
                assert_eq!(new_primary == new, on_its_arc, "key {key:#x}");
                if old_primary != new_primary {
                    assert_eq!(new_primary, new, "key {key:#x}: primary moved elsewhere");
                    moved += 1;
                } else {
                    assert_ne!(new_primary, new);
                }
                if old_set != new_set {
                    assert!(new_set.contains(&new), "key {key:#x}: {old_set:?} → {new_set:?}");
                }
            }
            assert!(moved > 0, "the new device took some keys");
        }
    }

    #[test]
    fn removing_a_device_moves_exactly_the_keys_it_held() {
        for failure_domain in [None, Some("host")] {
            let (_, before) = ring_of(builder(21, 5), failure_domain);
            let (_, after) = ring_of(builder(20, 5), failure_domain);
            let gone = 20;
            for key in keys() {
                let (old_set, new_set) = (place(&before, key, 3), place(&after, key, 3));
                let old_primary = before.primary(key).expect("a primary").0 as i32;
                let new_primary = after.primary(key).expect("a primary").0 as i32;
                assert_eq!(old_primary != new_primary, old_primary == gone, "key {key:#x}");
                if old_set != new_set {
                    assert!(old_set.contains(&gone), "key {key:#x}: {old_set:?} → {new_set:?}");
                }
                assert!(!new_set.contains(&gone));
            }
        }
    }

    #[test]
    fn down_devices_are_skipped_and_only_their_keys_move() {
        for failure_domain in [None, Some("host")] {
            let (_, before) = ring_of(builder(20, 5), failure_domain);
            let mut down = builder(20, 5);
            down.devices[7].up = false;
            let (_, after) = ring_of(down, failure_domain);
            let mut skipped = 0;
            for key in keys() {
                let (old_set, new_set) = (place(&before, key, 3), place(&after, key, 3));
                assert!(!new_set.contains(&7), "key {key:#x}: the down device was chosen");
                assert_eq!(new_set.len(), 3);
                if old_set != new_set {
                    assert!(old_set.contains(&7), "key {key:#x}: {old_set:?} → {new_set:?}");
                    skipped += 1;
                }
                let old_primary = before.primary(key).expect("a primary").0;
                let new_primary = after.primary(key).expect("a primary").0;
                assert_eq!(old_primary != new_primary, old_primary == 7, "key {key:#x}");
            }
            assert!(skipped > 0, "device 7 held some keys");
        }
    }

    #[test]
    fn a_ring_with_every_device_down_places_nothing() {
        let mut builder = builder(3, 3);
        for device in &mut builder.devices {
            device.up = false;
        }
        let (_, ring) = ring_of(builder, None);
        assert!(ring.vnode_count() > 0);
        assert_eq!(ring.primary(12345), None);
        assert!(place(&ring, 12345, 3).is_empty());
    }
}
