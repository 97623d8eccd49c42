//! Block volumes (issue 15): `optio volume` from the command line, and `optio nbd` serving
//! them to real clients — qemu-img, qemu-io, nbdinfo, nbdcopy, fio's nbd engine, and ext4
//! through nbdfuse — and faults: `optio nbd` or a storage server killed with SIGKILL during
//! writes, a second writer, a client that breaks the protocol.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use optio_local::cluster::{LocalCluster, LocalClusterSpec};
use optio_nbd::{proto, testing};

use crate::{binary, cluster, free_port, have_tool as have, ok_at as ok, optio_at as optio, small};

const MIB: u64 = 1 << 20;

/// NBD command numbers.
const READ: u16 = 0;
const WRITE: u16 = 1;
const FLUSH: u16 = 3;

pub(crate) fn spec() -> LocalClusterSpec {
    LocalClusterSpec { auth: true, ..small() }
}

/// Runs `optio ARGS`, which must fail with exit status 1 and a message (no panic).
pub(crate) fn fails(dir: &Path, args: &[&str]) -> String {
    let out = optio(dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "optio {args:?} should fail: {stderr}");
    assert!(stderr.starts_with("error: ") && !stderr.contains("panicked"), "{stderr}");
    stderr
}

pub(crate) fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().expect("runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{program} {args:?} failed: {text}");
    text
}

/// A running `optio nbd`.
pub(crate) struct Nbd {
    child: Child,
    port: u16,
    /// What it logged so far (stderr, read as it comes, so that a long log never blocks it).
    log: Arc<Mutex<String>>,
    drain: Option<std::thread::JoinHandle<()>>,
}

