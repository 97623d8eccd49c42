//! Chunk bytes from a disk or a peer are untrusted: any bytes parse or fail cleanly, never
//! panic, and what parses is consistent.

use optio_erasure::{
    CHUNK_FORMAT_VERSION, CHUNK_HEADER_BYTES, CHUNK_MAGIC, Chunk, ChunkHeader, ChunkRef,
    decode_stored, encode,
};
use proptest::prelude::*;

use crate::support::{object, profile};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Random bytes through every parser.
    #[test]
    fn any_bytes_parse_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(header) = ChunkHeader::parse(&bytes) {
            prop_assert!(header.index() < header.profile().chunks());
            prop_assert_eq!(ChunkHeader::parse(&header.to_bytes()), Ok(header));
        }
        if let Ok(chunk) = ChunkRef::parse_unverified(&bytes) {
            prop_assert_eq!(chunk.data().len() as u64, chunk.header().data_bytes());
        }
        if let Ok(chunk) = Chunk::parse(&bytes) {
            prop_assert_eq!(chunk.to_owned_chunk().to_bytes(), bytes);
        }
    }

    /// Random header fields under a valid magic, version and header checksum, so that the
    /// field checks (profile, index, object length, data size) are what decides.
    #[test]
    fn checksummed_random_headers_parse_or_fail_cleanly(
        fields in prop::collection::vec(any::<u8>(), 22..=22),
        data in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut bytes = CHUNK_MAGIC.to_vec();
        bytes.extend_from_slice(&CHUNK_FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&fields);
        let checksum = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&checksum.to_le_bytes());
        bytes.extend_from_slice(&data);
        if let Ok(chunk) = ChunkRef::parse_unverified(&bytes) {
            prop_assert_eq!(chunk.data().len() as u64, chunk.header().data_bytes());
            let _ = chunk.verify();
        }
    }

    /// A valid chunk with a random byte changed, the tail cut or bytes added: refused (or,
    /// for a change that restores the same bytes, equal); the decoder never panics on it.
    #[test]
    fn mutated_chunks_are_refused(
        len in 0..700usize,
        at in any::<prop::sample::Index>(),
        flip in 1..=255u8,
        cut in any::<prop::sample::Index>(),
        extra in prop::collection::vec(any::<u8>(), 0..4),
        header_bytes in prop::collection::vec(any::<u8>(), CHUNK_HEADER_BYTES..=CHUNK_HEADER_BYTES),
    ) {
        let p = profile(2, 2, 64);
        let chunks = encode(p, &object(len, 11)).expect("encodes");
        let good = chunks[1].to_bytes();

        let mut flipped = good.clone();
        let position = at.index(flipped.len());
        flipped[position] ^= flip;
        prop_assert!(Chunk::parse(&flipped).is_err());

        let short = &good[..cut.index(good.len())];
        prop_assert!(Chunk::parse(short).is_err());

        let mut long = good.clone();
        long.extend_from_slice(&extra);
        prop_assert_eq!(Chunk::parse(&long).is_ok(), extra.is_empty());

        // A random header in front of real data.
        let mut forged = header_bytes.clone();
        forged.extend_from_slice(chunks[1].data());
        let _ = Chunk::parse(&forged);

        let stored: Vec<Option<&[u8]>> =
            vec![Some(&flipped[..]), Some(short), Some(&long[..]), Some(&forged[..])];
        let _ = decode_stored(p, &stored);
    }
}
