//! Issue 36's holes in request handling, each attack replayed against real server processes
//! and refused with nothing changed: the S3 gateway's state is the gateway's alone, purges are
//! for admins (a writer takes back only its own recent write), a signature holds only at the
//! server it was sent to, nonces are unpredictable and one entity's cannot spend another's,
//! signed headers must be visible ASCII, a request refused over plain HTTP cannot be replayed
//! over TLS, refusals cannot fill the disk through the log, a keyring that no longer loads
//! fails closed, and `optio auth` changes hold when the command returns.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use optio_local::cluster::{KEYRING_FILE, LocalCluster, PLAIN_POOL, ensure_entities};
use optio_proto::auth::{AUTH_HEADER, CONTENT_HASH_HEADER, Cap, Credentials, content_hash};
use optio_proto::wire;

use crate::{binary, cluster, data, runtime, small};

/// The pool the S3 gateway keeps its users and buckets in (`optio s3 --meta-pool`'s default).
const META_POOL: &str = optio_local::cluster::CRUSH_POOL;

fn secured() -> (tempfile::TempDir, LocalCluster) {
    cluster(optio_local::LocalClusterSpec { auth: true, ..small() })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

fn credentials(cluster: &LocalCluster, id: &str) -> Credentials {
    optio_cluster::keyring::credentials(&cluster.dir().join(KEYRING_FILE), id).expect("the key")
}

async fn client_as(cluster: &LocalCluster, id: &str) -> optio_client::Client {
    let config = optio_client::ClientConfig {
        credentials: Some(credentials(cluster, id)),
        ..optio_client::ClientConfig::default()
    };
    optio_client::Client::connect_source(cluster.source().clone(), config)
        .await
        .expect("the client connects")
}

fn refused(error: &optio_client::ClientError) -> bool {
    let text = error.to_string();
    text.contains("forbidden") || text.contains("unauthorized") || text.contains("refused")
}

/// A request made by hand: signed for `target` by `signer` (or unsigned).
struct Raw {
    method: reqwest::Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn new(method: reqwest::Method, path: impl Into<String>) -> Raw {
        Raw { method, path: path.into(), headers: Vec::new(), body: Vec::new() }
    }

    fn header(mut self, name: &'static str, value: impl ToString) -> Raw {
        self.headers.push((name, value.to_string()));
        self
    }

    fn put(device: u32, pool: u32, key: &str, body: &[u8], version: u64) -> Raw {
        let mut raw =
            Raw::new(reqwest::Method::PUT, format!("/v1/dev/{device}/objects/{pool}/{key}"))
                .header(wire::VERSION, version)
                .header(wire::CHECKSUM, wire::encode_checksum(optio_proto::checksum(body)))
                .header(CONTENT_HASH_HEADER, content_hash(body));
        raw.body = body.to_vec();
        raw
    }

    fn object(method: reqwest::Method, device: u32, pool: u32, key: &str) -> Raw {
        Raw::new(method, format!("/v1/dev/{device}/objects/{pool}/{key}"))
    }

    /// Signs for the server at `target`.
    fn signed(mut self, target: &str, signer: &Credentials) -> Raw {
        self.headers.retain(|(name, _)| *name != AUTH_HEADER && *name != wire::TARGET);
        self.headers.push((wire::TARGET, target.to_string()));
        let pairs: Vec<(&str, &str)> = self.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let value = signer.sign(self.method.as_str(), &self.path, &pairs, now_ms());
        self.headers.push((AUTH_HEADER, value));
        self
    }

    async fn send_with(&self, http: &reqwest::Client, base: &str) -> (u16, String) {
        let mut request = http
            .request(self.method.clone(), format!("{base}{}", self.path))
            .body(self.body.clone());
        for (name, value) in &self.headers {
            request = request.header(*name, value);
        }
        let response = request.send().await.expect("an answer");
        let status = response.status().as_u16();
        let reason = response
            .headers()
            .get(wire::REASON)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = response.text().await.unwrap_or_default();
        (status, format!("{reason} {text}"))
    }

    async fn send(&self, addr: &str) -> (u16, String) {
        self.send_with(&reqwest::Client::new(), &format!("http://{addr}")).await
    }

    /// Sends it as a frame ([`optio_proto::frames`]) on `stream` (plain TCP or TLS), upgraded
    /// to frames first.
    async fn send_framed<S>(&self, stream: &mut S) -> (u16, String)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        use optio_proto::frames;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let upgrade = format!(
            "GET {} HTTP/1.1\r\nhost: t\r\nconnection: upgrade\r\nupgrade: {}\r\n\r\n",
            frames::UPGRADE_PATH,
            frames::PROTOCOL
        );
        stream.write_all(upgrade.as_bytes()).await.unwrap();
        stream.flush().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "closed during the upgrade");
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
        let pairs = self.headers.iter().map(|(n, v)| (*n, v.as_str()));
        let mut frame = Vec::new();
        frames::encode_request(
            &mut frame,
            1,
            self.method.as_str(),
            &self.path,
            pairs,
            self.body.len(),
        )
        .unwrap();
        frame.extend_from_slice(&self.body);
        stream.write_all(&frame).await.unwrap();
        stream.flush().await.unwrap();
        let mut prefix = [0u8; frames::PREFIX_BYTES];
        stream.read_exact(&mut prefix).await.unwrap();
        let (head_len, body_len) = frames::decode_prefix(prefix).unwrap();
        let mut head = vec![0u8; head_len];
        stream.read_exact(&mut head).await.unwrap();
        let mut body = vec![0u8; body_len];
        stream.read_exact(&mut body).await.unwrap();
        let answer = frames::decode_answer(&head).unwrap();
        let reason = answer.headers.iter().find(|(n, _)| *n == wire::REASON).map(|(_, v)| *v);
        (answer.status, format!("{} {}", reason.unwrap_or(""), String::from_utf8_lossy(&body)))
    }
}