impl Nbd {
    pub(crate) fn start(dir: &Path, extra: &[&str]) -> Result<Nbd, String> {
        let port = free_port();
        let mut child = Command::new(binary())
            .args(["nbd", "--listen", &format!("127.0.0.1:{port}"), "--insecure-plain-tcp"])
            .arg("--cluster")
            .arg(dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("optio nbd starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        match lines.next() {
            Some(Ok(line)) if line.starts_with("serving ") => {
                std::thread::spawn(move || for _ in lines {});
                let log = Arc::new(Mutex::new(String::new()));
                let stderr = BufReader::new(child.stderr.take().unwrap());
                let sink = log.clone();
                let drain = std::thread::spawn(move || {
                    for line in stderr.lines().map_while(Result::ok) {
                        let mut log = sink.lock().unwrap();
                        log.push_str(&line);
                        log.push('\n');
                    }
                });
                Ok(Nbd { child, port, log, drain: Some(drain) })
            }
            _ => {
                let status = child.wait().expect("exits");
                let mut stderr = String::new();
                child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
                Err(format!("{status}: {stderr}"))
            }
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn uri(&self, volume: &str) -> String {
        format!("nbd://127.0.0.1:{}/{volume}", self.port)
    }

    /// SIGKILL.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What it logged so far.
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGTERM: flushes and releases the volumes' locks. Returns what it logged.
    pub(crate) fn stop(mut self) -> String {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                if let Some(drain) = self.drain.take() {
                    let _ = drain.join();
                }
                return self.log();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("optio nbd did not stop on SIGTERM");
    }
}

impl Drop for Nbd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deterministic bytes with runs of zeros (a sparse image).
pub(crate) fn image(len: u64, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len as usize];
    let mut x = seed | 1;
    for (i, chunk) in out.chunks_mut(64 << 10).enumerate() {
        if i % 3 == 1 {
            continue; // a hole
        }
        for byte in chunk {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x as u8;
        }
    }
    out
}

/// Waits until `optio status` says HEALTH_OK (every server up, rebalanced and caught up).
pub(crate) fn settle(cluster: &LocalCluster) {
    let healthy = crate::wait_until(Duration::from_secs(60), || {
        optio(cluster.dir(), &["status"]).status.code() == Some(0)
    });
    assert!(healthy, "the cluster did not settle: {}", ok_or_not(cluster.dir()));
}

fn ok_or_not(dir: &Path) -> String {
    String::from_utf8_lossy(&optio(dir, &["status"]).stdout).into_owned()
}

#[test]
fn volume_commands_check_their_input_and_round_trip_images() {
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir();
    ok(dir, &["volume", "create", "vm", "64MiB"]);
    // Clear errors, exit status 1, nothing made.
    assert!(fails(dir, &["volume", "create", "vm", "64MiB"]).contains("exists already"));
    assert!(fails(dir, &["volume", "create", "a/b", "64MiB"]).contains("bad volume name"));
    assert!(fails(dir, &["volume", "create", "odd", "1000"]).contains("multiple of 512"));
    let error = fails(dir, &["volume", "create", "odd", "1GiB", "--object-size", "3MiB"]);
    assert!(error.contains("power of two"), "{error}");
    assert!(fails(dir, &["volume", "create", "x", "1GiB", "--pool", "nope"]).contains("no pool"));
    assert!(fails(dir, &["volume", "info", "ghost"]).contains("no volume 'ghost'"));
    let listed: serde_json::Value =
        serde_json::from_str(&ok(dir, &["volume", "ls", "--json"])).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["size"], 64 * MIB);

    // Import skips runs of zeros; export gives the same bytes back.
    let file = tmp.path().join("in.raw");
    let data = image(10 * MIB, 7);
    std::fs::write(&file, &data).unwrap();
    let out = ok(dir, &["volume", "import", "vm", file.to_str().unwrap(), "--chunk", "1MiB"]);
    assert!(out.contains("imported 10.00 MiB"), "{out}");
    let back = tmp.path().join("out.raw");
    ok(dir, &["volume", "export", "vm", back.to_str().unwrap()]);
    let exported = std::fs::read(&back).unwrap();
    assert_eq!(exported.len() as u64, 64 * MIB);
    assert!(exported[..data.len()] == data[..], "export differs from import");
    assert!(exported[data.len()..].iter().all(|b| *b == 0), "never written reads as zeros");
    let info: serde_json::Value =
        serde_json::from_str(&ok(dir, &["volume", "info", "vm", "--placement", "--json"])).unwrap();
    assert_eq!(info["allocated_objects"], 3, "10 MiB in 4 MiB objects: {info}");
    assert_eq!(info["placement"].as_array().unwrap().len(), 3);
    assert_eq!(info["placement"][0]["devices"].as_array().unwrap().len(), 3, "{info}");
    // `optio volume export vm - | head -c 100`: the reader goes away and the export ends as
    // Unix tools do (SIGPIPE), with no error and no panic.
    {
        use std::os::unix::process::ExitStatusExt;
        let mut child = Command::new(binary())
            .args(["volume", "export", "vm", "-", "--cluster"])
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("optio runs");
        let mut first = [0u8; 100];
        child.stdout.take().expect("piped").read_exact(&mut first).expect("the first bytes");
        assert!(first[..] == data[..100]);
        let output = child.wait_with_output().expect("optio ends");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(output.status.signal(), Some(13), "SIGPIPE: {:?} {stderr}", output.status);
    }

    // Resize: grow; shrink only when asked, discarding the tail.
    let error = fails(dir, &["volume", "resize", "vm", "4MiB"]);
    assert!(error.contains("--allow-shrink"), "{error}");
    ok(dir, &["volume", "resize", "vm", "6MiB", "--allow-shrink"]);
    ok(dir, &["volume", "resize", "vm", "128MiB"]);
    ok(dir, &["volume", "export", "vm", back.to_str().unwrap()]);
    let exported = std::fs::read(&back).unwrap();
    assert_eq!(exported.len() as u64, 128 * MIB);
    assert!(exported[..(6 * MIB) as usize] == data[..(6 * MIB) as usize]);
    assert!(exported[(6 * MIB) as usize..].iter().all(|b| *b == 0), "the discarded tail is zeros");
    let info: serde_json::Value =
        serde_json::from_str(&ok(dir, &["volume", "info", "vm", "--json"])).unwrap();
    assert_eq!(info["allocated_objects"], 2, "objects past the shrunk end deleted: {info}");

    // A removal interrupted after marking the header (as a crash would leave it): the volume
    // is gone for users, its objects still stored; `rm` again finishes the job.
    crate::runtime().block_on(async {
        let keyring = cluster.dir().join(optio_local::cluster::KEYRING_FILE);
        let credentials = optio_cluster::keyring::credentials(&keyring, "client.admin").unwrap();
        let config = optio_client::ClientConfig {
            credentials: Some(credentials),
            ..optio_client::ClientConfig::default()
        };
        let client =
            optio_client::Client::connect_source(cluster.source().clone(), config).await.unwrap();
        let key = optio_client::volume::header_key("vm");
        let (info, bytes) = client.get_range("data", &key, None).await.unwrap();
        let mut header = optio_client::volume::VolumeHeader::decode("vm", &bytes).unwrap();
        header.removing = true;
        client.compare_and_write("data", &key, 0, header.encode(), info.version).await.unwrap();
    });
    assert!(fails(dir, &["volume", "info", "vm"]).contains("no volume"));
    assert!(ok(dir, &["ls", "volume_data."]).contains("volume_data."), "not deleted yet");

    // Removal deletes every object; the name is free again.
    let out = ok(dir, &["volume", "rm", "vm"]);
    assert!(out.contains("2 data objects deleted"), "{out}");
    assert!(fails(dir, &["volume", "info", "vm"]).contains("no volume"));
    let listed = ok(dir, &["ls", "volume_data."]);
    assert!(!listed.contains("volume_data."), "{listed}");
}

#[test]
fn nbd_serves_volumes_to_qemu_nbdcopy_fio_and_ext4() {
    if !(have("qemu-img", "qemu-utils")
        && have("nbdinfo", "libnbd-bin")
        && have("nbdcopy", "libnbd-bin")
        && have("fio", "fio")
        && have("nbdfuse", "nbdfuse")
        && have("mkfs.ext4", "e2fsprogs"))
    {
        return;
    }
    let (tmp, mut cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "disk", "64MiB"]);
    ok(&dir, &["volume", "create", "fs", "128MiB", "--object-size", "1MiB"]);
    let nbd = Nbd::start(&dir, &[]).expect("optio nbd serves");
    let disk = nbd.uri("disk");

    let info = run("nbdinfo", &[&disk]);
    assert!(info.contains("export-size: 67108864"), "{info}");
    let list = run("nbdinfo", &["--list", &nbd.uri("")]);
    assert!(list.contains("export=\"disk\"") && list.contains("export=\"fs\""), "{list}");

