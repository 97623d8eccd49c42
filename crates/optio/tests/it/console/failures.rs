//! The console while a storage server fails.

use optio_placement::DeviceId;
use serde_json::{Value, json};

use super::{admin_client, call, epoch, key_of, login, secured, start_console};
use crate::runtime;

/// A storage server killed (SIGKILL) while the console watches the cluster: its device reads
/// as unreachable (no status, no rates) and the health says why, while the others answer; the
/// what-if and the commit of marking it out still work; no object acknowledged before the
/// kill or written after the commit is lost or read back stale; and once restarted, the
/// server is seen again, at the new epoch.
#[test]
fn console_a_server_killed_while_watched_is_shown_and_marked_out_losing_nothing() {
    let (_dir, mut cluster) = secured(2);
    let console = start_console(cluster.dir(), &[]);
    let base = console.base.clone();
    let rt = runtime();
    let client = rt.block_on(admin_client(&cluster));
    let written: Vec<(String, bytes::Bytes)> =
        (0..40).map(|i| (format!("before-{i}"), crate::data(i, 3000 + i * 17))).collect();
    rt.block_on(async {
        for (key, value) in &written {
            client.put("data", key, value.clone()).await.expect("acknowledged");
        }
    });
    let http = reqwest::Client::new();
    let admin = rt.block_on(login(&http, &base, "client.admin", &key_of(&cluster, "client.admin")));
    let get = |path: &str| {
        let (status, _, answer) =
            rt.block_on(call(&http, &base, "GET", path, Some(&admin), false, None));
        assert_eq!(status, 200, "{path}: {answer}");
        answer
    };
    let device = |answer: &Value, id: u64| -> Value {
        answer["devices"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["id"] == json!(id)))
            .unwrap_or_else(|| panic!("device {id} in {answer}"))
            .clone()
    };
    // Every server answers first.
    let devices = get("/api/v1/devices");
    for d in devices["devices"].as_array().expect("devices") {
        assert!(d["unreachable"].is_null() && !d["status"].is_null(), "{d}");
    }
    cluster.kill(2).expect("osd.2's server is killed");
    // The servers' answers are kept for under a second: the next ones see the kill.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let devices = get("/api/v1/devices");
    let osd2 = device(&devices, 2);
    assert!(osd2["unreachable"].is_string(), "osd.2 unreachable: {osd2}");
    assert!(osd2["status"].is_null() && osd2["rates"].is_null(), "{osd2}");
    assert!(osd2["server_rates"].is_null(), "{osd2}");
    for d in devices["devices"].as_array().expect("devices") {
        if d["id"] != json!(2) {
            assert!(d["unreachable"].is_null() && !d["status"].is_null(), "the others: {d}");
        }
    }
    let health = get("/api/v1/health");
    assert_ne!(health["health"]["level"], json!("HEALTH_OK"), "{health}");
    let problems = health["health"]["problems"].to_string();
    assert!(problems.contains("osd.2") || problems.contains("unreachable"), "{health}");
    // The what-if of marking it out, then the commit.
    let before = epoch(&cluster);
    let out = json!({ "kind": "set_state", "device": "osd.2", "in": false });
    let (status, _, judged) = rt.block_on(call(
        &http,
        &base,
        "POST",
        "/api/v1/whatif",
        Some(&admin),
        true,
        Some(json!({ "change": out })),
    ));
    assert_eq!(status, 200, "{judged}");
    assert_eq!(judged["epoch_before"], json!(before), "{judged}");
    let (status, _, stored) = rt.block_on(call(
        &http,
        &base,
        "POST",
        "/api/v1/map/edit",
        Some(&admin),
        true,
        Some(json!({ "expected_epoch": before, "change": out })),
    ));
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["stored"], json!(true), "{stored}");
    assert_eq!(epoch(&cluster), before + 1);
    assert!(!cluster.load_map().expect("map").device(DeviceId(2)).expect("osd.2").is_in);
    // Nothing acknowledged is lost or stale, and writes go on.
    let after: Vec<(String, bytes::Bytes)> =
        (0..10).map(|i| (format!("after-{i}"), crate::data(100 + i, 2000 + i))).collect();
    rt.block_on(async {
        for (key, value) in &after {
            client.put("data", key, value.clone()).await.expect("acknowledged while one is down");
        }
        for (key, value) in written.iter().chain(&after) {
            let got = client.get("data", key).await.unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(&got, value, "{key} reads back what was acknowledged");
        }
    });
    // Restarted, the server is seen again, at the new epoch.
    cluster.restart(2).expect("osd.2's server restarts");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let osd2 = device(&get("/api/v1/devices"), 2);
        if osd2["unreachable"].is_null() && !osd2["status"].is_null() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "osd.2 seen again: {osd2}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let servers = get("/api/v1/servers");
    assert_eq!(servers["epoch"], json!(before + 1), "{servers}");
}