/// A TLS connection to the server at `addr` (an IP address and port), trusting `ca`.
async fn tls_to(addr: &str, ca: &Path) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let config = optio_tls::client_config(ca, None).unwrap();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let ip: std::net::IpAddr = addr.rsplit_once(':').unwrap().0.parse().unwrap();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    connector.connect(ip.into(), stream).await.expect("a TLS handshake")
}

/// (device, its server's address, the pool id of `data`).
fn first_device(cluster: &LocalCluster) -> (u32, String, u32) {
    let map = cluster.load_map().unwrap();
    let pool = map.pool_by_name(PLAIN_POOL).unwrap().id.0;
    let server = &cluster.servers()[0];
    (server.devices[0].0, server.addr.clone(), pool)
}

#[test]
fn a_read_key_cannot_read_s3_secrets_nor_a_write_key_forge_them_and_a_gateway_key_serves_s3() {
    let (dir, cluster) = secured();
    ensure_entities(
        &cluster.dir().join(KEYRING_FILE),
        &[("client.reader", Cap::Read), ("client.writer", Cap::Write), ("client.gw", Cap::Gateway)],
    )
    .unwrap();
    // The gateway's identity: a key file holding client.gw alone.
    let gw_key = dir.path().join("client.gw.keyring");
    let mut single = optio_proto::auth::Keyring::new();
    let keyring = optio_cluster::keyring::load(&cluster.dir().join(KEYRING_FILE)).unwrap();
    single.insert(keyring.get("client.gw").unwrap().clone());
    optio_cluster::keyring::save(&single, &gw_key).unwrap();
    let as_gateway = |args: &[&str]| {
        let output = Command::new(binary())
            .args(args)
            .arg("--cluster")
            .arg(cluster.dir())
            .args(["--id", "client.gw", "--keyring"])
            .arg(&gw_key)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(
            output.status.success(),
            "{args:?}: {text} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        text
    };
    let created: serde_json::Value =
        serde_json::from_str(&as_gateway(&["s3", "user", "create", "alice", "--json"])).unwrap();
    let access = created["access_key"].as_str().unwrap().to_string();
    let secret = created["secret_key"].as_str().unwrap().to_string();

    let rt = runtime();
    rt.block_on(async {
        let admin = client_as(&cluster, "client.admin").await;
        let reader = client_as(&cluster, "client.reader").await;
        let writer = client_as(&cluster, "client.writer").await;
        let gateway = client_as(&cluster, "client.gw").await;
        let record = format!(".s3/key/{access}");
        // The secret is there (admins and the gateway read it) …
        let held = admin.get(META_POOL, &record).await.expect("admins read the gateway's state");
        assert!(String::from_utf8_lossy(&held).contains(&secret));
        gateway.get(META_POOL, &record).await.expect("the gateway reads its state");
        // … but a read key gets neither the record nor its name in a listing.
        let got = reader.get(META_POOL, &record).await.expect_err("a reader reads no secret");
        assert!(refused(&got), "{got}");
        let listed = reader.list(META_POOL, "").await.expect("a reader lists");
        assert!(listed.iter().all(|o| !o.key.starts_with(".s3/")), "{listed:?}");
        let dot = reader.list(META_POOL, ".s").await.expect("a reader lists");
        assert!(dot.is_empty(), "{dot:?}");
        let listed = reader.list(META_POOL, ".s3/").await.expect_err("no listing of .s3/");
        assert!(refused(&listed), "{listed}");
        assert!(
            admin.list(META_POOL, ".s3/").await.unwrap().iter().any(|o| o.key == record),
            "admins list it"
        );
        // A write key can neither mint credentials nor change or remove the gateway's records.
        let forged = br#"{"user":"alice","secret_key":"forged-secret-forged-secret-1234"}"#;
        for key in [".s3/key/FORGEDKEY0000000000", record.as_str(), ".s3/bucket/photos"] {
            let put = writer.put(META_POOL, key, bytes::Bytes::from_static(forged)).await;
            assert!(refused(&put.expect_err("no forging")), "{key}");
        }
        let removed = writer.delete(META_POOL, &record).await.expect_err("no removal");
        assert!(refused(&removed), "{removed}");
        assert_eq!(admin.get(META_POOL, &record).await.unwrap(), held, "unchanged");
        assert!(admin.get(META_POOL, ".s3/key/FORGEDKEY0000000000").await.is_err());
    });

    // The gateway run as client.gw serves S3, multipart uploads (whose state is under .s3/)
    // included.
    let port = crate::free_port();
    let mut gateway = Command::new(binary())
        .args(["s3", "--listen", &format!("127.0.0.1:{port}"), "--cluster"])
        .arg(cluster.dir())
        .args(["--id", "client.gw", "--keyring"])
        .arg(&gw_key)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(gateway.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("serving S3 on "), "{line}");
    let big = dir.path().join("big");
    std::fs::write(&big, data(3, 20 << 20)).unwrap();
    let aws = |args: &[&str]| {
        let output = Command::new("aws")
            .args(["--endpoint-url", &format!("http://127.0.0.1:{port}"), "--region", "us-east-1"])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", &access)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output();
        match output {
            Ok(output) => {
                (output.status.success(), String::from_utf8_lossy(&output.stderr).to_string())
            }
            Err(error) => panic!("the AWS CLI does not run ({error}): scripts/test.sh installs it"),
        }
    };
    assert!(aws(&["s3", "mb", "s3://photos"]).0);
    let copied = aws(&["s3", "cp", big.to_str().unwrap(), "s3://photos/big"]);
    assert!(copied.0, "a multipart upload through a gateway key: {}", copied.1);
    let back = dir.path().join("back");
    assert!(aws(&["s3", "cp", "s3://photos/big", back.to_str().unwrap()]).0);
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&big).unwrap());
    let _ = gateway.kill();
    let _ = gateway.wait();
}