    // qemu-img convert in and out: identical bytes.
    let raw = tmp.path().join("img.raw");
    let data = image(16 * MIB, 3);
    std::fs::write(&raw, &data).unwrap();
    run("qemu-img", &["convert", "-n", "-f", "raw", "-O", "raw", raw.to_str().unwrap(), &disk]);
    let back = tmp.path().join("back.raw");
    run("qemu-img", &["convert", "-f", "raw", "-O", "raw", &disk, back.to_str().unwrap()]);
    let got = std::fs::read(&back).unwrap();
    assert!(got[..data.len()] == data[..], "qemu-img round trip differs");
    // qemu-io: unaligned writes, zeroes and discards read back as written.
    let io = run(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 4094 10",
            "-c",
            "read -P 0xab 4094 10",
            "-c",
            "write -z 1M 64k",
            "-c",
            "read -P 0 1M 64k",
            "-c",
            "discard 2M 1M",
            "-c",
            "read -P 0 2M 1M",
            &disk,
        ],
    );
    assert!(!io.contains("Pattern verification failed"), "{io}");
    // nbdcopy both ways.
    let copy = tmp.path().join("copy.raw");
    run("nbdcopy", &[&disk, copy.to_str().unwrap()]);
    run("nbdcopy", &[copy.to_str().unwrap(), &nbd.uri("fs")]);
    let again = tmp.path().join("again.raw");
    run("nbdcopy", &[&nbd.uri("fs"), again.to_str().unwrap()]);
    let (copy, again) = (std::fs::read(&copy).unwrap(), std::fs::read(&again).unwrap());
    assert!(again[..copy.len()] == copy[..], "nbdcopy round trip differs");

    // fio verify jobs through its nbd engine: 4 KiB random writes at queue depth 1 and 32,
    // mixed reads and writes, 1 MiB sequential writes; then a pass that only verifies what
    // the last one wrote (read back by a new connection).
    let uri = format!("--uri={disk}");
    let fio = |extra: &[&str]| {
        let mut args = vec![
            "--name=v",
            "--ioengine=nbd",
            &uri,
            "--size=64M",
            "--verify=crc32c",
            "--verify_fatal=1",
            // fio writes DIR-v-0-verify.state into the working directory when a verify job
            // ends early; nothing here reads it back.
            "--verify_state_save=0",
            "--randseed=42",
            "--output-format=terse",
        ];
        args.extend_from_slice(extra);
        run("fio", &args)
    };
    fio(&["--rw=randwrite", "--bs=4k", "--iodepth=1", "--io_size=2M"]);
    fio(&["--rw=randwrite", "--bs=4k", "--iodepth=32", "--io_size=8M"]);
    fio(&["--rw=randrw", "--bs=16k", "--iodepth=16", "--io_size=8M"]);
    fio(&["--rw=write", "--bs=1M", "--iodepth=8"]);
    fio(&["--rw=write", "--bs=1M", "--iodepth=8", "--verify_only"]);

    // One writer per volume: a second read-write server is refused, naming the holder; a
    // read-only one is allowed.
    let error = Nbd::start(&dir, &["disk"]).err().expect("a second writer is refused");
    assert!(error.contains("is open read-write by"), "{error}");
    let socket = tmp.path().join("nbd.sock");
    let reader = Nbd::start(&dir, &["--read-only", "--socket", socket.to_str().unwrap(), "disk"])
        .expect("read-only is allowed");
    let info = run("nbdinfo", &[&reader.uri("disk")]);
    assert!(info.contains("is_read_only: true"), "{info}");
    // The same export on a Unix socket.
    let unix = format!("nbd+unix:///disk?socket={}", socket.display());
    let info = run("nbdinfo", &[&unix]);
    assert!(info.contains("export-size: 67108864"), "{info}");
    reader.stop();
    assert!(!socket.exists(), "the socket is removed at exit");

    // A real file system through nbdfuse: mkfs.ext4, a file written with debugfs, then
    // everything restarted (every storage server killed and started again, optio nbd too),
    // and e2fsck finds it clean with the file intact.
    let mount = tmp.path().join("mnt");
    std::fs::create_dir(&mount).unwrap();
    let fuse = |uri: &str| {
        let mut child =
            Command::new("nbdfuse").arg(&mount).arg(uri).stderr(Stdio::null()).spawn().unwrap();
        let file = mount.join("nbd");
        assert!(crate::wait_until(Duration::from_secs(10), || file.exists()), "nbdfuse mounted");
        let _ = child.try_wait();
        file
    };
    let unmount = || {
        let _ = Command::new("umount").arg(&mount).status();
    };
    let file = fuse(&nbd.uri("fs"));
    let file_s = file.to_str().unwrap().to_string();
    run("mkfs.ext4", &["-q", "-F", &file_s]);
    let note = tmp.path().join("note.txt");
    std::fs::write(&note, b"stored on an Optio volume\n").unwrap();
    run("debugfs", &["-w", "-R", &format!("write {} note.txt", note.display()), &file_s]);
    unmount();
    nbd.stop();
    let devices: Vec<u32> =
        cluster.servers().iter().flat_map(|s| s.devices.iter().map(|d| d.0)).collect();
    for device in devices {
        cluster.restart(device).unwrap();
    }
    settle(&cluster);
    let nbd = Nbd::start(&dir, &["fs"]).expect("optio nbd serves again");
    let file = fuse(&nbd.uri("fs"));
    let file_s = file.to_str().unwrap().to_string();
    let check = run("e2fsck", &["-fn", &file_s]);
    assert!(check.contains("clean") || check.contains("files"), "{check}");
    let cat = run("debugfs", &["-R", "cat note.txt", &file_s]);
    assert!(cat.contains("stored on an Optio volume"), "{cat}");
    unmount();
    nbd.stop();
}

