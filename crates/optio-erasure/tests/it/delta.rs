//! Parity updated by a delta equals the parity of re-encoding the changed object.

use optio_erasure::{Error, apply_delta, encode, parity_delta};
use proptest::prelude::*;

use crate::support::{any_profile, object, profile};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Rewrite whole 64-byte blocks of one data chunk (a stripe unit or a part of one) and
    /// apply the delta to the old parity: it is the new object's parity, byte for byte.
    #[test]
    fn a_delta_equals_a_full_re_encode(
        p in any_profile(),
        stripes in 1..4u64,
        seed in any::<u64>(),
        data_index in any::<prop::sample::Index>(),
        stripe in any::<prop::sample::Index>(),
        blocks in any::<(prop::sample::Index, prop::sample::Index)>(),
    ) {
        let unit = u64::from(p.stripe_unit_bytes());
        let len = usize::try_from(stripes * p.stripe_bytes()).expect("small");
        let old_object = object(len, seed);
        let old = encode(p, &old_object).expect("encodes");
        let k = usize::from(p.k());
        let index = data_index.index(k);
        let stripe = stripe.index(usize::try_from(stripes).expect("small"));
        let blocks_per_unit = usize::try_from(unit / 64).expect("small");
        let (x, y) = (blocks.0.index(blocks_per_unit), blocks.1.index(blocks_per_unit));
        let (first, last) = (x.min(y), x.max(y));
        let unit = usize::try_from(unit).expect("small");
        let chunk_offset = stripe * unit + first * 64;
        let change_len = (last - first + 1) * 64;
        let object_offset = stripe * k * unit + index * unit + first * 64;

        let mut new_object = old_object.clone();
        let fresh = object(change_len, seed ^ 0x5555);
        new_object[object_offset..object_offset + change_len].copy_from_slice(&fresh);
        let new = encode(p, &new_object).expect("encodes");

        let old_bytes = &old[index].data()[chunk_offset..chunk_offset + change_len];
        prop_assert_eq!(&new[index].data()[chunk_offset..chunk_offset + change_len], &fresh[..]);
        let delta = parity_delta(p, u8::try_from(index).expect("small"), old_bytes, &fresh)
            .expect("a valid update");
        let mut parity: Vec<Vec<u8>> = old[k..].iter().map(|c| c.data().to_vec()).collect();
        let mut ranges: Vec<&mut [u8]> = parity
            .iter_mut()
            .map(|data| &mut data[chunk_offset..chunk_offset + change_len])
            .collect();
        apply_delta(&delta, &mut ranges).expect("shapes match");
        for (j, data) in parity.iter().enumerate() {
            prop_assert_eq!(&data[..], new[k + j].data(), "parity {}", j);
        }
    }
}

#[test]
fn bad_updates_are_refused() {
    let p = profile(3, 2, 64);
    let unit = vec![0u8; 64];
    assert!(matches!(parity_delta(p, 3, &unit, &unit), Err(Error::NotDataChunk { index: 3, .. })));
    assert!(matches!(parity_delta(p, 0, &unit, &unit[..32]), Err(Error::DeltaSize { .. })));
    assert!(matches!(parity_delta(p, 0, &unit[..32], &unit[..32]), Err(Error::DeltaSize { .. })));
    assert!(matches!(parity_delta(p, 0, &[], &[]), Err(Error::DeltaSize { .. })));
    let delta = parity_delta(p, 1, &unit, &[1u8; 64]).expect("valid");
    assert_eq!(delta.parity.len(), 2);
    let mut one = [0u8; 64];
    assert!(matches!(apply_delta(&delta, &mut [&mut one[..]]), Err(Error::DeltaShape { .. })));
    let (mut a, mut b) = (vec![0u8; 64], vec![0u8; 32]);
    assert!(matches!(
        apply_delta(&delta, &mut [&mut a[..], &mut b[..]]),
        Err(Error::DeltaShape { .. })
    ));
    // No change, no delta.
    let same = parity_delta(p, 2, &[7u8; 128], &[7u8; 128]).expect("valid");
    assert!(same.parity.iter().all(|d| d.iter().all(|byte| *byte == 0)));
}
