//! Each device's ranking of the placement units, and the normalised score of a (unit, device)
//! pair: the unit's rank on the device over the device's target.
//!
//! Device `d` orders every unit by [`rank_hash`]`(d, key)`; the unit at position `k`
//! (from 0) scores `(2k + 1) / (2·t_d)`. So every device, whatever its hash luck, has exactly
//! `⌊x·t_d + ½⌋` units scoring below `x` — the same "popularity" at every level — which is
//! what keeps a balanced matching over these scores close to balanced before any correction,
//! and so keeps corrections (and the movement they cause) small. A device's ranking does not
//! depend on any other device, so adding or removing a device leaves every other ranking as
//! it was, and changing a device's weight only rescales its own scores.

use super::targets::Target;
use crate::narrow::index32;

/// Salt of the ranking hash (any constant; part of the placement version).
pub(crate) const RANK_SALT: u32 = 0x0b1a_2c3d;

/// MurmurHash3's 32-bit finaliser: a bijection of `u32` with full avalanche.
#[inline(always)]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The mask of device `device` in [`rank_hash`].
#[inline]
fn device_mask(device: u32) -> u32 {
    fmix32(device.wrapping_mul(0x9e37_79b9) ^ RANK_SALT)
}

/// The ranking hash of unit key `key` on device `device`: two rounds of MurmurHash3's
/// finaliser keyed by the device. For a fixed device it is a bijection of the keys (a
/// permutation); devices get unrelated permutations. About ten integer operations — the
/// rankings hash every (device, PG) pair, so rjenkins' ~130 would dominate the balancing.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn rank_hash(device: u32, key: u32) -> u32 {
    masked_hash(device_mask(device), key)
}

/// MurmurHash3's finaliser (a bijection of `u32`), for other hashes of the balancers.
#[inline]
pub(crate) fn mix(h: u32) -> u32 {
    fmix32(h)
}

/// A hash of `key` under `salt`, built like [`rank_hash`] (a permutation of the keys for a
/// fixed salt).
#[inline]
pub(crate) fn salted_hash(salt: u32, key: u32) -> u32 {
    masked_hash(fmix32(salt), key)
}

/// [`rank_hash`] with the device's mask computed once.
#[inline(always)]
fn masked_hash(mask: u32, key: u32) -> u32 {
    fmix32(fmix32(key ^ mask).wrapping_add(mask))
}
/// Fixed-point bits of scores.
const SCORE_SHIFT: u32 = 32;

/// A unit in one device's ranking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Ranked {
    /// The normalised score (lower is better), fixed point.
    pub score: u64,
    /// The ranking hash (breaks ties between devices of equal scores).
    pub hash: u32,
    /// The unit.
    pub unit: u32,
}

/// `(2k + 1) / (2t)` in fixed point, saturating; `t = numerator / denominator > 0`.
pub(crate) fn score(position: u64, target: &Target) -> u64 {
    let product = (2 * u128::from(position) + 1).saturating_mul(target.denominator);
    if product > u128::MAX >> SCORE_SHIFT {
        return u64::MAX;
    }
    let numerator = product << SCORE_SHIFT;
    let denominator = 2 * target.numerator.max(1);
    u64::try_from(numerator / denominator).unwrap_or(u64::MAX)
}

/// The first `count` units of device `device`'s ranking of `keys`, best first, with scores.
/// `hashes` is scratch space.
pub(crate) fn ranking(
    device: u32,
    keys: &[u32],
    target: &Target,
    count: usize,
    hashes: &mut Vec<(u32, u32)>,
) -> Vec<Ranked> {
    let count = count.min(keys.len());
    if count == 0 {
        return Vec::new();
    }
    // Hashes are uniform: the `count` least are almost surely below a threshold a little
    // above `count / units` of the range. Keep only those (cheap comparisons instead of
    // moving every pair), and fall back to all when too few pass.
    let expected = (count as u64) << 32;
    let margin = (expected / keys.len() as u64) / 4 + (64u64 << 32) / keys.len() as u64;
    let threshold = (expected / keys.len() as u64).saturating_add(margin);
    let threshold = u32::try_from(threshold).unwrap_or(u32::MAX);
    collect_hashes(device, keys, threshold, hashes);
    if hashes.len() < count {
        collect_hashes(device, keys, u32::MAX, hashes);
    }
    if count < hashes.len() {
        hashes.select_nth_unstable(count - 1);
    }
    let top = &mut hashes[..count];
    top.sort_unstable();
    top.iter()
        .enumerate()
        .map(|(k, &(hash, unit))| Ranked { score: score(k as u64, target), hash, unit })
        .collect()
}

