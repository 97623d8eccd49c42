//! An erasure-coded pool's profile as plain numbers: K data chunks, M parity chunks and the
//! stripe unit. Placement only needs the width (K + M chunks on K + M distinct failure
//! domains, chunk `i` on the `i`-th device of the placement); the coding itself is
//! `optio-erasure`'s, which this crate does not depend on. The limits are the same as
//! `optio_erasure::Profile`'s.

use std::fmt;

/// The most chunks (K + M) of an erasure-coded pool (`optio_erasure::CHUNKS_MAX`).
pub const ERASURE_CHUNKS_MAX: u32 = 32;
/// Stripe units are a positive multiple of this many bytes
/// (`optio_erasure::STRIPE_UNIT_ALIGN_BYTES`).
pub const STRIPE_UNIT_ALIGN_BYTES: u32 = 64;
/// The largest stripe unit, bytes (`optio_erasure::STRIPE_UNIT_MAX_BYTES`).
pub const STRIPE_UNIT_MAX_BYTES: u32 = 16 << 20;
/// The stripe unit when a pool gives none: 64 KiB (`optio_erasure::DEFAULT_STRIPE_UNIT`).
pub const DEFAULT_STRIPE_UNIT_BYTES: u32 = 64 << 10;

/// An erasure-coded pool's profile: objects are cut into K data and M parity chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErasureParams {
    /// Data chunks per object.
    pub k: u32,
    /// Parity chunks per object: up to M chunks may be lost.
    pub m: u32,
    /// Bytes of a stripe unit.
    pub stripe_unit_bytes: u32,
}

impl ErasureParams {
    /// K + M: the pool's width.
    pub fn chunks(&self) -> u32 {
        self.k.saturating_add(self.m)
    }

    /// Bytes each chunk of an object of `object_bytes` takes: whole stripes of K stripe
    /// units, so `⌈object_bytes / (K × unit)⌉ × unit` (as the store writes them; 0 for an
    /// empty object).
    pub fn chunk_bytes(&self, object_bytes: u64) -> u64 {
        let unit = u64::from(self.stripe_unit_bytes);
        let stripe = u64::from(self.k).saturating_mul(unit).max(1);
        object_bytes.div_ceil(stripe).saturating_mul(unit)
    }

    /// The `min_size` of a pool with this profile when none is given: K + 1 (Ceph's
    /// default for erasure-coded pools), capped at K + M.
    pub fn default_min_size(&self) -> u32 {
        self.k.saturating_add(1).min(self.chunks())
    }

    /// Why these numbers are not a valid profile, if they are not: `(field, reason)`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.k == 0 || self.m == 0 {
            return Err((
                "erasure",
                "K and M must both be at least 1 (for no redundancy use size = 1)".to_string(),
            ));
        }
        if u64::from(self.k) + u64::from(self.m) > u64::from(ERASURE_CHUNKS_MAX) {
            return Err((
                "erasure",
                format!(
                    "K+M must be at most {ERASURE_CHUNKS_MAX} chunks; use fewer data or parity chunks"
                ),
            ));
        }
        let unit = self.stripe_unit_bytes;
        if unit == 0
            || !unit.is_multiple_of(STRIPE_UNIT_ALIGN_BYTES)
            || unit > STRIPE_UNIT_MAX_BYTES
        {
            return Err((
                "stripe_unit",
                format!(
                    "a positive multiple of {STRIPE_UNIT_ALIGN_BYTES} bytes, at most \
                     {STRIPE_UNIT_MAX_BYTES} bytes (16 MiB); the default is 64 KiB"
                ),
            ));
        }
        Ok(())
    }
}

impl fmt::Display for ErasureParams {
    /// `K+M`, as map files write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.k, self.m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(k: u32, m: u32, stripe_unit_bytes: u32) -> ErasureParams {
        ErasureParams { k, m, stripe_unit_bytes }
    }

    #[test]
    fn checks_the_limits() {
        assert!(params(4, 2, DEFAULT_STRIPE_UNIT_BYTES).check().is_ok());
        assert_eq!(params(4, 2, 64).to_string(), "4+2");
        assert_eq!(params(4, 2, 64).default_min_size(), 5);
        assert_eq!(params(0, 2, 64).check().map_err(|e| e.0), Err("erasure"));
        assert_eq!(params(4, 0, 64).check().map_err(|e| e.0), Err("erasure"));
        assert_eq!(params(30, 3, 64).check().map_err(|e| e.0), Err("erasure"));
        assert_eq!(params(u32::MAX, 3, 64).check().map_err(|e| e.0), Err("erasure"));
        for unit in [0, 32, 100, STRIPE_UNIT_MAX_BYTES + 64] {
            assert_eq!(params(4, 2, unit).check().map_err(|e| e.0), Err("stripe_unit"));
        }
    }

    /// A chunk holds a K-th of the object in whole stripe units (as the store's layout
    /// writes it: `optio_erasure::Layout::chunk_bytes`).
    #[test]
    fn chunks_are_whole_stripe_units() {
        let p = params(4, 2, 64 << 10);
        assert_eq!(p.chunk_bytes(0), 0);
        assert_eq!(p.chunk_bytes(1), 64 << 10);
        assert_eq!(p.chunk_bytes(4 * (64 << 10)), 64 << 10);
        assert_eq!(p.chunk_bytes(4 * (64 << 10) + 1), 128 << 10);
        assert_eq!(p.chunk_bytes(4 << 20), 1 << 20);
        assert_eq!(params(8, 3, 4096).chunk_bytes(100_000), 4 * 4096);
        assert!(params(16, 4, 64 << 10).chunk_bytes(u64::MAX) > 0, "no overflow");
    }
}
