//! An erasure-coding profile: K data chunks, M parity chunks and the stripe unit.

use std::fmt;
use std::str::FromStr;

/// The most chunks (K + M) an object may be cut into. Each chunk goes to a distinct failure
/// domain, and a chunk's index is one byte in its header; 32 is already wider than any
/// placement a cluster of today's size gives a pool (Ceph's common profiles stop at 16).
pub const CHUNKS_MAX: u8 = 32;

/// What every stripe unit must be a multiple of, in bytes. The codec works on GF(2^16)
/// symbols laid out in 64-byte blocks; with units of whole blocks, coding one stripe, one
/// stripe unit or a whole chunk at once gives the same bytes at the same offsets, which is
/// what lets [`crate::encode`] code an object in one call and [`crate::parity_delta`] update
/// one unit.
pub const STRIPE_UNIT_ALIGN_BYTES: u32 = 64;

/// The largest stripe unit accepted: 16 MiB.
pub const STRIPE_UNIT_MAX_BYTES: u32 = 16 << 20;

/// The stripe unit a profile gets when none is given: 64 KiB. Small enough that a 4 KiB
/// update of a volume reads and rewrites little more than it changes, large enough that a
/// 4 MiB object of a `4+2` pool is 16 stripes, each unit long enough for the codec's SIMD
/// loops (its throughput is flat above a few KiB per shard).
pub const DEFAULT_STRIPE_UNIT: u32 = 64 << 10;

/// Why a profile was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The text is not `K+M`.
    #[error("erasure profile {text:?} is not of the form K+M (for example \"4+2\" or \"8+3\")")]
    Syntax {
        /// The text given.
        text: String,
    },
    /// K is zero.
    #[error("erasure profile {k}+{m}: K (data chunks) must be at least 1")]
    NoDataChunks {
        /// Data chunks.
        k: u32,
        /// Parity chunks.
        m: u32,
    },
    /// M is zero.
    #[error(
        "erasure profile {k}+{m}: M (parity chunks) must be at least 1 (for no redundancy \
         use a replicated pool with size = 1)"
    )]
    NoParityChunks {
        /// Data chunks.
        k: u32,
        /// Parity chunks.
        m: u32,
    },
    /// K + M is more than [`CHUNKS_MAX`].
    #[error(
        "erasure profile {k}+{m}: K+M = {total} chunks, at most {max} are supported; use \
         fewer data or parity chunks"
    )]
    TooManyChunks {
        /// Data chunks.
        k: u32,
        /// Parity chunks.
        m: u32,
        /// K + M.
        total: u64,
        /// [`CHUNKS_MAX`].
        max: u8,
    },
    /// The stripe unit is zero, not a multiple of [`STRIPE_UNIT_ALIGN_BYTES`] or above
    /// [`STRIPE_UNIT_MAX_BYTES`].
    #[error(
        "stripe unit of {bytes} bytes: it must be a positive multiple of {align} bytes and at \
         most {max} bytes (the default is {default} bytes, 64 KiB)"
    )]
    StripeUnit {
        /// The stripe unit given.
        bytes: u64,
        /// [`STRIPE_UNIT_ALIGN_BYTES`].
        align: u32,
        /// [`STRIPE_UNIT_MAX_BYTES`].
        max: u32,
        /// [`DEFAULT_STRIPE_UNIT`].
        default: u32,
    },
}

/// An erasure-coding profile: an object is cut into stripes of `k` units of `stripe_unit`
/// bytes each; each stripe gets `m` parity units; any `k` of the `k + m` chunks rebuild it.
///
/// Built only through [`Profile::new`] or parsing, so a profile in hand is always valid:
/// `1 ≤ k`, `1 ≤ m`, `k + m ≤` [`CHUNKS_MAX`], and the stripe unit a positive multiple of
/// [`STRIPE_UNIT_ALIGN_BYTES`] up to [`STRIPE_UNIT_MAX_BYTES`].
///
/// Its text form is `K+M` ([`FromStr`], [`fmt::Display`]); the stripe unit is not part of it
/// (a map gives it as a separate key), so text parses to [`DEFAULT_STRIPE_UNIT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Profile {
    k: u8,
    m: u8,
    stripe_unit_bytes: u32,
}

impl Profile {
    /// A profile of `k` data and `m` parity chunks with the given stripe unit, checked.
    pub fn new(k: u32, m: u32, stripe_unit_bytes: u64) -> Result<Profile, ProfileError> {
        if k == 0 {
            return Err(ProfileError::NoDataChunks { k, m });
        }
        if m == 0 {
            return Err(ProfileError::NoParityChunks { k, m });
        }
        let total = u64::from(k) + u64::from(m);
        if total > u64::from(CHUNKS_MAX) {
            return Err(ProfileError::TooManyChunks { k, m, total, max: CHUNKS_MAX });
        }
        let unit_ok = stripe_unit_bytes > 0
            && stripe_unit_bytes.is_multiple_of(u64::from(STRIPE_UNIT_ALIGN_BYTES))
            && stripe_unit_bytes <= u64::from(STRIPE_UNIT_MAX_BYTES);
        if !unit_ok {
            return Err(ProfileError::StripeUnit {
                bytes: stripe_unit_bytes,
                align: STRIPE_UNIT_ALIGN_BYTES,
                max: STRIPE_UNIT_MAX_BYTES,
                default: DEFAULT_STRIPE_UNIT,
            });
        }
        Ok(Profile {
            k: u8::try_from(k).expect("k + m <= CHUNKS_MAX fits a byte"),
            m: u8::try_from(m).expect("k + m <= CHUNKS_MAX fits a byte"),
            stripe_unit_bytes: u32::try_from(stripe_unit_bytes)
                .expect("the stripe unit is at most STRIPE_UNIT_MAX_BYTES"),
        })
    }

