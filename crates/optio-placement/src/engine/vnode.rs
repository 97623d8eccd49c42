//! Virtual nodes on a 32-bit ring, shared by the `ring`, `elastic` and `attributed` engines:
//! where a device's virtual nodes sit, and the index that finds a key's successor among sorted
//! positions.

use crate::crush::hash::hash32_2;
use crate::ids::DeviceId;

/// The position of virtual node `vnode` of `device` on the ring.
pub fn vnode_position(device: DeviceId, vnode: u32) -> u32 {
    hash32_2(device.0, vnode)
}

/// An index over ascending ring positions: `starts[b]` is the first position whose top bits
/// are ≥ b, with one extra entry at the end, so finding a key's successor is one table read
/// and a scan of about two entries (about 1.6 bytes per position).
#[derive(Clone, Debug)]
pub(crate) struct RingIndex {
    starts: Vec<u32>,
    shift: u32,
}

impl RingIndex {
    /// Indexes `count` ascending positions, `position(i)` being the i-th.
    pub(crate) fn new(count: usize, position: impl Fn(usize) -> u32) -> RingIndex {
        let bits = if count < 4 { 1 } else { (usize::BITS - count.leading_zeros() - 2).min(24) };
        let shift = 32 - bits;
        let mut starts = vec![0u32; (1usize << bits) + 1];
        let mut cursor = 0usize;
        for (bucket, slot) in starts.iter_mut().enumerate() {
            while cursor < count && ((position(cursor) >> shift) as usize) < bucket {
                cursor += 1;
            }
            *slot = cursor as u32;
        }
        RingIndex { starts, shift }
    }

    /// The range of positions to scan for `key`'s successor.
    #[inline(always)]
    pub(crate) fn range(&self, key: u32) -> (u32, u32) {
        let bucket = (key >> self.shift) as usize;
        (self.starts[bucket], self.starts[bucket + 1])
    }

    /// The first of the `count` indexed positions at or after `key` (wrapping to 0).
    #[inline(always)]
    pub(crate) fn successor(
        &self,
        key: u32,
        count: usize,
        position: impl Fn(usize) -> u32,
    ) -> usize {
        let (start, end) = self.range(key);
        first_at_or_after(key, start as usize, end as usize, count, position)
    }

    /// Bytes of memory the index uses.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.starts.capacity() * 4
    }
}

/// The first position at or after `key` from `start`, scanning up to `end` (wrapping to 0 at
/// `count`): the scan of [`RingIndex::successor`], for callers that read the range apart.
#[inline(always)]
pub(crate) fn first_at_or_after(
    key: u32,
    start: usize,
    end: usize,
    count: usize,
    position: impl Fn(usize) -> u32,
) -> usize {
    let mut i = start;
    while i < end && position(i) < key {
        i += 1;
    }
    if i == count { 0 } else { i }
}
