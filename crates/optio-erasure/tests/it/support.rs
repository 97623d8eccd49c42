//! Shared helpers: deterministic objects, profiles and slots.

use optio_erasure::{Chunk, ChunkRef, Profile};
use proptest::prelude::*;

/// A deterministic object of `len` bytes from a seed (xorshift64), so that proptest shrinks
/// a length and a seed rather than megabytes of bytes.
pub fn object(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

/// A valid profile.
pub fn profile(k: u32, m: u32, unit: u64) -> Profile {
    Profile::new(k, m, unit).expect("a valid test profile")
}

/// Every slot filled.
pub fn slots(chunks: &[Chunk]) -> Vec<Option<ChunkRef<'_>>> {
    chunks.iter().map(|chunk| Some(chunk.view())).collect()
}

/// Profiles with K ≤ 16, M ≤ 4 and small stripe units (so that objects span several stripes
/// cheaply).
pub fn any_profile() -> impl Strategy<Value = Profile> {
    (1u32..=16, 1u32..=4, prop::sample::select(vec![64u64, 128, 192, 1024]))
        .prop_map(|(k, m, unit)| profile(k, m, unit))
}

/// A profile and an object length: 0, 1, or anything up to a bit more than three stripes.
pub fn profile_and_len() -> impl Strategy<Value = (Profile, usize)> {
    any_profile().prop_flat_map(|profile| {
        let stripe = usize::try_from(profile.stripe_bytes()).expect("small");
        let len = prop_oneof![Just(0usize), Just(1usize), Just(stripe), 0..3 * stripe + 100];
        (Just(profile), len)
    })
}
