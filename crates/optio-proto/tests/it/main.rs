//! Every decoder of what arrives from disks and networks — object headers (tombstones
//! included), choice records, metrics headers, choice headers, %-escaped keys — takes any
//! bytes without panicking, and what it accepts re-encodes to the same thing.

use optio_placement::{Epoch, PoolId};
use optio_proto::{
    ChoiceRecord, DeviceMetrics, ObjectHeader, ObjectVersion, validate_key_bytes, wire,
};
use proptest::prelude::*;

fn stored(deleted: bool, key: &str, data: &[u8]) -> Vec<u8> {
    let header = if deleted {
        ObjectHeader::tombstone(PoolId(4), Some(9), ObjectVersion(3), Epoch(2))
    } else {
        ObjectHeader::new(PoolId(4), Some(9), key, data, ObjectVersion(3), Epoch(2))
    };
    let mut file = header.encode(key);
    if !deleted {
        file.extend_from_slice(data);
    }
    file
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn object_headers_take_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = ObjectHeader::decode_prefix(&bytes);
        if let Ok((header, key, data)) = ObjectHeader::decode(&bytes) {
            let mut again = header.encode(key);
            again.extend_from_slice(data);
            prop_assert_eq!(again, bytes);
        }
    }

    #[test]
    fn damaged_objects_and_tombstones_are_refused_or_intact(
        deleted in any::<bool>(),
        data in proptest::collection::vec(any::<u8>(), 0..64),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4),
    ) {
        let file = stored(deleted, "k/ey", &data);
        let mut bad = file.clone();
        for (at, bit) in &flips {
            let i = at.index(bad.len());
            bad[i] ^= 1 << bit;
        }
        match ObjectHeader::decode(&bad) {
            Ok((header, key, body)) => {
                prop_assert_eq!(&bad, &file, "a changed file decoded");
                prop_assert_eq!(header.deleted, deleted);
                prop_assert_eq!(key, "k/ey");
                prop_assert!(!deleted || body.is_empty());
            }
            Err(_) => prop_assert_ne!(&bad, &file),
        }
    }

    #[test]
    fn records_and_headers_take_any_text(
        bytes in proptest::collection::vec(any::<u8>(), 0..64),
        text in ".{0,80}",
    ) {
        if let Ok(record) = ChoiceRecord::decode(&bytes) {
            prop_assert_eq!(ChoiceRecord::decode(&record.encode()).ok(), Some(record));
        }
        if let Some(record) = wire::parse_choice_header(&text) {
            prop_assert_eq!(wire::parse_choice_header(&wire::choice_header(&record)), Some(record));
        }
        let _ = DeviceMetrics::from_header(&text);
        if let Some(decoded) = wire::percent_decode(&text)
            && let Ok(key) = validate_key_bytes(&decoded)
        {
            prop_assert_eq!(wire::percent_decode(&wire::percent_encode(key)), Some(decoded.clone()));
        }
    }
}
