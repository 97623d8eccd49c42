//! Where an object's bytes go: stripes, stripe units and chunks.
//!
//! An object of `L` bytes is cut into `ceil(L / (K × U))` stripes of K stripe units of `U`
//! bytes; the last stripe is zero-padded. Data chunk `i` (0 ≤ i < K) holds unit `i` of every
//! stripe, one after the other; parity chunk `K + j` holds parity unit `j` of every stripe.
//! Every chunk of an object is therefore `stripes × U` bytes, and object byte `x` lives in
//! stripe `x / (K U)`, data chunk `(x mod K U) / U`, at chunk offset
//! `stripe × U + x mod U`.

use crate::profile::Profile;

/// The longest object a layout describes: 2^56 bytes (64 PiB), far above any object a
/// store keeps whole, and low enough that no size or offset computed from it overflows.
pub const OBJECT_BYTES_MAX: u64 = 1 << 56;

/// The geometry of one object under one profile: what every chunk's size and offsets follow
/// from. Computed in `u64` with no overflow for any object length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    profile: Profile,
    object_bytes: u64,
}

/// A run of object bytes that lies in one stripe unit of one data chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// The data chunk holding it (0 ≤ chunk < K).
    pub chunk: u8,
    /// The stripe it belongs to.
    pub stripe: u64,
    /// Where it starts in the chunk's data.
    pub chunk_offset: u64,
    /// Where it starts in the object.
    pub object_offset: u64,
    /// Its length in bytes (at most one stripe unit).
    pub len: u64,
}

/// Why a layout or a byte range in it cannot be computed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// The range runs past the end of the object.
    #[error(
        "bytes {offset}..{offset}+{len} are outside the object, which is {object_bytes} bytes \
         long; ask for a range within it"
    )]
    OutOfObject {
        /// Start of the range asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// The object's length.
        object_bytes: u64,
    },
    /// The object is longer than [`OBJECT_BYTES_MAX`].
    #[error("an object of {object_bytes} bytes is longer than the {max} bytes supported")]
    ObjectTooLarge {
        /// The length given.
        object_bytes: u64,
        /// [`OBJECT_BYTES_MAX`].
        max: u64,
    },
}

impl Layout {
    /// The layout of an object of `object_bytes` bytes, at most [`OBJECT_BYTES_MAX`].
    pub fn new(profile: Profile, object_bytes: u64) -> Result<Layout, LayoutError> {
        if object_bytes > OBJECT_BYTES_MAX {
            return Err(LayoutError::ObjectTooLarge { object_bytes, max: OBJECT_BYTES_MAX });
        }
        Ok(Layout { profile, object_bytes })
    }

    /// The profile.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The object's length.
    pub fn object_bytes(&self) -> u64 {
        self.object_bytes
    }

    /// Stripes of the object (0 for an empty object).
    pub fn stripes(&self) -> u64 {
        self.object_bytes.div_ceil(self.profile.stripe_bytes())
    }

    /// Bytes of every chunk, data or parity: stripes × stripe unit (at most
    /// `object_bytes + stripe unit`, so it cannot overflow).
    pub fn chunk_bytes(&self) -> u64 {
        self.stripes() * u64::from(self.profile.stripe_unit_bytes())
    }

    /// The pieces of object bytes `offset..offset + len`, in object order, one per stripe
    /// unit touched. An empty range gives no extents.
    pub fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>, LayoutError> {
        let end = offset
            .checked_add(len)
            .filter(|end| *end <= self.object_bytes)
            .ok_or(LayoutError::OutOfObject { offset, len, object_bytes: self.object_bytes })?;
        let unit = u64::from(self.profile.stripe_unit_bytes());
        let k = u64::from(self.profile.k());
        let mut extents = Vec::new();
        let mut at = offset;
        while at < end {
            let unit_index = at / unit; // counting units across the whole object
            let within = at % unit;
            let run = (unit - within).min(end - at);
            let stripe = unit_index / k;
            extents.push(Extent {
                chunk: u8::try_from(unit_index % k).expect("below k, which is a byte"),
                stripe,
                chunk_offset: stripe * unit + within,
                object_offset: at,
                len: run,
            });
            at += run;
        }
        Ok(extents)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(k: u32, m: u32, unit: u64) -> Profile {
        Profile::new(k, m, unit).expect("valid")
    }

    #[test]
    fn sizes_follow_stripes() {
        let p = profile(4, 2, 64);
        assert_eq!(Layout::new(p, 0).expect("small").chunk_bytes(), 0);
        assert_eq!(Layout::new(p, 1).expect("small").chunk_bytes(), 64);
        assert_eq!(Layout::new(p, 256).expect("small").stripes(), 1);
        assert_eq!(Layout::new(p, 257).expect("small").stripes(), 2);
        assert_eq!(Layout::new(p, 257).expect("small").chunk_bytes(), 128);
        let largest = Layout::new(profile(1, 1, 64), OBJECT_BYTES_MAX - 1).expect("at the limit");
        assert_eq!(largest.chunk_bytes(), OBJECT_BYTES_MAX);
        assert!(Layout::new(p, OBJECT_BYTES_MAX + 1).is_err());
        assert!(Layout::new(p, u64::MAX).is_err());
    }

    #[test]
    fn extents_cut_at_stripe_units() {
        let layout = Layout::new(profile(2, 1, 64), 300).expect("small");
        let extents = layout.extents(60, 140).expect("inside");
        let pieces: Vec<(u8, u64, u64, u64)> =
            extents.iter().map(|e| (e.chunk, e.chunk_offset, e.object_offset, e.len)).collect();
        // Units: [0,64) chunk 0, [64,128) chunk 1, [128,192) chunk 0 stripe 1, [192,256) chunk 1.
        assert_eq!(pieces, vec![(0, 60, 60, 4), (1, 0, 64, 64), (0, 64, 128, 64), (1, 64, 192, 8)]);
        assert!(layout.extents(300, 0).expect("empty at the end").is_empty());
        assert!(layout.extents(299, 2).is_err());
        assert!(layout.extents(u64::MAX, 2).is_err());
    }
}
