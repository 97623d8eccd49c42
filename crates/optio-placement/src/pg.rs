//! Object name → placement group → placement seed, exactly as Ceph computes it.

use std::fmt;

use crate::crush::hash::{hash32_2, str_hash_rjenkins};
use crate::ids::PoolId;
use crate::map::{Pool, PpsGenerator};

/// A placement group: a pool and a seed below the pool's `pg_num`. Displays as Ceph does
/// (`1.2f`: pool id, then the seed in hex).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PgId {
    /// The pool.
    pub pool: PoolId,
    /// The seed (`ps`), below `pg_num`.
    pub seed: u32,
}

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool.0, self.seed)
    }
}

/// Why a text is not a [`PgId`] (`POOL.SEED`, the seed in hex).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PgIdParseError {
    /// No `.` between the pool and the seed.
    #[error("'{text}' is not a PG id; write POOL.SEED with the seed in hex, e.g. 1.2f")]
    NoSeparator {
        /// The text given.
        text: String,
    },
    /// The part before the `.` is not a pool id.
    #[error(
        "'{pool}' in '{text}' is not a pool id; write POOL.SEED with a decimal pool id, e.g. 1.2f"
    )]
    Pool {
        /// The pool part.
        pool: String,
        /// The text given.
        text: String,
    },
    /// The part after the `.` is not a seed.
    #[error(
        "'{seed}' in '{text}' is not a hex PG seed; write POOL.SEED with the seed in hex, e.g. 1.2f"
    )]
    Seed {
        /// The seed part.
        seed: String,
        /// The text given.
        text: String,
    },
}

impl std::str::FromStr for PgId {
    type Err = PgIdParseError;

    fn from_str(text: &str) -> Result<PgId, PgIdParseError> {
        let (pool, seed) = text
            .split_once('.')
            .ok_or_else(|| PgIdParseError::NoSeparator { text: text.to_string() })?;
        let pool = pool
            .parse::<u32>()
            .map_err(|_| PgIdParseError::Pool { pool: pool.to_string(), text: text.to_string() })?;
        let seed = u32::from_str_radix(seed, 16)
            .map_err(|_| PgIdParseError::Seed { seed: seed.to_string(), text: text.to_string() })?;
        Ok(PgId { pool: PoolId(pool), seed })
    }
}

/// Ceph's `pg_num_mask`: `2^⌈log2 n⌉ − 1`.
pub fn pg_mask(pg_num: u32) -> u32 {
    if pg_num <= 1 {
        return 0;
    }
    // 1 to 32 ones.
    let bits = 32 - (pg_num - 1).leading_zeros();
    u32::MAX >> (32 - bits)
}

/// `ceph_stable_mod`: a modulo that moves few inputs when `b` grows.
pub fn stable_mod(x: u32, b: u32, mask: u32) -> u32 {
    if x & mask < b { x & mask } else { x & (mask >> 1) }
}

/// The raw hash of an object name (`ceph_str_hash_rjenkins`).
pub fn object_hash(name: &str) -> u32 {
    str_hash_rjenkins(name.as_bytes())
}

/// The PG seed an object hashes to in a pool with `pg_num` PGs.
pub fn object_seed(name: &str, pg_num: u32) -> u32 {
    stable_mod(object_hash(name), pg_num, pg_mask(pg_num))
}

/// The CRUSH input of a PG (`pg_pool_t::raw_pg_to_pps`).
pub fn pg_pps(pool: PoolId, seed: u32, pgp_num: u32, hashpspool: bool) -> u32 {
    let folded = stable_mod(seed, pgp_num, pg_mask(pgp_num));
    if hashpspool { hash32_2(folded, pool.0) } else { folded.wrapping_add(pool.0) }
}

