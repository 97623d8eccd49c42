use proptest::prelude::*;

use super::*;
use crate::Deleted;

/// The headers of an encoded answer, looked up as a client looks them up.
fn lookup<'h>(headers: &'h [(&'static str, String)]) -> impl Fn(&'static str) -> Option<&'h str> {
    move |name| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
}

type Decoded = Result<(Answer<Vec<u8>>, Envelope), AnswerError>;

fn round_trip(
    asked: OpKind,
    key: Option<&str>,
    answer: Answer<Vec<u8>>,
    envelope: &Envelope,
) -> Decoded {
    let encoded = answer.encode(envelope);
    Answer::decode(asked, key, encoded.status, lookup(&encoded.headers), encoded.body)
}

fn decode(asked: OpKind, status: u16, pairs: &[(&'static str, &str)], body: &[u8]) -> Decoded {
    let header = |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    Answer::decode(asked, Some("k"), status, header, body.to_vec())
}

const KINDS: [ErrorKind; 16] = ErrorKind::ALL;

fn version() -> impl Strategy<Value = ObjectVersion> {
    any::<u64>().prop_map(ObjectVersion)
}

fn record() -> impl Strategy<Value = ChoiceRecord> {
    (1u8..=u8::MAX, any::<u64>()).prop_flat_map(|(choices, writer)| {
        (0..choices).prop_map(move |candidate| ChoiceRecord { candidate, choices, writer })
    })
}

/// An object as an answer describes it: the key asked for, the answer's epoch.
fn info(key: String, epoch: u64) -> impl Strategy<Value = ObjectInfo> {
    let summary =
        proptest::option::of(any::<[u8; 32]>().prop_map(|s| crate::summary::summary_hex(&s)));
    (any::<u64>(), version(), any::<u32>(), proptest::option::of(any::<u32>()), summary).prop_map(
        move |(size_bytes, version, checksum, pg_seed, summary)| ObjectInfo {
            key: key.clone(),
            size_bytes,
            version,
            checksum,
            pg_seed,
            epoch,
            summary,
        },
    )
}

fn listing() -> impl Strategy<Value = Listing> {
    let object = ("\\PC{1,8}", any::<u64>()).prop_flat_map(|(key, epoch)| info(key, epoch));
    let deleted = ("\\PC{1,8}", version(), proptest::option::of(any::<u32>()))
        .prop_map(|(key, version, pg_seed)| Deleted { key, version, pg_seed });
    (
        proptest::collection::vec(object, 0..4),
        any::<bool>(),
        proptest::collection::vec(deleted, 0..3),
    )
        .prop_map(|(objects, truncated, deleted)| Listing { objects, truncated, deleted })
}

fn metrics() -> impl Strategy<Value = DeviceMetrics> {
    (any::<u32>(), any::<u16>(), any::<u64>(), any::<u64>(), "\\PC{0,16}").prop_map(
        |(device, cpu_permille, used_bytes, latency_us, location)| DeviceMetrics {
            device,
            cpu_permille,
            memory_permille: cpu_permille / 2,
            space_permille: cpu_permille / 3,
            used_bytes,
            capacity_bytes: used_bytes / 2,
            latency_us,
            unflushed_bytes: latency_us / 3,
            location,
        },
    )
}

fn refusal() -> impl Strategy<Value = Refusal> {
    (0..KINDS.len(), "\\PC{0,40}", proptest::option::of(version())).prop_map(
        |(at, reason, stored)| {
            let kind = KINDS[at];
            let stored = stored.filter(|_| kind == ErrorKind::VersionConflict);
            Refusal { kind, reason, stored }
        },
    )
}

/// A request's kind, the key asked for, and an answer to it that a server may send, with its
/// envelope.
fn exchange() -> impl Strategy<Value = (OpKind, Option<String>, Answer<Vec<u8>>, Envelope)> {
    let envelope = (
        proptest::option::of(any::<u64>()),
        proptest::option::of(metrics()),
        proptest::option::of(any::<u64>()),
    );
    ("[a-z/]{1,8}", envelope).prop_flat_map(|(key, (epoch, metrics, incarnation))| {
        let envelope = Envelope { epoch, metrics, incarnation };
        let info = || info(key.clone(), epoch.unwrap_or(0));
        let absent_kinds = prop_oneof![
            Just(OpKind::Probe),
            Just(OpKind::RecordGet),
            Just(OpKind::RecordPut),
            Just(OpKind::RecordDelete)
        ];
        let any_kind = (0..OpKind::ALL.len()).prop_map(|at| OpKind::ALL[at]);
        let object =
            (info(), any::<u64>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..64))
                .prop_map(|(mut info, a, b, body)| {
                    info.size_bytes = info.size_bytes.max(1);
                    let (first, last) = (a % info.size_bytes, b % info.size_bytes);
                    let range = (a % 3 != 0).then_some((first.min(last), first.max(last)));
                    Answer::Object { info, range, body }
                });
        let kinds = prop_oneof![
            (info(), proptest::option::of(version()), proptest::option::of(record())).prop_map(
                |(info, deleted, record)| (
                    OpKind::Probe,
                    Answer::Probed { info: Some(info), deleted, record }
                )
            ),
            (absent_kinds, proptest::option::of(version()), proptest::option::of(record()))
                .prop_map(|(kind, deleted, record)| (
                    kind,
                    Answer::Probed { info: None, deleted, record }
                )),
            object.prop_map(|answer| (OpKind::Get, answer)),
            info().prop_map(|info| (OpKind::Open, Answer::Opened { info })),
            (prop_oneof![Just(OpKind::Put), Just(OpKind::Write)], version(), any::<bool>())
                .prop_map(|(kind, version, created)| (kind, Answer::Written { version, created })),
            prop_oneof![Just(OpKind::Delete), Just(OpKind::Sync), Just(OpKind::RecordDelete)]
                .prop_map(|kind| (kind, Answer::Done)),
            listing().prop_map(|listing| (OpKind::List, Answer::Listed(listing))),
            (record(), proptest::option::of(info())).prop_map(|(record, info)| {
                (OpKind::RecordGet, Answer::Record { record, created: false, info })
            }),
            (record(), any::<bool>(), proptest::option::of(info())).prop_map(
                |(record, created, info)| {
                    (OpKind::RecordPut, Answer::Record { record, created, info })
                }
            ),
            (any_kind, refusal()).prop_map(|(kind, refusal)| (kind, Answer::Refused(refusal))),
        ];
        kinds.prop_map(move |(kind, answer)| {
            let key = Some(key.clone()).filter(|_| !matches!(kind, OpKind::List | OpKind::Sync));
            let mut envelope = envelope.clone();
            if matches!(answer, Answer::Refused(_)) {
                // (Refusals carry no incarnation.)
                envelope.incarnation = None;
            }
            (kind, key, answer, envelope)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Every answer a server may send decodes, as an answer to what was asked, to itself.
    #[test]
    fn every_answer_round_trips((asked, key, answer, envelope) in exchange()) {
        let decoded = round_trip(asked, key.as_deref(), answer.clone(), &envelope);
        prop_assert_eq!(decoded, Ok((answer, envelope)));
    }

    /// Decoding takes anything without panicking, and what it decodes round-trips.
    #[test]
    fn decoding_never_panics(
        asked in (0..OpKind::ALL.len()).prop_map(|at| OpKind::ALL[at]),
        status in prop_oneof![Just(200u16), Just(201), Just(204), Just(206), Just(404), 100u16..600],
        values in proptest::collection::vec(proptest::option::of(prop_oneof![
            "\\PC{0,16}",
            "[0-9]{1,4}",
            "[0-9a-f]{8}",
            Just("bytes 0-0/1".to_string()),
            Just("version-conflict".to_string()),
            Just("1/2/beef".to_string()),
        ]), 14),
        body in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let names = [
            wire::EPOCH, wire::ERROR, wire::REASON, wire::METRICS, wire::VERSION, wire::CHECKSUM,
            wire::SIZE, wire::PG, wire::SUMMARY, wire::CHOICE, wire::INCARNATION, wire::DELETED,
            wire::CHOICE_CREATED, "content-range",
        ];
        let header = |name: &'static str| {
            let at = names.iter().position(|n| *n == name)?;
            values[at].as_deref()
        };
        // What decodes encodes to an answer that decodes to the same (what the fuzz target
        // checks; a refusal's reason is its body's once encoded).
        if let Ok((answer, envelope)) = Answer::decode(asked, Some("k"), status, header, body) {
            let encoded = answer.clone().encode(&envelope);
            let again = Answer::decode(
                asked,
                Some("k"),
                encoded.status,
                lookup(&encoded.headers),
                encoded.body,
            );
            prop_assert_eq!(again, Ok((answer, envelope)));
        }
    }
}

/// The answers are the ones servers have always sent: statuses and headers.
#[test]
fn the_wire_format_is_todays() {
    let info = ObjectInfo {
        key: "k".into(),
        size_bytes: 5,
        version: ObjectVersion(9),
        checksum: 10,
        pg_seed: Some(3),
        epoch: 4,
        summary: None,
    };
    let envelope = Envelope { epoch: Some(4), metrics: None, incarnation: Some(0xab) };
    let probe: Answer<Vec<u8>> =
        Answer::Probed { info: Some(info.clone()), deleted: None, record: None };
    let encoded = probe.encode(&envelope);
    assert_eq!(encoded.status, 200);
    assert_eq!(
        encoded.headers,
        vec![
            (wire::SIZE, "5".to_string()),
            (wire::VERSION, "9".to_string()),
            (wire::CHECKSUM, "0000000a".to_string()),
            (wire::PG, "3".to_string()),
            (wire::EPOCH, "4".to_string()),
            (wire::INCARNATION, "ab".to_string()),
        ]
    );
    let range: Answer<Vec<u8>> =
        Answer::Object { info, range: Some((1, 3)), body: b"ell".to_vec() };
    let encoded = range.encode(&Envelope::default());
    assert_eq!(encoded.status, 206);
    assert!(encoded.headers.contains(&("content-range", "bytes 1-3/5".to_string())));
    assert_eq!(encoded.body, b"ell");
    let conflict = Refusal {
        kind: ErrorKind::VersionConflict,
        reason: "newer: é\n".into(),
        stored: Some(ObjectVersion(12)),
    };
    let encoded = Answer::<Vec<u8>>::Refused(conflict)
        .encode(&Envelope { epoch: Some(2), ..Envelope::default() });
    assert_eq!(encoded.status, 412);
    assert_eq!(
        encoded.headers,
        vec![
            ("content-type", "application/json".to_string()),
            (wire::ERROR, "version-conflict".to_string()),
            (wire::REASON, "newer: ??".to_string()),
            (wire::VERSION, "12".to_string()),
            (wire::EPOCH, "2".to_string()),
        ]
    );
    let body: ErrorBody = serde_json::from_slice(&encoded.body).unwrap();
    assert_eq!((body.reason.as_str(), body.epoch), ("newer: é\n", 2));
    let created: Answer<Vec<u8>> = Answer::Record {
        record: ChoiceRecord { candidate: 1, choices: 2, writer: 0xbeef },
        created: true,
        info: None,
    };
    let encoded = created.encode(&Envelope::default());
    assert_eq!(encoded.status, 201);
    assert_eq!(
        encoded.headers,
        vec![(wire::CHOICE, "1/2/beef".to_string()), (wire::CHOICE_CREATED, "1".to_string())]
    );
    assert_eq!(Answer::<Vec<u8>>::Done.encode(&Envelope::default()).status, 204);
}

/// A refusal is one whatever else it carries: a HEAD answer's reason is its header, a
/// proxy's error its status, and a 404 without a kind answers a probe but refuses a read.
#[test]
fn refusals_are_read_leniently() {
    let (answer, envelope) = decode(
        OpKind::Probe,
        503,
        &[(wire::ERROR, "recovering"), (wire::REASON, "later"), (wire::EPOCH, "x")],
        b"",
    )
    .unwrap();
    assert_eq!(answer, Answer::Refused(Refusal::new(ErrorKind::Recovering, "later")));
    assert_eq!(envelope.epoch, None);
    let (answer, _) = decode(OpKind::Get, 502, &[], b"<html>").unwrap();
    assert_eq!(answer, Answer::Refused(Refusal::new(ErrorKind::Io, "HTTP 502")));
    let (answer, _) = decode(OpKind::Get, 404, &[], b"").unwrap();
    assert_eq!(answer.refusal().map(|r| r.kind), Some(ErrorKind::NotFound));
    let (answer, _) = decode(OpKind::Probe, 404, &[(wire::DELETED, "7")], b"").unwrap();
    assert_eq!(
        answer,
        Answer::Probed { info: None, deleted: Some(ObjectVersion(7)), record: None }
    );
    let (answer, _) = decode(OpKind::Probe, 404, &[(wire::ERROR, "misdirected")], b"").unwrap();
    assert_eq!(answer.refusal().map(|r| r.kind), Some(ErrorKind::Misdirected));
    // The stored version is read on a version conflict only.
    let (answer, _) =
        decode(OpKind::Put, 400, &[(wire::ERROR, "bad-request"), (wire::VERSION, "3")], b"")
            .unwrap();
    assert_eq!(answer.refusal().unwrap().stored, None);
}

/// An answer whose headers are malformed is an error, never an object of 0 bytes or version
/// 0; the metrics alone are advisory.
#[test]
fn malformed_answer_headers_are_errors_not_zeros() {
    let good =
        [(wire::SIZE, "5"), (wire::VERSION, "7"), (wire::CHECKSUM, "0000000a"), (wire::EPOCH, "3")];
    let (answer, _) = decode(OpKind::Probe, 200, &good, b"").expect("well formed");
    let Answer::Probed { info: Some(info), .. } = answer else { panic!("{answer:?}") };
    assert_eq!((info.size_bytes, info.version.0, info.checksum, info.epoch), (5, 7, 10, 3));
    assert_eq!(info.key, "k");
    for (name, bad) in [
        (wire::SIZE, "five"),
        (wire::VERSION, "-1"),
        (wire::CHECKSUM, "xyz"),
        (wire::EPOCH, "e"),
        (wire::PG, "p"),
        (wire::SUMMARY, "00"),
        (wire::INCARNATION, "zz"),
        (wire::DELETED, ""),
        (wire::CHOICE, "1/x/2"),
    ] {
        let mut pairs = good.to_vec();
        pairs.retain(|(n, _)| *n != name);
        pairs.push((name, bad));
        match decode(OpKind::Probe, 200, &pairs, b"") {
            Err(AnswerError::Header(error)) => assert_eq!(error.name, name, "{name}: {bad}"),
            other => panic!("{name}: {bad}: {other:?}"),
        }
    }
    assert!(matches!(
        decode(OpKind::Probe, 200, &[(wire::VERSION, "7")], b""),
        Err(AnswerError::Missing { name: wire::SIZE, status: 200 })
    ));
    assert!(matches!(
        decode(OpKind::Put, 201, &[], b""),
        Err(AnswerError::Missing { name: wire::VERSION, .. })
    ));
    assert!(matches!(
        decode(OpKind::Get, 206, &good, b""),
        Err(AnswerError::Missing { name: "content-range", .. })
    ));
    let mut ranged = good.to_vec();
    ranged.push(("content-range", "bytes 2-9/5"));
    assert!(matches!(decode(OpKind::Get, 206, &ranged, b""), Err(AnswerError::Header(_))));
    assert!(matches!(
        decode(OpKind::Put, 204, &[], b""),
        Err(AnswerError::Status { status: 204, .. })
    ));
    assert!(matches!(decode(OpKind::List, 200, &[], b"{"), Err(AnswerError::Listing(_))));
    let mut pairs = good.to_vec();
    pairs.push((wire::METRICS, "not metrics"));
    let (_, envelope) = decode(OpKind::Probe, 200, &pairs, b"").expect("metrics are advisory");
    assert_eq!(envelope.metrics, None);
}
