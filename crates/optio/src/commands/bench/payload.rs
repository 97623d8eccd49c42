//! The bytes the benchmarks write.

use bytes::Bytes;

/// A deterministic, incompressible-looking buffer.
pub fn payload(size: usize, seed: u64) -> Bytes {
    let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut data = Vec::with_capacity(size + 8);
    while data.len() < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.extend_from_slice(&state.to_le_bytes());
    }
    data.truncate(size);
    Bytes::from(data)
}