#[test]
fn a_write_key_purges_nothing_and_an_undo_takes_back_only_its_own_recent_live_version() {
    let (_dir, cluster) = secured();
    ensure_entities(&cluster.dir().join(KEYRING_FILE), &[("client.writer", Cap::Write)]).unwrap();
    let admin = credentials(&cluster, "client.admin");
    let writer = credentials(&cluster, "client.writer");
    let (device, addr, pool) = first_device(&cluster);
    let rt = runtime();
    rt.block_on(async {
        let version = now_ms() * 1000;
        let put = Raw::put(device, pool, "live", b"keep me", version).signed(&addr, &admin);
        assert_eq!(put.send(&addr).await.0, 201);
        let put = Raw::put(device, pool, "gone", b"deleted", version).signed(&addr, &admin);
        assert_eq!(put.send(&addr).await.0, 201);
        let delete = Raw::object(reqwest::Method::DELETE, device, pool, "gone")
            .header(wire::VERSION, version + 1)
            .signed(&addr, &admin);
        assert_eq!(delete.send(&addr).await.0, 204, "a tombstone");
        let state = |key: &'static str| {
            let addr = addr.clone();
            let admin = admin.clone();
            async move {
                let probe =
                    Raw::object(reqwest::Method::HEAD, device, pool, key).signed(&addr, &admin);
                let mut request =
                    reqwest::Client::new().head(format!("http://{addr}{}", probe.path));
                for (name, value) in &probe.headers {
                    request = request.header(*name, value);
                }
                let response = request.send().await.unwrap();
                let header = |name: &str| {
                    response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
                };
                (response.status().as_u16(), header(wire::VERSION), header(wire::DELETED))
            }
        };
        let live_before = state("live").await;
        let gone_before = state("gone").await;
        assert_eq!(live_before.0, 200);
        assert_eq!(gone_before.2, Some((version + 1).to_string()), "{gone_before:?}");

        // A writer's purges, with a version from the future's edge or none: refused.
        for key in ["live", "gone"] {
            for purge_version in [Some(now_ms() * 1000), None] {
                let mut purge =
                    Raw::object(reqwest::Method::DELETE, device, pool, key).header(wire::PURGE, 1);
                if let Some(v) = purge_version {
                    purge = purge.header(wire::VERSION, v);
                }
                let (status, text) = purge.signed(&addr, &writer).send(&addr).await;
                assert_eq!(status, 403, "a writer's purge of {key}: {text}");
            }
        }
        // An undo removes only a live object of exactly its version.
        for (key, undone) in [("live", version + 7), ("gone", version + 1), ("gone", version)] {
            let undo = Raw::object(reqwest::Method::DELETE, device, pool, key)
                .header(wire::UNDO, 1)
                .header(wire::VERSION, undone)
                .signed(&addr, &writer);
            let (status, text) = undo.send(&addr).await;
            assert_eq!(status, 404, "undo of {key} at {undone}: {text}");
        }
        assert_eq!(state("live").await, live_before, "the live object stays");
        assert_eq!(state("gone").await, gone_before, "the tombstone stays");
        // Its own write, just made: taken back.
        let mine = now_ms() * 1000;
        let put = Raw::put(device, pool, "mine", b"failed write", mine).signed(&addr, &writer);
        assert_eq!(put.send(&addr).await.0, 201);
        let undo = Raw::object(reqwest::Method::DELETE, device, pool, "mine")
            .header(wire::UNDO, 1)
            .header(wire::VERSION, mine)
            .signed(&addr, &writer);
        assert_eq!(undo.send(&addr).await.0, 204);
        assert_eq!(state("mine").await.0, 404);
        // An old version is no write of its own that just failed: refused.
        let old = mine - 20 * 60 * 1_000_000;
        let put = Raw::put(device, pool, "old", b"old write", old).signed(&addr, &admin);
        assert_eq!(put.send(&addr).await.0, 201);
        let undo = Raw::object(reqwest::Method::DELETE, device, pool, "old")
            .header(wire::UNDO, 1)
            .header(wire::VERSION, old)
            .signed(&addr, &writer);
        let (status, text) = undo.send(&addr).await;
        assert_eq!(status, 403, "{text}");
        assert_eq!(state("old").await.0, 200);
        // Admins still purge.
        let purge = Raw::object(reqwest::Method::DELETE, device, pool, "old")
            .header(wire::PURGE, 1)
            .signed(&addr, &admin);
        assert_eq!(purge.send(&addr).await.0, 204);
    });
}

