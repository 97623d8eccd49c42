//! straw2 choice, the hot loop of CRUSH, bit-exact with Ceph's `bucket_straw2_choose`.
//!
//! Ceph draws `ln(u) / w` for every item (`u` a 16-bit hash, `ln = crush_ln(u) − 2^48 ≤ 0`,
//! truncating 64-bit division) and keeps the largest, the lowest index on ties. Equivalently
//! the winner has the least quotient `⌊m / w⌋` with magnitude `m = 2^48 − crush_ln(u)`. This
//! module computes exactly that, faster:
//!
//! * items are hashed a chunk at a time, lane-wise, so the compiler emits vector instructions
//!   and interleaves the lanes' long dependency chains;
//! * magnitudes come from a 64 Ki-entry table built at compile time;
//! * `⌊m / w⌋ < q ⇔ m < q·w`, so comparing an item costs one multiplication and only a new
//!   winner pays for a division; when all weights are equal, the winner is the lowest index
//!   whose magnitude is below `(⌊m_min / w⌋ + 1)·w` — one division per bucket;
//! * the code is compiled three times — for the baseline x86-64 (SSE2), AVX2 and AVX-512 —
//!   and the widest the CPU supports is chosen once, when a map is compiled ([`Simd`]).
//!   Results are identical at every level (tested).

use super::hash::{hash32_3_lanes, hash32_3_lanes_c};
use super::ln::STRAW2_MAGNITUDE;

/// Which vector instructions straw2 uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Simd {
    /// Whatever the build targets (SSE2 on x86-64).
    Baseline,
    /// AVX2 (x86-64).
    Avx2,
    /// AVX-512 F + VL (x86-64).
    Avx512,
}

impl Simd {
    /// The widest level this CPU supports.
    pub fn detect() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
            {
                return Simd::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Simd::Avx2;
            }
        }
        Simd::Baseline
    }

    /// This level if the CPU supports it, else the widest one below it that it does.
    pub fn at_most(self) -> Simd {
        self.min(Simd::detect())
    }
}

/// Largest bucket ranked by [`choose_equal`] (its magnitudes live on the stack).
pub(crate) const EQUAL_WEIGHT_ITEMS_MAX: usize = 64;

const BASELINE: u8 = 0;
const AVX2: u8 = 1;
const AVX512: u8 = 2;

/// Calls `$chunk::<L>(args…)` with the lane count `L` suited to `$left` remaining items at
/// vector level `$level` (a const), and evaluates to the number of items it handled.
macro_rules! by_chunks {
    ($level:expr, $left:expr, $chunk:ident($($arg:expr),*)) => {
        match ($level, $left) {
            (AVX512, 0..=8) => $chunk::<8>($($arg),*),
            (AVX512, 9..=16) => $chunk::<16>($($arg),*),
            (AVX512, _) => $chunk::<32>($($arg),*),
            (AVX2, 0..=8) => $chunk::<8>($($arg),*),
            (AVX2, _) => $chunk::<16>($($arg),*),
            (_, 0..=4) => $chunk::<4>($($arg),*),
            (_, 5..=8) => $chunk::<8>($($arg),*),
            (_, 9..=12) => $chunk::<12>($($arg),*),
            (_, 13..=16) => $chunk::<16>($($arg),*),
            (_, 17..=20) => $chunk::<20>($($arg),*),
            (_, _) => $chunk::<16>($($arg),*),
        }
    };
}

