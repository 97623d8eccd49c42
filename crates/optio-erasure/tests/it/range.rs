//! Byte ranges read from the data chunks alone match the object; a missing or corrupt data
//! chunk the range needs is named, so that the caller decodes instead.

use optio_erasure::{Error, Layout, decode, encode, read_range};
use proptest::prelude::*;

use crate::support::{object, profile, profile_and_len, slots};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any range, with all parity chunks absent: the object's bytes; extents tile the range.
    #[test]
    fn ranges_read_without_decoding(
        (p, len) in profile_and_len(),
        seed in any::<u64>(),
        a in any::<prop::sample::Index>(),
        b in any::<prop::sample::Index>(),
    ) {
        let original = object(len, seed);
        let chunks = encode(p, &original).expect("encodes");
        let mut given = slots(&chunks);
        for slot in given.iter_mut().skip(usize::from(p.k())) {
            *slot = None;
        }
        let (x, y) = (a.index(len + 1), b.index(len + 1));
        let (start, end) = (x.min(y), x.max(y));
        let bytes = read_range(p, &given, start as u64, (end - start) as u64).expect("inside");
        prop_assert_eq!(&bytes[..], &original[start..end]);

        let layout = Layout::new(p, len as u64).expect("small");
        let extents = layout.extents(start as u64, (end - start) as u64).expect("inside");
        let mut at = start as u64;
        for extent in &extents {
            prop_assert_eq!(extent.object_offset, at);
            prop_assert!(extent.len > 0 && extent.len <= u64::from(p.stripe_unit_bytes()));
            prop_assert!(extent.chunk < p.k());
            at += extent.len;
        }
        prop_assert_eq!(at, end as u64);
    }
}

#[test]
fn a_range_needing_a_lost_or_corrupt_chunk_names_it() {
    let p = profile(4, 2, 64);
    let original = object(1000, 5);
    let chunks = encode(p, &original).expect("encodes");
    let mut given = slots(&chunks);
    given[1] = None;
    // Bytes 0..64 are in chunk 0 only.
    assert_eq!(read_range(p, &given, 0, 64).expect("chunk 0 is there"), &original[..64]);
    assert_eq!(
        read_range(p, &given, 60, 10),
        Err(Error::ChunkUnavailable { index: 1, state: "missing" })
    );
    let mut bytes = chunks[2].to_bytes();
    bytes[33] ^= 4;
    let corrupt = optio_erasure::ChunkRef::parse_unverified(&bytes).expect("header intact");
    let mut given = slots(&chunks);
    given[2] = Some(corrupt);
    let error = read_range(p, &given, 128, 1).expect_err("corrupt");
    assert_eq!(error, Error::ChunkUnavailable { index: 2, state: "damaged" });
    assert!(error.to_string().contains("decode the object"));
    // Decode works around it.
    assert_eq!(decode(p, &given).expect("five intact").object, original);
    assert!(matches!(read_range(p, &given, 990, 11), Err(Error::Layout(_))));
}
