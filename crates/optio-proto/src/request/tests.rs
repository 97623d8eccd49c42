use proptest::prelude::*;

use super::*;

/// The headers of an encoded request, looked up as a server looks them up.
fn lookup<'h>(headers: &'h [(&'static str, String)]) -> impl Fn(&'static str) -> Option<&'h [u8]> {
    move |name| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_bytes())
}

fn round_trip(request: &Request<'_>) -> Result<Request<'static>, DecodeError> {
    let headers = request.headers();
    Request::decode(request.method().as_str(), &request.path(), lookup(&headers))
}

fn decode(
    method: &str,
    path: &str,
    pairs: &[(&'static str, &str)],
) -> Result<Request<'static>, DecodeError> {
    Request::decode(method, path, |name| {
        pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_bytes())
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9/ ._%~+-]{1,24}",
        "\\PC{1,12}",
        Just(".s3/users/alice".to_string()),
        Just("./.".to_string()),
    ]
    .prop_filter("a valid key", |key| crate::validate_key(key).is_ok())
}

fn version() -> impl Strategy<Value = ObjectVersion> {
    any::<u64>().prop_map(ObjectVersion)
}

fn range() -> impl Strategy<Value = ByteRange> {
    prop_oneof![
        (any::<u64>(), any::<u64>()).prop_map(|(first, last)| ByteRange::Span { first, last }),
        any::<u64>().prop_map(ByteRange::From),
        any::<u64>().prop_map(ByteRange::Suffix),
    ]
}

fn list_query() -> impl Strategy<Value = ListQuery> {
    (
        proptest::option::of(prop_oneof!["\\PC{0,12}", Just(".s3/".to_string())]),
        proptest::option::of(any::<u32>()),
        proptest::option::of("\\PC{0,12}"),
        proptest::option::of(0usize..100_000),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(prefix, pg, after, limit, tombstones)| ListQuery {
            prefix,
            pg,
            after,
            limit,
            tombstones,
        })
}

fn record() -> impl Strategy<Value = ChoiceRecord> {
    (1u8..=u8::MAX, any::<u64>()).prop_flat_map(|(choices, writer)| {
        (0..choices).prop_map(move |candidate| ChoiceRecord { candidate, choices, writer })
    })
}

fn write_at() -> impl Strategy<Value = WriteAt<'static>> {
    let basis = prop_oneof![
        any::<u64>().prop_map(|size_bytes| Basis::Create { size_bytes }),
        version().prop_map(|base| Basis::Change { base }),
    ];
    (
        key(),
        any::<u64>(),
        any::<u64>(),
        basis,
        proptest::option::of(version()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<u32>()),
        any::<bool>(),
    )
        .prop_map(|(key, offset, zeroes, basis, version, checksum, pg_seed, sync)| WriteAt {
            key: Cow::Owned(key),
            offset,
            zeroes,
            basis,
            version,
            checksum,
            pg_seed,
            sync,
        })
}

fn op() -> impl Strategy<Value = Op<'static>> {
    let key = || key().prop_map(Cow::Owned);
    prop_oneof![
        (key(), any::<bool>()).prop_map(|(key, want_choice)| Op::Probe { key, want_choice }),
        (key(), proptest::option::of(range())).prop_map(|(key, range)| Op::Get { key, range }),
        key().prop_map(|key| Op::Open { key }),
        key().prop_map(|key| Op::Fetch { key }),
        (
            key(),
            proptest::option::of(version()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>())
        )
            .prop_map(|(key, version, checksum, pg_seed)| Op::Put {
                key,
                version,
                checksum,
                pg_seed
            }),
        write_at().prop_map(Op::WriteAt),
        Just(Op::Sync),
        Just(Op::Trim),
        (key(), proptest::option::of(version()), any::<bool>(), proptest::option::of(any::<u32>()))
            .prop_map(|(key, version, purge, pg_seed)| Op::Delete { key, version, purge, pg_seed }),
        (key(), version()).prop_map(|(key, version)| Op::Undo { key, version }),
        (key(), version()).prop_map(|(key, version)| Op::Commit { key, version }),
        list_query().prop_map(|query| Op::List(Cow::Owned(query))),
        (key(), any::<bool>()).prop_map(|(key, wait_durable)| Op::GetRecord { key, wait_durable }),
        (key(), record(), proptest::option::of(any::<u64>()), any::<bool>(), any::<bool>())
            .prop_map(|(key, record, replace_if_writer, unless_contended, defer_sync)| {
                Op::PutRecord { key, record, replace_if_writer, unless_contended, defer_sync }
            }),
        key().prop_map(|key| Op::DeleteRecord { key }),
    ]
}