/// A raw NBD connection to `port`, export `name` open.
fn connect(port: u16, name: &str) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let kinds = testing::go(&mut stream, name).expect("the handshake");
    assert_eq!(kinds.last(), Some(&proto::REP_ACK), "{kinds:?}");
    stream
}

fn block(i: u64) -> Vec<u8> {
    (0..64 * 1024u64).map(|j| (i.wrapping_mul(131) ^ j.wrapping_mul(7)) as u8).collect()
}

/// Writes `block(seed + i)` to each 64 KiB block `i` of the first `blocks`, one at a time.
fn write_blocks(stream: &mut TcpStream, blocks: u64, seed: u64) {
    for i in 0..blocks {
        let mut write = testing::request(WRITE, 0, i, i * 64 * 1024, 64 * 1024);
        write.extend_from_slice(&block(seed + i));
        stream.write_all(&write).unwrap();
        let (error, _, _) = testing::reply(stream, 0).unwrap();
        assert_eq!(error, 0, "write of block {i} failed");
    }
}

/// Reads the first `blocks` 64 KiB blocks back; each must be `block(seed + i)`.
fn check_blocks(stream: &mut TcpStream, blocks: u64, seed: u64, when: &str) {
    for i in 0..blocks {
        let read = testing::request(READ, 0, i, i * 64 * 1024, 64 * 1024);
        stream.write_all(&read).unwrap();
        let (error, _, data) = testing::reply(stream, 64 * 1024).unwrap();
        assert_eq!(error, 0, "{when}: read of block {i} failed");
        assert!(data == block(seed + i), "{when}: block {i} is not what was last written");
    }
}

/// The object reads and the local ones `optio nbd` logged as it stopped.
fn read_counts(log: &str) -> (u64, u64) {
    let counts = log
        .lines()
        .find(|line| line.contains("closing") && line.contains("local_reads="))
        .unwrap_or_else(|| panic!("optio nbd logs its reads when it stops: {log}"));
    let number = |name: &str| -> u64 {
        let at = counts.find(&format!("{name}=")).expect("logged") + name.len() + 1;
        counts[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
    };
    (number("object_reads"), number("local_reads"))
}

/// Local reads (docs/volumes.md): `optio nbd` reads data objects with a replica on this
/// machine from the replica's file. A server killed with SIGKILL leaves its files, and the
/// descriptors `optio nbd` holds of them, at the versions it had; what is written while it is
/// down must never be read back from them, nor after it returns (its catch-up replaces the
/// files), nor with another server down. Each local read checks that the file holds the
/// version this writer last wrote.
#[test]
fn local_reads_never_return_what_a_killed_replica_missed() {
    let (_tmp, mut cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "disk", "16MiB"]);
    const BLOCKS: u64 = 256;
    let nbd = Nbd::start(&dir, &[]).unwrap();
    let mut stream = connect(nbd.port, "disk");
    write_blocks(&mut stream, BLOCKS, 0);
    check_blocks(&mut stream, BLOCKS, 0, "all servers up");

    // The primary replica of the first data object: the file a local read of it opened.
    let info: serde_json::Value =
        serde_json::from_str(&ok(&dir, &["volume", "info", "disk", "--placement", "--json"]))
            .unwrap();
    let victim = info["placement"][0]["devices"][0].as_u64().expect("a placed object") as u32;
    cluster.kill(victim).unwrap();
    write_blocks(&mut stream, BLOCKS, 1000);
    check_blocks(&mut stream, BLOCKS, 1000, "written and read with its primary killed");

    cluster.restart(victim).unwrap();
    settle(&cluster);
    check_blocks(&mut stream, BLOCKS, 1000, "its primary back and caught up");
    write_blocks(&mut stream, BLOCKS, 2000);
    // Another replica of the object down: the returned primary serves it, locally.
    let other = info["placement"][0]["devices"][1].as_u64().expect("three replicas") as u32;
    cluster.kill(other).unwrap();
    check_blocks(&mut stream, BLOCKS, 2000, "its second replica killed");
    cluster.restart(other).unwrap();
    drop(stream);

    let log = nbd.stop();
    let (reads, local) = read_counts(&log);
    assert_eq!(reads, 4 * BLOCKS, "{log}");
    assert!(local >= BLOCKS, "most reads were local (every server runs here): {log}");
    assert!(local < reads, "reads of what the killed primary missed went to servers: {log}");

    // A new writer knows no version yet: it reads each object's primary replica locally (the
    // replica a read through the servers reads first), and reads what was last written.
    let nbd = Nbd::start(&dir, &[]).unwrap();
    let mut stream = connect(nbd.port, "disk");
    check_blocks(&mut stream, BLOCKS, 2000, "a new writer, every server back");
    drop(stream);
    let log = nbd.stop();
    assert!(read_counts(&log).1 > 0, "a new writer reads primaries locally: {log}");
}

