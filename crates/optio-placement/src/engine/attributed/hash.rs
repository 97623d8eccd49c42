//! The strategies' hashes and arithmetic: the capacity strategy's h(x) and prime p, the
//! bandwidth strategy's draws and their scaling to a sector's u, the rendezvous selection's
//! scores and costs, and Lemire's fastmod for `mod s'`. Fixed forever: placements depend on
//! every one of them.

use super::layout::FAST_REPLICAS;

/// Salt of the capacity strategy's hash h(x).
pub(super) const CAPACITY_SALT: u32 = 0x5ec7_0c11;

/// Salt of the bandwidth strategy's draws.
pub(super) const BANDWIDTH_SALT: u32 = 0xb5ad_4ece;

/// The salts of the first draws of the first [`FAST_REPLICAS`] replicas (see
/// [`bandwidth_draw`]), folded (see [`mix32_folded`]).
pub(super) const DRAW_SALTS: [u32; FAST_REPLICAS] = {
    let mut salts = [0; FAST_REPLICAS];
    let mut replica = 0u32;
    while (replica as usize) < FAST_REPLICAS {
        salts[replica as usize] = fold16(mix32(BANDWIDTH_SALT ^ (replica << 8)));
        replica += 1;
    }
    salts
};

/// The capacity strategy's salt, folded (see [`mix32_folded`]).
pub(super) const CAPACITY_SALT_FOLDED: u32 = fold16(CAPACITY_SALT);

/// A 32-bit integer mixer (Chris Wellons' `lowbias32`): a bijection with good avalanche, used
/// for the strategies' hashes. Fixed forever: placements depend on it.
#[inline]
pub const fn mix32(x: u32) -> u32 {
    mix32_folded(fold16(x))
}

/// mix32's first step, `x ^ (x >> 16)`. It distributes over xor, so for `x = key ^ salt` it
/// is `fold16(key) ^ fold16(salt)`: the lookup folds its key once for all its hashes.
#[inline(always)]
pub(super) const fn fold16(x: u32) -> u32 {
    x ^ (x >> 16)
}

/// mix32 after its first step: `mix32(x) == mix32_folded(fold16(x))`.
#[inline(always)]
pub(super) const fn mix32_folded(mut x: u32) -> u32 {
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// The capacity strategy's h(x).
#[inline]
pub fn capacity_hash(key: u32) -> u32 {
    mix32_folded(fold16(key) ^ CAPACITY_SALT_FOLDED)
}

/// The bandwidth strategy's pseudo-random draw for replica `replica` (0-based), attempt
/// `attempt` (0: the first draw; 1: the draw among the ranges still eligible).
#[inline]
pub fn bandwidth_draw(key: u32, replica: u32, attempt: u32) -> u32 {
    mix32(key ^ mix32(BANDWIDTH_SALT ^ (replica << 8) ^ attempt))
}

/// SplitMix64's finalizer (Steele, Lea & Flood): the rendezvous selection's 64-bit hash.
#[inline]
pub(super) fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The rendezvous selection's per-replica hash of a key.
#[inline]
pub(super) fn rendezvous_key(key: u32, replica: u32) -> u64 {
    splitmix64((u64::from(key) << 32 | u64::from(replica)) ^ 0x5ec7_0a6d_e5f0_0d1e)
}

/// A slot's rendezvous score for a key (the highest wins): a hash of the slot's ring position,
/// which depends only on its device and index.
#[inline]
pub(super) fn slot_score(hr: u64, position: u32) -> u64 {
    splitmix64(hr ^ u64::from(position))
}

/// A device's weighted rendezvous cost for a key (the lowest wins): straw2's draw, `(2^48 −
/// crush_ln(u16)) / bandwidth`, so a device wins in proportion to its bandwidth.
#[inline]
pub(super) fn device_cost(hr: u64, device: u32, bandwidth: u32) -> u64 {
    let u = (splitmix64(hr ^ (u64::from(device) << 32 | 0xd1b5)) >> 48) as u32;
    ((1u64 << 48) - crate::crush::ln::crush_ln(u)) / u64::from(bandwidth.max(1))
}

/// A value in `[0, u)` from a 32-bit draw: `⌊draw · u / 2³²⌋`.
#[inline]
pub(super) fn scale(draw: u32, u: u64) -> u64 {
    u64::try_from((u128::from(draw) * u128::from(u)) >> 32).expect("draw · u / 2^32 is below u")
}

/// The prime `p > s` of the capacity strategy: the first prime at or after
/// `s + 1 + mix32(s) mod 1024` — chosen "randomly but deterministically", as CRUSH chooses the
/// primes of uniform buckets.
pub fn strategy_prime(sector_size: u32) -> u32 {
    let mut candidate = sector_size + 1 + mix32(sector_size) % 1024;
    while !is_prime(candidate) {
        candidate += 1;
    }
    candidate
}

pub(super) fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u32;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// Lemire's fastmod constant for divisor `d` (`d ≥ 1`).
pub(super) fn fastmod_constant(d: u32) -> u64 {
    (u64::MAX / u64::from(d)).wrapping_add(1)
}

/// `a mod d` with `m = fastmod_constant(d)`, exact for every 32-bit `a` and `d`.
#[inline]
pub(super) fn fastmod(a: u32, m: u64, d: u32) -> u32 {
    let low = m.wrapping_mul(u64::from(a));
    u32::try_from((u128::from(low) * u128::from(d)) >> 64).expect("low · d / 2^64 is below d")
}