#[test]
fn a_signature_holds_only_at_its_server_and_one_entitys_nonces_never_spend_anothers() {
    let (_dir, cluster) = secured();
    ensure_entities(&cluster.dir().join(KEYRING_FILE), &[("client.reader", Cap::Read)]).unwrap();
    let admin = credentials(&cluster, "client.admin");
    let reader = credentials(&cluster, "client.reader");
    let a = cluster.servers()[0].addr.clone();
    let b = cluster.servers()[1].addr.clone();
    let rt = runtime();
    rt.block_on(async {
        // A captured admin request for server A, replayed at server B: refused there.
        let captured = Raw::new(reqwest::Method::GET, "/v1/status").signed(&a, &admin);
        let (status, text) = captured.send(&b).await;
        assert_eq!(status, 401, "{text}");
        assert!(text.contains("signed for the server at"), "{text}");
        assert_eq!(captured.send(&a).await.0, 200, "served where it was sent");
        assert_eq!(captured.send(&a).await.0, 401, "and once only");
        // A request naming no server: refused.
        let mut aimless = Raw::new(reqwest::Method::GET, "/v1/status");
        let value = admin.sign("GET", "/v1/status", &[], now_ms());
        aimless.headers.push((AUTH_HEADER, value));
        let (status, text) = aimless.send(&a).await;
        assert_eq!(status, 401, "{text}");

        // A reader who saw an admin's nonce spends it under its own name: the admin's request
        // with that nonce is still served (the replay cache is per entity).
        let nonce = "0123456789abcdef0123456789abcdef";
        let signed_with = |who: &Credentials| {
            let headers = [(wire::TARGET, a.as_str())];
            let mut raw = Raw::new(reqwest::Method::GET, "/v1/status").header(wire::TARGET, &a);
            raw.headers.push((
                AUTH_HEADER,
                who.sign_with_nonce("GET", "/v1/status", &headers, now_ms(), nonce),
            ));
            raw
        };
        assert_eq!(signed_with(&reader).send(&a).await.0, 200);
        let (status, text) = signed_with(&admin).send(&a).await;
        assert_eq!(status, 200, "the admin's request: {text}");
        assert_eq!(signed_with(&admin).send(&a).await.0, 401, "its own replay is refused");
    });
}

