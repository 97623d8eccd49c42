//! Slow, stalled and idle clients (issue 13, defect 5): half-sent headers, stalled bodies and
//! idle keep-alive connections are closed after their timeouts, and an idle crowd at the
//! connection limit cannot stop `/health` from answering.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{Options, TestServer, wait_until};

/// The longest any test here waits for the server to act.
const BOUND: Duration = Duration::from_secs(5);

/// Reads until the server closes the connection (within [`BOUND`]): what it sent, and how
/// long it took; `None` if it was still open at the bound.
async fn read_until_closed(stream: &mut TcpStream) -> Option<(String, Duration)> {
    let started = Instant::now();
    let mut received = Vec::new();
    let read = tokio::time::timeout(BOUND, async {
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| (String::from_utf8_lossy(&received).into_owned(), started.elapsed()))
}

/// Reads one answer (headers and a body of `content-length` bytes) within [`BOUND`].
async fn read_answer(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    tokio::time::timeout(BOUND, async {
        let mut buffer = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&received).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().expect("a numeric content-length"))
                    .unwrap_or(0);
                if received.len() >= end + 4 + length {
                    return;
                }
            }
            let n = stream.read(&mut buffer).await.expect("the answer is read");
            assert!(n > 0, "the connection closed mid-answer");
            received.extend_from_slice(&buffer[..n]);
        }
    })
    .await
    .expect("an answer within the bound");
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_headers_are_cut_off_after_the_header_timeout() {
    let root = tempfile::tempdir().expect("temp dir");
    let options = Options { header_timeout: Duration::from_millis(300), ..Options::default() };
    let server = TestServer::start(root.path(), options).await;

    // Half a request line and a header, then nothing.
    let mut half = TcpStream::connect(server.addr).await.unwrap();
    half.write_all(b"PUT /v1/dev/0/objects/1/slow HTTP/1.1\r\nhost: optio\r\ncontent-le")
        .await
        .unwrap();
    let (_, after) = read_until_closed(&mut half).await.expect("closed after the header timeout");
    assert!(after >= Duration::from_millis(250), "not before the timeout: {after:?}");

    // A connection that sends nothing at all.
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let (sent, _) = read_until_closed(&mut silent).await.expect("a silent connection is closed");
    assert_eq!(sent, "", "nothing is answered to a request never sent");

    // Headers sent a byte at a time, never finished: the timeout counts from the first byte,
    // not from the last one.
    let mut dribble = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    let request = b"GET /health HTTP/1.1\r\nhost: optio\r\nx-padding: ".repeat(10);
    let mut closed = false;
    for byte in request {
        if dribble.write_all(&[byte]).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await; // the slow client's pace
        if started.elapsed() > BOUND {
            break;
        }
    }
    let closed = closed || read_until_closed(&mut dribble).await.is_some();
    assert!(closed, "a dribbling client is cut off too");
    assert!(started.elapsed() < BOUND, "within the bound: {:?}", started.elapsed());

    // A complete request on a fresh connection is answered as ever.
    let health = server.http.get(server.url("/health")).send().await.expect("health");
    assert_eq!(health.status(), 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_fails_with_a_timeout_and_stores_nothing() {
    let root = tempfile::tempdir().expect("temp dir");
    let options = Options { body_timeout: Duration::from_millis(300), ..Options::default() };
    let server = TestServer::start(root.path(), options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head =
        "PUT /v1/dev/0/objects/1/stalled HTTP/1.1\r\nhost: optio\r\ncontent-length: 1000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&[b'x'; 500]).await.unwrap(); // half the body, then the writer stalls
    let (answer, after) =
        read_until_closed(&mut stream).await.expect("answered and closed after the body timeout");
    assert!(answer.starts_with("HTTP/1.1 408"), "a timeout: {answer}");
    assert!(answer.to_ascii_lowercase().contains("x-optio-error: timeout"), "{answer}");
    assert!(answer.contains("no byte of the request body"), "with a reason: {answer}");
    assert!(after >= Duration::from_millis(250), "not before the timeout: {after:?}");
    let probe = server.http.head(server.object(0, 1, "stalled")).send().await.unwrap();
    assert_eq!(probe.status(), 404, "nothing stored");

    // A body sent slowly but steadily is not a stalled one.
    let mut steady = TcpStream::connect(server.addr).await.unwrap();
    let head =
        "PUT /v1/dev/0/objects/1/steady HTTP/1.1\r\nhost: optio\r\ncontent-length: 8\r\n\r\n";
    steady.write_all(head.as_bytes()).await.unwrap();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(100)).await; // the slow client's pace
        steady.write_all(b"s").await.unwrap();
    }
    let answer = read_answer(&mut steady).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "stored: {answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let root = tempfile::tempdir().expect("temp dir");
    let options = Options {
        header_timeout: Duration::from_millis(200),
        idle_timeout: Duration::from_millis(1500),
        ..Options::default()
    };
    let server = TestServer::start(root.path(), options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    for _ in 0..2 {
        stream.write_all(b"GET /health HTTP/1.1\r\nhost: optio\r\n\r\n").await.unwrap();
        let answer = read_answer(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let (sent, after) = read_until_closed(&mut stream).await.expect("closed when idle");
    assert_eq!(sent, "");
    assert!(
        after >= Duration::from_millis(1200),
        "the idle timeout, not the (shorter) header timeout, closes it: {after:?}"
    );
    server.stop().await;
}

/// Starts a PUT of 4 bytes and sends 2: once this returns, the server is reading the body
/// (it asked for it with `100 Continue`), so the connection has a request in flight.
async fn busy_put(server: &TestServer, key: &str) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "PUT /v1/dev/0/objects/1/{key} HTTP/1.1\r\nhost: optio\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(BOUND, async {
        let mut buffer = [0u8; 256];
        while !received.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut buffer).await.expect("100 Continue is read");
            assert!(n > 0, "closed before 100 Continue");
            received.extend_from_slice(&buffer[..n]);
        }
    })
    .await
    .expect("100 Continue within the bound");
    assert!(received.starts_with(b"HTTP/1.1 100"), "{}", String::from_utf8_lossy(&received));
    stream.write_all(b"bu").await.unwrap();
    stream
}