fn snap_context() -> impl Strategy<Value = crate::snap::SnapContext> {
    (any::<u64>(), version()).prop_map(|(seq, mark)| crate::snap::SnapContext { seq, mark })
}

fn request() -> impl Strategy<Value = Request<'static>> {
    (
        any::<u32>(),
        any::<u32>(),
        proptest::option::of(any::<u64>()),
        op(),
        proptest::option::of(snap_context()),
        proptest::option::of(version()),
        proptest::option::of(version()),
    )
        .prop_map(|(device, pool, epoch, op, snap, as_of, wait_newer)| {
            // A context goes on writes only, a mark on reads only, a wait on whole reads only.
            let writes =
                matches!(op, Op::Put { .. } | Op::WriteAt(_) | Op::Delete { purge: false, .. });
            let snap = snap.filter(|_| writes);
            let as_of = as_of.filter(|_| matches!(op, Op::Get { .. }));
            let wait_newer =
                wait_newer.filter(|_| as_of.is_none() && matches!(op, Op::Get { range: None, .. }));
            Request { device, pool: PoolId(pool), epoch, op, snap, as_of, wait_newer }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Every request decodes to itself, and needs what its head alone says it needs.
    #[test]
    fn every_request_round_trips(request in request()) {
        prop_assert_eq!(round_trip(&request), Ok(request.clone()));
        let headers = request.headers();
        let method = request.method();
        prop_assert_eq!(
            needed_cap_of_head(method.as_str(), &request.path(), lookup(&headers)),
            request.needed_cap()
        );
    }

    /// Decoding takes anything without panicking.
    #[test]
    fn decoding_never_panics(
        method in prop_oneof![Just("GET".to_string()), Just("PUT".to_string()), Just("DELETE".to_string()), Just("HEAD".to_string()), Just("POST".to_string()), "[A-Z]{0,7}"],
        path in prop_oneof!["/v1/dev/[0-9]{1,3}/(objects|choices)/[0-9]{1,3}(/[a-z%0-9]{0,6})?(\\?[a-z=&%0-9]{0,20})?", "\\PC{0,40}"],
        values in proptest::collection::vec("\\PC{0,12}", 24),
    ) {
        let names = [
            wire::EPOCH, wire::VERSION, wire::CHECKSUM, wire::SIZE, wire::PG, wire::WANT_CHOICE,
            wire::CHOICE, wire::DEFER_SYNC, wire::WAIT_DURABLE, wire::UNLESS_CONTENDED,
            wire::REPLACE_IF_WRITER, wire::PURGE, wire::UNDO, wire::CATCH_UP, wire::OFFSET,
            wire::BASE, wire::ZEROES, wire::SYNC, wire::OPEN, "range", wire::SNAP, wire::AS_OF,
        ];
        let present = |name: &'static str| {
            let at = names.iter().position(|n| *n == name)?;
            let value = &values[at];
            (!value.starts_with('!')).then_some(value.as_bytes())
        };
        let _ = Request::decode(&method, &path, present);
        let _ = needed_cap_of_head(&method, &path, present);
    }
}

