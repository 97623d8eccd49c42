//! Bytes as hexadecimal text and back (auth nonces, object summaries, ETags).

/// Bytes as lower-case hexadecimal, two digits each.
pub fn hex_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Exactly `N` bytes from `2 × N` hexadecimal digits; `None` for anything else (a sign
/// included: `u8::from_str_radix` alone would read `+f` as 15, a second spelling).
pub fn bytes_from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        assert_eq!(hex_bytes(&[0x00, 0xab, 0x7f]), "00ab7f");
        assert_eq!(bytes_from_hex::<3>("00ab7f"), Some([0x00, 0xab, 0x7f]));
        assert_eq!(bytes_from_hex::<3>("00AB7F"), Some([0x00, 0xab, 0x7f]));
        for bad in ["00ab7", "00ab7f0", "+fab7f", "00ab-1", "zzab7f", "00ab7\u{e9}"] {
            assert_eq!(bytes_from_hex::<3>(bad), None, "{bad}");
        }
    }
}
