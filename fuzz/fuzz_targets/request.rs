//! Fuzzes the decoding of a device request's head (`optio_proto::request`), which a server
//! does for every request from any client: no panic, and what decodes encodes to a head that
//! decodes to the same request.
//!
//! The input is text: a method line, a path-and-query line, then `name: value` header lines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optio_proto::request::{Request, needed_cap_of_head};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.split('\n');
    let method = lines.next().unwrap_or("");
    let path = lines.next().unwrap_or("");
    let headers: Vec<(String, &str)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim()))
        .collect();
    let lookup = |name: &'static str| {
        headers.iter().find(|(n, _)| n == name).map(|(_, value)| value.as_bytes())
    };
    let needed = needed_cap_of_head(method, path, lookup);
    match Request::decode(method, path, lookup) {
        Ok(request) => {
            assert_eq!(request.needed_cap(), needed, "one rule for decoded and refused requests");
            let again = request.headers();
            let again_lookup = |name: &'static str| {
                again.iter().find(|(n, _)| *n == name).map(|(_, value)| value.as_bytes())
            };
            let decoded = Request::decode(request.method().as_str(), &request.path(), again_lookup)
                .expect("an encoded request decodes");
            assert_eq!(decoded, request);
        }
        Err(error) => assert_eq!(error.needed, needed),
    }
});
