//! The NBD server against real clients (qemu's `qemu-img` and `qemu-io`, Debian's
//! `qemu-utils`) and against a raw socket that breaks the protocol.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;

use optio_nbd::{Export, Exports, Limits, MemoryExport, proto};

const SIZE: usize = 64 << 20;

/// A server on a loopback port serving `vol0` (read-write) and `ro` (read-only), in a runtime
/// of its own; dropped with the test.
struct Server {
    port: u16,
    vol0: Arc<MemoryExport>,
    _runtime: tokio::runtime::Runtime,
}

fn server() -> Server {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let vol0 = Arc::new(MemoryExport::new(SIZE, false));
    let ro = Arc::new(MemoryExport::new(1 << 20, true));
    let exports: Vec<(String, Arc<dyn Export>)> = vec![
        ("vol0".into(), vol0.clone() as Arc<dyn Export>),
        ("ro".into(), ro as Arc<dyn Export>),
    ];
    let exports: Arc<dyn Exports> = Arc::new(exports);
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    runtime.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let exports = exports.clone();
            tokio::spawn(async move {
                if let Err(error) = optio_nbd::serve(stream, exports, Limits::default()).await {
                    eprintln!("connection ended: {error}");
                }
            });
        }
    });
    Server { port, vol0, _runtime: runtime }
}

/// Whether qemu's tools are here; under `CI=true` their absence fails the test.
fn qemu_available() -> bool {
    let found = Command::new("qemu-io").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "qemu-io is required when CI=true: install Debian's qemu-utils"
        );
        eprintln!("skipping: qemu-io not found (install Debian's qemu-utils)");
    }
    found
}

fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().expect("runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{program} {args:?} failed: {text}");
    text
}

#[test]
fn qemu_reads_writes_zeroes_discards_and_converts_images() {
    if !qemu_available() {
        return;
    }
    let server = server();
    let url = format!("nbd://127.0.0.1:{}/vol0", server.port);
    let info = run("qemu-img", &["info", "--output=json", &url]);
    assert!(info.replace(' ', "").contains(&format!("\"virtual-size\":{SIZE}")), "{info}");

    let io = run(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 4096 1M",
            "-c",
            "read -P 0xab 4096 1M",
            "-c",
            "write -z 8192 64k",
            "-c",
            "read -P 0 8192 64k",
            "-c",
            "write -f -P 0x5c 2M 4k",
            "-c",
            "discard 3M 64k",
            "-c",
            "flush",
            &url,
        ],
    );
    assert!(!io.contains("failed") && !io.contains("error"), "{io}");
    let contents = server.vol0.contents();
    assert!(contents[4096..8192].iter().all(|b| *b == 0xab));
    assert!(contents[8192..8192 + (64 << 10)].iter().all(|b| *b == 0));
    assert!(contents[8192 + (64 << 10)..4096 + (1 << 20)].iter().all(|b| *b == 0xab));
    assert!(contents[2 << 20..(2 << 20) + 4096].iter().all(|b| *b == 0x5c));

    // A raw image in and out again, unchanged.
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.raw");
    let back = dir.path().join("back.raw");
    let mut image = vec![0u8; 16 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for chunk in image.chunks_mut(8).step_by(3) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(&source, &image).unwrap();
    run("qemu-img", &["convert", "-n", "-f", "raw", "-O", "raw", source.to_str().unwrap(), &url]);
    assert_eq!(&server.vol0.contents()[..16 << 20], &image[..]);
    run("qemu-img", &["convert", "-f", "raw", "-O", "raw", &url, back.to_str().unwrap()]);
    assert_eq!(&std::fs::read(&back).unwrap()[..16 << 20], &image[..]);

    // The read-only export refuses writes.
    let ro = format!("nbd://127.0.0.1:{}/ro", server.port);
    let output =
        Command::new("qemu-io").args(["-f", "raw", "-c", "write 0 4k", &ro]).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !output.status.success() || text.contains("read-only") || text.contains("failed"),
        "{text}"
    );
}

