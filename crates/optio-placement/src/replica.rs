//! [`ReplicaSet`]: the devices of one placement, primary first — what every engine writes.

use crate::ids::{DeviceId, ITEM_NONE};
use crate::narrow::small8;

/// Most replicas (or erasure-code shards) of one object.
pub const REPLICAS_MAX: usize = 32;

/// An ordered set of devices (primary first). Positional sets (erasure-coded pools) may hold
/// [`ITEM_NONE`] holes, and keep their order when primary affinity picks a primary other
/// than the first device (as Ceph does: shards cannot move), so the primary is recorded
/// apart. Two sets are equal when their entries and primaries are: whatever lies beyond
/// `len` (left there by [`clear`](Self::clear)) does not count.
#[derive(Clone, Copy)]
pub struct ReplicaSet {
    len: u8,
    /// Position of the primary, or [`PRIMARY_IS_FIRST`]: the first device.
    primary: u8,
    items: [i32; REPLICAS_MAX],
}

/// `ReplicaSet::primary` value meaning "the first device".
const PRIMARY_IS_FIRST: u8 = u8::MAX;

impl PartialEq for ReplicaSet {
    fn eq(&self, other: &ReplicaSet) -> bool {
        self.as_slice() == other.as_slice() && self.primary() == other.primary()
    }
}

impl Eq for ReplicaSet {}

impl Default for ReplicaSet {
    fn default() -> ReplicaSet {
        ReplicaSet { len: 0, primary: PRIMARY_IS_FIRST, items: [ITEM_NONE; REPLICAS_MAX] }
    }
}

impl std::fmt::Debug for ReplicaSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl ReplicaSet {
    /// An empty set.
    pub fn new() -> ReplicaSet {
        ReplicaSet::default()
    }
    /// The raw entries (device ids or `ITEM_NONE`).
    pub fn as_slice(&self) -> &[i32] {
        &self.items[..self.len as usize]
    }
    /// Number of entries, holes included.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Most entries a set can hold.
    pub fn capacity(&self) -> usize {
        REPLICAS_MAX
    }
    /// Removes every entry.
    pub fn clear(&mut self) {
        self.len = 0;
        self.primary = PRIMARY_IS_FIRST;
    }
    /// Appends an entry (ignored when full).
    pub fn push(&mut self, item: i32) {
        if (self.len as usize) < REPLICAS_MAX {
            self.items[self.len as usize] = item;
            self.len += 1;
        }
    }
    /// The devices, holes skipped.
    pub fn devices(&self) -> impl Iterator<Item = DeviceId> + '_ {
        self.as_slice().iter().filter(|&&i| i >= 0 && i != ITEM_NONE).map(|&i| DeviceId(i as u32))
    }
    /// The primary: the first device, unless primary affinity chose another shard of an
    /// erasure-coded set.
    pub fn primary(&self) -> Option<DeviceId> {
        match self.as_slice().get(usize::from(self.primary)) {
            Some(&item) if item >= 0 && item != ITEM_NONE => Some(DeviceId(item as u32)),
            _ => self.devices().next(),
        }
    }
    /// Whether `device` is in the set.
    pub fn contains(&self, device: DeviceId) -> bool {
        self.devices().any(|d| d == device)
    }
    /// Replaces the entries with `items` (at most [`REPLICAS_MAX`]); the first is primary.
    pub(crate) fn set_from(&mut self, items: &[i32]) {
        self.len = small8(items.len().min(REPLICAS_MAX));
        self.primary = PRIMARY_IS_FIRST;
        self.items[..self.len as usize].copy_from_slice(&items[..self.len as usize]);
    }
    /// Replaces the entries with `item(0)`, …, `item(len - 1)` (at most [`REPLICAS_MAX`]),
    /// written in place: a set built elsewhere and copied in would be read back as one wide
    /// load right after narrow stores, which the CPU cannot forward; the first is primary.
    #[inline(always)]
    pub(crate) fn fill(&mut self, len: usize, mut item: impl FnMut(usize) -> i32) {
        let len = len.min(REPLICAS_MAX);
        for (i, slot) in self.items[..len].iter_mut().enumerate() {
            *slot = item(i);
        }
        self.len = small8(len);
        self.primary = PRIMARY_IS_FIRST;
    }
    /// Names the entry at `position` primary without moving it (erasure-coded sets).
    pub(crate) fn set_primary_position(&mut self, position: usize) {
        self.primary = small8(position);
    }
    /// Moves the entry at `position` to the front, the ones before it keeping their order.
    pub(crate) fn move_to_front(&mut self, position: usize) {
        self.items[..=position].rotate_right(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_sets_compare_by_their_entries_only() {
        // A reused set keeps stale entries past its length; they must not make it unequal
        // to a fresh set with the same entries (they did when equality was derived).
        let mut reused = ReplicaSet::new();
        for d in [4, 8, 15] {
            reused.push(d);
        }
        reused.clear();
        reused.push(2);
        let mut fresh = ReplicaSet::new();
        fresh.push(2);
        assert_eq!(reused, fresh);
        fresh.push(3);
        assert_ne!(reused, fresh);
    }
}