#[test]
fn the_wire_format_is_todays() {
    let probe = Request {
        device: 4,
        pool: PoolId(2),
        epoch: Some(9),
        op: Op::Probe { key: Cow::Borrowed("a b/c"), want_choice: true },
        snap: None,
        as_of: None,
        wait_newer: None,
    };
    assert_eq!(probe.method(), Method::Head);
    assert_eq!(probe.path(), "/v1/dev/4/objects/2/a%20b%2Fc");
    assert_eq!(
        probe.headers(),
        vec![(wire::WANT_CHOICE, "1".to_string()), (wire::EPOCH, "9".to_string())]
    );
    let write = Request {
        device: 1,
        pool: PoolId(0),
        epoch: None,
        op: Op::WriteAt(WriteAt {
            key: Cow::Borrowed("v/0"),
            offset: 4096,
            zeroes: 0,
            basis: Basis::Change { base: ObjectVersion(7) },
            version: Some(ObjectVersion(8)),
            checksum: Some(10),
            pg_seed: Some(3),
            sync: true,
        }),
        snap: Some(crate::snap::SnapContext { seq: 2, mark: ObjectVersion(6) }),
        as_of: None,
        wait_newer: None,
    };
    let headers = write.headers();
    let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    assert_eq!(
        pairs,
        vec![
            (wire::VERSION, "8"),
            (wire::CHECKSUM, "0000000a"),
            (wire::OFFSET, "4096"),
            (wire::BASE, "7"),
            (wire::SYNC, "1"),
            (wire::PG, "3"),
            (wire::SNAP, "2:6"),
        ]
    );
}