/// `(hash, unit)` of every unit whose ranking hash on `device` is at most `threshold`, with the
/// widest vector instructions this CPU has: the rankings hash every (device, unit) pair, which
/// is most of a balanced pool's compilation (32 million pairs at 1,000 devices and 32,768
/// PGs), and the baseline x86-64 build has no 32-bit lane multiply.
#[allow(unsafe_code)]
fn collect_hashes(device: u32, keys: &[u32], threshold: u32, hashes: &mut Vec<(u32, u32)>) {
    hashes.clear();
    let mask = device_mask(device);
    match crate::crush::Simd::detect() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::detect` found the features these functions are compiled for.
        crate::crush::Simd::Avx512 => unsafe { collect_avx512(mask, keys, threshold, hashes) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        crate::crush::Simd::Avx2 => unsafe { collect_avx2(mask, keys, threshold, hashes) },
        _ => collect_lanes::<8>(mask, keys, threshold, hashes),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2")]
fn collect_avx512(mask: u32, keys: &[u32], threshold: u32, hashes: &mut Vec<(u32, u32)>) {
    collect_lanes::<16>(mask, keys, threshold, hashes)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn collect_avx2(mask: u32, keys: &[u32], threshold: u32, hashes: &mut Vec<(u32, u32)>) {
    collect_lanes::<8>(mask, keys, threshold, hashes)
}

/// [`collect_hashes`]'s loop, `L` hashes at a time (a vector), then only the few that pass the
/// threshold pushed.
#[inline(always)]
fn collect_lanes<const L: usize>(
    mask: u32,
    keys: &[u32],
    threshold: u32,
    hashes: &mut Vec<(u32, u32)>,
) {
    let mut chunks = keys.chunks_exact(L);
    let mut base = 0u32;
    for chunk in &mut chunks {
        let mut lanes = [0u32; L];
        for (lane, &key) in lanes.iter_mut().zip(chunk) {
            *lane = masked_hash(mask, key);
        }
        // Most chunks have none below the threshold: one vector compare to skip them.
        if lanes.iter().fold(false, |any, &hash| any | (hash <= threshold)) {
            for (i, &hash) in lanes.iter().enumerate() {
                if hash <= threshold {
                    hashes.push((hash, base + index32(i)));
                }
            }
        }
        base += index32(L);
    }
    for (i, &key) in chunks.remainder().iter().enumerate() {
        let hash = masked_hash(mask, key);
        if hash <= threshold {
            hashes.push((hash, base + index32(i)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_rank_over_target() {
        let t = Target { numerator: 10, denominator: 1 };
        assert_eq!(score(0, &t), (1u64 << SCORE_SHIFT) / 20);
        assert_eq!(score(9, &t), (19u64 << SCORE_SHIFT) / 20);
        // Twice the target: half the score at the same rank.
        let t2 = Target { numerator: 20, denominator: 1 };
        assert!((score(4, &t2) * 2).abs_diff(score(4, &t)) <= 2);
        assert_eq!(score(u64::MAX / 4, &Target { numerator: 1, denominator: 1 << 100 }), u64::MAX);
    }

    #[test]
    fn rank_hash_is_a_permutation_per_device() {
        for device in [0u32, 1, 999] {
            let mut seen: Vec<u32> = (0..1u32 << 16).map(|k| rank_hash(device, k) >> 16).collect();
            seen.sort_unstable();
            seen.dedup();
            // 65536 keys into 65536 top-16-bit buckets: a random function fills about 63%.
            assert!(seen.len() > 40_000, "{device}: {}", seen.len());
        }
        assert_ne!(rank_hash(1, 5), rank_hash(2, 5));
        assert_eq!(rank_hash(7, 123), rank_hash(7, 123));
        // Pinned: changing it changes every balanced placement.
        assert_eq!(rank_hash(0, 0), RANK_HASH_0_0);
    }

    const RANK_HASH_0_0: u32 = 3_520_201_770;

    #[test]
    fn the_vector_collections_equal_the_baseline() {
        // 1,003 keys: whole vectors and a remainder for every lane count.
        let keys: Vec<u32> = (0..1003u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        for device in [0u32, 3, 77] {
            for threshold in [0u32, 1 << 24, 1 << 30, u32::MAX] {
                let mut ours = Vec::new();
                collect_hashes(device, &keys, threshold, &mut ours);
                let mut baseline = Vec::new();
                collect_lanes::<4>(device_mask(device), &keys, threshold, &mut baseline);
                assert_eq!(ours, baseline, "device {device}, threshold {threshold}");
                let expected: Vec<(u32, u32)> = keys
                    .iter()
                    .enumerate()
                    .map(|(i, &k)| (rank_hash(device, k), index32(i)))
                    .filter(|&(h, _)| h <= threshold)
                    .collect();
                assert_eq!(ours, expected);
            }
        }
    }

    #[test]
    fn rankings_are_the_best_units_by_hash() {
        let keys: Vec<u32> = (0..1000).map(|i| i * 7919).collect();
        let t = Target { numerator: 50, denominator: 1 };
        let mut scratch = Vec::new();
        let top = ranking(42, &keys, &t, 60, &mut scratch);
        assert_eq!(top.len(), 60);
        let mut all: Vec<(u32, u32)> =
            keys.iter().enumerate().map(|(i, &k)| (rank_hash(42, k), index32(i))).collect();
        all.sort_unstable();
        for (k, (r, (hash, unit))) in top.iter().zip(&all).enumerate() {
            assert_eq!((r.hash, r.unit), (*hash, *unit));
            assert_eq!(r.score, score(k as u64, &t));
        }
        assert!(ranking(42, &keys, &t, 0, &mut scratch).is_empty());
        assert_eq!(ranking(42, &keys[..5], &t, 60, &mut scratch).len(), 5);
    }
}