/// The handshake up to `NBD_OPT_GO` on `name`; the option replies' types.
fn go(stream: &mut TcpStream, name: &str) -> Vec<u32> {
    optio_nbd::testing::go(stream, name).expect("the handshake")
}

use optio_nbd::testing::request;

/// Reads one simple reply (and `data` bytes after it when it succeeded): (error, cookie).
fn reply(stream: &mut TcpStream, data: usize) -> (u32, u64) {
    let (error, cookie, _) = optio_nbd::testing::reply(stream, data).expect("a reply");
    (error, cookie)
}

#[test]
fn misbehaving_clients_get_errors_or_are_disconnected_and_the_server_goes_on() {
    let server = server();
    let connect = || {
        let stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        stream
    };
    // An unknown export: an error reply, not a disconnection.
    let mut stream = connect();
    assert_eq!(go(&mut stream, "nope"), vec![proto::REP_ERR_UNKNOWN]);

    // Requests out of range, too large, with unknown flags, to a read-only export; and many
    // in flight at once, every cookie answered.
    let mut stream = connect();
    let kinds = go(&mut stream, "vol0");
    assert_eq!(kinds, vec![proto::REP_INFO, proto::REP_INFO, proto::REP_ACK]);
    let size = SIZE as u64;
    stream.write_all(&request(0, 0, 1, size - 100, 4096)).unwrap();
    assert_eq!(reply(&mut stream, 0), (proto::EINVAL, 1));
    stream.write_all(&request(0, 0, 2, u64::MAX - 10, 4096)).unwrap();
    assert_eq!(reply(&mut stream, 0), (proto::EINVAL, 2));
    stream.write_all(&request(0, 0, 3, 0, 64 << 20)).unwrap();
    assert_eq!(reply(&mut stream, 0), (proto::EINVAL, 3));
    stream.write_all(&request(0, 0x80, 4, 0, 512)).unwrap();
    assert_eq!(reply(&mut stream, 0), (proto::EINVAL, 4));
    let mut write_beyond = request(1, 0, 5, size - 512, 1024);
    write_beyond.extend_from_slice(&[7u8; 1024]);
    stream.write_all(&write_beyond).unwrap();
    assert_eq!(reply(&mut stream, 0), (proto::ENOSPC, 5));
    stream.write_all(&request(42, 0, 6, 0, 0)).unwrap();
    assert_eq!(reply(&mut stream, 0), (proto::EINVAL, 6));
    let mut batch = Vec::new();
    for cookie in 100..164u64 {
        batch.extend_from_slice(&request(0, 0, cookie, cookie * 4096, 4096));
    }
    stream.write_all(&batch).unwrap();
    let mut answered: Vec<u64> = (0..64)
        .map(|_| reply(&mut stream, 4096))
        .map(|(e, c)| {
            assert_eq!(e, 0);
            c
        })
        .collect();
    answered.sort_unstable();
    assert_eq!(answered, (100..164).collect::<Vec<_>>());
    stream.write_all(&request(2, 0, 7, 0, 0)).unwrap(); // NBD_CMD_DISC
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "nothing after a disconnect");

    let mut stream = connect();
    go(&mut stream, "ro");
    let mut write = request(1, 0, 8, 0, 512);
    write.extend_from_slice(&[1u8; 512]);
    stream.write_all(&write).unwrap();
    assert_eq!(reply(&mut stream, 0), (proto::EPERM, 8));

    // Garbage in the handshake and in transmission, an oversize write: disconnected.
    let mut stream = connect();
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).unwrap();
    stream.write_all(&[0xff; 64]).unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    let mut stream = connect();
    go(&mut stream, "vol0");
    stream.write_all(&[0x42; 28]).unwrap();
    let _ = stream.read_to_end(&mut rest);
    let mut stream = connect();
    go(&mut stream, "vol0");
    stream.write_all(&request(1, 0, 9, 0, u32::MAX)).unwrap();
    let _ = stream.read_to_end(&mut rest);

    // And the server still serves.
    let mut stream = connect();
    go(&mut stream, "vol0");
    stream.write_all(&request(0, 0, 10, 0, 512)).unwrap();
    assert_eq!(reply(&mut stream, 512), (0, 10));
}
