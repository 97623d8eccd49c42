//! Fuzzes the server's own routes (`optio_proto::own`): the decoding of a request to
//! `/health`, `/metrics`, `/v1/status` or `/v1/scrub`, which a server does for anything that
//! reaches it, and of their answers, which clients do: no panic; a request that decodes
//! re-encodes to one that decodes to the same; an answer that decodes re-encodes to the same
//! bytes once more.
//!
//! The input is text: a method line, a path line, a status line, then the answer's body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optio_proto::own::{OwnAnswer, OwnRequest};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.splitn(4, '\n');
    let method = lines.next().unwrap_or("");
    let path = lines.next().unwrap_or("");
    let status = lines.next().and_then(|line| line.trim().parse::<u16>().ok()).unwrap_or(200);
    let body = lines.next().unwrap_or("");
    let Some(Ok(asked)) = OwnRequest::decode(method, path, false) else { return };
    let again = OwnRequest::decode(asked.method().as_str(), &asked.path(), false);
    assert_eq!(again, Some(Ok(asked.clone())), "a decoded request re-encodes to itself");
    let content_type = |_: &'static str| None;
    let Ok(answer) = OwnAnswer::decode(&asked, status, content_type, body.as_bytes()) else {
        return;
    };
    let encoded = answer.encode();
    let decoded = OwnAnswer::decode(&asked, encoded.status, content_type, encoded.body.as_slice())
        .expect("an encoded answer decodes");
    assert_eq!(decoded.encode(), encoded, "an answer re-encodes to the same bytes");
});
