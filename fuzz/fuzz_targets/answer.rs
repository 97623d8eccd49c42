//! Fuzzes the decoding of a device's answer (`optio_proto::answer`), which a client does for
//! every answer from any server (or anything answering at its address): no panic, and what
//! decodes encodes to an answer that decodes to the same.
//!
//! The input is text: a kind line (an index into the operation kinds), a status line, then
//! `name: value` header lines up to an empty line, then the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optio_proto::answer::Answer;
use optio_proto::request::OpKind;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (head, body) = text.split_once("\n\n").unwrap_or((text, ""));
    let mut lines = head.split('\n');
    let kind = lines.next().and_then(|line| line.trim().parse::<usize>().ok()).unwrap_or(0);
    let asked = OpKind::ALL[kind % OpKind::ALL.len()];
    let Some(status) = lines.next().and_then(|line| line.trim().parse::<u16>().ok()) else {
        return;
    };
    let headers: Vec<(String, &str)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim()))
        .collect();
    let lookup = |name: &'static str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    let key = Some("k");
    let Ok((answer, envelope)) =
        Answer::decode(asked, key, status, lookup, body.as_bytes().to_vec())
    else {
        return;
    };
    let encoded = answer.clone().encode(&envelope);
    let again = |name: &'static str| {
        encoded.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    };
    let decoded = Answer::decode(asked, key, encoded.status, again, encoded.body.clone())
        .expect("an encoded answer decodes");
    // (A refusal's reason is read from its JSON body when it has one, from its header when
    // not: once encoded, it is the body's.)
    let (decoded_answer, decoded_envelope) = decoded;
    match (&decoded_answer, &answer) {
        (Answer::Refused(again), Answer::Refused(first)) => {
            assert_eq!((again.kind, &again.reason), (first.kind, &first.reason));
        }
        _ => assert_eq!(decoded_answer, answer),
    }
    assert_eq!(decoded_envelope.incarnation, envelope.incarnation);
});