/// A snapshot's reader and a clone's reads of its parent read locally too, from a file holding
/// a version from before the snapshot; once the parent is written over, the files they hold
/// hold a newer version, and they read what the snapshot holds through the servers, never the
/// parent's new data.
#[test]
fn snapshot_and_clone_reads_are_local_and_never_return_the_parents_later_writes() {
    let (_tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "disk", "8MiB", "--object-size", "1MiB"]);
    const BLOCKS: u64 = 128;
    let nbd = Nbd::start(&dir, &[]).unwrap();
    let mut stream = connect(nbd.port, "disk");
    write_blocks(&mut stream, BLOCKS, 0);
    drop(stream);
    nbd.stop();
    ok(&dir, &["volume", "snap", "create", "disk@s"]);
    ok(&dir, &["volume", "snap", "protect", "disk@s"]);
    ok(&dir, &["volume", "clone", "disk@s", "c"]);

    let snap = Nbd::start(&dir, &["disk@s"]).unwrap();
    let clone = Nbd::start(&dir, &["c"]).unwrap();
    let mut from_snap = connect(snap.port, "disk@s");
    let mut from_clone = connect(clone.port, "c");
    check_blocks(&mut from_snap, BLOCKS, 0, "the snapshot");
    check_blocks(&mut from_clone, BLOCKS, 0, "the clone");

    // The parent written over while both hold its files open.
    let writer = Nbd::start(&dir, &["disk"]).unwrap();
    let mut stream = connect(writer.port, "disk");
    write_blocks(&mut stream, BLOCKS, 1000);
    check_blocks(&mut stream, BLOCKS, 1000, "the parent");
    drop(stream);
    writer.stop();
    check_blocks(&mut from_snap, BLOCKS, 0, "the snapshot, its volume written over");
    check_blocks(&mut from_clone, BLOCKS, 0, "the clone, its parent written over");
    drop((from_snap, from_clone));
    for (what, nbd) in [("snapshot", snap), ("clone", clone)] {
        let log = nbd.stop();
        let (reads, local) = read_counts(&log);
        assert_eq!(reads, 2 * BLOCKS, "{what}: {log}");
        assert!(local >= BLOCKS, "{what}: reads before the parent was written were local: {log}");
        assert!(local < reads, "{what}: reads after it went through the servers: {log}");
    }
}

#[test]
fn no_acknowledged_write_is_lost_when_optio_nbd_or_a_storage_server_is_killed() {
    let (_tmp, mut cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "disk", "32MiB"]);

    // Writes of 64 KiB blocks round the volume, with a FLUSH every 8, until optio nbd is
    // killed under them.
    const BLOCKS: u64 = 512;
    let nbd = Nbd::start(&dir, &[]).unwrap();
    let port = nbd.port;
    let writer = std::thread::spawn(move || {
        let mut stream = connect(port, "disk");
        // Per block, the last write acknowledged (its sequence number), and the one in flight.
        let mut acked: Vec<Option<u64>> = vec![None; BLOCKS as usize];
        let (mut writes, mut flushed) = (0u64, 0u64);
        let mut in_flight = None;
        for i in 0..1_000_000u64 {
            let at = i % BLOCKS;
            let mut write = testing::request(WRITE, 0, i, at * 64 * 1024, 64 * 1024);
            write.extend_from_slice(&block(i));
            in_flight = Some(i);
            if stream.write_all(&write).is_err() {
                break;
            }
            match testing::reply(&mut stream, 0) {
                Ok((0, cookie, _)) if cookie == i => {
                    acked[at as usize] = Some(i);
                    writes = i + 1;
                    in_flight = None;
                }
                _ => break,
            }
            if writes.is_multiple_of(8) {
                let flush = testing::request(FLUSH, 0, 1 << 40, 0, 0);
                if stream.write_all(&flush).is_err() {
                    break;
                }
                match testing::reply(&mut stream, 0) {
                    Ok((0, _, _)) => flushed = writes,
                    _ => break,
                }
            }
        }
        (acked, writes, flushed, in_flight)
    });
    std::thread::sleep(Duration::from_millis(1500));
    nbd.kill();
    let (acked, writes, flushed, in_flight) = writer.join().unwrap();
    assert!(flushed >= 8 && writes < 1_000_000, "killed mid-job: {writes} acknowledged");
    // Its lease has not run out, but its holder died on this machine: a restarted optio nbd
    // takes the lock at once (issue 37, defect 3).
    let nbd = Nbd::start(&dir, &[]).expect("a restarted optio nbd serves at once");
    let mut stream = connect(nbd.port, "disk");
    for at in 0..BLOCKS {
        let read = testing::request(READ, 0, at, at * 64 * 1024, 64 * 1024);
        stream.write_all(&read).unwrap();
        let (error, _, data) = testing::reply(&mut stream, 64 * 1024).unwrap();
        assert_eq!(error, 0);
        let Some(last) = acked[at as usize] else { continue };
        // The write in flight when it died may or may not have landed; any other block holds
        // exactly its last acknowledged write.
        let unacked = in_flight.filter(|i| i % BLOCKS == at).map(block);
        assert!(
            data == block(last) || unacked.is_some_and(|u| data == u),
            "block {at}: its last acknowledged write ({last} of {writes}, flushed {flushed}) is lost"
        );
    }

    // A storage server killed during a write job: writes go on (two of three replicas, the
    // pool's min_size), and once it is back and caught up, the data is whole on it too.
    let victim = cluster.servers()[1].devices[0].0;
    let port = nbd.port;
    let writer = std::thread::spawn(move || {
        let mut stream = connect(port, "disk");
        write_blocks(&mut stream, 256, 1000);
        let flush = testing::request(FLUSH, 0, 1 << 40, 0, 0);
        stream.write_all(&flush).unwrap();
        assert_eq!(testing::reply(&mut stream, 0).unwrap().0, 0);
    });
    std::thread::sleep(Duration::from_millis(300));
    cluster.kill(victim).unwrap();
    if writer.join().is_err() {
        panic!("the job did not go on with a server down; optio nbd logged:\n{}", nbd.log());
    }
    cluster.restart(victim).unwrap();
    settle(&cluster);
    // Now another server down: what is read comes from the returned one and its peer.
    let other = cluster.servers()[2].devices[0].0;
    cluster.kill(other).unwrap();
    let mut stream = connect(nbd.port, "disk");
    check_blocks(&mut stream, 256, 1000, "written while a server was down, another one down now");
    cluster.restart(other).unwrap();

    // A client that breaks the protocol gets errors or is disconnected; the server goes on.
    let mut bad = connect(nbd.port, "disk");
    bad.write_all(&testing::request(READ, 0, 1, 32 * MIB, 4096)).unwrap();
    assert_eq!(testing::reply(&mut bad, 0).unwrap().0, proto::EINVAL, "a read past the end");
    bad.write_all(&testing::request(READ, 0, 2, 0, 1 << 30)).unwrap();
    assert_eq!(testing::reply(&mut bad, 0).unwrap().0, proto::EINVAL, "an oversize read");
    bad.write_all(b"this is not an NBD request at all").unwrap();
    let mut rest = Vec::new();
    let _ = bad.read_to_end(&mut rest);
    let mut fresh = connect(nbd.port, "disk");
    fresh.write_all(&testing::request(READ, 0, 3, 0, 4096)).unwrap();
    let (error, _, data) = testing::reply(&mut fresh, 4096).unwrap();
    assert_eq!(error, 0);
    assert!(data[..] == block(1000)[..4096]);
}

