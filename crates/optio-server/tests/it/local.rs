//! The local socket (local reads): a client on this machine gets an open descriptor of a block
//! object's file, through the same router as any request; nothing else is taken there, the
//! open is refused anywhere else, a client that breaks the protocol is disconnected, and a
//! socket file a dead server left is taken over while anything else at the path is refused.

use std::os::unix::fs::FileExt;
use std::path::Path;

use optio_net::{Call, Endpoint, Failure, HttpTransport, Op, Transport};
use optio_placement::PoolId;
use optio_proto::{ErrorKind, ObjectHeader, ObjectVersion};
use tokio::io::AsyncWriteExt;

use crate::{Options, TestServer, error_of};

const KEY: &str = "volume_data.0123456789abcdef.0000000000000000";

async fn start(root: &Path) -> (TestServer, std::path::PathBuf) {
    let socket = root.join("local.sock");
    let options = Options { local_socket: Some(socket.clone()), ..Options::default() };
    (TestServer::start(root, options).await, socket)
}

/// Writes 4 KiB of `fill` at `offset` of the 16 KiB block object `key` (created by the
/// first write), at `version` based on `base`.
async fn write_at(server: &TestServer, key: &str, offset: u64, fill: u8, version: u64, base: u64) {
    let mut request = server
        .http
        .put(server.object(0, 1, key))
        .header("x-optio-offset", offset.to_string())
        .header("x-optio-version", version.to_string())
        .body(vec![fill; 4096]);
    request = match base {
        0 => request.header("x-optio-size", "16384"),
        base => request.header("x-optio-base", base.to_string()),
    };
    let response = request.send().await.unwrap();
    assert!(response.status().is_success(), "{:?}", response.text().await);
}

