//! Virtual nodes ("Virtual nodes" and "Sectors" in [`super`]): the owner table and the slots
//! of a map's attributed ring — each device's ⌈capacity / c_throttle⌉ virtual nodes at the
//! `ring` engine's positions, the sector base's among them, and the states that reweights,
//! out and down devices, and base devices no longer in the map leave.

use crate::engine::vnode::vnode_position;
use crate::ids::{DeviceId, ItemId};
use crate::map::ClusterMap;
use crate::narrow::index32;

use super::layout::{NO_OWNER, SlotState};
use super::{ATTRIBUTED_VNODES_MAX, AttributedParams, VNODES_PER_DEVICE_MAX};

/// How many virtual nodes a device of `capacity_bytes` gets: ⌈capacity / throttle⌉, 1 to
/// 65,536.
pub fn vnode_count(capacity_bytes: u64, throttle_bytes: u64) -> u32 {
    let count = capacity_bytes.div_ceil(throttle_bytes.max(1));
    u32::try_from(count)
        .map_or(VNODES_PER_DEVICE_MAX, |count| count.clamp(1, VNODES_PER_DEVICE_MAX))
}

/// One virtual node, before compilation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotSpec {
    /// Position on the 32-bit ring.
    pub position: u32,
    /// Index of its device in the owner table (`2^24 - 1` for devices no longer in the map).
    pub owner: u32,
    /// Whether it belongs to the sector base (forms sector boundaries).
    pub base: bool,
    /// Its state.
    pub state: SlotState,
}

impl SlotSpec {
    /// The slot as one sortable word: position, owner, not-base, state — ring order, ties
    /// broken by owner, base slots first.
    pub fn pack(&self) -> u64 {
        let state = match self.state {
            SlotState::Live => 0,
            SlotState::Down => 1,
            SlotState::Marked => 2,
        };
        u64::from(self.position) << 32
            | u64::from(self.owner.min(NO_OWNER)) << 8
            | u64::from(!self.base) << 2
            | state
    }
}

/// One device, before compilation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerSpec {
    /// Device id.
    pub device: u32,
    /// Zone number (equal numbers: same zone).
    pub zone: u32,
    /// Device class number (`u32::MAX`: none).
    pub class: u32,
    /// Bandwidth in MB/s as the engine counts it (unknown already replaced; at least 1).
    pub bandwidth: u32,
}

/// The owner table and slots of `map` for an attributed pool.
pub fn slot_specs(
    map: &ClusterMap,
    params: &AttributedParams,
    sector_base: &[(DeviceId, u32)],
) -> (Vec<OwnerSpec>, Vec<SlotSpec>) {
    let mut slots = Vec::with_capacity(slot_count(map, params, sector_base));
    let owners = for_each_slot(map, params, sector_base, |s| slots.push(s));
    (owners, slots)
}

/// The number of slots of `map`'s attributed ring.
pub(super) fn slot_count(
    map: &ClusterMap,
    params: &AttributedParams,
    sector_base: &[(DeviceId, u32)],
) -> usize {
    let based = |id: DeviceId| {
        sector_base.binary_search_by_key(&id, |(d, _)| *d).map_or(0, |i| sector_base[i].1)
    };
    let present: u64 =
        map.devices().iter().map(|d| u64::from(current_count(d, params).max(based(d.id)))).sum();
    let removed: u64 = sector_base
        .iter()
        .filter(|(d, _)| map.device(*d).is_none())
        .map(|(_, c)| u64::from(*c))
        .sum();
    (present + removed).min(ATTRIBUTED_VNODES_MAX) as usize
}

/// Calls `slot` for every slot of `map`'s attributed ring and returns the owner table.
pub(super) fn for_each_slot(
    map: &ClusterMap,
    params: &AttributedParams,
    sector_base: &[(DeviceId, u32)],
    mut slot: impl FnMut(SlotSpec),
) -> Vec<OwnerSpec> {
    let devices = map.devices();
    let slowest_known = devices
        .iter()
        .filter(|d| d.bandwidth_mb_per_s > 0 && is_member(d))
        .map(|d| d.bandwidth_mb_per_s)
        .min()
        .unwrap_or(1);
    let mut zone_numbers: Vec<i32> = Vec::new();
    let mut owners = Vec::with_capacity(devices.len());
    for (n, device) in devices.iter().enumerate() {
        let zone = match map.ancestor_of_type(ItemId::from(device.id), params.zone_type) {
            Some(bucket) if params.zone_type.0 != 0 => {
                match zone_numbers.iter().position(|z| *z == bucket.id.0) {
                    Some(z) => index32(z),
                    None => {
                        zone_numbers.push(bucket.id.0);
                        index32(zone_numbers.len()) - 1
                    }
                }
            }
            _ => u32::MAX - index32(n),
        };
        let class = device
            .class
            .as_ref()
            .and_then(|c| map.classes().iter().position(|k| k == c))
            .map_or(u32::MAX, index32);
        let bandwidth =
            if device.bandwidth_mb_per_s > 0 { device.bandwidth_mb_per_s } else { slowest_known };
        owners.push(OwnerSpec { device: device.id.0, zone, class, bandwidth });
    }
    let based = |id: DeviceId| {
        sector_base.binary_search_by_key(&id, |(d, _)| *d).map_or(0, |i| sector_base[i].1)
    };
    for (owner, device) in devices.iter().enumerate() {
        let full = current_count(device, params);
        let base = based(device.id);
        let live = if is_member(device) {
            crate::engine::ring::vnode_count(
                device.capacity_bytes,
                device.reweight.0,
                params.throttle_bytes,
            )
            .min(full)
        } else {
            0
        };
        let state = if device.up { SlotState::Live } else { SlotState::Down };
        for index in 0..full.max(base) {
            slot(SlotSpec {
                position: vnode_position(device.id, index),
                owner: index32(owner),
                base: index < base,
                state: if index < live { state } else { SlotState::Marked },
            });
        }
    }
    // Base devices no longer in the map: marked slots that keep their sectors' boundaries.
    for (device, count) in sector_base {
        if map.device(*device).is_none() {
            for index in 0..*count {
                slot(SlotSpec {
                    position: vnode_position(*device, index),
                    owner: NO_OWNER,
                    base: true,
                    state: SlotState::Marked,
                });
            }
        }
    }
    owners
}

/// Whether a device may hold data of an attributed pool (it may still be down).
pub(super) fn is_member(device: &crate::map::Device) -> bool {
    device.is_in && device.weight.0 > 0 && device.reweight.0 > 0 && device.capacity_bytes > 0
}

/// The virtual nodes a device has now, ⌈capacity / c_throttle⌉ (0 without capacity).
pub(super) fn current_count(device: &crate::map::Device, params: &AttributedParams) -> u32 {
    if device.capacity_bytes == 0 {
        0
    } else {
        vnode_count(device.capacity_bytes, params.throttle_bytes)
    }
}
