//! Quantities with units, as people write them: `4TiB`, `500 GB`, `540MB/s`.

/// Byte units, decimal and binary (a single letter: binary, as `dd` and `qemu-img` read it).
const BYTE_UNITS: [(&str, u64); 19] = [
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("pb", 1_000_000_000_000_000),
    ("eb", 1_000_000_000_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("pib", 1 << 50),
    ("eib", 1 << 60),
    ("k", 1 << 10),
    ("m", 1 << 20),
    ("g", 1 << 30),
    ("t", 1 << 40),
    ("p", 1 << 50),
    ("e", 1 << 60),
];

/// Units used when writing byte counts, largest first.
const BYTE_UNITS_OUT: [(&str, u64); 10] = [
    ("PiB", 1 << 50),
    ("PB", 1_000_000_000_000_000),
    ("TiB", 1 << 40),
    ("TB", 1_000_000_000_000),
    ("GiB", 1 << 30),
    ("GB", 1_000_000_000),
    ("MiB", 1 << 20),
    ("MB", 1_000_000),
    ("KiB", 1 << 10),
    ("KB", 1_000),
];

/// A decimal number `digits[.digits]` as (mantissa, number of decimals).
fn decimal(text: &str) -> Option<(u128, u32)> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    if !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()) || fraction.len() > 18 {
        return None;
    }
    let mut mantissa: u128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa.checked_mul(10)?.checked_add(u128::from(b - b'0'))?;
    }
    Some((mantissa, fraction.len() as u32))
}

/// Splits `4.5 TiB` into `("4.5", "TiB")`.
fn split_number(text: &str) -> (&str, &str) {
    let text = text.trim();
    let end = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    (&text[..end], text[end..].trim())
}

/// Why a size or a bandwidth could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// Not a number with an optional unit.
    #[error("'{text}' is not a {what}; write e.g. {examples}")]
    NotANumber {
        /// The text given.
        text: String,
        /// What was expected: "size" or "bandwidth".
        what: &'static str,
        /// Texts that would do.
        examples: &'static str,
    },
    /// A unit this syntax does not have.
    #[error("unknown unit '{unit}' in '{text}'; use {known}")]
    UnknownUnit {
        /// The unit given.
        unit: String,
        /// The text given.
        text: String,
        /// The units there are.
        known: &'static str,
    },
    /// More than the value's type holds.
    #[error("'{text}' is too large (at most {limit})")]
    TooLarge {
        /// The text given.
        text: String,
        /// The largest value, with its unit.
        limit: &'static str,
    },
}

/// Reads a byte count such as `4TiB`, `500 GB`, `1.5TB`, `4k` or `1000000` (bytes), rounding
/// to the nearest byte: the one size syntax of maps and of the command line.
pub fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    let (number, unit) = split_number(text);
    let (mantissa, decimals) = decimal(number).ok_or_else(|| UnitError::NotANumber {
        text: text.to_string(),
        what: "size",
        examples: "\"4TiB\", \"500GB\" or a number of bytes",
    })?;
    let lower = unit.to_ascii_lowercase();
    let scale = if lower.is_empty() {
        1
    } else {
        BYTE_UNITS.iter().find(|(name, _)| *name == lower).map(|(_, scale)| *scale).ok_or_else(
            || UnitError::UnknownUnit {
                unit: unit.to_string(),
                text: text.to_string(),
                known: "B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB or PiB (k, m, g, t, p: binary)",
            },
        )?
    };
    let divisor = 10u128.pow(decimals);
    let too_large = || UnitError::TooLarge { text: text.to_string(), limit: "16 EiB" };
    let scaled = mantissa.checked_mul(u128::from(scale)).ok_or_else(too_large)?;
    u64::try_from((scaled + divisor / 2) / divisor).map_err(|_| too_large())
}

/// Writes a byte count with the unit that gives the shortest exact text (`4TiB`, `500GB`),
/// or as a bare number of bytes when no unit divides it.
pub(crate) fn format_bytes(bytes: u64) -> Option<String> {
    BYTE_UNITS_OUT
        .iter()
        .filter(|(_, scale)| bytes >= *scale && bytes.is_multiple_of(*scale))
        .map(|(name, scale)| format!("{}{name}", bytes / scale))
        .min_by_key(String::len)
}

/// Reads a bandwidth in MB/s: `540`, `"540MB/s"`, `"1.2 GB/s"`, `"400MiB/s"`.
pub(crate) fn parse_bandwidth(text: &str) -> Result<u32, UnitError> {
    let (number, unit) = split_number(text);
    let (mantissa, decimals) = decimal(number).ok_or_else(|| UnitError::NotANumber {
        text: text.to_string(),
        what: "bandwidth",
        examples: "\"540MB/s\" or \"1.2GB/s\"",
    })?;
    let lower = unit.to_ascii_lowercase();
    // In bytes per second, over 10^6 (MB/s).
    let (numerator, denominator): (u128, u128) = match lower.as_str() {
        "" | "mb/s" => (1, 1),
        "kb/s" => (1, 1000),
        "gb/s" => (1000, 1),
        "mib/s" => (1 << 20, 1_000_000),
        "gib/s" => (1 << 30, 1_000_000),
        _ => {
            return Err(UnitError::UnknownUnit {
                unit: unit.to_string(),
                text: text.to_string(),
                known: "MB/s, GB/s, KB/s, MiB/s or GiB/s",
            });
        }
    };
    let divisor = 10u128.pow(decimals) * denominator;
    let too_large = || UnitError::TooLarge { text: text.to_string(), limit: "4294967295 MB/s" };
    let scaled = mantissa.checked_mul(numerator).ok_or_else(too_large)?;
    u32::try_from((scaled + divisor / 2) / divisor).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sizes() {
        assert_eq!(parse_bytes("4TiB"), Ok(4 << 40));
        assert_eq!(parse_bytes("500 GB"), Ok(500_000_000_000));
        assert_eq!(parse_bytes("1.5tb"), Ok(1_500_000_000_000));
        assert_eq!(parse_bytes("0.5KiB"), Ok(512));
        assert_eq!(parse_bytes("123"), Ok(123));
        assert_eq!(parse_bytes("8GiB"), Ok(8 << 30));
        for bad in ["", "TiB", "4 TeraBytes", "-1GB", "1e3", "20EiB", "4.5.5GB"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn writes_sizes_exactly() {
        assert_eq!(format_bytes(4 << 40).as_deref(), Some("4TiB"));
        assert_eq!(format_bytes(500_000_000_000).as_deref(), Some("500GB"));
        assert_eq!(format_bytes(8 << 30).as_deref(), Some("8GiB"));
        assert_eq!(format_bytes(1023), None);
        for bytes in [1u64 << 40, 3 << 30, 4_000_787_030_016, 1_000, 1 << 62, u64::MAX] {
            if let Some(text) = format_bytes(bytes) {
                assert_eq!(parse_bytes(&text), Ok(bytes), "{text}");
            }
        }
    }

    #[test]
    fn reads_bandwidths() {
        assert_eq!(parse_bandwidth("540MB/s"), Ok(540));
        assert_eq!(parse_bandwidth("1.2 GB/s"), Ok(1200));
        assert_eq!(parse_bandwidth("540"), Ok(540));
        assert_eq!(parse_bandwidth("1GiB/s"), Ok(1074));
        assert!(parse_bandwidth("fast").is_err());
        assert!(parse_bandwidth("5 Gbit/s").is_err());
    }
}