/// Whether the server has closed `stream` (without waiting).
fn closed(stream: &TcpStream) -> bool {
    let mut buffer = [0u8; 1];
    match stream.try_read(&mut buffer) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_limit_idle_connections_make_room_for_health() {
    let root = tempfile::tempdir().expect("temp dir");
    let options = Options { max_connections: 8, ..Options::default() };
    let server = TestServer::start(root.path(), options).await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let http = reqwest::Client::builder().timeout(BOUND).build().unwrap();
    let started = Instant::now();
    let health = http.get(server.url("/health")).send().await.expect("/health answers");
    assert_eq!(health.status(), 200);
    assert!(started.elapsed() < BOUND);
    // At most 8 connections: the /health one and at most 7 of the idle crowd.
    let enough_closed =
        wait_until(BOUND, async || idle.iter().filter(|s| closed(s)).count() >= 13).await;
    let open = idle.iter().filter(|s| !closed(s)).count();
    assert!(enough_closed, "{open} of 20 idle connections still open with a limit of 8");

    // A connection with a request in flight is never the one closed to make room.
    let mut busy = busy_put(&server, "busy").await;
    let probe = server.http.head(server.object(0, 1, "busy")).send().await.unwrap();
    assert_eq!(probe.status(), 404);
    let mut more = Vec::new();
    for _ in 0..20 {
        more.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let health = http.get(server.url("/health")).send().await.expect("/health answers again");
    assert_eq!(health.status(), 200);
    busy.write_all(b"sy").await.unwrap();
    let answer = read_answer(&mut busy).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "the busy request finished: {answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_connection_is_busy_a_new_one_is_closed_at_once() {
    let root = tempfile::tempdir().expect("temp dir");
    let options = Options { max_connections: 1, ..Options::default() };
    let server = TestServer::start(root.path(), options).await;
    let mut busy = busy_put(&server, "busy").await;
    let mut extra = TcpStream::connect(server.addr).await.unwrap();
    extra.write_all(b"GET /health HTTP/1.1\r\nhost: optio\r\n\r\n").await.unwrap();
    let (sent, after) = read_until_closed(&mut extra).await.expect("closed");
    assert_eq!(sent, "", "a connection beyond the limit is closed unanswered");
    assert!(after < Duration::from_secs(1), "at once: {after:?}");
    busy.write_all(b"sy").await.unwrap();
    let answer = read_answer(&mut busy).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "the busy request finished: {answer}");
    server.stop().await;
}
