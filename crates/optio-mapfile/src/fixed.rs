//! Conversions between 16.16 fixed-point weights and the decimal text Ceph reads and writes.
//!
//! They reproduce Ceph's C code bit for bit, floating-point rounding included, because a
//! weight that differs in its last bit changes placements:
//!
//! * `crushtool -c` reads a weight with `strtof` (single precision) and stores
//!   `(unsigned)(f * (float)0x10000)`: the product is rounded to single precision, then
//!   truncated toward zero. So `2.8125` is exactly `0x2d000`, but `0.001` is `65`
//!   (65.536 truncated) and `1e-5` is `0`.
//! * `crushtool -d` prints `"%.3f"` of `(float)w / (float)0x10000`, so `2.8125` prints as
//!   `2.812` (ties round to even) and reading the text back changes the weight.
//! * `crushtool --dump` prints choose_args weights as `%.17g` of `(float)w / 0x10000`.

use optio_placement::Weight;

/// Why a weight written as text was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WeightTextError {
    /// Not a decimal number (`1.5`, `.5`, `2e-3` are numbers; `inf`, `0x10` are not).
    NotANumber,
    /// Below zero.
    Negative,
    /// 65536.0 or more: does not fit 16.16 fixed point.
    TooLarge,
}

impl WeightTextError {
    /// A sentence for error messages.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            WeightTextError::NotANumber => "expected a decimal number such as 1.000, 0.5 or 2e-3",
            WeightTextError::Negative => "weights cannot be negative",
            WeightTextError::TooLarge => {
                "weights must be below 65536 (16.16 fixed point); use larger units, e.g. TiB"
            }
        }
    }
}

/// Whether `word` is a number in the syntax of Boost Spirit's `real_p`, which crushtool's
/// grammar uses: an optional sign, digits with an optional fraction (or a fraction alone),
/// and an optional exponent.
fn is_real(word: &str) -> bool {
    let bytes = word.as_bytes();
    let mut at = 0;
    if matches!(bytes.first(), Some(b'+' | b'-')) {
        at += 1;
    }
    let digits = |at: &mut usize| {
        let start = *at;
        while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
            *at += 1;
        }
        *at - start
    };
    let whole = digits(&mut at);
    let mut fraction = 0;
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        fraction = digits(&mut at);
    }
    if whole == 0 && fraction == 0 {
        return false;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        if digits(&mut at) == 0 {
            return false;
        }
    }
    at == bytes.len()
}

/// Reads a weight exactly as `crushtool -c` does (see the module docs).
///
/// Ceph itself lets values that overflow wrap around and accepts weights between -1/65536
/// and 0 as 0; Optio refuses negative weights and weights that do not fit 16.16.
pub(crate) fn weight_from_text(word: &str) -> Result<Weight, WeightTextError> {
    if !is_real(word) {
        return Err(WeightTextError::NotANumber);
    }
    let value: f32 = word.parse().map_err(|_| WeightTextError::NotANumber)?;
    let fixed = value * 65536.0_f32;
    if fixed <= -1.0 {
        return Err(WeightTextError::Negative);
    }
    if !fixed.is_finite() || fixed >= 4_294_967_296.0_f32 {
        return Err(WeightTextError::TooLarge);
    }
    // Truncation toward zero, as C's float-to-unsigned conversion; (-1, 0) becomes 0.
    Ok(Weight(fixed.max(0.0) as u32))
}

/// Formats a weight as `crushtool -d` does: three decimals of its single-precision value.
///
/// Ceph passes the weight through a signed `int` first, so it prints weights of 32768.0 and
/// more as negative numbers; Optio prints their true value.
pub(crate) fn weight_to_text(weight: Weight) -> String {
    let value = weight.0 as f32 / 65536.0_f32;
    format!("{:.3}", f64::from(value))
}

