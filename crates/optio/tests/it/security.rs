//! Authentication and authorisation (issue 14) on real server processes: every request is
//! signed; what a capability lacks is refused and changes nothing; forged, altered, expired
//! and replayed requests are refused; keys rotate without downtime.

use std::time::Duration;

use optio_local::cluster::{CRUSH_POOL, KEYRING_FILE, LocalCluster, PLAIN_POOL, ensure_entities};
use optio_proto::ErrorKind;
use optio_proto::auth::{AUTH_HEADER, CONTENT_HASH_HEADER, Cap, Credentials, Key, content_hash};

use crate::{cluster, data, runtime, small, wait_until};

fn secured() -> (tempfile::TempDir, LocalCluster) {
    cluster(optio_local::LocalClusterSpec { auth: true, ..small() })
}

/// A client of the cluster signing as `id` (from the cluster's keyring).
async fn client_as(cluster: &LocalCluster, id: Option<&str>) -> optio_client::Client {
    let credentials = id.map(|id| {
        optio_cluster::keyring::credentials(&cluster.dir().join(KEYRING_FILE), id).expect("the key")
    });
    let config =
        optio_client::ClientConfig { credentials, ..optio_client::ClientConfig::default() };
    optio_client::Client::connect_source(cluster.source().clone(), config)
        .await
        .expect("the client connects")
}

/// Adds entities to the cluster's keyring and waits for the servers to reload it.
fn add_entities(cluster: &LocalCluster, entities: &[(&str, Cap)]) {
    ensure_entities(&cluster.dir().join(KEYRING_FILE), entities).expect("keyring");
    std::thread::sleep(Duration::from_millis(1500));
}

fn is_denied(error: &optio_client::ClientError) -> bool {
    let text = error.to_string();
    text.contains("forbidden")
        || text.contains("unauthorized")
        || text.contains("refused the request")
}

#[test]
fn each_operation_a_capability_lacks_is_refused_and_changes_nothing() {
    let (_dir, cluster) = secured();
    add_entities(&cluster, &[("client.reader", Cap::Read), ("client.writer", Cap::Write)]);
    let rt = runtime();
    rt.block_on(async {
        let admin = client_as(&cluster, Some("client.admin")).await;
        let reader = client_as(&cluster, Some("client.reader")).await;
        let writer = client_as(&cluster, Some("client.writer")).await;
        let anonymous = client_as(&cluster, None).await;
        let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
        for (i, key) in keys.iter().enumerate() {
            admin.put(PLAIN_POOL, key, data(i, 2000)).await.expect("admin writes");
            admin.put(CRUSH_POOL, key, data(i, 2000)).await.expect("admin writes");
        }
        for pool in [PLAIN_POOL, CRUSH_POOL] {
            for (i, key) in keys.iter().enumerate() {
                // Read-only: reads, and nothing else.
                assert_eq!(reader.get(pool, key).await.expect("a reader reads"), data(i, 2000));
                let put = reader.put(pool, key, data(100 + i, 10)).await.expect_err("no write");
                assert!(is_denied(&put), "{put}");
                let rm = reader.delete(pool, key).await.expect_err("no delete");
                assert!(is_denied(&rm), "{rm}");
                let new = reader.put(pool, "new", data(7, 10)).await.expect_err("no create");
                assert!(is_denied(&new), "{new}");
                // Unsigned: nothing at all.
                let got = anonymous.get(pool, key).await.expect_err("no anonymous read");
                assert!(is_denied(&got), "{got}");
                let put = anonymous.put(pool, key, data(200 + i, 10)).await.expect_err("no write");
                assert!(is_denied(&put), "{put}");
            }
        }
        // Nothing changed.
        for pool in [PLAIN_POOL, CRUSH_POOL] {
            for (i, key) in keys.iter().enumerate() {
                assert_eq!(admin.get(pool, key).await.unwrap(), data(i, 2000), "{pool}/{key}");
            }
            assert!(admin.get(pool, "new").await.is_err());
        }
        // A writer writes and deletes, but scrubbing and metrics are for admins.
        writer.put(PLAIN_POOL, "w", data(9, 100)).await.expect("a writer writes");
        writer.delete(PLAIN_POOL, "w").await.expect("a writer deletes");
        let addr = cluster.servers()[0].addr.clone();
        let as_writer = optio_net::HttpTransport::with_credentials(Some(
            optio_cluster::keyring::credentials(&cluster.dir().join(KEYRING_FILE), "client.writer")
                .unwrap(),
        ))
        .unwrap();
        let scrub = as_writer
            .scrub(&addr, optio_proto::own::ScrubQuery::default())
            .await
            .expect_err("no scrub");
        assert!(
            matches!(scrub, optio_net::Failure::Refused { kind: ErrorKind::Forbidden, .. }),
            "{scrub}"
        );
        assert!(scrub.to_string().contains("/v1/scrub"), "{scrub}");
        optio_net::Transport::server_status(&as_writer, &addr)
            .await
            .expect("status is readable with read");
        let metrics = reqwest::get(format!("http://{addr}/metrics")).await.unwrap();
        assert_eq!(metrics.status(), 401, "metrics need admin without --metrics-public");
        let health = reqwest::get(format!("http://{addr}/health")).await.unwrap();
        assert_eq!(health.status(), 200, "health is open");
    });
}

/// A raw signed request (what a client sends), to alter before sending.
struct Raw {
    method: reqwest::Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn put(device: u32, pool: u32, key: &str, body: &[u8], version: u64) -> Raw {
        Raw {
            method: reqwest::Method::PUT,
            path: format!("/v1/dev/{device}/objects/{pool}/{key}"),
            headers: vec![
                ("x-optio-version", version.to_string()),
                (
                    "x-optio-checksum",
                    optio_proto::wire::encode_checksum(optio_proto::checksum(body)),
                ),
                (CONTENT_HASH_HEADER, content_hash(body)),
            ],
            body: body.to_vec(),
        }
    }

