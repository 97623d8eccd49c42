//! Any K of the K + M chunks give the object back, for every profile up to 16+4.

use optio_erasure::{Error, decode, encode, reconstruct};
use proptest::prelude::*;

use crate::support::{object, profile, profile_and_len, slots};

/// Every K+M with K ≤ 16 and M ≤ 4, on objects of 0, 1, a part of a stripe and several
/// stripes, with three different sets of M chunks lost each; M + 1 lost is too few.
#[test]
fn every_profile_up_to_16_plus_4_survives_m_losses() {
    for k in 1..=16u32 {
        for m in 1..=4u32 {
            let p = profile(k, m, 64);
            let n = usize::from(p.chunks());
            let m_usize = usize::try_from(m).expect("small");
            let stripe = usize::try_from(p.stripe_bytes()).expect("small");
            for len in [0, 1, stripe - 1, 2 * stripe + 65] {
                let original = object(len, u64::from(k * 100 + m) + len as u64);
                let chunks = encode(p, &original).expect("encodes");
                assert_eq!(chunks.len(), n);
                let seed = (k * 7 + m * 3) as usize;
                let patterns: [Vec<usize>; 3] = [
                    (0..m_usize).collect(),
                    (n - m_usize..n).collect(),
                    (0..m_usize).map(|i| (seed + i * 5) % n).collect(),
                ];
                for lost in patterns {
                    let mut given = slots(&chunks);
                    for index in &lost {
                        given[*index] = None;
                    }
                    let decoded = decode(p, &given).expect("M losses are survivable");
                    assert_eq!(decoded.object, original, "{p} len {len} lost {lost:?}");
                    let wanted = decoded.to_repair();
                    let rebuilt = reconstruct(p, &given, &wanted).expect("rebuilds");
                    for chunk in rebuilt {
                        assert_eq!(chunk, chunks[usize::from(chunk.index())], "{p} rebuilt");
                    }
                }
                let mut given = slots(&chunks);
                for slot in given.iter_mut().take(m_usize + 1) {
                    *slot = None;
                }
                match decode(p, &given) {
                    Err(Error::TooFewChunks { have, need, .. }) => {
                        assert_eq!((usize::from(have), need), (n - m_usize - 1, p.k()));
                    }
                    other => panic!("{p}: M + 1 lost gave {other:?}"),
                }
            }
        }
    }
}

/// Coding a stripe alone gives the same parity as coding the whole object: what lets a
/// stripe unit be updated on its own.
#[test]
fn a_stripe_codes_alone_as_within_the_object() {
    let p = profile(4, 2, 128);
    let stripe = usize::try_from(p.stripe_bytes()).expect("small");
    let original = object(5 * stripe, 42);
    let whole = encode(p, &original).expect("encodes");
    for (s, bytes) in original.chunks(stripe).enumerate() {
        let alone = encode(p, bytes).expect("encodes");
        for (index, chunk) in alone.iter().enumerate() {
            assert_eq!(chunk.data(), &whole[index].data()[s * 128..(s + 1) * 128], "stripe {s}");
        }
    }
}

/// Chunks longer than a coding segment (more than 1 MiB, not a whole number of 32 KiB
/// segments): the segments join into the same bytes as coding each stripe alone, and decoding
/// and repair across several decode segments give the object and the chunks back.
#[test]
fn large_objects_code_across_segments() {
    let unit = 65 * 64;
    let p = profile(3, 2, unit);
    let stripe = usize::try_from(p.stripe_bytes()).expect("small");
    let original = object(300 * stripe + 1234, 77);
    let chunks = encode(p, &original).expect("encodes");
    let chunk_bytes = chunks[0].data().len();
    assert!(chunk_bytes > optio_erasure::DECODE_SEGMENT_BYTES);
    assert!(!chunk_bytes.is_multiple_of(optio_erasure::ENCODE_SEGMENT_BYTES));
    let unit = usize::try_from(unit).expect("small");
    for s in [0, 7, 150, 299, 300] {
        let bytes = &original[s * stripe..original.len().min((s + 1) * stripe)];
        let alone = encode(p, bytes).expect("encodes");
        for (index, chunk) in alone.iter().enumerate() {
            assert_eq!(chunk.data(), &chunks[index].data()[s * unit..(s + 1) * unit], "stripe {s}");
        }
    }
    let mut given = slots(&chunks);
    given[0] = None;
    given[2] = None;
    let decoded = decode(p, &given).expect("two lost of 3+2");
    assert!(decoded.object == original, "decoded object differs");
    let rebuilt = reconstruct(p, &given, &[0, 2]).expect("rebuilds");
    assert!(rebuilt[0] == chunks[0] && rebuilt[1] == chunks[2], "rebuilt chunks differ");
    let mut given = slots(&chunks);
    given[1] = None;
    given[4] = None;
    let rebuilt = reconstruct(p, &given, &[4]).expect("rebuilds parity");
    assert!(rebuilt[0] == chunks[4], "rebuilt parity differs");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random profiles, objects and sets of up to M lost chunks.
    #[test]
    fn round_trips_with_up_to_m_chunks_lost(
        (p, len) in profile_and_len(),
        seed in any::<u64>(),
        lost in prop::sample::subsequence((0..20usize).collect::<Vec<_>>(), 0..=4),
    ) {
        let n = usize::from(p.chunks());
        let lost: Vec<usize> =
            lost.into_iter().filter(|i| *i < n).take(usize::from(p.m())).collect();
        let original = object(len, seed);
        let chunks = encode(p, &original).expect("encodes");
        let mut given = slots(&chunks);
        for index in &lost {
            given[*index] = None;
        }
        let decoded = decode(p, &given).expect("at most M lost");
        prop_assert_eq!(&decoded.object, &original);
        let missing: Vec<u8> = lost.iter().map(|i| u8::try_from(*i).expect("small")).collect();
        prop_assert_eq!(&decoded.missing, &missing);
        prop_assert!(decoded.damaged.is_empty());
        let rebuilt = reconstruct(p, &given, &missing).expect("rebuilds");
        for chunk in rebuilt {
            prop_assert_eq!(&chunk, &chunks[usize::from(chunk.index())]);
        }
    }

    /// M + 1 lost chunks of any profile: a clear error, never bytes.
    #[test]
    fn m_plus_one_lost_is_too_few(
        (p, len) in profile_and_len(),
        seed in any::<u64>(),
        start in 0..20usize,
    ) {
        let n = usize::from(p.chunks());
        let chunks = encode(p, &object(len, seed)).expect("encodes");
        let mut given = slots(&chunks);
        for i in 0..=usize::from(p.m()) {
            given[(start + i) % n] = None;
        }
        let result = decode(p, &given);
        let too_few = matches!(result, Err(Error::TooFewChunks { have, need, .. })
                if have == p.k() - 1 && need == p.k());
        prop_assert!(too_few, "{:?}", result);
    }
}
