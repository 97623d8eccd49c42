//! The hash of `name + string(j)` (CHOICE's Algorithm 1) without building the string: Ceph's
//! object-name hash (`ceph_str_hash_rjenkins`, Bob Jenkins' lookup2) run over the name's bytes
//! followed by the decimal digits of `j`, exactly as if they were one string.
//!
//! So candidate `i` of object `foo` is placed exactly where an object named `foo1` (or `foo2`,
//! … — whatever suffix it took) is placed; `optio place --object foo1` shows it.

use crate::crush::hash::mix;

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

#[inline(always)]
fn word(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// `str_hash_rjenkins(name ++ decimal(suffix))`, allocation-free.
pub fn suffixed_name_hash(name: &[u8], suffix: u32) -> u32 {
    let (digits, count) = decimal(suffix);
    let digits = &digits[SUFFIX_DIGITS_MAX - count..];
    let mut a: u32 = 0x9e37_79b9;
    let mut b: u32 = a;
    let mut c: u32 = 0;
    let block = |bytes: &[u8], a: &mut u32, b: &mut u32, c: &mut u32| {
        *a = a.wrapping_add(word(&bytes[0..4]));
        *b = b.wrapping_add(word(&bytes[4..8]));
        *c = c.wrapping_add(word(&bytes[8..12]));
        mix(a, b, c);
    };
    let mut chunks = name.chunks_exact(12);
    for chunk in &mut chunks {
        block(chunk, &mut a, &mut b, &mut c);
    }
    // The name's last partial block and the digits: at most 11 + 10 bytes.
    let mut rest = [0u8; 24];
    let head = chunks.remainder();
    rest[..head.len()].copy_from_slice(head);
    rest[head.len()..head.len() + digits.len()].copy_from_slice(digits);
    let mut rest_len = head.len() + digits.len();
    let mut tail: &[u8] = &rest[..rest_len];
    if rest_len >= 12 {
        block(&rest[..12], &mut a, &mut b, &mut c);
        rest_len -= 12;
        tail = &rest[12..12 + rest_len];
    }
    // As Ceph: the length is added as a u32 (wrapping beyond 4 GiB).
    c = c.wrapping_add((name.len() as u32).wrapping_add(digits.len() as u32));
    for (i, &byte) in tail.iter().enumerate() {
        let value = u32::from(byte);
        match i {
            0..=3 => a = a.wrapping_add(value << (8 * i)),
            4..=7 => b = b.wrapping_add(value << (8 * (i - 4))),
            _ => c = c.wrapping_add(value << (8 * (i - 7))),
        }
    }
    mix(&mut a, &mut b, &mut c);
    c
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
        }
    }

    #[test]
    fn decimal_digits() {
        assert_eq!(&decimal(0).0[9..], b"0");
        assert_eq!(&decimal(4_294_967_295).0[..], b"4294967295");
        assert_eq!(decimal(1234).1, 4);
    }
}
