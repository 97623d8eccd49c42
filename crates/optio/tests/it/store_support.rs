//! Helpers of the store's tests: `optio server` processes on ephemeral loopback ports started
//! by `optio_local::cluster` (as `optio up` does), real files, clients from `optio_client`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use optio_client::{Client, ClientConfig};
use optio_local::cluster::{LocalCluster, LocalClusterSpec};

/// The `optio` binary the tests run: this build's, or `OPTIO_TEST_BINARY` (to show that a
/// test fails against an older build: `OPTIO_TEST_BINARY=../old/target/debug/optio`).
pub fn binary() -> PathBuf {
    if let Ok(path) = std::env::var("OPTIO_TEST_BINARY") {
        return PathBuf::from(path);
    }
    PathBuf::from(env!("CARGO_BIN_EXE_optio"))
}

/// A cluster in a temporary directory (kept alive by the returned guard).
pub fn cluster(spec: LocalClusterSpec) -> (tempfile::TempDir, LocalCluster) {
    let mut dir = tempfile::tempdir().expect("temp dir");
    // OPTIO_TEST_KEEP=1 keeps the cluster's directory (its servers' logs) for a post-mortem.
    if std::env::var_os("OPTIO_TEST_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("keeping the cluster directory {}", dir.path().display());
    }
    let cluster = LocalCluster::start(&binary(), dir.path(), &spec).expect("the cluster starts");
    (dir, cluster)
}

/// A small cluster: 3 zones × 1 host, one device each.
pub fn small() -> LocalClusterSpec {
    LocalClusterSpec {
        hosts_per_zone: 1,
        capacity_bytes: 1 << 30,
        pg_num: 32,
        ..LocalClusterSpec::default()
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    // Every HTTP client (the tests' own too) needs a TLS crypto provider.
    optio_tls::install_crypto_provider();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

pub async fn client(cluster: &LocalCluster, policy: Option<&str>) -> Client {
    let dirty_spec = optio_cluster::dir::cluster_dirty_spec(cluster.dir()).expect("dirty spec");
    let dirty = optio_cluster::dirty::DirtyTable::open(dirty_spec.as_deref(), cluster.dir())
        .await
        .expect("the dirty table opens");
    let config = ClientConfig {
        policy: policy.map(str::to_string),
        intent_dir: Some(cluster.dir().join("intents")),
        dirty: Some(std::sync::Arc::new(dirty)),
        ..ClientConfig::default()
    };
    Client::connect_source(cluster.source().clone(), config).await.expect("the client connects")
}

/// Every server's `/v1/status`, or `None` for one that does not answer.
pub async fn statuses(cluster: &LocalCluster) -> Vec<Option<optio_server::ServerStatus>> {
    let http =
        reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("an HTTP client");
    let mut out = Vec::new();
    for server in cluster.servers() {
        let answer = http.get(format!("http://{}/v1/status", server.addr)).send().await;
        out.push(match answer {
            Ok(response) => response.json().await.ok(),
            Err(_) => None,
        });
    }
    out
}

/// Waits (at most `bound`) until every server reports its rebalancing done for the map's
/// epoch; panics otherwise.
pub async fn wait_settled(cluster: &LocalCluster, bound: Duration) {
    let deadline = Instant::now() + bound;
    loop {
        let epoch = cluster.load_map().expect("the map loads").epoch().0;
        let all = statuses(cluster).await;
        // Progress never exceeds its plan, retry rounds included (`optio status` shows them).
        for m in all.iter().flatten().map(|s| &s.migration) {
            assert!(
                m.copies_done <= m.copies_planned && m.bytes_moved <= m.bytes_planned,
                "progress above its plan: {m:?}"
            );
        }
        if all.iter().all(|s| s.as_ref().is_some_and(|s| s.migration.settled_at(epoch))) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "rebalancing to epoch {epoch} did not finish within {bound:?}: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for `condition` for at most `bound`.
pub fn wait_until(bound: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Data for object `i`.
pub fn data(i: usize, len: usize) -> bytes::Bytes {
    let mut out = Vec::with_capacity(len);
    let mut x = i as u64 ^ 0xa5a5_a5a5;
    while out.len() < len {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        out.push((x >> 56) as u8);
    }
    bytes::Bytes::from(out)
}

/// Which devices hold `key` in `pool`, asked of every device in the map.
pub async fn holders(client: &Client, pool: &str, key: &str) -> Vec<u32> {
    let map = client.map();
    let pool_id = map.pool_by_name(pool).expect("pool").id.0;
    let http = reqwest::Client::new();
    let mut out = Vec::new();
    for device in map.devices() {
        let url = format!(
            "http://{}/v1/dev/{}/objects/{pool_id}/{}",
            device.addr.as_deref().expect("addresses in the map"),
            device.id.0,
            optio_proto::wire::percent_encode(key)
        );
        if http.head(url).send().await.map(|r| r.status() == 200).unwrap_or(false) {
            out.push(device.id.0);
        }
    }
    out.sort_unstable();
    out
}

/// A stored replica: (device, version, PG seed).
pub type Replica = (u32, u64, Option<u64>);

/// Every object of `pool` on every device that is up in the map: key → its replicas.
pub async fn everything(
    client: &Client,
    pool: &str,
) -> std::collections::BTreeMap<String, Vec<Replica>> {
    let map = client.map();
    let pool_id = map.pool_by_name(pool).expect("pool").id.0;
    let http = reqwest::Client::new();
    let mut out: std::collections::BTreeMap<String, Vec<Replica>> = Default::default();
    for device in map.devices().iter().filter(|d| d.up) {
        let url = format!(
            "http://{}/v1/dev/{}/objects/{pool_id}?limit=10000",
            device.addr.as_deref().expect("addresses in the map"),
            device.id.0
        );
        let listing: serde_json::Value =
            http.get(url).send().await.expect("lists").json().await.expect("JSON");
        assert_eq!(listing["truncated"], false);
        for object in listing["objects"].as_array().expect("objects") {
            let key = object["key"].as_str().expect("key").to_string();
            let version = object["version"].as_u64().expect("version");
            let pg = object["pg_seed"].as_u64();
            out.entry(key).or_default().push((device.id.0, version, pg));
        }
    }
    out
}

/// `optio ARGS --cluster DIR`.
pub fn optio_at(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(binary())
        .args(args)
        .arg("--cluster")
        .arg(dir)
        .output()
        .expect("optio runs")
}

/// `optio ARGS --cluster DIR`, which must succeed; its standard output.
pub fn ok_at(dir: &std::path::Path, args: &[&str]) -> String {
    let out = optio_at(dir, args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "optio {args:?}: {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// Whether a tool is here; under `CI=true` its absence fails the test.
pub fn have_tool(tool: &str, package: &str) -> bool {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{tool} is required when CI=true: install Debian's {package}"
        );
        eprintln!("skipping: {tool} not found (install Debian's {package})");
    }
    found
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
