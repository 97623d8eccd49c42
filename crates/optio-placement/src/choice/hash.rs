//! The hash of `name + string(j)` (CHOICE's Algorithm 1) without building the string: Ceph's
//! object-name hash (`ceph_str_hash_rjenkins`, Bob Jenkins' lookup2) run over the name's bytes
//! followed by the decimal digits of `j`, exactly as if they were one string.
//!
//! So candidate `i` of object `foo` is placed exactly where an object named `foo1` (or `foo2`,
//! … — whatever suffix it took) is placed; `optio place --object foo1` shows it.

use crate::crush::hash::{STR_HASH_START, str_hash_block as block, str_hash_finish as finish};
use crate::narrow::low32;

/// Most decimal digits of a `u32`.
const SUFFIX_DIGITS_MAX: usize = 10;

/// The decimal digits of `value`, right-aligned in a buffer; returns (buffer, digit count).
fn decimal(mut value: u32) -> ([u8; SUFFIX_DIGITS_MAX], usize) {
    let mut digits = [0u8; SUFFIX_DIGITS_MAX];
    let mut count = 0;
    loop {
        digits[SUFFIX_DIGITS_MAX - 1 - count] = b'0' + (value % 10) as u8;
        count += 1;
        value /= 10;
        if value == 0 {
            return (digits, count);
        }
    }
}

/// Ceph's name hash of `name` and of `name + string(j)` for any j, sharing the work on the
/// name's whole 12-byte blocks (the same for all of them): each suffixed hash then costs one
/// or two rounds of the mixer instead of a pass over the whole name.
#[derive(Clone, Copy, Debug)]
pub struct NameHasher<'a> {
    /// The mixer state after the name's whole blocks.
    state: (u32, u32, u32),
    /// The name's last partial block (0 to 11 bytes).
    tail: &'a [u8],
    /// The name's length.
    len: u32,
}

impl<'a> NameHasher<'a> {
    /// Runs the mixer over the whole blocks of `name`.
    pub fn new(name: &'a [u8]) -> NameHasher<'a> {
        let (mut a, mut b, mut c) = STR_HASH_START;
        let mut chunks = name.chunks_exact(12);
        for chunk in &mut chunks {
            block(chunk, &mut a, &mut b, &mut c);
        }
        // As Ceph: the length is added as a u32 (wrapping beyond 4 GiB).
        NameHasher { state: (a, b, c), tail: chunks.remainder(), len: low32(name.len() as u64) }
    }

    /// `str_hash_rjenkins(name)`.
    pub fn plain(&self) -> u32 {
        let (a, b, c) = self.state;
        finish(a, b, c, self.len, self.tail)
    }

    /// `str_hash_rjenkins(name ++ decimal(suffix))`.
    pub fn suffixed(&self, suffix: u32) -> u32 {
        let (digits, count) = decimal(suffix);
        let digits = &digits[SUFFIX_DIGITS_MAX - count..];
        let (mut a, mut b, mut c) = self.state;
        // The name's partial block and the digits: at most 11 + 10 bytes.
        let mut rest = [0u8; 24];
        rest[..self.tail.len()].copy_from_slice(self.tail);
        rest[self.tail.len()..self.tail.len() + digits.len()].copy_from_slice(digits);
        let rest_len = self.tail.len() + digits.len();
        // At most SUFFIX_DIGITS_MAX (10) digits.
        let len = self.len.wrapping_add(low32(digits.len() as u64));
        if rest_len >= 12 {
            block(&rest[..12], &mut a, &mut b, &mut c);
            finish(a, b, c, len, &rest[12..rest_len])
        } else {
            finish(a, b, c, len, &rest[..rest_len])
        }
    }
}

/// `str_hash_rjenkins(name ++ decimal(suffix))`, allocation-free.
pub fn suffixed_name_hash(name: &[u8], suffix: u32) -> u32 {
    NameHasher::new(name).suffixed(suffix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crush::hash::str_hash_rjenkins;

    #[test]
    fn equals_the_hash_of_the_concatenation() {
        let names =
            ["", "a", "foo", "elevenbytes", "twelve_bytes", "thirteen_byte", &"x".repeat(40)];
        for name in names.iter().map(|n| n.to_string()) {
            for suffix in [0, 1, 9, 10, 99, 100, 12345, 999_999_999, u32::MAX] {
                let joined = format!("{name}{suffix}");
                assert_eq!(
                    suffixed_name_hash(name.as_bytes(), suffix),
                    str_hash_rjenkins(joined.as_bytes()),
                    "{joined}"
                );
            }
            let plain = NameHasher::new(name.as_bytes()).plain();
            assert_eq!(plain, str_hash_rjenkins(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn decimal_digits() {
        assert_eq!(&decimal(0).0[9..], b"0");
        assert_eq!(&decimal(4_294_967_295).0[..], b"4294967295");
        assert_eq!(decimal(1234).1, 4);
    }
}