#[test]
fn signed_headers_that_are_not_visible_ascii_are_refused_and_refusals_do_not_flood_the_log() {
    let (_dir, cluster) = secured();
    let admin = credentials(&cluster, "client.admin");
    let (device, addr, pool) = first_device(&cluster);
    let rt = runtime();
    rt.block_on(async {
        let put = Raw::put(device, pool, "k", b"value", now_ms() * 1000).signed(&addr, &admin);
        assert_eq!(put.send(&addr).await.0, 201);
        // A signed HEAD with a header whose value has no text form (left out of the
        // signature, yet acting by its presence): refused.
        let probe = Raw::object(reqwest::Method::HEAD, device, pool, "k").signed(&addr, &admin);
        let mut request = reqwest::Client::new()
            .head(format!("http://{addr}{}", probe.path))
            .header(wire::WANT_CHOICE, reqwest::header::HeaderValue::from_bytes(b"\xff").unwrap());
        for (name, value) in &probe.headers {
            request = request.header(*name, value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 400);

        // 500 unsigned requests with 16 KB paths: counted, but the log grows little.
        let log = cluster.dir().join(format!("{}.log", cluster.servers()[0].host));
        let before = std::fs::metadata(&log).unwrap().len();
        let long_key = "x".repeat(16_000);
        let http = reqwest::Client::new();
        for _ in 0..500 {
            let response = http
                .get(format!("http://{addr}/v1/dev/{device}/objects/{pool}/{long_key}"))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 401);
        }
        let grown = std::fs::metadata(&log).unwrap().len() - before;
        assert!(grown < 200_000, "the log grew {grown} bytes for 500 refusals");
    });
}

#[test]
fn a_signed_request_refused_over_plain_http_cannot_be_replayed_over_tls() {
    let spec = optio_local::LocalClusterSpec { auth: true, tls: true, ..small() };
    let (_dir, cluster) = cluster(spec);
    let admin = credentials(&cluster, "client.admin");
    let addr = cluster.servers()[0].addr.clone();
    let rt = runtime();
    rt.block_on(async {
        let request = Raw::new(reqwest::Method::GET, "/v1/status").signed(&addr, &admin);
        let (status, text) = request.send(&addr).await;
        assert_eq!(status, 403, "plain HTTP: {text}");
        let config =
            optio_tls::client_config(&cluster.dir().join("tls").join("ca.pem"), None).unwrap();
        let https = reqwest::Client::builder().use_preconfigured_tls(config).build().unwrap();
        let (status, text) = request.send_with(&https, &format!("https://{addr}")).await;
        assert_eq!(status, 401, "the same request over TLS is a replay: {text}");
        let fresh = Raw::new(reqwest::Method::GET, "/v1/status").signed(&addr, &admin);
        assert_eq!(fresh.send_with(&https, &format!("https://{addr}")).await.0, 200);
    });
}