#[test]
fn snapshot_headers_go_where_they_mean_something() {
    let reason = |method, path, pairs: &[(&'static str, &str)]| {
        decode(method, path, pairs).map(|r| (r.snap, r.as_of)).map_err(|e| e.reason)
    };
    let path = "/v1/dev/1/objects/2/k";
    let context = crate::snap::SnapContext { seq: 3, mark: ObjectVersion(40) };
    assert_eq!(reason("PUT", path, &[(wire::SNAP, "3:40")]), Ok((Some(context), None)));
    assert_eq!(reason("DELETE", path, &[(wire::SNAP, "3:40")]), Ok((Some(context), None)));
    assert_eq!(reason("GET", path, &[(wire::AS_OF, "40")]), Ok((None, Some(ObjectVersion(40)))));
    assert_eq!(
        reason("PUT", path, &[(wire::SNAP, "3")]),
        Err("x-optio-snap must be SEQ:MARK, two integers".into())
    );
    assert_eq!(
        reason("GET", path, &[(wire::SNAP, "3:40")]),
        Err("x-optio-snap goes on writes and deletes of objects only".into())
    );
    assert_eq!(
        reason("DELETE", path, &[(wire::SNAP, "3:40"), (wire::PURGE, "1")]),
        Err("x-optio-snap goes on writes and deletes of objects only".into())
    );
    assert_eq!(
        reason("PUT", path, &[(wire::AS_OF, "40")]),
        Err("x-optio-as-of goes on reads of objects only".into())
    );
    assert_eq!(
        reason("GET", path, &[(wire::AS_OF, "40"), (wire::CATCH_UP, "1")]),
        Err("x-optio-as-of goes on reads of objects only".into())
    );
}

#[test]
fn a_wait_for_a_newer_version_goes_on_whole_reads_only() {
    let wait = |method, pairs: &[(&'static str, &str)]| {
        decode(method, "/v1/dev/1/objects/2/k", pairs).map(|r| r.wait_newer).map_err(|e| e.reason)
    };
    assert_eq!(wait("GET", &[(wire::WAIT_NEWER, "17")]), Ok(Some(ObjectVersion(17))));
    assert_eq!(wait("GET", &[]), Ok(None));
    let refused = Err(
        "x-optio-wait-newer applies to whole reads (GET without a range, not as of a snapshot) only"
            .to_string(),
    );
    assert_eq!(wait("GET", &[(wire::WAIT_NEWER, "17"), ("range", "bytes=0-9")]), refused);
    assert_eq!(wait("GET", &[(wire::WAIT_NEWER, "17"), (wire::AS_OF, "5")]), refused);
    assert_eq!(wait("HEAD", &[(wire::WAIT_NEWER, "17")]), refused);
    assert_eq!(wait("PUT", &[(wire::WAIT_NEWER, "17")]), refused);
    assert!(wait("GET", &[(wire::WAIT_NEWER, "soon")]).is_err());
}

#[test]
fn malformed_requests_say_why() {
    let reason = |method, path, pairs: &[(&'static str, &str)]| {
        decode(method, path, pairs).map(|_| ()).map_err(|e| (e.kind, e.reason))
    };
    let bad = |reason: &str| Err((ErrorKind::BadRequest, reason.to_string()));
    let path = "/v1/dev/1/objects/2/k";
    assert_eq!(
        reason("PUT", path, &[(wire::VERSION, "x")]),
        bad("x-optio-version is not an integer")
    );
    assert_eq!(
        reason("PUT", path, &[(wire::PG, "4294967296")]),
        bad("x-optio-pg is not a 32-bit seed")
    );
    assert_eq!(
        reason("PUT", path, &[(wire::CHECKSUM, "zz")]),
        bad("x-optio-checksum is not 8 hex digits")
    );
    assert_eq!(reason("GET", path, &[(wire::EPOCH, "-1")]), bad("x-optio-epoch is not an integer"));
    assert_eq!(
        reason("DELETE", path, &[(wire::PURGE, "yes")]),
        bad("x-optio-purge takes the value 1 only")
    );
    assert_eq!(
        reason("DELETE", path, &[(wire::PURGE, "1"), (wire::UNDO, "1")]),
        bad("x-optio-purge and x-optio-undo do not go together")
    );
    assert_eq!(
        reason("DELETE", path, &[(wire::UNDO, "1")]),
        bad("x-optio-undo needs the version written (x-optio-version)")
    );
    assert_eq!(reason("POST", path, &[]), bad("method POST is not allowed here"));
    assert_eq!(
        reason("PUT", "/v1/dev/1/objects/2", &[]),
        bad("the key is empty; keys are 1 to 1024 bytes of UTF-8")
    );
    assert_eq!(
        reason("PUT", "/v1/dev/1/choices/2/k", &[(wire::CHOICE, "2/2/a")]),
        bad("candidate 2 is not below choices 2")
    );
    assert_eq!(
        reason("GET", "/v1/dev/1/objects/2/k", &[(wire::CATCH_UP, "1"), ("range", "bytes=0-1")]),
        bad("x-optio-catch-up goes on a GET of a whole object only")
    );
    assert!(reason("GET", "/v1/dev/1/objects/2?limit=x", &[]).is_err());
    assert_eq!(reason("GET", "/v2/x", &[]).unwrap_err().0, ErrorKind::NotFound);
    // A malformed request is still counted as what it tried to be.
    let error = decode("PUT", path, &[(wire::VERSION, "x")]).unwrap_err();
    assert_eq!(error.kind_of_op, Some(OpKind::Put));
}

#[test]
fn malformed_heads_are_their_kind() {
    let headers = |pairs: &'static [(&'static str, &'static str)]| Headers {
        header: move |name: &'static str| {
            pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_bytes())
        },
    };
    assert_eq!(
        headers(&[(wire::EPOCH, "-1")]).u64(wire::EPOCH),
        Err(BadHead::NotInteger { header: wire::EPOCH })
    );
    assert_eq!(headers(&[(wire::PG, "4294967296")]).pg_seed(), Err(BadHead::SeedTooLarge));
    assert_eq!(
        headers(&[(wire::PURGE, "yes")]).flag(wire::PURGE),
        Err(BadHead::FlagNotOne { header: wire::PURGE })
    );
    let delete = decode_delete(Cow::Borrowed("k"), &headers(&[(wire::UNDO, "1")]));
    assert_eq!(delete, Err(BadHead::UndoWithoutVersion));
    assert_eq!(
        kind_of(Area::Objects, true, "POST", false, false),
        Err(BadHead::MethodNotAllowed { method: "POST".into() })
    );
    assert!(matches!(parse_list_query("limit=x"), Err(BadHead::BadListQuery { .. })));
}

