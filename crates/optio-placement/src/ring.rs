//! The `ring` engine: consistent hashing with capacity-weighted virtual nodes, as Sheepdog and
//! Dynamo place data.
//!
//! Every device gets ⌈capacity × reweight / vnode_bytes⌉ virtual nodes (1 to 65,536), at
//! positions `hash32_2(device id, vnode index)` on a 32-bit ring. A key's replicas are the
//! owners of the first virtual nodes at or after the key's position, skipping devices already
//! chosen, devices that are down, and — when the pool names a failure domain — devices in a
//! domain already chosen.
//!
//! Layout: positions and owners in two sorted arrays (4 + 4 bytes per virtual node) plus a
//! table of 2^k bucket starts indexed by the top bits of a position (about 1.6 bytes per
//! virtual node), so a lookup is one table read and a scan of about two entries.
//!
//! Invariants: a vnode's position depends only on its device and index, so adding or removing
//! a device (or changing its capacity) changes only the arcs of its own virtual nodes.

use crate::crush::hash::hash32_2;
use crate::ids::{DeviceId, ItemId};
use crate::map::{ClusterMap, RingParams};
use crate::placement::ReplicaSet;

/// Most virtual nodes one device may have.
pub const RING_VNODES_PER_DEVICE_MAX: u64 = 65_536;

/// A compiled ring.
#[derive(Clone, Debug)]
pub struct Ring {
    positions: Vec<u32>,
    owners: Vec<u32>,
    /// `index[b]` = first vnode whose position's top bits are ≥ b; one extra entry at the end.
    index: Vec<u32>,
    index_shift: u32,
    /// Per owner: device id, failure-domain number, whether it is up.
    device_ids: Vec<u32>,
    domains: Vec<u32>,
    up: Vec<bool>,
    /// How many distinct failure domains (or devices) hold an up device.
    available: usize,
}

/// The position of virtual node `vnode` of `device` on the ring.
pub fn vnode_position(device: DeviceId, vnode: u32) -> u32 {
    hash32_2(device.0, vnode)
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
            let owner = device_ids.len() as u32;
            let effective =
                (u128::from(device.capacity_bytes) * u128::from(device.reweight.0)) >> 16;
            let count = effective
                .div_ceil(u128::from(params.vnode_bytes))
                .clamp(1, u128::from(RING_VNODES_PER_DEVICE_MAX)) as u32;
            for vnode in 0..count {
                vnodes.push((vnode_position(device.id, vnode), owner));
            }
            let domain = params
                .failure_domain
                .and_then(|t| map.ancestor_of_type(ItemId(device.id.0 as i32), t))
                .map(|bucket| bucket.id.0);
            let number = match domain {
                Some(bucket) => match domain_numbers.iter().position(|d| *d == bucket) {
                    Some(n) => n as u32,
                    None => {
                        domain_numbers.push(bucket);
                        domain_numbers.len() as u32 - 1
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
        let count = vnodes.len();
        let bits = if count < 4 { 1 } else { (usize::BITS - count.leading_zeros() - 2).min(24) };
        let index_shift = 32 - bits;
        let mut index = vec![0u32; (1usize << bits) + 1];
        let mut cursor = 0usize;
        for (bucket, slot) in index.iter_mut().enumerate() {
            while cursor < count && ((vnodes[cursor].0 >> index_shift) as usize) < bucket {
                cursor += 1;
            }
            *slot = cursor as u32;
        }
        Ring {
            positions: vnodes.iter().map(|v| v.0).collect(),
            owners: vnodes.iter().map(|v| v.1).collect(),
            index,
            index_shift,
            device_ids,
            domains,
            up,
            available: available_domains.len(),
        }
    }

    /// Number of virtual nodes.
    pub fn vnode_count(&self) -> usize {
        self.positions.len()
    }

    /// Bytes of memory the lookup structures use.
    pub fn memory_bytes(&self) -> usize {
        self.positions.capacity() * 4
            + self.owners.capacity() * 4
            + self.index.capacity() * 4
            + self.device_ids.capacity() * 4
            + self.domains.capacity() * 4
            + self.up.capacity()
    }

    /// The first virtual node at or after `key` (wrapping).
    #[inline]
    fn successor(&self, key: u32) -> usize {
        let bucket = (key >> self.index_shift) as usize;
        let mut i = self.index[bucket] as usize;
        let end = self.index[bucket + 1] as usize;
        while i < end && self.positions[i] < key {
            i += 1;
        }
        if i == self.positions.len() { 0 } else { i }
    }

    /// The primary device of `key`: the owner of its successor, skipping down devices.
    #[inline]
    pub fn primary(&self, key: u32) -> Option<DeviceId> {
        if self.available == 0 {
            return None;
        }
        let mut i = self.successor(key);
        loop {
            let owner = self.owners[i] as usize;
            if self.up[owner] {
                return Some(DeviceId(self.device_ids[owner]));
            }
            i += 1;
            if i == self.positions.len() {
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
        let mut chosen_domains = [0u32; crate::map::REPLICAS_MAX];
        let mut i = self.successor(key);
        let n = self.positions.len();
        while out.len() < wanted {
            let owner = self.owners[i] as usize;
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
