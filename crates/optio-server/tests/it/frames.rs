//! Connections upgraded to frames: many requests in flight on one connection, each answered
//! through the same router (authentication included) as over HTTP/1.1; a client that breaks
//! the protocol is disconnected, and the server goes on serving.

use std::collections::HashMap;
use std::time::Duration;

use optio_proto::frames::{self, PREFIX_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{Options, TestServer};

const BOUND: Duration = Duration::from_secs(5);

/// Opens a connection and upgrades it; panics if the server does not switch.
async fn upgraded(server: &TestServer) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let request = format!(
        "GET {} HTTP/1.1\r\nhost: t\r\nconnection: upgrade\r\nupgrade: {}\r\n\r\n",
        frames::UPGRADE_PATH,
        frames::PROTOCOL
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(BOUND, stream.read(&mut byte)).await.unwrap().unwrap();
        assert_eq!(n, 1, "closed during the upgrade: {}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains(&format!("upgrade: {}", frames::PROTOCOL)), "{head}");
    stream
}

fn request(id: u64, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    frames::encode_request(&mut frame, id, method, path, headers.iter().copied(), body.len())
        .unwrap();
    frame.extend_from_slice(body);
    frame
}

struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// Reads one answer frame (`None`: the server closed the connection).
async fn answer(stream: &mut TcpStream) -> Option<(u64, Answer)> {
    tokio::time::timeout(BOUND, async {
        let mut prefix = [0u8; PREFIX_BYTES];
        stream.read_exact(&mut prefix).await.ok()?;
        let (head_len, body_len) = frames::decode_prefix(prefix).expect("a valid prefix");
        let mut head = vec![0u8; head_len];
        stream.read_exact(&mut head).await.expect("the head");
        let mut body = vec![0u8; body_len];
        stream.read_exact(&mut body).await.expect("the body");
        let head = frames::decode_answer(&head).expect("a valid head");
        let headers = head.headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        Some((head.id, Answer { status: head.status, headers, body }))
    })
    .await
    .expect("an answer, or the end, within the bound")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_on_one_connection_are_each_answered() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let mut stream = upgraded(&server).await;
    let path = |key: &str| format!("/v1/dev/0/objects/1/{key}");
    // Sixteen writes sent back to back before any answer is read.
    let mut frames = Vec::new();
    for n in 0..16u64 {
        let body = format!("object {n}");
        let version = (n + 1).to_string();
        frames.extend(request(
            n,
            "PUT",
            &path(&format!("k{n}")),
            &[("x-optio-version", &version)],
            body.as_bytes(),
        ));
    }
    stream.write_all(&frames).await.unwrap();
    let mut answered = HashMap::new();
    for _ in 0..16 {
        let (id, answer) = answer(&mut stream).await.expect("an answer");
        assert_eq!(answer.status, 201, "{}", String::from_utf8_lossy(&answer.body));
        assert!(answered.insert(id, ()).is_none(), "request {id} answered twice");
    }
    assert_eq!(answered.len(), 16);
    // Ranged reads, probes and a miss, in flight together; each answer is its own request's.
    let mut frames = Vec::new();
    for n in 0..16u64 {
        frames.extend(request(
            100 + n,
            "GET",
            &path(&format!("k{n}")),
            &[("range", "bytes=7-")],
            b"",
        ));
        frames.extend(request(200 + n, "HEAD", &path(&format!("k{n}")), &[], b""));
    }
    frames.extend(request(300, "GET", &path("absent"), &[], b""));
    stream.write_all(&frames).await.unwrap();
    for _ in 0..33 {
        let (id, answer) = answer(&mut stream).await.expect("an answer");
        match id {
            100..=115 => {
                assert_eq!(answer.status, 206);
                assert_eq!(answer.body, (id - 100).to_string().as_bytes());
            }
            200..=215 => {
                assert_eq!(answer.status, 200);
                assert_eq!(answer.headers["x-optio-version"], (id - 200 + 1).to_string());
                assert!(answer.headers.contains_key("x-optio-metrics"));
                assert!(answer.body.is_empty());
            }
            300 => {
                assert_eq!(answer.status, 404);
                assert_eq!(answer.headers["x-optio-error"], "not-found");
            }
            other => panic!("an answer to no request: {other}"),
        }
    }
    // What came over frames is what HTTP/1.1 reads.
    let over_http = server.http.get(server.object(0, 1, "k3")).send().await.unwrap();
    assert_eq!(over_http.bytes().await.unwrap(), "object 3");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framed_requests_are_authenticated_like_any_other() {
    use optio_proto::auth::{Cap, Credentials, Entity, Key, Keyring};
    let dir = tempfile::tempdir().unwrap();
    let key = Key::generate().unwrap();
    let mut keyring = Keyring::new();
    keyring.insert(Entity {
        name: "client.r".into(),
        key: key.clone(),
        cap: Cap::Read,
        previous: None,
    });
    let path = dir.path().join("keyring");
    optio_cluster::keyring::save(&keyring, &path).unwrap();
    let server =
        TestServer::start(dir.path(), Options { keyring: Some(path), ..Options::default() }).await;
    let mut stream = upgraded(&server).await;
    let object = "/v1/dev/0/objects/1/k";
    // Unsigned: refused.
    stream.write_all(&request(1, "PUT", object, &[("x-optio-version", "5")], b"x")).await.unwrap();
    let (_, refused) = answer(&mut stream).await.unwrap();
    assert_eq!((refused.status, refused.headers["x-optio-error"].as_str()), (401, "unauthorized"));
    // Signed by an entity that may only read: forbidden.
    let credentials = Credentials { id: "client.r".into(), key };
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as u64;
    let target = server.addr.to_string();
    let aimed = [(optio_proto::wire::TARGET, target.as_str())];
    let signed = credentials.sign("DELETE", object, &aimed, now_ms);
    let headers = [aimed[0], (optio_proto::auth::AUTH_HEADER, signed.as_str())];
    stream.write_all(&request(2, "DELETE", object, &headers, b"")).await.unwrap();
    let (id, forbidden) = answer(&mut stream).await.unwrap();
    assert_eq!((id, forbidden.status), (2, 403));
    // A signed read is served (the object is absent).
    let signed = credentials.sign("HEAD", object, &aimed, now_ms + 1);
    let headers = [aimed[0], (optio_proto::auth::AUTH_HEADER, signed.as_str())];
    stream.write_all(&request(3, "HEAD", object, &headers, b"")).await.unwrap();
    let (id, absent) = answer(&mut stream).await.unwrap();
    assert_eq!((id, absent.status), (3, 404));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_breaks_the_protocol_is_disconnected_and_others_are_served() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let garbage: Vec<Vec<u8>> = vec![
        // A head over the limit, announced.
        [(frames::HEAD_BYTES_MAX as u32 + 1).to_be_bytes(), 0u32.to_be_bytes()].concat(),
        // A body over the limit, announced.
        [16u32.to_be_bytes(), u32::MAX.to_be_bytes()].concat(),
        // A head that does not parse.
        [[0, 0, 0, 3].as_slice(), &[0, 0, 0, 0], b"abc"].concat(),
        // A path that is not one.
        request(1, "GET", "no-slash", &[], b""),
    ];
    for bytes in garbage {
        let mut stream = upgraded(&server).await;
        stream.write_all(&bytes).await.unwrap();
        assert!(answer(&mut stream).await.is_none(), "closed without an answer: {bytes:?}");
    }
    // A method the router does not know gets an error answer, and the connection goes on.
    let mut stream = upgraded(&server).await;
    stream.write_all(&request(7, "BREW", "/v1/dev/0/objects/1/k", &[], b"")).await.unwrap();
    let (id, odd) = answer(&mut stream).await.unwrap();
    assert_eq!(id, 7);
    assert!(odd.status >= 400, "{}", odd.status);
    stream.write_all(&request(8, "HEAD", "/v1/dev/0/objects/1/k", &[], b"")).await.unwrap();
    assert_eq!(answer(&mut stream).await.unwrap().1.status, 404);
    let health = server.http.get(server.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_frames_connection_is_closed_after_the_idle_timeout() {
    let root = tempfile::tempdir().expect("temp dir");
    let options = Options { idle_timeout: Duration::from_millis(300), ..Options::default() };
    let server = TestServer::start(root.path(), options).await;
    let mut stream = upgraded(&server).await;
    stream.write_all(&request(1, "HEAD", "/v1/dev/0/objects/1/k", &[], b"")).await.unwrap();
    assert_eq!(answer(&mut stream).await.unwrap().1.status, 404);
    let started = std::time::Instant::now();
    assert!(answer(&mut stream).await.is_none(), "closed when idle");
    assert!(started.elapsed() >= Duration::from_millis(250), "{:?}", started.elapsed());
    server.stop().await;
}
