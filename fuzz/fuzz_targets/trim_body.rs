//! Fuzzes the decoding of a trim request's body (`optio_proto::snap::decode_trim_body`), which
//! a server does for a request from any client with the `write` capability: no panic, and what
//! decodes names only clones' keys, and encodes back to the same body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optio_proto::snap::{decode_trim_body, encode_trim_body, parse_clone_key_any};

fuzz_target!(|data: &[u8]| {
    if let Ok(clones) = decode_trim_body(data) {
        for (key, version) in &clones {
            assert_eq!(parse_clone_key_any(key).map(|(_, v)| v), Some(*version));
        }
        assert_eq!(encode_trim_body(clones.iter().map(|(key, _)| *key)), data);
    }
});