/// A signed PUT's body is bound to its signature by a hash over plain HTTP (without it, or
/// with another body's, nothing is stored), and by TLS's sealed records over TLS: there a
/// body without a hash is taken, one that comes with a wrong hash is still refused, and the
/// client library sends none (its writes, and the servers' copies between them, read back).
#[test]
fn a_signed_body_needs_its_hash_over_plain_http_but_not_over_tls() {
    let unhashed = |device, pool, key: &str| {
        let mut raw = Raw::put(device, pool, key, b"the body", 5);
        raw.headers.retain(|(name, _)| *name != CONTENT_HASH_HEADER);
        raw
    };
    let misattributed = |device, pool, key: &str| {
        let mut raw = Raw::put(device, pool, key, b"the body", 5);
        raw.headers.retain(|(name, _)| *name != CONTENT_HASH_HEADER);
        raw.header(CONTENT_HASH_HEADER, content_hash(b"another body"))
    };
    let rt = runtime();

    let (_plain_dir, plain) = secured();
    let admin = credentials(&plain, "client.admin");
    let (device, addr, pool) = first_device(&plain);
    rt.block_on(async {
        let (status, text) = unhashed(device, pool, "p1").signed(&addr, &admin).send(&addr).await;
        assert_eq!(status, 401, "plain HTTP, no hash: {text}");
        assert!(text.contains("x-optio-content-blake3"), "{text}");
        let (status, text) =
            misattributed(device, pool, "p1").signed(&addr, &admin).send(&addr).await;
        assert_eq!(status, 401, "plain HTTP, another body's hash: {text}");
        let read = Raw::object(reqwest::Method::GET, device, pool, "p1").signed(&addr, &admin);
        assert_eq!(read.send(&addr).await.0, 404, "nothing was stored");
        // The same in a frame.
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let (status, text) =
            unhashed(device, pool, "p2").signed(&addr, &admin).send_framed(&mut stream).await;
        assert_eq!(status, 401, "a frame over plain TCP, no hash: {text}");
        let read = Raw::object(reqwest::Method::GET, device, pool, "p2").signed(&addr, &admin);
        assert_eq!(read.send(&addr).await.0, 404, "nothing was stored");
    });
    drop(plain);

    let spec = optio_local::LocalClusterSpec { auth: true, tls: true, ..small() };
    let (_dir, cluster) = cluster(spec);
    let admin = credentials(&cluster, "client.admin");
    let (device, addr, pool) = first_device(&cluster);
    let ca = cluster.dir().join("tls").join("ca.pem");
    let https = reqwest::Client::builder()
        .use_preconfigured_tls(optio_tls::client_config(&ca, None).unwrap())
        .build()
        .unwrap();
    let base = format!("https://{addr}");
    rt.block_on(async {
        let (status, text) =
            unhashed(device, pool, "t1").signed(&addr, &admin).send_with(&https, &base).await;
        assert_eq!(status, 201, "TLS, no hash: {text}");
        let read = Raw::object(reqwest::Method::GET, device, pool, "t1").signed(&addr, &admin);
        let (status, text) = read.send_with(&https, &base).await;
        assert_eq!(status, 200, "{text}");
        assert!(text.ends_with("the body"), "{text}");
        let (status, text) =
            misattributed(device, pool, "t2").signed(&addr, &admin).send_with(&https, &base).await;
        assert_eq!(status, 401, "TLS, another body's hash: {text}");
        let read = Raw::object(reqwest::Method::GET, device, pool, "t2").signed(&addr, &admin);
        assert_eq!(read.send_with(&https, &base).await.0, 404, "nothing was stored");
        // Frames upgraded from a TLS connection are sealed as its HTTP is.
        let mut stream = tls_to(&addr, &ca).await;
        let (status, text) =
            unhashed(device, pool, "t3").signed(&addr, &admin).send_framed(&mut stream).await;
        assert_eq!(status, 201, "a frame over TLS, no hash: {text}");
        let mut stream = tls_to(&addr, &ca).await;
        let (status, text) =
            misattributed(device, pool, "t4").signed(&addr, &admin).send_framed(&mut stream).await;
        assert_eq!(status, 401, "a frame over TLS, another body's hash: {text}");
        let read = Raw::object(reqwest::Method::GET, device, pool, "t3").signed(&addr, &admin);
        let (status, text) = read.send_with(&https, &base).await;
        assert_eq!((status, text.ends_with("the body")), (200, true), "{text}");
        let read = Raw::object(reqwest::Method::GET, device, pool, "t4").signed(&addr, &admin);
        assert_eq!(read.send_with(&https, &base).await.0, 404, "nothing was stored");

        let config = optio_client::ClientConfig {
            credentials: Some(admin.clone()),
            tls_ca: Some(ca.clone()),
            ..optio_client::ClientConfig::default()
        };
        let client = optio_client::Client::connect_source(cluster.source().clone(), config)
            .await
            .expect("the client connects");
        for i in 0..20 {
            let body = data(i, if i % 2 == 0 { 3000 } else { 300_000 });
            client.put(PLAIN_POOL, &format!("c{i}"), body).await.expect("a put over TLS");
        }
        for i in 0..20 {
            let body = data(i, if i % 2 == 0 { 3000 } else { 300_000 });
            assert_eq!(client.get(PLAIN_POOL, &format!("c{i}")).await.unwrap(), body);
        }
    });
}

