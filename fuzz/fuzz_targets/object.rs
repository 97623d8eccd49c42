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
            let mut again = header.encode(key);
            again.extend_from_slice(body);
            assert_eq!(again, data, "a plain object re-encodes to the same bytes");
        }
    }
});