    /// Signs the request for the server at `addr` (its target, [`optio_proto::wire::TARGET`]).
    fn sign(&mut self, addr: &str, credentials: &Credentials, ts_ms: u64) {
        self.headers.retain(|(name, _)| *name != AUTH_HEADER && *name != optio_proto::wire::TARGET);
        self.headers.push((optio_proto::wire::TARGET, addr.to_string()));
        let pairs: Vec<(&str, &str)> = self.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let value = credentials.sign(self.method.as_str(), &self.path, &pairs, ts_ms);
        self.headers.push((AUTH_HEADER, value));
    }

    async fn send(&self, addr: &str) -> (u16, String) {
        let mut request = reqwest::Client::new()
            .request(self.method.clone(), format!("http://{addr}{}", self.path))
            .body(self.body.clone());
        for (name, value) in &self.headers {
            request = request.header(*name, value);
        }
        let response = request.send().await.expect("an answer");
        (response.status().as_u16(), response.text().await.unwrap_or_default())
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

#[test]
fn forged_altered_expired_replayed_and_swapped_requests_are_refused_and_change_nothing() {
    let (_dir, cluster) = secured();
    let rt = runtime();
    let keyring = cluster.dir().join(KEYRING_FILE);
    let admin = optio_cluster::keyring::credentials(&keyring, "client.admin").unwrap();
    let map = cluster.load_map().unwrap();
    let pool = map.pool_by_name(PLAIN_POOL).unwrap().id.0;
    let server = &cluster.servers()[0];
    let (addr, device) = (server.addr.clone(), server.devices[0].0);
    rt.block_on(async {
        let version = now_ms() * 1000;
        let mut good = Raw::put(device, pool, "raw", b"the original", version);
        good.sign(&addr, &admin, now_ms());
        assert_eq!(good.send(&addr).await.0, 201, "a signed request is served");

        let refused = |answer: (u16, String), what: &str| {
            assert_eq!(answer.0, 401, "{what}: {}", answer.1);
            answer.1
        };
        // The same request again: a replay.
        let text = refused(good.send(&addr).await, "a replay");
        assert!(text.contains("already received"), "{text}");
        // A newer version with the body swapped after signing.
        let mut swapped = Raw::put(device, pool, "raw", b"the forgery!", version + 1);
        swapped.sign(&addr, &admin, now_ms());
        swapped.body = b"evil payload".to_vec();
        let text = refused(swapped.send(&addr).await, "a swapped body");
        assert!(text.contains("body does not match"), "{text}");
        // A header changed after signing.
        let mut altered = Raw::put(device, pool, "raw", b"the forgery!", version + 2);
        altered.sign(&addr, &admin, now_ms());
        altered.headers[0].1 = (version + 3).to_string();
        refused(altered.send(&addr).await, "an altered header");
        // Signed with a key the cluster does not know (a rogue server, a guessed key).
        let rogue = Credentials { id: "server.rogue".into(), key: Key::generate().unwrap() };
        let mut forged = Raw::put(device, pool, "raw", b"the forgery!", version + 4);
        forged.sign(&addr, &rogue, now_ms());
        let text = refused(forged.send(&addr).await, "an unknown entity");
        assert!(text.contains("unknown entity"), "{text}");
        let wrong_key = Credentials { id: "client.admin".into(), key: Key::generate().unwrap() };
        forged.sign(&addr, &wrong_key, now_ms());
        refused(forged.send(&addr).await, "a wrong key");
        // Expired (captured a minute ago), and truncated.
        let mut old = Raw::put(device, pool, "raw", b"the forgery!", version + 5);
        old.sign(&addr, &admin, now_ms() - 60_000);
        let text = refused(old.send(&addr).await, "an expired request");
        assert!(text.contains("outside its window"), "{text}");
        let mut truncated = Raw::put(device, pool, "raw", b"the forgery!", version + 6);
        truncated.sign(&addr, &admin, now_ms());
        let last = truncated.headers.last_mut().unwrap();
        last.1.truncate(last.1.len() - 10);
        refused(truncated.send(&addr).await, "a truncated signature");
        // Unsigned.
        let unsigned = Raw::put(device, pool, "raw", b"the forgery!", version + 7);
        refused(unsigned.send(&addr).await, "an unsigned request");

        // Nothing changed, and every refusal was counted.
        let reader = client_as(&cluster, Some("client.admin")).await;
        assert_eq!(&reader.get(PLAIN_POOL, "raw").await.unwrap()[..], b"the original");
        // /metrics needs a signed GET: made by hand.
        let mut metrics = Raw {
            method: reqwest::Method::GET,
            path: "/metrics".into(),
            headers: vec![],
            body: vec![],
        };
        metrics.sign(&addr, &admin, now_ms());
        let (status, text) = metrics.send(&addr).await;
        assert_eq!(status, 200);
        for reason in
            ["replayed", "bad_signature", "unknown_entity", "expired", "malformed", "unsigned"]
        {
            let line = text
                .lines()
                .find(|l| {
                    l.starts_with(&format!("optio_auth_refused_total{{reason=\"{reason}\"}}"))
                })
                .unwrap_or_else(|| panic!("no counter for {reason}"));
            assert!(!line.ends_with(" 0"), "{line}");
        }
    });
}

#[test]
fn a_rotated_key_keeps_working_for_its_grace_and_a_removed_entity_is_refused() {
    let (_dir, cluster) = secured();
    add_entities(&cluster, &[("client.app", Cap::Write)]);
    let keyring = cluster.dir().join(KEYRING_FILE);
    let old = optio_cluster::keyring::credentials(&keyring, "client.app").unwrap();
    let rt = runtime();
    let run = |args: &[&str]| {
        let output = std::process::Command::new(crate::binary())
            .args(args)
            .arg("--keyring")
            .arg(&keyring)
            .current_dir(cluster.dir())
            .output()
            .expect("optio runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let out = run(&["auth", "rotate", "client.app", "--grace", "1h", "-o", "app.keyring"]);
    assert!(out.contains("old key stays valid"), "{out}");
    std::thread::sleep(Duration::from_millis(1500));
    let new = optio_cluster::keyring::credentials(&cluster.dir().join("app.keyring"), "client.app")
        .unwrap();
    assert_ne!(format!("{:?}", new.key.to_base64()), format!("{:?}", old.key.to_base64()));
    rt.block_on(async {
        for (name, credentials) in [("old", &old), ("new", &new)] {
            let config = optio_client::ClientConfig {
                credentials: Some(credentials.clone()),
                ..optio_client::ClientConfig::default()
            };
            let client = optio_client::Client::connect_source(cluster.source().clone(), config)
                .await
                .unwrap();
            client
                .put(PLAIN_POOL, name, data(1, 10))
                .await
                .unwrap_or_else(|e| panic!("{name} key: {e}"));
        }
    });
    // Rotated again without grace: only the newest key works; removed: nothing does.
    run(&["auth", "rotate", "client.app", "--grace", "0s", "-o", "app.keyring"]);
    std::thread::sleep(Duration::from_millis(1500));
    let newest =
        optio_cluster::keyring::credentials(&cluster.dir().join("app.keyring"), "client.app")
            .unwrap();
    let put_with = |credentials: &Credentials| {
        let config = optio_client::ClientConfig {
            credentials: Some(credentials.clone()),
            ..optio_client::ClientConfig::default()
        };
        rt.block_on(async {
            let client = optio_client::Client::connect_source(cluster.source().clone(), config)
                .await
                .unwrap();
            client.put(PLAIN_POOL, "after", data(2, 10)).await
        })
    };
    assert!(put_with(&newest).is_ok());
    for stale in [&old, &new] {
        let error = put_with(stale).expect_err("an old key");
        assert!(is_denied(&error), "{error}");
    }
    run(&["auth", "rm", "client.app"]);
    std::thread::sleep(Duration::from_millis(1500));
    let error = put_with(&newest).expect_err("a removed entity");
    assert!(error.to_string().contains("unknown entity"), "{error}");
}

/// No server logged a refused request.
fn assert_no_refusals(cluster: &LocalCluster) {
    for server in cluster.servers() {
        let log = std::fs::read_to_string(cluster.dir().join(format!("{}.log", server.host)))
            .unwrap_or_default();
        assert!(!log.contains("refused a request"), "{}: {log}", server.host);
    }
}

/// Waits until every server in `addrs` has settled at `epoch` with device `emptied` holding
/// nothing (its data moved between the servers).
async fn wait_emptied(
    transport: &optio_net::HttpTransport,
    addrs: &[String],
    epoch: u64,
    emptied: u32,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut settled = true;
        for addr in addrs {
            let status = optio_net::Transport::server_status(transport, addr).await.unwrap();
            settled &= status.migration.settled_at(epoch)
                && status.devices.iter().all(|d| d.metrics.device != emptied || d.objects == 0);
        }
        if settled {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the data of device {emptied} did not move");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every server's key rotated with no grace at all: each server picks its new key up from the
/// keyring it follows and signs with it, so data still moves between them (no restart).
#[test]
fn servers_sign_with_their_rotated_keys_without_a_restart() {
    let spec = optio_local::LocalClusterSpec { auth: true, hosts_per_zone: 2, ..small() };
    let (_dir, cluster) = cluster(spec);
    let keyring = cluster.dir().join(KEYRING_FILE);
    let rt = runtime();
    let admin = optio_cluster::keyring::credentials(&keyring, "client.admin").unwrap();
    let client = rt.block_on(client_as(&cluster, Some("client.admin")));
    rt.block_on(async {
        for i in 0..40 {
            client.put(PLAIN_POOL, &format!("r{i}"), data(i, 3000)).await.expect("a put");
        }
    });
    let servers: Vec<String> = optio_cluster::keyring::load(&keyring)
        .unwrap()
        .entities()
        .map(|e| e.name.clone())
        .filter(|name| name.starts_with("server."))
        .collect();
    assert!(servers.len() >= 3, "{servers:?}");
    for server in &servers {
        let output = std::process::Command::new(crate::binary())
            .args(["auth", "rotate", server, "--grace", "0s", "--keyring"])
            .arg(&keyring)
            // Its key file goes with the cluster, not into the working directory.
            .current_dir(cluster.dir())
            .output()
            .expect("optio runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    std::thread::sleep(Duration::from_millis(2500));
    let out = optio_placement::MapChange::SetState {
        device: optio_placement::DeviceId(4),
        up: None,
        is_in: Some(false),
    };
    cluster.change_map(&out).expect("device 4 out");
    let epoch = cluster.load_map().unwrap().epoch().0;
    let transport = optio_net::HttpTransport::with_credentials(Some(admin)).unwrap();
    let addrs: Vec<String> = cluster.servers().iter().map(|s| s.addr.clone()).collect();
    rt.block_on(async {
        wait_emptied(&transport, &addrs, epoch, 4).await;
        for i in 0..40 {
            assert_eq!(client.get(PLAIN_POOL, &format!("r{i}")).await.unwrap(), data(i, 3000));
        }
    });
    assert_no_refusals(&cluster);
}

#[test]
fn key_files_others_may_read_are_refused_by_the_cli() {
    let (_dir, cluster) = secured();
    let keyring = cluster.dir().join(KEYRING_FILE);
    let mode = |m| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&keyring, std::fs::Permissions::from_mode(m)).unwrap();
    };
    mode(0o644);
    let output = std::process::Command::new(crate::binary())
        .args(["ls", "--cluster"])
        .arg(cluster.dir())
        .output()
        .expect("optio runs");
    mode(0o600);
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(err.contains("chmod 600"), "{err}");
}

/// Servers sign their own traffic: with authentication on, data still moves when a device
/// goes out (migration between servers), and every object reads back.
#[test]
fn servers_move_data_between_them_with_their_own_keys() {
    use optio_placement::{DeviceId, MapChange};
    let (_dir, cluster) =
        cluster(optio_local::LocalClusterSpec { auth: true, hosts_per_zone: 2, ..small() });
    let rt = runtime();
    let admin =
        optio_cluster::keyring::credentials(&cluster.dir().join(KEYRING_FILE), "client.admin")
            .unwrap();
    let transport = optio_net::HttpTransport::with_credentials(Some(admin)).unwrap();
    let client = rt.block_on(client_as(&cluster, Some("client.admin")));
    rt.block_on(async {
        for i in 0..300 {
            client.put(PLAIN_POOL, &format!("m{i}"), data(i, 3000)).await.expect("put");
        }
    });
    let out = MapChange::SetState { device: DeviceId(4), up: None, is_in: Some(false) };
    cluster.change_map(&out).expect("device 4 out");
    let epoch = cluster.load_map().unwrap().epoch().0;
    let addrs: Vec<String> = cluster.servers().iter().map(|s| s.addr.clone()).collect();
    rt.block_on(async {
        wait_emptied(&transport, &addrs, epoch, 4).await;
        for i in 0..300 {
            assert_eq!(client.get(PLAIN_POOL, &format!("m{i}")).await.unwrap(), data(i, 3000));
        }
    });
    // No server ever refused another: every server's entity was in the keyring before the
    // first one started (they used to be added one by one, and catching up at start was
    // refused — "unknown entity" — until the keyring was reloaded).
    assert_no_refusals(&cluster);
}

/// `optio up --tls`: servers take TLS (data moves between them over it); a client that does
/// not trust their CA is refused at the handshake, a plain request gets 403, `/health` stays
/// open over plain HTTP for the monitors.
#[test]
fn tls_clusters_refuse_plain_requests_and_clients_with_another_ca() {
    let spec =
        optio_local::LocalClusterSpec { auth: true, tls: true, hosts_per_zone: 2, ..small() };
    let (_dir, cluster) = cluster(spec);
    let rt = runtime();
    let keyring = cluster.dir().join(KEYRING_FILE);
    let admin = optio_cluster::keyring::credentials(&keyring, "client.admin").unwrap();
    let ca = cluster.dir().join("tls/ca.pem");
    let connect = |tls_ca: Option<std::path::PathBuf>| {
        let config = optio_client::ClientConfig {
            credentials: Some(admin.clone()),
            tls_ca,
            ..optio_client::ClientConfig::default()
        };
        rt.block_on(optio_client::Client::connect_source(cluster.source().clone(), config))
            .expect("the client connects")
    };
    let client = connect(Some(ca.clone()));
    rt.block_on(async {
        for i in 0..50 {
            client.put(PLAIN_POOL, &format!("t{i}"), data(i, 5000)).await.expect("a put over TLS");
        }
    });
    // Data moves between servers over TLS.
    let out = optio_placement::MapChange::SetState {
        device: optio_placement::DeviceId(4),
        up: None,
        is_in: Some(false),
    };
    cluster.change_map(&out).expect("device 4 out");
    let epoch = cluster.load_map().unwrap().epoch().0;
    let transport =
        optio_net::HttpTransport::with_options(Some(admin.clone()), Some(&ca), None).unwrap();
    let addrs: Vec<String> = cluster.servers().iter().map(|s| s.addr.clone()).collect();
    rt.block_on(async {
        wait_emptied(&transport, &addrs, epoch, 4).await;
        for i in 0..50 {
            assert_eq!(client.get(PLAIN_POOL, &format!("t{i}")).await.unwrap(), data(i, 5000));
        }
    });
    // Plain HTTP: refused (but /health answers).
    let plain = connect(None);
    let error = rt.block_on(plain.get(PLAIN_POOL, "t0")).expect_err("plain HTTP");
    assert!(error.to_string().contains("takes TLS"), "{error}");
    // A ranged read goes as a frame over an upgraded plain connection: refused just the same.
    let error = rt.block_on(plain.read_in_place(PLAIN_POOL, "t0", 0, 100)).expect_err("frames");
    assert!(error.to_string().contains("takes TLS"), "{error}");
    let addr = &addrs[0];
    let health = rt.block_on(reqwest::get(format!("http://{addr}/health"))).unwrap();
    assert_eq!(health.status(), 200);
    // Another CA: the handshake fails.
    let other = tempfile::tempdir().unwrap();
    let other_ca = optio_local::cluster::ensure_tls(other.path(), "127.0.0.1").unwrap().ca;
    let stranger = connect(Some(other_ca));
    let error = rt
        .block_on(stranger.get(PLAIN_POOL, "t0"))
        .expect_err("a CA the servers' certificates are not from");
    let text = format!("{error:?}").to_lowercase();
    assert!(text.contains("certificate") || text.contains("unreachable"), "{error}");

    // Mutual TLS: a client certificate from the cluster's CA is an identity, its entity's
    // capability applies; unsigned requests are taken on it alone.
    add_entities(&cluster, &[("client.reader", Cap::Read)]);
    let tls_dir = cluster.dir().join("tls");
    let ca_files = optio_local::tls::Ca::open(&tls_dir).expect("the cluster's CA");
    // The reader's certificate from `optio auth cert` (issued and recorded in the keyring).
    let keyring = cluster.dir().join(KEYRING_FILE);
    let (keyring_arg, other_arg) = (keyring.to_str().unwrap(), other.path().to_str().unwrap());
    let out = crate::support::optio_ok(&[
        "auth",
        "cert",
        "client.reader",
        "--keyring",
        keyring_arg,
        "-o",
        other_arg,
    ]);
    assert!(out.contains("recorded in the keyring"), "{out}");
    let reader = optio_local::tls::Issued {
        cert: other.path().join("client.reader.pem"),
        key: other.path().join("client.reader-key.pem"),
        fingerprint: optio_local::tls::inspect(&other.path().join("client.reader.pem"))
            .unwrap()
            .fingerprint,
    };
    let ghost = ca_files.issue_client(other.path(), "ghost", "client.ghost").unwrap();
    let stranger_ca = optio_local::tls::Ca::open_or_create(&other.path().join("ca2")).unwrap();
    let forged = stranger_ca.issue_client(other.path(), "forged", "client.admin").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let by_cert = |cert: &std::path::Path, key: &std::path::Path| {
        let config = optio_client::ClientConfig {
            credentials: None,
            tls_ca: Some(ca.clone()),
            tls_identity: Some((cert.to_path_buf(), key.to_path_buf())),
            ..optio_client::ClientConfig::default()
        };
        rt.block_on(optio_client::Client::connect_source(cluster.source().clone(), config))
            .expect("the client connects")
    };
    let files = optio_local::cluster::tls_files(cluster.dir());
    let admin_by_cert = by_cert(&files.admin_cert, &files.admin_key);
    let reader_by_cert = by_cert(&reader.cert, &reader.key);
    let ghost_by_cert = by_cert(&ghost.cert, &ghost.key);
    let forged_by_cert = by_cert(&forged.cert, &forged.key);
    rt.block_on(async {
        admin_by_cert.put(PLAIN_POOL, "m0", data(7, 3000)).await.expect("admin by certificate");
        assert_eq!(reader_by_cert.get(PLAIN_POOL, "m0").await.unwrap(), data(7, 3000));
        let refused =
            reader_by_cert.put(PLAIN_POOL, "m0", data(8, 10)).await.expect_err("read only");
        assert!(is_denied(&refused), "{refused}");
        let refused = ghost_by_cert.get(PLAIN_POOL, "m0").await.expect_err("unknown");
        assert!(is_denied(&refused) || refused.to_string().contains("unknown entity"), "{refused}");
        forged_by_cert
            .get(PLAIN_POOL, "m0")
            .await
            .expect_err("a certificate from another CA fails the handshake");
        assert_eq!(admin_by_cert.get(PLAIN_POOL, "m0").await.unwrap(), data(7, 3000), "unchanged");
    });
    // The keyring stays the one list: an entity removed from it is refused by certificate too.
    crate::support::optio_ok(&[
        "auth",
        "rm",
        "client.reader",
        "--keyring",
        keyring.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_millis(1500));
    let refused = rt.block_on(reader_by_cert.get(PLAIN_POOL, "m0")).expect_err("removed");
    assert!(refused.to_string().contains("unknown entity"), "{refused}");
    // From the command line: --tls-cert/--tls-key, no keyring.
    let input = other.path().join("input");
    std::fs::write(&input, data(9, 4000)).unwrap();
    let dir_arg = cluster.dir().display().to_string();
    let (cert, key) =
        (files.admin_cert.display().to_string(), files.admin_key.display().to_string());
    let args =
        ["--cluster", &dir_arg, "--pool", PLAIN_POOL, "--tls-cert", &cert, "--tls-key", &key];
    let mut put = vec!["put", "cli-m"];
    put.extend(args);
    put.push(input.to_str().unwrap());
    crate::support::optio_ok(&put);
    let mut get = vec!["get", "cli-m"];
    get.extend(args);
    let output = crate::support::optio(&get);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.stdout, data(9, 4000));
}

/// How long a revocation may take to reach the servers: they reload the keyring every second.
const REVOCATION_BOUND: Duration = Duration::from_secs(5);

/// Issue 36 item 9: what `optio up --tls` makes has bounded validity and proper usages — a CA
/// valid for a year that may sign end-entity certificates only (`pathlen:0`, keyCertSign and
/// cRLSign), a server certificate for `serverAuth` and `client.admin`'s for `clientAuth`,
/// both valid for 90 days and no CA — and the keyring records `client.admin`'s certificate.
#[test]
fn generated_certificates_are_bounded_constrained_and_for_one_purpose() {
    use x509_parser::prelude::*;
    let (_dir, cluster) =
        cluster(optio_local::LocalClusterSpec { auth: true, tls: true, ..small() });
    let files = optio_local::cluster::tls_files(cluster.dir());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
        as i64;
    const DAY: i64 = 24 * 3600;
    let read = |path: &std::path::Path| {
        let bytes = std::fs::read(path).unwrap();
        let (_, pem) = parse_x509_pem(&bytes).unwrap();
        pem.contents
    };
    let ca = read(&files.ca);
    let (_, ca) = parse_x509_certificate(&ca).unwrap();
    let validity = ca.validity();
    assert!(validity.not_before.timestamp() <= now, "the CA is valid now");
    assert!(validity.not_before.timestamp() >= now - DAY, "backdated by little: {validity:?}");
    let ca_days = (validity.not_after.timestamp() - now) / DAY;
    assert!((364..=366).contains(&ca_days), "the CA lives a year, not {ca_days} days");
    let constraints = ca.basic_constraints().unwrap().expect("basicConstraints").value;
    assert!(constraints.ca && constraints.path_len_constraint == Some(0), "{constraints:?}");
    let usage = ca.key_usage().unwrap().expect("the CA has a keyUsage").value;
    assert!(usage.key_cert_sign() && usage.crl_sign(), "{usage:?}");
    assert!(!usage.digital_signature() && !usage.key_encipherment(), "{usage:?}");
    for (path, server) in [(&files.cert, true), (&files.admin_cert, false)] {
        let der = read(path);
        let (_, cert) = parse_x509_certificate(&der).unwrap();
        let validity = cert.validity();
        assert!(validity.not_before.timestamp() <= now, "{}", path.display());
        let days = (validity.not_after.timestamp() - now) / DAY;
        assert!((89..=90).contains(&days), "{}: valid {days} days", path.display());
        let constraints = cert.basic_constraints().unwrap().map(|c| c.value.ca);
        assert_eq!(constraints, Some(false), "{}: explicitly no CA", path.display());
        let usage = cert.key_usage().unwrap().expect("a keyUsage").value;
        assert!(usage.digital_signature() && !usage.key_cert_sign(), "{usage:?}");
        let purpose = cert.extended_key_usage().unwrap().expect("an extendedKeyUsage").value;
        assert!(!purpose.any, "{}", path.display());
        assert_eq!((purpose.server_auth, purpose.client_auth), (server, !server), "{purpose:?}");
        assert_eq!(cert.issuer(), ca.subject(), "issued by the CA");
    }
    let keyring = optio_cluster::keyring::load(&cluster.dir().join(KEYRING_FILE)).unwrap();
    let admin = optio_local::tls::inspect(&files.admin_cert).unwrap().fingerprint;
    assert_eq!(keyring.certificates("client.admin").current, vec![admin], "recorded");
}

/// Issue 36 item 9: a client certificate dies with its entity's key. `optio auth rotate
/// client.admin --grace 0s` refuses the old certificate's unsigned PUT and scrub within a
/// second or so (a grace keeps it working until then); the certificate the rotation issued
/// works; `optio auth rm` refuses an entity's certificate; a certificate of the cluster's CA
/// the keyring does not record (as for every entity of an older keyring) is refused, with
/// the reason, until `optio auth cert ENTITY --from CERT.pem` records it (for the entity its
/// common name names only).
#[test]
fn a_client_certificate_is_revoked_with_its_entity() {
    let (_dir, cluster) =
        cluster(optio_local::LocalClusterSpec { auth: true, tls: true, ..small() });
    let rt = runtime();
    let files = optio_local::cluster::tls_files(cluster.dir());
    let keyring = cluster.dir().join(KEYRING_FILE);
    let out = tempfile::tempdir().unwrap();
    let optio = |args: &[&str]| {
        let output = std::process::Command::new(crate::binary())
            .args(args)
            .arg("--keyring")
            .arg(&keyring)
            .current_dir(out.path())
            .output()
            .expect("optio runs");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
        text
    };
    let addr = cluster.servers()[0].addr.clone();
    // What a certificate (and no key) may do now: an unsigned PUT (of `value` to the object
    // `c`), and a scrub (admin).
    let by_cert = |cert: &std::path::Path, key: &std::path::Path, value: usize| {
        let config = optio_client::ClientConfig {
            credentials: None,
            tls_ca: Some(files.ca.clone()),
            tls_identity: Some((cert.to_path_buf(), key.to_path_buf())),
            ..optio_client::ClientConfig::default()
        };
        rt.block_on(async {
            let client = optio_client::Client::connect_source(cluster.source().clone(), config)
                .await
                .expect("the client connects");
            client.put(PLAIN_POOL, "c", data(value, 1000)).await.map(|_| ())
        })
    };
    let scrub_by_cert = |cert: &std::path::Path, key: &std::path::Path| {
        let transport =
            optio_net::HttpTransport::with_options(None, Some(&files.ca), Some((cert, key)))
                .unwrap();
        rt.block_on(transport.scrub(&addr, optio_proto::own::ScrubQuery::default())).map(|_| ())
    };
    // Whether each server takes the certificate now (`/v1/status`, which changes nothing):
    // servers reload the keyring on their own, each within a second.
    let addrs: Vec<String> = cluster.servers().iter().map(|s| s.addr.clone()).collect();
    let taken = |cert: &std::path::Path, key: &std::path::Path| -> Vec<bool> {
        let transport =
            optio_net::HttpTransport::with_options(None, Some(&files.ca), Some((cert, key)))
                .unwrap();
        rt.block_on(async {
            let mut taken = Vec::new();
            for addr in &addrs {
                taken.push(optio_net::Transport::server_status(&transport, addr).await.is_ok());
            }
            taken
        })
    };
    let everywhere = |cert: &std::path::Path, key: &std::path::Path| {
        wait_until(REVOCATION_BOUND, || taken(cert, key).iter().all(|t| *t))
    };
    let nowhere = |cert: &std::path::Path, key: &std::path::Path| {
        wait_until(REVOCATION_BOUND, || taken(cert, key).iter().all(|t| !*t))
    };
    // What is stored, read with client.admin's key (whatever its certificates).
    let stored = || {
        let config = optio_client::ClientConfig {
            credentials: Some(
                optio_cluster::keyring::credentials(&keyring, "client.admin").unwrap(),
            ),
            tls_ca: Some(files.ca.clone()),
            ..optio_client::ClientConfig::default()
        };
        rt.block_on(async {
            let client = optio_client::Client::connect_source(cluster.source().clone(), config)
                .await
                .expect("the client connects");
            client.get(PLAIN_POOL, "c").await.unwrap()
        })
    };
    let (old_cert, old_key) = (files.admin_cert.clone(), files.admin_key.clone());
    by_cert(&old_cert, &old_key, 1).expect("client.admin's certificate writes");
    scrub_by_cert(&old_cert, &old_key).expect("and scrubs");

    // A rotation with a grace: the old certificate still works; so does the new one.
    let said = optio(&["auth", "rotate", "client.admin", "--grace", "1h", "-o", "admin.keyring"]);
    assert!(said.contains("certificates stay valid"), "{said}");
    let (new_cert, new_key) =
        (out.path().join("client.admin.pem"), out.path().join("client.admin-key.pem"));
    assert!(said.contains("client certificate of client.admin: client.admin.pem"), "{said}");
    let (second_cert, second_key) =
        (out.path().join("second.pem"), out.path().join("second-key.pem"));
    std::fs::copy(&new_cert, &second_cert).unwrap();
    std::fs::copy(&new_key, &second_key).unwrap();
    assert!(everywhere(&second_cert, &second_key), "the certificate the rotation issued works");
    by_cert(&second_cert, &second_key, 2).expect("it writes");
    by_cert(&old_cert, &old_key, 3).expect("the old certificate works during the grace");

    // Without a grace: every certificate from before is refused, write and scrub alike.
    let said = optio(&["auth", "rotate", "client.admin", "--grace", "0s", "-o", "admin.keyring"]);
    assert!(said.contains("certificates are revoked"), "{said}");
    let refused = nowhere(&old_cert, &old_key);
    assert!(refused, "the old certificate still writes {REVOCATION_BOUND:?} after the rotation");
    assert_eq!(stored(), data(3, 1000), "refused writes changed nothing");
    let error = by_cert(&old_cert, &old_key, 5).expect_err("revoked");
    assert!(error.to_string().contains("not one the keyring records"), "{error}");
    let error = scrub_by_cert(&old_cert, &old_key).expect_err("a revoked certificate scrubs");
    assert!(
        matches!(error, optio_net::Failure::Refused { kind: ErrorKind::Unauthorized, .. }),
        "{error}"
    );
    by_cert(&second_cert, &second_key, 6).expect_err("the grace's certificate is revoked too");
    by_cert(&new_cert, &new_key, 7).expect("the newest certificate works");
    scrub_by_cert(&new_cert, &new_key).expect("and scrubs");
    assert_eq!(stored(), data(7, 1000));

    // Removed: its certificate is refused.
    let said =
        optio(&["auth", "add", "client.app", "--caps", "write", "--cert", "-o", "app.keyring"]);
    assert!(said.contains("recorded in the keyring"), "{said}");
    let (app_cert, app_key) =
        (out.path().join("client.app.pem"), out.path().join("client.app-key.pem"));
    assert!(everywhere(&app_cert, &app_key));
    by_cert(&app_cert, &app_key, 8).expect("a writer's certificate writes");
    optio(&["auth", "rm", "client.app"]);
    let refused = nowhere(&app_cert, &app_key);
    assert!(refused, "a removed entity's certificate still writes");
    let error = by_cert(&app_cert, &app_key, 9).expect_err("removed");
    assert!(error.to_string().contains("unknown entity"), "{error}");

    // From the cluster's CA but not recorded (an entity of an older keyring): refused.
    optio(&["auth", "add", "client.old", "--caps", "write", "-o", "old.keyring"]);
    let ca = optio_local::tls::Ca::open(&cluster.dir().join("tls")).unwrap();
    let unrecorded = ca.issue_client(out.path(), "unrecorded", "client.old").unwrap();
    // Refused as unknown until the servers reload the keyring, then as not recorded.
    let reason = |error: optio_client::ClientError| error.to_string();
    let said = wait_until(REVOCATION_BOUND, || {
        let refused = by_cert(&unrecorded.cert, &unrecorded.key, 10).map_err(reason);
        let refused = refused.expect_err("not recorded");
        refused.contains("records none") && !refused.contains("unknown entity")
    });
    assert!(said, "{:?}", by_cert(&unrecorded.cert, &unrecorded.key, 10));
    // Recorded from its file (`--from`; its common name must be the entity), it is taken.
    let from = unrecorded.cert.to_str().unwrap();
    let output = std::process::Command::new(crate::binary())
        .args(["auth", "cert", "client.app2", "--from", from, "--keyring"])
        .arg(&keyring)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("no entity client.app2"), "{stderr}");
    optio(&["auth", "add", "client.app2", "--caps", "read", "-o", "app2.keyring"]);
    let output = std::process::Command::new(crate::binary())
        .args(["auth", "cert", "client.app2", "--from", from, "--keyring"])
        .arg(&keyring)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("common name of") && stderr.contains("client.old"), "{stderr}");
    let said = optio(&["auth", "cert", "client.old", "--from", from]);
    assert!(said.contains("recorded the certificate"), "{said}");
    assert!(everywhere(&unrecorded.cert, &unrecorded.key), "a recorded certificate is taken");
    assert_eq!(stored(), data(8, 1000), "no refused request changed the object");
}

/// The parent's pid in `/proc/PID/stat` (after the command's closing parenthesis).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// `pid` and every process below it.
fn process_tree(pid: u32) -> Vec<u32> {
    let all: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(all.iter().filter(|p| parent_of(**p) == Some(parent)));
        i += 1;
    }
    tree
}

/// Every file and directory under `dir` that group or others may use (sockets aside), with
/// its mode.
fn loose_entries(dir: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let mut loose = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if meta.file_type().is_socket() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            loose.push(format!("{} {mode:04o}", path.display()));
        }
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().filter_map(|e| Some(e.ok()?.path())));
        }
    }
    loose
}

