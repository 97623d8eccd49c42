//! Ceph's rjenkins1 hashes (`src/crush/hash.c`, `src/common/ceph_hash.cc`).
//!
//! All arithmetic is on `u32` with wrap-around; signed inputs (bucket ids) are reinterpreted.
//! The mixer updates all three of its arguments in place and later mixes reuse them.

const SEED: u32 = 1_315_423_911;
const X0: u32 = 231_232;
const Y0: u32 = 1232;

#[inline(always)]
pub(crate) fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*b).wrapping_sub(*c);
    *a ^= *c >> 13;
    *b = b.wrapping_sub(*c).wrapping_sub(*a);
    *b ^= *a << 8;
    *c = c.wrapping_sub(*a).wrapping_sub(*b);
    *c ^= *b >> 13;
    *a = a.wrapping_sub(*b).wrapping_sub(*c);
    *a ^= *c >> 12;
    *b = b.wrapping_sub(*c).wrapping_sub(*a);
    *b ^= *a << 16;
    *c = c.wrapping_sub(*a).wrapping_sub(*b);
    *c ^= *b >> 5;
    *a = a.wrapping_sub(*b).wrapping_sub(*c);
    *a ^= *c >> 3;
    *b = b.wrapping_sub(*c).wrapping_sub(*a);
    *b ^= *a << 10;
    *c = c.wrapping_sub(*a).wrapping_sub(*b);
    *c ^= *b >> 15;
}

/// `crush_hash32_rjenkins1_2`.
#[inline]
pub fn hash32_2(a: u32, b: u32) -> u32 {
    let (mut a, mut b) = (a, b);
    let mut h = SEED ^ a ^ b;
    let (mut x, mut y) = (X0, Y0);
    mix(&mut a, &mut b, &mut h);
    mix(&mut x, &mut a, &mut h);
    mix(&mut b, &mut y, &mut h);
    h
}

/// `crush_hash32_rjenkins1_3`.
#[inline]
pub fn hash32_3(a: u32, b: u32, c: u32) -> u32 {
    let (mut a, mut b, mut c) = (a, b, c);
    let mut h = SEED ^ a ^ b ^ c;
    let (mut x, mut y) = (X0, Y0);
    mix(&mut a, &mut b, &mut h);
    mix(&mut c, &mut x, &mut h);
    mix(&mut y, &mut a, &mut h);
    mix(&mut b, &mut x, &mut h);
    mix(&mut y, &mut c, &mut h);
    h
}

/// `crush_hash32_rjenkins1_4`.
#[inline]
pub fn hash32_4(a: u32, b: u32, c: u32, d: u32) -> u32 {
    let (mut a, mut b, mut c, mut d) = (a, b, c, d);
    let mut h = SEED ^ a ^ b ^ c ^ d;
    let (mut x, mut y) = (X0, Y0);
    mix(&mut a, &mut b, &mut h);
    mix(&mut c, &mut d, &mut h);
    mix(&mut a, &mut x, &mut h);
    mix(&mut y, &mut b, &mut h);
    mix(&mut c, &mut x, &mut h);
    mix(&mut y, &mut d, &mut h);
    h
}

#[inline(always)]
fn mix_lanes<const L: usize>(a: &mut [u32; L], b: &mut [u32; L], c: &mut [u32; L]) {
    for i in 0..L {
        mix(&mut a[i], &mut b[i], &mut c[i]);
    }
}

/// `hash32_3(a, b[i], c)` for `L` values of `b` at once. Written lane-wise so that the
/// compiler turns it into vector instructions and interleaves the lanes' dependency chains;
/// bit-identical to [`hash32_3`].
#[inline(always)]
pub fn hash32_3_lanes<const L: usize>(a: u32, b: &[u32; L], c: u32) -> [u32; L] {
    hash32_3_lanes_c(a, b, &[c; L])
}

