//! Virtual nodes on a 32-bit ring, shared by the `ring`, `elastic` and `attributed` engines:
//! where a device's virtual nodes sit, and the index that finds a key's successor among sorted
//! positions.

use crate::crush::hash::hash32_2;
use crate::ids::DeviceId;

/// The position of virtual node `vnode` of `device` on the ring.
pub fn vnode_position(device: DeviceId, vnode: u32) -> u32 {
    hash32_2(device.0, vnode)
}

/// Positions compared at once, without branches, when a bucket holds at most this many.
const WINDOW: usize = 8;
/// The shorter window of [`RingIndex::successor_near`].
const NEAR: usize = 4;

/// An index over ascending ring positions: `starts[b]` is the first position whose top bits
/// are ≥ b, with one extra entry at the end, so finding a key's successor is one table read
/// and a scan of about two entries (about 1.6 bytes per position).
#[derive(Clone, Debug)]
pub(crate) struct RingIndex {
    starts: Vec<u32>,
    shift: u32,
}

impl RingIndex {
    /// Indexes `count` ascending positions, `position(i)` being the i-th: 2 to 4 positions
    /// per bucket on average (1 to 2 bytes per position).
    pub(crate) fn new(count: usize, position: impl Fn(usize) -> u32) -> RingIndex {
        let bits = if count < 4 { 1 } else { (usize::BITS - count.leading_zeros() - 2).min(24) };
        let shift = 32 - bits;
        let mut starts = vec![0u32; (1usize << bits) + 1];
        let mut cursor = 0usize;
        for (bucket, slot) in starts.iter_mut().enumerate() {
            while cursor < count && ((position(cursor) >> shift) as usize) < bucket {
                cursor += 1;
            }
            // At most `count`, a number of virtual nodes (an engine's vnode limit, ≤ 2²⁷).
            *slot = crate::narrow::index32(cursor);
        }
        RingIndex { starts, shift }
    }

    /// The range of positions to scan for `key`'s successor.
    #[inline(always)]
    pub(crate) fn range(&self, key: u32) -> (u32, u32) {
        let bucket = (key >> self.shift) as usize;
        (self.starts[bucket], self.starts[bucket + 1])
    }

    /// The first of the indexed `items` whose position is at or after `key` (wrapping to 0);
    /// `position` reads an item's position.
    #[inline(always)]
    pub(crate) fn successor<T>(
        &self,
        key: u32,
        items: &[T],
        position: impl Fn(&T) -> u32,
    ) -> usize {
        let (start, end) = self.range(key);
        let (start, end) = (start as usize, end as usize);
        if let Some(i) = windowed::<WINDOW, T>(key, start, end, items, &position) {
            return i;
        }
        first_at_or_after(key, start, end, items.len(), |i| position(&items[i]))
    }

    /// [`successor`](Self::successor) for large items: when the key's bucket holds at most
    /// [`NEAR`] of them (most do), only the first [`NEAR`] are read — fewer cache lines than
    /// the full window, at the price of a branch the CPU mispredicts for the other buckets.
    #[inline(always)]
    pub(crate) fn successor_near<T>(
        &self,
        key: u32,
        items: &[T],
        position: impl Fn(&T) -> u32,
    ) -> usize {
        let (start, end) = self.range(key);
        if let Some(i) = windowed::<NEAR, T>(key, start as usize, end as usize, items, &position) {
            return i;
        }
        self.successor(key, items, position)
    }

    /// Bytes of memory the index uses.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.starts.capacity() * 4
    }
}

/// Positions a [`ResidualIndex`] bucket describes in its own word.
const RESIDUALS: usize = 4;
/// A [`ResidualIndex`] word: the bucket's first position's index (low 28 bits).
const START_MASK: u64 = (1 << 28) - 1;

/// An index over ascending ring positions that usually finds a key's successor with one
/// 8-byte read and no read of the positions: one word per bucket of the top `bits` bits
/// (about one position per bucket), holding the index of the bucket's first position, how
/// many positions the bucket holds (saturating at 15), and for its first four the 8 bits of
/// the position just below the bucket bits. When the bucket holds at most four and none of
/// their 8 bits equals the key's, the count of those below the key's is the successor;
/// otherwise (1.8 % of random keys at 2.6 M and 21 M positions) the bucket's positions are
/// read. For very large rings (where the positions themselves miss the cache) a dependent
/// read fewer than [`RingIndex`]; 4 to 8 bytes per position.
#[derive(Clone, Debug)]
pub(crate) struct ResidualIndex {
    /// One word per bucket, and one more holding the position count as its start.
    words: Vec<u64>,
    shift: u32,
}

impl ResidualIndex {
    /// The index holds fewer positions than this (its starts, the count included, have 28
    /// bits).
    pub(crate) const CAPACITY: usize = 1 << 28;

