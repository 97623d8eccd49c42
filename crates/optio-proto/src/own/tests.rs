use proptest::prelude::*;

use super::*;
use crate::answer::{Answer, Envelope};
use crate::{DeviceMetrics, DeviceStatus, MigrationStatus, PoolSpace};

fn lookup<'h>(headers: &'h [(&'static str, String)]) -> impl Fn(&'static str) -> Option<&'h str> {
    move |name| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
}

fn query() -> impl Strategy<Value = ScrubQuery> {
    (any::<bool>(), proptest::option::of(any::<u32>()), proptest::option::of(any::<u64>()))
        .prop_map(|(deep, pool, rate)| ScrubQuery { deep, pool, rate })
}

fn request() -> impl Strategy<Value = OwnRequest> {
    prop_oneof![
        Just(OwnRequest::Health),
        Just(OwnRequest::Metrics),
        Just(OwnRequest::Status),
        query().prop_map(OwnRequest::Scrub),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// What a client encodes, the server decodes to the same request.
    #[test]
    fn every_request_round_trips(asked in request(), public in any::<bool>()) {
        let decoded = OwnRequest::decode(asked.method().as_str(), &asked.path(), public);
        prop_assert_eq!(decoded, Some(Ok(asked)));
    }

    /// Any method and path: no panic; whatever decodes re-encodes to a request that decodes
    /// to itself; a path that is no own route is left to the device routes.
    #[test]
    fn arbitrary_requests_never_panic(method in "[A-Z]{0,7}", path in "/[ -~]{0,40}") {
        match OwnRequest::decode(&method, &path, false) {
            None => {
                let bare = path.split_once('?').map_or(path.as_str(), |(p, _)| p);
                prop_assert!(!OwnRequest::is_own_path(bare));
            }
            Some(Ok(asked)) => {
                let again = OwnRequest::decode(asked.method().as_str(), &asked.path(), false);
                prop_assert_eq!(again, Some(Ok(asked)));
            }
            Some(Err(error)) => prop_assert_eq!(error.kind, ErrorKind::BadRequest),
        }
    }

    /// Every refusal kind reaches the client as that kind with its reason.
    #[test]
    fn refusals_decode_to_their_kind(
        index in 0..ErrorKind::ALL.len(), reason in "[ -~]{0,80}", asked in request()
    ) {
        let kind = ErrorKind::ALL[index];
        let encoded = Answer::<Vec<u8>>::Refused(Refusal::new(kind, reason.clone()))
            .encode(&Envelope { epoch: Some(3), ..Envelope::default() });
        let decoded =
            OwnAnswer::decode(&asked, encoded.status, lookup(&encoded.headers), encoded.body);
        match decoded {
            Err(OwnAnswerError::Refused(refusal)) => {
                prop_assert_eq!(refusal.kind, kind);
                prop_assert_eq!(refusal.reason, reason);
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }

    /// Arbitrary bodies and statuses: an error or an answer, never a panic.
    #[test]
    fn arbitrary_answers_never_panic(
        asked in request(), status in 100u16..600, body in proptest::collection::vec(any::<u8>(), 0..200)
    ) {
        let _ = OwnAnswer::decode(&asked, status, |_| None, body);
    }
}

fn pool_spaces() -> impl Strategy<Value = Vec<PoolSpace>> {
    proptest::collection::vec(
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(pool, objects, bytes)| PoolSpace {
            pool,
            objects,
            bytes,
        }),
        0..6,
    )
}

fn device(id: u32, pools: Vec<PoolSpace>) -> DeviceStatus {
    DeviceStatus {
        metrics: DeviceMetrics { device: id, ..DeviceMetrics::default() },
        objects: pools.iter().map(|p| p.objects).fold(0, u64::saturating_add),
        records: 1,
        corrupt_found: 0,
        recovering: false,
        caught_up: 0,
        scrub: None,
        scrubbing: None,
        scrub_repaired: 0,
        scrub_unrepairable: 0,
        pools,
    }
}

proptest! {
    /// A status with any devices' per-pool space decodes to the same figures.
    #[test]
    fn every_status_round_trips_with_its_pools(spaces in proptest::collection::vec(pool_spaces(), 0..4)) {
        let sent = ServerStatus {
            devices: spaces.into_iter().zip(0u32..).map(|(p, i)| device(i, p)).collect(),
            ..status()
        };
        let encoded = OwnAnswer::Status(Box::new(sent.clone())).encode();
        let decoded =
            OwnAnswer::decode(&OwnRequest::Status, 200, lookup(&encoded.headers), encoded.body);
        let Ok(OwnAnswer::Status(decoded)) = decoded else { panic!("{decoded:?}") };
        prop_assert_eq!(decoded.devices.len(), sent.devices.len());
        for (got, want) in decoded.devices.iter().zip(&sent.devices) {
            prop_assert_eq!(&got.pools, &want.pools);
            prop_assert_eq!(got.objects, want.objects);
        }
    }
}

/// A device's status as servers sent it before they reported space per pool decodes, with
/// no pools.
#[test]
fn a_device_status_without_pools_decodes() {
    let mut value =
        serde_json::to_value(device(3, vec![PoolSpace { pool: 1, objects: 2, bytes: 9 }])).unwrap();
    value.as_object_mut().unwrap().remove("pools");
    let old: DeviceStatus = serde_json::from_value(value).unwrap();
    assert!(old.pools.is_empty());
    assert_eq!(old.objects, 2);
}

fn status() -> ServerStatus {
    ServerStatus {
        epoch: 7,
        devices: vec![device(0, vec![PoolSpace { pool: 2, objects: 3, bytes: 4096 }])],
        migration: MigrationStatus::default(),
        fenced: false,
        local: None,
        cpu_seconds: Some(1.5),
        syncs: 12,
    }
}

#[test]
fn every_answer_round_trips() {
    let health = ServerHealth {
        status: "ok".to_string(),
        recovering: 1,
        fenced: true,
        keyring: Some("abcd".to_string()),
        epoch: 9,
    };
    let report = ScrubReport { device: 4, deep: true, objects: 10, ..ScrubReport::default() };
    let cases = vec![
        (OwnRequest::Health, OwnAnswer::Health(health)),
        (OwnRequest::Metrics, OwnAnswer::Metrics("optio_up 1\n".to_string())),
        (OwnRequest::Scrub(ScrubQuery::default()), OwnAnswer::Scrubbed(vec![report])),
    ];
    for (asked, answer) in cases {
        let encoded = answer.encode();
        let decoded =
            OwnAnswer::decode(&asked, encoded.status, lookup(&encoded.headers), encoded.body);
        // (Compared by their wire form: ServerStatus has no equality.)
        assert_eq!(decoded.unwrap().encode(), answer.encode());
    }
    let encoded = OwnAnswer::Status(Box::new(status())).encode();
    let decoded =
        OwnAnswer::decode(&OwnRequest::Status, 200, lookup(&encoded.headers), encoded.body);
    let Ok(OwnAnswer::Status(decoded)) = decoded else { panic!("{decoded:?}") };
    assert_eq!(decoded.epoch, 7);
    assert_eq!(OwnAnswer::Status(decoded).encode(), OwnAnswer::Status(Box::new(status())).encode());
}

#[test]
fn the_wire_form_is_the_one_servers_always_sent() {
    let health = ServerHealth {
        status: "ok".to_string(),
        recovering: 0,
        fenced: false,
        keyring: Some(String::new()),
        epoch: 3,
    };
    let encoded = OwnAnswer::Health(health).encode();
    assert_eq!(encoded.status, 200);
    assert_eq!(encoded.headers, vec![("content-type", "application/json".to_string())]);
    assert_eq!(
        String::from_utf8(encoded.body).unwrap(),
        r#"{"status":"ok","recovering":0,"fenced":false,"keyring":"","epoch":3}"#
    );
    let metrics = OwnAnswer::Metrics(String::new()).encode();
    assert_eq!(metrics.headers[0].1, PROMETHEUS_TEXT);
    assert_eq!(
        OwnRequest::Scrub(ScrubQuery { deep: true, pool: Some(2), rate: Some(10) }).path(),
        "/v1/scrub?deep=true&pool=2&rate=10"
    );
}

#[test]
fn wrong_methods_and_bad_queries_are_refused_with_the_capability_of_the_route() {
    let error = OwnRequest::decode("GET", "/v1/scrub?deep=true", false).unwrap().unwrap_err();
    assert_eq!((error.kind, error.needed), (ErrorKind::BadRequest, Cap::Admin));
    assert!(error.reason.contains("takes POST"), "{}", error.reason);
    let error = OwnRequest::decode("POST", "/v1/scrub?pool=x", false).unwrap().unwrap_err();
    assert!(error.reason.contains("pool=\"x\""), "{}", error.reason);
    let error = OwnRequest::decode("DELETE", "/v1/status", false).unwrap().unwrap_err();
    assert_eq!(error.needed, Cap::Read);
    // HEAD is GET without a body; unknown scrub parameters are ignored, as they always were.
    assert_eq!(OwnRequest::decode("HEAD", "/health", false), Some(Ok(OwnRequest::Health)));
    assert_eq!(
        OwnRequest::decode("POST", "/v1/scrub?deep=false&x=1", false),
        Some(Ok(OwnRequest::Scrub(ScrubQuery::default())))
    );
    assert_eq!(OwnRequest::decode("GET", "/v1/dev/1/objects/0/k", false), None);
}

#[test]
fn metrics_need_admin_unless_public_and_health_needs_nothing() {
    assert_eq!(OwnRequest::Metrics.needed_cap(false), Some(Cap::Admin));
    assert_eq!(OwnRequest::Metrics.needed_cap(true), None);
    assert_eq!(OwnRequest::Health.needed_cap(false), None);
    assert_eq!(OwnRequest::Status.needed_cap(true), Some(Cap::Read));
    assert_eq!(OwnRequest::Scrub(ScrubQuery::default()).needed_cap(true), Some(Cap::Admin));
}

#[test]
fn a_non_optio_error_status_is_a_refusal_and_an_odd_success_is_an_error() {
    let decoded = OwnAnswer::decode(&OwnRequest::Status, 502, |_| None, b"bad gateway".as_slice());
    assert!(matches!(decoded, Err(OwnAnswerError::Refused(Refusal { kind: ErrorKind::Io, .. }))));
    let decoded = OwnAnswer::decode(&OwnRequest::Status, 204, |_| None, b"".as_slice());
    assert!(matches!(decoded, Err(OwnAnswerError::Status { status: 204, .. })));
    let decoded = OwnAnswer::decode(&OwnRequest::Status, 200, |_| None, b"{".as_slice());
    assert!(matches!(decoded, Err(OwnAnswerError::Body { .. })));
}