/// The straw2 winner among `items` (hashed as `ids`) with `weights`.
#[allow(unsafe_code)]
pub(crate) fn choose(
    simd: Simd,
    items: &[i32],
    ids: &[i32],
    weights: &[u32],
    x: u32,
    r: u32,
) -> i32 {
    match simd {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` above `Baseline` comes only from `Simd::detect`/`at_most`, which
        // check that this CPU has the features the function is compiled for.
        Simd::Avx512 => unsafe { choose_avx512(items, ids, weights, x, r) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 => unsafe { choose_avx2(items, ids, weights, x, r) },
        _ => choose_at::<BASELINE>(items, ids, weights, x, r),
    }
}

/// The straw2 winner among `items` that all have weight `weight` (non-zero), at most
/// [`EQUAL_WEIGHT_ITEMS_MAX`] of them.
#[allow(unsafe_code)]
pub(crate) fn choose_equal(simd: Simd, items: &[i32], weight: u32, x: u32, r: u32) -> i32 {
    match simd {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `choose`.
        Simd::Avx512 => unsafe { choose_equal_avx512(items, weight, x, r) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `choose`.
        Simd::Avx2 => unsafe { choose_equal_avx2(items, weight, x, r) },
        _ => choose_equal_at::<BASELINE>(items, weight, x, r),
    }
}

/// One straw2 choice among items of equal non-zero weight, for [`choose_equal_batch`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request<'a> {
    pub(crate) items: &'a [i32],
    pub(crate) weight: u32,
    pub(crate) r: u32,
}

/// Most lanes (items over all requests) of one batch.
pub(crate) const BATCH_LANES_MAX: usize = 192;

/// Several straw2 choices with the same `x` at once — different buckets or different `r` —
/// so that their hash chains run side by side (a single bucket's chain is latency-bound).
/// Each request must satisfy [`choose_equal`]'s conditions; at most [`BATCH_LANES_MAX`]
/// items in all. Writes one winner per request to `out`.
#[allow(unsafe_code)]
pub(crate) fn choose_equal_batch(simd: Simd, x: u32, requests: &[Request<'_>], out: &mut [i32]) {
    match simd {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `choose`.
        Simd::Avx512 => unsafe { batch_avx512(x, requests, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `choose`.
        Simd::Avx2 => unsafe { batch_avx2(x, requests, out) },
        _ => batch_at::<BASELINE>(x, requests, out),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2")]
fn batch_avx512(x: u32, requests: &[Request<'_>], out: &mut [i32]) {
    batch_at::<AVX512>(x, requests, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn batch_avx2(x: u32, requests: &[Request<'_>], out: &mut [i32]) {
    batch_at::<AVX2>(x, requests, out)
}

#[inline(always)]
fn batch_at<const LEVEL: u8>(x: u32, requests: &[Request<'_>], out: &mut [i32]) {
    let mut ids = [0u32; BATCH_LANES_MAX];
    let mut rs = [0u32; BATCH_LANES_MAX];
    let mut lanes = 0usize;
    for request in requests {
        for (slot, item) in ids[lanes..lanes + request.items.len()].iter_mut().zip(request.items) {
            *slot = *item as u32;
        }
        rs[lanes..lanes + request.items.len()].fill(request.r);
        lanes += request.items.len();
    }
    let mut hashes = [0u32; BATCH_LANES_MAX];
    let mut base = 0usize;
    while base < lanes {
        base += match (LEVEL, lanes - base) {
            (AVX512, 17..) => batch_chunk::<32>(x, &ids, &rs, base, &mut hashes),
            (AVX512 | AVX2, _) => batch_chunk::<16>(x, &ids, &rs, base, &mut hashes),
            (_, 0..=4) => batch_chunk::<4>(x, &ids, &rs, base, &mut hashes),
            (_, 5..=8) => batch_chunk::<8>(x, &ids, &rs, base, &mut hashes),
            (_, 9..=12) => batch_chunk::<12>(x, &ids, &rs, base, &mut hashes),
            (_, 13..=16) => batch_chunk::<16>(x, &ids, &rs, base, &mut hashes),
            (_, 17..=20) => batch_chunk::<20>(x, &ids, &rs, base, &mut hashes),
            (_, _) => batch_chunk::<24>(x, &ids, &rs, base, &mut hashes),
        };
    }
    let mut start = 0usize;
    for (request, winner) in requests.iter().zip(out.iter_mut()) {
        let lanes = &hashes[start..start + request.items.len()];
        start += request.items.len();
        let mut least = u64::MAX;
        for hash in lanes {
            least = least.min(STRAW2_MAGNITUDE[(hash & 0xffff) as usize]);
        }
        let weight = u64::from(request.weight);
        let threshold = (least / weight + 1) * weight;
        let index = lanes
            .iter()
            .position(|hash| STRAW2_MAGNITUDE[(hash & 0xffff) as usize] < threshold)
            .expect("the least is below");
        *winner = request.items[index];
    }
}

#[inline(always)]
fn batch_chunk<const L: usize>(
    x: u32,
    ids: &[u32; BATCH_LANES_MAX],
    rs: &[u32; BATCH_LANES_MAX],
    base: usize,
    out: &mut [u32; BATCH_LANES_MAX],
) -> usize {
    let count = (BATCH_LANES_MAX - base).min(L);
    let mut b = [0u32; L];
    let mut c = [0u32; L];
    b[..count].copy_from_slice(&ids[base..base + count]);
    c[..count].copy_from_slice(&rs[base..base + count]);
    let hashes = hash32_3_lanes_c::<L>(x, &b, &c);
    out[base..base + count].copy_from_slice(&hashes[..count]);
    count
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2")]
fn choose_avx512(items: &[i32], ids: &[i32], weights: &[u32], x: u32, r: u32) -> i32 {
    choose_at::<AVX512>(items, ids, weights, x, r)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn choose_avx2(items: &[i32], ids: &[i32], weights: &[u32], x: u32, r: u32) -> i32 {
    choose_at::<AVX2>(items, ids, weights, x, r)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2")]
fn choose_equal_avx512(items: &[i32], weight: u32, x: u32, r: u32) -> i32 {
    choose_equal_at::<AVX512>(items, weight, x, r)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn choose_equal_avx2(items: &[i32], weight: u32, x: u32, r: u32) -> i32 {
    choose_equal_at::<AVX2>(items, weight, x, r)
}

#[inline(always)]
fn choose_equal_at<const LEVEL: u8>(items: &[i32], weight: u32, x: u32, r: u32) -> i32 {
    let size = items.len();
    debug_assert!(size <= EQUAL_WEIGHT_ITEMS_MAX && size > 0);
    let mut magnitudes = [0u64; EQUAL_WEIGHT_ITEMS_MAX];
    let mut base = 0usize;
    while base < size {
        base +=
            by_chunks!(LEVEL, size - base, magnitudes_chunk(items, x, r, base, &mut magnitudes));
    }
    let magnitudes = &magnitudes[..size];
    let least = magnitudes.iter().copied().min().expect("buckets chosen from are not empty");
    let weight = u64::from(weight);
    // (⌊m_min / w⌋ + 1)·w > m_min, and < 2^50: no overflow.
    let threshold = (least / weight + 1) * weight;
    let winner = magnitudes.iter().position(|&m| m < threshold).expect("the least is below");
    items[winner]
}

/// Magnitudes of items `base..base + L` (fewer at the end); returns how many.
#[inline(always)]
fn magnitudes_chunk<const L: usize>(
    ids: &[i32],
    x: u32,
    r: u32,
    base: usize,
    out: &mut [u64; EQUAL_WEIGHT_ITEMS_MAX],
) -> usize {
    let count = (ids.len() - base).min(L);
    let mut lane_ids = [0u32; L];
    for (lane, id) in lane_ids.iter_mut().zip(&ids[base..base + count]) {
        *lane = *id as u32;
    }
    let hashes = hash32_3_lanes::<L>(x, &lane_ids, r);
    for (slot, hash) in out[base..base + count].iter_mut().zip(&hashes) {
        *slot = STRAW2_MAGNITUDE[(hash & 0xffff) as usize];
    }
    count
}

/// The running winner: least quotient so far (`u64::MAX` for none yet: item 0 wins when every
/// weight is zero, as in Ceph).
struct Best {
    index: usize,
    quotient: u64,
}

#[inline(always)]
fn choose_at<const LEVEL: u8>(items: &[i32], ids: &[i32], weights: &[u32], x: u32, r: u32) -> i32 {
    let size = items.len();
    let mut best = Best { index: 0, quotient: u64::MAX };
    let mut base = 0usize;
    while base < size {
        base += by_chunks!(LEVEL, size - base, rank_chunk(ids, weights, x, r, base, &mut best));
    }
    items[best.index]
}

/// Ranks items `base..base + L` (fewer at the end) into `best`; returns how many.
#[inline(always)]
fn rank_chunk<const L: usize>(
    ids: &[i32],
    weights: &[u32],
    x: u32,
    r: u32,
    base: usize,
    best: &mut Best,
) -> usize {
    let count = (ids.len() - base).min(L);
    let mut lane_ids = [0u32; L];
    for (lane, id) in lane_ids.iter_mut().zip(&ids[base..base + count]) {
        *lane = *id as u32;
    }
    let hashes = hash32_3_lanes::<L>(x, &lane_ids, r);
    // Look every magnitude up before ranking, so that the table loads overlap.
    let mut magnitudes = [0u64; L];
    for (magnitude, hash) in magnitudes.iter_mut().zip(&hashes) {
        *magnitude = STRAW2_MAGNITUDE[(hash & 0xffff) as usize];
    }
    for (lane, &magnitude) in magnitudes.iter().enumerate().take(count) {
        let i = base + lane;
        let weight = u64::from(weights[i]);
        if weight == 0 {
            continue;
        }
        // limit = quotient · weight; on overflow the limit exceeds any magnitude (< 2^49).
        let wins = match best.quotient.checked_mul(weight) {
            Some(limit) => magnitude < limit,
            None => true,
        };
        if wins {
            best.index = i;
            best.quotient = magnitude / weight;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crush::hash::hash32_3;
    use crate::crush::ln::crush_ln;
    use crate::narrow::{index_i32, low32};

    /// Ceph's straw2, transcribed from the specification: the oracle.
    fn reference(items: &[i32], weights: &[u32], x: u32, r: u32) -> i32 {
        let mut high = 0;
        let mut high_draw = i64::MIN;
        for i in 0..items.len() {
            let draw = if weights[i] != 0 {
                let u = hash32_3(x, items[i] as u32, r) & 0xffff;
                let ln = crush_ln(u) as i64 - 0x1_0000_0000_0000;
                ln / i64::from(weights[i])
            } else {
                i64::MIN
            };
            if i == 0 || draw > high_draw {
                high = i;
                high_draw = draw;
            }
        }
        items[high]
    }

    #[test]
    fn every_level_matches_the_reference() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let levels: Vec<Simd> = [Simd::Baseline, Simd::Avx2, Simd::Avx512]
            .into_iter()
            .filter(|l| *l <= Simd::detect())
            .collect();
        for size in 1..=70usize {
            for round in 0..60 {
                let items: Vec<i32> = (0..size)
                    .map(|i| -index_i32(i) * 7 + i32::try_from(next() % 1000).expect("below 1000"))
                    .collect();
                let equal = round % 3 == 0;
                let weights: Vec<u32> = (0..size)
                    .map(|_| match (equal, next() % 8) {
                        (true, _) => 0x10000,
                        (false, 0) => 0,
                        (false, 1) => 1,
                        (false, 2) => u32::MAX,
                        _ => low32(next() % 0x40000),
                    })
                    .collect();
                let (x, r) = (low32(next()), low32(next() % 64));
                let expected = reference(&items, &weights, x, r);
                for &level in &levels {
                    assert_eq!(
                        choose(level, &items, &items, &weights, x, r),
                        expected,
                        "{level:?} size {size}"
                    );
                    if equal && size <= EQUAL_WEIGHT_ITEMS_MAX {
                        assert_eq!(
                            choose_equal(level, &items, 0x10000, x, r),
                            expected,
                            "{level:?} equal, size {size}"
                        );
                    }
                }
            }
        }
    }
}
