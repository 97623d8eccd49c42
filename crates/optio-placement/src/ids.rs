//! Newtypes for identifiers and quantities, so that a device id is never confused with a
//! bucket id, a weight with a count, or a platform-sized integer with a hashed value.

use std::fmt;

/// A storage device (Ceph: an OSD). Non-negative, as in Ceph's CRUSH item space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceId(pub u32);

/// A bucket of the hierarchy (host, rack, …). Negative, as in Ceph: -1, -2, …
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BucketId(pub i32);

/// A CRUSH item: a device (`>= 0`) or a bucket (`< 0`), in Ceph's shared id space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ItemId(pub i32);

/// A pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PoolId(pub u32);

/// A placement rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleId(pub u32);

/// A bucket type (level of the hierarchy); type 0 is the device level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TypeId(pub u16);

/// The version of a cluster map; every change increments it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(pub u64);

/// A 16.16 fixed-point weight (`0x10000` is 1.0), as Ceph stores CRUSH weights and reweights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Weight(pub u32);

/// The "no device" marker of positional (erasure-coded) results, Ceph's `CRUSH_ITEM_NONE`.
pub const ITEM_NONE: i32 = 0x7fff_ffff;

impl Weight {
    /// Weight 0: receives no data.
    pub const ZERO: Weight = Weight(0);
    /// Weight 1.0.
    pub const ONE: Weight = Weight(0x10000);

    /// The weight as a float, for display and statistics only (never for placement).
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 65536.0
    }

    /// The nearest 16.16 weight to `value`, or `None` when it is negative, not finite or does
    /// not fit in 32 bits.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "the value converted is integral and checked to be within 0..=u32::MAX"
    )]
    pub fn from_f64(value: f64) -> Option<Weight> {
        if !value.is_finite() || value < 0.0 {
            return None;
        }
        let fixed = (value * 65536.0).round();
        if fixed > f64::from(u32::MAX) {
            return None;
        }
        Some(Weight(fixed as u32))
    }
}

impl fmt::Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.5}", self.as_f64())
    }
}

impl ItemId {
    /// The device this item is, if it is one.
    pub fn device(self) -> Option<DeviceId> {
        (self.0 >= 0).then_some(DeviceId(self.0 as u32))
    }
    /// The bucket this item is, if it is one.
    pub fn bucket(self) -> Option<BucketId> {
        (self.0 < 0).then_some(BucketId(self.0))
    }
}

impl From<DeviceId> for ItemId {
    fn from(id: DeviceId) -> ItemId {
        ItemId(id.0 as i32)
    }
}

impl From<BucketId> for ItemId {
    fn from(id: BucketId) -> ItemId {
        ItemId(id.0)
    }
}

impl BucketId {
    /// Position of this bucket in a dense bucket table (`-1 → 0`, `-2 → 1`, …). A
    /// non-negative id is no bucket: its position, `usize::MAX`, is past every table.
    pub fn index(self) -> usize {
        debug_assert!(self.0 < 0);
        usize::try_from(-1 - i64::from(self.0)).unwrap_or(usize::MAX)
    }
    /// The bucket id stored at dense position `index`.
    ///
    /// # Panics
    ///
    /// If `index` is 2³¹ or more: no map has that many buckets
    /// ([`BUCKETS_MAX`](crate::map::BUCKETS_MAX) is 2²⁰).
    pub fn from_index(index: usize) -> BucketId {
        BucketId(-1 - crate::narrow::index_i32(index))
    }
}

macro_rules! display_inner {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    )*};
}
display_inner!(DeviceId, BucketId, ItemId, PoolId, RuleId, TypeId, Epoch);
