//! Object name → placement group → placement seed, exactly as Ceph computes it.

use std::fmt;

use crate::crush::hash::{hash32_2, str_hash_rjenkins};
use crate::ids::PoolId;

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

impl std::str::FromStr for PgId {
    type Err = String;

    fn from_str(text: &str) -> Result<PgId, String> {
        let (pool, seed) = text.split_once('.').ok_or_else(|| {
            format!("'{text}' is not a PG id; write POOL.SEED with the seed in hex, e.g. 1.2f")
        })?;
        let pool =
            pool.parse::<u32>().map_err(|_| format!("'{pool}' in '{text}' is not a pool id"))?;
        let seed = u32::from_str_radix(seed, 16)
            .map_err(|_| format!("'{seed}' in '{text}' is not a hex PG seed"))?;
        Ok(PgId { pool: PoolId(pool), seed })
    }
}

/// Ceph's `pg_num_mask`: `2^⌈log2 n⌉ − 1`.
pub fn pg_mask(pg_num: u32) -> u32 {
    if pg_num <= 1 {
        return 0;
    }
    let bits = 32 - (pg_num - 1).leading_zeros();
    ((1u64 << bits) - 1) as u32
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

    #[test]
    fn pg_ids_round_trip() {
        let pg: PgId = "1.2f".parse().expect("valid");
        assert_eq!(pg, PgId { pool: PoolId(1), seed: 0x2f });
        assert_eq!(pg.to_string(), "1.2f");
        assert!("12f".parse::<PgId>().is_err());
        assert!("x.1".parse::<PgId>().is_err());
    }
}