/// Changes volume `name`'s header (pool `data`) behind the CLI's back, as another client (or
/// a crash) would have left it.
pub(crate) fn edit_header(
    cluster: &LocalCluster,
    name: &str,
    change: impl FnOnce(&mut optio_client::volume::VolumeHeader),
) {
    crate::runtime().block_on(async {
        let client = admin_client(cluster).await;
        let key = optio_client::volume::header_key(name);
        let (info, bytes) = client.get_range("data", &key, None).await.unwrap();
        let mut header = optio_client::volume::VolumeHeader::decode(name, &bytes).unwrap();
        change(&mut header);
        client.compare_and_write("data", &key, 0, header.encode(), info.version).await.unwrap();
    });
}

/// An in-process client of `cluster` as client.admin.
async fn admin_client(cluster: &LocalCluster) -> optio_client::Client {
    let keyring = cluster.dir().join(optio_local::cluster::KEYRING_FILE);
    let credentials = optio_cluster::keyring::credentials(&keyring, "client.admin").unwrap();
    let config = optio_client::ClientConfig {
        credentials: Some(credentials),
        ..optio_client::ClientConfig::default()
    };
    optio_client::Client::connect_source(cluster.source().clone(), config).await.unwrap()
}

/// Sets (or clears) volume `name`'s lock in its header, as another client would have left it.
fn set_lock(cluster: &LocalCluster, name: &str, lock: Option<optio_client::volume::Lock>) {
    edit_header(cluster, name, |header| header.lock = lock);
}

/// Issue 37, defect 3: a supervisor restarting a crashed `optio nbd` found the volume locked by
/// its own dead predecessor's lease for 30 s. A holder recorded on this machine (same boot id
/// and pid namespace) whose process is gone no longer holds the lock; a live one does, and so
/// does a holder on another machine, whatever this machine's pids say.
#[test]
fn a_restarted_optio_nbd_takes_its_dead_predecessors_lock_at_once() {
    let (_tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "disk", "16MiB"]);
    let nbd = Nbd::start(&dir, &["disk"]).unwrap();
    let mut stream = connect(nbd.port, "disk");
    write_blocks(&mut stream, 8, 500);
    drop(stream);
    // Its holder is alive: a second writer is refused.
    let error = Nbd::start(&dir, &["disk"]).err().expect("a live holder's lock holds");
    assert!(error.contains("is open read-write by"), "{error}");

    // Killed with SIGKILL (no release): started again, it serves at once, with the data.
    let dead_pid = nbd.child.id();
    nbd.kill();
    let nbd = Nbd::start(&dir, &["disk"]).expect("a restarted optio nbd serves at once");
    let mut stream = connect(nbd.port, "disk");
    check_blocks(&mut stream, 8, 500, "after the restart");
    drop(stream);
    nbd.kill();

    // The same dead pid, but recorded on another machine (another boot id): this machine
    // cannot tell whether it runs, so its lease holds until it runs out.
    let here = optio_client::volume::HolderProcess::current().expect("Linux's /proc");
    let elsewhere = optio_client::volume::HolderProcess {
        boot_id: "00000000-0000-4000-8000-000000000000".into(),
        pid: dead_pid,
        ..here
    };
    let expires_unix_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as u64
            + 60_000;
    set_lock(
        &cluster,
        "disk",
        Some(optio_client::volume::Lock {
            holder: format!("elsewhere pid {dead_pid}"),
            token: 12345,
            expires_unix_ms,
            process: Some(elsewhere),
            taken_unix_ms: 0,
            generation_seen: 0,
        }),
    );
    let error = Nbd::start(&dir, &["disk"]).err().expect("a lease held elsewhere holds");
    assert!(error.contains(&format!("open read-write by elsewhere pid {dead_pid}")), "{error}");
    let nbd = Nbd::start(&dir, &["disk", "--break-lock"]).expect("--break-lock still takes it");
    nbd.stop();
}