/// Formats a number as C's `printf("%.17g")`, which round-trips every `f64`.
pub(crate) fn format_g17(value: f64) -> String {
    if value == 0.0 {
        return if value.is_sign_negative() { "-0".to_string() } else { "0".to_string() };
    }
    if !value.is_finite() {
        return if value.is_nan() { "nan".to_string() } else { format!("{value}") };
    }
    const PRECISION: i32 = 17;
    // `{:.16e}` rounds exactly (ties to even), like glibc.
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, value);
    let (mantissa, exponent) = scientific.split_once('e').expect("`e` format has an exponent");
    let exponent: i32 = exponent.parse().expect("`e` format has an integer exponent");
    if !(-4..PRECISION).contains(&exponent) {
        let mantissa = trim_fraction(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let decimals = (PRECISION - 1 - exponent).max(0) as usize;
    trim_fraction(&format!("{value:.decimals$}")).to_string()
}

fn trim_fraction(number: &str) -> &str {
    if number.contains('.') { number.trim_end_matches('0').trim_end_matches('.') } else { number }
}

/// The value `crushtool --dump` prints for a choose_args weight: `(float)w / 0x10000`.
///
/// For weights of 256.0 and more, single precision loses the low bits; Optio prints the exact
/// value instead so that its JSON reads back to the same map.
pub(crate) fn weight_set_value(weight: Weight) -> f64 {
    f64::from(weight.0) / 65536.0
}

/// The shortest decimal that reads back as exactly this weight (for Optio's own formats).
#[allow(dead_code)] // used by the TOML writer, next
pub(crate) fn weight_to_decimal(weight: Weight) -> String {
    format!("{:?}", weight.as_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_weights_like_crushtool() {
        let cases = [
            ("1", 0x10000),
            ("1.000", 0x10000),
            ("2.8125", 184_320),
            ("2.812", 184_287),
            ("0.001", 65),
            ("1e-5", 0),
            ("0.00002", 1),
            (".5", 0x8000),
            ("5.", 327_680),
            ("+2", 131_072),
            ("1E-1", 6553),
            ("99.999", 6_553_534),
            ("65535.99", 4_294_966_528),
            ("-0.000001", 0),
        ];
        for (text, expected) in cases {
            assert_eq!(weight_from_text(text), Ok(Weight(expected)), "{text}");
        }
        for bad in ["inf", "nan", "0x10", "1.0.0", "", "-", "e5", "1e", "1,5", "infinity"] {
            assert_eq!(weight_from_text(bad), Err(WeightTextError::NotANumber), "{bad}");
        }
        assert_eq!(weight_from_text("-1"), Err(WeightTextError::Negative));
        assert_eq!(weight_from_text("65536"), Err(WeightTextError::TooLarge));
        assert_eq!(weight_from_text("1e50"), Err(WeightTextError::TooLarge));
    }

    #[test]
    fn prints_weights_like_crushtool() {
        assert_eq!(weight_to_text(Weight(184_320)), "2.812");
        assert_eq!(weight_to_text(Weight(0x10000)), "1.000");
        assert_eq!(weight_to_text(Weight(65)), "0.001");
        assert_eq!(weight_to_text(Weight(0)), "0.000");
        assert_eq!(weight_to_text(Weight(4_294_966_528)), "65535.988");
    }

    #[test]
    fn formats_like_printf_g17() {
        let cases = [
            (1.0, "1"),
            (2.8125, "2.8125"),
            (65.0 / 65536.0, "0.0009918212890625"),
            (1.0 / 65536.0, "1.52587890625e-05"),
            (6_553_534.0 / 65536.0, "99.998992919921875"),
            (0.1, "0.10000000000000001"),
            (1e20, "1e+20"),
            (123_456_789_012_345_680.0, "1.2345678901234568e+17"),
            (12_345.677_734_375, "12345.677734375"),
        ];
        for (value, expected) in cases {
            assert_eq!(format_g17(value), expected, "{value}");
        }
    }

    #[test]
    fn decimal_weights_read_back_exactly() {
        for raw in [0u32, 1, 65, 0x8000, 0x10000, 184_320, 6_553_534, u32::MAX] {
            let text = weight_to_decimal(Weight(raw));
            let value: f64 = text.parse().expect("a number");
            assert_eq!(Weight::from_f64(value), Some(Weight(raw)), "{text}");
        }
    }
}
