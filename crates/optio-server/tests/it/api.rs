//! The HTTP API: round trips, ranges, listings, probes with metrics, and a 400/404/413/421
//! with a reason for every malformed request.

use crate::{Options, TestServer, error_of, listed_keys};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_with_probes_ranges_and_listings() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let http = &server.http;
    let key = "dir/é 1%?#";
    let url = server.object(0, 1, key);
    let probe = http.head(&url).send().await.expect("probe");
    assert_eq!(probe.status(), 404);
    let metrics =
        probe.headers().get("x-optio-metrics").expect("metrics on a probe").to_str().unwrap();
    let metrics = optio_proto::DeviceMetrics::from_header(metrics).expect("parses");
    assert_eq!((metrics.device, metrics.used_bytes, metrics.capacity_bytes), (0, 0, 1 << 30));

    let put = http
        .put(&url)
        .header("x-optio-version", "5")
        .header("x-optio-pg", "17")
        .body("hello, world")
        .send()
        .await
        .expect("put");
    assert_eq!(put.status(), 201);
    let probe = http.head(&url).send().await.expect("probe");
    assert_eq!(probe.status(), 200);
    assert_eq!(probe.headers()["x-optio-size"], "12");
    assert_eq!(probe.headers()["x-optio-version"], "5");
    assert_eq!(probe.headers()["x-optio-pg"], "17");
    let used = optio_proto::DeviceMetrics::from_header(
        probe.headers()["x-optio-metrics"].to_str().unwrap(),
    )
    .unwrap()
    .used_bytes;
    assert!(used > 12, "space is accounted: {used}");

    let get = http.get(&url).send().await.expect("get");
    assert_eq!(get.status(), 200);
    assert_eq!(get.bytes().await.unwrap(), "hello, world");
    let range = http.get(&url).header("range", "bytes=7-").send().await.expect("range");
    assert_eq!(range.status(), 206);
    assert_eq!(range.headers()["content-range"], "bytes 7-11/12");
    assert_eq!(range.bytes().await.unwrap(), "world");
    let (status, kind, _) =
        error_of(http.get(&url).header("range", "bytes=20-30").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (400, "bad-request"));

    // An older version is refused; the same one again is a no-op.
    let (status, kind, _) =
        error_of(http.put(&url).header("x-optio-version", "4").body("old").send().await.unwrap())
            .await;
    assert_eq!((status, kind.as_str()), (412, "version-conflict"));
    let again = http
        .put(&url)
        .header("x-optio-version", "5")
        .header("x-optio-pg", "17")
        .body("hello, world")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);

    for i in 0..5 {
        let pg = if i % 2 == 0 { "1" } else { "2" };
        let put = http
            .put(server.object(0, 1, &format!("list/{i}")))
            .header("x-optio-pg", pg)
            .body(vec![b'x'; i])
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 201);
    }
    let keys = listed_keys(&server, "/v1/dev/0/objects/1?prefix=list/").await;
    assert_eq!(keys, ["list/0", "list/1", "list/2", "list/3", "list/4"]);
    let by_pg: serde_json::Value = http
        .get(server.url("/v1/dev/0/objects/1?prefix=list/&pg=2"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(by_pg["objects"].as_array().unwrap().len(), 2);
    let page: serde_json::Value = http
        .get(server.url("/v1/dev/0/objects/1?prefix=list/&limit=2&after=list/1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["objects"].as_array().unwrap().len(), 2);
    assert_eq!(page["truncated"], true);

    assert_eq!(http.delete(&url).send().await.unwrap().status(), 204);
    assert_eq!(http.get(&url).send().await.unwrap().status(), 404);
    assert_eq!(http.delete(&url).send().await.unwrap().status(), 404);

    let prometheus = http.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(prometheus.contains("optio_device_objects{device=\"0\"} 5"), "{prometheus}");
    assert!(
        prometheus.contains("optio_requests_total{device=\"0\",op=\"probe\",result=\"ok\"}"),
        "{prometheus}"
    );
    assert!(
        prometheus.contains("optio_requests_total{device=\"0\",op=\"get\",result=\"not-found\"} "),
        "{prometheus}"
    );
    assert!(
        prometheus.contains("optio_request_duration_seconds_bucket{device=\"0\",op=\"probe\","),
        "{prometheus}"
    );
    assert!(
        prometheus
            .contains(&format!("optio_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"))),
        "{prometheus}"
    );
    let health: serde_json::Value =
        http.get(server.url("/health")).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "ok");
    server.stop().await;
}

/// The request metrics are per device: requests to one of a server's devices count under its
/// `device` label only, the other devices' series staying at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_metrics_count_each_device_apart() {
    let root = tempfile::tempdir().expect("temp dir");
    let options = Options { devices: vec![(0, 1 << 30), (3, 1 << 30)], ..Options::default() };
    let server = TestServer::start(root.path(), options).await;
    let http = &server.http;
    let scrape = || async {
        let text = http.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
        move |series: &str| -> f64 {
            let line = text.lines().find(|l| l.rsplit_once(' ').is_some_and(|(s, _)| s == series));
            line.map_or(0.0, |l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        }
    };
    let before = scrape().await;
    for i in 0..3 {
        let put = http.put(server.object(3, 1, &format!("k{i}"))).header("x-optio-pg", "1");
        assert_eq!(put.body("hello").send().await.unwrap().status(), 201);
    }
    let get = http.get(server.object(3, 1, "k0")).send().await.unwrap();
    assert_eq!(get.bytes().await.unwrap(), "hello");
    assert_eq!(http.get(server.object(3, 1, "absent")).send().await.unwrap().status(), 404);
    let after = scrape().await;
    let grew = |series: String| after(&series) - before(&series);
    for (device, put, get, missing, received, sent, timed) in
        [("3", 3.0, 1.0, 1.0, 15.0, 5.0, 3.0), ("0", 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)]
    {
        let d = format!("device=\"{device}\"");
        assert_eq!(grew(format!("optio_requests_total{{{d},op=\"put\",result=\"ok\"}}")), put);
        assert_eq!(grew(format!("optio_requests_total{{{d},op=\"get\",result=\"ok\"}}")), get);
        let not_found = format!("optio_requests_total{{{d},op=\"get\",result=\"not-found\"}}");
        assert_eq!(grew(not_found), missing);
        assert_eq!(grew(format!("optio_request_body_bytes_total{{{d},op=\"put\"}}")), received);
        assert_eq!(grew(format!("optio_answer_body_bytes_total{{{d},op=\"get\"}}")), sent);
        let timed_puts = format!("optio_request_duration_seconds_count{{{d},op=\"put\"}}");
        assert_eq!(grew(timed_puts), timed, "device {device}");
    }
    // Both devices' series show from the start; nothing was misdirected.
    let text = http.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("optio_requests_total{device=\"0\",op=\"put\",result=\"ok\"} 0"));
    assert!(!text.contains("device=\"none\""), "{text}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_a_reason_never_a_panic() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let http = &server.http;
    let long = "k".repeat(1025);
    let cases: Vec<(reqwest::RequestBuilder, u16, &str, &str)> = vec![
        (http.put(server.url("/v1/dev/0/objects/1/")).body("x"), 400, "bad-request", "empty"),
        (http.put(server.url("/v1/dev/0/objects/1/a%00b")).body("x"), 400, "bad-request", "NUL"),
        (http.put(server.url("/v1/dev/0/objects/1/a%FFb")).body("x"), 400, "bad-request", "UTF-8"),
        (http.put(server.url("/v1/dev/0/objects/1/a%F")).body("x"), 400, "bad-request", "escape"),
        (
            http.put(server.url(&format!("/v1/dev/0/objects/1/{long}"))).body("x"),
            400,
            "bad-request",
            "1025 bytes",
        ),
        (http.put(server.url("/v1/dev/x/objects/1/k")).body("x"), 400, "bad-request", "device"),
        (http.put(server.url("/v1/dev/0/objects/pool/k")).body("x"), 400, "bad-request", "pool"),
        (
            http.put(server.url("/v1/dev/0/things/1/k")).body("x"),
            404,
            "not-found",
            "objects or choices",
        ),
        (http.put(server.url("/v1/dev/9/objects/1/k")).body("x"), 421, "misdirected", "not served"),
        // A large body refused before it is read is read and dropped: the client gets the
        // answer, not a broken pipe.
        (
            http.put(server.url("/v1/dev/9/objects/1/k")).body(vec![0u8; 4 << 20]),
            421,
            "misdirected",
            "not served",
        ),
        (
            http.put(server.object(0, 1, "k"))
                .header("x-optio-version", "soon")
                .body(vec![0u8; 512 << 10]),
            400,
            "bad-request",
            "integer",
        ),
        (
            http.put(server.object(0, 1, "k")).header("x-optio-version", "soon").body("x"),
            400,
            "bad-request",
            "integer",
        ),
        (
            http.put(server.object(0, 1, "k")).header("x-optio-checksum", "zz").body("x"),
            400,
            "bad-request",
            "hex",
        ),
        (
            http.put(server.object(0, 1, "k")).header("x-optio-checksum", "00000000").body("x"),
            400,
            "bad-request",
            "checksum",
        ),
        (
            http.put(server.object(0, 1, "k")).body(vec![0u8; (1 << 20) + 1]),
            413,
            "too-large",
            "at most",
        ),
        (http.post(server.object(0, 1, "k")).body("x"), 400, "bad-request", "not allowed"),
        (
            http.put(server.record(0, 1, "k")).header("x-optio-choice", "3/2/ab"),
            400,
            "bad-request",
            "below",
        ),
        (
            http.put(server.record(0, 1, "k")).header("x-optio-choice", "nonsense"),
            400,
            "bad-request",
            "CANDIDATE",
        ),
        (http.get(server.url("/v2/anything")), 404, "not-found", "no route"),
        // A seed above 32 bits was truncated before it was stored (issue 37): now refused.
        (
            http.put(server.object(0, 1, "k")).header("x-optio-pg", "4294967296").body("x"),
            400,
            "bad-request",
            "32-bit seed",
        ),
        (
            http.get(server.object(0, 1, "k")).header("range", "bytes=a-b"),
            400,
            "bad-request",
            "malformed",
        ),
        (
            http.delete(server.object(0, 1, "k")).header("x-optio-purge", "yes"),
            400,
            "bad-request",
            "value 1 only",
        ),
        (
            http.get(server.object(0, 1, "k")).header("x-optio-epoch", "latest"),
            400,
            "bad-request",
            "x-optio-epoch is not an integer",
        ),
    ];
    for (request, status, kind, reason) in cases {
        let (got_status, got_kind, got_reason) =
            error_of(request.send().await.expect("an answer")).await;
        assert_eq!((got_status, got_kind.as_str()), (status, kind), "{got_reason}");
        assert!(got_reason.contains(reason), "'{got_reason}' should mention '{reason}'");
    }
    // Nothing half-written is visible, and the server still serves.
    let listing: serde_json::Value =
        http.get(server.url("/v1/dev/0/objects/1")).send().await.unwrap().json().await.unwrap();
    assert_eq!(listing["objects"].as_array().unwrap().len(), 0);
    // A malformed request is counted as what it tried to be, under the device its path
    // names; one without a route as invalid, and one to a device not served here under none.
    let prometheus = http.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for counted in [
        "optio_requests_total{device=\"0\",op=\"put\",result=\"bad-request\"} ",
        "optio_requests_total{device=\"0\",op=\"record_put\",result=\"bad-request\"} ",
        "optio_requests_total{device=\"none\",op=\"invalid\",result=\"not-found\"} ",
        "optio_requests_total{device=\"none\",op=\"put\",result=\"misdirected\"} 2\n",
    ] {
        assert!(prometheus.contains(counted), "{counted} in:\n{prometheus}");
    }
    server.stop().await;
}

fn now_micros() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64
}

