//! Updating parity in place when one data unit changes (read-modify-write).
//!
//! Reed–Solomon encoding is linear over GF(2^16), where addition is XOR: the parity of
//! `old ⊕ Δ` is `parity(old) ⊕ parity(Δ)`. So when bytes of one data chunk change from `old`
//! to `new`, each parity chunk changes by the parity of a stripe whose only non-zero data is
//! `old ⊕ new` in that chunk's position. [`parity_delta`] computes those M deltas;
//! [`apply_delta`] XORs them into the parity chunks' bytes at the same offset as the changed
//! data bytes. The offset and length must be whole 64-byte blocks (the codec's symbol
//! layout, [`STRIPE_UNIT_ALIGN_BYTES`]); a stripe unit always is.
//!
//! Cost: one encode of a `len`-byte stripe, against reading K − 1 other data units and
//! encoding for a full-stripe rewrite.

use reed_solomon_simd::ReedSolomonEncoder;

use crate::error::Error;
use crate::profile::{Profile, STRIPE_UNIT_ALIGN_BYTES};

/// What to XOR into each parity chunk when a data range changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParityDelta {
    /// One delta per parity chunk, in order (chunk K first); each as long as the change.
    pub parity: Vec<Vec<u8>>,
}

/// The parity deltas for data chunk `data_index` changing from `old` to `new` over a range
/// of whole 64-byte blocks (typically one stripe unit). Apply them at the same chunk offset
/// as the changed data with [`apply_delta`].
pub fn parity_delta(
    profile: Profile,
    data_index: u8,
    old: &[u8],
    new: &[u8],
) -> Result<ParityDelta, Error> {
    let k = usize::from(profile.k());
    let m = usize::from(profile.m());
    if data_index >= profile.k() {
        return Err(Error::NotDataChunk { index: data_index, profile, k: profile.k() });
    }
    let align = usize::try_from(STRIPE_UNIT_ALIGN_BYTES).expect("64");
    if old.len() != new.len() || old.is_empty() || !old.len().is_multiple_of(align) {
        return Err(Error::DeltaSize {
            old: old.len(),
            new: new.len(),
            align: STRIPE_UNIT_ALIGN_BYTES,
        });
    }
    let change: Vec<u8> = old.iter().zip(new).map(|(a, b)| a ^ b).collect();
    if change.iter().all(|byte| *byte == 0) {
        return Ok(ParityDelta { parity: vec![vec![0; change.len()]; m] });
    }
    let zeros = vec![0u8; change.len()];
    let mut encoder = ReedSolomonEncoder::new(k, m, change.len())
        .expect("profiles are within the codec's limits and the change is whole blocks");
    for index in 0..k {
        let shard = if index == usize::from(data_index) { &change } else { &zeros };
        encoder.add_original_shard(shard).expect("K shards of one length");
    }
    let result = encoder.encode().expect("all K shards were added");
    Ok(ParityDelta { parity: result.recovery_iter().map(<[u8]>::to_vec).collect() })
}

/// XORs a delta into the parity chunks' bytes: `parity[j]` is parity chunk K + j's bytes at
/// the offset of the change, as long as the change.
pub fn apply_delta(delta: &ParityDelta, parity: &mut [&mut [u8]]) -> Result<(), Error> {
    let bytes = delta.parity.first().map_or(0, Vec::len);
    if parity.len() != delta.parity.len() || parity.iter().any(|unit| unit.len() != bytes) {
        return Err(Error::DeltaShape {
            given: parity.len(),
            given_bytes: parity.iter().map(|unit| unit.len()).collect(),
            parity: delta.parity.len(),
            bytes,
        });
    }
    for (unit, change) in parity.iter_mut().zip(&delta.parity) {
        for (byte, delta_byte) in unit.iter_mut().zip(change) {
            *byte ^= delta_byte;
        }
    }
    Ok(())
}