    /// Indexes `count` ascending positions (fewer than [`CAPACITY`](Self::CAPACITY)),
    /// `position(i)` being the i-th.
    pub(crate) fn new(count: usize, position: impl Fn(usize) -> u32) -> ResidualIndex {
        debug_assert!(count < Self::CAPACITY);
        let bits = if count < 2 { 1 } else { (usize::BITS - count.leading_zeros() - 1).min(24) };
        let shift = 32 - bits;
        let mut words = vec![0u64; (1usize << bits) + 1];
        let mut cursor = 0usize;
        for (bucket, word) in words.iter_mut().enumerate() {
            let start = cursor;
            while cursor < count && ((position(cursor) >> shift) as usize) <= bucket {
                cursor += 1;
            }
            let held = cursor - start;
            *word = start as u64 | (held.min(15) as u64) << 28;
            for i in 0..RESIDUALS {
                // Beyond the bucket's positions, 0xff: never below a key's 8 bits.
                let residual =
                    if i < held { (position(start + i) >> (shift - 8)) & 0xff } else { 0xff };
                *word |= u64::from(residual) << (32 + 8 * i);
            }
        }
        ResidualIndex { words, shift }
    }

    /// The first of `count` indexed positions at or after `key` (wrapping to 0); `position`
    /// reads the i-th (only for the keys the words cannot place).
    #[inline(always)]
    pub(crate) fn successor(
        &self,
        key: u32,
        count: usize,
        position: impl Fn(usize) -> u32,
    ) -> usize {
        let bucket = (key >> self.shift) as usize;
        let word = self.words[bucket];
        let start = (word & START_MASK) as usize;
        let held = (word >> 28 & 15) as usize;
        // The four residuals against the key's 8 bits, byte-wise in one word: `below` has
        // the top bit of each byte whose residual is less, `tie` is nonzero when one is equal.
        let residuals = (word >> 32) as u32;
        let probe = ((key >> (self.shift - 8)) & 0xff) * 0x0101_0101;
        const HIGH: u32 = 0x8080_8080;
        let low_diff = (residuals | HIGH).wrapping_sub(probe & !HIGH);
        let below = ((!residuals & probe) | (!(residuals ^ probe) & !low_diff)) & HIGH;
        let equal = residuals ^ probe;
        let tie = equal.wrapping_sub(0x0101_0101) & !equal & HIGH;
        if held <= RESIDUALS && tie == 0 {
            let below = ((below >> 7).wrapping_mul(0x0101_0101) >> 24) as usize;
            let i = start + below;
            return if i == count { 0 } else { i };
        }
        let end = (self.words[bucket + 1] & START_MASK) as usize;
        first_at_or_after(key, start, end, count, position)
    }

    /// Bytes of memory the index uses.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

/// The successor of `key` among `items[start..end]` (wrapping to 0) when that range holds at
/// most `W` items and `W` items from `start` exist, counted without branches: the positions
/// from `end` on are at or past the next bucket's start, so none is below `key`, and counting
/// those below it over a fixed window gives the same index as a scan, with no mispredicted
/// loop exit. `None` otherwise.
#[inline(always)]
fn windowed<const W: usize, T>(
    key: u32,
    start: usize,
    end: usize,
    items: &[T],
    position: &impl Fn(&T) -> u32,
) -> Option<usize> {
    if end - start > W {
        return None;
    }
    let window = items.get(start..start + W)?;
    let i = start + window.iter().map(|item| usize::from(position(item) < key)).sum::<usize>();
    Some(if i == items.len() { 0 } else { i })
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The first position at or after `key` by binary search (wrapping to 0).
    fn reference(positions: &[u32], key: u32) -> usize {
        let i = positions.partition_point(|p| *p < key);
        if i == positions.len() { 0 } else { i }
    }

    proptest! {
        /// The windowed counts, the scan and the residual words give the successor a binary
        /// search gives, for rings from one position to thousands, crowded buckets and
        /// repeated positions included, and keys at and next to every position.
        #[test]
        fn the_successor_is_the_first_position_at_or_after_the_key(
            mut positions in prop::collection::vec(any::<u32>(), 1..3000),
            crowd in prop::collection::vec(0u32..64, 0..40),
            keys in prop::collection::vec(any::<u32>(), 1..200),
        ) {
            // A crowded neighbourhood: more positions in one bucket than the window holds.
            let base = positions[0] & !0xfff;
            positions.extend(crowd.iter().map(|c| base.wrapping_add(*c)));
            positions.sort_unstable();
            let index = RingIndex::new(positions.len(), |i| positions[i]);
            let residual = ResidualIndex::new(positions.len(), |i| positions[i]);
            let probes = keys.iter().copied().chain(
                positions.iter().flat_map(|p| [*p, p.wrapping_add(1), p.wrapping_sub(1)]),
            );
            for key in probes {
                let got = index.successor(key, &positions, |p| *p);
                prop_assert_eq!(got, reference(&positions, key), "key {}", key);
                let near = index.successor_near(key, &positions, |p| *p);
                prop_assert_eq!(near, reference(&positions, key), "key {} (near)", key);
                let words = residual.successor(key, positions.len(), |i| positions[i]);
                prop_assert_eq!(words, reference(&positions, key), "key {} (residual)", key);
            }
        }
    }
}
