//! Who may use `optio nbd`, and how much one client may make it hold (issue 36, items 3 and
//! 4): plain TCP refused without `--insecure-plain-tcp`, a Unix socket only its owner may use
//! by default, TLS with client certificates mapped to the keyring's entities for qemu and
//! libnbd (read-write, read-only, refused), and a client that pipelines large reads without
//! reading the replies keeping `optio nbd`'s memory bounded.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use optio_local::cluster::LocalClusterSpec;
use optio_nbd::{proto, testing};

use crate::{binary, cluster, free_port, have_tool as have, ok_at as ok, small};

const MIB: u64 = 1 << 20;

/// NBD command numbers.
const READ: u16 = 0;
const WRITE: u16 = 1;
const DISCONNECT: u16 = 2;

/// A running `optio nbd`, killed when dropped.
struct Nbd {
    child: Child,
    /// What it printed first: `serving URI` of its first volume.
    serving: String,
}

impl Nbd {
    /// Starts `optio nbd ARGS --cluster DIR`; `Err` with its exit status and standard error
    /// when it exits instead of serving.
    fn start(dir: &Path, args: &[&str]) -> Result<Nbd, String> {
        let mut child = Command::new(binary())
            .arg("nbd")
            .args(args)
            .arg("--cluster")
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("optio nbd starts");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        match lines.next() {
            Some(Ok(line)) if line.starts_with("serving ") => {
                std::thread::spawn(move || for _ in lines {});
                let mut stderr = child.stderr.take().expect("piped");
                std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
                Ok(Nbd { child, serving: line })
            }
            _ => {
                let status = child.wait().expect("exits");
                let mut stderr = String::new();
                child.stderr.take().expect("piped").read_to_string(&mut stderr).unwrap();
                Err(format!("{status}: {stderr}"))
            }
        }
    }

    /// A field of `/proc/PID/status`, in bytes (`VmRSS`, `VmHWM`).
    fn memory_bytes(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("optio nbd runs");
        let line = status
            .lines()
            .find(|line| line.starts_with(&format!("{field}:")))
            .unwrap_or_else(|| panic!("{field} in {status}"));
        let kib: u64 = line.split_whitespace().nth(1).expect("a number").parse().expect("KiB");
        kib * 1024
    }
}

impl Drop for Nbd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn output(program: &str, args: &[&str]) -> (Output, String) {
    let output = Command::new(program).args(args).output().expect("runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output, text)
}

fn run(program: &str, args: &[&str]) -> String {
    let (output, text) = output(program, args);
    assert!(output.status.success(), "{program} {args:?} failed: {text}");
    text
}

fn fails(program: &str, args: &[&str]) -> String {
    let (output, text) = output(program, args);
    assert!(!output.status.success(), "{program} {args:?} should fail: {text}");
    text
}

/// Deterministic bytes.
fn pattern(len: u64, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Without `--insecure-plain-tcp`, `--listen` on a cluster without TLS is refused (saying
/// what to do) before any volume is locked; with no listener named, `optio nbd` serves on
/// `DIR/nbd.sock`, mode 0600.
#[test]
fn plain_tcp_is_refused_without_its_flag_and_the_default_is_a_private_unix_socket() {
    if !have("nbdinfo", "libnbd-bin") {
        return;
    }
    let (_tmp, cluster) = cluster(LocalClusterSpec { auth: true, ..small() });
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "disk", "16MiB"]);
    let listen = format!("127.0.0.1:{}", free_port());
    let error = Nbd::start(&dir, &["--listen", &listen, "disk"]).err().expect("refused");
    assert!(error.contains("without TLS") && error.contains("--insecure-plain-tcp"), "{error}");
    assert!(error.contains("optio up --tls") && !error.contains("panicked"), "{error}");
    assert!(std::net::TcpStream::connect(&listen).is_err(), "nothing listens on {listen}");

    // The default: the Unix socket, this user's only (and the lock was not taken above).
    let nbd = Nbd::start(&dir, &["disk"]).expect("optio nbd serves");
    let socket = dir.join("nbd.sock");
    assert_eq!(nbd.serving, format!("serving nbd+unix:///disk?socket={}", socket.display()));
    let mode = std::fs::metadata(&socket).expect("the socket").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let info = run("nbdinfo", &[&format!("nbd+unix:///disk?socket={}", socket.display())]);
    assert!(info.contains("export-size: 16777216"), "{info}");

    // With the flag, plain TCP serves (and says how).
    let plain = Nbd::start(&dir, &["--listen", &listen, "--insecure-plain-tcp", "--read-only"])
        .expect("plain TCP when asked for");
    assert_eq!(plain.serving, format!("serving nbd://{listen}/disk"));
}

/// The files qemu (`tls-creds-x509,dir=…`) and libnbd (`tls-certificates=…`) read: the CA
/// and a client certificate and key, by their names.
fn client_dir(
    root: &Path,
    name: &str,
    ca: &Path,
    issued: Option<&optio_local::tls::Issued>,
) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(ca, dir.join("ca-cert.pem")).unwrap();
    if let Some(issued) = issued {
        std::fs::copy(&issued.cert, dir.join("client-cert.pem")).unwrap();
        std::fs::copy(&issued.key, dir.join("client-key.pem")).unwrap();
    }
    dir
}

