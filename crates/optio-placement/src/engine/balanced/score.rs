//! Costs of (placement unit, device) pairs: the exponential race of straw2, with 32 bits of
//! hash instead of 16, and each unit's cheapest devices as its candidates.

use crate::crush::hash::hash32_3_lanes;
use crate::crush::ln::STRAW2_MAGNITUDE;

/// Hash lanes scored at once (the compiler vectorises `hash32_3_lanes`).
const LANES: usize = 8;

/// Largest cost: a device of the least weight (1/65536) drawing the worst hash. Costs stay
/// below 2^49, so sums over any path of a solver run fit in `i64`.
pub(crate) const COST_MAX: i64 = 1 << 49;

/// `−2^44·log2(u)` for the 32-bit hash `h` read as `u = (h + 1)/2^32`, interpolated linearly
/// between the entries of straw2's 16-bit magnitude table: a finer grain than straw2's (ties
/// between a unit's candidates become rare) with the same shape, integers only.
#[inline]
pub(crate) fn magnitude(hash: u32) -> i64 {
    let high = (hash >> 16) as usize;
    let low = i64::from(hash & 0xffff);
    let here = STRAW2_MAGNITUDE[high] as i64;
    let next = if high == 0xffff { 0 } else { STRAW2_MAGNITUDE[high + 1] as i64 };
    here - (((here - next) * low) >> 16)
}

/// The cost of device `id` of weight `weight` (16.16, > 0) for the unit with key `key`:
/// `magnitude / weight`, lower is better; the device a one-level straw2 bucket would pick has
/// the least cost.
#[inline]
pub(crate) fn cost(magnitude: i64, weight: u64) -> i64 {
    (magnitude / weight as i64).min(COST_MAX)
}

/// Costs of every device for `key`: `out[i]` for `ids[i]`, `weights[i]`.
pub(crate) fn costs(key: u32, ids: &[u32], weights: &[u64], salt: u32, out: &mut Vec<i64>) {
    out.clear();
    let mut chunks = ids.chunks_exact(LANES);
    let mut weight_chunks = weights.chunks_exact(LANES);
    for (chunk, weight_chunk) in (&mut chunks).zip(&mut weight_chunks) {
        let lanes: &[u32; LANES] = chunk.try_into().expect("chunks_exact gives LANES items");
        let hashes = hash32_3_lanes::<LANES>(key, lanes, salt);
        for (hash, weight) in hashes.iter().zip(weight_chunk) {
            out.push(cost(magnitude(*hash), *weight));
        }
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut lanes = [0u32; LANES];
        lanes[..rest.len()].copy_from_slice(rest);
        let hashes = hash32_3_lanes::<LANES>(key, &lanes, salt);
        for (hash, weight) in hashes.iter().zip(weight_chunks.remainder()) {
            out.push(cost(magnitude(*hash), *weight));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crush::hash::hash32_3;

    #[test]
    fn magnitude_follows_the_straw2_table() {
        for high in [0u32, 1, 0x1234, 0x8000, 0xfffd] {
            let h = high << 16;
            assert_eq!(magnitude(h), STRAW2_MAGNITUDE[high as usize] as i64);
            // Halfway to the next entry is between the two.
            let mid = magnitude(h | 0x8000);
            let (a, b) = (
                STRAW2_MAGNITUDE[high as usize] as i64,
                STRAW2_MAGNITUDE[high as usize + 1] as i64,
            );
            assert!(mid <= a.max(b) && mid >= a.min(b), "{high:#x}");
        }
        assert!(magnitude(u32::MAX) >= 0);
        assert!(magnitude(0) < COST_MAX);
    }

    #[test]
    fn lane_costs_equal_scalar_costs() {
        let ids: Vec<u32> = (0..21).map(|i| i * 7 + 3).collect();
        let weights: Vec<u64> = (0..21).map(|i| 0x8000 + i * 0x1000).collect();
        let mut out = Vec::new();
        costs(0xdead_beef, &ids, &weights, 5, &mut out);
        assert_eq!(out.len(), ids.len());
        for ((id, weight), got) in ids.iter().zip(&weights).zip(&out) {
            assert_eq!(*got, cost(magnitude(hash32_3(0xdead_beef, *id, 5)), *weight));
        }
    }
}