async fn open(
    transport: &HttpTransport,
    socket: &Path,
    key: &str,
) -> Result<(optio_net::Answer, std::fs::File), Failure> {
    let endpoint = Endpoint { device: 0, addr: "127.0.0.1:1".into() };
    transport.open_local(Call::new(&endpoint, PoolId(1), 0, Op::Open { key }), socket).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_objects_file_is_opened_for_a_local_reader_and_follows_writes_in_place() {
    let root = tempfile::tempdir().unwrap();
    let (server, socket) = start(root.path()).await;
    write_at(&server, KEY, 4096, 7, 5, 0).await;
    let transport = HttpTransport::new().unwrap();
    let (answer, file) = open(&transport, &socket, KEY).await.expect("opened");
    let info = answer.info.expect("the object's headers");
    assert_eq!((info.version, info.size_bytes), (ObjectVersion(5), 16384));
    let header_of = |file: &std::fs::File| {
        let mut head = vec![0u8; 4096];
        file.read_exact_at(&mut head, 0).unwrap();
        let (header, key, _) = ObjectHeader::decode_prefix(&head).unwrap();
        assert_eq!(key, KEY);
        header.version
    };
    assert_eq!(header_of(&file), ObjectVersion(5));
    // A write in place changes the same file: the descriptor sees the new version.
    write_at(&server, KEY, 0, 9, 6, 5).await;
    assert_eq!(header_of(&file), ObjectVersion(6));
    // The descriptor is read-only.
    assert!(file.write_all_at(b"x", 0).is_err(), "a local reader cannot write");

    // The status says where the socket is, with this machine's boot id.
    let status: serde_json::Value =
        server.http.get(server.url("/v1/status")).send().await.unwrap().json().await.unwrap();
    assert_eq!(status["local"]["path"], socket.display().to_string());
    assert_eq!(status["local"]["boot_id"], optio_net::local::boot_id().unwrap());

    // A missing object, an object written whole: refused, with their kinds.
    let missing = open(&transport, &socket, "nothing-here").await.unwrap_err();
    assert_eq!(missing.kind(), Some(ErrorKind::NotFound), "{missing}");
    let whole = server.http.put(server.object(0, 1, "whole")).body("abc").send().await.unwrap();
    assert!(whole.status().is_success());
    let refused = open(&transport, &socket, "whole").await.unwrap_err();
    assert_eq!(refused.kind(), Some(ErrorKind::BadRequest), "{refused}");
    assert!(refused.to_string().contains("block objects only"), "{refused}");
    server.stop().await;
    assert!(!socket.exists(), "a server that stops removes its socket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_are_refused_over_tcp_and_the_socket_takes_nothing_else() {
    let root = tempfile::tempdir().unwrap();
    let (server, socket) = start(root.path()).await;
    write_at(&server, KEY, 0, 1, 5, 0).await;
    // Over HTTP: a bad request, no descriptor.
    let response =
        server.http.get(server.object(0, 1, KEY)).header("x-optio-open", "1").send().await.unwrap();
    let (status, kind, reason) = error_of(response).await;
    assert_eq!((status, kind.as_str()), (400, "bad-request"), "{reason}");
    assert!(reason.contains("local socket only"), "{reason}");

    // Over the local socket: anything but an open gets an error answer, no descriptor.
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let mut frame = Vec::new();
    let path = format!("/v1/dev/0/objects/1/{KEY}");
    optio_proto::frames::encode_request(&mut frame, 3, "GET", &path, [], 0).unwrap();
    optio_net::local::send_frame(&stream, &frame, None).await.unwrap();
    let (head, _, fds) = optio_net::local::recv_frame(&stream, 1 << 20).await.unwrap().unwrap();
    let answer = optio_proto::frames::decode_answer(&head).unwrap();
    assert_eq!((answer.id, answer.status), (3, 500));
    assert!(fds.is_empty());

    // Garbage: disconnected; the socket goes on serving.
    let mut garbage = tokio::net::UnixStream::connect(&socket).await.unwrap();
    garbage.write_all(&[0xff; 64]).await.unwrap();
    let closed = optio_net::local::recv_frame(&garbage, 1 << 20).await;
    assert!(matches!(closed, Ok(None) | Err(_)), "disconnected: {closed:?}");
    let transport = HttpTransport::new().unwrap();
    assert!(open(&transport, &socket, KEY).await.is_ok(), "still serving");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_servers_socket_file_is_taken_over_and_anything_else_refused() {
    let root = tempfile::tempdir().unwrap();
    let socket = root.path().join("local.sock");
    // A socket file nobody listens on (a server killed with SIGKILL leaves one).
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let (server, _) = start(root.path()).await;
    write_at(&server, KEY, 0, 1, 5, 0).await;
    let transport = HttpTransport::new().unwrap();
    assert!(open(&transport, &socket, KEY).await.is_ok());

    // A second server on the same path: refused, the first keeps it.
    let other = tempfile::tempdir().unwrap();
    let config = optio_server::ServerConfig {
        devices: vec![optio_server::DeviceConfig {
            id: 0,
            dir: other.path().join("dev0"),
            capacity_bytes: 1 << 30,
        }],
        local_socket: Some(socket.clone()),
        ..optio_server::ServerConfig::default()
    };
    let error = optio_server::Server::bind(config.clone()).await.err().expect("refused");
    assert!(error.to_string().contains("served by another process"), "{error}");
    assert!(open(&transport, &socket, KEY).await.is_ok(), "the first still serves");
    server.stop().await;

    // A regular file at the path: refused, and left alone.
    std::fs::write(&socket, "not a socket").unwrap();
    let error = optio_server::Server::bind(config).await.err().expect("refused");
    assert!(error.to_string().contains("is not a socket"), "{error}");
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "not a socket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_is_for_its_group_and_writes_or_purges_carrying_the_open_header_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let (server, socket) = start(root.path()).await;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, optio_server::LOCAL_SOCKET_MODE, "{mode:o}: others may not connect");
    assert_eq!(mode & 0o007, 0, "{mode:o}");
    write_at(&server, KEY, 0, 1, 5, 0).await;
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let path = format!("/v1/dev/0/objects/1/{KEY}");
    /// (method, headers, body)
    type Framed<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [u8]);
    let requests: [Framed; 3] = [
        ("PUT", &[("x-optio-open", "1"), ("x-optio-version", "9")], b"overwritten"),
        ("DELETE", &[("x-optio-open", "1"), ("x-optio-purge", "1")], b""),
        ("DELETE", &[("x-optio-open", "1")], b""),
    ];
    for (id, (method, headers, body)) in requests.into_iter().enumerate() {
        let mut frame = Vec::new();
        let length = body.len();
        optio_proto::frames::encode_request(
            &mut frame,
            id as u64,
            method,
            &path,
            headers.iter().copied(),
            length,
        )
        .unwrap();
        frame.extend_from_slice(body);
        optio_net::local::send_frame(&stream, &frame, None).await.unwrap();
        let (head, _, fds) = optio_net::local::recv_frame(&stream, 1 << 20).await.unwrap().unwrap();
        let answer = optio_proto::frames::decode_answer(&head).unwrap();
        assert!(answer.status >= 400, "{method} {headers:?} was served: {}", answer.status);
        assert!(fds.is_empty());
    }
    // The object is as it was.
    let probe = server.http.head(server.object(0, 1, KEY)).send().await.unwrap();
    assert_eq!(probe.status(), 200);
    assert_eq!(probe.headers()["x-optio-version"], "5");
    server.stop().await;
}