/// Multiplier of the congruential pps generator: Knuth's and Numerical Recipes' LCG constant
/// (≡ 1 mod 4, as a full period modulo a power of two needs).
pub const CONGRUENTIAL_MULTIPLIER: u32 = 1_664_525;
/// Salt of the hash that derives the generator's start from the pool id.
const CONGRUENTIAL_START_SALT: u32 = 0x5eed_0002;
/// Salt of the hash that derives the generator's increment from the pool id.
const CONGRUENTIAL_INCREMENT_SALT: u32 = 0x1ac0_0002;

/// Bits of the congruential generator's range for `pgp_num` placement groups: the least `n`
/// with `2^n ≥ pgp_num`.
pub fn congruential_bits(pgp_num: u32) -> u32 {
    32 - pgp_num.saturating_sub(1).leading_zeros()
}

/// **Optio extension, not Ceph-compatible** (seed 002, "congruential pseudo-random number
/// generator"): the CRUSH input of PG `seed` of pool `pool`.
///
/// With `2^n ≥ pgp_num > 2^(n−1)` and arithmetic modulo `2^n`, the pool id gives a start
/// `x₀ = hash32_2(pool, s₁)` and an odd increment `c = hash32_2(pool, s₂) | 1`; the folded seed
/// `k = stable_mod(seed, pgp_num)` maps to the `k`-th term of `x_{i+1} = a·x_i + c` with
/// `a = 1664525`. By the Hull–Dobell theorem (`c` odd, `a ≡ 1 mod 4`) the sequence has full
/// period `2^n`, so `k ↦ x_k` is a bijection of `{0 … 2^n − 1}`: when `pgp_num` is a power of
/// two a pool's pps values are exactly a permutation of `0 … pgp_num − 1`, and distinct pools
/// get distinct permutations. `x_k` is computed by jumping ahead in O(n) (Brown, "Random
/// number generation with arbitrary strides", 1994).
pub fn congruential_pps(pool: PoolId, seed: u32, pgp_num: u32) -> u32 {
    let folded = stable_mod(seed, pgp_num, pg_mask(pgp_num));
    let bits = congruential_bits(pgp_num);
    let mask = if bits >= 32 { u32::MAX } else { (1u32 << bits) - 1 };
    let start = hash32_2(pool.0, CONGRUENTIAL_START_SALT);
    let increment = hash32_2(pool.0, CONGRUENTIAL_INCREMENT_SALT) | 1;
    // (multiplier, addend) of k steps, by squaring; all modulo 2^32, reduced at the end
    // (2^n divides 2^32).
    let (mut total_mult, mut total_add) = (1u32, 0u32);
    let (mut step_mult, mut step_add) = (CONGRUENTIAL_MULTIPLIER, increment);
    let mut k = folded;
    while k > 0 {
        if k & 1 == 1 {
            total_mult = total_mult.wrapping_mul(step_mult);
            total_add = total_add.wrapping_mul(step_mult).wrapping_add(step_add);
        }
        step_add = step_mult.wrapping_add(1).wrapping_mul(step_add);
        step_mult = step_mult.wrapping_mul(step_mult);
        k >>= 1;
    }
    total_mult.wrapping_mul(start).wrapping_add(total_add) & mask
}

