//! Fuzzes erasure-coded chunks (`optio_erasure`), which a server reads from its disk and a
//! client from any server: untrusted bytes never panic, what parses is consistent and
//! re-encodes to the same bytes, and decoding from any slots never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optio_erasure::{Chunk, ChunkHeader, ChunkRef, Profile, decode_stored};

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = ChunkHeader::parse(data) {
        assert!(header.index() < header.profile().chunks());
        assert_eq!(ChunkHeader::parse(&header.to_bytes()), Ok(header));
    }
    if let Ok(chunk) = ChunkRef::parse_unverified(data) {
        assert_eq!(chunk.data().len() as u64, chunk.header().data_bytes());
    }
    if let Ok(chunk) = Chunk::parse(data) {
        assert_eq!(chunk.to_owned_chunk().to_bytes(), data);
    }
    // The input cut into three slots of a 2+1 object.
    let profile = Profile::new(2, 1, 64).expect("a valid profile");
    let third = data.len() / 3;
    let slots = [Some(&data[..third]), Some(&data[third..2 * third]), Some(&data[2 * third..])];
    let _ = decode_stored(profile, &slots);
});