/// Issue 36 item 19: `optio up` makes its directory 0700 (an existing looser one is
/// tightened) and every file in it — logs, the map, the keyring, TLS keys, the dirty-source
/// spec, the dirty table's spill, intent logs — the owner's only; a Redis password in
/// `--dirty`'s URL is refused without being echoed (it would sit in `DIR/dirty-source` and on
/// the command line), and one from `OPTIO_REDIS_PASSWORD_FILE` reaches Redis from `optio up`'s
/// processes and from commands while no process's command line holds it.
#[test]
fn the_cluster_directory_is_private_and_redis_passwords_stay_off_command_lines() {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    if !optio_local::redis::redis_available() {
        return;
    }
    const PASSWORD: &str = "dirty-Secret-36";
    let redis = optio_local::redis::RedisServer::start_with_password(PASSWORD).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let password_file = tmp.path().join("redis-password");
    optio_cluster::keyring::write_private(&password_file, format!("{PASSWORD}\n").as_bytes())
        .unwrap();
    let dir = tmp.path().join("c");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let up = |dirty: &str| {
        let mut command = std::process::Command::new(crate::binary());
        command
            .args(["up", "--dir"])
            .arg(&dir)
            .args(["--zones", "3", "--hosts", "1", "--tls", "--dirty", dirty])
            .env_remove("OPTIO_REDIS_PASSWORD")
            .env("OPTIO_REDIS_PASSWORD_FILE", &password_file)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command.spawn().expect("optio up starts")
    };

    // A password in the URL: refused at once, and not echoed.
    let mut refused = up(&format!("redis://:{PASSWORD}@127.0.0.1:{}", redis.port()));
    if !wait_until(Duration::from_secs(20), || matches!(refused.try_wait(), Ok(Some(_)))) {
        let _ = refused.kill();
        let _ = refused.wait();
        panic!("`optio up` took a Redis password on its command line");
    }
    let output = refused.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("OPTIO_REDIS_PASSWORD_FILE"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "the password is echoed: {stderr}");

    // The password from a file named in the environment.
    let mut cluster = up(&redis.url());
    let mut servers = Vec::new();
    for line in std::io::BufReader::new(cluster.stdout.take().unwrap()).lines() {
        let line = line.expect("output");
        if line.starts_with('z') && line.contains("127.0.0.1:") {
            servers.push(line.split_whitespace().last().unwrap().parse::<u32>().expect("a pid"));
        }
        if line.contains("Ctrl-C") {
            break;
        }
    }
    assert_eq!(servers.len(), 3, "the cluster runs");
    let optio = |args: &[&str], input: &[u8]| {
        use std::io::Write;
        let mut child = std::process::Command::new(crate::binary())
            .args(args)
            .env("OPTIO_CLUSTER", &dir)
            .env_remove("OPTIO_REDIS_PASSWORD")
            .env("OPTIO_REDIS_PASSWORD_FILE", &password_file)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    };
    // Commands reach Redis (the dirty table opens with the password) and write intent logs.
    optio(&["put", "k", "-"], b"value");
    optio(&["put", "e", "-", "--pool", optio_local::cluster::ELASTIC_POOL], b"elastic");

    let mode = |path: &std::path::Path| {
        std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&dir), 0o700, "the cluster directory");
    let spec = std::fs::read_to_string(dir.join("dirty-source")).unwrap();
    assert!(!spec.contains(PASSWORD), "{spec}");
    for name in ["dirty-source", "map.toml", "z1-h1.log", "keyring", "intents", "dirty-spill"] {
        let path = dir.join(name);
        assert!(path.exists(), "{} is missing", path.display());
        assert_eq!(mode(&path) & 0o077, 0, "{} is {:04o}", path.display(), mode(&path));
    }
    let loose = loose_entries(&dir);
    assert!(loose.is_empty(), "others may use: {loose:#?}");

    // No process of the cluster has the password on its command line; the re-integrator
    // (which reads the dirty table) got it from the environment and runs.
    let tree = process_tree(cluster.id());
    assert!(tree.len() > servers.len(), "{tree:?}");
    let mut reintegrator = None;
    for pid in &tree {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(!cmdline.contains(PASSWORD), "pid {pid}: {cmdline}");
        if cmdline.contains(" reintegrate ") {
            reintegrator = Some(*pid);
        }
    }
    let reintegrator = reintegrator.expect("a re-integrator runs");
    std::thread::sleep(Duration::from_millis(500));
    assert!(std::path::Path::new(&format!("/proc/{reintegrator}")).exists(), "it runs");
    let log = std::fs::read_to_string(dir.join("reintegrator.log")).unwrap_or_default();
    assert!(!log.contains("refused the credentials"), "{log}");

    cluster.kill().expect("SIGKILL");
    cluster.wait().expect("reaped");
    let gone = || servers.iter().all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists());
    assert!(wait_until(Duration::from_secs(20), gone), "servers outlived the cluster");
}