/// Issue 13, defect 4 (the bound): a version from the far future would win over every later
/// write (for ever at u64::MAX); the server takes none more than 10 s ahead of its clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_from_the_far_future_are_refused() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let url = server.object(0, 1, "k");
    for ahead in [now_micros() + 60_000_000, u64::MAX] {
        let put = server.http.put(&url).header("x-optio-version", ahead.to_string()).body("x");
        let (status, kind, reason) = error_of(put.send().await.unwrap()).await;
        assert_eq!((status, kind.as_str()), (400, "bad-request"), "{reason}");
        assert!(reason.contains("ahead of this server's clock"), "{reason}");
        let delete = server.http.delete(&url).header("x-optio-version", ahead.to_string());
        let (status, _, reason) = error_of(delete.send().await.unwrap()).await;
        assert_eq!(status, 400, "{reason}");
    }
    assert_eq!(server.http.head(&url).send().await.unwrap().status(), 404, "nothing stored");
    let near = (now_micros() + 1_000_000).to_string();
    let put = server.http.put(&url).header("x-optio-version", near).body("x");
    assert_eq!(put.send().await.unwrap().status(), 201, "a second of skew is taken");
    assert_eq!(server.http.get(&url).send().await.unwrap().text().await.unwrap(), "x");
    server.stop().await;
}

