//! Fuzzes the decoding of stored object files (`optio_proto::ObjectHeader`), written whole or
//! block objects: untrusted bytes from a disk never panic, and what decodes is consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optio_proto::{ObjectHeader, checksum};

fuzz_target!(|data: &[u8]| {
    if let Ok((header, key, _)) = ObjectHeader::decode_prefix(data) {
        let _ = header.file_bytes(key.len());
    }
    if let Ok((header, key, body)) = ObjectHeader::decode(data) {
        assert_eq!(body.len() as u64, header.size_bytes);
        assert_eq!(checksum(body), header.checksum);
        assert_eq!(header.file_bytes(key.len()), data.len() as u64);
        if !header.blocks {
            // Re-encoded, it decodes to the same object (unused fields, such as the PG seed
            // of a header without one, are not kept: they are not part of the object).
            let mut again = header.encode(key);
            again.extend_from_slice(body);
            let (header2, key2, body2) = ObjectHeader::decode(&again).expect("re-encoded decodes");
            assert_eq!((header2, key2, body2), (header, key, body));
        }
    }
});
