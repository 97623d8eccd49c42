//! Narrowing integer conversions, each named for why it cannot lose a bit or why it means to.
//!
//! Placements are hashed, compared bit for bit with Ceph's `crushtool` and pinned by golden
//! tests, so the crate builds with `clippy::cast_possible_truncation` and no `as` drops high
//! bits silently. A narrowing is one of three things:
//!
//! * **checked** — `u32::try_from(x)` at the call site, with an error for the caller, where
//!   the value comes from input the crate does not bound (a builder's arguments);
//! * **bounded** — [`index32`], [`index_i32`] and [`small8`]: an index or a count that a limit
//!   checked when the map was built keeps far inside the narrower type ([`DEVICE_ID_LIMIT`] =
//!   2²⁴ devices, [`BUCKETS_MAX`] and [`BUCKET_ITEMS_MAX`] = 2²⁰, the engines' virtual-node
//!   limits ≤ 2²⁷, [`REPLICAS_MAX`] = 32, [`CHOICES_MAX`] = 8, [`LOCATION_LEVELS_MAX`] = 12).
//!   A value past the limit is a bug in this crate: the conversion panics at the caller's line
//!   rather than wrap into a wrong placement;
//! * **truncating** — [`low32`]: the high bits are meant to go, as in hash mixing and in
//!   CRUSH's 32-bit C arithmetic (Ceph's implicit `(__u32)` conversions), which must stay
//!   bit-identical to Ceph's.
//!
//! Conversions whose bound is local (a value reduced modulo a small constant, a result shifted
//! down by a proof in a comment) use `try_from` with an `expect` that states the proof.
//!
//! [`DEVICE_ID_LIMIT`]: crate::map::DEVICE_ID_LIMIT
//! [`BUCKETS_MAX`]: crate::map::BUCKETS_MAX
//! [`BUCKET_ITEMS_MAX`]: crate::map::BUCKET_ITEMS_MAX
//! [`REPLICAS_MAX`]: crate::replica::REPLICAS_MAX
//! [`CHOICES_MAX`]: crate::params::choice::CHOICES_MAX
//! [`LOCATION_LEVELS_MAX`]: crate::choice::location::LOCATION_LEVELS_MAX

/// `index` as a `u32`: an index into, or the length of, a table whose size a map limit bounds
/// (devices, buckets, bucket items, virtual nodes, units — all at most 2²⁷ entries).
///
/// Panics, at the caller's line, if the bound was broken: a bug, not bad input.
#[inline]
#[track_caller]
pub(crate) fn index32(index: usize) -> u32 {
    u32::try_from(index).expect("an index or count bounded by a map limit (at most 2^27) fits u32")
}

/// `index` as an `i32`, for item ids made from a dense index: the index is bounded by
/// [`DEVICE_ID_LIMIT`](crate::map::DEVICE_ID_LIMIT) or [`BUCKETS_MAX`](crate::map::BUCKETS_MAX),
/// far below 2³¹.
///
/// Panics, at the caller's line, if the bound was broken: a bug, not bad input.
#[inline]
#[track_caller]
pub(crate) fn index_i32(index: usize) -> i32 {
    i32::try_from(index).expect("a device or bucket index bounded by a map limit fits i32")
}

/// `n` as a `u8`: a replica position or count, a candidate index or a number of location
/// levels, bounded by [`REPLICAS_MAX`](crate::replica::REPLICAS_MAX) (32),
/// [`CHOICES_MAX`](crate::params::choice::CHOICES_MAX) (8) or
/// [`LOCATION_LEVELS_MAX`](crate::choice::location::LOCATION_LEVELS_MAX) (12).
///
/// Panics, at the caller's line, if the bound was broken: a bug, not bad input.
#[inline]
#[track_caller]
pub(crate) fn small8(n: usize) -> u8 {
    u8::try_from(n)
        .expect("a replica position, candidate index or level count (at most 32) fits u8")
}

/// The low 32 bits of `x`, the high bits dropped on purpose: hash arithmetic, and CRUSH's C
/// arithmetic where Ceph converts to `__u32` (lengths added to a hash, `int` counts used as
/// `__u32`), which must stay bit-identical to Ceph's.
#[inline(always)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "the one place where dropping the high bits is the intended result"
)]
pub(crate) const fn low32(x: u64) -> u32 {
    x as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_conversions_keep_the_value() {
        assert_eq!(index32(1 << 27), 1 << 27);
        assert_eq!(index_i32(1 << 20), 1 << 20);
        assert_eq!(small8(32), 32);
    }

    #[test]
    #[should_panic(expected = "fits u8")]
    fn a_broken_bound_panics_instead_of_wrapping() {
        small8(256);
    }

    #[test]
    fn low32_drops_exactly_the_high_bits() {
        assert_eq!(low32(0x1234_5678_9abc_def0), 0x9abc_def0);
        assert_eq!(low32(u64::from(u32::MAX)), u32::MAX);
    }
}