/// qemu's options for export `vol` on `port` over TLS with the credentials in `creds`.
fn qemu_tls(creds: &Path, port: u16) -> (String, String) {
    (
        format!("tls-creds-x509,id=tls0,dir={},endpoint=client", creds.display()),
        format!(
            "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port={port},export=vol,tls-creds=tls0"
        ),
    )
}

/// Issue 36, item 3: over TCP, `optio nbd` speaks only TLS, and a client certificate the
/// cluster's CA signed for an entity of the keyring decides what the client may do: a
/// writer reads (qemu-img) and writes (qemu-io); a reader reads (nbdinfo, nbdcopy) a
/// read-only export and its writes are refused; no certificate, an unknown entity, another
/// CA's certificate, plain NBD, and an entity removed from the keyring get nothing.
#[test]
fn tls_clients_get_what_their_certificates_entity_may_do() {
    if !(have("qemu-img", "qemu-utils")
        && have("qemu-io", "qemu-utils")
        && have("nbdinfo", "libnbd-bin")
        && have("nbdcopy", "libnbd-bin"))
    {
        return;
    }
    let spec = LocalClusterSpec { auth: true, tls: true, ..small() };
    let (tmp, cluster) = cluster(spec);
    let dir = cluster.dir().to_path_buf();
    let root = tmp.path();
    ok(&dir, &["volume", "create", "vol", "32MiB"]);
    let image = pattern(8 * MIB, 11);
    let raw = root.join("image.raw");
    std::fs::write(&raw, &image).unwrap();
    ok(&dir, &["volume", "import", "vol", raw.to_str().unwrap()]);
    for (entity, caps) in [("client.writer", "write"), ("client.reader", "read")] {
        let key = root.join(format!("{entity}.keyring"));
        ok(&dir, &["auth", "add", entity, "--caps", caps, "-o", key.to_str().unwrap()]);
    }
    let tls = dir.join("tls");
    let ca = tls.join("ca.pem");
    let authority = optio_local::tls::Ca::open_or_create(&tls).expect("the cluster's CA");
    // Client certificates, recorded in the keyring for their entities (what `optio auth cert`
    // does): only a recorded certificate stands for its entity.
    let keyring_path = dir.join("keyring");
    let issue = |stem: &str, cn: &str, record: bool| {
        let issued = authority.issue_client(&tls, stem, cn).unwrap();
        if record {
            let mut keyring = optio_cluster::keyring::load(&keyring_path).unwrap();
            keyring.record_certificate(cn, issued.fingerprint).unwrap();
            optio_cluster::keyring::save(&keyring, &keyring_path).unwrap();
        }
        issued
    };
    let writer = client_dir(root, "writer", &ca, Some(&issue("writer", "client.writer", true)));
    let reader = client_dir(root, "reader", &ca, Some(&issue("reader", "client.reader", true)));
    let ghost = client_dir(root, "ghost", &ca, Some(&issue("ghost", "client.ghost", false)));
    let unrecorded =
        client_dir(root, "unrecorded", &ca, Some(&issue("unrecorded", "client.writer", false)));
    let anonymous = client_dir(root, "anonymous", &ca, None);
    let other_ca = optio_local::tls::Ca::open_or_create(&root.join("other-ca")).unwrap();
    let forged = other_ca.issue_client(&root.join("other-ca"), "forged", "client.writer").unwrap();
    let forged = client_dir(root, "forged", &ca, Some(&forged));

    let port = free_port();
    let nbd = Nbd::start(&dir, &["--listen", &format!("127.0.0.1:{port}"), "vol"])
        .expect("optio nbd serves over TLS");
    assert_eq!(nbd.serving, format!("serving nbds://127.0.0.1:{port}/vol"));
    let nbds =
        |creds: &Path| format!("nbds://127.0.0.1:{port}/vol?tls-certificates={}", creds.display());

    // The writer: qemu-img reads what was written before, byte for byte; qemu-io writes.
    let (object, image_opts) = qemu_tls(&writer, port);
    let info = run("qemu-img", &["info", "--object", &object, "--image-opts", &image_opts]);
    assert!(info.contains("33554432"), "{info}");
    let out = root.join("out.raw");
    let out_s = out.to_str().unwrap();
    let convert = ["convert", "--object", &object, "--image-opts", &image_opts, "-O", "raw", out_s];
    run("qemu-img", &convert);
    let got = std::fs::read(&out).unwrap();
    assert!(got[..image.len()] == image[..], "qemu-img over TLS read other bytes");
    let io = run(
        "qemu-io",
        &[
            "--object",
            &object,
            "--image-opts",
            &image_opts,
            "-c",
            "write -P 0xab 16M 64k",
            "-c",
            "read -P 0xab 16M 64k",
        ],
    );
    assert!(!io.contains("Pattern verification failed"), "{io}");

    // The reader: nbdinfo sees a read-only export and the list; nbdcopy reads it whole; its
    // writes are refused and change nothing.
    let info = run("nbdinfo", &[&nbds(&reader)]);
    assert!(
        info.contains("export-size: 33554432") && info.contains("is_read_only: true"),
        "{info}"
    );
    let list = run(
        "nbdinfo",
        &["--list", &format!("nbds://127.0.0.1:{port}/?tls-certificates={}", reader.display())],
    );
    assert!(list.contains("export=\"vol\""), "{list}");
    let copy = root.join("copy.raw");
    run("nbdcopy", &[&nbds(&reader), copy.to_str().unwrap()]);
    let copied = std::fs::read(&copy).unwrap();
    assert!(copied[..image.len()] == image[..], "nbdcopy over TLS read other bytes");
    assert!(copied[(16 * MIB) as usize..(16 * MIB + 65536) as usize].iter().all(|b| *b == 0xab));
    let (object, image_opts) = qemu_tls(&reader, port);
    let (_, text) = output(
        "qemu-io",
        &["--object", &object, "--image-opts", &image_opts, "-c", "write -P 0xcd 0 64k"],
    );
    // qemu sees the export read-only and refuses to open it for writing.
    assert!(!text.contains("wrote 65536") && text.contains("Permission denied"), "{text}");

    // Refused: no certificate, an entity the keyring does not know (qemu prints the server's
    // reason; libnbd only that the option was refused), a certificate another CA signed for
    // client.writer (the server ends the TLS handshake with an alert; qemu does not even
    // try, its own certificate failing its check against the cluster's CA), plain NBD.
    for (creds, reason) in [
        (&anonymous, "a client certificate is required"),
        (&ghost, "client.ghost is not an entity of the cluster's keyring"),
        (&unrecorded, "is not one the keyring records"),
    ] {
        let text = fails("nbdinfo", &[&nbds(creds)]);
        assert!(!text.contains("export-size"), "{}: {text}", creds.display());
        let (object, image_opts) = qemu_tls(creds, port);
        let text = fails("qemu-img", &["info", "--object", &object, "--image-opts", &image_opts]);
        assert!(text.contains(reason), "{}: {text}", creds.display());
    }
    let text = fails("nbdinfo", &[&nbds(&forged)]);
    assert!(text.contains("TLS fatal alert") && !text.contains("export-size"), "{text}");
    let text = fails("nbdinfo", &[&format!("nbd://127.0.0.1:{port}/vol")]);
    assert!(!text.contains("export-size"), "{text}");
    let text = fails("nbdinfo", &["--list", &format!("nbd://127.0.0.1:{port}/")]);
    assert!(!text.contains("export=\"vol\""), "plain NBD lists nothing: {text}");
    let text = fails("qemu-img", &["info", &format!("nbd://127.0.0.1:{port}/vol")]);
    assert!(text.contains("requires TLS"), "{text}");

    // Nothing the refused clients did changed the volume.
    run("qemu-img", &convert);
    let got = std::fs::read(&out).unwrap();
    assert!(got[..image.len()] == image[..], "the volume changed");

    // An entity removed from the keyring is refused from its next connection.
    ok(&dir, &["auth", "rm", "client.writer"]);
    let text = fails("nbdinfo", &[&nbds(&writer)]);
    assert!(!text.contains("export-size"), "{text}");
    let (object, image_opts) = qemu_tls(&writer, port);
    let text = fails("qemu-img", &["info", "--object", &object, "--image-opts", &image_opts]);
    assert!(text.contains("client.writer is not an entity"), "{text}");
    drop(nbd);
}

