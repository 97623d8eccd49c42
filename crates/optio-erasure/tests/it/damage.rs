//! Corrupt chunks are found by their checksums, counted as missing, reported for repair and
//! rebuilt; chunks of different objects or profiles are refused, not mixed.

use optio_erasure::{Chunk, ChunkRef, Error, decode, decode_stored, encode, reconstruct};
use proptest::prelude::*;

use crate::support::{object, profile, profile_and_len, slots};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// One flipped byte (header or data) in each of up to M stored chunks: the object comes
    /// back, the damaged indices are reported, and reconstruct rebuilds them byte for byte.
    #[test]
    fn a_corrupt_byte_in_up_to_m_chunks_is_found_and_repaired(
        (p, len) in profile_and_len(),
        seed in any::<u64>(),
        hits in prop::collection::vec((0..20usize, any::<prop::sample::Index>(), 1..=255u8), 1..=4),
    ) {
        let n = usize::from(p.chunks());
        let original = object(len, seed);
        let chunks = encode(p, &original).expect("encodes");
        let mut stored: Vec<Vec<u8>> = chunks.iter().map(Chunk::to_bytes).collect();
        let mut damaged: Vec<u8> = Vec::new();
        for (chunk, at, flip) in hits.into_iter().take(usize::from(p.m())) {
            let chunk = chunk % n;
            let at = at.index(stored[chunk].len());
            stored[chunk][at] ^= flip;
            damaged.push(u8::try_from(chunk).expect("small"));
        }
        damaged.sort_unstable();
        damaged.dedup();
        let given: Vec<Option<&[u8]>> = stored.iter().map(|bytes| Some(&bytes[..])).collect();
        let decoded = decode_stored(p, &given).expect("at most M damaged");
        prop_assert_eq!(&decoded.object, &original);
        prop_assert_eq!(&decoded.damaged, &damaged);
        prop_assert!(decoded.missing.is_empty());

        // Repair from the chunks that still parse.
        let views: Vec<Option<ChunkRef<'_>>> = stored
            .iter()
            .map(|bytes| ChunkRef::parse_unverified(bytes).ok())
            .collect();
        let rebuilt = reconstruct(p, &views, &decoded.to_repair()).expect("rebuilds");
        for chunk in rebuilt {
            prop_assert_eq!(chunk.to_bytes(), chunks[usize::from(chunk.index())].to_bytes());
        }
    }
}

/// M + 1 corrupt chunks: too few, and the error lists the damaged ones.
#[test]
fn m_plus_one_corrupt_chunks_are_too_few_and_named() {
    let p = profile(4, 2, 64);
    let chunks = encode(p, &object(1000, 3)).expect("encodes");
    let mut stored: Vec<Vec<u8>> = chunks.iter().map(Chunk::to_bytes).collect();
    stored[0][40] ^= 1; // data
    stored[3][5] ^= 1; // header
    stored[5][60] ^= 1;
    let given: Vec<Option<&[u8]>> = stored.iter().map(|bytes| Some(&bytes[..])).collect();
    let error = decode_stored(p, &given).expect_err("three of six damaged");
    assert_eq!(
        error,
        Error::TooFewChunks { have: 3, need: 4, missing: vec![], damaged: vec![0, 3, 5] }
    );
    let text = error.to_string();
    assert!(text.contains("only 3 intact chunks, 4 are needed"), "{text}");
}

/// A chunk whose data was changed after it was parsed unverified is damaged in decode.
#[test]
fn decode_verifies_the_data_it_is_given() {
    let p = profile(2, 1, 64);
    let chunks = encode(p, &object(200, 9)).expect("encodes");
    let mut bytes = chunks[1].to_bytes();
    bytes[40] ^= 0x10;
    let mut given = slots(&chunks);
    given[1] = Some(ChunkRef::parse_unverified(&bytes).expect("header intact"));
    let decoded = decode(p, &given).expect("two of three intact");
    assert_eq!(decoded.damaged, vec![1]);
    assert_eq!(decoded.to_repair(), vec![1]);
}

/// Chunks of two objects, of another profile, or in the wrong slot: refused with the reason.
#[test]
fn mixed_chunks_are_refused() {
    let p = profile(2, 1, 64);
    let a = encode(p, &object(200, 1)).expect("encodes");
    let b = encode(p, &object(300, 2)).expect("encodes");
    let mut given = slots(&a);
    given[2] = Some(b[2].view());
    let error = decode(p, &given).expect_err("mixed lengths");
    assert!(matches!(error, Error::ObjectMismatch { first: 0, second: 2, .. }), "{error}");
    assert!(error.to_string().contains("cannot be mixed"));

    let other = profile(2, 1, 128);
    let c = encode(other, &object(200, 1)).expect("encodes");
    let mut given = slots(&a);
    given[0] = Some(c[0].view());
    let error = decode(p, &given).expect_err("another stripe unit");
    assert!(matches!(error, Error::ProfileMismatch { index: 0, .. }), "{error}");
    assert!(error.to_string().contains("128-byte stripe unit"), "{error}");

    let mut given = slots(&a);
    given.swap(0, 1);
    assert!(matches!(decode(p, &given), Err(Error::WrongSlot { slot: 0, index: 1 })));

    let given = slots(&a);
    assert!(matches!(decode(p, &given[..2]), Err(Error::SlotCount { given: 2, .. })));
    assert!(matches!(
        reconstruct(p, &slots(&a), &[3]),
        Err(Error::BadIndex { index: 3, chunks: 3 })
    ));
    assert!(matches!(reconstruct(p, &slots(&a), &[1, 1]), Err(Error::BadIndex { index: 1, .. })));
}

/// Nothing at all: too few, every index missing.
#[test]
fn no_chunks_at_all_is_too_few() {
    let p = profile(3, 2, 64);
    let given = vec![None; 5];
    assert_eq!(
        decode(p, &given),
        Err(Error::TooFewChunks {
            have: 0,
            need: 3,
            missing: vec![0, 1, 2, 3, 4],
            damaged: vec![]
        })
    );
}