/// `optio auth …` on the cluster; its output.
fn auth(cluster: &LocalCluster, dir: &Path, args: &[&str]) -> String {
    let output = Command::new(binary())
        .arg("auth")
        .args(args)
        .arg("--cluster")
        .arg(cluster.dir())
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{args:?}: {text} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

#[test]
fn optio_auth_changes_hold_when_the_command_returns_and_a_keyring_that_does_not_load_fails_closed()
{
    let (dir, cluster) = secured();
    let (_, addr, _) = first_device(&cluster);
    let rt = runtime();
    let status_as = |who: &Credentials| {
        let request = Raw::new(reqwest::Method::GET, "/v1/status").signed(&addr, who);
        rt.block_on(request.send(&addr))
    };
    for round in 0..5 {
        let name = format!("client.app{round}");
        auth(&cluster, dir.path(), &["add", &name, "--caps", "read"]);
        let app =
            optio_cluster::keyring::credentials(&dir.path().join(format!("{name}.keyring")), &name)
                .unwrap();
        // At once, on every server.
        for server in cluster.servers() {
            let request = Raw::new(reqwest::Method::GET, "/v1/status").signed(&server.addr, &app);
            let (status, text) = rt.block_on(request.send(&server.addr));
            assert_eq!(status, 200, "round {round}, right after `auth add`: {text}");
        }
        auth(&cluster, dir.path(), &["rm", &name]);
        let (status, text) = status_as(&app);
        assert_eq!(status, 401, "round {round}, right after `auth rm`: {text}");
    }
    auth(&cluster, dir.path(), &["add", "client.kept", "--caps", "read"]);
    let kept =
        optio_cluster::keyring::credentials(&dir.path().join("client.kept.keyring"), "client.kept")
            .unwrap();
    let admin = credentials(&cluster, "client.admin");
    assert_eq!(status_as(&kept).0, 200);

    // The keyring rewritten by hand without client.kept, but left readable by others: it does
    // not load, and the server fails closed (admins only) rather than keep client.kept.
    let path = cluster.dir().join(KEYRING_FILE);
    let mut keyring = optio_cluster::keyring::load(&path).unwrap();
    assert!(keyring.remove("client.kept"));
    let loose = cluster.dir().join("keyring.loose");
    std::fs::write(&loose, keyring.to_toml()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::rename(&loose, &path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, text) = status_as(&kept);
        if status == 401 {
            assert!(text.contains("cannot load its changed keyring"), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "client.kept is still served: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status_as(&admin).0, 200, "admins are still served");
    // Fixed: every entity of the file is served again.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    auth(&cluster, dir.path(), &["add", "client.after", "--caps", "read"]);
    assert_eq!(status_as(&admin).0, 200);
    assert_eq!(status_as(&kept).0, 401, "removed");
}
