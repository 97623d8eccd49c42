//! Fuzzes the parsers of untrusted authentication input: the `x-optio-auth` header a request
//! carries, and keyring files; nothing may panic, and a parsed header must verify (or not)
//! without panicking either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optio_proto::auth::{Keyring, Signed};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(signed) = Signed::parse(text) {
        let _ = signed.verify(&Keyring::new(), "GET", "/", &[], signed.ts_ms, 30_000);
    }
    let _ = Keyring::parse(text, "fuzz");
});
