//! `crush_ln`: Ceph's fixed-point log2 used by straw2 buckets.

use super::ln_tables::{LL, RH_LH};

/// `crush_ln(u)` ≈ `2^44 · log2(u + 1)` for `u` in `0..=0xffff`, bit-exact with Ceph.
///
/// Not monotone at the very top (`crush_ln(0xffff) < crush_ln(0xfffe)`), exactly like Ceph.
#[inline(always)]
pub fn crush_ln(u: u32) -> u64 {
    debug_assert!(u <= 0xffff);
    let mut x = u + 1;
    // Normalise x into [2^15, 2^16] with one count of leading zeros, as current Ceph does
    // (its older loop shifted until bit 15 or 16 was set: the same).
    let shift = x.leading_zeros().saturating_sub(16);
    x <<= shift;
    let exponent = 15 - shift as u64;
    let index = ((x >> 8) << 1) as usize;
    let rh = RH_LH[index - 256] as u64;
    let lh = RH_LH[index + 1 - 256] as u64;
    let t = (u64::from(x) * rh) >> 48;
    let ll = LL[(t & 0xff) as usize] as u64;
    (exponent << 44) + ((lh + ll) >> 4)
}

/// `2^48 − crush_ln(u)` for every `u`: the magnitude straw2 divides by the weight. A table
/// (512 KiB, built at compile time) turns the normalise-and-look-up chain into one load.
pub(crate) static STRAW2_MAGNITUDE: [u64; 0x10000] = {
    let mut table = [0u64; 0x10000];
    let mut u = 0u32;
    while u < 0x10000 {
        table[u as usize] = 0x1_0000_0000_0000u64 - crush_ln_const(u);
        u += 1;
    }
    table
};

/// `crush_ln` as a `const fn` (for the table above); same arithmetic.
const fn crush_ln_const(u: u32) -> u64 {
    let mut x = u + 1;
    let shift = if x.leading_zeros() > 16 { x.leading_zeros() - 16 } else { 0 };
    x <<= shift;
    let exponent = 15 - shift as u64;
    let index = ((x >> 8) << 1) as usize;
    let rh = RH_LH[index - 256] as u64;
    let lh = RH_LH[index + 1 - 256] as u64;
    let t = (x as u64 * rh) >> 48;
    let ll = LL[(t & 0xff) as usize] as u64;
    (exponent << 44) + ((lh + ll) >> 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ceph's own loop, kept as the oracle for the leading-zeros version.
    fn crush_ln_reference(u: u32) -> u64 {
        let mut x = u + 1;
        let mut e: i64 = 15;
        while x & 0x18000 == 0 {
            x <<= 1;
            e -= 1;
        }
        let i1 = ((x >> 8) << 1) as usize;
        let rh = RH_LH[i1 - 256] as u64;
        let lh = RH_LH[i1 + 1 - 256] as u64;
        let t = (u64::from(x) * rh) >> 48;
        let ll = LL[(t & 0xff) as usize] as u64;
        ((e as u64) << 44) + ((lh + ll) >> 4)
    }

    #[test]
    fn values_from_the_specification() {
        assert_eq!(crush_ln(0), 0);
        assert_eq!(crush_ln(1), 0x100000000000);
        assert_eq!(crush_ln(2), 0x195c01a39fbd);
        assert_eq!(crush_ln(0xff), 0x800000000000);
        assert_eq!(crush_ln(0x100), 0x80171e3b6d7a);
        assert_eq!(crush_ln(0x7fff), 0xf00000000000);
        assert_eq!(crush_ln(0x8000), 0xf0002e2a60a0);
        assert_eq!(crush_ln(0xfffe), 0xfffffd61ad10);
        assert_eq!(crush_ln(0xffff), 0xfffff0000000);
    }

    #[test]
    fn leading_zeros_normalisation_matches_cephs_loop() {
        for u in 0..=0xffff {
            assert_eq!(crush_ln(u), crush_ln_reference(u), "u = {u:#x}");
        }
    }

    #[test]
    fn magnitude_table_matches_crush_ln() {
        for u in 0..=0xffff {
            assert_eq!(STRAW2_MAGNITUDE[u as usize], 0x1_0000_0000_0000 - crush_ln(u));
        }
    }

    #[test]
    fn tables_match_data_file() {
        let text = include_str!("../../data/crush_ln_tables.txt");
        let mut section = "";
        let (mut rh, mut ll) = (Vec::new(), Vec::new());
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with('[') {
                section = if line == "[RH_LH]" { "rh" } else { "ll" };
                continue;
            }
            let value = i64::from_str_radix(line.trim_start_matches("0x"), 16).expect("hex");
            if section == "rh" { rh.push(value) } else { ll.push(value) }
        }
        assert_eq!(rh, RH_LH.to_vec());
        assert_eq!(ll, LL.to_vec());
    }
}