/// `hash32_3(a, b[i], c[i])` for `L` lanes at once; see [`hash32_3_lanes`].
#[inline(always)]
pub fn hash32_3_lanes_c<const L: usize>(a: u32, b: &[u32; L], c: &[u32; L]) -> [u32; L] {
    let mut a = [a; L];
    let mut b = *b;
    let mut c = *c;
    let mut h = [0u32; L];
    for i in 0..L {
        h[i] = SEED ^ a[i] ^ b[i] ^ c[i];
    }
    let mut x = [X0; L];
    let mut y = [Y0; L];
    mix_lanes(&mut a, &mut b, &mut h);
    mix_lanes(&mut c, &mut x, &mut h);
    mix_lanes(&mut y, &mut a, &mut h);
    mix_lanes(&mut b, &mut x, &mut h);
    mix_lanes(&mut y, &mut c, &mut h);
    h
}

/// `ceph_str_hash_rjenkins`: Bob Jenkins' lookup2 over a byte string, as Ceph hashes object
/// names to placement groups.
pub fn str_hash_rjenkins(bytes: &[u8]) -> u32 {
    let (mut a, mut b, mut c) = STR_HASH_START;
    let mut chunks = bytes.chunks_exact(12);
    for block in &mut chunks {
        str_hash_block(block, &mut a, &mut b, &mut c);
    }
    // Ceph adds the length as a u32 (lengths beyond 4 GiB wrap, as in C).
    str_hash_finish(a, b, c, crate::narrow::low32(bytes.len() as u64), chunks.remainder())
}

/// The state [`str_hash_rjenkins`] starts from (lookup2's golden ratio twice, then 0).
pub(crate) const STR_HASH_START: (u32, u32, u32) = (0x9e37_79b9, 0x9e37_79b9, 0);

/// One whole 12-byte block of [`str_hash_rjenkins`].
#[inline(always)]
pub(crate) fn str_hash_block(bytes: &[u8], a: &mut u32, b: &mut u32, c: &mut u32) {
    let word = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    *a = a.wrapping_add(word(0));
    *b = b.wrapping_add(word(4));
    *c = c.wrapping_add(word(8));
    mix(a, b, c);
}

/// The end of [`str_hash_rjenkins`]: the last partial block (under 12 bytes) and the length.
#[inline(always)]
pub(crate) fn str_hash_finish(mut a: u32, mut b: u32, mut c: u32, len: u32, tail: &[u8]) -> u32 {
    c = c.wrapping_add(len);
    for (i, &byte) in tail.iter().enumerate() {
        let value = u32::from(byte);
        match i {
            0..=3 => a = a.wrapping_add(value << (8 * i)),
            4..=7 => b = b.wrapping_add(value << (8 * (i - 4))),
            // The low byte of c is reserved for the length.
            _ => c = c.wrapping_add(value << (8 * (i - 7))),
        }
    }
    mix(&mut a, &mut b, &mut c);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_match_scalar() {
        let mut state = 12345u32;
        for _ in 0..1000 {
            let mut b = [0u32; 12];
            for v in &mut b {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                *v = state;
            }
            let (a, c) = (state.rotate_left(7), state.rotate_left(19));
            let lanes = hash32_3_lanes(a, &b, c);
            for i in 0..12 {
                assert_eq!(lanes[i], hash32_3(a, b[i], c));
            }
        }
    }

    #[test]
    fn vectors_from_ceph() {
        assert_eq!(hash32_2(0, 0), 0x19ad4ce9);
        assert_eq!(hash32_2(1, 1), 0xc5343f38);
        assert_eq!(hash32_2(0x406, 1), 0x5565dee8);
        assert_eq!(hash32_3(0, 0, 0), 0x7a3bf3b2);
        assert_eq!(hash32_3(1, 2, 3), 0x735ad42b);
        assert_eq!(hash32_3(12345, -1i32 as u32, 0), 0x7d40c1ae);
        assert_eq!(hash32_4(1, 2, 3, 4), 0x696d1f16);
        assert_eq!(hash32_4(7, -3i32 as u32, 2, -1i32 as u32), 0xb6109ae4);
        assert_eq!(str_hash_rjenkins(b""), 0xbd49d10d);
        assert_eq!(str_hash_rjenkins(b"a"), 0x29eec818);
        assert_eq!(str_hash_rjenkins(b"foo"), 0x7fc1f406);
        assert_eq!(str_hash_rjenkins(b"bar"), 0xefe6384b);
        assert_eq!(str_hash_rjenkins(b"hello_world_object_name_longer_than_12"), 0xad8c6b46);
    }
}