/// The devices holding volume `name`'s header (pool `pool`), primary first.
fn header_devices(cluster: &LocalCluster, pool: &str, name: &str) -> Vec<u32> {
    crate::runtime().block_on(async {
        let client = crate::store_support::client(cluster, None).await;
        let key = optio_client::volume::header_key(name);
        let location = client.stat(pool, &key).await.expect("the header is found");
        location.candidate.devices.iter().map(|d| d.0).collect()
    })
}

/// Marks `device` in or out and waits until every server has the map.
fn set_in(cluster: &LocalCluster, device: u32, is_in: bool) {
    let change = optio_placement::MapChange::SetState {
        device: optio_placement::DeviceId(device),
        up: None,
        is_in: Some(is_in),
    };
    let map = cluster.change_map(&change).expect("the map changes");
    cluster.wait_for_epoch(map.epoch().0).expect("the servers take the map");
}

/// Issue 38's defect: after a map change moved a volume's header (original consistent hashing
/// marking servers out, then in again), opening the volume failed with "changed meanwhile"
/// until rebalancing had moved the header — minutes — because the header's new (or returning)
/// replicas did not hold the version the lock's compare-and-swap was based on. Now replicas
/// behind the base are brought to it first: the volume opens at once, with rebalancing held
/// to a crawl so that it moves nothing meanwhile, and every acknowledged block reads back.
#[test]
fn a_volume_opens_at_once_while_a_map_change_moves_its_header() {
    let spec = LocalClusterSpec {
        hosts_per_zone: 2,
        migration_rate_bytes_per_sec: Some(1),
        ..crate::small()
    };
    let (_tmp, cluster) = cluster(spec);
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    let pool = optio_local::cluster::RING_POOL;
    ok(&dir, &["volume", "create", "disk", "16MiB", "--pool", pool]);
    let nbd = Nbd::start(&dir, &["disk"]).expect("the volume opens");
    let mut stream = connect(nbd.port, "disk");
    write_blocks(&mut stream, 8, 700);
    drop(stream);
    nbd.stop();

    // Out: the header's replacement replica holds nothing. In again: the returning replica
    // holds the header as it was before (older than the lock's writes since).
    let moved = header_devices(&cluster, pool, "disk")[0];
    for (is_in, seed) in [(false, 701), (true, 702)] {
        set_in(&cluster, moved, is_in);
        assert_eq!(
            header_devices(&cluster, pool, "disk").contains(&moved),
            is_in,
            "device {moved} should {}hold the header's placement",
            if is_in { "" } else { "no longer " }
        );
        let nbd = Nbd::start(&dir, &["disk"]).unwrap_or_else(|e| {
            panic!(
                "the volume opens at once after device {moved} went {}: {e}",
                if is_in { "in" } else { "out" }
            )
        });
        let mut stream = connect(nbd.port, "disk");
        check_blocks(&mut stream, 8, seed - 1, "after the map change");
        write_blocks(&mut stream, 8, seed);
        drop(stream);
        nbd.stop();
    }
    let nbd = Nbd::start(&dir, &["disk"]).expect("the volume opens");
    let mut stream = connect(nbd.port, "disk");
    check_blocks(&mut stream, 8, 702, "at the end");
    drop(stream);
    nbd.stop();
}

/// Writes `block(seed + i)` to each 64 KiB block `i` of the first `blocks`, all sent before
/// any answer is read (so that a write-back cache holds many at once), then checks every
/// answer.
fn write_blocks_pipelined(stream: &mut TcpStream, blocks: u64, seed: u64) {
    let mut requests = Vec::new();
    for i in 0..blocks {
        requests.extend(testing::request(WRITE, 0, i, i * 64 * 1024, 64 * 1024));
        requests.extend(block(seed + i));
    }
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || writer.write_all(&requests).unwrap());
    for _ in 0..blocks {
        let (error, _, _) = testing::reply(stream, 0).unwrap();
        assert_eq!(error, 0, "a pipelined write failed");
    }
    sender.join().unwrap();
}