    /// Parses `K+M` (spaces around the numbers allowed), with [`DEFAULT_STRIPE_UNIT`].
    pub fn parse(text: &str) -> Result<Profile, ProfileError> {
        let syntax = || ProfileError::Syntax { text: text.to_owned() };
        let (k, m) = text.split_once('+').ok_or_else(syntax)?;
        let number = |part: &str| -> Result<u32, ProfileError> {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            // Only digits: a failure is an overflow, which is too many chunks anyway.
            Ok(part.parse::<u32>().unwrap_or(u32::MAX))
        };
        Profile::new(number(k)?, number(m)?, u64::from(DEFAULT_STRIPE_UNIT))
    }

    /// The same profile with another stripe unit, checked.
    pub fn with_stripe_unit(self, stripe_unit_bytes: u64) -> Result<Profile, ProfileError> {
        Profile::new(u32::from(self.k), u32::from(self.m), stripe_unit_bytes)
    }

    /// K: data chunks per object (data units per stripe).
    pub fn k(&self) -> u8 {
        self.k
    }

    /// M: parity chunks per object; up to this many chunks may be lost.
    pub fn m(&self) -> u8 {
        self.m
    }

    /// K + M: the chunks of an object, and the placement width of its pool.
    pub fn chunks(&self) -> u8 {
        self.k + self.m
    }

    /// Bytes of one stripe unit.
    pub fn stripe_unit_bytes(&self) -> u32 {
        self.stripe_unit_bytes
    }

    /// Object bytes per stripe: K stripe units.
    pub fn stripe_bytes(&self) -> u64 {
        u64::from(self.k) * u64::from(self.stripe_unit_bytes)
    }

    /// The `min_size` a pool of this profile gets when none is given: K + 1, as Ceph's EC
    /// pools do (a write acknowledged by only K chunks would be lost with any one more
    /// failure), capped at K + M.
    pub fn min_size_default(&self) -> u8 {
        (self.k + 1).min(self.chunks())
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.k, self.m)
    }
}

impl FromStr for Profile {
    type Err = ProfileError;

    fn from_str(text: &str) -> Result<Profile, ProfileError> {
        Profile::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_k_plus_m() {
        let profile = Profile::parse("4+2").expect("valid");
        assert_eq!((profile.k(), profile.m(), profile.chunks()), (4, 2, 6));
        assert_eq!(profile.stripe_unit_bytes(), DEFAULT_STRIPE_UNIT);
        assert_eq!(profile.to_string(), "4+2");
        assert_eq!(" 8 + 3 ".parse::<Profile>().expect("valid").to_string(), "8+3");
        assert_eq!(profile.min_size_default(), 5);
        assert_eq!(profile.stripe_bytes(), 4 * 65536);
    }

    #[test]
    fn refuses_bad_text_and_limits_with_the_reason() {
        for text in ["", "4", "4+", "+2", "4-2", "4+2+1", "a+b", "-1+2", "4+0x2"] {
            assert!(matches!(Profile::parse(text), Err(ProfileError::Syntax { .. })), "{text:?}");
        }
        assert!(matches!(Profile::parse("0+2"), Err(ProfileError::NoDataChunks { .. })));
        assert!(matches!(Profile::parse("4+0"), Err(ProfileError::NoParityChunks { .. })));
        let error = Profile::parse("30+3").expect_err("33 chunks");
        assert!(error.to_string().contains("at most 32"), "{error}");
        assert!(Profile::parse("16+16").is_ok());
        assert!(matches!(Profile::parse("99999999999+1"), Err(ProfileError::TooManyChunks { .. })));
        for bytes in [0, 32, 100, 65537, u64::from(STRIPE_UNIT_MAX_BYTES) + 64, u64::MAX] {
            let error = Profile::new(4, 2, bytes).expect_err("bad unit");
            assert!(error.to_string().contains("multiple of 64"), "{error}");
        }
        assert!(Profile::new(4, 2, 64).is_ok());
        assert!(Profile::new(4, 2, u64::from(STRIPE_UNIT_MAX_BYTES)).is_ok());
    }

    #[test]
    fn min_size_is_k_plus_one() {
        assert_eq!(Profile::parse("1+1").expect("valid").min_size_default(), 2);
        assert_eq!(Profile::parse("8+3").expect("valid").min_size_default(), 9);
    }
}