/// Issue 13, defect 7: a body that breaks off before its Content-Length is a bad request, not
/// "too large".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_body_is_not_called_too_large() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let request = format!(
        "PUT /v1/dev/0/objects/1/cut HTTP/1.1\r\nhost: {}\r\ncontent-length: 1000\r\n\r\nonly part",
        server.addr
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.shutdown().await.unwrap(); // the writer goes away mid-body
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "a bad request, not 'too large': {answer}");
    let head = server.http.head(server.object(0, 1, "cut")).send().await.unwrap();
    assert_eq!(head.status(), 404, "nothing stored");
    server.stop().await;
}

/// Issue 13, defect 7: a put just above the size limit (65 MiB against the default 64 MiB) is
/// answered "too large" every time — the body is read and dropped before the answer, so the
/// writer reads the answer instead of a reset connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_just_above_the_limit_is_too_large_every_time() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let body = bytes::Bytes::from(vec![7u8; 65 << 20]);
    for attempt in 0..3 {
        let url = server.object(0, 1, &format!("big{attempt}"));
        let answer = server.http.put(&url).body(body.clone()).send().await;
        let response = answer.unwrap_or_else(|e| panic!("attempt {attempt}: no answer: {e}"));
        let (status, kind, reason) = error_of(response).await;
        assert_eq!((status, kind.as_str()), (413, "too-large"), "{reason}");
    }
    server.stop().await;
}