/// `optio nbd --write-back` (docs/volumes.md): writes are acknowledged from memory, and yet a
/// snapshot taken right after them holds them all (the cache is emptied into the volume
/// first), a kill -9 loses nothing written before a FLUSH that was answered, and a SIGTERM
/// writes what it holds before the volume is closed.
#[test]
fn a_write_back_cache_loses_nothing_flushed_and_snapshots_hold_every_acknowledged_write() {
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "wb", "16MiB"]);
    let bytes_of =
        |seed: u64, blocks: u64| -> Vec<u8> { (0..blocks).flat_map(|i| block(seed + i)).collect() };
    let refused = Nbd::start(&dir, &["--write-back", "lots"]).err().expect("a bad size is refused");
    assert!(refused.contains("--write-back") && refused.contains("32MiB"), "{refused}");

    // Acknowledged from the cache, then a snapshot at once: it holds every block.
    let nbd = Nbd::start(&dir, &["--write-back", "16MiB"]).unwrap();
    let mut stream = connect(nbd.port, "wb");
    write_blocks_pipelined(&mut stream, 128, 10);
    ok(&dir, &["volume", "snap", "create", "wb@s1"]);
    let exported = tmp.path().join("s1.raw");
    ok(&dir, &["volume", "export", "wb@s1", exported.to_str().unwrap()]);
    let snapshot = std::fs::read(&exported).unwrap();
    assert!(
        snapshot[..8 * MIB as usize] == bytes_of(10, 128)[..],
        "the snapshot misses acknowledged writes"
    );
    check_blocks(&mut stream, 128, 10, "after the snapshot");

    // A FLUSH answered, then more writes, then kill -9: the flushed blocks are all there.
    write_blocks_pipelined(&mut stream, 128, 20);
    let flush = testing::request(FLUSH, 0, 1 << 40, 0, 0);
    stream.write_all(&flush).unwrap();
    assert_eq!(testing::reply(&mut stream, 0).unwrap().0, 0, "the flush");
    let mut later = Vec::new();
    for i in 0..64u64 {
        later.extend(testing::request(WRITE, 0, i, (128 + i) * 64 * 1024, 64 * 1024));
        later.extend(block(500 + i));
    }
    stream.write_all(&later).unwrap();
    for _ in 0..64 {
        assert_eq!(testing::reply(&mut stream, 0).unwrap().0, 0);
    }
    nbd.kill();
    let nbd = Nbd::start(&dir, &["--write-back", "16MiB"]).expect("restarted after kill -9");
    let mut stream = connect(nbd.port, "wb");
    check_blocks(&mut stream, 128, 20, "flushed before kill -9");

    // SIGTERM with writes only in the cache: written into the volume before it closes.
    write_blocks_pipelined(&mut stream, 128, 30);
    let log = nbd.stop();
    assert!(log.contains("write-back cache written"), "{log}");
    let nbd = Nbd::start(&dir, &[]).unwrap();
    let mut stream = connect(nbd.port, "wb");
    check_blocks(&mut stream, 128, 30, "acknowledged before SIGTERM");
    nbd.stop();
}

/// A volume as an export whose writes take `delay` before they reach it (a write-back
/// cache in front of it then still holds them when a snapshot is asked for).
struct SlowVolume {
    volume: Arc<optio_client::volume::Volume>,
    delay: Duration,
}

impl optio_nbd::Export for SlowVolume {
    fn size(&self) -> u64 {
        self.volume.size()
    }

    fn read_only(&self) -> bool {
        false
    }

    fn read(&self, offset: u64, length: u32) -> optio_nbd::IoFuture<'_, bytes::Bytes> {
        Box::pin(async move {
            self.volume.read(offset, u64::from(length)).await.map_err(|_| optio_nbd::Errno::Io)
        })
    }

    fn write(&self, offset: u64, data: bytes::Bytes, fua: bool) -> optio_nbd::IoFuture<'_, ()> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.volume.write(offset, data, fua).await.map_err(|_| optio_nbd::Errno::Io)
        })
    }

    fn flush(&self) -> optio_nbd::IoFuture<'_, ()> {
        Box::pin(async move { self.volume.flush().await.map_err(|_| optio_nbd::Errno::Io) })
    }

    fn trim(&self, _offset: u64, _length: u32, _fua: bool) -> optio_nbd::IoFuture<'_, ()> {
        Box::pin(async { Err(optio_nbd::Errno::NotSupported) })
    }

    fn write_zeroes(
        &self,
        _offset: u64,
        _length: u32,
        _may_trim: bool,
        _fua: bool,
    ) -> optio_nbd::IoFuture<'_, ()> {
        Box::pin(async { Err(optio_nbd::Errno::NotSupported) })
    }
}

/// A volume below a write-back cache (`optio nbd --write-back`) empties the cache before it
/// takes a snapshot: writes acknowledged from the cache and still on their way (each takes
/// 400 ms here) are in the snapshot.
#[test]
fn a_snapshot_holds_the_writes_a_write_back_cache_acknowledged() {
    use optio_nbd::{Export, WriteBack};
    let (_tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "cached", "8MiB"]);
    crate::runtime().block_on(async {
        let client = admin_client(&cluster).await;
        let options = optio_client::volume::OpenOptions::default();
        let volume = optio_client::volume::Volume::open(&client, "cached", options).await.unwrap();
        let slow = SlowVolume { volume: volume.clone(), delay: Duration::from_millis(400) };
        let cache = Arc::new(WriteBack::new(Arc::new(slow), 8 << 20, 4));
        volume.set_hold_writes(WriteBack::hold_hook(&cache));
        for i in 0..16u64 {
            cache.write(i * 64 * 1024, block(40 + i).into(), false).await.unwrap();
        }
        assert!(cache.dirty_bytes() > 0, "the writes are still on their way");
        optio_client::snapshot::create(&client, "cached", "s1").await.expect("snap create");
        let snapshot = optio_client::volume::Volume::open(
            &client,
            "cached@s1",
            optio_client::volume::OpenOptions { read_only: true, ..options },
        )
        .await
        .unwrap();
        for i in 0..16u64 {
            let got = snapshot.read(i * 64 * 1024, 64 * 1024).await.unwrap();
            assert!(got[..] == block(40 + i)[..], "block {i} acknowledged before the snapshot");
        }
        cache.drain().await.unwrap();
        snapshot.close().await.unwrap();
        volume.close().await.unwrap();
    });
}