#[test]
fn capabilities_are_todays_rules() {
    let need = |method, path, pairs: &[(&'static str, &str)]| match decode(method, path, pairs) {
        Ok(request) => request.needed_cap(),
        Err(error) => error.needed,
    };
    let path = "/v1/dev/1/objects/2/k";
    assert_eq!(need("GET", path, &[]), Cap::Read);
    assert_eq!(need("HEAD", path, &[]), Cap::Read);
    assert_eq!(need("PUT", path, &[]), Cap::Write);
    assert_eq!(need("DELETE", path, &[]), Cap::Write);
    assert_eq!(need("DELETE", path, &[(wire::UNDO, "1"), (wire::VERSION, "1")]), Cap::Write);
    assert_eq!(need("DELETE", path, &[(wire::PURGE, "1")]), Cap::Admin);
    // A malformed purge needs what a purge needs before it is refused.
    assert_eq!(need("DELETE", path, &[(wire::PURGE, "yes")]), Cap::Admin);
    assert_eq!(need("GET", path, &[(wire::CATCH_UP, "1")]), Cap::Server);
    assert_eq!(need("HEAD", path, &[(wire::CATCH_UP, "1")]), Cap::Server);
    assert_eq!(need("GET", "/v1/dev/1/objects/2/.s3/u", &[]), Cap::Gateway);
    assert_eq!(need("DELETE", "/v1/dev/1/objects/2/.s3/u", &[(wire::PURGE, "1")]), Cap::Admin);
    assert_eq!(need("GET", "/v1/dev/1/objects/2?prefix=.s3%2F", &[]), Cap::Gateway);
    assert_eq!(need("GET", "/v1/dev/1/objects/2?prefix=.s3%2F&limit=x", &[]), Cap::Read);
    assert_eq!(need("PUT", "/v1/dev/1/choices/2/.s3/b", &[]), Cap::Gateway);
    assert_eq!(need("POST", "/v1/dev/1/objects/2", &[]), Cap::Write);
    assert_eq!(need("GET", "/elsewhere", &[]), Cap::Read);
}

#[test]
fn ranges_resolve_as_before() {
    let resolve = |text: &str, size| ByteRange::parse(text).and_then(|r| r.resolve(size));
    assert_eq!(resolve("bytes=0-9", 100), Some((0, 9)));
    assert_eq!(resolve("bytes=90-", 100), Some((90, 99)));
    assert_eq!(resolve("bytes=-10", 100), Some((90, 99)));
    assert_eq!(resolve("bytes=50-500", 100), Some((50, 99)));
    assert_eq!(resolve("bytes=100-", 100), None);
    assert_eq!(resolve("bytes=9-0", 100), None);
    assert_eq!(resolve("items=0-1", 100), None);
    assert_eq!(resolve("bytes=0-0", 0), None);
    assert_eq!(resolve(" bytes= 1 - 2 ", 100), Some((1, 2)));
}

#[test]
fn health_keeps_its_field_order() {
    let health = crate::ServerHealth {
        status: "ok".into(),
        recovering: 1,
        fenced: false,
        keyring: Some("ab12".into()),
        epoch: 7,
    };
    let text = serde_json::to_string(&health).expect("serializes");
    assert_eq!(text, r#"{"status":"ok","recovering":1,"fenced":false,"keyring":"ab12","epoch":7}"#);
    assert_eq!(serde_json::from_str::<crate::ServerHealth>(&text).ok(), Some(health));
}
