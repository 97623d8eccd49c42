//! Shared helpers: a small map and its variations, a real etcd, raw access to etcd's keys.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use optio_cluster::MapSource;
use optio_local::etcd::{EtcdServer, etcd_available};
use optio_placement::{ClusterMap, Epoch};

/// The generous bound on anything a test waits for (a watch delivery, a reconnection).
pub const WAIT_MAX: Duration = Duration::from_secs(10);

/// `examples/small.toml` at epoch 1.
pub fn small_map() -> ClusterMap {
    let text = include_str!("../../../../examples/small.toml");
    let map = optio_mapfile::parse(text).expect("the example parses");
    at_epoch(&map, 1, "")
}

/// `map` at `epoch`, with device 0's address tagged `tag` (so two editors' maps differ).
pub fn at_epoch(map: &ClusterMap, epoch: u64, tag: &str) -> ClusterMap {
    let mut builder = map.to_builder();
    builder.epoch = Epoch(epoch);
    builder.devices[0].addr = Some(format!("10.0.1.1:6800{tag}"));
    builder.build().expect("a valid map")
}

/// `map` without its devices' state epochs (`up_from`, `down_at`), which the stores record
/// in every map they store: for comparing a map read back with the one written.
pub fn unstamped(map: &ClusterMap) -> ClusterMap {
    let mut builder = map.to_builder();
    for device in &mut builder.devices {
        (device.up_from, device.down_at) = (None, None);
    }
    builder.build().expect("a valid map")
}

/// Device 0's address (where [`at_epoch`] puts its tag).
pub fn addr0(map: &ClusterMap) -> String {
    map.to_builder().devices[0].addr.clone().expect("an address")
}

/// A fresh etcd, or `None` when it is not installed outside CI (the test is skipped).
pub fn etcd() -> Option<EtcdServer> {
    if !etcd_available() {
        return None;
    }
    Some(EtcdServer::start().expect("etcd starts"))
}

/// A file source in a fresh directory (kept alive by the returned guard).
pub fn file_source() -> (tempfile::TempDir, MapSource) {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = MapSource::parse(&dir.path().display().to_string()).expect("a directory");
    (dir, source)
}

/// The raw value of `key` in the etcd at `endpoint` (through the JSON gateway).
pub async fn etcd_get(endpoint: &str, key: &str) -> Option<String> {
    let body = serde_json::json!({ "key": BASE64.encode(key) });
    let answer: serde_json::Value = post(endpoint, "kv/range", &body).await;
    let value = answer["kvs"][0]["value"].as_str()?;
    Some(String::from_utf8(BASE64.decode(value).expect("base64")).expect("UTF-8"))
}

/// Puts `value` at `key` in the etcd at `endpoint`, bypassing Optio (as `etcdctl put` would).
pub async fn etcd_put(endpoint: &str, key: &str, value: &str) {
    let body = serde_json::json!({ "key": BASE64.encode(key), "value": BASE64.encode(value) });
    let _: serde_json::Value = post(endpoint, "kv/put", &body).await;
}

/// Deletes `key` in the etcd at `endpoint`.
pub async fn etcd_delete(endpoint: &str, key: &str) {
    let body = serde_json::json!({ "key": BASE64.encode(key) });
    let _: serde_json::Value = post(endpoint, "kv/deleterange", &body).await;
}

async fn post(endpoint: &str, operation: &str, body: &serde_json::Value) -> serde_json::Value {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client")
        .post(format!("{endpoint}/v3/{operation}"))
        .body(body.to_string())
        .timeout(WAIT_MAX)
        .send()
        .await
        .expect("etcd answers");
    assert!(response.status().is_success(), "{operation}: {}", response.status());
    serde_json::from_slice(&response.bytes().await.expect("a body")).expect("JSON")
}
