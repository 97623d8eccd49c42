//! Each device's ranking of the placement units, and the normalised score of a (unit, device)
//! pair: the unit's rank on the device over the device's target.
//!
//! Device `d` orders every unit by `hash32_3(key, d, RANK_SALT)`; the unit at position `k`
//! (from 0) scores `(2k + 1) / (2·t_d)`. So every device, whatever its hash luck, has exactly
//! `⌊x·t_d + ½⌋` units scoring below `x` — the same "popularity" at every level — which is
//! what keeps a balanced matching over these scores close to balanced before any correction,
//! and so keeps corrections (and the movement they cause) small. A device's ranking does not
//! depend on any other device, so adding or removing a device leaves every other ranking as
//! it was, and changing a device's weight only rescales its own scores.

use super::targets::Target;
use crate::crush::hash::hash32_3_lanes;

/// Salt of the ranking hash (any constant; part of the placement version).
pub(crate) const RANK_SALT: u32 = 0x0b1a_2c3d;
/// Hash lanes computed at once (vectorised by the compiler).
const LANES: usize = 8;
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
    hashes.clear();
    hashes.reserve(keys.len());
    let mut chunks = keys.chunks_exact(LANES);
    let mut base = 0u32;
    for chunk in &mut chunks {
        let lanes: &[u32; LANES] = chunk.try_into().expect("chunks_exact gives LANES keys");
        // hash32_3_lanes hashes (a, b[i], c); the unit's key is the varying argument here,
        // so hash (device, key, salt) and keep the same mix: still a per-device permutation.
        let h = hash32_3_lanes::<LANES>(device, lanes, RANK_SALT);
        for (i, hash) in h.iter().enumerate() {
            hashes.push((*hash, base + i as u32));
        }
        base += LANES as u32;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut lanes = [0u32; LANES];
        lanes[..rest.len()].copy_from_slice(rest);
        let h = hash32_3_lanes::<LANES>(device, &lanes, RANK_SALT);
        for (i, hash) in h.iter().take(rest.len()).enumerate() {
            hashes.push((*hash, base + i as u32));
        }
    }
    let count = count.min(hashes.len());
    if count == 0 {
        return Vec::new();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crush::hash::hash32_3;

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
    fn rankings_are_the_best_units_by_hash() {
        let keys: Vec<u32> = (0..1000).map(|i| i * 7919).collect();
        let t = Target { numerator: 50, denominator: 1 };
        let mut scratch = Vec::new();
        let top = ranking(42, &keys, &t, 60, &mut scratch);
        assert_eq!(top.len(), 60);
        let mut all: Vec<(u32, u32)> =
            keys.iter().enumerate().map(|(i, &k)| (hash32_3(42, k, RANK_SALT), i as u32)).collect();
        all.sort_unstable();
        for (k, (r, (hash, unit))) in top.iter().zip(&all).enumerate() {
            assert_eq!((r.hash, r.unit), (*hash, *unit));
            assert_eq!(r.score, score(k as u64, &t));
        }
        assert!(ranking(42, &keys, &t, 0, &mut scratch).is_empty());
        assert_eq!(ranking(42, &keys[..5], &t, 60, &mut scratch).len(), 5);
    }
}