/// The map in an etcd with authentication on, reached from the command line: the user in the
/// URL, the password from a file named in the environment; a missing or wrong password stops
/// a command and a server at start-up with a clear error, and is never echoed.
#[test]
fn commands_and_servers_reach_an_etcd_with_credentials() {
    use optio_local::etcd::{EtcdServer, EtcdUser, etcd_available};
    if !etcd_available() {
        return;
    }
    let etcd = EtcdServer::start().expect("etcd starts");
    let user = |name: &str, password: &str, prefix: Option<&str>| EtcdUser {
        name: name.into(),
        password: password.into(),
        prefix: prefix.map(String::from),
    };
    etcd.enable_auth(&[user("root", "root-pw", None), user("optio", "optio-pw", Some("/optio/"))])
        .expect("authentication on");
    let dir = tempfile::tempdir().expect("tempdir");
    let password_file = dir.path().join("etcd-password");
    std::fs::write(&password_file, "optio-pw\n").expect("write");
    let wrong_file = dir.path().join("wrong-password");
    std::fs::write(&wrong_file, "Wr0ngSecret\n").expect("write");
    let url = etcd.url().replace("etcd://", "etcd://optio@");

    // Store a map with the library, as `optio up --etcd` would.
    let access =
        optio_cluster::etcd::EtcdAccess { password: Some("optio-pw".into()), ..Default::default() };
    let store = optio_cluster::etcd::EtcdStore::parse_with(&url, &access).expect("a source");
    runtime().block_on(async {
        let text = std::fs::read_to_string(crate::support::example("small.toml")).expect("read");
        let map = optio_mapfile::parse(&text).expect("map");
        optio_cluster::MapSource::Etcd(store).initialize(&map).await.expect("stored")
    });

    let run = |args: &[&str], password_file: Option<&std::path::Path>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_optio"));
        command.args(args).env_remove("OPTIO_ETCD_PASSWORD");
        match password_file {
            Some(file) => command.env("OPTIO_ETCD_PASSWORD_FILE", file),
            None => command.env_remove("OPTIO_ETCD_PASSWORD_FILE"),
        };
        command.output().expect("optio runs")
    };
    let edit = ["map", "set-state", "0", "--down", "--map", &url];
    let edited = run(&edit, Some(&password_file));
    assert!(edited.status.success(), "{}", String::from_utf8_lossy(&edited.stderr));
    assert!(String::from_utf8_lossy(&edited.stdout).contains("epoch 2"), "the map is edited");

    let missing = run(&edit, None);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("needs a password") && stderr.contains("OPTIO_ETCD_PASSWORD"),
        "{stderr}"
    );

    let anonymous = run(&["map", "set-state", "0", "--up", "--map", &etcd.url()], None);
    let stderr = String::from_utf8_lossy(&anonymous.stderr);
    assert_eq!(anonymous.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("authentication enabled"), "{stderr}");

    // A server given the wrong password stops at start-up and says why.
    let data = dir.path().join("dev0");
    let device = format!("0:1GiB:{}", data.display());
    let server =
        run(&["server", "--no-auth", "--map", &url, "--device", &device], Some(&wrong_file));
    let stderr = String::from_utf8_lossy(&server.stderr);
    assert!(!server.status.success(), "the server must not start: {stderr}");
    assert!(stderr.contains("refused the credentials of the etcd user `optio`"), "{stderr}");
    assert!(!stderr.contains("Wr0ngSecret"), "the password is never echoed: {stderr}");
}