/// The CRUSH input of PG `seed` of `pool`, by the pool's generator.
pub fn pool_pps(pool: &Pool, seed: u32) -> u32 {
    match pool.balance().pps {
        PpsGenerator::Ceph => pg_pps(pool.id, seed, pool.pgp_num, pool.hashpspool),
        PpsGenerator::Congruential => congruential_pps(pool.id, seed, pool.pgp_num),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_to_pg_matches_osdmaptool() {
        // osdmaptool --test-map-object foo --pool 1 (pg_num 2048): 0x7fc1f406 → 1.406.
        assert_eq!(object_hash("foo"), 0x7fc1f406);
        assert_eq!(object_seed("foo", 2048), 0x406);
        assert_eq!(pg_pps(PoolId(1), 0x406, 2048, true), 0x5565dee8);
        // obj1 folds 0xeff → 0x6ff under pg_num 2560.
        assert_eq!(object_hash("obj1"), 0x6cf8deff);
        assert_eq!(object_seed("obj1", 2560), 0x6ff);
    }

    #[test]
    fn masks() {
        assert_eq!(pg_mask(1), 0);
        assert_eq!(pg_mask(2), 1);
        assert_eq!(pg_mask(3), 3);
        assert_eq!(pg_mask(2048), 2047);
        assert_eq!(pg_mask(2560), 4095);
    }

    /// The generator stepped one term at a time: the oracle of the jump-ahead.
    fn congruential_naive(pool: PoolId, k: u32, pgp_num: u32) -> u32 {
        let bits = congruential_bits(pgp_num);
        let mask = if bits >= 32 { u32::MAX } else { (1u32 << bits) - 1 };
        let mut x = hash32_2(pool.0, CONGRUENTIAL_START_SALT);
        let c = hash32_2(pool.0, CONGRUENTIAL_INCREMENT_SALT) | 1;
        for _ in 0..k {
            x = x.wrapping_mul(CONGRUENTIAL_MULTIPLIER).wrapping_add(c);
        }
        x & mask
    }

    #[test]
    fn congruential_pps_is_a_bijection_of_its_range() {
        for pgp_num in [1u32, 2, 3, 4, 5, 64, 100, 1000, 1024, 2048, 4096] {
            let range = 1u32 << congruential_bits(pgp_num);
            assert!(range >= pgp_num && (range == 1 || range / 2 < pgp_num), "{pgp_num}");
            for pool in [PoolId(0), PoolId(1), PoolId(77)] {
                // Every folded seed below the range: all distinct, all inside.
                let mut seen = vec![false; range as usize];
                for seed in 0..pgp_num {
                    let pps = congruential_pps(pool, seed, pgp_num);
                    assert!(pps < range, "{pgp_num} {pool:?}: {pps}");
                    assert!(!seen[pps as usize], "{pgp_num} {pool:?}: {pps} twice");
                    seen[pps as usize] = true;
                }
                // The whole sequence over the range is a permutation (full period).
                let mut all: Vec<u32> =
                    (0..range).map(|k| congruential_naive(pool, k, range)).collect();
                all.sort_unstable();
                assert_eq!(all, (0..range).collect::<Vec<_>>(), "{pgp_num} {pool:?}");
            }
        }
    }

    #[test]
    fn congruential_jump_ahead_matches_stepping() {
        for k in [0u32, 1, 2, 3, 17, 1000, 2047, 65535] {
            assert_eq!(
                congruential_pps(PoolId(3), k, 1 << 16),
                congruential_naive(PoolId(3), k, 1 << 16)
            );
        }
        // Folding by pgp_num happens first, as for Ceph's pps.
        assert_eq!(congruential_pps(PoolId(3), 3000, 2048), congruential_pps(PoolId(3), 952, 2048));
    }

    #[test]
    fn congruential_pps_golden() {
        // Pinned values: changing them is a placement change (a new placement version).
        let got: Vec<u32> = (0..8).map(|k| congruential_pps(PoolId(1), k, 2048)).collect();
        assert_eq!(got, GOLDEN_POOL1_2048);
        let got: Vec<u32> = (0..4).map(|k| congruential_pps(PoolId(2), k, 100)).collect();
        assert_eq!(got, GOLDEN_POOL2_100);
        // Distinct pools, distinct permutations.
        assert_ne!(congruential_pps(PoolId(1), 5, 2048), congruential_pps(PoolId(2), 5, 2048));
    }

    const GOLDEN_POOL1_2048: [u32; 8] = [126, 843, 1460, 777, 1626, 1911, 1008, 1045];
    const GOLDEN_POOL2_100: [u32; 4] = [41, 120, 123, 34];

    #[test]
    fn pg_ids_round_trip() {
        let pg: PgId = "1.2f".parse().expect("valid");
        assert_eq!(pg, PgId { pool: PoolId(1), seed: 0x2f });
        assert_eq!(pg.to_string(), "1.2f");
        assert!("12f".parse::<PgId>().is_err());
        assert!("x.1".parse::<PgId>().is_err());
    }
}
