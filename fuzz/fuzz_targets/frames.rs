//! Fuzzes the decoding of frames (`optio_proto::frames`), which servers read from any client
//! and clients from any server: no panic, limits hold, and what decodes encodes back to the
//! same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optio_proto::frames::{self, PREFIX_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Some(prefix) = data.first_chunk::<PREFIX_BYTES>() {
        if let Ok((head, body)) = frames::decode_prefix(*prefix) {
            assert!(head <= frames::HEAD_BYTES_MAX && body <= frames::BODY_BYTES_MAX);
        }
    }
    if let Ok(request) = frames::decode_request(data) {
        assert!(request.headers.len() <= frames::HEADERS_MAX);
        let mut again = Vec::new();
        let headers = request.headers.iter().copied();
        frames::encode_request(&mut again, request.id, request.method, request.path, headers, 0)
            .expect("a decoded request encodes");
        assert_eq!(&again[PREFIX_BYTES..], data);
    }
    if let Ok(answer) = frames::decode_answer(data) {
        let mut again = Vec::new();
        let headers = answer.headers.iter().copied();
        frames::encode_answer(&mut again, answer.id, answer.status, headers, 0)
            .expect("a decoded answer encodes");
        assert_eq!(&again[PREFIX_BYTES..], data);
    }
});