/// With a keyring, an unsigned write (or delete, or record) is refused with 401 before it has
/// any effect; a signed one is served.
#[tokio::test]
async fn unsigned_requests_are_refused_and_store_nothing() {
    use optio_proto::auth::{
        AUTH_HEADER, CONTENT_HASH_HEADER, Cap, Credentials, Entity, Key, Keyring, content_hash,
    };
    let dir = tempfile::tempdir().unwrap();
    let key = Key::generate().unwrap();
    let mut keyring = Keyring::new();
    keyring.insert(Entity {
        name: "client.t".into(),
        key: key.clone(),
        cap: Cap::Write,
        previous: None,
    });
    let path = dir.path().join("keyring");
    optio_cluster::keyring::save(&keyring, &path).unwrap();
    let server =
        TestServer::start(dir.path(), Options { keyring: Some(path), ..Options::default() }).await;
    let url = server.object(0, 1, "k");
    for request in [
        server.http.put(&url).header("x-optio-version", "5").body("unsigned"),
        server.http.delete(&url),
        server.http.put(server.record(0, 1, "k")).header("x-optio-choice", "0/2/1"),
        server.http.get(&url),
    ] {
        let (status, kind, reason) = error_of(request.send().await.unwrap()).await;
        assert_eq!((status, kind.as_str()), (401, "unauthorized"), "{reason}");
        assert!(reason.contains("not signed"), "{reason}");
    }
    fn files(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir).map_or(0, |entries| {
            entries.flatten().map(|e| if e.path().is_dir() { files(&e.path()) } else { 1 }).sum()
        })
    }
    assert_eq!(files(&server.dirs[0].join("objects")), 0, "nothing stored");
    // Signed, it is served.
    let credentials = Credentials { id: "client.t".into(), key };
    let body = b"signed";
    let path = "/v1/dev/0/objects/1/k";
    let headers = [
        ("x-optio-version", "5".to_string()),
        (CONTENT_HASH_HEADER, content_hash(body)),
        (optio_proto::wire::TARGET, server.addr.to_string()),
    ];
    let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as u64;
    let mut request = server.http.put(&url).body(&body[..]);
    for (name, value) in &headers {
        request = request.header(*name, value);
    }
    let request = request.header(AUTH_HEADER, credentials.sign("PUT", path, &pairs, now));
    assert_eq!(request.send().await.unwrap().status(), 201);
    server.stop().await;
}