/// Reads one simple reply's header: (error, cookie).
fn reply_header(stream: &mut UnixStream) -> (u32, u64) {
    let (error, cookie, _) = testing::reply(stream, 0).expect("a reply");
    (error, cookie)
}

/// Issue 36, item 4: a client pipelining 40 reads of 32 MiB without reading a reply took
/// `optio nbd` from 78 MB to 1.5 GB. Now what a connection holds is bounded by its budget of
/// bytes in flight (the answers waiting for the client), plus what the volume holds while it
/// assembles the reads executing (each read's pieces and the whole): the process's peak
/// memory stays within four budgets of where it started (it measured 2.7 here), another
/// client is served meanwhile, and every read is answered once the client reads.
#[test]
fn a_client_that_does_not_read_its_replies_keeps_optio_nbd_memory_bounded() {
    let (_tmp, cluster) = cluster(LocalClusterSpec { auth: true, ..small() });
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "disk", "64MiB"]);
    let nbd = Nbd::start(&dir, &["disk"]).expect("optio nbd serves");
    let socket = dir.join("nbd.sock");
    let connect = || {
        let mut stream = UnixStream::connect(&socket).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let kinds = testing::go(&mut stream, "disk").expect("the handshake");
        assert_eq!(kinds.last(), Some(&proto::REP_ACK), "{kinds:?}");
        stream
    };
    const READ_BYTES: u64 = 32 * MIB;
    const READS: u64 = 40;
    let data = pattern(READ_BYTES, 5);
    let mut writer = connect();
    let mut write = testing::request(WRITE, 0, 1, 0, READ_BYTES as u32);
    write.extend_from_slice(&data);
    writer.write_all(&write).unwrap();
    assert_eq!(reply_header(&mut writer), (0, 1));

    let before = nbd.memory_bytes("VmRSS");
    // The connection's budget holds the answers executing and waiting; the volume holds as
    // much again while it assembles the reads executing (a read's pieces, then the whole);
    // and the allocator keeps memory freed for reuse. Twice that is the bound: three times
    // less than the answers alone took before (40 x 32 MiB).
    let bound = 4 * optio_nbd::server::CONNECTION_BYTES_IN_FLIGHT_MAX as u64;
    let mut greedy = connect();
    let mut requests = Vec::new();
    for cookie in 0..READS {
        requests.extend_from_slice(&testing::request(READ, 0, cookie, 0, READ_BYTES as u32));
    }
    greedy.write_all(&requests).unwrap();
    // Forty reads of the page cache take a second or two; watch for ten.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut most = before;
    while Instant::now() < deadline {
        most = most.max(nbd.memory_bytes("VmRSS"));
        assert!(
            most < before + bound,
            "optio nbd grew from {} to {} MiB (bound {} MiB) with replies unread",
            before >> 20,
            most >> 20,
            bound >> 20
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Meanwhile, another client is served.
    writer.write_all(&testing::request(READ, 0, 2, 4096, 4096)).unwrap();
    let (error, cookie, got) = testing::reply(&mut writer, 4096).unwrap();
    assert_eq!((error, cookie), (0, 2));
    assert!(got[..] == data[4096..8192]);

    // Every read is answered once the client reads, with the data.
    let mut answered = Vec::new();
    for _ in 0..READS {
        let (error, cookie, got) = testing::reply(&mut greedy, READ_BYTES as usize).unwrap();
        assert_eq!(error, 0);
        assert!(got == data, "read {cookie} returned other bytes");
        answered.push(cookie);
    }
    answered.sort_unstable();
    assert_eq!(answered, (0..READS).collect::<Vec<_>>());
    greedy.write_all(&testing::request(DISCONNECT, 0, 99, 0, 0)).unwrap();
    let peak = nbd.memory_bytes("VmHWM");
    assert!(
        peak < before + bound,
        "optio nbd peaked at {} MiB from {} MiB (bound {} MiB)",
        peak >> 20,
        before >> 20,
        bound >> 20
    );
}
